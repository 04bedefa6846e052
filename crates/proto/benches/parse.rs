//! Request parsing throughput: a small GET, a 10-key multiget, a 1 KB SET, each parsed
//! with copied keys (`parse_request`, from a slice) and in place (`parse_request_frame`, as
//! the server parses: a pipelined buffer of 256 requests split frame by frame, keys cut from
//! the frames; reported per request).

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tailtrim_proto::{parse_request, parse_request_frame, FrameScratch, Limits, Parsed};

/// Requests per pipelined buffer in the in-place benches.
const PIPELINED: usize = 256;

fn inputs() -> [(&'static str, Vec<u8>); 3] {
    let get = b"get user:1234567890\r\n".to_vec();
    let multiget: Vec<u8> = {
        let keys: Vec<String> = (0..10).map(|i| format!("user:{i:010}")).collect();
        format!("get {}\r\n", keys.join(" ")).into_bytes()
    };
    let mut set = b"set user:1234567890 0 0 1024\r\n".to_vec();
    set.extend(std::iter::repeat_n(b'v', 1024));
    set.extend_from_slice(b"\r\n");
    [("get", get), ("multiget10", multiget), ("set1k", set)]
}

fn bench_parse(c: &mut Criterion) {
    let limits = Limits::default();
    for (name, input) in inputs() {
        c.bench_function(&format!("parse_{name}"), |b| {
            b.iter(|| parse_request(std::hint::black_box(&input), &limits))
        });
    }
}

fn bench_parse_in_place(c: &mut Criterion) {
    let limits = Limits::default();
    let mut group = c.benchmark_group("in_place");
    group.throughput(Throughput::Elements(PIPELINED as u64));
    for (name, input) in inputs() {
        let stream = input.repeat(PIPELINED);
        let mut scratch = FrameScratch::default();
        group.bench_function(format!("parse_{name}"), |b| {
            b.iter_batched_ref(
                || BytesMut::from(&stream[..]),
                |buffer| {
                    for _ in 0..PIPELINED {
                        match parse_request_frame(buffer, &limits, &mut scratch) {
                            Parsed::Complete { value, .. } => {
                                drop(std::hint::black_box((value, scratch.take_frame())))
                            }
                            _ => unreachable!("every request is complete"),
                        }
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench_parse, bench_parse_in_place);
criterion_main!(benches);
