//! How often each key was requested lately while it was not stored: a count-min sketch of
//! one-byte counters. A `get` that misses counts one; an evicted item adds the reads its
//! record counted. A new item's record starts from its key's count, so eviction's requests
//! per byte remember a key's past across evictions; the sketch is read once per stored item
//! and raised once per miss and per eviction, never per candidate eviction looks at.
//!
//! Two counters a key (the low and high halves of its 64-bit hash, masked), the smaller one
//! read; an increment raises only the counters at that minimum (conservative update). After
//! [`INCREMENTS_PER_COUNTER`] increments per counter every counter is halved, so the counts
//! follow what is read now and saturate rarely. One counter per [`BYTES_PER_COUNTER`] bytes
//! of the shard's share of the limit (a power of two, at least [`COUNTERS_MIN`]): 0.8 % of
//! the limit, beside it (`experiments/memory/bound/`: with it, choosing the lowest count per
//! byte reaches the same miss ratio as exact counts within 0.01–0.05).

/// Bytes of the limit per counter.
pub(crate) const BYTES_PER_COUNTER: u64 = 128;
/// Fewest counters a sketch has.
pub(crate) const COUNTERS_MIN: usize = 64;
/// Increments per counter after which every counter is halved.
const INCREMENTS_PER_COUNTER: usize = 8;

#[derive(Debug)]
pub(crate) struct ReadSketch {
    counters: Vec<u8>,
    increments: usize,
}

impl ReadSketch {
    /// A sketch for a shard whose share of the limit is `share_bytes`.
    pub fn new(share_bytes: u64) -> ReadSketch {
        let width = usize::try_from(share_bytes / BYTES_PER_COUNTER)
            .unwrap_or(usize::MAX)
            .clamp(COUNTERS_MIN, 1 << 31)
            .next_power_of_two();
        ReadSketch {
            counters: vec![0; width],
            increments: 0,
        }
    }

    /// Bytes of the counters.
    pub fn bytes(&self) -> usize {
        self.counters.len()
    }

    fn slots(&self, hash: u64) -> [usize; 2] {
        let mask = self.counters.len() as u64 - 1;
        [(hash & mask) as usize, ((hash >> 32) & mask) as usize]
    }

    /// The key of hash `hash`'s count: at least its reads since the counts were last halved
    /// (more when other keys share both its counters).
    pub fn estimate(&self, hash: u64) -> u8 {
        let [a, b] = self.slots(hash);
        self.counters[a].min(self.counters[b])
    }

    /// Counts `reads` reads of the key of hash `hash`.
    /// (conservative update: each of its counters raised to at least its least plus `reads`).
    pub fn add(&mut self, hash: u64, reads: u16) {
        if reads == 0 {
            return;
        }
        let slots = self.slots(hash);
        let least = self.counters[slots[0]].min(self.counters[slots[1]]);
        let raised = u8::try_from(u16::from(least) + reads).unwrap_or(u8::MAX);
        for slot in slots {
            self.counters[slot] = self.counters[slot].max(raised);
        }
        self.tally(usize::from(reads));
    }

    /// Counts one read of the key of hash `hash`.
    pub fn count(&mut self, hash: u64) {
        let slots = self.slots(hash);
        let least = self.counters[slots[0]].min(self.counters[slots[1]]);
        if least == u8::MAX {
            return;
        }
        for slot in slots {
            if self.counters[slot] == least {
                self.counters[slot] = least + 1;
            }
        }
        self.tally(1);
    }

    /// Notes `increments` more increments; halves every counter when they reach
    /// [`INCREMENTS_PER_COUNTER`] per counter.
    fn tally(&mut self, increments: usize) {
        self.increments += increments;
        if self.increments >= INCREMENTS_PER_COUNTER * self.counters.len() {
            self.increments = 0;
            for counter in &mut self.counters {
                *counter /= 2;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_reads_and_halves_them() {
        let mut sketch = ReadSketch::new(0);
        assert_eq!(sketch.bytes(), COUNTERS_MIN);
        for _ in 0..5 {
            sketch.count(7);
        }
        assert_eq!(sketch.estimate(7), 5);
        // Enough reads of other keys (slots 8 to 63, not 7's) to halve every counter once.
        let mut halved_from = None;
        for other in 0..(INCREMENTS_PER_COUNTER * COUNTERS_MIN) as u64 {
            let before = sketch.estimate(7);
            let slot = 8 + other % 56;
            sketch.count(slot | (slot << 32));
            if sketch.estimate(7) < before {
                halved_from.get_or_insert(before);
            }
        }
        assert!(halved_from.is_some(), "the counts were halved");
        let mut sketch = ReadSketch::new(0);
        sketch.add(9, 3);
        assert_eq!(sketch.estimate(9), 3);
    }
}
