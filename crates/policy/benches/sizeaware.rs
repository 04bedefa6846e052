//! Criterion benchmarks of the size-aware hot and epoch paths: recording one accessed size
//! (every request on a small worker), and the controller's once-per-epoch work (absorbing the
//! workers' histograms and computing the decision).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tailtrim_policy::sizeaware::{
    Epoch, SizeAwareConfig, SizeAwareController, SizeHistogram, SizeWindow,
};

mod common;

/// Sizes with a heavy tail: mostly under 1 KiB, 1 in 128 between 16 KiB and 1 MiB.
fn sizes(count: usize) -> Vec<u64> {
    common::xorshift_stream(count)
        .map(|state| {
            if state & 127 == 0 {
                16_384 + state % (1 << 20)
            } else {
                16 + state % 1000
            }
        })
        .collect()
}

fn bench_record(c: &mut Criterion) {
    let mut group = c.benchmark_group("sizeaware");
    group.throughput(Throughput::Elements(1));
    let sizes = sizes(4096);
    let mut histogram = SizeHistogram::new();
    let mut next = 0usize;
    group.bench_function("record", |b| {
        b.iter(|| {
            next = (next + 1) % sizes.len();
            let size = sizes[next];
            histogram.record(black_box(size), black_box(size + 40));
        })
    });
    group.finish();
}

fn bench_epoch(c: &mut Criterion) {
    let mut group = c.benchmark_group("sizeaware");
    let workers = 4;
    let sizes = sizes(100_000);
    let worker_histograms: Vec<SizeHistogram> = (0..workers)
        .map(|worker| {
            let mut histogram = SizeHistogram::new();
            for size in sizes.iter().skip(worker).step_by(workers) {
                histogram.record(*size, size + 40);
            }
            histogram
        })
        .collect();
    let config = SizeAwareConfig::with_workers(workers);
    let mut controller = match SizeAwareController::new(config) {
        Ok(controller) => controller,
        Err(error) => panic!("default config is valid: {error}"),
    };
    let mut window: SizeWindow = controller.new_window();
    let mut epoch = 0u64;
    group.bench_function("epoch_tick_4_workers", |b| {
        b.iter(|| {
            epoch += 1;
            for histogram in &worker_histograms {
                window.absorb_epoch(Epoch(epoch), histogram);
            }
            black_box(controller.on_epoch(&window))
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench_record, bench_epoch
}
criterion_main!(benches);
