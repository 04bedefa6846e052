//! What `tailtrim model` reports, computed: a Cheng prediction over a grid of rates and
//! burst degrees, and Chisel's baseline, requested and best plans side by side.
//!
//! ```text
//!   ChengParams + λ values × ξ values ──► cheng_sweep ──► SweepPoint per (ξ, λ)
//!                                                         (None bounds: unstable)
//!   ChiselParams + PlanGrid (+ B, L) ──► ChiselReport::evaluate ──► batching / requested / best
//! ```

use serde::Serialize;

use crate::cheng::{self, ChengParams};
use crate::chisel::{
    batching_baseline, best_plan, ChiselModel, ChiselParams, Objective, PlanGrid, Prediction,
};
use crate::ModelError;

/// One point of a λ sweep (`None` bounds: unstable).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    /// ξ: the burst degree.
    pub xi: f64,
    /// λ: the key rate at the most loaded server, keys/s.
    pub lambda: f64,
    /// ρ_S at that rate.
    pub utilization: f64,
    /// δ, when the queue is stable.
    pub delta: Option<f64>,
    /// E[T_S(N)]'s lower bound, µs.
    pub server_lower_us: Option<f64>,
    /// E[T_S(N)]'s upper bound, µs.
    pub server_upper_us: Option<f64>,
}

/// Theorem 1 at every `lambdas` value for each of `burst_degrees` (ξ-major order), the rest
/// of the parameters from `base`.
pub fn cheng_sweep(base: &ChengParams, lambdas: &[f64], burst_degrees: &[f64]) -> Vec<SweepPoint> {
    let mut points = Vec::with_capacity(lambdas.len() * burst_degrees.len());
    for &xi in burst_degrees {
        for &lambda in lambdas {
            let params = ChengParams {
                key_rate: lambda,
                burst_degree: xi,
                ..*base
            };
            let prediction = cheng::predict(&params).ok();
            points.push(SweepPoint {
                xi,
                lambda,
                utilization: params.utilization(),
                delta: prediction.as_ref().map(|p| p.delta),
                server_lower_us: prediction.as_ref().map(|p| p.server.lower.as_micros()),
                server_upper_us: prediction.as_ref().map(|p| p.server.upper.as_micros()),
            });
        }
    }
    points
}

/// Chisel's plans for one setting: plain batching, a requested (B, L), the grid's best.
#[derive(Debug, Clone, Serialize)]
pub struct ChiselReport {
    /// The setting.
    pub params: ChiselParams,
    /// B = 1, one chunk (`None`: unstable).
    pub batching: Option<Prediction>,
    /// The requested plan, if one was.
    pub requested: Option<Prediction>,
    /// The grid's best plan (`None`: nothing stable).
    pub best: Option<Prediction>,
    /// What the best plan minimizes.
    pub best_objective: Objective,
}

impl ChiselReport {
    /// Evaluates `params`: the baseline, `requested` (merge level B, chunk size L) and the
    /// best plan of `grid`. An invalid setting or requested plan is an error; an unstable
    /// baseline or grid is `None`.
    pub fn evaluate(
        params: ChiselParams,
        grid: &PlanGrid,
        requested: Option<(u32, u32)>,
    ) -> Result<ChiselReport, ModelError> {
        let model = ChiselModel::new(params)?;
        let requested = match requested {
            Some((merge, chunk)) => Some(model.predict(merge, chunk)?),
            None => None,
        };
        Ok(ChiselReport {
            params,
            batching: batching_baseline(&params).ok(),
            requested,
            best: best_plan(&params, grid)
                .ok()
                .map(|(_, _, prediction)| prediction),
            best_objective: grid.objective,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{cheng_sweep, ChiselReport};
    use crate::cheng::ChengParams;
    use crate::chisel::{ChiselParams, PlanGrid};

    #[test]
    fn sweep_marks_unstable_rates_and_keeps_xi_major_order() {
        let base = ChengParams::paper_validation();
        let points = cheng_sweep(&base, &[10_000.0, 90_000.0], &[0.0, 0.6]);
        let order: Vec<(f64, f64)> = points.iter().map(|p| (p.xi, p.lambda)).collect();
        assert_eq!(
            order,
            vec![
                (0.0, 10_000.0),
                (0.0, 90_000.0),
                (0.6, 10_000.0),
                (0.6, 90_000.0)
            ]
        );
        assert!(points[0].server_upper_us.is_some() && points[1].server_upper_us.is_none());
    }

    #[test]
    fn chisel_report_has_the_requested_plan() {
        let params = ChiselParams::paper_defaults();
        let report = ChiselReport::evaluate(params, &PlanGrid::default_for(&params), Some((2, 25)))
            .expect("valid plan");
        assert_eq!(report.requested.map(|p| p.chunks), Some(4));
        assert_eq!(report.batching.map(|p| p.chunks), Some(1));
    }
}
