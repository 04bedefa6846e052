//! Warm-up decisions for a membership change: which keys to copy before the switch, and when
//! warm-up is over. The client executes them (copies, fallback reads); this module only decides.
//!
//! ```text
//!   join/remove ──► WarmupSettings (mode, warm_share, bounds)
//!        │ preemptive: tracker top-k of each old owner ─► keys whose owner changes
//!        │              ─► plan_copies(share) ─► hottest first ─► client copies, then switches
//!        ▼
//!   switch ──► WarmupProgress.observe(moved?, hit?) per read
//!        │       done when moved keys' hit ratio >= (1 - tolerance) × the others', after
//!        │       min_reads moved reads, or when max_nanos has passed
//!        ▼
//!   steady (fallback reads and write fences end)
//! ```
//!
//! `warm_share` is a share of the remapped keys the trackers know, hottest first (the share of
//! keys of Hot-Key Migration in Memcached's "copy the 20 % hottest remapped keys"; under zipf
//! popularity those keys carry most of the remapped accesses).

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
    /// Share of the remapped tracked keys to copy, hottest first (0..=1).
    pub warm_share: f64,
    /// Copies per second at most.
    pub copy_rate: u32,
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
            max_nanos: DEFAULT_MAX_NANOS,
            min_reads: DEFAULT_MIN_READS,
            tolerance: DEFAULT_TOLERANCE,
        }
    }
}

/// The keys to copy: `candidates` are tracked keys whose owner changes; the hottest
/// `ceil(share × len)` of them, hottest first (ties by key).
pub fn plan_copies(mut candidates: Vec<HotKey>, share: f64) -> Vec<HotKey> {
    candidates.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    candidates.dedup_by(|a, b| a.key == b.key);
    let share = share.clamp(0.0, 1.0);
    let keep = (share * candidates.len() as f64).ceil() as usize;
    candidates.truncate(keep);
    candidates
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

    #[test]
    fn copies_are_the_hottest_share_hottest_first() {
        let candidates = vec![
            hot("a", 1),
            hot("b", 50),
            hot("c", 7),
            hot("d", 20),
            hot("e", 3),
        ];
        let plan = plan_copies(candidates.clone(), 0.4);
        let keys: Vec<&[u8]> = plan.iter().map(|h| &*h.key).collect();
        assert_eq!(keys, vec![&b"b"[..], &b"d"[..]]);
        assert!(plan_copies(candidates.clone(), 0.0).is_empty());
        assert_eq!(plan_copies(candidates, 1.0).len(), 5);
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
