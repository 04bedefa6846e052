//! The latency of a whole tier — `M` servers of `c` worker threads each, behind a client or
//! proxy that splits a request's keys by server and reads each client connection in order —
//! built on Cheng et al.'s queue at each server, extended from one service queue to `c` threads.
//!
//! ```text
//!   requests at rate R, N keys each, over C client connections
//!   server s holds a share p_s of the keys: imbalance/M for the most loaded, the rest equal
//!        keys at s: K ~ Binomial(N, p_s); queries at λ = R·(1 − (1 − p_s)^N)
//!        a query of K keys is served for Exp(mean S(K)): S̄ = E[S(K) | K ≥ 1], SCV c²
//!        GI/M/c: δ = solve_delta(ξ, ρ), ρ = λ·S̄/c   (Cheng's root; δ = ρ for Poisson)
//!                P{wait > t} = Π·e^{−θt},  Π = ErlangC(c, c·ρ)·δ/ρ,
//!                θ = c(1 − δ)/S̄ · 2/(1 + c²)     (M/G/c: Lee–Longton, Whitt 1993)
//!        the request's query there: the wait, then Exp(mean S(K))
//!   T = the slowest of the request's queries (servers taken as independent: an upper bound)
//!        P{T ≤ t} = Π_s Σ_k P{K_s = k}·P{sojourn_k ≤ t}
//!   connection (C > 0): busy with probability b = λ_c·E[T]/(q + λ_c·E[T]), λ_c = R/C,
//!        q = E[e^{−λ_c·T}]; a request that finds it busy waits the residual of the round in
//!        flight (density P{T > r}/E[T]), then its own T
//!   latency = network + connection wait + T; quantiles by bisection
//! ```
//!
//! `Π` is exact for Poisson arrivals (Erlang C) and for one thread (GI/M/1: `Π = δ`); in
//! between it interpolates. At `c = 1`, `ξ = 0`, one key per query and no connection wait the
//! sojourn is exactly M/M/1's `Exp(μ(1 − ρ))`.
//!
//! Where each term comes from, and what the testbed showed it was worth:
//! * **Service shape.** A query's keys follow the split, so its service is a mix of
//!   exponentials (4 keys over 4 servers: SCV 1.4), not one exponential of the mean. The wait
//!   of M/G/c is approximated by M/M/c's with its conditional mean stretched by `(1 + c²)/2`
//!   and the same probability of waiting (Lee & Longton 1959; Whitt, "Approximations for the
//!   GI/G/m queue", Production and Operations Management 2(2), 1993). `c² = 1`: unchanged.
//! * **Fan-out.** One request's queries reach the servers in the same instant, so the servers'
//!   queue states are associated; for associated sojourns `P{max ≤ t} ≥ Π P{X_s ≤ t}` (Esary,
//!   Proschan & Walkup 1967), so the product over independent servers bounds the fork-join
//!   tail from above (Nelson & Tantawi 1988; Baccelli, Makowski & Shwartz 1989). Correlated
//!   fan-out does not make the model under-read.
//! * **Ring imbalance.** The max over servers is set by the most loaded one: `imbalance`
//!   (Cheng et al.'s `p_1·M`; a ketama ring of 160 points per server leaves the heaviest of
//!   four about 7 % over the mean).
//! * **Connection order.** A client connection (a proxy's frontend, memcached's own) is read
//!   in rounds: a request that arrives while the connection's previous round is in flight
//!   waits for it ([`WorkloadProfile::client_connections`]). Its share of the tail grows with
//!   the load per connection, `λ_c·E[T]`.
//!
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
    /// `C`: client connections the requests arrive over (a uniform pick each), each read in
    /// order: a request that arrives while its connection's previous round is in flight waits
    /// for that round's replies. 0: not modelled (every request finds its connection free).
    #[serde(default)]
    pub client_connections: u32,
    /// The most loaded server's share of the keys over the mean share `1/M` (Cheng et al.'s
    /// `p_1·M`): 1 is balanced; the other servers share the rest equally.
    #[serde(default = "balanced")]
    pub imbalance: f64,
}

/// Every server holds `1/M` of the keys.
fn balanced() -> f64 {
    1.0
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
        if !(self.imbalance.is_finite() && self.imbalance >= 1.0) {
            return Err(ModelError::InvalidParameter {
                name: "imbalance",
                value: self.imbalance,
                reason: "the most loaded server holds at least the mean share (>= 1)",
            });
        }
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
    /// Queries per second at the most loaded server (each server when balanced).
    pub query_rate: f64,
    /// Mean service time of one query there.
    pub query_service: Seconds,
    /// Squared coefficient of variation of a query's service time there.
    pub service_scv: f64,
    /// `ρ = λ·S/c` at the most loaded server.
    pub utilization: f64,
    /// Probability that a query waits for a thread there.
    pub wait_probability: f64,
    /// Mean sojourn of one query there (wait + service).
    pub query_mean: Seconds,
    /// Probability that a request finds its client connection busy (0: not modelled).
    pub connection_busy: f64,
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

    /// The same queue with a service time of squared coefficient of variation `scv` instead
    /// of an exponential one (`scv = 1`): the probability of waiting is kept, the conditional
    /// wait's mean is stretched by `(1 + scv)/2` — the M/G/c approximation of Lee & Longton
    /// (1959), in Whitt's review ("Approximations for the GI/G/m queue", 1993, §2).
    pub fn with_service_scv(self, scv: f64) -> ServerQueue {
        let stretch = 0.5 * (1.0 + scv.max(0.0));
        ServerQueue {
            decay: self.decay / stretch,
            ..self
        }
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
/// Grid points of the latency distribution when the client connection's wait is convolved
/// with it (the quantile's resolution is the grid's span over this).
const CONNECTION_GRID_POINTS: usize = 4096;
/// The grid spans twice the time by which all but this share of requests are done.
const CONNECTION_GRID_TAIL: f64 = 1e-9;

/// `P{a server gets k of a request's keys}`, `k = 0..=n`: Binomial(n, 1/M) with
/// `n = round(keys)` (at least 1).
pub fn split_probabilities(keys: f64, servers: u32) -> Vec<f64> {
    let share = if servers <= 1 {
        1.0
    } else {
        1.0 / f64::from(servers)
    };
    split_by_share(keys, share)
}

/// `P{a server holding `share` of the keys gets k of a request's keys}`, `k = 0..=n`:
/// Binomial(n, share) with `n = round(keys)` (at least 1).
fn split_by_share(keys: f64, share: f64) -> Vec<f64> {
    let n = keys.round().clamp(1.0, MAX_SPLIT_KEYS) as usize;
    let mut probabilities = vec![0.0; n + 1];
    if share >= 1.0 {
        probabilities[n] = 1.0;
        return probabilities;
    }
    if share <= 0.0 {
        probabilities[0] = 1.0;
        return probabilities;
    }
    let odds = share / (1.0 - share);
    let mut term = (n as f64 * (-share).ln_1p()).exp();
    for (k, probability) in probabilities.iter_mut().enumerate() {
        *probability = term;
        term *= (n - k) as f64 / (k + 1) as f64 * odds;
    }
    probabilities
}

/// Expected servers touched by a request of `keys` keys spread uniformly over `servers`.
pub fn expected_fanout(servers: u32, keys: f64) -> f64 {
    let servers = f64::from(servers);
    servers * -((keys * (-1.0 / servers).ln_1p()).exp_m1())
}

/// `P{a server holding `share` of the keys is in a request of `keys` keys}`:
/// `1 − (1 − share)^keys` (fractional `keys`: the mean).
fn touch_probability(share: f64, keys: f64) -> f64 {
    if share >= 1.0 {
        1.0
    } else {
        -((keys * (-share).ln_1p()).exp_m1())
    }
}

/// The most loaded server's key share over the mean share `1/M` (the `imbalance` of a
/// [`WorkloadProfile`]), from the query rates measured at each of the `M` servers: a server
/// holding share `p` is in a request of `N` keys with probability `1 − (1 − p)^N`, so
/// `p = 1 − (1 − λ_s/R)^{1/N}`. At least 1; 1 when nothing was measured.
pub fn imbalance_from_query_rates(query_rates: &[f64], request_rate: f64, keys: f64) -> f64 {
    if query_rates.len() < 2 || !(request_rate > 0.0 && keys >= 1.0) {
        return 1.0;
    }
    let shares: Vec<f64> = query_rates
        .iter()
        .map(|rate| 1.0 - (1.0 - (rate / request_rate).clamp(0.0, 1.0)).powf(1.0 / keys))
        .collect();
    let total: f64 = shares.iter().sum();
    let heaviest = shares.iter().copied().fold(0.0, f64::max);
    if total > 0.0 {
        (heaviest / total * query_rates.len() as f64).max(1.0)
    } else {
        1.0
    }
}

/// Servers of one key share: how many, the split of a request's keys at one of them, and
/// the queue its queries meet (`None`: the share is 0, no query reaches them).
#[derive(Debug, Clone)]
struct ServerGroup {
    count: u32,
    split: Vec<f64>,
    query_rate: f64,
    query_service: Seconds,
    service_scv: f64,
    queue: Option<ServerQueue>,
}

impl ServerGroup {
    /// One of `count` servers holding `share` of the keys each.
    fn new(
        profile: &WorkloadProfile,
        threads: u32,
        share: f64,
        count: u32,
    ) -> Result<ServerGroup, ModelError> {
        let split = split_by_share(profile.keys_per_request, share);
        let touched = touch_probability(share, profile.keys_per_request);
        let query_rate = profile.request_rate * touched;
        // The mean query: the keys it holds on average given it has any (fractional `N`
        // kept, as the load's mean).
        let query_service = if touched > 0.0 {
            profile
                .service
                .of(profile.keys_per_request * share / touched)
        } else {
            profile.service.of(1.0)
        };
        let service_scv = split_service_scv(&split, &profile.service);
        let queue = if query_rate > 0.0 {
            Some(
                ServerQueue::new(query_rate, query_service, threads, profile.burst_degree)?
                    .with_service_scv(service_scv),
            )
        } else {
            None
        };
        Ok(ServerGroup {
            count,
            split,
            query_rate,
            query_service,
            service_scv,
            queue,
        })
    }

    /// `P{this server's query of the request, if any, is done by t}`: a query of `k` keys
    /// has its own exponential service of mean `S(k)` after the queue's wait.
    fn done_by(&self, service: &ServiceCost, t: f64) -> f64 {
        let Some(queue) = &self.queue else {
            return 1.0;
        };
        let done: f64 = self
            .split
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
        done.clamp(0.0, 1.0)
    }
}

/// Squared coefficient of variation of a query's service time: a query of `k` keys is
/// served for `Exp(mean S(k))`, `k` as the split gives it (`k ≥ 1`): a mix of exponentials,
/// `E[S²] = Σ P{k}·2·S(k)²`. 1 when every query costs the same.
fn split_service_scv(split: &[f64], service: &ServiceCost) -> f64 {
    let (mut weight, mut mean, mut second) = (0.0, 0.0, 0.0);
    for (keys, probability) in split.iter().enumerate().skip(1) {
        let time = service.of(keys as f64).0;
        weight += probability;
        mean += probability * time;
        second += probability * 2.0 * time * time;
    }
    if weight <= 0.0 || mean <= 0.0 {
        return 1.0;
    }
    let (mean, second) = (mean / weight, second / weight);
    (second / (mean * mean) - 1.0).max(0.0)
}

/// The servers by key share: the most loaded one first (`imbalance/M` of the keys), then the
/// other `M − 1` sharing the rest equally.
fn server_groups(
    profile: &WorkloadProfile,
    shape: TierShape,
) -> Result<Vec<ServerGroup>, ModelError> {
    let servers = f64::from(shape.servers);
    if shape.servers == 1 {
        return Ok(vec![ServerGroup::new(profile, shape.threads, 1.0, 1)?]);
    }
    let heaviest = (profile.imbalance / servers).min(1.0);
    let rest = ((1.0 - heaviest) / (servers - 1.0)).max(0.0);
    if (heaviest - rest).abs() <= 1e-12 * heaviest {
        return Ok(vec![ServerGroup::new(
            profile,
            shape.threads,
            1.0 / servers,
            shape.servers,
        )?]);
    }
    Ok(vec![
        ServerGroup::new(profile, shape.threads, heaviest, 1)?,
        ServerGroup::new(profile, shape.threads, rest, shape.servers - 1)?,
    ])
}

/// `P{T ≤ t}`, `T` the request's latency without the network and the connection: the slowest
/// of its queries, the servers taken as independent.
fn queries_done_by(groups: &[ServerGroup], service: &ServiceCost, t: f64) -> f64 {
    groups
        .iter()
        .map(|group| group.done_by(service, t).powf(f64::from(group.count)))
        .product()
}

/// The request's latency `T` (without the network) on a grid, and the wait for the client
/// connection convolved with it.
///
/// A connection is read in rounds (what arrived while the previous round was in flight is
/// read together, its replies leave together). Requests reach a connection as a Poisson
/// stream of rate `λ_c = R/C` (a uniform pick among `C` connections thins a Poisson stream).
/// Taking a round's length as one request's `T`: a round is followed at once by another if a
/// request arrived during it (probability `1 − q`, `q = E[e^{−λ_c·T}]`), so a busy period has
/// `1/q` rounds on average and the connection is busy a share
/// `b = λ_c·E[T] / (q + λ_c·E[T])` of the time. By PASTA an arrival finds it busy with
/// probability `b` and then waits the residual of the round in progress, whose density is
/// the equilibrium density `P{T > r}/E[T]` (renewal theory; Kleinrock, *Queueing Systems*
/// vol. 1, §5.2). The latency is then `(1 − b)·T + b·(R + T)` in distribution, `R` and `T`
/// independent. This is the gated (batch) service of a polling server, approximated by its
/// first-order term: a round of several requests lasts the longest of them, a little more
/// than one `T`, so the wait read here is a slight under-estimate at high connection load.
struct ConnectionWait {
    step: f64,
    /// `P{T ≤ i·step}`.
    done: Vec<f64>,
    /// `P{T > i·step}/E[T]`.
    residual_density: Vec<f64>,
    busy: f64,
}

impl ConnectionWait {
    fn new(
        groups: &[ServerGroup],
        profile: &WorkloadProfile,
        start: f64,
    ) -> Result<ConnectionWait, ModelError> {
        let service = &profile.service;
        let nearly_all = first_time_where(start, |t| {
            1.0 - queries_done_by(groups, service, t) <= CONNECTION_GRID_TAIL
        })?;
        let step = 2.0 * nearly_all.0 / CONNECTION_GRID_POINTS as f64;
        let done: Vec<f64> = (0..=CONNECTION_GRID_POINTS)
            .map(|i| queries_done_by(groups, service, i as f64 * step))
            .collect();
        let arrival_rate = profile.request_rate / f64::from(profile.client_connections.max(1));
        let mut mean = 0.0;
        let mut idle_chance = 0.0;
        for (i, pair) in done.windows(2).enumerate() {
            let survival = 1.0 - 0.5 * (pair[0] + pair[1]);
            mean += survival * step;
            idle_chance += (-arrival_rate * (i as f64 + 0.5) * step).exp() * survival * step;
        }
        // E[e^{−λT}] = 1 − λ·∫ e^{−λt}·P{T > t} dt.
        let no_arrival = (1.0 - arrival_rate * idle_chance).clamp(0.0, 1.0);
        if mean <= 0.0 {
            return Err(ModelError::Numerical("request latency of zero mean"));
        }
        let busy = arrival_rate * mean / (no_arrival + arrival_rate * mean);
        let residual_density = done.iter().map(|d| (1.0 - d) / mean).collect();
        Ok(ConnectionWait {
            step,
            done,
            residual_density,
            busy,
        })
    }

    /// `P{wait + T ≤ j·step}` (trapezoid rule for the convolution).
    fn done_by_point(&self, j: usize) -> f64 {
        let convolved = if j == 0 {
            0.0
        } else {
            let inner: f64 = (1..j)
                .map(|i| self.residual_density[i] * self.done[j - i])
                .sum();
            let ends = 0.5
                * (self.residual_density[0] * self.done[j]
                    + self.residual_density[j] * self.done[0]);
            (inner + ends) * self.step
        };
        (1.0 - self.busy) * self.done[j] + self.busy * convolved.clamp(0.0, 1.0)
    }

    /// The `level` quantile of `wait + T`, interpolated between grid points.
    fn quantile(&self, level: f64) -> Result<Seconds, ModelError> {
        let (mut low, mut high) = (0, self.done.len() - 1);
        if self.done_by_point(high) < level {
            return Err(ModelError::Numerical("quantile beyond the latency grid"));
        }
        while high - low > 1 {
            let middle = (low + high) / 2;
            if self.done_by_point(middle) >= level {
                high = middle;
            } else {
                low = middle;
            }
        }
        let (below, above) = (self.done_by_point(low), self.done_by_point(high));
        let fraction = if above > below {
            ((level - below) / (above - below)).clamp(0.0, 1.0)
        } else {
            1.0
        };
        Ok(Seconds((low as f64 + fraction) * self.step))
    }
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
    let groups = server_groups(profile, shape)?;
    let fanout: f64 = groups
        .iter()
        .map(|group| f64::from(group.count) * group.query_rate / profile.request_rate)
        .sum::<f64>()
        .max(1.0);
    let heaviest = &groups[0];
    let queue = heaviest.queue.ok_or(ModelError::Numerical(
        "no query reaches the most loaded server",
    ))?;
    let largest = profile.service.of((heaviest.split.len() - 1) as f64).0;
    let start = groups
        .iter()
        .filter_map(|group| group.queue.map(|queue| 1.0 / queue.decay))
        .fold(largest, f64::max);
    let (p50, p99, connection_busy) = if profile.client_connections == 0 {
        let quantile = |level: f64| {
            first_time_where(start, |t| {
                queries_done_by(&groups, &profile.service, t) >= level
            })
        };
        (quantile(0.5)?, quantile(0.99)?, 0.0)
    } else {
        let wait = ConnectionWait::new(&groups, profile, start)?;
        (wait.quantile(0.5)?, wait.quantile(0.99)?, wait.busy)
    };
    Ok(TierPrediction {
        shape,
        fanout,
        query_rate: heaviest.query_rate,
        query_service: heaviest.query_service,
        service_scv: heaviest.service_scv,
        utilization: heaviest.query_rate * heaviest.query_service.0 / f64::from(shape.threads),
        wait_probability: queue.wait_probability(),
        query_mean: queue.mean(),
        connection_busy,
        p50: profile.network + p50,
        p99: profile.network + p99,
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
            client_connections: 0,
            imbalance: 1.0,
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
