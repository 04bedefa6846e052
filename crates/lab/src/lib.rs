//! The experiments and the harness they run on: every `tailtrim experiment` is a module of
//! this crate, and the harness owns processes, metadata, histograms, results files, figures
//! and tables. The `tailtrim` binary parses flags, calls one function per subcommand and
//! prints.
//!
//! ```text
//!   experiments::{minos, warmup, chisel, chisel_testbed, tailx, tailx_testbed, tier}
//!     what to run, how to read it ──> experiment::Experiment (run with a progress
//!                                      callback, refresh, check, render, summarise)
//!                                      experiment::keep_run / experiment::replot,
//!                                      experiment::run_each (scenarios on threads)
//!     the command ─────────────────> experiments::common::command + Terminal
//!                                      (progress bar, lines, the printed summary)
//!   ──────────────────────────────────────────────────────────────────────────────────
//!   start systems ─────────────────────────> process::Process::start(Launch)
//!                                             tailtrim serve | memcached | nutcracker |
//!                                             tailtrim proxy: spawn on a free port,
//!                                             ready = accepts and answers `version`,
//!                                             SIGTERM (then SIGKILL) on drop
//!   metadata ──────────────────────────────> meta::Recorder::start ... finish
//!                                             commit + dirty, the binary's build commit,
//!                                             CPU model, cores, kernel,
//!                                             load average (start, end, highest seen),
//!                                             steal %, exact command, wall time
//!   for round: for system in rotation ─────> stats::interleaved_order(systems, round)
//!       bench run ──> tailtrim_bench::RunOutput
//!       keep its histograms ───────────────> histogram::Encoded (HDR V2, base64)
//!   point = median over repeats ───────────> stats::median (mean of the middle two)
//!   quoted ratio + interval ───────────────> bootstrap::quantile_ratio, peak_median_ratio
//!                                             (repeats, then requests, resampled; seeded)
//!   results.json ──────────────────────────> results::write_json / read_json
//!   tables (results.md) ───────────────────> tables::Table (markdown)
//!   figures (also `--replot`) ─────────────> figures: line charts (latency vs throughput,
//!                                             panels, the bench's reports), bars,
//!                                             one colour map and latency class
//!   noise floor ───────────────────────────> floor::NullServer (the bench's own)
//! ```
//!
//! Dependencies run one way: the experiments use the harness, the simulator, the bench and
//! the server's CPU-affinity helpers; the harness uses none of the experiments. The bench
//! produces data only; drawing it is `figures`.

pub mod bootstrap;
pub mod experiment;
pub mod experiments;
pub mod figures;
pub mod histogram;
pub mod meta;
pub mod process;
/// Reports of the bench, the simulator and the analytic models: results, markdown, figures.
pub mod report {
    pub mod bench;
    pub mod model;
    pub mod model_plan;
    pub mod model_run;
    pub mod sim;
    pub mod sim_cluster;
    pub mod sim_run;
}
pub mod results;
pub mod stats;
pub mod tables;

/// The noise-floor server every experiment measures beside real systems: the bench's own.
pub mod floor {
    pub use tailtrim_bench::floor::NullServer;
}

/// Errors of the harness.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// An I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A child process did not start, died, or did not become ready.
    #[error("{0}")]
    Process(String),
    /// A serialized histogram could not be encoded or decoded.
    #[error("histogram: {0}")]
    Histogram(String),
    /// A results file could not be written or read.
    #[error("{0}")]
    Results(String),
    /// Drawing a figure failed.
    #[error("plot: {0}")]
    Plot(String),
}

impl LabError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<LabError> for String {
    fn from(error: LabError) -> Self {
        error.to_string()
    }
}
