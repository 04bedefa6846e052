//! Open-loop arrival schedule: inter-arrival gaps drawn from the workload's
//! arrival process and rescaled so that their mean is `1 / rate`. The
//! schedule never looks at replies.

use crate::dist::Distribution;
use crate::rng::Rng;
use crate::workload::Arrival;

/// Stream of scheduled send times, in nanoseconds from the start of the run.
#[derive(Clone, Debug)]
pub struct Schedule {
    gap: Distribution,
    scale: f64,
    rng: Rng,
    now_nanos: f64,
}

impl Schedule {
    /// Schedule at `rate` requests per second (must be positive).
    #[must_use]
    pub fn new(arrival: &Arrival, rate: f64, rng: Rng) -> Self {
        let mean_gap_nanos = 1e9 / rate;
        let (gap, scale) = match arrival {
            Arrival::Poisson => (
                Distribution::Exponential {
                    mean: mean_gap_nanos,
                },
                1.0,
            ),
            Arrival::Gpd { scale, shape } => {
                let gap = Distribution::Gpd {
                    location: 0.0,
                    scale: *scale,
                    shape: *shape,
                };
                let natural_mean = gap.mean().unwrap_or(*scale);
                (gap, mean_gap_nanos / natural_mean)
            }
        };
        Self {
            gap,
            scale,
            rng,
            now_nanos: 0.0,
        }
    }

    /// Next scheduled send time, nanoseconds after the start.
    pub fn next_nanos(&mut self) -> u64 {
        self.now_nanos += self.gap.sample(&mut self.rng) * self.scale;
        self.now_nanos as u64
    }
}

#[cfg(test)]
mod tests {
    use super::Schedule;
    use crate::rng::Rng;
    use crate::workload::{etc_arrival, Arrival};

    #[test]
    fn schedules_hit_the_target_rate_and_keep_their_shape() {
        for arrival in [Arrival::Poisson, etc_arrival()] {
            let mut schedule = Schedule::new(&arrival, 20_000.0, Rng::new(21));
            let mut previous = 0u64;
            let mut gaps = Vec::new();
            let mut last = 0;
            for _ in 0..200_000 {
                last = schedule.next_nanos();
                assert!(last >= previous);
                gaps.push((last - previous) as f64);
                previous = last;
            }
            let rate = 200_000.0 / (last as f64 / 1e9);
            assert!(
                (rate - 20_000.0).abs() / 20_000.0 < 0.01,
                "{arrival:?}: rate {rate}"
            );
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let variance =
                gaps.iter().map(|gap| (gap - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
            let squared_cv = variance / (mean * mean);
            // Exponential: cv² = 1; GPD(ξ): cv² = 1 / (1 - 2ξ) ≈ 1.45 for ETC.
            let expected_cv = match arrival {
                Arrival::Poisson => 1.0,
                Arrival::Gpd { shape, .. } => 1.0 / (1.0 - 2.0 * shape),
            };
            assert!(
                (squared_cv - expected_cv).abs() / expected_cv < 0.1,
                "{arrival:?}: cv² {squared_cv} vs {expected_cv}"
            );
        }
    }
}
