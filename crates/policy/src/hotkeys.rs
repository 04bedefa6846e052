//! Hot-key tracking with bounded memory: a sampled space-saving top-k (Metwally, Agrawal and
//! El Abbadi, "Efficient Computation of Frequent and Top-k Elements in Data Streams", ICDT 2005).
//!
//! ```text
//!   offer(key) ── every `sample_every`-th call ──► record(key, weight = sample_every)
//!                                                     │ tracked? count += weight (sift in heap)
//!                                                     │ room?    insert with count = weight
//!                                                     └ full:    replace the minimum entry m:
//!                                                                count = m.count + weight,
//!                                                                error = m.count
//!   top(n) ──► entries by estimated count, hottest first (estimate - error <= true <= estimate)
//! ```
//!
//! Memory is bounded by the configuration whatever the stream: at most `capacity` entries, each
//! holding a key of at most `max_key_bytes` (longer keys are not tracked: memcached keys are at
//! most 250 bytes). Sampling is by a call counter, so the tracker's per-request cost is one
//! increment except on sampled calls, and sampled counts are scaled back by `sample_every`.
//! The tracker makes no I/O and keeps no clock: the proxy holds one per backend.

use std::collections::HashMap;

/// Default number of keys tracked per tracker.
pub const DEFAULT_CAPACITY: usize = 4096;
/// Default sampling: record one call in this many.
pub const DEFAULT_SAMPLE_EVERY: u32 = 8;
/// Default longest key tracked (memcached's key limit).
pub const DEFAULT_MAX_KEY_BYTES: usize = 250;

/// Tracker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackerConfig {
    /// Keys tracked at most.
    pub capacity: usize,
    /// Record one `offer` in this many (1 = every one).
    pub sample_every: u32,
    /// Keys longer than this are not tracked.
    pub max_key_bytes: usize,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            capacity: DEFAULT_CAPACITY,
            sample_every: DEFAULT_SAMPLE_EVERY,
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
        }
    }
}

/// One tracked key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKey {
    /// The key.
    pub key: Box<[u8]>,
    /// Estimated accesses (an over-estimate by at most `error`).
    pub count: u64,
    /// Over-estimation bound inherited when the key replaced another.
    pub error: u64,
}

/// A space-saving top-k summary with call-counter sampling.
#[derive(Debug, Clone)]
pub struct HotKeyTracker {
    config: TrackerConfig,
    /// Min-heap on `count`; `index` maps a key to its heap slot.
    heap: Vec<HotKey>,
    /// Hashed with aHash: every sift of the heap looks up both keys it swaps, and SipHash (the
    /// standard hasher) made these lookups about 7 % of the proxy's instructions.
    index: HashMap<Box<[u8]>, usize, ahash::RandomState>,
    calls: u64,
    recorded: u64,
}

/// Bytes of bookkeeping per entry besides the key (heap slot, map slot, two key allocations'
/// headers), used by [`HotKeyTracker::memory_bound`].
const ENTRY_OVERHEAD: usize = std::mem::size_of::<HotKey>() + 2 * std::mem::size_of::<usize>() + 32;

impl HotKeyTracker {
    /// An empty tracker.
    pub fn new(config: TrackerConfig) -> Self {
        let config = TrackerConfig {
            capacity: config.capacity.max(1),
            sample_every: config.sample_every.max(1),
            max_key_bytes: config.max_key_bytes,
        };
        HotKeyTracker {
            config,
            heap: Vec::with_capacity(config.capacity),
            index: HashMap::with_capacity_and_hasher(config.capacity, ahash::RandomState::new()),
            calls: 0,
            recorded: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> TrackerConfig {
        self.config
    }

    /// Counts one access of `key`, recorded (with weight `sample_every`) on every
    /// `sample_every`-th call. Callers that keep the tracker behind a lock use a [`Sampler`] to
    /// skip the lock on unsampled calls instead.
    pub fn offer(&mut self, key: &[u8]) {
        self.calls += 1;
        if self
            .calls
            .is_multiple_of(u64::from(self.config.sample_every))
        {
            self.record(key, u64::from(self.config.sample_every));
        }
    }

    /// Records `weight` accesses of `key` (no sampling).
    pub fn record(&mut self, key: &[u8], weight: u64) {
        if key.len() > self.config.max_key_bytes {
            return;
        }
        self.recorded += weight;
        if let Some(&slot) = self.index.get(key) {
            self.heap[slot].count += weight;
            self.sift_down(slot);
            return;
        }
        if self.heap.len() < self.config.capacity {
            let boxed: Box<[u8]> = key.into();
            self.index.insert(boxed.clone(), self.heap.len());
            self.heap.push(HotKey {
                key: boxed,
                count: weight,
                error: 0,
            });
            let last = self.heap.len() - 1;
            self.sift_up(last);
            return;
        }
        // Replace the minimum (the root), reusing its two key copies when the new key has the
        // same length (keys of one workload usually do): no allocation on this path.
        let root = &mut self.heap[0];
        let evicted = self.index.remove_entry(&root.key).map(|(key, _)| key);
        let floor = root.count;
        let index_key = match evicted {
            Some(mut reused) if reused.len() == key.len() && root.key.len() == key.len() => {
                reused.copy_from_slice(key);
                root.key.copy_from_slice(key);
                reused
            }
            _ => {
                root.key = key.into();
                key.into()
            }
        };
        root.count = floor + weight;
        root.error = floor;
        self.index.insert(index_key, 0);
        self.sift_down(0);
    }

    /// Keys tracked now.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Accesses recorded (sampled and scaled), the denominator of a key's share.
    pub fn recorded(&self) -> u64 {
        self.recorded
    }

    /// The estimated count of `key`, if tracked.
    pub fn estimate(&self, key: &[u8]) -> Option<u64> {
        self.index.get(key).map(|&slot| self.heap[slot].count)
    }

    /// The `n` hottest keys, hottest first (ties by key, so the order is deterministic).
    pub fn top(&self, n: usize) -> Vec<HotKey> {
        let mut all = self.heap.clone();
        all.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        all.truncate(n);
        all
    }

    /// Bytes the tracker holds now (keys plus bookkeeping).
    pub fn memory_bytes(&self) -> usize {
        self.heap
            .iter()
            .map(|entry| 2 * entry.key.len() + ENTRY_OVERHEAD)
            .sum::<usize>()
            + self.heap.capacity().saturating_sub(self.heap.len()) * std::mem::size_of::<HotKey>()
    }

    /// The most [`HotKeyTracker::memory_bytes`] can ever be for this configuration.
    pub fn memory_bound(config: TrackerConfig) -> usize {
        config.capacity.max(1) * (2 * config.max_key_bytes + ENTRY_OVERHEAD)
    }

    /// Forgets everything (e.g. after the keys moved elsewhere).
    pub fn clear(&mut self) {
        self.heap.clear();
        self.index.clear();
        self.recorded = 0;
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        if let Some(slot) = self.index.get_mut(&self.heap[a].key) {
            *slot = a;
        }
        if let Some(slot) = self.index.get_mut(&self.heap[b].key) {
            *slot = b;
        }
    }

    fn sift_up(&mut self, mut slot: usize) {
        while slot > 0 {
            let parent = (slot - 1) / 2;
            if self.heap[parent].count <= self.heap[slot].count {
                break;
            }
            self.swap(parent, slot);
            slot = parent;
        }
    }

    fn sift_down(&mut self, mut slot: usize) {
        loop {
            let left = 2 * slot + 1;
            let right = left + 1;
            let mut smallest = slot;
            if left < self.heap.len() && self.heap[left].count < self.heap[smallest].count {
                smallest = left;
            }
            if right < self.heap.len() && self.heap[right].count < self.heap[smallest].count {
                smallest = right;
            }
            if smallest == slot {
                return;
            }
            self.swap(slot, smallest);
            slot = smallest;
        }
    }
}

/// The lock-free half of sampling, for callers that keep the tracker behind a lock: `sampled()`
/// is one relaxed increment, and only a sampled call needs the lock and
/// [`HotKeyTracker::record`] with weight `every`.
#[derive(Debug)]
pub struct Sampler {
    every: u64,
    calls: std::sync::atomic::AtomicU64,
}

impl Sampler {
    /// Samples one call in `every` (at least 1).
    pub fn new(every: u32) -> Self {
        Sampler {
            every: u64::from(every.max(1)),
            calls: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The weight of a sampled call.
    pub fn weight(&self) -> u64 {
        self.every
    }

    /// True for one call in `every`.
    pub fn sampled(&self) -> bool {
        let calls = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (calls + 1).is_multiple_of(self.every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_while_under_capacity_and_hottest_first() {
        let mut tracker = HotKeyTracker::new(TrackerConfig {
            capacity: 8,
            sample_every: 1,
            max_key_bytes: 250,
        });
        for (key, times) in [("a", 5), ("b", 9), ("c", 1)] {
            for _ in 0..times {
                tracker.offer(key.as_bytes());
            }
        }
        let top = tracker.top(2);
        assert_eq!(&*top[0].key, b"b");
        assert_eq!(top[0].count, 9);
        assert_eq!(&*top[1].key, b"a");
        assert_eq!(tracker.estimate(b"c"), Some(1));
        assert_eq!(tracker.recorded(), 15);
    }

    #[test]
    fn heavy_hitters_survive_a_stream_of_distinct_keys() {
        let mut tracker = HotKeyTracker::new(TrackerConfig {
            capacity: 64,
            sample_every: 1,
            max_key_bytes: 250,
        });
        for round in 0..10_000u32 {
            tracker.offer(b"hot");
            if round % 2 == 0 {
                tracker.offer(b"warm");
            }
            tracker.offer(format!("cold-{round}").as_bytes());
        }
        let top = tracker.top(2);
        assert_eq!(&*top[0].key, b"hot");
        assert_eq!(&*top[1].key, b"warm");
        // Space-saving guarantee: the estimate minus its error never exceeds the truth.
        assert!(top[0].count - top[0].error <= 10_000 && top[0].count >= 10_000);
        assert!(tracker.len() <= 64);
    }

    #[test]
    fn replacing_the_minimum_keeps_the_index_and_the_heap_in_step() {
        // Keys of the same and of different lengths, so the replacement both reuses the
        // evicted key's copies and allocates new ones.
        let mut tracker = HotKeyTracker::new(TrackerConfig {
            capacity: 8,
            sample_every: 1,
            max_key_bytes: 250,
        });
        for round in 0..2_000u32 {
            let key = format!("k{}", "x".repeat((round % 5) as usize) + &round.to_string());
            tracker.offer(key.as_bytes());
            tracker.offer(b"steady");
            for (slot, entry) in tracker.heap.iter().enumerate() {
                assert_eq!(tracker.index.get(&entry.key), Some(&slot), "round {round}");
            }
            assert_eq!(tracker.index.len(), tracker.heap.len());
            assert!(tracker.estimate(key.as_bytes()).is_some(), "{key}");
        }
        assert_eq!(&*tracker.top(1)[0].key, b"steady");
    }

    #[test]
    fn memory_is_bounded_by_the_configuration() {
        let config = TrackerConfig {
            capacity: 100,
            sample_every: 3,
            max_key_bytes: 40,
        };
        let mut tracker = HotKeyTracker::new(config);
        let bound = HotKeyTracker::memory_bound(config);
        for i in 0..200_000u64 {
            // Keys of every length up to well past the limit.
            let key = vec![b'k' + (i % 7) as u8; 1 + (i % 97) as usize];
            let mut key = key;
            key.extend_from_slice(&i.to_le_bytes());
            tracker.offer(&key);
            if i % 10_000 == 0 {
                assert!(tracker.len() <= 100);
                assert!(tracker.memory_bytes() <= bound);
            }
        }
        assert_eq!(tracker.len(), 100);
        assert!(tracker.memory_bytes() <= bound);
        assert!(tracker.top(1000).iter().all(|hot| hot.key.len() <= 40));
    }

    #[test]
    fn sampling_scales_counts_back() {
        let mut tracker = HotKeyTracker::new(TrackerConfig {
            capacity: 16,
            sample_every: 4,
            max_key_bytes: 250,
        });
        for _ in 0..400 {
            tracker.offer(b"x");
        }
        assert_eq!(tracker.estimate(b"x"), Some(400));
        let sampler = Sampler::new(4);
        let sampled = (0..400).filter(|_| sampler.sampled()).count();
        assert_eq!(sampled, 100);
        assert_eq!(sampler.weight(), 4);
    }
}
