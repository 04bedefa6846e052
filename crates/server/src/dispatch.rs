//! The dispatch runtime: size-aware sharding (Minos) and its three baselines
//! on one connection model.
//!
//! ```text
//!  acceptor ─► adopt(conn) ─► registered EPOLLONESHOT in an epoll:
//!     size-aware / late-binding: one shared epoll     early-binding / stealing: one per worker
//!
//!  size-aware:    small workers ── epoll_wait(shared) ─► read+parse ─► GET: lookup; reply ≤ T → send
//!                                                      │               reply > T → LargeJob::Send ─┐
//!                                                      └─ SET declared > T, body pending → LargeJob::Receive
//!                 large workers ◄──────────────── MPMC queue ◄──────────────────────────────────┘
//!                 controller thread: every epoch merges size histograms → threshold, split
//!  early-binding: home worker reads+parses; request runs on worker hash(key) % n (job queue + eventfd)
//!  stealing:      each worker serves its own epoll; an idle one takes ready connections from others' epolls
//!  late-binding:  dispatcher thread reads+parses everything; idle workers take requests from one queue
//! ```
//!
//! Replies of one connection are sequenced: the reader numbers requests as it
//! parses them, whoever executes a request completes its slot, and output is
//! written strictly in sequence, so pipelined small and large requests on one
//! connection always get their replies in order.

use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};
use tailtrim_policy::sizeaware::{
    Epoch, SizeAwareConfig, SizeAwareController, SizeHistogram, SizeWindow,
};
use tailtrim_proto::reply::{self, ReplyBuf};
use tailtrim_proto::request::declared_total;
use tailtrim_proto::{parse_request, Limits, Parsed, ProtoError, Request};

use crate::config::DispatchPolicy;
use crate::epoll::{wait_fd, Epoll, EventFd, READABLE, WRITABLE};
use crate::exec::{count_read, count_written, execute, ExecContext};
use crate::shared::{unix_now, Shared};
use crate::stats::bump;

/// Stop reading a connection while this much output is pending.
const OUTPUT_HIGH_WATER: usize = 4 * 1024 * 1024;
/// Bytes per `read`.
const READ_CHUNK: usize = 64 * 1024;
/// Token of a worker's job eventfd in its epoll.
const JOB_TOKEN: u64 = u64::MAX;
/// How long a blocked thread sleeps before re-checking roles and shutdown.
const IDLE_WAIT_MS: i32 = 5;
/// Longest a large worker waits on one slow client before giving the rest
/// of the output back to the event loop.
const LARGE_IO_TIMEOUT_MS: i32 = 2000;

/// A connection shared by the threads that read it and complete its replies.
pub struct Conn {
    id: u64,
    stream: TcpStream,
    epoll: Arc<Epoll>,
    read: Mutex<ReadSide>,
    write: Mutex<WriteSide>,
    exec: Mutex<ExecQueue>,
    closed: AtomicBool,
}

/// Execution order of one connection's requests when they run on other
/// workers (early and late binding).
///
/// Late binding runs them one at a time (any idle worker may take the next,
/// so two requests for one key could otherwise race). Early binding lets
/// single-key requests run side by side on their keys' workers: requests for
/// one key go to one worker's FIFO, so they still execute in order, and
/// replies are sequenced anyway. Everything else (multi-key gets, keyless
/// commands, error replies) is a *barrier*: it waits for every earlier
/// request and runs alone.
#[derive(Default)]
struct ExecQueue {
    /// Requests released to a worker and not yet finished.
    in_flight: usize,
    /// The request in flight is a barrier.
    barrier: bool,
    pending: VecDeque<PendingJob>,
}

struct PendingJob {
    target: usize,
    job: Job,
    barrier: bool,
}

#[derive(Default)]
struct ReadSide {
    input: BytesMut,
    /// The last read stopped to let complete requests be processed first.
    more_pending: bool,
    swallow: usize,
    next_seq: u64,
    eof: bool,
    /// Kernel receive time (realtime ns) of the request at the front of
    /// `input`: the read that brought its first bytes.
    arrived_ns: u64,
    /// Kernel receive time of the latest read: the requests after the front
    /// one came with it (or earlier, if reads stopped to process: then this
    /// under-reports their wait).
    latest_ns: u64,
}

#[derive(Default)]
struct WriteSide {
    base: u64,
    slots: VecDeque<Option<ReplyBuf>>,
    out: ReplyBuf,
    close_after_seq: Option<u64>,
}

impl Conn {
    fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// A unit of work handed between threads.
enum Job {
    /// Execute a parsed request (early- and late-binding).
    Execute {
        conn: Arc<Conn>,
        seq: u64,
        request: Request,
        frame: Bytes,
        arrived_at: Instant,
    },
    /// Send an already composed large reply (size-aware).
    Send {
        conn: Arc<Conn>,
        seq: u64,
        reply: ReplyBuf,
        arrived_at: Instant,
    },
    /// Receive the rest of a large value and keep reading the connection (size-aware).
    Receive { conn: Arc<Conn> },
    /// Reply to invalid input, in order with the connection's other requests.
    Reject {
        conn: Arc<Conn>,
        seq: u64,
        error: ProtoError,
    },
}

/// Size-aware statistics and the live decision.
#[derive(Default)]
pub struct SizeAwareState {
    /// Current threshold in bytes (reply size for GETs, value size for SETs).
    pub threshold: AtomicU64,
    /// Current number of small workers (worker ids below it are small).
    pub small_workers: AtomicUsize,
    /// Requests handed from small to large workers.
    pub handoffs: AtomicU64,
    /// Requests served as small.
    pub small_requests: AtomicU64,
    /// Requests served as large.
    pub large_requests: AtomicU64,
    /// Epochs the controller ran.
    pub epochs: AtomicU64,
    /// The last decision, rendered for `stats sizeaware`.
    pub last_decision: Mutex<Vec<(&'static str, String)>>,
}

/// Per-class server-side latency (µs), recorded from the kernel's receipt of
/// the request's bytes ([`crate::rxtime`]) to its reply queued for writing.
pub struct ClassLatency {
    /// Small requests.
    pub small: Mutex<hdrhistogram::Histogram<u64>>,
    /// Large requests.
    pub large: Mutex<hdrhistogram::Histogram<u64>>,
}

fn new_histogram() -> Mutex<hdrhistogram::Histogram<u64>> {
    Mutex::new(
        hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 3)
            .unwrap_or_else(|_| hdrhistogram::Histogram::new(3).unwrap_or_else(|_| unreachable!())),
    )
}

/// The dispatch runtime shared by its threads.
pub struct Runtime {
    shared: Arc<Shared>,
    policy: DispatchPolicy,
    workers: usize,
    limits: Limits,
    max_buffer: usize,
    /// One epoll per worker (early-binding, stealing) or one shared (others).
    epolls: Vec<Arc<Epoll>>,
    conns: RwLock<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    next_home: AtomicUsize,
    /// Per-worker job queues (early-binding) with their eventfds.
    worker_jobs: Vec<(Sender<Job>, Receiver<Job>, EventFd)>,
    /// Shared job queue (late-binding requests, size-aware large jobs).
    queue: (Sender<Job>, Receiver<Job>),
    /// Size histograms recorded by readers since the last epoch, per worker.
    size_samples: Vec<Mutex<SizeHistogram>>,
    /// Live size-aware decision and counters.
    pub sizeaware: SizeAwareState,
    /// Server-side latency per class.
    pub latency: ClassLatency,
    /// Connections taken from another worker's epoll (stealing).
    pub steals: AtomicU64,
    fixed_threshold: Option<u64>,
    /// UDP sockets, one per worker, registered one-shot like connections.
    udp: Vec<mio::net::UdpSocket>,
}

/// Longest reply a retrieval that found nothing sends (`END\r\n`).
const MISS_REPLY_MAX: u64 = 5;

/// Class boundary for latency statistics of policies without a threshold.
const STATS_CLASS_THRESHOLD: u64 = 16 * 1024;

/// Tokens at and above this value name UDP sockets (index = token − base).
const UDP_TOKEN_BASE: u64 = u64::MAX - 1 - 4096;

/// Options of the dispatch runtime.
#[derive(Debug, Clone, Copy, Default)]
pub struct DispatchOptions {
    /// Fixed size threshold in bytes (size-aware); `None` learns it.
    pub fixed_threshold: Option<u64>,
    /// Fixed number of small workers (size-aware); `None` learns it.
    pub fixed_small_workers: Option<usize>,
    /// Percentile of accessed sizes that sets the threshold.
    pub percentile: Option<f64>,
    /// Controller epoch in milliseconds.
    pub epoch_ms: Option<u64>,
}

impl Runtime {
    /// Builds the runtime (no threads yet).
    pub fn new(
        shared: Arc<Shared>,
        options: DispatchOptions,
        udp: Vec<mio::net::UdpSocket>,
    ) -> io::Result<Arc<Runtime>> {
        let config = &shared.config;
        let workers = config.workers.threads;
        let policy = config.workers.dispatch;
        let per_worker = matches!(
            policy,
            DispatchPolicy::EarlyBinding | DispatchPolicy::Stealing
        );
        let epoll_count = if per_worker { workers } else { 1 };
        let epolls = (0..epoll_count)
            .map(|_| Epoll::new().map(Arc::new))
            .collect::<io::Result<Vec<_>>>()?;
        let mut worker_jobs = Vec::new();
        if policy == DispatchPolicy::EarlyBinding {
            for epoll in &epolls {
                let (tx, rx) = crossbeam_channel::unbounded();
                let event = EventFd::new()?;
                epoll.add_persistent(event.raw(), JOB_TOKEN)?;
                worker_jobs.push((tx, rx, event));
            }
        }
        let small = options
            .fixed_small_workers
            .unwrap_or(workers.saturating_sub(1).max(1))
            .clamp(1, workers);
        let runtime = Runtime {
            limits: Limits {
                item_size_max: config.storage.item_size_max as usize,
            },
            max_buffer: config.server.max_connection_buffer,
            workers,
            policy,
            epolls,
            conns: RwLock::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            next_home: AtomicUsize::new(0),
            worker_jobs,
            queue: crossbeam_channel::unbounded(),
            size_samples: (0..workers)
                .map(|_| Mutex::new(SizeHistogram::new()))
                .collect(),
            sizeaware: SizeAwareState::default(),
            latency: ClassLatency {
                small: new_histogram(),
                large: new_histogram(),
            },
            steals: AtomicU64::new(0),
            fixed_threshold: options.fixed_threshold,
            udp,
            shared,
        };
        for (index, socket) in runtime.udp.iter().enumerate() {
            let epoll = &runtime.epolls[index % runtime.epolls.len()];
            epoll.add_oneshot(socket.as_raw_fd(), UDP_TOKEN_BASE + index as u64, READABLE)?;
        }
        runtime.sizeaware.threshold.store(
            options.fixed_threshold.unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        runtime
            .sizeaware
            .small_workers
            .store(small, Ordering::Relaxed);
        Ok(Arc::new(runtime))
    }

    /// Takes ownership of an accepted connection.
    pub fn adopt(&self, stream: mio::net::TcpStream, _peer: SocketAddr) {
        use std::os::fd::{FromRawFd, IntoRawFd};
        // SAFETY: the descriptor comes straight from the mio stream we own.
        let stream = unsafe { TcpStream::from_raw_fd(stream.into_raw_fd()) };
        let _ = stream.set_nodelay(true);
        // Latency is measured from kernel receipt; without it, from the read.
        let _ = crate::rxtime::enable(stream.as_raw_fd());
        if stream.set_nonblocking(true).is_err() {
            self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let home = self.next_home.fetch_add(1, Ordering::Relaxed) % self.epolls.len();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            id,
            stream,
            epoll: Arc::clone(&self.epolls[home]),
            read: Mutex::new(ReadSide::default()),
            write: Mutex::new(WriteSide::default()),
            exec: Mutex::new(ExecQueue::default()),
            closed: AtomicBool::new(false),
        });
        self.conns.write().insert(id, Arc::clone(&conn));
        if conn.epoll.add_oneshot(conn.fd(), id, READABLE).is_err() {
            self.close(&conn);
        }
    }

    fn close(&self, conn: &Arc<Conn>) {
        if conn.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = conn.epoll.delete(conn.fd());
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        self.conns.write().remove(&conn.id);
        self.shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
    }

    fn lookup(&self, token: u64) -> Option<Arc<Conn>> {
        self.conns.read().get(&token).cloned()
    }

    fn ctx(&self, worker: usize) -> ExecContext<'_> {
        ExecContext {
            shared: &self.shared,
            counters: &self.shared.counters[worker],
            now: unix_now(),
        }
    }

    /// Re-arms the connection for reading (and writing if output is pending).
    fn rearm(&self, conn: &Conn) {
        if conn.is_closed() {
            return;
        }
        let write = conn.write.lock();
        let mut interest = READABLE;
        if !write.out.is_empty() {
            interest |= WRITABLE;
        }
        let _ = conn.epoll.rearm(conn.fd(), conn.id, interest);
    }

    /// Fills `seq`'s reply slot and writes whatever is now in order.
    /// `blocking` waits for the socket (large workers do the costly send).
    fn complete(
        &self,
        conn: &Arc<Conn>,
        seq: u64,
        reply: ReplyBuf,
        worker: usize,
        mode: FlushMode,
    ) {
        let mut close = false;
        {
            let mut write = conn.write.lock();
            let index = seq.saturating_sub(write.base) as usize;
            while write.slots.len() <= index {
                write.slots.push_back(None);
            }
            write.slots[index] = Some(reply);
            while let Some(Some(_)) = write.slots.front() {
                if let Some(Some(mut done)) = write.slots.pop_front() {
                    write.out.append(&mut done);
                }
                write.base += 1;
            }
            if let Some(last) = write.close_after_seq {
                close = write.base > last;
            }
        }
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

    /// Writes pending output. Returns true if some is still pending.
    fn flush(&self, conn: &Conn, worker: usize, blocking: bool) -> bool {
        let deadline = Instant::now() + Duration::from_millis(LARGE_IO_TIMEOUT_MS as u64);
        loop {
            let mut write = conn.write.lock();
            let mut would_block = false;
            while !write.out.is_empty() {
                let slices: Vec<IoSlice<'_>> = write
                    .out
                    .chunks()
                    .take(64)
                    .map(|c| IoSlice::new(c))
                    .collect();
                match (&conn.stream).write_vectored(&slices) {
                    Ok(0) => {
                        write.out.clear();
                        break;
                    }
                    Ok(n) => {
                        count_written(&self.shared.counters[worker], n);
                        write.out.advance(n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        would_block = true;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        write.out.clear();
                        break;
                    }
                }
            }
            let pending = !write.out.is_empty();
            drop(write);
            if !pending || !would_block || !blocking || conn.is_closed() {
                return pending;
            }
            if Instant::now() >= deadline {
                return true;
            }
            wait_fd(conn.fd(), libc::POLLOUT, 50);
        }
    }

    fn record_latency(&self, large: bool, since: Instant) {
        let micros = since.elapsed().as_micros().max(1) as u64;
        let (histogram, counter) = if large {
            (&self.latency.large, &self.sizeaware.large_requests)
        } else {
            (&self.latency.small, &self.sizeaware.small_requests)
        };
        let _ = histogram.lock().record(micros.min(60_000_000));
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn large_workers_available(&self) -> bool {
        self.sizeaware.small_workers.load(Ordering::Relaxed) < self.workers
    }

    fn threshold(&self) -> u64 {
        self.sizeaware.threshold.load(Ordering::Relaxed)
    }

    /// Size that separates the small and large latency classes in `stats`
    /// for policies that do not classify requests themselves: the fixed
    /// threshold if one was given, else 16 KiB, so the five systems' server-side
    /// latencies can be compared class by class.
    fn stats_threshold(&self) -> u64 {
        self.fixed_threshold.unwrap_or(STATS_CLASS_THRESHOLD)
    }

    /// Clears the per-class latency histograms and counters (`stats reset`).
    pub fn reset_stats(&self) {
        self.latency.small.lock().reset();
        self.latency.large.lock().reset();
        for counter in [
            &self.sizeaware.small_requests,
            &self.sizeaware.large_requests,
            &self.sizeaware.handoffs,
            &self.steals,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// Reads and serves one ready connection. `receiving` is set when a large
    /// worker took the connection over to receive a large value.
    fn serve_conn(&self, conn: &Arc<Conn>, worker: usize, receiving: bool) {
        if conn.is_closed() {
            return;
        }
        let Some(mut read) = (if receiving {
            Some(conn.read.lock())
        } else {
            conn.read.try_lock()
        }) else {
            // Another thread is reading it; it re-arms when done.
            return;
        };
        if self.flush(conn, worker, false) && conn.write.lock().out.len() > OUTPUT_HIGH_WATER {
            drop(read);
            self.rearm(conn);
            return;
        }
        let ctx = self.ctx(worker);
        loop {
            let eof = match self.read_some(conn, &mut read, worker, receiving) {
                Ok(eof) => eof,
                Err(_) => {
                    drop(read);
                    self.close(conn);
                    return;
                }
            };
            match self.process(conn, &mut read, worker, &ctx, receiving) {
                Next::HandedOff => return, // the large worker owns reading now
                Next::Closed => return,
                Next::OutputFull => {
                    // Buffered requests wait for output to drain; no socket
                    // event will announce them, so come back here ourselves.
                    if self.flush(conn, worker, false)
                        && conn.write.lock().out.len() > OUTPUT_HIGH_WATER
                    {
                        break; // re-armed with EPOLLOUT below
                    }
                    continue;
                }
                Next::Continue => {}
            }
            if eof {
                read.eof = true;
                let mut write = conn.write.lock();
                let last = read.next_seq;
                if write.base >= last {
                    drop(write);
                    drop(read);
                    // A half-closed client still reads: answer it, then close.
                    self.flush(conn, worker, true);
                    self.close(conn);
                } else {
                    write.close_after_seq = Some(last.saturating_sub(1));
                }
                return;
            }
            if read.input.len() >= self.max_buffer {
                drop(read);
                self.close(conn);
                return;
            }
            // Keep going while reads stopped early to process; stop when the
            // socket is drained or output must drain first.
            let output_full = conn.write.lock().out.len() > OUTPUT_HIGH_WATER;
            if !read.more_pending || output_full {
                break;
            }
            self.flush(conn, worker, false);
        }
        // Level-triggered one-shot: re-arming reports anything still unread.
        drop(read);
        self.flush(conn, worker, false);
        self.rearm(conn);
    }

    /// Reads what the socket has. Returns true on EOF. A large receiver
    /// waits for the data of the request it took over.
    fn read_some(
        &self,
        conn: &Conn,
        read: &mut ReadSide,
        worker: usize,
        receiving: bool,
    ) -> io::Result<bool> {
        let deadline = Instant::now() + Duration::from_millis(LARGE_IO_TIMEOUT_MS as u64);
        read.more_pending = false;
        loop {
            if read.input.len() >= self.max_buffer {
                return Ok(false);
            }
            let room = {
                let default_room = (self.max_buffer - read.input.len()).min(READ_CHUNK);
                crate::buffers::next_read_room(&mut read.input, default_room)
            };
            if room == 0 {
                // Complete requests are buffered: process them first.
                read.more_pending = true;
                return Ok(false);
            }
            read.input.reserve(room);
            let spare = &mut read.input.spare_capacity_mut()[..room];
            // SAFETY: a socket read only writes into the buffer; we keep
            // exactly the `n` bytes it reports.
            let target = unsafe {
                std::slice::from_raw_parts_mut(spare.as_mut_ptr().cast::<u8>(), spare.len())
            };
            let was_empty = read.input.is_empty();
            match crate::rxtime::recv_with_arrival(conn.fd(), target) {
                Ok((0, _)) => return Ok(true),
                Ok((n, arrival)) => {
                    read.latest_ns = arrival.unwrap_or_else(crate::rxtime::realtime_now_ns);
                    if was_empty || read.arrived_ns == 0 {
                        read.arrived_ns = read.latest_ns;
                    }
                    let len = read.input.len();
                    // SAFETY: `read` initialised these `n` bytes.
                    unsafe { read.input.set_len(len + n) };
                    count_read(&self.shared.counters[worker], n);
                    if read.swallow > 0 {
                        let drop_now = read.swallow.min(read.input.len());
                        read.input.advance(drop_now);
                        read.swallow -= drop_now;
                    }
                    // A small reader stops here to classify what it has.
                    if !receiving
                        && self.policy == DispatchPolicy::SizeAware
                        && self.wants_large_receive(read)
                    {
                        return Ok(false);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if receiving && self.receive_incomplete(read) && Instant::now() < deadline {
                        wait_fd(conn.fd(), libc::POLLIN, 50);
                        continue;
                    }
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// True when the buffer starts with a storage command whose declared
    /// value is large and has not fully arrived.
    fn wants_large_receive(&self, read: &ReadSide) -> bool {
        if read.swallow > 0 || !self.large_workers_available() {
            return false;
        }
        match declared_total(&read.input) {
            Some(total) => total > read.input.len() && total as u64 > self.threshold(),
            None => false,
        }
    }

    fn receive_incomplete(&self, read: &ReadSide) -> bool {
        read.swallow > 0
            || declared_total(&read.input).is_some_and(|total| total > read.input.len())
    }

    /// Parses and routes every complete request in the buffer.
    fn process(
        &self,
        conn: &Arc<Conn>,
        read: &mut ReadSide,
        worker: usize,
        ctx: &ExecContext<'_>,
        receiving: bool,
    ) -> Next {
        loop {
            if read.swallow > 0 {
                let drop_now = read.swallow.min(read.input.len());
                read.input.advance(drop_now);
                read.swallow -= drop_now;
                if read.swallow > 0 {
                    return Next::Continue;
                }
            }
            if conn.write.lock().out.len() > OUTPUT_HIGH_WATER {
                return Next::OutputFull;
            }
            if !receiving
                && self.policy == DispatchPolicy::SizeAware
                && self.wants_large_receive(read)
            {
                bump(&self.sizeaware.handoffs);
                // Replies already queued must not wait for the large receive.
                self.flush(conn, worker, false);
                let _ = self.queue.0.send(Job::Receive {
                    conn: Arc::clone(conn),
                });
                return Next::HandedOff;
            }
            if read.input.is_empty() {
                return Next::Continue;
            }
            let arrived_at = arrival_instant(read.arrived_ns);
            let parsed = parse_request(&read.input, &self.limits);
            if !matches!(parsed, Parsed::Incomplete) {
                // The next request starts in bytes of the latest read.
                read.arrived_ns = read.latest_ns;
            }
            match parsed {
                Parsed::Incomplete => return Next::Continue,
                Parsed::Invalid { error, consumed } => {
                    read.input.advance(consumed.min(read.input.len()));
                    if error.closes_connection() {
                        read.input.clear();
                        self.close(conn);
                        return Next::Closed;
                    }
                    read.swallow = error.swallow();
                    let seq = read.next_seq;
                    read.next_seq += 1;
                    if matches!(
                        self.policy,
                        DispatchPolicy::EarlyBinding | DispatchPolicy::LateBinding
                    ) {
                        let job = Job::Reject {
                            conn: Arc::clone(conn),
                            seq,
                            error,
                        };
                        self.submit(conn, worker, job, true, worker);
                    } else {
                        self.reject(conn, seq, &error, worker, ctx, FlushMode::Deferred);
                    }
                }
                Parsed::Complete { value, consumed } => {
                    let frame = read.input.split_to(consumed).freeze();
                    let seq = read.next_seq;
                    read.next_seq += 1;
                    let is_quit = matches!(value, Request::Quit);
                    if is_quit {
                        conn.write.lock().close_after_seq = Some(seq);
                    }
                    self.route(conn, seq, value, frame, worker, ctx, receiving, arrived_at);
                    if is_quit {
                        return Next::Closed;
                    }
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn route(
        &self,
        conn: &Arc<Conn>,
        seq: u64,
        request: Request,
        frame: Bytes,
        worker: usize,
        ctx: &ExecContext<'_>,
        receiving: bool,
        arrived_at: Instant,
    ) {
        if matches!(
            self.policy,
            DispatchPolicy::EarlyBinding | DispatchPolicy::LateBinding
        ) {
            let keys = request.keys();
            let target = keys
                .first()
                .map(|k| key_worker(k, self.workers))
                .unwrap_or(worker);
            let barrier = self.policy == DispatchPolicy::LateBinding || keys.len() != 1;
            let job = Job::Execute {
                conn: Arc::clone(conn),
                seq,
                request,
                frame,
                arrived_at,
            };
            self.submit(conn, target, job, barrier, worker);
            return;
        }
        let declared = request.data_len();
        let retrieval = matches!(
            request,
            Request::Get { .. } | Request::GetAndTouch { .. } | Request::MetaGet { .. }
        );
        let mut out = ReplyBuf::new();
        let _ = execute(request, &frame, ctx, &mut out);
        let size = declared.unwrap_or(out.len()) as u64;
        if self.policy == DispatchPolicy::SizeAware {
            // Sizes of items accessed: stored values and hits. A miss
            // (`END` / `EN`, at most 5 bytes) and commands that touch no
            // value (`stats`, `delete`, ...) are not recorded.
            let accessed = declared.is_some() || (retrieval && size > MISS_REPLY_MAX);
            if accessed {
                self.size_samples[worker].lock().record(size, size);
            }
            let large = receiving || (size > self.threshold() && self.large_workers_available());
            if large && !receiving && declared.is_none() {
                bump(&self.sizeaware.handoffs);
                let _ = self.queue.0.send(Job::Send {
                    conn: Arc::clone(conn),
                    seq,
                    reply: out,
                    arrived_at,
                });
                return;
            }
            let mode = if receiving {
                FlushMode::Blocking
            } else {
                FlushMode::Deferred
            };
            self.complete(conn, seq, out, worker, mode);
            self.record_latency(large, arrived_at);
            return;
        }
        let large = size > self.stats_threshold();
        self.complete(conn, seq, out, worker, FlushMode::Deferred);
        self.record_latency(large, arrived_at);
    }

    /// Releases `job` to worker `target` now, or queues it behind the
    /// connection's earlier requests ([`ExecQueue`] says which). `reader` is
    /// the worker calling: early binding runs a request whose key it owns in
    /// place when nothing else of the connection is outstanding (the NIC would
    /// have steered it there; no hand-off).
    fn submit(&self, conn: &Arc<Conn>, target: usize, job: Job, barrier: bool, reader: usize) {
        let mut queue = conn.exec.lock();
        let runnable =
            queue.pending.is_empty() && !queue.barrier && (!barrier || queue.in_flight == 0);
        if !runnable {
            queue.pending.push_back(PendingJob {
                target,
                job,
                barrier,
            });
            return;
        }
        let alone = queue.in_flight == 0;
        queue.in_flight += 1;
        queue.barrier = barrier;
        drop(queue);
        if self.policy == DispatchPolicy::EarlyBinding && target == reader && alone {
            self.run_inline(job, reader);
        } else {
            self.release(target, job);
        }
    }

    /// Marks one of the connection's requests finished and releases what may
    /// run now.
    fn finish(&self, conn: &Arc<Conn>) {
        let mut ready = Vec::new();
        {
            let mut queue = conn.exec.lock();
            queue.in_flight = queue.in_flight.saturating_sub(1);
            if queue.in_flight == 0 {
                queue.barrier = false;
            }
            while !queue.barrier {
                let Some(front) = queue.pending.front() else {
                    break;
                };
                if front.barrier && queue.in_flight > 0 {
                    break;
                }
                let Some(next) = queue.pending.pop_front() else {
                    break;
                };
                queue.in_flight += 1;
                queue.barrier = next.barrier;
                ready.push(next);
            }
        }
        for next in ready {
            self.release(next.target, next.job);
        }
    }

    fn release(&self, target: usize, job: Job) {
        if self.policy == DispatchPolicy::EarlyBinding {
            let (tx, _, event) = &self.worker_jobs[target];
            if tx.send(job).is_ok() {
                event.notify();
            }
        } else {
            let _ = self.queue.0.send(job);
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
        if let ProtoError::TooLarge {
            unlink_key: Some(key),
            ..
        } = error
        {
            self.shared.store.delete(key, ctx.now);
        }
        let mut out = ReplyBuf::new();
        reply::error(&mut out, error);
        self.complete(conn, seq, out, worker, mode);
    }

    /// Runs a job handed to worker `worker`.
    fn run_job(&self, job: Job, worker: usize) {
        self.run_job_with(job, worker, FlushMode::NonBlocking);
    }

    /// Runs an early-binding request on the worker that read it: its reply
    /// is only queued, the reader flushes and re-arms after its batch.
    fn run_inline(&self, job: Job, worker: usize) {
        self.run_job_with(job, worker, FlushMode::Deferred);
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
            } => {
                let ctx = self.ctx(worker);
                let declared = request.data_len();
                let mut out = ReplyBuf::new();
                let _ = execute(request, &frame, &ctx, &mut out);
                let large = declared.unwrap_or(out.len()) as u64 > self.stats_threshold();
                self.complete(&conn, seq, out, worker, mode);
                self.record_latency(large, arrived_at);
                self.finish(&conn);
                if mode != FlushMode::Deferred && !conn.write.lock().out.is_empty() {
                    self.rearm(&conn);
                }
            }
            Job::Send {
                conn,
                seq,
                reply,
                arrived_at,
            } => {
                self.complete(&conn, seq, reply, worker, FlushMode::Blocking);
                self.record_latency(true, arrived_at);
            }
            Job::Receive { conn } => {
                self.serve_conn(&conn, worker, true);
            }
            Job::Reject { conn, seq, error } => {
                let ctx = self.ctx(worker);
                self.reject(&conn, seq, &error, worker, &ctx, FlushMode::NonBlocking);
                self.finish(&conn);
            }
        }
    }

    /// Body of worker thread `worker`.
    pub fn worker_loop(self: &Arc<Self>, worker: usize) {
        let mut tokens = Vec::with_capacity(16);
        while !self.shared.stopping() {
            match self.policy {
                DispatchPolicy::SizeAware => {
                    let small = worker < self.sizeaware.small_workers.load(Ordering::Relaxed);
                    if small {
                        if !self.large_workers_available() {
                            // The split moved every worker to small: serve the large
                            // jobs queued before it did, or they would be stranded.
                            while let Ok(job) = self.queue.1.try_recv() {
                                self.run_job(job, worker);
                            }
                        }
                        self.poll_and_serve(0, worker, &mut tokens, IDLE_WAIT_MS);
                    } else if let Ok(job) = self
                        .queue
                        .1
                        .recv_timeout(Duration::from_millis(IDLE_WAIT_MS as u64))
                    {
                        self.run_job(job, worker);
                    }
                }
                DispatchPolicy::LateBinding => {
                    if let Ok(job) = self
                        .queue
                        .1
                        .recv_timeout(Duration::from_millis(IDLE_WAIT_MS as u64))
                    {
                        self.run_job(job, worker);
                    }
                }
                DispatchPolicy::EarlyBinding => {
                    while let Ok(job) = self.worker_jobs[worker].1.try_recv() {
                        self.run_job(job, worker);
                    }
                    self.poll_and_serve(worker, worker, &mut tokens, IDLE_WAIT_MS);
                }
                DispatchPolicy::Stealing => {
                    // Own connections first; when idle, take ready ones from others.
                    if !self.poll_and_serve(worker, worker, &mut tokens, 0) {
                        let mut stole = false;
                        for offset in 1..self.workers {
                            let victim = (worker + offset) % self.workers;
                            if self.poll_and_serve(victim, worker, &mut tokens, 0) {
                                bump(&self.steals);
                                stole = true;
                                break;
                            }
                        }
                        if !stole {
                            self.poll_and_serve(worker, worker, &mut tokens, 1);
                        }
                    }
                }
                DispatchPolicy::Pinned => return,
            }
        }
    }

    /// Waits on epoll `index` and serves one ready connection. Returns true
    /// if it served something.
    fn poll_and_serve(
        &self,
        index: usize,
        worker: usize,
        tokens: &mut Vec<u64>,
        timeout_ms: i32,
    ) -> bool {
        if self.epolls[index].wait(tokens, 1, timeout_ms).is_err() {
            return false;
        }
        let mut served = false;
        for &token in tokens.iter() {
            if token == JOB_TOKEN {
                self.worker_jobs[index].2.drain();
                while let Ok(job) = self.worker_jobs[index].1.try_recv() {
                    self.run_job(job, worker);
                }
                continue;
            }
            if token >= UDP_TOKEN_BASE {
                self.serve_udp(index, token, worker);
                served = true;
                continue;
            }
            if let Some(conn) = self.lookup(token) {
                self.serve_conn(&conn, worker, false);
                served = true;
            }
        }
        served
    }

    /// Serves the datagrams waiting on one UDP socket, then re-arms it.
    fn serve_udp(&self, epoll_index: usize, token: u64, worker: usize) {
        let Some(socket) = self.udp.get((token - UDP_TOKEN_BASE) as usize) else {
            return;
        };
        let ctx = self.ctx(worker);
        crate::worker::serve_udp(socket, &ctx, &self.limits);
        let _ = self.epolls[epoll_index].rearm(socket.as_raw_fd(), token, READABLE);
    }

    /// Body of the late-binding dispatcher thread: reads and parses every
    /// connection and queues the requests for idle workers.
    pub fn dispatcher_loop(self: &Arc<Self>) {
        let mut tokens = Vec::with_capacity(16);
        // The dispatcher's own counters live in worker 0's block.
        while !self.shared.stopping() {
            if self.epolls[0].wait(&mut tokens, 16, IDLE_WAIT_MS).is_err() {
                continue;
            }
            for &token in tokens.iter() {
                if token >= UDP_TOKEN_BASE {
                    self.serve_udp(0, token, 0);
                } else if let Some(conn) = self.lookup(token) {
                    self.serve_conn(&conn, 0, false);
                }
            }
        }
    }

    /// Body of the size-aware controller thread.
    pub fn controller_loop(self: &Arc<Self>, config: SizeAwareConfig, epoch: Duration) {
        let fixed_split = config.fixed_small_workers;
        let Ok(mut controller) = SizeAwareController::new(config) else {
            eprintln!("tailtrim: invalid size-aware configuration; keeping the initial split");
            return;
        };
        let mut window: SizeWindow = controller.new_window();
        let mut epoch_index = 0u64;
        let mut slept = Duration::ZERO;
        let tick = Duration::from_millis(20).min(epoch);
        while !self.shared.stopping() {
            std::thread::sleep(tick);
            slept += tick;
            if slept < epoch {
                continue;
            }
            slept = Duration::ZERO;
            epoch_index += 1;
            let mut merged = SizeHistogram::new();
            for samples in &self.size_samples {
                merged.merge(&samples.lock().take());
            }
            window.advance_to(Epoch(epoch_index));
            window.absorb_epoch(Epoch(epoch_index), &merged);
            let decision = controller.on_epoch(&window);
            if self.fixed_threshold.is_none() {
                self.sizeaware
                    .threshold
                    .store(decision.threshold_bytes, Ordering::Relaxed);
            }
            if fixed_split.is_none() {
                self.sizeaware.small_workers.store(
                    decision.small_workers.clamp(1, self.workers),
                    Ordering::Relaxed,
                );
            }
            bump(&self.sizeaware.epochs);
            *self.sizeaware.last_decision.lock() = decision.stats();
        }
    }

    /// `stats sizeaware` pairs.
    pub fn stats(&self) -> Vec<(String, String)> {
        let small = self.sizeaware.small_workers.load(Ordering::Relaxed);
        let threshold = self.threshold();
        let mut out = vec![
            ("dispatch".to_string(), self.policy.name().to_string()),
            ("workers".into(), self.workers.to_string()),
            ("small_workers".into(), small.to_string()),
            ("large_workers".into(), (self.workers - small).to_string()),
            (
                "threshold_bytes".into(),
                if threshold == u64::MAX {
                    "none".to_string()
                } else {
                    threshold.to_string()
                },
            ),
            (
                "handoffs".into(),
                self.sizeaware.handoffs.load(Ordering::Relaxed).to_string(),
            ),
            (
                "steals".into(),
                self.steals.load(Ordering::Relaxed).to_string(),
            ),
            (
                "epochs".into(),
                self.sizeaware.epochs.load(Ordering::Relaxed).to_string(),
            ),
        ];
        for (name, histogram, count) in [
            ("small", &self.latency.small, &self.sizeaware.small_requests),
            ("large", &self.latency.large, &self.sizeaware.large_requests),
        ] {
            let h = histogram.lock();
            out.push((
                format!("{name}_requests"),
                count.load(Ordering::Relaxed).to_string(),
            ));
            for (label, q) in [("p50", 0.5), ("p99", 0.99), ("p999", 0.999)] {
                out.push((
                    format!("{name}_{label}_us"),
                    h.value_at_quantile(q).to_string(),
                ));
            }
        }
        for (name, value) in self.sizeaware.last_decision.lock().iter() {
            out.push((name.to_string(), value.clone()));
        }
        out
    }
}

enum Next {
    /// Everything complete was processed; the rest needs more input.
    Continue,
    /// Stopped because too much output is pending; requests may remain.
    OutputFull,
    /// A large worker took the connection over.
    HandedOff,
    /// The connection is closing.
    Closed,
}

/// When [`Runtime::complete`] writes the reply out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlushMode {
    /// Queue only: the reader flushes after its batch (pipelined replies
    /// share one `writev`).
    Deferred,
    /// Write what the socket takes now.
    NonBlocking,
    /// Wait for the socket (large workers do the costly send).
    Blocking,
}

/// The [`Instant`] at which the kernel received input stamped `arrived_ns`
/// (realtime ns); now if unknown.
fn arrival_instant(arrived_ns: u64) -> Instant {
    let now = Instant::now();
    if arrived_ns == 0 {
        return now;
    }
    let waited = crate::rxtime::realtime_now_ns().saturating_sub(arrived_ns);
    now.checked_sub(Duration::from_nanos(waited)).unwrap_or(now)
}

/// Early binding's partition function: the worker that owns `key`.
fn key_worker(key: &[u8], workers: usize) -> usize {
    // FNV-1a: cheap and stable across runs.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % workers.max(1) as u64) as usize
}
