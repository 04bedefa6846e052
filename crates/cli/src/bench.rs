//! `tailtrim bench` (not yet implemented).

use std::process::ExitCode;

/// Arguments of `tailtrim bench`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `tailtrim bench`.
pub fn run(_args: Args) -> Result<ExitCode, String> {
    Err("bench is not implemented yet".to_string())
}
