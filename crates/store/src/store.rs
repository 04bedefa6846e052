//! The concurrent store: shards, the global byte budget, CAS and flush state.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

use crate::class::{size_class, SIZE_CLASS_LIMIT};
use crate::error::StoreError;
use crate::item::{
    item_size, Item, ItemRef, ItemView, KEY_MAX_LEN, STATE_BINARY_KEY, STATE_FETCHED, STATE_STALE,
    STATE_WIN_TOKEN_SENT,
};
use crate::ops::{
    ArithDirection, ArithItem, ArithOutcome, ArithRequest, ClassStats, CrawlReport, DeleteOutcome,
    DeleteRequest, DumpedItem, ItemMeta, MetaGetHit, MetaGetRequest, StoreMode, StoreOutcome,
    StoreRequest, StoreStats, StoreStatus,
};
use crate::segment::{SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN};
use crate::shard::{is_live, FlushMark, ShardState};
use crate::time::{Expiry, UnixSecs};

/// Default memory limit: 64 MiB, memcached's `-m 64`.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Default item size limit: 1 MiB, memcached's `-I 1m`.
pub const DEFAULT_ITEM_SIZE_MAX: u64 = 1024 * 1024;
/// Default shard count (a power of two comfortably above the worker count).
pub const DEFAULT_SHARDS: usize = 64;
/// Default seed of the key hashers (fixed so runs are reproducible).
pub const DEFAULT_HASH_SEED: u64 = 0x7a11_7a11_5eed_0001;
/// How many items eviction inspects, from where it would take the next, for a
/// dead one to reclaim before evicting a live one (memcached looks at 5 of its LRU tail).
pub const EVICTION_TAIL_SEARCH: usize = 5;
/// Slots the crawler inspects per shard lock hold.
pub const CRAWL_SLICE: usize = 64;
/// The allocator is asked to return free pages each time items worth this fraction of the
/// memory limit have been freed.
const TRIM_EVERY_FRACTION_OF_LIMIT: u64 = 8;
/// … but not more often than every this many freed bytes.
const TRIM_EVERY_MIN: u64 = 512 * 1024;

/// Segments per shard the segment size aims at: enough that compacting or freeing one
/// moves a small share of a shard, few enough that segments stay large.
const SEGMENTS_PER_SHARD: u64 = 16;

/// The size of a segment for a store of `max_bytes` over `shards`: a power of two near a
/// sixteenth of a shard's share of the limit, within [`SEGMENT_BYTES_MIN`] and
/// [`SEGMENT_BYTES_MAX`] (16 KiB at `-m 8`, 64 KiB at `-m 64`, 1 MiB from `-m 1024`, with
/// 64 shards).
fn segment_bytes_for(max_bytes: u64, shards: usize) -> usize {
    let share = max_bytes / (shards as u64).max(1) / SEGMENTS_PER_SHARD;
    let share = usize::try_from(share).unwrap_or(SEGMENT_BYTES_MAX);
    share
        .next_power_of_two()
        .clamp(SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX)
}

/// Store configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Memory limit in accounted item bytes (`-m` × 1 MiB).
    pub max_bytes: u64,
    /// Largest accounted item size (`-I`).
    pub item_size_max: u64,
    /// Number of lock stripes.
    pub shards: usize,
    /// Seed of the key hashers.
    pub hash_seed: u64,
    /// Evict live items to make room (memcached's default). `false` is memcached's `-M`:
    /// only expired or flushed items are reclaimed, and a store that still does not fit
    /// fails with [`StoreError::OutOfMemory`].
    pub evict_to_free: bool,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            max_bytes: DEFAULT_MAX_BYTES,
            item_size_max: DEFAULT_ITEM_SIZE_MAX,
            shards: DEFAULT_SHARDS,
            hash_seed: DEFAULT_HASH_SEED,
            evict_to_free: true,
        }
    }
}

/// One lock stripe, padded to its own cache line.
#[repr(align(128))]
struct Shard {
    state: Mutex<ShardState>,
    /// [`ShardState::eviction_rank`] (`u64::MAX` if empty), readable without the
    /// lock; eviction evicts from the shard of the lowest (the most bytes held).
    eviction_rank: AtomicU64,
}

impl Shard {
    fn publish(&self, state: &ShardState) {
        let rank = state.eviction_rank();
        if self.eviction_rank.load(Ordering::Relaxed) != rank {
            self.eviction_rank.store(rank, Ordering::Relaxed);
        }
    }
}

/// Bytes claimed from the global budget and not yet owned by a stored item.
/// Whatever is left when it is dropped goes back to the budget.
struct Reservation<'a> {
    used: &'a AtomicU64,
    max: u64,
    bytes: u64,
}

impl<'a> Reservation<'a> {
    fn new(used: &'a AtomicU64, max: u64) -> Reservation<'a> {
        Reservation {
            used,
            max,
            bytes: 0,
        }
    }

    /// Claims `extra` more bytes if that keeps the total within the limit.
    fn try_grow(&mut self, extra: u64) -> bool {
        let claimed = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                let next = used.checked_add(extra)?;
                (next <= self.max).then_some(next)
            })
            .is_ok();
        if claimed {
            self.bytes += extra;
        }
        claimed
    }

    /// Hands `bytes` of the reservation over to a stored item.
    fn consume(&mut self, bytes: u64) {
        debug_assert!(bytes <= self.bytes);
        self.bytes -= bytes;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.used.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

/// What a mutation decided, under the shard lock.
enum Plan<R> {
    /// Leave the index as is (the closure may have changed the item in
    /// place); optionally mark the item accessed (its second chance at eviction).
    Keep { result: R, lru: LruMove },
    /// Insert or replace the item with this one.
    Put { item: Item, result: R },
    /// Remove the item.
    Remove { result: R },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LruMove {
    None,
    /// A read: mark fetched, update last access, move to head.
    Read,
    /// A write that keeps the item: move to head.
    Write,
}

/// The item store. Share it between threads as `Arc<Store>`; every method
/// takes `&self`.
pub struct Store {
    shards: Box<[Shard]>,
    shard_hasher: ahash::RandomState,
    max_bytes: u64,
    item_size_max: u64,
    evict_to_free: bool,
    /// Accounted bytes of stored items plus in-flight reservations; never
    /// exceeds `max_bytes`.
    used_bytes: AtomicU64,
    /// Last CAS unique handed out.
    last_cas: AtomicU64,
    /// flush_all watermark: `oldest_live + 1` (0 = no flush yet).
    flush_oldest_live_plus_one: AtomicU64,
    flush_oldest_cas: AtomicU64,
    flush_lock: Mutex<()>,
    crawl_next_shard: AtomicUsize,
    /// Where the next eviction starts looking, so that ties rotate over the shards.
    evict_next_shard: AtomicUsize,
    /// Footprint of the items freed since the allocator was last asked to return free
    /// pages ([`Store::trim_allocator_if_due`]).
    freed_since_trim: AtomicU64,
    /// How many freed bytes make a trim due.
    trim_every: u64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("shards", &self.shards.len())
            .field("max_bytes", &self.max_bytes)
            .field("item_size_max", &self.item_size_max)
            .field("used_bytes", &self.used_bytes.load(Ordering::Relaxed))
            .finish()
    }
}

/// Checks the store's own key rule: 1..=250 bytes. (Control characters and
/// spaces are the protocol's concern: a base64 meta key may decode to any
/// bytes.)
pub fn validate_key(key: &[u8]) -> Result<(), StoreError> {
    if key.is_empty() {
        Err(StoreError::EmptyKey)
    } else if key.len() > KEY_MAX_LEN {
        Err(StoreError::KeyTooLong {
            len: key.len(),
            max: KEY_MAX_LEN,
        })
    } else {
        Ok(())
    }
}

/// Parses an item value as memcached's `safe_strtoull` does for incr/decr:
/// optional leading whitespace and sign, decimal digits, then whitespace or
/// the end. A `-` is only accepted when the result is not negative as an
/// `i64` (so `-0` is 0). `None` means "non-numeric".
pub fn parse_counter(value: &[u8]) -> Option<u64> {
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let mut pos = 0;
    while pos < value.len() && is_space(value[pos]) {
        pos += 1;
    }
    let mut negative = false;
    if pos < value.len() && (value[pos] == b'+' || value[pos] == b'-') {
        negative = value[pos] == b'-';
        pos += 1;
    }
    let digits_start = pos;
    let mut number: u64 = 0;
    while pos < value.len() && value[pos].is_ascii_digit() {
        number = number
            .checked_mul(10)?
            .checked_add(u64::from(value[pos] - b'0'))?;
        pos += 1;
    }
    if pos == digits_start {
        return None;
    }
    // The stored value is followed by "\r\n" in memcached, so the end of the
    // value counts as whitespace.
    if pos < value.len() && !is_space(value[pos]) {
        return None;
    }
    if negative {
        number = number.wrapping_neg();
        if (number as i64) < 0 {
            return None;
        }
    }
    Some(number)
}

/// Formats an incr/decr result like memcached: when the new number is not
/// longer than the old value, it is written in place and padded with spaces
/// to the old length; otherwise the value becomes exactly the digits.
fn format_counter(number: u64, old_len: usize) -> Bytes {
    let digits = number.to_string();
    if digits.len() < old_len {
        let mut buf = BytesMut::with_capacity(old_len);
        buf.extend_from_slice(digits.as_bytes());
        buf.resize(old_len, b' ');
        buf.freeze()
    } else {
        Bytes::from(digits)
    }
}

/// A public storage command of [`Store`]: [`Store::store`] with the command's
/// [`StoreMode`]; `append`/`prepend` take no flags or expiry (the item keeps its own).
macro_rules! store_command {
    ($(#[$doc:meta])* $name:ident, $mode:ident) => {
        $(#[$doc])*
        pub fn $name(
            &self,
            key: &[u8],
            value: Bytes,
            flags: u32,
            expiry: Expiry,
            now: UnixSecs,
        ) -> Result<StoreOutcome, StoreError> {
            let request = StoreRequest::new(StoreMode::$mode, flags, expiry);
            self.store(key, value, &request, now)
        }
    };
    ($(#[$doc:meta])* $name:ident, $mode:ident, keeps flags and expiry) => {
        $(#[$doc])*
        pub fn $name(
            &self,
            key: &[u8],
            data: Bytes,
            now: UnixSecs,
        ) -> Result<StoreOutcome, StoreError> {
            let request = StoreRequest::new(StoreMode::$mode, 0, Expiry::Never);
            self.store(key, data, &request, now)
        }
    };
}

impl Store {
    /// Creates an empty store.
    pub fn new(config: StoreConfig) -> Result<Store, StoreError> {
        if config.shards == 0 {
            return Err(StoreError::InvalidConfig(
                "shards must be at least 1".into(),
            ));
        }
        if config.max_bytes == 0 {
            return Err(StoreError::InvalidConfig(
                "max_bytes must be positive".into(),
            ));
        }
        if config.item_size_max < item_size(1, 0, 0) {
            return Err(StoreError::InvalidConfig(format!(
                "item_size_max must be at least {} bytes",
                item_size(1, 0, 0)
            )));
        }
        let seed = config.hash_seed;
        let shard_hasher = ahash::RandomState::with_seeds(seed, seed ^ 0x5555, seed ^ 0xaaaa, 1);
        let segment_bytes = segment_bytes_for(config.max_bytes, config.shards);
        let share_bytes = config.max_bytes / config.shards.max(1) as u64;
        let shards = (0..config.shards)
            .map(|index| Shard {
                state: Mutex::new(ShardState::new(
                    ahash::RandomState::with_seeds(
                        seed.rotate_left(17),
                        seed ^ 0x0f0f_0f0f,
                        seed.wrapping_add(index as u64),
                        2,
                    ),
                    segment_bytes,
                    share_bytes,
                )),
                eviction_rank: AtomicU64::new(u64::MAX),
            })
            .collect();
        Ok(Store {
            shards,
            shard_hasher,
            max_bytes: config.max_bytes,
            item_size_max: config.item_size_max,
            evict_to_free: config.evict_to_free,
            used_bytes: AtomicU64::new(0),
            last_cas: AtomicU64::new(0),
            flush_oldest_live_plus_one: AtomicU64::new(0),
            flush_oldest_cas: AtomicU64::new(0),
            flush_lock: Mutex::new(()),
            crawl_next_shard: AtomicUsize::new(0),
            evict_next_shard: AtomicUsize::new(0),
            freed_since_trim: AtomicU64::new(0),
            trim_every: (config.max_bytes / TRIM_EVERY_FRACTION_OF_LIMIT).max(TRIM_EVERY_MIN),
        })
    }

    /// The memory limit in accounted bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The item size limit.
    pub fn item_size_max(&self) -> u64 {
        self.item_size_max
    }

    /// Accounted bytes in use right now (stored items plus in-flight
    /// reservations). Never above [`Store::max_bytes`].
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Acquire)
    }

    /// Draws the next CAS unique from the global counter (1, 2, 3, …).
    pub fn next_cas(&self) -> u64 {
        self.last_cas.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn shard_index(&self, key: &[u8]) -> usize {
        (self.shard_hasher.hash_one(key) % self.shards.len() as u64) as usize
    }

    fn flush_mark(&self) -> FlushMark {
        let plus_one = self.flush_oldest_live_plus_one.load(Ordering::Acquire);
        FlushMark {
            oldest_live: plus_one.checked_sub(1),
            oldest_cas: self.flush_oldest_cas.load(Ordering::Acquire),
        }
    }

    /// Gives `footprint` bytes of a freed item back to the budget.
    fn release(&self, footprint: u64) {
        self.used_bytes.fetch_sub(footprint, Ordering::AcqRel);
        self.freed_since_trim
            .fetch_add(footprint, Ordering::Relaxed);
    }

    /// Once items worth an eighth of the limit have been freed since the last time, asks
    /// the allocator to hand the whole free pages it keeps back to the kernel (glibc's
    /// `malloc_trim`). Items of a size the workload no longer writes leave their memory
    /// free but resident otherwise, and the process would outgrow the limit when the sizes
    /// shift. Called with no lock held.
    fn trim_allocator_if_due(&self) {
        if self.freed_since_trim.load(Ordering::Relaxed) < self.trim_every {
            return;
        }
        if self.freed_since_trim.swap(0, Ordering::AcqRel) < self.trim_every {
            return;
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only walks and releases the allocator's own free chunks; it
        // takes the allocator's locks and has no preconditions.
        unsafe {
            libc::malloc_trim(0);
        }
    }

    /// Looks `key` up (a miss counted for eviction when `read`); a dead (expired or
    /// flushed) item is removed on the spot and reported as absent.
    fn live_slot(
        &self,
        state: &mut ShardState,
        key: &[u8],
        now: UnixSecs,
        flush: &FlushMark,
        read: bool,
    ) -> Option<u32> {
        let slot = if read {
            state.lookup_counting_miss(key)
        } else {
            state.lookup(key)
        }?;
        let header = state.header(slot);
        if is_live(&header, now, flush) {
            return Some(slot);
        }
        // memcached's do_item_get: a flushed item counts as flushed even if it has expired.
        if flush.flushes(header.last_access, header.cas, now) {
            state.counters.get_flushed += 1;
        } else {
            state.counters.get_expired += 1;
        }
        let dead = state.remove(slot);
        self.release(dead.footprint());
        None
    }

    /// Evicts (or reclaims) one item from the shard holding the most bytes; ties go
    /// round robin. Keeping the shards equally full matters because eviction compares
    /// requests per byte only within a shard: a shard chosen by another order (the
    /// oldest access, before) would give up items denser than another shard's least
    /// dense. Takes exactly one shard lock and no other. Returns false if every shard
    /// looked empty.
    fn evict_one(&self, now: UnixSecs) -> bool {
        let count = self.shards.len();
        let first = self.evict_next_shard.fetch_add(1, Ordering::Relaxed) % count;
        let mut victim = first;
        let mut victim_rank = u64::MAX;
        for offset in 0..count {
            let index = (first + offset) % count;
            let rank = self.shards[index].eviction_rank.load(Ordering::Relaxed);
            if rank < victim_rank {
                victim = index;
                victim_rank = rank;
            }
        }
        if victim_rank == u64::MAX {
            return false;
        }
        let shard = &self.shards[victim];
        let mut state = shard.state.lock();
        let flush = self.flush_mark();
        let taken = state.evict_next(now, &flush, EVICTION_TAIL_SEARCH, self.evict_to_free);
        if let Some((item, dead)) = taken {
            let unfetched = !item.has(STATE_FETCHED);
            if dead {
                state.counters.reclaimed += 1;
                state.class_of(item.size()).reclaimed += 1;
                if unfetched {
                    state.counters.expired_unfetched += 1;
                    state.class_of(item.size()).expired_unfetched += 1;
                }
            } else {
                state.counters.evictions += 1;
                let class = state.class_of(item.size());
                class.evicted += 1;
                class.evicted_time = now.0.saturating_sub(item.last_access.0);
                if item.expiry != Expiry::Never {
                    class.evicted_nonzero += 1;
                }
                if unfetched {
                    class.evicted_unfetched += 1;
                    state.counters.evicted_unfetched += 1;
                }
            }
            self.release(item.footprint());
        }
        shard.publish(&state);
        // `-M`: nothing dead where eviction looks and live items are not evicted.
        taken.is_some() || self.evict_to_free
    }

    /// Grows `reservation` to `target` bytes, evicting as needed. Must be
    /// called with no shard lock held.
    fn reserve(
        &self,
        reservation: &mut Reservation<'_>,
        target: u64,
        now: UnixSecs,
    ) -> Result<(), StoreError> {
        if target > self.max_bytes {
            return Err(StoreError::OutOfMemory { size: target });
        }
        let mut fruitless = 0u32;
        while reservation.bytes < target {
            if reservation.try_grow(target - reservation.bytes) {
                break;
            }
            if self.evict_one(now) {
                fruitless = 0;
            } else if !self.evict_to_free {
                return Err(StoreError::OutOfMemory { size: target });
            } else {
                // Everything left is held by concurrent reservations.
                fruitless += 1;
                if fruitless > 64 {
                    return Err(StoreError::OutOfMemory { size: target });
                }
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Runs `plan` on the live item for `key` (if any) under its shard lock
    /// and applies the decision. A `Put` claims from the global budget only
    /// what it adds (new size minus the replaced item's size); if that cannot
    /// be claimed without evicting, it releases the lock, evicts (one shard
    /// lock at a time) while holding the claimed bytes, and runs `plan` again
    /// on whatever the item is then.
    fn mutate<R>(
        &self,
        key: &[u8],
        now: UnixSecs,
        plan: impl FnMut(Option<&mut Item>) -> Result<Plan<R>, StoreError>,
    ) -> Result<R, StoreError> {
        let result = self.mutate_locked(key, now, plan);
        self.trim_allocator_if_due();
        result
    }

    fn mutate_locked<R>(
        &self,
        key: &[u8],
        now: UnixSecs,
        mut plan: impl FnMut(Option<&mut Item>) -> Result<Plan<R>, StoreError>,
    ) -> Result<R, StoreError> {
        let home = self.shard_index(key);
        let shard = &self.shards[home];
        let mut reservation = Reservation::new(&self.used_bytes, self.max_bytes);
        loop {
            let mut state = shard.state.lock();
            let flush = self.flush_mark();
            let slot = self.live_slot(&mut state, key, now, &flush, false);
            let mut current = slot.map(|slot| state.item(slot));
            let decision = plan(current.as_mut())?;
            let result = match decision {
                Plan::Keep { result, lru } => {
                    if let (Some(slot), Some(current)) = (slot, current.as_ref()) {
                        let slot = state.write_back(slot, current);
                        match lru {
                            LruMove::None => {}
                            LruMove::Read => state.bump(slot, now),
                            LruMove::Write => state.refresh(slot, now),
                        }
                    }
                    result
                }
                Plan::Remove { result } => {
                    if let Some(slot) = slot {
                        let item = state.remove(slot);
                        self.release(item.footprint());
                    }
                    result
                }
                Plan::Put { item, result } => {
                    let size = item.size();
                    if size > self.item_size_max {
                        return Err(StoreError::TooLarge {
                            size,
                            max: self.item_size_max,
                        });
                    }
                    // Replacing credits the old item's memory: only growth
                    // is claimed from the budget.
                    let need = item.footprint();
                    let old_size = current.as_ref().map_or(0, Item::footprint);
                    let extra = need.saturating_sub(old_size);
                    if reservation.bytes < extra && !reservation.try_grow(extra - reservation.bytes)
                    {
                        drop(state);
                        self.reserve(&mut reservation, extra, now)?;
                        continue;
                    }
                    reservation.consume(extra);
                    match slot {
                        Some(slot) => {
                            if state.replace(slot, &item).is_none() {
                                self.release(extra);
                                return Err(StoreError::OutOfMemory { size: need });
                            }
                            self.freed_since_trim.fetch_add(old_size, Ordering::Relaxed);
                            if old_size > need {
                                self.used_bytes.fetch_sub(old_size - need, Ordering::AcqRel);
                            }
                        }
                        None => {
                            if !state.insert(key, &item) {
                                self.release(extra);
                                return Err(StoreError::OutOfMemory { size: need });
                            }
                        }
                    }
                    result
                }
            };
            shard.publish(&state);
            return Ok(result);
        }
    }

    fn new_item(
        &self,
        key: &[u8],
        value: Bytes,
        flags: u32,
        expiry: Expiry,
        cas: u64,
        now: UnixSecs,
    ) -> Item {
        Item {
            key_len: key.len(),
            value,
            flags,
            expiry,
            cas,
            last_access: now,
            state: 0,
        }
    }

    // ----- reads -------------------------------------------------------

    /// `get`/`gets`: the live item, marked fetched and accessed.
    /// An invalid key is simply a miss.
    pub fn get(&self, key: &[u8], now: UnixSecs) -> Option<ItemView> {
        self.with_live_item(key, now, |state, slot| {
            state.bump(slot, now);
            state.view(slot)
        })
    }

    /// `get`/`gets` without copying the value out: the live item, marked fetched and
    /// accessed, is handed to `read` in place, with its shard locked (so `read` should only
    /// copy it, e.g. into a reply being composed). An invalid key is simply a miss.
    pub fn get_with<R>(
        &self,
        key: &[u8],
        now: UnixSecs,
        read: impl FnOnce(ItemRef<'_>) -> R,
    ) -> Option<R> {
        self.with_live_item(key, now, |state, slot| {
            state.bump(slot, now);
            read(state.item_ref(slot))
        })
    }

    /// Runs `read` on the live item under `key` (its location) with its shard locked; a miss
    /// is counted for eviction. Publishes the shard's eviction rank only if a dead item was
    /// removed (a read leaves its bytes as they were). `None` for an invalid key or no live
    /// item.
    fn with_live_item<R>(
        &self,
        key: &[u8],
        now: UnixSecs,
        read: impl FnOnce(&mut ShardState, u32) -> R,
    ) -> Option<R> {
        if validate_key(key).is_err() {
            return None;
        }
        let shard = &self.shards[self.shard_index(key)];
        let mut state = shard.state.lock();
        let flush = self.flush_mark();
        let items_before = state.len();
        let Some(slot) = self.live_slot(&mut state, key, now, &flush, true) else {
            if state.len() != items_before {
                shard.publish(&state);
            }
            return None;
        };
        Some(read(&mut state, slot))
    }

    /// The live item without bumping it or marking it fetched (for
    /// debugging / `me`-style inspection).
    pub fn peek(&self, key: &[u8], now: UnixSecs) -> Option<ItemView> {
        if validate_key(key).is_err() {
            return None;
        }
        let shard = &self.shards[self.shard_index(key)];
        let state = shard.state.lock();
        let flush = self.flush_mark();
        let slot = state.lookup(key)?;
        is_live(&state.header(slot), now, &flush).then(|| state.view(slot))
    }

    /// `touch`: sets a new expiry on a live item and bumps it. Returns false
    /// (`NOT_FOUND`) if there is no live item.
    pub fn touch(&self, key: &[u8], expiry: Expiry, now: UnixSecs) -> bool {
        self.get_and_touch(key, expiry, now).is_some()
    }

    /// `gat`/`gats`: like [`Store::get`] but also sets a new expiry.
    pub fn get_and_touch(&self, key: &[u8], expiry: Expiry, now: UnixSecs) -> Option<ItemView> {
        self.with_live_item(key, now, |state, slot| {
            let mut item = state.item(slot);
            item.expiry = expiry;
            let slot = state.write_back(slot, &item);
            state.bump(slot, now);
            item.view()
        })
    }

    /// `mg`: look up, optionally touch (`T`), vivify on miss (`N`), compute
    /// `h`/`l` from the state *before* this request, hand out the win token
    /// (`W` when vivified, stale, or `R` threshold reached; `Z` if already
    /// handed out; `X` if stale), then bump unless `no_bump` — all in one
    /// shard-lock hold. `Ok(None)` is a miss (`EN`).
    pub fn meta_get(
        &self,
        key: &[u8],
        request: &MetaGetRequest,
        now: UnixSecs,
    ) -> Result<Option<MetaGetHit>, StoreError> {
        validate_key(key)?;
        let bump = if request.no_bump {
            LruMove::None
        } else {
            LruMove::Read
        };
        self.mutate(key, now, |existing| {
            let Some(item) = existing else {
                let Some(expiry) = request.vivify else {
                    return Ok(Plan::Keep {
                        result: None,
                        lru: LruMove::None,
                    });
                };
                let mut item = self.new_item(key, Bytes::new(), 0, expiry, self.next_cas(), now);
                item.state = STATE_WIN_TOKEN_SENT;
                if !request.no_bump {
                    item.state |= STATE_FETCHED;
                }
                let hit = MetaGetHit {
                    item: item.view(),
                    hit_before: false,
                    secs_since_access: 0,
                    won: true,
                    token_already_sent: false,
                    stale: false,
                    created: true,
                };
                return Ok(Plan::Put {
                    item,
                    result: Some(hit),
                });
            };
            let hit_before = item.has(STATE_FETCHED);
            let secs_since_access = now.saturating_since(item.last_access);
            if let Some(expiry) = request.new_expiry {
                item.expiry = expiry;
            }
            let token_already_sent = item.has(STATE_WIN_TOKEN_SENT);
            let stale = item.has(STATE_STALE);
            let mut won = false;
            if !token_already_sent {
                if stale {
                    won = true;
                }
                if let (Some(Expiry::At(threshold)), Expiry::At(expires)) =
                    (request.recache_before, item.expiry)
                {
                    if expires < threshold {
                        won = true;
                    }
                }
            }
            if won {
                item.state |= STATE_WIN_TOKEN_SENT;
            }
            Ok(Plan::Keep {
                result: Some(MetaGetHit {
                    item: item.view(),
                    hit_before,
                    secs_since_access,
                    won,
                    token_already_sent,
                    stale,
                    created: false,
                }),
                lru: bump,
            })
        })
    }

    // ----- writes ------------------------------------------------------

    /// Any storage command: `set add replace append prepend cas` and `ms`
    /// with its modes and `C`/`E`/`I` flags. See [`StoreRequest`].
    ///
    /// An item over `-I` is `Err(TooLarge)`; like memcached, a `Set` that is
    /// too large also removes the key's current item (so no stale value
    /// survives a failed overwrite).
    pub fn store(
        &self,
        key: &[u8],
        value: Bytes,
        request: &StoreRequest,
        now: UnixSecs,
    ) -> Result<StoreOutcome, StoreError> {
        validate_key(key)?;
        let size = item_size(key.len(), value.len(), request.flags);
        if size > self.item_size_max {
            if request.mode == StoreMode::Set {
                self.delete(key, now);
            }
            return Err(StoreError::TooLarge {
                size,
                max: self.item_size_max,
            });
        }
        let not = |status| StoreOutcome { status, cas: 0 };
        let keep = |status| Plan::Keep {
            result: not(status),
            lru: LruMove::None,
        };
        let result = self.mutate(key, now, |existing| {
            let cas_mode = request.compare_cas.is_some()
                && matches!(request.mode, StoreMode::Set | StoreMode::Replace);
            let new_item = |value: Bytes, flags: u32, expiry: Expiry| {
                let cas = request.new_cas.unwrap_or_else(|| self.next_cas());
                let mut item = self.new_item(key, value, flags, expiry, cas, now);
                if request.binary_key {
                    item.state |= STATE_BINARY_KEY;
                }
                item
            };
            let put = |item: Item| {
                let cas = item.cas;
                Ok(Plan::Put {
                    item,
                    result: StoreOutcome {
                        status: StoreStatus::Stored,
                        cas,
                    },
                })
            };
            match existing {
                None => match request.mode {
                    _ if cas_mode => Ok(keep(StoreStatus::NotFound)),
                    StoreMode::Set | StoreMode::Add => {
                        put(new_item(value.clone(), request.flags, request.expiry))
                    }
                    StoreMode::Replace | StoreMode::Append | StoreMode::Prepend => {
                        Ok(keep(StoreStatus::NotStored))
                    }
                },
                Some(old) => {
                    if cas_mode {
                        let supplied = request.compare_cas.unwrap_or(0);
                        if supplied != 0 && supplied == old.cas {
                            return put(new_item(value.clone(), request.flags, request.expiry));
                        }
                        if supplied != 0 && request.invalidate && supplied < old.cas {
                            let mut item = new_item(value.clone(), request.flags, old.expiry);
                            item.state = STATE_STALE
                                | (old.state & STATE_WIN_TOKEN_SENT)
                                | (item.state & STATE_BINARY_KEY);
                            return put(item);
                        }
                        return Ok(keep(StoreStatus::Exists));
                    }
                    match request.mode {
                        StoreMode::Set | StoreMode::Replace => {
                            put(new_item(value.clone(), request.flags, request.expiry))
                        }
                        StoreMode::Add => Ok(Plan::Keep {
                            result: not(StoreStatus::NotStored),
                            lru: LruMove::Write,
                        }),
                        StoreMode::Append | StoreMode::Prepend => {
                            if let Some(supplied) = request.compare_cas {
                                if supplied != 0 && supplied != old.cas {
                                    return Ok(keep(StoreStatus::Exists));
                                }
                            }
                            if item_size(key.len(), old.value.len() + value.len(), old.flags)
                                > self.item_size_max
                            {
                                return Ok(keep(StoreStatus::NotStored));
                            }
                            let mut joined = BytesMut::with_capacity(old.value.len() + value.len());
                            if request.mode == StoreMode::Append {
                                joined.extend_from_slice(&old.value);
                                joined.extend_from_slice(&value);
                            } else {
                                joined.extend_from_slice(&value);
                                joined.extend_from_slice(&old.value);
                            }
                            put(new_item(joined.freeze(), old.flags, old.expiry))
                        }
                    }
                }
            }
        });
        if let Err(StoreError::OutOfMemory { .. }) = result {
            let mut state = self.shards[self.shard_index(key)].state.lock();
            state.class_of(size).outofmemory += 1;
        }
        result
    }

    store_command!(
        /// `set`.
        set, Set
    );
    store_command!(
        /// `add`.
        add, Add
    );
    store_command!(
        /// `replace`.
        replace, Replace
    );
    store_command!(
        /// `append` (the item keeps its flags and expiry).
        append, Append, keeps flags and expiry
    );
    store_command!(
        /// `prepend` (the item keeps its flags and expiry).
        prepend, Prepend, keeps flags and expiry
    );

    /// `cas`: `Stored` if `cas_unique` matches, `Exists` if not, `NotFound`
    /// if there is no live item.
    pub fn cas(
        &self,
        key: &[u8],
        value: Bytes,
        flags: u32,
        expiry: Expiry,
        cas_unique: u64,
        now: UnixSecs,
    ) -> Result<StoreOutcome, StoreError> {
        let mut request = StoreRequest::new(StoreMode::Set, flags, expiry);
        request.compare_cas = Some(cas_unique);
        self.store(key, value, &request, now)
    }

    /// `delete`: true if a live item was removed (`DELETED`), false for
    /// `NOT_FOUND`.
    pub fn delete(&self, key: &[u8], now: UnixSecs) -> bool {
        matches!(
            self.meta_delete(key, &DeleteRequest::default(), now),
            Ok(DeleteOutcome::Deleted)
        )
    }

    /// `md`: delete, or with `invalidate` mark stale (clearing the win token
    /// and giving a new CAS), optionally guarded by a CAS compare.
    pub fn meta_delete(
        &self,
        key: &[u8],
        request: &DeleteRequest,
        now: UnixSecs,
    ) -> Result<DeleteOutcome, StoreError> {
        self.meta_delete_sized(key, request, now)
            .map(|(outcome, _)| outcome)
    }

    /// [`Store::meta_delete`], also giving the accounted size ([`item_size`]) of the live
    /// item it found, 0 when none (`stats slabs` counts a delete in that item's class).
    pub fn meta_delete_sized(
        &self,
        key: &[u8],
        request: &DeleteRequest,
        now: UnixSecs,
    ) -> Result<(DeleteOutcome, u64), StoreError> {
        validate_key(key)?;
        let found_size = std::cell::Cell::new(0);
        let outcome = self.mutate(key, now, |existing| {
            found_size.set(existing.as_deref().map_or(0, Item::size));
            let Some(item) = existing else {
                return Ok(Plan::Keep {
                    result: DeleteOutcome::NotFound,
                    lru: LruMove::None,
                });
            };
            if let Some(supplied) = request.compare_cas {
                if supplied != item.cas {
                    return Ok(Plan::Keep {
                        result: DeleteOutcome::Exists,
                        lru: LruMove::None,
                    });
                }
            }
            if request.invalidate {
                if let Some(expiry) = request.new_expiry {
                    item.expiry = expiry;
                }
                item.state = (item.state | STATE_STALE) & !STATE_WIN_TOKEN_SENT;
                item.cas = request.new_cas.unwrap_or_else(|| self.next_cas());
                return Ok(Plan::Keep {
                    result: DeleteOutcome::Invalidated,
                    lru: LruMove::None,
                });
            }
            Ok(Plan::Remove {
                result: DeleteOutcome::Deleted,
            })
        })?;
        Ok((outcome, found_size.get()))
    }

    /// `incr`: adds `delta`, wrapping at 2^64.
    pub fn incr(&self, key: &[u8], delta: u64, now: UnixSecs) -> Result<ArithOutcome, StoreError> {
        self.arithmetic(key, &ArithRequest::new(ArithDirection::Incr, delta), now)
    }

    /// `decr`: subtracts `delta`, flooring at 0.
    pub fn decr(&self, key: &[u8], delta: u64, now: UnixSecs) -> Result<ArithOutcome, StoreError> {
        self.arithmetic(key, &ArithRequest::new(ArithDirection::Decr, delta), now)
    }

    /// `incr`/`decr`/`ma`. The value must parse as a decimal u64
    /// ([`parse_counter`]); the result replaces it (space-padded to the old
    /// length if shorter, as memcached does) with a new CAS, keeping flags
    /// and expiry unless `new_expiry` is given. As in memcached, a result no
    /// longer than the old value is written into the same item; a longer one
    /// is a new item (counted in `total_items`).
    pub fn arithmetic(
        &self,
        key: &[u8],
        request: &ArithRequest,
        now: UnixSecs,
    ) -> Result<ArithOutcome, StoreError> {
        validate_key(key)?;
        self.mutate(key, now, |existing| {
            let keep = |result| {
                Ok(Plan::Keep {
                    result,
                    lru: LruMove::None,
                })
            };
            let cas = || request.new_cas.unwrap_or_else(|| self.next_cas());
            let Some(old) = existing else {
                let Some(vivify) = request.vivify else {
                    return keep(ArithOutcome::NotFound);
                };
                let expiry = request.new_expiry.unwrap_or(vivify.expiry);
                let value = Bytes::from(vivify.initial.to_string());
                let item = self.new_item(key, value, 0, expiry, cas(), now);
                let created = ArithItem {
                    value: vivify.initial,
                    cas: item.cas,
                    expiry,
                    size: item.size(),
                };
                return Ok(Plan::Put {
                    item,
                    result: ArithOutcome::Created(created),
                });
            };
            if old.value.is_empty() {
                return keep(ArithOutcome::NonNumeric);
            }
            if let Some(supplied) = request.compare_cas {
                if supplied != 0 && supplied != old.cas {
                    return keep(ArithOutcome::Exists);
                }
            }
            let Some(current) = parse_counter(&old.value) else {
                return keep(ArithOutcome::NonNumeric);
            };
            let number = match request.direction {
                ArithDirection::Incr => current.wrapping_add(request.delta),
                ArithDirection::Decr => current.saturating_sub(request.delta),
            };
            let expiry = request.new_expiry.unwrap_or(old.expiry);
            let old_size = old.size();
            let value = format_counter(number, old.value.len());
            if value.len() <= old.value.len() {
                // memcached rewrites a result that fits in place: the same item, a new CAS, no
                // new item linked (so `total_items` does not count it).
                old.value = value;
                old.cas = cas();
                old.expiry = expiry;
                let updated = ArithItem {
                    value: number,
                    cas: old.cas,
                    expiry,
                    size: old_size,
                };
                return Ok(Plan::Keep {
                    result: ArithOutcome::Updated(updated),
                    lru: LruMove::Write,
                });
            }
            let mut item = self.new_item(key, value, old.flags, expiry, cas(), now);
            item.state = old.state;
            let updated = ArithItem {
                value: number,
                cas: item.cas,
                expiry,
                size: old_size,
            };
            Ok(Plan::Put {
                item,
                result: ArithOutcome::Updated(updated),
            })
        })
    }

    // ----- whole-store operations ---------------------------------------

    /// `flush_all [delay]`: every item stored (last accessed) before the
    /// flush moment becomes invalid once that moment arrives. `at = None`
    /// flushes now; `Some(t)` (see [`crate::flush_deadline`]) at `t`.
    /// Mirrors memcached: the watermark is `t - 1` seconds, and an immediate
    /// flush also invalidates every CAS issued so far (so items written
    /// earlier in the current second are gone too). Items are removed lazily
    /// on access, by eviction, and by [`Store::crawl_expired`].
    pub fn flush_all(&self, at: Option<UnixSecs>, now: UnixSecs) {
        let _serialise = self.flush_lock.lock();
        let new_oldest = at.unwrap_or(now).0;
        let oldest_live = new_oldest.saturating_sub(1);
        if oldest_live <= now.0 {
            let cas = self.next_cas();
            self.flush_oldest_cas.store(cas, Ordering::Release);
        }
        self.flush_oldest_live_plus_one
            .store(oldest_live + 1, Ordering::Release);
    }

    /// Background expiry: inspects up to `budget` slots, a slice of one shard
    /// at a time (round robin, resuming where the last call stopped), and
    /// removes expired or flushed items. Call it periodically from a
    /// housekeeping thread.
    pub fn crawl_expired(&self, now: UnixSecs, budget: usize) -> CrawlReport {
        let mut report = CrawlReport::default();
        let mut remaining = budget;
        while remaining > 0 {
            let index = self.crawl_next_shard.fetch_add(1, Ordering::Relaxed) % self.shards.len();
            let shard = &self.shards[index];
            let mut state = shard.state.lock();
            let flush = self.flush_mark();
            let items = state.len();
            let take = remaining.min(CRAWL_SLICE).min(items).max(1);
            remaining -= take;
            if items == 0 {
                continue;
            }
            for _ in 0..take {
                let Some(location) = state.crawl_next() else {
                    break;
                };
                report.inspected += 1;
                state.counters.crawler_items_checked += 1;
                let dead = !is_live(&state.header(location), now, &flush);
                if dead {
                    let item = state.remove(location);
                    state.counters.crawler_reclaimed += 1;
                    state.class_of(item.size()).crawler_reclaimed += 1;
                    if !item.has(STATE_FETCHED) {
                        state.counters.expired_unfetched += 1;
                        state.class_of(item.size()).expired_unfetched += 1;
                    }
                    self.release(item.footprint());
                    report.reclaimed += 1;
                }
            }
            shard.publish(&state);
        }
        self.trim_allocator_if_due();
        report
    }

    /// Up to `limit` live items, most recently used first within each shard (memcached's
    /// order), the shards one after the other, each locked while its items are copied out:
    /// `stats cachedump`. `key_bytes` bounds the keys' total length as well (memcached stops
    /// its dump at 2 MB).
    pub fn dump_items(&self, limit: usize, key_bytes: usize, now: UnixSecs) -> Vec<DumpedItem> {
        let mut items = Vec::new();
        let mut bytes = 0usize;
        for shard in &self.shards {
            let state = shard.state.lock();
            let flush = self.flush_mark();
            for current in state.locations_most_recent_first() {
                if items.len() >= limit || bytes >= key_bytes {
                    return items;
                }
                let item = state.header(current);
                if is_live(&item, now, &flush) {
                    bytes += item.key_len;
                    items.push(DumpedItem {
                        key: Bytes::copy_from_slice(state.key(current)),
                        value_len: item.value_len,
                        expiry: item.expiry,
                    });
                }
            }
        }
        items
    }

    /// How many shards the store has: the units [`Store::item_metas`] copies out.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The live items of shard `shard` (none past the last), most recently used first, with
    /// what `lru_crawler metadump` prints; the shard is locked while they are copied out, so
    /// a dump holds one shard's worth at a time.
    pub fn item_metas(&self, shard: usize, now: UnixSecs) -> Vec<ItemMeta> {
        let Some(shard) = self.shards.get(shard) else {
            return Vec::new();
        };
        let state = shard.state.lock();
        let flush = self.flush_mark();
        let mut metas = Vec::new();
        for current in state.locations_most_recent_first() {
            let item = state.header(current);
            if is_live(&item, now, &flush) {
                metas.push(ItemMeta {
                    key: Bytes::copy_from_slice(state.key(current)),
                    expiry: item.expiry,
                    last_access: item.last_access,
                    cas: item.cas,
                    fetched: item.has(STATE_FETCHED),
                    size: item.size(),
                });
            }
        }
        metas
    }

    /// Key index entries re-hashed by the indexes' resizes so far, over all shards (what
    /// growing and shrinking the indexes cost).
    pub fn index_rehashed(&self) -> u64 {
        self.shards
            .iter()
            .map(|shard| shard.state.lock().index_rehashed())
            .sum()
    }

    /// Item statistics, summed over shards (each locked briefly, one at a
    /// time, so the figures are not one atomic snapshot).
    pub fn stats(&self) -> StoreStats {
        let mut stats = StoreStats {
            limit_maxbytes: self.max_bytes,
            item_size_max: self.item_size_max,
            shards: self.shards.len() as u64,
            ..StoreStats::default()
        };
        for shard in self.shards.iter() {
            let state = shard.state.lock();
            stats.curr_items += state.len() as u64;
            stats.bytes += state.bytes;
            stats.total_items += state.counters.total_items;
            stats.evictions += state.counters.evictions;
            stats.evicted_unfetched += state.counters.evicted_unfetched;
            stats.expired_unfetched += state.counters.expired_unfetched;
            stats.reclaimed += state.counters.reclaimed;
            stats.crawler_reclaimed += state.counters.crawler_reclaimed;
            stats.crawler_items_checked += state.counters.crawler_items_checked;
            stats.get_expired += state.counters.get_expired;
            stats.get_flushed += state.counters.get_flushed;
            stats.hash_buckets += state.index_slots() as u64;
            stats.hash_bytes += state.index_bytes() as u64;
            stats.sketch_bytes += state.sketch_bytes() as u64;
        }
        stats
    }

    /// The second of the last `flush_all` (items last accessed then or before it are
    /// invalid once it has passed), if any: memcached's `oldest_live`.
    pub fn flush_watermark(&self) -> Option<UnixSecs> {
        self.flush_mark().oldest_live.map(UnixSecs)
    }

    /// Figures per size class ([`size_class`]), indexed by class id (0 is unused), summed
    /// over shards. `age` walks each shard's segments from the oldest until every class the shard
    /// holds has been seen.
    pub fn class_stats(&self, now: UnixSecs) -> Vec<ClassStats> {
        let mut classes = vec![ClassStats::default(); SIZE_CLASS_LIMIT];
        for shard in self.shards.iter() {
            let state = shard.state.lock();
            let mut unseen = 0;
            for (total, class) in classes.iter_mut().zip(state.classes.iter()) {
                total.number += class.number;
                total.mem_requested += class.mem_requested;
                total.evicted += class.evicted;
                total.evicted_nonzero += class.evicted_nonzero;
                total.evicted_time = total.evicted_time.max(class.evicted_time);
                total.evicted_unfetched += class.evicted_unfetched;
                total.expired_unfetched += class.expired_unfetched;
                total.reclaimed += class.reclaimed;
                total.crawler_reclaimed += class.crawler_reclaimed;
                total.outofmemory += class.outofmemory;
                if class.number > 0 {
                    unseen += 1;
                }
            }
            let mut seen = [false; SIZE_CLASS_LIMIT];
            state.visit_oldest_first(|location| {
                if unseen == 0 {
                    return false;
                }
                let item = state.header(location);
                let id = size_class(item.size());
                if !seen[id] {
                    seen[id] = true;
                    unseen -= 1;
                    let age = now.0.saturating_sub(item.last_access.0);
                    classes[id].age = classes[id].age.max(age);
                }
                true
            });
        }
        classes
    }

    /// Zeroes the counters `stats reset` clears (memcached's item statistics and
    /// `total_items`); what the store holds (`curr_items`, `bytes`, per-class `number`)
    /// stays.
    pub fn reset_stats(&self) {
        for shard in self.shards.iter() {
            shard.state.lock().reset_counters();
        }
    }

    /// Checks every shard's internal consistency (tests only).
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let mut footprint = 0;
        for shard in self.shards.iter() {
            let state = shard.state.lock();
            state.check_invariants();
            assert_eq!(
                shard.eviction_rank.load(Ordering::Relaxed),
                state.eviction_rank(),
                "the published eviction rank is the shard's own"
            );
            footprint += state.footprint;
        }
        assert!(footprint <= self.max_bytes);
        assert_eq!(footprint, self.used_bytes());
    }

    /// Of the shards' segments: bytes resident, bytes of records not given back, and how
    /// many are mapped (tests only).
    #[cfg(test)]
    pub(crate) fn segment_residency(&self) -> (usize, usize, usize) {
        self.shards
            .iter()
            .fold((0, 0, 0), |(resident, readable, count), shard| {
                let state = shard.state.lock();
                let (more_resident, more_readable) = state.segment_residency();
                (
                    resident + more_resident,
                    readable + more_readable,
                    count + state.segment_count(),
                )
            })
    }

    /// Size classes' figures the shards hold, summed over shards (tests only).
    #[cfg(test)]
    pub(crate) fn class_figures_held(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.state.lock().classes.len())
            .sum()
    }

    /// Bytes appended to the shards' segments and not yet given back (tests only).
    #[cfg(test)]
    pub(crate) fn segment_bytes_held(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.state.lock().segment_used())
            .sum()
    }
}
