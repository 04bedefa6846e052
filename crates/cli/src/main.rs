//! `tailtrim`: the single binary. Each subcommand lives in its own module and
//! delegates to the crate that owns the work.
//!
//! ```text
//!   tailtrim serve      -> tailtrim-server (cache server)
//!   tailtrim bench      -> tailtrim-bench  (open-loop load generator)
//!   tailtrim model      -> tailtrim-model  (analytic latency models)
//!   tailtrim proxy      -> tailtrim-proxy  (memcached-protocol proxy)
//!   tailtrim sim        -> tailtrim-sim    (discrete-event simulator)
//!   tailtrim experiment -> runners that combine the above
//!   tailtrim cluster    -> tailtrim-tier   (a tier of servers and proxies from one file)
//! ```
//!
//! Two hidden subcommands serve packaging: `tailtrim man [DIR]` writes the man pages and
//! `tailtrim completions SHELL` prints a shell completion script, both generated from the
//! command-line definitions below.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod bench;
mod cluster;
mod experiment;
mod model;
mod proxy;
mod serve;
mod sim;

/// tailtrim: a memcached-compatible cache that trims tail latency.
#[derive(Parser)]
#[command(name = "tailtrim", version = tailtrim_lab::meta::VERSION, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the cache server (memcached protocol over TCP and UDP).
    Serve(Box<serve::Args>),
    /// Open-loop load generator against any memcached-protocol endpoint.
    Bench(bench::Args),
    /// Analytic latency prediction and capacity planning.
    Model(model::Args),
    /// Memcached-protocol proxy over a pool of backends.
    Proxy(Box<proxy::Args>),
    /// Reproduce one of the project's experiments (runs servers, load, writes a report).
    Experiment(experiment::Args),
    /// Discrete-event simulation of the dispatch policies at any core count.
    Sim(sim::Args),
    /// A tier of servers and proxies from one TOML file: up, status, add, remove.
    Cluster(cluster::Args),
    /// Write the man pages (tailtrim.1, tailtrim-serve.1, ...) into DIR.
    #[command(hide = true)]
    Man {
        /// Directory to write the pages into (created if missing).
        #[arg(default_value = ".")]
        dir: std::path::PathBuf,
    },
    /// Print the completion script of SHELL.
    #[command(hide = true)]
    Completions {
        /// bash, elvish, fish, powershell or zsh.
        shell: clap_complete::Shell,
    },
}

/// Writes `tailtrim.1` and one page per visible subcommand (`tailtrim-serve.1`, ...) into `dir`.
fn write_man_pages(dir: &std::path::Path) -> Result<ExitCode, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let command = Cli::command();
    clap_mangen::generate_to(command, dir)
        .map_err(|e| format!("cannot write man pages into {}: {e}", dir.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the completion script of `shell` for every subcommand and flag.
fn print_completions(shell: clap_complete::Shell) -> Result<ExitCode, String> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "tailtrim", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let argv = if argv.get(1).map(String::as_str) == Some("serve") {
        match serve::expand_memcached_conf(argv) {
            Ok(argv) => argv,
            Err(message) => {
                eprintln!("tailtrim: {message}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        argv
    };
    let cli = Cli::parse_from(argv);
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Bench(args) => bench::run(args),
        Command::Model(args) => model::run(args),
        Command::Proxy(args) => proxy::run(*args),
        Command::Experiment(args) => experiment::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Cluster(args) => cluster::run(args),
        Command::Man { dir } => write_man_pages(&dir),
        Command::Completions { shell } => print_completions(shell),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("tailtrim: {message}");
            ExitCode::FAILURE
        }
    }
}
