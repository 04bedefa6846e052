//! Results: per-class latency summaries from HDR histograms, the run report
//! (the `--json` schema), per-second time series, sweeps, and a plain-text
//! table for people.

use std::collections::BTreeMap;
use std::fmt::Write;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::class::Class;

/// Percentiles sampled for the percentile curves (plots and JSON).
pub const CURVE_PERCENTILES: [f64; 22] = [
    0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 97.0, 98.0, 99.0, 99.5, 99.7,
    99.9, 99.95, 99.97, 99.99, 99.995, 99.999,
];

/// Latency summary of one class, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassSummary {
    /// Number of completed requests.
    pub count: u64,
    /// Mean latency.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 95th percentile.
    pub p95_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// `[percentile, latency_us]` pairs at [`CURVE_PERCENTILES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub curve: Vec<[f64; 2]>,
}

impl ClassSummary {
    /// Summary of a histogram recorded in nanoseconds.
    #[must_use]
    pub fn from_histogram(histogram: &Histogram<u64>, with_curve: bool) -> Self {
        if histogram.is_empty() {
            return Self::default();
        }
        let micros = |quantile: f64| histogram.value_at_quantile(quantile) as f64 / 1_000.0;
        let curve = if with_curve {
            CURVE_PERCENTILES
                .iter()
                .map(|percentile| [*percentile, micros(percentile / 100.0)])
                .collect()
        } else {
            Vec::new()
        };
        Self {
            count: histogram.len(),
            mean_us: histogram.mean() / 1_000.0,
            p50_us: micros(0.5),
            p90_us: micros(0.9),
            p95_us: micros(0.95),
            p99_us: micros(0.99),
            p999_us: micros(0.999),
            max_us: histogram.max() as f64 / 1_000.0,
            curve,
        }
    }
}

/// One second of the run (seconds counted from the end of warm-up).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SecondSample {
    /// Second index.
    pub second: u64,
    /// Replies received during this second.
    pub completed: u64,
    /// Replies per second received during this second.
    pub throughput_rps: f64,
    /// Median latency of requests scheduled in this second.
    pub p50_us: f64,
    /// p99 latency of requests scheduled in this second.
    pub p99_us: f64,
    /// Keys found, for requests scheduled in this second.
    pub hits: u64,
    /// Keys missed, for requests scheduled in this second.
    pub misses: u64,
    /// `hits / (hits + misses)` (1 when there were no lookups).
    pub hit_ratio: f64,
    /// Errors among requests scheduled in this second.
    pub errors: u64,
}

/// The closed loop a run used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClosedLoopReport {
    /// Clients (connections), one request outstanding each.
    pub clients: usize,
    /// Time between a reply and the client's next request (µs).
    pub think_time_us: f64,
}

/// Result of one run: the `--json` document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Workload name.
    pub workload: String,
    /// Server address.
    pub server: String,
    /// `tcp` or `udp`.
    pub transport: String,
    /// Target request rate (0 in a closed loop, which has none).
    pub target_rps: f64,
    /// Replies received during the measured window per second.
    pub achieved_rps: f64,
    /// Requests the schedule issued during the measured window per second.
    pub scheduled_rps: f64,
    /// Length of the measured window.
    pub duration_s: f64,
    /// Warm-up excluded before the window.
    pub warmup_s: f64,
    /// Connections (TCP) or sockets (UDP).
    pub connections: usize,
    /// I/O threads of the bench.
    pub threads: usize,
    /// Requests allowed in flight per connection before queueing client-side.
    pub max_in_flight: usize,
    /// Requests scheduled in the measured window.
    pub scheduled: u64,
    /// Of those, replies received (including during the drain).
    pub completed: u64,
    /// Error replies, broken connections, UDP timeouts and unfinished requests.
    pub errors: u64,
    /// Keys asked for and not found.
    pub misses: u64,
    /// Keys found.
    pub hits: u64,
    /// `hits / (hits + misses)`.
    pub hit_ratio: f64,
    /// UDP requests without a reply within the timeout (part of `errors`).
    pub timeouts: u64,
    /// Requests without a reply when the drain ended (part of `errors`).
    pub unfinished: u64,
    /// UDP requests (large SETs) that do not fit one datagram and were not
    /// sent, as memcached requires (part of `errors`).
    #[serde(default)]
    pub udp_oversize: u64,
    /// CPU time of the bench process during the run, in percent of one core.
    pub bench_cpu_percent: f64,
    /// Delay between scheduled and actual send (the generator's own lag,
    /// including client-side queueing behind the in-flight cap).
    pub send_lag: ClassSummary,
    /// Delay between scheduled time and send for requests that did not queue
    /// behind the in-flight cap: the generator's own timing precision.
    #[serde(default)]
    pub dispatch_lag: ClassSummary,
    /// Latency per class (`all`, `small`, `large`, `mice`, `elephant`, `get`, `set`).
    pub classes: BTreeMap<String, ClassSummary>,
    /// Per-second series (empty unless requested).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeseries: Vec<SecondSample>,
    /// The same load against a null server in the same invocation: the
    /// floor of the bench's own path on this machine (when requested).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<Box<RunReport>>,
    /// The closed loop of a closed-loop run; absent: open loop (the schedule at
    /// `target_rps`, whatever the replies do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_loop: Option<ClosedLoopReport>,
}

impl RunReport {
    /// Summary of `class` (default when absent).
    #[must_use]
    pub fn class(&self, class: Class) -> ClassSummary {
        self.classes.get(class.name()).cloned().unwrap_or_default()
    }

    /// Plain-text table of the run.
    #[must_use]
    pub fn to_table(&self) -> String {
        let mut text = String::new();
        let (load, offered) = match &self.closed_loop {
            None => (
                format!(
                    "open loop, {} conns x {} in flight",
                    self.connections, self.max_in_flight
                ),
                format!(
                    "target {:.0} rps, achieved {:.0} rps ({:+.2}%)",
                    self.target_rps,
                    self.achieved_rps,
                    (self.achieved_rps / self.target_rps.max(1e-9) - 1.0) * 100.0
                ),
            ),
            Some(closed) => (
                format!(
                    "closed loop, {} clients x 1 in flight, think time {:.0} µs",
                    closed.clients, closed.think_time_us
                ),
                format!("achieved {:.0} rps", self.achieved_rps),
            ),
        };
        let _ = writeln!(
            text,
            "workload {} -> {} ({}), {load}, {} threads",
            self.workload, self.server, self.transport, self.threads
        );
        let _ = writeln!(
            text,
            "{offered}, {:.1} s, errors {}, misses {} (hit ratio {:.4}), bench cpu {:.0}%",
            self.duration_s, self.errors, self.misses, self.hit_ratio, self.bench_cpu_percent
        );
        if self.timeouts + self.unfinished + self.udp_oversize > 0 {
            let _ = writeln!(
                text,
                "of the errors: {} UDP timeouts, {} unfinished at the end of the drain, {} UDP requests too large to send",
                self.timeouts, self.unfinished, self.udp_oversize
            );
        }
        let _ = writeln!(
            text,
            "{:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "class",
            "count",
            "mean_us",
            "p50_us",
            "p90_us",
            "p95_us",
            "p99_us",
            "p999_us",
            "max_us"
        );
        let mut rows: Vec<(&str, ClassSummary)> = Class::ALL
            .iter()
            .map(|class| (class.name(), self.class(*class)))
            .collect();
        rows.push(("send_lag", self.send_lag.clone()));
        rows.push(("disp_lag", self.dispatch_lag.clone()));
        for (name, summary) in rows {
            if summary.count == 0 {
                continue;
            }
            let _ = writeln!(
                text,
                "{:<9} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                name,
                summary.count,
                summary.mean_us,
                summary.p50_us,
                summary.p90_us,
                summary.p95_us,
                summary.p99_us,
                summary.p999_us,
                summary.max_us
            );
        }
        text
    }
}

/// Result of a rate sweep: every point's full report and the curve.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Workload name.
    pub workload: String,
    /// Server address.
    pub server: String,
    /// Latency-versus-throughput curve, one entry per point.
    pub curve: Vec<CurvePoint>,
    /// Full reports, in the order run.
    pub points: Vec<RunReport>,
}

/// One point of a latency-versus-throughput curve.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Target rate.
    pub target_rps: f64,
    /// Achieved rate.
    pub achieved_rps: f64,
    /// Median latency (all).
    pub p50_us: f64,
    /// p99 latency (all).
    pub p99_us: f64,
    /// p99.9 latency (all).
    pub p999_us: f64,
    /// p99 of small requests.
    pub small_p99_us: f64,
    /// p99 of large requests.
    pub large_p99_us: f64,
    /// Errors.
    pub errors: u64,
}

impl SweepReport {
    /// Builds the sweep from its runs.
    #[must_use]
    pub fn from_points(points: Vec<RunReport>) -> Self {
        let curve = points
            .iter()
            .map(|point| {
                let all = point.class(Class::All);
                CurvePoint {
                    target_rps: point.target_rps,
                    achieved_rps: point.achieved_rps,
                    p50_us: all.p50_us,
                    p99_us: all.p99_us,
                    p999_us: all.p999_us,
                    small_p99_us: point.class(Class::Small).p99_us,
                    large_p99_us: point.class(Class::Large).p99_us,
                    errors: point.errors,
                }
            })
            .collect();
        Self {
            workload: points
                .first()
                .map(|p| p.workload.clone())
                .unwrap_or_default(),
            server: points.first().map(|p| p.server.clone()).unwrap_or_default(),
            curve,
            points,
        }
    }

    /// Plain-text table of the curve.
    #[must_use]
    pub fn to_table(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "{:>12} {:>12} {:>9} {:>9} {:>9} {:>11} {:>11} {:>7}",
            "target_rps",
            "achieved",
            "p50_us",
            "p99_us",
            "p999_us",
            "small_p99",
            "large_p99",
            "errors"
        );
        for point in &self.curve {
            let _ = writeln!(
                text,
                "{:>12.0} {:>12.0} {:>9.1} {:>9.1} {:>9.1} {:>11.1} {:>11.1} {:>7}",
                point.target_rps,
                point.achieved_rps,
                point.p50_us,
                point.p99_us,
                point.p999_us,
                point.small_p99_us,
                point.large_p99_us,
                point.errors
            );
        }
        text
    }
}

/// Median of `values`: the middle value of an odd count, the mean of the two middle values
/// of an even count (the conventional definition); 0 when empty. NaNs sort last. The one
/// median of the project: experiments (over repeats), the simulator and the bench use it.
#[must_use]
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => 0.0,
        count if count % 2 == 1 => sorted[middle],
        _ => (sorted[middle - 1] + sorted[middle]) / 2.0,
    }
}

/// Parses `a,b,c` or `start:end:step` into a list of rates.
pub fn parse_rates(text: &str) -> Result<Vec<f64>, crate::BenchError> {
    let bad = || crate::BenchError::Config(format!("bad rate list {text:?}"));
    let parse = |part: &str| part.trim().parse::<f64>().map_err(|_| bad());
    let rates: Vec<f64> = if text.contains(':') {
        let parts: Vec<&str> = text.split(':').collect();
        let [start, end, step] = parts.as_slice() else {
            return Err(bad());
        };
        let (start, end, step) = (parse(start)?, parse(end)?, parse(step)?);
        if step <= 0.0 || end < start {
            return Err(bad());
        }
        let count = ((end - start) / step + 1e-9).floor() as usize + 1;
        if count > 1000 {
            return Err(bad());
        }
        (0..count)
            .map(|index| start + step * index as f64)
            .collect()
    } else {
        text.split(',').map(parse).collect::<Result<_, _>>()?
    };
    if rates.is_empty() || rates.iter().any(|rate| !rate.is_finite() || *rate <= 0.0) {
        return Err(bad());
    }
    Ok(rates)
}

#[cfg(test)]
mod tests {
    use super::{median, parse_rates, ClassSummary};
    use crate::class::new_histogram;

    #[test]
    fn median_of_odd_counts_is_the_middle_value() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[7.0]), 7.0);
        assert_eq!(median(&[5.0, 1.0, 9.0, 3.0, 7.0]), 5.0);
    }

    #[test]
    fn median_of_even_counts_is_the_mean_of_the_two_middle_values() {
        // The upper-middle convention would give 3, the lower-middle one 2.
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[10.0, 20.0]), 15.0);
    }

    #[test]
    fn median_of_nothing_is_zero_and_nans_sort_last() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[f64::NAN, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn rate_lists_and_ranges_parse() {
        assert_eq!(
            parse_rates("1000,2000,5e3").ok(),
            Some(vec![1000.0, 2000.0, 5000.0])
        );
        assert_eq!(
            parse_rates("10000:40000:10000").ok(),
            Some(vec![10000.0, 20000.0, 30000.0, 40000.0])
        );
        assert!(parse_rates("10:5:1").is_err());
        assert!(parse_rates("0,100").is_err());
        assert!(parse_rates("x").is_err());
    }

    #[test]
    fn summary_reflects_recorded_latencies() {
        let mut histogram = new_histogram();
        for micros in 1..=1000u64 {
            histogram.saturating_record(micros * 1_000);
        }
        let summary = ClassSummary::from_histogram(&histogram, true);
        assert_eq!(summary.count, 1000);
        assert!((summary.p50_us - 500.0).abs() < 1.0, "{}", summary.p50_us);
        assert!((summary.p99_us - 990.0).abs() < 1.5, "{}", summary.p99_us);
        assert!((summary.mean_us - 500.5).abs() < 1.0);
        assert!((summary.max_us - 1000.0).abs() < 1.0);
        assert!(summary
            .curve
            .windows(2)
            .all(|pair| pair[0][1] <= pair[1][1]));
    }
}
