//! Memory limit test: `-m 64`, write ten times that much, and check that the process
//! stays under a stated RSS bound, that it evicted, and that no value read back is wrong.
//!
//! ```text
//!   writer ──pipelined set batches (640 MiB of values that embed their key)──> server
//!      └── after each batch: VmRSS of /proc/<pid>/status  (max tracked)
//!   reader ──get sample──> every value is either a miss or exactly what was written
//!   stats  ──> evictions > 0, bytes <= limit_maxbytes
//! ```
//! Set `TAILTRIM_TEST_TARGET=memcached` to run the same test against stock memcached.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{read_until, value_for, Server};

const LIMIT_MIB: u64 = 64;
/// The stated bound: RSS stays under 2.5 x `-m` (160 MiB) while 10 x `-m` is written.
const RSS_BOUND_KIB: u64 = LIMIT_MIB * 1024 * 5 / 2;
/// Value sizes cycled through (bytes): small, medium and large items, up to 256 KiB.
const SIZES: &[usize] = &[100, 1_000, 4_000, 20_000, 100_000, 300, 262_144, 50];
const BATCH: usize = 32;

fn key(index: usize) -> String {
    format!("mem:{index}")
}

fn size_of(index: usize) -> usize {
    SIZES[index % SIZES.len()]
}

#[test]
fn writing_ten_times_the_limit_evicts_and_keeps_rss_bounded() {
    let limit_text = LIMIT_MIB.to_string();
    let server = Server::start_under_test(&["-m", &limit_text, "-I", "1m", "-t", "2"]);
    let mut conn = server.connect();
    let target_bytes = 10 * LIMIT_MIB * 1024 * 1024;
    let mut written: u64 = 0;
    let mut index = 0;
    let mut max_rss = server.rss_kib();
    while written < target_bytes {
        let mut request = Vec::new();
        for _ in 0..BATCH {
            let key = key(index);
            let value = value_for(&key, size_of(index));
            request.extend_from_slice(
                format!("set {key} {} 0 {}\r\n", index % 65_536, value.len()).as_bytes(),
            );
            request.extend_from_slice(&value);
            request.extend_from_slice(b"\r\n");
            written += value.len() as u64;
            index += 1;
        }
        conn.write_all(&request).expect("send batch");
        let reply = read_until(
            &mut conn,
            &b"STORED\r\n".repeat(BATCH),
            Duration::from_secs(30),
        );
        assert_eq!(
            reply,
            b"STORED\r\n".repeat(BATCH),
            "a set was not stored: {:?}",
            String::from_utf8_lossy(&reply[..reply.len().min(200)])
        );
        max_rss = max_rss.max(server.rss_kib());
    }
    let total_keys = index;
    eprintln!(
        "memory: wrote {} MiB in {total_keys} items; max RSS {} KiB (bound {RSS_BOUND_KIB} KiB)",
        written / (1024 * 1024),
        max_rss
    );

    // Read back a sample plus the most recent keys: each is a miss or exactly right.
    let mut hits = 0;
    let mut misses = 0;
    let sample: Vec<usize> = (0..total_keys)
        .step_by(7)
        .chain(total_keys.saturating_sub(500)..total_keys)
        .collect();
    for chunk in sample.chunks(50) {
        let keys: Vec<String> = chunk.iter().map(|&index| key(index)).collect();
        conn.write_all(format!("get {}\r\n", keys.join(" ")).as_bytes())
            .expect("send get");
        let reply = read_until(&mut conn, b"END\r\n", Duration::from_secs(30));
        let mut position = 0;
        let mut found = std::collections::HashSet::new();
        while let Some(line_end) = reply[position..].windows(2).position(|w| w == b"\r\n") {
            let line = String::from_utf8_lossy(&reply[position..position + line_end]).into_owned();
            position += line_end + 2;
            if line == "END" {
                break;
            }
            let parts: Vec<&str> = line.split(' ').collect();
            assert!(parts.len() == 4 && parts[0] == "VALUE", "bad line {line:?}");
            let index: usize = parts[1]
                .strip_prefix("mem:")
                .and_then(|number| number.parse().ok())
                .expect("a key we wrote");
            assert!(
                chunk.contains(&index),
                "got a key we did not ask for: {line}"
            );
            assert_eq!(
                parts[2],
                (index % 65_536).to_string(),
                "wrong flags for {}",
                parts[1]
            );
            let length: usize = parts[3].parse().expect("length");
            let value = &reply[position..position + length];
            assert!(
                value == value_for(parts[1], size_of(index)).as_slice(),
                "wrong value for {} ({length} bytes)",
                parts[1]
            );
            position += length + 2;
            found.insert(index);
        }
        hits += found.len();
        misses += chunk.len() - found.len();
    }
    eprintln!("memory: read back {hits} hits, {misses} misses");
    assert!(hits > 0, "nothing read back: the cache kept nothing");
    assert!(
        misses > 0,
        "every sampled key hit although 10x the limit was written"
    );

    let stats = server.stats();
    let number = |name: &str| -> u64 {
        stats
            .get(name)
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("stats lacks a numeric {name}"))
    };
    eprintln!(
        "memory: stats bytes {} curr_items {} evictions {}",
        number("bytes"),
        number("curr_items"),
        number("evictions")
    );
    assert!(number("evictions") > 0, "no evictions reported");
    assert_eq!(number("limit_maxbytes"), LIMIT_MIB * 1024 * 1024);
    assert!(
        number("bytes") <= number("limit_maxbytes"),
        "bytes {} over limit_maxbytes",
        number("bytes")
    );
    let final_rss = server.rss_kib();
    assert!(
        max_rss.max(final_rss) < RSS_BOUND_KIB,
        "RSS reached {} KiB, over the bound of {RSS_BOUND_KIB} KiB",
        max_rss.max(final_rss)
    );
}
