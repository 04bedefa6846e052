//! `tailtrim model` (not yet implemented).

use std::process::ExitCode;

/// Arguments of `tailtrim model`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `tailtrim model`.
pub fn run(_args: Args) -> Result<ExitCode, String> {
    Err("model is not implemented yet".to_string())
}
