//! Smoke test of `tailtrim experiment tier --quick`: real `tailtrim serve` backends (emulated
//! service time) behind a real `tailtrim proxy`, cache-aside load with a server joining half
//! way, three tiers. Checks the shape of results.json (per-class percentiles, the join, CPU
//! per request and its split by process, the acceptance lines) and that a replot redraws the same files byte for byte;
//! no timing assertions.

use std::process::Command;

mod common;

#[test]
fn quick_tier_run_reports_every_class_the_join_and_cpu_and_replots_identically() {
    let (out, json) = common::run_experiment(
        "tier",
        &[
            "tier",
            "--quick",
            "--quiet",
            "--tiers",
            "memcached-like,memcached-like-aa,everything",
        ],
    );
    assert_eq!(json["experiment"], "tier");
    assert_eq!(json["settings"]["mode"], "emulated");
    let runs = json["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 3, "one round of three tiers");
    for run in &runs {
        assert!(run["requests"].as_u64().unwrap_or(0) > 0, "{}", run["tier"]);
        assert_eq!(run["wrong_values"], 0);
        assert_eq!(run["stale_values"], 0);
        assert!(run["cpu_us_per_request"].is_f64());
        // The CPU split by process adds up to the whole.
        let split = &run["cpu_split"];
        let parts =
            split["servers"].as_f64().unwrap_or(-1.0) + split["proxy"].as_f64().unwrap_or(-1.0);
        let whole = run["cpu_seconds"].as_f64().unwrap_or(0.0);
        assert!((parts - whole).abs() < 1e-9, "split {split} of {whole}");
        // The join was sent inside the window and the proxy took it.
        assert_eq!(run["join"][2], 200, "{}", run["join"]);
        assert!(run["miss_ratio_peak"].is_f64());
        for class in ["all", "small", "large", "mice", "elephant"] {
            assert!(run["histograms"][class].is_string(), "{class}");
        }
        // The host's hiccup meter ran beside the run and its reading was kept.
        let host = &run["host"];
        assert!(host["holes"].is_u64(), "{host}");
        assert!(host["longest_hole_ms"].is_number(), "{host}");
        assert!(host["slow_requests"].is_u64(), "{host}");
    }
    assert!(json["settings"]["meter"]["disturbed_hole_ms"].is_number());
    let tiers = json["tiers"].as_array().cloned().unwrap_or_default();
    assert_eq!(tiers.len(), 3);
    for tier in &tiers {
        let all = &tier["classes"]["all"];
        assert!(all["requests"].as_u64().unwrap_or(0) > 0, "{tier}");
        for percentile in ["p50_us", "p99_us", "p999_us"] {
            assert!(all[percentile].is_f64(), "{percentile}");
        }
        for part in ["servers", "proxy"] {
            assert!(tier["cpu_us_per_request_split"][part].is_f64(), "{tier}");
        }
    }
    let everything = &json["settings"]["tiers"][2];
    assert_eq!(everything["name"], "everything");
    assert_eq!(everything["join_warmup"], "preemptive+fallback");
    let verdict = json["verdict"].as_array().cloned().unwrap_or_default();
    assert!(verdict
        .iter()
        .any(|line| line["line"].as_str().is_some_and(|l| l.starts_with("A/A"))));
    assert!(json["metadata"]["load_average_start"].is_string());

    // --replot redraws from results.json without running anything, byte for byte.
    let files = ["results.md", "tier.svg", "tier.png"];
    let before: Vec<Vec<u8>> = files
        .iter()
        .map(|file| std::fs::read(out.join(file)).unwrap_or_else(|error| panic!("{file}: {error}")))
        .collect();
    for file in files {
        std::fs::remove_file(out.join(file)).unwrap_or_else(|error| panic!("{file}: {error}"));
    }
    let replotted = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["experiment", "tier", "--replot", "--quiet", "--out"])
        .arg(&out)
        .status()
        .is_ok_and(|status| status.success());
    assert!(replotted, "--replot failed");
    for (file, kept) in files.iter().zip(&before) {
        let again = std::fs::read(out.join(file)).unwrap_or_else(|error| panic!("{file}: {error}"));
        assert!(&again == kept, "{file} differs after --replot");
    }
    let _ = std::fs::remove_dir_all(&out);
}
