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
//!    holds a large request (so one large worker exists), `workers` when it holds none. When
//!    the large workers help the small ones (`large_workers_help`), the large side rounds up
//!    instead: `small_workers = workers − ⌈large share × workers⌉`, clamped the same way
//!    ([`small_workers_for_share_helped`]).
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

pub mod class;
pub mod controller;
pub mod driver;
pub mod error;
pub mod histogram;
pub mod packed;

pub use class::{classify, packet_cost, Epoch, SizeClass, PACKET_BYTES};

pub use controller::{
    small_workers_for_share, small_workers_for_share_helped, Decision, DecisionInputs,
    DecisionReason, HysteresisConfig, RoleBusy, SizeAwareConfig, SizeAwareController, SplitBy,
    DEFAULT_HYSTERESIS_EPOCHS, DEFAULT_INITIAL_THRESHOLD_BYTES, DEFAULT_PERCENTILE,
    DEFAULT_SHARE_MARGIN, DEFAULT_WINDOW_EPOCHS, DEFAULT_WORKERS,
};
pub use driver::EpochDriver;
pub use error::SizeAwareError;
pub use histogram::{CostSplit, SizeHistogram, SizeWindow};
pub use packed::PackedDecision;
