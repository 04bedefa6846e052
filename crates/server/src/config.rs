//! Server configuration: one struct per TOML section, defaults as documented
//! constants. `tailtrim serve` reads an optional TOML file, then applies
//! command-line flags on top (flags win), and can print the result.

use serde::{Deserialize, Serialize};
use tailtrim_policy::costspec::CostSpec;
use tailtrim_policy::serverq::Discipline;

/// Default TCP port (`-p`), memcached's.
pub const DEFAULT_PORT: u16 = 11211;
/// Default UDP port (`-U`); 0 disables UDP, as in memcached ≥ 1.5.6.
pub const DEFAULT_UDP_PORT: u16 = 0;
/// Default listen address (`-l`).
pub const DEFAULT_LISTEN: &str = "0.0.0.0";
/// Default worker threads (`-t`), memcached's.
pub const DEFAULT_THREADS: usize = 4;
/// Default maximum simultaneous connections (`-c`), memcached's.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default memory limit in MiB (`-m`), memcached's.
pub const DEFAULT_MEMORY_MB: u64 = 64;
/// Default largest item in bytes (`-I`), memcached's 1 MiB.
pub const DEFAULT_ITEM_SIZE_MAX: u64 = 1024 * 1024;
/// Default admin (Prometheus) port; 0 disables it.
pub const DEFAULT_ADMIN_PORT: u16 = 0;
/// Default address of the admin listener (`--admin-listen`): loopback only, whatever `-l`
/// says; binding it elsewhere prints a warning.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1";
/// Default interval of the background expiry crawler, in milliseconds.
pub const DEFAULT_CRAWL_INTERVAL_MS: u64 = 1000;
/// Items the crawler may inspect per interval.
pub const DEFAULT_CRAWL_BUDGET: usize = 4096;
/// Default eviction mode: evict the LRU tail when full (memcached without `-M`).
pub const DEFAULT_EVICT_TO_FREE: bool = true;
/// Largest per-connection read buffer before the connection is closed (bytes):
/// bounds memory whatever a client sends (must exceed `-I` plus a line).
pub const DEFAULT_MAX_CONN_BUFFER: usize = 4 * 1024 * 1024;
/// Default idle timeout in seconds (memcached's `-o idle_timeout=N`): 0, connections are
/// never closed for idleness.
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 0;

/// Default listen backlog (`-b`), memcached's.
pub const DEFAULT_LISTEN_BACKLOG: i32 = 1024;

/// The whole configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// `[server]`: sockets and limits.
    pub server: NetworkSection,
    /// `[storage]`: memory and items.
    pub storage: StorageSection,
    /// `[workers]`: threads and dispatch.
    pub workers: WorkersSection,
    /// `[sizeaware]`: the size-aware controller.
    pub sizeaware: SizeAwareSection,
    /// `[process]`
    pub process: ProcessSection,
    /// `[emulation]`: emulated service and network time (experimental, off by default).
    pub emulation: EmulationSection,
    /// `[hotkeys]`: the sampled hot-key tracker behind `stats hotkeys`.
    pub hotkeys: HotKeysSection,
    /// `[tls]`: memcached's `-Z` and `ssl_*` options (names without the `ssl_` prefix;
    /// off by default). See `docs/security.md`.
    pub tls: tailtrim_tls::ServerTlsOptions,
}

/// Default: the hot-key tracker runs.
pub const DEFAULT_HOTKEYS_ENABLED: bool = true;
/// Default keys tracked by `stats hotkeys` (bounds the tracker's memory).
pub const DEFAULT_HOTKEYS_CAPACITY: usize = 1024;
/// Default: one read in this many is recorded by the hot-key tracker.
pub const DEFAULT_HOTKEYS_SAMPLE_EVERY: u32 = 8;

/// `[hotkeys]` section: a sampled space-saving top-k of the keys read (`get`, `gets`, `gat`,
/// `mg`), reported by `stats hotkeys [N]`. Memory is bounded by `capacity` keys of at most
/// 250 bytes; an unsampled read costs one relaxed atomic increment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct HotKeysSection {
    /// Track hot keys at all (`--hotkeys-sample-every 0` turns it off).
    pub enabled: bool,
    /// Keys tracked at most (`--hotkeys-capacity`).
    pub capacity: usize,
    /// Record one read in this many (`--hotkeys-sample-every`).
    pub sample_every: u32,
}

impl Default for HotKeysSection {
    fn default() -> Self {
        HotKeysSection {
            enabled: DEFAULT_HOTKEYS_ENABLED,
            capacity: DEFAULT_HOTKEYS_CAPACITY,
            sample_every: DEFAULT_HOTKEYS_SAMPLE_EVERY,
        }
    }
}

/// Default emulated service and network cost: none.
pub const DEFAULT_EMULATION_SPEC: &str = "off";

/// `[emulation]` section (experimental, off by default; `docs/emulation.md`). Each value is a
/// cost spec (`tailtrim_policy::costspec`, e.g. `const=1ms,packet=100us,dist=exp`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct EmulationSection {
    /// `--emulate-service`: after really running a request, the worker that ran it is held
    /// (sleeping, no CPU) until this much time has passed since the request started.
    pub service: String,
    /// `--emulate-network`: every reply waits this long before it may be written, without
    /// holding the worker; replies of a connection keep their order.
    pub network: String,
}

impl Default for EmulationSection {
    fn default() -> Self {
        EmulationSection {
            service: DEFAULT_EMULATION_SPEC.to_string(),
            network: DEFAULT_EMULATION_SPEC.to_string(),
        }
    }
}

impl EmulationSection {
    /// The parsed service spec (zero when off).
    pub fn service_spec(&self) -> Result<CostSpec, String> {
        CostSpec::parse(&self.service).map_err(|e| format!("emulation.service: {e}"))
    }

    /// The parsed network spec (zero when off).
    pub fn network_spec(&self) -> Result<CostSpec, String> {
        CostSpec::parse(&self.network).map_err(|e| format!("emulation.network: {e}"))
    }
}

/// `[process]` section: how the process runs as a system service, memcached's operational
/// flags. All off by default.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessSection {
    /// Detach into the background (`-d`).
    pub daemonize: bool,
    /// When started as root, switch to this user before serving (`-u`); ignored otherwise,
    /// as memcached does.
    pub user: String,
    /// Write the process id to this file (`-P`); removed on a clean exit.
    pub pid_file: String,
    /// Append stdout and stderr to this file (Debian's `logfile` line).
    pub log_file: String,
    /// Lock all memory with `mlockall` (`-k`); a failure is a warning, as in memcached.
    pub lock_memory: bool,
    /// Raise the core file size limit to its maximum (`-r`).
    pub max_core_file: bool,
}

/// Default percentile of accessed sizes that sets the size-aware threshold.
pub const DEFAULT_SIZE_PERCENTILE: f64 = 99.0;
/// Default size-aware controller epoch in milliseconds.
pub const DEFAULT_EPOCH_MS: u64 = 1000;

/// `[sizeaware]` section (used with `dispatch = "size-aware"`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SizeAwareSection {
    /// Percentile (0–100) of recently accessed sizes that becomes the threshold.
    pub percentile: f64,
    /// Controller epoch in milliseconds.
    pub epoch_ms: u64,
    /// Fixed threshold in bytes instead of the learned one (0 = learn).
    pub fixed_threshold: u64,
    /// Fixed number of small workers instead of the learned split (0 = learn).
    pub fixed_small_workers: usize,
    /// What the learned split follows: `packets` (Minos: the small requests' share of
    /// packets, the default) or `busy` (the small workers' share of the CPU time the workers
    /// measured, for kernel stacks where a request's cost is mostly per request).
    pub split_by: String,
    /// An idle large worker (the large queue empty) also serves the small workers'
    /// connections, so no worker idles while small requests wait (default true; false is
    /// Minos as published, where large workers serve large requests only). Small requests
    /// still never wait behind a large one. Measured in `experiments/minos*`: it carries
    /// stealing's rate under a kernel-like cost where the strict split carries 0.64x, changes
    /// nothing under a packet-proportional cost, and lowered the small p99 on the real
    /// 2-worker server at most rates.
    pub large_workers_help: bool,
}

impl Default for SizeAwareSection {
    fn default() -> Self {
        SizeAwareSection {
            percentile: DEFAULT_SIZE_PERCENTILE,
            epoch_ms: DEFAULT_EPOCH_MS,
            fixed_threshold: 0,
            fixed_small_workers: 0,
            split_by: tailtrim_policy::sizeaware::SplitBy::Packets
                .as_str()
                .to_string(),
            large_workers_help: true,
        }
    }
}

impl SizeAwareSection {
    /// The controller's settings for `workers` workers (an unknown `split_by`, which
    /// [`ServerConfig::validate`] rejects, reads as the default).
    pub fn controller(&self, workers: usize) -> tailtrim_policy::sizeaware::SizeAwareConfig {
        let mut controller = tailtrim_policy::sizeaware::SizeAwareConfig::with_workers(workers);
        controller.percentile = self.percentile;
        controller.fixed_threshold_bytes =
            (self.fixed_threshold > 0).then_some(self.fixed_threshold);
        controller.fixed_small_workers =
            (self.fixed_small_workers > 0).then_some(self.fixed_small_workers);
        controller.split_by =
            tailtrim_policy::sizeaware::SplitBy::parse(&self.split_by).unwrap_or_default();
        controller.large_workers_help = self.large_workers_help;
        controller
    }
}

/// `[server]` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSection {
    /// TCP port (`-p`); 0 picks a free port (printed at start-up).
    pub port: u16,
    /// UDP port (`-U`); 0 disables UDP.
    pub udp_port: u16,
    /// Address to listen on (`-l`).
    pub listen: String,
    /// Maximum simultaneous connections (`-c`).
    pub max_connections: usize,
    /// Admin port for Prometheus text metrics (`--admin-port`); 0 disables.
    pub admin_port: u16,
    /// Address the admin listener binds (`--admin-listen`), an IP address or a host name.
    pub admin_listen: String,
    /// Verbosity (`-v` count).
    pub verbose: u8,
    /// Per-connection read buffer bound in bytes.
    pub max_connection_buffer: usize,
    /// Close a connection that has not completed a command for this many seconds and has
    /// no reply pending (`-o idle_timeout=N`); 0 disables. A client trickling a request a
    /// byte at a time (slowloris) completes no command, so it is closed too.
    pub idle_timeout_secs: u64,
    /// Queue of connections the kernel completes before `accept` (`-b`, memcached's 1024).
    pub listen_backlog: i32,
    /// ASCII authentication: a file of `user:password` lines (`-Y`); empty, off.
    pub auth_file: String,
    /// Answer `shutdown` by stopping the server (`-A`); off, `shutdown` is refused.
    pub enable_shutdown: bool,
    /// Refuse `flush_all` with `CLIENT_ERROR flush_all not allowed` (`-F`).
    pub disable_flush_all: bool,
    /// Refuse `stats cachedump` with `CLIENT_ERROR stats cachedump not allowed` (`-X`).
    pub disable_dumping: bool,
    /// Refuse `watch` with `CLIENT_ERROR watch commands not allowed` (`-W`).
    pub disable_watch: bool,
    /// Disable CAS (`-C`): replies carry a CAS value of 0 and every compare-and-swap fails
    /// with `EXISTS` (`EX`), as memcached answers.
    pub disable_cas: bool,
}

impl Default for NetworkSection {
    fn default() -> Self {
        NetworkSection {
            port: DEFAULT_PORT,
            udp_port: DEFAULT_UDP_PORT,
            listen: DEFAULT_LISTEN.to_string(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            admin_port: DEFAULT_ADMIN_PORT,
            admin_listen: DEFAULT_ADMIN_LISTEN.to_string(),
            verbose: 0,
            max_connection_buffer: DEFAULT_MAX_CONN_BUFFER,
            idle_timeout_secs: DEFAULT_IDLE_TIMEOUT_SECS,
            listen_backlog: DEFAULT_LISTEN_BACKLOG,
            auth_file: String::new(),
            enable_shutdown: false,
            disable_flush_all: false,
            disable_dumping: false,
            disable_watch: false,
            disable_cas: false,
        }
    }
}

/// `[storage]` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct StorageSection {
    /// Memory limit for items in MiB (`-m`).
    pub memory_mb: u64,
    /// Largest item in bytes (`-I`).
    pub item_size_max: u64,
    /// Background expiry crawler interval in ms (0 disables; expiry stays lazy).
    pub crawl_interval_ms: u64,
    /// Items inspected per crawler interval.
    pub crawl_budget: usize,
    /// Evict live items when memory is full (memcached's default). `false` is memcached's
    /// `-M`: stores answer `SERVER_ERROR out of memory storing object` instead.
    pub evict_to_free: bool,
}

impl Default for StorageSection {
    fn default() -> Self {
        StorageSection {
            memory_mb: DEFAULT_MEMORY_MB,
            item_size_max: DEFAULT_ITEM_SIZE_MAX,
            crawl_interval_ms: DEFAULT_CRAWL_INTERVAL_MS,
            crawl_budget: DEFAULT_CRAWL_BUDGET,
            evict_to_free: DEFAULT_EVICT_TO_FREE,
        }
    }
}

/// `[workers]` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct WorkersSection {
    /// Worker threads (`-t`).
    pub threads: usize,
    /// How requests reach workers (`--dispatch`).
    pub dispatch: DispatchPolicy,
    /// CPUs to pin workers to (`--pin-cpus`): worker `i` runs on
    /// `pin_cpus[i % len]`. Empty (the default): not pinned, the kernel
    /// places threads. Other threads (acceptor, dispatcher, controller)
    /// are never pinned.
    pub pin_cpus: Vec<usize>,
    /// Serve the priority classes `mg … p<class>` carries where the dispatch policy queues
    /// work (`--no-priorities` turns it off: every job is class 0, first come first served,
    /// and `stats settings` announces `priorities off`).
    pub priorities: bool,
    /// How the queue orders the classes (`--priority-order`): `strict` (Rein as published:
    /// a class runs only when no higher class waits) or `drr` (deficit round robin, weights
    /// 5..1).
    pub priority_order: PriorityOrder,
}

/// The order of the priority classes in the server's job queue (`[workers] priority_order`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum PriorityOrder {
    /// Strict priority, first come first served inside a class.
    #[default]
    Strict,
    /// Deficit round robin over the classes (weights 5..1).
    Drr,
}

impl PriorityOrder {
    /// The config and `stats settings` name.
    pub fn name(self) -> &'static str {
        match self {
            PriorityOrder::Strict => "strict",
            PriorityOrder::Drr => "drr",
        }
    }

    /// The policy crate's discipline, the one the simulator and the proxy's gate use.
    pub fn discipline(self) -> Discipline {
        match self {
            PriorityOrder::Strict => Discipline::Strict,
            PriorityOrder::Drr => Discipline::Drr,
        }
    }
}

impl std::str::FromStr for PriorityOrder {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "strict" => Ok(PriorityOrder::Strict),
            "drr" => Ok(PriorityOrder::Drr),
            other => Err(format!("priority order {other:?}: strict or drr")),
        }
    }
}

/// Default of `[workers] priorities`.
pub const DEFAULT_PRIORITIES: bool = true;

impl Default for WorkersSection {
    fn default() -> Self {
        WorkersSection {
            threads: DEFAULT_THREADS,
            dispatch: DispatchPolicy::Pinned,
            pin_cpus: Vec::new(),
            priorities: DEFAULT_PRIORITIES,
            priority_order: PriorityOrder::default(),
        }
    }
}

impl WorkersSection {
    /// What `stats settings` announces as `priorities`: `off` when turned off, else the
    /// dispatch policy's way ([`dispatch_priorities`]).
    pub fn priorities(&self) -> &'static str {
        if !self.priorities {
            return "off";
        }
        match dispatch_priorities(self.dispatch) {
            "queue" => self.priority_order.name(),
            other => other,
        }
    }

    /// The discipline of the job queue (`None`: priorities off, first come first served).
    pub fn queue_discipline(&self) -> Option<Discipline> {
        self.priorities.then(|| self.priority_order.discipline())
    }

    /// The CPU worker `worker` is pinned to, if pinning is configured.
    pub fn cpu_of(&self, worker: usize) -> Option<usize> {
        (!self.pin_cpus.is_empty()).then(|| self.pin_cpus[worker % self.pin_cpus.len()])
    }
}

/// How requests are assigned to workers: the one policy enum the simulator uses too.
pub use tailtrim_policy::dispatch::DispatchPolicy;

/// How `policy` serves the priority classes `mg … p<class>` carries: `queue` where requests
/// wait in a job queue the server owns (early and late binding; `stats settings` announces
/// the queue's [`PriorityOrder`], `strict` or `drr`, see [`crate::priority`]),
/// `fifo` where the reading worker executes inline and pending work waits in the kernel's
/// socket buffers, which the server cannot reorder (the flag is accepted and counted,
/// requests are served in arrival order).
pub fn dispatch_priorities(policy: DispatchPolicy) -> &'static str {
    match policy {
        DispatchPolicy::EarlyBinding | DispatchPolicy::LateBinding => "queue",
        DispatchPolicy::Pinned | DispatchPolicy::SizeAware | DispatchPolicy::Stealing => "fifo",
    }
}

/// memcached `-o` options tailtrim accepts without effect: they tune memcached's slab
/// allocator, LRU maintainer, hash table or logging, which tailtrim does not have.
pub const IGNORED_MEMCACHED_OPTIONS: &[&str] = &[
    "maxconns_fast",
    "no_maxconns_fast",
    "hashpower",
    "hash_algorithm",
    "slab_reassign",
    "no_slab_reassign",
    "slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "slab_chunk_max",
    "slab_sizes",
    "lru_maintainer",
    "no_lru_maintainer",
    "lru_segmented",
    "no_lru_segmented",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
    "tail_repair_time",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "track_sizes",
    "no_hashexpand",
    "modern",
    "no_modern",
    "inline_ascii_response",
    "no_inline_ascii_response",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "read_buf_mem_limit",
    "resp_obj_mem_limit",
];

impl ServerConfig {
    /// Applies one memcached `-o` option (`name` or `name=value`). Options with a tailtrim
    /// meaning change the configuration; [`IGNORED_MEMCACHED_OPTIONS`] are accepted silently;
    /// anything else is accepted with the warning returned, so memcached's command lines
    /// keep starting. A malformed value of an option tailtrim implements is an error; the
    /// TLS options (`ssl_*`) go to [`tailtrim_tls::ServerTlsOptions::apply_extended`].
    pub fn apply_memcached_option(&mut self, option: &str) -> Result<Option<String>, String> {
        let (name, value) = match option.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (option, None),
        };
        match (name, value) {
            ("lru_crawler", None) => {
                if self.storage.crawl_interval_ms == 0 {
                    self.storage.crawl_interval_ms = DEFAULT_CRAWL_INTERVAL_MS;
                }
            }
            ("no_lru_crawler", None) => self.storage.crawl_interval_ms = 0,
            ("idle_timeout", Some(secs)) => {
                self.server.idle_timeout_secs = secs
                    .trim()
                    .parse()
                    .map_err(|_| format!("-o idle_timeout={secs}: not a number of seconds"))?;
            }
            ("item_size_max", Some(size)) => {
                self.storage.item_size_max = parse_size(size)?;
            }
            _ if name.starts_with("ssl_") || name.starts_with("no_ssl_") => {
                return match self.tls.apply_extended(name, value) {
                    Ok(tailtrim_tls::Applied::TakenWithWarning(warning)) => Ok(Some(warning)),
                    Ok(tailtrim_tls::Applied::Taken) => Ok(None),
                    Ok(tailtrim_tls::Applied::NotTls) => Ok(Some(format!(
                        "-o {option}: not a TLS option memcached knows, ignored"
                    ))),
                    Err(error) => Err(error.to_string()),
                };
            }
            _ if IGNORED_MEMCACHED_OPTIONS.contains(&name) => {}
            _ => {
                return Ok(Some(format!(
                    "-o {option}: not supported by tailtrim, ignored"
                )))
            }
        }
        Ok(None)
    }

    /// Parses a TOML document.
    pub fn from_toml(text: &str) -> Result<ServerConfig, toml::de::Error> {
        toml::from_str(text)
    }

    /// Renders the configuration as TOML (`--print-config`).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }

    /// Checks values that would make the server misbehave.
    pub fn validate(&self) -> Result<(), String> {
        if self.workers.threads == 0 {
            return Err("threads (-t) must be at least 1".into());
        }
        if !self.server.auth_file.is_empty() && self.server.udp_port != 0 {
            return Err(
                "Cannot use UDP with ascii authentication enabled (-U 0 to disable)".into(),
            );
        }
        if self.server.max_connections == 0 {
            return Err("max connections (-c) must be at least 1".into());
        }
        if self.storage.memory_mb == 0 {
            return Err("memory limit (-m) must be at least 1 MiB".into());
        }
        if !(0.0..=100.0).contains(&self.sizeaware.percentile) {
            return Err("sizeaware.percentile must be within 0..=100".into());
        }
        if self.sizeaware.epoch_ms == 0 {
            return Err("sizeaware.epoch_ms must be at least 1".into());
        }
        if let Err(error) = tailtrim_policy::sizeaware::SplitBy::parse(&self.sizeaware.split_by) {
            return Err(format!("sizeaware.split_by: {error}"));
        }
        if self.sizeaware.fixed_small_workers > self.workers.threads {
            return Err("sizeaware.fixed_small_workers cannot exceed threads".into());
        }
        if self.storage.item_size_max < 1024 {
            return Err("item size max (-I) must be at least 1k".into());
        }
        let limit_bytes = self.storage.memory_mb.saturating_mul(1024 * 1024);
        if self.storage.item_size_max > limit_bytes / 2 {
            return Err("item size max (-I) must be at most half the memory limit (-m)".into());
        }
        if (self.server.max_connection_buffer as u64) < self.storage.item_size_max + 4096 {
            return Err("max_connection_buffer must exceed item_size_max by at least 4 KiB".into());
        }
        self.emulation.service_spec()?;
        self.emulation.network_spec()?;
        if self.hotkeys.enabled && (self.hotkeys.capacity == 0 || self.hotkeys.sample_every == 0) {
            return Err("hotkeys.capacity and hotkeys.sample_every must be at least 1".into());
        }
        let listen = self.listen_addrs()?;
        if !self.tls.enabled && listen.iter().any(|addr| !addr.tls) {
            return Err("'notls' option is valid only when SSL is enabled".into());
        }
        Ok(())
    }

    /// The TCP listeners `-l` names ([`parse_listen`] with `-p` as the default port).
    pub fn listen_addrs(&self) -> Result<Vec<ListenAddr>, String> {
        parse_listen(&self.server.listen, self.server.port)
    }
}

/// One TCP listener of `-l`: memcached's `[notls:]HOST[:PORT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddr {
    /// Address or host name (IPv6 without brackets).
    pub host: String,
    /// Its port (`-p` where the item names none).
    pub port: u16,
    /// TLS on this listener when `-Z` is on; false for a `notls:` item.
    pub tls: bool,
}

impl ListenAddr {
    /// `HOST:PORT` as a socket address text (IPv6 in brackets).
    pub fn socket_text(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Parses memcached's `-l` list: comma-separated `[notls:]HOST[:PORT]` items, IPv6 either
/// bare (`::1`, then on `default_port`) or in brackets with a port (`[::1]:7000`).
pub fn parse_listen(list: &str, default_port: u16) -> Result<Vec<ListenAddr>, String> {
    let mut addrs = Vec::new();
    for item in list.split(',').map(str::trim) {
        let (tls, rest) = match item.strip_prefix("notls:") {
            Some(rest) => (false, rest),
            None => (true, item),
        };
        let port_of = |text: &str| {
            text.parse::<u16>()
                .map_err(|_| format!("-l {item}: bad port {text}"))
        };
        let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| format!("-l {item}: unclosed ["))?;
            match after.strip_prefix(':') {
                Some(port) => (host, port_of(port)?),
                None if after.is_empty() => (host, default_port),
                None => return Err(format!("-l {item}: unexpected text after ]")),
            }
        } else if rest.matches(':').count() == 1 {
            let (host, port) = rest.split_once(':').unwrap_or((rest, ""));
            (host, port_of(port)?)
        } else {
            (rest, default_port)
        };
        if host.is_empty() {
            return Err(format!("-l {item}: no address"));
        }
        addrs.push(ListenAddr {
            host: host.to_string(),
            port,
            tls,
        });
    }
    Ok(addrs)
}

pub use tailtrim_proto::size::parse_size;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_file_documents_the_defaults() {
        let text = include_str!("../../../config/serve.example.toml");
        let example = ServerConfig::from_toml(text).expect("the example parses");
        assert_eq!(example, ServerConfig::default());
    }

    #[test]
    fn the_tls_example_file_parses_and_validates() {
        let text = include_str!("../../../config/serve.tls.example.toml");
        let example = ServerConfig::from_toml(text).expect("the TLS example parses");
        assert!(example.tls.enabled);
        assert_eq!(example.tls.verify_mode, tailtrim_tls::VerifyMode::Require);
        assert_eq!(example.listen_addrs().expect("listen").len(), 2);
        assert_eq!(example.validate(), Ok(()));
    }

    #[test]
    fn toml_round_trip_and_partial_files() {
        let config = ServerConfig::default();
        assert_eq!(ServerConfig::from_toml(&config.to_toml()).unwrap(), config);
        let partial = ServerConfig::from_toml("[server]\nport = 22122\n").unwrap();
        assert_eq!(partial.server.port, 22122);
        assert_eq!(partial.workers.threads, DEFAULT_THREADS);
        assert!(ServerConfig::from_toml("[server]\nbogus = 1\n").is_err());
    }

    #[test]
    fn idle_timeout_option() {
        let mut config = ServerConfig::default();
        assert_eq!(config.server.idle_timeout_secs, 0);
        assert_eq!(config.apply_memcached_option("idle_timeout=30"), Ok(None));
        assert_eq!(config.server.idle_timeout_secs, 30);
        assert!(config.apply_memcached_option("idle_timeout=soon").is_err());
    }

    #[test]
    fn tls_options_fill_the_tls_section() {
        let mut config = ServerConfig::default();
        assert_eq!(
            config.apply_memcached_option("ssl_chain_cert=/etc/cert.pem"),
            Ok(None)
        );
        assert_eq!(
            config.tls.chain_cert.as_deref(),
            Some(std::path::Path::new("/etc/cert.pem"))
        );
        assert_eq!(
            config.apply_memcached_option("ssl_verify_mode=9"),
            Err("Invalid ssl_verify_mode. Use help to see valid options.".to_string())
        );
        assert!(matches!(
            config.apply_memcached_option("ssl_kernel_tls"),
            Ok(Some(_))
        ));
    }

    #[test]
    fn listen_lists_take_notls_prefixes_and_ports() {
        let parsed =
            parse_listen("127.0.0.1,notls:127.0.0.1:7001,[::1]:7002,::1", 11211).expect("parses");
        let expect = |host: &str, port: u16, tls: bool| ListenAddr {
            host: host.to_string(),
            port,
            tls,
        };
        assert_eq!(
            parsed,
            vec![
                expect("127.0.0.1", 11211, true),
                expect("127.0.0.1", 7001, false),
                expect("::1", 7002, true),
                expect("::1", 11211, true),
            ]
        );
        assert_eq!(parsed[2].socket_text(), "[::1]:7002");
        assert!(parse_listen("127.0.0.1:port", 1).is_err());
        assert!(parse_listen("", 1).is_err());
    }

    #[test]
    fn notls_without_tls_is_refused_as_memcached_does() {
        let mut config = ServerConfig::default();
        config.server.listen = "notls:127.0.0.1".into();
        assert_eq!(
            config.validate(),
            Err("'notls' option is valid only when SSL is enabled".to_string())
        );
        config.tls.enabled = true;
        config.tls.chain_cert = Some("c.pem".into());
        assert!(config.validate().is_ok());
    }

    #[test]
    fn validation() {
        let mut config = ServerConfig::default();
        assert!(config.validate().is_ok());
        config.workers.threads = 0;
        assert!(config.validate().is_err());
        let mut config = ServerConfig::default();
        config.emulation.service = "const=2ms".into();
        assert!(config.validate().is_ok());
        config.emulation.network = "const=2".into();
        let error = config.validate().unwrap_err();
        assert!(
            error.starts_with("emulation.network: bad cost spec"),
            "{error}"
        );
    }
}
