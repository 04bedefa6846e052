//! `tailtrim-trace-replay`: replays a seeded zipf key trace with ETC-like sizes against one
//! memcached-protocol server as cache-aside traffic (get, on a miss set) and prints the
//! warm-up and measured passes' counts as JSON (`tailtrim_bench::replay`).
//!
//! ```text
//! tailtrim-trace-replay -s 127.0.0.1:11211 --keys 2000000 --warmup 4000000 --requests 4000000
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tailtrim_bench::replay::{replay_trace, ReplayConfig};
use tailtrim_bench::trace::TraceSpec;

/// Replays a seeded zipf/ETC key trace as get → on miss set; prints the miss ratio as JSON.
#[derive(Debug, Parser)]
#[command(name = "tailtrim-trace-replay")]
struct Args {
    /// Server address.
    #[arg(short = 's', long, default_value = "127.0.0.1:11211")]
    server: String,
    /// Distinct keys in the trace.
    #[arg(long, default_value_t = 2_000_000)]
    keys: u64,
    /// Zipf exponent of the key popularity.
    #[arg(long, default_value_t = 0.99)]
    exponent: f64,
    /// Seed of the trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Largest value size (ETC's tail is cut here).
    #[arg(long, default_value_t = 100_000)]
    max_value_bytes: usize,
    /// Requests of the warm-up pass.
    #[arg(long, default_value_t = 4_000_000)]
    warmup: u64,
    /// Requests of the measured pass.
    #[arg(long, default_value_t = 4_000_000)]
    requests: u64,
    /// Largest pipelined batch of distinct keys.
    #[arg(long, default_value_t = 64)]
    batch: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = ReplayConfig {
        server: args.server,
        trace: TraceSpec {
            keys: args.keys,
            exponent: args.exponent,
            seed: args.seed,
            max_value_bytes: args.max_value_bytes,
        },
        warmup_requests: args.warmup,
        measured_requests: args.requests,
        batch: args.batch,
        timeout: Duration::from_secs(30),
    };
    let report = replay_trace(&config).and_then(|report| Ok(serde_json::to_string(&report)?));
    match report {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("tailtrim-trace-replay: {error}");
            ExitCode::FAILURE
        }
    }
}
