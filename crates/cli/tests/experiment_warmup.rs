//! Smoke test of `tailtrim experiment warmup --quick`: real `tailtrim serve` backends behind a
//! real `tailtrim proxy`, cache-aside load, a preemptive join halfway. Checks the structure of
//! results.json, that the join happened inside the measured run and was compared with the
//! baseline, and that no value was wrong; no timing assertions.

use std::path::PathBuf;
use std::process::Command;

fn scratch_directory() -> PathBuf {
    let directory =
        std::env::temp_dir().join(format!("tailtrim-test-warmup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    directory
}

#[test]
fn quick_warmup_run_compares_a_join_with_its_baseline() {
    let out = scratch_directory();
    let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args([
            "experiment",
            "warmup",
            "--quick",
            "--runs",
            "baseline,preemptive@1",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap_or_else(|error| panic!("running tailtrim: {error}"));
    assert!(
        output.status.success(),
        "tailtrim experiment warmup failed ({:?}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(out.join("results.json"))
        .unwrap_or_else(|error| panic!("reading results.json: {error}"));
    let json: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|error| panic!("parsing: {error}"));
    assert_eq!(json["experiment"], "warmup");
    assert_eq!(json["complete"], true);
    let runs = json["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 2);
    assert!(runs[0]["metrics"].is_null(), "a baseline has no metrics");
    let join = &runs[1];
    assert_eq!(join["spec"]["change"]["mode"], "preemptive");
    assert_eq!(join["spec"]["change"]["share"], 1.0);
    let event = &join["report"]["events"][0];
    assert_eq!(event["status"], 200, "{event}");
    let answer: serde_json::Value =
        serde_json::from_str(event["answer"].as_str().unwrap_or("{}")).unwrap_or_default();
    assert_eq!(answer["mode"], "preemptive");
    assert!(
        answer["after"].as_array().map_or(0, Vec::len) == 4,
        "{answer}"
    );
    // Every old owner (`tailtrim serve`) listed its keys (`stats cachedump`), and the moved
    // ones were copied.
    assert_eq!(answer["unlisted"], 0, "{answer}");
    assert!(answer["moved_held"].as_u64().unwrap_or(0) > 0, "{answer}");
    assert!(answer["copied"].as_u64().unwrap_or(0) > 0, "{answer}");
    let metrics = &join["metrics"];
    assert!(
        metrics["event_window"].as_u64().unwrap_or(0) > 0,
        "{metrics}"
    );
    assert!(metrics["misses_after"].is_u64() && metrics["extra_misses"].is_i64());
    for run in &runs {
        let report = &run["report"];
        assert!(report["requests"].as_u64().unwrap_or(0) > 1_000);
        assert_eq!(report["wrong_values"], 0);
        assert_eq!(report["stale_values"], 0);
        assert_eq!(report["errors"], 0);
    }
    assert_eq!(json["summary"]["wrong_or_stale_values"], 0);
    // The preemptive join reports what share of the accesses its copies carry.
    let share = &join["copy_share"];
    assert!(share["moved_keys"].as_u64().unwrap_or(0) > 0, "{share}");
    let carried = share["hottest_share_of_moved_accesses"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(carried > 0.0 && carried <= 1.0, "{share}");
    assert!(
        json["summary"]["programs"]["tailtrim"]["runs"]["preemptive@1"]["peak_excess_ms"]["median"]
            .is_f64(),
        "{}",
        json["summary"]
    );
    for file in ["results.md", "join-tailtrim.svg", "join-tailtrim.png"] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    assert!(
        json["metadata"]["commit"]
            .as_str()
            .is_some_and(|commit| !commit.is_empty()),
        "run metadata recorded"
    );
    assert!(json["metadata"]["load_average_start"].is_string());

    // --replot redraws from results.json without running anything.
    for file in ["results.md", "join-tailtrim.svg"] {
        std::fs::remove_file(out.join(file)).unwrap_or_else(|error| panic!("{file}: {error}"));
    }
    let replot = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["experiment", "warmup", "--replot", "--out"])
        .arg(&out)
        .output()
        .unwrap_or_else(|error| panic!("running tailtrim: {error}"));
    assert!(
        replot.status.success(),
        "--replot failed: {}",
        String::from_utf8_lossy(&replot.stderr)
    );
    assert!(out.join("results.md").is_file() && out.join("join-tailtrim.svg").is_file());
    let _ = std::fs::remove_dir_all(&out);
}
