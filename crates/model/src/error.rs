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
    /// No tier within the search meets the latency objective.
    #[error("p99 <= {slo_us:.0} us is unreachable: the best of 1..={max_servers} servers x {threads} threads predicts {best_us:.0} us ({best_servers} servers)")]
    Unreachable {
        /// The objective, µs.
        slo_us: f64,
        /// Threads per server of the best candidate.
        threads: u32,
        /// Servers of the best candidate (0: none was stable).
        best_servers: u32,
        /// Its predicted p99, µs (infinite: none was stable).
        best_us: f64,
        /// The largest server count searched.
        max_servers: u32,
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
