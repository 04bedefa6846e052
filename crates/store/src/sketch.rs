//! How often each key has been read lately: a count-min sketch of one-byte counters, what
//! eviction weighs against an item's bytes ([`ReadSketch::denser`]).
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
        self.increments += 1;
        if self.increments >= INCREMENTS_PER_COUNTER * self.counters.len() {
            self.increments = 0;
            for counter in &mut self.counters {
                *counter /= 2;
            }
        }
    }

    /// True if an item read `count` times of `bytes` is worth more per byte than one read
    /// `other_count` times of `other_bytes`. A count weighs twice itself, and 0 weighs 1: an
    /// item never read is worth least, and one read once is worth what a cache-aside miss
    /// makes it (its `get` counted before its `set`).
    pub fn denser(count: u8, bytes: u64, other_count: u8, other_bytes: u64) -> bool {
        let weight = |count: u8| u128::from((2 * u64::from(count)).max(1));
        weight(count) * u128::from(other_bytes) > weight(other_count) * u128::from(bytes)
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
        assert!(ReadSketch::denser(2, 100, 1, 100));
        assert!(ReadSketch::denser(1, 100, 1, 1000));
        assert!(ReadSketch::denser(1, 100, 0, 100));
        assert!(!ReadSketch::denser(0, 100, 0, 100));
    }
}
