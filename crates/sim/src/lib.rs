//! tailtrim-sim: a seeded discrete-event simulator of the cache server's dispatch policies.
//!
//! It replays the load generator's workload (`tailtrim_bench::workload`) against a modelled
//! server of any core count, and makes every dispatch decision with the `policy` crate's code,
//! the same the server runs ([`decide`]): the size-aware epoch driver
//! ([`EpochDriver`](tailtrim_policy::sizeaware::EpochDriver), fed with
//! [`SizeHistogram`](tailtrim_policy::sizeaware::SizeHistogram)s every simulated epoch) and
//! its `PackedDecision`, `dispatch::place` (key → worker), `dispatch::steal_victim`, the shared
//! queues' takers. Only service times are modelled ([`cost`]).
//!
//! ```text
//!  WorkloadSpec (bench) ──► workload::Trace::generate(seed)      ┌──────── cost::Profile
//!        ops, keys, sizes, connections, work per request  ◄──────┘ (measured, embedded)
//!                 │
//!                 ▼  per (policy, rate): engine::run
//!   ┌──────────────────────────── event loop: EventQueue<(time, seq)> ─────────────────────┐
//!   │ Arrival ─► route ─► queue(s) ─► idle core starts job ─► Done ─► next job / hand-off  │
//!   │   (per policy a strategy, strategies/*.rs: arrive, next_job, its own queues)         │
//!   │   size-aware:   shared small queue ─► small core ─► large? ─► large queue ─► large   │
//!   │                 core (the first idle large core takes it)                            │
//!   │   early:        key hash ─► core queue        stealing: home core, idle cores steal  │
//!   │                 (decisions: decide.rs, each a call into tailtrim_policy)             │
//!   │   late:         dispatcher core ─► central queue ─► idle worker                      │
//!   │   pinned:       connection ─► core queue                                             │
//!   │ Epoch (size-aware) ─► merge histograms ─► EpochDriver::tick ─► threshold, split      │
//!   │ finished ─► per-connection sequencer ─► delivered ─► HDR histograms (small / large)  │
//!   └──────────────────────────────────────────────────────────────────────────────────────┘
//!                 │
//!                 ▼
//!   sweep::run_sweep ─► curves per policy ─► summary (knee, ratio, saturation)
//! ```
//!
//! Modules depend one way (no import cycle, `scripts/check-cycles.py`): `engine` →
//! `strategies::*` → `strategies::host` → `settings`, `decide`, `workload`; the engine is the
//! only place that names every policy (its factory in [`engine::run`]).
//!
//! Pure: no I/O, no clock, no threads. Time is [`Nanos`]; events are ordered by
//! `(time, seq)`; every random stream is forked from the seed in the configuration, so the
//! same configuration always gives the same numbers. See `docs/sim.md` for the model and
//! what it leaves out.

pub mod chisel;
pub mod cluster;
pub mod cluster_workers;
pub mod cost;
pub mod decide;
pub mod engine;
pub mod events;
pub mod options;
pub mod policy;
pub mod settings;
pub mod stats;
pub mod strategies;
pub mod sweep;
pub mod tailx;
pub mod time;
pub mod workload;

pub use cluster::{
    run_cluster, run_cluster_with, run_cluster_with_options, sweep_cluster, AnalysisReport,
    ArrivalProcess, ClusterResult, ClusterRunOptions, ClusterScenario, ClusterWorkload, LargeKeys,
    OnlineAnalysis, SmallTail, TimeSplit,
};
pub use cost::{CostModel, Profile, ProfileSample};
pub use engine::{run, RequestRecord, RunConfig, RunResult};
pub use policy::Policy;
pub use stats::{LatencyHistograms, LatencySummary};
pub use sweep::{run_sweep, Curve, Summary, SweepConfig, SweepResult};
pub use time::Nanos;
pub use workload::{ServiceModel, Trace, TraceRequest};

/// Why a simulation could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// An inconsistent or out-of-range setting.
    #[error("invalid simulation setting: {0}")]
    Config(String),
    /// A user's setting (`options::SweepOptions`) that does not parse or is out of range.
    #[error("{0}")]
    Option(String),
}
