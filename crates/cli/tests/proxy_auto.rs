//! `planner = "auto"` through the real `tailtrim proxy` over two stock memcached backends:
//! gets and multigets return the stored values, `stats` shows the choice and the decision's
//! counters, and the measured workload in them changes when the workload does (small values
//! only, then multigets that each carry one large value). Loops wait for the proxy's epochs by
//! its own counter; their deadline only bounds a hang.
//!
//! ```text
//!   client ──set, get, get k1..kn, stats──► proxy --planner auto ──► memcached × 2
//! ```

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::{read_until, require_memcached, Program, Server};

/// Bounds each wait for the proxy's next epochs (a hang, not a timing assertion).
const HANG_LIMIT: Duration = Duration::from_secs(120);
const SMALL_KEYS: usize = 200;
const LARGE_KEYS: usize = 20;
const SMALL_BYTES: usize = 100;
const LARGE_BYTES: usize = 100_000;

fn exchange(stream: &mut TcpStream, request: &[u8], end: &[u8]) -> String {
    stream.write_all(request).expect("send");
    String::from_utf8(read_until(stream, end, Duration::from_secs(10))).expect("utf-8")
}

fn stats(stream: &mut TcpStream) -> HashMap<String, String> {
    exchange(stream, b"stats\r\n", b"END\r\n")
        .lines()
        .filter_map(|line| line.strip_prefix("STAT "))
        .filter_map(|line| line.split_once(' '))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn number(stats: &HashMap<String, String>, name: &str) -> f64 {
    stats
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in stats: {stats:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number: {stats:?}"))
}

fn small(index: usize) -> String {
    format!("small-{index}")
}

fn large(index: usize) -> String {
    format!("large-{index}")
}

/// A multiget of `keys`; checks every value came back, in order, with its length.
fn multiget(stream: &mut TcpStream, keys: &[String], lengths: &[usize]) {
    let reply = exchange(
        stream,
        format!("get {}\r\n", keys.join(" ")).as_bytes(),
        b"END\r\n",
    );
    let headers: Vec<&str> = reply.lines().filter(|l| l.starts_with("VALUE ")).collect();
    assert_eq!(
        headers.len(),
        keys.len(),
        "{}",
        &reply[..reply.len().min(300)]
    );
    for ((header, key), length) in headers.iter().zip(keys).zip(lengths) {
        assert_eq!(*header, format!("VALUE {key} 0 {length}"));
    }
}

/// Sends multigets made by `request(i)` until the proxy's `pool_auto_epochs` reaches `epochs`.
fn until_epochs(
    stream: &mut TcpStream,
    epochs: f64,
    mut request: impl FnMut(usize) -> (Vec<String>, Vec<usize>),
) -> HashMap<String, String> {
    let deadline = Instant::now() + HANG_LIMIT;
    let mut sent = 0;
    loop {
        for _ in 0..200 {
            let (keys, lengths) = request(sent);
            multiget(stream, &keys, &lengths);
            sent += 1;
        }
        let now = stats(stream);
        if number(&now, "pool_auto_epochs") >= epochs {
            return now;
        }
        assert!(Instant::now() < deadline, "no epoch ended: {now:?}");
    }
}

#[test]
fn the_auto_planner_serves_reads_and_shows_its_choice_and_measurements() {
    if !require_memcached("the_auto_planner_serves_reads_and_shows_its_choice_and_measurements") {
        return;
    }
    let backends = [
        Server::start(Program::Memcached, &["-t", "1"]),
        Server::start(Program::Memcached, &["-t", "1"]),
    ];
    let servers: Vec<String> = backends
        .iter()
        .map(|backend| format!("127.0.0.1:{}:1", backend.port))
        .collect();
    let proxy = Proxy::start(&["-s", &servers.join(","), "--planner", "auto", "-t", "1"]);
    let mut client = TcpStream::connect(proxy.listen).expect("connect");
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let store = |client: &mut TcpStream, key: &str, length: usize| {
        let mut request = format!("set {key} 0 0 {length}\r\n").into_bytes();
        request.extend(std::iter::repeat_n(b'v', length));
        request.extend_from_slice(b"\r\n");
        assert_eq!(exchange(client, &request, b"\r\n"), "STORED\r\n");
    };
    for index in 0..SMALL_KEYS {
        store(&mut client, &small(index), SMALL_BYTES);
    }
    for index in 0..LARGE_KEYS {
        store(&mut client, &large(index), LARGE_BYTES);
    }
    // A get, a miss, a multigets with a miss among the keys.
    let reply = exchange(&mut client, b"get small-7\r\n", b"END\r\n");
    assert!(reply.starts_with("VALUE small-7 0 100\r\n"), "{reply}");
    assert_eq!(
        exchange(&mut client, b"get nowhere\r\n", b"END\r\n"),
        "END\r\n"
    );
    let reply = exchange(&mut client, b"get small-1 nowhere small-2\r\n", b"END\r\n");
    assert_eq!(reply.matches("VALUE ").count(), 2, "{reply}");

    let first = stats(&mut client);
    assert_eq!(first["pool_planner"], "auto");
    assert_eq!(first["pool_planner_choice"], "batch");
    for counter in [
        "pool_auto_choice",
        "pool_auto_switches",
        "pool_auto_fallbacks",
    ] {
        assert_eq!(number(&first, counter), 0.0, "{counter}");
    }

    // Small values only: nothing costly.
    let small_only = until_epochs(&mut client, 1.0, |sent| {
        let keys: Vec<String> = (0..10)
            .map(|k| small((sent * 10 + k) % SMALL_KEYS))
            .collect();
        (keys, vec![SMALL_BYTES; 10])
    });
    assert_eq!(number(&small_only, "pool_auto_costly_share"), 0.0);
    let epochs = number(&small_only, "pool_auto_epochs");

    // Every multiget carries one large value among nine small ones: a whole epoch of it.
    let with_large = until_epochs(&mut client, epochs + 2.0, |sent| {
        let mut keys: Vec<String> = (0..9).map(|k| small((sent * 9 + k) % SMALL_KEYS)).collect();
        keys.push(large(sent % LARGE_KEYS));
        let mut lengths = vec![SMALL_BYTES; 9];
        lengths.push(LARGE_BYTES);
        (keys, lengths)
    });
    let costly = number(&with_large, "pool_auto_costly_share");
    assert!(
        costly > 0.5,
        "one large value per request, costly share {costly}"
    );
    // Every planner choice is one of the three, and the counters are consistent.
    let choice = with_large["pool_planner_choice"].as_str();
    assert!(
        ["batch", "chisel", "cost-rel"].contains(&choice),
        "{choice}"
    );
    assert!(
        number(&with_large, "pool_auto_fallbacks") <= number(&with_large, "pool_auto_switches")
    );
}
