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
