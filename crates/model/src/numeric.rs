//! Small numerical kernels: tanh-sinh quadrature on the unit interval, a bracketed
//! root finder, harmonic numbers. No allocation, no I/O.

use crate::error::ModelError;

/// Largest |t| visited by the tanh-sinh rule. At t = 4 the node is within 1e-37
/// of an endpoint and its weight is below 1e-35, far under double precision
/// for any integrand bounded by 1 (all integrands in this crate are).
const TANH_SINH_T_MAX: f64 = 4.0;
/// Maximum number of step halvings (h = 2^-level); level 9 uses about 2 000 nodes.
const TANH_SINH_MAX_LEVEL: u32 = 9;

/// Integrates `integrand(v, 1 - v)` over `v` in (0, 1) with the tanh-sinh
/// (double exponential) rule, halving the step until two successive estimates
/// agree to `relative_tolerance`.
///
/// The integrand receives both `v` and its complement `1 - v`, each computed
/// without cancellation, so that functions of `ln v` stay accurate near `v = 1`.
/// Endpoint singularities of the integrand's derivatives (e.g. `v^a` with small
/// `a`, or `exp(-c * v^-k)`) are handled with exponential convergence.
pub(crate) fn integrate_unit_interval<F>(integrand: F, relative_tolerance: f64) -> f64
where
    F: Fn(f64, f64) -> f64,
{
    // Node at parameter t: v = 1 / (1 + exp(-pi sinh t)),
    // weight dv/dt = pi cosh t * e / (1 + e)^2 with e = exp(-pi sinh t).
    let node = |t: f64| -> f64 {
        let exponent = -std::f64::consts::PI * t.sinh();
        let (v, complement, weight_base) = if exponent > 0.0 {
            // v small: e large; use e' = exp(-exponent) to avoid overflow.
            let e_inv = (-exponent).exp();
            let v = e_inv / (1.0 + e_inv);
            let complement = 1.0 / (1.0 + e_inv);
            (v, complement, e_inv / ((1.0 + e_inv) * (1.0 + e_inv)))
        } else {
            let e = exponent.exp();
            let v = 1.0 / (1.0 + e);
            let complement = e / (1.0 + e);
            (v, complement, e / ((1.0 + e) * (1.0 + e)))
        };
        let weight = std::f64::consts::PI * t.cosh() * weight_base;
        if weight == 0.0 || v <= 0.0 || complement <= 0.0 {
            0.0
        } else {
            weight * integrand(v, complement)
        }
    };

    let mut step = 1.0_f64;
    let mut sum = node(0.0);
    let mut t = step;
    while t <= TANH_SINH_T_MAX {
        sum += node(t) + node(-t);
        t += step;
    }
    let mut estimate = sum * step;
    for level in 1..=TANH_SINH_MAX_LEVEL {
        step *= 0.5;
        // Add the new (odd) nodes of the finer grid.
        let mut k = 1u64;
        loop {
            let t = k as f64 * step;
            if t > TANH_SINH_T_MAX {
                break;
            }
            sum += node(t) + node(-t);
            k += 2;
        }
        let refined = sum * step;
        let change = (refined - estimate).abs();
        estimate = refined;
        if level >= 3 && change <= relative_tolerance * refined.abs() + f64::MIN_POSITIVE {
            break;
        }
    }
    estimate
}

/// Finds the root of a continuous `function` on `[low, high]` where
/// `function(low)` and `function(high)` have opposite signs, using the
/// Illinois variant of regula falsi (superlinear, always bracketed).
pub(crate) fn bracketed_root<F>(
    function: F,
    mut low: f64,
    mut high: f64,
    absolute_tolerance: f64,
) -> Result<f64, ModelError>
where
    F: Fn(f64) -> f64,
{
    let mut f_low = function(low);
    let mut f_high = function(high);
    if f_low == 0.0 {
        return Ok(low);
    }
    if f_high == 0.0 {
        return Ok(high);
    }
    if !(f_low.is_finite() && f_high.is_finite()) || f_low.signum() == f_high.signum() {
        return Err(ModelError::Numerical("root is not bracketed"));
    }
    // Which end was kept last time (for the Illinois halving).
    let mut last_kept: i8 = 0;
    for _ in 0..200 {
        let mut candidate = high - f_high * (high - low) / (f_high - f_low);
        if !(candidate > low.min(high) && candidate < low.max(high)) {
            candidate = 0.5 * (low + high);
        }
        let f_candidate = function(candidate);
        if !f_candidate.is_finite() {
            return Err(ModelError::Numerical(
                "function is not finite inside the bracket",
            ));
        }
        if f_candidate == 0.0 {
            return Ok(candidate);
        }
        if f_candidate.signum() == f_high.signum() {
            high = candidate;
            f_high = f_candidate;
            if last_kept == -1 {
                f_low *= 0.5;
            }
            last_kept = -1;
        } else {
            low = candidate;
            f_low = f_candidate;
            if last_kept == 1 {
                f_high *= 0.5;
            }
            last_kept = 1;
        }
        if (high - low).abs() <= absolute_tolerance {
            return Ok(0.5 * (low + high));
        }
    }
    Err(ModelError::Numerical("root finder did not converge"))
}

/// The n-th harmonic number H_n = 1 + 1/2 + ... + 1/n (H_0 = 0).
///
/// Exact summation below 64 terms, the asymptotic expansion above
/// (error < 1e-15 there).
pub fn harmonic_number(n: u64) -> f64 {
    if n < 64 {
        (1..=n).map(|k| 1.0 / k as f64).sum()
    } else {
        let x = n as f64;
        const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;
        x.ln() + EULER_GAMMA + 1.0 / (2.0 * x) - 1.0 / (12.0 * x * x) + 1.0 / (120.0 * x.powi(4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tanh_sinh_integrates_powers_and_log_singularities() {
        let cubic = integrate_unit_interval(|v, _| v * v * v, 1e-14);
        assert!((cubic - 0.25).abs() < 1e-13, "{cubic}");
        // integrable endpoint singularity: ∫ v^-1/2 = 2
        let singular = integrate_unit_interval(|v, _| v.powf(-0.5), 1e-14);
        assert!((singular - 2.0).abs() < 1e-10, "{singular}");
        // ∫ -ln v = 1, using the complement for accuracy near 1
        let log =
            integrate_unit_interval(|v, c| -if v > 0.5 { (-c).ln_1p() } else { v.ln() }, 1e-14);
        assert!((log - 1.0).abs() < 1e-12, "{log}");
    }

    #[test]
    fn root_finder_finds_cube_root_of_two() {
        let root = bracketed_root(|x| x * x * x - 2.0, 0.0, 2.0, 1e-14).unwrap_or(f64::NAN);
        assert!((root - 2f64.cbrt()).abs() < 1e-12);
        assert!(bracketed_root(|x| x * x + 1.0, -1.0, 1.0, 1e-12).is_err());
    }

    #[test]
    fn harmonic_numbers_match_direct_sums_on_both_branches() {
        assert_eq!(harmonic_number(0), 0.0);
        assert_eq!(harmonic_number(1), 1.0);
        assert!((harmonic_number(3) - (1.0 + 0.5 + 1.0 / 3.0)).abs() < 1e-15);
        for n in [64u64, 100, 1000] {
            let direct: f64 = (1..=n).map(|k| 1.0 / k as f64).sum();
            assert!((harmonic_number(n) - direct).abs() < 1e-12, "n={n}");
        }
    }
}
