//! `tailtrim sim minos`, `sim validate` and `sim cluster` reports: the sweep's
//! `results.json` with its settings, metadata and every point's histograms, its markdown and
//! figures; the simulator beside the real experiment's results; the cluster's table.
//!
//! ```text
//!   SweepConfig + SweepResult ──► SweepReport::new ──► results.json (histograms kept)
//!                                  SweepReport::write ──► results.md + small_p99/large_p99
//!   results.json ──► SweepReport::read ──► check_histograms (percentiles = histograms')
//!   experiments/minos/results.json ──► RealResults::sweep_config ──► (the caller simulates)
//!                                  ──► Validation::compare ──► validation.json / .md
//!   ClusterScenario + ClusterResult per rate ──► cluster_table / cluster_json (sim cluster)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tailtrim_bench::workload::WorkloadSpec;
use tailtrim_sim::cost::Profile;
use tailtrim_sim::options::{steering_name, SweepOptions};
use tailtrim_sim::sweep::{self, SweepConfig, SweepResult};
use tailtrim_sim::{ClusterResult, ClusterScenario, Policy, RunResult, SimError};

use crate::figures::{plot_latency_vs_throughput, Curve, LatencyThroughput};
use crate::histogram::Encoded;
use crate::meta::{RunMetadata, SeededMetadata, SIMULATED_NOTE};
use crate::stats::median;
use crate::LabError;

/// A built-in profile by name or a profile JSON file (`tailtrim sim profile`'s output).
pub fn load_profile(name: &str) -> Result<Profile, LabError> {
    match Profile::builtin(name) {
        Some(profile) => Ok(profile),
        None => {
            let text = std::fs::read_to_string(name).map_err(|error| {
                LabError::Results(format!(
                    "--profile {name}: not a built-in ({}) and not readable: {error}",
                    tailtrim_sim::cost::BUILTIN_PROFILES.join(", ")
                ))
            })?;
            Profile::from_json(&text).map_err(|error| LabError::Results(format!("{name}: {error}")))
        }
    }
}

/// Settings recorded next to the results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    pub cores: usize,
    pub connections: usize,
    pub requests: usize,
    pub seed: u64,
    pub warmup_fraction: f64,
    pub epoch_ms: Option<f64>,
    pub knee_us: f64,
    pub policies: Vec<String>,
    pub fixed_threshold_bytes: Option<u64>,
    pub fixed_small_workers: Option<usize>,
    pub percentile: f64,
    pub large_share: Option<f64>,
    #[serde(default)]
    pub popularity: Option<String>,
    #[serde(default)]
    pub early_steering: Option<String>,
    #[serde(default)]
    pub serialize_connections: bool,
    #[serde(default)]
    pub service_dispersion: bool,
}

/// `results.json` of `sim minos --out`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepReport {
    /// `minos-sim`.
    pub experiment: String,
    /// How the file was produced: commit and dirty tree, machine, load during the run, the
    /// command. The figures do not depend on the machine (the simulation is deterministic);
    /// only `wall_seconds` does. Empty in files written before it was kept.
    #[serde(default)]
    pub metadata: RunMetadata,
    /// The command that produced it.
    pub command: String,
    /// The settings of the sweep.
    pub settings: Settings,
    /// The cost model simulated.
    pub profile: Profile,
    /// The workload simulated.
    pub workload: WorkloadSpec,
    /// The curves and their summary.
    pub result: SweepResult,
    /// Per curve of `result.curves` (same order), per point, the histograms every reported
    /// percentile of that point was read from. Absent in files written before they were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub histograms: Vec<CurveHistograms>,
}

/// The histograms of one policy's points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveHistograms {
    /// The policy's name.
    pub policy: String,
    /// Per point of its curve, in order.
    pub points: Vec<PointHistograms>,
}

/// One point's latency histograms (nanoseconds; hdrhistogram V2, base64: the lab's
/// [`Encoded`]), one per class the point reports percentiles for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointHistograms {
    /// The point's offered rate.
    pub offered_rps: f64,
    /// Small requests, arrival → reply (`small` of the point).
    pub small: Encoded,
    /// Large requests, arrival → reply (`large`).
    pub large: Encoded,
    /// Small requests, first core → reply (`small_in_server`).
    pub small_in_server: Encoded,
    /// Large requests, first core → reply (`large_in_server`).
    pub large_in_server: Encoded,
}

/// Encodes every point's histograms of `result`.
pub fn encode_histograms(result: &SweepResult) -> Result<Vec<CurveHistograms>, LabError> {
    result
        .curves
        .iter()
        .map(|curve| {
            let points = curve
                .points
                .iter()
                .map(|point| {
                    let h = &point.histograms;
                    Ok(PointHistograms {
                        offered_rps: point.offered_rps,
                        small: Encoded::encode(&h.small)?,
                        large: Encoded::encode(&h.large)?,
                        small_in_server: Encoded::encode(&h.small_in_server)?,
                        large_in_server: Encoded::encode(&h.large_in_server)?,
                    })
                })
                .collect::<Result<Vec<_>, LabError>>()?;
            Ok(CurveHistograms {
                policy: curve.policy.name().to_string(),
                points,
            })
        })
        .collect()
}

impl SweepReport {
    /// The report of a finished sweep: `config` as simulated (from `options`), its result,
    /// the run's metadata and command, every point's histograms.
    pub fn new(
        config: &SweepConfig,
        options: &SweepOptions,
        result: SweepResult,
        metadata: RunMetadata,
        command: String,
    ) -> Result<SweepReport, LabError> {
        Ok(SweepReport {
            experiment: "minos-sim".to_string(),
            metadata,
            histograms: encode_histograms(&result)?,
            command,
            settings: settings_of(config, options),
            profile: config.profile.clone(),
            workload: config.workload.clone(),
            result,
        })
    }

    /// Reads `results.json` of `directory`.
    pub fn read(directory: &Path) -> Result<SweepReport, LabError> {
        let path = directory.join("results.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|error| LabError::io(format!("reading {}", path.display()), error))?;
        serde_json::from_str(&text)
            .map_err(|error| LabError::Results(format!("{}: {error}", path.display())))
    }

    /// Checks that every percentile a point reports is the one its kept histogram gives (p50,
    /// p99, p99.9 and max of the four classes, to the nanosecond); the number of points
    /// checked.
    pub fn check_histograms(&self) -> Result<usize, LabError> {
        check_histograms(self)
    }

    /// The human report: settings, per-rate tables, summary.
    pub fn markdown(&self) -> String {
        markdown(self)
    }

    /// Writes results.md and the plots (small_p99, large_p99 as SVG and PNG) into
    /// `directory`, and results.json when `with_json`.
    pub fn write(&self, directory: &Path, with_json: bool) -> Result<(), LabError> {
        write_outputs(self, directory, with_json)
    }
}

fn check_histograms(report: &SweepReport) -> Result<usize, LabError> {
    let mut checked = 0;
    for (curve, kept) in report.result.curves.iter().zip(&report.histograms) {
        if kept.policy != curve.policy.name() || kept.points.len() != curve.points.len() {
            return Err(LabError::Results(format!(
                "histograms of {} do not match the curve of {}",
                kept.policy,
                curve.policy.name()
            )));
        }
        for (point, histograms) in curve.points.iter().zip(&kept.points) {
            for (class, summary, encoded) in [
                ("small", &point.small, &histograms.small),
                ("large", &point.large, &histograms.large),
                (
                    "small_in_server",
                    &point.small_in_server,
                    &histograms.small_in_server,
                ),
                (
                    "large_in_server",
                    &point.large_in_server,
                    &histograms.large_in_server,
                ),
            ] {
                let histogram = encoded.decode()?;
                let micros = |value: u64| value as f64 / 1e3;
                let recomputed = if histogram.is_empty() {
                    [0.0; 4]
                } else {
                    [
                        micros(histogram.value_at_quantile(0.5)),
                        micros(histogram.value_at_quantile(0.99)),
                        micros(histogram.value_at_quantile(0.999)),
                        micros(histogram.max()),
                    ]
                };
                let reported = [
                    summary.p50_us,
                    summary.p99_us,
                    summary.p999_us,
                    summary.max_us,
                ];
                if histogram.len() != summary.count
                    || recomputed
                        .iter()
                        .zip(reported)
                        .any(|(again, reported)| (again - reported).abs() > 1e-3)
                {
                    return Err(LabError::Results(format!(
                        "{} at {:.0} requests/s, {class}: reported {} requests, p50/p99/p99.9/max \
                         {reported:?} µs; its histogram: {} requests, {recomputed:?} µs",
                        curve.policy.name(),
                        point.offered_rps,
                        summary.count,
                        histogram.len()
                    )));
                }
            }
            checked += 1;
        }
    }
    Ok(checked)
}

/// The settings a report records of `config`, simulated from `options`.
fn settings_of(config: &SweepConfig, options: &SweepOptions) -> Settings {
    Settings {
        cores: config.cores,
        connections: config.connections,
        requests: config.requests,
        seed: config.seed,
        warmup_fraction: config.warmup_fraction,
        epoch_ms: options.epoch_ms,
        knee_us: config.knee_us,
        policies: config
            .policies
            .iter()
            .map(|p| p.name().to_string())
            .collect(),
        fixed_threshold_bytes: options.threshold,
        fixed_small_workers: options.small_workers,
        percentile: options.percentile,
        large_share: options.large_share,
        popularity: options.popularity.clone(),
        serialize_connections: config.serialize_connections,
        service_dispersion: config.service_dispersion,
        early_steering: Some(steering_name(config.steering).to_string()),
    }
}

fn write_outputs(report: &SweepReport, directory: &Path, with_json: bool) -> Result<(), LabError> {
    std::fs::create_dir_all(directory)
        .map_err(|error| LabError::io(format!("creating {}", directory.display()), error))?;
    let write = |name: &str, text: String| {
        let path = directory.join(name);
        std::fs::write(&path, text)
            .map_err(|error| LabError::io(format!("writing {}", path.display()), error))
    };
    if with_json {
        write(
            "results.json",
            serde_json::to_string_pretty(report)
                .map_err(|error| LabError::Results(error.to_string()))?,
        )?;
    }
    write("results.md", markdown(report))?;
    for class in [LatencyClass::Small, LatencyClass::Large] {
        plot_latency_vs_throughput(
            directory,
            &format!("{}_p99", class.name()),
            &latency_plot(report, class),
        )
        .map_err(|error| LabError::Results(error.to_string()))?;
    }
    Ok(())
}

/// The commit of the code that ran, as `tailtrim --version` prints it: the binary's build
/// commit (`-dirty` when its tree differed); for files written before it was recorded, the
/// working tree's commit and ` (dirty tree)` when it differed.
fn code_commit(metadata: &RunMetadata) -> (&str, &'static str) {
    if metadata.build.is_empty() {
        let dirty = if metadata.dirty { " (dirty tree)" } else { "" };
        (&metadata.commit, dirty)
    } else {
        (&metadata.build, "")
    }
}

fn micros(value: f64) -> String {
    if value <= 0.0 {
        "–".to_string()
    } else if value >= 10_000.0 {
        format!("{:.1} ms", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

fn optional(value: Option<f64>, unit: &str) -> String {
    value.map_or_else(|| "–".to_string(), |value| format!("{value:.2}{unit}"))
}

/// The human report: settings, per-rate tables, summary.
fn markdown(report: &SweepReport) -> String {
    let result = &report.result;
    let settings = &report.settings;
    let cost = &report.profile.cost;
    let mut text = String::new();
    let mut line = |content: String| {
        text.push_str(&content);
        text.push('\n');
    };
    line(format!(
        "# Simulated Minos figure ({} cores)\n",
        settings.cores
    ));
    line(format!("Command: `{}`\n", report.command));
    let metadata = &report.metadata;
    if !metadata.commit.is_empty() {
        line(format!(
            "SIMULATED (deterministic: the figures depend on the commit and the command, not on \
             the machine). Commit `{}`{}; run on {} ({} cores, load average {} at the start), \
             {:.1} s.\n",
            code_commit(metadata).0,
            code_commit(metadata).1,
            if metadata.cpu_model.is_empty() {
                "an unknown CPU"
            } else {
                metadata.cpu_model.as_str()
            },
            metadata.cores,
            metadata.load_average_start,
            metadata.wall_seconds
        ));
    }
    let epoch = settings.epoch_ms.map_or_else(
        || "1/40 of each run".to_string(),
        |millis| format!("{millis} ms"),
    );
    line(format!(
        "{} cores, {} connections, {} requests per point (first {:.0} % not measured), seed {}, \
         size-aware epoch {}; workload `{}`: {:.2} % large requests, mean service {:.2} µs, \
         estimated capacity {:.0} k requests/s.\n",
        settings.cores,
        settings.connections,
        settings.requests,
        settings.warmup_fraction * 100.0,
        settings.seed,
        epoch,
        report.workload.name,
        result.large_share * 100.0,
        result.mean_service_us,
        result.estimated_capacity_rps / 1e3
    ));
    line(format!(
        "Cost model ({}): fixed {:.0} ns + {:.3} ns/byte + {:.0} ns/packet; hand-off {:.0} ns, \
         steal {:.0} ns, dispatch {:.0} ns + {:.0} % of fixed.\n",
        report.profile.description,
        cost.fixed_ns,
        cost.per_byte_ns,
        cost.per_packet_ns,
        cost.handoff_ns,
        cost.steal_ns,
        cost.dispatch_ns,
        cost.parse_share * 100.0
    ));
    let header = |line: &mut dyn FnMut(String)| {
        let names: Vec<&str> = result
            .curves
            .iter()
            .map(|curve| curve.policy.name())
            .collect();
        line(format!("| offered | {} |", names.join(" | ")));
        line(format!("|---:|{}", "---:|".repeat(names.len())));
    };
    let table = |line: &mut dyn FnMut(String), title: &str, pick: &dyn Fn(&RunResult) -> String| {
        line(format!("## {title}\n"));
        header(line);
        for (index, rate) in result.rates.iter().enumerate() {
            let cells: Vec<String> = result
                .curves
                .iter()
                .map(|curve| {
                    curve
                        .points
                        .get(index)
                        .map_or_else(|| "–".to_string(), pick)
                })
                .collect();
            line(format!("| {:.0}k | {} |", rate / 1e3, cells.join(" | ")));
        }
        line(String::new());
    };
    table(
        &mut line,
        "Small-request p99 (µs, arrival → reply)",
        &|point| micros(point.small.p99_us),
    );
    table(&mut line, "Large-request p99 (µs)", &|point| {
        micros(point.large.p99_us)
    });
    table(&mut line, "Achieved throughput (k requests/s)", &|point| {
        format!("{:.0}", point.achieved_rps / 1e3)
    });
    table(&mut line, "Small-request p50 / p99.9 (µs)", &|point| {
        format!(
            "{} / {}",
            micros(point.small.p50_us),
            micros(point.small.p999_us)
        )
    });
    table(&mut line, "Mean requests queued (all queues)", &|point| {
        format!("{:.1}", point.mean_queued)
    });
    if let Some(curve) = result.curves.iter().find(|c| c.policy == Policy::SizeAware) {
        line("## Size-aware decisions (last of each run)\n".to_string());
        line("| offered | threshold (B) | small cores | hand-offs | epochs |".to_string());
        line("|---:|---:|---:|---:|---:|".to_string());
        for point in &curve.points {
            let last = point.decisions.last();
            line(format!(
                "| {:.0}k | {} | {} | {} | {} |",
                point.offered_rps / 1e3,
                last.map_or("–".to_string(), |d| d.threshold_bytes.to_string()),
                last.map_or("–".to_string(), |d| d.small_workers.to_string()),
                point.handoffs,
                point.epochs
            ));
        }
        line(String::new());
    }
    let summary = &result.summary;
    line("## Summary\n".to_string());
    match summary.knee.knee_rate_rps {
        Some(rate) => line(format!(
            "- Early binding's small p99 first exceeds {:.0} µs at **{:.0}k** requests/s ({}); \
             size-aware's small p99 there: **{}**; ratio **{}**.",
            summary.knee_us,
            rate / 1e3,
            micros(summary.knee.early_binding_small_p99_us.unwrap_or(0.0)),
            micros(summary.knee.size_aware_small_p99_us.unwrap_or(0.0)),
            optional(summary.knee.small_p99_ratio, "x")
        )),
        None => line(format!(
            "- Early binding's small p99 never exceeds {:.0} µs in this sweep.",
            summary.knee_us
        )),
    }
    for (name, value) in &summary.knee.small_p99_at_knee_us {
        let large = summary
            .knee
            .large_p99_at_knee_us
            .get(name)
            .copied()
            .unwrap_or(0.0);
        line(format!(
            "  - {name} at the knee: small p99 {}, large p99 {}",
            micros(*value),
            micros(large)
        ));
    }
    line("- Saturation (highest achieved) / highest offered rate kept up with / highest rate with small p99 ≤ knee (k requests/s):".to_string());
    for (name, value) in &summary.saturation_rps {
        let sustained = summary.max_sustained_rps.get(name).copied().unwrap_or(0.0);
        let under = summary
            .max_rate_small_p99_under_knee_rps
            .get(name)
            .copied()
            .unwrap_or(0.0);
        line(format!(
            "  - {name}: {:.0} / {:.0} / {:.0}",
            value / 1e3,
            sustained / 1e3,
            under / 1e3
        ));
    }
    if !summary.small_p99_ratio_by_rate.is_empty() {
        let ratios: Vec<String> = summary
            .small_p99_ratio_by_rate
            .iter()
            .map(|(rate, ratio)| format!("{:.0}k: {ratio:.1}x", rate / 1e3))
            .collect();
        line(format!(
            "- Early-binding / size-aware small p99 by offered rate: {}.",
            ratios.join(", ")
        ));
    }
    line(format!(
        "- Size-aware / early-binding saturation: **{}**.",
        optional(summary.saturation_ratio_size_aware_vs_early, "x")
    ));
    text
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LatencyClass {
    Small,
    Large,
}

impl LatencyClass {
    const fn name(self) -> &'static str {
        match self {
            LatencyClass::Small => "small",
            LatencyClass::Large => "large",
        }
    }

    fn p99(self, point: &RunResult) -> f64 {
        match self {
            LatencyClass::Small => point.small.p99_us,
            LatencyClass::Large => point.large.p99_us,
        }
    }
}

/// One color per policy, the same as the real experiment's plots use for the same systems.
fn policy_color(policy: Policy) -> (u8, u8, u8) {
    match policy {
        Policy::SizeAware => (214, 39, 40),
        Policy::EarlyBinding => (31, 119, 180),
        Policy::Stealing => (44, 160, 44),
        Policy::LateBinding => (148, 103, 189),
        Policy::Pinned => (255, 127, 14),
    }
}

/// The latency-vs-throughput figure of one class (the lab's one routine draws it).
fn latency_plot(report: &SweepReport, class: LatencyClass) -> LatencyThroughput {
    LatencyThroughput {
        caption: format!(
            "simulated minos, {} cores: {}-request p99 vs throughput",
            report.settings.cores,
            class.name()
        ),
        y_desc: format!("{}-request p99", class.name()),
        x_max: report.result.rates.iter().copied().fold(1.0, f64::max),
        curves: report
            .result
            .curves
            .iter()
            .map(|curve| Curve {
                name: curve.policy.name().to_string(),
                color: Some(policy_color(curve.policy)),
                points: curve
                    .points
                    .iter()
                    .map(|point| (point.achieved_rps, class.p99(point)))
                    .collect(),
            })
            .collect(),
    }
}

// ───────────────────────────── sim validate ─────────────────────────────

/// The parts of the real experiment's results.json the validation reads.
#[derive(Debug, Deserialize)]
pub struct RealResults {
    settings: RealSettings,
    systems: Vec<RealSystem>,
    #[serde(default)]
    summary: serde_json::Value,
}

#[derive(Debug, Deserialize)]
struct RealSettings {
    rates: Vec<f64>,
    threads: usize,
    connections: usize,
    #[serde(default)]
    seed: u64,
}

#[derive(Debug, Deserialize)]
struct RealSystem {
    name: String,
    points: Vec<RealPoint>,
}

#[derive(Debug, Deserialize)]
struct RealPoint {
    target_rps: f64,
    achieved_rps: f64,
    small_p99_us: f64,
    large_p99_us: f64,
    #[serde(default)]
    samples: Vec<serde_json::Value>,
}

/// One policy's real and simulated figures at one rate.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    policy: String,
    rate_rps: f64,
    real_achieved_rps: f64,
    sim_achieved_rps: f64,
    real_small_p99_us: f64,
    sim_small_p99_us: f64,
    real_large_p99_us: f64,
    sim_large_p99_us: f64,
    /// The server's own `stats sizeaware` small p99 (kernel receipt → reply queued, each run's
    /// own since the experiment resets the stats before it; results of older builds: parse →
    /// reply, cumulative), median over the point's repeats.
    real_in_server_small_p99_us: Option<f64>,
    real_in_server_large_p99_us: Option<f64>,
    sim_in_server_small_p99_us: f64,
    sim_in_server_large_p99_us: f64,
    real_threshold_bytes: Option<f64>,
    sim_threshold_bytes: Option<u64>,
    real_small_workers: Option<f64>,
    sim_small_workers: Option<usize>,
}

/// `validation.json` of `sim validate`: the simulator beside the real experiment.
#[derive(Debug, Clone, Serialize)]
pub struct Validation {
    /// How the file was produced: commit and dirty tree, machine, load, the command.
    metadata: RunMetadata,
    command: String,
    real_file: String,
    cores: usize,
    connections: usize,
    /// The real noise floor's small p99 by rate: `(rate, µs)`.
    floor_small_p99_us: Vec<(f64, f64)>,
    real_saturation_rps: BTreeMap<String, f64>,
    sim_saturation_rps: BTreeMap<String, f64>,
    /// Simulated saturation over rates up to 110 % of the cores' estimated capacity.
    sim_saturation_full_sweep_rps: BTreeMap<String, f64>,
    sim_estimated_capacity_rps: f64,
    real_summary: serde_json::Value,
    sim_summary: tailtrim_sim::Summary,
    points: Vec<Comparison>,
    /// Per simulated curve, per point, the histograms its percentiles come from (the real
    /// side's are in `real_file`).
    sim_histograms: Vec<CurveHistograms>,
}

fn stat_median(samples: &[serde_json::Value], name: &str) -> Option<f64> {
    let values: Vec<f64> = samples
        .iter()
        .filter_map(|sample| {
            sample
                .get("server_stats")?
                .get(name)?
                .as_str()?
                .parse()
                .ok()
        })
        .collect();
    (!values.is_empty()).then(|| median(&values))
}

/// `sim validate`'s default real results, relative to the repository's root.
pub const DEFAULT_REAL_RESULTS: &str = "experiments/minos/results.json";

/// The workspace root holding `relative`: the first directory with a `Cargo.toml` and
/// `relative` in it, going up from the working directory, then from the running binary (a
/// build under the repository's target/), then from the sources this binary was built from.
fn find_in_repository(relative: &Path) -> Option<PathBuf> {
    let working = std::env::current_dir().ok();
    let binary = std::env::current_exe().ok();
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    [working, binary, Some(sources)]
        .into_iter()
        .flatten()
        .find_map(|start| {
            start
                .ancestors()
                .find(|root| root.join("Cargo.toml").is_file() && root.join(relative).is_file())
                .map(|root| root.join(relative))
        })
}

/// The real results `sim validate` compares with, and how the report names them: the given
/// file as given, or the repository's [`DEFAULT_REAL_RESULTS`] under its repository path.
pub fn real_results_path(given: Option<&Path>) -> Result<(PathBuf, String), LabError> {
    match given {
        Some(path) => Ok((path.to_path_buf(), path.display().to_string())),
        None => find_in_repository(Path::new(DEFAULT_REAL_RESULTS))
            .map(|path| (path, DEFAULT_REAL_RESULTS.to_string()))
            .ok_or_else(|| {
                LabError::Results(format!(
                    "{DEFAULT_REAL_RESULTS} not found above the working directory or the binary \
                     (run inside the repository or pass --real FILE)"
                ))
            }),
    }
}

/// The simulated policy of a real system (`memcached` is pinned; the noise floor has none).
fn system_policy(name: &str) -> Option<Policy> {
    match name {
        "memcached" => Some(Policy::Pinned),
        "floor" => None,
        other => other.parse::<Policy>().ok(),
    }
}

impl RealResults {
    /// Reads the real experiment's results.json at `path`.
    pub fn read(path: &Path) -> Result<RealResults, LabError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| LabError::io(format!("reading {}", path.display()), error))?;
        serde_json::from_str(&text)
            .map_err(|error| LabError::Results(format!("{}: {error}", path.display())))
    }

    /// The sweep that reproduces the real experiment: its cores, connections, rates and
    /// systems' policies, software steering unless `options` say otherwise, connections
    /// serialized as in the server, the real seed unless another was given.
    pub fn sweep_config(
        &self,
        options: &SweepOptions,
        profile: Profile,
    ) -> Result<SweepConfig, SimError> {
        let policies: Vec<Policy> = self
            .systems
            .iter()
            .filter_map(|system| system_policy(&system.name))
            .collect();
        let mut options = options.clone();
        if options.early_steering.is_none() {
            options.early_steering = Some("software".to_string());
        }
        options.serialize_connections = true;
        if self.settings.seed != 0 && options.seed == sweep::DEFAULT_SEED {
            options.seed = self.settings.seed;
        }
        options.config(
            profile,
            self.settings.threads,
            self.settings.connections,
            policies,
            self.settings.rates.clone(),
        )
    }
}

impl Validation {
    /// The real results (named `real_file`) beside the simulated `result` of `config` at the
    /// same rates, and `beyond`, the same sweep up to its own saturation.
    pub fn compare(
        real: RealResults,
        real_file: String,
        config: &SweepConfig,
        result: &SweepResult,
        beyond: &SweepResult,
        metadata: RunMetadata,
        command: String,
    ) -> Result<Validation, LabError> {
        let mut points = Vec::new();
        let mut real_saturation = BTreeMap::new();
        let mut floor = Vec::new();
        for system in &real.systems {
            let saturation = system
                .points
                .iter()
                .map(|p| p.achieved_rps)
                .fold(0.0, f64::max);
            real_saturation.insert(system.name.clone(), saturation);
            let Some(policy) = system_policy(&system.name) else {
                for point in &system.points {
                    floor.push((point.target_rps, point.small_p99_us));
                }
                continue;
            };
            let Some(curve) = result.curves.iter().find(|curve| curve.policy == policy) else {
                continue;
            };
            for point in &system.points {
                let Some(sim) = curve
                    .points
                    .iter()
                    .find(|p| p.offered_rps == point.target_rps)
                else {
                    continue;
                };
                points.push(Comparison::of(&system.name, policy, point, sim));
            }
        }
        Ok(Validation {
            metadata,
            command,
            real_file,
            cores: config.cores,
            connections: config.connections,
            floor_small_p99_us: floor,
            real_saturation_rps: real_saturation,
            sim_saturation_rps: result.summary.saturation_rps.clone(),
            sim_saturation_full_sweep_rps: beyond.summary.saturation_rps.clone(),
            sim_estimated_capacity_rps: beyond.estimated_capacity_rps,
            real_summary: real.summary,
            sim_summary: result.summary.clone(),
            points,
            sim_histograms: encode_histograms(result)?,
        })
    }

    /// The comparison as pretty JSON (`validation.json`).
    pub fn to_json(&self) -> Result<String, LabError> {
        serde_json::to_string_pretty(self).map_err(|error| LabError::Results(error.to_string()))
    }

    /// The human comparison (`validation.md`); `profile` is the simulated cost model.
    pub fn markdown(&self, profile: &Profile) -> String {
        validation_markdown(self, profile)
    }
}

impl Comparison {
    /// The real `point` of system `name` beside the simulated point `sim` of its `policy`.
    fn of(name: &str, policy: Policy, point: &RealPoint, sim: &RunResult) -> Comparison {
        let last = sim.decisions.last();
        Comparison {
            policy: name.to_string(),
            rate_rps: point.target_rps,
            real_achieved_rps: point.achieved_rps,
            sim_achieved_rps: sim.achieved_rps,
            real_small_p99_us: point.small_p99_us,
            sim_small_p99_us: sim.small.p99_us,
            real_large_p99_us: point.large_p99_us,
            sim_large_p99_us: sim.large.p99_us,
            real_in_server_small_p99_us: stat_median(&point.samples, "small_p99_us"),
            real_in_server_large_p99_us: stat_median(&point.samples, "large_p99_us"),
            sim_in_server_small_p99_us: sim.small_in_server.p99_us,
            sim_in_server_large_p99_us: sim.large_in_server.p99_us,
            // Only size-aware's threshold and split are decisions; the baselines'
            // figures merely label their statistics.
            real_threshold_bytes: (policy == Policy::SizeAware)
                .then(|| stat_median(&point.samples, "threshold_bytes"))
                .flatten(),
            sim_threshold_bytes: last.map(|d| d.threshold_bytes),
            real_small_workers: (policy == Policy::SizeAware)
                .then(|| stat_median(&point.samples, "small_workers"))
                .flatten(),
            sim_small_workers: last.map(|d| d.small_workers),
        }
    }
}

fn validation_markdown(validation: &Validation, profile: &Profile) -> String {
    let mut text = String::new();
    let mut line = |content: String| {
        text.push_str(&content);
        text.push('\n');
    };
    line(format!(
        "# Simulator vs the real server ({} cores, {} connections)\n",
        validation.cores, validation.connections
    ));
    line(format!(
        "Command: `{}`; real results: `{}`. SIMULATED side: commit `{}`{}.\n",
        validation.command,
        validation.real_file,
        code_commit(&validation.metadata).0,
        code_commit(&validation.metadata).1,
    ));
    line(format!(
        "Cost model: fixed {:.0} ns + {:.3} ns/byte ({}).\n",
        profile.cost.fixed_ns, profile.cost.per_byte_ns, profile.description
    ));
    line("## Saturation (highest achieved throughput, k requests/s)\n".to_string());
    line("| system | real (rates up to the real sweep's last) | simulated, same rates | simulated, rates up to 110 % of capacity |".to_string());
    line("|---|---:|---:|---:|".to_string());
    let thousands =
        |value: Option<&f64>| value.map_or("–".to_string(), |v| format!("{:.1}", v / 1e3));
    for (name, real) in &validation.real_saturation_rps {
        let key = if name == "memcached" {
            "pinned"
        } else {
            name.as_str()
        };
        line(format!(
            "| {name} | {:.1} | {} | {} |",
            real / 1e3,
            thousands(validation.sim_saturation_rps.get(key)),
            thousands(validation.sim_saturation_full_sweep_rps.get(key))
        ));
    }
    line(format!(
        "\nSimulated capacity estimate at {} cores: {:.0}k requests/s (cores / mean service time).\n",
        validation.cores,
        validation.sim_estimated_capacity_rps / 1e3
    ));
    line(String::new());
    line("## Per rate (µs; real = median of repeats, end to end through loopback; in-server = the server's own histogram, kernel receipt → reply queued, per run)\n".to_string());
    line("| system | rate | achieved real / sim | small p99 real / sim | large p99 real / sim | in-server small p99 real / sim | in-server large p99 real / sim | threshold real / sim | small cores real / sim |".to_string());
    line("|---|---:|---:|---:|---:|---:|---:|---:|---:|".to_string());
    let opt = |value: Option<f64>| value.map_or("–".to_string(), micros);
    for point in &validation.points {
        line(format!(
            "| {} | {:.0}k | {:.1}k / {:.1}k | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} | {} / {} |",
            point.policy,
            point.rate_rps / 1e3,
            point.real_achieved_rps / 1e3,
            point.sim_achieved_rps / 1e3,
            micros(point.real_small_p99_us),
            micros(point.sim_small_p99_us),
            micros(point.real_large_p99_us),
            micros(point.sim_large_p99_us),
            opt(point.real_in_server_small_p99_us),
            micros(point.sim_in_server_small_p99_us),
            opt(point.real_in_server_large_p99_us),
            micros(point.sim_in_server_large_p99_us),
            point.real_threshold_bytes.map_or("–".to_string(), |v| format!("{v:.0}")),
            point.sim_threshold_bytes.map_or("–".to_string(), |v| v.to_string()),
            point.real_small_workers.map_or("–".to_string(), |v| format!("{v:.0}")),
            point.sim_small_workers.map_or("–".to_string(), |v| v.to_string()),
        ));
    }
    line(String::new());
    if !validation.floor_small_p99_us.is_empty() {
        let floor: Vec<String> = validation
            .floor_small_p99_us
            .iter()
            .map(|(rate, p99)| format!("{:.0}k: {}", rate / 1e3, micros(*p99)))
            .collect();
        line(format!(
            "Real noise floor (stub) small p99 by rate: {}.\n",
            floor.join(", ")
        ));
    }
    let sim = &validation.sim_summary;
    line(format!(
        "Simulated knee (early binding small p99 > {:.0} µs): {}; early-binding / size-aware \
         small p99 there {}; saturation ratio {}.",
        sim.knee_us,
        sim.knee
            .knee_rate_rps
            .map_or("none".to_string(), |rate| format!("{:.0}k", rate / 1e3)),
        optional(sim.knee.small_p99_ratio, "x"),
        optional(sim.saturation_ratio_size_aware_vs_early, "x")
    ));
    text
}

// ───────────────────────────── sim cluster ─────────────────────────────

/// `sim cluster --json`: the run's metadata, the scenario, one result per rate and, per
/// result (same order), the latency histograms its percentiles are read from.
#[derive(Serialize)]
struct ClusterReport<'a> {
    metadata: SeededMetadata,
    scenario: &'a ClusterScenario,
    results: &'a [ClusterResult],
    histograms: Vec<BTreeMap<&'static str, Encoded>>,
}

/// `sim cluster --json`: the run's metadata (`run`, recorded over the simulation), the
/// scenario, one result per rate and each result's overall, small and large latency
/// histograms (HDR V2, base64), pretty JSON.
pub fn cluster_json(
    run: RunMetadata,
    scenario: &ClusterScenario,
    results: &[ClusterResult],
) -> Result<String, LabError> {
    let histograms = results
        .iter()
        .map(|result| {
            [
                ("overall", &result.overall),
                ("small", &result.small),
                ("large", &result.large),
            ]
            .into_iter()
            .filter_map(|(name, class)| class.histogram.as_ref().map(|h| (name, h)))
            .map(|(name, histogram)| Ok((name, Encoded::encode(histogram)?)))
            .collect::<Result<BTreeMap<_, _>, LabError>>()
        })
        .collect::<Result<Vec<_>, LabError>>()?;
    let report = ClusterReport {
        metadata: SeededMetadata {
            run,
            seed: scenario.seed,
            note: SIMULATED_NOTE.to_string(),
        },
        scenario,
        results,
        histograms,
    };
    serde_json::to_string_pretty(&report).map_err(|error| LabError::Results(error.to_string()))
}

/// `sim cluster`'s table: the scenario (its key count and value size distributions as
/// given, `keys` and `value_bytes`), then per rate the latency percentiles, fetches per
/// request and the busiest server's utilization.
pub fn cluster_table(
    scenario: &ClusterScenario,
    results: &[ClusterResult],
    keys: &str,
    value_bytes: &str,
) -> String {
    let mut text = String::new();
    let mut line = |content: String| {
        text.push_str(&content);
        text.push('\n');
    };
    line(format!(
        "cluster: {} servers × {} workers, {} replicas, planner {}, keys {}, values {} B",
        scenario.servers,
        scenario.workers_per_server,
        scenario.replicas,
        scenario.planner,
        keys,
        value_bytes
    ));
    line(format!(
        "service {}  network {}  client send {}  recv {}",
        scenario.service, scenario.network, scenario.client_send, scenario.client_recv
    ));
    line(format!(
        "{:>10} {:>10} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8}",
        "offered",
        "achieved",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "small p99",
        "large p99",
        "fetch/r",
        "max util"
    ));
    for result in results {
        let max_util = result
            .server_utilization
            .iter()
            .copied()
            .fold(0.0, f64::max);
        line(format!(
            "{:>10.0} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>10.1} {:>10.1} {:>8.2} {:>8.2}",
            result.offered_rps,
            result.achieved_rps,
            result.overall.summary.p50_us,
            result.overall.summary.p99_us,
            result.overall.summary.p999_us,
            result.small.summary.p99_us,
            result.large.summary.p99_us,
            result.fetches as f64 / result.requests as f64,
            max_util
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::SweepReport;
    use crate::histogram::Encoded;
    use crate::meta::Recorder;
    use tailtrim_sim::cost::Profile;
    use tailtrim_sim::options::SweepOptions;
    use tailtrim_sim::Policy;

    /// A small sweep through results.json: the p99 a point reports is the one its kept
    /// histogram gives back.
    #[test]
    fn results_json_keeps_the_histograms_its_percentiles_come_from() {
        let options = SweepOptions {
            requests: 3000,
            ..SweepOptions::default()
        };
        let config = options
            .config(
                Profile::embedded(),
                2,
                32,
                vec![Policy::SizeAware, Policy::EarlyBinding],
                vec![50_000.0, 150_000.0],
            )
            .expect("valid options");
        let recorder = Recorder::start();
        let result = tailtrim_sim::run_sweep(&config, &mut |_, _, _| {}).expect("simulates");
        let report = SweepReport::new(
            &config,
            &options,
            result,
            recorder.finish(),
            "tailtrim sim minos".to_string(),
        )
        .expect("encodes");
        assert!(!report.metadata.commit.is_empty() && report.metadata.cores > 0);
        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&report).expect("serializes"))
                .expect("parses");
        assert_eq!(json["metadata"]["cores"], report.metadata.cores);
        let mut checked = 0;
        for (curve, kept) in [(0, 0), (1, 1)] {
            for point in 0..2 {
                let reported = &json["result"]["curves"][curve]["points"][point];
                let encoded: Encoded = serde_json::from_value(
                    json["histograms"][kept]["points"][point]["small"].clone(),
                )
                .expect("an encoded histogram");
                let histogram = encoded.decode().expect("decodes");
                assert_eq!(
                    Some(histogram.len()),
                    reported["small"]["count"].as_u64(),
                    "{reported}"
                );
                let p99 = histogram.value_at_quantile(0.99) as f64 / 1e3;
                assert_eq!(Some(p99), reported["small"]["p99_us"].as_f64());
                assert_eq!(encoded.percentile(99.0, 1e3), Some(p99));
                checked += 1;
            }
        }
        assert_eq!(checked, 4);
        // The same check over every class, on the file read back; a tampered figure fails it.
        let back: SweepReport = serde_json::from_value(json).expect("reads back");
        assert_eq!(back.check_histograms().ok(), Some(4));
        let mut tampered = back;
        tampered.result.curves[1].points[1].large.p99_us += 1.0;
        assert!(tampered.check_histograms().is_err());
    }
}
