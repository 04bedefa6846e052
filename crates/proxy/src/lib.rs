//! tailtrim-proxy: a memcached-protocol proxy over a `tailtrim-client` pool.
//!
//! ```text
//!  memcached clients ──TCP──► listener ──► one task per connection (frontend)
//!                      (with -Z: TLS handshake)│ with -Y: memcached's ASCII auth first (auth)
//!                                              │ parse (tailtrim-proto), bad input answered here
//!                                              ▼
//!                          tailtrim_client::routes ── [[routes]] (logging, timeout …) ─► warmup
//!                                              ▼
//!                                    tailtrim_client::Pool ── ring / planner / health (policy)
//!                                              │ pipelined connections
//!                                              ▼
//!                                   memcached or `tailtrim serve` backends
//!                                   (TLS and the -Y login per [pool], tailtrim_client::dial)
//!  Prometheus ──HTTP──► admin listener (tailtrim-admin: /metrics, /health, /pool…) ──► metrics::prometheus_text
//!                       frontend ──stats──► metrics::stats_reply (both read a metrics::MetricsView)
//!  operator ──HTTP POST/DELETE /pool/servers, or SIGHUP (reload) ──► Cluster::change
//!           SIGHUP also re-reads the -Y auth file
//!  SIGINT/SIGTERM: exit; SIGTTIN/SIGTTOU: log level up/down (nutcracker's); logs via `tracing`
//!                 (versioned ring swap, hot-key warm-up: tailtrim_client::cluster)
//! ```
//!
//! All tasks run on one multi-threaded tokio runtime (`[proxy] threads`). Replies to a
//! connection are written in the order its requests arrived; multiget replies are reassembled
//! in the client's key order.

pub mod admin;
pub mod auth;
pub mod classes;
pub mod config;
pub mod effective;
pub mod error;
pub mod frontend;
pub mod metrics;
pub mod prediction;
pub mod twemproxy;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tailtrim_client::Cluster;
use tailtrim_proto::Limits;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};

pub use config::ProxyConfig;
pub use error::ProxyError;
use frontend::Shared;
use metrics::FrontendStats;

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
        let route_specs = config.route_specs()?;
        let routes = tailtrim_client::build_tree(&pool, &route_specs)
            .map_err(|error| ProxyError::Config(format!("[[routes]] {error}")))?;
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
        let auth = if config.proxy.auth_file.is_empty() {
            None
        } else {
            Some(auth::ClientAuth::load(&config.proxy.auth_file)?)
        };
        let tls = if config.tls.enabled {
            Some(tailtrim_tls::ReloadableServerConfig::new(
                config.tls.clone(),
            )?)
        } else {
            None
        };
        let shared = Arc::new(Shared {
            pool,
            routes,
            leaf_only: route_specs.is_empty(),
            auth,
            tls,
            warmup: config.warmup.clone(),
            limits: Limits {
                item_size_max: config.proxy.item_size_max,
            },
            stats: FrontendStats::default(),
            classes: classes::ClassLatency::new(config.classes),
            started: Instant::now(),
            threads: config.proxy.threads,
            max_connections: config.proxy.max_connections,
            idle_timeout: (config.proxy.idle_timeout_secs > 0)
                .then(|| std::time::Duration::from_secs(config.proxy.idle_timeout_secs)),
            prediction: prediction::Predictor::new(&config.model).map_err(ProxyError::Config)?,
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
        let shared = self.shared.clone();
        tokio::spawn(async move { shared.prediction.run(&shared.pool).await });
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
                    tracing::error!("tailtrim proxy: accept failed: {error}");
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

/// What the program around the proxy lets signals do to the process's logging (the proxy
/// crate installs no log subscriber of its own).
#[derive(Default)]
pub struct LogHooks {
    /// Steps the log level one up (`true`) or down and names the new level: SIGTTIN and
    /// SIGTTOU, as nutcracker.
    pub step_level: Option<Box<dyn Fn(bool) -> String + Send + Sync>>,
    /// Reopens the log file (SIGHUP, as nutcracker, before the reload).
    pub reopen_log: Option<Box<dyn Fn() -> Result<(), String> + Send + Sync>>,
}

/// On every SIGHUP: reopens the log file when there is one, re-reads the client listener's
/// auth file and TLS certificates when there are, then applies [`reload`] when the proxy was started from a
/// config file, else logs that there is nothing to reload. A SIGHUP never ends the proxy.
async fn on_sighup(
    mut hangups: Signal,
    shared: Arc<Shared>,
    path: Option<PathBuf>,
    hooks: Arc<LogHooks>,
) {
    while hangups.recv().await.is_some() {
        if let Some(reopen) = &hooks.reopen_log {
            match reopen() {
                Ok(()) => tracing::info!("tailtrim proxy: SIGHUP received, log file reopened"),
                Err(error) => tracing::error!("tailtrim proxy: SIGHUP: {error}"),
            }
        }
        if let Some(auth) = &shared.auth {
            match auth.reload() {
                Ok(users) => tracing::info!(
                    "tailtrim proxy: SIGHUP: auth file {} reloaded, {users} user(s)",
                    auth.path().display()
                ),
                Err(error) => tracing::error!(
                    "tailtrim proxy: SIGHUP: {error}; the users read before stay in force"
                ),
            }
        }
        if let Some(tls) = &shared.tls {
            match tls.reload() {
                Ok(()) => tracing::info!("tailtrim proxy: SIGHUP: TLS certificates reloaded"),
                Err(error) => tracing::error!(
                    "tailtrim proxy: SIGHUP: TLS reload failed, the certificates in use stay: {error}"
                ),
            }
        }
        let Some(path) = &path else {
            tracing::info!(
                "tailtrim proxy: SIGHUP received; no config file to reload (started without -c)"
            );
            continue;
        };
        match reload(&shared, path).await {
            Ok(summary) => tracing::info!(
                "tailtrim proxy: reloaded {}: {summary} (version {})",
                path.display(),
                shared.pool.version()
            ),
            Err(error) => tracing::error!(
                "tailtrim proxy: reload of {} failed: {error}",
                path.display()
            ),
        }
    }
}

/// SIGTTIN raises and SIGTTOU lowers the log level (nutcracker's signals); SIGUSR1 and
/// SIGUSR2 are received and ignored, as nutcracker does, rather than ending the process.
async fn other_signals(
    mut raise: Signal,
    mut lower: Signal,
    mut user1: Signal,
    mut user2: Signal,
    hooks: Arc<LogHooks>,
) {
    loop {
        let up = tokio::select! {
            Some(()) = raise.recv() => true,
            Some(()) = lower.recv() => false,
            Some(()) = user1.recv() => {
                tracing::info!("tailtrim proxy: SIGUSR1 received, ignored");
                continue;
            }
            Some(()) = user2.recv() => {
                tracing::info!("tailtrim proxy: SIGUSR2 received, ignored");
                continue;
            }
            else => return,
        };
        if let Some(step) = &hooks.step_level {
            let level = step(up);
            // Printed whatever the new level is, so the operator sees the change.
            eprintln!("tailtrim proxy: log level now {level}");
        }
    }
}

fn listen_for(kind: SignalKind, name: &str) -> Result<Signal, ProxyError> {
    signal(kind).map_err(|source| ProxyError::Io {
        what: format!("listening for {name}"),
        source,
    })
}

/// Builds a runtime with `[proxy] threads` workers, binds, logs where it listens, and serves
/// until SIGINT or SIGTERM. SIGHUP reopens the log file (`hooks`) and re-reads `reload_from`
/// to apply its server list ([`reload`]), or is logged when there is no file; SIGTTIN /
/// SIGTTOU step the log level (`hooks`).
pub fn run_blocking(
    config: &ProxyConfig,
    reload_from: Option<&std::path::Path>,
    hooks: LogHooks,
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
    let hooks = Arc::new(hooks);
    runtime.block_on(async {
        // Before anything else: from here on, these signals no longer end the process.
        let hangups = listen_for(SignalKind::hangup(), "SIGHUP")?;
        let mut terminate = listen_for(SignalKind::terminate(), "SIGTERM")?;
        let mut interrupt = listen_for(SignalKind::interrupt(), "SIGINT")?;
        let raise = listen_for(SignalKind::from_raw(libc::SIGTTIN), "SIGTTIN")?;
        let lower = listen_for(SignalKind::from_raw(libc::SIGTTOU), "SIGTTOU")?;
        let user1 = listen_for(SignalKind::user_defined1(), "SIGUSR1")?;
        let user2 = listen_for(SignalKind::user_defined2(), "SIGUSR2")?;
        let proxy = Proxy::bind(config).await?;
        if let Some(address) = proxy.local_addr() {
            tracing::info!(
                "tailtrim proxy: listening on {address}, {} backends, {} replica(s), planner {}",
                config.pool.servers.len(),
                config.pool.replicas,
                config.pool.planner
            );
        }
        if let Some(address) = proxy.admin_addr() {
            tracing::info!(
                "tailtrim proxy: metrics at http://{address}/metrics, membership at /pool"
            );
        }
        tokio::spawn(on_sighup(
            hangups,
            proxy.shared(),
            reload_from.map(std::path::Path::to_path_buf),
            Arc::clone(&hooks),
        ));
        tokio::spawn(other_signals(
            raise,
            lower,
            user1,
            user2,
            Arc::clone(&hooks),
        ));
        tokio::select! {
            _ = proxy.serve() => {}
            _ = interrupt.recv() => tracing::info!("tailtrim proxy: SIGINT received, exiting"),
            _ = terminate.recv() => tracing::info!("tailtrim proxy: SIGTERM received, exiting"),
        }
        Ok(())
    })
}
