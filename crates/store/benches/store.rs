//! Criterion benchmarks of the store's hot paths: get (hit), set
//! (overwrite), and set under eviction pressure.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tailtrim_store::{Expiry, Store, StoreConfig, UnixSecs};

const KEYS: usize = 10_000;
const NOW: UnixSecs = UnixSecs(1_700_000_000);

fn keys() -> Vec<Vec<u8>> {
    (0..KEYS)
        .map(|i| format!("key:{i:08}").into_bytes())
        .collect()
}

fn filled_store(value_len: usize) -> (Store, Vec<Vec<u8>>) {
    let store = Store::new(StoreConfig::default()).expect("default config is valid");
    let keys = keys();
    let value = Bytes::from(vec![b'v'; value_len]);
    for key in &keys {
        store
            .set(key, value.clone(), 0, Expiry::Never, NOW)
            .expect("fits in 64 MiB");
    }
    (store, keys)
}

fn bench_get(c: &mut Criterion) {
    let mut group = c.benchmark_group("store");
    group.throughput(Throughput::Elements(1));
    let (store, keys) = filled_store(100);
    let mut i = 0usize;
    group.bench_function("get_hit_100B", |b| {
        b.iter(|| {
            i = (i + 7919) % KEYS;
            black_box(store.get(&keys[i], NOW))
        })
    });
    let (store, keys) = filled_store(100);
    let value = Bytes::from(vec![b'w'; 100]);
    group.bench_function("set_overwrite_100B", |b| {
        b.iter(|| {
            i = (i + 7919) % KEYS;
            black_box(store.set(&keys[i], value.clone(), 0, Expiry::Never, NOW))
        })
    });
    // 1 MiB budget, 10k keys of ~1 KiB: nearly every set evicts.
    let store = Store::new(StoreConfig {
        max_bytes: 1024 * 1024,
        ..StoreConfig::default()
    })
    .expect("valid config");
    let keys = self::keys();
    let value = Bytes::from(vec![b'x'; 1000]);
    group.bench_function("set_evicting_1KB", |b| {
        b.iter(|| {
            i = (i + 7919) % KEYS;
            black_box(store.set(&keys[i], value.clone(), 0, Expiry::Never, NOW))
        })
    });
    group.finish();
}

criterion_group!(benches, bench_get);
criterion_main!(benches);
