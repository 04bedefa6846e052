//! `stealing` (ZygOS-like): connections have a home worker as under
//! `pinned`; a worker with nothing ready takes a ready connection from
//! another worker's epoll and serves it whole.
//!
//! ```text
//!   worker i: own epoll ready? ─► serve ─┐
//!             else steal_victim: i+1, i+2, ... ─► first with a ready connection ─► serve it
//!             else block briefly on its own epoll
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

use tailtrim_policy::dispatch::steal_victim;

use super::host::WorkerHost;
use super::strategy::{EpollLayout, Policy, PolicyStats, STATS_CLASS_THRESHOLD};
use crate::config::DispatchPolicy;
use crate::stats::bump;

/// The stealing policy.
pub struct Stealing {
    workers: usize,
    /// Connections served off another worker's epoll.
    steals: AtomicU64,
}

impl Stealing {
    /// For `workers` workers.
    pub fn new(workers: usize) -> Stealing {
        Stealing {
            workers,
            steals: AtomicU64::new(0),
        }
    }
}

impl Policy for Stealing {
    fn kind(&self) -> DispatchPolicy {
        DispatchPolicy::Stealing
    }

    fn layout(&self) -> EpollLayout {
        EpollLayout::PerWorker
    }

    fn workers(&self) -> usize {
        self.workers
    }

    fn steal_victim(&self, thief: usize, ready: &mut dyn FnMut(usize) -> bool) -> Option<usize> {
        steal_victim(thief, self.workers, ready)
    }

    fn worker_step(&self, rt: &dyn WorkerHost, worker: usize, tokens: &mut Vec<u64>) {
        // Own connections first; when idle, take a ready one from another worker (the probe
        // serves what it finds).
        if rt.poll_and_serve(worker, worker, tokens, 0) {
            return;
        }
        let mut probe = |victim: usize| rt.poll_and_serve(victim, worker, tokens, 0);
        if self.steal_victim(worker, &mut probe).is_some() {
            bump(&self.steals);
            return;
        }
        rt.poll_and_serve(worker, worker, tokens, 1);
    }

    fn class_threshold(&self) -> u64 {
        STATS_CLASS_THRESHOLD
    }

    fn stats(&self, workers: usize) -> PolicyStats {
        PolicyStats {
            small_workers: workers,
            steals: self.steals.load(Ordering::Relaxed),
            ..PolicyStats::default()
        }
    }

    fn reset_stats(&self) {
        self.steals.store(0, Ordering::Relaxed);
    }
}
