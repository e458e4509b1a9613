//! Where the trade-off plot's point labels go: beside their points, inside
//! the plotting area and off its axes, over no other label, no other point
//! and not the legend. Labels are placed one after another, each at the
//! first free position of a fixed list around its point (right, left,
//! above, below, the corners, then further up and down on either side); a
//! label with no free position takes the one it overlaps least.
//!
//! A picture made with no font at hand cannot measure its text, so a
//! label's size is estimated on the wide side: 0.6 em a character, wider
//! than sans-serif's average, and a line of 1 em.

/// A box of pixels: `left..right` across, `top..bottom` down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PixelBox {
    pub(crate) left: i32,
    pub(crate) top: i32,
    pub(crate) right: i32,
    pub(crate) bottom: i32,
}

impl PixelBox {
    /// The box `width` × `height` whose top-left corner is at (`left`, `top`).
    pub(crate) fn at(left: i32, top: i32, (width, height): (i32, i32)) -> Self {
        Self {
            left,
            top,
            right: left.saturating_add(width),
            bottom: top.saturating_add(height),
        }
    }

    /// The square of half-side `half` around (`x`, `y`).
    pub(crate) fn around((x, y): (i32, i32), half: i32) -> Self {
        Self {
            left: x - half,
            top: y - half,
            right: x + half,
            bottom: y + half,
        }
    }

    /// This box grown by `by` pixels on every side.
    pub(crate) fn grown(self, by: i32) -> Self {
        Self {
            left: self.left - by,
            top: self.top - by,
            right: self.right + by,
            bottom: self.bottom + by,
        }
    }

    fn overlap(&self, other: &Self) -> i64 {
        let across = i64::from(self.right.min(other.right) - self.left.max(other.left));
        let down = i64::from(self.bottom.min(other.bottom) - self.top.max(other.top));
        if across > 0 && down > 0 {
            across * down
        } else {
            0
        }
    }

    fn within(&self, area: &Self) -> bool {
        self.left >= area.left
            && self.top >= area.top
            && self.right <= area.right
            && self.bottom <= area.bottom
    }
}

/// The estimated size of `text` in a font of `font_px` pixels: 0.6 em a
/// character, 1 em high.
pub(crate) fn text_size(text: &str, font_px: i32) -> (i32, i32) {
    let chars = i32::try_from(text.chars().count()).unwrap_or(i32::MAX / font_px.max(1));
    (chars.saturating_mul(font_px).saturating_mul(3) / 5, font_px)
}

/// The pixels between a point's centre and its label.
const GAP: i32 = 8;

/// How many lines above and below its point a label may be moved.
const LINES: i32 = 12;

/// The positions tried for a label of `size` beside the point at `point`,
/// best first.
fn candidates((x, y): (i32, i32), (width, height): (i32, i32)) -> Vec<(i32, i32)> {
    let middle = y - height / 2;
    let mut tried = vec![
        (x + GAP, middle),
        (x - GAP - width, middle),
        (x - width / 2, y - GAP - height),
        (x - width / 2, y + GAP),
        (x + GAP, y - GAP - height),
        (x + GAP, y + GAP),
        (x - GAP - width, y - GAP - height),
        (x - GAP - width, y + GAP),
    ];
    for line in 1..=LINES {
        let step = line * (height + 2);
        tried.extend([
            (x + GAP, middle - step),
            (x + GAP, middle + step),
            (x - GAP - width, middle - step),
            (x - GAP - width, middle + step),
        ]);
    }
    tried
}

/// The box of each label, in order: label `i` of `sizes[i]` beside the
/// point at `points[i]`, inside `area`, over no label placed before it and
/// no box of `obstacles`.
pub(crate) fn place(
    points: &[(i32, i32)],
    sizes: &[(i32, i32)],
    area: PixelBox,
    obstacles: &[PixelBox],
) -> Vec<PixelBox> {
    let mut placed: Vec<PixelBox> = Vec::with_capacity(points.len());
    for (&point, &size) in points.iter().zip(sizes) {
        let overlap = |candidate: &PixelBox| -> i64 {
            placed
                .iter()
                .chain(obstacles)
                .map(|other| candidate.overlap(other))
                .sum()
        };
        let inside: Vec<PixelBox> = candidates(point, size)
            .into_iter()
            .map(|(left, top)| PixelBox::at(left, top, size))
            .filter(|candidate| candidate.within(&area))
            .collect();
        let chosen = inside
            .iter()
            .find(|candidate| overlap(candidate) == 0)
            .or_else(|| inside.iter().min_by_key(|candidate| overlap(candidate)))
            .copied()
            // Wider or taller than the area: its top-left corner in it.
            .unwrap_or_else(|| PixelBox::at(area.left, area.top, size));
        placed.push(chosen);
    }
    placed
}

#[cfg(test)]
mod tests {
    use super::*;

    const AREA: PixelBox = PixelBox {
        left: 80,
        top: 46,
        right: 880,
        bottom: 494,
    };

    fn assert_apart(boxes: &[PixelBox]) {
        for (i, a) in boxes.iter().enumerate() {
            assert!(a.within(&AREA), "label {i} {a:?} is outside {AREA:?}");
            for (j, b) in boxes.iter().enumerate().skip(i + 1) {
                assert_eq!(a.overlap(b), 0, "labels {i} {a:?} and {j} {b:?} overlap");
            }
        }
    }

    #[test]
    fn a_lone_label_goes_right_of_its_point() {
        let boxes = place(&[(400, 300)], &[(60, 14)], AREA, &[]);
        assert_eq!(boxes, [PixelBox::at(408, 293, (60, 14))]);
    }

    #[test]
    fn labels_of_points_at_one_place_are_set_apart() {
        let points = [(400, 300); 10];
        let boxes = place(&points, &[(90, 14); 10], AREA, &[]);
        assert_apart(&boxes);
    }

    #[test]
    fn labels_of_points_in_the_corners_stay_inside_the_area() {
        let points = [(80, 494), (80, 494), (880, 494), (880, 46), (80, 46)];
        let boxes = place(&points, &[(150, 14); 5], AREA, &[]);
        assert_apart(&boxes);
    }

    #[test]
    fn a_label_keeps_off_the_obstacles() {
        let legend = PixelBox::at(760, 46, (120, 70));
        let boxes = place(&[(740, 60)], &[(60, 14)], AREA, &[legend]);
        assert_eq!(boxes[0].overlap(&legend), 0, "{boxes:?}");
    }

    #[test]
    fn text_is_estimated_wide() {
        assert_eq!(text_size("deadline@10s", 14), (100, 14));
    }
}
