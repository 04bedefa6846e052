//! `tailtrim model` reports: the text tables of Theorem 1's prediction and λ sweep, the
//! cliff table and Chisel's plans, and the sweep's figure.
//!
//! ```text
//!   ChengPrediction ──► cheng_table          SweepPoint list ──► sweep_table, plot_sweep (SVG/PNG)
//!   CliffRow list ──► cliff_table            ChiselReport ──► chisel_table
//! ```
//!
//! Every table is returned as text; only [`plot_sweep`] writes (its file, drawn by
//! [`crate::figures`]).

use std::fmt::Write as _;
use std::path::Path;

use tailtrim_model::cheng::{ChengParams, ChengPrediction};
use tailtrim_model::chisel::Prediction;
use tailtrim_model::cliff::CliffRow;
use tailtrim_model::evaluate::{ChiselReport, SweepPoint};
use tailtrim_model::Seconds;

use crate::figures::{plot_panels_file, Line, Panel};
use crate::LabError;

/// `writeln!` into the output buffer (writing to a `String` cannot fail).
macro_rules! out_line {
    ($out:expr) => {{
        let _ = writeln!($out);
    }};
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

/// The inputs of `model chisel` as given (the table prints them as typed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChiselInputs<'a> {
    /// Mean inter-arrival time of user requests, µs.
    pub interarrival_us: f64,
    /// Mice per elephant.
    pub mice_per_elephant: f64,
    /// P_S = a + b·K: a, µs.
    pub ps_a_us: f64,
    /// P_S = a + b·K: b, µs.
    pub ps_b_us: f64,
    /// N_S = c + d·K: c, µs.
    pub ns_c_us: f64,
    /// N_S = c + d·K: d, µs.
    pub ns_d_us: f64,
    /// Client overhead per query, µs.
    pub overhead_us: f64,
    /// What the best plan minimizes, as given (`mean`, `p95`).
    pub objective: &'a str,
}

/// Theorem 1's prediction as a table.
pub fn cheng_table(prediction: &ChengPrediction) -> String {
    let mut out = String::new();
    print_cheng(&mut out, prediction);
    out
}

/// The λ sweep as a table (`plot`: where its figure was written, said on the last line).
pub fn sweep_table(points: &[SweepPoint], base: &ChengParams, plot: Option<&Path>) -> String {
    let mut out = String::new();
    out_line!(
        out,
        "E[T_S(N)] bounds vs λ (μ_S={:.0}, q={}, N={}, p1={:.3})",
        base.service_rate,
        base.concurrency,
        base.keys_per_request,
        base.heaviest_share
    );
    out_line!(
        out,
        "{:>6} {:>10} {:>7} {:>9} {:>12} {:>12}",
        "ξ",
        "λ keys/s",
        "ρ_S",
        "δ",
        "lower µs",
        "upper µs"
    );
    let show = |value: Option<f64>, decimals: usize| {
        value.map_or_else(|| "unstable".to_string(), |v| format!("{v:.decimals$}"))
    };
    for point in points {
        out_line!(
            out,
            "{:>6.2} {:>10.0} {:>7.3} {:>9} {:>12} {:>12}",
            point.xi,
            point.lambda,
            point.utilization,
            show(point.delta, 5),
            show(point.server_lower_us, 1),
            show(point.server_upper_us, 1)
        );
    }
    if let Some(path) = plot {
        out_line!(out, "plot: {}", path.display());
    }
    out
}

/// Chisel's plans as a table.
pub fn chisel_table(report: &ChiselReport, inputs: &ChiselInputs<'_>) -> String {
    let mut out = String::new();
    let params = &report.params;
    out_line!(out, "Chisel layered model");
    out_line!(
        out,
        "inputs: inter-arrival {:.1} µs ({:.0} req/s), mix {}:1 (elephant share {:.3}), mice {} keys, elephants {} keys, {} client threads, {} server threads",
        inputs.interarrival_us,
        params.arrival_rate,
        inputs.mice_per_elephant,
        params.elephant_fraction,
        params.mouse_keys,
        params.elephant_keys,
        params.client_threads,
        params.server_threads,
    );
    out_line!(
        out,
        "        P_S = {} + {}·K µs, N_S = {} + {}·K µs, client overhead {} µs",
        inputs.ps_a_us,
        inputs.ps_b_us,
        inputs.ns_c_us,
        inputs.ns_d_us,
        inputs.overhead_us
    );
    out_line!(out);
    out_line!(
        out,
        "{:<22} {:>4} {:>4} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>6} {:>6}",
        "plan",
        "B",
        "L",
        "chunks",
        "mice mean",
        "mice p95",
        "eleph mean",
        "eleph p95",
        "all mean",
        "all p95",
        "ρ_C",
        "ρ_S"
    );
    let mut row = |name: &str, prediction: &Option<Prediction>| {
        match prediction {
        Some(p) => out_line!(
        out,
            "{:<22} {:>4} {:>4} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>6.3} {:>6.3}",
            name,
            p.merge_level,
            p.chunk_size,
            p.chunks,
            p.mice.mean.as_micros(),
            p.mice.p95.as_micros(),
            p.elephant.mean.as_micros(),
            p.elephant.p95.as_micros(),
            p.overall.mean.as_micros(),
            p.overall.p95.as_micros(),
            p.client_utilization,
            p.server_utilization
        ),
        None => out_line!(out, "{name:<22} unstable (a layer is saturated)"),
    }
    };
    row("batching (baseline)", &report.batching);
    if report.requested.is_some() {
        row("requested", &report.requested);
    }
    row(&format!("best by {}", inputs.objective), &report.best);
    out_line!(out, "(latencies in µs)");
    out
}

/// The cliff table: the paper's Table 4 beside the knee and level of this model.
pub fn cliff_table(rows: &[CliffRow], knee_slope: f64, level_delta: f64) -> String {
    let mut out = String::new();
    print_cliff(&mut out, rows, knee_slope, level_delta);
    out
}

fn print_cheng(out: &mut String, prediction: &ChengPrediction) {
    let p = &prediction.params;
    out_line!(out, "Cheng et al. Theorem 1");
    out_line!(
        out,
        "inputs: λ={:.0} keys/s  μ_S={:.0} keys/s  ρ_S={:.4}  ξ={}  q={}  N={}  M={}  p1={:.4}{}  r={}  1/μ_D={:.3} ms  T_N={:.1} µs",
        p.key_rate,
        p.service_rate,
        prediction.utilization,
        p.burst_degree,
        p.concurrency,
        p.keys_per_request,
        p.servers,
        p.heaviest_share,
        if p.is_balanced() { " (balanced)" } else { "" },
        p.miss_ratio,
        p.database_service_time.as_secs() * 1e3,
        p.network_latency.as_micros(),
    );
    out_line!(
        out,
        "δ = {:.6}   tail rate (1−δ)(1−q)μ_S = {:.1} /s",
        prediction.delta,
        prediction.decay_rate
    );
    out_line!(out);
    out_line!(
        out,
        "{:<28} {:>12} {:>12}",
        "quantity",
        "lower µs",
        "upper µs"
    );
    out_line!(out, "{}", "-".repeat(54));
    for quantile in &prediction.key_quantiles {
        out_line!(
            out,
            "{:<28} {:>12.1} {:>12.1}",
            format!("(T_S)_{} one key, eq. 9", quantile.level),
            quantile.bounds.lower.as_micros(),
            quantile.bounds.upper.as_micros()
        );
    }
    let mut row = |name: &str, lower: Seconds, upper: Seconds| {
        out_line!(
            out,
            "{:<28} {:>12.1} {:>12.1}",
            name,
            lower.as_micros(),
            upper.as_micros()
        );
    };
    row("T_N(N) network", prediction.network, prediction.network);
    row(
        "E[T_S(N)] memcached, eq. 14",
        prediction.server.lower,
        prediction.server.upper,
    );
    row(
        "E[T_D(N)] database, eq. 23",
        prediction.database,
        prediction.database,
    );
    row(
        "T(N) end-user, Theorem 1",
        prediction.total.lower,
        prediction.total.upper,
    );
}

fn print_cliff(out: &mut String, rows: &[CliffRow], knee_slope: f64, level_delta: f64) {
    out_line!(
        out,
        "Cliff utilization ρ_S(ξ) (Cheng et al. Table 4 vs this model)"
    );
    out_line!(
        out,
        "knee: first ρ with d ln E[T_S(N)]/dρ ≥ κ = {:.3};  level: ρ with δ(ξ, ρ) = δ* = {}",
        knee_slope,
        level_delta
    );
    out_line!(
        out,
        "{:>6} {:>9} {:>9} {:>9} {:>11} {:>11}",
        "ξ",
        "paper %",
        "knee %",
        "level %",
        "knee−paper",
        "level−paper"
    );
    for row in rows {
        let paper = row.paper.map(|v| v * 100.0);
        let knee = row.knee.map(|v| v * 100.0);
        let level = row.level * 100.0;
        let cell =
            |value: Option<f64>| value.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
        let difference = |value: Option<f64>| match (value, paper) {
            (Some(v), Some(p)) => format!("{:+.1}", v - p),
            _ => "-".to_string(),
        };
        out_line!(
            out,
            "{:>6.2} {:>9} {:>9} {:>9.1} {:>11} {:>11}",
            row.burst_degree,
            cell(paper),
            knee.map_or_else(|| "none".to_string(), |v| format!("{v:.1}")),
            level,
            difference(knee),
            difference(Some(level)),
        );
    }
    out_line!(
        out,
        "knee 'none': d ln E[T_S]/dρ ≥ κ already at zero load (latency steep everywhere)."
    );
}

/// Draws the sweep's E[T_S(N)] bounds against λ into `path` through the figures module: PNG
/// if its name ends in `.png`, SVG otherwise.
pub fn plot_sweep(
    path: &Path,
    points: &[SweepPoint],
    burst_degrees: &[f64],
    base: &ChengParams,
) -> Result<(), LabError> {
    let failed = |error: &dyn std::fmt::Display| {
        LabError::Results(format!("plot {}: {error}", path.display()))
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|error| failed(&error))?;
    }
    let panel = sweep_panel(points, burst_degrees, base);
    if panel.lines.iter().all(|line| line.points.is_empty()) {
        return Err(failed(&"no stable point in the sweep"));
    }
    plot_panels_file(path, (900, 600), &[panel]).map_err(|error| failed(&error))
}

/// The sweep's figure: per burst degree ξ, the upper and the lower bound of E[T_S(N)] against
/// λ (Kps) on a log latency axis; unstable points are left out.
fn sweep_panel(points: &[SweepPoint], burst_degrees: &[f64], base: &ChengParams) -> Panel {
    let mut lines = Vec::with_capacity(burst_degrees.len() * 2);
    for &xi in burst_degrees {
        let series = |pick: fn(&SweepPoint) -> Option<f64>| -> Vec<(f64, f64)> {
            points
                .iter()
                .filter(|p| (p.xi - xi).abs() < 1e-12)
                .filter_map(|p| pick(p).map(|v| (p.lambda / 1e3, v)))
                .filter(|&(_, v)| v.is_finite() && v > 0.0)
                .collect()
        };
        lines.push(Line::new(
            format!("ξ = {xi}: upper bound"),
            series(|p| p.server_upper_us),
        ));
        lines.push(Line::new(
            format!("ξ = {xi}: lower bound"),
            series(|p| p.server_lower_us),
        ));
    }
    Panel {
        title: format!(
            "E[T_S(N)] vs λ (Theorem 1; μ_S = {:.0} Kps, q = {}, N = {})",
            base.service_rate / 1e3,
            base.concurrency,
            base.keys_per_request
        ),
        x_desc: "λ: key arrival rate per server (Kps)".to_string(),
        y_desc: "E[T_S(N)] (log scale)".to_string(),
        log_y: true,
        latency: true,
        lines,
        markers: Vec::new(),
    }
}
