//! A rate sweep over several policies on one trace, and the figures the Minos comparison is
//! read by (the knee of early binding, saturation throughputs).
//!
//! ```text
//!  Trace::generate (once) ─► for policy ─► for rate ─► engine::run ─► RunResult
//!                                                        │ progress(done, total, &result)
//!                                                        ▼
//!                                   SweepResult { curves, summary (knee, saturation) }
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tailtrim_bench::workload::WorkloadSpec;
use tailtrim_policy::sizeaware::SizeAwareConfig;

use crate::cost::Profile;
use crate::engine::{run, RunConfig, RunResult, Steering, DEFAULT_WARMUP_FRACTION};
use crate::policy::Policy;
use crate::time::Nanos;
use crate::workload::{ServiceModel, Trace};
use crate::SimError;

/// Default simulated cores (the Minos testbed).
pub const DEFAULT_CORES: usize = 8;
/// Default client connections per core (the real 2-core experiment used 32 connections).
pub const DEFAULT_CONNECTIONS_PER_CORE: usize = 16;
/// Default requests per point: enough for a stable small-request p99 (thousands of requests
/// above it) and a usable large-request p99 (~900 large requests measured).
pub const DEFAULT_REQUESTS: usize = 200_000;
/// Default latency that defines the knee: 1 ms.
pub const DEFAULT_KNEE_US: f64 = 1_000.0;
/// Default seed.
pub const DEFAULT_SEED: u64 = 1;
/// With an automatic epoch, each run spans this many size-aware epochs (the controller's
/// window of 4 epochs then holds a tenth of the requests, whatever the rate).
pub const AUTO_EPOCHS_PER_RUN: f64 = 40.0;
/// A point "keeps up" when it delivers at least this share of its offered rate.
pub const SUSTAINED_SHARE: f64 = 0.97;
/// Rates of the automatic sweep, as multiples of the estimated capacity.
pub const AUTO_RATE_FACTORS: [f64; 14] = [
    0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0, 1.1,
];

/// Settings of a sweep.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// Policies, in report order.
    pub policies: Vec<Policy>,
    /// Offered rates (requests/s); empty means [`auto_rates`].
    pub rates: Vec<f64>,
    /// Simulated cores.
    pub cores: usize,
    /// Client connections.
    pub connections: usize,
    /// Requests per point.
    pub requests: usize,
    /// Seed of the trace (operations, connections, arrivals).
    pub seed: u64,
    /// Share of the first requests not measured.
    pub warmup_fraction: f64,
    /// Size-aware epoch; `None`: the run's span / [`AUTO_EPOCHS_PER_RUN`] at each rate.
    pub epoch: Option<Nanos>,
    /// Size-aware controller settings (`workers` set from `cores`).
    pub sizeaware: SizeAwareConfig,
    /// Early binding's steering.
    pub steering: Steering,
    /// Early/late binding: one executing request per connection (the real runtime).
    pub serialize_connections: bool,
    /// Spread service times by the profile's measured dispersion (off: each size costs its
    /// fitted median).
    pub service_dispersion: bool,
    /// The cost model and where it came from.
    pub profile: Profile,
    /// The workload (the bench's `minos` preset by default).
    pub workload: WorkloadSpec,
    /// Knee latency for the summary, microseconds.
    pub knee_us: f64,
}

impl SweepConfig {
    /// The Minos setup: 8 cores, the `minos` workload, the embedded profile, all five policies.
    pub fn minos() -> Result<SweepConfig, SimError> {
        let workload =
            WorkloadSpec::preset("minos").map_err(|error| SimError::Config(error.to_string()))?;
        Ok(SweepConfig {
            policies: Policy::ALL.to_vec(),
            rates: Vec::new(),
            cores: DEFAULT_CORES,
            connections: DEFAULT_CONNECTIONS_PER_CORE * DEFAULT_CORES,
            requests: DEFAULT_REQUESTS,
            seed: DEFAULT_SEED,
            warmup_fraction: DEFAULT_WARMUP_FRACTION,
            epoch: None,
            sizeaware: SizeAwareConfig::with_workers(DEFAULT_CORES),
            steering: Steering::Nic,
            serialize_connections: false,
            service_dispersion: false,
            profile: Profile::embedded(),
            workload,
            knee_us: DEFAULT_KNEE_US,
        })
    }

    /// The size-aware epoch at `rate`.
    pub fn epoch_at(&self, rate: f64) -> Nanos {
        self.epoch.unwrap_or_else(|| {
            let span_ns = self.requests as f64 / rate.max(1e-9) * 1e9;
            Nanos::from_f64(span_ns / AUTO_EPOCHS_PER_RUN).max(Nanos::from_micros(1))
        })
    }

    /// The run settings of one point.
    pub fn run_config(&self, policy: Policy, rate: f64) -> RunConfig {
        RunConfig {
            warmup_fraction: self.warmup_fraction,
            epoch: self.epoch_at(rate),
            sizeaware: SizeAwareConfig {
                workers: self.cores,
                ..self.sizeaware.clone()
            },
            steering: self.steering,
            serialize_connections: self.serialize_connections,
            ..RunConfig::new(policy, self.cores, rate, self.profile.cost)
        }
    }

    /// The trace every point of the sweep replays.
    pub fn trace(&self) -> Result<Trace, SimError> {
        let connections = u32::try_from(self.connections)
            .map_err(|_| SimError::Config("too many connections".into()))?;
        let mut trace = Trace::generate(
            &self.workload,
            self.requests,
            connections,
            &ServiceModel::Cost(self.profile.cost),
            self.seed,
        )?;
        if self.service_dispersion {
            if self.profile.dispersion.is_empty() {
                return Err(SimError::Config(
                    "service dispersion asked for, but the profile has no dispersion table \
                     (measure one with tailtrim sim profile)"
                        .into(),
                ));
            }
            trace.apply_dispersion(&self.profile.dispersion, self.seed);
        }
        Ok(trace)
    }
}

/// The capacity of `cores` cores each serving whole requests of `trace` back to back
/// (requests/s), the scale of the automatic rates.
pub fn estimated_capacity(trace: &Trace, cores: usize) -> f64 {
    let mean = trace.mean_work_ns();
    if mean <= 0.0 {
        return 0.0;
    }
    cores as f64 * 1e9 / mean
}

/// [`AUTO_RATE_FACTORS`] × the estimated capacity, rounded to 1000 requests/s.
pub fn auto_rates(trace: &Trace, cores: usize) -> Vec<f64> {
    let capacity = estimated_capacity(trace, cores);
    let mut rates: Vec<f64> = AUTO_RATE_FACTORS
        .iter()
        .map(|factor| ((capacity * factor / 1_000.0).round() * 1_000.0).max(1_000.0))
        .collect();
    rates.dedup();
    rates
}

/// One policy's points, in rate order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// The policy.
    pub policy: Policy,
    /// One result per offered rate.
    pub points: Vec<RunResult>,
}

/// Where early binding's small p99 first exceeds the knee latency and every system's p99s
/// there: the readout the simulator's sweep and the real experiment (`experiment minos`) share.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KneeReadout {
    /// First offered rate at which early binding's small p99 exceeds the knee.
    pub knee_rate_rps: Option<f64>,
    /// Early binding's small p99 there, µs.
    pub early_binding_small_p99_us: Option<f64>,
    /// Size-aware's small p99 there, µs.
    pub size_aware_small_p99_us: Option<f64>,
    /// Their ratio (early / size-aware).
    pub small_p99_ratio: Option<f64>,
    /// Every system's small p99 at the knee rate, µs.
    pub small_p99_at_knee_us: BTreeMap<String, f64>,
    /// Every system's large p99 at the knee rate, µs.
    pub large_p99_at_knee_us: BTreeMap<String, f64>,
}

/// The figures the comparison is read by.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Summary {
    /// Knee latency, microseconds.
    pub knee_us: f64,
    /// Where early binding's small p99 first exceeds the knee latency, and the p99s there.
    #[serde(flatten)]
    pub knee: KneeReadout,
    /// Highest achieved throughput of each policy over the sweep.
    pub saturation_rps: BTreeMap<String, f64>,
    /// Highest offered rate each policy kept up with (achieved ≥ 97 % of offered).
    pub max_sustained_rps: BTreeMap<String, f64>,
    /// Size-aware's saturation over early binding's.
    pub saturation_ratio_size_aware_vs_early: Option<f64>,
    /// Highest offered rate at which each policy's small p99 is at most the knee.
    pub max_rate_small_p99_under_knee_rps: BTreeMap<String, f64>,
    /// Early binding's small p99 over size-aware's at every rate both ran: `(rate, ratio)`.
    pub small_p99_ratio_by_rate: Vec<(f64, f64)>,
}

/// A finished sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepResult {
    /// Offered rates.
    pub rates: Vec<f64>,
    /// Estimated capacity used for automatic rates (requests/s).
    pub estimated_capacity_rps: f64,
    /// Mean whole-request service time of the trace, microseconds.
    pub mean_service_us: f64,
    /// Share of requests the bench classifies as large.
    pub large_share: f64,
    /// One curve per policy.
    pub curves: Vec<Curve>,
    /// The figures.
    pub summary: Summary,
}

/// Runs every policy at every rate. `progress(done, total, result)` is called after each
/// point.
pub fn run_sweep(
    config: &SweepConfig,
    progress: &mut dyn FnMut(usize, usize, &RunResult),
) -> Result<SweepResult, SimError> {
    if config.policies.is_empty() {
        return Err(SimError::Config("no policy to simulate".into()));
    }
    let trace = config.trace()?;
    let rates = if config.rates.is_empty() {
        auto_rates(&trace, config.cores)
    } else {
        config.rates.clone()
    };
    let total = rates.len() * config.policies.len();
    let mut done = 0;
    let mut curves = Vec::with_capacity(config.policies.len());
    for &policy in &config.policies {
        let mut points = Vec::with_capacity(rates.len());
        for &rate in &rates {
            let result = run(&trace, &config.run_config(policy, rate))?;
            done += 1;
            progress(done, total, &result);
            points.push(result);
        }
        curves.push(Curve { policy, points });
    }
    let large = trace
        .requests
        .iter()
        .filter(|request| request.large)
        .count();
    let summary = summarize(&curves, config.knee_us);
    Ok(SweepResult {
        estimated_capacity_rps: estimated_capacity(&trace, config.cores),
        mean_service_us: trace.mean_work_ns() / 1e3,
        large_share: large as f64 / trace.requests.len().max(1) as f64,
        rates,
        curves,
        summary,
    })
}

/// The knee, the ratio there and the saturation figures of a set of curves.
pub fn summarize(curves: &[Curve], knee_us: f64) -> Summary {
    let curve = |policy: Policy| curves.iter().find(|curve| curve.policy == policy);
    let at_rate = |curve: &Curve, rate: f64| {
        curve
            .points
            .iter()
            .find(|point| point.offered_rps == rate)
            .cloned()
    };
    let mut summary = Summary {
        knee_us,
        ..Summary::default()
    };
    for curve in curves {
        let name = curve.policy.name().to_string();
        let saturation = curve
            .points
            .iter()
            .map(|point| point.achieved_rps)
            .fold(0.0, f64::max);
        summary.saturation_rps.insert(name.clone(), saturation);
        let sustained = curve
            .points
            .iter()
            .filter(|point| point.achieved_rps >= SUSTAINED_SHARE * point.offered_rps)
            .map(|point| point.offered_rps)
            .fold(0.0, f64::max);
        summary.max_sustained_rps.insert(name.clone(), sustained);
        let under_knee = curve
            .points
            .iter()
            .filter(|point| point.small.count > 0 && point.small.p99_us <= knee_us)
            .map(|point| point.offered_rps)
            .fold(0.0, f64::max);
        summary
            .max_rate_small_p99_under_knee_rps
            .insert(name, under_knee);
    }
    let early = curve(Policy::EarlyBinding);
    let knee = early.and_then(|early| {
        early
            .points
            .iter()
            .find(|point| point.small.count > 0 && point.small.p99_us > knee_us)
            .map(|point| (point.offered_rps, point.small.p99_us))
    });
    if let Some((rate, early_p99)) = knee {
        summary.knee.knee_rate_rps = Some(rate);
        summary.knee.early_binding_small_p99_us = Some(early_p99);
        for curve in curves {
            if let Some(point) = at_rate(curve, rate) {
                let name = curve.policy.name().to_string();
                summary
                    .knee
                    .small_p99_at_knee_us
                    .insert(name.clone(), point.small.p99_us);
                summary
                    .knee
                    .large_p99_at_knee_us
                    .insert(name, point.large.p99_us);
            }
        }
        if let Some(point) = curve(Policy::SizeAware).and_then(|curve| at_rate(curve, rate)) {
            summary.knee.size_aware_small_p99_us = Some(point.small.p99_us);
            if point.small.p99_us > 0.0 {
                summary.knee.small_p99_ratio = Some(early_p99 / point.small.p99_us);
            }
        }
    }
    if let (Some(early), Some(size_aware)) = (curve(Policy::EarlyBinding), curve(Policy::SizeAware))
    {
        for point in &early.points {
            if let Some(other) = at_rate(size_aware, point.offered_rps) {
                if other.small.p99_us > 0.0 && point.small.count > 0 {
                    summary
                        .small_p99_ratio_by_rate
                        .push((point.offered_rps, point.small.p99_us / other.small.p99_us));
                }
            }
        }
    }
    let saturation = |policy: Policy| summary.saturation_rps.get(policy.name()).copied();
    if let (Some(size_aware), Some(early)) = (
        saturation(Policy::SizeAware),
        saturation(Policy::EarlyBinding),
    ) {
        if early > 0.0 {
            summary.saturation_ratio_size_aware_vs_early = Some(size_aware / early);
        }
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::{summarize, Curve};
    use crate::engine::RunResult;
    use crate::policy::Policy;
    use crate::stats::{LatencyHistograms, LatencySummary};

    fn point(policy: Policy, rate: f64, achieved: f64, small_p99: f64) -> RunResult {
        RunResult {
            policy,
            cores: 8,
            offered_rps: rate,
            achieved_rps: achieved,
            requests: 100,
            small: LatencySummary {
                count: 90,
                p99_us: small_p99,
                ..LatencySummary::default()
            },
            large: LatencySummary {
                count: 1,
                p99_us: 2.0 * small_p99,
                ..LatencySummary::default()
            },
            small_in_server: LatencySummary::default(),
            large_in_server: LatencySummary::default(),
            mean_queued: 0.0,
            mean_queued_by_queue: Vec::new(),
            utilization: Vec::new(),
            handoffs: 0,
            steals: 0,
            epochs: 0,
            decisions: Vec::new(),
            simulated_s: 1.0,
            histograms: LatencyHistograms::default(),
            records: Vec::new(),
        }
    }

    fn curve(policy: Policy, points: &[(f64, f64, f64)]) -> Curve {
        Curve {
            policy,
            points: points
                .iter()
                .map(|(rate, achieved, p99)| point(policy, *rate, *achieved, *p99))
                .collect(),
        }
    }

    #[test]
    fn knee_ratio_and_saturation() {
        let curves = [
            curve(
                Policy::SizeAware,
                &[
                    (100.0, 100.0, 20.0),
                    (200.0, 200.0, 40.0),
                    (300.0, 260.0, 5_000.0),
                ],
            ),
            curve(
                Policy::EarlyBinding,
                &[
                    (100.0, 100.0, 300.0),
                    (200.0, 180.0, 2_000.0),
                    (300.0, 200.0, 9_000.0),
                ],
            ),
        ];
        let summary = summarize(&curves, 1_000.0);
        assert_eq!(summary.knee.knee_rate_rps, Some(200.0));
        assert_eq!(summary.knee.early_binding_small_p99_us, Some(2_000.0));
        assert_eq!(summary.knee.size_aware_small_p99_us, Some(40.0));
        assert_eq!(summary.knee.small_p99_ratio, Some(50.0));
        assert_eq!(
            summary.knee.large_p99_at_knee_us.get("size-aware"),
            Some(&80.0)
        );
        assert_eq!(summary.saturation_rps.get("size-aware"), Some(&260.0));
        assert_eq!(summary.saturation_rps.get("early-binding"), Some(&200.0));
        assert_eq!(summary.saturation_ratio_size_aware_vs_early, Some(1.3));
        // Early binding kept up (≥ 97 % of offered) only at 100.
        assert_eq!(summary.max_sustained_rps.get("early-binding"), Some(&100.0));
        assert_eq!(summary.max_sustained_rps.get("size-aware"), Some(&200.0));
        assert_eq!(
            summary.max_rate_small_p99_under_knee_rps.get("size-aware"),
            Some(&200.0)
        );
        assert_eq!(summary.small_p99_ratio_by_rate[0], (100.0, 15.0));
    }

    #[test]
    fn no_knee_when_early_binding_stays_below() {
        let curves = [curve(Policy::EarlyBinding, &[(100.0, 100.0, 300.0)])];
        let summary = summarize(&curves, 1_000.0);
        assert_eq!(summary.knee.knee_rate_rps, None);
        assert_eq!(summary.knee.small_p99_ratio, None);
        assert_eq!(summary.saturation_ratio_size_aware_vs_early, None);
    }
}
