//! Where requests wait for a worker, ordered by priority class: deficit round robin
//! ([`tailtrim_policy::drr`], the proxy's decision code) over the five Rein classes, across
//! connections.
//!
//! ```text
//!   reader ─► ExecQueue (per connection: one request released at a time in order)
//!          ─► release(job) ─► ClassQueue::push(class, job)
//!                              [class 0] w5 ┐
//!                              [class 1] w4 │ Drr::pop ─► worker runs the job ─► reply slot
//!                              [class 2] w3 ├────────────►
//!                              [class 3] w2 │
//!                              [class 4] w1 ┘
//! ```
//!
//! A request's class is its `mg … p<class>` flag ([`tailtrim_proto::meta::CLASS_FLAG`]);
//! requests without one are class 0, so a server that never sees the flag serves its queue
//! first come, first served, as before. The queue holds jobs that may run now: a connection's
//! own order is kept before its requests get here (its [`crate::session::ExecQueue`]), and
//! replies are sequenced per connection whatever order jobs complete in.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tailtrim_policy::drr::{Drr, CLASSES};

// The wire flag and the scheduler must agree on the number of classes.
const _: () = assert!(CLASSES == tailtrim_proto::meta::PRIORITY_CLASSES as usize);

/// A queue of runnable jobs that workers take from in deficit-round-robin order over the
/// priority classes. Any number of threads may push and pop.
pub struct ClassQueue<J> {
    queue: Mutex<Drr<J>>,
    ready: Condvar,
    /// False: every job is queued in class 0 (`[workers] priorities = false`).
    classes: bool,
}

impl<J> Default for ClassQueue<J> {
    fn default() -> Self {
        ClassQueue::new(true)
    }
}

impl<J> ClassQueue<J> {
    /// An empty queue; `classes` false serves every job first come, first served.
    pub fn new(classes: bool) -> Self {
        ClassQueue {
            queue: Mutex::new(Drr::default()),
            ready: Condvar::new(),
            classes,
        }
    }

    /// Queues `job` in `class` (0 highest; larger values are the lowest) and wakes one waiting
    /// worker.
    pub fn push(&self, class: usize, job: J) {
        let class = if self.classes { class } else { 0 };
        self.queue.lock().push(class, 1, job);
        self.ready.notify_one();
    }

    /// The next job by deficit round robin, if any.
    pub fn try_pop(&self) -> Option<J> {
        self.queue.lock().pop().map(|(_, job)| job)
    }

    /// The next job, waiting up to `timeout` for one.
    pub fn pop_timeout(&self, timeout: Duration) -> Option<J> {
        let mut queue = self.queue.lock();
        if queue.is_empty() {
            let _ = self.ready.wait_for(&mut queue, timeout);
        }
        queue.pop().map(|(_, job)| job)
    }

    /// Jobs waiting, all classes together.
    pub fn len(&self) -> usize {
        self.queue.lock().len()
    }

    /// True if no job waits.
    pub fn is_empty(&self) -> bool {
        self.queue.lock().is_empty()
    }

    /// Jobs waiting in each class.
    pub fn class_lens(&self) -> [usize; CLASSES] {
        let queue = self.queue.lock();
        std::array::from_fn(|class| queue.class_len(class))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_high_class_job_overtakes_a_queued_backlog_and_unflagged_jobs_stay_fifo() {
        let queue = ClassQueue::default();
        for i in 0..10 {
            queue.push(4, i);
        }
        queue.push(0, 100);
        assert_eq!(queue.class_lens(), [1, 0, 0, 0, 9 + 1]);
        assert_eq!(queue.try_pop(), Some(100));
        let rest: Vec<i32> = std::iter::from_fn(|| queue.try_pop()).collect();
        assert_eq!(rest, (0..10).collect::<Vec<_>>());
        // One class only (no request carried a flag): first come, first served.
        for i in 0..5 {
            queue.push(0, i);
        }
        let fifo: Vec<i32> = std::iter::from_fn(|| queue.pop_timeout(Duration::ZERO)).collect();
        assert_eq!(fifo, (0..5).collect::<Vec<_>>());
    }

    #[test]
    fn with_classes_off_the_queue_is_first_come_first_served() {
        let queue = ClassQueue::new(false);
        queue.push(4, 1);
        queue.push(0, 2);
        assert_eq!(queue.try_pop(), Some(1));
        assert_eq!(queue.try_pop(), Some(2));
    }

    #[test]
    fn a_waiting_worker_is_woken_by_a_push() {
        let queue = std::sync::Arc::new(ClassQueue::default());
        let taker = {
            let queue = std::sync::Arc::clone(&queue);
            std::thread::spawn(move || queue.pop_timeout(Duration::from_secs(30)))
        };
        queue.push(2, 7);
        assert_eq!(taker.join().ok().flatten(), Some(7));
    }
}
