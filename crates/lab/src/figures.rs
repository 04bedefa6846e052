//! Figures, the one place the project draws: every experiment, the bench and the simulator
//! draw through it, as SVG (and PNG where the bench writes both).
//!
//! ```text
//!   line charts on labelled axes          (this file)
//!     plot_latency_vs_throughput(dir, stem, &LatencyThroughput { curves: [Curve] })
//!     plot_panels(dir, name, &[Panel { lines: [Line], markers }])   stacked panels
//!       (plot_panels_file: one SVG or PNG of a given size; a Line of markers only is a scatter)
//!     plot_run / plot_sweep / plot_cache_aside                      the bench's reports
//!   bar charts                            bars::draw_bars(area, title, x, groups, labels, y)
//!   what a series is drawn as             series::{PALETTE, system_color, LatencyClass}
//!   a failed drawing as an error message  drawing_failed(&error)
//! ```
//!
//! [`plot_latency_vs_throughput`] is the one routine every sweep, experiment and simulator
//! figure of that kind is drawn with; a system keeps its colour across figures through
//! [`system_color`].
//!
//! Every axis is labelled at ticks chosen from the data (not left to plotters): the lowest
//! label is at most the smallest value drawn and the highest at least the largest, on log
//! axes too (1-2-5-style ticks, denser when the data spans little). Series differ in color,
//! line dash and (hollow) marker shape, so lines drawn on top of each other stay apart.

use std::ops::Range;
use std::path::{Path, PathBuf};

use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::combinators::{IntoLogRange, LogCoord};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::{Drawable, PointCollection};
use plotters::prelude::{
    BitMapBackend, ChartBuilder, Color, DrawingArea, DrawingBackend, IntoDrawingArea, LineSeries,
    SVGBackend, ShapeStyle, BLACK, WHITE,
};
use plotters::style::RGBColor;
use plotters_backend::{BackendCoord, DrawingErrorKind};

use tailtrim_bench::class::Class;
use tailtrim_bench::report::{RunReport, SweepReport};

use crate::LabError;

pub mod bars;
pub mod series;

pub use bars::draw_bars;
pub use series::{drawing_failed, system_color, LatencyClass, PALETTE};

const SIZE: (u32, u32) = (900, 600);

fn plot_error(error: impl std::fmt::Display) -> LabError {
    LabError::Plot(error.to_string())
}

fn color(index: usize) -> RGBColor {
    let (red, green, blue) = PALETTE[index % PALETTE.len()];
    RGBColor(red, green, blue)
}

/// The smallest and largest positive finite value (`None` when there is none).
fn positive_extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (low, high) = values
        .filter(|value| value.is_finite() && *value > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(low, high), value| {
            (low.min(value), high.max(value))
        });
    low.is_finite().then_some((low, high))
}

/// The smallest and largest finite value (`None` when there is none).
fn finite_extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (low, high) = values
        .filter(|value| value.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), value| {
            (low.min(value), high.max(value))
        });
    low.is_finite().then_some((low, high))
}

/// An axis whose labelled ticks enclose the data: the range drawn, and the values labelled.
#[derive(Clone, Debug, PartialEq)]
struct Axis {
    /// The drawn range: a little beyond the outermost ticks, so their labels are drawn.
    range: Range<f64>,
    /// Labelled ticks, ascending; the first is at most the data's minimum, the last at least
    /// its maximum.
    ticks: Vec<f64>,
    /// Unlabelled grid lines.
    minor: Vec<f64>,
}

/// Most labelled ticks an axis gets.
const MAX_TICKS: usize = 9;

/// Mantissas of the ticks of a logarithmic axis, densest first.
const LOG_MANTISSAS: [&[f64]; 5] = [
    &[1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0],
    &[1.0, 1.5, 2.0, 3.0, 5.0, 7.0],
    &[1.0, 2.0, 5.0],
    &[1.0, 3.0],
    &[1.0],
];

/// Rounds away the binary noise of `mantissa * 10^exponent` (e.g. 0.30000000000000004).
fn tidy(value: f64) -> f64 {
    if value == 0.0 || !value.is_finite() {
        return value;
    }
    let digits = 12 - value.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits.clamp(-300, 300));
    (value * scale).round() / scale
}

/// Ticks `mantissa * 10^k` (every `decade_step` decades) from the largest at most `low` to
/// the smallest at least `high`.
fn log_ticks(low: f64, high: f64, mantissas: &[f64], decade_step: i32) -> Vec<f64> {
    let first_decade = low.log10().floor() as i32 - 1;
    let first_decade = first_decade - first_decade.rem_euclid(decade_step);
    let mut candidates = Vec::new();
    let mut decade = first_decade;
    while candidates.last().is_none_or(|last: &f64| *last < high) && decade < 400 {
        for mantissa in mantissas {
            candidates.push(tidy(mantissa * 10f64.powi(decade)));
        }
        decade += decade_step;
    }
    let below = candidates
        .iter()
        .rposition(|tick| *tick <= low)
        .unwrap_or(0);
    let above = candidates
        .iter()
        .position(|tick| *tick >= high)
        .unwrap_or(candidates.len() - 1);
    let above = if above == below {
        (above + 1).min(candidates.len() - 1)
    } else {
        above
    };
    candidates[below..=above].to_vec()
}

/// A logarithmic axis over the positive `values` (1 to 10 when there is none): the densest
/// ticks of [`LOG_MANTISSAS`] (then whole decades) that take at most [`MAX_TICKS`] labels.
fn log_axis(values: impl Iterator<Item = f64>) -> Axis {
    let (low, high) = positive_extent(values).unwrap_or((1.0, 10.0));
    let mut ticks = Vec::new();
    for mantissas in LOG_MANTISSAS {
        ticks = log_ticks(low, high, mantissas, 1);
        if ticks.len() <= MAX_TICKS {
            break;
        }
    }
    let mut decade_step = 2;
    while ticks.len() > MAX_TICKS {
        ticks = log_ticks(low, high, &[1.0], decade_step);
        decade_step += 1;
    }
    let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
    let pad = (last / first).powf(0.03);
    let range = first / pad..last * pad;
    let minor = if (last / first).log10() <= 4.0 {
        log_ticks(
            range.start,
            range.end,
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
            1,
        )
        .into_iter()
        .filter(|tick| range.contains(tick))
        .collect()
    } else {
        Vec::new()
    };
    Axis {
        range,
        ticks,
        minor,
    }
}

/// A linear axis over `values` (from zero when `from_zero`): ticks every 1, 2, 2.5 or 5
/// times a power of ten, at most [`MAX_TICKS`] of them, the outermost enclosing the data.
fn linear_axis(values: impl Iterator<Item = f64>, from_zero: bool) -> Axis {
    let (mut low, mut high) = finite_extent(values).unwrap_or((0.0, 1.0));
    if from_zero {
        low = low.min(0.0);
        high = high.max(0.0);
    }
    if high - low < 1e-9 * high.abs().max(1.0) {
        let spread = (high.abs() * 0.05).max(1e-3);
        if !(from_zero && low >= 0.0) {
            low -= spread;
        }
        high += spread;
    }
    let rough = (high - low) / (MAX_TICKS - 1) as f64;
    let magnitude = 10f64.powi(rough.log10().floor() as i32);
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|factor| factor * magnitude)
        .find(|step| (((high - low) / step).ceil() as usize) < MAX_TICKS)
        .unwrap_or(10.0 * magnitude);
    let tolerance = step * 1e-9;
    let first = ((low + tolerance) / step).floor();
    let last = ((high - tolerance) / step).ceil();
    let ticks: Vec<f64> = (0..=(last - first) as i64)
        .map(|index| tidy((first + index as f64) * step))
        .collect();
    let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
    let pad = (last - first) * 0.03;
    let start = if from_zero && first == 0.0 {
        first
    } else {
        first - pad
    };
    Axis {
        range: start..last + pad,
        ticks,
        minor: Vec::new(),
    }
}

impl Axis {
    /// A linear coordinate with these ticks.
    fn linear(&self) -> TickedCoord<RangedCoordf64> {
        TickedCoord {
            inner: self.range.clone().into(),
            ticks: self.ticks.clone(),
            minor: self.minor.clone(),
        }
    }

    /// A logarithmic coordinate with these ticks.
    fn log(&self) -> TickedCoord<LogCoord<f64>> {
        TickedCoord {
            inner: self.range.clone().log_scale().into(),
            ticks: self.ticks.clone(),
            minor: self.minor.clone(),
        }
    }

    /// Label of a plain number on this axis: as many decimals as its ticks need.
    fn number_label(&self, value: &f64) -> String {
        let step = self
            .ticks
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .fold(f64::INFINITY, f64::min);
        let decimals = if step.is_finite() && step > 0.0 {
            (0..=9)
                .find(|decimals| {
                    let scaled = step * 10f64.powi(*decimals);
                    (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
                })
                .unwrap_or(9) as usize
        } else {
            3
        };
        format!("{value:.decimals$}")
    }
}

/// A coordinate labelled at given ticks (grid lines at `minor`), whatever the number of
/// labels plotters would choose.
struct TickedCoord<Inner> {
    inner: Inner,
    ticks: Vec<f64>,
    minor: Vec<f64>,
}

impl<Inner: Ranged<ValueType = f64>> Ranged for TickedCoord<Inner> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.minor.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

/// How a series looks: color, line dash and marker shape, so series drawn on top of each
/// other stay apart (a hidden line still shows its markers, and the legend tells them apart
/// without color).
#[derive(Clone, Copy, Debug)]
struct SeriesStyle {
    color: RGBColor,
    /// `(dash, gap)` in pixels; `None`: solid.
    dash: Option<(i32, i32)>,
    marker: Marker,
    /// The points joined by a line (`false`: markers alone, a scatter).
    joined: bool,
}

/// A chart on cartesian coordinates, as the drawing routines receive it.
type Chart<'a, DB, X, Y> = plotters::chart::ChartContext<'a, DB, Cartesian2d<X, Y>>;

/// Marker shapes, drawn hollow so markers on one spot all show.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Marker {
    Circle,
    Triangle,
    Square,
    Cross,
    Diamond,
}

const MARKERS: [Marker; 5] = [
    Marker::Circle,
    Marker::Triangle,
    Marker::Square,
    Marker::Cross,
    Marker::Diamond,
];

const DASHES: [Option<(i32, i32)>; 4] = [None, Some((10, 5)), Some((3, 4)), Some((16, 4))];

/// Marker size (pixels across).
const MARKER_SIZE: i32 = 9;

impl SeriesStyle {
    /// The `index`-th series' style, in `color`.
    fn nth(index: usize, color: RGBColor) -> Self {
        Self {
            color,
            dash: DASHES[index % DASHES.len()],
            marker: MARKERS[index % MARKERS.len()],
            joined: true,
        }
    }

    fn stroke(&self) -> ShapeStyle {
        self.color.stroke_width(2)
    }
}

/// What a series draws at one place: its marker at a data point, or its legend entry (a
/// stretch of the series' line, dashed like it, with the marker on it; the marker alone for a
/// series of markers alone).
struct Glyph<Coord> {
    at: Coord,
    style: SeriesStyle,
    legend: bool,
}

impl<Coord> Glyph<Coord> {
    fn marker(at: Coord, style: SeriesStyle) -> Self {
        Self {
            at,
            style,
            legend: false,
        }
    }

    fn legend(at: Coord, style: SeriesStyle) -> Self {
        Self {
            at,
            style,
            legend: true,
        }
    }
}

impl<'a, Coord> PointCollection<'a, Coord> for &'a Glyph<Coord> {
    type Point = &'a Coord;
    type IntoIter = std::iter::Once<&'a Coord>;

    fn point_iter(self) -> Self::IntoIter {
        std::iter::once(&self.at)
    }
}

/// Length of a legend entry's stretch of line (pixels).
const LEGEND_LINE: i32 = 28;

impl<Coord, DB: DrawingBackend> Drawable<DB> for Glyph<Coord> {
    fn draw<I: Iterator<Item = BackendCoord>>(
        &self,
        mut points: I,
        backend: &mut DB,
        _: (u32, u32),
    ) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
        let Some((x, y)) = points.next() else {
            return Ok(());
        };
        if !self.legend {
            return draw_marker(backend, (x, y), &self.style);
        }
        let stroke = self.style.stroke();
        let (dash, gap) = self.style.dash.unwrap_or((LEGEND_LINE, 0));
        let mut start = if self.style.joined { 0 } else { LEGEND_LINE };
        while start < LEGEND_LINE {
            let end = (start + dash).min(LEGEND_LINE);
            backend.draw_line((x + start, y), (x + end, y), &stroke)?;
            start = end + gap;
        }
        draw_marker(backend, (x + LEGEND_LINE / 2, y), &self.style)
    }
}

fn draw_marker<DB: DrawingBackend>(
    backend: &mut DB,
    (x, y): BackendCoord,
    style: &SeriesStyle,
) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
    let stroke = style.stroke();
    let half = MARKER_SIZE / 2;
    match style.marker {
        Marker::Circle => backend.draw_circle((x, y), half as u32, &stroke, false),
        Marker::Square => {
            backend.draw_rect((x - half, y - half), (x + half, y + half), &stroke, false)
        }
        Marker::Triangle => backend.draw_path(
            [
                (x, y - half - 1),
                (x + half + 1, y + half),
                (x - half - 1, y + half),
                (x, y - half - 1),
            ],
            &stroke,
        ),
        Marker::Cross => {
            backend.draw_line((x - half, y - half), (x + half, y + half), &stroke)?;
            backend.draw_line((x - half, y + half), (x + half, y - half), &stroke)
        }
        Marker::Diamond => backend.draw_path(
            [
                (x, y - half - 1),
                (x + half + 1, y),
                (x, y + half + 1),
                (x - half - 1, y),
                (x, y - half - 1),
            ],
            &stroke,
        ),
    }
}

/// Draws `points` as a line in `style` (with markers when `with_markers`; markers alone when
/// the style is not joined), with its legend entry `name` (none when empty).
fn draw_styled_series<'a, DB, X, Y>(
    chart: &mut Chart<'a, DB, X, Y>,
    name: &str,
    points: &[(f64, f64)],
    style: SeriesStyle,
    with_markers: bool,
) -> Result<(), LabError>
where
    DB: DrawingBackend + 'a,
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    if !style.joined {
        let annotation = chart
            .draw_series(points.iter().map(|point| Glyph::marker(*point, style)))
            .map_err(plot_error)?;
        if !name.is_empty() {
            annotation
                .label(name)
                .legend(move |at| Glyph::legend(at, style));
        }
        return Ok(());
    }
    let annotation = match style.dash {
        None => chart
            .draw_series(LineSeries::new(points.to_vec(), style.stroke()))
            .map_err(plot_error)?,
        Some((dash, gap)) => chart
            .draw_series(plotters::series::DashedLineSeries::new(
                points.to_vec(),
                dash,
                gap,
                style.stroke(),
            ))
            .map_err(plot_error)?,
    };
    if !name.is_empty() {
        annotation
            .label(name)
            .legend(move |at| Glyph::legend(at, style));
    }
    if with_markers {
        chart
            .draw_series(points.iter().map(|point| Glyph::marker(*point, style)))
            .map_err(plot_error)?;
    }
    Ok(())
}

/// Writes `name.svg` and `name.png` in `directory`, `size` pixels, both drawn by
/// `draw(&root, arguments…)` (one drawing routine, generic over the backend).
macro_rules! write_both {
    ($directory:expr, $name:expr, $size:expr, $draw:ident($($argument:expr),*)) => {
        write_both(
            $directory,
            $name,
            $size,
            |root| $draw(&root, $($argument),*),
            |root| $draw(&root, $($argument),*),
        )
    };
}

/// Writes `name.svg` and `name.png` in `directory` with `draw_svg` and `draw_png`.
fn write_both(
    directory: &Path,
    name: &str,
    size: (u32, u32),
    draw_svg: impl Fn(DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), LabError>,
    draw_png: impl Fn(DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), LabError>,
) -> Result<Vec<PathBuf>, LabError> {
    std::fs::create_dir_all(directory).map_err(|source| LabError::Io {
        context: format!("creating {}", directory.display()),
        source,
    })?;
    let svg = directory.join(format!("{name}.svg"));
    let png = directory.join(format!("{name}.png"));
    draw_svg(SVGBackend::new(&svg, size).into_drawing_area())?;
    draw_png(BitMapBackend::new(&png, size).into_drawing_area())?;
    Ok(vec![svg, png])
}

/// Writes the plots of one run (`percentiles`, `timeseries`) into `directory`.
pub fn plot_run(report: &RunReport, directory: &Path) -> Result<Vec<PathBuf>, LabError> {
    let mut written = write_both!(
        directory,
        "percentiles",
        percentiles_size(report),
        draw_percentiles(report)
    )?;
    if !report.timeseries.is_empty() {
        written.extend(write_both!(
            directory,
            "timeseries",
            SIZE,
            draw_timeseries(report)
        )?);
    }
    Ok(written)
}

/// Writes the latency-versus-throughput plot of a sweep (`sweep`) into `directory`.
pub fn plot_sweep(sweep: &SweepReport, directory: &Path) -> Result<Vec<PathBuf>, LabError> {
    type Pick = fn(&tailtrim_bench::report::CurvePoint) -> f64;
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

/// Each class's percentile curve (`(nines, µs)`), classes without requests left out.
fn class_curves(report: &RunReport) -> Vec<(Class, Vec<(f64, f64)>)> {
    Class::ALL
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
        .collect()
}

/// Columns of the percentile figure's grid of panels.
const PERCENTILE_COLUMNS: usize = 2;

/// The percentile figure's size: 300 pixels of height per row of panels (600 at least).
fn percentiles_size(report: &RunReport) -> (u32, u32) {
    let rows = class_curves(report)
        .len()
        .div_ceil(PERCENTILE_COLUMNS)
        .max(1);
    (1100, (60 + 300 * rows as u32).max(SIZE.1))
}

/// One panel per class (classes often coincide: every request of a workload may be small and
/// a GET), each with `all` drawn in grey behind it, on the same axes.
fn draw_percentiles<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &RunReport,
) -> Result<(), LabError> {
    root.fill(&WHITE).map_err(plot_error)?;
    let classes = class_curves(report);
    let latency = log_axis(
        classes
            .iter()
            .flat_map(|(_, points)| points.iter().map(|p| p.1)),
    );
    let percentile = nines_axis(
        classes
            .iter()
            .flat_map(|(_, points)| points.iter().map(|p| p.0)),
    );
    let title = format!(
        "{}: latency percentiles at {:.0} rps (achieved {:.0})",
        report.workload, report.target_rps, report.achieved_rps
    );
    let body = root
        .titled(&title, ("sans-serif", 20))
        .map_err(plot_error)?;
    let rows = classes.len().div_ceil(PERCENTILE_COLUMNS).max(1);
    let areas = body.split_evenly((rows, PERCENTILE_COLUMNS));
    let reference = classes
        .iter()
        .find(|(class, _)| *class == Class::All)
        .map(|(_, points)| points.clone());
    let reference_style = SeriesStyle {
        color: RGBColor(170, 170, 170),
        dash: None,
        marker: Marker::Circle,
        joined: true,
    };
    for (index, ((class, points), area)) in classes.iter().zip(areas.iter()).enumerate() {
        let caption = if *class == Class::All || reference.is_none() {
            format!("{} ({} requests)", class.name(), report.class(*class).count)
        } else {
            format!(
                "{} ({} requests; grey: all)",
                class.name(),
                report.class(*class).count
            )
        };
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 15))
            .margin(8)
            .margin_right(30)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(percentile.log(), latency.log())
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("percentile")
            .y_desc("latency (log scale)")
            .y_label_formatter(&latency_label)
            .x_label_formatter(&|x| format!("{}%", trim_percent(100.0 * (1.0 - 1.0 / x))))
            .draw()
            .map_err(plot_error)?;
        if let (Some(all), false) = (&reference, *class == Class::All) {
            draw_styled_series(&mut chart, "", all, reference_style, false)?;
        }
        let style = SeriesStyle {
            dash: None,
            ..SeriesStyle::nth(index, color(index))
        };
        draw_styled_series(&mut chart, "", points, style, true)?;
    }
    root.present().map_err(plot_error)
}

/// The percentile axis (`1 / (1 - p)`, see [`nines`]): a tick at every nine (0 %, 90 %,
/// 99 %, ...) up to the first at least the highest percentile drawn.
fn nines_axis(values: impl Iterator<Item = f64>) -> Axis {
    let highest = values
        .filter(|value| value.is_finite() && *value >= 1.0)
        .fold(10.0f64, f64::max);
    let decades = highest.log10().ceil().max(1.0) as i32;
    let ticks: Vec<f64> = (0..=decades).map(|decade| 10f64.powi(decade)).collect();
    let last = ticks[ticks.len() - 1];
    let pad = last.powf(0.02);
    Axis {
        range: 1.0 / pad..last * pad,
        ticks,
        minor: Vec::new(),
    }
}

fn trim_percent(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn draw_timeseries<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    report: &RunReport,
) -> Result<(), LabError> {
    root.fill(&WHITE).map_err(plot_error)?;
    let (top, bottom) = root.split_vertically(SIZE.1 / 2);
    let seconds = report.timeseries.len().max(1) as f64;
    let time = linear_axis([0.0, seconds].into_iter(), true);
    let throughput: Vec<(f64, f64)> = report
        .timeseries
        .iter()
        .map(|sample| (sample.second as f64 + 0.5, sample.throughput_rps))
        .collect();
    let rate = linear_axis(
        throughput
            .iter()
            .map(|point| point.1)
            .chain([report.target_rps]),
        true,
    );
    let mut upper = ChartBuilder::on(&top)
        .caption(
            format!(
                "{}: throughput per second (target {:.0} rps)",
                report.workload, report.target_rps
            ),
            ("sans-serif", 18),
        )
        .margin(10)
        .margin_right(25)
        .x_label_area_size(35)
        .y_label_area_size(80)
        .build_cartesian_2d(time.linear(), rate.linear())
        .map_err(plot_error)?;
    upper
        .configure_mesh()
        .x_desc("second")
        .y_desc("replies/s")
        .x_label_formatter(&|value| time.number_label(value))
        .y_label_formatter(&rate_label)
        .draw()
        .map_err(plot_error)?;
    draw_styled_series(
        &mut upper,
        "",
        &throughput,
        SeriesStyle::nth(0, color(0)),
        true,
    )?;
    let p99: Vec<(f64, f64)> = report
        .timeseries
        .iter()
        .map(|sample| (sample.second as f64 + 0.5, sample.p99_us.max(0.1)))
        .collect();
    let latency = log_axis(p99.iter().map(|point| point.1));
    let mut lower = ChartBuilder::on(&bottom)
        .caption(
            "p99 latency of requests scheduled in each second",
            ("sans-serif", 18),
        )
        .margin(10)
        .margin_right(25)
        .x_label_area_size(35)
        .y_label_area_size(80)
        .build_cartesian_2d(time.linear(), latency.log())
        .map_err(plot_error)?;
    lower
        .configure_mesh()
        .x_desc("second")
        .y_desc("p99 (log scale)")
        .x_label_formatter(&|value| time.number_label(value))
        .y_label_formatter(&latency_label)
        .draw()
        .map_err(plot_error)?;
    draw_styled_series(&mut lower, "", &p99, SeriesStyle::nth(0, color(1)), true)?;
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
) -> Result<Vec<PathBuf>, LabError> {
    write_both!(directory, stem, SIZE, draw_latency_vs_throughput(plot))
}

fn draw_latency_vs_throughput<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    plot: &LatencyThroughput,
) -> Result<(), LabError> {
    root.fill(&WHITE).map_err(plot_error)?;
    type Drawn = (String, SeriesStyle, Vec<(f64, f64)>);
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
                |(red, green, blue)| RGBColor(red, green, blue),
            );
            (curve.name.clone(), SeriesStyle::nth(index, rgb), points)
        })
        .filter(|(_, _, points)| !points.is_empty())
        .collect();
    let latency = log_axis(
        curves
            .iter()
            .flat_map(|(_, _, points)| points.iter().map(|point| point.1)),
    );
    let rate = linear_axis(
        curves
            .iter()
            .flat_map(|(_, _, points)| points.iter().map(|point| point.0))
            .chain([plot.x_max.max(1.0)]),
        true,
    );
    let mut chart = ChartBuilder::on(root)
        .caption(&plot.caption, ("sans-serif", 20))
        .margin(15)
        .margin_right(30)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(rate.linear(), latency.log())
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("achieved throughput (requests/s)")
        .x_label_formatter(&rate_label)
        .y_desc(format!("{} (log scale)", plot.y_desc))
        .y_label_formatter(&latency_label)
        .draw()
        .map_err(plot_error)?;
    for (name, style, points) in &curves {
        draw_styled_series(&mut chart, name, points, *style, true)?;
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
    /// Markers at the points and no line between them (a scatter).
    pub markers_only: bool,
}

impl Line {
    /// A line through `points`, labelled `name`.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            markers_only: false,
        }
    }

    /// Markers at `points` alone (a scatter), labelled `name`.
    pub fn scatter(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            markers_only: true,
            ..Self::new(name, points)
        }
    }
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
) -> Result<Vec<PathBuf>, LabError> {
    write_both!(directory, name, SIZE, draw_panels(panels))
}

/// Writes `path`, `size` pixels: the panels stacked vertically (as [`plot_panels`] draws
/// them), PNG if its name ends in `.png`, SVG otherwise.
pub fn plot_panels_file(path: &Path, size: (u32, u32), panels: &[Panel]) -> Result<(), LabError> {
    let is_png = path
        .extension()
        .is_some_and(|extension| extension.eq_ignore_ascii_case("png"));
    if is_png {
        draw_panels(&BitMapBackend::new(path, size).into_drawing_area(), panels)
    } else {
        draw_panels(&SVGBackend::new(path, size).into_drawing_area(), panels)
    }
}

fn draw_panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    panels: &[Panel],
) -> Result<(), LabError> {
    root.fill(&WHITE).map_err(plot_error)?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (area, panel) in areas.iter().zip(panels) {
        let horizontal = linear_axis(
            panel
                .lines
                .iter()
                .flat_map(|line| line.points.iter().map(|p| p.0))
                .chain([1.0]),
            true,
        );
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
            .margin_right(25)
            .x_label_area_size(35)
            .y_label_area_size(80);
        let x_label = |value: &f64| horizontal.number_label(value);
        if panel.log_y {
            let vertical = log_axis(ys());
            let mut chart = builder
                .build_cartesian_2d(horizontal.linear(), vertical.log())
                .map_err(plot_error)?;
            let number_label = |value: &f64| trim_percent(*value);
            draw_panel_contents(&mut chart, panel, &x_label, &number_label, &vertical)?;
        } else {
            let vertical = linear_axis(ys(), false);
            let mut chart = builder
                .build_cartesian_2d(horizontal.linear(), vertical.linear())
                .map_err(plot_error)?;
            let number_label = |value: &f64| vertical.number_label(value);
            draw_panel_contents(&mut chart, panel, &x_label, &number_label, &vertical)?;
        }
    }
    root.present().map_err(plot_error)
}

/// Draws a panel on `chart`, whatever the scale of its vertical axis: the mesh (y labels as
/// latencies, or by `number_label`), the event markers across `vertical` and the lines.
fn draw_panel_contents<'a, DB, Y>(
    chart: &mut Chart<'a, DB, TickedCoord<RangedCoordf64>, TickedCoord<Y>>,
    panel: &Panel,
    x_label: &dyn Fn(&f64) -> String,
    number_label: &dyn Fn(&f64) -> String,
    vertical: &Axis,
) -> Result<(), LabError>
where
    DB: DrawingBackend + 'a,
    Y: Ranged<ValueType = f64>,
{
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(&panel.x_desc)
        .y_desc(&panel.y_desc)
        .x_label_formatter(x_label);
    if panel.latency {
        mesh.y_label_formatter(&latency_label);
    } else {
        mesh.y_label_formatter(number_label);
    }
    mesh.draw().map_err(plot_error)?;
    draw_event_markers(chart, &panel.markers, &vertical.range)?;
    draw_lines(chart, &panel.lines)
}

/// Dashed-grey vertical lines at `markers`, across `vertical`.
fn draw_event_markers<'a, DB, X, Y>(
    chart: &mut Chart<'a, DB, X, Y>,
    markers: &[f64],
    vertical: &Range<f64>,
) -> Result<(), LabError>
where
    DB: DrawingBackend + 'a,
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    for marker in markers {
        chart
            .draw_series(LineSeries::new(
                vec![(*marker, vertical.start), (*marker, vertical.end)],
                BLACK.mix(0.5).stroke_width(1),
            ))
            .map_err(plot_error)?;
    }
    Ok(())
}

/// Lines of at most this many points get markers (more would hide the line).
const MARKED_LINE_POINTS: usize = 60;

fn draw_lines<'a, DB, X, Y>(chart: &mut Chart<'a, DB, X, Y>, lines: &[Line]) -> Result<(), LabError>
where
    DB: DrawingBackend + 'a,
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    for (index, line) in lines.iter().enumerate() {
        let style = SeriesStyle {
            joined: !line.markers_only,
            ..SeriesStyle::nth(index, color(index))
        };
        let name = if line.name.is_empty() {
            " "
        } else {
            &line.name
        };
        draw_styled_series(
            chart,
            name,
            &line.points,
            style,
            line.points.len() <= MARKED_LINE_POINTS,
        )?;
    }
    if lines.len() > 1 || lines.iter().any(|line| !line.name.is_empty()) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
    }
    Ok(())
}

/// The (fractional) request index scheduled at `time_s`, interpolated between windows.
#[must_use]
pub fn request_index_at(windows: &[tailtrim_bench::cacheaside::WindowSample], time_s: f64) -> u64 {
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
    report: &tailtrim_bench::cacheaside::CacheAsideReport,
    directory: &Path,
) -> Result<Vec<PathBuf>, LabError> {
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
            lines: vec![Line::new(
                "hit ratio",
                windows
                    .iter()
                    .map(|w| (thousands(w.start), w.hit_ratio))
                    .collect(),
            )],
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
                Line::new(
                    "mean",
                    windows
                        .iter()
                        .map(|w| (thousands(w.start), w.mean_us.max(0.1)))
                        .collect(),
                ),
                Line::new(
                    "p99",
                    windows
                        .iter()
                        .map(|w| (thousands(w.start), w.p99_us.max(0.1)))
                        .collect(),
                ),
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
    use tailtrim_bench::class::{Class, ClassHistograms, ClassSet};
    use tailtrim_bench::report::{ClassSummary, RunReport, SecondSample, SweepReport};
    use tailtrim_bench::workload::OpKind;

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

    /// Ticks enclose `[low, high]`, sit inside the drawn range, ascend and are few.
    fn assert_encloses(axis: &super::Axis, low: f64, high: f64) {
        let ticks = &axis.ticks;
        assert!(
            ticks.len() >= 2 && ticks.len() <= super::MAX_TICKS,
            "{axis:?}"
        );
        assert!(
            ticks[0] <= low && ticks[ticks.len() - 1] >= high,
            "{axis:?}"
        );
        assert!(ticks.windows(2).all(|pair| pair[0] < pair[1]), "{axis:?}");
        assert!(
            ticks.iter().all(|tick| axis.range.contains(tick)),
            "{axis:?}"
        );
    }

    #[test]
    fn axes_enclose_narrow_wide_constant_and_empty_data() {
        for (low, high) in [
            (100.0, 102.0),
            (160.0, 5_300.0),
            (95.0, 4_200.0),
            (0.5, 0.5),
            (100.0, 100.0),
            (3.0, 2e9),
        ] {
            assert_encloses(&super::log_axis([low, high].into_iter()), low, high);
        }
        assert_encloses(&super::log_axis(std::iter::empty()), 1.0, 10.0);
        for (low, high, from_zero) in [
            (0.855, 0.985, false),
            (39_000.0, 40_600.0, true),
            (0.5, 0.5, false),
            (-3.0, 7.0, false),
            (0.0, 29.0, true),
            (0.0, 0.0, true),
        ] {
            let axis = super::linear_axis([low, high].into_iter(), from_zero);
            assert_encloses(&axis, low, high);
            if from_zero {
                assert_eq!(axis.ticks[0], 0.0);
            }
        }
        let hit_ratio = super::linear_axis([0.855, 0.985].into_iter(), false);
        assert_eq!(hit_ratio.number_label(&0.86), "0.86");
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
