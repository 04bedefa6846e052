//! Rein's classes through the real `tailtrim proxy` binary over three kinds of backend: a
//! `tailtrim serve` that queues by class (late binding: `priorities strict`), one that serves in
//! arrival order (pinned: `priorities fifo`) and Debian's memcached, which rejects the class
//! flag. The proxy must send `mg … p<class>` to the first only (its per-class counters move),
//! keep its own gate for the others, say so per backend in `stats`, and return the stored
//! values from all three.
//!
//! ```text
//!   client ──set / get k0..k89 (rein-sbf)──► proxy ──► serve --dispatch late-binding  (backend-drr)
//!                                                  ├──► serve (pinned)                 (proxy-strict)
//!                                                  └──► memcached                      (proxy-strict)
//! ```

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, read_until, require_memcached, Program, Server};

/// A `tailtrim proxy` child process; killed on drop.
struct Proxy {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A proxy over `backends` running `planner` (its name, then any further flags).
fn start_proxy(backends: &[&Server], planner: &str) -> Proxy {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let servers: Vec<String> = backends
        .iter()
        .map(|b| format!("127.0.0.1:{}:1", b.port))
        .collect();
    let child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["proxy", "-l", &addr.to_string(), "--admin", "off"])
        .args(["-s", &servers.join(","), "-t", "1", "--planner"])
        .args(planner.split_whitespace())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tailtrim proxy");
    let mut proxy = Proxy { child, addr };
    let deadline = Instant::now() + Duration::from_secs(15);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(status)) = proxy.child.try_wait() {
            panic!("tailtrim proxy exited early: {status}");
        }
        assert!(Instant::now() < deadline, "proxy did not listen in 15 s");
        std::thread::sleep(Duration::from_millis(30));
    }
    proxy
}

fn exchange(stream: &mut TcpStream, request: &[u8], end: &[u8]) -> String {
    stream.write_all(request).expect("send");
    String::from_utf8(read_until(stream, end, Duration::from_secs(10))).expect("utf-8")
}

fn stats_of(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn classed_requests(server: &Server) -> u64 {
    let stats = server.stats();
    (0..5)
        .map(|c| {
            stats
                .get(&format!("priority_class{c}_requests"))
                .map_or(0, |v| v.parse::<u64>().expect("number"))
        })
        .sum()
}

#[test]
fn the_proxy_sends_classes_only_to_backends_that_serve_them() {
    if !require_memcached("the_proxy_sends_classes_only_to_backends_that_serve_them") {
        return;
    }
    let drr = Server::start(
        Program::Tailtrim,
        &["-t", "1", "--dispatch", "late-binding"],
    );
    let fifo = Server::start(Program::Tailtrim, &["-t", "1"]);
    let memcached = Server::start(Program::Memcached, &["-t", "1"]);
    let proxy = start_proxy(&[&drr, &fifo, &memcached], "rein-sbf");
    let mut client = TcpStream::connect(proxy.addr).expect("connect");
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let keys: Vec<String> = (0..90).map(|i| format!("k{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let value = format!("value-{i}");
        let request = format!("set {key} {i} 0 {}\r\n{value}\r\n", value.len());
        assert_eq!(
            exchange(&mut client, request.as_bytes(), b"\r\n"),
            "STORED\r\n"
        );
    }
    // Multigets of every size class, plain, with CAS and touching.
    for (command, take) in [("get", 90), ("get", 3), ("gets", 40), ("gat 0", 12)] {
        let asked = &keys[..take];
        let mut request = format!("{command} {}\r\n", asked.join(" "));
        // One miss among them.
        request.insert_str(request.len() - 2, " missing");
        let reply = exchange(&mut client, request.as_bytes(), b"END\r\n");
        let values: Vec<&str> = reply.lines().filter(|l| l.starts_with("VALUE ")).collect();
        assert_eq!(values.len(), take, "{command}: {reply}");
        for (i, line) in values.iter().enumerate() {
            let fields: Vec<&str> = line.split(' ').collect();
            assert_eq!(fields[1], keys[i], "{command}: key order");
            assert_eq!(fields[2], i.to_string(), "{command}: client flags");
            assert_eq!(fields.len(), if command == "gets" { 5 } else { 4 });
        }
        assert!(reply.contains(&format!("\r\nvalue-{}\r\n", take - 1)));
    }
    let stats = stats_of(&exchange(&mut client, b"stats\r\n", b"END\r\n"));
    let mode = |server: &Server| {
        stats
            .get(&format!("backend_priorities:127.0.0.1:{}", server.port))
            .cloned()
            .unwrap_or_else(|| panic!("no backend_priorities for {}: {stats:?}", server.port))
    };
    assert_eq!(mode(&drr), "backend-drr");
    assert_eq!(mode(&fifo), "proxy-strict");
    assert_eq!(mode(&memcached), "proxy-strict");
    assert!(
        classed_requests(&drr) > 0,
        "the late-binding backend saw no class flag"
    );
    assert_eq!(classed_requests(&fifo), 0, "a fifo backend was sent flags");
}

/// The `mg` lines a backend that serves classes (`-vv`, logged to a file) received from a
/// proxy running `planner` for one multiget of 30 stored keys.
fn mg_lines_received_from(planner: &str) -> Vec<String> {
    mg_lines_after_mice(planner, 0)
}

/// The `mg` lines of [`mg_lines_received_from`] after `mice` 2-key multigets (the typical
/// request `cost-rel` learns its classes from), the mice's lines first.
fn mg_lines_after_mice(planner: &str, mice: usize) -> Vec<String> {
    let log = std::env::temp_dir().join(format!(
        "tailtrim-proxy-priorities-{}-{}-{mice}.log",
        std::process::id(),
        planner.replace(' ', "_")
    ));
    let _ = std::fs::remove_file(&log);
    let log_arg = log.display().to_string();
    let backend = Server::start(
        Program::Tailtrim,
        &[
            "-t",
            "1",
            "--dispatch",
            "late-binding",
            "-vv",
            "--log-file",
            &log_arg,
        ],
    );
    let proxy = start_proxy(&[&backend], planner);
    let mut client = TcpStream::connect(proxy.addr).expect("connect");
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let keys: Vec<String> = (0..30).map(|i| format!("k{i}")).collect();
    for key in &keys {
        let request = format!("set {key} 0 0 1\r\nv\r\n");
        assert_eq!(
            exchange(&mut client, request.as_bytes(), b"\r\n"),
            "STORED\r\n"
        );
    }
    for i in 0..mice {
        let request = format!("get {} {}\r\n", keys[i % 30], keys[(i + 1) % 30]);
        let reply = exchange(&mut client, request.as_bytes(), b"END\r\n");
        assert_eq!(reply.matches("VALUE ").count(), 2, "{reply}");
    }
    let reply = exchange(
        &mut client,
        format!("get {}\r\n", keys.join(" ")).as_bytes(),
        b"END\r\n",
    );
    assert_eq!(reply.matches("VALUE ").count(), keys.len(), "{reply}");
    drop(proxy);
    drop(backend);
    let text = std::fs::read_to_string(&log).expect("the backend's log");
    let _ = std::fs::remove_file(&log);
    text.lines()
        .filter(|line| line.contains(" mg k"))
        .map(str::to_string)
        .collect()
}

/// cost-sbf's order reaches the backend: every `mg` carries its class and the servers' ageing
/// (`p<class>a<overtakes>`), so `tailtrim serve` ages them as the simulator's servers do;
/// Rein's carry the class alone (strict priority, as published).
#[test]
fn cost_sbf_sends_its_ageing_with_the_class_and_rein_does_not() {
    let aged = format!("a{}", tailtrim_policy::costsbf::DEFAULT_OVERTAKES);
    let cost_sbf = mg_lines_received_from("cost-sbf");
    assert_eq!(cost_sbf.len(), 30, "{cost_sbf:?}");
    // 30 keys on one backend: Rein's class of a 30-key bottleneck (≤ 125 keys: class 3).
    assert!(
        cost_sbf
            .iter()
            .all(|line| line.ends_with(&format!(" q p3{aged}"))),
        "{cost_sbf:?}"
    );
    let rein = mg_lines_received_from("rein-sbf");
    assert_eq!(rein.len(), 30, "{rein:?}");
    assert!(rein.iter().all(|line| line.ends_with(" q p3")), "{rein:?}");
}

/// `cost-rel`'s classes reach the backend with its ageing (`p<class>a400`, what the simulator's
/// servers run): after 300 2-key multigets (bottleneck 2 keys on one backend, the typical
/// request) the mice are class 0, where Rein's fixed bounds put a 2-key bottleneck in class 1,
/// and the 30-key multiget (15 × the typical bottleneck) is demoted, every opset alike.
#[test]
fn cost_rel_sends_classes_relative_to_the_typical_request_with_its_ageing() {
    let mice = 300;
    let lines = mg_lines_after_mice("cost-rel", mice);
    assert_eq!(lines.len(), 2 * mice + 30, "{lines:?}");
    let flags = |line: &String| line.rsplit(' ').next().unwrap_or_default().to_string();
    // The typical bottleneck is learned from the first 256 requests: from then on, class 0.
    let learned: Vec<String> = lines[2 * 256..2 * mice].iter().map(flags).collect();
    assert!(learned.iter().all(|f| f == "p0a400"), "{learned:?}");
    let elephant: Vec<String> = lines[2 * mice..].iter().map(flags).collect();
    assert!(elephant.iter().all(|f| f == "p3a400"), "{elephant:?}");
    // Rein-SBF: the same mice are class 1, strict priority (no ageing on the wire).
    let rein = mg_lines_after_mice("rein-sbf", 4);
    assert!(
        rein[..8].iter().all(|line| line.ends_with(" q p1")),
        "{rein:?}"
    );
}

/// Each of `cost-rel` and `size-rel` sends its own ageing, `size-rel` 25 by default (tighter
/// than cost-rel's 400), and each is set by its own flag (`[pool] cost_rel_overtakes`,
/// `size_rel_overtakes`) without touching the other's.
#[test]
fn size_rel_and_cost_rel_each_carry_their_own_ageing() {
    let ageing = |planner: &str| -> Vec<String> {
        let lines = mg_lines_received_from(planner);
        assert_eq!(lines.len(), 30, "{planner}: {lines:?}");
        lines
            .iter()
            .map(|line| {
                let flags = line.rsplit(' ').next().unwrap_or_default();
                flags[flags.find('a').unwrap_or(flags.len())..].to_string()
            })
            .collect()
    };
    let all = |planner: &str, expected: &str| {
        let got = ageing(planner);
        assert!(got.iter().all(|a| a == expected), "{planner}: {got:?}");
    };
    all("size-rel", "a25");
    all(
        "size-rel --size-rel-overtakes 7 --cost-rel-overtakes 9",
        "a7",
    );
    all(
        "cost-rel --size-rel-overtakes 7 --cost-rel-overtakes 9",
        "a9",
    );
}
