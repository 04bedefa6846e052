//! Pool configuration as the client library takes it (the proxy maps its TOML onto this).

use std::time::Duration;

use tailtrim_policy::health::{HealthSettings, DEFAULT_FAILURE_LIMIT, DEFAULT_RETRY_AFTER_NANOS};
use tailtrim_policy::planner::{PlannerKind, PlannerSettings};
use tailtrim_policy::ring::{ketama_name, RingOptions, RingServer};
use tailtrim_policy::serverq::Discipline;

use crate::error::ClientError;

/// Default request timeout (twemproxy has none by default; a cache wants a bound).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);
/// Default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(300);
/// Default connections per backend (twemproxy's `server_connections` default is 1).
pub const DEFAULT_CONNECTIONS_PER_BACKEND: usize = 2;
/// Default bound on requests queued per connection before failing fast with "overloaded".
pub const DEFAULT_QUEUE_LIMIT: usize = 4096;
/// Default copies of each key.
pub const DEFAULT_REPLICAS: usize = 1;
/// Requests in flight per backend, when the planner sets priorities and the config leaves the
/// window unset: small, so that the queue forms in the client where priorities are applied.
pub const DEFAULT_PRIORITY_WINDOW: usize = 2;
/// Default EWMA weight of a new latency sample for replica choice.
pub const DEFAULT_EWMA_ALPHA: f64 = tailtrim_policy::health::DEFAULT_EWMA_ALPHA;
/// Default bound on backend queries of multigets in flight (0 = unbounded).
pub const DEFAULT_QUERY_THREADS: usize = 0;
/// Query threads the Chisel analyzer assumes when `query_threads` is 0 (unbounded).
pub const DEFAULT_MODEL_CLIENT_THREADS: u32 = 16;
/// Default worker threads per backend, as the Chisel analyzer assumes (memcached's `-t 4`).
pub const DEFAULT_BACKEND_THREADS: u32 = 4;
/// Default Chisel analyzer epoch.
pub const DEFAULT_CHISEL_EPOCH: Duration = Duration::from_secs(1);

/// One backend: `host:port`, a weight and an optional ketama name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// Host name or IP.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Relative weight (>= 1).
    pub weight: u32,
    /// Explicit ketama name (twemproxy's optional `name` after the address).
    pub name: Option<String>,
}

impl ServerSpec {
    /// Parses twemproxy's `host:port[:weight] [name]` syntax.
    pub fn parse(text: &str) -> Result<ServerSpec, ClientError> {
        let bad = |why: &str| ClientError::Config(format!("server {text:?}: {why}"));
        let mut words = text.split_whitespace();
        let address = words.next().ok_or_else(|| bad("empty"))?;
        let name = words.next().map(str::to_string);
        if words.next().is_some() {
            return Err(bad("expected \"host:port[:weight] [name]\""));
        }
        let parts: Vec<&str> = address.rsplitn(3, ':').collect();
        let (host, port, weight) = match parts.as_slice() {
            [port, host] => (*host, *port, "1"),
            [weight, port, host] => (*host, *port, *weight),
            _ => return Err(bad("expected \"host:port[:weight] [name]\"")),
        };
        let port: u16 = port.parse().map_err(|_| bad("bad port"))?;
        let weight: u32 = weight.parse().map_err(|_| bad("bad weight"))?;
        if weight == 0 {
            return Err(bad("weight must be at least 1"));
        }
        if host.is_empty() {
            return Err(bad("empty host"));
        }
        Ok(ServerSpec {
            host: host.to_string(),
            port,
            weight,
            name,
        })
    }

    /// `host:port`, the address connected to.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The ring entry (ketama identity and weight).
    pub fn ring_server(&self) -> RingServer {
        RingServer {
            name: ketama_name(&self.host, self.port, self.name.as_deref()),
            weight: self.weight,
        }
    }
}

impl std::fmt::Display for ServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.host, self.port, self.weight)?;
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        Ok(())
    }
}

/// Everything a [`crate::pool::Pool`] needs.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Pool name (used in metrics).
    pub name: String,
    /// Backends in config order (the order matters to modula/jump, not to ketama).
    pub servers: Vec<ServerSpec>,
    /// Hash, distribution and hash tag.
    pub ring: RingOptions,
    /// Copies of each key (1 = no replication).
    pub replicas: usize,
    /// Multiget planner.
    pub planner: PlannerKind,
    /// Settings of the planners that have any (TailX's filter and threshold).
    pub planner_settings: PlannerSettings,
    /// Bound on one backend request (queueing + send + reply).
    pub timeout: Duration,
    /// Bound on establishing a connection.
    pub connect_timeout: Duration,
    /// Connections per backend; requests are spread round-robin and pipelined on each.
    pub connections_per_backend: usize,
    /// Which of a backend's connections carries the next request (default: round robin;
    /// `least-loaded` and `avoid-slow` dodge slow replies, see [`tailtrim_policy::lanes`]).
    pub connection_choice: tailtrim_policy::lanes::ConnectionChoice,
    /// Requests queued per connection before failing fast.
    pub queue_limit: usize,
    /// Down-host tracking.
    pub health: HealthSettings,
    /// EWMA weight for latency samples.
    pub ewma_alpha: f64,
    /// Half-life of a backend's latency estimate that no reply refreshes: the replica chooser
    /// pulls it toward the pool's mean at this pace (zero: estimates never go stale).
    pub estimate_half_life: Duration,
    /// Bound on backend queries of multigets in flight, the paper's query threads `C`
    /// (0 = unbounded). Applies to every planner.
    pub query_threads: usize,
    /// Setup time added before every backend query of a multiget (the paper's injected client
    /// overhead; zero = none). Applies to every planner.
    pub inject_overhead: Duration,
    /// Sleep the injected setup time on a blocking thread instead of spinning on the runtime
    /// (an emulated overhead that spends no CPU; for dilated testbeds).
    pub inject_overhead_sleeps: bool,
    /// Requests with more keys than this are elephants (per-class stats, Chisel).
    pub elephant_threshold: u32,
    /// Worker threads per backend (the Chisel analyzer's `S` = backends × this).
    pub backend_threads: u32,
    /// Chisel: epoch of the online analyzer.
    pub chisel_epoch: Duration,
    /// Chisel: a fixed `(B, L)` instead of the analyzer's (experiments sweep with this).
    pub chisel_fixed: Option<(u32, u32)>,
    /// Chisel: the analyzer's settings (`client_threads`/`server_threads` are derived; the
    /// processing share is measured unless a caller fixes it).
    pub analyzer: tailtrim_model::chisel_online::AnalyzerConfig,
    /// Requests in flight per backend before the client queues them by priority class:
    /// `None` picks [`DEFAULT_PRIORITY_WINDOW`] for planners that set priorities and no bound
    /// otherwise; `Some(0)` is no bound.
    pub window: Option<usize>,
    /// The order in which the window's queue serves the priority classes: `None` is the
    /// planner's own ([`tailtrim_policy::planner::Planner::discipline`]: strict priority for
    /// Rein, as `tailtrim serve` orders its job queue), `Some` overrides it (`Drr` for the
    /// deficit round robin the proxy used before).
    pub priority_order: Option<Discipline>,
    /// How backend connections are opened: TLS toward the backends and memcached's `-Y`
    /// login, each when set (default: plain TCP, no login).
    pub dialer: crate::dial::Dialer,
}

impl PoolConfig {
    /// A config with defaults for everything but the servers.
    pub fn new(name: &str, servers: Vec<ServerSpec>) -> Self {
        PoolConfig {
            name: name.to_string(),
            servers,
            ring: RingOptions {
                hash: tailtrim_policy::ring::HashFunction::Md5,
                ..RingOptions::default()
            },
            replicas: DEFAULT_REPLICAS,
            planner: PlannerKind::Batch,
            planner_settings: PlannerSettings::default(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            connections_per_backend: DEFAULT_CONNECTIONS_PER_BACKEND,
            connection_choice: tailtrim_policy::lanes::ConnectionChoice::RoundRobin,
            queue_limit: DEFAULT_QUEUE_LIMIT,
            health: HealthSettings {
                failure_limit: DEFAULT_FAILURE_LIMIT,
                retry_after_nanos: DEFAULT_RETRY_AFTER_NANOS,
            },
            ewma_alpha: DEFAULT_EWMA_ALPHA,
            estimate_half_life: Duration::from_nanos(
                tailtrim_policy::health::DEFAULT_ESTIMATE_HALF_LIFE_NANOS,
            ),
            query_threads: DEFAULT_QUERY_THREADS,
            inject_overhead: Duration::ZERO,
            inject_overhead_sleeps: false,
            elephant_threshold: tailtrim_policy::chisel::DEFAULT_ELEPHANT_THRESHOLD,
            backend_threads: DEFAULT_BACKEND_THREADS,
            chisel_epoch: DEFAULT_CHISEL_EPOCH,
            chisel_fixed: None,
            analyzer: tailtrim_model::chisel_online::AnalyzerConfig {
                measure_processing_share: true,
                ..tailtrim_model::chisel_online::AnalyzerConfig::default()
            },
            window: None,
            priority_order: None,
            dialer: crate::dial::Dialer::default(),
        }
    }

    /// The order of the backends' priority gates ([`PoolConfig::priority_order`]).
    pub fn gate_order(&self) -> Discipline {
        self.priority_order
            .unwrap_or_else(|| self.planner.discipline(&self.planner_settings))
    }

    /// The in-flight window the backends apply (0: none).
    pub fn effective_window(&self) -> usize {
        self.window.unwrap_or(if self.planner.uses_priorities() {
            DEFAULT_PRIORITY_WINDOW
        } else {
            0
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_twemproxy_server_lines() {
        let plain = ServerSpec::parse("127.0.0.1:11212").unwrap();
        assert_eq!(
            (plain.port, plain.weight, plain.name.clone()),
            (11212, 1, None)
        );
        assert_eq!(plain.ring_server().name, "127.0.0.1:11212");
        let named = ServerSpec::parse("cache-1:11211:3 alpha").unwrap();
        assert_eq!(named.host, "cache-1");
        assert_eq!(named.weight, 3);
        assert_eq!(named.ring_server().name, "alpha");
        assert_eq!(named.to_string(), "cache-1:11211:3 alpha");
        let default_port = ServerSpec::parse("10.0.0.1:11211:1").unwrap();
        assert_eq!(default_port.ring_server().name, "10.0.0.1");
        for bad in ["", "host", "h:notaport", "h:1:0", "h:1:1 a b", ":1"] {
            assert!(ServerSpec::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
