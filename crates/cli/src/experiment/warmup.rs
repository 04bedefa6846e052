//! `tailtrim experiment warmup`: scale-out without a miss storm. Cache-aside load with a
//! simulated database through `tailtrim proxy` over `tailtrim serve` backends with a memory
//! limit each; a 4th server joins halfway (cold, fallback, preemptive, preemptive+fallback)
//! or, from 4, one is removed halfway (cold or drain). Each run is compared with a run without
//! the change under the same request sequence.
//!
//! ```text
//!  for run in runs:
//!     start 4 × tailtrim serve -m M (fresh), tailtrim proxy --admin over 3 (or 4) of them
//!     bench::run_cache_aside (prefill coldest first, unrecorded warm-up, measured window,
//!                             --at duration/2: POST|DELETE /pool/servers?warmup=MODE&share=F)
//!  per-1000-request windows, request i is the same key in every run (same seed):
//!     extra misses   = Σ_{windows from the event} (misses − baseline's misses)
//!     deepest dip    = lowest hit ratio from the event (and highest mean latency)
//!     time to recover = from the event until the run's hit ratio (5-window mean) stays
//!                       within 1 point of the baseline's
//!  ──> results.json, results.md, join.{svg,png}, removal.{svg,png}
//! ```

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tailtrim_bench::cacheaside::{parse_duration, CacheAsideReport, WindowSample};
use tailtrim_bench::dist::Distribution;
use tailtrim_bench::plot::{plot_panels, request_index_at, Line, Panel};
use tailtrim_bench::workload::{OpKind, OperationSpec, Popularity};
use tailtrim_bench::{run_cache_aside, CacheAsideConfig, ScheduledEvent, WorkloadSpec};

use tailtrim_lab::histogram::Encoded;
use tailtrim_lab::meta::{load_average, utc_timestamp, Recorder, RunMetadata};
use tailtrim_lab::process::{Launch, Process, ServerShape};
use tailtrim_lab::results::{read_json, write_json, write_text};

use super::common::{progress_bar, tailtrim_binary};

/// Every run, in order.
pub const DEFAULT_RUNS: &str =
    "baseline,cold,fallback,preemptive,preemptive+fallback,preemptive@1,\
     baseline-4,remove-cold,remove-drain,remove-drain@1";
/// Windows averaged when comparing hit ratios for recovery.
const RECOVERY_SMOOTHING: usize = 5;
/// A run has recovered when its smoothed hit ratio stays within this of the baseline's.
const RECOVERY_TOLERANCE: f64 = 0.01;

/// Arguments of `tailtrim experiment warmup`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example (the committed figures):\n  \
    tailtrim experiment warmup\n\
    Smoke run (seconds):\n  \
    tailtrim experiment warmup --quick --runs baseline,preemptive --out /tmp/warmup")]
pub struct Args {
    /// Comma-separated runs: baseline, cold, fallback, preemptive, preemptive+fallback,
    /// baseline-4, remove-cold, remove-drain; `NAME@SHARE` sends another share (e.g.
    /// `preemptive@1` copies every remapped key the old owners hold).
    #[arg(long, default_value = DEFAULT_RUNS)]
    runs: String,
    /// Target rate, requests per second (open loop).
    #[arg(short = 'r', long, default_value_t = 1_000.0)]
    rate: f64,
    /// Measured seconds per run; the change happens halfway.
    #[arg(short = 'd', long, default_value_t = 120.0)]
    duration: f64,
    /// Unrecorded seconds of load after the prefill.
    #[arg(long, default_value_t = 15.0)]
    warmup: f64,
    /// Unique keys.
    #[arg(long, default_value_t = 12_600)]
    keys: u64,
    /// Mean value size in bytes (values uniform in 0.3..1.7 × the mean).
    #[arg(long, default_value_t = 3_400)]
    mean_value: u32,
    /// Item memory per server, MB (`tailtrim serve -m`).
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
    /// Bench worker threads.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// Requests per window of the series.
    #[arg(long, default_value_t = 1_000)]
    window: usize,
    /// Seed of the schedule and keys (the same for every run).
    #[arg(long, default_value_t = 1)]
    seed: u64,
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
    };
    if share.is_some() && matches!(name, "baseline" | "baseline-4") {
        return Err(format!("run {full_name:?}: a baseline has no share"));
    }
    Ok(match name {
        "baseline" => RunSpec {
            name: name.into(),
            servers: 3,
            change: None,
            baseline: name.into(),
        },
        "baseline-4" => RunSpec {
            name: name.into(),
            servers: 4,
            change: None,
            baseline: name.into(),
        },
        "cold" | "fallback" | "preemptive" | "preemptive+fallback" => join(name),
        "remove-cold" => remove("cold"),
        "remove-drain" => remove("drain"),
        other => return Err(format!("unknown run {other:?} (see --help)")),
    })
}

/// Numbers of one run against its baseline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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
    /// Requests from the event until recovered (None: not within the run).
    pub recover_requests: Option<u64>,
    /// Seconds from the event until recovered.
    pub recover_s: Option<f64>,
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
    let mut servers = Vec::new();
    for index in 0..4 {
        let name = format!("warmup-{index}");
        servers.push(Process::start(Launch::tailtrim_serve(
            &name,
            &tailtrim,
            &shape,
            &[],
        )?)?);
    }
    let addresses: Vec<String> = servers.iter().map(Process::address).collect();
    let proxy = Process::start(Launch::tailtrim_proxy(
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
    let mut config = CacheAsideConfig::new(&proxy.address(), args.rate, duration);
    config.warmup = Duration::try_from_secs_f64(args.warmup)
        .map_err(|_| "--warmup must be a non-negative number".to_string())?;
    config.db_latency = parse_duration(&args.db_latency).map_err(|error| error.to_string())?;
    config.workers = args.workers;
    config.window_requests = args.window;
    config.seed = args.seed;
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
    let bar = progress_bar(interactive, total_ms, &spec.name);
    let report = run_cache_aside(workload, &config, &mut |elapsed, done| {
        if let Some(bar) = &bar {
            bar.set_position(elapsed.as_millis() as u64);
            bar.set_message(format!("{done} requests"));
        }
    })
    .map_err(|error| format!("run {}: {error}", spec.name))?;
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
    Ok(RunResult {
        spec: spec.clone(),
        loadavg: [before, load_average()],
        commands,
        report,
        latency_ns,
        metrics: None,
    })
}

fn smoothed(windows: &[WindowSample], at: usize) -> f64 {
    let from = at.saturating_sub(RECOVERY_SMOOTHING / 2);
    let to = (at + RECOVERY_SMOOTHING / 2 + 1).min(windows.len());
    let slice = &windows[from..to];
    slice.iter().map(|w| w.hit_ratio).sum::<f64>() / slice.len().max(1) as f64
}

/// Compares `run` with `baseline` from the run's first event on.
#[must_use]
pub fn metrics(run: &CacheAsideReport, baseline: &CacheAsideReport) -> Option<Metrics> {
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
        recover_requests: recovered.map(|w| ((w - event_window) * run.window_requests) as u64),
        recover_s: recovered.map(|w| (windows[w].time_s - event.sent_s).max(0.0)),
    })
}

fn ratio(numerator: Option<i64>, denominator: Option<i64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(n), Some(d)) if d > 0 => Some(n as f64 / d as f64),
        _ => None,
    }
}

fn summary(runs: &[RunResult]) -> serde_json::Value {
    let extra = |name: &str| {
        runs.iter()
            .find(|run| run.spec.name == name)
            .and_then(|run| run.metrics.as_ref())
            .map(|metrics| metrics.extra_misses)
    };
    let preemptive = ratio(extra("preemptive"), extra("cold"));
    let drain = ratio(extra("remove-drain"), extra("remove-cold"));
    let wrong: u64 = runs
        .iter()
        .map(|run| run.report.wrong_values + run.report.stale_values)
        .sum();
    let errors: u64 = runs.iter().map(|run| run.report.errors).sum();
    serde_json::json!({
        "extra_misses_vs_cold": {
            "fallback": ratio(extra("fallback"), extra("cold")),
            "preemptive": preemptive,
            "preemptive+fallback": ratio(extra("preemptive+fallback"), extra("cold")),
        },
        "drain_vs_no_drain": drain,
        "wrong_or_stale_values": wrong,
        "client_errors": errors,
        "acceptance": {
            "preemptive_over_cold_at_most_0.2": preemptive.map(|r| r <= 0.2),
            "drain_over_no_drain_at_most_0.2": drain.map(|r| r <= 0.2),
            "zero_wrong_values_and_errors": wrong == 0 && errors == 0,
        },
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
        "| run | requests | hit ratio | mean ms | p99 ms | extra misses | first half | deepest hit ratio (baseline) | peak mean ms (baseline) | recover s | switch s | wrong+stale | errors |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for run in &results.runs {
        let report = &run.report;
        let (extra, first, dip, peak, recover, switch) = match &run.metrics {
            Some(m) => (
                m.extra_misses.to_string(),
                m.extra_misses_first_half.to_string(),
                format!(
                    "{:.3} ({:.3})",
                    m.deepest_hit_ratio, m.baseline_hit_ratio_at_dip
                ),
                format!("{:.2} ({:.2})", m.peak_mean_ms, m.baseline_peak_mean_ms),
                m.recover_s
                    .map_or("not within the run".into(), |s| format!("{s:.1}")),
                format!("{:.2}", m.event_answered_s - m.event_sent_s),
            ),
            None => Default::default(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.4} | {:.2} | {:.2} | {extra} | {first} | {dip} | {peak} | {recover} | {switch} | {} | {} |",
            run.spec.name,
            report.requests,
            report.hit_ratio,
            report.mean_us / 1e3,
            report.p99_us / 1e3,
            report.wrong_values + report.stale_values,
            report.errors
        );
    }
    for run in &results.runs {
        for (kind, count) in &run.report.error_kinds {
            let _ = writeln!(out, "\n{}: {count} client errors: {kind}", run.spec.name);
        }
    }
    let _ = writeln!(
        out,
        "\nSummary: `{}`",
        serde_json::to_string(&results.summary).unwrap_or_default()
    );
    out
}

fn plot(results: &Results, out: &Path) -> Result<(), String> {
    let thousands = |w: &WindowSample| w.start as f64 / 1e3;
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
            ["baseline-4", "remove-cold", "remove-drain"].as_slice(),
        ),
    ] {
        let chosen: Vec<&RunResult> = runs
            .iter()
            .filter_map(|wanted| results.runs.iter().find(|run| run.spec.name == *wanted))
            .collect();
        if chosen.is_empty() {
            continue;
        }
        let markers: Vec<f64> = chosen
            .iter()
            .filter_map(|run| run.metrics.as_ref())
            .map(|m| (m.event_window * chosen[0].report.window_requests) as f64 / 1e3)
            .take(1)
            .collect();
        let window = chosen[0].report.window_requests;
        let lines = |pick: fn(&WindowSample) -> f64| -> Vec<Line> {
            chosen
                .iter()
                .map(|run| Line {
                    name: run.spec.name.clone(),
                    points: run
                        .report
                        .per_request
                        .iter()
                        .map(|w| (thousands(w), pick(w)))
                        .collect(),
                })
                .collect()
        };
        let x_desc = format!("requests (thousands; windows of {window})");
        let panels = [
            Panel {
                title: format!("{name}: mean latency per {window} requests"),
                x_desc: x_desc.clone(),
                y_desc: "mean latency".into(),
                latency: true,
                lines: lines(|w| w.mean_us),
                markers: markers.clone(),
                ..Panel::default()
            },
            Panel {
                title: format!("{name}: hit ratio per {window} requests"),
                x_desc,
                y_desc: "hit ratio".into(),
                lines: lines(|w| w.hit_ratio),
                markers,
                ..Panel::default()
            },
        ];
        plot_panels(out, name, &panels).map_err(|error| error.to_string())?;
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

/// Runs `tailtrim experiment warmup`.
pub fn run(mut args: Args) -> Result<std::process::ExitCode, String> {
    if args.replot {
        let results: Results = read_json(&args.out)?;
        let checked = check_percentiles(&results)?;
        write_text(&args.out, "results.md", &markdown(&results))?;
        plot(&results, &args.out)?;
        println!(
            "redrew {} from its results.json ({checked} runs' p50 and p99 recomputed from \
             their histograms)",
            args.out.display()
        );
        return Ok(std::process::ExitCode::SUCCESS);
    }
    if args.quick {
        args.keys = 2_000;
        args.memory_mb = 2;
        args.mean_value = 1_500;
        args.rate = 600.0;
        args.duration = 6.0;
        args.warmup = 1.0;
        args.window = 200;
        args.workers = 16;
    }
    let specs: Vec<RunSpec> = args
        .runs
        .split(',')
        .map(|name| run_spec(name.trim(), &args))
        .collect::<Result<_, _>>()?;
    let workload = workload(&args);
    let interactive = std::io::stderr().is_terminal();
    let data_mb = workload.estimated_bytes() as f64 / 1e6;
    let recorder = Recorder::start();
    let mut results = Results {
        experiment: "warmup".into(),
        metadata: recorder.snapshot(),
        started: utc_timestamp(),
        complete: false,
        settings: serde_json::json!({
            "quick": args.quick,
            "rate_rps": args.rate,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "event_at_s": args.duration / 2.0,
            "keys": args.keys,
            "mean_value_bytes": args.mean_value,
            "estimated_data_mb": data_mb,
            "memory_mb_per_server": args.memory_mb,
            "pool_memory_mb": 3 * args.memory_mb,
            "zipf": args.zipf,
            "set_share": args.set_share,
            "db_latency": args.db_latency,
            "warm_share": args.warm_share,
            "drain_share": args.drain_share,
            "workers": args.workers,
            "window_requests": args.window,
            "seed": args.seed,
            "scaled_from": "3 servers × 64 MB, about 68k keys and 229 MB of data, 475k requests, database 8 ms",
        }),
        runs: Vec::new(),
        summary: serde_json::Value::Null,
    };
    for spec in &specs {
        eprintln!("warmup: run {} (load {})", spec.name, load_average());
        let mut result = run_one(spec, &args, &workload, interactive)?;
        if let Some(baseline) = results
            .runs
            .iter()
            .find(|run| run.spec.name == spec.baseline && run.spec.change.is_none())
        {
            result.metrics = metrics(&result.report, &baseline.report);
        }
        eprint!("{}", result.report.to_table());
        results.runs.push(result);
        results.summary = summary(&results.runs);
        results.metadata = recorder.snapshot();
        write(&results, &args.out)?;
    }
    results.complete = true;
    results.metadata = recorder.finish();
    write(&results, &args.out)?;
    print!("{}", markdown(&results));
    Ok(std::process::ExitCode::SUCCESS)
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
        let m = metrics(&run, &base).unwrap_or_else(|| panic!("metrics"));
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
        assert_eq!(metrics(&never, &base).and_then(|m| m.recover_s), None);
        // No event: no metrics.
        assert!(metrics(&base, &base).is_none());
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
