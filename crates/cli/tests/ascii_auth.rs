//! memcached's ASCII authentication (`-Y FILE`), differentially: the same
//! exchanges sent to Debian's `memcached -Y` and to `tailtrim serve -Y`, replies
//! (and whether the connection was closed) compared byte for byte.
//!
//! ```text
//!   auth file ──-Y──> memcached ──┐
//!             ──-Y──> tailtrim ───┴── same steps, one at a time ──> replies compared
//! ```
//!
//! Each step is sent only once the reply to the previous one has been read:
//! memcached answers unauthenticated input with one reply object per read, so
//! two pipelined unauthenticated commands get only the last reply from it
//! (docs/security.md), and comparing pipelined exchanges would compare that.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::exchange::{auth_block, compare};
use common::{require_memcached, Program, Server};

/// How long memcached's side must stay silent before its reply counts as complete.
const QUIET: Duration = Duration::from_millis(300);
/// Upper bound on waiting for a reply (bounds a hang, asserts no timing).
const LIMIT: Duration = Duration::from_secs(10);

const USERS: &str = "alice:secret\nbob:hunter2\ncarol:pass:with:colons\n";

/// A fresh auth file holding `text`, private to this test.
fn auth_file(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ascii-auth");
    std::fs::create_dir_all(&dir).expect("create the test directory");
    let path = dir.join(format!("{name}-{}.txt", std::process::id()));
    std::fs::write(&path, text).expect("write the auth file");
    path
}

/// memcached and tailtrim, both with `-Y path`.
fn pair(path: &std::path::Path) -> (Server, Server) {
    let path = path.to_str().expect("utf-8 path");
    (
        Server::start(Program::Memcached, &["-Y", path]),
        Server::start(Program::Tailtrim, &["-Y", path]),
    )
}

fn assert_all_match(memcached: &Server, tailtrim: &Server, cases: &[(&str, Vec<&[u8]>)]) {
    let mut mismatches = Vec::new();
    for (name, steps) in cases {
        mismatches.extend(compare(
            memcached.connect(),
            tailtrim.connect(),
            "tailtrim",
            name,
            steps,
            QUIET,
            LIMIT,
        ));
    }
    assert!(
        mismatches.is_empty(),
        "tailtrim differs from memcached -Y:\n{}",
        mismatches.join("\n")
    );
}

#[test]
fn commands_before_authentication_get_memcacheds_errors() {
    if !require_memcached("commands_before_authentication_get_memcacheds_errors") {
        return;
    }
    let path = auth_file("before", USERS);
    let (memcached, tailtrim) = pair(&path);
    let long_line = vec![b'x'; 2049];
    let longest_waiting_line = vec![b'y'; 2048];
    let mut block_too_big = b"set k 0 0 16383\r\n".to_vec();
    block_too_big.extend_from_slice(b"alice secret");
    block_too_big.resize(17 + 16383, b' ');
    block_too_big.extend_from_slice(b"\r\n");
    let mut largest_block = b"set k 0 0 16382\r\nalice secret".to_vec();
    largest_block.resize(17 + 16382, b' ');
    largest_block.extend_from_slice(b"\r\n");
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
                b"version\r\n",
                b"quit\r\n",
                b"flush_all\r\n",
                b"delete foo\r\n",
                b"\r\n",
                b"GET foo\r\n",
                b"add foo 0 0 12\r\n",
                b"set foo 0 0\r\n",
                b"set foo 0 0 -1\r\n",
                b"set foo 0 0 12x\r\n",
                b"set\tfoo 0 0 12\r\n",
                b"\n",
                b"\n",
            ],
        ),
        (
            "bad credentials",
            vec![
                b"set foo 0 0 11\r\nalice wrong\r\n",
                b"set foo 0 0 12\r\nmallory evil\r\n",
                b"set foo 0 0 13\r\nbob secret!!!\r\n",
                b"set foo 0 0 12\r\nALICE secret\r\n",
                b"get foo\r\n",
            ],
        ),
        (
            "malformed data",
            vec![
                b"set foo 0 0 5\r\n",
                b"alice\r\n",
                b"set foo 0 0 0\r\n",
                b"\r\n",
                b"set foo 0 0 0\r\n",
                b"xy",
                b"set foo 0 0 12\r\n",
                b"alice\tsecret\r\n",
                b"set foo 0 0 12\n",
                b"alice secret\n",
                b"\r\n",
            ],
        ),
        (
            "data ends at a NUL byte",
            vec![b"set foo 0 0 13\r\nalice secret\0\r\nmn\r\n"],
        ),
        ("line too long", vec![&long_line]),
        ("longest line waits", vec![&longest_waiting_line, b"z"]),
        ("block too big", vec![&block_too_big]),
        ("largest block", vec![&largest_block, b"get k\r\n"]),
    ];
    assert_all_match(&memcached, &tailtrim, &cases);
}

#[test]
fn a_good_authentication_then_normal_commands() {
    if !require_memcached("a_good_authentication_then_normal_commands") {
        return;
    }
    let path = auth_file("good", USERS);
    let (memcached, tailtrim) = pair(&path);
    let alice = auth_block("alice", "secret");
    let bob = auth_block("bob", "hunter2");
    let carol = auth_block("carol", "pass:with:colons");
    let after: Vec<&[u8]> = vec![
        b"set k 0 0 5\r\nhello\r\n",
        b"get k\r\n",
        b"mg k v f t\r\n",
        b"ms k2 2 T0\r\nhi\r\nmg k2 v\r\n",
        b"append k 0 0 1\r\n!\r\nget k k2 missing\r\n",
        b"set n 0 0 1\r\n5\r\nincr n 10\r\ndecr n 100\r\n",
        b"delete k\r\nget k\r\n",
        b"set auth 0 0 11\r\nalice wrong\r\nget auth\r\n",
        b"mn\r\n",
    ];
    let mut cases: Vec<(&str, Vec<&[u8]>)> = Vec::new();
    for (name, login) in [("alice", &alice), ("bob", &bob), ("carol", &carol)] {
        let mut steps: Vec<&[u8]> = vec![b"get k\r\n", login];
        steps.extend(after.iter().copied());
        cases.push((name, steps));
    }
    let extra_words = b"set a 0 0 18\r\nalice secret extra\r\nmn\r\n".as_slice();
    let spaces = b"set a 0 0 15\r\n  alice  secret\r\nmn\r\n".as_slice();
    let big_count = b"set a 0 0 4294967308\r\nalice secret\r\nmn\r\n".as_slice();
    let noreply = b"set a 0 0 12 noreply\r\nalice secret\r\nmn\r\n".as_slice();
    let crossed = auth_block("alice", "hunter2");
    cases.push(("variants", vec![&crossed, extra_words, b"get k\r\n"]));
    cases.push(("spaces", vec![spaces]));
    cases.push(("count past 32 bits", vec![big_count]));
    cases.push(("noreply ignored", vec![noreply]));
    cases.push((
        "retry after a failure",
        vec![&crossed, b"get a\r\n", &bob, b"get a\r\n"],
    ));
    assert_all_match(&memcached, &tailtrim, &cases);
}

/// `stats` on a connection that authenticates first.
fn auth_stats(server: &Server) -> (String, String) {
    let mut stream = server.connect();
    stream
        .write_all(&auth_block("alice", "secret"))
        .expect("send");
    stream.write_all(b"stats\r\n").expect("send");
    let reply = common::read_until(&mut stream, b"END\r\n", LIMIT);
    let text = String::from_utf8_lossy(&reply).into_owned();
    let stat = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("STAT {name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_string()
    };
    (stat("auth_cmds"), stat("auth_errors"))
}

#[test]
fn attempts_are_counted_as_memcached_counts_them() {
    if !require_memcached("attempts_are_counted_as_memcached_counts_them") {
        return;
    }
    let path = auth_file("stats", USERS);
    let (memcached, tailtrim) = pair(&path);
    let wrong = auth_block("alice", "wrong");
    let unknown = auth_block("mallory", "x");
    let good = auth_block("bob", "hunter2");
    let cases: Vec<(&str, Vec<&[u8]>)> = vec![(
        "attempts",
        vec![
            &wrong,
            &unknown,
            b"get x\r\n",
            b"set a 0 0 3\r\n",
            b"bob\r\n",
            &good,
        ],
    )];
    assert_all_match(&memcached, &tailtrim, &cases);
    let expected = auth_stats(&memcached);
    assert_eq!(expected, ("4".to_string(), "2".to_string()), "memcached");
    assert_eq!(auth_stats(&tailtrim), expected);
}

/// Authenticates `user` on a fresh connection: true on `STORED`.
fn authenticates(server: &Server, user: &str, password: &str) -> bool {
    let mut stream = server.connect();
    stream.write_all(&auth_block(user, password)).expect("send");
    let reply = common::read_until(&mut stream, b"\r\n", LIMIT);
    reply == b"STORED\r\n"
}

/// Polls until `user` authenticates (memcached applies a SIGHUP on its next clock tick).
fn eventually_authenticates(server: &Server, user: &str, password: &str) -> bool {
    let deadline = Instant::now() + LIMIT;
    while Instant::now() < deadline {
        if authenticates(server, user, password) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn hang_up(server: &Server) {
    let pid = libc::pid_t::try_from(server.pid()).expect("pid fits");
    // SAFETY: sends a signal to our own child process.
    let sent = unsafe { libc::kill(pid, libc::SIGHUP) };
    assert_eq!(sent, 0, "SIGHUP {:?}", server.program);
}

#[test]
fn sighup_reloads_the_file() {
    if !require_memcached("sighup_reloads_the_file") {
        return;
    }
    let path = auth_file("reload", "alice:secret\n");
    let (memcached, tailtrim) = pair(&path);
    let dave = auth_block("dave", "newcomer");
    let cases: Vec<(&str, Vec<&[u8]>)> = vec![("before", vec![&dave])];
    assert_all_match(&memcached, &tailtrim, &cases);
    std::fs::write(&path, "alice:secret\ndave:newcomer\n").expect("rewrite the auth file");
    for server in [&memcached, &tailtrim] {
        hang_up(server);
        assert!(
            eventually_authenticates(server, "dave", "newcomer"),
            "{:?} did not take the new user",
            server.program
        );
        assert!(authenticates(server, "alice", "secret"));
    }
    let cases: Vec<(&str, Vec<&[u8]>)> = vec![("after", vec![&dave, b"get k\r\n"])];
    assert_all_match(&memcached, &tailtrim, &cases);
}

/// Runs `program` with `args` until it exits; its status code and stderr.
fn start_failure(program: Program, args: &[&str]) -> (Option<i32>, String) {
    let binary = match program {
        Program::Memcached => common::memcached_path().expect("memcached"),
        Program::Tailtrim => PathBuf::from(env!("CARGO_BIN_EXE_tailtrim")),
    };
    let mut command = Command::new(binary);
    if program == Program::Tailtrim {
        command.arg("serve");
    }
    command.args(args);
    if program == Program::Memcached {
        command.args(["-u", "root"]);
    }
    let output = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn udp_and_a_bad_file_refuse_to_start() {
    if !require_memcached("udp_and_a_bad_file_refuse_to_start") {
        return;
    }
    let good = auth_file("udp", USERS);
    let malformed = auth_file("malformed", "alice:secret\nno colon here\n");
    let port = common::free_port().to_string();
    let cases = [
        (
            vec!["-Y", good.to_str().expect("path"), "-U", &port, "-p", &port],
            "Cannot use UDP with ascii authentication enabled (-U 0 to disable)",
        ),
        (
            vec![
                "-Y",
                malformed.to_str().expect("path"),
                "-U",
                "0",
                "-p",
                &port,
            ],
            "malformed",
        ),
        (
            vec!["-Y", "/nonexistent/auth", "-U", "0", "-p", &port],
            "for reading",
        ),
    ];
    for (args, message) in cases {
        for program in [Program::Memcached, Program::Tailtrim] {
            let (code, stderr) = start_failure(program, &args);
            assert!(
                code.is_some_and(|code| code != 0),
                "{program:?} {args:?} started: {code:?}"
            );
            assert!(
                stderr.contains(message),
                "{program:?} {args:?}: {stderr:?} lacks {message:?}"
            );
        }
    }
}
