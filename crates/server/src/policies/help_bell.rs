//! When size-aware's idle large workers help the small ones (`[sizeaware]
//! large_workers_help`): a bell they park on, rung when a large job is queued or when every
//! small worker is busy serving, so that at low load a helping large worker sleeps as long as
//! a small worker does instead of looking at the small workers' connections every few
//! milliseconds.
//!
//! ```text
//!  small worker takes events ─► took_events: busy += 1 ─► busy == small workers? ─► ring
//!  small worker's turn ends  ─► turn_over:   busy −= 1
//!  large job queued          ─────────────────────────────────────────────────────► ring
//!  helping large worker, nothing to do ─► park (up to a second) ◄── ring
//!  the server stops, the split moves    ─────────────────────────► ring_all
//!  woken by "all busy" and found nothing ─► woke_for_nothing: the "all busy" ring is quiet
//!                                           for 1 ms, doubling to 64 ms while wakes stay idle
//!  woken and found work                  ─► woke_for_work: the ring is live again
//! ```
//!
//! The quiet spell is for the "all busy" ring only: a queued large job always rings. At a
//! moderate load both small workers are often busy at once for a moment, and a helper woken
//! then mostly finds that they have taken every ready event (at the tier experiment's
//! per-server load, 1,698 wake-ups served 64 connections); under a load the small workers
//! cannot keep up with, the helper finds work, and every turn's ring wakes it again.
//!
//! The small workers' busy count is kept per worker ([`HelpBell::took_events`],
//! [`HelpBell::turn_over`]), so a split that moves while a worker serves leaves no count
//! behind.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// The helping large workers' bell and the small workers' busy count.
pub(super) struct HelpBell {
    /// Per worker: it took events off the shared epoll and has not finished its turn.
    serving: Vec<AtomicBool>,
    /// Small workers serving now.
    busy_small: AtomicUsize,
    /// Helping large workers parked on the bell.
    parked: AtomicUsize,
    /// Set by a ring, cleared by the large worker it wakes.
    rung: Mutex<bool>,
    bell: Condvar,
    /// Rings that woke a parked large worker (`stats sizeaware`: `help_wakeups`).
    wakeups: AtomicUsize,
    /// Wake-ups after which the helper found nothing to serve (`stats sizeaware`:
    /// `help_wakeups_idle`).
    idle_wakeups: AtomicUsize,
    /// The "all busy" ring stays quiet until this time ([`HelpBell::since_start_ns`]).
    quiet_until_ns: AtomicU64,
    /// The last quiet spell's length: doubles while wake-ups find nothing, 0 once one finds
    /// work.
    quiet_ns: AtomicU64,
    /// The zero of the bell's clock.
    start: Instant,
}

/// The first quiet spell of the "all busy" ring after a wake-up that found nothing.
const QUIET_FIRST_NS: u64 = 1_000_000;

/// The longest quiet spell: while the small workers keep up, a helper is woken by the "all
/// busy" ring about 15 times a second at most.
const QUIET_MAX_NS: u64 = 64_000_000;

/// The quiet spell after one that lasted `previous_ns`, when a wake-up found nothing.
fn next_quiet_ns(previous_ns: u64) -> u64 {
    previous_ns
        .saturating_mul(2)
        .clamp(QUIET_FIRST_NS, QUIET_MAX_NS)
}

impl HelpBell {
    /// A silent bell for `workers` workers.
    pub(super) fn new(workers: usize) -> HelpBell {
        HelpBell {
            serving: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            busy_small: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            rung: Mutex::new(false),
            bell: Condvar::new(),
            wakeups: AtomicUsize::new(0),
            idle_wakeups: AtomicUsize::new(0),
            quiet_until_ns: AtomicU64::new(0),
            quiet_ns: AtomicU64::new(0),
            start: Instant::now(),
        }
    }

    /// Nanoseconds since the bell was made (its clock for the quiet spell).
    fn since_start_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Small worker `worker` (one of `small_workers`) took `events` ready events: rings when
    /// that leaves no small worker waiting on the shared epoll.
    pub(super) fn took_events(&self, worker: usize, events: usize, small_workers: usize) {
        let Some(serving) = self.serving.get(worker) else {
            return;
        };
        if events == 0 || worker >= small_workers || serving.swap(true, Ordering::AcqRel) {
            return;
        }
        let busy = self.busy_small.fetch_add(1, Ordering::AcqRel) + 1;
        if busy >= small_workers && self.parked.load(Ordering::SeqCst) > 0 {
            self.ring_for_busy_at(self.since_start_ns());
        }
    }

    /// The "all busy" ring at `now_ns`: silent inside a quiet spell.
    fn ring_for_busy_at(&self, now_ns: u64) {
        if now_ns >= self.quiet_until_ns.load(Ordering::Relaxed) {
            self.ring();
        }
    }

    /// A parked helper was woken and found nothing to serve: the "all busy" ring goes quiet
    /// for the next spell.
    pub(super) fn woke_for_nothing(&self) {
        self.woke_for_nothing_at(self.since_start_ns());
    }

    fn woke_for_nothing_at(&self, now_ns: u64) {
        self.idle_wakeups.fetch_add(1, Ordering::Relaxed);
        let quiet = next_quiet_ns(self.quiet_ns.load(Ordering::Relaxed));
        self.quiet_ns.store(quiet, Ordering::Relaxed);
        self.quiet_until_ns
            .store(now_ns.saturating_add(quiet), Ordering::Relaxed);
    }

    /// A parked helper was woken and found work: the "all busy" ring is live again.
    pub(super) fn woke_for_work(&self) {
        if self.quiet_ns.load(Ordering::Relaxed) != 0 {
            self.quiet_ns.store(0, Ordering::Relaxed);
            self.quiet_until_ns.store(0, Ordering::Relaxed);
        }
    }

    /// Worker `worker`'s turn on the shared epoll ended.
    pub(super) fn turn_over(&self, worker: usize) {
        if self
            .serving
            .get(worker)
            .is_some_and(|serving| serving.swap(false, Ordering::AcqRel))
        {
            self.busy_small.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Wakes one parked large worker, if any is parked.
    pub(super) fn ring(&self) {
        if self.parked.load(Ordering::SeqCst) == 0 {
            return;
        }
        *self.rung.lock() = true;
        self.bell.notify_one();
    }

    /// Wakes every parked large worker (the server stops, or the split moved: a parked
    /// worker may have to serve as a small one).
    pub(super) fn ring_all(&self) {
        *self.rung.lock() = true;
        self.bell.notify_all();
    }

    /// Parks a helping large worker until a ring or `timeout`, unless `has_work` (asked after
    /// it counts itself parked, so a job queued meanwhile is seen here or rings). True when a
    /// ring (or work found) ended the wait.
    pub(super) fn park(&self, timeout: Duration, has_work: impl Fn() -> bool) -> bool {
        self.parked.fetch_add(1, Ordering::SeqCst);
        let mut rung = self.rung.lock();
        let woken = if *rung || has_work() {
            true
        } else {
            let _ = self.bell.wait_for(&mut rung, timeout);
            *rung
        };
        *rung = false;
        drop(rung);
        self.parked.fetch_sub(1, Ordering::SeqCst);
        if woken {
            self.wakeups.fetch_add(1, Ordering::Relaxed);
        }
        woken
    }

    /// Rings that woke (or found work for) a parked large worker so far.
    pub(super) fn wakeups(&self) -> usize {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Of [`HelpBell::wakeups`], those after which the helper found nothing to serve.
    pub(super) fn idle_wakeups(&self) -> usize {
        self.idle_wakeups.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{HelpBell, QUIET_FIRST_NS, QUIET_MAX_NS};

    #[test]
    fn a_wake_up_for_nothing_quiets_the_busy_ring_and_one_for_work_ends_the_quiet() {
        let bell = HelpBell::new(4);
        let ms = 1_000_000;
        // Parked (as a helper is while the ring is asked): a ring sets `rung`.
        bell.parked
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let rung = |bell: &HelpBell| std::mem::take(&mut *bell.rung.lock());
        bell.ring_for_busy_at(10 * ms);
        assert!(rung(&bell), "no quiet spell yet");
        bell.woke_for_nothing_at(10 * ms);
        bell.ring_for_busy_at(10 * ms + QUIET_FIRST_NS - 1);
        assert!(!rung(&bell), "inside the first quiet spell");
        bell.ring_for_busy_at(10 * ms + QUIET_FIRST_NS);
        assert!(rung(&bell), "the spell is over");
        // Idle wake-ups double the spell up to its cap.
        for _ in 0..20 {
            bell.woke_for_nothing_at(20 * ms);
        }
        bell.ring_for_busy_at(20 * ms + QUIET_MAX_NS - 1);
        assert!(!rung(&bell), "inside the longest spell");
        bell.ring_for_busy_at(20 * ms + QUIET_MAX_NS);
        assert!(rung(&bell));
        // A large job rings whatever the spell.
        bell.woke_for_nothing_at(30 * ms);
        bell.ring();
        assert!(rung(&bell), "a queued large job always rings");
        // A wake-up that found work makes the busy ring live at once.
        bell.woke_for_work();
        bell.ring_for_busy_at(30 * ms + 1);
        assert!(rung(&bell));
        assert_eq!(bell.idle_wakeups(), 22);
    }

    #[test]
    fn the_bell_rings_only_when_every_small_worker_is_busy() {
        let bell = HelpBell::new(4);
        bell.took_events(0, 1, 2);
        assert!(!bell.park(Duration::ZERO, || false), "one of two busy");
        bell.took_events(1, 1, 2);
        bell.turn_over(1);
        bell.took_events(1, 1, 2);
        // Not parked when it rang: a ring is not kept for later.
        assert!(!bell.park(Duration::ZERO, || false));
        bell.turn_over(0);
        bell.turn_over(1);
        assert!(!bell.park(Duration::ZERO, || false));
        assert!(
            bell.park(Duration::ZERO, || true),
            "work queued ends the wait"
        );
        assert_eq!(bell.wakeups(), 1);
    }

    #[test]
    fn ring_all_wakes_every_parked_large_worker() {
        let bell = std::sync::Arc::new(HelpBell::new(4));
        let parked: Vec<_> = (0..2)
            .map(|_| {
                let bell = std::sync::Arc::clone(&bell);
                std::thread::spawn(move || bell.park(Duration::from_secs(30), || false))
            })
            .collect();
        // Rings until both have parked and woken (bounds a hang, not a time).
        while !parked.iter().all(|worker| worker.is_finished()) {
            bell.ring_all();
            std::thread::sleep(Duration::from_millis(1));
        }
        for worker in parked {
            worker.join().expect("large worker");
        }
    }

    #[test]
    fn a_ring_wakes_a_parked_large_worker() {
        let bell = std::sync::Arc::new(HelpBell::new(4));
        let parked = std::sync::Arc::clone(&bell);
        let large = std::thread::spawn(move || parked.park(Duration::from_secs(30), || false));
        // Rings until the large worker has parked and taken one (bounds a hang, not a time).
        while !large.is_finished() {
            bell.ring();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(large.join().expect("large worker"));
    }
}
