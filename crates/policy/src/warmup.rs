//! Warm-up decisions for a membership change: which keys to copy before the switch, and when
//! warm-up is over. The client executes them (copies, fallback reads); this module only decides.
//!
//! ```text
//!   join/remove ──► WarmupSettings (mode, warm_share, bounds)
//!        │ preemptive / drain: each old owner's key listing (lru_crawler metadump, stats
//!        │   cachedump), streamed ─► keys whose owner changes ─► CopyPlanner.offer
//!        │   (keeps the max_copy_keys hottest: tracker count, then last access, then listing
//!        │   order) ─► plan(share) ─► hottest first ─► client copies, then switches
//!        │   (an old owner that lists nothing: its tracked keys are offered instead)
//!        ▼
//!   switch ──► WarmupProgress.observe(moved?, hit?) per read
//!        │       done when moved keys' hit ratio >= (1 - tolerance) × the others', after
//!        │       min_reads moved reads, or when max_nanos has passed
//!        ▼
//!   steady (fallback reads and write fences end)
//! ```
//!
//! `warm_share` is a share of the remapped keys the old owners hold, hottest first (the share of
//! keys of Hot-Key Migration in Memcached's "copy the 20 % hottest remapped keys"; under zipf
//! popularity those keys carry most of the remapped accesses). Heat is the proxy's sampled
//! tracker count where it knows the key; the other keys follow by last access (when the
//! listing gives it) and then in listing order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use crate::error::PolicyError;
use crate::health::Timestamp;
use crate::hotkeys::HotKey;

/// Default share of the remapped tracked keys copied before a join's switch.
pub const DEFAULT_WARM_SHARE: f64 = 0.2;
/// Default bound on warm-up after the switch (fallback reads, write fences), nanoseconds.
pub const DEFAULT_MAX_NANOS: u64 = 60_000_000_000;
/// Default moved-key reads before the hit ratios are compared.
pub const DEFAULT_MIN_READS: u64 = 2_000;
/// Default tolerance: warm when the moved keys' hit ratio is within this of the others'.
pub const DEFAULT_TOLERANCE: f64 = 0.02;
/// Default bound on preemptive copies per second.
pub const DEFAULT_COPY_RATE: u32 = 20_000;
/// Default bound on the keys one change plans to copy: the planner keeps at most this many
/// keys (the hottest) while the old owners' listings stream by.
pub const DEFAULT_MAX_COPY_KEYS: usize = 262_144;

/// How a membership change warms the new owners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WarmupMode {
    /// Copy the hottest remapped keys before switching.
    pub preemptive: bool,
    /// After the switch, a miss at the new owner is read from the old owner and added.
    pub fallback: bool,
}

impl WarmupMode {
    /// `cold`, `fallback`, `preemptive` or `preemptive+fallback` (also `drain`, an alias of
    /// `preemptive` for removals).
    pub fn from_name(name: &str) -> Result<Self, PolicyError> {
        let mut mode = WarmupMode::default();
        for part in name.split(['+', ',']) {
            match part.trim() {
                "cold" | "none" | "" => {}
                "fallback" => mode.fallback = true,
                "preemptive" | "drain" => mode.preemptive = true,
                _ => return Err(PolicyError::UnknownWarmupMode(name.to_string())),
            }
        }
        Ok(mode)
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match (self.preemptive, self.fallback) {
            (false, false) => "cold",
            (false, true) => "fallback",
            (true, false) => "preemptive",
            (true, true) => "preemptive+fallback",
        }
    }

    /// True when nothing is done besides the switch.
    pub fn is_cold(self) -> bool {
        !self.preemptive && !self.fallback
    }
}

/// Warm-up settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmupSettings {
    /// What to do.
    pub mode: WarmupMode,
    /// Share of the remapped keys the old owners hold to copy, hottest first (0..=1).
    pub warm_share: f64,
    /// Copies per second at most.
    pub copy_rate: u32,
    /// Keys one change plans to copy at most (the planner's memory bound).
    pub max_copy_keys: usize,
    /// Warm-up ends at the latest this long after the switch.
    pub max_nanos: u64,
    /// Moved-key reads before warm-up may end on hit ratio.
    pub min_reads: u64,
    /// Hit-ratio tolerance.
    pub tolerance: f64,
}

impl Default for WarmupSettings {
    fn default() -> Self {
        WarmupSettings {
            mode: WarmupMode::default(),
            warm_share: DEFAULT_WARM_SHARE,
            copy_rate: DEFAULT_COPY_RATE,
            max_copy_keys: DEFAULT_MAX_COPY_KEYS,
            max_nanos: DEFAULT_MAX_NANOS,
            min_reads: DEFAULT_MIN_READS,
            tolerance: DEFAULT_TOLERANCE,
        }
    }
}

/// Rank of a candidate copy: larger is hotter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    /// Tracker count (0 when untracked).
    heat: u64,
    /// Last access, Unix seconds (0 when the listing does not say).
    last_access: u64,
    /// Earlier in the listings first.
    order: Reverse<u64>,
}

/// Chooses the keys a preemptive warm-up or a drain copies from what the old owners hold,
/// with bounded memory: [`CopyPlanner::offer`] each listed key whose owner changes (in any
/// number, streamed), then [`CopyPlanner::plan`].
#[derive(Debug, Clone)]
pub struct CopyPlanner {
    capacity: usize,
    heat: HashMap<Box<[u8]>, u64>,
    /// Min-heap: the coldest kept candidate on top, dropped when over capacity.
    kept: BinaryHeap<Reverse<(Rank, Box<[u8]>)>>,
    offered: u64,
}

impl CopyPlanner {
    /// A planner keeping at most `capacity` keys; `tracked` gives the heat it knows.
    pub fn new(capacity: usize, tracked: impl IntoIterator<Item = HotKey>) -> Self {
        let mut heat: HashMap<Box<[u8]>, u64> = HashMap::new();
        for hot in tracked {
            let count = heat.entry(hot.key).or_insert(0);
            *count = (*count).max(hot.count);
        }
        CopyPlanner {
            capacity: capacity.max(1),
            heat,
            kept: BinaryHeap::new(),
            offered: 0,
        }
    }

    /// Offers a key an old owner holds and that moves to another owner in the change.
    pub fn offer(&mut self, key: &[u8], last_access: Option<u64>) {
        let rank = Rank {
            heat: self.heat.get(key).copied().unwrap_or(0),
            last_access: last_access.unwrap_or(0),
            order: Reverse(self.offered),
        };
        self.offered += 1;
        if self.kept.len() >= self.capacity {
            match self.kept.peek() {
                Some(Reverse((coldest, _))) if *coldest < rank => {
                    self.kept.pop();
                }
                _ => return,
            }
        }
        self.kept.push(Reverse((rank, key.into())));
    }

    /// Keys offered so far (kept or not).
    pub fn offered(&self) -> u64 {
        self.offered
    }

    /// The hottest `ceil(share × offered)` keys (at most the kept ones), hottest first, each
    /// once.
    pub fn plan(self, share: f64) -> Vec<Box<[u8]>> {
        let keep = (share.clamp(0.0, 1.0) * self.offered as f64).ceil() as usize;
        let mut ranked: Vec<(Rank, Box<[u8]>)> =
            self.kept.into_iter().map(|Reverse(entry)| entry).collect();
        ranked.sort_unstable_by(|a, b| b.cmp(a));
        let mut seen: HashSet<Box<[u8]>> = HashSet::new();
        ranked
            .into_iter()
            .filter_map(|(_, key)| seen.insert(key.clone()).then_some(key))
            .take(keep)
            .collect()
    }
}

/// Why warm-up ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmupEnd {
    /// The moved keys' hit ratio caught up with the others'.
    HitRatio,
    /// The time bound passed.
    TimeBound,
}

impl WarmupEnd {
    /// `hit_ratio` or `time_bound`.
    pub fn name(self) -> &'static str {
        match self {
            WarmupEnd::HitRatio => "hit_ratio",
            WarmupEnd::TimeBound => "time_bound",
        }
    }
}

/// Read outcomes since the switch, split by whether the key moved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmupProgress {
    settings: WarmupSettings,
    started: Timestamp,
    /// Reads of keys whose owner changed, and their hits.
    pub moved_reads: u64,
    /// Hits among `moved_reads`.
    pub moved_hits: u64,
    /// Reads of the other keys.
    pub other_reads: u64,
    /// Hits among `other_reads`.
    pub other_hits: u64,
}

impl WarmupProgress {
    /// Starts counting at the switch.
    pub fn new(settings: WarmupSettings, started: Timestamp) -> Self {
        WarmupProgress {
            settings,
            started,
            moved_reads: 0,
            moved_hits: 0,
            other_reads: 0,
            other_hits: 0,
        }
    }

    /// Counts one read.
    pub fn observe(&mut self, moved: bool, hit: bool) {
        if moved {
            self.moved_reads += 1;
            self.moved_hits += u64::from(hit);
        } else {
            self.other_reads += 1;
            self.other_hits += u64::from(hit);
        }
    }

    /// Whether warm-up is over at `now`, and why.
    pub fn done(&self, now: Timestamp) -> Option<WarmupEnd> {
        if now.nanos_since(self.started) >= self.settings.max_nanos {
            return Some(WarmupEnd::TimeBound);
        }
        if self.moved_reads < self.settings.min_reads || self.other_reads == 0 {
            return None;
        }
        let moved = self.moved_hits as f64 / self.moved_reads as f64;
        let other = self.other_hits as f64 / self.other_reads as f64;
        (moved >= other - self.settings.tolerance).then_some(WarmupEnd::HitRatio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hot(key: &str, count: u64) -> HotKey {
        HotKey {
            key: key.as_bytes().into(),
            count,
            error: 0,
        }
    }

    #[test]
    fn modes_parse_and_print() {
        for name in ["cold", "fallback", "preemptive", "preemptive+fallback"] {
            assert_eq!(WarmupMode::from_name(name).unwrap().name(), name);
        }
        assert_eq!(
            WarmupMode::from_name("fallback,preemptive").unwrap().name(),
            "preemptive+fallback"
        );
        assert!(WarmupMode::from_name("lukewarm").is_err());
    }

    fn keys(plan: &[Box<[u8]>]) -> Vec<&str> {
        plan.iter()
            .map(|k| std::str::from_utf8(k).unwrap())
            .collect()
    }

    #[test]
    fn held_keys_are_planned_tracked_heat_first_then_last_access_then_listing_order() {
        let mut planner = CopyPlanner::new(100, vec![hot("t1", 5), hot("t9", 90)]);
        for (key, last_access) in [
            ("old", Some(10)),
            ("t1", Some(1)),
            ("first", None),
            ("recent", Some(20)),
            ("t9", None),
            ("second", None),
        ] {
            planner.offer(key.as_bytes(), last_access);
        }
        assert_eq!(planner.offered(), 6);
        assert_eq!(
            keys(&planner.clone().plan(1.0)),
            vec!["t9", "t1", "recent", "old", "first", "second"]
        );
        // ceil(0.5 × 6) = 3; an untracked key held by the old owner is copied too.
        assert_eq!(keys(&planner.plan(0.5)), vec!["t9", "t1", "recent"]);
    }

    #[test]
    fn the_planner_keeps_only_the_hottest_capacity_keys() {
        let mut planner = CopyPlanner::new(3, vec![hot("k7", 70), hot("k2", 20)]);
        for i in 0..1_000 {
            planner.offer(format!("k{i}").as_bytes(), Some(i % 10));
        }
        assert!(planner.kept.len() <= 3);
        assert_eq!(planner.offered(), 1_000);
        // Tracked first, then the latest access (9), earliest in the listing among those.
        assert_eq!(keys(&planner.plan(1.0)), vec!["k7", "k2", "k9"]);
    }

    #[test]
    fn a_key_offered_twice_is_planned_once() {
        let mut planner = CopyPlanner::new(10, Vec::new());
        planner.offer(b"a", None);
        planner.offer(b"a", Some(5));
        assert_eq!(keys(&planner.plan(1.0)), vec!["a"]);
    }

    #[test]
    fn warmup_ends_on_hit_ratio_or_time() {
        let settings = WarmupSettings {
            min_reads: 10,
            max_nanos: 1_000,
            ..WarmupSettings::default()
        };
        let mut progress = WarmupProgress::new(settings, Timestamp(0));
        for i in 0..100 {
            progress.observe(false, i % 10 != 0); // 90 %
            progress.observe(true, i % 2 == 0); // 50 %
        }
        assert_eq!(progress.done(Timestamp(10)), None);
        for _ in 0..1_000 {
            progress.observe(true, true);
        }
        assert_eq!(progress.done(Timestamp(10)), Some(WarmupEnd::HitRatio));
        let fresh = WarmupProgress::new(settings, Timestamp(0));
        assert_eq!(fresh.done(Timestamp(999)), None);
        assert_eq!(fresh.done(Timestamp(1_000)), Some(WarmupEnd::TimeBound));
    }
}
