//! Smoke test of `tailtrim experiment minos --quick`: the command starts a
//! real `tailtrim serve`, preloads it, sweeps two low rates, measures the
//! noise floor, and writes results.json / results.md / plots. Checks the
//! JSON's structure and that requests were really counted; no timing
//! assertions.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn scratch_directory(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!(
        "tailtrim-test-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or(0)
    ));
    let _ = std::fs::remove_dir_all(&directory);
    directory
}

fn number(value: &serde_json::Value, path: &str) -> f64 {
    value
        .pointer(path)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("{path} missing or not a number in {value}"))
}

#[test]
fn quick_minos_run_writes_results_with_counts() {
    let out = scratch_directory("minos");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args([
            "experiment",
            "minos",
            "--quick",
            "--systems",
            "pinned",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap_or_else(|error| panic!("running tailtrim: {error}"));
    assert!(
        output.status.success(),
        "tailtrim experiment minos failed ({:?}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "the quick run should be a smoke run"
    );

    let text = std::fs::read_to_string(out.join("results.json"))
        .unwrap_or_else(|error| panic!("reading results.json: {error}"));
    let json: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|error| panic!("parsing results.json: {error}"));
    assert_eq!(json["experiment"], "minos");
    assert_eq!(json["complete"], true);
    assert_eq!(json["settings"]["quick"], true);
    let rates = json["settings"]["rates"]
        .as_array()
        .unwrap_or_else(|| panic!("settings.rates is not an array"));
    assert!(rates.len() >= 2, "the quick sweep has at least two rates");

    let systems = json["systems"]
        .as_array()
        .unwrap_or_else(|| panic!("systems is not an array"));
    let names: Vec<&str> = systems
        .iter()
        .filter_map(|system| system["name"].as_str())
        .collect();
    assert_eq!(names, vec!["pinned", "floor"]);

    let pinned = &systems[0];
    assert!(pinned["command"]
        .as_str()
        .is_some_and(|command| command.contains("serve")));
    assert!(number(pinned, "/preload/keys") > 0.0, "preload wrote keys");
    assert_eq!(number(pinned, "/preload/errors"), 0.0);
    let points = pinned["points"]
        .as_array()
        .unwrap_or_else(|| panic!("points is not an array"));
    assert_eq!(points.len(), rates.len(), "one point per rate");
    let mut large_total = 0.0;
    for (point, rate) in points.iter().zip(rates) {
        assert_eq!(point["target_rps"], *rate);
        assert_eq!(number(point, "/valid_repeats"), 1.0);
        assert!(number(point, "/achieved_rps") > 0.0);
        assert!(
            number(point, "/small_count") > 0.0,
            "small requests counted"
        );
        assert!(number(point, "/small_p99_us") >= number(point, "/small_p50_us"));
        assert!(number(point, "/small_p50_us") > 0.0);
        large_total += number(point, "/large_count");
        let samples = point["samples"]
            .as_array()
            .unwrap_or_else(|| panic!("samples is not an array"));
        assert_eq!(samples.len(), 1);
        assert!(number(&samples[0], "/small/count") > 0.0);
        assert!(number(&samples[0], "/hits") > 0.0, "preloaded keys are hit");
    }
    assert!(large_total > 0.0, "some large requests over the sweep");

    let floor = &systems[1];
    let floor_points = floor["points"]
        .as_array()
        .unwrap_or_else(|| panic!("floor points is not an array"));
    assert_eq!(floor_points.len(), rates.len());
    assert!(number(&floor_points[0], "/achieved_rps") > 0.0);
    assert!(number(&json, "/summary/floor_p99_us") > 0.0);
    assert!(number(&json, "/summary/saturation_rps/pinned") > 0.0);

    for file in [
        "results.md",
        "small_p99.svg",
        "small_p99.png",
        "large_p99.svg",
        "large_p99.png",
    ] {
        let metadata = std::fs::metadata(out.join(file))
            .unwrap_or_else(|error| panic!("{file} not written: {error}"));
        assert!(metadata.len() > 0, "{file} is empty");
    }
    let table = std::fs::read_to_string(out.join("results.md"))
        .unwrap_or_else(|error| panic!("reading results.md: {error}"));
    assert!(table.contains("| pinned |"));
    let _ = std::fs::remove_dir_all(&out);
}
