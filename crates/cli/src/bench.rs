//! `tailtrim bench`: flags -> [`tailtrim_bench`] (preload, run or sweep),
//! then a table on stdout, optional JSON and plots, and a progress bar on a TTY. The output
//! paths (`--json`, `--plot`) are opened before any load is sent, so a bad one fails at once.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tailtrim_bench::cacheaside::parse_duration;
use tailtrim_bench::workload::{etc_arrival, Arrival, Popularity};
use tailtrim_bench::{
    parse_rates, preload, run_cache_aside, sweep, CacheAsideConfig, NullServer, RunConfig,
    ScheduledEvent, Transport, WorkloadOverrides, WorkloadSpec,
};
use tailtrim_lab::figures::{plot_cache_aside, plot_run, plot_sweep};
use tailtrim_lab::report::bench::{cache_aside_json, run_json, sweep_json};

/// Arguments of `tailtrim bench`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Open-loop load generator (latency from the scheduled send time)",
    after_help = "Example:\n  tailtrim bench -s 127.0.0.1:11211 --workload etc --rate 20000 --duration 10 \\\n      --json out.json --plot plots/\n  tailtrim bench -s 127.0.0.1:22122 --cache-aside --db-latency 8ms --workload uniform \\\n      --popularity zipf --prefill --admin 127.0.0.1:22222 --at 60s:add=127.0.0.1:11214 \\\n      --duration 120 --json ca.json --plot plots/\n\nBuilt-in workloads: etc, minos, chisel, tailx, tailx-large, uniform.\n`--print-workload` prints one as TOML to start a custom mix (`--workload-file`).\n\nShort flags are the load generator's own: -s server address, -d duration, -r rate;\n-c connections and -t threads mean what they mean to memcached and\n`tailtrim serve` (whose -s is a UNIX socket, -d daemonize, -r core dumps)."
)]
pub struct Args {
    #[command(flatten)]
    flags: Box<Flags>,
}

/// The flags behind [`Args`] (boxed to keep the subcommand enum small).
#[derive(clap::Args, Debug)]
struct Flags {
    /// Server to load, host:port.
    #[arg(short = 's', long, default_value = "127.0.0.1:11211")]
    server: String,
    /// Use UDP (memcached's 8-byte frame header) instead of TCP.
    #[arg(long)]
    udp: bool,
    /// Built-in workload.
    #[arg(short = 'w', long, default_value = "etc")]
    workload: String,
    /// Workload TOML file (overrides --workload).
    #[arg(long, value_name = "PATH")]
    workload_file: Option<PathBuf>,
    /// Print the resolved workload as TOML and exit.
    #[arg(long)]
    print_workload: bool,
    /// Target rate in requests per second.
    #[arg(short = 'r', long, default_value_t = 10_000.0)]
    rate: f64,
    /// Sweep: `a,b,c` or `start:end:step` (overrides --rate).
    #[arg(long, value_name = "LIST")]
    rates: Option<String>,
    /// Measured seconds per run.
    #[arg(short = 'd', long, default_value_t = 10.0)]
    duration: f64,
    /// Warm-up seconds before each measured window.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Connections (UDP sockets with --udp).
    #[arg(short = 'c', long, default_value_t = tailtrim_bench::engine::DEFAULT_CONNECTIONS)]
    connections: usize,
    /// I/O threads (each runs rate/threads of the schedule).
    #[arg(short = 't', long, default_value_t = 1)]
    threads: usize,
    /// Requests in flight per connection before queueing client-side.
    #[arg(long, default_value_t = tailtrim_bench::engine::DEFAULT_MAX_IN_FLIGHT)]
    max_in_flight: usize,
    /// Closed loop (YCSB's model) with N clients instead of the open-loop schedule: each
    /// client is a connection with one request outstanding that sends its next request
    /// `--think-time` after the reply (`--rate`, `-c` and `--max-in-flight` do not apply).
    #[arg(long, value_name = "N", conflicts_with_all = ["rates", "udp", "cache_aside"])]
    closed_loop: Option<usize>,
    /// Closed loop: time between a reply and the client's next request, e.g. 500us, 2ms.
    #[arg(long, value_name = "DURATION", requires = "closed_loop")]
    think_time: Option<String>,
    /// Busy-poll margin before each send time, in microseconds (0: sleep on
    /// the timerfd until the send time; spinning costs CPU the server shares).
    #[arg(long, default_value_t = 0)]
    spin_us: u64,
    /// Time allowed for outstanding replies after the schedule, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    drain_ms: u64,
    /// UDP loss timeout in milliseconds.
    #[arg(long, default_value_t = 500)]
    udp_timeout_ms: u64,
    /// Seed of the schedule and key choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Skip the preload phase.
    #[arg(long)]
    no_preload: bool,
    /// Only preload, no measured run.
    #[arg(long)]
    preload_only: bool,
    /// Where to preload over TCP (default: --server; set it when --udp
    /// targets a UDP port that has no TCP listener).
    #[arg(long, value_name = "HOST:PORT")]
    preload_server: Option<String>,
    /// Connections used by the preload.
    #[arg(long, default_value_t = 4)]
    preload_connections: usize,
    /// Before the run, apply the same load to a built-in null server (END /
    /// STORED, no storage) and report it as `floor`: the bench's own path.
    #[arg(long)]
    floor: bool,
    /// Write the results as JSON.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Do not run: read a JSON written by --json (one run or a sweep) and
    /// redraw its plots into --plot DIR.
    #[arg(long, value_name = "PATH", requires = "plot")]
    from_json: Option<PathBuf>,
    /// Write SVG and PNG plots into this directory.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// No progress bar, no table.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Keys in the main pool.
    #[arg(long)]
    keys: Option<u64>,
    /// Key popularity: uniform, zipf (0.99) or zipf:S.
    #[arg(long)]
    popularity: Option<String>,
    /// Arrival process: poisson or etc (generalized Pareto of the ETC trace).
    #[arg(long)]
    arrival: Option<String>,
    /// Share of keys drawn from the large pool (minos, tailx-large).
    #[arg(long)]
    large_share: Option<f64>,
    /// Keys in the large pool.
    #[arg(long)]
    large_keys: Option<u64>,
    /// Multiplier on large value sizes (e.g. 0.5 for 1 MB instead of 2 MB items).
    #[arg(long)]
    large_scale: Option<f64>,
    /// Keys per mice multiget.
    #[arg(long)]
    mice_keys: Option<u32>,
    /// Keys per elephant multiget.
    #[arg(long)]
    elephant_keys: Option<u32>,
    /// Mice requests per elephant (e.g. 9 or 5).
    #[arg(long)]
    mice_per_elephant: Option<f64>,
    /// Fixed key size of the main pool.
    #[arg(long)]
    key_size: Option<u32>,
    /// Fixed value size of the main pool.
    #[arg(long)]
    value_size: Option<u32>,
    /// Share of SETs in the mix.
    #[arg(long)]
    set_share: Option<f64>,
    /// Values above this many bytes make a request `large`.
    #[arg(long)]
    large_threshold: Option<u64>,
    /// Requests with at least this many keys are `elephant`.
    #[arg(long)]
    elephant_min_keys: Option<u32>,
    /// Cache-aside load: on a miss, wait for a simulated database (`--db-latency`) and add
    /// the value; SETs are database writes followed by a cache set. Every value read is
    /// checked against the database (key and version). Worker threads, one connection each.
    #[arg(long)]
    cache_aside: bool,
    /// Simulated database latency per read or write (cache-aside), e.g. 8ms.
    #[arg(long, default_value = "8ms", value_name = "DURATION")]
    db_latency: String,
    /// The proxy's admin listener (HOST:PORT), needed by `--at`.
    #[arg(long, value_name = "ADDR")]
    admin: Option<String>,
    /// A membership change during the measured window (cache-aside), repeatable:
    /// `60s:add=HOST:PORT[,warmup=MODE][,share=F]` or `90s:remove=HOST:PORT[,warmup=drain]`.
    #[arg(long = "at", value_name = "EVENT")]
    at: Vec<String>,
    /// Cache-aside worker threads (requests in progress at most).
    #[arg(long, default_value_t = tailtrim_bench::cacheaside::DEFAULT_WORKERS)]
    workers: usize,
    /// Requests per window of the cache-aside per-request series.
    #[arg(long, default_value_t = tailtrim_bench::cacheaside::DEFAULT_WINDOW_REQUESTS)]
    window_requests: usize,
    /// Cache-aside: before the run, write every key at version 0, coldest first.
    #[arg(long)]
    prefill: bool,
    /// Cache-aside: the version every key starts at (runs back to back against one cache give
    /// each run a base above the versions earlier runs wrote; see scripts/soak.sh).
    #[arg(long, default_value_t = 0)]
    first_version: u32,
}

fn workload_from(args: &Flags) -> Result<WorkloadSpec, String> {
    let mut spec = match &args.workload_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|error| format!("reading {}: {error}", path.display()))?;
            WorkloadSpec::from_toml(&text).map_err(|error| error.to_string())?
        }
        None => WorkloadSpec::preset(&args.workload).map_err(|error| error.to_string())?,
    };
    let popularity = args
        .popularity
        .as_deref()
        .map(str::parse::<Popularity>)
        .transpose()
        .map_err(|error| error.to_string())?;
    let arrival = match args.arrival.as_deref() {
        None => None,
        Some("poisson") => Some(Arrival::Poisson),
        Some("etc") | Some("gpd") => Some(etc_arrival()),
        Some(other) => return Err(format!("--arrival must be poisson or etc, got {other:?}")),
    };
    spec.apply(&WorkloadOverrides {
        keys: args.keys,
        popularity,
        large_share: args.large_share,
        large_keys: args.large_keys,
        large_scale: args.large_scale,
        mice_keys: args.mice_keys,
        elephant_keys: args.elephant_keys,
        mice_per_elephant: args.mice_per_elephant,
        key_size: args.key_size,
        value_size: args.value_size,
        set_share: args.set_share,
        arrival,
        large_threshold_bytes: args.large_threshold,
        elephant_min_keys: args.elephant_min_keys,
    })
    .map_err(|error| error.to_string())?;
    Ok(spec)
}

fn seconds(value: f64, name: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| format!("--{name} must be a non-negative number"))
}

fn progress_bar(enabled: bool, length: u64, label: &str) -> Option<ProgressBar> {
    if !enabled {
        return None;
    }
    let bar = ProgressBar::new(length);
    let style = ProgressStyle::with_template("{prefix} [{bar:40}] {elapsed_precise} {msg}")
        .map(|style| style.progress_chars("=> "));
    if let Ok(style) = style {
        bar.set_style(style);
    }
    bar.set_prefix(label.to_string());
    Some(bar)
}

/// A `--json` file opened for writing before the run, so a path that cannot be written
/// fails at once instead of after the load. A file this created is removed again unless the
/// results were written into it.
struct OutputFile {
    path: PathBuf,
    file: std::fs::File,
    created: bool,
    written: bool,
}

impl OutputFile {
    /// Opens (creates) `path` for writing without truncating it yet.
    fn open(path: &std::path::Path) -> Result<Self, String> {
        let existed = path.exists();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|error| format!("--json {}: cannot write there: {error}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            created: !existed,
            written: false,
        })
    }

    /// Replaces the file's content with `text`.
    fn write(mut self, text: &str) -> Result<(), String> {
        use std::io::Write;
        let context = |error: std::io::Error| format!("writing {}: {error}", self.path.display());
        self.file.set_len(0).map_err(context)?;
        self.file.write_all(text.as_bytes()).map_err(context)?;
        self.written = true;
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.created && !self.written {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Checks before any load that the plots can be written into `directory`: creates it, and
/// creates and removes a file in it.
fn check_plot_directory(directory: &std::path::Path) -> Result<(), String> {
    let fail = |error: std::io::Error| {
        format!(
            "--plot {}: cannot write plots there: {error}",
            directory.display()
        )
    };
    std::fs::create_dir_all(directory).map_err(fail)?;
    let probe = directory.join(format!(".tailtrim-bench-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// Opens every output the run will write (`--json`, `--plot`) before any load is sent.
fn open_outputs(args: &Flags) -> Result<Option<OutputFile>, String> {
    if let Some(directory) = &args.plot {
        check_plot_directory(directory)?;
    }
    args.json.as_deref().map(OutputFile::open).transpose()
}

/// Runs `tailtrim bench`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    let args = *args.flags;
    if let (Some(path), Some(directory)) = (&args.from_json, &args.plot) {
        return replot(path, directory);
    }
    let spec = workload_from(&args)?;
    if args.print_workload {
        print!("{}", spec.to_toml().map_err(|error| error.to_string())?);
        return Ok(ExitCode::SUCCESS);
    }
    let workload = Arc::new(spec);
    let interactive = !args.quiet && std::io::stderr().is_terminal();
    let json_output = open_outputs(&args)?;
    if args.cache_aside {
        return cache_aside(&args, &workload, interactive, json_output);
    }
    let mut config = RunConfig::new(&args.server, args.rate, seconds(args.duration, "duration")?);
    config.transport = if args.udp {
        Transport::Udp
    } else {
        Transport::Tcp
    };
    config.warmup = seconds(args.warmup, "warmup")?;
    config.connections = args.connections;
    config.threads = args.threads;
    config.max_in_flight = args.max_in_flight;
    config.spin = Duration::from_micros(args.spin_us);
    config.drain = Duration::from_millis(args.drain_ms);
    config.udp_timeout = Duration::from_millis(args.udp_timeout_ms);
    config.seed = args.seed;
    if let Some(clients) = args.closed_loop {
        let think_time = args
            .think_time
            .as_deref()
            .map(tailtrim_bench::cacheaside::parse_duration)
            .transpose()
            .map_err(|error| format!("--think-time: {error}"))?
            .unwrap_or_default();
        config.connections = clients;
        config.closed_loop = Some(tailtrim_bench::ClosedLoop { think_time });
    }

    if !args.no_preload {
        let total = workload.total_keys();
        let bar = progress_bar(interactive, total, "preload");
        let preload_server = args.preload_server.as_deref().unwrap_or(&args.server);
        let loaded = preload(
            &workload,
            preload_server,
            args.preload_connections,
            &mut |done| {
                if let Some(bar) = &bar {
                    bar.set_position(done);
                }
            },
        )
        .map_err(|error| error.to_string())?;
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        if !args.quiet {
            eprintln!(
                "preloaded {} keys in {:.1} s ({} errors)",
                loaded.keys, loaded.seconds, loaded.errors
            );
        }
        if args.preload_only {
            return Ok(ExitCode::SUCCESS);
        }
    }

    let total_ms = (config.warmup + config.duration).as_millis() as u64;
    let show = |bar: &Option<ProgressBar>, progress: &tailtrim_bench::Progress| {
        if let Some(bar) = bar {
            bar.set_position(progress.elapsed.as_millis() as u64);
            bar.set_message(format!(
                "{} replies, {} errors",
                progress.completed, progress.errors
            ));
        }
    };
    let recorder = tailtrim_lab::meta::Recorder::start();
    let json = match &args.rates {
        None => {
            let floor = if args.floor {
                let null_server = NullServer::start().map_err(|error| error.to_string())?;
                let mut floor_config = config.clone();
                floor_config.server = null_server.address();
                let bar = progress_bar(interactive, total_ms, "floor");
                let floor = tailtrim_bench::run(&workload, &floor_config, &mut |progress| {
                    show(&bar, progress)
                })
                .map_err(|error| error.to_string())?;
                if let Some(bar) = bar {
                    bar.finish_and_clear();
                }
                if !args.quiet {
                    println!("floor: the same load against a null server (bench + loopback only)");
                    print!("{}", floor.to_table());
                    println!();
                }
                Some(Box::new(floor))
            } else {
                None
            };
            let bar = progress_bar(interactive, total_ms, &format!("{:.0} rps", config.rate));
            let output = tailtrim_bench::run_detailed(&workload, &config, &mut |progress| {
                show(&bar, progress)
            })
            .map_err(|error| error.to_string())?;
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            let mut report = output.report;
            if !args.quiet {
                print!("{}", report.to_table());
            }
            if let Some(directory) = &args.plot {
                plot_run(&report, directory).map_err(|error| error.to_string())?;
            }
            report.floor = floor;
            run_json(&report, &output.histograms, recorder.finish())?
        }
        Some(list) => {
            let rates = parse_rates(list).map_err(|error| error.to_string())?;
            let mut bar: Option<ProgressBar> = None;
            let mut current = usize::MAX;
            let quiet = args.quiet;
            let result = sweep(
                &workload,
                &config,
                &rates,
                &mut |index, progress| {
                    if index != current {
                        current = index;
                        if let Some(old) = bar.take() {
                            old.finish_and_clear();
                        }
                        bar = progress_bar(
                            interactive,
                            total_ms,
                            &format!("{}/{} {:.0} rps", index + 1, rates.len(), rates[index]),
                        );
                    }
                    show(&bar, progress);
                },
                &mut |point| {
                    if !quiet {
                        eprintln!(
                            "{:.0} rps: achieved {:.0}, p99 {:.1} µs, errors {}",
                            point.target_rps,
                            point.achieved_rps,
                            point.class(tailtrim_bench::Class::All).p99_us,
                            point.errors
                        );
                    }
                },
            );
            if let Some(bar) = bar.take() {
                bar.finish_and_clear();
            }
            let (report, histograms) = result.map_err(|error| error.to_string())?;
            if !args.quiet {
                print!("{}", report.to_table());
            }
            if let Some(directory) = &args.plot {
                plot_sweep(&report, directory).map_err(|error| error.to_string())?;
            }
            sweep_json(&report, &histograms, recorder.finish())?
        }
    };
    if let Some(output) = json_output {
        output.write(&(json + "\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `tailtrim bench --cache-aside`.
fn cache_aside(
    args: &Flags,
    workload: &Arc<WorkloadSpec>,
    interactive: bool,
    json_output: Option<OutputFile>,
) -> Result<ExitCode, String> {
    let mut config =
        CacheAsideConfig::new(&args.server, args.rate, seconds(args.duration, "duration")?);
    config.warmup = seconds(args.warmup, "warmup")?;
    config.db_latency = parse_duration(&args.db_latency).map_err(|error| error.to_string())?;
    config.admin = args.admin.clone();
    config.events = args
        .at
        .iter()
        .map(|text| text.parse::<ScheduledEvent>())
        .collect::<Result<_, _>>()
        .map_err(|error| error.to_string())?;
    config.workers = args.workers;
    config.window_requests = args.window_requests;
    config.prefill = args.prefill;
    config.first_version = args.first_version;
    config.seed = args.seed;
    let total_ms = (config.warmup + config.duration).as_millis() as u64;
    let bar = progress_bar(
        interactive,
        total_ms,
        &format!("cache-aside {:.0} rps", config.rate),
    );
    let recorder = tailtrim_lab::meta::Recorder::start();
    let report = run_cache_aside(workload, &config, &mut |elapsed, completed| {
        if let Some(bar) = &bar {
            bar.set_position(elapsed.as_millis() as u64);
            bar.set_message(format!("{completed} requests"));
        }
    })
    .map_err(|error| error.to_string())?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if !args.quiet {
        print!("{}", report.to_table());
    }
    if let Some(directory) = &args.plot {
        plot_cache_aside(&report, directory).map_err(|error| error.to_string())?;
    }
    if let Some(output) = json_output {
        // The report, the run's metadata and every request's latency (`latency_ns`, the
        // histogram its p50 and p99 come from).
        let json = cache_aside_json(&report, recorder.finish())?;
        output.write(&(json + "\n"))?;
    }
    if report.clean() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "cache-aside: {} wrong values, {} stale values, {} client errors",
            report.wrong_values, report.stale_values, report.errors
        );
        Ok(ExitCode::FAILURE)
    }
}

/// Redraws the plots of a saved run or sweep.
fn replot(path: &std::path::Path, directory: &std::path::Path) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("reading {}: {error}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|error| format!("parsing {}: {error}", path.display()))?;
    let written = if value.get("curve").is_some() {
        let sweep: tailtrim_bench::SweepReport =
            serde_json::from_value(value).map_err(|error| error.to_string())?;
        plot_sweep(&sweep, directory)
    } else {
        let report: tailtrim_bench::RunReport =
            serde_json::from_value(value).map_err(|error| error.to_string())?;
        plot_run(&report, directory)
    }
    .map_err(|error| error.to_string())?;
    for file in written {
        println!("{}", file.display());
    }
    Ok(ExitCode::SUCCESS)
}
