//! Resource exhaustion against the real `tailtrim proxy` binary over a `tailtrim serve`
//! backend: a client that never reads its multiget replies, an endless request line, idle
//! and trickling (slowloris) clients, and a flood past the client-connection limit.
//!
//! ```text
//!   non-reading client ──8 x get k0..k99 (500 KB values)──> proxy ──> tailtrim serve
//!   endless get line / tricklers / flood ─────────────────> proxy      (VmRSS sampled)
//!   bystander ──set/get, values checked──────────────────> proxy
//! ```

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, read_until, value_for, Program, Server};

/// A `tailtrim proxy` child process; killed on drop.
struct Proxy {
    child: Child,
    port: u16,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proxy {
    fn start(backend: &Server, extra: &[&str]) -> Proxy {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let servers = format!("127.0.0.1:{}:1", backend.port);
        let child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .args(["proxy", "-l", &listen, "--admin", "off", "-s", &servers])
            .args(["-t", "2"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start tailtrim proxy");
        let mut proxy = Proxy { child, port };
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect_timeout(&proxy.addr(), Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = proxy.child.try_wait() {
                panic!("tailtrim proxy {extra:?} exited early: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "proxy did not listen within 15 s"
            );
            std::thread::sleep(Duration::from_millis(30));
        }
        proxy
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr()).expect("connect to proxy");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .expect("write timeout");
        stream
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("read /proc/<pid>/status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS line")
    }
}

fn stat(stream: &mut TcpStream, name: &str) -> u64 {
    stream.write_all(b"stats\r\n").expect("send stats");
    let reply = read_until(stream, b"END\r\n", Duration::from_secs(10));
    String::from_utf8_lossy(&reply)
        .lines()
        .find_map(|line| line.strip_prefix(&format!("STAT {name} ")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no stat {name}"))
}

/// One set and get of a value derived from `key` and `round`, checked.
fn checked_round_trip(stream: &mut TcpStream, key: &str, round: usize) {
    let value = value_for(&format!("{key}-{round}"), 1000 + round % 100);
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
        String::from_utf8_lossy(&reply[..reply.len().min(100)])
    );
}

/// True when the peer closed `stream` (EOF or reset) within `limit`.
fn closed_within(stream: &TcpStream, limit: Duration) -> bool {
    let mut stream = stream.try_clone().expect("clone");
    let deadline = Instant::now() + limit;
    let mut chunk = [0u8; 65536];
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

/// Bound on the proxy's RSS growth while one client that never reads asks for 8 x 100
/// values of 500 KB (400 MB of replies): one round of replies (one request's 50 MB, held
/// at most twice while it is assembled) and not the whole pipeline.
const NON_READER_RSS_GROWTH_KIB: u64 = 130 * 1024;

#[test]
fn replies_held_for_a_client_that_does_not_read_are_bounded() {
    const KEYS: usize = 100;
    const VALUE: usize = 500 * 1000;
    const REQUESTS: usize = 8;
    let backend = Server::start(Program::Tailtrim, &["-m", "256", "-I", "1m", "-t", "2"]);
    // A generous backend timeout: the bystander's requests share backend connections with
    // 50 MB fetches on a loaded machine.
    let proxy = Proxy::start(&backend, &["--timeout-ms", "10000"]);
    let mut bystander = proxy.connect();
    for index in 0..KEYS {
        let key = format!("big{index}");
        let value = value_for(&key, VALUE);
        let mut request = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        bystander.write_all(&request).expect("set");
        let reply = read_until(&mut bystander, b"\r\n", Duration::from_secs(10));
        assert_eq!(reply, b"STORED\r\n", "set {key}");
    }
    let baseline = proxy.rss_kib();
    let keys: Vec<String> = (0..KEYS).map(|index| format!("big{index}")).collect();
    let line = format!("get {}\r\n", keys.join(" "));
    let mut sleeper = proxy.connect();
    sleeper
        .write_all(line.repeat(REQUESTS).as_bytes())
        .expect("send the multigets");
    // Never read. Sample the proxy while it fetches what it will.
    let mut max_rss = baseline;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        max_rss = max_rss.max(proxy.rss_kib());
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "non-reading client: proxy RSS {baseline} KiB before, max {max_rss} KiB \
         ({REQUESTS} x {KEYS} x {VALUE} bytes of replies asked for)"
    );
    assert!(
        max_rss.saturating_sub(baseline) < NON_READER_RSS_GROWTH_KIB,
        "proxy RSS grew from {baseline} KiB to {max_rss} KiB for a client that never reads"
    );
    checked_round_trip(&mut bystander, "bystander", 0);
    // The client reads at last: every reply arrives, complete and in order.
    let mut expected_one = Vec::new();
    for key in &keys {
        let value = value_for(key, VALUE);
        expected_one.extend_from_slice(format!("VALUE {key} 0 {VALUE}\r\n").as_bytes());
        expected_one.extend_from_slice(&value);
        expected_one.extend_from_slice(b"\r\n");
    }
    expected_one.extend_from_slice(b"END\r\n");
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < expected_one.len() * REQUESTS && Instant::now() < deadline {
        match sleeper.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => panic!("read replies: {err}"),
        }
    }
    assert!(
        got == expected_one.repeat(REQUESTS),
        "the late reader got {} bytes, not the {} expected",
        got.len(),
        expected_one.len() * REQUESTS
    );
}

#[test]
fn an_endless_request_line_is_closed_with_bounded_memory() {
    const BOUND_KIB: u64 = 16 * 1024;
    let backend = Server::start(Program::Tailtrim, &["-t", "1"]);
    let proxy = Proxy::start(&backend, &[]);
    let mut bystander = proxy.connect();
    checked_round_trip(&mut bystander, "bystander", 0);
    let baseline = proxy.rss_kib();
    let mut attacker = proxy.connect();
    attacker.write_all(b"get ").expect("send");
    let unit = vec![b'a'; 64 * 1024];
    let total = 3 * BOUND_KIB as usize * 1024;
    let mut sent = 0;
    let mut max_rss = baseline;
    while sent < total {
        match attacker.write(&unit) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
        max_rss = max_rss.max(proxy.rss_kib());
    }
    eprintln!(
        "endless line: {sent} of {total} bytes sent; proxy RSS {baseline} -> max {max_rss} KiB"
    );
    assert!(
        closed_within(&attacker, Duration::from_secs(5)),
        "the proxy kept a connection whose request grew past {sent} bytes"
    );
    assert!(
        max_rss.saturating_sub(baseline) < BOUND_KIB,
        "proxy RSS grew from {baseline} KiB to {max_rss} KiB"
    );
    checked_round_trip(&mut bystander, "bystander", 1);
}

/// Idle clients and clients trickling a request byte by byte (slowloris) are closed after
/// `--idle-timeout`, while a client that keeps sending commands is served throughout.
#[test]
fn idle_and_trickling_clients_are_closed_after_the_idle_timeout() {
    const TRICKLERS: usize = 200;
    let backend = Server::start(Program::Tailtrim, &["-t", "1"]);
    let proxy = Proxy::start(&backend, &["--idle-timeout", "2"]);
    let mut bystander = proxy.connect();
    let idle = proxy.connect();
    let baseline = proxy.rss_kib();
    let mut tricklers: Vec<Option<TcpStream>> = (0..TRICKLERS)
        .map(|index| {
            let mut stream = proxy.connect();
            stream
                .write_all(format!("set slow{index} 0 0 1000\r\n").as_bytes())
                .expect("trickler header");
            Some(stream)
        })
        .collect();
    let started = Instant::now();
    let mut last_trickle = Instant::now();
    let mut round = 0;
    let mut max_rss = baseline;
    while started.elapsed() < Duration::from_millis(4500) {
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
        max_rss = max_rss.max(proxy.rss_kib());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        closed_within(&idle, Duration::from_secs(1)),
        "an idle client is still open after 4.5 s with --idle-timeout 2"
    );
    let still_open = tricklers
        .iter()
        .flatten()
        .filter(|stream| !closed_within(stream, Duration::from_millis(10)))
        .count();
    assert_eq!(
        still_open, 0,
        "tricklers still open after 4.5 s with --idle-timeout 2"
    );
    assert!(stat(&mut bystander, "idle_kicks") > TRICKLERS as u64);
    assert_eq!(stat(&mut bystander, "curr_connections"), 1);
    assert!(
        max_rss.saturating_sub(baseline) < 32 * 1024,
        "proxy RSS grew from {baseline} KiB to {max_rss} KiB"
    );
    checked_round_trip(&mut bystander, "bystander", round);
}

/// Past `--conn-limit` a new client gets memcached's error line and is closed; once
/// clients leave, new ones are served again.
#[test]
fn a_flood_past_the_client_connection_limit_is_refused() {
    const LIMIT: usize = 20;
    let backend = Server::start(Program::Tailtrim, &["-t", "1"]);
    let limit = LIMIT.to_string();
    let proxy = Proxy::start(&backend, &["--conn-limit", &limit]);
    // The first client holds a slot too, and waits until it is the only one: the
    // connection that found the proxy ready may still hold a slot for a moment (on a
    // loaded machine the flood then found 19 slots, not 20).
    let mut first = proxy.connect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while stat(&mut first, "curr_connections") != 1 {
        assert!(
            Instant::now() < deadline,
            "the readiness probe's slot never freed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut holders: Vec<TcpStream> = (1..LIMIT + 15).map(|_| proxy.connect()).collect();
    let mut refused = 0;
    // A refusal may take a moment on a loaded machine: look a few times.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(300));
        let mut still = Vec::new();
        for mut stream in holders {
            stream.set_nonblocking(true).expect("nonblocking");
            let mut reply = [0u8; 64];
            match stream.read(&mut reply) {
                Ok(n) if reply[..n] == *b"ERROR Too many open connections\r\n" => refused += 1,
                Ok(n) => panic!("unexpected {:?}", String::from_utf8_lossy(&reply[..n])),
                Err(err) if err.kind() == ErrorKind::WouldBlock => still.push(stream),
                Err(err) => panic!("flood connection failed: {err}"),
            }
        }
        holders = still;
    }
    assert_eq!(
        (1 + holders.len(), refused),
        (LIMIT, 15),
        "accepted and refused past --conn-limit {LIMIT}"
    );
    let mut holder = holders.pop().expect("a holder");
    holder.set_nonblocking(false).expect("blocking");
    holder
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    checked_round_trip(&mut holder, "holder", 0);
    assert_eq!(stat(&mut holder, "rejected_connections"), 15);
    drop(holders);
    drop(first);
    // The slots free up as the holders' closes reach the proxy.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut stream = proxy.connect();
        stream.write_all(b"version\r\n").expect("send");
        let reply = read_until(&mut stream, b"\r\n", Duration::from_secs(2));
        if reply.starts_with(b"VERSION ") {
            break;
        }
        assert!(Instant::now() < deadline, "no slot freed: {reply:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
