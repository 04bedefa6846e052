//! Query shaping at run time: the query-thread bound and injected setup time every planner
//! pays, Chisel's merging of mice fetches into shared backend queries, and the online
//! analyzer that retunes the planner's `(B, L)` every epoch.
//!
//! ```text
//!  fetch ─► acquire a query slot (≤ query_threads in flight; 0 = unbounded)
//!        ─► setup: inject_overhead µs (spins on the runtime, yielding) ─► send ─► reply
//!
//!  mouse fetch with merge_limit B > 1, per backend:
//!     open query being set up, with < B members? ── yes ─► append keys, wait for its reply
//!                                                 └─ no ─► become its leader: open one,
//!        set up (slot + overhead; at least one yield, so concurrent mice can join), seal it,
//!        send `get <all keys>`, split the values back by key range to every member
//!
//!  every completed query ─► inbox (keys, latency) ─┐
//!  every request ─► epoch counters per class        ├─ each epoch: spawn_blocking(analyzer.decide)
//!                                                   ┘     ─► pending shape ─► planner.set_shape
//! ```
//!
//! Merged members wait on their leader; a failed or timed-out merged query fails every member
//! (each gets the error; nothing waits past the backend timeout). A member whose leader was
//! dropped gets `ConnectionLost`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use tailtrim_model::chisel_online::{Analyzer, AnalyzerConfig, Decision, EpochLoad};
use tailtrim_model::Seconds;
use tailtrim_policy::chisel_merge::{MergedQuery, SealedQuery};
use tailtrim_policy::planner::QueryShape;
use tokio::sync::{oneshot, Semaphore, SemaphorePermit};

use crate::connection::ValueItem;
use crate::error::ClientError;
use crate::stats::{Counter, LatencyHistogram};

/// Per-key outcome of one merged member's keys.
pub type MemberResult = Result<Vec<Option<ValueItem>>, ClientError>;

/// A query being set up that mice may still join: who merges with whom is
/// `tailtrim_policy::chisel_merge`'s decision, the members wait on these channels.
pub type OpenQuery = MergedQuery<Bytes, oneshot::Sender<MemberResult>>;

/// One backend's merge slot.
pub type MergeSlot = Mutex<Option<Arc<Mutex<OpenQuery>>>>;

/// What a mouse fetch became.
pub enum Merge {
    /// It joined a query being set up: wait for this.
    Joined(oneshot::Receiver<MemberResult>),
    /// It leads a new query: set it up, then [`seal`] it.
    Leader(Arc<Mutex<OpenQuery>>),
}

/// Joins the open query of `slot` if it has room, else opens a new one led by the caller.
pub fn join_or_lead(slot: &MergeSlot, keys: &[Bytes], limit: u32) -> Merge {
    let mut open = slot.lock();
    if let Some(query) = open.as_ref() {
        let query = query.clone();
        let mut inner = query.lock();
        if inner.has_room() {
            let (tx, rx) = oneshot::channel();
            if inner.join(keys.iter().cloned(), tx) {
                // Full: later mice start a new query.
                drop(inner);
                *open = None;
            }
            return Merge::Joined(rx);
        }
    }
    let query = Arc::new(Mutex::new(OpenQuery::lead(keys.to_vec(), limit)));
    *open = Some(query.clone());
    Merge::Leader(query)
}

/// A sealed query: every key to ask for, the leader's own range first (`0..n`), and the
/// members waiting for their ranges.
pub type Sealed = SealedQuery<Bytes, oneshot::Sender<MemberResult>>;

/// Closes a query to new members (removing it from the slot if it is still there).
pub fn seal(slot: &MergeSlot, query: &Arc<Mutex<OpenQuery>>) -> Sealed {
    {
        let mut open = slot.lock();
        if open
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, query))
        {
            *open = None;
        }
    }
    query.lock().seal()
}

/// Waits `overhead`; always yields at least once. With `sleep` false it spins on the runtime
/// (yielding to other tasks), because tokio's timer cannot sleep for tens of microseconds: the
/// overhead costs CPU, as a client's would. With `sleep` true a blocking-pool thread sleeps
/// until the deadline (`std::thread::sleep`, precise to tens of microseconds), so no core
/// is spent: an emulated overhead, for testbeds whose times are dilated.
pub async fn setup_wait(overhead: Duration, sleep: bool) {
    if sleep && !overhead.is_zero() {
        let deadline = Instant::now() + overhead;
        let slept = tokio::task::spawn_blocking(move || {
            let now = Instant::now();
            if deadline > now {
                std::thread::sleep(deadline - now);
            }
        })
        .await;
        if slept.is_ok() {
            tokio::task::yield_now().await;
            return;
        }
    }
    let deadline = Instant::now() + overhead;
    loop {
        tokio::task::yield_now().await;
        if Instant::now() >= deadline {
            return;
        }
    }
}

/// The client's query slots (`C`, the paper's query threads).
pub struct QuerySlots {
    semaphore: Option<Semaphore>,
}

impl QuerySlots {
    /// `limit` concurrent backend queries; 0 = unbounded.
    pub fn new(limit: usize) -> Self {
        QuerySlots {
            semaphore: (limit > 0).then(|| Semaphore::new(limit)),
        }
    }

    /// True when the number of queries in flight is bounded.
    pub fn is_bounded(&self) -> bool {
        self.semaphore.is_some()
    }

    /// Waits for a slot (`None` when unbounded).
    pub async fn acquire(&self) -> Option<SemaphorePermit<'_>> {
        match &self.semaphore {
            Some(semaphore) => semaphore.acquire().await.ok(),
            None => None,
        }
    }
}

/// Counters of one epoch, per request class.
#[derive(Debug, Default)]
struct EpochCounters {
    mice: AtomicU64,
    mice_keys: AtomicU64,
    elephants: AtomicU64,
    elephant_keys: AtomicU64,
    setup_nanos: AtomicU64,
    setups: AtomicU64,
    mice_micros: AtomicU64,
    elephant_micros: AtomicU64,
    /// Requests of either class that completed.
    completed: AtomicU64,
}

/// Observed latency of the last completed epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ObservedEpoch {
    /// Mean mice latency, µs.
    pub mice_mean_us: f64,
    /// Mice p95, µs.
    pub mice_p95_us: f64,
    /// Mean elephant latency, µs.
    pub elephant_mean_us: f64,
    /// Elephant p95, µs.
    pub elephant_p95_us: f64,
}

/// The analyzer's state shared with its blocking task.
struct AnalyzerState {
    analyzer: Mutex<Analyzer>,
    inbox: Mutex<Vec<(u32, f64)>>,
    pending: Mutex<Option<Decision>>,
    last: Mutex<Option<(Decision, ObservedEpoch)>>,
    running: std::sync::atomic::AtomicBool,
    fallbacks: AtomicU64,
}

/// Chisel's run-time side for one pool.
pub struct Shaper {
    /// Per-backend merge slots.
    pub slots: Vec<MergeSlot>,
    /// Query slots.
    pub query_slots: QuerySlots,
    /// Setup time added before every backend query of a multiget.
    pub inject_overhead: Duration,
    /// Sleep the setup time on a blocking thread instead of spinning ([`setup_wait`]).
    pub overhead_sleeps: bool,
    /// Requests with more keys are elephants.
    pub elephant_threshold: u32,
    /// Epoch length; `None` keeps the planner's shape fixed.
    epoch: Option<Duration>,
    epoch_started: Mutex<Instant>,
    counters: EpochCounters,
    epoch_mice: LatencyHistogram,
    epoch_elephants: LatencyHistogram,
    state: Arc<AnalyzerState>,
    /// `chisel_merged_queries`: backend queries that carried more than one request.
    pub merged_queries: Counter,
    /// `chisel_merged_requests`: requests that rode in another request's query.
    pub merged_requests: Counter,
    /// `chisel_epochs`: analyzer runs.
    pub epochs: Counter,
}

/// Bound on the observation inbox between two epochs.
const INBOX_LIMIT: usize = 1 << 16;

impl Shaper {
    /// A shaper for `backends` backends.
    pub fn new(
        backends: usize,
        query_threads: usize,
        inject_overhead: Duration,
        elephant_threshold: u32,
        epoch: Option<Duration>,
        analyzer: AnalyzerConfig,
    ) -> Self {
        Shaper {
            slots: (0..backends).map(|_| Mutex::new(None)).collect(),
            query_slots: QuerySlots::new(query_threads),
            inject_overhead,
            overhead_sleeps: false,
            elephant_threshold,
            epoch,
            epoch_started: Mutex::new(Instant::now()),
            counters: EpochCounters::default(),
            epoch_mice: LatencyHistogram::new(),
            epoch_elephants: LatencyHistogram::new(),
            state: Arc::new(AnalyzerState {
                analyzer: Mutex::new(Analyzer::new(analyzer)),
                inbox: Mutex::new(Vec::new()),
                pending: Mutex::new(None),
                last: Mutex::new(None),
                running: std::sync::atomic::AtomicBool::new(false),
                fallbacks: AtomicU64::new(0),
            }),
            merged_queries: Counter::default(),
            merged_requests: Counter::default(),
            epochs: Counter::default(),
        }
    }

    /// True when backend queries are shaped: bounded query slots, injected setup time, or an
    /// analyzer that counts every request and fits every query's round trip.
    pub fn shapes_queries(&self) -> bool {
        self.epoch.is_some() || !self.inject_overhead.is_zero() || self.query_slots.is_bounded()
    }

    /// True for a request of `keys` keys that is an elephant.
    pub fn is_elephant(&self, keys: usize) -> bool {
        keys > self.elephant_threshold as usize
    }

    /// Counts a request's arrival.
    pub fn request(&self, keys: usize) {
        let (count, sum) = if self.is_elephant(keys) {
            (&self.counters.elephants, &self.counters.elephant_keys)
        } else {
            (&self.counters.mice, &self.counters.mice_keys)
        };
        count.fetch_add(1, Ordering::Relaxed);
        sum.fetch_add(keys as u64, Ordering::Relaxed);
    }

    /// Records a finished request's latency in the epoch's class histogram (kept only when
    /// an analyzer reads it).
    pub fn finished(&self, keys: usize, micros: u64) {
        self.counters.completed.fetch_add(1, Ordering::Relaxed);
        let epoch = self.epoch.is_some();
        if self.is_elephant(keys) {
            if epoch {
                self.epoch_elephants.record_micros(micros);
            }
            self.counters
                .elephant_micros
                .fetch_add(micros, Ordering::Relaxed);
        } else {
            if epoch {
                self.epoch_mice.record_micros(micros);
            }
            self.counters
                .mice_micros
                .fetch_add(micros, Ordering::Relaxed);
        }
    }

    /// Records the client-side time spent before a query was sent.
    pub fn setup_done(&self, elapsed: Duration) {
        self.counters.setup_nanos.fetch_add(
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.counters.setups.fetch_add(1, Ordering::Relaxed);
    }

    /// Records one completed backend query for the analyzer's fit.
    pub fn query_done(&self, keys: u32, latency: Duration) {
        if self.epoch.is_none() {
            return;
        }
        let mut inbox = self.state.inbox.lock();
        if inbox.len() < INBOX_LIMIT {
            inbox.push((keys, latency.as_secs_f64()));
        }
    }

    /// A decision made since the last call, to apply to the planner.
    pub fn take_pending(&self, elephant_threshold: u32) -> Option<QueryShape> {
        let decision = self.state.pending.lock().take()?;
        Some(QueryShape {
            merge_level: decision.merge_level,
            chunk_size: decision.chunk_size,
            elephant_threshold,
        })
    }

    /// The last decision and the epoch it was made from.
    pub fn last_decision(&self) -> Option<(Decision, ObservedEpoch)> {
        self.state.last.lock().clone()
    }

    /// Starts the analyzer on a blocking thread when an epoch has passed.
    pub fn maybe_run_epoch(&self) {
        self.maybe_run_epoch_stretched(|| 1);
    }

    /// Like [`Shaper::maybe_run_epoch`], the epoch `stretch()` times as long: asked only once
    /// an epoch has passed, so the request path pays for the question only then. The pool
    /// passes its planner's `Planner::analyzer_epochs` (`auto`: 4 while Chisel is not its
    /// choice).
    pub fn maybe_run_epoch_stretched(&self, stretch: impl FnOnce() -> u32) {
        let Some(epoch) = self.epoch else {
            return;
        };
        let seconds = {
            let mut started = self.epoch_started.lock();
            let elapsed = started.elapsed();
            if elapsed < epoch || self.state.running.load(Ordering::Acquire) {
                return;
            }
            if elapsed < epoch.saturating_mul(stretch().max(1)) {
                return;
            }
            *started = Instant::now();
            elapsed.as_secs_f64()
        };
        let take = |counter: &AtomicU64| counter.swap(0, Ordering::Relaxed);
        let setups = take(&self.counters.setups);
        let setup_nanos = take(&self.counters.setup_nanos);
        let mut load = EpochLoad {
            seconds,
            mice: take(&self.counters.mice),
            mice_keys: take(&self.counters.mice_keys),
            elephants: take(&self.counters.elephants),
            elephant_keys: take(&self.counters.elephant_keys),
            client_overhead: Seconds(if setups > 0 {
                setup_nanos as f64 / setups as f64 * 1e-9
            } else {
                0.0
            }),
            observed_mean: Seconds(0.0),
        };
        let mice_micros = take(&self.counters.mice_micros);
        let elephant_micros = take(&self.counters.elephant_micros);
        let observed = ObservedEpoch {
            mice_mean_us: mean(mice_micros, load.mice),
            mice_p95_us: self.epoch_mice.take_quantile(0.95),
            elephant_mean_us: mean(elephant_micros, load.elephants),
            elephant_p95_us: self.epoch_elephants.take_quantile(0.95),
        };
        let completed = take(&self.counters.completed);
        load.observed_mean = Seconds(mean(mice_micros + elephant_micros, completed) * 1e-6);
        self.epochs.incr();
        let state = self.state.clone();
        state.running.store(true, Ordering::Release);
        let run = move || {
            let samples = std::mem::take(&mut *state.inbox.lock());
            let mut analyzer = state.analyzer.lock();
            for (keys, latency) in samples {
                analyzer.observe(keys, Seconds(latency));
            }
            let before = analyzer.current();
            let decision = analyzer.decide(&load);
            if decision.fallback.is_some() {
                state.fallbacks.fetch_add(1, Ordering::Relaxed);
            }
            if analyzer.current() != before || state.last.lock().is_none() {
                *state.pending.lock() = Some(decision.clone());
            }
            *state.last.lock() = Some((decision, observed));
            state.running.store(false, Ordering::Release);
        };
        // The grid search takes milliseconds: keep it off the request path.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn_blocking(run);
            }
            Err(_) => run(),
        }
    }

    /// Epochs that fell back to batching.
    pub fn fallbacks(&self) -> u64 {
        self.state.fallbacks.load(Ordering::Relaxed)
    }
}

fn mean(sum: u64, count: u64) -> f64 {
    if count == 0 {
        0.0
    } else {
        sum as f64 / count as f64
    }
}

#[cfg(test)]
mod tests {
    use super::setup_wait;
    use std::time::{Duration, Instant};

    #[tokio::test(flavor = "current_thread")]
    async fn a_slept_setup_lasts_at_least_its_overhead() {
        // Lower bounds only: both modes wait the overhead out (the sleep on a blocking thread),
        // and a zero overhead returns.
        for sleep in [true, false] {
            let overhead = Duration::from_millis(5);
            let started = Instant::now();
            setup_wait(overhead, sleep).await;
            assert!(started.elapsed() >= overhead, "sleep = {sleep}");
            setup_wait(Duration::ZERO, sleep).await;
        }
    }

    /// A stretched epoch runs the analyzer only after `stretch` epochs, and the stretch is
    /// asked for only once an epoch has passed. Lower bounds of sleeps only, plus a margin of
    /// about 3 s that only a host stalled that long would cross.
    #[test]
    fn a_stretched_epoch_runs_the_analyzer_after_stretch_epochs() {
        use super::Shaper;
        use tailtrim_policy::auto::ANALYZER_EPOCHS_OFF_CHISEL as STRETCH_OFF_CHISEL;
        let epoch = Duration::from_secs(1);
        let shaper = Shaper::new(
            2,
            0,
            Duration::ZERO,
            8,
            Some(epoch),
            tailtrim_model::chisel_online::AnalyzerConfig::default(),
        );
        let started = Instant::now();
        let mut asked = 0;
        shaper.maybe_run_epoch_stretched(|| {
            asked += 1;
            STRETCH_OFF_CHISEL
        });
        assert_eq!(asked, 0, "asked for the stretch before an epoch passed");
        std::thread::sleep(epoch + Duration::from_millis(50));
        shaper.maybe_run_epoch_stretched(|| {
            asked += 1;
            STRETCH_OFF_CHISEL
        });
        assert_eq!(asked, 1);
        assert_eq!(
            shaper.epochs.get(),
            0,
            "ran after one of {STRETCH_OFF_CHISEL} epochs"
        );
        let stretched = epoch * STRETCH_OFF_CHISEL + Duration::from_millis(50);
        std::thread::sleep(stretched.saturating_sub(started.elapsed()));
        shaper.maybe_run_epoch_stretched(|| STRETCH_OFF_CHISEL);
        assert_eq!(
            shaper.epochs.get(),
            1,
            "did not run after {STRETCH_OFF_CHISEL} epochs"
        );
    }
}
