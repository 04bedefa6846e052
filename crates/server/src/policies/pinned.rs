//! `pinned`: memcached's model. A connection lives on the worker it was
//! given at accept (round robin) and every request runs inline there.
//!
//! ```text
//!   accept ─► home worker's epoll ─► that worker: read ─► parse ─► execute ─► writev
//! ```

use super::host::WorkerHost;
use super::strategy::{EpollLayout, Policy, Registration, IDLE_WAIT_MS, STATS_CLASS_THRESHOLD};
use crate::config::DispatchPolicy;

/// The pinned policy (no state of its own but the worker count).
pub struct Pinned {
    /// Workers.
    pub workers: usize,
}

impl Policy for Pinned {
    fn kind(&self) -> DispatchPolicy {
        DispatchPolicy::Pinned
    }

    fn layout(&self) -> EpollLayout {
        EpollLayout::PerWorker
    }

    fn events_per_wait(&self) -> usize {
        16
    }

    fn registration(&self) -> Registration {
        Registration::Armed
    }

    fn workers(&self) -> usize {
        self.workers
    }

    fn worker_step(&self, rt: &dyn WorkerHost, worker: usize, tokens: &mut Vec<u64>) {
        rt.poll_and_serve(worker, worker, tokens, IDLE_WAIT_MS * 20);
    }

    fn class_threshold(&self) -> u64 {
        STATS_CLASS_THRESHOLD
    }
}
