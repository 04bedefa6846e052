//! The key index under eviction: a store filled three times over with small items (every
//! insert after the first fill evicts one item) keeps an index of at most 8 bytes an item
//! (what each item is charged for it) plus a small fixed part per shard, as `hash_bytes`
//! reports it. An index that leaves tombstones behind removals and doubles to clear them
//! (hashbrown's) holds about 10 bytes an item here.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{read_until, Server};

/// Shards of `serve`'s store.
const SHARDS: u64 = 64;
/// Bytes charged per item for its index entry (`ITEM_BOOKKEEPING_BYTES`).
const INDEX_BYTES_PER_ITEM: u64 = 8;
/// The most a shard's index holds beyond that: its smallest table (32 slots) and its
/// overflow slots (at most 254), 6 bytes a slot.
const INDEX_FIXED_BYTES_PER_SHARD: u64 = (32 + 254) * 6;
const KEYS: usize = 350_000;
const BATCH: usize = 2_000;

#[test]
fn the_key_index_under_eviction_costs_what_its_items_are_charged() {
    let server = Server::start_under_test(&["-m", "8", "-t", "1"]);
    let mut stream = server.connect();
    let value = [b'v'; 32];
    for first in (0..KEYS).step_by(BATCH) {
        let mut batch = Vec::new();
        for index in first..first + BATCH {
            batch.extend_from_slice(format!("set key:{index:012} 0 0 32 noreply\r\n").as_bytes());
            batch.extend_from_slice(&value);
            batch.extend_from_slice(b"\r\n");
        }
        batch.extend_from_slice(b"mn\r\n");
        stream.write_all(&batch).expect("send sets");
        read_until(&mut stream, b"MN\r\n", Duration::from_secs(30));
    }
    let stats = server.stats();
    let figure = |name: &str| -> u64 { stats[name].parse().expect(name) };
    let (items, evictions, hash_bytes) = (
        figure("curr_items"),
        figure("evictions"),
        figure("hash_bytes"),
    );
    assert!(
        evictions as usize > KEYS / 2,
        "{evictions} evictions: the fill must churn"
    );
    let bound = items * INDEX_BYTES_PER_ITEM + SHARDS * INDEX_FIXED_BYTES_PER_SHARD;
    assert!(
        hash_bytes <= bound,
        "hash_bytes {hash_bytes} for {items} items (bound {bound})"
    );
}
