//! Multiget scheduling in the cluster simulator: Rein's priorities served as the paper serves
//! them (strict priority) beat batching where Rein should, the rare-elephant mix; `cost-rel`
//! keeps that gain and, in a mix of near-equal requests, demotes no more than its budget;
//! `size-rel` takes the large values out of the way of the requests without one, which the
//! small-tail decomposition shows; size-aware servers (Minos inside each server) take away
//! what no order can, a large value already in service.

use tailtrim_bench::dist::Distribution;
use tailtrim_policy::costspec::CostSpec;
use tailtrim_policy::planner::PlannerKind;
use tailtrim_sim::cluster::{
    run_cluster, run_cluster_with_options, ClusterResult, ClusterRunOptions, ClusterScenario,
    ClusterWorkload, LargeKeys, SizeAwareServers,
};

/// `servers` × 4 workers, uniform keys, service `const=20us,key=5us,dist=exp`.
fn simulate(
    planner: &str,
    servers: usize,
    keys_per_request: Distribution,
    rate_rps: f64,
    (requests, seed): (u64, u64),
) -> ClusterResult {
    let scenario = ClusterScenario {
        servers,
        workers_per_server: 4,
        planner: planner.to_string(),
        workload: ClusterWorkload {
            keys_per_request,
            ..ClusterWorkload::default()
        },
        rate_rps,
        requests,
        service: CostSpec::parse("const=20us,key=5us,dist=exp").unwrap(),
        seed,
        ..ClusterScenario::default()
    };
    run_cluster(&scenario).unwrap()
}

/// 8 servers × 4 workers, 99.5 % 2-key and 0.5 % 500-key multigets, at load ≈ 0.9 (the work
/// of a request: 2 × 25 µs for a mouse, 8 × 332 µs for an elephant, 63 µs on average, over 32
/// workers).
fn rare_elephants(planner: &str) -> ClusterResult {
    let keys = Distribution::Table {
        entries: vec![(2.0, 0.995), (500.0, 0.005)],
        tail: None,
    };
    simulate(planner, 8, keys, 457_000.0, (400_000, 3))
}

#[test]
fn rein_sbf_by_strict_priority_cuts_the_tail_of_the_rare_elephant_mix() {
    let batch = rare_elephants("batch");
    let rein = rare_elephants("rein-sbf");
    assert_p99_at_most(&rein, &batch, 0.8);
    // The mice gain; the elephants pay.
    let mice = |r: &ClusterResult| r.by_keys[&2].summary.p99_us;
    let elephants = |r: &ClusterResult| r.by_keys[&500].summary.p50_us;
    assert!(mice(&rein) < mice(&batch));
    assert!(elephants(&rein) > elephants(&batch));
}

#[test]
fn cost_rel_keeps_its_rare_elephant_gain() {
    assert_p99_at_most(&rare_elephants("cost-rel"), &rare_elephants("batch"), 0.75);
}

/// `run`'s p99 is at most `ratio` × `base`'s.
fn assert_p99_at_most(run: &ClusterResult, base: &ClusterResult, ratio: f64) {
    let (p99, base_p99) = (run.overall.summary.p99_us, base.overall.summary.p99_us);
    assert!(
        p99 <= ratio * base_p99,
        "{} p99 {p99:.0} µs vs {} {base_p99:.0} µs (at most {ratio} ×)",
        run.planner,
        base.planner
    );
}

/// 16 servers × 4 workers, 1 copy, 20-key multigets (bottlenecks of 2–7 keys a request), at a
/// mean server load ≈ 0.85.
fn twenty_keys(planner: &str) -> ClusterResult {
    let keys = Distribution::Fixed { value: 20.0 };
    simulate(planner, 16, keys, 165_000.0, (100_000, 4))
}

#[test]
fn cost_rel_demotes_no_more_than_its_budget_and_keeps_batchs_tail_in_a_twenty_key_mix() {
    // Demoting the requests whose bottleneck is only a little above twice the typical one
    // (≈ 2 % of them) put them behind everything, and the p99 fell among them.
    let batch = twenty_keys("batch");
    let ours = twenty_keys("cost-rel");
    let demoted: f64 = ours
        .by_class
        .iter()
        .filter(|(&class, _)| class > 0)
        .map(|(_, latency)| latency.summary.count as f64)
        .sum::<f64>()
        / ours.measured as f64;
    assert!(
        demoted <= 0.01,
        "demoted {:.2} % of requests",
        demoted * 100.0
    );
    assert_p99_at_most(&ours, &batch, 1.05);
}

/// 16 servers × 1 worker, 20-key multigets of 1 KB values, 20 % of them with 2 keys of 128 KB
/// (`byte=2.5ns`: a large opset costs ≈ 12 × an ordinary one), mean load ≈ 0.7; the planner
/// knows every value's size and the small tail is decomposed.
fn large_values(planner: &str, large_request_share: f64) -> ClusterResult {
    let scenario = ClusterScenario {
        servers: 16,
        workers_per_server: 1,
        planner: planner.to_string(),
        workload: ClusterWorkload {
            keyspace: 1_000_000,
            keys_per_request: Distribution::Fixed { value: 20.0 },
            value_bytes: Distribution::Fixed { value: 1_000.0 },
            large_value_bytes: 1_000,
            large_keys: Some(LargeKeys {
                keyspace: 10_000,
                value_bytes: 128_000,
                request_share: large_request_share,
                key_share: 0.1,
            }),
            ..ClusterWorkload::default()
        },
        rate_rps: 20_000.0,
        requests: 20_000,
        service: CostSpec::parse("const=20us,key=5us,byte=2.5ns,dist=exp").unwrap(),
        seed: 5,
        ..ClusterScenario::default()
    };
    let kind = PlannerKind::from_name(planner).unwrap();
    let options = ClusterRunOptions {
        small_tail_decomposition: true,
        planner_knows_sizes: true,
        ..ClusterRunOptions::default()
    };
    run_cluster_with_options(&scenario, kind.build(), options).unwrap()
}

#[test]
fn the_small_tail_splits_into_waits_behind_large_and_small_work_and_size_rel_removes_the_first() {
    let batch = large_values("batch", 0.2);
    let tail = batch.small_tail.expect("decomposed");
    // No network, no client: a request's latency is its slowest opset's wait and service.
    for split in [tail.tail, tail.all] {
        assert!(split.other_us.abs() < 1.0, "{split:?}");
        assert!(split.wait_behind_large_us > 0.0, "{split:?}");
        assert!(split.wait_behind_small_us > 0.0, "{split:?}");
    }
    assert!(tail.tail.latency_us >= tail.p99_us);
    assert!(tail.large_opset_work_share > 0.1, "{tail:?}");
    // size-rel serves the opsets holding a large value after the others: the requests
    // without one wait less behind large values (not nothing: a large value in service when
    // their opset arrives is not preempted), and their p99 falls.
    let ours = large_values("size-rel", 0.2);
    let our_tail = ours.small_tail.expect("decomposed");
    assert!(
        our_tail.all.wait_behind_large_us < 0.9 * tail.all.wait_behind_large_us,
        "{our_tail:?} vs {tail:?}"
    );
    assert!(
        ours.small.summary.p99_us < batch.small.summary.p99_us,
        "small p99 {} vs batch {}",
        ours.small.summary.p99_us,
        batch.small.summary.p99_us
    );
    // Without large values nothing waits behind them.
    let plain = large_values("batch", 0.0).small_tail.expect("decomposed");
    assert_eq!(plain.all.wait_behind_large_us, 0.0);
    assert_eq!(plain.large_opset_work_share, 0.0);
}

/// 8 servers × 2 workers, 4-key multigets of 1 KB values, 20 % of them with one 128 KB value
/// (`byte=2.5ns`: a large opset ≈ 16 × an ordinary one, about half the work), load ≈ 0.75.
fn two_workers(size_aware: Option<SizeAwareServers>) -> ClusterResult {
    let scenario = ClusterScenario {
        servers: 8,
        workers_per_server: 2,
        planner: "batch".to_string(),
        workload: ClusterWorkload {
            keyspace: 1_000_000,
            keys_per_request: Distribution::Fixed { value: 4.0 },
            value_bytes: Distribution::Fixed { value: 1_000.0 },
            large_value_bytes: 1_000,
            large_keys: Some(LargeKeys {
                keyspace: 10_000,
                value_bytes: 128_000,
                request_share: 0.2,
                key_share: 0.25,
            }),
            ..ClusterWorkload::default()
        },
        rate_rps: 60_000.0,
        requests: 8_000,
        service: CostSpec::parse("const=20us,key=5us,byte=2.5ns,dist=exp").unwrap(),
        size_aware,
        seed: 7,
        ..ClusterScenario::default()
    };
    run_cluster(&scenario).unwrap()
}

#[test]
fn size_aware_servers_keep_the_small_requests_out_from_behind_large_values() {
    let shared = two_workers(None);
    assert!(shared.size_aware.is_none());
    let minos = two_workers(Some(SizeAwareServers {
        threshold_bytes: Some(64 * 1024),
        ..SizeAwareServers::default()
    }));
    let report = minos.size_aware.clone().expect("size-aware servers report");
    // One opset in ~20 holds the large value; only those are handed off.
    let share = report.handoffs as f64 / report.opsets as f64;
    assert!((0.03..0.1).contains(&share), "{report:?}");
    assert!(report.final_small_workers.iter().all(|&small| small == 1));
    // With a worker kept for large values, a small opset never waits behind one: the small
    // requests' tail falls well below the shared queue's.
    assert!(
        minos.small.summary.p99_us < 0.7 * shared.small.summary.p99_us,
        "small p99 {} vs shared {}",
        minos.small.summary.p99_us,
        shared.small.summary.p99_us
    );
}
