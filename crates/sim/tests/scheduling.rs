//! Multiget scheduling in the cluster simulator: Rein's priorities served as the paper serves
//! them (strict priority) beat batching where Rein should, the rare-elephant mix.

use tailtrim_bench::dist::Distribution;
use tailtrim_policy::costspec::CostSpec;
use tailtrim_sim::cluster::{run_cluster, ClusterResult, ClusterScenario, ClusterWorkload};

/// 8 servers × 4 workers, 99.5 % 2-key and 0.5 % 500-key multigets, at load ≈ 0.9 (the work
/// of a request: 2 × 25 µs for a mouse, 8 × 332 µs for an elephant, 63 µs on average, over 32
/// workers).
fn rare_elephants(planner: &str) -> ClusterResult {
    let scenario = ClusterScenario {
        servers: 8,
        workers_per_server: 4,
        planner: planner.to_string(),
        workload: ClusterWorkload {
            keyspace: 100_000,
            keys_per_request: Distribution::Table {
                entries: vec![(2.0, 0.995), (500.0, 0.005)],
                tail: None,
            },
            ..ClusterWorkload::default()
        },
        rate_rps: 457_000.0,
        requests: 400_000,
        service: CostSpec::parse("const=20us,key=5us,dist=exp").unwrap(),
        seed: 3,
        ..ClusterScenario::default()
    };
    run_cluster(&scenario).unwrap()
}

#[test]
fn rein_sbf_by_strict_priority_cuts_the_tail_of_the_rare_elephant_mix() {
    let batch = rare_elephants("batch");
    let rein = rare_elephants("rein-sbf");
    let (batch_p99, rein_p99) = (batch.overall.summary.p99_us, rein.overall.summary.p99_us);
    assert!(
        rein_p99 <= 0.8 * batch_p99,
        "rein-sbf p99 {rein_p99:.0} µs vs batch {batch_p99:.0} µs"
    );
    // The mice gain; the elephants pay.
    let mice = |r: &ClusterResult| r.by_keys[&2].summary.p99_us;
    let elephants = |r: &ClusterResult| r.by_keys[&500].summary.p50_us;
    assert!(mice(&rein) < mice(&batch));
    assert!(elephants(&rein) > elephants(&batch));
}
