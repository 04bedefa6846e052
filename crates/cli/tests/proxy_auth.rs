//! memcached's ASCII authentication (`-Y FILE`) on `tailtrim proxy`'s client listener, and
//! credentials toward `-Y` backends.
//!
//! ```text
//!   auth file ──-Y──> memcached ─────────────────────────┐
//!             ──-Y──> tailtrim proxy ──> memcached (plain) ┴── same steps, replies compared
//!
//!   client ──> tailtrim proxy (username/password) ──> 3 × memcached -Y     (backend credentials)
//! ```
//!
//! Steps are sent one at a time (memcached answers unauthenticated input with one reply per
//! read, see docs/security.md), and replies compared byte for byte.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::exchange::{auth_block, compare};
use common::proxy::Proxy;
use common::{read_until, require_memcached, Program, Server};

/// How long memcached's side must stay silent before its reply counts as complete.
const QUIET: Duration = Duration::from_millis(300);
/// Upper bound on any wait (bounds a hang, asserts no timing).
const LIMIT: Duration = Duration::from_secs(20);

const USERS: &str = "alice:secret\nbob:hunter2\ncarol:pass:with:colons\n";

/// A fresh file holding `text`, private to this test.
fn test_file(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("proxy-auth");
    std::fs::create_dir_all(&dir).expect("create the test directory");
    let path = dir.join(format!("{name}-{}.txt", std::process::id()));
    std::fs::write(&path, text).expect("write the test file");
    path
}

fn assert_all_match(memcached: &Server, proxy: &Proxy, cases: &[(&str, Vec<&[u8]>)]) {
    let mut mismatches = Vec::new();
    for (name, steps) in cases {
        mismatches.extend(compare(
            memcached.connect(),
            proxy.connect(),
            "proxy",
            name,
            steps,
            QUIET,
            LIMIT,
        ));
    }
    assert!(
        mismatches.is_empty(),
        "the proxy differs from memcached -Y:\n{}",
        mismatches.join("\n")
    );
}

/// memcached -Y, a plain memcached backend and a proxy -Y over it.
fn oracle_and_proxy(path: &Path) -> (Server, Server, Proxy) {
    let path = path.to_str().expect("utf-8 path");
    let memcached = Server::start(Program::Memcached, &["-Y", path]);
    let backend = Server::start(Program::Memcached, &[]);
    let proxy = Proxy::start(&["--servers", &backend.addr().to_string(), "-Y", path]);
    (memcached, backend, proxy)
}

fn stat(text: &str, name: &str) -> String {
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .to_string()
}

#[test]
fn the_proxy_answers_unauthenticated_clients_as_memcached_and_forwards_nothing() {
    if !require_memcached("the_proxy_answers_unauthenticated_clients_as_memcached") {
        return;
    }
    let path = test_file("before", USERS);
    let (memcached, backend, proxy) = oracle_and_proxy(&path);
    let long_line = vec![b'x'; 2049];
    let longest_waiting_line = vec![b'y'; 2048];
    let mut block_too_big = b"set k 0 0 16383\r\nalice secret".to_vec();
    block_too_big.resize(17 + 16383, b' ');
    block_too_big.extend_from_slice(b"\r\n");
    let cases: Vec<(&str, Vec<&[u8]>)> = vec![
        (
            "commands",
            vec![
                b"get foo\r\n",
                b"gets foo bar\r\n",
                b"set foo 0 0 2\r\n",
                b"hi\r\n",
                b"mg foo v\r\n",
                b"ms foo 2\r\n",
                b"hi\r\n",
                b"mn\r\n",
                b"stats\r\n",
                b"stats settings\r\n",
                b"version\r\n",
                b"quit\r\n",
                b"flush_all\r\n",
                b"delete foo\r\n",
                b"incr foo 1\r\n",
                b"\r\n",
                b"add foo 0 0 12\r\n",
                b"set foo 0 0\r\n",
                b"set foo 0 0 -1\r\n",
            ],
        ),
        (
            "bad credentials",
            vec![
                b"set foo 0 0 11\r\nalice wrong\r\n",
                b"set foo 0 0 12\r\nmallory evil\r\n",
                b"set foo 0 0 12\r\nALICE secret\r\n",
                b"set foo 0 0 5\r\nalice\r\n",
                b"set foo 0 0 0\r\n",
                b"xy",
                b"get foo\r\n",
            ],
        ),
        ("line too long", vec![&long_line]),
        ("longest line waits", vec![&longest_waiting_line, b"z"]),
        ("block too big", vec![&block_too_big]),
    ];
    assert_all_match(&memcached, &proxy, &cases);
    // Nothing of it reached the backend.
    let stats = String::from_utf8_lossy(&backend.request(b"stats\r\n", b"END\r\n")).into_owned();
    for name in [
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "delete_misses",
        "incr_misses",
    ] {
        assert_eq!(stat(&stats, name), "0", "{name} reached the backend");
    }
}

#[test]
fn an_authenticated_client_is_served_and_attempts_are_counted() {
    if !require_memcached("an_authenticated_client_is_served_and_attempts_are_counted") {
        return;
    }
    let path = test_file("after", USERS);
    let (memcached, _backend, proxy) = oracle_and_proxy(&path);
    let alice = auth_block("alice", "secret");
    let carol = auth_block("carol", "pass:with:colons");
    let wrong = auth_block("bob", "secret");
    let after: Vec<&[u8]> = vec![
        b"set k 0 0 5\r\nhello\r\n",
        b"get k\r\n",
        b"set k2 0 0 2\r\nhi\r\nget k k2 missing\r\n",
        b"set n 0 0 1\r\n5\r\nincr n 10\r\ndecr n 100\r\n",
        b"delete k\r\nget k\r\n",
        b"set auth 0 0 11\r\nalice wrong\r\nget auth\r\n",
        b"mn\r\n",
    ];
    let mut cases: Vec<(&str, Vec<&[u8]>)> = Vec::new();
    for (name, login) in [("alice", &alice), ("carol", &carol)] {
        let mut steps: Vec<&[u8]> = vec![b"get k\r\n", &wrong, login];
        steps.extend(after.iter().copied());
        cases.push((name, steps));
    }
    assert_all_match(&memcached, &proxy, &cases);
    // Two failures and two successes were checked; memcached counts them the same way.
    let mut stream = proxy.connect();
    stream.write_all(&alice).expect("send");
    stream.write_all(b"stats\r\n").expect("send");
    let reply = read_until(&mut stream, b"END\r\n", LIMIT);
    let text = String::from_utf8_lossy(&reply).into_owned();
    assert!(text.starts_with("STORED\r\n"), "{text}");
    assert_eq!(
        (stat(&text, "auth_cmds"), stat(&text, "auth_errors")),
        ("5".to_string(), "2".to_string()),
        "{text}"
    );
}

#[test]
fn sighup_rereads_the_proxy_auth_file() {
    if !require_memcached("sighup_rereads_the_proxy_auth_file") {
        return;
    }
    let path = test_file("reload", "alice:secret\n");
    let backend = Server::start(Program::Memcached, &[]);
    let path_text = path.to_str().expect("utf-8 path");
    let proxy = Proxy::start(&["--servers", &backend.addr().to_string(), "-Y", path_text]);
    let attempt = |user: &str, password: &str| {
        let mut stream = proxy.connect();
        stream.write_all(&auth_block(user, password)).expect("send");
        String::from_utf8_lossy(&read_until(&mut stream, b"\r\n", LIMIT)).into_owned()
    };
    assert_eq!(attempt("alice", "secret"), "STORED\r\n");
    assert_eq!(
        attempt("dave", "n3w"),
        "CLIENT_ERROR authentication failure\r\n"
    );
    // A malformed file leaves the users in force.
    std::fs::write(&path, "dave:n3w\nbroken\n").expect("rewrite");
    proxy.signal("HUP");
    std::fs::write(&path, "dave:n3w\n").expect("rewrite");
    proxy.signal("HUP");
    let deadline = Instant::now() + LIMIT;
    while attempt("dave", "n3w") != "STORED\r\n" {
        assert!(Instant::now() < deadline, "SIGHUP never reloaded the file");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        attempt("alice", "secret"),
        "CLIENT_ERROR authentication failure\r\n"
    );
}

#[test]
fn a_missing_or_malformed_auth_file_stops_the_proxy_at_start() {
    let backend = "127.0.0.1:1";
    let malformed = test_file("malformed", "alice:secret\nnocolon\n");
    for (path, reason) in [
        (malformed, "line 2 is malformed"),
        (
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no-such-auth-file"),
            "could not open for reading",
        ),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .args(["proxy", "--listen", "127.0.0.1:0", "--admin", "off"])
            .args(["--servers", backend, "-Y"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tailtrim proxy");
        // Bounds a proxy that starts instead of refusing (a hang, not a timing assertion).
        let deadline = Instant::now() + LIMIT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        let status = status.unwrap_or_else(|| panic!("the proxy started: {stderr}"));
        assert!(!status.success(), "{stderr}");
        assert!(stderr.contains("authfile ["), "{stderr}");
        assert!(stderr.contains(reason), "{stderr}");
    }
}

/// Three `memcached -Y` backends sharing one auth file.
fn secured_backends(users: &Path) -> Vec<Server> {
    let users = users.to_str().expect("utf-8 path");
    (0..3)
        .map(|_| Server::start(Program::Memcached, &["-Y", users]))
        .collect()
}

fn server_list(backends: &[Server]) -> String {
    backends
        .iter()
        .map(|backend| backend.addr().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// One request through `stream`, read until `terminator` (bounded).
fn exchange(stream: &mut TcpStream, request: &[u8], terminator: &[u8]) -> String {
    stream.write_all(request).expect("send");
    String::from_utf8_lossy(&read_until(stream, terminator, LIMIT)).into_owned()
}

#[test]
fn the_proxy_logs_in_to_three_secured_memcached_backends() {
    if !require_memcached("the_proxy_logs_in_to_three_secured_memcached_backends") {
        return;
    }
    let users = test_file("backend-users", "proxy:s3cret\nother:x\n");
    let backends = secured_backends(&users);
    let config = test_file(
        "backend-login.toml",
        &format!(
            "[pool]\nservers = [{}]\nusername = \"proxy\"\npassword = \"s3cret\"\n",
            backends
                .iter()
                .map(|backend| format!("\"{}\"", backend.addr()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    let proxy = Proxy::start(&["--config", config.to_str().expect("utf-8 path")]);
    let mut client = proxy.connect();
    let keys: Vec<String> = (0..60).map(|index| format!("key-{index}")).collect();
    for key in &keys {
        let request = format!("set {key} 7 0 {}\r\n{key}\r\n", key.len());
        assert_eq!(
            exchange(&mut client, request.as_bytes(), b"\r\n"),
            "STORED\r\n"
        );
    }
    for key in &keys {
        let expected = format!("VALUE {key} 7 {}\r\n{key}\r\nEND\r\n", key.len());
        let request = format!("get {key}\r\n");
        assert_eq!(
            exchange(&mut client, request.as_bytes(), b"END\r\n"),
            expected
        );
    }
    let multiget = format!("get {}\r\n", keys.join(" "));
    let expected: String = keys
        .iter()
        .map(|key| format!("VALUE {key} 7 {}\r\n{key}\r\n", key.len()))
        .chain(std::iter::once("END\r\n".to_string()))
        .collect();
    assert_eq!(
        exchange(&mut client, multiget.as_bytes(), b"END\r\n"),
        expected
    );
    assert_eq!(
        exchange(&mut client, b"set n 0 0 1\r\n5\r\nincr n 10\r\n", b"15\r\n"),
        "STORED\r\n15\r\n"
    );
    assert_eq!(
        exchange(&mut client, b"delete key-1\r\nget key-1\r\n", b"END\r\n"),
        "DELETED\r\nEND\r\n"
    );
    // Every backend holds some of the keys: each was logged in to and used.
    for backend in &backends {
        let mut direct = backend.connect();
        // One step at a time: memcached answers pipelined unauthenticated input once.
        let login = exchange(&mut direct, &auth_block("proxy", "s3cret"), b"\r\n");
        assert_eq!(login, "STORED\r\n");
        let reply = exchange(&mut direct, b"stats\r\n", b"END\r\n");
        let items: u64 = stat(&reply, "curr_items").parse().expect("a count");
        assert!(items > 0, "backend {} holds no key", backend.addr());
        // The proxy's logins are the backend's checked credentials, none refused.
        assert_eq!(stat(&reply, "auth_errors"), "0", "{reply}");
    }
}

#[test]
fn wrong_backend_credentials_give_a_clear_server_error_without_a_hang() {
    if !require_memcached("wrong_backend_credentials_give_a_clear_server_error") {
        return;
    }
    let users = test_file("backend-users-wrong", "proxy:s3cret\n");
    let backends = secured_backends(&users);
    let login = test_file("wrong-login", "proxy:not-the-password\n");
    let mut proxy = Proxy::start(&[
        "--servers",
        &server_list(&backends),
        "--backend-auth-file",
        login.to_str().expect("utf-8 path"),
        "--server-failure-limit",
        "2",
    ]);
    let mut client = proxy.connect();
    for request in [
        b"get a\r\n".as_slice(),
        b"set a 0 0 1\r\nx\r\n",
        b"get a b c d e f\r\n",
        b"delete a\r\n",
        b"get a\r\n",
        b"get a\r\n",
    ] {
        let reply = exchange(&mut client, request, b"\r\n");
        assert!(reply.starts_with("SERVER_ERROR "), "{request:?}: {reply:?}");
        assert!(reply.ends_with("\r\n"), "{request:?}: {reply:?}");
    }
    // The first refusal is spelled out to the client.
    let reply = exchange(&mut proxy.connect(), b"get z\r\n", b"\r\n");
    assert!(reply.starts_with("SERVER_ERROR "), "{reply:?}");
    let log = proxy.stderr();
    assert!(
        log.contains("refused the login of user proxy: CLIENT_ERROR authentication failure"),
        "{log}"
    );
    assert!(log.contains("ejected"), "{log}");
    assert!(!log.contains("not-the-password"), "{log}");
}
