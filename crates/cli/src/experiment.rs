//! `tailtrim experiment` (not yet implemented).

use std::process::ExitCode;

/// Arguments of `tailtrim experiment`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `tailtrim experiment`.
pub fn run(_args: Args) -> Result<ExitCode, String> {
    Err("experiment is not implemented yet".to_string())
}
