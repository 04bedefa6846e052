//! The cluster simulator against queueing theory, and its bookkeeping invariants.

use tailtrim_bench::dist::Distribution;
use tailtrim_policy::costspec::{CostSpec, Dispersion};
use tailtrim_policy::planner::{Action, ClusterView, Fetch, PlanRequest, Planner, PLANNER_NAMES};
use tailtrim_sim::cluster::{
    run_cluster, run_cluster_with, run_cluster_with_options, ArrivalProcess, ClosedLoop,
    ClusterRunOptions, ClusterScenario, ClusterWorkload, WorkView,
};

const SERVICE_NS: f64 = 10_000.0;

fn single_key(servers: usize, rate: f64, requests: u64) -> ClusterScenario {
    ClusterScenario {
        servers,
        rate_rps: rate,
        requests,
        service: CostSpec::constant(SERVICE_NS, Dispersion::Exponential),
        seed: 7,
        ..ClusterScenario::default()
    }
}

fn close(measured: f64, expected: f64, tolerance: f64, what: &str) {
    let error = (measured - expected).abs() / expected;
    assert!(
        error < tolerance,
        "{what}: measured {measured:.2}, expected {expected:.2} (error {:.1} %)",
        error * 100.0
    );
}

#[test]
fn one_server_is_an_mm1_queue() {
    // M/M/1 at ρ = 0.5: sojourn time ~ Exp(μ − λ), mean S/(1−ρ) = 20 µs, p99 = ln(100) × 20 µs.
    let result = run_cluster(&single_key(1, 50_000.0, 400_000)).unwrap();
    let mean = SERVICE_NS / 1e3 / 0.5;
    close(result.overall.summary.mean_us, mean, 0.03, "mean");
    close(
        result.overall.summary.p99_us,
        mean * 100f64.ln(),
        0.05,
        "p99",
    );
    close(result.achieved_rps, 50_000.0, 0.02, "throughput");
    close(result.server_utilization[0], 0.5, 0.02, "utilization");
}

#[test]
fn two_server_fork_join_matches_nelson_and_tantawi() {
    // Every request reads 32 keys, so it forks to both servers (each an M/M/1 at ρ = 0.5).
    // Nelson & Tantawi (IEEE ToC 1988): exact mean for two servers = (12 − ρ)/8 × S/(1 − ρ).
    let scenario = ClusterScenario {
        workload: ClusterWorkload {
            keys_per_request: Distribution::Fixed { value: 32.0 },
            ..ClusterWorkload::default()
        },
        ..single_key(2, 50_000.0, 300_000)
    };
    let result = run_cluster(&scenario).unwrap();
    assert_eq!(
        result.fetches,
        2 * result.requests,
        "every request forks to both"
    );
    let rho = 0.5;
    let expected = (12.0 - rho) / 8.0 * SERVICE_NS / 1e3 / (1.0 - rho);
    close(
        result.overall.summary.mean_us,
        expected,
        0.03,
        "fork-join mean",
    );
    // And it is slower than one branch alone (20 µs): the max of two.
    assert!(result.overall.summary.mean_us > 25.0);
}

#[test]
fn light_load_fork_join_is_the_max_of_independent_services() {
    // ρ → 0: a request's latency is the max of N exponential services, mean S × H_N.
    let servers = 4;
    let scenario = ClusterScenario {
        workload: ClusterWorkload {
            keys_per_request: Distribution::Fixed { value: 64.0 },
            ..ClusterWorkload::default()
        },
        ..single_key(servers, 100.0, 100_000)
    };
    let result = run_cluster(&scenario).unwrap();
    let harmonic: f64 = (1..=servers).map(|i| 1.0 / i as f64).sum();
    close(
        result.overall.summary.mean_us,
        SERVICE_NS / 1e3 * harmonic,
        0.03,
        "max of 4",
    );
}

#[test]
fn network_and_client_costs_add_where_they_should() {
    // Fixed costs, uniform arrivals far apart: latency = client send + 2 × network + service
    // + client receive, exactly.
    let scenario = ClusterScenario {
        servers: 3,
        rate_rps: 1_000.0,
        arrival: ArrivalProcess::Uniform,
        requests: 2_000,
        service: CostSpec::parse("const=10us,key=1us").unwrap(),
        network: CostSpec::parse("const=50us").unwrap(),
        client_send: CostSpec::parse("const=3us").unwrap(),
        client_recv: CostSpec::parse("const=2us").unwrap(),
        ..ClusterScenario::default()
    };
    let result = run_cluster(&scenario).unwrap();
    let expected = 3.0 + 50.0 + 11.0 + 50.0 + 2.0;
    assert!(
        (result.overall.summary.p50_us - expected).abs() < 0.2,
        "{:?}",
        result.overall.summary
    );
    assert!((result.overall.summary.max_us - expected).abs() < 0.2);
}

#[test]
fn same_seed_same_result_other_seed_other_result() {
    let scenario = ClusterScenario {
        servers: 8,
        replicas: 2,
        workload: ClusterWorkload {
            keys_per_request: Distribution::Uniform {
                min: 1.0,
                max: 20.0,
            },
            value_bytes: Distribution::Exponential { mean: 2_000.0 },
            ..ClusterWorkload::default()
        },
        rate_rps: 20_000.0,
        requests: 30_000,
        service: CostSpec::parse("const=5us,key=1us,byte=1ns,dist=lognormal:0.8").unwrap(),
        network: CostSpec::parse("const=20us,dist=exp").unwrap(),
        client_send: CostSpec::parse("const=1us").unwrap(),
        ..ClusterScenario::default()
    };
    let a = run_cluster(&scenario).unwrap();
    let b = run_cluster(&scenario).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    let c = run_cluster(&ClusterScenario {
        seed: 99,
        ..scenario
    })
    .unwrap();
    assert_ne!(a.overall.summary.p99_us, c.overall.summary.p99_us);
}

#[test]
fn every_key_is_served_exactly_once_and_every_request_completes() {
    let scenario = ClusterScenario {
        servers: 16,
        replicas: 3,
        workload: ClusterWorkload {
            keyspace: 1_000,
            popularity: "zipf:0.99".parse().unwrap(),
            keys_per_request: Distribution::Uniform {
                min: 1.0,
                max: 40.0,
            },
            value_bytes: Distribution::Fixed { value: 3_000.0 },
            ..ClusterWorkload::default()
        },
        rate_rps: 30_000.0,
        requests: 20_000,
        ..ClusterScenario::default()
    };
    let result = run_cluster(&scenario).unwrap();
    assert_eq!(result.keys_unavailable, 0);
    assert_eq!(result.keys_served, result.keys_requested);
    let by_keys: u64 = result.by_keys.values().map(|c| c.summary.count).sum();
    assert_eq!(by_keys, result.measured);
    assert_eq!(
        result.small.summary.count + result.large.summary.count,
        result.measured
    );
    // Every value is 3000 B > 1499 B: every request is large.
    assert_eq!(result.small.summary.count, 0);
    assert_eq!(result.measured, 18_000);
    assert!(result.fetches <= 16 * result.requests);
}

/// A planner that holds every fetch 100 µs and marks single-key reads urgent: checks that
/// `not_before` and `priority` reach the simulated servers.
struct DelayAndPrioritize;

impl Planner for DelayAndPrioritize {
    fn name(&self) -> &'static str {
        "test-delay"
    }
    fn plan(&mut self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> Vec<Action> {
        let mut replicas = Vec::new();
        view.replicas(request.keys[0], &mut replicas);
        vec![Action::Fetch(Fetch {
            backend: replicas[0],
            keys: (0..request.keys.len() as u32).collect(),
            not_before: Some(request.now.plus_nanos(100_000)),
            priority: Some(if request.keys.len() == 1 { 0 } else { 9 }),
        })]
    }
}

#[test]
fn planner_delays_and_priorities_are_honoured() {
    let scenario = ClusterScenario {
        servers: 1,
        rate_rps: 1_000.0,
        arrival: ArrivalProcess::Uniform,
        requests: 1_000,
        service: CostSpec::parse("const=10us").unwrap(),
        ..ClusterScenario::default()
    };
    let result = run_cluster_with(&scenario, Box::new(DelayAndPrioritize)).unwrap();
    assert_eq!(result.planner, "test-delay");
    assert!((result.overall.summary.p50_us - 110.0).abs() < 0.2);

    // Overloaded single server with two classes: the urgent one waits far less.
    let mixed = ClusterScenario {
        rate_rps: 95_000.0,
        arrival: ArrivalProcess::Poisson,
        requests: 100_000,
        workload: ClusterWorkload {
            keys_per_request: Distribution::Table {
                entries: vec![(1.0, 0.5), (2.0, 0.5)],
                tail: None,
            },
            ..ClusterWorkload::default()
        },
        ..scenario
    };
    let result = run_cluster_with(&mixed, Box::new(DelayAndPrioritize)).unwrap();
    let urgent = result.by_keys[&1].summary.p99_us;
    let other = result.by_keys[&2].summary.p99_us;
    assert!(urgent * 3.0 < other, "urgent p99 {urgent} vs {other}");
}

#[test]
fn every_registered_planner_runs_and_conserves_keys() {
    for name in PLANNER_NAMES {
        let scenario = ClusterScenario {
            servers: 8,
            replicas: 2,
            planner: name.to_string(),
            workload: ClusterWorkload {
                keyspace: 5_000,
                keys_per_request: Distribution::Table {
                    entries: vec![(1.0, 0.6), (8.0, 0.3), (100.0, 0.1)],
                    tail: None,
                },
                value_bytes: Distribution::Exponential { mean: 1_500.0 },
                ..ClusterWorkload::default()
            },
            rate_rps: 2_000.0,
            requests: 5_000,
            network: CostSpec::parse("const=20us,byte=1ns").unwrap(),
            ..ClusterScenario::default()
        };
        let result = run_cluster(&scenario).unwrap();
        assert_eq!(result.planner, name);
        assert_eq!(result.requests, 5_000, "{name}");
        assert_eq!(
            result.keys_served + result.keys_unavailable,
            result.keys_requested,
            "{name}"
        );
    }
}

#[test]
fn bad_scenarios_are_rejected() {
    for scenario in [
        ClusterScenario {
            servers: 0,
            ..ClusterScenario::default()
        },
        ClusterScenario {
            replicas: 5,
            ..ClusterScenario::default()
        },
        ClusterScenario {
            rate_rps: 0.0,
            ..ClusterScenario::default()
        },
        ClusterScenario {
            planner: "nope".into(),
            ..ClusterScenario::default()
        },
    ] {
        assert!(run_cluster(&scenario).is_err());
    }
}

#[test]
fn query_slots_serialize_queries_and_setup_is_paid_per_query() {
    // One key per server: a 2-key request on 2 servers makes 2 queries. With one query slot
    // they run one after the other, each paying setup + network + service.
    let scenario = ClusterScenario {
        servers: 2,
        workload: ClusterWorkload {
            keyspace: 2_000,
            keys_per_request: Distribution::Fixed { value: 1.0 },
            ..ClusterWorkload::default()
        },
        rate_rps: 1_000.0,
        arrival: ArrivalProcess::Uniform,
        requests: 1_000,
        service: CostSpec::parse("const=10us").unwrap(),
        network: CostSpec::parse("const=5us").unwrap(),
        query_threads: 1,
        query_setup: CostSpec::parse("const=30us").unwrap(),
        ..ClusterScenario::default()
    };
    let single = run_cluster(&scenario).unwrap();
    assert!((single.overall.summary.mean_us - 50.0).abs() < 0.01);
    assert_eq!(single.queries, single.fetches);
    // 40 keys spread over both servers: 2 queries, serialized by the one slot.
    let spread = ClusterScenario {
        workload: ClusterWorkload {
            keys_per_request: Distribution::Fixed { value: 40.0 },
            ..scenario.workload.clone()
        },
        ..scenario.clone()
    };
    let serialized = run_cluster(&spread).unwrap();
    assert_eq!(serialized.fetches, 2 * serialized.requests);
    assert!((serialized.overall.summary.mean_us - 100.0).abs() < 0.01);
    let parallel = run_cluster(&ClusterScenario {
        query_threads: 2,
        ..spread
    })
    .unwrap();
    assert!((parallel.overall.summary.mean_us - 50.0).abs() < 0.01);
}

#[test]
fn mice_merge_into_queries_being_set_up_up_to_the_merge_level() {
    use tailtrim_policy::chisel::{ChiselPlanner, DEFAULT_ELEPHANT_THRESHOLD};
    use tailtrim_policy::planner::QueryShape;
    let scenario = ClusterScenario {
        servers: 1,
        workers_per_server: 4,
        planner: "chisel".to_string(),
        rate_rps: 50_000.0,
        requests: 20_000,
        service: CostSpec::parse("const=5us,key=1us").unwrap(),
        query_threads: 16,
        query_setup: CostSpec::parse("const=100us").unwrap(),
        ..ClusterScenario::default()
    };
    let shape = |merge_level| QueryShape {
        merge_level,
        chunk_size: u32::MAX,
        elephant_threshold: DEFAULT_ELEPHANT_THRESHOLD,
    };
    let alone = run_cluster_with(&scenario, Box::new(ChiselPlanner::new(shape(1)))).unwrap();
    assert_eq!(alone.merged_fetches, 0);
    assert_eq!(alone.queries, alone.fetches);
    let merged = run_cluster_with(&scenario, Box::new(ChiselPlanner::new(shape(4)))).unwrap();
    assert!(merged.merged_fetches > 0);
    assert_eq!(merged.queries + merged.merged_fetches, merged.fetches);
    // At most 4 fetches per query, and every key still served once.
    assert!(merged.queries * 4 >= merged.fetches);
    assert_eq!(merged.keys_served, merged.keys_requested);
    // 16 slots each held 100 µs + service: 50k single queries/s would need 5+ s of slot time
    // per second; merging is what keeps the client stable.
    assert!(merged.overall.summary.mean_us < alone.overall.summary.mean_us);
}

#[test]
fn a_closed_loop_keeps_one_request_per_client_in_flight() {
    // 8 clients, no think time, one M/M/1 server: Little's law, N = X × R, holds exactly for
    // the requests in the system, and the server is never idle while a client waits.
    let scenario = ClusterScenario {
        servers: 1,
        closed_loop: Some(ClosedLoop {
            clients: 8,
            think_us: 0.0,
        }),
        requests: 50_000,
        service: CostSpec::constant(SERVICE_NS, Dispersion::Exponential),
        seed: 5,
        ..ClusterScenario::default()
    };
    let result = run_cluster(&scenario).unwrap();
    assert_eq!(result.requests, 50_000);
    let in_flight = result.achieved_rps * result.overall.summary.mean_us * 1e-6;
    close(in_flight, 8.0, 0.03, "clients in flight");
    close(result.server_utilization[0], 1.0, 0.02, "utilization");
    // With think time the clients offer less: 8 clients thinking 70 µs on average against a
    // 10 µs server (machine-repairman model: utilisation well below 1).
    let thinking = run_cluster(&ClusterScenario {
        closed_loop: Some(ClosedLoop {
            clients: 8,
            think_us: 70.0,
        }),
        ..scenario
    })
    .unwrap();
    let cycle_us = 70.0 + thinking.overall.summary.mean_us;
    close(
        thinking.achieved_rps,
        8.0 / cycle_us * 1e6,
        0.03,
        "throughput",
    );
    assert!(thinking.server_utilization[0] < 0.9);
}

/// Chisel, asking the online analyzer to span four epochs (as `auto` does while Chisel is not
/// its choice).
struct SpanningChisel(tailtrim_policy::chisel::ChiselPlanner);

impl Planner for SpanningChisel {
    fn name(&self) -> &'static str {
        "test-spanning-chisel"
    }
    fn plan(&mut self, request: &PlanRequest<'_>, view: &dyn ClusterView) -> Vec<Action> {
        self.0.plan(request, view)
    }
    fn merge_limit(&self, keys: usize) -> u32 {
        self.0.merge_limit(keys)
    }
    fn shape(&self) -> Option<tailtrim_policy::planner::QueryShape> {
        self.0.shape()
    }
    fn set_shape(&mut self, shape: tailtrim_policy::planner::QueryShape) {
        self.0.set_shape(shape);
    }
    fn analyzer_epochs(&self) -> u32 {
        4
    }
}

#[test]
fn the_online_analyzer_spans_the_epochs_its_planner_asks_for() {
    use tailtrim_policy::chisel::{ChiselPlanner, DEFAULT_SHAPE};
    use tailtrim_sim::cluster::OnlineAnalysis;
    // 10,000 requests at 10,000/s: about 100 analyzer epochs of 10 ms.
    let scenario = ClusterScenario {
        online_analysis: Some(OnlineAnalysis {
            epoch_secs: 0.01,
            config: Default::default(),
        }),
        workload: ClusterWorkload {
            keys_per_request: Distribution::Fixed { value: 4.0 },
            ..ClusterWorkload::default()
        },
        ..single_key(4, 10_000.0, 10_000)
    };
    let every = run_cluster_with(&scenario, Box::new(ChiselPlanner::new(DEFAULT_SHAPE)))
        .unwrap()
        .analysis
        .expect("analysis")
        .epochs;
    let spanning = run_cluster_with(
        &scenario,
        Box::new(SpanningChisel(ChiselPlanner::new(DEFAULT_SHAPE))),
    )
    .unwrap()
    .analysis
    .expect("analysis")
    .epochs;
    assert!(every >= 80, "{every} analyses");
    assert!(
        spanning.abs_diff(every / 4) <= 1,
        "{spanning} analyses spanning 4 epochs, {every} every epoch"
    );
}

#[test]
fn covering_replica_choice_sends_fewer_fetches_and_does_less_work() {
    use tailtrim_policy::planner::BatchPlanner;
    use tailtrim_policy::spread::ReplicaChoice;
    let scenario = ClusterScenario {
        servers: 16,
        replicas: 3,
        workload: ClusterWorkload {
            keyspace: 100_000,
            popularity: "zipf:0.99".parse().unwrap(),
            keys_per_request: Distribution::Fixed { value: 20.0 },
            value_bytes: Distribution::Fixed { value: 1_000.0 },
            ..ClusterWorkload::default()
        },
        rate_rps: 20_000.0,
        requests: 20_000,
        service: CostSpec::parse("const=20us,key=5us,byte=2.5ns,dist=exp").unwrap(),
        ..ClusterScenario::default()
    };
    let run = |choice, work_view| {
        let planner = Box::new(BatchPlanner::with_replica_choice(choice));
        let options = ClusterRunOptions {
            work_view,
            ..ClusterRunOptions::default()
        };
        run_cluster_with_options(&scenario, planner, options).unwrap()
    };
    let (c3, cover) = (
        run(ReplicaChoice::C3, WorkView::Service),
        run(ReplicaChoice::Cover, WorkView::Service),
    );
    assert_eq!(cover.keys_served, cover.keys_requested);
    let per_request = |result: &tailtrim_sim::cluster::ClusterResult| {
        result.fetches as f64 / result.requests as f64
    };
    assert!(
        per_request(&cover) < 0.9 * per_request(&c3),
        "fetches per request: cover {:.2}, C3 {:.2}",
        per_request(&cover),
        per_request(&c3)
    );
    let busy = |result: &tailtrim_sim::cluster::ClusterResult| {
        result.server_utilization.iter().sum::<f64>()
    };
    // 20 µs of fixed work saved per fetch not sent.
    assert!(
        busy(&cover) < 0.95 * busy(&c3),
        "total utilisation: cover {:.3}, C3 {:.3}",
        busy(&cover),
        busy(&c3)
    );
    // Without the work in flight (the proxy's view) the choice weighs outstanding requests
    // and latency instead: other decisions, still fewer fetches than C3's.
    let blind = run(ReplicaChoice::Cover, WorkView::Hidden);
    assert_ne!(blind.fetches, cover.fetches);
    assert!(per_request(&blind) < 0.9 * per_request(&c3));
    // Counting keys in flight (the client's view) is another estimate: other decisions again.
    let counted = run(
        ReplicaChoice::Cover,
        WorkView::Keys {
            fetch_cost_keys: 4.0,
        },
    );
    assert_ne!(counted.fetches, cover.fetches);
    assert_ne!(counted.fetches, blind.fetches);
    assert!(per_request(&counted) < 0.9 * per_request(&c3));
}
