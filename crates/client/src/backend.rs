//! One backend server: its connections, health, load and metrics.
//!
//! ```text
//!   call_in(bytes, shape, class) / call_with(shape, class, started, write)
//!     ├─ health.try_acquire(now)? ── no ──► Err(BackendDown)          (fail fast)
//!     ├─ window set: gate.admit(class) ≤ timeout (strict/aged/DRR, see sched) ─ else Err(Overloaded)
//!     │     (skipped when the backend serves the classes itself: `priorities strict|drr`;
//!     │     a free slot taken without a timer; a multiget fetch without a priority counted
//!     │     in the window but not held)
//!     ├─ slot = the next connection round robin, the one with the fewest requests in
//!     │  flight, or round robin skipping one whose oldest request is late
//!     │  (`connection_choice`, `tailtrim_policy::lanes`), among the class's own
//!     │  connections when the backend
//!     │  serves the classes; connect lazily (connect_timeout; TLS and the `-Y` login when the
//!     │  pool has them, a refusal failing like a connect error); a new connection asks
//!     │  `stats settings` whether the server announces `priorities strict` or `drr` (when
//!     │  detecting);
//!     │  a live connection is taken without arming a timer
//!     ├─ submit (the request written into the connection's buffer);
//!     │  wait ≤ timeout (the connection's watchdog)
//!     │     ├─ reply   ─► health.record_success, EWMA (and when it was refreshed), histogram
//!     │     └─ timeout ─► kill the connection (pending requests fail), health.record_failure
//!     └─ outstanding -= 1
//! ```
//!
//! `outstanding` (and `outstanding_keys`, its keys: a multiget's fetch counts its work in small
//! keys as its planner estimates it) counts a request from its [`Reservation`]
//! to its verdict: `call_*` reserve on
//! entry, and a multiget reserves each fetch when the plan is made
//! ([`crate::pool::Pool::plan_at`]), so the requests still waiting for a query slot, their
//! setup, the delay queue or the gate already weigh on the next plan's replica choice.

use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::connection::{Connection, RawReply, ReplyShape};
use crate::dial::Dialer;
use crate::error::ClientError;
use crate::sched::Gate;
use crate::stats::BackendStats;
use bytes::Bytes;
use parking_lot::Mutex;
use tailtrim_policy::drr::CLASSES;
use tailtrim_policy::health::{
    BackendLoad, Ewma, HealthSettings, HealthTracker, HealthTransition, LatencyEstimate, Timestamp,
};
use tailtrim_policy::lanes::Lane;

/// Settings shared by the backends of a pool.
#[derive(Debug, Clone)]
pub struct BackendSettings {
    /// Bound on one request.
    pub timeout: Duration,
    /// Bound on connecting.
    pub connect_timeout: Duration,
    /// Connections to open (lazily).
    pub connections: usize,
    /// Which connection carries the next request.
    pub connection_choice: tailtrim_policy::lanes::ConnectionChoice,
    /// Queue bound per connection.
    pub queue_limit: usize,
    /// Down-host tracking.
    pub health: HealthSettings,
    /// EWMA weight.
    pub ewma_alpha: f64,
    /// Requests in flight at most, queued by priority class beyond that (0: no bound, no
    /// queue in the client).
    pub window: usize,
    /// The order in which the window's queue serves the classes.
    pub gate_order: tailtrim_policy::serverq::Discipline,
    /// Ask each new connection whether the server serves priority classes itself (`stats
    /// settings`: `priorities strict` or `drr`); set when the planner assigns classes.
    pub detect_priorities: bool,
    /// How connections are opened (TLS, the `-Y` login).
    pub dialer: Arc<Dialer>,
}

impl BackendSettings {
    /// The settings a pool config gives its backends.
    pub fn of(config: &crate::config::PoolConfig) -> Self {
        BackendSettings {
            timeout: config.timeout,
            connect_timeout: config.connect_timeout,
            connections: config.connections_per_backend,
            connection_choice: config.connection_choice,
            queue_limit: config.queue_limit,
            health: config.health,
            ewma_alpha: config.ewma_alpha,
            window: config.effective_window(),
            gate_order: config.gate_order(),
            detect_priorities: config.planner.uses_priorities(),
            dialer: Arc::new(config.dialer.clone()),
        }
    }
}

/// One of a backend's connections, opened lazily and reopened after it dies.
#[derive(Default)]
struct Slot {
    current: Mutex<Option<Connection>>,
    connecting: tokio::sync::Mutex<()>,
}

impl Slot {
    fn live(&self) -> Option<Connection> {
        self.current
            .lock()
            .as_ref()
            .filter(|connection| connection.is_alive())
            .cloned()
    }

    /// Requests in flight on the slot's connection (0 when it has none alive) and, when
    /// `ages` and some are, how long the oldest has waited at `now()`.
    fn lane(&self, ages: bool, now: impl FnOnce() -> tokio::time::Instant) -> Lane {
        let current = self.current.lock();
        let Some(connection) = current.as_ref().filter(|connection| connection.is_alive()) else {
            return Lane::default();
        };
        let in_flight = connection.in_flight();
        let oldest_age_nanos = if ages && in_flight > 0 {
            u64::try_from(connection.oldest_age(now()).as_nanos()).unwrap_or(u64::MAX)
        } else {
            0
        };
        Lane {
            in_flight,
            oldest_age_nanos,
        }
    }
}

/// Who serves a backend's priority classes, as its latest connection found out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priorities {
    /// Not asked yet (no connection, or detection off).
    Undetected = 0,
    /// The backend announced `priorities strict` or `drr`: requests carry their class
    /// (`mg … p<class>`), each class has its own connection and the client does not hold
    /// them back.
    Backend = 1,
    /// The backend did not (stock memcached, or a tailtrim dispatch policy that serves
    /// in arrival order): no flag is sent; the client's gate orders requests, if it has one.
    Client = 2,
}

impl Priorities {
    fn from_u8(value: u8) -> Priorities {
        match value {
            1 => Priorities::Backend,
            2 => Priorities::Client,
            _ => Priorities::Undetected,
        }
    }
}

/// True when a `stats settings` reply announces that the server serves classes itself
/// (`priorities strict` or `priorities drr`).
fn announces_priorities(reply: &[u8]) -> bool {
    reply.split(|&b| b == b'\n').any(|line| {
        matches!(
            line.trim_ascii_end(),
            b"STAT priorities strict" | b"STAT priorities drr"
        )
    })
}

/// A backend server.
pub struct Backend {
    address: String,
    settings: BackendSettings,
    clock: Clock,
    slots: Vec<Slot>,
    next_slot: AtomicUsize,
    health: Mutex<HealthTracker>,
    /// Reply latency and when a reply last refreshed it.
    ewma: Mutex<(Ewma, Option<Timestamp>)>,
    outstanding: AtomicU32,
    /// Keys of the outstanding requests.
    outstanding_keys: AtomicU32,
    gate: Option<Gate>,
    /// A [`Priorities`] as its `u8`.
    priorities: AtomicU8,
    stats: BackendStats,
}

impl Backend {
    /// A backend at `address` (`host:port`); nothing is connected until the first request.
    pub fn new(address: String, settings: BackendSettings, clock: Clock) -> Self {
        // One connection per class in reserve, for a backend that serves the classes.
        let connections = if settings.detect_priorities {
            settings.connections.max(CLASSES)
        } else {
            settings.connections.max(1)
        };
        Backend {
            address,
            clock,
            slots: (0..connections).map(|_| Slot::default()).collect(),
            next_slot: AtomicUsize::new(0),
            health: Mutex::new(HealthTracker::new(settings.health)),
            ewma: Mutex::new((Ewma::new(settings.ewma_alpha), None)),
            outstanding: AtomicU32::new(0),
            outstanding_keys: AtomicU32::new(0),
            gate: (settings.window > 0).then(|| Gate::new(settings.window, settings.gate_order)),
            priorities: AtomicU8::new(0),
            stats: BackendStats::default(),
            settings,
        }
    }

    /// `host:port`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Metrics.
    pub fn stats(&self) -> &BackendStats {
        &self.stats
    }

    /// The priority gate, when the pool bounds requests in flight.
    pub fn gate(&self) -> Option<&Gate> {
        self.gate.as_ref()
    }

    /// Requests reserved and not yet answered: planned (waiting for a slot, setup, a delay
    /// or the gate) or in flight.
    pub fn outstanding(&self) -> u32 {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// Keys of the requests counted in [`Backend::outstanding`] (a multiget's fetch counted as its
    /// planner's estimate of its work in small keys, `Planner::fetch_work_keys`).
    pub fn outstanding_keys(&self) -> u32 {
        self.outstanding_keys.load(Ordering::Relaxed)
    }

    /// True unless the down-host tracker has it down (or probing).
    pub fn is_up(&self) -> bool {
        self.health.lock().is_up()
    }

    /// Load as the replica chooser sees it now.
    pub fn load(&self) -> BackendLoad {
        self.load_at(self.clock.now())
    }

    /// Load at `now` with this backend's own latency estimate, however stale (the pool
    /// settles the estimates of all its backends together: [`crate::pool::Pool::loads_at`]).
    pub fn load_at(&self, now: Timestamp) -> BackendLoad {
        BackendLoad {
            outstanding: self.outstanding(),
            outstanding_work: None,
            demoted_work: None,
            ewma_nanos: self.ewma_nanos(),
            available: self.health.lock().would_accept(now),
        }
    }

    /// EWMA of reply latency, if measured.
    pub fn ewma_nanos(&self) -> Option<f64> {
        self.ewma.lock().0.value()
    }

    /// The latency estimate at `now` and its age (`None` before the first reply).
    pub fn estimate_at(&self, now: Timestamp) -> Option<LatencyEstimate> {
        let (ewma, refreshed) = *self.ewma.lock();
        Some(LatencyEstimate {
            ewma_nanos: ewma.value()?,
            age_nanos: now.nanos_since(refreshed?),
        })
    }

    /// Feeds a reply's latency into the estimate, refreshed at `at`.
    pub fn observe_latency(&self, latency_nanos: f64, at: Timestamp) {
        let mut estimate = self.ewma.lock();
        estimate.0.observe(latency_nanos);
        estimate.1 = Some(at);
    }

    /// Counts one request of one key as outstanding until the reservation is dropped; pass it
    /// to [`Backend::call_reserved`], or drop it if the request is not sent after all.
    pub fn reserve(&self) -> Reservation<'_> {
        self.reserve_keys(1)
    }

    /// [`Backend::reserve`] for a request of `keys` keys (or that much work, in small keys).
    pub fn reserve_keys(&self, keys: u32) -> Reservation<'_> {
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        self.outstanding_keys.fetch_add(keys, Ordering::Relaxed);
        Reservation {
            backend: self,
            keys,
        }
    }

    /// The ageing a classed request carries to this backend (`mg … p<class>a<overtakes>`):
    /// the overtakes of the planner's order when it is aged (`cost-sbf`), so that the server
    /// runs the order the simulator's servers run; `None` for strict and DRR orders.
    pub fn ageing(&self) -> Option<u64> {
        match self.settings.gate_order {
            tailtrim_policy::serverq::Discipline::Aged { overtakes } => Some(overtakes),
            tailtrim_policy::serverq::Discipline::Strict
            | tailtrim_policy::serverq::Discipline::Drr => None,
        }
    }

    /// Who serves this backend's priority classes.
    pub fn priorities(&self) -> Priorities {
        Priorities::from_u8(self.priorities.load(Ordering::Relaxed))
    }

    /// Who serves the classes, connecting (and so detecting) first if nobody has asked yet.
    /// A backend that cannot be reached stays undetected (and is served like
    /// [`Priorities::Client`]) until a connection succeeds.
    pub async fn detect_priorities(&self) -> Priorities {
        if self.settings.detect_priorities && self.priorities() == Priorities::Undetected {
            // Boxed: connecting is rare, and its state would weigh on every caller's future.
            let _ = Box::pin(self.connection(0)).await;
        }
        self.priorities()
    }

    /// Asks a new connection's server whether it serves priority classes (before the
    /// connection is published in its slot, so nothing else is queued on it yet).
    async fn detect_on(&self, connection: &Connection) {
        let reply = match connection.submit(b"stats settings\r\n", ReplyShape::UntilEnd) {
            Ok(receiver) => tokio::time::timeout(self.settings.connect_timeout, receiver)
                .await
                .ok()
                .and_then(Result::ok),
            Err(_) => None,
        };
        let found = match reply {
            Some(reply) if announces_priorities(&reply.bytes) => Priorities::Backend,
            _ => Priorities::Client,
        };
        self.priorities.store(found as u8, Ordering::Relaxed);
    }

    /// The slot for a request in `class`: among the class's own slots when the backend serves
    /// the classes (so a backlog of one class never sits in front of another on one
    /// connection; slots `class + k·CLASSES`), else among the configured connections, by
    /// `connection_choice` ([`tailtrim_policy::lanes`]): the next round robin, the one with
    /// the fewest requests in flight (`least-loaded`), or the next round robin unless its
    /// oldest request in flight is older than 4 typical response times of the backend (its
    /// reply-latency EWMA), at least 1 ms (`avoid-slow`).
    fn slot(&self, class: usize) -> &Slot {
        let (first, stride, count) = if self.priorities() == Priorities::Backend {
            // Slots class, class + CLASSES, … belong to the class (at least one each).
            let class = class.min(CLASSES - 1);
            (class, CLASSES, (self.slots.len() - class).div_ceil(CLASSES))
        } else {
            (0, 1, self.settings.connections.max(1))
        };
        let start = self.next_slot.fetch_add(1, Ordering::Relaxed);
        let choice = self.settings.connection_choice;
        // The clock is read once per choice at most, and only by `avoid-slow` on a busy slot.
        let now = std::cell::OnceCell::new();
        let chosen = choice.choose(
            start,
            count,
            |k| {
                self.slots[first + stride * k].lane(choice.reads_ages(), || {
                    *now.get_or_init(tokio::time::Instant::now)
                })
            },
            || self.ewma_nanos(),
        );
        if choice.reads_ages() && chosen != start % count {
            self.stats.stuck_skips.incr();
        }
        &self.slots[first + stride * chosen]
    }

    /// The connection for a request in `class` ([`Backend::slot`]), connecting it if needed.
    async fn connection(&self, class: usize) -> Result<Connection, ClientError> {
        self.connect(self.slot(class)).await
    }

    /// The slot's live connection, or a new one.
    async fn connect(&self, slot: &Slot) -> Result<Connection, ClientError> {
        if let Some(connection) = slot.live() {
            return Ok(connection);
        }
        // One caller connects (and asks about priorities); the others wait for its outcome.
        let _connecting = slot.connecting.lock().await;
        if let Some(connection) = slot.live() {
            return Ok(connection);
        }
        let dialed = self
            .settings
            .dialer
            .dial(&self.address, self.settings.connect_timeout)
            .await;
        let stream = match dialed {
            Ok(stream) => stream,
            Err(error) => {
                if let ClientError::Login { .. } | ClientError::Tls { .. } = &error {
                    tracing::warn!("tailtrim proxy: {error}; counted as a failed connection");
                }
                return Err(error);
            }
        };
        self.stats.connects.incr();
        let connection = Connection::start(
            stream,
            self.address.clone(),
            self.settings.queue_limit,
            self.settings.timeout,
        );
        if self.settings.detect_priorities {
            self.detect_on(&connection).await;
        }
        *slot.current.lock() = Some(connection.clone());
        Ok(connection)
    }

    /// Sends one request and waits for its reply, bounded by the timeout; priority class 0.
    pub async fn call(&self, bytes: Bytes, shape: ReplyShape) -> Result<RawReply, ClientError> {
        self.call_in(bytes, shape, 0).await
    }

    /// Sends one request in priority `class` (0 = highest; only matters when the pool bounds
    /// requests in flight) and waits for its reply. Waiting for a slot and the exchange are
    /// each bounded by the timeout; a request that never got a slot fails `Overloaded`, which
    /// does not count against the backend's health.
    pub async fn call_in(
        &self,
        bytes: Bytes,
        shape: ReplyShape,
        class: usize,
    ) -> Result<RawReply, ClientError> {
        self.call_with(shape, class, Instant::now(), |out| {
            out.extend_from_slice(&bytes)
        })
        .await
        .0
    }

    /// As [`Backend::call_in`], the request written by `write` straight into the connection's
    /// output buffer (once, under its lock: see [`Connection::submit_with`]) and timed from
    /// `started` (the caller's clock reading, so that the clock is read once); returns the
    /// outcome and how long it took from `started`.
    pub async fn call_with(
        &self,
        shape: ReplyShape,
        class: usize,
        started: Instant,
        write: impl Fn(&mut Vec<u8>),
    ) -> (Result<RawReply, ClientError>, Duration) {
        self.call_reserved(self.reserve(), shape, class, true, started, write)
            .await
    }

    /// As [`Backend::call_with`], counted as outstanding by `reservation` (taken when the
    /// request was planned) until its verdict. `held`: whether the gate may hold the request
    /// back by its `class` (false for a request whose planner set no priority: counted in the
    /// window, never queued, see [`Gate::enter`]).
    pub async fn call_reserved(
        &self,
        reservation: Reservation<'_>,
        shape: ReplyShape,
        class: usize,
        held: bool,
        started: Instant,
        write: impl Fn(&mut Vec<u8>),
    ) -> (Result<RawReply, ClientError>, Duration) {
        debug_assert!(std::ptr::eq(reservation.backend, self));
        if !self.health.lock().try_acquire(self.clock.at(started)) {
            self.stats.fail_fast.incr();
            return (
                Err(ClientError::BackendDown {
                    backend: self.address.clone(),
                }),
                started.elapsed(),
            );
        }
        let gate = match self.priorities() {
            Priorities::Backend => None,
            Priorities::Undetected | Priorities::Client => self.gate.as_ref(),
        };
        let _permit = match (gate, held) {
            (None, _) => None,
            (Some(gate), false) => Some(gate.enter()),
            (Some(gate), true) => match gate.try_admit(class) {
                Some(permit) => Some(permit),
                None => {
                    match tokio::time::timeout(self.settings.timeout, gate.admit(class)).await {
                        Ok(permit) => Some(permit),
                        Err(_) => {
                            self.stats.errors.incr();
                            self.health.lock().record_abandoned(self.clock.now());
                            return (
                                Err(ClientError::Overloaded {
                                    backend: self.address.clone(),
                                    limit: gate.window(),
                                }),
                                started.elapsed(),
                            );
                        }
                    }
                }
            },
        };
        self.stats.requests.incr();
        let mut in_flight = InFlight::new(self);
        // Bounded by the timeout: waiting for a connection here, the reply by the connection's
        // watchdog (one timer per connection, not one per request).
        let result = self.exchange(shape, class, &write).await;
        in_flight.finished();
        drop(reservation);
        let elapsed = started.elapsed();
        let result = match result {
            Ok(reply) => {
                let finished = started + elapsed;
                self.observe_latency(elapsed.as_nanos() as u64 as f64, self.clock.at(finished));
                self.stats
                    .latency
                    .record_micros(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
                if self.health.lock().record_success() == HealthTransition::Revived {
                    self.stats.revived.incr();
                    tracing::info!(
                        "tailtrim proxy: backend {} answers again, back in use",
                        self.address
                    );
                }
                Ok(reply)
            }
            Err(error @ ClientError::Timeout { .. }) => {
                self.stats.timeouts.incr();
                self.record_failure();
                Err(error)
            }
            Err(error) => {
                self.stats.errors.incr();
                if error.is_backend_failure() {
                    self.record_failure();
                } else {
                    // Refused by our own queue bound: no verdict on the backend.
                    self.health.lock().record_abandoned(self.clock.now());
                }
                Err(error)
            }
        };
        (result, elapsed)
    }

    fn timeout_error(&self) -> ClientError {
        ClientError::Timeout {
            backend: self.address.clone(),
            after_ms: u64::try_from(self.settings.timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }

    async fn exchange(
        &self,
        shape: ReplyShape,
        class: usize,
        write: &impl Fn(&mut Vec<u8>),
    ) -> Result<RawReply, ClientError> {
        let slot = self.slot(class);
        // A live connection is ready at once; the timer is only armed while connecting.
        // Connecting is boxed: the dial's state (TCP connect, TLS handshake, login) is
        // kilobytes, and held inline it made every request's future as large, copied whole
        // whenever a request started.
        let connection = match slot.live() {
            Some(connection) => connection,
            None => Box::pin(tokio::time::timeout(
                self.settings.timeout,
                self.connect(slot),
            ))
            .await
            .map_err(|_| self.timeout_error())??,
        };
        // If this future is dropped (timeout) mid-write or mid-wait, the guard kills the
        // connection so a torn write or a late reply can never reach a later request.
        let guard = KillOnDrop(Some(&connection));
        let receiver = match connection.submit_with(shape, write) {
            Ok(receiver) => receiver,
            Err(error) => {
                // A dead connection or an overload refusal: nothing of this request was
                // queued, and the other requests must not be taken down with it.
                guard.disarm();
                return Err(error);
            }
        };
        let outcome = receiver.await;
        guard.disarm();
        outcome
    }

    fn record_failure(&self) {
        let transition = self.health.lock().record_failure(self.clock.now());
        if transition == HealthTransition::MarkedDown {
            self.stats.marked_down.incr();
            tracing::info!(
                "tailtrim proxy: backend {} ejected after consecutive failures, probed again later",
                self.address
            );
        }
    }
}

/// One request counted in a backend's `outstanding` until dropped ([`Backend::reserve`]).
#[must_use = "the request counts as outstanding only while the reservation lives"]
pub struct Reservation<'a> {
    backend: &'a Backend,
    keys: u32,
}

impl Reservation<'_> {
    /// The backend it counts on.
    pub fn backend(&self) -> &Backend {
        self.backend
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.backend.outstanding.fetch_sub(1, Ordering::Relaxed);
        self.backend
            .outstanding_keys
            .fetch_sub(self.keys, Ordering::Relaxed);
    }
}

/// A request let through by the health tracker: if the caller drops it before it has a
/// verdict, tells the tracker (a probe must not stay pending forever).
struct InFlight<'a> {
    backend: &'a Backend,
    verdict: bool,
}

impl<'a> InFlight<'a> {
    fn new(backend: &'a Backend) -> Self {
        InFlight {
            backend,
            verdict: false,
        }
    }

    fn finished(&mut self) {
        self.verdict = true;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.verdict {
            let now = self.backend.clock.now();
            self.backend.health.lock().record_abandoned(now);
        }
    }
}

/// Kills a connection when a wait on it is abandoned.
struct KillOnDrop<'a>(Option<&'a Connection>);

impl KillOnDrop<'_> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(connection) = self.0.take() {
            connection.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_priorities_strict_or_drr_announce_that_the_backend_serves_classes() {
        assert!(announces_priorities(
            b"STAT maxbytes 1\r\nSTAT priorities drr\r\nSTAT priority_classes 5\r\nEND\r\n"
        ));
        assert!(announces_priorities(
            b"STAT priorities strict\r\nSTAT priority_classes 5\r\nEND\r\n"
        ));
        assert!(!announces_priorities(
            b"STAT priorities fifo\r\nSTAT priority_classes 5\r\nEND\r\n"
        ));
        assert!(!announces_priorities(b"STAT maxbytes 1\r\nEND\r\n"));
        assert!(!announces_priorities(b"STAT priorities drrr\r\nEND\r\n"));
    }
}
