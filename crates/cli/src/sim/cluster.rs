//! `tailtrim sim cluster`: the cluster simulator (`tailtrim_sim::cluster`) from the command line.
//!
//! ```text
//!   flags ─► ClusterScenario ─► sweep_cluster(rates) ─► table (stdout) | JSON (--json)
//! ```

use std::process::ExitCode;
use std::time::Instant;

use tailtrim_bench::workload::Popularity;
use tailtrim_lab::report::sim::{cluster_json, cluster_table};
use tailtrim_policy::costspec::CostSpec;
use tailtrim_sim::cluster::{
    parse_distribution, sweep_cluster, ArrivalProcess, ClosedLoop, ClusterScenario,
    ClusterWorkload, ServerQueue, DEFAULT_LARGE_VALUE_BYTES, DEFAULT_WARMUP_FRACTION,
};

/// Arguments of `tailtrim sim cluster`.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// Cache servers.
    #[arg(long, default_value_t = 4)]
    servers: usize,
    /// Worker threads per server.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Serve prioritized fetches in strict priority order, whatever the planner's own order.
    #[arg(long, conflicts_with = "server_queue")]
    strict_priority: bool,
    /// How servers order prioritized fetches: planner (the planner's own: strict for
    /// rein-sbf and rein-sds, drr for rein-drr, aged strict for cost-sbf), strict or drr.
    #[arg(long, default_value = "planner")]
    server_queue: String,
    /// Closed loop: this many clients, each waiting for its reply before the next request
    /// (--rates is then ignored); 0: open loop.
    #[arg(long, default_value_t = 0)]
    clients: usize,
    /// Closed loop: mean think time between a reply and the next request, µs (exponential).
    #[arg(long, default_value_t = 0.0)]
    think_us: f64,
    /// Copies of each key.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// Client/proxy threads (modelled when --client-send or --client-recv costs something).
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// Multiget planner: batch, chisel, rein-sbf, rein-sds, rein-drr, tailx, cost-sbf (policy
    /// crate names).
    #[arg(long, default_value = "batch")]
    planner: String,
    /// Distinct keys.
    #[arg(long, default_value_t = 100_000)]
    keyspace: u64,
    /// Key popularity: uniform, zipf or zipf:S.
    #[arg(long, default_value = "uniform")]
    popularity: Popularity,
    /// Keys per request: N, uniform:A:B, exp:MEAN or table:V@P/V@P…
    #[arg(long, default_value = "1")]
    keys: String,
    /// Value bytes per key (same syntax as --keys).
    #[arg(long, default_value = "100")]
    value_bytes: String,
    /// A request with a value above this is in the large class.
    #[arg(long, default_value_t = DEFAULT_LARGE_VALUE_BYTES)]
    large_value_bytes: u64,
    /// Offered rates, requests per second (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10000")]
    rates: Vec<f64>,
    /// Uniform instead of Poisson arrivals.
    #[arg(long)]
    uniform_arrivals: bool,
    /// Requests per rate.
    #[arg(short = 'n', long, default_value_t = 200_000)]
    requests: u64,
    /// Share of requests not measured.
    #[arg(long, default_value_t = DEFAULT_WARMUP_FRACTION)]
    warmup: f64,
    /// Server time per fetch (cost spec, e.g. `const=20us,key=1us,dist=exp`).
    #[arg(long, default_value = "const=20us,dist=exp")]
    service: String,
    /// One-way network time per message (cost spec).
    #[arg(long, default_value = "off")]
    network: String,
    /// Client-thread time per request (cost spec).
    #[arg(long, default_value = "off")]
    client_send: String,
    /// Client-thread time per fetch reply (cost spec).
    #[arg(long, default_value = "off")]
    client_recv: String,
    /// Backend queries in flight at once over all backends (0: unbounded).
    #[arg(long, default_value_t = 0)]
    query_threads: usize,
    /// Client time to set up each backend query once it has a slot (cost spec; Chisel's
    /// overhead `o`).
    #[arg(long, default_value = "off")]
    query_setup: String,
    /// Seed of every random stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON (scenario and one result per rate) instead of a table.
    #[arg(long)]
    json: bool,
}

fn spec(text: &str) -> Result<CostSpec, String> {
    CostSpec::parse(text).map_err(|e| e.to_string())
}

/// Runs `tailtrim sim cluster`.
pub fn run(args: ClusterArgs) -> Result<ExitCode, String> {
    let scenario = ClusterScenario {
        servers: args.servers,
        workers_per_server: args.workers,
        server_queue: match (args.strict_priority, args.server_queue.as_str()) {
            (true, _) | (false, "strict") => ServerQueue::Strict,
            (false, "planner") => ServerQueue::Planner,
            (false, "drr") => ServerQueue::Drr,
            (false, other) => {
                return Err(format!(
                    "--server-queue {other:?}: one of planner, strict, drr"
                ))
            }
        },
        replicas: args.replicas,
        client_threads: args.client_threads,
        planner: args.planner,
        workload: ClusterWorkload {
            keyspace: args.keyspace,
            popularity: args.popularity,
            keys_per_request: parse_distribution(&args.keys).map_err(|e| e.to_string())?,
            value_bytes: parse_distribution(&args.value_bytes).map_err(|e| e.to_string())?,
            large_value_bytes: args.large_value_bytes,
            large_keys: None,
        },
        rate_rps: args.rates.first().copied().unwrap_or(1.0),
        arrival: if args.uniform_arrivals {
            ArrivalProcess::Uniform
        } else {
            ArrivalProcess::Poisson
        },
        closed_loop: (args.clients > 0).then_some(ClosedLoop {
            clients: args.clients,
            think_us: args.think_us,
        }),
        requests: args.requests,
        warmup_fraction: args.warmup,
        service: spec(&args.service)?,
        network: spec(&args.network)?,
        client_send: spec(&args.client_send)?,
        client_recv: spec(&args.client_recv)?,
        query_threads: args.query_threads,
        query_setup: spec(&args.query_setup)?,
        online_analysis: None,
        seed: args.seed,
    };
    let started = Instant::now();
    let results = sweep_cluster(&scenario, &args.rates).map_err(|e| e.to_string())?;
    let wall = started.elapsed().as_secs_f64();
    if args.json {
        println!("{}", cluster_json(&scenario, &results)?);
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
