//! Behaviour of the simulator through its public API: queueing theory, determinism, the
//! per-connection order, the routing rules of each policy, conservation.

use tailtrim_bench::workload::WorkloadSpec;
use tailtrim_policy::dispatch::early_binding_worker;
use tailtrim_policy::sizeaware::SizeAwareConfig;
use tailtrim_sim::engine::{run, RequestRecord, RunConfig, RunResult, Steering};
use tailtrim_sim::{CostModel, Nanos, Policy, ServiceModel, Trace};

fn minos() -> WorkloadSpec {
    match WorkloadSpec::preset("minos") {
        Ok(spec) => spec,
        Err(error) => panic!("{error}"),
    }
}

fn trace(requests: usize, connections: u32, service: ServiceModel, seed: u64) -> Trace {
    match Trace::generate(&minos(), requests, connections, &service, seed) {
        Ok(trace) => trace,
        Err(error) => panic!("{error}"),
    }
}

fn simulate(trace: &Trace, config: &RunConfig) -> RunResult {
    match run(trace, config) {
        Ok(result) => result,
        Err(error) => panic!("{error}"),
    }
}

fn recorded(policy: Policy, cores: usize, rate: f64) -> RunConfig {
    RunConfig {
        record_requests: true,
        ..RunConfig::new(policy, cores, rate, CostModel::default())
    }
}

fn mean_sojourn_us(records: &[RequestRecord]) -> f64 {
    let total: f64 = records
        .iter()
        .map(|record| (record.delivered - record.arrival).as_micros_f64())
        .sum();
    total / records.len() as f64
}

/// One core, Poisson arrivals, exponential service: M/M/1, mean sojourn 1 / (μ − λ).
#[test]
fn one_core_with_exponential_service_is_mm1() {
    let mean_service_ns = 10_000.0; // μ = 100 000 /s
    for (rate, tolerance) in [(50_000.0, 0.04), (80_000.0, 0.10)] {
        let trace = trace(
            400_000,
            1,
            ServiceModel::Exponential {
                mean_ns: mean_service_ns,
            },
            11,
        );
        let config = RunConfig {
            warmup_fraction: 0.05,
            ..recorded(Policy::Pinned, 1, rate)
        };
        let result = simulate(&trace, &config);
        let measured: Vec<RequestRecord> = result.records[20_000..].to_vec();
        let expected_us = 1e6 / (1e9 / mean_service_ns - rate);
        let mean = mean_sojourn_us(&measured);
        assert!(
            (mean - expected_us).abs() / expected_us < tolerance,
            "rate {rate}: mean sojourn {mean:.1} µs, M/M/1 says {expected_us:.1} µs"
        );
        // Utilization ρ = λ/μ.
        let rho = rate * mean_service_ns / 1e9;
        assert!(
            (result.utilization[0] - rho).abs() < 0.02,
            "{:?}",
            result.utilization
        );
        // Mean queue (waiting only) L_q = ρ² / (1 − ρ).
        let lq = rho * rho / (1.0 - rho);
        assert!(
            (result.mean_queued - lq).abs() / lq < tolerance * 1.5,
            "mean queued {} vs {lq}",
            result.mean_queued
        );
    }
}

#[test]
fn same_seed_same_result_other_seed_differs() {
    let service = ServiceModel::Cost(CostModel::default());
    for policy in Policy::ALL {
        let config = RunConfig::new(policy, 4, 250_000.0, CostModel::default());
        let first = simulate(&trace(30_000, 64, service, 5), &config);
        let again = simulate(&trace(30_000, 64, service, 5), &config);
        assert_eq!(first, again, "{policy}");
        let other = simulate(&trace(30_000, 64, service, 6), &config);
        assert_ne!(
            first.small, other.small,
            "{policy}: another seed gave the same latencies"
        );
    }
}

/// Replies of a connection leave in request order, under every policy, even when requests
/// of one connection run on different cores in parallel.
#[test]
fn connection_order_is_preserved_under_every_policy() {
    let trace = trace(40_000, 48, ServiceModel::Cost(CostModel::default()), 3);
    for policy in Policy::ALL {
        let result = simulate(&trace, &recorded(policy, 4, 450_000.0));
        assert_eq!(result.records.len(), 40_000, "{policy}");
        let mut last: Vec<Option<(u32, Nanos)>> = vec![None; 48];
        for record in &result.records {
            assert!(record.delivered >= record.finished, "{policy}: {record:?}");
            assert!(record.finished >= record.started, "{policy}: {record:?}");
            assert!(record.started >= record.arrival, "{policy}: {record:?}");
            if let Some((seq, at)) = last[record.conn as usize] {
                assert_eq!(
                    record.conn_seq,
                    seq + 1,
                    "{policy}: connection {} out of order",
                    record.conn
                );
                assert!(
                    record.delivered >= at,
                    "{policy}: reply overtook an earlier one"
                );
            } else {
                assert_eq!(record.conn_seq, 0, "{policy}");
            }
            last[record.conn as usize] = Some((record.conn_seq, record.delivered));
        }
        // Some requests did finish out of order and had to wait (parallel execution).
        if matches!(
            policy,
            Policy::SizeAware | Policy::EarlyBinding | Policy::LateBinding
        ) {
            assert!(
                result
                    .records
                    .iter()
                    .any(|record| record.delivered > record.finished),
                "{policy}: no reply ever waited for an earlier one"
            );
        }
    }
}

/// With the server's per-connection execution queue, late binding never runs two requests
/// of a connection at once: each finishes before the next, so no reply waits. Early binding
/// is not serialized (the server runs single-key requests side by side on their keys' cores).
#[test]
fn serialized_connections_execute_one_request_at_a_time() {
    let trace = trace(30_000, 48, ServiceModel::Cost(CostModel::default()), 3);
    for (policy, steering) in [(Policy::LateBinding, Steering::Nic)] {
        let config = RunConfig {
            serialize_connections: true,
            steering,
            ..recorded(policy, 4, 300_000.0)
        };
        let result = simulate(&trace, &config);
        assert_eq!(result.records.len(), 30_000);
        let mut last_finish: Vec<Option<Nanos>> = vec![None; 48];
        for record in &result.records {
            assert_eq!(record.delivered, record.finished, "{policy}: {record:?}");
            if let Some(previous) = last_finish[record.conn as usize] {
                assert!(record.finished > previous, "{policy}: {record:?}");
            }
            last_finish[record.conn as usize] = Some(record.finished);
        }
    }
}

#[test]
fn size_aware_with_a_fixed_threshold_sends_exactly_the_large_requests_to_large_cores() {
    let threshold = 4_000;
    let trace = trace(40_000, 64, ServiceModel::Cost(CostModel::default()), 9);
    let config = RunConfig {
        sizeaware: SizeAwareConfig {
            fixed_threshold_bytes: Some(threshold),
            fixed_small_workers: Some(3),
            ..SizeAwareConfig::with_workers(5)
        },
        ..recorded(Policy::SizeAware, 5, 300_000.0)
    };
    let result = simulate(&trace, &config);
    let large = result.records.iter().filter(|r| r.size > threshold).count();
    assert!(large > 50, "too few large requests to test: {large}");
    for record in &result.records {
        if record.size > threshold {
            assert!(record.handed_off && record.served_by >= 3, "{record:?}");
        } else {
            assert!(!record.handed_off && record.served_by < 3, "{record:?}");
        }
    }
    assert_eq!(result.handoffs, large as u64);
    assert!(result
        .decisions
        .iter()
        .all(|d| d.threshold_bytes == threshold && d.small_workers == 3));
}

/// With `large_workers_help`, an idle large core takes small requests (never the other way
/// round): the same trace at a rate the 3 small cores cannot carry alone puts small requests
/// on the large cores only when they help, and then carries more.
#[test]
fn idle_large_cores_take_small_requests_only_when_they_help() {
    let threshold = 4_000;
    let trace = trace(40_000, 64, ServiceModel::Cost(CostModel::default()), 9);
    let config = |help: bool| RunConfig {
        sizeaware: SizeAwareConfig {
            fixed_threshold_bytes: Some(threshold),
            fixed_small_workers: Some(3),
            large_workers_help: help,
            ..SizeAwareConfig::with_workers(5)
        },
        ..recorded(Policy::SizeAware, 5, 1_000_000.0)
    };
    let small_on_large = |result: &RunResult| {
        result
            .records
            .iter()
            .filter(|r| r.size <= threshold && r.served_by >= 3)
            .count()
    };
    let alone = simulate(&trace, &config(false));
    let helped = simulate(&trace, &config(true));
    assert_eq!(small_on_large(&alone), 0);
    assert!(
        small_on_large(&helped) > 1000,
        "{}",
        small_on_large(&helped)
    );
    for record in helped.records.iter().filter(|r| r.size > threshold) {
        assert!(record.handed_off && record.served_by >= 3, "{record:?}");
    }
    assert!(
        helped.achieved_rps > alone.achieved_rps,
        "{} vs {}",
        helped.achieved_rps,
        alone.achieved_rps
    );
}

#[test]
fn size_aware_controller_learns_a_threshold_and_split_from_the_sizes() {
    let trace = trace(200_000, 128, ServiceModel::Cost(CostModel::default()), 2);
    let result = simulate(
        &trace,
        &RunConfig::new(Policy::SizeAware, 8, 400_000.0, CostModel::default()),
    );
    assert!(result.epochs >= 5, "epochs {}", result.epochs);
    let last = result.decisions.last().copied();
    let Some(last) = last else {
        panic!("no decision");
    };
    // 99th percentile of accessed sizes: a small item (0.5 % are large), well below 16 KiB.
    assert!(last.threshold_bytes < 2_000, "{last:?}");
    assert!((1..8).contains(&last.small_workers), "{last:?}");
    assert!(result.handoffs > 0);
}

#[test]
fn early_binding_routes_by_key_hash() {
    let trace = trace(20_000, 32, ServiceModel::Cost(CostModel::default()), 4);
    for steering in [Steering::Nic, Steering::Software] {
        let config = RunConfig {
            steering,
            ..recorded(Policy::EarlyBinding, 6, 200_000.0)
        };
        check_key_hash_routing(&trace, &simulate(&trace, &config));
    }
}

/// Software steering costs the home core a parse and a hand-off: same routing, less capacity
/// (uniform popularity, so no single hot core limits both).
#[test]
fn software_steering_costs_capacity() {
    let mut spec = minos();
    let uniform = tailtrim_bench::WorkloadOverrides {
        popularity: Some(tailtrim_bench::workload::Popularity::Uniform),
        ..tailtrim_bench::WorkloadOverrides::default()
    };
    if let Err(error) = spec.apply(&uniform) {
        panic!("{error}");
    }
    let service = ServiceModel::Cost(CostModel::default());
    let trace = match Trace::generate(&spec, 40_000, 64, &service, 4) {
        Ok(trace) => trace,
        Err(error) => panic!("{error}"),
    };
    let nic = simulate(
        &trace,
        &RunConfig::new(Policy::EarlyBinding, 4, 2e6, CostModel::default()),
    );
    let software = simulate(
        &trace,
        &RunConfig {
            steering: Steering::Software,
            ..RunConfig::new(Policy::EarlyBinding, 4, 2e6, CostModel::default())
        },
    );
    assert!(
        software.achieved_rps < 0.97 * nic.achieved_rps,
        "software {} vs nic {}",
        software.achieved_rps,
        nic.achieved_rps
    );
}

fn check_key_hash_routing(trace: &Trace, result: &RunResult) {
    let by_position: std::collections::HashMap<(u32, u32), usize> = trace
        .requests
        .iter()
        .map(|request| {
            (
                (request.conn, request.conn_seq),
                early_binding_worker(request.key_hash, 6),
            )
        })
        .collect();
    let mut used = [0usize; 6];
    for record in &result.records {
        let expected = by_position.get(&(record.conn, record.conn_seq)).copied();
        assert_eq!(Some(record.served_by), expected, "{record:?}");
        used[record.served_by] += 1;
    }
    assert!(used.iter().all(|count| *count > 1_000), "{used:?}");
}

#[test]
fn pinned_serves_a_connection_on_one_core_and_stealing_moves_some() {
    let trace = trace(30_000, 16, ServiceModel::Cost(CostModel::default()), 8);
    let pinned = simulate(&trace, &recorded(Policy::Pinned, 4, 400_000.0));
    assert!(pinned
        .records
        .iter()
        .all(|record| record.served_by == record.conn as usize % 4));
    let stealing = simulate(&trace, &recorded(Policy::Stealing, 4, 400_000.0));
    let moved = stealing
        .records
        .iter()
        .filter(|record| record.served_by != record.conn as usize % 4)
        .count();
    assert!(
        stealing.steals > 0 && moved > 0,
        "steals {} moved {moved}",
        stealing.steals
    );
    // Stealing never does worse than pinning on the same trace at this load.
    assert!(
        stealing.small.p99_us <= pinned.small.p99_us,
        "{} > {}",
        stealing.small.p99_us,
        pinned.small.p99_us
    );
}

/// Below saturation every request completes and the achieved rate is the offered one.
#[test]
fn all_requests_complete_below_saturation() {
    let trace = trace(50_000, 64, ServiceModel::Cost(CostModel::default()), 12);
    let capacity = 4.0 * 1e9 / trace.mean_work_ns();
    let cost = CostModel::default();
    // Late binding: three workers, and a dispatcher that serves at most 1 / dispatch cost.
    let dispatcher = 1e9 / (cost.parse_share * cost.fixed_ns + cost.dispatch_ns);
    for policy in Policy::ALL {
        let rate = match policy {
            Policy::LateBinding => 0.5 * dispatcher.min(0.75 * capacity),
            _ => 0.5 * capacity,
        };
        let result = simulate(&trace, &recorded(policy, 4, rate));
        assert_eq!(result.records.len(), 50_000, "{policy}");
        let measured = result.small.count + result.large.count;
        assert_eq!(measured, 45_000, "{policy}");
        assert!(
            (result.achieved_rps - rate).abs() / rate < 0.05,
            "{policy}: achieved {} offered {rate}",
            result.achieved_rps
        );
        let busy: f64 = result.utilization.iter().sum();
        assert!(
            busy > 0.0 && result.utilization.iter().all(|u| *u <= 1.0 + 1e-9),
            "{policy}"
        );
    }
    // Over capacity, achieved throughput stays near the capacity instead of the offered rate.
    let over = simulate(&trace, &recorded(Policy::Pinned, 4, 2.0 * capacity));
    assert!(
        over.achieved_rps < 1.1 * capacity,
        "{} vs {capacity}",
        over.achieved_rps
    );
    assert_eq!(over.records.len(), 50_000);
}

#[test]
fn late_binding_needs_two_cores_and_uses_the_dispatcher() {
    let trace = trace(5_000, 8, ServiceModel::Cost(CostModel::default()), 1);
    assert!(run(
        &trace,
        &RunConfig::new(Policy::LateBinding, 1, 1_000.0, CostModel::default())
    )
    .is_err());
    let result = simulate(
        &trace,
        &RunConfig::new(Policy::LateBinding, 3, 100_000.0, CostModel::default()),
    );
    assert_eq!(result.utilization.len(), 3);
    assert!(result.utilization[2] > 0.0);
}

/// Software-steered early binding runs the server worker's loop: a home core alternates a turn
/// of its queue (the jobs queued when the turn starts) with a read of its connections. Four
/// 1 ms requests arrive within a few microseconds on two cores: r0, r1 and r3 on connection 1
/// (home core 1) for a key of core 0, r2 on connection 0 (home core 0) for a key of core 1.
/// Core 0's first turn holds r0 alone (it was idle: the others come during it); then it reads
/// r2 and hands it to core 1, so r2 finishes after about 2 ms. A core that emptied its queue
/// before reading (r1 and r3 came while it ran r0) would read r2 after about 3 ms and finish
/// it after about 4 ms. r1 and r3 take core 0's next turn: r3 finishes after about 3 ms.
#[test]
fn software_steering_alternates_a_queue_turn_with_a_read() {
    let to_core = |core: usize| if core == 0 { 0 } else { u64::MAX };
    let request = |conn: u32, conn_seq: u32, owner: usize| tailtrim_sim::TraceRequest {
        conn,
        conn_seq,
        kind: tailtrim_bench::workload::OpKind::Get,
        size: 100,
        wire_bytes: 130,
        key_hash: to_core(owner),
        large: false,
        work_ns: 1_000_000,
        transfer_ns: 1_000_000,
    };
    let trace = Trace {
        requests: vec![
            request(1, 0, 0),
            request(1, 1, 0),
            request(0, 0, 1),
            request(1, 2, 0),
        ],
        connections: 2,
        arrival: tailtrim_bench::workload::Arrival::Poisson,
        arrival_seed: 3,
    };
    let cost = CostModel {
        fixed_ns: 0.0,
        per_byte_ns: 0.0,
        handoff_ns: 0.0,
        ..CostModel::default()
    };
    let config = RunConfig {
        steering: Steering::Software,
        warmup_fraction: 0.0,
        record_requests: true,
        ..RunConfig::new(Policy::EarlyBinding, 2, 1e6, cost)
    };
    let result = simulate(&trace, &config);
    let sojourn_ms = |conn: u32, conn_seq: u32| -> (f64, usize) {
        match result
            .records
            .iter()
            .find(|record| record.conn == conn && record.conn_seq == conn_seq)
        {
            Some(record) => (
                (record.finished - record.arrival).as_micros_f64() / 1e3,
                record.served_by,
            ),
            None => panic!("no record of ({conn}, {conn_seq})"),
        }
    };
    let (r2, r2_core) = sojourn_ms(0, 0);
    assert_eq!(r2_core, 1);
    assert!(r2 > 1.9 && r2 < 2.1, "r2 finished after {r2:.3} ms");
    let (r3, r3_core) = sojourn_ms(1, 2);
    assert_eq!(r3_core, 0);
    assert!(r3 > 2.9 && r3 < 3.1, "r3 finished after {r3:.3} ms");
}
