//! The samples of one reading, rendered as memcached `stats` lines or Prometheus text.
//!
//! ```text
//!   Samples::{count, real, distribution}(&DECLARED, labels, value)
//!        ├──► stats_lines  STAT <name><:label…> <value>     (kept unit; a distribution as
//!        │                 <name>_count, _p50, _p90, _p99, _p999, _max)
//!        └──► expose       Exposition: counter / gauge / summary in base units
//!   Samples::shown(&DECLARED, labels, text, number)   the text in `stats`, the number
//!                                                    (if any) on the page
//! ```
//!
//! Each rendering skips the samples of metrics declared for the other only
//! ([`Metric::stats_only`], [`Metric::page_only`]).
//!
//! In a `stats` name a label shows as `:<value>`, a numeric `class` as `:class<N>`; the
//! `pool` and `planner` labels are implied there (one pool, one planner per process).

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::declare::{Metric, Unit};
use crate::exposition::{Exposition, MetricKind, SummaryValue};

/// Metric labels as (name, value) pairs.
pub type Labels = Vec<(&'static str, String)>;

/// The quantiles a distribution is read at, and their names in `stats`.
pub const QUANTILES: [(f64, &str); 4] =
    [(0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p999")];

/// A latency histogram read once: count, [`QUANTILES`], maximum and sum, in the metric's
/// unit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Distribution {
    /// Observations.
    pub count: u64,
    /// The value at each of [`QUANTILES`], in order.
    pub quantiles: Vec<u64>,
    /// The largest observation.
    pub max: u64,
    /// The sum of the observations (an estimate is fine).
    pub sum: f64,
}

/// A sample's value.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    /// An integer, shown as is.
    Count(u64),
    /// A real number: `stats` shows integers without a fraction, others with 6 decimals.
    Real(f64),
    /// A latency histogram.
    Distribution(Distribution),
    /// A value `stats` shows as this text (a version, a policy's name, memcached's fixed
    /// formats); `/metrics` shows the number, or nothing without one.
    Shown(String, Option<f64>),
}

#[derive(Debug, Clone)]
struct Sample {
    name: Cow<'static, str>,
    metric: Metric,
    labels: Labels,
    value: Value,
}

/// The samples of one `stats` or `/metrics` rendering, in order.
#[derive(Debug, Clone, Default)]
pub struct Samples(Vec<Sample>);

impl Samples {
    /// An empty reading.
    pub fn new() -> Samples {
        Samples::default()
    }

    /// An integer sample of a counter or gauge.
    pub fn count(&mut self, metric: &Metric, labels: Labels, value: u64) {
        self.push(
            Cow::Borrowed(metric.name),
            metric,
            labels,
            Value::Count(value),
        );
    }

    /// A real-valued sample of a counter or gauge.
    pub fn real(&mut self, metric: &Metric, labels: Labels, value: f64) {
        self.push(
            Cow::Borrowed(metric.name),
            metric,
            labels,
            Value::Real(value),
        );
    }

    /// A real-valued sample of a family named at run time (e.g. a planner's own gauges),
    /// described by `metric` otherwise; its unit follows from `name`.
    pub fn real_named(&mut self, name: String, metric: &Metric, labels: Labels, value: f64) {
        let metric = metric.in_unit(Unit::of_name(&name));
        self.push(Cow::Owned(name), &metric, labels, Value::Real(value));
    }

    /// A sample `stats` shows as `text` and `/metrics` as `number` (skipped when `None`).
    pub fn shown(&mut self, metric: &Metric, labels: Labels, text: String, number: Option<f64>) {
        self.push(
            Cow::Borrowed(metric.name),
            metric,
            labels,
            Value::Shown(text, number),
        );
    }

    /// A latency histogram of a summary metric.
    pub fn distribution(&mut self, metric: &Metric, labels: Labels, value: Distribution) {
        self.push(
            Cow::Borrowed(metric.name),
            metric,
            labels,
            Value::Distribution(value),
        );
    }

    fn push(&mut self, name: Cow<'static, str>, metric: &Metric, labels: Labels, value: Value) {
        self.0.push(Sample {
            name,
            metric: *metric,
            labels,
            value,
        });
    }

    /// The samples as memcached `STAT name value\r\n` lines, appended to `out`.
    pub fn stats_lines(&self, out: &mut String) {
        for sample in self.0.iter().filter(|sample| sample.metric.in_stats) {
            let suffix = stat_suffix(&sample.labels);
            let name = &sample.name;
            match &sample.value {
                Value::Count(value) => {
                    let _ = write!(out, "STAT {name}{suffix} {value}\r\n");
                }
                Value::Real(value) => {
                    let _ = write!(out, "STAT {name}{suffix} {}\r\n", real_text(*value));
                }
                Value::Shown(text, _) => {
                    let _ = write!(out, "STAT {name}{suffix} {text}\r\n");
                }
                Value::Distribution(value) => {
                    let _ = write!(out, "STAT {name}_count{suffix} {}\r\n", value.count);
                    for ((_, quantile), at) in QUANTILES.iter().zip(&value.quantiles) {
                        let _ = write!(out, "STAT {name}_{quantile}{suffix} {at}\r\n");
                    }
                    let _ = write!(out, "STAT {name}_max{suffix} {}\r\n", value.max);
                }
            }
        }
    }

    /// The samples added to a Prometheus page, in base units.
    pub fn expose(&self, page: &mut Exposition) {
        for sample in self.0.iter().filter(|sample| sample.metric.on_page) {
            let metric = &sample.metric;
            let name = match metric.exposed {
                Some(exposed) => Cow::Borrowed(exposed),
                None => crate::declare::exposed_name(&sample.name, metric.unit),
            };
            let scale = metric.unit.scale();
            let labels = &sample.labels;
            match (&sample.value, metric.kind) {
                (Value::Distribution(value), _) => {
                    let summary = SummaryValue {
                        quantiles: QUANTILES
                            .iter()
                            .zip(&value.quantiles)
                            .map(|((quantile, _), at)| (*quantile, *at as f64 / scale))
                            .collect(),
                        sum: value.sum / scale,
                        count: value.count,
                    };
                    page.summary(&name, metric.help, labels, &summary);
                }
                (Value::Shown(_, None), _) => {}
                (value, kind) => {
                    let value = match value {
                        Value::Count(value) => *value as f64,
                        Value::Real(value) | Value::Shown(_, Some(value)) => *value,
                        Value::Distribution(_) | Value::Shown(_, None) => 0.0,
                    } / scale;
                    match kind {
                        MetricKind::Counter => page.counter(&name, metric.help, labels, value),
                        MetricKind::Gauge | MetricKind::Summary => {
                            page.gauge(&name, metric.help, labels, value)
                        }
                    }
                }
            }
        }
    }
}

/// `:backend` and `:classN` (priority) or `:mice`-like (named class) suffixes of a `stats`
/// name; `pool` and `planner` are implied.
fn stat_suffix(labels: &[(&'static str, String)]) -> String {
    let mut suffix = String::new();
    for (name, value) in labels {
        match *name {
            "pool" | "planner" => {}
            "class" if value.bytes().all(|b| b.is_ascii_digit()) => {
                let _ = write!(suffix, ":class{value}");
            }
            _ => {
                let _ = write!(suffix, ":{value}");
            }
        }
    }
    suffix
}

/// A real value in `stats`: integers without a fraction, others with 6 decimals.
pub fn real_text(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value:.6}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::metrics! {
        /// The declarations below.
        list DECLARED;
        /// Requests sent.
        counter REQUESTS = "backend_requests";
        /// Baseline, µs.
        gauge BASELINE = "chisel_batch_baseline_us" in Microseconds;
        /// Share, thousandths.
        gauge SHARE = "chisel_share_permille" in Permille;
        /// Latency in seconds.
        summary LATENCY = "pool_latency_us" in Microseconds;
        /// Bytes read.
        counter READ = "bytes_read" as "read_bytes";
    }

    fn reading() -> Samples {
        let mut samples = Samples::new();
        let backend = vec![
            ("pool", "default".to_string()),
            ("backend", "127.0.0.1:11211".to_string()),
        ];
        samples.count(&REQUESTS, backend.clone(), 7);
        let mut class = backend;
        class.push(("class", "2".to_string()));
        samples.count(&REQUESTS, class, 3);
        samples.count(&BASELINE, vec![("class", "mice".to_string())], 1500);
        samples.count(&SHARE, vec![], 250);
        samples.real_named("pool_epoch_us".to_string(), &SHARE, vec![], 2.5);
        samples.count(&READ, vec![], 9);
        samples.distribution(
            &LATENCY,
            vec![("pool", "default".to_string())],
            Distribution {
                count: 2,
                quantiles: vec![100, 200, 300, 400],
                max: 500,
                sum: 600.0,
            },
        );
        samples
    }

    #[test]
    fn stats_lines_keep_names_units_and_label_suffixes() {
        let mut text = String::new();
        reading().stats_lines(&mut text);
        assert_eq!(
            text,
            "STAT backend_requests:127.0.0.1:11211 7\r\n\
             STAT backend_requests:127.0.0.1:11211:class2 3\r\n\
             STAT chisel_batch_baseline_us:mice 1500\r\n\
             STAT chisel_share_permille 250\r\n\
             STAT pool_epoch_us 2.500000\r\n\
             STAT bytes_read 9\r\n\
             STAT pool_latency_us_count 2\r\n\
             STAT pool_latency_us_p50 100\r\n\
             STAT pool_latency_us_p90 200\r\n\
             STAT pool_latency_us_p99 300\r\n\
             STAT pool_latency_us_p999 400\r\n\
             STAT pool_latency_us_max 500\r\n"
        );
    }

    #[test]
    fn prometheus_text_converts_units_and_names() {
        let mut page = Exposition::new("t");
        reading().expose(&mut page);
        let text = page.finish().expect("valid page");
        for line in [
            "# TYPE t_backend_requests_total counter",
            "t_backend_requests_total{pool=\"default\",backend=\"127.0.0.1:11211\",class=\"2\"} 3",
            "t_chisel_batch_baseline_seconds{class=\"mice\"} 0.0015",
            "t_chisel_share 0.25",
            "t_pool_epoch_seconds 0.0000025",
            "t_read_bytes_total 9",
            "# TYPE t_pool_latency_seconds summary",
            "t_pool_latency_seconds{pool=\"default\",quantile=\"0.99\"} 0.0003",
            "t_pool_latency_seconds_sum{pool=\"default\"} 0.0006",
            "t_pool_latency_seconds_count{pool=\"default\"} 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
    }

    #[test]
    fn each_rendering_skips_the_others_metrics_and_shown_text_stays_as_given() {
        let mut samples = Samples::new();
        let version = Metric::gauge("version", "The version.").stats_only();
        samples.shown(&version, vec![], "1.6.18".to_string(), None);
        let cpu = Metric::counter("rusage_user", "CPU.").exposed_as("cpu_user_seconds");
        samples.shown(&cpu, vec![], "0.500000".to_string(), Some(0.5));
        samples.count(&Metric::gauge("info", "Info.").page_only(), vec![], 1);
        let mut text = String::new();
        samples.stats_lines(&mut text);
        assert_eq!(text, "STAT version 1.6.18\r\nSTAT rusage_user 0.500000\r\n");
        let mut page = Exposition::new("t");
        samples.expose(&mut page);
        let page = page.finish().expect("valid page");
        assert!(!page.contains("version"), "{page}");
        assert!(
            page.lines().any(|l| l == "t_cpu_user_seconds_total 0.5"),
            "{page}"
        );
        assert!(page.lines().any(|l| l == "t_info 1"), "{page}");
    }

    #[test]
    fn declarations_are_checked() {
        assert_eq!(crate::declare::check_declarations(DECLARED), Ok(()));
        let wrong = Metric::gauge("x_us", "x");
        assert!(crate::declare::check_declarations(&[wrong]).is_err());
        assert!(crate::declare::check_declarations(&[REQUESTS, REQUESTS]).is_err());
    }
}
