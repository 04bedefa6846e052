//! `early-binding` (MICA-like): a request runs on the worker that owns its
//! key. The connection's home worker reads and parses; a single-key request
//! whose key it owns (`policy::dispatch::place`, which calls `key_worker`, as the
//! simulator does) runs in place, others go to the owner's job queue
//! (woken through an eventfd in its epoll). Multi-key, keyless and invalid
//! requests are barriers run by the reader. A worker's queue is deficit round
//! robin over the priority classes ([`ClassQueue`]; first come, first served
//! among requests without a class). A worker alternates a turn of its queue
//! (the jobs queued when the turn starts) with one wait on its connections,
//! so neither starves the other.
//!
//! ```text
//!   home worker: read ─► parse ─► owner = key_worker(key) ─► == me and alone? run here
//!                                                        └─► owner's ClassQueue + eventfd
//! ```

use super::host::WorkerHost;
use super::strategy::{EpollLayout, Policy, IDLE_WAIT_MS, STATS_CLASS_THRESHOLD};
use crate::config::DispatchPolicy;
use crate::epoll::EventFd;
use crate::priority::ClassQueue;
use crate::session::Job;
use tailtrim_policy::serverq::Discipline;

/// The early-binding policy: one job queue and eventfd per worker.
pub struct EarlyBinding {
    workers: usize,
    jobs: Vec<(ClassQueue<Job>, EventFd)>,
}

impl EarlyBinding {
    /// Queues for `workers` workers ordered by `discipline`; `None`: first come, first
    /// served.
    pub fn new(workers: usize, discipline: Option<Discipline>) -> std::io::Result<EarlyBinding> {
        let jobs = (0..workers)
            .map(|_| EventFd::new().map(|event| (ClassQueue::new(discipline), event)))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(EarlyBinding { workers, jobs })
    }

    /// One turn of the worker's queue: the jobs queued when the turn starts,
    /// not those that arrive while it runs, so a stream of jobs from other
    /// readers cannot keep the worker from its own connections.
    fn run_queued(&self, rt: &dyn WorkerHost, worker: usize) {
        let queue = &self.jobs[worker].0;
        for _ in 0..queue.len() {
            let Some(job) = queue.try_pop() else { break };
            rt.run_job(job, worker);
        }
    }
}

impl Policy for EarlyBinding {
    fn kind(&self) -> DispatchPolicy {
        DispatchPolicy::EarlyBinding
    }

    fn layout(&self) -> EpollLayout {
        EpollLayout::PerWorker
    }

    fn events_per_wait(&self) -> usize {
        16
    }

    fn workers(&self) -> usize {
        self.workers
    }

    fn release(&self, _rt: &dyn WorkerHost, target: usize, job: Job) {
        let (queue, event) = &self.jobs[target];
        queue.push_request(job.priority(), job);
        event.notify();
    }

    fn worker_step(&self, rt: &dyn WorkerHost, worker: usize, tokens: &mut Vec<u64>) {
        self.run_queued(rt, worker);
        rt.poll_and_serve(worker, worker, tokens, IDLE_WAIT_MS);
    }

    fn wake_fd(&self, index: usize) -> Option<std::os::fd::RawFd> {
        self.jobs.get(index).map(|(_, event)| event.raw())
    }

    /// Only clears the wake-up: the turn it announces runs at the start of
    /// the next [`Policy::worker_step`], after this wait's connections are
    /// read. Running it here would give the worker two turns per wait (the
    /// step's and this one) and keep its own connections waiting twice as
    /// long as the simulator's loop, which alternates one turn with one wait.
    fn on_wake(&self, _rt: &dyn WorkerHost, index: usize, _worker: usize) {
        self.jobs[index].1.drain();
    }

    fn class_threshold(&self) -> u64 {
        STATS_CLASS_THRESHOLD
    }
}
