//! `tailtrim sim`: the discrete-event simulator (`tailtrim-sim`) from the command line. The
//! flags are parsed here; the work is the libraries'.
//!
//! ```text
//!   tailtrim sim minos     flags ─► tailtrim_sim::options::SweepOptions ─► run_sweep (5 policies
//!                          × rates, 8 cores by default) ─► tailtrim_lab::report::sim::SweepReport
//!                          ─► table / JSON / results.json + results.md + small_p99 / large_p99
//!   tailtrim sim profile   tailtrim_server::profile::Profiler: the real server code in-process
//!                          (parse → execute → store → reply written to a loopback socket), sizes
//!                          swept, a + b·bytes fitted ─► profile JSON (`--profile` input)
//!   tailtrim sim validate  the real experiment's results.json (report::sim::RealResults) ─► the
//!                          same sweep at its core count, connections and rates ─► Validation
//!   tailtrim sim cluster   N servers, client threads, network, a multiget planner
//!                          (tailtrim_sim::cluster) ─► p50/p99 per rate (table or JSON)
//!   tailtrim sim sleep-accuracy   requested vs achieved sleeps (tailtrim_server::emulate)
//! ```

mod cluster;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use tailtrim_lab::meta::Recorder;
use tailtrim_lab::report::sim::{
    load_profile, real_results_path, RealResults, SweepReport, Validation,
};
use tailtrim_lab::stats::median;
use tailtrim_server::profile::Profiler;
use tailtrim_sim::cost::{CostModel, Profile, ProfileSample};
use tailtrim_sim::options::{CostOverrides, SweepOptions};
use tailtrim_sim::sweep::{self, SweepConfig, SweepResult};
use tailtrim_sim::{Policy, RunResult};

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

fn command_line() -> String {
    let mut words: Vec<String> = std::env::args().collect();
    if let Some(first) = words.first_mut() {
        if first.ends_with("/tailtrim") {
            *first = "tailtrim".to_string();
        }
    }
    words.join(" ")
}

/// The sweep settings the flags give.
fn sweep_options(flags: &ModelFlags) -> SweepOptions {
    SweepOptions {
        requests: flags.requests,
        seed: flags.seed,
        warmup: flags.warmup,
        epoch_ms: flags.epoch_ms,
        threshold: flags.threshold,
        small_workers: flags.small_workers,
        percentile: flags.percentile,
        split_by: flags.split_by.clone(),
        large_workers_help: flags.large_workers_help,
        large_share: flags.large_share,
        popularity: flags.popularity.clone(),
        costs: CostOverrides {
            handoff_ns: flags.handoff_ns,
            steal_ns: flags.steal_ns,
            dispatch_ns: flags.dispatch_ns,
            per_packet_ns: flags.per_packet_ns,
        },
        early_steering: flags.early_steering.clone(),
        serialize_connections: flags.serialize_connections,
        service_dispersion: flags.service_dispersion,
        knee_us: flags.knee_us,
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
        let report = SweepReport::read(directory)?;
        let checked = report.check_histograms()?;
        report.write(directory, false)?;
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
        print!("{}", report.markdown());
    }
    if let Some(directory) = &args.out {
        report.write(directory, true)?;
        eprintln!("wrote {}", directory.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Simulates the sweep `args` ask for and the report of it, metadata and histograms included.
fn minos_report(args: &MinosArgs) -> Result<SweepReport, String> {
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
    let options = sweep_options(&args.model);
    let profile = load_profile(&args.model.profile)?;
    let config = options
        .config(profile, args.cores, connections, policies, rates)
        .map_err(|error| error.to_string())?;
    let recorder = Recorder::start();
    let started = Instant::now();
    let result = simulate(&config, args.model.quiet)?;
    let mut metadata = recorder.finish();
    metadata.command = command_line();
    let report = SweepReport::new(&config, &options, result, metadata, command_line())?;
    eprintln!(
        "simulated {} points in {:.1} s",
        report.result.rates.len() * report.result.curves.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(report)
}

// ───────────────────────────── sim profile ─────────────────────────────

fn run_profile(args: ProfileArgs) -> Result<ExitCode, String> {
    if args.sizes.len() < 2 || args.iterations == 0 {
        return Err("need at least two sizes and one iteration".into());
    }
    let mut profiler = Profiler::start().map_err(|error| error.to_string())?;
    let mut samples = Vec::new();
    let mut ratios = Vec::new();
    for &size in &args.sizes {
        let timings = profiler
            .time_gets(size, args.iterations)
            .map_err(|error| error.to_string())?;
        let ns = median(&timings.nanos);
        if ns > 0.0 {
            ratios.extend(timings.nanos.iter().map(|time| time / ns));
        }
        eprintln!(
            "{:>8} B value, {:>8} B reply: median {:>9.0} ns ({} timed)",
            size,
            timings.reply_bytes,
            ns,
            timings.nanos.len()
        );
        samples.push(ProfileSample {
            reply_bytes: timings.reply_bytes,
            ns,
        });
    }
    drop(profiler);
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

fn run_validate(args: ValidateArgs) -> Result<ExitCode, String> {
    let (real_path, real_file) = real_results_path(args.real.as_deref())?;
    let real = RealResults::read(&real_path)?;
    let profile = load_profile(&args.model.profile)?;
    let config = real
        .sweep_config(&sweep_options(&args.model), profile)
        .map_err(|error| error.to_string())?;
    let recorder = Recorder::start();
    let result = simulate(&config, args.model.quiet)?;
    // The real rates may stop below the simulated saturation: sweep to it as well.
    let beyond = SweepConfig {
        rates: Vec::new(),
        ..config.clone()
    };
    let beyond = simulate(&beyond, args.model.quiet)?;
    let mut metadata = recorder.finish();
    metadata.command = command_line();
    let validation = Validation::compare(
        real,
        real_file,
        &config,
        &result,
        &beyond,
        metadata,
        command_line(),
    )?;
    let json = validation.to_json()?;
    let table = validation.markdown(&config.profile);
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
