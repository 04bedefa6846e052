//! Plots as SVG and PNG: percentile curves per class, per-second throughput
//! and p99, overlay panels, and latency versus throughput
//! ([`plot_latency_vs_throughput`], the one routine every sweep, experiment and
//! simulator figure of that kind is drawn with).

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::{
    BitMapBackend, ChartBuilder, Circle, Color, DrawingArea, DrawingBackend, IntoDrawingArea,
    IntoLogRange, LineSeries, Palette, Palette99, PathElement, PointSeries, SVGBackend, BLACK,
    WHITE,
};

use crate::class::Class;
use crate::report::{RunReport, SweepReport};
use crate::BenchError;

const SIZE: (u32, u32) = (900, 600);

fn plot_error(error: impl std::fmt::Display) -> BenchError {
    BenchError::Plot(error.to_string())
}

fn color(index: usize) -> plotters::style::RGBColor {
    let (red, green, blue) = Palette99::COLORS[index % Palette99::COLORS.len()];
    plotters::style::RGBColor(red, green, blue)
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (low, high) = values
        .filter(|value| value.is_finite() && *value > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(low, high), value| {
            (low.min(value), high.max(value))
        });
    if low.is_finite() {
        (low / 1.5, high * 1.5)
    } else {
        (1.0, 10.0)
    }
}

/// Writes `name.svg` and `name.png` in `directory` with `draw`.
fn write_both(
    directory: &Path,
    name: &str,
    draw_svg: impl Fn(DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), BenchError>,
    draw_png: impl Fn(DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), BenchError>,
) -> Result<Vec<PathBuf>, BenchError> {
    std::fs::create_dir_all(directory).map_err(|source| BenchError::Io {
        context: format!("creating {}", directory.display()),
        source,
    })?;
    let svg = directory.join(format!("{name}.svg"));
    let png = directory.join(format!("{name}.png"));
    draw_svg(SVGBackend::new(&svg, SIZE).into_drawing_area())?;
    draw_png(BitMapBackend::new(&png, SIZE).into_drawing_area())?;
    Ok(vec![svg, png])
}

/// Writes the plots of one run (`percentiles`, `timeseries`) into `directory`.
pub fn plot_run(report: &RunReport, directory: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let mut written = write_both(
        directory,
        "percentiles",
        |root| draw_percentiles(&root, report),
        |root| draw_percentiles(&root, report),
    )?;
    if !report.timeseries.is_empty() {
        written.extend(write_both(
            directory,
            "timeseries",
            |root| draw_timeseries(&root, report),
            |root| draw_timeseries(&root, report),
        )?);
    }
    Ok(written)
}

/// Writes the latency-versus-throughput plot of a sweep (`sweep`) into `directory`.
pub fn plot_sweep(sweep: &SweepReport, directory: &Path) -> Result<Vec<PathBuf>, BenchError> {
    type Pick = fn(&crate::report::CurvePoint) -> f64;
    let series: [(&str, Pick); 5] = [
        ("p50 all", |point| point.p50_us),
        ("p99 all", |point| point.p99_us),
        ("p99.9 all", |point| point.p999_us),
        ("p99 small", |point| point.small_p99_us),
        ("p99 large", |point| point.large_p99_us),
    ];
    let plot = LatencyThroughput {
        caption: format!(
            "{}: latency vs throughput ({})",
            sweep.workload, sweep.server
        ),
        y_desc: "latency".to_string(),
        x_max: sweep
            .curve
            .iter()
            .map(|point| point.target_rps)
            .fold(1.0, f64::max),
        curves: series
            .iter()
            .map(|(name, pick)| Curve {
                name: (*name).to_string(),
                color: None,
                points: sweep
                    .curve
                    .iter()
                    .map(|point| (point.achieved_rps, pick(point)))
                    .collect(),
            })
            .collect(),
    };
    plot_latency_vs_throughput(directory, "sweep", &plot)
}

/// Human-readable latency for axis labels (input in microseconds).
fn latency_label(micros: &f64) -> String {
    let micros = *micros;
    if micros >= 1e6 {
        format!("{} s", trim_percent(micros / 1e6))
    } else if micros >= 1e3 {
        format!("{} ms", trim_percent(micros / 1e3))
    } else {
        format!("{} µs", trim_percent(micros))
    }
}

/// Human-readable rate for axis labels.
fn rate_label(rate: &f64) -> String {
    if *rate >= 1e3 {
        format!("{}k", trim_percent(rate / 1e3))
    } else {
        format!("{rate:.0}")
    }
}

/// Maps a percentile to the "number of nines" axis: `1 / (1 - p)`.
fn nines(percentile: f64) -> f64 {
    1.0 / (1.0 - percentile / 100.0).max(1e-6)
}

fn draw_percentiles<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &RunReport,
) -> Result<(), BenchError> {
    root.fill(&WHITE).map_err(plot_error)?;
    let classes: Vec<(Class, Vec<(f64, f64)>)> = Class::ALL
        .iter()
        .map(|class| {
            let points = report
                .class(*class)
                .curve
                .iter()
                .map(|[percentile, micros]| (nines(*percentile), micros.max(0.1)))
                .collect::<Vec<_>>();
            (*class, points)
        })
        .filter(|(_, points)| !points.is_empty())
        .collect();
    let (low, high) = bounds(
        classes
            .iter()
            .flat_map(|(_, points)| points.iter().map(|p| p.1)),
    );
    let title = format!(
        "{}: latency percentiles at {:.0} rps (achieved {:.0})",
        report.workload, report.target_rps, report.achieved_rps
    );
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0f64..1e5).log_scale(), (low..high).log_scale())
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency")
        .y_label_formatter(&latency_label)
        .x_label_formatter(&|x| format!("{}%", trim_percent(100.0 * (1.0 - 1.0 / x))))
        .draw()
        .map_err(plot_error)?;
    for (index, (class, points)) in classes.into_iter().enumerate() {
        let series_color = color(index);
        chart
            .draw_series(LineSeries::new(points, series_color.stroke_width(2)))
            .map_err(plot_error)?
            .label(class.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], series_color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)
}

fn trim_percent(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn draw_timeseries<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &RunReport,
) -> Result<(), BenchError> {
    root.fill(&WHITE).map_err(plot_error)?;
    let (top, bottom) = root.split_vertically(SIZE.1 / 2);
    let seconds = report.timeseries.len().max(1) as f64;
    let throughput: Vec<(f64, f64)> = report
        .timeseries
        .iter()
        .map(|sample| (sample.second as f64 + 0.5, sample.throughput_rps))
        .collect();
    let max_throughput = throughput
        .iter()
        .map(|point| point.1)
        .fold(report.target_rps, f64::max)
        * 1.15;
    let mut upper = ChartBuilder::on(&top)
        .caption(
            format!(
                "{}: throughput per second (target {:.0} rps)",
                report.workload, report.target_rps
            ),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..seconds, 0.0..max_throughput.max(1.0))
        .map_err(plot_error)?;
    upper
        .configure_mesh()
        .y_desc("replies/s")
        .y_label_formatter(&rate_label)
        .draw()
        .map_err(plot_error)?;
    upper
        .draw_series(LineSeries::new(
            throughput.clone(),
            color(0).stroke_width(2),
        ))
        .map_err(plot_error)?;
    upper
        .draw_series(PointSeries::of_element(
            throughput,
            3,
            color(0).filled(),
            &|coord, size, style| Circle::new(coord, size, style),
        ))
        .map_err(plot_error)?;
    let p99: Vec<(f64, f64)> = report
        .timeseries
        .iter()
        .map(|sample| (sample.second as f64 + 0.5, sample.p99_us.max(0.1)))
        .collect();
    let (low, high) = bounds(p99.iter().map(|point| point.1));
    let mut lower = ChartBuilder::on(&bottom)
        .caption(
            "p99 latency of requests scheduled in each second",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..seconds, (low..high).log_scale())
        .map_err(plot_error)?;
    lower
        .configure_mesh()
        .x_desc("second")
        .y_desc("p99")
        .y_label_formatter(&latency_label)
        .draw()
        .map_err(plot_error)?;
    lower
        .draw_series(LineSeries::new(p99.clone(), color(1).stroke_width(2)))
        .map_err(plot_error)?;
    lower
        .draw_series(PointSeries::of_element(
            p99,
            3,
            color(1).filled(),
            &|coord, size, style| Circle::new(coord, size, style),
        ))
        .map_err(plot_error)?;
    root.present().map_err(plot_error)
}

/// One curve of a latency-versus-throughput plot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Curve {
    /// Legend label.
    pub name: String,
    /// Fixed color (RGB), so a system keeps its color across figures; `None`: by position.
    pub color: Option<(u8, u8, u8)>,
    /// `(achieved requests/s, latency µs)` points; non-positive latencies are left out.
    pub points: Vec<(f64, f64)>,
}

/// A latency-versus-throughput figure: the project's one routine for them (the bench's
/// sweeps, every experiment, the simulator).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatencyThroughput {
    /// Caption.
    pub caption: String,
    /// Y axis description (e.g. `small-request p99`).
    pub y_desc: String,
    /// Rightmost rate to show at least (e.g. the highest target rate); the axis ends 5 %
    /// past this or the highest point.
    pub x_max: f64,
    /// The curves.
    pub curves: Vec<Curve>,
}

/// Writes `stem.svg` and `stem.png` into `directory`: latency (log scale) against achieved
/// throughput, one line with dots per curve.
pub fn plot_latency_vs_throughput(
    directory: &Path,
    stem: &str,
    plot: &LatencyThroughput,
) -> Result<Vec<PathBuf>, BenchError> {
    write_both(
        directory,
        stem,
        |root| draw_latency_vs_throughput(&root, plot),
        |root| draw_latency_vs_throughput(&root, plot),
    )
}

fn draw_latency_vs_throughput<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    plot: &LatencyThroughput,
) -> Result<(), BenchError> {
    root.fill(&WHITE).map_err(plot_error)?;
    type Drawn = (String, plotters::style::RGBColor, Vec<(f64, f64)>);
    let curves: Vec<Drawn> = plot
        .curves
        .iter()
        .enumerate()
        .map(|(index, curve)| {
            let points: Vec<(f64, f64)> = curve
                .points
                .iter()
                .copied()
                .filter(|(rate, latency)| rate.is_finite() && latency.is_finite() && *latency > 0.0)
                .collect();
            let rgb = curve.color.map_or_else(
                || color(index),
                |(red, green, blue)| plotters::style::RGBColor(red, green, blue),
            );
            (curve.name.clone(), rgb, points)
        })
        .filter(|(_, _, points)| !points.is_empty())
        .collect();
    let (low, high) = bounds(
        curves
            .iter()
            .flat_map(|(_, _, points)| points.iter().map(|point| point.1)),
    );
    let x_max = curves
        .iter()
        .flat_map(|(_, _, points)| points.iter().map(|point| point.0))
        .fold(plot.x_max.max(1.0), f64::max)
        * 1.05;
    let mut chart = ChartBuilder::on(root)
        .caption(&plot.caption, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..x_max, (low..high).log_scale())
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("achieved throughput (requests/s)")
        .x_label_formatter(&rate_label)
        .y_desc(format!("{} (log scale)", plot.y_desc))
        .y_label_formatter(&latency_label)
        .draw()
        .map_err(plot_error)?;
    for (name, series_color, points) in curves {
        chart
            .draw_series(LineSeries::new(
                points.clone(),
                series_color.stroke_width(2),
            ))
            .map_err(plot_error)?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], series_color.stroke_width(2))
            });
        chart
            .draw_series(PointSeries::of_element(
                points,
                4,
                series_color.filled(),
                &|coord, size, style| Circle::new(coord, size, style),
            ))
            .map_err(plot_error)?;
    }
    chart
        .configure_series_labels()
        .position(plotters::chart::SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)
}

/// One line of an overlay plot.
#[derive(Clone, Debug, Default)]
pub struct Line {
    /// Legend label.
    pub name: String,
    /// `(x, y)` points.
    pub points: Vec<(f64, f64)>,
}

/// One panel of an overlay plot: lines sharing axes, and vertical event markers.
#[derive(Clone, Debug, Default)]
pub struct Panel {
    /// Caption.
    pub title: String,
    /// X axis description.
    pub x_desc: String,
    /// Y axis description.
    pub y_desc: String,
    /// Logarithmic y axis (latencies in µs get time labels).
    pub log_y: bool,
    /// Y values are latencies in microseconds.
    pub latency: bool,
    /// The lines.
    pub lines: Vec<Line>,
    /// X positions of events (drawn as dashed vertical lines).
    pub markers: Vec<f64>,
}

/// Writes `name.svg` and `name.png`: the panels stacked vertically.
pub fn plot_panels(
    directory: &Path,
    name: &str,
    panels: &[Panel],
) -> Result<Vec<PathBuf>, BenchError> {
    write_both(
        directory,
        name,
        |root| draw_panels(&root, panels),
        |root| draw_panels(&root, panels),
    )
}

fn draw_panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    panels: &[Panel],
) -> Result<(), BenchError> {
    root.fill(&WHITE).map_err(plot_error)?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (area, panel) in areas.iter().zip(panels) {
        let x_max = panel
            .lines
            .iter()
            .flat_map(|line| line.points.iter().map(|p| p.0))
            .fold(1.0f64, f64::max);
        let ys = || {
            panel
                .lines
                .iter()
                .flat_map(|line| line.points.iter().map(|p| p.1))
        };
        let mut builder = ChartBuilder::on(area);
        builder
            .caption(&panel.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70);
        if panel.log_y {
            let (low, high) = bounds(ys());
            let mut chart = builder
                .build_cartesian_2d(0.0..x_max, (low..high).log_scale())
                .map_err(plot_error)?;
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(&panel.x_desc).y_desc(&panel.y_desc);
            if panel.latency {
                mesh.y_label_formatter(&latency_label);
            }
            mesh.draw().map_err(plot_error)?;
            for marker in &panel.markers {
                chart
                    .draw_series(LineSeries::new(
                        vec![(*marker, low), (*marker, high)],
                        BLACK.mix(0.5).stroke_width(1),
                    ))
                    .map_err(plot_error)?;
            }
            draw_lines(&mut chart, &panel.lines)?;
        } else {
            let (low, high) = ys().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), y| {
                (lo.min(y), hi.max(y))
            });
            let (low, high) = if low.is_finite() {
                let pad = ((high - low) * 0.05).max(1e-3);
                (low - pad, high + pad)
            } else {
                (0.0, 1.0)
            };
            let mut chart = builder
                .build_cartesian_2d(0.0..x_max, low..high)
                .map_err(plot_error)?;
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(&panel.x_desc).y_desc(&panel.y_desc);
            if panel.latency {
                mesh.y_label_formatter(&latency_label);
            }
            mesh.draw().map_err(plot_error)?;
            for marker in &panel.markers {
                chart
                    .draw_series(LineSeries::new(
                        vec![(*marker, low), (*marker, high)],
                        BLACK.mix(0.5).stroke_width(1),
                    ))
                    .map_err(plot_error)?;
            }
            draw_lines(&mut chart, &panel.lines)?;
        }
    }
    root.present().map_err(plot_error)
}

fn draw_lines<'a, DB, X, Y>(
    chart: &mut plotters::chart::ChartContext<
        'a,
        DB,
        plotters::coord::cartesian::Cartesian2d<X, Y>,
    >,
    lines: &[Line],
) -> Result<(), BenchError>
where
    DB: DrawingBackend + 'a,
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    for (index, line) in lines.iter().enumerate() {
        let series_color = color(index);
        chart
            .draw_series(LineSeries::new(
                line.points.clone(),
                series_color.stroke_width(2),
            ))
            .map_err(plot_error)?
            .label(line.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], series_color.stroke_width(2))
            });
    }
    if lines.len() > 1 || lines.iter().any(|line| !line.name.is_empty()) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
    }
    Ok(())
}

/// The (fractional) request index scheduled at `time_s`, interpolated between windows.
#[must_use]
pub fn request_index_at(windows: &[crate::cacheaside::WindowSample], time_s: f64) -> u64 {
    let Some(at) = windows.iter().rposition(|w| w.time_s <= time_s) else {
        return 0;
    };
    let here = &windows[at];
    let Some(next) = windows.get(at + 1) else {
        return here.start + here.requests;
    };
    let span = (next.time_s - here.time_s).max(1e-9);
    let share = ((time_s - here.time_s) / span).clamp(0.0, 1.0);
    here.start + (share * (next.start - here.start) as f64) as u64
}

/// Writes the plot of a cache-aside run (`cacheaside`): hit ratio, mean and p99 latency per
/// window of requests, with the events marked.
pub fn plot_cache_aside(
    report: &crate::cacheaside::CacheAsideReport,
    directory: &Path,
) -> Result<Vec<PathBuf>, BenchError> {
    let thousands = |start: u64| start as f64 / 1e3;
    let windows = &report.per_request;
    let markers: Vec<f64> = report
        .events
        .iter()
        .map(|event| thousands(request_index_at(windows, event.sent_s)))
        .collect();
    let x_desc = format!(
        "requests (thousands; windows of {})",
        report.window_requests
    );
    let panels = [
        Panel {
            title: format!(
                "{} via {}: hit ratio per {} requests",
                report.workload, report.server, report.window_requests
            ),
            x_desc: x_desc.clone(),
            y_desc: "hit ratio".into(),
            lines: vec![Line {
                name: "hit ratio".into(),
                points: windows
                    .iter()
                    .map(|w| (thousands(w.start), w.hit_ratio))
                    .collect(),
            }],
            markers: markers.clone(),
            ..Panel::default()
        },
        Panel {
            title: format!(
                "latency per {} requests (database {} ms)",
                report.window_requests, report.db_latency_ms
            ),
            x_desc,
            y_desc: "latency".into(),
            latency: true,
            lines: vec![
                Line {
                    name: "mean".into(),
                    points: windows
                        .iter()
                        .map(|w| (thousands(w.start), w.mean_us.max(0.1)))
                        .collect(),
                },
                Line {
                    name: "p99".into(),
                    points: windows
                        .iter()
                        .map(|w| (thousands(w.start), w.p99_us.max(0.1)))
                        .collect(),
                },
            ],
            markers,
            ..Panel::default()
        },
    ];
    plot_panels(directory, "cacheaside", &panels)
}

#[cfg(test)]
mod tests {
    use super::{latency_label, plot_run, plot_sweep};
    use crate::class::{Class, ClassHistograms, ClassSet};
    use crate::report::{ClassSummary, RunReport, SecondSample, SweepReport};
    use crate::workload::OpKind;

    fn synthetic_report(rate: f64) -> RunReport {
        let mut histograms = ClassHistograms::default();
        for value in 1..=2_000u64 {
            let classes = ClassSet::for_request(OpKind::Get, 1, value % 3_000, 1_499, 50);
            histograms.record(classes, value * 1_000);
        }
        let mut report = RunReport {
            workload: "synthetic".into(),
            target_rps: rate,
            achieved_rps: rate,
            ..RunReport::default()
        };
        for class in Class::ALL {
            report.classes.insert(
                class.name().to_string(),
                ClassSummary::from_histogram(histograms.get(class), true),
            );
        }
        report.timeseries = (0..3)
            .map(|second| SecondSample {
                second,
                throughput_rps: rate,
                p99_us: 100.0 + second as f64,
                ..SecondSample::default()
            })
            .collect();
        report
    }

    #[test]
    fn run_and_sweep_plots_are_written_as_svg_and_png() {
        let directory = std::env::temp_dir().join(format!("tailtrim-plot-{}", std::process::id()));
        let written = plot_run(&synthetic_report(1_000.0), &directory)
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(written.len(), 4);
        let sweep =
            SweepReport::from_points(vec![synthetic_report(1_000.0), synthetic_report(2_000.0)]);
        let written_sweep =
            plot_sweep(&sweep, &directory).unwrap_or_else(|error| panic!("{error}"));
        for path in written.iter().chain(&written_sweep) {
            let size = std::fs::metadata(path).map(|meta| meta.len()).unwrap_or(0);
            assert!(size > 1_000, "{} is {size} bytes", path.display());
        }
        let svg = std::fs::read_to_string(directory.join("percentiles.svg")).unwrap_or_default();
        assert!(svg.contains("small") && svg.contains("large") && svg.contains("99.9%"));
        let _ = std::fs::remove_dir_all(&directory);
    }

    #[test]
    fn latency_labels_pick_units() {
        assert_eq!(latency_label(&250.0), "250 µs");
        assert_eq!(latency_label(&2_500.0), "2.5 ms");
        assert_eq!(latency_label(&3_000_000.0), "3 s");
    }

    #[test]
    fn latency_vs_throughput_writes_both_files_and_skips_empty_curves() {
        let directory =
            std::env::temp_dir().join(format!("tailtrim-plot-test-{}", std::process::id()));
        let plot = super::LatencyThroughput {
            caption: "test".into(),
            y_desc: "p99".into(),
            x_max: 3_000.0,
            curves: vec![
                super::Curve {
                    name: "curve-alpha".into(),
                    color: Some((214, 39, 40)),
                    points: vec![(1_000.0, 120.0), (2_000.0, 0.0), (2_900.0, 4_000.0)],
                },
                super::Curve {
                    name: "nothing measured".into(),
                    color: None,
                    points: vec![(1_000.0, 0.0)],
                },
            ],
        };
        let written = super::plot_latency_vs_throughput(&directory, "curve", &plot)
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(written.len(), 2);
        let svg = std::fs::read_to_string(directory.join("curve.svg")).unwrap_or_default();
        assert!(svg.contains("curve-alpha"), "the curve's legend is drawn");
        assert!(
            !svg.contains("nothing measured"),
            "an empty curve is left out"
        );
        assert!(directory.join("curve.png").is_file());
        let _ = std::fs::remove_dir_all(&directory);
    }
}
