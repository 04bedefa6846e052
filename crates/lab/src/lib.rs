//! The experiment harness every `tailtrim experiment` runs on.
//!
//! ```text
//!   experiment (cli parses flags, prints)            lab
//!   ─────────────────────────────────────    ───────────────────────────────────────────
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
//!   results.json ──────────────────────────> results::write_json / read_json
//!   figures (also `--replot`) ─────────────> plot::plot_latency_vs_throughput
//!   noise floor ───────────────────────────> floor::NullServer (the bench's own)
//! ```
//!
//! The harness holds no experiment's decisions: each experiment decides what to run and how
//! to summarise it; the harness runs processes, keeps records and draws.

pub mod histogram;
pub mod meta;
pub mod process;
/// Reports of the bench, the simulator and the analytic models: results, markdown, figures.
pub mod report {
    pub mod bench;
    pub mod model;
    pub mod sim;
}
pub mod results;
pub mod stats;

/// Figures: the one latency-versus-throughput routine (the bench's, which its sweeps use
/// too).
pub mod plot {
    pub use tailtrim_bench::plot::{plot_latency_vs_throughput, Curve, LatencyThroughput};
}

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
}

impl LabError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
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
