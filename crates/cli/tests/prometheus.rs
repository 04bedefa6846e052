//! The admin `/metrics` pages of `tailtrim serve` and `tailtrim proxy` against the real
//! Prometheus tools: `promtool check metrics` accepts them with no error and no lint warning,
//! and a real `prometheus` server scrapes both and answers a counter through its query API.
//!
//! ```text
//!   test ──memcached protocol──► tailtrim proxy ──► tailtrim serve
//!        ──GET /metrics────────► both admin listeners ──body──► promtool check metrics
//!   prometheus (scrape_interval 1s) ──► both admin listeners
//!        ◄──GET /api/v1/query, /api/v1/targets── test
//! ```
//!
//! Needs Debian's `prometheus` package (`promtool`, `prometheus`): skipped when missing,
//! a failure under `CI=true` (scripts/setup-deps.sh installs it).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, in_ci, read_until, Program, Server};

/// Bounds every wait of these tests (a hang, not a performance threshold).
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// The path of `name` on PATH (or Debian's /usr/bin), if installed.
fn tool(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&paths)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// `name`'s path; `None` (the test skips) when missing outside CI, a panic under CI.
fn require_tool(test: &str, name: &str) -> Option<PathBuf> {
    let path = tool(name);
    if path.is_none() {
        let message = format!("{test}: {name} is not installed (run scripts/setup-deps.sh)");
        if in_ci() {
            panic!("{message}");
        }
        eprintln!("SKIPPED {message}");
    }
    path
}

/// A child process killed (and reaped) when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `addr` accepts connections.
fn wait_for_listener(addr: SocketAddr, what: &str, child: &mut Child) {
    let deadline = Instant::now() + HANG_LIMIT;
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited early: {status}");
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {addr}");
        std::thread::sleep(Duration::from_millis(30));
    }
}

/// `tailtrim proxy` over `backend` with its admin listener on a free loopback port.
fn start_proxy(backend: &Server, planner: &str) -> (Process, SocketAddr, SocketAddr) {
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["proxy", "--planner", planner, "--listen"])
        .arg(listen.to_string())
        .arg("--admin")
        .arg(admin.to_string())
        .arg("--servers")
        .arg(backend.addr().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tailtrim proxy");
    let mut process = Process(child);
    wait_for_listener(listen, "tailtrim proxy", &mut process.0);
    wait_for_listener(admin, "tailtrim proxy admin", &mut process.0);
    (process, listen, admin)
}

/// `tailtrim serve` with its admin listener on a free port; returns the server and that port.
fn start_server(extra: &[&str]) -> (Server, SocketAddr) {
    let admin_port = free_port();
    let admin_text = admin_port.to_string();
    let mut flags = vec!["-t", "2", "--admin-port", &admin_text];
    flags.extend_from_slice(extra);
    let server = Server::start(Program::Tailtrim, &flags);
    let admin = SocketAddr::from(([127, 0, 0, 1], admin_port));
    let deadline = Instant::now() + HANG_LIMIT;
    while TcpStream::connect_timeout(&admin, Duration::from_millis(200)).is_err() {
        assert!(
            Instant::now() < deadline,
            "admin port {admin} never accepted"
        );
        std::thread::sleep(Duration::from_millis(30));
    }
    (server, admin)
}

/// Stores `keys` keys through `proxy`, reads each once (hits) and `misses` absent keys, and
/// runs one multi-key read of them all.
fn traffic(proxy: SocketAddr, keys: usize, misses: usize) {
    let mut stream = TcpStream::connect(proxy).expect("connect to the proxy");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut exchange = |request: String, end: &[u8]| {
        stream.write_all(request.as_bytes()).expect("send");
        let reply = read_until(&mut stream, end, HANG_LIMIT);
        assert!(reply.ends_with(end), "{request:?} got {reply:?}");
    };
    for key in 0..keys {
        exchange(format!("set prom{key} 0 0 5\r\nvalue\r\n"), b"STORED\r\n");
    }
    for key in 0..keys {
        exchange(format!("get prom{key}\r\n"), b"END\r\n");
    }
    for key in 0..misses {
        exchange(format!("get absent{key}\r\n"), b"END\r\n");
    }
    let all: Vec<String> = (0..keys).map(|key| format!("prom{key}")).collect();
    exchange(format!("get {}\r\n", all.join(" ")), b"END\r\n");
}

/// A plain HTTP/1.1 request that asks the server to close the connection after answering;
/// returns the status line, the headers and the body.
fn http(addr: SocketAddr, method: &str, path: &str) -> (String, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the admin listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read response");
    let response = String::from_utf8(response).expect("utf-8 response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {response:?}"));
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

/// `promtool check metrics` on `page`: its exit status and everything it printed.
fn promtool_check(promtool: &Path, page: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    child
        .stdin
        .take()
        .expect("promtool stdin")
        .write_all(page.as_bytes())
        .expect("write to promtool");
    let output = child.wait_with_output().expect("promtool output");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), printed)
}

/// The metrics page at `admin`, checked by promtool: no error, no lint warning.
fn assert_promtool_accepts(promtool: &Path, admin: SocketAddr, what: &str) -> String {
    let (status, headers, body) = http(admin, "GET", "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{what}: {headers}");
    assert!(
        headers.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{what}: {headers}"
    );
    let (passed, printed) = promtool_check(promtool, &body);
    assert!(
        passed && printed.trim().is_empty(),
        "{what}: promtool check metrics failed:\n{printed}\n--- page ---\n{body}"
    );
    body
}

/// The value of the sample `name` (no labels) on a metrics page.
fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
}

#[test]
fn promtool_accepts_the_server_and_proxy_metrics_after_traffic() {
    let Some(promtool) = require_tool("promtool_accepts", "promtool") else {
        return;
    };
    for dispatch in ["pinned", "size-aware"] {
        let (server, server_admin) = start_server(&["--dispatch", dispatch]);
        for planner in ["batch", "chisel", "tailx"] {
            let (_proxy, listen, proxy_admin) = start_proxy(&server, planner);
            traffic(listen, 20, 5);
            let page = assert_promtool_accepts(&promtool, proxy_admin, planner);
            assert!(
                page.contains("# TYPE tailtrim_backend_requests_total counter\n"),
                "{page}"
            );
            assert!(
                page.contains("# TYPE tailtrim_pool_latency_seconds summary\n"),
                "{page}"
            );
        }
        let page = assert_promtool_accepts(&promtool, server_admin, dispatch);
        // 3 proxies × 20 hits from single-key reads and 20 from the multi-key read.
        assert_eq!(
            sample(&page, "tailtrim_server_get_hits_total"),
            Some(120.0),
            "{page}"
        );
        assert_eq!(
            sample(&page, "tailtrim_server_get_misses_total"),
            Some(15.0),
            "{page}"
        );
        assert!(
            page.contains("# TYPE tailtrim_dispatch_request_latency_seconds summary\n"),
            "{page}"
        );
    }
}

#[test]
fn admin_listeners_answer_only_metrics_with_get_or_head() {
    let (server, server_admin) = start_server(&[]);
    let (_proxy, _listen, proxy_admin) = start_proxy(&server, "batch");
    for (admin, what) in [(server_admin, "server"), (proxy_admin, "proxy")] {
        let (status, headers, body) = http(admin, "HEAD", "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK", "{what}");
        assert!(headers.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"));
        assert!(body.is_empty(), "{what}: HEAD got a body: {body}");
        for path in ["/", "/metrics/", "/stats", "/favicon.ico"] {
            let (status, _, _) = http(admin, "GET", path);
            assert!(
                status.starts_with("HTTP/1.1 404 "),
                "{what} {path}: {status}"
            );
        }
        for method in ["POST", "PUT", "DELETE"] {
            let (status, headers, _) = http(admin, method, "/metrics");
            assert!(
                status.starts_with("HTTP/1.1 405 "),
                "{what} {method}: {status}"
            );
            assert!(headers.contains("Allow: GET, HEAD"), "{what}: {headers}");
        }
        let mut garbage = TcpStream::connect(admin).expect("connect");
        garbage
            .write_all(b"stats\r\n\r\n")
            .expect("send a non-HTTP line");
        let reply = read_until(&mut garbage, b"\n", HANG_LIMIT);
        assert!(
            reply.starts_with(b"HTTP/1.1 400 "),
            "{what}: {}",
            String::from_utf8_lossy(&reply)
        );
    }
}

/// The local addresses of the listening TCP sockets on `port` (from /proc/net/tcp).
fn listening_addresses(port: u16) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let port_hex = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local = *fields.get(1)?;
            let listening = fields.get(3) == Some(&"0A");
            (listening && local.ends_with(&port_hex)).then(|| local.to_string())
        })
        .collect()
}

#[test]
fn the_server_admin_listener_binds_loopback_unless_told_otherwise() {
    let run = |admin_listen: Option<&str>| -> (Vec<String>, String) {
        let port = free_port();
        let admin_port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_tailtrim"));
        command
            .args(["serve", "-U", "0", "-l", "0.0.0.0", "-p"])
            .arg(port.to_string())
            .arg("--admin-port")
            .arg(admin_port.to_string());
        if let Some(address) = admin_listen {
            command.args(["--admin-listen", address]);
        }
        let child = command
            .arg("-v")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tailtrim serve");
        let mut process = Process(child);
        // With -v the server says "listening on" once start-up (admin bind included) is done.
        let pipe = process.0.stderr.take().expect("stderr pipe");
        let mut stderr = String::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(pipe)) {
            let Ok(line) = line else { break };
            stderr.push_str(&line);
            stderr.push('\n');
            if line.contains("listening on") {
                break;
            }
        }
        let addresses = listening_addresses(admin_port);
        (addresses, stderr)
    };
    // 127.0.0.1 in /proc/net/tcp: 0100007F.
    let (addresses, stderr) = run(None);
    assert_eq!(addresses.len(), 1, "{addresses:?}");
    assert!(addresses[0].starts_with("0100007F:"), "{addresses:?}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let (addresses, stderr) = run(Some("0.0.0.0"));
    assert!(addresses[0].starts_with("00000000:"), "{addresses:?}");
    assert!(
        stderr.contains("warning: admin listener on 0.0.0.0:"),
        "{stderr}"
    );
}

/// A Prometheus server scraping `targets` (job name, address) every second, storing in `dir`.
fn start_prometheus(
    binary: &Path,
    dir: &Path,
    targets: &[(&str, SocketAddr)],
) -> (Process, SocketAddr) {
    let mut config =
        String::from("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n");
    for (job, address) in targets {
        config.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: ['{address}']\n"
        ));
    }
    let config_path = dir.join("prometheus.yml");
    std::fs::write(&config_path, config).expect("write prometheus.yml");
    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let child = Command::new(binary)
        .arg(format!("--config.file={}", config_path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={listen}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let mut process = Process(child);
    wait_for_listener(listen, "prometheus", &mut process.0);
    (process, listen)
}

/// `GET path` on Prometheus' API as JSON (`None` until it answers 200).
fn api(prometheus: SocketAddr, path: &str) -> Option<serde_json::Value> {
    let (status, _, body) = http(prometheus, "GET", path);
    if !status.contains(" 200 ") {
        return None;
    }
    serde_json::from_str(&body).ok()
}

/// The value of an instant query's single series of job `job`, if Prometheus has one.
fn query_value(prometheus: SocketAddr, query: &str, job: &str) -> Option<f64> {
    let answer = api(prometheus, &format!("/api/v1/query?query={query}"))?;
    answer["data"]["result"]
        .as_array()?
        .iter()
        .find(|series| series["metric"]["job"] == job)?["value"][1]
        .as_str()?
        .parse()
        .ok()
}

/// Removes a scratch directory when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_real_prometheus_scrapes_the_server_and_the_proxy() {
    let Some(binary) = require_tool("a_real_prometheus", "prometheus") else {
        return;
    };
    let scratch =
        Scratch(std::env::temp_dir().join(format!("tailtrim-prometheus-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&scratch.0);
    std::fs::create_dir_all(&scratch.0).expect("create the scratch directory");
    let (server, server_admin) = start_server(&[]);
    let (_proxy, listen, proxy_admin) = start_proxy(&server, "batch");
    traffic(listen, 12, 4);
    let (_prometheus, prometheus) = start_prometheus(
        &binary,
        &scratch.0,
        &[
            ("tailtrim_server", server_admin),
            ("tailtrim_proxy", proxy_admin),
        ],
    );
    // 12 single-key hits and 12 from the multi-key read; 12 + 4 + 1 reads at the pool.
    let expected = [
        ("tailtrim_server_get_hits_total", "tailtrim_server", 24.0),
        ("tailtrim_server_get_misses_total", "tailtrim_server", 4.0),
        ("tailtrim_pool_writes_total", "tailtrim_proxy", 12.0),
        ("up", "tailtrim_server", 1.0),
        ("up", "tailtrim_proxy", 1.0),
    ];
    let deadline = Instant::now() + HANG_LIMIT;
    loop {
        let seen: Vec<Option<f64>> = expected
            .iter()
            .map(|(query, job, _)| query_value(prometheus, query, job))
            .collect();
        if expected
            .iter()
            .zip(&seen)
            .all(|((_, _, want), got)| *got == Some(*want))
        {
            break;
        }
        if Instant::now() > deadline {
            let targets = api(prometheus, "/api/v1/targets");
            panic!("Prometheus never saw {expected:?}: saw {seen:?}; targets: {targets:#?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // Both scrapes parsed without error (a page Prometheus half-reads still counts as up).
    let targets = api(prometheus, "/api/v1/targets").expect("targets");
    let active = targets["data"]["activeTargets"]
        .as_array()
        .expect("active targets");
    assert_eq!(active.len(), 2, "{targets:#?}");
    for target in active {
        assert_eq!(target["health"], "up", "{target:#?}");
        assert_eq!(target["lastError"], "", "{target:#?}");
    }
    drop(server);
}
