//! The `bytes`, `curr_items` and `total_items` statistics follow memcached's item accounting:
//! the same commands, sent to a fresh memcached and a fresh `tailtrim serve` (under every
//! dispatch policy), leave the same three numbers. The differential suite normalises STAT
//! values away, so it cannot see a difference here.
//!
//! ```text
//!   SCRIPT (storage commands that grow, shrink, replace, delete and refuse items)
//!     ├──> memcached -t 1          ──> stats: bytes, curr_items, total_items ─┐
//!     └──> tailtrim serve --dispatch P (each of the five) ──> the same ───────┴─> equal
//! ```
//!
//! The operators' other views of item memory: `stats items` counts evictions per class and
//! `stats reset` clears them (memcached and tailtrim alike), and the memory of expired items
//! is reused (the same number of same-size items written after the crawler removed them
//! leaves `stats slabs`' `total_malloced` where it was).

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use common::{read_until, require_memcached, Program, Server};

/// Every command ends with a reply; `mn` ends the script, so the reply ends with `MN\r\n`.
fn script() -> Vec<u8> {
    let mut script: Vec<u8> = Vec::new();
    let mut add = |text: &str| script.extend_from_slice(text.as_bytes());
    add("set plain 0 0 5\r\nhello\r\n");
    add("set flagged 7 0 10\r\n0123456789\r\n");
    add("set empty 0 0 0\r\n\r\n");
    add("append plain 0 0 3\r\nxyz\r\n");
    add("prepend flagged 0 0 2\r\nzz\r\n");
    // incr that keeps the length, then one that grows it, and a decr that shrinks it.
    add("set counter 0 0 1\r\n5\r\nincr counter 3\r\nincr counter 100\r\ndecr counter 105\r\n");
    add("replace plain 3 0 4\r\nabcd\r\n");
    add("replace missing 0 0 1\r\nx\r\n");
    add("add plain 0 0 1\r\nx\r\n");
    add("add fresh 0 0 6\r\nfresh!\r\n");
    add("delete empty\r\n");
    add("touch flagged 100\r\n");
    add("gat 200 flagged\r\n");
    // A large value, then the same key overwritten with a small one.
    let large = "L".repeat(100_000);
    add(&format!("set large 1 0 {}\r\n{large}\r\n", large.len()));
    add("set large 0 0 2\r\nok\r\n");
    // A value over -I (1 MiB): refused, and `set` removes the old item.
    let huge = "H".repeat(1_100_000);
    add(&format!("set fresh 0 0 {}\r\n{huge}\r\n", huge.len()));
    // Meta commands: set with client flags and a TTL, arithmetic that creates.
    add("ms meta 4 F9 T60\r\nmeta\r\n");
    add("ma made N0 J13\r\n");
    add("set quiet 0 0 3 noreply\r\nabc\r\n");
    add("mn\r\n");
    script
}

fn numbers(stats: &HashMap<String, String>) -> [(String, String); 3] {
    ["bytes", "curr_items", "total_items"].map(|name| {
        let value = stats
            .get(name)
            .unwrap_or_else(|| panic!("no STAT {name}"))
            .clone();
        (name.to_string(), value)
    })
}

fn run(server: &Server) -> [(String, String); 3] {
    let mut conn = server.connect();
    conn.write_all(&script()).expect("send script");
    let reply = read_until(&mut conn, b"MN\r\n", Duration::from_secs(20));
    assert!(
        reply.ends_with(b"MN\r\n"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    numbers(&server.stats())
}

#[test]
fn bytes_and_item_counts_match_memcached_under_every_policy() {
    if !require_memcached("bytes_and_item_counts_match_memcached_under_every_policy") {
        return;
    }
    let reference = Server::start(Program::Memcached, &["-m", "64", "-I", "1m", "-t", "1"]);
    let expected = run(&reference);
    // The script stores something: an empty store would match trivially.
    assert_ne!(expected[0].1, "0", "{expected:?}");
    for policy in [
        "pinned",
        "size-aware",
        "early-binding",
        "stealing",
        "late-binding",
    ] {
        let server = Server::start(
            Program::Tailtrim,
            &["-m", "64", "-I", "1m", "-t", "2", "--dispatch", policy],
        );
        assert_eq!(run(&server), expected, "{policy}");
    }
}

/// Stores `count` items of `value_len` bytes under `prefix`-numbered keys, `exptime` as given,
/// pipelined (`noreply`, each batch ended by `mn`).
fn fill(server: &Server, prefix: &str, count: usize, value_len: usize, exptime: u32) {
    let mut conn = server.connect();
    let value = vec![b'v'; value_len];
    for batch in (0..count).collect::<Vec<_>>().chunks(100) {
        let mut request = Vec::new();
        for index in batch {
            request.extend_from_slice(
                format!("set {prefix}{index:08} 0 {exptime} {value_len} noreply\r\n").as_bytes(),
            );
            request.extend_from_slice(&value);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"mn\r\n");
        conn.write_all(&request).expect("send sets");
        let reply = read_until(&mut conn, b"MN\r\n", Duration::from_secs(20));
        assert_eq!(reply, b"MN\r\n", "{}", String::from_utf8_lossy(&reply));
    }
}

/// `stats <group>` as a name → number map (fields whose value is not a number left out).
fn stats_group(server: &Server, group: &str) -> HashMap<String, u64> {
    server
        .stats_group(group)
        .into_iter()
        .filter_map(|(name, value)| Some((name, value.parse().ok()?)))
        .collect()
}

/// The sum of one per-class field of `stats items` (`items:<class>:<field>`).
fn per_class_sum(items: &HashMap<String, u64>, field: &str) -> u64 {
    items
        .iter()
        .filter(|(name, _)| name.ends_with(&format!(":{field}")))
        .map(|(_, value)| value)
        .sum()
}

/// Fills a small store past its limit and checks that `stats items` counts the evictions in
/// the items' class, that they add up to `stats`' `evictions`, and that `stats reset`
/// clears them while the items held stay counted.
fn check_evictions_per_class_and_reset(server: &Server) {
    fill(server, "evict", 60_000, 100, 0);
    let evictions = stats_group(server, "")["evictions"];
    assert!(evictions > 0, "a fill of 10 MB into -m 4 evicts");
    let items = stats_group(server, "items");
    assert_eq!(per_class_sum(&items, "evicted"), evictions, "{items:?}");
    let held = per_class_sum(&items, "number");
    assert!(held > 0);
    assert_eq!(server.request(b"stats reset\r\n", b"\r\n"), b"RESET\r\n");
    let items = stats_group(server, "items");
    assert_eq!(per_class_sum(&items, "evicted"), 0, "{items:?}");
    assert_eq!(per_class_sum(&items, "number"), held);
    assert_eq!(stats_group(server, "")["evictions"], 0);
}

#[test]
fn stats_items_counts_evictions_per_class_and_stats_reset_clears_them() {
    if require_memcached("stats_items_counts_evictions_per_class_and_stats_reset_clears_them") {
        let reference = Server::start(Program::Memcached, &["-m", "4", "-t", "1"]);
        check_evictions_per_class_and_reset(&reference);
    }
    let server = Server::start(Program::Tailtrim, &["-m", "4", "-t", "1"]);
    check_evictions_per_class_and_reset(&server);
}

#[test]
fn expired_items_memory_is_reused_without_growing_stats_slabs_total() {
    // 10,000 items of 100-byte values with a one-second TTL fill two or more of memcached's
    // 1 MiB pages of their class; the expiry crawler removes them once expired, and as many new
    // items of the same size then take the same pages, not two more.
    let server = Server::start(Program::Tailtrim, &["-m", "64", "-t", "1"]);
    const COUNT: usize = 10_000;
    fill(&server, "short", COUNT, 100, 1);
    let malloced = stats_group(&server, "slabs")["total_malloced"];
    assert!(malloced >= 2 * 1024 * 1024, "total_malloced {malloced}");
    // Bounds a hang only: the crawler inspects 4,096 items a second.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while stats_group(&server, "")["curr_items"] > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the expired items were not reclaimed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    fill(&server, "fresh", COUNT, 100, 0);
    assert_eq!(stats_group(&server, "")["curr_items"], COUNT as u64);
    assert_eq!(stats_group(&server, "slabs")["total_malloced"], malloced);
}
