//! Latency summaries of a run, from HDR histograms in nanoseconds (the bench's
//! [`tailtrim_bench::class::new_histogram`]).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Percentiles of one class of requests, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Requests measured.
    pub count: u64,
    /// Exact mean (not from the histogram).
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
}

/// The latency histograms of one run (nanoseconds, the bench's bounds and precision), one per
/// class a [`RunResult`](crate::RunResult) reports percentiles for; the percentiles are read
/// from these, so a caller that serializes them lets any percentile be recomputed.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyHistograms {
    /// Small requests, arrival → reply delivered.
    pub small: Histogram<u64>,
    /// Large requests, arrival → reply delivered.
    pub large: Histogram<u64>,
    /// Small requests, first core that touched them → reply.
    pub small_in_server: Histogram<u64>,
    /// Large requests, the same.
    pub large_in_server: Histogram<u64>,
}

impl Default for LatencyHistograms {
    fn default() -> Self {
        let empty = tailtrim_bench::class::new_histogram;
        LatencyHistograms {
            small: empty(),
            large: empty(),
            small_in_server: empty(),
            large_in_server: empty(),
        }
    }
}

/// A histogram plus an exact sum, for one class.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    histogram: Histogram<u64>,
    sum_ns: u128,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        LatencyRecorder {
            histogram: tailtrim_bench::class::new_histogram(),
            sum_ns: 0,
        }
    }
}

impl LatencyRecorder {
    /// Records one latency.
    pub fn record(&mut self, nanos: u64) {
        let clamped = nanos.clamp(1, tailtrim_bench::class::MAX_TRACKED_NANOS);
        let _ = self.histogram.record(clamped);
        self.sum_ns += u128::from(nanos);
    }

    /// The histogram (nanoseconds, clamped to the bench's tracked range).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.histogram
    }

    /// The summary so far.
    pub fn summary(&self) -> LatencySummary {
        let count = self.histogram.len();
        if count == 0 {
            return LatencySummary::default();
        }
        let micros = |quantile: f64| self.histogram.value_at_quantile(quantile) as f64 / 1e3;
        LatencySummary {
            count,
            mean_us: self.sum_ns as f64 / count as f64 / 1e3,
            p50_us: micros(0.5),
            p99_us: micros(0.99),
            p999_us: micros(0.999),
            max_us: self.histogram.max() as f64 / 1e3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LatencyRecorder;

    #[test]
    fn summary_of_known_values() {
        let mut recorder = LatencyRecorder::default();
        assert_eq!(recorder.summary().count, 0);
        for micros in 1..=1000u64 {
            recorder.record(micros * 1_000);
        }
        let summary = recorder.summary();
        assert_eq!(summary.count, 1000);
        assert!((summary.mean_us - 500.5).abs() < 1e-9);
        assert!((summary.p99_us - 990.0).abs() < 1.0, "{summary:?}");
        assert!((summary.max_us - 1000.0).abs() < 1.0);
    }
}
