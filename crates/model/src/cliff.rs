//! The latency cliff: the utilization beyond which `E[T_S(N)]` "falls off a cliff"
//! (Cheng et al., Proposition 2 and Table 4).
//!
//! The paper does not say how Table 4 was computed. By Proposition 2 the cliff
//! depends only on the burst degree `ξ`: `E[T_S(N)]` is `ln(N+1)/((1−q)μ_S)` times
//! `1/(1 − δ(ξ, ρ))`, and `δ` depends on `(ξ, ρ)` only. So any definition must be a
//! property of the curve `ρ ↦ 1/(1 − δ(ξ, ρ))`. We use two:
//!
//! * **knee** (primary): the smallest `ρ` at which latency grows faster than
//!   `κ` per unit of utilization *in relative terms*,
//!   `d ln E[T_S(N)] / dρ = d ln(1/(1 − δ)) / dρ ≥ κ`. It is scale free (independent
//!   of `N`, `q`, `μ_S`, units), reads as "one more point of utilization costs more
//!   than κ % of latency", and with `κ = 1/(1 − 0.77) ≈ 4.35` the Poisson case
//!   (M/M/1, `d ln(1/(1−ρ))/dρ = 1/(1−ρ)`) has its cliff at the paper's 77%.
//!   When the slope already exceeds `κ` at zero load (very bursty arrivals,
//!   `ξ ≳ 0.75`), there is no knee: latency is steep everywhere and the result is `None`.
//! * **level**: the `ρ` at which `1/(1 − δ)` (latency in units of its zero-load value)
//!   reaches `1/(1 − δ*)`, with `δ* = 0.77` (the M/M/1 value at 77%). Always defined.
//!
//! Neither reproduces every entry of Table 4 (see `docs/model-cheng.md`): the knee
//! matches it within one point for `ξ ≤ 0.6`, the level definition within one point
//! at `ξ ≥ 0.9` and `ξ ≤ 0.1`.

use serde::{Deserialize, Serialize};

use crate::cheng::solve_delta;
use crate::error::{check_positive, check_range, ModelError};
use crate::numeric::bracketed_root;

/// Default knee threshold `κ`: the M/M/1 log-slope at 77% utilization.
pub const DEFAULT_KNEE_SLOPE: f64 = 1.0 / (1.0 - 0.77);
/// Default level threshold `δ*` (the M/M/1 `δ = ρ` at 77%).
pub const DEFAULT_LEVEL_DELTA: f64 = 0.77;
/// Table 4 of Cheng et al.: `(ξ, ρ_S(ξ) in %)`.
pub const PAPER_TABLE_4: [(f64, f64); 20] = [
    (0.00, 77.0),
    (0.05, 76.0),
    (0.10, 76.0),
    (0.15, 75.0),
    (0.20, 74.0),
    (0.25, 73.0),
    (0.30, 72.0),
    (0.35, 71.0),
    (0.40, 69.0),
    (0.45, 67.0),
    (0.50, 65.0),
    (0.55, 62.0),
    (0.60, 59.0),
    (0.65, 55.0),
    (0.70, 50.0),
    (0.75, 45.0),
    (0.80, 39.0),
    (0.85, 31.0),
    (0.90, 21.0),
    (0.95, 9.0),
];

/// Lowest and highest utilization searched.
const RHO_MIN: f64 = 1e-3;
const RHO_MAX: f64 = 0.999;
/// Relative step of the central difference for the log-slope.
const DIFFERENCE_STEP: f64 = 1e-5;

/// `d ln(1/(1 − δ)) / dρ` at `(ξ, ρ)`, i.e. the relative growth of `E[T_S(N)]` per unit of utilization.
pub fn log_slope(burst_degree: f64, utilization: f64) -> Result<f64, ModelError> {
    let h = DIFFERENCE_STEP * utilization.min(1.0 - utilization).max(1e-3);
    let log_latency = |rho: f64| -> Result<f64, ModelError> {
        let delta = solve_delta(burst_degree, rho)?;
        Ok(-(1.0 - delta).ln())
    };
    Ok((log_latency(utilization + h)? - log_latency(utilization - h)?) / (2.0 * h))
}

/// The knee: smallest `ρ` with `d ln E[T_S(N)]/dρ ≥ slope_threshold`, or `None` when the
/// slope is already above the threshold at (near) zero load.
pub fn knee_utilization(
    burst_degree: f64,
    slope_threshold: f64,
) -> Result<Option<f64>, ModelError> {
    check_range("xi", burst_degree, 0.0, 1.0, false)?;
    check_positive("slope threshold", slope_threshold)?;
    let excess = |rho: f64| log_slope(burst_degree, rho).map(|slope| slope - slope_threshold);
    if excess(RHO_MIN)? >= 0.0 {
        return Ok(None);
    }
    // Coarse scan for the first sign change, then refine (the slope is not monotone
    // for large ξ, so a bare bisection on [RHO_MIN, RHO_MAX] could miss the first crossing).
    let mut previous = RHO_MIN;
    let mut rho = 0.01;
    while rho <= RHO_MAX {
        if excess(rho)? >= 0.0 {
            let root = bracketed_root(|r| excess(r).unwrap_or(f64::NAN), previous, rho, 1e-7)?;
            return Ok(Some(root));
        }
        previous = rho;
        rho += 0.01;
    }
    Ok(None)
}

/// The level: the `ρ` at which `δ(ξ, ρ) = delta_threshold` (`δ` rises from 0 to 1 with `ρ`).
pub fn level_utilization(burst_degree: f64, delta_threshold: f64) -> Result<f64, ModelError> {
    check_range("xi", burst_degree, 0.0, 1.0, false)?;
    check_range("delta threshold", delta_threshold, 0.0, 1.0, true)?;
    bracketed_root(
        |rho| solve_delta(burst_degree, rho).map_or(f64::NAN, |d| d - delta_threshold),
        RHO_MIN,
        RHO_MAX,
        1e-9,
    )
}

/// One row of the cliff table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CliffRow {
    /// Burst degree `ξ`.
    pub burst_degree: f64,
    /// Knee utilization (`None`: no knee, steep from zero load).
    pub knee: Option<f64>,
    /// Level utilization.
    pub level: f64,
    /// Table 4's value, when `ξ` is one of its rows.
    pub paper: Option<f64>,
}

/// The cliff table at the given burst degrees.
pub fn cliff_table(
    burst_degrees: &[f64],
    slope_threshold: f64,
    delta_threshold: f64,
) -> Result<Vec<CliffRow>, ModelError> {
    burst_degrees
        .iter()
        .map(|&xi| {
            Ok(CliffRow {
                burst_degree: xi,
                knee: knee_utilization(xi, slope_threshold)?,
                level: level_utilization(xi, delta_threshold)?,
                paper: PAPER_TABLE_4
                    .iter()
                    .find(|(paper_xi, _)| (paper_xi - xi).abs() < 1e-9)
                    .map(|(_, percent)| percent / 100.0),
            })
        })
        .collect()
}
