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
//!        └─ large_workers_help: with the queue empty, serve the shared epoll as a small one,
//!           then wait on the queue 1 ms, doubling to 16 ms while neither side has work; then
//!           park on the help bell (help_bell.rs) until a large job is queued, every small
//!           worker is busy serving (a call that goes quiet for a while after wake-ups that
//!           found nothing), the server stops or the split moves; woken, it looks at the
//!           connections once and parks again unless it finds work there
//!  at rest every thread blocks (small workers 100 ms per epoll wait, as pinned's do), so an
//!  idle size-aware server wakes about as seldom as a pinned one, and at low load the
//!  helping large workers sleep while the small workers keep up
//!  controller: every epoch merges the workers' size histograms ─► EpochDriver::tick
//!              ─► threshold and split, stored as one PackedDecision
//!              (sizes, and for split_by = busy CPU time by role: measure.rs)
//! ```
//!
//! Which reply moves, who takes from the large queue (`PackedDecision`) and each epoch's
//! decision (`EpochDriver`) are the policy crate's, as in the simulator.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tailtrim_policy::sizeaware::{EpochDriver, PackedDecision, SizeClass, SplitBy};
use tailtrim_proto::request::declared_total;

use super::help_bell::HelpBell;
use super::host::{Completion, FlushMode, WorkerHost};
use super::measure::EpochMeasure;
use super::strategy::{EpollLayout, InlineReply, Policy, PolicyStats, Registration, IDLE_WAIT_MS};
use crate::config::{DispatchPolicy, ServerConfig};
use crate::priority::ClassQueue;
use crate::session::{Conn, Job, ReadSide};
use crate::stats::bump;

/// How long a helping large worker first waits for a large job before it looks at the small
/// workers' connections again; each turn that finds work on neither side doubles the wait, up
/// to [`HELP_POLL_MAX_MS`], and a turn that finds some starts again from here. A large job
/// ends the wait at once whatever its length: only the look at the connections is delayed.
const HELP_POLL_MS: u32 = 1;

/// The longest wait on the large queue of a helping large worker before it parks on the help
/// bell (a fixed 1 ms poll woke each large worker a thousand times a second at rest: most of an
/// idle size-aware server's CPU; polling at 16 ms still woke it about once per request at the
/// tier experiment's load).
const HELP_POLL_MAX_MS: u32 = 16;

/// [`SizeAware::help_wait_ms`] of a helping large worker parked on the bell.
const HELP_PARKED: u32 = u32::MAX;

/// The longest a helping large worker stays parked on the bell without a ring: the server's
/// stop and a moved split ring every parked worker ([`HelpBell::ring_all`]), so this only
/// bounds a ring lost in a race. Parked for a small worker's 100 ms wait instead, the two
/// large workers woke 20 times a second at rest: 0.08 wake-ups per request at the tier
/// experiment's per-server load (`experiments/tier/loopback-size-aware-edge/`).
const HELP_PARK_MS: u64 = 1000;

/// How long a small worker blocks on the shared epoll when it takes no large jobs: pinned's
/// wait (the split, re-read after each wait, moves at most once an epoch).
const SMALL_WAIT_MS: i32 = IDLE_WAIT_MS * 20;

/// How often the controller looks whether an epoch has ended (and whether the server stops):
/// a small worker's wait, so that a stop waits no longer for it than for them. Waking every
/// 20 ms cost eight idle-looking servers a few milliseconds of CPU a second.
const CONTROLLER_TICK_MS: u64 = SMALL_WAIT_MS as u64;

/// The helping large worker's next wait on the large queue after a turn that `served`
/// something (or not) and waited `previous_ms` before: [`HELP_PARKED`] once the doubled wait
/// would pass [`HELP_POLL_MAX_MS`].
fn next_help_wait_ms(previous_ms: u32, served: bool) -> u32 {
    if served {
        return HELP_POLL_MS;
    }
    match previous_ms.saturating_mul(2) {
        wait if wait > HELP_POLL_MAX_MS => HELP_PARKED,
        wait => wait.max(HELP_POLL_MS),
    }
}

/// The size-aware policy's live decision, samples and large-job queue.
pub struct SizeAware {
    workers: usize,
    split_by: SplitBy,
    /// Idle large workers serve the small workers' connections too.
    large_workers_help: bool,
    /// Waits on the small workers' connections that a large worker served something in.
    large_worker_serves: AtomicU64,
    /// Per worker, its next wait on the large queue while it helps ([`next_help_wait_ms`]).
    help_wait_ms: Vec<AtomicU32>,
    /// Where helping large workers park, and the small workers' busy count that rings it.
    help_bell: HelpBell,
    epoch: Duration,
    /// The controller (`None` if the configuration was invalid: the initial split stays).
    driver: Mutex<Option<EpochDriver>>,
    /// The live decision (threshold: reply size for GETs, value size for
    /// SETs; workers below the split are small), one [`PackedDecision`] so
    /// an epoch's threshold and split are published together.
    decision: AtomicU64,
    handoffs: AtomicU64,
    last_decision: Mutex<Vec<(&'static str, String)>>,
    /// Sizes (and, for `split_by = busy`, CPU time by role) since the last epoch.
    measure: EpochMeasure,
    /// The large jobs, first come, first served. A waiting large worker sleeps on its
    /// condition variable at once: a channel whose receive spins and yields the CPU before it
    /// sleeps (`sched_yield` several times per wait) cost the large workers a context switch
    /// per yield on a busy host, most of size-aware's CPU above pinned's.
    queue: ClassQueue<Job>,
}

impl SizeAware {
    /// From the `[sizeaware]` and `[workers]` sections.
    pub fn new(config: &ServerConfig) -> SizeAware {
        let workers = config.workers.threads;
        let controller = config.sizeaware.controller(workers);
        let split_by = controller.split_by;
        let large_workers_help = controller.large_workers_help;
        // `ServerConfig::validate` rejected what the controller would; without one, every
        // request stays small.
        let driver = EpochDriver::new(controller).ok();
        let initial = driver
            .as_ref()
            .map_or(PackedDecision::new(None, 1), EpochDriver::published);
        SizeAware {
            workers,
            split_by,
            large_workers_help,
            large_worker_serves: AtomicU64::new(0),
            help_wait_ms: (0..workers).map(|_| AtomicU32::new(HELP_POLL_MS)).collect(),
            help_bell: HelpBell::new(workers),
            epoch: Duration::from_millis(config.sizeaware.epoch_ms),
            driver: Mutex::new(driver),
            decision: AtomicU64::new(initial.0),
            handoffs: AtomicU64::new(0),
            last_decision: Mutex::new(Vec::new()),
            measure: EpochMeasure::new(workers),
            queue: ClassQueue::new(None),
        }
    }

    pub(super) fn decision(&self) -> PackedDecision {
        PackedDecision(self.decision.load(Ordering::Acquire))
    }

    /// A size sample from worker `worker`, for the next epoch.
    pub(super) fn record_size(&self, worker: usize, size: u64) {
        self.measure.record_size(worker, size);
    }

    /// Ends an epoch: merges the workers' samples and busy time, lets the controller decide
    /// and publishes threshold and split as one unit.
    /// One turn of large worker `worker` that helps: a large job if one is queued, else the
    /// small workers' connections, else a wait for a large job ([`next_help_wait_ms`]).
    fn help_step(&self, rt: &dyn WorkerHost, worker: usize, tokens: &mut Vec<u64>) {
        let Some(help_wait) = self.help_wait_ms.get(worker) else {
            return;
        };
        let served = if let Some(job) = self.queue.try_pop() {
            rt.run_job(job, worker);
            self.measure.large_job_done();
            true
        } else if help_wait.load(Ordering::Relaxed) == HELP_PARKED {
            // Nothing has needed it for a while: sleep until a large job, a call for help
            // (every small worker busy), the stop or a moved split ([`HELP_PARK_MS`] at
            // most). Woken, one look at the connections: only what it finds there keeps it
            // polling (a large job is taken on the next turn); otherwise it parks again, and
            // the bell rings again while the small workers stay busy.
            let wait = Duration::from_millis(HELP_PARK_MS);
            if self
                .help_bell
                .park(wait, || rt.stopping() || !self.queue.is_empty())
            {
                let served = self.serve_small(rt, worker, tokens);
                if served || !self.queue.is_empty() {
                    self.help_bell.woke_for_work();
                } else {
                    self.help_bell.woke_for_nothing();
                }
                served
            } else {
                false
            }
        } else if self.serve_small(rt, worker, tokens) {
            true
        } else {
            // Nothing for it on either side: wait for a large job, then look at the
            // connections again (the small workers wait on those, so a request that comes
            // meanwhile goes to them while any is free).
            let wait = help_wait.load(Ordering::Relaxed);
            match self
                .queue
                .pop_timeout(Duration::from_millis(u64::from(wait)))
            {
                Some(job) => {
                    rt.run_job(job, worker);
                    self.measure.large_job_done();
                    true
                }
                None => false,
            }
        };
        let previous = help_wait.load(Ordering::Relaxed);
        help_wait.store(next_help_wait_ms(previous, served), Ordering::Relaxed);
    }

    /// Large worker `worker` serves what is ready on the small workers' connections now, if
    /// anything. True if it served something.
    fn serve_small(&self, rt: &dyn WorkerHost, worker: usize, tokens: &mut Vec<u64>) -> bool {
        let served = rt.poll_and_serve(0, worker, tokens, 0);
        self.help_bell.turn_over(worker);
        if served {
            bump(&self.large_worker_serves);
        }
        served
    }

    /// Queues a large job and wakes a large worker for it (one waiting on the queue, or one
    /// parked on the help bell).
    fn push_large(&self, job: Job) {
        self.queue.push(0, job);
        self.help_bell.ring();
    }

    pub(super) fn end_epoch(&self) {
        let mut driver = self.driver.lock();
        let Some(driver) = driver.as_mut() else {
            return;
        };
        let (sizes, busy) = self.measure.take();
        let decision = driver.tick(&sizes, busy);
        let before = self.decision();
        let next = driver.published();
        self.decision.store(next.0, Ordering::Release);
        *self.last_decision.lock() = decision.stats();
        if next.small_workers() != before.small_workers() {
            self.help_bell.ring_all();
        }
    }
}

impl Policy for SizeAware {
    fn kind(&self) -> DispatchPolicy {
        DispatchPolicy::SizeAware
    }

    fn layout(&self) -> EpollLayout {
        EpollLayout::Shared
    }

    /// Edge-triggered: no re-arm per request on the shared epoll (one-shot cost one
    /// `epoll_ctl` per request, pinned's armed registrations none).
    fn registration(&self) -> Registration {
        Registration::EdgeTriggered
    }

    fn workers(&self) -> usize {
        self.workers
    }

    fn hands_off(&self, size: u64) -> bool {
        self.decision().class_of(size, self.workers) == SizeClass::Large
    }

    fn takes_shared_queue(&self, worker: usize) -> bool {
        self.decision().takes_large_queue(worker, self.workers)
    }

    fn release(&self, _rt: &dyn WorkerHost, _target: usize, job: Job) {
        self.push_large(job);
    }

    fn took_events(&self, _index: usize, worker: usize, events: usize) {
        if self.large_workers_help {
            let small_workers = self.decision().small_workers();
            self.help_bell.took_events(worker, events, small_workers);
        }
    }

    fn worker_step(&self, rt: &dyn WorkerHost, worker: usize, tokens: &mut Vec<u64>) {
        let decision = self.decision();
        let small = worker < decision.small_workers();
        if self.split_by == SplitBy::Busy {
            self.measure.sample_busy(worker, small);
        }
        let takes_large = decision.takes_large_queue(worker, self.workers);
        if small {
            if takes_large {
                // The split moved every worker to small: serve the large
                // jobs queued before it did, or they would be stranded.
                let mut drained = false;
                while let Some(job) = self.queue.try_pop() {
                    rt.run_job(job, worker);
                    drained = true;
                }
                // Just after the split moved, back soon for jobs queued meanwhile (a worker
                // that queues one drains the queue itself on its next turn, so at rest the
                // long wait loses none).
                let wait = if drained { IDLE_WAIT_MS } else { SMALL_WAIT_MS };
                rt.poll_and_serve(0, worker, tokens, wait);
            } else {
                rt.poll_and_serve(0, worker, tokens, SMALL_WAIT_MS);
            }
            self.help_bell.turn_over(worker);
        } else if !decision.takes_small_input(worker, self.large_workers_help) {
            if let Some(job) = self
                .queue
                .pop_timeout(Duration::from_millis(IDLE_WAIT_MS as u64))
            {
                rt.run_job(job, worker);
                self.measure.large_job_done();
            }
        } else {
            self.help_step(rt, worker, tokens);
        }
    }

    fn helper_thread(&self) -> Option<&'static str> {
        Some("controller")
    }

    /// The controller: every epoch merges the workers' samples and publishes
    /// the new threshold and split.
    fn run_helper(&self, rt: &dyn WorkerHost) {
        let mut slept = Duration::ZERO;
        let tick = Duration::from_millis(CONTROLLER_TICK_MS).min(self.epoch);
        while !rt.stopping() {
            std::thread::sleep(tick);
            slept += tick;
            if slept >= self.epoch {
                slept = Duration::ZERO;
                self.end_epoch();
            }
        }
        // Parked large workers see the stop (they ask `stopping` before they park).
        self.help_bell.ring_all();
    }

    fn wants_large_receive(&self, read: &ReadSide) -> bool {
        if read.swallow > 0 {
            return false;
        }
        match declared_total(&read.input) {
            Some(total) => total > read.input.len() && self.hands_off(total as u64),
            None => false,
        }
    }

    fn hand_off_receive(&self, _rt: &dyn WorkerHost, conn: &Arc<Conn>) {
        bump(&self.handoffs);
        self.push_large(Job::Receive {
            conn: Arc::clone(conn),
        });
    }

    fn class_threshold(&self) -> u64 {
        self.decision().threshold()
    }

    fn finish_inline(&self, rt: &dyn WorkerHost, conn: &Arc<Conn>, done: InlineReply) {
        let InlineReply {
            seq,
            reply,
            executed,
            receiving,
            arrived_at,
            worker,
        } = done;
        // Sizes of items accessed: stored values and hits. A miss and
        // commands that touch no value (`stats`, `delete`, ...) are not
        // recorded.
        if executed.accessed {
            self.record_size(worker, executed.size);
        }
        let large = receiving || self.hands_off(executed.size);
        if large && !receiving && !executed.storage {
            bump(&self.handoffs);
            // The large worker that sends it is charged its emulated cost.
            self.push_large(Job::Send {
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
        let completion = Completion {
            seq,
            reply,
            mode,
            charge: Some(executed.charge),
        };
        rt.complete(conn, worker, completion);
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
            epochs: self.driver.lock().as_ref().map_or(0, EpochDriver::epochs),
            decision: {
                let mut decision = self.last_decision.lock().clone();
                let help = if self.large_workers_help { "yes" } else { "no" };
                decision.push(("large_workers_help", help.to_string()));
                if self.large_workers_help {
                    decision.push((
                        "large_worker_serves",
                        self.large_worker_serves.load(Ordering::Relaxed).to_string(),
                    ));
                    decision.push(("help_wakeups", self.help_bell.wakeups().to_string()));
                    decision.push((
                        "help_wakeups_idle",
                        self.help_bell.idle_wakeups().to_string(),
                    ));
                }
                decision
            },
        }
    }

    fn reset_stats(&self) {
        self.handoffs.store(0, Ordering::Relaxed);
        self.large_worker_serves.store(0, Ordering::Relaxed);
    }

    fn set_split(&self, small: usize) {
        let next = self
            .decision()
            .with_small_workers(small.clamp(1, self.workers.max(1)));
        self.decision.store(next.0, Ordering::Release);
        self.help_bell.ring_all();
    }
}

#[cfg(test)]
mod tests {
    use super::{next_help_wait_ms, HELP_PARKED, HELP_POLL_MS};

    #[test]
    fn an_idle_helper_waits_longer_then_parks_and_work_starts_it_again() {
        let mut wait = HELP_POLL_MS;
        let mut waits = Vec::new();
        for _ in 0..6 {
            wait = next_help_wait_ms(wait, false);
            waits.push(wait);
        }
        assert_eq!(waits, [2, 4, 8, 16, HELP_PARKED, HELP_PARKED]);
        assert_eq!(next_help_wait_ms(wait, true), HELP_POLL_MS);
    }
}
