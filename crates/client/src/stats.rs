//! Counters and latency histograms, declared next to the code that updates them.
//!
//! Names follow `<subsystem>_<event>`: `backend_requests`, `backend_timeouts`, …,
//! `pool_multigets`, …; the proxy renders them as `stats` lines and Prometheus text.

use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;
use parking_lot::Mutex;

/// Highest latency the histograms track (60 s, in microseconds).
const HISTOGRAM_MAX_MICROS: u64 = 60_000_000;

/// A latency histogram in microseconds.
#[derive(Debug)]
pub struct LatencyHistogram {
    inner: Mutex<Option<Recorded>>,
}

/// The histogram and the exact sum of what it recorded: a snapshot's sum is read in O(1),
/// where the histogram's own mean walks every bucket (the proxy's model tick took one
/// snapshot per backend a second, about 100k instructions each).
#[derive(Debug)]
struct Recorded {
    histogram: Histogram<u64>,
    sum_micros: u64,
}

impl LatencyHistogram {
    /// An empty histogram (3 significant digits, 1 µs .. 60 s).
    pub fn new() -> Self {
        LatencyHistogram {
            inner: Mutex::new(
                Histogram::new_with_bounds(1, HISTOGRAM_MAX_MICROS, 3)
                    .ok()
                    .map(|histogram| Recorded {
                        histogram,
                        sum_micros: 0,
                    }),
            ),
        }
    }

    /// Records one latency.
    pub fn record_micros(&self, micros: u64) {
        if let Some(recorded) = self.inner.lock().as_mut() {
            let micros = micros.clamp(1, HISTOGRAM_MAX_MICROS);
            recorded.histogram.saturating_record(micros);
            recorded.sum_micros = recorded.sum_micros.saturating_add(micros);
        }
    }

    /// Count and the given quantiles (0..=1), in microseconds.
    pub fn summary(&self, quantiles: &[f64]) -> (u64, Vec<u64>, u64) {
        match self
            .inner
            .lock()
            .as_ref()
            .map(|recorded| &recorded.histogram)
        {
            Some(histogram) => (
                histogram.len(),
                quantiles
                    .iter()
                    .map(|q| histogram.value_at_quantile(*q))
                    .collect(),
                histogram.max(),
            ),
            None => (0, vec![0; quantiles.len()], 0),
        }
    }
}

/// One consistent look at a [`LatencyHistogram`], in microseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencySnapshot {
    /// Latencies recorded.
    pub count: u64,
    /// The requested quantiles, in the order asked.
    pub quantiles: Vec<u64>,
    /// The largest latency recorded.
    pub max: u64,
    /// The sum of the recorded latencies (each clamped to the histogram's 1 µs .. 60 s), for
    /// a Prometheus summary's `_sum`.
    pub sum_micros: f64,
}

impl LatencyHistogram {
    /// Count, the given quantiles (0..=1), maximum and sum, under one lock.
    pub fn snapshot(&self, quantiles: &[f64]) -> LatencySnapshot {
        match self.inner.lock().as_ref() {
            Some(Recorded {
                histogram,
                sum_micros,
            }) => LatencySnapshot {
                count: histogram.len(),
                quantiles: quantiles
                    .iter()
                    .map(|q| histogram.value_at_quantile(*q))
                    .collect(),
                max: histogram.max(),
                sum_micros: *sum_micros as f64,
            },
            None => LatencySnapshot {
                quantiles: vec![0; quantiles.len()],
                ..LatencySnapshot::default()
            },
        }
    }

    /// The `quantile` (0..=1) in microseconds, then empties the histogram (0 when empty).
    pub fn take_quantile(&self, quantile: f64) -> f64 {
        match self.inner.lock().as_mut() {
            Some(recorded) => {
                let value = if recorded.histogram.is_empty() {
                    0
                } else {
                    recorded.histogram.value_at_quantile(quantile)
                };
                recorded.histogram.reset();
                recorded.sum_micros = 0;
                value as f64
            }
            None => 0.0,
        }
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn incr(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Per-backend metrics.
#[derive(Debug, Default)]
pub struct BackendStats {
    /// `backend_requests`: requests sent.
    pub requests: Counter,
    /// `backend_errors`: connection errors, malformed replies, overload.
    pub errors: Counter,
    /// `backend_timeouts`: requests that timed out.
    pub timeouts: Counter,
    /// `backend_fail_fast`: requests refused because the backend was marked down.
    pub fail_fast: Counter,
    /// `backend_marked_down`: up → down transitions.
    pub marked_down: Counter,
    /// `backend_revived`: down → up transitions.
    pub revived: Counter,
    /// `backend_connects`: TCP connections opened.
    pub connects: Counter,
    /// `backend_stuck_skips`: requests that `avoid-slow` sent elsewhere than round robin's
    /// connection, whose oldest request in flight was late.
    pub stuck_skips: Counter,
    /// `backend_latency`: reply latency of successful requests.
    pub latency: LatencyHistogram,
}

/// Per-pool metrics.
#[derive(Debug, Default)]
pub struct PoolStats {
    /// `pool_reads`: keyed reads (single key).
    pub reads: Counter,
    /// `pool_writes`: keyed writes (sent to every replica).
    pub writes: Counter,
    /// `pool_multigets`: multi-key reads planned.
    pub multigets: Counter,
    /// `pool_multiget_keys`: keys in those reads.
    pub multiget_keys: Counter,
    /// `pool_fetches`: backend fetches the planner issued.
    pub fetches: Counter,
    /// `pool_failovers`: reads retried on another replica.
    pub failovers: Counter,
    /// `pool_unavailable`: requests failed because no replica could serve.
    pub unavailable: Counter,
    /// `pool_latency`: end-to-end latency of pool operations.
    pub latency: LatencyHistogram,
    /// `pool_multiget_latency`: end-to-end latency of multi-key reads.
    pub multiget_latency: LatencyHistogram,
    /// `pool_mice_latency`: multi-key reads of at most `elephant_threshold` keys.
    pub mice_latency: LatencyHistogram,
    /// `pool_elephant_latency`: multi-key reads of more keys.
    pub elephant_latency: LatencyHistogram,
    /// `pool_queries`: backend queries sent for multi-key reads (after merging).
    pub queries: Counter,
    /// `pool_query_keys`: keys in those queries.
    pub query_keys: Counter,
    /// `pool_multiget_class_latency`: end-to-end latency of multi-key reads by the Rein class
    /// of their key count (≤1, ≤5, ≤25, ≤125, more).
    pub multiget_class_latency: [LatencyHistogram; tailtrim_policy::drr::CLASSES],
    /// `pool_fetch_priority_latency`: latency of the planner's fetches by priority class, from
    /// leaving the delay queue (waiting for a slot included) to the reply.
    pub fetch_class_latency: [LatencyHistogram; tailtrim_policy::drr::CLASSES],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshots_sum_is_the_exact_sum_of_what_was_recorded() {
        let latency = LatencyHistogram::new();
        // 123,457 µs falls in a bucket 64 µs wide at 3 significant digits: the histogram's own
        // mean would not give it back.
        latency.record_micros(123_457);
        latency.record_micros(1);
        latency.record_micros(0); // clamped to 1 µs, as recorded
        let snapshot = latency.snapshot(&[0.5]);
        assert_eq!(snapshot.count, 3);
        assert_eq!(snapshot.sum_micros, 123_459.0);
        latency.take_quantile(0.5);
        assert_eq!(latency.snapshot(&[]).sum_micros, 0.0);
    }
}
