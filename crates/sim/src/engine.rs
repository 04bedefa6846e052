//! One simulated run: a trace, a policy, an offered rate → latencies, throughput, queues.
//!
//! ```text
//!   Arrival(i) ──► strategy.arrive ──► a queue ──► idle core? ──► start: Done(core) at now + cost
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
//! ```
//!
//! What differs by policy is a strategy ([`crate::strategies`], one file per policy): where an
//! arrival goes, what an idle core takes next (`strategy.next_job`), the policy's own queues
//! and controller. Every dispatch decision is a call in [`crate::decide`], the policy crate's
//! code the server runs too.
//!
//! Events are ordered by `(time, seq)` ([`EventQueue`]); nothing reads a clock; every random
//! choice was made when the trace was generated. Replies of a connection are delivered in
//! request order: a reply that finishes before an earlier one of its connection waits for it
//! (as the real server's sequenced write side does).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use tailtrim_policy::sizeaware::PackedDecision;

use crate::events::EventQueue;
use crate::policy::Policy;
use crate::stats::{LatencyHistograms, LatencyRecorder, LatencySummary};
use crate::strategies::early_binding::EarlyBinding;
use crate::strategies::host::{Event, Host, Job, Stage, Strategy};
use crate::strategies::late_binding::LateBinding;
use crate::strategies::pinned::Pinned;
use crate::strategies::size_aware::SizeAware;
use crate::strategies::stealing::Stealing;
use crate::time::Nanos;
use crate::workload::{Trace, TraceRequest};
use crate::SimError;

pub use crate::settings::{RunConfig, Steering, DEFAULT_EPOCH, DEFAULT_WARMUP_FRACTION};
pub use crate::strategies::early_binding::EVENTS_PER_WAIT;

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

#[derive(Debug, Default)]
struct Core {
    current: Option<Job>,
    /// The core's own job queue (pinned, early binding, stealing).
    queue: VecDeque<Job>,
    busy_ns: u64,
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
}

/// The state of one run under policy `S`.
struct Sim<'t, S> {
    config: &'t RunConfig,
    trace: &'t Trace,
    strategy: S,
    arrivals: Vec<Nanos>,
    now: Nanos,
    events: EventQueue<Event>,
    cores: Vec<Core>,
    conns: Vec<ConnState>,
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
    // The one place that names every policy: each is a strategy (`crate::strategies`).
    Ok(match config.policy {
        Policy::Pinned => simulate(trace, config, workers, Pinned),
        Policy::EarlyBinding => simulate(
            trace,
            config,
            workers,
            EarlyBinding::new(config.steering, workers, trace.connections),
        ),
        Policy::Stealing => simulate(trace, config, workers, Stealing::default()),
        Policy::LateBinding => simulate(
            trace,
            config,
            workers,
            LateBinding::new(config.serialize_connections),
        ),
        Policy::SizeAware => simulate(
            trace,
            config,
            workers,
            SizeAware::new(&config.sizeaware, workers, config.epoch)?,
        ),
    })
}

fn simulate<S: Strategy>(
    trace: &Trace,
    config: &RunConfig,
    workers: usize,
    strategy: S,
) -> RunResult {
    let count = trace.requests.len();
    let arrivals = trace.arrivals(config.rate);
    let warmup = ((count as f64 * config.warmup_fraction) as usize).min(count - 1);
    let window_start = arrivals[warmup];
    let mut sim = Sim {
        config,
        trace,
        strategy,
        arrivals,
        now: Nanos::ZERO,
        events: EventQueue::new(),
        cores: (0..workers).map(|_| Core::default()).collect(),
        conns: (0..trace.connections)
            .map(|_| ConnState::default())
            .collect(),
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
        decisions: Vec::new(),
        records: Vec::new(),
    };
    sim.run()
}

impl<S: Strategy> Host for Sim<'_, S> {
    type Strategy = S;

    fn strategy(&mut self) -> &mut S {
        &mut self.strategy
    }

    fn config(&self) -> &RunConfig {
        self.config
    }

    fn workers(&self) -> usize {
        self.cores.len()
    }

    fn request(&self, req: u32) -> TraceRequest {
        self.trace.requests[req as usize]
    }

    fn now(&self) -> Nanos {
        self.now
    }

    fn queue(&mut self, core: usize) -> &mut VecDeque<Job> {
        &mut self.cores[core].queue
    }

    fn busy(&self) -> Vec<bool> {
        self.cores
            .iter()
            .map(|core| core.current.is_some())
            .collect()
    }

    fn busy_ns(&self, core: usize) -> u64 {
        self.cores[core].busy_ns
    }

    fn try_start(&mut self, core: usize) {
        Sim::try_start(self, core)
    }

    fn submit(&mut self, job: Job) {
        Sim::submit(self, job)
    }

    fn finish(&mut self, req: u32, core: usize) {
        Sim::finish(self, req, core)
    }

    fn push_event(&mut self, at: Nanos, event: Event) {
        self.events.push(at, event);
    }

    fn set_started(&mut self, req: u32) {
        self.started[req as usize] = self.now;
    }

    fn mark_handed_off(&mut self, req: u32) {
        self.handed_off[req as usize] = true;
    }

    fn note_decision(&mut self, decision: PackedDecision) {
        self.decisions.push(DecisionPoint {
            at_ms: self.now.as_secs_f64() * 1e3,
            threshold_bytes: decision.threshold(),
            small_workers: decision.small_workers(),
        });
    }
}

impl<S: Strategy> Sim<'_, S> {
    fn run(&mut self) -> RunResult {
        let count = self.trace.requests.len();
        S::start(self);
        self.events.push(self.arrivals[0], Event::Arrival(0));
        while self.delivered < count {
            let Some((at, event)) = self.events.pop() else {
                break;
            };
            self.advance(at);
            match event {
                Event::Arrival(index) => self.on_arrival(index),
                Event::Done(core) => self.on_done(core),
                Event::DispatchDone => S::on_dispatch_done(self),
                Event::Epoch => S::on_epoch(self),
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
            .enumerate()
            .map(|(index, core)| core.queue.len() + self.strategy.unread(index))
            .collect();
        lengths.extend(self.strategy.queue_lengths());
        lengths
    }

    fn on_arrival(&mut self, index: u32) {
        let next = index as usize + 1;
        if next < self.arrivals.len() {
            self.events
                .push(self.arrivals[next], Event::Arrival(next as u32));
        }
        S::arrive(self, index);
    }

    /// Gives an idle core its next job, if it has one.
    fn try_start(&mut self, core: usize) {
        if self.cores[core].current.is_some() {
            return;
        }
        let Some(mut job) = S::next_job(self, core) else {
            return;
        };
        let request = self.trace.requests[job.req as usize];
        let config = self.config;
        let cost = &config.cost;
        let fixed = request.work_ns - request.transfer_ns;
        let duration = match job.stage {
            Stage::Full => request.work_ns,
            Stage::Front { .. } => {
                let large = self.strategy.front_is_large(request.size, self.cores.len());
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
                let (owned, alone) = S::steer(self, job.req, core);
                if owned && alone {
                    // The server's `submit`: the reader owns the key and nothing else of the
                    // connection is in flight, so it runs the request in place.
                    job.stage = Stage::Full;
                    request.work_ns
                } else {
                    let handoff = if owned { 0.0 } else { cost.handoff_ns };
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

    fn on_done(&mut self, core: usize) {
        let Some(job) = self.cores[core].current.take() else {
            return;
        };
        match job.stage {
            Stage::Front { large } => S::front_done(self, core, job.req, large),
            Stage::Steer => self.submit(Job::new(job.req, Stage::LateWork)),
            Stage::Back => {
                self.strategy.back_done();
                self.finish(job.req, core);
            }
            Stage::Full | Stage::LateWork => self.finish(job.req, core),
        }
        self.try_start(core);
    }

    /// Early and late binding: hands the execution of a parsed request to its core, or, with
    /// `serialize_connections` (late binding), queues it behind its connection's executing
    /// request.
    fn submit(&mut self, job: Job) {
        if self.strategy.serializes() {
            let conn = &mut self.conns[self.trace.requests[job.req as usize].conn as usize];
            if conn.executing {
                conn.waiting.push_back(job);
                return;
            }
            conn.executing = true;
        }
        S::release(self, job);
    }

    /// A request's last stage ended on `core`: deliver its reply, and any later replies of
    /// its connection that were waiting for it.
    fn finish(&mut self, req: u32, core: usize) {
        let index = req as usize;
        self.finished[index] = self.now;
        self.served_by[index] = core;
        let request = self.trace.requests[index];
        self.strategy.finished(request.conn);
        if self.strategy.serializes() {
            let conn = &mut self.conns[request.conn as usize];
            conn.executing = false;
            if let Some(next) = conn.waiting.pop_front() {
                conn.executing = true;
                S::release(self, next);
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
        if let Some(busy_ns) = self.strategy.extra_busy_ns() {
            utilization.push(busy_ns as f64 / span_ns);
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
            handoffs: self.strategy.handoffs(),
            steals: self.strategy.steals(),
            epochs: self.strategy.epochs(),
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
