//! Items and their accounted size.

use bytes::Bytes;

use crate::time::{Expiry, UnixSecs};

/// Longest key the store accepts, in bytes (memcached's `KEY_MAX_LENGTH`).
pub const KEY_MAX_LEN: usize = 250;

/// Fixed bytes accounted per item on top of key and value, matching
/// memcached 1.6's item layout so that `-I` rejects exactly the same items:
/// a 48-byte item header, an 8-byte CAS, the key's NUL terminator and the
/// value's trailing `\r\n` (48 + 8 + 1 + 2 = 59).
pub const ITEM_HEADER_BYTES: u64 = 59;

/// Extra bytes accounted when the client flags are non-zero (memcached only
/// stores a 4-byte flags suffix for non-zero flags).
pub const ITEM_FLAGS_BYTES: u64 = 4;

/// Accounted size of an item: key + value + [`ITEM_HEADER_BYTES`]
/// (+ [`ITEM_FLAGS_BYTES`] if `flags != 0`). This is what counts against the
/// memory limit (`-m`), what `-I` is compared with, and what the `bytes`
/// statistic sums. With the default `-I` of 1 MiB and a 1-byte key, the
/// largest storable value is 1 048 516 bytes, as in memcached 1.6.
pub fn item_size(key_len: usize, value_len: usize, flags: u32) -> u64 {
    let flag_bytes = if flags != 0 { ITEM_FLAGS_BYTES } else { 0 };
    ITEM_HEADER_BYTES + key_len as u64 + value_len as u64 + flag_bytes
}

/// Item state bit: the item has been read since it was stored (meta `h`).
pub(crate) const STATE_FETCHED: u8 = 1;
/// Item state bit: the item was invalidated (`md … I`, `ms … I`) (meta `X`).
pub(crate) const STATE_STALE: u8 = 2;
/// Item state bit: a client has been handed the recache win token (meta
/// `W`); later clients see `Z`.
pub(crate) const STATE_WIN_TOKEN_SENT: u8 = 4;
/// Item state bit: the key was given base64-encoded (`ms … b`), so meta
/// replies return it encoded (memcached's `ITEM_KEY_BINARY`).
pub(crate) const STATE_BINARY_KEY: u8 = 8;

/// Item state bit: the value is held in its own allocation, not inline after the key
/// (values of [`EXTERNAL_VALUE_MIN`] bytes or more).
pub(crate) const STATE_EXTERNAL_VALUE: u8 = 16;

/// Values this long or longer are kept in an allocation of their own, shared (not copied)
/// with readers; shorter ones are stored inline after the key and copied out on a read.
pub const EXTERNAL_VALUE_MIN: usize = 4096;

/// Bytes of the header the store keeps in front of each item's key in its segment: key
/// length, state bits, the inline value's length (u16), expiry and last access (u32 Unix
/// seconds) and CAS (u64); the client flags (u32, [`ITEM_FLAGS_BYTES`]) follow only when
/// they are not 0 ([`inline_header_len`]).
pub const INLINE_HEADER_BYTES: usize = 20;

/// Bytes of an item's header in its segment: [`INLINE_HEADER_BYTES`], plus the flags when
/// there are any.
pub fn inline_header_len(has_flags: bool) -> usize {
    INLINE_HEADER_BYTES
        + if has_flags {
            ITEM_FLAGS_BYTES as usize
        } else {
            0
        }
}

/// Bytes charged per item for its entry outside its segment: its share of the key index,
/// whose 6-byte slots (a 4-byte location, a tag and a probe distance) are kept at least 3/4
/// full (beyond a shard's smallest table), so 8 bytes an item pay for all of it.
pub const ITEM_BOOKKEEPING_BYTES: u64 = 8;

/// Bytes a value kept in its own allocation takes in its record: the id of its entry in
/// the shard's table of such values.
const EXTERNAL_ID_BYTES: u64 = 4;

/// Extra bytes charged for a value kept in its own allocation: the shared handle a
/// reader's clone allocates, the entry of the shard's external value table and the id in
/// the record.
pub const EXTERNAL_VALUE_BOOKKEEPING_BYTES: u64 = 96 + EXTERNAL_ID_BYTES;

/// Requests this large are served by glibc's malloc with a mapping of their own.
const MALLOC_MMAP_THRESHOLD: usize = 128 * 1024;
/// The page a mapping is rounded up to.
pub(crate) const PAGE_BYTES: usize = 4096;

/// What glibc's malloc really takes for a request of `bytes`: 8 bytes of chunk header,
/// rounded up to 16 (at least 32), or to whole pages for a request it maps on its own.
pub fn malloc_chunk(bytes: usize) -> u64 {
    let chunk = ((bytes + 8 + 15) & !15).max(32);
    if chunk >= MALLOC_MMAP_THRESHOLD {
        chunk.div_ceil(PAGE_BYTES) as u64 * PAGE_BYTES as u64
    } else {
        chunk as u64
    }
}

/// The memory an item really costs the store, what counts against the memory limit
/// (`-m`): its record in a segment (header, key and, below [`EXTERNAL_VALUE_MIN`], value,
/// byte for byte: the flags only when not 0), the value's own allocation above that (as the
/// allocator rounds it; whole pages from [`MAPPED_VALUE_MIN`] on), and
/// [`ITEM_BOOKKEEPING_BYTES`]. It is smaller than [`item_size`] for every inline item (a
/// 32-byte value under a 16-byte key with flags 0 costs 74 bytes and accounts 107), so
/// `bytes` can pass `limit_maxbytes`.
pub fn item_footprint(key_len: usize, value_len: usize, flags: u32) -> u64 {
    let record = (inline_header_len(flags != 0) + key_len) as u64 + ITEM_BOOKKEEPING_BYTES;
    if value_len >= MAPPED_VALUE_MIN {
        record
            + (value_len.div_ceil(PAGE_BYTES) * PAGE_BYTES) as u64
            + EXTERNAL_VALUE_BOOKKEEPING_BYTES
    } else if value_len >= EXTERNAL_VALUE_MIN {
        record + malloc_chunk(value_len) + EXTERNAL_VALUE_BOOKKEEPING_BYTES
    } else {
        record + value_len as u64
    }
}

/// One item as the store's operations see it, decoded from its inline form (the key is
/// the caller's; only its length is kept here).
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub key_len: usize,
    pub value: Bytes,
    pub flags: u32,
    pub expiry: Expiry,
    pub cas: u64,
    pub last_access: UnixSecs,
    pub state: u8,
}

impl Item {
    /// Accounted size ([`item_size`]).
    pub fn size(&self) -> u64 {
        item_size(self.key_len, self.value.len(), self.flags)
    }

    /// Real memory ([`item_footprint`]).
    pub fn footprint(&self) -> u64 {
        item_footprint(self.key_len, self.value.len(), self.flags)
    }

    pub fn has(&self, bit: u8) -> bool {
        self.state & bit != 0
    }

    pub fn view(&self) -> ItemView {
        ItemView {
            value: self.value.clone(),
            flags: self.flags,
            cas: self.cas,
            expiry: self.expiry,
            binary_key: self.has(STATE_BINARY_KEY),
        }
    }
}

/// What a read hands back: the value is a [`Bytes`] the caller owns (a copy
/// of a short inline value, a shared handle on a long one), so it can be written
/// to a socket after the shard lock is released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemView {
    /// The value (shared, not copied).
    pub value: Bytes,
    /// Client flags (opaque 32-bit).
    pub flags: u32,
    /// CAS unique of the item as stored.
    pub cas: u64,
    /// When the item expires.
    pub expiry: Expiry,
    /// The key was stored base64-encoded (`ms … b`); meta `k` returns it encoded.
    pub binary_key: bool,
}

/// An item as a read sees it in place, under its shard's lock ([`crate::Store::get_with`]):
/// the value is borrowed from the store, so a reply can be composed from it with one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemRef<'a> {
    /// The value, borrowed.
    pub value: &'a [u8],
    /// Client flags (opaque 32-bit).
    pub flags: u32,
    /// CAS unique of the item as stored.
    pub cas: u64,
    /// When the item expires.
    pub expiry: Expiry,
    /// The key was stored base64-encoded (`ms … b`); meta `k` returns it encoded.
    pub binary_key: bool,
}

/// Values this long or longer get a memory mapping of their own: freeing
/// one returns its pages to the kernel at once, so large values never leave holes in the
/// allocator's heap that small items would then pin.
pub const MAPPED_VALUE_MIN: usize = 64 * 1024;

/// A value in an anonymous private mapping of its own, unmapped when the last [`Bytes`]
/// that shares it is dropped.
pub(crate) struct MappedValue {
    start: std::ptr::NonNull<u8>,
    len: usize,
    mapped: usize,
}

// SAFETY: the mapping is owned exclusively by this value and never written after
// construction, so moving it between threads or sharing `&` across them is sound.
unsafe impl Send for MappedValue {}
// SAFETY: as above; only reads are possible through `&MappedValue`.
unsafe impl Sync for MappedValue {}

impl MappedValue {
    /// Copies `data` into a new mapping; `None` if the kernel refuses one.
    pub fn copy_of(data: &[u8]) -> Option<MappedValue> {
        let mapped = data.len().div_ceil(PAGE_BYTES).max(1) * PAGE_BYTES;
        // SAFETY: an anonymous private mapping at an address the kernel chooses; the result
        // is checked for MAP_FAILED before use.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let start = std::ptr::NonNull::new(raw.cast::<u8>())?;
        // SAFETY: the mapping is `mapped >= data.len()` bytes, writable, and cannot overlap
        // `data`, which lives in memory mapped before.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), start.as_ptr(), data.len());
        }
        Some(MappedValue {
            start,
            len: data.len(),
            mapped,
        })
    }
}

impl AsRef<[u8]> for MappedValue {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `start` points at `mapped >= len` readable bytes for the life of `self`,
        // of which the first `len` were initialised in `copy_of`.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len) }
    }
}

impl Drop for MappedValue {
    fn drop(&mut self) {
        // SAFETY: the range is exactly the mapping made in `copy_of`, and no reference into
        // it outlives `self`.
        unsafe {
            libc::munmap(self.start.as_ptr().cast(), self.mapped);
        }
    }
}

/// A long value's own copy: a mapping from [`MAPPED_VALUE_MIN`] bytes on, else the heap.
pub(crate) fn external_copy(value: &[u8]) -> Bytes {
    if value.len() >= MAPPED_VALUE_MIN {
        if let Some(mapped) = MappedValue::copy_of(value) {
            return Bytes::from_owner(mapped);
        }
    }
    Bytes::copy_from_slice(value)
}
