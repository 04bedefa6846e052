//! One shard: items appended inline (header, key and short value together) to the shard's
//! segments, found through a slot table and a compact hash index of slot numbers, and
//! threaded on an intrusive doubly linked LRU list whose links live in the items' headers.
//! Everything here runs under the shard's mutex.
//!
//! ```text
//!   index: HashTable<u32 slot>   (the key is compared in the item itself)
//!   slots: [u64]                 segment number << 32 | offset of the item's record
//!   segments: [Segment]          records appended one after the other:
//!          key_len u8 · state u8 · flags u32 · cas u64 · expiry u64 · last_access u64
//!          · newer u32 · older u32 · value_len u32 · slot u32
//!          · key · value (inline below EXTERNAL_VALUE_MIN)
//!   external: slot → Bytes       long values, in allocations of their own
//! ```
//!
//! A removed or replaced item leaves its record dead where it is. A segment whose items are
//! all dead is unmapped at once; when the dead bytes pass a sixteenth of the shard's
//! segments (and half a segment), the segment with the most dead bytes is compacted: its
//! live records are appended to the open segment (their slots repointed; the index and the
//! LRU links hold slot numbers, so nothing else moves) and it is unmapped. Memory freed by
//! one item size is so reused by any other, and the process never keeps more than about a
//! sixteenth more than the live items' records.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use bytes::Bytes;
use hashbrown::HashTable;

use crate::class::{size_class, SIZE_CLASS_LIMIT};
use crate::item::{
    external_copy, item_footprint, item_size, Item, EXTERNAL_VALUE_MIN, INLINE_HEADER_BYTES,
    STATE_EXTERNAL_VALUE, STATE_FETCHED,
};
use crate::ops::ClassStats;
use crate::segment::Segment;
use crate::time::{Expiry, UnixSecs};

const NIL: u32 = u32::MAX;
/// A slot that holds no item.
const VACANT: u64 = u64::MAX;

const OFFSET_KEY_LEN: usize = 0;
const OFFSET_STATE: usize = 1;
const OFFSET_FLAGS: usize = 2;
const OFFSET_CAS: usize = 6;
const OFFSET_EXPIRY: usize = 14;
const OFFSET_ACCESS: usize = 22;
const OFFSET_NEWER: usize = 30;
const OFFSET_OLDER: usize = 34;
const OFFSET_VALUE_LEN: usize = 38;
const OFFSET_SLOT: usize = 42;
/// The stored expiry of an item that never expires ([`Expiry::from_protocol`] never
/// produces this second).
const EXPIRY_NEVER: u64 = u64::MAX;
/// Compaction starts once dead bytes are more than this fraction of the appended bytes.
const DEAD_FRACTION_DIVISOR: usize = 16;

fn read_u32(data: &[u8], offset: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&data[offset..offset + 4]);
    u32::from_le_bytes(raw)
}

fn read_u64(data: &[u8], offset: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&data[offset..offset + 8]);
    u64::from_le_bytes(raw)
}

fn write_u32(data: &mut [u8], offset: usize, value: u32) {
    data[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

fn write_u64(data: &mut [u8], offset: usize, value: u64) {
    data[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

fn encode_expiry(expiry: Expiry) -> u64 {
    match expiry {
        Expiry::Never => EXPIRY_NEVER,
        Expiry::At(at) => at.0.min(EXPIRY_NEVER - 1),
    }
}

fn decode_expiry(raw: u64) -> Expiry {
    if raw == EXPIRY_NEVER {
        Expiry::Never
    } else {
        Expiry::At(UnixSecs(raw))
    }
}

fn key_of(data: &[u8]) -> &[u8] {
    let key_len = usize::from(data[OFFSET_KEY_LEN]);
    &data[INLINE_HEADER_BYTES..INLINE_HEADER_BYTES + key_len]
}

/// Length of the record that starts `data`: header, key and inline value.
fn record_len(data: &[u8]) -> usize {
    INLINE_HEADER_BYTES
        + usize::from(data[OFFSET_KEY_LEN])
        + read_u32(data, OFFSET_VALUE_LEN) as usize
}

fn location(segment: usize, offset: usize) -> u64 {
    ((segment as u64) << 32) | offset as u64
}

fn split_location(location: u64) -> (usize, usize) {
    ((location >> 32) as usize, (location & 0xffff_ffff) as usize)
}

/// Length of the record `item` under `key` takes: header, key and inline value.
fn record_len_of(key: &[u8], item: &Item) -> usize {
    let inline_len = if item.value.len() >= EXTERNAL_VALUE_MIN {
        0
    } else {
        item.value.len()
    };
    INLINE_HEADER_BYTES + key.len().min(usize::from(u8::MAX)) + inline_len
}

/// Writes the record of `item` under `key` for `slot` into `data` (exactly
/// [`record_len_of`] bytes), with unset links; a long value is returned apart, copied into
/// an allocation of its own.
fn write_record(data: &mut [u8], key: &[u8], item: &Item, slot: u32) -> Option<Bytes> {
    let external = item.value.len() >= EXTERNAL_VALUE_MIN;
    let inline_len = if external { 0 } else { item.value.len() };
    let key_len = u8::try_from(key.len()).unwrap_or(u8::MAX);
    let key = &key[..usize::from(key_len)];
    data[OFFSET_KEY_LEN] = key_len;
    let external_bit = if external { STATE_EXTERNAL_VALUE } else { 0 };
    data[OFFSET_STATE] = (item.state & !STATE_EXTERNAL_VALUE) | external_bit;
    write_u32(data, OFFSET_FLAGS, item.flags);
    write_u64(data, OFFSET_CAS, item.cas);
    write_u64(data, OFFSET_EXPIRY, encode_expiry(item.expiry));
    write_u64(data, OFFSET_ACCESS, item.last_access.0);
    write_u32(data, OFFSET_NEWER, NIL);
    write_u32(data, OFFSET_OLDER, NIL);
    write_u32(data, OFFSET_VALUE_LEN, inline_len as u32);
    write_u32(data, OFFSET_SLOT, slot);
    data[INLINE_HEADER_BYTES..INLINE_HEADER_BYTES + key.len()].copy_from_slice(key);
    if external {
        Some(external_copy(&item.value))
    } else {
        data[INLINE_HEADER_BYTES + key.len()..].copy_from_slice(&item.value);
        None
    }
}

/// The record of the item in `slot`, if the slot is occupied.
fn record<'a>(slots: &[u64], segments: &'a [Option<Segment>], slot: u32) -> Option<&'a [u8]> {
    let location = *slots.get(slot as usize)?;
    if location == VACANT {
        return None;
    }
    let (segment, offset) = split_location(location);
    let data = segments.get(segment)?.as_ref()?.records_at(offset);
    Some(&data[..record_len(data)])
}

/// An item's header fields without its value (what the crawler, eviction and the dumps
/// look at).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub key_len: usize,
    pub value_len: usize,
    pub flags: u32,
    pub expiry: Expiry,
    pub cas: u64,
    pub last_access: UnixSecs,
    pub state: u8,
}

impl Header {
    pub fn size(&self) -> u64 {
        item_size(self.key_len, self.value_len, self.flags)
    }

    pub fn footprint(&self) -> u64 {
        item_footprint(self.key_len, self.value_len)
    }

    pub fn has(&self, bit: u8) -> bool {
        self.state & bit != 0
    }
}
/// Counters kept per shard under its lock and summed by `Store::stats`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ShardCounters {
    pub total_items: u64,
    pub evictions: u64,
    pub evicted_unfetched: u64,
    pub expired_unfetched: u64,
    pub reclaimed: u64,
    pub crawler_reclaimed: u64,
    pub crawler_items_checked: u64,
    pub get_expired: u64,
    pub get_flushed: u64,
}

/// The flush_all watermark, copied out of the store's atomics once per
/// operation (memcached's `settings.oldest_live` / `settings.oldest_cas`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FlushMark {
    /// `None` = no flush yet; else items last accessed at or before this
    /// second are invalid once `now >= oldest_live`.
    pub oldest_live: Option<u64>,
    /// 0 = none; else items with a CAS below it are invalid (same condition).
    pub oldest_cas: u64,
}

impl FlushMark {
    pub fn flushes(&self, last_access: UnixSecs, cas: u64, now: UnixSecs) -> bool {
        let Some(oldest_live) = self.oldest_live else {
            return false;
        };
        if oldest_live > now.0 {
            return false;
        }
        last_access.0 <= oldest_live || (self.oldest_cas != 0 && cas != 0 && cas < self.oldest_cas)
    }
}

/// True if an item with this header is neither expired nor flushed at `now`.
pub(crate) fn is_live(header: &Header, now: UnixSecs, flush: &FlushMark) -> bool {
    !header.expiry.is_expired(now) && !flush.flushes(header.last_access, header.cas, now)
}

#[derive(Debug)]
pub(crate) struct ShardState {
    hasher: ahash::RandomState,
    index: HashTable<u32>,
    /// Where each slot's record is ([`location`]), [`VACANT`] for a free slot.
    slots: Vec<u64>,
    /// Vacated slots, lowest first so that items gather at the front and the table's
    /// free tail can be cut off. An entry may be stale (its slot reused or cut off):
    /// it is checked when taken.
    free: BinaryHeap<Reverse<u32>>,
    /// The segments, by number; `None` for a number free for reuse.
    segments: Vec<Option<Segment>>,
    /// The segment new records are appended to.
    open: Option<usize>,
    /// Size of a new segment.
    segment_bytes: usize,
    /// Bytes appended over all segments.
    segment_used: usize,
    /// Of those, bytes of records no longer stored.
    segment_dead: usize,
    /// Values of [`EXTERNAL_VALUE_MIN`] bytes or more, by slot.
    external: HashMap<u32, Bytes, ahash::RandomState>,
    head: u32,
    tail: u32,
    /// Sum of `item_size` over the items in this shard.
    pub bytes: u64,
    /// Sum of `item_footprint` over the items in this shard.
    pub footprint: u64,
    pub counters: ShardCounters,
    /// Per size class ([`size_class`]) figures, indexed by class id.
    pub classes: [ClassStats; SIZE_CLASS_LIMIT],
    /// Next slot the expiry crawler looks at.
    pub crawl_cursor: usize,
}

impl ShardState {
    /// An empty shard whose segments are `segment_bytes` long (they must hold the longest
    /// inline item).
    pub fn new(hasher: ahash::RandomState, segment_bytes: usize) -> ShardState {
        ShardState {
            external: HashMap::with_hasher(hasher.clone()),
            hasher,
            index: HashTable::new(),
            slots: Vec::new(),
            free: BinaryHeap::new(),
            segments: Vec::new(),
            open: None,
            segment_bytes,
            segment_used: 0,
            segment_dead: 0,
            head: NIL,
            tail: NIL,
            bytes: 0,
            footprint: 0,
            counters: ShardCounters::default(),
            classes: [ClassStats::default(); SIZE_CLASS_LIMIT],
            crawl_cursor: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Buckets the key index has room for.
    pub fn index_capacity(&self) -> usize {
        self.index.capacity()
    }

    /// Bytes appended to this shard's segments and not yet given back (live and dead
    /// records).
    #[cfg(test)]
    pub fn segment_used(&self) -> usize {
        self.segment_used
    }

    pub fn lookup(&self, key: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one(key);
        let (slots, segments) = (&self.slots, &self.segments);
        self.index
            .find(hash, |&slot| match record(slots, segments, slot) {
                Some(data) => key_of(data) == key,
                None => false,
            })
            .copied()
    }

    fn data(&self, slot: u32) -> &[u8] {
        match record(&self.slots, &self.segments, slot) {
            Some(data) => data,
            // Slots come only from the index or the list, which point at
            // occupied slots; anything else is a bug in this module.
            None => unreachable!("shard slot {slot} is not occupied"),
        }
    }

    fn data_mut(&mut self, slot: u32) -> &mut [u8] {
        let location = self.slots.get(slot as usize).copied().unwrap_or(VACANT);
        let (segment, offset) = split_location(location);
        match self.segments.get_mut(segment) {
            Some(Some(segment)) if location != VACANT => {
                let data = segment.records_at_mut(offset);
                let len = record_len(data);
                &mut data[..len]
            }
            _ => unreachable!("shard slot {slot} is not occupied"),
        }
    }

    /// The key of the item in `slot`.
    pub fn key(&self, slot: u32) -> &[u8] {
        key_of(self.data(slot))
    }

    /// The header fields of the item in `slot`.
    pub fn header(&self, slot: u32) -> Header {
        let data = self.data(slot);
        let key_len = usize::from(data[OFFSET_KEY_LEN]);
        let state = data[OFFSET_STATE];
        let value_len = if state & STATE_EXTERNAL_VALUE != 0 {
            self.external.get(&slot).map_or(0, Bytes::len)
        } else {
            read_u32(data, OFFSET_VALUE_LEN) as usize
        };
        Header {
            key_len,
            value_len,
            flags: read_u32(data, OFFSET_FLAGS),
            expiry: decode_expiry(read_u64(data, OFFSET_EXPIRY)),
            cas: read_u64(data, OFFSET_CAS),
            last_access: UnixSecs(read_u64(data, OFFSET_ACCESS)),
            state,
        }
    }

    /// The item in `slot` with its value: a copy of an inline value, a shared handle on an
    /// external one.
    pub fn item(&self, slot: u32) -> Item {
        let header = self.header(slot);
        let value = if header.has(STATE_EXTERNAL_VALUE) {
            self.external.get(&slot).cloned().unwrap_or_default()
        } else {
            let start = INLINE_HEADER_BYTES + header.key_len;
            Bytes::copy_from_slice(&self.data(slot)[start..])
        };
        Item {
            key_len: header.key_len,
            value,
            flags: header.flags,
            expiry: header.expiry,
            cas: header.cas,
            last_access: header.last_access,
            state: header.state & !STATE_EXTERNAL_VALUE,
        }
    }

    fn link(&self, slot: u32, offset: usize) -> u32 {
        read_u32(self.data(slot), offset)
    }

    fn set_link(&mut self, slot: u32, offset: usize, to: u32) {
        write_u32(self.data_mut(slot), offset, to);
    }

    /// Most recently used slot, if any.
    pub fn head(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// The slot just less recently used than `slot`.
    pub fn older_than(&self, slot: u32) -> Option<u32> {
        let older = self.link(slot, OFFSET_OLDER);
        (older != NIL).then_some(older)
    }

    /// Least recently used slot, if any.
    pub fn tail(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }

    /// The slot just more recently used than `slot`.
    pub fn newer_than(&self, slot: u32) -> Option<u32> {
        let newer = self.link(slot, OFFSET_NEWER);
        (newer != NIL).then_some(newer)
    }

    /// Last access second of the LRU tail, `u64::MAX` when empty. Published
    /// to other threads so eviction can pick the shard with the oldest tail.
    pub fn oldest_access(&self) -> u64 {
        match self.tail() {
            Some(slot) => read_u64(self.data(slot), OFFSET_ACCESS),
            None => u64::MAX,
        }
    }

    fn detach(&mut self, slot: u32) {
        let newer = self.link(slot, OFFSET_NEWER);
        let older = self.link(slot, OFFSET_OLDER);
        if newer != NIL {
            self.set_link(newer, OFFSET_OLDER, older);
        } else {
            self.head = older;
        }
        if older != NIL {
            self.set_link(older, OFFSET_NEWER, newer);
        } else {
            self.tail = newer;
        }
        self.set_link(slot, OFFSET_NEWER, NIL);
        self.set_link(slot, OFFSET_OLDER, NIL);
    }

    fn attach_head(&mut self, slot: u32) {
        let old_head = self.head;
        self.set_link(slot, OFFSET_NEWER, NIL);
        self.set_link(slot, OFFSET_OLDER, old_head);
        if old_head != NIL {
            self.set_link(old_head, OFFSET_NEWER, slot);
        } else {
            self.tail = slot;
        }
        self.head = slot;
    }

    /// Marks the item read at `now` and moves it to the LRU head.
    pub fn bump(&mut self, slot: u32, now: UnixSecs) {
        let data = self.data_mut(slot);
        data[OFFSET_STATE] |= STATE_FETCHED;
        write_u64(data, OFFSET_ACCESS, now.0);
        self.relink_head(slot);
    }

    /// Moves the item to the LRU head and updates its last access without
    /// marking it fetched (memcached's `do_item_update`, e.g. a failed add).
    pub fn refresh(&mut self, slot: u32, now: UnixSecs) {
        write_u64(self.data_mut(slot), OFFSET_ACCESS, now.0);
        self.relink_head(slot);
    }

    fn relink_head(&mut self, slot: u32) {
        if self.head != slot {
            self.detach(slot);
            self.attach_head(slot);
        }
    }

    /// Writes `item`'s header fields (not its links) and, if it changed without changing
    /// length, its value back into `slot`: an in-place update (meta flags, touch, an incr
    /// whose result fits).
    pub fn write_back(&mut self, slot: u32, item: &Item) {
        let external = self.data(slot)[OFFSET_STATE] & STATE_EXTERNAL_VALUE;
        if external != 0 {
            if let Some(value) = self.external.get_mut(&slot) {
                if value.as_ptr() != item.value.as_ptr() && value.len() == item.value.len() {
                    *value = external_copy(&item.value);
                }
            }
        }
        let data = self.data_mut(slot);
        data[OFFSET_STATE] = (item.state & !STATE_EXTERNAL_VALUE) | external;
        write_u32(data, OFFSET_FLAGS, item.flags);
        write_u64(data, OFFSET_CAS, item.cas);
        write_u64(data, OFFSET_EXPIRY, encode_expiry(item.expiry));
        write_u64(data, OFFSET_ACCESS, item.last_access.0);
        if external == 0 {
            let start = INLINE_HEADER_BYTES + item.key_len;
            if data.len() - start == item.value.len() && data[start..] != item.value[..] {
                data[start..].copy_from_slice(&item.value);
            }
        }
    }

    /// A segment with room for `len` more bytes, becoming the open one if it is new.
    fn open_segment_with_room(&mut self, len: usize) -> usize {
        if let Some(open) = self.open {
            if let Some(Some(segment)) = self.segments.get(open) {
                if segment.room() >= len {
                    return open;
                }
            }
        }
        let number = match self.segments.iter().position(Option::is_none) {
            Some(number) => number,
            None => {
                self.segments.push(None);
                self.segments.len() - 1
            }
        };
        self.segments[number] = Some(Segment::new(self.segment_bytes.max(len)));
        let previous = self.open.replace(number);
        if let Some(previous) = previous {
            self.free_segment_if_dead(previous);
        }
        number
    }

    /// Unmaps segment `number` if none of its records is stored any more.
    fn free_segment_if_dead(&mut self, number: usize) {
        let Some(Some(segment)) = self.segments.get(number) else {
            return;
        };
        if segment.live() > 0 {
            return;
        }
        if self.open == Some(number) {
            self.open = None;
        }
        self.segment_used -= segment.used;
        self.segment_dead -= segment.dead;
        self.segments[number] = None;
        while matches!(self.segments.last(), Some(None)) {
            self.segments.pop();
        }
    }

    /// Appends the record of `item` under `key` for `slot`, with unset links; a long value
    /// is returned apart, copied into an allocation of its own.
    fn append_record(&mut self, key: &[u8], item: &Item, slot: u32) -> (u64, Option<Bytes>) {
        let len = record_len_of(key, item);
        let number = self.open_segment_with_room(len);
        self.segment_used += len;
        let Some(Some(segment)) = self.segments.get_mut(number) else {
            unreachable!("segment {number} was just opened");
        };
        let (offset, data) = segment.append(len);
        let value = write_record(data, key, item, slot);
        (location(number, offset), value)
    }

    /// Marks the record at `location` dead and frees its segment if nothing in it is
    /// stored any more.
    fn bury(&mut self, location: u64) {
        let (number, offset) = split_location(location);
        let Some(Some(segment)) = self.segments.get_mut(number) else {
            return;
        };
        let len = record_len(segment.records_at(offset));
        segment.dead += len;
        self.segment_dead += len;
        self.free_segment_if_dead(number);
    }

    /// Compacts segments while their dead bytes are more than a sixteenth of what has been
    /// appended (and at least half a segment): the segment with the most dead bytes has its
    /// live records moved to the open segment and is unmapped.
    fn compact_if_due(&mut self) {
        while self.segment_dead >= self.segment_bytes / 2
            && self.segment_dead * DEAD_FRACTION_DIVISOR > self.segment_used
        {
            let victim = self
                .segments
                .iter()
                .enumerate()
                .filter(|&(number, _)| Some(number) != self.open)
                .filter_map(|(number, segment)| Some((number, segment.as_ref()?.dead)))
                .max_by_key(|&(_, dead)| dead);
            match victim {
                Some((number, dead)) if dead > 0 => self.compact(number),
                _ => break,
            }
        }
    }

    /// Moves the live records of segment `number` to the open segment and unmaps it.
    fn compact(&mut self, number: usize) {
        // A placeholder keeps the number taken while the records move, so that no record
        // is appended under a location a stale record of this segment still names.
        let Some(segment) = self
            .segments
            .get_mut(number)
            .and_then(|entry| entry.replace(Segment::placeholder()))
        else {
            return;
        };
        self.segment_used -= segment.used;
        self.segment_dead -= segment.dead;
        let mut offset = 0;
        while offset < segment.used {
            let data = segment.records_at(offset);
            let len = record_len(data);
            let record = &data[..len];
            let slot = read_u32(record, OFFSET_SLOT);
            if self.slots.get(slot as usize) == Some(&location(number, offset)) {
                let target = self.open_segment_with_room(len);
                self.segment_used += len;
                if let Some(Some(open)) = self.segments.get_mut(target) {
                    let (new_offset, destination) = open.append(len);
                    destination.copy_from_slice(record);
                    self.slots[slot as usize] = location(target, new_offset);
                }
            }
            offset += len;
        }
        self.segments[number] = None;
        while matches!(self.segments.last(), Some(None)) {
            self.segments.pop();
        }
    }

    fn account_added(&mut self, size: u64, footprint: u64) {
        self.bytes += size;
        self.footprint += footprint;
        let class = &mut self.classes[size_class(size)];
        class.number += 1;
        class.mem_requested += size;
    }

    fn account_removed(&mut self, header: &Header) {
        let size = header.size();
        self.bytes -= size;
        self.footprint -= header.footprint();
        let class = &mut self.classes[size_class(size)];
        class.number -= 1;
        class.mem_requested -= size;
    }

    /// Inserts a new item under `key` at the LRU head. The key must not be present.
    pub fn insert(&mut self, key: &[u8], item: &Item) -> u32 {
        self.account_added(item.size(), item.footprint());
        self.counters.total_items += 1;
        let slot = match self.take_free_slot() {
            Some(slot) => slot,
            None => {
                if self.slots.len() == self.slots.capacity() {
                    // Grow by a quarter, not double: the table's slack is memory the
                    // limit does not see.
                    self.slots.reserve_exact(self.slots.len() / 4 + 16);
                }
                self.slots.push(VACANT);
                (self.slots.len() - 1) as u32
            }
        };
        let (location, value) = self.append_record(key, item, slot);
        self.slots[slot as usize] = location;
        if let Some(value) = value {
            self.external.insert(slot, value);
        }
        let hash = self.hasher.hash_one(key);
        let (hasher, slots, segments) = (&self.hasher, &self.slots, &self.segments);
        self.index
            .insert_unique(hash, slot, |&other| match record(slots, segments, other) {
                Some(data) => hasher.hash_one(key_of(data)),
                None => 0,
            });
        self.attach_head(slot);
        slot
    }

    /// Replaces the item in `slot` (same key) and moves it to the LRU head.
    /// Returns the old item's header.
    pub fn replace(&mut self, slot: u32, item: &Item) -> Header {
        let old = self.header(slot);
        self.account_added(item.size(), item.footprint());
        self.counters.total_items += 1;
        self.account_removed(&old);
        let newer = self.link(slot, OFFSET_NEWER);
        let older = self.link(slot, OFFSET_OLDER);
        let mut key = [0u8; u8::MAX as usize];
        let key_len = self.key(slot).len();
        key[..key_len].copy_from_slice(self.key(slot));
        let old_location = self.slots[slot as usize];
        let value = if record_len_of(&key[..key_len], item) == self.data(slot).len() {
            // Same length (an overwrite with a value as long as the old one): in place,
            // leaving no dead record behind.
            write_record(self.data_mut(slot), &key[..key_len], item, slot)
        } else {
            let (new_location, value) = self.append_record(&key[..key_len], item, slot);
            self.slots[slot as usize] = new_location;
            self.bury(old_location);
            value
        };
        self.set_link(slot, OFFSET_NEWER, newer);
        self.set_link(slot, OFFSET_OLDER, older);
        match value {
            Some(value) => {
                self.external.insert(slot, value);
            }
            None => {
                self.external.remove(&slot);
            }
        }
        self.relink_head(slot);
        self.compact_if_due();
        old
    }

    /// Unlinks the item in `slot`, frees it and returns its header.
    pub fn remove(&mut self, slot: u32) -> Header {
        let header = self.header(slot);
        self.detach(slot);
        let hash = self.hasher.hash_one(self.key(slot));
        if let Ok(entry) = self.index.find_entry(hash, |&other| other == slot) {
            entry.remove();
        }
        let location = std::mem::replace(&mut self.slots[slot as usize], VACANT);
        self.bury(location);
        if header.has(STATE_EXTERNAL_VALUE) {
            self.external.remove(&slot);
        }
        self.free.push(Reverse(slot));
        self.account_removed(&header);
        self.shrink_if_sparse();
        self.compact_if_due();
        header
    }

    /// The lowest vacated slot still inside the table, if any.
    fn take_free_slot(&mut self) -> Option<u32> {
        while let Some(Reverse(slot)) = self.free.pop() {
            if self.slots.get(slot as usize) == Some(&VACANT) {
                return Some(slot);
            }
        }
        None
    }

    /// Gives back the memory of a table that holds far fewer items than it once did (a
    /// fill with small items followed by large ones): the slot table loses its vacant
    /// tail, and both it and the key index shrink once a quarter full.
    fn shrink_if_sparse(&mut self) {
        while self.slots.last() == Some(&VACANT) {
            self.slots.pop();
        }
        if self.slots.capacity() > 64 && self.slots.len() < self.slots.capacity() / 4 {
            self.slots.shrink_to(self.slots.len() * 2);
            let live = self.slots.len();
            self.free.retain(|&Reverse(slot)| (slot as usize) < live);
            self.free.shrink_to_fit();
        }
        if self.index.capacity() > 64 && self.index.len() < self.index.capacity() / 4 {
            let (hasher, slots, segments) = (&self.hasher, &self.slots, &self.segments);
            self.index.shrink_to(self.index.len() * 2, |&other| {
                match record(slots, segments, other) {
                    Some(data) => hasher.hash_one(key_of(data)),
                    None => 0,
                }
            });
        }
    }

    /// The figures of the size class of an item of accounted size `size`.
    pub fn class_of(&mut self, size: u64) -> &mut ClassStats {
        &mut self.classes[size_class(size)]
    }

    /// Zeroes the counters (`stats reset`); what the shard holds stays counted.
    pub fn reset_counters(&mut self) {
        self.counters = ShardCounters::default();
        for class in &mut self.classes {
            *class = ClassStats {
                number: class.number,
                mem_requested: class.mem_requested,
                ..ClassStats::default()
            };
        }
    }

    /// Number of slots (occupied or free), the crawler's range.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The header of the item in `slot` if the slot is occupied.
    pub fn slot_header(&self, slot: usize) -> Option<Header> {
        match self.slots.get(slot) {
            Some(&location) if location != VACANT => Some(self.header(slot as u32)),
            _ => None,
        }
    }

    /// Checks the list and index agree (tests only).
    #[cfg(test)]
    pub fn check_invariants(&self) {
        let mut count = 0usize;
        let mut bytes = 0u64;
        let mut footprint = 0u64;
        let mut slot = self.head;
        let mut newer = NIL;
        while slot != NIL {
            assert_eq!(self.link(slot, OFFSET_NEWER), newer, "broken back link");
            assert_eq!(self.lookup(self.key(slot)), Some(slot));
            let header = self.header(slot);
            assert_eq!(
                header.has(STATE_EXTERNAL_VALUE),
                self.external.contains_key(&slot)
            );
            count += 1;
            bytes += header.size();
            footprint += header.footprint();
            newer = slot;
            slot = self.link(slot, OFFSET_OLDER);
        }
        assert_eq!(self.tail, newer);
        assert_eq!(count, self.index.len());
        let vacant = self.slots.iter().filter(|&&slot| slot == VACANT).count();
        assert_eq!(count + vacant, self.slots.len());
        assert_eq!(self.external.len(), {
            let mut external = 0;
            for index in 0..self.slots.len() {
                if let Some(header) = self.slot_header(index) {
                    external += usize::from(header.has(STATE_EXTERNAL_VALUE));
                }
            }
            external
        });
        assert_eq!(bytes, self.bytes);
        assert_eq!(footprint, self.footprint);
        // Segments: the live records are exactly the ones the slots point at, and the
        // running totals match.
        let (mut used, mut dead, mut live_records) = (0usize, 0usize, 0usize);
        for (number, segment) in self.segments.iter().enumerate() {
            let Some(segment) = segment else { continue };
            assert!(
                segment.live() > 0 || self.open == Some(number),
                "dead segment kept"
            );
            used += segment.used;
            dead += segment.dead;
            let mut offset = 0;
            let mut live_bytes = 0;
            while offset < segment.used {
                let data = segment.records_at(offset);
                let len = record_len(data);
                let slot = read_u32(data, OFFSET_SLOT) as usize;
                if self.slots.get(slot) == Some(&location(number, offset)) {
                    live_records += 1;
                    live_bytes += len;
                }
                offset += len;
            }
            assert_eq!(offset, segment.used);
            assert_eq!(live_bytes, segment.live());
        }
        assert_eq!(live_records, count);
        assert_eq!((used, dead), (self.segment_used, self.segment_dead));
    }
}
