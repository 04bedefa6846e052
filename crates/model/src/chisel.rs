//! Chisel's layered latency model (Birke et al., ICAC 2019, Sections III–IV),
//! derived for this project: the paper gives the structure, not the formulas.
//! The derivation is in `docs/model-chisel.md`; this is its implementation.
//!
//! ```text
//!  requests ~ Poisson(Λ), mice (K_m keys) and elephants (K_e keys)
//!    │ dispatcher, round robin over C client query threads
//!    ├─ mice: B consecutive mice → one merged query of B·K_m keys (merge wait)
//!    └─ elephant: m = ⌈K_e / L⌉ chunks of ≤ L keys on m threads   (fork-join)
//!  client thread (GI/G/1, FIFO; mice and chunks wait differently)  busy = setup o (overlaps the merge wait)
//!        + network N_S(K) = c + d·K + server response W_S + P_S(K)  ◀── layered
//!  server thread (M/G/1, FIFO, S of them, random choice)  service P_S(K) = a + b·K
//!  request latency: mouse = its group's completion − its arrival,
//!                   elephant = shared wait + max over its chunks (harmonic numbers)
//! ```
//!
//! Every evaluation is closed form (plus a short bisection for the overall p95),
//! so [`ChiselModel::predict`] costs microseconds and [`best_plan`] over a few hundred
//! `(B, L)` pairs is cheap enough to run every epoch in a proxy.

use serde::{Deserialize, Serialize};

use crate::error::{check_non_negative, check_positive, check_range, ModelError};
use crate::numeric::{harmonic_number, integrate_unit_interval};
use crate::time::Seconds;

/// A time that is affine in the number of keys: `fixed + per_key · K`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinearCost {
    /// Constant part (protocol headers, RTT).
    pub fixed: Seconds,
    /// Part per key (lookup, value transfer).
    pub per_key: Seconds,
}

impl LinearCost {
    /// `fixed + per_key · keys`, in seconds.
    pub fn at(&self, keys: f64) -> f64 {
        self.fixed.0 + self.per_key.0 * keys
    }
}

/// Workload and system inputs of the layered model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChiselParams {
    /// `Λ`: user requests per second arriving at this client (Poisson).
    pub arrival_rate: f64,
    /// Fraction of requests that are elephants (9:1 mice:elephant → 0.1).
    pub elephant_fraction: f64,
    /// Keys in a mouse request.
    pub mouse_keys: u32,
    /// Keys in an elephant request.
    pub elephant_keys: u32,
    /// `C`: client query threads.
    pub client_threads: u32,
    /// `S`: memcached worker threads in the replica pool (servers × threads each).
    pub server_threads: u32,
    /// `P_S(K) = a + b·K`: processing time of a K-key query at memcached.
    pub processing: LinearCost,
    /// `N_S(K) = c + d·K`: network time of a K-key query (request + values back).
    pub network: LinearCost,
    /// `o`: client-side overhead (connection setup, library) per query.
    pub client_overhead: Seconds,
}

impl ChiselParams {
    /// The paper's testbed profile: P_S = 3.3 + 0.6·K µs, N_S = 85 + 6.5·K µs,
    /// 9:1 mice (10 keys) to elephants (100 keys), 4 servers × 4 threads,
    /// 16 client threads, no injected overhead, mean inter-arrival 200 µs.
    pub fn paper_defaults() -> Self {
        Self {
            arrival_rate: 5_000.0,
            elephant_fraction: 0.1,
            mouse_keys: 10,
            elephant_keys: 100,
            client_threads: 16,
            server_threads: 16,
            processing: LinearCost {
                fixed: Seconds::from_micros(3.3),
                per_key: Seconds::from_micros(0.6),
            },
            network: LinearCost {
                fixed: Seconds::from_micros(85.0),
                per_key: Seconds::from_micros(6.5),
            },
            client_overhead: Seconds::ZERO,
        }
    }

    fn validate(&self) -> Result<(), ModelError> {
        check_positive("arrival_rate", self.arrival_rate)?;
        check_range("elephant_fraction", self.elephant_fraction, 0.0, 1.0, false)?;
        for (name, value) in [
            ("mouse_keys", self.mouse_keys),
            ("elephant_keys", self.elephant_keys),
            ("client_threads", self.client_threads),
            ("server_threads", self.server_threads),
        ] {
            if value == 0 {
                return Err(ModelError::InvalidParameter {
                    name,
                    value: 0.0,
                    reason: "must be at least 1",
                });
            }
        }
        check_non_negative("processing.fixed", self.processing.fixed.0)?;
        check_non_negative("processing.per_key", self.processing.per_key.0)?;
        check_non_negative("network.fixed", self.network.fixed.0)?;
        check_non_negative("network.per_key", self.network.per_key.0)?;
        check_non_negative("client_overhead", self.client_overhead.0)?;
        Ok(())
    }
}

/// Mean and 95th percentile of one class of requests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClassLatency {
    /// Mean latency.
    pub mean: Seconds,
    /// 95th percentile.
    pub p95: Seconds,
}

/// The model's output for one `(B, L)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Merge level `B` (mice per query).
    pub merge_level: u32,
    /// Chunk size `L` (keys per elephant chunk).
    pub chunk_size: u32,
    /// Number of chunks an elephant is split into, `⌈K_e / L⌉`.
    pub chunks: u32,
    /// Mice.
    pub mice: ClassLatency,
    /// Elephants.
    pub elephant: ClassLatency,
    /// All requests (mean weighted by the mix; p95 of the mixture).
    pub overall: ClassLatency,
    /// Utilization of one client query thread.
    pub client_utilization: f64,
    /// Utilization of one memcached thread.
    pub server_utilization: f64,
    /// Mean wait in a client thread queue, averaged over units (merged mice and chunks).
    pub client_wait: Seconds,
    /// Mean wait in a memcached thread queue.
    pub server_wait: Seconds,
}

/// What [`best_plan`] minimizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Objective {
    /// Mean latency over all requests.
    Mean,
    /// 95th percentile over all requests.
    P95,
}

impl Objective {
    fn score(self, prediction: &Prediction) -> f64 {
        match self {
            Objective::Mean => prediction.overall.mean.0,
            Objective::P95 => prediction.overall.p95.0,
        }
    }
}

/// The `(B, L)` candidates searched by [`best_plan`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanGrid {
    /// Merge levels `B` to try (1 = no merging).
    pub merge_levels: Vec<u32>,
    /// Chunk sizes `L` to try (`L ≥ K_e` = no splitting).
    pub chunk_sizes: Vec<u32>,
    /// What to minimize.
    pub objective: Objective,
    /// Chisel only merges mice that arrive within the connection setup: if set,
    /// merge levels whose mean accumulation time `(B − 1)/λ_mice` exceeds this are skipped.
    pub max_merge_wait: Option<Seconds>,
}

impl PlanGrid {
    /// `B ∈ 1..=8`, `L` ∈ every distinct chunk size giving 1..=min(K_e, 4·C) chunks.
    pub fn default_for(params: &ChiselParams) -> Self {
        let elephant_keys = params.elephant_keys.max(1);
        let max_chunks = elephant_keys.min(params.client_threads.saturating_mul(4).max(1));
        let mut chunk_sizes: Vec<u32> = (1..=max_chunks)
            .map(|chunks| elephant_keys.div_ceil(chunks))
            .collect();
        chunk_sizes.sort_unstable();
        chunk_sizes.dedup();
        Self {
            merge_levels: (1..=8).collect(),
            chunk_sizes,
            objective: Objective::Mean,
            max_merge_wait: None,
        }
    }
}

/// Moments of a mixture of query types at one layer.
#[derive(Debug, Clone, Copy, Default)]
struct Moments {
    rate: f64,
    first: f64,
    second: f64,
    third: f64,
}

impl Moments {
    /// Adds a stream of `rate` items whose (random) service has the given raw moments.
    fn add(&mut self, rate: f64, first: f64, second: f64, third: f64) {
        self.rate += rate;
        self.first += rate * first;
        self.second += rate * second;
        self.third += rate * third;
    }

    fn finish(self) -> Self {
        if self.rate <= 0.0 {
            return self;
        }
        Self {
            rate: self.rate,
            first: self.first / self.rate,
            second: self.second / self.rate,
            third: self.third / self.rate,
        }
    }
}

/// Pollaczek–Khinchine / Takács: utilization, mean and second moment of the wait
/// in an M/G/1 queue with arrival rate `rate` and service moments `moments`.
fn mg1_wait(
    rate: f64,
    moments: &Moments,
    stage: &'static str,
) -> Result<(f64, f64, f64), ModelError> {
    let utilization = rate * moments.first;
    if utilization.is_nan() || utilization >= 1.0 {
        return Err(ModelError::Unstable { stage, utilization });
    }
    let mean = rate * moments.second / (2.0 * (1.0 - utilization));
    let second = 2.0 * mean * mean + rate * moments.third / (3.0 * (1.0 - utilization));
    Ok((utilization, mean, second))
}

/// Mean wait in a GI/G/1 queue by the Krämer–Langenbach-Belz approximation:
/// Kingman's `ρ/(1−ρ) · (c_a² + c_s²)/2 · E[S]` times, for `c_a² < 1`,
/// `g = exp(−2(1−ρ)(1−c_a²)² / (3ρ(c_a² + c_s²)))`. Exact for M/M/1 and M/G/1 (`c_a² = 1`).
///
/// Client threads receive every `C`-th unit of the dispatcher's round robin, so
/// their inter-arrival SCV is about `1/C` (Erlang-C gaps for a Poisson input).
fn gg1_wait(
    rate: f64,
    moments: &Moments,
    arrival_scv: f64,
    stage: &'static str,
) -> Result<(f64, f64), ModelError> {
    let utilization = rate * moments.first;
    if utilization.is_nan() || utilization >= 1.0 {
        return Err(ModelError::Unstable { stage, utilization });
    }
    if utilization <= 0.0 {
        return Ok((0.0, 0.0));
    }
    let service_scv = (moments.second / (moments.first * moments.first) - 1.0).max(0.0);
    let kingman =
        utilization / (1.0 - utilization) * (arrival_scv + service_scv) / 2.0 * moments.first;
    let correction = if arrival_scv < 1.0 && arrival_scv + service_scv > 0.0 {
        (-2.0 * (1.0 - utilization) * (1.0 - arrival_scv).powi(2)
            / (3.0 * utilization * (arrival_scv + service_scv)))
            .exp()
    } else {
        1.0
    };
    Ok((utilization, kingman * correction))
}

/// Second moment of a client wait of mean `gg1_mean`: the M/G/1 (Takács) wait
/// rescaled in time so that its mean is `gg1_mean`, i.e. `E[W²]_{M/G/1} · (W/W_{M/G/1})²`
/// (same shape and CV as the M/G/1 wait). Against the Monte-Carlo test this is closer
/// than keeping the M/G/1 tail decay and lowering only the probability of waiting
/// (worst p95 error 29% instead of 43%; see docs/model-chisel.md).
fn client_wait_second_moment(rate: f64, moments: &Moments, gg1_mean: f64) -> f64 {
    let utilization = rate * moments.first;
    if utilization <= 0.0 || utilization >= 1.0 {
        return 0.0;
    }
    let mg1_mean = rate * moments.second / (2.0 * (1.0 - utilization));
    let mg1_second = 2.0 * mg1_mean * mg1_mean + rate * moments.third / (3.0 * (1.0 - utilization));
    if mg1_mean <= 0.0 {
        return 0.0;
    }
    mg1_second * (gg1_mean / mg1_mean).powi(2)
}

/// Rounds of the merge-wait / queue-wait fixed point (converges in 3–6 in practice).
const MERGE_FIXED_POINT_ROUNDS: usize = 12;

/// How units reach one client thread (see [`client_thread_waits`]).
#[derive(Debug, Clone, Copy)]
struct ClientDispatch {
    threads: f64,
    merge_level: f64,
    chunks: f64,
    /// Merged mice units per second (all threads).
    group_rate: f64,
    /// Elephant chunks per second (all threads).
    chunk_rate: f64,
}

/// Mean client-thread waits of the two unit classes.
#[derive(Debug, Clone, Copy)]
struct ClientWaits {
    utilization: f64,
    group: f64,
    chunk: f64,
    /// Part of `chunk` that all chunks of one elephant share: the work of earlier
    /// elephants' chunks, which landed on the same threads (correlation `φ`).
    chunk_common: f64,
}

/// `W_KLB / W_M/G/1`: how much less a stream with arrival SCV `arrival_scv` waits than a
/// Poisson stream in the same queue.
fn regularity(arrival_scv: f64, service_scv: f64, utilization: f64) -> f64 {
    if arrival_scv >= 1.0 || utilization <= 0.0 {
        return (arrival_scv + service_scv) / (1.0 + service_scv);
    }
    let klb = (-2.0 * (1.0 - utilization) * (1.0 - arrival_scv).powi(2)
        / (3.0 * utilization * (arrival_scv + service_scv).max(1e-12)))
    .exp();
    (arrival_scv + service_scv) / (1.0 + service_scv) * klb
}

/// Waits at a client query thread.
///
/// * One chunk per elephant (`m = 1`): every unit is one step of the dispatcher's
///   round robin, so a thread sees every `C`-th unit of a Poisson-like stream; one
///   GI/G/1 queue (Krämer–Langenbach-Belz) with the rate-weighted arrival SCV
///   (`1/(B·C)` for merged units, `1/C` for elephants).
/// * Split elephants (`m ≥ 2`): an elephant's chunks land on `m` threads at the same
///   Poisson instant, independent of the mice rotation. Each class then finds the
///   *other* class's work at its time average (residual `R_j` plus queued work
///   `ρ_j W_j`), and its *own* class's work reduced by its own regularity `a_i`
///   (SCV `1/(B·C)` for merged mice, `m/C` for chunks):
///   `W_i = a_i (R_i + ρ_i W_i) + (R_j + ρ_j W_j)`, a 2×2 linear system.
///   `a_i` is set so that a class alone gets exactly the KLB wait. With all `a_i = 1`
///   this is the M/G/1 wait `R/(1 − ρ)` for both.
fn client_thread_waits(
    all: &Moments,
    group: &Moments,
    chunk: &Moments,
    dispatch: ClientDispatch,
) -> Result<ClientWaits, ModelError> {
    let rate = all.rate / dispatch.threads;
    let utilization = rate * all.first;
    if utilization.is_nan() || utilization >= 1.0 {
        return Err(ModelError::Unstable {
            stage: "client query threads",
            utilization,
        });
    }
    let total_units = dispatch.group_rate + dispatch.chunk_rate;
    if dispatch.chunks <= 1.0 || dispatch.group_rate <= 0.0 || dispatch.chunk_rate <= 0.0 {
        let arrival_scv = if total_units > 0.0 {
            (dispatch.group_rate / (dispatch.merge_level * dispatch.threads)
                + dispatch.chunk_rate * dispatch.chunks / dispatch.threads)
                / total_units
        } else {
            1.0
        };
        let (utilization, wait) = gg1_wait(rate, all, arrival_scv, "client query threads")?;
        // Elephants only and split: all work is chunk work, shared with probability φ.
        let common = if dispatch.group_rate <= 0.0 {
            shared_chunk_fraction(dispatch) * wait
        } else {
            0.0
        };
        return Ok(ClientWaits {
            utilization,
            group: wait,
            chunk: wait,
            chunk_common: common,
        });
    }
    let scv = |moments: &Moments| (moments.second / (moments.first * moments.first) - 1.0).max(0.0);
    // Per-thread class rates, loads and mean residual work.
    let (group_rate, chunk_rate) = (group.rate / dispatch.threads, chunk.rate / dispatch.threads);
    let (group_load, chunk_load) = (group_rate * group.first, chunk_rate * chunk.first);
    let (group_residual, chunk_residual) = (
        group_rate * group.second / 2.0,
        chunk_rate * chunk.second / 2.0,
    );
    let own_factor = |arrival_scv: f64, moments: &Moments| {
        let klb = regularity(arrival_scv, scv(moments), utilization);
        klb / (1.0 - utilization + klb * utilization)
    };
    let a_group = own_factor(1.0 / (dispatch.merge_level * dispatch.threads), group);
    let a_chunk = own_factor(dispatch.chunks / dispatch.threads, chunk);
    // (1 − a_g ρ_g) W_g − ρ_c W_c = a_g R_g + R_c
    // −ρ_g W_g + (1 − a_c ρ_c) W_c = R_g + a_c R_c
    let (m11, m12, m21, m22) = (
        1.0 - a_group * group_load,
        -chunk_load,
        -group_load,
        1.0 - a_chunk * chunk_load,
    );
    let (b1, b2) = (
        a_group * group_residual + chunk_residual,
        group_residual + a_chunk * chunk_residual,
    );
    let determinant = m11 * m22 - m12 * m21;
    if determinant <= 0.0 || m11 <= 0.0 || m22 <= 0.0 {
        return Err(ModelError::Unstable {
            stage: "client query threads (batched chunks)",
            utilization,
        });
    }
    let group_wait = ((b1 * m22 - m12 * b2) / determinant).max(0.0);
    let chunk_wait = ((m11 * b2 - m21 * b1) / determinant).max(0.0);
    let chunk_found_chunk_work = a_chunk * (chunk_residual + chunk_load * chunk_wait);
    Ok(ClientWaits {
        utilization,
        group: group_wait,
        chunk: chunk_wait,
        chunk_common: (shared_chunk_fraction(dispatch) * chunk_found_chunk_work).min(chunk_wait),
    })
}

/// `φ`: probability that two threads holding chunks of the same elephant also both
/// hold chunks of an earlier one, `(m − 1)/(C − 1)` (1 when `m ≥ C`).
fn shared_chunk_fraction(dispatch: ClientDispatch) -> f64 {
    if dispatch.chunks <= 1.0 {
        0.0
    } else if dispatch.threads <= 1.0 || dispatch.chunks >= dispatch.threads {
        1.0
    } else {
        (dispatch.chunks - 1.0) / (dispatch.threads - 1.0)
    }
}

/// Front part of a merged unit when its queue wait `W` overlaps the accumulation:
/// returns `(E[max(o + W, A)], E[max(o + W, A) − W], E[(max(o + W, A) − W)²])` with
/// `A ~ Erlang(n, rate)` and `W` zero-inflated exponential (`P(W > 0) = busy_probability`,
/// `E[W] = mean_wait`). The exponential part is integrated numerically (`W = −θ ln u`).
fn merged_front_moments(
    setup: f64,
    n: u32,
    rate: f64,
    busy_probability: f64,
    mean_wait: f64,
) -> (f64, f64, f64) {
    let at = |w: f64| {
        let (first, second) = setup_or_accumulation_moments(setup + w, n, rate);
        (first, first - w, second - 2.0 * w * first + w * w)
    };
    let idle = at(0.0);
    let p = busy_probability.clamp(0.0, 1.0);
    if n == 0 || p <= 0.0 || mean_wait <= 0.0 {
        return idle;
    }
    let theta = mean_wait / p;
    let wait_at = |u: f64, one_minus_u: f64| {
        let log_u = if u > 0.5 {
            (-one_minus_u).ln_1p()
        } else {
            u.ln()
        };
        -theta * log_u
    };
    let average = |pick: fn((f64, f64, f64)) -> f64| {
        integrate_unit_interval(|u, c| pick(at(wait_at(u, c))), 1e-6)
    };
    let busy_until_ready = average(|m| m.0);
    // E[max(o + W, A) − W] = E[max(o + W, A)] − E[W] (θ for the exponential part).
    let busy = (busy_until_ready, busy_until_ready - theta, average(|m| m.2));
    (
        (1.0 - p) * idle.0 + p * busy.0,
        (1.0 - p) * idle.1 + p * busy.1,
        (1.0 - p) * idle.2 + p * busy.2,
    )
}

/// Raw moments `E[max(o, A)]`, `E[max(o, A)^2]` of the setup-or-accumulation time, where
/// `A ~ Erlang(n, rate)` is the time for `n` more mice to arrive and `o` the setup time.
fn setup_or_accumulation_moments(setup: f64, n: u32, rate: f64) -> (f64, f64) {
    if n == 0 || rate <= 0.0 {
        return (setup, setup * setup);
    }
    // E[g(A)] for g = max(o, ·): o·P(A ≤ o) + E[A; A > o], with
    // P(A > o) = P(Poisson(rate·o) < n) and E[A^j; A > o] via Erlang(n + j).
    let x = rate * setup;
    let poisson_below = |count: u32| -> f64 {
        // P(Poisson(x) < count) = Σ_{k<count} e^{-x} x^k / k!
        let mut term = (-x).exp();
        let mut sum = 0.0;
        for k in 0..count {
            if k > 0 {
                term *= x / f64::from(k);
            }
            sum += term;
        }
        sum
    };
    let n_f = f64::from(n);
    let tail_0 = poisson_below(n);
    let tail_1 = poisson_below(n + 1);
    let tail_2 = poisson_below(n + 2);
    let mean_a_tail = n_f / rate * tail_1;
    let second_a_tail = n_f * (n_f + 1.0) / (rate * rate) * tail_2;
    let first = setup * (1.0 - tail_0) + mean_a_tail;
    let second = setup * setup * (1.0 - tail_0) + second_a_tail;
    (first, second)
}

/// A random delay fitted by two moments: `P(V > t) = p · e^{−(t − s)/θ}` for `t ≥ s`.
///
/// Variable delays (CV² ≥ 1, e.g. queue waits) get `s = 0` and a zero-inflated
/// exponential (`p ≤ 1`); concentrated ones (CV² < 1, e.g. the max over chunks) get
/// `p = 1` and a shifted exponential.
#[derive(Debug, Clone, Copy)]
struct Wait {
    shift: f64,
    probability: f64,
    conditional_mean: f64,
}

impl Wait {
    const NONE: Wait = Wait {
        shift: 0.0,
        probability: 0.0,
        conditional_mean: 0.0,
    };

    /// Fits the first two raw moments.
    fn from_two_moments(mean: f64, second: f64) -> Self {
        if mean <= 0.0 || second <= 0.0 {
            return Self::NONE;
        }
        let conditional_mean = second / (2.0 * mean);
        let probability = mean / conditional_mean;
        if probability <= 1.0 {
            Self {
                shift: 0.0,
                probability,
                conditional_mean,
            }
        } else {
            let deviation = (second - mean * mean).max(0.0).sqrt();
            Self {
                shift: mean - deviation,
                probability: 1.0,
                conditional_mean: deviation,
            }
        }
    }

    /// Binomial weights `C(n,k) p^k (1−p)^{n−k}` for `k = 1..=n`, paired with `k`.
    fn busy_copies(&self, n: u32) -> impl Iterator<Item = (u32, f64)> {
        let p = self.probability.clamp(0.0, 1.0);
        let mut pmf = if p >= 1.0 {
            0.0
        } else {
            (1.0 - p).powi(n as i32)
        };
        (1..=n).map(move |k| {
            if p >= 1.0 {
                (k, if k == n { 1.0 } else { 0.0 })
            } else {
                pmf *= f64::from(n - k + 1) / f64::from(k) * p / (1.0 - p);
                (k, pmf)
            }
        })
    }

    /// `E[max of n iid copies] = s + θ Σ_k C(n,k) p^k (1−p)^{n−k} H_k` (harmonic numbers).
    fn mean_of_max(&self, n: u32) -> f64 {
        if self.probability <= 0.0 || n == 0 {
            return self.shift;
        }
        let sum: f64 = self
            .busy_copies(n)
            .map(|(k, weight)| weight * harmonic_number(u64::from(k)))
            .sum();
        self.shift + self.conditional_mean * sum
    }

    /// `E[(max of n iid copies)²]`, using `E[(max of k Exp(θ))²] = θ²(H_k² + H_k^{(2)})`.
    fn second_moment_of_max(&self, n: u32) -> f64 {
        if self.probability <= 0.0 || n == 0 {
            return self.shift * self.shift;
        }
        let theta = self.conditional_mean;
        let excess_second: f64 = self
            .busy_copies(n)
            .map(|(k, weight)| {
                let h = harmonic_number(u64::from(k));
                let h2: f64 = (1..=k).map(|i| 1.0 / f64::from(i * i)).sum();
                weight * theta * theta * (h * h + h2)
            })
            .sum();
        let excess_mean = self.mean_of_max(n) - self.shift;
        self.shift * self.shift + 2.0 * self.shift * excess_mean + excess_second
    }

    /// `P(max of n copies ≤ t) = (1 − p e^{−(t−s)/θ})^n` for `t ≥ s`.
    fn cdf_of_max(&self, n: u32, t: f64) -> f64 {
        if t < self.shift {
            return 0.0;
        }
        if self.probability <= 0.0 {
            return 1.0;
        }
        (1.0 - self.probability * (-(t - self.shift) / self.conditional_mean).exp()).powi(n as i32)
    }

    /// Quantile of the max of `n` copies: `s + θ ln(p / (1 − level^{1/n}))`, or `s`.
    fn quantile_of_max(&self, n: u32, level: f64) -> f64 {
        if self.probability <= 0.0 {
            return self.shift;
        }
        let per_copy_tail = -(level.ln() / f64::from(n.max(1))).exp_m1();
        if per_copy_tail >= self.probability {
            self.shift
        } else {
            self.shift + self.conditional_mean * (self.probability / per_copy_tail).ln()
        }
    }
}

/// The layered model for one parameter set; evaluate it for any `(B, L)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChiselModel {
    params: ChiselParams,
}

impl ChiselModel {
    /// Validates the parameters.
    pub fn new(params: ChiselParams) -> Result<Self, ModelError> {
        params.validate()?;
        Ok(Self { params })
    }

    /// The parameters.
    pub fn params(&self) -> &ChiselParams {
        &self.params
    }

    /// Predicts mean and p95 latency of mice, elephants and all requests when mice
    /// are merged `merge_level` at a time and elephants cut into chunks of `chunk_size` keys.
    pub fn predict(&self, merge_level: u32, chunk_size: u32) -> Result<Prediction, ModelError> {
        let p = &self.params;
        if merge_level == 0 || chunk_size == 0 {
            return Err(ModelError::InvalidParameter {
                name: if merge_level == 0 {
                    "merge_level"
                } else {
                    "chunk_size"
                },
                value: 0.0,
                reason: "must be at least 1",
            });
        }
        let mice_rate = p.arrival_rate * (1.0 - p.elephant_fraction);
        let elephant_rate = p.arrival_rate * p.elephant_fraction;
        let mouse_keys = f64::from(p.mouse_keys);
        let chunks = p.elephant_keys.div_ceil(chunk_size);
        let last_chunk_keys = p.elephant_keys - (chunks - 1) * chunk_size;
        let group_keys = f64::from(merge_level) * mouse_keys;
        let setup = p.client_overhead.0;

        // Query streams: (rate, keys). A merged mice query, full chunks, the last chunk.
        let group_rate = mice_rate / f64::from(merge_level);
        let mut streams: Vec<(f64, f64, bool)> = Vec::with_capacity(3);
        if group_rate > 0.0 {
            streams.push((group_rate, group_keys, true));
        }
        if elephant_rate > 0.0 {
            if chunks > 1 {
                streams.push((
                    elephant_rate * f64::from(chunks - 1),
                    f64::from(chunk_size),
                    false,
                ));
            }
            streams.push((elephant_rate, f64::from(last_chunk_keys), false));
        }

        // Layer 1 (bottom): memcached threads, M/G/1 each, deterministic service P_S(K).
        let mut server = Moments::default();
        for &(rate, keys, _) in &streams {
            let service = p.processing.at(keys);
            server.add(rate, service, service.powi(2), service.powi(3));
        }
        let server = server.finish();
        let server_rate = server.rate / f64::from(p.server_threads);
        let (server_utilization, server_wait, server_wait_second) =
            mg1_wait(server_rate, &server, "memcached threads")?;

        // Layer 2: client query threads. Service = setup (or merge accumulation, whichever
        // is longer) + network + server response (wait + processing): the thread is
        // blocked for the whole remote round trip.
        let threads = f64::from(p.client_threads);
        let chunk_rate = elephant_rate * f64::from(chunks);
        // A merged unit keeps filling while it waits in the queue: with a queue wait W,
        // the thread blocks for max(o, A − W) = max(o + W, A) − W. W depends on the busy
        // time, so iterate to a fixed point, starting from W = 0. W is taken as
        // zero-inflated exponential: P(W > 0) = ρ_C, mean w.
        let layer = |group_queue_wait: f64,
                     busy_probability: f64|
         -> Result<(Moments, ClientWaits, f64), ModelError> {
            let (until_ready_mean, accumulation_mean, accumulation_second) = merged_front_moments(
                setup,
                merge_level - 1,
                mice_rate,
                busy_probability,
                group_queue_wait,
            );
            let mut client = Moments::default();
            let mut group_client = Moments::default();
            let mut chunk_client = Moments::default();
            for &(rate, keys, is_group) in &streams {
                let (front_mean, front_second) = if is_group {
                    (accumulation_mean, accumulation_second)
                } else {
                    (setup, setup * setup)
                };
                let remote = p.network.at(keys) + p.processing.at(keys);
                // X = front + remote + W_S, with front and W_S independent.
                let mean_deterministic = front_mean + remote;
                let second_deterministic =
                    front_second + 2.0 * front_mean * remote + remote * remote;
                let first = mean_deterministic + server_wait;
                let second = second_deterministic
                    + 2.0 * mean_deterministic * server_wait
                    + server_wait_second;
                // Third moment: only the leading terms matter for the P-K wait; approximate
                // the front part as deterministic at its mean.
                let third = first.powi(3) + 3.0 * first * (second - first * first).max(0.0);
                client.add(rate, first, second, third);
                if is_group {
                    group_client.add(rate, first, second, third);
                } else {
                    chunk_client.add(rate, first, second, third);
                }
            }
            let client = client.finish();
            let waits = client_thread_waits(
                &client,
                &group_client.finish(),
                &chunk_client.finish(),
                ClientDispatch {
                    threads,
                    merge_level: f64::from(merge_level),
                    chunks: f64::from(chunks),
                    group_rate,
                    chunk_rate,
                },
            )?;
            Ok((client, waits, until_ready_mean))
        };
        let mut assumed_group_wait = 0.0;
        let (mut client, mut client_waits, mut until_ready_mean) = layer(0.0, 0.0)?;
        if merge_level > 1 {
            for _ in 0..MERGE_FIXED_POINT_ROUNDS {
                assumed_group_wait = client_waits.group;
                (client, client_waits, until_ready_mean) =
                    layer(assumed_group_wait, client_waits.utilization)?;
                if (client_waits.group - assumed_group_wait).abs() < 1e-9 {
                    break;
                }
            }
        }
        let client_rate = client.rate / threads;
        let client_utilization = client_waits.utilization;
        let client_wait = if group_rate + chunk_rate > 0.0 {
            (group_rate * client_waits.group + chunk_rate * client_waits.chunk)
                / (group_rate + chunk_rate)
        } else {
            0.0
        };

        // The random part of a query's response: client wait + server wait, fitted per
        // class by its first two moments to a zero-inflated exponential.
        let class_wait = |mean_client_wait: f64| {
            let second = client_wait_second_moment(client_rate, &client, mean_client_wait);
            Wait::from_two_moments(
                mean_client_wait + server_wait,
                second + 2.0 * mean_client_wait * server_wait + server_wait_second,
            )
        };
        let wait = class_wait(client_waits.group);

        // Mice: the mouse at position i of its group waits for the group to fill
        // (Erlang(B − i)) but the first one's setup overlaps it; averaged over positions,
        // front = E[max(o, A_{B−1})] − (B − 1)/(2 λ_mice).
        let mean_position_offset = if mice_rate > 0.0 {
            f64::from(merge_level - 1) / (2.0 * mice_rate)
        } else {
            0.0
        };
        // From the first mouse's arrival the group is sent after max(o + w, A_{B−1});
        // the queue wait w is the random part V below, so the shift is that minus w.
        let mouse_shift = (until_ready_mean - assumed_group_wait) - mean_position_offset
            + p.network.at(group_keys)
            + p.processing.at(group_keys);
        let mice = ClassLatency {
            mean: Seconds(mouse_shift + wait.mean_of_max(1)),
            p95: Seconds(mouse_shift + wait.quantile_of_max(1, 0.95)),
        };

        // Elephants: fork-join over min(m, C) threads; a thread that gets several chunks
        // of one request serves them back to back. The max over branches uses the
        // harmonic-number formula of the zero-inflated exponential wait.
        let branches = chunks.min(p.client_threads);
        let chunks_per_branch = f64::from(chunks.div_ceil(p.client_threads));
        let chunk_service = setup
            + p.network.at(f64::from(chunk_size.min(p.elephant_keys)))
            + p.processing.at(f64::from(chunk_size.min(p.elephant_keys)));
        let elephant_shift =
            chunks_per_branch * chunk_service + (chunks_per_branch - 1.0) * server_wait;
        // The chunks' waits are not independent: the part caused by earlier elephants'
        // chunks is common to all branches. max_j V_j = common + max_j (independent_j + W_S,j).
        let common_mean = client_waits.chunk_common;
        let independent_mean = (client_waits.chunk - common_mean).max(0.0);
        let scaled_second = |mean: f64| client_wait_second_moment(client_rate, &client, mean);
        let branch = Wait::from_two_moments(
            independent_mean + server_wait,
            scaled_second(independent_mean)
                + 2.0 * independent_mean * server_wait
                + server_wait_second,
        );
        let max_mean = branch.mean_of_max(branches);
        let max_second = branch.second_moment_of_max(branches);
        let common_second = scaled_second(common_mean);
        let elephant_wait = Wait::from_two_moments(
            common_mean + max_mean,
            common_second + 2.0 * common_mean * max_mean + max_second,
        );
        let elephant = ClassLatency {
            mean: Seconds(elephant_shift + common_mean + max_mean),
            p95: Seconds(elephant_shift + elephant_wait.quantile_of_max(1, 0.95)),
        };

        let overall_mean =
            (1.0 - p.elephant_fraction) * mice.mean.0 + p.elephant_fraction * elephant.mean.0;
        let mixture_cdf = |t: f64| {
            (1.0 - p.elephant_fraction) * wait.cdf_of_max(1, t - mouse_shift)
                + p.elephant_fraction * elephant_wait.cdf_of_max(1, t - elephant_shift)
        };
        let overall_p95 = mixture_quantile(
            mixture_cdf,
            0.95,
            mice.p95.0.min(elephant.p95.0),
            mice.p95.0.max(elephant.p95.0),
        );
        Ok(Prediction {
            merge_level,
            chunk_size,
            chunks,
            mice,
            elephant,
            overall: ClassLatency {
                mean: Seconds(overall_mean),
                p95: Seconds(overall_p95),
            },
            client_utilization,
            server_utilization,
            client_wait: Seconds(client_wait),
            server_wait: Seconds(server_wait),
        })
    }
}

/// The `level` quantile of a mixture whose class quantiles are `low ≤ high`:
/// it lies in `[0, high]`; bisection to 1 ns.
fn mixture_quantile<F: Fn(f64) -> f64>(cdf: F, level: f64, low: f64, high: f64) -> f64 {
    let (mut lower, mut upper) = (0.0_f64.min(low), high);
    if cdf(upper) < level {
        return upper;
    }
    while upper - lower > 1e-9 {
        let middle = 0.5 * (lower + upper);
        if cdf(middle) >= level {
            upper = middle;
        } else {
            lower = middle;
        }
    }
    upper
}

/// Plain batching (the paper's baseline): every request is one query with all its
/// keys, no merging, no splitting. Written independently of [`ChiselModel::predict`]
/// (which must reduce to it at `B = 1, L ≥ K_e`).
pub fn batching_baseline(params: &ChiselParams) -> Result<Prediction, ModelError> {
    params.validate()?;
    let p = params;
    let classes = [
        (1.0 - p.elephant_fraction, f64::from(p.mouse_keys)),
        (p.elephant_fraction, f64::from(p.elephant_keys)),
    ];
    let lambda = p.arrival_rate;
    // Memcached threads: M/G/1 with deterministic, size-dependent service.
    let server_moment = |power: i32| -> f64 {
        classes
            .iter()
            .map(|&(share, keys)| share * p.processing.at(keys).powi(power))
            .sum()
    };
    let server_lambda = lambda / f64::from(p.server_threads);
    let rho_s = server_lambda * server_moment(1);
    if rho_s >= 1.0 {
        return Err(ModelError::Unstable {
            stage: "memcached threads",
            utilization: rho_s,
        });
    }
    let w_s = server_lambda * server_moment(2) / (2.0 * (1.0 - rho_s));
    let w_s2 = 2.0 * w_s * w_s + server_lambda * server_moment(3) / (3.0 * (1.0 - rho_s));
    // Client threads: service o + N_S + P_S + W_S.
    let deterministic =
        |keys: f64| p.client_overhead.0 + p.network.at(keys) + p.processing.at(keys);
    let client_first: f64 = classes
        .iter()
        .map(|&(share, keys)| share * (deterministic(keys) + w_s))
        .sum();
    let client_second: f64 = classes
        .iter()
        .map(|&(share, keys)| {
            let d = deterministic(keys);
            share * (d * d + 2.0 * d * w_s + w_s2)
        })
        .sum();
    let client_lambda = lambda / f64::from(p.client_threads);
    let client_moments = Moments {
        rate: client_lambda,
        first: client_first,
        second: client_second,
        third: 0.0,
    };
    let (rho_c, w_c) = gg1_wait(
        client_lambda,
        &client_moments,
        1.0 / f64::from(p.client_threads),
        "client query threads",
    )?;
    let client_third: f64 = classes
        .iter()
        .map(|&(share, keys)| {
            let total = deterministic(keys) + w_s;
            share * (total.powi(3) + 3.0 * total * (w_s2 - w_s * w_s))
        })
        .sum();
    let w_c2 = client_wait_second_moment(
        client_lambda,
        &Moments {
            third: client_third,
            ..client_moments
        },
        w_c,
    );
    let wait = Wait::from_two_moments(w_c + w_s, w_c2 + 2.0 * w_c * w_s + w_s2);
    let class = |keys: f64| ClassLatency {
        mean: Seconds(deterministic(keys) + w_c + w_s),
        p95: Seconds(deterministic(keys) + wait.quantile_of_max(1, 0.95)),
    };
    let mice = class(f64::from(p.mouse_keys));
    let elephant = class(f64::from(p.elephant_keys));
    let (mouse_shift, elephant_shift) = (
        deterministic(f64::from(p.mouse_keys)),
        deterministic(f64::from(p.elephant_keys)),
    );
    let cdf = |t: f64| {
        (1.0 - p.elephant_fraction) * wait.cdf_of_max(1, t - mouse_shift)
            + p.elephant_fraction * wait.cdf_of_max(1, t - elephant_shift)
    };
    Ok(Prediction {
        merge_level: 1,
        chunk_size: p.elephant_keys,
        chunks: 1,
        mice,
        elephant,
        overall: ClassLatency {
            mean: Seconds(
                (1.0 - p.elephant_fraction) * mice.mean.0 + p.elephant_fraction * elephant.mean.0,
            ),
            p95: Seconds(mixture_quantile(
                cdf,
                0.95,
                mice.p95.0.min(elephant.p95.0),
                mice.p95.0.max(elephant.p95.0),
            )),
        },
        client_utilization: rho_c,
        server_utilization: rho_s,
        client_wait: Seconds(w_c),
        server_wait: Seconds(w_s),
    })
}

/// Grid search: the `(B, L)` of `grid` with the lowest objective among stable
/// configurations, with its prediction. Errors if no candidate is stable.
pub fn best_plan(
    params: &ChiselParams,
    grid: &PlanGrid,
) -> Result<(u32, u32, Prediction), ModelError> {
    let model = ChiselModel::new(*params)?;
    let mice_rate = params.arrival_rate * (1.0 - params.elephant_fraction);
    let mut best: Option<(f64, Prediction)> = None;
    let mut last_error = ModelError::Numerical("empty plan grid");
    for &merge_level in &grid.merge_levels {
        if let Some(limit) = grid.max_merge_wait {
            let accumulation = if mice_rate > 0.0 {
                f64::from(merge_level.saturating_sub(1)) / mice_rate
            } else {
                f64::INFINITY
            };
            if merge_level > 1 && accumulation > limit.0 {
                continue;
            }
        }
        for &chunk_size in &grid.chunk_sizes {
            match model.predict(merge_level, chunk_size) {
                Ok(prediction) => {
                    let score = grid.objective.score(&prediction);
                    let improves = match &best {
                        Some((best_score, _)) => score < *best_score,
                        None => true,
                    };
                    if improves {
                        best = Some((score, prediction));
                    }
                }
                Err(error) => last_error = error,
            }
        }
    }
    best.map(|(_, prediction)| (prediction.merge_level, prediction.chunk_size, prediction))
        .ok_or(last_error)
}
