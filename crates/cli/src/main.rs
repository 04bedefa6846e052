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
//! ```

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
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
    Serve(serve::Args),
    /// Open-loop load generator against any memcached-protocol endpoint.
    Bench(bench::Args),
    /// Analytic latency prediction and capacity planning.
    Model(model::Args),
    /// Memcached-protocol proxy over a pool of backends.
    Proxy(proxy::Args),
    /// Reproduce one of the project's experiments (runs servers, load, writes a report).
    Experiment(experiment::Args),
    /// Discrete-event simulation of the dispatch policies at any core count.
    Sim(sim::Args),
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
        Command::Serve(args) => serve::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Model(args) => model::run(args),
        Command::Proxy(args) => proxy::run(args),
        Command::Experiment(args) => experiment::run(args),
        Command::Sim(args) => sim::run(args),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("tailtrim: {message}");
            ExitCode::FAILURE
        }
    }
}
