//! One shard: items appended inline (header, key and short value together) to the shard's
//! segments, found through a compact hash index of the records' locations, and evicted by
//! requests per byte among the oldest records and the newest. Everything here runs under
//! the shard's mutex.
//!
//! ```text
//!   index: KeyIndex          segment number << offset bits | offset of the item's record,
//!                            6-byte slots without tombstones (the key is compared in the
//!                            record itself)
//!   segments: [Segment]      records appended one after the other, oldest segment first
//!                            in `fifo`:
//!          key_len u8 · state u8 · inline_len u16 (its top bit: flags follow; bits
//!                12–14: the read level)
//!          · expiry u32 · last_access u32 · cas u64 · [flags u32, when not 0]
//!          · key · value (or a 4-byte external id)
//!   external: [Bytes]        values of EXTERNAL_VALUE_MIN bytes or more, by id
//! ```
//!
//! A removed or replaced item leaves its record dead where it is (its `STATE_DEAD` bit set).
//! A segment whose items are all dead is unmapped at once; when the dead bytes outside the
//! oldest segment pass a sixteenth of the shard's segments (and half a segment), the
//! segment with the most dead bytes is compacted: its live records are appended to the open
//! segment, their index entries repointed, and it is unmapped.
//!
//! Eviction chooses by requests per byte: among the [`EVICTION_WINDOW`] oldest records (from
//! the eviction cursor, in the oldest segments) and the [`EVICTION_RECENT`] items stored
//! last (their locations kept in a ring; one whose record is dead is gone), it evicts the
//! one of the fewest requests over its footprint (ties: the oldest); then up to
//! [`EVICTION_MOVES`] records at the cursor before the chosen one are moved to the open
//! segment (reinserted), so the oldest segment empties record by record and is unmapped
//! when nothing in it is stored any more. An item's requests are 2^level, its record's read
//! level (three bits; a read raises level `l` with probability 2^−`l`, a move of a record
//! not read since the last one lowers it by one); a new record's level starts from the
//! shard's [`ReadSketch`] of the key's requests while it was not stored. No key is hashed
//! and no index entry looked up for a candidate.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::class::size_class;
use crate::index::KeyIndex;
use crate::item::{
    external_copy, inline_header_len, item_footprint, item_size, Item, ItemRef, ItemView,
    EXTERNAL_VALUE_MIN, INLINE_HEADER_BYTES, STATE_BINARY_KEY, STATE_EXTERNAL_VALUE, STATE_FETCHED,
};
use crate::ops::{ClassStats, StoreStats};
use crate::segment::Segment;
use crate::sketch::ReadSketch;
use crate::time::{Expiry, UnixSecs};

/// Record state bit: read (or refreshed) since written or since its last reinsertion.
const STATE_ACCESSED: u8 = 32;
/// Record state bit: the record is no longer stored (removed, replaced or moved).
const STATE_DEAD: u8 = 64;
/// Record state bit: eviction passed over the record at read level 0 without a read since
/// it was written or last moved (marked in place when the choice passes it at the oldest
/// end, or when a move finds it so); it counts no requests then (evicted first), so items
/// never read give way to new ones however small they are. A read clears it.
const STATE_PASSED_UNREAD: u8 = 128;
/// The state bits an [`Item`] carries; the others belong to the record.
const ITEM_STATE_BITS: u8 =
    !(STATE_EXTERNAL_VALUE | STATE_ACCESSED | STATE_DEAD | STATE_PASSED_UNREAD);

// The header's fields, each after the one before: u8, u8, u16, u32, u32, u64, and u32 flags
// only when they are not 0.
const OFFSET_KEY_LEN: usize = 0;
const OFFSET_STATE: usize = OFFSET_KEY_LEN + 1;
const OFFSET_INLINE_LEN: usize = OFFSET_STATE + 1;
const OFFSET_EXPIRY: usize = OFFSET_INLINE_LEN + 2;
const OFFSET_ACCESS: usize = OFFSET_EXPIRY + 4;
const OFFSET_CAS: usize = OFFSET_ACCESS + 4;
const OFFSET_FLAGS: usize = OFFSET_CAS + 8;
const _: () = assert!(OFFSET_FLAGS == INLINE_HEADER_BYTES);
/// The bit of the inline length field that says the flags follow the fixed header.
const INLINE_LEN_HAS_FLAGS: u16 = 0x8000;
/// The inline length proper (an inline value is shorter than 4 KiB).
const INLINE_LEN_MASK: u16 = 0x0fff;
/// The inline length field's bits that count the item's reads, on a log scale (level `l`
/// stands for 2^`l` − 1 reads: a read raises it with probability 2^−`l`, a Morris counter;
/// eviction moving the record lowers it by one, halving the reads): what eviction weighs
/// against the item's bytes.
const INLINE_LEN_LEVEL_SHIFT: u32 = 12;
/// Highest read level (127 reads).
const LEVEL_MAX: u16 = 7;
const _: () =
    assert!((LEVEL_MAX << INLINE_LEN_LEVEL_SHIFT) & (INLINE_LEN_MASK | INLINE_LEN_HAS_FLAGS) == 0);
const _: () = assert!(EXTERNAL_VALUE_MIN <= INLINE_LEN_MASK as usize + 1);
/// Bytes of an external value's id in its record.
const EXTERNAL_ID_BYTES: usize = 4;
/// The stored expiry of an item that never expires.
const EXPIRY_NEVER: u32 = u32::MAX;
/// Compaction starts once dead bytes are more than this fraction of the appended bytes.
const DEAD_FRACTION_DIVISOR: usize = 16;
/// Oldest records eviction chooses among.
pub(crate) const EVICTION_WINDOW: usize = 8;
/// Items stored last that eviction also chooses among.
pub(crate) const EVICTION_RECENT: usize = 16;
/// Records at the eviction cursor moved to the open segment (at most) per eviction.
pub(crate) const EVICTION_MOVES: usize = 2;
/// Bits of a location: 32, the segment number above the offset.
const LOCATION_BITS: u32 = 32;

fn read_u16(data: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([data[offset], data[offset + 1]])
}

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

/// Whole Unix seconds as stored in a record: u32, saturating (until 2106).
fn encode_secs(secs: UnixSecs) -> u32 {
    u32::try_from(secs.0).unwrap_or(EXPIRY_NEVER - 1)
}

fn encode_expiry(expiry: Expiry) -> u32 {
    match expiry {
        Expiry::Never => EXPIRY_NEVER,
        Expiry::At(at) => encode_secs(at).min(EXPIRY_NEVER - 1),
    }
}

fn decode_expiry(raw: u32) -> Expiry {
    if raw == EXPIRY_NEVER {
        Expiry::Never
    } else {
        Expiry::At(UnixSecs(u64::from(raw)))
    }
}

/// Length of the header of the record that starts `data` (with or without flags).
fn header_len(data: &[u8]) -> usize {
    inline_header_len(read_u16(data, OFFSET_INLINE_LEN) & INLINE_LEN_HAS_FLAGS != 0)
}

/// Where the key of the record that starts `data` begins.
fn key_start(data: &[u8]) -> usize {
    header_len(data)
}

/// Where the value (or external id) of the record that starts `data` begins.
fn value_start(data: &[u8]) -> usize {
    key_start(data) + usize::from(data[OFFSET_KEY_LEN])
}

fn key_of(data: &[u8]) -> &[u8] {
    &data[key_start(data)..value_start(data)]
}

/// The read level of the record that starts `data`.
fn level_of(data: &[u8]) -> u16 {
    (read_u16(data, OFFSET_INLINE_LEN) >> INLINE_LEN_LEVEL_SHIFT) & LEVEL_MAX
}

/// Sets the read level of the record that starts `data` (at most [`LEVEL_MAX`]).
fn set_level(data: &mut [u8], level: u16) {
    let field = read_u16(data, OFFSET_INLINE_LEN) & !(LEVEL_MAX << INLINE_LEN_LEVEL_SHIFT);
    let field = field | (level.min(LEVEL_MAX) << INLINE_LEN_LEVEL_SHIFT);
    data[OFFSET_INLINE_LEN..OFFSET_INLINE_LEN + 2].copy_from_slice(&field.to_le_bytes());
}

/// The reads a read level stands for.
fn reads_at_level(level: u16) -> u16 {
    (1 << level.min(LEVEL_MAX)) - 1
}

/// The read level that stands for `reads` reads (rounded down).
fn level_for_reads(reads: u16) -> u16 {
    (u16::BITS - 1 - (reads.saturating_add(1)).leading_zeros()) as u16
}

/// True if an item at read level `level` with `bytes` bytes of footprint is worth more per
/// byte than one at `other_level` with `other_bytes`: requests per byte, 2^level (its reads
/// and the request that missed before it was stored).
fn denser(level: u16, bytes: u64, other_level: u16, other_bytes: u64) -> bool {
    other_bytes << level > bytes << other_level
}

/// Length of the record that starts `data`: header, key and inline value.
fn record_len(data: &[u8]) -> usize {
    value_start(data) + usize::from(read_u16(data, OFFSET_INLINE_LEN) & INLINE_LEN_MASK)
}

/// Bytes a value of `value_len` takes in its record: itself, or an external value's id.
fn inline_len(value_len: usize) -> usize {
    if value_len >= EXTERNAL_VALUE_MIN {
        EXTERNAL_ID_BYTES
    } else {
        value_len
    }
}

/// Length of the record `item` under `key` takes: header, key and inline value.
fn record_len_of(key: &[u8], item: &Item) -> usize {
    inline_header_len(item.flags != 0)
        + key.len().min(usize::from(u8::MAX))
        + inline_len(item.value.len())
}

/// Writes the record of `item` under `key` into `data` (exactly [`record_len_of`] bytes),
/// with `record_bits` of the record's own state; an external value's id is `external_id`.
fn write_record(data: &mut [u8], key: &[u8], item: &Item, record_bits: u8, external_id: u32) {
    let external = item.value.len() >= EXTERNAL_VALUE_MIN;
    let key_len = u8::try_from(key.len()).unwrap_or(u8::MAX);
    let key = &key[..usize::from(key_len)];
    data[OFFSET_KEY_LEN] = key_len;
    let external_bit = if external { STATE_EXTERNAL_VALUE } else { 0 };
    data[OFFSET_STATE] = (item.state & ITEM_STATE_BITS) | external_bit | record_bits;
    let has_flags = if item.flags != 0 {
        INLINE_LEN_HAS_FLAGS
    } else {
        0
    };
    let inline = inline_len(item.value.len()) as u16 | has_flags;
    data[OFFSET_INLINE_LEN..OFFSET_INLINE_LEN + 2].copy_from_slice(&inline.to_le_bytes());
    write_u32(data, OFFSET_EXPIRY, encode_expiry(item.expiry));
    write_u32(data, OFFSET_ACCESS, encode_secs(item.last_access));
    write_u64(data, OFFSET_CAS, item.cas);
    if item.flags != 0 {
        write_u32(data, OFFSET_FLAGS, item.flags);
    }
    let key_start = key_start(data);
    let value_start = key_start + key.len();
    data[key_start..value_start].copy_from_slice(key);
    if external {
        write_u32(data, value_start, external_id);
    } else {
        data[value_start..].copy_from_slice(&item.value);
    }
}

/// The external value id in the record `data` (whose `STATE_EXTERNAL_VALUE` bit is set).
fn external_id_of(data: &[u8]) -> u32 {
    read_u32(data, value_start(data))
}

/// The client flags in the record that starts `data` (0 when not stored).
fn flags_of(data: &[u8]) -> u32 {
    if header_len(data) > OFFSET_FLAGS {
        read_u32(data, OFFSET_FLAGS)
    } else {
        0
    }
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
        item_footprint(self.key_len, self.value_len, self.flags)
    }

    pub fn has(&self, bit: u8) -> bool {
        self.state & bit != 0
    }
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

/// The record at `location` in `segments` (locations split at `offset_bits`), if its
/// segment is mapped.
fn record_in(segments: &[Option<Segment>], offset_bits: u32, location: u32) -> Option<&[u8]> {
    let number = (location >> offset_bits) as usize;
    let offset = (location & ((1 << offset_bits) - 1)) as usize;
    let data = segments.get(number)?.as_ref()?.records_at(offset);
    Some(&data[..record_len(data)])
}

/// An item eviction looks at.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    location: u32,
    level: u16,
    bytes: u64,
    /// [`STATE_PASSED_UNREAD`]: no requests.
    passed_unread: bool,
    dead: bool,
}

/// Hashes the keys of the records that locations name (what the key index re-hashes when it
/// is resized).
struct RecordHashes<'a> {
    hasher: &'a ahash::RandomState,
    segments: &'a [Option<Segment>],
    offset_bits: u32,
}

impl RecordHashes<'_> {
    fn of(&self, location: u32) -> u64 {
        record_in(self.segments, self.offset_bits, location)
            .map_or(0, |data| self.hasher.hash_one(key_of(data)))
    }
}

#[derive(Debug)]
pub(crate) struct ShardState {
    hasher: ahash::RandomState,
    /// Locations of the stored records (segment number above `offset_bits`, offset below).
    index: KeyIndex,
    /// The segments, by number; `None` for a number free for reuse.
    segments: Vec<Option<Segment>>,
    /// Numbers of the mapped segments, oldest first (the open one last).
    fifo: VecDeque<usize>,
    /// The segment new records are appended to.
    open: Option<usize>,
    /// Size of every segment (a power of two).
    segment_bytes: usize,
    /// Bits of a location that hold the offset in its segment.
    offset_bits: u32,
    /// Bytes appended over all segments.
    segment_used: usize,
    /// Of those, bytes of records no longer stored.
    segment_dead: usize,
    /// Values of [`EXTERNAL_VALUE_MIN`] bytes or more, by the id their record holds.
    external: Vec<Option<Bytes>>,
    /// Ids of `external` free for reuse.
    external_free: Vec<u32>,
    /// Where eviction resumes: segment number and offset in the oldest segment; every
    /// record before it there is dead.
    evict_cursor: (usize, usize),
    /// Eviction has taken items from the oldest segment (it is not compacted then: it is
    /// being emptied anyway).
    front_evicting: bool,
    /// Where the expiry crawler resumes: segment number and offset.
    crawl_cursor: (usize, usize),
    /// Requests of keys while they were not stored (`get` misses, and the reads of the items
    /// evicted): where a new item's count of reads starts.
    sketch: ReadSketch,
    /// State of the dice that decide whether a read raises a record's read level
    /// (xorshift64).
    read_dice: u64,
    /// The locations of the items stored last, newest last (some may be gone since: their
    /// records are dead; those of a segment unmapped are dropped with it).
    recent: VecDeque<u32>,
    /// Sum of `item_size` over the items in this shard.
    pub bytes: u64,
    /// Sum of `item_footprint` over the items in this shard.
    pub footprint: u64,
    /// The event counters of `stats` (`total_items`, `evictions` … `get_flushed`) for this
    /// shard, summed by `Store::stats`; its other fields stay 0.
    pub counters: StoreStats,
    /// Per size class ([`size_class`]) figures, indexed by class id, up to the largest
    /// class the shard has counted anything in (grown by [`ShardState::class_of`]): a
    /// shard starts with none, so 64 shards of a store that writes one size hold one
    /// class's figures each, not [`crate::SIZE_CLASS_LIMIT`] (5.5 KiB a shard).
    pub classes: Vec<ClassStats>,
}

impl ShardState {
    /// An empty shard whose segments are `segment_bytes` long: a power of two, large
    /// enough for the longest inline item; its sketch of requests sized for `share_bytes`
    /// of the limit.
    pub fn new(hasher: ahash::RandomState, segment_bytes: usize, share_bytes: u64) -> ShardState {
        let segment_bytes = segment_bytes.next_power_of_two();
        ShardState {
            hasher,
            index: KeyIndex::new(),
            segments: Vec::new(),
            fifo: VecDeque::new(),
            open: None,
            segment_bytes,
            offset_bits: segment_bytes.trailing_zeros(),
            segment_used: 0,
            segment_dead: 0,
            external: Vec::new(),
            external_free: Vec::new(),
            evict_cursor: (usize::MAX, 0),
            front_evicting: false,
            crawl_cursor: (0, 0),
            sketch: ReadSketch::new(share_bytes),
            read_dice: 0x9e37_79b9_7f4a_7c15,
            recent: VecDeque::with_capacity(EVICTION_RECENT),
            bytes: 0,
            footprint: 0,
            counters: StoreStats::default(),
            classes: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Slots of the key index.
    pub fn index_slots(&self) -> usize {
        self.index.slots()
    }

    /// Bytes of the key index's slots.
    pub fn index_bytes(&self) -> usize {
        self.index.bytes()
    }

    /// Index entries re-hashed by its resizes so far.
    pub fn index_rehashed(&self) -> u64 {
        self.index.rehashed()
    }

    /// Bytes appended to this shard's segments and not yet given back (live and dead
    /// records).
    #[cfg(test)]
    pub fn segment_used(&self) -> usize {
        self.segment_used
    }

    /// Bytes of the segments' pages resident in memory, and the bytes of records from
    /// each segment's first readable one on (tests only).
    #[cfg(test)]
    pub fn segment_residency(&self) -> (usize, usize) {
        self.segments
            .iter()
            .flatten()
            .map(|segment| {
                (
                    segment.resident_pages() * crate::item::PAGE_BYTES,
                    segment.used - segment.first,
                )
            })
            .fold(
                (0, 0),
                |(resident, readable), (more_resident, more_readable)| {
                    (resident + more_resident, readable + more_readable)
                },
            )
    }

    /// Mapped segments (tests only).
    #[cfg(test)]
    pub fn segment_count(&self) -> usize {
        self.fifo.len()
    }

    fn location(&self, segment: usize, offset: usize) -> u32 {
        ((segment as u32) << self.offset_bits) | offset as u32
    }

    fn split(&self, location: u32) -> (usize, usize) {
        let mask = (1u32 << self.offset_bits) - 1;
        (
            (location >> self.offset_bits) as usize,
            (location & mask) as usize,
        )
    }

    /// How many segment numbers a location can name.
    fn segment_number_limit(&self) -> usize {
        1usize << (LOCATION_BITS - self.offset_bits)
    }

    fn key_hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Bytes of the sketch of requests.
    pub fn sketch_bytes(&self) -> usize {
        self.sketch.bytes()
    }

    /// [`ShardState::lookup`], counting a request of the key in the sketch when it misses
    /// (for eviction: where the key's count of reads starts when it is stored).
    pub fn lookup_counting_miss(&mut self, key: &[u8]) -> Option<u32> {
        let hash = self.key_hash(key);
        let found = self.lookup_hashed(key, hash);
        if found.is_none() {
            self.sketch.count(hash);
        }
        found
    }

    pub fn lookup(&self, key: &[u8]) -> Option<u32> {
        self.lookup_hashed(key, self.key_hash(key))
    }

    fn lookup_hashed(&self, key: &[u8], hash: u64) -> Option<u32> {
        let (segments, bits) = (&self.segments, self.offset_bits);
        self.index.find(hash, |location| {
            record_in(segments, bits, location).is_some_and(|data| key_of(data) == key)
        })
    }

    /// The key index, and the hashes of the keys of the records it names (for its resizes).
    fn index_and_hashes(&mut self) -> (&mut KeyIndex, RecordHashes<'_>) {
        let hashes = RecordHashes {
            hasher: &self.hasher,
            segments: &self.segments,
            offset_bits: self.offset_bits,
        };
        (&mut self.index, hashes)
    }

    fn data(&self, location: u32) -> &[u8] {
        match record_in(&self.segments, self.offset_bits, location) {
            Some(data) => data,
            // Locations come only from the index or a walk over the segments, which name
            // mapped records; anything else is a bug in this module.
            None => unreachable!("no record at location {location:#x}"),
        }
    }

    fn data_mut(&mut self, location: u32) -> &mut [u8] {
        let (number, offset) = self.split(location);
        match self.segments.get_mut(number) {
            Some(Some(segment)) => {
                let data = segment.records_at_mut(offset);
                let len = record_len(data);
                &mut data[..len]
            }
            _ => unreachable!("no record at location {location:#x}"),
        }
    }

    /// The key of the item at `location`.
    pub fn key(&self, location: u32) -> &[u8] {
        key_of(self.data(location))
    }

    fn external_value(&self, data: &[u8]) -> Option<&Bytes> {
        self.external
            .get(external_id_of(data) as usize)
            .and_then(Option::as_ref)
    }

    /// The header fields of the item at `location`.
    pub fn header(&self, location: u32) -> Header {
        let data = self.data(location);
        let state = data[OFFSET_STATE];
        let value_len = if state & STATE_EXTERNAL_VALUE != 0 {
            self.external_value(data).map_or(0, Bytes::len)
        } else {
            usize::from(read_u16(data, OFFSET_INLINE_LEN) & INLINE_LEN_MASK)
        };
        Header {
            key_len: usize::from(data[OFFSET_KEY_LEN]),
            value_len,
            flags: flags_of(data),
            expiry: decode_expiry(read_u32(data, OFFSET_EXPIRY)),
            cas: read_u64(data, OFFSET_CAS),
            last_access: UnixSecs(u64::from(read_u32(data, OFFSET_ACCESS))),
            state: state & ITEM_STATE_BITS,
        }
    }

    /// The item at `location` with its value: a copy of an inline value, a shared handle on
    /// an external one.
    pub fn item(&self, location: u32) -> Item {
        let header = self.header(location);
        Item {
            key_len: header.key_len,
            value: self.value(location),
            flags: header.flags,
            expiry: header.expiry,
            cas: header.cas,
            last_access: header.last_access,
            state: header.state,
        }
    }

    /// The value of the item at `location`: a copy of an inline value, a shared handle on an
    /// external one.
    fn value(&self, location: u32) -> Bytes {
        let data = self.data(location);
        if data[OFFSET_STATE] & STATE_EXTERNAL_VALUE != 0 {
            self.external_value(data).cloned().unwrap_or_default()
        } else {
            Bytes::copy_from_slice(&data[value_start(data)..])
        }
    }

    /// What a read of the item at `location` hands back, its value copied out once (shared,
    /// when external).
    pub fn view(&self, location: u32) -> ItemView {
        let lent = self.item_ref(location);
        let value = if lent.value.len() >= EXTERNAL_VALUE_MIN {
            self.value(location)
        } else {
            Bytes::copy_from_slice(lent.value)
        };
        ItemView {
            value,
            flags: lent.flags,
            cas: lent.cas,
            expiry: lent.expiry,
            binary_key: lent.binary_key,
        }
    }

    /// The item at `location` borrowed in place, value included (no copy).
    pub fn item_ref(&self, location: u32) -> ItemRef<'_> {
        let data = self.data(location);
        let value = if data[OFFSET_STATE] & STATE_EXTERNAL_VALUE != 0 {
            self.external_value(data)
                .map_or(&[][..], |value| &value[..])
        } else {
            &data[value_start(data)..]
        };
        ItemRef {
            value,
            flags: flags_of(data),
            cas: read_u64(data, OFFSET_CAS),
            expiry: decode_expiry(read_u32(data, OFFSET_EXPIRY)),
            binary_key: data[OFFSET_STATE] & STATE_BINARY_KEY != 0,
        }
    }

    /// What the shard publishes for eviction to choose the shard it evicts from: the bytes
    /// of its items (`footprint`) — eviction takes from the shard holding the most, as its
    /// requests per byte are compared only within a shard — as `u64::MAX` less them less
    /// one (lowest first), `u64::MAX` when empty.
    pub fn eviction_rank(&self) -> u64 {
        if self.len() == 0 {
            u64::MAX
        } else {
            u64::MAX - 1 - self.footprint
        }
    }

    /// Marks the item read at `now`: fetched, accessed, and one more read counted (what
    /// eviction weighs against its bytes).
    pub fn bump(&mut self, location: u32, now: UnixSecs) {
        let data = self.data_mut(location);
        data[OFFSET_STATE] |= STATE_FETCHED | STATE_ACCESSED;
        write_u32(data, OFFSET_ACCESS, encode_secs(now));
        self.count_read(location);
    }

    /// Counts a read in the record at `location`: its level raised with probability
    /// 2^−level.
    fn count_read(&mut self, location: u32) {
        let mut dice = self.read_dice;
        dice ^= dice << 13;
        dice ^= dice >> 7;
        dice ^= dice << 17;
        self.read_dice = dice;
        let data = self.data_mut(location);
        data[OFFSET_STATE] &= !STATE_PASSED_UNREAD;
        let level = level_of(data);
        if level < LEVEL_MAX && dice & ((1 << level) - 1) == 0 {
            set_level(data, level + 1);
        }
    }

    /// Updates the item's last access and counts a read without marking it fetched
    /// (memcached's `do_item_update`, e.g. a failed add).
    pub fn refresh(&mut self, location: u32, now: UnixSecs) {
        let data = self.data_mut(location);
        data[OFFSET_STATE] |= STATE_ACCESSED;
        write_u32(data, OFFSET_ACCESS, encode_secs(now));
        self.count_read(location);
    }

    /// Writes `item` (same key) back over the item at `location`: in place when its record
    /// keeps its length (meta flags, touch, an incr whose result fits), else appended anew.
    /// Returns the item's location afterwards.
    pub fn write_back(&mut self, location: u32, item: &Item) -> u32 {
        self.place(Some(location), None, item, true)
            .unwrap_or(location)
    }

    /// Writes the record of `item` — over the record at `replacing` when it has the same
    /// length and form, else appended to the open segment (the record at `replacing`, if
    /// any, then buried and its index entry repointed). `key` is the new item's key (the
    /// replaced record's when `None`). `keep_accessed` carries the replaced record's
    /// accessed bit over; an in-place overwrite always sets it (the item was written, as
    /// good as moved to the head). `None` if no segment can be had.
    fn place(
        &mut self,
        replacing: Option<u32>,
        key: Option<&[u8]>,
        item: &Item,
        keep_accessed: bool,
    ) -> Option<u32> {
        let mut key_buffer = [0u8; u8::MAX as usize];
        let key = match (key, replacing) {
            (Some(key), _) => key,
            (None, Some(location)) => {
                let stored = self.key(location);
                key_buffer[..stored.len()].copy_from_slice(stored);
                &key_buffer[..stored.len()]
            }
            (None, None) => return None,
        };
        let len = record_len_of(key, item);
        let external = item.value.len() >= EXTERNAL_VALUE_MIN;
        let old = replacing.map(|location| {
            let data = self.data(location);
            let old_external = data[OFFSET_STATE] & STATE_EXTERNAL_VALUE != 0;
            let old_id = old_external.then(|| external_id_of(data));
            (
                location,
                data.len(),
                old_id,
                data[OFFSET_STATE] & STATE_ACCESSED,
            )
        });
        let old_reads = replacing.map_or(0, |location| level_of(self.data(location)));
        if let Some((location, old_len, old_id, accessed)) = old {
            if old_len == len && old_id.is_some() == external {
                let id = old_id.unwrap_or(0);
                if let Some(slot) = self.external.get_mut(id as usize) {
                    if external
                        && slot.as_ref().map(|value| value.as_ptr()) != Some(item.value.as_ptr())
                    {
                        *slot = Some(external_copy(&item.value));
                    }
                }
                let bits = if keep_accessed {
                    accessed
                } else {
                    STATE_ACCESSED
                };
                let reads = if keep_accessed { old_reads } else { 0 };
                let data = self.data_mut(location);
                write_record(data, key, item, bits, id);
                set_level(data, reads);
                return Some(location);
            }
        }
        let number = self.open_segment_with_room(len)?;
        let id = if external {
            let value = Some(external_copy(&item.value));
            match old.and_then(|(_, _, old_id, _)| old_id) {
                Some(id) => {
                    self.external[id as usize] = value;
                    id
                }
                None => self.new_external(value),
            }
        } else {
            0
        };
        let (bits, reads) = match old {
            Some((_, _, _, accessed)) if keep_accessed => (accessed, old_reads),
            _ => (0, 0),
        };
        self.segment_used += len;
        let Some(Some(segment)) = self.segments.get_mut(number) else {
            unreachable!("segment {number} was just opened");
        };
        let (offset, data) = segment.append(len);
        write_record(data, key, item, bits, id);
        set_level(data, reads);
        let new_location = self.location(number, offset);
        if let Some((location, _, old_id, _)) = old {
            if external && old_id.is_some() {
                // The id moved to the new record: the old one must not free it.
                self.data_mut(location)[OFFSET_STATE] &= !STATE_EXTERNAL_VALUE;
            }
            self.repoint(self.key_hash(key), location, new_location);
            self.bury(location);
        }
        Some(new_location)
    }

    fn new_external(&mut self, value: Option<Bytes>) -> u32 {
        match self.external_free.pop() {
            Some(id) => {
                self.external[id as usize] = value;
                id
            }
            None => {
                self.external.push(value);
                (self.external.len() - 1) as u32
            }
        }
    }

    /// Points the index entry for the key of hash `hash` at `to` instead of `from`.
    fn repoint(&mut self, hash: u64, from: u32, to: u32) {
        self.index.repoint(hash, from, to);
    }

    /// A segment with room for `len` more bytes, becoming the open one if it is new;
    /// `None` when every segment number a location can name is taken.
    fn open_segment_with_room(&mut self, len: usize) -> Option<usize> {
        if let Some(open) = self.open {
            if let Some(Some(segment)) = self.segments.get(open) {
                if segment.room() >= len {
                    return Some(open);
                }
            }
        }
        let number = match self.segments.iter().position(Option::is_none) {
            Some(number) => number,
            None if self.segments.len() < self.segment_number_limit() => {
                self.segments.push(None);
                self.segments.len() - 1
            }
            None => return None,
        };
        self.segments[number] = Some(Segment::new(self.segment_bytes));
        self.fifo.push_back(number);
        let previous = self.open.replace(number);
        if let Some(previous) = previous {
            self.free_segment_if_dead(previous);
        }
        self.settle_evict_cursor();
        Some(number)
    }

    /// Unmaps segment `number` if none of its records is stored any more.
    fn free_segment_if_dead(&mut self, number: usize) {
        match self.segments.get(number) {
            Some(Some(segment)) if segment.live() == 0 => self.drop_segment(number),
            _ => {}
        }
    }

    /// Unmaps segment `number` (whose records are dead or moved).
    fn drop_segment(&mut self, number: usize) {
        let Some(segment) = self.segments.get_mut(number).and_then(Option::take) else {
            return;
        };
        self.segment_used -= segment.used;
        self.segment_dead -= segment.dead;
        while matches!(self.segments.last(), Some(None)) {
            self.segments.pop();
        }
        if self.fifo.front() == Some(&number) {
            self.front_evicting = false;
        }
        self.fifo.retain(|&other| other != number);
        let (offset_bits, segment_number) = (self.offset_bits, number);
        self.recent
            .retain(|&location| (location >> offset_bits) as usize != segment_number);
        if self.open == Some(number) {
            self.open = None;
        }
        if self.crawl_cursor.0 == number {
            self.crawl_cursor = (number + 1, 0);
        }
        self.settle_evict_cursor();
    }

    /// Moves the eviction cursor to the first stored record of the oldest segment.
    fn settle_evict_cursor(&mut self) {
        loop {
            let Some(&front) = self.fifo.front() else {
                self.evict_cursor = (usize::MAX, 0);
                return;
            };
            if self.evict_cursor.0 != front {
                self.evict_cursor = (front, 0);
            }
            let Some(Some(segment)) = self.segments.get(front) else {
                return;
            };
            let offset = self.evict_cursor.1;
            let dead_len = (offset < segment.used)
                .then(|| segment.records_at(offset))
                .filter(|data| data[OFFSET_STATE] & STATE_DEAD != 0)
                .map(record_len);
            let Some(len) = dead_len else {
                // Every record before the cursor is dead: their pages can go.
                if let Some(Some(segment)) = self.segments.get_mut(front) {
                    segment.release_before(offset);
                }
                return;
            };
            self.evict_cursor.1 += len;
        }
    }

    /// Marks the record at `location` dead (freeing its external value) and frees its
    /// segment if nothing in it is stored any more.
    fn bury(&mut self, location: u32) {
        let (number, offset) = self.split(location);
        let Some(Some(segment)) = self.segments.get_mut(number) else {
            return;
        };
        let data = segment.records_at_mut(offset);
        if data[OFFSET_STATE] & STATE_DEAD != 0 {
            return;
        }
        data[OFFSET_STATE] |= STATE_DEAD;
        let len = record_len(data);
        let external_id =
            (data[OFFSET_STATE] & STATE_EXTERNAL_VALUE != 0).then(|| external_id_of(data));
        segment.dead += len;
        self.segment_dead += len;
        if let Some(id) = external_id {
            if let Some(value) = self.external.get_mut(id as usize) {
                *value = None;
                self.external_free.push(id);
            }
        }
        self.free_segment_if_dead(number);
        if self.evict_cursor == (number, offset) {
            self.settle_evict_cursor();
        }
    }

    /// Dead bytes compaction may reclaim: all but those of an oldest segment that eviction
    /// is emptying.
    fn compactable_dead(&self) -> usize {
        let evicting = if self.front_evicting {
            self.fifo
                .front()
                .and_then(|&front| self.segments.get(front)?.as_ref())
                .map_or(0, |segment| segment.dead)
        } else {
            0
        };
        self.segment_dead - evicting
    }

    /// Compacts segments while their dead bytes are more than a sixteenth of what has been
    /// appended (and at least half a segment): the segment with the most dead bytes has its
    /// live records moved to the open segment and is unmapped.
    fn compact_if_due(&mut self) {
        while self.compactable_dead() >= self.segment_bytes / 2
            && self.compactable_dead() * DEAD_FRACTION_DIVISOR > self.segment_used
        {
            let skip_front = if self.front_evicting {
                self.fifo.front().copied()
            } else {
                None
            };
            let victim = self
                .segments
                .iter()
                .enumerate()
                .filter(|&(number, _)| Some(number) != self.open && Some(number) != skip_front)
                .filter_map(|(number, segment)| Some((number, segment.as_ref()?.dead)))
                .max_by_key(|&(_, dead)| dead);
            match victim {
                Some((number, dead)) if dead > 0 => {
                    if !self.compact(number) {
                        break;
                    }
                }
                _ => break,
            }
        }
    }

    /// Moves the live records of segment `number` to the open segment and unmaps it; false
    /// (nothing moved) if no segment could be opened for them.
    fn compact(&mut self, number: usize) -> bool {
        let free_number = self.segments.iter().any(Option::is_none)
            || self.segments.len() < self.segment_number_limit();
        let Some(Some(segment)) = self.segments.get(number) else {
            return false;
        };
        let open_room = self
            .open
            .and_then(|open| self.segments.get(open)?.as_ref())
            .map_or(0, Segment::room);
        if !free_number && open_room < segment.live() {
            return false;
        }
        let mut offset = 0;
        while let Some(location) = self.next_live_in(number, &mut offset) {
            if self.move_record(location, false).is_none() {
                return false;
            }
        }
        self.drop_segment(number);
        true
    }

    /// The location of the first stored record of segment `number` at or after `*offset`,
    /// which is moved past it.
    fn next_live_in(&self, number: usize, offset: &mut usize) -> Option<u32> {
        let segment = self.segments.get(number)?.as_ref()?;
        *offset = (*offset).max(segment.first);
        while *offset < segment.used {
            let data = segment.records_at(*offset);
            let at = *offset;
            *offset += record_len(data);
            if data[OFFSET_STATE] & STATE_DEAD == 0 {
                return Some(self.location(number, at));
            }
        }
        None
    }

    /// Copies the record at `location` to the open segment (its accessed bit cleared when
    /// `clear_accessed`), repoints its index entry and buries the old copy. `None` (nothing
    /// moved) if no segment can be had.
    fn move_record(&mut self, location: u32, clear_accessed: bool) -> Option<u32> {
        let len = self.data(location).len();
        let number = self.open_segment_with_room(len)?;
        let (from_number, from_offset) = self.split(location);
        if number == from_number {
            // Appending to the segment being read: copy within it.
            let segment = self.segments[number].as_mut()?;
            let (offset, _) = segment.append(len);
            let all = segment.records_at_mut(0);
            all.copy_within(from_offset..from_offset + len, offset);
            self.finish_move(location, number, offset, len, clear_accessed);
            return Some(self.location(number, offset));
        }
        let source = self.segments[from_number].take()?;
        let record = &source.records_at(from_offset)[..len];
        let open = self.segments[number].as_mut()?;
        let (offset, destination) = open.append(len);
        destination.copy_from_slice(record);
        self.segments[from_number] = Some(source);
        self.finish_move(location, number, offset, len, clear_accessed);
        Some(self.location(number, offset))
    }

    /// Bookkeeping of a record copied from `from` to `number`/`offset`: the copy's state,
    /// the index entry, and the old copy buried (its external value now the copy's).
    fn finish_move(
        &mut self,
        from: u32,
        number: usize,
        offset: usize,
        len: usize,
        clear_accessed: bool,
    ) {
        self.segment_used += len;
        let to = self.location(number, offset);
        if clear_accessed {
            let data = self.data_mut(to);
            if data[OFFSET_STATE] & STATE_ACCESSED == 0 {
                // Not read for a whole pass: its reads count half, or none at level 0.
                match level_of(data) {
                    0 => data[OFFSET_STATE] |= STATE_PASSED_UNREAD,
                    level => set_level(data, level - 1),
                }
            }
            data[OFFSET_STATE] &= !STATE_ACCESSED;
        }
        self.data_mut(from)[OFFSET_STATE] &= !STATE_EXTERNAL_VALUE;
        let hash = self.key_hash(self.key(to));
        self.repoint(hash, from, to);
        self.bury(from);
    }

    fn account_added(&mut self, size: u64, footprint: u64) {
        self.bytes += size;
        self.footprint += footprint;
        let class = self.class_of(size);
        class.number += 1;
        class.mem_requested += size;
    }

    fn account_removed(&mut self, header: &Header) {
        let size = header.size();
        self.bytes -= size;
        self.footprint -= header.footprint();
        let class = self.class_of(size);
        class.number -= 1;
        class.mem_requested -= size;
    }

    /// Inserts a new item under `key` (which must not be present) at the end of the open
    /// segment. False (nothing stored) if no segment can be had, or the index cannot place
    /// the key (keys whose hashes are so alike that the index would have to grow past any
    /// reasonable load).
    pub fn insert(&mut self, key: &[u8], item: &Item) -> bool {
        let Some(location) = self.place(None, Some(key), item, false) else {
            return false;
        };
        let hash = self.key_hash(key);
        let (index, hashes) = self.index_and_hashes();
        if !index.insert(hash, location, |other| hashes.of(other)) {
            self.bury(location);
            return false;
        }
        // The miss that led to this set (if any) is the one request the item already counts
        // as stored: its record counts the ones before.
        let requested = u16::from(self.sketch.estimate(hash));
        set_level(
            self.data_mut(location),
            level_for_reads(requested.saturating_sub(1)),
        );
        self.account_added(item.size(), item.footprint());
        self.counters.total_items += 1;
        if self.recent.len() == EVICTION_RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(location);
        true
    }

    /// Replaces the item at `location` (same key). Returns the old item's header, or
    /// `None` (nothing changed) if no segment can be had for the new record.
    pub fn replace(&mut self, location: u32, item: &Item) -> Option<Header> {
        let old = self.header(location);
        self.place(Some(location), None, item, false)?;
        self.account_added(item.size(), item.footprint());
        self.counters.total_items += 1;
        self.account_removed(&old);
        self.compact_if_due();
        Some(old)
    }

    /// Removes the item at `location` and returns its header.
    pub fn remove(&mut self, location: u32) -> Header {
        let header = self.remove_uncompacted(location);
        self.shrink_external_if_sparse();
        self.compact_if_due();
        header
    }

    fn remove_uncompacted(&mut self, location: u32) -> Header {
        self.remove_uncompacted_counting(location, false)
    }

    /// [`ShardState::remove_uncompacted`]; when `remember`, the reads the record counted are
    /// added to the sketch (an evicted item's past, for when it is stored again).
    fn remove_uncompacted_counting(&mut self, location: u32, remember: bool) -> Header {
        let header = self.header(location);
        let hash = self.key_hash(self.key(location));
        if remember {
            let reads = reads_at_level(level_of(self.data(location)));
            self.sketch.add(hash, reads);
        }
        let (index, hashes) = self.index_and_hashes();
        index.remove(hash, location, |other| hashes.of(other));
        self.bury(location);
        self.account_removed(&header);
        header
    }

    /// Takes the next item out for eviction: first an item among the next `search` that
    /// eviction would reach that is no longer live (`true` with its header: reclaimed);
    /// else, when `evict_live`, the one with the fewest reads per byte among the
    /// [`EVICTION_WINDOW`] oldest and the [`EVICTION_RECENT`] stored last (`false`:
    /// evicted; one of those found no longer live is reclaimed instead), the records at the
    /// cursor before it (up to [`EVICTION_MOVES`]) being reinserted at the end with their
    /// accessed bit cleared. `None` if the shard is empty or nothing may be taken.
    pub fn evict_next(
        &mut self,
        now: UnixSecs,
        flush: &FlushMark,
        search: usize,
        evict_live: bool,
    ) -> Option<(Header, bool)> {
        let mut dead = None;
        self.walk_from_evict_cursor(
            |shard, location| {
                if !is_live(&shard.header(location), now, flush) {
                    dead = Some(location);
                }
                dead.is_none()
            },
            search,
        );
        if let Some(location) = dead {
            let header = self.remove_uncompacted(location);
            self.compact_if_due();
            return Some((header, true));
        }
        if !evict_live {
            return None;
        }
        let (victim, heads_before) = self.choose_victim(now, flush)?;
        let header = self.remove_uncompacted_counting(victim.location, !victim.dead);
        if !victim.dead {
            // The records the choice passed over at the oldest end: those never read (level
            // 0, not read since written or last moved) are marked to go first (a pass
            // unread), in place; up to EVICTION_MOVES of the others are moved on.
            let mut passed = [0u32; EVICTION_WINDOW];
            let mut count = 0;
            self.walk_from_evict_cursor(
                |_, location| {
                    passed[count] = location;
                    count += 1;
                    true
                },
                heads_before,
            );
            let mut moves = 0;
            for &location in &passed[..count] {
                let data = self.data_mut(location);
                if data[OFFSET_STATE] & STATE_ACCESSED == 0 && level_of(data) == 0 {
                    data[OFFSET_STATE] |= STATE_PASSED_UNREAD;
                } else if moves < EVICTION_MOVES {
                    moves += 1;
                    if self.move_record(location, true).is_none() {
                        break;
                    }
                }
            }
        }
        self.front_evicting = true;
        self.compact_if_due();
        Some((header, victim.dead))
    }

    /// Eviction's choice: the first candidate no longer live, else the one with the fewest
    /// requests per byte (2^read level over its footprint; ties: the oldest); with how many
    /// of the oldest records come before it (all of them when it is not one of them). Drops
    /// the recent entries that are gone (dead records, or eviction already past them). Each
    /// candidate's record is read once, from its bytes: no key hashed, no index looked up.
    fn choose_victim(&mut self, now: UnixSecs, flush: &FlushMark) -> Option<(Candidate, usize)> {
        let mut best: Option<Candidate> = None;
        let mut heads_before = EVICTION_WINDOW;
        let mut consider = |shard: &ShardState, location: u32, data: &[u8]| {
            if best.is_some_and(|best| best.dead || best.location == location) {
                return false;
            }
            let candidate = shard.candidate(location, data, now, flush);
            let better = match best {
                None => true,
                Some(best) => {
                    candidate.dead
                        || (candidate.passed_unread && !best.passed_unread)
                        || (!best.passed_unread
                            && denser(best.level, best.bytes, candidate.level, candidate.bytes))
                }
            };
            if better {
                best = Some(candidate);
            }
            better
        };
        let mut position = 0;
        let mut first = true;
        'window: for &number in &self.fifo {
            let Some(Some(segment)) = self.segments.get(number) else {
                continue;
            };
            let mut offset = if first && self.evict_cursor.0 == number {
                self.evict_cursor.1.max(segment.first)
            } else {
                segment.first
            };
            first = false;
            while offset < segment.used {
                if position == EVICTION_WINDOW {
                    break 'window;
                }
                let data = segment.records_at(offset);
                let data = &data[..record_len(data)];
                let at = offset;
                offset += data.len();
                if data[OFFSET_STATE] & STATE_DEAD != 0 {
                    continue;
                }
                if consider(self, self.location(number, at), data) {
                    heads_before = position;
                }
                position += 1;
            }
        }
        let front = self.fifo.front().copied();
        let (bits, cursor) = (self.offset_bits, self.evict_cursor);
        let mut kept = 0;
        for at in 0..self.recent.len() {
            let location = self.recent[at];
            let (number, offset) = (
                (location >> bits) as usize,
                (location & ((1 << bits) - 1)) as usize,
            );
            // Before the cursor in the oldest segment every record is dead, and its pages
            // may have been given back (they read as zeros).
            if Some(number) == front && number == cursor.0 && offset < cursor.1 {
                continue;
            }
            let Some(data) = record_in(&self.segments, bits, location) else {
                continue;
            };
            if data[OFFSET_STATE] & STATE_DEAD != 0 {
                continue;
            }
            if consider(self, location, data) {
                heads_before = EVICTION_WINDOW;
            }
            self.recent[kept] = location;
            kept += 1;
        }
        self.recent.truncate(kept);
        best.map(|best| (best, heads_before))
    }

    /// What eviction weighs of the record `data` at `location`: its read level, its
    /// footprint, and whether it is no longer live.
    fn candidate(&self, location: u32, data: &[u8], now: UnixSecs, flush: &FlushMark) -> Candidate {
        let value_len = if data[OFFSET_STATE] & STATE_EXTERNAL_VALUE != 0 {
            self.external_value(data).map_or(0, Bytes::len)
        } else {
            usize::from(read_u16(data, OFFSET_INLINE_LEN) & INLINE_LEN_MASK)
        };
        let has_flags = read_u16(data, OFFSET_INLINE_LEN) & INLINE_LEN_HAS_FLAGS != 0;
        let expiry = decode_expiry(read_u32(data, OFFSET_EXPIRY));
        let last_access = UnixSecs(u64::from(read_u32(data, OFFSET_ACCESS)));
        Candidate {
            location,
            level: level_of(data),
            passed_unread: data[OFFSET_STATE] & STATE_PASSED_UNREAD != 0,
            bytes: item_footprint(
                usize::from(data[OFFSET_KEY_LEN]),
                value_len,
                u32::from(has_flags),
            ),
            dead: expiry.is_expired(now)
                || flush.flushes(last_access, read_u64(data, OFFSET_CAS), now),
        }
    }

    /// Calls `visit` on up to `limit` stored records from the eviction cursor on, in the
    /// order eviction reaches them, while it returns true. True if it stopped before the
    /// last stored record (at `limit`, or told to by `visit`).
    fn walk_from_evict_cursor(
        &self,
        mut visit: impl FnMut(&ShardState, u32) -> bool,
        limit: usize,
    ) -> bool {
        let mut seen = 0;
        let mut first = true;
        for &number in &self.fifo {
            let mut offset = if first && self.evict_cursor.0 == number {
                self.evict_cursor.1
            } else {
                0
            };
            first = false;
            while let Some(location) = self.next_live_in(number, &mut offset) {
                if seen >= limit || !visit(self, location) {
                    return true;
                }
                seen += 1;
            }
        }
        false
    }

    /// Calls `visit` on the locations of the stored items, oldest segment first, in the
    /// order written, while it returns true.
    pub fn visit_oldest_first(&self, mut visit: impl FnMut(u32) -> bool) {
        for &number in &self.fifo {
            let mut offset = 0;
            while let Some(location) = self.next_live_in(number, &mut offset) {
                if !visit(location) {
                    return;
                }
            }
        }
    }

    /// The locations of the stored items, most recently accessed first (ties: the most
    /// recently written first): the order of memcached's LRU dumps, as near as the
    /// records' last access seconds tell it.
    pub fn locations_most_recent_first(&self) -> Vec<u32> {
        let mut locations = Vec::with_capacity(self.len());
        self.visit_oldest_first(|location| {
            locations.push(location);
            true
        });
        locations.reverse();
        locations.sort_by_key(|&location| {
            std::cmp::Reverse(read_u32(self.data(location), OFFSET_ACCESS))
        });
        locations
    }

    /// The next stored record for the expiry crawler, resuming where it stopped (over the
    /// segments by number, wrapping once); `None` when there is none.
    pub fn crawl_next(&mut self) -> Option<u32> {
        let mut wrapped = false;
        loop {
            let (number, mut offset) = self.crawl_cursor;
            if number >= self.segments.len() {
                if wrapped || self.segments.is_empty() {
                    return None;
                }
                wrapped = true;
                self.crawl_cursor = (0, 0);
                continue;
            }
            match self.next_live_in(number, &mut offset) {
                Some(location) => {
                    self.crawl_cursor = (number, offset);
                    return Some(location);
                }
                None => self.crawl_cursor = (number + 1, 0),
            }
        }
    }

    /// Gives back the memory of the table of long values once more than half of it is free
    /// (the key index shrinks by itself).
    fn shrink_external_if_sparse(&mut self) {
        if self.external.len() > 64 && self.external_free.len() > self.external.len() / 2 {
            while matches!(self.external.last(), Some(None)) {
                self.external.pop();
            }
            let live = self.external.len() as u32;
            self.external_free.retain(|&id| id < live);
            self.external.shrink_to_fit();
            self.external_free.shrink_to_fit();
        }
    }

    /// The figures of the size class of an item of accounted size `size`.
    pub fn class_of(&mut self, size: u64) -> &mut ClassStats {
        let id = size_class(size);
        if id >= self.classes.len() {
            self.classes.resize(id + 1, ClassStats::default());
        }
        &mut self.classes[id]
    }

    /// Zeroes the counters (`stats reset`); what the shard holds stays counted.
    pub fn reset_counters(&mut self) {
        self.counters = StoreStats::default();
        for class in &mut self.classes {
            *class = ClassStats {
                number: class.number,
                mem_requested: class.mem_requested,
                ..ClassStats::default()
            };
        }
    }

    /// Checks the segments, the index and the totals agree (tests only).
    #[cfg(test)]
    pub fn check_invariants(&self) {
        let (mut count, mut bytes, mut footprint, mut external) = (0usize, 0u64, 0u64, 0usize);
        let (mut used, mut dead) = (0usize, 0usize);
        let mapped = self
            .segments
            .iter()
            .filter(|segment| segment.is_some())
            .count();
        assert_eq!(mapped, self.fifo.len(), "fifo lists every mapped segment");
        for &number in &self.fifo {
            let segment = self.segments[number]
                .as_ref()
                .expect("fifo names mapped segments");
            assert!(
                segment.live() > 0 || self.open == Some(number),
                "dead segment kept"
            );
            used += segment.used;
            dead += segment.dead;
            let (mut offset, mut live_bytes) = (segment.first, 0);
            while offset < segment.used {
                let data = segment.records_at(offset);
                let len = record_len(data);
                if data[OFFSET_STATE] & STATE_DEAD == 0 {
                    let location = self.location(number, offset);
                    assert_eq!(self.lookup(key_of(data)), Some(location));
                    let header = self.header(location);
                    count += 1;
                    live_bytes += len;
                    bytes += header.size();
                    footprint += header.footprint();
                    if data[OFFSET_STATE] & STATE_EXTERNAL_VALUE != 0 {
                        external += 1;
                        assert!(self.external_value(data).is_some());
                    }
                }
                offset += len;
            }
            assert_eq!(offset, segment.used);
            assert_eq!(live_bytes, segment.live());
        }
        assert_eq!(count, self.index.len());
        let hashes = RecordHashes {
            hasher: &self.hasher,
            segments: &self.segments,
            offset_bits: self.offset_bits,
        };
        self.index.check_invariants(|location| hashes.of(location));
        assert_eq!(
            external,
            self.external.iter().filter(|value| value.is_some()).count()
        );
        assert_eq!(bytes, self.bytes);
        assert_eq!(footprint, self.footprint);
        assert_eq!((used, dead), (self.segment_used, self.segment_dead));
    }
}
