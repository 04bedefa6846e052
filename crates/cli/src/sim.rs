//! `tailtrim sim`: the discrete-event simulator (`tailtrim-sim`) from the command line. The
//! flags are parsed here; the work is the libraries'.
//!
//! ```text
//!   tailtrim sim minos     flags ─► tailtrim_lab::report::sim_run::minos_report: SweepOptions ─► run_sweep (5 policies
//!                          × rates, 8 cores by default) ─► tailtrim_lab::report::sim::SweepReport
//!                          ─► table / JSON / results.json + results.md + small_p99 / large_p99
//!   tailtrim sim profile   tailtrim_server::profile::Profiler: the real server code in-process
//!                          (parse → execute → store → reply written to a loopback socket), sizes
//!                          swept, a + b·bytes fitted ─► profile JSON (`--profile` input)
//!   tailtrim sim validate  the real experiment's results.json (report::sim::RealResults) ─► the
//!                          same sweep at its core count, connections and rates ─► Validation
//!   tailtrim sim cluster   N servers, client threads, network, a multiget planner
//!                          (tailtrim_sim::cluster) ─► p50/p99 per rate (table, or JSON with
//!                          lab's run metadata and the latency histograms)
//!   tailtrim sim sleep-accuracy   requested vs achieved sleeps (tailtrim_server::emulate)
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tailtrim_lab::meta::Recorder;
use tailtrim_lab::report::sim::{cluster_json, cluster_table};
use tailtrim_lab::report::sim_cluster::ClusterArgs;
use tailtrim_lab::report::sim_run::{self, MinosSweep, ModelFlags};
use tailtrim_sim::cluster::sweep_cluster;
use tailtrim_sim::cost::CostModel;
use tailtrim_sim::sweep;

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
    Cluster(Box<ClusterArgs>),
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

/// The policies `tailtrim sim minos` simulates by default.
const MINOS_POLICIES: &str = "size-aware,early-binding,stealing,late-binding,pinned";

/// The value sizes (bytes) `tailtrim sim profile` measures by default.
const PROFILE_SIZES: &str = "16,64,256,1024,1500,4096,16384,65536,131072,262144,500000";

/// The model's flags and where the report goes, as `sim minos` and `sim validate` take them.
#[derive(clap::Args, Debug)]
struct ReportFlags {
    #[command(flatten)]
    model: ModelFlags,
    /// Print the whole result (minos) or the comparison (validate) as JSON on stdout instead
    /// of the table.
    #[arg(long)]
    json: bool,
    /// Write the report into this directory: results.json, results.md and the plots
    /// (small_p99, large_p99 as SVG and PNG) for minos; validation.json and validation.md for
    /// validate.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
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
    #[arg(long, value_delimiter = ',', default_value = MINOS_POLICIES)]
    policies: Vec<String>,
    #[command(flatten)]
    report: ReportFlags,
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
    #[arg(long, value_delimiter = ',', default_value = PROFILE_SIZES)]
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
    report: ReportFlags,
}

/// Runs `tailtrim sim`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    match args.command {
        SimCommand::Minos(minos) => run_minos(*minos),
        SimCommand::Profile(profile) => run_profile(profile),
        SimCommand::Validate(validate) => run_validate(*validate),
        SimCommand::Cluster(args) => run_cluster(*args),
        SimCommand::SleepAccuracy(args) => run_sleep_accuracy(args),
    }
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

fn run_sleep_accuracy(args: SleepAccuracyArgs) -> Result<ExitCode, String> {
    sim_run::sleep_accuracy(&args.micros, &args.sleepers, args.samples, &mut |line| {
        println!("{line}");
    });
    Ok(ExitCode::SUCCESS)
}

fn run_minos(args: MinosArgs) -> Result<ExitCode, String> {
    if let Some(directory) = &args.replot {
        println!("{}", sim_run::replot_minos(directory)?);
        return Ok(ExitCode::SUCCESS);
    }
    let started = Instant::now();
    let sweep = MinosSweep {
        policies: &args.policies,
        rates: args.rates.as_deref(),
        cores: args.cores,
        connections: args.connections,
    };
    let report = sim_run::minos_report(&sweep, &args.report.model, &command_line())?;
    eprintln!(
        "simulated {} points in {:.1} s",
        report.result.rates.len() * report.result.curves.len(),
        started.elapsed().as_secs_f64()
    );
    if args.report.json {
        let text = serde_json::to_string_pretty(&report).map_err(|error| error.to_string())?;
        println!("{text}");
    } else {
        print!("{}", report.markdown());
    }
    if let Some(directory) = &args.report.out {
        report.write(directory, true)?;
        eprintln!("wrote {}", directory.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn run_profile(args: ProfileArgs) -> Result<ExitCode, String> {
    let base = CostModel {
        handoff_ns: args.handoff_ns,
        steal_ns: args.steal_ns,
        dispatch_ns: args.dispatch_ns,
        ..CostModel::default()
    };
    let profile = sim_run::measure_profile(&args.sizes, args.iterations, base, &mut |line| {
        eprintln!("{line}");
    })?;
    let text = profile.to_json();
    match &args.out {
        Some(path) => std::fs::write(path, text + "\n")
            .map_err(|error| format!("writing {}: {error}", path.display()))?,
        None => println!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

fn run_validate(args: ValidateArgs) -> Result<ExitCode, String> {
    let validation = sim_run::validate(args.real.as_deref(), &args.report.model, &command_line())?;
    if args.report.json {
        println!("{}", validation.json);
    } else {
        print!("{}", validation.markdown);
    }
    if let Some(directory) = &args.report.out {
        validation.write(directory)?;
        eprintln!("wrote {}", directory.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn run_cluster(args: ClusterArgs) -> Result<ExitCode, String> {
    let scenario = args.scenario()?;
    let started = Instant::now();
    let recorder = Recorder::start();
    let results = sweep_cluster(&scenario, &args.rates).map_err(|e| e.to_string())?;
    let run = recorder.finish();
    let wall = started.elapsed().as_secs_f64();
    if args.json {
        println!("{}", cluster_json(run, &scenario, &results)?);
        return Ok(ExitCode::SUCCESS);
    }
    print!(
        "{}",
        cluster_table(&scenario, &results, &args.keys, &args.value_bytes)
    );
    eprintln!(
        "{} requests × {} rates simulated in {wall:.1} s",
        scenario.requests,
        results.len()
    );
    Ok(ExitCode::SUCCESS)
}
