//! Request and outcome types of the store's operations.

use crate::item::ItemView;
use crate::time::{Expiry, UnixSecs};

/// Which storage command a [`StoreRequest`] performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreMode {
    /// `set` / `ms` (default mode `MS`): store unconditionally.
    Set,
    /// `add` / `ms … ME`: store only if the key holds no live item. On an
    /// existing item it is `NotStored` and the item is marked accessed (a second chance at eviction).
    Add,
    /// `replace` / `ms … MR`: store only if the key holds a live item.
    Replace,
    /// `append` / `ms … MA`: add data after the existing value; the item keeps
    /// its flags and expiry.
    Append,
    /// `prepend` / `ms … MP`: add data before the existing value; the item
    /// keeps its flags and expiry.
    Prepend,
}

/// Everything a storage command can ask for besides key and value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreRequest {
    /// The command.
    pub mode: StoreMode,
    /// Client flags for the new item (ignored by append/prepend, which keep
    /// the old item's flags; still counted for the `-I` check on the data).
    pub flags: u32,
    /// Expiry for the new item (ignored by append/prepend).
    pub expiry: Expiry,
    /// `cas <unique>` / `ms … C<unique>`. With `Set` or `Replace` this turns
    /// the request into compare-and-swap: `NotFound` if missing, `Exists`
    /// unless the unique matches. With `Append`/`Prepend` a non-zero value
    /// must match (`Exists` otherwise). Ignored by `Add`.
    pub compare_cas: Option<u64>,
    /// `ms … E<unique>`: store this CAS unique instead of drawing the next
    /// one from the global counter.
    pub new_cas: Option<u64>,
    /// `ms … I` (only meaningful with `compare_cas`): if the supplied unique
    /// is *older* (smaller) than the item's, store anyway but mark the new
    /// item stale, keeping the old expiry and win-token state.
    pub invalidate: bool,
    /// `ms … b`: the key came base64-encoded; remember it so that meta
    /// replies return the key encoded, as memcached does.
    pub binary_key: bool,
}

impl StoreRequest {
    /// A plain request for `mode` with the given flags and expiry.
    pub fn new(mode: StoreMode, flags: u32, expiry: Expiry) -> StoreRequest {
        StoreRequest {
            mode,
            flags,
            expiry,
            compare_cas: None,
            new_cas: None,
            invalidate: false,
            binary_key: false,
        }
    }
}

/// memcached's reply to a storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreStatus {
    /// `STORED` / `HD`.
    Stored,
    /// `NOT_STORED` / `NS`.
    NotStored,
    /// `EXISTS` / `EX`: CAS mismatch.
    Exists,
    /// `NOT_FOUND` / `NF`: CAS on a missing item.
    NotFound,
}

/// Result of a storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOutcome {
    /// What happened.
    pub status: StoreStatus,
    /// CAS unique of the stored item when `status == Stored`, else 0
    /// (what `ms … c` returns).
    pub cas: u64,
}

/// Options of an atomic meta get (`mg`), also used for `gat`/`gats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetaGetRequest {
    /// `T<ttl>` / gat: set the item's expiry (applied before the result is
    /// reported, so `t` shows the new TTL).
    pub new_expiry: Option<Expiry>,
    /// `N<ttl>`: on a miss, create an empty item (flags 0) with this expiry
    /// and hand this caller the win token.
    pub vivify: Option<Expiry>,
    /// `R<ttl>` converted with [`Expiry::from_protocol`]: if the item expires
    /// before this point and no token was handed out yet, this caller wins.
    pub recache_before: Option<Expiry>,
    /// `u`: do not mark the item accessed nor fetched.
    pub no_bump: bool,
}

/// A hit (or a vivified item) from [`crate::Store::meta_get`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaGetHit {
    /// The item (after any `T` update).
    pub item: ItemView,
    /// `h`: the item had been fetched before this request.
    pub hit_before: bool,
    /// `l`: seconds since the item was last accessed, before this request.
    pub secs_since_access: u64,
    /// `W`: this caller won the right to recache the item.
    pub won: bool,
    /// `Z`: a win token had already been handed to another client.
    pub token_already_sent: bool,
    /// `X`: the item is stale (invalidated).
    pub stale: bool,
    /// The item was created by this request (`N` on a miss).
    pub created: bool,
}

/// Options of a meta delete (`md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeleteRequest {
    /// `C<unique>`: delete only if the item's CAS equals this.
    pub compare_cas: Option<u64>,
    /// `I`: do not delete; mark stale, clear the win token, give a new CAS.
    pub invalidate: bool,
    /// `T<ttl>` together with `I`: new expiry of the invalidated item.
    pub new_expiry: Option<Expiry>,
    /// `E<unique>` together with `I`: the CAS to give the invalidated item.
    pub new_cas: Option<u64>,
}

/// Result of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeleteOutcome {
    /// `DELETED` / `HD`: removed.
    Deleted,
    /// `HD` for `md … I`: kept but marked stale.
    Invalidated,
    /// `NOT_FOUND` / `NF`.
    NotFound,
    /// `EX`: CAS mismatch.
    Exists,
}

/// incr or decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArithDirection {
    /// Add, wrapping at 2^64.
    Incr,
    /// Subtract, flooring at 0.
    Decr,
}

/// `ma … N<ttl> J<initial>`: create the item if missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArithVivify {
    /// Value of the created item (the delta is not applied to it).
    pub initial: u64,
    /// Expiry of the created item.
    pub expiry: Expiry,
}

/// An incr/decr, text or meta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArithRequest {
    /// incr or decr.
    pub direction: ArithDirection,
    /// The delta.
    pub delta: u64,
    /// `C<unique>`: a non-zero value must match the item's CAS.
    pub compare_cas: Option<u64>,
    /// `N`/`J`: auto-create on miss.
    pub vivify: Option<ArithVivify>,
    /// `T<ttl>`: set the expiry of the resulting item (overrides `N`'s).
    pub new_expiry: Option<Expiry>,
    /// `E<unique>`: the CAS to give the resulting item.
    pub new_cas: Option<u64>,
}

impl ArithRequest {
    /// A plain text-protocol incr/decr.
    pub fn new(direction: ArithDirection, delta: u64) -> ArithRequest {
        ArithRequest {
            direction,
            delta,
            compare_cas: None,
            vivify: None,
            new_expiry: None,
            new_cas: None,
        }
    }
}

/// The item after an incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArithItem {
    /// The new numeric value.
    pub value: u64,
    /// The item's new CAS unique.
    pub cas: u64,
    /// The item's expiry.
    pub expiry: Expiry,
    /// Accounted size ([`crate::item_size`]) of the item the command found (of the one it
    /// created when it vivified): `stats slabs` counts the command in that item's class.
    pub size: u64,
}

/// Result of an incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOutcome {
    /// The existing item was updated.
    Updated(ArithItem),
    /// The item was missing and created from `vivify`.
    Created(ArithItem),
    /// `NOT_FOUND` / `NF`.
    NotFound,
    /// `EX`: CAS mismatch.
    Exists,
    /// The value is not a decimal number (memcached: `CLIENT_ERROR cannot
    /// increment or decrement non-numeric value`).
    NonNumeric,
}

/// What [`crate::Store::crawl_expired`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CrawlReport {
    /// Slots looked at.
    pub inspected: u64,
    /// Expired or flushed items removed.
    pub reclaimed: u64,
}

/// One live item as `stats cachedump` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedItem {
    /// The key as stored.
    pub key: bytes::Bytes,
    /// Length of the value in bytes.
    pub value_len: usize,
    /// When it expires.
    pub expiry: Expiry,
}

/// What `lru_crawler metadump` prints of one live item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemMeta {
    /// The key as stored.
    pub key: bytes::Bytes,
    /// When it expires.
    pub expiry: Expiry,
    /// When it was last accessed.
    pub last_access: UnixSecs,
    /// Its CAS unique.
    pub cas: u64,
    /// It was fetched since it was stored.
    pub fetched: bool,
    /// [`crate::item_size`] of the item.
    pub size: u64,
}

/// Item statistics the store provides (the server adds connection, command
/// and hit/miss counters itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStats {
    /// `curr_items`: items held, including expired ones not yet reclaimed.
    pub curr_items: u64,
    /// `total_items`: items ever stored (every successful store, append,
    /// incr whose result outgrows the old value, vivify).
    pub total_items: u64,
    /// `bytes`: sum of [`crate::item_size`] over held items.
    pub bytes: u64,
    /// `limit_maxbytes`: the memory limit (`-m`).
    pub limit_maxbytes: u64,
    /// `item_size_max` (`-I`).
    pub item_size_max: u64,
    /// `evictions`: live items removed to make room.
    pub evictions: u64,
    /// `evicted_unfetched`: evicted items never read.
    pub evicted_unfetched: u64,
    /// `expired_unfetched`: expired/flushed items removed (lazily, by the
    /// crawler or by eviction) that were never read.
    pub expired_unfetched: u64,
    /// `reclaimed`: expired/flushed items removed by the crawler or by
    /// eviction (memory reused from dead items).
    pub reclaimed: u64,
    /// `crawler_reclaimed`: expired/flushed items removed by [`crate::Store::crawl_expired`].
    pub crawler_reclaimed: u64,
    /// `crawler_items_checked`: items [`crate::Store::crawl_expired`] looked at.
    pub crawler_items_checked: u64,
    /// `get_expired`: lookups (by any command) that found the key's item expired.
    pub get_expired: u64,
    /// `get_flushed`: lookups (by any command) that found the key's item invalidated by
    /// `flush_all`.
    pub get_flushed: u64,
    /// Slots of the shards' key indexes together.
    pub hash_buckets: u64,
    /// Bytes of those slots (`hash_bytes`).
    pub hash_bytes: u64,
    /// Bytes of the shards' sketches of requests (eviction's counts of the keys not stored;
    /// beside the limit, 1/128 of it).
    pub sketch_bytes: u64,
    /// Number of shards.
    pub shards: u64,
}

/// One size class's figures ([`crate::size_class`]), as `stats items` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassStats {
    /// `number`: items held in the class, expired ones not yet removed included.
    pub number: u64,
    /// `mem_requested`: sum of their [`crate::item_size`].
    pub mem_requested: u64,
    /// `age`: seconds since the class's least recently used item was last accessed
    /// (filled in by [`crate::Store::class_stats`]).
    pub age: u64,
    /// `evicted`: live items of the class removed to make room.
    pub evicted: u64,
    /// `evicted_nonzero`: … of which had an expiry time.
    pub evicted_nonzero: u64,
    /// `evicted_time`: seconds since the last evicted item had been accessed.
    pub evicted_time: u64,
    /// `evicted_unfetched`: evicted items never read.
    pub evicted_unfetched: u64,
    /// `expired_unfetched`: expired/flushed items removed by eviction or the crawler that
    /// were never read.
    pub expired_unfetched: u64,
    /// `reclaimed`: expired/flushed items whose memory a store reused.
    pub reclaimed: u64,
    /// `crawler_reclaimed`: expired/flushed items the crawler removed.
    pub crawler_reclaimed: u64,
    /// `outofmemory`: stores of this class refused for lack of memory.
    pub outofmemory: u64,
}

/// Converts the moment a delayed `flush_all <delay>` takes effect.
///
/// `flush_all 0` or no argument is immediate (`None`); a positive delay is
/// converted like an exptime (relative up to 30 days, absolute beyond).
pub fn flush_deadline(delay: i64, now: UnixSecs) -> Option<UnixSecs> {
    if delay <= 0 {
        return None;
    }
    match Expiry::from_protocol(delay, now) {
        Expiry::Never => None,
        Expiry::At(at) => Some(at),
    }
}
