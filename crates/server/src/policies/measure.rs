//! What the size-aware workers measure for the controller during an epoch: the sizes of the
//! items they access (one [`SizeHistogram`] per worker, no sharing on the request path) and,
//! for `split_by = busy`, their CPU time by the role they had: each worker samples its own
//! thread CPU clock at most every [`BUSY_SAMPLE_INTERVAL`] and adds the time since the last
//! sample to its role now; large workers count the large jobs they complete. The controller
//! takes it all at each tick.
//!
//! ```text
//!  reader w ─► record_size(w, size) ─► sizes[w] ─────────────────────┐
//!  worker w (own thread) ─► sample_busy(w, small?) ─► small | large ─┼─► take() at the tick:
//!  large worker ─► large_job_done() ─► large_jobs ───────────────────┘   merged sizes, RoleBusy
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tailtrim_policy::sizeaware::{RoleBusy, SizeHistogram};

use crate::affinity::thread_cpu_ns;

/// How often a worker reads its thread CPU clock (a system call) at most.
const BUSY_SAMPLE_INTERVAL: Duration = Duration::from_millis(10);

/// Every worker's sizes and CPU time by role, and the large jobs done, since the last epoch.
pub(super) struct EpochMeasure {
    sizes: Vec<Mutex<SizeHistogram>>,
    workers: Vec<WorkerBusy>,
    large_jobs: AtomicU64,
}

impl EpochMeasure {
    /// Nothing measured, for `workers` workers.
    pub(super) fn new(workers: usize) -> EpochMeasure {
        EpochMeasure {
            sizes: (0..workers)
                .map(|_| Mutex::new(SizeHistogram::new()))
                .collect(),
            workers: (0..workers).map(|_| WorkerBusy::default()).collect(),
            large_jobs: AtomicU64::new(0),
        }
    }

    /// Worker `worker` accessed an item of `size` bytes.
    pub(super) fn record_size(&self, worker: usize, size: u64) {
        if let Some(sizes) = self.sizes.get(worker) {
            sizes.lock().record(size, size);
        }
    }

    /// Called by worker `worker` itself, whose role is small or not ([`WorkerBusy::sample`]).
    pub(super) fn sample_busy(&self, worker: usize, small: bool) {
        if let Some(busy) = self.workers.get(worker) {
            busy.sample(small);
        }
    }

    /// A large worker completed a large job.
    pub(super) fn large_job_done(&self) {
        self.large_jobs.fetch_add(1, Ordering::Relaxed);
    }

    /// Everything since the last take (the workers' sizes merged), zeroing it.
    pub(super) fn take(&self) -> (SizeHistogram, RoleBusy) {
        let mut merged = SizeHistogram::new();
        for sizes in &self.sizes {
            merged.merge(&sizes.lock().take());
        }
        let mut busy = RoleBusy {
            large_jobs: self.large_jobs.swap(0, Ordering::Relaxed),
            ..RoleBusy::default()
        };
        for worker in &self.workers {
            busy.small_ns += worker.small_ns.swap(0, Ordering::Relaxed);
            busy.large_ns += worker.large_ns.swap(0, Ordering::Relaxed);
        }
        (merged, busy)
    }
}

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
