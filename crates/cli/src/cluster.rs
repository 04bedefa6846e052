//! `tailtrim cluster`: a tier of servers and proxies from one TOML file (`tailtrim-tier`).
//!
//! ```text
//!   cluster up TIER.toml [--base-port N] [--run-dir DIR]     start; Ctrl-C stops every node
//!   cluster status [TIER.toml] [--run-dir DIR | --proxy ADDR [--admin ADDR]] [--json] [--watch]
//!   cluster add NODE [TIER.toml] [--start] [--warmup MODE] [--share F]
//!   cluster remove NODE [TIER.toml] [--warmup drain|cold]
//! ```
//!
//! `status`, `add` and `remove` find the tier in its run directory's state file (written by
//! `up`); without one they use the addresses the tier file gives (a tier deployed on other
//! machines), or `--proxy`/`--admin`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tailtrim_tier::config::{TierPlan, DEFAULT_RUN_DIR};
use tailtrim_tier::state::Role;
use tailtrim_tier::status::{sample, targets_from_plan, targets_from_state, Target};
use tailtrim_tier::up::{request_start_server, stop_on_signals, up, UpOptions};
use tailtrim_tier::{admin, PortChoice, TierConfig, TierState};

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

/// Where `status`, `add` and `remove` find the tier.
#[derive(clap::Args)]
struct Locate {
    /// The tier file; its run directory's state file gives the running addresses.
    tier: Option<PathBuf>,
    /// Run directory of the tier (default: the tier file's, else `tier-run`).
    #[arg(long, value_name = "DIR")]
    run_dir: Option<PathBuf>,
    /// A proxy's client address, instead of a tier (its backends are listed from its stats).
    #[arg(long, value_name = "ADDR")]
    proxy: Option<String>,
    /// A proxy's admin address (with --proxy for status; alone for add/remove).
    #[arg(long, value_name = "ADDR")]
    admin: Option<String>,
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

/// The tier file (when given) and the run directory to look in.
fn locate(locate: &Locate) -> Result<(Option<TierConfig>, PathBuf), String> {
    let config = match &locate.tier {
        Some(path) => Some(TierConfig::read(path).map_err(|error| error.to_string())?),
        None => None,
    };
    let run_dir = locate.run_dir.clone().unwrap_or_else(|| {
        PathBuf::from(
            config
                .as_ref()
                .map_or(DEFAULT_RUN_DIR, |config| config.tier.run_dir.as_str()),
        )
    });
    Ok((config, run_dir))
}

/// The running tier's state, if `run_dir` holds one.
fn running_state(run_dir: &Path) -> Option<TierState> {
    TierState::read_running(run_dir).ok()
}

/// The tier file's nodes at the addresses it gives.
fn written_plan(config: &TierConfig) -> Result<TierPlan, String> {
    config
        .plan(PortChoice::AsWritten, || {
            Err(tailtrim_tier::TierError::Config(
                "no free ports here".into(),
            ))
        })
        .map_err(|error| error.to_string())
}

fn status_targets(locate_args: &Locate) -> Result<(String, Vec<Target>), String> {
    if let Some(proxy) = &locate_args.proxy {
        let target = Target {
            role: Role::Proxy,
            name: proxy.clone(),
            address: proxy.clone(),
            admin: locate_args.admin.clone(),
            pid: None,
            exited: None,
        };
        return Ok((String::new(), vec![target]));
    }
    let (config, run_dir) = locate(locate_args)?;
    if let Some(state) = running_state(&run_dir) {
        return Ok((state.name.clone(), targets_from_state(&state)));
    }
    match config {
        Some(config) => {
            let plan = written_plan(&config)?;
            Ok((plan.name.clone(), targets_from_plan(&plan)))
        }
        None => Err(format!(
            "no running tier in {} (give the tier file, --run-dir or --proxy)",
            run_dir.display()
        )),
    }
}

fn run_status(args: StatusArgs) -> Result<ExitCode, String> {
    let interval = Duration::from_millis(args.interval_ms.max(1));
    let stop = if args.watch {
        Some(stop_on_signals().map_err(|error| error.to_string())?)
    } else {
        None
    };
    loop {
        let (name, targets) = status_targets(&args.locate)?;
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

/// The admin token: `--admin-token-file`, else TAILTRIM_ADMIN_TOKEN, else the tier file's.
fn admin_token(args: &ChangeArgs, config: Option<&TierConfig>) -> Result<Option<String>, String> {
    if let Some(path) = &args.admin_token_file {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("reading {}: {error}", path.display()))?;
        return Ok(Some(text.trim().to_string()));
    }
    if let Ok(token) = std::env::var("TAILTRIM_ADMIN_TOKEN") {
        if !token.trim().is_empty() {
            return Ok(Some(token.trim().to_string()));
        }
    }
    match config {
        Some(config) => config
            .proxy
            .admin_token()
            .map_err(|error| error.to_string()),
        None => Ok(None),
    }
}

fn run_change(args: ChangeArgs, adding: bool) -> Result<ExitCode, String> {
    let (config, run_dir) = locate(&args.locate)?;
    let token = admin_token(&args, config.as_ref())?;
    let state = running_state(&run_dir);
    // The proxies to change: --admin, else the running tier's, else the tier file's.
    let proxies: Vec<(String, String)> = if let Some(admin) = &args.locate.admin {
        vec![(admin.clone(), admin.clone())]
    } else if let Some(state) = &state {
        state
            .proxies()
            .filter(|proxy| proxy.exited.is_none())
            .filter_map(|proxy| Some((proxy.name.clone(), proxy.admin.clone()?)))
            .collect()
    } else if let Some(config) = &config {
        written_plan(config)?
            .proxies
            .into_iter()
            .map(|proxy| (proxy.name, proxy.admin_listen))
            .collect()
    } else {
        return Err(format!(
            "no running tier in {} (give the tier file, --run-dir or --admin)",
            run_dir.display()
        ));
    };
    if proxies.is_empty() {
        return Err("the tier has no running proxy to change".to_string());
    }
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
            Ok(report) => println!(
                "{name}: {} {} (warm-up {}): pool version {}, servers {} -> {}, {} keys copied",
                if adding { "added" } else { "removed" },
                args.node,
                report["mode"].as_str().unwrap_or("?"),
                report["version"],
                list(&report["before"]),
                list(&report["after"]),
                report["copied"]
            ),
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

/// A JSON array of strings as `a,b,c`.
fn list(value: &serde_json::Value) -> String {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(serde_json::Value::as_str)
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}
