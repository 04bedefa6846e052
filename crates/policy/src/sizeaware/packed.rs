//! The size-aware decision as the workers read it, and the two questions a worker asks it:
//! is this request handed off, and do I take from the large queue.
//!
//! ```text
//!  EpochDriver::tick ─► Decision ─► PackedDecision (one u64: one atomic store in the server)
//!  small worker: class_of(size, workers) == Large ─► the large queue
//!  worker w:     takes_large_queue(w, workers)? ─► serves the large queue (else its input)
//! ```

use super::class::SizeClass;
use super::controller::Decision;

/// A size-aware decision as the workers read it: threshold and split packed into one `u64`,
/// so a runtime publishes an epoch's decision with one atomic store and a worker never sees
/// one epoch's threshold with another epoch's split. The threshold keeps its low 48 bits
/// (thresholds of 256 TiB and more, and "none", read as [`PackedDecision::NO_THRESHOLD`]);
/// the split keeps 16 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedDecision(pub u64);

impl PackedDecision {
    const THRESHOLD_BITS: u32 = 48;
    const THRESHOLD_MASK: u64 = (1 << Self::THRESHOLD_BITS) - 1;
    /// The threshold read back when there is none (every request is small).
    pub const NO_THRESHOLD: u64 = u64::MAX;

    /// Packs `threshold` (`None`: no threshold) and `small_workers` (at most 65535).
    pub const fn new(threshold: Option<u64>, small_workers: usize) -> PackedDecision {
        let threshold = match threshold {
            Some(bytes) if bytes < Self::THRESHOLD_MASK => bytes,
            _ => Self::THRESHOLD_MASK,
        };
        let small = if small_workers > 0xffff {
            0xffff
        } else {
            small_workers as u64
        };
        PackedDecision((small << Self::THRESHOLD_BITS) | threshold)
    }

    /// The threshold in bytes ([`Self::NO_THRESHOLD`] when none).
    pub const fn threshold(self) -> u64 {
        let bits = self.0 & Self::THRESHOLD_MASK;
        if bits == Self::THRESHOLD_MASK {
            Self::NO_THRESHOLD
        } else {
            bits
        }
    }

    /// Workers `0..small_workers` are small.
    pub const fn small_workers(self) -> usize {
        (self.0 >> Self::THRESHOLD_BITS) as usize
    }

    /// This decision with another threshold.
    pub const fn with_threshold(self, threshold: Option<u64>) -> PackedDecision {
        PackedDecision::new(threshold, self.small_workers())
    }

    /// This decision with another split.
    pub const fn with_small_workers(self, small_workers: usize) -> PackedDecision {
        let threshold = self.threshold();
        let threshold = if threshold == Self::NO_THRESHOLD {
            None
        } else {
            Some(threshold)
        };
        PackedDecision::new(threshold, small_workers)
    }
    /// The class a request of `size_bytes` is served as among `workers` workers: large iff
    /// strictly above the threshold and some worker is large (with none, everything is served
    /// in place). The same rule as [`Decision::class_of`].
    pub const fn class_of(self, size_bytes: u64, workers: usize) -> SizeClass {
        if self.small_workers() < workers && size_bytes > self.threshold() {
            SizeClass::Large
        } else {
            SizeClass::Small
        }
    }

    /// Whether worker `worker` takes jobs from the large queue: the large workers do; while
    /// every worker is small, the small ones do, so jobs queued before the split moved are
    /// not stranded (they serve those before reading new requests).
    pub const fn takes_large_queue(self, worker: usize, workers: usize) -> bool {
        worker >= self.small_workers() || self.small_workers() >= workers
    }

    /// Whether worker `worker` takes new requests (the small workers' input) when it has
    /// nothing else to do: the small workers always; a large worker only with
    /// `large_workers_help` (`[sizeaware] large_workers_help`), and then only while the large
    /// queue is empty (it serves that queue first). Small requests still never wait behind a
    /// large one; an idle large worker just stops being idle while small ones queue.
    pub const fn takes_small_input(self, worker: usize, large_workers_help: bool) -> bool {
        worker < self.small_workers() || large_workers_help
    }
}

impl From<&Decision> for PackedDecision {
    /// The decision as published: its threshold and split.
    fn from(decision: &Decision) -> PackedDecision {
        PackedDecision::new(Some(decision.threshold_bytes), decision.small_workers)
    }
}

#[cfg(test)]
mod tests {
    use super::PackedDecision;

    #[test]
    fn large_workers_take_small_input_only_when_they_help() {
        let decision = PackedDecision::new(Some(1000), 5);
        assert!((0..5).all(|worker| decision.takes_small_input(worker, false)));
        assert!((5..8).all(|worker| !decision.takes_small_input(worker, false)));
        assert!((0..8).all(|worker| decision.takes_small_input(worker, true)));
    }
    use crate::sizeaware::class::SizeClass;
    use crate::sizeaware::controller::{SizeAwareConfig, SizeAwareController};

    #[test]
    fn packed_decision_round_trips_threshold_and_split() {
        let packed = PackedDecision::new(Some(1499), 3);
        assert_eq!((packed.threshold(), packed.small_workers()), (1499, 3));
        let none = PackedDecision::new(None, 4);
        assert_eq!(none.threshold(), PackedDecision::NO_THRESHOLD);
        assert_eq!(none.small_workers(), 4);
        assert_eq!(packed.with_small_workers(1).threshold(), 1499);
        assert_eq!(none.with_threshold(Some(0)).threshold(), 0);
        assert_eq!(none.with_threshold(Some(0)).small_workers(), 4);
        assert_eq!(
            PackedDecision::new(Some(u64::MAX - 1), 1).threshold(),
            PackedDecision::NO_THRESHOLD
        );
    }

    #[test]
    fn class_and_large_queue_follow_the_split() {
        let split = PackedDecision::new(Some(1000), 2);
        assert_eq!(split.class_of(1000, 3), SizeClass::Small);
        assert_eq!(split.class_of(1001, 3), SizeClass::Large);
        // No large worker: served in place.
        assert_eq!(split.class_of(1001, 2), SizeClass::Small);
        assert_eq!(
            PackedDecision::new(None, 1).class_of(u64::MAX, 3),
            SizeClass::Small
        );
        let takers: Vec<bool> = (0..3).map(|w| split.takes_large_queue(w, 3)).collect();
        assert_eq!(takers, [false, false, true]);
        let all_small: Vec<bool> = (0..2).map(|w| split.takes_large_queue(w, 2)).collect();
        assert_eq!(all_small, [true, true]);
    }

    #[test]
    fn packed_class_agrees_with_the_decision() {
        for (workers, small) in [(4, 3), (4, 4), (1, 1), (5, 2)] {
            let config = SizeAwareConfig {
                fixed_small_workers: Some(small),
                fixed_threshold_bytes: Some(4096),
                ..SizeAwareConfig::with_workers(workers)
            };
            let controller = SizeAwareController::new(config).unwrap_or_else(|e| panic!("{e}"));
            let decision = controller.decision();
            let packed = PackedDecision::from(decision);
            for size in [0, 4096, 4097, 1 << 30] {
                assert_eq!(packed.class_of(size, workers), decision.class_of(size));
            }
        }
    }
}
