//! `tailtrim experiment tailx --testbed`: the four planners on the EMULATED testbed — real
//! `tailtrim serve` backends whose workers sleep for an emulated service time and whose
//! replies wait for an emulated network time (docs/emulation.md), behind one real `tailtrim
//! proxy` per planner — and the same cost model in the cluster simulator, so the planners'
//! order can be compared between the two.
//!
//! ```text
//!   Setup (keys, workers, dilated cost model) ─► per experiment: sim calibrate ─► rate
//!        │                                        sim twin: batch, rein-sbf, rein-sds, tailx
//!        ▼
//!   N × serve --dispatch late-binding --no-priorities --emulate-service S --emulate-network N
//!   4 × proxy -r 3 --planner P --backend-window W  (one per planner, same ring)
//!   preload every key once (through the batch proxy; writes reach every replica)
//!   for round: for planner in interleaved_order ─► bench::run_detailed (open loop, Poisson,
//!        one request in flight per connection) ─► HDR histograms kept (V2, base64)
//!   per planner: histograms pooled over rounds ─► p50/p95/p99, reductions vs rein-sbf,
//!        order by p99 ─► compared with the sim twin's
//! ```
//!
//! The backends serve first come, first served (`--no-priorities`): Rein's classes are
//! ordered by each proxy's own per-backend queue behind a window of `W` requests in flight
//! (every planner gets the same window).
//!
//! `tailtrim experiment tailx-testbed` ([`run_served`], [`ServedPriorities`]) runs the other
//! way: the backends serve the classes themselves (strict priority; cost-sbf's requests carry
//! their ageing, `mg … p<class>a<overtakes>`), the proxies keep no window, and a second batch
//! proxy ([`AA_GAUGE`]) measures the host's noise:
//!
//! ```text
//!   N × serve --dispatch late-binding --emulate-service key=…,dilation=D   (strict classes)
//!   batch, batch-aa, rein-sbf, cost-sbf proxies -r 1 --backend-window 0  (cost-rel by
//!   --planners; its requests carry `p<class>a<overtakes>` as cost-sbf's do)
//!   same rounds as above ─► per planner p50/p99, mice and elephants p50/p99
//!   verdict: g = |p99(batch-aa)/p99(batch) − 1|; rein-sbf/batch < 1 − g?; each pair of
//!            batch, rein-sbf, cost-sbf, cost-rel apart by more than g ordered as simulated?
//! ```
//!
//! A backend that serves classes takes one quiet `mg` per key and an `mn`: the emulation
//! charges a fixed cost (`const=`) once per such batch, as once per `get`
//! (`tailtrim_server::emulate::BatchDraw`), so every planner pays it once per fetch. The
//! default model is per key only (`key=25us`), as the runs before that rule had it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::experiment::{keep_run, no_progress, Experiment as _, Progress, ProgressFn};
use crate::histogram::{pooled, Encoded};
use crate::meta::{load_average, Recorder, RunMetadata};
use crate::process::{fetch_stats, Launch, Process, ServerShape};
use crate::results::{read_json, write_json, write_text};
use crate::stats::{interleaved_order, median};
use crate::tables::{Align, Table};
use serde::{Deserialize, Serialize};
use tailtrim_bench::class::Class;
use tailtrim_bench::dist::Distribution;
use tailtrim_bench::workload::{
    Arrival, OpKind, OperationSpec, PoolSpec, Popularity, WorkloadSpec,
};
use tailtrim_bench::{preload, run_detailed, RunConfig};
use tailtrim_policy::planner::DEFAULT_FETCH_COST_KEYS;
use tailtrim_policy::spread::ReplicaChoice;
use tailtrim_sim::cluster::{run_cluster_with_options, ClusterRunOptions, WorkView};
use tailtrim_sim::tailx::{
    calibrate, extra_experiments, paper_experiments, planner, reductions, scenario, Calibration,
    Experiment, Mix, PlannerOutcome, Reduction, Setup, BASELINE, COVER_PLANNERS, COVER_SUFFIX,
    PLANNERS,
};

use super::common::tailtrim_binary;

/// What the CLI passes in.
#[derive(Debug, Clone)]
pub struct Options {
    /// Output directory.
    pub out: PathBuf,
    /// Experiments to run (names as `paper_experiments` gives them); empty: all.
    pub only: Vec<String>,
    /// Backends.
    pub servers: usize,
    /// Workers per backend.
    pub workers: usize,
    /// Offered load, share of the simulator's calibrated capacity.
    pub load: f64,
    /// Dilation of the cost model.
    pub dilation: f64,
    /// Keys with small values.
    pub keys: u64,
    /// Keys with large values.
    pub large_keys: u64,
    /// Bytes of a large value.
    pub large_value_bytes: u64,
    /// Measured seconds per run.
    pub duration: f64,
    /// Unmeasured seconds before each run.
    pub warmup: f64,
    /// Unmeasured seconds of load through each planner's proxy, in turn, before the first
    /// round (0: none): the first measured run after the preload was the slowest of its
    /// planner's (`experiments/tailx-testbed/README.md`, 4b).
    pub first_pass: f64,
    /// Rounds (each planner runs once per round, in rotated order).
    pub repeats: usize,
    /// Requests in flight per backend in each proxy (its priority window).
    pub window: usize,
    /// Requests of each simulator run.
    pub sim_requests: u64,
    /// Bench connections (one request in flight each).
    pub connections: usize,
    /// Pipelined connections from each proxy to each backend (`--server-connections`).
    pub server_connections: usize,
    /// Planners to run (empty: all of [`PLANNERS`]).
    pub planners: Vec<String>,
    /// Offered loads to sweep (empty: `load` alone).
    pub loads: Vec<f64>,
    /// Seed.
    pub seed: u64,
}

/// One measured run of one planner.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Run {
    planner: String,
    round: usize,
    position: usize,
    target_rps: f64,
    achieved_rps: f64,
    completed: u64,
    errors: u64,
    hit_ratio: f64,
    p50_us: f64,
    p95_us: f64,
    p99_us: f64,
    load_average_before: String,
    /// Every request, ns.
    histogram: Encoded,
    /// Requests with a large value, ns.
    large_histogram: Encoded,
    /// Requests of at least 50 keys, ns.
    elephant_histogram: Encoded,
    /// Requests of fewer than 50 keys, ns (files written before it: empty, and left out
    /// again when they are replotted, so they come out as written).
    #[serde(default, skip_serializing_if = "no_histogram")]
    mice_histogram: Encoded,
    /// Requests without a large value, ns (files written before it: empty, left out again).
    #[serde(default, skip_serializing_if = "no_histogram")]
    small_histogram: Encoded,
}

/// A planner's pooled result over the rounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pooled {
    planner: String,
    requests: u64,
    errors: u64,
    mean_us: f64,
    p50_us: f64,
    p95_us: f64,
    p99_us: f64,
    large_p99_us: f64,
    elephant_p99_us: f64,
    /// Mice (fewer than 50 keys) and elephants, p50 and p99 (files written before: 0, and
    /// left out again when they are replotted, so they come out as written).
    #[serde(default, skip_serializing_if = "not_measured")]
    mice_p50_us: f64,
    #[serde(default, skip_serializing_if = "not_measured")]
    mice_p99_us: f64,
    #[serde(default, skip_serializing_if = "not_measured")]
    elephant_p50_us: f64,
    /// Requests without a large value (the small class) and with one, p50 and p99 (files
    /// written before: 0, left out again when replotted).
    #[serde(default, skip_serializing_if = "not_measured")]
    small_p50_us: f64,
    #[serde(default, skip_serializing_if = "not_measured")]
    small_p99_us: f64,
    #[serde(default, skip_serializing_if = "not_measured")]
    large_p50_us: f64,
    /// Median over rounds of each round's p99.
    median_round_p99_us: f64,
    /// Each round's p99, in round order.
    round_p99_us: Vec<f64>,
    /// The proxy's own counters after the last round (delay queue, gate, planner).
    proxy_stats: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ExperimentResult {
    experiment: Experiment,
    /// Offered load of this result, share of the simulated capacity (files written before
    /// load sweeps: 0, meaning the settings' load).
    #[serde(default)]
    load: f64,
    calibration: Calibration,
    /// The simulator's twin runs.
    simulated: Vec<PlannerOutcome>,
    simulated_reductions: Vec<Reduction>,
    /// Planners by simulated p99, best first.
    simulated_order: Vec<String>,
    runs: Vec<Run>,
    emulated: Vec<Pooled>,
    emulated_reductions: Vec<Reduction>,
    /// Planners by pooled emulated p99, best first.
    emulated_order: Vec<String>,
    /// Planner pairs ordered the same way by both (of 6 with all four planners).
    agreeing_pairs: usize,
    /// Planners by the median over rounds of each round's p99, best first (one bad round on
    /// a loaded host moves the pooled p99, not this).
    #[serde(default)]
    emulated_order_by_round_median: Vec<String>,
    /// Pairs the simulator orders alike, by that median.
    #[serde(default)]
    agreeing_pairs_by_round_median: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Metadata {
    #[serde(flatten)]
    run: RunMetadata,
    note: String,
    servers: Vec<String>,
    proxies: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    setup: Setup,
    /// The servers' `--emulate-service`.
    emulate_service: String,
    /// The servers' `--emulate-network` (the simulator's one-way time, both ways, on the
    /// reply).
    emulate_network: String,
    dilation: f64,
    duration_s: f64,
    warmup_s: f64,
    /// The unmeasured pass through every planner before the first round, seconds each
    /// (files written before it: none).
    #[serde(default, skip_serializing_if = "not_measured")]
    first_pass_s: f64,
    repeats: usize,
    window: usize,
    connections: usize,
    /// Proxy-to-backend connections (files written before it: 0, meaning the default, 2).
    #[serde(default)]
    server_connections: usize,
    sim_requests: u64,
    /// The backends served the classes themselves (`mg … p<class>`), strict priority, and
    /// the proxies had no window; false: `--no-priorities` backends and the proxies' gates
    /// (left out of the file, as in files written before the field).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    server_priorities: bool,
}

/// A percentile that files written before it do not carry (no request of its class).
fn not_measured(value: &f64) -> bool {
    *value == 0.0
}

/// A histogram field that files written before it do not carry.
fn no_histogram(histogram: &Encoded) -> bool {
    histogram.0.is_empty()
}

/// What a run keeps (`results.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    metadata: Metadata,
    settings: Settings,
    experiments: Vec<ExperimentResult>,
}

const NOTE: &str = "EMULATED: real tailtrim serve backends (emulated service and network time, \
                    dilated) behind real tailtrim proxies; the simulated columns are the cluster \
                    simulator with the same cost model";

/// The setup both sides run: the simulator's default model, dilated, at the testbed's scale.
fn setup_of(options: &Options) -> Setup {
    let base = Setup::default();
    let dilated = |spec: &str| format!("{spec},dilation={}", options.dilation);
    Setup {
        servers: options.servers,
        workers_per_server: options.workers,
        keyspace: options.keys,
        large_keyspace: options.large_keys,
        large_value_bytes: options.large_value_bytes,
        service: dilated(&base.service),
        network: dilated(&base.network),
        load: options.load,
        calibration_rps: base.calibration_rps / options.dilation.max(1.0),
        tailx_min_delay_us: tailtrim_policy::tailx::DEFAULT_MIN_DELAY_NANOS as f64 / 1e3,
        seed: options.seed,
        ..base
    }
}

/// The server's network hold: the simulator's one-way time counted twice (request and reply)
/// on the reply.
fn emulated_network(options: &Options) -> String {
    format!("const=50us,byte=1ns,dilation={}", options.dilation)
}

fn get(keys: u32, weight: f64) -> OperationSpec {
    OperationSpec {
        kind: OpKind::Get,
        keys,
        weight,
    }
}

/// The bench workload of an experiment: a pool of small and one of large values (both zipf),
/// and exactly the simulator's mix of keys per request.
fn workload_of(setup: &Setup, experiment: &Experiment) -> Result<WorkloadSpec, String> {
    let pool = |name: &str, keys: u64, bytes: u64| PoolSpec {
        name: name.to_string(),
        keys,
        share: 1.0,
        key_size: Distribution::Fixed { value: 20.0 },
        value_size: Distribution::Fixed {
            value: bytes as f64,
        },
        popularity: Popularity::Zipf {
            exponent: setup.zipf,
        },
    };
    let (operations, operation_pools) = match experiment.mix {
        Mix::KeyCounts {
            short_keys,
            long_keys,
            long_share,
        } => (
            vec![
                get(short_keys, 1.0 - long_share),
                get(long_keys, long_share),
            ],
            vec![vec![short_keys, 0], vec![long_keys, 0]],
        ),
        Mix::LargeValues {
            keys,
            request_share,
            large_share,
        } => {
            // As the simulator: round(share × keys) large keys in such a request.
            let large = (large_share * f64::from(keys)).round() as u32;
            (
                vec![get(keys, 1.0 - request_share), get(keys, request_share)],
                vec![vec![keys, 0], vec![keys - large, large]],
            )
        }
        Mix::KeyValueShare { .. } => {
            return Err(format!(
                "{}: large values by key share run in the simulator only",
                experiment.name
            ))
        }
    };
    let spec = WorkloadSpec {
        name: format!("tailx-{}", experiment.name),
        key_seed: 13,
        large_threshold_bytes: setup.small_value_bytes,
        elephant_min_keys: 50,
        max_value_bytes: setup.large_value_bytes.max(setup.small_value_bytes),
        arrival: Arrival::Poisson,
        pools: vec![
            pool("small", setup.keyspace, setup.small_value_bytes),
            pool("large", setup.large_keyspace, setup.large_value_bytes),
        ],
        operations,
        operation_pools,
    };
    spec.validate().map_err(|e| e.to_string())?;
    Ok(spec)
}

/// Planners sorted by a latency, best first.
fn order_by(values: &[(String, f64)]) -> Vec<String> {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1));
    sorted.into_iter().map(|(name, _)| name).collect()
}

/// Pairs of planners that two orders rank the same way.
fn agreeing_pairs(a: &[String], b: &[String]) -> usize {
    let rank = |order: &[String], name: &str| order.iter().position(|n| n == name);
    let mut agree = 0;
    for (i, x) in a.iter().enumerate() {
        for y in &a[i + 1..] {
            if let (Some(bx), Some(by)) = (rank(b, x), rank(b, y)) {
                agree += usize::from(bx < by);
            }
        }
    }
    agree
}

fn simulate(
    setup: &Setup,
    experiment: &Experiment,
    planners: &[&'static str],
    rate: f64,
) -> Result<Vec<PlannerOutcome>, String> {
    planners
        .iter()
        .map(|&name| {
            let simulated = twin_planner(name);
            let scenario = scenario(setup, experiment, simulated, rate, experiment.requests)
                .map_err(|e| e.to_string())?;
            // The proxies estimate the work in flight from their keys in flight: so does the twin.
            let options = ClusterRunOptions {
                work_view: WorkView::Keys {
                    fetch_cost_keys: DEFAULT_FETCH_COST_KEYS,
                },
                ..ClusterRunOptions::default()
            };
            let result = run_cluster_with_options(
                &scenario,
                planner(setup, simulated).map_err(|e| e.to_string())?,
                options,
            )
            .map_err(|e| e.to_string())?;
            Ok(PlannerOutcome {
                planner: name.to_string(),
                ..PlannerOutcome::of(
                    &result,
                    setup.workers_per_server,
                    experiment.mix.mice_max_keys(),
                )
            })
        })
        .collect()
}

/// The proxy counters worth keeping: the planner's, the delay queue's and the gate's.
fn proxy_counters(address: &str) -> BTreeMap<String, String> {
    fetch_stats(address, None)
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, _)| {
            [
                "delay",
                "tailx",
                "planner",
                "gate",
                "fetch_class",
                "queries",
                "query_keys",
            ]
            .iter()
            .any(|part| name.contains(part))
                && !name.contains(':')
        })
        .collect()
}

fn quantile_us(histogram: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    if histogram.is_empty() {
        0.0
    } else {
        histogram.value_at_quantile(q) as f64 / 1e3
    }
}

/// The planners the testbed runs unless told otherwise: the paper's (cost-sbf's classes reach
/// a backend only as Rein's five, and rein-drr's order is the proxy gate's anyway).
pub const TESTBED_PLANNERS: [&str; 4] = ["batch", "rein-sbf", "rein-sds", "tailx"];

/// A second batch proxy, measured like the others: the A/A noise gauge (its difference from
/// `batch` is what the host's noise alone makes).
pub const AA_GAUGE: &str = "batch-aa";

/// The planners `options` selects, in [`PLANNERS`]' order (the A/A gauge right after batch).
fn selected_planners(options: &Options) -> Result<Vec<&'static str>, String> {
    let known = || PLANNERS.iter().chain(&COVER_PLANNERS);
    if let Some(unknown) = options
        .planners
        .iter()
        .find(|p| !known().any(|k| k == p) && p.as_str() != AA_GAUGE)
    {
        return Err(format!(
            "unknown planner {unknown:?} (one of {}, {AA_GAUGE}, or one of {})",
            PLANNERS.join(", "),
            COVER_PLANNERS.join(", ")
        ));
    }
    let gauged = known().flat_map(|&p| {
        let gauge = (p == "batch").then_some(AA_GAUGE);
        std::iter::once(p).chain(gauge)
    });
    Ok(gauged
        .filter(|p| {
            if options.planners.is_empty() {
                TESTBED_PLANNERS.contains(p)
            } else {
                options.planners.iter().any(|q| q == p)
            }
        })
        .collect())
}

/// What one testbed run sets up: the knobs of [`Options`], the model both sides run and how
/// the classes are served.
struct Bed {
    options: Options,
    /// The model of the simulator twin and of the backends' emulation.
    setup: Setup,
    experiments: Vec<Experiment>,
    planners: Vec<&'static str>,
    /// The backends' `--emulate-network` (`None`: no emulated network time).
    network: Option<String>,
    /// The backends serve the classes (strict priority), the proxies keep no window.
    server_priorities: bool,
}

/// The old `--testbed` run: the paper's experiments over `--no-priorities` backends, the
/// classes ordered by the proxies' gates.
fn gated_bed(options: &Options) -> Result<Bed, String> {
    let experiments: Vec<Experiment> =
        paper_experiments(&[options.sim_requests], options.sim_requests)
            .into_iter()
            .filter(|e| options.only.is_empty() || options.only.contains(&e.name))
            .collect();
    Ok(Bed {
        setup: setup_of(options),
        experiments,
        planners: selected_planners(options)?,
        network: Some(emulated_network(options)),
        server_priorities: false,
        options: options.clone(),
    })
}

/// The planner a proxy runs for a testbed name (the A/A gauge's second batch is batch).
/// The planner the simulator twin runs for a testbed planner's name (the A/A gauge is batch).
fn twin_planner(name: &str) -> &str {
    if name == AA_GAUGE {
        "batch"
    } else {
        name
    }
}

/// The proxy's `--planner` and `--replica-choice` for a testbed planner's name.
fn proxy_planner(name: &str) -> (&str, &'static str) {
    let name = twin_planner(name);
    match name.strip_suffix(COVER_SUFFIX) {
        Some(base) => (base, ReplicaChoice::Cover.name()),
        None => (name, ReplicaChoice::C3.name()),
    }
}

/// Runs the testbed experiment (`experiment tailx --testbed`).
pub fn run(options: &Options) -> Result<ExitCode, String> {
    let report = measure(&gated_bed(options)?, &no_progress)?;
    write_json(&options.out, &report)?;
    let markdown = render_markdown(&report);
    write_text(&options.out, "results.md", &markdown)?;
    print!("{markdown}");
    println!("wrote {}", options.out.display());
    Ok(ExitCode::SUCCESS)
}

/// Starts the backends and proxies of `bed`, runs every experiment and planner interleaved,
/// and stops them.
fn measure(bed: &Bed, progress: ProgressFn<'_>) -> Result<Report, String> {
    let options = &bed.options;
    let setup = bed.setup.clone();
    let planners = &bed.planners;
    let loads = if options.loads.is_empty() {
        vec![options.load]
    } else {
        options.loads.clone()
    };
    if bed.experiments.is_empty() {
        return Err("no experiment selected".to_string());
    }
    let service = setup.service.clone();
    let network = bed.network.clone().unwrap_or_else(|| "off".to_string());
    let recorder = Recorder::start();
    let binary = tailtrim_binary()?;
    let shape = ServerShape {
        threads: options.workers,
        memory_mb: 256,
    };
    let mut servers = Vec::new();
    for index in 0..options.servers {
        let mut extra: Vec<String> = ["--dispatch", "late-binding", "--emulate-service", &service]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if !bed.server_priorities {
            extra.push("--no-priorities".to_string());
        }
        if let Some(network) = &bed.network {
            extra.extend(["--emulate-network".to_string(), network.clone()]);
        }
        servers.push(Process::start(Launch::tailtrim_serve(
            &format!("backend{index}"),
            &binary,
            &shape,
            &extra,
        )?)?);
    }
    let backends: Vec<String> = servers.iter().map(Process::address).collect();
    let mut proxies = Vec::new();
    for &name in planners {
        let (proxy_planner, replica_choice) = proxy_planner(name);
        let extra: Vec<String> = [
            "--admin",
            "off",
            "-r",
            &setup.replicas.min(options.servers).to_string(),
            "--planner",
            proxy_planner,
            "--replica-choice",
            replica_choice,
            "-t",
            "1",
            "--backend-window",
            &options.window.to_string(),
            "--timeout-ms",
            "20000",
            "--server-failure-limit",
            "1000000000",
            "--server-connections",
            &options.server_connections.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        proxies.push(Process::start(Launch::tailtrim_proxy(
            &format!("proxy-{name}"),
            &binary,
            &backends,
            false,
            &extra,
        )?)?);
    }
    // Every key once, through the first proxy (all proxies share the ring; writes go to every
    // replica). The (b) mix's workload holds both pools.
    let all_keys = Experiment {
        name: "preload".to_string(),
        mix: Mix::LargeValues {
            keys: 20,
            request_share: 0.2,
            large_share: 0.1,
        },
        requests: 0,
    };
    let preload_spec = workload_of(&setup, &all_keys)?;
    eprintln!(
        "EMULATED testbed: {} backends × {} workers, service {service}, network {network}; \
         preloading {} keys",
        options.servers,
        options.workers,
        preload_spec.total_keys()
    );
    let loaded = preload(&preload_spec, &proxies[0].address(), 64, &mut |_| {})
        .map_err(|e| format!("preload: {e}"))?;
    eprintln!(
        "  preloaded in {:.1} s ({} errors)",
        loaded.seconds, loaded.errors
    );

    let mut results = Vec::new();
    let total_runs =
        (bed.experiments.len() * loads.len() * options.repeats * planners.len()) as u64;
    let mut done_runs = 0;
    for (experiment, &load) in bed
        .experiments
        .iter()
        .flat_map(|e| loads.iter().map(move |l| (e, l)))
    {
        let setup = Setup {
            load,
            ..setup.clone()
        };
        let calibration = calibrate(&setup, experiment).map_err(|e| e.to_string())?;
        let simulated = simulate(&setup, experiment, planners, calibration.rate_rps)?;
        let simulated_order = order_by(
            &simulated
                .iter()
                .map(|o| (o.planner.clone(), o.p99_us))
                .collect::<Vec<_>>(),
        );
        eprintln!(
            "{}: offered {:.0} req/s (load {} × simulated capacity {:.0}); simulated order {:?}",
            experiment.name, calibration.rate_rps, load, calibration.capacity_rps, simulated_order
        );
        let workload = Arc::new(workload_of(&setup, experiment)?);
        if options.first_pass > 0.0 {
            for (index, name) in planners.iter().enumerate() {
                let mut config = RunConfig::new(
                    &proxies[index].address(),
                    calibration.rate_rps,
                    Duration::from_secs_f64(options.first_pass),
                );
                config.drain = Duration::from_secs(20);
                config.connections = options.connections;
                config.max_in_flight = 1;
                config.seed = options.seed.wrapping_sub(1);
                config.timeseries = false;
                run_detailed(&workload, &config, &mut |_| {})
                    .map_err(|e| format!("{} {name} first pass: {e}", experiment.name))?;
                eprintln!("  first pass (unmeasured): {name}");
            }
        }
        let mut runs = Vec::new();
        for round in 0..options.repeats {
            for (position, index) in interleaved_order(planners.len(), round)
                .into_iter()
                .enumerate()
            {
                let name = planners[index];
                let mut config = RunConfig::new(
                    &proxies[index].address(),
                    calibration.rate_rps,
                    Duration::from_secs_f64(options.duration),
                );
                config.warmup = Duration::from_secs_f64(options.warmup);
                config.drain = Duration::from_secs(20);
                config.connections = options.connections;
                config.max_in_flight = 1;
                config.seed = options.seed.wrapping_add(round as u64 * 7_919);
                config.timeseries = false;
                let load_average_before = load_average();
                let output = run_detailed(&workload, &config, &mut |_| {})
                    .map_err(|e| format!("{} {name} round {round}: {e}", experiment.name))?;
                for process in servers.iter_mut().chain(proxies.iter_mut()) {
                    process.check_alive()?;
                }
                let all = output.histograms.get(Class::All);
                let report = &output.report;
                let run = Run {
                    planner: name.to_string(),
                    round,
                    position,
                    target_rps: calibration.rate_rps,
                    achieved_rps: report.achieved_rps,
                    completed: report.completed,
                    errors: report.errors,
                    hit_ratio: report.hit_ratio,
                    p50_us: quantile_us(all, 0.5),
                    p95_us: quantile_us(all, 0.95),
                    p99_us: quantile_us(all, 0.99),
                    load_average_before,
                    histogram: Encoded::encode(all)?,
                    large_histogram: Encoded::encode(output.histograms.get(Class::Large))?,
                    elephant_histogram: Encoded::encode(output.histograms.get(Class::Elephant))?,
                    mice_histogram: Encoded::encode(output.histograms.get(Class::Mice))?,
                    small_histogram: Encoded::encode(output.histograms.get(Class::Small))?,
                };
                eprintln!(
                    "  round {round} {name:<9} {:>6.0} rps  p50 {:>8.0} µs  p99 {:>8.0}  \
                     errors {}  hits {:.3}  load {}",
                    run.achieved_rps,
                    run.p50_us,
                    run.p99_us,
                    run.errors,
                    run.hit_ratio,
                    run.load_average_before
                );
                runs.push(run);
                done_runs += 1;
                progress(Progress {
                    stage: "tailx testbed (EMULATED)",
                    done: done_runs,
                    total: total_runs,
                });
            }
        }
        let emulated: Vec<Pooled> = planners
            .iter()
            .zip(&proxies)
            .map(|(name, proxy)| pool_runs(name, &runs, proxy_counters(&proxy.address())))
            .collect();
        results.push(summarise(
            experiment.clone(),
            load,
            calibration,
            simulated,
            simulated_order,
            runs,
            emulated,
        ));
    }
    let mut metadata = recorder.finish();
    metadata.command = crate::meta::command_line();
    let report = Report {
        metadata: Metadata {
            run: metadata,
            note: NOTE.to_string(),
            servers: servers.iter().map(|p| named(p, &binary)).collect(),
            proxies: proxies.iter().map(|p| named(p, &binary)).collect(),
        },
        settings: Settings {
            setup,
            emulate_service: service,
            emulate_network: network,
            dilation: options.dilation,
            duration_s: options.duration,
            warmup_s: options.warmup,
            first_pass_s: options.first_pass,
            repeats: options.repeats,
            window: options.window,
            connections: options.connections,
            server_connections: options.server_connections,
            sim_requests: options.sim_requests,
            server_priorities: bed.server_priorities,
        },
        experiments: results,
    };
    for process in proxies.into_iter().chain(servers) {
        let _ = process.stop();
    }
    Ok(report)
}

/// Arguments of `tailtrim experiment tailx-testbed`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    about = "Batch vs strict Rein-SBF vs cost-sbf on the EMULATED testbed with the priorities \
             enforced by the backends (tailtrim serve), an A/A gauge (a second batch proxy) and \
             the simulator twin's order beside it"
)]
pub struct Args {
    /// Output directory.
    #[arg(long, default_value = "experiments/tailx-testbed/rare-elephant")]
    pub out: PathBuf,
    /// The simulator's experiment (mix) to run: rare-elephant, or one of the paper's
    /// (a-…, b-…pct).
    #[arg(long, default_value = "rare-elephant")]
    pub experiment: String,
    /// Backends.
    #[arg(long, default_value_t = 16)]
    pub servers: usize,
    /// Workers per backend.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Offered load, share of the simulator twin's calibrated capacity.
    #[arg(long, default_value_t = 0.9)]
    pub load: f64,
    /// Dilation of the service time (the host's own time per request stays small beside it).
    #[arg(long, default_value_t = 400.0)]
    pub dilation: f64,
    /// Service time per fetch before dilation (cost spec). A backend that serves classes takes
    /// one quiet `mg` per key and an `mn`; the emulation charges the fixed cost once per such
    /// batch (docs/emulation.md), so `const=` costs every planner the same per fetch.
    #[arg(long, default_value = "key=25us")]
    pub service: String,
    /// Copies of each key.
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Zipf exponent of key popularity (0: uniform).
    #[arg(long, default_value_t = 0.0)]
    pub zipf: f64,
    /// Keys with small values.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Keys with large values (128 kB each; the mixes with large values draw them uniformly
    /// with `--zipf 0`).
    #[arg(long, default_value_t = 10)]
    pub large_keys: u64,
    /// Planners, `batch-aa` being a second batch proxy (the A/A gauge).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "batch,batch-aa,rein-sbf,cost-sbf"
    )]
    pub planners: Vec<String>,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 40.0)]
    pub duration: f64,
    /// Unmeasured seconds before each run.
    #[arg(long, default_value_t = 5.0)]
    pub warmup: f64,
    /// Unmeasured seconds of load through each planner, in turn, before the first round
    /// (0: none; the first measured run after the preload was the slowest of its planner's).
    #[arg(long, default_value_t = 20.0)]
    pub first_pass: f64,
    /// Rounds (each planner once per round, rotated order).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Bench connections (one request in flight each): more than the load keeps in flight,
    /// or requests queue in the bench.
    #[arg(long, default_value_t = 512)]
    pub connections: usize,
    /// Connections from each proxy to each backend. Many: a backend runs one request of a
    /// connection at a time, so a batch mouse that shares a connection with an elephant's
    /// opset waits for it (Rein's classes have their own, `n / 5` each).
    #[arg(long, default_value_t = 64)]
    pub server_connections: usize,
    /// Requests of each simulator twin run.
    #[arg(long, default_value_t = 200_000)]
    pub sim_requests: u64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Only redraw results.md from `--out`'s results.json.
    #[arg(long)]
    pub replot: bool,
}

/// The bed of `experiment tailx-testbed`: the simulator's model with the given knobs, no
/// network time, backends that serve the classes, proxies without a window.
fn served_bed(args: &Args) -> Result<Bed, String> {
    let options = Options {
        out: args.out.clone(),
        only: vec![args.experiment.clone()],
        servers: args.servers,
        workers: args.workers,
        load: args.load,
        dilation: args.dilation,
        keys: args.keys,
        large_keys: args.large_keys,
        large_value_bytes: Setup::default().large_value_bytes,
        duration: args.duration,
        warmup: args.warmup,
        first_pass: args.first_pass,
        repeats: args.repeats,
        window: 0,
        sim_requests: args.sim_requests,
        connections: args.connections,
        server_connections: args.server_connections,
        planners: args.planners.clone(),
        loads: Vec::new(),
        seed: args.seed,
    };
    let experiments: Vec<Experiment> = paper_experiments(&[args.sim_requests], args.sim_requests)
        .into_iter()
        .chain(extra_experiments(args.sim_requests))
        .filter(|e| e.name == args.experiment)
        .collect();
    if experiments.is_empty() {
        return Err(format!("unknown experiment {:?}", args.experiment));
    }
    let setup = Setup {
        replicas: args.replicas,
        zipf: args.zipf,
        service: format!("{},dilation={}", args.service, args.dilation),
        network: "off".to_string(),
        ..setup_of(&options)
    };
    Ok(Bed {
        planners: selected_planners(&options)?,
        setup,
        experiments,
        network: None,
        server_priorities: true,
        options,
    })
}

/// `experiment tailx-testbed`: batch, its A/A gauge, Rein-SBF and cost-sbf with the
/// priorities enforced by the backends.
pub struct ServedPriorities<'a> {
    args: &'a Args,
}

impl crate::experiment::Experiment for ServedPriorities<'_> {
    type Results = Report;

    fn run(&self, progress: ProgressFn<'_>) -> Result<Report, String> {
        measure(&served_bed(self.args)?, progress)
    }

    fn check(results: &Report) -> Result<usize, String> {
        let mut checked = 0;
        for result in &results.experiments {
            for kept in &result.emulated {
                let again = pool_runs(&kept.planner, &result.runs, kept.proxy_stats.clone());
                let pairs = [
                    (kept.p99_us, again.p99_us),
                    (kept.p50_us, again.p50_us),
                    (kept.mice_p99_us, again.mice_p99_us),
                    (kept.elephant_p99_us, again.elephant_p99_us),
                    (kept.small_p99_us, again.small_p99_us),
                    (kept.large_p99_us, again.large_p99_us),
                ];
                if let Some((got, want)) = pairs.iter().find(|(got, want)| got != want) {
                    return Err(format!(
                        "{} {}: a kept percentile {got} differs from its histograms' {want}",
                        result.experiment.name, kept.planner
                    ));
                }
                checked += pairs.len();
            }
        }
        Ok(checked)
    }

    fn render(results: &Report, out: &Path) -> Result<(), String> {
        write_text(out, "results.md", &render_served(results))?;
        Ok(())
    }

    fn summarise(results: &Report) -> String {
        results
            .experiments
            .iter()
            .map(verdict)
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    }
}

/// Runs `tailtrim experiment tailx-testbed` (or redraws it with `--replot`).
pub fn run_served(args: Args) -> Result<ExitCode, String> {
    if args.replot {
        let (report, checked) = crate::experiment::replot::<ServedPriorities<'_>>(&args.out)?;
        print!("{}", ServedPriorities::summarise(&report));
        println!(
            "redrew {} from its results.json ({checked} percentiles equal their histograms')",
            args.out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let report = keep_run(&ServedPriorities { args: &args }, &args.out, &no_progress)?;
    print!("{}", ServedPriorities::summarise(&report));
    println!("wrote {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

/// The pooled p99 of `planner` in `result`.
fn pooled_p99(result: &ExperimentResult, planner: &str) -> Option<f64> {
    result
        .emulated
        .iter()
        .find(|p| p.planner == planner)
        .map(|p| p.p99_us)
}

/// The acceptance reading of one experiment: the A/A gauge `|p99(batch-aa) / p99(batch) − 1|`,
/// Rein-SBF against batch beyond it, and the simulator's order of the planners on the pairs the
/// testbed resolves.
fn verdict(result: &ExperimentResult) -> String {
    let name = &result.experiment.name;
    let (Some(batch), Some(aa)) = (pooled_p99(result, "batch"), pooled_p99(result, AA_GAUGE))
    else {
        return format!("{name}: no A/A gauge (batch and {AA_GAUGE} both needed)");
    };
    let gauge = (aa / batch - 1.0).abs();
    let mut lines = vec![format!(
        "{name} (EMULATED): A/A gauge |p99({AA_GAUGE}) / p99(batch) − 1| = {:.3}",
        gauge
    )];
    if let Some(rein) = pooled_p99(result, "rein-sbf") {
        let ratio = rein / batch;
        lines.push(format!(
            "rein-sbf p99 / batch = {ratio:.3}: {} (below batch beyond the gauge: < {:.3})",
            if ratio < 1.0 - gauge {
                "met"
            } else {
                "not met"
            },
            1.0 - gauge
        ));
    }
    let simulated = |planner: &str| {
        result
            .simulated
            .iter()
            .find(|o| o.planner == planner)
            .map(|o| o.p99_us)
    };
    // The planners whose order the testbed checks (`batch+cover` left out: its runs compared
    // it with batch in their own reading).
    let compared: Vec<&str> = [
        "batch",
        "rein-sbf",
        "cost-sbf",
        "cost-rel",
        "size-rel",
        "rein-sbf+cover",
        "cost-rel+cover",
        "size-rel+cover",
    ]
    .into_iter()
    .filter(|p| pooled_p99(result, p).is_some() && simulated(p).is_some())
    .collect();
    for (i, &x) in compared.iter().enumerate() {
        for &y in &compared[i + 1..] {
            let (Some(ex), Some(ey), Some(sx), Some(sy)) = (
                pooled_p99(result, x),
                pooled_p99(result, y),
                simulated(x),
                simulated(y),
            ) else {
                continue;
            };
            let reading = if (ex / ey - 1.0).abs() <= gauge {
                "not resolved by the testbed (within the gauge)".to_string()
            } else if sx == sy {
                "the simulator ties them (same decisions), the testbed does not".to_string()
            } else if (ex < ey) == (sx < sy) {
                "same order as simulated".to_string()
            } else {
                "order differs from the simulator's".to_string()
            };
            lines.push(format!(
                "{x} vs {y}: testbed p99 {ex:.0} vs {ey:.0} µs ({:.3}), simulated {sx:.0} vs \
                 {sy:.0} µs: {reading}",
                ex / ey
            ));
        }
    }
    lines.join("\n")
}

/// The heading of one experiment's table.
fn heading(result: &ExperimentResult) -> String {
    format!(
        "\n## {} at load {} (offered {:.0} req/s = {} × simulated capacity {:.0} req/s)\n\n",
        result.experiment.name,
        result.load,
        result.calibration.rate_rps,
        result.load,
        result.calibration.capacity_rps,
    )
}

/// The load average over the run and the commit it ran at.
fn stamp(m: &RunMetadata) -> String {
    format!(
        "Load average {} at the start, {} at the end (highest {:.1}); commit {}{}",
        m.load_average_start,
        m.load_average_end,
        m.load_average_max,
        m.commit,
        if m.dirty { " (dirty)" } else { "" },
    )
}

fn render_served(report: &Report) -> String {
    let s = &report.settings;
    let m = &report.metadata.run;
    let mut out = format!(
        "# EMULATED: priorities enforced in tailtrim serve — batch vs strict Rein-SBF vs \
         cost-sbf (tailtrim experiment tailx-testbed)\n\n\
         {} backends × {} workers (`tailtrim serve --dispatch late-binding --emulate-service \
         {}`, emulated network {}; the backends serve `mg … p<class>` in strict priority, \
         cost-sbf's `p<class>a<overtakes>` aged), one `tailtrim proxy -r {}` per planner (no \
         window; {} connections per backend; `{AA_GAUGE}` is a second batch proxy, the A/A \
         gauge), open-loop Poisson load from `tailtrim bench` ({} connections, one request in \
         flight each), {} keys of {} B (zipf {}).",
        s.setup.servers,
        s.setup.workers_per_server,
        s.emulate_service,
        s.emulate_network,
        s.setup.replicas,
        s.server_connections,
        s.connections,
        s.setup.keyspace,
        s.setup.small_value_bytes,
        s.setup.zipf,
    );
    if report
        .experiments
        .iter()
        .any(|r| matches!(r.experiment.mix, Mix::LargeValues { .. }))
    {
        out.push_str(&format!(
            " Large values: {} keys of {} B; a multiget sent as quiet `mg`s and an `mn` pays \
             the emulated fixed cost once, as a `get` does.",
            s.setup.large_keyspace, s.setup.large_value_bytes,
        ));
    }
    if s.first_pass_s > 0.0 {
        out.push_str(&format!(
            " Before the first round, an unmeasured pass of {} s through each planner.",
            s.first_pass_s
        ));
    }
    out.push_str(&format!(
        " Latencies pooled over {} interleaved round(s) of {} s (+{} s warm-up) per planner, \
         emulated µs (divide by the dilation {} for the modelled system). Simulated columns: \
         the cluster simulator, same cost model, {} requests per planner. Host: {} ({} CPUs), \
         kernel {}; {}.\n",
        s.repeats,
        s.duration_s,
        s.warmup_s,
        s.dilation,
        s.sim_requests,
        m.cpu_model,
        m.cores,
        m.kernel,
        stamp(m),
    ));
    for result in &report.experiments {
        let batch = pooled_p99(result, "batch");
        out.push_str(&heading(result));
        // The small class (requests without a large value) where the runs kept it.
        let classes = result.emulated.iter().any(|p| p.small_p99_us > 0.0);
        let class_columns = [
            ("small p50", Align::Right),
            ("small p99", Align::Right),
            ("small p99 / batch", Align::Right),
            ("large p50", Align::Right),
            ("large p99", Align::Right),
        ];
        let sim_class_columns = [
            ("sim small p99", Align::Right),
            ("sim small p99 / batch", Align::Right),
            ("sim large p99", Align::Right),
        ];
        let mut table = Table::new(
            [
                ("planner", Align::Left),
                ("p50", Align::Right),
                ("p99", Align::Right),
                ("p99 / batch", Align::Right),
                ("mice p50", Align::Right),
                ("mice p99", Align::Right),
                ("elephants p50", Align::Right),
                ("elephants p99", Align::Right),
            ]
            .into_iter()
            .chain(class_columns.into_iter().filter(|_| classes))
            .chain([
                ("round p99s", Align::Right),
                ("sim p50", Align::Right),
                ("sim p99", Align::Right),
                ("sim p99 / batch", Align::Right),
                ("sim mice p99", Align::Right),
                ("sim elephants p99", Align::Right),
            ])
            .chain(sim_class_columns.into_iter().filter(|_| classes))
            .chain([("requests", Align::Right), ("errors", Align::Right)]),
        );
        let small_batch = result
            .emulated
            .iter()
            .find(|p| p.planner == "batch")
            .map(|p| p.small_p99_us);
        let sim_small_batch = result
            .simulated
            .iter()
            .find(|o| o.planner == "batch")
            .map(|o| o.small_p99_us);
        let sim_batch = result
            .simulated
            .iter()
            .find(|o| o.planner == "batch")
            .map(|o| o.p99_us);
        for (index, pooled) in result.emulated.iter().enumerate() {
            let sim = result.simulated.get(index);
            let ratio = |value: f64, base: Option<f64>| {
                base.filter(|b| *b > 0.0)
                    .map_or("–".to_string(), |b| format!("{:.2}", value / b))
            };
            let class_cells = [
                format!("{:.0}", pooled.small_p50_us),
                format!("{:.0}", pooled.small_p99_us),
                ratio(pooled.small_p99_us, small_batch),
                format!("{:.0}", pooled.large_p50_us),
                format!("{:.0}", pooled.large_p99_us),
            ];
            let sim_class_cells = [
                sim.map_or("–".to_string(), |o| format!("{:.0}", o.small_p99_us)),
                sim.map_or("–".to_string(), |o| {
                    ratio(o.small_p99_us, sim_small_batch)
                }),
                sim.map_or("–".to_string(), |o| format!("{:.0}", o.large_p99_us)),
            ];
            table.push(
                [
                    pooled.planner.clone(),
                    format!("{:.0}", pooled.p50_us),
                    format!("{:.0}", pooled.p99_us),
                    ratio(pooled.p99_us, batch),
                    format!("{:.0}", pooled.mice_p50_us),
                    format!("{:.0}", pooled.mice_p99_us),
                    format!("{:.0}", pooled.elephant_p50_us),
                    format!("{:.0}", pooled.elephant_p99_us),
                ]
                .into_iter()
                .chain(class_cells.into_iter().filter(|_| classes))
                .chain([
                    pooled.round_p99s(),
                    sim.map_or("–".to_string(), |o| format!("{:.0}", o.p50_us)),
                    sim.map_or("–".to_string(), |o| format!("{:.0}", o.p99_us)),
                    sim.map_or("–".to_string(), |o| ratio(o.p99_us, sim_batch)),
                    sim.map_or("–".to_string(), |o| format!("{:.0}", o.mice_p99_us)),
                    sim.map_or("–".to_string(), |o| format!("{:.0}", o.elephant_p99_us)),
                ])
                .chain(sim_class_cells.into_iter().filter(|_| classes))
                .chain([pooled.requests.to_string(), pooled.errors.to_string()]),
            );
        }
        out.push_str(&table.render());
        out.push_str(&format!("\n```text\n{}\n```\n", verdict(result)));
    }
    out
}

/// A process's command line with the executable's path shortened to `tailtrim`.
fn named(process: &Process, binary: &Path) -> String {
    process
        .command_line()
        .replacen(&binary.display().to_string(), "tailtrim", 1)
}

impl Pooled {
    /// Each round's p99, `a / b / c`.
    fn round_p99s(&self) -> String {
        let rounds: Vec<String> = self
            .round_p99_us
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect();
        rounds.join(" / ")
    }
}

fn pool_runs(name: &str, runs: &[Run], proxy_stats: BTreeMap<String, String>) -> Pooled {
    let mine: Vec<&Run> = runs.iter().filter(|r| r.planner == name).collect();
    let all = pooled(mine.iter().map(|r| &r.histogram));
    let large = pooled(mine.iter().map(|r| &r.large_histogram));
    let elephant = pooled(mine.iter().map(|r| &r.elephant_histogram));
    let mice = pooled(mine.iter().map(|r| &r.mice_histogram));
    let small = pooled(mine.iter().map(|r| &r.small_histogram));
    let q = |h: &Option<hdrhistogram::Histogram<u64>>, q: f64| {
        h.as_ref().map_or(0.0, |h| quantile_us(h, q))
    };
    let round_p99_us: Vec<f64> = mine.iter().map(|r| r.p99_us).collect();
    Pooled {
        planner: name.to_string(),
        requests: mine.iter().map(|r| r.completed).sum(),
        errors: mine.iter().map(|r| r.errors).sum(),
        mean_us: all.as_ref().map_or(0.0, |h| h.mean() / 1e3),
        p50_us: q(&all, 0.5),
        p95_us: q(&all, 0.95),
        p99_us: q(&all, 0.99),
        large_p99_us: q(&large, 0.99),
        elephant_p99_us: q(&elephant, 0.99),
        mice_p50_us: q(&mice, 0.5),
        mice_p99_us: q(&mice, 0.99),
        elephant_p50_us: q(&elephant, 0.5),
        small_p50_us: q(&small, 0.5),
        small_p99_us: q(&small, 0.99),
        large_p50_us: q(&large, 0.5),
        median_round_p99_us: median(&round_p99_us),
        round_p99_us,
        proxy_stats,
    }
}

fn summarise(
    experiment: Experiment,
    load: f64,
    calibration: Calibration,
    simulated: Vec<PlannerOutcome>,
    simulated_order: Vec<String>,
    runs: Vec<Run>,
    emulated: Vec<Pooled>,
) -> ExperimentResult {
    let as_outcomes: Vec<PlannerOutcome> = emulated
        .iter()
        .map(|p| PlannerOutcome {
            planner: p.planner.clone(),
            mean_us: p.mean_us,
            p50_us: p.p50_us,
            p95_us: p.p95_us,
            p99_us: p.p99_us,
            large_p99_us: p.large_p99_us,
            ..PlannerOutcome::default()
        })
        .collect();
    let emulated_order = order_by(
        &emulated
            .iter()
            .map(|p| (p.planner.clone(), p.p99_us))
            .collect::<Vec<_>>(),
    );
    let emulated_order_by_round_median = order_by(
        &emulated
            .iter()
            .map(|p| (p.planner.clone(), p.median_round_p99_us))
            .collect::<Vec<_>>(),
    );
    ExperimentResult {
        agreeing_pairs: agreeing_pairs(&simulated_order, &emulated_order),
        agreeing_pairs_by_round_median: agreeing_pairs(
            &simulated_order,
            &emulated_order_by_round_median,
        ),
        emulated_order_by_round_median,
        simulated_reductions: reductions(&simulated),
        emulated_reductions: reductions(&as_outcomes),
        experiment,
        load,
        calibration,
        simulated,
        simulated_order,
        runs,
        emulated,
        emulated_order,
    }
}

/// Redraws results.md from `<out>/results.json`.
pub fn replot(out: &Path) -> Result<ExitCode, String> {
    let mut report: Report = read_json(out)?;
    // Orders and reductions again from the kept data (files written before a field existed).
    report.experiments = report
        .experiments
        .into_iter()
        .map(|r| {
            let load = if r.load > 0.0 {
                r.load
            } else {
                report.settings.setup.load
            };
            summarise(
                r.experiment,
                load,
                r.calibration,
                r.simulated,
                r.simulated_order,
                r.runs,
                r.emulated,
            )
        })
        .collect();
    write_json(out, &report)?;
    let markdown = render_markdown(&report);
    write_text(out, "results.md", &markdown)?;
    print!("{markdown}");
    println!("redrew {} from its results.json", out.display());
    Ok(ExitCode::SUCCESS)
}

fn render_markdown(report: &Report) -> String {
    let s = &report.settings;
    let m = &report.metadata.run;
    let mut out = format!(
        "# EMULATED: TailX vs Rein vs batch on the testbed (tailtrim experiment tailx --testbed)\n\n\
         {} backends × {} workers (`tailtrim serve --dispatch late-binding --no-priorities \
         --emulate-service {} --emulate-network {}`), one `tailtrim proxy -r {}` per planner \
         (`--backend-window {}`: Rein's classes ordered by the proxy's DRR queue; {} connections \
         per backend), open-loop \
         Poisson load from `tailtrim bench` ({} connections, one request in flight each), \
         {} keys of {} B and {} of {} B (zipf {}). {} round(s) of {} s (+{} s warm-up) per \
         planner, interleaved; latencies pooled over the rounds, in emulated time (µs; divide \
         by the dilation {} for the modelled system). Simulated columns: the cluster simulator, \
         same cost model, {} requests per planner. {}.\n",
        s.setup.servers,
        s.setup.workers_per_server,
        s.emulate_service,
        s.emulate_network,
        s.setup.replicas,
        s.window,
        if s.server_connections == 0 {
            2
        } else {
            s.server_connections
        },
        s.connections,
        s.setup.keyspace,
        s.setup.small_value_bytes,
        s.setup.large_keyspace,
        s.setup.large_value_bytes,
        s.setup.zipf,
        s.repeats,
        s.duration_s,
        s.warmup_s,
        s.dilation,
        s.sim_requests,
        stamp(m),
    );
    for result in &report.experiments {
        let planners = result.emulated.len();
        let pairs = planners * planners.saturating_sub(1) / 2;
        out.push_str(&heading(result));
        let mut table = Table::aligned(
            [
                "planner",
                "requests",
                "errors",
                "p50",
                "p95",
                "p99",
                "p99 / rein-sbf",
                "p99 red.",
                "p50 red.",
                "round p99s",
                "their median",
                "sim p50",
                "sim p99",
                "sim p99 / rein-sbf",
                "p99 / sim p99",
            ],
            Align::Left,
        );
        for (index, pooled) in result.emulated.iter().enumerate() {
            let red = result.emulated_reductions.get(index);
            let sim = result.simulated.get(index);
            let sim_red = result.simulated_reductions.get(index);
            // Without the baseline among the planners there are no reductions.
            let or_dash = |value: Option<String>| value.unwrap_or_else(|| "–".to_string());
            let sim_p99 = sim.map_or(0.0, |o| o.p99_us);
            table.push([
                pooled.planner.clone(),
                pooled.requests.to_string(),
                pooled.errors.to_string(),
                format!("{:.0}", pooled.p50_us),
                format!("{:.0}", pooled.p95_us),
                format!("{:.0}", pooled.p99_us),
                or_dash(red.map(|r| format!("{:.2}", r.p99_ratio))),
                or_dash(red.map(|r| format!("{:.1} %", r.p99_pct))),
                or_dash(red.map(|r| format!("{:.1} %", r.p50_pct))),
                pooled.round_p99s(),
                format!("{:.0}", pooled.median_round_p99_us),
                format!("{:.0}", sim.map_or(0.0, |o| o.p50_us)),
                format!("{sim_p99:.0}"),
                or_dash(sim_red.map(|r| format!("{:.2}", r.p99_ratio))),
                or_dash((sim_p99 > 0.0).then(|| format!("{:.2}", pooled.p99_us / sim_p99))),
            ]);
        }
        out.push_str(&table.render());
        if pairs == 0 {
            continue;
        }
        out.push_str(&format!(
            "\nOrder by p99, best first — simulated: {}; emulated, pooled p99: {} ({} of {pairs} \
             planner pairs ordered as simulated); emulated, median of the rounds' p99s: {} \
             ({} of {pairs}).\n",
            result.simulated_order.join(" < "),
            result.emulated_order.join(" < "),
            result.agreeing_pairs,
            result.emulated_order_by_round_median.join(" < "),
            result.agreeing_pairs_by_round_median,
        ));
    }
    out.push_str(&format!(
        "\nBaseline of the ratios and reductions: {BASELINE}.\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_and_agreement() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let order = order_by(&[("b".into(), 3.0), ("a".into(), 1.0), ("c".into(), 2.0)]);
        assert_eq!(order, names(&["a", "c", "b"]));
        let a = names(&["w", "x", "y", "z"]);
        assert_eq!(agreeing_pairs(&a, &a), 6);
        assert_eq!(agreeing_pairs(&a, &names(&["z", "y", "x", "w"])), 0);
        assert_eq!(agreeing_pairs(&a, &names(&["x", "w", "y", "z"])), 5);
    }

    #[test]
    fn planners_are_selected_in_their_usual_order_and_unknown_ones_refused() {
        let mut options = test_options();
        assert_eq!(
            selected_planners(&options).expect("all"),
            TESTBED_PLANNERS.to_vec()
        );
        options.planners = vec!["tailx".into(), "batch".into()];
        assert_eq!(
            selected_planners(&options).expect("two"),
            vec!["batch", "tailx"]
        );
        options.planners = vec!["fifo".into()];
        assert!(selected_planners(&options).is_err());
    }

    #[test]
    fn the_aa_gauge_follows_batch_and_is_a_batch_proxy() {
        let mut options = test_options();
        options.planners = vec!["cost-sbf".into(), AA_GAUGE.into(), "batch".into()];
        assert_eq!(
            selected_planners(&options).expect("three"),
            vec!["batch", AA_GAUGE, "cost-sbf"]
        );
        assert_eq!(proxy_planner(AA_GAUGE), ("batch", "c3"));
        assert_eq!(proxy_planner("rein-sbf"), ("rein-sbf", "c3"));
        assert_eq!(proxy_planner("batch+cover"), ("batch", "cover"));
        assert_eq!(twin_planner("batch+cover"), "batch+cover");
    }

    #[test]
    fn the_served_bed_runs_the_bare_model_with_backends_that_serve_the_classes() {
        let args = Args {
            out: PathBuf::new(),
            experiment: "rare-elephant".into(),
            servers: 16,
            workers: 4,
            load: 0.9,
            dilation: 400.0,
            service: "key=25us".into(),
            replicas: 1,
            zipf: 0.0,
            keys: 1_000,
            large_keys: 20,
            planners: vec!["batch".into(), AA_GAUGE.into(), "rein-sbf".into()],
            duration: 1.0,
            warmup: 0.0,
            first_pass: 0.0,
            repeats: 1,
            connections: 4,
            server_connections: 20,
            sim_requests: 1_000,
            seed: 1,
            replot: false,
        };
        let bed = served_bed(&args).expect("bed");
        assert!(bed.server_priorities);
        assert_eq!(bed.network, None);
        assert_eq!(bed.options.window, 0);
        assert_eq!(bed.setup.service, "key=25us,dilation=400");
        assert_eq!(bed.setup.large_keyspace, 20);
        assert_eq!(bed.setup.network, "off");
        assert_eq!((bed.setup.replicas, bed.setup.zipf), (1, 0.0));
        assert_eq!(bed.experiments.len(), 1);
        assert_eq!(bed.experiments[0].name, "rare-elephant");
        assert!(served_bed(&Args {
            experiment: "no-such-mix".into(),
            ..args
        })
        .is_err());
    }

    /// An experiment result with these emulated and simulated p99s, µs.
    fn result_with(p99s: &[(&str, f64, f64)]) -> ExperimentResult {
        let calibration: Calibration = serde_json::from_value(serde_json::json!({
            "probe_rps": 1.0, "busiest_utilization": 0.5, "mean_utilization": 0.5,
            "capacity_rps": 2.0, "rate_rps": 1.8
        }))
        .expect("calibration");
        let experiment = extra_experiments(1_000).remove(0);
        let emulated = p99s
            .iter()
            .map(|&(planner, p99_us, _)| {
                let mut pooled = pool_runs(planner, &[], BTreeMap::new());
                pooled.p99_us = p99_us;
                pooled
            })
            .collect();
        let simulated = p99s
            .iter()
            .map(|&(planner, _, p99_us)| PlannerOutcome {
                planner: planner.to_string(),
                p99_us,
                ..PlannerOutcome::default()
            })
            .collect();
        summarise(
            experiment,
            0.9,
            calibration,
            simulated,
            Vec::new(),
            Vec::new(),
            emulated,
        )
    }

    #[test]
    fn the_verdict_reads_every_difference_against_the_aa_gauge() {
        let result = result_with(&[
            ("batch", 1_000.0, 700.0),
            (AA_GAUGE, 1_050.0, 700.0),
            ("rein-sbf", 800.0, 400.0),
            ("cost-sbf", 820.0, 400.0),
            ("cost-rel", 700.0, 300.0),
        ]);
        let text = verdict(&result);
        assert!(text.contains("= 0.050"), "{text}");
        assert!(text.contains("rein-sbf p99 / batch = 0.800: met"), "{text}");
        assert!(
            text.contains("batch vs rein-sbf: testbed p99 1000 vs 800 µs (1.250), simulated 700 vs 400 µs: same order as simulated"),
            "{text}"
        );
        assert!(
            text.contains("rein-sbf vs cost-sbf: testbed p99 800 vs 820 µs (0.976), simulated 400 vs 400 µs: not resolved by the testbed (within the gauge)"),
            "{text}"
        );
        // cost-rel's pairs are read too.
        assert!(
            text.contains("rein-sbf vs cost-rel: testbed p99 800 vs 700 µs (1.143), simulated 400 vs 300 µs: same order as simulated"),
            "{text}"
        );
        // Within the gauge of batch: not met.
        let close = result_with(&[
            ("batch", 1_000.0, 700.0),
            (AA_GAUGE, 900.0, 700.0),
            ("rein-sbf", 950.0, 400.0),
        ]);
        assert!(
            verdict(&close).contains("rein-sbf p99 / batch = 0.950: not met"),
            "{}",
            verdict(&close)
        );
        let reversed = result_with(&[
            ("batch", 800.0, 700.0),
            (AA_GAUGE, 800.0, 700.0),
            ("rein-sbf", 1_000.0, 400.0),
        ]);
        assert!(verdict(&reversed).contains("order differs from the simulator's"));
        let tie = result_with(&[
            ("batch", 1_000.0, 700.0),
            (AA_GAUGE, 1_000.0, 700.0),
            ("rein-sbf", 800.0, 400.0),
            ("cost-sbf", 900.0, 400.0),
        ]);
        assert!(verdict(&tie).contains("the simulator ties them"));
    }

    fn test_options() -> Options {
        Options {
            out: PathBuf::new(),
            only: Vec::new(),
            servers: 16,
            workers: 1,
            load: 0.75,
            dilation: 40.0,
            keys: 1_000,
            large_keys: 10,
            large_value_bytes: 128_000,
            duration: 1.0,
            warmup: 0.0,
            first_pass: 0.0,
            repeats: 1,
            window: 4,
            sim_requests: 1_000,
            connections: 4,
            server_connections: 2,
            planners: Vec::new(),
            loads: Vec::new(),
            seed: 1,
        }
    }

    #[test]
    fn the_workloads_draw_the_simulators_mix() {
        let options = test_options();
        let setup = setup_of(&options);
        assert_eq!(setup.calibration_rps, 25.0);
        assert!(setup.service.ends_with("dilation=40"));
        for experiment in paper_experiments(&[1_000], 1_000) {
            let spec = workload_of(&setup, &experiment).expect("workload");
            let mut generator = tailtrim_bench::workload::RequestGenerator::new(
                Arc::new(spec),
                tailtrim_bench::rng::Rng::new(1),
            );
            for _ in 0..200 {
                let operation = generator.next_operation();
                let large = operation.keys.iter().filter(|k| k.pool == 1).count();
                match experiment.mix {
                    Mix::KeyCounts { .. } => {
                        assert!(matches!(operation.keys.len(), 5 | 100));
                        assert_eq!(large, 0);
                    }
                    Mix::LargeValues { large_share, .. } => {
                        assert_eq!(operation.keys.len(), 20);
                        let expected = (large_share * 20.0).round() as usize;
                        assert!(large == 0 || large == expected, "{large}");
                    }
                    Mix::KeyValueShare { .. } => {}
                }
            }
        }
    }
}
