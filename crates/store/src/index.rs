//! A shard's key index: an open-addressing table of record locations with Robin Hood
//! linear probing and backward-shift deletion, so a removal leaves no tombstone, and grown or
//! shrunk in steps of about an eighth (its load kept between [`MIN_LOAD`] and
//! [`MAX_LOAD`]), not by doubling.
//!
//! ```text
//!   slot (6 bytes): location u32 · tag u8 (the hash's low byte) · distance u8
//!   distance: 0 empty, else 1 + how far the entry sits past its home slot
//!   home slot: (hash × home_slots) >> 64; entries of one home are adjacent, homes in order
//!   slots: home_slots + an overflow of a quarter of them (16 to PROBE_LIMIT - 1): a probe
//!          never wraps around
//! ```
//!
//! The table keeps no keys and no full hashes: a lookup compares the key in the record the
//! location names (only for slots whose distance and tag match), and a resize re-hashes every
//! entry's key through the caller's `hash_of`. Its slots live in an anonymous mapping of their
//! own, given back whole when the table is resized.

use crate::segment::AnonymousMemory;

/// Bytes of one slot: the location, the tag and the distance.
pub(crate) const SLOT_BYTES: usize = 6;
/// Largest stored distance: an entry sits at most `PROBE_LIMIT - 1` slots past its home.
const PROBE_LIMIT: usize = u8::MAX as usize;
/// Slots of the smallest table that holds anything.
pub(crate) const MIN_HOME_SLOTS: usize = 32;
/// Fewest overflow slots past the last home slot.
const MIN_OVERFLOW_SLOTS: usize = 16;
/// The table grows when an insert would take its load above this (as a fraction).
pub(crate) const MAX_LOAD: (usize, usize) = (9, 10);
/// The table shrinks when a removal takes its load below this.
pub(crate) const MIN_LOAD: (usize, usize) = (3, 4);
// The charge per item pays for the table at its lowest load.
const _: () =
    assert!(crate::item::ITEM_BOOKKEEPING_BYTES as usize * MIN_LOAD.0 >= SLOT_BYTES * MIN_LOAD.1);
/// The load a resized table starts at.
const RESIZED_LOAD: (usize, usize) = (4, 5);
/// Below this load a probe that runs past [`PROBE_LIMIT`] does not grow the table (the keys'
/// hashes are too alike for more slots to help); the insert is refused.
const FORCED_GROWTH_MIN_LOAD: (usize, usize) = (1, 4);

const OFFSET_TAG: usize = 4;
const OFFSET_DISTANCE: usize = 5;

/// Overflow slots after `home_slots` home slots: a quarter of them, within
/// [`MIN_OVERFLOW_SLOTS`] and `PROBE_LIMIT - 1` (the farthest an entry may sit).
fn overflow_slots(home_slots: usize) -> usize {
    (home_slots / 4).clamp(MIN_OVERFLOW_SLOTS, PROBE_LIMIT - 1)
}

/// Most bytes of a table beyond 8 an entry: its smallest size and its overflow slots.
#[cfg(test)]
pub(crate) const FIXED_BYTES_MAX: usize = (MIN_HOME_SLOTS + PROBE_LIMIT - 1) * SLOT_BYTES;

/// Home slots for `len` entries at [`RESIZED_LOAD`].
fn home_slots_for(len: usize) -> usize {
    (len * RESIZED_LOAD.1)
        .div_ceil(RESIZED_LOAD.0)
        .max(MIN_HOME_SLOTS)
}

/// True if `len` entries in `home_slots` are more than `load` of it.
fn above(len: usize, home_slots: usize, load: (usize, usize)) -> bool {
    len * load.1 > home_slots * load.0
}

#[derive(Debug)]
pub(crate) struct KeyIndex {
    memory: AnonymousMemory,
    home_slots: usize,
    len: usize,
    /// Entries re-hashed by resizes, over the table's life.
    rehashed: u64,
}

impl KeyIndex {
    /// An empty index, holding no memory until the first insert.
    pub fn new() -> KeyIndex {
        KeyIndex {
            memory: AnonymousMemory::new(0),
            home_slots: 0,
            len: 0,
            rehashed: 0,
        }
    }

    fn with_home_slots(home_slots: usize) -> KeyIndex {
        KeyIndex {
            memory: AnonymousMemory::new((home_slots + overflow_slots(home_slots)) * SLOT_BYTES),
            home_slots,
            len: 0,
            rehashed: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Slots of the table, the overflow past the last home slot included.
    pub fn slots(&self) -> usize {
        self.memory.bytes().len() / SLOT_BYTES
    }

    /// Bytes of the table's slots.
    pub fn bytes(&self) -> usize {
        self.memory.bytes().len()
    }

    /// Entries re-hashed by resizes so far.
    pub fn rehashed(&self) -> u64 {
        self.rehashed
    }

    fn home(&self, hash: u64) -> usize {
        ((u128::from(hash) * self.home_slots as u128) >> 64) as usize
    }

    fn distance(&self, slot: usize) -> usize {
        usize::from(self.memory.bytes()[slot * SLOT_BYTES + OFFSET_DISTANCE])
    }

    fn tag(&self, slot: usize) -> u8 {
        self.memory.bytes()[slot * SLOT_BYTES + OFFSET_TAG]
    }

    fn location(&self, slot: usize) -> u32 {
        let start = slot * SLOT_BYTES;
        let mut raw = [0u8; 4];
        raw.copy_from_slice(&self.memory.bytes()[start..start + 4]);
        u32::from_le_bytes(raw)
    }

    fn write(&mut self, slot: usize, location: u32, tag: u8, distance: usize) {
        let start = slot * SLOT_BYTES;
        let bytes = &mut self.memory.bytes_mut()[start..start + SLOT_BYTES];
        bytes[..4].copy_from_slice(&location.to_le_bytes());
        bytes[OFFSET_TAG] = tag;
        bytes[OFFSET_DISTANCE] = distance as u8;
    }

    /// The slot of the entry of hash `hash` for which `matches` (called with its location)
    /// is true.
    fn find_slot(&self, hash: u64, mut matches: impl FnMut(u32) -> bool) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let tag = hash as u8;
        let mut slot = self.home(hash);
        let mut distance = 1;
        while slot < self.slots() {
            let there = self.distance(slot);
            // Robin Hood order: past a slot nearer its home than we are, the key is absent.
            if there < distance {
                return None;
            }
            if there == distance && self.tag(slot) == tag && matches(self.location(slot)) {
                return Some(slot);
            }
            slot += 1;
            distance += 1;
        }
        None
    }

    /// The location of the entry of hash `hash` for which `matches` is true.
    pub fn find(&self, hash: u64, matches: impl FnMut(u32) -> bool) -> Option<u32> {
        self.find_slot(hash, matches)
            .map(|slot| self.location(slot))
    }

    /// Points the entry of hash `hash` at `from` to `to` instead; false if there is none.
    pub fn repoint(&mut self, hash: u64, from: u32, to: u32) -> bool {
        let Some(slot) = self.find_slot(hash, |location| location == from) else {
            return false;
        };
        let (tag, distance) = (self.tag(slot), self.distance(slot));
        self.write(slot, to, tag, distance);
        true
    }

    /// Places an entry without resizing: shifts the entries from its Robin Hood position up
    /// to the next empty slot one slot on. False (nothing changed) if that would put an
    /// entry more than [`PROBE_LIMIT`] slots from home.
    fn place(&mut self, hash: u64, location: u32) -> bool {
        if self.home_slots == 0 {
            return false;
        }
        let tag = hash as u8;
        let mut slot = self.home(hash);
        let mut distance = 1;
        loop {
            if slot >= self.slots() || distance > PROBE_LIMIT {
                return false;
            }
            if self.distance(slot) < distance {
                break;
            }
            slot += 1;
            distance += 1;
        }
        let mut empty = slot;
        while self.distance(empty) != 0 {
            if self.distance(empty) >= PROBE_LIMIT || empty + 1 >= self.slots() {
                return false;
            }
            empty += 1;
        }
        if empty > slot {
            let bytes = self.memory.bytes_mut();
            bytes.copy_within(
                slot * SLOT_BYTES..empty * SLOT_BYTES,
                (slot + 1) * SLOT_BYTES,
            );
            for moved in slot + 1..=empty {
                bytes[moved * SLOT_BYTES + OFFSET_DISTANCE] += 1;
            }
        }
        self.write(slot, location, tag, distance);
        true
    }

    /// Adds the entry `location` of hash `hash` (not present yet), growing the table first
    /// when it is due; `hash_of` gives any stored location's hash. False (nothing added) only
    /// when the keys' hashes are so alike that no growth would help.
    pub fn insert(&mut self, hash: u64, location: u32, hash_of: impl Fn(u32) -> u64) -> bool {
        if self.home_slots == 0 || above(self.len + 1, self.home_slots, MAX_LOAD) {
            self.resize(home_slots_for(self.len + 1), &hash_of);
        }
        loop {
            if self.place(hash, location) {
                self.len += 1;
                return true;
            }
            if !above(self.len + 1, self.home_slots, FORCED_GROWTH_MIN_LOAD) {
                return false;
            }
            self.resize(self.home_slots + self.home_slots / 8 + 1, &hash_of);
        }
    }

    /// Removes the entry of hash `hash` at `location` (false if there is none), shifting the
    /// entries after it back, and shrinks the table when it is due.
    pub fn remove(&mut self, hash: u64, location: u32, hash_of: impl Fn(u32) -> u64) -> bool {
        let Some(slot) = self.find_slot(hash, |other| other == location) else {
            return false;
        };
        let mut end = slot + 1;
        while end < self.slots() && self.distance(end) > 1 {
            end += 1;
        }
        let bytes = self.memory.bytes_mut();
        bytes.copy_within((slot + 1) * SLOT_BYTES..end * SLOT_BYTES, slot * SLOT_BYTES);
        for moved in slot..end - 1 {
            bytes[moved * SLOT_BYTES + OFFSET_DISTANCE] -= 1;
        }
        bytes[(end - 1) * SLOT_BYTES..end * SLOT_BYTES].fill(0);
        self.len -= 1;
        if self.home_slots > MIN_HOME_SLOTS && !above(self.len, self.home_slots, MIN_LOAD) {
            let home_slots = home_slots_for(self.len);
            if home_slots < self.home_slots {
                self.resize(home_slots, &hash_of);
            }
        }
        true
    }

    /// Rebuilds the table with `home_slots` home slots (more if its entries do not fit
    /// there within the probe limit).
    fn resize(&mut self, home_slots: usize, hash_of: &impl Fn(u32) -> u64) {
        let mut home_slots = home_slots.max(MIN_HOME_SLOTS);
        loop {
            let mut next = KeyIndex::with_home_slots(home_slots);
            let placed = (0..self.slots())
                .filter(|&slot| self.distance(slot) != 0)
                .all(|slot| {
                    let location = self.location(slot);
                    next.place(hash_of(location), location)
                });
            if placed {
                next.len = self.len;
                next.rehashed = self.rehashed + self.len as u64;
                *self = next;
                return;
            }
            home_slots += home_slots / 8 + 1;
        }
    }

    /// The stored locations, in slot order (tests only).
    #[cfg(test)]
    pub fn locations(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.slots())
            .filter(|&slot| self.distance(slot) != 0)
            .map(|slot| self.location(slot))
    }

    /// Checks every entry sits where its hash puts it, in Robin Hood order, and the load is
    /// at most [`MAX_LOAD`] (tests only).
    #[cfg(test)]
    pub fn check_invariants(&self, hash_of: impl Fn(u32) -> u64) {
        let mut count = 0;
        for slot in 0..self.slots() {
            let distance = self.distance(slot);
            if distance == 0 {
                continue;
            }
            count += 1;
            let hash = hash_of(self.location(slot));
            assert_eq!(self.home(hash) + distance - 1, slot, "entry at slot {slot}");
            assert_eq!(self.tag(slot), hash as u8);
            if slot + 1 < self.slots() {
                assert!(self.distance(slot + 1) <= distance + 1, "Robin Hood order");
            }
        }
        assert_eq!(count, self.len);
        assert!(!above(self.len, self.home_slots, MAX_LOAD) || self.home_slots == 0);
    }

    /// True if the load is at least [`MIN_LOAD`] or the table is at its smallest: what the
    /// charge of [`crate::ITEM_BOOKKEEPING_BYTES`] an entry relies on (well-spread hashes
    /// only: keys whose hashes collide can force a growth below it).
    #[cfg(test)]
    pub fn load_at_least_min(&self) -> bool {
        self.home_slots <= MIN_HOME_SLOTS || above(self.len, self.home_slots, MIN_LOAD)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::{prop_assert, proptest, Just, ProptestConfig, Strategy};
    use proptest::prop_oneof;

    use super::{KeyIndex, FIXED_BYTES_MAX, PROBE_LIMIT};

    /// Locations carry the key's id in their low 16 bits and a generation above, so a
    /// location's hash can be found from it as a record's key would be.
    const ID_BITS: u32 = 16;

    fn mix(mut value: u64) -> u64 {
        value = (value ^ (value >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        value = (value ^ (value >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        value ^ (value >> 31)
    }

    fn id_of(location: u32) -> u32 {
        location & ((1 << ID_BITS) - 1)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
        Repoint(u32),
        InsertRange(u32, u32),
        RemoveAll,
    }

    fn ops(ids: u32) -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            4 => (0..ids).prop_map(Op::Insert),
            3 => (0..ids).prop_map(Op::Remove),
            1 => (0..ids).prop_map(Op::Repoint),
            1 => (0..ids, 1..3000u32).prop_map(|(from, count)| Op::InsertRange(from, count)),
            1 => Just(Op::RemoveAll),
        ];
        proptest::collection::vec(op, 1..120)
    }

    /// Runs `ops` on an index and on a `HashMap` model, with hashes from `hash_of_id`, and
    /// checks they agree after every step. Returns whether any insert was refused.
    fn run_against_model(
        ops: &[Op],
        ids: u32,
        check_load: bool,
        hash_of_id: impl Fn(u32) -> u64,
    ) -> bool {
        let hash_of = |location: u32| hash_of_id(id_of(location));
        let mut index = KeyIndex::new();
        let mut model: HashMap<u32, u32> = HashMap::new();
        let mut generation = 0u32;
        let mut refused = false;
        let mut insert = |index: &mut KeyIndex, model: &mut HashMap<u32, u32>, id: u32| {
            if model.contains_key(&id) {
                return;
            }
            generation = (generation + 1) % (1 << (32 - ID_BITS));
            let location = id | (generation << ID_BITS);
            if index.insert(hash_of_id(id), location, hash_of) {
                model.insert(id, location);
            } else {
                refused = true;
            }
        };
        for op in ops {
            match *op {
                Op::Insert(id) => insert(&mut index, &mut model, id),
                Op::InsertRange(from, count) => {
                    for id in from..(from + count).min(ids) {
                        insert(&mut index, &mut model, id);
                    }
                }
                Op::Remove(id) => {
                    let location = model.remove(&id).unwrap_or(u32::MAX);
                    assert_eq!(
                        index.remove(hash_of_id(id), location, hash_of),
                        location != u32::MAX
                    );
                }
                Op::Repoint(id) => {
                    if let Some(location) = model.get_mut(&id) {
                        let moved = *location ^ (1 << ID_BITS);
                        assert!(index.repoint(hash_of_id(id), *location, moved));
                        *location = moved;
                    }
                }
                Op::RemoveAll => {
                    for (id, location) in model.drain() {
                        assert!(index.remove(hash_of_id(id), location, hash_of));
                    }
                }
            }
            assert_eq!(index.len(), model.len());
            index.check_invariants(hash_of);
            if check_load {
                assert!(
                    index.load_at_least_min(),
                    "{} entries in {} slots",
                    index.len(),
                    index.slots()
                );
            }
        }
        for id in 0..ids {
            let found = index.find(hash_of_id(id), |location| id_of(location) == id);
            assert_eq!(found, model.get(&id).copied(), "id {id}");
        }
        let mut stored: Vec<u32> = index.locations().collect();
        let mut expected: Vec<u32> = model.values().copied().collect();
        stored.sort_unstable();
        expected.sort_unstable();
        assert_eq!(stored, expected);
        refused
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Well-spread hashes: the index agrees with a `HashMap` through inserts, removals,
        /// repoints, growth and shrinking, and never refuses an insert.
        #[test]
        fn agrees_with_a_map_model(ops in ops(5000)) {
            let refused = run_against_model(&ops, 5000, true, |id| mix(u64::from(id)));
            prop_assert!(!refused);
        }

        /// Hashes that collide in whole or in their high bits (the home slot) or their tag:
        /// long runs, ties, forced growth and refused inserts; still the model's answers.
        #[test]
        fn agrees_with_a_map_model_under_collisions(ops in ops(2000), groups in 1..64u64) {
            run_against_model(&ops, 2000, false, |id| mix(u64::from(id) % groups) ^ u64::from(id % 3));
        }
    }

    #[test]
    fn a_full_set_of_equal_hashes_is_refused_not_grown_without_end() {
        let mut index = KeyIndex::new();
        let hash_of = |_location: u32| 42u64;
        let stored = (0..2 * PROBE_LIMIT as u32)
            .filter(|&location| index.insert(42, location, hash_of))
            .count();
        assert!(stored >= PROBE_LIMIT - 1, "stored {stored}");
        assert!(stored <= PROBE_LIMIT, "stored {stored}");
        assert!(index.slots() < 8 * PROBE_LIMIT);
    }

    /// The table grows and shrinks in steps of about an eighth, never doubles, and holds at
    /// most 8 bytes an entry beyond its smallest size.
    #[test]
    fn grows_and_shrinks_in_small_steps_and_stays_three_quarters_full() {
        let hash_of = |location: u32| mix(u64::from(location));
        let mut index = KeyIndex::new();
        let mut sizes = vec![0];
        let fixed = FIXED_BYTES_MAX;
        for location in 0..200_000u32 {
            assert!(index.insert(hash_of(location), location, hash_of));
            if index.slots() != *sizes.last().unwrap_or(&0) {
                sizes.push(index.slots());
            }
            assert!(index.bytes() <= index.len() * 8 + fixed);
        }
        for pair in sizes.windows(2).skip(4) {
            let growth = pair[1] as f64 / pair[0] as f64;
            assert!(growth < 1.2, "grew {} → {}", pair[0], pair[1]);
        }
        for location in 0..190_000u32 {
            assert!(index.remove(hash_of(location), location, hash_of));
            assert!(index.bytes() <= index.len() * 8 + fixed);
        }
        index.check_invariants(hash_of);
        let rehashed_per_insert = index.rehashed() as f64 / 390_000.0;
        assert!(rehashed_per_insert < 20.0, "{rehashed_per_insert}");
    }
}
