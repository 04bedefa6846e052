//! `tailtrim experiment tier`: a whole tailtrim tier against the memcached-like tier it would
//! replace, on one workload: ETC-like value sizes with a heavy tail (0.5 % of the keys hold
//! 100–500 KB), gets of 1 to 100 keys, zipf popularity, a cache-aside database and a server
//! joining half way.
//!
//! ```text
//!  --mode emulated (EMULATED: tailtrim serve --emulate-service S --emulate-network N)
//!    tiers: memcached-like (pinned, batch, cold join), its A/A twin, each mechanism alone
//!           (size-aware; chisel; strict rein-sbf; warm-up preemptive+fallback) and
//!           everything (size-aware, the configured planner, strict order, warm-up)
//!  --mode loopback (real: no emulation, no join — nutcracker has no membership API)
//!    tiers: memcached + nutcracker, its A/A twin, the tailtrim tier memcached-like (pinned,
//!           batch) and with everything on, and the two halves crossed (memcached behind
//!           tailtrim proxy; pinned tailtrim serve behind nutcracker)
//!
//!  for round: for tier in interleaved_order ─► fresh servers (+1 to join), a fresh proxy
//!     bench::run_cache_aside (prefill, unrecorded warm-up, measured window,
//!                             join at half: POST /pool/servers?warmup=cold|preemptive+fallback)
//!     per class HDR histograms (all, small, large, mice, elephant) kept (V2, base64)
//!     CPU: utime+stime of the servers and of the proxy over the window / requests
//!          (kept per process kind: servers, proxy)
//!     misses per window: level before the join (median), peak after it, spike = peak − level
//!  per tier: histograms pooled over rounds ─► p50/p99/p99.9 per class; medians of CPU and spike
//!  verdict against the reading written before the run (issue 33's acceptance lines)
//!  ──> results.json, results.md, tier.{svg,png}
//! ```
//!
//! The "everything" tier's planner is a setting (`--planner`), so a planner chosen by the
//! workload (`auto`) is one name away.
//!
//! Beside every run a hiccup meter (`tier/hiccup.rs`) records the host's scheduling holes and
//! steal time; a round in which a run saw a hole longer than `--disturbed-hole-ms` is *disturbed*:
//! kept and marked, run again up to `--rerun-disturbed` times in all, and the acceptance lines
//! are reported both over every round and without the disturbed ones
//! (`docs/tier-hiccups.md`).

mod hiccup;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tailtrim_bench::cacheaside::parse_duration;
use tailtrim_bench::class::Class;
use tailtrim_bench::dist::Distribution;
use tailtrim_bench::workload::{OpKind, OperationSpec, Popularity};
use tailtrim_bench::{median, WorkloadSpec};
use tailtrim_bench::{run_cache_aside, CacheAsideConfig, CacheAsideReport, ScheduledEvent};

use hiccup::{HiccupMeter, HostReading};

use crate::experiment::{Experiment, Progress, ProgressFn};
use crate::figures::{plot_panels, Line, Panel};
use crate::histogram::{pooled, Encoded};
use crate::meta::{load_average, Recorder, RunMetadata};
use crate::process::{program_version, Launch, Process, ServerShape};
use crate::stats::interleaved_order;
use crate::tables::{Align, Table};

use super::chisel_testbed::process_cpu_seconds;
use super::common::{command, tailtrim_binary, Terminal};

/// The baseline tier of the emulated mode.
const MEMCACHED_LIKE: &str = "memcached-like";
/// The baseline tier of the loopback mode.
const MEMCACHED_NUTCRACKER: &str = "memcached+nutcracker";
/// Suffix of the baseline's second copy (the A/A gauge).
const AA_SUFFIX: &str = "-aa";
/// The tier with every mechanism on.
const EVERYTHING: &str = "everything";
/// The classes reported, in table order.
const CLASSES: [Class; 5] = [
    Class::All,
    Class::Small,
    Class::Large,
    Class::Mice,
    Class::Elephant,
];
/// Default emulated service time: a fixed cost, one per key and one per byte (so a 300 KB
/// value holds a worker about 13 ms, a small get about 1.2 ms).
const DEFAULT_SERVICE: &str = "const=1ms,key=200us,byte=40ns,dist=exp";
/// Default emulated network time of every reply.
const DEFAULT_NETWORK: &str = "const=200us";
/// Default planner of the "everything" tier: the automatic planner, as issue 33 names it.
/// At 16 servers on a quiet host strict Rein-SBF made the tier 1.2-1.3x worse than the
/// memcached-like one (experiments/tier/emulated-16-quiet), `auto` kept it within the
/// baseline's own spread (experiments/tier/emulated-16-auto).
const DEFAULT_PLANNER: &str = "auto";
/// The tailtrim proxy's threads in loopback mode: one event loop, as nutcracker's, so that
/// the two proxies' CPU per request compares the same design at 800 requests/s (a second
/// runtime thread there costs its wake-ups and work stealing, nothing in latency).
const LOOPBACK_PROXY_THREADS: usize = 1;
/// Item memory per server, MB (the workload's data fits: no eviction).
const MEMORY_MB: u64 = 128;
/// Windows of the per-request miss series in a run (about).
const WINDOWS_PER_RUN: u64 = 40;
/// Default `--disturbed-hole-ms`: the longest hole a round may hold and still decide a line.
/// `experiments/tier/loopback-stall/`'s metered runs without a hole over 20 ms had no request
/// over 20 ms; the two with one (43 and 83 ms) stalled.
const DEFAULT_DISTURBED_HOLE_MS: f64 = 20.0;
/// Default `--rerun-disturbed`: one extra round at most (why, `docs/tier-hiccups.md`).
const DEFAULT_RERUN_DISTURBED: usize = 1;

/// Which testbed the tiers run on.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// tailtrim serve with emulated service and network time (EMULATED), a join half way.
    Emulated,
    /// Real loopback, no emulation: memcached + nutcracker beside the tailtrim tier.
    Loopback,
}

/// Arguments of `tailtrim experiment tier`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tailtrim experiment tier --out experiments/tier/emulated\n  \
    tailtrim experiment tier --mode loopback --out experiments/tier/loopback\n\
    Smoke run (seconds):\n  \
    tailtrim experiment tier --quick --out /tmp/tier")]
pub struct Args {
    /// emulated (EMULATED testbed, a join half way) or loopback (real, beside memcached +
    /// nutcracker, no join).
    #[arg(long, value_enum, default_value = "emulated")]
    mode: Mode,
    /// Output directory.
    #[arg(long, default_value = "experiments/tier")]
    out: PathBuf,
    /// Redraw tables and figures from the results kept in --out; run nothing.
    #[arg(long)]
    replot: bool,
    /// A small run for tests: 3 servers × 2 workers, 2 s windows, one round, 2 000 keys.
    #[arg(long)]
    quick: bool,
    /// No progress, no summary.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Comma-separated tiers (default: every tier of the mode).
    #[arg(long)]
    tiers: Option<String>,
    /// Planner of the "everything" tier (a `--planner` name of `tailtrim proxy`).
    #[arg(long, default_value = DEFAULT_PLANNER)]
    planner: String,
    /// Cache servers before the join.
    #[arg(long, default_value_t = 8)]
    servers: usize,
    /// Worker threads per server.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Rounds (every tier once per round, in rotated order).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Offered requests per second (open loop).
    #[arg(short = 'r', long, default_value_t = 800.0)]
    rate: f64,
    /// Measured seconds per run (the join at half).
    #[arg(short = 'd', long, default_value_t = 24.0)]
    duration: f64,
    /// Unrecorded seconds of load before the measured window.
    #[arg(long, default_value_t = 4.0)]
    warmup: f64,
    /// Keys of the small pool (the large pool holds 0.5 % as many, at least 20).
    #[arg(long, default_value_t = 20_000)]
    keys: u64,
    /// The simulated database's time per read or write.
    #[arg(long, default_value = "2ms")]
    db_latency: String,
    /// The servers' `--emulate-service` (emulated mode).
    #[arg(long, default_value = DEFAULT_SERVICE)]
    emulate_service: String,
    /// The servers' `--emulate-network` (emulated mode).
    #[arg(long, default_value = DEFAULT_NETWORK)]
    emulate_network: String,
    /// Bench connections (one request in flight each).
    #[arg(long, default_value_t = 128)]
    clients: usize,
    /// Runtime threads of the tailtrim proxy (`tailtrim proxy -t`). Loopback mode: 1 unless
    /// set, one event loop as nutcracker runs; emulated mode: the proxy's default unless set.
    #[arg(long)]
    proxy_threads: Option<usize>,
    /// Seed of the request sequence (round r uses seed + r; every tier of a round the same).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The hiccup meter records a wake-up of its 1 ms sleeper later than this, ms.
    #[arg(long, default_value_t = 5.0)]
    hole_threshold_ms: f64,
    /// A run with a hole longer than this, ms, disturbs its round.
    #[arg(long, default_value_t = DEFAULT_DISTURBED_HOLE_MS)]
    disturbed_hole_ms: f64,
    /// Rounds run again, in all, because a run of theirs was disturbed (the disturbed round
    /// is kept, marked) [default: 1; with `--quick`, 0].
    #[arg(long)]
    rerun_disturbed: Option<usize>,
}

/// One tier: the servers, the proxy and what happens at the join.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tier {
    /// Name in tables.
    pub name: String,
    /// `tailtrim` or `memcached`.
    pub server: String,
    /// `tailtrim serve --dispatch` (tailtrim servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<String>,
    /// `tailtrim` or `nutcracker`.
    pub proxy: String,
    /// `tailtrim proxy --planner`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner: Option<String>,
    /// `--priority-order` of the proxy (and of late-binding servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_order: Option<String>,
    /// Warm-up mode of the join (`cold`, `preemptive+fallback`); none: no join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_warmup: Option<String>,
    /// `--connection-choice` of a tailtrim proxy (none: its default, `round-robin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_choice: Option<String>,
}

impl Tier {
    fn tailtrim(name: &str, dispatch: &str, planner: &str, join: Option<&str>) -> Self {
        Self {
            name: name.to_string(),
            server: "tailtrim".to_string(),
            dispatch: Some(dispatch.to_string()),
            proxy: "tailtrim".to_string(),
            planner: Some(planner.to_string()),
            priority_order: None,
            join_warmup: join.map(str::to_string),
            connection_choice: None,
        }
    }

    fn strict(mut self) -> Self {
        self.priority_order = Some("strict".to_string());
        self
    }

    /// Round robin over a backend's connections, as twemproxy does (the memcached-like
    /// baseline and the single mechanisms other than the connection choice itself).
    fn round_robin(mut self) -> Self {
        self.connection_choice = Some("round-robin".to_string());
        self
    }

    /// The connection with the fewest requests in flight (the proxy's `least-loaded`).
    fn least_loaded(mut self) -> Self {
        self.connection_choice = Some("least-loaded".to_string());
        self
    }

    /// Round robin, skipping a connection stuck behind a late reply (the proxy's
    /// `avoid-slow`): the everything tier's choice in both modes, which keeps round robin's
    /// batching on loopback and dodges the slow replies of the emulated testbed.
    fn avoid_slow(mut self) -> Self {
        self.connection_choice = Some("avoid-slow".to_string());
        self
    }
}

/// The tiers of `mode`, the "everything" tier running `planner`.
#[must_use]
pub fn tiers(mode: Mode, planner: &str) -> Vec<Tier> {
    let cold = Some("cold");
    let warm = Some("preemptive+fallback");
    match mode {
        Mode::Emulated => vec![
            Tier::tailtrim(MEMCACHED_LIKE, "pinned", "batch", cold).round_robin(),
            Tier::tailtrim(
                &format!("{MEMCACHED_LIKE}{AA_SUFFIX}"),
                "pinned",
                "batch",
                cold,
            )
            .round_robin(),
            Tier::tailtrim("size-aware", "size-aware", "batch", cold).round_robin(),
            Tier::tailtrim("chisel", "pinned", "chisel", cold).round_robin(),
            Tier::tailtrim("rein-sbf", "late-binding", "rein-sbf", cold)
                .strict()
                .round_robin(),
            Tier::tailtrim("warm-up", "pinned", "batch", warm).round_robin(),
            Tier::tailtrim("least-loaded", "pinned", "batch", cold).least_loaded(),
            Tier::tailtrim(EVERYTHING, "size-aware", planner, warm)
                .strict()
                .avoid_slow(),
        ],
        Mode::Loopback => {
            let stock = |name: String| Tier {
                name,
                server: "memcached".to_string(),
                dispatch: None,
                proxy: "nutcracker".to_string(),
                planner: None,
                priority_order: None,
                join_warmup: None,
                connection_choice: None,
            };
            vec![
                stock(MEMCACHED_NUTCRACKER.to_string()),
                stock(format!("{MEMCACHED_NUTCRACKER}{AA_SUFFIX}")),
                Tier::tailtrim(MEMCACHED_LIKE, "pinned", "batch", None),
                Tier::tailtrim(EVERYTHING, "size-aware", planner, None)
                    .strict()
                    .avoid_slow(),
                // One tailtrim half each: which of the two a difference comes from.
                Tier {
                    proxy: "tailtrim".to_string(),
                    planner: Some("batch".to_string()),
                    ..stock("memcached+tailtrim-proxy".to_string())
                },
                Tier {
                    server: "tailtrim".to_string(),
                    dispatch: Some("pinned".to_string()),
                    ..stock("tailtrim+nutcracker".to_string())
                },
            ]
        }
    }
}

/// What a run was asked to do (kept in results.json).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Settings {
    mode: Mode,
    servers: usize,
    workers: usize,
    rounds: usize,
    rate: f64,
    duration_s: f64,
    warmup_s: f64,
    keys: u64,
    large_keys: u64,
    db_latency: String,
    /// The servers' emulation (emulated mode; empty in loopback).
    emulate_service: String,
    emulate_network: String,
    clients: usize,
    /// `tailtrim proxy -t` (absent: the proxy's default, 2; so in runs kept before it was
    /// set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    proxy_threads: Option<usize>,
    seed: u64,
    large_threshold_bytes: u64,
    elephant_min_keys: u32,
    tiers: Vec<Tier>,
    /// The hiccup meter's thresholds and the rerun protocol (absent in runs kept before the
    /// meter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    meter: Option<MeterSettings>,
}

/// The hiccup meter's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct MeterSettings {
    /// Wake-ups of the 1 ms sleeper later than this are recorded as holes, ms.
    hole_threshold_ms: f64,
    /// A run with a hole longer than this disturbs its round, ms.
    disturbed_hole_ms: f64,
    /// Rounds run again in all because they were disturbed.
    rerun_disturbed: usize,
    /// A slow request: latency over its run's p99 by this, ms.
    slow_over_p99_ms: f64,
}

/// One measured run of one tier.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Run {
    tier: String,
    round: usize,
    /// 0, or the how-manieth rerun of a disturbed round.
    #[serde(default, skip_serializing_if = "is_zero")]
    attempt: usize,
    position: usize,
    load_average_before: String,
    requests: u64,
    achieved_rps: f64,
    hit_ratio: f64,
    errors: u64,
    wrong_values: u64,
    stale_values: u64,
    /// CPU seconds (user + system) of the servers and the proxy over the measured window.
    cpu_seconds: f64,
    cpu_us_per_request: f64,
    /// The same CPU split by process: the servers' and the proxy's (absent in runs kept
    /// before the split was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpu_split: Option<CpuSplit>,
    /// When the join was sent and answered (seconds into the window), its HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    join: Option<(f64, f64, u16)>,
    /// Median miss ratio of the windows before the join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    miss_ratio_before: Option<f64>,
    /// Highest window miss ratio from the join on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    miss_ratio_peak: Option<f64>,
    /// `(seconds into the window, miss ratio)` per window.
    miss_series: MissSeries,
    /// Latency per class (`all`, `small`, `large`, `mice`, `elephant`), ns.
    histograms: BTreeMap<String, Encoded>,
    /// The host's holes and steal over the run (absent in runs kept before the meter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host: Option<HostReading>,
    /// A hole longer than `--disturbed-hole-ms` fell in the run: its round is disturbed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    disturbed: bool,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(value: &usize) -> bool {
    *value == 0
}

/// CPU seconds of a run's window (or µs per request of a tier) by process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
struct CpuSplit {
    /// Every cache server together (the joining one too).
    servers: f64,
    /// The proxy.
    proxy: f64,
}

impl CpuSplit {
    fn per_request(self, requests: u64) -> CpuSplit {
        let requests = requests.max(1) as f64;
        CpuSplit {
            servers: self.servers * 1e6 / requests,
            proxy: self.proxy * 1e6 / requests,
        }
    }
}

/// p50, p99 and p99.9 of a class, µs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Percentiles {
    requests: u64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
}

/// A tier over the rounds.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct TierSummary {
    tier: String,
    /// Per class, pooled over rounds.
    classes: BTreeMap<String, Percentiles>,
    /// Median over rounds.
    cpu_us_per_request: f64,
    /// Median over rounds of the servers' and of the proxy's CPU per request, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpu_us_per_request_split: Option<CpuSplit>,
    /// Median over rounds of (peak − level) of the miss ratio at the join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    miss_spike: Option<f64>,
    /// Median over rounds of the peak miss ratio after the join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    miss_peak: Option<f64>,
    errors: u64,
    wrong_or_stale_values: u64,
    achieved_rps: f64,
}

/// One acceptance line: a measured ratio against its bound.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Verdict {
    line: String,
    value: Option<f64>,
    bound: f64,
    met: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Metadata {
    #[serde(flatten)]
    run: RunMetadata,
    note: String,
}

/// What `tailtrim experiment tier` keeps (`results.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    experiment: String,
    metadata: Metadata,
    settings: Settings,
    runs: Vec<Run>,
    tiers: Vec<TierSummary>,
    /// |p99(baseline A/A) / p99(baseline) − 1|, every request.
    aa_gauge: Option<f64>,
    /// The same gauge per class (`all`, `small`, …): a class's ratio to the baseline is read
    /// against its own class's gauge (empty in results kept before it was recorded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    aa_gauge_by_class: BTreeMap<String, f64>,
    verdict: Vec<Verdict>,
    /// CPU per request's own A/A gauge and the per-round ratios (loopback; absent in results
    /// kept before it was recorded, and derived from their runs when redrawn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpu_reading: Option<CpuReading>,
    /// The hiccup meter's priority: `real-time (SCHED_FIFO 50)` or `normal (…)` (absent in
    /// results kept before the meter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    meter_priority: Option<String>,
    /// The same reading without the disturbed rounds (absent in results kept before the
    /// meter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    undisturbed: Option<Undisturbed>,
}

/// The reading of the rounds no hole disturbed: what decides a line.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Undisturbed {
    /// `(round, attempt)` of every round left out.
    disturbed_rounds: Vec<(usize, usize)>,
    tiers: Vec<TierSummary>,
    aa_gauge: Option<f64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    aa_gauge_by_class: BTreeMap<String, f64>,
    verdict: Vec<Verdict>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpu_reading: Option<CpuReading>,
}

/// `(round, attempt)` of every round in which a run was disturbed.
fn disturbed_rounds(runs: &[Run]) -> Vec<(usize, usize)> {
    let mut rounds: Vec<(usize, usize)> = runs
        .iter()
        .filter(|run| run.disturbed)
        .map(|run| (run.round, run.attempt))
        .collect();
    rounds.sort_unstable();
    rounds.dedup();
    rounds
}

/// The summaries, gauges and verdict of `runs`.
struct Reading {
    tiers: Vec<TierSummary>,
    aa_gauge: Option<f64>,
    aa_gauge_by_class: BTreeMap<String, f64>,
    verdict: Vec<Verdict>,
    cpu_reading: Option<CpuReading>,
}

fn reading(mode: Mode, tiers: &[Tier], runs: &[&Run]) -> Reading {
    let summaries = summarise_tiers(tiers, runs);
    let (aa_gauge, verdict) = verdict(mode, &summaries);
    Reading {
        aa_gauge_by_class: aa_gauge_by_class(mode, &summaries),
        cpu_reading: match mode {
            Mode::Loopback => cpu_reading(
                mode,
                runs.iter().map(|run| {
                    (
                        run.tier.as_str(),
                        (run.round, run.attempt),
                        run.cpu_us_per_request,
                    )
                }),
            ),
            Mode::Emulated => None,
        },
        tiers: summaries,
        aa_gauge,
        verdict,
    }
}

/// The reading without the rounds in which a run was disturbed.
fn undisturbed(mode: Mode, tiers: &[Tier], runs: &[Run]) -> Undisturbed {
    let left_out = disturbed_rounds(runs);
    let kept: Vec<&Run> = runs
        .iter()
        .filter(|run| !left_out.contains(&(run.round, run.attempt)))
        .collect();
    let reading = reading(mode, tiers, &kept);
    Undisturbed {
        disturbed_rounds: left_out,
        tiers: reading.tiers,
        aa_gauge: reading.aa_gauge,
        aa_gauge_by_class: reading.aa_gauge_by_class,
        verdict: reading.verdict,
        cpu_reading: reading.cpu_reading,
    }
}

/// How far the CPU line can be read (loopback): the A/A gauge of CPU per request and
/// `everything`'s CPU over the baseline's round by round. Derived from the runs (results kept
/// before it was recorded get it when redrawn).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuReading {
    /// |CPU per request of the baseline's A/A copy / the baseline's − 1|, on the medians over
    /// rounds: the run's own CPU noise, against which the CPU line's margin is read.
    pub aa_gauge: Option<f64>,
    /// `everything`'s CPU per request over the baseline's in the same round, by round.
    pub everything_over_baseline_by_round: Vec<f64>,
    /// The median of those ratios.
    pub everything_over_baseline_median: Option<f64>,
}

/// The [`CpuReading`] of `runs` (`(tier, round, CPU µs per request)`, a round named by any
/// key), `None` where the mode's baseline or `everything` did not run.
fn cpu_reading<'a, R: PartialEq + Copy>(
    mode: Mode,
    runs: impl Iterator<Item = (&'a str, R, f64)> + Clone,
) -> Option<CpuReading> {
    let baseline = match mode {
        Mode::Emulated => MEMCACHED_LIKE,
        Mode::Loopback => MEMCACHED_NUTCRACKER,
    };
    let twin = format!("{baseline}{AA_SUFFIX}");
    let of = |tier: &str| -> Vec<(R, f64)> {
        runs.clone()
            .filter(|(name, _, _)| *name == tier)
            .map(|(_, round, cpu)| (round, cpu))
            .collect()
    };
    let (base, copy, every) = (of(baseline), of(&twin), of(EVERYTHING));
    if base.is_empty() || every.is_empty() {
        return None;
    }
    let median_cpu = |runs: &[(R, f64)]| median_of(runs.iter().map(|(_, cpu)| *cpu));
    let aa_gauge = (!copy.is_empty())
        .then(|| ratio(Some(median_cpu(&copy)), Some(median_cpu(&base))))
        .flatten()
        .map(|ratio| (ratio - 1.0).abs());
    let by_round: Vec<f64> = every
        .iter()
        .filter_map(|(round, cpu)| {
            let (_, base_cpu) = base.iter().find(|(other, _)| other == round)?;
            ratio(Some(*cpu), Some(*base_cpu))
        })
        .collect();
    let median_ratio = (!by_round.is_empty()).then(|| median_of(by_round.iter().copied()));
    Some(CpuReading {
        aa_gauge,
        everything_over_baseline_by_round: by_round,
        everything_over_baseline_median: median_ratio,
    })
}

impl Results {
    /// The CPU reading kept, or derived from the runs for results kept before it was.
    fn cpu_reading(&self) -> Option<CpuReading> {
        if self.settings.mode != Mode::Loopback {
            return None;
        }
        self.cpu_reading.clone().or_else(|| {
            cpu_reading(
                self.settings.mode,
                self.runs.iter().map(|run| {
                    (
                        run.tier.as_str(),
                        (run.round, run.attempt),
                        run.cpu_us_per_request,
                    )
                }),
            )
        })
    }
}

/// `A/A gauge of CPU per request …` for people, or nothing.
fn cpu_reading_text(reading: Option<&CpuReading>) -> Option<String> {
    let reading = reading?;
    let rounds: Vec<String> = reading
        .everything_over_baseline_by_round
        .iter()
        .map(|ratio| format!("{ratio:.3}"))
        .collect();
    Some(format!(
        "CPU per request: A/A gauge {}; everything over the baseline by round {} (median {})",
        reading
            .aa_gauge
            .map_or("—".to_string(), |gauge| format!("{gauge:.3}")),
        rounds.join(", "),
        reading
            .everything_over_baseline_median
            .map_or("—".to_string(), |median| format!("{median:.3}")),
    ))
}

/// The experiment with its settings.
struct TierExperiment {
    settings: Settings,
}

fn settings_of(args: &Args) -> Result<Settings, String> {
    let mut settings = Settings {
        mode: args.mode,
        servers: args.servers,
        workers: args.workers,
        rounds: args.rounds,
        rate: args.rate,
        duration_s: args.duration,
        warmup_s: args.warmup,
        keys: args.keys,
        large_keys: 0,
        db_latency: args.db_latency.clone(),
        emulate_service: args.emulate_service.clone(),
        emulate_network: args.emulate_network.clone(),
        clients: args.clients,
        proxy_threads: args
            .proxy_threads
            .or((args.mode == Mode::Loopback).then_some(LOOPBACK_PROXY_THREADS)),
        seed: args.seed,
        large_threshold_bytes: 0,
        elephant_min_keys: 0,
        tiers: tiers(args.mode, &args.planner),
        meter: Some(MeterSettings {
            hole_threshold_ms: args.hole_threshold_ms,
            disturbed_hole_ms: args.disturbed_hole_ms,
            rerun_disturbed: args.rerun_disturbed.unwrap_or(if args.quick {
                0
            } else {
                DEFAULT_RERUN_DISTURBED
            }),
            slow_over_p99_ms: hiccup::SLOW_OVER_P99.as_secs_f64() * 1e3,
        }),
    };
    if !(args.hole_threshold_ms > 0.0 && args.disturbed_hole_ms >= args.hole_threshold_ms) {
        return Err(
            "--hole-threshold-ms must be positive and at most --disturbed-hole-ms".to_string(),
        );
    }
    if args.quick {
        settings.servers = 3;
        settings.workers = 2;
        settings.rounds = 1;
        settings.rate = 300.0;
        settings.duration_s = 2.0;
        settings.warmup_s = 0.5;
        settings.keys = 2_000;
        settings.clients = 32;
    }
    if args.mode == Mode::Loopback {
        settings.emulate_service.clear();
        settings.emulate_network.clear();
    }
    if let Some(selected) = &args.tiers {
        let names: Vec<&str> = selected.split(',').map(str::trim).collect();
        if let Some(unknown) = names
            .iter()
            .find(|name| !settings.tiers.iter().any(|tier| tier.name == **name))
        {
            return Err(format!("unknown tier {unknown:?} for this mode"));
        }
        settings
            .tiers
            .retain(|tier| names.contains(&tier.name.as_str()));
    }
    settings.large_keys = (settings.keys / 200).max(20);
    let workload = workload(&settings);
    settings.large_threshold_bytes = workload.large_threshold_bytes;
    settings.elephant_min_keys = workload.elephant_min_keys;
    if settings.servers == 0 || settings.rounds == 0 || settings.tiers.is_empty() {
        return Err("servers, rounds and tiers must not be empty".to_string());
    }
    Ok(settings)
}

/// The workload: the `minos` preset's two zipf pools (ETC sizes up to 1.5 KB; 0.5 % of the
/// keys drawn from a pool of 100–500 KB values), gets of 1 to 100 keys and 5 % sets.
fn workload(settings: &Settings) -> Arc<WorkloadSpec> {
    let mut spec = WorkloadSpec::preset("minos")
        .unwrap_or_else(|error| panic!("the built-in minos preset: {error}"));
    spec.name = "tier".to_string();
    spec.pools[0].keys = settings.keys;
    if let Some(large) = spec.pools.get_mut(1) {
        large.keys = settings.large_keys;
        large.value_size = Distribution::Uniform {
            min: 100_000.0,
            max: 500_000.0,
        };
    }
    let get = |keys: u32, weight: f64| OperationSpec {
        kind: OpKind::Get,
        keys,
        weight,
    };
    spec.operations = vec![
        get(1, 55.0),
        get(2, 10.0),
        get(5, 10.0),
        get(10, 8.0),
        get(20, 5.0),
        get(50, 1.0),
        get(100, 1.0),
        OperationSpec {
            kind: OpKind::Set,
            keys: 1,
            weight: 5.0,
        },
    ];
    for pool in &mut spec.pools {
        pool.popularity = Popularity::Zipf { exponent: 0.99 };
    }
    Arc::new(spec)
}

/// CPU seconds so far of the servers (`server_pids`) and of the proxy.
fn cpu_of(server_pids: &[u32], proxy_pid: u32) -> CpuSplit {
    CpuSplit {
        servers: server_pids
            .iter()
            .map(|&pid| process_cpu_seconds(pid))
            .sum(),
        proxy: process_cpu_seconds(proxy_pid),
    }
}

fn seconds(value: f64, what: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value).map_err(|_| format!("{what} must be a positive number"))
}

fn server_launch(
    tier: &Tier,
    settings: &Settings,
    index: usize,
    binary: &Path,
) -> Result<Launch, String> {
    let shape = ServerShape {
        threads: settings.workers,
        memory_mb: MEMORY_MB,
    };
    let name = format!("{}-server{index}", tier.name);
    if tier.server == "memcached" {
        return Ok(Launch::memcached(&name, &shape, &[])?);
    }
    let mut extra = Vec::new();
    if let Some(dispatch) = &tier.dispatch {
        extra.extend(["--dispatch".to_string(), dispatch.clone()]);
    }
    if let (Some(order), Some("late-binding")) = (&tier.priority_order, tier.dispatch.as_deref()) {
        extra.extend(["--priority-order".to_string(), order.clone()]);
    }
    if !settings.emulate_service.is_empty() {
        extra.extend([
            "--emulate-service".to_string(),
            settings.emulate_service.clone(),
        ]);
    }
    if !settings.emulate_network.is_empty() {
        extra.extend([
            "--emulate-network".to_string(),
            settings.emulate_network.clone(),
        ]);
    }
    Ok(Launch::tailtrim_serve(&name, binary, &shape, &extra)?)
}

fn proxy_launch(
    tier: &Tier,
    settings: &Settings,
    backends: &[String],
    binary: &Path,
) -> Result<Launch, String> {
    let name = format!("{}-proxy", tier.name);
    let connections = settings.workers.to_string();
    if tier.proxy == "nutcracker" {
        let options = [
            "  timeout: 20000".to_string(),
            format!("  server_connections: {connections}"),
        ];
        return Ok(Launch::nutcracker(&name, backends, &options)?);
    }
    let mut extra: Vec<String> = [
        "--timeout-ms",
        "20000",
        "--server-failure-limit",
        "1000000000",
        "--server-connections",
        &connections,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(planner) = &tier.planner {
        extra.extend(["--planner".to_string(), planner.clone()]);
    }
    if let Some(order) = &tier.priority_order {
        extra.extend(["--priority-order".to_string(), order.clone()]);
    }
    if let Some(choice) = &tier.connection_choice {
        extra.extend(["--connection-choice".to_string(), choice.clone()]);
    }
    if let Some(threads) = settings.proxy_threads {
        extra.extend(["-t".to_string(), threads.to_string()]);
    }
    let admin = tier.join_warmup.is_some();
    Ok(Launch::tailtrim_proxy(
        &name, binary, backends, admin, &extra,
    )?)
}

/// `(seconds into the window, miss ratio)` of every window of a run.
type MissSeries = Vec<(f64, f64)>;

/// The miss ratio of every window, and the level before / peak after `join_s`.
fn misses(report: &CacheAsideReport, join_s: Option<f64>) -> (MissSeries, Option<(f64, f64)>) {
    let series: MissSeries = report
        .per_request
        .iter()
        .map(|window| (window.time_s, 1.0 - window.hit_ratio))
        .collect();
    let Some(join_s) = join_s else {
        return (series, None);
    };
    let before: Vec<f64> = series
        .iter()
        .filter(|(time, _)| *time < join_s)
        .map(|(_, ratio)| *ratio)
        .collect();
    let peak = series
        .iter()
        .filter(|(time, _)| *time >= join_s)
        .map(|(_, ratio)| *ratio)
        .fold(None, |best: Option<f64>, ratio| {
            Some(best.map_or(ratio, |best| best.max(ratio)))
        });
    let level = (!before.is_empty()).then(|| median(&before));
    (series, level.zip(peak))
}

/// Where a run stands in the experiment: its round, the round's attempt and its place in it.
#[derive(Clone, Copy, Debug)]
struct Slot {
    round: usize,
    attempt: usize,
    position: usize,
}

fn run_tier(
    tier: &Tier,
    settings: &Settings,
    workload: &Arc<WorkloadSpec>,
    slot: Slot,
    meter: Option<&HiccupMeter>,
) -> Result<Run, String> {
    let Slot {
        round,
        attempt,
        position,
    } = slot;
    let load_average_before = load_average();
    let binary = tailtrim_binary()?;
    let joins = tier.join_warmup.is_some();
    let mut servers = Vec::new();
    for index in 0..settings.servers + usize::from(joins) {
        servers.push(Process::start(server_launch(
            tier, settings, index, &binary,
        )?)?);
    }
    let addresses: Vec<String> = servers.iter().map(Process::address).collect();
    let mut proxy = Process::start(proxy_launch(
        tier,
        settings,
        &addresses[..settings.servers],
        &binary,
    )?)?;
    let duration = seconds(settings.duration_s, "--duration")?;
    let mut config = CacheAsideConfig::new(&proxy.address(), settings.rate, duration);
    config.warmup = seconds(settings.warmup_s, "--warmup")?;
    config.db_latency = parse_duration(&settings.db_latency).map_err(|error| error.to_string())?;
    config.workers = settings.clients;
    config.seed = settings.seed + round as u64;
    config.prefill = true;
    let expected = (settings.rate * settings.duration_s) as u64;
    config.window_requests = (expected / WINDOWS_PER_RUN).max(20) as usize;
    if let Some(mode) = &tier.join_warmup {
        config.admin = proxy.admin_address();
        config.events.push(ScheduledEvent {
            at: duration / 2,
            action: "add".to_string(),
            server: addresses[settings.servers].clone(),
            params: vec![("warmup".to_string(), mode.clone())],
        });
    }
    let server_pids: Vec<u32> = servers.iter().map(Process::pid).collect();
    let proxy_pid = proxy.pid();
    let window_starts = config.warmup + Duration::from_millis(20);
    let mut cpu_at_window: Option<CpuSplit> = None;
    let mut steal_at_window: Option<f64> = None;
    let report = run_cache_aside(workload, &config, &mut |elapsed, _| {
        if cpu_at_window.is_none() && elapsed >= window_starts {
            cpu_at_window = Some(cpu_of(&server_pids, proxy_pid));
            steal_at_window = hiccup::steal_ms();
        }
    })
    .map_err(|error| format!("tier {}: {error}", tier.name))?;
    let cpu_at_end = cpu_of(&server_pids, proxy_pid);
    let steal = steal_at_window
        .zip(hiccup::steal_ms())
        .map(|(before, after)| (after - before).max(0.0));
    let host = meter.zip(report.window_start).map(|(meter, start)| {
        let span_ns = report
            .request_times
            .iter()
            .map(|request| request.scheduled_ns + request.latency_ns)
            .max()
            .unwrap_or(0);
        let holes = meter.holes_between(start, start + Duration::from_nanos(span_ns));
        let p99_ns = report
            .latency_ns
            .as_ref()
            .filter(|histogram| !histogram.is_empty())
            .map_or(0, |histogram| histogram.value_at_quantile(0.99));
        HostReading::of(&holes, steal, &report.request_times, p99_ns)
    });
    let disturbed = match (&host, &settings.meter) {
        (Some(host), Some(meter)) => host.longest_hole_ms > meter.disturbed_hole_ms,
        _ => false,
    };
    let cpu_at_window = cpu_at_window.unwrap_or_default();
    let cpu_split = CpuSplit {
        servers: (cpu_at_end.servers - cpu_at_window.servers).max(0.0),
        proxy: (cpu_at_end.proxy - cpu_at_window.proxy).max(0.0),
    };
    let cpu_seconds = cpu_split.servers + cpu_split.proxy;
    for server in &mut servers {
        server.check_alive()?;
    }
    proxy.check_alive()?;
    let join = report
        .events
        .first()
        .map(|event| (event.sent_s, event.answered_s, event.status));
    let (miss_series, miss_levels) = misses(&report, join.map(|(sent, _, _)| sent));
    let mut histograms = BTreeMap::new();
    if let Some(classes) = &report.class_latency_ns {
        for class in CLASSES {
            histograms.insert(
                class.name().to_string(),
                Encoded::encode(classes.get(class))?,
            );
        }
    }
    Ok(Run {
        tier: tier.name.clone(),
        round,
        attempt,
        position,
        load_average_before,
        requests: report.requests,
        achieved_rps: report.achieved_rps,
        hit_ratio: report.hit_ratio,
        errors: report.errors,
        wrong_values: report.wrong_values,
        stale_values: report.stale_values,
        cpu_seconds,
        cpu_us_per_request: cpu_seconds * 1e6 / report.requests.max(1) as f64,
        cpu_split: Some(cpu_split),
        join,
        miss_ratio_before: miss_levels.map(|(level, _)| level),
        miss_ratio_peak: miss_levels.map(|(_, peak)| peak),
        miss_series,
        histograms,
        host,
        disturbed,
    })
}

/// p50/p99/p99.9 of the runs' histograms of `class`, pooled.
fn pooled_percentiles(runs: &[&Run], class: &str) -> Percentiles {
    let Some(histogram) = pooled(runs.iter().filter_map(|run| run.histograms.get(class))) else {
        return Percentiles::default();
    };
    if histogram.is_empty() {
        return Percentiles::default();
    }
    let at = |quantile: f64| histogram.value_at_quantile(quantile) as f64 / 1e3;
    Percentiles {
        requests: histogram.len(),
        p50_us: at(0.5),
        p99_us: at(0.99),
        p999_us: at(0.999),
    }
}

fn median_of(values: impl Iterator<Item = f64>) -> f64 {
    let values: Vec<f64> = values.collect();
    median(&values)
}

fn summarise_tiers(tiers: &[Tier], runs: &[&Run]) -> Vec<TierSummary> {
    tiers
        .iter()
        .map(|tier| {
            let own: Vec<&Run> = runs
                .iter()
                .copied()
                .filter(|run| run.tier == tier.name)
                .collect();
            let spikes: Vec<f64> = own
                .iter()
                .filter_map(|run| Some(run.miss_ratio_peak? - run.miss_ratio_before?))
                .collect();
            let peaks: Vec<f64> = own.iter().filter_map(|run| run.miss_ratio_peak).collect();
            TierSummary {
                tier: tier.name.clone(),
                classes: CLASSES
                    .iter()
                    .map(|class| {
                        (
                            class.name().to_string(),
                            pooled_percentiles(&own, class.name()),
                        )
                    })
                    .collect(),
                cpu_us_per_request: median_of(own.iter().map(|run| run.cpu_us_per_request)),
                cpu_us_per_request_split: split_per_request(&own),
                miss_spike: (!spikes.is_empty()).then(|| median(&spikes)),
                miss_peak: (!peaks.is_empty()).then(|| median(&peaks)),
                errors: own.iter().map(|run| run.errors).sum(),
                wrong_or_stale_values: own
                    .iter()
                    .map(|run| run.wrong_values + run.stale_values)
                    .sum(),
                achieved_rps: median_of(own.iter().map(|run| run.achieved_rps)),
            }
        })
        .collect()
}

/// Medians over `runs` of the servers' and the proxy's CPU per request (none unless every
/// run recorded its split).
fn split_per_request(runs: &[&Run]) -> Option<CpuSplit> {
    let splits: Vec<CpuSplit> = runs
        .iter()
        .map(|run| Some(run.cpu_split?.per_request(run.requests)))
        .collect::<Option<_>>()?;
    (!splits.is_empty()).then(|| CpuSplit {
        servers: median_of(splits.iter().map(|split| split.servers)),
        proxy: median_of(splits.iter().map(|split| split.proxy)),
    })
}

fn p99(summary: &TierSummary, class: &str) -> Option<f64> {
    summary
        .classes
        .get(class)
        .filter(|percentiles| percentiles.requests > 0)
        .map(|percentiles| percentiles.p99_us)
}

fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(numerator), Some(denominator)) if denominator > 0.0 => Some(numerator / denominator),
        _ => None,
    }
}

fn verdict_line(line: &str, value: Option<f64>, bound: f64) -> Verdict {
    Verdict {
        line: line.to_string(),
        value,
        bound,
        met: value.is_some_and(|value| value <= bound),
    }
}

/// The baseline tier's summary and its A/A copy's, where both ran.
fn baseline_and_twin(
    mode: Mode,
    summaries: &[TierSummary],
) -> (Option<&TierSummary>, Option<&TierSummary>) {
    let baseline_name = match mode {
        Mode::Emulated => MEMCACHED_LIKE,
        Mode::Loopback => MEMCACHED_NUTCRACKER,
    };
    let find = |name: &str| summaries.iter().find(|summary| summary.tier == name);
    (
        find(baseline_name),
        find(&format!("{baseline_name}{AA_SUFFIX}")),
    )
}

/// |p99(baseline A/A) / p99(baseline) − 1| for every class both copies saw.
fn aa_gauge_by_class(mode: Mode, summaries: &[TierSummary]) -> BTreeMap<String, f64> {
    let (Some(baseline), Some(twin)) = baseline_and_twin(mode, summaries) else {
        return BTreeMap::new();
    };
    CLASSES
        .iter()
        .filter_map(|class| {
            let gauge = ratio(p99(twin, class.name()), p99(baseline, class.name()))?;
            Some((class.name().to_string(), (gauge - 1.0).abs()))
        })
        .collect()
}

/// The A/A gauge and the acceptance lines (issue 33) from the tiers' summaries.
fn verdict(mode: Mode, summaries: &[TierSummary]) -> (Option<f64>, Vec<Verdict>) {
    let baseline_name = match mode {
        Mode::Emulated => MEMCACHED_LIKE,
        Mode::Loopback => MEMCACHED_NUTCRACKER,
    };
    let (baseline, twin) = baseline_and_twin(mode, summaries);
    let everything = summaries.iter().find(|summary| summary.tier == EVERYTHING);
    let aa_gauge = ratio(
        twin.and_then(|twin| p99(twin, "all")),
        baseline.and_then(|baseline| p99(baseline, "all")),
    )
    .map(|ratio| (ratio - 1.0).abs());
    let class_ratio = |class: &str| {
        ratio(
            everything.and_then(|summary| p99(summary, class)),
            baseline.and_then(|summary| p99(summary, class)),
        )
    };
    let ratio_of = |value: fn(&TierSummary) -> Option<f64>| {
        ratio(everything.and_then(value), baseline.and_then(value))
    };
    let mut bounds: Vec<(String, Option<f64>, f64)> = Vec::new();
    match mode {
        Mode::Emulated => {
            for (class, bound) in [("small", 0.2), ("mice", 0.5), ("elephant", 1.1)] {
                bounds.push((format!("{class} p99 ≤ {bound}x"), class_ratio(class), bound));
            }
            bounds.push(("overall p99 ≤ 0.7x".to_string(), class_ratio("all"), 0.7));
            bounds.push((
                "miss spike (peak − level) ≤ 0.3x".to_string(),
                ratio_of(|summary| summary.miss_spike),
                0.3,
            ));
        }
        Mode::Loopback => {
            for class in CLASSES {
                let name = class.name();
                bounds.push((format!("{name} p99 ≤ 1.05x"), class_ratio(name), 1.05));
            }
            bounds.push((
                "CPU per request ≤ 1.1x".to_string(),
                ratio_of(|summary| Some(summary.cpu_us_per_request)),
                1.1,
            ));
        }
    }
    let mut lines: Vec<Verdict> = bounds
        .into_iter()
        .map(|(line, value, bound)| verdict_line(&line, value, bound))
        .collect();
    if mode == Mode::Emulated {
        let best_single = summaries
            .iter()
            .filter(|summary| {
                summary.tier != EVERYTHING && !summary.tier.starts_with(baseline_name)
            })
            .filter_map(|summary| p99(summary, "all"))
            .fold(None, |best: Option<f64>, p99| {
                Some(best.map_or(p99, |best| best.min(p99)))
            });
        let beats = ratio(
            everything.and_then(|summary| p99(summary, "all")),
            best_single,
        );
        let mut line = verdict_line("overall p99 < best single mechanism's", beats, 1.0);
        line.met = beats.is_some_and(|value| value < 1.0);
        lines.push(line);
    }
    lines.push(verdict_line("A/A gauge ≤ 10 %", aa_gauge, 0.10));
    (aa_gauge, lines)
}

const EMULATED_NOTE: &str = "EMULATED: real tailtrim serve processes whose workers sleep for an \
    emulated service time and whose replies wait for an emulated network time, behind a real \
    tailtrim proxy, on one shared host; the bench and a simulated database in the same host.";
const LOOPBACK_NOTE: &str = "REAL loopback: Debian's memcached behind nutcracker beside tailtrim \
    serve behind tailtrim proxy, no emulation, on one shared host (2 cores); no join \
    (nutcracker has no membership API).";

impl Experiment for TierExperiment {
    type Results = Results;

    fn run(&self, progress: ProgressFn<'_>) -> Result<Results, String> {
        let settings = &self.settings;
        let workload = workload(settings);
        let mut recorder = Recorder::start();
        if settings.tiers.iter().any(|tier| tier.server == "memcached") {
            recorder.tool("memcached", program_version("memcached"));
            recorder.tool("nutcracker", program_version("nutcracker"));
        }
        let meter = match &settings.meter {
            Some(meter) => Some(HiccupMeter::start(Duration::from_secs_f64(
                meter.hole_threshold_ms / 1e3,
            ))?),
            None => None,
        };
        let mut reruns_left = settings.meter.as_ref().map_or(0, |m| m.rerun_disturbed);
        let mut total = (settings.rounds * settings.tiers.len()) as u64;
        let mut runs: Vec<Run> = Vec::new();
        for round in 0..settings.rounds {
            for attempt in 0.. {
                let first = runs.len();
                for (position, index) in interleaved_order(settings.tiers.len(), round)
                    .into_iter()
                    .enumerate()
                {
                    let tier = &settings.tiers[index];
                    progress(Progress {
                        stage: &tier.name,
                        done: runs.len() as u64,
                        total,
                    });
                    let slot = Slot {
                        round,
                        attempt,
                        position,
                    };
                    runs.push(run_tier(tier, settings, &workload, slot, meter.as_ref())?);
                }
                if reruns_left == 0 || !runs[first..].iter().any(|run| run.disturbed) {
                    break;
                }
                reruns_left -= 1;
                total += settings.tiers.len() as u64;
            }
        }
        progress(Progress {
            stage: "done",
            done: total,
            total,
        });
        let meter_priority = meter.map(|meter| meter.priority.clone());
        let all: Vec<&Run> = runs.iter().collect();
        let Reading {
            tiers,
            aa_gauge,
            aa_gauge_by_class,
            verdict,
            cpu_reading,
        } = reading(settings.mode, &settings.tiers, &all);
        let undisturbed = meter_priority
            .is_some()
            .then(|| undisturbed(settings.mode, &settings.tiers, &runs));
        Ok(Results {
            experiment: "tier".to_string(),
            metadata: Metadata {
                run: recorder.finish(),
                note: match settings.mode {
                    Mode::Emulated => EMULATED_NOTE,
                    Mode::Loopback => LOOPBACK_NOTE,
                }
                .to_string(),
            },
            settings: settings.clone(),
            runs,
            tiers,
            aa_gauge,
            aa_gauge_by_class,
            verdict,
            cpu_reading,
            meter_priority,
            undisturbed,
        })
    }

    fn check(results: &Results) -> Result<usize, String> {
        let runs: Vec<&Run> = results.runs.iter().collect();
        let again = summarise_tiers(&results.settings.tiers, &runs);
        let mut checked = 0;
        for (kept, derived) in results.tiers.iter().zip(&again) {
            for (class, percentiles) in &kept.classes {
                if derived.classes.get(class) != Some(percentiles) {
                    return Err(format!(
                        "tier {} class {class}: kept percentiles differ from the histograms'",
                        kept.tier
                    ));
                }
                checked += 3;
            }
        }
        Ok(checked)
    }

    fn render(results: &Results, out: &Path) -> Result<(), String> {
        crate::results::write_text(out, "results.md", &markdown(results))?;
        plot(results, out)
    }

    fn summarise(results: &Results) -> String {
        let mut text = String::new();
        for line in &results.verdict {
            text.push_str(&format!(
                "{:<45} {:>8}  {}\n",
                line.line,
                line.value
                    .map_or("—".to_string(), |value| format!("{value:.3}")),
                if line.met { "met" } else { "not met" }
            ));
        }
        if !results.aa_gauge_by_class.is_empty() {
            text.push_str(&format!(
                "A/A gauge per class: {}\n",
                gauge_by_class(&results.aa_gauge_by_class)
            ));
        }
        if let Some(line) = cpu_reading_text(results.cpu_reading().as_ref()) {
            text.push_str(&line);
            text.push('\n');
        }
        if let Some(undisturbed) = &results.undisturbed {
            text.push_str(&format!(
                "without the disturbed rounds ({} left out):\n",
                undisturbed.disturbed_rounds.len()
            ));
            for line in &undisturbed.verdict {
                text.push_str(&format!(
                    "  {:<43} {:>8}  {}\n",
                    line.line,
                    line.value
                        .map_or("—".to_string(), |value| format!("{value:.3}")),
                    if line.met { "met" } else { "not met" }
                ));
            }
        }
        text
    }
}

/// `class gauge, …` in the order of [`CLASSES`].
fn gauge_by_class(gauges: &BTreeMap<String, f64>) -> String {
    CLASSES
        .iter()
        .filter_map(|class| {
            let gauge = gauges.get(class.name())?;
            Some(format!("{} {gauge:.3}", class.name()))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn number(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// `text`, or `none` when it is empty.
fn or_none(text: &str) -> &str {
    if text.is_empty() {
        "none"
    } else {
        text
    }
}

fn markdown(results: &Results) -> String {
    let settings = &results.settings;
    let meta = &results.metadata.run;
    let mut text = format!(
        "# tailtrim experiment tier ({})\n\n{}\n\nHost: {} ({} cores), kernel {}; load average \
         {} at the start, {} at the end, highest {:.2}. Command: `{}`.\n\n{} servers × {} workers \
         (+1 joining half way where a tier joins), {} rounds, {:.0} requests/s offered, {} s \
         measured after {} s of warm-up, {} small + {} large keys, database {}; emulated \
         service {}, network {}. Classes: small/large = largest value ≤/> {} B; \
         mice/elephant = fewer/at least {} keys.\n\n",
        match settings.mode {
            Mode::Emulated => "EMULATED",
            Mode::Loopback => "REAL loopback",
        },
        results.metadata.note,
        meta.cpu_model,
        meta.cores,
        meta.kernel,
        meta.load_average_start,
        meta.load_average_end,
        meta.load_average_max,
        meta.command,
        settings.servers,
        settings.workers,
        settings.rounds,
        settings.rate,
        settings.duration_s,
        settings.warmup_s,
        settings.keys,
        settings.large_keys,
        settings.db_latency,
        or_none(&settings.emulate_service),
        or_none(&settings.emulate_network),
        settings.large_threshold_bytes,
        settings.elephant_min_keys,
    );
    text.push_str(&verdict_table(results));
    if !results.aa_gauge_by_class.is_empty() {
        text.push_str(&format!(
            "\nA/A gauge per class (|p99 of the baseline's copy / the baseline's − 1|; a class's \
             ratio is resolved only where it differs from 1 by more than its class's gauge): \
             {}.\n",
            gauge_by_class(&results.aa_gauge_by_class)
        ));
    }
    if let Some(line) = cpu_reading_text(results.cpu_reading().as_ref()) {
        text.push_str(&format!(
            "\n{line}: the CPU line's ratio is resolved only where it differs from 1 by more \
             than the CPU gauge.\n"
        ));
    }
    text.push_str("\nLatency per class, µs (pooled over rounds):\n\n");
    let mut columns = vec![("tier".to_string(), Align::Left)];
    for class in CLASSES {
        for percentile in ["p50", "p99", "p99.9"] {
            columns.push((format!("{} {percentile}", class.name()), Align::Right));
        }
    }
    let mut latency = Table::new(columns);
    for summary in &results.tiers {
        let mut row = vec![summary.tier.clone()];
        for class in CLASSES {
            let percentiles = summary
                .classes
                .get(class.name())
                .cloned()
                .unwrap_or_default();
            row.extend([
                number(percentiles.p50_us),
                number(percentiles.p99_us),
                number(percentiles.p999_us),
            ]);
        }
        latency.push(row);
    }
    text.push_str(&latency.render());
    text.push_str("\nPer tier (medians over rounds):\n\n");
    let mut other = Table::new([
        ("tier", Align::Left),
        ("rps", Align::Right),
        ("CPU µs/request", Align::Right),
        ("miss peak", Align::Right),
        ("miss spike", Align::Right),
        ("errors", Align::Right),
        ("wrong/stale", Align::Right),
    ]);
    let optional =
        |value: Option<f64>| value.map_or("—".to_string(), |value| format!("{value:.3}"));
    for summary in &results.tiers {
        other.push([
            summary.tier.clone(),
            format!("{:.0}", summary.achieved_rps),
            format!("{:.1}", summary.cpu_us_per_request),
            optional(summary.miss_peak),
            optional(summary.miss_spike),
            summary.errors.to_string(),
            summary.wrong_or_stale_values.to_string(),
        ]);
    }
    text.push_str(&other.render());
    text.push_str(&cpu_split_table(results));
    text.push_str(&host_table(results));
    text.push_str("\nTiers:\n\n");
    for tier in &settings.tiers {
        text.push_str(&format!(
            "- `{}`: {} servers{}, {} proxy{}{}{}{}, join: {}\n",
            tier.name,
            tier.server,
            tier.dispatch
                .as_ref()
                .map_or(String::new(), |dispatch| format!(
                    " (`--dispatch {dispatch}`)"
                )),
            tier.proxy,
            tier.planner
                .as_ref()
                .map_or(String::new(), |planner| format!(" `--planner {planner}`")),
            match (tier.proxy.as_str(), settings.proxy_threads) {
                ("tailtrim", Some(threads)) => format!(" `-t {threads}`"),
                _ => String::new(),
            },
            tier.priority_order
                .as_ref()
                .map_or(String::new(), |order| format!(
                    " `--priority-order {order}`"
                )),
            tier.connection_choice
                .as_ref()
                .map_or(String::new(), |choice| format!(
                    " `--connection-choice {choice}`"
                )),
            tier.join_warmup.as_deref().unwrap_or("none"),
        ));
    }
    text
}

/// A verdict's value and whether it was met, for a table.
fn value_and_met(line: &Verdict) -> [String; 2] {
    [
        line.value
            .map_or("—".to_string(), |value| format!("{value:.3}")),
        if line.met { "met" } else { "not met" }.to_string(),
    ]
}

/// The acceptance lines; with the meter, over every round and without the disturbed ones
/// side by side.
fn verdict_table(results: &Results) -> String {
    let Some(undisturbed) = &results.undisturbed else {
        let mut table = Table::new([
            ("acceptance line", Align::Left),
            ("measured", Align::Right),
            ("bound", Align::Right),
            ("", Align::Left),
        ]);
        for line in &results.verdict {
            let [value, met] = value_and_met(line);
            table.push([line.line.clone(), value, format!("{:.2}", line.bound), met]);
        }
        return table.render();
    };
    let mut table = Table::new([
        ("acceptance line", Align::Left),
        ("bound", Align::Right),
        ("without disturbed rounds", Align::Right),
        ("", Align::Left),
        ("every round", Align::Right),
        ("", Align::Left),
    ]);
    for line in &results.verdict {
        let kept = undisturbed
            .verdict
            .iter()
            .find(|other| other.line == line.line);
        let [clean, clean_met] =
            kept.map_or(["—".to_string(), "not met".to_string()], value_and_met);
        let [value, met] = value_and_met(line);
        table.push([
            line.line.clone(),
            format!("{:.2}", line.bound),
            clean,
            clean_met,
            value,
            met,
        ]);
    }
    let rounds = &undisturbed.disturbed_rounds;
    let left_out = if rounds.is_empty() {
        "no round was disturbed: both columns read the same runs".to_string()
    } else {
        format!(
            "left out: {}",
            rounds
                .iter()
                .map(|(round, attempt)| format!("round {round} attempt {attempt}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let mut text = format!(
        "The lines are decided without the disturbed rounds (a round in which a run saw a host \
         hole longer than {} ms; {left_out}); every round's reading beside it.\n\n",
        results
            .settings
            .meter
            .as_ref()
            .map_or(DEFAULT_DISTURBED_HOLE_MS, |meter| meter.disturbed_hole_ms),
    );
    text.push_str(&table.render());
    if let Some(gauge) = undisturbed.aa_gauge {
        text.push_str(&format!(
            "\nWithout the disturbed rounds: A/A gauge {gauge:.3}{}{}.\n",
            if undisturbed.aa_gauge_by_class.is_empty() {
                String::new()
            } else {
                format!(
                    ", per class {}",
                    gauge_by_class(&undisturbed.aa_gauge_by_class)
                )
            },
            cpu_reading_text(undisturbed.cpu_reading.as_ref())
                .map_or(String::new(), |line| format!("; {line}")),
        ));
    }
    text
}

/// The hiccup meter's reading per run; empty for runs kept before the meter.
fn host_table(results: &Results) -> String {
    if results.runs.iter().all(|run| run.host.is_none()) {
        return String::new();
    }
    let meter = results.settings.meter.as_ref();
    let threshold = meter.map_or(0.0, |meter| meter.hole_threshold_ms);
    let mut table = Table::new([
        ("round", Align::Right),
        ("attempt", Align::Right),
        ("tier", Align::Left),
        (format!("holes > {threshold} ms").as_str(), Align::Right),
        ("longest, ms", Align::Right),
        ("total, ms", Align::Right),
        ("steal, ms", Align::Right),
        ("slow requests", Align::Right),
        ("of them in a hole", Align::Right),
        ("", Align::Left),
    ]);
    for run in &results.runs {
        let Some(host) = &run.host else { continue };
        table.push([
            run.round.to_string(),
            run.attempt.to_string(),
            run.tier.clone(),
            host.holes.to_string(),
            format!("{:.1}", host.longest_hole_ms),
            format!("{:.1}", host.total_hole_ms),
            host.steal_ms
                .map_or("—".to_string(), |steal| format!("{steal:.0}")),
            host.slow_requests.to_string(),
            host.slow_in_holes.to_string(),
            if run.disturbed { "disturbed" } else { "" }.to_string(),
        ]);
    }
    let disturbed = results.runs.iter().filter(|run| run.disturbed).count();
    format!(
        "\nThe host during each run (hiccup meter: threads sleeping 1 ms, {}; a wake-up later \
         than {threshold} ms recorded as a hole, the CPUs' holes merged; steal over all CPUs \
         from /proc/stat; slow: latency over the run's own p99 by {} ms, counted by whether its \
         span meets a hole; disturbed: a hole longer than {} ms): {disturbed} of {} runs \
         disturbed.\n\n{}",
        results.meter_priority.as_deref().unwrap_or("unknown"),
        meter.map_or(0.0, |meter| meter.slow_over_p99_ms),
        meter.map_or(DEFAULT_DISTURBED_HOLE_MS, |meter| meter.disturbed_hole_ms),
        results.runs.len(),
        table.render()
    )
}

/// CPU per request by process (servers, proxy), medians over rounds; empty for runs kept
/// before the split was recorded.
fn cpu_split_table(results: &Results) -> String {
    if results
        .tiers
        .iter()
        .all(|summary| summary.cpu_us_per_request_split.is_none())
    {
        return String::new();
    }
    let (server_program, proxy_program) = match results.settings.mode {
        Mode::Emulated => ("tailtrim serve", "tailtrim proxy"),
        Mode::Loopback => (
            "tailtrim serve or memcached",
            "tailtrim proxy or nutcracker",
        ),
    };
    let mut table = Table::new([
        ("tier", Align::Left),
        ("servers µs/request", Align::Right),
        ("proxy µs/request", Align::Right),
        ("servers share", Align::Right),
    ]);
    for summary in &results.tiers {
        let Some(split) = summary.cpu_us_per_request_split else {
            continue;
        };
        let total = split.servers + split.proxy;
        table.push([
            summary.tier.clone(),
            format!("{:.1}", split.servers),
            format!("{:.1}", split.proxy),
            if total > 0.0 {
                format!("{:.0} %", 100.0 * split.servers / total)
            } else {
                "—".to_string()
            },
        ]);
    }
    format!(
        "\nCPU per request by process (medians over rounds; servers: every {server_program} \
         process of the tier, proxy: the {proxy_program}):\n\n{}",
        table.render()
    )
}

fn plot(results: &Results, out: &Path) -> Result<(), String> {
    let position = |class: Class| {
        CLASSES
            .iter()
            .position(|candidate| *candidate == class)
            .unwrap_or(0) as f64
            + 1.0
    };
    let p99_lines: Vec<Line> = results
        .tiers
        .iter()
        .map(|summary| {
            Line::new(
                summary.tier.clone(),
                CLASSES
                    .iter()
                    .filter_map(|class| Some((position(*class), p99(summary, class.name())?)))
                    .collect(),
            )
        })
        .collect();
    let mut panels = vec![Panel {
        title: "p99 per class (1 all, 2 small, 3 large, 4 mice, 5 elephant)".to_string(),
        x_desc: "class".to_string(),
        y_desc: "p99".to_string(),
        log_y: true,
        latency: true,
        lines: p99_lines,
        markers: Vec::new(),
    }];
    let first_round: Vec<&Run> = results.runs.iter().filter(|run| run.round == 0).collect();
    if first_round.iter().any(|run| run.join.is_some()) {
        panels.push(Panel {
            title: "miss ratio per window, first round (dashed: the join)".to_string(),
            x_desc: "seconds into the measured window".to_string(),
            y_desc: "miss ratio".to_string(),
            log_y: false,
            latency: false,
            lines: first_round
                .iter()
                .map(|run| Line::new(run.tier.clone(), run.miss_series.clone()))
                .collect(),
            markers: first_round
                .iter()
                .filter_map(|run| run.join.map(|(sent, _, _)| sent))
                .take(1)
                .collect(),
        });
    }
    plot_panels(out, "tier", &panels)?;
    Ok(())
}

/// Runs `tailtrim experiment tier` (or redraws a kept run with `--replot`).
pub fn run(args: Args) -> Result<ExitCode, String> {
    let terminal = Terminal::new("tier", args.quiet);
    let out = args.out.clone();
    let replot = args.replot;
    let experiment = TierExperiment {
        settings: settings_of(&args)?,
    };
    command(&experiment, &out, replot, &terminal)
}

#[cfg(test)]
mod tests {
    use super::{
        aa_gauge_by_class, cpu_reading, misses, reading, tiers, undisturbed, verdict, Mode,
        Percentiles, Run, TierSummary, EVERYTHING, MEMCACHED_NUTCRACKER,
    };
    use crate::histogram::Encoded;
    use std::collections::BTreeMap;
    use tailtrim_bench::cacheaside::{CacheAsideReport, WindowSample};

    /// A run whose 100 requests all took `latency_us`.
    fn run(tier: &str, round: usize, attempt: usize, latency_us: u64, disturbed: bool) -> Run {
        let mut histogram =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
                .unwrap_or_else(|error| panic!("{error}"));
        histogram
            .record_n(latency_us * 1_000, 100)
            .unwrap_or_else(|error| panic!("{error}"));
        let encoded = Encoded::encode(&histogram).unwrap_or_else(|error| panic!("{error}"));
        Run {
            tier: tier.to_string(),
            round,
            attempt,
            position: 0,
            load_average_before: String::new(),
            requests: 100,
            achieved_rps: 1.0,
            hit_ratio: 1.0,
            errors: 0,
            wrong_values: 0,
            stale_values: 0,
            cpu_seconds: 0.001,
            cpu_us_per_request: 10.0,
            cpu_split: None,
            join: None,
            miss_ratio_before: None,
            miss_ratio_peak: None,
            miss_series: Vec::new(),
            histograms: BTreeMap::from([("all".to_string(), encoded)]),
            host: None,
            disturbed,
        }
    }

    fn summary(tier: &str, all_p99: f64, small_p99: f64, spike: f64) -> TierSummary {
        let class = |p99_us: f64| Percentiles {
            requests: 100,
            p50_us: 1.0,
            p99_us,
            p999_us: p99_us,
        };
        let mut classes = BTreeMap::new();
        for name in ["all", "mice", "elephant", "large"] {
            classes.insert(name.to_string(), class(all_p99));
        }
        classes.insert("small".to_string(), class(small_p99));
        TierSummary {
            tier: tier.to_string(),
            classes,
            cpu_us_per_request: 10.0,
            cpu_us_per_request_split: None,
            miss_spike: Some(spike),
            miss_peak: Some(spike),
            errors: 0,
            wrong_or_stale_values: 0,
            achieved_rps: 1.0,
        }
    }

    #[test]
    fn the_everything_tier_takes_its_planner_by_name() {
        let emulated = tiers(Mode::Emulated, "auto");
        let everything = emulated.iter().find(|tier| tier.name == EVERYTHING);
        assert_eq!(
            everything.and_then(|tier| tier.planner.as_deref()),
            Some("auto")
        );
        assert_eq!(emulated[0].dispatch.as_deref(), Some("pinned"));
        assert_eq!(emulated[0].join_warmup.as_deref(), Some("cold"));
        // The baseline spreads over a backend's connections as twemproxy does; the
        // everything tier skips a connection stuck behind a late reply, in both modes.
        assert_eq!(
            emulated[0].connection_choice.as_deref(),
            Some("round-robin")
        );
        assert_eq!(
            everything.and_then(|tier| tier.connection_choice.as_deref()),
            Some("avoid-slow")
        );
        let loopback = tiers(Mode::Loopback, "batch");
        assert_eq!(
            loopback
                .iter()
                .find(|tier| tier.name == EVERYTHING)
                .and_then(|tier| tier.connection_choice.as_deref()),
            Some("avoid-slow")
        );
        assert!(emulated
            .iter()
            .any(|tier| tier.connection_choice.as_deref() == Some("least-loaded")));
        assert!(tiers(Mode::Loopback, "batch")
            .iter()
            .all(|tier| tier.join_warmup.is_none()));
    }

    #[test]
    fn verdict_compares_everything_with_the_baseline_and_the_best_single_mechanism() {
        let summaries = vec![
            summary("memcached-like", 1000.0, 1000.0, 0.5),
            summary("memcached-like-aa", 1050.0, 1000.0, 0.5),
            summary("size-aware", 600.0, 100.0, 0.5),
            summary(EVERYTHING, 500.0, 150.0, 0.1),
        ];
        let (gauge, lines) = verdict(Mode::Emulated, &summaries);
        assert!((gauge.unwrap_or(0.0) - 0.05).abs() < 1e-9);
        let met = |prefix: &str| {
            lines
                .iter()
                .find(|line| line.line.starts_with(prefix))
                .map(|line| line.met)
        };
        assert_eq!(met("small"), Some(true));
        assert_eq!(met("overall p99 ≤"), Some(true));
        assert_eq!(met("overall p99 <"), Some(true));
        assert_eq!(met("elephant"), Some(true));
        assert_eq!(met("miss spike"), Some(true));
        assert_eq!(met("A/A"), Some(true));
    }

    #[test]
    fn a_disturbed_round_is_kept_but_decides_no_line() {
        let twin = format!("{MEMCACHED_NUTCRACKER}-aa");
        let tiers: Vec<_> = tiers(Mode::Loopback, "batch")
            .into_iter()
            .filter(|tier| [MEMCACHED_NUTCRACKER, &twin, EVERYTHING].contains(&tier.name.as_str()))
            .collect();
        let runs = vec![
            // Round 0's first attempt: a hole stalled the A/A copy's run.
            run(MEMCACHED_NUTCRACKER, 0, 0, 1_000, false),
            run(&twin, 0, 0, 5_000, true),
            run(EVERYTHING, 0, 0, 1_000, false),
            // Its rerun and round 1: no hole.
            run(MEMCACHED_NUTCRACKER, 0, 1, 1_000, false),
            run(&twin, 0, 1, 1_000, false),
            run(EVERYTHING, 0, 1, 1_000, false),
            run(MEMCACHED_NUTCRACKER, 1, 0, 1_000, false),
            run(&twin, 1, 0, 1_000, false),
            run(EVERYTHING, 1, 0, 1_000, false),
        ];
        let gauge_met = |lines: &[super::Verdict]| {
            lines
                .iter()
                .find(|line| line.line.starts_with("A/A"))
                .map(|line| line.met)
        };
        let all: Vec<&Run> = runs.iter().collect();
        let every_round = reading(Mode::Loopback, &tiers, &all);
        // A third of the copy's requests at 5 ms: its pooled p99 is 5 ms, the gauge 4.
        assert!((every_round.aa_gauge.unwrap_or(0.0) - 4.0).abs() < 0.01);
        assert_eq!(gauge_met(&every_round.verdict), Some(false));
        let clean = undisturbed(Mode::Loopback, &tiers, &runs);
        assert_eq!(clean.disturbed_rounds, vec![(0, 0)]);
        assert_eq!(clean.aa_gauge, Some(0.0));
        assert_eq!(gauge_met(&clean.verdict), Some(true));
        // The disturbed round's runs are left out whole (two rounds of each tier remain).
        let requests = |summaries: &[TierSummary], tier: &str| {
            summaries
                .iter()
                .find(|summary| summary.tier == tier)
                .map(|summary| summary.classes["all"].requests)
        };
        assert_eq!(requests(&clean.tiers, EVERYTHING), Some(200));
        assert_eq!(requests(&every_round.tiers, EVERYTHING), Some(300));
        // Rounds pair by attempt in the CPU reading: three pairs, not two.
        let cpu = every_round
            .cpu_reading
            .unwrap_or_else(|| panic!("loopback"));
        assert_eq!(cpu.everything_over_baseline_by_round.len(), 3);
    }

    #[test]
    fn the_cpu_reading_gauges_the_baselines_copies_and_pairs_rounds() {
        let runs = [
            ("memcached+nutcracker", 0, 100.0),
            ("memcached+nutcracker-aa", 0, 130.0),
            (EVERYTHING, 0, 110.0),
            ("memcached+nutcracker", 1, 200.0),
            ("memcached+nutcracker-aa", 1, 150.0),
            (EVERYTHING, 1, 180.0),
            ("memcached+nutcracker", 2, 150.0),
            ("memcached+nutcracker-aa", 2, 170.0),
            (EVERYTHING, 2, 300.0),
        ];
        let reading = cpu_reading(Mode::Loopback, runs.iter().copied()).expect("both ran");
        // Medians over rounds: copy 150, baseline 150.
        assert_eq!(reading.aa_gauge, Some(0.0));
        assert_eq!(
            reading.everything_over_baseline_by_round,
            vec![1.1, 0.9, 2.0]
        );
        assert_eq!(reading.everything_over_baseline_median, Some(1.1));
        let without_everything = runs.iter().copied().filter(|run| run.0 != EVERYTHING);
        assert!(cpu_reading(Mode::Loopback, without_everything).is_none());
        assert!(cpu_reading(Mode::Emulated, runs.iter().copied()).is_none());
    }

    #[test]
    fn the_aa_gauge_is_read_per_class_from_the_baselines_two_copies() {
        let summaries = vec![
            summary("memcached+nutcracker", 1000.0, 400.0, 0.0),
            summary("memcached+nutcracker-aa", 1100.0, 300.0, 0.0),
            summary(EVERYTHING, 500.0, 100.0, 0.0),
        ];
        let gauges = aa_gauge_by_class(Mode::Loopback, &summaries);
        let gauge = |class: &str| gauges.get(class).copied().unwrap_or(f64::NAN);
        assert!((gauge("all") - 0.1).abs() < 1e-9);
        assert!((gauge("small") - 0.25).abs() < 1e-9);
        assert!((gauge("elephant") - 0.1).abs() < 1e-9);
        // The emulated mode's baseline did not run: no gauge.
        assert!(aa_gauge_by_class(Mode::Emulated, &summaries).is_empty());
    }

    #[test]
    fn miss_spike_is_the_peak_after_the_join_above_the_level_before() {
        let window = |time_s: f64, hit_ratio: f64| WindowSample {
            time_s,
            hit_ratio,
            ..WindowSample::default()
        };
        let report = CacheAsideReport {
            per_request: vec![
                window(0.0, 0.95),
                window(1.0, 0.97),
                window(2.0, 0.95),
                window(3.0, 0.60),
                window(4.0, 0.90),
            ],
            ..CacheAsideReport::default()
        };
        let (series, levels) = misses(&report, Some(2.5));
        assert_eq!(series.len(), 5);
        let (level, peak) = levels.unwrap_or_default();
        assert!((level - 0.05).abs() < 1e-9 && (peak - 0.4).abs() < 1e-9);
        assert!(misses(&report, None).1.is_none());
    }
}
