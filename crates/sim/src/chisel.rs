//! Chisel against batching over the paper's 360 scenarios, in the cluster simulator
//! (Birke et al., "Chisel: Reshaping Queries to Trim Latency in Key-Value Stores", ICAC 2019,
//! Section V): what `tailtrim experiment chisel` runs.
//!
//! ```text
//!  grid: A (15 mean inter-arrivals) × mice keys {1,5,10} × mice:elephant {9,5}:1 × o {0..180 µs}
//!    │   elephants of 100 keys, Poisson arrivals
//!    ▼   one ClusterScenario per point: 4 servers × 4 workers, every key on every server
//!        (one replica pool), 16 query slots, setup o per query, P_S = 3.3 + 0.6K µs (service),
//!        N_S = 85 + 6.5K µs (network, half each way)
//!  ├─ batch                                         (one query per request)
//!  ├─ chisel + online analyzer (model::chisel_online, the client's code) retuning (B, L)
//!  │    every epoch from the simulated queries' round trips and the epoch's counts
//!  └─ chisel at every fixed (B, L) of the sweep grid ─► best fixed (B, L) ─► optimality ratio
//!  same seed for all runs of a point (common random numbers)
//!    ▼
//!  PointResult (gains, query sizes, analyzer's shapes) ─► Summary (means, CCDF, by condition)
//! ```
//!
//! Pure: no I/O; the CLI writes the files and figures.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tailtrim_bench::dist::Distribution;
use tailtrim_bench::workload::Popularity;
use tailtrim_model::chisel_online::{AnalyzerConfig, NO_SPLIT};
use tailtrim_policy::chisel::{ChiselPlanner, DEFAULT_ELEPHANT_THRESHOLD};
use tailtrim_policy::costspec::{CostSpec, Dispersion};
use tailtrim_policy::planner::QueryShape;

use crate::cluster::{
    run_cluster, run_cluster_with, AnalysisReport, ArrivalProcess, ClassResult, ClusterResult,
    ClusterScenario, ClusterWorkload, OnlineAnalysis, ServerQueue,
};
use crate::SimError;

/// The paper's mean inter-arrival times, µs.
pub const INTERARRIVALS_US: [f64; 15] = [
    50.0, 60.0, 70.0, 90.0, 120.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0,
    1100.0,
];
/// Keys of a mouse request.
pub const MICE_KEYS: [u32; 3] = [1, 5, 10];
/// Keys of an elephant request.
pub const ELEPHANT_KEYS: u32 = 100;
/// Mice per elephant.
pub const MICE_PER_ELEPHANT: [u32; 2] = [9, 5];
/// Injected client overhead per query, µs.
pub const OVERHEADS_US: [f64; 4] = [0.0, 60.0, 120.0, 180.0];
/// The paper's memcached processing time `P_S = 3.3 + 0.6·K` µs.
pub const PAPER_SERVICE: &str = "const=3.3us,key=0.6us";
/// The paper's network time `N_S = 85 + 6.5·K` µs, half on each way.
pub const PAPER_NETWORK_ONE_WAY: &str = "const=42.5us,key=3.25us";
/// Merge levels of the fixed-shape sweep.
pub const SWEEP_MERGE_LEVELS: [u32; 4] = [1, 2, 4, 8];
/// Chunk sizes of the fixed-shape sweep (`u32::MAX`: no split; 100 keys give 1, 2, 4, 6, 10 and
/// 15 chunks).
pub const SWEEP_CHUNK_SIZES: [u32; 6] = [NO_SPLIT, 50, 25, 17, 10, 7];

/// One scenario of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GridPoint {
    /// Mean inter-arrival time `A`, µs.
    pub interarrival_us: f64,
    /// Keys of a mouse.
    pub mice_keys: u32,
    /// Mice per elephant.
    pub mice_per_elephant: u32,
    /// Client overhead per query `o`, µs.
    pub overhead_us: f64,
}

impl GridPoint {
    /// `A<µs>-m<keys>-r<mice per elephant>-o<µs>`, as the real runs name scenarios.
    pub fn name(&self) -> String {
        format!(
            "A{}-m{}-r{}-o{}",
            self.interarrival_us, self.mice_keys, self.mice_per_elephant, self.overhead_us
        )
    }
}

/// The paper's 360 scenarios, A fastest-varying last.
pub fn paper_grid() -> Vec<GridPoint> {
    let mut grid = Vec::with_capacity(360);
    for &mice_keys in &MICE_KEYS {
        for &mice_per_elephant in &MICE_PER_ELEPHANT {
            for &overhead_us in &OVERHEADS_US {
                for &interarrival_us in &INTERARRIVALS_US {
                    grid.push(GridPoint {
                        interarrival_us,
                        mice_keys,
                        mice_per_elephant,
                        overhead_us,
                    });
                }
            }
        }
    }
    grid
}

/// The system every scenario runs on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// Servers in the replica pool (every key on each).
    pub servers: usize,
    /// Worker threads per server.
    pub workers_per_server: usize,
    /// Query slots of the client (`C`).
    pub query_threads: usize,
    /// Server time per query.
    pub service: String,
    /// One-way network time per message.
    pub network: String,
    /// Value bytes of every key.
    pub value_bytes: u64,
    /// Distinct keys.
    pub keyspace: u64,
    /// Requests per run.
    pub requests: u64,
    /// Share of each run not measured.
    pub warmup_fraction: f64,
    /// The analyzer's epoch, in mean inter-arrival times (expected requests per epoch).
    pub epoch_requests: f64,
    /// The analyzer's settings (`client_threads`/`server_threads` are derived).
    pub analyzer: AnalyzerConfig,
    /// Seed of every run (each point uses the same seed for all its runs).
    pub seed: u64,
    /// Fixed `(B, L)` shapes swept for the optimality ratio (empty: no sweep).
    pub sweep: Vec<(u32, u32)>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            servers: 4,
            workers_per_server: 4,
            query_threads: 16,
            service: PAPER_SERVICE.to_string(),
            network: PAPER_NETWORK_ONE_WAY.to_string(),
            value_bytes: 100,
            keyspace: 100_000,
            requests: 10_000,
            warmup_fraction: 0.1,
            epoch_requests: 250.0,
            analyzer: AnalyzerConfig::default(),
            seed: 1,
            sweep: default_sweep(),
        }
    }
}

/// Every `(B, L)` of [`SWEEP_MERGE_LEVELS`] × [`SWEEP_CHUNK_SIZES`].
pub fn default_sweep() -> Vec<(u32, u32)> {
    SWEEP_MERGE_LEVELS
        .iter()
        .flat_map(|&b| SWEEP_CHUNK_SIZES.iter().map(move |&l| (b, l)))
        .collect()
}

/// Latency and query shape of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Mean over all requests, µs.
    pub mean_us: f64,
    /// 95th percentile over all requests, µs.
    pub p95_us: f64,
    /// Mice mean, µs.
    pub mice_mean_us: f64,
    /// Mice p95, µs.
    pub mice_p95_us: f64,
    /// Elephants' mean, µs.
    pub elephant_mean_us: f64,
    /// Elephants' p95, µs.
    pub elephant_p95_us: f64,
    /// Backend queries per request.
    pub queries_per_request: f64,
    /// Mean keys per backend query.
    pub keys_per_query: f64,
    /// Fetches merged into another's query.
    pub merged_fetches: u64,
    /// Mean utilization of a server worker.
    pub server_utilization: f64,
    /// The histograms (nanoseconds) the percentiles above are read from: `all`, `mice`,
    /// `elephants` (a class with no request is absent). Not serialized here: the CLI writes
    /// them into results.json in the lab's encoding.
    #[serde(skip)]
    pub histograms: Vec<(&'static str, Histogram<u64>)>,
}

impl Outcome {
    fn of(result: &ClusterResult, point: &GridPoint, workers: usize) -> Outcome {
        let mice = result.by_keys.get(&point.mice_keys);
        let elephants = result.by_keys.get(&ELEPHANT_KEYS);
        let servers = result.server_utilization.len().max(1) as f64;
        Outcome {
            mean_us: result.overall.summary.mean_us,
            p95_us: p95_us(&result.overall),
            mice_mean_us: mice.map_or(0.0, |c| c.summary.mean_us),
            mice_p95_us: mice.map_or(0.0, p95_us),
            elephant_mean_us: elephants.map_or(0.0, |c| c.summary.mean_us),
            elephant_p95_us: elephants.map_or(0.0, p95_us),
            queries_per_request: result.queries as f64 / result.requests.max(1) as f64,
            keys_per_query: result.keys_served as f64 / result.queries.max(1) as f64,
            merged_fetches: result.merged_fetches,
            server_utilization: result.server_utilization.iter().sum::<f64>()
                / servers
                / workers.max(1) as f64,
            histograms: [
                ("all", Some(&result.overall)),
                ("mice", mice),
                ("elephants", elephants),
            ]
            .into_iter()
            .filter_map(|(name, class)| Some((name, class?.histogram.clone()?)))
            .collect(),
        }
    }
}

/// The 95th percentile of a class, µs (from its histogram).
pub fn p95_us(class: &ClassResult) -> f64 {
    class
        .histogram
        .as_ref()
        .map_or(0.0, |h| h.value_at_quantile(0.95) as f64 / 1e3)
}

/// One fixed `(B, L)` of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepOutcome {
    /// `B`.
    pub merge_level: u32,
    /// `L` (`u32::MAX`: no split).
    pub chunk_size: u32,
    /// Mean, µs.
    pub mean_us: f64,
    /// p95, µs.
    pub p95_us: f64,
}

/// Everything one scenario produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// The scenario.
    pub point: GridPoint,
    /// Batching.
    pub batch: Outcome,
    /// Chisel with the online analyzer.
    pub chisel: Outcome,
    /// `(batch − chisel) / batch` of the mean, %.
    pub gain_mean_pct: f64,
    /// `(batch − chisel) / batch` of the p95, %.
    pub gain_p95_pct: f64,
    /// Epochs the analyzer ran, fell back to batching, and held a plan.
    pub epochs: u64,
    /// Epochs in fallback.
    pub fallback_epochs: u64,
    /// The analyzer's most used `(B, L)` in the measured part, and its share of those epochs.
    pub main_shape: (u32, u32),
    /// Share of measured epochs at `main_shape`.
    pub main_shape_share: f64,
    /// The fixed shapes (empty without a sweep).
    pub sweep: Vec<SweepOutcome>,
    /// Best swept mean over chisel's mean (1: as good as the best fixed shape).
    pub optimality_mean: Option<f64>,
    /// Best swept p95 over chisel's p95.
    pub optimality_p95: Option<f64>,
}

fn spec(text: &str) -> Result<CostSpec, SimError> {
    CostSpec::parse(text).map_err(|e| SimError::Config(format!("cost spec {text:?}: {e}")))
}

/// The cluster scenario of one grid point (planner `batch` or `chisel`).
pub fn scenario(
    setup: &Setup,
    point: &GridPoint,
    planner: &str,
) -> Result<ClusterScenario, SimError> {
    let mice_share = f64::from(point.mice_per_elephant) / f64::from(point.mice_per_elephant + 1);
    let setup_spec = if point.overhead_us > 0.0 {
        CostSpec::constant(point.overhead_us * 1e3, Dispersion::Fixed)
    } else {
        CostSpec::ZERO
    };
    Ok(ClusterScenario {
        servers: setup.servers,
        workers_per_server: setup.workers_per_server,
        server_queue: ServerQueue::Drr,
        replicas: setup.servers,
        client_threads: 1,
        planner: planner.to_string(),
        workload: ClusterWorkload {
            keyspace: setup.keyspace,
            popularity: Popularity::Uniform,
            keys_per_request: Distribution::Table {
                entries: vec![
                    (f64::from(point.mice_keys), mice_share),
                    (f64::from(ELEPHANT_KEYS), 1.0 - mice_share),
                ],
                tail: None,
            },
            value_bytes: Distribution::Fixed {
                value: setup.value_bytes as f64,
            },
            large_value_bytes: crate::cluster::DEFAULT_LARGE_VALUE_BYTES,
            large_keys: None,
        },
        rate_rps: 1e6 / point.interarrival_us,
        arrival: ArrivalProcess::Poisson,
        closed_loop: None,
        requests: setup.requests,
        warmup_fraction: setup.warmup_fraction,
        service: spec(&setup.service)?,
        network: spec(&setup.network)?,
        client_send: CostSpec::ZERO,
        client_recv: CostSpec::ZERO,
        query_threads: setup.query_threads,
        query_setup: setup_spec,
        online_analysis: None,
        size_aware: None,
        seed: setup.seed,
    })
}

fn shape(merge_level: u32, chunk_size: u32) -> QueryShape {
    QueryShape {
        merge_level,
        chunk_size,
        elephant_threshold: DEFAULT_ELEPHANT_THRESHOLD,
    }
}

/// Runs batch, online chisel and the sweep for one point.
pub fn run_point(setup: &Setup, point: &GridPoint) -> Result<PointResult, SimError> {
    run_point_reusing(setup, point, None)
}

/// [`run_point`], taking batch's outcome and the fixed-(B, L) sweep from `stored` (an earlier
/// result of the same point and setup) instead of simulating them again: neither runs the
/// online analyzer, so only online Chisel is simulated.
pub fn run_point_reusing(
    setup: &Setup,
    point: &GridPoint,
    stored: Option<&PointResult>,
) -> Result<PointResult, SimError> {
    let base = scenario(setup, point, "batch")?;
    let workers = setup.workers_per_server;
    if let Some(previous) = stored {
        if previous.point != *point {
            return Err(SimError::Config(format!(
                "reused result is for {}, not {}",
                previous.point.name(),
                point.name()
            )));
        }
    }
    let online = ClusterScenario {
        planner: "chisel".to_string(),
        online_analysis: Some(OnlineAnalysis {
            epoch_secs: setup.epoch_requests * point.interarrival_us * 1e-6,
            config: setup.analyzer,
        }),
        ..base.clone()
    };
    let chisel = run_cluster_with(&online, Box::new(ChiselPlanner::new(shape(1, NO_SPLIT))))?;
    let analysis = chisel.analysis.clone().unwrap_or_default();
    let measured_epochs: u64 = analysis.shapes.iter().map(|s| s.epochs).sum();
    let (main_shape, main_shape_share) =
        analysis.shapes.first().map_or((analysis.last, 0.0), |s| {
            (
                (s.merge_level, s.chunk_size),
                s.epochs as f64 / measured_epochs.max(1) as f64,
            )
        });
    if let Some(previous) = stored {
        return Ok(point_result(
            point,
            previous.batch.clone(),
            Outcome::of(&chisel, point, workers),
            &analysis,
            (main_shape, main_shape_share),
            previous.sweep.clone(),
        ));
    }
    let batch = run_cluster(&base)?;
    let fixed = ClusterScenario {
        planner: "chisel".to_string(),
        ..base
    };
    let mut sweep = Vec::with_capacity(setup.sweep.len());
    for &(merge_level, chunk_size) in &setup.sweep {
        let result = run_cluster_with(
            &fixed,
            Box::new(ChiselPlanner::new(shape(merge_level, chunk_size))),
        )?;
        sweep.push(SweepOutcome {
            merge_level,
            chunk_size,
            mean_us: result.overall.summary.mean_us,
            p95_us: p95_us(&result.overall),
        });
    }
    Ok(point_result(
        point,
        Outcome::of(&batch, point, workers),
        Outcome::of(&chisel, point, workers),
        &analysis,
        (main_shape, main_shape_share),
        sweep,
    ))
}

/// One point's result: gains and optimality ratios from its outcomes.
fn point_result(
    point: &GridPoint,
    batch: Outcome,
    chisel: Outcome,
    analysis: &AnalysisReport,
    (main_shape, main_shape_share): ((u32, u32), f64),
    sweep: Vec<SweepOutcome>,
) -> PointResult {
    let best = |value: fn(&SweepOutcome) -> f64| sweep.iter().map(value).min_by(f64::total_cmp);
    let optimality_mean = best(|s| s.mean_us).map(|b| b / chisel.mean_us);
    let optimality_p95 = best(|s| s.p95_us).map(|b| b / chisel.p95_us);
    PointResult {
        point: *point,
        gain_mean_pct: gain(batch.mean_us, chisel.mean_us),
        gain_p95_pct: gain(batch.p95_us, chisel.p95_us),
        batch,
        chisel,
        epochs: analysis.epochs,
        fallback_epochs: analysis.fallbacks,
        main_shape,
        main_shape_share,
        sweep,
        optimality_mean,
        optimality_p95,
    }
}

/// Latency reduction from `before` to `after`, %.
pub fn gain(before: f64, after: f64) -> f64 {
    if before > 0.0 {
        (before - after) / before * 100.0
    } else {
        0.0
    }
}

/// Mean gains of the scenarios sharing one value of a condition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConditionGain {
    /// Condition (`A`, `mice keys`, `mice:elephant`, `overhead`).
    pub condition: String,
    /// Its value.
    pub value: f64,
    /// Scenarios.
    pub scenarios: usize,
    /// Mean gain on the mean, %.
    pub gain_mean_pct: f64,
    /// Mean gain on the p95, %.
    pub gain_p95_pct: f64,
}

/// The run's summary, and the issue's acceptance checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Scenarios.
    pub scenarios: usize,
    /// Mean over scenarios of the gain on the mean, %.
    pub mean_gain_mean_pct: f64,
    /// Mean over scenarios of the gain on the p95, %.
    pub mean_gain_p95_pct: f64,
    /// Median gain on the p95, %.
    pub median_gain_p95_pct: f64,
    /// Worst gain on the p95, % (and its scenario).
    pub worst_gain_p95_pct: f64,
    /// Scenario of the worst p95 gain.
    pub worst_scenario: String,
    /// Worst gain on the mean, %.
    pub worst_gain_mean_pct: f64,
    /// Scenarios where chisel's p95 is more than 5 % above batch's.
    pub worse_than_batch_p95: Vec<String>,
    /// Median optimality ratio on the mean (None without a sweep).
    pub median_optimality_mean: Option<f64>,
    /// Median optimality ratio on the p95.
    pub median_optimality_p95: Option<f64>,
    /// Mean gains by condition (Fig. 8).
    pub by_condition: Vec<ConditionGain>,
    /// Acceptance: mean p95 gain ≥ 50 %.
    pub meets_p95_gain: bool,
    /// Acceptance: mean gain on the mean ≥ 16 %.
    pub meets_mean_gain: bool,
    /// Acceptance: no scenario worse than batch by > 5 % on p95.
    pub meets_no_regression: bool,
    /// Acceptance: median optimality ratio (mean) ≥ 0.9.
    pub meets_optimality: Option<bool>,
}

pub use tailtrim_bench::report::median;

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, count) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if count == 0 {
        0.0
    } else {
        sum / count as f64
    }
}

/// A condition's value of a scenario.
type Condition = fn(&GridPoint) -> f64;

/// Summarizes a run.
pub fn summarize(results: &[PointResult]) -> Summary {
    let gains_p95: Vec<f64> = results.iter().map(|r| r.gain_p95_pct).collect();
    let worst = results
        .iter()
        .min_by(|a, b| a.gain_p95_pct.total_cmp(&b.gain_p95_pct));
    let optimality = |pick: fn(&PointResult) -> Option<f64>| {
        let values: Vec<f64> = results.iter().filter_map(pick).collect();
        (!values.is_empty()).then(|| median(&values))
    };
    let mut by_condition = Vec::new();
    let conditions: [(&str, Condition); 4] = [
        ("A", |p| p.interarrival_us),
        ("mice keys", |p| f64::from(p.mice_keys)),
        ("mice per elephant", |p| f64::from(p.mice_per_elephant)),
        ("overhead", |p| p.overhead_us),
    ];
    for (name, value_of) in conditions {
        let mut values: Vec<f64> = results.iter().map(|r| value_of(&r.point)).collect();
        values.sort_by(f64::total_cmp);
        values.dedup();
        for value in values {
            let matching: Vec<&PointResult> = results
                .iter()
                .filter(|r| value_of(&r.point) == value)
                .collect();
            by_condition.push(ConditionGain {
                condition: name.to_string(),
                value,
                scenarios: matching.len(),
                gain_mean_pct: mean(matching.iter().map(|r| r.gain_mean_pct)),
                gain_p95_pct: mean(matching.iter().map(|r| r.gain_p95_pct)),
            });
        }
    }
    let mean_gain_mean_pct = mean(results.iter().map(|r| r.gain_mean_pct));
    let mean_gain_p95_pct = mean(gains_p95.iter().copied());
    let worse_than_batch_p95: Vec<String> = results
        .iter()
        .filter(|r| r.gain_p95_pct < -5.0)
        .map(|r| r.point.name())
        .collect();
    let median_optimality_mean = optimality(|r| r.optimality_mean);
    Summary {
        scenarios: results.len(),
        mean_gain_mean_pct,
        mean_gain_p95_pct,
        median_gain_p95_pct: median(&gains_p95),
        worst_gain_p95_pct: worst.map_or(0.0, |r| r.gain_p95_pct),
        worst_scenario: worst.map_or_else(String::new, |r| r.point.name()),
        worst_gain_mean_pct: results
            .iter()
            .map(|r| r.gain_mean_pct)
            .min_by(f64::total_cmp)
            .unwrap_or(0.0),
        meets_p95_gain: mean_gain_p95_pct >= 50.0,
        meets_mean_gain: mean_gain_mean_pct >= 16.0,
        meets_no_regression: worse_than_batch_p95.is_empty(),
        worse_than_batch_p95,
        meets_optimality: median_optimality_mean.map(|m| m >= 0.9),
        median_optimality_mean,
        median_optimality_p95: optimality(|r| r.optimality_p95),
        by_condition,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_is_the_papers_360_scenarios() {
        let grid = paper_grid();
        assert_eq!(grid.len(), 360);
        let mut names: Vec<String> = grid.iter().map(GridPoint::name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 360);
    }

    fn small_setup() -> Setup {
        Setup {
            requests: 4_000,
            sweep: vec![(1, NO_SPLIT), (1, 25), (4, NO_SPLIT)],
            ..Setup::default()
        }
    }

    #[test]
    fn reusing_batch_and_the_sweep_simulates_only_online_chisel() {
        let point = GridPoint {
            interarrival_us: 400.0,
            mice_keys: 10,
            mice_per_elephant: 9,
            overhead_us: 60.0,
        };
        let full = run_point(&small_setup(), &point).unwrap();
        assert_eq!(
            run_point_reusing(&small_setup(), &point, Some(&full)).unwrap(),
            full
        );
        // What is reused is taken as stored (a doubled batch mean doubles into the gain).
        let mut stored = full.clone();
        stored.batch.mean_us *= 2.0;
        stored.sweep.truncate(1);
        let reused = run_point_reusing(&small_setup(), &point, Some(&stored)).unwrap();
        assert_eq!(reused.batch.mean_us, 2.0 * full.batch.mean_us);
        assert_eq!(reused.sweep.len(), 1);
        assert_eq!(reused.chisel, full.chisel);
        // A result of another point is refused.
        let other = GridPoint {
            mice_keys: 1,
            ..point
        };
        assert!(run_point_reusing(&small_setup(), &other, Some(&full)).is_err());
    }

    #[test]
    fn at_low_load_the_analyzer_splits_elephants_and_cuts_the_p95() {
        let point = GridPoint {
            interarrival_us: 1000.0,
            mice_keys: 1,
            mice_per_elephant: 5,
            overhead_us: 0.0,
        };
        let result = run_point(&small_setup(), &point).unwrap();
        assert!(result.main_shape.1 < ELEPHANT_KEYS, "{result:?}");
        assert!(result.chisel.queries_per_request > result.batch.queries_per_request);
        assert!(result.gain_p95_pct > 30.0, "{result:?}");
        // The fixed (1, ∞) shape is batching: same seed, same plan, same latency.
        let batching = &result.sweep[0];
        assert!(
            (batching.mean_us - result.batch.mean_us).abs() < 1e-9,
            "{result:?}"
        );
    }

    #[test]
    fn at_high_load_with_overhead_the_analyzer_merges_mice() {
        let point = GridPoint {
            interarrival_us: 60.0,
            mice_keys: 1,
            mice_per_elephant: 9,
            overhead_us: 120.0,
        };
        let result = run_point(&small_setup(), &point).unwrap();
        assert!(result.main_shape.0 > 1, "{result:?}");
        assert!(result.chisel.merged_fetches > 0, "{result:?}");
        // It also splits the elephants (L = 20 here, as in the full run), so keys per query
        // need not rise; what merging and splitting buy together is the gain.
        assert!(result.gain_mean_pct > 0.0, "{result:?}");
    }

    #[test]
    fn summary_counts_regressions_and_conditions() {
        let point = |a: f64| GridPoint {
            interarrival_us: a,
            mice_keys: 5,
            mice_per_elephant: 9,
            overhead_us: 0.0,
        };
        let outcome = |mean: f64, p95: f64| Outcome {
            mean_us: mean,
            p95_us: p95,
            mice_mean_us: 0.0,
            mice_p95_us: 0.0,
            elephant_mean_us: 0.0,
            elephant_p95_us: 0.0,
            queries_per_request: 1.0,
            keys_per_query: 1.0,
            merged_fetches: 0,
            server_utilization: 0.0,
            histograms: Vec::new(),
        };
        let result = |a: f64, chisel_p95: f64| PointResult {
            point: point(a),
            batch: outcome(100.0, 200.0),
            chisel: outcome(80.0, chisel_p95),
            gain_mean_pct: 20.0,
            gain_p95_pct: gain(200.0, chisel_p95),
            epochs: 1,
            fallback_epochs: 0,
            main_shape: (1, 25),
            main_shape_share: 1.0,
            sweep: Vec::new(),
            optimality_mean: Some(0.5),
            optimality_p95: None,
        };
        let summary = summarize(&[result(50.0, 100.0), result(60.0, 220.0)]);
        assert_eq!(summary.worse_than_batch_p95, vec![point(60.0).name()]);
        assert!((summary.mean_gain_p95_pct - 20.0).abs() < 1e-9);
        assert!(!summary.meets_p95_gain && summary.meets_mean_gain);
        assert_eq!(summary.meets_optimality, Some(false));
        let a: Vec<&ConditionGain> = summary
            .by_condition
            .iter()
            .filter(|c| c.condition == "A")
            .collect();
        assert_eq!(a.len(), 2);
        assert!((a[1].gain_p95_pct - (-10.0)).abs() < 1e-9);
    }
}
