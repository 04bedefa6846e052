//! The harness's process control against the real programs: Debian's memcached and
//! nutcracker. Ready means answering `version`, not only accepting; a dead or silent process
//! is reported with its command; drop stops the process. Under `CI=true` a missing program is
//! a failure (scripts/setup-deps.sh installs both), elsewhere a skip.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use tailtrim_lab::process::{
    fetch_stats, program_path, program_version, send_command, Launch, Process, ServerShape,
};

fn require(program: &str) -> bool {
    if program_path(program).is_some() {
        return true;
    }
    assert!(
        !matches!(std::env::var("CI").as_deref(), Ok("true") | Ok("1")),
        "{program} is not installed but CI=true (run scripts/setup-deps.sh)"
    );
    eprintln!("SKIPPED: {program} is not installed");
    false
}

const SHAPE: ServerShape = ServerShape {
    threads: 1,
    memory_mb: 16,
};

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            // State is the field after the parenthesised command; a zombie counts as gone.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}

fn exchange(address: &str, request: &[u8], end: &[u8]) -> Vec<u8> {
    send_command(address, request, end).unwrap_or_else(|error| panic!("{address}: {error}"))
}

#[test]
fn memcached_and_nutcracker_start_answer_and_stop() {
    if !require("memcached") || !require("nutcracker") {
        return;
    }
    let launch = Launch::memcached("backend", &SHAPE, &[]).expect("launch");
    let memcached = Process::start(launch).expect("memcached starts");
    assert!(memcached.command_line().contains("-U 0"));
    let pid = memcached.pid();
    assert!(alive(pid));
    let backend = memcached.address();
    assert_eq!(
        exchange(&backend, b"set lab 0 0 2\r\nok\r\n", b"\r\n"),
        b"STORED\r\n"
    );

    let proxy = Process::start(
        Launch::nutcracker("twemproxy", std::slice::from_ref(&backend), &[]).expect("launch"),
    )
    .expect("nutcracker starts");
    let config = proxy
        .command_line()
        .split_whitespace()
        .nth(2)
        .map(PathBuf::from)
        .expect("a config path");
    assert!(config.is_file(), "the YAML exists while nutcracker runs");
    assert_eq!(
        exchange(&proxy.address(), b"get lab\r\n", b"END\r\n"),
        b"VALUE lab 0 2\r\nok\r\nEND\r\n",
        "nutcracker routes to the memcached it was given"
    );
    assert!(program_version("nutcracker").contains("nutcracker"));
    assert!(program_version("memcached").starts_with("memcached"));
    let stats = fetch_stats(&backend, None).expect("stats");
    assert_eq!(stats.get("cmd_set").map(String::as_str), Some("1"));
    assert!(fetch_stats(&backend, Some("nonsense"))
        .expect("answers")
        .is_empty());

    drop(proxy);
    assert!(!config.exists(), "the YAML is removed at the stop");
    memcached.stop().expect("memcached was alive until stopped");
    assert!(!alive(pid), "memcached {pid} still runs after stop");
}

#[test]
fn a_process_that_exits_is_reported_with_its_command_and_log() {
    if !require("memcached") {
        return;
    }
    let launch =
        Launch::memcached("broken", &SHAPE, &["--no-such-flag".to_string()]).expect("launch");
    let error = Process::start(launch)
        .expect_err("memcached rejects the flag")
        .to_string();
    assert!(error.contains("broken exited"), "{error}");
    assert!(error.contains("--no-such-flag"), "{error}");
}

#[test]
fn accepting_without_answering_version_is_not_ready() {
    if !require("sleep") {
        return;
    }
    // A listener that accepts and reads but never answers: a port that is open is not enough.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    // The thread is left running: it ends with the test process.
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
            let _ = stream.read(&mut [0u8; 64]);
            let _ = stream.flush();
            held.push(stream);
        }
    });
    let launch = Launch {
        name: "silent".into(),
        binary: program_path("sleep").expect("sleep"),
        arguments: vec!["30".into()],
        address,
        admin: None,
        config: None,
        ready_timeout: Duration::from_millis(1_200),
    };
    let error = Process::start(launch).expect_err("never ready").to_string();
    assert!(error.contains("silent was not ready"), "{error}");
    assert!(error.contains("version reply"), "{error}");
}
