//! The cluster simulator: N cache servers, client/proxy threads and a network stage, with the
//! `policy` crate's multiget planners making every fetch decision.
//!
//! ```text
//!  ClusterScenario{servers, replicas, workload, rate, service/network/client CostSpecs, seed}
//!        │
//!        ▼  Arrival (Poisson or uniform gaps) ─► keys (popularity), value size per key (fixed)
//!  ┌─ client thread (request % threads): client_send cost ─────────────────────────────┐
//!  │   Planner::plan(&PlanRequest{keys, now}, &View) ─► [Fetch{backend, keys, not_before,│
//!  │        ▲ replicas(key) from the ketama ring         priority}, Unavailable{keys}]  │
//!  │        └ load(backend): outstanding fetches, EWMA of fetch latency                 │
//!  └───────────────────────────────────────────────────────────────────────────────────┘
//!        │ due at max(now, not_before) ─► query: a mouse (merge_limit B > 1) joins its
//!        │ backend's open query (< B fetches, still in setup), else a new query takes a slot
//!        │ (≤ query_threads, FIFO) ─► query_setup ─► sealed ─► network (request bytes) ─►
//!        ▼
//!  server s: `workers_per_server` workers, one queue ordered by (priority, arrival);
//!            or size-aware (`size_aware`, `cluster_workers`): large opsets to a large queue
//!            served by a measured share of the workers, small ones never behind them;
//!            service = service.sample(query keys, reply bytes)
//!        │ network (reply bytes) ─► slot freed ─► Planner::observe(Observation) ─►
//!        ▼ each member fetch ─► client thread: client_recv cost
//!  every epoch (online_analysis): chisel_online::Analyzer ─► decide ─► Planner::set_shape
//!  last fetch of the request in ─► latency = done − arrival ─► HDR histograms (overall, by
//!                                   key count, small/large by the largest value)
//!  ClusterRunOptions (run_cluster_with_options): the small requests' slowest opset split into
//!  its wait behind opsets holding a large value (each server's large-work clock), its other
//!  wait, its service (SmallTail); every key's size told to the planner before it plans
//! ```
//!
//! Deterministic: events pop by `(time, seq)`, every random stream is a fork of the scenario's
//! seed, planners see simulated time only. Costs come from [`CostSpec`], the same model the
//! server's emulation sleeps for, so a testbed run and a simulated run share their model.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tailtrim_bench::dist::{Distribution, Zipf};
use tailtrim_bench::rng::{hash_unit, Rng};
use tailtrim_bench::workload::Popularity;
use tailtrim_model::chisel_online::{Analyzer, AnalyzerConfig, EpochLoad};
use tailtrim_model::Seconds;
use tailtrim_policy::costspec::{CostSpec, Units};
use tailtrim_policy::health::{BackendLoad, Ewma, Timestamp};
use tailtrim_policy::planner::{
    Action, ClusterView, Observation, PlanRequest, Planner, PlannerKind, QueryShape, RequestDone,
};
use tailtrim_policy::ring::{Ring, RingOptions, RingServer};
use tailtrim_policy::serverq::Discipline;

pub use crate::cluster_workers::{SizeAwareReport, SizeAwareServers};
use crate::cluster_workers::{SizeAwareServer, Waiting, NO_PRIORITY};
use crate::events::EventQueue;
use crate::stats::{LatencyRecorder, LatencySummary};
use crate::time::Nanos;
use crate::SimError;

/// Bytes of every simulated key (`key:` and a 10-digit id).
pub const KEY_LEN: usize = 14;
/// Reply bytes per returned key besides its value (`VALUE <key> 0 <len>\r\n` … `\r\n`).
pub const REPLY_OVERHEAD_PER_KEY: u64 = KEY_LEN as u64 + 20;
/// A value above this many bytes makes its request "large" (the bench's class boundary).
pub const DEFAULT_LARGE_VALUE_BYTES: u64 = 1499;
/// Requests whose latency is not measured, as a share of the run.
pub const DEFAULT_WARMUP_FRACTION: f64 = 0.1;

/// Inter-arrival process of the open-loop client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalProcess {
    /// Exponential gaps.
    #[default]
    Poisson,
    /// Equal gaps of `1 / rate`.
    Uniform,
}

/// How a server orders fetches that carry a priority (fetches without one are FIFO and go
/// first: a planner either sets priorities on all its fetches or on none). The order itself is
/// `tailtrim_policy::serverq`, the code the server and the proxy's gate run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ServerQueue {
    /// The planner's own discipline (`Planner::discipline`: strict for Rein, deficit round
    /// robin for `rein-drr`, strict with ageing for `cost-sbf`).
    #[default]
    Planner,
    /// Deficit round robin over the priority classes (`tailtrim_policy::drr`, Rein's
    /// weights; priorities above the last class go to the last), one unit per fetch.
    Drr,
    /// Strict priority (lower value first), FIFO inside a priority.
    Strict,
}

impl ServerQueue {
    /// The discipline servers use with `planner`.
    pub fn discipline(self, planner: &dyn Planner) -> Discipline {
        match self {
            ServerQueue::Planner => planner.discipline(),
            ServerQueue::Drr => Discipline::Drr,
            ServerQueue::Strict => Discipline::Strict,
        }
    }
}

/// A closed-loop client (YCSB's model): `clients` clients, each sending its next request
/// when the reply to its previous one is in, after a think time; the offered rate follows the
/// latency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClosedLoop {
    /// Clients, each with one request outstanding.
    pub clients: usize,
    /// Mean think time between a reply and the next request, µs (exponential; 0: none).
    pub think_us: f64,
}

/// What the clients ask for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterWorkload {
    /// Number of distinct keys.
    pub keyspace: u64,
    /// Key popularity (Zipf rank 1 = key 0).
    pub popularity: Popularity,
    /// Keys per request (rounded, at least 1). Duplicates are possible, as in a real multiget.
    pub keys_per_request: Distribution,
    /// Value bytes of each key (drawn once per key from the seed, so a key keeps its size).
    pub value_bytes: Distribution,
    /// A request with a value above this many bytes is in the `large` class.
    pub large_value_bytes: u64,
    /// A separate set of keys with large values, drawn into a share of the requests.
    #[serde(default)]
    pub large_keys: Option<LargeKeys>,
}

/// Keys with large values (TailX's experiments: 20 % of the requests carry 10–50 % large
/// values). Their ids follow the main keyspace; their popularity is the workload's, over
/// their own set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LargeKeys {
    /// Distinct large keys.
    pub keyspace: u64,
    /// Value bytes of every large key.
    pub value_bytes: u64,
    /// Share of requests that carry large keys.
    pub request_share: f64,
    /// Share of such a request's keys (rounded) drawn from the large keys.
    pub key_share: f64,
}

impl Default for ClusterWorkload {
    fn default() -> Self {
        ClusterWorkload {
            keyspace: 100_000,
            popularity: Popularity::Uniform,
            keys_per_request: Distribution::Fixed { value: 1.0 },
            value_bytes: Distribution::Fixed { value: 100.0 },
            large_value_bytes: DEFAULT_LARGE_VALUE_BYTES,
            large_keys: None,
        }
    }
}

/// One simulated experiment. Serialized with the cost models as spec text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterScenario {
    /// Cache servers.
    pub servers: usize,
    /// Worker threads per server, sharing the server's queue.
    pub workers_per_server: usize,
    /// Order of prioritized fetches in a server's queue.
    #[serde(default)]
    pub server_queue: ServerQueue,
    /// Copies of each key (owner first on the ketama ring).
    pub replicas: usize,
    /// Client/proxy threads; a request is handled by thread `request % threads`. Their costs
    /// are `client_send` and `client_recv`; with both zero the threads are not modelled.
    pub client_threads: usize,
    /// Planner config name (`PlannerKind::from_name`), used by [`run_cluster`].
    pub planner: String,
    /// The requests.
    pub workload: ClusterWorkload,
    /// Offered requests per second.
    pub rate_rps: f64,
    /// Gap process (open loop).
    pub arrival: ArrivalProcess,
    /// A closed-loop client instead of the open-loop arrivals (`rate_rps` then unused).
    #[serde(default)]
    pub closed_loop: Option<ClosedLoop>,
    /// Requests simulated (the first `warmup_fraction` of them are not measured).
    pub requests: u64,
    /// Share of requests not measured.
    pub warmup_fraction: f64,
    /// Server time per fetch (units: keys, reply bytes).
    #[serde(with = "spec_text")]
    pub service: CostSpec,
    /// One-way network time per message (units: keys, message bytes). A pure delay: it holds
    /// no worker.
    #[serde(with = "spec_text")]
    pub network: CostSpec,
    /// Client-thread time to plan and send a request (units: keys, request bytes).
    #[serde(with = "spec_text")]
    pub client_send: CostSpec,
    /// Client-thread time per fetch reply (units: keys, reply bytes).
    #[serde(with = "spec_text")]
    pub client_recv: CostSpec,
    /// Query slots: backend queries in flight at once, over all backends (the client's
    /// `query_threads`; a query holds its slot from setup to reply). 0: unbounded.
    #[serde(default)]
    pub query_threads: usize,
    /// Client time to set up each backend query once it has a slot (the client's
    /// `inject_overhead`, Chisel's `o`; units: keys, request bytes). Mice may join a query
    /// (up to the planner's `merge_limit`) until its setup ends.
    #[serde(default = "zero_spec", with = "spec_text")]
    pub query_setup: CostSpec,
    /// Chisel's online analyzer retuning the planner's `(B, L)` every epoch (the planner must
    /// have a query shape).
    #[serde(default)]
    pub online_analysis: Option<OnlineAnalysis>,
    /// Size-aware workers in every server (Minos inside the server: large opsets served by a
    /// subset of its workers sized from the measured large share of the work); `None`: the
    /// workers share one queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_aware: Option<SizeAwareServers>,
    /// Seed of every random stream.
    pub seed: u64,
}

fn zero_spec() -> CostSpec {
    CostSpec::ZERO
}

/// Settings of the simulated online analyzer (`tailtrim_model::chisel_online`, the code the
/// client and proxy run).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OnlineAnalysis {
    /// Simulated seconds between decisions.
    pub epoch_secs: f64,
    /// The analyzer's settings; `client_threads` and `server_threads` are derived as the
    /// client does (query slots, or 16 when unbounded; servers × workers).
    pub config: AnalyzerConfig,
}

/// `C` the analyzer assumes when query slots are unbounded (the client's default).
pub const DEFAULT_MODEL_CLIENT_THREADS: u32 = 16;

impl Default for ClusterScenario {
    fn default() -> Self {
        ClusterScenario {
            servers: 4,
            workers_per_server: 1,
            server_queue: ServerQueue::Planner,
            replicas: 1,
            client_threads: 1,
            planner: "batch".to_string(),
            workload: ClusterWorkload::default(),
            rate_rps: 10_000.0,
            arrival: ArrivalProcess::Poisson,
            closed_loop: None,
            requests: 100_000,
            warmup_fraction: DEFAULT_WARMUP_FRACTION,
            service: CostSpec::constant(
                20_000.0,
                tailtrim_policy::costspec::Dispersion::Exponential,
            ),
            network: CostSpec::ZERO,
            client_send: CostSpec::ZERO,
            client_recv: CostSpec::ZERO,
            query_threads: 0,
            query_setup: CostSpec::ZERO,
            online_analysis: None,
            size_aware: None,
            seed: 1,
        }
    }
}

impl ClusterScenario {
    /// Checks ranges.
    pub fn validate(&self) -> Result<(), SimError> {
        let fail = |reason: &str| Err(SimError::Config(reason.to_string()));
        if self.servers == 0 || self.servers > 4096 {
            return fail("servers must be 1..=4096");
        }
        if self.workers_per_server == 0 || self.workers_per_server > 1024 {
            return fail("workers per server must be 1..=1024");
        }
        if self.replicas == 0 || self.replicas > self.servers {
            return fail("replicas must be between 1 and the number of servers");
        }
        if self.client_threads == 0 {
            return fail("client threads must be at least 1");
        }
        if !(self.rate_rps.is_finite() && self.rate_rps > 0.0) {
            return fail("rate must be positive");
        }
        if self.requests == 0 {
            return fail("requests must be at least 1");
        }
        if !(0.0..1.0).contains(&self.warmup_fraction) {
            return fail("warm-up fraction must be in [0, 1)");
        }
        if self.workload.keyspace == 0 || self.workload.keyspace >= 10_000_000_000 {
            return fail("keyspace must be 1..10^10");
        }
        if let Some(large) = &self.workload.large_keys {
            if large.keyspace == 0
                || large.keyspace + self.workload.keyspace >= 10_000_000_000
                || !(0.0..=1.0).contains(&large.request_share)
                || !(0.0..=1.0).contains(&large.key_share)
            {
                return fail("large keys: keyspace ≥ 1, shares in [0, 1]");
            }
        }
        if let Some(closed) = &self.closed_loop {
            if closed.clients == 0 || !(closed.think_us.is_finite() && closed.think_us >= 0.0) {
                return fail("closed loop: at least 1 client, think time ≥ 0");
            }
        }
        if let Some(analysis) = &self.online_analysis {
            if !(analysis.epoch_secs.is_finite() && analysis.epoch_secs > 0.0) {
                return fail("the analyzer's epoch must be positive");
            }
        }
        if let Some(size_aware) = &self.size_aware {
            size_aware.validate()?;
        }
        Ok(())
    }
}

/// Cost specs as their text in JSON.
mod spec_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use tailtrim_policy::costspec::CostSpec;

    pub fn serialize<S: Serializer>(spec: &CostSpec, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(spec)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<CostSpec, D::Error> {
        let text = String::deserialize(deserializer)?;
        CostSpec::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Parses a size or count distribution for flags: `N` (fixed), `uniform:A:B`, `exp:MEAN`,
/// `table:V@P/V@P/…` (values with probabilities, normalised).
pub fn parse_distribution(text: &str) -> Result<Distribution, SimError> {
    let fail = || {
        SimError::Config(format!(
            "distribution {text:?}: expected N, uniform:A:B, exp:MEAN or table:V@P/V@P…"
        ))
    };
    let number = |t: &str| -> Result<f64, SimError> {
        t.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(fail)
    };
    if let Some(rest) = text.strip_prefix("uniform:") {
        let (min, max) = rest.split_once(':').ok_or_else(fail)?;
        let (min, max) = (number(min)?, number(max)?);
        if min > max {
            return Err(fail());
        }
        return Ok(Distribution::Uniform { min, max });
    }
    if let Some(mean) = text.strip_prefix("exp:") {
        return Ok(Distribution::Exponential {
            mean: number(mean)?,
        });
    }
    if let Some(rest) = text.strip_prefix("table:") {
        let mut entries = Vec::new();
        for entry in rest.split('/') {
            let (value, weight) = entry.split_once('@').ok_or_else(fail)?;
            entries.push((number(value)?, number(weight)?));
        }
        let total: f64 = entries.iter().map(|(_, w)| w).sum();
        if entries.is_empty() || total <= 0.0 {
            return Err(fail());
        }
        entries.sort_by(|a, b| a.0.total_cmp(&b.0));
        for entry in &mut entries {
            entry.1 /= total;
        }
        return Ok(Distribution::Table {
            entries,
            tail: None,
        });
    }
    Ok(Distribution::Fixed {
        value: number(text)?,
    })
}

/// Latency of one class of requests.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClassResult {
    /// Percentiles in microseconds.
    pub summary: LatencySummary,
    /// The full histogram (nanoseconds), for any other percentile or for serialization.
    #[serde(skip)]
    pub histogram: Option<Histogram<u64>>,
}

/// What one run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterResult {
    /// Planner that made the decisions.
    pub planner: String,
    /// Offered rate.
    pub offered_rps: f64,
    /// Measured requests / (last delivery − first measured arrival).
    pub achieved_rps: f64,
    /// Requests simulated.
    pub requests: u64,
    /// Requests measured (after warm-up).
    pub measured: u64,
    /// Every request.
    pub overall: ClassResult,
    /// Requests whose largest value is at most `large_value_bytes`.
    pub small: ClassResult,
    /// Requests with a larger value.
    pub large: ClassResult,
    /// By number of keys in the request.
    pub by_keys: BTreeMap<u32, ClassResult>,
    /// By the lowest priority class (the largest value) among the request's fetches; requests
    /// whose fetches carried no priority are not in it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_class: BTreeMap<u8, ClassResult>,
    /// Fetches planned.
    pub fetches: u64,
    /// Backend queries sent (fewer than fetches when mice merge).
    #[serde(default)]
    pub queries: u64,
    /// Fetches that joined another fetch's query.
    #[serde(default)]
    pub merged_fetches: u64,
    /// Key lookups served by servers (conservation: equals the keys requested minus
    /// unavailable ones).
    pub keys_served: u64,
    /// Keys requested.
    pub keys_requested: u64,
    /// Keys no replica could serve.
    pub keys_unavailable: u64,
    /// Busy time / run time per server (all its workers together, so up to `workers`).
    pub server_utilization: Vec<f64>,
    /// Busy time / run time per client thread.
    pub client_utilization: Vec<f64>,
    /// Simulated end time.
    pub duration_secs: f64,
    /// What the online analyzer did, when it ran.
    #[serde(default)]
    pub analysis: Option<AnalysisReport>,
    /// A choosing planner's (`auto`'s) gauges at the end of the run: its choice, switches,
    /// fallbacks (absent for the other planners).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner_gauges: Option<BTreeMap<String, f64>>,
    /// Where the time of the requests without a large value goes
    /// ([`ClusterRunOptions::small_tail_decomposition`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub small_tail: Option<SmallTail>,
    /// What the size-aware servers did ([`ClusterScenario::size_aware`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_aware: Option<SizeAwareReport>,
}

/// Mean times of a set of requests without a large value, split along their slowest opset
/// (the last to complete), µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeSplit {
    /// Requests in the set.
    pub requests: u64,
    /// Request latency.
    pub latency_us: f64,
    /// The slowest opset's wait in its server's queue while workers served opsets holding a
    /// large value (the wait × the share of the server's workers busy with them).
    pub wait_behind_large_us: f64,
    /// The rest of its wait: workers busy with opsets without a large value.
    pub wait_behind_small_us: f64,
    /// Its own service time.
    pub service_us: f64,
    /// Everything else: network, client, a delay before sending.
    pub other_us: f64,
}

/// The decomposition of the requests without a large value ([`ClusterResult::small_tail`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SmallTail {
    /// Their p99, µs (the threshold of `tail`).
    pub p99_us: f64,
    /// The requests at or above the p99.
    pub tail: TimeSplit,
    /// Every such request.
    pub all: TimeSplit,
    /// Opsets per request.
    pub opsets_per_request: f64,
    /// An opset's time at its server (arrival to served), over every opset of these
    /// requests: median, p99 and p99.9, µs. A request waits for the slowest of its opsets, so
    /// its p99 sits near a high quantile of its opsets'.
    pub opset_p50_us: f64,
    /// See `opset_p50_us`.
    pub opset_p99_us: f64,
    /// See `opset_p50_us`.
    pub opset_p999_us: f64,
    /// Share of the server work spent on opsets holding a large value.
    pub large_opset_work_share: f64,
}

/// The online analyzer's decisions over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AnalysisReport {
    /// Epochs run.
    pub epochs: u64,
    /// Epochs that fell back to batching (poor fit, too few samples, …).
    pub fallbacks: u64,
    /// Epochs whose best plan was held back by hysteresis.
    pub held: u64,
    /// Epochs during the measured part of the run per `(B, L)` in force after them
    /// (`L` = `u32::MAX`: no split), most used first.
    pub shapes: Vec<ShapeEpochs>,
    /// `(B, L)` at the end of the run.
    pub last: (u32, u32),
}

/// Epochs spent at one `(B, L)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapeEpochs {
    /// `B`.
    pub merge_level: u32,
    /// `L`.
    pub chunk_size: u32,
    /// Epochs.
    pub epochs: u64,
}

/// Runs `scenario` with the planner it names.
pub fn run_cluster(scenario: &ClusterScenario) -> Result<ClusterResult, SimError> {
    let kind =
        PlannerKind::from_name(&scenario.planner).map_err(|e| SimError::Config(e.to_string()))?;
    run_cluster_with(scenario, kind.build())
}

/// Runs `scenario` with a planner instance (for planners with parameters of their own).
pub fn run_cluster_with(
    scenario: &ClusterScenario,
    planner: Box<dyn Planner>,
) -> Result<ClusterResult, SimError> {
    run_cluster_with_options(scenario, planner, ClusterRunOptions::default())
}

/// What a run measures or lets the planner know beyond its scenario (all off by default; the
/// work in flight seen as mean service times).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ClusterRunOptions {
    /// Split the latency of the requests without a large value into their slowest opset's
    /// waiting (behind opsets holding a large value, behind others), service and the rest
    /// ([`ClusterResult::small_tail`]).
    pub small_tail_decomposition: bool,
    /// The planner is told every key's value size before it plans (what a server knows of
    /// its own items: [`Planner::observe_value`] for each key of the request), instead of
    /// learning sizes from replies only.
    pub planner_knows_sizes: bool,
    /// What the planner sees of the work in flight at each server
    /// ([`BackendLoad::outstanding_work`]).
    pub work_view: WorkView,
}

/// What the planners see of the work in flight at each server ([`BackendLoad::outstanding_work`]
/// and [`ClusterView::fetch_work`]).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkView {
    /// Each in-flight query's mean service time under the scenario's cost model, nanoseconds:
    /// an oracle of T_S and T_L.
    #[default]
    Service,
    /// Each in-flight query's keys (its work in small keys by the planner's estimate,
    /// `Planner::fetch_work_keys`) plus a fixed cost per query counted in keys: what the
    /// client and the proxy count (`[pool] fetch_cost_keys`).
    Keys {
        /// The fixed cost of one query, in keys.
        fetch_cost_keys: f64,
    },
    /// Nothing: a replica choice that weighs backlogs falls back on outstanding queries and
    /// latency.
    Hidden,
}

/// Runs `scenario` with a planner instance and `options`.
pub fn run_cluster_with_options(
    scenario: &ClusterScenario,
    planner: Box<dyn Planner>,
    options: ClusterRunOptions,
) -> Result<ClusterResult, SimError> {
    scenario.validate()?;
    Sim::new(scenario, planner, options)?.run()
}

/// One run per rate, in order.
pub fn sweep_cluster(
    scenario: &ClusterScenario,
    rates: &[f64],
) -> Result<Vec<ClusterResult>, SimError> {
    rates
        .iter()
        .map(|&rate| {
            run_cluster(&ClusterScenario {
                rate_rps: rate,
                ..scenario.clone()
            })
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Arrival,
    ClientDone(u32),
    /// A delayed fetch (`not_before`) is due.
    Send(u32),
    /// A query's setup is done: it is sealed and sent.
    SetupDone(u32),
    /// A query reaches its server.
    AtServer(u32),
    /// A server worker finished a query.
    Served(u32),
    /// A query's reply reaches the client.
    Reply(u32),
    /// The online analyzer decides.
    Epoch,
    /// The size-aware servers' controllers decide.
    SizeEpoch,
}

#[derive(Debug, Clone, Copy)]
enum ClientJob {
    Plan(u32),
    Reply(u32),
}

struct RequestState {
    arrival: Nanos,
    pending: u32,
    keys: u32,
    large: bool,
    measured: bool,
    /// The lowest priority class among its fetches (`NO_PRIORITY` if none carried one).
    class: u8,
    /// Client thread that owns the request.
    thread: u32,
    /// The times of its fetch that completed last (so far).
    slowest: OpsetTimes,
}

/// Where one fetch's time at its server went, nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
struct OpsetTimes {
    wait: u64,
    wait_behind_large: f64,
    service: u64,
}

fn state_thread(state: &RequestState) -> usize {
    state.thread as usize
}

struct FetchState {
    request: u32,
    backend: u32,
    keys: u32,
    /// Its work in small keys by the planner's estimate ([`Planner::fetch_work_keys`]).
    work_keys: u32,
    /// Reply bytes of this fetch's own keys (with `END\r\n`).
    reply_bytes: u64,
    priority: u8,
    /// `merge_limit` of its request.
    merge_limit: u32,
    /// Key ids, kept only for planners that want each value's size.
    key_ids: Vec<u64>,
    /// One of its values is above the workload's `large_value_bytes`.
    holds_large: bool,
    /// Its query's times at the server, once replied.
    times: OpsetTimes,
}

/// One backend query: a fetch, or mice fetches merged into one `get`.
struct QueryState {
    backend: u32,
    /// Member fetches, the leader first.
    fetches: Vec<u32>,
    keys: u32,
    /// Its member fetches' work in small keys ([`FetchState::work_keys`]).
    work_keys: u32,
    reply_bytes: u64,
    priority: u8,
    limit: u32,
    setup_started: Nanos,
    sent: Nanos,
    /// A member fetch holds a large value.
    holds_large: bool,
    /// Reached its server.
    at_server: Nanos,
    /// The server's large-work clock then ([`ServerState::large_clock`]).
    large_clock_at_arrival: f64,
    times: OpsetTimes,
    /// The worker serving it.
    worker: u32,
    /// Size-aware servers: classified large (served by the large workers).
    large_class: bool,
}

/// The online analyzer and its epoch counters.
struct Analysis {
    analyzer: Analyzer,
    epoch: Nanos,
    elephant_threshold: u32,
    load: EpochLoad,
    setups: u64,
    setup_nanos: u128,
    /// Requests completed in the epoch and the sum of their latencies, seconds.
    completed: u64,
    latency_sum: f64,
    report: AnalysisReport,
    shapes: BTreeMap<(u32, u32), u64>,
    /// Epochs passed since the last analysis (`Planner::analyzer_epochs` of them make one).
    spanned: u32,
}

struct ServerState {
    idle_workers: usize,
    /// Queries waiting for a worker (size-aware: the small ones), in the discipline's order.
    waiting: Waiting,
    /// Size-aware workers: the controller, the large queue, each worker's state.
    size_aware: Option<SizeAwareServer>,
    busy_ns: u128,
    /// Workers serving a query that holds a large value.
    large_busy: usize,
    /// ∫ large_busy / workers dt (ns) up to `large_clock_at`: how long a query that waited
    /// over an interval waited behind large values is the clock's advance over it (while a
    /// query waits, every worker is busy).
    large_clock: f64,
    large_clock_at: Nanos,
}

impl ServerState {
    /// Advances the large-work clock to `now`.
    fn advance_large_clock(&mut self, now: Nanos, workers: usize) {
        let elapsed = now.since(self.large_clock_at).0 as f64;
        self.large_clock += elapsed * self.large_busy as f64 / workers.max(1) as f64;
        self.large_clock_at = now;
    }

    /// The next query worker `worker` serves (`None`: it goes idle).
    fn next_for(&mut self, worker: usize) -> Option<u32> {
        match &mut self.size_aware {
            None => self.waiting.pop(),
            Some(size_aware) => size_aware.next_for(worker, &mut self.waiting),
        }
    }
}

struct ClientThread {
    busy: bool,
    queue: std::collections::VecDeque<ClientJob>,
    busy_ns: u128,
}

struct Keys {
    /// Per key id, `1 + copies` slots: the value length, then the replica list (owner first).
    /// Filled on first use; one cache line serves a key's whole lookup.
    table: Vec<u32>,
    copies: usize,
    ring: Ring,
    value_seed: u64,
    value_bytes: Distribution,
    /// Ids from here on are large keys of `large_bytes` each.
    small_keys: u64,
    large_bytes: u64,
}

impl Keys {
    fn stride(&self) -> usize {
        1 + self.copies
    }

    /// Loads the entries of `ids`, independently of each other, so their cache misses overlap.
    fn touch(&self, ids: &[u64]) {
        let stride = self.stride();
        let seen = ids
            .iter()
            .fold(0u32, |seen, &id| seen | self.table[id as usize * stride]);
        std::hint::black_box(seen);
    }

    /// Fills the key's slots if needed.
    fn prepare(&mut self, id: u64, scratch: &mut Vec<usize>) {
        let start = id as usize * self.stride();
        if self.table[start] != u32::MAX {
            return;
        }
        let mut key = [0u8; KEY_LEN];
        write_key(id, &mut key);
        self.ring.replicas_for(&key, self.copies, scratch);
        for (slot, &server) in self.table[start + 1..start + 1 + self.copies]
            .iter_mut()
            .zip(scratch.iter())
        {
            *slot = server as u32;
        }
        let u = hash_unit(self.value_seed, id, 0, 0);
        self.table[start] = if id >= self.small_keys {
            self.large_bytes.min(u64::from(u32::MAX - 1)) as u32
        } else {
            self.value_bytes.quantile(u).round().clamp(0.0, 1e9) as u32
        };
    }

    /// Value bytes of a prepared key.
    fn value_len(&self, id: u64) -> u64 {
        u64::from(self.table[id as usize * self.stride()])
    }

    /// Replicas of a prepared key.
    fn replicas(&self, id: u64) -> &[u32] {
        let start = id as usize * self.stride() + 1;
        &self.table[start..start + self.copies]
    }
}

/// `len` slots of `u32::MAX`, in memory the kernel is asked to back with huge pages: the key
/// table is hundreds of megabytes read at random, and with 4 KiB pages most of its reads miss
/// the TLB as well as the cache (the advice is only advice: without transparent huge pages it
/// changes nothing).
fn huge_table(len: usize) -> Vec<u32> {
    let mut table: Vec<u32> = Vec::with_capacity(len);
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = table.as_ptr() as usize;
        let end = start + len * std::mem::size_of::<u32>();
        let aligned = start.next_multiple_of(HUGE);
        if end > aligned + HUGE {
            // SAFETY: the range lies inside the vector's own allocation (capacity `len`), and
            // MADV_HUGEPAGE changes how pages are backed, not their contents.
            unsafe {
                libc::madvise(
                    aligned as *mut libc::c_void,
                    (end - aligned) / HUGE * HUGE,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
    }
    table.resize(len, u32::MAX);
    table
}

fn write_key(id: u64, out: &mut [u8; KEY_LEN]) {
    out[..4].copy_from_slice(b"key:");
    let mut rest = id;
    for slot in out[4..].iter_mut().rev() {
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
}

/// The planner's window on the simulated cluster.
struct View<'a> {
    keys: &'a Keys,
    /// Key bytes of the request being planned, `KEY_LEN` apart.
    buffer: &'a [u8],
    ids: &'a [u64],
    outstanding: &'a [u32],
    /// Mean service time of each server's queries in flight, nanoseconds.
    outstanding_work: &'a [u64],
    /// Keys of each server's queries in flight.
    outstanding_keys: &'a [u64],
    /// Each server's demoted queries in flight ([`Demoted`]).
    demoted: &'a [Demoted],
    /// What the planner sees of them.
    work_view: WorkView,
    /// Mean service time of a one-key query without its value bytes, nanoseconds.
    fetch_service: f64,
    ewma: &'a [Ewma],
    servers: usize,
}

impl View<'_> {
    fn id_of(&self, key: &[u8]) -> Option<u64> {
        let base = self.buffer.as_ptr() as usize;
        let at = key.as_ptr() as usize;
        if key.len() != KEY_LEN || at < base || at >= base + self.buffer.len() {
            return None;
        }
        let offset = at - base;
        offset
            .is_multiple_of(KEY_LEN)
            .then(|| self.ids[offset / KEY_LEN])
    }
}

impl ClusterView for View<'_> {
    fn backend_count(&self) -> usize {
        self.servers
    }

    fn replicas(&self, key: &[u8], out: &mut Vec<usize>) {
        // Planners ask with the request's own slices, so the cached list is found by position;
        // any other slice goes through the ring.
        match self.id_of(key) {
            Some(id) => {
                out.clear();
                out.extend(self.keys.replicas(id).iter().map(|&s| s as usize));
            }
            None => self.keys.ring.replicas_for(key, self.keys.copies, out),
        }
    }

    fn load(&self, backend: usize) -> BackendLoad {
        BackendLoad {
            outstanding: self.outstanding[backend],
            outstanding_work: match self.work_view {
                WorkView::Service => Some(self.outstanding_work[backend] as f64),
                WorkView::Keys { fetch_cost_keys } => Some(
                    f64::from(self.outstanding[backend]) * fetch_cost_keys
                        + self.outstanding_keys[backend] as f64,
                ),
                WorkView::Hidden => None,
            },
            demoted_work: self.demoted[backend].seen(self.work_view),
            ewma_nanos: self.ewma[backend].value(),
            available: true,
        }
    }

    fn fetch_work(&self) -> Option<f64> {
        match self.work_view {
            WorkView::Service => Some(self.fetch_service),
            WorkView::Keys { fetch_cost_keys } => Some(fetch_cost_keys + 1.0),
            WorkView::Hidden => None,
        }
    }
}

/// One server's queries in flight of a class below the first (priority above 0): what a
/// first-class query would overtake there ([`BackendLoad::demoted_work`]).
#[derive(Debug, Clone, Copy, Default)]
struct Demoted {
    /// Their mean service time, nanoseconds, of those not in service (not started yet, or
    /// served and their reply on its way): the oracle.
    work_not_in_service: u64,
}

impl Demoted {
    /// What the planner sees of them: the work not in service under the oracle; nothing in the
    /// client's and the proxy's view, which cannot tell which query is in service
    /// ([`BackendLoad::demoted_work`]).
    fn seen(&self, view: WorkView) -> Option<f64> {
        match view {
            WorkView::Service => Some(self.work_not_in_service as f64),
            WorkView::Keys { .. } | WorkView::Hidden => None,
        }
    }
}

/// Whether a query of this priority waits behind the first class (and a first-class query
/// overtakes it).
fn demoted(priority: u8) -> bool {
    priority != 0 && priority != NO_PRIORITY
}

/// A query's mean service time under the scenario's cost model, what the planners see of the
/// work in flight ([`BackendLoad::outstanding_work`]).
fn mean_work(service: &CostSpec, query: &QueryState) -> u64 {
    service.mean_nanos(Units {
        keys: u64::from(query.keys),
        bytes: query.reply_bytes,
    }) as u64
}

struct Recorders {
    overall: LatencyRecorder,
    small: LatencyRecorder,
    large: LatencyRecorder,
    by_keys: BTreeMap<u32, LatencyRecorder>,
    by_class: BTreeMap<u8, LatencyRecorder>,
}

struct Sim<'s> {
    scenario: &'s ClusterScenario,
    planner: Box<dyn Planner>,
    queue: EventQueue<Event>,
    now: Nanos,
    arrivals: Rng,
    workload_rng: Rng,
    service_rng: Rng,
    network_rng: Rng,
    client_rng: Rng,
    zipf: Option<Zipf>,
    large_zipf: Option<Zipf>,
    keys: Keys,
    requests: Vec<RequestState>,
    fetches: Vec<FetchState>,
    free_fetches: Vec<u32>,
    queries: Vec<QueryState>,
    free_queries: Vec<u32>,
    /// Per backend, the query mice may still join.
    open: Vec<Option<u32>>,
    slots_busy: usize,
    slot_wait: VecDeque<u32>,
    query_count: u64,
    merged_fetches: u64,
    analysis: Option<Analysis>,
    servers: Vec<ServerState>,
    clients: Vec<ClientThread>,
    outstanding: Vec<u32>,
    /// Mean service time of each server's queries in flight ([`mean_work`]), nanoseconds.
    outstanding_work: Vec<u64>,
    /// Keys of each server's queries in flight.
    outstanding_keys: Vec<u64>,
    demoted: Vec<Demoted>,
    ewma: Vec<Ewma>,
    client_modelled: bool,
    wants_values: bool,
    generated: u64,
    warmup: u64,
    first_measured: Option<Nanos>,
    last_delivery: Nanos,
    recorders: Recorders,
    key_buffer: Vec<u8>,
    key_ids: Vec<u64>,
    fetch_count: u64,
    /// Arrivals scheduled so far (closed loop: one per completion).
    arrivals_scheduled: u64,
    free_requests: Vec<u32>,
    keys_served: u64,
    keys_requested: u64,
    keys_unavailable: u64,
    completed: u64,
    options: ClusterRunOptions,
    /// Measured requests without a large value: latency and their slowest opset's times
    /// (kept with `small_tail_decomposition`).
    small_requests: Vec<(u64, OpsetTimes)>,
    /// Time at their server of those requests' opsets.
    small_opsets: LatencyRecorder,
    /// Server time spent on queries holding a large value, ns.
    large_work_ns: u128,
}

impl<'s> Sim<'s> {
    fn new(
        scenario: &'s ClusterScenario,
        planner: Box<dyn Planner>,
        options: ClusterRunOptions,
    ) -> Result<Self, SimError> {
        let ring_servers: Vec<RingServer> = (0..scenario.servers)
            .map(|index| RingServer {
                name: format!("10.0.{}.{}:11211", index / 256, index % 256),
                weight: 1,
            })
            .collect();
        let ring = Ring::new(
            &ring_servers,
            RingOptions {
                hash: tailtrim_policy::ring::HashFunction::Md5,
                ..RingOptions::default()
            },
        )
        .map_err(|e| SimError::Config(e.to_string()))?;
        let large = scenario.workload.large_keys.as_ref();
        let keyspace = (scenario.workload.keyspace + large.map_or(0, |l| l.keyspace)) as usize;
        let large_zipf = large.map(|l| match scenario.workload.popularity {
            Popularity::Uniform => Zipf::new(l.keyspace, 0.0),
            Popularity::Zipf { exponent } => Zipf::new(l.keyspace, exponent),
        });
        let wants_values = planner.wants_values();
        let discipline = scenario.server_queue.discipline(planner.as_ref());
        let analysis = match (&scenario.online_analysis, planner.shape()) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(SimError::Config(format!(
                    "the online analyzer needs a planner with a query shape, not {}",
                    planner.name()
                )))
            }
            (Some(settings), Some(shape)) => {
                let mut config = settings.config;
                config.client_threads = match u32::try_from(scenario.query_threads) {
                    Ok(0) | Err(_) => DEFAULT_MODEL_CLIENT_THREADS,
                    Ok(threads) => threads,
                };
                config.server_threads = (scenario.servers * scenario.workers_per_server)
                    .try_into()
                    .unwrap_or(u32::MAX);
                Some(Analysis {
                    analyzer: Analyzer::new(config),
                    epoch: Nanos::from_f64(settings.epoch_secs * 1e9).max(Nanos(1)),
                    elephant_threshold: shape.elephant_threshold,
                    load: EpochLoad::default(),
                    setups: 0,
                    setup_nanos: 0,
                    completed: 0,
                    latency_sum: 0.0,
                    report: AnalysisReport::default(),
                    shapes: BTreeMap::new(),
                    spanned: 0,
                })
            }
        };
        let root = Rng::new(scenario.seed);
        let zipf = match scenario.workload.popularity {
            Popularity::Uniform => None,
            Popularity::Zipf { exponent } => Some(Zipf::new(scenario.workload.keyspace, exponent)),
        };
        Ok(Sim {
            scenario,
            planner,
            queue: EventQueue::new(),
            now: Nanos::ZERO,
            arrivals: root.fork(1),
            workload_rng: root.fork(2),
            service_rng: root.fork(3),
            network_rng: root.fork(4),
            client_rng: root.fork(5),
            zipf,
            large_zipf,
            keys: Keys {
                table: huge_table(keyspace * (1 + scenario.replicas)),
                copies: scenario.replicas,
                ring,
                value_seed: root.fork(6).next_u64(),
                value_bytes: scenario.workload.value_bytes.clone(),
                small_keys: scenario.workload.keyspace,
                large_bytes: large.map_or(0, |l| l.value_bytes),
            },
            requests: Vec::new(),
            fetches: Vec::new(),
            free_fetches: Vec::new(),
            queries: Vec::new(),
            free_queries: Vec::new(),
            open: vec![None; scenario.servers],
            slots_busy: 0,
            slot_wait: VecDeque::new(),
            query_count: 0,
            merged_fetches: 0,
            analysis,
            servers: (0..scenario.servers)
                .map(|_| {
                    Ok(ServerState {
                        idle_workers: scenario.workers_per_server,
                        waiting: Waiting::new(discipline),
                        size_aware: scenario
                            .size_aware
                            .as_ref()
                            .map(|settings| {
                                SizeAwareServer::new(
                                    settings,
                                    scenario.workers_per_server,
                                    discipline,
                                )
                            })
                            .transpose()?,
                        busy_ns: 0,
                        large_busy: 0,
                        large_clock: 0.0,
                        large_clock_at: Nanos::ZERO,
                    })
                })
                .collect::<Result<_, SimError>>()?,
            clients: (0..scenario.client_threads)
                .map(|_| ClientThread {
                    busy: false,
                    queue: Default::default(),
                    busy_ns: 0,
                })
                .collect(),
            outstanding: vec![0; scenario.servers],
            outstanding_work: vec![0; scenario.servers],
            outstanding_keys: vec![0; scenario.servers],
            demoted: vec![Demoted::default(); scenario.servers],
            ewma: vec![Ewma::default(); scenario.servers],
            wants_values,
            client_modelled: !(scenario.client_send.is_zero() && scenario.client_recv.is_zero()),
            generated: 0,
            warmup: (scenario.requests as f64 * scenario.warmup_fraction) as u64,
            first_measured: None,
            last_delivery: Nanos::ZERO,
            recorders: Recorders {
                overall: LatencyRecorder::default(),
                small: LatencyRecorder::default(),
                large: LatencyRecorder::default(),
                by_keys: BTreeMap::new(),
                by_class: BTreeMap::new(),
            },
            key_buffer: Vec::new(),
            key_ids: Vec::new(),
            fetch_count: 0,
            arrivals_scheduled: 0,
            free_requests: Vec::new(),
            keys_served: 0,
            keys_requested: 0,
            keys_unavailable: 0,
            completed: 0,
            options,
            small_requests: Vec::new(),
            small_opsets: LatencyRecorder::default(),
            large_work_ns: 0,
        })
    }

    fn run(mut self) -> Result<ClusterResult, SimError> {
        match self.scenario.closed_loop {
            None => {
                self.arrivals_scheduled = 1;
                self.queue.push(Nanos::ZERO, Event::Arrival);
            }
            Some(closed) => {
                let clients = (closed.clients as u64).min(self.scenario.requests);
                for _ in 0..clients {
                    self.schedule_closed_arrival(closed.think_us);
                }
            }
        }
        if let Some(analysis) = &self.analysis {
            self.queue.push(analysis.epoch, Event::Epoch);
        }
        if let Some(size_aware) = &self.scenario.size_aware {
            self.queue
                .push(Nanos::from_f64(size_aware.epoch_us * 1e3), Event::SizeEpoch);
        }
        while let Some((at, event)) = self.queue.pop() {
            if matches!(event, Event::Epoch | Event::SizeEpoch)
                && self.completed == self.scenario.requests
            {
                continue;
            }
            self.now = at;
            match event {
                Event::Arrival => self.arrival(),
                Event::ClientDone(thread) => self.client_done(thread as usize),
                Event::Send(fetch) => self.dispatch(fetch),
                Event::SetupDone(query) => self.setup_done(query),
                Event::AtServer(query) => self.at_server(query),
                Event::Served(query) => self.served(query),
                Event::Reply(query) => self.reply(query),
                Event::Epoch => self.epoch(),
                Event::SizeEpoch => self.size_epoch(),
            }
        }
        if self.completed != self.generated {
            return Err(SimError::Config(format!(
                "internal: {} of {} requests completed",
                self.completed, self.generated
            )));
        }
        Ok(self.finish())
    }

    fn arrival(&mut self) {
        let sequence = self.generated;
        self.generated += 1;
        if self.scenario.closed_loop.is_none() && self.generated < self.scenario.requests {
            self.arrivals_scheduled += 1;
            let mean_gap = 1e9 / self.scenario.rate_rps;
            let at = match self.scenario.arrival {
                // From the index, so equal gaps do not drift by rounding.
                ArrivalProcess::Uniform => Nanos::from_f64(self.generated as f64 * mean_gap),
                ArrivalProcess::Poisson => {
                    self.now + Nanos::from_f64(-mean_gap * (-self.arrivals.unit()).ln_1p())
                }
            };
            self.queue.push(at, Event::Arrival);
        }
        let workload = &self.scenario.workload;
        let keys = workload
            .keys_per_request
            .quantile(self.workload_rng.unit())
            .round()
            .clamp(1.0, 1e6) as u32;
        let measured = sequence >= self.warmup;
        if measured && self.first_measured.is_none() {
            self.first_measured = Some(self.now);
        }
        let state = RequestState {
            arrival: self.now,
            pending: 0,
            keys,
            large: false,
            measured,
            class: NO_PRIORITY,
            thread: (sequence % self.clients.len() as u64) as u32,
            slowest: OpsetTimes::default(),
        };
        let id = match self.free_requests.pop() {
            Some(id) => {
                self.requests[id as usize] = state;
                id
            }
            None => {
                self.requests.push(state);
                (self.requests.len() - 1) as u32
            }
        };
        self.keys_requested += u64::from(keys);
        if let Some(analysis) = &mut self.analysis {
            if keys > analysis.elephant_threshold {
                analysis.load.elephants += 1;
                analysis.load.elephant_keys += u64::from(keys);
            } else {
                analysis.load.mice += 1;
                analysis.load.mice_keys += u64::from(keys);
            }
        }
        if self.client_modelled {
            let thread = state_thread(&self.requests[id as usize]);
            self.client_enqueue(thread, ClientJob::Plan(id));
        } else {
            self.plan(id);
        }
    }

    /// A closed-loop client's next request, after its think time.
    fn schedule_closed_arrival(&mut self, think_us: f64) {
        self.arrivals_scheduled += 1;
        let think = if think_us > 0.0 {
            Nanos::from_f64(-think_us * 1e3 * (-self.arrivals.unit()).ln_1p())
        } else {
            Nanos::ZERO
        };
        self.queue.push(self.now + think, Event::Arrival);
    }

    fn draw_key(&mut self) -> u64 {
        match &self.zipf {
            Some(zipf) => zipf.sample(&mut self.workload_rng) - 1,
            None => {
                (self.workload_rng.unit() * self.scenario.workload.keyspace as f64) as u64
                    % self.scenario.workload.keyspace
            }
        }
    }

    fn plan(&mut self, request: u32) {
        let count = self.requests[request as usize].keys as usize;
        self.key_ids.clear();
        self.key_buffer.clear();
        self.key_buffer.resize(count * KEY_LEN, 0);
        let mut scratch = Vec::with_capacity(self.scenario.replicas);
        let large_count = match &self.scenario.workload.large_keys {
            Some(large) if self.workload_rng.unit() < large.request_share => {
                (large.key_share * count as f64).round() as usize
            }
            _ => 0,
        };
        for slot in 0..count {
            let id = match &self.large_zipf {
                Some(zipf) if slot < large_count => {
                    self.scenario.workload.keyspace + zipf.sample(&mut self.workload_rng) - 1
                }
                _ => self.draw_key(),
            };
            self.key_ids.push(id);
        }
        // The key table is large (16 bytes per key of the keyspace) and a request's keys are
        // scattered over it: loading their entries back to back lets the memory system fetch
        // them side by side, instead of one miss per key between two samplings.
        self.keys.touch(&self.key_ids);
        for (slot, &id) in self.key_ids.iter().enumerate() {
            let mut key = [0u8; KEY_LEN];
            write_key(id, &mut key);
            self.key_buffer[slot * KEY_LEN..(slot + 1) * KEY_LEN].copy_from_slice(&key);
            self.keys.prepare(id, &mut scratch);
            if self.options.planner_knows_sizes {
                self.planner.observe_value(&key, self.keys.value_len(id));
            }
        }
        let slices: Vec<&[u8]> = self.key_buffer.chunks_exact(KEY_LEN).collect();
        let plan_request = PlanRequest {
            keys: &slices,
            now: Timestamp(self.now.0),
        };
        let view = View {
            keys: &self.keys,
            buffer: &self.key_buffer,
            ids: &self.key_ids,
            outstanding: &self.outstanding,
            outstanding_work: &self.outstanding_work,
            outstanding_keys: &self.outstanding_keys,
            demoted: &self.demoted,
            work_view: self.options.work_view,
            fetch_service: self
                .scenario
                .service
                .mean_nanos(Units { keys: 1, bytes: 0 }),
            ewma: &self.ewma,
            servers: self.scenario.servers,
        };
        let actions = self.planner.plan(&plan_request, &view);
        let merge_limit = self.planner.merge_limit(count).max(1);
        // What each fetch adds to its server's keys in flight (`WorkView::Keys`), in the
        // planner's own estimate, as the client and the proxy count it.
        let mut work_keys: Vec<u32> = actions
            .iter()
            .filter_map(|action| match action {
                Action::Fetch(fetch) => Some(
                    self.planner
                        .fetch_work_keys(&plan_request, fetch)
                        .round()
                        .clamp(1.0, f64::from(u32::MAX)) as u32,
                ),
                Action::Unavailable { .. } => None,
            })
            .collect();
        work_keys.reverse();
        drop(slices);
        let mut large = false;
        let mut pending = 0u32;
        let mut lowest_class: Option<u8> = None;
        for action in actions {
            match action {
                Action::Fetch(fetch) => {
                    if let Some(priority) = fetch.priority {
                        lowest_class = Some(lowest_class.map_or(priority, |c| c.max(priority)));
                    }
                    let mut reply_bytes = 5; // END\r\n
                    let mut holds_large = false;
                    for &index in &fetch.keys {
                        let id = self.key_ids[index as usize];
                        let value = self.keys.value_len(id);
                        holds_large |= value > self.scenario.workload.large_value_bytes;
                        reply_bytes += value + REPLY_OVERHEAD_PER_KEY;
                    }
                    large |= holds_large;
                    let state = FetchState {
                        request,
                        backend: fetch.backend as u32,
                        keys: fetch.keys.len() as u32,
                        work_keys: work_keys.pop().unwrap_or(fetch.keys.len() as u32),
                        reply_bytes,
                        priority: fetch.priority.unwrap_or(NO_PRIORITY),
                        merge_limit,
                        key_ids: if self.wants_values {
                            fetch
                                .keys
                                .iter()
                                .map(|&index| self.key_ids[index as usize])
                                .collect()
                        } else {
                            Vec::new()
                        },
                        holds_large,
                        times: OpsetTimes::default(),
                    };
                    let id = match self.free_fetches.pop() {
                        Some(id) => {
                            self.fetches[id as usize] = state;
                            id
                        }
                        None => {
                            self.fetches.push(state);
                            (self.fetches.len() - 1) as u32
                        }
                    };
                    pending += 1;
                    self.fetch_count += 1;
                    let at = match fetch.not_before {
                        Some(Timestamp(t)) if t > self.now.0 => Nanos(t),
                        _ => self.now,
                    };
                    if at == self.now {
                        self.dispatch(id);
                    } else {
                        self.queue.push(at, Event::Send(id));
                    }
                }
                Action::Unavailable { keys } => {
                    self.keys_unavailable += keys.len() as u64;
                }
            }
        }
        let state = &mut self.requests[request as usize];
        state.large = large;
        state.class = lowest_class.unwrap_or(NO_PRIORITY);
        state.pending = pending;
        if pending == 0 {
            self.complete(request);
        }
    }

    /// A fetch joins the open query to its backend (mice, room left) or leads a new query.
    fn dispatch(&mut self, fetch: u32) {
        let state = &self.fetches[fetch as usize];
        let (backend, limit) = (state.backend as usize, state.merge_limit);
        let (keys, own_bytes, priority) = (state.keys, state.reply_bytes - 5, state.priority);
        let (holds_large, work_keys) = (state.holds_large, state.work_keys);
        if limit > 1 {
            if let Some(open) = self.open[backend] {
                let query = &mut self.queries[open as usize];
                if (query.fetches.len() as u32) < query.limit {
                    query.fetches.push(fetch);
                    query.keys += keys;
                    query.work_keys = query.work_keys.saturating_add(work_keys);
                    query.reply_bytes += own_bytes;
                    query.holds_large |= holds_large;
                    if query.fetches.len() as u32 >= query.limit {
                        // Full: later mice start a new query.
                        self.open[backend] = None;
                    }
                    self.merged_fetches += 1;
                    return;
                }
            }
        }
        let state = QueryState {
            backend: backend as u32,
            fetches: Vec::new(),
            keys,
            work_keys,
            reply_bytes: 5 + own_bytes,
            priority,
            limit,
            setup_started: self.now,
            sent: self.now,
            holds_large,
            at_server: self.now,
            large_clock_at_arrival: 0.0,
            times: OpsetTimes::default(),
            worker: 0,
            large_class: false,
        };
        let id = match self.free_queries.pop() {
            Some(id) => {
                let slot = &mut self.queries[id as usize];
                let mut members = std::mem::take(&mut slot.fetches);
                members.clear();
                *slot = state;
                slot.fetches = members;
                id
            }
            None => {
                self.queries.push(state);
                (self.queries.len() - 1) as u32
            }
        };
        self.queries[id as usize].fetches.push(fetch);
        self.query_count += 1;
        if limit > 1 {
            self.open[backend] = Some(id);
        }
        let threads = self.scenario.query_threads;
        if threads == 0 || self.slots_busy < threads {
            self.slots_busy += 1;
            self.start_setup(id);
        } else {
            self.slot_wait.push_back(id);
        }
    }

    /// A query has its slot: set it up (mice may still join meanwhile).
    fn start_setup(&mut self, query: u32) {
        let state = &mut self.queries[query as usize];
        state.setup_started = self.now;
        if self.scenario.query_setup.is_zero() {
            self.setup_done(query);
            return;
        }
        let units = Units {
            keys: u64::from(state.keys),
            bytes: request_bytes(state.keys),
        };
        let time = sample(&self.scenario.query_setup, units, &mut self.client_rng);
        self.queue.push(self.now + time, Event::SetupDone(query));
    }

    /// Seals the query and sends it.
    fn setup_done(&mut self, query: u32) {
        let state = &mut self.queries[query as usize];
        let backend = state.backend as usize;
        if self.open[backend] == Some(query) {
            self.open[backend] = None;
        }
        state.sent = self.now;
        let elapsed = self.now.since(state.setup_started);
        let units = Units {
            keys: u64::from(state.keys),
            bytes: request_bytes(state.keys),
        };
        if let Some(analysis) = &mut self.analysis {
            analysis.setups += 1;
            analysis.setup_nanos += u128::from(elapsed.0);
        }
        self.outstanding[backend] += 1;
        self.outstanding_work[backend] += mean_work(&self.scenario.service, state);
        self.outstanding_keys[backend] += u64::from(state.work_keys);
        if demoted(state.priority) {
            self.demoted[backend].work_not_in_service += mean_work(&self.scenario.service, state);
        }
        let delay = sample(&self.scenario.network, units, &mut self.network_rng);
        self.queue.push(self.now + delay, Event::AtServer(query));
    }

    fn at_server(&mut self, query: u32) {
        let (now, workers) = (self.now, self.scenario.workers_per_server);
        let state = &mut self.queries[query as usize];
        let (backend, priority) = (state.backend as usize, state.priority);
        let server = &mut self.servers[backend];
        server.advance_large_clock(now, workers);
        state.at_server = now;
        state.large_clock_at_arrival = server.large_clock;
        match &mut server.size_aware {
            None => {
                if server.idle_workers > 0 {
                    server.idle_workers -= 1;
                    self.start_service(query);
                } else {
                    server.waiting.push(priority, query);
                }
            }
            Some(size_aware) => {
                let large = size_aware.classify(state.reply_bytes);
                state.large_class = large;
                let trace = &mut size_aware.trace;
                trace.handed_off_without_large_value += u64::from(large && !state.holds_large);
                trace.kept_with_large_value += u64::from(!large && state.holds_large);
                match size_aware.claim_worker(large) {
                    Some(worker) => {
                        server.idle_workers -= 1;
                        state.worker = worker as u32;
                        self.start_service(query);
                    }
                    None if large => size_aware.push_large(priority, query),
                    None => server.waiting.push(priority, query),
                }
            }
        }
    }

    fn start_service(&mut self, query: u32) {
        let (now, workers) = (self.now, self.scenario.workers_per_server);
        let state = &mut self.queries[query as usize];
        let units = Units {
            keys: u64::from(state.keys),
            bytes: state.reply_bytes,
        };
        let time = sample(&self.scenario.service, units, &mut self.service_rng);
        let server = &mut self.servers[state.backend as usize];
        server.advance_large_clock(now, workers);
        state.times = OpsetTimes {
            wait: now.since(state.at_server).0,
            wait_behind_large: server.large_clock - state.large_clock_at_arrival,
            service: time.0,
        };
        if state.holds_large {
            server.large_busy += 1;
            self.large_work_ns += u128::from(time.0);
        }
        if let Some(size_aware) = &mut server.size_aware {
            size_aware.charge(state.large_class, state.worker as usize, time.0);
        }
        server.busy_ns += u128::from(time.0);
        if demoted(state.priority) {
            self.demoted[state.backend as usize].work_not_in_service -=
                mean_work(&self.scenario.service, state);
        }
        self.queue.push(self.now + time, Event::Served(query));
    }

    fn served(&mut self, query: u32) {
        let state = &self.queries[query as usize];
        let backend = state.backend as usize;
        let units = Units {
            keys: u64::from(state.keys),
            bytes: state.reply_bytes,
        };
        let delay = sample(&self.scenario.network, units, &mut self.network_rng);
        self.queue.push(self.now + delay, Event::Reply(query));
        if demoted(state.priority) {
            self.demoted[backend].work_not_in_service += mean_work(&self.scenario.service, state);
        }
        let (holds_large, worker) = (state.holds_large, state.worker);
        let server = &mut self.servers[backend];
        server.advance_large_clock(self.now, self.scenario.workers_per_server);
        if holds_large {
            server.large_busy -= 1;
        }
        match server.next_for(worker as usize) {
            Some(next) => {
                self.queries[next as usize].worker = worker;
                self.start_service(next);
            }
            None => server.idle_workers += 1,
        }
    }

    /// The size-aware controllers' epoch: every server decides; an idle worker the new split
    /// lets take waiting opsets starts one.
    fn size_epoch(&mut self) {
        let Some(settings) = self.scenario.size_aware else {
            return;
        };
        for backend in 0..self.servers.len() {
            let server = &mut self.servers[backend];
            let Some(size_aware) = &mut server.size_aware else {
                continue;
            };
            size_aware.end_epoch(server.waiting.len());
            let mut starts = Vec::new();
            for worker in size_aware.idle_workers() {
                if let Some(next) = server.next_for(worker) {
                    server.idle_workers -= 1;
                    starts.push((worker, next));
                }
            }
            for (worker, next) in starts {
                self.queries[next as usize].worker = worker as u32;
                self.start_service(next);
            }
        }
        self.queue.push(
            self.now + Nanos::from_f64(settings.epoch_us * 1e3),
            Event::SizeEpoch,
        );
    }

    fn reply(&mut self, query: u32) {
        let state = &self.queries[query as usize];
        let backend = state.backend as usize;
        let keys = state.keys;
        let latency = self.now.since(state.sent);
        self.outstanding[backend] -= 1;
        self.outstanding_work[backend] -= mean_work(&self.scenario.service, state);
        self.outstanding_keys[backend] -= u64::from(state.work_keys);
        if demoted(state.priority) {
            self.demoted[backend].work_not_in_service -= mean_work(&self.scenario.service, state);
        }
        self.ewma[backend].observe(latency.0 as f64);
        if let Some(analysis) = &mut self.analysis {
            analysis
                .analyzer
                .observe(keys, Seconds(latency.0 as f64 * 1e-9));
        }
        let members = std::mem::take(&mut self.queries[query as usize].fetches);
        if self.wants_values {
            let mut key = [0u8; KEY_LEN];
            for &fetch in &members {
                for &id in &self.fetches[fetch as usize].key_ids {
                    write_key(id, &mut key);
                    self.planner.observe_value(&key, self.keys.value_len(id));
                }
            }
        }
        let (reply_bytes, times) = {
            let state = &self.queries[query as usize];
            (state.reply_bytes, state.times)
        };
        if self.options.small_tail_decomposition {
            for &fetch in &members {
                let request = self.fetches[fetch as usize].request as usize;
                let state = &self.requests[request];
                if state.measured && !state.large {
                    self.small_opsets.record(times.wait + times.service);
                }
            }
        }
        for &fetch in &members {
            self.fetches[fetch as usize].times = times;
        }
        self.planner.observe(&Observation {
            backend,
            keys,
            hits: keys,
            value_bytes: reply_bytes.saturating_sub(5 + u64::from(keys) * REPLY_OVERHEAD_PER_KEY),
            latency_nanos: latency.0,
            at: Timestamp(self.now.0),
        });
        // The slot goes to the next waiting query.
        match self.slot_wait.pop_front() {
            Some(next) => self.start_setup(next),
            None => self.slots_busy -= 1,
        }
        for &fetch in &members {
            if self.client_modelled {
                let thread =
                    state_thread(&self.requests[self.fetches[fetch as usize].request as usize]);
                self.client_enqueue(thread, ClientJob::Reply(fetch));
            } else {
                self.fetch_done(fetch);
            }
        }
        self.queries[query as usize].fetches = members;
        self.free_queries.push(query);
    }

    /// The analyzer's epoch: decide, apply the shape to the planner.
    fn epoch(&mut self) {
        let measuring = self.first_measured.is_some();
        let span = self.planner.analyzer_epochs().max(1);
        let Some(analysis) = &mut self.analysis else {
            return;
        };
        analysis.spanned += 1;
        if analysis.spanned < span {
            // The counters keep accumulating: the analysis covers the whole span.
            let next = self.now + analysis.epoch;
            self.queue.push(next, Event::Epoch);
            return;
        }
        let spanned = std::mem::take(&mut analysis.spanned);
        let mut load = std::mem::take(&mut analysis.load);
        load.seconds = analysis.epoch.as_secs_f64() * f64::from(spanned);
        load.client_overhead = Seconds(if analysis.setups > 0 {
            analysis.setup_nanos as f64 / analysis.setups as f64 * 1e-9
        } else {
            0.0
        });
        analysis.setups = 0;
        analysis.setup_nanos = 0;
        if analysis.completed > 0 {
            load.observed_mean = Seconds(analysis.latency_sum / analysis.completed as f64);
        }
        analysis.completed = 0;
        analysis.latency_sum = 0.0;
        let decision = analysis.analyzer.decide(&load);
        let report = &mut analysis.report;
        report.epochs += 1;
        report.fallbacks += u64::from(decision.fallback.is_some());
        report.held += u64::from(decision.held);
        let shape = (decision.merge_level, decision.chunk_size);
        report.last = shape;
        if measuring {
            *analysis.shapes.entry(shape).or_default() += 1;
        }
        self.planner.set_shape(QueryShape {
            merge_level: decision.merge_level,
            chunk_size: decision.chunk_size,
            elephant_threshold: analysis.elephant_threshold,
        });
        let next = self.now + analysis.epoch;
        self.queue.push(next, Event::Epoch);
    }

    fn fetch_done(&mut self, fetch: u32) {
        let state = &self.fetches[fetch as usize];
        let request = state.request;
        let times = state.times;
        self.keys_served += u64::from(state.keys);
        self.free_fetches.push(fetch);
        let request_state = &mut self.requests[request as usize];
        request_state.slowest = times;
        request_state.pending -= 1;
        if request_state.pending == 0 {
            self.complete(request);
        }
    }

    fn complete(&mut self, request: u32) {
        self.completed += 1;
        if let Some(closed) = self.scenario.closed_loop {
            if self.arrivals_scheduled < self.scenario.requests {
                self.schedule_closed_arrival(closed.think_us);
            }
        }
        self.free_requests.push(request);
        let state = &self.requests[request as usize];
        let latency = self.now.since(state.arrival).0;
        self.planner.observe_request(&RequestDone {
            keys: state.keys,
            latency_nanos: latency,
            at: Timestamp(self.now.0),
        });
        if let Some(analysis) = &mut self.analysis {
            analysis.completed += 1;
            analysis.latency_sum += latency as f64 * 1e-9;
        }
        if !state.measured {
            return;
        }
        self.last_delivery = self.last_delivery.max(self.now);
        let recorders = &mut self.recorders;
        recorders.overall.record(latency);
        if state.large {
            recorders.large.record(latency);
        } else {
            recorders.small.record(latency);
            if self.options.small_tail_decomposition {
                self.small_requests.push((latency, state.slowest));
            }
        }
        recorders
            .by_keys
            .entry(state.keys)
            .or_default()
            .record(latency);
        if state.class != NO_PRIORITY {
            recorders
                .by_class
                .entry(state.class)
                .or_default()
                .record(latency);
        }
    }

    fn client_enqueue(&mut self, thread: usize, job: ClientJob) {
        if self.clients[thread].busy {
            self.clients[thread].queue.push_back(job);
        } else {
            self.client_start(thread, job);
        }
    }

    fn client_start(&mut self, thread: usize, job: ClientJob) {
        let (spec, units) = match job {
            ClientJob::Plan(request) => {
                let keys = u64::from(self.requests[request as usize].keys);
                (
                    &self.scenario.client_send,
                    Units {
                        keys,
                        bytes: 6 + keys * (KEY_LEN as u64 + 1),
                    },
                )
            }
            ClientJob::Reply(fetch) => {
                let state = &self.fetches[fetch as usize];
                (
                    &self.scenario.client_recv,
                    Units {
                        keys: u64::from(state.keys),
                        bytes: state.reply_bytes,
                    },
                )
            }
        };
        let time = sample(spec, units, &mut self.client_rng);
        let client = &mut self.clients[thread];
        client.busy = true;
        client.busy_ns += u128::from(time.0);
        client.queue.push_front(job);
        self.queue
            .push(self.now + time, Event::ClientDone(thread as u32));
    }

    fn client_done(&mut self, thread: usize) {
        let job = self.clients[thread].queue.pop_front();
        self.clients[thread].busy = false;
        match job {
            Some(ClientJob::Plan(request)) => self.plan(request),
            Some(ClientJob::Reply(fetch)) => self.fetch_done(fetch),
            None => {}
        }
        if !self.clients[thread].busy {
            if let Some(next) = self.clients[thread].queue.pop_front() {
                self.client_start(thread, next);
            }
        }
    }

    fn finish(self) -> ClusterResult {
        let start = self.first_measured.unwrap_or(Nanos::ZERO);
        let window = self.last_delivery.since(start).as_secs_f64();
        let measured = self.recorders.overall.summary().count;
        let end = self.now.as_secs_f64().max(1e-12);
        let class = |recorder: &LatencyRecorder| ClassResult {
            summary: recorder.summary(),
            histogram: Some(recorder.histogram().clone()),
        };
        let planner_gauges = self.planner.choice().map(|_| {
            self.planner
                .gauges()
                .into_iter()
                .map(|(name, value)| (name.to_string(), value))
                .collect()
        });
        let small_tail = self
            .options
            .small_tail_decomposition
            .then(|| self.small_tail());
        let size_aware = self.scenario.size_aware.map(|_| {
            let mut report = SizeAwareReport::default();
            for server in &self.servers {
                if let Some(size_aware) = &server.size_aware {
                    report.add(size_aware);
                }
            }
            report.finish();
            report
        });
        ClusterResult {
            small_tail,
            size_aware,
            planner_gauges,
            planner: self.planner.name().to_string(),
            offered_rps: self.scenario.rate_rps,
            achieved_rps: if window > 0.0 {
                measured as f64 / window
            } else {
                0.0
            },
            requests: self.generated,
            measured,
            overall: class(&self.recorders.overall),
            small: class(&self.recorders.small),
            large: class(&self.recorders.large),
            by_keys: self
                .recorders
                .by_keys
                .iter()
                .map(|(&keys, recorder)| (keys, class(recorder)))
                .collect(),
            by_class: self
                .recorders
                .by_class
                .iter()
                .map(|(&priority, recorder)| (priority, class(recorder)))
                .collect(),
            fetches: self.fetch_count,
            queries: self.query_count,
            merged_fetches: self.merged_fetches,
            keys_served: self.keys_served,
            keys_requested: self.keys_requested,
            keys_unavailable: self.keys_unavailable,
            server_utilization: self
                .servers
                .iter()
                .map(|s| s.busy_ns as f64 / 1e9 / end)
                .collect(),
            client_utilization: self
                .clients
                .iter()
                .map(|c| c.busy_ns as f64 / 1e9 / end)
                .collect(),
            duration_secs: self.now.as_secs_f64(),
            analysis: self.analysis.map(|analysis| {
                let mut shapes: Vec<ShapeEpochs> = analysis
                    .shapes
                    .iter()
                    .map(|(&(merge_level, chunk_size), &epochs)| ShapeEpochs {
                        merge_level,
                        chunk_size,
                        epochs,
                    })
                    .collect();
                shapes.sort_by_key(|shape| Reverse(shape.epochs));
                AnalysisReport {
                    shapes,
                    ..analysis.report
                }
            }),
        }
    }
}

impl Sim<'_> {
    /// The decomposition of the measured requests without a large value.
    fn small_tail(&self) -> SmallTail {
        let mut sorted: Vec<&(u64, OpsetTimes)> = self.small_requests.iter().collect();
        sorted.sort_by_key(|(latency, _)| *latency);
        let p99 = sorted
            .get(((sorted.len() as f64 * 0.99).ceil() as usize).saturating_sub(1))
            .map_or(0, |(latency, _)| *latency);
        let split = |requests: &[&(u64, OpsetTimes)]| {
            let count = requests.len().max(1) as f64;
            let mean = |part: &dyn Fn(&(u64, OpsetTimes)) -> f64| {
                requests.iter().map(|r| part(r)).sum::<f64>() / count / 1e3
            };
            let latency_us = mean(&|(latency, _)| *latency as f64);
            let wait_behind_large_us = mean(&|(_, t)| t.wait_behind_large);
            let wait_behind_small_us =
                mean(&|(_, t)| (t.wait as f64 - t.wait_behind_large).max(0.0));
            let service_us = mean(&|(_, t)| t.service as f64);
            TimeSplit {
                requests: requests.len() as u64,
                latency_us,
                wait_behind_large_us,
                wait_behind_small_us,
                service_us,
                other_us: latency_us - wait_behind_large_us - wait_behind_small_us - service_us,
            }
        };
        let tail: Vec<&(u64, OpsetTimes)> = sorted
            .iter()
            .copied()
            .filter(|(latency, _)| *latency >= p99)
            .collect();
        let opsets = self.small_opsets.histogram();
        let quantile = |q: f64| {
            if opsets.is_empty() {
                0.0
            } else {
                opsets.value_at_quantile(q) as f64 / 1e3
            }
        };
        let busy: u128 = self.servers.iter().map(|s| s.busy_ns).sum();
        SmallTail {
            p99_us: p99 as f64 / 1e3,
            tail: split(&tail),
            all: split(&sorted),
            opsets_per_request: opsets.len() as f64 / sorted.len().max(1) as f64,
            opset_p50_us: quantile(0.5),
            opset_p99_us: quantile(0.99),
            opset_p999_us: quantile(0.999),
            large_opset_work_share: self.large_work_ns as f64 / busy.max(1) as f64,
        }
    }
}

/// Bytes of a `get` of `keys` keys.
fn request_bytes(keys: u32) -> u64 {
    6 + u64::from(keys) * (KEY_LEN as u64 + 1)
}

fn sample(spec: &CostSpec, units: Units, rng: &mut Rng) -> Nanos {
    if spec.is_zero() {
        return Nanos::ZERO;
    }
    Nanos::from_f64(spec.sample_nanos(units, rng.unit()))
}
