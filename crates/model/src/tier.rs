//! The latency of a whole tier — `M` servers of `c` worker threads each, behind a client or
//! proxy that splits a request's keys by server — built on Cheng et al.'s queue at each
//! server, extended from one service queue to `c` threads.
//!
//! ```text
//!   requests at rate R, N keys each ──split by server──► k = M·(1 − (1 − 1/M)^N) queries
//!        each server: queries at λ = R·k/M, N/k keys each, service ~ Exp(mean S(N/k))
//!        GI/M/c: δ = solve_delta(ξ, ρ), ρ = λ·S/c   (Cheng's root; δ = ρ for Poisson)
//!                P{wait > t} = Π·e^{−c(1−δ)t/S},  Π = ErlangC(c, c·ρ)·δ/ρ
//!                sojourn = wait + service
//!   request latency = network + max over the M servers of its query there (if any):
//!        keys at a server K ~ Binomial(N, 1/M); a query of K keys waits as above, then is
//!        served for Exp(mean S(K))            (servers taken as independent)
//!   p-quantile t:  (Σ_k P{K = k}·P{sojourn_k ≤ t})^M = p   (solved by bisection)
//! ```
//!
//! `Π` is exact for Poisson arrivals (Erlang C) and for one thread (GI/M/1: `Π = δ`); in
//! between it interpolates. At `c = 1`, `ξ = 0` the sojourn is exactly M/M/1's `Exp(μ(1 − ρ))`.
//! Assumptions and where they fail: `docs/model.md`.

use serde::{Deserialize, Serialize};

use crate::cheng::solve_delta;
use crate::error::{check_non_negative, check_positive, check_range, ModelError};
use crate::time::Seconds;

/// Service time of one query at one worker thread: `fixed + per_key · keys`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServiceCost {
    /// Constant part of a query's service time.
    pub fixed: Seconds,
    /// Service time per key in the query.
    pub per_key: Seconds,
}

impl ServiceCost {
    /// Mean service time of a query of `keys` keys (fractional: a mean).
    pub fn of(&self, keys: f64) -> Seconds {
        Seconds(self.fixed.0 + self.per_key.0 * keys)
    }
}

/// What the tier is asked to carry: the workload profile.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WorkloadProfile {
    /// `R`: end-user requests per second over the whole tier.
    pub request_rate: f64,
    /// `N ≥ 1`: mean keys per request (1 for single gets; a multiget's keys).
    pub keys_per_request: f64,
    /// Mean value size in bytes (reported, not used by the latency model).
    pub value_bytes: f64,
    /// Service time of a query at one thread.
    pub service: ServiceCost,
    /// `ξ ∈ [0, 1)`: burst degree of the arrivals (0 = Poisson), as in Cheng et al.
    pub burst_degree: f64,
    /// Constant latency added to every request (network, client, proxy).
    pub network: Seconds,
}

impl WorkloadProfile {
    fn validate(&self) -> Result<(), ModelError> {
        check_positive("request_rate", self.request_rate)?;
        if !(self.keys_per_request.is_finite() && self.keys_per_request >= 1.0) {
            return Err(ModelError::InvalidParameter {
                name: "keys_per_request",
                value: self.keys_per_request,
                reason: "a request carries at least one key",
            });
        }
        check_non_negative("value_bytes", self.value_bytes)?;
        check_non_negative("service_fixed", self.service.fixed.0)?;
        check_non_negative("service_per_key", self.service.per_key.0)?;
        check_positive("service_time", self.service.of(1.0).0)?;
        check_range("xi", self.burst_degree, 0.0, 1.0, false)?;
        if self.burst_degree >= 1.0 {
            return Err(ModelError::InvalidParameter {
                name: "xi",
                value: self.burst_degree,
                reason: "burst degree must be < 1",
            });
        }
        check_non_negative("network", self.network.0)?;
        Ok(())
    }
}

/// A tier's shape: how many servers, how many worker threads each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierShape {
    /// `M ≥ 1` servers.
    pub servers: u32,
    /// `c ≥ 1` worker threads per server.
    pub threads: u32,
}

/// The model's answer for one profile on one tier shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TierPrediction {
    /// The shape evaluated.
    pub shape: TierShape,
    /// `k`: expected servers one request touches.
    pub fanout: f64,
    /// Queries per second at each server.
    pub query_rate: f64,
    /// Mean service time of one query.
    pub query_service: Seconds,
    /// `ρ = λ·S/c` at each server.
    pub utilization: f64,
    /// Probability that a query waits for a thread.
    pub wait_probability: f64,
    /// Mean sojourn of one query at a server (wait + service).
    pub query_mean: Seconds,
    /// Median request latency.
    pub p50: Seconds,
    /// 99th percentile of the request latency.
    pub p99: Seconds,
}

/// Erlang's C formula: the probability that an arrival waits in M/M/c at offered load
/// `offered = λ/μ` (< c). Computed by the Erlang B recursion, stable for any `c`.
pub fn erlang_c(threads: u32, offered: f64) -> f64 {
    let mut blocking = 1.0;
    for servers in 1..=threads {
        let servers = f64::from(servers);
        blocking = offered * blocking / (servers + offered * blocking);
    }
    let utilization = offered / f64::from(threads);
    blocking / (1.0 - utilization + utilization * blocking)
}

/// The queue of one server: `c` threads, exponential service of mean `service`, waits
/// with an exponential tail of rate `decay` reached with probability `wait_probability`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerQueue {
    /// `μ = 1/S`.
    service_rate: f64,
    /// `θ = c·μ·(1 − δ)`.
    decay: f64,
    /// `Π`.
    wait_probability: f64,
}

impl ServerQueue {
    /// The queue of `threads` threads at `query_rate` queries/s of mean service `service`,
    /// arrivals of burst degree `burst_degree`. Unstable (`ρ ≥ 1`) is an error.
    pub fn new(
        query_rate: f64,
        service: Seconds,
        threads: u32,
        burst_degree: f64,
    ) -> Result<ServerQueue, ModelError> {
        check_positive("query_rate", query_rate)?;
        check_positive("service_time", service.0)?;
        if threads == 0 {
            return Err(ModelError::InvalidParameter {
                name: "threads",
                value: 0.0,
                reason: "at least one thread",
            });
        }
        let service_rate = 1.0 / service.0;
        let offered = query_rate * service.0;
        let utilization = offered / f64::from(threads);
        let delta = solve_delta(burst_degree, utilization)?;
        let wait_probability = (erlang_c(threads, offered) * delta / utilization).clamp(0.0, 1.0);
        Ok(ServerQueue {
            service_rate,
            decay: f64::from(threads) * service_rate * (1.0 - delta),
            wait_probability,
        })
    }

    /// `P{sojourn > t}`: no wait and service beyond `t`, or a wait then service.
    pub fn survival(&self, t: f64) -> f64 {
        self.survival_with(t, self.service_rate)
    }

    /// `P{sojourn > t}` of a query whose own service has rate `mu` (the wait is the queue's).
    pub fn survival_with(&self, t: f64, mu: f64) -> f64 {
        let theta = self.decay;
        let service_only = (-mu * t).exp();
        // Exp(μ) + Exp(θ) exceeds t with probability (θe^{−μt} − μe^{−θt})/(θ − μ).
        let waited = if ((theta - mu) / mu).abs() < 1e-9 {
            service_only * (1.0 + mu * t)
        } else {
            (theta * service_only - mu * (-theta * t).exp()) / (theta - mu)
        };
        (1.0 - self.wait_probability) * service_only + self.wait_probability * waited
    }

    /// Mean sojourn: `1/μ + Π/θ`.
    pub fn mean(&self) -> Seconds {
        Seconds(1.0 / self.service_rate + self.wait_probability / self.decay)
    }

    /// Probability that a query waits for a thread.
    pub fn wait_probability(&self) -> f64 {
        self.wait_probability
    }

    /// The `level` quantile of the largest of `fanout` independent sojourns.
    pub fn max_quantile(&self, level: f64, fanout: f64) -> Result<Seconds, ModelError> {
        check_range("level", level, 0.0, 1.0, true)?;
        check_positive("fanout", fanout)?;
        // P{max ≤ t} = (1 − S(t))^k = level  ⇔  S(t) = 1 − level^{1/k}.
        let target = -(level.ln() / fanout).exp_m1();
        first_time_where(1.0 / self.service_rate.min(self.decay), |t| {
            self.survival(t) <= target
        })
    }
}

/// The smallest `t ≥ 0` (to a relative 1e-12) where the non-decreasing `reached(t)` holds,
/// bracketed by doubling from `start`.
fn first_time_where(start: f64, reached: impl Fn(f64) -> bool) -> Result<Seconds, ModelError> {
    let mut high = start;
    let mut doublings = 0;
    while !reached(high) {
        high *= 2.0;
        doublings += 1;
        if doublings > 200 {
            return Err(ModelError::Numerical("quantile beyond any bound"));
        }
    }
    let mut low = 0.0;
    for _ in 0..200 {
        let middle = 0.5 * (low + high);
        if reached(middle) {
            high = middle;
        } else {
            low = middle;
        }
        if high - low <= 1e-12 * high {
            break;
        }
    }
    Ok(Seconds(high))
}

/// Largest key count whose split over the servers is taken exactly.
const MAX_SPLIT_KEYS: f64 = 10_000.0;

/// `P{a server gets k of a request's keys}`, `k = 0..=n`: Binomial(n, 1/M) with
/// `n = round(keys)` (at least 1).
pub fn split_probabilities(keys: f64, servers: u32) -> Vec<f64> {
    let n = keys.round().clamp(1.0, MAX_SPLIT_KEYS) as usize;
    let mut probabilities = vec![0.0; n + 1];
    if servers <= 1 {
        probabilities[n] = 1.0;
        return probabilities;
    }
    let share = 1.0 / f64::from(servers);
    let odds = share / (1.0 - share);
    let mut term = (n as f64 * (-share).ln_1p()).exp();
    for (k, probability) in probabilities.iter_mut().enumerate() {
        *probability = term;
        term *= (n - k) as f64 / (k + 1) as f64 * odds;
    }
    probabilities
}

/// `P{request latency − network ≤ t}`: at each of the `M` servers (taken as independent) the
/// request's query, if it has keys there, is done by `t`; a query of `k` keys has its own
/// exponential service of mean `S(k)` after the queue's wait.
fn request_done_by(
    queue: &ServerQueue,
    service: &ServiceCost,
    split: &[f64],
    servers: u32,
    t: f64,
) -> f64 {
    let at_one_server: f64 = split
        .iter()
        .enumerate()
        .map(|(keys, probability)| {
            if keys == 0 {
                *probability
            } else {
                let rate = 1.0 / service.of(keys as f64).0;
                probability * (1.0 - queue.survival_with(t, rate))
            }
        })
        .sum();
    at_one_server.clamp(0.0, 1.0).powf(f64::from(servers))
}

/// Expected servers touched by a request of `keys` keys spread uniformly over `servers`.
pub fn expected_fanout(servers: u32, keys: f64) -> f64 {
    let servers = f64::from(servers);
    servers * -((keys * (-1.0 / servers).ln_1p()).exp_m1())
}

/// Evaluates the tier model for `profile` on `shape`.
pub fn predict(profile: &WorkloadProfile, shape: TierShape) -> Result<TierPrediction, ModelError> {
    profile.validate()?;
    if shape.servers == 0 {
        return Err(ModelError::InvalidParameter {
            name: "servers",
            value: 0.0,
            reason: "at least one server",
        });
    }
    let fanout = if shape.servers == 1 {
        1.0
    } else {
        expected_fanout(shape.servers, profile.keys_per_request).max(1.0)
    };
    let query_rate = profile.request_rate * fanout / f64::from(shape.servers);
    let query_service = profile.service.of(profile.keys_per_request / fanout);
    let queue = ServerQueue::new(
        query_rate,
        query_service,
        shape.threads,
        profile.burst_degree,
    )?;
    Ok(TierPrediction {
        shape,
        fanout,
        query_rate,
        query_service,
        utilization: query_rate * query_service.0 / f64::from(shape.threads),
        wait_probability: queue.wait_probability(),
        query_mean: queue.mean(),
        p50: profile.network + request_quantile(&queue, profile, shape.servers, 0.5)?,
        p99: profile.network + request_quantile(&queue, profile, shape.servers, 0.99)?,
    })
}

/// The `level` quantile of a request's latency without the network constant.
fn request_quantile(
    queue: &ServerQueue,
    profile: &WorkloadProfile,
    servers: u32,
    level: f64,
) -> Result<Seconds, ModelError> {
    let split = split_probabilities(profile.keys_per_request, servers);
    let largest = profile.service.of((split.len() - 1) as f64).0;
    first_time_where(largest.max(1.0 / queue.decay), |t| {
        request_done_by(queue, &profile.service, &split, servers, t) >= level
    })
}

#[cfg(test)]
mod tests {
    use super::{
        erlang_c, expected_fanout, predict, split_probabilities, ServerQueue, ServiceCost,
        TierShape, WorkloadProfile,
    };
    use crate::time::Seconds;

    fn profile(rate: f64, keys: f64) -> WorkloadProfile {
        WorkloadProfile {
            request_rate: rate,
            keys_per_request: keys,
            value_bytes: 100.0,
            service: ServiceCost {
                fixed: Seconds::from_micros(100.0),
                per_key: Seconds::ZERO,
            },
            burst_degree: 0.0,
            network: Seconds::ZERO,
        }
    }

    #[test]
    fn one_thread_poisson_is_mm1() {
        // M/M/1 at ρ = 0.5, μ = 10 000/s: sojourn ~ Exp(5 000/s), p99 = ln(100)/5 000 s.
        let prediction = predict(
            &profile(5_000.0, 1.0),
            TierShape {
                servers: 1,
                threads: 1,
            },
        )
        .expect("stable");
        let expected = 100f64.ln() / 5_000.0;
        assert!(
            (prediction.p99.0 - expected).abs() < 1e-9 * expected.max(1.0),
            "{prediction:?}"
        );
        assert!((prediction.query_mean.0 - 1.0 / 5_000.0).abs() < 1e-12);
    }

    #[test]
    fn split_probabilities_are_a_distribution_with_mean_keys_over_servers() {
        let split = split_probabilities(4.0, 4);
        assert!((split.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let mean: f64 = split.iter().enumerate().map(|(k, p)| k as f64 * p).sum();
        assert!((mean - 1.0).abs() < 1e-12);
        assert_eq!(split_probabilities(3.0, 1), vec![0.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn uneven_splits_lengthen_the_tail() {
        // A query's keys vary with the split: its service is a mix of exponentials, whose
        // tail is longer than one exponential of the mean.
        let mut spread = profile(100.0, 4.0);
        spread.service = ServiceCost {
            fixed: Seconds::ZERO,
            per_key: Seconds::from_micros(100.0),
        };
        let shape = TierShape {
            servers: 4,
            threads: 4,
        };
        let prediction = predict(&spread, shape).expect("stable");
        let queue = ServerQueue::new(prediction.query_rate, prediction.query_service, 4, 0.0)
            .expect("stable");
        let mean_split = queue.max_quantile(0.99, prediction.fanout).expect("finite");
        assert!(
            prediction.p99.0 > mean_split.0,
            "{prediction:?} {mean_split:?}"
        );
    }

    #[test]
    fn erlang_c_known_values() {
        assert!((erlang_c(1, 0.5) - 0.5).abs() < 1e-12);
        // M/M/2 at offered load 1: C = 1/3.
        assert!((erlang_c(2, 1.0) - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn fanout_is_between_one_and_the_smaller_of_keys_and_servers() {
        assert!((expected_fanout(4, 1.0) - 1.0).abs() < 1e-12);
        let fanout = expected_fanout(4, 100.0);
        assert!(fanout > 3.99 && fanout <= 4.0);
        assert!(expected_fanout(100, 3.0) < 3.0);
    }

    #[test]
    fn quantile_of_a_max_grows_with_the_fanout() {
        let queue = ServerQueue::new(1_000.0, Seconds::from_micros(100.0), 2, 0.2).expect("stable");
        let one = queue.max_quantile(0.99, 1.0).expect("finite");
        let ten = queue.max_quantile(0.99, 10.0).expect("finite");
        assert!(ten.0 > one.0);
        assert!((queue.survival(one.0) - 0.01).abs() < 1e-9);
    }
}
