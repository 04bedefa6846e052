//! The bar chart: grouped bars over categories (a gain per scenario, percentiles per policy).

use plotters::coord::Shift;
use plotters::prelude::{
    ChartBuilder, Color, DrawingArea, DrawingBackend, IntoSegmentedCoord, RGBColor, Rectangle,
    SegmentValue, BLACK, WHITE,
};

use super::series::drawing_failed;

/// Grouped bars over categories: one group per `groups` entry `(category, values)`, one bar
/// per value, coloured and labelled by `labels` (in order); negative values hang below zero.
pub fn draw_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    x_desc: &str,
    groups: &[(String, Vec<f64>)],
    labels: &[(&str, RGBColor)],
    y_desc: &str,
) -> Result<(), String> {
    let values = groups.iter().flat_map(|g| g.1.iter().copied());
    let (low, high) = values.fold((0.0f64, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
    let (low, high) = (low * 1.1, (high * 1.1).max(1.0));
    let series = labels.len() as i32;
    let slots = groups.len() as i32 * (series + 1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d((0..slots).into_segmented(), low..high)
        .map_err(|e| drawing_failed(&e))?;
    let names: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
    let step = series + 1;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_labels(slots as usize)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) if i % step == (series - 1) / 2 => {
                names.get((i / step) as usize).cloned().unwrap_or_default()
            }
            _ => String::new(),
        })
        .draw()
        .map_err(|e| drawing_failed(&e))?;
    for (s, (label, color)) in labels.iter().enumerate() {
        let color = *color;
        chart
            .draw_series(groups.iter().enumerate().map(|(g, group)| {
                let x = g as i32 * step + s as i32;
                let value = group.1.get(s).copied().unwrap_or(0.0);
                let (bottom, top) = if value >= 0.0 {
                    (0.0, value)
                } else {
                    (value, 0.0)
                };
                Rectangle::new(
                    [
                        (SegmentValue::Exact(x), bottom),
                        (SegmentValue::Exact(x + 1), top),
                    ],
                    color.filled(),
                )
            }))
            .map_err(|e| drawing_failed(&e))?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| drawing_failed(&e))?;
    Ok(())
}
