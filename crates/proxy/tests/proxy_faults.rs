//! Faults through the proxy (issue 5): a killed backend, a SIGSTOPped backend, replicas, and a
//! checker that every value read carries its own key while backends die and come back.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    connect, exchange, once, owner, parse_values, set_command, start, value_for, Options,
};
use tailtrim_client::testkit::{require_binary, start_memcached_on};

const TIMEOUT_MS: u64 = 300;

fn store(harness: &common::Harness, keys: &[String]) {
    let mut stream = connect(harness.address);
    let mut sets = Vec::new();
    for key in keys {
        sets.extend(set_command(key));
    }
    assert_eq!(
        exchange(&mut stream, &sets),
        "STORED\r\n".repeat(keys.len()).into_bytes()
    );
}

fn keys(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}:{i}")).collect()
}

fn is_server_error(reply: &[u8]) -> bool {
    reply.starts_with(b"SERVER_ERROR ")
        && reply.ends_with(b"\r\n")
        && !reply[..reply.len() - 2].contains(&b'\n')
}

#[test]
fn killed_backend_gives_fast_server_errors_for_its_keys_only_and_comes_back() {
    if !require_binary("memcached") {
        return;
    }
    let mut harness = start(Options {
        timeout_ms: TIMEOUT_MS,
        ..Options::default()
    });
    let names = keys("kill", 90);
    store(&harness, &names);
    let victim = 2;
    let victim_port = harness.backends[victim].port;
    harness.backends[victim].kill();
    let mut victim_errors = 0;
    for key in &names {
        let (reply, took) = once(harness.address, format!("get {key}\r\n").as_bytes());
        assert!(
            took < Duration::from_millis(TIMEOUT_MS * 10),
            "{key} took {took:?}"
        );
        if owner(&harness, key) == victim {
            assert!(
                is_server_error(&reply),
                "{key}: {:?}",
                String::from_utf8_lossy(&reply)
            );
            victim_errors += 1;
        } else {
            let values = parse_values(&reply).expect("healthy backend answers");
            assert_eq!(values, vec![(key.clone(), value_for(key).into_bytes())]);
        }
    }
    assert!(victim_errors > 0);
    // Writes to the dead backend fail the same way; a multiget touching it fails as a whole.
    let victim_key = names
        .iter()
        .find(|key| owner(&harness, key) == victim)
        .expect("victim key");
    let (reply, _) = once(harness.address, &set_command(victim_key));
    assert!(is_server_error(&reply));
    let (reply, _) = once(
        harness.address,
        format!("get {}\r\n", names.join(" ")).as_bytes(),
    );
    assert!(
        is_server_error(&reply),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
    let stats = String::from_utf8(once(harness.address, b"stats\r\n").0).expect("utf8");
    assert!(
        stats.contains(&format!("STAT backend_up:127.0.0.1:{victim_port} 0\r\n")),
        "{stats}"
    );

    // Bring it back on the same port: after the retry delay it is used again.
    let _revived = start_memcached_on(victim_port);
    std::thread::sleep(Duration::from_millis(450));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (reply, _) = once(harness.address, &set_command(victim_key));
        if reply == b"STORED\r\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "backend never came back: {reply:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (reply, _) = once(harness.address, format!("get {victim_key}\r\n").as_bytes());
    assert_eq!(
        parse_values(&reply).expect("values"),
        vec![(victim_key.clone(), value_for(victim_key).into_bytes())]
    );
}

#[test]
fn replicated_pool_serves_every_key_with_a_backend_dead() {
    if !require_binary("memcached") {
        return;
    }
    let mut harness = start(Options {
        replicas: 2,
        timeout_ms: TIMEOUT_MS,
        ..Options::default()
    });
    let names = keys("rep", 90);
    store(&harness, &names);
    harness.backends[0].kill();
    let mut stream = connect(harness.address);
    for round in 0..3 {
        let reply = exchange(
            &mut stream,
            format!("get {}\r\n", names.join(" ")).as_bytes(),
        );
        let values = parse_values(&reply)
            .unwrap_or_else(|| panic!("round {round}: {:?}", String::from_utf8_lossy(&reply)));
        assert_eq!(
            values.len(),
            names.len(),
            "round {round}: a key went missing"
        );
        for ((key, data), wanted) in values.iter().zip(&names) {
            assert_eq!(key, wanted);
            assert_eq!(data, value_for(key).as_bytes());
        }
    }
    for key in names.iter().take(20) {
        let reply = exchange(&mut stream, format!("get {key}\r\n").as_bytes());
        assert_eq!(parse_values(&reply).expect("value").len(), 1);
    }
}

#[test]
fn stopped_backend_times_out_and_nothing_hangs() {
    if !require_binary("memcached") {
        return;
    }
    let harness = start(Options {
        backends: 2,
        timeout_ms: TIMEOUT_MS,
        ..Options::default()
    });
    let names = keys("stop", 40);
    store(&harness, &names);
    let victim = 1;
    harness.backends[victim].signal("STOP");
    let victim_keys: Vec<&String> = names
        .iter()
        .filter(|k| owner(&harness, k) == victim)
        .collect();
    let healthy_keys: Vec<&String> = names
        .iter()
        .filter(|k| owner(&harness, k) != victim)
        .collect();
    let mut timeouts = 0;
    for key in victim_keys.iter().take(4) {
        let (reply, took) = once(harness.address, format!("get {key}\r\n").as_bytes());
        assert!(
            took < Duration::from_millis(TIMEOUT_MS * 10),
            "hung for {took:?}"
        );
        assert!(
            is_server_error(&reply),
            "{:?}",
            String::from_utf8_lossy(&reply)
        );
        if String::from_utf8_lossy(&reply).contains("timed out") {
            timeouts += 1;
        }
    }
    assert_eq!(timeouts, 2, "two timeouts (failure_limit), then fail fast");
    for key in healthy_keys {
        let (reply, _) = once(harness.address, format!("get {key}\r\n").as_bytes());
        assert_eq!(parse_values(&reply).expect("value").len(), 1, "{key}");
    }
    harness.backends[victim].signal("CONT");
}

/// Several clients write key-embedding values and read random multigets while one backend is
/// killed and restarted. Every reply must be either a well-formed `VALUE…END` whose values
/// each carry their own key, in the asked order, or a single SERVER_ERROR line.
#[test]
fn no_reply_ever_carries_another_keys_value_under_faults() {
    if !require_binary("memcached") {
        return;
    }
    let harness = Arc::new(start(Options {
        timeout_ms: TIMEOUT_MS,
        retry_ms: 200,
        ..Options::default()
    }));
    let names = Arc::new(keys("chk", 200));
    store(&harness, &names);
    let stop = Arc::new(AtomicBool::new(false));
    let good_replies = Arc::new(AtomicU64::new(0));
    let error_replies = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for worker in 0..3u64 {
        let (harness, names, stop) = (harness.clone(), names.clone(), stop.clone());
        let (good, errors) = (good_replies.clone(), error_replies.clone());
        workers.push(std::thread::spawn(move || {
            let mut stream = connect(harness.address);
            let mut state = worker * 7919 + 1;
            let mut next = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state
            };
            while !stop.load(Ordering::Relaxed) {
                let count = 1 + (next() % 12) as usize;
                let asked: Vec<&String> = (0..count)
                    .map(|_| &names[(next() % names.len() as u64) as usize])
                    .collect();
                if next() % 4 == 0 {
                    let reply = exchange(&mut stream, &set_command(asked[0]));
                    assert!(
                        reply == b"STORED\r\n" || is_server_error(&reply),
                        "{reply:?}"
                    );
                    continue;
                }
                let line = asked
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                let reply = exchange(&mut stream, format!("get {line}\r\n").as_bytes());
                if is_server_error(&reply) {
                    errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let values = parse_values(&reply).unwrap_or_else(|| {
                    panic!("garbled reply {:?}", String::from_utf8_lossy(&reply))
                });
                let mut cursor = 0;
                for (key, data) in values {
                    assert_eq!(
                        data,
                        value_for(&key).as_bytes(),
                        "{key} carried another value"
                    );
                    // Keys come back in the asked order (misses skipped).
                    while cursor < asked.len() && *asked[cursor] != key {
                        cursor += 1;
                    }
                    assert!(cursor < asked.len(), "{key} not asked or out of order");
                    cursor += 1;
                }
                good.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(300));
    // Kill backend 0 mid-run, then bring it back (empty) on the same port.
    let port = harness.backends[0].port;
    let pid = harness.backends[0].pid().expect("pid");
    let _ = std::process::Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status();
    std::thread::sleep(Duration::from_millis(600));
    let revived = start_memcached_on(port);
    std::thread::sleep(Duration::from_millis(800));
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().expect("checker thread panicked");
    }
    drop(revived);
    let good = good_replies.load(Ordering::Relaxed);
    let errors = error_replies.load(Ordering::Relaxed);
    assert!(good > 10, "only {good} good replies");
    assert!(errors > 0, "the kill should have produced SERVER_ERRORs");
}

/// Pipelined gets (merged by the proxy into one multiget) while a backend is dead: each
/// request's reply is in its place, either its own values or a SERVER_ERROR line.
#[test]
fn pipelined_gets_keep_their_own_replies_when_a_backend_dies() {
    if !require_binary("memcached") {
        return;
    }
    let mut harness = start(Options {
        timeout_ms: TIMEOUT_MS,
        ..Options::default()
    });
    let names = keys("pipe", 60);
    store(&harness, &names);
    for round in 0..2 {
        if round == 1 {
            harness.backends[1].kill();
        }
        let groups: Vec<&[String]> = names.chunks(7).collect();
        let mut request = Vec::new();
        for group in &groups {
            request.extend(format!("get {}\r\n", group.join(" ")).into_bytes());
        }
        let mut stream = connect(harness.address);
        let reply = exchange(&mut stream, &request);
        // Cut the reply into one piece per request: END or SERVER_ERROR lines end a piece.
        let text = String::from_utf8(reply).expect("utf8");
        let mut pieces: Vec<String> = Vec::new();
        let mut current = String::new();
        for line in text.split_inclusive("\r\n") {
            current.push_str(line);
            if line == "END\r\n" || line.starts_with("SERVER_ERROR ") {
                pieces.push(std::mem::take(&mut current));
            }
        }
        assert!(current.is_empty(), "trailing bytes {current:?}");
        assert_eq!(
            pieces.len(),
            groups.len(),
            "round {round}: one reply per request"
        );
        for (piece, group) in pieces.iter().zip(&groups) {
            if round == 1 && is_server_error(piece.as_bytes()) {
                assert!(
                    group.iter().any(|key| owner(&harness, key) == 1),
                    "needless error"
                );
                continue;
            }
            let values = parse_values(piece.as_bytes()).expect("values");
            let expected: Vec<(String, Vec<u8>)> = group
                .iter()
                .map(|key| (key.clone(), value_for(key).into_bytes()))
                .collect();
            assert_eq!(values, expected, "round {round}");
        }
    }
}
