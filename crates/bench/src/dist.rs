//! Size and inter-arrival distributions, each usable by inverse transform
//! (`quantile(u)` for a uniform `u`), with analytic CDF and mean so tests can
//! compare samples with theory, plus a rejection-inversion Zipf sampler.

use serde::{Deserialize, Serialize};

use crate::rng::Rng;

/// A continuous or discrete distribution of non-negative values (bytes, or
/// microseconds for inter-arrival gaps). Serialized with a `type` tag so
/// workload TOML files can name one:
/// `key_size = { type = "gev", location = 30.7984, scale = 8.20449, shape = 0.078688 }`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Distribution {
    /// Always `value`.
    Fixed {
        /// The value.
        value: f64,
    },
    /// Uniform on `[min, max]`.
    Uniform {
        /// Lower bound.
        min: f64,
        /// Upper bound.
        max: f64,
    },
    /// Exponential with the given mean.
    Exponential {
        /// Mean value.
        mean: f64,
    },
    /// Generalized extreme value distribution.
    Gev {
        /// Location (mu).
        location: f64,
        /// Scale (sigma).
        scale: f64,
        /// Shape (xi).
        shape: f64,
    },
    /// Generalized Pareto distribution.
    Gpd {
        /// Location (mu).
        location: f64,
        /// Scale (sigma).
        scale: f64,
        /// Shape (xi).
        shape: f64,
    },
    /// A table of discrete values with probabilities; the remaining
    /// probability mass (1 - sum) goes to `tail`. Without a tail the weights
    /// are normalised.
    Table {
        /// `(value, probability)` pairs in increasing value order.
        entries: Vec<(f64, f64)>,
        /// Distribution used for the probability not covered by the table.
        tail: Option<Box<Distribution>>,
    },
    /// `inner` conditioned on being at most `max` (inverse transform on the
    /// truncated CDF).
    Truncated {
        /// The distribution being truncated.
        inner: Box<Distribution>,
        /// Largest value kept.
        max: f64,
    },
}

impl Distribution {
    /// The value whose CDF is `u` (`u` in `[0, 1)`).
    #[must_use]
    pub fn quantile(&self, u: f64) -> f64 {
        match self {
            Self::Fixed { value } => *value,
            Self::Uniform { min, max } => min + (max - min) * u,
            Self::Exponential { mean } => -mean * (-u).ln_1p(),
            Self::Gev {
                location,
                scale,
                shape,
            } => {
                let minus_log = -u.max(f64::MIN_POSITIVE).ln();
                if shape.abs() < 1e-12 {
                    location - scale * minus_log.ln()
                } else {
                    location + scale * (minus_log.powf(-shape) - 1.0) / shape
                }
            }
            Self::Gpd {
                location,
                scale,
                shape,
            } => {
                if shape.abs() < 1e-12 {
                    location - scale * (-u).ln_1p()
                } else {
                    location + scale * ((1.0 - u).powf(-shape) - 1.0) / shape
                }
            }
            Self::Table { entries, tail } => {
                let table_mass: f64 = entries.iter().map(|(_, weight)| weight).sum();
                match tail {
                    Some(tail) if u >= table_mass => {
                        tail.quantile(((u - table_mass) / (1.0 - table_mass)).min(1.0 - 1e-12))
                    }
                    Some(_) => table_lookup(entries, u),
                    None => table_lookup(entries, u * table_mass),
                }
            }
            Self::Truncated { inner, max } => inner.quantile(u * inner.cdf(*max)).min(*max),
        }
    }

    /// Cumulative distribution function `P(X <= x)`.
    #[must_use]
    pub fn cdf(&self, x: f64) -> f64 {
        match self {
            Self::Fixed { value } => {
                if x >= *value {
                    1.0
                } else {
                    0.0
                }
            }
            Self::Uniform { min, max } => {
                if x < *min {
                    0.0
                } else if x >= *max {
                    1.0
                } else {
                    (x - min) / (max - min)
                }
            }
            Self::Exponential { mean } => {
                if x <= 0.0 {
                    0.0
                } else {
                    -(-x / mean).exp_m1()
                }
            }
            Self::Gev {
                location,
                scale,
                shape,
            } => {
                let standard = (x - location) / scale;
                if shape.abs() < 1e-12 {
                    (-(-standard).exp()).exp()
                } else {
                    let base = 1.0 + shape * standard;
                    if base <= 0.0 {
                        if *shape > 0.0 {
                            0.0
                        } else {
                            1.0
                        }
                    } else {
                        (-base.powf(-1.0 / shape)).exp()
                    }
                }
            }
            Self::Gpd {
                location,
                scale,
                shape,
            } => {
                if x <= *location {
                    return 0.0;
                }
                let standard = (x - location) / scale;
                if shape.abs() < 1e-12 {
                    -(-standard).exp_m1()
                } else {
                    let base = 1.0 + shape * standard;
                    if base <= 0.0 {
                        1.0
                    } else {
                        1.0 - base.powf(-1.0 / shape)
                    }
                }
            }
            Self::Table { entries, tail } => {
                let table_mass: f64 = entries.iter().map(|(_, weight)| weight).sum();
                let below: f64 = entries
                    .iter()
                    .filter(|(value, _)| *value <= x)
                    .map(|(_, weight)| weight)
                    .sum();
                match tail {
                    Some(tail) => below + (1.0 - table_mass) * tail.cdf(x),
                    None => below / table_mass,
                }
            }
            Self::Truncated { inner, max } => {
                if x >= *max {
                    1.0
                } else {
                    inner.cdf(x) / inner.cdf(*max)
                }
            }
        }
    }

    /// Analytic mean, when it exists and has a closed form.
    #[must_use]
    pub fn mean(&self) -> Option<f64> {
        match self {
            Self::Fixed { value } => Some(*value),
            Self::Uniform { min, max } => Some((min + max) / 2.0),
            Self::Exponential { mean } => Some(*mean),
            Self::Gev {
                location,
                scale,
                shape,
            } => {
                if shape.abs() < 1e-12 {
                    Some(location + scale * EULER_MASCHERONI)
                } else if *shape < 1.0 {
                    Some(location + scale * (gamma(1.0 - shape) - 1.0) / shape)
                } else {
                    None
                }
            }
            Self::Gpd {
                location,
                scale,
                shape,
            } => (*shape < 1.0).then(|| location + scale / (1.0 - shape)),
            Self::Table { entries, tail } => {
                let table_mass: f64 = entries.iter().map(|(_, weight)| weight).sum();
                let table_sum: f64 = entries.iter().map(|(value, weight)| value * weight).sum();
                match tail {
                    Some(tail) => Some(table_sum + (1.0 - table_mass) * tail.mean()?),
                    None => Some(table_sum / table_mass),
                }
            }
            Self::Truncated { .. } => None,
        }
    }

    /// Draws one sample.
    pub fn sample(&self, rng: &mut Rng) -> f64 {
        self.quantile(rng.unit())
    }
}

fn table_lookup(entries: &[(f64, f64)], target: f64) -> f64 {
    let mut cumulative = 0.0;
    for (value, weight) in entries {
        cumulative += weight;
        if target < cumulative {
            return *value;
        }
    }
    entries.last().map_or(0.0, |(value, _)| *value)
}

const EULER_MASCHERONI: f64 = 0.577_215_664_901_532_9;

/// Gamma function (Lanczos approximation, g = 7), accurate to ~1e-13 for the
/// positive arguments used here.
#[must_use]
pub fn gamma(x: f64) -> f64 {
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * gamma(1.0 - x))
    } else {
        let shifted = x - 1.0;
        let mut series = COEFFICIENTS[0];
        for (index, coefficient) in COEFFICIENTS.iter().enumerate().skip(1) {
            series += coefficient / (shifted + index as f64);
        }
        let t = shifted + 7.5;
        (2.0 * std::f64::consts::PI).sqrt() * t.powf(shifted + 0.5) * (-t).exp() * series
    }
}

/// Zipf sampler over ranks `1..=count` with `P(k) ∝ k^-exponent`, by
/// rejection-inversion (Hörmann and Derflinger, 1996): O(1) memory and
/// expected O(1) time per sample for any number of elements.
#[derive(Clone, Debug)]
pub struct Zipf {
    count: u64,
    exponent: f64,
    h_integral_x1: f64,
    h_integral_count: f64,
    squeeze: f64,
}

impl Zipf {
    /// Sampler for `count >= 1` elements and `exponent >= 0`.
    #[must_use]
    pub fn new(count: u64, exponent: f64) -> Self {
        let count = count.max(1);
        let mut zipf = Self {
            count,
            exponent,
            h_integral_x1: 0.0,
            h_integral_count: 0.0,
            squeeze: 0.0,
        };
        zipf.h_integral_x1 = zipf.h_integral(1.5) - 1.0;
        zipf.h_integral_count = zipf.h_integral(count as f64 + 0.5);
        zipf.squeeze = 2.0 - zipf.h_integral_inverse(zipf.h_integral(2.5) - zipf.h(2.0));
        zipf
    }

    /// Probability of rank `k` (1-based), computed exactly (O(count); for tests).
    #[must_use]
    pub fn probability(&self, rank: u64) -> f64 {
        let normaliser: f64 = (1..=self.count)
            .map(|k| (k as f64).powf(-self.exponent))
            .sum();
        (rank as f64).powf(-self.exponent) / normaliser
    }

    /// Draws a rank in `1..=count`.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u =
                self.h_integral_count + rng.unit() * (self.h_integral_x1 - self.h_integral_count);
            let x = self.h_integral_inverse(u);
            let rank = ((x + 0.5) as u64).clamp(1, self.count);
            let rank_f = rank as f64;
            if rank_f - x <= self.squeeze || u >= self.h_integral(rank_f + 0.5) - self.h(rank_f) {
                return rank;
            }
        }
    }

    fn h(&self, x: f64) -> f64 {
        (-self.exponent * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper_expm1_ratio((1.0 - self.exponent) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.exponent)).max(-1.0);
        (helper_log1p_ratio(t) * x).exp()
    }
}

/// `ln(1 + x) / x`, stable near zero.
fn helper_log1p_ratio(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, stable near zero.
fn helper_expm1_ratio(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// Facebook ETC key size: GEV(30.7984, 8.20449, 0.078688).
#[must_use]
pub fn etc_key_size() -> Distribution {
    Distribution::Gev {
        location: 30.7984,
        scale: 8.20449,
        shape: 0.078688,
    }
}

/// Facebook ETC value size as mutilate models it: sizes 0–14 from a table,
/// otherwise generalized Pareto(15, 214.476, 0.348238).
#[must_use]
pub fn etc_value_size() -> Distribution {
    let table = [
        0.00536, 0.00047, 0.17820, 0.09239, 0.00018, 0.02740, 0.00065, 0.00606, 0.00023, 0.00837,
        0.00837, 0.08989, 0.00092, 0.00326, 0.01980,
    ];
    Distribution::Table {
        entries: table
            .iter()
            .enumerate()
            .map(|(size, probability)| (size as f64, *probability))
            .collect(),
        tail: Some(Box::new(Distribution::Gpd {
            location: 15.0,
            scale: 214.476,
            shape: 0.348238,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::{etc_key_size, etc_value_size, gamma, Distribution, Zipf};
    use crate::rng::Rng;

    fn sorted_samples(distribution: &Distribution, count: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        let mut samples: Vec<f64> = (0..count).map(|_| distribution.sample(&mut rng)).collect();
        samples.sort_by(f64::total_cmp);
        samples
    }

    fn empirical_quantile(sorted: &[f64], p: f64) -> f64 {
        sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
    }

    #[test]
    fn gamma_matches_known_values() {
        assert!((gamma(5.0) - 24.0).abs() < 1e-9);
        assert!((gamma(0.5) - std::f64::consts::PI.sqrt()).abs() < 1e-12);
        // Reference value from Python's math.gamma.
        assert!((gamma(1.0 - 0.078688) - 1.052_026_983_155_57).abs() < 1e-10);
    }

    #[test]
    fn gev_key_size_samples_match_analytic_mean_and_quantiles() {
        let gev = etc_key_size();
        let samples = sorted_samples(&gev, 400_000, 11);
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let analytic_mean = gev.mean().unwrap_or(f64::NAN);
        // mu + sigma (Gamma(1 - xi) - 1) / xi with Python's math.gamma: 36.22305.
        assert!(
            (analytic_mean - 36.223_05).abs() < 1e-4,
            "analytic {analytic_mean}"
        );
        assert!(
            (mean - analytic_mean).abs() / analytic_mean < 0.01,
            "{mean} vs {analytic_mean}"
        );
        for p in [0.1, 0.5, 0.9, 0.99] {
            let empirical = empirical_quantile(&samples, p);
            let analytic = gev.quantile(p);
            assert!(
                (empirical - analytic).abs() / analytic < 0.02,
                "p{p}: {empirical} vs {analytic}"
            );
            assert!(
                (gev.cdf(analytic) - p).abs() < 1e-9,
                "cdf inverts quantile at {p}"
            );
        }
    }

    #[test]
    fn gpd_samples_match_analytic_mean_and_quantiles() {
        let gpd = Distribution::Gpd {
            location: 0.0,
            scale: 16.0292,
            shape: 0.154971,
        };
        let samples = sorted_samples(&gpd, 400_000, 12);
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let analytic_mean = 16.0292 / (1.0 - 0.154971);
        assert_eq!(gpd.mean(), Some(analytic_mean));
        assert!(
            (mean - analytic_mean).abs() / analytic_mean < 0.01,
            "{mean} vs {analytic_mean}"
        );
        for p in [0.25, 0.5, 0.9, 0.99] {
            let empirical = empirical_quantile(&samples, p);
            let analytic = gpd.quantile(p);
            assert!(
                (empirical - analytic).abs() / analytic < 0.03,
                "p{p}: {empirical} vs {analytic}"
            );
            assert!((gpd.cdf(analytic) - p).abs() < 1e-9);
        }
    }

    #[test]
    fn etc_value_table_frequencies_match_table() {
        let value_size = etc_value_size();
        let Distribution::Table { entries, .. } = &value_size else {
            panic!("etc value size is a table with a tail");
        };
        let mut rng = Rng::new(13);
        let samples = 1_000_000;
        let mut counts = [0u32; 15];
        let mut tail_count = 0u32;
        for _ in 0..samples {
            let value = value_size.sample(&mut rng);
            if value < 15.0 {
                counts[value as usize] += 1;
            } else {
                tail_count += 1;
            }
        }
        let table_mass: f64 = entries.iter().map(|(_, weight)| weight).sum();
        assert!(
            (table_mass - 0.44155).abs() < 1e-6,
            "table mass {table_mass}"
        );
        for (value, probability) in entries {
            let observed = f64::from(counts[*value as usize]) / f64::from(samples);
            let sigma = (probability * (1.0 - probability) / f64::from(samples)).sqrt();
            assert!(
                (observed - probability).abs() < 5.0 * sigma + 1e-5,
                "size {value}: {observed} vs {probability}"
            );
        }
        let tail_share = f64::from(tail_count) / f64::from(samples);
        assert!(
            (tail_share - (1.0 - table_mass)).abs() < 0.003,
            "tail share {tail_share}"
        );
        // Mixture mean = table part + tail mass * GPD mean.
        let analytic_mean = value_size.mean().unwrap_or(f64::NAN);
        let expected = entries.iter().map(|(v, w)| v * w).sum::<f64>()
            + (1.0 - table_mass) * (15.0 + 214.476 / (1.0 - 0.348238));
        assert!((analytic_mean - expected).abs() < 1e-9);
    }

    #[test]
    fn truncated_distribution_respects_its_bound_and_shape() {
        let truncated = Distribution::Truncated {
            inner: Box::new(etc_value_size()),
            max: 1499.0,
        };
        let samples = sorted_samples(&truncated, 200_000, 14);
        assert!(samples.iter().all(|value| *value <= 1499.0));
        let median = empirical_quantile(&samples, 0.5);
        assert!(
            (median - truncated.quantile(0.5)).abs() <= 2.0,
            "median {median}"
        );
    }

    #[test]
    fn zipf_frequencies_match_analytic_probabilities() {
        for (count, exponent) in [(1000u64, 0.99), (50, 0.0), (10_000, 1.2), (1000, 1.0)] {
            let zipf = Zipf::new(count, exponent);
            let mut rng = Rng::new(15);
            let samples = 500_000u32;
            let mut counts = vec![0u32; count as usize + 1];
            for _ in 0..samples {
                let rank = zipf.sample(&mut rng);
                assert!((1..=count).contains(&rank));
                counts[rank as usize] += 1;
            }
            for rank in [1u64, 2, 3, 10, 50] {
                let probability = zipf.probability(rank);
                let observed = f64::from(counts[rank as usize]) / f64::from(samples);
                let sigma = (probability * (1.0 - probability) / f64::from(samples)).sqrt();
                assert!(
                    (observed - probability).abs() < 5.0 * sigma,
                    "n={count} s={exponent} rank {rank}: {observed} vs {probability}"
                );
            }
        }
    }

    #[test]
    fn zipf_handles_millions_of_keys() {
        let zipf = Zipf::new(10_000_000, 0.99);
        let mut rng = Rng::new(16);
        let samples = 200_000u32;
        let top = (0..samples).filter(|_| zipf.sample(&mut rng) == 1).count();
        // H(10^7, 0.99) ≈ 17.85 -> P(1) ≈ 0.056.
        let expected = 1.0
            / (1..=10_000_000u64)
                .map(|k| (k as f64).powf(-0.99))
                .sum::<f64>();
        let observed = top as f64 / f64::from(samples);
        assert!(
            (observed - expected).abs() < 0.003,
            "{observed} vs {expected}"
        );
    }
}
