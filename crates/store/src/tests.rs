//! Unit tests of the store's memcached semantics, limits and concurrency.

use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::{prop, prop_assert, prop_assert_eq, proptest, ProptestConfig, Strategy};

use crate::{
    item_footprint, item_size, size_class, ArithDirection, ArithOutcome, ArithRequest, ArithVivify,
    DeleteOutcome, DeleteRequest, Expiry, MetaGetRequest, Store, StoreConfig, StoreError,
    StoreMode, StoreRequest, StoreStatus, UnixSecs, INLINE_HEADER_BYTES, RELATIVE_EXPTIME_MAX,
};

const T0: UnixSecs = UnixSecs(1_700_000_000);

fn at(offset: u64) -> UnixSecs {
    UnixSecs(T0.0 + offset)
}

fn store_with(max_bytes: u64, shards: usize) -> Store {
    Store::new(StoreConfig {
        max_bytes,
        shards,
        ..StoreConfig::default()
    })
    .expect("valid test config")
}

fn store() -> Store {
    store_with(64 * 1024 * 1024, 8)
}

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

fn value_of(store: &Store, key: &str, now: UnixSecs) -> Option<String> {
    store
        .get(key.as_bytes(), now)
        .map(|item| String::from_utf8_lossy(&item.value).into_owned())
}

fn set(store: &Store, key: &str, value: &str, exptime: i64, now: UnixSecs) -> u64 {
    let outcome = store
        .set(
            key.as_bytes(),
            b(value),
            0,
            Expiry::from_protocol(exptime, now),
            now,
        )
        .expect("set succeeds");
    assert_eq!(outcome.status, StoreStatus::Stored);
    outcome.cas
}

/// Sets `key` to `value` (flags 0, no expiry) at `now`.
fn set_bytes(store: &Store, key: &str, value: &Bytes, now: UnixSecs) {
    store
        .set(key.as_bytes(), value.clone(), 0, Expiry::Never, now)
        .expect("set succeeds");
}

fn counter(outcome: Result<ArithOutcome, StoreError>) -> u64 {
    match outcome {
        Ok(ArithOutcome::Updated(item)) | Ok(ArithOutcome::Created(item)) => item.value,
        other => panic!("expected a number, got {other:?}"),
    }
}

// ----- TTL ---------------------------------------------------------------

#[test]
fn exptime_conversion_follows_memcached_rules() {
    assert_eq!(Expiry::from_protocol(0, T0), Expiry::Never);
    assert_eq!(Expiry::from_protocol(100, T0), Expiry::At(at(100)));
    assert_eq!(
        Expiry::from_protocol(RELATIVE_EXPTIME_MAX, T0),
        Expiry::At(at(RELATIVE_EXPTIME_MAX as u64))
    );
    // One past 30 days is an absolute Unix time (1970 + 30 days: the past).
    let absolute_past = Expiry::from_protocol(RELATIVE_EXPTIME_MAX + 1, T0);
    assert_eq!(absolute_past, Expiry::At(UnixSecs(2_592_001)));
    assert!(absolute_past.is_expired(T0));
    let absolute_future = Expiry::from_protocol((T0.0 + 500) as i64, T0);
    assert_eq!(absolute_future, Expiry::At(at(500)));
    assert!(!absolute_future.is_expired(at(499)));
    assert!(absolute_future.is_expired(at(500)));
    assert!(Expiry::from_protocol(-1, T0).is_expired(T0));
    assert!(Expiry::from_protocol(i64::MIN, T0).is_expired(T0));
    assert_eq!(Expiry::Never.ttl_remaining(T0), None);
    assert_eq!(Expiry::At(at(30)).ttl_remaining(at(10)), Some(20));
}

#[test]
fn stored_items_expire_per_exptime() {
    let s = store();
    set(&s, "never", "v", 0, T0);
    set(&s, "relative", "v", 10, T0);
    set(&s, "absolute", "v", (T0.0 + 20) as i64, T0);
    set(&s, "negative", "v", -1, T0);
    set(&s, "past", "v", (T0.0 - 5) as i64, T0);
    assert_eq!(value_of(&s, "negative", T0), None);
    assert_eq!(value_of(&s, "past", T0), None);
    assert!(value_of(&s, "relative", at(9)).is_some());
    assert_eq!(value_of(&s, "relative", at(10)), None);
    assert!(value_of(&s, "absolute", at(19)).is_some());
    assert_eq!(value_of(&s, "absolute", at(20)), None);
    assert!(value_of(&s, "never", at(100 * 365 * 86_400)).is_some());
    s.check_invariants();
    // Lazily expired items are gone from the index and the byte count.
    assert_eq!(s.stats().curr_items, 1);
}

#[test]
fn touch_and_gat_move_expiry() {
    let s = store();
    set(&s, "k", "v", 10, T0);
    assert!(s.touch(b"k", Expiry::from_protocol(100, at(5)), at(5)));
    assert!(value_of(&s, "k", at(50)).is_some());
    let item = s
        .get_and_touch(b"k", Expiry::from_protocol(1, at(50)), at(50))
        .expect("hit");
    assert_eq!(item.expiry, Expiry::At(at(51)));
    assert_eq!(value_of(&s, "k", at(51)), None);
    assert!(!s.touch(b"k", Expiry::Never, at(52)));
}

#[test]
fn crawler_reclaims_expired_items() {
    let s = store();
    for i in 0..100 {
        set(&s, &format!("short{i}"), "v", 5, T0);
        set(&s, &format!("long{i}"), "v", 0, T0);
    }
    let report = s.crawl_expired(at(10), 10_000);
    assert_eq!(report.reclaimed, 100);
    let stats = s.stats();
    assert_eq!(stats.curr_items, 100);
    // memcached counts the crawler's removals as crawler_reclaimed, not reclaimed.
    assert_eq!((stats.crawler_reclaimed, stats.reclaimed), (100, 0));
    assert!(stats.crawler_items_checked >= 200);
    assert_eq!(stats.expired_unfetched, 100);
    // long0..long9 have 5-byte keys, long10..long99 6-byte keys.
    let expected_bytes = 10 * item_size(5, 1, 0) + 90 * item_size(6, 1, 0);
    assert_eq!(stats.bytes, expected_bytes);
    s.check_invariants();
}

#[test]
fn dump_items_lists_live_items_most_recently_used_first_within_limits() {
    let s = store_with(64 * 1024 * 1024, 1);
    set(&s, "a", "1", 0, T0);
    set(&s, "bb", "22", 100, T0);
    set(&s, "gone", "x", 5, T0);
    set(&s, "ccc", "333", 0, T0);
    assert!(s.get(b"a", at(1)).is_some()); // `a` becomes the most recently used
    let dump = s.dump_items(usize::MAX, usize::MAX, at(10));
    let keys: Vec<&[u8]> = dump.iter().map(|item| item.key.as_ref()).collect();
    assert_eq!(keys, [&b"a"[..], b"ccc", b"bb"], "expired `gone` left out");
    assert_eq!(dump[2].value_len, 2);
    assert_eq!(dump[2].expiry, Expiry::At(at(100)));
    assert_eq!(dump[0].expiry, Expiry::Never);
    assert_eq!(s.dump_items(2, usize::MAX, at(10)).len(), 2);
    // The key budget stops the dump once reached (after the item that reaches it).
    assert_eq!(s.dump_items(usize::MAX, 4, at(10)).len(), 2);
}

// ----- incr / decr --------------------------------------------------------

#[test]
fn incr_wraps_at_2_pow_64_and_decr_floors_at_zero() {
    let s = store();
    set(&s, "n", &u64::MAX.to_string(), 0, T0);
    assert_eq!(counter(s.incr(b"n", 1, T0)), 0);
    // In-place update pads to the old length, like memcached.
    assert_eq!(value_of(&s, "n", T0).unwrap(), format!("{:<20}", "0"));
    assert_eq!(counter(s.incr(b"n", 5, T0)), 5);
    assert_eq!(counter(s.incr(b"n", u64::MAX, T0)), 4);
    assert_eq!(counter(s.decr(b"n", 10, T0)), 0);
    assert_eq!(counter(s.decr(b"n", 1, T0)), 0);
    set(&s, "m", "100", 0, T0);
    assert_eq!(counter(s.decr(b"m", 95, T0)), 5);
    assert_eq!(value_of(&s, "m", T0).unwrap(), "5  ");
    set(&s, "g", "99", 0, T0);
    assert_eq!(counter(s.incr(b"g", 1, T0)), 100);
    assert_eq!(value_of(&s, "g", T0).unwrap(), "100");
    s.check_invariants();
}

#[test]
fn incr_on_non_numbers_and_missing_items() {
    let s = store();
    for bad in ["abc", "12abc", "", "1x2", "-5", "18446744073709551616"] {
        set(&s, "k", bad, 0, T0);
        assert_eq!(
            s.incr(b"k", 1, T0),
            Ok(ArithOutcome::NonNumeric),
            "value {bad:?}"
        );
        assert_eq!(value_of(&s, "k", T0).unwrap(), bad, "item kept");
    }
    for (good, expected) in [(" 12 ", 13), ("-0", 1), ("+7", 8), ("5\t", 6)] {
        set(&s, "k", good, 0, T0);
        assert_eq!(counter(s.incr(b"k", 1, T0)), expected, "value {good:?}");
    }
    assert_eq!(s.incr(b"missing", 1, T0), Ok(ArithOutcome::NotFound));
}

#[test]
fn incr_keeps_flags_and_expiry_and_changes_cas() {
    let s = store();
    let expiry = Expiry::from_protocol(100, T0);
    let first = s.set(b"n", b("1"), 42, expiry, T0).unwrap();
    let Ok(ArithOutcome::Updated(after)) = s.incr(b"n", 1, T0) else {
        panic!("incr failed")
    };
    assert_ne!(after.cas, first.cas);
    let item = s.get(b"n", T0).unwrap();
    assert_eq!((item.flags, item.expiry, item.cas), (42, expiry, after.cas));
}

#[test]
fn meta_arithmetic_vivify_cas_and_ttl() {
    let s = store();
    let mut request = ArithRequest::new(ArithDirection::Incr, 5);
    request.vivify = Some(ArithVivify {
        initial: 10,
        expiry: Expiry::from_protocol(30, T0),
    });
    let Ok(ArithOutcome::Created(created)) = s.arithmetic(b"c", &request, T0) else {
        panic!("expected vivify")
    };
    assert_eq!(created.value, 10);
    assert_eq!(created.expiry, Expiry::At(at(30)));
    assert_eq!(counter(s.arithmetic(b"c", &request, T0)), 15);
    request.compare_cas = Some(created.cas);
    assert_eq!(s.arithmetic(b"c", &request, T0), Ok(ArithOutcome::Exists));
    request.compare_cas = Some(0);
    request.new_expiry = Some(Expiry::Never);
    request.direction = ArithDirection::Decr;
    let Ok(ArithOutcome::Updated(item)) = s.arithmetic(b"c", &request, T0) else {
        panic!("expected update")
    };
    assert_eq!((item.value, item.expiry), (10, Expiry::Never));
}

// ----- storage commands -------------------------------------------------

#[test]
fn cas_semantics() {
    let s = store();
    assert_eq!(
        s.cas(b"k", b("v"), 0, Expiry::Never, 1, T0).unwrap().status,
        StoreStatus::NotFound
    );
    let cas = set(&s, "k", "v1", 0, T0);
    assert_eq!(s.get(b"k", T0).unwrap().cas, cas);
    assert_eq!(
        s.cas(b"k", b("x"), 0, Expiry::Never, cas + 1, T0)
            .unwrap()
            .status,
        StoreStatus::Exists
    );
    assert_eq!(
        s.cas(b"k", b("x"), 0, Expiry::Never, 0, T0).unwrap().status,
        StoreStatus::Exists
    );
    let swapped = s.cas(b"k", b("v2"), 3, Expiry::Never, cas, T0).unwrap();
    assert_eq!(swapped.status, StoreStatus::Stored);
    assert!(swapped.cas > cas, "CAS uniques increase");
    assert_eq!(
        s.cas(b"k", b("v3"), 0, Expiry::Never, cas, T0)
            .unwrap()
            .status,
        StoreStatus::Exists,
        "the old unique no longer matches"
    );
    let item = s.get(b"k", T0).unwrap();
    assert_eq!((&item.value[..], item.flags), (&b"v2"[..], 3));
}

#[test]
fn add_and_replace_semantics() {
    let s = store();
    assert_eq!(
        s.replace(b"k", b("r"), 0, Expiry::Never, T0)
            .unwrap()
            .status,
        StoreStatus::NotStored
    );
    assert_eq!(value_of(&s, "k", T0), None);
    assert_eq!(
        s.add(b"k", b("a1"), 0, Expiry::Never, T0).unwrap().status,
        StoreStatus::Stored
    );
    assert_eq!(
        s.add(b"k", b("a2"), 0, Expiry::Never, T0).unwrap().status,
        StoreStatus::NotStored
    );
    assert_eq!(value_of(&s, "k", T0).unwrap(), "a1");
    assert_eq!(
        s.replace(b"k", b("r"), 9, Expiry::Never, T0)
            .unwrap()
            .status,
        StoreStatus::Stored
    );
    assert_eq!(value_of(&s, "k", T0).unwrap(), "r");
    // add succeeds over an expired item.
    set(&s, "e", "old", 1, T0);
    assert_eq!(
        s.add(b"e", b("new"), 0, Expiry::Never, at(1))
            .unwrap()
            .status,
        StoreStatus::Stored
    );
    assert_eq!(value_of(&s, "e", at(1)).unwrap(), "new");
    s.check_invariants();
}

#[test]
fn append_prepend_keep_flags_and_expiry() {
    let s = store();
    assert_eq!(
        s.append(b"k", b("x"), T0).unwrap().status,
        StoreStatus::NotStored
    );
    let expiry = Expiry::from_protocol(100, T0);
    let first = s.set(b"k", b("mid"), 77, expiry, T0).unwrap();
    assert_eq!(
        s.append(b"k", b("-end"), T0).unwrap().status,
        StoreStatus::Stored
    );
    assert_eq!(
        s.prepend(b"k", b("start-"), T0).unwrap().status,
        StoreStatus::Stored
    );
    let item = s.get(b"k", T0).unwrap();
    assert_eq!(&item.value[..], b"start-mid-end");
    assert_eq!((item.flags, item.expiry), (77, expiry));
    assert_ne!(item.cas, first.cas);
    let mut request = StoreRequest::new(StoreMode::Append, 0, Expiry::Never);
    request.compare_cas = Some(first.cas);
    assert_eq!(
        s.store(b"k", b("!"), &request, T0).unwrap().status,
        StoreStatus::Exists
    );
    request.compare_cas = Some(item.cas);
    assert_eq!(
        s.store(b"k", b("!"), &request, T0).unwrap().status,
        StoreStatus::Stored
    );
    assert_eq!(value_of(&s, "k", T0).unwrap(), "start-mid-end!");
    s.check_invariants();
}

#[test]
fn limits_key_length_and_item_size() {
    let s = store();
    let long = vec![b'k'; 251];
    assert!(matches!(
        s.set(&long, b("v"), 0, Expiry::Never, T0),
        Err(StoreError::KeyTooLong { len: 251, .. })
    ));
    assert_eq!(
        s.set(b"", b("v"), 0, Expiry::Never, T0),
        Err(StoreError::EmptyKey)
    );
    assert!(s.set(&long[..250], b("v"), 0, Expiry::Never, T0).is_ok());
    // memcached -I 1m with a 1-byte key: 1048516 fits, one more does not,
    // and non-zero flags cost 4 bytes.
    let fits = Bytes::from(vec![b'x'; 1_048_516]);
    let over = Bytes::from(vec![b'x'; 1_048_517]);
    assert!(s.set(b"a", fits.clone(), 0, Expiry::Never, T0).is_ok());
    assert!(matches!(
        s.set(b"a", fits, 1, Expiry::Never, T0),
        Err(StoreError::TooLarge { .. })
    ));
    // The failed overwrite removed the old value, as memcached does.
    assert_eq!(value_of(&s, "a", T0), None);
    assert!(matches!(
        s.set(b"a", over, 0, Expiry::Never, T0),
        Err(StoreError::TooLarge { .. })
    ));
    // Append that would grow past -I is NOT_STORED.
    set(&s, "b", "x", 0, T0);
    let big = Bytes::from(vec![b'y'; 1_048_516]);
    assert_eq!(
        s.append(b"b", big, T0).unwrap().status,
        StoreStatus::NotStored
    );
    s.check_invariants();
}

#[test]
fn explicit_cas_from_caller() {
    let s = store();
    let mut request = StoreRequest::new(StoreMode::Set, 0, Expiry::Never);
    request.new_cas = Some(987_654);
    let outcome = s.store(b"k", b("v"), &request, T0).unwrap();
    assert_eq!(outcome.cas, 987_654);
    assert_eq!(s.get(b"k", T0).unwrap().cas, 987_654);
}

#[test]
fn delete_and_meta_delete() {
    let s = store();
    assert!(!s.delete(b"k", T0));
    let cas = set(&s, "k", "v", 0, T0);
    let mut request = DeleteRequest {
        compare_cas: Some(cas + 1),
        ..DeleteRequest::default()
    };
    assert_eq!(s.meta_delete(b"k", &request, T0), Ok(DeleteOutcome::Exists));
    request.compare_cas = Some(cas);
    assert_eq!(
        s.meta_delete(b"k", &request, T0),
        Ok(DeleteOutcome::Deleted)
    );
    assert_eq!(value_of(&s, "k", T0), None);
    assert_eq!(s.stats().curr_items, 0);
    set(&s, "k", "v", 0, T0);
    assert!(s.delete(b"k", T0));
    assert!(!s.delete(b"k", T0));
    s.check_invariants();
}

// ----- flush_all ---------------------------------------------------------

#[test]
fn flush_all_immediate_invalidates_everything_written_before() {
    let s = store();
    set(&s, "a", "1", 0, T0);
    set(&s, "b", "2", 0, at(5));
    s.flush_all(None, at(5));
    assert_eq!(value_of(&s, "a", at(5)), None);
    assert_eq!(
        value_of(&s, "b", at(5)),
        None,
        "same-second item is flushed by CAS"
    );
    set(&s, "c", "3", 0, at(5));
    assert_eq!(value_of(&s, "c", at(5)).unwrap(), "3");
    assert_eq!(value_of(&s, "c", at(6)).unwrap(), "3");
}

#[test]
fn flush_all_with_delay() {
    let s = store();
    set(&s, "a", "1", 0, T0);
    s.flush_all(crate::flush_deadline(10, T0), T0);
    assert_eq!(value_of(&s, "a", at(5)).unwrap(), "1");
    set(&s, "b", "2", 0, at(6));
    assert_eq!(value_of(&s, "b", at(8)).unwrap(), "2");
    // memcached's watermark is deadline - 1.
    assert_eq!(value_of(&s, "a", at(9)), None);
    assert_eq!(value_of(&s, "b", at(10)), None);
    set(&s, "c", "3", 0, at(10));
    assert_eq!(value_of(&s, "c", at(11)).unwrap(), "3");
    assert_eq!(crate::flush_deadline(0, T0), None);
    assert_eq!(crate::flush_deadline(-3, T0), None);
}

// ----- eviction ----------------------------------------------------------

#[test]
fn eviction_is_lru_recently_read_items_survive() {
    let per_item = item_footprint(2, 100, 0);
    let s = store_with(per_item * 10, 1);
    let value = Bytes::from(vec![b'v'; 100]);
    for i in 0..10 {
        s.set(
            format!("k{i}").as_bytes(),
            value.clone(),
            0,
            Expiry::Never,
            at(i),
        )
        .unwrap();
    }
    assert!(s.get(b"k0", at(20)).is_some());
    assert!(s.get(b"k1", at(21)).is_some());
    for i in 0..3 {
        s.set(
            format!("n{i}").as_bytes(),
            value.clone(),
            0,
            Expiry::Never,
            at(30),
        )
        .unwrap();
    }
    let present: Vec<bool> = (0..10)
        .map(|i| s.peek(format!("k{i}").as_bytes(), at(30)).is_some())
        .collect();
    // k2, k3, k4 were the least recently used.
    assert_eq!(
        present,
        vec![true, true, false, false, false, true, true, true, true, true]
    );
    let stats = s.stats();
    assert_eq!(stats.evictions, 3);
    assert_eq!(stats.evicted_unfetched, 3);
    assert!(s.used_bytes() <= per_item * 10);
    assert_eq!(stats.bytes, item_size(2, 100, 0) * 10);
    s.check_invariants();
}

#[test]
fn a_small_item_read_often_outlives_a_flood_of_large_items_read_never() {
    // Segment order with a second chance evicts the small item on the flood's second pass
    // over the shard; requests per byte keep it (memcached's LRU would not: its order is
    // recency, which this store does not promise).
    let large = Bytes::from(vec![b'L'; 2000]);
    let s = store_with(item_footprint(5, 2000, 0) * 20, 1);
    set(&s, "small", "v", 0, at(0));
    for _ in 0..4 {
        assert!(s.get(b"small", at(1)).is_some());
    }
    // Two passes over the store: its reads keep it through both, where a read once per
    // pass is all the segment FIFO's second chance remembers (and aging takes a level
    // off per pass unread, so a longer flood would see it go).
    for index in 0..40u64 {
        set_bytes(&s, &format!("l{index:04}"), &large, at(2 + index));
    }
    assert!(s.stats().evictions > 15);
    assert!(s.peek(b"small", at(300)).is_some());
    s.check_invariants();
}

#[test]
fn eviction_takes_from_the_shard_holding_the_most_bytes() {
    // Two shards: five items in one, written first, fifteen newer ones in the other. The
    // store compares requests per byte only within a shard, so it keeps the shards equally
    // full: the next evictions take from the fuller shard although the other's items are
    // older (choosing the shard by oldest access, as before, took those).
    let per_item = item_footprint(4, 1000, 0);
    let s = store_with(per_item * 20, 2);
    let value = Bytes::from(vec![b'v'; 1000]);
    let keys: Vec<String> = (0..200).map(|i| format!("k{i:03}")).collect();
    let in_shard = |shard: usize, count: usize| -> Vec<String> {
        keys.iter()
            .filter(|key| s.shard_index(key.as_bytes()) == shard)
            .take(count)
            .cloned()
            .collect()
    };
    let few = in_shard(0, 5);
    let many = in_shard(1, 18);
    for (i, key) in few.iter().enumerate() {
        set_bytes(&s, key, &value, at(i as u64));
    }
    for (i, key) in many.iter().enumerate() {
        set_bytes(&s, key, &value, at(100 + i as u64));
    }
    assert!(s.stats().evictions >= 3);
    for key in &few {
        assert!(s.peek(key.as_bytes(), at(300)).is_some(), "{key} evicted");
    }
    s.check_invariants();
}

#[test]
fn the_published_eviction_rank_stays_exact_under_reads() {
    // The store republishes a shard's eviction rank (its bytes) after changes, not after a
    // read that finds a live item; after every operation the published rank must be the
    // shard's own.
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(29);
    let s = store_with(24 * 1024, 3);
    let key = |i: u32| format!("key{i:03}");
    for step in 0..6_000u64 {
        let now = at(step / 7);
        let k = key(rng.gen_range(0..600));
        match rng.gen_range(0..10) {
            0..=2 => {
                let value = Bytes::from(vec![b'x'; rng.gen_range(1..300)]);
                let exptime = if rng.gen_bool(0.2) {
                    rng.gen_range(1..40)
                } else {
                    0
                };
                let expiry = Expiry::from_protocol(exptime, now);
                let _ = s.set(k.as_bytes(), value, 0, expiry, now);
            }
            3 => {
                let _ = s.get_and_touch(k.as_bytes(), Expiry::Never, now);
            }
            4 => {
                s.delete(k.as_bytes(), now);
            }
            5 => {
                let _ = s.get_with(k.as_bytes(), now, |item| item.value.len());
            }
            _ => {
                let _ = s.get(k.as_bytes(), now);
            }
        }
        s.check_invariants();
    }
    let stats = s.stats();
    assert!(stats.evictions > 100, "{} evictions", stats.evictions);
}

#[test]
fn get_with_lends_the_item_a_get_would_return_and_marks_it_read() {
    let s = store();
    let long = Bytes::from(vec![b'L'; crate::EXTERNAL_VALUE_MIN + 1]);
    for (key, value, flags) in [("short", b("v"), 0), ("long", long, 7)] {
        let cas = s
            .set(key.as_bytes(), value.clone(), flags, Expiry::Never, T0)
            .unwrap()
            .cas;
        let lent = s.get_with(key.as_bytes(), at(1), |item| {
            (item.value.to_vec(), item.flags, item.cas, item.expiry)
        });
        assert_eq!(lent, Some((value.to_vec(), flags, cas, Expiry::Never)));
        let request = MetaGetRequest::default();
        let hit = s
            .meta_get(key.as_bytes(), &request, at(2))
            .unwrap()
            .unwrap();
        assert!(hit.hit_before, "{key}: marked fetched");
        assert_eq!(hit.secs_since_access, 1, "{key}: last access set");
        let viewed = s.get(key.as_bytes(), at(2)).unwrap();
        assert_eq!(
            (viewed.value, viewed.flags, viewed.cas),
            (value, flags, cas)
        );
    }
    assert_eq!(s.get_with(b"absent", T0, |item| item.flags), None);
    assert_eq!(s.get_with(b"", T0, |item| item.flags), None);
}

#[test]
fn eviction_reclaims_expired_tail_before_live_items() {
    let per_item = item_footprint(2, 10, 0);
    let s = store_with(per_item * 3, 1);
    set(&s, "k0", "0123456789", 0, T0);
    set(&s, "k1", "0123456789", 5, T0);
    set(&s, "k2", "0123456789", 0, T0);
    s.get(b"k1", T0); // k1 is now the LRU head, but expires at +5
    set(&s, "k3", "0123456789", 0, at(10));
    assert!(s.peek(b"k0", at(10)).is_some(), "live tail survived");
    let stats = s.stats();
    assert_eq!((stats.reclaimed, stats.evictions), (1, 0));
}

#[test]
fn an_item_larger_than_a_shards_share_fits() {
    // 1 MiB budget over 64 shards: each shard's "share" is 16 KiB.
    let s = store_with(1024 * 1024, 64);
    for i in 0..100 {
        set(&s, &format!("small{i}"), "x", 0, T0);
    }
    let big = Bytes::from(vec![b'b'; 1_000_000]);
    assert_eq!(
        s.set(b"big", big, 0, Expiry::Never, T0).unwrap().status,
        StoreStatus::Stored
    );
    assert_eq!(s.get(b"big", T0).unwrap().value.len(), 1_000_000);
    s.check_invariants();
    // Larger than the whole budget but within -I: out of memory.
    let small = store_with(10_000, 4);
    assert!(matches!(
        small.set(b"k", Bytes::from(vec![0; 20_000]), 0, Expiry::Never, T0),
        Err(StoreError::OutOfMemory { .. })
    ));
}

// ----- meta --------------------------------------------------------------

#[test]
fn meta_get_vivify_hands_out_one_win() {
    let s = store();
    let request = MetaGetRequest {
        vivify: Some(Expiry::from_protocol(30, T0)),
        ..MetaGetRequest::default()
    };
    let first = s.meta_get(b"k", &request, T0).unwrap().expect("vivified");
    assert!(first.created && first.won && !first.token_already_sent);
    assert!(first.item.value.is_empty());
    assert_eq!(first.item.expiry, Expiry::At(at(30)));
    let second = s.meta_get(b"k", &request, at(1)).unwrap().expect("hit");
    assert!(!second.created && !second.won && second.token_already_sent);
    // The winner recaches with a normal set, which clears the token state.
    set(&s, "k", "fresh", 0, at(2));
    let third = s.meta_get(b"k", &request, at(3)).unwrap().expect("hit");
    assert!(!third.won && !third.token_already_sent && !third.stale);
    assert_eq!(&third.item.value[..], b"fresh");
    // Without N a miss stays a miss.
    assert_eq!(
        s.meta_get(b"nope", &MetaGetRequest::default(), T0),
        Ok(None)
    );
}

#[test]
fn meta_get_reports_hit_before_and_last_access_then_updates_them() {
    let s = store();
    set(&s, "k", "v", 0, T0);
    let plain = MetaGetRequest::default();
    let first = s.meta_get(b"k", &plain, at(7)).unwrap().unwrap();
    assert!(!first.hit_before);
    assert_eq!(first.secs_since_access, 7);
    let second = s.meta_get(b"k", &plain, at(10)).unwrap().unwrap();
    assert!(second.hit_before);
    assert_eq!(second.secs_since_access, 3);
    // `u` (no bump) leaves last access alone.
    let no_bump = MetaGetRequest {
        no_bump: true,
        ..MetaGetRequest::default()
    };
    assert_eq!(
        s.meta_get(b"k", &no_bump, at(20))
            .unwrap()
            .unwrap()
            .secs_since_access,
        10
    );
    assert_eq!(
        s.meta_get(b"k", &no_bump, at(25))
            .unwrap()
            .unwrap()
            .secs_since_access,
        15
    );
    // T updates the TTL within the same operation.
    let touch = MetaGetRequest {
        new_expiry: Some(Expiry::from_protocol(5, at(25))),
        ..MetaGetRequest::default()
    };
    let touched = s.meta_get(b"k", &touch, at(25)).unwrap().unwrap();
    assert_eq!(touched.item.expiry.ttl_remaining(at(25)), Some(5));
    assert_eq!(value_of(&s, "k", at(30)), None);
}

#[test]
fn meta_get_recache_token() {
    let s = store();
    set(&s, "k", "v", 100, T0);
    let recache = MetaGetRequest {
        recache_before: Some(Expiry::from_protocol(30, at(50))),
        ..MetaGetRequest::default()
    };
    let early = s.meta_get(b"k", &recache, at(50)).unwrap().unwrap();
    assert!(!early.won, "70 s left is above the 30 s threshold");
    let recache = MetaGetRequest {
        recache_before: Some(Expiry::from_protocol(30, at(80))),
        ..MetaGetRequest::default()
    };
    let late = s.meta_get(b"k", &recache, at(80)).unwrap().unwrap();
    assert!(late.won && !late.token_already_sent);
    let other = s.meta_get(b"k", &recache, at(81)).unwrap().unwrap();
    assert!(!other.won && other.token_already_sent);
}

#[test]
fn invalidation_marks_stale_and_reissues_the_token() {
    let s = store();
    let original = set(&s, "k", "v1", 0, T0);
    let invalidate = DeleteRequest {
        invalidate: true,
        new_expiry: Some(Expiry::from_protocol(30, T0)),
        ..DeleteRequest::default()
    };
    assert_eq!(
        s.meta_delete(b"k", &invalidate, T0),
        Ok(DeleteOutcome::Invalidated)
    );
    let plain = MetaGetRequest::default();
    let first = s
        .meta_get(b"k", &plain, T0)
        .unwrap()
        .expect("stale item still served");
    assert!(first.stale && first.won && !first.token_already_sent);
    assert_eq!(&first.item.value[..], b"v1");
    assert!(first.item.cas > original, "invalidation bumps the CAS");
    assert_eq!(first.item.expiry, Expiry::At(at(30)));
    let second = s.meta_get(b"k", &plain, T0).unwrap().unwrap();
    assert!(second.stale && !second.won && second.token_already_sent);

    // A late writer holding the pre-invalidation CAS may store with `I`:
    // the value lands but stays stale, keeping TTL and token state.
    let mut late = StoreRequest::new(StoreMode::Set, 0, Expiry::Never);
    late.compare_cas = Some(original);
    assert_eq!(
        s.store(b"k", b("late"), &late, T0).unwrap().status,
        StoreStatus::Exists
    );
    late.invalidate = true;
    assert_eq!(
        s.store(b"k", b("late"), &late, T0).unwrap().status,
        StoreStatus::Stored
    );
    let third = s.meta_get(b"k", &plain, T0).unwrap().unwrap();
    assert!(third.stale && third.token_already_sent && !third.won);
    assert_eq!(&third.item.value[..], b"late");
    assert_eq!(third.item.expiry, Expiry::At(at(30)));

    // The winner's CAS store clears staleness.
    let mut winner = StoreRequest::new(StoreMode::Set, 0, Expiry::Never);
    winner.compare_cas = Some(third.item.cas);
    assert_eq!(
        s.store(b"k", b("v2"), &winner, T0).unwrap().status,
        StoreStatus::Stored
    );
    let fresh = s.meta_get(b"k", &plain, T0).unwrap().unwrap();
    assert!(!fresh.stale && !fresh.won && !fresh.token_already_sent);
}

// ----- memory limit under random workloads -------------------------------

#[derive(Debug, Clone)]
enum Op {
    Set(u8, usize),
    Append(u8, usize),
    Incr(u8),
    Delete(u8),
    Get(u8),
    Vivify(u8),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    proptest::prop_oneof![
        (0u8..40, 0usize..3000).prop_map(|(k, n)| Op::Set(k, n)),
        (0u8..40, 0usize..2000).prop_map(|(k, n)| Op::Append(k, n)),
        (0u8..40).prop_map(Op::Incr),
        (0u8..40).prop_map(Op::Delete),
        (0u8..40).prop_map(Op::Get),
        (0u8..40).prop_map(Op::Vivify),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn memory_never_exceeds_the_limit(
        ops in prop::collection::vec(op_strategy(), 1..200),
        max_bytes in 4_000u64..20_000,
        shards in 1usize..6,
    ) {
        let s = store_with(max_bytes, shards);
        for (step, op) in ops.iter().enumerate() {
            let now = at(step as u64);
            let key = |k: &u8| format!("key{k}").into_bytes();
            match op {
                Op::Set(k, n) => {
                    let value = Bytes::from(vec![b'1'; *n]);
                    match s.set(&key(k), value, 0, Expiry::Never, now) {
                        Ok(outcome) => prop_assert_eq!(outcome.status, StoreStatus::Stored),
                        Err(StoreError::OutOfMemory { size }) => prop_assert!(size > max_bytes),
                        Err(other) => prop_assert!(false, "unexpected {:?}", other),
                    }
                }
                Op::Append(k, n) => {
                    let _ = s.append(&key(k), Bytes::from(vec![b'2'; *n]), now);
                }
                Op::Incr(k) => {
                    let _ = s.incr(&key(k), 12345, now);
                }
                Op::Delete(k) => {
                    s.delete(&key(k), now);
                }
                Op::Get(k) => {
                    if let Some(item) = s.get(&key(k), now) {
                        prop_assert!(item_size(key(k).len(), item.value.len(), item.flags) <= max_bytes);
                    }
                }
                Op::Vivify(k) => {
                    let request = MetaGetRequest { vivify: Some(Expiry::Never), ..MetaGetRequest::default() };
                    let _ = s.meta_get(&key(k), &request, now);
                }
            }
            prop_assert!(s.used_bytes() <= max_bytes);
        }
        s.check_invariants();
    }
}

// ----- concurrency ---------------------------------------------------------

#[test]
fn concurrent_workers_keep_values_and_limits_consistent() {
    let max_bytes = 200_000;
    let s = Arc::new(store_with(max_bytes, 8));
    let threads: Vec<_> = (0..4u64)
        .map(|thread| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let mut seed = thread * 7919 + 1;
                for step in 0..5_000u64 {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let key_id = (seed >> 33) % 200;
                    let key = format!("key{key_id}");
                    let now = at(step / 100);
                    match (seed >> 20) % 5 {
                        0 | 1 => {
                            // Value = key repeated, so any read can be checked.
                            let repeat = 1 + (seed >> 40) as usize % 100;
                            let value = Bytes::from(key.repeat(repeat));
                            let _ = s.set(key.as_bytes(), value, thread as u32, Expiry::Never, now);
                        }
                        2 => {
                            if let Some(item) = s.get(key.as_bytes(), now) {
                                assert_eq!(item.value.len() % key.len(), 0);
                                assert!(item.value.chunks(key.len()).all(|c| c == key.as_bytes()));
                            }
                        }
                        3 => {
                            s.delete(key.as_bytes(), now);
                        }
                        _ => {
                            let _ = s.append(key.as_bytes(), Bytes::from(key.clone()), now);
                        }
                    }
                    assert!(s.used_bytes() <= max_bytes);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("worker panicked");
    }
    s.check_invariants();
    let stats = s.stats();
    assert!(stats.bytes <= max_bytes);
    assert!(stats.total_items > 0);
}

#[test]
fn concurrent_incr_loses_no_updates() {
    let s = Arc::new(store());
    set(&s, "n", "0", 0, T0);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                for _ in 0..1_000 {
                    counter(s.incr(b"n", 1, T0));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("worker panicked");
    }
    assert_eq!(value_of(&s, "n", T0).unwrap().trim_end(), "4000");
}

#[test]
fn overwriting_at_full_memory_evicts_nothing_and_add_refreshes_lru() {
    let per_item = item_footprint(2, 100, 0);
    let s = store_with(per_item * 4, 1);
    let value = Bytes::from(vec![b'v'; 100]);
    for i in 0..4 {
        s.set(
            format!("k{i}").as_bytes(),
            value.clone(),
            0,
            Expiry::Never,
            at(i),
        )
        .unwrap();
    }
    for round in 0..10 {
        s.set(b"k3", value.clone(), 0, Expiry::Never, at(10 + round))
            .unwrap();
    }
    assert_eq!(s.stats().evictions, 0);
    // A failed add on k0 moves it to the LRU head, so k1 goes first.
    assert_eq!(
        s.add(b"k0", value.clone(), 0, Expiry::Never, at(30))
            .unwrap()
            .status,
        StoreStatus::NotStored
    );
    s.set(b"k4", value, 0, Expiry::Never, at(31)).unwrap();
    assert!(s.peek(b"k0", at(31)).is_some());
    assert!(s.peek(b"k1", at(31)).is_none());
    assert_eq!(s.stats().evictions, 1);
    s.check_invariants();
}

#[test]
fn crawler_respects_its_budget_and_resumes() {
    let s = store_with(64 * 1024 * 1024, 2);
    for i in 0..500 {
        set(&s, &format!("k{i}"), "v", 1, T0);
    }
    let first = s.crawl_expired(at(5), 100);
    assert_eq!(first.inspected, 100);
    assert_eq!(first.reclaimed, 100);
    let mut total = first.reclaimed;
    for _ in 0..20 {
        total += s.crawl_expired(at(5), 100).reclaimed;
    }
    assert_eq!(total, 500);
    assert_eq!(s.stats().curr_items, 0);
    assert_eq!(s.used_bytes(), 0);
    s.check_invariants();
}

#[test]
fn error_replies_match_memcached() {
    let s = store();
    let err = s
        .set(b"k", Bytes::from(vec![0; 2 << 20]), 0, Expiry::Never, T0)
        .unwrap_err();
    assert_eq!(
        err.memcached_reply(),
        "SERVER_ERROR object too large for cache"
    );
}

/// memcached's `-M`: a full store refuses new items instead of evicting, keeps every stored
/// item, and still reclaims expired ones.
#[test]
fn no_evict_mode_refuses_when_full_and_reclaims_dead_items() {
    let store = Store::new(StoreConfig {
        max_bytes: 64 * 1024,
        shards: 4,
        evict_to_free: false,
        ..StoreConfig::default()
    })
    .expect("valid config");
    let now = at(0);
    let value = Bytes::from(vec![b'v'; 1000]);
    let mut stored = Vec::new();
    let refused = (0..200).find_map(|index| {
        let key = format!("k{index}");
        match store.set(key.as_bytes(), value.clone(), 0, Expiry::Never, now) {
            Ok(_) => {
                stored.push(key);
                None
            }
            Err(error) => Some(error),
        }
    });
    assert!(
        matches!(refused, Some(StoreError::OutOfMemory { .. })),
        "{refused:?}"
    );
    assert!(stored.len() > 30, "only {} stored", stored.len());
    for key in &stored {
        assert!(
            store.get(key.as_bytes(), now).is_some(),
            "{key} was evicted"
        );
    }
    assert_eq!(store.stats().evictions, 0);

    // Items that expire make room again once they are dead.
    let store = Store::new(StoreConfig {
        max_bytes: 64 * 1024,
        shards: 1,
        evict_to_free: false,
        ..StoreConfig::default()
    })
    .expect("valid config");
    let expiring = Expiry::from_protocol(10, now);
    let mut filled = 0;
    while store
        .set(
            format!("e{filled}").as_bytes(),
            value.clone(),
            0,
            expiring,
            now,
        )
        .is_ok()
    {
        filled += 1;
    }
    assert!(filled > 30);
    let later = at(20);
    store
        .set(b"fresh", value.clone(), 0, Expiry::Never, later)
        .expect("an expired item is reclaimed for the new one");
}

#[test]
fn lookups_count_expired_and_flushed_items_as_memcached_does() {
    let s = store();
    set(&s, "gone", "v", 5, T0);
    set(&s, "gone-too", "v", 5, T0);
    set(&s, "kept", "v", 0, T0);
    // Any lookup of a dead item counts: a get, and a delete.
    assert_eq!(value_of(&s, "gone", at(10)), None);
    assert!(!s.delete(b"gone-too", at(10)));
    let stats = s.stats();
    assert_eq!((stats.get_expired, stats.get_flushed), (2, 0));
    // Lazy removal is not "expired_unfetched" (memcached counts that only when memory or
    // the crawler takes the item).
    assert_eq!((stats.expired_unfetched, stats.reclaimed), (0, 0));
    s.flush_all(None, at(11));
    assert_eq!(value_of(&s, "kept", at(11)), None);
    let stats = s.stats();
    assert_eq!((stats.get_expired, stats.get_flushed), (2, 1));
    assert_eq!(stats.curr_items, 0);
}

/// A shard holds figures only for the size classes up to the largest it has counted in: a
/// store of 64 shards that writes one small size holds a few classes' figures a shard, not
/// all 64 (which took 352 KiB before any item was stored).
#[test]
fn shards_hold_figures_only_up_to_the_classes_they_count() {
    let s = store_with(1 << 20, 64);
    assert_eq!(s.class_figures_held(), 0);
    for index in 0..640 {
        set(&s, &format!("key{index}"), "value", 0, T0);
    }
    let largest_class = size_class(item_size(6, 5, 0));
    assert!(s.class_figures_held() <= 64 * (largest_class + 1));
    let counted: u64 = s.class_stats(T0).iter().map(|class| class.number).sum();
    assert_eq!(counted, 640);
    s.check_invariants();
}

#[test]
fn class_stats_follow_items_and_reset_keeps_what_is_held() {
    let s = store();
    set(&s, "small", "v", 0, T0);
    set(&s, "small2", "v", 0, T0);
    let big = "x".repeat(10_000);
    set(&s, "big", &big, 0, T0);
    let small_class = size_class(item_size(5, 1, 0));
    let big_class = size_class(item_size(3, 10_000, 0));
    assert_ne!(small_class, big_class);
    let classes = s.class_stats(at(7));
    assert_eq!(classes[small_class].number, 2);
    assert_eq!(
        classes[small_class].mem_requested,
        item_size(5, 1, 0) + item_size(6, 1, 0)
    );
    assert_eq!(classes[small_class].age, 7);
    assert_eq!(classes[big_class].number, 1);
    // An overwrite of another size moves the item to its new class.
    set(&s, "big", "v", 0, at(8));
    let classes = s.class_stats(at(8));
    assert_eq!(
        (classes[small_class].number, classes[big_class].number),
        (3, 0)
    );
    assert_eq!(classes[big_class].mem_requested, 0);
    assert_eq!(value_of(&s, "big", at(8)).as_deref(), Some("v"));
    set(&s, "short", "v", 1, at(8));
    assert_eq!(value_of(&s, "short", at(20)), None);
    assert_eq!(s.stats().get_expired, 1);
    s.reset_stats();
    let stats = s.stats();
    assert_eq!((stats.get_expired, stats.total_items), (0, 0));
    assert_eq!(stats.curr_items, 3);
    assert_eq!(s.class_stats(at(20))[small_class].number, 3);
}

// ----- inline, external and mapped values ------------------------------------

#[test]
fn values_of_every_storage_form_round_trip_and_update() {
    let s = store();
    // Inline (short), external (≥ EXTERNAL_VALUE_MIN), mapped (≥ MAPPED_VALUE_MIN).
    for (key, len) in [
        ("inline", 100usize),
        ("external", crate::EXTERNAL_VALUE_MIN),
        ("mapped", crate::MAPPED_VALUE_MIN + 1),
    ] {
        let value: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        s.set(
            key.as_bytes(),
            Bytes::from(value.clone()),
            7,
            Expiry::Never,
            T0,
        )
        .unwrap();
        let item = s.get(key.as_bytes(), T0).expect("stored");
        assert_eq!(item.value, value, "{key}");
        assert_eq!(item.flags, 7);
        // Appending crosses into the next form and keeps the flags.
        s.append(key.as_bytes(), b("tail"), T0).unwrap();
        let appended = s.get(key.as_bytes(), T0).expect("appended");
        assert_eq!(&appended.value[..len], &value[..]);
        assert_eq!(&appended.value[len..], b"tail");
        assert_eq!(appended.flags, 7);
    }
    // An incr whose result fits is written in place, also in an external value.
    let mut padded = b"41".to_vec();
    padded.resize(crate::EXTERNAL_VALUE_MIN + 10, b' ');
    s.set(
        b"counter",
        Bytes::from(padded.clone()),
        0,
        Expiry::Never,
        T0,
    )
    .unwrap();
    assert_eq!(counter(s.incr(b"counter", 1, T0)), 42);
    let value = s.get(b"counter", T0).unwrap().value;
    assert_eq!(value.len(), padded.len());
    assert_eq!(&value[..3], b"42 ");
    s.check_invariants();
}

#[test]
fn the_budget_counts_footprints_and_expired_memory_is_reused() {
    let budget = item_footprint(3, 50, 0) * 20;
    let s = store_with(budget, 2);
    let value = Bytes::from(vec![b'x'; 50]);
    for i in 0..20 {
        s.set(
            format!("k{i:02}").as_bytes(),
            value.clone(),
            0,
            Expiry::from_protocol(5, T0),
            T0,
        )
        .unwrap();
    }
    assert_eq!(s.used_bytes(), budget);
    assert_eq!(s.stats().bytes, item_size(3, 50, 0) * 20);
    // Replacing the expired items with as many of the same size reuses their memory.
    for i in 0..20 {
        s.set(
            format!("n{i:02}").as_bytes(),
            value.clone(),
            0,
            Expiry::Never,
            at(10),
        )
        .unwrap();
    }
    assert_eq!(s.used_bytes(), budget);
    let stats = s.stats();
    assert_eq!(
        (stats.curr_items, stats.evictions, stats.reclaimed),
        (20, 0, 20)
    );
    s.check_invariants();
}

#[test]
fn segments_give_back_the_memory_of_removed_and_resized_items() {
    // One shard, so its segments are what is measured; the limit is not reached.
    // 4 MiB over one shard: 256 KiB segments, compaction from 128 KiB of dead records.
    let s = store_with(4 * 1024 * 1024, 1);
    let slack = 128 * 1024;
    let now = at(0);
    let small = "s".repeat(32);
    for index in 0..20_000 {
        set(&s, &format!("k{index}"), &small, 0, now);
    }
    s.check_invariants();
    let filled = s.segment_bytes_held();
    // Three of every four items deleted, the rest rewritten with values three times as
    // long: the dead records are compacted away or their segments unmapped, so what the
    // segments hold follows the live items, not the history.
    for index in 0..20_000 {
        if index % 4 != 0 {
            assert!(s.delete(format!("k{index}").as_bytes(), now));
        }
    }
    s.check_invariants();
    let after_deletes = s.segment_bytes_held();
    let live_records = |value_len: usize| 5_000 * (INLINE_HEADER_BYTES + 6 + value_len);
    assert!(
        after_deletes <= live_records(32) * 16 / 15 + slack,
        "after deletes the segments hold {after_deletes} of {filled} bytes"
    );
    let large = "L".repeat(96);
    for index in (0..20_000).step_by(4) {
        set(&s, &format!("k{index}"), &large, 0, now);
    }
    s.check_invariants();
    let after_resize = s.segment_bytes_held();
    assert!(
        after_resize <= live_records(96) * 16 / 15 + slack,
        "after the resize the segments hold {after_resize} bytes"
    );
    // An overwrite with a value of the same length is made in place: nothing is appended.
    let same_length = "M".repeat(96);
    for index in (0..20_000).step_by(4) {
        set(&s, &format!("k{index}"), &same_length, 0, now);
    }
    s.check_invariants();
    assert_eq!(s.segment_bytes_held(), after_resize);
    for index in (0..20_000).step_by(4) {
        assert_eq!(
            value_of(&s, &format!("k{index}"), now).as_deref(),
            Some(&same_length[..])
        );
    }
    s.flush_all(None, now);
    assert_eq!(s.crawl_expired(at(1), 100_000).reclaimed, 5_000);
    s.check_invariants();
    assert_eq!(s.segment_bytes_held(), 0);
}

#[test]
fn a_full_store_holds_an_item_per_80_bytes_of_short_values() {
    // 16-byte keys and 32-byte values (memcached holds one per 120 bytes of its limit):
    // a 20-byte header (flags 0) and about 6 bytes of index leave room for one item per 74
    // bytes.
    let max_bytes = 8 * 1024 * 1024;
    let s = store_with(max_bytes, 64);
    let value = Bytes::from(vec![b'v'; 32]);
    for index in 0..(2 * max_bytes / 80) {
        let key = format!("key:{index:012}");
        s.set(key.as_bytes(), value.clone(), 0, Expiry::Never, T0)
            .unwrap();
    }
    let stats = s.stats();
    assert!(stats.evictions > 0);
    assert!(
        stats.curr_items >= max_bytes / 80,
        "{} items of 32 bytes in {max_bytes} bytes",
        stats.curr_items
    );
    s.check_invariants();
}

#[test]
fn items_read_since_written_survive_eviction_with_every_field() {
    // One shard: eviction chooses among its oldest records by reads per byte; the items
    // read (the long ones often enough for their bytes) are moved to the open segment when
    // eviction passes them, the others are evicted.
    let s = store_with(256 * 1024, 1);
    let long = Bytes::from(vec![b'L'; crate::EXTERNAL_VALUE_MIN + 10]);
    let mut kept = Vec::new();
    for index in 0..64u32 {
        let key = format!("old{index:02}");
        let value = if index % 8 == 0 {
            long.clone()
        } else {
            // As long as the filler below: the unread ones are then worth no more per byte.
            Bytes::from(format!("value of {key:<191}"))
        };
        let expiry = Expiry::from_protocol(1000, T0);
        let cas = s
            .set(key.as_bytes(), value.clone(), index + 1, expiry, T0)
            .unwrap()
            .cas;
        if index % 2 == 0 {
            // The reads are counted on a log scale (a level of 2^level − 1): 100 reads
            // make a level of 6 or 7, enough for about 17 times the filler's bytes.
            let reads = if index % 8 == 0 { 100 } else { 1 };
            for _ in 0..reads {
                assert!(s.get(key.as_bytes(), at(1)).is_some());
            }
            kept.push((key, value, index + 1, cas));
        }
    }
    let filler = "f".repeat(200);
    for index in 0..3_000 {
        set(&s, &format!("new{index:04}"), &filler, 0, at(2));
        // Reading the survivors once more keeps them on their second chance.
        if index % 400 == 399 {
            for (key, ..) in &kept {
                assert!(s.get(key.as_bytes(), at(2)).is_some(), "{key} evicted");
            }
        }
    }
    assert!(s.stats().evictions > 1_000);
    for (key, value, flags, cas) in &kept {
        let item = s.peek(key.as_bytes(), at(3)).expect("read item kept");
        assert_eq!(
            (&item.value, item.flags, item.cas),
            (value, *flags, *cas),
            "{key}"
        );
        assert_eq!(item.expiry, Expiry::from_protocol(1000, T0));
    }
    for index in (1..64).step_by(2) {
        assert!(s.peek(format!("old{index:02}").as_bytes(), at(3)).is_none());
    }
    s.check_invariants();
}

#[test]
fn replacing_expired_items_with_same_size_ones_does_not_grow_the_segments() {
    // Below the limit, so nothing is evicted: the expiry crawler reclaims the expired
    // items, their segments are unmapped or compacted, and the new items reuse the memory.
    let s = store_with(4 * 1024 * 1024, 1);
    let value = "e".repeat(100);
    for index in 0..10_000 {
        set(&s, &format!("old{index:05}"), &value, 5, T0);
    }
    let filled = s.segment_bytes_held();
    for round in 1..=3u64 {
        let now = at(10 * round);
        s.crawl_expired(now, 100_000);
        for index in 0..10_000 {
            set(&s, &format!("r{round}k{index:05}"), &value, 5, now);
        }
        assert!(
            s.segment_bytes_held() <= filled + 256 * 1024,
            "round {round}: {} bytes held, {filled} after the first fill",
            s.segment_bytes_held()
        );
    }
    assert_eq!(s.stats().evictions, 0);
    s.check_invariants();
}

#[test]
fn pages_behind_the_eviction_cursor_go_back_to_the_kernel() {
    // One shard of 4 MiB: 256 KiB segments. Filled three times over with 32-byte values,
    // eviction empties the oldest segment record by record; the pages it has emptied must
    // not stay resident until the whole segment goes.
    let s = store_with(4 * 1024 * 1024, 1);
    let page = 4096;
    let value = Bytes::from(vec![b'v'; 32]);
    let mut worst_excess = 0;
    for index in 0..150_000u32 {
        let key = format!("key:{index:012}");
        s.set(key.as_bytes(), value.clone(), 0, Expiry::Never, T0)
            .expect("set");
        if index % 97 == 0 {
            let (resident, readable, segments) = s.segment_residency();
            // Each segment may keep a partly read page at each end, and the oldest one up
            // to four pages more (given back in batches).
            let slack = segments * 2 * page + 4 * page;
            worst_excess = worst_excess.max(resident.saturating_sub(readable + slack));
        }
    }
    assert!(s.stats().evictions > 50_000, "the fill evicted");
    assert_eq!(
        worst_excess, 0,
        "resident segment pages beyond the records eviction has not passed"
    );
    s.check_invariants();
}

#[test]
fn flags_take_record_bytes_only_when_not_zero() {
    assert_eq!(
        item_footprint(16, 32, 7) - item_footprint(16, 32, 0),
        crate::ITEM_FLAGS_BYTES
    );
    let s = store();
    let fetch = |key: &str| {
        let item = s.get(key.as_bytes(), T0).expect("stored");
        (
            String::from_utf8_lossy(&item.value).into_owned(),
            item.flags,
        )
    };
    // Same record length with and without flags (4 value bytes for the flags' 4): the
    // overwrite is written in place and must switch the layout both ways.
    for (flags, value) in [
        (7, "abcd"),
        (0, "abcdefgh"),
        (u32::MAX, "wxyz"),
        (0, "12345678"),
    ] {
        s.set(b"k", b(value), flags, Expiry::Never, T0)
            .expect("set");
        assert_eq!(fetch("k"), (value.to_owned(), flags));
    }
    s.set(b"n", b("1"), 3, Expiry::Never, T0).expect("set");
    s.incr(b"n", 41, T0).expect("incr");
    assert_eq!(fetch("n"), ("42".to_owned(), 3));
    s.append(b"n", b("0"), T0).expect("append");
    assert_eq!(fetch("n"), ("420".to_owned(), 3));
    s.check_invariants();
}

#[test]
fn after_a_shift_to_larger_values_the_new_items_take_the_memory() {
    // No reads at all: 32-byte values fill the store, then 100-byte ones are written. Per byte, an unread 32-byte item is worth more than an unread
    // 100-byte one, so without the mark of a pass unread eviction took the new items and the
    // store held the old ones to the end (no slab calcification: issue 29's ≥ 0.9x line).
    let limit = 2 * 1024 * 1024;
    let small = Bytes::from(vec![b's'; 32]);
    let large = Bytes::from(vec![b'L'; 100]);
    let s = store_with(limit, 4);
    let per_large = item_footprint(16, 100, 0);
    for index in 0..(2 * limit / item_footprint(16, 32, 0)) {
        set_bytes(&s, &format!("small:{index:010}"), &small, at(1));
    }
    // One and a half times the limit's worth (the server-level scenario writes twice the
    // limit in memcached's item bytes, about 1.6 times it in these footprints).
    let writes = 3 * limit / per_large / 2;
    for index in 0..writes {
        set_bytes(&s, &format!("large:{index:010}"), &large, at(2));
    }
    let held = (0..writes)
        .filter(|index| {
            s.peek(format!("large:{index:010}").as_bytes(), at(3))
                .is_some()
        })
        .count() as u64;
    let capacity = limit / per_large;
    assert!(
        held * 10 >= capacity * 9,
        "{held} large items held of a capacity of {capacity}"
    );
    s.check_invariants();
}
