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

/// One stored item.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub key: Bytes,
    pub value: Bytes,
    pub flags: u32,
    pub expiry: Expiry,
    pub cas: u64,
    pub last_access: UnixSecs,
    pub state: u8,
}

impl Item {
    pub fn size(&self) -> u64 {
        item_size(self.key.len(), self.value.len(), self.flags)
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

/// What a read hands back: the value is a reference-counted [`Bytes`]
/// clone, so the caller can write it to a socket after the shard lock is
/// released, however large it is.
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
