//! Bootstrap intervals for the ratios an experiment quotes.
//!
//! A point of a sweep is a few repeats of one system at one rate, each repeat with its
//! latency histogram. A quoted ratio (one system's pooled p99 over another's, one system's
//! peak throughput over another's) gets a percentile interval from a two-level bootstrap:
//!
//! ```text
//!   for each of `resamples` draws:
//!     repeats   draw as many repeats as there are, with replacement (the repeat-to-repeat
//!               spread: a stall or a burst of large requests lands in one repeat)
//!     requests  the quantile of the pooled draw is the order statistic of a resample of
//!               its N requests: F⁻¹(U) with U ~ Beta(k, N + 1 − k), k = ⌈qN⌉ (exactly the
//!               distribution of the k-th of N values drawn from the pooled histogram)
//!     ratio     numerator's statistic / denominator's
//!   interval = the (1 − c)/2 and (1 + c)/2 quantiles of the draws
//! ```
//!
//! The estimate is the statistic of the data as measured (not the mean of the draws). The
//! draws are seeded, so a replot gives the same interval. Requests within a repeat are not
//! independent (one large request delays the small requests behind it); the repeat level is
//! what carries that dependence, so an interval over three repeats is wide when the repeats
//! disagree, as it should be.

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Beta, Distribution};
use serde::{Deserialize, Serialize};

use crate::histogram::Encoded;
use crate::stats::median;

/// Default number of bootstrap draws.
pub const DEFAULT_RESAMPLES: usize = 2_000;
/// Default confidence of the interval.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;
/// Default seed of the draws (fixed, so a replot reproduces every interval).
pub const DEFAULT_SEED: u64 = 0xB007_5742;

/// How many draws, at what confidence, from which seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    /// Bootstrap draws.
    pub resamples: usize,
    /// Confidence of the interval (0–1).
    pub confidence: f64,
    /// Seed of the draws.
    pub seed: u64,
}

impl Default for Plan {
    fn default() -> Self {
        Self {
            resamples: DEFAULT_RESAMPLES,
            confidence: DEFAULT_CONFIDENCE,
            seed: DEFAULT_SEED,
        }
    }
}

/// A ratio with its bootstrap interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The ratio of the measured data.
    pub estimate: f64,
    /// Lower end of the interval.
    pub low: f64,
    /// Upper end of the interval.
    pub high: f64,
    /// Confidence of the interval (0–1).
    pub confidence: f64,
    /// Bootstrap draws behind it.
    pub resamples: usize,
}

/// The repeats of one system at one point, as bucket counts over the values any of them
/// recorded (ascending), ready for resampling.
#[derive(Clone, Debug, Default)]
pub struct Repeats {
    /// Distinct recorded values (each bucket's highest equivalent value), ascending.
    values: Vec<u64>,
    /// `counts[bucket][repeat]`.
    counts: Vec<Vec<u64>>,
    /// Requests of each repeat.
    totals: Vec<u64>,
    /// Every repeat added into one histogram (the estimate's source).
    pooled: Option<Histogram<u64>>,
}

impl Repeats {
    /// From each repeat's histogram; empty histograms are repeats without requests.
    #[must_use]
    pub fn new(histograms: &[Histogram<u64>]) -> Self {
        let mut buckets: std::collections::BTreeMap<u64, Vec<u64>> =
            std::collections::BTreeMap::new();
        let mut pooled: Option<Histogram<u64>> = None;
        for (repeat, histogram) in histograms.iter().enumerate() {
            for value in histogram.iter_recorded() {
                let counts = buckets
                    .entry(value.value_iterated_to())
                    .or_insert_with(|| vec![0; histograms.len()]);
                counts[repeat] += value.count_at_value();
            }
            match &mut pooled {
                Some(sum) => {
                    // Histograms of one experiment share their bounds; one that does not fit
                    // leaves the pooled estimate to the resampling's own walk.
                    let _ = sum.add(histogram);
                }
                None => pooled = Some(histogram.clone()),
            }
        }
        let (values, counts) = buckets.into_iter().unzip();
        Self {
            values,
            counts,
            totals: histograms.iter().map(Histogram::len).collect(),
            pooled,
        }
    }

    /// From the serialized histograms a results file keeps; undecodable ones are skipped.
    #[must_use]
    pub fn from_encoded<'a>(encoded: impl IntoIterator<Item = &'a Encoded>) -> Self {
        let histograms: Vec<Histogram<u64>> = encoded
            .into_iter()
            .filter_map(|one| one.decode().ok())
            .collect();
        Self::new(&histograms)
    }

    /// Repeats held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.totals.len()
    }

    /// Whether no repeat is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.totals.is_empty()
    }

    /// Requests of every repeat together.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.totals.iter().sum()
    }

    /// Requests of the repeat with the fewest.
    #[must_use]
    pub fn fewest(&self) -> u64 {
        self.totals.iter().copied().min().unwrap_or(0)
    }

    /// The `quantile` (0–1) of every repeat pooled, in the histogram's unit; `None` when
    /// no request was recorded.
    #[must_use]
    pub fn pooled_quantile(&self, quantile: f64) -> Option<f64> {
        let pooled = self.pooled.as_ref().filter(|pooled| !pooled.is_empty())?;
        Some(pooled.value_at_quantile(quantile) as f64)
    }

    /// One bootstrap draw of the pooled `quantile`: repeats drawn with replacement, then the
    /// order statistic of the pooled draw's requests.
    fn draw_quantile(&self, quantile: f64, rng: &mut ChaCha8Rng) -> Option<f64> {
        let repeats = self.len();
        if repeats == 0 {
            return None;
        }
        let mut weights = vec![0u64; repeats];
        for _ in 0..repeats {
            weights[rng.gen_range(0..repeats)] += 1;
        }
        let requests: u64 = weights
            .iter()
            .zip(&self.totals)
            .map(|(weight, total)| weight * total)
            .sum();
        if requests == 0 {
            return None;
        }
        let rank = ((quantile * requests as f64).ceil() as u64).clamp(1, requests);
        let order = Beta::new(rank as f64, (requests + 1 - rank) as f64).ok()?;
        let target = order.sample(rng) * requests as f64;
        // Walk down from the largest value: the answer is the smallest value whose
        // cumulative count reaches `target`, and for a tail quantile it is near the top.
        let mut cumulative = requests as f64;
        for (bucket, value) in self.values.iter().enumerate().rev() {
            let here: u64 = self.counts[bucket]
                .iter()
                .zip(&weights)
                .map(|(count, weight)| count * weight)
                .sum();
            let below = cumulative - here as f64;
            if bucket == 0 || below < target {
                return Some(*value as f64);
            }
            cumulative = below;
        }
        None
    }
}

/// The ratio of two systems' pooled `quantile` (e.g. 0.99) with its bootstrap interval;
/// `None` when either side has no request or the denominator's quantile is zero.
#[must_use]
pub fn quantile_ratio(
    numerator: &Repeats,
    denominator: &Repeats,
    quantile: f64,
    plan: &Plan,
) -> Option<Interval> {
    let top = numerator.pooled_quantile(quantile)?;
    let bottom = denominator.pooled_quantile(quantile)?;
    if bottom <= 0.0 {
        return None;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed);
    let draws = (0..plan.resamples).filter_map(|_| {
        let top = numerator.draw_quantile(quantile, &mut rng)?;
        let bottom = denominator.draw_quantile(quantile, &mut rng)?;
        (bottom > 0.0).then(|| top / bottom)
    });
    interval(top / bottom, draws.collect(), plan)
}

/// The ratio of two systems' peak throughput, a peak being the highest over the points of
/// the median over each point's repeats (`points[point][repeat]`), with its bootstrap
/// interval (each point's repeats drawn with replacement); `None` when either side has no
/// repeat or the denominator's peak is zero.
#[must_use]
pub fn peak_median_ratio(
    numerator: &[Vec<f64>],
    denominator: &[Vec<f64>],
    plan: &Plan,
) -> Option<Interval> {
    let peak = |points: &[Vec<f64>]| {
        points
            .iter()
            .filter(|repeats| !repeats.is_empty())
            .map(|repeats| median(repeats))
            .fold(None, |best: Option<f64>, value| {
                Some(best.map_or(value, |best| best.max(value)))
            })
    };
    let top = peak(numerator)?;
    let bottom = peak(denominator)?;
    if bottom <= 0.0 {
        return None;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed);
    let redraw = |points: &[Vec<f64>], rng: &mut ChaCha8Rng| -> Vec<Vec<f64>> {
        points
            .iter()
            .map(|repeats| {
                (0..repeats.len())
                    .map(|_| repeats[rng.gen_range(0..repeats.len())])
                    .collect()
            })
            .collect()
    };
    let mut draws = Vec::with_capacity(plan.resamples);
    for _ in 0..plan.resamples {
        let top = peak(&redraw(numerator, &mut rng));
        let bottom = peak(&redraw(denominator, &mut rng));
        if let (Some(top), Some(bottom)) = (top, bottom) {
            if bottom > 0.0 {
                draws.push(top / bottom);
            }
        }
    }
    interval(top / bottom, draws, plan)
}

/// The percentile interval of `draws` around `estimate`.
fn interval(estimate: f64, mut draws: Vec<f64>, plan: &Plan) -> Option<Interval> {
    if draws.is_empty() {
        return None;
    }
    draws.sort_by(f64::total_cmp);
    let at = |share: f64| {
        let index = (share * (draws.len() - 1) as f64).round() as usize;
        draws[index.min(draws.len() - 1)]
    };
    let tail = (1.0 - plan.confidence) / 2.0;
    Some(Interval {
        estimate,
        low: at(tail),
        high: at(1.0 - tail),
        confidence: plan.confidence,
        resamples: draws.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::{peak_median_ratio, quantile_ratio, Plan, Repeats};
    use hdrhistogram::Histogram;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use tailtrim_bench::class::new_histogram;

    /// `repeats` histograms of `requests` exponential values of mean `mean` (ns).
    fn exponential(repeats: usize, requests: usize, mean: f64, seed: u64) -> Vec<Histogram<u64>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..repeats)
            .map(|_| {
                let mut histogram = new_histogram();
                for _ in 0..requests {
                    let uniform: f64 = rng.gen_range(f64::EPSILON..1.0);
                    histogram.saturating_record((-uniform.ln() * mean) as u64 + 1);
                }
                histogram
            })
            .collect()
    }

    #[test]
    fn the_estimate_is_the_pooled_quantile_and_the_interval_holds_the_true_ratio() {
        let slow = Repeats::new(&exponential(3, 20_000, 2_000_000.0, 1));
        let fast = Repeats::new(&exponential(3, 20_000, 1_000_000.0, 2));
        let ratio = quantile_ratio(&slow, &fast, 0.99, &Plan::default()).expect("ratio");
        let pooled = |repeats: &Repeats| repeats.pooled_quantile(0.99).expect("requests");
        assert_eq!(ratio.estimate, pooled(&slow) / pooled(&fast));
        // Exponential quantiles scale with the mean: the true ratio is 2.
        assert!(ratio.low < 2.0 && 2.0 < ratio.high, "{ratio:?}");
        assert!(ratio.low <= ratio.estimate && ratio.estimate <= ratio.high);
        assert!(
            ratio.high / ratio.low < 1.3,
            "60 000 requests a side: {ratio:?}"
        );
        assert_eq!(ratio.resamples, 2_000);
        assert_eq!(slow.total(), 60_000);
        assert_eq!(slow.fewest(), 20_000);
    }

    #[test]
    fn fewer_requests_or_disagreeing_repeats_widen_the_interval() {
        let plan = Plan::default();
        let width = |top: &Repeats, bottom: &Repeats| {
            let ratio = quantile_ratio(top, bottom, 0.99, &plan).expect("ratio");
            ratio.high / ratio.low
        };
        let many = width(
            &Repeats::new(&exponential(3, 20_000, 2e6, 3)),
            &Repeats::new(&exponential(3, 20_000, 1e6, 4)),
        );
        let few = width(
            &Repeats::new(&exponential(3, 200, 2e6, 3)),
            &Repeats::new(&exponential(3, 200, 1e6, 4)),
        );
        assert!(few > many * 1.5, "200 vs 20 000 requests: {few} vs {many}");
        // One repeat of three ten times slower (a stall): the repeat level shows it.
        let mut stalled = exponential(2, 20_000, 2e6, 5);
        stalled.extend(exponential(1, 20_000, 2e7, 6));
        let disagreeing = width(
            &Repeats::new(&stalled),
            &Repeats::new(&exponential(3, 20_000, 1e6, 4)),
        );
        assert!(disagreeing > many * 3.0, "{disagreeing} vs {many}");
    }

    #[test]
    fn the_same_seed_gives_the_same_interval() {
        let top = Repeats::new(&exponential(3, 1_000, 3e6, 7));
        let bottom = Repeats::new(&exponential(3, 1_000, 1e6, 8));
        let plan = Plan::default();
        assert_eq!(
            quantile_ratio(&top, &bottom, 0.99, &plan),
            quantile_ratio(&top, &bottom, 0.99, &plan)
        );
        let other = Plan {
            seed: 99,
            ..Plan::default()
        };
        assert_ne!(
            quantile_ratio(&top, &bottom, 0.99, &plan),
            quantile_ratio(&top, &bottom, 0.99, &other)
        );
    }

    #[test]
    fn no_requests_no_ratio() {
        let empty = Repeats::new(&[]);
        let some = Repeats::new(&exponential(2, 100, 1e6, 9));
        assert!(empty.is_empty());
        assert_eq!(quantile_ratio(&empty, &some, 0.99, &Plan::default()), None);
        assert_eq!(quantile_ratio(&some, &empty, 0.99, &Plan::default()), None);
        let zero_requests = Repeats::new(&[new_histogram(), new_histogram()]);
        assert_eq!(zero_requests.len(), 2);
        assert_eq!(
            quantile_ratio(&some, &zero_requests, 0.99, &Plan::default()),
            None
        );
    }

    #[test]
    fn peak_throughput_ratio_takes_each_side_at_its_own_peak() {
        let plan = Plan::default();
        // Identical repeats: nothing to resample, the interval is the estimate.
        let steady = peak_median_ratio(
            &[vec![100.0; 3], vec![200.0; 3], vec![150.0; 3]],
            &[vec![100.0; 3], vec![160.0; 3], vec![120.0; 3]],
            &plan,
        )
        .expect("ratio");
        assert_eq!(steady.estimate, 200.0 / 160.0);
        assert_eq!(
            (steady.low, steady.high),
            (steady.estimate, steady.estimate)
        );
        // Repeats that scatter: the interval spans the scatter around the median's ratio.
        let noisy = peak_median_ratio(
            &[vec![190.0, 200.0, 230.0]],
            &[vec![150.0, 160.0, 170.0]],
            &plan,
        )
        .expect("ratio");
        assert_eq!(noisy.estimate, 200.0 / 160.0);
        assert!(noisy.low < noisy.estimate && noisy.estimate < noisy.high);
        assert!(noisy.low >= 190.0 / 170.0 && noisy.high <= 230.0 / 150.0);
        assert_eq!(peak_median_ratio(&[vec![]], &[vec![1.0]], &plan), None);
    }
}
