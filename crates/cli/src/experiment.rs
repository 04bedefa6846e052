//! `tailtrim experiment NAME`: one command reproduces one of the project's figures. The
//! experiments are the library `tailtrim_lab::experiments`, one module each; this module
//! only dispatches the subcommand to it.
//!
//! ```text
//!   tailtrim experiment minos [flags]
//!        └─ tailtrim_lab::experiments::minos::run(args)
//!              ├─ tailtrim_lab::process::Process::start  (tailtrim serve --dispatch X | memcached)
//!              ├─ tailtrim_bench::preload, run_detailed (interleaved, repeated)
//!              ├─ tailtrim_lab::stats::median over repeats; histograms and metadata kept
//!              └─ experiments/<name>/: results.json, results.md, figures (lab::figures)
//! ```

use std::process::ExitCode;

use tailtrim_lab::experiments::{chisel, minos, tailx, tailx_testbed, tier, warmup};

/// Arguments of `tailtrim experiment`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Reproduce one of the project's experiments (starts servers, runs load, writes a report)"
)]
pub struct Args {
    #[command(subcommand)]
    experiment: Experiment,
}

/// The experiments, one subcommand each.
#[derive(clap::Subcommand, Debug)]
enum Experiment {
    /// Minos figure: small- and large-request p99 vs throughput for the
    /// size-aware, early-binding, stealing and late-binding dispatch policies
    /// and stock memcached, under the `minos` workload.
    Minos(Box<minos::Args>),
    /// Scale-out without a miss storm: cache-aside load with a simulated database through
    /// the proxy while a 4th server joins (cold, fallback, preemptive, both) or one leaves
    /// (cold, drain); extra misses, deepest dip and time to recover against a baseline.
    Warmup(Box<warmup::Args>),
    /// Chisel vs batch over the paper's 360 scenarios in the cluster simulator (SIMULATED),
    /// with the fixed-(B, L) sweep behind the optimality ratio.
    Chisel(Box<chisel::Args>),
    /// TailX vs Rein (SBF, SDS) vs batch at 16 servers in the cluster simulator (SIMULATED):
    /// key-count mix at 1M and 10M requests, 10/20/50 % large values; with --testbed, on the
    /// emulated testbed (real serve and proxy processes) beside the simulator (EMULATED).
    Tailx(Box<tailx::Args>),
    /// Batch vs strict Rein-SBF vs cost-sbf on the emulated testbed with the priorities
    /// enforced by the backends, an A/A gauge and the simulator's order beside it (EMULATED).
    TailxTestbed(Box<tailx_testbed::Args>),
    /// A whole tailtrim tier against the memcached-like one: per-class p50/p99/p99.9, the
    /// miss spike of a join and CPU per request (EMULATED), or beside memcached + nutcracker
    /// on real loopback.
    Tier(Box<tier::Args>),
}

/// Runs `tailtrim experiment`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    match args.experiment {
        Experiment::Minos(minos_args) => minos::run(*minos_args),
        Experiment::Warmup(warmup_args) => warmup::run(*warmup_args),
        Experiment::Chisel(chisel_args) => chisel::run(*chisel_args),
        Experiment::Tailx(tailx_args) => tailx::run(*tailx_args),
        Experiment::TailxTestbed(testbed_args) => tailx_testbed::run_served(*testbed_args),
        Experiment::Tier(tier_args) => tier::run(*tier_args),
    }
}
