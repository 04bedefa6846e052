//! `tailtrim experiment warmup`: scale-out without a miss storm. Cache-aside load with a
//! simulated database through `tailtrim proxy` over cache servers (`tailtrim serve` or stock
//! memcached) with a memory limit each; a 4th server joins halfway (cold, fallback,
//! preemptive, preemptive+fallback) or, from 4, one is removed halfway (cold or drain). Each
//! run is compared with a run without the change under the same request sequence (same seed).
//! `--paper` runs the hot-key-migration report's setting: 3 servers of 64 MB, 68 000 keys and
//! 229 MB of data (more than the pool holds), 475 000 zipf requests, database 8 ms, on both
//! server programs and several seeds.
//!
//! ```text
//!  for seed: for program (tailtrim | memcached, rotated per seed): for run in runs:
//!     start 4 × server -m M (fresh), tailtrim proxy --admin over 3 (or 4) of them
//!     bench::run_cache_aside (prefill coldest first, unrecorded warm-up, measured window,
//!                             --at halfway: POST|DELETE /pool/servers?warmup=MODE&share=F)
//!  per-1000-request windows, request i is the same key in every run of a seed:
//!     level          = the baseline's mean of window means from the event on
//!     peak excess    = highest window mean from the event on − level
//!     spike area     = Σ_{windows from the event} max(0, window mean − level) × window / 1000
//!                      (seconds of response time above the baseline's level)
//!     modelled       = the same on cache read + database × miss share (the report's costs)
//!     extra misses   = Σ_{windows from the event} (misses − baseline's misses)
//!     time to recover = from the event until the run's hit ratio (5-window mean) stays
//!                       within 1 point of the baseline's
//!     copy share     = accesses (zipf) the hottest `share` of the moved keys carry, on the
//!                      proxy's ring before and after the change
//!  summary per program: median, min and max over seeds; ratios to cold per seed
//!  ──> results.json, results.md, join-<program>.{svg,png}, removal-<program>.{svg,png}
//! ```

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::figures::{plot_panels, request_index_at, Line, Panel};
use serde::{Deserialize, Serialize};
use tailtrim_bench::cacheaside::{parse_duration, CacheAsideReport, WindowSample};
use tailtrim_bench::dist::Distribution;
use tailtrim_bench::workload::{KeyRef, OpKind, OperationSpec, Popularity};
use tailtrim_bench::{run_cache_aside, CacheAsideConfig, ScheduledEvent, WorkloadSpec};
use tailtrim_client::ServerSpec;
use tailtrim_policy::ring::{HashFunction, Ring, RingOptions};

use crate::experiment::{Experiment, Progress, ProgressFn};
use crate::histogram::Encoded;
use crate::meta::{load_average, utc_timestamp, Recorder, RunMetadata};
use crate::process::{program_version, Process, Program, ServerShape};
use crate::results::{write_json, write_text};
use crate::stats::{interleaved_order, median};
use crate::tables::{Align, Table};

use super::common::{command, progress_bar, tailtrim_binary, Terminal};

/// Every run, in order.
pub const DEFAULT_RUNS: &str =
    "baseline,cold,fallback,preemptive,preemptive+fallback,preemptive@1,\
     baseline-4,remove-cold,remove-drain,remove-drain@1";
/// The runs of `--paper`.
pub const PAPER_RUNS: &str =
    "baseline,cold,fallback,preemptive,preemptive+fallback,baseline-4,remove-cold,remove-drain";
/// The report's unique keys.
const PAPER_KEYS: u64 = 68_000;
/// The report's data volume, bytes (keys and values).
const PAPER_DATA_BYTES: f64 = 229e6;
/// The report's memory per server, MB.
const PAPER_MEMORY_MB: u64 = 64;
/// The report's requests per experiment.
const PAPER_REQUESTS: u64 = 475_000;
/// `--paper`'s default rate: 475 000 requests in about 40 s, so both programs' 16 runs of a
/// seed take about 13 minutes on a shared 2-core machine.
const PAPER_RATE: f64 = 12_000.0;
/// `--paper`'s bench workers: enough that misses waiting on the database do not queue reads.
const PAPER_WORKERS: usize = 128;
/// Windows averaged when comparing hit ratios for recovery.
const RECOVERY_SMOOTHING: usize = 5;
/// A run has recovered when its smoothed hit ratio stays within this of the baseline's.
const RECOVERY_TOLERANCE: f64 = 0.01;
/// The report's cache read, ms (the modelled response time's floor).
const REPORT_CACHE_READ_MS: f64 = 0.3;
/// The ring the proxy uses by default (`[pool] hash = "md5"`, ketama).
const PROXY_HASH: &str = "md5";

/// Arguments of `tailtrim experiment warmup`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example (the committed figures, about 13 minutes per seed):\n  \
    tailtrim experiment warmup --paper --seeds 1,2,3\n\
    Smoke run (seconds):\n  \
    tailtrim experiment warmup --quick --runs baseline,preemptive --out /tmp/warmup"
)]
pub struct Args {
    /// Comma-separated runs: baseline, cold, fallback, preemptive, preemptive+fallback,
    /// baseline-4, remove-cold, remove-drain; `NAME@SHARE` sends another share (e.g.
    /// `preemptive@1` copies every remapped key the old owners hold). Default: every run
    /// (`--paper`: all but the `@1` runs).
    #[arg(long)]
    runs: Option<String>,
    /// Comma-separated cache servers under the proxy: tailtrim (`tailtrim serve`), memcached.
    /// Default: tailtrim (`--paper`: both).
    #[arg(long)]
    programs: Option<String>,
    /// Target rate, requests per second (open loop). Default 1000 (`--paper`: 12000).
    #[arg(short = 'r', long)]
    rate: Option<f64>,
    /// Measured seconds per run; the change happens halfway.
    #[arg(short = 'd', long, default_value_t = 120.0)]
    duration: f64,
    /// Measured requests per run instead of `--duration` (the duration becomes
    /// requests / rate). `--paper`: 475000.
    #[arg(long)]
    requests: Option<u64>,
    /// Unrecorded seconds of load after the prefill.
    #[arg(long, default_value_t = 15.0)]
    warmup: f64,
    /// Unique keys.
    #[arg(long, default_value_t = 12_600)]
    keys: u64,
    /// Mean value size in bytes (values uniform in 0.3..1.7 × the mean).
    #[arg(long, default_value_t = 3_400)]
    mean_value: u32,
    /// Item memory per server, MB (`-m`).
    #[arg(long, default_value_t = 12)]
    memory_mb: u64,
    /// Zipf exponent of key popularity.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Share of database writes in the mix.
    #[arg(long, default_value_t = 0.02)]
    set_share: f64,
    /// Simulated database latency.
    #[arg(long, default_value = "8ms")]
    db_latency: String,
    /// Share of the remapped keys the old owners hold that a preemptive join copies.
    #[arg(long, default_value_t = 0.2)]
    warm_share: f64,
    /// Share of the departing server's keys a drain copies.
    #[arg(long, default_value_t = 0.2)]
    drain_share: f64,
    /// Bench worker threads. Default 64 (`--paper`: 128).
    #[arg(long)]
    workers: Option<usize>,
    /// Requests per window of the series.
    #[arg(long, default_value_t = 1_000)]
    window: usize,
    /// Seeds of the schedule and keys, comma-separated (each seed runs every run).
    #[arg(long, alias = "seed", value_delimiter = ',', default_value = "1")]
    seeds: Vec<u64>,
    /// The report's setting: 68000 keys, 229 MB of data, 64 MB per server, 475000 measured
    /// requests at 12000 rps, 128 workers, 5 s unrecorded warm-up, both programs;
    /// `--runs`, `--programs`, `--rate`, `--requests`, `--workers` and `--seeds` still apply.
    #[arg(long, conflicts_with = "quick")]
    paper: bool,
    /// Small and short (a smoke run): 2000 keys, 2 MB per server, 6 s at 600 rps.
    #[arg(long)]
    quick: bool,
    /// Output directory.
    #[arg(long, default_value = "experiments/warmup")]
    out: PathBuf,
    /// Only redraw results.md and the figures from `<out>/results.json` (no run).
    #[arg(long)]
    replot: bool,
}

/// The membership change of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// `add` or `remove`.
    pub action: String,
    /// Warm-up mode sent to the proxy.
    pub mode: String,
    /// Share sent to the proxy.
    pub share: f64,
}

fn default_program() -> String {
    "tailtrim".into()
}

fn default_seed() -> u64 {
    1
}

/// What a run is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// Name.
    pub name: String,
    /// Servers in the pool at the start.
    pub servers: usize,
    /// The change halfway (None: a baseline).
    pub change: Option<Change>,
    /// The run it is compared with.
    pub baseline: String,
    /// The cache server program: `tailtrim` or `memcached`.
    #[serde(default = "default_program")]
    pub program: String,
    /// Seed of the request sequence.
    #[serde(default = "default_seed")]
    pub seed: u64,
}

/// A run by name; `NAME@SHARE` (e.g. `preemptive@1`) overrides the share sent to the proxy.
fn run_spec(full_name: &str, args: &Args) -> Result<RunSpec, String> {
    let (name, share) = match full_name.split_once('@') {
        Some((name, share)) => (
            name,
            Some(
                share
                    .parse::<f64>()
                    .map_err(|_| format!("bad share in run {full_name:?}"))?,
            ),
        ),
        None => (full_name, None),
    };
    let join = |mode: &str| RunSpec {
        name: full_name.to_string(),
        servers: 3,
        change: Some(Change {
            action: "add".into(),
            mode: mode.into(),
            share: share.unwrap_or(args.warm_share),
        }),
        baseline: "baseline".into(),
        program: default_program(),
        seed: default_seed(),
    };
    let remove = |mode: &str| RunSpec {
        name: full_name.to_string(),
        servers: 4,
        change: Some(Change {
            action: "remove".into(),
            mode: mode.into(),
            share: share.unwrap_or(args.drain_share),
        }),
        baseline: "baseline-4".into(),
        program: default_program(),
        seed: default_seed(),
    };
    if share.is_some() && matches!(name, "baseline" | "baseline-4") {
        return Err(format!("run {full_name:?}: a baseline has no share"));
    }
    Ok(match name {
        "baseline" | "baseline-4" => RunSpec {
            name: name.into(),
            servers: if name == "baseline" { 3 } else { 4 },
            change: None,
            baseline: name.into(),
            program: default_program(),
            seed: default_seed(),
        },
        "cold" | "fallback" | "preemptive" | "preemptive+fallback" => join(name),
        "remove-cold" => remove("cold"),
        "remove-drain" => remove("drain"),
        other => return Err(format!("unknown run {other:?} (see --help)")),
    })
}

/// The cache server program by name.
fn program(name: &str) -> Result<Program, String> {
    match name {
        "tailtrim" => Ok(Program::Tailtrim { extra: Vec::new() }),
        "memcached" => Ok(Program::Memcached),
        other => Err(format!("unknown program {other:?} (tailtrim or memcached)")),
    }
}

/// Numbers of one run against its baseline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Metrics {
    /// Window index of the event.
    pub event_window: usize,
    /// Seconds after the window start when the change was requested / answered.
    pub event_sent_s: f64,
    /// When the proxy answered (after preemptive copies).
    pub event_answered_s: f64,
    /// Σ (misses − baseline misses) over the windows from the event.
    pub extra_misses: i64,
    /// The same over the first half of the windows after the event.
    pub extra_misses_first_half: i64,
    /// Misses from the event on, and the baseline's.
    pub misses_after: u64,
    /// The baseline's misses over the same windows.
    pub baseline_misses_after: u64,
    /// Lowest hit ratio of a window from the event on.
    pub deepest_hit_ratio: f64,
    /// The baseline's hit ratio in that window.
    pub baseline_hit_ratio_at_dip: f64,
    /// Highest mean latency of a window from the event on, ms.
    pub peak_mean_ms: f64,
    /// The baseline's highest mean latency over the same windows, ms.
    pub baseline_peak_mean_ms: f64,
    /// The baseline's level: the mean of its window means from the event on, ms.
    pub baseline_level_ms: f64,
    /// The spike's peak: `peak_mean_ms` − `baseline_level_ms`.
    pub peak_excess_ms: f64,
    /// The spike's area: Σ over windows from the event of max(0, window mean − level) ×
    /// window requests, in seconds of response time.
    pub spike_area_s: f64,
    /// The baseline's modelled level (cache read + database × miss share of reads), ms.
    pub modelled_baseline_level_ms: f64,
    /// The spike's peak on the modelled response time, ms.
    pub modelled_peak_excess_ms: f64,
    /// The spike's area on the modelled response time, seconds.
    pub modelled_spike_area_s: f64,
    /// Requests from the event until recovered (None: not within the run).
    pub recover_requests: Option<u64>,
    /// Seconds from the event until recovered.
    pub recover_s: Option<f64>,
}

/// What share of the accesses the copied keys of a preemptive join carry, on the proxy's
/// ring and the workload's zipf popularity (the report assumed about 98 %).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CopyShare {
    /// Keys whose owner changes.
    pub moved_keys: u64,
    /// The hottest `share` of them by count.
    pub hottest_keys: u64,
    /// Share of all accesses that go to moved keys.
    pub moved_share_of_accesses: f64,
    /// Share of the moved keys' accesses the hottest carry.
    pub hottest_share_of_moved_accesses: f64,
    /// Share of all accesses the hottest carry.
    pub hottest_share_of_accesses: f64,
}

/// One run's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    /// What ran.
    pub spec: RunSpec,
    /// Load average before and after.
    pub loadavg: [String; 2],
    /// Command lines of the processes.
    pub commands: Vec<String>,
    /// The bench's report.
    pub report: CacheAsideReport,
    /// Every request's latency in the measured window (nanoseconds; hdrhistogram V2, base64),
    /// which the report's p50 and p99 come from (absent in files written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<Encoded>,
    /// Against the baseline (None for baselines or when the baseline did not run).
    pub metrics: Option<Metrics>,
    /// A removal against the pool of the remaining size (the 3-server baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_remaining: Option<Metrics>,
    /// What the copied share of a preemptive join carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_share: Option<CopyShare>,
}

/// The whole experiment (results.json).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    /// `warmup`.
    pub experiment: String,
    /// Start time.
    pub started: String,
    /// How the file was produced: commit, machine, load and steal during the runs, command
    /// (absent in files written before the harness kept it).
    #[serde(default)]
    pub metadata: RunMetadata,
    /// Every requested run finished.
    pub complete: bool,
    /// The settings and how they scale the report's setup.
    pub settings: serde_json::Value,
    /// The runs.
    pub runs: Vec<RunResult>,
    /// Ratios and acceptance.
    pub summary: serde_json::Value,
}

fn workload(args: &Args) -> Arc<WorkloadSpec> {
    // The `uniform` preset has one pool of fixed 32-byte keys; the experiment sets the rest.
    let mut spec = WorkloadSpec::preset("uniform").unwrap_or_else(|_| unreachable_preset());
    spec.name = "warmup".into();
    spec.pools.truncate(1);
    let pool = &mut spec.pools[0];
    pool.keys = args.keys;
    pool.popularity = Popularity::Zipf {
        exponent: args.zipf,
    };
    let mean = f64::from(args.mean_value);
    pool.value_size = Distribution::Uniform {
        min: 0.3 * mean,
        max: 1.7 * mean,
    };
    spec.operations = vec![
        OperationSpec {
            kind: OpKind::Get,
            keys: 1,
            weight: 1.0 - args.set_share,
        },
        OperationSpec {
            kind: OpKind::Set,
            keys: 1,
            weight: args.set_share,
        },
    ];
    Arc::new(spec)
}

fn unreachable_preset() -> WorkloadSpec {
    // `uniform` is a built-in preset; this is never reached.
    WorkloadSpec::preset("etc").unwrap_or_else(|error| panic!("built-in presets: {error}"))
}

/// Bytes of keys and values of the workload (every key once).
fn data_bytes(workload: &WorkloadSpec) -> u64 {
    workload
        .all_keys()
        .map(|key| workload.value_len(key) + workload.key_len(key) as u64)
        .sum()
}

fn run_one(
    spec: &RunSpec,
    args: &Args,
    workload: &Arc<WorkloadSpec>,
    interactive: bool,
) -> Result<RunResult, String> {
    let before = load_average();
    let shape = ServerShape {
        threads: 1,
        memory_mb: args.memory_mb,
    };
    let tailtrim = tailtrim_binary()?;
    let server_program = program(&spec.program)?;
    let mut servers = Vec::new();
    for index in 0..4 {
        let name = format!("warmup-{index}");
        servers.push(Process::start(
            server_program.launch(&name, &tailtrim, &shape)?,
        )?);
    }
    let addresses: Vec<String> = servers.iter().map(Process::address).collect();
    let proxy = Process::start(crate::process::Launch::tailtrim_proxy(
        "proxy",
        &tailtrim,
        &addresses[..spec.servers],
        true,
        &[],
    )?)?;
    let admin = proxy
        .admin_address()
        .ok_or_else(|| "the proxy has no admin address".to_string())?;
    let duration = Duration::try_from_secs_f64(args.duration)
        .map_err(|_| "--duration must be a positive number".to_string())?;
    let rate = args.rate.unwrap_or(1_000.0);
    let mut config = CacheAsideConfig::new(&proxy.address(), rate, duration);
    config.warmup = Duration::try_from_secs_f64(args.warmup)
        .map_err(|_| "--warmup must be a non-negative number".to_string())?;
    config.db_latency = parse_duration(&args.db_latency).map_err(|error| error.to_string())?;
    config.workers = args.workers.unwrap_or(64);
    config.window_requests = args.window;
    config.seed = spec.seed;
    config.prefill = true;
    config.admin = Some(admin);
    if let Some(change) = &spec.change {
        config.events.push(ScheduledEvent {
            at: duration / 2,
            action: change.action.clone(),
            server: addresses[3].clone(),
            params: vec![
                ("warmup".into(), change.mode.clone()),
                ("share".into(), change.share.to_string()),
            ],
        });
    }
    let total_ms = (config.warmup + duration).as_millis() as u64;
    let label = format!("{} {} seed {}", spec.program, spec.name, spec.seed);
    let bar = progress_bar(interactive, total_ms, &label);
    let report = run_cache_aside(workload, &config, &mut |elapsed, done| {
        if let Some(bar) = &bar {
            bar.set_position(elapsed.as_millis() as u64);
            bar.set_message(format!("{done} requests"));
        }
    })
    .map_err(|error| format!("run {label}: {error}"))?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    for server in &mut servers {
        server.check_alive()?;
    }
    let mut proxy = proxy;
    proxy.check_alive()?;
    // Results are committed: name the program, not where it was built.
    let exe = std::env::current_exe()
        .map(|path| path.display().to_string())
        .unwrap_or_default();
    let mut commands: Vec<String> = servers
        .iter()
        .map(Process::command_line)
        .chain(std::iter::once(proxy.command_line()))
        .map(|line| match line.strip_prefix(&exe) {
            Some(rest) if !exe.is_empty() => format!("tailtrim{rest}"),
            _ => line,
        })
        .collect();
    commands.dedup();
    let latency_ns = match &report.latency_ns {
        Some(histogram) => Some(Encoded::encode(histogram).map_err(|error| error.to_string())?),
        None => None,
    };
    let copy_share = match &spec.change {
        Some(change) if change.action == "add" && change.mode.contains("preemptive") => report
            .events
            .first()
            .and_then(|event| copy_share(workload, &event.answer, change.share, args.zipf)),
        _ => None,
    };
    Ok(RunResult {
        spec: spec.clone(),
        loadavg: [before, load_average()],
        commands,
        report,
        latency_ns,
        metrics: None,
        metrics_remaining: None,
        copy_share,
    })
}

/// The ring of a member list as the proxy's admin answer prints it (`host:port:weight`).
fn ring_of(members: &serde_json::Value) -> Option<Ring> {
    let servers = members
        .as_array()?
        .iter()
        .map(|member| {
            let text = member.as_str()?;
            ServerSpec::parse(text).ok().map(|spec| spec.ring_server())
        })
        .collect::<Option<Vec<_>>>()?;
    let options = RingOptions {
        hash: HashFunction::from_name(PROXY_HASH).ok()?,
        ..RingOptions::default()
    };
    Ring::new(&servers, options).ok()
}

/// The share of accesses the hottest `share` (by count) of the keys a join moves carry, from
/// the admin answer's `before` and `after` members and zipf popularity (key id 0 hottest).
fn copy_share(
    workload: &WorkloadSpec,
    answer: &str,
    share: f64,
    exponent: f64,
) -> Option<CopyShare> {
    let answer: serde_json::Value = serde_json::from_str(answer).ok()?;
    let before = ring_of(&answer["before"])?;
    let after = ring_of(&answer["after"])?;
    let weight = |key: &KeyRef| 1.0 / (key.id as f64 + 1.0).powf(exponent);
    let mut total = 0.0;
    let mut moved: Vec<f64> = Vec::new();
    let mut name = Vec::new();
    for key in workload.all_keys() {
        name.clear();
        workload.write_key(key, &mut name);
        let access = weight(&key);
        total += access;
        let owner_before = before.server_for(&name);
        let owner_after = after.server_for(&name);
        // A key moves when its owner's listed name differs.
        let before_name = answer["before"][owner_before].as_str()?;
        let after_name = answer["after"][owner_after].as_str()?;
        if before_name != after_name {
            // all_keys runs in id order: hottest first.
            moved.push(access);
        }
    }
    let hottest = ((moved.len() as f64 * share).ceil() as usize).min(moved.len());
    let moved_total: f64 = moved.iter().sum();
    let hottest_total: f64 = moved[..hottest].iter().sum();
    Some(CopyShare {
        moved_keys: moved.len() as u64,
        hottest_keys: hottest as u64,
        moved_share_of_accesses: moved_total / total.max(f64::MIN_POSITIVE),
        hottest_share_of_moved_accesses: hottest_total / moved_total.max(f64::MIN_POSITIVE),
        hottest_share_of_accesses: hottest_total / total.max(f64::MIN_POSITIVE),
    })
}

fn smoothed(windows: &[WindowSample], at: usize) -> f64 {
    let from = at.saturating_sub(RECOVERY_SMOOTHING / 2);
    let to = (at + RECOVERY_SMOOTHING / 2 + 1).min(windows.len());
    let slice = &windows[from..to];
    slice.iter().map(|w| w.hit_ratio).sum::<f64>() / slice.len().max(1) as f64
}

/// The report's response time of a window: a cache read for every read, plus the database
/// for each miss (writes are left out: the report has none).
fn modelled_ms(window: &WindowSample, cache_read_ms: f64, db_ms: f64) -> f64 {
    let reads = window.hits + window.misses;
    if reads == 0 {
        return cache_read_ms;
    }
    cache_read_ms + db_ms * window.misses as f64 / reads as f64
}

/// Peak excess and area (seconds) of `series` over the windows `after`, against the level of
/// `baseline` over the same windows.
fn spike(
    series: &[f64],
    baseline: &[f64],
    after: std::ops::Range<usize>,
    window_requests: usize,
) -> (f64, f64, f64) {
    let count = after.len().max(1) as f64;
    let level = after.clone().map(|w| baseline[w]).sum::<f64>() / count;
    let peak = after.clone().map(|w| series[w]).fold(f64::MIN, f64::max);
    let area_ms: f64 = after.map(|w| (series[w] - level).max(0.0)).sum();
    (level, peak - level, area_ms * window_requests as f64 / 1e3)
}

/// Compares `run` with `baseline` from the run's first event on; `cache_read_ms` is the cache
/// read of the modelled response time.
#[must_use]
pub fn metrics(
    run: &CacheAsideReport,
    baseline: &CacheAsideReport,
    cache_read_ms: f64,
) -> Option<Metrics> {
    let event = run.events.first()?;
    let windows = &run.per_request;
    let base = &baseline.per_request;
    let count = windows.len().min(base.len());
    let event_window = (request_index_at(windows, event.sent_s) as usize / run.window_requests)
        .min(count.saturating_sub(1));
    let after = event_window..count;
    let difference = |range: std::ops::Range<usize>| -> i64 {
        range
            .map(|w| windows[w].misses as i64 - base[w].misses as i64)
            .sum()
    };
    let half = event_window + (count - event_window) / 2;
    let dip = after
        .clone()
        .min_by(|&a, &b| windows[a].hit_ratio.total_cmp(&windows[b].hit_ratio))?;
    let peak = |samples: &[WindowSample]| {
        after
            .clone()
            .map(|w| samples[w].mean_us / 1e3)
            .fold(0.0, f64::max)
    };
    let measured = |samples: &[WindowSample]| -> Vec<f64> {
        samples.iter().map(|w| w.mean_us / 1e3).collect()
    };
    let db_ms = run.db_latency_ms;
    let modelled = |samples: &[WindowSample]| -> Vec<f64> {
        samples
            .iter()
            .map(|w| modelled_ms(w, cache_read_ms, db_ms))
            .collect()
    };
    let (level, peak_excess, area) = spike(
        &measured(windows),
        &measured(base),
        after.clone(),
        run.window_requests,
    );
    let (modelled_level, modelled_peak, modelled_area) = spike(
        &modelled(windows),
        &modelled(base),
        after.clone(),
        run.window_requests,
    );
    // Recovered at the first window from which the smoothed hit ratio never falls more than
    // the tolerance below the baseline's.
    let mut recovered: Option<usize> = None;
    for w in after.clone().rev() {
        if smoothed(windows, w) + RECOVERY_TOLERANCE < smoothed(base, w) {
            break;
        }
        recovered = Some(w);
    }
    let recovered = recovered.filter(|&w| w + RECOVERY_SMOOTHING < count || w == event_window);
    Some(Metrics {
        event_window,
        event_sent_s: event.sent_s,
        event_answered_s: event.answered_s,
        extra_misses: difference(after.clone()),
        extra_misses_first_half: difference(event_window..half),
        misses_after: after.clone().map(|w| windows[w].misses).sum(),
        baseline_misses_after: after.clone().map(|w| base[w].misses).sum(),
        deepest_hit_ratio: windows[dip].hit_ratio,
        baseline_hit_ratio_at_dip: base[dip].hit_ratio,
        peak_mean_ms: peak(windows),
        baseline_peak_mean_ms: peak(base),
        baseline_level_ms: level,
        peak_excess_ms: peak_excess,
        spike_area_s: area,
        modelled_baseline_level_ms: modelled_level,
        modelled_peak_excess_ms: modelled_peak,
        modelled_spike_area_s: modelled_area,
        recover_requests: recovered.map(|w| ((w - event_window) * run.window_requests) as u64),
        recover_s: recovered.map(|w| (windows[w].time_s - event.sent_s).max(0.0)),
    })
}

/// A baseline's own "spike" after half time against its own level: the noise floor of the
/// peak excess, on the modelled (cache read 0.3 ms) or the measured response time.
fn noise_floor_ms(baseline: &CacheAsideReport, modelled: bool) -> f64 {
    let windows = &baseline.per_request;
    let series: Vec<f64> = windows
        .iter()
        .map(|w| {
            if modelled {
                modelled_ms(w, REPORT_CACHE_READ_MS, baseline.db_latency_ms)
            } else {
                w.mean_us / 1e3
            }
        })
        .collect();
    if series.is_empty() {
        return 0.0;
    }
    spike(
        &series,
        &series,
        series.len() / 2..series.len(),
        baseline.window_requests,
    )
    .1
}

/// Median, lowest and highest of per-seed values, with the values (in seed order).
fn spread(values: &[f64]) -> serde_json::Value {
    if values.is_empty() {
        return serde_json::Value::Null;
    }
    serde_json::json!({
        "median": median(values),
        "min": values.iter().copied().fold(f64::INFINITY, f64::min),
        "max": values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        "values": values,
    })
}

/// `numerator / denominator` when the denominator is positive.
fn ratio(numerator: f64, denominator: f64) -> Option<f64> {
    (denominator > 0.0).then(|| numerator / denominator)
}

fn distinct<T: PartialEq + Clone>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// The numbers of one metric, picked from a run's metrics.
type Pick = fn(&Metrics) -> f64;

const SPIKE_NUMBERS: [(&str, Pick); 5] = [
    ("peak_excess_ms", |m| m.peak_excess_ms),
    ("spike_area_s", |m| m.spike_area_s),
    ("extra_misses", |m| m.extra_misses as f64),
    ("modelled_peak_excess_ms", |m| m.modelled_peak_excess_ms),
    ("modelled_spike_area_s", |m| m.modelled_spike_area_s),
];

fn program_summary(runs: &[&RunResult]) -> serde_json::Value {
    let find = |name: &str, seed: u64| {
        runs.iter()
            .find(|run| run.spec.name == name && run.spec.seed == seed)
            .copied()
    };
    let seeds = distinct(runs.iter().map(|run| run.spec.seed));
    let names = distinct(runs.iter().map(|run| run.spec.name.clone()));
    let mut per_run = serde_json::Map::new();
    for name in &names {
        let chosen: Vec<&RunResult> = seeds.iter().filter_map(|&s| find(name, s)).collect();
        let mut entry = serde_json::Map::new();
        entry.insert(
            "hit_ratio".into(),
            spread(
                &chosen
                    .iter()
                    .map(|r| r.report.hit_ratio)
                    .collect::<Vec<_>>(),
            ),
        );
        entry.insert(
            "mean_ms".into(),
            spread(
                &chosen
                    .iter()
                    .map(|r| r.report.mean_us / 1e3)
                    .collect::<Vec<_>>(),
            ),
        );
        for (label, pick) in SPIKE_NUMBERS {
            let values: Vec<f64> = chosen
                .iter()
                .filter_map(|r| r.metrics.as_ref().map(pick))
                .collect();
            entry.insert(label.into(), spread(&values));
            let remaining: Vec<f64> = chosen
                .iter()
                .filter_map(|r| r.metrics_remaining.as_ref().map(pick))
                .collect();
            if !remaining.is_empty() {
                entry.insert(format!("{label}_vs_remaining_pool"), spread(&remaining));
            }
        }
        let shares: Vec<&CopyShare> = chosen
            .iter()
            .filter_map(|r| r.copy_share.as_ref())
            .collect();
        if !shares.is_empty() {
            entry.insert(
                "copy_share".into(),
                serde_json::json!({
                    "moved_keys": spread(&shares.iter().map(|c| c.moved_keys as f64).collect::<Vec<_>>()),
                    "hottest_keys": spread(&shares.iter().map(|c| c.hottest_keys as f64).collect::<Vec<_>>()),
                    "hottest_share_of_moved_accesses": spread(&shares.iter().map(|c| c.hottest_share_of_moved_accesses).collect::<Vec<_>>()),
                    "hottest_share_of_accesses": spread(&shares.iter().map(|c| c.hottest_share_of_accesses).collect::<Vec<_>>()),
                }),
            );
        }
        if chosen.iter().all(|r| r.spec.change.is_none()) {
            for (label, modelled) in [
                ("noise_floor_peak_excess_ms", false),
                ("noise_floor_modelled_peak_excess_ms", true),
            ] {
                let values: Vec<f64> = chosen
                    .iter()
                    .map(|r| noise_floor_ms(&r.report, modelled))
                    .collect();
                entry.insert(label.into(), spread(&values));
            }
        }
        per_run.insert(name.clone(), serde_json::Value::Object(entry));
    }
    // The ratio of a run's spike number to its reference run's, per seed that has both.
    let seed_ratios = |name: &str, reference: &str, pick: Pick| -> Vec<f64> {
        seeds
            .iter()
            .filter_map(|&seed| {
                let run = find(name, seed)?.metrics.as_ref()?;
                let base = find(reference, seed)?.metrics.as_ref()?;
                ratio(pick(run), pick(base))
            })
            .collect()
    };
    // Per-seed ratios of a run to its reference run, for every spike number.
    let ratios = |name: &str, reference: &str| -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for (label, pick) in SPIKE_NUMBERS {
            out.insert(label.into(), spread(&seed_ratios(name, reference, pick)));
        }
        serde_json::Value::Object(out)
    };
    let median_ratio = |name: &str, reference: &str, pick: Pick| -> Option<f64> {
        let values = seed_ratios(name, reference, pick);
        (!values.is_empty()).then(|| median(&values))
    };
    let median_of = |name: &str, pick: fn(&RunResult) -> Option<f64>| -> Option<f64> {
        let values: Vec<f64> = seeds
            .iter()
            .filter_map(|&seed| find(name, seed).and_then(pick))
            .collect();
        (!values.is_empty()).then(|| median(&values))
    };
    let at_most = |value: Option<f64>, limit: f64| value.map(|v| v <= limit);
    let misses: Pick = |m| m.extra_misses as f64;
    // The same reading on the modelled and on the measured response time.
    let reading = |peak: Pick, modelled: bool| -> serde_json::Value {
        let cold_peak = median_of("cold", |r| r.metrics.as_ref().map(|m| m.peak_excess_ms));
        let cold_modelled = median_of("cold", |r| {
            r.metrics.as_ref().map(|m| m.modelled_peak_excess_ms)
        });
        let floor = if modelled {
            median_of("baseline", |r| Some(noise_floor_ms(&r.report, true)))
        } else {
            median_of("baseline", |r| Some(noise_floor_ms(&r.report, false)))
        };
        let cold = if modelled { cold_modelled } else { cold_peak };
        serde_json::json!({
            "cold_peak_excess_at_least_3x_noise_floor":
                cold.zip(floor).map(|(cold, floor)| cold >= 3.0 * floor),
            "preemptive_peak_over_cold_at_most_0.3":
                at_most(median_ratio("preemptive", "cold", peak), 0.3),
            "preemptive+fallback_peak_over_cold_at_most_0.1":
                at_most(median_ratio("preemptive+fallback", "cold", peak), 0.1),
            "preemptive+fallback_extra_misses_over_cold_at_most_0.1":
                at_most(median_ratio("preemptive+fallback", "cold", misses), 0.1),
            "drain_peak_over_no_drain_at_most_0.3":
                at_most(median_ratio("remove-drain", "remove-cold", peak), 0.3),
        })
    };
    let modelled_reading = reading(|m| m.modelled_peak_excess_ms, true);
    let measured_reading = reading(|m| m.peak_excess_ms, false);
    let wrong: u64 = runs
        .iter()
        .map(|run| run.report.wrong_values + run.report.stale_values)
        .sum();
    let errors: u64 = runs.iter().map(|run| run.report.errors).sum();
    serde_json::json!({
        "seeds": seeds,
        "runs": per_run,
        "vs_cold": {
            "fallback": ratios("fallback", "cold"),
            "preemptive": ratios("preemptive", "cold"),
            "preemptive+fallback": ratios("preemptive+fallback", "cold"),
        },
        "drain_vs_no_drain": ratios("remove-drain", "remove-cold"),
        "wrong_or_stale_values": wrong,
        "client_errors": errors,
        "acceptance": {
            "modelled": modelled_reading,
            "measured": measured_reading,
            "zero_wrong_values_and_errors": wrong == 0 && errors == 0,
        },
    })
}

fn summary(runs: &[RunResult]) -> serde_json::Value {
    let wrong: u64 = runs
        .iter()
        .map(|run| run.report.wrong_values + run.report.stale_values)
        .sum();
    let errors: u64 = runs.iter().map(|run| run.report.errors).sum();
    let mut programs = serde_json::Map::new();
    for name in distinct(runs.iter().map(|run| run.spec.program.clone())) {
        let chosen: Vec<&RunResult> = runs.iter().filter(|run| run.spec.program == name).collect();
        programs.insert(name, program_summary(&chosen));
    }
    serde_json::json!({
        "wrong_or_stale_values": wrong,
        "client_errors": errors,
        "programs": programs,
    })
}

fn markdown(results: &Results) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# warmup: results ({}{})\n",
        results.started,
        if results.complete { "" } else { ", incomplete" }
    );
    let _ = writeln!(
        out,
        "Peak excess = highest 1000-request window mean from the event on − the baseline's \
         mean of window means over the same windows (its level); area = Σ max(0, window mean − \
         level) × window requests, seconds; modelled = the same on cache read + database × \
         miss share; extra misses = Σ (misses − the baseline's) from the event on. Removals \
         are compared with the 4-server baseline, and (\"remaining\") with the 3-server one.\n"
    );
    let mut table = Table::aligned(
        [
            "program",
            "seed",
            "run",
            "requests",
            "hit ratio",
            "mean ms",
            "p99 ms",
            "level ms",
            "peak excess ms",
            "area s",
            "modelled peak excess ms",
            "extra misses",
            "remaining: peak excess ms, extra misses",
            "copied (moved held)",
            "hottest share of moved / all accesses",
            "recover s",
            "switch s",
            "wrong+stale",
            "errors",
        ],
        Align::Left,
    )
    .padding_empty_cells();
    for run in &results.runs {
        let report = &run.report;
        let numbers = match &run.metrics {
            Some(m) => vec![
                format!("{:.3}", m.baseline_level_ms),
                format!("{:.3}", m.peak_excess_ms),
                format!("{:.1}", m.spike_area_s),
                format!("{:.3}", m.modelled_peak_excess_ms),
                m.extra_misses.to_string(),
                run.metrics_remaining.as_ref().map_or(String::new(), |r| {
                    format!("{:.3}, {}", r.peak_excess_ms, r.extra_misses)
                }),
                copied(run),
                run.copy_share.as_ref().map_or(String::new(), |c| {
                    format!(
                        "{:.3} / {:.3}",
                        c.hottest_share_of_moved_accesses, c.hottest_share_of_accesses
                    )
                }),
            ],
            // A run without metrics (a baseline) has always had its eight columns written as
            // one blank stretch: ` | | | | | | | `.
            None => vec![" | | | | | | | ".to_string()],
        };
        let (recover, switch) = run.metrics.as_ref().map_or_else(Default::default, |m| {
            (
                m.recover_s
                    .map_or("not within the run".into(), |s| format!("{s:.1}")),
                format!("{:.2}", m.event_answered_s - m.event_sent_s),
            )
        });
        let measured = [
            run.spec.program.clone(),
            run.spec.seed.to_string(),
            run.spec.name.clone(),
            report.requests.to_string(),
            format!("{:.4}", report.hit_ratio),
            format!("{:.3}", report.mean_us / 1e3),
            format!("{:.2}", report.p99_us / 1e3),
        ];
        let checks = [
            recover,
            switch,
            (report.wrong_values + report.stale_values).to_string(),
            report.errors.to_string(),
        ];
        table.push(measured.into_iter().chain(numbers).chain(checks));
    }
    out.push_str(&table.render());
    for run in &results.runs {
        for (kind, count) in &run.report.error_kinds {
            let _ = writeln!(
                out,
                "\n{} {} seed {}: {count} client errors: {kind}",
                run.spec.program, run.spec.name, run.spec.seed
            );
        }
    }
    if let Some(programs) = results.summary["programs"].as_object() {
        for (name, program) in programs {
            let _ = writeln!(
                out,
                "\n## {name}: median [min, max] over seeds {}\n",
                program["seeds"]
            );
            let mut spreads = Table::aligned(
                [
                    "run",
                    "hit ratio",
                    "peak excess ms",
                    "area s",
                    "extra misses",
                    "modelled peak excess ms",
                ],
                Align::Left,
            );
            if let Some(runs) = program["runs"].as_object() {
                for (run, numbers) in runs {
                    spreads.push([
                        run.clone(),
                        spread_text(&numbers["hit_ratio"], 4),
                        spread_text(&numbers["peak_excess_ms"], 3),
                        spread_text(&numbers["spike_area_s"], 1),
                        spread_text(&numbers["extra_misses"], 0),
                        spread_text(&numbers["modelled_peak_excess_ms"], 3),
                    ]);
                }
            }
            let _ = writeln!(out, "{}", spreads.render());
            let mut ratios = Table::aligned(
                [
                    "ratio (per seed)",
                    "peak excess",
                    "area",
                    "extra misses",
                    "modelled peak excess",
                ],
                Align::Left,
            );
            let mut ratio_rows: Vec<(String, &serde_json::Value)> = Vec::new();
            if let Some(vs_cold) = program["vs_cold"].as_object() {
                for (run, numbers) in vs_cold {
                    ratio_rows.push((format!("{run} / cold"), numbers));
                }
            }
            ratio_rows.push((
                "remove-drain / remove-cold".into(),
                &program["drain_vs_no_drain"],
            ));
            for (label, numbers) in ratio_rows {
                ratios.push([
                    label,
                    spread_text(&numbers["peak_excess_ms"], 3),
                    spread_text(&numbers["spike_area_s"], 3),
                    spread_text(&numbers["extra_misses"], 3),
                    spread_text(&numbers["modelled_peak_excess_ms"], 3),
                ]);
            }
            out.push_str(&ratios.render());
            let _ = writeln!(out, "\nAcceptance: `{}`", program["acceptance"]);
        }
    }
    let _ = writeln!(
        out,
        "\nwrong or stale values: {}, client errors: {}",
        results.summary["wrong_or_stale_values"], results.summary["client_errors"]
    );
    out
}

/// `copied (moved held)` from a run's admin answer.
fn copied(run: &RunResult) -> String {
    let Some(event) = run.report.events.first() else {
        return String::new();
    };
    let answer: serde_json::Value = serde_json::from_str(&event.answer).unwrap_or_default();
    match (answer["copied"].as_u64(), answer["moved_held"].as_u64()) {
        (Some(copied), Some(held)) if held > 0 => format!("{copied} ({held})"),
        _ => String::new(),
    }
}

/// `median [min, max]` of a spread, `digits` decimals.
fn spread_text(spread: &serde_json::Value, digits: usize) -> String {
    match (
        spread["median"].as_f64(),
        spread["min"].as_f64(),
        spread["max"].as_f64(),
    ) {
        (Some(median), Some(min), Some(max)) => {
            format!("{median:.digits$} [{min:.digits$}, {max:.digits$}]")
        }
        _ => "–".into(),
    }
}

fn plot(results: &Results, out: &Path) -> Result<(), String> {
    let thousands = |w: &WindowSample| w.start as f64 / 1e3;
    let programs = distinct(results.runs.iter().map(|run| run.spec.program.clone()));
    for program in programs {
        let Some(seed) = results
            .runs
            .iter()
            .find(|run| run.spec.program == program)
            .map(|run| run.spec.seed)
        else {
            continue;
        };
        for (name, runs) in [
            (
                "join",
                [
                    "baseline",
                    "cold",
                    "fallback",
                    "preemptive",
                    "preemptive+fallback",
                ]
                .as_slice(),
            ),
            (
                "removal",
                ["baseline-4", "baseline", "remove-cold", "remove-drain"].as_slice(),
            ),
        ] {
            // `NAME@SHARE` runs join their NAME's figure, after it.
            let chosen: Vec<&RunResult> = runs
                .iter()
                .flat_map(|wanted| {
                    results.runs.iter().filter(|run| {
                        run.spec.name.split('@').next() == Some(*wanted)
                            && run.spec.program == program
                            && run.spec.seed == seed
                    })
                })
                .collect();
            if !chosen.iter().any(|run| run.spec.change.is_some()) {
                continue;
            }
            let markers: Vec<f64> = chosen
                .iter()
                .filter_map(|run| run.metrics.as_ref())
                .map(|m| (m.event_window * chosen[0].report.window_requests) as f64 / 1e3)
                .take(1)
                .collect();
            let window = chosen[0].report.window_requests;
            // A run's line: `value` of each window against the requests sent before it.
            let run_line = |run: &RunResult, value: &dyn Fn(&WindowSample) -> f64| {
                let points = run.report.per_request.iter();
                Line::new(
                    run.spec.name.clone(),
                    points.map(|w| (thousands(w), value(w))).collect(),
                )
            };
            let lines = |pick: fn(&WindowSample) -> f64| -> Vec<Line> {
                chosen.iter().map(|run| run_line(run, &pick)).collect()
            };
            let x_desc = format!("requests (thousands; windows of {window})");
            let modelled_lines: Vec<Line> = chosen
                .iter()
                .map(|run| {
                    let db_ms = run.report.db_latency_ms;
                    run_line(run, &|w| modelled_ms(w, REPORT_CACHE_READ_MS, db_ms) * 1e3)
                })
                .collect();
            let panels = [
                Panel {
                    title: format!(
                        "{name}, {program} (seed {seed}): measured mean response time per {window} requests"
                    ),
                    x_desc: x_desc.clone(),
                    y_desc: "measured (log)".into(),
                    log_y: true,
                    latency: true,
                    lines: lines(|w| w.mean_us),
                    markers: markers.clone(),
                },
                Panel {
                    title: format!(
                        "modelled: {REPORT_CACHE_READ_MS} ms per cache read + database per miss"
                    ),
                    x_desc: x_desc.clone(),
                    y_desc: "modelled".into(),
                    latency: true,
                    lines: modelled_lines,
                    markers: markers.clone(),
                    ..Panel::default()
                },
                Panel {
                    title: format!("hit ratio per {window} requests"),
                    x_desc,
                    y_desc: "hit ratio".into(),
                    lines: lines(|w| w.hit_ratio),
                    markers,
                    ..Panel::default()
                },
            ];
            // Files written before the programs were recorded keep their figures' names.
            let file = if results.settings.get("programs").is_some() {
                format!("{name}-{program}")
            } else {
                name.to_string()
            };
            plot_panels(out, &file, &panels).map_err(|error| error.to_string())?;
        }
    }
    Ok(())
}

/// Recomputes every run's p50 and p99 from the histogram it kept; an error names the first
/// that differs. Returns how many runs kept one.
fn check_percentiles(results: &Results) -> Result<usize, String> {
    let mut checked = 0;
    for run in &results.runs {
        let Some(encoded) = &run.latency_ns else {
            continue;
        };
        for (label, percentile, reported) in [
            ("p50", 50.0, run.report.p50_us),
            ("p99", 99.0, run.report.p99_us),
        ] {
            let again = encoded.percentile(percentile, 1e3).unwrap_or(0.0);
            if (again - reported).abs() > 1e-6 {
                return Err(format!(
                    "run {}: reported {label} {reported} µs, its histogram's {again} µs",
                    run.spec.name
                ));
            }
        }
        checked += 1;
    }
    Ok(checked)
}

fn write(results: &Results, out: &Path) -> Result<(), String> {
    write_json(out, results)?;
    write_text(out, "results.md", &markdown(results))?;
    plot(results, out)
}

/// Sets what `--quick` and `--paper` set, and the defaults of the optional flags.
fn resolve(args: &mut Args) {
    if args.quick {
        args.keys = 2_000;
        args.memory_mb = 2;
        args.mean_value = 1_500;
        args.rate.get_or_insert(600.0);
        args.duration = 6.0;
        args.warmup = 1.0;
        args.window = 200;
        args.workers.get_or_insert(16);
    }
    if args.paper {
        args.keys = PAPER_KEYS;
        // 32-byte keys: the mean value that makes keys and values 229 MB.
        args.mean_value = (PAPER_DATA_BYTES / PAPER_KEYS as f64 - 32.0).round() as u32;
        args.memory_mb = PAPER_MEMORY_MB;
        args.warmup = 5.0;
        args.rate.get_or_insert(PAPER_RATE);
        args.requests.get_or_insert(PAPER_REQUESTS);
        args.workers.get_or_insert(PAPER_WORKERS);
        args.runs.get_or_insert_with(|| PAPER_RUNS.into());
        args.programs
            .get_or_insert_with(|| "tailtrim,memcached".into());
    }
    let rate = *args.rate.get_or_insert(1_000.0);
    args.workers.get_or_insert(64);
    args.runs.get_or_insert_with(|| DEFAULT_RUNS.into());
    args.programs.get_or_insert_with(default_program);
    if let Some(requests) = args.requests {
        args.duration = requests as f64 / rate;
    }
}

/// Runs `tailtrim experiment warmup`.
pub fn run(mut args: Args) -> Result<std::process::ExitCode, String> {
    if !args.replot {
        resolve(&mut args);
    }
    // Each run draws its own bar.
    let terminal = Terminal::without_bar();
    command(&Warmup { args: &args }, &args.out, args.replot, &terminal)
}

/// Scale-out and scale-in under cache-aside load: every program, seed and run of `args`
/// (resolved), interleaved; the results so far are kept after every run.
pub struct Warmup<'a> {
    /// The command's arguments, `--quick` and `--paper` resolved.
    pub args: &'a Args,
}

impl Experiment for Warmup<'_> {
    type Results = Results;

    fn run(&self, progress: ProgressFn<'_>) -> Result<Results, String> {
        run_all(self.args, progress)
    }

    fn check(results: &Results) -> Result<usize, String> {
        check_percentiles(results)
    }

    fn render(results: &Results, out: &Path) -> Result<(), String> {
        write_text(out, "results.md", &markdown(results))?;
        plot(results, out)
    }

    fn summarise(results: &Results) -> String {
        markdown(results)
    }
}

/// Runs every program, seed and run, keeping the results so far after each.
fn run_all(args: &Args, progress: ProgressFn<'_>) -> Result<Results, String> {
    let names: Vec<String> = args
        .programs
        .as_deref()
        .unwrap_or("tailtrim")
        .split(',')
        .map(|name| name.trim().to_string())
        .collect();
    for name in &names {
        program(name)?;
    }
    let specs: Vec<RunSpec> = args
        .runs
        .as_deref()
        .unwrap_or(DEFAULT_RUNS)
        .split(',')
        .map(|name| run_spec(name.trim(), args))
        .collect::<Result<_, _>>()?;
    if args.seeds.is_empty() {
        return Err("--seeds: at least one seed".into());
    }
    let workload = workload(args);
    let interactive = std::io::stderr().is_terminal();
    let data_mb = data_bytes(&workload) as f64 / 1e6;
    let mut recorder = Recorder::start();
    if names.iter().any(|name| name == "memcached") {
        recorder.tool("memcached", program_version("memcached"));
    }
    let mut results = Results {
        experiment: "warmup".into(),
        metadata: recorder.snapshot(),
        started: utc_timestamp(),
        complete: false,
        settings: serde_json::json!({
            "quick": args.quick,
            "paper": args.paper,
            "programs": names,
            "seeds": args.seeds,
            "rate_rps": args.rate,
            "duration_s": args.duration,
            "requests": args.requests,
            "warmup_s": args.warmup,
            "event_at_s": args.duration / 2.0,
            "keys": args.keys,
            "mean_value_bytes": args.mean_value,
            "data_mb": data_mb,
            "memory_mb_per_server": args.memory_mb,
            "pool_memory_mb": 3 * args.memory_mb,
            "zipf": args.zipf,
            "set_share": args.set_share,
            "db_latency": args.db_latency,
            "modelled_cache_read_ms": REPORT_CACHE_READ_MS,
            "warm_share": args.warm_share,
            "drain_share": args.drain_share,
            "workers": args.workers,
            "window_requests": args.window,
            "report_setting": "3 servers × 64 MB, 68k keys and 229 MB of data, 475k zipf requests, database 8 ms, cache read 0.3 ms",
        }),
        runs: Vec::new(),
        summary: serde_json::Value::Null,
    };
    // Baselines by (program, seed, name), to compare the runs after them with.
    let mut baselines: BTreeMap<(String, u64, String), CacheAsideReport> = BTreeMap::new();
    let total = (args.seeds.len() * names.len() * specs.len()) as u64;
    for (round, &seed) in args.seeds.iter().enumerate() {
        for which in interleaved_order(names.len(), round) {
            let program_name = &names[which];
            for spec in &specs {
                let spec = RunSpec {
                    program: program_name.clone(),
                    seed,
                    ..spec.clone()
                };
                eprintln!(
                    "warmup: {} {} seed {} (load {})",
                    spec.program,
                    spec.name,
                    spec.seed,
                    load_average()
                );
                let mut result = run_one(&spec, args, &workload, interactive)?;
                let key = |name: &str| (spec.program.clone(), spec.seed, name.to_string());
                if let Some(baseline) = baselines.get(&key(&spec.baseline)) {
                    result.metrics = metrics(&result.report, baseline, REPORT_CACHE_READ_MS);
                }
                if spec.servers == 4 {
                    if let Some(remaining) = baselines.get(&key("baseline")) {
                        result.metrics_remaining =
                            metrics(&result.report, remaining, REPORT_CACHE_READ_MS);
                    }
                }
                if spec.change.is_none() {
                    baselines.insert(key(&spec.name), result.report.clone());
                }
                eprint!("{}", result.report.to_table());
                results.runs.push(result);
                results.summary = summary(&results.runs);
                results.metadata = recorder.snapshot();
                write(&results, &args.out)?;
                progress(Progress {
                    stage: "warmup",
                    done: results.runs.len() as u64,
                    total,
                });
            }
        }
    }
    results.complete = true;
    results.metadata = recorder.finish();
    Ok(results)
}
#[cfg(test)]
mod tests {
    use super::*;

    fn report(misses: &[u64]) -> CacheAsideReport {
        CacheAsideReport {
            window_requests: 100,
            per_request: misses
                .iter()
                .enumerate()
                .map(|(i, &m)| WindowSample {
                    start: (i * 100) as u64,
                    time_s: i as f64,
                    requests: 100,
                    hits: 100 - m,
                    misses: m,
                    hit_ratio: (100 - m) as f64 / 100.0,
                    mean_us: 1_000.0 + 8_000.0 * m as f64 / 100.0,
                    ..WindowSample::default()
                })
                .collect(),
            ..CacheAsideReport::default()
        }
    }

    #[test]
    fn extra_misses_dip_and_recovery_against_the_baseline() {
        let base = report(&[10; 20]);
        let mut run = report(&[
            10, 10, 10, 10, 10, 40, 30, 20, 12, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10,
        ]);
        run.events.push(tailtrim_bench::cacheaside::EventRecord {
            sent_s: 5.0,
            answered_s: 5.1,
            ..Default::default()
        });
        let m = metrics(&run, &base, 0.3).unwrap_or_else(|| panic!("metrics"));
        assert_eq!(m.event_window, 5);
        assert_eq!(m.extra_misses, 30 + 20 + 10 + 2);
        assert!((m.deepest_hit_ratio - 0.6).abs() < 1e-9);
        assert!((m.peak_mean_ms - 4.2).abs() < 1e-9);
        // Smoothed over 5 windows, within 1 point of the baseline from window 10 on.
        assert_eq!(m.recover_requests, Some(500));
        // A run that never comes back does not recover.
        let mut never = report(&[
            10, 10, 10, 10, 10, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40,
        ]);
        never.events = run.events.clone();
        assert_eq!(metrics(&never, &base, 0.3).and_then(|m| m.recover_s), None);
        // No event: no metrics.
        assert!(metrics(&base, &base, 0.3).is_none());
    }

    #[test]
    fn spike_peak_and_area_are_measured_against_the_baselines_level() {
        // The baseline's level after the event is 1 ms; the run peaks at 4 ms and returns
        // below the baseline (a 4th server relieves a thrashing pool): only the part above
        // the level counts towards the area.
        let baseline = [1.0, 1.0, 0.5, 1.5, 1.0, 1.0];
        let run = [1.0, 1.0, 4.0, 2.0, 0.5, 0.5];
        let (level, peak, area) = spike(&run, &baseline, 2..6, 1_000);
        assert!((level - 1.0).abs() < 1e-12);
        assert!((peak - 3.0).abs() < 1e-12);
        // (3 + 1) ms above the level × 1000 requests = 4 s of response time.
        assert!((area - 4.0).abs() < 1e-9);
        // A run equal to its baseline has no area; its peak is the baseline's own noise.
        let (_, own_peak, own_area) = spike(&baseline, &baseline, 2..6, 1_000);
        assert!((own_peak - 0.5).abs() < 1e-12);
        assert!((own_area - 0.5).abs() < 1e-9);
    }

    #[test]
    fn modelled_response_time_charges_the_database_per_missed_read() {
        let window = WindowSample {
            hits: 900,
            misses: 100,
            ..WindowSample::default()
        };
        assert!((modelled_ms(&window, 0.3, 8.0) - (0.3 + 0.8)).abs() < 1e-12);
        assert!((modelled_ms(&WindowSample::default(), 0.3, 8.0) - 0.3).abs() < 1e-12);
        // In the metrics: the cold run's first windows miss 40 and 30 of 100 reads.
        let base = report(&[10; 20]);
        let mut run = report(&[
            10, 10, 10, 10, 10, 40, 30, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10,
        ]);
        run.db_latency_ms = 8.0;
        run.events.push(tailtrim_bench::cacheaside::EventRecord {
            sent_s: 5.0,
            ..Default::default()
        });
        let m = metrics(&run, &base, 0.3).unwrap_or_else(|| panic!("metrics"));
        assert!((m.modelled_baseline_level_ms - (0.3 + 0.8)).abs() < 1e-9);
        assert!((m.modelled_peak_excess_ms - 8.0 * 0.3).abs() < 1e-9);
        // (2.4 + 1.6) ms × 100 requests per window.
        assert!((m.modelled_spike_area_s - 0.4).abs() < 1e-9);
    }

    #[test]
    fn copy_share_follows_the_ring_and_zipf_popularity() {
        let args = <TestArgs as clap::Parser>::parse_from(["test", "--keys", "20000"]).args;
        let spec = workload(&args);
        let answer = serde_json::json!({
            "before": ["127.0.0.1:20001:1", "127.0.0.1:20002:1", "127.0.0.1:20003:1"],
            "after": ["127.0.0.1:20001:1", "127.0.0.1:20002:1", "127.0.0.1:20003:1",
                      "127.0.0.1:20004:1"],
        })
        .to_string();
        let share = copy_share(&spec, &answer, 0.2, 0.99).unwrap_or_else(|| panic!("share"));
        // About a quarter of the keys move to the 4th server, and so about a quarter of the
        // accesses; the hottest fifth of them by count carries most of the moved accesses.
        let moved = share.moved_keys as f64 / 20_000.0;
        assert!((0.15..0.35).contains(&moved), "{share:?}");
        assert_eq!(
            share.hottest_keys,
            (share.moved_keys as f64 * 0.2).ceil() as u64
        );
        assert!(
            share.hottest_share_of_moved_accesses > 0.7
                && share.hottest_share_of_moved_accesses < 0.95,
            "{share:?}"
        );
        assert!(
            (share.hottest_share_of_accesses
                - share.hottest_share_of_moved_accesses * share.moved_share_of_accesses)
                .abs()
                < 1e-9
        );
        // No change of members: nothing moves.
        let same = serde_json::json!({
            "before": ["127.0.0.1:20001:1", "127.0.0.1:20002:1"],
            "after": ["127.0.0.1:20001:1", "127.0.0.1:20002:1"],
        })
        .to_string();
        let none = copy_share(&spec, &same, 0.2, 0.99).unwrap_or_else(|| panic!("share"));
        assert_eq!(none.moved_keys, 0);
    }

    #[derive(clap::Parser)]
    struct TestArgs {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn paper_sets_the_reports_setting() {
        let mut args =
            <TestArgs as clap::Parser>::parse_from(["test", "--paper", "--seeds", "1,2"]).args;
        resolve(&mut args);
        assert_eq!(args.keys, 68_000);
        assert_eq!(args.memory_mb, 64);
        assert_eq!(args.requests, Some(475_000));
        assert_eq!(args.programs.as_deref(), Some("tailtrim,memcached"));
        assert_eq!(args.runs.as_deref(), Some(PAPER_RUNS));
        assert_eq!(args.seeds, vec![1, 2]);
        assert!((args.duration - 475_000.0 / PAPER_RATE).abs() < 1e-9);
        let data = data_bytes(&workload(&args)) as f64;
        assert!((data / 229e6 - 1.0).abs() < 0.01, "{data}");
    }

    #[test]
    fn replot_recomputes_each_runs_percentiles_from_its_histogram() {
        let mut histogram = hdrhistogram::Histogram::<u64>::new(3).unwrap_or_else(|_| panic!());
        for nanos in 1..=1000u64 {
            histogram.saturating_record(nanos * 1_000);
        }
        let mut run = RunResult {
            spec: RunSpec {
                name: "baseline".into(),
                servers: 3,
                change: None,
                baseline: "baseline".into(),
                program: "tailtrim".into(),
                seed: 1,
            },
            loadavg: [String::new(), String::new()],
            commands: Vec::new(),
            report: CacheAsideReport {
                p50_us: histogram.value_at_quantile(0.5) as f64 / 1e3,
                p99_us: histogram.value_at_quantile(0.99) as f64 / 1e3,
                ..CacheAsideReport::default()
            },
            latency_ns: Some(Encoded::encode(&histogram).unwrap_or_else(|_| panic!())),
            metrics: None,
            metrics_remaining: None,
            copy_share: None,
        };
        let mut results = Results {
            experiment: "warmup".into(),
            started: String::new(),
            metadata: RunMetadata::default(),
            complete: true,
            settings: serde_json::Value::Null,
            runs: vec![run.clone()],
            summary: serde_json::Value::Null,
        };
        assert_eq!(check_percentiles(&results), Ok(1));
        run.report.p99_us += 1.0;
        results.runs.push(run);
        assert!(check_percentiles(&results).is_err());
    }
}
