//! `tailtrim bench --json` keeps what a result needs to be checked later: the run's metadata
//! and each class's latency histogram, from which the reported percentiles come back — for one
//! run, for every point of a sweep (`--rates`), and for a cache-aside run.

mod common;

use std::process::Command;

use common::{Program, Server};
use tailtrim_lab::histogram::Encoded;

/// Runs `tailtrim bench` with `args` against a fresh `tailtrim serve` and returns its `--json`
/// document, whose run metadata it checks first.
fn bench_json(args: &[&str]) -> serde_json::Value {
    let server = Server::start(Program::Tailtrim, &[]);
    let document = run_bench(&server, args);
    check_metadata(&document);
    document
}

/// Runs `tailtrim bench` with `args` against `server` and returns its `--json` document.
fn run_bench(server: &Server, args: &[&str]) -> serde_json::Value {
    let json = std::env::temp_dir().join(format!(
        "tailtrim-bench-json-{}-{}.json",
        std::process::id(),
        args.join("_").replace(['/', ' '], "")
    ));
    let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["bench", "-q", "-s", &server.addr().to_string()])
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("running tailtrim bench");
    assert!(
        output.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&json).expect("the JSON was written");
    let _ = std::fs::remove_file(&json);
    serde_json::from_str(&text).expect("valid JSON")
}

fn check_metadata(document: &serde_json::Value) {
    let metadata = &document["metadata"];
    assert!(metadata["command"]
        .as_str()
        .is_some_and(|c| c.contains("bench")));
    assert!(metadata["commit"].as_str().is_some_and(|c| !c.is_empty()));
    assert!(metadata["cores"].as_u64().is_some_and(|cores| cores >= 1));
}

/// The reported value at `percentile` equals the one recomputed from `encoded` (ns → µs).
fn check_percentile(encoded: &Encoded, percentile: f64, reported: f64, what: &str) {
    let recomputed = encoded.percentile(percentile, 1_000.0).expect("not empty");
    assert!(
        (recomputed - reported).abs() < 1e-9,
        "{what}: reported {reported}, histogram says {recomputed}"
    );
}

/// Every class of one run's report: a histogram with its count and its p50/p99.
fn check_classes(run: &serde_json::Value) {
    let classes = run["classes"].as_object().expect("per-class summaries");
    let histograms = run["histograms"].as_object().expect("per-class histograms");
    let mut checked = 0;
    for (name, summary) in classes {
        let count = summary["count"].as_u64().unwrap_or(0);
        let Some(encoded) = histograms.get(name) else {
            assert_eq!(count, 0, "class {name} has requests but no histogram");
            continue;
        };
        let encoded = Encoded(encoded.as_str().expect("a base64 string").to_string());
        let histogram = encoded.decode().expect("decodes");
        assert_eq!(histogram.len(), count, "class {name}");
        for (key, percentile) in [("p50_us", 50.0), ("p99_us", 99.0)] {
            let reported = summary[key].as_f64().expect("a number");
            check_percentile(
                &encoded,
                percentile,
                reported,
                &format!("class {name} {key}"),
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 2,
        "at least the all and small classes ran: {checked}"
    );
}

#[test]
fn one_run_json_carries_metadata_and_the_histograms_its_percentiles_come_from() {
    let document = bench_json(&[
        "--workload",
        "minos",
        "--keys",
        "2000",
        "-r",
        "3000",
        "-d",
        "1",
    ]);
    check_classes(&document);
}

#[test]
fn every_point_of_a_sweep_keeps_its_histograms() {
    let document = bench_json(&[
        "--workload",
        "minos",
        "--keys",
        "2000",
        "--rates",
        "1000,2000",
        "-d",
        "1",
    ]);
    let points = document["points"].as_array().expect("the points");
    assert_eq!(points.len(), 2);
    for point in points {
        check_classes(point);
    }
}

#[test]
fn a_cache_aside_run_keeps_the_histogram_of_its_percentiles() {
    let document = bench_json(&["--cache-aside", "--keys", "2000", "-r", "500", "-d", "1"]);
    let encoded = Encoded(
        document["latency_ns"]
            .as_str()
            .expect("the latency histogram")
            .to_string(),
    );
    let requests = document["requests"].as_u64().expect("requests");
    assert!(requests > 0);
    let histogram = encoded.decode().expect("decodes");
    assert_eq!(histogram.len(), requests);
    // The histogram holds the latencies themselves: its mean is the report's exact mean to
    // its three significant digits.
    let mean_us = document["mean_us"].as_f64().expect("mean_us");
    assert!(
        (histogram.mean() / 1_000.0 - mean_us).abs() <= 0.01 * mean_us,
        "histogram mean {} µs, report {mean_us} µs",
        histogram.mean() / 1_000.0
    );
    for (key, percentile) in [("p50_us", 50.0), ("p99_us", 99.0)] {
        let reported = document[key].as_f64().expect("a number");
        check_percentile(&encoded, percentile, reported, key);
    }
}

#[test]
fn a_closed_loop_run_says_so_and_keeps_its_histograms() {
    let document = bench_json(&[
        "--workload",
        "minos",
        "--keys",
        "2000",
        "--closed-loop",
        "4",
        "--think-time",
        "1ms",
        "-d",
        "1",
    ]);
    check_classes(&document);
    assert_eq!(document["closed_loop"]["clients"], 4, "{document}");
    assert_eq!(document["closed_loop"]["think_time_us"], 1_000.0);
    assert_eq!(document["connections"], 4);
    assert_eq!(document["target_rps"], 0.0);
    // Four clients, each waiting 1 ms after every reply, send at most 4 per millisecond.
    let scheduled = document["scheduled"].as_u64().expect("scheduled");
    assert!(
        scheduled > 0 && scheduled <= 4 * 1_001,
        "{scheduled} requests"
    );
}

#[test]
fn an_open_loop_run_has_no_closed_loop_member() {
    let document = bench_json(&[
        "--workload",
        "minos",
        "--keys",
        "2000",
        "-r",
        "500",
        "-d",
        "0.5",
    ]);
    assert!(document.get("closed_loop").is_none(), "{document}");
}
