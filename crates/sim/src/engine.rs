//! One simulated run: a trace, a policy, an offered rate → latencies, throughput, queues.
//!
//! ```text
//!   Arrival(i) ──► route by policy ──► a queue ──► idle core? ──► start: Done(core) at now + cost
//!                                                                   │
//!   Done(core) ◄────────────────────────────────────────────────────┘
//!      ├─ size-aware small core, request large: record size, hand off ─► the large queue
//!      │    ─► decide::shared_queue_taker(idle large cores)
//!      ├─ otherwise: request finished ─► connection sequencer ─► delivered (latency recorded)
//!      └─ the core takes its next job (stealing: or steals a connection; late binding: the
//!         central queue; size-aware large cores: the large queue)
//!   DispatchDone (late binding) ─► central queue ─► decide::shared_queue_taker(idle cores)
//!   Epoch (size-aware) ─► merge cores' SizeHistograms ─► EpochDriver::tick
//!                         ─► new threshold and split; idle cores re-check their role
//!
//! Every dispatch decision is a call in [`crate::decide`], the policy crate's code the server
//! runs too.
//! ```
//!
//! Events are ordered by `(time, seq)` ([`EventQueue`]); nothing reads a clock; every random
//! choice was made when the trace was generated. Replies of a connection are delivered in
//! request order: a reply that finishes before an earlier one of its connection waits for it
//! (as the real server's sequenced write side does).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use tailtrim_policy::dispatch::Placement;
use tailtrim_policy::sizeaware::{
    EpochDriver, PackedDecision, RoleBusy, SizeAwareConfig, SizeHistogram,
};

use crate::cost::CostModel;
use crate::decide;
use crate::events::EventQueue;
use crate::policy::Policy;
use crate::stats::{LatencyHistograms, LatencyRecorder, LatencySummary};
use crate::time::Nanos;
use crate::workload::Trace;
use crate::SimError;

/// Default simulated epoch of a single run (the server's default is 1 s; a simulated point
/// often lasts less than that, so sweeps scale the epoch to the run, see
/// `sweep::AUTO_EPOCHS_PER_RUN`).
pub const DEFAULT_EPOCH: Nanos = Nanos::from_millis(50);
/// Default share of the trace (its first requests) left out of the statistics.
pub const DEFAULT_WARMUP_FRACTION: f64 = 0.1;
/// Software-steered early binding: connections one read batch takes, as the server's
/// early-binding worker asks `epoll_wait` for 16 events.
pub const EVENTS_PER_WAIT: usize = 16;

/// How early binding gets a request to the core that owns its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Steering {
    /// The NIC steers by key hash (MICA): the owning core receives the request itself.
    #[default]
    Nic,
    /// The connection's home core reads and parses (the parse share of the fixed cost), then
    /// hands the request to the owning core (`handoff_ns` when that is another core), which
    /// does the rest — what tailtrim's server does (a job queue and an eventfd per worker).
    /// Each core runs the server worker's loop: every job in its queue first, then one read
    /// batch (up to [`EVENTS_PER_WAIT`] readable connections, each read once); a request the
    /// reader owns runs at once when nothing else of its connection is in flight.
    Software,
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The policy.
    pub policy: Policy,
    /// Cores of the simulated server (late binding: one of them is the dispatcher).
    pub cores: usize,
    /// Offered load, requests per second.
    pub rate: f64,
    /// Share of the first requests not measured.
    pub warmup_fraction: f64,
    /// Size-aware controller epoch.
    pub epoch: Nanos,
    /// Size-aware controller settings (`workers` is replaced by the core count).
    pub sizeaware: SizeAwareConfig,
    /// Early binding's steering.
    pub steering: Steering,
    /// Late binding: a connection's next request is released to a core only when its
    /// previous one completed (the real server's per-connection execution queue, which
    /// serializes late binding because any idle worker may take the next request). Early
    /// binding is not affected: the server runs a connection's single-key requests side by
    /// side on their keys' workers. Off: requests of a connection may run on several cores
    /// at once; replies are still delivered in order.
    pub serialize_connections: bool,
    /// Hand-off, steal and dispatch costs (per-request work is in the trace).
    pub cost: CostModel,
    /// Keep a [`RequestRecord`] per request (tests, debugging).
    pub record_requests: bool,
}

impl RunConfig {
    /// Defaults for `policy` on `cores` cores at `rate`.
    pub fn new(policy: Policy, cores: usize, rate: f64, cost: CostModel) -> RunConfig {
        RunConfig {
            policy,
            cores,
            rate,
            warmup_fraction: DEFAULT_WARMUP_FRACTION,
            epoch: DEFAULT_EPOCH,
            sizeaware: SizeAwareConfig::with_workers(cores),
            steering: Steering::Nic,
            serialize_connections: false,
            cost,
            record_requests: false,
        }
    }
}

/// What happened to one request (kept when [`RunConfig::record_requests`] is set).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Connection.
    pub conn: u32,
    /// Position in the connection.
    pub conn_seq: u32,
    /// Sent.
    pub arrival: Nanos,
    /// A core (or the dispatcher) started on it.
    pub started: Nanos,
    /// Its last stage finished.
    pub finished: Nanos,
    /// Its reply left (in connection order).
    pub delivered: Nanos,
    /// Core that ran its last stage.
    pub served_by: usize,
    /// Handed from a small to a large core (size-aware).
    pub handed_off: bool,
    /// Size the server classifies by.
    pub size: u64,
}

/// One change of the size-aware decision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DecisionPoint {
    /// Simulated time, milliseconds.
    pub at_ms: f64,
    /// Threshold in force.
    pub threshold_bytes: u64,
    /// Small cores.
    pub small_workers: usize,
}

/// Results of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Policy.
    pub policy: Policy,
    /// Cores.
    pub cores: usize,
    /// Offered rate, requests/s.
    pub offered_rps: f64,
    /// Replies delivered per second over the measured window.
    pub achieved_rps: f64,
    /// Requests simulated.
    pub requests: u64,
    /// Small requests (bench class: value ≤ 1499 B), arrival → reply delivered.
    pub small: LatencySummary,
    /// Large requests, arrival → reply delivered.
    pub large: LatencySummary,
    /// Small requests from the first core that touched them (as the server's `stats
    /// sizeaware` counts: from parse) to the reply.
    pub small_in_server: LatencySummary,
    /// Large requests, the same.
    pub large_in_server: LatencySummary,
    /// Time-averaged requests waiting in queues (all queues, not counting those in service).
    pub mean_queued: f64,
    /// Time-averaged requests waiting per queue owner: one entry per core's own queue, then
    /// the shared queue (size-aware small queue, late-binding central queue), then the
    /// late-binding dispatcher's input, then the size-aware large queue.
    pub mean_queued_by_queue: Vec<f64>,
    /// Busy share of each core over the run (late binding: the dispatcher last).
    pub utilization: Vec<f64>,
    /// Size-aware hand-offs from small to large cores.
    pub handoffs: u64,
    /// Stealing: connections stolen.
    pub steals: u64,
    /// Size-aware epochs run.
    pub epochs: u64,
    /// Size-aware decisions, one entry per change (the first is the initial decision).
    pub decisions: Vec<DecisionPoint>,
    /// Simulated span, seconds.
    pub simulated_s: f64,
    /// The histograms the four latency summaries above were read from (not serialized
    /// here: the CLI writes them into results.json in the lab's encoding).
    #[serde(skip)]
    pub histograms: LatencyHistograms,
    /// Per-request records (only with `record_requests`; not serialized).
    #[serde(skip)]
    pub records: Vec<RequestRecord>,
}

/// A stage of work a core runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The whole request on one core.
    Full,
    /// Size-aware small core: read, parse, look up; then serve (small) or hand off (large).
    Front { large: bool },
    /// Size-aware large core: the transfer of a handed-off request.
    Back,
    /// Late binding (and software-steered early binding): a worker's part after the
    /// dispatcher (or home core) parsed the request.
    LateWork,
    /// Software-steered early binding: the home core reads, parses, hands off (or, owning
    /// the key with nothing else of the connection in flight, serves it in place).
    Steer,
}

#[derive(Debug, Clone, Copy)]
struct Job {
    req: u32,
    stage: Stage,
    extra_ns: u64,
}

#[derive(Debug, Default)]
struct Core {
    current: Option<Job>,
    queue: VecDeque<Job>,
    histogram: SizeHistogram,
    busy_ns: u64,
    /// Software-steered early binding: connections homed here with requests not read yet,
    /// in the order they became readable (the epoll ready list).
    readable: VecDeque<u32>,
    /// The read batch in progress (one `epoll_wait`'s connections), not yet reached.
    batch: VecDeque<u32>,
    /// The connection being read and how many of its requests that read took.
    reading: Option<(u32, usize)>,
    /// Requests sent on connections homed here and not read yet.
    unread: usize,
    /// Software-steered early binding: jobs left in the queue turn in progress (the jobs
    /// queued when the turn started).
    turn: usize,
    /// A read batch was taken: when it ends, the next worker step starts with a queue turn.
    turn_due: bool,
}

#[derive(Debug, Default)]
struct ConnState {
    next: u32,
    last_delivery: Nanos,
    held: BTreeMap<u32, (u32, Nanos)>,
    /// A request of this connection is executing (with `serialize_connections`).
    executing: bool,
    /// Requests waiting for it, in order.
    waiting: VecDeque<Job>,
    /// Software-steered early binding: requests sent and not read yet, in order.
    unread: VecDeque<u32>,
    /// In its home core's readable list or read batch.
    listed: bool,
    /// Software-steered early binding: requests read and not finished (the server's
    /// per-connection `in_flight`).
    released: u32,
}

#[derive(Debug, Default)]
struct Dispatcher {
    queue: VecDeque<u32>,
    current: Option<u32>,
    busy_ns: u64,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Arrival(u32),
    Done(usize),
    DispatchDone,
    Epoch,
}

struct SizeAwareState {
    driver: EpochDriver,
    /// Each core's `busy_ns` when the epoch began.
    busy_at_epoch_start: Vec<u64>,
    /// Large requests the large cores completed in this epoch.
    large_jobs: u64,
}

/// The state of one run.
struct Sim<'t> {
    config: &'t RunConfig,
    trace: &'t Trace,
    arrivals: Vec<Nanos>,
    now: Nanos,
    events: EventQueue<Event>,
    cores: Vec<Core>,
    /// Size-aware: the small cores' shared input. Late binding: the central queue.
    shared: VecDeque<Job>,
    /// Size-aware: the large queue (hand-offs), taken by the large cores.
    large_queue: VecDeque<Job>,
    dispatcher: Dispatcher,
    conns: Vec<ConnState>,
    /// Size-aware: the decision in force, as the server's workers read it.
    decision: Option<PackedDecision>,
    sizeaware: Option<SizeAwareState>,
    rotation: u64,
    started: Vec<Nanos>,
    finished: Vec<Nanos>,
    served_by: Vec<usize>,
    handed_off: Vec<bool>,
    delivered: usize,
    // Measurement.
    warmup: usize,
    window_start: Nanos,
    delivered_in_window: u64,
    last_event: Nanos,
    queued_area: Vec<f64>,
    small: LatencyRecorder,
    large: LatencyRecorder,
    small_in_server: LatencyRecorder,
    large_in_server: LatencyRecorder,
    handoffs: u64,
    steals: u64,
    decisions: Vec<DecisionPoint>,
    records: Vec<RequestRecord>,
}

const UNSET: Nanos = Nanos(u64::MAX);

/// Runs `trace` under `config`. Deterministic: the same inputs give the same result.
pub fn run(trace: &Trace, config: &RunConfig) -> Result<RunResult, SimError> {
    let workers = config.policy.worker_cores(config.cores);
    if workers == 0 {
        return Err(SimError::Config(format!(
            "{} needs at least {} cores (got {})",
            config.policy,
            config.cores - workers + 1,
            config.cores
        )));
    }
    if !(config.rate.is_finite() && config.rate > 0.0) {
        return Err(SimError::Config(format!(
            "rate {} must be > 0",
            config.rate
        )));
    }
    if !(0.0..1.0).contains(&config.warmup_fraction) {
        return Err(SimError::Config(
            "warm-up fraction must be in [0, 1)".into(),
        ));
    }
    if config.epoch.0 == 0 {
        return Err(SimError::Config("epoch must be positive".into()));
    }
    config.cost.validate()?;
    if trace.requests.is_empty() {
        return Err(SimError::Config("the trace is empty".into()));
    }
    let (decision, sizeaware) = if config.policy == Policy::SizeAware {
        let sizeaware_config = SizeAwareConfig {
            workers,
            ..config.sizeaware.clone()
        };
        let driver = EpochDriver::new(sizeaware_config)
            .map_err(|error| SimError::Config(error.to_string()))?;
        (
            Some(driver.published()),
            Some(SizeAwareState {
                driver,
                busy_at_epoch_start: vec![0; workers],
                large_jobs: 0,
            }),
        )
    } else {
        (None, None)
    };
    let count = trace.requests.len();
    let arrivals = trace.arrivals(config.rate);
    let warmup = ((count as f64 * config.warmup_fraction) as usize).min(count - 1);
    let window_start = arrivals[warmup];
    let mut sim = Sim {
        config,
        trace,
        arrivals,
        now: Nanos::ZERO,
        events: EventQueue::new(),
        cores: (0..workers).map(|_| Core::default()).collect(),
        shared: VecDeque::new(),
        large_queue: VecDeque::new(),
        dispatcher: Dispatcher::default(),
        conns: (0..trace.connections)
            .map(|_| ConnState::default())
            .collect(),
        decision,
        sizeaware,
        rotation: 0,
        started: vec![UNSET; count],
        finished: vec![UNSET; count],
        served_by: vec![usize::MAX; count],
        handed_off: vec![false; count],
        delivered: 0,
        warmup,
        window_start,
        delivered_in_window: 0,
        last_event: Nanos::ZERO,
        queued_area: vec![0.0; workers + 3],
        small: LatencyRecorder::default(),
        large: LatencyRecorder::default(),
        small_in_server: LatencyRecorder::default(),
        large_in_server: LatencyRecorder::default(),
        handoffs: 0,
        steals: 0,
        decisions: Vec::new(),
        records: Vec::new(),
    };
    Ok(sim.run())
}

impl Sim<'_> {
    fn run(&mut self) -> RunResult {
        let count = self.trace.requests.len();
        if let Some(decision) = self.decision {
            self.note_decision(decision);
            self.events.push(self.config.epoch, Event::Epoch);
        }
        self.events.push(self.arrivals[0], Event::Arrival(0));
        while self.delivered < count {
            let Some((at, event)) = self.events.pop() else {
                break;
            };
            self.advance(at);
            match event {
                Event::Arrival(index) => self.on_arrival(index),
                Event::Done(core) => self.on_done(core),
                Event::DispatchDone => self.on_dispatch_done(),
                Event::Epoch => self.on_epoch(),
            }
        }
        self.result()
    }

    /// Moves the clock to `at`, integrating queue lengths over the measured window.
    fn advance(&mut self, at: Nanos) {
        let from = self.last_event.max(self.window_start);
        if at > from {
            let span = (at - from).0 as f64;
            let lengths = self.queue_lengths_by_owner();
            for (area, length) in self.queued_area.iter_mut().zip(lengths) {
                *area += length as f64 * span;
            }
        }
        self.last_event = at;
        self.now = at;
    }

    fn queue_lengths_by_owner(&self) -> Vec<usize> {
        let mut lengths: Vec<usize> = self
            .cores
            .iter()
            .map(|core| core.queue.len() + core.unread)
            .collect();
        lengths.push(self.shared.len());
        lengths.push(self.dispatcher.queue.len());
        lengths.push(self.large_queue.len());
        lengths
    }

    /// Size-aware: whether core `core` takes from the small input
    /// ([`PackedDecision::takes_small_input`]; every core before the first decision).
    fn takes_small_input(&self, core: usize) -> bool {
        self.decision.is_none_or(|decision| {
            decision.takes_small_input(core, self.config.sizeaware.large_workers_help)
        })
    }

    /// Early binding: the core that owns request `req`'s key ([`decide::place`]).
    fn owner(&self, req: u32, reader: usize) -> usize {
        let request = self.trace.requests[req as usize];
        let workers = self.cores.len();
        match decide::place(self.config.policy, reader, workers, request.key_hash) {
            Placement::Worker { target, .. } => target,
            Placement::Inline | Placement::AnyWorker => reader,
        }
    }

    fn on_arrival(&mut self, index: u32) {
        let next = index as usize + 1;
        if next < self.arrivals.len() {
            self.events
                .push(self.arrivals[next], Event::Arrival(next as u32));
        }
        let request = self.trace.requests[index as usize];
        let workers = self.cores.len();
        let full = Job {
            req: index,
            stage: Stage::Full,
            extra_ns: 0,
        };
        match self.config.policy {
            Policy::Pinned => {
                let core = request.conn as usize % workers;
                self.cores[core].queue.push_back(full);
                self.try_start(core);
            }
            Policy::EarlyBinding => match self.config.steering {
                Steering::Nic => self.submit(full),
                Steering::Software => {
                    let home = request.conn as usize % workers;
                    let conn = &mut self.conns[request.conn as usize];
                    conn.unread.push_back(index);
                    self.cores[home].unread += 1;
                    if !conn.listed {
                        conn.listed = true;
                        self.cores[home].readable.push_back(request.conn);
                    }
                    self.try_start(home);
                }
            },
            Policy::Stealing => {
                let home = request.conn as usize % workers;
                self.cores[home].queue.push_back(full);
                self.try_start(home);
                if !self.cores[home].queue.is_empty() {
                    for core in 0..workers {
                        self.try_start(core);
                    }
                }
            }
            Policy::LateBinding => {
                self.dispatcher.queue.push_back(index);
                self.try_dispatch();
            }
            Policy::SizeAware => {
                self.shared.push_back(Job {
                    req: index,
                    stage: Stage::Front { large: false },
                    extra_ns: 0,
                });
                let small = self
                    .decision
                    .map_or(workers, |d| d.small_workers())
                    .min(workers);
                let start = (self.rotation % small.max(1) as u64) as usize;
                self.rotation = self.rotation.wrapping_add(1);
                for step in 0..small {
                    if self.shared.is_empty() {
                        break;
                    }
                    self.try_start((start + step) % small);
                }
                // Idle large cores that help take what the small ones left.
                for core in small..workers {
                    if self.shared.is_empty() {
                        break;
                    }
                    if self.takes_small_input(core) {
                        self.try_start(core);
                    }
                }
            }
        }
    }

    /// Gives an idle core its next job, if it has one.
    fn try_start(&mut self, core: usize) {
        if self.cores[core].current.is_some() {
            return;
        }
        let job = match self.config.policy {
            Policy::EarlyBinding if self.config.steering == Steering::Software => {
                self.next_software_job(core)
            }
            Policy::Pinned | Policy::EarlyBinding => self.cores[core].queue.pop_front(),
            Policy::Stealing => {
                if self.cores[core].queue.is_empty() {
                    self.steal_into(core);
                }
                self.cores[core].queue.pop_front()
            }
            Policy::LateBinding => self.shared.pop_front(),
            Policy::SizeAware => {
                // As the server's worker loop: the large queue first if this core takes from
                // it (a large core; a small one only while no core is large), then, on a
                // small core, the shared input.
                let workers = self.cores.len();
                let large =
                    decide::takes_shared_queue(self.config.policy, self.decision, core, workers)
                        .then(|| self.large_queue.pop_front())
                        .flatten();
                if large.is_some() {
                    large
                } else if self.takes_small_input(core) {
                    self.shared.pop_front()
                } else {
                    None
                }
            }
        };
        let Some(mut job) = job else {
            return;
        };
        let request = self.trace.requests[job.req as usize];
        let cost = &self.config.cost;
        let fixed = request.work_ns - request.transfer_ns;
        let duration = match job.stage {
            Stage::Full => request.work_ns,
            Stage::Front { .. } => {
                let workers = self.cores.len();
                let large = decide::hands_off(self.decision, request.size, workers);
                job.stage = Stage::Front { large };
                if large {
                    fixed + Nanos::from_f64(cost.handoff_ns).0
                } else {
                    request.work_ns
                }
            }
            Stage::Back => request.transfer_ns,
            Stage::LateWork => {
                Nanos::from_f64((1.0 - cost.parse_share) * fixed as f64).0 + request.transfer_ns
            }
            Stage::Steer => {
                let owner = self.owner(job.req, core);
                let conn = &mut self.conns[request.conn as usize];
                let alone = conn.released == 0;
                conn.released += 1;
                if owner == core && alone {
                    // The server's `submit`: the reader owns the key and nothing else of the
                    // connection is in flight, so it runs the request in place.
                    job.stage = Stage::Full;
                    request.work_ns
                } else {
                    let handoff = if owner == core { 0.0 } else { cost.handoff_ns };
                    Nanos::from_f64(cost.parse_share * fixed as f64 + handoff).0
                }
            }
        } + job.extra_ns;
        let index = job.req as usize;
        if self.started[index] == UNSET {
            self.started[index] = self.now;
        }
        let worker = &mut self.cores[core];
        worker.current = Some(job);
        worker.busy_ns += duration;
        self.events
            .push(self.now + Nanos(duration), Event::Done(core));
    }

    /// Software-steered early binding: the next job of core `core`, in the order of the
    /// server's early-binding worker loop (`run_queued`, then `poll_and_serve`): the read
    /// batch in progress goes on to its end (each connection read once, taking the requests
    /// it has when its turn comes); between batches a turn of the queue runs (the jobs
    /// queued when the turn starts, not those arriving during it); then the next batch takes
    /// up to [`EVENTS_PER_WAIT`] readable connections. With nothing readable, the queue's
    /// wake-up starts another turn.
    fn next_software_job(&mut self, core: usize) -> Option<Job> {
        loop {
            if let Some((conn, left)) = self.cores[core].reading {
                if left > 0 {
                    if let Some(req) = self.conns[conn as usize].unread.pop_front() {
                        self.cores[core].reading = Some((conn, left - 1));
                        self.cores[core].unread -= 1;
                        return Some(Job {
                            req,
                            stage: Stage::Steer,
                            extra_ns: 0,
                        });
                    }
                }
                // Re-armed: readable again if more arrived while it was being read.
                self.cores[core].reading = None;
                let state = &mut self.conns[conn as usize];
                if state.unread.is_empty() {
                    state.listed = false;
                } else {
                    self.cores[core].readable.push_back(conn);
                }
                continue;
            }
            if let Some(conn) = self.cores[core].batch.pop_front() {
                let left = self.conns[conn as usize].unread.len();
                self.cores[core].reading = Some((conn, left));
                continue;
            }
            let worker = &mut self.cores[core];
            if worker.turn_due {
                worker.turn_due = false;
                worker.turn = worker.queue.len();
            }
            if worker.turn > 0 {
                worker.turn -= 1;
                if let Some(job) = worker.queue.pop_front() {
                    return Some(job);
                }
                worker.turn = 0;
            }
            if worker.readable.is_empty() {
                if worker.queue.is_empty() {
                    return None;
                }
                worker.turn = worker.queue.len();
                continue;
            }
            let take = worker.readable.len().min(EVENTS_PER_WAIT);
            let batch: Vec<u32> = worker.readable.drain(..take).collect();
            worker.batch.extend(batch);
            worker.turn_due = true;
        }
    }

    /// Stealing: the idle `thief` takes every waiting request of one connection from the
    /// first core after it with a waiting request ([`decide::steal_victim`]), in order.
    fn steal_into(&mut self, thief: usize) {
        let lengths: Vec<usize> = self.cores.iter().map(|core| core.queue.len()).collect();
        let Some(victim) = decide::steal_victim(self.config.policy, thief, &lengths) else {
            return;
        };
        let Some(conn) = self.cores[victim]
            .queue
            .front()
            .map(|job| self.trace.requests[job.req as usize].conn)
        else {
            return;
        };
        let queue = std::mem::take(&mut self.cores[victim].queue);
        let (mut taken, kept): (VecDeque<Job>, VecDeque<Job>) = queue
            .into_iter()
            .partition(|job| self.trace.requests[job.req as usize].conn == conn);
        self.cores[victim].queue = kept;
        if let Some(first) = taken.front_mut() {
            first.extra_ns += Nanos::from_f64(self.config.cost.steal_ns).0;
        }
        self.cores[thief].queue.extend(taken);
        self.steals += 1;
    }

    fn on_done(&mut self, core: usize) {
        let Some(job) = self.cores[core].current.take() else {
            return;
        };
        let request = self.trace.requests[job.req as usize];
        match job.stage {
            Stage::Front { large } => {
                self.cores[core]
                    .histogram
                    .record(request.size, request.size);
                if large {
                    self.hand_off(job.req);
                } else {
                    self.finish(job.req, core);
                }
            }
            Stage::Steer => self.submit(Job {
                req: job.req,
                stage: Stage::LateWork,
                extra_ns: 0,
            }),
            Stage::Back => {
                if let Some(state) = self.sizeaware.as_mut() {
                    state.large_jobs += 1;
                }
                self.finish(job.req, core);
            }
            Stage::Full | Stage::LateWork => self.finish(job.req, core),
        }
        self.try_start(core);
    }

    /// Size-aware: a small core puts a large request in the large queue; an idle large core,
    /// if there is one, starts it (else the first large core to free up takes it).
    fn hand_off(&mut self, req: u32) {
        self.handoffs += 1;
        self.handed_off[req as usize] = true;
        self.large_queue.push_back(Job {
            req,
            stage: Stage::Back,
            extra_ns: 0,
        });
        let busy = self.busy_cores();
        let taker =
            decide::shared_queue_taker(self.config.policy, self.decision, &busy, self.handoffs);
        if let Some(core) = taker {
            self.try_start(core);
        }
    }

    fn busy_cores(&self) -> Vec<bool> {
        self.cores
            .iter()
            .map(|core| core.current.is_some())
            .collect()
    }

    fn try_dispatch(&mut self) {
        if self.dispatcher.current.is_some() {
            return;
        }
        let Some(req) = self.dispatcher.queue.pop_front() else {
            return;
        };
        let request = self.trace.requests[req as usize];
        let cost = &self.config.cost;
        let fixed = (request.work_ns - request.transfer_ns) as f64;
        let duration = Nanos::from_f64(cost.parse_share * fixed + cost.dispatch_ns).0;
        self.started[req as usize] = self.now;
        self.dispatcher.current = Some(req);
        self.dispatcher.busy_ns += duration;
        self.events
            .push(self.now + Nanos(duration), Event::DispatchDone);
    }

    fn on_dispatch_done(&mut self) {
        if let Some(req) = self.dispatcher.current.take() {
            self.submit(Job {
                req,
                stage: Stage::LateWork,
                extra_ns: 0,
            });
        }
        self.try_dispatch();
    }

    /// Early and late binding: hands the execution of a parsed request to its core, or, with
    /// `serialize_connections` (late binding), queues it behind its connection's executing
    /// request.
    fn submit(&mut self, job: Job) {
        if self.serializes() {
            let conn = &mut self.conns[self.trace.requests[job.req as usize].conn as usize];
            if conn.executing {
                conn.waiting.push_back(job);
                return;
            }
            conn.executing = true;
        }
        self.release(job);
    }

    /// Whether a connection's requests execute one at a time.
    fn serializes(&self) -> bool {
        self.config.serialize_connections && self.config.policy == Policy::LateBinding
    }

    fn release(&mut self, job: Job) {
        if self.config.policy == Policy::LateBinding {
            self.shared.push_back(job);
            let busy = self.busy_cores();
            let taker =
                decide::shared_queue_taker(self.config.policy, self.decision, &busy, self.rotation);
            if let Some(core) = taker {
                self.rotation = self.rotation.wrapping_add(1);
                self.try_start(core);
            }
        } else {
            let home = self.trace.requests[job.req as usize].conn as usize % self.cores.len();
            let owner = self.owner(job.req, home);
            self.cores[owner].queue.push_back(job);
            self.try_start(owner);
        }
    }

    /// The controller's epoch, as the server's controller thread runs it: merge every core's
    /// histogram, [`EpochDriver::tick`], publish.
    fn on_epoch(&mut self) {
        let Some(state) = self.sizeaware.as_mut() else {
            return;
        };
        let mut merged = SizeHistogram::new();
        for core in &mut self.cores {
            merged.merge(&core.histogram.take());
        }
        // Busy time by the role each core had during the epoch (the decision in force), as the
        // server's workers measure it.
        let mut busy = RoleBusy {
            large_jobs: std::mem::take(&mut state.large_jobs),
            ..RoleBusy::default()
        };
        let small_workers = self.decision.map_or(usize::MAX, |d| d.small_workers());
        for (index, (core, start)) in self
            .cores
            .iter()
            .zip(state.busy_at_epoch_start.iter_mut())
            .enumerate()
        {
            let spent = core.busy_ns - *start;
            *start = core.busy_ns;
            if index < small_workers {
                busy.small_ns += spent;
            } else {
                busy.large_ns += spent;
            }
        }
        let decision = decide::end_epoch(&mut state.driver, &merged, busy);
        let changed = self.decision != Some(decision);
        self.decision = Some(decision);
        if changed {
            self.note_decision(decision);
        }
        for core in 0..self.cores.len() {
            self.try_start(core);
        }
        self.events.push(self.now + self.config.epoch, Event::Epoch);
    }

    fn note_decision(&mut self, decision: PackedDecision) {
        self.decisions.push(DecisionPoint {
            at_ms: self.now.as_secs_f64() * 1e3,
            threshold_bytes: decision.threshold(),
            small_workers: decision.small_workers(),
        });
    }

    /// A request's last stage ended on `core`: deliver its reply, and any later replies of
    /// its connection that were waiting for it.
    fn finish(&mut self, req: u32, core: usize) {
        let index = req as usize;
        self.finished[index] = self.now;
        self.served_by[index] = core;
        let request = self.trace.requests[index];
        if self.config.policy == Policy::EarlyBinding && self.config.steering == Steering::Software
        {
            let conn = &mut self.conns[request.conn as usize];
            conn.released = conn.released.saturating_sub(1);
        }
        if self.serializes() {
            let conn = &mut self.conns[request.conn as usize];
            conn.executing = false;
            if let Some(next) = conn.waiting.pop_front() {
                conn.executing = true;
                self.release(next);
            }
        }
        let conn = &mut self.conns[request.conn as usize];
        if request.conn_seq != conn.next {
            conn.held.insert(request.conn_seq, (req, self.now));
            return;
        }
        let mut ready = vec![req];
        conn.next += 1;
        while let Some((held, _)) = conn.held.remove(&conn.next) {
            ready.push(held);
            conn.next += 1;
        }
        let at = self.now.max(conn.last_delivery);
        conn.last_delivery = at;
        for delivered in ready {
            self.deliver(delivered, at);
        }
    }

    fn deliver(&mut self, req: u32, at: Nanos) {
        let index = req as usize;
        self.delivered += 1;
        if at >= self.window_start {
            self.delivered_in_window += 1;
        }
        let request = self.trace.requests[index];
        if index >= self.warmup {
            let latency = (at - self.arrivals[index]).0;
            let in_server = (at - self.started[index]).0;
            let (total, server) = if request.large {
                (&mut self.large, &mut self.large_in_server)
            } else {
                (&mut self.small, &mut self.small_in_server)
            };
            total.record(latency);
            server.record(in_server);
        }
        if self.config.record_requests {
            self.records.push(RequestRecord {
                conn: request.conn,
                conn_seq: request.conn_seq,
                arrival: self.arrivals[index],
                started: self.started[index],
                finished: self.finished[index],
                delivered: at,
                served_by: self.served_by[index],
                handed_off: self.handed_off[index],
                size: request.size,
            });
        }
    }

    fn result(&mut self) -> RunResult {
        let end = self.now;
        let window = (end - self.window_start).as_secs_f64();
        let achieved = if window > 0.0 {
            self.delivered_in_window as f64 / window
        } else {
            0.0
        };
        let span_ns = end.0.max(1) as f64;
        let mut utilization: Vec<f64> = self
            .cores
            .iter()
            .map(|core| core.busy_ns as f64 / span_ns)
            .collect();
        if self.config.policy == Policy::LateBinding {
            utilization.push(self.dispatcher.busy_ns as f64 / span_ns);
        }
        let window_ns = (end - self.window_start).0.max(1) as f64;
        let mean_queued_by_queue: Vec<f64> = self
            .queued_area
            .iter()
            .map(|area| area / window_ns)
            .collect();
        RunResult {
            policy: self.config.policy,
            cores: self.config.cores,
            offered_rps: self.config.rate,
            achieved_rps: achieved,
            requests: self.trace.requests.len() as u64,
            small: self.small.summary(),
            large: self.large.summary(),
            small_in_server: self.small_in_server.summary(),
            large_in_server: self.large_in_server.summary(),
            mean_queued: mean_queued_by_queue.iter().sum(),
            mean_queued_by_queue,
            utilization,
            handoffs: self.handoffs,
            steals: self.steals,
            epochs: self
                .sizeaware
                .as_ref()
                .map_or(0, |state| state.driver.epochs()),
            decisions: std::mem::take(&mut self.decisions),
            simulated_s: end.as_secs_f64(),
            histograms: LatencyHistograms {
                small: self.small.histogram().clone(),
                large: self.large.histogram().clone(),
                small_in_server: self.small_in_server.histogram().clone(),
                large_in_server: self.large_in_server.histogram().clone(),
            },
            records: std::mem::take(&mut self.records),
        }
    }
}
