//! The runtime's clock: converts `Instant`s into the policy crate's [`Timestamp`].

use std::time::Instant;

use tailtrim_policy::health::Timestamp;

/// A monotonic clock with a fixed origin (process start of the pool).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Clock {
            origin: Instant::now(),
        }
    }

    /// Current time as a policy timestamp.
    pub fn now(&self) -> Timestamp {
        self.at(Instant::now())
    }

    /// `instant` as a policy timestamp.
    pub fn at(&self, instant: Instant) -> Timestamp {
        // In u64 arithmetic (`as_nanos` is u128): a u64 of nanoseconds lasts 584 years.
        let since = instant.saturating_duration_since(self.origin);
        let nanos = since
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(since.subsec_nanos()));
        Timestamp::from_nanos(nanos)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}
