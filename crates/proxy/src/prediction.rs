//! The model in the loop: every interval the proxy reads its own counters (requests, keys,
//! per-backend queries and round trips) and keeps that load; the tier model
//! ([`tailtrim_model::live`]) runs on the latest load when its prediction is read, and the
//! predicted p99 is published in `stats` and `/metrics`, beside the measured latencies
//! (`pool_latency_us`, `backend_latency_us`).
//!
//! ```text
//!   tokio interval (`[model] interval_ms`) ──► Predictor::update(cluster)
//!        snapshot counters ─ previous snapshot = IntervalLoad ──► latest load (behind a mutex)
//!   stats / /metrics ──► Predictor::latest ──► live::predict_interval on the latest load
//!        (once per interval: kept until the next load) ──► pool_model_*,
//!        backend_model_p99_predicted_us
//! ```
//!
//! `[model]` (all optional): `threads` (worker threads per backend, default 4 — `tailtrim
//! serve`'s and memcached's default), `service_us` (service time of one backend query; 0,
//! the default, solves it from each interval's mean round trip), `interval_ms` (default
//! 1000). Gauges read 0 until an interval with traffic has passed. See `docs/model.md`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tailtrim_client::Cluster;
use tailtrim_model::live::{
    predict_interval, BackendInterval, IntervalLoad, LivePrediction, LiveSettings,
};
use tailtrim_model::Seconds;

/// Default worker threads per backend the model assumes.
pub const DEFAULT_MODEL_THREADS: u32 = 4;
/// Default interval between predictions, ms.
pub const DEFAULT_MODEL_INTERVAL_MS: u64 = 1000;

/// `[model]`: what the live prediction assumes of the backends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSection {
    /// Worker threads per backend.
    pub threads: u32,
    /// Service time of one backend query, µs; 0: solved from each interval's mean round trip.
    pub service_us: f64,
    /// Interval between predictions, ms.
    pub interval_ms: u64,
}

impl Default for ModelSection {
    fn default() -> Self {
        ModelSection {
            threads: DEFAULT_MODEL_THREADS,
            service_us: 0.0,
            interval_ms: DEFAULT_MODEL_INTERVAL_MS,
        }
    }
}

impl ModelSection {
    /// Whether every field has its default (then `--print-config` leaves the section out).
    pub fn is_default(&self) -> bool {
        *self == ModelSection::default()
    }

    /// The settings, or what is wrong with them.
    pub fn settings(&self) -> Result<LiveSettings, String> {
        if self.threads == 0 {
            return Err("[model] threads must be >= 1".to_string());
        }
        if !(self.service_us.is_finite() && self.service_us >= 0.0) {
            return Err("[model] service_us must be >= 0".to_string());
        }
        if self.interval_ms == 0 {
            return Err("[model] interval_ms must be >= 1".to_string());
        }
        Ok(LiveSettings {
            threads: self.threads,
            service: (self.service_us > 0.0).then(|| Seconds::from_micros(self.service_us)),
            burst_degree: 0.0,
        })
    }
}

/// The counters one interval is the difference of.
#[derive(Debug, Clone)]
struct Snapshot {
    at: Instant,
    requests: u64,
    keys: u64,
    /// Per backend address: queries, round trips measured, their sum (µs).
    backends: BTreeMap<String, (u64, u64, f64)>,
}

impl Snapshot {
    fn take(cluster: &Cluster) -> Snapshot {
        let pool = cluster.current();
        let stats = pool.stats();
        let backends = pool
            .backends()
            .iter()
            .map(|backend| {
                let latency = backend.stats().latency.snapshot(&[]);
                (
                    backend.address().to_string(),
                    (
                        backend.stats().requests.get(),
                        latency.count,
                        latency.sum_micros,
                    ),
                )
            })
            .collect();
        Snapshot {
            at: Instant::now(),
            requests: stats.reads.get() + stats.writes.get() + stats.multigets.get(),
            keys: stats.reads.get() + stats.writes.get() + stats.multiget_keys.get(),
            backends,
        }
    }

    /// The load between `earlier` and `self`, with the backends' addresses in pool order;
    /// `None` when a counter went back (`stats reset`).
    fn since(&self, earlier: &Snapshot) -> Option<(IntervalLoad, Vec<String>)> {
        let mut addresses = Vec::with_capacity(self.backends.len());
        let mut backends = Vec::with_capacity(self.backends.len());
        for (address, &(queries, count, sum)) in &self.backends {
            let (queries_before, count_before, sum_before) =
                earlier.backends.get(address).copied().unwrap_or_default();
            addresses.push(address.clone());
            backends.push(BackendInterval {
                queries: queries.checked_sub(queries_before)?,
                latency_count: count.checked_sub(count_before)?,
                latency_sum_us: (sum - sum_before).max(0.0),
            });
        }
        let load = IntervalLoad {
            seconds: self.at.duration_since(earlier.at).as_secs_f64(),
            requests: self.requests.checked_sub(earlier.requests)?,
            keys: self.keys.checked_sub(earlier.keys)?,
            backends,
        };
        Some((load, addresses))
    }
}

#[derive(Debug, Default)]
struct State {
    previous: Option<Snapshot>,
    /// The load of the latest interval with traffic, and its backends' addresses.
    latest_load: Option<(IntervalLoad, Vec<String>)>,
    /// The model evaluated on `latest_load`, once something asked for it.
    latest: Option<(LivePrediction, Vec<String>)>,
}

/// The proxy's live predictor.
#[derive(Debug)]
pub struct Predictor {
    settings: LiveSettings,
    interval: Duration,
    state: Mutex<State>,
    /// Model evaluations so far ([`Predictor::evaluations`]).
    evaluations: AtomicU64,
}

impl Predictor {
    /// A predictor with `[model]`'s settings.
    pub fn new(section: &ModelSection) -> Result<Predictor, String> {
        Ok(Predictor {
            settings: section.settings()?,
            interval: Duration::from_millis(section.interval_ms),
            state: Mutex::new(State::default()),
            evaluations: AtomicU64::new(0),
        })
    }

    /// Closes one interval: the load since the previous call, kept for the model. The model
    /// itself runs when its prediction is read ([`Predictor::latest`]), once per interval at
    /// most: evaluating it (a numerical integration per backend) every interval cost the
    /// proxy milliseconds of CPU a second, read or not.
    pub fn update(&self, cluster: &Cluster) {
        let now = Snapshot::take(cluster);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((load, addresses)) = state.previous.as_ref().and_then(|p| now.since(p)) {
            // An idle interval keeps the last prediction: it is still the latest load seen.
            if load.requests > 0 {
                state.latest_load = Some((load, addresses));
                state.latest = None;
            }
        }
        state.previous = Some(now);
    }

    /// The latest prediction and the backends' addresses in its order; `None` before the
    /// first interval with traffic.
    pub fn latest(&self) -> Option<(LivePrediction, Vec<String>)> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.latest.is_none() {
            if let Some((load, addresses)) = &state.latest_load {
                self.evaluations.fetch_add(1, Ordering::Relaxed);
                let prediction = predict_interval(load, &self.settings);
                state.latest = Some((prediction, addresses.clone()));
            }
        }
        state.latest.clone()
    }

    /// How many times the model was evaluated.
    pub fn evaluations(&self) -> u64 {
        self.evaluations.load(Ordering::Relaxed)
    }

    /// Worker threads per backend the model assumes.
    pub fn threads(&self) -> u32 {
        self.settings.threads
    }

    /// Calls [`Predictor::update`] every interval, for ever.
    pub async fn run(&self, cluster: &Cluster) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            self.update(cluster);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailtrim_client::config::{PoolConfig, ServerSpec};
    use tailtrim_policy::hotkeys::TrackerConfig;

    #[test]
    fn the_model_runs_when_read_and_once_per_interval() {
        let servers = vec![ServerSpec::parse("127.0.0.1:1").expect("address")];
        let config = PoolConfig::new("pool", servers);
        let cluster = Cluster::new(config, TrackerConfig::default()).expect("cluster");
        let predictor = Predictor::new(&ModelSection::default()).expect("settings");
        predictor.update(&cluster);
        assert!(predictor.latest().is_none(), "no interval with traffic yet");
        for _ in 0..3 {
            cluster.current().stats().reads.add(1_000);
            predictor.update(&cluster);
        }
        assert_eq!(predictor.evaluations(), 0, "nothing read the prediction");
        let first = predictor.latest().expect("an interval with traffic passed");
        assert_eq!(predictor.latest(), Some(first));
        assert_eq!(
            predictor.evaluations(),
            1,
            "the second read reused the first"
        );
        predictor.update(&cluster);
        assert!(
            predictor.latest().is_some(),
            "an idle interval keeps the last prediction"
        );
        assert_eq!(predictor.evaluations(), 1);
    }
}
