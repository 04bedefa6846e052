//! Size-aware (Minos): the small cores share one input; a small core that finds a request
//! large ([`decide::hands_off`]) hands it to the large queue, which the large cores take
//! ([`decide::shared_queue_taker`]); every epoch the controller merges the cores' size
//! histograms and moves the threshold and the split ([`decide::end_epoch`]).

use std::collections::VecDeque;

use tailtrim_policy::sizeaware::{
    EpochDriver, PackedDecision, RoleBusy, SizeAwareConfig, SizeHistogram,
};

use super::host::{Event, Host, Job, Stage, Strategy};
use crate::decide;
use crate::policy::Policy;
use crate::time::Nanos;
use crate::SimError;

/// Size-aware: the two queues, the controller and the decision in force.
#[derive(Debug)]
pub struct SizeAware {
    driver: EpochDriver,
    /// The decision in force, as the server's workers read it.
    decision: PackedDecision,
    large_workers_help: bool,
    epoch: Nanos,
    /// The small cores' shared input.
    input: VecDeque<Job>,
    /// Hand-offs, taken by the large cores.
    large_queue: VecDeque<Job>,
    /// Each core's sizes recorded in this epoch.
    histograms: Vec<SizeHistogram>,
    /// Each core's busy time when the epoch began.
    busy_at_epoch_start: Vec<u64>,
    /// Large requests the large cores completed in this epoch.
    large_jobs: u64,
    rotation: u64,
    handoffs: u64,
}

impl SizeAware {
    /// The controller of `config` on `workers` cores, its epoch `epoch` long.
    pub fn new(
        config: &SizeAwareConfig,
        workers: usize,
        epoch: Nanos,
    ) -> Result<SizeAware, SimError> {
        let driver = EpochDriver::new(SizeAwareConfig {
            workers,
            ..config.clone()
        })
        .map_err(|error| SimError::Config(error.to_string()))?;
        Ok(SizeAware {
            decision: driver.published(),
            driver,
            large_workers_help: config.large_workers_help,
            epoch,
            input: VecDeque::new(),
            large_queue: VecDeque::new(),
            histograms: (0..workers).map(|_| SizeHistogram::default()).collect(),
            busy_at_epoch_start: vec![0; workers],
            large_jobs: 0,
            rotation: 0,
            handoffs: 0,
        })
    }

    /// Whether core `core` takes from the small input
    /// ([`PackedDecision::takes_small_input`]).
    fn takes_small_input(&self, core: usize) -> bool {
        self.decision
            .takes_small_input(core, self.large_workers_help)
    }
}

impl Strategy for SizeAware {
    const KIND: Policy = Policy::SizeAware;

    fn start<H: Host<Strategy = Self>>(host: &mut H) {
        let decision = host.strategy().decision;
        host.note_decision(decision);
        let epoch = host.strategy().epoch;
        host.push_event(epoch, Event::Epoch);
    }

    fn arrive<H: Host<Strategy = Self>>(host: &mut H, req: u32) {
        let workers = host.workers();
        let state = host.strategy();
        state
            .input
            .push_back(Job::new(req, Stage::Front { large: false }));
        let small = state.decision.small_workers().min(workers);
        let start = (state.rotation % small.max(1) as u64) as usize;
        state.rotation = state.rotation.wrapping_add(1);
        for step in 0..small {
            if host.strategy().input.is_empty() {
                break;
            }
            host.try_start((start + step) % small);
        }
        // Idle large cores that help take what the small ones left.
        for core in small..workers {
            if host.strategy().input.is_empty() {
                break;
            }
            if host.strategy().takes_small_input(core) {
                host.try_start(core);
            }
        }
    }

    fn next_job<H: Host<Strategy = Self>>(host: &mut H, core: usize) -> Option<Job> {
        // As the server's worker loop: the large queue first if this core takes from it (a
        // large core; a small one only while no core is large), then, on a small core, the
        // shared input.
        let workers = host.workers();
        let state = host.strategy();
        let large = decide::takes_shared_queue(Self::KIND, Some(state.decision), core, workers)
            .then(|| state.large_queue.pop_front())
            .flatten();
        if large.is_some() {
            large
        } else if state.takes_small_input(core) {
            state.input.pop_front()
        } else {
            None
        }
    }

    fn front_is_large(&self, size: u64, workers: usize) -> bool {
        decide::hands_off(Some(self.decision), size, workers)
    }

    fn front_done<H: Host<Strategy = Self>>(host: &mut H, core: usize, req: u32, large: bool) {
        let size = host.request(req).size;
        host.strategy().histograms[core].record(size, size);
        if large {
            hand_off(host, req);
        } else {
            host.finish(req, core);
        }
    }

    fn back_done(&mut self) {
        self.large_jobs += 1;
    }

    /// The controller's epoch, as the server's controller thread runs it: merge every core's
    /// histogram, [`EpochDriver::tick`], publish.
    fn on_epoch<H: Host<Strategy = Self>>(host: &mut H) {
        let workers = host.workers();
        let busy_now: Vec<u64> = (0..workers).map(|core| host.busy_ns(core)).collect();
        let state = host.strategy();
        let mut merged = SizeHistogram::new();
        for histogram in &mut state.histograms {
            merged.merge(&histogram.take());
        }
        // Busy time by the role each core had during the epoch (the decision in force), as the
        // server's workers measure it.
        let mut busy = RoleBusy {
            large_jobs: std::mem::take(&mut state.large_jobs),
            ..RoleBusy::default()
        };
        let small_workers = state.decision.small_workers();
        for (index, (now, start)) in busy_now
            .iter()
            .zip(state.busy_at_epoch_start.iter_mut())
            .enumerate()
        {
            let spent = now - *start;
            *start = *now;
            if index < small_workers {
                busy.small_ns += spent;
            } else {
                busy.large_ns += spent;
            }
        }
        let decision = decide::end_epoch(&mut state.driver, &merged, busy);
        let changed = state.decision != decision;
        state.decision = decision;
        let epoch = state.epoch;
        if changed {
            host.note_decision(decision);
        }
        for core in 0..workers {
            host.try_start(core);
        }
        let at = host.now() + epoch;
        host.push_event(at, Event::Epoch);
    }

    fn queue_lengths(&self) -> [usize; 3] {
        [self.input.len(), 0, self.large_queue.len()]
    }

    fn handoffs(&self) -> u64 {
        self.handoffs
    }

    fn epochs(&self) -> u64 {
        self.driver.epochs()
    }
}

/// A small core puts a large request in the large queue; an idle large core, if there is
/// one, starts it (else the first large core to free up takes it).
fn hand_off<H: Host<Strategy = SizeAware>>(host: &mut H, req: u32) {
    host.mark_handed_off(req);
    let state = host.strategy();
    state.handoffs += 1;
    state.large_queue.push_back(Job::new(req, Stage::Back));
    let (decision, handoffs) = (state.decision, state.handoffs);
    let busy = host.busy();
    let taker = decide::shared_queue_taker(SizeAware::KIND, Some(decision), &busy, handoffs);
    if let Some(core) = taker {
        host.try_start(core);
    }
}
