//! `tailtrim sim` run from outside the repository: `sim validate` still finds the
//! repository's experiments/minos/results.json, `sim minos` reports the commit
//! `tailtrim --version` prints, and `sim cluster --json` carries its run records.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A fresh directory outside the repository (the system's temporary directory).
fn outside(name: &str) -> PathBuf {
    let directory =
        std::env::temp_dir().join(format!("tailtrim-sim-paths-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).expect("creating a scratch directory");
    directory
}

fn tailtrim_in(directory: &PathBuf, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .current_dir(directory)
        .args(args)
        .output()
        .expect("running tailtrim")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).to_string()
}

#[test]
fn validate_finds_the_real_results_from_any_directory() {
    let directory = outside("validate");
    let output = tailtrim_in(&directory, &["sim", "validate", "-q", "-n", "2000"]);
    assert!(
        output.status.success(),
        "sim validate failed: {}",
        stderr(&output)
    );
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains("real results: `experiments/minos/results.json`"),
        "the report names the repository's file: {table}"
    );
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn validate_with_a_missing_real_file_names_it() {
    let directory = outside("validate-missing");
    let output = tailtrim_in(
        &directory,
        &["sim", "validate", "-q", "--real", "no-such-results.json"],
    );
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("reading no-such-results.json"),
        "{}",
        stderr(&output)
    );
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn minos_reports_the_commit_the_version_prints() {
    let directory = outside("minos");
    let version = tailtrim_in(&directory, &["--version"]);
    let version = String::from_utf8_lossy(&version.stdout).to_string();
    let commit = version
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(commit, _)| commit.to_string())
        .unwrap_or_else(|| panic!("no commit in {version:?}"));
    assert!(commit.len() >= 40, "{version}");
    let out = directory.join("out");
    let out_text = out.to_string_lossy().to_string();
    let output = tailtrim_in(
        &directory,
        &[
            "sim",
            "minos",
            "-q",
            "-t",
            "2",
            "-n",
            "2000",
            "--rates",
            "50000",
            "--policies",
            "size-aware",
            "--out",
            &out_text,
        ],
    );
    assert!(
        output.status.success(),
        "sim minos failed: {}",
        stderr(&output)
    );
    let report = std::fs::read_to_string(out.join("results.md")).expect("results.md written");
    assert!(
        report.contains(&format!("Commit `{commit}`")),
        "results.md names the commit of `tailtrim --version` ({commit}): {report}"
    );
    let _ = std::fs::remove_dir_all(&directory);
}

/// `sim cluster --json` carries its run records like every kept measurement: the harness's
/// metadata (command, commit, host, load), the seed, the SIMULATED note and, per result, the
/// latency histograms its percentiles are read from.
#[test]
fn cluster_json_carries_its_run_records() {
    let directory = outside("cluster");
    let output = tailtrim_in(
        &directory,
        &[
            "sim",
            "cluster",
            "--servers",
            "2",
            "--workers",
            "2",
            "--keys",
            "4",
            "--rates",
            "20000",
            "-n",
            "2000",
            "--seed",
            "7",
            "--json",
        ],
    );
    assert!(
        output.status.success(),
        "sim cluster failed: {}",
        stderr(&output)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("sim cluster --json prints JSON");
    let metadata = &report["metadata"];
    for field in [
        "command",
        "commit",
        "cpu_model",
        "kernel",
        "load_average_start",
    ] {
        assert!(
            metadata[field].is_string(),
            "metadata.{field} in {metadata}"
        );
    }
    assert_eq!(metadata["seed"], 7);
    assert!(
        metadata["note"]
            .as_str()
            .is_some_and(|note| note.starts_with("SIMULATED")),
        "{metadata}"
    );
    let histograms = report["histograms"].as_array().expect("a histograms list");
    assert_eq!(histograms.len(), 1, "one rate, one set of histograms");
    assert!(
        histograms[0]["overall"]
            .as_str()
            .is_some_and(|encoded| encoded.starts_with("HIST")),
        "{}",
        histograms[0]
    );
}
