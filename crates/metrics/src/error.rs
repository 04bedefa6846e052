//! The errors of this crate.

use thiserror::Error;

/// A sample that breaks a rule of the Prometheus text exposition
/// ([`crate::exposition::Exposition`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExpositionError {
    /// The metric name breaks a naming rule.
    #[error("metric name {name}: {rule}")]
    BadName {
        /// The full metric name.
        name: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A family without help text.
    #[error("metric {0} has no help text")]
    MissingHelp(String),
    /// One name added as two kinds.
    #[error("metric {name} added as a {first} and as a {second}")]
    KindConflict {
        /// The full metric name.
        name: String,
        /// The kind it was first added as.
        first: &'static str,
        /// The other kind.
        second: &'static str,
    },
    /// The same label set twice in one family.
    #[error("metric {name}{labels} added twice")]
    DuplicateSeries {
        /// The full metric name.
        name: String,
        /// The repeated label set as written.
        labels: String,
    },
    /// A label name that is invalid, repeated or reserved (`le`, `quantile`).
    #[error("bad label name {0:?}")]
    BadLabel(String),
}
