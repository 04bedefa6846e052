//! Size-aware sharding ("Minos", Didona & Zwaenepoel) as pure functions: no I/O, no clock.
//! Epochs are a parameter ([`Epoch`]).
//!
//! # Where the server (and the simulator) call it
//!
//! ```text
//!  small worker 0 ─┐ parse, look up, learn size ─► decision.class_of(size, workers)
//!  small worker 1 ─┤      │ record(size, wire bytes)        │ Small: serve in place
//!       ...        │      ▼  into a local SizeHistogram     │ Large: the large queue, taken by
//!                  │  (O(1), one per worker, this epoch)    ▼ the workers that takes_large_queue
//!                  │
//!    epoch tick ───┴─► controller thread: merge the workers' histograms (and busy time)
//!   (caller's clock)                      decision = driver.tick(&merged, busy)   (EpochDriver)
//!                                               │
//!                                               ▼ published to the workers: one PackedDecision,
//!                                threshold_bytes, small_workers = [0, s), large_workers = [s, n)
//! ```
//!
//! Each worker owns its [`SizeHistogram`] (no sharing on the request path). At the tick it
//! hands the histogram over ([`SizeHistogram::take`], e.g. through a channel) tagged with the
//! epoch it was filled in; a late hand-off still lands in its own epoch as long as that epoch
//! is inside the window ([`SizeWindow::absorb_epoch`]). A worker may instead keep a whole
//! [`SizeWindow`] and the controller [`SizeWindow::merge`] it. A GET miss accesses no item and
//! is not recorded.
//!
//! # The algorithm
//!
//! 1. **Sizes.** Every request whose size is known (GET: the item's value length after lookup;
//!    SET: the length on the command line) is recorded in a [`SizeHistogram`]: a log-linear
//!    histogram with exact 8-byte buckets below 1 KiB and 64 buckets per power of two above,
//!    so a percentile is over-reported by at most `max(7 bytes, value / 64)`. Each bucket also
//!    sums the request's **cost**, [`packet_cost`]`(wire bytes)` = ⌈bytes / 1500⌉ packets, at
//!    least 1 (reply bytes for a GET, request bytes for a SET).
//! 2. **Window.** The controller keeps a [`SizeWindow`]: a ring of per-epoch histograms over the
//!    last `W` epochs (default [`DEFAULT_WINDOW_EPOCHS`]); older epochs fall out.
//! 3. **Threshold.** `threshold_bytes` = the size at the configured percentile (default
//!    [`DEFAULT_PERCENTILE`]) of the sizes in the window. A request is *large* iff
//!    `size > threshold_bytes` ([`classify`]).
//! 4. **Split.** `small share` = packets of requests `≤ threshold` / all packets in the window
//!    (or, with [`SplitBy::Busy`], the small workers' share of the busy time all workers
//!    measured over the window: see [`controller`]);
//!    `small_workers = ⌈small share × workers⌉`, clamped to `[1, workers − 1]` while the window
//!    holds a large request (so one large worker exists), `workers` when it holds none.
//!    Workers `[0, small_workers)` are small, the rest large.
//! 5. **Hysteresis** (see [`HysteresisConfig`]): the split changes only when the candidate has
//!    differed from the current split for `H` consecutive epochs, or the small share moved more
//!    than a margin away from the share the current split was adopted at, or a large worker is
//!    needed and there is none. The threshold follows the window every epoch.
//! 6. **Overrides** for experiments: a fixed threshold and/or a fixed split. An empty window
//!    keeps the previous decision. Every [`Decision`] carries the [`DecisionInputs`] it was made
//!    from, for `stats sizeaware` ([`Decision::stats`]).
//!
//! With a single worker there is nothing to split: the worker is small, `large_workers == 0`,
//! and [`Decision::class_of`] says every request is served in place (the threshold is still
//! measured and reported).
//!
//! The baselines' decisions (early binding, stealing, late binding) and the one policy enum
//! are in [`crate::dispatch`].

pub mod controller;
pub mod driver;
pub mod histogram;
pub mod packed;

pub use controller::{
    small_workers_for_share, Decision, DecisionInputs, DecisionReason, HysteresisConfig, RoleBusy,
    SizeAwareConfig, SizeAwareController, SplitBy, DEFAULT_HYSTERESIS_EPOCHS,
    DEFAULT_INITIAL_THRESHOLD_BYTES, DEFAULT_PERCENTILE, DEFAULT_SHARE_MARGIN,
    DEFAULT_WINDOW_EPOCHS, DEFAULT_WORKERS,
};
pub use driver::EpochDriver;
pub use histogram::{CostSplit, SizeHistogram, SizeWindow};
pub use packed::PackedDecision;

/// Bytes of payload one packet carries in the cost model (an Ethernet MTU).
pub const PACKET_BYTES: u64 = 1500;

/// An epoch number: the controller's unit of time. The caller's clock decides when an epoch
/// ends (the server's default is one second); the policy only compares epoch numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The epoch after this one (saturating).
    pub const fn next(self) -> Epoch {
        Epoch(self.0.saturating_add(1))
    }
}

/// The size class of a request under a threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SizeClass {
    /// `size <= threshold`: served in place by the small worker that parsed it.
    Small,
    /// `size > threshold`: handed off to a large worker.
    Large,
}

impl SizeClass {
    /// `"small"` or `"large"`, for stats names.
    pub const fn as_str(self) -> &'static str {
        match self {
            SizeClass::Small => "small",
            SizeClass::Large => "large",
        }
    }
}

/// Classifies a request of `size_bytes` against `threshold_bytes`: large iff strictly above.
pub const fn classify(size_bytes: u64, threshold_bytes: u64) -> SizeClass {
    if size_bytes > threshold_bytes {
        SizeClass::Large
    } else {
        SizeClass::Small
    }
}

/// Cost of a request that moves `wire_bytes` bytes: ⌈wire_bytes / 1500⌉ packets, at least 1
/// (an empty reply still costs a packet).
pub const fn packet_cost(wire_bytes: u64) -> u64 {
    if wire_bytes == 0 {
        1
    } else {
        wire_bytes.div_ceil(PACKET_BYTES)
    }
}

/// Why a size-aware configuration (or a dispatch policy name) was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SizeAwareError {
    /// The worker count is 0.
    #[error("workers = 0; size-aware sharding needs at least one worker")]
    NoWorkers,
    /// The percentile is not a number in `0..=100`.
    #[error("percentile {0} must be a number between 0 and 100")]
    BadPercentile(f64),
    /// The sliding window holds no epoch.
    #[error("the size window must span at least one epoch (got 0)")]
    ZeroWindow,
    /// `consecutive_epochs` of the hysteresis is 0 (1 means "change at once").
    #[error("hysteresis consecutive_epochs must be at least 1 (1 = no hysteresis), got 0")]
    ZeroHysteresisEpochs,
    /// The hysteresis share margin is negative or not a number.
    #[error("hysteresis share margin {0} must be a number >= 0")]
    BadShareMargin(f64),
    /// A fixed split outside `1..=workers`.
    #[error(
        "a fixed split of {small} small workers must be between 1 and the worker count ({workers})"
    )]
    BadFixedSplit {
        /// Requested small workers.
        small: usize,
        /// Total workers.
        workers: usize,
    },
    /// An unknown `split_by` name.
    #[error("unknown split rule {0:?} (known: packets, busy)")]
    UnknownSplitBy(String),
    /// An unknown `--dispatch` name.
    #[error("unknown dispatch policy {0:?} (known: {known})", known = crate::dispatch::DispatchPolicy::NAMES.join(", "))]
    UnknownDispatchPolicy(String),
}

#[cfg(test)]
mod tests {
    use super::{classify, packet_cost, Epoch, SizeClass, PACKET_BYTES};

    #[test]
    fn packet_cost_rounds_up_and_is_at_least_one() {
        assert_eq!(packet_cost(0), 1);
        assert_eq!(packet_cost(1), 1);
        assert_eq!(packet_cost(PACKET_BYTES), 1);
        assert_eq!(packet_cost(PACKET_BYTES + 1), 2);
        assert_eq!(packet_cost(1024 * 1024), 700); // 1 MiB / 1500 = 699.05
        assert_eq!(packet_cost(u64::MAX), u64::MAX / PACKET_BYTES + 1);
        for bytes in [1u64, 1499, 1500, 1501, 2999, 3000, 3001, 100_000] {
            let cost = packet_cost(bytes);
            assert!(cost * PACKET_BYTES >= bytes && (cost - 1) * PACKET_BYTES < bytes);
        }
    }

    #[test]
    fn classify_is_strictly_above_threshold() {
        assert_eq!(classify(100, 100), SizeClass::Small);
        assert_eq!(classify(101, 100), SizeClass::Large);
        assert_eq!(classify(0, 0), SizeClass::Small);
        assert_eq!(classify(u64::MAX, u64::MAX), SizeClass::Small);
        assert_eq!(SizeClass::Large.as_str(), "large");
    }

    #[test]
    fn epoch_next_saturates() {
        assert_eq!(Epoch(3).next(), Epoch(4));
        assert_eq!(Epoch(u64::MAX).next(), Epoch(u64::MAX));
    }
}
