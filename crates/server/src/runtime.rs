//! The one I/O engine: sessions on epoll, read → swallow → parse →
//! place → execute → sequenced reply → `writev`, for every policy. The
//! policy ([`crate::policies`]) is a strategy object: it says where a
//! request runs and what a worker does; this module does all the I/O.
//!
//! ```text
//!  acceptor ─► adopt(conn) ─► registered in the home epoll as the policy's `Registration` says
//!     (per-worker epolls: pinned, early-binding, stealing; one shared: size-aware, late-binding)
//!     one-shot (re-armed per turn) │ armed, level (pinned) │ armed, edge + ReadOwner (size-aware)
//!
//!  worker i ─► policy.worker_step ─► poll_and_serve(epoll) ─► serve_conn
//!     serve_conn: recv (1 read in 16: recvmsg + kernel receive stamp) ─► swallow ─► parse ─► seq
//!        ─► policy.place(key) ─ Inline ─► execute ─► policy.finish_inline ─► reply slot
//!                             └ Worker(i) / AnyWorker ─► ExecQueue ─► policy.release ─► run_job
//!     reply slots complete in any order; output leaves in request order (one send/writev per batch)
//!  UDP: one SO_REUSEPORT socket per worker, one-shot in an epoll like a connection (udp.rs)
//!
//!  emulation (experimental, off by default; docs/emulation.md), in `complete`, for every policy:
//!     --emulate-service: the completing worker sleeps until started + cost(units) ─► fill slot
//!     --emulate-network: a reply reaching its turn is held until now + cost(bytes)
//!        ─► WriteSide::held ─► network timer thread: release + flush at the instant
//! ```
//!
//! Replies of one connection are sequenced: the reader numbers requests as it
//! parses them, whoever executes a request completes its slot, and output is
//! written strictly in sequence, so pipelined small and large requests on one
//! connection always get their replies in order.

use std::collections::HashMap;
use std::io::{self, IoSlice, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};
use tailtrim_policy::costspec::{CostSpec, Units};
use tailtrim_proto::reply::{self, ReplyBuf};
use tailtrim_proto::{parse_request_frame, Limits, Parsed, ProtoError, Request};
use tailtrim_store::UnixSecs;

use crate::auth::{Outcome, Step};
use crate::config::DispatchPolicy;
use crate::emulate::{set_min_timer_slack, Emulator};
use crate::epoll::{wait_fd, Epoll, READABLE, WRITABLE};
use crate::exec::{count_read, count_written, execute, unlink_too_large, ExecContext};
use crate::policies::{
    Completion, EpollLayout, Executed, InlineReply, Placement, Policy, Registration, WorkerHost,
};
use crate::rxtime::Arrival;
use crate::session::{Admit, Conn, Job, PendingJob, ReadSide};
use crate::shared::{unix_now, DispatchView, Shared};
use crate::stats::bump;

pub use crate::policies::host::{Charge, FlushMode};
pub use crate::transport::WriteOutcome;

/// Stop reading a connection while this much output is pending.
pub const OUTPUT_HIGH_WATER: usize = 4 * 1024 * 1024;
/// Bytes per `read`.
const READ_CHUNK: usize = 64 * 1024;
/// Token of a policy's wake-up descriptor in an epoll.
const WAKE_TOKEN: u64 = u64::MAX;
/// Longest a large worker waits on one slow client before giving the rest
/// of the output back to the event loop.
const LARGE_IO_TIMEOUT_MS: i32 = 2000;
/// A large worker waiting on one client gives up after this long without
/// progress (no room to write, no new bytes): a client that stops reading or
/// sending costs the others at most this, not [`LARGE_IO_TIMEOUT_MS`].
const CLIENT_STALL_MS: i32 = 10;
/// Tokens at and above this value name UDP sockets (index = token − base).
const UDP_TOKEN_BASE: u64 = u64::MAX - 1 - 4096;
/// Most slices handed to one `writev`.
const MAX_IOVECS: usize = 64;
/// Longest reply a retrieval that found nothing sends (`END\r\n`).
const MISS_REPLY_MAX: u64 = 5;

/// Per-class server-side latency (µs), recorded from the kernel's receipt of
/// the request's bytes ([`crate::rxtime`]) to its reply queued for writing, for
/// the requests of sampled reads; and every request's class, counted.
///
/// One slot per worker: a worker records into its own (its lock is
/// uncontended except while `stats` merges them), so no lock is shared by every
/// worker on the request path.
pub struct ClassLatency {
    /// Per worker: histograms and counts.
    per_worker: Vec<WorkerSlot>,
}

/// One worker's histograms and counts (a cache line of its own: workers count
/// side by side).
#[repr(align(128))]
struct WorkerSlot {
    histograms: Mutex<WorkerLatency>,
    /// Small requests served, sampled or not.
    small: AtomicU64,
    /// Large requests served, sampled or not.
    large: AtomicU64,
}

/// One worker's latency histograms.
struct WorkerLatency {
    small: hdrhistogram::Histogram<u64>,
    large: hdrhistogram::Histogram<u64>,
}

/// Merged view of every worker's latency, for `stats`.
pub struct LatencySnapshot {
    /// Small requests' latency (those of sampled reads).
    pub small: hdrhistogram::Histogram<u64>,
    /// Large requests' latency (those of sampled reads).
    pub large: hdrhistogram::Histogram<u64>,
    /// Small requests served.
    pub small_count: u64,
    /// Large requests served.
    pub large_count: u64,
}

fn new_histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 3)
        .unwrap_or_else(|_| hdrhistogram::Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

impl ClassLatency {
    fn new(workers: usize) -> Self {
        ClassLatency {
            per_worker: (0..workers.max(1))
                .map(|_| WorkerSlot {
                    histograms: Mutex::new(WorkerLatency {
                        small: new_histogram(),
                        large: new_histogram(),
                    }),
                    small: AtomicU64::new(0),
                    large: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    /// Counts a request for `worker` and records its latency `micros` if it
    /// was sampled (an out-of-range worker, e.g. a helper thread, records into
    /// the last slot).
    fn record(&self, worker: usize, large: bool, micros: Option<u64>) {
        let slot = &self.per_worker[worker.min(self.per_worker.len() - 1)];
        let count = if large { &slot.large } else { &slot.small };
        count.fetch_add(1, Ordering::Relaxed);
        let Some(micros) = micros else {
            return;
        };
        let mut mine = slot.histograms.lock();
        let histogram = if large {
            &mut mine.large
        } else {
            &mut mine.small
        };
        let _ = histogram.record(micros.clamp(1, 60_000_000));
    }

    /// Every worker's histograms merged.
    pub fn snapshot(&self) -> LatencySnapshot {
        let mut merged = LatencySnapshot {
            small: new_histogram(),
            large: new_histogram(),
            small_count: 0,
            large_count: 0,
        };
        for slot in &self.per_worker {
            let worker = slot.histograms.lock();
            let _ = merged.small.add(&worker.small);
            let _ = merged.large.add(&worker.large);
            merged.small_count += slot.small.load(Ordering::Relaxed);
            merged.large_count += slot.large.load(Ordering::Relaxed);
        }
        merged
    }

    fn reset(&self) {
        for slot in &self.per_worker {
            let mut worker = slot.histograms.lock();
            worker.small.reset();
            worker.large.reset();
            slot.small.store(0, Ordering::Relaxed);
            slot.large.store(0, Ordering::Relaxed);
        }
    }
}

/// The runtime shared by its threads.
pub struct Runtime {
    shared: Arc<Shared>,
    policy: Box<dyn Policy>,
    workers: usize,
    limits: Limits,
    max_buffer: usize,
    /// `-vv`: every command and reply is logged (decided once, at start).
    log_commands: bool,
    /// `-vvv`: connection state changes are logged.
    log_state: bool,
    /// One epoll per worker or one shared, as the policy's layout says.
    epolls: Vec<Arc<Epoll>>,
    /// Sessions by registration token (ahash: the map is looked up on every event).
    conns: RwLock<HashMap<u64, Arc<Conn>, ahash::RandomState>>,
    next_id: AtomicU64,
    /// `epoll_ctl` calls that changed (or re-armed) a connection's registration
    /// (`stats sizeaware`: `epoll_rearms`).
    rearms: AtomicU64,
    next_home: AtomicUsize,
    /// Server-side latency per class.
    pub latency: ClassLatency,
    /// UDP sockets, one per worker, registered one-shot like connections.
    udp: Vec<mio::net::UdpSocket>,
    /// Emulated service time: one draw stream per worker (empty when off).
    service: Vec<Mutex<Emulator>>,
    /// How far each service hold overshot its instant.
    holds: HoldStats,
    /// Emulated network time (`None` when off).
    network: Option<NetworkEmulation>,
    /// One read in this many of a connection is sampled for latency
    /// ([`crate::rxtime::SAMPLE_EVERY`]; every read of an emulating server, whose
    /// histograms are what it is run for).
    sample_every: u32,
    /// Origin of the connections' `last_command_ms` clock (coarse monotonic ms).
    clock_origin_ms: u64,
    /// The runtime's start: the start a request's `Charge` carries where no
    /// emulated service reads it (no clock read for it).
    started: Instant,
}

/// The emulated network stage: draws per worker, and the timer queue of
/// connections whose first held reply is due at an instant.
struct NetworkEmulation {
    draws: Vec<Mutex<Emulator>>,
    timer: (Sender<DueAt>, Receiver<DueAt>),
}

/// A connection and when its first held reply is due.
type DueAt = (Instant, Arc<Conn>);

/// Accuracy of the emulated service holds: achieved minus requested end.
struct HoldStats {
    /// Overshoot per hold, in nanoseconds.
    overshoot_ns: Mutex<hdrhistogram::Histogram<u64>>,
    holds: AtomicU64,
    /// Holds that charged the model's fixed cost (a batch of quiet meta commands pays it once).
    fixed: AtomicU64,
    /// Holds whose instant had passed before the sleep (the real work took longer).
    late: AtomicU64,
}

impl HoldStats {
    fn new() -> HoldStats {
        HoldStats {
            overshoot_ns: Mutex::new(new_histogram()),
            holds: AtomicU64::new(0),
            fixed: AtomicU64::new(0),
            late: AtomicU64::new(0),
        }
    }

    fn record(&self, deadline: Instant, late: bool, fixed: bool) {
        let nanos = deadline.elapsed().as_nanos().clamp(1, 60_000_000_000) as u64;
        let _ = self.overshoot_ns.lock().record(nanos);
        self.holds.fetch_add(1, Ordering::Relaxed);
        if fixed {
            self.fixed.fetch_add(1, Ordering::Relaxed);
        }
        if late {
            self.late.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn reset(&self) {
        self.overshoot_ns.lock().reset();
        self.holds.store(0, Ordering::Relaxed);
        self.fixed.store(0, Ordering::Relaxed);
        self.late.store(0, Ordering::Relaxed);
    }

    /// `emulate_*` pairs of `stats sizeaware`.
    fn stats(&self) -> Vec<(String, String)> {
        let h = self.overshoot_ns.lock();
        let micros = |nanos: u64| format!("{:.1}", nanos as f64 / 1e3);
        let mut out = vec![
            (
                "emulate_holds".to_string(),
                self.holds.load(Ordering::Relaxed).to_string(),
            ),
            (
                "emulate_fixed_charges".to_string(),
                self.fixed.load(Ordering::Relaxed).to_string(),
            ),
            (
                "emulate_late_holds".to_string(),
                self.late.load(Ordering::Relaxed).to_string(),
            ),
        ];
        for (label, q) in [("p50", 0.5), ("p99", 0.99), ("p999", 0.999)] {
            out.push((
                format!("emulate_overshoot_{label}_us"),
                micros(h.value_at_quantile(q)),
            ));
        }
        out.push(("emulate_overshoot_max_us".into(), micros(h.max())));
        out
    }
}

/// Bytes a request moves over the network, for the emulated cost: the request of a store
/// (`declared` is its value length), else the reply.
fn wire_bytes(declared: Option<usize>, frame: &[u8], reply: &ReplyBuf) -> u64 {
    match declared {
        Some(_) => frame.len() as u64,
        None => reply.len() as u64,
    }
}

/// Keys a request names (for the per-key cost term), without allocating.
/// True for a quiet meta command (`mg … q` and the other meta commands with `q`): a
/// pipelined batch goes on after it ([`crate::emulate::BatchDraw`]).
fn quiet_meta(request: &Request) -> bool {
    match request {
        Request::MetaGet { flags, .. }
        | Request::MetaSet { flags, .. }
        | Request::MetaDelete { flags, .. }
        | Request::MetaArithmetic { flags, .. } => flags.quiet(),
        _ => false,
    }
}

fn key_count(request: &Request) -> usize {
    match request {
        Request::Get { keys, .. } | Request::GetAndTouch { keys, .. } => keys.len(),
        other => usize::from(other.single_key().is_some()),
    }
}

/// One emulator per worker, seeded apart, or none when the spec is zero.
fn emulators(spec: CostSpec, workers: usize, salt: u64) -> Vec<Mutex<Emulator>> {
    if spec.is_zero() {
        return Vec::new();
    }
    (0..workers.max(1))
        .map(|i| {
            let seed = salt ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            Mutex::new(Emulator::new(spec, seed))
        })
        .collect()
}

/// What serving a ready connection ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    /// The reader is done with it (re-armed, or closed).
    Done,
    /// A large worker took reading over ([`Next::HandedOff`]).
    HandedOff,
}

/// What serving a connection's buffered input ended with.
enum Next {
    /// Everything complete was processed; the rest needs more input.
    Continue,
    /// Stopped because too much output is pending; requests may remain.
    OutputFull,
    /// Stopped because the connection has too many requests outstanding on
    /// other workers ([`crate::session::ExecQueue`]); the last to finish
    /// below the resume mark brings a reader back.
    Backlogged,
    /// A large worker took the connection over.
    HandedOff,
    /// The connection is closing.
    Closed,
}

/// Writes `out` to `sink` until it is empty or the sink would block; `written`
/// is told each write's size. One piece (the usual reply, or a run of small ones)
/// goes by a plain write — for a socket `send(2)`, about 150 ns cheaper in the
/// kernel than a one-slice `writev(2)` (`experiments/throughput/syscall-costs/`);
/// several pieces go by one vectored write.
pub fn write_out(
    mut sink: impl Write,
    out: &mut ReplyBuf,
    mut written: impl FnMut(usize),
) -> WriteOutcome {
    while !out.is_empty() {
        let result = {
            let mut chunks = out.chunks();
            match (chunks.next(), chunks.next()) {
                // One piece (a run of small replies): no slice array to fill.
                (Some(only), None) => sink.write(only),
                _ => {
                    let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
                    let mut count = 0;
                    for (slot, chunk) in slices.iter_mut().zip(out.chunks()) {
                        *slot = IoSlice::new(chunk);
                        count += 1;
                    }
                    sink.write_vectored(&slices[..count])
                }
            }
        };
        match result {
            Ok(0) => return WriteOutcome::Failed,
            Ok(n) => {
                written(n);
                out.advance(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return WriteOutcome::WouldBlock,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return WriteOutcome::Failed,
        }
    }
    WriteOutcome::Done
}

impl Runtime {
    /// Builds the runtime (no threads yet).
    pub(crate) fn new(
        shared: Arc<Shared>,
        udp: Vec<mio::net::UdpSocket>,
    ) -> io::Result<Arc<Runtime>> {
        let config = &shared.config;
        let workers = config.workers.threads;
        let policy = crate::policies::build(config)?;
        let epoll_count = match policy.layout() {
            EpollLayout::PerWorker => workers,
            EpollLayout::Shared => 1,
        };
        let epolls = (0..epoll_count)
            .map(|_| Epoll::new().map(Arc::new))
            .collect::<io::Result<Vec<_>>>()?;
        for (index, epoll) in epolls.iter().enumerate() {
            if let Some(fd) = policy.wake_fd(index) {
                epoll.add_persistent(fd, WAKE_TOKEN)?;
            }
        }
        let service = config.emulation.service_spec().map_err(io::Error::other)?;
        let network = config.emulation.network_spec().map_err(io::Error::other)?;
        let network_draws = emulators(network, workers, 0x6E65_7477_6F72_6B00);
        let emulating = !service.is_zero() || !network_draws.is_empty();
        let runtime = Runtime {
            sample_every: if emulating {
                1
            } else {
                crate::rxtime::SAMPLE_EVERY
            },
            service: emulators(service, workers, 0x7365_7276_6963_6500),
            holds: HoldStats::new(),
            network: (!network_draws.is_empty()).then(|| NetworkEmulation {
                draws: network_draws,
                timer: crossbeam_channel::unbounded(),
            }),
            limits: Limits {
                item_size_max: config.storage.item_size_max as usize,
            },
            max_buffer: config.server.max_connection_buffer,
            log_commands: crate::logging::logs_commands(config.server.verbose),
            log_state: crate::logging::logs_state(config.server.verbose),
            workers,
            policy,
            epolls,
            conns: RwLock::new(HashMap::with_hasher(ahash::RandomState::new())),
            next_id: AtomicU64::new(1),
            rearms: AtomicU64::new(0),
            next_home: AtomicUsize::new(0),
            latency: ClassLatency::new(workers),
            udp,
            shared,
            clock_origin_ms: crate::rxtime::monotonic_coarse_ms(),
            started: Instant::now(),
        };
        for (index, socket) in runtime.udp.iter().enumerate() {
            let epoll = &runtime.epolls[index % runtime.epolls.len()];
            epoll.add_oneshot(socket.as_raw_fd(), UDP_TOKEN_BASE + index as u64, READABLE)?;
        }
        Ok(Arc::new(runtime))
    }

    /// The policy.
    pub fn policy(&self) -> DispatchPolicy {
        self.policy.kind()
    }

    /// Name of the policy's extra thread, if it has one.
    pub fn helper_thread(&self) -> Option<&'static str> {
        self.policy.helper_thread()
    }

    /// Body of the policy's extra thread.
    pub fn run_helper(&self) {
        self.policy.run_helper(self);
    }

    /// Moves the size-aware split now ([`Policy::set_split`]).
    pub fn set_split(&self, small: usize) {
        self.policy.set_split(small);
    }

    /// True once shutdown has begun.
    pub fn stopping(&self) -> bool {
        self.shared.stopping()
    }

    /// Takes ownership of an accepted connection; `tls`: it came in on a TLS listener
    /// (`-Z`, not `notls:`), so the session encrypts ([`crate::transport`]).
    pub fn adopt(&self, stream: mio::net::TcpStream, peer: SocketAddr, tls: bool) {
        use std::os::fd::{FromRawFd, IntoRawFd};
        // SAFETY: the descriptor comes straight from the mio stream we own.
        let stream = unsafe { TcpStream::from_raw_fd(stream.into_raw_fd()) };
        self.adopt_session(stream, peer, tls);
    }

    /// Takes ownership of an accepted plain connection (a std stream; the caller
    /// has counted it in `curr_connections`).
    pub(crate) fn adopt_std(&self, stream: TcpStream, peer: SocketAddr) {
        self.adopt_session(stream, peer, false);
    }

    fn adopt_session(&self, stream: TcpStream, peer: SocketAddr, tls: bool) {
        let _ = stream.set_nodelay(true);
        // Latency is measured from kernel receipt; without it, from the read.
        let _ = crate::rxtime::enable(stream.as_raw_fd());
        if stream.set_nonblocking(true).is_err() {
            self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let session = match (tls, &self.shared.tls) {
            (true, Some(config)) => match config.new_connection() {
                Ok(connection) => Some(crate::transport::TlsSession::new(
                    connection,
                    config.options().write_buffer_bytes(),
                )),
                Err(error) => {
                    tracing::error!("tailtrim: TLS session for {peer} not made: {error}");
                    self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
            },
            _ => None,
        };
        let home = self.next_home.fetch_add(1, Ordering::Relaxed) % self.epolls.len();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let epoll = Arc::clone(&self.epolls[home]);
        let conn = Arc::new(Conn::new(id, peer, stream, epoll, session));
        conn.touch(self.clock_ms());
        if self.log_state {
            tracing::trace!("<{} new client connection from {peer}", conn.fd());
        }
        self.conns.write().insert(id, Arc::clone(&conn));
        let registered = match self.policy.registration() {
            Registration::OneShot => conn.epoll.add_oneshot(conn.fd(), id, READABLE),
            Registration::Armed => {
                conn.write.lock().armed_interest = READABLE;
                conn.epoll.add_armed(conn.fd(), id, READABLE)
            }
            Registration::EdgeTriggered => {
                conn.write.lock().armed_interest = READABLE;
                conn.epoll.add_edge(conn.fd(), id, READABLE)
            }
        };
        if registered.is_err() {
            self.close(&conn);
        }
    }

    fn close(&self, conn: &Arc<Conn>) {
        if conn.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = conn.epoll.delete(conn.fd());
        if let Some(tls) = &conn.tls {
            tls.lock().close(conn.fd());
        }
        let watch = conn.watch.lock().take();
        match watch.map(|types| (types, conn.stream.try_clone())) {
            Some((types, Ok(stream))) => self.shared.watchers.adopt(stream, types),
            _ => {
                let _ = conn.stream.shutdown(std::net::Shutdown::Both);
            }
        }
        self.conns.write().remove(&conn.id);
        self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
        if self.log_state {
            tracing::trace!("<{} connection closed ({})", conn.fd(), conn.peer);
        }
    }

    /// Milliseconds since the runtime started (the idle timeout's clock).
    fn clock_ms(&self) -> u64 {
        crate::rxtime::monotonic_coarse_ms().saturating_sub(self.clock_origin_ms)
    }

    /// Closes every connection that has completed no command for `idle` and has nothing
    /// outstanding (memcached's `idle_timeout`: a connection writing a reply, or with
    /// requests still executing, is not idle). Returns how many were closed.
    pub fn close_idle(&self, idle: Duration) -> usize {
        let now = self.clock_ms();
        let limit = idle.as_millis() as u64;
        let idle_conns: Vec<Arc<Conn>> = self
            .conns
            .read()
            .values()
            .filter(|conn| now.saturating_sub(conn.last_command_ms.load(Ordering::Relaxed)) > limit)
            .cloned()
            .collect();
        let mut closed = 0;
        for conn in idle_conns {
            // Lock order: read side, then write side. A reader at work is not idle.
            let busy = match conn.read.try_lock() {
                None => true,
                Some(read) => {
                    let write = conn.write.lock();
                    !write.out.is_empty() || write.base < read.next_seq
                }
            };
            if busy || conn.is_closed() {
                continue;
            }
            if self.log_state {
                tracing::trace!("<{} idle timeout, closing ({})", conn.fd(), conn.peer);
            }
            self.close(&conn);
            self.shared.idle_kicks.fetch_add(1, Ordering::Relaxed);
            closed += 1;
        }
        closed
    }

    fn lookup(&self, token: u64) -> Option<Arc<Conn>> {
        self.conns.read().get(&token).cloned()
    }

    fn ctx(&self, worker: usize, client_fd: i32) -> ExecContext<'_> {
        self.ctx_at(worker, client_fd, unix_now())
    }

    /// [`Runtime::ctx`] at the second `now` (a clock reading already taken).
    fn ctx_at(&self, worker: usize, client_fd: i32, now: UnixSecs) -> ExecContext<'_> {
        ExecContext {
            shared: &self.shared,
            counters: &self.shared.counters[worker],
            client_fd,
            now,
        }
    }

    /// Re-arms the connection for reading (and writing if output is pending);
    /// where registrations stay armed, changes the interest if it must.
    fn rearm(&self, conn: &Conn) {
        self.rearm_with(conn, false);
    }

    /// [`Runtime::rearm`]; `force`: an edge-triggered registration is changed even with
    /// its interest the same, so that what is ready now is reported (a reader handing the
    /// connection back to the event loop with input it did not read).
    fn rearm_with(&self, conn: &Conn, force: bool) {
        if conn.is_closed() {
            return;
        }
        // Lock order: `exec` before `write`, never both held.
        let backlogged = conn.exec.lock().reader_paused();
        let mut write = conn.write.lock();
        // Reading is paused while output is over the high-water mark: a client that
        // pipelines requests and does not read its replies must not keep the event loop
        // busy with its unread input (level-triggered `EPOLLIN` would fire at once).
        // The same holds while too many of its requests wait for other workers.
        let paused = backlogged || write.pending_len() > OUTPUT_HIGH_WATER;
        let mut interest = if write.read_closed || paused {
            0
        } else {
            READABLE
        };
        // Output to write, or held output released (or a backlog finished) far
        // enough that the reader may go on with buffered requests (EPOLLOUT
        // brings it back).
        let reader_may_resume = write.wake_reader && write.pending_len() <= OUTPUT_HIGH_WATER;
        let tls_output = conn
            .tls
            .as_ref()
            .is_some_and(|tls| tls.lock().wants_write());
        if !write.out.is_empty() || reader_may_resume || tls_output {
            interest |= WRITABLE;
        }
        match self.policy.registration() {
            Registration::OneShot => {
                bump(&self.rearms);
                let _ = conn.epoll.rearm(conn.fd(), conn.id, interest);
            }
            Registration::Armed if interest != write.armed_interest => {
                bump(&self.rearms);
                write.armed_interest = interest;
                let _ = conn.epoll.modify_armed(conn.fd(), conn.id, interest);
            }
            Registration::Armed => {}
            // Armed for reading alone, as before, and the socket read empty: the next
            // input's edge reports it. Any other interest is set again even if unchanged:
            // `EPOLLOUT` asked for here means "report now" (output to write, a reader to
            // bring back), which an edge already taken would not. A TLS session may leave
            // records in the socket after a short read: re-armed as one-shot would be.
            Registration::EdgeTriggered
                if !force
                    && interest == READABLE
                    && write.armed_interest == READABLE
                    && conn.tls.is_none() => {}
            Registration::EdgeTriggered => {
                bump(&self.rearms);
                write.armed_interest = interest;
                let _ = conn.epoll.modify_edge(conn.fd(), conn.id, interest);
            }
        }
    }

    /// Fills `seq`'s reply slot and writes whatever is now in order. With
    /// emulated service time, the worker is first held for the `charge`d
    /// cost; with emulated network time, the reply is held back (not the
    /// worker) and the network timer writes it when due.
    pub(crate) fn complete(&self, conn: &Arc<Conn>, worker: usize, done: Completion) {
        let Completion {
            seq,
            reply,
            mode,
            charge,
        } = done;
        if let (Some(charge), Some(emulator)) = (charge, self.service.get(worker)) {
            let mut batch = *conn.emulated_batch.lock();
            let (time, fixed) =
                emulator
                    .lock()
                    .draw_in_batch(charge.units, &mut batch, charge.quiet_meta);
            *conn.emulated_batch.lock() = batch;
            let deadline = charge.started + time;
            let late = Instant::now() > deadline;
            crate::emulate::sleep_until(deadline);
            self.holds.record(deadline, late, fixed);
        }
        let close = match &self.network {
            None => conn.write.lock().fill(seq, reply),
            Some(network) => {
                let mut write = conn.write.lock();
                let was_held = !write.held.is_empty();
                let now = Instant::now();
                let draws = &network.draws[worker % network.draws.len()];
                let close = write.fill_held(seq, reply, |len| {
                    let units = Units {
                        keys: 1,
                        bytes: len as u64,
                    };
                    Some(now + draws.lock().draw(units))
                });
                let due = if was_held { None } else { write.next_release() };
                drop(write);
                if let Some(due) = due {
                    let _ = network.timer.0.send((due, Arc::clone(conn)));
                }
                close
            }
        };
        if mode == FlushMode::Deferred && !close {
            // The reader flushes once after its whole batch.
            return;
        }
        let blocking = mode == FlushMode::Blocking;
        let pending = self.flush(conn, worker, blocking);
        if close && !pending {
            self.close(conn);
        } else if pending && blocking {
            // Gave up waiting on a slow client: let the event loop finish it.
            self.rearm(conn);
        }
    }

    /// Writes pending output. Returns true if some is still pending. A
    /// failed write closes the connection.
    fn flush(&self, conn: &Arc<Conn>, worker: usize, blocking: bool) -> bool {
        // Only a blocking flush waits, so only it reads the clock (once it has to wait).
        let mut deadline = None;
        let counters = &self.shared.counters[worker];
        loop {
            let mut write = conn.write.lock();
            let mut tls = conn.tls.as_ref().map(|tls| tls.lock());
            let outcome = match tls.as_deref_mut() {
                None => write_out(&conn.stream, &mut write.out, |n| count_written(counters, n)),
                Some(tls) => tls.flush(conn.fd(), &mut write.out, |n| count_written(counters, n)),
            };
            if outcome == WriteOutcome::Failed {
                write.out.clear();
                drop(tls);
                drop(write);
                self.close(conn);
                return false;
            }
            // Output of TLS's own (a handshake message) waits for the socket as well.
            let pending = !write.out.is_empty() || tls.is_some_and(|tls| tls.wants_write());
            drop(write);
            if !pending || !blocking || conn.is_closed() {
                return pending;
            }
            let now = Instant::now();
            let deadline = *deadline
                .get_or_insert_with(|| now + Duration::from_millis(LARGE_IO_TIMEOUT_MS as u64));
            if now >= deadline {
                return true;
            }
            if !wait_fd(conn.fd(), libc::POLLOUT, CLIENT_STALL_MS) {
                // The client stopped reading: the event loop finishes the
                // write when it can, and this thread serves others meanwhile.
                return true;
            }
        }
    }

    /// True when replies are held by an emulated network (the runtime then
    /// needs [`Runtime::run_network_timer`] on a thread of its own).
    pub fn emulates_network(&self) -> bool {
        self.network.is_some()
    }

    /// Body of the emulated network's timer thread: releases and writes
    /// each connection's held replies when they are due.
    pub fn run_network_timer(&self) {
        let Some(network) = &self.network else {
            return;
        };
        set_min_timer_slack();
        let idle = Duration::from_millis(crate::policies::IDLE_WAIT_MS as u64);
        let mut due: std::collections::BinaryHeap<Due> = std::collections::BinaryHeap::new();
        while !self.stopping() {
            let now = Instant::now();
            let wait = due.peek().map_or(idle, |next| {
                next.at.saturating_duration_since(now).min(idle)
            });
            match network.timer.1.recv_timeout(wait) {
                Ok((at, conn)) => due.push(Due { at, conn }),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            }
            while let Ok((at, conn)) = network.timer.1.try_recv() {
                due.push(Due { at, conn });
            }
            let now = Instant::now();
            while due.peek().is_some_and(|next| next.at <= now) {
                let Some(Due { conn, .. }) = due.pop() else {
                    break;
                };
                if let Some(at) = self.release_held(&conn, now) {
                    due.push(Due { at, conn });
                }
            }
        }
    }

    /// Moves `conn`'s due replies to its output and writes what the socket
    /// takes. Returns when its next held reply is due.
    fn release_held(&self, conn: &Arc<Conn>, now: Instant) -> Option<Instant> {
        if conn.is_closed() {
            return None;
        }
        let mut write = conn.write.lock();
        let next = write.release(now);
        let closing = write.closing();
        let resume = write.wake_reader && write.pending_len() <= OUTPUT_HIGH_WATER;
        drop(write);
        let pending = self.flush(conn, 0, false);
        if closing && !pending {
            self.close(conn);
            return None;
        }
        if pending || resume {
            self.rearm(conn);
        }
        next
    }

    /// Records a request's server-side latency in its class.
    pub(crate) fn record_latency(&self, worker: usize, large: bool, since: Arrival) {
        // Only a sampled request reads the clock for its latency.
        let micros = since
            .at
            .map(|at| at.elapsed().as_micros().min(u128::from(u64::MAX)) as u64);
        self.latency.record(worker, large, micros);
    }

    /// Clears the per-class latency histograms and counters (`stats reset`).
    pub fn reset_stats(&self) {
        self.latency.reset();
        self.holds.reset();
        self.policy.reset_stats();
    }

    /// Body of worker thread `worker`.
    pub fn worker_loop(&self, worker: usize) {
        if !self.service.is_empty() {
            set_min_timer_slack();
        }
        let mut tokens = Vec::with_capacity(16);
        while !self.shared.stopping() {
            self.policy.worker_step(self, worker, &mut tokens);
        }
    }

    /// One worker turn on worker `worker`'s home epoll, for a caller that
    /// drives the runtime without its threads (the profiler): waits up to
    /// `timeout_ms` and serves what is ready. True if it served something.
    pub(crate) fn serve_ready(&self, worker: usize, timeout_ms: i32) -> bool {
        let mut tokens = Vec::with_capacity(16);
        let index = worker % self.epolls.len();
        self.poll_and_serve(index, worker, &mut tokens, timeout_ms)
    }

    /// Serves the datagrams waiting on one UDP socket, then re-arms it.
    fn serve_udp(&self, epoll_index: usize, token: u64, worker: usize) {
        let Some(socket) = self.udp.get((token - UDP_TOKEN_BASE) as usize) else {
            return;
        };
        let ctx = self.ctx(worker, socket.as_raw_fd());
        crate::udp::serve(socket, &ctx, &self.limits);
        let _ = self.epolls[epoll_index].rearm(socket.as_raw_fd(), token, READABLE);
    }

    /// Runs a job handed to worker `worker`.
    pub(crate) fn run_job(&self, job: Job, worker: usize) {
        self.run_job_with(job, worker, FlushMode::NonBlocking);
    }

    /// `mode` says how an executed request's reply is written.
    fn run_job_with(&self, job: Job, worker: usize, mode: FlushMode) {
        match job {
            Job::Execute {
                conn,
                seq,
                request,
                frame,
                arrived_at,
                priority: _,
            } => {
                let started = Instant::now();
                let frame_bytes = frame.len();
                let ctx = self.ctx(worker, conn.fd());
                let declared = request.data_len();
                let keys = key_count(&request);
                let quiet = quiet_meta(&request);
                let mut out = conn.write.lock().take_spare();
                let _ = execute(request, &frame, &ctx, &mut out);
                if self.log_commands {
                    log_exchange(&conn, &frame, &mut out);
                }
                let size = declared.unwrap_or(out.len()) as u64;
                let large = size > self.policy.class_threshold();
                let charge = Charge::new(started, keys, wire_bytes(declared, &frame, &out))
                    .quiet_meta(quiet);
                self.complete(
                    &conn,
                    worker,
                    Completion {
                        seq,
                        reply: out,
                        mode,
                        charge: Some(charge),
                    },
                );
                self.record_latency(worker, large, arrived_at);
                self.finish(&conn, frame_bytes);
                if mode != FlushMode::Deferred && !conn.write.lock().out.is_empty() {
                    self.rearm(&conn);
                }
            }
            Job::Send {
                conn,
                seq,
                reply,
                units,
                arrived_at,
            } => {
                let charge = Charge {
                    units,
                    started: Instant::now(),
                    quiet_meta: false,
                };
                self.complete(
                    &conn,
                    worker,
                    Completion {
                        seq,
                        reply,
                        mode: FlushMode::Blocking,
                        charge: Some(charge),
                    },
                );
                self.record_latency(worker, true, arrived_at);
            }
            Job::Receive { conn } => {
                self.serve_conn(&conn, worker, true);
                if self.policy.registration() == Registration::EdgeTriggered {
                    // The small reader handed reading over with the connection owned;
                    // back to the event loop, with what came meanwhile reported now.
                    conn.owner.hand_back();
                    self.rearm_with(&conn, true);
                }
            }
            Job::Reject { conn, seq, error } => {
                let ctx = self.ctx(worker, conn.fd());
                self.reject(&conn, seq, &error, worker, &ctx, FlushMode::NonBlocking);
                self.finish(&conn, 0);
            }
        }
    }

    /// Serves a ready edge-triggered connection if this worker claims it
    /// ([`crate::epoll::ReadOwner`]): reads again while events come as it reads, and
    /// lets go unless it handed reading to a large worker (which hands it back).
    fn serve_owned(&self, conn: &Arc<Conn>, worker: usize) {
        if !conn.owner.claim() {
            return;
        }
        loop {
            if self.serve_conn(conn, worker, false) == Served::HandedOff || conn.owner.release() {
                return;
            }
        }
    }

    /// Reads and serves one ready connection. `receiving` is set when a large
    /// worker took the connection over to receive a large value.
    fn serve_conn(&self, conn: &Arc<Conn>, worker: usize, receiving: bool) -> Served {
        if conn.is_closed() {
            return Served::Done;
        }
        // Edge-triggered, the caller owns reading (`serve_owned`): another holder of the
        // read side only looks (`stats conns`, the idle check) and lets go at once.
        let owned = self.policy.registration() == Registration::EdgeTriggered;
        let Some(mut read) = (if receiving || owned {
            Some(conn.read.lock())
        } else {
            conn.read.try_lock()
        }) else {
            // Another thread is reading it; it re-arms when done.
            return Served::Done;
        };
        // Output left from before (or TLS's own) is written first; with none, the
        // write side is locked once, not once to try a write and again to clear the flag.
        let mut write = conn.write.lock();
        if !write.out.is_empty() || conn.tls.is_some() {
            drop(write);
            if self.flush(conn, worker, false) && conn.write.lock().out.len() > OUTPUT_HIGH_WATER {
                drop(read);
                self.rearm(conn);
                return Served::Done;
            }
            write = conn.write.lock();
        }
        if read.eof {
            drop(write);
            // Back for output the client had not read yet.
            self.end_of_input(conn, read, worker);
            return Served::Done;
        }
        // Whoever woke this reader (a finished backlog, released held
        // output) has done so; it is set again if the reader stops again.
        write.wake_reader = false;
        drop(write);
        loop {
            let (eof, wall_clock) = match self.read_some(conn, &mut read, worker, receiving) {
                Ok(outcome) => outcome,
                Err(_) => {
                    drop(read);
                    self.close(conn);
                    return Served::Done;
                }
            };
            // The read's own clock reading gives the second requests execute at.
            let ctx = self.ctx_at(worker, conn.fd(), wall_clock.unwrap_or_else(unix_now));
            match self.process(conn, &mut read, worker, &ctx, receiving) {
                Next::HandedOff => return Served::HandedOff, // the large worker owns reading now
                Next::Closed => return Served::Done,
                // Re-armed without reading interest below; `finish` brings a reader back.
                Next::Backlogged => break,
                Next::OutputFull => {
                    // Buffered requests wait for output to drain; no socket
                    // event will announce them, so come back here ourselves.
                    let pending = self.flush(conn, worker, false);
                    let mut write = conn.write.lock();
                    if pending && write.out.len() > OUTPUT_HIGH_WATER {
                        // Re-armed with EPOLLOUT below. The flush after the loop may yet
                        // drain every reply, and the requests still buffered here would then
                        // wait for the client's next bytes (a client that sent its whole batch
                        // would wait for ever): the reader is brought back by EPOLLOUT either way.
                        write.wake_reader = true;
                        break;
                    }
                    if write.pending_len() > OUTPUT_HIGH_WATER {
                        // Held by the emulated network: its timer brings a
                        // reader back once enough is released.
                        write.wake_reader = true;
                        break;
                    }
                    continue;
                }
                Next::Continue => {}
            }
            if conn.is_closed() {
                return Served::Done;
            }
            if eof {
                self.end_of_input(conn, read, worker);
                return Served::Done;
            }
            if read.input.len() >= self.max_buffer {
                drop(read);
                self.close(conn);
                return Served::Done;
            }
            // Keep going while reads stopped early to process; stop when the
            // socket is drained or output must drain first (locked only to ask that).
            if !read.more_pending || conn.write.lock().out.len() > OUTPUT_HIGH_WATER {
                break;
            }
            self.flush(conn, worker, false);
        }
        // Level-triggered one-shot: re-arming reports anything still unread.
        drop(read);
        self.flush(conn, worker, false);
        self.rearm(conn);
        Served::Done
    }

    /// The client closed its side. A half-closed client may still read: its
    /// replies are written, then the connection closes. Nothing here waits for
    /// the client: output it does not take waits for `EPOLLOUT`, so one client
    /// that stops reading cannot hold up the thread serving the others.
    fn end_of_input(
        &self,
        conn: &Arc<Conn>,
        mut read: parking_lot::MutexGuard<'_, ReadSide>,
        worker: usize,
    ) {
        read.eof = true;
        let last = read.next_seq;
        let mut write = conn.write.lock();
        write.read_closed = true;
        if write.base < last || !write.held.is_empty() {
            // Whoever completes (or releases) the last reply closes. Meanwhile
            // the closed side must not keep reporting itself readable.
            write.close_after_seq = Some(last.saturating_sub(1));
            drop(write);
            drop(read);
            self.rearm(conn);
            return;
        }
        drop(write);
        drop(read);
        if self.flush(conn, worker, false) {
            self.rearm(conn);
        } else {
            self.close(conn);
        }
    }

    /// Reads what the socket has. Returns true on EOF, and the Unix second of the
    /// wall clock read to convert the latest read's kernel receive stamp (`None` when
    /// no stamped input was read). A large receiver waits for the data of the request
    /// it took over.
    fn read_some(
        &self,
        conn: &Conn,
        read: &mut ReadSide,
        worker: usize,
        receiving: bool,
    ) -> io::Result<(bool, Option<UnixSecs>)> {
        // Only a large receiver waits, so only it reads the clock.
        let deadline =
            receiving.then(|| Instant::now() + Duration::from_millis(LARGE_IO_TIMEOUT_MS as u64));
        read.more_pending = false;
        let mut wall_clock = None;
        loop {
            if read.input.len() >= self.max_buffer {
                return Ok((false, wall_clock));
            }
            let room = {
                let default_room = (self.max_buffer - read.input.len()).min(READ_CHUNK);
                if self.shared.auth.is_some() && !read.auth.authenticated {
                    // Not requests yet: what is buffered may be incomplete
                    // for authentication even where it holds a whole line.
                    default_room
                } else {
                    crate::buffers::next_read_room(&mut read.input, default_room)
                }
            };
            if room == 0 {
                // Complete requests are buffered: process them first.
                read.more_pending = true;
                return Ok((false, wall_clock));
            }
            read.input.reserve(room);
            let spare = &mut read.input.spare_capacity_mut()[..room];
            // SAFETY: a socket read only writes into the buffer; we keep
            // exactly the `n` bytes it reports.
            let target = unsafe {
                std::slice::from_raw_parts_mut(spare.as_mut_ptr().cast::<u8>(), spare.len())
            };
            let was_empty = read.input.is_empty();
            let sampled = read.sampler.next_read(self.sample_every);
            let received = match &conn.tls {
                // Most reads take no stamp: a plain recv (crate::rxtime).
                None if !sampled => crate::rxtime::recv_plain(conn.fd(), target).map(|n| (n, None)),
                None => crate::rxtime::recv_with_arrival(conn.fd(), target),
                Some(tls) => tls.lock().recv(conn.fd(), target, &self.shared),
            };
            match received {
                Ok((0, _)) => return Ok((true, wall_clock)),
                Ok((n, arrival)) => {
                    let arrived_at = if sampled {
                        let (arrived_at, now_ns) = Arrival::sampled(arrival);
                        if let Some(now_ns) = now_ns {
                            wall_clock = Some(UnixSecs(now_ns / 1_000_000_000));
                        }
                        arrived_at
                    } else {
                        Arrival::UNSAMPLED
                    };
                    read.latest_at = Some(arrived_at);
                    if was_empty || read.arrived_at.is_none() {
                        read.arrived_at = Some(arrived_at);
                    }
                    let len = read.input.len();
                    // SAFETY: `read` initialised these `n` bytes.
                    unsafe { read.input.set_len(len + n) };
                    count_read(&self.shared.counters[worker], n);
                    if read.swallow > 0 {
                        read.swallow_buffered();
                    }
                    // A small reader stops here to classify what it has.
                    if !receiving && self.policy.wants_large_receive(read) {
                        return Ok((false, wall_clock));
                    }
                    // A read that did not fill its room emptied the socket: another
                    // would only say EAGAIN (one system call per request saved; what
                    // arrives meanwhile is reported when the connection is re-armed).
                    if !receiving && n < room {
                        return Ok((false, wall_clock));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Wait for the rest while it keeps coming; a client that
                    // stalls mid-value is left to the event loop.
                    if receiving
                        && receive_incomplete(read)
                        && deadline.is_some_and(|deadline| Instant::now() < deadline)
                        && wait_fd(conn.fd(), libc::POLLIN, CLIENT_STALL_MS)
                    {
                        continue;
                    }
                    return Ok((false, wall_clock));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Parses and places every complete request in the buffer.
    fn process(
        &self,
        conn: &Arc<Conn>,
        read: &mut ReadSide,
        worker: usize,
        ctx: &ExecContext<'_>,
        receiving: bool,
    ) -> Next {
        loop {
            if read.swallow > 0 && !read.swallow_buffered() {
                return Next::Continue;
            }
            if read.input.is_empty() && self.network.is_none() {
                // Nothing left to parse (the usual end of a batch): no lock taken to ask
                // about output, which the caller checks once after the batch. Output held
                // by an emulated network is not in that check, so then the reader asks
                // here below and stops with `wake_reader` set.
                return Next::Continue;
            }
            if conn.write.lock().pending_len() > OUTPUT_HIGH_WATER {
                return Next::OutputFull;
            }
            if let Some(auth) = self.shared.auth.as_ref() {
                if !read.auth.authenticated {
                    match self.unauthenticated(conn, read, worker, auth) {
                        Some(next) => return next,
                        None => continue,
                    }
                }
            }
            if !receiving && self.policy.wants_large_receive(read) {
                // Replies already queued must not wait for the large receive.
                self.flush(conn, worker, false);
                self.policy.hand_off_receive(self, conn);
                return Next::HandedOff;
            }
            if read.input.is_empty() {
                return Next::Continue;
            }
            let arrived_at = read.arrived_at.unwrap_or_default();
            // Splits a complete request's frame off the input; its keys are slices of it.
            let ReadSide { input, scratch, .. } = &mut *read;
            let parsed = parse_request_frame(input, &self.limits, scratch);
            if !matches!(parsed, Parsed::Incomplete) {
                // The next request starts in bytes of the latest read.
                read.arrived_at = read.latest_at;
                conn.touch(self.clock_ms());
            }
            match parsed {
                Parsed::Incomplete => return Next::Continue,
                Parsed::Invalid { error, consumed } => {
                    if self.log_commands {
                        let end = consumed.min(read.input.len());
                        crate::logging::log_command(conn.fd(), &read.input[..end]);
                    }
                    read.input.advance(consumed.min(read.input.len()));
                    if error.closes_connection() {
                        read.input.clear();
                        self.close(conn);
                        return Next::Closed;
                    }
                    read.swallow = error.swallow();
                    let seq = read.take_seq();
                    match self.policy.place(None, worker) {
                        Placement::Inline => {
                            self.reject(conn, seq, &error, worker, ctx, FlushMode::Deferred)
                        }
                        placement => {
                            let job = Job::Reject {
                                conn: Arc::clone(conn),
                                seq,
                                error,
                            };
                            if self.submit(conn, placement, job, worker, 0) {
                                return Next::Backlogged;
                            }
                        }
                    }
                }
                Parsed::Complete { value, .. } => {
                    let frame = read.scratch.take_frame();
                    let seq = read.take_seq();
                    // `quit` closes after its turn; `watch` leaves for the logger thread then.
                    // With `-W` a `watch` is refused in place and the connection stays.
                    let value = match value {
                        // The log stream is written by the logger thread in plain text.
                        Request::Watch { .. } if conn.tls.is_some() => Request::Admin {
                            reply: b"CLIENT_ERROR watch is not served over TLS",
                            noreply: false,
                        },
                        value => value,
                    };
                    let watching = matches!(value, Request::Watch { .. })
                        && !ctx.shared.config.server.disable_watch;
                    let is_quit = matches!(value, Request::Quit) || watching;
                    if let (true, Request::Watch { types }) = (watching, &value) {
                        *conn.watch.lock() = Some(*types);
                    }
                    if is_quit {
                        conn.write.lock().close_after_seq = Some(seq);
                    }
                    let request = Parsed1 {
                        seq,
                        request: value,
                        frame,
                        arrived_at,
                    };
                    let backlogged = self.route(conn, request, worker, ctx, receiving);
                    if is_quit {
                        return Next::Closed;
                    }
                    if backlogged {
                        return Next::Backlogged;
                    }
                }
            }
        }
    }

    /// Serves the next exchange of a connection that has not authenticated
    /// (`-Y`): nothing is dispatched, the reader answers in place. `None`:
    /// go on with the rest of the input (authenticated or not).
    fn unauthenticated(
        &self,
        conn: &Arc<Conn>,
        read: &mut ReadSide,
        worker: usize,
        auth: &crate::auth::AuthFile,
    ) -> Option<Next> {
        let ReadSide {
            input, auth: state, ..
        } = read;
        match state.step(input, |user, password| auth.check(user, password)) {
            Step::Incomplete => Some(Next::Continue),
            Step::Close => {
                read.input.clear();
                self.close(conn);
                Some(Next::Closed)
            }
            Step::Consumed(bytes) => {
                read.input.advance(bytes);
                None
            }
            Step::Answered { consumed, outcome } => {
                read.input.advance(consumed);
                read.arrived_at = read.latest_at;
                conn.touch(self.clock_ms());
                let counters = &self.shared.counters[worker];
                if outcome.is_attempt() {
                    bump(&counters.auth_cmds);
                }
                if outcome == Outcome::Failure {
                    bump(&counters.auth_errors);
                }
                let seq = read.take_seq();
                let mut out = ReplyBuf::new();
                out.push(outcome.reply());
                self.complete(
                    conn,
                    worker,
                    Completion {
                        seq,
                        reply: out,
                        mode: FlushMode::Deferred,
                        charge: None,
                    },
                );
                None
            }
        }
    }

    /// Runs or places one parsed request. Returns true when the connection
    /// has too many requests outstanding and its reader must stop.
    fn route(
        &self,
        conn: &Arc<Conn>,
        parsed: Parsed1,
        worker: usize,
        ctx: &ExecContext<'_>,
        receiving: bool,
    ) -> bool {
        let Parsed1 {
            seq,
            request,
            frame,
            arrived_at,
        } = parsed;
        let placement = self
            .policy
            .place(request.single_key().map(|k| k.as_ref()), worker);
        if placement != Placement::Inline {
            let bytes = frame.len();
            let job = Job::Execute {
                conn: Arc::clone(conn),
                seq,
                priority: request.priority().unwrap_or_default(),
                request,
                frame,
                arrived_at,
            };
            return self.submit(conn, placement, job, worker, bytes);
        }
        let declared = request.data_len();
        let retrieval = matches!(
            request,
            Request::Get { .. } | Request::GetAndTouch { .. } | Request::MetaGet { .. }
        );
        // The start only matters to emulated service time (`Charge`): without it, the
        // arrival (or the runtime's start) stands in and the clock is not read again.
        let started = if self.service.is_empty() {
            arrived_at.at.unwrap_or(self.started)
        } else {
            Instant::now()
        };
        let keys = key_count(&request);
        let quiet = quiet_meta(&request);
        let mut out = conn.write.lock().take_spare();
        let _ = execute(request, &frame, ctx, &mut out);
        if self.log_commands {
            log_exchange(conn, &frame, &mut out);
        }
        let size = declared.unwrap_or(out.len()) as u64;
        let executed = Executed {
            size,
            accessed: declared.is_some() || (retrieval && size > MISS_REPLY_MAX),
            storage: declared.is_some(),
            charge: Charge::new(started, keys, wire_bytes(declared, &frame, &out))
                .quiet_meta(quiet),
        };
        let done = InlineReply {
            seq,
            reply: out,
            executed,
            receiving,
            arrived_at,
            worker,
        };
        self.policy.finish_inline(self, conn, done);

        false
    }

    /// Releases `job` to the worker `placement` names now, or queues it
    /// behind the connection's earlier requests ([`crate::session::ExecQueue`]
    /// says which). A request for a worker that is the reader itself runs in
    /// place when nothing else of the connection is outstanding. Returns true
    /// when the connection's backlog reached its bound: the reader must stop.
    fn submit(
        &self,
        conn: &Arc<Conn>,
        placement: Placement,
        job: Job,
        reader: usize,
        bytes: usize,
    ) -> bool {
        let (target, barrier) = match placement {
            Placement::Worker { target, barrier } => (target, barrier),
            Placement::AnyWorker | Placement::Inline => (reader, true),
        };
        let (admitted, full) = {
            let mut exec = conn.exec.lock();
            let admitted = exec.submit(PendingJob { target, job }, barrier, bytes);
            (admitted, exec.pause_if_full())
        };
        let Admit::Run { job, alone } = admitted else {
            return full;
        };
        let here = matches!(placement, Placement::Worker { .. }) && target == reader && alone;
        if here {
            self.run_job_with(job.job, reader, FlushMode::Deferred);
        } else {
            self.policy.release(self, job.target, job.job);
        }
        full
    }

    /// Marks one of the connection's requests (of `bytes` frame bytes)
    /// finished and releases what may run now; brings back a reader that
    /// stopped on the backlog once it is down to the resume mark.
    fn finish(&self, conn: &Arc<Conn>, bytes: usize) {
        let (ready, resume) = {
            let mut exec = conn.exec.lock();
            let ready = exec.finish(bytes);
            (ready, exec.take_resume())
        };
        for next in ready {
            self.policy.release(self, next.target, next.job);
        }
        if resume {
            // Buffered requests may wait in the reader's input with nothing
            // left in the socket to announce them: EPOLLOUT brings it back.
            conn.write.lock().wake_reader = true;
            self.rearm(conn);
        }
    }

    /// Answers invalid input (and drops a stale value like memcached does).
    fn reject(
        &self,
        conn: &Arc<Conn>,
        seq: u64,
        error: &ProtoError,
        worker: usize,
        ctx: &ExecContext<'_>,
        mode: FlushMode,
    ) {
        unlink_too_large(error, ctx);
        let mut out = ReplyBuf::new();
        if matches!(error, ProtoError::ShutdownDisabled) && ctx.shared.config.server.enable_shutdown
        {
            // `-A`: memcached answers `shutdown` by raising SIGINT, stopping as on a signal.
            // SAFETY: raise only queues a signal for this process.
            unsafe {
                libc::raise(libc::SIGINT);
            }
        } else {
            reply::error(&mut out, error);
        }
        if self.log_commands {
            log_exchange(conn, &[], &mut out);
        }
        self.complete(
            conn,
            worker,
            Completion {
                seq,
                reply: out,
                mode,
                charge: None,
            },
        );
    }

    /// `stats sizeaware` pairs.
    pub fn stats(&self) -> Vec<(String, String)> {
        let state = self.policy.stats(self.workers);
        let mut out = vec![
            (
                "dispatch".to_string(),
                self.policy.kind().name().to_string(),
            ),
            ("workers".into(), self.workers.to_string()),
            ("small_workers".into(), state.small_workers.to_string()),
            (
                "large_workers".into(),
                (self.workers.saturating_sub(state.small_workers)).to_string(),
            ),
            (
                "threshold_bytes".into(),
                state
                    .threshold
                    .map_or_else(|| "none".to_string(), |t| t.to_string()),
            ),
            ("handoffs".into(), state.handoffs.to_string()),
            ("steals".into(), state.steals.to_string()),
            ("epochs".into(), state.epochs.to_string()),
            (
                "epoll_rearms".into(),
                self.rearms.load(Ordering::Relaxed).to_string(),
            ),
        ];
        let latency = self.latency.snapshot();
        for (name, h, count) in [
            ("small", &latency.small, latency.small_count),
            ("large", &latency.large, latency.large_count),
        ] {
            out.push((format!("{name}_requests"), count.to_string()));
            for (label, q) in [("p50", 0.5), ("p99", 0.99), ("p999", 0.999)] {
                out.push((
                    format!("{name}_{label}_us"),
                    h.value_at_quantile(q).to_string(),
                ));
            }
        }
        for (name, value) in state.decision {
            out.push((name.to_string(), value));
        }
        if !self.service.is_empty() {
            out.extend(self.holds.stats());
        }
        out
    }
}

impl WorkerHost for Runtime {
    fn stopping(&self) -> bool {
        Runtime::stopping(self)
    }

    fn poll_and_serve(
        &self,
        index: usize,
        worker: usize,
        tokens: &mut Vec<u64>,
        timeout_ms: i32,
    ) -> bool {
        let max = self.policy.events_per_wait();
        if self.epolls[index].wait(tokens, max, timeout_ms).is_err() {
            return false;
        }
        self.policy.took_events(index, worker, tokens.len());
        let mut served = false;
        for &token in tokens.iter() {
            if token == WAKE_TOKEN {
                self.policy.on_wake(self, index, worker);
                continue;
            }
            if token >= UDP_TOKEN_BASE {
                self.serve_udp(index, token, worker);
                served = true;
                continue;
            }
            if let Some(conn) = self.lookup(token) {
                if self.policy.registration() == Registration::EdgeTriggered {
                    self.serve_owned(&conn, worker);
                } else {
                    self.serve_conn(&conn, worker, false);
                }
                served = true;
            }
        }
        served
    }

    fn run_job(&self, job: Job, worker: usize) {
        Runtime::run_job(self, job, worker)
    }

    fn complete(&self, conn: &Arc<Conn>, worker: usize, done: Completion) {
        Runtime::complete(self, conn, worker, done)
    }

    fn record_latency(&self, worker: usize, large: bool, since: Arrival) {
        Runtime::record_latency(self, worker, large, since)
    }
}

impl DispatchView for Runtime {
    fn stats(&self) -> Vec<(String, String)> {
        Runtime::stats(self)
    }

    fn histograms(&self) -> Vec<(String, hdrhistogram::Histogram<u64>)> {
        let latency = self.latency.snapshot();
        let mut out = vec![
            ("small_latency_us".to_string(), latency.small),
            ("large_latency_us".to_string(), latency.large),
        ];
        if !self.service.is_empty() {
            out.push((
                "emulate_overshoot_ns".to_string(),
                self.holds.overshoot_ns.lock().clone(),
            ));
        }
        out
    }

    fn reset_stats(&self) {
        Runtime::reset_stats(self);
    }

    fn connections(&self) -> Vec<crate::shared::ConnSummary> {
        let now = self.clock_ms();
        let mut list: Vec<crate::shared::ConnSummary> = self
            .conns
            .read()
            .values()
            .filter(|conn| !conn.is_closed())
            .map(|conn| {
                // Lock order: read side, then write side; never waits.
                // A request read but not yet answered (under late binding the reader has
                // moved on while a worker runs it) counts as being parsed, as the reading.
                let state = match conn.read.try_lock() {
                    None => "conn_parse_cmd",
                    Some(read) => match conn.write.try_lock() {
                        Some(write) if write.base < read.next_seq => "conn_parse_cmd",
                        Some(write) if write.out.is_empty() => "conn_waiting",
                        _ => "conn_mwrite",
                    },
                };
                let listen_addr = conn
                    .stream
                    .local_addr()
                    .map_or_else(|_| "unknown".into(), |a| crate::shared::tcp_name(&a));
                crate::shared::ConnSummary {
                    fd: conn.fd(),
                    addr: crate::shared::tcp_name(&conn.peer),
                    listen_addr,
                    state,
                    secs_since_last_cmd: now
                        .saturating_sub(conn.last_command_ms.load(Ordering::Relaxed))
                        / 1000,
                }
            })
            .collect();
        list.sort_by_key(|conn| conn.fd);
        list
    }
}

/// A connection whose first held reply is due at `at` (earliest first).
struct Due {
    at: Instant,
    conn: Arc<Conn>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Due) -> std::cmp::Ordering {
        other.at.cmp(&self.at)
    }
}

/// A parsed request on its way to a worker.
struct Parsed1 {
    seq: u64,
    request: Request,
    frame: Bytes,
    arrived_at: Arrival,
}

/// `-vv`: logs a command (its frame's first line) and the reply composed for it.
fn log_exchange(conn: &Conn, frame: &[u8], out: &mut ReplyBuf) {
    let mut reply = Vec::with_capacity(out.len());
    for chunk in out.chunks() {
        reply.extend_from_slice(chunk);
    }
    crate::logging::log_exchange(conn.fd(), frame, &reply);
}

fn receive_incomplete(read: &ReadSide) -> bool {
    read.swallow > 0
        || tailtrim_proto::request::declared_total(&read.input)
            .is_some_and(|total| total > read.input.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that takes `take` bytes per write, then reports `then`.
    struct Sink {
        got: Vec<u8>,
        budget: usize,
        zero: bool,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.budget == 0 {
                return if self.zero {
                    Ok(0)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            }
            let n = buf.len().min(self.budget);
            self.budget -= n;
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn queued(text: &[u8]) -> ReplyBuf {
        let mut out = ReplyBuf::new();
        out.push(text);
        out
    }

    #[test]
    fn a_write_that_takes_nothing_fails_the_connection() {
        let mut out = queued(b"VALUE k 0 1\r\nx\r\nEND\r\n");
        let mut sink = Sink {
            got: Vec::new(),
            budget: 4,
            zero: true,
        };
        let mut total = 0;
        assert_eq!(
            write_out(&mut sink, &mut out, |n| total += n),
            WriteOutcome::Failed
        );
        assert_eq!(total, 4);
    }

    /// Records which write each call was.
    #[derive(Default)]
    struct Calls {
        plain: usize,
        vectored: usize,
    }

    impl Write for Calls {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.plain += 1;
            Ok(buf.len())
        }

        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.vectored += 1;
            Ok(bufs.iter().map(|b| b.len()).sum())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn one_piece_goes_by_a_plain_write_several_by_one_vectored_write() {
        let mut calls = Calls::default();
        let mut out = queued(b"STORED\r\n");
        assert_eq!(write_out(&mut calls, &mut out, |_| {}), WriteOutcome::Done);
        assert_eq!((calls.plain, calls.vectored), (1, 0));
        // A large value goes by reference: header, value and trailer are three pieces.
        let mut out = queued(b"VALUE k 0 4096\r\n");
        out.push_value(&Bytes::from(vec![
            b'x';
            tailtrim_proto::reply::ZERO_COPY_THRESHOLD
        ]));
        out.push(b"\r\nEND\r\n");
        assert_eq!(write_out(&mut calls, &mut out, |_| {}), WriteOutcome::Done);
        assert_eq!((calls.plain, calls.vectored), (1, 1));
    }

    #[test]
    fn a_full_socket_keeps_the_rest_for_later() {
        let mut out = queued(b"STORED\r\n");
        let mut sink = Sink {
            got: Vec::new(),
            budget: 3,
            zero: false,
        };
        assert_eq!(
            write_out(&mut sink, &mut out, |_| {}),
            WriteOutcome::WouldBlock
        );
        assert_eq!(out.len(), 5);
        sink.budget = 100;
        assert_eq!(write_out(&mut sink, &mut out, |_| {}), WriteOutcome::Done);
        assert_eq!(sink.got, b"STORED\r\n");
    }
}
