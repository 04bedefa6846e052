//! The proxy's TOML configuration: one struct per section, defaults as documented consts.
//!
//! ```toml
//! [proxy]
//! listen = "127.0.0.1:22122"
//! admin_listen = "127.0.0.1:22123"
//!
//! [pool]
//! servers = ["127.0.0.1:11211:1", "127.0.0.1:11212:1"]
//! ```
//!
//! See `config/proxy.example.toml` for every key with its default.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tailtrim_client::{BackendLogin, BackendTls, PoolConfig, RouteSpec, ServerSpec};
use tailtrim_policy::health::HealthSettings;
use tailtrim_policy::hotkeys::TrackerConfig;
use tailtrim_policy::planner::PlannerKind;
use tailtrim_policy::ring::{parse_hash_tag, Distribution, HashFunction, RingOptions};
use tailtrim_policy::serverq::Discipline;
use tailtrim_policy::tailx::TailxSettings;
use tailtrim_policy::warmup::{WarmupMode, WarmupSettings};
use tailtrim_tls::{ClientTlsOptions, ServerTlsOptions};

use crate::classes::ClassesSection;
use crate::error::ProxyError;
use crate::prediction::ModelSection;

/// Default client listen address (twemproxy's customary port).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:22122";
/// Default admin (Prometheus `/metrics`) listen address; empty disables it.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:22123";
/// Default runtime worker threads (this project's machines have 2 cores).
pub const DEFAULT_THREADS: usize = 2;
/// Default largest value accepted from clients (memcached's `-I` default, 1 MiB).
pub const DEFAULT_ITEM_SIZE_MAX: usize = tailtrim_proto::DEFAULT_ITEM_SIZE_MAX;
/// Default client connection limit (memcached's `-c` default); past it a new client gets
/// `ERROR Too many open connections` and is closed. 0: no limit.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default idle timeout, seconds: a client that completes no command for this long is closed
/// (memcached's `-o idle_timeout`). 0: never.
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 0;
/// Default pool name.
pub const DEFAULT_POOL_NAME: &str = "default";
/// Default key hash. `md5` is libmemcached's ketama hash; set `fnv1a_64` to match a
/// nutcracker pool that has no `hash:` line.
pub const DEFAULT_HASH: &str = "md5";
/// Default distribution.
pub const DEFAULT_DISTRIBUTION: &str = "ketama";
/// Default multiget planner.
pub const DEFAULT_PLANNER: &str = "batch";
/// Default backend request timeout in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 500;
/// Default connect timeout in milliseconds.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 300;
/// Default connections per backend: one, as twemproxy's `server_connections`. With two, round
/// robin put every other fetch of a backend on its other connection, so a memcached woken once
/// found both readable and read each, and the proxy had two readers per backend to wake: in
/// the saturated 10-key closed loop, more system calls per request at the backends and at the
/// proxy than with one connection (`experiments/proxy/one-connection/`). More
/// connections (`--server-connections`) are for backends whose slow replies would hold the
/// ones queued behind them (`connection_choice`).
pub const DEFAULT_SERVER_CONNECTIONS: usize = 1;
/// Default consecutive failures before a backend is marked down.
pub const DEFAULT_SERVER_FAILURE_LIMIT: u32 = tailtrim_policy::health::DEFAULT_FAILURE_LIMIT;
/// Default wait before probing a down backend, in milliseconds.
pub const DEFAULT_SERVER_RETRY_TIMEOUT_MS: u64 =
    tailtrim_policy::health::DEFAULT_RETRY_AFTER_NANOS / 1_000_000;
/// Default TailX large-value threshold in bytes (0: learned from the observed value sizes).
pub const DEFAULT_TAILX_LARGE_THRESHOLD: u64 = 0;
/// Default keys per TailX Bloom filter generation.
pub const DEFAULT_TAILX_FILTER_CAPACITY: usize = tailtrim_policy::tailx::DEFAULT_FILTER_CAPACITY;
/// Default TailX Bloom filter generations.
pub const DEFAULT_TAILX_FILTER_GENERATIONS: usize =
    tailtrim_policy::tailx::DEFAULT_FILTER_GENERATIONS;
/// Default smallest TailX delay allowance acted on, in microseconds.
pub const DEFAULT_TAILX_MIN_DELAY_US: u64 = tailtrim_policy::tailx::DEFAULT_MIN_DELAY_NANOS / 1000;
/// Default requests queued per backend connection before failing fast.
pub const DEFAULT_QUEUE_LIMIT: usize = tailtrim_client::config::DEFAULT_QUEUE_LIMIT;
/// Default bound on multiget backend queries in flight (0 = unbounded).
pub const DEFAULT_QUERY_THREADS: usize = tailtrim_client::config::DEFAULT_QUERY_THREADS;
/// Default setup time injected before every multiget backend query, µs (0 = none).
pub const DEFAULT_INJECT_OVERHEAD_US: u64 = 0;
/// Default for `inject_overhead_sleep`: the injected setup time spins (costs CPU).
pub const DEFAULT_INJECT_OVERHEAD_SLEEP: bool = false;
/// Default size above which a request is an elephant, in keys.
pub const DEFAULT_ELEPHANT_THRESHOLD: u32 = tailtrim_policy::chisel::DEFAULT_ELEPHANT_THRESHOLD;
/// Default worker threads per backend assumed by the Chisel analyzer.
pub const DEFAULT_BACKEND_THREADS: u32 = tailtrim_client::config::DEFAULT_BACKEND_THREADS;
/// Default Chisel analyzer epoch, ms.
pub const DEFAULT_CHISEL_EPOCH_MS: u64 = 1000;
/// Share of the measured round trip the Chisel analyzer counts as backend processing until
/// its first measurement (when `chisel_processing_share` is unset).
pub const DEFAULT_CHISEL_PROCESSING_SHARE: f64 =
    tailtrim_model::chisel_online::DEFAULT_PROCESSING_SHARE;
/// Default trusted fits in a row before the Chisel analyzer leaves batching.
pub const DEFAULT_CHISEL_SETTLE_EPOCHS: u32 = tailtrim_model::chisel_online::DEFAULT_SETTLE_EPOCHS;
/// Default share by which a Chisel plan's observed mean may exceed batching's before it is
/// reverted.
pub const DEFAULT_CHISEL_GUARD_MARGIN: f64 = tailtrim_model::chisel_online::DEFAULT_GUARD_MARGIN;
/// Default epochs in batching after the guard reverted a Chisel plan.
pub const DEFAULT_CHISEL_GUARD_BACKOFF: u32 = tailtrim_model::chisel_online::DEFAULT_GUARD_BACKOFF;

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// `[proxy]`: the front end.
    pub proxy: ProxySection,
    /// `[pool]`: the backends.
    pub pool: PoolSection,
    /// `[warmup]`: hot-key tracking and warm-up of membership changes.
    pub warmup: WarmupSection,
    /// `[[routes]]`: routes in front of the pool, outermost first (none by default: requests
    /// go straight to the pool's membership view). See `docs/routes.md`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteSection>,
    /// `[classes]`: the bounds of the per-class latency histograms (`latency_class_us`):
    /// `large_value_bytes` (a get's reply above it is a large get) and `elephant_keys` (a
    /// multiget of at least that many keys is an elephant). See `crate::classes`.
    #[serde(skip_serializing_if = "ClassesSection::is_default")]
    pub classes: ClassesSection,
    /// `[tls]`: TLS on the client listener, memcached's `-Z` and `ssl_*` options with the
    /// same names without the `ssl_` prefix (`enabled`, `chain_cert`, `key`, `ca_cert`,
    /// `verify_mode`, `min_version`, …). Not printed by `--print-config`.
    #[serde(skip_serializing)]
    pub tls: ServerTlsOptions,
    /// `[model]`: what the live latency prediction assumes of the backends
    /// (`crate::prediction`); printed only when set.
    #[serde(skip_serializing_if = "ModelSection::is_default")]
    pub model: ModelSection,
}

/// One `[[routes]]` entry (`docs/routes.md`): above the membership view `logging`,
/// `timeout`, `shadow`; then `warmup`; then the pool's layers `failover`, `planner`, `gate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// The route's type.
    #[serde(rename = "type")]
    pub kind: String,
    /// `timeout`: the bound on a whole request, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// `shadow`: the servers requests are mirrored to, as in `[pool] servers`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    /// `shadow`: one request in this many is mirrored (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_every: Option<u32>,
    /// `failover`: copies of each key (default: `[pool] replicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<usize>,
    /// `planner`: the multiget planner (default: `[pool] planner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner: Option<String>,
    /// `gate`: requests in flight per backend (default: `[pool] backend_window`, else 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_window: Option<usize>,
    /// `gate`: `strict` or `drr` (default: `[pool] priority_order`, else the planner's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_order: Option<String>,
}

/// `[warmup]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WarmupSection {
    /// Default mode of a join or a SIGHUP reload: cold, fallback, preemptive,
    /// preemptive+fallback (the admin API can override it per change).
    pub mode: String,
    /// Default mode of a removal: cold, or drain (= preemptive: the departing server's hottest
    /// keys are copied to their new owners first).
    pub remove_mode: String,
    /// Share of the remapped keys the old owners hold (their `lru_crawler metadump` or
    /// `stats cachedump` listing) copied before the switch, hottest first.
    pub warm_share: f64,
    /// Copies per second at most.
    pub copy_rate: u32,
    /// Keys one change plans to copy at most (memory bound of the plan).
    pub max_copy_keys: usize,
    /// Fallback warm-up ends at the latest after this long (ms).
    pub max_ms: u64,
    /// Reads of moved keys before warm-up may end on hit ratio.
    pub min_reads: u64,
    /// Warm-up ends when the moved keys' hit ratio is within this of the others'.
    pub tolerance: f64,
    /// Keys tracked per backend (memory bound: about capacity x (2 x 250 + 100) bytes).
    pub tracker_capacity: usize,
    /// Track one request in this many.
    pub tracker_sample_every: u32,
}

/// Default join mode.
pub const DEFAULT_WARMUP_MODE: &str = "preemptive+fallback";
/// Default removal mode.
pub const DEFAULT_REMOVE_MODE: &str = "drain";

impl Default for WarmupSection {
    fn default() -> Self {
        WarmupSection {
            mode: DEFAULT_WARMUP_MODE.to_string(),
            remove_mode: DEFAULT_REMOVE_MODE.to_string(),
            warm_share: tailtrim_policy::warmup::DEFAULT_WARM_SHARE,
            copy_rate: tailtrim_policy::warmup::DEFAULT_COPY_RATE,
            max_copy_keys: tailtrim_policy::warmup::DEFAULT_MAX_COPY_KEYS,
            max_ms: tailtrim_policy::warmup::DEFAULT_MAX_NANOS / 1_000_000,
            min_reads: tailtrim_policy::warmup::DEFAULT_MIN_READS,
            tolerance: tailtrim_policy::warmup::DEFAULT_TOLERANCE,
            tracker_capacity: tailtrim_policy::hotkeys::DEFAULT_CAPACITY,
            tracker_sample_every: tailtrim_policy::hotkeys::DEFAULT_SAMPLE_EVERY,
        }
    }
}

impl WarmupSection {
    /// Warm-up settings for `mode` (a name; empty: this section's join mode).
    pub fn settings(&self, mode: &str) -> Result<WarmupSettings, ProxyError> {
        let bad = |message: String| ProxyError::Config(format!("[warmup] {message}"));
        let mode = WarmupMode::from_name(if mode.is_empty() { &self.mode } else { mode })
            .map_err(|e| bad(e.to_string()))?;
        if !(0.0..=1.0).contains(&self.warm_share) {
            return Err(bad(format!(
                "warm_share = {} must be between 0 and 1",
                self.warm_share
            )));
        }
        Ok(WarmupSettings {
            mode,
            warm_share: self.warm_share,
            copy_rate: self.copy_rate.max(1),
            max_copy_keys: self.max_copy_keys.max(1),
            max_nanos: self.max_ms.saturating_mul(1_000_000),
            min_reads: self.min_reads,
            tolerance: self.tolerance,
        })
    }

    /// The trackers' settings.
    pub fn tracker(&self) -> TrackerConfig {
        TrackerConfig {
            capacity: self.tracker_capacity.max(1),
            sample_every: self.tracker_sample_every.max(1),
            ..TrackerConfig::default()
        }
    }
}

/// `[proxy]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProxySection {
    /// Client listen address.
    pub listen: String,
    /// Admin listen address for `GET /metrics`; empty string disables it.
    pub admin_listen: String,
    /// Shared secret that membership changes (`POST`/`DELETE /pool/servers`) must send as
    /// `Authorization: Bearer <token>`. Never printed by `--print-config`: prefer
    /// `admin_token_file`. Empty: none.
    #[serde(skip_serializing)]
    pub admin_token: String,
    /// File holding the admin token (surrounding whitespace and the final newline are
    /// dropped). Empty: none. Set at most one of `admin_token` and `admin_token_file`.
    pub admin_token_file: String,
    /// memcached's ASCII authentication on the client listener (`-Y`): a file of
    /// `user:password` lines; a client must send `set <key> 0 0 <bytes>` with `user password`
    /// as its data before anything else is served. SIGHUP re-reads it. Empty: off.
    pub auth_file: String,
    /// Runtime worker threads.
    pub threads: usize,
    /// Largest value accepted from clients (bytes); larger `set`s get memcached's
    /// `SERVER_ERROR object too large for cache` without reaching a backend.
    pub item_size_max: usize,
    /// Client connections at most; past it a new client gets `ERROR Too many open
    /// connections` and is closed (memcached's `-c`). 0: no limit.
    pub max_connections: usize,
    /// Close a client that completes no command for this many seconds (memcached's
    /// `-o idle_timeout`; a client trickling a request counts as idle). 0: never.
    pub idle_timeout_secs: u64,
}

impl Default for ProxySection {
    fn default() -> Self {
        ProxySection {
            listen: DEFAULT_LISTEN.to_string(),
            admin_listen: DEFAULT_ADMIN_LISTEN.to_string(),
            admin_token: String::new(),
            admin_token_file: String::new(),
            auth_file: String::new(),
            threads: DEFAULT_THREADS,
            item_size_max: DEFAULT_ITEM_SIZE_MAX,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout_secs: DEFAULT_IDLE_TIMEOUT_SECS,
        }
    }
}

impl ProxySection {
    /// The admin token from `admin_token` or `admin_token_file`; `None` when neither is set.
    /// Setting both, an unreadable or empty file, or a token with characters other than
    /// visible ASCII (it travels in an HTTP header) are configuration errors.
    pub fn admin_token(&self) -> Result<Option<String>, ProxyError> {
        let bad = |message: String| ProxyError::Config(format!("[proxy] {message}"));
        let (token, origin) = match (
            self.admin_token.is_empty(),
            self.admin_token_file.is_empty(),
        ) {
            (true, true) => return Ok(None),
            (false, false) => {
                return Err(bad(
                    "set admin_token or admin_token_file, not both".to_string()
                ))
            }
            (false, true) => (
                self.admin_token.trim().to_string(),
                "admin_token".to_string(),
            ),
            (true, false) => {
                let text = std::fs::read_to_string(&self.admin_token_file).map_err(|source| {
                    ProxyError::Io {
                        what: format!("reading the admin token file {}", self.admin_token_file),
                        source,
                    }
                })?;
                (
                    text.trim().to_string(),
                    format!("admin_token_file {}", self.admin_token_file),
                )
            }
        };
        if token.is_empty() {
            return Err(bad(format!("{origin}: the token is empty")));
        }
        if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(bad(format!(
                "{origin}: the token may hold visible ASCII characters only (no spaces)"
            )));
        }
        Ok(Some(token))
    }
}

/// `[pool]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolSection {
    /// Name used in stats and metrics.
    pub name: String,
    /// Backends, twemproxy syntax: `host:port[:weight] [name]`.
    pub servers: Vec<String>,
    /// Key hash: fnv1_64, fnv1a_64, fnv1_32, fnv1a_32, md5, one_at_a_time, crc32, crc32a.
    pub hash: String,
    /// ketama, modula or jump.
    pub distribution: String,
    /// Two characters, e.g. "{}": hash only the part of the key between them. Empty: off.
    pub hash_tag: String,
    /// Copies of each key: writes go to all, reads to the cheapest live one.
    pub replicas: usize,
    /// Multiget planner: batch, chisel, rein-sbf, rein-sds or tailx.
    pub planner: String,
    /// Requests in flight per backend; more wait in the proxy, served by priority class in
    /// `priority_order`. Unset: 2 for the planners that set priorities, else no bound;
    /// 0: no bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_window: Option<usize>,
    /// The order in which requests waiting for a backend's window are served: `strict`
    /// (strict priority, first come first served inside a class, as `tailtrim serve` orders
    /// its job queue) or `drr` (deficit round robin over the classes, weights 5..1). Unset:
    /// the planner's own (strict for rein-sbf and rein-sds, drr for rein-drr, aged for
    /// cost-sbf).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_order: Option<String>,
    /// TailX: values larger than this many bytes are large (0: learned from value sizes).
    pub tailx_large_threshold: u64,
    /// TailX: keys per Bloom filter generation.
    pub tailx_filter_capacity: usize,
    /// TailX: Bloom filter generations (the oldest is dropped when the newest is full).
    pub tailx_filter_generations: usize,
    /// TailX: smallest delay allowance acted on (µs); smaller ones are sent at once.
    pub tailx_min_delay_us: u64,
    /// Backend request timeout (ms).
    pub timeout_ms: u64,
    /// Connect timeout (ms).
    pub connect_timeout_ms: u64,
    /// Connections per backend.
    pub server_connections: usize,
    /// Which of a backend's connections carries the next request: `round-robin` (twemproxy's
    /// way, default), `least-loaded` (the one with the fewest requests in flight, so a
    /// request does not queue behind a slow reply while another connection is idle) or
    /// `avoid-slow` (round robin, skipping a connection whose oldest request in flight is
    /// older than 4 typical response times of the backend, at least 1 ms).
    pub connection_choice: String,
    /// How batch, Rein, `cost-sbf`, `cost-rel` and `size-rel` pick each key's replica when
    /// `replicas` > 1: `c3` (each key to its cheapest replica by C3's cost, default) or
    /// `spread` (each key to the replica holding the fewest of the request's keys so far, ties
    /// by C3's cost: a 2-key request is not put on one server when its keys have replicas
    /// apart, which strict Rein-SBF's ranking by the bottleneck's key count needs;
    /// `experiments/tailx/sim-v9-spread/`) or `cover` (the request's keys gathered on few
    /// backends, each weighed by its keys in flight plus `fetch_cost_keys` per request:
    /// fewer fetches per multiget; `experiments/tailx/sim-v10-cover/`). TailX, Chisel and auto
    /// always use C3's.
    pub replica_choice: String,
    /// The fixed cost of one request at a backend, counted in keys, for `replica_choice =
    /// "cover"`'s estimate of each backend's work in flight (default 3).
    pub fetch_cost_keys: f64,
    /// `cost-rel` and `auto`: later arrivals that may overtake a demoted request's fetch per
    /// class between them, at the backends (`tailtrim serve` reads it from `mg … p<c>a<n>`)
    /// and in the proxy's window queue (default 400).
    pub cost_rel_overtakes: u64,
    /// `size-rel`: the same, its own (default 25: it demotes every fetch holding a large
    /// value, and a looser ageing lets a saturated class 0 hold them back;
    /// `experiments/tailx/sim-v12-ageing/`).
    pub size_rel_overtakes: u64,
    /// Consecutive failures that mark a backend down.
    pub server_failure_limit: u32,
    /// Wait before a down backend is probed again (ms).
    pub server_retry_timeout_ms: u64,
    /// Requests queued per connection before failing fast.
    pub queue_limit: usize,
    /// Multiget backend queries in flight at once (Chisel's query threads `C`); 0 = unbounded.
    pub query_threads: usize,
    /// Setup time added before every multiget backend query, µs (emulated client overhead;
    /// it spins on the proxy's threads). 0 = none.
    pub inject_overhead_us: u64,
    /// Sleep the injected setup time on a blocking thread instead of spinning on the proxy's
    /// threads: an emulated overhead that spends no CPU (for testbeds with dilated times).
    pub inject_overhead_sleep: bool,
    /// Requests with more keys than this are elephants (per-class stats; Chisel splits them).
    pub elephant_threshold: u32,
    /// Worker threads per backend (the Chisel analyzer's server threads = backends × this).
    pub backend_threads: u32,
    /// Chisel: how often the analyzer picks (B, L), ms.
    pub chisel_epoch_ms: u64,
    /// Chisel: a fixed "B,L" (merge level, chunk size) instead of the analyzer's; "" = online.
    pub chisel_fixed: String,
    /// Chisel: share of the measured round trip counted as backend processing P_S. Unset:
    /// measured every epoch from the observed latency (starting from 0.1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chisel_processing_share: Option<f64>,
    /// Chisel: trusted fits in a row before the analyzer leaves batching.
    pub chisel_settle_epochs: u32,
    /// Chisel: a plan whose epoch's observed mean latency exceeds batching's by more than
    /// this share goes back to batching (negative: guard off).
    pub chisel_guard_margin: f64,
    /// Chisel: epochs in batching after such a revert (doubled per revert in a row).
    pub chisel_guard_backoff: u32,
    /// User the proxy logs in as on every new backend connection (backends run with
    /// memcached's `-Y`). Set with `password`, or use `auth_file`. Empty: no login.
    pub username: String,
    /// Password for `username`. Never printed by `--print-config`: prefer `auth_file`.
    #[serde(skip_serializing)]
    pub password: String,
    /// File whose first line is the `user:password` the proxy logs in with (a memcached `-Y`
    /// file works). Set it or `username`/`password`, not both. Empty: none.
    pub auth_file: String,
    /// `[pool.tls]`: TLS toward the backends (`memcached -Z`): `ca_cert` (required), `cert`
    /// and `key` (a client certificate, for backends that verify clients), `server_name`
    /// (the name the backends' certificates carry; unset: each backend's host). Unset: plain.
    /// Not printed by `--print-config`.
    #[serde(skip_serializing)]
    pub tls: Option<ClientTlsOptions>,
}

impl Default for PoolSection {
    fn default() -> Self {
        PoolSection {
            name: DEFAULT_POOL_NAME.to_string(),
            servers: Vec::new(),
            hash: DEFAULT_HASH.to_string(),
            distribution: DEFAULT_DISTRIBUTION.to_string(),
            hash_tag: String::new(),
            replicas: 1,
            planner: DEFAULT_PLANNER.to_string(),
            backend_window: None,
            priority_order: None,
            tailx_large_threshold: DEFAULT_TAILX_LARGE_THRESHOLD,
            tailx_filter_capacity: DEFAULT_TAILX_FILTER_CAPACITY,
            tailx_filter_generations: DEFAULT_TAILX_FILTER_GENERATIONS,
            tailx_min_delay_us: DEFAULT_TAILX_MIN_DELAY_US,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            server_connections: DEFAULT_SERVER_CONNECTIONS,
            connection_choice: "round-robin".to_string(),
            replica_choice: "c3".to_string(),
            fetch_cost_keys: tailtrim_policy::planner::DEFAULT_FETCH_COST_KEYS,
            cost_rel_overtakes: tailtrim_policy::costrel::DEFAULT_REL_OVERTAKES,
            size_rel_overtakes: tailtrim_policy::sizerel::DEFAULT_SIZE_REL_OVERTAKES,
            server_failure_limit: DEFAULT_SERVER_FAILURE_LIMIT,
            server_retry_timeout_ms: DEFAULT_SERVER_RETRY_TIMEOUT_MS,
            queue_limit: DEFAULT_QUEUE_LIMIT,
            query_threads: DEFAULT_QUERY_THREADS,
            inject_overhead_us: DEFAULT_INJECT_OVERHEAD_US,
            inject_overhead_sleep: DEFAULT_INJECT_OVERHEAD_SLEEP,
            elephant_threshold: DEFAULT_ELEPHANT_THRESHOLD,
            backend_threads: DEFAULT_BACKEND_THREADS,
            chisel_epoch_ms: DEFAULT_CHISEL_EPOCH_MS,
            chisel_fixed: String::new(),
            chisel_processing_share: None,
            chisel_settle_epochs: DEFAULT_CHISEL_SETTLE_EPOCHS,
            chisel_guard_margin: DEFAULT_CHISEL_GUARD_MARGIN,
            chisel_guard_backoff: DEFAULT_CHISEL_GUARD_BACKOFF,
            username: String::new(),
            password: String::new(),
            auth_file: String::new(),
            tls: None,
        }
    }
}

/// Parses `"B,L"` (L may be `inf`).
fn parse_fixed_shape(text: &str) -> Option<(u32, u32)> {
    let (merge, chunk) = text.split_once(',')?;
    let merge: u32 = merge.trim().parse().ok()?;
    let chunk = match chunk.trim() {
        "inf" | "max" => u32::MAX,
        other => other.parse().ok()?,
    };
    (merge >= 1 && chunk >= 1).then_some((merge, chunk))
}

impl PoolSection {
    /// The credentials toward `-Y` backends from `username`/`password` or `auth_file`;
    /// `None` when neither is set. Both set, half a pair, an unreadable file or credentials a
    /// server could not read back are configuration errors.
    pub fn backend_login(&self) -> Result<Option<BackendLogin>, ProxyError> {
        let bad = |message: String| ProxyError::Config(format!("[pool] {message}"));
        let pair_set = !self.username.is_empty() || !self.password.is_empty();
        match (pair_set, self.auth_file.is_empty()) {
            (false, true) => Ok(None),
            (true, false) => Err(bad(
                "set username/password or auth_file, not both".to_string()
            )),
            (true, true) => {
                if self.username.is_empty() || self.password.is_empty() {
                    return Err(bad("username and password go together".to_string()));
                }
                BackendLogin::new(&self.username, &self.password)
                    .map(Some)
                    .map_err(|error| bad(error.to_string()))
            }
            (false, false) => {
                let text =
                    std::fs::read_to_string(&self.auth_file).map_err(|source| ProxyError::Io {
                        what: format!("reading the backend auth file {}", self.auth_file),
                        source,
                    })?;
                BackendLogin::from_auth_file_text(&text)
                    .map(Some)
                    .map_err(|error| bad(format!("auth_file {}: {error}", self.auth_file)))
            }
        }
    }
}

impl ProxyConfig {
    /// Parses a TOML document.
    pub fn from_toml(text: &str) -> Result<ProxyConfig, ProxyError> {
        toml::from_str(text).map_err(|error| ProxyError::Config(error.to_string()))
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &std::path::Path) -> Result<ProxyConfig, ProxyError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProxyError::Io {
            what: format!("reading {}", path.display()),
            source,
        })?;
        ProxyConfig::from_toml(&text)
    }

    /// The effective configuration as TOML (for `--print-config`).
    pub fn to_toml(&self) -> Result<String, ProxyError> {
        toml::to_string_pretty(self).map_err(|error| ProxyError::Config(error.to_string()))
    }

    /// The `[[routes]]` as the client's route specs (their order is checked when the pool's
    /// configuration and the tree are built).
    pub fn route_specs(&self) -> Result<Vec<RouteSpec>, ProxyError> {
        self.routes
            .iter()
            .map(|route| {
                let bad = |message: String| {
                    ProxyError::Config(format!("[[routes]] {}: {message}", route.kind))
                };
                let servers = route
                    .servers
                    .iter()
                    .map(|text| ServerSpec::parse(text))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|error| bad(error.to_string()))?;
                let planner = route
                    .planner
                    .as_deref()
                    .map(PlannerKind::from_name)
                    .transpose()
                    .map_err(|error| bad(error.to_string()))?;
                let priority_order = route
                    .priority_order
                    .as_deref()
                    .map(|order| parse_priority_order(order).map_err(bad))
                    .transpose()?;
                Ok(RouteSpec {
                    kind: route.kind.clone(),
                    timeout: route.timeout_ms.map(Duration::from_millis),
                    replicas: route.replicas,
                    planner,
                    window: route.backend_window,
                    priority_order,
                    servers,
                    sample_every: route.sample_every,
                })
            })
            .collect()
    }

    /// Validates the `[pool]` section and turns it into the client's pool config.
    pub fn pool_config(&self) -> Result<PoolConfig, ProxyError> {
        let pool = &self.pool;
        let bad = |message: String| ProxyError::Config(format!("[pool] {message}"));
        if pool.servers.is_empty() {
            return Err(bad(
                "servers is empty: list backends as \"host:port[:weight] [name]\"".to_string(),
            ));
        }
        let servers = pool
            .servers
            .iter()
            .map(|text| ServerSpec::parse(text))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| bad(error.to_string()))?;
        let hash = HashFunction::from_name(&pool.hash).map_err(|e| bad(e.to_string()))?;
        let distribution =
            Distribution::from_name(&pool.distribution).map_err(|e| bad(e.to_string()))?;
        let hash_tag = if pool.hash_tag.is_empty() {
            None
        } else {
            Some(parse_hash_tag(&pool.hash_tag).map_err(|e| bad(e.to_string()))?)
        };
        let planner = PlannerKind::from_name(&pool.planner).map_err(|e| bad(e.to_string()))?;
        if pool.replicas == 0 || pool.replicas > servers.len() {
            return Err(bad(format!(
                "replicas = {} must be between 1 and the number of servers ({})",
                pool.replicas,
                servers.len()
            )));
        }
        if pool.timeout_ms == 0 || pool.connect_timeout_ms == 0 {
            return Err(bad("timeouts must be at least 1 ms".to_string()));
        }
        let mut config = PoolConfig::new(&pool.name, servers);
        config.ring = RingOptions {
            hash,
            distribution,
            hash_tag,
        };
        config.replicas = pool.replicas;
        config.planner = planner;
        config.window = pool.backend_window;
        config.priority_order = pool
            .priority_order
            .as_deref()
            .map(parse_priority_order)
            .transpose()
            .map_err(bad)?;
        config.planner_settings.tailx = TailxSettings {
            large_threshold_bytes: (pool.tailx_large_threshold > 0)
                .then_some(pool.tailx_large_threshold),
            filter_capacity: pool.tailx_filter_capacity.max(1),
            filter_generations: pool.tailx_filter_generations.max(2),
            min_delay_nanos: pool.tailx_min_delay_us.saturating_mul(1000),
            ..TailxSettings::default()
        };
        config.planner_settings.replica_choice =
            tailtrim_policy::spread::ReplicaChoice::parse(&pool.replica_choice).map_err(bad)?;
        if !(pool.fetch_cost_keys.is_finite() && pool.fetch_cost_keys >= 0.0) {
            return Err(bad(format!(
                "fetch_cost_keys {}: expected a finite number of keys ≥ 0",
                pool.fetch_cost_keys
            )));
        }
        config.planner_settings.fetch_cost_keys = pool.fetch_cost_keys;
        config.planner_settings.cost_rel.overtakes = pool.cost_rel_overtakes;
        config.planner_settings.size_rel_overtakes = pool.size_rel_overtakes;
        config.timeout = Duration::from_millis(pool.timeout_ms);
        config.connect_timeout = Duration::from_millis(pool.connect_timeout_ms);
        config.connections_per_backend = pool.server_connections.max(1);
        config.connection_choice =
            tailtrim_policy::lanes::ConnectionChoice::parse(&pool.connection_choice)
                .map_err(bad)?;
        config.queue_limit = pool.queue_limit.max(1);
        config.health = HealthSettings {
            failure_limit: pool.server_failure_limit.max(1),
            retry_after_nanos: pool.server_retry_timeout_ms.saturating_mul(1_000_000),
        };
        config.query_threads = pool.query_threads;
        config.inject_overhead = Duration::from_micros(pool.inject_overhead_us);
        config.inject_overhead_sleeps = pool.inject_overhead_sleep;
        config.elephant_threshold = pool.elephant_threshold;
        config.backend_threads = pool.backend_threads.max(1);
        config.chisel_epoch = Duration::from_millis(pool.chisel_epoch_ms.max(1));
        if let Some(share) = pool.chisel_processing_share {
            if !(0.0..=1.0).contains(&share) {
                return Err(bad(format!(
                    "chisel_processing_share = {share} must be between 0 and 1"
                )));
            }
            config.analyzer.processing_share = share;
            config.analyzer.measure_processing_share = false;
        }
        config.analyzer.settle_epochs = pool.chisel_settle_epochs.max(1);
        config.analyzer.guard_margin = if pool.chisel_guard_margin < 0.0 {
            f64::INFINITY
        } else {
            pool.chisel_guard_margin
        };
        config.analyzer.guard_backoff = pool.chisel_guard_backoff;
        config.dialer.login = pool.backend_login()?;
        if let Some(tls) = &pool.tls {
            let client = tls.build().map_err(|error| bad(format!("tls: {error}")))?;
            config.dialer.tls = Some(BackendTls::new(
                std::sync::Arc::new(client),
                tls.server_name.clone(),
            ));
        }
        config.chisel_fixed = if pool.chisel_fixed.is_empty() {
            None
        } else {
            Some(parse_fixed_shape(&pool.chisel_fixed).ok_or_else(|| {
                bad(format!(
                    "chisel_fixed = {:?}: expected \"B,L\" with B, L >= 1 (L may be inf)",
                    pool.chisel_fixed
                ))
            })?)
        };
        // The pool's layers named in [[routes]] complete what the [pool] keys chose.
        tailtrim_client::configure_pool(&mut config, &self.route_specs()?)
            .map_err(|error| ProxyError::Config(format!("[[routes]] {error}")))?;
        Ok(config)
    }
}

/// `priority_order`: `strict` or `drr`.
fn parse_priority_order(order: &str) -> Result<Discipline, String> {
    match order {
        "strict" => Ok(Discipline::Strict),
        "drr" => Ok(Discipline::Drr),
        other => Err(format!(
            "priority_order = {other:?}: expected \"strict\" or \"drr\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_parses_and_validates() {
        let text = include_str!("../../../config/proxy.example.toml");
        let config = ProxyConfig::from_toml(text).expect("example parses");
        let pool = config.pool_config().expect("example validates");
        config
            .warmup
            .settings("")
            .expect("example warm-up validates");
        config
            .warmup
            .settings(&config.warmup.remove_mode)
            .expect("example removal mode validates");
        assert_eq!(pool.servers.len(), 3);
        // Round trip through --print-config output.
        let printed = config.to_toml().expect("print");
        assert_eq!(ProxyConfig::from_toml(&printed).expect("reparse"), config);
    }

    #[test]
    fn the_routes_example_parses_builds_its_tree_and_prints_back() {
        let text = include_str!("../../../config/proxy.routes.example.toml");
        let config = ProxyConfig::from_toml(text).expect("routes example parses");
        let pool = config.pool_config().expect("routes example validates");
        assert_eq!(pool.priority_order, Some(Discipline::Strict));
        assert_eq!(
            (pool.replicas, pool.planner, pool.window),
            (2, PlannerKind::ReinSbf, Some(2))
        );
        assert_eq!(
            tailtrim_client::routes::pool_layers(&pool),
            ["failover", "planner", "gate"]
        );
        let specs = config.route_specs().expect("specs");
        let kinds: Vec<&str> = specs.iter().map(|spec| spec.kind.as_str()).collect();
        assert_eq!(
            kinds,
            ["logging", "timeout", "warmup", "failover", "planner", "gate"]
        );
        assert_eq!(specs[1].timeout, Some(Duration::from_millis(1500)));
        let cluster =
            tailtrim_client::Cluster::new(pool, config.warmup.tracker()).expect("cluster");
        let tree = tailtrim_client::build_tree(&cluster, &specs).expect("tree");
        assert_eq!(tree.name(), "logging");
        let printed = config.to_toml().expect("print");
        assert_eq!(ProxyConfig::from_toml(&printed).expect("reparse"), config);
        // A route entry takes only the keys routes have.
        assert!(ProxyConfig::from_toml("[[routes]]\ntype = \"logging\"\nms = 1\n").is_err());
        let mut drr = config.clone();
        drr.pool.priority_order = Some("drr".to_string());
        drr.routes.retain(|route| route.kind != "gate");
        let refused = drr
            .pool_config()
            .expect_err("a [pool] key without its layer");
        assert!(
            refused.to_string().contains("need the gate route"),
            "{refused}"
        );
        drr.routes.clear();
        assert_eq!(
            drr.pool_config().unwrap().priority_order,
            Some(Discipline::Drr)
        );
        drr.pool.priority_order = Some("fair".to_string());
        assert!(drr.pool_config().is_err());
        // The shadow route's servers parse as [pool] servers do.
        let shadow = ProxyConfig::from_toml(
            "[pool]\nservers = [\"127.0.0.1:11211\"]\n[[routes]]\ntype = \"shadow\"\n\
             servers = [\"127.0.0.1:11311:1\"]\nsample_every = 4\n",
        )
        .expect("shadow parses");
        let specs = shadow.route_specs().expect("shadow specs");
        assert_eq!(
            (specs[0].servers.len(), specs[0].sample_every),
            (1, Some(4))
        );
        assert!(shadow.pool_config().is_ok());
        let mut misordered = config.clone();
        misordered.routes.swap(4, 5);
        let refused = misordered.pool_config().expect_err("planner below gate");
        assert!(refused.to_string().contains("route order"), "{refused}");
    }

    #[test]
    fn defaults_fill_missing_keys_and_unknown_keys_are_rejected() {
        let config = ProxyConfig::from_toml("[pool]\nservers = [\"127.0.0.1:11211\"]\n").unwrap();
        assert_eq!(config.proxy.listen, DEFAULT_LISTEN);
        assert_eq!(config.pool.timeout_ms, DEFAULT_TIMEOUT_MS);
        assert!(config.pool_config().is_ok());
        assert!(ProxyConfig::from_toml("[pool]\nservrs = []\n").is_err());
    }

    #[test]
    fn the_admin_token_comes_from_one_place_and_must_be_usable() {
        let mut proxy = ProxySection::default();
        assert_eq!(proxy.admin_token().unwrap(), None);
        proxy.admin_token = " abc.DEF-1 ".to_string();
        assert_eq!(proxy.admin_token().unwrap().as_deref(), Some("abc.DEF-1"));
        let path = std::env::temp_dir().join(format!("tailtrim-token-test-{}", std::process::id()));
        proxy.admin_token_file = path.display().to_string();
        let both = proxy.admin_token().unwrap_err().to_string();
        assert!(both.contains("not both"), "{both}");
        proxy.admin_token.clear();
        let missing = proxy.admin_token().unwrap_err().to_string();
        assert!(missing.contains("admin token file"), "{missing}");
        std::fs::write(&path, "from-file\r\n").unwrap();
        assert_eq!(proxy.admin_token().unwrap().as_deref(), Some("from-file"));
        std::fs::write(&path, "\n").unwrap();
        let empty = proxy.admin_token().unwrap_err().to_string();
        assert!(empty.contains("empty"), "{empty}");
        std::fs::write(&path, "two words").unwrap();
        let spaced = proxy.admin_token().unwrap_err().to_string();
        assert!(spaced.contains("visible ASCII"), "{spaced}");
        std::fs::remove_file(&path).unwrap();
        // The token itself never reaches --print-config; the file's path does.
        let mut config = ProxyConfig::default();
        config.proxy.admin_token = "hidden".to_string();
        config.proxy.admin_token_file = "/etc/tailtrim/admin-token".to_string();
        let printed = config.to_toml().unwrap();
        assert!(!printed.contains("hidden"), "{printed}");
        assert!(printed.contains("admin_token_file"), "{printed}");
    }

    #[test]
    fn backend_credentials_come_from_one_place_and_are_never_printed() {
        let mut config = ProxyConfig::default();
        config.pool.servers = vec!["127.0.0.1:1".to_string()];
        assert!(config.pool_config().unwrap().dialer.login.is_none());
        config.pool.username = "proxy".to_string();
        let half = config.pool_config().unwrap_err().to_string();
        assert!(half.contains("go together"), "{half}");
        config.pool.password = "two words".to_string();
        let spaced = config.pool_config().unwrap_err().to_string();
        assert!(spaced.contains("no space"), "{spaced}");
        config.pool.password = "s3cret".to_string();
        let login = config.pool_config().unwrap().dialer.login.unwrap();
        assert_eq!(login.request(), b"set auth 0 0 12\r\nproxy s3cret\r\n");
        let printed = config.to_toml().unwrap();
        assert!(!printed.contains("s3cret"), "{printed}");
        let path = std::env::temp_dir().join(format!("tailtrim-login-test-{}", std::process::id()));
        config.pool.auth_file = path.display().to_string();
        let both = config.pool_config().unwrap_err().to_string();
        assert!(both.contains("not both"), "{both}");
        config.pool.username.clear();
        config.pool.password.clear();
        std::fs::write(&path, "filed:pw\nother:x\n").unwrap();
        let login = config.pool_config().unwrap().dialer.login.unwrap();
        assert_eq!(login.user(), "filed");
        std::fs::write(&path, "nocolon\n").unwrap();
        let malformed = config.pool_config().unwrap_err().to_string();
        assert!(malformed.contains("user:password"), "{malformed}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn invalid_pools_are_explained() {
        let mut config = ProxyConfig::default();
        let error = config.pool_config().unwrap_err().to_string();
        assert!(error.contains("servers is empty"), "{error}");
        config.pool.servers = vec!["127.0.0.1:1".to_string()];
        config.pool.replicas = 2;
        assert!(config
            .pool_config()
            .unwrap_err()
            .to_string()
            .contains("replicas"));
        config.pool.replicas = 1;
        config.pool.chisel_fixed = "0,5".to_string();
        assert!(config
            .pool_config()
            .unwrap_err()
            .to_string()
            .contains("chisel_fixed"));
        config.pool.chisel_fixed = "2,inf".to_string();
        assert_eq!(
            config.pool_config().unwrap().chisel_fixed,
            Some((2, u32::MAX))
        );
        config.pool.hash = "sha1".to_string();
        assert!(config
            .pool_config()
            .unwrap_err()
            .to_string()
            .contains("unknown hash"));
    }

    #[test]
    fn the_replica_choice_reaches_the_planners_and_a_bad_one_is_explained() {
        use tailtrim_policy::spread::ReplicaChoice;
        let config = ProxyConfig::from_toml(
            "[pool]\nservers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\nreplicas = 2\n\
             replica_choice = \"spread\"\n",
        )
        .unwrap();
        let pool = config.pool_config().unwrap();
        assert_eq!(pool.planner_settings.replica_choice, ReplicaChoice::Spread);
        let mut config = ProxyConfig::default();
        config.pool.servers = vec!["127.0.0.1:1".to_string()];
        assert_eq!(
            config
                .pool_config()
                .unwrap()
                .planner_settings
                .replica_choice,
            ReplicaChoice::C3,
            "C3's by default"
        );
        config.pool.replica_choice = "nearest".to_string();
        let error = config.pool_config().unwrap_err().to_string();
        assert!(error.contains("replica choice \"nearest\""), "{error}");

        let config = ProxyConfig::from_toml(
            "[pool]\nservers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\nreplicas = 2\n\
             replica_choice = \"cover\"\nfetch_cost_keys = 8.5\n",
        )
        .unwrap();
        let pool = config.pool_config().unwrap();
        assert_eq!(pool.planner_settings.replica_choice, ReplicaChoice::Cover);
        assert_eq!(pool.planner_settings.fetch_cost_keys, 8.5);
        let mut config = config;
        config.pool.fetch_cost_keys = -1.0;
        let error = config.pool_config().unwrap_err().to_string();
        assert!(error.contains("fetch_cost_keys -1"), "{error}");
    }

    #[test]
    fn each_demoting_planner_gets_its_own_ageing() {
        use tailtrim_policy::planner::PlannerKind;
        use tailtrim_policy::serverq::Discipline;
        let mut config = ProxyConfig::default();
        config.pool.servers = vec!["127.0.0.1:1".to_string()];
        let settings = config.pool_config().unwrap().planner_settings;
        let aged = |kind: PlannerKind, settings| kind.discipline(settings);
        assert_eq!(
            aged(PlannerKind::SizeRel, &settings),
            Discipline::Aged { overtakes: 25 }
        );
        assert_eq!(
            aged(PlannerKind::CostRel, &settings),
            Discipline::Aged { overtakes: 400 }
        );
        let config = ProxyConfig::from_toml(
            "[pool]\nservers = [\"127.0.0.1:1\"]\nsize_rel_overtakes = 7\n\
             cost_rel_overtakes = 90\n",
        )
        .unwrap();
        let settings = config.pool_config().unwrap().planner_settings;
        assert_eq!(
            aged(PlannerKind::SizeRel, &settings),
            Discipline::Aged { overtakes: 7 }
        );
        assert_eq!(
            aged(PlannerKind::CostRel, &settings),
            Discipline::Aged { overtakes: 90 }
        );
    }

    #[test]
    fn the_chisel_guard_settings_reach_the_analyzer() {
        let config = ProxyConfig::from_toml(
            "[pool]\nservers = [\"127.0.0.1:1\"]\nchisel_settle_epochs = 5\n\
             chisel_guard_margin = 0.4\nchisel_guard_backoff = 2\n",
        )
        .unwrap();
        let analyzer = config.pool_config().unwrap().analyzer;
        assert_eq!(analyzer.settle_epochs, 5);
        assert_eq!(analyzer.guard_margin, 0.4);
        assert_eq!(analyzer.guard_backoff, 2);
        // Defaults are the analyzer's; a negative margin turns the guard off.
        let mut config = ProxyConfig::default();
        config.pool.servers = vec!["127.0.0.1:1".to_string()];
        let defaults = tailtrim_model::chisel_online::AnalyzerConfig::default();
        assert_eq!(
            config.pool_config().unwrap().analyzer.guard_margin,
            defaults.guard_margin
        );
        config.pool.chisel_guard_margin = -1.0;
        assert_eq!(
            config.pool_config().unwrap().analyzer.guard_margin,
            f64::INFINITY
        );
    }
}
