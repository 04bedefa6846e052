//! Metrics of the server and the proxy, declared once and rendered twice: as memcached
//! `stats` lines and as Prometheus text. No I/O happens here.
//!
//! ```text
//!   exposition::Exposition ──► Prometheus text (format 0.0.4) for an admin `/metrics`
//! ```

pub mod error;
pub mod exposition;

pub use error::ExpositionError;
