//! Runtime membership through the admin API: joins and removals under load drop no request,
//! answer no wrong value, and never bring a stale value back (fallback reads and preemptive
//! copies race against sets and deletes of the same hot keys).

mod common;

use std::io::{Read, Write};

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{admin, start, Options};
use tailtrim_client::testkit::start_memcached;

/// Keys per load thread (few, so they are all hot and tracked, and copies race with writes).
const KEYS_PER_THREAD: usize = 150;
const THREADS: usize = 4;
/// Requests per pipelined batch.
const PIPELINE: usize = 8;

enum Op {
    Set(u64),
    Delete,
    Get,
}

/// Reads one reply: a line, or `VALUE … END`.
fn read_reply(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Vec<u8> {
    let mut chunk = [0u8; 16384];
    loop {
        if let Some(end) = reply_end(buffer) {
            let reply = buffer[..end].to_vec();
            buffer.drain(..end);
            return reply;
        }
        match stream.read(&mut chunk) {
            Ok(0) => panic!("proxy closed the connection"),
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => panic!("read: {error}"),
        }
    }
}

fn reply_end(buffer: &[u8]) -> Option<usize> {
    let line_end = buffer.windows(2).position(|w| w == b"\r\n")? + 2;
    if !buffer.starts_with(b"VALUE ") {
        return Some(line_end);
    }
    let header = std::str::from_utf8(&buffer[..line_end - 2]).ok()?;
    let length: usize = header.split(' ').nth(3)?.parse().ok()?;
    let after = line_end + length + 2;
    if buffer.len() >= after + 5 && &buffer[after..after + 5] == b"END\r\n" {
        Some(after + 5)
    } else {
        None
    }
}

#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    hits: AtomicU64,
}

/// One load thread: owns its keys, so after each acknowledged write it knows the only value
/// a read may return (or a miss): anything else is a wrong or stale value.
fn load(address: SocketAddr, thread: usize, stop: Arc<AtomicBool>, tally: Arc<Tally>) -> String {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.set_nodelay(true).expect("nodelay");
    let mut buffer = Vec::new();
    // None: deleted (a read must miss).
    let mut latest: Vec<Option<u64>> = vec![None; KEYS_PER_THREAD];
    let mut version = 0u64;
    let mut step = thread * 13;
    while !stop.load(Ordering::Relaxed) {
        // A pipelined batch of distinct keys (the step 7919 is coprime with the key count), so
        // each key's expected value is still known: replies come back in request order.
        let mut request = Vec::new();
        let mut batch = Vec::with_capacity(PIPELINE);
        for _ in 0..PIPELINE {
            step += 1;
            let index = (step * 7919) % KEYS_PER_THREAD;
            let key = format!("t{thread}-k{index}");
            let roll = step % 20;
            let op = if roll == 0 || latest[index].is_none() && roll.is_multiple_of(2) {
                version += 1;
                let value = format!("{key}={version}");
                request.extend_from_slice(
                    format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
                );
                Op::Set(version)
            } else if roll == 1 {
                request.extend_from_slice(format!("delete {key}\r\n").as_bytes());
                Op::Delete
            } else {
                request.extend_from_slice(format!("get {key}\r\n").as_bytes());
                Op::Get
            };
            batch.push((index, key, op));
        }
        stream.write_all(&request).expect("write");
        for (index, key, op) in batch {
            let reply = read_reply(&mut stream, &mut buffer);
            match op {
                Op::Set(version) => {
                    if reply != b"STORED\r\n" {
                        return format!("set {key}: {}", String::from_utf8_lossy(&reply));
                    }
                    latest[index] = Some(version);
                }
                Op::Delete => {
                    if reply != b"DELETED\r\n" && reply != b"NOT_FOUND\r\n" {
                        return format!("delete {key}: {}", String::from_utf8_lossy(&reply));
                    }
                    latest[index] = None;
                }
                Op::Get if reply == b"END\r\n" => {} // A miss is always allowed (a cache).
                Op::Get if reply.starts_with(b"VALUE ") => {
                    let header_end = reply.windows(2).position(|w| w == b"\r\n").unwrap_or(0);
                    let data = &reply[header_end + 2..reply.len() - 7];
                    let expected = latest[index].map(|v| format!("{key}={v}"));
                    if expected.as_deref().map(str::as_bytes) != Some(data) {
                        return format!(
                            "get {key}: {:?}, expected {expected:?} (stale or wrong value)",
                            String::from_utf8_lossy(data)
                        );
                    }
                    tally.hits.fetch_add(1, Ordering::Relaxed);
                }
                Op::Get => return format!("get {key}: {}", String::from_utf8_lossy(&reply)),
            }
            tally.requests.fetch_add(1, Ordering::Relaxed);
        }
    }
    String::new()
}

#[test]
fn joins_and_removals_under_load_drop_nothing_and_never_return_stale_values() {
    let harness = start(Options::default());
    let joining = start_memcached();
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (stop, tally) = (stop.clone(), tally.clone());
            let address = harness.address;
            std::thread::spawn(move || load(address, thread, stop, tally))
        })
        .collect();
    let started = Instant::now();
    let wait_for = |requests: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while tally.requests.load(Ordering::Relaxed) < requests && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let new_server = format!("127.0.0.1:{}:1", joining.port);
    let old_server = format!("127.0.0.1:{}", harness.backends[1].port);
    let mut steps = Vec::new();
    wait_for(20_000);
    for (method, target) in [
        // Join with both warm-up mechanisms; copies and fallback race with sets/deletes.
        (
            "POST",
            format!("/pool/servers?server={new_server}&warmup=preemptive%2Bfallback&share=1"),
        ),
        // Re-weight the new server (a second change while the first may still warm up).
        (
            "POST",
            format!("/pool/servers?server=127.0.0.1:{}:2", joining.port),
        ),
        // Remove an original server, draining its hot keys.
        (
            "DELETE",
            format!("/pool/servers?server={old_server}&warmup=drain&share=1"),
        ),
    ] {
        let before = tally.requests.load(Ordering::Relaxed);
        let (status, body) = admin(&harness, method, &target);
        assert_eq!(status, 200, "{method} {target}: {body}");
        steps.push(body);
        wait_for(before + 20_000);
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let failure = thread.join().expect("load thread");
        assert!(failure.is_empty(), "{failure}");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let requests = tally.requests.load(Ordering::Relaxed);
    eprintln!(
        "{requests} requests in {elapsed:.1} s ({:.0} rps), {} hits; changes: {steps:?}",
        requests as f64 / elapsed,
        tally.hits.load(Ordering::Relaxed)
    );
    let (status, pool) = admin(&harness, "GET", "/pool");
    assert_eq!(status, 200);
    let servers = harness.shared.pool.status().servers;
    assert!(
        servers.contains(&format!("127.0.0.1:{}:2", joining.port)),
        "{pool}"
    );
    assert!(
        !servers.iter().any(|s| s.starts_with(&old_server)),
        "{pool}"
    );
    assert!(harness.shared.pool.version() >= 4, "{pool}");
    assert_eq!(
        harness.shared.stats.server_errors.load(Ordering::Relaxed),
        0
    );
    // The join copied hot keys, so the race the test hunts for was on.
    assert!(harness.shared.pool.stats().copies.get() > 0, "{pool}");
}

#[test]
fn a_server_that_leaves_and_rejoins_never_serves_what_it_held() {
    // Keys the leaving server owned are written elsewhere while it is out; when it rejoins it
    // must not answer with the values it still holds (a cold join: no copies, no fallback).
    let harness = start(Options::default());
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (stop, tally) = (stop.clone(), tally.clone());
            let address = harness.address;
            std::thread::spawn(move || load(address, thread, stop, tally))
        })
        .collect();
    let wait_for = |requests: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while tally.requests.load(Ordering::Relaxed) < requests && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let server = format!("127.0.0.1:{}", harness.backends[1].port);
    wait_for(10_000);
    for (method, mode) in [
        ("DELETE", "cold"),
        ("POST", "cold"),
        ("DELETE", "drain"),
        ("POST", "fallback"),
    ] {
        let before = tally.requests.load(Ordering::Relaxed);
        let (status, body) = admin(
            &harness,
            method,
            &format!("/pool/servers?server={server}&warmup={mode}"),
        );
        assert_eq!(status, 200, "{method} {mode}: {body}");
        wait_for(before + 10_000);
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let failure = thread.join().expect("load thread");
        assert!(failure.is_empty(), "{failure}");
    }
}

#[test]
fn admin_rejects_bad_changes_with_json_errors() {
    let harness = start(Options::default());
    for (method, target, needle) in [
        ("POST", "/pool/servers", "missing server"),
        ("POST", "/pool/servers?server=nonsense", "server"),
        (
            "POST",
            "/pool/servers?server=127.0.0.1:1:1&warmup=lukewarm",
            "warm-up mode",
        ),
        ("DELETE", "/pool/servers?server=127.0.0.1:1", "not a member"),
    ] {
        let (status, body) = admin(&harness, method, target);
        assert_eq!(status, 400, "{method} {target}: {body}");
        assert!(
            body.contains("\"error\"") && body.contains(needle),
            "{body}"
        );
    }
    let (status, body) = admin(&harness, "GET", "/pool");
    assert_eq!(status, 200);
    assert!(
        body.contains("\"version\":1") && body.contains("\"phase\":\"steady\""),
        "{body}"
    );
}

/// Reads every key with `mg v f t` through the proxy; returns the keys that did not come back
/// with their value, flags 7 and a remaining TTL within the 1000 s they were set with.
fn missing_or_wrong(address: SocketAddr, keys: &[String]) -> Vec<String> {
    let mut stream = common::connect(address);
    let mut wrong = Vec::new();
    for key in keys {
        let reply = common::exchange(&mut stream, format!("mg {key} v f t\r\n").as_bytes());
        let value = common::value_for(key);
        let text = String::from_utf8_lossy(&reply);
        let mut lines = text.split("\r\n");
        let header: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
        let ttl_ok = header
            .iter()
            .find_map(|token| token.strip_prefix('t'))
            .and_then(|ttl| ttl.parse::<i64>().ok())
            .is_some_and(|ttl| (1..=1000).contains(&ttl));
        let good = header.first() == Some(&"VA")
            && header.contains(&"f7")
            && ttl_ok
            && lines.next() == Some(value.as_str());
        if !good {
            wrong.push(format!("{key}: {text:?}"));
        }
    }
    wrong
}

#[test]
fn preemptive_join_and_drain_copy_every_moved_key_the_old_owners_hold_with_flags_and_ttl() {
    // The keys are written and never read: the hot-key trackers know none of them, so only
    // the old owners' key listings (memcached's `lru_crawler metadump all`) tell the warm-up
    // what to copy. With share=1 every moved key must be at its new owner at the switch.
    let harness = start(Options::default());
    let joining = start_memcached();
    let keys: Vec<String> = (0..600).map(|i| format!("held:{i}")).collect();
    let mut stream = common::connect(harness.address);
    let mut sets = Vec::new();
    for key in &keys {
        let value = common::value_for(key);
        sets.extend_from_slice(
            format!("set {key} 7 1000 {}\r\n{value}\r\n", value.len()).as_bytes(),
        );
    }
    let reply = common::exchange(&mut stream, &sets);
    assert_eq!(reply, b"STORED\r\n".repeat(keys.len()));
    assert_eq!(
        missing_or_wrong(harness.address, &keys),
        Vec::<String>::new()
    );

    let (status, body) = admin(
        &harness,
        "POST",
        &format!(
            "/pool/servers?server=127.0.0.1:{}:1&warmup=preemptive&share=1",
            joining.port
        ),
    );
    assert_eq!(status, 200, "{body}");
    let moved_to_joining = keys
        .iter()
        .filter(|key| common::owner(&harness, key) == 3)
        .count();
    assert!(moved_to_joining > 0, "{body}");
    assert_eq!(
        missing_or_wrong(harness.address, &keys),
        Vec::<String>::new(),
        "{body}"
    );

    let departing = format!("127.0.0.1:{}", harness.backends[0].port);
    let (status, body) = admin(
        &harness,
        "DELETE",
        &format!("/pool/servers?server={departing}&warmup=drain&share=1"),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        missing_or_wrong(harness.address, &keys),
        Vec::<String>::new(),
        "{body}"
    );
}

#[test]
fn a_key_never_returns_stale_to_its_first_owner_after_more_changes_than_the_history_holds() {
    // Keys move from their first owners to a joining server D; more changes than the
    // history of former owners holds follow (re-weights that leave those keys on D); then the
    // keys are written (at D) and D leaves, so they return to their first owners, which
    // still hold the values from before the join unless something deleted them.
    let harness = start(Options {
        // No request may fail here, even on a loaded machine.
        timeout_ms: 5_000,
        ..Options::default()
    });
    let joining = start_memcached();
    let keys: Vec<String> = (0..400).map(|i| format!("gap:{i}")).collect();
    let mut stream = common::connect(harness.address);
    let write_all = |stream: &mut TcpStream, version: &str| {
        let mut sets = Vec::new();
        for key in &keys {
            let value = format!("{version}:{key}");
            sets.extend_from_slice(
                format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
            );
        }
        let reply = common::exchange(stream, &sets);
        assert!(
            reply == b"STORED\r\n".repeat(keys.len()),
            "{}",
            String::from_utf8_lossy(&reply)
        );
    };
    write_all(&mut stream, "v1");
    let change = |method: &str, server: String| {
        let (status, body) = admin(
            &harness,
            method,
            &format!("/pool/servers?server={server}&warmup=cold"),
        );
        assert_eq!(status, 200, "{method} {server}: {body}");
    };
    let d = format!("127.0.0.1:{}", joining.port);
    change("POST", format!("{d}:1"));
    let on_d: Vec<String> = keys
        .iter()
        .filter(|key| common::owner(&harness, key) == 3)
        .cloned()
        .collect();
    assert!(!on_d.is_empty());
    let owners_now = || -> Vec<usize> {
        keys.iter()
            .map(|key| common::owner(&harness, key))
            .collect()
    };
    let first_owners = owners_now();
    let mut never_moved = vec![true; keys.len()];
    let c = format!("127.0.0.1:{}", harness.backends[2].port);
    for weight in [2, 1, 2, 1, 2, 1, 2, 1, 2, 1] {
        change("POST", format!("{c}:{weight}"));
        for (index, owner) in owners_now().into_iter().enumerate() {
            never_moved[index] &= owner == first_owners[index];
        }
    }
    // The history started over by deleting leftovers only: a key that stayed with its first
    // owner throughout is still there.
    assert!(harness.shared.pool.stats().leftovers_deleted.get() > 0);
    let stayed = keys
        .iter()
        .zip(&never_moved)
        .filter(|(key, &kept)| kept && !on_d.contains(key));
    for (key, _) in stayed {
        let reply = common::exchange(&mut stream, format!("get {key}\r\n").as_bytes());
        let values = common::parse_values(&reply).expect("a get reply");
        assert_eq!(
            values,
            vec![(key.clone(), format!("v1:{key}").into_bytes())]
        );
    }
    write_all(&mut stream, "v2");
    change("DELETE", d);
    let mut stale = Vec::new();
    for key in &on_d {
        let reply = common::exchange(&mut stream, format!("get {key}\r\n").as_bytes());
        let values = common::parse_values(&reply).expect("a get reply");
        if values.iter().any(|(_, data)| data.starts_with(b"v1:")) {
            stale.push(key.clone());
        }
    }
    assert_eq!(
        stale,
        Vec::<String>::new(),
        "of {} keys that were on D",
        on_d.len()
    );
}
