//! Prometheus text exposition (format 0.0.4), built in memory.
//!
//! The rules a scraper and `promtool check metrics` hold a `/metrics` page to are kept here,
//! once, for every crate that serves one:
//!
//! - every family gets one `# HELP` and one `# TYPE` line, and its samples stay together
//!   (samples may be added in any order; they are grouped by family when rendered);
//! - names are `<namespace>_<name>` in snake case; counters get the `_total` suffix here and
//!   only counters may end in it;
//! - units are base units: a name token such as `us`, `ms`, `microseconds` or `kb` is refused
//!   (convert to `seconds` or `bytes` before adding the sample);
//! - summaries carry `quantile` samples plus `_sum` and `_count`; the quantiles of a summary
//!   without observations are `NaN`, as Prometheus' client libraries write them;
//! - label values are escaped; a label set is never repeated within a family.
//!
//! A sample that breaks a rule is not written: [`Exposition::finish`] returns the first
//! [`ExpositionError`] instead of the text, so a naming mistake shows as a failed scrape
//! rather than a page that Prometheus half-reads.
//!
//! ```text
//!   counters, gauges, summaries ──► Exposition::{counter, gauge, summary} ──► finish() ──► text
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

pub use crate::error::ExpositionError;

/// `Content-Type` of the text format this module writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Name tokens that are abbreviated or non-base units (Prometheus wants seconds and bytes).
const REFUSED_UNIT_TOKENS: &[&str] = &[
    "s",
    "ms",
    "us",
    "ns",
    "sec",
    "secs",
    "min",
    "hr",
    "b",
    "kb",
    "mb",
    "gb",
    "kib",
    "mib",
    "gib",
    "milliseconds",
    "microseconds",
    "nanoseconds",
    "minutes",
    "hours",
    "kilobytes",
    "megabytes",
    "gigabytes",
    "permille",
    "percent",
];

/// The type of a metric family (`# TYPE` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// A value that only goes up (or resets to zero when its process restarts or a
    /// `stats reset` clears it).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Quantiles of observations plus their sum and count.
    Summary,
}

impl MetricKind {
    /// The word on the `# TYPE` line.
    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Summary => "summary",
        }
    }
}

/// One summary sample: quantiles (`(quantile, value)`, quantile in 0..=1), the sum of the
/// observations and their count, all in the family's unit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SummaryValue {
    /// `(quantile, value)` pairs.
    pub quantiles: Vec<(f64, f64)>,
    /// Sum of the observed values.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

#[derive(Debug)]
struct Family {
    name: String,
    kind: MetricKind,
    help: String,
    samples: String,
    label_sets: HashSet<String>,
}

/// A `/metrics` page being built. Families appear in the order of their first sample.
#[derive(Debug)]
pub struct Exposition {
    namespace: String,
    families: Vec<Family>,
    by_name: HashMap<String, usize>,
    error: Option<ExpositionError>,
}

impl Exposition {
    /// An empty page whose metric names all start `<namespace>_`.
    pub fn new(namespace: &str) -> Exposition {
        Exposition {
            namespace: namespace.to_string(),
            families: Vec::new(),
            by_name: HashMap::new(),
            error: None,
        }
    }

    /// Adds a counter sample, `<namespace>_<name>_total` (give `name` without `_total`).
    pub fn counter<L: AsRef<str>>(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, L)],
        value: f64,
    ) {
        let full = format!("{}_{name}_total", self.namespace);
        self.add(&full, MetricKind::Counter, help, |family| {
            let labels = label_text(labels, None)?;
            family.insert(&labels)?;
            family.line("", &labels, value);
            Ok(())
        });
    }

    /// Adds a gauge sample, `<namespace>_<name>`.
    pub fn gauge<L: AsRef<str>>(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, L)],
        value: f64,
    ) {
        let full = format!("{}_{name}", self.namespace);
        self.add(&full, MetricKind::Gauge, help, |family| {
            let labels = label_text(labels, None)?;
            family.insert(&labels)?;
            family.line("", &labels, value);
            Ok(())
        });
    }

    /// Adds a summary, `<namespace>_<name>{…,quantile="q"}`, `_sum` and `_count`.
    pub fn summary<L: AsRef<str>>(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, L)],
        summary: &SummaryValue,
    ) {
        let full = format!("{}_{name}", self.namespace);
        self.add(&full, MetricKind::Summary, help, |family| {
            let plain = label_text(labels, None)?;
            family.insert(&plain)?;
            for (quantile, value) in &summary.quantiles {
                let quantile = number_text(*quantile);
                let labels = label_text(labels, Some(("quantile", &quantile)))?;
                let value = if summary.count == 0 { f64::NAN } else { *value };
                family.line("", &labels, value);
            }
            family.line("_sum", &plain, summary.sum);
            family.line("_count", &plain, summary.count as f64);
            Ok(())
        });
    }

    /// The text, or the first rule a sample broke.
    pub fn finish(self) -> Result<String, ExpositionError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let mut text = String::new();
        for family in &self.families {
            let _ = writeln!(text, "# HELP {} {}", family.name, escape_help(&family.help));
            let _ = writeln!(text, "# TYPE {} {}", family.name, family.kind.name());
            text.push_str(&family.samples);
        }
        Ok(text)
    }

    fn add(
        &mut self,
        name: &str,
        kind: MetricKind,
        help: &str,
        write: impl FnOnce(&mut Family) -> Result<(), ExpositionError>,
    ) {
        if self.error.is_some() {
            return;
        }
        if let Err(error) = self.add_checked(name, kind, help, write) {
            self.error = Some(error);
        }
    }

    fn add_checked(
        &mut self,
        name: &str,
        kind: MetricKind,
        help: &str,
        write: impl FnOnce(&mut Family) -> Result<(), ExpositionError>,
    ) -> Result<(), ExpositionError> {
        let index = match self.by_name.get(name) {
            Some(&index) => {
                let family = &self.families[index];
                if family.kind != kind {
                    return Err(ExpositionError::KindConflict {
                        name: name.to_string(),
                        first: family.kind.name(),
                        second: kind.name(),
                    });
                }
                index
            }
            None => {
                check_name(name, kind)?;
                if help.trim().is_empty() {
                    return Err(ExpositionError::MissingHelp(name.to_string()));
                }
                self.families.push(Family {
                    name: name.to_string(),
                    kind,
                    help: help.to_string(),
                    samples: String::new(),
                    label_sets: HashSet::new(),
                });
                self.by_name
                    .insert(name.to_string(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        write(&mut self.families[index])
    }
}

impl Family {
    fn insert(&mut self, labels: &str) -> Result<(), ExpositionError> {
        if self.label_sets.insert(labels.to_string()) {
            Ok(())
        } else {
            Err(ExpositionError::DuplicateSeries {
                name: self.name.clone(),
                labels: labels.to_string(),
            })
        }
    }

    fn line(&mut self, suffix: &str, labels: &str, value: f64) {
        let _ = writeln!(
            self.samples,
            "{}{suffix}{labels} {}",
            self.name,
            number_text(value)
        );
    }
}

/// Checks a full metric name against the naming rules.
fn check_name(name: &str, kind: MetricKind) -> Result<(), ExpositionError> {
    let bad = |rule: &'static str| ExpositionError::BadName {
        name: name.to_string(),
        rule,
    };
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    if !first_ok
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(bad("snake case: a-z, 0-9 and _, not starting with a digit"));
    }
    if name
        .split('_')
        .any(|token| REFUSED_UNIT_TOKENS.contains(&token))
    {
        return Err(bad("base units only (seconds, bytes), no abbreviations"));
    }
    let total = name.ends_with("_total");
    if total != (kind == MetricKind::Counter) {
        return Err(bad("counters, and only counters, end in _total"));
    }
    for reserved in ["_sum", "_count", "_bucket"] {
        if kind != MetricKind::Counter && name.ends_with(reserved) {
            return Err(bad(
                "_sum, _count and _bucket are the suffixes of summaries and histograms",
            ));
        }
    }
    Ok(())
}

/// `{a="x",b="y"}` (empty for no labels), with `extra` last.
fn label_text<L: AsRef<str>>(
    labels: &[(&str, L)],
    extra: Option<(&str, &str)>,
) -> Result<String, ExpositionError> {
    let mut parts = Vec::with_capacity(labels.len() + 1);
    let pairs = labels
        .iter()
        .map(|(name, value)| (*name, value.as_ref()))
        .chain(extra);
    let mut seen = HashSet::new();
    for (name, value) in pairs {
        let mut chars = name.chars();
        let valid = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with("__")
            && !name.chars().any(|c| c.is_ascii_uppercase());
        if !valid || !seen.insert(name) {
            return Err(ExpositionError::BadLabel(name.to_string()));
        }
        if name == "le" || (name == "quantile" && extra.is_none()) {
            return Err(ExpositionError::BadLabel(name.to_string()));
        }
        parts.push(format!("{name}=\"{}\"", escape_label_value(value)));
    }
    if parts.is_empty() {
        Ok(String::new())
    } else {
        Ok(format!("{{{}}}", parts.join(",")))
    }
}

/// A sample value as the text format writes it (`+Inf`, `-Inf`, `NaN` spelled out).
fn number_text(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value == f64::INFINITY {
        "+Inf".to_string()
    } else if value == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        format!("{value}")
    }
}

fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_LABELS: &[(&str, &str)] = &[];

    #[test]
    fn families_are_grouped_with_one_help_and_type() {
        let mut page = Exposition::new("app");
        page.counter("requests", "Requests.", &[("backend", "a")], 1.0);
        page.gauge("up", "Up.", &[("backend", "a")], 1.0);
        page.counter("requests", "Requests.", &[("backend", "b")], 2.0);
        let text = page.finish().expect("valid page");
        assert_eq!(
            text,
            "# HELP app_requests_total Requests.\n\
             # TYPE app_requests_total counter\n\
             app_requests_total{backend=\"a\"} 1\n\
             app_requests_total{backend=\"b\"} 2\n\
             # HELP app_up Up.\n\
             # TYPE app_up gauge\n\
             app_up{backend=\"a\"} 1\n"
        );
    }

    #[test]
    fn summaries_have_quantiles_sum_and_count() {
        let mut page = Exposition::new("app");
        let value = SummaryValue {
            quantiles: vec![(0.5, 0.001), (0.99, 0.25)],
            sum: 1.5,
            count: 3,
        };
        page.summary("latency_seconds", "Latency.", &[("pool", "p")], &value);
        let text = page.finish().expect("valid page");
        assert!(text.contains("# TYPE app_latency_seconds summary\n"));
        assert!(text.contains("app_latency_seconds{pool=\"p\",quantile=\"0.5\"} 0.001\n"));
        assert!(text.contains("app_latency_seconds{pool=\"p\",quantile=\"0.99\"} 0.25\n"));
        assert!(text.contains("app_latency_seconds_sum{pool=\"p\"} 1.5\n"));
        assert!(text.contains("app_latency_seconds_count{pool=\"p\"} 3\n"));
        let mut page = Exposition::new("app");
        let empty = SummaryValue {
            quantiles: vec![(0.5, 0.0)],
            sum: 0.0,
            count: 0,
        };
        page.summary("latency_seconds", "Latency.", NO_LABELS, &empty);
        let text = page.finish().expect("valid page");
        assert!(
            text.contains("app_latency_seconds{quantile=\"0.5\"} NaN\n"),
            "{text}"
        );
        assert!(text.contains("app_latency_seconds_count 0\n"), "{text}");
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut page = Exposition::new("app");
        page.gauge(
            "info",
            "A \\ and\na newline.",
            &[("name", "a\"b\\c\nd")],
            1.0,
        );
        let text = page.finish().expect("valid page");
        assert!(text.contains("# HELP app_info A \\\\ and\\na newline.\n"));
        assert!(text.contains("app_info{name=\"a\\\"b\\\\c\\nd\"} 1\n"));
    }

    #[test]
    fn special_values_are_spelled_out() {
        let mut page = Exposition::new("app");
        page.gauge("a", "A.", &[("x", "1")], f64::INFINITY);
        page.gauge("a", "A.", &[("x", "2")], f64::NEG_INFINITY);
        page.gauge("a", "A.", &[("x", "3")], f64::NAN);
        page.gauge("a", "A.", &[("x", "4")], 1e-7);
        let text = page.finish().expect("valid page");
        assert!(text.contains("app_a{x=\"1\"} +Inf\n"));
        assert!(text.contains("app_a{x=\"2\"} -Inf\n"));
        assert!(text.contains("app_a{x=\"3\"} NaN\n"));
        assert!(text.contains("app_a{x=\"4\"} 0.0000001\n"));
    }

    #[test]
    fn broken_rules_fail_the_page() {
        type AddSamples = fn(&mut Exposition);
        let cases: [(&str, AddSamples); 8] = [
            ("unit", |p| p.gauge("latency_us", "L.", NO_LABELS, 1.0)),
            ("total", |p| p.gauge("hits_total", "H.", NO_LABELS, 1.0)),
            ("case", |p| p.gauge("getHits", "H.", NO_LABELS, 1.0)),
            ("help", |p| p.counter("hits", " ", NO_LABELS, 1.0)),
            ("kind", |p| {
                p.counter("hits", "H.", &[("a", "1")], 1.0);
                p.gauge("hits_total", "H.", &[("a", "2")], 1.0);
            }),
            ("duplicate", |p| {
                p.gauge("up", "U.", &[("a", "1")], 1.0);
                p.gauge("up", "U.", &[("a", "1")], 0.0);
            }),
            ("label", |p| p.gauge("up", "U.", &[("le", "1")], 1.0)),
            ("suffix", |p| p.gauge("items_count", "I.", NO_LABELS, 1.0)),
        ];
        for (case, add) in cases {
            let mut page = Exposition::new("app");
            page.gauge("fine", "Fine.", NO_LABELS, 1.0);
            add(&mut page);
            assert!(page.finish().is_err(), "{case}: accepted");
        }
    }
}
