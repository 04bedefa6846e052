//! Smoke test of `tailtrim experiment tailx --testbed` at a tiny scale: 3 real `tailtrim
//! serve` backends with emulated service and network time behind one real `tailtrim proxy`
//! per planner, one short round of experiment (b), and the simulator beside it. Checks the
//! structure of results.json (every planner measured, no errors, every key found, the large
//! values drawn, the twin simulation and both orders present) and that TailX's proxy learned
//! from replies; no timing assertions.

mod common;

#[test]
fn a_tiny_testbed_run_measures_every_planner_beside_the_simulator() {
    let (out, json) = common::run_experiment(
        "tailx",
        &[
            "tailx",
            "--testbed",
            "--servers",
            "3",
            "--workers",
            "1",
            "--keys",
            "300",
            "--large-keys",
            "5",
            "--large-value-bytes",
            "20000",
            "--dilation",
            "1",
            "--duration",
            "0.5",
            "--warmup",
            "0",
            "--repeats",
            "1",
            "--sim-requests",
            "300",
            "--connections",
            "8",
            "--only",
            "b-10pct",
        ],
    );
    assert!(json["metadata"]["note"]
        .as_str()
        .unwrap_or("")
        .starts_with("EMULATED"));
    assert_eq!(
        json["metadata"]["servers"].as_array().map_or(0, Vec::len),
        3
    );
    let experiments = json["experiments"].as_array().cloned().unwrap_or_default();
    assert_eq!(experiments.len(), 1);
    let experiment = &experiments[0];
    let planners = ["batch", "rein-sbf", "rein-sds", "tailx"];
    let emulated = experiment["emulated"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(emulated.len(), 4);
    for (pooled, name) in emulated.iter().zip(planners) {
        assert_eq!(pooled["planner"], name);
        assert!(pooled["requests"].as_u64().unwrap_or(0) > 0, "{pooled}");
        assert_eq!(pooled["errors"], 0, "{name}");
        assert!(pooled["p99_us"].as_f64().unwrap_or(0.0) > 0.0);
        // One request in five carries two 20 kB values.
        assert!(
            pooled["large_p99_us"].as_f64().unwrap_or(0.0) > 0.0,
            "{name}"
        );
        assert_eq!(pooled["proxy_stats"]["pool_planner"], name);
    }
    let tailx = &emulated[3]["proxy_stats"];
    assert!(
        tailx["pool_tailx_t_small_nanos"]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            > 0.0,
        "{tailx}"
    );
    for run in experiment["runs"].as_array().cloned().unwrap_or_default() {
        assert_eq!(run["hit_ratio"], 1.0, "{run}");
    }
    assert_eq!(experiment["simulated"].as_array().map_or(0, Vec::len), 4);
    assert_eq!(
        experiment["emulated_order"].as_array().map_or(0, Vec::len),
        4
    );
    assert_eq!(
        experiment["simulated_order"].as_array().map_or(0, Vec::len),
        4
    );
    let markdown = std::fs::read_to_string(out.join("results.md")).unwrap_or_default();
    assert!(markdown.starts_with("# EMULATED"));
    let _ = std::fs::remove_dir_all(&out);
}
