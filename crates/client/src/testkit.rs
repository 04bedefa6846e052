//! Test helpers (feature `testkit`): start and stop memcached and nutcracker processes.
//!
//! A missing binary makes [`require_binary`] print a SKIP line and return false, unless the
//! environment has `CI=true`, where it panics: CI installs both from Debian before the tests.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (SIGKILL) and reaped on drop.
pub struct ChildGuard {
    child: Option<Child>,
    /// The TCP port it listens on.
    pub port: u16,
}

impl ChildGuard {
    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the process now.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends a signal (e.g. "STOP", "CONT") with `kill(1)`.
    pub fn signal(&self, name: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .arg(format!("-{name}"))
                .arg(pid.to_string())
                .status();
            if name == "STOP" {
                // kill(2) only queues the stop: a thread running on another CPU may still
                // answer a request. Wait until every thread is stopped (state T), up to 2 s.
                wait_until_stopped(pid);
            }
        }
    }
}

/// Waits (at most 2 s) until every thread of `pid` is in state `T` (stopped).
fn wait_until_stopped(pid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return;
        };
        let all_stopped = tasks.flatten().all(|task| {
            std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                // The state follows the parenthesised command name.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .is_some_and(|state| state == "T" || state == "t")
            })
        });
        if all_stopped {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // A stopped process must be continued to die promptly on some kernels' accounting.
        self.signal("CONT");
        self.kill();
    }
}

/// True if `name` is on PATH. Otherwise prints a SKIP line and returns false, or panics when
/// `CI=true`.
pub fn require_binary(name: &str) -> bool {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .stdout(Stdio::null())
        .status()
        .map(|status| status.success())
        .unwrap_or(false);
    if !found {
        if std::env::var("CI")
            .map(|value| value == "true")
            .unwrap_or(false)
        {
            panic!("{name} is not installed but CI=true: the test script must install it");
        }
        println!(
            "SKIP: {name} is not installed; install it (apt-get install {name}) to run this test"
        );
    }
    found
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .unwrap_or(0)
}

/// Waits until `127.0.0.1:port` accepts connections (panics after 10 s).
pub fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "port {port} never opened");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|output| output.stdout.trim_ascii() == b"0")
        .unwrap_or(false)
}

/// Starts memcached on `port` (0 = pick a free one).
pub fn start_memcached_on(port: u16) -> ChildGuard {
    let port = if port == 0 { free_port() } else { port };
    let mut command = Command::new("memcached");
    command.args([
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        "0",
        "-m",
        "64",
        "-t",
        "1",
    ]);
    if running_as_root() {
        command.args(["-u", "root"]);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| panic!("spawn memcached: {error}"));
    let guard = ChildGuard {
        child: Some(child),
        port,
    };
    wait_listening(port);
    guard
}

/// Starts memcached on a free port.
pub fn start_memcached() -> ChildGuard {
    start_memcached_on(0)
}

/// Starts nutcracker with one pool listening on a free port over `servers`
/// (`host:port:weight` lines), with the given `hash` and `distribution`.
pub fn start_nutcracker(servers: &[String], hash: &str, distribution: &str) -> ChildGuard {
    let port = free_port();
    let stats_port = free_port();
    let dir = std::env::temp_dir().join(format!("tailtrim-nc-{}-{port}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let mut yaml = format!(
        "pool:\n  listen: 127.0.0.1:{port}\n  hash: {hash}\n  distribution: {distribution}\n  timeout: 2000\n  auto_eject_hosts: false\n  servers:\n"
    );
    for server in servers {
        yaml.push_str(&format!("   - {server}\n"));
    }
    let config = dir.join("nutcracker.yml");
    let _ = std::fs::write(&config, yaml);
    let child = Command::new("nutcracker")
        .arg("-c")
        .arg(&config)
        .args(["-s", &stats_port.to_string(), "-a", "127.0.0.1"])
        .arg("-o")
        .arg(dir.join("nutcracker.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| panic!("spawn nutcracker: {error}"));
    let guard = ChildGuard {
        child: Some(child),
        port,
    };
    wait_listening(port);
    guard
}
