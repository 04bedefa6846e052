//! `tailtrim model`: analytic latency prediction and capacity planning.
//!
//! ```text
//!   tailtrim model cheng  [flags] [--sweep-lambda a:b:step --plot out.svg] [--json]
//!   tailtrim model chisel [flags] [--merge B --chunk L] [--json]
//!   tailtrim model cliff  [--knee-slope κ --level-delta δ*] [--json]
//!        │ flags → tailtrim_model::{cheng, chisel, cliff} (pure) → table / JSON / SVG
//! ```

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use plotters::coord::Shift;
use plotters::prelude::{
    BitMapBackend, ChartBuilder, Color, DrawingArea, DrawingBackend, IntoDrawingArea, IntoLogRange,
    LineSeries, Palette, Palette99, PathElement, SVGBackend, SeriesLabelPosition, BLACK, WHITE,
};
use serde::Serialize;
use tailtrim_model::cheng::{self, ChengParams, ChengPrediction};
use tailtrim_model::chisel::{
    batching_baseline, best_plan, ChiselModel, ChiselParams, LinearCost, Objective, PlanGrid,
    Prediction,
};
use tailtrim_model::cliff::{
    self, CliffRow, DEFAULT_KNEE_SLOPE, DEFAULT_LEVEL_DELTA, PAPER_TABLE_4,
};
use tailtrim_model::Seconds;

/// Arguments of `tailtrim model`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Analytic latency prediction: Cheng et al. Theorem 1, the latency cliff, Chisel's split/merge model",
    after_help = "Examples:\n  tailtrim model cheng                      # the paper's validation point (Table 3)\n  tailtrim model cheng --lambda 70000 --xi 0.3 --json\n  tailtrim model cheng --sweep-lambda 10000:75000:2500 --sweep-xi 0,0.6,0.8 --plot sweep.svg\n  tailtrim model cliff                      # Table 4 next to ours\n  tailtrim model chisel --interarrival-us 120 --overhead-us 60"
)]
pub struct Args {
    #[command(subcommand)]
    command: ModelCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ModelCommand {
    /// Cheng et al. Theorem 1: network, memcached (GI^X/M/1) and database latency of an N-key request.
    Cheng(Box<ChengArgs>),
    /// Chisel's layered model: mice/elephant latency for merge level B and chunk size L, and the best (B, L).
    Chisel(Box<ChiselArgs>),
    /// The latency-cliff utilization per burst degree ξ, next to the paper's Table 4.
    Cliff(CliffArgs),
}

/// Flags of `tailtrim model cheng` (defaults: the paper's validation point, Section 5.1).
#[derive(clap::Args, Debug)]
struct ChengArgs {
    /// λ: key arrival rate at the most loaded server, keys/s.
    #[arg(long, default_value_t = 62_500.0)]
    lambda: f64,
    /// Λ: total key rate over all servers, keys/s (sets λ = p1·Λ; overrides --lambda).
    #[arg(long)]
    total_rate: Option<f64>,
    /// ξ: burst degree of the generalized-Pareto inter-arrival gaps (0 = Poisson), in [0, 1).
    #[arg(long, default_value_t = 0.15)]
    xi: f64,
    /// q: probability that keys arrive concurrently (geometric batches), in [0, 1).
    #[arg(long, default_value_t = 0.1)]
    q: f64,
    /// μ_S: service rate of one memcached server, keys/s.
    #[arg(long, default_value_t = 80_000.0)]
    mu_s: f64,
    /// N: keys per end-user request.
    #[arg(short = 'n', long, default_value_t = 150)]
    keys: u64,
    /// M: number of memcached servers.
    #[arg(long, default_value_t = 4)]
    servers: u32,
    /// p1: largest share of a request's keys on one server (default 1/M: balanced).
    #[arg(long)]
    p1: Option<f64>,
    /// r: cache miss ratio.
    #[arg(short = 'r', long, default_value_t = 0.01)]
    miss_ratio: f64,
    /// 1/μ_D: database service time per missed key, milliseconds.
    #[arg(long, default_value_t = 1.0)]
    db_ms: f64,
    /// T_N: network latency, microseconds (Table 3 uses 20).
    #[arg(long, default_value_t = 20.0)]
    network_us: f64,
    /// Sweep λ as `start:end:step` (keys/s) and print E[T_S(N)] bounds per point.
    #[arg(long, value_name = "A:B:STEP")]
    sweep_lambda: Option<String>,
    /// Burst degrees to sweep (comma separated; default: --xi only).
    #[arg(long, value_name = "LIST")]
    sweep_xi: Option<String>,
    /// Write the sweep as a plot, SVG (or PNG if the name ends in .png): E[T_S(N)] vs λ, like the paper's Fig. 7/8.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Flags of `tailtrim model chisel` (defaults: the paper's testbed profile).
#[derive(clap::Args, Debug)]
struct ChiselArgs {
    /// Mean inter-arrival time of user requests, µs (Poisson arrivals).
    #[arg(long, default_value_t = 200.0)]
    interarrival_us: f64,
    /// Mice per elephant in the mix (9 → 9:1).
    #[arg(long, default_value_t = 9.0)]
    mice_per_elephant: f64,
    /// Keys in a mouse request.
    #[arg(long, default_value_t = 10)]
    mouse_keys: u32,
    /// Keys in an elephant request.
    #[arg(long, default_value_t = 100)]
    elephant_keys: u32,
    /// Client query threads.
    #[arg(long, default_value_t = 16)]
    client_threads: u32,
    /// Memcached worker threads in the pool (servers × threads each).
    #[arg(long, default_value_t = 16)]
    server_threads: u32,
    /// P_S = a + b·K: constant part a, µs.
    #[arg(long, default_value_t = 3.3)]
    ps_a_us: f64,
    /// P_S = a + b·K: per-key part b, µs.
    #[arg(long, default_value_t = 0.6)]
    ps_b_us: f64,
    /// N_S = c + d·K: constant part c, µs.
    #[arg(long, default_value_t = 85.0)]
    ns_c_us: f64,
    /// N_S = c + d·K: per-key part d, µs.
    #[arg(long, default_value_t = 6.5)]
    ns_d_us: f64,
    /// Client overhead per query (setup, library), µs.
    #[arg(long, default_value_t = 0.0)]
    overhead_us: f64,
    /// Evaluate this merge level B (with --chunk).
    #[arg(long)]
    merge: Option<u32>,
    /// Evaluate this chunk size L (with --merge).
    #[arg(long)]
    chunk: Option<u32>,
    /// Largest merge level in the grid search.
    #[arg(long, default_value_t = 8)]
    max_merge: u32,
    /// Skip merge levels whose mean accumulation time exceeds the client overhead (Chisel's rule).
    #[arg(long)]
    merge_within_overhead: bool,
    /// What the grid search minimizes: mean or p95.
    #[arg(long, default_value = "mean", value_parser = ["mean", "p95"])]
    objective: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Flags of `tailtrim model cliff`.
#[derive(clap::Args, Debug)]
struct CliffArgs {
    /// κ: knee = first ρ where d ln E[T_S(N)]/dρ ≥ κ (default 1/(1−0.77), M/M/1's slope at 77%).
    #[arg(long, default_value_t = DEFAULT_KNEE_SLOPE)]
    knee_slope: f64,
    /// δ*: level = the ρ where δ(ξ, ρ) = δ* (latency at 1/(1−δ*) times its zero-load value).
    #[arg(long, default_value_t = DEFAULT_LEVEL_DELTA)]
    level_delta: f64,
    /// Burst degrees (comma separated; default: Table 4's 0, 0.05, …, 0.95).
    #[arg(long, value_name = "LIST")]
    xi: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `tailtrim model`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    let output = render(&args)?;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(output.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // `tailtrim model … | head` is not an error.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(error) => Err(format!("writing output: {error}")),
    }
}

/// Computes the subcommand's whole output (and writes its plot, if asked).
fn render(args: &Args) -> Result<String, String> {
    let mut out = String::new();
    match &args.command {
        ModelCommand::Cheng(flags) => run_cheng(&mut out, flags),
        ModelCommand::Chisel(flags) => run_chisel(&mut out, flags),
        ModelCommand::Cliff(flags) => run_cliff(&mut out, flags),
    }?;
    Ok(out)
}

/// `writeln!` into the output buffer (writing to a `String` cannot fail).
macro_rules! out_line {
    ($out:expr) => {{
        let _ = writeln!($out);
    }};
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

fn to_json<T: Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string_pretty(value).map_err(|error| format!("json: {error}"))
}

fn parse_list(text: &str) -> Result<Vec<f64>, String> {
    text.split(',')
        .map(|item| {
            item.trim()
                .parse::<f64>()
                .map_err(|error| format!("bad number {item:?}: {error}"))
        })
        .collect()
}

fn parse_range(text: &str) -> Result<Vec<f64>, String> {
    let parts = parse_list(&text.replace(':', ","))?;
    let [start, end, step] = parts[..] else {
        return Err(format!("expected start:end:step, got {text:?}"));
    };
    if step.is_nan() || step <= 0.0 || end < start {
        return Err(format!(
            "bad range {text:?}: need step > 0 and end >= start"
        ));
    }
    let count = ((end - start) / step + 1e-9).floor() as usize;
    Ok((0..=count)
        .map(|index| start + step * index as f64)
        .collect())
}

// ---------------------------------------------------------------------------
// cheng
// ---------------------------------------------------------------------------

fn cheng_params(flags: &ChengArgs) -> ChengParams {
    let heaviest_share = flags.p1.unwrap_or(1.0 / f64::from(flags.servers.max(1)));
    ChengParams {
        key_rate: flags
            .total_rate
            .map_or(flags.lambda, |total| total * heaviest_share),
        burst_degree: flags.xi,
        concurrency: flags.q,
        service_rate: flags.mu_s,
        keys_per_request: flags.keys,
        servers: flags.servers,
        heaviest_share,
        miss_ratio: flags.miss_ratio,
        database_service_time: Seconds::from_millis(flags.db_ms),
        network_latency: Seconds::from_micros(flags.network_us),
    }
}

/// One point of a λ sweep (`None` bounds: unstable).
#[derive(Debug, Serialize)]
struct SweepPoint {
    xi: f64,
    lambda: f64,
    utilization: f64,
    delta: Option<f64>,
    server_lower_us: Option<f64>,
    server_upper_us: Option<f64>,
}

fn run_cheng(out: &mut String, flags: &ChengArgs) -> Result<(), String> {
    let params = cheng_params(flags);
    if let Some(range) = &flags.sweep_lambda {
        return run_cheng_sweep(out, flags, &params, range);
    }
    let prediction = cheng::predict(&params).map_err(|error| error.to_string())?;
    if flags.json {
        out_line!(out, "{}", to_json(&prediction)?);
    } else {
        print_cheng(out, &prediction);
    }
    Ok(())
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

fn run_cheng_sweep(
    out: &mut String,
    flags: &ChengArgs,
    base: &ChengParams,
    range: &str,
) -> Result<(), String> {
    let lambdas = parse_range(range)?;
    let burst_degrees = match &flags.sweep_xi {
        Some(list) => parse_list(list)?,
        None => vec![base.burst_degree],
    };
    let mut points = Vec::with_capacity(lambdas.len() * burst_degrees.len());
    for &xi in &burst_degrees {
        for &lambda in &lambdas {
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
    if let Some(path) = &flags.plot {
        plot_sweep(path, &points, &burst_degrees, base)?;
    }
    if flags.json {
        out_line!(out, "{}", to_json(&points)?);
        return Ok(());
    }
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
    for point in &points {
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
    if let Some(path) = &flags.plot {
        out_line!(out, "plot: {}", path.display());
    }
    Ok(())
}

fn plot_sweep(
    path: &Path,
    points: &[SweepPoint],
    burst_degrees: &[f64],
    base: &ChengParams,
) -> Result<(), String> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|error| format!("plot {}: {error}", path.display()))?;
    }
    let is_png = path
        .extension()
        .is_some_and(|extension| extension.eq_ignore_ascii_case("png"));
    let result = if is_png {
        draw_sweep(
            BitMapBackend::new(path, (900, 600)).into_drawing_area(),
            points,
            burst_degrees,
            base,
        )
    } else {
        draw_sweep(
            SVGBackend::new(path, (900, 600)).into_drawing_area(),
            points,
            burst_degrees,
            base,
        )
    };
    result.map_err(|error| format!("plot {}: {error}", path.display()))
}

fn draw_sweep<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    points: &[SweepPoint],
    burst_degrees: &[f64],
    base: &ChengParams,
) -> Result<(), String> {
    let plot_error = |error: &dyn std::fmt::Display| error.to_string();
    let finite = points
        .iter()
        .flat_map(|p| [p.server_lower_us, p.server_upper_us])
        .flatten()
        .filter(|v| v.is_finite() && *v > 0.0);
    let (low, high) = finite.fold((f64::INFINITY, 0.0f64), |(low, high), v| {
        (low.min(v), high.max(v))
    });
    if !low.is_finite() {
        return Err("no stable point in the sweep".to_string());
    }
    let (x_min, x_max) = points.iter().fold((f64::INFINITY, 0.0f64), |(a, b), p| {
        (a.min(p.lambda / 1e3), b.max(p.lambda / 1e3))
    });
    root.fill(&WHITE).map_err(|e| plot_error(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "E[T_S(N)] vs λ (Theorem 1; μ_S = {:.0} Kps, q = {}, N = {})",
                base.service_rate / 1e3,
                base.concurrency,
                base.keys_per_request
            ),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x_min..x_max, ((low / 1.3)..(high * 1.3)).log_scale())
        .map_err(|e| plot_error(&e))?;
    chart
        .configure_mesh()
        .x_desc("λ: key arrival rate per server (Kps)")
        .y_desc("E[T_S(N)] (µs, log scale)")
        .draw()
        .map_err(|e| plot_error(&e))?;
    for (index, &xi) in burst_degrees.iter().enumerate() {
        let (red, green, blue) = Palette99::COLORS[index % Palette99::COLORS.len()];
        let color = plotters::style::RGBColor(red, green, blue);
        let series = |pick: fn(&SweepPoint) -> Option<f64>| -> Vec<(f64, f64)> {
            points
                .iter()
                .filter(|p| (p.xi - xi).abs() < 1e-12)
                .filter_map(|p| pick(p).map(|v| (p.lambda / 1e3, v)))
                .collect()
        };
        chart
            .draw_series(LineSeries::new(
                series(|p| p.server_upper_us),
                color.stroke_width(2),
            ))
            .map_err(|e| plot_error(&e))?
            .label(format!("ξ = {xi}: upper bound"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(LineSeries::new(
                series(|p| p.server_lower_us),
                color.mix(0.5),
            ))
            .map_err(|e| plot_error(&e))?
            .label(format!("ξ = {xi}: lower bound"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.mix(0.5)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| plot_error(&e))?;
    root.present().map_err(|e| plot_error(&e))?;
    Ok(())
}

// ---------------------------------------------------------------------------
// chisel
// ---------------------------------------------------------------------------

fn chisel_params(flags: &ChiselArgs) -> Result<ChiselParams, String> {
    let valid = flags.interarrival_us.is_finite()
        && flags.interarrival_us > 0.0
        && flags.mice_per_elephant.is_finite()
        && flags.mice_per_elephant >= 0.0;
    if !valid {
        return Err("--interarrival-us must be > 0 and --mice-per-elephant >= 0".to_string());
    }
    Ok(ChiselParams {
        arrival_rate: 1e6 / flags.interarrival_us,
        elephant_fraction: 1.0 / (1.0 + flags.mice_per_elephant),
        mouse_keys: flags.mouse_keys,
        elephant_keys: flags.elephant_keys,
        client_threads: flags.client_threads,
        server_threads: flags.server_threads,
        processing: LinearCost {
            fixed: Seconds::from_micros(flags.ps_a_us),
            per_key: Seconds::from_micros(flags.ps_b_us),
        },
        network: LinearCost {
            fixed: Seconds::from_micros(flags.ns_c_us),
            per_key: Seconds::from_micros(flags.ns_d_us),
        },
        client_overhead: Seconds::from_micros(flags.overhead_us),
    })
}

#[derive(Debug, Serialize)]
struct ChiselReport {
    params: ChiselParams,
    batching: Option<Prediction>,
    requested: Option<Prediction>,
    best: Option<Prediction>,
    best_objective: Objective,
}

fn run_chisel(out: &mut String, flags: &ChiselArgs) -> Result<(), String> {
    let params = chisel_params(flags)?;
    let model = ChiselModel::new(params).map_err(|error| error.to_string())?;
    let objective = if flags.objective == "p95" {
        Objective::P95
    } else {
        Objective::Mean
    };
    let mut grid = PlanGrid::default_for(&params);
    grid.merge_levels = (1..=flags.max_merge.max(1)).collect();
    grid.objective = objective;
    if flags.merge_within_overhead {
        grid.max_merge_wait = Some(params.client_overhead);
    }
    let requested = match (flags.merge, flags.chunk) {
        (Some(merge), Some(chunk)) => Some(
            model
                .predict(merge, chunk)
                .map_err(|error| error.to_string())?,
        ),
        (None, None) => None,
        _ => return Err("--merge and --chunk go together".to_string()),
    };
    let report = ChiselReport {
        params,
        batching: batching_baseline(&params).ok(),
        requested,
        best: best_plan(&params, &grid)
            .ok()
            .map(|(_, _, prediction)| prediction),
        best_objective: objective,
    };
    if flags.json {
        out_line!(out, "{}", to_json(&report)?);
        return Ok(());
    }
    out_line!(out, "Chisel layered model");
    out_line!(
        out,
        "inputs: inter-arrival {:.1} µs ({:.0} req/s), mix {}:1 (elephant share {:.3}), mice {} keys, elephants {} keys, {} client threads, {} server threads",
        flags.interarrival_us,
        params.arrival_rate,
        flags.mice_per_elephant,
        params.elephant_fraction,
        params.mouse_keys,
        params.elephant_keys,
        params.client_threads,
        params.server_threads,
    );
    out_line!(
        out,
        "        P_S = {} + {}·K µs, N_S = {} + {}·K µs, client overhead {} µs",
        flags.ps_a_us,
        flags.ps_b_us,
        flags.ns_c_us,
        flags.ns_d_us,
        flags.overhead_us
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
    row(&format!("best by {}", flags.objective), &report.best);
    out_line!(out, "(latencies in µs)");
    Ok(())
}

// ---------------------------------------------------------------------------
// cliff
// ---------------------------------------------------------------------------

fn run_cliff(out: &mut String, flags: &CliffArgs) -> Result<(), String> {
    let burst_degrees = match &flags.xi {
        Some(list) => parse_list(list)?,
        None => PAPER_TABLE_4.iter().map(|(xi, _)| *xi).collect(),
    };
    let rows = cliff::cliff_table(&burst_degrees, flags.knee_slope, flags.level_delta)
        .map_err(|error| error.to_string())?;
    if flags.json {
        out_line!(out, "{}", to_json(&rows)?);
        return Ok(());
    }
    print_cliff(out, &rows, flags);
    Ok(())
}

fn print_cliff(out: &mut String, rows: &[CliffRow], flags: &CliffArgs) {
    out_line!(
        out,
        "Cliff utilization ρ_S(ξ) (Cheng et al. Table 4 vs this model)"
    );
    out_line!(
        out,
        "knee: first ρ with d ln E[T_S(N)]/dρ ≥ κ = {:.3};  level: ρ with δ(ξ, ρ) = δ* = {}",
        flags.knee_slope,
        flags.level_delta
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

#[cfg(test)]
mod tests {
    use super::{parse_range, render, Args};
    use clap::Parser;

    #[derive(Parser)]
    struct TestCli {
        #[command(flatten)]
        args: Args,
    }

    fn output(arguments: &[&str]) -> Result<String, String> {
        let cli =
            TestCli::try_parse_from(std::iter::once("model").chain(arguments.iter().copied()))
                .map_err(|error| error.to_string())?;
        render(&cli.args)
    }

    fn json(arguments: &[&str]) -> serde_json::Value {
        let text = output(arguments).unwrap_or_else(|error| panic!("{error}"));
        serde_json::from_str(&text).unwrap_or_else(|error| panic!("{error}: {text}"))
    }

    #[test]
    fn ranges_include_the_end_and_reject_nonsense() {
        assert_eq!(parse_range("10:20:5"), Ok(vec![10.0, 15.0, 20.0]));
        assert!(parse_range("20:10:5").is_err());
        assert!(parse_range("10:20:0").is_err());
        assert!(parse_range("10:20").is_err());
    }

    #[test]
    fn total_rate_and_p1_set_the_heaviest_server_rate() {
        let value = json(&["cheng", "--total-rate", "80000", "--p1", "0.5", "--json"]);
        assert_eq!(value["params"]["key_rate"], 40_000.0);
        assert_eq!(value["params"]["heaviest_share"], 0.5);
        assert_eq!(value["utilization"], 0.5);
        let lower = value["server"]["lower"].as_f64().unwrap_or(f64::NAN);
        let upper = value["server"]["upper"].as_f64().unwrap_or(f64::NAN);
        assert!(lower < upper, "{lower} {upper}");
    }

    #[test]
    fn default_table_shows_the_validation_point() {
        let table = output(&["cheng"]).unwrap_or_else(|error| panic!("{error}"));
        assert!(table.contains("E[T_S(N)] memcached"), "{table}");
        assert!(table.contains("ρ_S=0.7812"), "{table}");
        let saturated = output(&["cheng", "--lambda", "90000"]);
        assert!(saturated.is_err_and(|error| error.contains("unstable")));
    }

    #[test]
    fn cliff_and_chisel_flags() {
        let rows = json(&["cliff", "--xi", "0,0.5", "--json"]);
        assert_eq!(rows.as_array().map(Vec::len), Some(2));
        assert!(output(&["chisel", "--merge", "2"]).is_err());
        let report = json(&["chisel", "--merge", "2", "--chunk", "25", "--json"]);
        assert_eq!(report["requested"]["chunks"], 4);
        assert_eq!(report["batching"]["chunks"], 1);
    }

    #[test]
    fn sweep_writes_an_svg_plot() {
        let directory =
            std::env::temp_dir().join(format!("tailtrim-model-test-{}", std::process::id()));
        let path = directory.join("sweep.svg");
        let path_text = path.to_string_lossy().to_string();
        let table = output(&[
            "cheng",
            "--sweep-lambda",
            "10000:70000:20000",
            "--sweep-xi",
            "0,0.6",
            "--plot",
            &path_text,
        ])
        .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            table.lines().filter(|line| line.contains("0000 ")).count(),
            8,
            "{table}"
        );
        let svg = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            svg.starts_with("<svg") && svg.contains("upper bound"),
            "no plot at {path_text}"
        );
        let _ = std::fs::remove_dir_all(&directory);
    }
}
