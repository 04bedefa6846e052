//! tailtrim-proxy: a memcached-protocol proxy over a `tailtrim-client` pool.
//!
//! ```text
//!  memcached clients ──TCP──► listener ──► one task per connection (frontend)
//!                                              │ parse (tailtrim-proto), bad input answered here
//!                                              ▼
//!                                    tailtrim_client::Pool ── ring / planner / health (policy)
//!                                              │ pipelined connections
//!                                              ▼
//!                                   memcached or `tailtrim serve` backends
//!  Prometheus ──HTTP──► admin listener ──► metrics::prometheus_text
//!  operator ──HTTP POST/DELETE /pool/servers, or SIGHUP (reload) ──► Cluster::change
//!                 (versioned ring swap, hot-key warm-up: tailtrim_client::cluster)
//! ```
//!
//! All tasks run on one multi-threaded tokio runtime (`[proxy] threads`). Replies to a
//! connection are written in the order its requests arrived; multiget replies are reassembled
//! in the client's key order.

pub mod admin;
pub mod config;
pub mod error;
pub mod frontend;
pub mod metrics;
pub mod twemproxy;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tailtrim_client::Cluster;
use tailtrim_proto::Limits;
use tokio::net::TcpListener;

pub use config::ProxyConfig;
pub use error::ProxyError;
use frontend::{FrontendStats, Shared};

/// A bound, not yet serving, proxy.
pub struct Proxy {
    shared: Arc<Shared>,
    listener: TcpListener,
    admin: Option<admin::AdminListener>,
}

impl Proxy {
    /// Validates the config and binds the listeners (call inside a tokio runtime).
    pub async fn bind(config: &ProxyConfig) -> Result<Proxy, ProxyError> {
        let pool_config = config.pool_config()?;
        config.warmup.settings("")?;
        let pool = Cluster::new(pool_config, config.warmup.tracker())
            .map_err(|error| ProxyError::Config(error.to_string()))?;
        let listener = TcpListener::bind(&config.proxy.listen)
            .await
            .map_err(|source| ProxyError::Io {
                what: format!("listening on {}", config.proxy.listen),
                source,
            })?;
        let admin = if config.proxy.admin_listen.is_empty() {
            None
        } else {
            Some(
                TcpListener::bind(&config.proxy.admin_listen)
                    .await
                    .map_err(|source| ProxyError::Io {
                        what: format!("admin listening on {}", config.proxy.admin_listen),
                        source,
                    })?,
            )
        };
        let admin = admin
            .map(|listener| admin::AdminListener::new(listener, &config.proxy))
            .transpose()?;
        let shared = Arc::new(Shared {
            pool,
            warmup: config.warmup.clone(),
            limits: Limits {
                item_size_max: config.proxy.item_size_max,
            },
            stats: FrontendStats::default(),
            started: Instant::now(),
            threads: config.proxy.threads,
            max_connections: config.proxy.max_connections,
            idle_timeout: (config.proxy.idle_timeout_secs > 0)
                .then(|| std::time::Duration::from_secs(config.proxy.idle_timeout_secs)),
        });
        Ok(Proxy {
            shared,
            listener,
            admin,
        })
    }

    /// The client listen address actually bound.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The admin listen address actually bound, if enabled.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin
            .as_ref()
            .and_then(|admin| admin.local_addr().ok())
    }

    /// The shared state (pool, counters), e.g. for tests.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Serves until the future is dropped. Connections past `[proxy] max_connections` get
    /// memcached's `ERROR Too many open connections` and are closed. Accept errors (e.g. too
    /// many open files) are logged and retried after a short pause rather than ending the
    /// proxy.
    pub async fn serve(self) {
        if let Some(admin) = self.admin {
            tokio::spawn(admin::serve(admin, self.shared.clone()));
        }
        loop {
            match self.listener.accept().await {
                Ok((stream, _)) => {
                    if self.shared.admit() {
                        tokio::spawn(frontend::serve_connection(stream, self.shared.clone()));
                    } else {
                        // memcached's answer past -c; a full socket buffer just loses it.
                        let _ = stream.try_write(frontend::TOO_MANY_CONNECTIONS);
                    }
                }
                Err(error) => {
                    eprintln!("tailtrim proxy: accept failed: {error}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Re-reads the config file and applies its `[pool] servers` list (joins with `[warmup] mode`,
/// removals with `[warmup] remove_mode`, one change per server). Other changed settings need a
/// restart and are reported as ignored.
pub async fn reload(shared: &Shared, path: &std::path::Path) -> Result<String, ProxyError> {
    let fresh = ProxyConfig::from_file(path)?;
    let wanted = fresh.pool_config()?.servers;
    let current = shared.pool.current().config().servers.clone();
    let mut changes = Vec::new();
    for spec in &current {
        if !wanted.iter().any(|w| w.address() == spec.address()) {
            let settings = shared.warmup.settings(&fresh.warmup.remove_mode)?;
            shared
                .pool
                .remove_server(&spec.address(), settings)
                .await
                .map_err(|error| ProxyError::Config(error.to_string()))?;
            changes.push(format!("removed {spec}"));
        }
    }
    for spec in &wanted {
        if !current.contains(spec) {
            let settings = shared.warmup.settings(&fresh.warmup.mode)?;
            shared
                .pool
                .add_server(spec.clone(), settings)
                .await
                .map_err(|error| ProxyError::Config(error.to_string()))?;
            changes.push(format!("added {spec}"));
        }
    }
    if changes.is_empty() {
        changes.push("no membership change".to_string());
    }
    Ok(changes.join(", "))
}

/// Applies [`reload`] on every SIGHUP, logging the outcome to stderr.
async fn reload_on_sighup(shared: Arc<Shared>, path: std::path::PathBuf) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
    else {
        eprintln!("tailtrim proxy: cannot listen for SIGHUP; config reload disabled");
        return;
    };
    while hangups.recv().await.is_some() {
        match reload(&shared, &path).await {
            Ok(summary) => eprintln!(
                "tailtrim proxy: reloaded {}: {summary} (version {})",
                path.display(),
                shared.pool.version()
            ),
            Err(error) => eprintln!(
                "tailtrim proxy: reload of {} failed: {error}",
                path.display()
            ),
        }
    }
}

/// Builds a runtime with `[proxy] threads` workers, binds, prints where it listens to stderr,
/// and serves until Ctrl-C (SIGINT). For `tailtrim proxy`. With `reload_from`, SIGHUP re-reads
/// that file and applies its server list ([`reload`]).
pub fn run_blocking(
    config: &ProxyConfig,
    reload_from: Option<&std::path::Path>,
) -> Result<(), ProxyError> {
    config.pool_config()?;
    // One thread: a current-thread runtime (one event loop, like nutcracker, no work stealing
    // or cross-thread wake-ups). More: the multi-threaded scheduler.
    let mut builder = if config.proxy.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(config.proxy.threads);
        builder
    };
    let runtime = builder
        .enable_all()
        .build()
        .map_err(|source| ProxyError::Io {
            what: "starting the runtime".to_string(),
            source,
        })?;
    runtime.block_on(async {
        let proxy = Proxy::bind(config).await?;
        if let Some(address) = proxy.local_addr() {
            eprintln!(
                "tailtrim proxy: listening on {address}, {} backends, {} replica(s), planner {}",
                config.pool.servers.len(),
                config.pool.replicas,
                config.pool.planner
            );
        }
        if let Some(address) = proxy.admin_addr() {
            eprintln!("tailtrim proxy: metrics at http://{address}/metrics, membership at /pool");
        }
        if let Some(path) = reload_from {
            tokio::spawn(reload_on_sighup(proxy.shared(), path.to_path_buf()));
        }
        tokio::select! {
            _ = proxy.serve() => {}
            _ = tokio::signal::ctrl_c() => eprintln!("tailtrim proxy: interrupted, exiting"),
        }
        Ok(())
    })
}
