//! TailX against Rein and batching in the cluster simulator (Jaiman, Ben Mokhtar, Rivière:
//! "TailX: Scheduling heterogeneous multiget queries to improve tail latencies in key-value
//! stores", DAIS 2020, Section 4): what `tailtrim experiment tailx` runs.
//!
//! ```text
//!  experiments: (a) 80 % multigets of 5 keys, 20 % of 100 keys, 1 KB values, 1M and 10M requests
//!               (b) 20-key multigets, 20 % of them with 10 / 20 / 50 % large values, 1M requests
//!    │  16 servers × workers, replication 3 (ketama, owner first), zipf 0.99 keys
//!    ▼  calibrate: a light batch run ─► the busiest server's work per request ─► capacity;
//!       offered rate = load (75 %) × capacity, the same for every planner
//!  batch │ rein-sbf │ rein-sds │ tailx  (policy crate planners, same seed)
//!    servers: Rein's priorities by deficit round robin, others FIFO; TailX's delays in the
//!    client's delay queue (not_before)
//!    ▼
//!  p50 / p95 / p99 per planner, reductions vs rein-sbf
//! ```
//!
//! Pure: no I/O, no clock; the CLI times the runs and writes the files.

use serde::{Deserialize, Serialize};
use tailtrim_bench::dist::Distribution;
use tailtrim_bench::workload::Popularity;
use tailtrim_policy::costspec::CostSpec;
use tailtrim_policy::planner::{Planner, PlannerKind, PlannerSettings};
use tailtrim_policy::tailx::TailxSettings;

use crate::chisel::gain;
use crate::cluster::{
    run_cluster_with, ArrivalProcess, ClassResult, ClusterResult, ClusterScenario, ClusterWorkload,
    LargeKeys, ServerQueue,
};
use crate::SimError;

/// The planners compared, in the paper's order.
pub const PLANNERS: [&str; 4] = ["batch", "rein-sbf", "rein-sds", "tailx"];
/// The baseline the reductions are taken against.
pub const BASELINE: &str = "rein-sbf";

/// The system every experiment runs on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// Servers.
    pub servers: usize,
    /// Worker threads per server.
    pub workers_per_server: usize,
    /// Copies of each key.
    pub replicas: usize,
    /// Keys with small values.
    pub keyspace: u64,
    /// Bytes of a small value.
    pub small_value_bytes: u64,
    /// Keys with large values (experiment b).
    pub large_keyspace: u64,
    /// Bytes of a large value (the paper's 2 MB, scaled).
    pub large_value_bytes: u64,
    /// Zipf exponent of key popularity.
    pub zipf: f64,
    /// Server time per fetch (cost spec: const, key, byte, dispersion).
    pub service: String,
    /// One-way network time per message.
    pub network: String,
    /// Offered load as a share of the calibrated capacity.
    pub load: f64,
    /// Requests of the calibration run.
    pub calibration_requests: u64,
    /// Rate of the calibration run, requests/s: light for the cost model (a dilated model
    /// needs a proportionally lower rate).
    #[serde(default = "default_calibration_rps")]
    pub calibration_rps: f64,
    /// TailX's smallest allowance worth a delay, µs (the proxy's default is its 1 ms timer
    /// resolution; the simulator has none).
    pub tailx_min_delay_us: f64,
    /// Seed of every run.
    pub seed: u64,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            servers: 16,
            workers_per_server: 4,
            replicas: 3,
            keyspace: 20_000_000,
            small_value_bytes: 1_000,
            large_keyspace: 100_000,
            large_value_bytes: 128_000,
            zipf: 0.99,
            service: "const=20us,key=5us,byte=0.5ns,dist=exp".to_string(),
            network: "const=25us,byte=1ns".to_string(),
            load: 0.75,
            calibration_requests: 20_000,
            calibration_rps: default_calibration_rps(),
            tailx_min_delay_us: 10.0,
            seed: 1,
        }
    }
}

fn default_calibration_rps() -> f64 {
    1_000.0
}

/// What the clients ask for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Mix {
    /// (a) `long_share` of the multigets have `long_keys` keys, the rest `short_keys`.
    KeyCounts {
        /// Keys of a short multiget.
        short_keys: u32,
        /// Keys of a long multiget.
        long_keys: u32,
        /// Share of long multigets.
        long_share: f64,
    },
    /// (b) multigets of `keys` keys; `request_share` of them carry `large_share` large values.
    LargeValues {
        /// Keys per multiget.
        keys: u32,
        /// Share of multigets with large values.
        request_share: f64,
        /// Share of such a multiget's keys that are large.
        large_share: f64,
    },
}

/// One experiment: a mix and a length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experiment {
    /// Short name (`a-1M`, `b-20pct`, …).
    pub name: String,
    /// The mix.
    pub mix: Mix,
    /// Requests per run.
    pub requests: u64,
}

/// The paper's experiments: (a) at `a_requests` each (1M and 10M in the paper), (b) at
/// `b_requests`.
pub fn paper_experiments(a_requests: &[u64], b_requests: u64) -> Vec<Experiment> {
    let mut list: Vec<Experiment> = a_requests
        .iter()
        .map(|&requests| Experiment {
            name: format!("a-{}", short_count(requests)),
            mix: Mix::KeyCounts {
                short_keys: 5,
                long_keys: 100,
                long_share: 0.2,
            },
            requests,
        })
        .collect();
    for large_share in [0.1, 0.2, 0.5] {
        list.push(Experiment {
            name: format!("b-{}pct", (large_share * 100.0f64).round()),
            mix: Mix::LargeValues {
                keys: 20,
                request_share: 0.2,
                large_share,
            },
            requests: b_requests,
        });
    }
    list
}

/// `1M`, `10M`, `250k`, or the number.
pub fn short_count(count: u64) -> String {
    if count >= 1_000_000 && count.is_multiple_of(1_000_000) {
        format!("{}M", count / 1_000_000)
    } else if count >= 1_000 && count.is_multiple_of(1_000) {
        format!("{}k", count / 1_000)
    } else {
        count.to_string()
    }
}

fn spec(text: &str) -> Result<CostSpec, SimError> {
    CostSpec::parse(text).map_err(|e| SimError::Config(format!("cost spec {text:?}: {e}")))
}

/// The cluster scenario of an experiment at `rate_rps` (planner name set, requests as given).
pub fn scenario(
    setup: &Setup,
    experiment: &Experiment,
    planner: &str,
    rate_rps: f64,
    requests: u64,
) -> Result<ClusterScenario, SimError> {
    let (keys_per_request, large_keys) = match experiment.mix {
        Mix::KeyCounts {
            short_keys,
            long_keys,
            long_share,
        } => (
            Distribution::Table {
                entries: vec![
                    (f64::from(short_keys), 1.0 - long_share),
                    (f64::from(long_keys), long_share),
                ],
                tail: None,
            },
            None,
        ),
        Mix::LargeValues {
            keys,
            request_share,
            large_share,
        } => (
            Distribution::Fixed {
                value: f64::from(keys),
            },
            Some(LargeKeys {
                keyspace: setup.large_keyspace,
                value_bytes: setup.large_value_bytes,
                request_share,
                key_share: large_share,
            }),
        ),
    };
    Ok(ClusterScenario {
        servers: setup.servers,
        workers_per_server: setup.workers_per_server,
        server_queue: ServerQueue::Drr,
        replicas: setup.replicas,
        client_threads: 1,
        planner: planner.to_string(),
        workload: ClusterWorkload {
            keyspace: setup.keyspace,
            popularity: Popularity::Zipf {
                exponent: setup.zipf,
            },
            keys_per_request,
            value_bytes: Distribution::Fixed {
                value: setup.small_value_bytes as f64,
            },
            large_value_bytes: setup.small_value_bytes,
            large_keys,
        },
        rate_rps,
        arrival: ArrivalProcess::Poisson,
        requests,
        warmup_fraction: 0.1,
        service: spec(&setup.service)?,
        network: spec(&setup.network)?,
        client_send: CostSpec::ZERO,
        client_recv: CostSpec::ZERO,
        query_threads: 0,
        query_setup: CostSpec::ZERO,
        online_analysis: None,
        seed: setup.seed,
    })
}

/// A planner by name, TailX with the setup's smallest delay.
pub fn planner(setup: &Setup, name: &str) -> Result<Box<dyn Planner>, SimError> {
    let kind = PlannerKind::from_name(name).map_err(|e| SimError::Config(e.to_string()))?;
    Ok(kind.build_with(&PlannerSettings {
        tailx: TailxSettings {
            min_delay_nanos: (setup.tailx_min_delay_us * 1e3).round() as u64,
            ..TailxSettings::default()
        },
    }))
}

/// The calibration: capacity and the offered rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Rate of the light calibration run (batch).
    pub probe_rps: f64,
    /// Busiest server's utilization in it (all workers, up to `workers_per_server`).
    pub busiest_utilization: f64,
    /// Mean server utilization in it.
    pub mean_utilization: f64,
    /// Requests per second at which the busiest server would saturate.
    pub capacity_rps: f64,
    /// `load × capacity`.
    pub rate_rps: f64,
}

/// Finds the rate: a batch run at a light rate, the busiest server's work per request, its
/// saturation rate, times `load`. (C3 moves load off busy replicas as load grows, so the real
/// capacity is at least this.)
pub fn calibrate(setup: &Setup, experiment: &Experiment) -> Result<Calibration, SimError> {
    let probe_rps = setup.calibration_rps;
    let probe = scenario(
        setup,
        experiment,
        "batch",
        probe_rps,
        setup.calibration_requests,
    )?;
    let result = run_cluster_with(&probe, planner(setup, "batch")?)?;
    let busiest = result
        .server_utilization
        .iter()
        .copied()
        .fold(0.0f64, f64::max);
    let mean_utilization = result.server_utilization.iter().sum::<f64>()
        / result.server_utilization.len().max(1) as f64;
    if busiest <= 0.0 {
        return Err(SimError::Config(
            "calibration: no server did any work".into(),
        ));
    }
    let capacity_rps = probe_rps * setup.workers_per_server as f64 / busiest;
    Ok(Calibration {
        probe_rps,
        busiest_utilization: busiest,
        mean_utilization,
        capacity_rps,
        rate_rps: setup.load * capacity_rps,
    })
}

/// Latency of one planner's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannerOutcome {
    /// Planner.
    pub planner: String,
    /// Mean, µs.
    pub mean_us: f64,
    /// Median, µs.
    pub p50_us: f64,
    /// 95th percentile, µs.
    pub p95_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Requests with a large value: p99, µs (0 if none).
    pub large_p99_us: f64,
    /// Requests without: p99, µs.
    pub small_p99_us: f64,
    /// Achieved rate.
    pub achieved_rps: f64,
    /// Fetches per request.
    pub fetches_per_request: f64,
    /// Mean and busiest server utilization (share of all workers).
    pub mean_utilization: f64,
    /// Busiest server's utilization (share of its workers).
    pub max_utilization: f64,
    /// Simulated seconds.
    pub simulated_secs: f64,
}

fn quantile_us(class: &ClassResult, q: f64) -> f64 {
    class
        .histogram
        .as_ref()
        .filter(|h| !h.is_empty())
        .map_or(0.0, |h| h.value_at_quantile(q) as f64 / 1e3)
}

impl PlannerOutcome {
    /// From a run.
    pub fn of(result: &ClusterResult, workers: usize) -> PlannerOutcome {
        let workers = workers.max(1) as f64;
        let utilization = &result.server_utilization;
        PlannerOutcome {
            planner: result.planner.clone(),
            mean_us: result.overall.summary.mean_us,
            p50_us: quantile_us(&result.overall, 0.5),
            p95_us: quantile_us(&result.overall, 0.95),
            p99_us: quantile_us(&result.overall, 0.99),
            large_p99_us: quantile_us(&result.large, 0.99),
            small_p99_us: quantile_us(&result.small, 0.99),
            achieved_rps: result.achieved_rps,
            fetches_per_request: result.fetches as f64 / result.requests.max(1) as f64,
            mean_utilization: utilization.iter().sum::<f64>()
                / utilization.len().max(1) as f64
                / workers,
            max_utilization: utilization.iter().copied().fold(0.0, f64::max) / workers,
            simulated_secs: result.duration_secs,
        }
    }
}

/// Reductions of one planner against the baseline, %.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reduction {
    /// Planner.
    pub planner: String,
    /// p50 reduction, %.
    pub p50_pct: f64,
    /// p95 reduction, %.
    pub p95_pct: f64,
    /// p99 reduction, %.
    pub p99_pct: f64,
    /// p99 over the baseline's.
    pub p99_ratio: f64,
}

/// Reductions of every outcome against the `BASELINE` one (empty if it is missing).
pub fn reductions(outcomes: &[PlannerOutcome]) -> Vec<Reduction> {
    let Some(base) = outcomes.iter().find(|o| o.planner == BASELINE) else {
        return Vec::new();
    };
    outcomes
        .iter()
        .map(|o| Reduction {
            planner: o.planner.clone(),
            p50_pct: gain(base.p50_us, o.p50_us),
            p95_pct: gain(base.p95_us, o.p95_us),
            p99_pct: gain(base.p99_us, o.p99_us),
            p99_ratio: if base.p99_us > 0.0 {
                o.p99_us / base.p99_us
            } else {
                0.0
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::run_cluster_with;

    fn small_setup() -> Setup {
        Setup {
            keyspace: 100_000,
            large_keyspace: 1_000,
            calibration_requests: 5_000,
            ..Setup::default()
        }
    }

    #[test]
    fn experiments_are_the_papers() {
        let list = paper_experiments(&[1_000_000, 10_000_000], 1_000_000);
        let names: Vec<&str> = list.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a-1M", "a-10M", "b-10pct", "b-20pct", "b-50pct"]);
    }

    #[test]
    fn large_values_reach_the_requests_that_carry_them() {
        let setup = small_setup();
        let experiment = &paper_experiments(&[], 20_000)[1];
        let scenario = scenario(&setup, experiment, "batch", 2_000.0, 20_000).unwrap();
        let result = run_cluster_with(&scenario, planner(&setup, "batch").unwrap()).unwrap();
        let large_share = result.large.summary.count as f64 / result.measured as f64;
        assert!((large_share - 0.2).abs() < 0.02, "{large_share}");
        assert_eq!(result.keys_served, result.keys_requested);
    }

    #[test]
    fn calibration_puts_the_busiest_server_at_the_load() {
        let setup = small_setup();
        let experiment = &paper_experiments(&[20_000], 20_000)[0];
        let calibration = calibrate(&setup, experiment).unwrap();
        assert!(calibration.busiest_utilization >= calibration.mean_utilization);
        assert!(calibration.rate_rps > calibration.probe_rps);
        let scenario = scenario(&setup, experiment, "batch", calibration.rate_rps, 20_000).unwrap();
        let result = run_cluster_with(&scenario, planner(&setup, "batch").unwrap()).unwrap();
        let outcome = PlannerOutcome::of(&result, setup.workers_per_server);
        assert!(outcome.max_utilization < 0.9, "{outcome:?}");
        assert!(outcome.mean_utilization > 0.3, "{outcome:?}");
    }

    #[test]
    fn reductions_are_against_rein_sbf() {
        let outcome = |planner: &str, p99: f64| PlannerOutcome {
            planner: planner.to_string(),
            mean_us: 0.0,
            p50_us: 100.0,
            p95_us: 100.0,
            p99_us: p99,
            large_p99_us: 0.0,
            small_p99_us: 0.0,
            achieved_rps: 0.0,
            fetches_per_request: 0.0,
            mean_utilization: 0.0,
            max_utilization: 0.0,
            simulated_secs: 0.0,
        };
        let list = reductions(&[outcome("rein-sbf", 200.0), outcome("tailx", 50.0)]);
        assert_eq!(list[1].p99_pct, 75.0);
        assert_eq!(list[1].p99_ratio, 0.25);
        assert!(reductions(&[outcome("tailx", 1.0)]).is_empty());
    }
}
