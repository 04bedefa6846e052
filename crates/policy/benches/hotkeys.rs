//! Criterion benchmarks of the hot-key tracker's per-request cost: an unsampled call (one
//! relaxed increment), and a recorded call on a full tracker under a zipf-like key stream.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tailtrim_policy::hotkeys::{HotKeyTracker, Sampler, TrackerConfig};

mod common;

/// 64k keys drawn with a skew close to zipf (rank = floor(n^u) for uniform u).
fn keys(count: usize) -> Vec<Vec<u8>> {
    common::xorshift_stream(count)
        .map(|state| {
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            let rank = (68_000f64).powf(u) as u64;
            format!("key:{rank:08}").into_bytes()
        })
        .collect()
}

fn bench_tracker(c: &mut Criterion) {
    let mut group = c.benchmark_group("hotkeys");
    group.throughput(Throughput::Elements(1));
    let keys = keys(65_536);
    let sampler = Sampler::new(8);
    group.bench_function("sampler_check", |b| {
        b.iter(|| black_box(sampler.sampled()));
    });
    let mut tracker = HotKeyTracker::new(TrackerConfig {
        capacity: 4096,
        sample_every: 1,
        max_key_bytes: 250,
    });
    for key in &keys {
        tracker.record(key, 1);
    }
    let mut next = 0usize;
    group.bench_function("record_full_4096", |b| {
        b.iter(|| {
            next = (next + 1) % keys.len();
            tracker.record(black_box(&keys[next]), 8);
        })
    });
    let mut sampled = HotKeyTracker::new(TrackerConfig::default());
    group.bench_function("offer_sampled_1_in_8", |b| {
        b.iter(|| {
            next = (next + 1) % keys.len();
            sampled.offer(black_box(&keys[next]));
        })
    });
    group.finish();
}

criterion_group!(benches, bench_tracker);
criterion_main!(benches);
