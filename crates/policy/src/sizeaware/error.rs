//! Why a size-aware configuration or a dispatch policy name was rejected.

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
    #[error("unknown dispatch policy {name:?} (known: {known})", known = known.join(", "))]
    UnknownDispatchPolicy {
        /// The name given.
        name: String,
        /// The names known.
        known: &'static [&'static str],
    },
}
