//! The tier model on measured load: what a proxy computes each interval from its own
//! counters to publish the predicted p99 beside the measured one.
//!
//! ```text
//!   per backend: queries/s λ, mean round trip W (interval deltas)
//!        service S: configured, or solved from W = mean sojourn(λ, S, c)  (bisection)
//!        ──► ServerQueue(λ, S, c) ──► p99 of one query at that backend
//!   overall: requests/s R, keys per request N, M backends, S = query-weighted mean,
//!        imbalance from the backends' query rates ──► tier::predict ──► p99 of a request
//! ```
//!
//! With the service time solved from the interval's mean, the mean is matched by
//! construction and the p99 is the model's tail for that mean: it tests the exponential
//! tail, not the level. With a configured service time it is a prediction from load alone.

use serde::{Deserialize, Serialize};

use crate::error::{check_positive, ModelError};
use crate::tier::{
    imbalance_from_query_rates, predict, ServerQueue, ServiceCost, TierPrediction, TierShape,
    WorkloadProfile,
};
use crate::time::Seconds;

/// One backend's counters over an interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BackendInterval {
    /// Queries sent to it.
    pub queries: u64,
    /// Round trips measured.
    pub latency_count: u64,
    /// Sum of those round trips, µs.
    pub latency_sum_us: f64,
}

/// A proxy's counters over an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalLoad {
    /// Length of the interval, seconds.
    pub seconds: f64,
    /// Client requests (single gets and multigets) served.
    pub requests: u64,
    /// Keys in those requests.
    pub keys: u64,
    /// Per backend, in the pool's order.
    pub backends: Vec<BackendInterval>,
}

/// What the estimate assumes of the backends.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LiveSettings {
    /// Worker threads per backend.
    pub threads: u32,
    /// Service time of a query, when known (else solved from the measured mean).
    pub service: Option<Seconds>,
    /// Burst degree of the arrivals (0: Poisson).
    pub burst_degree: f64,
}

/// The model at one backend over the interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BackendEstimate {
    /// Queries per second.
    pub query_rate: f64,
    /// Service time used (configured or solved).
    pub service: Seconds,
    /// `ρ` at the backend.
    pub utilization: f64,
    /// Predicted p99 of one query's round trip.
    pub p99: Seconds,
}

/// The model over one interval: per backend (`None`: idle, or no estimate) and overall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LivePrediction {
    /// Per backend, in the order given.
    pub backends: Vec<Option<BackendEstimate>>,
    /// The whole tier's request p99 (`None`: no requests, or unstable).
    pub overall: Option<TierPrediction>,
}

/// The service time `S` for which `settings.threads` threads at `query_rate` have mean sojourn
/// `mean` (solved by bisection; the mean sojourn grows with `S`).
pub fn solve_service_time(
    query_rate: f64,
    mean: Seconds,
    settings: &LiveSettings,
) -> Result<Seconds, ModelError> {
    let LiveSettings {
        threads,
        burst_degree,
        ..
    } = *settings;
    check_positive("query_rate", query_rate)?;
    check_positive("mean", mean.0)?;
    let sojourn = |service: f64| {
        ServerQueue::new(query_rate, Seconds(service), threads, burst_degree)
            .map(|queue| queue.mean().0)
    };
    let saturation = f64::from(threads) / query_rate;
    let (mut low, mut high) = (0.0, mean.0.min(saturation * (1.0 - 1e-9)));
    for _ in 0..100 {
        let middle = 0.5 * (low + high);
        match sojourn(middle) {
            Ok(value) if value < mean.0 => low = middle,
            Ok(_) | Err(ModelError::Unstable { .. }) => high = middle,
            Err(error) => return Err(error),
        }
        if high - low <= 1e-9 * high {
            break;
        }
    }
    Ok(Seconds(0.5 * (low + high)))
}

fn backend_estimate(
    interval: &BackendInterval,
    seconds: f64,
    settings: &LiveSettings,
) -> Option<BackendEstimate> {
    if interval.queries == 0 || interval.latency_count == 0 {
        return None;
    }
    let query_rate = interval.queries as f64 / seconds;
    let service = match settings.service {
        Some(service) => service,
        None => {
            let mean =
                Seconds::from_micros(interval.latency_sum_us / interval.latency_count as f64);
            solve_service_time(query_rate, mean, settings).ok()?
        }
    };
    let queue =
        ServerQueue::new(query_rate, service, settings.threads, settings.burst_degree).ok()?;
    Some(BackendEstimate {
        query_rate,
        service,
        utilization: query_rate * service.0 / f64::from(settings.threads),
        p99: queue.max_quantile(0.99, 1.0).ok()?,
    })
}

/// Evaluates the model on one interval's counters.
pub fn predict_interval(load: &IntervalLoad, settings: &LiveSettings) -> LivePrediction {
    if !(load.seconds.is_finite() && load.seconds > 0.0) {
        return LivePrediction {
            backends: vec![None; load.backends.len()],
            overall: None,
        };
    }
    let backends: Vec<Option<BackendEstimate>> = load
        .backends
        .iter()
        .map(|interval| backend_estimate(interval, load.seconds, settings))
        .collect();
    let (weighted, queries) =
        backends
            .iter()
            .flatten()
            .fold((0.0, 0.0), |(sum, count), estimate| {
                (
                    sum + estimate.service.0 * estimate.query_rate,
                    count + estimate.query_rate,
                )
            });
    let overall = (load.requests > 0 && queries > 0.0 && !load.backends.is_empty())
        .then(|| {
            let request_rate = load.requests as f64 / load.seconds;
            let keys_per_request = (load.keys as f64 / load.requests as f64).max(1.0);
            let query_rates: Vec<f64> = load
                .backends
                .iter()
                .map(|backend| backend.queries as f64 / load.seconds)
                .collect();
            let profile = WorkloadProfile {
                request_rate,
                keys_per_request,
                value_bytes: 0.0,
                service: ServiceCost {
                    fixed: settings.service.unwrap_or(Seconds(weighted / queries)),
                    per_key: Seconds::ZERO,
                },
                burst_degree: settings.burst_degree,
                network: Seconds::ZERO,
                // The proxy's own latency starts when it reads the request: the wait for
                // the client connection is not in what it measures.
                client_connections: 0,
                imbalance: imbalance_from_query_rates(&query_rates, request_rate, keys_per_request),
            };
            let shape = TierShape {
                servers: u32::try_from(load.backends.len()).unwrap_or(u32::MAX),
                threads: settings.threads,
            };
            predict(&profile, shape).ok()
        })
        .flatten();
    LivePrediction { backends, overall }
}

#[cfg(test)]
mod tests {
    use super::{
        predict_interval, solve_service_time, BackendInterval, IntervalLoad, LiveSettings,
    };
    use crate::tier::ServerQueue;
    use crate::time::Seconds;

    #[test]
    fn solved_service_time_reproduces_the_mean() {
        let service = Seconds::from_micros(300.0);
        let queue = ServerQueue::new(8_000.0, service, 4, 0.0).expect("stable");
        let settings = LiveSettings {
            threads: 4,
            service: None,
            burst_degree: 0.0,
        };
        let solved = solve_service_time(8_000.0, queue.mean(), &settings).expect("solvable");
        assert!((solved.0 - service.0).abs() < 1e-9, "{solved:?}");
    }

    #[test]
    fn idle_backends_and_empty_intervals_have_no_estimate() {
        let settings = LiveSettings {
            threads: 4,
            service: None,
            burst_degree: 0.0,
        };
        let load = IntervalLoad {
            seconds: 1.0,
            requests: 1_000,
            keys: 1_000,
            backends: vec![
                BackendInterval {
                    queries: 1_000,
                    latency_count: 1_000,
                    latency_sum_us: 400_000.0,
                },
                BackendInterval::default(),
            ],
        };
        let prediction = predict_interval(&load, &settings);
        assert!(prediction.backends[0].is_some() && prediction.backends[1].is_none());
        let overall = prediction.overall.expect("requests were served");
        assert!(overall.p99.0 > 400e-6, "{overall:?}");
        let empty = predict_interval(
            &IntervalLoad {
                seconds: 0.0,
                ..load
            },
            &settings,
        );
        assert!(empty.overall.is_none() && empty.backends.iter().all(Option::is_none));
    }

    #[test]
    fn configured_service_time_predicts_from_the_load_alone() {
        let settings = LiveSettings {
            threads: 1,
            service: Some(Seconds::from_micros(100.0)),
            burst_degree: 0.0,
        };
        let backend = BackendInterval {
            queries: 5_000,
            latency_count: 5_000,
            latency_sum_us: 1.0,
        };
        let load = IntervalLoad {
            seconds: 1.0,
            requests: 5_000,
            keys: 5_000,
            backends: vec![backend],
        };
        let estimate = predict_interval(&load, &settings).backends[0].expect("busy");
        // M/M/1 at ρ = 0.5: p99 = ln(100)·200 µs.
        assert!((estimate.p99.as_micros() - 100f64.ln() * 200.0).abs() < 1e-6);
    }
}
