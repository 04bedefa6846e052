//! What the key index costs on the store's own request path: `sets` sets of 16-byte keys
//! with 32-byte values into a store of `MiB` (once it is full every set evicts one item),
//! then `gets` gets of keys drawn uniformly from the last `sets` written (about the
//! fraction the store holds hit). Prints the rates, the items held and the index's size.
//!
//! ```sh
//! cargo run --profile suite -p tailtrim-store --example index_cost -- [MiB] [sets] [gets]
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

fn key_of(id: u64) -> String {
    format!("key:{id:012}")
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
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
    for _ in 0..gets {
        let id = rng.gen_range(0..sets.max(1));
        hits += u64::from(store.get(key_of(id).as_bytes(), now).is_some());
    }
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
