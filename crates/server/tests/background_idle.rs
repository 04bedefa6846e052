//! An idle server's background threads sleep until they have something to do: the expiry
//! crawler once per crawl interval, the logger (which writes `watch` lines) until a watcher
//! comes. Counted as the threads' voluntary context switches (each wake-up from a wait is
//! one) over an idle second, not as time.
//!
//! ```text
//!   start (crawl interval 1 s) ─► no traffic
//!   /proc/self/task/*/{comm,status}: voluntary_ctxt_switches of "crawler" and "logger"
//!   at the start and after 1 s ─► the difference is the wake-ups at rest
//!   then: `watch fetchers` on one connection, gets on another ─► a line arrives
//!   then: shutdown with a crawler asleep for an hour ─► returns (the alarm wakes it)
//! ```
//!
//! At rest the crawler wakes about once in a second and the logger at most once; both used
//! to wake every 50 ms (about 20 each in a second). A busy host only makes timers fire later.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use tailtrim_server::{start, ServerConfig};

/// Idle time observed.
const IDLE: Duration = Duration::from_secs(1);
/// Most wake-ups of the crawler over [`IDLE`] at a 1 s interval: about 1 expected, polling
/// every 50 ms made about 20.
const MOST_CRAWLER_WAKEUPS: u64 = 4;
/// Most wake-ups of the logger over [`IDLE`] with nobody watching: at most 1 expected,
/// polling every 50 ms made about 20.
const MOST_LOGGER_WAKEUPS: u64 = 4;

/// The tests of this file one at a time: they count the threads of the whole process by
/// name, and another test's server would be counted with them.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Voluntary context switches of this process's threads named `name`.
fn wakeups_of(name: &str) -> u64 {
    common::wakeups_of(|comm| comm == name)
}

fn server(crawl_interval_ms: u64) -> tailtrim_server::ServerHandle {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = 1;
    config.storage.crawl_interval_ms = crawl_interval_ms;
    start(config).expect("server starts")
}

/// Reads from `conn` until `needle` has arrived (or the read times out: a failure).
fn read_until(conn: &mut TcpStream, needle: &str) -> String {
    let mut text = String::new();
    let mut buffer = [0u8; 4096];
    while !text.contains(needle) {
        let n = conn
            .read(&mut buffer)
            .unwrap_or_else(|error| panic!("waiting for {needle:?} after {text:?}: {error}"));
        assert!(n > 0, "closed while waiting for {needle:?} after {text:?}");
        text.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
    text
}

#[test]
fn an_idle_server_wakes_its_crawler_and_logger_seldom_and_still_serves_watchers() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let handle = server(1000);
    // Let both threads reach their first wait.
    std::thread::sleep(Duration::from_millis(200));
    let crawler_before = wakeups_of("crawler");
    let logger_before = wakeups_of("logger");
    std::thread::sleep(IDLE);
    let crawler = wakeups_of("crawler") - crawler_before;
    let logger = wakeups_of("logger") - logger_before;

    // A watcher adopted while the logger sleeps gets its lines (registered asynchronously,
    // as memcached's: gets are repeated until one is seen, for 30 s at most).
    let mut watch = TcpStream::connect(handle.local_addr()).expect("connect");
    watch
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    watch.write_all(b"watch fetchers\r\n").expect("write");
    read_until(&mut watch, "OK\r\n");
    watch
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut client = TcpStream::connect(handle.local_addr()).expect("connect");
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut lines = String::new();
    let mut buffer = [0u8; 4096];
    for _ in 0..150 {
        client.write_all(b"get seen\r\n").expect("write");
        read_until(&mut client, "END\r\n");
        if let Ok(n) = watch.read(&mut buffer) {
            lines.push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
        if lines.contains("key=seen") {
            break;
        }
    }
    handle.shutdown();

    assert!(
        lines.contains("type=item_get key=seen"),
        "watch lines: {lines:?}"
    );
    assert!(
        crawler <= MOST_CRAWLER_WAKEUPS,
        "the idle crawler woke {crawler} times in {IDLE:?} (at most {MOST_CRAWLER_WAKEUPS})"
    );
    assert!(
        logger <= MOST_LOGGER_WAKEUPS,
        "the idle logger woke {logger} times in {IDLE:?} (at most {MOST_LOGGER_WAKEUPS})"
    );
}

#[test]
fn shutdown_wakes_a_crawler_asleep_for_an_hour() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let handle = server(3_600_000);
    std::thread::sleep(Duration::from_millis(100));
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        handle.shutdown();
        let _ = done.send(());
    });
    // Generous: only a crawler that sleeps out its hour misses it.
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("shutdown returned while the crawler slept");
}
