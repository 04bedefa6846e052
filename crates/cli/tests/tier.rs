//! `tailtrim cluster`: the example tier started on free ports, used through its proxy, grown
//! by one server, and stopped with no node left running; and a supervisor killed outright
//! leaves no node behind either.
//!
//! ```text
//!   test ──spawn──> tailtrim cluster up examples/tier.toml --base-port 0 --run-dir D
//!                     ├─ tailtrim serve × 3 ─┐
//!                     └─ tailtrim proxy ─────┘  D/tier.json: addresses, pids
//!        ──TCP (set/get)──> the proxy
//!        ──spawn──> tailtrim cluster status --run-dir D --json
//!        ──spawn──> tailtrim cluster add 127.0.0.1:P --start --run-dir D
//!        ──SIGTERM / SIGKILL──> cluster up;  every pid of tier.json must be gone
//! ```

mod common;

use std::fs::File;
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, read_until};

/// Bounds every wait of these tests (a hang, not a performance threshold).
const HANG_LIMIT: Duration = Duration::from_secs(60);

fn example_tier() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tier.toml")
}

/// A fresh directory under the system's temporary directory.
fn scratch_dir(label: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("tailtrim-tier-test-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// Whether a process with this pid exists and is not a zombie.
fn alive(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("X");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// A running `tailtrim cluster up`; killed (with its process group's nodes) if the test
/// fails before stopping it.
struct Up {
    child: Child,
    run_dir: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Up {
    fn start(scratch: &Path) -> Up {
        let run_dir = scratch.join("run");
        let stdout = scratch.join("up.out");
        let stderr = scratch.join("up.err");
        let child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .args(["cluster", "up"])
            .arg(example_tier())
            .args(["--base-port", "0", "--run-dir"])
            .arg(&run_dir)
            .stdin(Stdio::null())
            .stdout(File::create(&stdout).expect("stdout file"))
            .stderr(File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start tailtrim cluster up");
        let mut up = Up {
            child,
            run_dir,
            stdout,
            stderr,
        };
        up.wait_until_up();
        up
    }

    /// Waits until `cluster up` printed its table (every node ready).
    fn wait_until_up(&mut self) {
        let deadline = Instant::now() + HANG_LIMIT;
        while !self.stdout_text().contains("stops every node") {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "cluster up exited early ({status}):\n{}\n{}",
                    self.stdout_text(),
                    self.stderr_text()
                );
            }
            assert!(Instant::now() < deadline, "the tier never came up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stdout_text(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The state file.
    fn state(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.run_dir.join("tier.json")).expect("tier.json");
        serde_json::from_str(&text).expect("tier.json is JSON")
    }

    /// Every node's pid in the state file.
    fn pids(&self) -> Vec<u64> {
        self.state()["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|node| node["pid"].as_u64().expect("pid"))
            .collect()
    }

    /// The address of the node of this role (the first one).
    fn address(&self, role: &str) -> String {
        self.state()["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .find(|node| node["role"] == role)
            .and_then(|node| node["address"].as_str())
            .expect("a node of the role")
            .to_string()
    }

    /// `tailtrim cluster ARGS --run-dir <run dir>`.
    fn cluster(&self, arguments: &[&str]) -> Output {
        let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .arg("cluster")
            .args(arguments)
            .arg("--run-dir")
            .arg(&self.run_dir)
            .output()
            .expect("run tailtrim cluster");
        assert!(
            output.status.success(),
            "cluster {arguments:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    /// `cluster status --json`.
    fn status(&self) -> serde_json::Value {
        let output = self.cluster(&["status", "--json", "--interval-ms", "200"]);
        serde_json::from_slice(&output.stdout).expect("status --json is JSON")
    }

    /// Sends `signal` to `cluster up` and waits for it to exit.
    fn signal_and_wait(&mut self, signal: libc::c_int) -> std::process::ExitStatus {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let deadline = Instant::now() + HANG_LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "cluster up did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits until none of `pids` runs; panics naming the survivors after the hang limit.
fn assert_all_gone(pids: &[u64]) {
    let deadline = Instant::now() + HANG_LIMIT;
    loop {
        let survivors: Vec<u64> = pids.iter().copied().filter(|&pid| alive(pid)).collect();
        if survivors.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            for &pid in &survivors {
                // SAFETY: kill(2) on a leftover node; the test fails anyway.
                unsafe {
                    libc::kill(libc::pid_t::try_from(pid).unwrap_or(0), libc::SIGKILL);
                }
            }
            panic!("nodes outlived cluster up: {survivors:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One request to `address`, read until `terminator`.
fn exchange(address: &str, request: &[u8], terminator: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).expect("connect to the proxy");
    stream.write_all(request).expect("write");
    String::from_utf8_lossy(&read_until(&mut stream, terminator, HANG_LIMIT)).into_owned()
}

fn nodes(status: &serde_json::Value) -> &Vec<serde_json::Value> {
    status["nodes"].as_array().expect("status nodes")
}

#[test]
fn the_example_tier_serves_grows_and_stops_without_orphans() {
    let scratch = scratch_dir("grow");
    let mut up = Up::start(&scratch);
    let table = up.stdout_text();
    for pid in up.pids() {
        assert!(
            table.contains(&pid.to_string()),
            "pid {pid} not in:\n{table}"
        );
    }
    assert_eq!(up.pids().len(), 4, "three servers and a proxy");

    let proxy = up.address("proxy");
    let keys: Vec<String> = (0..30).map(|index| format!("tier-key-{index}")).collect();
    for key in &keys {
        let stored = exchange(
            &proxy,
            format!("set {key} 0 0 5\r\nvalue\r\n").as_bytes(),
            b"\r\n",
        );
        assert_eq!(stored, "STORED\r\n", "set {key}");
    }
    let got = exchange(
        &proxy,
        format!("get {}\r\n", keys.join(" ")).as_bytes(),
        b"END\r\n",
    );
    assert_eq!(got.matches("VALUE ").count(), keys.len(), "{got}");

    let status = up.status();
    assert_eq!(nodes(&status).len(), 4, "{status:#}");
    for node in nodes(&status) {
        assert_eq!(node["state"], "up", "{node:#}");
    }
    let servers_items: u64 = nodes(&status)
        .iter()
        .filter(|node| node["role"] == "server")
        .map(|node| node["items"].as_u64().expect("items"))
        .sum();
    assert_eq!(servers_items, keys.len() as u64, "{status:#}");
    let proxy_status = nodes(&status)
        .iter()
        .find(|node| node["role"] == "proxy")
        .expect("the proxy's row");
    assert_eq!(proxy_status["proxy"]["planner"], "batch");
    assert_eq!(
        proxy_status["proxy"]["backends"].as_array().map(Vec::len),
        Some(3)
    );

    let added = format!("127.0.0.1:{}", free_port());
    let output = up.cluster(&["add", &added, "--start"]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains(&format!("added {added}")), "{said}");

    let status = up.status();
    assert_eq!(nodes(&status).len(), 5, "{status:#}");
    let new_node = nodes(&status)
        .iter()
        .find(|node| node["address"] == added.as_str())
        .expect("the added server has a row");
    assert_eq!(new_node["state"], "up", "{new_node:#}");
    assert!(new_node["pid"].as_u64().is_some(), "{new_node:#}");
    let backends = nodes(&status)
        .iter()
        .find(|node| node["role"] == "proxy")
        .map(|node| node["proxy"]["backends"].clone())
        .expect("the proxy's row");
    let backends = backends.as_array().expect("backends");
    assert_eq!(backends.len(), 4, "{backends:?}");
    assert!(
        backends
            .iter()
            .any(|backend| backend["address"] == added.as_str() && backend["up"] == true),
        "{backends:?}"
    );
    let got = exchange(
        &proxy,
        format!("get {}\r\n", keys.join(" ")).as_bytes(),
        b"END\r\n",
    );
    assert_eq!(
        got.matches("VALUE ").count(),
        keys.len(),
        "keys lost across the warmed-up join: {got}"
    );

    let pids = up.pids();
    assert_eq!(pids.len(), 5);
    let status = up.signal_and_wait(libc::SIGTERM);
    assert!(
        status.success(),
        "cluster up ended {status}: {}",
        up.stderr_text()
    );
    assert_all_gone(&pids);
    assert_eq!(up.state()["running"], false);
    assert!(
        up.stdout_text().contains("stopped (5 nodes)"),
        "{}",
        up.stdout_text()
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn a_dead_node_is_reported_and_a_killed_supervisor_leaves_no_node_behind() {
    let scratch = scratch_dir("kill");
    let mut up = Up::start(&scratch);
    let victim = up.state()["nodes"][1].clone();
    let victim_pid = victim["pid"].as_u64().expect("pid");
    // SAFETY: kill(2) on a node of the tier this test started.
    unsafe {
        libc::kill(
            libc::pid_t::try_from(victim_pid).expect("pid"),
            libc::SIGKILL,
        );
    }
    let deadline = Instant::now() + HANG_LIMIT;
    while up.state()["nodes"][1]["exited"].is_null() {
        assert!(
            Instant::now() < deadline,
            "the dead node was never recorded"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = up.stderr_text();
    assert!(
        report.contains(&format!("(pid {victim_pid})")) && report.contains("signal: 9"),
        "{report}"
    );
    let status = up.status();
    let row = nodes(&status)
        .iter()
        .find(|node| node["pid"] == victim_pid)
        .expect("the dead node keeps its row");
    assert!(
        row["state"]
            .as_str()
            .unwrap_or_default()
            .starts_with("exited"),
        "{row:#}"
    );

    let pids = up.pids();
    up.signal_and_wait(libc::SIGKILL);
    assert_all_gone(&pids);
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn a_tier_file_with_its_own_pool_members_is_refused() {
    let scratch = scratch_dir("refused");
    let tier = scratch.join("tier.toml");
    std::fs::write(&tier, "[pool]\nservers = [\"127.0.0.1:11211\"]\n").expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["cluster", "up"])
        .arg(&tier)
        .arg("--run-dir")
        .arg(scratch.join("run"))
        .output()
        .expect("run cluster up");
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("[pool] servers comes from the [[servers]]"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}
