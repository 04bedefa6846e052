//! Size-aware with `[sizeaware] large_workers_help`: a large worker with no large job
//! serves the small workers' connections, so it does not idle while small requests wait.
//! Without it (Minos's rule, the default) a large worker serves large jobs only.
//!
//! ```text
//!   8 connections ─► one get each ─► shared epoll ─► small worker (held 50 ms per request)
//!                                                └─► idle large worker (helps, or not)
//! ```
//!
//! The assertion counts what the large worker served (`large_worker_serves` in `stats
//! sizeaware`), not time.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tailtrim_server::config::DispatchPolicy;
use tailtrim_server::{start, ServerConfig};

fn read_until(stream: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(end) {
        let n = stream.read(&mut buf).expect("read");
        assert!(n > 0, "closed after {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// `large_worker_serves` after 8 concurrent gets, or `None` if the stat is absent.
fn large_worker_serves(help: bool) -> Option<u64> {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = 2;
    config.workers.dispatch = DispatchPolicy::SizeAware;
    // One small worker, one large; nothing is large.
    config.sizeaware.fixed_small_workers = 1;
    config.sizeaware.fixed_threshold = 1 << 30;
    config.sizeaware.large_workers_help = help;
    config.emulation.service = "const=50ms".into();
    let handle = start(config).expect("server starts");
    let mut conns: Vec<TcpStream> = (0..8)
        .map(|_| {
            let conn = TcpStream::connect(handle.local_addr()).expect("connect");
            conn.set_read_timeout(Some(Duration::from_secs(60)))
                .expect("timeout");
            conn
        })
        .collect();
    for (i, conn) in conns.iter_mut().enumerate() {
        conn.write_all(format!("get key:{i}\r\n").as_bytes())
            .expect("write");
    }
    for conn in &mut conns {
        assert_eq!(read_until(conn, b"END\r\n"), b"END\r\n");
    }
    let mut admin = TcpStream::connect(handle.local_addr()).expect("connect");
    admin.write_all(b"stats sizeaware\r\n").expect("write");
    let text = String::from_utf8(read_until(&mut admin, b"END\r\n")).expect("utf-8");
    handle.shutdown();
    text.lines()
        .filter_map(|line| line.strip_prefix("STAT large_worker_serves "))
        .map(|value| value.trim().parse().expect("a number"))
        .next()
}

#[test]
fn an_idle_large_worker_serves_small_requests_only_when_it_helps() {
    // Eight requests of 50 ms each on one small worker: the large worker, looking at the
    // connections every millisecond while it has no large job, finds some of them waiting.
    let helped = large_worker_serves(true).expect("large_worker_serves is reported");
    assert!(
        helped > 0,
        "the idle large worker served none of 8 waiting small requests"
    );
    // Minos's rule: the large worker never touches the connections (the stat is only
    // reported when large workers help).
    assert_eq!(large_worker_serves(false), None);
}

#[test]
fn large_workers_help_by_default_and_stats_say_so() {
    assert!(ServerConfig::default().sizeaware.large_workers_help);
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = 2;
    config.workers.dispatch = DispatchPolicy::SizeAware;
    let handle = start(config).expect("server starts");
    let mut admin = TcpStream::connect(handle.local_addr()).expect("connect");
    admin
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    admin.write_all(b"stats sizeaware\r\n").expect("write");
    let text = String::from_utf8(read_until(&mut admin, b"END\r\n")).expect("utf-8");
    handle.shutdown();
    assert!(
        text.contains("STAT large_workers_help yes\r\n"),
        "stats sizeaware: {text}"
    );
}
