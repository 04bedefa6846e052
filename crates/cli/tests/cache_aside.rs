//! `tailtrim bench --cache-aside` against real processes: two `tailtrim serve` backends behind
//! `tailtrim proxy`, a third joining through the admin API during the measured run; and the
//! checker catching a value that is not the database's.
//!
//! ```text
//!   bench --cache-aside ──get/add/set──► proxy ──► serve A, serve B (+ serve C at 1 s)
//!         └── --at 1s:add=C ──HTTP POST /pool/servers──► proxy admin
//! ```

mod common;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, Program, Server};

/// `tailtrim proxy` child, killed on drop.
struct Proxy {
    child: Child,
    port: u16,
    admin: u16,
}

impl Proxy {
    fn start(servers: &[&Server]) -> Proxy {
        let (port, admin) = (free_port(), free_port());
        let list: Vec<String> = servers
            .iter()
            .map(|server| server.addr().to_string())
            .collect();
        let child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .args(["proxy", "-l", &format!("127.0.0.1:{port}")])
            .args(["--admin", &format!("127.0.0.1:{admin}")])
            .args(["-s", &list.join(",")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|error| panic!("starting the proxy: {error}"));
        let mut proxy = Proxy { child, port, admin };
        let deadline = Instant::now() + Duration::from_secs(15);
        for port in [port, admin] {
            let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
                if let Ok(Some(status)) = proxy.child.try_wait() {
                    panic!("the proxy exited early: {status}");
                }
                assert!(Instant::now() < deadline, "the proxy did not listen");
                std::thread::sleep(Duration::from_millis(30));
            }
        }
        proxy
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tailtrim-test-{name}-{}", std::process::id()))
}

fn bench(server: &str, extra: &[&str], json: &PathBuf) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["bench", "-q", "--cache-aside", "--workload", "uniform"])
        .args(["-s", server, "--json"])
        .arg(json)
        .args(extra)
        .output()
        .unwrap_or_else(|error| panic!("running tailtrim bench: {error}"))
}

fn read_json(path: &PathBuf) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("parsing: {error}"))
}

fn count(json: &serde_json::Value, name: &str) -> u64 {
    json[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} missing in {json}"))
}

#[test]
fn join_during_a_cache_aside_run_is_measured_and_every_value_checks() {
    let flags = ["-m", "8", "-t", "1"];
    let a = Server::start(Program::Tailtrim, &flags);
    let b = Server::start(Program::Tailtrim, &flags);
    let c = Server::start(Program::Tailtrim, &flags);
    let proxy = Proxy::start(&[&a, &b]);
    let json = scratch("cache-aside-join.json");
    let event = format!("1s:add={},warmup=preemptive+fallback", c.addr());
    let output = bench(
        &format!("127.0.0.1:{}", proxy.port),
        &[
            "--keys",
            "2000",
            "--popularity",
            "zipf",
            "--value-size",
            "500",
            "--set-share",
            "0.05",
            "--db-latency",
            "2ms",
            "--rate",
            "800",
            "--duration",
            "3",
            "--warmup",
            "0.5",
            "--workers",
            "16",
            "--window-requests",
            "200",
            "--prefill",
            "--admin",
            &format!("127.0.0.1:{}", proxy.admin),
            "--at",
            &event,
        ],
        &json,
    );
    assert!(
        output.status.success(),
        "bench failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report = read_json(&json);
    let _ = std::fs::remove_file(&json);
    assert_eq!(count(&report, "wrong_values"), 0);
    assert_eq!(count(&report, "stale_values"), 0);
    assert_eq!(count(&report, "errors"), 0);
    assert_eq!(count(&report, "prefilled"), 2_000);
    let requests = count(&report, "requests");
    assert!(requests > 1_000, "{requests} requests");
    assert!(count(&report, "hits") > 0 && count(&report, "writes") > 0);
    let event = &report["events"][0];
    assert_eq!(event["status"], 200, "{event}");
    assert!(event["answer"]
        .as_str()
        .is_some_and(|answer| answer.contains(&c.addr().to_string())));
    let windows = report["per_request"].as_array().map_or(0, Vec::len);
    assert_eq!(windows as u64, requests.div_ceil(200));
    assert_eq!(report["per_second"].as_array().map_or(0, Vec::len), 3);
    // The joined server now serves keys.
    let stats = c.stats();
    let items: u64 = stats
        .get("curr_items")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    assert!(items > 0, "the joined server holds no items");
}

#[test]
fn a_value_that_is_not_the_databases_is_counted_wrong_and_fails_the_run() {
    let server = Server::start(Program::Tailtrim, &["-m", "8", "-t", "1"]);
    // Key 3 of the `uniform` workload (32-byte keys "t0:3:kkk…") holds a foreign value.
    let key = format!("{:k<32}", "t0:3:");
    let request = format!("set {key} 0 0 5\r\nhello\r\n");
    assert_eq!(server.request(request.as_bytes(), b"\r\n"), b"STORED\r\n");
    let json = scratch("cache-aside-wrong.json");
    let output = bench(
        &server.addr().to_string(),
        &[
            "--keys",
            "8",
            "--set-share",
            "0",
            "--db-latency",
            "1ms",
            "--rate",
            "400",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--workers",
            "4",
        ],
        &json,
    );
    assert!(!output.status.success(), "a wrong value must fail the run");
    let report = read_json(&json);
    let _ = std::fs::remove_file(&json);
    assert!(count(&report, "wrong_values") > 0, "{report}");
    assert_eq!(count(&report, "errors"), 0);
}
