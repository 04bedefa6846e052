//! `late-binding` (RAMCloud-like): one dispatcher thread reads and parses
//! every connection; each request waits in one queue for the first idle
//! worker. A connection's requests run one at a time (any idle worker may
//! take the next, so two for one key could otherwise race). The queue is
//! deficit round robin over the priority classes ([`ClassQueue`]): first come,
//! first served among requests without a class.
//!
//! ```text
//!   dispatcher: shared epoll ─► read ─► parse ─► ClassQueue ─► idle worker executes ─► reply slot
//! ```

use std::time::Duration;

use super::host::WorkerHost;
use super::strategy::{EpollLayout, Policy, IDLE_WAIT_MS, STATS_CLASS_THRESHOLD};
use crate::config::DispatchPolicy;
use crate::priority::ClassQueue;
use crate::session::Job;
use tailtrim_policy::serverq::Discipline;

/// The late-binding policy: the request queue workers take from.
pub struct LateBinding {
    workers: usize,
    queue: ClassQueue<Job>,
}

impl LateBinding {
    /// An empty queue for `workers` workers ordered by `discipline`; `None`: first come,
    /// first served.
    pub fn new(workers: usize, discipline: Option<Discipline>) -> LateBinding {
        LateBinding {
            workers,
            queue: ClassQueue::new(discipline),
        }
    }
}

impl Policy for LateBinding {
    fn kind(&self) -> DispatchPolicy {
        DispatchPolicy::LateBinding
    }

    fn layout(&self) -> EpollLayout {
        EpollLayout::Shared
    }

    fn events_per_wait(&self) -> usize {
        16
    }

    fn workers(&self) -> usize {
        self.workers
    }

    /// Every worker takes from the one queue; whichever is idle first gets the job.
    fn takes_shared_queue(&self, _worker: usize) -> bool {
        true
    }

    fn release(&self, _rt: &dyn WorkerHost, _target: usize, job: Job) {
        self.queue.push_request(job.priority(), job);
    }

    fn worker_step(&self, rt: &dyn WorkerHost, worker: usize, _tokens: &mut Vec<u64>) {
        if let Some(job) = self
            .queue
            .pop_timeout(Duration::from_millis(IDLE_WAIT_MS as u64))
        {
            rt.run_job(job, worker);
        }
    }

    fn helper_thread(&self) -> Option<&'static str> {
        Some("dispatcher")
    }

    /// The dispatcher reads and parses every connection (its counters live
    /// in worker 0's block).
    fn run_helper(&self, rt: &dyn WorkerHost) {
        let mut tokens = Vec::with_capacity(16);
        while !rt.stopping() {
            rt.poll_and_serve(0, 0, &mut tokens, IDLE_WAIT_MS);
        }
    }

    fn class_threshold(&self) -> u64 {
        STATS_CLASS_THRESHOLD
    }
}
