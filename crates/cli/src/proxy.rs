//! `tailtrim proxy` (not yet implemented).

use std::process::ExitCode;

/// Arguments of `tailtrim proxy`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `tailtrim proxy`.
pub fn run(_args: Args) -> Result<ExitCode, String> {
    Err("proxy is not implemented yet".to_string())
}
