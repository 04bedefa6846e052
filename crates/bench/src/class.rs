//! Request classes (all, small/large, mice/elephant, get/set), a compact set
//! of them attached to each request, and one HDR histogram per class.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::op::OpKind;

/// A class of requests with its own latency histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Every request.
    All,
    /// Largest value at most the workload's threshold.
    Small,
    /// Largest value above the threshold.
    Large,
    /// Fewer keys than the elephant threshold.
    Mice,
    /// At least the elephant threshold of keys.
    Elephant,
    /// GET / multiget.
    Get,
    /// SET.
    Set,
}

impl Class {
    /// Every class, in report order.
    pub const ALL: [Class; 7] = [
        Class::All,
        Class::Small,
        Class::Large,
        Class::Mice,
        Class::Elephant,
        Class::Get,
        Class::Set,
    ];

    /// Name used in JSON and tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Class::All => "all",
            Class::Small => "small",
            Class::Large => "large",
            Class::Mice => "mice",
            Class::Elephant => "elephant",
            Class::Get => "get",
            Class::Set => "set",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// Set of classes a request belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassSet(u8);

impl ClassSet {
    /// Classes of a request of `kind` with `keys` keys whose largest value is
    /// `largest_value` bytes.
    #[must_use]
    pub fn for_request(
        kind: OpKind,
        keys: usize,
        largest_value: u64,
        large_threshold: u64,
        elephant_min_keys: u32,
    ) -> Self {
        let mut set = Self::default();
        set.insert(Class::All);
        set.insert(if largest_value > large_threshold {
            Class::Large
        } else {
            Class::Small
        });
        set.insert(if keys >= elephant_min_keys as usize {
            Class::Elephant
        } else {
            Class::Mice
        });
        set.insert(match kind {
            OpKind::Get => Class::Get,
            OpKind::Set => Class::Set,
        });
        set
    }

    /// Adds a class.
    pub fn insert(&mut self, class: Class) {
        self.0 |= class.bit();
    }

    /// Whether `class` is in the set.
    #[must_use]
    pub fn contains(self, class: Class) -> bool {
        self.0 & class.bit() != 0
    }
}

/// Highest latency a histogram tracks (larger values are clamped): 10 minutes.
pub const MAX_TRACKED_NANOS: u64 = 600_000_000_000;

/// New latency histogram in nanoseconds with 3 significant digits.
#[must_use]
pub fn new_histogram() -> Histogram<u64> {
    // The bounds are valid constants, so construction cannot fail; fall back
    // to an auto-resizing histogram just in case.
    Histogram::new_with_bounds(1, MAX_TRACKED_NANOS, 3)
        .or_else(|_| Histogram::new(3))
        .unwrap_or_else(|_| unreachable_histogram())
}

fn unreachable_histogram() -> Histogram<u64> {
    // sigfig 2 with auto-resize is always accepted by hdrhistogram.
    match Histogram::new(2) {
        Ok(histogram) => histogram,
        Err(error) => panic!("hdrhistogram rejected default bounds: {error}"),
    }
}

/// One histogram per [`Class`].
#[derive(Clone, Debug, PartialEq)]
pub struct ClassHistograms {
    histograms: Vec<Histogram<u64>>,
}

impl Default for ClassHistograms {
    fn default() -> Self {
        Self {
            histograms: Class::ALL.iter().map(|_| new_histogram()).collect(),
        }
    }
}

impl ClassHistograms {
    /// Records one latency in every class of `classes`.
    pub fn record(&mut self, classes: ClassSet, latency_nanos: u64) {
        let value = latency_nanos.clamp(1, MAX_TRACKED_NANOS);
        for (class, histogram) in Class::ALL.iter().zip(&mut self.histograms) {
            if classes.contains(*class) {
                histogram.saturating_record(value);
            }
        }
    }

    /// Histogram of `class`.
    #[must_use]
    pub fn get(&self, class: Class) -> &Histogram<u64> {
        &self.histograms[class as usize]
    }

    /// Adds another set of histograms into this one.
    pub fn merge(&mut self, other: &ClassHistograms) {
        for (mine, theirs) in self.histograms.iter_mut().zip(&other.histograms) {
            // Same bounds on both sides: adding cannot fail.
            let _ = mine.add(theirs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Class, ClassHistograms, ClassSet};
    use crate::op::OpKind;

    #[test]
    fn classes_are_assigned_by_size_keys_and_kind() {
        let small_get = ClassSet::for_request(OpKind::Get, 1, 100, 1499, 50);
        assert!(small_get.contains(Class::Small) && small_get.contains(Class::Mice));
        assert!(small_get.contains(Class::Get) && !small_get.contains(Class::Set));
        let large_elephant = ClassSet::for_request(OpKind::Get, 100, 1500, 1499, 50);
        assert!(large_elephant.contains(Class::Large) && large_elephant.contains(Class::Elephant));
        assert!(!large_elephant.contains(Class::Small) && !large_elephant.contains(Class::Mice));
        let set = ClassSet::for_request(OpKind::Set, 1, 10, 1499, 50);
        assert!(set.contains(Class::Set) && set.contains(Class::All));
    }

    #[test]
    fn histograms_record_only_member_classes() {
        let mut histograms = ClassHistograms::default();
        histograms.record(ClassSet::for_request(OpKind::Set, 1, 10, 1499, 50), 5_000);
        histograms.record(ClassSet::for_request(OpKind::Get, 100, 10, 1499, 50), 9_000);
        assert_eq!(histograms.get(Class::All).len(), 2);
        assert_eq!(histograms.get(Class::Set).len(), 1);
        assert_eq!(histograms.get(Class::Elephant).len(), 1);
        assert_eq!(histograms.get(Class::Large).len(), 0);
        let mut merged = ClassHistograms::default();
        merged.merge(&histograms);
        merged.merge(&histograms);
        assert_eq!(merged.get(Class::All).len(), 4);
        assert!(merged.get(Class::Elephant).max() >= 8_990);
    }
}
