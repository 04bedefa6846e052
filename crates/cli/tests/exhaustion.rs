//! Resource exhaustion against the real `tailtrim serve` binary: idle connections, slowloris,
//! a flood of connections past `-c`, and running out of file descriptors.
//!
//! ```text
//!   idle / trickling conns ──(no complete command)──> server ── closed after idle_timeout
//!   flood past -c ──────────> "ERROR Too many open connections", slots freed by idle kicks
//!   prlimit --nofile=N ─────> accept fails (EMFILE): backlog waits, the acceptor backs off
//!                             and retries; existing connections keep being served
//!   bystander conn ─────────> set/get with values checked throughout
//! ```
//!
//! `TAILTRIM_TEST_TARGET=memcached` runs the same tests against stock memcached: it passes
//! the flood test; its `idle_timeout` only closes connections waiting for a new command, so
//! a connection stuck inside a request (a slowloris trickle) stays open there, and it does
//! not start with the lowered descriptor limit of the EMFILE test (its `-c` needs more).

mod common;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{read_until, value_for, Program, Server};

/// Bound on the server's RSS growth (KiB) while hundreds of connections trickle requests.
const SLOWLORIS_RSS_GROWTH_KIB: u64 = 32 * 1024;

/// `stats` read on an existing connection (opening a new one may be impossible here).
fn stats_on(stream: &mut TcpStream) -> HashMap<String, u64> {
    stream.write_all(b"stats\r\n").expect("send stats");
    let reply = read_until(stream, b"END\r\n", Duration::from_secs(10));
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|line| line.strip_prefix("STAT "))
        .filter_map(|rest| {
            let (name, value) = rest.split_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// One set and get of a value derived from `key` and `round` on `stream`, checked.
fn checked_round_trip(stream: &mut TcpStream, key: &str, round: usize) {
    let value = value_for(&format!("{key}-{round}"), 2000 + round % 100);
    let mut request = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
    request.extend_from_slice(&value);
    request.extend_from_slice(format!("\r\nget {key}\r\n").as_bytes());
    stream.write_all(&request).expect("bystander send");
    let mut expected = format!("STORED\r\nVALUE {key} 0 {}\r\n", value.len()).into_bytes();
    expected.extend_from_slice(&value);
    expected.extend_from_slice(b"\r\nEND\r\n");
    let reply = read_until(stream, b"END\r\n", Duration::from_secs(10));
    assert!(
        reply == expected,
        "bystander round {round}: wrong reply ({} bytes: {:?})",
        reply.len(),
        String::from_utf8_lossy(&reply[..reply.len().min(80)])
    );
}

/// True when the peer has closed `stream` (EOF or reset) within `limit`.
fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut chunk = [0u8; 4096];
    stream
        .set_read_timeout(Some(limit.min(Duration::from_millis(100))))
        .expect("read timeout");
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(err)
                if matches!(
                    err.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return true,
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
}

#[test]
fn idle_connections_are_closed_and_active_ones_kept() {
    let server = Server::start_under_test(&["-t", "2", "-o", "idle_timeout=1"]);
    let mut idle = server.connect();
    let mut half_request = server.connect();
    half_request
        .write_all(b"set partial 0 0 100\r\nonly part of the value")
        .expect("send");
    let mut active = server.connect();
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() < Duration::from_millis(3500) {
        checked_round_trip(&mut active, "active", round);
        round += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        closed_within(&mut idle, Duration::from_secs(2)),
        "a connection idle for 3.5 s with idle_timeout=1 is still open"
    );
    assert!(
        closed_within(&mut half_request, Duration::from_secs(2)),
        "a connection stuck in the middle of a request for 3.5 s is still open"
    );
    checked_round_trip(&mut active, "active", round);
    let stats = stats_on(&mut active);
    assert_eq!(stats.get("idle_kicks"), Some(&2), "stats: {stats:?}");
}

/// Hundreds of connections each trickle a `set` whose data never completes, a byte every
/// 250 ms, while one client keeps storing and reading values: the client is served
/// throughout, memory stays bounded, and the idle timeout closes every trickler.
#[test]
fn slowloris_connections_are_closed_while_a_client_is_served() {
    const TRICKLERS: usize = 300;
    let server = Server::start_under_test(&["-t", "2", "-c", "400", "-o", "idle_timeout=2"]);
    let mut bystander = server.connect();
    checked_round_trip(&mut bystander, "bystander", 0);
    let baseline = server.rss_kib();
    let mut tricklers: Vec<Option<TcpStream>> = (0..TRICKLERS)
        .map(|index| {
            let mut stream = server.connect();
            stream
                .write_all(format!("set slow{index} 0 0 1000\r\n").as_bytes())
                .expect("trickler header");
            Some(stream)
        })
        .collect();
    let started = Instant::now();
    let mut max_rss = baseline;
    let mut round = 1;
    let mut last_trickle = Instant::now();
    while started.elapsed() < Duration::from_millis(5000) {
        if last_trickle.elapsed() >= Duration::from_millis(250) {
            last_trickle = Instant::now();
            for slot in tricklers.iter_mut() {
                let failed = slot
                    .as_mut()
                    .is_some_and(|stream| stream.write(b"x").is_err());
                if failed {
                    *slot = None;
                }
            }
        }
        checked_round_trip(&mut bystander, "bystander", round);
        round += 1;
        max_rss = max_rss.max(server.rss_kib());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every trickler sent its last byte at most 250 ms ago but completed no command for
    // 5 s: each must be closed by now, or within the idle check's period.
    std::thread::sleep(Duration::from_millis(1500));
    let still_open = tricklers
        .iter_mut()
        .flatten()
        .filter(|stream| {
            !closed_within(
                &mut (*stream).try_clone().expect("clone"),
                Duration::from_millis(10),
            )
        })
        .count();
    assert_eq!(
        still_open, 0,
        "tricklers still open after 5 s with idle_timeout=2"
    );
    let stats = stats_on(&mut bystander);
    assert_eq!(stats.get("curr_connections"), Some(&1), "stats: {stats:?}");
    assert!(
        stats.get("idle_kicks").copied().unwrap_or(0) >= TRICKLERS as u64,
        "stats: {stats:?}"
    );
    assert!(
        max_rss.saturating_sub(baseline) < SLOWLORIS_RSS_GROWTH_KIB,
        "RSS grew from {baseline} KiB to {max_rss} KiB with {TRICKLERS} trickling connections"
    );
    assert!(round > 10, "bystander served only {round} rounds in 5 s");
}

/// A flood of connections past `-c`: the excess gets memcached's error line and is closed;
/// the flood's own connections hold their slots only until the idle timeout, after which a
/// new client is served again.
#[test]
fn a_flood_past_the_connection_limit_is_refused_then_its_slots_freed() {
    const LIMIT: usize = 40;
    let limit = LIMIT.to_string();
    let server = Server::start_under_test(&["-t", "2", "-c", &limit, "-o", "idle_timeout=2"]);
    let mut pending: Vec<TcpStream> = (0..LIMIT + 30).map(|_| server.connect()).collect();
    let mut holders = Vec::new();
    let mut refused = 0;
    // A refusal may take a moment on a loaded machine: look a few times.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(250));
        let mut still = Vec::new();
        for mut stream in pending {
            stream.set_nonblocking(true).expect("nonblocking");
            let mut reply = [0u8; 64];
            match stream.read(&mut reply) {
                Ok(n) if reply[..n].starts_with(b"ERROR Too many open connections\r\n") => {
                    refused += 1;
                }
                // Accepted, then closed by the idle timeout already.
                Ok(0) => holders.push(stream),
                Ok(n) => panic!(
                    "unexpected greeting {:?}",
                    String::from_utf8_lossy(&reply[..n])
                ),
                Err(err) if err.kind() == ErrorKind::WouldBlock => still.push(stream),
                Err(err) => panic!("flood connection failed: {err}"),
            }
        }
        pending = still;
    }
    holders.extend(pending);
    // memcached also counts its own listening sockets, so it refuses a few more.
    assert!(
        refused >= 30 && holders.len() <= LIMIT,
        "{} accepted, {refused} refused past -c {LIMIT}",
        holders.len()
    );
    // The holders never send a command: the idle timeout frees their slots.
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut served = None;
    while Instant::now() < deadline && served.is_none() {
        let mut stream = server.connect();
        stream.write_all(b"version\r\n").expect("send version");
        let reply = read_until(&mut stream, b"\r\n", Duration::from_secs(2));
        if reply.starts_with(b"VERSION ") {
            served = Some(stream);
        } else {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let mut served = served.expect("no new client was served within 8 s of the flood");
    checked_round_trip(&mut served, "after-flood", 0);
    let stats = stats_on(&mut served);
    assert!(
        stats.get("rejected_connections").copied().unwrap_or(0) >= 30,
        "stats: {stats:?}"
    );
}

/// With RLIMIT_NOFILE lowered, accept fails with EMFILE while clients keep connecting: the
/// existing connection is served all along, and once descriptors free up the connections
/// waiting in the backlog are accepted and served without any new connection arriving to
/// wake the acceptor.
#[test]
fn accept_failing_with_emfile_backs_off_and_recovers() {
    const NOFILE: &str = "--nofile=24";
    const CLIENTS: usize = 40;
    let server = Server::start_wrapped(Program::under_test(), &["-t", "2"], &["prlimit", NOFILE]);
    let mut bystander = server.connect();
    checked_round_trip(&mut bystander, "bystander", 0);
    let mut clients: Vec<TcpStream> = (0..CLIENTS)
        .map(|index| {
            let mut stream = server.connect();
            stream
                .write_all(format!("set c{index} 0 0 1\r\n{}\r\n", index % 10).as_bytes())
                .expect("client send");
            stream
        })
        .collect();
    let mut answered = Vec::new();
    let mut waiting = Vec::new();
    for (index, stream) in clients.iter_mut().enumerate() {
        let reply = read_until(stream, b"\r\n", Duration::from_millis(300));
        if reply == b"STORED\r\n" {
            answered.push(index);
        } else {
            assert!(reply.is_empty(), "client {index} got {reply:?}");
            waiting.push(index);
        }
    }
    assert!(
        !waiting.is_empty(),
        "every client was accepted: the descriptor limit did not bite ({NOFILE})"
    );
    // The server is out of descriptors but keeps serving what it has.
    checked_round_trip(&mut bystander, "bystander", 1);
    // Free descriptors: close every answered client. Nothing new connects.
    let mut kept: Vec<(usize, TcpStream)> = Vec::new();
    for (index, stream) in clients.into_iter().enumerate() {
        if waiting.contains(&index) {
            kept.push((index, stream));
        }
    }
    let mut served_late = 0;
    for (index, mut stream) in kept.drain(..) {
        let reply = read_until(&mut stream, b"\r\n", Duration::from_secs(5));
        assert_eq!(
            reply, b"STORED\r\n",
            "client {index}, waiting in the backlog, not served after descriptors freed up"
        );
        served_late += 1;
        drop(stream);
    }
    assert_eq!(served_late, waiting.len());
    checked_round_trip(&mut bystander, "bystander", 2);
    let stats = stats_on(&mut bystander);
    if Program::under_test() == Program::Tailtrim {
        assert!(
            stats.get("listen_disabled_num").copied().unwrap_or(0) >= 1,
            "stats: {stats:?}"
        );
    }
}
