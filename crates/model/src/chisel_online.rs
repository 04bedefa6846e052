//! Chisel's online analyzer: the layered model's inputs measured, not configured, and the
//! best `(B, L)` chosen every epoch, with hysteresis and a safe fallback to batching.
//!
//! ```text
//!  every completed backend query ─► observe(keys K, latency) ─► sliding window (last N queries)
//!  every epoch: decide(EpochLoad{requests and keys per class, seconds, client overhead o})
//!     window ─► per key count K: low quantile of the latency ─► weighted least squares
//!               T(K) = α + β·K  (R², sample and key-count checks)  ── poor fit ─► batch (1, ∞)
//!     T(K) split into P_S = s·T and N_S = (1 − s)·T (s = processing share: configured, or
//!     measured: the s at which the model's mean for the epoch's (B, L) meets the epoch's
//!     observed mean, by bisection, averaged over epochs)
//!     Λ, elephant fraction, mean keys per class, o ─► ChiselParams ─► best_plan(grid)
//!     ── no stable plan ─► batch
//!     new (B, L) only if its predicted objective beats the current (B, L)'s by `hysteresis`
//!  guards, both ending in batch:
//!     leave batch only after `settle_epochs` trusted fits in a row
//!     observed mean latency of an epoch under a plan > batch's (EWMA of batch epochs) by
//!     `guard_margin` ─► batch for `guard_backoff` epochs (doubling on each repeat)
//! ```
//!
//! Pure: no clock, no I/O; the runtime feeds it numbers. The fit uses a low quantile of the
//! latency per key count, so the queueing a busy system adds to every round trip is not taken
//! for network or processing time (the model adds its own queueing on top).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::chisel::{
    best_plan, ChiselModel, ChiselParams, LinearCost, Objective, PlanGrid, Prediction,
};
use crate::time::Seconds;

/// Default number of recent backend queries the fit looks at.
pub const DEFAULT_WINDOW: usize = 4096;
/// Default fewest queries in the window before the model is trusted.
pub const DEFAULT_MIN_SAMPLES: usize = 200;
/// Default fewest requests in an epoch before the model is trusted.
pub const DEFAULT_MIN_REQUESTS: u64 = 50;
/// Default lowest R² of the fit before the model is trusted.
pub const DEFAULT_MIN_R_SQUARED: f64 = 0.6;
/// Default quantile of the latency per key count that the fit uses.
pub const DEFAULT_FIT_QUANTILE: f64 = 0.25;
/// Default share of the fitted round trip attributed to backend processing `P_S` (the paper's
/// testbed profile puts it at about 4 % of the constant and 8 % of the per-key part).
pub const DEFAULT_PROCESSING_SHARE: f64 = 0.1;
/// Default relative improvement a new `(B, L)` must promise before the analyzer switches.
pub const DEFAULT_HYSTERESIS: f64 = 0.05;
/// Default largest merge level searched.
pub const DEFAULT_MAX_MERGE: u32 = 8;
/// Default trusted fits in a row before the analyzer leaves batching.
pub const DEFAULT_SETTLE_EPOCHS: u32 = 3;
/// Default relative excess of a plan's observed mean latency over batching's that reverts
/// the plan to batching. Wide enough for one epoch's noise: consecutive batching epochs of
/// 500–1300 requests differed by up to ±40 % on a loaded 2-core machine, and a 10 % margin
/// reverted plans that were gaining; the splits that lose on loopback were 55–62 % worse.
pub const DEFAULT_GUARD_MARGIN: f64 = 0.25;
/// Default epochs the analyzer stays in batching after the guard reverted a plan (doubled for
/// each revert in a row, up to 16 times).
pub const DEFAULT_GUARD_BACKOFF: u32 = 8;
/// Weight of the newest batching epoch in the batching baseline (an exponential average).
const BASELINE_WEIGHT: f64 = 0.3;
/// Weight of the newest epoch's measured processing share in the share in use.
const SHARE_WEIGHT: f64 = 0.3;
/// Smallest processing share a measurement gives (a backend always does some work).
pub const MIN_PROCESSING_SHARE: f64 = 0.01;
/// Bisection steps of a share measurement (the share to within 2^-20).
const SHARE_STEPS: u32 = 20;

/// `L` meaning "do not split".
pub const NO_SPLIT: u32 = u32::MAX;

/// Settings of an [`Analyzer`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AnalyzerConfig {
    /// Recent backend queries kept for the fit.
    pub window: usize,
    /// Fewest queries in the window before the model is used.
    pub min_samples: usize,
    /// Fewest requests in the epoch before the model is used.
    pub min_requests: u64,
    /// Lowest R² of the fit before the model is used.
    pub min_r_squared: f64,
    /// Quantile of the latency per key count that the fit uses (0..1).
    pub fit_quantile: f64,
    /// Share of the fitted round trip that is backend processing `P_S` (0..=1); with
    /// `measure_processing_share`, only the value before the first measurement.
    pub processing_share: f64,
    /// Measure the processing share every epoch from the observed latency instead of using
    /// `processing_share` ([`Analyzer::processing_share`]).
    #[serde(default)]
    pub measure_processing_share: bool,
    /// `C`: client query threads (the runtime's bound on concurrent backend queries).
    pub client_threads: u32,
    /// `S`: backend worker threads in the pool.
    pub server_threads: u32,
    /// Relative improvement a new `(B, L)` must promise to replace the current one.
    pub hysteresis: f64,
    /// Largest merge level searched.
    pub max_merge: u32,
    /// What the grid search minimizes.
    pub objective: Objective,
    /// Trusted fits in a row before the analyzer leaves batching (1: at the first).
    #[serde(default = "default_settle_epochs")]
    pub settle_epochs: u32,
    /// A plan whose epoch's observed mean latency exceeds batching's by more than this share
    /// is reverted to batching (`f64::INFINITY`: never).
    #[serde(default = "default_guard_margin")]
    pub guard_margin: f64,
    /// Epochs spent in batching after the guard reverted a plan (doubled per repeat).
    #[serde(default = "default_guard_backoff")]
    pub guard_backoff: u32,
}

fn default_settle_epochs() -> u32 {
    DEFAULT_SETTLE_EPOCHS
}

fn default_guard_margin() -> f64 {
    DEFAULT_GUARD_MARGIN
}

fn default_guard_backoff() -> u32 {
    DEFAULT_GUARD_BACKOFF
}

impl Default for AnalyzerConfig {
    fn default() -> Self {
        AnalyzerConfig {
            window: DEFAULT_WINDOW,
            min_samples: DEFAULT_MIN_SAMPLES,
            min_requests: DEFAULT_MIN_REQUESTS,
            min_r_squared: DEFAULT_MIN_R_SQUARED,
            fit_quantile: DEFAULT_FIT_QUANTILE,
            processing_share: DEFAULT_PROCESSING_SHARE,
            measure_processing_share: false,
            client_threads: 16,
            server_threads: 16,
            hysteresis: DEFAULT_HYSTERESIS,
            max_merge: DEFAULT_MAX_MERGE,
            objective: Objective::Mean,
            settle_epochs: DEFAULT_SETTLE_EPOCHS,
            guard_margin: DEFAULT_GUARD_MARGIN,
            guard_backoff: DEFAULT_GUARD_BACKOFF,
        }
    }
}

/// What the runtime counted during one epoch.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct EpochLoad {
    /// Length of the epoch.
    pub seconds: f64,
    /// Mice requests that arrived.
    pub mice: u64,
    /// Keys in those mice requests.
    pub mice_keys: u64,
    /// Elephant requests that arrived.
    pub elephants: u64,
    /// Keys in those elephant requests.
    pub elephant_keys: u64,
    /// `o`: measured client-side time per backend query before it is sent.
    pub client_overhead: Seconds,
    /// Mean latency of the requests that completed during the epoch (zero: not measured),
    /// for the guard against plans that do worse than batching.
    #[serde(default)]
    pub observed_mean: Seconds,
}

/// A least-squares line `T(K) = fixed + per_key · K`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinearFit {
    /// Intercept, seconds.
    pub fixed: f64,
    /// Slope, seconds per key.
    pub per_key: f64,
    /// Coefficient of determination over the fitted points (weighted).
    pub r_squared: f64,
    /// Queries behind the fit.
    pub samples: usize,
    /// Distinct key counts behind the fit.
    pub key_counts: usize,
}

/// Weighted least squares over `(x, y, weight)` points; `None` with fewer than two distinct
/// `x` or no weight.
pub fn least_squares(points: &[(f64, f64, f64)]) -> Option<LinearFit> {
    let total: f64 = points.iter().map(|p| p.2).sum();
    if total <= 0.0 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0 * p.2).sum::<f64>() / total;
    let mean_y = points.iter().map(|p| p.1 * p.2).sum::<f64>() / total;
    let sxx: f64 = points.iter().map(|p| p.2 * (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points
        .iter()
        .map(|p| p.2 * (p.0 - mean_x) * (p.1 - mean_y))
        .sum();
    let syy: f64 = points.iter().map(|p| p.2 * (p.1 - mean_y).powi(2)).sum();
    if sxx <= 0.0 || !sxx.is_finite() {
        return None;
    }
    let per_key = sxy / sxx;
    let fixed = mean_y - per_key * mean_x;
    let residual: f64 = points
        .iter()
        .map(|p| p.2 * (p.1 - fixed - per_key * p.0).powi(2))
        .sum();
    let r_squared = if syy > 0.0 { 1.0 - residual / syy } else { 1.0 };
    Some(LinearFit {
        fixed,
        per_key,
        r_squared,
        samples: 0,
        key_counts: points.len(),
    })
}

/// Why the analyzer chose batching instead of the model's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fallback {
    /// Fewer queries in the window than `min_samples`.
    TooFewSamples,
    /// Fewer than two distinct key counts observed: no slope to fit.
    OneKeyCount,
    /// R² below `min_r_squared`, or a negative slope or intercept.
    PoorFit,
    /// Fewer requests in the epoch than `min_requests`.
    TooFewRequests,
    /// The model found no stable plan (or rejected its inputs).
    NoStablePlan,
    /// The fit has been trusted for fewer than `settle_epochs` epochs in a row.
    Settling,
    /// A plan's observed mean latency exceeded batching's by more than `guard_margin`:
    /// batching for a back-off of epochs.
    WorseThanBatch,
}

impl Fallback {
    /// A short name for stats.
    pub fn name(self) -> &'static str {
        match self {
            Fallback::TooFewSamples => "too_few_samples",
            Fallback::OneKeyCount => "one_key_count",
            Fallback::PoorFit => "poor_fit",
            Fallback::TooFewRequests => "too_few_requests",
            Fallback::NoStablePlan => "no_stable_plan",
            Fallback::Settling => "settling",
            Fallback::WorseThanBatch => "worse_than_batch",
        }
    }
}

/// One epoch's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// `B` to use.
    pub merge_level: u32,
    /// `L` to use ([`NO_SPLIT`]: none).
    pub chunk_size: u32,
    /// Set when the decision is batching because the model could not be trusted.
    pub fallback: Option<Fallback>,
    /// The fit of the round trip, when there was one.
    pub fit: Option<LinearFit>,
    /// The model's inputs, when they could be built.
    pub params: Option<ChiselParams>,
    /// The model's prediction for the chosen `(B, L)`.
    pub prediction: Option<Prediction>,
    /// True when the best plan was not adopted because it did not beat the current one by
    /// the hysteresis margin.
    pub held: bool,
    /// Batching's observed mean latency that plans are held to, once measured.
    #[serde(default)]
    pub batch_baseline: Option<Seconds>,
    /// The processing share the model's inputs used (measured or configured).
    #[serde(default)]
    pub processing_share: f64,
}

/// The online analyzer: a window of observations and the current `(B, L)`.
#[derive(Debug, Clone)]
pub struct Analyzer {
    config: AnalyzerConfig,
    samples: VecDeque<(u32, f64)>,
    merge_level: u32,
    chunk_size: u32,
    /// Trusted fits in a row.
    trusted_streak: u32,
    /// Exponential average of the observed mean latency of epochs spent batching.
    batch_baseline: Option<f64>,
    /// Epochs left in batching after a revert by the guard.
    backoff_left: u32,
    /// Reverts by the guard since a plan last held for a whole back-off.
    strikes: u32,
    /// Epochs in a row a plan has passed the guard.
    plan_epochs: u32,
    /// The processing share in use: the configured one, or the measured average.
    share: f64,
    /// True once a share was measured.
    share_measured: bool,
}

impl Analyzer {
    /// An analyzer starting at batching.
    pub fn new(config: AnalyzerConfig) -> Self {
        Analyzer {
            config,
            samples: VecDeque::with_capacity(config.window.min(1 << 16)),
            merge_level: 1,
            chunk_size: NO_SPLIT,
            trusted_streak: 0,
            batch_baseline: None,
            backoff_left: 0,
            strikes: 0,
            plan_epochs: 0,
            share: config.processing_share.clamp(0.0, 1.0),
            share_measured: false,
        }
    }

    /// The processing share in use (see [`AnalyzerConfig::measure_processing_share`]).
    pub fn processing_share(&self) -> f64 {
        self.share
    }

    /// The processing share at which the model's mean latency for the `(B, L)` in force
    /// during the epoch equals the epoch's observed mean: the model's latency rises with the
    /// share (the same round trip, more of it queueing at the servers), so a bisection over
    /// [`MIN_PROCESSING_SHARE`]..=1 finds it; an unstable prediction counts as too high.
    /// The bounds when the observed mean is outside the model's range. `None` when the epoch
    /// has no observed latency or too few requests, or the model rejects its inputs.
    pub fn measure_share(&self, fit: &LinearFit, load: &EpochLoad) -> Option<f64> {
        let observed = load.observed_mean.0;
        if !(observed > 0.0 && observed.is_finite()) {
            return None;
        }
        let (merge_level, chunk_size) = self.current();
        let predicted = |share: f64| -> Option<f64> {
            let params = self.params_with(fit, load, share).ok()?;
            let chunk_size = chunk_size.min(params.elephant_keys);
            match ChiselModel::new(params).and_then(|m| m.predict(merge_level, chunk_size)) {
                Ok(prediction) => Some(prediction.overall.mean.0),
                Err(_) => Some(f64::INFINITY),
            }
        };
        let (mut low, mut high) = (MIN_PROCESSING_SHARE, 1.0);
        if predicted(low)? >= observed {
            return Some(low);
        }
        if predicted(high)? <= observed {
            return Some(high);
        }
        for _ in 0..SHARE_STEPS {
            let middle = 0.5 * (low + high);
            if predicted(middle)? < observed {
                low = middle;
            } else {
                high = middle;
            }
        }
        Some(0.5 * (low + high))
    }

    /// Folds an epoch's measured share into the share in use (the first one replaces the
    /// configured starting value).
    fn update_share(&mut self, fit: &LinearFit, load: &EpochLoad) {
        if !self.config.measure_processing_share {
            return;
        }
        let Some(measured) = self.measure_share(fit, load) else {
            return;
        };
        self.share = if self.share_measured {
            self.share + SHARE_WEIGHT * (measured - self.share)
        } else {
            measured
        };
        self.share_measured = true;
    }

    /// The observed mean latency of batching that plans are held to, once measured.
    pub fn batch_baseline(&self) -> Option<Seconds> {
        self.batch_baseline.map(Seconds)
    }

    /// Checks the epoch that just ended against batching's observed latency: updates the
    /// baseline after a batching epoch; after an epoch under a plan, true when that plan did
    /// worse than batching by more than the margin (and starts a back-off).
    fn plan_did_worse(&mut self, load: &EpochLoad) -> bool {
        let observed = load.observed_mean.0;
        let measured = observed > 0.0
            && observed.is_finite()
            && load.mice + load.elephants >= self.config.min_requests.max(1);
        if !measured {
            return false;
        }
        if self.current() == (1, NO_SPLIT) {
            self.plan_epochs = 0;
            self.batch_baseline = Some(match self.batch_baseline {
                None => observed,
                Some(baseline) => baseline + BASELINE_WEIGHT * (observed - baseline),
            });
            return false;
        }
        let Some(baseline) = self.batch_baseline else {
            return false;
        };
        if observed > baseline * (1.0 + self.config.guard_margin.max(0.0)) {
            self.strikes = (self.strikes + 1).min(5);
            self.backoff_left = self.config.guard_backoff << (self.strikes - 1);
            self.plan_epochs = 0;
            self.trusted_streak = 0;
            return true;
        }
        self.plan_epochs += 1;
        if self.plan_epochs >= self.config.guard_backoff.max(1) {
            self.strikes = 0;
        }
        false
    }

    /// The settings.
    pub fn config(&self) -> &AnalyzerConfig {
        &self.config
    }

    /// The current `(B, L)`.
    pub fn current(&self) -> (u32, u32) {
        (self.merge_level, self.chunk_size)
    }

    /// Queries in the window.
    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    /// Records one completed backend query of `keys` keys.
    pub fn observe(&mut self, keys: u32, latency: Seconds) {
        if keys == 0 || !latency.0.is_finite() || latency.0 < 0.0 {
            return;
        }
        if self.samples.len() >= self.config.window.max(1) {
            self.samples.pop_front();
        }
        self.samples.push_back((keys, latency.0));
    }

    /// The round-trip fit over the window: a low quantile per key count, weighted by count
    /// (see [`Analyzer::trusts`] for whether it is good enough).
    pub fn fit(&self) -> Result<LinearFit, Fallback> {
        if self.samples.len() < self.config.min_samples.max(2) {
            return Err(Fallback::TooFewSamples);
        }
        let mut buckets: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for &(keys, latency) in &self.samples {
            buckets.entry(keys).or_default().push(latency);
        }
        let quantile = self.config.fit_quantile.clamp(0.0, 1.0);
        let points: Vec<(f64, f64, f64)> = buckets
            .into_iter()
            .map(|(keys, mut latencies)| {
                latencies.sort_unstable_by(f64::total_cmp);
                let at = ((latencies.len() - 1) as f64 * quantile).round() as usize;
                (f64::from(keys), latencies[at], latencies.len() as f64)
            })
            .collect();
        if points.len() < 2 {
            return Err(Fallback::OneKeyCount);
        }
        let mut fit = least_squares(&points).ok_or(Fallback::OneKeyCount)?;
        fit.samples = self.samples.len();
        Ok(fit)
    }

    /// True when a fit is good enough to drive the model.
    pub fn trusts(&self, fit: &LinearFit) -> bool {
        fit.r_squared >= self.config.min_r_squared && fit.per_key >= 0.0 && fit.fixed >= 0.0
    }

    /// The model's inputs from a fit and an epoch's counts, with the share in use.
    pub fn params(&self, fit: &LinearFit, load: &EpochLoad) -> Result<ChiselParams, Fallback> {
        self.params_with(fit, load, self.share)
    }

    /// The model's inputs from a fit and an epoch's counts, `share` of the round trip
    /// counted as backend processing.
    pub fn params_with(
        &self,
        fit: &LinearFit,
        load: &EpochLoad,
        share: f64,
    ) -> Result<ChiselParams, Fallback> {
        let requests = load.mice + load.elephants;
        if requests < self.config.min_requests.max(1) || load.seconds <= 0.0 {
            return Err(Fallback::TooFewRequests);
        }
        let mean_keys = |keys: u64, count: u64, default: u32| {
            if count == 0 {
                default
            } else {
                ((keys as f64 / count as f64).round() as u32).max(1)
            }
        };
        let mouse_keys = mean_keys(load.mice_keys, load.mice, 1);
        let elephant_keys = mean_keys(load.elephant_keys, load.elephants, mouse_keys.max(1));
        let share = share.clamp(0.0, 1.0);
        Ok(ChiselParams {
            arrival_rate: requests as f64 / load.seconds,
            elephant_fraction: load.elephants as f64 / requests as f64,
            mouse_keys,
            elephant_keys,
            client_threads: self.config.client_threads.max(1),
            server_threads: self.config.server_threads.max(1),
            processing: LinearCost {
                fixed: Seconds(share * fit.fixed),
                per_key: Seconds(share * fit.per_key),
            },
            network: LinearCost {
                fixed: Seconds((1.0 - share) * fit.fixed),
                per_key: Seconds((1.0 - share) * fit.per_key),
            },
            client_overhead: load.client_overhead,
        })
    }

    fn fall_back(&mut self, why: Fallback, fit: Option<LinearFit>) -> Decision {
        self.merge_level = 1;
        self.chunk_size = NO_SPLIT;
        Decision {
            merge_level: 1,
            chunk_size: NO_SPLIT,
            fallback: Some(why),
            fit,
            params: None,
            prediction: None,
            held: false,
            batch_baseline: self.batch_baseline(),
            processing_share: self.share,
        }
    }

    /// One epoch: check the last plan against batching, fit, build the model's inputs, search
    /// the grid, apply hysteresis.
    pub fn decide(&mut self, load: &EpochLoad) -> Decision {
        let fit = self.fit();
        // Measured on the epoch that just ended, under the (B, L) it ran with.
        if let Ok(fit) = &fit {
            if self.trusts(fit) {
                self.update_share(fit, load);
            }
        }
        let reverted = self.plan_did_worse(load);
        if reverted || self.backoff_left > 0 {
            if !reverted {
                self.backoff_left -= 1;
            }
            return self.fall_back(Fallback::WorseThanBatch, fit.ok());
        }
        let fit = match fit {
            Ok(fit) => fit,
            Err(why) => {
                self.trusted_streak = 0;
                return self.fall_back(why, None);
            }
        };
        if !self.trusts(&fit) {
            self.trusted_streak = 0;
            return self.fall_back(Fallback::PoorFit, Some(fit));
        }
        self.trusted_streak = self.trusted_streak.saturating_add(1);
        if self.current() == (1, NO_SPLIT) && self.trusted_streak < self.config.settle_epochs {
            return self.fall_back(Fallback::Settling, Some(fit));
        }
        let params = match self.params(&fit, load) {
            Ok(params) => params,
            Err(why) => return self.fall_back(why, Some(fit)),
        };
        let mut grid = PlanGrid::default_for(&params);
        grid.merge_levels = (1..=self.config.max_merge.max(1)).collect();
        grid.objective = self.config.objective;
        let Ok((merge_level, chunk_size, best)) = best_plan(&params, &grid) else {
            return self.fall_back(Fallback::NoStablePlan, Some(fit));
        };
        // The model's L ≥ K_e means "do not split".
        let chunk_size = if chunk_size >= params.elephant_keys {
            NO_SPLIT
        } else {
            chunk_size
        };
        let score = |prediction: &Prediction| match self.config.objective {
            Objective::Mean => prediction.overall.mean.0,
            Objective::P95 => prediction.overall.p95.0,
        };
        let current = ChiselModel::new(params).ok().and_then(|model| {
            model
                .predict(self.merge_level, self.chunk_size.min(params.elephant_keys))
                .ok()
        });
        let mut decision = Decision {
            merge_level,
            chunk_size,
            fallback: None,
            fit: Some(fit),
            params: Some(params),
            prediction: Some(best),
            held: false,
            batch_baseline: self.batch_baseline(),
            processing_share: self.share,
        };
        if let Some(current) = current {
            let changes = (merge_level, chunk_size) != (self.merge_level, self.chunk_size);
            if changes && score(&best) > (1.0 - self.config.hysteresis) * score(&current) {
                decision.merge_level = self.merge_level;
                decision.chunk_size = self.chunk_size;
                decision.prediction = Some(current);
                decision.held = true;
            }
        }
        self.merge_level = decision.merge_level;
        self.chunk_size = decision.chunk_size;
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds queries whose latency is the paper's profile P_S + N_S = 88.3 + 7.1·K µs plus
    /// a deterministic spread of queueing above it.
    fn feed(analyzer: &mut Analyzer, key_counts: &[u32], per_count: usize) {
        for i in 0..per_count {
            for &keys in key_counts {
                let base = 88.3 + 7.1 * f64::from(keys);
                let queueing = (i % 10) as f64 * 15.0;
                analyzer.observe(keys, Seconds::from_micros(base + queueing));
            }
        }
    }

    fn load(interarrival_us: f64, overhead_us: f64) -> EpochLoad {
        let seconds = 1.0;
        let requests = (seconds / (interarrival_us * 1e-6)) as u64;
        let elephants = requests / 10;
        let mice = requests - elephants;
        EpochLoad {
            seconds,
            mice,
            mice_keys: mice * 10,
            elephants,
            elephant_keys: elephants * 100,
            client_overhead: Seconds::from_micros(overhead_us),
            observed_mean: Seconds(0.0),
        }
    }

    /// Settings that act on the first trusted fit (the guards have tests of their own).
    fn config() -> AnalyzerConfig {
        AnalyzerConfig {
            client_threads: 4,
            server_threads: 16,
            settle_epochs: 1,
            ..AnalyzerConfig::default()
        }
    }

    fn observed(mut load: EpochLoad, mean_us: f64) -> EpochLoad {
        load.observed_mean = Seconds::from_micros(mean_us);
        load
    }

    #[test]
    fn leaves_batching_only_after_settle_epochs_trusted_fits_in_a_row() {
        let mut analyzer = Analyzer::new(AnalyzerConfig {
            settle_epochs: 3,
            ..config()
        });
        feed(&mut analyzer, &[10, 25, 100], 100);
        for _ in 0..2 {
            let decision = analyzer.decide(&load(300.0, 60.0));
            assert_eq!(decision.fallback, Some(Fallback::Settling), "{decision:?}");
            assert_eq!(analyzer.current(), (1, NO_SPLIT));
        }
        // A poor fit in between starts the count again.
        let mut noisy = analyzer.clone();
        for i in 0..4096u32 {
            let keys = 1 + (i * 7) % 50;
            noisy.observe(
                keys,
                Seconds::from_micros(100.0 + f64::from((i * 7919) % 400)),
            );
        }
        assert_eq!(
            noisy.decide(&load(300.0, 60.0)).fallback,
            Some(Fallback::PoorFit)
        );
        let decision = analyzer.decide(&load(300.0, 60.0));
        assert_eq!(decision.fallback, None, "{decision:?}");
        assert!(analyzer.current().1 < 100, "{decision:?}");
    }

    #[test]
    fn a_plan_observed_worse_than_batching_is_reverted_and_backs_off() {
        let mut analyzer = Analyzer::new(AnalyzerConfig {
            guard_margin: 0.1,
            guard_backoff: 2,
            ..config()
        });
        feed(&mut analyzer, &[10, 25, 100], 100);
        // The epoch that ended under batching sets the baseline (400 µs); the model splits.
        analyzer.decide(&observed(load(300.0, 60.0), 400.0));
        assert_eq!(analyzer.batch_baseline(), Some(Seconds::from_micros(400.0)));
        let plan = analyzer.current();
        assert!(plan.1 < 100, "{plan:?}");
        // Within the margin, the plan stays.
        analyzer.decide(&observed(load(300.0, 60.0), 430.0));
        assert_eq!(analyzer.current(), plan);
        // 20 % worse than batching: reverted, and batching for the back-off (2 epochs).
        let decision = analyzer.decide(&observed(load(300.0, 60.0), 480.0));
        assert_eq!(decision.fallback, Some(Fallback::WorseThanBatch));
        assert_eq!(analyzer.current(), (1, NO_SPLIT));
        for _ in 0..2 {
            let decision = analyzer.decide(&observed(load(300.0, 60.0), 400.0));
            assert_eq!(decision.fallback, Some(Fallback::WorseThanBatch));
        }
        // The back-off is over: the plan again; a second revert doubles the back-off.
        analyzer.decide(&observed(load(300.0, 60.0), 400.0));
        assert_eq!(analyzer.current(), plan);
        analyzer.decide(&observed(load(300.0, 60.0), 480.0));
        let batching = (0..5)
            .take_while(|_| {
                analyzer
                    .decide(&observed(load(300.0, 60.0), 400.0))
                    .fallback
                    == Some(Fallback::WorseThanBatch)
            })
            .count();
        assert_eq!(batching, 4);
        // Unmeasured epochs (no observed latency) neither revert nor move the baseline.
        let baseline = analyzer.batch_baseline();
        analyzer.decide(&observed(load(300.0, 60.0), 0.0));
        assert_eq!(analyzer.batch_baseline(), baseline);
    }

    #[test]
    fn least_squares_recovers_a_line() {
        let points: Vec<(f64, f64, f64)> = (1..=5)
            .map(|k| (f64::from(k), 3.0 + 2.0 * f64::from(k), 1.0))
            .collect();
        let fit = least_squares(&points).unwrap();
        assert!((fit.fixed - 3.0).abs() < 1e-9 && (fit.per_key - 2.0).abs() < 1e-9);
        assert!((fit.r_squared - 1.0).abs() < 1e-9);
        assert!(least_squares(&[(1.0, 2.0, 1.0), (1.0, 3.0, 1.0)]).is_none());
    }

    #[test]
    fn fit_uses_a_low_quantile_per_key_count() {
        let mut analyzer = Analyzer::new(config());
        feed(&mut analyzer, &[10, 25, 100], 100);
        let fit = analyzer.fit().unwrap();
        assert!(analyzer.trusts(&fit));
        // The 25th percentile sits 2 queueing steps (30 µs) above the profile.
        assert!((fit.per_key * 1e6 - 7.1).abs() < 0.05, "{fit:?}");
        assert!((fit.fixed * 1e6 - 118.3).abs() < 1.0, "{fit:?}");
    }

    #[test]
    fn splits_at_low_load_and_merges_at_high_load() {
        let mut low = Analyzer::new(config());
        feed(&mut low, &[10, 25, 100], 100);
        let decision = low.decide(&load(300.0, 60.0));
        assert_eq!(decision.fallback, None);
        assert_eq!(decision.merge_level, 1, "{decision:?}");
        assert!(decision.chunk_size < 100, "low load splits: {decision:?}");

        let mut high = Analyzer::new(config());
        feed(&mut high, &[10, 25, 100], 100);
        let decision = high.decide(&load(60.0, 60.0));
        assert_eq!(decision.fallback, None);
        assert!(decision.merge_level > 1, "high load merges: {decision:?}");
        assert_eq!(decision.chunk_size, NO_SPLIT, "{decision:?}");
    }

    #[test]
    fn falls_back_to_batch_when_the_fit_is_poor_or_thin() {
        let mut analyzer = Analyzer::new(config());
        assert_eq!(
            analyzer.decide(&load(300.0, 60.0)).fallback,
            Some(Fallback::TooFewSamples)
        );
        // Latency unrelated to the key count: no line explains it.
        for i in 0..600u32 {
            let keys = 1 + (i * 7) % 50;
            let latency = 100.0 + f64::from((i * 7919) % 400);
            analyzer.observe(keys, Seconds::from_micros(latency));
        }
        let decision = analyzer.decide(&load(300.0, 60.0));
        assert_eq!(decision.fallback, Some(Fallback::PoorFit), "{decision:?}");
        assert_eq!((decision.merge_level, decision.chunk_size), (1, NO_SPLIT));
        // One key count only.
        let mut analyzer = Analyzer::new(config());
        feed(&mut analyzer, &[10], 300);
        assert_eq!(
            analyzer.decide(&load(300.0, 60.0)).fallback,
            Some(Fallback::OneKeyCount)
        );
        // A good fit but an idle epoch.
        let mut analyzer = Analyzer::new(config());
        feed(&mut analyzer, &[10, 100], 200);
        assert_eq!(
            analyzer.decide(&load(1e6, 0.0)).fallback,
            Some(Fallback::TooFewRequests)
        );
    }

    #[test]
    fn a_poor_fit_reverts_a_split_to_batch() {
        let mut analyzer = Analyzer::new(config());
        feed(&mut analyzer, &[10, 25, 100], 100);
        assert!(analyzer.decide(&load(300.0, 60.0)).chunk_size < 100);
        for i in 0..4096u32 {
            let keys = 1 + (i * 7) % 50;
            analyzer.observe(
                keys,
                Seconds::from_micros(100.0 + f64::from((i * 7919) % 400)),
            );
        }
        analyzer.decide(&load(300.0, 60.0));
        assert_eq!(analyzer.current(), (1, NO_SPLIT));
    }

    #[test]
    fn hysteresis_holds_a_plan_that_is_nearly_as_good() {
        let mut analyzer = Analyzer::new(AnalyzerConfig {
            hysteresis: 0.99,
            ..config()
        });
        feed(&mut analyzer, &[10, 25, 100], 100);
        let decision = analyzer.decide(&load(300.0, 60.0));
        assert!(decision.held, "{decision:?}");
        assert_eq!(analyzer.current(), (1, NO_SPLIT));
    }

    /// The model's mean for batching with the analyzer's fit and `load`, at `share`.
    fn batch_mean(analyzer: &Analyzer, load: &EpochLoad, share: f64) -> f64 {
        let fit = analyzer.fit().expect("fit");
        let params = analyzer.params_with(&fit, load, share).expect("params");
        ChiselModel::new(params)
            .and_then(|model| model.predict(1, params.elephant_keys))
            .expect("stable")
            .overall
            .mean
            .0
    }

    #[test]
    fn the_processing_share_is_measured_from_the_observed_latency() {
        let mut analyzer = Analyzer::new(AnalyzerConfig {
            measure_processing_share: true,
            settle_epochs: 3,
            ..config()
        });
        feed(&mut analyzer, &[10, 25, 100], 100);
        let epoch = load(300.0, 60.0);
        // The backends really spend 6 % of the round trip working: what batching's mean is.
        let truth = 0.06;
        let observed_us = batch_mean(&analyzer, &epoch, truth) * 1e6;
        let measured = analyzer
            .measure_share(&analyzer.fit().expect("fit"), &observed(epoch, observed_us))
            .expect("measured");
        assert!((measured - truth).abs() < 1e-3, "measured {measured}");
        // The configured 0.1 is only the start; the first measured epoch replaces it.
        assert_eq!(analyzer.processing_share(), DEFAULT_PROCESSING_SHARE);
        let decision = analyzer.decide(&observed(epoch, observed_us));
        assert!(
            (decision.processing_share - truth).abs() < 1e-3,
            "{decision:?}"
        );
        // The mean of the epoch bounds it: below the model's range, the floor; unmeasured
        // epochs change nothing.
        let floor = analyzer.measure_share(&analyzer.fit().expect("fit"), &observed(epoch, 1.0));
        assert_eq!(floor, Some(MIN_PROCESSING_SHARE));
        let before = analyzer.processing_share();
        analyzer.decide(&observed(epoch, 0.0));
        assert_eq!(analyzer.processing_share(), before);
        // Later epochs move it by a weighted average.
        analyzer.decide(&observed(epoch, 1.0));
        let expected = before + SHARE_WEIGHT * (MIN_PROCESSING_SHARE - before);
        assert!((analyzer.processing_share() - expected).abs() < 1e-9);
    }

    #[test]
    fn a_configured_share_is_kept_when_not_measuring() {
        let mut analyzer = Analyzer::new(AnalyzerConfig {
            processing_share: 0.3,
            ..config()
        });
        feed(&mut analyzer, &[10, 25, 100], 100);
        let decision = analyzer.decide(&observed(load(300.0, 60.0), 5_000.0));
        assert_eq!(decision.processing_share, 0.3);
        assert_eq!(analyzer.processing_share(), 0.3);
    }
}
