//! The load engine: open loop (a schedule of send times that never looks at replies) or
//! closed loop (YCSB's model: each connection is a client with one request outstanding,
//! sending its next request a think time after the reply to its last).
//!
//! ```text
//!  main thread: connect all sockets, split them over I/O threads,
//!               poll progress counters every 100 ms, merge recorders
//!     |
//!     +-- I/O thread 0 ... I/O thread T-1 (each owns rate/T of the schedule)
//!           schedule ──> due arrivals ──> connection (uniform pick)
//!                            |  in flight < cap? compose + write
//!                            |  else queue client-side (wait counts)
//!           mio poll <── timerfd armed at (next arrival - spin)
//!               |         (ns resolution, no 1 ms timer wheel), then
//!               |         a short busy poll until the send time
//!           readable ──> parse reply items ──> latency = now - SCHEDULED
//!                                               time ──> class histograms
//! ```
//!
//! Latency is always measured from the scheduled send time, so a stalled
//! server shows up as the queueing it causes (no coordinated omission).
//!
//! In a closed loop a client's send time is its previous reply's arrival plus the think
//! time: a slow server lowers the offered load instead of queueing it (the coordination
//! an open loop avoids is the model here), and latency is measured from that send time.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::class::{new_histogram, Class, ClassHistograms, ClassSet};
use crate::report::{ClassSummary, ClosedLoopReport, RunReport, SecondSample};
use crate::rng::Rng;
use crate::schedule::Schedule;
use crate::wire::{
    compose_request, parse_reply_item, read_udp_header, write_udp_header, Outcome, ParseResult,
    ReplyState, UDP_HEADER_BYTES,
};
use crate::workload::{OpKind, Operation, RequestGenerator, WorkloadSpec};
use crate::BenchError;

/// Default number of connections.
pub const DEFAULT_CONNECTIONS: usize = 32;
/// Default in-flight cap per connection.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 16;
/// Default busy-poll margin before a send time (none: on this 2-core machine
/// a spinning bench loses its CPU share to the server and lags more).
pub const DEFAULT_SPIN: Duration = Duration::ZERO;
/// Default time allowed for outstanding replies after the schedule ends.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(2);
/// Default time after which a UDP request without reply counts as lost.
pub const DEFAULT_UDP_TIMEOUT: Duration = Duration::from_millis(500);
/// Largest UDP request datagram the bench sends.
pub const MAX_UDP_REQUEST_BYTES: usize = 1_400;

/// Transport to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// TCP, replies in order per connection.
    Tcp,
    /// UDP with memcached's 8-byte frame header.
    Udp,
}

impl Transport {
    /// `tcp` or `udp`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
    }
}

/// Closed-loop load: every connection is a client that sends its next request `think_time`
/// after the reply to its previous one (one request outstanding per client; `rate` and
/// `max_in_flight` do not apply). TCP only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClosedLoop {
    /// Time between a reply and the client's next request.
    pub think_time: Duration,
}

/// Parameters of one run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// `host:port` of the server.
    pub server: String,
    /// TCP or UDP.
    pub transport: Transport,
    /// Target requests per second.
    pub rate: f64,
    /// Measured window.
    pub duration: Duration,
    /// Warm-up before the window (requests sent, not recorded).
    pub warmup: Duration,
    /// Connections (sockets for UDP).
    pub connections: usize,
    /// I/O threads; each runs `rate / threads` of the schedule.
    pub threads: usize,
    /// Requests in flight per connection before queueing client-side.
    pub max_in_flight: usize,
    /// Busy-poll margin before each send time.
    pub spin: Duration,
    /// Time allowed for outstanding replies after the schedule ends.
    pub drain: Duration,
    /// UDP loss timeout.
    pub udp_timeout: Duration,
    /// Seed of the schedule and key choices.
    pub seed: u64,
    /// Whether to collect the per-second series.
    pub timeseries: bool,
    /// Closed-loop load instead of the open-loop schedule (`None`: open loop).
    pub closed_loop: Option<ClosedLoop>,
}

impl RunConfig {
    /// Defaults for `server` at `rate` for `duration`.
    #[must_use]
    pub fn new(server: &str, rate: f64, duration: Duration) -> Self {
        Self {
            server: server.to_string(),
            transport: Transport::Tcp,
            rate,
            duration,
            warmup: Duration::ZERO,
            connections: DEFAULT_CONNECTIONS,
            threads: 1,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            spin: DEFAULT_SPIN,
            drain: DEFAULT_DRAIN,
            udp_timeout: DEFAULT_UDP_TIMEOUT,
            seed: 1,
            timeseries: true,
            closed_loop: None,
        }
    }

    fn validate(&self) -> Result<(), BenchError> {
        let fail = |message: &str| Err(BenchError::Config(message.to_string()));
        if self.closed_loop.is_some() && self.transport != Transport::Tcp {
            return fail("a closed loop runs over TCP only");
        }
        if self.closed_loop.is_none() && !(self.rate.is_finite() && self.rate > 0.0) {
            return fail("rate must be positive");
        }
        if self.duration.is_zero() {
            return fail("duration must be positive");
        }
        if self.connections == 0 || self.threads == 0 || self.max_in_flight == 0 {
            return fail("connections, threads and max in flight must be positive");
        }
        if self.threads > self.connections {
            return fail("need at least one connection per thread");
        }
        if self.transport == Transport::Udp && self.max_in_flight > 30_000 {
            return fail("UDP in-flight cap must stay below 30000 (16-bit request ids)");
        }
        Ok(())
    }
}

/// Live counters shown by a progress bar.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    /// Time since the schedule started.
    pub elapsed: Duration,
    /// Warm-up + duration.
    pub total: Duration,
    /// Replies received so far.
    pub completed: u64,
    /// Errors so far.
    pub errors: u64,
}

/// Resolves `host:port` to the first address.
pub fn resolve(server: &str) -> Result<SocketAddr, BenchError> {
    server
        .to_socket_addrs()
        .map_err(|source| BenchError::Io {
            context: format!("resolving {server}"),
            source,
        })?
        .next()
        .ok_or_else(|| BenchError::Config(format!("{server} resolves to no address")))
}

/// Runs one open-loop measurement of `workload` against `config.server`.
///
/// `observer` is called about every 100 ms from the calling thread.
pub fn run(
    workload: &Arc<WorkloadSpec>,
    config: &RunConfig,
    observer: &mut dyn FnMut(&Progress),
) -> Result<RunReport, BenchError> {
    run_detailed(workload, config, observer).map(|output| output.report)
}

/// A run's report together with its raw per-class histograms (nanoseconds),
/// for callers that merge repeats or need counts above a threshold.
#[derive(Debug)]
pub struct RunOutput {
    /// The report.
    pub report: RunReport,
    /// Latency histograms per class, in nanoseconds.
    pub histograms: ClassHistograms,
}

/// Like [`run`], also returning the histograms.
pub fn run_detailed(
    workload: &Arc<WorkloadSpec>,
    config: &RunConfig,
    observer: &mut dyn FnMut(&Progress),
) -> Result<RunOutput, BenchError> {
    config.validate()?;
    workload.validate()?;
    let address = resolve(&config.server)?;
    let mut sockets: Vec<Vec<Socket>> = (0..config.threads).map(|_| Vec::new()).collect();
    for index in 0..config.connections {
        sockets[index % config.threads].push(Socket::connect(address, config.transport)?);
    }
    let counters = Arc::new(Counters::default());
    let finished = Arc::new(AtomicUsize::new(0));
    let cpu_before = process_cpu_time();
    let start = Instant::now() + Duration::from_millis(20);
    let total = config.warmup + config.duration;
    let base_rng = Rng::new(config.seed);
    let recorders: Vec<Result<Recorder, BenchError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = sockets
            .into_iter()
            .enumerate()
            .map(|(index, thread_sockets)| {
                let counters = Arc::clone(&counters);
                let finished = Arc::clone(&finished);
                let workload = Arc::clone(workload);
                let rng = base_rng.fork(index as u64);
                std::thread::Builder::new()
                    .name(format!("bench-io-{index}"))
                    .spawn_scoped(scope, move || {
                        let result =
                            Worker::new(workload, config, thread_sockets, rng, start, counters)
                                .and_then(Worker::run);
                        finished.fetch_add(1, Ordering::Release);
                        result
                    })
            })
            .collect();
        let threads = handles.len();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            observer(&Progress {
                elapsed: Instant::now().saturating_duration_since(start),
                total,
                completed: counters.completed.load(Ordering::Relaxed),
                errors: counters.errors.load(Ordering::Relaxed),
            });
            if finished.load(Ordering::Acquire) >= threads {
                break;
            }
        }
        handles
            .into_iter()
            .map(|handle| match handle {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|_| Err(BenchError::Config("an I/O thread panicked".into()))),
                Err(source) => Err(BenchError::Io {
                    context: "spawning an I/O thread".into(),
                    source,
                }),
            })
            .collect()
    });
    let cpu_seconds = process_cpu_time() - cpu_before;
    let wall_seconds = start.elapsed().as_secs_f64().max(1e-9);
    let mut merged = Recorder::new(config.timeseries);
    for recorder in recorders {
        merged.merge(&recorder?);
    }
    let histograms = merged.histograms.clone();
    let report = merged.into_report(workload, config, cpu_seconds / wall_seconds * 100.0);
    Ok(RunOutput { report, histograms })
}

/// Totals shared with the progress observer.
#[derive(Debug, Default)]
struct Counters {
    completed: AtomicU64,
    errors: AtomicU64,
}

/// CPU time (user + system) of this process, in seconds.
#[must_use]
pub fn process_cpu_time() -> f64 {
    // SAFETY: getrusage only writes into the zero-initialised struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct owned by this frame.
    let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if status != 0 {
        return 0.0;
    }
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// A connected, non-blocking socket.
enum Socket {
    Tcp(mio::net::TcpStream),
    Udp(mio::net::UdpSocket),
}

impl Socket {
    fn connect(address: SocketAddr, transport: Transport) -> Result<Self, BenchError> {
        let io_error = |context: &str| {
            let context = format!("{context} {address}");
            move |source| BenchError::Io { context, source }
        };
        match transport {
            Transport::Tcp => {
                let stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5))
                    .map_err(io_error("connecting to"))?;
                stream
                    .set_nodelay(true)
                    .map_err(io_error("TCP_NODELAY on"))?;
                stream
                    .set_nonblocking(true)
                    .map_err(io_error("non-blocking mode on"))?;
                Ok(Socket::Tcp(mio::net::TcpStream::from_std(stream)))
            }
            Transport::Udp => {
                let local: SocketAddr = if address.is_ipv4() {
                    SocketAddr::from(([0, 0, 0, 0], 0))
                } else {
                    SocketAddr::from(([0u16; 8], 0))
                };
                let socket = std::net::UdpSocket::bind(local).map_err(io_error("binding for"))?;
                socket
                    .connect(address)
                    .map_err(io_error("connecting UDP to"))?;
                socket
                    .set_nonblocking(true)
                    .map_err(io_error("non-blocking mode on"))?;
                Ok(Socket::Udp(mio::net::UdpSocket::from_std(socket)))
            }
        }
    }
}

/// Linux timerfd with nanosecond resolution, registered in the poll set.
struct TimerFd {
    fd: RawFd,
    armed_for: Option<Instant>,
}

impl TimerFd {
    fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the returned fd is owned by this struct.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            fd,
            armed_for: None,
        })
    }

    /// Arms the timer to fire at `deadline` (relative arming from `now`).
    fn arm(&mut self, deadline: Instant, now: Instant) -> io::Result<()> {
        if self.armed_for == Some(deadline) {
            return Ok(());
        }
        let delay = deadline
            .saturating_duration_since(now)
            .max(Duration::from_nanos(1000));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: delay.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(delay.subsec_nanos() as i32),
            },
        };
        // SAFETY: valid fd and pointer to a stack itimerspec; old value not requested.
        let status = unsafe { libc::timerfd_settime(self.fd, 0, &spec, std::ptr::null_mut()) };
        if status != 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed_for = Some(deadline);
        Ok(())
    }

    /// Clears the expiration count after the timer fired.
    fn acknowledge(&mut self) {
        let mut expirations = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a stack buffer from our own fd.
        let _ = unsafe { libc::read(self.fd, expirations.as_mut_ptr().cast(), 8) };
        self.armed_for = None;
    }
}

impl Drop for TimerFd {
    fn drop(&mut self) {
        // SAFETY: the fd is owned by this struct and closed once.
        unsafe {
            libc::close(self.fd);
        }
    }
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

const TIMER_TOKEN: Token = Token(usize::MAX);
const READ_CHUNK: usize = 64 * 1024;

/// A request waiting for its reply.
struct InFlight {
    scheduled: Instant,
    classes: ClassSet,
    reply: ReplyState,
    measured: bool,
}

/// A request queued client-side behind the in-flight cap.
struct Queued {
    scheduled: Instant,
    operation: Operation,
    measured: bool,
}

struct TcpConnection {
    stream: mio::net::TcpStream,
    output: Vec<u8>,
    output_sent: usize,
    input: Vec<u8>,
    in_flight: VecDeque<InFlight>,
    queued: VecDeque<Queued>,
    broken: bool,
}

struct UdpInFlight {
    scheduled: Instant,
    classes: ClassSet,
    kind: OpKind,
    keys: u32,
    measured: bool,
    parts: Vec<Option<Vec<u8>>>,
    received: usize,
}

struct UdpConnection {
    socket: mio::net::UdpSocket,
    next_request_id: u16,
    in_flight: HashMap<u16, UdpInFlight>,
    queued: VecDeque<Queued>,
}

enum Connection {
    Tcp(TcpConnection),
    Udp(UdpConnection),
}

impl Connection {
    fn outstanding(&self) -> usize {
        match self {
            Connection::Tcp(tcp) => tcp.in_flight.len() + tcp.queued.len(),
            Connection::Udp(udp) => udp.in_flight.len() + udp.queued.len(),
        }
    }
}

/// Per-thread results.
struct Recorder {
    histograms: ClassHistograms,
    send_lag: Histogram<u64>,
    dispatch_lag: Histogram<u64>,
    scheduled: u64,
    completed: u64,
    completed_in_window: u64,
    errors: u64,
    hits: u64,
    misses: u64,
    timeouts: u64,
    unfinished: u64,
    udp_oversize: u64,
    timeseries: Option<Vec<SecondBucket>>,
}

#[derive(Clone)]
struct SecondBucket {
    completed: u64,
    /// Microseconds, 2 significant digits (about 10 KB per second of run).
    latency: Histogram<u32>,
    hits: u64,
    misses: u64,
    errors: u64,
}

impl SecondBucket {
    fn new() -> Self {
        Self {
            completed: 0,
            latency: Histogram::new_with_bounds(1, 600_000_000, 2)
                .or_else(|_| Histogram::new(2))
                .unwrap_or_else(|error| panic!("hdrhistogram rejected constant bounds: {error}")),
            hits: 0,
            misses: 0,
            errors: 0,
        }
    }
}

impl Recorder {
    fn new(timeseries: bool) -> Self {
        Self {
            histograms: ClassHistograms::default(),
            send_lag: new_histogram(),
            dispatch_lag: new_histogram(),
            scheduled: 0,
            completed: 0,
            completed_in_window: 0,
            errors: 0,
            hits: 0,
            misses: 0,
            timeouts: 0,
            unfinished: 0,
            udp_oversize: 0,
            timeseries: timeseries.then(Vec::new),
        }
    }

    fn bucket(&mut self, second: usize) -> Option<&mut SecondBucket> {
        let series = self.timeseries.as_mut()?;
        if second > 100_000 {
            return None;
        }
        if series.len() <= second {
            series.resize_with(second + 1, SecondBucket::new);
        }
        series.get_mut(second)
    }

    fn merge(&mut self, other: &Recorder) {
        self.histograms.merge(&other.histograms);
        let _ = self.send_lag.add(&other.send_lag);
        let _ = self.dispatch_lag.add(&other.dispatch_lag);
        self.scheduled += other.scheduled;
        self.completed += other.completed;
        self.completed_in_window += other.completed_in_window;
        self.errors += other.errors;
        self.hits += other.hits;
        self.misses += other.misses;
        self.timeouts += other.timeouts;
        self.unfinished += other.unfinished;
        self.udp_oversize += other.udp_oversize;
        if let (Some(mine), Some(theirs)) = (&mut self.timeseries, &other.timeseries) {
            if mine.len() < theirs.len() {
                mine.resize_with(theirs.len(), SecondBucket::new);
            }
            for (bucket, other_bucket) in mine.iter_mut().zip(theirs) {
                bucket.completed += other_bucket.completed;
                let _ = bucket.latency.add(&other_bucket.latency);
                bucket.hits += other_bucket.hits;
                bucket.misses += other_bucket.misses;
                bucket.errors += other_bucket.errors;
            }
        }
    }

    fn into_report(
        self,
        workload: &WorkloadSpec,
        config: &RunConfig,
        cpu_percent: f64,
    ) -> RunReport {
        let duration_s = config.duration.as_secs_f64();
        let classes = Class::ALL
            .iter()
            .map(|class| {
                (
                    class.name().to_string(),
                    ClassSummary::from_histogram(self.histograms.get(*class), true),
                )
            })
            .collect();
        let hit_ratio = |hits: u64, misses: u64| {
            if hits + misses == 0 {
                1.0
            } else {
                hits as f64 / (hits + misses) as f64
            }
        };
        let seconds =
            config.duration.as_secs() as usize + usize::from(config.duration.subsec_nanos() > 0);
        let timeseries = self
            .timeseries
            .unwrap_or_default()
            .into_iter()
            .take(seconds)
            .enumerate()
            .map(|(second, bucket)| SecondSample {
                second: second as u64,
                completed: bucket.completed,
                throughput_rps: bucket.completed as f64,
                p50_us: bucket.latency.value_at_quantile(0.5) as f64,
                p99_us: bucket.latency.value_at_quantile(0.99) as f64,
                hits: bucket.hits,
                misses: bucket.misses,
                hit_ratio: hit_ratio(bucket.hits, bucket.misses),
                errors: bucket.errors,
            })
            .collect();
        RunReport {
            workload: workload.name.clone(),
            server: config.server.clone(),
            transport: config.transport.name().to_string(),
            target_rps: if config.closed_loop.is_some() {
                0.0
            } else {
                config.rate
            },
            achieved_rps: self.completed_in_window as f64 / duration_s,
            scheduled_rps: self.scheduled as f64 / duration_s,
            duration_s,
            warmup_s: config.warmup.as_secs_f64(),
            connections: config.connections,
            threads: config.threads,
            max_in_flight: config.max_in_flight,
            scheduled: self.scheduled,
            completed: self.completed,
            errors: self.errors,
            misses: self.misses,
            hits: self.hits,
            hit_ratio: hit_ratio(self.hits, self.misses),
            timeouts: self.timeouts,
            unfinished: self.unfinished,
            udp_oversize: self.udp_oversize,
            bench_cpu_percent: cpu_percent,
            send_lag: ClassSummary::from_histogram(&self.send_lag, false),
            dispatch_lag: ClassSummary::from_histogram(&self.dispatch_lag, false),
            classes,
            timeseries,
            floor: None,
            closed_loop: config.closed_loop.map(|closed| ClosedLoopReport {
                clients: config.connections,
                think_time_us: closed.think_time.as_secs_f64() * 1e6,
            }),
        }
    }
}

/// Where the next requests' send times come from.
enum Arrivals {
    /// The open-loop schedule, and its next send time while it is inside the window.
    Open {
        schedule: Schedule,
        next: Option<Instant>,
    },
    /// Closed loop: each client's next send time (clients with a request outstanding have
    /// none until its reply arrives).
    Closed {
        think_time: Duration,
        due: BinaryHeap<Reverse<(Instant, usize)>>,
    },
}

/// One I/O thread.
struct Worker<'a> {
    workload: Arc<WorkloadSpec>,
    config: &'a RunConfig,
    generator: RequestGenerator,
    arrivals: Arrivals,
    picker: Rng,
    poll: Poll,
    timer: TimerFd,
    connections: Vec<Connection>,
    recorder: Recorder,
    counters: Arc<Counters>,
    start: Instant,
    window_start: Instant,
    window_end: Instant,
    hard_end: Instant,
    scratch: Vec<u8>,
    read_buffer: Vec<u8>,
}

impl<'a> Worker<'a> {
    fn new(
        workload: Arc<WorkloadSpec>,
        config: &'a RunConfig,
        sockets: Vec<Socket>,
        rng: Rng,
        start: Instant,
        counters: Arc<Counters>,
    ) -> Result<Self, BenchError> {
        let io_error = |context: &'static str| {
            move |source| BenchError::Io {
                context: context.to_string(),
                source,
            }
        };
        let poll = Poll::new().map_err(io_error("creating the poll set"))?;
        let timer = TimerFd::new().map_err(io_error("creating a timerfd"))?;
        poll.registry()
            .register(
                &mut SourceFd(&timer.as_raw_fd()),
                TIMER_TOKEN,
                Interest::READABLE,
            )
            .map_err(io_error("registering the timerfd"))?;
        let mut connections = Vec::with_capacity(sockets.len());
        for (index, socket) in sockets.into_iter().enumerate() {
            let connection = match socket {
                Socket::Tcp(mut stream) => {
                    poll.registry()
                        .register(
                            &mut stream,
                            Token(index),
                            Interest::READABLE | Interest::WRITABLE,
                        )
                        .map_err(io_error("registering a connection"))?;
                    Connection::Tcp(TcpConnection {
                        stream,
                        output: Vec::new(),
                        output_sent: 0,
                        input: Vec::new(),
                        in_flight: VecDeque::new(),
                        queued: VecDeque::new(),
                        broken: false,
                    })
                }
                Socket::Udp(mut socket) => {
                    poll.registry()
                        .register(&mut socket, Token(index), Interest::READABLE)
                        .map_err(io_error("registering a socket"))?;
                    Connection::Udp(UdpConnection {
                        socket,
                        next_request_id: (index as u16).wrapping_mul(4099),
                        in_flight: HashMap::new(),
                        queued: VecDeque::new(),
                    })
                }
            };
            connections.push(connection);
        }
        let thread_rate = config.rate / config.threads as f64;
        let window_start = start + config.warmup;
        let window_end = window_start + config.duration;
        let arrivals = match config.closed_loop {
            None => {
                let mut schedule = Schedule::new(&workload.arrival, thread_rate, rng.fork(2));
                let next = Some(start + Duration::from_nanos(schedule.next_nanos()));
                Arrivals::Open { schedule, next }
            }
            Some(closed) => Arrivals::Closed {
                think_time: closed.think_time,
                due: (0..connections.len())
                    .map(|index| Reverse((start, index)))
                    .collect(),
            },
        };
        Ok(Self {
            generator: RequestGenerator::new(Arc::clone(&workload), rng.fork(1)),
            arrivals,
            picker: rng.fork(3),
            workload,
            config,
            poll,
            timer,
            connections,
            recorder: Recorder::new(config.timeseries),
            counters,
            start,
            window_start,
            window_end,
            hard_end: window_end + config.drain,
            scratch: Vec::with_capacity(4096),
            read_buffer: vec![0; READ_CHUNK],
        })
    }

    fn run(mut self) -> Result<Recorder, BenchError> {
        let mut events = Events::with_capacity(1024);
        let mut next_udp_sweep = self.start;
        loop {
            let now = Instant::now();
            let next_arrival = self.issue_due(now);
            self.flush_all();
            if self.config.transport == Transport::Udp && now >= next_udp_sweep {
                self.expire_udp(now);
                next_udp_sweep = now + Duration::from_millis(5);
            }
            let outstanding: usize = self.connections.iter().map(Connection::outstanding).sum();
            if (next_arrival.is_none() && outstanding == 0) || now >= self.hard_end {
                break;
            }
            let mut deadline = next_arrival.unwrap_or(self.hard_end);
            if self.config.transport == Transport::Udp {
                deadline = deadline.min(next_udp_sweep);
            }
            let wake = deadline.checked_sub(self.config.spin).unwrap_or(deadline);
            let timeout = if wake <= now {
                Some(Duration::ZERO)
            } else {
                self.timer.arm(wake, now).map_err(|source| BenchError::Io {
                    context: "arming the timerfd".into(),
                    source,
                })?;
                None
            };
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(BenchError::Io {
                        context: "polling".into(),
                        source,
                    })
                }
            }
            for event in &events {
                if event.token() == TIMER_TOKEN {
                    self.timer.acknowledge();
                    continue;
                }
                let index = event.token().0;
                if event.is_readable() || event.is_read_closed() || event.is_error() {
                    self.receive(index);
                }
                if event.is_writable() {
                    self.flush(index);
                }
            }
        }
        self.finish();
        Ok(self.recorder)
    }

    /// Issues every request whose send time has come; returns the next send time inside the
    /// window, if any.
    fn issue_due(&mut self, now: Instant) -> Option<Instant> {
        loop {
            let window_end = self.window_end;
            match &mut self.arrivals {
                Arrivals::Open { schedule, next } => {
                    let arrival = (*next)?;
                    if arrival > now {
                        return Some(arrival);
                    }
                    let following = self.start + Duration::from_nanos(schedule.next_nanos());
                    *next = (following < window_end).then_some(following);
                    self.issue(arrival, now);
                }
                Arrivals::Closed { due, .. } => {
                    let Reverse((send_at, index)) = *due.peek()?;
                    if send_at >= window_end {
                        // The run is over for this client (and for every later one).
                        due.clear();
                        return None;
                    }
                    if send_at > now {
                        return Some(send_at);
                    }
                    due.pop();
                    self.issue_on(index, send_at, now);
                }
            }
        }
    }

    /// A closed-loop client whose reply arrived at `received_at` sends again after its think
    /// time.
    fn client_ready(&mut self, index: usize, received_at: Instant) {
        if let Arrivals::Closed { think_time, due } = &mut self.arrivals {
            due.push(Reverse((received_at + *think_time, index)));
        }
    }

    fn in_window(&self, scheduled: Instant) -> bool {
        scheduled >= self.window_start && scheduled < self.window_end
    }

    fn issue(&mut self, scheduled: Instant, now: Instant) {
        let operation = self.generator.next_operation();
        let index = self.picker.below(self.connections.len() as u64) as usize;
        self.issue_operation(index, operation, scheduled, now);
    }

    /// A closed-loop client's next request, on its own connection.
    fn issue_on(&mut self, index: usize, scheduled: Instant, now: Instant) {
        let operation = self.generator.next_operation();
        self.issue_operation(index, operation, scheduled, now);
    }

    fn issue_operation(
        &mut self,
        index: usize,
        operation: Operation,
        scheduled: Instant,
        now: Instant,
    ) {
        let measured = self.in_window(scheduled);
        if measured {
            self.recorder.scheduled += 1;
        }
        let cap = self.config.max_in_flight;
        let queued = Queued {
            scheduled,
            operation,
            measured,
        };
        let can_send = match &mut self.connections[index] {
            Connection::Tcp(tcp) => {
                if tcp.broken {
                    self.fail(measured, scheduled);
                    return;
                }
                tcp.in_flight.len() < cap && tcp.queued.is_empty()
            }
            Connection::Udp(udp) => udp.in_flight.len() < cap && udp.queued.is_empty(),
        };
        if can_send {
            if measured {
                let lag = now.saturating_duration_since(scheduled).as_nanos() as u64;
                self.recorder.dispatch_lag.saturating_record(lag.max(1));
            }
            self.send(index, queued, now);
        } else {
            match &mut self.connections[index] {
                Connection::Tcp(tcp) => tcp.queued.push_back(queued),
                Connection::Udp(udp) => udp.queued.push_back(queued),
            }
        }
    }

    fn send(&mut self, index: usize, request: Queued, now: Instant) {
        if request.measured {
            let lag = now.saturating_duration_since(request.scheduled).as_nanos() as u64;
            self.recorder.send_lag.saturating_record(lag.max(1));
        }
        let keys = request.operation.keys.len() as u32;
        let kind = request.operation.kind;
        match &mut self.connections[index] {
            Connection::Tcp(tcp) => {
                compose_request(&self.workload, &request.operation, &mut tcp.output);
                tcp.in_flight.push_back(InFlight {
                    scheduled: request.scheduled,
                    classes: request.operation.classes,
                    reply: ReplyState::new(kind, keys),
                    measured: request.measured,
                });
            }
            Connection::Udp(udp) => {
                let mut request_id = udp.next_request_id;
                while udp.in_flight.contains_key(&request_id) {
                    request_id = request_id.wrapping_add(1);
                }
                udp.next_request_id = request_id.wrapping_add(1);
                self.scratch.clear();
                write_udp_header(request_id, &mut self.scratch);
                compose_request(&self.workload, &request.operation, &mut self.scratch);
                let fits = self.scratch.len() <= MAX_UDP_REQUEST_BYTES + UDP_HEADER_BYTES;
                let sent = fits && udp.socket.send(&self.scratch).is_ok();
                if !fits && request.measured {
                    self.recorder.udp_oversize += 1;
                }
                if sent {
                    udp.in_flight.insert(
                        request_id,
                        UdpInFlight {
                            scheduled: request.scheduled,
                            classes: request.operation.classes,
                            kind,
                            keys,
                            measured: request.measured,
                            parts: Vec::new(),
                            received: 0,
                        },
                    );
                } else {
                    self.fail(request.measured, request.scheduled);
                }
            }
        }
    }

    fn fail(&mut self, measured: bool, scheduled: Instant) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        if measured {
            self.recorder.errors += 1;
            let second = self.second_of(scheduled);
            if let Some(bucket) = self.recorder.bucket(second) {
                bucket.errors += 1;
            }
        }
    }

    fn second_of(&self, instant: Instant) -> usize {
        instant
            .saturating_duration_since(self.window_start)
            .as_secs() as usize
    }

    fn complete(
        &mut self,
        scheduled: Instant,
        classes: ClassSet,
        measured: bool,
        outcome: Outcome,
        received_at: Instant,
    ) {
        self.counters.completed.fetch_add(1, Ordering::Relaxed);
        if outcome.error {
            self.fail(measured, scheduled);
            return;
        }
        if !measured {
            return;
        }
        let latency = received_at.saturating_duration_since(scheduled).as_nanos() as u64;
        let recorder = &mut self.recorder;
        recorder.completed += 1;
        if received_at < self.window_end {
            recorder.completed_in_window += 1;
        }
        recorder.hits += u64::from(outcome.hits);
        recorder.misses += u64::from(outcome.misses);
        recorder.histograms.record(classes, latency);
        let scheduled_second = self.second_of(scheduled);
        let received_second = self.second_of(received_at);
        if let Some(bucket) = self.recorder.bucket(scheduled_second) {
            bucket.latency.saturating_record((latency / 1_000).max(1));
            bucket.hits += u64::from(outcome.hits);
            bucket.misses += u64::from(outcome.misses);
        }
        if let Some(bucket) = self.recorder.bucket(received_second) {
            bucket.completed += 1;
        }
    }

    fn flush_all(&mut self) {
        for index in 0..self.connections.len() {
            if let Connection::Tcp(tcp) = &self.connections[index] {
                if tcp.output_sent < tcp.output.len() {
                    self.flush(index);
                }
            }
        }
    }

    fn flush(&mut self, index: usize) {
        let Connection::Tcp(tcp) = &mut self.connections[index] else {
            return;
        };
        while tcp.output_sent < tcp.output.len() && !tcp.broken {
            match tcp.stream.write(&tcp.output[tcp.output_sent..]) {
                Ok(0) => tcp.broken = true,
                Ok(written) => tcp.output_sent += written,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => tcp.broken = true,
            }
        }
        if tcp.output_sent == tcp.output.len() {
            tcp.output.clear();
            tcp.output_sent = 0;
        } else if tcp.output_sent > 1 << 20 {
            tcp.output.drain(..tcp.output_sent);
            tcp.output_sent = 0;
        }
        if tcp.broken {
            self.break_connection(index);
        }
    }

    fn break_connection(&mut self, index: usize) {
        let Connection::Tcp(tcp) = &mut self.connections[index] else {
            return;
        };
        tcp.broken = true;
        let lost: Vec<(bool, Instant)> = tcp
            .in_flight
            .drain(..)
            .map(|request| (request.measured, request.scheduled))
            .chain(
                tcp.queued
                    .drain(..)
                    .map(|request| (request.measured, request.scheduled)),
            )
            .collect();
        tcp.output.clear();
        tcp.output_sent = 0;
        for (measured, scheduled) in lost {
            self.fail(measured, scheduled);
        }
    }

    fn receive(&mut self, index: usize) {
        match &self.connections[index] {
            Connection::Tcp(_) => self.receive_tcp(index),
            Connection::Udp(_) => self.receive_udp(index),
        }
    }

    fn receive_tcp(&mut self, index: usize) {
        let Connection::Tcp(tcp) = &mut self.connections[index] else {
            return;
        };
        let mut closed = false;
        loop {
            match tcp.stream.read(&mut self.read_buffer) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(count) => {
                    tcp.input.extend_from_slice(&self.read_buffer[..count]);
                    // A short read drained the socket; later data raises a new
                    // edge, so the extra read that would say WouldBlock is skipped.
                    if count < self.read_buffer.len() {
                        break;
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        let received_at = Instant::now();
        let mut parsed = 0usize;
        let mut finished: Vec<(Instant, ClassSet, bool, Outcome)> = Vec::new();
        let mut invalid = false;
        while parsed < tcp.input.len() {
            match parse_reply_item(&tcp.input[parsed..]) {
                ParseResult::Incomplete => break,
                ParseResult::Invalid => {
                    invalid = true;
                    break;
                }
                ParseResult::Complete { item, consumed } => {
                    parsed += consumed;
                    let Some(front) = tcp.in_flight.front_mut() else {
                        invalid = true;
                        break;
                    };
                    if let Some(outcome) = front.reply.feed(item) {
                        finished.push((front.scheduled, front.classes, front.measured, outcome));
                        tcp.in_flight.pop_front();
                    }
                }
            }
        }
        if parsed == tcp.input.len() {
            tcp.input.clear();
        } else if parsed > 0 {
            tcp.input.drain(..parsed);
        }
        let mut promote = finished.len();
        for (scheduled, classes, measured, outcome) in finished {
            self.complete(scheduled, classes, measured, outcome, received_at);
            self.client_ready(index, received_at);
        }
        if invalid || closed {
            self.break_connection(index);
            return;
        }
        // Replies freed in-flight slots: send queued requests (their wait counts).
        let now = Instant::now();
        while promote > 0 {
            let Connection::Tcp(tcp) = &mut self.connections[index] else {
                return;
            };
            if tcp.in_flight.len() >= self.config.max_in_flight {
                break;
            }
            let Some(request) = tcp.queued.pop_front() else {
                break;
            };
            self.send(index, request, now);
            promote -= 1;
        }
    }

    fn receive_udp(&mut self, index: usize) {
        let mut finished: Vec<(Instant, ClassSet, bool, Outcome, Instant)> = Vec::new();
        {
            let Connection::Udp(udp) = &mut self.connections[index] else {
                return;
            };
            loop {
                let count = match udp.socket.recv(&mut self.read_buffer) {
                    Ok(count) => count,
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                let received_at = Instant::now();
                let datagram = &self.read_buffer[..count];
                let Some((request_id, sequence, total)) = read_udp_header(datagram) else {
                    continue;
                };
                let Some(request) = udp.in_flight.get_mut(&request_id) else {
                    continue;
                };
                let total = usize::from(total.max(1));
                if request.parts.len() != total {
                    request.parts = vec![None; total];
                    request.received = 0;
                }
                let Some(slot) = request.parts.get_mut(usize::from(sequence)) else {
                    continue;
                };
                if slot.is_none() {
                    *slot = Some(datagram[UDP_HEADER_BYTES..].to_vec());
                    request.received += 1;
                }
                if request.received < total {
                    continue;
                }
                let payload: Vec<u8> = request.parts.iter().flatten().flatten().copied().collect();
                let outcome = parse_whole_reply(&payload, request.kind, request.keys);
                finished.push((
                    request.scheduled,
                    request.classes,
                    request.measured,
                    outcome,
                    received_at,
                ));
                udp.in_flight.remove(&request_id);
            }
        }
        let promote = finished.len();
        for (scheduled, classes, measured, outcome, received_at) in finished {
            self.complete(scheduled, classes, measured, outcome, received_at);
        }
        self.promote_udp(index, promote);
    }

    fn promote_udp(&mut self, index: usize, mut budget: usize) {
        let now = Instant::now();
        while budget > 0 {
            let Connection::Udp(udp) = &mut self.connections[index] else {
                return;
            };
            if udp.in_flight.len() >= self.config.max_in_flight {
                break;
            }
            let Some(request) = udp.queued.pop_front() else {
                break;
            };
            self.send(index, request, now);
            budget -= 1;
        }
    }

    fn expire_udp(&mut self, now: Instant) {
        let timeout = self.config.udp_timeout;
        for index in 0..self.connections.len() {
            let expired: Vec<(bool, Instant)> = {
                let Connection::Udp(udp) = &mut self.connections[index] else {
                    continue;
                };
                let expired_ids: Vec<u16> = udp
                    .in_flight
                    .iter()
                    .filter(|(_, request)| {
                        now.saturating_duration_since(request.scheduled) > timeout
                    })
                    .map(|(id, _)| *id)
                    .collect();
                expired_ids
                    .iter()
                    .filter_map(|id| udp.in_flight.remove(id))
                    .map(|request| (request.measured, request.scheduled))
                    .collect()
            };
            let count = expired.len();
            for (measured, scheduled) in expired {
                if measured {
                    self.recorder.timeouts += 1;
                }
                self.fail(measured, scheduled);
            }
            self.promote_udp(index, count);
        }
    }

    fn finish(&mut self) {
        let mut lost: Vec<(bool, Instant)> = Vec::new();
        for connection in &mut self.connections {
            match connection {
                Connection::Tcp(tcp) => {
                    lost.extend(tcp.in_flight.drain(..).map(|r| (r.measured, r.scheduled)));
                    lost.extend(tcp.queued.drain(..).map(|r| (r.measured, r.scheduled)));
                }
                Connection::Udp(udp) => {
                    lost.extend(
                        udp.in_flight
                            .drain()
                            .map(|(_, r)| (r.measured, r.scheduled)),
                    );
                    lost.extend(udp.queued.drain(..).map(|r| (r.measured, r.scheduled)));
                }
            }
        }
        for (measured, scheduled) in lost {
            if measured {
                self.recorder.unfinished += 1;
            }
            self.fail(measured, scheduled);
        }
    }
}

/// Parses a complete (reassembled) reply for a request of `kind` over `keys` keys.
fn parse_whole_reply(payload: &[u8], kind: OpKind, keys: u32) -> Outcome {
    let mut state = ReplyState::new(kind, keys);
    let mut offset = 0;
    while offset < payload.len() {
        match parse_reply_item(&payload[offset..]) {
            ParseResult::Complete { item, consumed } => {
                offset += consumed;
                if let Some(outcome) = state.feed(item) {
                    return outcome;
                }
            }
            ParseResult::Incomplete | ParseResult::Invalid => break,
        }
    }
    Outcome {
        error: true,
        ..Outcome::default()
    }
}
