//! The flags of `tailtrim bench` and what they give: the workload, the open- or closed-loop
//! [`RunConfig`] and the [`CacheAsideConfig`]. The clap definition lives here, beside the
//! settings it fills, so the binary only runs and prints.
//!
//! ```text
//!   BenchArgs ──workload──────────> WorkloadSpec (preset | --workload-file, then overrides)
//!             ──run_config────────> RunConfig (open loop, or --closed-loop N clients)
//!             ──cache_aside_config─> CacheAsideConfig (--cache-aside, --at events)
//! ```

use std::path::PathBuf;
use std::time::Duration;

use crate::cacheaside::parse_duration;
use crate::workload::{etc_arrival, Arrival, Popularity};
use crate::{
    CacheAsideConfig, ClosedLoop, RunConfig, ScheduledEvent, Transport, WorkloadOverrides,
    WorkloadSpec,
};

/// The flags of `tailtrim bench` (the subcommand's help text is the binary's).
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Server to load, host:port.
    #[arg(short = 's', long, default_value = "127.0.0.1:11211")]
    pub server: String,
    /// Use UDP (memcached's 8-byte frame header) instead of TCP.
    #[arg(long)]
    pub udp: bool,
    /// Built-in workload.
    #[arg(short = 'w', long, default_value = "etc")]
    pub workload: String,
    /// Workload TOML file (overrides --workload).
    #[arg(long, value_name = "PATH")]
    pub workload_file: Option<PathBuf>,
    /// Print the resolved workload as TOML and exit.
    #[arg(long)]
    pub print_workload: bool,
    /// Target rate in requests per second.
    #[arg(short = 'r', long, default_value_t = 10_000.0)]
    pub rate: f64,
    /// Sweep: `a,b,c` or `start:end:step` (overrides --rate).
    #[arg(long, value_name = "LIST")]
    pub rates: Option<String>,
    /// Measured seconds per run.
    #[arg(short = 'd', long, default_value_t = 10.0)]
    pub duration: f64,
    /// Warm-up seconds before each measured window.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Connections (UDP sockets with --udp).
    #[arg(short = 'c', long, default_value_t = crate::engine::DEFAULT_CONNECTIONS)]
    pub connections: usize,
    /// I/O threads (each runs rate/threads of the schedule).
    #[arg(short = 't', long, default_value_t = 1)]
    pub threads: usize,
    /// Requests in flight per connection before queueing client-side.
    #[arg(long, default_value_t = crate::engine::DEFAULT_MAX_IN_FLIGHT)]
    pub max_in_flight: usize,
    /// Closed loop (YCSB's model) with N clients instead of the open-loop schedule: each
    /// client is a connection with one request outstanding that sends its next request
    /// `--think-time` after the reply (`--rate`, `-c` and `--max-in-flight` do not apply).
    #[arg(long, value_name = "N", conflicts_with_all = ["rates", "udp", "cache_aside"])]
    pub closed_loop: Option<usize>,
    /// Closed loop: time between a reply and the client's next request, e.g. 500us, 2ms.
    #[arg(long, value_name = "DURATION", requires = "closed_loop")]
    pub think_time: Option<String>,
    /// Busy-poll margin before each send time, in microseconds (0: sleep on
    /// the timerfd until the send time; spinning costs CPU the server shares).
    #[arg(long, default_value_t = 0)]
    pub spin_us: u64,
    /// Time allowed for outstanding replies after the schedule, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub drain_ms: u64,
    /// UDP loss timeout in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub udp_timeout_ms: u64,
    /// Seed of the schedule and key choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Skip the preload phase.
    #[arg(long)]
    pub no_preload: bool,
    /// Only preload, no measured run.
    #[arg(long)]
    pub preload_only: bool,
    /// Where to preload over TCP (default: --server; set it when --udp
    /// targets a UDP port that has no TCP listener).
    #[arg(long, value_name = "HOST:PORT")]
    pub preload_server: Option<String>,
    /// Connections used by the preload.
    #[arg(long, default_value_t = 4)]
    pub preload_connections: usize,
    /// Before the run, apply the same load to a built-in null server (END /
    /// STORED, no storage) and report it as `floor`: the bench's own path.
    #[arg(long)]
    pub floor: bool,
    /// Write the results as JSON.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Do not run: read a JSON written by --json (one run or a sweep) and
    /// redraw its plots into --plot DIR.
    #[arg(long, value_name = "PATH", requires = "plot")]
    pub from_json: Option<PathBuf>,
    /// Write SVG and PNG plots into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// No progress bar, no table.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Keys in the main pool.
    #[arg(long)]
    pub keys: Option<u64>,
    /// Key popularity: uniform, zipf (0.99) or zipf:S.
    #[arg(long)]
    pub popularity: Option<String>,
    /// Arrival process: poisson or etc (generalized Pareto of the ETC trace).
    #[arg(long)]
    pub arrival: Option<String>,
    /// Share of keys drawn from the large pool (minos, tailx-large).
    #[arg(long)]
    pub large_share: Option<f64>,
    /// Keys in the large pool.
    #[arg(long)]
    pub large_keys: Option<u64>,
    /// Multiplier on large value sizes (e.g. 0.5 for 1 MB instead of 2 MB items).
    #[arg(long)]
    pub large_scale: Option<f64>,
    /// Keys per mice multiget.
    #[arg(long)]
    pub mice_keys: Option<u32>,
    /// Keys per elephant multiget.
    #[arg(long)]
    pub elephant_keys: Option<u32>,
    /// Mice requests per elephant (e.g. 9 or 5).
    #[arg(long)]
    pub mice_per_elephant: Option<f64>,
    /// Fixed key size of the main pool.
    #[arg(long)]
    pub key_size: Option<u32>,
    /// Fixed value size of the main pool.
    #[arg(long)]
    pub value_size: Option<u32>,
    /// Share of SETs in the mix.
    #[arg(long)]
    pub set_share: Option<f64>,
    /// Values above this many bytes make a request `large`.
    #[arg(long)]
    pub large_threshold: Option<u64>,
    /// Requests with at least this many keys are `elephant`.
    #[arg(long)]
    pub elephant_min_keys: Option<u32>,
    /// Cache-aside load: on a miss, wait for a simulated database (`--db-latency`) and add
    /// the value; SETs are database writes followed by a cache set. Every value read is
    /// checked against the database (key and version). Worker threads, one connection each.
    #[arg(long)]
    pub cache_aside: bool,
    /// Simulated database latency per read or write (cache-aside), e.g. 8ms.
    #[arg(long, default_value = "8ms", value_name = "DURATION")]
    pub db_latency: String,
    /// The proxy's admin listener (HOST:PORT), needed by `--at`.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,
    /// A membership change during the measured window (cache-aside), repeatable:
    /// `60s:add=HOST:PORT[,warmup=MODE][,share=F]` or `90s:remove=HOST:PORT[,warmup=drain]`.
    #[arg(long = "at", value_name = "EVENT")]
    pub at: Vec<String>,
    /// Cache-aside worker threads (requests in progress at most).
    #[arg(long, default_value_t = crate::cacheaside::DEFAULT_WORKERS)]
    pub workers: usize,
    /// Requests per window of the cache-aside per-request series.
    #[arg(long, default_value_t = crate::cacheaside::DEFAULT_WINDOW_REQUESTS)]
    pub window_requests: usize,
    /// Cache-aside: before the run, write every key at version 0, coldest first.
    #[arg(long)]
    pub prefill: bool,
    /// Cache-aside: the version every key starts at (runs back to back against one cache give
    /// each run a base above the versions earlier runs wrote; see scripts/soak.sh).
    #[arg(long, default_value_t = 0)]
    pub first_version: u32,
}

impl BenchArgs {
    /// The workload: `--workload-file`, else the built-in `--workload`, with the flags'
    /// overrides applied.
    pub fn workload(&self) -> Result<WorkloadSpec, String> {
        let mut spec = match &self.workload_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|error| format!("reading {}: {error}", path.display()))?;
                WorkloadSpec::from_toml(&text).map_err(|error| error.to_string())?
            }
            None => WorkloadSpec::preset(&self.workload).map_err(|error| error.to_string())?,
        };
        let popularity = self
            .popularity
            .as_deref()
            .map(str::parse::<Popularity>)
            .transpose()
            .map_err(|error| error.to_string())?;
        let arrival = match self.arrival.as_deref() {
            None => None,
            Some("poisson") => Some(Arrival::Poisson),
            Some("etc") | Some("gpd") => Some(etc_arrival()),
            Some(other) => return Err(format!("--arrival must be poisson or etc, got {other:?}")),
        };
        spec.apply(&WorkloadOverrides {
            keys: self.keys,
            popularity,
            large_share: self.large_share,
            large_keys: self.large_keys,
            large_scale: self.large_scale,
            mice_keys: self.mice_keys,
            elephant_keys: self.elephant_keys,
            mice_per_elephant: self.mice_per_elephant,
            key_size: self.key_size,
            value_size: self.value_size,
            set_share: self.set_share,
            arrival,
            large_threshold_bytes: self.large_threshold,
            elephant_min_keys: self.elephant_min_keys,
        })
        .map_err(|error| error.to_string())?;
        Ok(spec)
    }

    /// The run's settings (open loop, or closed loop with `--closed-loop`).
    pub fn run_config(&self) -> Result<RunConfig, String> {
        let mut config =
            RunConfig::new(&self.server, self.rate, seconds(self.duration, "duration")?);
        config.transport = if self.udp {
            Transport::Udp
        } else {
            Transport::Tcp
        };
        config.warmup = seconds(self.warmup, "warmup")?;
        config.connections = self.connections;
        config.threads = self.threads;
        config.max_in_flight = self.max_in_flight;
        config.spin = Duration::from_micros(self.spin_us);
        config.drain = Duration::from_millis(self.drain_ms);
        config.udp_timeout = Duration::from_millis(self.udp_timeout_ms);
        config.seed = self.seed;
        if let Some(clients) = self.closed_loop {
            let think_time = self
                .think_time
                .as_deref()
                .map(parse_duration)
                .transpose()
                .map_err(|error| format!("--think-time: {error}"))?
                .unwrap_or_default();
            config.connections = clients;
            config.closed_loop = Some(ClosedLoop { think_time });
        }
        Ok(config)
    }

    /// The settings of a `--cache-aside` run.
    pub fn cache_aside_config(&self) -> Result<CacheAsideConfig, String> {
        let mut config =
            CacheAsideConfig::new(&self.server, self.rate, seconds(self.duration, "duration")?);
        config.warmup = seconds(self.warmup, "warmup")?;
        config.db_latency = parse_duration(&self.db_latency).map_err(|error| error.to_string())?;
        config.admin = self.admin.clone();
        config.events = self
            .at
            .iter()
            .map(|text| text.parse::<ScheduledEvent>())
            .collect::<Result<_, _>>()
            .map_err(|error| error.to_string())?;
        config.workers = self.workers;
        config.window_requests = self.window_requests;
        config.prefill = self.prefill;
        config.first_version = self.first_version;
        config.seed = self.seed;
        Ok(config)
    }
}

/// `value` seconds; an error names the flag `--name`.
fn seconds(value: f64, name: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| format!("--{name} must be a non-negative number"))
}
