//! `tailtrim model`: analytic latency prediction and capacity planning.
//!
//! ```text
//!   tailtrim model cheng  [flags] [--sweep-lambda a:b:step --plot out.svg] [--json]
//!   tailtrim model chisel [flags] [--merge B --chunk L] [--json]
//!   tailtrim model cliff  [--knee-slope κ --level-delta δ*] [--json]
//!   tailtrim model plan   --slo-p99 US [--from-stats HOST:PORT | --from-bench FILE] [--rate R] [--json]
//!        │ flags → tailtrim_lab::report::model_run::render → tailtrim_model (pure)
//!        │         → table / JSON / SVG
//! ```

use std::io::Write as _;
use std::process::ExitCode;

use tailtrim_lab::report::model_run::{render, ModelCommand};

/// Arguments of `tailtrim model`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Analytic latency prediction: Cheng et al. Theorem 1, the latency cliff, Chisel's split/merge model, capacity planning",
    after_help = "Examples:\n  tailtrim model cheng                      # the paper's validation point (Table 3)\n  tailtrim model cheng --lambda 70000 --xi 0.3 --json\n  tailtrim model cheng --sweep-lambda 10000:75000:2500 --sweep-xi 0,0.6,0.8 --plot sweep.svg\n  tailtrim model cliff                      # Table 4 next to ours\n  tailtrim model chisel --interarrival-us 120 --overhead-us 60\n  tailtrim model plan --from-stats 127.0.0.1:11211 --slo-p99 2000 --rate 50000"
)]
pub struct Args {
    #[command(subcommand)]
    command: ModelCommand,
}

/// Runs `tailtrim model`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    let output = render(&args.command)?;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(output.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // `tailtrim model … | head` is not an error.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(error) => Err(format!("writing output: {error}")),
    }
}
