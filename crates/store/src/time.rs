//! Time as the store sees it: whole Unix seconds passed in by the caller.
//!
//! The store never reads a clock. Every operation takes `now: UnixSecs`, the
//! wall-clock second the caller observed (the server reads
//! `SystemTime::now()` once per event-loop tick; the simulator passes its own
//! virtual time). Expiry is stored as an absolute Unix second.

/// A point in time, in whole seconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixSecs(pub u64);

impl UnixSecs {
    /// Seconds from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: UnixSecs) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// `self + secs`, saturating at `u64::MAX`.
    pub fn plus(self, secs: u64) -> UnixSecs {
        UnixSecs(self.0.saturating_add(secs))
    }
}

/// memcached's boundary between relative and absolute exptimes: 30 days.
pub const RELATIVE_EXPTIME_MAX: i64 = 60 * 60 * 24 * 30;

/// When an item stops being valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Expiry {
    /// The item never expires (protocol exptime 0).
    #[default]
    Never,
    /// The item is expired at and after this second (memcached's rule is
    /// `exptime <= current_time` means expired).
    At(UnixSecs),
}

impl Expiry {
    /// Converts a protocol exptime into a stored expiry, exactly as memcached
    /// does:
    ///
    /// * `0` → never expires;
    /// * negative → already expired;
    /// * `1..=2_592_000` (30 days) → relative: `now + exptime`;
    /// * larger → an absolute Unix time (already expired if it is not after `now`).
    ///
    /// The same conversion applies to meta tokens `T`, `N` and `R`.
    pub fn from_protocol(exptime: i64, now: UnixSecs) -> Expiry {
        if exptime == 0 {
            Expiry::Never
        } else if exptime < 0 {
            Expiry::At(UnixSecs(0))
        } else if exptime <= RELATIVE_EXPTIME_MAX {
            // exptime is positive here, so the cast is lossless.
            Expiry::At(now.plus(exptime.unsigned_abs()))
        } else {
            Expiry::At(UnixSecs(exptime.unsigned_abs()))
        }
    }

    /// True if an item with this expiry is no longer valid at `now`.
    pub fn is_expired(self, now: UnixSecs) -> bool {
        match self {
            Expiry::Never => false,
            Expiry::At(at) => at <= now,
        }
    }

    /// Seconds of life left at `now`, as meta `t` reports it: `None` for an
    /// item that never expires (the protocol prints `-1`), otherwise the
    /// remaining seconds (zero if already due).
    pub fn ttl_remaining(self, now: UnixSecs) -> Option<u64> {
        match self {
            Expiry::Never => None,
            Expiry::At(at) => Some(at.saturating_since(now)),
        }
    }
}
