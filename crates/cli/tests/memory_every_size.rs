//! The memory limit bounds the process for every item size: `serve -m 8`, filled with 8 B,
//! 32 B, 100 B, 1 KB and 100 KB values one size after the other, then with a mix whose sizes
//! shift while it runs, then `flush_all` and a refill with small values. After each phase the
//! resident set (VmRSS of /proc/<pid>/status) must stay within 1.1 × `-m` + 16 MiB: the store
//! counts what its items really cost, not only memcached's accounted item size.
//!
//! A second server, `serve -m 24`, takes a mix whose sizes shift (8/32/100 B, then
//! 32 B–1 KB, then 8/32 B): memory freed by one size must be reused by the others rather
//! than stay resident between live items (a store that leaves freed small items to malloc
//! reaches 50 MiB here, over its bound of 42.4 MiB).
//!
//! ```text
//!   writer ──pipelined sets, twice -m of accounted bytes per phase──> serve -m 8
//!      └── after each phase: VmRSS ≤ 1.1·m + 16 MiB, bytes ≤ limit_maxbytes
//! ```
//! Set `TAILTRIM_TEST_TARGET=memcached` to run the same test against stock memcached.
//! Nothing here is timed; the read timeouts only bound a hang.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{read_until, value_for, Server};

const LIMIT_MIB: u64 = 8;
/// `-m` of the shifting-mix test: large enough that memory left resident between live items
/// by a shift of sizes shows over the bound's 16 MiB of slack.
const SHIFTING_LIMIT_MIB: u64 = 24;

/// 1.1 × `-m` + 16 MiB, in KiB.
fn rss_bound_kib(limit_mib: u64) -> u64 {
    limit_mib * 1024 * 11 / 10 + 16 * 1024
}
/// memcached's accounted item size: 59 bytes of header + key + value (flags are 0 here).
const ITEM_HEADER_BYTES: u64 = 59;
/// Sets per pipelined batch, at most.
const BATCH: usize = 64;
/// Value bytes per pipelined batch, at most (about): the server's connection buffers hold a
/// batch, and they are not what this test measures.
const BATCH_VALUE_BYTES: usize = 256 * 1024;

/// Writes items of the sizes `size_of` gives until their accounted bytes add up to twice the
/// limit; every set must be stored. Keys are `<phase>:<n>`.
fn fill(
    conn: &mut TcpStream,
    limit_mib: u64,
    phase: &str,
    size_of: impl Fn(usize) -> usize,
) -> usize {
    let target = 2 * limit_mib * 1024 * 1024;
    let mut accounted = 0u64;
    let mut index = 0usize;
    while accounted < target {
        let mut request = Vec::new();
        let mut sets = 0;
        while sets < BATCH && request.len() < BATCH_VALUE_BYTES {
            let key = format!("{phase}:{index}");
            let value = value_for(&key, size_of(index));
            request.extend_from_slice(format!("set {key} 0 0 {}\r\n", value.len()).as_bytes());
            request.extend_from_slice(&value);
            request.extend_from_slice(b"\r\n");
            accounted += ITEM_HEADER_BYTES + key.len() as u64 + value.len() as u64;
            index += 1;
            sets += 1;
        }
        conn.write_all(&request).expect("send batch");
        let expected = b"STORED\r\n".repeat(sets);
        let reply = read_until(conn, &expected, Duration::from_secs(60));
        assert_eq!(
            reply,
            expected,
            "phase {phase}: a set was not stored: {:?}",
            String::from_utf8_lossy(&reply[..reply.len().min(200)])
        );
    }
    index
}

fn check_bound(server: &Server, limit_mib: u64, phase: &str, items_written: usize) {
    let bound = rss_bound_kib(limit_mib);
    let rss = server.rss_kib();
    let stats = server.stats();
    let number = |name: &str| -> u64 {
        stats
            .get(name)
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("stats lacks a numeric {name}"))
    };
    eprintln!(
        "memory_every_size: after {phase} ({items_written} sets): RSS {rss} KiB \
         (bound {bound} KiB), curr_items {}, bytes {}",
        number("curr_items"),
        number("bytes")
    );
    // `bytes` (memcached's accounted item sizes) may pass `limit_maxbytes` on both: memcached
    // bounds its slab pages, tailtrim the items' real memory, which for small items is less
    // than their accounted size. RSS is what the limit must bound.
    assert!(
        rss <= bound,
        "after {phase}: RSS {rss} KiB is over 1.1 x -m + 16 MiB = {bound} KiB"
    );
}

#[test]
fn rss_stays_within_the_limit_for_every_value_size_and_after_flush_all() {
    let limit_text = LIMIT_MIB.to_string();
    let server = Server::start_under_test(&["-m", &limit_text, "-I", "1m", "-t", "2"]);
    let mut conn = server.connect();
    check_bound(&server, LIMIT_MIB, "start", 0);

    for size in [8usize, 32, 100, 1_000, 100_000] {
        let phase = format!("size{size}");
        let written = fill(&mut conn, LIMIT_MIB, &phase, |_| size);
        check_bound(&server, LIMIT_MIB, &phase, written);
    }

    // A mix whose proportions shift as it runs: small values first, larger ones later.
    let mixes: [&[usize]; 3] = [
        &[8, 32, 32, 100],
        &[32, 100, 1_000, 8],
        &[1_000, 100_000, 8],
    ];
    for (round, mix) in mixes.iter().enumerate() {
        let phase = format!("mix{round}");
        let written = fill(&mut conn, LIMIT_MIB, &phase, |index| mix[index % mix.len()]);
        check_bound(&server, LIMIT_MIB, &phase, written);
    }

    conn.write_all(b"flush_all\r\n").expect("send flush_all");
    let reply = read_until(&mut conn, b"OK\r\n", Duration::from_secs(10));
    assert_eq!(reply, b"OK\r\n");
    for size in [32usize, 8] {
        let phase = format!("refill{size}");
        let written = fill(&mut conn, LIMIT_MIB, &phase, |_| size);
        check_bound(&server, LIMIT_MIB, &phase, written);
    }
}

#[test]
fn rss_stays_within_the_limit_when_the_size_mix_shifts() {
    let limit_text = SHIFTING_LIMIT_MIB.to_string();
    let server = Server::start_under_test(&["-m", &limit_text, "-I", "1m", "-t", "2"]);
    let mut conn = server.connect();
    let mixes: [&[usize]; 3] = [&[8, 32, 100], &[32, 100, 1_000, 8], &[8, 32]];
    for (round, mix) in mixes.iter().enumerate() {
        let phase = format!("shift{round}");
        let written = fill(&mut conn, SHIFTING_LIMIT_MIB, &phase, |index| {
            mix[index % mix.len()]
        });
        check_bound(&server, SHIFTING_LIMIT_MIB, &phase, written);
    }
}
