//! Metrics of the server and the proxy, declared once and rendered twice: as memcached
//! `stats` lines and as Prometheus text. No I/O happens here.
//!
//! ```text
//!   declare::Metric (const: name, help, counter/gauge/summary, unit)
//!        │  read at request time with labels and a value
//!        ▼
//!   samples::Samples ──► stats_lines ──► STAT <name><:label…> <value>\r\n  (a `stats` reply)
//!        └────────────► expose ──► exposition::Exposition ──► Prometheus text (format 0.0.4)
//! ```
//!
//! Both renderings come from the same declarations, so a metric cannot be in one and
//! missing from the other, and its help, type and unit are written once. The exposition
//! checks Prometheus' naming rules when the page is built ([`exposition`]).
//!
//! The well-kept crates were weighed first: `metrics` (a global recorder with its own
//! exporter) and `prometheus-client` (OpenMetrics text, `# EOF`, `# UNIT`) both own the
//! storage of the values and the text they write, while the server sums per-worker atomic
//! counters that only their worker touches and must answer memcached's `stats` byte for
//! byte; neither renders `stats` lines. This crate therefore only declares and renders; the
//! values stay where they are counted.

pub mod declare;
pub mod error;
pub mod exposition;
pub mod samples;

pub use declare::{Metric, Unit};
pub use error::ExpositionError;
pub use exposition::{Exposition, MetricKind};
pub use samples::{Distribution, Labels, Samples};
