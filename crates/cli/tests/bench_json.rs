//! `tailtrim bench --json` of one run keeps what a result needs to be checked later: the run's
//! metadata and each class's latency histogram, from which the reported percentiles come back.

mod common;

use std::process::Command;

use common::{Program, Server};
use tailtrim_lab::histogram::Encoded;

#[test]
fn one_run_json_carries_metadata_and_the_histograms_its_percentiles_come_from() {
    let server = Server::start(Program::Tailtrim, &[]);
    let json =
        std::env::temp_dir().join(format!("tailtrim-bench-json-{}.json", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["bench", "-q", "--workload", "minos", "--keys", "2000"])
        .args(["-s", &server.addr().to_string(), "-r", "3000", "-d", "1"])
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
    let document: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");

    let metadata = &document["metadata"];
    assert!(metadata["command"]
        .as_str()
        .is_some_and(|c| c.contains("bench")));
    assert!(metadata["commit"].as_str().is_some_and(|c| !c.is_empty()));
    assert!(metadata["cores"].as_u64().is_some_and(|cores| cores >= 1));

    let classes = document["classes"]
        .as_object()
        .expect("per-class summaries");
    let histograms = document["histograms"]
        .as_object()
        .expect("per-class histograms");
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
            let recomputed = encoded.percentile(percentile, 1_000.0).expect("not empty");
            let reported = summary[key].as_f64().expect("a number");
            assert!(
                (recomputed - reported).abs() < 1e-9,
                "class {name} {key}: reported {reported}, histogram says {recomputed}"
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 2,
        "at least the all and small classes ran: {checked}"
    );
}
