//! `auto`: a planner that picks, per epoch, which planner plans the next epoch's multigets —
//! `batch`, `chisel` (with the `(B, L)` Chisel's online analyzer sets) or the priority
//! scheduler `cost-rel` — from the workload it measured, with hysteresis and a guard that
//! falls back to batch when the choice measures worse.
//!
//! ```text
//!   plan ─► the chosen planner's plan; per request: bottleneck keys K (most keys in one
//!           fetch), outstanding fetches on the request's backends
//!   observe_value ─► value sizes (log2 histogram)   observe ─► every planner
//!   observe_request ─► latency ─► epoch ends (≥ epoch_nanos and ≥ min_requests, or
//!                                   max_requests):
//!     features: costly share = share of requests with K ≥ 8 × median K
//!                            + share of requests estimated to carry a value ≥ 16 × median
//!               queue        = mean outstanding fetches per touched backend
//!               reshaping    = Chisel's analyzer chose a (B, L) other than batch's
//!     guard:  choice ≠ batch and its epoch p99 > batch's last epoch p99 × (1 + guard_margin)
//!             ─► batch; that choice blocked for backoff epochs (doubling per fallback)
//!     scores (predicted relative p99 gain over batch): batch 0;
//!             scheduler +(1 − costly/limit)·gain when 0 < costly < limit and queue ≥ queue_min,
//!                       −gain when costly ≥ limit (the p99 sits in the demoted class), else 0;
//!             chisel +gain when reshaping, else −gain
//!     hysteresis: the best must beat the current choice by `margin` for `hold_epochs` epochs
//! ```
//!
//! Why these inputs: a priority scheduler cannot shorten the tail where there is no queue
//! (queueing is the only thing it reorders), and it lengthens the tail when the demoted class
//! holds 1 % of the requests or more, since the p99 then lies inside that class. Chisel's gain
//! is what its layered model predicts; the analyzer that runs the model leaves batch's shape
//! only when the model promises a gain on measured fits, so its decision is the input here.
//!
//! Pure: no I/O; time is the [`Timestamp`] the runtime passes in requests and observations,
//! so the proxy and the simulator run the same decisions.

use crate::chisel::ChiselPlanner;
use crate::costrel::{CostRelPlanner, CostRelSettings};
use crate::health::Timestamp;
use crate::planner::base::{
    Action, BatchPlanner, ClusterView, Fetch, Observation, PlanRequest, Planner, QueryShape,
    RequestDone,
};
use crate::serverq::Discipline;

/// Score of a planner expected to help (and, negated, of one expected to hurt).
const GAIN: f64 = 0.3;

/// Chisel's online analyzer epochs one analysis spans while `auto` plans with batch or the
/// scheduler ([`Planner::analyzer_epochs`]). The analyzer (a grid of model evaluations) then
/// only feeds the "would Chisel reshape" input, which a longer span measures as well; running
/// it every epoch was the largest part of what `auto` cost over batch on the tier's workload
/// (`experiments/tier/loopback-proxy-cost/`). While Chisel plans: every epoch.
pub const ANALYZER_EPOCHS_OFF_CHISEL: u32 = 4;
/// log2 buckets by which a bottleneck must exceed the median one to be costly (8×).
const COSTLY_KEY_OCTAVES: usize = 3;
/// log2 buckets by which a value must exceed the median one to be large (16×).
const LARGE_VALUE_OCTAVES: usize = 4;
/// Buckets of the log2 histograms (the last one holds everything from 2^31 up).
const BUCKETS: usize = 32;

/// The planners `auto` chooses between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Choice {
    /// One fetch per backend.
    Batch,
    /// Chisel's split and merge, at the shape its analyzer set.
    Chisel,
    /// The priority scheduler (`cost-rel`).
    Scheduler,
}

impl Choice {
    /// In the order ties are broken (the simplest first).
    pub const ALL: [Choice; 3] = [Choice::Batch, Choice::Chisel, Choice::Scheduler];

    /// Ordinal shown as the `auto_choice` gauge.
    pub fn ordinal(self) -> usize {
        self as usize
    }
}

/// Settings of `auto` (the defaults in brackets).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoSettings {
    /// Shortest epoch, nanoseconds of the runtime's clock (1 s).
    pub epoch_nanos: u64,
    /// Fewest requests in an epoch, so its p99 rests on at least 10 of them (1 000).
    pub min_requests: u64,
    /// Most requests in an epoch: a busy runtime decides at least this often (20 000).
    pub max_requests: u64,
    /// Score by which a candidate must beat the current choice (0.1).
    pub margin: f64,
    /// Epochs in a row a candidate must win before it is chosen (2).
    pub hold_epochs: u32,
    /// Relative excess of the choice's epoch p99 over batch's that makes it fall back (0.1).
    pub guard_margin: f64,
    /// Epochs a choice that fell back waits before it may be chosen again, doubled for each
    /// fallback of that choice, up to 16 times (4).
    pub backoff_epochs: u32,
    /// Costly share at or above which prioritising hurts the p99 (0.01).
    pub demote_limit: f64,
    /// Outstanding fetches per touched backend from which there is a queue to reorder (1).
    pub queue_min: f64,
    /// The scheduler's settings (`cost-rel`'s defaults).
    pub scheduler: CostRelSettings,
}

impl Default for AutoSettings {
    fn default() -> Self {
        AutoSettings {
            epoch_nanos: 1_000_000_000,
            min_requests: 1_000,
            max_requests: 20_000,
            margin: 0.1,
            hold_epochs: 2,
            guard_margin: 0.1,
            backoff_epochs: 4,
            demote_limit: 0.01,
            queue_min: 1.0,
            scheduler: CostRelSettings::default(),
        }
    }
}

/// What one epoch measured, the decision's input.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EpochFeatures {
    /// Requests completed in the epoch.
    pub requests: u64,
    /// Share of requests whose cost is several times the typical one (see the module docs).
    pub costly_share: f64,
    /// Mean outstanding fetches on a request's backends when it was planned.
    pub queue: f64,
    /// True when Chisel's analyzer set a shape other than batch's.
    pub reshaping: bool,
    /// The epoch's p99 request latency, nanoseconds.
    pub p99_nanos: u64,
}

/// The decision state: pure, fed one [`EpochFeatures`] per epoch.
#[derive(Debug, Clone)]
pub struct Decider {
    settings: AutoSettings,
    current: Choice,
    candidate: Option<(Choice, u32)>,
    batch_p99: Option<u64>,
    blocked_until: [u64; 3],
    fallbacks_of: [u32; 3],
    epochs: u64,
    switches: u64,
    fallbacks: u64,
}

impl Decider {
    /// Starts with batch.
    pub fn new(settings: AutoSettings) -> Self {
        Decider {
            settings,
            current: Choice::Batch,
            candidate: None,
            batch_p99: None,
            blocked_until: [0; 3],
            fallbacks_of: [0; 3],
            epochs: 0,
            switches: 0,
            fallbacks: 0,
        }
    }

    /// The planner in force.
    pub fn current(&self) -> Choice {
        self.current
    }

    /// Epochs decided.
    pub fn epochs(&self) -> u64 {
        self.epochs
    }

    /// Changes of choice (fallbacks included).
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// Times the guard sent the choice back to batch.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks
    }

    /// Batch's last measured epoch p99, nanoseconds.
    pub fn batch_p99(&self) -> Option<u64> {
        self.batch_p99
    }

    /// The predicted relative p99 gain of `choice` over batch for `features`.
    pub fn score(&self, choice: Choice, features: &EpochFeatures) -> f64 {
        let settings = &self.settings;
        match choice {
            Choice::Batch => 0.0,
            Choice::Chisel if features.reshaping => GAIN,
            Choice::Chisel => -GAIN,
            Choice::Scheduler if features.costly_share >= settings.demote_limit => -GAIN,
            Choice::Scheduler
                if features.costly_share > 0.0 && features.queue >= settings.queue_min =>
            {
                GAIN * (1.0 - features.costly_share / settings.demote_limit)
            }
            Choice::Scheduler => 0.0,
        }
    }

    /// Ends an epoch: the guard, then the hysteresis. Returns the choice for the next epoch.
    pub fn end_epoch(&mut self, features: &EpochFeatures) -> Choice {
        self.epochs += 1;
        let epoch = self.epochs;
        if self.current == Choice::Batch {
            self.batch_p99 = Some(features.p99_nanos);
        } else if let Some(batch) = self.batch_p99 {
            let bound = batch as f64 * (1.0 + self.settings.guard_margin);
            if features.p99_nanos as f64 > bound {
                let fell = self.current.ordinal();
                self.fallbacks_of[fell] = self.fallbacks_of[fell].saturating_add(1);
                let doublings = (self.fallbacks_of[fell] - 1).min(4);
                let backoff = u64::from(self.settings.backoff_epochs) << doublings;
                self.blocked_until[fell] = epoch + backoff;
                self.fallbacks += 1;
                self.switch_to(Choice::Batch);
                return self.current;
            }
        }
        let current_score = self.score(self.current, features);
        let best = Choice::ALL
            .into_iter()
            .filter(|&choice| {
                choice == Choice::Batch || self.blocked_until[choice.ordinal()] <= epoch
            })
            .map(|choice| (choice, self.score(choice, features)))
            .fold((Choice::Batch, f64::MIN), |best, next| {
                if next.1 > best.1 {
                    next
                } else {
                    best
                }
            });
        if best.0 == self.current || best.1 < current_score + self.settings.margin {
            self.candidate = None;
            return self.current;
        }
        let streak = match self.candidate {
            Some((choice, streak)) if choice == best.0 => streak + 1,
            _ => 1,
        };
        if streak >= self.settings.hold_epochs {
            self.switch_to(best.0);
        } else {
            self.candidate = Some((best.0, streak));
        }
        self.current
    }

    fn switch_to(&mut self, choice: Choice) {
        self.candidate = None;
        if choice != self.current {
            self.current = choice;
            self.switches += 1;
        }
    }
}

/// A log2 histogram: counts of values by `floor(log2(value))` (0 and 1 in bucket 0).
#[derive(Debug, Clone, Default)]
struct Log2Histogram {
    counts: [u64; BUCKETS],
    total: u64,
}

impl Log2Histogram {
    fn record(&mut self, value: u64) {
        let bucket = (63 - value.max(1).leading_zeros()) as usize;
        self.counts[bucket.min(BUCKETS - 1)] += 1;
        self.total += 1;
    }

    fn median_bucket(&self) -> usize {
        let half = self.total.div_ceil(2);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= half {
                return bucket;
            }
        }
        0
    }

    /// Share of the values at least `octaves` buckets above the median's.
    fn share_above_median(&self, octaves: usize) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let from = self.median_bucket() + octaves;
        let above: u64 = self.counts.iter().skip(from).sum();
        above as f64 / self.total as f64
    }
}

/// One epoch's measurements.
#[derive(Debug, Clone, Default)]
struct Epoch {
    started: Option<Timestamp>,
    bottlenecks: Log2Histogram,
    values: Log2Histogram,
    keys: u64,
    planned: u64,
    queue_sum: f64,
    latencies: Vec<u64>,
}

impl Epoch {
    fn features(&mut self, reshaping: bool) -> EpochFeatures {
        let requests = self.latencies.len() as u64;
        let p99_nanos = if self.latencies.is_empty() {
            0
        } else {
            let at = ((self.latencies.len() as f64 * 0.99).ceil() as usize)
                .clamp(1, self.latencies.len())
                - 1;
            *self.latencies.select_nth_unstable(at).1
        };
        let planned = self.planned.max(1) as f64;
        let mean_keys = self.keys as f64 / planned;
        let large_values = self.values.share_above_median(LARGE_VALUE_OCTAVES);
        let with_large_value = 1.0 - (1.0 - large_values).powf(mean_keys.max(1.0));
        EpochFeatures {
            requests,
            costly_share: (self.bottlenecks.share_above_median(COSTLY_KEY_OCTAVES)
                + with_large_value)
                .min(1.0),
            queue: self.queue_sum / planned,
            reshaping,
            p99_nanos,
        }
    }
}

/// The `auto` planner: the chosen planner plans; every planner learns from every reply.
pub struct AutoPlanner {
    decider: Decider,
    batch: BatchPlanner,
    chisel: ChiselPlanner,
    scheduler: CostRelPlanner,
    epoch: Epoch,
    last: EpochFeatures,
}

impl AutoPlanner {
    /// A planner that starts with batch.
    pub fn new(settings: AutoSettings) -> Self {
        AutoPlanner {
            decider: Decider::new(settings),
            batch: BatchPlanner::default(),
            chisel: ChiselPlanner::default(),
            scheduler: CostRelPlanner::new(settings.scheduler),
            epoch: Epoch::default(),
            last: EpochFeatures::default(),
        }
    }

    /// The decision state.
    pub fn decider(&self) -> &Decider {
        &self.decider
    }

    /// The last epoch's features.
    pub fn last_features(&self) -> &EpochFeatures {
        &self.last
    }

    fn chosen(&self) -> &dyn Planner {
        match self.decider.current() {
            Choice::Batch => &self.batch,
            Choice::Chisel => &self.chisel,
            Choice::Scheduler => &self.scheduler,
        }
    }

    fn chosen_mut(&mut self) -> &mut dyn Planner {
        match self.decider.current() {
            Choice::Batch => &mut self.batch,
            Choice::Chisel => &mut self.chisel,
            Choice::Scheduler => &mut self.scheduler,
        }
    }

    fn reshaping(&self) -> bool {
        self.chisel
            .shape()
            .is_some_and(|shape| shape.merge_level > 1 || shape.chunk_size != u32::MAX)
    }
}

impl Planner for AutoPlanner {
    fn name(&self) -> &'static str {
        "auto"
    }

    fn plan(&mut self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> Vec<Action> {
        if self.epoch.started.is_none() {
            self.epoch.started = Some(request.now);
        }
        let actions = self.chosen_mut().plan(request, view);
        let mut bottleneck = 0usize;
        let mut outstanding = 0u64;
        let mut fetches = 0u64;
        for action in &actions {
            if let Action::Fetch(fetch) = action {
                bottleneck = bottleneck.max(fetch.keys.len());
                outstanding += u64::from(view.load(fetch.backend).outstanding);
                fetches += 1;
            }
        }
        let epoch = &mut self.epoch;
        epoch.bottlenecks.record(bottleneck as u64);
        epoch.keys += request.keys.len() as u64;
        epoch.planned += 1;
        epoch.queue_sum += outstanding as f64 / fetches.max(1) as f64;
        actions
    }

    fn observe(&mut self, observation: &Observation) {
        self.batch.observe(observation);
        self.chisel.observe(observation);
        self.scheduler.observe(observation);
    }

    fn observe_request(&mut self, done: &RequestDone) {
        let settings = self.decider.settings;
        let epoch = &mut self.epoch;
        epoch.latencies.push(done.latency_nanos);
        let count = epoch.latencies.len() as u64;
        let elapsed = epoch
            .started
            .map_or(0, |started| done.at.nanos_since(started));
        let due = (elapsed >= settings.epoch_nanos && count >= settings.min_requests)
            || count >= settings.max_requests;
        if !due {
            return;
        }
        let reshaping = self.reshaping();
        self.last = self.epoch.features(reshaping);
        self.epoch = Epoch {
            started: Some(done.at),
            latencies: Vec::with_capacity(count as usize),
            ..Epoch::default()
        };
        self.decider.end_epoch(&self.last);
    }

    fn merge_limit(&self, keys: usize) -> u32 {
        self.chosen().merge_limit(keys)
    }

    fn shape(&self) -> Option<QueryShape> {
        self.chisel.shape()
    }

    fn set_shape(&mut self, shape: QueryShape) {
        self.chisel.set_shape(shape);
    }

    fn wants_values(&self) -> bool {
        true
    }

    fn observe_value(&mut self, key: &[u8], value_bytes: u64) {
        self.epoch.values.record(value_bytes);
        if self.scheduler.wants_values() {
            self.scheduler.observe_value(key, value_bytes);
        }
        if self.chisel.wants_values() {
            self.chisel.observe_value(key, value_bytes);
        }
    }

    fn discipline(&self) -> Discipline {
        self.scheduler.discipline()
    }

    fn fetch_work_keys(&self, request: &PlanRequest<'_>, fetch: &Fetch) -> f64 {
        self.chosen().fetch_work_keys(request, fetch)
    }

    fn choice(&self) -> Option<&'static str> {
        Some(self.chosen().name())
    }

    fn analyzer_epochs(&self) -> u32 {
        match self.decider.current() {
            Choice::Chisel => 1,
            Choice::Batch | Choice::Scheduler => ANALYZER_EPOCHS_OFF_CHISEL,
        }
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        let decider = &self.decider;
        let mut gauges = vec![
            ("auto_choice", decider.current().ordinal() as f64),
            ("auto_switches", decider.switches() as f64),
            ("auto_fallbacks", decider.fallbacks() as f64),
            ("auto_epochs", decider.epochs() as f64),
            ("auto_costly_share", self.last.costly_share),
            ("auto_queue", self.last.queue),
            ("auto_p99_nanos", self.last.p99_nanos as f64),
            (
                "auto_batch_p99_nanos",
                decider.batch_p99().unwrap_or(0) as f64,
            ),
        ];
        gauges.extend(self.scheduler.gauges());
        gauges
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::base::tests::{keys, view, TestView};

    fn features(costly_share: f64, queue: f64, reshaping: bool, p99_nanos: u64) -> EpochFeatures {
        EpochFeatures {
            requests: 1_000,
            costly_share,
            queue,
            reshaping,
            p99_nanos,
        }
    }

    /// Rare elephants over a queue: the scheduler's workload.
    const RARE_COSTLY: (f64, f64) = (0.005, 3.0);

    #[test]
    fn a_candidate_is_chosen_only_after_winning_hold_epochs_in_a_row() {
        let mut decider = Decider::new(AutoSettings::default());
        let (costly, queue) = RARE_COSTLY;
        // (costly share of the epoch, choice after it): an epoch where the scheduler does not
        // win resets its streak; once chosen, a win by less than the margin does not move it.
        let epochs = [
            (costly, Choice::Batch),
            (0.0, Choice::Batch),
            (costly, Choice::Batch),
            (costly, Choice::Scheduler),
            (0.0098, Choice::Scheduler),
        ];
        for (step, (share, expected)) in epochs.into_iter().enumerate() {
            let choice = decider.end_epoch(&features(share, queue, false, 100));
            assert_eq!(choice, expected, "epoch {step}");
        }
        assert_eq!(decider.switches(), 1);
    }

    #[test]
    fn the_guard_falls_back_to_batch_and_backs_off_before_trying_again() {
        let settings = AutoSettings::default();
        let mut decider = Decider::new(settings);
        let (costly, queue) = RARE_COSTLY;
        let winning = features(costly, queue, false, 100);
        for _ in 0..settings.hold_epochs {
            decider.end_epoch(&winning);
        }
        assert_eq!(decider.current(), Choice::Scheduler);
        // Within the margin of batch's 100 it is kept; beyond it, back to batch.
        for (p99, expected) in [(109, Choice::Scheduler), (111, Choice::Batch)] {
            let choice = decider.end_epoch(&features(costly, queue, false, p99));
            assert_eq!(choice, expected, "p99 {p99}");
        }
        assert_eq!(decider.fallbacks(), 1);
        // Blocked for backoff_epochs, then chosen again after hold_epochs wins.
        let mut epochs_to_retry = 0;
        while decider.end_epoch(&winning) == Choice::Batch {
            epochs_to_retry += 1;
            assert!(epochs_to_retry < 100, "never retried");
        }
        let first_wait = epochs_to_retry;
        assert!(first_wait >= settings.backoff_epochs as usize);
        // A second fallback doubles the wait.
        decider.end_epoch(&features(costly, queue, false, 1_000));
        assert_eq!(decider.fallbacks(), 2);
        let mut second_wait = 0;
        while decider.end_epoch(&winning) == Choice::Batch {
            second_wait += 1;
            assert!(second_wait < 100, "never retried");
        }
        assert_eq!(second_wait, first_wait + settings.backoff_epochs as usize);
    }

    #[test]
    fn each_workload_shape_leads_to_its_choice() {
        let settle = |features: EpochFeatures| {
            let mut decider = Decider::new(AutoSettings::default());
            for _ in 0..5 {
                decider.end_epoch(&features);
            }
            decider.current()
        };
        // Homogeneous: nothing costly, with or without a queue.
        assert_eq!(settle(features(0.0, 3.0, false, 100)), Choice::Batch);
        // ETC-like or heavy-tailed sizes in multigets: large values in several % of requests.
        assert_eq!(settle(features(0.05, 3.0, false, 100)), Choice::Batch);
        // Mice and elephants, 10 % elephants, Chisel's analyzer reshaping.
        assert_eq!(settle(features(0.1, 3.0, true, 100)), Choice::Chisel);
        // The same without a shape from the analyzer: nothing to gain.
        assert_eq!(settle(features(0.1, 3.0, false, 100)), Choice::Batch);
        // Rare elephants over a queue: the scheduler; without a queue: batch.
        assert_eq!(settle(features(0.005, 3.0, false, 100)), Choice::Scheduler);
        assert_eq!(settle(features(0.005, 0.2, false, 100)), Choice::Batch);
    }

    fn loaded(servers: usize, outstanding: u32) -> TestView {
        let mut view = view(servers, 1);
        for load in &mut view.loads {
            load.outstanding = outstanding;
        }
        view
    }

    /// Runs `requests` requests through `planner`, `elephant_every`-th of 400 keys, the others
    /// of 2, each value `value_bytes(index)` bytes, every request taking 100 µs, 1 µs apart.
    fn drive(
        planner: &mut AutoPlanner,
        view: &TestView,
        requests: u64,
        elephant_every: u64,
        value_bytes: impl Fn(u64) -> u64,
    ) {
        let elephant = keys(400);
        for index in 0..requests {
            let mouse = vec![
                format!("mouse-{index}").into_bytes(),
                format!("mouse-{index}-b").into_bytes(),
            ];
            let owned = if index % elephant_every == 0 {
                &elephant
            } else {
                &mouse
            };
            let borrowed: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            let now = Timestamp(index * 1_000);
            let actions = planner.plan(
                &PlanRequest {
                    keys: &borrowed,
                    now,
                },
                view,
            );
            assert!(!actions.is_empty());
            for key in &borrowed {
                planner.observe_value(key, value_bytes(index));
            }
            planner.observe_request(&RequestDone {
                keys: borrowed.len() as u32,
                latency_nanos: 100_000,
                at: Timestamp(now.0 + 100_000),
            });
        }
    }

    /// A planner with epochs of any length after 5 000 requests over 8 backends with
    /// `outstanding` fetches each (see [`drive`]).
    fn driven(
        outstanding: u32,
        elephant_every: u64,
        value_bytes: impl Fn(u64) -> u64,
    ) -> AutoPlanner {
        let mut planner = AutoPlanner::new(AutoSettings {
            epoch_nanos: 0,
            ..AutoSettings::default()
        });
        drive(
            &mut planner,
            &loaded(8, outstanding),
            5_000,
            elephant_every,
            value_bytes,
        );
        planner
    }

    #[test]
    fn measured_rare_elephants_under_load_choose_the_scheduler() {
        let planner = driven(3, 200, |_| 100);
        assert_eq!(planner.decider().current(), Choice::Scheduler);
        assert_eq!(planner.choice(), Some("cost-rel"));
        let gauges = planner.gauges();
        let gauge = |name: &str| gauges.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert_eq!(gauge("auto_choice"), Some(2.0));
        assert_eq!(gauge("auto_switches"), Some(1.0));
        let costly = planner.last_features().costly_share;
        assert!((0.004..0.006).contains(&costly), "{costly}");
    }

    #[test]
    fn measured_common_elephants_idle_backends_or_large_values_keep_batch() {
        // 10 % elephants; rare elephants and no queue; rare elephants and 5 % of the values
        // 100× the others.
        let large_every_twentieth = |index: u64| if index % 20 == 1 { 10_000 } else { 100 };
        for planner in [
            driven(3, 10, |_| 100),
            driven(0, 200, |_| 100),
            driven(3, 200, large_every_twentieth),
        ] {
            assert_eq!(planner.choice(), Some("batch"));
            assert_eq!(planner.decider().switches(), 0);
        }
    }

    #[test]
    fn epochs_end_by_time_once_enough_requests_are_in() {
        let settings = AutoSettings {
            epoch_nanos: 50_000_000,
            min_requests: 100,
            max_requests: 1_000_000,
            ..AutoSettings::default()
        };
        let mut planner = AutoPlanner::new(settings);
        // 5,000 requests 1 µs apart, the last done at 5.1 ms: less than one 50 ms epoch, five 1 ms ones.
        drive(&mut planner, &loaded(4, 0), 5_000, 200, |_| 100);
        assert_eq!(planner.decider().epochs(), 0);
        let settings = AutoSettings {
            epoch_nanos: 1_000_000,
            ..settings
        };
        let mut planner = AutoPlanner::new(settings);
        drive(&mut planner, &loaded(4, 0), 5_000, 200, |_| 100);
        assert_eq!(planner.decider().epochs(), 5);
    }

    #[test]
    fn chisel_keeps_the_analyzers_shape_while_not_chosen() {
        let mut planner = AutoPlanner::new(AutoSettings::default());
        let shape = QueryShape {
            merge_level: 4,
            chunk_size: 25,
            elephant_threshold: 20,
        };
        planner.set_shape(shape);
        assert_eq!(planner.shape(), Some(shape));
        assert_eq!(
            planner.merge_limit(2),
            1,
            "batch plans until chisel is chosen"
        );
        assert!(planner.reshaping());
    }

    #[test]
    fn the_analyzer_spans_several_epochs_unless_chisel_plans() {
        let mut planner = AutoPlanner::new(AutoSettings {
            epoch_nanos: 0,
            ..AutoSettings::default()
        });
        assert_eq!(planner.choice(), Some("batch"));
        assert_eq!(planner.analyzer_epochs(), ANALYZER_EPOCHS_OFF_CHISEL);
        // The analyzer reshapes and no elephant is costly: Chisel is chosen.
        planner.set_shape(QueryShape {
            merge_level: 4,
            chunk_size: 25,
            elephant_threshold: 20,
        });
        drive(&mut planner, &loaded(8, 0), 5_000, 10, |_| 100);
        assert_eq!(planner.choice(), Some("chisel"));
        assert_eq!(planner.analyzer_epochs(), 1);
        // Every other planner analyzes every epoch.
        assert_eq!(BatchPlanner::default().analyzer_epochs(), 1);
    }
}
