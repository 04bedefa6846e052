//! The proxy's priority gate in front of stock memcached: with a window of one request in
//! flight, the requests queued in the proxy reach the backend in the order of
//! `tailtrim_policy::serverq` — strict priority by default (as `tailtrim serve` orders its job
//! queue), deficit round robin when `priority_order = "drr"`. The order is read from the
//! backend itself (`watch fetchers` logs every key in the order memcached looks it up).
//!
//! ```text
//!   "get first" (in flight, backend stopped)
//!   4 × "get l<i>_0 … l<i>_29"  (30 keys: Rein class 3)  queued first
//!   10 × "get h<i>"             (1 key: class 0)         queued last
//!   backend continues ─► strict: first, h × 10, l × 4
//!                        drr:    first, h × 5, l × 2, h × 5, l × 2 (weights 5:2)
//! ```

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{connect, start_with, Harness, Options};
use tailtrim_client::testkit::require_binary;

const LOW_REQUESTS: usize = 4;
const LOW_KEYS: usize = 30;
const HIGH_REQUESTS: usize = 10;

/// Waits until the backend's gate holds `in_flight` requests and `waiting` queued ones.
fn wait_for_gate(harness: &Harness, in_flight: usize, waiting: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pool = harness.shared.pool.current();
        let gate = pool.backends()[0].gate().expect("a window makes a gate");
        if gate.in_flight() == in_flight && gate.waiting() == waiting {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "gate: {} in flight, {} waiting; expected {in_flight}, {waiting}",
            gate.in_flight(),
            gate.waiting()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Reads until `reply` ends with `end`.
fn read_until(stream: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut reply = Vec::new();
    let mut chunk = [0u8; 16384];
    while !reply.ends_with(end) {
        let n = stream.read(&mut chunk).expect("read");
        assert!(n > 0, "closed before {:?}", String::from_utf8_lossy(end));
        reply.extend_from_slice(&chunk[..n]);
    }
    reply
}

/// The request groups in the order the backend looked their keys up: `first`, `h` or `l`,
/// one entry per request.
fn served_order(priority_order: Option<&str>) -> Vec<&'static str> {
    let harness = start_with(
        Options {
            backends: 1,
            planner: "rein-sbf",
            timeout_ms: 20_000,
            ..Options::default()
        },
        |config| {
            config.pool.backend_window = Some(1);
            config.pool.priority_order = priority_order.map(str::to_string);
        },
    );
    let backend = &harness.backends[0];
    let mut watcher = connect(std::net::SocketAddr::from(([127, 0, 0, 1], backend.port)));
    watcher.write_all(b"watch fetchers\r\n").expect("watch");
    assert_eq!(read_until(&mut watcher, b"\r\n"), b"OK\r\n");
    // A first request opens the backend's connection before it stops.
    let mut warm = connect(harness.address);
    warm.write_all(b"get warm\r\n").expect("write");
    assert_eq!(read_until(&mut warm, b"END\r\n"), b"END\r\n");
    backend.signal("STOP");
    let mut clients = Vec::new();
    let mut send = |request: String| {
        let mut client = connect(harness.address);
        client.write_all(request.as_bytes()).expect("write");
        clients.push(client);
    };
    send("get first\r\n".to_string());
    wait_for_gate(&harness, 1, 0);
    for i in 0..LOW_REQUESTS {
        let keys: Vec<String> = (0..LOW_KEYS).map(|j| format!("l{i}_{j}")).collect();
        send(format!("get {}\r\n", keys.join(" ")));
        wait_for_gate(&harness, 1, i + 1);
    }
    for i in 0..HIGH_REQUESTS {
        send(format!("get h{i}\r\n"));
        wait_for_gate(&harness, 1, LOW_REQUESTS + i + 1);
    }
    backend.signal("CONT");
    for client in &mut clients {
        assert_eq!(read_until(client, b"END\r\n"), b"END\r\n");
    }
    // The keys of the "warm" request and of every queued request, in lookup order.
    let lookups = 2 + LOW_REQUESTS * LOW_KEYS + HIGH_REQUESTS;
    let mut log = Vec::new();
    while log.iter().filter(|&&b| b == b'\n').count() < lookups {
        let mut chunk = [0u8; 16384];
        let n = watcher.read(&mut chunk).expect("watch read");
        assert!(n > 0, "watcher closed");
        log.extend_from_slice(&chunk[..n]);
    }
    let mut order = Vec::new();
    let mut last_low = None;
    for line in String::from_utf8_lossy(&log).lines() {
        let Some(key) = line.split(' ').find_map(|field| field.strip_prefix("key=")) else {
            continue;
        };
        match key.split_once('_') {
            _ if key == "first" => order.push("first"),
            _ if key.starts_with('h') => order.push("h"),
            // One entry per request: its 30 keys are looked up together.
            Some((request, _)) if key.starts_with('l') && last_low.as_deref() != Some(request) => {
                order.push("l");
                last_low = Some(request.to_string());
            }
            _ => {}
        }
    }
    order
}

fn expected(groups: &[(&'static str, usize)]) -> Vec<&'static str> {
    groups
        .iter()
        .flat_map(|&(name, count)| std::iter::repeat_n(name, count))
        .collect()
}

#[test]
fn the_gate_serves_strict_priority_by_default() {
    if !require_binary("memcached") {
        return;
    }
    assert_eq!(
        served_order(None),
        expected(&[("first", 1), ("h", HIGH_REQUESTS), ("l", LOW_REQUESTS)])
    );
}

#[test]
fn priority_order_drr_interleaves_the_classes_by_weight() {
    if !require_binary("memcached") {
        return;
    }
    // Class 0 weighs 5, class 3 weighs 2: the backlog of class 3 is not starved.
    assert_eq!(
        served_order(Some("drr")),
        expected(&[("first", 1), ("h", 5), ("l", 2), ("h", 5), ("l", 2)])
    );
}
