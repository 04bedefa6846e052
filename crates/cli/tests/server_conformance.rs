//! Behaviour that must be the same under every dispatch policy of
//! `tailtrim serve` (the one engine runs them all): here, `-v` connection
//! logs on stderr.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const POLICIES: [&str; 5] = [
    "pinned",
    "size-aware",
    "early-binding",
    "stealing",
    "late-binding",
];

/// `-vvv` logs connections opened and closed (memcached prints them from `-vv` on; tailtrim
/// keeps `-vv` for commands and replies).
#[test]
fn every_policy_logs_connections_under_verbose() {
    for policy in POLICIES {
        let port = common::free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .args(["serve", "-vvv", "-U", "0", "-l", "127.0.0.1", "-t", "2"])
            .args(["-p", &port.to_string(), "--dispatch", policy])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tailtrim serve starts");
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut conn = loop {
            if let Ok(conn) = TcpStream::connect(("127.0.0.1", port)) {
                break conn;
            }
            assert!(Instant::now() < deadline, "{policy}: no listener");
            std::thread::sleep(Duration::from_millis(30));
        };
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        conn.write_all(b"version\r\n").expect("write");
        let mut reply = [0u8; 64];
        let n = conn.read(&mut reply).expect("version reply");
        assert!(reply[..n].starts_with(b"VERSION "), "{policy}");
        drop(conn);
        // Let the server see the close before it is stopped.
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: plain kill(2) of the child we started.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let output = child.wait_with_output().expect("server exits");
        let log = String::from_utf8_lossy(&output.stderr);
        assert!(
            log.contains("new client connection from 127.0.0.1"),
            "{policy}: {log}"
        );
        assert!(log.contains("connection closed"), "{policy}: {log}");
    }
}

/// `stats conns` lists the listener and every client connection as memcached does
/// (`<fd>:addr`, `listen_addr`, `state`, `secs_since_last_cmd`), and `stats cachedump 1 N`
/// lists stored items, under every policy.
#[test]
fn every_policy_lists_connections_and_dumps_items() {
    for policy in POLICIES {
        let server = common::Server::start_under_test(&["-t", "2", "--dispatch", policy]);
        let idle = server.connect();
        let mut asking = server.connect();
        asking
            .write_all(b"set dumped 5 0 3\r\nabc\r\nset ttl 0 1000 10\r\n0123456789\r\n")
            .expect("write");
        common::read_until(
            &mut asking,
            b"STORED\r\nSTORED\r\n",
            Duration::from_secs(10),
        );
        asking.write_all(b"stats conns\r\n").expect("write");
        let conns = common::read_until(&mut asking, b"END\r\n", Duration::from_secs(10));
        let conns = String::from_utf8_lossy(&conns);
        assert!(
            conns.contains(&format!(":addr tcp:{}\r\n", server.addr())),
            "{policy}: the listener in {conns}"
        );
        assert!(
            conns.contains(":state conn_listening\r\n"),
            "{policy}: {conns}"
        );
        for client in [&idle, &asking] {
            let peer = client.local_addr().expect("local address");
            assert!(
                conns.contains(&format!(":addr tcp:{peer}\r\n")),
                "{policy}: {peer} in {conns}"
            );
        }
        assert!(
            conns.contains(&format!(":listen_addr tcp:{}\r\n", server.addr())),
            "{policy}: {conns}"
        );
        assert!(
            conns.contains(":state conn_parse_cmd\r\n"),
            "{policy}: {conns}"
        );
        asking.write_all(b"stats cachedump 1 0\r\n").expect("write");
        let dump = common::read_until(&mut asking, b"END\r\n", Duration::from_secs(10));
        let dump = String::from_utf8_lossy(&dump);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        // Most recently used first within a store shard; the two keys may be in two shards.
        let mut lines: Vec<&str> = dump.lines().collect();
        assert_eq!(lines.pop(), Some("END"), "{policy}: {dump}");
        lines.sort_unstable();
        assert_eq!(lines.len(), 2, "{policy}: {dump}");
        assert_eq!(lines[0], "ITEM dumped [3 b; 0 s]", "{policy}: {dump}");
        let expiry: u64 = lines[1]
            .strip_prefix("ITEM ttl [10 b; ")
            .and_then(|rest| rest.strip_suffix(" s]"))
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{policy}: the item with its expiry: {dump}"));
        assert!(expiry.abs_diff(now + 1000) <= 5, "{policy}: {dump}");
    }
}
