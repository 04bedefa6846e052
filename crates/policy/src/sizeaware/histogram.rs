//! The histogram of accessed sizes ([`SizeHistogram`]) and its sliding window over epochs
//! ([`SizeWindow`]).
//!
//! Buckets are log-linear, like HdrHistogram's:
//!
//! ```text
//!  size:   0 ............ 1023 | 1024 ... 2047 | 2048 ... 4095 | ... | 2^29 ... 2^30-1 | ≥ 2^30
//!  bucket: 128 × 8 bytes       | 64 × 16 bytes | 64 × 32 bytes | ... | 64 × 8 MiB      | 1 (overflow)
//! ```
//!
//! A percentile is reported as the largest size its bucket can hold, capped at the largest size
//! recorded, so it is never below the true value and over-reports by at most
//! [`max_overestimate`]`(value)` = `max(7, value / 64)` bytes (below 1 GiB). Every bucket
//! counts requests and sums their [`packet_cost`]s, so the cost split at a threshold that is a
//! bucket boundary (every measured threshold is one) is exact.

use std::num::NonZeroUsize;

use super::class::{packet_cost, Epoch};
use super::error::SizeAwareError;

/// Sizes below this are bucketed linearly.
pub const LINEAR_LIMIT_BYTES: u64 = 1024;
/// Width of a linear bucket.
pub const LINEAR_STEP_BYTES: u64 = 8;
/// Buckets per power of two above [`LINEAR_LIMIT_BYTES`]; the relative error is its inverse.
pub const SUB_BUCKETS_PER_OCTAVE: u64 = 64;
/// Sizes at or above this share one overflow bucket (reported via the recorded maximum).
pub const TRACKED_LIMIT_BYTES: u64 = 1 << 30;

const LINEAR_BUCKETS: usize = (LINEAR_LIMIT_BYTES / LINEAR_STEP_BYTES) as usize;
const LINEAR_STEP_BITS: u32 = LINEAR_STEP_BYTES.trailing_zeros();
const SUB_BUCKET_BITS: u32 = SUB_BUCKETS_PER_OCTAVE.trailing_zeros();
const FIRST_LOG_OCTAVE: u32 = LINEAR_LIMIT_BYTES.trailing_zeros();
const LOG_OCTAVES: u32 = TRACKED_LIMIT_BYTES.trailing_zeros() - FIRST_LOG_OCTAVE;

/// Number of buckets of a [`SizeHistogram`] (the last one is the overflow bucket).
pub const BUCKET_COUNT: usize =
    LINEAR_BUCKETS + (LOG_OCTAVES as usize) * (SUB_BUCKETS_PER_OCTAVE as usize) + 1;

/// The bucket a size falls in. O(1): a compare, a leading-zero count and two shifts.
pub const fn bucket_index(size_bytes: u64) -> usize {
    if size_bytes < LINEAR_LIMIT_BYTES {
        (size_bytes >> LINEAR_STEP_BITS) as usize
    } else if size_bytes >= TRACKED_LIMIT_BYTES {
        BUCKET_COUNT - 1
    } else {
        let octave = 63 - size_bytes.leading_zeros();
        let sub = (size_bytes >> (octave - SUB_BUCKET_BITS)) & (SUB_BUCKETS_PER_OCTAVE - 1);
        LINEAR_BUCKETS
            + ((octave - FIRST_LOG_OCTAVE) as usize) * (SUB_BUCKETS_PER_OCTAVE as usize)
            + sub as usize
    }
}

/// The smallest and the largest size (both inclusive) that bucket `index` holds. Indexes past
/// the last bucket are treated as the overflow bucket.
pub const fn bucket_bounds(index: usize) -> (u64, u64) {
    if index < LINEAR_BUCKETS {
        let lower = (index as u64) << LINEAR_STEP_BITS;
        (lower, lower + LINEAR_STEP_BYTES - 1)
    } else if index >= BUCKET_COUNT - 1 {
        (TRACKED_LIMIT_BYTES, u64::MAX)
    } else {
        let offset = (index - LINEAR_BUCKETS) as u64;
        let octave = FIRST_LOG_OCTAVE + (offset / SUB_BUCKETS_PER_OCTAVE) as u32;
        let sub = offset % SUB_BUCKETS_PER_OCTAVE;
        let width = 1u64 << (octave - SUB_BUCKET_BITS);
        let lower = (1u64 << octave) + sub * width;
        (lower, lower + width - 1)
    }
}

/// The most a percentile of [`SizeHistogram`] can exceed the true value `value_bytes`:
/// 7 bytes below 1 KiB, `value / 64` up to 1 GiB; above 1 GiB the report is capped by the
/// recorded maximum only, so the bound is `u64::MAX - value`.
pub const fn max_overestimate(value_bytes: u64) -> u64 {
    let (_, upper) = bucket_bounds(bucket_index(value_bytes));
    upper - value_bytes
}

/// Nearest-rank position (1-based) of percentile `p` among `count` samples:
/// `⌈p / 100 × count⌉` clamped to `1..=count`. `p` is clamped to `0..=100`; NaN counts as 100.
pub fn percentile_rank(percentile: f64, count: u64) -> u64 {
    let p = if percentile.is_nan() {
        100.0
    } else {
        percentile.clamp(0.0, 100.0)
    };
    let rank = (p / 100.0 * count as f64).ceil();
    // `as` saturates for floats; the clamp keeps a rounding overshoot inside the population.
    (rank as u64).clamp(1, count.max(1))
}

/// Requests and packets on each side of a threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CostSplit {
    /// Requests with `size <= threshold`.
    pub small_requests: u64,
    /// Requests with `size > threshold`.
    pub large_requests: u64,
    /// Packets of the small requests.
    pub small_packets: u64,
    /// Packets of the large requests.
    pub large_packets: u64,
}

impl CostSplit {
    /// All packets.
    pub const fn total_packets(&self) -> u64 {
        self.small_packets + self.large_packets
    }

    /// Small packets / all packets, `None` when there are none.
    pub fn small_share(&self) -> Option<f64> {
        let total = self.total_packets();
        (total > 0).then(|| self.small_packets as f64 / total as f64)
    }
}

/// One bucket's counts, side by side so a record touches one cache line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct BucketTally {
    requests: u64,
    packets: u64,
}

/// A histogram of request sizes with the packet cost summed per bucket. One epoch's worth on a
/// worker, or a whole window's worth from [`SizeWindow::aggregate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeHistogram {
    buckets: Box<[BucketTally]>,
    total_requests: u64,
    total_packets: u64,
    max_size: u64,
}

impl Default for SizeHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl SizeHistogram {
    /// An empty histogram (about 22 KiB).
    pub fn new() -> Self {
        SizeHistogram {
            buckets: vec![BucketTally::default(); BUCKET_COUNT].into_boxed_slice(),
            total_requests: 0,
            total_packets: 0,
            max_size: 0,
        }
    }

    /// Records one request: `size_bytes` places it (the item size: value length of a GET hit,
    /// declared length of a SET), `wire_bytes` prices it ([`packet_cost`]: reply bytes for a
    /// GET, request bytes for a SET). O(1).
    pub fn record(&mut self, size_bytes: u64, wire_bytes: u64) {
        self.record_many(size_bytes, wire_bytes, 1);
    }

    /// Records a request priced by its size alone (`wire_bytes == size_bytes`).
    pub fn record_size(&mut self, size_bytes: u64) {
        self.record_many(size_bytes, size_bytes, 1);
    }

    /// Records `count` identical requests at once (tests, simulators). O(1).
    pub fn record_many(&mut self, size_bytes: u64, wire_bytes: u64, count: u64) {
        if count == 0 {
            return;
        }
        let index = bucket_index(size_bytes);
        let packets = packet_cost(wire_bytes).saturating_mul(count);
        // `index < BUCKET_COUNT` by construction of `bucket_index`.
        if let Some(bucket) = self.buckets.get_mut(index) {
            bucket.requests = bucket.requests.saturating_add(count);
            bucket.packets = bucket.packets.saturating_add(packets);
        }
        self.total_requests = self.total_requests.saturating_add(count);
        self.total_packets = self.total_packets.saturating_add(packets);
        self.max_size = self.max_size.max(size_bytes);
    }

    /// Adds every count of `other` into `self` (a worker's epoch into the controller's).
    pub fn merge(&mut self, other: &SizeHistogram) {
        if other.is_empty() {
            return;
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            mine.requests = mine.requests.saturating_add(theirs.requests);
            mine.packets = mine.packets.saturating_add(theirs.packets);
        }
        self.total_requests = self.total_requests.saturating_add(other.total_requests);
        self.total_packets = self.total_packets.saturating_add(other.total_packets);
        self.max_size = self.max_size.max(other.max_size);
    }

    /// Forgets everything (keeps the allocation).
    pub fn clear(&mut self) {
        if self.is_empty() {
            return;
        }
        self.buckets.fill(BucketTally::default());
        self.total_requests = 0;
        self.total_packets = 0;
        self.max_size = 0;
    }

    /// Returns the counts and leaves `self` empty (a worker handing its epoch to the controller).
    pub fn take(&mut self) -> SizeHistogram {
        std::mem::take(self)
    }

    /// No request recorded.
    pub const fn is_empty(&self) -> bool {
        self.total_requests == 0
    }

    /// Requests recorded.
    pub const fn requests(&self) -> u64 {
        self.total_requests
    }

    /// Packets recorded (sum of [`packet_cost`]s).
    pub const fn packets(&self) -> u64 {
        self.total_packets
    }

    /// The largest size recorded (0 when empty).
    pub const fn max_size(&self) -> u64 {
        self.max_size
    }

    /// The size at percentile `p` (0..=100, nearest rank, see [`percentile_rank`]): the largest
    /// size of the bucket holding that rank, capped at the largest size recorded. `None` when
    /// empty. `p = 100` is the exact maximum.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        let rank = percentile_rank(p, self.total_requests);
        let mut seen = 0u64;
        for (index, count) in self
            .buckets
            .iter()
            .map(|bucket| &bucket.requests)
            .enumerate()
        {
            seen = seen.saturating_add(*count);
            if *count > 0 && seen >= rank {
                let (_, upper) = bucket_bounds(index);
                return Some(upper.min(self.max_size));
            }
        }
        Some(self.max_size)
    }

    /// Requests and packets at or below / above `threshold_bytes`. Exact when the threshold is
    /// the top of a bucket or the recorded maximum (every [`percentile`](Self::percentile) is);
    /// a bucket a fixed threshold cuts through is split in proportion to the part of its range
    /// at or below the threshold.
    pub fn split_at(&self, threshold_bytes: u64) -> CostSplit {
        let mut split = CostSplit::default();
        for (index, bucket) in self.buckets.iter().enumerate() {
            let BucketTally { requests, packets } = *bucket;
            if requests == 0 {
                continue;
            }
            let (lower, upper) = bucket_bounds(index);
            let upper = upper.min(self.max_size);
            let (small_requests, small_packets) = if threshold_bytes >= upper {
                (requests, packets)
            } else if threshold_bytes < lower {
                (0, 0)
            } else {
                let below = u128::from(threshold_bytes - lower) + 1;
                let width = u128::from(upper - lower) + 1;
                let part = |value: u64| (u128::from(value) * below / width) as u64;
                (part(requests), part(packets))
            };
            split.small_requests += small_requests;
            split.small_packets += small_packets;
            split.large_requests += requests - small_requests;
            split.large_packets += packets - small_packets;
        }
        split
    }
}

/// The sliding window: one [`SizeHistogram`] per epoch for the last `W` epochs, in a ring.
///
/// The window ends at [`current_epoch`](Self::current_epoch) and covers the epochs
/// `current − W + 1 ..= current`; moving the current epoch forward drops older ones.
#[derive(Debug, Clone)]
pub struct SizeWindow {
    slots: Box<[EpochSlot]>,
    current: Epoch,
    current_slot: usize,
}

#[derive(Debug, Clone)]
struct EpochSlot {
    epoch: Option<Epoch>,
    histogram: SizeHistogram,
}

impl SizeWindow {
    /// A window over `window_epochs` epochs, starting at epoch 0.
    pub fn new(window_epochs: usize) -> Result<Self, SizeAwareError> {
        NonZeroUsize::new(window_epochs)
            .map(Self::with_epochs)
            .ok_or(SizeAwareError::ZeroWindow)
    }

    /// A window over `window_epochs` epochs, starting at epoch 0 (infallible form of
    /// [`new`](Self::new)).
    pub fn with_epochs(window_epochs: NonZeroUsize) -> Self {
        let mut slots: Vec<EpochSlot> = (0..window_epochs.get())
            .map(|_| EpochSlot {
                epoch: None,
                histogram: SizeHistogram::new(),
            })
            .collect();
        if let Some(first) = slots.first_mut() {
            first.epoch = Some(Epoch(0));
        }
        SizeWindow {
            slots: slots.into_boxed_slice(),
            current: Epoch(0),
            current_slot: 0,
        }
    }

    /// Epochs the window spans (`W`).
    pub fn window_epochs(&self) -> usize {
        self.slots.len()
    }

    /// The newest epoch of the window (where [`record`](Self::record) goes).
    pub const fn current_epoch(&self) -> Epoch {
        self.current
    }

    /// Whether `epoch` is inside the window.
    pub fn contains(&self, epoch: Epoch) -> bool {
        epoch <= self.current && epoch.0.saturating_add(self.slots.len() as u64) > self.current.0
    }

    fn slot_of(&self, epoch: Epoch) -> usize {
        (epoch.0 % self.slots.len() as u64) as usize
    }

    /// Makes `epoch` the current epoch if it is newer; epochs older than `epoch − W + 1` fall
    /// out of the window. Going backwards is ignored.
    pub fn advance_to(&mut self, epoch: Epoch) {
        if epoch <= self.current {
            return;
        }
        self.current = epoch;
        self.current_slot = self.slot_of(epoch);
        self.prepare_slot(self.current_slot, epoch);
    }

    fn prepare_slot(&mut self, slot: usize, epoch: Epoch) {
        if let Some(entry) = self.slots.get_mut(slot) {
            if entry.epoch != Some(epoch) {
                entry.histogram.clear();
                entry.epoch = Some(epoch);
            }
        }
    }

    /// Records one request in the current epoch. O(1). See [`SizeHistogram::record`].
    pub fn record(&mut self, size_bytes: u64, wire_bytes: u64) {
        if let Some(entry) = self.slots.get_mut(self.current_slot) {
            entry.histogram.record(size_bytes, wire_bytes);
        }
    }

    /// Adds one epoch's histogram (e.g. a worker's local one) to the window, advancing the
    /// window if `epoch` is newer. Returns `false` (and drops it) if `epoch` has already fallen
    /// out of the window.
    pub fn absorb_epoch(&mut self, epoch: Epoch, histogram: &SizeHistogram) -> bool {
        self.advance_to(epoch);
        if !self.contains(epoch) {
            return false;
        }
        let slot = self.slot_of(epoch);
        self.prepare_slot(slot, epoch);
        if let Some(entry) = self.slots.get_mut(slot) {
            entry.histogram.merge(histogram);
        }
        true
    }

    /// Merges another window (e.g. a worker's) epoch by epoch: `self` advances to the newer of
    /// the two current epochs, and `other`'s epochs that are still inside it are added.
    pub fn merge(&mut self, other: &SizeWindow) {
        self.advance_to(other.current);
        for entry in other.slots.iter() {
            if let Some(epoch) = entry.epoch {
                if other.contains(epoch) && !entry.histogram.is_empty() {
                    self.absorb_epoch(epoch, &entry.histogram);
                }
            }
        }
    }

    /// One epoch's histogram, if it is inside the window.
    pub fn epoch(&self, epoch: Epoch) -> Option<&SizeHistogram> {
        if !self.contains(epoch) {
            return None;
        }
        let entry = self.slots.get(self.slot_of(epoch))?;
        (entry.epoch == Some(epoch)).then_some(&entry.histogram)
    }

    /// The sum of every epoch inside the window. O(W × buckets).
    pub fn aggregate(&self) -> SizeHistogram {
        let mut total = SizeHistogram::new();
        for entry in self.slots.iter() {
            if let Some(epoch) = entry.epoch {
                if self.contains(epoch) {
                    total.merge(&entry.histogram);
                }
            }
        }
        total
    }

    /// Requests inside the window.
    pub fn requests(&self) -> u64 {
        self.slots
            .iter()
            .filter(|entry| entry.epoch.is_some_and(|epoch| self.contains(epoch)))
            .map(|entry| entry.histogram.requests())
            .sum()
    }

    /// The size at percentile `p` over the window (see [`SizeHistogram::percentile`]).
    pub fn percentile(&self, p: f64) -> Option<u64> {
        self.aggregate().percentile(p)
    }
}

#[cfg(test)]
mod tests {
    use super::{
        bucket_bounds, bucket_index, max_overestimate, percentile_rank, SizeHistogram, SizeWindow,
        BUCKET_COUNT, TRACKED_LIMIT_BYTES,
    };
    use crate::sizeaware::class::{packet_cost, Epoch};
    use crate::sizeaware::error::SizeAwareError;
    use proptest::collection::vec as prop_vec;
    use proptest::prelude::{
        prop_assert, prop_assert_eq, prop_oneof, proptest, Just, ProptestConfig, Strategy,
    };

    /// The nearest-rank percentile of a sample, computed the slow, obvious way.
    fn exact_percentile(values: &[u64], p: f64) -> u64 {
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let rank = (p / 100.0 * sorted.len() as f64).ceil().max(1.0) as usize;
        sorted[rank.min(sorted.len()) - 1]
    }

    #[test]
    fn buckets_tile_the_range_without_gaps() {
        let mut expected_lower = 0u64;
        for index in 0..BUCKET_COUNT {
            let (lower, upper) = bucket_bounds(index);
            assert_eq!(lower, expected_lower, "bucket {index}");
            assert!(upper >= lower);
            assert_eq!(bucket_index(lower), index);
            assert_eq!(bucket_index(upper), index);
            expected_lower = upper.wrapping_add(1);
        }
        assert_eq!(
            bucket_bounds(BUCKET_COUNT - 1),
            (TRACKED_LIMIT_BYTES, u64::MAX)
        );
        assert_eq!(bucket_index(u64::MAX), BUCKET_COUNT - 1);
    }

    #[test]
    fn stated_error_bound_holds_at_bucket_edges() {
        assert_eq!(max_overestimate(0), 7);
        assert_eq!(max_overestimate(1016), 7);
        for value in [1024u64, 1500, 4096, 65_535, 1 << 20, (1 << 30) - 1] {
            assert!(max_overestimate(value) <= value / 64, "{value}");
        }
    }

    #[test]
    fn percentile_rank_edges() {
        assert_eq!(percentile_rank(0.0, 10), 1);
        assert_eq!(percentile_rank(100.0, 10), 10);
        assert_eq!(percentile_rank(99.0, 100), 99);
        assert_eq!(percentile_rank(99.0, 101), 100);
        assert_eq!(percentile_rank(f64::NAN, 7), 7);
        assert_eq!(percentile_rank(150.0, 7), 7);
        assert_eq!(percentile_rank(-3.0, 7), 1);
    }

    #[test]
    fn empty_histogram_has_no_percentile() {
        let histogram = SizeHistogram::new();
        assert_eq!(histogram.percentile(99.0), None);
        assert_eq!(histogram.split_at(100).small_share(), None);
    }

    #[test]
    fn p0_and_p100_are_min_bucket_and_exact_max() {
        let mut histogram = SizeHistogram::new();
        for size in [5u64, 300, 7_000, 123_456_789] {
            histogram.record_size(size);
        }
        assert_eq!(histogram.percentile(100.0), Some(123_456_789));
        assert_eq!(histogram.percentile(0.0), Some(7)); // bucket 0..=7 holds 5
        assert_eq!(histogram.percentile(50.0), Some(303)); // rank 2 → bucket 296..=303
    }

    #[test]
    fn over_one_gib_is_reported_through_the_recorded_maximum() {
        let mut histogram = SizeHistogram::new();
        histogram.record_size(5 * TRACKED_LIMIT_BYTES);
        assert_eq!(histogram.percentile(99.0), Some(5 * TRACKED_LIMIT_BYTES));
        assert_eq!(histogram.packets(), packet_cost(5 * TRACKED_LIMIT_BYTES));
    }

    #[test]
    fn split_counts_packets_by_wire_bytes() {
        let mut histogram = SizeHistogram::new();
        histogram.record(100, 130); // GET reply with header: 1 packet
        histogram.record(100_000, 100_040); // 67 packets
        histogram.record_many(10, 40, 3); // 3 packets
        let threshold = histogram.percentile(80.0).unwrap_or(0); // rank 4 of 5: the 100s
        assert_eq!(threshold, 103);
        let split = histogram.split_at(threshold);
        assert_eq!(split.small_requests, 4);
        assert_eq!(split.large_requests, 1);
        assert_eq!(split.small_packets, 4);
        assert_eq!(split.large_packets, packet_cost(100_040));
        assert_eq!(split.total_packets(), histogram.packets());
    }

    #[test]
    fn split_with_threshold_inside_a_bucket_is_proportional() {
        let mut histogram = SizeHistogram::new();
        // Bucket 2048..=2079 (width 32); spread 32 requests over it.
        for size in 2048u64..2080 {
            histogram.record_size(size);
        }
        let split = histogram.split_at(2063); // half the bucket's range
        assert_eq!(split.small_requests, 16);
        assert_eq!(split.large_requests, 16);
        assert_eq!(histogram.split_at(2079).large_requests, 0);
        assert_eq!(histogram.split_at(2047).small_requests, 0);
    }

    #[test]
    fn merge_adds_and_take_empties() {
        let mut left = SizeHistogram::new();
        let mut right = SizeHistogram::new();
        left.record_size(10);
        right.record_size(5000);
        right.record_size(10);
        left.merge(&right);
        assert_eq!(left.requests(), 3);
        assert_eq!(left.packets(), 1 + 4 + 1);
        assert_eq!(left.max_size(), 5000);
        let taken = left.take();
        assert!(left.is_empty());
        assert_eq!(taken.requests(), 3);
        assert_eq!(left, SizeHistogram::new());
    }

    #[test]
    fn window_rejects_zero_epochs() {
        assert_eq!(SizeWindow::new(0).err(), Some(SizeAwareError::ZeroWindow));
    }

    #[test]
    fn old_epochs_fall_out_of_the_window() {
        let mut window = SizeWindow::new(4).unwrap_or_else(|error| panic!("{error}"));
        window.record_size_for_test(1_000_000); // epoch 0: one huge request
        for epoch in 1..=3u64 {
            window.advance_to(Epoch(epoch));
            window.record(100, 100);
        }
        assert_eq!(window.requests(), 4);
        assert_eq!(window.percentile(100.0), Some(1_000_000));
        window.advance_to(Epoch(4)); // epoch 0 leaves the window
        assert_eq!(window.requests(), 3);
        assert_eq!(window.percentile(100.0), Some(100));
        assert!(window.epoch(Epoch(0)).is_none());
        // A jump past the whole window empties it.
        window.advance_to(Epoch(100));
        assert_eq!(window.requests(), 0);
        assert_eq!(window.percentile(50.0), None);
    }

    #[test]
    fn absorb_and_merge_are_epoch_aligned() {
        let mut controller = SizeWindow::new(2).unwrap_or_else(|error| panic!("{error}"));
        let mut worker_epoch = SizeHistogram::new();
        worker_epoch.record_size(64);
        assert!(controller.absorb_epoch(Epoch(5), &worker_epoch));
        assert_eq!(controller.current_epoch(), Epoch(5));
        assert!(controller.absorb_epoch(Epoch(4), &worker_epoch));
        assert!(!controller.absorb_epoch(Epoch(3), &worker_epoch)); // too old
        assert_eq!(controller.requests(), 2);

        let mut worker = SizeWindow::new(2).unwrap_or_else(|error| panic!("{error}"));
        worker.advance_to(Epoch(5));
        worker.record(9_000, 9_000);
        worker.advance_to(Epoch(6));
        worker.record(9_000, 9_000);
        controller.merge(&worker);
        assert_eq!(controller.current_epoch(), Epoch(6));
        // Epoch 4 fell out; epoch 5 has 64 + 9000, epoch 6 has 9000.
        assert_eq!(
            controller.epoch(Epoch(5)).map(SizeHistogram::requests),
            Some(2)
        );
        assert_eq!(
            controller.epoch(Epoch(6)).map(SizeHistogram::requests),
            Some(1)
        );
        assert_eq!(controller.requests(), 3);
    }

    impl SizeWindow {
        fn record_size_for_test(&mut self, size: u64) {
            self.record(size, size);
        }
    }

    fn size_strategy() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..2048,
            (0u32..40)
                .prop_flat_map(|bits| (Just(bits), 0u64..(1u64 << bits)))
                .prop_map(|(bits, low)| (1u64 << bits) | low),
            Just(TRACKED_LIMIT_BYTES - 1),
            Just(TRACKED_LIMIT_BYTES),
        ]
    }

    proptest! {
        // Each step aggregates the window (a few 22 KiB merges): keep the case count modest.
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn window_matches_a_list_of_timestamped_samples(
            steps in prop_vec((0u64..3, 0u64..100_000), 1..80),
            window_epochs in 1usize..6,
        ) {
            let mut window = SizeWindow::new(window_epochs).unwrap_or_else(|error| panic!("{error}"));
            let mut samples: Vec<(u64, u64)> = Vec::new();
            let mut epoch = 0u64;
            for (advance, size) in steps {
                epoch += advance;
                window.advance_to(Epoch(epoch));
                window.record(size, size);
                samples.push((epoch, size));
                let live: Vec<u64> = samples
                    .iter()
                    .filter(|(at, _)| at + window_epochs as u64 > epoch)
                    .map(|(_, size)| *size)
                    .collect();
                prop_assert_eq!(window.requests(), live.len() as u64);
                prop_assert_eq!(window.percentile(100.0), live.iter().max().copied());
                let aggregate = window.aggregate();
                prop_assert_eq!(aggregate.packets(), live.iter().map(|s| packet_cost(*s)).sum::<u64>());
            }
        }
    }

    proptest! {

        #[test]
        fn percentile_is_within_the_stated_error(
            values in prop_vec(size_strategy(), 1..400),
            p in 0.0f64..=100.0,
        ) {
            let mut histogram = SizeHistogram::new();
            for value in &values {
                histogram.record_size(*value);
            }
            let exact = exact_percentile(&values, p);
            let reported = histogram.percentile(p).unwrap_or(0);
            prop_assert!(reported >= exact, "reported {reported} < exact {exact}");
            let slack = reported - exact;
            let bound = if exact < TRACKED_LIMIT_BYTES { exact / 64 } else { u64::MAX };
            prop_assert!(slack <= max_overestimate(exact));
            prop_assert!(slack <= bound.max(7), "slack {slack} for {exact}");
            prop_assert_eq!(histogram.percentile(100.0), values.iter().max().copied());
        }

        #[test]
        fn split_at_a_measured_threshold_is_exact(
            values in prop_vec(size_strategy(), 1..300),
            p in 0.0f64..=100.0,
        ) {
            let mut histogram = SizeHistogram::new();
            for value in &values {
                histogram.record_size(*value);
            }
            let threshold = histogram.percentile(p).unwrap_or(0);
            let split = histogram.split_at(threshold);
            let small: Vec<u64> = values.iter().copied().filter(|v| *v <= threshold).collect();
            prop_assert_eq!(split.small_requests, small.len() as u64);
            prop_assert_eq!(split.small_packets, small.iter().map(|v| packet_cost(*v)).sum::<u64>());
            prop_assert_eq!(split.total_packets(), values.iter().map(|v| packet_cost(*v)).sum::<u64>());
        }
    }
}
