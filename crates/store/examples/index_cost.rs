//! What the key index costs on the store's own request path: `sets` sets of 16-byte keys
//! with 32-byte values into a store of `MiB` (once it is full every set evicts one item),
//! then `gets` gets of keys drawn uniformly from the last `sets` written (about the
//! fraction the store holds hit). Prints the rates, the items held and the index's size.
//! `reply` says what a hit's value goes to: `drop` (dropped, the default), `copy`
//! (`Store::get`, then copied into a reply buffer, as a server composes a reply) or
//! `borrow` (`Store::get_with`, copied into the reply buffer under the lock).
//!
//! ```sh
//! cargo run --profile suite -p tailtrim-store --example index_cost -- [MiB] [sets] [gets] [reply]
//! ```
//!
//! Run under `valgrind --tool=callgrind` with `gets` 0 and with `gets` > 0, the instruction
//! counts give the cost per set and, by difference, per get.

use std::time::Instant;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tailtrim_store::{Expiry, Store, StoreConfig, UnixSecs};

const START: u64 = 1_700_000_000;
const OPERATIONS_PER_SECOND: u64 = 100_000;

/// What a hit's value goes to.
#[derive(Clone, Copy)]
enum Reply {
    Drop,
    Copy,
    Borrow,
}

fn key_of(id: u64) -> String {
    format!("key:{id:012}")
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let reply = match args.get(3).map(String::as_str) {
        None | Some("drop") => Reply::Drop,
        Some("copy") => Reply::Copy,
        Some("borrow") => Reply::Borrow,
        Some(other) => panic!("reply is drop, copy or borrow, not {other}"),
    };
    args.truncate(3);
    let args: Vec<u64> = args
        .iter()
        .map(|arg| arg.parse().expect("numeric arguments"))
        .collect();
    let mebibytes = args.first().copied().unwrap_or(64);
    let sets = args.get(1).copied().unwrap_or(3_000_000);
    let gets = args.get(2).copied().unwrap_or(3_000_000);
    let store = Store::new(StoreConfig {
        max_bytes: mebibytes * 1024 * 1024,
        ..StoreConfig::default()
    })
    .expect("valid store configuration");
    let value = Bytes::from(vec![b'v'; 32]);
    let started = Instant::now();
    for id in 0..sets {
        let now = UnixSecs(START + id / OPERATIONS_PER_SECOND);
        store
            .set(key_of(id).as_bytes(), value.clone(), 0, Expiry::Never, now)
            .expect("set stored");
    }
    let set_seconds = started.elapsed().as_secs_f64();
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    let now = UnixSecs(START + sets / OPERATIONS_PER_SECOND);
    let started = Instant::now();
    let mut hits = 0u64;
    let mut buffer = Vec::with_capacity(4096);
    for _ in 0..gets {
        let id = rng.gen_range(0..sets.max(1));
        let key = key_of(id);
        buffer.clear();
        let hit = match reply {
            Reply::Drop => store.get(key.as_bytes(), now).is_some(),
            Reply::Copy => store
                .get(key.as_bytes(), now)
                .map(|item| buffer.extend_from_slice(&item.value))
                .is_some(),
            Reply::Borrow => store
                .get_with(key.as_bytes(), now, |item| {
                    buffer.extend_from_slice(item.value)
                })
                .is_some(),
        };
        hits += u64::from(hit);
    }
    std::hint::black_box(&buffer);
    let get_seconds = started.elapsed().as_secs_f64();
    let stats = store.stats();
    println!(
        "{{\"mebibytes\": {mebibytes}, \"sets\": {sets}, \"gets\": {gets}, \
         \"sets_per_second\": {:.0}, \"gets_per_second\": {:.0}, \"hits\": {hits}, \
         \"curr_items\": {}, \"evictions\": {}, \"hash_buckets\": {}, \"index_rehashed\": {}}}",
        sets as f64 / set_seconds,
        gets as f64 / get_seconds.max(f64::MIN_POSITIVE),
        stats.curr_items,
        stats.evictions,
        stats.hash_buckets,
        store.index_rehashed(),
    );
}
