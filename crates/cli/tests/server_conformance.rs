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

#[test]
fn every_policy_logs_connections_under_verbose() {
    for policy in POLICIES {
        let port = common::free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .args(["serve", "-v", "-U", "0", "-l", "127.0.0.1", "-t", "2"])
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
