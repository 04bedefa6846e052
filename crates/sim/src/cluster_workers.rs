//! The workers of one simulated cluster server: one shared queue (every worker takes the next
//! opset in the planner's order), or size-aware workers (Minos inside the server), deciding
//! with the policy crate's code the server runs ([`crate::decide`], `tailtrim_policy::sizeaware`).
//!
//! ```text
//!  opset at server ─► size-aware? record(reply bytes) in the epoch's SizeHistogram
//!        │             decide::hands_off(decision, reply bytes) ─► large: the large queue
//!        ▼                                                     └─► small: the input
//!  an idle worker that takes it (small: takes_small_input, the small workers first;
//!        large: takes_large_queue) starts it, else it waits in its queue
//!  worker done ─► next: the large queue if it takes it, then the input if it takes that
//!  epoch ─► decide::end_epoch(driver, histogram, busy by class) ─► threshold and split
//! ```
//!
//! A small opset never waits behind a large one: the small workers never take the large
//! queue (unless every worker is small), and a large opset never enters the input while a
//! large worker exists. The split follows the measured large share of the work
//! ([`SplitBy::Busy`], the busy time of each class's
//! opsets), not Minos's packets: the simulator's service costs are per key and per byte, not
//! per packet. The server's small worker that reads and looks up a request before handing it
//! off is not modelled (the opset's reply size is known when it arrives).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use tailtrim_policy::serverq::{Discipline, PriorityQueue};
use tailtrim_policy::sizeaware::{
    EpochDriver, PackedDecision, RoleBusy, SizeAwareConfig, SizeHistogram, SplitBy,
};

use crate::decide;
use crate::SimError;

/// Marks an opset without a priority (FIFO, served before prioritized ones).
pub(crate) const NO_PRIORITY: u8 = u8::MAX;

/// Size-aware workers in every server (`ClusterScenario::size_aware`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SizeAwareServers {
    /// Simulated microseconds between the controller's decisions.
    pub epoch_us: f64,
    /// Percentile of the opsets' reply sizes that becomes the threshold.
    pub percentile: f64,
    /// A fixed threshold instead of the percentile (the controller's experiment override).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_bytes: Option<u64>,
    /// An idle large worker takes small opsets while the large queue is empty.
    pub large_workers_help: bool,
}

impl Default for SizeAwareServers {
    fn default() -> Self {
        SizeAwareServers {
            epoch_us: 10_000.0,
            percentile: tailtrim_policy::sizeaware::DEFAULT_PERCENTILE,
            threshold_bytes: None,
            large_workers_help: true,
        }
    }
}

impl SizeAwareServers {
    /// Checks ranges.
    pub fn validate(&self) -> Result<(), SimError> {
        if !(self.epoch_us.is_finite() && self.epoch_us > 0.0) {
            return Err(SimError::Config(
                "size-aware servers: the epoch must be positive".to_string(),
            ));
        }
        self.config(2).map(|_| ())
    }

    fn config(&self, workers: usize) -> Result<SizeAwareConfig, SimError> {
        let config = SizeAwareConfig {
            percentile: self.percentile,
            fixed_threshold_bytes: self.threshold_bytes,
            split_by: SplitBy::Busy,
            large_workers_help: self.large_workers_help,
            ..SizeAwareConfig::with_workers(workers)
        };
        config
            .validate()
            .map_err(|e| SimError::Config(format!("size-aware servers: {e}")))?;
        Ok(config)
    }
}

/// Opsets waiting at a server: those without a priority first, FIFO, then the prioritized
/// ones in the discipline's order (`tailtrim_policy::serverq`).
pub(crate) struct Waiting {
    fifo: VecDeque<u32>,
    prioritized: PriorityQueue<u32>,
}

impl Waiting {
    pub(crate) fn new(discipline: Discipline) -> Self {
        Waiting {
            fifo: VecDeque::new(),
            prioritized: PriorityQueue::new(discipline),
        }
    }

    pub(crate) fn push(&mut self, priority: u8, query: u32) {
        if priority == NO_PRIORITY {
            self.fifo.push_back(query);
        } else {
            self.prioritized.push(priority, query);
        }
    }

    pub(crate) fn pop(&mut self) -> Option<u32> {
        self.fifo.pop_front().or_else(|| self.prioritized.pop())
    }

    pub(crate) fn len(&self) -> usize {
        self.fifo.len() + self.prioritized.len()
    }
}

/// One server's size-aware state: its controller, the decision in force, the large queue and
/// which workers are busy.
pub(crate) struct SizeAwareServer {
    driver: EpochDriver,
    decision: PackedDecision,
    help: bool,
    busy_workers: Vec<bool>,
    large: Waiting,
    histogram: SizeHistogram,
    busy: RoleBusy,
    /// Opsets classified, and those handed to the large side.
    pub(crate) opsets: u64,
    pub(crate) handoffs: u64,
    /// What the server did over the run, for the report.
    pub(crate) trace: SizeAwareTrace,
}

/// One server's record of its decisions, queues and busy time ([`SizeAwareReport`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct SizeAwareTrace {
    epochs_by_small_workers: Vec<u64>,
    split_changes: u64,
    large_queue_sum: u64,
    large_queue_max: u64,
    input_queue_sum: u64,
    input_queue_max: u64,
    small_class_ns_on_small_workers: u128,
    small_class_ns_on_large_workers: u128,
    large_class_ns: u128,
    /// Opsets handed off without holding a large value, and kept though holding one.
    pub(crate) handed_off_without_large_value: u64,
    pub(crate) kept_with_large_value: u64,
}

impl SizeAwareServer {
    pub(crate) fn new(
        settings: &SizeAwareServers,
        workers: usize,
        discipline: Discipline,
    ) -> Result<Self, SimError> {
        let driver = EpochDriver::new(settings.config(workers)?)
            .map_err(|e| SimError::Config(format!("size-aware servers: {e}")))?;
        Ok(SizeAwareServer {
            decision: driver.published(),
            driver,
            help: settings.large_workers_help,
            busy_workers: vec![false; workers],
            large: Waiting::new(discipline),
            histogram: SizeHistogram::default(),
            busy: RoleBusy::default(),
            opsets: 0,
            handoffs: 0,
            trace: SizeAwareTrace {
                epochs_by_small_workers: vec![0; workers + 1],
                ..SizeAwareTrace::default()
            },
        })
    }

    fn workers(&self) -> usize {
        self.busy_workers.len()
    }

    /// An opset of `reply_bytes` arrives: records its size, returns whether it is large.
    pub(crate) fn classify(&mut self, reply_bytes: u64) -> bool {
        self.histogram.record(reply_bytes, reply_bytes);
        let large = decide::hands_off(Some(self.decision), reply_bytes, self.workers());
        self.opsets += 1;
        self.handoffs += u64::from(large);
        large
    }

    /// The idle worker that starts an opset of this class now, marked busy (`None`: it waits).
    /// Small opsets go to the small workers first.
    pub(crate) fn claim_worker(&mut self, large: bool) -> Option<usize> {
        let workers = self.workers();
        let worker = (0..workers).find(|&worker| {
            !self.busy_workers[worker]
                && if large {
                    self.decision.takes_large_queue(worker, workers)
                } else {
                    self.decision.takes_small_input(worker, self.help)
                }
        })?;
        self.busy_workers[worker] = true;
        Some(worker)
    }

    /// Queues a large opset that found no worker.
    pub(crate) fn push_large(&mut self, priority: u8, query: u32) {
        self.large.push(priority, query);
    }

    /// The next opset worker `worker` serves (it stays busy), or `None` (it goes idle): the
    /// large queue if it takes it, then the input if it takes that.
    pub(crate) fn next_for(&mut self, worker: usize, input: &mut Waiting) -> Option<u32> {
        let workers = self.workers();
        let next = if self.decision.takes_large_queue(worker, workers) {
            self.large.pop()
        } else {
            None
        }
        .or_else(|| {
            if self.decision.takes_small_input(worker, self.help) {
                input.pop()
            } else {
                None
            }
        });
        self.busy_workers[worker] = next.is_some();
        next
    }

    /// A served opset's busy time, by its class (`worker` serves it).
    pub(crate) fn charge(&mut self, large: bool, worker: usize, nanos: u64) {
        let trace = &mut self.trace;
        if large {
            trace.large_class_ns += u128::from(nanos);
        } else if worker < self.decision.small_workers() {
            trace.small_class_ns_on_small_workers += u128::from(nanos);
        } else {
            trace.small_class_ns_on_large_workers += u128::from(nanos);
        }
        if large {
            self.busy.large_ns = self.busy.large_ns.saturating_add(nanos);
            self.busy.large_jobs += 1;
        } else {
            self.busy.small_ns = self.busy.small_ns.saturating_add(nanos);
        }
    }

    /// Ends an epoch: the controller decides from the epoch's sizes and busy time
    /// (`input_len`: small opsets waiting, recorded with the large queue's length).
    pub(crate) fn end_epoch(&mut self, input_len: usize) {
        let busy = std::mem::take(&mut self.busy);
        let before = self.decision.small_workers();
        self.decision = decide::end_epoch(&mut self.driver, &self.histogram, busy);
        self.histogram.clear();
        let trace = &mut self.trace;
        let small = self.decision.small_workers();
        if let Some(epochs) = trace.epochs_by_small_workers.get_mut(small) {
            *epochs += 1;
        }
        trace.split_changes += u64::from(small != before);
        let (large_len, input_len) = (self.large.len() as u64, input_len as u64);
        trace.large_queue_sum += large_len;
        trace.large_queue_max = trace.large_queue_max.max(large_len);
        trace.input_queue_sum += input_len;
        trace.input_queue_max = trace.input_queue_max.max(input_len);
    }

    /// Idle workers, for the caller to offer waiting opsets after a decision moved.
    pub(crate) fn idle_workers(&self) -> Vec<usize> {
        (0..self.workers())
            .filter(|&worker| !self.busy_workers[worker])
            .collect()
    }

    /// The decision in force.
    pub(crate) fn decision(&self) -> PackedDecision {
        self.decision
    }
}

/// What the size-aware servers did over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SizeAwareReport {
    /// Opsets the servers classified.
    pub opsets: u64,
    /// Of those, handed to the large workers.
    pub handoffs: u64,
    /// Each server's small workers at the end of the run.
    pub final_small_workers: Vec<usize>,
    /// Each server's threshold at the end of the run, bytes.
    pub final_threshold_bytes: Vec<u64>,
    /// Epochs (summed over the servers) that ended with each number of small workers,
    /// indexed by it: the split over the run.
    #[serde(default)]
    pub epochs_by_small_workers: Vec<u64>,
    /// Epochs at whose end a server's split changed.
    #[serde(default)]
    pub split_changes: u64,
    /// The large queue's length at the epochs' ends: mean over servers and epochs, and max.
    #[serde(default)]
    pub large_queue_mean: f64,
    #[serde(default)]
    pub large_queue_max: u64,
    /// The small opsets waiting (the input) at the epochs' ends: mean and max.
    #[serde(default)]
    pub input_queue_mean: f64,
    #[serde(default)]
    pub input_queue_max: u64,
    /// Service time started (all servers, µs): small opsets on small workers, small opsets
    /// on large workers that helped, large opsets.
    #[serde(default)]
    pub small_class_us_on_small_workers: f64,
    #[serde(default)]
    pub small_class_us_on_large_workers: f64,
    #[serde(default)]
    pub large_class_us: f64,
    /// Opsets handed off that hold no large value (the threshold inside the small sizes),
    /// and opsets kept small that hold one.
    #[serde(default)]
    pub handed_off_without_large_value: u64,
    #[serde(default)]
    pub kept_with_large_value: u64,
}

impl SizeAwareReport {
    /// Adds one server's counts.
    pub(crate) fn add(&mut self, server: &SizeAwareServer) {
        let trace = &server.trace;
        self.opsets += server.opsets;
        self.handoffs += server.handoffs;
        let decision = server.decision();
        self.final_small_workers.push(decision.small_workers());
        self.final_threshold_bytes.push(decision.threshold());
        if self.epochs_by_small_workers.len() < trace.epochs_by_small_workers.len() {
            self.epochs_by_small_workers
                .resize(trace.epochs_by_small_workers.len(), 0);
        }
        for (sum, epochs) in self
            .epochs_by_small_workers
            .iter_mut()
            .zip(&trace.epochs_by_small_workers)
        {
            *sum += epochs;
        }
        // Means over every server's epochs: the sums are divided once all are in.
        self.split_changes += trace.split_changes;
        self.large_queue_mean += trace.large_queue_sum as f64;
        self.large_queue_max = self.large_queue_max.max(trace.large_queue_max);
        self.input_queue_mean += trace.input_queue_sum as f64;
        self.input_queue_max = self.input_queue_max.max(trace.input_queue_max);
        self.small_class_us_on_small_workers += trace.small_class_ns_on_small_workers as f64 / 1e3;
        self.small_class_us_on_large_workers += trace.small_class_ns_on_large_workers as f64 / 1e3;
        self.large_class_us += trace.large_class_ns as f64 / 1e3;
        self.handed_off_without_large_value += trace.handed_off_without_large_value;
        self.kept_with_large_value += trace.kept_with_large_value;
    }

    /// Turns the queue sums [`add`](Self::add) kept into means over the epochs.
    pub(crate) fn finish(&mut self) {
        let epochs: u64 = self.epochs_by_small_workers.iter().sum();
        if epochs > 0 {
            self.large_queue_mean /= epochs as f64;
            self.input_queue_mean /= epochs as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SizeAwareReport, SizeAwareServer, SizeAwareServers, Waiting, NO_PRIORITY};
    use tailtrim_policy::serverq::Discipline;

    fn server(help: bool) -> SizeAwareServer {
        let settings = SizeAwareServers {
            threshold_bytes: Some(10_000),
            large_workers_help: help,
            ..SizeAwareServers::default()
        };
        // Two workers: the initial split is one small, one large.
        SizeAwareServer::new(&settings, 2, Discipline::Strict).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_small_opset_never_waits_behind_a_large_one() {
        // Two large opsets arrive, then a small one. A shared queue would put the second
        // large opset on the second worker and queue the small one behind both; here the
        // small worker stays free for it.
        let mut server = server(false);
        let mut input = Waiting::new(Discipline::Strict);
        assert!(server.classify(100_000));
        assert_eq!(server.claim_worker(true), Some(1));
        assert!(server.classify(100_000));
        assert_eq!(server.claim_worker(true), None);
        server.push_large(NO_PRIORITY, 2);
        assert!(!server.classify(2_000));
        assert_eq!(server.claim_worker(false), Some(0));
        // A second small one waits in the input, ahead of nothing large: the small worker
        // takes it next, the large worker takes the large queue.
        assert!(!server.classify(2_000));
        assert_eq!(server.claim_worker(false), None);
        input.push(NO_PRIORITY, 4);
        assert_eq!(server.next_for(0, &mut input), Some(4));
        assert_eq!(server.next_for(1, &mut input), Some(2));
        assert_eq!(server.next_for(1, &mut input), None);
        assert_eq!(server.idle_workers(), vec![1]);
    }

    #[test]
    fn an_idle_large_worker_helps_only_when_told() {
        let mut input = Waiting::new(Discipline::Strict);
        let mut alone = server(false);
        assert_eq!(alone.claim_worker(false), Some(0));
        assert_eq!(alone.claim_worker(false), None);
        input.push(NO_PRIORITY, 7);
        assert_eq!(alone.next_for(1, &mut input), None);
        let mut helped = server(true);
        assert_eq!(helped.claim_worker(false), Some(0));
        assert_eq!(helped.claim_worker(false), Some(1));
        // A helping large worker serves the large queue first.
        helped.push_large(NO_PRIORITY, 8);
        assert_eq!(helped.next_for(1, &mut input), Some(8));
        assert_eq!(helped.next_for(1, &mut input), Some(7));
    }

    #[test]
    fn the_split_follows_the_measured_large_share_of_work() {
        let mut server = SizeAwareServer::new(
            &SizeAwareServers {
                threshold_bytes: Some(10_000),
                ..SizeAwareServers::default()
            },
            4,
            Discipline::Strict,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(server.decision().small_workers(), 3);
        // Half the work large: two small workers, two large.
        for _ in 0..10 {
            let large = server.classify(100_000);
            server.charge(large, 0, 10_000);
            let small = server.classify(1_000);
            server.charge(small, 0, 10_000);
        }
        server.end_epoch(0);
        assert_eq!(server.decision().small_workers(), 2);
        assert_eq!(server.handoffs, 10);
        // The report: one epoch that ended at two small workers, a change from three, the
        // work by class (worker 0 is small).
        let mut report = SizeAwareReport::default();
        report.add(&server);
        report.finish();
        assert_eq!(report.epochs_by_small_workers, vec![0, 0, 1, 0, 0]);
        assert_eq!(report.split_changes, 1);
        assert_eq!(report.large_class_us, 100.0);
        assert_eq!(report.small_class_us_on_small_workers, 100.0);
        assert_eq!(report.small_class_us_on_large_workers, 0.0);
        assert_eq!(
            (report.large_queue_mean, report.input_queue_mean),
            (0.0, 0.0)
        );
    }
}
