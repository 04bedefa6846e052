//! `tailtrim model plan` from a bench JSON kept here and from a live server's `stats`, and the
//! proxy's live prediction in its `stats` (`pool_model_p99_predicted_us` beside the measured
//! `pool_latency_us_p99`).

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::proxy::Proxy;
use common::{read_until, Server};

/// A bench JSON (the fields `model plan` reads, as `tailtrim bench --json` writes them):
/// 900 gets of 10 keys and 100 sets at 2 000 requests/s.
const BENCH_JSON: &str = r#"{
  "achieved_rps": 2000.0,
  "hits": 8950, "misses": 50,
  "classes": {
    "all": {"count": 1000, "p99_us": 1800.0},
    "get": {"count": 900},
    "set": {"count": 100}
  }
}"#;

fn model(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .arg("model")
        .args(args)
        .output()
        .expect("run tailtrim model");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|error| panic!("{error}: {text}"))
}

#[test]
fn plan_from_a_bench_json() {
    let directory =
        std::env::temp_dir().join(format!("tailtrim-model-plan-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let path = directory.join("bench.json");
    std::fs::write(&path, BENCH_JSON).expect("write bench json");
    let path_text = path.to_string_lossy().to_string();
    let common = [
        "plan",
        "--from-bench",
        &path_text,
        "--service-us",
        "50",
        "--per-key-us",
        "100",
        "--slo-p99",
        "2500",
    ];

    let (ok, stdout, stderr) = model(&[&common[..], &["--json"]].concat());
    assert!(ok, "{stderr}");
    let value = json(&stdout);
    assert_eq!(value["measured"]["request_rate"], 2000.0);
    assert_eq!(value["measured"]["keys_per_request"], 9.1);
    assert_eq!(value["measured"]["measured_p99_us"], 1800.0);
    let servers = value["plan"]["recommended"]["servers"]
        .as_u64()
        .unwrap_or(0);
    // 2 000 requests/s of 9.1 keys at 50 µs + 100 µs per key: one server's single query
    // per request is too slow for the objective, more servers shorten each query.
    assert!(servers >= 2, "{stdout}");
    let neighbours = value["plan"]["neighbours"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let meets: Vec<(u64, bool)> = neighbours
        .iter()
        .map(|n| (n["servers"].as_u64().unwrap_or(0), n["meets"] == true))
        .collect();
    assert_eq!(
        meets,
        vec![(servers - 1, false), (servers, true), (servers + 1, true)],
        "{stdout}"
    );

    let (ok, table, stderr) = model(&common);
    assert!(ok, "{stderr}");
    assert!(
        table.contains(&format!("recommended: {servers} servers x 4 threads")),
        "{table}"
    );
    assert!(
        table.contains("measured p99 at the source: 1800 µs"),
        "{table}"
    );

    // No service time in a bench JSON: said, not guessed.
    let (ok, _, stderr) = model(&["plan", "--from-bench", &path_text, "--slo-p99", "2500"]);
    assert!(!ok && stderr.contains("--service-us"), "{stderr}");
    // An objective under the service time itself: unreachable, a clear error.
    let (ok, _, stderr) = model(&[&common[..7], &["--slo-p99", "100"]].concat());
    assert!(!ok && stderr.contains("unreachable"), "{stderr}");
    let _ = std::fs::remove_dir_all(&directory);
}

/// Sends `get` requests on one connection until `stop`, one at a time.
fn drive(
    address: std::net::SocketAddr,
    keys: &'static str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut stream = TcpStream::connect(address).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let request = format!("get {keys}\r\n");
        let mut sent = 0;
        while !stop.load(Ordering::Relaxed) {
            stream.write_all(request.as_bytes()).expect("send get");
            let reply = read_until(&mut stream, b"END\r\n", Duration::from_secs(20));
            assert!(reply.ends_with(b"END\r\n"), "{reply:?}");
            sent += 1;
        }
        sent
    })
}

#[test]
fn plan_from_a_live_servers_stats() {
    let server = Server::start_under_test(&[
        "-t",
        "2",
        "--emulate-service",
        "const=1ms,key=100us,dist=exp",
    ]);
    let reply = server.request(
        b"set a 0 0 3\r\nabc\r\nset b 0 0 3\r\nxyz\r\n",
        b"STORED\r\nSTORED\r\n",
    );
    assert!(reply.ends_with(b"STORED\r\n"));
    let stop = Arc::new(AtomicBool::new(false));
    let driver = drive(server.addr(), "a b", stop.clone());
    let address = server.addr().to_string();
    let (ok, stdout, stderr) = model(&[
        "plan",
        "--from-stats",
        &address,
        "--sample-secs",
        "1",
        "--slo-p99",
        "20000",
        "--json",
    ]);
    stop.store(true, Ordering::Relaxed);
    let sent = driver.join().expect("driver");
    assert!(ok, "{stderr}");
    assert!(sent > 0);
    let value = json(&stdout);
    let measured = &value["measured"];
    assert_eq!(measured["threads"], 2, "{stdout}");
    // Two keys per get; the `stats` reading itself may count as a request of none.
    let keys = measured["keys_per_request"].as_f64().unwrap_or(0.0);
    assert!(keys > 1.8 && keys <= 2.0, "{stdout}");
    assert!(
        measured["request_rate"].as_f64().unwrap_or(0.0) > 0.0,
        "{stdout}"
    );
    // The emulated cost, read from `stats settings`: 1 ms + 100 µs per key (+ reply bytes: none priced).
    assert_eq!(measured["service_us"], 1000.0, "{stdout}");
    assert_eq!(measured["per_key_us"], 100.0, "{stdout}");
    assert_eq!(value["plan"]["recommended"]["threads"], 2, "{stdout}");
    assert!(value["plan"]["recommended"]["servers"].as_u64() >= Some(1));
}

fn proxy_stats(proxy: &Proxy) -> HashMap<String, String> {
    let mut stream = proxy.connect();
    stream.write_all(b"stats\r\n").expect("send stats");
    let reply = read_until(&mut stream, b"END\r\n", Duration::from_secs(20));
    let mut stats = HashMap::new();
    for line in String::from_utf8_lossy(&reply).lines() {
        let field = line
            .strip_prefix("STAT ")
            .and_then(|rest| rest.split_once(' '));
        if let Some((name, value)) = field {
            stats.insert(name.to_string(), value.to_string());
        }
    }
    stats
}

fn number(stats: &HashMap<String, String>, name: &str) -> f64 {
    stats
        .get(name)
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn proxy_stats_carry_the_models_prediction() {
    let servers = [
        Server::start_under_test(&["-t", "2", "--emulate-service", "const=500us,dist=exp"]),
        Server::start_under_test(&["-t", "2", "--emulate-service", "const=500us,dist=exp"]),
    ];
    let backends: Vec<String> = servers
        .iter()
        .map(|s| format!("\"{}:1\"", s.addr()))
        .collect();
    let directory =
        std::env::temp_dir().join(format!("tailtrim-model-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&directory).expect("temp dir");
    let config = directory.join("proxy.toml");
    let backends = backends.join(", ");
    let proxy = Proxy::launch(|listen| {
        let text = format!(
            "[proxy]\nlisten = \"{listen}\"\nadmin_listen = \"\"\n\n[pool]\nservers = [{backends}]\n\n[model]\nthreads = 2\ninterval_ms = 200\n"
        );
        std::fs::write(&config, text).expect("write config");
        vec!["-c".to_string(), config.to_string_lossy().to_string()]
    });
    let before = proxy_stats(&proxy);
    // Declared from the start, 0 until an interval with traffic has passed.
    assert_eq!(
        before
            .get("pool_model_p99_predicted_us")
            .map(String::as_str),
        Some("0")
    );
    assert_eq!(
        before.get("pool_model_threads").map(String::as_str),
        Some("2")
    );

    let mut stream = proxy.connect();
    stream
        .write_all(b"set k1 0 0 2\r\nv1\r\nset k2 0 0 2\r\nv2\r\nset k3 0 0 2\r\nv3\r\n")
        .expect("sets");
    let reply = read_until(
        &mut stream,
        b"STORED\r\nSTORED\r\nSTORED\r\n",
        Duration::from_secs(20),
    );
    assert!(reply.ends_with(b"STORED\r\n"), "{reply:?}");
    let stop = Arc::new(AtomicBool::new(false));
    let driver = drive(proxy.listen, "k1 k2 k3", stop.clone());
    let mut predicted = 0.0;
    let mut after = HashMap::new();
    // Bounded wait for an interval with traffic (bounds a hang; no timing is asserted).
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(100));
        after = proxy_stats(&proxy);
        predicted = number(&after, "pool_model_p99_predicted_us");
        if predicted > 0.0 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = driver.join();
    assert!(predicted > 0.0, "{after:?}");
    assert!(number(&after, "pool_model_service_us") > 0.0, "{after:?}");
    assert!(number(&after, "pool_latency_us_p99") > 0.0, "{after:?}");
    for server in &servers {
        let name = format!("backend_model_p99_predicted_us:{}", server.addr());
        assert!(after.contains_key(&name), "no {name}: {after:?}");
    }
    let mut rest = String::new();
    stream.write_all(b"quit\r\n").expect("quit");
    let _ = stream.read_to_string(&mut rest);
    let _ = std::fs::remove_dir_all(&directory);
}
