//! tailtrim-bench: an open-loop load generator for memcached-protocol
//! servers, usable as a library (experiment runners call it in-process) and
//! behind `tailtrim bench`.
//!
//! ```text
//!  WorkloadSpec (preset | TOML | flags)
//!     │ pools: key/value size distributions, popularity (uniform | zipf)
//!     │ operations: get / multiget / set mix; arrival: poisson | gpd
//!     ▼
//!  preload ──> every key written once (pipelined, windowed)
//!     ▼
//!  engine::run ──> I/O threads: Schedule (open loop) ─> RequestGenerator
//!     │             ─> wire::compose ─> TCP | UDP ─> wire::parse
//!     │             ─> ClassHistograms (latency from SCHEDULED time)
//!     ▼
//!  RunReport / SweepReport ──> table, JSON, plot (SVG + PNG)
//! ```

pub mod class;
pub mod dist;
pub mod engine;
pub mod plot;
pub mod preload;
pub mod report;
pub mod rng;
pub mod schedule;
pub mod sweep;
pub mod wire;
pub mod workload;

pub use class::{Class, ClassSet};
pub use engine::{run, run_detailed, Progress, RunConfig, RunOutput, Transport};
pub use preload::{preload, PreloadReport};
pub use report::{parse_rates, ClassSummary, RunReport, SecondSample, SweepReport};
pub use sweep::sweep;
pub use workload::{WorkloadOverrides, WorkloadSpec};

/// Errors of the load generator.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Invalid workload or run parameters.
    #[error("configuration: {0}")]
    Config(String),
    /// A socket or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The server sent something that is not a memcached reply.
    #[error("protocol: {0}")]
    Protocol(String),
    /// Drawing a plot failed.
    #[error("plot: {0}")]
    Plot(String),
    /// Reading or writing JSON failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}
