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
    let metadata = &json["metadata"];
    assert!(
        metadata["command"]
            .as_str()
            .is_some_and(|command| command.contains("experiment minos --quick")),
        "{metadata}"
    );
    assert!(metadata["commit"]
        .as_str()
        .is_some_and(|commit| !commit.is_empty()));
    assert!(metadata["dirty"].is_boolean());
    assert!(number(metadata, "/cores") >= 1.0);
    assert!(metadata["cpu_model"].is_string());
    assert!(metadata["load_average_start"].is_string() && metadata["load_average_end"].is_string());
    assert!(number(metadata, "/steal_percent") >= 0.0);
    assert!(number(metadata, "/wall_seconds") > 0.0);
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
        // The run's histogram is kept: its p99 recomputes the recorded p99.
        let small = tailtrim_lab::histogram::Encoded(
            samples[0]["histograms"]["small"]
                .as_str()
                .unwrap_or_else(|| panic!("no small histogram in {}", samples[0]))
                .to_string(),
        );
        let p99 = small
            .percentile(99.0, 1_000.0)
            .unwrap_or_else(|| panic!("small histogram empty or unreadable"));
        assert_eq!(p99, number(&samples[0], "/small/p99_us"));
        assert!(samples[0]["histograms"]["all"].is_string());
        assert!(samples[0]["histograms"]["large"].is_string());
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

    // --replot redraws from results.json without running anything.
    std::fs::remove_file(out.join("small_p99.svg")).unwrap_or_else(|error| panic!("{error}"));
    std::fs::remove_file(out.join("results.md")).unwrap_or_else(|error| panic!("{error}"));
    let replot = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["experiment", "minos", "--replot", "--out"])
        .arg(&out)
        .output()
        .unwrap_or_else(|error| panic!("running tailtrim: {error}"));
    assert!(
        replot.status.success(),
        "--replot failed: {}",
        String::from_utf8_lossy(&replot.stderr)
    );
    assert!(out.join("small_p99.svg").is_file() && out.join("results.md").is_file());
    let replotted: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("results.json"))
            .unwrap_or_else(|error| panic!("reading results.json: {error}")),
    )
    .unwrap_or_else(|error| panic!("parsing: {error}"));
    assert_eq!(
        replotted["systems"], json["systems"],
        "replot keeps the data"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn min_large_adds_rounds_until_every_system_holds_enough_large_requests() {
    let out = scratch_directory("minos-min-large");
    let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args([
            "experiment",
            "minos",
            "--systems",
            "size-aware,early-binding",
            "--rates",
            "2000",
            "-d",
            "0.3",
            "--warmup",
            "0.1",
            "--drain",
            "0.5",
            "--prime",
            "0",
            "--repeats",
            "1",
            "--min-large",
            "20",
            "--max-repeats",
            "12",
            "--keys",
            "2000",
            "--large-keys",
            "20",
            "--large-share",
            "0.02",
            "--no-floor",
            "-q",
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
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("results.json"))
            .unwrap_or_else(|error| panic!("reading results.json: {error}")),
    )
    .unwrap_or_else(|error| panic!("parsing results.json: {error}"));
    assert_eq!(number(&json, "/settings/min_large"), 20.0);
    assert_eq!(number(&json, "/settings/max_repeats"), 12.0);
    let systems = json["systems"]
        .as_array()
        .unwrap_or_else(|| panic!("systems is not an array"));
    let mut large = Vec::new();
    let mut rounds = Vec::new();
    for system in systems {
        let point = &system["points"][0];
        let repeats = number(point, "/valid_repeats");
        let count = number(point, "/large_count");
        // ~12 large requests a round (2000/s x 0.3 s x 2 %): one round is not enough.
        assert!(
            count >= 20.0 || repeats >= 12.0,
            "{}: {count} large requests in {repeats} rounds",
            system["name"]
        );
        rounds.push(point["samples"].as_array().map_or(0, Vec::len));
        large.push(count);
    }
    // Every system runs in every round, so all have the same number of rounds, and the
    // rounds stopped as soon as every system had enough: one fewer would leave one short.
    assert!(rounds.iter().all(|count| *count == rounds[0]), "{rounds:?}");
    assert!(rounds[0] >= 1);
    if rounds[0] > 1 && rounds[0] < 12 {
        let short_before_the_last_round = systems.iter().any(|system| {
            let samples = system["points"][0]["samples"]
                .as_array()
                .unwrap_or_else(|| panic!("samples is not an array"));
            let before: f64 = samples[..samples.len() - 1]
                .iter()
                .map(|sample| number(sample, "/large/count"))
                .sum();
            before < 20.0
        });
        assert!(short_before_the_last_round, "a round too many: {rounds:?}");
    }
    let ratios = json["summary"]["small_p99_ratios"]
        .as_array()
        .unwrap_or_else(|| panic!("no small_p99_ratios in {}", json["summary"]));
    assert_eq!(ratios.len(), 1);
    let row = &ratios[0];
    assert_eq!(row["system"], "early-binding");
    assert_eq!(number(row, "/large"), large[1]);
    assert_eq!(number(row, "/size_aware_large"), large[0]);
    assert!(number(row, "/large_fewest") <= number(row, "/large"));
    let (low, estimate, high) = (
        number(row, "/ratio/low"),
        number(row, "/ratio/estimate"),
        number(row, "/ratio/high"),
    );
    assert!(low <= estimate && estimate <= high, "{row}");
    assert!(
        (estimate - number(row, "/small_p99_us") / number(row, "/size_aware_small_p99_us")).abs()
            < 1e-9
    );
    let table = std::fs::read_to_string(out.join("results.md"))
        .unwrap_or_else(|error| panic!("reading results.md: {error}"));
    assert!(table.contains("Small p99 over size-aware's, repeats pooled"));
    let _ = std::fs::remove_dir_all(&out);
}
