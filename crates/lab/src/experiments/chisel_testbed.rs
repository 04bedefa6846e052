//! `tailtrim experiment chisel --testbed`: Chisel against batching through the real proxy over
//! four EMULATED `tailtrim serve` backends (docs/emulation.md), the paper's profile dilated by
//! `D`, beside the cluster simulator on the same scenarios at the undilated profile.
//!
//! ```text
//!   4 × tailtrim serve -t W --emulate-service P_S·D --emulate-network N_S·D   (one replica pool)
//!        ▲ preload every key on each backend (bench, in-process)
//!   per scenario (A, mice, ratio, o):
//!     tailtrim proxy --planner batch  ┐ -t 1, --replicas 4, --query-threads 16,
//!     tailtrim proxy --planner chisel ┘ --inject-overhead o·D, epoch = 250·A·D
//!     warm-up each (unmeasured: the analyzer settles) ─► rounds, planners interleaved:
//!        bench::run_detailed (Poisson at 1/(A·D), same seed for both planners in a round)
//!        + proxy stats before/after (fit, fallbacks, queries) + proxy CPU (/proc)
//!   tailtrim_sim::chisel::run_point on the same scenarios (no dilation, no sweep)
//!        ─► <out>/results.json, results.md, gain_testbed_vs_sim.svg, class_latency.svg
//! ```
//!
//! Gains are ratios, so the dilation cancels; latencies divided by `D` read in the modelled
//! system's time. What is not dilated: the proxy's and the bench's own CPU per request and
//! the loopback; `results.json` records the proxy's CPU per request to set beside them.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::experiment::{run_each, Experiment, Progress, ProgressFn};
use crate::figures::{draw_bars, drawing_failed, plot_panels_file, Line, Panel};
use crate::histogram::Encoded;
use crate::meta::{load_average, Recorder, RunMetadata};
use crate::process::{fetch_stats, Launch, Process, ServerShape};
use crate::results::write_text;
use crate::stats::{interleaved_order, median};
use crate::tables::{Align, Table};
use plotters::prelude::{IntoDrawingArea, SVGBackend, WHITE};
use serde::{Deserialize, Serialize};
use tailtrim_bench::workload::WorkloadOverrides;
use tailtrim_bench::{preload, run_detailed, Class, ClassSummary, RunConfig, WorkloadSpec};
use tailtrim_policy::costspec::CostSpec;
use tailtrim_sim::chisel::{
    gain, paper_grid, run_point, GridPoint, PointResult, Setup, ELEPHANT_KEYS,
};

use super::common::{run_invocation, tailtrim_binary, Invocation, Terminal};

/// The paper's `P_S = 3.3 + 0.6·K` µs, as (fixed, per key) µs.
pub const PAPER_SERVICE_US: (f64, f64) = (3.3, 0.6);
/// The paper's `N_S = 85 + 6.5·K` µs (round trip), as (fixed, per key) µs.
pub const PAPER_NETWORK_US: (f64, f64) = (85.0, 6.5);
/// Key length of the testbed's workload (fixed, so a reply's bytes are linear in its keys).
pub const KEY_BYTES: u32 = 24;
/// Value length, as the simulator's.
pub const VALUE_BYTES: u32 = 100;
/// Default dilation: the smallest emulated round trip (one key, 91.5 µs) becomes 4.6 ms, so the
/// proxy's, the bench's and the loopback's own time (not dilated, about 0.4 ms per backend
/// round trip on the loaded 2-core machine) stays a small share of every emulated time.
pub const DEFAULT_DILATION: f64 = 50.0;
/// The analyzer's epoch, in mean inter-arrival times (the simulator's setting).
const EPOCH_INTERARRIVALS: f64 = 250.0;
/// Default bench connections to the proxy. Many, so that a request rarely lands (uniform pick)
/// on a connection whose earlier elephant holds its reply back (replies are in order per
/// connection, which the simulator's clients do not have).
pub const DEFAULT_BENCH_CONNECTIONS: usize = 128;
/// Query slots of the proxy (the simulator's `C`).
const QUERY_THREADS: usize = 16;
/// Connections per backend: one per query slot, so two queries in flight rarely share one
/// connection (an emulated reply holds the replies after it on its connection).
const SERVER_CONNECTIONS: usize = 16;
/// Mean inter-arrival times of the default testbed grid, µs (high, middle and low load; A·D
/// of 3, 6 and 15 ms keeps the proxy's own CPU a small share of a core).
pub const TESTBED_INTERARRIVALS_US: [f64; 3] = [60.0, 120.0, 300.0];
/// Mice sizes of the default testbed grid (the grid's extremes).
pub const TESTBED_MICE_KEYS: [u32; 2] = [1, 10];
/// Mixes of the default testbed grid.
pub const TESTBED_RATIOS: [u32; 2] = [9, 5];
/// Overheads of the default testbed grid, µs (before dilation).
pub const TESTBED_OVERHEADS_US: [f64; 2] = [0.0, 120.0];
/// Gains within this many points of the simulator's meet the issue's criterion.
pub const WITHIN_POINTS: f64 = 10.0;

/// The testbed's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TestbedSettings {
    /// Dilation `D` of every emulated time, the inter-arrival time and the overhead.
    pub dilation: f64,
    /// Worker threads per backend (`tailtrim serve -t`).
    pub backend_workers: usize,
    /// Rounds per scenario (batch and chisel interleaved in each).
    pub repeats: usize,
    /// Measured requests per run.
    pub measured_requests: u64,
    /// Unmeasured requests before a scenario's first round, per proxy.
    pub warmup_requests: u64,
    /// Keys preloaded on every backend.
    pub keys: u64,
    /// `--emulate-service` of every backend.
    pub emulate_service: String,
    /// `--emulate-network` of every backend.
    pub emulate_network: String,
    /// Bytes of a reply per key found (`VALUE <key> 0 100\r\n<value>\r\n`).
    pub reply_bytes_per_key: u64,
    /// Base seed.
    pub seed: u64,
    /// Bench connections to each proxy.
    #[serde(default)]
    pub bench_connections: usize,
}

/// The default testbed scenarios: A ∈ {60, 120, 300} µs × mice {1, 10} keys × 9:1 and 5:1 ×
/// overhead {0, 120} µs (24), the paper's grid restricted to them (in its order).
#[must_use]
pub fn testbed_grid() -> Vec<GridPoint> {
    paper_grid()
        .into_iter()
        .filter(|point| {
            TESTBED_MICE_KEYS.contains(&point.mice_keys)
                && TESTBED_RATIOS.contains(&point.mice_per_elephant)
                && TESTBED_OVERHEADS_US.contains(&point.overhead_us)
                && TESTBED_INTERARRIVALS_US.contains(&point.interarrival_us)
        })
        .collect()
}

/// Bytes of a `get` reply with `keys` values found: per key `VALUE <key> 0 <len>\r\n`, the
/// value and `\r\n`; then `END\r\n`.
#[must_use]
pub fn reply_bytes(keys: u64, key_bytes: u32, value_bytes: u32) -> u64 {
    let header = 6 + u64::from(key_bytes) + 3 + value_bytes.to_string().len() as u64 + 2;
    keys * (header + u64::from(value_bytes) + 2) + 5
}

/// The backends' emulated service and network costs: `P_S` per key, and `N_S` charged on the
/// reply by its bytes (the server's network emulation sees bytes, not keys), both × `dilation`.
#[must_use]
pub fn emulation_specs(dilation: f64) -> (CostSpec, CostSpec) {
    let service = CostSpec {
        const_nanos: PAPER_SERVICE_US.0 * 1e3,
        per_key_nanos: PAPER_SERVICE_US.1 * 1e3,
        dilation,
        ..CostSpec::ZERO
    };
    let per_key_bytes =
        (reply_bytes(1, KEY_BYTES, VALUE_BYTES) - reply_bytes(0, KEY_BYTES, VALUE_BYTES)) as f64;
    let per_byte = PAPER_NETWORK_US.1 * 1e3 / per_key_bytes;
    let network = CostSpec {
        const_nanos: PAPER_NETWORK_US.0 * 1e3
            - per_byte * reply_bytes(0, KEY_BYTES, VALUE_BYTES) as f64,
        per_byte_nanos: per_byte,
        dilation,
        ..CostSpec::ZERO
    };
    (service, network)
}

/// What the chisel proxy's stats said over one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// Epochs during the run.
    pub epochs: u64,
    /// Of those, in fallback to batching.
    pub fallbacks: u64,
    /// `(B, L)` at the end of the run (`L` = u32::MAX: no split).
    pub shape: (u32, u32),
    /// Fitted round trip, fixed part, µs (emulated time).
    pub fit_fixed_us: f64,
    /// Fitted round trip per key, µs (emulated time).
    pub fit_per_key_us: f64,
    /// R² of the fit.
    pub fit_r2: f64,
    /// Model prediction at the end of the run, µs (emulated time): mice mean, mice p95,
    /// elephant mean, elephant p95.
    pub predicted_us: [f64; 4],
    /// The analyzer's own observation of the same, µs.
    pub observed_us: [f64; 4],
    /// The analyzer's last decision (`held`, `changed`, `fallback:...`).
    pub decision: String,
}

/// One measured run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Round (0-based).
    pub round: usize,
    /// Position within the round.
    pub position: usize,
    /// Every request, µs (emulated time).
    pub all: ClassSummary,
    /// Mice.
    pub mice: ClassSummary,
    /// Elephants.
    pub elephant: ClassSummary,
    /// Requests the schedule issued in the window.
    pub scheduled: u64,
    /// Errors.
    pub errors: u64,
    /// Misses (should be 0: every key is preloaded).
    pub misses: u64,
    /// Replies per second.
    pub achieved_rps: f64,
    /// The bench's CPU, % of one core.
    pub bench_cpu_percent: f64,
    /// The proxy's CPU (user + system) per request, µs (not dilated).
    pub proxy_cpu_us_per_request: f64,
    /// Backend queries per request.
    pub queries_per_request: f64,
    /// Keys per backend query.
    pub keys_per_query: f64,
    /// Mice that joined another's query.
    pub merged_requests: u64,
    /// The analyzer (chisel only).
    pub analysis: Option<Analysis>,
    /// Load average (1, 5, 15 min) at the start.
    pub load_average: String,
    /// Histogram of every request (ns), HDR V2 base64.
    pub histogram: Encoded,
}

/// One planner at one scenario.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// Median over rounds of the mean, µs (emulated time).
    pub mean_us: f64,
    /// Median over rounds of the p95.
    pub p95_us: f64,
    /// Medians of the mice mean and p95, elephant mean and p95.
    pub mice_mean_us: f64,
    /// Mice p95.
    pub mice_p95_us: f64,
    /// Elephant mean.
    pub elephant_mean_us: f64,
    /// Elephant p95.
    pub elephant_p95_us: f64,
    /// The runs.
    pub runs: Vec<Run>,
}

impl Side {
    fn from_runs(runs: Vec<Run>) -> Self {
        let pick = |f: fn(&Run) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        Side {
            mean_us: pick(|r| r.all.mean_us),
            p95_us: pick(|r| r.all.p95_us),
            mice_mean_us: pick(|r| r.mice.mean_us),
            mice_p95_us: pick(|r| r.mice.p95_us),
            elephant_mean_us: pick(|r| r.elephant.mean_us),
            elephant_p95_us: pick(|r| r.elephant.p95_us),
            runs,
        }
    }
}

/// One scenario: testbed and simulator side by side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// The scenario (undilated).
    pub point: GridPoint,
    /// Its name.
    pub name: String,
    /// Offered requests per second on the testbed (1 / (A·D)).
    pub rate_rps: f64,
    /// Injected overhead on the testbed, µs (o·D).
    pub overhead_emulated_us: u64,
    /// The analyzer's epoch on the testbed, ms.
    pub epoch_ms: u64,
    /// Batch on the testbed.
    pub batch: Side,
    /// Chisel on the testbed.
    pub chisel: Side,
    /// Testbed gain on the mean, %.
    pub gain_mean_pct: f64,
    /// Testbed gain on the p95, %.
    pub gain_p95_pct: f64,
    /// The simulator on the same scenario (no sweep).
    pub sim: PointResult,
    /// Testbed gain − simulator gain, points (mean).
    pub diff_mean_points: f64,
    /// Testbed gain − simulator gain, points (p95).
    pub diff_p95_points: f64,
    /// Both gains within [`WITHIN_POINTS`] of the simulator's.
    pub within: bool,
}

/// The run's summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TestbedSummary {
    /// Scenarios.
    pub scenarios: usize,
    /// Mean over scenarios of the testbed's gain on the mean, %.
    pub testbed_mean_gain_mean_pct: f64,
    /// … on the p95.
    pub testbed_mean_gain_p95_pct: f64,
    /// The simulator's, same scenarios.
    pub sim_mean_gain_mean_pct: f64,
    /// … on the p95.
    pub sim_mean_gain_p95_pct: f64,
    /// Scenarios whose mean and p95 gains are both within 10 points of the simulator's.
    pub scenarios_within: usize,
    /// Scenarios within on the mean.
    pub scenarios_within_mean: usize,
    /// Scenarios within on the p95.
    pub scenarios_within_p95: usize,
    /// Median |testbed − simulator| gain, points (mean, p95).
    pub median_abs_diff_points: (f64, f64),
    /// The mean gains (over scenarios) within 10 points of the simulator's, both.
    pub overall_within: bool,
    /// Chisel runs' epochs and fallback epochs, summed.
    pub chisel_epochs: u64,
    /// Fallback epochs.
    pub chisel_fallbacks: u64,
    /// Median proxy CPU per request, µs (batch, chisel), not dilated.
    pub proxy_cpu_us_per_request: (f64, f64),
}

#[derive(Serialize, Deserialize)]
struct Metadata {
    #[serde(flatten)]
    run: RunMetadata,
    note: String,
}

/// What a testbed run keeps (`results.json`).
#[derive(Serialize, Deserialize)]
pub struct TestbedReport {
    metadata: Metadata,
    settings: TestbedSettings,
    sim_setup: Setup,
    summary: TestbedSummary,
    results: Vec<ScenarioResult>,
}

/// What `tailtrim experiment chisel --testbed` needs from its flags.
pub struct Options {
    /// Output directory.
    pub out: std::path::PathBuf,
    /// Scenarios.
    pub grid: Vec<GridPoint>,
    /// Settings (from [`TestbedSettings::at_dilation`], the flags' values set in).
    pub settings: TestbedSettings,
    /// Only redraw.
    pub replot: bool,
}

impl TestbedSettings {
    /// The settings at `dilation`: the backends' emulated costs and the reply bytes per key
    /// follow from it; one round on one backend worker and no requests or keys until set.
    #[must_use]
    pub fn at_dilation(dilation: f64) -> Self {
        let (service, network) = emulation_specs(dilation);
        TestbedSettings {
            dilation,
            backend_workers: 1,
            repeats: 1,
            measured_requests: 0,
            warmup_requests: 0,
            keys: 0,
            emulate_service: service.to_string(),
            emulate_network: network.to_string(),
            reply_bytes_per_key: reply_bytes(1, KEY_BYTES, VALUE_BYTES)
                - reply_bytes(0, KEY_BYTES, VALUE_BYTES),
            seed: 0,
            bench_connections: DEFAULT_BENCH_CONNECTIONS,
        }
    }
}

fn workload(point: &GridPoint, keys: u64) -> Result<WorkloadSpec, String> {
    let mut spec = WorkloadSpec::preset("chisel").map_err(|e| e.to_string())?;
    spec.apply(&WorkloadOverrides {
        keys: Some(keys),
        mice_keys: Some(point.mice_keys),
        elephant_keys: Some(ELEPHANT_KEYS),
        mice_per_elephant: Some(f64::from(point.mice_per_elephant)),
        key_size: Some(KEY_BYTES),
        value_size: Some(VALUE_BYTES),
        elephant_min_keys: Some(tailtrim_policy::chisel::DEFAULT_ELEPHANT_THRESHOLD + 1),
        ..WorkloadOverrides::default()
    })
    .map_err(|e| e.to_string())?;
    Ok(spec)
}

/// CPU seconds (user + system) of process `pid` so far.
pub(crate) fn process_cpu_seconds(pid: u32) -> f64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command (which may hold spaces) start after the last ')'.
    let Some(rest) = text.rsplit_once(')').map(|(_, rest)| rest) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    let ticks = |index: usize| fields.get(index).and_then(|f| f.parse::<f64>().ok());
    // SAFETY: sysconf(3) has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) if hz > 0.0 => (user + system) / hz,
        _ => 0.0,
    }
}

fn stat(stats: &BTreeMap<String, String>, name: &str) -> f64 {
    stats
        .get(name)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
}

fn analysis(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Analysis {
    let delta = |name: &str| (stat(after, name) - stat(before, name)).max(0.0) as u64;
    let chunk = stat(after, "chisel_chunk_size");
    let class = |kind: &str, class: &str| stat(after, &format!("chisel_{kind}_us:{class}"));
    Analysis {
        epochs: delta("chisel_epochs"),
        fallbacks: delta("chisel_fallbacks"),
        shape: (
            stat(after, "chisel_merge_level") as u32,
            if chunk >= f64::from(u32::MAX) || chunk == 0.0 {
                u32::MAX
            } else {
                chunk as u32
            },
        ),
        fit_fixed_us: stat(after, "chisel_fit_fixed_ns") / 1e3,
        fit_per_key_us: stat(after, "chisel_fit_per_key_ns") / 1e3,
        fit_r2: stat(after, "chisel_fit_r2_permille") / 1e3,
        predicted_us: [
            class("predicted_mean", "mice"),
            class("predicted_p95", "mice"),
            class("predicted_mean", "elephant"),
            class("predicted_p95", "elephant"),
        ],
        observed_us: [
            class("observed_mean", "mice"),
            class("observed_p95", "mice"),
            class("observed_mean", "elephant"),
            class("observed_p95", "elephant"),
        ],
        decision: after.get("chisel_decision").cloned().unwrap_or_default(),
    }
}

fn proxy_config(epoch_ms: u64, workers: usize) -> String {
    format!(
        "# tailtrim experiment chisel --testbed\n[pool]\nelephant_threshold = {}\n\
         backend_threads = {workers}\nchisel_epoch_ms = {epoch_ms}\nserver_connections = {SERVER_CONNECTIONS}\n",
        tailtrim_policy::chisel::DEFAULT_ELEPHANT_THRESHOLD
    )
}

fn start_proxy(
    binary: &Path,
    planner: &str,
    backends: &[String],
    point: &GridPoint,
    settings: &TestbedSettings,
    epoch_ms: u64,
) -> Result<Process, String> {
    let overhead = (point.overhead_us * settings.dilation).round() as u64;
    let config_path = std::env::temp_dir().join(format!(
        "tailtrim-chisel-testbed-{}-{planner}.toml",
        std::process::id()
    ));
    let extra: Vec<String> = [
        "--admin",
        "off",
        "-t",
        "1",
        "--replicas",
        &backends.len().to_string(),
        "--planner",
        planner,
        "--query-threads",
        &QUERY_THREADS.to_string(),
        "--inject-overhead",
        &overhead.to_string(),
        // An emulated overhead: slept, not spun (a dilated spin would burn the shared cores).
        "--inject-overhead-sleep",
        "--config",
        &config_path.display().to_string(),
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect();
    let mut launch =
        Launch::tailtrim_proxy(&format!("proxy-{planner}"), binary, backends, false, &extra)?;
    launch.config = Some((
        config_path,
        proxy_config(epoch_ms, settings.backend_workers),
    ));
    Process::start(launch).map_err(String::from)
}

fn bench_config(
    address: &str,
    point: &GridPoint,
    settings: &TestbedSettings,
    requests: u64,
) -> RunConfig {
    let interarrival_us = point.interarrival_us * settings.dilation;
    let duration = Duration::from_secs_f64(requests as f64 * interarrival_us * 1e-6);
    let mut config = RunConfig::new(address, 1e6 / interarrival_us, duration);
    config.connections = settings.bench_connections.max(1);
    config.threads = 1;
    config.timeseries = false;
    config
}

fn measure(
    proxy: &Process,
    workload: &Arc<WorkloadSpec>,
    mut config: RunConfig,
    chisel: bool,
) -> Result<Run, String> {
    let before = fetch_stats(&proxy.address(), None).unwrap_or_default();
    let cpu_before = process_cpu_seconds(proxy.pid());
    let load = load_average();
    // A short unmeasured lead-in (20 inter-arrivals), so the window starts in steady state.
    config.warmup = Duration::from_secs_f64(20.0 / config.rate);
    let output = run_detailed(workload, &config, &mut |_| {}).map_err(|e| e.to_string())?;
    let cpu = process_cpu_seconds(proxy.pid()) - cpu_before;
    let after = fetch_stats(&proxy.address(), None).unwrap_or_default();
    let report = output.report;
    let delta = |name: &str| (stat(&after, name) - stat(&before, name)).max(0.0);
    let requests = delta("pool_multigets").max(1.0);
    let queries = delta("pool_queries");
    let total_requests = (report.completed as f64).max(1.0)
        * (config.warmup + config.duration).as_secs_f64()
        / config.duration.as_secs_f64();
    Ok(Run {
        round: 0,
        position: 0,
        all: report.class(Class::All),
        mice: report.class(Class::Mice),
        elephant: report.class(Class::Elephant),
        scheduled: report.scheduled,
        errors: report.errors,
        misses: report.misses,
        achieved_rps: report.achieved_rps,
        bench_cpu_percent: report.bench_cpu_percent,
        proxy_cpu_us_per_request: cpu * 1e6 / total_requests,
        queries_per_request: queries / requests,
        keys_per_query: delta("pool_query_keys") / queries.max(1.0),
        merged_requests: delta("chisel_merged_requests") as u64,
        analysis: chisel.then(|| analysis(&before, &after)),
        load_average: load,
        histogram: Encoded::encode(output.histograms.get(Class::All)).map_err(String::from)?,
    })
}

fn summarize(results: &[ScenarioResult]) -> TestbedSummary {
    let mean = |f: &dyn Fn(&ScenarioResult) -> f64| {
        results.iter().map(f).sum::<f64>() / results.len().max(1) as f64
    };
    let within = |d: f64| d.abs() <= WITHIN_POINTS;
    let testbed_mean = mean(&|r| r.gain_mean_pct);
    let testbed_p95 = mean(&|r| r.gain_p95_pct);
    let sim_mean = mean(&|r| r.sim.gain_mean_pct);
    let sim_p95 = mean(&|r| r.sim.gain_p95_pct);
    let runs = || results.iter().flat_map(|r| &r.chisel.runs);
    let cpu = |side: fn(&ScenarioResult) -> &Side| {
        median(
            &results
                .iter()
                .flat_map(|r| side(r).runs.iter().map(|run| run.proxy_cpu_us_per_request))
                .collect::<Vec<_>>(),
        )
    };
    TestbedSummary {
        scenarios: results.len(),
        testbed_mean_gain_mean_pct: testbed_mean,
        testbed_mean_gain_p95_pct: testbed_p95,
        sim_mean_gain_mean_pct: sim_mean,
        sim_mean_gain_p95_pct: sim_p95,
        scenarios_within: results.iter().filter(|r| r.within).count(),
        scenarios_within_mean: results
            .iter()
            .filter(|r| within(r.diff_mean_points))
            .count(),
        scenarios_within_p95: results.iter().filter(|r| within(r.diff_p95_points)).count(),
        median_abs_diff_points: (
            median(
                &results
                    .iter()
                    .map(|r| r.diff_mean_points.abs())
                    .collect::<Vec<_>>(),
            ),
            median(
                &results
                    .iter()
                    .map(|r| r.diff_p95_points.abs())
                    .collect::<Vec<_>>(),
            ),
        ),
        overall_within: within(testbed_mean - sim_mean) && within(testbed_p95 - sim_p95),
        chisel_epochs: runs()
            .filter_map(|r| r.analysis.as_ref())
            .map(|a| a.epochs)
            .sum(),
        chisel_fallbacks: runs()
            .filter_map(|r| r.analysis.as_ref())
            .map(|a| a.fallbacks)
            .sum(),
        proxy_cpu_us_per_request: (cpu(|r| &r.batch), cpu(|r| &r.chisel)),
    }
}

fn scenario_result(
    point: GridPoint,
    settings: &TestbedSettings,
    epoch_ms: u64,
    batch: Vec<Run>,
    chisel: Vec<Run>,
    sim: PointResult,
) -> ScenarioResult {
    let (batch, chisel) = (Side::from_runs(batch), Side::from_runs(chisel));
    let gain_mean_pct = gain(batch.mean_us, chisel.mean_us);
    let gain_p95_pct = gain(batch.p95_us, chisel.p95_us);
    let diff_mean_points = gain_mean_pct - sim.gain_mean_pct;
    let diff_p95_points = gain_p95_pct - sim.gain_p95_pct;
    ScenarioResult {
        name: point.name(),
        rate_rps: 1e6 / (point.interarrival_us * settings.dilation),
        overhead_emulated_us: (point.overhead_us * settings.dilation).round() as u64,
        epoch_ms,
        point,
        batch,
        chisel,
        gain_mean_pct,
        gain_p95_pct,
        sim,
        diff_mean_points,
        diff_p95_points,
        within: diff_mean_points.abs() <= WITHIN_POINTS && diff_p95_points.abs() <= WITHIN_POINTS,
    }
}

/// Runs the testbed mode (or redraws a kept run with `replot`).
pub fn run(options: Options) -> Result<ExitCode, String> {
    run_invocation(
        "chisel (testbed, EMULATED)",
        false,
        &options,
        &options.out,
        options.replot,
    )
}

/// Chisel against batch through the real proxy over emulated backends, beside the simulator.
pub type ChiselTestbed<'a> = Invocation<'a, Options>;

impl Experiment for ChiselTestbed<'_> {
    type Results = TestbedReport;

    fn run(&self, progress: ProgressFn<'_>) -> Result<TestbedReport, String> {
        run_testbed(self.args, self.terminal, progress)
    }

    fn check(report: &TestbedReport) -> Result<usize, String> {
        check_percentiles(report)
    }

    fn render(report: &TestbedReport, out: &Path) -> Result<(), String> {
        write_text(out, "results.md", &markdown(report))?;
        plot_gains(&out.join("gain_testbed_vs_sim.svg"), report)?;
        plot_classes(&out.join("class_latency.svg"), report)
    }

    fn summarise(report: &TestbedReport) -> String {
        format!("{}\n", summary_line(&report.summary, &report.settings))
    }
}

/// Recomputes every run's p50, p95 and p99 from the histogram it kept; an error names the
/// first that differs. Returns how many runs were checked.
fn check_percentiles(report: &TestbedReport) -> Result<usize, String> {
    let mut checked = 0;
    for result in &report.results {
        for (planner, side) in [("batch", &result.batch), ("chisel", &result.chisel)] {
            for run in &side.runs {
                let reported = [
                    ("p50", 50.0, run.all.p50_us),
                    ("p95", 95.0, run.all.p95_us),
                    ("p99", 99.0, run.all.p99_us),
                ];
                if let Some(what) = run.histogram.disagreement(&reported) {
                    return Err(format!(
                        "{} {planner} round {}: {what}",
                        result.name,
                        run.round + 1
                    ));
                }
                checked += 1;
            }
        }
    }
    Ok(checked)
}

/// Simulates the scenarios, then runs each on the testbed with the planners interleaved.
fn run_testbed(
    options: &Options,
    terminal: &Terminal,
    progress: ProgressFn<'_>,
) -> Result<TestbedReport, String> {
    let settings = TestbedSettings {
        repeats: options.settings.repeats.max(1),
        ..options.settings.clone()
    };
    let sim_setup = Setup {
        workers_per_server: settings.backend_workers,
        keyspace: settings.keys,
        seed: settings.seed,
        sweep: Vec::new(),
        ..Setup::default()
    };
    let recorder = Recorder::start();
    let sims = run_each(
        &options.grid,
        2,
        "simulating (no dilation)",
        progress,
        |point| run_point(&sim_setup, point).map_err(|e| format!("{}: {e}", point.name())),
    )?;

    let binary = tailtrim_binary()?;
    let shape = ServerShape {
        threads: settings.backend_workers,
        memory_mb: 64,
    };
    let emulation = [
        "--emulate-service".to_string(),
        settings.emulate_service.clone(),
        "--emulate-network".to_string(),
        settings.emulate_network.clone(),
    ];
    let mut backends = Vec::new();
    for index in 0..4 {
        backends.push(Process::start(Launch::tailtrim_serve(
            &format!("chisel-backend-{index}"),
            &binary,
            &shape,
            &emulation,
        )?)?);
    }
    let addresses: Vec<String> = backends.iter().map(Process::address).collect();
    let first = workload(
        &options.grid.first().copied().ok_or("no scenario")?,
        settings.keys,
    )?;
    for address in &addresses {
        let report = preload(&first, address, 4, &mut |_| {}).map_err(|e| e.to_string())?;
        if report.errors > 0 {
            return Err(format!("preloading {address}: {} errors", report.errors));
        }
    }

    let per_scenario: Vec<f64> = options
        .grid
        .iter()
        .map(|p| {
            p.interarrival_us
                * settings.dilation
                * 1e-6
                * (2 * settings.warmup_requests
                    + 2 * settings.repeats as u64 * settings.measured_requests)
                    as f64
        })
        .collect();
    terminal.say(&format!(
        "testbed: {} scenarios, about {:.0} s of load",
        options.grid.len(),
        per_scenario.iter().sum::<f64>()
    ));
    let mut results = Vec::new();
    for ((index, point), sim) in options.grid.iter().enumerate().zip(sims) {
        let spec = Arc::new(workload(point, settings.keys)?);
        let epoch_ms = (EPOCH_INTERARRIVALS * point.interarrival_us * settings.dilation / 1e3)
            .round()
            .max(1.0) as u64;
        let proxies = [
            start_proxy(&binary, "batch", &addresses, point, &settings, epoch_ms)?,
            start_proxy(&binary, "chisel", &addresses, point, &settings, epoch_ms)?,
        ];
        for proxy in &proxies {
            let mut config =
                bench_config(&proxy.address(), point, &settings, settings.warmup_requests);
            config.seed = settings.seed ^ 0x5eed;
            run_detailed(&spec, &config, &mut |_| {}).map_err(|e| e.to_string())?;
        }
        let mut runs: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
        for round in 0..settings.repeats {
            for (position, which) in interleaved_order(2, round).into_iter().enumerate() {
                let mut config = bench_config(
                    &proxies[which].address(),
                    point,
                    &settings,
                    settings.measured_requests,
                );
                config.seed = settings
                    .seed
                    .wrapping_add((index * 1_000 + round) as u64 * 7_919);
                let mut run = measure(&proxies[which], &spec, config, which == 1)
                    .map_err(|e| format!("{} {}: {e}", point.name(), ["batch", "chisel"][which]))?;
                run.round = round;
                run.position = position;
                runs[which].push(run);
            }
        }
        for backend in &mut backends {
            backend.check_alive().map_err(String::from)?;
        }
        for proxy in proxies {
            proxy.stop().map_err(String::from)?;
        }
        let [batch, chisel] = runs;
        let result = scenario_result(*point, &settings, epoch_ms, batch, chisel, sim);
        terminal.say(&format!(
            "{}: testbed gain mean {:.1} % p95 {:.1} %, simulator {:.1} % / {:.1} % (load {})",
            result.name,
            result.gain_mean_pct,
            result.gain_p95_pct,
            result.sim.gain_mean_pct,
            result.sim.gain_p95_pct,
            load_average()
        ));
        results.push(result);
        progress(Progress {
            stage: "testbed",
            done: results.len() as u64,
            total: options.grid.len() as u64,
        });
    }
    drop(backends);
    let summary = summarize(&results);
    let report = TestbedReport {
        metadata: Metadata {
            run: recorder.finish(),
            note: format!(
                "EMULATED: tailtrim proxy over 4 tailtrim serve backends with emulated service \
                 and network time, the paper's profile dilated {}x; simulator columns SIMULATED",
                settings.dilation
            ),
        },
        settings,
        sim_setup,
        summary,
        results,
    };
    Ok(report)
}

fn summary_line(s: &TestbedSummary, settings: &TestbedSettings) -> String {
    format!(
        "EMULATED (dilation {}), {} scenarios: testbed mean gain on the mean {:.1} %, on the p95 \
         {:.1} %; simulator {:.1} % / {:.1} %; within {WITHIN_POINTS} points of the simulator: \
         {} of {} scenarios (mean {}, p95 {}), overall (mean gains) {}; median |difference| {:.1} / \
         {:.1} points; chisel fallback epochs {} of {}; proxy CPU per request {:.0} µs (batch), \
         {:.0} µs (chisel), not dilated",
        settings.dilation,
        s.scenarios,
        s.testbed_mean_gain_mean_pct,
        s.testbed_mean_gain_p95_pct,
        s.sim_mean_gain_mean_pct,
        s.sim_mean_gain_p95_pct,
        s.scenarios_within,
        s.scenarios,
        s.scenarios_within_mean,
        s.scenarios_within_p95,
        if s.overall_within { "met" } else { "not met" },
        s.median_abs_diff_points.0,
        s.median_abs_diff_points.1,
        s.chisel_fallbacks,
        s.chisel_epochs,
        s.proxy_cpu_us_per_request.0,
        s.proxy_cpu_us_per_request.1,
    )
}

fn shape_text(shape: (u32, u32)) -> String {
    if shape.1 == u32::MAX {
        format!("({}, ∞)", shape.0)
    } else {
        format!("({}, {})", shape.0, shape.1)
    }
}

fn markdown(report: &TestbedReport) -> String {
    let s = &report.settings;
    let mut text = format!(
        "# Chisel vs batch on the EMULATED testbed\n\n**{}.**\n\n",
        summary_line(&report.summary, s)
    );
    text.push_str(&format!(
        "Backends: 4 × `tailtrim serve -t {}` with `--emulate-service {}` and \
         `--emulate-network {}` ({} bytes of reply per key); proxy `-t 1 --replicas 4 \
         --query-threads {QUERY_THREADS}`, {SERVER_CONNECTIONS} connections per backend, \
         `--inject-overhead o·D --inject-overhead-sleep`, analyzer epoch 250·A·D; bench: Poisson at 1/(A·D), \
         {} connections, {} measured requests per run after {} unmeasured per \
         proxy per scenario, {} rounds with batch and chisel interleaved (median of rounds). \
         Latencies in emulated µs (divide by {} for the modelled system's); the simulator's \
         (SIMULATED, same scenarios, undilated profile, seed {}) in µs.\n\n",
        s.backend_workers,
        s.emulate_service,
        s.emulate_network,
        s.reply_bytes_per_key,
        s.bench_connections,
        s.measured_requests,
        s.warmup_requests,
        s.repeats,
        s.dilation,
        report.sim_setup.seed,
    ));
    text.push_str(&format!(
        "Run: commit {}{}, {:.0} s, load average {} → {} (max {:.1}), steal {:.1} %.\n\n",
        report.metadata.run.commit,
        if report.metadata.run.dirty {
            " (dirty)"
        } else {
            ""
        },
        report.metadata.run.wall_seconds,
        report.metadata.run.load_average_start,
        report.metadata.run.load_average_end,
        report.metadata.run.load_average_max,
        report.metadata.run.steal_percent,
    ));
    let (left, right) = (Align::Left, Align::Right);
    let mut scenarios = Table::new([
        ("scenario", left),
        ("batch mean", right),
        ("chisel mean", right),
        ("gain", right),
        ("sim gain", right),
        ("batch p95", right),
        ("chisel p95", right),
        ("gain", right),
        ("sim gain", right),
        ("within 10", left),
        ("chisel (B, L) end", left),
        ("sim main (B, L)", left),
        ("fallback epochs", right),
        ("fit fixed + per key µs (R²)", left),
        ("proxy CPU µs/req b / c", right),
    ]);
    for r in &report.results {
        let last = r
            .chisel
            .runs
            .iter()
            .filter_map(|run| run.analysis.as_ref())
            .next_back();
        let epochs: u64 = r
            .chisel
            .runs
            .iter()
            .filter_map(|x| x.analysis.as_ref())
            .map(|a| a.epochs)
            .sum();
        let fallbacks: u64 = r
            .chisel
            .runs
            .iter()
            .filter_map(|x| x.analysis.as_ref())
            .map(|a| a.fallbacks)
            .sum();
        let cpu = |side: &Side| {
            median(
                &side
                    .runs
                    .iter()
                    .map(|x| x.proxy_cpu_us_per_request)
                    .collect::<Vec<_>>(),
            )
        };
        scenarios.push([
            r.name.clone(),
            format!("{:.0}", r.batch.mean_us),
            format!("{:.0}", r.chisel.mean_us),
            format!("{:.1} %", r.gain_mean_pct),
            format!("{:.1} %", r.sim.gain_mean_pct),
            format!("{:.0}", r.batch.p95_us),
            format!("{:.0}", r.chisel.p95_us),
            format!("{:.1} %", r.gain_p95_pct),
            format!("{:.1} %", r.sim.gain_p95_pct),
            (if r.within { "yes" } else { "**no**" }).to_string(),
            last.map_or("-".to_string(), |a| shape_text(a.shape)),
            shape_text(r.sim.main_shape),
            format!("{fallbacks}/{epochs}"),
            last.map_or("-".to_string(), |a| {
                format!(
                    "{:.0} + {:.1}·K ({:.3})",
                    a.fit_fixed_us, a.fit_per_key_us, a.fit_r2
                )
            }),
            format!("{:.0} / {:.0}", cpu(&r.batch), cpu(&r.chisel)),
        ]);
    }
    text.push_str(&scenarios.render());
    text.push_str(
        "\nPer class, testbed ÷ D beside the simulator (µs of the modelled system; mean):\n\n",
    );
    let d = s.dilation;
    let mut classes = Table::aligned(
        [
            "scenario",
            "batch mice tb/sim",
            "batch eleph. tb/sim",
            "chisel mice tb/sim",
            "chisel eleph. tb/sim",
        ],
        left,
    );
    for r in &report.results {
        let pair = |testbed: f64, sim: f64| format!("{:.0} / {sim:.0}", testbed / d);
        classes.push([
            r.name.clone(),
            pair(r.batch.mice_mean_us, r.sim.batch.mice_mean_us),
            pair(r.batch.elephant_mean_us, r.sim.batch.elephant_mean_us),
            pair(r.chisel.mice_mean_us, r.sim.chisel.mice_mean_us),
            pair(r.chisel.elephant_mean_us, r.sim.chisel.elephant_mean_us),
        ]);
    }
    text.push_str(&classes.render());
    text.push_str(
        "\nModel validation, chisel runs (µs of the modelled system, mean per class): the online \
         analyzer's prediction at the end of the last round (`model::chisel` with its fitted \
         inputs, ÷ D), the simulator, and the testbed (median of rounds, ÷ D).\n\n",
    );
    let mut model = Table::aligned(
        [
            "scenario",
            "(B, L)",
            "mice: model / sim / testbed",
            "elephants: model / sim / testbed",
        ],
        left,
    );
    for r in &report.results {
        let Some(last) = r
            .chisel
            .runs
            .iter()
            .filter_map(|run| run.analysis.as_ref())
            .next_back()
        else {
            continue;
        };
        let triple = |model: f64, sim: f64, testbed: f64| {
            format!("{:.0} / {sim:.0} / {:.0}", model / d, testbed / d)
        };
        model.push([
            r.name.clone(),
            shape_text(last.shape),
            triple(
                last.predicted_us[0],
                r.sim.chisel.mice_mean_us,
                r.chisel.mice_mean_us,
            ),
            triple(
                last.predicted_us[2],
                r.sim.chisel.elephant_mean_us,
                r.chisel.elephant_mean_us,
            ),
        ]);
    }
    text.push_str(&model.render());
    text
}

fn plot_gains(path: &Path, report: &TestbedReport) -> Result<(), String> {
    let points = |pick: fn(&ScenarioResult) -> (f64, f64)| -> Vec<(f64, f64)> {
        report.results.iter().map(pick).collect()
    };
    let mean = points(|r| (r.sim.gain_mean_pct, r.gain_mean_pct));
    let p95 = points(|r| (r.sim.gain_p95_pct, r.gain_p95_pct));
    let low = mean
        .iter()
        .chain(&p95)
        .flat_map(|p| [p.0, p.1])
        .fold(0.0f64, f64::min)
        .floor()
        - 5.0;
    let high = 100.0;
    let reference = |name: String, offset: f64| {
        Line::new(name, vec![(low, low + offset), (high, high + offset)])
    };
    let panel = Panel {
        title: format!(
            "EMULATED testbed (D = {}) vs SIMULATED: Chisel's gain over batch, {} scenarios",
            report.settings.dilation,
            report.results.len()
        ),
        x_desc: "simulator gain (%)".into(),
        y_desc: "testbed gain (%)".into(),
        lines: vec![
            reference("equal".into(), 0.0),
            reference(format!("+{WITHIN_POINTS} points"), WITHIN_POINTS),
            reference(format!("-{WITHIN_POINTS} points"), -WITHIN_POINTS),
            Line::scatter("mean", mean),
            Line::scatter("p95", p95),
        ],
        ..Panel::default()
    };
    plot_panels_file(path, (900, 700), &[panel]).map_err(|e| e.to_string())
}

fn plot_classes(path: &Path, report: &TestbedReport) -> Result<(), String> {
    let root = SVGBackend::new(path, (1400, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| drawing_failed(&e))?;
    let root = root
        .titled(
            "Mean latency per class: EMULATED testbed ÷ D vs SIMULATED (µs of the modelled system)",
            ("sans-serif", 20),
        )
        .map_err(|e| drawing_failed(&e))?;
    let panels = root.split_evenly((1, 2));
    let d = report.settings.dilation;
    let colors = [
        ("testbed batch", plotters::prelude::RGBColor(158, 202, 225)),
        ("sim batch", plotters::prelude::RGBColor(31, 119, 180)),
        ("testbed chisel", plotters::prelude::RGBColor(252, 174, 145)),
        ("sim chisel", plotters::prelude::RGBColor(214, 39, 40)),
    ];
    for (panel, (title, elephant)) in panels.iter().zip([("mice", false), ("elephants", true)]) {
        let groups: Vec<(String, Vec<f64>)> = report
            .results
            .iter()
            .map(|r| {
                let values = if elephant {
                    vec![
                        r.batch.elephant_mean_us / d,
                        r.sim.batch.elephant_mean_us,
                        r.chisel.elephant_mean_us / d,
                        r.sim.chisel.elephant_mean_us,
                    ]
                } else {
                    vec![
                        r.batch.mice_mean_us / d,
                        r.sim.batch.mice_mean_us,
                        r.chisel.mice_mean_us / d,
                        r.sim.chisel.mice_mean_us,
                    ]
                };
                (r.name.clone(), values)
            })
            .collect();
        draw_bars(panel, title, "scenario", &groups, &colors, "mean µs")?;
    }
    root.present().map_err(|e| drawing_failed(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailtrim_policy::costspec::Units;

    #[test]
    fn the_default_grid_is_24_distinct_points_of_the_paper_grid() {
        let grid = testbed_grid();
        assert_eq!(grid.len(), 24);
        let paper = tailtrim_sim::chisel::paper_grid();
        for point in &grid {
            assert!(
                paper.contains(point),
                "{} is not in the paper's grid",
                point.name()
            );
        }
        let mut names: Vec<String> = grid.iter().map(GridPoint::name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 24);
    }

    #[test]
    fn emulated_costs_are_the_paper_profile_dilated() {
        // The reply the server prices: `VALUE <24-byte key> 0 100\r\n` + value + `\r\n`, END.
        assert_eq!(reply_bytes(1, 24, 100), 6 + 24 + 8 + 100 + 2 + 5);
        for dilation in [1.0, 10.0, 25.0] {
            let (service, network) = emulation_specs(dilation);
            for keys in [1u64, 7, 25, 100] {
                let bytes = reply_bytes(keys, KEY_BYTES, VALUE_BYTES);
                let units = Units { keys, bytes };
                let want_service = dilation * (3.3 + 0.6 * keys as f64) * 1e3;
                let want_network = dilation * (85.0 + 6.5 * keys as f64) * 1e3;
                assert!((service.mean_nanos(units) - want_service).abs() < 1.0);
                // The server prices the network by bytes only (keys = 1).
                let network_units = Units { keys: 1, bytes };
                assert!(
                    (network.mean_nanos(network_units) - want_network).abs() < 1.0,
                    "{keys} keys at {dilation}: {} vs {want_network}",
                    network.mean_nanos(network_units)
                );
            }
            // The texts round-trip, as the server parses them.
            assert_eq!(CostSpec::parse(&service.to_string()).ok(), Some(service));
            let parsed = CostSpec::parse(&network.to_string()).ok();
            assert!(parsed.is_some_and(|p| (p.mean_nanos(Units {
                keys: 1,
                bytes: 1405
            }) - network.mean_nanos(Units {
                keys: 1,
                bytes: 1405
            }))
            .abs()
                < 1.0));
        }
    }

    fn run_with(mean: f64, p95: f64) -> Run {
        Run {
            all: ClassSummary {
                mean_us: mean,
                p95_us: p95,
                ..ClassSummary::default()
            },
            ..Run::default()
        }
    }

    #[test]
    fn within_ten_points_compares_medians_of_rounds_against_the_simulator() {
        let point = testbed_grid()[0];
        let sim = run_point(
            &Setup {
                requests: 400,
                sweep: Vec::new(),
                ..Setup::default()
            },
            &point,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let settings = TestbedSettings {
            dilation: 10.0,
            backend_workers: 4,
            repeats: 3,
            measured_requests: 10,
            warmup_requests: 0,
            keys: 10,
            emulate_service: String::new(),
            emulate_network: String::new(),
            reply_bytes_per_key: 140,
            seed: 1,
            bench_connections: 1,
        };
        // Batch medians 1000 (mean) and 4000 (p95); chisel's set so the testbed's gains equal
        // the simulator's, then 11 points lower on the p95.
        let batch = vec![
            run_with(900.0, 3000.0),
            run_with(1000.0, 4000.0),
            run_with(5000.0, 9000.0),
        ];
        let chisel_at = |mean_gain: f64, p95_gain: f64| {
            let mean = 1000.0 * (1.0 - mean_gain / 100.0);
            let p95 = 4000.0 * (1.0 - p95_gain / 100.0);
            vec![run_with(mean, p95), run_with(mean, p95), run_with(1.0, 1.0)]
        };
        let same = scenario_result(
            point,
            &settings,
            1,
            batch.clone(),
            chisel_at(sim.gain_mean_pct, sim.gain_p95_pct),
            sim.clone(),
        );
        assert!(same.within && same.diff_mean_points.abs() < 1e-9);
        let off = scenario_result(
            point,
            &settings,
            1,
            batch,
            chisel_at(sim.gain_mean_pct, sim.gain_p95_pct - 11.0),
            sim,
        );
        assert!(!off.within);
        assert!((off.diff_p95_points + 11.0).abs() < 1e-9);
        let summary = summarize(&[same, off]);
        assert_eq!(
            (
                summary.scenarios_within,
                summary.scenarios_within_mean,
                summary.scenarios_within_p95
            ),
            (1, 2, 1)
        );
        // Mean p95 gains differ by 5.5 points: within overall.
        assert!(summary.overall_within);
    }
}
