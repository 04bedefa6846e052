//! The flags of `tailtrim sim cluster` and the cluster scenario they describe
//! ([`tailtrim_sim::cluster::ClusterScenario`]); the clap definition lives beside the
//! scenario it fills, so the binary only sweeps the rates and prints
//! ([`crate::report::sim::cluster_table`], [`crate::report::sim::cluster_json`]).

use tailtrim_bench::workload::Popularity;
use tailtrim_policy::costspec::CostSpec;
use tailtrim_sim::cluster::{
    parse_distribution, ArrivalProcess, ClosedLoop, ClusterScenario, ClusterWorkload, ServerQueue,
    SizeAwareServers, DEFAULT_LARGE_VALUE_BYTES, DEFAULT_WARMUP_FRACTION,
};

/// The size-aware servers' settings (Minos inside each server), shared by `sim cluster
/// --minos` and `experiment tailx`'s `+minos` planners.
#[derive(clap::Args, Debug, Clone)]
pub struct MinosArgs {
    /// Size-aware servers: simulated µs between their controllers' decisions.
    #[arg(long, default_value_t = SizeAwareServers::default().epoch_us)]
    pub minos_epoch_us: f64,
    /// Size-aware servers: percentile of the opsets' reply sizes that becomes the threshold.
    #[arg(long, default_value_t = SizeAwareServers::default().percentile)]
    pub minos_percentile: f64,
    /// Size-aware servers: a fixed threshold (reply bytes) instead of the percentile.
    #[arg(long)]
    pub minos_threshold_bytes: Option<u64>,
    /// Size-aware servers: large workers serve large opsets only (Minos as published),
    /// instead of taking small ones while the large queue is empty.
    #[arg(long)]
    pub minos_no_help: bool,
}

impl MinosArgs {
    /// The servers' settings.
    pub fn servers(&self) -> SizeAwareServers {
        SizeAwareServers {
            epoch_us: self.minos_epoch_us,
            percentile: self.minos_percentile,
            threshold_bytes: self.minos_threshold_bytes,
            large_workers_help: !self.minos_no_help,
        }
    }
}

/// Arguments of `tailtrim sim cluster`.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// Cache servers.
    #[arg(long, default_value_t = 4)]
    pub servers: usize,
    /// Worker threads per server.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Serve prioritized fetches in strict priority order, whatever the planner's own order.
    #[arg(long, conflicts_with = "server_queue")]
    pub strict_priority: bool,
    /// How servers order prioritized fetches: planner (the planner's own: strict for
    /// rein-sbf and rein-sds, drr for rein-drr, aged strict for cost-sbf), strict or drr.
    #[arg(long, default_value = "planner")]
    pub server_queue: String,
    /// Closed loop: this many clients, each waiting for its reply before the next request
    /// (--rates is then ignored); 0: open loop.
    #[arg(long, default_value_t = 0)]
    pub clients: usize,
    /// Closed loop: mean think time between a reply and the next request, µs (exponential).
    #[arg(long, default_value_t = 0.0)]
    pub think_us: f64,
    /// Copies of each key.
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Client/proxy threads (modelled when --client-send or --client-recv costs something).
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// Multiget planner: batch, chisel, rein-sbf, rein-sds, rein-drr, tailx, cost-sbf (policy
    /// crate names).
    #[arg(long, default_value = "batch")]
    pub planner: String,
    /// Distinct keys.
    #[arg(long, default_value_t = 100_000)]
    pub keyspace: u64,
    /// Key popularity: uniform, zipf or zipf:S.
    #[arg(long, default_value = "uniform")]
    pub popularity: Popularity,
    /// Keys per request: N, uniform:A:B, exp:MEAN or table:V@P/V@P…
    #[arg(long, default_value = "1")]
    pub keys: String,
    /// Value bytes per key (same syntax as --keys).
    #[arg(long, default_value = "100")]
    pub value_bytes: String,
    /// A request with a value above this is in the large class.
    #[arg(long, default_value_t = DEFAULT_LARGE_VALUE_BYTES)]
    pub large_value_bytes: u64,
    /// Offered rates, requests per second (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10000")]
    pub rates: Vec<f64>,
    /// Uniform instead of Poisson arrivals.
    #[arg(long)]
    pub uniform_arrivals: bool,
    /// Requests per rate.
    #[arg(short = 'n', long, default_value_t = 200_000)]
    pub requests: u64,
    /// Share of requests not measured.
    #[arg(long, default_value_t = DEFAULT_WARMUP_FRACTION)]
    pub warmup: f64,
    /// Server time per fetch (cost spec, e.g. `const=20us,key=1us,dist=exp`).
    #[arg(long, default_value = "const=20us,dist=exp")]
    pub service: String,
    /// One-way network time per message (cost spec).
    #[arg(long, default_value = "off")]
    pub network: String,
    /// Client-thread time per request (cost spec).
    #[arg(long, default_value = "off")]
    pub client_send: String,
    /// Client-thread time per fetch reply (cost spec).
    #[arg(long, default_value = "off")]
    pub client_recv: String,
    /// Backend queries in flight at once over all backends (0: unbounded).
    #[arg(long, default_value_t = 0)]
    pub query_threads: usize,
    /// Client time to set up each backend query once it has a slot (cost spec; Chisel's
    /// overhead `o`).
    #[arg(long, default_value = "off")]
    pub query_setup: String,
    /// Seed of every random stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print JSON (scenario and one result per rate) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Size-aware workers in every server (Minos inside the server: large opsets go to a
    /// subset of its workers sized from the measured large share of the work).
    #[arg(long)]
    pub minos: bool,
    /// The size-aware servers' settings.
    #[command(flatten)]
    pub minos_settings: MinosArgs,
}

impl ClusterArgs {
    /// The scenario the flags describe (its rate is the first of `--rates`).
    pub fn scenario(&self) -> Result<ClusterScenario, String> {
        Ok(ClusterScenario {
            servers: self.servers,
            workers_per_server: self.workers,
            server_queue: match (self.strict_priority, self.server_queue.as_str()) {
                (true, _) | (false, "strict") => ServerQueue::Strict,
                (false, "planner") => ServerQueue::Planner,
                (false, "drr") => ServerQueue::Drr,
                (false, other) => {
                    return Err(format!(
                        "--server-queue {other:?}: one of planner, strict, drr"
                    ))
                }
            },
            replicas: self.replicas,
            client_threads: self.client_threads,
            planner: self.planner.clone(),
            workload: ClusterWorkload {
                keyspace: self.keyspace,
                popularity: self.popularity.clone(),
                keys_per_request: parse_distribution(&self.keys).map_err(|e| e.to_string())?,
                value_bytes: parse_distribution(&self.value_bytes).map_err(|e| e.to_string())?,
                large_value_bytes: self.large_value_bytes,
                large_keys: None,
            },
            rate_rps: self.rates.first().copied().unwrap_or(1.0),
            arrival: if self.uniform_arrivals {
                ArrivalProcess::Uniform
            } else {
                ArrivalProcess::Poisson
            },
            closed_loop: (self.clients > 0).then_some(ClosedLoop {
                clients: self.clients,
                think_us: self.think_us,
            }),
            requests: self.requests,
            warmup_fraction: self.warmup,
            service: spec(&self.service)?,
            network: spec(&self.network)?,
            client_send: spec(&self.client_send)?,
            client_recv: spec(&self.client_recv)?,
            query_threads: self.query_threads,
            query_setup: spec(&self.query_setup)?,
            online_analysis: None,
            size_aware: self.minos.then(|| self.minos_settings.servers()),
            seed: self.seed,
        })
    }
}

/// A cost spec from its text, the error as text.
fn spec(text: &str) -> Result<CostSpec, String> {
    CostSpec::parse(text).map_err(|e| e.to_string())
}
