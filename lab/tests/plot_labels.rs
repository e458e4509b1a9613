//! The trade-off plot's point labels, read back from the SVG it writes:
//! each strategy's label is in the plotting area, off both axes, and
//! overlaps no other label and not the legend — for points crowded at one
//! place, in the corners and beside the legend. A label's box is measured
//! from the picture's own text: its font size, 0.6 em a character.

use leasehold_lab::{Report, StrategyReport, tradeoff_svg};

fn strategy(name: &str, policy: &str, share: f64, detect_ms: u64) -> StrategyReport {
    StrategyReport {
        name: name.to_owned(),
        policy: policy.to_owned(),
        lease_ms: 30_000,
        max_renewals: 10,
        free_renewals: 2,
        max_restarts: 3,
        supervision: "restart".to_owned(),
        alive: 4,
        slow_alive_killed: 1,
        slow_alive_killed_share: share,
        hangs: 1,
        hangs_detected: 1,
        detect_p50_ms: Some(detect_ms),
        detect_p99_ms: Some(detect_ms),
        dead_endpoints: 0,
        dead_endpoints_answered: 0,
        budget_extended: 0,
        budget_wrapped_up: 0,
        kills: 1,
        wasted_tokens: 100,
        wasted_tool_ms: 1_000,
        evaluator_calls: 1,
        evaluator_tokens: 100,
        evaluator_cost: 0.0,
        runs_completed: 5,
        runs_paused: 0,
        runs_failed: 0,
        virtual_time_ms: 30_000,
    }
}

/// A box of pixels: left, top, right, bottom.
type Box4 = (f64, f64, f64, f64);

fn overlap(a: Box4, b: Box4) -> bool {
    a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
}

/// The value of attribute `name` in the tag `tag`.
fn attribute<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = tag[start..].find('"')? + start;
    Some(&tag[start..end])
}

fn number(tag: &str, name: &str) -> f64 {
    attribute(tag, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("`{name}` in {tag}"))
}

/// What the picture holds: its labels in colour (text, box), its axes (the
/// y axis's x, the x axis's y, the area's top and right), the legend's box.
struct Read {
    labels: Vec<(String, Box4)>,
    axes: (f64, f64, f64, f64),
    legend: Box4,
}

fn read(svg: &str) -> Read {
    let mut labels = Vec::new();
    let mut vertical = None;
    let mut horizontal = None;
    let mut legend = None;
    let mut rest = svg;
    while let Some(start) = rest.find('<') {
        rest = &rest[start..];
        let end = rest.find('>').expect("a closed tag");
        let tag = &rest[..=end];
        let after = &rest[end + 1..];
        if tag.starts_with("<text ") && attribute(tag, "fill") != Some("#000000") {
            let text = after[..after.find("</text>").expect("</text>")].trim();
            let size = number(tag, "font-size");
            let (x, y) = (number(tag, "x"), number(tag, "y"));
            assert_eq!(attribute(tag, "text-anchor"), Some("start"), "{tag}");
            let width = 0.6 * size * f64::from(u32::try_from(text.chars().count()).expect("short"));
            labels.push((text.to_owned(), (x, y, x + width, y + size)));
        } else if tag.starts_with("<polyline ") && attribute(tag, "opacity") == Some("1") {
            let ends: Vec<(f64, f64)> = attribute(tag, "points")
                .expect("points")
                .split_whitespace()
                .map(|pair| {
                    let (x, y) = pair.split_once(',').expect("x,y");
                    (x.parse().expect("x"), y.parse().expect("y"))
                })
                .collect();
            // The axes are the longest lines across and down (the others
            // are ticks).
            if let [(x1, y1), (x2, y2)] = ends[..] {
                let length = (x1 - x2).abs() + (y1 - y2).abs();
                if x1 == x2 && vertical.is_none_or(|(_, _, l)| length > l) {
                    vertical = Some((x1, y1.min(y2), length));
                } else if y1 == y2 && horizontal.is_none_or(|(_, _, l)| length > l) {
                    horizontal = Some((y1, x1.max(x2), length));
                }
            }
        } else if tag.starts_with("<rect ") && attribute(tag, "fill") == Some("#FFFFFF") {
            let (x, y) = (number(tag, "x"), number(tag, "y"));
            if attribute(tag, "opacity") == Some("0.9") {
                legend = Some((x, y, x + number(tag, "width"), y + number(tag, "height")));
            }
        }
        rest = after;
    }
    let (y_axis, top, _) = vertical.expect("the y axis");
    let (x_axis, right, _) = horizontal.expect("the x axis");
    Read {
        labels,
        axes: (y_axis, x_axis, top, right),
        legend: legend.expect("the legend"),
    }
}

fn assert_labels_apart(report: &Report) {
    let svg = tradeoff_svg(report).expect("the trade-off plot");
    let read = read(&svg);
    let (y_axis, x_axis, top, right) = read.axes;
    assert_eq!(
        read.labels.len(),
        report.strategies.len(),
        "one label a strategy: {:?}",
        read.labels
    );
    for (i, (name, label)) in read.labels.iter().enumerate() {
        assert!(
            label.0 > y_axis && label.3 < x_axis && label.1 >= top && label.2 <= right,
            "`{name}` {label:?} is not inside the axes (y axis at x {y_axis}, x axis at y \
             {x_axis}, top {top}, right {right})"
        );
        assert!(
            !overlap(*label, read.legend),
            "`{name}` {label:?} is over the legend {:?}",
            read.legend
        );
        for (other, theirs) in &read.labels[i + 1..] {
            assert!(
                !overlap(*label, *theirs),
                "`{name}` {label:?} and `{other}` {theirs:?} overlap"
            );
        }
    }
}

#[test]
fn labels_of_strategies_at_one_point_or_close_together_are_set_apart() {
    let mut strategies = vec![
        strategy("leasehold", "leasehold", 0.0, 11_000),
        strategy("leasehold-fail-fast", "leasehold", 0.0, 11_000),
    ];
    // A sweep whose points are closer than their labels are long.
    for i in 0..8_u32 {
        strategies.push(strategy(
            &format!("deadline@{}s", 40 + i),
            "deadline",
            0.4 + f64::from(i) * 0.07,
            40_000 + u64::from(i) * 100,
        ));
    }
    assert_labels_apart(&Report {
        seed: 1,
        operations: 10,
        strategies,
    });
}

#[test]
fn labels_of_points_in_the_corners_and_under_the_legend_stay_off_the_axes() {
    let strategies = vec![
        strategy("at-the-origin", "leasehold", 0.0, 0),
        strategy("also-at-the-origin", "idle_kill", 0.0, 0),
        strategy("every-slow-call-cut", "deadline", 1.0, 0),
        strategy("the-slowest-and-the-worst", "deadline", 1.0, 300_000),
        strategy("the-slowest-of-all-by-far", "always_evaluate", 0.0, 300_000),
        strategy("under-the-legend", "deadline", 0.93, 280_000),
    ];
    assert_labels_apart(&Report {
        seed: 1,
        operations: 10,
        strategies,
    });
}
