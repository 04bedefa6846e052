//! The tier model (`tailtrim_model::tier`) against a seeded discrete-event simulation of the
//! tier it describes (SIMULATED, deterministic): Poisson requests of `N` keys, each sent on one
//! of `C` client connections picked uniformly and read in rounds (what arrived while the
//! connection's round was in flight is read together, and the round's replies leave when its
//! last request is done — the proxy's frontend), split by key over `M` servers of `c` threads
//! sharing one FIFO queue, a query of `k` keys served for `Exp(mean k·S)` (the testbed's
//! `--emulate-service key=…,dist=exp`).
//!
//! The simulation keeps what the model approximates or leaves out: the servers see one
//! request's queries in the same instant (correlated fan-out), rounds of several requests last
//! as long as their slowest, the waits are M/H/c's, not M/M/c's.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tailtrim_model::tier::{predict, ServiceCost, TierShape, WorkloadProfile};
use tailtrim_model::Seconds;

/// The testbed of `experiments/model-loop/`: 4 servers × 4 threads, 4-key requests, 2.5 ms of
/// emulated service per key, 64 bench connections through the proxy.
const SERVERS: usize = 4;
const THREADS: usize = 4;
const KEYS: usize = 4;
const PER_KEY: f64 = 2.5e-3;
const CONNECTIONS: usize = 64;
/// Requests simulated per point, the first tenth not measured.
const REQUESTS: usize = 200_000;

#[derive(Debug, Clone, Copy)]
struct Scenario {
    rate: f64,
    servers: usize,
    /// 0: every request has a connection of its own.
    connections: usize,
    /// The first server's key share over the mean share.
    imbalance: f64,
    seed: u64,
}

#[derive(Debug, PartialEq)]
struct Event {
    at: f64,
    sequence: u64,
    kind: EventKind,
}

#[derive(Debug, PartialEq, Clone, Copy)]
enum EventKind {
    Arrival,
    QueryDone { server: usize, request: usize },
}

impl Eq for Event {}

impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        // Earliest first (BinaryHeap is a max-heap).
        other
            .at
            .total_cmp(&self.at)
            .then_with(|| other.sequence.cmp(&self.sequence))
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

struct Request {
    arrived: f64,
    connection: usize,
    queries_left: usize,
}

#[derive(Default)]
struct Connection {
    busy: bool,
    waiting: Vec<usize>,
    round: Vec<usize>,
    round_left: usize,
}

struct Server {
    idle_threads: usize,
    queue: VecDeque<(usize, usize)>,
}

struct Simulation {
    scenario: Scenario,
    random: ChaCha8Rng,
    events: BinaryHeap<Event>,
    sequence: u64,
    requests: Vec<Request>,
    connections: Vec<Connection>,
    servers: Vec<Server>,
    /// Cumulative key shares of the servers.
    shares: Vec<f64>,
    latencies: Vec<f64>,
}

impl Simulation {
    fn new(scenario: Scenario) -> Simulation {
        let servers = scenario.servers as f64;
        let heaviest = scenario.imbalance / servers;
        let rest = (1.0 - heaviest) / (servers - 1.0);
        let mut shares = Vec::with_capacity(scenario.servers);
        let mut total = 0.0;
        for server in 0..scenario.servers {
            total += if server == 0 { heaviest } else { rest };
            shares.push(total);
        }
        Simulation {
            scenario,
            random: ChaCha8Rng::seed_from_u64(scenario.seed),
            events: BinaryHeap::new(),
            sequence: 0,
            requests: Vec::with_capacity(REQUESTS),
            connections: (0..scenario.connections.max(1))
                .map(|_| Connection::default())
                .collect(),
            servers: (0..scenario.servers)
                .map(|_| Server {
                    idle_threads: THREADS,
                    queue: VecDeque::new(),
                })
                .collect(),
            shares,
            latencies: Vec::with_capacity(REQUESTS),
        }
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        let unit: f64 = self.random.gen();
        -(-unit).ln_1p() * mean
    }

    fn schedule(&mut self, at: f64, kind: EventKind) {
        self.sequence += 1;
        self.events.push(Event {
            at,
            sequence: self.sequence,
            kind,
        });
    }

    fn start_service(&mut self, now: f64, server: usize, request: usize, keys: usize) {
        let service = self.exponential(keys as f64 * PER_KEY);
        self.schedule(now + service, EventKind::QueryDone { server, request });
    }

    /// Splits `request`'s keys over the servers and queues its queries.
    fn dispatch(&mut self, now: f64, request: usize) {
        let mut keys_at = vec![0usize; self.scenario.servers];
        for _ in 0..KEYS {
            let unit: f64 = self.random.gen();
            let server = self
                .shares
                .iter()
                .position(|&cumulative| unit < cumulative)
                .unwrap_or(self.scenario.servers - 1);
            keys_at[server] += 1;
        }
        self.requests[request].queries_left = keys_at.iter().filter(|&&k| k > 0).count();
        for (server, &keys) in keys_at.iter().enumerate() {
            if keys == 0 {
                continue;
            }
            if self.servers[server].idle_threads > 0 {
                self.servers[server].idle_threads -= 1;
                self.start_service(now, server, request, keys);
            } else {
                self.servers[server].queue.push_back((request, keys));
            }
        }
    }

    fn start_round(&mut self, now: f64, connection: usize, members: Vec<usize>) {
        for &request in &members {
            self.dispatch(now, request);
        }
        let state = &mut self.connections[connection];
        state.busy = true;
        state.round_left = members.len();
        state.round = members;
    }

    fn arrival(&mut self, now: f64) {
        let request = self.requests.len();
        let connection = if self.scenario.connections == 0 {
            0
        } else {
            self.random.gen_range(0..self.scenario.connections)
        };
        self.requests.push(Request {
            arrived: now,
            connection,
            queries_left: 0,
        });
        if self.scenario.connections == 0 {
            // A connection of its own: no round to wait for.
            self.dispatch(now, request);
        } else if self.connections[connection].busy {
            self.connections[connection].waiting.push(request);
        } else {
            self.start_round(now, connection, vec![request]);
        }
        if self.requests.len() < REQUESTS {
            let gap = self.exponential(1.0 / self.scenario.rate);
            self.schedule(now + gap, EventKind::Arrival);
        }
    }

    fn record(&mut self, now: f64, request: usize) {
        if request >= REQUESTS / 10 {
            self.latencies.push(now - self.requests[request].arrived);
        }
    }

    fn query_done(&mut self, now: f64, server: usize, request: usize) {
        match self.servers[server].queue.pop_front() {
            Some((next, keys)) => self.start_service(now, server, next, keys),
            None => self.servers[server].idle_threads += 1,
        }
        self.requests[request].queries_left -= 1;
        if self.requests[request].queries_left > 0 {
            return;
        }
        if self.scenario.connections == 0 {
            self.record(now, request);
            return;
        }
        let connection = self.requests[request].connection;
        self.connections[connection].round_left -= 1;
        if self.connections[connection].round_left > 0 {
            return;
        }
        let round = std::mem::take(&mut self.connections[connection].round);
        for member in round {
            self.record(now, member);
        }
        self.connections[connection].busy = false;
        let waiting = std::mem::take(&mut self.connections[connection].waiting);
        if !waiting.is_empty() {
            self.start_round(now, connection, waiting);
        }
    }

    /// The simulated p99 of the request latency.
    fn p99(mut self) -> f64 {
        self.schedule(0.0, EventKind::Arrival);
        while let Some(event) = self.events.pop() {
            match event.kind {
                EventKind::Arrival => self.arrival(event.at),
                EventKind::QueryDone { server, request } => {
                    self.query_done(event.at, server, request)
                }
            }
        }
        let mut latencies = self.latencies;
        latencies.sort_by(f64::total_cmp);
        latencies[(latencies.len() as f64 * 0.99) as usize]
    }
}

fn simulated_p99(scenario: Scenario) -> f64 {
    Simulation::new(scenario).p99()
}

fn model_p99(scenario: Scenario) -> f64 {
    let profile = WorkloadProfile {
        request_rate: scenario.rate,
        keys_per_request: KEYS as f64,
        value_bytes: 100.0,
        service: ServiceCost {
            fixed: Seconds::ZERO,
            per_key: Seconds(PER_KEY),
        },
        burst_degree: 0.0,
        network: Seconds::ZERO,
        client_connections: u32::try_from(scenario.connections).expect("few connections"),
        imbalance: scenario.imbalance,
    };
    let shape = TierShape {
        servers: u32::try_from(scenario.servers).expect("few servers"),
        threads: THREADS as u32,
    };
    predict(&profile, shape).expect("stable").p99.0
}

/// Request rate at server utilisation `utilisation` on the testbed's 4 servers.
fn rate_at(utilisation: f64) -> f64 {
    utilisation * (SERVERS * THREADS) as f64 / (KEYS as f64 * PER_KEY)
}

/// Asserts the model's p99 is within `[low, high]` times the simulated one; returns the
/// model's.
fn assert_model_reads(label: &str, scenario: Scenario, low: f64, high: f64) -> f64 {
    let model = model_p99(scenario);
    let simulated = simulated_p99(scenario);
    let ratio = model / simulated;
    eprintln!("{label}: model {model:.5} s, simulated {simulated:.5} s, {ratio:.3}");
    assert!(
        (low..=high).contains(&ratio),
        "{label}: model {model} s vs simulated {simulated} s ({ratio:.3})"
    );
    model
}

fn testbed(rate: f64, seed: u64) -> Scenario {
    Scenario {
        rate,
        servers: SERVERS,
        connections: CONNECTIONS,
        imbalance: 1.0,
        seed,
    }
}

#[test]
fn model_reads_the_testbeds_p99_at_three_loads() {
    for (utilisation, seed) in [(0.3, 1), (0.5, 2), (0.7, 3)] {
        let label = format!("ρ {utilisation}");
        assert_model_reads(&label, testbed(rate_at(utilisation), seed), 0.9, 1.1);
    }
}

#[test]
fn model_reads_the_plans_two_and_three_servers() {
    for (servers, seed) in [(2, 4), (3, 5)] {
        let scenario = Scenario {
            servers,
            ..testbed(720.0, seed)
        };
        assert_model_reads(&format!("{servers} servers"), scenario, 0.9, 1.1);
    }
}

#[test]
fn independent_servers_do_not_under_read_the_correlated_fan_out() {
    // No connection order: the fork-join alone, where association makes the product of the
    // servers' distributions an upper bound on the tail.
    for (utilisation, seed) in [(0.5, 6), (0.8, 7)] {
        let scenario = Scenario {
            connections: 0,
            ..testbed(rate_at(utilisation), seed)
        };
        let label = format!("ρ {utilisation}, no connection order");
        assert_model_reads(&label, scenario, 0.97, 1.15);
    }
}

#[test]
fn the_most_loaded_server_sets_the_tail() {
    let scenario = Scenario {
        imbalance: 1.1,
        ..testbed(rate_at(0.7), 8)
    };
    let model = assert_model_reads("imbalance 1.1", scenario, 0.9, 1.1);
    let balanced = model_p99(Scenario {
        imbalance: 1.0,
        ..scenario
    });
    assert!(model > balanced * 1.02, "{model} vs balanced {balanced}");
}
