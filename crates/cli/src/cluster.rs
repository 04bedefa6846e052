//! `tailtrim cluster`: a tier of servers and proxies from one TOML file (`tailtrim-tier`).
//!
//! ```text
//!   cluster up TIER.toml [--base-port N] [--run-dir DIR]     start; Ctrl-C stops every node
//!   cluster status [TIER.toml] [--run-dir DIR | --proxy ADDR [--admin ADDR]] [--json] [--watch]
//!   cluster add NODE [TIER.toml] [--start] [--warmup MODE] [--share F]
//!   cluster remove NODE [TIER.toml] [--warmup drain|cold]
//! ```
//!
//! `status`, `add` and `remove` find the tier with [`tailtrim_tier::locate::Locate`] (the run
//! directory's state file written by `up`, else the tier file's addresses, or
//! `--proxy`/`--admin`); the add/remove flow is [`tailtrim_tier::membership`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tailtrim_tier::locate::Locate;
use tailtrim_tier::membership::{admin_token, proxies_to_change, summary};
use tailtrim_tier::status::sample;
use tailtrim_tier::up::{request_start_server, stop_on_signals, up, UpOptions};
use tailtrim_tier::{admin, PortChoice, TierConfig};

/// Arguments of `tailtrim cluster`.
#[derive(Parser)]
pub struct Args {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Start the tier's servers and proxies as child processes; print roles, addresses,
    /// pids and logs; stop them all on Ctrl-C or SIGTERM.
    Up(UpArgs),
    /// A per-node table: rate, hit ratio, items, memory, connections; per proxy the
    /// planner, its p99 and its backends' state.
    Status(StatusArgs),
    /// Add a server to every proxy of the tier (through their admin API, with warm-up).
    Add(ChangeArgs),
    /// Remove a server from every proxy of the tier (drained by default).
    Remove(ChangeArgs),
}

#[derive(clap::Args)]
struct UpArgs {
    /// The tier file (see examples/tier.toml).
    tier: PathBuf,
    /// Number every port from N instead of the file's (servers in order, then each proxy's
    /// client and admin ports); 0 picks a free port for each.
    #[arg(long, value_name = "N")]
    base_port: Option<u16>,
    /// Run directory (default: the file's `[tier] run_dir`).
    #[arg(long, value_name = "DIR")]
    run_dir: Option<PathBuf>,
}

#[derive(clap::Args)]
struct StatusArgs {
    #[command(flatten)]
    locate: Locate,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Refresh until Ctrl-C.
    #[arg(long)]
    watch: bool,
    /// Milliseconds between the two `stats` samples a rate is taken from.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    interval_ms: u64,
}

#[derive(clap::Args)]
struct ChangeArgs {
    /// The server, `host:port[:weight]`.
    node: String,
    #[command(flatten)]
    locate: Locate,
    /// Warm-up mode (add: cold, fallback, preemptive, preemptive+fallback; remove: drain,
    /// cold). Default: the proxies' `[warmup] mode` / `remove_mode`.
    #[arg(long, value_name = "MODE")]
    warmup: Option<String>,
    /// Share of the moved keys copied before the switch (default: `[warmup] warm_share`).
    #[arg(long, value_name = "F")]
    share: Option<f64>,
    /// add: first start a server on NODE's port from the tier file's `[server]` template,
    /// as a child of the running `cluster up`.
    #[arg(long)]
    start: bool,
    /// File holding the proxies' admin token (default: `[proxy] admin_token_file` of the
    /// tier file; the environment variable TAILTRIM_ADMIN_TOKEN gives the token itself).
    #[arg(long, value_name = "FILE")]
    admin_token_file: Option<PathBuf>,
    /// Print the proxies' JSON reports.
    #[arg(long)]
    json: bool,
}

/// Runs `tailtrim cluster`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    match args.command {
        ClusterCommand::Up(args) => run_up(args),
        ClusterCommand::Status(args) => run_status(args),
        ClusterCommand::Add(args) => run_change(args, true),
        ClusterCommand::Remove(args) => run_change(args, false),
    }
}

fn run_up(args: UpArgs) -> Result<ExitCode, String> {
    let config = TierConfig::read(&args.tier).map_err(|error| error.to_string())?;
    let binary = std::env::current_exe()
        .map_err(|error| format!("finding the tailtrim executable: {error}"))?;
    let options = UpOptions {
        binary,
        run_dir: args
            .run_dir
            .unwrap_or_else(|| PathBuf::from(&config.tier.run_dir)),
        ports: match args.base_port {
            None => PortChoice::AsWritten,
            Some(0) => PortChoice::Free,
            Some(base) => PortChoice::Base(base),
        },
    };
    up(&config, &options, &mut std::io::stdout()).map_err(|error| error.to_string())?;
    Ok(ExitCode::SUCCESS)
}

fn run_status(args: StatusArgs) -> Result<ExitCode, String> {
    let interval = Duration::from_millis(args.interval_ms.max(1));
    let stop = if args.watch {
        Some(stop_on_signals().map_err(|error| error.to_string())?)
    } else {
        None
    };
    loop {
        let (name, targets) = args.locate.status_targets().map_err(|e| e.to_string())?;
        let status = sample(&name, targets, interval);
        let text = if args.json {
            serde_json::to_string_pretty(&status).map_err(|error| error.to_string())?
        } else {
            status.render()
        };
        if args.watch && !args.json {
            // Clear the screen and home the cursor, as `watch` does.
            print!("\x1b[2J\x1b[H");
        }
        println!("{text}");
        let finished = match &stop {
            Some(stop) => stop.load(Ordering::Relaxed),
            None => true,
        };
        if finished {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

fn run_change(args: ChangeArgs, adding: bool) -> Result<ExitCode, String> {
    let (config, run_dir) = args.locate.find().map_err(|e| e.to_string())?;
    let token = admin_token(args.admin_token_file.as_deref(), config.as_ref())
        .map_err(|e| e.to_string())?;
    let proxies =
        proxies_to_change(&args.locate, config.as_ref(), &run_dir).map_err(|e| e.to_string())?;
    if args.start {
        if !adding {
            return Err("--start goes with `cluster add` only".to_string());
        }
        let spec =
            tailtrim_client::ServerSpec::parse(&args.node).map_err(|error| error.to_string())?;
        let record = request_start_server(&run_dir, &spec.host, spec.port)
            .map_err(|error| error.to_string())?;
        println!(
            "started {} on {} (pid {}, log {})",
            record.name,
            record.address,
            record.pid,
            record.log.display()
        );
    }
    let change = admin::Change {
        adding,
        server: args.node.clone(),
        warmup: args.warmup.clone(),
        share: args.share,
    };
    let mut failures = 0;
    for (name, admin_address) in &proxies {
        match change.apply(admin_address, token.as_deref()) {
            Ok(report) if args.json => println!("{report}"),
            Ok(report) => println!("{}", summary(name, &change, &report)),
            Err(error) => {
                failures += 1;
                eprintln!("tailtrim cluster: {name}: {error}");
            }
        }
    }
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
