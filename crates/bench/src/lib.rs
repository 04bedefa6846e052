//! tailtrim-bench: an open- or closed-loop load generator for memcached-protocol
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
//!  engine::run ──> I/O threads: Schedule (open loop) or clients (closed
//!     │             loop: next request a think time after the reply) ─> RequestGenerator
//!     │             ─> wire::compose ─> TCP | UDP ─> wire::parse
//!     │             ─> ClassHistograms (latency from SCHEDULED time)
//!     ▼
//!  RunReport / SweepReport ──> table, JSON (figures: tailtrim_lab::figures)
//!
//!  trace::Trace (seeded zipf keys, ETC sizes) ──> replay::replay_trace (one connection,
//!     cache-aside: get, on a miss set) ──> ReplayReport (miss ratio; `tailtrim-trace-replay`)
//! ```
//!
//! In-process use (what the experiment runners do):
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use tailtrim_bench::{preload, run, Class, RunConfig, WorkloadOverrides, WorkloadSpec};
//!
//! # fn main() -> Result<(), tailtrim_bench::BenchError> {
//! let mut spec = WorkloadSpec::preset("minos")?;
//! spec.apply(&WorkloadOverrides { large_share: Some(0.01), ..Default::default() })?;
//! let workload = Arc::new(spec);
//! preload(&workload, "127.0.0.1:11211", 4, &mut |_keys_written| {})?;
//! let mut config = RunConfig::new("127.0.0.1:11211", 20_000.0, Duration::from_secs(10));
//! config.warmup = Duration::from_secs(1);
//! let report = run(&workload, &config, &mut |_progress| {})?;
//! println!("small p99 {} µs, achieved {} rps", report.class(Class::Small).p99_us, report.achieved_rps);
//! # Ok(())
//! # }
//! ```
//!
//! With several I/O threads each runs an independent schedule at
//! `rate / threads` (their superposition is exactly Poisson for Poisson
//! arrivals, and approximately the ETC process for GPD arrivals).

pub mod cacheaside;
pub mod class;
pub mod dist;
pub mod engine;
pub mod floor;
pub mod from_args;
pub mod op;
pub mod preload;
pub mod replay;
pub mod report;
pub mod rng;
pub mod schedule;
pub mod sweep;
pub mod trace;
pub mod wire;
pub mod workload;

pub use cacheaside::{run_cache_aside, CacheAsideConfig, CacheAsideReport, ScheduledEvent};
pub use class::{Class, ClassSet};
pub use engine::{run, run_detailed, ClosedLoop, Progress, RunConfig, RunOutput, Transport};
pub use floor::NullServer;
pub use preload::{preload, PreloadReport};
pub use report::{median, parse_rates, ClassSummary, RunReport, SecondSample, SweepReport};
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
    /// Reading or writing JSON failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}
