//! `tailtrim experiment tailx`: TailX, Rein (SBF, SDS) and batching at 16 servers in the
//! cluster simulator (`tailtrim_sim::tailx`). SIMULATED: no server runs.
//!
//! ```text
//!   flags ─► tailtrim_sim::tailx::Setup ─► paper_experiments (a at 1M and 10M, b at 10/20/50 %)
//!                                          + rare-elephant, keys20-1pct-large (--extra-requests)
//!        ─► per experiment: calibrate (light batch run) ─► rate = load × capacity
//!           ─► batch, rein-sbf, rein-sds, rein-drr, tailx, cost-sbf, cost-rel, size-rel
//!              (--planners; --jobs threads; each run timed; open loop, or closed loop with
//!              --clients; --decompose-small-tail, --planner-knows-sizes)
//!        ─► <out>/results.json, results.md (per class: mice, elephants, small, large;
//!           queueing = loaded − unloaded), <experiment>.svg (p50/p95/p99 per planner)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Instant;

use plotters::prelude::{IntoDrawingArea, RGBColor, SVGBackend, WHITE};
use serde::{Deserialize, Serialize};
use tailtrim_sim::cluster::{run_cluster_with_options, ClosedLoop, ClusterResult, ServerQueue};
use tailtrim_sim::tailx::{
    calibrate, extra_experiments, paper_experiments, planner, reductions, scenario, short_count,
    split_size_aware, Calibration, Experiment, PlannerOutcome, Reduction, Setup, BASELINE,
    COVER_PLANNERS, PLANNERS, SIZE_AWARE_PLANNERS, SPREAD_PLANNERS,
};

use crate::experiment::{
    self, keep_run, no_progress, replot, Experiment as _, Progress, ProgressFn,
};
use crate::figures::{draw_bars, drawing_failed};
use crate::histogram::Encoded;
use crate::meta::{Recorder, SeededMetadata};
use crate::report::sim_cluster::MinosArgs;
use crate::results::write_text;
use crate::tables::{Align, Table};

/// Arguments of `tailtrim experiment tailx`.
#[derive(clap::Args, Debug)]
#[command(
    about = "TailX vs Rein vs batch at 16 servers in the cluster simulator (SIMULATED), or on \
             the emulated testbed beside it (--testbed, EMULATED)"
)]
pub struct Args {
    /// Output directory (default experiments/tailx/sim, with --testbed experiments/tailx/testbed).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Requests of each run of experiment (a), one experiment per value.
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    a_requests: Vec<u64>,
    /// Requests of each run of experiment (b).
    #[arg(long, default_value_t = 1_000_000)]
    b_requests: u64,
    /// Requests of each run of the experiments beside the paper's (rare-elephant: 99.5 %
    /// 2-key and 0.5 % 500-key multigets; keys20-1pct-large: 20-key multigets, 1 % of keys at
    /// 100 KB); 0: not run.
    #[arg(long, default_value_t = 1_000_000)]
    extra_requests: u64,
    /// Only these experiments (a-1M, a-10M, b-10pct, b-20pct, b-50pct, rare-elephant,
    /// keys20-1pct-large).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Copies of each key (simulator).
    #[arg(long, default_value_t = Setup::default().replicas)]
    replicas: usize,
    /// Zipf exponent of key popularity (simulator; 0: uniform).
    #[arg(long, default_value_t = Setup::default().zipf)]
    zipf: f64,
    /// How servers order prioritized fetches (simulator): planner (each planner's own:
    /// strict for rein-sbf/sds, drr for rein-drr, aged strict priority for cost-sbf), strict, drr.
    #[arg(long, default_value = "planner")]
    server_queue: String,
    /// cost-sbf: later arrivals that may overtake an opset at a server per class between
    /// them (ageing; no class starves).
    #[arg(long, default_value_t = Setup::default().overtakes)]
    overtakes: u64,
    /// cost-rel (and auto): later arrivals that may overtake an opset at a server per class
    /// between them (its ageing, tighter than cost-sbf's).
    #[arg(long, default_value_t = Setup::default().rel_overtakes)]
    rel_overtakes: u64,
    /// size-rel: later arrivals that may overtake an opset at a server per class between
    /// them (its own ageing, tighter than cost-rel's).
    #[arg(long, default_value_t = tailtrim_policy::sizerel::DEFAULT_SIZE_REL_OVERTAKES)]
    size_rel_overtakes: u64,
    /// size-rel with the covering replica choice: for a request without a large value, the
    /// weight of a server's demoted work not in service (which its fetches overtake); 1 weighs
    /// it whole, as before the rule (reproduces the runs before `sim-v13-first-class`).
    #[arg(long, default_value_t = tailtrim_policy::sizerel::DEMOTED_WORK_WEIGHT)]
    size_rel_demoted_weight: f64,
    /// cost-rel: bottlenecks up to this many times the typical one share class 0 (first come
    /// first served); each doubling beyond is one class lower.
    #[arg(long, default_value_t = Setup::default().rel_spread)]
    rel_spread: f64,
    /// cost-rel: demote the opsets that are not the bottleneck by their estimated slack (off
    /// by default: classes by the bottleneck's key count only).
    #[arg(long)]
    rel_slack: bool,
    /// cost-rel: rank a request by its costliest opset's estimated cost (a large value counts
    /// as T_L / T_S small keys) instead of its largest opset's key count.
    #[arg(long)]
    rel_by_cost: bool,
    /// cost-rel: share of requests that may be demoted (only bottlenecks rarer than it are;
    /// 1: no limit).
    #[arg(long, default_value_t = Setup::default().rel_budget)]
    rel_budget: f64,
    /// Planners are told every key's value size before they plan (simulator; what a server
    /// knows of its own items), instead of learning sizes from the replies they saw.
    #[arg(long)]
    planner_knows_sizes: bool,
    /// Planners see no estimate of the servers' work in flight (the proxy's view): the
    /// `+cover` replica choice then weighs a backlog as (outstanding + 1) × latency.
    #[arg(long)]
    hide_work: bool,
    /// Planners see each server's keys in flight plus this fixed cost per fetch, in keys (the
    /// client's and proxy's view, `[pool] fetch_cost_keys`), instead of the mean service times
    /// of the simulator's cost model.
    #[arg(long, conflicts_with = "hide_work", value_name = "KEYS")]
    work_from_keys: Option<f64>,
    /// Split the time of the requests without a large value along their slowest opset
    /// (waiting behind opsets holding a large value, behind others, service, the rest).
    #[arg(long)]
    decompose_small_tail: bool,
    /// Closed loop (simulator): this many clients, each waiting for its reply (YCSB's
    /// model) instead of open-loop arrivals at --load; 0: open loop.
    #[arg(long, default_value_t = 0)]
    clients: usize,
    /// Closed loop: mean think time between a reply and the client's next request, µs.
    #[arg(long, default_value_t = 0.0)]
    think_us: f64,
    /// Offered load, share of the calibrated capacity.
    #[arg(long, default_value_t = Setup::default().load)]
    load: f64,
    /// TailX's smallest allowance worth a delay, µs.
    #[arg(long, default_value_t = Setup::default().tailx_min_delay_us)]
    min_delay_us: f64,
    /// Worker threads per server (each server's queue is shared by its workers).
    #[arg(long, default_value_t = Setup::default().workers_per_server)]
    workers: usize,
    /// Simulated service time per fetch (the emulation's cost-model syntax, e.g.
    /// `const=1ms,key=250us,byte=25ns,dist=exp` for a disk-bound store).
    #[arg(long, default_value_t = Setup::default().service)]
    service: String,
    /// Simulated one-way network time per message (cost-model syntax).
    #[arg(long, default_value_t = Setup::default().network)]
    network: String,
    /// Rate of the light calibration run that measures the busiest server's utilisation
    /// (requests/s); lower it with a slower `--service` so the probe stays light.
    #[arg(long, default_value_t = Setup::default().calibration_rps)]
    calibration_rps: f64,
    /// Requests of each of the two loaded batch runs that correct the calibration (0: the
    /// light run only).
    #[arg(long, default_value_t = Setup::default().loaded_calibration_requests)]
    loaded_calibration_requests: u64,
    /// Planner runs at once (threads).
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Only redraw results.md and the figures from `<out>/results.json` (no simulation).
    #[arg(long)]
    replot: bool,
    /// EMULATED testbed: real `tailtrim serve` backends (emulated service and network time)
    /// behind one real `tailtrim proxy` per planner, beside the simulator with the same model.
    #[arg(long)]
    testbed: bool,
    /// Servers (backends on the testbed).
    #[arg(long, default_value_t = 16)]
    servers: usize,
    /// Testbed: dilation of the cost model (emulated times ≥ ~1 ms).
    #[arg(long, default_value_t = 40.0)]
    dilation: f64,
    /// Testbed: keys with small (1000 B) values.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Testbed: keys with large values.
    #[arg(long, default_value_t = 1_000)]
    large_keys: u64,
    /// Bytes of a large value in experiment (b) (simulator and testbed).
    #[arg(long, default_value_t = Setup::default().large_value_bytes)]
    large_value_bytes: u64,
    /// Testbed: measured seconds per run.
    #[arg(long, default_value_t = 8.0)]
    duration: f64,
    /// Testbed: unmeasured seconds before each run.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Testbed: rounds (every planner once per round, rotated order).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Testbed: requests in flight per backend in each proxy (its priority window).
    #[arg(long, default_value_t = 4)]
    window: usize,
    /// Testbed: requests of each twin simulator run.
    #[arg(long, default_value_t = 100_000)]
    sim_requests: u64,
    /// Testbed: bench connections (one request in flight each).
    #[arg(long, default_value_t = 128)]
    connections: usize,
    /// Testbed: pipelined connections from each proxy to each backend.
    #[arg(long, default_value_t = 2)]
    server_connections: usize,
    /// Only these planners (batch, rein-sbf, rein-sds, rein-drr, tailx, cost-sbf, cost-rel,
    /// size-rel; in the simulator also batch+minos, cost-rel+minos: the planner on servers
    /// with size-aware workers; and batch+spread, rein-sbf+spread, rein-sds+spread,
    /// cost-sbf+spread, cost-rel+spread: the planner with its replica choice spreading each
    /// request's keys; batch+cover, rein-sbf+cover, cost-sbf+cover, cost-rel+cover,
    /// size-rel+cover: its keys gathered on few replicas, weighed by their estimated backlog);
    /// default all but the +minos, +spread and +cover ones in the simulator, the paper's four
    /// on the testbed.
    #[arg(long, value_delimiter = ',')]
    planners: Vec<String>,
    /// The servers of the +minos planners.
    #[command(flatten)]
    minos: MinosArgs,
    /// Testbed: a sweep of offered loads (shares of the simulated capacity) instead of
    /// `--load`, each measured and simulated (e.g. 0.2,0.4,0.6,0.8,1.0,1.2).
    #[arg(long, value_delimiter = ',')]
    loads: Vec<f64>,
}

#[derive(Serialize, Deserialize)]
struct Timed {
    #[serde(flatten)]
    outcome: PlannerOutcome,
    /// Wall seconds of the run on this machine.
    wall_secs: f64,
    /// The run's latency histograms (nanoseconds; hdrhistogram V2, base64): `all` (which
    /// p50/p95/p99 are read from), `large` and `small` (requests with and without a large
    /// value: `large_p99_us`, `small_p99_us`). Absent in files written before they were kept.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    histograms: BTreeMap<String, Encoded>,
}

/// The histograms of `result` that [`PlannerOutcome::of`] reads its percentiles from.
fn kept_histograms(result: &ClusterResult) -> Result<BTreeMap<String, Encoded>, String> {
    let mut kept = BTreeMap::new();
    for (name, class) in [
        ("all", &result.overall),
        ("large", &result.large),
        ("small", &result.small),
    ] {
        if let Some(histogram) = &class.histogram {
            kept.insert(name.to_string(), Encoded::encode(histogram)?);
        }
    }
    Ok(kept)
}

/// Checks that the p99s an outcome reports are its kept histograms' (none kept: nothing to
/// check); the number of outcomes checked.
fn check_histograms(experiments: &[ExperimentResult]) -> Result<usize, String> {
    let mut checked = 0;
    for timed in experiments.iter().flat_map(|e| &e.outcomes) {
        if timed.histograms.is_empty() {
            continue;
        }
        let outcome = &timed.outcome;
        for (class, reported) in [
            ("all", outcome.p99_us),
            ("large", outcome.large_p99_us),
            ("small", outcome.small_p99_us),
        ] {
            let again = timed
                .histograms
                .get(class)
                .and_then(|encoded| encoded.percentile(99.0, 1e3))
                .unwrap_or(0.0);
            if (again - reported).abs() > 1e-3 {
                return Err(format!(
                    "{} {class}: reported p99 {reported} µs, its histogram's {again} µs",
                    outcome.planner
                ));
            }
        }
        checked += 1;
    }
    Ok(checked)
}

#[derive(Serialize, Deserialize)]
struct ExperimentResult {
    experiment: Experiment,
    calibration: Calibration,
    outcomes: Vec<Timed>,
    reductions_vs_rein_sbf: Vec<Reduction>,
}

/// What a run of the simulated experiment keeps (`results.json`).
#[derive(Serialize, Deserialize)]
pub struct Report {
    metadata: SeededMetadata,
    setup: Setup,
    experiments: Vec<ExperimentResult>,
}

/// Runs `tailtrim experiment tailx`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    if args.testbed {
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("experiments/tailx/testbed"));
        if args.replot {
            return super::tailx_testbed::replot(&out);
        }
        let defaults = Setup::default();
        if args.service != defaults.service
            || args.network != defaults.network
            || args.calibration_rps != defaults.calibration_rps
        {
            return Err(
                "--service, --network and --calibration-rps set the simulated runs only; \
                 the testbed's cost model is its own"
                    .to_string(),
            );
        }
        return super::tailx_testbed::run(&super::tailx_testbed::Options {
            out,
            only: args.only,
            servers: args.servers,
            workers: args.workers,
            load: args.load,
            dilation: args.dilation,
            keys: args.keys,
            large_keys: args.large_keys,
            large_value_bytes: args.large_value_bytes,
            duration: args.duration,
            warmup: args.warmup,
            first_pass: 0.0,
            repeats: args.repeats,
            window: args.window,
            sim_requests: args.sim_requests,
            connections: args.connections,
            server_connections: args.server_connections,
            planners: args.planners,
            loads: args.loads,
            seed: args.seed,
        });
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("experiments/tailx/sim"));
    if args.replot {
        let (report, checked) = replot::<TailxSim>(&out)?;
        print!("{}", TailxSim::summarise(&report));
        println!(
            "redrew {} from its results.json ({checked} runs' p99s equal their histograms')",
            out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let report = keep_run(&TailxSim { args: &args }, &out, &no_progress)?;
    print!("{}", TailxSim::summarise(&report));
    println!(
        "wrote {} ({:.0} s)",
        out.display(),
        report.metadata.run.wall_seconds
    );
    Ok(ExitCode::SUCCESS)
}

/// TailX, Rein and batch in the cluster simulator: the paper's experiments (or `--only`),
/// every planner on each.
pub struct TailxSim<'a> {
    /// The command's arguments.
    pub args: &'a Args,
}

impl experiment::Experiment for TailxSim<'_> {
    type Results = Report;

    fn run(&self, progress: ProgressFn<'_>) -> Result<Report, String> {
        simulate(self.args, progress)
    }

    fn check(report: &Report) -> Result<usize, String> {
        check_histograms(&report.experiments)
    }

    fn render(report: &Report, out: &Path) -> Result<(), String> {
        write_text(out, "results.md", &render_markdown(&report.experiments))?;
        for result in &report.experiments {
            plot(out, result)?;
        }
        Ok(())
    }

    fn summarise(report: &Report) -> String {
        render_markdown(&report.experiments)
    }
}

/// Simulates every selected experiment with every selected planner.
fn simulate(args: &Args, progress: ProgressFn<'_>) -> Result<Report, String> {
    let server_queue = match args.server_queue.as_str() {
        "planner" => ServerQueue::Planner,
        "strict" => ServerQueue::Strict,
        "drr" => ServerQueue::Drr,
        other => {
            return Err(format!(
                "--server-queue {other:?}: one of planner, strict, drr"
            ))
        }
    };
    let setup = Setup {
        servers: args.servers,
        replicas: args.replicas,
        zipf: args.zipf,
        large_value_bytes: args.large_value_bytes,
        load: args.load,
        workers_per_server: args.workers,
        tailx_min_delay_us: args.min_delay_us,
        seed: args.seed,
        service: args.service.clone(),
        network: args.network.clone(),
        calibration_rps: args.calibration_rps,
        loaded_calibration_requests: args.loaded_calibration_requests,
        overtakes: args.overtakes,
        rel_overtakes: args.rel_overtakes,
        size_rel_overtakes: Some(args.size_rel_overtakes),
        size_rel_demoted_weight: Some(args.size_rel_demoted_weight),
        rel_spread: args.rel_spread,
        rel_no_slack: !args.rel_slack,
        rel_by_cost: args.rel_by_cost,
        rel_budget: args.rel_budget,
        closed_loop: (args.clients > 0).then_some(ClosedLoop {
            clients: args.clients,
            think_us: args.think_us,
        }),
        server_queue,
        planner_knows_sizes: args.planner_knows_sizes,
        hide_work: args.hide_work,
        work_from_keys: args.work_from_keys,
        small_tail_decomposition: args.decompose_small_tail,
        size_aware: args
            .planners
            .iter()
            .any(|p| split_size_aware(p).1)
            .then(|| args.minos.servers()),
        ..Setup::default()
    };
    let known = || {
        PLANNERS
            .into_iter()
            .chain(SIZE_AWARE_PLANNERS)
            .chain(SPREAD_PLANNERS)
            .chain(COVER_PLANNERS)
    };
    if let Some(unknown) = args
        .planners
        .iter()
        .find(|p| !known().any(|q| q == p.as_str()))
    {
        return Err(format!(
            "unknown planner {unknown:?} (one of {})",
            known().collect::<Vec<_>>().join(", ")
        ));
    }
    let planners: Vec<&str> = if args.planners.is_empty() {
        PLANNERS.to_vec()
    } else {
        known()
            .filter(|p| args.planners.iter().any(|q| q == p))
            .collect()
    };
    let mut all = paper_experiments(&args.a_requests, args.b_requests);
    if args.extra_requests > 0 {
        all.extend(extra_experiments(args.extra_requests));
    }
    let experiments: Vec<Experiment> = all
        .into_iter()
        .filter(|e| args.only.is_empty() || args.only.contains(&e.name))
        .collect();
    if experiments.is_empty() {
        return Err("no experiment selected".to_string());
    }
    let recorder = Recorder::start();
    let mut results = Vec::new();
    let total = (experiments.len() * planners.len()) as u64;
    for (round, experiment) in experiments.iter().enumerate() {
        let calibration = calibrate(&setup, experiment).map_err(|e| e.to_string())?;
        eprintln!(
            "{}: capacity {:.0} req/s, offered {:.0} req/s, {} requests per planner",
            experiment.name,
            calibration.capacity_rps,
            calibration.rate_rps,
            short_count(experiment.requests)
        );
        let slots: Mutex<Vec<Option<Result<Timed, String>>>> =
            Mutex::new((0..planners.len()).map(|_| None).collect());
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..args.jobs.max(1) {
                scope.spawn(|| loop {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(name) = planners.get(index) else {
                        break;
                    };
                    let run = || -> Result<Timed, String> {
                        let scenario = scenario(
                            &setup,
                            experiment,
                            name,
                            calibration.rate_rps,
                            experiment.requests,
                        )
                        .map_err(|e| e.to_string())?;
                        let began = Instant::now();
                        let result = run_cluster_with_options(
                            &scenario,
                            planner(&setup, name).map_err(|e| e.to_string())?,
                            setup.run_options(),
                        )
                        .map_err(|e| e.to_string())?;
                        Ok(Timed {
                            outcome: PlannerOutcome {
                                // `batch+minos` is `batch`'s planner on other servers.
                                planner: name.to_string(),
                                ..PlannerOutcome::of(
                                    &result,
                                    setup.workers_per_server,
                                    experiment.mix.mice_max_keys(),
                                )
                            },
                            wall_secs: began.elapsed().as_secs_f64(),
                            histograms: kept_histograms(&result)?,
                        })
                    };
                    let outcome = run();
                    if let Ok(mut slots) = slots.lock() {
                        slots[index] = Some(outcome);
                    }
                });
            }
        });
        let outcomes: Vec<Timed> = slots
            .into_inner()
            .map_err(|_| "a simulation thread panicked".to_string())?
            .into_iter()
            .map(|slot| slot.unwrap_or_else(|| Err("planner not run".to_string())))
            .collect::<Result<_, _>>()?;
        progress(Progress {
            stage: "tailx (simulated)",
            done: ((round + 1) * planners.len()) as u64,
            total,
        });
        let plain: Vec<PlannerOutcome> = outcomes.iter().map(|t| t.outcome.clone()).collect();
        for timed in &outcomes {
            eprintln!(
                "  {:<9} p50 {:>8.0} µs  p95 {:>8.0}  p99 {:>8.0}  ({:.1} s wall, {:.0} req/s)",
                timed.outcome.planner,
                timed.outcome.p50_us,
                timed.outcome.p95_us,
                timed.outcome.p99_us,
                timed.wall_secs,
                timed.outcome.achieved_rps
            );
        }
        results.push(ExperimentResult {
            experiment: experiment.clone(),
            calibration,
            reductions_vs_rein_sbf: reductions(&plain),
            outcomes,
        });
    }
    let metadata = recorder.finish();
    Ok(Report {
        metadata: SeededMetadata {
            run: metadata,
            seed: args.seed,
            note: match setup.closed_loop {
                None => "SIMULATED: tailtrim's cluster simulator, no real servers".to_string(),
                Some(closed) => format!(
                    "SIMULATED: tailtrim's cluster simulator, no real servers; closed loop, {} \
                     clients, {} µs mean think time",
                    closed.clients, closed.think_us
                ),
            },
        },
        setup,
        experiments: results,
    })
}

fn render_markdown(results: &[ExperimentResult]) -> String {
    let mut out = String::from(
        "# SIMULATED: TailX vs Rein vs batch vs cost-sbf (tailtrim experiment tailx)\n\n\
         Latencies in µs. Classes: mice and elephants by key count (mixes with two request \
         sizes), small and large by whether the request carries a large value. Queueing = \
         loaded − unloaded (the light calibration run, batch). Reductions are against \
         rein-sbf (positive: lower latency); ratios are against batch.\n",
    );
    for result in results {
        let c = &result.calibration;
        let batch = result
            .outcomes
            .iter()
            .find(|t| t.outcome.planner == "batch")
            .map(|t| t.outcome.clone());
        let ratio = |value: f64, base: Option<f64>| match base {
            Some(base) if base > 0.0 => format!("{:.2}", value / base),
            _ => "–".to_string(),
        };
        let cell = |value: f64| {
            if value > 0.0 {
                format!("{value:.0}")
            } else {
                "–".to_string()
            }
        };
        out.push_str(&format!(
            "\n## {} ({} requests per planner, offered {:.0} req/s = load × capacity {:.0} req/s)\n\n\
             Unloaded (batch at {:.0} req/s): p50 {:.0} µs, p99 {:.0} µs. Busiest server's \
             utilisation in the calibration's loaded batch run: {:.2}.\n\n",
            result.experiment.name,
            short_count(result.experiment.requests),
            c.rate_rps,
            c.capacity_rps,
            c.probe_rps,
            c.unloaded_p50_us,
            c.unloaded_p99_us,
            c.loaded_busiest_utilization,
        ));
        if c.unloaded_small_p99_us > 0.0 {
            out.push_str(&format!(
                "Unloaded requests without a large value: p50 {:.0} µs, p99 {:.0} µs (no order \
                 of the servers brings a request below its unloaded latency).\n\n",
                c.unloaded_small_p50_us, c.unloaded_small_p99_us
            ));
        }
        let mut table = Table::aligned(PLANNER_COLUMNS, Align::Left);
        for (timed, reduction) in result.outcomes.iter().zip(&result.reductions_vs_rein_sbf) {
            let o = &timed.outcome;
            table.push([
                o.planner.clone(),
                format!("{:.0}", o.p50_us),
                format!("{:.0}", o.p95_us),
                format!("{:.0}", o.p99_us),
                format!("{:.0}", o.p999_us),
                ratio(o.p50_us, batch.as_ref().map(|b| b.p50_us)),
                ratio(o.p99_us, batch.as_ref().map(|b| b.p99_us)),
                format!("{:.1} %", reduction.p99_pct),
                cell(o.mice_p50_us),
                cell(o.mice_p99_us),
                cell(o.elephant_p50_us),
                cell(o.elephant_p99_us),
                cell(o.small_p50_us),
                cell(o.small_p99_us),
                cell(o.large_p50_us),
                cell(o.large_p99_us),
                format!("{:.0}", o.p50_us - c.unloaded_p50_us),
                format!("{:.0}", o.p99_us - c.unloaded_p99_us),
                format!("{:.2}", o.max_utilization),
                format!("{:.0}", o.achieved_rps),
                format!("{:.1}", timed.wall_secs),
            ]);
        }
        out.push_str(&table.render());
        out.push_str(&render_priority_classes(&result.outcomes));
        out.push_str(&render_small_tail(&result.outcomes));
    }
    out
}

/// Where the requests without a large value spend their time, per planner that measured it
/// (empty if none did).
fn render_small_tail(outcomes: &[Timed]) -> String {
    let mut table = Table::aligned(
        [
            "planner",
            "requests",
            "latency",
            "wait behind large",
            "wait behind small",
            "service",
            "other",
        ],
        Align::Left,
    );
    let mut opsets = String::new();
    for timed in outcomes {
        let Some(tail) = &timed.outcome.small_tail else {
            continue;
        };
        for (set, split) in [
            (format!("≥ p99 ({:.0})", tail.p99_us), &tail.tail),
            ("all".to_string(), &tail.all),
        ] {
            table.push([
                timed.outcome.planner.clone(),
                format!("{set}: {}", split.requests),
                format!("{:.0}", split.latency_us),
                format!("{:.0}", split.wait_behind_large_us),
                format!("{:.0}", split.wait_behind_small_us),
                format!("{:.0}", split.service_us),
                format!("{:.0}", split.other_us),
            ]);
        }
        opsets.push_str(&format!(
            "- {}: {:.1} opsets per request, their time at the server (arrival to served) \
             p50 {:.0} µs, p99 {:.0} µs, p99.9 {:.0} µs; {:.1} % of the servers' work on \
             opsets holding a large value\n",
            timed.outcome.planner,
            tail.opsets_per_request,
            tail.opset_p50_us,
            tail.opset_p99_us,
            tail.opset_p999_us,
            tail.large_opset_work_share * 100.0
        ));
    }
    if opsets.is_empty() {
        return String::new();
    }
    format!(
        "\nRequests without a large value, along their slowest opset (mean µs: its wait while \
         the server's workers served opsets holding a large value, its other wait, its \
         service, the rest):\n\n{}\n{opsets}",
        table.render()
    )
}

/// Requests per priority class (the lowest among a request's fetches) of the planners that
/// set one: what each demoted and what it cost them (empty if none did).
fn render_priority_classes(outcomes: &[Timed]) -> String {
    let mut table = Table::aligned(
        ["planner", "class", "share of requests", "p50", "p99"],
        Align::Left,
    );
    let mut rows = 0;
    for timed in outcomes {
        for class in &timed.outcome.priority_classes {
            table.push([
                timed.outcome.planner.clone(),
                class.class.to_string(),
                format!("{:.2} %", class.share * 100.0),
                format!("{:.0}", class.p50_us),
                format!("{:.0}", class.p99_us),
            ]);
            rows += 1;
        }
    }
    if rows == 0 {
        return String::new();
    }
    format!(
        "\nRequests by priority class (the lowest among a request's fetches; 0 highest):\n\n{}",
        table.render()
    )
}

/// The columns of an experiment's table: one row per planner.
const PLANNER_COLUMNS: [&str; 21] = [
    "planner",
    "p50",
    "p95",
    "p99",
    "p99.9",
    "p50 / batch",
    "p99 / batch",
    "p99 red. vs rein-sbf",
    "mice p50",
    "mice p99",
    "elephants p50",
    "elephants p99",
    "small p50",
    "small p99",
    "large p50",
    "large p99",
    "queueing p50",
    "queueing p99",
    "busiest server util.",
    "achieved req/s",
    "wall s",
];

const COLORS: [(&str, RGBColor); 3] = [
    ("p50", RGBColor(31, 119, 180)),
    ("p95", RGBColor(255, 127, 14)),
    ("p99", RGBColor(214, 39, 40)),
];

fn plot(out: &std::path::Path, result: &ExperimentResult) -> Result<(), String> {
    let path = out.join(format!("{}.svg", result.experiment.name));
    let root = SVGBackend::new(&path, (900, 550)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| drawing_failed(&e))?;
    let groups: Vec<(String, Vec<f64>)> = result
        .outcomes
        .iter()
        .map(|t| {
            (
                t.outcome.planner.clone(),
                vec![
                    t.outcome.p50_us / 1e3,
                    t.outcome.p95_us / 1e3,
                    t.outcome.p99_us / 1e3,
                ],
            )
        })
        .collect();
    draw_bars(
        &root,
        &format!(
            "SIMULATED: {} ({} requests), latency by planner; baseline {BASELINE}",
            result.experiment.name,
            short_count(result.experiment.requests)
        ),
        "planner",
        &groups,
        &COLORS,
        "latency (ms)",
    )?;
    root.present().map_err(|e| drawing_failed(&e))
}
