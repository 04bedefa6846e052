//! TailX against Rein and batching in the cluster simulator (Jaiman, Ben Mokhtar, Rivière:
//! "TailX: Scheduling heterogeneous multiget queries to improve tail latencies in key-value
//! stores", DAIS 2020, Section 4): what `tailtrim experiment tailx` runs.
//!
//! ```text
//!  experiments: (a) 80 % multigets of 5 keys, 20 % of 100 keys, 1 KB values, 1M and 10M requests
//!               (b) 20-key multigets, 20 % of them with 10 / 20 / 50 % large values, 1M requests
//!               (c) rare elephants: 99.5 % 2-key, 0.5 % 500-key multigets (Rein's case)
//!               (d) 20-key multigets, each key large (100 KB) with probability 1 %
//!    │  16 servers × workers, replication 3 (ketama, owner first), zipf 0.99 keys (flags)
//!    ▼  calibrate: a light batch run ─► the busiest server's work per request ─► capacity;
//!       two batch runs at load × capacity rescale it until the busiest server is at `load`;
//!       offered rate = load (75 %) × capacity, the same for every planner
//!    ▼  open loop (Poisson at that rate) or closed loop (N clients, think time)
//!  batch │ rein-sbf │ rein-sds │ rein-drr │ tailx │ cost-sbf │ cost-rel │ size-rel (policy crate
//!    planners,
//!    same seed) servers: each planner's discipline (policy::serverq): Rein strict priority,
//!    rein-drr deficit round robin, cost-sbf and cost-rel aged strict priority by estimated
//!    cost (cost-rel's classes relative to the typical bottleneck; size-rel also serves an opset
//!    holding a large value one class lower), others FIFO; TailX's delays
//!    in the client's delay queue (not_before)
//!    ▼
//!  p50 / p95 / p99 per planner and per class (mice, elephants, requests with and without a
//!  large value), the busiest server's utilisation, queueing = loaded − unloaded (the
//!  calibration run), reductions vs rein-sbf
//! ```
//!
//! Pure: no I/O, no clock; the CLI times the runs and writes the files.

use serde::{Deserialize, Serialize};
use tailtrim_bench::dist::Distribution;
use tailtrim_bench::workload::Popularity;
use tailtrim_policy::costrel::{CostRelSettings, DEFAULT_REL_OVERTAKES, DEFAULT_SPREAD};
use tailtrim_policy::costsbf::{CostSbfSettings, DEFAULT_OVERTAKES};
use tailtrim_policy::costspec::CostSpec;
use tailtrim_policy::planner::{Planner, PlannerKind, PlannerSettings};
use tailtrim_policy::sizerel::DEFAULT_SIZE_REL_OVERTAKES;
use tailtrim_policy::spread::ReplicaChoice;
use tailtrim_policy::tailx::TailxSettings;

use crate::chisel::gain;
use crate::cluster::{
    run_cluster_with, ArrivalProcess, ClassResult, ClosedLoop, ClusterResult, ClusterRunOptions,
    ClusterScenario, ClusterWorkload, LargeKeys, ServerQueue, SizeAwareReport, SizeAwareServers,
    SmallTail, WorkView,
};
use crate::SimError;

/// The planners compared: the paper's, then Rein's classes by deficit round robin, then ours.
pub const PLANNERS: [&str; 8] = [
    "batch", "rein-sbf", "rein-sds", "rein-drr", "tailx", "cost-sbf", "cost-rel", "size-rel",
];
/// Planners run on size-aware servers (Minos inside each server,
/// [`ClusterScenario::size_aware`]): a planner of [`PLANNERS`] and [`SIZE_AWARE_SUFFIX`]. Run
/// only when asked for by name.
pub const SIZE_AWARE_PLANNERS: [&str; 2] = ["batch+minos", "cost-rel+minos"];
/// The suffix of a planner's name that puts it on size-aware servers.
pub const SIZE_AWARE_SUFFIX: &str = "+minos";
/// Planners whose replica choice spreads a request's keys ([`ReplicaChoice::Spread`]): a
/// planner of [`PLANNERS`] and [`SPREAD_SUFFIX`]. Run only when asked for by name.
pub const SPREAD_PLANNERS: [&str; 5] = [
    "batch+spread",
    "rein-sbf+spread",
    "rein-sds+spread",
    "cost-sbf+spread",
    "cost-rel+spread",
];
/// The suffix of a planner's name that makes its replica choice spread a request's keys.
pub const SPREAD_SUFFIX: &str = "+spread";
/// Planners whose replica choice covers a request's keys with as few backends as it can
/// ([`ReplicaChoice::Cover`]): a planner of [`PLANNERS`] and [`COVER_SUFFIX`]. Run only when
/// asked for by name.
pub const COVER_PLANNERS: [&str; 5] = [
    "batch+cover",
    "rein-sbf+cover",
    "cost-sbf+cover",
    "cost-rel+cover",
    "size-rel+cover",
];
/// The suffix of a planner's name that makes its replica choice cover a request's keys with
/// few backends.
pub const COVER_SUFFIX: &str = "+cover";

/// A planner's name without [`SIZE_AWARE_SUFFIX`], and whether it had it.
pub fn split_size_aware(name: &str) -> (&str, bool) {
    match name.strip_suffix(SIZE_AWARE_SUFFIX) {
        Some(base) => (base, true),
        None => (name, false),
    }
}

/// The baseline the reductions are taken against.
pub const BASELINE: &str = "rein-sbf";

/// The system every experiment runs on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// Servers.
    pub servers: usize,
    /// Worker threads per server.
    pub workers_per_server: usize,
    /// Copies of each key.
    pub replicas: usize,
    /// Keys with small values.
    pub keyspace: u64,
    /// Bytes of a small value.
    pub small_value_bytes: u64,
    /// Keys with large values (experiment b).
    pub large_keyspace: u64,
    /// Bytes of a large value (the paper's 2 MB, scaled).
    pub large_value_bytes: u64,
    /// Zipf exponent of key popularity.
    pub zipf: f64,
    /// Server time per fetch (cost spec: const, key, byte, dispersion).
    pub service: String,
    /// One-way network time per message.
    pub network: String,
    /// Offered load as a share of the calibrated capacity.
    pub load: f64,
    /// Requests of the calibration run.
    pub calibration_requests: u64,
    /// Rate of the calibration run, requests/s: light for the cost model (a dilated model
    /// needs a proportionally lower rate).
    #[serde(default = "default_calibration_rps")]
    pub calibration_rps: f64,
    /// TailX's smallest allowance worth a delay, µs (the proxy's default is its 1 ms timer
    /// resolution; the simulator has none).
    pub tailx_min_delay_us: f64,
    /// Seed of every run.
    pub seed: u64,
    /// Requests of each loaded calibration run (0: the light run only, as files written
    /// before had it).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub loaded_calibration_requests: u64,
    /// `cost-sbf`'s ageing at the servers: later arrivals that may overtake an opset per class.
    #[serde(
        default = "default_overtakes",
        skip_serializing_if = "is_default_overtakes"
    )]
    pub overtakes: u64,
    /// `cost-rel`'s ageing at the servers: later arrivals that may overtake an opset per class.
    #[serde(
        default = "default_rel_overtakes",
        skip_serializing_if = "is_default_rel_overtakes"
    )]
    pub rel_overtakes: u64,
    /// `size-rel`'s ageing at the servers (its own: default
    /// [`tailtrim_policy::sizerel::DEFAULT_SIZE_REL_OVERTAKES`]). Absent in files written
    /// before it had its own: size-rel then aged by `rel_overtakes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_rel_overtakes: Option<u64>,
    /// `size-rel`'s covering choice: the weight of a backend's demoted work not in service for
    /// a request without a large value (default
    /// [`tailtrim_policy::sizerel::DEMOTED_WORK_WEIGHT`]). Absent in files written before the
    /// setting: `sim-v13-first-class`'s own runs at 0.25, the runs before it with the work
    /// weighed whole (1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_rel_demoted_weight: Option<f64>,
    /// `cost-rel`'s spread: bottlenecks up to this many times the typical one are class 0.
    #[serde(default = "default_spread", skip_serializing_if = "is_default_spread")]
    pub rel_spread: f64,
    /// `cost-rel` without slack demotion (its classes by key count only; the default since
    /// the `sim-v3` runs: files without the field ran with slack demotion).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rel_no_slack: bool,
    /// `cost-rel` ranks a request by its costliest opset's estimated cost, not its key count.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rel_by_cost: bool,
    /// `cost-rel`'s demotion budget: the share of requests whose bottleneck may be demoted
    /// (files without the field ran without one: 1).
    #[serde(default = "no_budget", skip_serializing_if = "is_no_budget")]
    pub rel_budget: f64,
    /// A closed-loop client instead of open-loop arrivals at `load`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_loop: Option<ClosedLoop>,
    /// Servers' discipline for prioritized fetches (default: each planner's own).
    #[serde(default, skip_serializing_if = "is_planner_queue")]
    pub server_queue: ServerQueue,
    /// Planners are told every key's value size before they plan (what a server knows of its
    /// own items), not only the sizes of the replies they saw.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub planner_knows_sizes: bool,
    /// Planners see no estimate of the servers' work in flight ([`WorkView::Hidden`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hide_work: bool,
    /// Planners see each server's keys in flight plus this fixed cost per fetch, in keys (what
    /// the client and proxy count, `[pool] fetch_cost_keys`), instead of the mean service
    /// times ([`WorkView::Keys`]); ignored with `hide_work`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_from_keys: Option<f64>,
    /// Each run splits the time of the requests without a large value
    /// ([`PlannerOutcome::small_tail`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub small_tail_decomposition: bool,
    /// The servers of the planners named with [`SIZE_AWARE_SUFFIX`] (`None`: none was run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_aware: Option<SizeAwareServers>,
}

// Fields added after results were first kept are left out of a file when they hold their
// "not measured" default, so a replot of an older run writes the file it read.
fn is_zero_u64(value: &u64) -> bool {
    *value == 0
}

fn is_zero_f64(value: &f64) -> bool {
    *value == 0.0
}

fn is_default_overtakes(value: &u64) -> bool {
    *value == default_overtakes()
}

fn is_planner_queue(queue: &ServerQueue) -> bool {
    *queue == ServerQueue::Planner
}

fn default_overtakes() -> u64 {
    DEFAULT_OVERTAKES
}

fn is_default_rel_overtakes(value: &u64) -> bool {
    *value == DEFAULT_REL_OVERTAKES
}

fn default_rel_overtakes() -> u64 {
    DEFAULT_REL_OVERTAKES
}

/// The spread of the runs kept before the field was written when it held the default.
const RECORDED_SPREAD: f64 = 2.0;

fn no_budget() -> f64 {
    1.0
}

fn is_no_budget(value: &f64) -> bool {
    *value >= 1.0
}

fn is_default_spread(value: &f64) -> bool {
    *value == RECORDED_SPREAD
}

fn default_spread() -> f64 {
    RECORDED_SPREAD
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            servers: 16,
            workers_per_server: 4,
            replicas: 3,
            keyspace: 20_000_000,
            small_value_bytes: 1_000,
            large_keyspace: 100_000,
            large_value_bytes: 128_000,
            zipf: 0.99,
            service: "const=20us,key=5us,byte=0.5ns,dist=exp".to_string(),
            network: "const=25us,byte=1ns".to_string(),
            load: 0.75,
            calibration_requests: 20_000,
            calibration_rps: default_calibration_rps(),
            tailx_min_delay_us: 10.0,
            seed: 1,
            loaded_calibration_requests: 200_000,
            overtakes: DEFAULT_OVERTAKES,
            rel_overtakes: DEFAULT_REL_OVERTAKES,
            size_rel_overtakes: Some(DEFAULT_SIZE_REL_OVERTAKES),
            size_rel_demoted_weight: Some(tailtrim_policy::sizerel::DEMOTED_WORK_WEIGHT),
            rel_spread: DEFAULT_SPREAD,
            rel_no_slack: !CostRelSettings::default().slack_demotion,
            rel_by_cost: CostRelSettings::default().by_cost,
            rel_budget: CostRelSettings::default().demotion_budget,
            closed_loop: None,
            server_queue: ServerQueue::Planner,
            planner_knows_sizes: false,
            hide_work: false,
            work_from_keys: None,
            small_tail_decomposition: false,
            size_aware: None,
        }
    }
}

impl Setup {
    /// The options of a planner's run (not of the calibration runs).
    pub fn run_options(&self) -> ClusterRunOptions {
        ClusterRunOptions {
            small_tail_decomposition: self.small_tail_decomposition,
            planner_knows_sizes: self.planner_knows_sizes,
            work_view: match (self.hide_work, self.work_from_keys) {
                (true, _) => WorkView::Hidden,
                (false, Some(fetch_cost_keys)) => WorkView::Keys { fetch_cost_keys },
                (false, None) => WorkView::Service,
            },
        }
    }
}

fn default_calibration_rps() -> f64 {
    1_000.0
}

/// What the clients ask for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Mix {
    /// (a) `long_share` of the multigets have `long_keys` keys, the rest `short_keys`.
    KeyCounts {
        /// Keys of a short multiget.
        short_keys: u32,
        /// Keys of a long multiget.
        long_keys: u32,
        /// Share of long multigets.
        long_share: f64,
    },
    /// (b) multigets of `keys` keys; `request_share` of them carry `large_share` large values.
    LargeValues {
        /// Keys per multiget.
        keys: u32,
        /// Share of multigets with large values.
        request_share: f64,
        /// Share of such a multiget's keys that are large.
        large_share: f64,
    },
    /// Multigets of `keys` keys; every key's value is large (`large_bytes`) with probability
    /// `large_key_share` (drawn once per key), else small.
    KeyValueShare {
        /// Keys per multiget.
        keys: u32,
        /// Share of keys with a large value.
        large_key_share: f64,
        /// Bytes of a large value.
        large_bytes: u64,
    },
}

impl Mix {
    /// Requests with at most this many keys are mice, more are elephants (`None`: one size).
    pub fn mice_max_keys(&self) -> Option<u32> {
        match *self {
            Mix::KeyCounts { short_keys, .. } => Some(short_keys),
            Mix::LargeValues { .. } | Mix::KeyValueShare { .. } => None,
        }
    }
}

/// One experiment: a mix and a length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experiment {
    /// Short name (`a-1M`, `b-20pct`, …).
    pub name: String,
    /// The mix.
    pub mix: Mix,
    /// Requests per run.
    pub requests: u64,
}

/// The paper's experiments: (a) at `a_requests` each (1M and 10M in the paper), (b) at
/// `b_requests`.
pub fn paper_experiments(a_requests: &[u64], b_requests: u64) -> Vec<Experiment> {
    let mut list: Vec<Experiment> = a_requests
        .iter()
        .map(|&requests| Experiment {
            name: format!("a-{}", short_count(requests)),
            mix: Mix::KeyCounts {
                short_keys: 5,
                long_keys: 100,
                long_share: 0.2,
            },
            requests,
        })
        .collect();
    for large_share in [0.1, 0.2, 0.5] {
        list.push(Experiment {
            name: format!("b-{}pct", (large_share * 100.0f64).round()),
            mix: Mix::LargeValues {
                keys: 20,
                request_share: 0.2,
                large_share,
            },
            requests: b_requests,
        });
    }
    list
}

/// Names of the experiments beside the paper's: `rare-elephant` (99.5 % 2-key, 0.5 % 500-key
/// multigets) and `keys20-1pct-large` (20-key multigets, 1 % of keys at 100 KB).
pub const EXTRA_EXPERIMENTS: [&str; 2] = ["rare-elephant", "keys20-1pct-large"];

/// The experiments beside the paper's, `requests` each.
pub fn extra_experiments(requests: u64) -> Vec<Experiment> {
    vec![
        Experiment {
            name: EXTRA_EXPERIMENTS[0].to_string(),
            mix: Mix::KeyCounts {
                short_keys: 2,
                long_keys: 500,
                long_share: 0.005,
            },
            requests,
        },
        Experiment {
            name: EXTRA_EXPERIMENTS[1].to_string(),
            mix: Mix::KeyValueShare {
                keys: 20,
                large_key_share: 0.01,
                large_bytes: 100_000,
            },
            requests,
        },
    ]
}

/// `1M`, `10M`, `250k`, or the number.
pub fn short_count(count: u64) -> String {
    if count >= 1_000_000 && count.is_multiple_of(1_000_000) {
        format!("{}M", count / 1_000_000)
    } else if count >= 1_000 && count.is_multiple_of(1_000) {
        format!("{}k", count / 1_000)
    } else {
        count.to_string()
    }
}

fn spec(text: &str) -> Result<CostSpec, SimError> {
    CostSpec::parse(text).map_err(|e| SimError::Config(format!("cost spec {text:?}: {e}")))
}

/// The cluster scenario of an experiment at `rate_rps` (planner name set, requests as given).
pub fn scenario(
    setup: &Setup,
    experiment: &Experiment,
    planner: &str,
    rate_rps: f64,
    requests: u64,
) -> Result<ClusterScenario, SimError> {
    let mut value_bytes = Distribution::Fixed {
        value: setup.small_value_bytes as f64,
    };
    let (keys_per_request, large_keys) = match experiment.mix {
        Mix::KeyCounts {
            short_keys,
            long_keys,
            long_share,
        } => (
            Distribution::Table {
                entries: vec![
                    (f64::from(short_keys), 1.0 - long_share),
                    (f64::from(long_keys), long_share),
                ],
                tail: None,
            },
            None,
        ),
        Mix::LargeValues {
            keys,
            request_share,
            large_share,
        } => (
            Distribution::Fixed {
                value: f64::from(keys),
            },
            Some(LargeKeys {
                keyspace: setup.large_keyspace,
                value_bytes: setup.large_value_bytes,
                request_share,
                key_share: large_share,
            }),
        ),
        Mix::KeyValueShare {
            keys,
            large_key_share,
            large_bytes,
        } => {
            value_bytes = Distribution::Table {
                entries: vec![
                    (setup.small_value_bytes as f64, 1.0 - large_key_share),
                    (large_bytes as f64, large_key_share),
                ],
                tail: None,
            };
            (
                Distribution::Fixed {
                    value: f64::from(keys),
                },
                None,
            )
        }
    };
    Ok(ClusterScenario {
        servers: setup.servers,
        workers_per_server: setup.workers_per_server,
        server_queue: setup.server_queue,
        replicas: setup.replicas,
        client_threads: 1,
        planner: planner.to_string(),
        workload: ClusterWorkload {
            keyspace: setup.keyspace,
            popularity: Popularity::Zipf {
                exponent: setup.zipf,
            },
            keys_per_request,
            value_bytes,
            large_value_bytes: setup.small_value_bytes,
            large_keys,
        },
        rate_rps,
        arrival: ArrivalProcess::Poisson,
        closed_loop: if planner == "calibration" {
            None
        } else {
            setup.closed_loop
        },
        requests,
        warmup_fraction: 0.1,
        service: spec(&setup.service)?,
        network: spec(&setup.network)?,
        client_send: CostSpec::ZERO,
        client_recv: CostSpec::ZERO,
        query_threads: 0,
        query_setup: CostSpec::ZERO,
        online_analysis: None,
        size_aware: split_size_aware(planner)
            .1
            .then(|| setup.size_aware.unwrap_or_default()),
        seed: setup.seed,
    })
}

/// A planner by name, TailX with the setup's smallest delay, `cost-sbf` and `cost-rel` with
/// their ageing (and `cost-rel`'s spread).
/// A name with [`SIZE_AWARE_SUFFIX`] is its planner's (the servers are the scenario's); with
/// [`SPREAD_SUFFIX`], its planner's with [`ReplicaChoice::Spread`].
pub fn planner(setup: &Setup, name: &str) -> Result<Box<dyn Planner>, SimError> {
    let base = split_size_aware(name).0;
    let (base, replica_choice) = match base.strip_suffix(SPREAD_SUFFIX) {
        Some(base) => (base, ReplicaChoice::Spread),
        None => match base.strip_suffix(COVER_SUFFIX) {
            Some(base) => (base, ReplicaChoice::Cover),
            None => (base, ReplicaChoice::C3),
        },
    };
    let kind = PlannerKind::from_name(base).map_err(|e| SimError::Config(e.to_string()))?;
    Ok(kind.build_with(&PlannerSettings {
        replica_choice,
        tailx: TailxSettings {
            min_delay_nanos: (setup.tailx_min_delay_us * 1e3).round() as u64,
            ..TailxSettings::default()
        },
        cost_sbf: CostSbfSettings {
            overtakes: setup.overtakes,
            ..CostSbfSettings::default()
        },
        cost_rel: CostRelSettings {
            overtakes: setup.rel_overtakes,
            spread: setup.rel_spread,
            slack_demotion: !setup.rel_no_slack,
            by_cost: setup.rel_by_cost,
            demotion_budget: setup.rel_budget,
            ..CostRelSettings::default()
        },
        size_rel_overtakes: setup.size_rel_overtakes.unwrap_or(setup.rel_overtakes),
        size_rel_demoted_weight: setup
            .size_rel_demoted_weight
            .unwrap_or(tailtrim_policy::sizerel::DEMOTED_WORK_WEIGHT),
        ..PlannerSettings::default()
    }))
}

/// The calibration: capacity and the offered rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Rate of the light calibration run (batch).
    pub probe_rps: f64,
    /// Busiest server's utilization in it (all workers, up to `workers_per_server`).
    pub busiest_utilization: f64,
    /// Mean server utilization in it.
    pub mean_utilization: f64,
    /// Requests per second at which the busiest server would saturate.
    pub capacity_rps: f64,
    /// `load × capacity`.
    pub rate_rps: f64,
    /// The busiest server's utilisation (share of its workers) in the last loaded batch run
    /// of the calibration (0: none was run).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub loaded_busiest_utilization: f64,
    /// Median latency of the light run (batch, no queueing to speak of), µs.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub unloaded_p50_us: f64,
    /// 99th percentile of the light run, µs.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub unloaded_p99_us: f64,
    /// Median of the light run's requests without a large value, µs (0: none, or a file
    /// written before it was kept).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub unloaded_small_p50_us: f64,
    /// 99th percentile of the light run's requests without a large value, µs.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub unloaded_small_p99_us: f64,
}

/// Batch runs at the offered rate that correct the light run's capacity.
pub const LOADED_CALIBRATION_PASSES: usize = 2;

/// Finds the rate: a batch run at a light rate, the busiest server's work per request, its
/// saturation rate, times `load`; then [`LOADED_CALIBRATION_PASSES`] batch runs at that rate,
/// each rescaling the rate so the busiest server's utilisation is `load` (C3 moves load off
/// busy replicas as load grows).
pub fn calibrate(setup: &Setup, experiment: &Experiment) -> Result<Calibration, SimError> {
    let probe_rps = setup.calibration_rps;
    let mut probe = scenario(
        setup,
        experiment,
        "calibration",
        probe_rps,
        setup.calibration_requests,
    )?;
    probe.planner = "batch".to_string();
    let result = run_cluster_with(&probe, planner(setup, "batch")?)?;
    let busiest = result
        .server_utilization
        .iter()
        .copied()
        .fold(0.0f64, f64::max);
    let mean_utilization = result.server_utilization.iter().sum::<f64>()
        / result.server_utilization.len().max(1) as f64;
    if busiest <= 0.0 {
        return Err(SimError::Config(
            "calibration: no server did any work".into(),
        ));
    }
    let workers = setup.workers_per_server as f64;
    let mut capacity_rps = probe_rps * workers / busiest;
    // Replica choice moves work off the busiest server as the load grows, so the light run
    // underestimates the capacity: batch runs at the offered rate correct it.
    let mut loaded_busiest_utilization = 0.0;
    for _ in 0..LOADED_CALIBRATION_PASSES {
        if setup.loaded_calibration_requests == 0 {
            break;
        }
        let rate = setup.load * capacity_rps;
        let mut loaded = scenario(
            setup,
            experiment,
            "calibration",
            rate,
            setup.loaded_calibration_requests,
        )?;
        loaded.planner = "batch".to_string();
        let result = run_cluster_with(&loaded, planner(setup, "batch")?)?;
        let busiest = result
            .server_utilization
            .iter()
            .copied()
            .fold(0.0f64, f64::max)
            / workers;
        if busiest <= 0.0 {
            break;
        }
        loaded_busiest_utilization = busiest;
        capacity_rps = rate / busiest;
    }
    Ok(Calibration {
        probe_rps,
        busiest_utilization: busiest,
        mean_utilization,
        capacity_rps,
        rate_rps: setup.load * capacity_rps,
        loaded_busiest_utilization,
        unloaded_p50_us: quantile_us(&result.overall, 0.5),
        unloaded_p99_us: quantile_us(&result.overall, 0.99),
        unloaded_small_p50_us: quantile_us(&result.small, 0.5),
        unloaded_small_p99_us: quantile_us(&result.small, 0.99),
    })
}

/// Latency of one planner's run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlannerOutcome {
    /// Planner.
    pub planner: String,
    /// Mean, µs.
    pub mean_us: f64,
    /// Median, µs.
    pub p50_us: f64,
    /// 95th percentile, µs.
    pub p95_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Requests with a large value: p99, µs (0 if none).
    pub large_p99_us: f64,
    /// Requests without: p99, µs.
    pub small_p99_us: f64,
    /// 99.9th percentile, µs.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub p999_us: f64,
    /// Requests with a large value: median, µs (0 if none).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub large_p50_us: f64,
    /// Requests without: median, µs.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub small_p50_us: f64,
    /// Mice (at most the mix's short key count): median, µs (0: the mix has one size).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub mice_p50_us: f64,
    /// Mice: p99, µs.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub mice_p99_us: f64,
    /// Elephants (more keys): median, µs.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub elephant_p50_us: f64,
    /// Elephants: p99, µs.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub elephant_p99_us: f64,
    /// Achieved rate.
    pub achieved_rps: f64,
    /// Fetches per request.
    pub fetches_per_request: f64,
    /// Mean and busiest server utilization (share of all workers).
    pub mean_utilization: f64,
    /// Busiest server's utilization (share of its workers).
    pub max_utilization: f64,
    /// Simulated seconds.
    pub simulated_secs: f64,
    /// Requests by the lowest priority class among their fetches (planners that set one):
    /// what the planner demoted and what that cost the demoted requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priority_classes: Vec<PriorityClassOutcome>,
    /// Where the time of the requests without a large value went (runs with
    /// [`Setup::small_tail_decomposition`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub small_tail: Option<SmallTail>,
    /// What the size-aware servers did (planners named with [`SIZE_AWARE_SUFFIX`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_aware: Option<SizeAwareReport>,
}

/// The requests of one priority class (the lowest among a request's fetches).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PriorityClassOutcome {
    /// The class (0 highest).
    pub class: u8,
    /// Share of the measured requests.
    pub share: f64,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
}

fn quantile_us(class: &ClassResult, q: f64) -> f64 {
    class
        .histogram
        .as_ref()
        .filter(|h| !h.is_empty())
        .map_or(0.0, |h| h.value_at_quantile(q) as f64 / 1e3)
}

/// The requests of `result` with at most (`mice`) or more than `max_keys` keys, merged.
fn by_key_count(result: &ClusterResult, max_keys: u32, mice: bool) -> ClassResult {
    let mut merged: Option<hdrhistogram::Histogram<u64>> = None;
    for (_, class) in result
        .by_keys
        .iter()
        .filter(|(&keys, _)| (keys <= max_keys) == mice)
    {
        if let Some(histogram) = &class.histogram {
            match &mut merged {
                None => merged = Some(histogram.clone()),
                Some(total) => {
                    // Same bounds and precision: adding cannot fail.
                    let _ = total.add(histogram);
                }
            }
        }
    }
    ClassResult {
        summary: crate::stats::LatencySummary::default(),
        histogram: merged,
    }
}

impl PlannerOutcome {
    /// From a run; `mice_max_keys` splits mice from elephants (`None`: not reported).
    pub fn of(
        result: &ClusterResult,
        workers: usize,
        mice_max_keys: Option<u32>,
    ) -> PlannerOutcome {
        let workers = workers.max(1) as f64;
        let utilization = &result.server_utilization;
        let none = || ClassResult {
            summary: crate::stats::LatencySummary::default(),
            histogram: None,
        };
        let (mice, elephants) = match mice_max_keys {
            Some(max) => (
                by_key_count(result, max, true),
                by_key_count(result, max, false),
            ),
            None => (none(), none()),
        };
        PlannerOutcome {
            planner: result.planner.clone(),
            mean_us: result.overall.summary.mean_us,
            p50_us: quantile_us(&result.overall, 0.5),
            p95_us: quantile_us(&result.overall, 0.95),
            p99_us: quantile_us(&result.overall, 0.99),
            large_p99_us: quantile_us(&result.large, 0.99),
            small_p99_us: quantile_us(&result.small, 0.99),
            p999_us: quantile_us(&result.overall, 0.999),
            large_p50_us: quantile_us(&result.large, 0.5),
            small_p50_us: quantile_us(&result.small, 0.5),
            mice_p50_us: quantile_us(&mice, 0.5),
            mice_p99_us: quantile_us(&mice, 0.99),
            elephant_p50_us: quantile_us(&elephants, 0.5),
            elephant_p99_us: quantile_us(&elephants, 0.99),
            achieved_rps: result.achieved_rps,
            fetches_per_request: result.fetches as f64 / result.requests.max(1) as f64,
            mean_utilization: utilization.iter().sum::<f64>()
                / utilization.len().max(1) as f64
                / workers,
            max_utilization: utilization.iter().copied().fold(0.0, f64::max) / workers,
            simulated_secs: result.duration_secs,
            priority_classes: result
                .by_class
                .iter()
                .map(|(&class, latency)| PriorityClassOutcome {
                    class,
                    share: latency.histogram.as_ref().map_or(0.0, |h| h.len() as f64)
                        / result.measured.max(1) as f64,
                    p50_us: quantile_us(latency, 0.5),
                    p99_us: quantile_us(latency, 0.99),
                })
                .collect(),
            small_tail: result.small_tail,
            size_aware: result.size_aware.clone(),
        }
    }
}

/// Reductions of one planner against the baseline, %.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reduction {
    /// Planner.
    pub planner: String,
    /// p50 reduction, %.
    pub p50_pct: f64,
    /// p95 reduction, %.
    pub p95_pct: f64,
    /// p99 reduction, %.
    pub p99_pct: f64,
    /// p99 over the baseline's.
    pub p99_ratio: f64,
}

/// Reductions of every outcome against the `BASELINE` one (empty if it is missing).
pub fn reductions(outcomes: &[PlannerOutcome]) -> Vec<Reduction> {
    let Some(base) = outcomes.iter().find(|o| o.planner == BASELINE) else {
        return Vec::new();
    };
    outcomes
        .iter()
        .map(|o| Reduction {
            planner: o.planner.clone(),
            p50_pct: gain(base.p50_us, o.p50_us),
            p95_pct: gain(base.p95_us, o.p95_us),
            p99_pct: gain(base.p99_us, o.p99_us),
            p99_ratio: if base.p99_us > 0.0 {
                o.p99_us / base.p99_us
            } else {
                0.0
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::run_cluster_with;

    fn small_setup() -> Setup {
        Setup {
            keyspace: 100_000,
            large_keyspace: 1_000,
            calibration_requests: 5_000,
            ..Setup::default()
        }
    }

    #[test]
    fn experiments_are_the_papers() {
        let list = paper_experiments(&[1_000_000, 10_000_000], 1_000_000);
        let names: Vec<&str> = list.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a-1M", "a-10M", "b-10pct", "b-20pct", "b-50pct"]);
    }

    #[test]
    fn large_values_reach_the_requests_that_carry_them() {
        let setup = small_setup();
        let experiment = &paper_experiments(&[], 20_000)[1];
        let scenario = scenario(&setup, experiment, "batch", 2_000.0, 20_000).unwrap();
        let result = run_cluster_with(&scenario, planner(&setup, "batch").unwrap()).unwrap();
        let large_share = result.large.summary.count as f64 / result.measured as f64;
        assert!((large_share - 0.2).abs() < 0.02, "{large_share}");
        assert_eq!(result.keys_served, result.keys_requested);
    }

    #[test]
    fn calibration_puts_the_busiest_server_at_the_load() {
        let setup = small_setup();
        let experiment = &paper_experiments(&[20_000], 20_000)[0];
        let calibration = calibrate(&setup, experiment).unwrap();
        assert!(calibration.busiest_utilization >= calibration.mean_utilization);
        assert!(calibration.rate_rps > calibration.probe_rps);
        let scenario = scenario(&setup, experiment, "batch", calibration.rate_rps, 20_000).unwrap();
        let result = run_cluster_with(&scenario, planner(&setup, "batch").unwrap()).unwrap();
        let outcome = PlannerOutcome::of(&result, setup.workers_per_server, None);
        assert!(outcome.max_utilization < 0.9, "{outcome:?}");
        assert!(outcome.mean_utilization > 0.3, "{outcome:?}");
    }

    #[test]
    fn suffixed_planners_are_their_planners_with_another_replica_choice() {
        let setup = small_setup();
        for (names, suffix) in [
            (&SPREAD_PLANNERS[..], SPREAD_SUFFIX),
            (&COVER_PLANNERS[..], COVER_SUFFIX),
        ] {
            for name in names {
                let base = name.strip_suffix(suffix).unwrap();
                assert!(PLANNERS.contains(&base), "{name}");
                assert_eq!(planner(&setup, name).unwrap().name(), base);
            }
            assert!(planner(&setup, &format!("nope{suffix}")).is_err());
        }
    }

    #[test]
    fn reductions_are_against_rein_sbf() {
        let outcome = |planner: &str, p99: f64| PlannerOutcome {
            planner: planner.to_string(),
            mean_us: 0.0,
            p50_us: 100.0,
            p95_us: 100.0,
            p99_us: p99,
            ..PlannerOutcome::default()
        };
        let list = reductions(&[outcome("rein-sbf", 200.0), outcome("tailx", 50.0)]);
        assert_eq!(list[1].p99_pct, 75.0);
        assert_eq!(list[1].p99_ratio, 0.25);
        assert!(reductions(&[outcome("tailx", 1.0)]).is_empty());
    }
}
