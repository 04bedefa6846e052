//! The generalized Pareto distribution and its Laplace–Stieltjes transform.
//!
//! `GP(ξ, σ)` has survival function `S(t) = (1 + ξ t / σ)^(-1/ξ)` for `t ≥ 0`
//! (`ξ = 0` is the exponential with mean `σ`), mean `σ / (1 − ξ)` for `ξ < 1`.
//! Cheng et al. write the key inter-arrival time as `GP(ξ, (1 − ξ)/λ)`, i.e. mean `1/λ`.
//!
//! The transform `L(s) = E[e^{-sT}]` has no elementary closed form for general `ξ`.
//! We compute it by the change of variables `w = S(t)`, which maps `[0, ∞)` onto
//! `(0, 1]` and turns the density away:
//!
//! ```text
//!   L(s) = ∫_0^1 exp(−s σ τ_ξ(w)) dw,     τ_ξ(w) = S^{-1}(w) / σ = (w^{−ξ} − 1)/ξ   (−ln w at ξ = 0)
//! ```
//!
//! The integrand is bounded by 1, smooth inside (0, 1), and only its derivatives
//! misbehave at the endpoints, which is exactly what tanh-sinh quadrature handles
//! with exponential convergence (about 1e-13 relative error with a few hundred nodes).

use crate::error::{check_positive, check_range, ModelError};
use crate::numeric::integrate_unit_interval;

/// Relative tolerance of every transform evaluation.
const TRANSFORM_TOLERANCE: f64 = 1e-13;

/// A generalized Pareto distribution on `[0, ∞)` with shape `ξ ∈ [0, 1)` and scale `σ > 0`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeneralizedPareto {
    shape: f64,
    scale: f64,
}

impl GeneralizedPareto {
    /// A distribution with shape `ξ ∈ [0, 1)` (finite mean) and scale `σ > 0`.
    pub fn new(shape: f64, scale: f64) -> Result<Self, ModelError> {
        let shape = check_range("xi", shape, 0.0, 1.0, false)?;
        if shape >= 1.0 {
            return Err(ModelError::InvalidParameter {
                name: "xi",
                value: shape,
                reason:
                    "burst degree must be < 1 (the mean inter-arrival time is infinite otherwise)",
            });
        }
        let scale = check_positive("sigma", scale)?;
        Ok(Self { shape, scale })
    }

    /// The distribution with shape `ξ` and the given mean (`σ = (1 − ξ) · mean`),
    /// i.e. Cheng et al.'s eq. (24) with `mean = 1/λ`.
    pub fn with_mean(shape: f64, mean: f64) -> Result<Self, ModelError> {
        let mean = check_positive("mean", mean)?;
        let shape = check_range("xi", shape, 0.0, 1.0, false)?;
        Self::new(shape, (1.0 - shape) * mean)
    }

    /// Shape `ξ`.
    pub fn shape(&self) -> f64 {
        self.shape
    }

    /// Scale `σ`.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Mean `σ / (1 − ξ)`.
    pub fn mean(&self) -> f64 {
        self.scale / (1.0 - self.shape)
    }

    /// Survival function `P{T > t}`.
    pub fn survival(&self, t: f64) -> f64 {
        if t <= 0.0 {
            return 1.0;
        }
        let x = t / self.scale;
        if self.shape == 0.0 {
            (-x).exp()
        } else {
            (-(self.shape * x).ln_1p() / self.shape).exp()
        }
    }

    /// Quantile function: the `t` with `P{T ≤ t} = p` (used to sample by inversion).
    pub fn quantile(&self, p: f64) -> f64 {
        let p = p.clamp(0.0, 1.0);
        self.scale * shape_quantile(self.shape, 1.0 - p, p)
    }

    /// Laplace–Stieltjes transform `E[exp(−s T)]` for `s ≥ 0`.
    pub fn laplace(&self, s: f64) -> f64 {
        if s <= 0.0 {
            return 1.0;
        }
        let scaled = s * self.scale;
        let shape = self.shape;
        integrate_unit_interval(
            |w, one_minus_w| {
                let tau = shape_quantile(shape, w, one_minus_w);
                if tau.is_finite() {
                    (-scaled * tau).exp()
                } else {
                    0.0
                }
            },
            TRANSFORM_TOLERANCE,
        )
    }

    /// The stationary-excess (equilibrium) distribution, with density `S(t)/E[T]`.
    ///
    /// For `GP(ξ, σ)` it is again generalized Pareto: `GP(ξ/(1−ξ), σ/(1−ξ))`,
    /// whose transform is `(1 − L(s)) / (s E[T])`. Its shape reaches 1 at `ξ = 1/2`,
    /// so this is only a `GeneralizedPareto` (finite mean) for `ξ < 1/2`; use
    /// [`GeneralizedPareto::excess_laplace`] for the transform at any `ξ < 1`.
    pub fn excess_laplace(&self, s: f64) -> f64 {
        if s <= 0.0 {
            return 1.0;
        }
        let excess_shape = self.shape / (1.0 - self.shape);
        let scaled = s * self.scale / (1.0 - self.shape);
        integrate_unit_interval(
            |w, one_minus_w| {
                let tau = shape_quantile(excess_shape, w, one_minus_w);
                if tau.is_finite() {
                    (-scaled * tau).exp()
                } else {
                    0.0
                }
            },
            TRANSFORM_TOLERANCE,
        )
    }
}

/// `τ_ξ(w) = (w^{−ξ} − 1)/ξ` (or `−ln w` at `ξ = 0`): the standardised GP quantile at
/// survival probability `w`, evaluated from `w` and `1 − w` without cancellation.
fn shape_quantile(shape: f64, w: f64, one_minus_w: f64) -> f64 {
    if w <= 0.0 {
        return f64::INFINITY;
    }
    let log_w = if w > 0.5 {
        (-one_minus_w).ln_1p()
    } else {
        w.ln()
    };
    if shape == 0.0 {
        -log_w
    } else {
        let exponent = -shape * log_w;
        if exponent > 700.0 {
            f64::INFINITY
        } else {
            exponent.exp_m1() / shape
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_case_matches_closed_form() {
        let exponential = GeneralizedPareto::with_mean(0.0, 2.0).unwrap_or_else(|e| panic!("{e}"));
        for s in [1e-6, 0.01, 0.5, 1.0, 10.0, 1e4] {
            let expected = 1.0 / (1.0 + 2.0 * s);
            let got = exponential.laplace(s);
            assert!(
                (got - expected).abs() < 1e-13 * expected.max(1e-300) + 1e-15,
                "s={s}: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn transform_matches_independent_trapezoid_integration() {
        // ∫_0^∞ s e^{-st} S(t) dt = 1 − L(s): brute-force trapezoid on a long grid.
        for shape in [0.15, 0.5, 0.8] {
            let distribution =
                GeneralizedPareto::with_mean(shape, 1.0).unwrap_or_else(|e| panic!("{e}"));
            let s: f64 = 1.3;
            let step: f64 = 1e-4;
            let mut integral = 0.0;
            let mut t: f64 = 0.0;
            while t < 60.0 {
                let a = (-s * t).exp() * distribution.survival(t);
                let b = (-s * (t + step)).exp() * distribution.survival(t + step);
                integral += 0.5 * (a + b) * step;
                t += step;
            }
            let brute = 1.0 - s * integral;
            let got = distribution.laplace(s);
            assert!((got - brute).abs() < 1e-7, "xi={shape}: {got} vs {brute}");
            // the excess transform is (1 − L(s)) / (s E[T])
            let excess = (1.0 - got) / (s * distribution.mean());
            assert!((distribution.excess_laplace(s) - excess).abs() < 1e-12);
        }
    }

    #[test]
    fn derivative_at_zero_is_minus_the_mean() {
        let distribution = GeneralizedPareto::with_mean(0.3, 5.0).unwrap_or_else(|e| panic!("{e}"));
        let h = 1e-6;
        let slope = (distribution.laplace(h) - 1.0) / h;
        assert!((slope + 5.0).abs() < 1e-3, "{slope}");
    }

    #[test]
    fn rejects_infinite_mean() {
        assert!(GeneralizedPareto::with_mean(1.0, 1.0).is_err());
        assert!(GeneralizedPareto::with_mean(-0.1, 1.0).is_err());
        assert!(GeneralizedPareto::with_mean(0.2, 0.0).is_err());
    }
}
