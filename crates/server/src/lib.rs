//! The tailtrim cache server runtime: sockets, threads, dispatch and stats
//! around the pure `proto` and `store` crates.
//!
//! ```text
//!                    ┌────────────┐  adopt   ┌──────────────── runtime (one engine) ───────────────┐
//!  TCP clients ────► │  acceptor  │ ───────► │ sessions on epoll: read → parse → place → execute   │
//!                    │ (-c limit, │          │ → sequenced replies → writev          (runtime.rs)  │
//!                    │ idle kicks,│          │                                                     │
//!                    │ back-off)  │          │                                                     │
//!                    └────────────┘          │ policy strategy: where a request runs, what an idle │
//!  UDP datagrams ── SO_REUSEPORT socket ───► │ worker does (policies/*.rs: pinned, size-aware,     │
//!                   per worker (udp.rs)      │ early-binding, stealing, late-binding)              │
//!                                            └──────────────────────┬──────────────────────────────┘
//!                                                                   │ Arc<Shared>
//!   crawler thread: store.crawl_expired every interval              ▼
//!   admin thread:   /metrics, /health (tailtrim-admin, tokio)     store (sharded locks), counters
//!   logger thread:  `watch` connections' log lines (watch.rs)
//! ```
//!
//! Module dependencies run one way (no import cycle between modules,
//! `scripts/check-cycles.py`): `runtime` → `policies` → `policies::strategy` →
//! `policies::host`, `session`; `runtime` → `exec` → `report` → `context` →
//! `shared`. A policy drives the runtime only through the
//! [`policies::WorkerHost`] trait, and `shared` sees the runtime only through
//! the [`shared::DispatchView`] trait. Lock order and invariants: see
//! `docs/server.md`.

pub mod affinity;
pub mod alarm;
pub mod auth;
pub mod buffers;
pub mod config;
pub mod context;
pub mod emulate;
pub mod epoll;
pub mod exec;
pub mod flags;
pub mod logging;
pub mod policies;
pub mod priority;
pub mod process;
pub mod profile;
pub mod report;
pub mod runtime;
pub mod rxtime;
pub mod session;
pub mod shared;
pub mod stats;
pub mod transport;
pub mod udp;
pub mod watch;

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mio::{Events, Interest, Poll, Token, Waker};
use tailtrim_store::{Store, StoreConfig};
use thiserror::Error;

pub use config::ServerConfig;
pub use shared::Shared;

/// Errors starting or running the server.
#[derive(Debug, Error)]
pub enum ServerError {
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A socket could not be bound.
    #[error("cannot bind {what} {addr}: {source}")]
    Bind {
        /// `TCP`, `UDP` or `admin`.
        what: &'static str,
        /// The address.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// Any other I/O failure.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The TLS certificates cannot be loaded (memcached's error text).
    #[error("{0}")]
    Tls(String),
    /// The auth file (`-Y`) cannot be read or is malformed.
    #[error("authfile [{path}]: {reason}")]
    AuthFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

const ACCEPTOR_WAKER: Token = Token(usize::MAX);

/// A running server; dropping it does not stop it, call [`ServerHandle::shutdown`].
pub struct ServerHandle {
    shared: Arc<Shared>,
    runtime: Arc<runtime::Runtime>,
    wakers: Vec<Arc<Waker>>,
    threads: Vec<JoinHandle<()>>,
    local_addr: SocketAddr,
}

impl ServerHandle {
    /// The TCP address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The shared state (store, counters) for in-process inspection.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The runtime (policy state, per-class latency).
    pub fn runtime(&self) -> &Arc<runtime::Runtime> {
        &self.runtime
    }

    /// Reloads the TLS certificates (`-Z`), what `SIGHUP` and `refresh_certs` do: new
    /// connections get the new ones. `Ok(false)` without TLS; on an error the certificates
    /// in use stay.
    pub fn reload_tls(&self) -> Result<bool, ServerError> {
        match &self.shared.tls {
            None => Ok(false),
            Some(tls) => tls
                .reload()
                .map(|()| true)
                .map_err(|error| ServerError::Tls(error.to_string())),
        }
    }

    /// Re-reads the auth file (`-Y`), what `SIGHUP` does; returns its number
    /// of users, or `None` without an auth file. On an error the users read
    /// before stay in force.
    pub fn reload_auth(&self) -> Result<Option<usize>, ServerError> {
        self.shared
            .auth
            .as_ref()
            .map(|auth| auth.reload())
            .transpose()
    }

    /// Stops accepting, closes connections and joins every thread.
    pub fn shutdown(self) {
        self.shared.begin_shutdown();
        for waker in &self.wakers {
            let _ = waker.wake();
        }
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

fn bind_error(what: &'static str, addr: &str) -> impl FnOnce(io::Error) -> ServerError {
    let addr = addr.to_string();
    move |source| ServerError::Bind { what, addr, source }
}

fn udp_socket(addr: SocketAddr) -> io::Result<mio::net::UdpSocket> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(mio::net::UdpSocket::from_std(socket.into()))
}

/// A TCP listener on the first address `addr` resolves to, with memcached's `-b` backlog
/// (the kernel caps it at `net.core.somaxconn`).
fn tcp_listener(addr: &str, backlog: i32) -> io::Result<TcpListener> {
    let resolved = std::net::ToSocketAddrs::to_socket_addrs(addr)?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address"))?;
    let domain = socket2::Domain::for_address(resolved);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&resolved.into())?;
    socket.listen(backlog)?;
    Ok(socket.into())
}

/// Starts a server with `config` and returns at once.
pub fn start(config: ServerConfig) -> Result<ServerHandle, ServerError> {
    config.validate().map_err(ServerError::Config)?;
    let store = Store::new(StoreConfig {
        max_bytes: config.storage.memory_mb * 1024 * 1024,
        item_size_max: config.storage.item_size_max,
        evict_to_free: config.storage.evict_to_free,
        ..StoreConfig::default()
    })
    .map_err(|e| ServerError::Config(e.to_string()))?;

    let listen = config.listen_addrs().map_err(ServerError::Config)?;
    let tls_config = if config.tls.enabled {
        let loaded = tailtrim_tls::ReloadableServerConfig::new(config.tls.clone())
            .map_err(|error| ServerError::Tls(error.to_string()))?;
        Some(loaded)
    } else {
        None
    };
    // Every `-l` item; with `-p 0` the first picks a free port and the others without a
    // port of their own share it.
    let mut tcp_listeners: Vec<(TcpListener, bool)> = Vec::with_capacity(listen.len());
    let mut picked_port: Option<u16> = None;
    for addr in &listen {
        let mut addr = addr.clone();
        if addr.port == 0 {
            addr.port = picked_port.unwrap_or(0);
        }
        let tcp_addr = addr.socket_text();
        let listener = tcp_listener(&tcp_addr, config.server.listen_backlog)
            .map_err(bind_error("TCP", &tcp_addr))?;
        listener.set_nonblocking(true)?;
        picked_port.get_or_insert(listener.local_addr()?.port());
        tcp_listeners.push((listener, addr.tls && tls_config.is_some()));
    }
    let local_addr = match tcp_listeners.first() {
        Some((listener, _)) => listener.local_addr()?,
        None => return Err(ServerError::Config("no TCP listener (-l)".into())),
    };

    let mut shared = Shared::new(store, config.clone());
    if !config.server.auth_file.is_empty() {
        shared.auth = Some(auth::AuthFile::load(&config.server.auth_file)?);
    }
    shared.tls = tls_config;
    let shared = Arc::new(shared);
    shared
        .tcp_port
        .store(u64::from(local_addr.port()), Ordering::Relaxed);

    let mut udp_addr: Option<SocketAddr> = None;
    if config.server.udp_port != 0 {
        let first = listen
            .first()
            .map_or(config::DEFAULT_LISTEN, |addr| &addr.host);
        let addr_text = config::ListenAddr {
            host: first.to_string(),
            port: config.server.udp_port,
            tls: false,
        }
        .socket_text();
        let addr: SocketAddr = addr_text
            .parse()
            .map_err(|_| ServerError::Config(format!("bad UDP address {addr_text}")))?;
        udp_addr = Some(addr);
    }

    let mut wakers = Vec::new();
    let mut threads = Vec::new();
    // One SO_REUSEPORT UDP socket per worker (the stand-in for a NIC RX queue).
    let mut udp_sockets: Vec<mio::net::UdpSocket> = Vec::new();
    if let Some(addr) = udp_addr {
        let mut bind_to = addr;
        for _ in 0..config.workers.threads {
            let socket = udp_socket(bind_to).map_err(|source| ServerError::Bind {
                what: "UDP",
                addr: bind_to.to_string(),
                source,
            })?;
            bind_to = socket.local_addr()?;
            udp_sockets.push(socket);
        }
        shared
            .udp_port
            .store(u64::from(bind_to.port()), Ordering::Relaxed);
    }
    {
        use std::os::fd::AsRawFd;
        let mut listeners = Vec::new();
        for (listener, _) in &tcp_listeners {
            if let Ok(addr) = listener.local_addr() {
                listeners.push((listener.as_raw_fd(), shared::tcp_name(&addr)));
            }
        }
        for socket in &udp_sockets {
            if let Ok(addr) = socket.local_addr() {
                listeners.push((socket.as_raw_fd(), format!("udp:{addr}")));
            }
        }
        // memcached counts its listening sockets among the connections it opened.
        let opened = listeners.len() as u64;
        shared
            .total_connections
            .fetch_add(opened, Ordering::Relaxed);
        let _ = shared.listeners.set(listeners);
    }
    let runtime = start_runtime(&shared, udp_sockets, &mut threads)?;

    let accept_poll = Poll::new()?;
    let acceptor_waker = Arc::new(Waker::new(accept_poll.registry(), ACCEPTOR_WAKER)?);
    let mut mio_listeners = Vec::with_capacity(tcp_listeners.len());
    for (index, (listener, tls)) in tcp_listeners.into_iter().enumerate() {
        let mut listener = mio::net::TcpListener::from_std(listener);
        accept_poll
            .registry()
            .register(&mut listener, Token(index), Interest::READABLE)?;
        mio_listeners.push((listener, tls));
    }
    {
        let shared = Arc::clone(&shared);
        let acceptor_runtime = Arc::clone(&runtime);
        threads.push(
            std::thread::Builder::new()
                .name("acceptor".into())
                .spawn(move || {
                    accept_loop(accept_poll, mio_listeners, &shared, &acceptor_runtime)
                })?,
        );
    }
    wakers.push(acceptor_waker);

    {
        let shared = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("logger".into())
                .spawn(move || shared.watchers.run(|| shared.stopping()))?,
        );
    }
    if config.storage.crawl_interval_ms > 0 {
        let shared = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("crawler".into())
                .spawn(move || crawl_loop(&shared))?,
        );
    }
    if config.server.admin_port != 0 {
        let admin = bind_admin(&config.server.admin_listen, config.server.admin_port)?;
        let shared = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("admin".into())
                .spawn(move || admin_thread(admin, shared))?,
        );
    }
    Ok(ServerHandle {
        shared,
        runtime,
        wakers,
        threads,
        local_addr,
    })
}

/// Pins the calling worker thread to `cpu` (if configured); a CPU the
/// process may not use is reported and the worker runs unpinned.
fn pin_worker(id: usize, cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        if let Err(error) = affinity::pin_current_thread(&[cpu]) {
            tracing::warn!("tailtrim: worker {id} not pinned to CPU {cpu}: {error}");
        }
    }
}

/// Builds the runtime and spawns its worker threads and the policy's
/// helper thread (dispatcher, controller).
fn start_runtime(
    shared: &Arc<Shared>,
    udp_sockets: Vec<mio::net::UdpSocket>,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<Arc<runtime::Runtime>, ServerError> {
    let config = &shared.config;
    let runtime = runtime::Runtime::new(Arc::clone(shared), udp_sockets)?;
    let view: Arc<dyn shared::DispatchView> = runtime.clone();
    let _ = shared.runtime.set(Arc::downgrade(&view));
    for id in 0..config.workers.threads {
        let rt = Arc::clone(&runtime);
        let cpu = config.workers.cpu_of(id);
        threads.push(
            std::thread::Builder::new()
                .name(format!("worker-{id}"))
                .spawn(move || {
                    pin_worker(id, cpu);
                    rt.worker_loop(id)
                })?,
        );
    }
    if runtime.emulates_network() {
        let rt = Arc::clone(&runtime);
        threads.push(
            std::thread::Builder::new()
                .name("emulated-network".into())
                .spawn(move || rt.run_network_timer())?,
        );
    }
    if let Some(name) = runtime.helper_thread() {
        let rt = Arc::clone(&runtime);
        threads.push(
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || rt.run_helper())?,
        );
    }
    Ok(runtime)
}

/// First pause of the acceptor after `accept` failed (EMFILE and friends); it doubles on
/// each further failure up to [`ACCEPT_BACKOFF_MAX`] and resets on the next success.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest pause of the acceptor between `accept` retries after failures.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// How often the acceptor looks for idle connections, given the idle timeout.
fn idle_check_every(idle: Duration) -> Duration {
    (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// The acceptor: accepts until the listener would block, refuses connections past `-c`
/// with memcached's error line, and closes idle connections (`idle_timeout`).
///
/// When `accept` fails (no descriptor left: EMFILE, ENFILE; no memory), the pending
/// connections stay in the kernel's backlog and the listener raises no new edge for them,
/// so the acceptor does not wait for one: it sleeps in `poll` for a back-off that doubles
/// from [`ACCEPT_BACKOFF_MIN`] to [`ACCEPT_BACKOFF_MAX`] and retries `accept` itself,
/// serving existing connections all along, until descriptors free up.
fn accept_loop(
    mut poll: Poll,
    listeners: Vec<(mio::net::TcpListener, bool)>,
    shared: &Shared,
    runtime: &runtime::Runtime,
) {
    let mut events = Events::with_capacity(64);
    let idle = Duration::from_secs(shared.config.server.idle_timeout_secs);
    let idle_every = (!idle.is_zero()).then(|| idle_check_every(idle));
    let mut next_idle_check = std::time::Instant::now();
    let mut backoff: Option<Duration> = None;
    let mut disabled_since: Option<std::time::Instant> = None;
    while !shared.stopping() {
        let timeout = match (backoff, idle_every) {
            (Some(pause), Some(every)) => Some(pause.min(every)),
            (pause, every) => pause.or(every),
        };
        if poll.poll(&mut events, timeout).is_err() {
            continue;
        }
        if let Some(every) = idle_every {
            let now = std::time::Instant::now();
            if now >= next_idle_check {
                runtime.close_idle(idle);
                next_idle_check = now + every;
            }
        }
        for (listener, tls) in &listeners {
            accept_all(
                listener,
                *tls,
                shared,
                runtime,
                &mut backoff,
                &mut disabled_since,
            );
        }
    }
}

/// Accepts what `listener` has until it would block (or `accept` fails: `backoff` is
/// set), adopting each connection (`tls`: as a TLS session) or refusing it past `-c`.
fn accept_all(
    listener: &mio::net::TcpListener,
    tls: bool,
    shared: &Shared,
    runtime: &runtime::Runtime,
    backoff: &mut Option<Duration>,
    disabled_since: &mut Option<std::time::Instant>,
) {
    let max = shared.config.server.max_connections as u64;
    loop {
        let (stream, peer) = match listener.accept() {
            Ok(pair) => pair,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                *backoff = None;
                listen_enabled(shared, disabled_since);
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if backoff.is_none() {
                    shared.listen_disabled_num.fetch_add(1, Ordering::Relaxed);
                    shared.accepting_conns.store(false, Ordering::Relaxed);
                    *disabled_since = Some(std::time::Instant::now());
                    tracing::error!("tailtrim: accept failed: {e}; retrying with back-off");
                }
                *backoff = Some(backoff.map_or(ACCEPT_BACKOFF_MIN, |pause| {
                    (pause * 2).min(ACCEPT_BACKOFF_MAX)
                }));
                break;
            }
        };
        *backoff = None;
        listen_enabled(shared, disabled_since);
        if shared.curr_connections.load(Ordering::Relaxed) >= max {
            shared.rejected_connections.fetch_add(1, Ordering::Relaxed);
            let mut s = stream;
            let _ = s.write_all(b"ERROR Too many open connections\r\n");
            continue;
        }
        let open = shared.curr_connections.fetch_add(1, Ordering::Relaxed) + 1;
        shared.peak_connections.fetch_max(open, Ordering::Relaxed);
        shared.total_connections.fetch_add(1, Ordering::Relaxed);
        runtime.adopt(stream, peer, tls);
    }
}

/// The acceptor accepts again after a back-off: `accepting_conns` and
/// `time_in_listen_disabled_us` say so.
fn listen_enabled(shared: &Shared, disabled_since: &mut Option<std::time::Instant>) {
    if let Some(since) = disabled_since.take() {
        let micros = u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX);
        shared
            .time_in_listen_disabled_us
            .fetch_add(micros, Ordering::Relaxed);
        shared.accepting_conns.store(true, Ordering::Relaxed);
    }
}

fn crawl_loop(shared: &Shared) {
    let interval = Duration::from_millis(shared.config.storage.crawl_interval_ms);
    let budget = shared.config.storage.crawl_budget;
    while !shared.stopping() {
        shared.crawl_alarm.sleep(interval);
        if shared.stopping() {
            break;
        }
        shared.crawler_starts.fetch_add(1, Ordering::Relaxed);
        shared.store.crawl_expired(shared::unix_now(), budget);
    }
}

/// Binds the admin listener at `address` (an IP address or a host name) and `port`; an
/// address other than loopback works but prints a warning, since `/metrics` then answers
/// anyone who can reach it.
fn bind_admin(address: &str, port: u16) -> Result<TcpListener, ServerError> {
    let listener = match address.parse::<std::net::IpAddr>() {
        Ok(ip) => {
            let socket = SocketAddr::new(ip, port);
            TcpListener::bind(socket).map_err(bind_error("admin", &socket.to_string()))?
        }
        Err(_) => {
            let text = format!("{address}:{port}");
            TcpListener::bind(&text).map_err(bind_error("admin", &text))?
        }
    };
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    if !bound.ip().is_loopback() {
        eprintln!(
            "tailtrim: warning: admin listener on {bound} is not loopback; /metrics is open to the network"
        );
    }
    Ok(listener)
}

/// The body of an admin `404`: what the listener answers.
const ADMIN_NOT_FOUND: &str = "not found; tailtrim admin: GET /metrics, GET /health\n";

/// The admin thread: the admin component shared with the proxy ([`tailtrim_admin`], hyper)
/// on a current-thread tokio runtime of its own, until the server stops. The workers' epoll
/// runtime is not involved; docs/server.md ("Admin listener") says why this thread runs
/// tokio.
fn admin_thread(listener: TcpListener, shared: Arc<Shared>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!("tailtrim: admin listener not started: {error}");
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tailtrim_admin::adopt(listener) {
            Ok(listener) => listener,
            Err(error) => {
                tracing::error!("tailtrim: {error}");
                return;
            }
        };
        let page = Arc::clone(&shared);
        let admin = tailtrim_admin::Admin::new(ADMIN_NOT_FOUND)
            .with_metrics(move || report::prometheus(&page, shared::unix_now().0));
        let stopped = async {
            while !shared.stopping() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        Arc::new(admin).serve_until(listener, stopped).await;
    });
}

/// Runs a server until SIGINT, SIGTERM or SIGUSR1, then shuts it down gracefully (stops
/// accepting, closes connections, joins every thread), as memcached does on those signals.
/// SIGHUP does not stop it: it reopens the `--log-file` when one is set (so `logrotate` can
/// move the file away), else it is only logged (`-v`); with `-Y` it re-reads the auth file,
/// as memcached does on SIGHUP, and with `-Z` it reloads the TLS certificates.
pub fn run_until_signal(config: ServerConfig) -> Result<(), ServerError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    // Registered before the start, so that a signal during it is not lost; the main thread
    // then blocks in `forever()` (a self-pipe) instead of polling flags: an idle server's
    // main thread sleeps until a signal comes.
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGUSR1, SIGHUP])?;
    let log_file = config.process.log_file.clone();
    let handle = start(config)?;
    tracing::info!(
        "tailtrim {} listening on {} (udp port {})",
        shared::VERSION,
        handle.local_addr(),
        handle.shared().udp_port.load(Ordering::Relaxed)
    );
    let mut received = signals.forever();
    let signal = loop {
        // `forever` ends only if the iterator's handle closes it, which nothing does here.
        let Some(signal) = received.next() else {
            break SIGTERM;
        };
        if signal != SIGHUP {
            break signal;
        }
        if log_file.is_empty() {
            tracing::info!("tailtrim: SIGHUP received; no log file to reopen, still running");
        } else {
            match process::reopen_log_file(&log_file) {
                Ok(()) => tracing::info!("tailtrim: SIGHUP received, reopened {log_file}"),
                Err(error) => tracing::error!("tailtrim: SIGHUP: {error}"),
            }
        }
        match handle.reload_auth() {
            Ok(Some(users)) => tracing::info!("tailtrim: auth file reloaded: {users} users"),
            Ok(None) => {}
            Err(error) => {
                tracing::error!("tailtrim: {error}; the users read before stay in force")
            }
        }
        match handle.reload_tls() {
            Ok(true) => tracing::info!("tailtrim: TLS certificates reloaded"),
            Ok(false) => {}
            Err(error) => {
                tracing::error!("tailtrim: {error}; the certificates in use stay")
            }
        }
    };
    if signal == SIGUSR1 {
        tracing::info!("tailtrim: graceful shutdown signal (SIGUSR1) handled, shutting down");
    } else {
        tracing::info!("tailtrim: signal {signal} handled, shutting down");
    }
    handle.shutdown();
    Ok(())
}
