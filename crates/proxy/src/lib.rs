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

use tailtrim_client::Pool;
use tailtrim_proto::Limits;
use tokio::net::TcpListener;

pub use config::ProxyConfig;
pub use error::ProxyError;
use frontend::{FrontendStats, Shared};

/// A bound, not yet serving, proxy.
pub struct Proxy {
    shared: Arc<Shared>,
    listener: TcpListener,
    admin: Option<TcpListener>,
}

impl Proxy {
    /// Validates the config and binds the listeners (call inside a tokio runtime).
    pub async fn bind(config: &ProxyConfig) -> Result<Proxy, ProxyError> {
        let pool_config = config.pool_config()?;
        let pool = Pool::new(pool_config).map_err(|error| ProxyError::Config(error.to_string()))?;
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
        let shared = Arc::new(Shared {
            pool,
            limits: Limits {
                item_size_max: config.proxy.item_size_max,
            },
            stats: FrontendStats::default(),
            started: Instant::now(),
            threads: config.proxy.threads,
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

    /// Serves until the future is dropped. Accept errors (e.g. too many open files) are logged
    /// and retried after a short pause rather than ending the proxy.
    pub async fn serve(self) {
        if let Some(admin) = self.admin {
            tokio::spawn(admin::serve(admin, self.shared.clone()));
        }
        loop {
            match self.listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(frontend::serve_connection(stream, self.shared.clone()));
                }
                Err(error) => {
                    eprintln!("tailtrim proxy: accept failed: {error}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Builds a runtime with `[proxy] threads` workers, binds, prints where it listens to stderr,
/// and serves until Ctrl-C (SIGINT). For `tailtrim proxy`.
pub fn run_blocking(config: &ProxyConfig) -> Result<(), ProxyError> {
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
            eprintln!("tailtrim proxy: metrics at http://{address}/metrics");
        }
        tokio::select! {
            _ = proxy.serve() => {}
            _ = tokio::signal::ctrl_c() => eprintln!("tailtrim proxy: interrupted, exiting"),
        }
        Ok(())
    })
}
