//! Rate sweeps: one run per target rate, in one invocation, producing a
//! latency-versus-throughput curve.

use std::sync::Arc;

use crate::class::ClassHistograms;
use crate::engine::{run_detailed, Progress, RunConfig};
use crate::report::{RunReport, SweepReport};
use crate::workload::WorkloadSpec;
use crate::BenchError;

/// Runs `config` at each of `rates` (seed varied per point). `on_point` is
/// called after each point with its report; `observer` during each run. Returns the sweep's
/// report and each point's latency histograms, in the order run.
pub fn sweep(
    workload: &Arc<WorkloadSpec>,
    config: &RunConfig,
    rates: &[f64],
    observer: &mut dyn FnMut(usize, &Progress),
    on_point: &mut dyn FnMut(&RunReport),
) -> Result<(SweepReport, Vec<ClassHistograms>), BenchError> {
    let mut points = Vec::with_capacity(rates.len());
    let mut histograms = Vec::with_capacity(rates.len());
    for (index, rate) in rates.iter().enumerate() {
        let mut point_config = config.clone();
        point_config.rate = *rate;
        point_config.seed = config.seed.wrapping_add(index as u64 * 7919);
        let output = run_detailed(workload, &point_config, &mut |progress| {
            observer(index, progress)
        })?;
        on_point(&output.report);
        points.push(output.report);
        histograms.push(output.histograms);
    }
    Ok((SweepReport::from_points(points), histograms))
}
