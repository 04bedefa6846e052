//! Chisel's layered model: reduction to batching, grid search, and agreement with a
//! direct Monte-Carlo simulation of the same queueing system.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use proptest::prelude::{prop_assert, proptest, ProptestConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tailtrim_model::chisel::{
    batching_baseline, best_plan, ChiselModel, ChiselParams, Objective, PlanGrid, Prediction,
};
use tailtrim_model::Seconds;

fn small_system(mean_interarrival_micros: f64) -> ChiselParams {
    ChiselParams {
        arrival_rate: 1e6 / mean_interarrival_micros,
        client_threads: 4,
        server_threads: 4,
        client_overhead: Seconds::from_micros(20.0),
        ..ChiselParams::paper_defaults()
    }
}

fn predict(params: ChiselParams, merge: u32, chunk: u32) -> Prediction {
    ChiselModel::new(params)
        .and_then(|model| model.predict(merge, chunk))
        .unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn no_merge_no_split_reduces_to_batching() {
    for interarrival in [1000.0, 200.0, 120.0] {
        let params = small_system(interarrival);
        let baseline = batching_baseline(&params).unwrap_or_else(|e| panic!("{e}"));
        for chunk in [params.elephant_keys, params.elephant_keys + 37] {
            let chisel = predict(params, 1, chunk);
            for (got, want) in [
                (chisel.mice.mean, baseline.mice.mean),
                (chisel.mice.p95, baseline.mice.p95),
                (chisel.elephant.mean, baseline.elephant.mean),
                (chisel.elephant.p95, baseline.elephant.p95),
                (chisel.overall.mean, baseline.overall.mean),
                (chisel.overall.p95, baseline.overall.p95),
            ] {
                assert!(
                    (got.0 - want.0).abs() < 1e-9 * want.0,
                    "A={interarrival}: {got} vs {want}"
                );
            }
            assert_eq!(chisel.chunks, 1);
        }
    }
}

#[test]
fn best_plan_is_the_grid_minimum_and_splits_elephants_at_low_load() {
    let params = small_system(1000.0);
    let grid = PlanGrid::default_for(&params);
    let (merge, chunk, best) = best_plan(&params, &grid).unwrap_or_else(|e| panic!("{e}"));
    let model = ChiselModel::new(params).unwrap_or_else(|e| panic!("{e}"));
    for &b in &grid.merge_levels {
        for &l in &grid.chunk_sizes {
            if let Ok(candidate) = model.predict(b, l) {
                assert!(best.overall.mean.0 <= candidate.overall.mean.0 + 1e-15);
            }
        }
    }
    // At low load, parallelism is free: elephants are split, mice are not merged.
    assert!(chunk < params.elephant_keys, "chunk {chunk}");
    assert_eq!(merge, 1);
    let p95_grid = PlanGrid {
        objective: Objective::P95,
        ..grid
    };
    let (_, _, best_tail) = best_plan(&params, &p95_grid).unwrap_or_else(|e| panic!("{e}"));
    assert!(best_tail.overall.p95.0 <= best.overall.p95.0 + 1e-15);
}

#[test]
fn saturation_is_an_error_not_a_number() {
    let params = small_system(20.0);
    assert!(ChiselModel::new(params)
        .and_then(|m| m.predict(1, 100))
        .is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn without_merging_latency_grows_with_load(
        interarrival in 150.0f64..2000.0,
        factor in 1.05f64..2.0,
        chunk in 1u32..101,
    ) {
        // With B > 1 more load can *shorten* the merge wait (groups fill faster), so
        // monotonicity in load is a property of B = 1 only.
        let light = small_system(interarrival * factor);
        let heavy = small_system(interarrival);
        let (Ok(light), Ok(heavy)) = (
            ChiselModel::new(light).and_then(|m| m.predict(1, chunk)),
            ChiselModel::new(heavy).and_then(|m| m.predict(1, chunk)),
        ) else {
            return Ok(());
        };
        prop_assert!(heavy.mice.mean.0 >= light.mice.mean.0);
        prop_assert!(heavy.elephant.mean.0 >= light.elephant.mean.0);
        prop_assert!(heavy.overall.mean.0 >= light.overall.mean.0);
        prop_assert!(heavy.client_utilization > light.client_utilization);
    }

    #[test]
    fn latency_grows_with_client_overhead_and_p95_exceeds_mean(
        interarrival in 150.0f64..2000.0,
        overhead in 0.0f64..100.0,
        extra in 5.0f64..100.0,
        merge in 1u32..5,
        chunk in 1u32..101,
    ) {
        let base = ChiselParams { client_overhead: Seconds::from_micros(overhead), ..small_system(interarrival) };
        let slower = ChiselParams { client_overhead: Seconds::from_micros(overhead + extra), ..base };
        let (Ok(base), Ok(slower)) = (
            ChiselModel::new(base).and_then(|m| m.predict(merge, chunk)),
            ChiselModel::new(slower).and_then(|m| m.predict(merge, chunk)),
        ) else {
            return Ok(());
        };
        prop_assert!(slower.overall.mean.0 > base.overall.mean.0);
        prop_assert!(slower.elephant.mean.0 > base.elephant.mean.0);
        for class in [base.mice, base.elephant, base.overall] {
            prop_assert!(class.p95.0 >= class.mean.0 * 0.8, "p95 {} far below mean {}", class.p95, class.mean);
        }
    }
}

// ---------------------------------------------------------------------------
// Monte-Carlo simulation of exactly the system the model describes.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A user request arrives (index into `requests`).
    Arrival(usize),
    /// A client thread's setup for its current unit is over.
    SetupDone(usize),
    /// The reply of a client thread's query is back.
    Reply(usize),
}

#[derive(Debug, Clone)]
struct Unit {
    /// Request indices served by this query (mice of a group, or one elephant).
    members: Vec<usize>,
    keys: u32,
    /// A merged mice group is complete when it has `B` members.
    expected_members: usize,
    /// The query has been sent (a unit is sent once).
    sent: bool,
}

struct Simulation {
    params: ChiselParams,
    merge: u32,
    chunk: u32,
    rng: ChaCha8Rng,
}

#[derive(Debug, Default)]
struct Observed {
    mice: Vec<f64>,
    elephants: Vec<f64>,
}

impl Simulation {
    fn run(&mut self, requests: usize) -> Observed {
        let p = self.params;
        let threads = p.client_threads as usize;
        let mut arrival_times = Vec::with_capacity(requests);
        let mut is_elephant = Vec::with_capacity(requests);
        let mut t = 0.0;
        for _ in 0..requests {
            let u: f64 = self.rng.gen_range(f64::MIN_POSITIVE..1.0);
            t += -u.ln() / p.arrival_rate;
            arrival_times.push(t);
            is_elephant.push(self.rng.gen_bool(p.elephant_fraction));
        }
        let mut completion = vec![0.0f64; requests];
        let mut chunks_left = vec![0u32; requests];
        let mut units: Vec<Unit> = Vec::new();
        let mut queues: Vec<VecDeque<usize>> = vec![VecDeque::new(); threads];
        let mut current: Vec<Option<usize>> = vec![None; threads];
        let mut setup_done = vec![false; threads];
        let mut server_free = vec![0.0f64; p.server_threads as usize];
        let mut next_thread = 0usize;
        let mut open_group: Option<usize> = None;
        let mut events: BinaryHeap<Reverse<(u64, u64, Event)>> = BinaryHeap::new();
        let mut seq = 0u64;
        let key = |time: f64| (time * 1e12) as u64; // picoseconds, monotone
        let push = |events: &mut BinaryHeap<Reverse<(u64, u64, Event)>>,
                    time: f64,
                    event: Event,
                    seq: &mut u64| {
            *seq += 1;
            events.push(Reverse((key(time), *seq, event)));
        };
        for (index, &time) in arrival_times.iter().enumerate() {
            push(&mut events, time, Event::Arrival(index), &mut seq);
        }
        let setup = p.client_overhead.0;
        while let Some(Reverse((time_key, _, event))) = events.pop() {
            let now = time_key as f64 * 1e-12;
            let mut touched: Vec<usize> = Vec::new();
            match event {
                Event::Arrival(request) => {
                    if is_elephant[request] {
                        let chunks = p.elephant_keys.div_ceil(self.chunk);
                        chunks_left[request] = chunks;
                        for c in 0..chunks {
                            let keys = (p.elephant_keys - c * self.chunk).min(self.chunk);
                            units.push(Unit {
                                members: vec![request],
                                keys,
                                expected_members: 1,
                                sent: false,
                            });
                            queues[next_thread].push_back(units.len() - 1);
                            touched.push(next_thread);
                            next_thread = (next_thread + 1) % threads;
                        }
                    } else {
                        match open_group {
                            Some(unit)
                                if units[unit].members.len() < units[unit].expected_members =>
                            {
                                units[unit].members.push(request);
                                units[unit].keys += p.mouse_keys;
                                // Find which thread holds it, to wake it if it waits for the group.
                                for (thread, serving) in current.iter().enumerate() {
                                    if *serving == Some(unit) {
                                        touched.push(thread);
                                    }
                                }
                            }
                            _ => {
                                units.push(Unit {
                                    members: vec![request],
                                    keys: p.mouse_keys,
                                    expected_members: self.merge as usize,
                                    sent: false,
                                });
                                let unit = units.len() - 1;
                                open_group = Some(unit);
                                queues[next_thread].push_back(unit);
                                touched.push(next_thread);
                                next_thread = (next_thread + 1) % threads;
                            }
                        }
                        if let Some(unit) = open_group {
                            if units[unit].members.len() >= units[unit].expected_members {
                                open_group = None;
                            }
                        }
                    }
                }
                Event::SetupDone(thread) => {
                    setup_done[thread] = true;
                    touched.push(thread);
                }
                Event::Reply(thread) => {
                    if let Some(unit) = current[thread].take() {
                        for &member in &units[unit].members {
                            if is_elephant[member] {
                                chunks_left[member] -= 1;
                                completion[member] = completion[member].max(now);
                            } else {
                                completion[member] = now;
                            }
                        }
                    }
                    setup_done[thread] = false;
                    touched.push(thread);
                }
            }
            for thread in touched {
                // Start a new unit on an idle thread.
                if current[thread].is_none() {
                    if let Some(unit) = queues[thread].pop_front() {
                        current[thread] = Some(unit);
                        setup_done[thread] = false;
                        push(&mut events, now + setup, Event::SetupDone(thread), &mut seq);
                    }
                    continue;
                }
                // Send the query once setup is over and the group is complete.
                let Some(unit) = current[thread] else {
                    continue;
                };
                let complete = units[unit].members.len() >= units[unit].expected_members;
                if setup_done[thread] && complete && !units[unit].sent {
                    setup_done[thread] = false;
                    let keys = f64::from(units[unit].keys);
                    let server = self.rng.gen_range(0..server_free.len());
                    let at_server = now + p.network.fixed.0;
                    let start = at_server.max(server_free[server]);
                    let finish = start + p.processing.at(keys);
                    server_free[server] = finish;
                    let reply = finish + p.network.per_key.0 * keys;
                    push(&mut events, reply, Event::Reply(thread), &mut seq);
                    units[unit].sent = true;
                }
            }
        }
        let warmup = requests / 10;
        let mut observed = Observed::default();
        for request in warmup..requests {
            let latency = completion[request] - arrival_times[request];
            if is_elephant[request] {
                observed.elephants.push(latency);
            } else {
                observed.mice.push(latency);
            }
        }
        observed
    }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

fn percentile(values: &mut [f64], level: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[((values.len() as f64 - 1.0) * level).round() as usize]
}

#[test]
fn model_agrees_with_monte_carlo_simulation() {
    // (mean inter-arrival µs, B, L): batching, split, merge + split, more chunks than threads.
    let cases = [
        (150.0, 1, 100),
        (400.0, 1, 25),
        (150.0, 2, 25),
        (300.0, 1, 10),
    ];
    for (case, &(interarrival, merge, chunk)) in cases.iter().enumerate() {
        let params = small_system(interarrival);
        let model = predict(params, merge, chunk);
        let mut simulation = Simulation {
            params,
            merge,
            chunk,
            rng: ChaCha8Rng::seed_from_u64(7 + case as u64),
        };
        let mut observed = simulation.run(30_000);
        let sim_mice = mean(&observed.mice);
        let sim_elephant = mean(&observed.elephants);
        let sim_mice_p95 = percentile(&mut observed.mice, 0.95);
        let sim_elephant_p95 = percentile(&mut observed.elephants, 0.95);
        println!(
            "A={interarrival} B={merge} L={chunk}: mice mean {:.1}/{:.1} p95 {:.1}/{:.1}; elephant mean {:.1}/{:.1} p95 {:.1}/{:.1} (model/sim µs), rho_c {:.2}",
            model.mice.mean.as_micros(), sim_mice * 1e6, model.mice.p95.as_micros(), sim_mice_p95 * 1e6,
            model.elephant.mean.as_micros(), sim_elephant * 1e6, model.elephant.p95.as_micros(), sim_elephant_p95 * 1e6,
            model.client_utilization,
        );
        let relative = |model: Seconds, sim: f64| (model.0 - sim).abs() / sim;
        // Tolerances (see docs/model-chisel.md): means within 15%, p95 within 40%.
        // Worst cases seen: elephant mean −9.5% (B = 2, L = 25), mice p95 −37% (m > C:
        // mice wait behind a batch of chunks on one thread).
        assert!(
            relative(model.mice.mean, sim_mice) < 0.15,
            "case {case} mice mean"
        );
        assert!(
            relative(model.elephant.mean, sim_elephant) < 0.15,
            "case {case} elephant mean"
        );
        assert!(
            relative(model.mice.p95, sim_mice_p95) < 0.40,
            "case {case} mice p95"
        );
        assert!(
            relative(model.elephant.p95, sim_elephant_p95) < 0.40,
            "case {case} elephant p95"
        );
    }
}
