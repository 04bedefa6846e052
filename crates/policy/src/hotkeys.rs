//! Hot-key tracking with bounded memory: a sampled space-saving top-k (Metwally, Agrawal and
//! El Abbadi, "Efficient Computation of Frequent and Top-k Elements in Data Streams", ICDT 2005),
//! kept in the paper's stream-summary layout.
//!
//! ```text
//!   offer(key) ── every `sample_every`-th call ──► record(key, weight = sample_every)
//!                                                     │ tracked? count += weight
//!                                                     │ room?    insert with count = weight
//!                                                     └ full:    replace an entry m of the
//!                                                                lowest count: count =
//!                                                                m.count + weight, error = m.count
//!   top(n) ──► entries by estimated count, hottest first (estimate - error <= true <= estimate)
//!
//!   stream summary: buckets of equal count, lowest first, each holding its entries
//!     [count 8: a c f] ⇄ [count 16: b] ⇄ [count 40: d e] ⇄ …
//!   a count that grows moves its entry to the next bucket (made if missing); with one weight
//!   (the samplers' case) that bucket is the neighbour, so a record costs one key hash and a
//!   few index moves, whatever the number of keys tracked.
//! ```
//!
//! Memory is bounded by the configuration whatever the stream: at most `capacity` entries, each
//! holding a key of at most `max_key_bytes` (longer keys are not tracked: memcached keys are at
//! most 250 bytes). Sampling is by a call counter, so the tracker's per-request cost is one
//! increment except on sampled calls, and sampled counts are scaled back by `sample_every`.
//! The tracker makes no I/O and keeps no clock: the proxy holds one per backend.

use hashbrown::HashTable;

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

/// Marks the end of a list of entries or buckets.
const NONE: u32 = u32::MAX;

/// A tracked key in the stream summary: its counts, its key's hash (so the index never hashes a
/// stored key again) and its place in its bucket's list.
#[derive(Debug, Clone)]
struct Entry {
    key: Box<[u8]>,
    hash: u64,
    count: u64,
    error: u64,
    bucket: u32,
    prev: u32,
    next: u32,
}

/// The entries of one count, in the list of buckets ordered by count (lowest first).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    count: u64,
    first_entry: u32,
    lower: u32,
    higher: u32,
}

/// A space-saving top-k summary with call-counter sampling.
#[derive(Debug, Clone)]
pub struct HotKeyTracker {
    config: TrackerConfig,
    /// Tracked keys; an entry's position never changes while it is tracked (a replaced key
    /// takes over its victim's entry).
    entries: Vec<Entry>,
    /// Buckets by position; `free_buckets` lists the unused positions.
    buckets: Vec<Bucket>,
    free_buckets: Vec<u32>,
    /// The bucket of the lowest count (`NONE` while empty).
    lowest_bucket: u32,
    /// Key to entry position, hashed with aHash (SipHash made the tracker's lookups a visible
    /// share of the proxy's instructions).
    index: HashTable<u32>,
    hasher: ahash::RandomState,
    calls: u64,
    recorded: u64,
}

/// Bytes of a key's allocation besides the key (the allocator's header, rounded).
const KEY_ALLOCATION_OVERHEAD: usize = 16;
/// Bytes of one index slot (the entry's position and the table's control byte).
const INDEX_SLOT_BYTES: usize = std::mem::size_of::<u32>() + 1;

impl HotKeyTracker {
    /// An empty tracker.
    pub fn new(config: TrackerConfig) -> Self {
        let config = TrackerConfig {
            capacity: config.capacity.clamp(1, NONE as usize - 1),
            sample_every: config.sample_every.max(1),
            max_key_bytes: config.max_key_bytes,
        };
        HotKeyTracker {
            config,
            entries: Vec::with_capacity(config.capacity),
            // A raise makes the new count's bucket before it drops the old one.
            buckets: Vec::with_capacity(config.capacity + 1),
            free_buckets: Vec::new(),
            lowest_bucket: NONE,
            index: HashTable::with_capacity(config.capacity),
            hasher: ahash::RandomState::new(),
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
        let hash = self.hasher.hash_one(key);
        if let Some(&slot) = self.find(hash, key) {
            self.raise(slot, weight);
            return;
        }
        if self.entries.len() < self.config.capacity {
            let slot = self.entries.len() as u32;
            self.entries.push(Entry {
                key: key.into(),
                hash,
                count: 0,
                error: 0,
                bucket: NONE,
                prev: NONE,
                next: NONE,
            });
            self.index_insert(hash, slot);
            let bucket = self.bucket_above(NONE, weight);
            self.entries[slot as usize].count = weight;
            self.attach(slot, bucket);
            return;
        }
        // Replace an entry of the lowest count, reusing its key's allocation when the new key
        // has the same length (keys of one workload usually do).
        let slot = self.buckets[self.lowest_bucket as usize].first_entry;
        let victim = &mut self.entries[slot as usize];
        let old_hash = victim.hash;
        if victim.key.len() == key.len() {
            victim.key.copy_from_slice(key);
        } else {
            victim.key = key.into();
        }
        victim.hash = hash;
        victim.error = victim.count;
        if let Ok(found) = self.index.find_entry(old_hash, |&other| other == slot) {
            found.remove();
        }
        self.index_insert(hash, slot);
        self.raise(slot, weight);
    }

    /// Keys tracked now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Accesses recorded (sampled and scaled), the denominator of a key's share.
    pub fn recorded(&self) -> u64 {
        self.recorded
    }

    /// The estimated count of `key`, if tracked.
    pub fn estimate(&self, key: &[u8]) -> Option<u64> {
        self.find(self.hasher.hash_one(key), key)
            .map(|&slot| self.entries[slot as usize].count)
    }

    /// The `n` hottest keys, hottest first (ties by key, so the order is deterministic).
    pub fn top(&self, n: usize) -> Vec<HotKey> {
        let mut all: Vec<HotKey> = self
            .entries
            .iter()
            .map(|entry| HotKey {
                key: entry.key.clone(),
                count: entry.count,
                error: entry.error,
            })
            .collect();
        all.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        all.truncate(n);
        all
    }

    /// Bytes the tracker holds now (keys plus bookkeeping).
    pub fn memory_bytes(&self) -> usize {
        let keys = self
            .entries
            .iter()
            .map(|entry| entry.key.len() + KEY_ALLOCATION_OVERHEAD)
            .sum::<usize>();
        // The table keeps a power of two of slots, at most 8 in 7 of them used.
        let index_slots = (self.index.capacity() * 8 / 7).next_power_of_two();
        keys + self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.buckets.capacity() * std::mem::size_of::<Bucket>()
            + index_slots * INDEX_SLOT_BYTES
    }

    /// The most [`HotKeyTracker::memory_bytes`] can ever be for this configuration.
    pub fn memory_bound(config: TrackerConfig) -> usize {
        let capacity = config.capacity.max(1);
        capacity
            * (config.max_key_bytes
                + KEY_ALLOCATION_OVERHEAD
                + std::mem::size_of::<Entry>()
                + std::mem::size_of::<Bucket>()
                + 4 * INDEX_SLOT_BYTES)
            + std::mem::size_of::<Bucket>()
    }

    /// Forgets everything (e.g. after the keys moved elsewhere).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.buckets.clear();
        self.free_buckets.clear();
        self.lowest_bucket = NONE;
        self.index.clear();
        self.recorded = 0;
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<&u32> {
        let entries = &self.entries;
        self.index
            .find(hash, |&slot| *entries[slot as usize].key == *key)
    }

    fn index_insert(&mut self, hash: u64, slot: u32) {
        let entries = &self.entries;
        self.index
            .insert_unique(hash, slot, |&other| entries[other as usize].hash);
    }

    /// Adds `weight` to an entry's count and moves it to the bucket of its new count.
    fn raise(&mut self, slot: u32, weight: u64) {
        if weight == 0 {
            return;
        }
        let from = self.entries[slot as usize].bucket;
        let count = self.entries[slot as usize].count + weight;
        let to = self.bucket_above(from, count);
        self.detach(slot);
        self.entries[slot as usize].count = count;
        self.attach(slot, to);
    }

    /// The bucket of `count`, made if missing, searching upwards from the bucket after `start`
    /// (the lowest bucket when `start` is `NONE`); `start`'s count must be below `count`.
    fn bucket_above(&mut self, start: u32, count: u64) -> u32 {
        let mut lower = start;
        let mut cursor = match start {
            NONE => self.lowest_bucket,
            bucket => self.buckets[bucket as usize].higher,
        };
        while cursor != NONE && self.buckets[cursor as usize].count < count {
            lower = cursor;
            cursor = self.buckets[cursor as usize].higher;
        }
        if cursor != NONE && self.buckets[cursor as usize].count == count {
            return cursor;
        }
        let made = Bucket {
            count,
            first_entry: NONE,
            lower,
            higher: cursor,
        };
        let bucket = match self.free_buckets.pop() {
            Some(free) => {
                self.buckets[free as usize] = made;
                free
            }
            None => {
                self.buckets.push(made);
                (self.buckets.len() - 1) as u32
            }
        };
        match lower {
            NONE => self.lowest_bucket = bucket,
            lower => self.buckets[lower as usize].higher = bucket,
        }
        if cursor != NONE {
            self.buckets[cursor as usize].lower = bucket;
        }
        bucket
    }

    /// Puts an entry first in `bucket`'s list.
    fn attach(&mut self, slot: u32, bucket: u32) {
        let first = self.buckets[bucket as usize].first_entry;
        let entry = &mut self.entries[slot as usize];
        entry.bucket = bucket;
        entry.prev = NONE;
        entry.next = first;
        if first != NONE {
            self.entries[first as usize].prev = slot;
        }
        self.buckets[bucket as usize].first_entry = slot;
    }

    /// Takes an entry out of its bucket's list, dropping the bucket when that empties it.
    fn detach(&mut self, slot: u32) {
        let Entry {
            bucket, prev, next, ..
        } = self.entries[slot as usize];
        match prev {
            NONE => self.buckets[bucket as usize].first_entry = next,
            prev => self.entries[prev as usize].next = next,
        }
        if next != NONE {
            self.entries[next as usize].prev = prev;
        }
        let emptied = self.buckets[bucket as usize];
        if emptied.first_entry != NONE {
            return;
        }
        match emptied.lower {
            NONE => self.lowest_bucket = emptied.higher,
            lower => self.buckets[lower as usize].higher = emptied.higher,
        }
        if emptied.higher != NONE {
            self.buckets[emptied.higher as usize].lower = emptied.lower;
        }
        self.free_buckets.push(bucket);
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

    /// The index finds every entry at its position, and the buckets, walked from the lowest,
    /// hold every entry once, each under its own count, the counts rising.
    fn assert_consistent(tracker: &HotKeyTracker) {
        assert_eq!(tracker.index.len(), tracker.entries.len());
        for (slot, entry) in tracker.entries.iter().enumerate() {
            assert_eq!(tracker.find(entry.hash, &entry.key), Some(&(slot as u32)));
        }
        let mut seen = 0;
        let mut live_buckets = 0;
        let mut below = None;
        let mut lower = NONE;
        let mut bucket = tracker.lowest_bucket;
        while bucket != NONE {
            let at = tracker.buckets[bucket as usize];
            assert_eq!(at.lower, lower);
            assert!(below < Some(at.count), "counts rise bucket by bucket");
            assert_ne!(at.first_entry, NONE, "no empty bucket is kept");
            let mut prev = NONE;
            let mut slot = at.first_entry;
            while slot != NONE {
                let entry = &tracker.entries[slot as usize];
                assert_eq!((entry.bucket, entry.prev), (bucket, prev));
                assert_eq!(entry.count, at.count);
                seen += 1;
                prev = slot;
                slot = entry.next;
            }
            live_buckets += 1;
            below = Some(at.count);
            lower = bucket;
            bucket = at.higher;
        }
        assert_eq!(seen, tracker.entries.len());
        assert_eq!(
            live_buckets + tracker.free_buckets.len(),
            tracker.buckets.len()
        );
    }

    #[test]
    fn replacing_the_minimum_keeps_the_index_and_the_buckets_in_step() {
        // Keys of the same and of different lengths, so the replacement both reuses the
        // evicted key's allocation and makes a new one; weights of several sizes, so counts
        // skip buckets and land between them.
        let mut tracker = HotKeyTracker::new(TrackerConfig {
            capacity: 8,
            sample_every: 1,
            max_key_bytes: 250,
        });
        for round in 0..2_000u32 {
            let key = format!("k{}", "x".repeat((round % 5) as usize) + &round.to_string());
            tracker.record(key.as_bytes(), u64::from(round % 3));
            tracker.offer(b"steady");
            assert_consistent(&tracker);
            assert!(tracker.estimate(key.as_bytes()).is_some(), "{key}");
        }
        assert_eq!(&*tracker.top(1)[0].key, b"steady");
        tracker.clear();
        assert_consistent(&tracker);
        tracker.offer(b"again");
        assert_eq!(tracker.estimate(b"again"), Some(1));
    }

    #[test]
    fn top_keys_of_a_skewed_stream_match_the_exact_counts() {
        // 300k reads of 50k keys, skewed close to zipf (rank = floor(50000^u) for uniform u),
        // through a tracker of 512 keys: the 10 hottest it reports are the 10 hottest by exact
        // count, in the same order, each within its error bound.
        let mut tracker = HotKeyTracker::new(TrackerConfig {
            capacity: 512,
            sample_every: 1,
            max_key_bytes: 250,
        });
        let mut exact: std::collections::HashMap<Vec<u8>, u64> = Default::default();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let uniform = (state >> 11) as f64 / (1u64 << 53) as f64;
            let key = format!("key:{:08}", 50_000f64.powf(uniform) as u64).into_bytes();
            tracker.offer(&key);
            *exact.entry(key).or_default() += 1;
        }
        let mut by_count: Vec<(&Vec<u8>, &u64)> = exact.iter().collect();
        by_count.sort_unstable_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        let expected: Vec<&[u8]> = by_count[..10]
            .iter()
            .map(|(key, _)| key.as_slice())
            .collect();
        let top = tracker.top(10);
        let reported: Vec<&[u8]> = top.iter().map(|hot| &*hot.key).collect();
        assert_eq!(reported, expected);
        for hot in tracker.top(512) {
            let truth = exact[&*hot.key];
            assert!(
                hot.count - hot.error <= truth && truth <= hot.count,
                "{hot:?} {truth}"
            );
        }
        assert_eq!(tracker.recorded(), 300_000);
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
