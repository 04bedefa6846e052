//! What `tailtrim sim` runs besides the simulator itself: the model flags `minos` and
//! `validate` share and the sweep settings they give, the sweep with its progress bar, the
//! Minos report, the comparison with the real experiment, the service-time profile measured
//! from the server's own code and the sleep-accuracy table. The binary parses the other flags
//! and prints what these return.
//!
//! ```text
//!   ModelFlags ──options──> SweepOptions ──> minos_report ──> SweepReport (sim minos)
//!                                        ──> validate ──> ValidationText (sim validate)
//!   SweepReport::read ──replot_minos──> results.md + figures, histograms checked
//!   tailtrim_server::profile::Profiler ──measure_profile──> Profile (sim profile)
//!   tailtrim_server::emulate::measure_accuracy ──sleep_accuracy──> table lines
//! ```

use std::io::IsTerminal;
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use tailtrim_server::profile::Profiler;
use tailtrim_sim::cost::{CostModel, Profile, ProfileSample};
use tailtrim_sim::options::{CostOverrides, SweepOptions};
use tailtrim_sim::sweep::{self, SweepConfig, SweepResult};
use tailtrim_sim::{Policy, RunResult};

use crate::meta::Recorder;
use crate::report::sim::{load_profile, real_results_path, RealResults, SweepReport, Validation};
use crate::stats::median;

/// Flags shared by `minos` and `validate`: the model and the sweep.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelFlags {
    /// Requests simulated per point (the first --warmup share is not measured).
    #[arg(short = 'n', long, default_value_t = sweep::DEFAULT_REQUESTS)]
    pub requests: usize,
    /// Seed of the trace (operations, connections, arrivals).
    #[arg(long, default_value_t = sweep::DEFAULT_SEED)]
    pub seed: u64,
    /// Profile: a JSON file written by `tailtrim sim profile`, or a built-in name: `measured`
    /// (the embedded profile measured on the development machine, the default), `dpdk-like`
    /// (assumed kernel-bypass costs, proportional to packets), `constants`.
    #[arg(long, value_name = "FILE|NAME", default_value = "measured")]
    pub profile: String,
    /// Share of the first requests left out of the statistics.
    #[arg(long, default_value_t = tailtrim_sim::engine::DEFAULT_WARMUP_FRACTION)]
    pub warmup: f64,
    /// Size-aware controller epoch in simulated milliseconds (the server's default is 1000).
    /// Default: 1/40 of each run's simulated span, so every rate gets ~40 epochs.
    #[arg(long)]
    pub epoch_ms: Option<f64>,
    /// Size-aware: fixed threshold in bytes instead of the learned percentile.
    #[arg(long, value_name = "BYTES")]
    pub threshold: Option<u64>,
    /// Size-aware: fixed number of small cores instead of the learned split.
    #[arg(long, value_name = "N")]
    pub small_workers: Option<usize>,
    /// Size-aware: percentile of accessed sizes that becomes the threshold.
    #[arg(long, default_value_t = tailtrim_policy::sizeaware::DEFAULT_PERCENTILE)]
    pub percentile: f64,
    /// Size-aware: what the worker split follows: `packets` (Minos: the small requests' share
    /// of packets) or `busy` (the small cores' share of the measured busy time).
    #[arg(long, value_name = "RULE", default_value = "packets")]
    pub split_by: String,
    /// Size-aware: idle large cores (nothing in the large queue) take new requests as the
    /// small ones do (the server's `[sizeaware] large_workers_help`, on by default there;
    /// off here unless given, so `size-aware` is Minos as published).
    #[arg(long)]
    pub large_workers_help: bool,
    /// Share of requests on large keys (the minos preset: 0.005).
    #[arg(long)]
    pub large_share: Option<f64>,
    /// Key popularity inside each pool: `uniform`, `zipf` (0.99, the preset) or `zipf:S`.
    #[arg(long, value_name = "DIST")]
    pub popularity: Option<String>,
    /// Override the profile's hand-off cost (ns) of a large request to a large core.
    #[arg(long)]
    pub handoff_ns: Option<f64>,
    /// Override the steal cost (ns) per stolen connection.
    #[arg(long)]
    pub steal_ns: Option<f64>,
    /// Override the late-binding dispatcher's per-request hand-off cost (ns).
    #[arg(long)]
    pub dispatch_ns: Option<f64>,
    /// Override the per-packet cost (ns per 1500 bytes; the measured profile has 0).
    #[arg(long)]
    pub per_packet_ns: Option<f64>,
    /// Early binding's steering: `nic` (MICA: the NIC delivers each request to its key's core;
    /// the default of `sim minos`) or `software` (the connection's core parses and hands the
    /// request over, as tailtrim's server does; the default of `sim validate`).
    #[arg(long, value_name = "nic|software")]
    pub early_steering: Option<String>,
    /// Late binding executes one request per connection at a time (the real server's
    /// per-connection execution queue; early binding is not serialized, as in the server);
    /// `sim validate` turns it on.
    #[arg(long)]
    pub serialize_connections: bool,
    /// Spread each request's service time by the profile's measured dispersion (time over
    /// the median of its size); off, every size costs exactly its fitted median.
    #[arg(long)]
    pub service_dispersion: bool,
    /// Knee latency in µs: the summary reports the first rate at which early binding's
    /// small-request p99 exceeds it.
    #[arg(long, default_value_t = sweep::DEFAULT_KNEE_US)]
    pub knee_us: f64,
    /// No progress bar (it is only shown on a terminal anyway).
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

impl ModelFlags {
    /// The sweep settings the flags give.
    pub fn options(&self) -> SweepOptions {
        SweepOptions {
            requests: self.requests,
            seed: self.seed,
            warmup: self.warmup,
            epoch_ms: self.epoch_ms,
            threshold: self.threshold,
            small_workers: self.small_workers,
            percentile: self.percentile,
            split_by: self.split_by.clone(),
            large_workers_help: self.large_workers_help,
            large_share: self.large_share,
            popularity: self.popularity.clone(),
            costs: CostOverrides {
                handoff_ns: self.handoff_ns,
                steal_ns: self.steal_ns,
                dispatch_ns: self.dispatch_ns,
                per_packet_ns: self.per_packet_ns,
            },
            early_steering: self.early_steering.clone(),
            serialize_connections: self.serialize_connections,
            service_dispersion: self.service_dispersion,
            knee_us: self.knee_us,
        }
    }
}

/// Runs the sweep with a progress bar on a terminal.
pub fn simulate(config: &SweepConfig, quiet: bool) -> Result<SweepResult, String> {
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

/// Re-renders `results.md` and the figures of `directory` from its `results.json`, checking
/// the recorded percentiles against the histograms; returns the line that says so.
pub fn replot_minos(directory: &Path) -> Result<String, String> {
    let report = SweepReport::read(directory)?;
    let checked = report.check_histograms()?;
    report.write(directory, false)?;
    Ok(if report.histograms.is_empty() {
        format!(
            "re-rendered {} (a file without histograms: percentiles not rechecked)",
            directory.display()
        )
    } else {
        format!(
            "re-rendered {}; the percentiles of {checked} points equal their histograms'",
            directory.display()
        )
    })
}

/// What `sim minos` simulates: the policies and rates (`a,b,c` or `start:end:step`; none:
/// the default span), the cores and connections (none: 16 per core).
pub struct MinosSweep<'a> {
    /// Policy names, as `--policies` gives them.
    pub policies: &'a [String],
    /// `--rates`, when given.
    pub rates: Option<&'a str>,
    /// Simulated cores.
    pub cores: usize,
    /// Client connections, when given.
    pub connections: Option<usize>,
}

/// Simulates the sweep `sweep` and `model` ask for and the report of it, metadata and
/// histograms included; `command` is the command line recorded in it.
pub fn minos_report(
    sweep: &MinosSweep<'_>,
    model: &ModelFlags,
    command: &str,
) -> Result<SweepReport, String> {
    let policies = sweep
        .policies
        .iter()
        .map(|name| name.parse::<Policy>().map_err(|error| error.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let rates = match sweep.rates {
        Some(text) => tailtrim_bench::parse_rates(text).map_err(|error| error.to_string())?,
        None => Vec::new(),
    };
    let connections = sweep
        .connections
        .unwrap_or(sweep::DEFAULT_CONNECTIONS_PER_CORE * sweep.cores);
    let options = model.options();
    let profile = load_profile(&model.profile)?;
    let config = options
        .config(profile, sweep.cores, connections, policies, rates)
        .map_err(|error| error.to_string())?;
    let recorder = Recorder::start();
    let result = simulate(&config, model.quiet)?;
    let mut metadata = recorder.finish();
    metadata.command = command.to_string();
    Ok(SweepReport::new(
        &config,
        &options,
        result,
        metadata,
        command.to_string(),
    )?)
}

/// `sim validate`'s comparison as JSON and as markdown.
pub struct ValidationText {
    /// `validation.json`.
    pub json: String,
    /// `validation.md`, the table printed.
    pub markdown: String,
}

impl ValidationText {
    /// Writes `validation.json` and `validation.md` into `directory` (created if missing).
    pub fn write(&self, directory: &Path) -> Result<(), String> {
        std::fs::create_dir_all(directory)
            .map_err(|error| format!("creating {}: {error}", directory.display()))?;
        for (name, content) in [
            ("validation.json", &self.json),
            ("validation.md", &self.markdown),
        ] {
            let path = directory.join(name);
            std::fs::write(&path, content)
                .map_err(|error| format!("writing {}: {error}", path.display()))?;
        }
        Ok(())
    }
}

/// Simulates the real experiment's setting (`real`: its results.json, none: the
/// repository's) at its rates and on to saturation, and compares; `command` is recorded.
pub fn validate(
    real: Option<&Path>,
    model: &ModelFlags,
    command: &str,
) -> Result<ValidationText, String> {
    let (real_path, real_file) = real_results_path(real)?;
    let real = RealResults::read(&real_path)?;
    let profile = load_profile(&model.profile)?;
    let config = real
        .sweep_config(&model.options(), profile)
        .map_err(|error| error.to_string())?;
    let recorder = Recorder::start();
    let result = simulate(&config, model.quiet)?;
    // The real rates may stop below the simulated saturation: sweep to it as well.
    let beyond = SweepConfig {
        rates: Vec::new(),
        ..config.clone()
    };
    let beyond = simulate(&beyond, model.quiet)?;
    let mut metadata = recorder.finish();
    metadata.command = command.to_string();
    let validation = Validation::compare(
        real,
        real_file,
        &config,
        &result,
        &beyond,
        metadata,
        command.to_string(),
    )?;
    Ok(ValidationText {
        json: validation.to_json()?,
        markdown: validation.markdown(&config.profile),
    })
}

/// Measures the service-time model on this machine: the median time of a GET per value
/// size through the real server code (`iterations` per size), fitted as a + b·bytes over
/// the reply sizes, with `base`'s hand-off, steal and dispatch costs. Each size's line and
/// the fit go to `log`.
pub fn measure_profile(
    sizes: &[u64],
    iterations: usize,
    base: CostModel,
    log: &mut dyn FnMut(String),
) -> Result<Profile, String> {
    if sizes.len() < 2 || iterations == 0 {
        return Err("need at least two sizes and one iteration".into());
    }
    let mut profiler = Profiler::start().map_err(|error| error.to_string())?;
    let mut samples = Vec::new();
    let mut ratios = Vec::new();
    for &size in sizes {
        let timings = profiler
            .time_gets(size, iterations)
            .map_err(|error| error.to_string())?;
        let ns = median(&timings.nanos);
        if ns > 0.0 {
            ratios.extend(timings.nanos.iter().map(|time| time / ns));
        }
        log(format!(
            "{:>8} B value, {:>8} B reply: median {:>9.0} ns ({} timed)",
            size,
            timings.reply_bytes,
            ns,
            timings.nanos.len()
        ));
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
    let mut profile = Profile::fit(description, samples, base)
        .ok_or_else(|| "could not fit: need two distinct sizes".to_string())?;
    profile.dispersion = tailtrim_sim::cost::dispersion_quantiles(&mut ratios);
    let quantile = |q: usize| profile.dispersion.get(q).copied().unwrap_or(1.0);
    log(format!(
        "fit: {:.0} ns + {:.4} ns/byte (r² {:.3}); time / median of its size: p1 {:.2}, p90 {:.2}, p99 {:.2}, max {:.1}",
        profile.cost.fixed_ns,
        profile.cost.per_byte_ns,
        profile.r_squared.unwrap_or(0.0),
        quantile(1),
        quantile(90),
        quantile(99),
        quantile(100)
    ));
    Ok(profile)
}

/// How accurately this machine sleeps: requested vs achieved sleeps of `micros` at each
/// count of concurrent `sleepers`, with the default and a 1 ns timer slack, `samples` sleeps
/// per sleeper; a markdown table, one line to `line` as each point is measured.
pub fn sleep_accuracy(
    micros: &[u64],
    sleepers: &[usize],
    samples: usize,
    line: &mut dyn FnMut(String),
) {
    use tailtrim_server::emulate::measure_accuracy;
    line("| requested | sleepers | timer slack | samples | overshoot p50 | p99 | max |".into());
    line("|---:|---:|---|---:|---:|---:|---:|".into());
    for &micros in micros {
        for &sleepers in sleepers {
            for min_slack in [false, true] {
                let a = measure_accuracy(
                    std::time::Duration::from_micros(micros),
                    sleepers,
                    samples,
                    min_slack,
                );
                line(format!(
                    "| {micros} µs | {sleepers} | {} | {} | {:.1} µs | {:.1} µs | {:.1} µs |",
                    if min_slack { "1 ns" } else { "default" },
                    a.samples,
                    a.p50_us,
                    a.p99_us,
                    a.max_us
                ));
            }
        }
    }
}
