//! The proxy with `planner = "chisel"` over real memcached backends: mice from many client
//! connections merged into shared backend queries, each connection's replies still in its own
//! request order; a stopped backend turns an elephant's chunk into memcached's SERVER_ERROR;
//! Chisel's state in `stats` and Prometheus.

mod common;

use std::io::{Read, Write};
use std::thread;

use common::{connect, exchange, set_command, start, value_for, Options};
use tailtrim_client::testkit::require_binary;

/// Splits a pipelined run of `get` replies into one `VALUE…END` (or error line) per request.
fn split_replies(mut reply: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !reply.is_empty() {
        let mut end = 0;
        loop {
            let Some(line_len) = reply[end..].windows(2).position(|w| w == b"\r\n") else {
                panic!("unterminated reply {:?}", String::from_utf8_lossy(reply));
            };
            let line = &reply[end..end + line_len];
            end += line_len + 2;
            if line == b"END" || line.starts_with(b"SERVER_ERROR") {
                break;
            }
            if let Some(length) = line
                .split(|&b| b == b' ')
                .nth(3)
                .and_then(|w| std::str::from_utf8(w).ok()?.parse::<usize>().ok())
            {
                end += length + 2;
            }
        }
        out.push(reply[..end].to_vec());
        reply = &reply[end..];
    }
    out
}

#[test]
fn mice_merged_across_connections_keep_each_connections_reply_order() {
    if !require_binary("memcached") {
        return;
    }
    // B = 8, no split, a 2 ms setup: mice arriving from any connection meanwhile share a query.
    let harness = start(Options {
        backends: 2,
        planner: "chisel",
        chisel_fixed: "8,inf",
        inject_overhead_us: 2000,
        ..Options::default()
    });
    let keys: Vec<String> = (0..200).map(|i| format!("mo:{i}")).collect();
    let mut setup = connect(harness.address);
    let mut sets = Vec::new();
    for key in &keys {
        sets.extend(set_command(key));
    }
    assert_eq!(
        exchange(&mut setup, &sets),
        "STORED\r\n".repeat(keys.len()).into_bytes()
    );
    let address = harness.address;
    let clients: Vec<_> = (0..6)
        .map(|client| {
            let keys = keys.clone();
            thread::spawn(move || {
                let mut stream = connect(address);
                // 25 pipelined requests of 1-3 keys, some missing, in one write.
                let requests: Vec<Vec<String>> = (0..25)
                    .map(|r| {
                        let base = client * 31 + r * 7;
                        let mut asked = vec![keys[base % 200].clone()];
                        if r % 2 == 0 {
                            asked.push(format!("gone:{client}:{r}"));
                        }
                        if r % 3 == 0 {
                            asked.push(keys[(base + 101) % 200].clone());
                        }
                        asked
                    })
                    .collect();
                let mut bytes = Vec::new();
                for asked in &requests {
                    bytes.extend(format!("get {}\r\n", asked.join(" ")).into_bytes());
                }
                let replies = split_replies(&exchange(&mut stream, &bytes));
                assert_eq!(replies.len(), requests.len());
                for (asked, reply) in requests.iter().zip(replies) {
                    let mut expected = String::new();
                    for key in asked.iter().filter(|key| key.starts_with("mo:")) {
                        let value = value_for(key);
                        expected.push_str(&format!("VALUE {key} 0 {}\r\n{value}\r\n", value.len()));
                    }
                    expected.push_str("END\r\n");
                    assert_eq!(
                        String::from_utf8_lossy(&reply),
                        expected,
                        "client {client}: reply out of order or wrong"
                    );
                }
            })
        })
        .collect();
    for client in clients {
        client.join().expect("client thread");
    }
    let pool = harness.shared.pool.current();
    let shaper = pool.shaper();
    assert!(
        shaper.merged_requests.get() > 0,
        "no request shared a backend query"
    );
    let stats = String::from_utf8(exchange(&mut setup, b"stats\r\n")).expect("utf8");
    assert!(stats.contains("STAT pool_planner chisel\r\n"), "{stats}");
    assert!(stats.contains("STAT chisel_merge_level 8\r\n"), "{stats}");
    assert!(stats.contains("STAT chisel_chunk_size 0\r\n"), "{stats}");
    assert!(
        stats.contains("STAT pool_mice_latency_us_count 150\r\n"),
        "{stats}"
    );
    let admin = harness.admin.expect("admin listener");
    let mut http = connect(admin);
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .expect("write");
    let mut body = String::new();
    http.read_to_string(&mut body).expect("read");
    assert!(
        body.contains("# TYPE tailtrim_chisel_merge_level gauge"),
        "{body}"
    );
    assert!(body.contains(
        "tailtrim_pool_elephant_latency_seconds_count{pool=\"default\",planner=\"chisel\"} 0"
    ));
}

#[test]
fn a_stopped_backend_fails_an_elephant_chunk_with_server_error() {
    if !require_binary("memcached") {
        return;
    }
    let harness = start(Options {
        backends: 2,
        planner: "chisel",
        chisel_fixed: "1,10",
        timeout_ms: 200,
        ..Options::default()
    });
    let keys: Vec<String> = (0..60).map(|i| format!("el:{i}")).collect();
    let mut stream = connect(harness.address);
    let mut sets = Vec::new();
    for key in &keys {
        sets.extend(set_command(key));
    }
    exchange(&mut stream, &sets);
    let get = format!("get {}\r\n", keys.join(" "));
    let whole = exchange(&mut stream, get.as_bytes());
    assert!(whole.ends_with(b"END\r\n") && whole.starts_with(b"VALUE "));
    harness.backends[1].signal("STOP");
    let failed = exchange(&mut stream, get.as_bytes());
    harness.backends[1].signal("CONT");
    let text = String::from_utf8_lossy(&failed);
    assert!(text.starts_with("SERVER_ERROR "), "{text}");
    assert!(
        text.ends_with("\r\n") && text.lines().count() == 1,
        "{text}"
    );
}

#[test]
fn one_key_gets_are_planned_queries_when_the_pool_shapes_them() {
    if !require_binary("memcached") {
        return;
    }
    // The online analyzer (B = 1, no merging) must still see one-key gets: they count as
    // mice, and their round trips feed its fit (else 1-key mice never leave batching).
    // Batching with injected setup time must charge it to one-key gets too.
    for (planner, overhead) in [("chisel", 0), ("batch", 200)] {
        let harness = start(Options {
            backends: 2,
            replicas: 2,
            planner,
            inject_overhead_us: overhead,
            ..Options::default()
        });
        let mut stream = connect(harness.address);
        let keys: Vec<String> = (0..20).map(|i| format!("one:{i}")).collect();
        let mut sets = Vec::new();
        for key in &keys {
            sets.extend(set_command(key));
        }
        exchange(&mut stream, &sets);
        for key in &keys {
            let value = value_for(key);
            let reply = exchange(&mut stream, format!("get {key}\r\n").as_bytes());
            assert_eq!(
                String::from_utf8_lossy(&reply),
                format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len())
            );
        }
        assert_eq!(exchange(&mut stream, b"get one:missing\r\n"), b"END\r\n");
        let stats = String::from_utf8(exchange(&mut stream, b"stats\r\n")).expect("utf8");
        assert!(
            stats.contains("STAT pool_queries 21\r\n"),
            "{planner}: {stats}"
        );
        assert!(
            stats.contains("STAT pool_mice_latency_us_count 21\r\n"),
            "{planner}: {stats}"
        );
    }
}
