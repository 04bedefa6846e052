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
        let nanos = instant.saturating_duration_since(self.origin).as_nanos();
        Timestamp::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}
