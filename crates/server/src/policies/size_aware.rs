//! `size-aware` (Minos, Didona & Zwaenepoel): small workers share one epoll,
//! read, parse and execute; a reply (or an incoming value) larger than the
//! threshold moves to the large workers' queue. A controller thread turns the
//! sizes seen each epoch into the next threshold and split.
//!
//! ```text
//!  small workers ── shared epoll ─► read+parse+execute ─► reply ≤ T: send here
//!        │                                            └─► reply > T: Job::Send ─┐
//!        └─ SET declared > T, value still arriving ─► Job::Receive ─────────────┤
//!  large workers ◄──────────────────── queue ◄────────────────────────────────────┘
//!  controller: every epoch merges the workers' size histograms ─► threshold, split
//!              (split_by = busy: and the workers' CPU time by role, sampled by each
//!               worker from its own thread CPU clock at most every 10 ms)
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use tailtrim_policy::sizeaware::{
    Epoch, PackedDecision, RoleBusy, SizeAwareConfig, SizeAwareController, SizeHistogram,
    SizeWindow, SplitBy,
};
use tailtrim_proto::reply::ReplyBuf;
use tailtrim_proto::request::declared_total;

use super::{EpollLayout, Executed, Placement, Policy, PolicyStats, IDLE_WAIT_MS};
use crate::affinity::thread_cpu_ns;
use crate::config::{DispatchPolicy, ServerConfig};
use crate::runtime::{FlushMode, Runtime};
use crate::session::{Conn, Job, ReadSide};
use crate::stats::bump;

/// The size-aware policy's live decision, samples and large-job queue.
pub struct SizeAware {
    workers: usize,
    fixed_threshold: Option<u64>,
    fixed_split: Option<usize>,
    controller: SizeAwareConfig,
    epoch: Duration,
    /// The live decision (threshold: reply size for GETs, value size for
    /// SETs; workers below the split are small), one [`PackedDecision`] so
    /// an epoch's threshold and split are published together.
    decision: AtomicU64,
    handoffs: AtomicU64,
    epochs: AtomicU64,
    last_decision: Mutex<Vec<(&'static str, String)>>,
    /// Size histograms recorded by readers since the last epoch, per worker.
    samples: Vec<Mutex<SizeHistogram>>,
    /// CPU time by role since the last epoch, per worker (`split_by = busy` only).
    busy: Vec<WorkerBusy>,
    /// Large jobs the large workers completed since the last epoch.
    large_jobs: AtomicU64,
    queue: (Sender<Job>, Receiver<Job>),
}

/// How often a worker reads its thread CPU clock (a system call) at most.
const BUSY_SAMPLE_INTERVAL: Duration = Duration::from_millis(10);

/// One worker's CPU time, split by the role it had when it was sampled.
#[derive(Default)]
struct WorkerBusy {
    small_ns: AtomicU64,
    large_ns: AtomicU64,
    /// When the worker last read its CPU clock, and what it read (only the worker takes it).
    last: Mutex<Option<(Instant, u64)>>,
}

impl WorkerBusy {
    /// Called by the worker itself: adds the CPU time used since the last sample to the role
    /// it has now, if the last sample is at least [`BUSY_SAMPLE_INTERVAL`] old.
    fn sample(&self, small: bool) {
        let now = Instant::now();
        let mut last = self.last.lock();
        if let Some((at, _)) = *last {
            if now.duration_since(at) < BUSY_SAMPLE_INTERVAL {
                return;
            }
        }
        let Some(cpu) = thread_cpu_ns() else {
            return;
        };
        if let Some((_, before)) = *last {
            let spent = cpu.saturating_sub(before);
            let role = if small {
                &self.small_ns
            } else {
                &self.large_ns
            };
            role.fetch_add(spent, Ordering::Relaxed);
        }
        *last = Some((now, cpu));
    }
}

impl SizeAware {
    /// From the `[sizeaware]` and `[workers]` sections.
    pub fn new(config: &ServerConfig) -> SizeAware {
        let workers = config.workers.threads;
        let section = &config.sizeaware;
        let fixed_threshold = (section.fixed_threshold > 0).then_some(section.fixed_threshold);
        let fixed_split = (section.fixed_small_workers > 0).then_some(section.fixed_small_workers);
        let mut controller = SizeAwareConfig::with_workers(workers);
        controller.percentile = section.percentile;
        controller.fixed_threshold_bytes = fixed_threshold;
        controller.fixed_small_workers = fixed_split;
        // `ServerConfig::validate` rejected an unknown name.
        controller.split_by = SplitBy::parse(&section.split_by).unwrap_or_default();
        let small = fixed_split
            .unwrap_or(workers.saturating_sub(1).max(1))
            .clamp(1, workers.max(1));
        SizeAware {
            workers,
            fixed_threshold,
            fixed_split,
            controller,
            epoch: Duration::from_millis(section.epoch_ms),
            decision: AtomicU64::new(PackedDecision::new(fixed_threshold, small).0),
            handoffs: AtomicU64::new(0),
            epochs: AtomicU64::new(0),
            last_decision: Mutex::new(Vec::new()),
            samples: (0..workers)
                .map(|_| Mutex::new(SizeHistogram::new()))
                .collect(),
            busy: (0..workers).map(|_| WorkerBusy::default()).collect(),
            large_jobs: AtomicU64::new(0),
            queue: crossbeam_channel::unbounded(),
        }
    }

    fn decision(&self) -> PackedDecision {
        PackedDecision(self.decision.load(Ordering::Acquire))
    }

    fn threshold(&self) -> u64 {
        self.decision().threshold()
    }

    fn large_workers_available(&self) -> bool {
        self.decision().small_workers() < self.workers
    }
}

impl Policy for SizeAware {
    fn kind(&self) -> DispatchPolicy {
        DispatchPolicy::SizeAware
    }

    fn layout(&self) -> EpollLayout {
        EpollLayout::Shared
    }

    fn place(&self, _key: Option<&[u8]>, _reader: usize) -> Placement {
        Placement::Inline
    }

    fn release(&self, _rt: &Runtime, _target: usize, job: Job) {
        let _ = self.queue.0.send(job);
    }

    fn worker_step(&self, rt: &Runtime, worker: usize, tokens: &mut Vec<u64>) {
        let small = worker < self.decision().small_workers();
        if self.controller.split_by == SplitBy::Busy {
            if let Some(busy) = self.busy.get(worker) {
                busy.sample(small);
            }
        }
        if small {
            if !self.large_workers_available() {
                // The split moved every worker to small: serve the large
                // jobs queued before it did, or they would be stranded.
                while let Ok(job) = self.queue.1.try_recv() {
                    rt.run_job(job, worker);
                }
            }
            rt.poll_and_serve(0, worker, tokens, IDLE_WAIT_MS);
        } else if let Ok(job) = self
            .queue
            .1
            .recv_timeout(Duration::from_millis(IDLE_WAIT_MS as u64))
        {
            rt.run_job(job, worker);
            bump(&self.large_jobs);
        }
    }

    fn helper_thread(&self) -> Option<&'static str> {
        Some("controller")
    }

    /// The controller: every epoch merges the workers' samples and publishes
    /// the new threshold and split.
    fn run_helper(&self, rt: &Runtime) {
        let Ok(mut controller) = SizeAwareController::new(self.controller.clone()) else {
            eprintln!("tailtrim: invalid size-aware configuration; keeping the initial split");
            return;
        };
        let mut window: SizeWindow = controller.new_window();
        let mut epoch_index = 0u64;
        let mut slept = Duration::ZERO;
        let tick = Duration::from_millis(20).min(self.epoch);
        while !rt.stopping() {
            std::thread::sleep(tick);
            slept += tick;
            if slept < self.epoch {
                continue;
            }
            slept = Duration::ZERO;
            epoch_index += 1;
            let mut merged = SizeHistogram::new();
            for samples in &self.samples {
                merged.merge(&samples.lock().take());
            }
            let mut busy = RoleBusy {
                large_jobs: self.large_jobs.swap(0, Ordering::Relaxed),
                ..RoleBusy::default()
            };
            for worker in &self.busy {
                busy.small_ns += worker.small_ns.swap(0, Ordering::Relaxed);
                busy.large_ns += worker.large_ns.swap(0, Ordering::Relaxed);
            }
            window.advance_to(Epoch(epoch_index));
            window.absorb_epoch(Epoch(epoch_index), &merged);
            let decision = controller.on_epoch_with_busy(&window, busy);
            // Threshold and split of this epoch, published as one unit.
            let mut next = self.decision();
            if self.fixed_threshold.is_none() {
                next = next.with_threshold(Some(decision.threshold_bytes));
            }
            if self.fixed_split.is_none() {
                next = next.with_small_workers(decision.small_workers.clamp(1, self.workers));
            }
            self.decision.store(next.0, Ordering::Release);
            bump(&self.epochs);
            *self.last_decision.lock() = decision.stats();
        }
    }

    fn wants_large_receive(&self, read: &ReadSide) -> bool {
        if read.swallow > 0 || !self.large_workers_available() {
            return false;
        }
        match declared_total(&read.input) {
            Some(total) => total > read.input.len() && total as u64 > self.threshold(),
            None => false,
        }
    }

    fn hand_off_receive(&self, _rt: &Runtime, conn: &Arc<Conn>) {
        bump(&self.handoffs);
        let _ = self.queue.0.send(Job::Receive {
            conn: Arc::clone(conn),
        });
    }

    fn class_threshold(&self) -> u64 {
        self.threshold()
    }

    fn finish_inline(
        &self,
        rt: &Runtime,
        conn: &Arc<Conn>,
        seq: u64,
        reply: ReplyBuf,
        executed: Executed,
        worker: usize,
        receiving: bool,
        arrived_at: Instant,
    ) {
        // Sizes of items accessed: stored values and hits. A miss and
        // commands that touch no value (`stats`, `delete`, ...) are not
        // recorded.
        if executed.accessed {
            if let Some(samples) = self.samples.get(worker) {
                samples.lock().record(executed.size, executed.size);
            }
        }
        let large =
            receiving || (executed.size > self.threshold() && self.large_workers_available());
        if large && !receiving && !executed.storage {
            bump(&self.handoffs);
            // The large worker that sends it is charged its emulated cost.
            let _ = self.queue.0.send(Job::Send {
                conn: Arc::clone(conn),
                seq,
                reply,
                units: executed.charge.units,
                arrived_at,
            });
            return;
        }
        let mode = if receiving {
            FlushMode::Blocking
        } else {
            FlushMode::Deferred
        };
        rt.complete(conn, seq, reply, worker, mode, Some(executed.charge));
        rt.record_latency(worker, large, arrived_at);
    }

    fn stats(&self, _workers: usize) -> PolicyStats {
        let decision = self.decision();
        let threshold = decision.threshold();
        PolicyStats {
            small_workers: decision.small_workers(),
            threshold: (threshold != PackedDecision::NO_THRESHOLD).then_some(threshold),
            handoffs: self.handoffs.load(Ordering::Relaxed),
            steals: 0,
            epochs: self.epochs.load(Ordering::Relaxed),
            decision: self.last_decision.lock().clone(),
        }
    }

    fn reset_stats(&self) {
        self.handoffs.store(0, Ordering::Relaxed);
    }

    fn set_split(&self, small: usize) {
        let next = self
            .decision()
            .with_small_workers(small.clamp(1, self.workers.max(1)));
        self.decision.store(next.0, Ordering::Release);
    }
}
