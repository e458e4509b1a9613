//! The report's two pictures, as SVG drawn with plotters: the trade-off
//! (time to cut a hang against the share of slow-but-alive operations cut
//! by mistake, one point per strategy, so a sweep draws a curve) and the
//! work each strategy threw away.
//!
//! A strategy's name is its label, control characters escaped and cut to
//! [`MAX_LABEL`] characters: a picture of a fixed size has no room for
//! more, and the report's JSON, CSV and table give the whole name.

use plotters::prelude::*;

use super::report::Report;

/// The size of each picture, in pixels.
const SIZE: (u32, u32) = (900, 560);

/// The most characters of a strategy's name a picture shows; a longer name
/// is cut, ending in `…`.
pub const MAX_LABEL: usize = 40;

/// A plot that could not be drawn.
pub type PlotError = Box<dyn std::error::Error + Send + Sync>;

/// Detection time (p50, seconds) against the share of slow-but-alive
/// operations cut by mistake, one labelled point per strategy; the points
/// of one policy at several leases (a sweep) are joined in lease order.
pub fn tradeoff_svg(report: &Report) -> Result<String, PlotError> {
    let points: Vec<(String, f64, f64)> = report
        .strategies
        .iter()
        .filter_map(|s| {
            let p50 = s.detect_p50_ms?;
            Some((
                label(&s.name),
                s.slow_alive_killed_share * 100.0,
                seconds(p50),
            ))
        })
        .collect();
    let mut curves: std::collections::BTreeMap<&str, Vec<(u64, f64, f64)>> =
        std::collections::BTreeMap::new();
    for s in &report.strategies {
        if let Some(p50) = s.detect_p50_ms {
            curves.entry(s.policy.as_str()).or_default().push((
                s.lease_ms,
                s.slow_alive_killed_share * 100.0,
                seconds(p50),
            ));
        }
    }
    let top = points.iter().map(|p| p.2).fold(1.0, f64::max) * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Time to cut a hang against slow work cut by mistake",
                ("sans-serif", 20),
            )
            .margin(20)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(-5.0..125.0, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("slow-but-alive operations cut (%)")
            .y_desc("hang detected after, p50 (s)")
            .draw()?;
        for curve in curves.values_mut().filter(|c| c.len() > 1) {
            curve.sort_by_key(|point| point.0);
            chart.draw_series(LineSeries::new(
                curve.iter().map(|&(_, x, y)| (x, y)),
                BLUE.mix(0.4).stroke_width(2),
            ))?;
        }
        chart.draw_series(points.iter().map(|(name, x, y)| {
            EmptyElement::at((*x, *y))
                + Circle::new((0, 0), 5, BLUE.filled())
                + Text::new(name.clone(), (8, -12), ("sans-serif", 14))
        }))?;
        root.present()?;
    }
    Ok(svg)
}

/// Tokens of cut streams and workers per strategy, as bars.
pub fn wasted_svg(report: &Report) -> Result<String, PlotError> {
    let names: Vec<String> = report.strategies.iter().map(|s| label(&s.name)).collect();
    let count = u32::try_from(names.len()).unwrap_or(u32::MAX).max(1);
    let top = report
        .strategies
        .iter()
        .map(|s| s.wasted_tokens)
        .max()
        .unwrap_or(0)
        .max(1);
    let top = top.saturating_add(top / 8);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Tokens thrown away by cut streams and workers",
                ("sans-serif", 20),
            )
            .margin(20)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((0..count - 1).into_segmented(), 0..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(names.len())
            .x_label_formatter(&|segment| match segment {
                SegmentValue::CenterOf(i) => usize::try_from(*i)
                    .ok()
                    .and_then(|i| names.get(i))
                    .map_or_else(String::new, Clone::clone),
                _ => String::new(),
            })
            .y_desc("wasted tokens")
            .draw()?;
        chart.draw_series(report.strategies.iter().zip(0..).map(|(s, i)| {
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0),
                    (SegmentValue::Exact(i + 1), s.wasted_tokens),
                ],
                RED.mix(0.6).filled(),
            );
            bar.set_margin(0, 0, 12, 12);
            bar
        }))?;
        root.present()?;
    }
    Ok(svg)
}

/// `name` as a label: its control characters escaped (XML allows none in
/// a picture's text), then at most [`MAX_LABEL`] characters, the last of a
/// cut one `…`.
pub(crate) fn label(name: &str) -> String {
    let name = crate::columns::printable(name);
    if name.chars().count() <= MAX_LABEL {
        return name.into_owned();
    }
    let mut cut: String = name.chars().take(MAX_LABEL - 1).collect();
    cut.push('…');
    cut
}

fn seconds(ms: u64) -> f64 {
    // Milliseconds of an experiment stay far below 2^53: exact.
    f64::from(u32::try_from(ms / 1000).unwrap_or(u32::MAX))
        + f64::from(u32::try_from(ms % 1000).unwrap_or(0)) / 1000.0
}
