//! Request parsing throughput: a small GET, a 10-key multiget, a 1 KB SET.

use criterion::{criterion_group, criterion_main, Criterion};
use tailtrim_proto::{parse_request, Limits};

fn bench_parse(c: &mut Criterion) {
    let limits = Limits::default();
    let get = b"get user:1234567890\r\n".to_vec();
    let multiget: Vec<u8> = {
        let keys: Vec<String> = (0..10).map(|i| format!("user:{i:010}")).collect();
        format!("get {}\r\n", keys.join(" ")).into_bytes()
    };
    let mut set = b"set user:1234567890 0 0 1024\r\n".to_vec();
    set.extend(std::iter::repeat_n(b'v', 1024));
    set.extend_from_slice(b"\r\n");
    for (name, input) in [("get", get), ("multiget10", multiget), ("set1k", set)] {
        c.bench_function(&format!("parse_{name}"), |b| {
            b.iter(|| parse_request(std::hint::black_box(&input), &limits))
        });
    }
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
