//! `tailtrim experiment minos`: the Minos figure (small- and large-request
//! p99 versus throughput) for tailtrim's dispatch policies and stock
//! memcached, on this machine.
//!
//! ```text
//!  start every server (same -t, -m) ──> preload each (in-process bench)
//!     │
//!     for rate in rates:                       (ascending)
//!       for round in 0..repeats:
//!         for system in rotate(systems + floor, round):   (interleaved)
//!           bench::run_detailed(minos workload, rate)  ──> Sample
//!           tailtrim servers: `stats sizeaware` snapshot
//!       medians over rounds ──> Point       (results.json rewritten)
//!     │
//!     summary (knee of early binding, ratios, saturation)
//!     ──> results.json, results.md, small_p99.{svg,png}, large_p99.{svg,png}
//! ```
//!
//! The noise floor ("floor") is the same bench against an in-process stub
//! that answers every GET with a miss: loopback plus the bench's own path,
//! measured at the same rates, interleaved with the real systems.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tailtrim_bench::class::ClassHistograms;
use tailtrim_bench::{
    parse_rates, preload, run_detailed, Class, ClassSummary, PreloadReport, RunConfig, RunReport,
    WorkloadOverrides, WorkloadSpec,
};
use tailtrim_policy::costspec::{CostSpec, Units};
use tailtrim_sim::sweep::KneeReadout;

use crate::bootstrap::{peak_median_ratio, quantile_ratio, Interval, Plan, Repeats};
use crate::experiment::{Experiment, Progress, ProgressFn};
use crate::figures::{
    plot_latency_vs_throughput, system_color, Curve, LatencyClass, LatencyThroughput,
};
use crate::floor::NullServer;
use crate::histogram::Encoded;
use crate::meta::{Recorder, RunMetadata};
use crate::process::{fetch_stats, program_version, send_command, Process, Program, ServerShape};
use crate::results::{write_json, write_text};
use crate::stats::{interleaved_order, median};
use crate::tables::{Align, Table};

use super::common::{
    parse_cpu_list, pin_current_thread, pin_process, run_invocation, set_nice, tailtrim_binary,
    Invocation, Terminal,
};

/// Systems run when `--systems` is not given.
pub const DEFAULT_SYSTEMS: &str = "size-aware,early-binding,stealing,late-binding,memcached";
/// Rates swept when `--rates` is not given (requests per second).
pub const DEFAULT_RATES: &str = "5000,10000,20000,30000,40000,60000,80000,100000";
/// Rates of `--quick`.
const QUICK_RATES: &str = "1000,3000";
/// Default connections that preload each server.
const PRELOAD_CONNECTIONS: usize = 4;

/// Name of the noise-floor pseudo-system in results.
pub const FLOOR: &str = "floor";
/// A small request p99 above this marks early binding's knee (µs), without emulation.
const KNEE_US: f64 = 1_000.0;
/// With emulated service time, the knee is this many times a one-packet request's emulated
/// cost (ZygOS's SLO: p99 within 10x the service time).
const EMULATED_KNEE_SERVICE_TIMES: f64 = 10.0;

fn default_knee_us() -> f64 {
    KNEE_US
}

/// Arguments of `tailtrim experiment minos`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example (the committed figure):\n  \
    tailtrim experiment minos\n\
    Smoke run (a few seconds):\n  \
    tailtrim experiment minos --quick --systems pinned --out /tmp/minos\n\n\
    Systems: pinned (tailtrim's default, memcached's connection-per-thread model), \
    size-aware, early-binding, stealing, late-binding (tailtrim serve --dispatch NAME), \
    size-aware-help (size-aware with --large-workers-help true: idle large workers serve small \
    requests; size-aware runs with it false, Minos as published), memcached (Debian's /usr/bin/memcached).")]
pub struct Args {
    /// Comma-separated systems to compare.
    #[arg(long, default_value = DEFAULT_SYSTEMS)]
    systems: String,
    /// Target rates: `a,b,c` or `start:end:step` (requests per second).
    #[arg(long)]
    rates: Option<String>,
    /// Measured seconds per point.
    #[arg(short = 'd', long, default_value_t = 0.5)]
    duration: f64,
    /// Measured requests per point at least: a point lasts the longer of
    /// `--duration` and N / rate (low rates of a dilated testbed get enough
    /// samples for a p99 without lengthening every point).
    #[arg(long)]
    min_requests: Option<u64>,
    /// Large requests every system's point holds at least, its repeats pooled: after
    /// `--repeats`, rounds are added until each system's large requests reach N (at most
    /// `--max-repeats` rounds), so a ratio of small p99s rests on enough large requests.
    #[arg(long)]
    min_large: Option<u64>,
    /// Most rounds per point when `--min-large` adds rounds.
    #[arg(long, default_value_t = 30)]
    max_repeats: usize,
    /// Connections that preload each server (one request in flight on each;
    /// under a dilated `--emulate-service` every set is held, so more
    /// connections keep more workers busy).
    #[arg(long, default_value_t = PRELOAD_CONNECTIONS)]
    preload_connections: usize,
    /// Warm-up seconds before each measured window.
    #[arg(long, default_value_t = 0.2)]
    warmup: f64,
    /// Unmeasured seconds of load at the lowest rate on every server after
    /// its preload, before the sweep (first-touch page faults, allocator
    /// growth and the size-aware controller's first epochs happen here).
    #[arg(long, default_value_t = 3.0)]
    prime: f64,
    /// Repeats per (system, rate); the point is the median of them.
    #[arg(long, default_value_t = 11)]
    repeats: usize,
    /// Share of requests that go to the large pool (preset: 0.005).
    #[arg(long)]
    large_share: Option<f64>,
    /// Keys in the small pool (preset: 100000).
    #[arg(long)]
    keys: Option<u64>,
    /// Keys in the large pool (preset: 200).
    #[arg(long)]
    large_keys: Option<u64>,
    /// Seed of the schedule and key choices (same for every system at a point).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads of every server (`-t`).
    #[arg(short = 't', long, default_value_t = 2)]
    threads: usize,
    /// Item memory of every server in megabytes (`-m`).
    #[arg(short = 'm', long, default_value_t = 256)]
    memory_mb: u64,
    /// Bench connections per server.
    #[arg(short = 'c', long, default_value_t = 32)]
    connections: usize,
    /// Bench I/O threads.
    #[arg(long, default_value_t = 1)]
    bench_threads: usize,
    /// Requests in flight per connection before the bench queues client-side.
    #[arg(long, default_value_t = 16)]
    max_in_flight: usize,
    /// Seconds allowed for outstanding replies after each run.
    #[arg(long, default_value_t = 0.5)]
    drain: f64,
    /// Fixed small/large threshold in bytes for size-aware (`--size-threshold`);
    /// default: the server's controller decides.
    #[arg(long)]
    size_threshold: Option<u64>,
    /// Fixed number of small workers for size-aware (`--small-workers`);
    /// default: the server's controller decides.
    #[arg(long)]
    small_workers: Option<usize>,
    /// EXPERIMENTAL testbed: every tailtrim server runs with `--emulate-service SPEC` (its
    /// workers sleep for an emulated cost per request, docs/emulation.md), e.g.
    /// `packet=500ns,dilation=1000` for a cost proportional to packets as in Minos. Results are
    /// labelled EMULATED; memcached cannot take part.
    #[arg(long, value_name = "SPEC")]
    emulate_service: Option<String>,
    /// Knee latency (µs): the summary's knee is the first rate where early binding's small p99
    /// exceeds it. Default 1000, or with --emulate-service 10x a one-packet request's cost.
    #[arg(long)]
    knee_us: Option<f64>,
    /// Extra argument for every `tailtrim serve` (repeatable).
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Pin the bench (this process) to these CPUs, e.g. `1` or `0-1`.
    #[arg(long, value_name = "CPUS")]
    bench_cpus: Option<String>,
    /// Pin every server's threads to these CPUs.
    #[arg(long, value_name = "CPUS")]
    server_cpus: Option<String>,
    /// Nice value for the bench and the servers it starts (e.g. -15: run
    /// ahead of other tenants' compilers on a shared machine; needs root).
    #[arg(long, allow_hyphen_values = true)]
    nice: Option<i32>,
    /// Skip the noise-floor measurement.
    #[arg(long)]
    no_floor: bool,
    /// Short smoke run: 2 low rates, 0.5 s points, 1 repeat, small key set.
    #[arg(long)]
    quick: bool,
    /// Output directory.
    #[arg(short = 'o', long, default_value = "experiments/minos")]
    out: PathBuf,
    /// Only re-render results.md and the plots from `<out>/results.json`.
    #[arg(long)]
    replot: bool,
    /// No progress bar and no per-run lines.
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// One system under test.
#[derive(Clone, Debug)]
struct System {
    name: String,
    program: Program,
}

fn system_from_name(name: &str, args: &Args) -> Result<System, String> {
    let mut extra = args.server_args.clone();
    if let Some(spec) = &args.emulate_service {
        extra.extend(["--emulate-service".to_string(), spec.clone()]);
    }
    let program = match name {
        "memcached" if args.emulate_service.is_some() => {
            return Err(
                "memcached cannot emulate service time: leave it out of --systems with \
                 --emulate-service"
                    .to_string(),
            )
        }
        "memcached" => Program::Memcached,
        "pinned" => Program::Tailtrim { extra },
        "size-aware" | "size-aware-help" | "early-binding" | "stealing" | "late-binding" => {
            let size_aware = name.starts_with("size-aware");
            let dispatch = if size_aware { "size-aware" } else { name };
            extra.extend(["--dispatch".to_string(), dispatch.to_string()]);
            if size_aware {
                // Explicit either way: `size-aware` is Minos as published whatever the
                // server's default.
                let help = name == "size-aware-help";
                extra.extend(["--large-workers-help".to_string(), help.to_string()]);
            }
            if !size_aware {
                // Only classifies their in-server latency statistics, at the
                // bench's own small/large cut; their dispatch ignores it.
                extra.extend([
                    "--size-threshold".to_string(),
                    tailtrim_bench::workload::DEFAULT_LARGE_THRESHOLD_BYTES.to_string(),
                ]);
            }
            if size_aware {
                if let Some(threshold) = args.size_threshold {
                    extra.extend(["--size-threshold".to_string(), threshold.to_string()]);
                }
                if let Some(workers) = args.small_workers {
                    extra.extend(["--small-workers".to_string(), workers.to_string()]);
                }
            }
            Program::Tailtrim { extra }
        }
        other => {
            return Err(format!(
                "unknown system {other:?}; known: pinned, size-aware, size-aware-help, \
                 early-binding, stealing, late-binding, memcached"
            ))
        }
    };
    Ok(System {
        name: name.to_string(),
        program,
    })
}

/// Latency summary of one class in one run (µs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassLatency {
    /// Completed requests of the class.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
}

impl From<&ClassSummary> for ClassLatency {
    fn from(summary: &ClassSummary) -> Self {
        Self {
            count: summary.count,
            p50_us: summary.p50_us,
            p99_us: summary.p99_us,
            p999_us: summary.p999_us,
            max_us: summary.max_us,
        }
    }
}

/// One measured run of one system at one rate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Round (0-based) within the rate.
    pub round: usize,
    /// Position in the round's interleaved order.
    pub position: usize,
    /// Target rate.
    pub target_rps: f64,
    /// Replies per second received in the measured window.
    pub achieved_rps: f64,
    /// Small requests (largest value ≤ the workload's threshold).
    pub small: ClassLatency,
    /// Large requests.
    pub large: ClassLatency,
    /// Every request.
    pub all: ClassLatency,
    /// Errors (error replies, broken connections, unfinished at drain end).
    pub errors: u64,
    /// Keys not found.
    pub misses: u64,
    /// Keys found.
    pub hits: u64,
    /// CPU of the bench process during the run, percent of one core.
    pub bench_cpu_percent: f64,
    /// p99 of the bench's own send lag (scheduled vs actual send), µs.
    pub send_lag_p99_us: f64,
    /// The run's latency histograms (nanoseconds; hdrhistogram V2, base64) of the `all`,
    /// `small` and `large` classes, so any percentile can be recomputed. Absent in files
    /// written before the harness kept them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub histograms: BTreeMap<String, Encoded>,
    /// `stats sizeaware` of a tailtrim server after the run (cumulative), if
    /// the server has that group.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub server_stats: BTreeMap<String, String>,
    /// Why the run failed, if it did (then the numbers are zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl Sample {
    fn from_report(round: usize, position: usize, report: &RunReport) -> Self {
        Self {
            round,
            position,
            target_rps: report.target_rps,
            achieved_rps: report.achieved_rps,
            small: ClassLatency::from(&report.class(Class::Small)),
            large: ClassLatency::from(&report.class(Class::Large)),
            all: ClassLatency::from(&report.class(Class::All)),
            errors: report.errors,
            misses: report.misses,
            hits: report.hits,
            bench_cpu_percent: report.bench_cpu_percent,
            send_lag_p99_us: report.send_lag.p99_us,
            histograms: BTreeMap::new(),
            server_stats: BTreeMap::new(),
            failure: None,
        }
    }

    /// Keeps the run's histograms of the classes the experiment reads.
    fn keep_histograms(&mut self, histograms: &ClassHistograms) -> Result<(), String> {
        for class in [Class::All, Class::Small, Class::Large] {
            let encoded = Encoded::encode(histograms.get(class))?;
            self.histograms.insert(class.name().to_string(), encoded);
        }
        Ok(())
    }
}

/// Medians over the repeats of one system at one rate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Target rate.
    pub target_rps: f64,
    /// Median achieved rate.
    pub achieved_rps: f64,
    /// Median small-request p50 (µs).
    pub small_p50_us: f64,
    /// Median small-request p99 (µs).
    pub small_p99_us: f64,
    /// Median small-request p99.9 (µs).
    pub small_p999_us: f64,
    /// Median large-request p50 (µs).
    pub large_p50_us: f64,
    /// Median large-request p99 (µs).
    pub large_p99_us: f64,
    /// Median p99 over all requests (µs).
    pub all_p99_us: f64,
    /// Small requests completed, summed over repeats.
    pub small_count: u64,
    /// Large requests completed, summed over repeats.
    pub large_count: u64,
    /// Errors, summed over repeats.
    pub errors: u64,
    /// Misses, summed over repeats.
    pub misses: u64,
    /// Median bench CPU percent.
    pub bench_cpu_percent: f64,
    /// Median in-server small-request p99 (µs; tailtrim servers only: kernel
    /// receipt to reply queued, from `stats sizeaware` reset before each run).
    #[serde(default)]
    pub server_small_p99_us: Option<f64>,
    /// Median in-server large-request p99 (µs), as above.
    #[serde(default)]
    pub server_large_p99_us: Option<f64>,
    /// Small requests of every valid repeat pooled into one histogram (a
    /// stall in any repeat shows here, unlike in the medians).
    #[serde(default)]
    pub pooled_small: ClassLatency,
    /// Large requests of every valid repeat pooled (more samples than one
    /// short repeat has).
    #[serde(default)]
    pub pooled_large: ClassLatency,
    /// Repeats that completed (failed runs are excluded from the medians).
    pub valid_repeats: usize,
    /// Every repeat.
    pub samples: Vec<Sample>,
}

impl Point {
    fn from_samples(target_rps: f64, samples: Vec<Sample>, pooled: &ClassHistograms) -> Self {
        let valid: Vec<&Sample> = samples
            .iter()
            .filter(|sample| sample.failure.is_none())
            .collect();
        let med = |pick: fn(&Sample) -> f64| {
            median(&valid.iter().map(|sample| pick(sample)).collect::<Vec<_>>())
        };
        Self {
            target_rps,
            achieved_rps: med(|sample| sample.achieved_rps),
            small_p50_us: med(|sample| sample.small.p50_us),
            small_p99_us: med(|sample| sample.small.p99_us),
            small_p999_us: med(|sample| sample.small.p999_us),
            large_p50_us: med(|sample| sample.large.p50_us),
            large_p99_us: med(|sample| sample.large.p99_us),
            all_p99_us: med(|sample| sample.all.p99_us),
            small_count: valid.iter().map(|sample| sample.small.count).sum(),
            large_count: valid.iter().map(|sample| sample.large.count).sum(),
            errors: valid.iter().map(|sample| sample.errors).sum(),
            misses: valid.iter().map(|sample| sample.misses).sum(),
            bench_cpu_percent: med(|sample| sample.bench_cpu_percent),
            server_small_p99_us: server_median(&valid, "small_p99_us"),
            server_large_p99_us: server_median(&valid, "large_p99_us"),
            pooled_small: ClassLatency::from(&ClassSummary::from_histogram(
                pooled.get(Class::Small),
                false,
            )),
            pooled_large: ClassLatency::from(&ClassSummary::from_histogram(
                pooled.get(Class::Large),
                false,
            )),
            valid_repeats: valid.len(),
            samples,
        }
    }
}

/// Median over the repeats of one `stats sizeaware` figure; `None` when no
/// repeat reported it (memcached, the floor stub).
fn server_median(samples: &[&Sample], stat: &str) -> Option<f64> {
    let values: Vec<f64> = samples
        .iter()
        .filter_map(|sample| sample.server_stats.get(stat)?.parse::<f64>().ok())
        .collect();
    (!values.is_empty()).then(|| median(&values))
}

/// Results of one system over the sweep.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemResult {
    /// System name (`size-aware`, …, `memcached`, `floor`).
    pub name: String,
    /// Command line of the server (empty for the floor stub).
    pub command: String,
    /// Preload of the server (absent for the floor stub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preload: Option<PreloadReport>,
    /// `stats sizeaware` right after the preload (tailtrim servers only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stats_after_preload: BTreeMap<String, String>,
    /// One point per rate, in sweep order.
    pub points: Vec<Point>,
}

/// The experiment's configuration as run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Systems compared (without the floor).
    pub systems: Vec<String>,
    /// Target rates.
    pub rates: Vec<f64>,
    /// Measured seconds per point.
    pub duration_s: f64,
    /// Measured requests per point at least (a point lasts the longer of the duration and
    /// this many requests at its rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<u64>,
    /// Large requests every system's point holds at least, its repeats pooled (rounds added
    /// after `repeats` until it does, at most `max_repeats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_large: Option<u64>,
    /// Most rounds per point when `min_large` adds rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_repeats: Option<usize>,
    /// Warm-up seconds per point.
    pub warmup_s: f64,
    /// Unmeasured seconds at the lowest rate on every server before the sweep.
    #[serde(default)]
    pub prime_s: f64,
    /// Drain seconds per point.
    pub drain_s: f64,
    /// Repeats per point.
    pub repeats: usize,
    /// Base seed.
    pub seed: u64,
    /// Server worker threads.
    pub threads: usize,
    /// Server memory (MB).
    pub memory_mb: u64,
    /// Bench connections per server.
    pub connections: usize,
    /// Bench I/O threads.
    pub bench_threads: usize,
    /// In-flight cap per connection.
    pub max_in_flight: usize,
    /// CPUs the bench was pinned to (empty: not pinned).
    pub bench_cpus: Vec<usize>,
    /// CPUs the servers were pinned to (empty: not pinned).
    pub server_cpus: Vec<usize>,
    /// Nice value of the bench and servers (None: inherited).
    pub nice: Option<i32>,
    /// Whether this was a `--quick` smoke run.
    pub quick: bool,
    /// Whether the noise floor was measured.
    pub floor: bool,
    /// The emulated service cost every tailtrim server ran with (EXPERIMENTAL testbed); `None`:
    /// real service times.
    #[serde(default)]
    pub emulate_service: Option<String>,
    /// Knee latency (µs) of the summary.
    #[serde(default = "default_knee_us")]
    pub knee_us: f64,
}

/// The machine as files written before the harness's metadata recorded it; read only, to
/// fill [`RunMetadata`] when such a file is replotted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LegacyMachine {
    /// CPUs online.
    pub cpus: usize,
    /// `uname -r`-like kernel release.
    pub kernel: String,
    /// `memcached -V`.
    pub memcached_version: String,
    /// Share of CPU time stolen by the hypervisor during the experiment (%).
    pub steal_percent: f64,
    /// Wall time of the whole experiment.
    pub wall_seconds: f64,
}

/// Headline numbers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Where early binding's small p99 first exceeds the knee latency, and the p99s there.
    #[serde(flatten)]
    pub knee: KneeReadout,
    /// In-server small p99 of every tailtrim system at the end-to-end knee (µs).
    #[serde(default)]
    pub server_small_p99_at_knee_us: BTreeMap<String, f64>,
    /// In-server small p99: early binding / size-aware at the end-to-end knee.
    #[serde(default)]
    pub server_small_p99_ratio_at_knee: Option<f64>,
    /// First target rate where early binding's in-server small p99 exceeds the knee latency.
    #[serde(default)]
    pub server_knee_rate_rps: Option<f64>,
    /// In-server small p99 of every tailtrim system at the in-server knee (µs).
    #[serde(default)]
    pub server_small_p99_at_server_knee_us: BTreeMap<String, f64>,
    /// In-server small p99: early binding / size-aware at the in-server knee.
    #[serde(default)]
    pub server_small_p99_ratio_at_server_knee: Option<f64>,
    /// Highest median achieved throughput of each system over the sweep.
    pub saturation_rps: BTreeMap<String, f64>,
    /// Size-aware saturation / early-binding saturation.
    pub saturation_ratio_size_aware_vs_early: Option<f64>,
    /// Size-aware saturation / stealing saturation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturation_ratio_size_aware_vs_stealing: Option<f64>,
    /// Bootstrap interval of size-aware's saturation over early binding's (each point's
    /// repeats resampled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturation_interval_size_aware_vs_early: Option<Interval>,
    /// Bootstrap interval of size-aware's saturation over stealing's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturation_interval_size_aware_vs_stealing: Option<Interval>,
    /// At every rate, every other system's pooled small p99 over size-aware's, with its
    /// bootstrap interval and the large requests behind each side.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub small_p99_ratios: Vec<PooledRatio>,
    /// Noise floor: the stub's all-request p99 at the lowest rate (µs).
    pub floor_p99_us: Option<f64>,
    /// Small p99 of each system at the lowest rate, divided by the floor.
    pub small_p99_over_floor_at_lowest_rate: BTreeMap<String, f64>,
}

/// Large requests a point's ratio must rest on, each side's repeats pooled, to be read.
pub const ENOUGH_LARGE: u64 = 50;

/// One system's pooled small p99 over size-aware's at one rate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PooledRatio {
    /// Target rate.
    pub target_rps: f64,
    /// The system compared with size-aware.
    pub system: String,
    /// Its small p99, every valid repeat pooled (µs).
    pub small_p99_us: f64,
    /// Size-aware's small p99, every valid repeat pooled (µs).
    pub size_aware_small_p99_us: f64,
    /// The ratio with its bootstrap interval (repeats, then requests, resampled).
    pub ratio: Interval,
    /// The system's large requests, its valid repeats together.
    pub large: u64,
    /// The fewest large requests in one of its valid repeats.
    pub large_fewest: u64,
    /// Size-aware's large requests, its valid repeats together.
    pub size_aware_large: u64,
    /// The fewest large requests in one of size-aware's valid repeats.
    pub size_aware_large_fewest: u64,
}

impl PooledRatio {
    /// Whether both sides' pooled repeats hold at least [`ENOUGH_LARGE`] large requests.
    #[must_use]
    pub fn enough_large(&self) -> bool {
        self.large >= ENOUGH_LARGE && self.size_aware_large >= ENOUGH_LARGE
    }
}

/// The `results.json` document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MinosResults {
    /// `minos`.
    pub experiment: String,
    /// How the file was produced: commit, machine, load and steal during the run, command.
    #[serde(default)]
    pub metadata: RunMetadata,
    /// Whether every planned run finished.
    pub complete: bool,
    /// Settings.
    pub settings: RunSettings,
    /// Older files' command line (now in `metadata`; read only).
    #[serde(default, skip_serializing)]
    pub command: Option<String>,
    /// Older files' start time (now in `metadata`; read only).
    #[serde(default, skip_serializing)]
    pub started_utc: Option<String>,
    /// Older files' machine (now in `metadata`; read only).
    #[serde(default, skip_serializing)]
    pub machine: Option<LegacyMachine>,
    /// The workload, as the bench ran it.
    pub workload: Option<WorkloadSpec>,
    /// Per system, in the order given (the floor last).
    pub systems: Vec<SystemResult>,
    /// Headline numbers.
    pub summary: Summary,
}

/// Measured time of a point at `rate`: `duration`, or longer if `min_requests` at that rate
/// take longer.
fn point_duration(duration: Duration, min_requests: Option<u64>, rate: f64) -> Duration {
    match min_requests {
        Some(requests) if rate > 0.0 => {
            duration.max(Duration::from_secs_f64(requests as f64 / rate))
        }
        _ => duration,
    }
}

fn seconds(value: f64, name: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| format!("--{name} must be a non-negative number"))
}

fn workload_for(args: &Args) -> Result<WorkloadSpec, String> {
    let mut spec = WorkloadSpec::preset("minos").map_err(|error| error.to_string())?;
    let (keys, large_keys) = if args.quick {
        (args.keys.or(Some(2_000)), args.large_keys.or(Some(20)))
    } else {
        (args.keys, args.large_keys)
    };
    spec.apply(&WorkloadOverrides {
        keys,
        large_share: args.large_share,
        large_keys,
        ..WorkloadOverrides::default()
    })
    .map_err(|error| error.to_string())?;
    Ok(spec)
}

impl MinosResults {
    /// Moves the metadata of a file written before the harness (top-level `command`,
    /// `started_utc`, `machine`) into `metadata`; a newer file is left as it is. The commit
    /// of such a file is unknown.
    fn upgrade(&mut self) {
        let Some(machine) = self.machine.take() else {
            return;
        };
        let metadata = &mut self.metadata;
        metadata.command = self.command.take().unwrap_or_default();
        metadata.started_utc = self.started_utc.take().unwrap_or_default();
        metadata.commit = "unknown (recorded before the harness kept commits)".to_string();
        metadata.cores = machine.cpus;
        metadata.kernel = machine.kernel;
        metadata.steal_percent = machine.steal_percent;
        metadata.wall_seconds = machine.wall_seconds;
        if !machine.memcached_version.is_empty() {
            metadata
                .tools
                .insert("memcached".to_string(), machine.memcached_version);
        }
    }
}

/// Runs `tailtrim experiment minos` (or redraws a kept run with `--replot`).
pub fn run(args: Args) -> Result<std::process::ExitCode, String> {
    run_invocation("minos", args.quiet, &args, &args.out, args.replot)
}

/// The Minos figure's sweep: every system at every rate, interleaved, with the noise floor.
pub type Minos<'a> = Invocation<'a, Args>;

impl Experiment for Minos<'_> {
    type Results = MinosResults;

    fn run(&self, progress: ProgressFn<'_>) -> Result<MinosResults, String> {
        sweep(self.args, self.terminal, progress)
    }

    /// A file written before the harness kept metadata is brought into the current schema, and
    /// the summary is derived again (the file is always rewritten).
    fn refresh(results: &mut MinosResults) -> bool {
        results.upgrade();
        results.summary = summarize(results);
        true
    }

    fn check(results: &MinosResults) -> Result<usize, String> {
        check_percentiles(results)
    }

    fn render(results: &MinosResults, out: &Path) -> Result<(), String> {
        write_text(out, "results.md", &markdown(results))?;
        plot_latency(results, out, LatencyClass::Small)?;
        plot_latency(results, out, LatencyClass::Large)
    }

    fn summarise(results: &MinosResults) -> String {
        markdown(results)
    }
}

/// Recomputes every kept repeat's p50 and p99 of each class from its histogram; an error names
/// the first that differs. Returns how many repeats kept histograms.
fn check_percentiles(results: &MinosResults) -> Result<usize, String> {
    let mut checked = 0;
    for system in &results.systems {
        for point in &system.points {
            for sample in point
                .samples
                .iter()
                .filter(|sample| !sample.histograms.is_empty())
            {
                for (class, latency) in [
                    ("all", &sample.all),
                    ("small", &sample.small),
                    ("large", &sample.large),
                ] {
                    let Some(encoded) = sample.histograms.get(class) else {
                        continue;
                    };
                    let (p50, p99) = (format!("{class} p50"), format!("{class} p99"));
                    let reported = [(&*p50, 50.0, latency.p50_us), (&*p99, 99.0, latency.p99_us)];
                    if let Some(what) = encoded.disagreement(&reported) {
                        return Err(format!(
                            "{} at {:.0} rps, round {}: {what}",
                            system.name,
                            point.target_rps,
                            sample.round + 1
                        ));
                    }
                }
                checked += 1;
            }
        }
    }
    Ok(checked)
}

/// Runs the sweep: starts and preloads every server, then every rate with the systems
/// interleaved in each round; the results so far are kept after every rate.
fn sweep(
    args: &Args,
    terminal: &Terminal,
    progress: ProgressFn<'_>,
) -> Result<MinosResults, String> {
    let mut recorder = Recorder::start();
    recorder.tool("memcached", program_version("memcached"));
    let quick = args.quick;
    let rates_text = args
        .rates
        .clone()
        .unwrap_or_else(|| if quick { QUICK_RATES } else { DEFAULT_RATES }.to_string());
    let mut rates = parse_rates(&rates_text).map_err(|error| error.to_string())?;
    rates.sort_by(|left, right| left.total_cmp(right));
    let (duration, warmup, repeats, drain) = if quick {
        (
            Duration::from_millis(500),
            Duration::from_millis(200),
            1,
            Duration::from_millis(500),
        )
    } else {
        (
            seconds(args.duration, "duration")?,
            seconds(args.warmup, "warmup")?,
            args.repeats.max(1),
            seconds(args.drain, "drain")?,
        )
    };
    if duration.is_zero() {
        return Err("--duration must be positive".to_string());
    }
    let systems: Vec<System> = args
        .systems
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| system_from_name(name, args))
        .collect::<Result<_, _>>()?;
    if systems.is_empty() {
        return Err("--systems lists no system".to_string());
    }
    let bench_cpus = args.bench_cpus.as_deref().map(parse_cpu_list).transpose()?;
    let server_cpus = args
        .server_cpus
        .as_deref()
        .map(parse_cpu_list)
        .transpose()?;
    if let Some(cpus) = &bench_cpus {
        pin_current_thread(cpus)?;
    }
    if let Some(nice) = args.nice {
        set_nice(nice)?;
    }
    let workload = Arc::new(workload_for(args)?);
    let emulated = args
        .emulate_service
        .as_deref()
        .map(|text| CostSpec::parse(text).map_err(|error| format!("--emulate-service: {error}")))
        .transpose()?;
    let one_packet_us = emulated.map_or(0.0, |spec| {
        spec.mean_nanos(Units { keys: 1, bytes: 1 }) / 1e3
    });
    let knee_us = args.knee_us.unwrap_or(if one_packet_us > 0.0 {
        EMULATED_KNEE_SERVICE_TIMES * one_packet_us
    } else {
        KNEE_US
    });

    let mut results = MinosResults {
        experiment: "minos".to_string(),
        metadata: recorder.snapshot(),
        complete: false,
        settings: RunSettings {
            systems: systems.iter().map(|system| system.name.clone()).collect(),
            rates: rates.clone(),
            duration_s: duration.as_secs_f64(),
            min_requests: args.min_requests.filter(|_| !quick),
            min_large: args.min_large.filter(|_| !quick),
            max_repeats: args
                .min_large
                .filter(|_| !quick)
                .map(|_| args.max_repeats.max(repeats)),
            warmup_s: warmup.as_secs_f64(),
            prime_s: if quick { 0.0 } else { args.prime.max(0.0) },
            drain_s: drain.as_secs_f64(),
            repeats,
            seed: args.seed,
            threads: args.threads,
            memory_mb: args.memory_mb,
            connections: args.connections,
            bench_threads: args.bench_threads,
            max_in_flight: args.max_in_flight,
            bench_cpus: bench_cpus.clone().unwrap_or_default(),
            server_cpus: server_cpus.clone().unwrap_or_default(),
            nice: args.nice,
            quick,
            floor: !args.no_floor,
            emulate_service: args.emulate_service.clone(),
            knee_us,
        },
        command: None,
        started_utc: None,
        machine: None,
        workload: Some((*workload).clone()),
        systems: Vec::new(),
        summary: Summary::default(),
    };
    std::fs::create_dir_all(&args.out)
        .map_err(|error| format!("creating {}: {error}", args.out.display()))?;

    // Start and preload every server.
    let shape = ServerShape {
        threads: args.threads,
        memory_mb: args.memory_mb,
    };
    let tailtrim = tailtrim_binary()?;
    let mut servers: Vec<Process> = Vec::with_capacity(systems.len());
    for system in &systems {
        let server = Process::start(system.program.launch(&system.name, &tailtrim, &shape)?)?;
        if let Some(cpus) = &server_cpus {
            pin_process(server.pid(), cpus)?;
        }
        let stage = format!("preload {}", system.name);
        let loaded = preload(
            &workload,
            &server.address(),
            args.preload_connections,
            &mut |done| {
                progress(Progress {
                    stage: &stage,
                    done,
                    total: workload.total_keys(),
                });
            },
        )
        .map_err(|error| format!("preloading {}: {error}", system.name))?;
        terminal.say(&format!(
            "{}: pid {}, preloaded {} keys in {:.1} s ({} errors)",
            system.name,
            server.pid(),
            loaded.keys,
            loaded.seconds,
            loaded.errors
        ));
        let stats_after_preload = tailtrim_stats(&system.program, &server.address());
        results.systems.push(SystemResult {
            name: system.name.clone(),
            command: server.command_line(),
            preload: Some(loaded),
            stats_after_preload,
            points: Vec::new(),
        });
        servers.push(server);
    }
    let floor = if args.no_floor {
        None
    } else {
        results.systems.push(SystemResult {
            name: FLOOR.to_string(),
            command: "in-process stub: every get -> END".to_string(),
            ..SystemResult::default()
        });
        Some(NullServer::start().map_err(|error| error.to_string())?)
    };
    let floor_workload = Arc::new(floor_workload(&workload)?);

    // Prime every server, unmeasured, so the first rate is not the one that
    // pays for start-up.
    if let (Some(lowest), false) = (rates.first(), quick || args.prime <= 0.0) {
        let prime = seconds(args.prime, "prime")?;
        for (server, system) in servers.iter().zip(&systems) {
            let mut config = RunConfig::new(&server.address(), *lowest, prime);
            config.connections = args.connections;
            config.threads = args.bench_threads;
            config.max_in_flight = args.max_in_flight;
            config.seed = args.seed ^ 0x5eed;
            config.timeseries = false;
            terminal.say(&format!(
                "priming {} at {lowest:.0} rps for {:.1} s",
                system.name, args.prime
            ));
            run_detailed(&workload, &config, &mut |_| {})
                .map_err(|error| format!("priming {}: {error}", system.name))?;
        }
    }

    // The sweep: rates ascending, systems interleaved within each round.
    let participants = results.systems.len();
    let min_requests = results.settings.min_requests;
    let per_run_ms =
        |rate: f64| (warmup + point_duration(duration, min_requests, rate)).as_millis() as u64;
    let total_ms: u64 =
        rates.iter().map(|rate| per_run_ms(*rate)).sum::<u64>() * (repeats * participants) as u64;
    let mut done_ms = 0u64;
    let mut dead: Vec<Option<String>> = vec![None; participants];
    for (rate_index, rate) in rates.iter().enumerate() {
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); participants];
        let mut pooled: Vec<ClassHistograms> = vec![ClassHistograms::default(); participants];
        let most_rounds = results.settings.max_repeats.unwrap_or(repeats);
        let mut round = 0;
        while round < repeats
            || (round < most_rounds
                && short_of_large(&pooled, &dead, servers.len(), results.settings.min_large))
        {
            let seed = args
                .seed
                .wrapping_add((rate_index * 1_000 + round) as u64 * 7_919);
            for (position, participant) in interleaved_order(participants, round)
                .into_iter()
                .enumerate()
            {
                let name = results.systems[participant].name.clone();
                let (address, run_workload) = match servers.get(participant) {
                    Some(server) => (server.address(), &workload),
                    None => match &floor {
                        Some(stub) => (stub.address(), &floor_workload),
                        None => continue,
                    },
                };
                let mut config = RunConfig::new(
                    &address,
                    *rate,
                    point_duration(duration, min_requests, *rate),
                );
                config.warmup = warmup;
                config.drain = drain;
                config.connections = args.connections;
                config.threads = args.bench_threads;
                config.max_in_flight = args.max_in_flight;
                config.seed = seed;
                config.timeseries = false;
                let stage = format!("{:.0} rps, round {}/{}, {name}", rate, round + 1, repeats);
                let base = done_ms;
                let run_ms = per_run_ms(*rate);
                let sample = if let Some(reason) = &dead[participant] {
                    Sample {
                        round,
                        position,
                        target_rps: *rate,
                        failure: Some(reason.clone()),
                        ..Sample::default()
                    }
                } else {
                    if let Some(system) = systems.get(participant) {
                        reset_tailtrim_stats(&system.program, &address);
                    }
                    let outcome = run_detailed(run_workload, &config, &mut |running| {
                        let elapsed = (running.elapsed.as_millis() as u64).min(run_ms);
                        progress(Progress {
                            stage: &stage,
                            done: base + elapsed,
                            total: total_ms,
                        });
                    });
                    let alive = match servers.get_mut(participant) {
                        Some(server) => server.check_alive().map_err(String::from),
                        None => Ok(()),
                    };
                    match (outcome, alive) {
                        (Ok(output), Ok(())) => {
                            pooled[participant].merge(&output.histograms);
                            let mut sample = Sample::from_report(round, position, &output.report);
                            sample.keep_histograms(&output.histograms)?;
                            if let Some(system) = systems.get(participant) {
                                sample.server_stats = tailtrim_stats(&system.program, &address);
                            }
                            sample
                        }
                        (_, Err(reason)) => {
                            dead[participant] = Some(reason.clone());
                            Sample {
                                round,
                                position,
                                target_rps: *rate,
                                failure: Some(reason),
                                ..Sample::default()
                            }
                        }
                        (Err(error), Ok(())) => Sample {
                            round,
                            position,
                            target_rps: *rate,
                            failure: Some(error.to_string()),
                            ..Sample::default()
                        },
                    }
                };
                done_ms += run_ms;
                progress(Progress {
                    stage: &stage,
                    done: done_ms,
                    total: total_ms,
                });
                terminal.say(&describe_sample(&name, &sample));
                samples[participant].push(sample);
            }
            round += 1;
        }
        for (participant, (participant_samples, histograms)) in
            samples.into_iter().zip(&pooled).enumerate()
        {
            results.systems[participant]
                .points
                .push(Point::from_samples(*rate, participant_samples, histograms));
        }
        results.summary = summarize(&results);
        results.metadata = recorder.snapshot();
        write_json(&args.out, &results)?;
    }
    drop(servers);
    drop(floor);

    results.complete = dead.iter().all(Option::is_none);
    results.metadata = recorder.finish();
    results.summary = summarize(&results);
    Ok(results)
}

/// The floor's workload: GETs only (the stub answers every one with a miss),
/// same keys and arrival process as the real workload.
fn floor_workload(workload: &WorkloadSpec) -> Result<WorkloadSpec, String> {
    let mut spec = workload.clone();
    spec.name = format!("{}-floor", workload.name);
    spec.apply(&WorkloadOverrides {
        set_share: Some(0.0),
        ..WorkloadOverrides::default()
    })
    .map_err(|error| error.to_string())?;
    Ok(spec)
}

/// `stats sizeaware` of a tailtrim server (empty for memcached, or when the
/// server does not have the group or cannot be asked).
fn tailtrim_stats(program: &Program, address: &str) -> BTreeMap<String, String> {
    match program {
        Program::Tailtrim { .. } => fetch_stats(address, Some("sizeaware")).unwrap_or_default(),
        Program::Memcached => BTreeMap::new(),
    }
}

/// Clears a tailtrim server's per-class latency histograms so the `stats
/// sizeaware` read after a run covers that run (and its warm-up) only.
fn reset_tailtrim_stats(program: &Program, address: &str) {
    if let Program::Tailtrim { .. } = program {
        let _ = send_command(address, b"stats reset\r\n", b"RESET\r\n");
    }
}

fn describe_sample(name: &str, sample: &Sample) -> String {
    match &sample.failure {
        Some(reason) => format!(
            "{:>7.0} rps r{} {name:<13} FAILED: {}",
            sample.target_rps,
            sample.round + 1,
            reason.lines().next().unwrap_or_default()
        ),
        None => format!(
            "{:>7.0} rps r{} {name:<13} achieved {:>7.0}  small p50 {:>7.0} p99 {:>8.0} µs  large p99 {:>8.0} µs  err {} miss {} bench cpu {:.0}%",
            sample.target_rps,
            sample.round + 1,
            sample.achieved_rps,
            sample.small.p50_us,
            sample.small.p99_us,
            sample.large.p99_us,
            sample.errors,
            sample.misses,
            sample.bench_cpu_percent
        ),
    }
}

fn system<'a>(results: &'a MinosResults, name: &str) -> Option<&'a SystemResult> {
    results.systems.iter().find(|system| system.name == name)
}

fn point_at(system: &SystemResult, rate: f64) -> Option<&Point> {
    system
        .points
        .iter()
        .find(|point| point.target_rps == rate && point.valid_repeats > 0)
}

/// Headline numbers: early binding's knee, ratios there, saturation, floor.
fn summarize(results: &MinosResults) -> Summary {
    let mut summary = Summary::default();
    // Zero (settings built without one): the default knee.
    let knee_us = if results.settings.knee_us > 0.0 {
        results.settings.knee_us
    } else {
        KNEE_US
    };
    let early = system(results, "early-binding");
    let size_aware = system(results, "size-aware");
    if let Some(early) = early {
        if let Some(knee) = early
            .points
            .iter()
            .find(|point| point.valid_repeats > 0 && point.small_p99_us > knee_us)
        {
            summary.knee.knee_rate_rps = Some(knee.target_rps);
            summary.knee.early_binding_small_p99_us = Some(knee.small_p99_us);
            for other in &results.systems {
                if other.name == FLOOR {
                    continue;
                }
                if let Some(point) = point_at(other, knee.target_rps) {
                    summary
                        .knee
                        .small_p99_at_knee_us
                        .insert(other.name.clone(), point.small_p99_us);
                    summary
                        .knee
                        .large_p99_at_knee_us
                        .insert(other.name.clone(), point.large_p99_us);
                }
            }
            summary.server_small_p99_at_knee_us = server_small_at(results, knee.target_rps);
            summary.server_small_p99_ratio_at_knee =
                ratio_early_to_size_aware(&summary.server_small_p99_at_knee_us);
            if let Some(point) = size_aware.and_then(|system| point_at(system, knee.target_rps)) {
                summary.knee.size_aware_small_p99_us = Some(point.small_p99_us);
                if point.small_p99_us > 0.0 {
                    summary.knee.small_p99_ratio = Some(knee.small_p99_us / point.small_p99_us);
                }
            }
        }
    }
    if let Some(knee) = early.and_then(|early| {
        early.points.iter().find(|point| {
            point.valid_repeats > 0 && point.server_small_p99_us.is_some_and(|p99| p99 > knee_us)
        })
    }) {
        summary.server_knee_rate_rps = Some(knee.target_rps);
        summary.server_small_p99_at_server_knee_us = server_small_at(results, knee.target_rps);
        summary.server_small_p99_ratio_at_server_knee =
            ratio_early_to_size_aware(&summary.server_small_p99_at_server_knee_us);
    }
    for system in &results.systems {
        let peak = system
            .points
            .iter()
            .filter(|point| point.valid_repeats > 0)
            .map(|point| point.achieved_rps)
            .fold(0.0, f64::max);
        summary.saturation_rps.insert(system.name.clone(), peak);
    }
    if let (Some(size_aware), Some(early)) = (
        summary.saturation_rps.get("size-aware"),
        summary.saturation_rps.get("early-binding"),
    ) {
        if *early > 0.0 {
            summary.saturation_ratio_size_aware_vs_early = Some(size_aware / early);
        }
    }
    if let (Some(size_aware), Some(stealing)) = (
        summary.saturation_rps.get("size-aware"),
        summary.saturation_rps.get("stealing"),
    ) {
        if *stealing > 0.0 {
            summary.saturation_ratio_size_aware_vs_stealing = Some(size_aware / stealing);
        }
    }
    let achieved = |name: &str| -> Vec<Vec<f64>> {
        system(results, name).map_or_else(Vec::new, |system| {
            system
                .points
                .iter()
                .map(|point| {
                    point
                        .samples
                        .iter()
                        .filter(|sample| sample.failure.is_none())
                        .map(|sample| sample.achieved_rps)
                        .collect()
                })
                .collect()
        })
    };
    let plan = Plan::default();
    summary.saturation_interval_size_aware_vs_early =
        peak_median_ratio(&achieved("size-aware"), &achieved("early-binding"), &plan);
    summary.saturation_interval_size_aware_vs_stealing =
        peak_median_ratio(&achieved("size-aware"), &achieved("stealing"), &plan);
    summary.small_p99_ratios = small_p99_ratios(results, &plan);
    if let Some(lowest) = results.settings.rates.first() {
        if let Some(floor_point) = system(results, FLOOR).and_then(|floor| point_at(floor, *lowest))
        {
            let floor_p99 = floor_point.all_p99_us;
            summary.floor_p99_us = Some(floor_p99);
            if floor_p99 > 0.0 {
                for other in &results.systems {
                    if other.name == FLOOR {
                        continue;
                    }
                    if let Some(point) = point_at(other, *lowest) {
                        summary
                            .small_p99_over_floor_at_lowest_rate
                            .insert(other.name.clone(), point.small_p99_us / floor_p99);
                    }
                }
            }
        }
    }
    summary
}

/// Whether `--min-large` asks for another round: some live system's pooled large requests
/// (the rounds run so far; the first `systems` entries of `pooled` are the servers, the floor
/// is not counted) are still short of it.
fn short_of_large(
    pooled: &[ClassHistograms],
    dead: &[Option<String>],
    systems: usize,
    min_large: Option<u64>,
) -> bool {
    let Some(min_large) = min_large else {
        return false;
    };
    pooled
        .iter()
        .zip(dead)
        .take(systems)
        .any(|(histograms, dead)| dead.is_none() && histograms.get(Class::Large).len() < min_large)
}

/// At every rate, every other system's pooled small p99 over size-aware's, with bootstrap
/// intervals and the large requests behind them (points whose repeats kept histograms).
fn small_p99_ratios(results: &MinosResults, plan: &Plan) -> Vec<PooledRatio> {
    let Some(size_aware) = system(results, "size-aware") else {
        return Vec::new();
    };
    let repeats = |point: &Point, class: &str| {
        Repeats::from_encoded(
            point
                .samples
                .iter()
                .filter(|sample| sample.failure.is_none())
                .filter_map(|sample| sample.histograms.get(class)),
        )
    };
    let mut ratios = Vec::new();
    for rate in &results.settings.rates {
        let Some(base) = point_at(size_aware, *rate) else {
            continue;
        };
        let base_small = repeats(base, "small");
        let base_large = repeats(base, "large");
        for other in &results.systems {
            if other.name == "size-aware" || other.name == FLOOR {
                continue;
            }
            let Some(point) = point_at(other, *rate) else {
                continue;
            };
            let small = repeats(point, "small");
            let large = repeats(point, "large");
            let Some(ratio) = quantile_ratio(&small, &base_small, 0.99, plan) else {
                continue;
            };
            ratios.push(PooledRatio {
                target_rps: *rate,
                system: other.name.clone(),
                small_p99_us: small.pooled_quantile(0.99).unwrap_or(0.0) / 1e3,
                size_aware_small_p99_us: base_small.pooled_quantile(0.99).unwrap_or(0.0) / 1e3,
                ratio,
                large: large.total(),
                large_fewest: large.fewest(),
                size_aware_large: base_large.total(),
                size_aware_large_fewest: base_large.fewest(),
            });
        }
    }
    ratios
}

/// In-server small p99 of each system that reports one, at `rate`.
fn server_small_at(results: &MinosResults, rate: f64) -> BTreeMap<String, f64> {
    results
        .systems
        .iter()
        .filter_map(|system| {
            let p99 = point_at(system, rate)?.server_small_p99_us?;
            Some((system.name.clone(), p99))
        })
        .collect()
}

fn ratio_early_to_size_aware(p99s: &BTreeMap<String, f64>) -> Option<f64> {
    let early = p99s.get("early-binding")?;
    let size_aware = p99s.get("size-aware")?;
    (*size_aware > 0.0).then(|| early / size_aware)
}

fn optional(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "n/a".to_string(), |value| format!("{value:.decimals$}"))
}

/// The markdown table (results.md).
fn markdown(results: &MinosResults) -> String {
    use std::fmt::Write;
    let mut text = String::new();
    let settings = &results.settings;
    let metadata = &results.metadata;
    let _ = writeln!(text, "# minos: results ({})\n", metadata.started_utc);
    if let Some(spec) = &settings.emulate_service {
        let _ = writeln!(
            text,
            "**EMULATED** (experimental testbed): every server's workers sleep for an emulated \
             service time per request, `--emulate-service {spec}`; the latencies are the \
             emulation's, not this machine's service times.\n"
        );
    }
    let _ = writeln!(text, "Command: `{}`\n", metadata.command);
    let load = if metadata.load_average_start.is_empty() {
        "load average not recorded".to_string()
    } else {
        format!(
            "load average {} at the start, {} at the end, highest 1-minute load {:.2}",
            metadata.load_average_start, metadata.load_average_end, metadata.load_average_max
        )
    };
    let cpu_model = if metadata.cpu_model.is_empty() {
        "CPU model not recorded"
    } else {
        metadata.cpu_model.as_str()
    };
    // An older copy of the binary, or one built from a dirty tree, says so.
    let build = if metadata.build.is_empty() || metadata.build == metadata.commit {
        String::new()
    } else {
        format!(", binary built from {}", metadata.build)
    };
    let _ = writeln!(
        text,
        "Commit {}{}{build}; {cpu_model} ({} CPUs); {load}.\n",
        metadata.commit,
        if metadata.dirty { " (dirty tree)" } else { "" },
        metadata.cores,
    );
    let _ = writeln!(
        text,
        "Servers: -t {} -m {}; bench: {} connections, {} I/O thread(s), {} in flight per connection; \
         {} s measured{} + {} s warm-up per point ({} s of unmeasured load on every server first), \
         median of {} repeat(s), systems interleaved; \
         bench CPUs {}, server CPUs {}, nice {}; machine: {} CPUs, steal {:.1}%, {:.0} s wall.\n",
        settings.threads,
        settings.memory_mb,
        settings.connections,
        settings.bench_threads,
        settings.max_in_flight,
        settings.duration_s,
        settings.min_requests.map_or_else(String::new, |requests| format!(
            " (longer where {requests} requests at the point's rate take longer)"
        )) + &settings.min_large.map_or_else(String::new, |large| format!(
            " (rounds added until every system's repeats hold {large} large requests pooled, at most {} rounds)",
            settings.max_repeats.unwrap_or(settings.repeats)
        )),
        settings.warmup_s,
        settings.prime_s,
        settings.repeats,
        cpu_text(&settings.bench_cpus),
        cpu_text(&settings.server_cpus),
        settings
            .nice
            .map_or_else(|| "inherited".to_string(), |nice| nice.to_string()),
        metadata.cores,
        metadata.steal_percent,
        metadata.wall_seconds
    );
    let summary = &results.summary;
    let _ = writeln!(text, "## Summary\n");
    let _ = writeln!(
        text,
        "- early binding's small p99 first exceeds {:.0} µs at: {} rps (early binding {} µs, size-aware {} µs, ratio {})",
        settings.knee_us,
        optional(summary.knee.knee_rate_rps, 0),
        optional(summary.knee.early_binding_small_p99_us, 0),
        optional(summary.knee.size_aware_small_p99_us, 0),
        optional(summary.knee.small_p99_ratio, 2)
    );
    let saturation: Vec<String> = summary
        .saturation_rps
        .iter()
        .map(|(name, rps)| format!("{name} {rps:.0}"))
        .collect();
    let _ = writeln!(
        text,
        "- highest achieved throughput (rps): {}; size-aware / early binding: {}",
        saturation.join(", "),
        optional(summary.saturation_ratio_size_aware_vs_early, 2)
    );
    let _ = writeln!(
        text,
        "- size-aware / stealing: {}; 95 % bootstrap intervals (each point's repeats resampled): size-aware / early binding {}, size-aware / stealing {}",
        optional(summary.saturation_ratio_size_aware_vs_stealing, 2),
        interval_text(summary.saturation_interval_size_aware_vs_early.as_ref()),
        interval_text(summary.saturation_interval_size_aware_vs_stealing.as_ref())
    );
    if summary.knee.knee_rate_rps.is_some()
        && summary.knee.knee_rate_rps == settings.rates.first().copied()
    {
        let _ = writeln!(
            text,
            "- early binding's small p99 is above the knee already at the lowest rate: the sweep does not start below its knee"
        );
    }
    let _ = writeln!(
        text,
        "- noise floor (stub, all-request p99 at the lowest rate): {} µs",
        optional(summary.floor_p99_us, 0)
    );
    let _ = writeln!(
        text,
        "- in-server small p99 (kernel receipt → reply queued) at that knee: {}; early / size-aware: {}",
        p99_list(&summary.server_small_p99_at_knee_us),
        optional(summary.server_small_p99_ratio_at_knee, 1)
    );
    let _ = writeln!(
        text,
        "- early binding's in-server small p99 first exceeds {:.0} µs at: {} rps: {}; early / size-aware: {}\n",
        settings.knee_us,
        optional(summary.server_knee_rate_rps, 0),
        p99_list(&summary.server_small_p99_at_server_knee_us),
        optional(summary.server_small_p99_ratio_at_server_knee, 1)
    );
    let tailtrim_systems: Vec<&SystemResult> = results
        .systems
        .iter()
        .filter(|system| {
            system
                .points
                .iter()
                .any(|point| point.server_small_p99_us.is_some())
        })
        .collect();
    if !tailtrim_systems.is_empty() {
        let _ = writeln!(
            text,
            "## In-server small / large p99 (µs, median over repeats; `stats sizeaware`)\n"
        );
        let mut table = Table::aligned(
            std::iter::once("target rps")
                .chain(tailtrim_systems.iter().map(|system| system.name.as_str())),
            Align::Right,
        );
        for rate in &settings.rates {
            let cells = tailtrim_systems
                .iter()
                .map(|system| match point_at(system, *rate) {
                    Some(point) => format!(
                        "{} / {}",
                        optional(point.server_small_p99_us, 0),
                        optional(point.server_large_p99_us, 0)
                    ),
                    None => "n/a".to_string(),
                });
            table.push(std::iter::once(format!("{rate:.0}")).chain(cells));
        }
        let _ = writeln!(text, "{}", table.render());
    }
    if !summary.small_p99_ratios.is_empty() {
        let _ = writeln!(
            text,
            "## Small p99 over size-aware's, repeats pooled, with 95 % bootstrap intervals\n"
        );
        let _ = writeln!(
            text,
            "Each system's small p99 of its valid repeats pooled (µs), over size-aware's at the same \
             rate; the interval resamples repeats, then requests ({} draws). Large requests behind \
             each side: pooled (fewest in one repeat). Rows with fewer than {ENOUGH_LARGE} large \
             requests on either side, pooled, are marked *few*: their ratio rests on too few events \
             to be read.\n",
            summary.small_p99_ratios[0].ratio.resamples
        );
        let (left, right) = (Align::Left, Align::Right);
        let mut table = Table::new([
            ("target rps", right),
            ("system", left),
            ("small p99", right),
            ("size-aware small p99", right),
            ("ratio", right),
            ("95 % interval", left),
            ("large (fewest)", right),
            ("size-aware large (fewest)", right),
            ("", left),
        ])
        .padding_empty_cells();
        for row in &summary.small_p99_ratios {
            table.push([
                format!("{:.0}", row.target_rps),
                row.system.clone(),
                format!("{:.0}", row.small_p99_us),
                format!("{:.0}", row.size_aware_small_p99_us),
                format!("{:.2}", row.ratio.estimate),
                format!("{:.2}–{:.2}", row.ratio.low, row.ratio.high),
                format!("{} ({})", row.large, row.large_fewest),
                format!("{} ({})", row.size_aware_large, row.size_aware_large_fewest),
                (if row.enough_large() { "" } else { "*few*" }).to_string(),
            ]);
        }
        let _ = writeln!(text, "{}", table.render());
    }
    let _ = writeln!(
        text,
        "## Per rate (medians over repeats; latencies in µs)\n"
    );
    let mut table = Table::new(
        [
            "target rps",
            "system",
            "achieved rps",
            "small p50",
            "small p99",
            "small p99.9",
            "small p99 pooled",
            "large p50",
            "large p99",
            "large p99 pooled",
            "errors",
            "misses",
            "bench cpu %",
        ]
        .into_iter()
        .enumerate()
        .map(|(column, title)| {
            let align = if column == 1 {
                Align::Left
            } else {
                Align::Right
            };
            (title, align)
        }),
    );
    for rate in &settings.rates {
        for system in &results.systems {
            let Some(point) = system.points.iter().find(|point| point.target_rps == *rate) else {
                continue;
            };
            let rate = format!("{rate:.0}");
            if point.valid_repeats == 0 {
                let failed = [rate, system.name.clone(), "failed".to_string()];
                table.push(
                    failed
                        .into_iter()
                        .chain(std::iter::repeat_n(String::new(), 10)),
                );
                continue;
            }
            let large = |value: f64| {
                if point.large_count == 0 {
                    "–".to_string()
                } else {
                    format!("{value:.0}")
                }
            };
            table.push([
                rate,
                system.name.clone(),
                format!("{:.0}", point.achieved_rps),
                format!("{:.0}", point.small_p50_us),
                format!("{:.0}", point.small_p99_us),
                format!("{:.0}", point.small_p999_us),
                format!("{:.0}", point.pooled_small.p99_us),
                large(point.large_p50_us),
                large(point.large_p99_us),
                large(point.pooled_large.p99_us),
                point.errors.to_string(),
                point.misses.to_string(),
                format!("{:.0}", point.bench_cpu_percent),
            ]);
        }
    }
    text.push_str(&table.render());
    text
}

fn interval_text(interval: Option<&Interval>) -> String {
    interval.map_or_else(
        || "n/a".to_string(),
        |interval| {
            format!(
                "{:.2} ({:.2}–{:.2})",
                interval.estimate, interval.low, interval.high
            )
        },
    )
}

fn p99_list(p99s: &BTreeMap<String, f64>) -> String {
    if p99s.is_empty() {
        return "n/a".to_string();
    }
    p99s.iter()
        .map(|(name, p99)| format!("{name} {p99:.0} µs"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn cpu_text(cpus: &[usize]) -> String {
    if cpus.is_empty() {
        "not pinned".to_string()
    } else {
        format!("{cpus:?}")
    }
}

fn plot_latency(results: &MinosResults, out: &Path, class: LatencyClass) -> Result<(), String> {
    let curves: Vec<Curve> = results
        .systems
        .iter()
        .filter(|system| class == LatencyClass::Small || system.name != FLOOR)
        .map(|system| Curve {
            name: if system.name == FLOOR {
                "noise floor (stub, all requests)".to_string()
            } else {
                system.name.clone()
            },
            color: Some(system_color(&system.name)),
            points: system
                .points
                .iter()
                .filter(|point| point.valid_repeats > 0)
                .map(|point| {
                    (
                        point.achieved_rps,
                        class.pick(point.small_p99_us, point.large_p99_us),
                    )
                })
                .collect(),
        })
        .collect();
    let title = match class {
        LatencyClass::Small => "minos: small-request p99 vs achieved throughput",
        LatencyClass::Large => "minos: large-request p99 vs achieved throughput",
    };
    let emulated = if results.settings.emulate_service.is_some() {
        "EMULATED "
    } else {
        ""
    };
    let plot = LatencyThroughput {
        caption: format!(
            "{emulated}{title} (-t {}, {} CPUs, median of {})",
            results.settings.threads, results.metadata.cores, results.settings.repeats
        ),
        y_desc: match class {
            LatencyClass::Small => "small-request p99",
            LatencyClass::Large => "large-request p99",
        }
        .to_string(),
        x_max: results.settings.rates.iter().copied().fold(1.0, f64::max),
        curves,
    };
    plot_latency_vs_throughput(out, class.p99_stem(), &plot)
        .map(|_| ())
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::point_duration;
    use super::{
        check_percentiles, summarize, MinosResults, Point, RunSettings, Sample, SystemResult,
    };
    use super::{system_from_name, Args, Program};
    use clap::Parser;

    #[test]
    fn min_requests_lengthen_only_the_slow_points() {
        use std::time::Duration;
        let four = Duration::from_secs(4);
        assert_eq!(point_duration(four, None, 80.0), four);
        assert_eq!(
            point_duration(four, Some(1_000), 80.0),
            Duration::from_millis(12_500)
        );
        assert_eq!(point_duration(four, Some(1_000), 800.0), four);
        assert_eq!(point_duration(four, Some(1_000), 0.0), four);
        let Ok(cli) = Cli::try_parse_from(["minos", "--min-requests", "1000"]) else {
            panic!("--min-requests is refused");
        };
        assert_eq!(cli.args.min_requests, Some(1_000));
        assert_eq!(cli.args.preload_connections, 4);
        let Ok(cli) = Cli::try_parse_from(["minos", "--preload-connections", "32"]) else {
            panic!("--preload-connections is refused");
        };
        assert_eq!(cli.args.preload_connections, 32);
    }
    use tailtrim_bench::class::ClassHistograms;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn emulation_reaches_every_tailtrim_server_and_refuses_memcached() {
        let cli = Cli::try_parse_from(["minos", "--emulate-service", "packet=500ns,dilation=2000"])
            .expect("parses");
        let error = system_from_name("memcached", &cli.args).unwrap_err();
        assert!(error.contains("cannot emulate"), "{error}");
        let stealing = system_from_name("stealing", &cli.args).expect("known system");
        let Program::Tailtrim { extra } = stealing.program else {
            panic!("stealing runs tailtrim");
        };
        let at = extra.iter().position(|arg| arg == "--emulate-service");
        assert_eq!(
            at.and_then(|i| extra.get(i + 1)).map(String::as_str),
            Some("packet=500ns,dilation=2000")
        );
        let plain = Cli::try_parse_from(["minos"]).expect("parses");
        assert!(system_from_name("memcached", &plain.args).is_ok());
    }

    #[test]
    fn size_aware_help_is_size_aware_dispatch_with_helping_large_workers() {
        let cli = Cli::try_parse_from(["minos", "--small-workers", "1"]).expect("parses");
        let extra = |name: &str| match system_from_name(name, &cli.args).expect(name).program {
            Program::Tailtrim { extra } => extra,
            Program::Memcached => panic!("{name} runs tailtrim"),
        };
        let help = extra("size-aware-help");
        let plain = extra("size-aware");
        assert!(help.windows(2).any(|w| w == ["--dispatch", "size-aware"]));
        assert!(help.windows(2).any(|w| w == ["--small-workers", "1"]));
        assert!(help
            .windows(2)
            .any(|w| w == ["--large-workers-help", "true"]));
        assert!(plain
            .windows(2)
            .any(|w| w == ["--large-workers-help", "false"]));
        assert!(!help.iter().any(|arg| arg == "--size-threshold"));
    }

    fn sample(small_p99: f64, achieved: f64) -> Sample {
        let mut sample = Sample {
            achieved_rps: achieved,
            ..Sample::default()
        };
        sample.small.p99_us = small_p99;
        sample.small.count = 10;
        sample
    }

    fn system(name: &str, curve: &[(f64, f64, f64)]) -> SystemResult {
        SystemResult {
            name: name.to_string(),
            points: curve
                .iter()
                .map(|(rate, p99, achieved)| {
                    Point::from_samples(
                        *rate,
                        vec![sample(*p99, *achieved)],
                        &ClassHistograms::default(),
                    )
                })
                .collect(),
            ..SystemResult::default()
        }
    }

    #[test]
    fn a_file_written_before_the_harness_is_read_and_upgraded() {
        // The top-level metadata of files written before `metadata` existed (trimmed).
        let legacy = r#"{
            "experiment": "minos",
            "command": "tailtrim experiment minos --repeats 9",
            "started_utc": "2026-11-22T15:00:41Z",
            "complete": true,
            "settings": {"systems": ["size-aware"], "rates": [5000.0], "duration_s": 0.5,
                "warmup_s": 0.2, "drain_s": 0.5, "repeats": 9, "seed": 1, "threads": 2,
                "memory_mb": 256, "connections": 32, "bench_threads": 1, "max_in_flight": 16,
                "bench_cpus": [1], "server_cpus": [], "nice": -15, "quick": false, "floor": true},
            "machine": {"cpus": 2, "kernel": "6.18", "memcached_version": "memcached 1.6.18",
                "steal_percent": 1.5, "wall_seconds": 378.5},
            "workload": null,
            "systems": [],
            "summary": {"knee_rate_rps": null, "early_binding_small_p99_us": null,
                "size_aware_small_p99_us": null, "small_p99_ratio": null,
                "small_p99_at_knee_us": {}, "large_p99_at_knee_us": {}, "saturation_rps": {},
                "saturation_ratio_size_aware_vs_early": null, "floor_p99_us": null,
                "small_p99_over_floor_at_lowest_rate": {}}
        }"#;
        let mut results: MinosResults = serde_json::from_str(legacy).expect("old schema reads");
        results.upgrade();
        let metadata = &results.metadata;
        assert_eq!(metadata.command, "tailtrim experiment minos --repeats 9");
        assert_eq!(metadata.started_utc, "2026-11-22T15:00:41Z");
        assert_eq!((metadata.cores, metadata.steal_percent), (2, 1.5));
        assert_eq!(
            metadata.tools.get("memcached").map(String::as_str),
            Some("memcached 1.6.18")
        );
        assert!(metadata.commit.starts_with("unknown"));
        // Written back in the current schema, without the old top-level fields.
        let json = serde_json::to_value(&results).expect("serializes");
        assert!(json.get("machine").is_none() && json.get("command").is_none());
        assert_eq!(json["metadata"]["cores"], 2);
        let again: MinosResults = serde_json::from_value(json).expect("new schema reads");
        assert_eq!(again.metadata, results.metadata);
    }

    #[test]
    fn a_replot_refuses_percentiles_that_are_not_their_histograms() {
        let mut histogram = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
        for nanos in 1..=1_000u64 {
            histogram.record(nanos * 1_000).expect("records");
        }
        let encoded = crate::histogram::Encoded::encode(&histogram).expect("encodes");
        let mut kept = sample(0.0, 100.0);
        kept.small.p50_us = encoded.percentile(50.0, 1e3).expect("p50");
        kept.small.p99_us = encoded.percentile(99.0, 1e3).expect("p99");
        kept.histograms.insert("small".to_string(), encoded);
        let mut results = MinosResults {
            systems: vec![SystemResult {
                name: "size-aware".to_string(),
                points: vec![Point::from_samples(
                    100.0,
                    vec![kept],
                    &ClassHistograms::default(),
                )],
                ..SystemResult::default()
            }],
            ..MinosResults::default()
        };
        assert_eq!(check_percentiles(&results), Ok(1));
        results.systems[0].points[0].samples[0].small.p99_us += 1.0;
        let error = check_percentiles(&results).unwrap_err();
        assert!(error.contains("small p99"), "{error}");
    }

    #[test]
    fn medians_skip_failed_repeats() {
        let failed = Sample {
            failure: Some("server died".into()),
            ..Sample::default()
        };
        let point = Point::from_samples(
            100.0,
            vec![
                sample(50.0, 90.0),
                sample(70.0, 99.0),
                sample(60.0, 95.0),
                failed,
            ],
            &ClassHistograms::default(),
        );
        assert_eq!(point.valid_repeats, 3);
        assert_eq!(point.small_p99_us, 60.0);
        assert_eq!(point.achieved_rps, 95.0);
        assert_eq!(point.small_count, 30);
        assert_eq!(point.samples.len(), 4);
    }

    #[test]
    fn knee_is_the_first_rate_above_one_millisecond() {
        let results = MinosResults {
            settings: RunSettings {
                rates: vec![1000.0, 2000.0, 3000.0],
                ..RunSettings::default()
            },
            systems: vec![
                system(
                    "early-binding",
                    &[
                        (1000.0, 300.0, 1000.0),
                        (2000.0, 1500.0, 1990.0),
                        (3000.0, 9000.0, 2500.0),
                    ],
                ),
                system(
                    "size-aware",
                    &[
                        (1000.0, 200.0, 1000.0),
                        (2000.0, 300.0, 2000.0),
                        (3000.0, 400.0, 2700.0),
                    ],
                ),
                system("floor", &[(1000.0, 0.0, 1000.0)]),
            ],
            ..MinosResults::default()
        };
        let summary = summarize(&results);
        assert_eq!(summary.knee.knee_rate_rps, Some(2000.0));
        // An emulated run's knee latency moves the knee.
        let mut emulated = results.clone();
        emulated.settings.knee_us = 5_000.0;
        assert_eq!(summarize(&emulated).knee.knee_rate_rps, Some(3000.0));
        assert_eq!(summary.knee.early_binding_small_p99_us, Some(1500.0));
        assert_eq!(summary.knee.size_aware_small_p99_us, Some(300.0));
        assert_eq!(summary.knee.small_p99_ratio, Some(5.0));
        assert_eq!(summary.saturation_rps.get("size-aware"), Some(&2700.0));
        assert_eq!(
            summary.saturation_ratio_size_aware_vs_early,
            Some(2700.0 / 2500.0)
        );
    }
}
