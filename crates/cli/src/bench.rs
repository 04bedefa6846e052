//! `tailtrim bench`: flags ([`tailtrim_bench::from_args`]) -> [`tailtrim_bench`] (preload, run or sweep),
//! then a table on stdout, optional JSON and plots, and a progress bar on a TTY. The output
//! paths (`--json`, `--plot`) are opened before any load is sent, so a bad one fails at once.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use tailtrim_bench::from_args::BenchArgs;
use tailtrim_bench::{parse_rates, preload, run_cache_aside, sweep, NullServer, WorkloadSpec};
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
    flags: Box<BenchArgs>,
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
fn open_outputs(args: &BenchArgs) -> Result<Option<OutputFile>, String> {
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
    let spec = args.workload()?;
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
    let config = args.run_config()?;

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
    args: &BenchArgs,
    workload: &Arc<WorkloadSpec>,
    interactive: bool,
    json_output: Option<OutputFile>,
) -> Result<ExitCode, String> {
    let config = args.cache_aside_config()?;
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
