//! `stats hotkeys`: the server's sampled hot-key tracker through the real request path. The
//! hottest key read is reported first with its count, the tracker never holds more keys than
//! configured (memory bounded whatever keys clients read), `stats reset` clears it, and a
//! disabled tracker says so.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tailtrim_server::{start, ServerConfig, ServerHandle};

fn server(enabled: bool, capacity: usize, sample_every: u32) -> ServerHandle {
    let mut config = ServerConfig::default();
    config.server.listen = "127.0.0.1".into();
    config.server.port = 0;
    config.workers.threads = 2;
    config.hotkeys.enabled = enabled;
    config.hotkeys.capacity = capacity;
    config.hotkeys.sample_every = sample_every;
    start(config).expect("server starts")
}

fn request(stream: &mut TcpStream, bytes: &[u8], end: &[u8]) -> String {
    stream.write_all(bytes).expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !got.ends_with(end) {
        let n = stream.read(&mut buf).expect("read");
        assert!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Sends `batch` followed by `version` and reads every reply up to the version line.
fn pipeline(stream: &mut TcpStream, batch: &str) -> String {
    stream
        .write_all(format!("{batch}version\r\n").as_bytes())
        .expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !(got.ends_with(b"\r\n") && got.windows(8).any(|w| w == b"VERSION ")) {
        let n = stream.read(&mut buf).expect("read");
        assert!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn stats(stream: &mut TcpStream, command: &str) -> HashMap<String, String> {
    request(stream, format!("{command}\r\n").as_bytes(), b"END\r\n")
        .lines()
        .filter_map(|line| line.strip_prefix("STAT "))
        .filter_map(|line| line.split_once(' '))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn connect(handle: &ServerHandle) -> TcpStream {
    let stream = TcpStream::connect(handle.local_addr()).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    stream
}

fn number(stats: &HashMap<String, String>, name: &str) -> u64 {
    stats
        .get(name)
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing in {stats:?}"))
}

#[test]
fn hottest_key_first_and_tracker_bounded() {
    let handle = server(true, 4, 1);
    let mut stream = connect(&handle);
    // 200 reads of `hot`, 60 of `warm` (via mg), then 500 distinct cold keys.
    let mut batch = String::new();
    for i in 0..200 {
        batch.push_str("get hot\r\n");
        if i % 10 < 3 {
            batch.push_str("mg warm v\r\n");
        }
    }
    let replies = pipeline(&mut stream, &batch);
    assert_eq!(replies.matches("END\r\n").count(), 200);
    for i in 0..500 {
        request(
            &mut stream,
            format!("get cold{i}\r\n").as_bytes(),
            b"END\r\n",
        );
    }
    let report = stats(&mut stream, "stats hotkeys 3");
    assert_eq!(report.get("hotkeys_enabled").map(String::as_str), Some("1"));
    assert_eq!(number(&report, "hotkeys_capacity"), 4);
    assert_eq!(number(&report, "hotkeys_tracked"), 4);
    assert_eq!(number(&report, "hotkeys_recorded"), 760);
    assert!(number(&report, "hotkeys_bytes") <= number(&report, "hotkeys_bytes_bound"));
    let first: Vec<&str> = report["hotkey:1"].split(' ').collect();
    assert_eq!(first[0], "hot");
    // Space-saving: the estimate is never below the true count.
    assert!(first[1].parse::<u64>().unwrap_or(0) >= 200, "{first:?}");
    assert!(report.contains_key("hotkey:3") && !report.contains_key("hotkey:4"));
    // stats reset forgets the keys.
    request(&mut stream, b"stats reset\r\n", b"RESET\r\n");
    let after = stats(&mut stream, "stats hotkeys");
    assert_eq!(number(&after, "hotkeys_tracked"), 0);
    assert_eq!(
        request(&mut stream, b"stats hotkeys many\r\n", b"\r\n"),
        "CLIENT_ERROR bad number of hot keys\r\n"
    );
}

#[test]
fn sampling_scales_counts_and_disabled_tracker_says_so() {
    let handle = server(true, 16, 8);
    let mut stream = connect(&handle);
    let replies = pipeline(&mut stream, &"get k\r\n".repeat(800));
    assert_eq!(replies.matches("END\r\n").count(), 800);
    let report = stats(&mut stream, "stats hotkeys");
    // One read in 8 is recorded with weight 8: the count is exact here.
    assert_eq!(number(&report, "hotkeys_recorded"), 800);
    assert_eq!(report["hotkey:1"], "k 800 0");

    let off = server(false, 16, 8);
    let mut stream = connect(&off);
    request(&mut stream, b"get k\r\n", b"END\r\n");
    let report = stats(&mut stream, "stats hotkeys");
    assert_eq!(report.get("hotkeys_enabled").map(String::as_str), Some("0"));
    assert_eq!(report.len(), 1);
}
