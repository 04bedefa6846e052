//! The settings of one simulated run ([`RunConfig`]) and their defaults.

use serde::{Deserialize, Serialize};
use tailtrim_policy::sizeaware::SizeAwareConfig;

use crate::cost::CostModel;
use crate::policy::Policy;
use crate::time::Nanos;

/// Default simulated epoch of a single run (the server's default is 1 s; a simulated point
/// often lasts less than that, so sweeps scale the epoch to the run, see
/// `sweep::AUTO_EPOCHS_PER_RUN`).
pub const DEFAULT_EPOCH: Nanos = Nanos::from_millis(50);
/// Default share of the trace (its first requests) left out of the statistics.
pub const DEFAULT_WARMUP_FRACTION: f64 = 0.1;
/// How early binding gets a request to the core that owns its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Steering {
    /// The NIC steers by key hash (MICA): the owning core receives the request itself.
    #[default]
    Nic,
    /// The connection's home core reads and parses (the parse share of the fixed cost), then
    /// hands the request to the owning core (`handoff_ns` when that is another core), which
    /// does the rest — what tailtrim's server does (a job queue and an eventfd per worker).
    /// Each core runs the server worker's loop: every job in its queue first, then one read
    /// batch (up to [`EVENTS_PER_WAIT`](crate::strategies::early_binding::EVENTS_PER_WAIT) readable connections, each read once); a request the
    /// reader owns runs at once when nothing else of its connection is in flight.
    Software,
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The policy.
    pub policy: Policy,
    /// Cores of the simulated server (late binding: one of them is the dispatcher).
    pub cores: usize,
    /// Offered load, requests per second.
    pub rate: f64,
    /// Share of the first requests not measured.
    pub warmup_fraction: f64,
    /// Size-aware controller epoch.
    pub epoch: Nanos,
    /// Size-aware controller settings (`workers` is replaced by the core count).
    pub sizeaware: SizeAwareConfig,
    /// Early binding's steering.
    pub steering: Steering,
    /// Late binding: a connection's next request is released to a core only when its
    /// previous one completed (the real server's per-connection execution queue, which
    /// serializes late binding because any idle worker may take the next request). Early
    /// binding is not affected: the server runs a connection's single-key requests side by
    /// side on their keys' workers. Off: requests of a connection may run on several cores
    /// at once; replies are still delivered in order.
    pub serialize_connections: bool,
    /// Hand-off, steal and dispatch costs (per-request work is in the trace).
    pub cost: CostModel,
    /// Keep a [`RequestRecord`](crate::engine::RequestRecord) per request (tests, debugging).
    pub record_requests: bool,
}

impl RunConfig {
    /// Defaults for `policy` on `cores` cores at `rate`.
    pub fn new(policy: Policy, cores: usize, rate: f64, cost: CostModel) -> RunConfig {
        RunConfig {
            policy,
            cores,
            rate,
            warmup_fraction: DEFAULT_WARMUP_FRACTION,
            epoch: DEFAULT_EPOCH,
            sizeaware: SizeAwareConfig::with_workers(cores),
            steering: Steering::Nic,
            serialize_connections: false,
            cost,
            record_requests: false,
        }
    }
}
