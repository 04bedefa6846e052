//! The size-aware controller: once per epoch, turns the window of accessed sizes into a
//! [`Decision`] (threshold and worker split).
//!
//! ```text
//!  SizeWindow ──aggregate──► percentile(p) ─► measured threshold ─┐ (or fixed threshold)
//!                     │                                            ▼
//!                     └──────────► split_at(threshold) ─► small share of packets ─┐ SplitBy::Packets
//!  RoleBusy per epoch (workers' busy ns by role) ─► ring of W ─► small share of busy ─┤ SplitBy::Busy
//!                                                                  ┌────────────────────┘
//!                                                                  │ ⌈share × workers⌉, clamped
//!                                                                  ▼
//!                                   candidate split ─► hysteresis ─► Decision + DecisionInputs
//! ```
//!
//! # Split by packets or by measured busy time
//!
//! Minos sizes the small side by the small requests' share of *packets* ([`SplitBy::Packets`],
//! the default). With a kernel TCP stack a request's CPU cost is mostly per request (system
//! calls, wake-ups), not per packet, so the packet split gives the small side too few workers.
//! [`SplitBy::Busy`] sizes it by what the workers measured instead ([`RoleBusy`], reported each
//! epoch by the caller): `share = small busy / (small busy + large demand)` over the window,
//! where the large side's demand is its measured busy time per completed job times the large
//! requests the window classified, so a saturated large side (which completes fewer jobs than
//! arrive) is not mistaken for a satisfied one. A saturated small side understates its own
//! demand, but its share then still exceeds its share of workers (its busy time is its whole
//! capacity, the large side's is less), so the split moves towards it until both sides are
//! equally utilised. A window without small busy time, or with large requests but no completed
//! large job (no large worker yet), falls back to packets.

use std::num::NonZeroUsize;
use std::ops::Range;

use super::class::{classify, Epoch, SizeClass};
use super::error::SizeAwareError;
use super::histogram::{CostSplit, SizeWindow};

/// Default percentile of accessed sizes that becomes the threshold (Minos: the 99th).
pub const DEFAULT_PERCENTILE: f64 = 99.0;
/// Default number of epochs in the sliding window.
pub const DEFAULT_WINDOW_EPOCHS: usize = 4;
/// Default consecutive epochs a different split must persist before it is adopted.
pub const DEFAULT_HYSTERESIS_EPOCHS: u32 = 3;
/// Default move of the small cost share that changes the split at once.
pub const DEFAULT_SHARE_MARGIN: f64 = 0.10;
/// Threshold used before the first non-empty window (16 KiB: about 11 packets).
pub const DEFAULT_INITIAL_THRESHOLD_BYTES: u64 = 16 * 1024;
/// Default worker count of [`SizeAwareConfig::default`] (memcached's `-t` default).
pub const DEFAULT_WORKERS: usize = 4;

/// What the number of small workers is proportional to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SplitBy {
    /// The small requests' share of the window's packets (Minos).
    #[default]
    Packets,
    /// The small workers' share of the busy time all workers measured over the window
    /// ([`RoleBusy`]); packets while none was measured.
    Busy,
}

impl SplitBy {
    /// Names accepted by [`SplitBy::parse`], in declaration order.
    pub const NAMES: [&'static str; 2] = ["packets", "busy"];

    /// Config and stats spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            SplitBy::Packets => "packets",
            SplitBy::Busy => "busy",
        }
    }

    /// Parses a config or flag value (`packets`, `busy`).
    pub fn parse(name: &str) -> Result<SplitBy, SizeAwareError> {
        match name {
            "packets" => Ok(SplitBy::Packets),
            "busy" => Ok(SplitBy::Busy),
            other => Err(SizeAwareError::UnknownSplitBy(other.to_string())),
        }
    }
}

/// Busy time the workers of each role measured (time spent serving, not waiting for work),
/// summed over the workers of that role, for one epoch or a window of them, and the large
/// requests the large workers completed in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RoleBusy {
    /// Busy nanoseconds of the small workers (reading, parsing and looking up every request,
    /// serving the small ones, handing the large ones off).
    pub small_ns: u64,
    /// Busy nanoseconds of the large workers.
    pub large_ns: u64,
    /// Large requests (hand-offs) the large workers completed.
    pub large_jobs: u64,
}

impl RoleBusy {
    fn add(&mut self, other: RoleBusy) {
        self.small_ns = self.small_ns.saturating_add(other.small_ns);
        self.large_ns = self.large_ns.saturating_add(other.large_ns);
        self.large_jobs = self.large_jobs.saturating_add(other.large_jobs);
    }

    /// The work the large side was asked for over the window, in busy nanoseconds: its
    /// measured cost per completed job times the large requests the window classified. A
    /// saturated large side completes fewer jobs than arrive; this still counts all of them.
    /// `None` when no large job completed (no cost measured).
    pub fn large_demand_ns(&self, large_requests: u64) -> Option<u64> {
        (self.large_jobs > 0).then(|| {
            let demand = u128::from(self.large_ns) * u128::from(large_requests)
                / u128::from(self.large_jobs);
            u64::try_from(demand).unwrap_or(u64::MAX)
        })
    }
}

/// When the controller may change the worker split.
///
/// Each epoch with a non-empty window yields a *candidate* split. The current split is
/// replaced by the candidate when any of these holds:
/// 1. no split has been measured yet (the initial split is a guess, not a measurement);
/// 2. the window holds large requests but the current split has no large worker;
/// 3. the small cost share moved more than `share_margin` away from the share at which the
///    current split was adopted;
/// 4. the candidate has differed from the current split for `consecutive_epochs` epochs in a
///    row (the candidate of the last of those epochs is adopted).
///
/// An epoch whose candidate equals the current split resets the count. `consecutive_epochs
/// = 1` disables hysteresis; `share_margin >= 1` disables rule 3.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HysteresisConfig {
    /// `H`: epochs in a row a different split must be asked for (at least 1).
    pub consecutive_epochs: u32,
    /// Share move (0..=1) that overrides the count.
    pub share_margin: f64,
}

impl Default for HysteresisConfig {
    fn default() -> Self {
        HysteresisConfig {
            consecutive_epochs: DEFAULT_HYSTERESIS_EPOCHS,
            share_margin: DEFAULT_SHARE_MARGIN,
        }
    }
}

/// Configuration of the size-aware controller (the `[sizeaware]` section, typically).
#[derive(Debug, Clone, PartialEq)]
pub struct SizeAwareConfig {
    /// Workers to split (`-t`). At least 1.
    pub workers: usize,
    /// Percentile (0..=100) of accessed sizes that becomes the threshold.
    pub percentile: f64,
    /// Epochs the window spans; [`SizeAwareController::new_window`] builds a matching window.
    pub window_epochs: usize,
    /// Hysteresis of the split.
    pub hysteresis: HysteresisConfig,
    /// Experiment override: always use this threshold.
    pub fixed_threshold_bytes: Option<u64>,
    /// Experiment override: always use this many small workers (1..=workers; `workers` means
    /// no large worker, so everything is served in place).
    pub fixed_small_workers: Option<usize>,
    /// Threshold before the first measurement.
    pub initial_threshold_bytes: u64,
    /// What the split follows (default [`SplitBy::Packets`], Minos's rule).
    pub split_by: SplitBy,
    /// An idle large worker (nothing in the large queue) takes new requests as the small
    /// workers do ([`crate::sizeaware::PackedDecision::takes_small_input`]); default off
    /// (Minos: large workers serve large requests only).
    pub large_workers_help: bool,
}

impl Default for SizeAwareConfig {
    fn default() -> Self {
        SizeAwareConfig::with_workers(DEFAULT_WORKERS)
    }
}

impl SizeAwareConfig {
    /// The defaults for `workers` workers.
    pub fn with_workers(workers: usize) -> Self {
        SizeAwareConfig {
            workers,
            percentile: DEFAULT_PERCENTILE,
            window_epochs: DEFAULT_WINDOW_EPOCHS,
            hysteresis: HysteresisConfig::default(),
            fixed_threshold_bytes: None,
            fixed_small_workers: None,
            initial_threshold_bytes: DEFAULT_INITIAL_THRESHOLD_BYTES,
            split_by: SplitBy::Packets,
            large_workers_help: false,
        }
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), SizeAwareError> {
        if self.workers == 0 {
            return Err(SizeAwareError::NoWorkers);
        }
        if !(0.0..=100.0).contains(&self.percentile) {
            return Err(SizeAwareError::BadPercentile(self.percentile));
        }
        if self.window_epochs == 0 {
            return Err(SizeAwareError::ZeroWindow);
        }
        if self.hysteresis.consecutive_epochs == 0 {
            return Err(SizeAwareError::ZeroHysteresisEpochs);
        }
        let margin = self.hysteresis.share_margin;
        if margin.is_nan() || margin < 0.0 {
            return Err(SizeAwareError::BadShareMargin(margin));
        }
        if let Some(small) = self.fixed_small_workers {
            if small == 0 || small > self.workers {
                return Err(SizeAwareError::BadFixedSplit {
                    small,
                    workers: self.workers,
                });
            }
        }
        Ok(())
    }
}

/// Why the current decision is what it is (`sizeaware_reason` in stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionReason {
    /// No epoch processed yet: initial threshold, `workers − 1` small workers.
    Initial,
    /// The window was empty: the previous decision was kept.
    EmptyWindow,
    /// The split is fixed by configuration.
    FixedSplit,
    /// The first measured split replaced the initial guess.
    FirstMeasurement,
    /// Large requests appeared while no large worker existed.
    LargeWorkerNeeded,
    /// The small share moved more than the margin.
    ShareMoved,
    /// The candidate differed for `consecutive_epochs` epochs in a row.
    Sustained,
    /// The candidate equals the current split.
    Unchanged,
    /// The candidate differs but hysteresis holds the current split.
    Held,
}

impl DecisionReason {
    /// Stats spelling (snake case).
    pub const fn as_str(self) -> &'static str {
        match self {
            DecisionReason::Initial => "initial",
            DecisionReason::EmptyWindow => "empty_window",
            DecisionReason::FixedSplit => "fixed_split",
            DecisionReason::FirstMeasurement => "first_measurement",
            DecisionReason::LargeWorkerNeeded => "large_worker_needed",
            DecisionReason::ShareMoved => "share_moved",
            DecisionReason::Sustained => "sustained",
            DecisionReason::Unchanged => "unchanged",
            DecisionReason::Held => "held",
        }
    }
}

/// What a decision was computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecisionInputs {
    /// The window's current epoch when the decision was made.
    pub epoch: Epoch,
    /// Requests in the window.
    pub window_requests: u64,
    /// Packets in the window.
    pub window_packets: u64,
    /// The window split at the decision's threshold.
    pub split: CostSplit,
    /// Size at the configured percentile (`None` when the window is empty).
    pub measured_threshold_bytes: Option<u64>,
    /// The share the split followed: small packets / all packets, or under [`SplitBy::Busy`]
    /// with busy time measured, small busy time / all busy time (`None` when the window is
    /// empty).
    pub small_cost_share: Option<f64>,
    /// What the split followed this epoch ([`SplitBy::Busy`] falls back to packets while no
    /// busy time was measured).
    pub split_by: SplitBy,
    /// Busy time by role over the window (zero unless the caller reports it).
    pub window_busy: RoleBusy,
    /// `⌈share × workers⌉` (with helping large workers `workers − ⌈large share × workers⌉`)
    /// after clamping, before hysteresis (`None` when empty).
    pub candidate_small_workers: Option<usize>,
    /// Epochs in a row the candidate has differed from the current split.
    pub hysteresis_streak: u32,
    /// Why the split is what it is.
    pub reason: DecisionReason,
}

impl DecisionInputs {
    fn initial() -> Self {
        DecisionInputs {
            epoch: Epoch(0),
            window_requests: 0,
            window_packets: 0,
            split: CostSplit::default(),
            measured_threshold_bytes: None,
            small_cost_share: None,
            split_by: SplitBy::Packets,
            window_busy: RoleBusy::default(),
            candidate_small_workers: None,
            hysteresis_streak: 0,
            reason: DecisionReason::Initial,
        }
    }
}

/// The controller's output, published to the workers every epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// Requests with `size > threshold_bytes` are large.
    pub threshold_bytes: u64,
    /// Workers `0..small_workers` are small (they read requests and serve small ones).
    pub small_workers: usize,
    /// Workers `small_workers..small_workers + large_workers` are large.
    pub large_workers: usize,
    /// What it was computed from.
    pub inputs: DecisionInputs,
}

impl Decision {
    /// All workers.
    pub const fn workers(&self) -> usize {
        self.small_workers + self.large_workers
    }

    /// The class a request of `size_bytes` is served as: [`classify`] against the threshold,
    /// except that with no large worker everything is served in place ([`SizeClass::Small`]).
    pub const fn class_of(&self, size_bytes: u64) -> SizeClass {
        if self.large_workers == 0 {
            SizeClass::Small
        } else {
            classify(size_bytes, self.threshold_bytes)
        }
    }

    /// The role of worker `worker` (`None` past the last worker).
    pub const fn role_of(&self, worker: usize) -> Option<SizeClass> {
        if worker < self.small_workers {
            Some(SizeClass::Small)
        } else if worker < self.workers() {
            Some(SizeClass::Large)
        } else {
            None
        }
    }

    /// Indexes of the small workers.
    pub const fn small_worker_range(&self) -> Range<usize> {
        0..self.small_workers
    }

    /// Indexes of the large workers.
    pub const fn large_worker_range(&self) -> Range<usize> {
        self.small_workers..self.workers()
    }

    /// `(name, value)` pairs for a `stats sizeaware` group, names `sizeaware_<what>`.
    /// Absent measurements are reported as `-`.
    pub fn stats(&self) -> Vec<(&'static str, String)> {
        let inputs = &self.inputs;
        let or_dash = |value: Option<String>| value.unwrap_or_else(|| "-".to_string());
        vec![
            (
                "sizeaware_threshold_bytes",
                self.threshold_bytes.to_string(),
            ),
            ("sizeaware_small_workers", self.small_workers.to_string()),
            ("sizeaware_large_workers", self.large_workers.to_string()),
            ("sizeaware_epoch", inputs.epoch.0.to_string()),
            ("sizeaware_reason", inputs.reason.as_str().to_string()),
            (
                "sizeaware_window_requests",
                inputs.window_requests.to_string(),
            ),
            (
                "sizeaware_window_packets",
                inputs.window_packets.to_string(),
            ),
            (
                "sizeaware_window_small_requests",
                inputs.split.small_requests.to_string(),
            ),
            (
                "sizeaware_window_large_requests",
                inputs.split.large_requests.to_string(),
            ),
            (
                "sizeaware_window_small_packets",
                inputs.split.small_packets.to_string(),
            ),
            (
                "sizeaware_window_large_packets",
                inputs.split.large_packets.to_string(),
            ),
            (
                "sizeaware_measured_threshold_bytes",
                or_dash(
                    inputs
                        .measured_threshold_bytes
                        .map(|value| value.to_string()),
                ),
            ),
            (
                "sizeaware_small_cost_share",
                or_dash(inputs.small_cost_share.map(|share| format!("{share:.4}"))),
            ),
            ("sizeaware_split_by", inputs.split_by.as_str().to_string()),
            (
                "sizeaware_window_small_busy_us",
                (inputs.window_busy.small_ns / 1_000).to_string(),
            ),
            (
                "sizeaware_window_large_busy_us",
                (inputs.window_busy.large_ns / 1_000).to_string(),
            ),
            (
                "sizeaware_window_large_jobs",
                inputs.window_busy.large_jobs.to_string(),
            ),
            (
                "sizeaware_candidate_small_workers",
                or_dash(
                    inputs
                        .candidate_small_workers
                        .map(|value| value.to_string()),
                ),
            ),
            (
                "sizeaware_hysteresis_streak",
                inputs.hysteresis_streak.to_string(),
            ),
        ]
    }
}

/// `⌈small_packets × workers / total_packets⌉`, clamped: at least 1; at most `workers − 1`
/// while `large_requests > 0` and `workers >= 2`. Integer arithmetic, so an exact share such as
/// 1/2 of 2 workers gives exactly 1.
pub fn small_workers_for(split: &CostSplit, workers: usize) -> usize {
    small_workers_for_share(
        split.small_packets,
        split.total_packets(),
        split.large_requests > 0,
        workers,
    )
}

/// `⌈small × workers / total⌉` (all workers when `total` is 0), clamped as
/// [`small_workers_for`] clamps: at least 1; at most `workers − 1` while `large_exist` and
/// `workers >= 2`. Integer arithmetic.
pub fn small_workers_for_share(small: u64, total: u64, large_exist: bool, workers: usize) -> usize {
    let workers = workers.max(1);
    let total = u128::from(total);
    let proportional = if total == 0 {
        workers
    } else {
        let scaled = u128::from(small).min(total) * workers as u128;
        scaled.div_ceil(total).min(workers as u128) as usize
    };
    let upper = if large_exist && workers >= 2 {
        workers - 1
    } else {
        workers
    };
    proportional.clamp(1, upper)
}

/// The split when large workers help ([`SizeAwareConfig::large_workers_help`]): the large
/// side rounds up, `workers − ⌈(total − small) × workers / total⌉`, clamped as
/// [`small_workers_for_share`] clamps. An idle helping large worker serves small requests, so
/// capacity the large side does not use is not lost, while capacity it lacks cannot be lent
/// (small workers never take the large queue). Rounding the small side up instead leaves the
/// large side `⌊large share × workers⌋` workers, less than its work whenever that share is not
/// a multiple of `1 / workers`: at 4 workers and a 32 % large share that is one worker for
/// 1.15 workers' work at load 0.9, and the large queue grows without bound. Integer arithmetic.
pub fn small_workers_for_share_helped(
    small: u64,
    total: u64,
    large_exist: bool,
    workers: usize,
) -> usize {
    let workers = workers.max(1);
    let proportional = if total == 0 {
        workers
    } else {
        let large = u128::from(total - small.min(total));
        let large_workers = (large * workers as u128).div_ceil(u128::from(total));
        workers.saturating_sub(large_workers.min(workers as u128) as usize)
    };
    let upper = if large_exist && workers >= 2 {
        workers - 1
    } else {
        workers
    };
    proportional.clamp(1, upper)
}

/// The size-aware controller. Owns the hysteresis state; everything else comes in per call.
#[derive(Debug, Clone)]
pub struct SizeAwareController {
    config: SizeAwareConfig,
    decision: Decision,
    /// Small share at which the current split was adopted; `None` until the first measurement.
    adopted_share: Option<f64>,
    streak: u32,
    /// The last `window_epochs` reports of [`RoleBusy`], oldest first.
    busy_ring: std::collections::VecDeque<RoleBusy>,
}

impl SizeAwareController {
    /// A controller with its initial decision: the fixed or initial threshold and the fixed
    /// split or `workers − 1` small workers (1 small, 0 large with a single worker).
    pub fn new(config: SizeAwareConfig) -> Result<Self, SizeAwareError> {
        config.validate()?;
        let workers = config.workers;
        let small_workers =
            config
                .fixed_small_workers
                .unwrap_or(if workers >= 2 { workers - 1 } else { 1 });
        let decision = Decision {
            threshold_bytes: config
                .fixed_threshold_bytes
                .unwrap_or(config.initial_threshold_bytes),
            small_workers,
            large_workers: workers - small_workers,
            inputs: DecisionInputs::initial(),
        };
        Ok(SizeAwareController {
            config,
            decision,
            adopted_share: None,
            streak: 0,
            busy_ring: std::collections::VecDeque::new(),
        })
    }

    /// An empty window of the configured length, for the server's controller thread.
    pub fn new_window(&self) -> SizeWindow {
        // `validate` rejected a zero-length window; the fallback only keeps this infallible.
        SizeWindow::with_epochs(
            NonZeroUsize::new(self.config.window_epochs).unwrap_or(NonZeroUsize::MIN),
        )
    }

    /// The configuration.
    pub fn config(&self) -> &SizeAwareConfig {
        &self.config
    }

    /// The decision in force.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Computes the decision for the window as it stands at the end of an epoch; call once
    /// per epoch, after merging the workers' histograms into `window`. An empty window keeps
    /// the previous threshold and split.
    pub fn on_epoch(&mut self, window: &SizeWindow) -> Decision {
        self.decide(window)
    }

    /// [`on_epoch`](Self::on_epoch) with the busy time the workers of each role measured in
    /// the epoch that just ended (roles as in the decision that was in force). Kept for the
    /// last `window_epochs` epochs; used when the split follows [`SplitBy::Busy`].
    pub fn on_epoch_with_busy(&mut self, window: &SizeWindow, busy: RoleBusy) -> Decision {
        self.busy_ring.push_back(busy);
        while self.busy_ring.len() > self.config.window_epochs.max(1) {
            self.busy_ring.pop_front();
        }
        self.decide(window)
    }

    /// Busy time by role summed over the kept epochs.
    fn window_busy(&self) -> RoleBusy {
        let mut total = RoleBusy::default();
        for epoch in &self.busy_ring {
            total.add(*epoch);
        }
        total
    }

    fn decide(&mut self, window: &SizeWindow) -> Decision {
        let aggregate = window.aggregate();
        let window_busy = self.window_busy();
        let workers = self.config.workers;
        let epoch = window.current_epoch();

        let Some(measured) = aggregate.percentile(self.config.percentile) else {
            self.decision.inputs = DecisionInputs {
                epoch,
                hysteresis_streak: self.streak,
                reason: DecisionReason::EmptyWindow,
                ..DecisionInputs::initial()
            };
            return self.decision;
        };

        let threshold = self.config.fixed_threshold_bytes.unwrap_or(measured);
        let split = aggregate.split_at(threshold);
        let large_exist = split.large_requests > 0;
        // Busy split: the small side's measured busy time against the large side's demand
        // (zero when the window holds no large request).
        let large_demand = match self.config.split_by {
            SplitBy::Busy if window_busy.small_ns > 0 => {
                if large_exist {
                    window_busy.large_demand_ns(split.large_requests)
                } else {
                    Some(0)
                }
            }
            _ => None,
        };
        let split_share = if self.config.large_workers_help {
            small_workers_for_share_helped
        } else {
            small_workers_for_share
        };
        let (split_by, share, candidate) = match large_demand {
            Some(large) => {
                let total = window_busy.small_ns.saturating_add(large);
                (
                    SplitBy::Busy,
                    Some(window_busy.small_ns as f64 / total as f64),
                    split_share(window_busy.small_ns, total, large_exist, workers),
                )
            }
            None => (
                SplitBy::Packets,
                split.small_share(),
                split_share(
                    split.small_packets,
                    split.total_packets(),
                    large_exist,
                    workers,
                ),
            ),
        };

        let (small_workers, reason) = if let Some(fixed) = self.config.fixed_small_workers {
            (fixed, DecisionReason::FixedSplit)
        } else {
            self.apply_hysteresis(candidate, share, large_exist)
        };

        self.decision = Decision {
            threshold_bytes: threshold,
            small_workers,
            large_workers: workers - small_workers,
            inputs: DecisionInputs {
                epoch,
                window_requests: aggregate.requests(),
                window_packets: aggregate.packets(),
                split,
                measured_threshold_bytes: Some(measured),
                small_cost_share: share,
                split_by,
                window_busy,
                candidate_small_workers: Some(candidate),
                hysteresis_streak: self.streak,
                reason,
            },
        };
        self.decision
    }

    /// Rules of [`HysteresisConfig`]; returns the split to use and why.
    fn apply_hysteresis(
        &mut self,
        candidate: usize,
        share: Option<f64>,
        large_requests_exist: bool,
    ) -> (usize, DecisionReason) {
        let current = self.decision.small_workers;
        let share = share.unwrap_or(1.0);
        let adopt = |controller: &mut Self, reason| {
            controller.adopted_share = Some(share);
            controller.streak = 0;
            (candidate, reason)
        };
        let Some(adopted_share) = self.adopted_share else {
            return adopt(self, DecisionReason::FirstMeasurement);
        };
        if candidate == current {
            self.streak = 0;
            return (current, DecisionReason::Unchanged);
        }
        if large_requests_exist && self.decision.large_workers == 0 && self.config.workers >= 2 {
            return adopt(self, DecisionReason::LargeWorkerNeeded);
        }
        if (share - adopted_share).abs() > self.config.hysteresis.share_margin {
            return adopt(self, DecisionReason::ShareMoved);
        }
        self.streak = self.streak.saturating_add(1);
        if self.streak >= self.config.hysteresis.consecutive_epochs {
            return adopt(self, DecisionReason::Sustained);
        }
        (current, DecisionReason::Held)
    }
}

#[cfg(test)]
mod tests {
    use super::{
        small_workers_for, DecisionReason, HysteresisConfig, RoleBusy, SizeAwareConfig,
        SizeAwareController, SplitBy, DEFAULT_INITIAL_THRESHOLD_BYTES,
    };
    use crate::sizeaware::class::{packet_cost, Epoch, SizeClass};
    use crate::sizeaware::error::SizeAwareError;
    use crate::sizeaware::histogram::{CostSplit, SizeWindow};

    fn controller(config: SizeAwareConfig) -> SizeAwareController {
        SizeAwareController::new(config).unwrap_or_else(|error| panic!("{error}"))
    }

    fn window_with(sizes: &[(u64, u64)]) -> SizeWindow {
        let mut window = SizeWindow::new(4).unwrap_or_else(|error| panic!("{error}"));
        for (size, count) in sizes {
            for _ in 0..*count {
                window.record(*size, *size);
            }
        }
        window
    }

    /// Expected small workers by the definition, in floating point, for cross-checking.
    fn expected_small(
        small_packets: u64,
        total_packets: u64,
        workers: usize,
        large: bool,
    ) -> usize {
        let share = small_packets as f64 / total_packets as f64;
        let raw = (share * workers as f64 - 1e-9).ceil() as usize;
        let upper = if large && workers >= 2 {
            workers - 1
        } else {
            workers
        };
        raw.clamp(1, upper)
    }

    fn busy_config(workers: usize) -> SizeAwareConfig {
        SizeAwareConfig {
            split_by: SplitBy::Busy,
            ..SizeAwareConfig::with_workers(workers)
        }
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn split_by_names_parse_and_print() {
        for name in SplitBy::NAMES {
            let parsed = SplitBy::parse(name).unwrap_or_else(|error| panic!("{error}"));
            assert_eq!(parsed.as_str(), name);
        }
        assert_eq!(
            SplitBy::parse("bytes"),
            Err(SizeAwareError::UnknownSplitBy("bytes".into()))
        );
        assert_eq!(SizeAwareConfig::default().split_by, SplitBy::Packets);
    }

    #[test]
    fn busy_split_follows_measured_busy_time_not_packets() {
        // By packets, 5 × 1 MB among 995 tiny requests take 3 of 4 workers.
        let window = window_with(&[(10, 995), (1_000_000, 5)]);
        let busy = RoleBusy {
            small_ns: 3 * MS,
            large_ns: MS,
            large_jobs: 5,
        };
        let mut by_packets = controller(SizeAwareConfig::with_workers(4));
        let decision = by_packets.on_epoch_with_busy(&window, busy);
        assert_eq!(decision.inputs.split_by, SplitBy::Packets);
        assert_eq!(decision.small_workers, 1);

        // Measured: the small side did 3 ms, the large side 1 ms for all 5 large requests.
        let mut by_busy = controller(busy_config(4));
        let decision = by_busy.on_epoch_with_busy(&window, busy);
        assert_eq!(decision.inputs.split_by, SplitBy::Busy);
        assert_eq!(decision.inputs.small_cost_share, Some(0.75));
        assert_eq!(decision.inputs.window_busy, busy);
        assert_eq!((decision.small_workers, decision.large_workers), (3, 1));
        let stats = decision.stats();
        let stat = |name: &str| {
            stats
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.clone())
        };
        assert_eq!(stat("sizeaware_split_by").as_deref(), Some("busy"));
        assert_eq!(
            stat("sizeaware_window_small_busy_us").as_deref(),
            Some("3000")
        );
        assert_eq!(stat("sizeaware_window_large_jobs").as_deref(), Some("5"));
    }

    #[test]
    fn helping_large_workers_round_the_large_side_up() {
        // The b-10pct mix at 4 workers: large opsets are 32 % of the work. Rounding the small
        // side up (⌈0.68 × 4⌉ = 3) leaves one large worker for 1.28 workers' share: at load
        // 0.9 that is 1.15 workers of large work on one, and the large queue never drains.
        // With helping large workers the large side rounds up (⌈0.32 × 4⌉ = 2): the second
        // large worker serves small opsets whenever the large queue is empty.
        let window = window_with(&[(1_000, 900), (128_000, 100)]);
        let busy = RoleBusy {
            small_ns: 68 * MS,
            large_ns: 32 * MS,
            large_jobs: 100,
        };
        let config = |help| SizeAwareConfig {
            fixed_threshold_bytes: Some(65_536),
            large_workers_help: help,
            ..busy_config(4)
        };
        let mut minos = controller(config(false));
        let decision = minos.on_epoch_with_busy(&window, busy);
        assert_eq!(decision.inputs.small_cost_share, Some(0.68));
        assert_eq!((decision.small_workers, decision.large_workers), (3, 1));
        let mut helped = controller(config(true));
        let decision = helped.on_epoch_with_busy(&window, busy);
        assert_eq!(decision.inputs.candidate_small_workers, Some(2));
        assert_eq!((decision.small_workers, decision.large_workers), (2, 2));
    }

    #[test]
    fn the_helped_split_gives_the_large_side_at_least_its_share() {
        use super::small_workers_for_share_helped as helped;
        assert_eq!(helped(68, 100, true, 4), 2); // 1.28 large → 2
        assert_eq!(helped(75, 100, true, 4), 3); // exactly 1 large
        assert_eq!(helped(995, 1_000, true, 4), 3); // a sliver still gets its one worker
        assert_eq!(helped(1, 1_000, true, 4), 1); // at least one small
        assert_eq!(helped(10, 10, false, 8), 8); // no large request: every worker small
        assert_eq!(helped(0, 0, false, 3), 3);
        for workers in 2..=16usize {
            for small in 0..=100u64 {
                let small_workers = helped(small, 100, true, workers);
                let large_workers = (workers - small_workers) as f64;
                let large_share = (100 - small) as f64 / 100.0;
                assert!(
                    small_workers == 1 || large_workers >= large_share * workers as f64 - 1e-9,
                    "{small}/100 of {workers}: {small_workers} small"
                );
                assert!((1..workers).contains(&small_workers));
            }
        }
    }

    #[test]
    fn busy_split_counts_large_requests_a_saturated_large_side_did_not_finish() {
        // The large side finished 1 of the window's 5 large requests in its 1 ms: its demand is
        // 5 ms, not 1 ms, so the small share is 3 / 8, not 3 / 4.
        let window = window_with(&[(10, 995), (1_000_000, 5)]);
        let mut by_busy = controller(busy_config(4));
        let decision = by_busy.on_epoch_with_busy(
            &window,
            RoleBusy {
                small_ns: 3 * MS,
                large_ns: MS,
                large_jobs: 1,
            },
        );
        assert_eq!(decision.inputs.small_cost_share, Some(3.0 / 8.0));
        assert_eq!((decision.small_workers, decision.large_workers), (2, 2));
    }

    #[test]
    fn busy_split_falls_back_to_packets_until_it_has_measurements() {
        let window = window_with(&[(10, 995), (1_000_000, 5)]);
        // No busy time reported at all.
        let mut none = controller(busy_config(4));
        let decision = none.on_epoch(&window);
        assert_eq!(decision.inputs.split_by, SplitBy::Packets);
        assert_eq!(decision.small_workers, 1);
        // Large requests but no large job completed: the large side's cost is unknown.
        let mut no_large_job = controller(busy_config(4));
        let decision = no_large_job.on_epoch_with_busy(
            &window,
            RoleBusy {
                small_ns: 3 * MS,
                large_ns: 0,
                large_jobs: 0,
            },
        );
        assert_eq!(decision.inputs.split_by, SplitBy::Packets);
        // No large request in the window: every worker is small, as with packets.
        let mut all_small = controller(busy_config(4));
        let decision = all_small.on_epoch_with_busy(
            &window_with(&[(64, 1000)]),
            RoleBusy {
                small_ns: MS,
                large_ns: 0,
                large_jobs: 0,
            },
        );
        assert_eq!(decision.inputs.split_by, SplitBy::Busy);
        assert_eq!((decision.small_workers, decision.large_workers), (4, 0));
    }

    #[test]
    fn busy_window_keeps_the_last_window_epochs() {
        let config = SizeAwareConfig {
            window_epochs: 2,
            ..busy_config(4)
        };
        let mut controller = controller(config);
        let window = window_with(&[(10, 995), (1_000_000, 5)]);
        for small_ms in [100, 2, 3] {
            controller.on_epoch_with_busy(
                &window,
                RoleBusy {
                    small_ns: small_ms * MS,
                    large_ns: MS,
                    large_jobs: 5,
                },
            );
        }
        let busy = controller.decision().inputs.window_busy;
        assert_eq!(
            (busy.small_ns, busy.large_ns, busy.large_jobs),
            (5 * MS, 2 * MS, 10)
        );
    }

    /// A closed loop: 8 workers, one epoch of 1 ms; the small side's work is 5 worker-epochs,
    /// the large side's 100 requests of 20 µs (2 worker-epochs). Each side does what its
    /// workers can of its work. Returns the split after `epochs` epochs and whether its last
    /// epoch left either side saturated.
    fn closed_loop(config: SizeAwareConfig, epochs: usize) -> (usize, bool) {
        const LARGE_REQUESTS: u64 = 100;
        const LARGE_COST_NS: u64 = 20_000;
        let mut controller = controller(config);
        let mut window = SizeWindow::new(4).unwrap_or_else(|error| panic!("{error}"));
        let mut saturated = false;
        for epoch in 1..=epochs as u64 {
            let decision = *controller.decision();
            let small_capacity = decision.small_workers as u64 * MS;
            let large_capacity = decision.large_workers as u64 * MS;
            let small_ns = (5 * MS).min(small_capacity);
            let large_jobs = LARGE_REQUESTS.min(large_capacity / LARGE_COST_NS);
            saturated = small_ns < 5 * MS || large_jobs < LARGE_REQUESTS;
            window.advance_to(Epoch(epoch));
            for _ in 0..10_000 {
                window.record(100, 100);
            }
            for _ in 0..LARGE_REQUESTS {
                window.record(1_000_000, 1_000_000);
            }
            controller.on_epoch_with_busy(
                &window,
                RoleBusy {
                    small_ns,
                    large_ns: large_jobs * LARGE_COST_NS,
                    large_jobs,
                },
            );
        }
        (controller.decision().small_workers, saturated)
    }

    #[test]
    fn busy_split_converges_where_no_side_saturates_and_packets_does_not() {
        // By packets the large requests are 87 % of the cost: 2 small workers for 5 workers'
        // worth of small work.
        let (small, saturated) = closed_loop(SizeAwareConfig::with_workers(8), 12);
        assert_eq!(small, 2);
        assert!(saturated);
        // By busy time: 5 or 6 small workers, and neither side saturated at the end.
        let (small, saturated) = closed_loop(busy_config(8), 12);
        assert!((5..=6).contains(&small), "small workers {small}");
        assert!(!saturated);
    }

    #[test]
    fn config_validation() {
        let bad = |edit: fn(&mut SizeAwareConfig)| {
            let mut config = SizeAwareConfig::with_workers(4);
            edit(&mut config);
            SizeAwareController::new(config).err()
        };
        assert_eq!(bad(|c| c.workers = 0), Some(SizeAwareError::NoWorkers));
        assert_eq!(
            bad(|c| c.percentile = 100.5),
            Some(SizeAwareError::BadPercentile(100.5))
        );
        assert!(matches!(
            bad(|c| c.percentile = f64::NAN),
            Some(SizeAwareError::BadPercentile(_))
        ));
        assert_eq!(
            bad(|c| c.window_epochs = 0),
            Some(SizeAwareError::ZeroWindow)
        );
        assert_eq!(
            bad(|c| c.hysteresis.consecutive_epochs = 0),
            Some(SizeAwareError::ZeroHysteresisEpochs)
        );
        assert_eq!(
            bad(|c| c.hysteresis.share_margin = -0.1),
            Some(SizeAwareError::BadShareMargin(-0.1))
        );
        assert_eq!(
            bad(|c| c.fixed_small_workers = Some(5)),
            Some(SizeAwareError::BadFixedSplit {
                small: 5,
                workers: 4
            })
        );
        assert_eq!(bad(|c| c.fixed_small_workers = Some(4)), None);
    }

    #[test]
    fn initial_decision() {
        let four = controller(SizeAwareConfig::with_workers(4));
        let decision = four.decision();
        assert_eq!((decision.small_workers, decision.large_workers), (3, 1));
        assert_eq!(decision.threshold_bytes, DEFAULT_INITIAL_THRESHOLD_BYTES);
        assert_eq!(decision.inputs.reason, DecisionReason::Initial);
        let one = controller(SizeAwareConfig::with_workers(1));
        assert_eq!(
            (one.decision().small_workers, one.decision().large_workers),
            (1, 0)
        );
    }

    #[test]
    fn empty_window_keeps_the_previous_decision() {
        let mut controller = controller(SizeAwareConfig::with_workers(4));
        let initial = *controller.decision();
        let mut window = SizeWindow::new(4).unwrap_or_else(|error| panic!("{error}"));
        let decision = controller.on_epoch(&window);
        assert_eq!(decision.threshold_bytes, initial.threshold_bytes);
        assert_eq!(decision.small_workers, initial.small_workers);
        assert_eq!(decision.inputs.reason, DecisionReason::EmptyWindow);

        // After a measurement, an empty window keeps the measured decision.
        window.record(100, 100);
        let measured = controller.on_epoch(&window);
        assert_eq!(measured.threshold_bytes, 100); // capped at the recorded maximum
        window.advance_to(Epoch(10));
        let kept = controller.on_epoch(&window);
        assert_eq!(kept.threshold_bytes, measured.threshold_bytes);
        assert_eq!(kept.small_workers, measured.small_workers);
        assert_eq!(kept.inputs.reason, DecisionReason::EmptyWindow);
        assert_eq!(kept.inputs.epoch, Epoch(10));
        assert_eq!(kept.inputs.window_requests, 0);
    }

    #[test]
    fn all_small_uses_every_worker_for_small_requests() {
        let mut controller = controller(SizeAwareConfig::with_workers(4));
        let decision = controller.on_epoch(&window_with(&[(64, 1000)]));
        assert_eq!(decision.threshold_bytes, 64); // bucket 64..=71, capped at the maximum
        assert_eq!(decision.inputs.split.large_requests, 0);
        assert_eq!(decision.inputs.small_cost_share, Some(1.0));
        assert_eq!((decision.small_workers, decision.large_workers), (4, 0));
        assert_eq!(decision.class_of(10_000_000), SizeClass::Small); // no large worker
        assert_eq!(decision.inputs.reason, DecisionReason::FirstMeasurement);
    }

    #[test]
    fn all_large_same_size_is_all_small_by_definition() {
        // Every request has the p99 size, so none is above it: nothing is "large".
        let mut controller = controller(SizeAwareConfig::with_workers(4));
        let decision = controller.on_epoch(&window_with(&[(500_000, 200)]));
        assert_eq!(decision.threshold_bytes, 500_000); // capped at the recorded maximum
        assert_eq!(decision.inputs.split.large_requests, 0);
        assert_eq!((decision.small_workers, decision.large_workers), (4, 0));
    }

    #[test]
    fn all_large_sizes_split_by_cost_above_the_p99() {
        // Every request is far above one packet; the top 1% (one 1 MB request) is large.
        let mut controller = controller(SizeAwareConfig::with_workers(4));
        let decision = controller.on_epoch(&window_with(&[(500_000, 99), (1_000_000, 1)]));
        assert!(decision.threshold_bytes >= 500_000);
        assert!(decision.threshold_bytes - 500_000 <= 500_000 / 64);
        let split = decision.inputs.split;
        assert_eq!((split.small_requests, split.large_requests), (99, 1));
        assert_eq!(split.small_packets, 99 * packet_cost(500_000));
        assert_eq!(split.large_packets, packet_cost(1_000_000));
        let expected = expected_small(split.small_packets, split.total_packets(), 4, true);
        assert_eq!(decision.small_workers, expected);
        assert_eq!((decision.small_workers, decision.large_workers), (3, 1));
    }

    #[test]
    fn mostly_large_cost_gets_one_small_worker() {
        // 99.5% tiny requests, 0.5% 1 MB ones (above the p99): most packets are large.
        let mut controller = controller(SizeAwareConfig::with_workers(4));
        let decision = controller.on_epoch(&window_with(&[(10, 995), (1_000_000, 5)]));
        assert_eq!(decision.threshold_bytes, 15);
        let split = decision.inputs.split;
        assert_eq!(split.large_requests, 5);
        assert_eq!(
            decision.small_workers,
            expected_small(995, split.total_packets(), 4, true)
        );
        assert_eq!((decision.small_workers, decision.large_workers), (1, 3));
    }

    #[test]
    fn single_huge_request_among_small_ones() {
        // 1000 × 100 B + one 10 MB: p99 = 100 B's bucket; the 10 MB request is large and costs
        // 6667 packets against 1000, so most workers become large.
        let mut four = controller(SizeAwareConfig::with_workers(4));
        let window = window_with(&[(100, 1000), (10_000_000, 1)]);
        let decision = four.on_epoch(&window);
        assert_eq!(decision.threshold_bytes, 103);
        let split = decision.inputs.split;
        assert_eq!(split.large_requests, 1);
        assert_eq!(split.large_packets, packet_cost(10_000_000));
        assert_eq!(split.small_packets, 1000);
        assert_eq!(
            decision.small_workers,
            expected_small(1000, 1000 + 6667, 4, true)
        );
        assert_eq!(decision.small_workers, 1);
        assert_eq!(decision.large_workers, 3);
        assert_eq!(decision.class_of(10_000_000), SizeClass::Large);
        assert_eq!(decision.class_of(100), SizeClass::Small);

        // Alone, the huge request is its own p99: small by definition, nothing to hand off.
        let mut alone = controller(SizeAwareConfig::with_workers(4));
        let decision = alone.on_epoch(&window_with(&[(10_000_000, 1)]));
        assert_eq!(decision.threshold_bytes, 10_000_000);
        assert_eq!(decision.large_workers, 0);
    }

    #[test]
    fn two_workers_always_keep_a_large_worker_when_large_requests_exist() {
        // Small share ~88%: ⌈0.88 × 2⌉ = 2, clamped to 1 so the large request has a worker.
        let mut two = controller(SizeAwareConfig::with_workers(2));
        let decision = two.on_epoch(&window_with(&[(50, 10_000), (2_000_000, 1)]));
        assert_eq!(decision.inputs.candidate_small_workers, Some(1));
        assert_eq!((decision.small_workers, decision.large_workers), (1, 1));
        assert_eq!(decision.large_worker_range(), 1..2);
        assert_eq!(decision.role_of(0), Some(SizeClass::Small));
        assert_eq!(decision.role_of(1), Some(SizeClass::Large));
        assert_eq!(decision.role_of(2), None);

        // Mostly large cost: still one small worker.
        let mut two = controller(SizeAwareConfig::with_workers(2));
        let decision = two.on_epoch(&window_with(&[(50, 1000), (2_000_000, 5)]));
        assert!(decision.inputs.small_cost_share.unwrap_or(1.0) < 0.5);
        assert!(decision.inputs.split.large_requests > 0);
        assert_eq!((decision.small_workers, decision.large_workers), (1, 1));
    }

    #[test]
    fn one_worker_serves_everything_in_place() {
        let mut one = controller(SizeAwareConfig::with_workers(1));
        let decision = one.on_epoch(&window_with(&[(50, 1000), (2_000_000, 5)]));
        assert!(decision.inputs.split.large_requests > 0);
        assert_eq!((decision.small_workers, decision.large_workers), (1, 0));
        assert_eq!(decision.class_of(2_000_000), SizeClass::Small);
    }

    #[test]
    fn percentile_edges_p0_and_p100() {
        let sizes = [(10u64, 50u64), (3_000, 30), (80_000, 20)];
        let mut p100 = controller(SizeAwareConfig {
            percentile: 100.0,
            ..SizeAwareConfig::with_workers(4)
        });
        let decision = p100.on_epoch(&window_with(&sizes));
        assert_eq!(decision.threshold_bytes, 80_000);
        assert_eq!(decision.inputs.split.large_requests, 0);
        assert_eq!(decision.small_workers, 4);

        let mut p0 = controller(SizeAwareConfig {
            percentile: 0.0,
            ..SizeAwareConfig::with_workers(4)
        });
        let decision = p0.on_epoch(&window_with(&sizes));
        assert_eq!(decision.threshold_bytes, 15); // the 8..=15 bucket holding 10
        assert_eq!(decision.inputs.split.small_requests, 50);
        assert_eq!(decision.inputs.split.large_requests, 50);
        let split = decision.inputs.split;
        assert_eq!(split.small_packets, 50);
        assert_eq!(
            split.large_packets,
            30 * packet_cost(3_000) + 20 * packet_cost(80_000)
        );
        assert_eq!(
            decision.small_workers,
            expected_small(50, split.total_packets(), 4, true)
        );
    }

    #[test]
    fn small_worker_formula_is_integer_exact() {
        let split = |small_packets, large_packets, large_requests| CostSplit {
            small_requests: small_packets,
            large_requests,
            small_packets,
            large_packets,
        };
        assert_eq!(small_workers_for(&split(50, 50, 1), 2), 1); // exactly 1/2 of 2
        assert_eq!(small_workers_for(&split(51, 49, 1), 4), 3); // 2.04 → 3
        assert_eq!(small_workers_for(&split(25, 75, 1), 4), 1); // exactly 1
        assert_eq!(small_workers_for(&split(1, 999, 1), 8), 1); // at least one small
        assert_eq!(small_workers_for(&split(999, 1, 1), 8), 7); // at least one large
        assert_eq!(small_workers_for(&split(10, 0, 0), 8), 8);
        assert_eq!(small_workers_for(&split(0, 0, 0), 3), 3);
        for workers in 1..=16usize {
            for small in [0u64, 1, 7, 50, 99, 100] {
                let computed = small_workers_for(&split(small, 100 - small, 1), workers);
                assert_eq!(
                    computed,
                    expected_small(small, 100, workers, true),
                    "{small} {workers}"
                );
            }
        }
    }

    /// A window with `small` packets of 100 B requests and `large` 15 KB requests (10 packets
    /// each), pushed as one epoch.
    fn push_epoch(window: &mut SizeWindow, epoch: u64, small: u64, large: u64) {
        window.advance_to(Epoch(epoch));
        for _ in 0..small {
            window.record(100, 100);
        }
        for _ in 0..large {
            window.record(15_000, 15_000);
        }
    }

    #[test]
    fn hysteresis_holds_for_h_epochs_then_changes() {
        let config = SizeAwareConfig {
            window_epochs: 1,
            percentile: 50.0,
            hysteresis: HysteresisConfig {
                consecutive_epochs: 3,
                share_margin: 0.5,
            },
            ..SizeAwareConfig::with_workers(8)
        };
        let mut controller = controller(config);
        let mut window = controller.new_window();
        // Epoch 0: share 600/(600+40×10) = 0.6 → ⌈4.8⌉ = 5 small (first measurement).
        push_epoch(&mut window, 0, 600, 40);
        let first = controller.on_epoch(&window);
        assert_eq!(first.small_workers, 5);
        assert_eq!(first.inputs.reason, DecisionReason::FirstMeasurement);
        // Share 0.5 → 4 small: differs, move 0.1 < margin → held twice, adopted the third time.
        for (epoch, expected_reason, expected_small) in [
            (1, DecisionReason::Held, 5),
            (2, DecisionReason::Held, 5),
            (3, DecisionReason::Sustained, 4),
        ] {
            push_epoch(&mut window, epoch, 600, 60);
            let decision = controller.on_epoch(&window);
            assert_eq!(decision.inputs.candidate_small_workers, Some(4));
            assert_eq!(decision.inputs.reason, expected_reason, "epoch {epoch}");
            assert_eq!(decision.small_workers, expected_small, "epoch {epoch}");
        }
        // A one-epoch blip is held, and an epoch equal to the split resets the count.
        push_epoch(&mut window, 4, 600, 40);
        assert_eq!(
            controller.on_epoch(&window).inputs.reason,
            DecisionReason::Held
        );
        push_epoch(&mut window, 5, 600, 60);
        let decision = controller.on_epoch(&window);
        assert_eq!(decision.inputs.reason, DecisionReason::Unchanged);
        assert_eq!(decision.inputs.hysteresis_streak, 0);
        push_epoch(&mut window, 6, 600, 40);
        let decision = controller.on_epoch(&window);
        assert_eq!(
            (decision.inputs.reason, decision.small_workers),
            (DecisionReason::Held, 4)
        );
        assert_eq!(decision.inputs.hysteresis_streak, 1);
    }

    #[test]
    fn share_moving_past_the_margin_changes_at_once() {
        let config = SizeAwareConfig {
            window_epochs: 1,
            percentile: 50.0,
            hysteresis: HysteresisConfig {
                consecutive_epochs: 100,
                share_margin: 0.2,
            },
            ..SizeAwareConfig::with_workers(8)
        };
        let mut controller = controller(config);
        let mut window = controller.new_window();
        push_epoch(&mut window, 0, 600, 40); // share 0.6 → 5
        assert_eq!(controller.on_epoch(&window).small_workers, 5);
        push_epoch(&mut window, 1, 600, 60); // share 0.5: within margin → held
        assert_eq!(controller.on_epoch(&window).small_workers, 5);
        push_epoch(&mut window, 2, 600, 140); // share 0.3: moved 0.3 > 0.2 → 3 at once
        let decision = controller.on_epoch(&window);
        assert_eq!(decision.inputs.reason, DecisionReason::ShareMoved);
        assert_eq!(decision.small_workers, 3);
    }

    #[test]
    fn no_hysteresis_with_one_epoch() {
        let config = SizeAwareConfig {
            window_epochs: 1,
            percentile: 50.0,
            hysteresis: HysteresisConfig {
                consecutive_epochs: 1,
                share_margin: 1.0,
            },
            ..SizeAwareConfig::with_workers(8)
        };
        let mut controller = controller(config);
        let mut window = controller.new_window();
        push_epoch(&mut window, 0, 600, 40);
        assert_eq!(controller.on_epoch(&window).small_workers, 5);
        push_epoch(&mut window, 1, 600, 60);
        let decision = controller.on_epoch(&window);
        assert_eq!(
            (decision.small_workers, decision.inputs.reason),
            (4, DecisionReason::Sustained)
        );
    }

    #[test]
    fn large_requests_appearing_get_a_large_worker_despite_hysteresis() {
        let config = SizeAwareConfig {
            window_epochs: 1,
            hysteresis: HysteresisConfig {
                consecutive_epochs: 100,
                share_margin: 1.0,
            },
            ..SizeAwareConfig::with_workers(4)
        };
        let mut controller = controller(config);
        let mut window = controller.new_window();
        push_epoch(&mut window, 0, 1000, 0);
        assert_eq!(controller.on_epoch(&window).large_workers, 0);
        push_epoch(&mut window, 1, 1000, 5); // 0.5% large: above the p99
        let decision = controller.on_epoch(&window);
        assert_eq!(decision.inputs.reason, DecisionReason::LargeWorkerNeeded);
        assert_eq!((decision.small_workers, decision.large_workers), (3, 1));
    }

    #[test]
    fn window_expiry_changes_the_threshold() {
        let config = SizeAwareConfig {
            window_epochs: 2,
            percentile: 100.0,
            ..SizeAwareConfig::with_workers(4)
        };
        let mut controller = controller(config);
        let mut window = controller.new_window();
        push_epoch(&mut window, 0, 10, 1);
        assert_eq!(controller.on_epoch(&window).threshold_bytes, 15_000);
        push_epoch(&mut window, 1, 10, 0);
        assert_eq!(controller.on_epoch(&window).threshold_bytes, 15_000);
        push_epoch(&mut window, 2, 10, 0); // epoch 0 and its 15 KB request leave
        assert_eq!(controller.on_epoch(&window).threshold_bytes, 100);
    }

    #[test]
    fn fixed_threshold_and_split_override_the_measurement() {
        let mut fixed = controller(SizeAwareConfig {
            fixed_threshold_bytes: Some(1_000),
            fixed_small_workers: Some(2),
            ..SizeAwareConfig::with_workers(4)
        });
        assert_eq!(fixed.decision().threshold_bytes, 1_000);
        assert_eq!(
            (
                fixed.decision().small_workers,
                fixed.decision().large_workers
            ),
            (2, 2)
        );
        let decision = fixed.on_epoch(&window_with(&[(100, 990), (15_000, 10)]));
        assert_eq!(decision.threshold_bytes, 1_000);
        assert_eq!(decision.inputs.measured_threshold_bytes, Some(103));
        assert_eq!(decision.inputs.split.large_requests, 10);
        assert_eq!((decision.small_workers, decision.large_workers), (2, 2));
        assert_eq!(decision.inputs.reason, DecisionReason::FixedSplit);

        // Fixed threshold only: the split follows the cost at that threshold.
        let mut threshold_only = controller(SizeAwareConfig {
            fixed_threshold_bytes: Some(20_000),
            ..SizeAwareConfig::with_workers(4)
        });
        let decision = threshold_only.on_epoch(&window_with(&[(100, 990), (15_000, 10)]));
        assert_eq!(decision.inputs.split.large_requests, 0);
        assert_eq!((decision.small_workers, decision.large_workers), (4, 0));
    }

    #[test]
    fn stats_report_the_inputs() {
        let mut controller = controller(SizeAwareConfig::with_workers(2));
        let decision = controller.on_epoch(&window_with(&[(100, 990), (15_000, 10)]));
        let stats = decision.stats();
        let get = |name: &str| {
            stats
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.clone())
                .unwrap_or_default()
        };
        assert_eq!(
            get("sizeaware_threshold_bytes"),
            decision.threshold_bytes.to_string()
        );
        assert_eq!(get("sizeaware_window_requests"), "1000");
        assert_eq!(get("sizeaware_window_large_packets"), "100");
        assert_eq!(get("sizeaware_reason"), "first_measurement");
        assert_eq!(
            get("sizeaware_small_cost_share"),
            format!("{:.4}", 990.0 / 1090.0)
        );
        assert!(stats.iter().all(|(key, _)| key.starts_with("sizeaware_")));
    }
}
