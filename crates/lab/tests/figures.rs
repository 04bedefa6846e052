//! Every plot kind of the bench, drawn from fixed results as SVG and read back: every panel's
//! axes carry tick labels, and the labelled range of each axis encloses the data drawn on it
//! (the lowest label at most the smallest value, the highest at least the largest).

use std::path::{Path, PathBuf};

use tailtrim_bench::cacheaside::{CacheAsideReport, WindowSample};
use tailtrim_bench::report::{CurvePoint, CURVE_PERCENTILES};
use tailtrim_bench::{ClassSummary, RunReport, SecondSample, SweepReport};
use tailtrim_lab::figures::{
    plot_cache_aside, plot_latency_vs_throughput, plot_panels, plot_panels_file, plot_run,
    plot_sweep, Curve, LatencyThroughput, Line, Panel,
};

/// A text element of an SVG: its anchor, vertical offset and content.
#[derive(Debug)]
struct Text {
    anchor: String,
    dy: String,
    rotated: bool,
    content: String,
}

fn attribute(tag: &str, name: &str) -> String {
    let key = format!(" {name}=\"");
    tag.find(&key)
        .and_then(|start| {
            let rest = &tag[start + key.len()..];
            rest.find('"').map(|end| rest[..end].to_string())
        })
        .unwrap_or_default()
}

fn texts(svg: &str) -> Vec<Text> {
    let mut found = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text") {
        rest = &rest[start..];
        let Some(tag_end) = rest.find('>') else { break };
        let tag = &rest[..tag_end];
        let Some(close) = rest.find("</text>") else {
            break;
        };
        found.push(Text {
            anchor: attribute(tag, "text-anchor"),
            dy: attribute(tag, "dy"),
            rotated: tag.contains("rotate("),
            content: rest[tag_end + 1..close].trim().to_string(),
        });
        rest = &rest[close..];
    }
    found
}

/// Tick labels of one axis, in document order.
type Ticks = Vec<String>;

/// The runs of y-axis tick labels (right-aligned, beside the axis) and of x-axis tick labels
/// (centred, below it) in document order: one run per panel drawn.
fn tick_runs(svg: &str, is_tick: impl Fn(&str) -> bool) -> (Vec<Ticks>, Vec<Ticks>) {
    let (mut y_runs, mut x_runs) = (Vec::<Ticks>::new(), Vec::<Ticks>::new());
    let (mut y_run, mut x_run) = (Vec::new(), Vec::new());
    for text in texts(svg) {
        let y_tick = text.anchor == "end" && text.dy == "0.5ex";
        let x_tick = text.anchor == "middle"
            && text.dy == "0.76em"
            && !text.rotated
            && is_tick(&text.content);
        if y_tick {
            y_run.push(text.content.clone());
        } else if !y_run.is_empty() {
            y_runs.push(std::mem::take(&mut y_run));
        }
        if x_tick {
            x_run.push(text.content.clone());
        } else if !x_run.is_empty() {
            x_runs.push(std::mem::take(&mut x_run));
        }
    }
    for (run, runs) in [(y_run, &mut y_runs), (x_run, &mut x_runs)] {
        if !run.is_empty() {
            runs.push(run);
        }
    }
    (y_runs, x_runs)
}

/// `250 µs`, `2.5 ms`, `3 s` in microseconds.
fn latency(label: &str) -> Option<f64> {
    let (number, unit) = label.split_once(' ')?;
    let value: f64 = number.parse().ok()?;
    match unit {
        "µs" => Some(value),
        "ms" => Some(value * 1e3),
        "s" => Some(value * 1e6),
        _ => None,
    }
}

/// `40k` or `500` (requests per second).
fn rate(label: &str) -> Option<f64> {
    match label.strip_suffix('k') {
        Some(thousands) => thousands.parse::<f64>().ok().map(|value| value * 1e3),
        None => label.parse().ok(),
    }
}

/// `99.9%` as `1 / (1 - p)`, the percentile axis' coordinate.
fn nines(label: &str) -> Option<f64> {
    let percent: f64 = label.strip_suffix('%')?.parse().ok()?;
    Some(1.0 / (1.0 - percent / 100.0))
}

fn number(label: &str) -> Option<f64> {
    label.parse().ok()
}

/// Checks that `labels` parse with `parse` and enclose `[low, high]`.
fn assert_covers(
    figure: &str,
    axis: &str,
    labels: &[String],
    parse: fn(&str) -> Option<f64>,
    (low, high): (f64, f64),
) {
    assert!(
        labels.len() >= 2,
        "{figure}: the {axis} axis has {} tick label(s): {labels:?}",
        labels.len()
    );
    let values: Vec<f64> = labels
        .iter()
        .map(|label| {
            parse(label).unwrap_or_else(|| panic!("{figure}: {axis} label {label:?} unreadable"))
        })
        .collect();
    let lowest = values.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let slack = 1e-6 * high.abs().max(1.0);
    assert!(
        lowest <= low + slack && highest >= high - slack,
        "{figure}: the {axis} axis is labelled {lowest}..{highest} ({labels:?}) but its data \
         spans {low}..{high}"
    );
}

fn extent(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), value| {
        (low.min(value), high.max(value))
    })
}

fn scratch(name: &str) -> PathBuf {
    let directory =
        std::env::temp_dir().join(format!("tailtrim-plot-axes-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    directory
}

fn read(directory: &Path, file: &str) -> String {
    std::fs::read_to_string(directory.join(file))
        .unwrap_or_else(|error| panic!("reading {file}: {error}"))
}

/// A run whose classes' percentiles span 95 µs to 4.2 ms (`large` ends lower than `all`),
/// and whose per-second p99 stays within 100–102 µs (no power of ten inside).
fn fixed_run() -> RunReport {
    let mut report = RunReport {
        workload: "fixed".into(),
        target_rps: 40_000.0,
        achieved_rps: 39_800.0,
        ..RunReport::default()
    };
    for (class, scale) in [("all", 1.0), ("small", 1.0), ("large", 0.8), ("get", 1.0)] {
        let curve: Vec<[f64; 2]> = CURVE_PERCENTILES
            .iter()
            .enumerate()
            .map(|(index, percentile)| [*percentile, 95.0 * 1.2f64.powi(index as i32) * scale])
            .collect();
        let summary = ClassSummary {
            count: 1_000,
            curve,
            ..ClassSummary::default()
        };
        report.classes.insert(class.to_string(), summary);
    }
    report.timeseries = (0..5)
        .map(|second| SecondSample {
            second,
            throughput_rps: 39_000.0 + 400.0 * second as f64,
            p99_us: 100.0 + 0.5 * second as f64,
            ..SecondSample::default()
        })
        .collect();
    report
}

fn curve_values(report: &RunReport) -> impl Iterator<Item = [f64; 2]> + '_ {
    report
        .classes
        .values()
        .flat_map(|summary| summary.curve.iter().copied())
}

#[test]
fn percentiles_panels_label_both_axes_over_the_data() {
    let report = fixed_run();
    let directory = scratch("percentiles");
    plot_run(&report, &directory).unwrap_or_else(|error| panic!("{error}"));
    let svg = read(&directory, "percentiles.svg");
    let (y_runs, x_runs) = tick_runs(&svg, |label| nines(label).is_some());
    let latencies = extent(curve_values(&report).map(|[_, micros]| micros));
    let percentiles =
        extent(curve_values(&report).map(|[percentile, _]| 1.0 / (1.0 - percentile / 100.0)));
    assert!(
        !y_runs.is_empty() && y_runs.len() == x_runs.len(),
        "{y_runs:?} {x_runs:?}"
    );
    for labels in &y_runs {
        assert_covers("percentiles", "latency", labels, latency, latencies);
    }
    for labels in &x_runs {
        assert_covers("percentiles", "percentile", labels, nines, percentiles);
    }
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn timeseries_panels_label_both_axes_over_the_data() {
    let report = fixed_run();
    let directory = scratch("timeseries");
    plot_run(&report, &directory).unwrap_or_else(|error| panic!("{error}"));
    let svg = read(&directory, "timeseries.svg");
    let (y_runs, x_runs) = tick_runs(&svg, |label| number(label).is_some());
    assert_eq!(
        y_runs.len(),
        2,
        "two panels, each with y labels: {y_runs:?}"
    );
    assert_eq!(
        x_runs.len(),
        2,
        "two panels, each with x labels: {x_runs:?}"
    );
    let seconds = (0.5, report.timeseries.len() as f64 - 0.5);
    let throughput = extent(report.timeseries.iter().map(|sample| sample.throughput_rps));
    let p99 = extent(report.timeseries.iter().map(|sample| sample.p99_us));
    assert_covers("timeseries", "throughput", &y_runs[0], rate, throughput);
    assert_covers("timeseries", "p99", &y_runs[1], latency, p99);
    for labels in &x_runs {
        assert_covers("timeseries", "second", labels, number, seconds);
    }
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn sweep_labels_both_axes_over_the_data() {
    let point = |rate: f64, p50: f64, p999: f64| CurvePoint {
        target_rps: rate,
        achieved_rps: rate * 0.99,
        p50_us: p50,
        p99_us: p50 * 3.0,
        p999_us: p999,
        small_p99_us: p50 * 2.9,
        large_p99_us: p50 * 3.1,
        errors: 0,
    };
    let sweep = SweepReport {
        workload: "fixed".into(),
        server: "127.0.0.1:11211".into(),
        curve: vec![
            point(40_000.0, 160.0, 2_400.0),
            point(80_000.0, 190.0, 2_900.0),
            point(130_000.0, 260.0, 5_300.0),
        ],
        points: Vec::new(),
    };
    let directory = scratch("sweep");
    plot_sweep(&sweep, &directory).unwrap_or_else(|error| panic!("{error}"));
    let svg = read(&directory, "sweep.svg");
    let (y_runs, x_runs) = tick_runs(&svg, |label| rate(label).is_some());
    assert_eq!(
        (y_runs.len(), x_runs.len()),
        (1, 1),
        "{y_runs:?} {x_runs:?}"
    );
    let latencies = extent(sweep.curve.iter().flat_map(|point| {
        [
            point.p50_us,
            point.p99_us,
            point.p999_us,
            point.small_p99_us,
            point.large_p99_us,
        ]
    }));
    let rates = extent(sweep.curve.iter().map(|point| point.achieved_rps));
    assert_covers("sweep", "latency", &y_runs[0], latency, latencies);
    assert_covers("sweep", "throughput", &x_runs[0], rate, rates);
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn latency_vs_throughput_labels_both_axes_over_the_data() {
    let plot = LatencyThroughput {
        caption: "fixed".into(),
        y_desc: "small-request p99".into(),
        x_max: 20_000.0,
        curves: vec![
            Curve {
                name: "one".into(),
                color: None,
                points: vec![(5_000.0, 210.0), (10_000.0, 1_400.0), (19_000.0, 3_800.0)],
            },
            Curve {
                name: "two".into(),
                color: Some((214, 39, 40)),
                points: vec![(5_000.0, 290.0), (10_000.0, 900.0), (20_500.0, 600.0)],
            },
        ],
    };
    let directory = scratch("latency-throughput");
    plot_latency_vs_throughput(&directory, "curve", &plot)
        .unwrap_or_else(|error| panic!("{error}"));
    let svg = read(&directory, "curve.svg");
    let (y_runs, x_runs) = tick_runs(&svg, |label| rate(label).is_some());
    assert_eq!(
        (y_runs.len(), x_runs.len()),
        (1, 1),
        "{y_runs:?} {x_runs:?}"
    );
    let points = || plot.curves.iter().flat_map(|curve| curve.points.iter());
    assert_covers(
        "latency vs throughput",
        "latency",
        &y_runs[0],
        latency,
        extent(points().map(|point| point.1)),
    );
    assert_covers(
        "latency vs throughput",
        "throughput",
        &x_runs[0],
        rate,
        extent(points().map(|point| point.0)),
    );
    let _ = std::fs::remove_dir_all(&directory);
}

fn windows() -> Vec<WindowSample> {
    (0..30u64)
        .map(|index| WindowSample {
            start: index * 1_000,
            time_s: index as f64,
            requests: 1_000,
            hit_ratio: if index < 15 {
                0.985
            } else {
                0.855 + index as f64 * 0.004
            },
            mean_us: 410.0 + 40.0 * (index % 7) as f64,
            p99_us: 1_900.0 + 100.0 * (index % 5) as f64,
            ..WindowSample::default()
        })
        .collect()
}

#[test]
fn cache_aside_panels_label_both_axes_over_the_data() {
    let report = CacheAsideReport {
        workload: "fixed".into(),
        server: "127.0.0.1:22122".into(),
        window_requests: 1_000,
        per_request: windows(),
        ..CacheAsideReport::default()
    };
    let directory = scratch("cacheaside");
    plot_cache_aside(&report, &directory).unwrap_or_else(|error| panic!("{error}"));
    let svg = read(&directory, "cacheaside.svg");
    let (y_runs, x_runs) = tick_runs(&svg, |label| number(label).is_some());
    assert_eq!(
        (y_runs.len(), x_runs.len()),
        (2, 2),
        "{y_runs:?} {x_runs:?}"
    );
    let windows = &report.per_request;
    let thousands = extent(windows.iter().map(|w| w.start as f64 / 1e3));
    assert_covers(
        "cacheaside",
        "hit ratio",
        &y_runs[0],
        number,
        extent(windows.iter().map(|w| w.hit_ratio)),
    );
    assert_covers(
        "cacheaside",
        "latency",
        &y_runs[1],
        latency,
        extent(windows.iter().flat_map(|w| [w.mean_us, w.p99_us])),
    );
    for labels in &x_runs {
        assert_covers("cacheaside", "requests", labels, number, thousands);
    }
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn log_panels_label_both_axes_over_the_data() {
    let panels = [Panel {
        title: "fixed".into(),
        x_desc: "seconds".into(),
        y_desc: "p99".into(),
        log_y: true,
        latency: true,
        lines: vec![Line::new(
            "p99",
            vec![(0.0, 95.0), (1.0, 600.0), (2.0, 4_200.0)],
        )],
        markers: vec![1.0],
    }];
    let directory = scratch("panels");
    plot_panels(&directory, "panels", &panels).unwrap_or_else(|error| panic!("{error}"));
    let svg = read(&directory, "panels.svg");
    let (y_runs, x_runs) = tick_runs(&svg, |label| number(label).is_some());
    assert_eq!(
        (y_runs.len(), x_runs.len()),
        (1, 1),
        "{y_runs:?} {x_runs:?}"
    );
    assert_covers("panels", "p99", &y_runs[0], latency, (95.0, 4_200.0));
    assert_covers("panels", "seconds", &x_runs[0], number, (0.0, 2.0));
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn a_scatter_draws_markers_and_no_line() {
    let points = vec![(1.0, 10.0), (2.0, 30.0), (3.0, 20.0)];
    let panel = |line: Line| Panel {
        title: "scatter".into(),
        x_desc: "x".into(),
        y_desc: "y".into(),
        lines: vec![line],
        ..Panel::default()
    };
    let directory = scratch("scatter");
    std::fs::create_dir_all(&directory).unwrap_or_else(|error| panic!("{error}"));
    let drawn = |file: &str, line: Line| {
        plot_panels_file(&directory.join(file), (600, 400), &[panel(line)])
            .unwrap_or_else(|error| panic!("{error}"));
        read(&directory, file)
    };
    // The first series' colour and marker (a hollow circle): one per point, one in the legend.
    let series_color = "#1F77B4";
    let joined = drawn("joined.svg", Line::new("p", points.clone()));
    let scatter = drawn("scatter.svg", Line::scatter("p", points));
    let count = |svg: &str, element: &str| {
        svg.lines()
            .filter(|line| line.contains(element) && line.contains(series_color))
            .count()
    };
    assert_eq!(count(&joined, "<circle"), 4, "{joined}");
    assert_eq!(count(&scatter, "<circle"), 4, "{scatter}");
    assert!(count(&joined, "<polyline") > 0, "{joined}");
    assert_eq!(count(&scatter, "<polyline"), 0, "{scatter}");
    let _ = std::fs::remove_dir_all(&directory);
}
