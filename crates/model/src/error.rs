//! Errors of the model crate.

/// Everything that can go wrong when evaluating a model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A parameter is outside the domain where the model is defined.
    #[error("invalid parameter {name} = {value}: {reason}")]
    InvalidParameter {
        /// Parameter name as used in the docs (e.g. `xi`, `q`).
        name: &'static str,
        /// The offending value.
        value: f64,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// The queue is not stable (utilization at or above 1): latency is unbounded.
    #[error("unstable queue: utilization {utilization:.4} >= 1 at the {stage}")]
    Unstable {
        /// Which stage saturates (e.g. "memcached server", "client threads").
        stage: &'static str,
        /// The utilization that was computed.
        utilization: f64,
    },
    /// A numerical procedure did not converge.
    #[error("numerical failure: {0}")]
    Numerical(&'static str),
}

/// Checks that `value` is finite and lies in `[low, high]` (or `(low, high)` when `open`).
pub(crate) fn check_range(
    name: &'static str,
    value: f64,
    low: f64,
    high: f64,
    open: bool,
) -> Result<f64, ModelError> {
    let inside = if open {
        value > low && value < high
    } else {
        value >= low && value <= high
    };
    if value.is_finite() && inside {
        Ok(value)
    } else {
        Err(ModelError::InvalidParameter {
            name,
            value,
            reason: if open {
                "must lie in the open interval given in the docs"
            } else {
                "must lie in the closed interval given in the docs"
            },
        })
    }
}

/// Checks that `value` is finite and strictly positive.
pub(crate) fn check_positive(name: &'static str, value: f64) -> Result<f64, ModelError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(ModelError::InvalidParameter {
            name,
            value,
            reason: "must be finite and > 0",
        })
    }
}

/// Checks that `value` is finite and non-negative.
pub(crate) fn check_non_negative(name: &'static str, value: f64) -> Result<f64, ModelError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(ModelError::InvalidParameter {
            name,
            value,
            reason: "must be finite and >= 0",
        })
    }
}
