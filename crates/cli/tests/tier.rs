//! `tailtrim cluster`: the example tier started on free ports, used through its proxy (every
//! latency class, one hot key), its status read (per-class p99s, hot keys, planner, model
//! column), grown by one server, and stopped with no node left running; a supervisor killed
//! outright leaves no node behind either; and the memcached + twemproxy tier of
//! `examples/tier-memcached.toml` starts, serves through real nutcracker, shows in the status
//! and stops.
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

fn example(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(file)
}

/// Whether stock memcached and nutcracker are installed (CI must have them).
fn baseline_installed() -> bool {
    let found = ["memcached", "nutcracker"].iter().all(|program| {
        ["/usr/bin", "/usr/sbin"]
            .iter()
            .any(|dir| Path::new(dir).join(program).is_file())
            || Command::new("sh")
                .args(["-c", &format!("command -v {program}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
    });
    if !found && common::in_ci() {
        panic!("memcached or nutcracker is not installed but CI=true (run scripts/setup-deps.sh)");
    }
    found
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
    fn start(scratch: &Path, tier: &str) -> Up {
        let run_dir = scratch.join("run");
        let stdout = scratch.join("up.out");
        let stderr = scratch.join("up.err");
        let child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .args(["cluster", "up"])
            .arg(example(tier))
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

    /// `cluster status` as a table, sampled over `interval_ms`.
    fn status_table(&self, interval_ms: u64) -> String {
        let interval = interval_ms.to_string();
        let output = self.cluster(&["status", "--interval-ms", &interval]);
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// SIGTERM to `cluster up`: it must end well, and every node it ran with it; the pids.
    fn stop(&mut self) -> Vec<u64> {
        let pids = self.pids();
        let ended = self.signal_and_wait(libc::SIGTERM);
        assert!(
            ended.success(),
            "cluster up ended {ended}: {}",
            self.stderr_text()
        );
        assert_all_gone(&pids);
        pids
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

/// The first proxy's row of a status.
fn proxy_row(status: &serde_json::Value) -> &serde_json::Value {
    nodes(status)
        .iter()
        .find(|node| node["role"] == "proxy")
        .expect("the proxy's row")
}

/// Stores 30 keys `<prefix>-<n>` through the proxy and reads them back in one multiget.
fn store_and_read_back(proxy: &str, prefix: &str) -> Vec<String> {
    let keys: Vec<String> = (0..30).map(|index| format!("{prefix}-{index}")).collect();
    for key in &keys {
        let stored = exchange(
            proxy,
            format!("set {key} 0 0 5\r\nvalue\r\n").as_bytes(),
            b"\r\n",
        );
        assert_eq!(stored, "STORED\r\n", "set {key}");
    }
    let got = exchange(
        proxy,
        format!("get {}\r\n", keys.join(" ")).as_bytes(),
        b"END\r\n",
    );
    assert_eq!(got.matches("VALUE ").count(), keys.len(), "{got}");
    keys
}

/// The status has `count` rows, every node up, and the servers hold `items` items between
/// them.
fn assert_all_up_holding(status: &serde_json::Value, count: usize, items: usize) {
    assert_eq!(nodes(status).len(), count, "{status:#}");
    for node in nodes(status) {
        assert_eq!(node["state"], "up", "{node:#}");
    }
    let held: u64 = nodes(status)
        .iter()
        .filter(|node| node["role"] == "server")
        .map(|node| node["items"].as_u64().expect("items"))
        .sum();
    assert_eq!(held, items as u64, "every key on a server: {status:#}");
}

/// Requests of every latency class through the proxy (a small and a large get, a mouse and an
/// elephant multiget) and one key read over and over while the status samples: the status
/// shows a p99 for each class, that key as the hottest of its server and of the proxy, and
/// the table has the columns.
fn operator_columns(up: &Up, proxy: &str, keys: &[String]) {
    let large = "x".repeat(4000);
    let stored = exchange(
        proxy,
        format!("set tier-large 0 0 {}\r\n{large}\r\n", large.len()).as_bytes(),
        b"\r\n",
    );
    assert_eq!(stored, "STORED\r\n");
    let got = exchange(proxy, b"get tier-large\r\n", b"END\r\n");
    assert!(got.contains(&large), "the large value came back");
    let got = exchange(proxy, b"get tier-key-1\r\n", b"END\r\n");
    assert!(got.starts_with("VALUE tier-key-1 "), "{got}");
    let elephant: Vec<String> = (0..60)
        .map(|index| format!("tier-key-{}", index % 30))
        .collect();
    let got = exchange(
        proxy,
        format!("get {}\r\n", elephant.join(" ")).as_bytes(),
        b"END\r\n",
    );
    assert_eq!(got.matches("VALUE ").count(), 60, "{got}");

    let hot_key = &keys[0];
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = std::sync::Arc::clone(&stop);
        let proxy = proxy.to_string();
        let request = format!("get {hot_key}\r\n");
        std::thread::spawn(move || {
            let mut stream = TcpStream::connect(&proxy).expect("connect to the proxy");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                stream.write_all(request.as_bytes()).expect("write");
                read_until(&mut stream, b"END\r\n", HANG_LIMIT);
            }
        })
    };
    let table = up.status_table(500);
    let output = up.cluster(&["status", "--json", "--interval-ms", "500"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().expect("the reader");
    for column in [
        "PLANNER",
        "P99 US",
        "MODEL P99",
        "SMALL P99",
        "LARGE P99",
        "MICE P99",
        "ELEPH P99",
        "HOT KEY",
    ] {
        assert!(table.contains(column), "{column} missing:\n{table}");
    }
    assert!(table.contains(hot_key.as_str()), "{table}");
    let status: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("status --json is JSON");
    let proxy_row = proxy_row(&status);
    for class in ["small_get", "large_get", "mice", "elephant"] {
        assert!(
            proxy_row["proxy"]["class_p99_us"][class].as_u64().is_some(),
            "no {class} p99: {proxy_row:#}"
        );
    }
    assert_eq!(
        proxy_row["hot_keys"][0]["key"],
        hot_key.as_str(),
        "{proxy_row:#}"
    );
    let owner = proxy_row["hot_keys"][0]["backend"].clone();
    let server_row = nodes(&status)
        .iter()
        .find(|node| node["address"] == owner)
        .expect("the hot key's server has a row");
    assert_eq!(
        server_row["hot_keys"][0]["key"],
        hot_key.as_str(),
        "{server_row:#}"
    );
    assert!(server_row["hot_keys"][0]["per_sec"].as_f64() > Some(0.0));
}

#[test]
fn the_example_tier_serves_grows_and_stops_without_orphans() {
    let scratch = scratch_dir("grow");
    let mut up = Up::start(&scratch, "tier.toml");
    let table = up.stdout_text();
    for pid in up.pids() {
        assert!(
            table.contains(&pid.to_string()),
            "pid {pid} not in:\n{table}"
        );
    }
    assert_eq!(up.pids().len(), 4, "three servers and a proxy");

    let proxy = up.address("proxy");
    let keys = store_and_read_back(&proxy, "tier-key");
    let status = up.status();
    assert_all_up_holding(&status, 4, keys.len());
    let proxy_status = proxy_row(&status);
    assert_eq!(proxy_status["proxy"]["planner"], "batch");
    assert_eq!(
        proxy_status["proxy"]["backends"].as_array().map(Vec::len),
        Some(3)
    );
    // The proxy's model publishes once an interval with traffic has passed: absent until
    // then (never a 0 shown as a prediction).
    let predicted = &proxy_status["proxy"]["predicted_p99_us"];
    assert!(
        predicted.is_null() || predicted.as_u64().is_some_and(|p99| p99 > 0),
        "the model's p99 is absent or positive: {proxy_status:#}"
    );
    operator_columns(&up, &proxy, &keys);

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

    assert_eq!(up.stop().len(), 5);
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
    let mut up = Up::start(&scratch, "tier.toml");
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

#[test]
fn the_memcached_and_twemproxy_tier_starts_serves_and_stops() {
    if !baseline_installed() {
        eprintln!("skipped: memcached or nutcracker is not installed");
        return;
    }
    let scratch = scratch_dir("baseline");
    let mut up = Up::start(&scratch, "tier-memcached.toml");
    let state = up.state();
    let programs: Vec<&str> = state["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter_map(|node| node["program"].as_str())
        .collect();
    assert_eq!(
        programs,
        ["memcached", "memcached", "memcached", "nutcracker"],
        "{state:#}"
    );
    let proxy = up.address("proxy");
    let keys = store_and_read_back(&proxy, "baseline-key");
    let status = up.status();
    assert_all_up_holding(&status, 4, keys.len());
    let proxy_row = proxy_row(&status);
    assert!(
        proxy_row["version"]
            .as_str()
            .is_some_and(|version| version.starts_with("nutcracker-")),
        "{proxy_row:#}"
    );
    assert_eq!(
        proxy_row["proxy"]["backends"].as_array().map(Vec::len),
        Some(3),
        "{proxy_row:#}"
    );
    let table = up.status_table(200);
    assert!(table.contains("3/3 up"), "{table}");

    up.stop();
    let _ = std::fs::remove_dir_all(&scratch);
}
