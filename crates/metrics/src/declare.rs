//! Metric declarations: a name, a help line, a type and a unit, written once as a `const`.
//!
//! ```text
//!   pub const PROXY_REQUESTS: Metric = Metric::counter("proxy_requests", "Client requests parsed.");
//! ```
//!
//! The name is the one `stats` shows. `/metrics` shows [`Metric::exposed_name`]: the same
//! name with its unit converted to a base unit (`_us`, `_ns` and `_nanos` become `_seconds`,
//! `_permille` is dropped; [`Unit`]), unless the declaration gives another with
//! [`Metric::exposed_as`]. The exposition adds the namespace and a counter's `_total`.
//! A metric that only one rendering shows is declared so ([`Metric::stats_only`], e.g.
//! memcached's constant fields; [`Metric::page_only`], e.g. an info gauge): its samples are
//! skipped by the other.

use std::borrow::Cow;

use crate::exposition::MetricKind;

/// The unit a metric's value is kept in. `stats` shows the value as kept; `/metrics` in the
/// base unit Prometheus wants (the value divided by [`Unit::scale`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A count, bytes, seconds or a ratio: shown as kept.
    Base,
    /// Microseconds (name ends `_us`): seconds on `/metrics`.
    Microseconds,
    /// Nanoseconds (name ends `_ns` or `_nanos`): seconds on `/metrics`.
    Nanoseconds,
    /// Thousandths (name ends `_permille`): a plain fraction on `/metrics`.
    Permille,
}

/// The name suffixes of each unit and what replaces them on `/metrics`.
const UNIT_SUFFIXES: [(&str, &str, Unit); 4] = [
    ("_us", "_seconds", Unit::Microseconds),
    ("_ns", "_seconds", Unit::Nanoseconds),
    ("_nanos", "_seconds", Unit::Nanoseconds),
    ("_permille", "", Unit::Permille),
];

impl Unit {
    /// The unit a name ends in (`Base` when it ends in none of the kept units).
    pub fn of_name(name: &str) -> Unit {
        UNIT_SUFFIXES
            .iter()
            .find(|(suffix, _, _)| name.ends_with(suffix))
            .map_or(Unit::Base, |(_, _, unit)| *unit)
    }

    /// What a kept value is divided by to get the base unit.
    pub fn scale(self) -> f64 {
        match self {
            Unit::Base => 1.0,
            Unit::Microseconds => 1e6,
            Unit::Nanoseconds => 1e9,
            Unit::Permille => 1e3,
        }
    }
}

/// One declared metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// The name `stats` shows (without labels).
    pub name: &'static str,
    /// The `# HELP` line.
    pub help: &'static str,
    /// Counter, gauge or summary (a latency histogram).
    pub kind: MetricKind,
    /// The unit the value is kept in.
    pub unit: Unit,
    /// The `/metrics` name when it is not derived from `name`.
    pub exposed: Option<&'static str>,
    /// Whether `stats` shows it.
    pub in_stats: bool,
    /// Whether `/metrics` shows it.
    pub on_page: bool,
}

impl Metric {
    /// A value that only goes up (until a restart or `stats reset`).
    pub const fn counter(name: &'static str, help: &'static str) -> Metric {
        Metric::declare(name, help, MetricKind::Counter)
    }

    /// A value that goes up and down.
    pub const fn gauge(name: &'static str, help: &'static str) -> Metric {
        Metric::declare(name, help, MetricKind::Gauge)
    }

    /// A latency histogram: quantiles, count and maximum in `stats`, a summary on `/metrics`.
    pub const fn summary(name: &'static str, help: &'static str) -> Metric {
        Metric::declare(name, help, MetricKind::Summary)
    }

    const fn declare(name: &'static str, help: &'static str, kind: MetricKind) -> Metric {
        Metric {
            name,
            help,
            kind,
            unit: Unit::Base,
            exposed: None,
            in_stats: true,
            on_page: true,
        }
    }

    /// The same metric kept in `unit` (its name must end in that unit's suffix).
    pub const fn in_unit(self, unit: Unit) -> Metric {
        Metric { unit, ..self }
    }

    /// The same metric under another `/metrics` name (without namespace or `_total`).
    pub const fn exposed_as(self, name: &'static str) -> Metric {
        Metric {
            exposed: Some(name),
            ..self
        }
    }

    /// The same metric shown by `stats` only (not on `/metrics`).
    pub const fn stats_only(self) -> Metric {
        Metric {
            on_page: false,
            ..self
        }
    }

    /// The same metric shown on `/metrics` only (not by `stats`).
    pub const fn page_only(self) -> Metric {
        Metric {
            in_stats: false,
            ..self
        }
    }

    /// The `/metrics` name, without the namespace and a counter's `_total`.
    pub fn exposed_name(&self) -> Cow<'static, str> {
        match self.exposed {
            Some(name) => Cow::Borrowed(name),
            None => exposed_name(self.name, self.unit),
        }
    }
}

/// The `/metrics` name of a `stats` name kept in `unit`: the unit's suffix replaced by the
/// base unit's.
pub fn exposed_name(name: &str, unit: Unit) -> Cow<'static, str> {
    let replaced = UNIT_SUFFIXES
        .iter()
        .filter(|(_, _, suffix_unit)| *suffix_unit == unit)
        .find_map(|(suffix, base, _)| {
            name.strip_suffix(suffix)
                .map(|stem| format!("{stem}{base}"))
        });
    Cow::Owned(replaced.unwrap_or_else(|| name.to_string()))
}

/// Checks a set of declarations: each name ends in its declared unit (and only then), and
/// no name is declared twice. Returns the first offence; for a crate's unit tests.
pub fn check_declarations(metrics: &[Metric]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for metric in metrics {
        if !seen.insert((metric.name, metric.kind == MetricKind::Summary)) {
            return Err(format!("{} is declared twice", metric.name));
        }
        if Unit::of_name(metric.name) != metric.unit {
            return Err(format!(
                "{} is declared in {:?} but its name says {:?}",
                metric.name,
                metric.unit,
                Unit::of_name(metric.name)
            ));
        }
    }
    Ok(())
}

/// Declares metrics as `const` [`Metric`]s whose help is their doc comment (one line), and
/// a list of them all (for [`check_declarations`] and for documentation):
///
/// ```
/// tailtrim_metrics::metrics! {
///     /// Every declared metric.
///     pub list DECLARED;
///     /// Client requests parsed.
///     pub counter PROXY_REQUESTS = "proxy_requests";
///     /// Mean latency measured in the last epoch, µs.
///     pub gauge OBSERVED_MEAN = "observed_mean_us" in Microseconds;
///     /// Bytes read from clients.
///     pub counter BYTES_READ = "bytes_read" as "server_read_bytes";
///     /// The process id.
///     pub gauge PID = "pid", stats_only;
/// }
/// assert_eq!(PROXY_REQUESTS.help, "Client requests parsed.");
/// assert_eq!(OBSERVED_MEAN.exposed_name(), "observed_mean_seconds");
/// assert_eq!(BYTES_READ.exposed_name(), "server_read_bytes");
/// assert!(PID.in_stats && !PID.on_page);
/// assert_eq!(DECLARED.len(), 4);
/// ```
///
/// The kinds are `counter`, `gauge` and `summary`; `in <Unit>` gives the unit the value is
/// kept in ([`Unit`]), `as "<name>"` another `/metrics` name, a last `, stats_only` or
/// `, page_only` the one rendering that shows it ([`Metric::stats_only`], [`Metric::page_only`]).
#[macro_export]
macro_rules! metrics {
    (
        $(#[doc = $list_doc:literal])+
        $list_vis:vis list $list:ident;
        $(
            #[doc = $help:literal]
            $vis:vis $kind:ident $const_name:ident = $name:literal
            $(in $unit:ident)? $(as $exposed:literal)? $(, $shown_in:ident)?;
        )*
    ) => {
        $(
            #[doc = $help]
            $vis const $const_name: $crate::Metric =
                $crate::Metric::$kind($name, $help.trim_ascii())
                $(.in_unit($crate::Unit::$unit))?
                $(.exposed_as($exposed))?
                $(.$shown_in())?;
        )*
        $(#[doc = $list_doc])+
        $list_vis const $list: &[$crate::Metric] = &[$($const_name),*];
    };
}
