//! `tailtrim serve` (not yet implemented).

use std::process::ExitCode;

/// Arguments of `tailtrim serve`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `tailtrim serve`.
pub fn run(_args: Args) -> Result<ExitCode, String> {
    Err("serve is not implemented yet".to_string())
}
