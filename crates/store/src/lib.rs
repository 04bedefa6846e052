//! tailtrim-store: memcached-style item storage. No I/O, no clock reads:
//! time is a parameter ([`UnixSecs`], whole Unix seconds).
//!
//! ```text
//!   worker 1 ─┐                     Arc<Store>
//!   worker 2 ─┼─ key ─ hash ─▶ shard i = hash % N ─▶ Mutex<ShardState>
//!   worker N ─┘                                       ├ key index: u32 locations, Robin Hood,
//!                                                     │  no tombstones (key compared in the record)
//!                                                     ├ segments, oldest first: items appended
//!                                                     │  inline (20-byte header + key + short value)
//!                                                     ├ long values: own allocation / mapping
//!                                                     └ counters
//!   global atomics: used_bytes (≤ max_bytes) · CAS counter · flush watermark
//!   housekeeping thread ─▶ crawl_expired(now, budget) ─▶ one shard at a time
//! ```
//!
//! # Concurrency and lock order
//!
//! The index is striped over `shards` (default 64) independent
//! `parking_lot::Mutex<ShardState>`s, chosen by a seeded hash of the key.
//! **A thread never holds more than one lock at a time** — no shard lock is
//! held while taking another shard lock or the flush lock — so there is no
//! lock order to get wrong and no deadlock. Everything shared across shards
//! is an atomic: the byte budget `used_bytes`, the CAS counter, the flush
//! watermark, and each shard's published "oldest access" second.
//!
//! A read hands back a [`bytes::Bytes`] the caller owns: a copy of a value
//! shorter than [`EXTERNAL_VALUE_MIN`] (stored inline with its key), a shared
//! handle on a longer one (kept in an allocation of its own, from
//! [`MAPPED_VALUE_MIN`] in a memory mapping of its own), so the caller writes
//! it to the socket after the lock is gone.
//!
//! # Memory limit and eviction
//!
//! Each item is charged its [`item_footprint`]: the memory it really costs
//! (its record in a segment, a long value's own allocation as the allocator
//! rounds it, and its share of the key index: [`ITEM_BOOKKEEPING_BYTES`], which
//! pays for the whole table since it is kept at least 3/4 full, beyond about
//! 1.7 KiB a shard), not memcached's accounted [`item_size`]
//! (key + value + 59 bytes of header, +4 for non-zero flags), which the
//! `bytes` statistic and the `-I` check keep using. `used_bytes` is a single
//! global counter of footprints, only ever increased by a compare-and-swap that
//! keeps it `<= max_bytes`, so the items **never** take more memory than the
//! limit, and any item up to `-I` can be stored whichever shard it hashes to
//! (shards share the global budget; they have no quotas of their own). Freed
//! memory is handed back: a shard appends its items (header, key and a value
//! shorter than [`EXTERNAL_VALUE_MIN`]) to segments of its own (anonymous
//! mappings of 16 KiB to 1 MiB, sized from the limit), unmaps a segment once
//! none of its items is stored, and compacts (moves the live items of the
//! segment with the most dead bytes, then unmaps it) once dead bytes pass a
//! sixteenth of its segments, so a shift of item sizes does not leave the old
//! items' memory resident. For long values, each time items worth an eighth
//! of the limit have been freed the store asks glibc to return free pages
//! (`malloc_trim`); a shard's key index grows and shrinks in steps of about an
//! eighth, keeping its load between 3/4 and 9/10.
//!
//! A store decides under its shard lock, then claims from the budget only
//! the bytes it adds (new footprint minus the footprint of the item it
//! replaces, so an overwrite of equal size never evicts). If the claim does not fit, it
//! drops the lock and evicts one item at a time until it does (holding the
//! claimed bytes so concurrent writers cannot take them), then re-takes the
//! lock and re-runs the decision on the possibly changed item. Eviction
//! chooses by requests per byte: within a shard it looks at the next 5 items
//! from the oldest for an expired/flushed one to *reclaim* first, else
//! *evicts*, of the 8 oldest records and the 16 items stored last, the one
//! with the fewest requests per byte of footprint; of the records it passed
//! over at the oldest end, those never read are marked to go first (so small
//! items nobody reads do not hold the memory after a shift of sizes) and up to
//! two others are moved to the open segment. An item's requests are
//! counted in three bits of its record (a log-scale count of its reads, one
//! level lost for each pass eviction makes over it unread), starting from a
//! per-shard count-min sketch of the requests of keys not stored (`get`
//! misses and the reads of evicted items; 1/128 of the limit beside it). The
//! victim shard is the one holding the most bytes (each shard publishes its
//! bytes in an atomic; ties rotate over the shards), so the shards stay
//! equally full. Eviction takes only the victim's lock, never while holding
//! another.
//!
//! # Semantics (memcached 1.6)
//!
//! * TTL: [`Expiry::from_protocol`] — 0 never, negative expired, ≤ 30 days
//!   relative, larger absolute. Dead items are removed lazily on access,
//!   by eviction and by [`Store::crawl_expired`].
//! * CAS uniques come from one global counter (1, 2, 3, …), or from the
//!   caller (`ms … E`).
//! * Every read ([`Store::get`], [`Store::meta_get`] without `u`) marks the
//!   item fetched and accessed (a second chance at eviction); `add` on an
//!   existing item marks it accessed without marking it fetched.
//! * incr wraps at 2^64, decr floors at 0, results shorter than the old
//!   value are space-padded (memcached's in-place update).
//!
//! # Statistics
//!
//! [`Store::stats`] provides `curr_items total_items bytes limit_maxbytes
//! evictions evicted_unfetched expired_unfetched reclaimed crawler_reclaimed
//! crawler_items_checked get_expired get_flushed`; [`Store::class_stats`] gives
//! the same per size class ([`size_class`]: the slab class memcached 1.6 would
//! put the item in) for `stats items`; [`Store::reset_stats`] clears what
//! memcached's `stats reset` clears. Command and hit/miss counters
//! (`cmd_get`, `get_hits`, …) are the server's job.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use tailtrim_store::{
//!     ArithOutcome, Expiry, MetaGetRequest, Store, StoreConfig, StoreStatus, UnixSecs,
//! };
//!
//! let store = Store::new(StoreConfig::default()).expect("valid config");
//! let now = UnixSecs(1_700_000_000);
//!
//! // set foo 5 60 3 / bar
//! let expiry = Expiry::from_protocol(60, now);
//! let stored = store.set(b"foo", Bytes::from_static(b"bar"), 5, expiry, now).unwrap();
//! assert_eq!(stored.status, StoreStatus::Stored);
//!
//! // gets foo
//! let item = store.get(b"foo", now).expect("hit");
//! assert_eq!((&item.value[..], item.flags, item.cas), (&b"bar"[..], 5, stored.cas));
//!
//! // cas with a stale unique
//! let again = store.cas(b"foo", Bytes::from_static(b"baz"), 0, expiry, stored.cas + 99, now);
//! assert_eq!(again.unwrap().status, StoreStatus::Exists);
//!
//! // incr on a counter
//! store.set(b"n", Bytes::from_static(b"41"), 0, Expiry::Never, now).unwrap();
//! assert!(matches!(store.incr(b"n", 1, now), Ok(ArithOutcome::Updated(i)) if i.value == 42));
//!
//! // mg foo N30: a miss that vivifies; this caller wins the recache token.
//! let request = MetaGetRequest { vivify: Some(Expiry::from_protocol(30, now)), ..Default::default() };
//! let hit = store.meta_get(b"missing", &request, now).unwrap().expect("vivified");
//! assert!(hit.won && hit.created);
//!
//! // 61 seconds later foo has expired.
//! assert!(store.get(b"foo", UnixSecs(now.0 + 61)).is_none());
//! ```

mod class;
mod error;
mod index;
mod item;
mod ops;
mod segment;
mod shard;
mod sketch;
mod store;
mod time;

#[cfg(test)]
mod tests;

pub use crate::class::{class_chunk_sizes, size_class, LARGEST_CHUNK, SIZE_CLASS_LIMIT};
pub use crate::error::StoreError;
pub use crate::item::{
    inline_header_len, item_footprint, item_size, malloc_chunk, ItemRef, ItemView,
    EXTERNAL_VALUE_BOOKKEEPING_BYTES, EXTERNAL_VALUE_MIN, INLINE_HEADER_BYTES,
    ITEM_BOOKKEEPING_BYTES, ITEM_FLAGS_BYTES, ITEM_HEADER_BYTES, KEY_MAX_LEN, MAPPED_VALUE_MIN,
};
pub use crate::ops::{
    flush_deadline, ArithDirection, ArithItem, ArithOutcome, ArithRequest, ArithVivify, ClassStats,
    CrawlReport, DeleteOutcome, DeleteRequest, DumpedItem, ItemMeta, MetaGetHit, MetaGetRequest,
    StoreMode, StoreOutcome, StoreRequest, StoreStats, StoreStatus,
};
pub use crate::store::{
    parse_counter, validate_key, Store, StoreConfig, CRAWL_SLICE, DEFAULT_HASH_SEED,
    DEFAULT_ITEM_SIZE_MAX, DEFAULT_MAX_BYTES, DEFAULT_SHARDS, EVICTION_TAIL_SEARCH,
};
pub use crate::time::{Expiry, UnixSecs, RELATIVE_EXPTIME_MAX};
