//! Connection behaviour under hostile input, against the real `tailtrim serve` binary.
//!
//! ```text
//!   attacker conn ──megabytes / garbage──> server <──get/set── bystander conn
//!        │                                   │
//!        └─ closed or errored like memcached └─ /proc/<pid>/status VmRSS sampled
//! ```
//!
//! Each test stores a value first and checks afterwards that it is intact, that another
//! connection still gets served, and that the server process is alive.
//! Set `TAILTRIM_TEST_TARGET=memcached` to run the same tests against stock memcached.

mod common;

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{drain, read_until, value_for, Program, Server};

const MIB: u64 = 1024 * 1024;
/// Bound on RSS growth (KiB) while one connection sends a multi-megabyte hostile stream:
/// the server may buffer a bounded line (`max_connection_buffer`, 4 MiB), never the stream.
const HOSTILE_RSS_GROWTH_KIB: u64 = 16 * 1024;
/// Bytes each hostile stream offers: at least three times the bound, so that a server that
/// buffered the stream would fail the test.
const HOSTILE_BYTES: usize = 3 * HOSTILE_RSS_GROWTH_KIB as usize * 1024;

const FLAGS: &[&str] = &["-m", "64", "-I", "1m", "-t", "2"];

/// Stores `keep` with a known value and returns that value.
fn store_witness(server: &Server) -> Vec<u8> {
    let value = value_for("keep", 10_000);
    let mut request = format!("set keep 7 0 {}\r\n", value.len()).into_bytes();
    request.extend_from_slice(&value);
    request.extend_from_slice(b"\r\n");
    assert_eq!(server.request(&request, b"\r\n"), b"STORED\r\n");
    value
}

/// Checks that the witness is intact and the server alive and serving new connections.
fn assert_unaffected(server: &mut Server, bystander: &mut TcpStream, witness: &[u8]) {
    assert!(server.is_running(), "server process died");
    let mut expected = format!("VALUE keep 7 {}\r\n", witness.len()).into_bytes();
    expected.extend_from_slice(witness);
    expected.extend_from_slice(b"\r\nEND\r\n");
    bystander
        .write_all(b"get keep\r\n")
        .expect("bystander send");
    let reply = read_until(bystander, b"END\r\n", Duration::from_secs(10));
    assert!(
        reply == expected,
        "bystander got a wrong reply ({} bytes)",
        reply.len()
    );
    assert_eq!(
        server.request(b"version\r\n", b"\r\n").get(..8),
        Some(&b"VERSION "[..]),
        "a new connection is not served"
    );
}

/// Sends `total` bytes produced by `chunk_of` on `stream` while sampling the server's RSS;
/// stops early when the peer closes or stops reading for 5 s. Returns (bytes sent, max RSS
/// in KiB).
fn send_hostile(
    server: &Server,
    stream: &mut TcpStream,
    total: usize,
    mut chunk_of: impl FnMut(usize) -> Vec<u8>,
) -> (usize, u64) {
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .expect("write timeout");
    let mut sent = 0;
    let mut max_rss = server.rss_kib();
    while sent < total {
        let chunk = chunk_of(sent);
        match stream.write(&chunk) {
            Ok(0) => break,
            Ok(n) => sent += n,
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        max_rss = max_rss.max(server.rss_kib());
    }
    eprintln!(
        "hostile stream: {sent} of {total} bytes sent; RSS {} KiB after, max {max_rss} KiB",
        server.rss_kib()
    );
    (sent, max_rss)
}

/// Reads everything the server sends on a cloned stream, in the background.
fn background_reader(stream: &TcpStream) -> (std::thread::JoinHandle<Vec<u8>>, Arc<AtomicBool>) {
    let mut reader = stream.try_clone().expect("clone stream");
    let done = Arc::new(AtomicBool::new(false));
    let done_flag = Arc::clone(&done);
    let handle = std::thread::spawn(move || {
        let mut received = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done_flag.load(Ordering::Relaxed) && Instant::now() < deadline {
            let drained = drain(
                &mut reader,
                Duration::from_millis(100),
                Duration::from_millis(500),
            );
            received.extend_from_slice(&drained.bytes);
            if drained.closed {
                received.extend_from_slice(b"<closed>");
                break;
            }
        }
        received
    });
    (handle, done)
}

#[test]
fn megabyte_line_without_newline_is_closed_with_bounded_memory() {
    let mut server = Server::start_under_test(FLAGS);
    let witness = store_witness(&server);
    let mut bystander = server.connect();
    let baseline = server.rss_kib();
    let mut attacker = server.connect();
    let unit = vec![b'x'; 64 * 1024];
    let (sent, max_rss) = send_hostile(&server, &mut attacker, HOSTILE_BYTES, |_| unit.clone());
    let outcome = drain(
        &mut attacker,
        Duration::from_secs(3),
        Duration::from_secs(10),
    );
    // memcached closes a connection whose first 2 KB hold no newline and do not start with
    // get/gets, without a reply.
    assert!(
        outcome.closed,
        "connection still open after {sent} bytes without newline (reply {:?})",
        String::from_utf8_lossy(&outcome.bytes)
    );
    assert!(
        outcome.bytes.is_empty()
            || outcome.bytes.starts_with(b"CLIENT_ERROR")
            || outcome.bytes.starts_with(b"SERVER_ERROR"),
        "unexpected reply {:?}",
        String::from_utf8_lossy(&outcome.bytes)
    );
    assert!(
        max_rss.saturating_sub(baseline) < HOSTILE_RSS_GROWTH_KIB,
        "RSS grew from {baseline} KiB to {max_rss} KiB"
    );
    assert_unaffected(&mut server, &mut bystander, &witness);
}

#[test]
fn huge_get_line_keeps_memory_bounded() {
    if Program::under_test() == Program::Memcached {
        // memcached buffers multiget lines without bound (it reallocs its read buffer).
        eprintln!("SKIPPED huge_get_line_keeps_memory_bounded: memcached has no bound here");
        return;
    }
    let mut server = Server::start_under_test(FLAGS);
    let witness = store_witness(&server);
    let mut bystander = server.connect();
    let baseline = server.rss_kib();
    let mut attacker = server.connect();
    let (reader, done) = background_reader(&attacker);
    let unit = vec![b'a'; 64 * 1024];
    let (sent, max_rss) = send_hostile(&server, &mut attacker, 4 * HOSTILE_BYTES, |offset| {
        if offset == 0 {
            b"get ".to_vec()
        } else {
            unit.clone()
        }
    });
    let after = server.rss_kib();
    done.store(true, Ordering::Relaxed);
    let _ = attacker.shutdown(std::net::Shutdown::Both);
    let received = reader.join().expect("reader thread");
    let growth = max_rss.max(after).saturating_sub(baseline);
    assert!(
        growth < HOSTILE_RSS_GROWTH_KIB,
        "RSS grew by {growth} KiB while {sent} bytes of one get line arrived"
    );
    let text = String::from_utf8_lossy(&received);
    assert!(
        !text.contains("VALUE"),
        "a partial get line must not be answered with values: {text:.200}"
    );
    assert_unaffected(&mut server, &mut bystander, &witness);
}

/// Deterministic pseudo-random bytes (xorshift64*), never starting with the binary
/// protocol's magic byte 0x80 (memcached would switch to its binary protocol).
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    if out.first() == Some(&0x80) {
        out[0] = 0;
    }
    out
}

#[test]
fn binary_garbage_gets_errors_or_close_and_harms_nobody() {
    let mut server = Server::start_under_test(FLAGS);
    let witness = store_witness(&server);
    let mut bystander = server.connect();
    let baseline = server.rss_kib();
    let mut attacker = server.connect();
    let (reader, done) = background_reader(&attacker);
    let stream = garbage(0x5eed_1234, HOSTILE_BYTES);
    let chunk = 16 * 1024;
    let (sent, max_rss) = send_hostile(&server, &mut attacker, stream.len(), |offset| {
        stream[offset..(offset + chunk).min(stream.len())].to_vec()
    });
    std::thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::Relaxed);
    let received = reader.join().expect("reader thread");
    let closed = received.ends_with(b"<closed>");
    let replies = received.strip_suffix(b"<closed>").unwrap_or(&received);
    let text = String::from_utf8_lossy(replies);
    let error_lines = text
        .split("\r\n")
        .filter(|line| !line.is_empty())
        .inspect(|line| {
            assert!(
                line.starts_with("ERROR")
                    || line.starts_with("CLIENT_ERROR")
                    || line.starts_with("SERVER_ERROR"),
                "garbage produced a non-error reply line {line:?}"
            );
        })
        .count();
    assert!(
        closed || error_lines > 0,
        "garbage got neither an error nor a close ({sent} bytes sent)"
    );
    assert!(
        max_rss.saturating_sub(baseline) < HOSTILE_RSS_GROWTH_KIB,
        "RSS grew from {baseline} KiB to {max_rss} KiB"
    );
    assert_unaffected(&mut server, &mut bystander, &witness);
}

#[test]
fn too_large_value_is_refused_and_connection_stays_usable() {
    let mut server = Server::start_under_test(FLAGS);
    let witness = store_witness(&server);
    let mut bystander = server.connect();
    let mut conn = server.connect();
    let big = value_for("big", 2 * MIB as usize);
    let mut request = format!("set keep 0 0 {}\r\n", big.len()).into_bytes();
    request.extend_from_slice(&big);
    request.extend_from_slice(b"\r\nset after 0 0 2\r\nok\r\nget after\r\n");
    let writer_stream = conn.try_clone().expect("clone");
    let writer = std::thread::spawn(move || {
        let mut writer_stream = writer_stream;
        writer_stream.write_all(&request).is_ok()
    });
    let reply = read_until(&mut conn, b"END\r\n", Duration::from_secs(20));
    assert!(
        writer.join().expect("writer thread"),
        "server stopped reading"
    );
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "SERVER_ERROR object too large for cache\r\nSTORED\r\nVALUE after 0 2\r\nok\r\nEND\r\n"
    );
    // memcached also drops the old value of a key whose new value was too large.
    let mut check = server.connect();
    check.write_all(b"get keep\r\n").expect("send");
    let old = read_until(&mut check, b"END\r\n", Duration::from_secs(10));
    assert!(
        old == b"END\r\n" || old.starts_with(b"VALUE keep 7 10000\r\n"),
        "unexpected reply for the old key: {:.100}",
        String::from_utf8_lossy(&old)
    );
    if old == b"END\r\n" {
        // Re-store the witness so that the bystander check stays meaningful.
        let witness_again = store_witness(&server);
        assert_eq!(witness_again, witness);
    }
    assert_unaffected(&mut server, &mut bystander, &witness);
}

#[test]
fn connection_limit_rejects_extra_connections_like_memcached() {
    let limit = 20;
    let limit_text = limit.to_string();
    let flags = ["-m", "64", "-t", "1", "-c", limit_text.as_str()];
    let server = Server::start_under_test(&flags);
    let served = AtomicU64::new(0);
    let mut rejected = 0;
    let mut connections = Vec::new();
    for _ in 0..limit * 2 {
        let Ok(mut conn) = TcpStream::connect(server.addr()) else {
            rejected += 1;
            continue;
        };
        let _ = conn.write_all(b"version\r\n");
        let outcome = drain(
            &mut conn,
            Duration::from_millis(300),
            Duration::from_secs(3),
        );
        if outcome.bytes.starts_with(b"VERSION ") {
            served.fetch_add(1, Ordering::Relaxed);
        } else {
            assert!(
                outcome.bytes.is_empty() || outcome.bytes == b"ERROR Too many open connections\r\n",
                "rejected connection got {:?}",
                String::from_utf8_lossy(&outcome.bytes)
            );
            assert!(outcome.closed, "a rejected connection must be closed");
            rejected += 1;
        }
        connections.push(conn);
    }
    let served = served.into_inner();
    assert!(
        (1..=limit as u64).contains(&served),
        "{served} connections served with -c {limit}"
    );
    assert!(rejected >= limit, "only {rejected} connections rejected");
    drop(connections);
    // Once connections close, new ones are served again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = server.request(b"version\r\n", b"\r\n");
        if reply.starts_with(b"VERSION ") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no connection served after closing the others"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
