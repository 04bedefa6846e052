//! `tailtrim bench` checks where it will write (`--json FILE`, `--plot DIR`) before it sends
//! any load: a path that cannot be written fails at once with a message naming it, and the
//! server is never contacted.

use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Bounds a run that would otherwise hang (an old bench waiting for replies from a listener
/// that never answers); not a performance threshold.
const HANG_BOUND: Duration = Duration::from_secs(60);

/// Runs `tailtrim bench` against `listener` (which never answers) with `args`.
fn bench_against(listener: &TcpListener, args: &[&str]) -> Output {
    let address = listener.local_addr().expect("listener address").to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args([
            "bench",
            "-q",
            "-s",
            &address,
            "--duration",
            "1",
            "--warmup",
            "0",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tailtrim bench");
    let started = Instant::now();
    while child.try_wait().expect("polling tailtrim bench").is_none() {
        if started.elapsed() > HANG_BOUND {
            let _ = child.kill();
            let output = child.wait_with_output().expect("collecting tailtrim bench");
            panic!(
                "tailtrim bench {args:?} did not exit (it is loading the server): {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collecting tailtrim bench")
}

fn listener() -> TcpListener {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback listener");
    listener
        .set_nonblocking(true)
        .expect("making the listener non-blocking");
    listener
}

/// Asserts the bench failed with `expected` in its message and never connected to `listener`.
fn assert_failed_before_load(output: &Output, expected: &str, listener: &TcpListener) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "bench succeeded: {stderr}");
    assert!(
        stderr.contains(expected),
        "the error names the output path ({expected}): {stderr}"
    );
    match listener.accept() {
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok((_, peer)) => panic!("the bench connected to the server ({peer}) before failing"),
        Err(error) => panic!("accept: {error}"),
    }
}

#[test]
fn json_in_a_missing_directory_fails_before_any_load() {
    let listener = listener();
    let json = std::env::temp_dir()
        .join(format!("tailtrim-bench-outputs-{}", std::process::id()))
        .join("missing")
        .join("out.json");
    let json = json.to_string_lossy().to_string();
    let output = bench_against(&listener, &["--json", &json]);
    assert_failed_before_load(
        &output,
        &format!("--json {json}: cannot write there"),
        &listener,
    );
}

#[test]
fn plot_directory_under_a_file_fails_before_any_load() {
    let listener = listener();
    let file = std::env::temp_dir().join(format!(
        "tailtrim-bench-outputs-file-{}",
        std::process::id()
    ));
    std::fs::write(&file, "not a directory").expect("writing the file");
    let plots = file.join("plots").to_string_lossy().to_string();
    let output = bench_against(&listener, &["--no-preload", "--plot", &plots]);
    let _ = std::fs::remove_file(&file);
    assert_failed_before_load(
        &output,
        &format!("--plot {plots}: cannot write plots there"),
        &listener,
    );
}

#[test]
fn cache_aside_json_in_a_missing_directory_fails_before_any_load() {
    let listener = listener();
    let json = std::env::temp_dir()
        .join(format!("tailtrim-bench-outputs-ca-{}", std::process::id()))
        .join("missing")
        .join("ca.json");
    let json = json.to_string_lossy().to_string();
    let output = bench_against(&listener, &["--cache-aside", "--json", &json]);
    assert_failed_before_load(
        &output,
        &format!("--json {json}: cannot write there"),
        &listener,
    );
}
