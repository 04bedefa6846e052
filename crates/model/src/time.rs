//! Time as a value: the model never reads a clock, every duration is a parameter.

use serde::{Deserialize, Serialize};

/// A duration in seconds (f64, may be `INFINITY` for an unstable queue).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Seconds(pub f64);

impl Seconds {
    /// Zero duration.
    pub const ZERO: Seconds = Seconds(0.0);

    /// From microseconds.
    pub fn from_micros(micros: f64) -> Seconds {
        Seconds(micros * 1e-6)
    }

    /// From milliseconds.
    pub fn from_millis(millis: f64) -> Seconds {
        Seconds(millis * 1e-3)
    }

    /// The value in microseconds.
    pub fn as_micros(self) -> f64 {
        self.0 * 1e6
    }

    /// The value in seconds.
    pub fn as_secs(self) -> f64 {
        self.0
    }
}

impl std::ops::Add for Seconds {
    type Output = Seconds;
    fn add(self, other: Seconds) -> Seconds {
        Seconds(self.0 + other.0)
    }
}

impl std::fmt::Display for Seconds {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{:.1} µs", self.as_micros())
    }
}
