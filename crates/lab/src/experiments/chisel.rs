//! `tailtrim experiment chisel`: Chisel against batching over the paper's 360 scenarios in the
//! cluster simulator (`tailtrim_sim::chisel`), plus the fixed-(B, L) sweep behind the
//! optimality ratio. SIMULATED: no server runs.
//!
//! ```text
//!   flags ─► tailtrim_sim::chisel::Setup ─► paper_grid() (or --only A,mice,ratio,overhead)
//!        ─► run_point per scenario, --jobs threads ─► summarize
//!           (--reuse-fixed: batch and the sweep from <out>/results.json, online Chisel run)
//!        ─► <out>/results.json (metadata, setup, summary, per scenario)
//!           <out>/ccdf_gain.svg  gain_by_condition.svg  query_size.svg  optimality.svg
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use plotters::coord::Shift;
use plotters::prelude::{
    DrawingArea, DrawingBackend, IntoDrawingArea, RGBColor, SVGBackend, WHITE,
};
use serde::{Deserialize, Serialize};
use tailtrim_sim::chisel::{
    paper_grid, run_point_reusing, summarize, GridPoint, Outcome, PointResult, Setup, Summary,
};

use crate::experiment::{run_each, Experiment, ProgressFn};
use crate::figures::{draw_bars, drawing_failed, plot_panels_file, Line, Panel};
use crate::histogram::Encoded;
use crate::meta::{Recorder, SeededMetadata};
use crate::results::read_json;

use super::chisel_testbed;
use super::common::{command, Terminal};

/// Arguments of `tailtrim experiment chisel`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Chisel vs batch over the paper's 360 scenarios in the cluster simulator (SIMULATED)"
)]
pub struct Args {
    /// Output directory (default `experiments/chisel/sim`, or `experiments/chisel/testbed`
    /// with `--testbed`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Requests per simulated run.
    #[arg(short = 'n', long, default_value_t = Setup::default().requests)]
    requests: u64,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Skip the fixed-(B, L) sweep (no optimality ratio).
    #[arg(long)]
    no_sweep: bool,
    /// Scenarios run at once (threads).
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// Only these scenarios, `A:mice:ratio:overhead` (comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Only redraw the figures from `<out>/results.json` (no simulation).
    #[arg(long)]
    replot: bool,
    /// Take batch's outcome and the fixed-(B, L) sweep of every scenario from
    /// `<out>/results.json` and simulate only online Chisel again (neither batch nor the sweep
    /// runs the analyzer): for a change to the analyzer only. The stored setup must match
    /// this run's except for the analyzer's settings.
    #[arg(long, conflicts_with_all = ["replot", "testbed", "no_sweep"])]
    reuse_fixed: bool,
    /// EMULATED testbed instead: the real proxy (batch and chisel, interleaved) over 4
    /// `tailtrim serve` backends with emulated service and network time (the paper's profile
    /// dilated by --dilation), beside the simulator on the same scenarios. Default scenarios:
    /// A 60/120/300 µs × mice 1/10 keys × 9:1 and 5:1 × overhead 0/120 µs (24).
    #[arg(long)]
    testbed: bool,
    /// Testbed: dilation of the emulated times, the inter-arrival time and the overhead.
    #[arg(long, default_value_t = chisel_testbed::DEFAULT_DILATION)]
    dilation: f64,
    /// Testbed: rounds per scenario (batch and chisel interleaved in each).
    #[arg(long, default_value_t = 2)]
    repeats: usize,
    /// Testbed: measured requests per run.
    #[arg(long, default_value_t = 800)]
    measured_requests: u64,
    /// Testbed: unmeasured requests per proxy before a scenario's first round.
    #[arg(long, default_value_t = 750)]
    warmup_requests: u64,
    /// Testbed: keys preloaded on every backend.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Testbed: bench connections to each proxy.
    #[arg(long, default_value_t = chisel_testbed::DEFAULT_BENCH_CONNECTIONS)]
    bench_connections: usize,
    /// Testbed: worker threads per backend (the simulator's workers per server).
    #[arg(long, default_value_t = 4)]
    backend_workers: usize,
}

/// What a run of the simulated experiment keeps (`results.json`).
#[derive(Serialize, Deserialize)]
pub struct Report {
    metadata: SeededMetadata,
    setup: Setup,
    summary: Summary,
    results: Vec<PointResult>,
    /// Per scenario of `results` (same order), the latency histograms its percentiles are
    /// read from. Absent in files written before they were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    histograms: Vec<PointHistograms>,
}

/// One scenario's histograms (nanoseconds; hdrhistogram V2, base64): per planner, `all`,
/// `mice` and `elephants` (the classes whose mean and p95 the outcome reports).
#[derive(Serialize, Deserialize)]
struct PointHistograms {
    point: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    batch: BTreeMap<String, Encoded>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    chisel: BTreeMap<String, Encoded>,
}

fn encode_outcome(outcome: &Outcome) -> Result<BTreeMap<String, Encoded>, String> {
    outcome
        .histograms
        .iter()
        .map(|(name, histogram)| Ok(((*name).to_string(), Encoded::encode(histogram)?)))
        .collect()
}

/// Checks that the p95s of every outcome with kept histograms are theirs; the number of
/// scenarios checked.
fn check_histograms(report: &Report) -> Result<usize, String> {
    let mut checked = 0;
    for (result, kept) in report.results.iter().zip(&report.histograms) {
        if kept.point != result.point.name() {
            return Err(format!(
                "histograms of {} beside the result of {}",
                kept.point,
                result.point.name()
            ));
        }
        for (planner, outcome, histograms) in [
            ("batch", &result.batch, &kept.batch),
            ("chisel", &result.chisel, &kept.chisel),
        ] {
            for (class, reported) in [
                ("all", outcome.p95_us),
                ("mice", outcome.mice_p95_us),
                ("elephants", outcome.elephant_p95_us),
            ] {
                let Some(encoded) = histograms.get(class) else {
                    continue;
                };
                let again = encoded.percentile(95.0, 1e3).unwrap_or(0.0);
                if (again - reported).abs() > 1e-3 {
                    return Err(format!(
                        "{} {planner} {class}: reported p95 {reported} µs, its histogram's {again} µs",
                        kept.point
                    ));
                }
            }
        }
        checked += 1;
    }
    Ok(checked)
}

fn parse_point(text: &str) -> Result<GridPoint, String> {
    let fields: Vec<&str> = text.split(':').collect();
    let number = |field: &str| -> Result<f64, String> {
        field
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("--only {text:?}: expected A:mice:ratio:overhead"))
    };
    if fields.len() != 4 {
        return Err(format!("--only {text:?}: expected A:mice:ratio:overhead"));
    }
    Ok(GridPoint {
        interarrival_us: number(fields[0])?,
        mice_keys: number(fields[1])? as u32,
        mice_per_elephant: number(fields[2])? as u32,
        overhead_us: number(fields[3])?,
    })
}

/// Runs `tailtrim experiment chisel`.
pub fn run(args: Args) -> Result<ExitCode, String> {
    let grid = || -> Result<Vec<GridPoint>, String> {
        args.only.iter().map(|text| parse_point(text)).collect()
    };
    if args.testbed {
        let only = grid()?;
        return chisel_testbed::run(chisel_testbed::Options {
            out: args
                .out
                .clone()
                .unwrap_or_else(|| PathBuf::from("experiments/chisel/testbed")),
            grid: if only.is_empty() {
                chisel_testbed::testbed_grid()
            } else {
                only
            },
            settings: chisel_testbed::TestbedSettings {
                backend_workers: args.backend_workers,
                repeats: args.repeats,
                measured_requests: args.measured_requests,
                warmup_requests: args.warmup_requests,
                keys: args.keys,
                seed: args.seed,
                bench_connections: args.bench_connections,
                ..chisel_testbed::TestbedSettings::at_dilation(args.dilation)
            },
            replot: args.replot,
        });
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("experiments/chisel/sim"));
    let simulated = ChiselSim {
        args: &args,
        out: &out,
    };
    command(
        &simulated,
        &out,
        args.replot,
        &Terminal::new("chisel (simulated)", false),
    )
}

/// Chisel against batch in the cluster simulator: the paper's grid (or `--only`), each
/// scenario simulated once per planner.
pub struct ChiselSim<'a> {
    /// The command's arguments.
    pub args: &'a Args,
    /// Where the results are kept (`--reuse-fixed` reads the previous run there).
    pub out: &'a Path,
}

impl Experiment for ChiselSim<'_> {
    type Results = Report;

    fn run(&self, progress: ProgressFn<'_>) -> Result<Report, String> {
        simulate(self.args, self.out, progress)
    }

    fn check(report: &Report) -> Result<usize, String> {
        check_histograms(report)
    }

    fn render(report: &Report, out: &Path) -> Result<(), String> {
        plot_all(out, &report.results, &report.summary)
    }

    fn summarise(report: &Report) -> String {
        summary_text(
            &report.summary,
            &report.results,
            report.metadata.run.wall_seconds,
        )
    }
}

/// Simulates the grid of `args` (reusing the fixed planners' outcomes kept in `out` with
/// `--reuse-fixed`).
fn simulate(args: &Args, out: &Path, progress: ProgressFn<'_>) -> Result<Report, String> {
    let grid = || -> Result<Vec<GridPoint>, String> {
        args.only.iter().map(|text| parse_point(text)).collect()
    };
    let setup = Setup {
        requests: args.requests,
        seed: args.seed,
        sweep: if args.no_sweep {
            Vec::new()
        } else {
            Setup::default().sweep
        },
        ..Setup::default()
    };
    let grid = match grid()? {
        only if only.is_empty() => paper_grid(),
        only => only,
    };
    // --reuse-fixed: the stored batch and sweep per scenario, and the run they came from.
    let (reused, reused_from) = if args.reuse_fixed {
        let previous: Report = read_json(out)?;
        let comparable = Setup {
            analyzer: setup.analyzer,
            ..previous.setup.clone()
        };
        if comparable != setup {
            return Err(format!(
                "--reuse-fixed: {}/results.json was run with another setup",
                out.display()
            ));
        }
        let by_name: std::collections::HashMap<String, PointResult> = previous
            .results
            .into_iter()
            .map(|result| (result.point.name(), result))
            .collect();
        let batch_histograms: std::collections::HashMap<String, BTreeMap<String, Encoded>> =
            previous
                .histograms
                .into_iter()
                .map(|kept| (kept.point, kept.batch))
                .collect();
        let from = format!(
            "; batch and the fixed-(B, L) sweep reused from the run of commit {}",
            previous.metadata.run.commit
        );
        (Some((by_name, batch_histograms)), from)
    } else {
        (None, String::new())
    };
    let reused_for = |point: &GridPoint| -> Result<Option<&PointResult>, String> {
        match &reused {
            None => Ok(None),
            Some((by_name, _)) => by_name.get(&point.name()).map(Some).ok_or_else(|| {
                format!(
                    "--reuse-fixed: {} is not in the stored results",
                    point.name()
                )
            }),
        }
    };
    // The tree as the run starts: the code that produces the numbers.
    let recorder = Recorder::start();
    let results = run_each(&grid, args.jobs, "simulating", progress, |point| {
        reused_for(point).and_then(|fixed| {
            run_point_reusing(&setup, point, fixed)
                .map_err(|error| format!("{}: {error}", point.name()))
        })
    })?;
    let metadata = recorder.finish();
    let summary = summarize(&results);
    let histograms = results
        .iter()
        .map(|result| {
            let name = result.point.name();
            // A reused batch outcome keeps the histograms of the run it came from.
            let batch = match &reused {
                Some((_, stored)) => stored.get(&name).cloned().unwrap_or_default(),
                None => encode_outcome(&result.batch)?,
            };
            Ok(PointHistograms {
                point: name,
                batch,
                chisel: encode_outcome(&result.chisel)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Report {
        metadata: SeededMetadata {
            run: metadata,
            seed: args.seed,
            note: format!("SIMULATED: tailtrim's cluster simulator, no real servers{reused_from}"),
        },
        setup,
        summary,
        results,
        histograms,
    })
}

/// The run's summary: gains over batch, the optimality ratio and, for a small grid, every
/// scenario.
fn summary_text(summary: &Summary, results: &[PointResult], wall_secs: f64) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "SIMULATED, {} scenarios in {wall_secs:.0} s: mean gain on the mean {:.1} %, on the p95 {:.1} % \
         (median {:.1} %), worst p95 gain {:.1} % ({}), {} scenario(s) worse than batch by > 5 % on p95",
        summary.scenarios,
        summary.mean_gain_mean_pct,
        summary.mean_gain_p95_pct,
        summary.median_gain_p95_pct,
        summary.worst_gain_p95_pct,
        summary.worst_scenario,
        summary.worse_than_batch_p95.len()
    );
    if let Some(ratio) = summary.median_optimality_mean {
        let _ = writeln!(
            text,
            "optimality ratio (best fixed (B, L) / online), median: mean {ratio:.3}, p95 {:.3}",
            summary.median_optimality_p95.unwrap_or(0.0)
        );
    }
    if results.len() <= 24 {
        let _ = writeln!(
            text,
            "{:<22} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7}  (B, L)",
            "scenario", "batch µs", "chisel", "gain", "batch p95", "chisel", "gain"
        );
        for r in results {
            let _ = writeln!(
                text,
                "{:<22} {:>9.0} {:>9.0} {:>6.1}% {:>9.0} {:>9.0} {:>6.1}%  ({}, {})",
                r.point.name(),
                r.batch.mean_us,
                r.chisel.mean_us,
                r.gain_mean_pct,
                r.batch.p95_us,
                r.chisel.p95_us,
                r.gain_p95_pct,
                r.main_shape.0,
                shape_l(r.main_shape.1)
            );
        }
    }
    text
}

fn shape_l(chunk_size: u32) -> String {
    if chunk_size == u32::MAX {
        "∞".to_string()
    } else {
        chunk_size.to_string()
    }
}

const MEAN_COLOR: RGBColor = RGBColor(31, 119, 180);
const P95_COLOR: RGBColor = RGBColor(214, 39, 40);

fn plot_all(out: &Path, results: &[PointResult], summary: &Summary) -> Result<(), String> {
    let path = |name: &str| out.join(name);
    let (ccdf_path, conditions, sizes, optimality) = (
        path("ccdf_gain.svg"),
        path("gain_by_condition.svg"),
        path("query_size.svg"),
        path("optimality.svg"),
    );
    plot_panels_file(&ccdf_path, (900, 600), &[gain_ccdf(results)]).map_err(|e| e.to_string())?;
    draw_conditions(
        &SVGBackend::new(&conditions, (1200, 800)).into_drawing_area(),
        summary,
    )?;
    draw_query_size(
        &SVGBackend::new(&sizes, (1000, 600)).into_drawing_area(),
        results,
    )?;
    if results.iter().any(|r| r.optimality_mean.is_some()) {
        plot_panels_file(&optimality, (900, 600), &[optimality_cdf(results)])
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Points of a CCDF: for each value, the share of values ≥ it.
fn ccdf(mut values: Vec<f64>) -> Vec<(f64, f64)> {
    values.sort_by(f64::total_cmp);
    let n = values.len() as f64;
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| (v, (n - i as f64) / n))
        .collect()
}

/// The two lines of a distribution figure: the mean's and the p95's.
fn mean_and_p95(mean: Vec<(f64, f64)>, p95: Vec<(f64, f64)>) -> Vec<Line> {
    [("mean", mean), ("p95", p95)]
        .into_iter()
        .map(|(name, points)| Line::new(name, points))
        .collect()
}

fn gain_ccdf(results: &[PointResult]) -> Panel {
    Panel {
        title: format!(
            "SIMULATED: CCDF of Chisel's gain over batch ({} scenarios)",
            results.len()
        ),
        x_desc: "gain over batch (%)".into(),
        y_desc: "share of scenarios with at least this gain".into(),
        lines: mean_and_p95(
            ccdf(results.iter().map(|r| r.gain_mean_pct).collect()),
            ccdf(results.iter().map(|r| r.gain_p95_pct).collect()),
        ),
        ..Panel::default()
    }
}

fn draw_conditions<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    summary: &Summary,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| drawing_failed(&e))?;
    let root = root
        .titled(
            "SIMULATED: mean gain of Chisel over batch by condition",
            ("sans-serif", 22),
        )
        .map_err(|e| drawing_failed(&e))?;
    let panels = root.split_evenly((2, 2));
    let conditions = [
        ("mice keys", "(a) mice request size (keys)"),
        ("mice per elephant", "(b) mice per elephant"),
        ("A", "(c) mean inter-arrival A (µs)"),
        ("overhead", "(d) client overhead per query (µs)"),
    ];
    for (panel, (condition, title)) in panels.iter().zip(conditions) {
        let groups: Vec<(String, Vec<f64>)> = summary
            .by_condition
            .iter()
            .filter(|c| c.condition == condition)
            .map(|c| {
                (
                    format!("{}", c.value),
                    vec![c.gain_mean_pct, c.gain_p95_pct],
                )
            })
            .collect();
        draw_bars(
            panel,
            title,
            "",
            &groups,
            &[("mean", MEAN_COLOR), ("p95", P95_COLOR)],
            "gain (%)",
        )?;
    }
    root.present().map_err(|e| drawing_failed(&e))
}

/// Fig. 9: mean keys per backend query, batch vs chisel, at A = 120 and 1000 µs (overhead 0).
fn draw_query_size<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    results: &[PointResult],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| drawing_failed(&e))?;
    let root = root
        .titled(
            "SIMULATED: mean keys per backend query, no injected overhead",
            ("sans-serif", 22),
        )
        .map_err(|e| drawing_failed(&e))?;
    let panels = root.split_evenly((1, 2));
    for (panel, a) in panels.iter().zip([120.0, 1000.0]) {
        let groups: Vec<(String, Vec<f64>)> = results
            .iter()
            .filter(|r| r.point.interarrival_us == a && r.point.overhead_us == 0.0)
            .map(|r| {
                (
                    format!("{}:1 m{}", r.point.mice_per_elephant, r.point.mice_keys),
                    vec![r.batch.keys_per_query, r.chisel.keys_per_query],
                )
            })
            .collect();
        if groups.is_empty() {
            continue;
        }
        draw_bars(
            panel,
            &format!("A = {a} µs"),
            "mix, mice keys",
            &groups,
            &[("batch", MEAN_COLOR), ("chisel", P95_COLOR)],
            "keys per query",
        )?;
    }
    root.present().map_err(|e| drawing_failed(&e))
}

/// Fig. 7d: CDF of the optimality ratio (best fixed (B, L) / online), mean and p95.
fn optimality_cdf(results: &[PointResult]) -> Panel {
    let cdf = |values: Vec<f64>| -> Vec<(f64, f64)> {
        ccdf(values)
            .into_iter()
            .map(|(v, share)| (v, 1.0 - share + 1.0 / results.len().max(1) as f64))
            .collect()
    };
    Panel {
        title: "SIMULATED: optimality ratio, best fixed (B, L) / online analyzer's".into(),
        x_desc: "optimality ratio (1: as good as the best fixed shape)".into(),
        y_desc: "share of scenarios at or below".into(),
        lines: mean_and_p95(
            cdf(results.iter().filter_map(|r| r.optimality_mean).collect()),
            cdf(results.iter().filter_map(|r| r.optimality_p95).collect()),
        ),
        ..Panel::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_parses_scenarios() {
        let point = parse_point("120:5:9:60").unwrap();
        assert_eq!(point.name(), "A120-m5-r9-o60");
        assert!(parse_point("120:5:9").is_err());
    }

    #[test]
    fn ccdf_starts_at_one() {
        let points = ccdf(vec![3.0, 1.0, 2.0]);
        assert_eq!(points, vec![(1.0, 1.0), (2.0, 2.0 / 3.0), (3.0, 1.0 / 3.0)]);
    }
}
