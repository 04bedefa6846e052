//! Where requests wait for a worker, ordered by priority class across connections: strict
//! priority (Rein as published) or deficit round robin over the five Rein classes
//! (`[workers] priority_order`), by [`tailtrim_policy::serverq`], the code the simulator and
//! the proxy's gate run.
//!
//! ```text
//!   reader ─► ExecQueue (per connection: one request released at a time in order)
//!          ─► release(job) ─► ClassQueue::push(class, job)
//!                              strict: class 0 first, FIFO inside a class
//!                              drr:    [class 0] w5 … [class 4] w1, deficit round robin
//!                              ─► PriorityQueue::pop ─► worker runs the job ─► reply slot
//! ```
//!
//! A request's class is its `mg … p<class>` flag ([`tailtrim_proto::meta::CLASS_FLAG`]);
//! requests without one are class 0, so a server that never sees the flag serves its queue
//! first come, first served, as before. A request whose flag carries an ageing
//! (`p<class>a<overtakes>`, `cost-sbf`'s order) is queued aged by it
//! ([`PriorityQueue::push_aged`]): a strict server serves those requests exactly as the
//! simulator's `Discipline::Aged` servers do (arrivals counted in requests, each key of a
//! multiget one); a `drr` server orders them by class only. The queue holds jobs that may run now: a connection's
//! own order is kept before its requests get here (its [`crate::session::ExecQueue`]), and
//! replies are sequenced per connection whatever order jobs complete in.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tailtrim_policy::drr::CLASSES;
use tailtrim_policy::serverq::{Discipline, PriorityQueue};
use tailtrim_proto::meta::Priority;

// The wire flag and the scheduler must agree on the number of classes.
const _: () = assert!(CLASSES == tailtrim_proto::meta::PRIORITY_CLASSES as usize);

/// A queue of runnable jobs that workers take from in the order of a
/// [`Discipline`] over the priority classes. Any number of threads may push and pop.
pub struct ClassQueue<J> {
    queue: Mutex<PriorityQueue<J>>,
    ready: Condvar,
    /// False: every job is queued in class 0 (`[workers] priorities = false`).
    classes: bool,
}

impl<J> Default for ClassQueue<J> {
    fn default() -> Self {
        ClassQueue::new(Some(Discipline::Strict))
    }
}

impl<J> ClassQueue<J> {
    /// An empty queue ordered by `discipline`; `None` serves every job first come, first
    /// served.
    pub fn new(discipline: Option<Discipline>) -> Self {
        ClassQueue {
            queue: Mutex::new(PriorityQueue::new(discipline.unwrap_or(Discipline::Strict))),
            ready: Condvar::new(),
            classes: discipline.is_some(),
        }
    }

    /// Queues `job` in `class` (0 highest; larger values are the lowest) and wakes one waiting
    /// worker.
    pub fn push(&self, class: usize, job: J) {
        let class = u8::try_from(class.min(CLASSES - 1)).unwrap_or(u8::MAX);
        self.push_request(
            Priority {
                class,
                overtakes: None,
            },
            job,
        );
    }

    /// Queues `job` of a request's `priority`: its class, aged by the overtakes it carries if
    /// any (else in the queue's own order), and wakes one waiting worker. With classes off,
    /// every job is class 0, first come, first served.
    pub fn push_request(&self, priority: Priority, job: J) {
        let class = priority.class.min(CLASSES as u8 - 1);
        {
            let mut queue = self.queue.lock();
            match (self.classes, priority.overtakes) {
                (false, _) => queue.push(0, job),
                (true, None) => queue.push(class, job),
                (true, Some(overtakes)) => queue.push_aged(class, overtakes, job),
            }
        }
        self.ready.notify_one();
    }

    /// The next job in the discipline's order, if any.
    pub fn try_pop(&self) -> Option<J> {
        self.queue.lock().pop()
    }

    /// The next job, waiting up to `timeout` for one.
    pub fn pop_timeout(&self, timeout: Duration) -> Option<J> {
        let mut queue = self.queue.lock();
        if queue.is_empty() {
            let _ = self.ready.wait_for(&mut queue, timeout);
        }
        queue.pop()
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
        self.queue.lock().class_lens()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_order_serves_every_queued_higher_class_first() {
        let queue = ClassQueue::default();
        for i in 0..3 {
            queue.push(4, (4, i));
            queue.push(1, (1, i));
            queue.push(0, (0, i));
        }
        let order: Vec<(usize, i32)> = std::iter::from_fn(|| queue.try_pop()).collect();
        // Class by class, each class in arrival order.
        let expected: Vec<(usize, i32)> = [0, 1, 4]
            .iter()
            .flat_map(|&class| (0..3).map(move |i| (class, i)))
            .collect();
        assert_eq!(order, expected);
    }

    #[test]
    fn a_high_class_job_overtakes_a_queued_backlog_and_unflagged_jobs_stay_fifo() {
        let queue = ClassQueue::new(Some(Discipline::Drr));
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
        let queue = ClassQueue::new(None);
        queue.push(4, 1);
        queue.push(0, 2);
        assert_eq!(queue.try_pop(), Some(1));
        assert_eq!(queue.try_pop(), Some(2));
    }

    #[test]
    fn a_request_carrying_its_ageing_is_overtaken_only_within_its_window() {
        let queue = ClassQueue::default();
        let aged = |class| Priority {
            class,
            overtakes: Some(2),
        };
        queue.push_request(aged(4), "low");
        for _ in 0..20 {
            queue.push_request(aged(0), "high");
        }
        let order: Vec<&str> = std::iter::from_fn(|| queue.try_pop()).collect();
        // Class 4 with 2 overtakes per class: its key is its arrival (1) + 4 × 2 = 9, so the
        // high requests that arrived 2nd to 8th (keys 2..8) go first, and the 9th, whose key
        // ties, goes after it (a tie goes to the earlier arrival): 7 overtake it.
        assert_eq!(order.iter().position(|&job| job == "low"), Some(7));
        // Classes off: first come, first served whatever the flag carried.
        let fifo = ClassQueue::new(None);
        fifo.push_request(aged(4), 1);
        fifo.push_request(aged(0), 2);
        assert_eq!(fifo.try_pop(), Some(1));
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
