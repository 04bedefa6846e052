//! Simulated time: a nanosecond count since the start of a run. Nothing here reads a clock.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use serde::{Deserialize, Serialize};

/// A point in simulated time (or a span), in nanoseconds. Ordered, copyable, saturating.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Nanos(pub u64);

impl Nanos {
    /// Time zero, the start of a run.
    pub const ZERO: Nanos = Nanos(0);

    /// `micros` microseconds.
    pub const fn from_micros(micros: u64) -> Nanos {
        Nanos(micros.saturating_mul(1_000))
    }

    /// `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Nanos {
        Nanos(millis.saturating_mul(1_000_000))
    }

    /// Rounds a non-negative number of nanoseconds (negative and NaN become 0).
    pub fn from_f64(nanos: f64) -> Nanos {
        if nanos.is_finite() && nanos > 0.0 {
            Nanos(nanos.round() as u64)
        } else {
            Nanos(0)
        }
    }

    /// As seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// As microseconds.
    pub fn as_micros_f64(self) -> f64 {
        self.0 as f64 / 1e3
    }

    /// `self − earlier`, or zero if `earlier` is later.
    pub const fn since(self, earlier: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add for Nanos {
    type Output = Nanos;
    fn add(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(other.0))
    }
}

impl AddAssign for Nanos {
    fn add_assign(&mut self, other: Nanos) {
        *self = *self + other;
    }
}

impl Sub for Nanos {
    type Output = Nanos;
    fn sub(self, other: Nanos) -> Nanos {
        self.since(other)
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} ns", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Nanos;

    #[test]
    fn arithmetic_saturates_and_converts() {
        assert_eq!(Nanos(5) - Nanos(9), Nanos::ZERO);
        assert_eq!(Nanos(u64::MAX) + Nanos(1), Nanos(u64::MAX));
        assert_eq!(Nanos::from_micros(3), Nanos(3_000));
        assert_eq!(Nanos::from_millis(2).as_micros_f64(), 2_000.0);
        assert_eq!(Nanos::from_f64(-4.0), Nanos::ZERO);
        assert_eq!(Nanos::from_f64(2.6), Nanos(3));
    }
}
