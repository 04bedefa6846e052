//! State shared by every thread of one server instance.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use tailtrim_policy::hotkeys::{HotKeyTracker, Sampler, TrackerConfig};
use tailtrim_store::{Store, UnixSecs};

use crate::alarm::Alarm;
use crate::config::ServerConfig;
use crate::stats::{CounterSnapshot, SlabSnapshot, WorkerCounters};

/// Version string reported by `version` and `stats`: the memcached release
/// whose behaviour we match, then ours.
pub const VERSION: &str = concat!("1.6.18-tailtrim-", env!("CARGO_PKG_VERSION"));

/// Server-wide state. Lock order: none here (atomics only); the store's own
/// shard locks are taken inside store calls and never held across calls.
pub struct Shared {
    /// The item store.
    pub store: Store,
    /// The effective configuration.
    pub config: ServerConfig,
    /// `version` reply text.
    pub version: String,
    /// Unix second the server started.
    pub started: u64,
    /// One counter block per worker, indexed by worker id.
    pub(crate) counters: Vec<WorkerCounters>,
    /// Open client connections.
    pub curr_connections: AtomicU64,
    /// Connections accepted since start.
    pub total_connections: AtomicU64,
    /// Connections refused because of `-c`.
    pub rejected_connections: AtomicU64,
    /// Connections closed by the idle timeout (memcached's `idle_kicks`).
    pub idle_kicks: AtomicU64,
    /// Times the acceptor stopped accepting for a while because `accept` failed (EMFILE,
    /// ENFILE, ENOMEM...); memcached's `listen_disabled_num`.
    pub listen_disabled_num: AtomicU64,
    /// False while the acceptor backs off after a failed `accept` (memcached's
    /// `accepting_conns`).
    pub accepting_conns: AtomicBool,
    /// Microseconds the acceptor spent backing off (`time_in_listen_disabled_us`).
    pub time_in_listen_disabled_us: AtomicU64,
    /// Most client connections open at once: with the listening sockets, memcached's
    /// `connection_structures` (it keeps a connection's structure once made).
    pub peak_connections: AtomicU64,
    /// Passes of the background expiry crawler (`lru_crawler_starts`).
    pub crawler_starts: AtomicU64,
    /// Where the expiry crawler sleeps between runs (rung at shutdown).
    pub crawl_alarm: Alarm,
    /// Set once to stop every thread.
    pub shutdown: AtomicBool,
    /// TCP port actually bound (differs from config when it was 0).
    pub tcp_port: AtomicU64,
    /// UDP port actually bound (0 when disabled).
    pub udp_port: AtomicU64,
    /// The dispatch runtime's statistics (weak: the runtime itself holds
    /// this `Shared`). A trait object, so this module does not depend on the
    /// runtime.
    pub runtime: std::sync::OnceLock<std::sync::Weak<dyn DispatchView>>,
    /// The hot-key tracker (`stats hotkeys`), when `[hotkeys] enabled`.
    pub hotkeys: Option<HotKeys>,
    /// The listening sockets as `stats conns` lists them: descriptor and `tcp:ADDR`,
    /// `tcp6:ADDR` or `udp:ADDR`. Set once the sockets are bound.
    pub listeners: std::sync::OnceLock<Vec<(i32, String)>>,
    /// The auth file's users (`-Y`); `None`: connections need no authentication.
    pub auth: Option<crate::auth::AuthFile>,
    /// Connections that sent `watch` and the log lines waiting for them.
    pub watchers: crate::watch::Watchers,
    /// TLS (`-Z`): the certificates new connections on TLS listeners use; `None`: off.
    pub tls: Option<tailtrim_tls::ReloadableServerConfig>,
    /// TLS handshakes that failed (memcached's `ssl_handshake_errors`).
    pub ssl_handshake_errors: AtomicU64,
    /// TLS handshakes completed without resuming a session (memcached's
    /// `ssl_new_sessions`, shown with `ssl_session_cache`).
    pub ssl_new_sessions: AtomicU64,
}

/// The server's sampled hot-key tracker: the lock is taken only on sampled reads.
pub struct HotKeys {
    sampler: Sampler,
    tracker: Mutex<HotKeyTracker>,
}

impl HotKeys {
    /// A tracker of at most `capacity` keys recording one read in `sample_every`.
    pub fn new(capacity: usize, sample_every: u32) -> HotKeys {
        HotKeys {
            sampler: Sampler::new(sample_every),
            tracker: Mutex::new(HotKeyTracker::new(TrackerConfig {
                capacity,
                sample_every,
                ..TrackerConfig::default()
            })),
        }
    }

    /// Counts one read of `key` (recorded on sampled calls only).
    pub fn offer(&self, key: &[u8]) {
        if self.sampler.sampled() {
            self.lock().record(key, self.sampler.weight());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HotKeyTracker> {
        self.tracker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `stats hotkeys` pairs: settings, memory, then `hotkey:<rank>` = `<key> <count> <error>`
    /// for the `n` hottest keys.
    pub fn stats(&self, n: usize) -> Vec<(String, String)> {
        let tracker = self.lock();
        let config = tracker.config();
        let mut pairs = vec![
            ("hotkeys_enabled".to_string(), "1".to_string()),
            ("hotkeys_capacity".into(), config.capacity.to_string()),
            (
                "hotkeys_sample_every".into(),
                config.sample_every.to_string(),
            ),
            ("hotkeys_tracked".into(), tracker.len().to_string()),
            ("hotkeys_recorded".into(), tracker.recorded().to_string()),
            ("hotkeys_bytes".into(), tracker.memory_bytes().to_string()),
            (
                "hotkeys_bytes_bound".into(),
                HotKeyTracker::memory_bound(config).to_string(),
            ),
        ];
        for (rank, hot) in tracker.top(n).into_iter().enumerate() {
            pairs.push((
                format!("hotkey:{}", rank + 1),
                format!(
                    "{} {} {}",
                    String::from_utf8_lossy(&hot.key),
                    hot.count,
                    hot.error
                ),
            ));
        }
        pairs
    }

    /// Forgets every tracked key (`stats reset`).
    pub fn reset(&self) {
        self.lock().clear();
    }
}

impl Shared {
    /// Builds the shared state for `workers` worker threads.
    pub fn new(store: Store, config: ServerConfig) -> Shared {
        let workers = config.workers.threads;
        Shared {
            store,
            version: VERSION.to_string(),
            started: unix_now().0,
            counters: (0..workers).map(|_| WorkerCounters::default()).collect(),
            curr_connections: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            idle_kicks: AtomicU64::new(0),
            listen_disabled_num: AtomicU64::new(0),
            accepting_conns: AtomicBool::new(true),
            time_in_listen_disabled_us: AtomicU64::new(0),
            peak_connections: AtomicU64::new(0),
            crawler_starts: AtomicU64::new(0),
            crawl_alarm: Alarm::default(),
            shutdown: AtomicBool::new(false),
            tcp_port: AtomicU64::new(u64::from(config.server.port)),
            udp_port: AtomicU64::new(u64::from(config.server.udp_port)),
            runtime: std::sync::OnceLock::new(),
            listeners: std::sync::OnceLock::new(),
            auth: None,
            watchers: crate::watch::Watchers::default(),
            tls: None,
            ssl_handshake_errors: AtomicU64::new(0),
            ssl_new_sessions: AtomicU64::new(0),
            hotkeys: config
                .hotkeys
                .enabled
                .then(|| HotKeys::new(config.hotkeys.capacity, config.hotkeys.sample_every)),
            config,
        }
    }

    /// Sum of all workers' counters.
    pub fn counter_snapshot(&self) -> CounterSnapshot {
        let mut snap = CounterSnapshot::default();
        for c in &self.counters {
            snap.add(c);
        }
        snap
    }

    /// Sum of all workers' per size class counters, indexed by class id.
    pub fn slab_snapshots(&self) -> Vec<SlabSnapshot> {
        let mut classes = vec![SlabSnapshot::default(); tailtrim_store::SIZE_CLASS_LIMIT];
        for counters in &self.counters {
            for (class, snapshot) in classes.iter_mut().enumerate() {
                snapshot.add(&counters.slabs, class);
            }
        }
        classes
    }

    /// `stats reset` beyond the workers' counters: what memcached clears (its global and
    /// item statistics), not what describes the present (`curr_connections`,
    /// `connection_structures`, `curr_items`, `bytes`).
    pub fn reset_stats(&self) {
        self.store.reset_stats();
        for counter in [
            &self.total_connections,
            &self.rejected_connections,
            &self.idle_kicks,
            &self.listen_disabled_num,
            &self.time_in_listen_disabled_us,
            &self.crawler_starts,
            &self.ssl_handshake_errors,
            &self.ssl_new_sessions,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// Reloads the TLS certificate files (`refresh_certs`, SIGHUP): new connections get
    /// the new certificates, open ones keep theirs. On an error (memcached's text) the
    /// certificates in use stay.
    pub fn refresh_certs(&self) -> Result<(), String> {
        let Some(tls) = &self.tls else {
            return Err("Error TLS not enabled".to_string());
        };
        tls.reload().map_err(|error| {
            tracing::error!("tailtrim: refresh_certs: {error}");
            error.to_string()
        })
    }

    /// True once shutdown has begun.
    pub fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Begins the shutdown: [`Shared::stopping`] turns true and the background threads
    /// sleeping on an [`Alarm`] (the crawler, the logger) wake at once to see it.
    pub fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
        self.crawl_alarm.ring();
        self.watchers.alarm.ring();
    }
}

/// What `stats` needs from the dispatch runtime.
pub trait DispatchView: Send + Sync {
    /// `stats sizeaware` pairs.
    fn stats(&self) -> Vec<(String, String)>;
    /// `stats histograms`: every histogram behind the `stats sizeaware` percentiles, by name
    /// (the unit is the name's suffix).
    fn histograms(&self) -> Vec<(String, hdrhistogram::Histogram<u64>)>;
    /// Zeroes the runtime's statistics (`stats reset`).
    fn reset_stats(&self);
    /// The open client connections (`stats conns`), by descriptor.
    fn connections(&self) -> Vec<ConnSummary>;
}

/// One client connection as `stats conns` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnSummary {
    /// Its descriptor (memcached's connection id).
    pub fd: i32,
    /// The client's address, `tcp:ADDR` or `tcp6:ADDR`.
    pub addr: String,
    /// The local address it was accepted on, same form.
    pub listen_addr: String,
    /// memcached's state name: `conn_parse_cmd` while a request of it is being read or is
    /// read and not yet answered, `conn_mwrite` while replies wait to be written, else
    /// `conn_waiting`.
    pub state: &'static str,
    /// Seconds since it last completed a command.
    pub secs_since_last_cmd: u64,
}

/// `tcp:ADDR` for IPv4, `tcp6:ADDR` for IPv6, as memcached names socket addresses.
pub fn tcp_name(addr: &std::net::SocketAddr) -> String {
    match addr {
        std::net::SocketAddr::V4(_) => format!("tcp:{addr}"),
        std::net::SocketAddr::V6(_) => format!("tcp6:{addr}"),
    }
}

impl Shared {
    /// The runtime's statistics view, while it runs.
    pub fn dispatch_view(&self) -> Option<std::sync::Arc<dyn DispatchView>> {
        self.runtime.get().and_then(std::sync::Weak::upgrade)
    }
}

/// The current Unix second (the one clock read of the server runtime).
pub fn unix_now() -> UnixSecs {
    UnixSecs(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    )
}
