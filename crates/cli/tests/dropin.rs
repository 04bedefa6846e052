//! Drop-in operation: Debian's `/etc/memcached.conf` (a verbatim copy in
//! `tests/fixtures/debian-memcached.conf`) starts `tailtrim serve` unchanged except for the
//! port and paths, and `-M` answers as memcached does when memory is full.
//!
//! ```text
//!   debian-memcached.conf ──(port, pid/log paths moved to a temp dir)──> serve --memcached-conf
//!     -d: parent exits 0 ─> daemon writes -P pid file ─> version ─> SIGTERM ─> pid file gone
//!   serve -M / memcached -M ──fill with 100 KB values──> same SERVER_ERROR line, no eviction
//! ```

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, read_until, require_memcached, Program, Server};

fn fixture() -> String {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/debian-memcached.conf");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(30));
    }
}

#[test]
fn debian_memcached_conf_starts_a_daemon() {
    let conf = fixture();
    // Every flag line of Debian's file is kept; only values that name this machine's port
    // and system paths move.
    for expected in [
        "-d",
        "logfile ",
        "-m 64",
        "-p 11211",
        "-u memcache",
        "-l 127.0.0.1",
        "-P ",
    ] {
        assert!(
            conf.lines().any(|l| l.starts_with(expected)),
            "fixture lacks {expected}"
        );
    }
    let dir = std::env::temp_dir().join(format!("tailtrim-dropin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // The daemon may run as `memcache` (when the test runs as root): let it write here.
    let _ = Command::new("chmod").arg("777").arg(&dir).status();
    let port = free_port();
    let pid_path = dir.join("memcached.pid");
    let log_path = dir.join("memcached.log");
    let conf = conf
        .replace("-p 11211", &format!("-p {port}"))
        .replace(
            "/var/run/memcached/memcached.pid",
            &pid_path.display().to_string(),
        )
        .replace("/var/log/memcached.log", &log_path.display().to_string());
    let running_as_root = is_root();
    let conf = if running_as_root && !user_exists("memcache") {
        conf.replace("-u memcache", "-u nobody")
    } else {
        conf
    };
    let conf_path = dir.join("memcached.conf");
    std::fs::write(&conf_path, conf).expect("write conf");

    let status = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["serve", "--memcached-conf"])
        .arg(&conf_path)
        .args(["-U", "0"])
        .status()
        .expect("run tailtrim serve");
    assert!(
        status.success(),
        "the parent of the daemon exits 0: {status}"
    );
    wait_for("the pid file", || {
        std::fs::read_to_string(&pid_path).is_ok_and(|t| t.trim().parse::<u32>().is_ok())
    });
    let pid: i32 = std::fs::read_to_string(&pid_path)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    let mut stream = None;
    wait_for("the daemon to accept", || {
        stream = TcpStream::connect(("127.0.0.1", port)).ok();
        stream.is_some()
    });
    let mut stream = stream.expect("connected");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream.write_all(b"version\r\n").expect("write");
    let reply = read_until(&mut stream, b"\r\n", Duration::from_secs(5));
    assert!(
        reply.starts_with(b"VERSION "),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    if running_as_root {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let uid_line = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .expect("Uid line");
        assert!(
            uid_line.split_whitespace().nth(1) != Some("0"),
            "-u did not drop root: {uid_line}"
        );
    }
    assert!(log_path.exists(), "the logfile line opened the log");
    terminate(pid);
    wait_for("the pid file to be removed on exit", || !pid_path.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn user_exists(name: &str) -> bool {
    std::fs::read_to_string("/etc/passwd")
        .map(|p| p.lines().any(|l| l.split(':').next() == Some(name)))
        .unwrap_or(false)
}

fn terminate(pid: i32) {
    let _ = Command::new("kill").arg(pid.to_string()).status();
}

/// Stores 100 KB values until the server refuses one; returns (stored keys, refusal line).
fn fill_until_refused(server: &Server) -> (Vec<String>, String) {
    let mut stream = server.connect();
    let value = vec![b'v'; 100 * 1024];
    let mut stored = Vec::new();
    for index in 0..400 {
        let key = format!("key{index}");
        stream
            .write_all(format!("set {key} 0 0 {}\r\n", value.len()).as_bytes())
            .expect("write");
        stream.write_all(&value).expect("write");
        stream.write_all(b"\r\n").expect("write");
        let reply = read_until(&mut stream, b"\r\n", Duration::from_secs(10));
        if reply == b"STORED\r\n" {
            stored.push(key);
        } else {
            return (stored, String::from_utf8_lossy(&reply).into_owned());
        }
    }
    (stored, String::new())
}

#[test]
fn disable_evictions_answers_out_of_memory_like_memcached() {
    if !require_memcached("disable_evictions_answers_out_of_memory_like_memcached") {
        return;
    }
    // 400 values of 100 KB (40 MB) into 8 MB: without -M both servers evict and never refuse.
    let flags = ["-m", "8", "-M", "-t", "2"];
    let reference = Server::start(Program::Memcached, &flags);
    let (_, memcached_line) = fill_until_refused(&reference);
    let tailtrim = Server::start(Program::Tailtrim, &flags);
    let (stored, tailtrim_line) = fill_until_refused(&tailtrim);
    assert_eq!(
        memcached_line,
        "SERVER_ERROR out of memory storing object\r\n"
    );
    assert_eq!(tailtrim_line, memcached_line);
    assert!(
        stored.len() >= 20,
        "only {} values stored before refusing",
        stored.len()
    );
    let mut stream = tailtrim.connect();
    for key in &stored {
        stream
            .write_all(format!("mg {key}\r\n").as_bytes())
            .expect("write");
        let reply = read_until(&mut stream, b"\r\n", Duration::from_secs(5));
        assert_eq!(reply, b"HD\r\n", "{key} was evicted under -M");
    }
    assert_eq!(
        tailtrim.stats().get("evictions").map(String::as_str),
        Some("0")
    );

    let evicting = Server::start(Program::Tailtrim, &["-m", "8", "-t", "2"]);
    let (stored, line) = fill_until_refused(&evicting);
    assert_eq!(
        (stored.len(), line.as_str()),
        (400, ""),
        "without -M nothing is refused"
    );
}
