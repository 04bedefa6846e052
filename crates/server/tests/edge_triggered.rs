//! Size-aware's shared epoll holds its connections edge-triggered: a request answered and
//! the socket read empty leaves the registration as it was, so a connection costs no
//! `epoll_ctl` per request (one-shot re-armed once per request). Counted through `stats
//! sizeaware`'s `epoll_rearms`; the large values (handed to the large worker to receive and
//! to send) check that the connection comes back to the small workers after each.
//!
//! ```text
//!   client ─► set/get, one at a time ─► shared epoll (edge) ─► small worker ─► reply
//!                      value > 1 KiB  ─► large worker receives / sends ─► hands back
//! ```

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tailtrim_server::config::DispatchPolicy;
use tailtrim_server::{start, ServerConfig};

const ROUND_TRIPS: usize = 200;

fn read_until(stream: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while !got.ends_with(end) {
        let n = stream.read(&mut buf).expect("read (a hang times out here)");
        assert!(n > 0, "closed after {} bytes", got.len());
        got.extend_from_slice(&buf[..n]);
    }
    got
}

fn stat(stream: &mut TcpStream, name: &str) -> u64 {
    stream.write_all(b"stats sizeaware\r\n").expect("write");
    let text = String::from_utf8(read_until(stream, b"END\r\n")).expect("utf-8");
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .trim()
        .parse()
        .expect("a number")
}

#[test]
fn size_aware_connections_are_not_rearmed_per_request() {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = 3;
    config.workers.dispatch = DispatchPolicy::SizeAware;
    config.sizeaware.fixed_small_workers = 2;
    config.sizeaware.fixed_threshold = 1024;
    let handle = start(config).expect("server starts");
    let mut conn = TcpStream::connect(handle.local_addr()).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let small = vec![b's'; 100];
    let large = vec![b'L'; 64 * 1024];
    for i in 0..ROUND_TRIPS {
        let value = if i % 20 == 0 { &large } else { &small };
        let mut set = format!("set key:{i} 0 0 {}\r\n", value.len()).into_bytes();
        set.extend_from_slice(value);
        set.extend_from_slice(b"\r\n");
        conn.write_all(&set).expect("write");
        assert_eq!(read_until(&mut conn, b"\r\n"), b"STORED\r\n");
        conn.write_all(format!("get key:{i}\r\n").as_bytes())
            .expect("write");
        let got = read_until(&mut conn, b"END\r\n");
        assert_eq!(
            got.len(),
            value.len() + format!("VALUE key:{i} 0 {}\r\n\r\nEND\r\n", value.len()).len()
        );
    }
    let rearms = stat(&mut conn, "epoll_rearms");
    let handoffs = stat(&mut conn, "handoffs");
    handle.shutdown();
    assert!(handoffs >= 2, "large values were handed off: {handoffs}");
    // One-shot: one re-arm per request (2 × 200). Edge-triggered: a few per large value
    // (its receive and its send hand the connection back) and none per small request.
    assert!(
        rearms <= 4 * (ROUND_TRIPS as u64 / 20) + 4,
        "{rearms} re-arms for {} requests",
        2 * ROUND_TRIPS
    );
}
