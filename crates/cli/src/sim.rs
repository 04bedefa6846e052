//! `tailtrim sim`: the discrete-event simulator (`tailtrim-sim`) from the command line.
//!
//! ```text
//!   tailtrim sim minos     trace (bench's minos workload) ─► tailtrim_sim::run_sweep
//!                          (5 policies × rates, 8 cores by default) ─► table / JSON /
//!                          results.json + results.md + small_p99 / large_p99 (SVG, PNG)
//!   tailtrim sim profile   real server code in-process (proto parse → server exec → store →
//!                          reply written to a loopback socket drained by a thread), sizes
//!                          swept, a + b·bytes fitted ─► profile JSON (`--profile` input)
//!   tailtrim sim validate  the real experiment's results.json ─► the same sweep at its core
//!                          count, connections and rates ─► side-by-side comparison
//!   tailtrim sim cluster   N servers, client threads, network, a multiget planner
//!                          (tailtrim_sim::cluster) ─► p50/p99 per rate (table or JSON)
//!   tailtrim sim sleep-accuracy   requested vs achieved sleeps (tailtrim_server::emulate)
//! ```

mod cluster;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use tailtrim_bench::workload::{WorkloadOverrides, WorkloadSpec};
use tailtrim_lab::histogram::Encoded;
use tailtrim_lab::meta::{Recorder, RunMetadata};
use tailtrim_lab::plot::{plot_latency_vs_throughput, Curve, LatencyThroughput};
use tailtrim_lab::stats::median;
use tailtrim_sim::cost::{CostModel, Profile, ProfileSample};
use tailtrim_sim::engine::Steering;
use tailtrim_sim::sweep::{self, SweepConfig, SweepResult};
use tailtrim_sim::{Nanos, Policy, RunResult};

/// Arguments of `tailtrim sim`.
#[derive(clap::Args, Debug)]
#[command(about = "Discrete-event simulation of the server's dispatch policies at any core count")]
pub struct Args {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(clap::Subcommand, Debug)]
enum SimCommand {
    /// The Minos figure: small- and large-request p99 vs throughput for size-aware, early
    /// binding, stealing, late binding and pinned (memcached-like), at the paper's 8 cores.
    Minos(Box<MinosArgs>),
    /// Measure the service-time model (fixed + per-byte cost) on this machine from the real
    /// server code path and write it as a profile for `sim minos --profile`.
    Profile(ProfileArgs),
    /// Run the simulator at the real experiment's scale (cores, connections, rates) and
    /// compare with its measured results.json.
    Validate(Box<ValidateArgs>),
    /// A cluster of N servers with client threads and a network stage, reads planned by a
    /// multiget planner (batch, …); service, network and client costs from cost specs.
    Cluster(Box<cluster::ClusterArgs>),
    /// How accurately this machine sleeps (the emulation's clock): requested vs achieved
    /// sleeps at 1, 8 and 16 concurrent sleepers, with the default and a 1 ns timer slack.
    SleepAccuracy(SleepAccuracyArgs),
}

/// Arguments of `tailtrim sim sleep-accuracy`.
#[derive(clap::Args, Debug)]
struct SleepAccuracyArgs {
    /// Requested sleeps, microseconds (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "50,200,1000")]
    micros: Vec<u64>,
    /// Concurrent sleepers (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,8,16")]
    sleepers: Vec<usize>,
    /// Sleeps per sleeper per point.
    #[arg(long, default_value_t = 500)]
    samples: usize,
}

fn run_sleep_accuracy(args: SleepAccuracyArgs) -> Result<ExitCode, String> {
    use tailtrim_server::emulate::measure_accuracy;
    println!("| requested | sleepers | timer slack | samples | overshoot p50 | p99 | max |");
    println!("|---:|---:|---|---:|---:|---:|---:|");
    for &micros in &args.micros {
        for &sleepers in &args.sleepers {
            for min_slack in [false, true] {
                let a = measure_accuracy(
                    std::time::Duration::from_micros(micros),
                    sleepers,
                    args.samples,
                    min_slack,
                );
                println!(
                    "| {micros} µs | {sleepers} | {} | {} | {:.1} µs | {:.1} µs | {:.1} µs |",
                    if min_slack { "1 ns" } else { "default" },
                    a.samples,
                    a.p50_us,
                    a.p99_us,
                    a.max_us
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Flags shared by `minos` and `validate`: the model and the sweep.
#[derive(clap::Args, Debug, Clone)]
struct ModelFlags {
    /// Requests simulated per point (the first --warmup share is not measured).
    #[arg(short = 'n', long, default_value_t = sweep::DEFAULT_REQUESTS)]
    requests: usize,
    /// Seed of the trace (operations, connections, arrivals).
    #[arg(long, default_value_t = sweep::DEFAULT_SEED)]
    seed: u64,
    /// Profile: a JSON file written by `tailtrim sim profile`, or a built-in name: `measured`
    /// (the embedded profile measured on the development machine, the default), `dpdk-like`
    /// (assumed kernel-bypass costs, proportional to packets), `constants`.
    #[arg(long, value_name = "FILE|NAME", default_value = "measured")]
    profile: String,
    /// Share of the first requests left out of the statistics.
    #[arg(long, default_value_t = tailtrim_sim::engine::DEFAULT_WARMUP_FRACTION)]
    warmup: f64,
    /// Size-aware controller epoch in simulated milliseconds (the server's default is 1000).
    /// Default: 1/40 of each run's simulated span, so every rate gets ~40 epochs.
    #[arg(long)]
    epoch_ms: Option<f64>,
    /// Size-aware: fixed threshold in bytes instead of the learned percentile.
    #[arg(long, value_name = "BYTES")]
    threshold: Option<u64>,
    /// Size-aware: fixed number of small cores instead of the learned split.
    #[arg(long, value_name = "N")]
    small_workers: Option<usize>,
    /// Size-aware: percentile of accessed sizes that becomes the threshold.
    #[arg(long, default_value_t = tailtrim_policy::sizeaware::DEFAULT_PERCENTILE)]
    percentile: f64,
    /// Size-aware: what the worker split follows: `packets` (Minos: the small requests' share
    /// of packets) or `busy` (the small cores' share of the measured busy time).
    #[arg(long, value_name = "RULE", default_value = "packets")]
    split_by: String,
    /// Size-aware: idle large cores (nothing in the large queue) take new requests as the
    /// small ones do (the server's `[sizeaware] large_workers_help`, on by default there;
    /// off here unless given, so `size-aware` is Minos as published).
    #[arg(long)]
    large_workers_help: bool,
    /// Share of requests on large keys (the minos preset: 0.005).
    #[arg(long)]
    large_share: Option<f64>,
    /// Key popularity inside each pool: `uniform`, `zipf` (0.99, the preset) or `zipf:S`.
    #[arg(long, value_name = "DIST")]
    popularity: Option<String>,
    /// Override the profile's hand-off cost (ns) of a large request to a large core.
    #[arg(long)]
    handoff_ns: Option<f64>,
    /// Override the steal cost (ns) per stolen connection.
    #[arg(long)]
    steal_ns: Option<f64>,
    /// Override the late-binding dispatcher's per-request hand-off cost (ns).
    #[arg(long)]
    dispatch_ns: Option<f64>,
    /// Override the per-packet cost (ns per 1500 bytes; the measured profile has 0).
    #[arg(long)]
    per_packet_ns: Option<f64>,
    /// Early binding's steering: `nic` (MICA: the NIC delivers each request to its key's core;
    /// the default of `sim minos`) or `software` (the connection's core parses and hands the
    /// request over, as tailtrim's server does; the default of `sim validate`).
    #[arg(long, value_name = "nic|software")]
    early_steering: Option<String>,
    /// Late binding executes one request per connection at a time (the real server's
    /// per-connection execution queue; early binding is not serialized, as in the server);
    /// `sim validate` turns it on.
    #[arg(long)]
    serialize_connections: bool,
    /// Spread each request's service time by the profile's measured dispersion (time over
    /// the median of its size); off, every size costs exactly its fitted median.
    #[arg(long)]
    service_dispersion: bool,
    /// Knee latency in µs: the summary reports the first rate at which early binding's
    /// small-request p99 exceeds it.
    #[arg(long, default_value_t = sweep::DEFAULT_KNEE_US)]
    knee_us: f64,
    /// No progress bar (it is only shown on a terminal anyway).
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// Arguments of `tailtrim sim minos`.
#[derive(clap::Args, Debug)]
struct MinosArgs {
    /// Simulated cores (late binding gives one of them to its dispatcher).
    #[arg(short = 't', long, default_value_t = sweep::DEFAULT_CORES)]
    cores: usize,
    /// Client connections (default 16 per core).
    #[arg(short = 'c', long)]
    connections: Option<usize>,
    /// Offered rates: `a,b,c` or `start:end:step` in requests/s (default: 5 %–110 % of the
    /// estimated capacity of the cores).
    #[arg(long, value_name = "LIST")]
    rates: Option<String>,
    /// Policies to simulate, comma separated (size-aware, early-binding, stealing,
    /// late-binding, pinned).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "size-aware,early-binding,stealing,late-binding,pinned"
    )]
    policies: Vec<String>,
    #[command(flatten)]
    model: ModelFlags,
    /// Print the whole result as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Write results.json, results.md and the plots (small_p99, large_p99 as SVG and PNG)
    /// into this directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Re-render results.md and the plots of DIR from its results.json, without simulating.
    #[arg(long, value_name = "DIR", conflicts_with = "out")]
    replot: Option<PathBuf>,
}

/// Arguments of `tailtrim sim profile`.
#[derive(clap::Args, Debug)]
struct ProfileArgs {
    /// Where to write the profile JSON (default: stdout).
    #[arg(short = 'o', long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Value sizes to measure, comma separated bytes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "16,64,256,1024,1500,4096,16384,65536,131072,262144,500000"
    )]
    sizes: Vec<u64>,
    /// Requests timed per size (the median is kept).
    #[arg(long, default_value_t = 3_000)]
    iterations: usize,
    /// Hand-off cost (ns) written into the profile.
    #[arg(long, default_value_t = tailtrim_sim::cost::DEFAULT_HANDOFF_NS)]
    handoff_ns: f64,
    /// Steal cost (ns) written into the profile.
    #[arg(long, default_value_t = tailtrim_sim::cost::DEFAULT_STEAL_NS)]
    steal_ns: f64,
    /// Dispatch cost (ns) written into the profile.
    #[arg(long, default_value_t = tailtrim_sim::cost::DEFAULT_DISPATCH_NS)]
    dispatch_ns: f64,
}

/// Arguments of `tailtrim sim validate`.
#[derive(clap::Args, Debug)]
struct ValidateArgs {
    /// results.json of `tailtrim experiment minos` (default: the repository's
    /// experiments/minos/results.json, found from the working directory or the binary up).
    #[arg(long, value_name = "FILE")]
    real: Option<PathBuf>,
    #[command(flatten)]
    model: ModelFlags,
    /// Print the comparison as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Write validation.json and validation.md into this directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Runs `tailtrim sim`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    match args.command {
        SimCommand::Minos(minos) => run_minos(*minos),
        SimCommand::Profile(profile) => run_profile(profile),
        SimCommand::Validate(validate) => run_validate(*validate),
        SimCommand::Cluster(args) => cluster::run(*args),
        SimCommand::SleepAccuracy(args) => run_sleep_accuracy(args),
    }
}

// ───────────────────────────── sim minos ─────────────────────────────

/// Settings recorded next to the results.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    cores: usize,
    connections: usize,
    requests: usize,
    seed: u64,
    warmup_fraction: f64,
    epoch_ms: Option<f64>,
    knee_us: f64,
    policies: Vec<String>,
    fixed_threshold_bytes: Option<u64>,
    fixed_small_workers: Option<usize>,
    percentile: f64,
    large_share: Option<f64>,
    #[serde(default)]
    popularity: Option<String>,
    #[serde(default)]
    early_steering: Option<String>,
    #[serde(default)]
    serialize_connections: bool,
    #[serde(default)]
    service_dispersion: bool,
}

/// `results.json` of `sim minos --out`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Report {
    experiment: String,
    /// How the file was produced: commit and dirty tree, machine, load during the run, the
    /// command. The figures do not depend on the machine (the simulation is deterministic);
    /// only `wall_seconds` does. Empty in files written before it was kept.
    #[serde(default)]
    metadata: RunMetadata,
    command: String,
    settings: Settings,
    profile: Profile,
    workload: WorkloadSpec,
    result: SweepResult,
    /// Per curve of `result.curves` (same order), per point, the histograms every reported
    /// percentile of that point was read from. Absent in files written before they were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    histograms: Vec<CurveHistograms>,
}

/// The histograms of one policy's points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CurveHistograms {
    policy: String,
    points: Vec<PointHistograms>,
}

/// One point's latency histograms (nanoseconds; hdrhistogram V2, base64: the lab's
/// [`Encoded`]), one per class the point reports percentiles for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PointHistograms {
    offered_rps: f64,
    /// Small requests, arrival → reply (`small` of the point).
    small: Encoded,
    /// Large requests, arrival → reply (`large`).
    large: Encoded,
    /// Small requests, first core → reply (`small_in_server`).
    small_in_server: Encoded,
    /// Large requests, first core → reply (`large_in_server`).
    large_in_server: Encoded,
}

/// Encodes every point's histograms of `result`.
fn encode_histograms(result: &SweepResult) -> Result<Vec<CurveHistograms>, String> {
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
                .collect::<Result<Vec<_>, tailtrim_lab::LabError>>()
                .map_err(String::from)?;
            Ok(CurveHistograms {
                policy: curve.policy.name().to_string(),
                points,
            })
        })
        .collect()
}

/// Checks that every percentile a point reports is the one its kept histogram gives (p50,
/// p99, p99.9 and max of the four classes, to the nanosecond); the number of points checked.
fn check_histograms(report: &Report) -> Result<usize, String> {
    let mut checked = 0;
    for (curve, kept) in report.result.curves.iter().zip(&report.histograms) {
        if kept.policy != curve.policy.name() || kept.points.len() != curve.points.len() {
            return Err(format!(
                "histograms of {} do not match the curve of {}",
                kept.policy,
                curve.policy.name()
            ));
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
                let histogram = encoded.decode().map_err(String::from)?;
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
                    return Err(format!(
                        "{} at {:.0} requests/s, {class}: reported {} requests, p50/p99/p99.9/max \
                         {reported:?} µs; its histogram: {} requests, {recomputed:?} µs",
                        curve.policy.name(),
                        point.offered_rps,
                        summary.count,
                        histogram.len()
                    ));
                }
            }
            checked += 1;
        }
    }
    Ok(checked)
}

fn command_line() -> String {
    let mut words: Vec<String> = std::env::args().collect();
    if let Some(first) = words.first_mut() {
        if first.ends_with("/tailtrim") {
            *first = "tailtrim".to_string();
        }
    }
    words.join(" ")
}

fn load_profile(flags: &ModelFlags) -> Result<Profile, String> {
    let mut profile = match Profile::builtin(&flags.profile) {
        Some(profile) => profile,
        None => {
            let text = std::fs::read_to_string(&flags.profile).map_err(|error| {
                format!(
                    "--profile {}: not a built-in ({}) and not readable: {error}",
                    flags.profile,
                    tailtrim_sim::cost::BUILTIN_PROFILES.join(", ")
                )
            })?;
            Profile::from_json(&text).map_err(|error| format!("{}: {error}", flags.profile))?
        }
    };
    let cost = &mut profile.cost;
    for (flag, field) in [
        (flags.handoff_ns, &mut cost.handoff_ns),
        (flags.steal_ns, &mut cost.steal_ns),
        (flags.dispatch_ns, &mut cost.dispatch_ns),
        (flags.per_packet_ns, &mut cost.per_packet_ns),
    ] {
        if let Some(value) = flag {
            *field = value;
        }
    }
    profile.cost.validate().map_err(|error| error.to_string())?;
    Ok(profile)
}

/// The sweep configuration for `cores` and `connections` from the shared flags.
fn sweep_config(
    flags: &ModelFlags,
    cores: usize,
    connections: usize,
    policies: Vec<Policy>,
    rates: Vec<f64>,
) -> Result<SweepConfig, String> {
    if cores == 0 || connections == 0 || flags.requests < 10 {
        return Err("cores and connections must be positive and --requests at least 10".into());
    }
    let mut config = SweepConfig::minos().map_err(|error| error.to_string())?;
    let popularity = match &flags.popularity {
        Some(text) => Some(
            text.parse::<tailtrim_bench::workload::Popularity>()
                .map_err(|error| error.to_string())?,
        ),
        None => None,
    };
    if flags.large_share.is_some() || popularity.is_some() {
        let overrides = WorkloadOverrides {
            large_share: flags.large_share,
            popularity,
            ..WorkloadOverrides::default()
        };
        config
            .workload
            .apply(&overrides)
            .map_err(|error| error.to_string())?;
    }
    config.policies = policies;
    config.rates = rates;
    config.cores = cores;
    config.connections = connections;
    config.requests = flags.requests;
    config.seed = flags.seed;
    config.warmup_fraction = flags.warmup;
    if let Some(millis) = flags.epoch_ms {
        if !(millis.is_finite() && millis > 0.0) {
            return Err("--epoch-ms must be positive".into());
        }
        config.epoch = Some(Nanos::from_f64(millis * 1e6));
    }
    config.knee_us = flags.knee_us;
    config.profile = load_profile(flags)?;
    config.steering = match flags.early_steering.as_deref() {
        None | Some("nic") => Steering::Nic,
        Some("software") => Steering::Software,
        Some(other) => {
            return Err(format!(
                "--early-steering must be nic or software, got {other:?}"
            ))
        }
    };
    config.serialize_connections = flags.serialize_connections;
    config.service_dispersion = flags.service_dispersion;
    config.sizeaware.percentile = flags.percentile;
    config.sizeaware.fixed_threshold_bytes = flags.threshold;
    config.sizeaware.fixed_small_workers = flags.small_workers;
    config.sizeaware.split_by = tailtrim_policy::sizeaware::SplitBy::parse(&flags.split_by)
        .map_err(|error| error.to_string())?;
    config.sizeaware.large_workers_help = flags.large_workers_help;
    Ok(config)
}

fn settings_of(config: &SweepConfig, flags: &ModelFlags) -> Settings {
    Settings {
        cores: config.cores,
        connections: config.connections,
        requests: config.requests,
        seed: config.seed,
        warmup_fraction: config.warmup_fraction,
        epoch_ms: flags.epoch_ms,
        knee_us: config.knee_us,
        policies: config
            .policies
            .iter()
            .map(|p| p.name().to_string())
            .collect(),
        fixed_threshold_bytes: flags.threshold,
        fixed_small_workers: flags.small_workers,
        percentile: flags.percentile,
        large_share: flags.large_share,
        popularity: flags.popularity.clone(),
        serialize_connections: config.serialize_connections,
        service_dispersion: config.service_dispersion,
        early_steering: Some(
            match config.steering {
                Steering::Nic => "nic",
                Steering::Software => "software",
            }
            .to_string(),
        ),
    }
}

/// Runs the sweep with a progress bar on a terminal.
fn simulate(config: &SweepConfig, quiet: bool) -> Result<SweepResult, String> {
    let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(1);
        if let Ok(style) =
            ProgressStyle::with_template("sim [{bar:40}] {pos}/{len} points {elapsed} {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    });
    let mut progress = |done: usize, total: usize, result: &RunResult| {
        if let Some(bar) = &bar {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(format!(
                "{} @ {:.0}k",
                result.policy,
                result.offered_rps / 1e3
            ));
        }
    };
    let result = sweep::run_sweep(config, &mut progress).map_err(|error| error.to_string());
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result
}

fn run_minos(args: MinosArgs) -> Result<ExitCode, String> {
    if let Some(directory) = &args.replot {
        let path = directory.join("results.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|error| format!("reading {}: {error}", path.display()))?;
        let report: Report =
            serde_json::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))?;
        let checked = check_histograms(&report)?;
        write_outputs(&report, directory, false)?;
        if report.histograms.is_empty() {
            println!(
                "re-rendered {} (a file without histograms: percentiles not rechecked)",
                directory.display()
            );
        } else {
            println!(
                "re-rendered {}; the percentiles of {checked} points equal their histograms'",
                directory.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let report = minos_report(&args)?;
    if args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|error| error.to_string())?;
        println!("{text}");
    } else {
        print!("{}", markdown(&report));
    }
    if let Some(directory) = &args.out {
        write_outputs(&report, directory, true)?;
        eprintln!("wrote {}", directory.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Simulates the sweep `args` ask for and the report of it, metadata and histograms included.
fn minos_report(args: &MinosArgs) -> Result<Report, String> {
    let policies = args
        .policies
        .iter()
        .map(|name| name.parse::<Policy>().map_err(|error| error.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let rates = match &args.rates {
        Some(text) => tailtrim_bench::parse_rates(text).map_err(|error| error.to_string())?,
        None => Vec::new(),
    };
    let connections = args
        .connections
        .unwrap_or(sweep::DEFAULT_CONNECTIONS_PER_CORE * args.cores);
    let config = sweep_config(&args.model, args.cores, connections, policies, rates)?;
    let recorder = Recorder::start();
    let started = Instant::now();
    let result = simulate(&config, args.model.quiet)?;
    let mut metadata = recorder.finish();
    metadata.command = command_line();
    let report = Report {
        experiment: "minos-sim".to_string(),
        metadata,
        histograms: encode_histograms(&result)?,
        command: command_line(),
        settings: settings_of(&config, &args.model),
        profile: config.profile.clone(),
        workload: config.workload.clone(),
        result,
    };
    eprintln!(
        "simulated {} points in {:.1} s",
        report.result.rates.len() * report.result.curves.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(report)
}

fn write_outputs(report: &Report, directory: &Path, with_json: bool) -> Result<(), String> {
    std::fs::create_dir_all(directory)
        .map_err(|error| format!("creating {}: {error}", directory.display()))?;
    let write = |name: &str, text: String| {
        let path = directory.join(name);
        std::fs::write(&path, text).map_err(|error| format!("writing {}: {error}", path.display()))
    };
    if with_json {
        write(
            "results.json",
            serde_json::to_string_pretty(report).map_err(|error| error.to_string())?,
        )?;
    }
    write("results.md", markdown(report))?;
    for class in [LatencyClass::Small, LatencyClass::Large] {
        plot_latency_vs_throughput(
            directory,
            &format!("{}_p99", class.name()),
            &latency_plot(report, class),
        )
        .map_err(|error| error.to_string())?;
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
fn markdown(report: &Report) -> String {
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
    match summary.knee_rate_rps {
        Some(rate) => line(format!(
            "- Early binding's small p99 first exceeds {:.0} µs at **{:.0}k** requests/s ({}); \
             size-aware's small p99 there: **{}**; ratio **{}**.",
            summary.knee_us,
            rate / 1e3,
            micros(summary.early_binding_small_p99_us.unwrap_or(0.0)),
            micros(summary.size_aware_small_p99_us.unwrap_or(0.0)),
            optional(summary.small_p99_ratio, "x")
        )),
        None => line(format!(
            "- Early binding's small p99 never exceeds {:.0} µs in this sweep.",
            summary.knee_us
        )),
    }
    for (name, value) in &summary.small_p99_at_knee_us {
        let large = summary
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
fn latency_plot(report: &Report, class: LatencyClass) -> LatencyThroughput {
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

// ───────────────────────────── sim profile ─────────────────────────────

/// A loopback connection whose server side is adopted by a real server runtime (the `pinned`
/// policy, one worker, no threads of its own): the profiler drives that runtime's worker turn
/// itself, so it times exactly the path the server runs (epoll wait, `recvmsg`, parse, execute,
/// sequenced `writev`, re-arm). A thread drains (and discards) the replies.
struct Loopback {
    client: TcpStream,
    runtime: std::sync::Arc<tailtrim_server::runtime::Runtime>,
    drain: Option<std::thread::JoinHandle<()>>,
}

impl Loopback {
    fn open(shared: std::sync::Arc<tailtrim_server::Shared>) -> Result<Loopback, String> {
        let io = |error: std::io::Error| format!("loopback socket: {error}");
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io)?;
        let client = TcpStream::connect(listener.local_addr().map_err(io)?).map_err(io)?;
        let (server, peer) = listener.accept().map_err(io)?;
        client.set_nodelay(true).map_err(io)?;
        let runtime = tailtrim_server::runtime::Runtime::new(shared, Vec::new()).map_err(io)?;
        runtime.adopt_std(server, peer);
        let mut reader = client.try_clone().map_err(io)?;
        let drain = std::thread::spawn(move || {
            let mut sink = vec![0u8; 1 << 20];
            while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
        });
        Ok(Loopback {
            client,
            runtime,
            drain: Some(drain),
        })
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        let _ = self.client.shutdown(std::net::Shutdown::Both);
        // The runtime sees the end of input and closes its side.
        for _ in 0..100 {
            if !self.runtime.serve_ready(0, 10) {
                break;
            }
        }
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
    }
}

/// Runs the server's worker turns until `reply_len` more reply bytes have been written (the
/// whole reply of the request the client just sent). Returns the reply length.
fn serve_one(
    loopback: &Loopback,
    shared: &tailtrim_server::Shared,
    reply_len: usize,
) -> Result<usize, String> {
    let written = || {
        shared.counters[0]
            .bytes_written
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = written();
    let mut idle_turns = 0;
    while written() - before < reply_len as u64 {
        if loopback.runtime.serve_ready(0, 1000) {
            idle_turns = 0;
        } else {
            idle_turns += 1;
            if idle_turns > 10 {
                return Err("the server runtime answered nothing for 10 s".into());
            }
        }
    }
    Ok((written() - before) as usize)
}

fn run_profile(args: ProfileArgs) -> Result<ExitCode, String> {
    if args.sizes.len() < 2 || args.iterations == 0 {
        return Err("need at least two sizes and one iteration".into());
    }
    let store = tailtrim_store::Store::new(tailtrim_store::StoreConfig {
        max_bytes: 256 << 20,
        ..tailtrim_store::StoreConfig::default()
    })
    .map_err(|error| error.to_string())?;
    let mut config = tailtrim_server::ServerConfig::default();
    config.workers.threads = 1;
    config.workers.dispatch = tailtrim_server::config::DispatchPolicy::Pinned;
    let shared = std::sync::Arc::new(tailtrim_server::Shared::new(store, config));
    let mut loopback = Loopback::open(std::sync::Arc::clone(&shared))?;
    let mut samples = Vec::new();
    let mut ratios = Vec::new();
    for &size in &args.sizes {
        let key = format!("profile:{size}");
        // Store the value through the same path (a `set` request).
        let mut request = format!("set {key} 0 0 {size}\r\n").into_bytes();
        request.extend(std::iter::repeat_n(b'v', size as usize));
        request.extend_from_slice(b"\r\n");
        loopback
            .client
            .write_all(&request)
            .map_err(|error| format!("write: {error}"))?;
        serve_one(&loopback, &shared, b"STORED\r\n".len())?;
        let get = format!("get {key}\r\n").into_bytes();
        let get_reply =
            format!("VALUE {key} 0 {size}\r\n").len() + size as usize + b"\r\nEND\r\n".len();
        // Fewer iterations for large values: at most ~1 GB moved per size.
        let iterations = args
            .iterations
            .min((1_000_000_000 / size.max(1)) as usize)
            .max(50);
        let mut times = Vec::with_capacity(iterations);
        let mut reply_bytes = 0;
        for round in 0..iterations + iterations / 10 {
            loopback
                .client
                .write_all(&get)
                .map_err(|error| format!("write: {error}"))?;
            let started = Instant::now();
            reply_bytes = serve_one(&loopback, &shared, get_reply)?;
            let elapsed = started.elapsed().as_nanos() as f64;
            if round >= iterations / 10 {
                times.push(elapsed); // the first 10 % warm caches and are dropped
            }
        }
        let ns = median(&times);
        if ns > 0.0 {
            ratios.extend(times.iter().map(|time| time / ns));
        }
        eprintln!(
            "{:>8} B value, {:>8} B reply: median {:>9.0} ns ({} timed)",
            size,
            reply_bytes,
            ns,
            times.len()
        );
        samples.push(ProfileSample {
            reply_bytes: reply_bytes as u64,
            ns,
        });
    }
    drop(loopback);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let description = format!(
        "measured by `tailtrim sim profile` on a {cpus}-CPU machine: median time to read + parse \
         a GET, execute it on the server's store and write the reply to a loopback TCP socket \
         drained by another thread, least squares over reply sizes; dispersion: every timed \
         request over its size's median"
    );
    let base = CostModel {
        handoff_ns: args.handoff_ns,
        steal_ns: args.steal_ns,
        dispatch_ns: args.dispatch_ns,
        ..CostModel::default()
    };
    let mut profile = Profile::fit(description, samples, base)
        .ok_or_else(|| "could not fit: need two distinct sizes".to_string())?;
    profile.dispersion = tailtrim_sim::cost::dispersion_quantiles(&mut ratios);
    let quantile = |q: usize| profile.dispersion.get(q).copied().unwrap_or(1.0);
    eprintln!(
        "fit: {:.0} ns + {:.4} ns/byte (r² {:.3}); time / median of its size: p1 {:.2}, p90 {:.2}, p99 {:.2}, max {:.1}",
        profile.cost.fixed_ns,
        profile.cost.per_byte_ns,
        profile.r_squared.unwrap_or(0.0),
        quantile(1),
        quantile(90),
        quantile(99),
        quantile(100)
    );
    let text = profile.to_json();
    match &args.out {
        Some(path) => std::fs::write(path, text + "\n")
            .map_err(|error| format!("writing {}: {error}", path.display()))?,
        None => println!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

// ───────────────────────────── sim validate ─────────────────────────────

/// The parts of the real experiment's results.json the validation reads.
#[derive(Debug, Deserialize)]
struct RealResults {
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
struct Comparison {
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

#[derive(Debug, Clone, Serialize)]
struct Validation {
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
const DEFAULT_REAL_RESULTS: &str = "experiments/minos/results.json";

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
fn real_results_path(given: Option<&Path>) -> Result<(PathBuf, String), String> {
    match given {
        Some(path) => Ok((path.to_path_buf(), path.display().to_string())),
        None => find_in_repository(Path::new(DEFAULT_REAL_RESULTS))
            .map(|path| (path, DEFAULT_REAL_RESULTS.to_string()))
            .ok_or_else(|| {
                format!(
                    "{DEFAULT_REAL_RESULTS} not found above the working directory or the binary \
                     (run inside the repository or pass --real FILE)"
                )
            }),
    }
}

fn run_validate(args: ValidateArgs) -> Result<ExitCode, String> {
    let (real_path, real_file) = real_results_path(args.real.as_deref())?;
    let text = std::fs::read_to_string(&real_path)
        .map_err(|error| format!("reading {}: {error}", real_path.display()))?;
    let real: RealResults =
        serde_json::from_str(&text).map_err(|error| format!("{}: {error}", real_path.display()))?;
    let system_policy = |name: &str| match name {
        "memcached" => Some(Policy::Pinned),
        "floor" => None,
        other => other.parse::<Policy>().ok(),
    };
    let policies: Vec<Policy> = real
        .systems
        .iter()
        .filter_map(|system| system_policy(&system.name))
        .collect();
    let mut model = args.model.clone();
    if model.early_steering.is_none() {
        model.early_steering = Some("software".to_string());
    }
    model.serialize_connections = true;
    if real.settings.seed != 0 && model.seed == sweep::DEFAULT_SEED {
        model.seed = real.settings.seed;
    }
    let config = sweep_config(
        &model,
        real.settings.threads,
        real.settings.connections,
        policies,
        real.settings.rates.clone(),
    )?;
    let recorder = Recorder::start();
    let result = simulate(&config, model.quiet)?;
    // The real rates may stop below the simulated saturation: sweep to it as well.
    let beyond = SweepConfig {
        rates: Vec::new(),
        ..config.clone()
    };
    let beyond = simulate(&beyond, model.quiet)?;
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
            let last = sim.decisions.last();
            points.push(Comparison {
                policy: system.name.clone(),
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
            });
        }
    }
    let mut metadata = recorder.finish();
    metadata.command = command_line();
    let validation = Validation {
        metadata,
        command: command_line(),
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
        sim_histograms: encode_histograms(&result)?,
    };
    let json = serde_json::to_string_pretty(&validation).map_err(|error| error.to_string())?;
    let table = validation_markdown(&validation, &config.profile);
    if args.json {
        println!("{json}");
    } else {
        print!("{table}");
    }
    if let Some(directory) = &args.out {
        std::fs::create_dir_all(directory)
            .map_err(|error| format!("creating {}: {error}", directory.display()))?;
        for (name, content) in [("validation.json", json), ("validation.md", table)] {
            let path = directory.join(name);
            std::fs::write(&path, content)
                .map_err(|error| format!("writing {}: {error}", path.display()))?;
        }
        eprintln!("wrote {}", directory.display());
    }
    Ok(ExitCode::SUCCESS)
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
        sim.knee_rate_rps
            .map_or("none".to_string(), |rate| format!("{:.0}k", rate / 1e3)),
        optional(sim.small_p99_ratio, "x"),
        optional(sim.saturation_ratio_size_aware_vs_early, "x")
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::{check_histograms, minos_report, MinosArgs, Report, SimCommand};
    use clap::Parser;
    use tailtrim_lab::histogram::Encoded;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: SimCommand,
    }

    fn minos_args(words: &[&str]) -> Box<MinosArgs> {
        let words = ["tailtrim-sim", "minos", "-q"].iter().chain(words);
        match Cli::try_parse_from(words).expect("valid flags").command {
            SimCommand::Minos(args) => args,
            _ => unreachable!("parsed as minos"),
        }
    }

    /// A small sweep through results.json: the p99 a point reports is the one its kept
    /// histogram gives back.
    #[test]
    fn results_json_keeps_the_histograms_its_percentiles_come_from() {
        let args = minos_args(&[
            "-t",
            "2",
            "-n",
            "3000",
            "--rates",
            "50000,150000",
            "--policies",
            "size-aware,early-binding",
        ]);
        let report = minos_report(&args).expect("simulates");
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
        let back: Report = serde_json::from_value(json).expect("reads back");
        assert_eq!(check_histograms(&back), Ok(4));
        let mut tampered = back;
        tampered.result.curves[1].points[1].large.p99_us += 1.0;
        assert!(check_histograms(&tampered).is_err());
    }
}
