//! The report's two pictures, as SVG drawn with plotters: the trade-off
//! (time to cut a hang against the share of slow-but-alive operations cut
//! by mistake, one point per strategy, so a sweep draws a curve) and the
//! work each strategy threw away.
//!
//! A strategy's name is its label, control characters escaped and cut to
//! [`MAX_LABEL`] characters: a picture of a fixed size has no room for
//! more, and the report's JSON, CSV and table give the whole name.

mod labels;

use plotters::prelude::*;

use self::labels::{PixelBox, place, text_size};
use super::report::Report;

/// The size of each picture, in pixels.
const SIZE: (u32, u32) = (900, 560);

/// The most characters of a strategy's name a picture shows; a longer name
/// is cut, ending in `…`.
pub const MAX_LABEL: usize = 40;

/// A plot that could not be drawn.
pub type PlotError = Box<dyn std::error::Error + Send + Sync>;

/// A strategy's family: its policy, which gives its colour and its line
/// in the legend.
fn family_colour(policy: &str) -> RGBColor {
    match policy {
        "leasehold" => RGBColor(0, 140, 70),
        "deadline" => RGBColor(40, 90, 200),
        "idle_kill" => RGBColor(230, 120, 0),
        "always_evaluate" => RGBColor(150, 60, 170),
        _ => RGBColor(90, 90, 90),
    }
}

/// The size of a point label's font, in pixels.
const LABEL_FONT: i32 = 14;

/// The radius of a point's marker, in pixels.
const MARKER: i32 = 5;

/// Detection time (p50, seconds) against the share of slow-but-alive
/// operations cut by mistake, one labelled point per strategy, coloured by
/// family (its policy) with a legend; the points of one policy at several
/// leases (a sweep) are joined in lease order. Each label is set beside
/// its point, off the axes and over no other label, point or the legend:
/// strategies at the same point (leasehold and leasehold-fail-fast often
/// are) share one marker and their labels sit apart; the share axis ends
/// at 100 %.
pub fn tradeoff_svg(report: &Report) -> Result<String, PlotError> {
    struct Point {
        name: String,
        policy: String,
        x: f64,
        y: f64,
    }
    let points: Vec<Point> = report
        .strategies
        .iter()
        .filter_map(|s| {
            Some(Point {
                name: label(&s.name),
                policy: s.policy.clone(),
                x: s.slow_alive_killed_share * 100.0,
                y: seconds(s.detect_p50_ms?),
            })
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
    let top = points.iter().map(|p| p.y).fold(1.0, f64::max) * 1.15;
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
            .build_cartesian_2d(0.0..100.0, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("slow-but-alive operations cut (%)")
            .y_desc("hang detected after, p50 (s)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        for (policy, curve) in curves.iter_mut().filter(|(_, c)| c.len() > 1) {
            curve.sort_by_key(|point| point.0);
            let colour = family_colour(policy);
            chart.draw_series(LineSeries::new(
                curve.iter().map(|&(_, x, y)| (x, y)),
                colour.mix(0.4).stroke_width(2),
            ))?;
        }
        // One legend line per family, in the order of the report.
        let mut families: Vec<&str> = Vec::new();
        for point in &points {
            if !families.contains(&point.policy.as_str()) {
                families.push(&point.policy);
            }
        }
        let (across, down) = chart.plotting_area().get_pixel_range();
        // Off the axes by a few pixels.
        let area = PixelBox {
            left: across.start + 3,
            top: down.start,
            right: across.end,
            bottom: down.end - 3,
        };
        let at: Vec<(i32, i32)> = points
            .iter()
            .map(|p| chart.backend_coord(&(p.x, p.y)))
            .collect();
        let mut obstacles: Vec<PixelBox> = at
            .iter()
            .map(|&point| PixelBox::around(point, MARKER + 1))
            .collect();
        obstacles.push(legend_box(&families, area));
        let sizes: Vec<(i32, i32)> = points
            .iter()
            .map(|p| text_size(&p.name, LABEL_FONT))
            .collect();
        let placed = place(&at, &sizes, area, &obstacles);
        for family in families {
            let colour = family_colour(family);
            chart
                .draw_series(
                    points
                        .iter()
                        .filter(|p| p.policy == family)
                        .map(|p| Circle::new((p.x, p.y), 5, colour.filled())),
                )?
                .label(label(family))
                .legend(move |(x, y)| Circle::new((x + 10, y), 5, colour.filled()));
        }
        for (point, spot) in points.iter().zip(&placed) {
            root.draw(&Text::new(
                point.name.clone(),
                (spot.left, spot.top),
                ("sans-serif", LABEL_FONT)
                    .into_font()
                    .color(&family_colour(&point.policy)),
            ))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.3))
            .label_font(("sans-serif", 14))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// Where the legend of `families` is drawn, in the upper right corner of
/// `area`, estimated on the wide side as the labels are.
fn legend_box(families: &[&str], area: PixelBox) -> PixelBox {
    let widest = families
        .iter()
        .map(|family| text_size(&label(family), LABEL_FONT).0)
        .max()
        .unwrap_or(0);
    let lines = i32::try_from(families.len()).unwrap_or(i32::MAX / 20);
    let (width, height) = (widest + 40, lines.saturating_mul(18) + 14);
    PixelBox::at(area.right - 4 - width, area.top + 5, (width, height)).grown(4)
}

/// Tokens of cut streams and workers per strategy, as bars coloured by
/// family.
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
                family_colour(&s.policy).mix(0.7).filled(),
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
pub fn label(name: &str) -> String {
    let name = leasehold::printable::printable(name);
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
