//! The arithmetic of step budgets: when a checkpoint is due, and how many
//! steps an `EXTEND` grants.
//!
//! Integer arithmetic throughout, with no lossy casts: the confidence is
//! turned into parts per million once (exactly, by search rather than by
//! `as`), and the rest is `u64` arithmetic that cannot overflow. Counting
//! the confidence to the millionth also keeps floating-point noise out of
//! the step count: `10 × 0.7` is 7 steps, not the 8 that `ceil` would make
//! of the `7.000000000000001` a float multiplication gives.

/// Parts per million: the resolution of a confidence.
const PPM: u32 = 1_000_000;

/// The steps an `EXTEND` grants a loop whose current limit is `limit`:
///
/// ```text
/// granted = max(1, ceil(limit × clamp(confidence, min_confidence, 1)))
/// ```
///
/// Proportional to the current limit, so extensions compound: a loop
/// declared with 3 steps, extended three times at confidence 1.0, goes
/// 3 → 6 → 12 → 24. The confidence counts to the millionth. A NaN confidence
/// counts as `min_confidence`; a `min_confidence` outside [0, 1] is clamped
/// into it (NaN counts as 0), so this never panics. Never 0, never more than
/// `limit` (but 1 for a `limit` of 0).
///
/// ```
/// use leasehold_actors::proportional_extension;
///
/// assert_eq!(proportional_extension(3, 1.0, 0.25), 3);
/// assert_eq!(proportional_extension(40, 0.5, 0.25), 20);
/// // A hesitant EXTEND is floored at min_confidence.
/// assert_eq!(proportional_extension(40, 0.1, 0.25), 10);
/// ```
pub fn proportional_extension(limit: u32, confidence: f64, min_confidence: f64) -> u32 {
    let floor = if min_confidence.is_nan() {
        0.0
    } else {
        min_confidence.clamp(0.0, 1.0)
    };
    let weight = if confidence.is_nan() {
        floor
    } else {
        confidence.clamp(floor, 1.0)
    };
    let scaled = u64::from(limit).saturating_mul(u64::from(to_ppm(weight)));
    let granted = scaled.div_ceil(u64::from(PPM));
    // granted ≤ limit, so the conversion cannot fail.
    u32::try_from(granted).unwrap_or(limit).max(1)
}

/// Whether a loop that has taken `steps_used` steps under `limit` (0 =
/// unlimited) must pass a checkpoint before its next step. Never true for an
/// unlimited budget.
///
/// ```
/// use leasehold_actors::checkpoint_due;
///
/// assert!(!checkpoint_due(2, 3));
/// assert!(checkpoint_due(3, 3));
/// assert!(!checkpoint_due(1_000, 0));
/// ```
pub fn checkpoint_due(steps_used: u32, limit: u32) -> bool {
    limit != 0 && steps_used >= limit
}

/// `weight` (in [0, 1]) in parts per million, rounded to the nearest: the
/// least `n` with `n ≥ weight × 10⁶ − ½`, found by binary search so that no
/// float is ever cast to an integer.
fn to_ppm(weight: f64) -> u32 {
    let target = weight * f64::from(PPM) - 0.5;
    let (mut low, mut high) = (0, PPM);
    while low < high {
        let mid = low + (high - low) / 2;
        if f64::from(mid) >= target {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    low
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn to_ppm_rounds_to_the_millionth() {
        assert_eq!(to_ppm(0.0), 0);
        assert_eq!(to_ppm(1.0), PPM);
        assert_eq!(to_ppm(0.25), 250_000);
        assert_eq!(to_ppm(0.7), 700_000);
        assert_eq!(to_ppm(0.123_456_7), 123_457);
    }

    #[test]
    fn extension_is_free_of_float_noise() {
        // 10.0 * 0.7 == 7.000000000000001 in f64.
        assert_eq!(proportional_extension(10, 0.7, 0.25), 7);
        assert_eq!(proportional_extension(3, 0.8, 0.25), 3);
        assert_eq!(proportional_extension(5, 0.8, 0.25), 4);
    }

    #[test]
    fn extension_never_panics_on_odd_confidences() {
        assert_eq!(proportional_extension(40, f64::NAN, 0.25), 10);
        assert_eq!(proportional_extension(40, f64::INFINITY, 0.25), 40);
        assert_eq!(proportional_extension(40, -3.0, 0.25), 10);
        assert_eq!(proportional_extension(40, 0.5, f64::NAN), 20);
        assert_eq!(proportional_extension(40, 0.5, 7.0), 40);
        assert_eq!(proportional_extension(40, 0.0, -1.0), 1);
        assert_eq!(proportional_extension(0, 1.0, 0.25), 1);
        assert_eq!(proportional_extension(u32::MAX, 1.0, 0.25), u32::MAX);
    }

    #[test]
    fn checkpoint_is_never_due_for_an_unlimited_budget() {
        for steps in [0, 1, 3, u32::MAX] {
            assert!(!checkpoint_due(steps, 0));
        }
        assert!(checkpoint_due(4, 3));
    }

    proptest! {
        #[test]
        fn extension_is_between_one_and_the_limit(
            limit in any::<u32>(),
            confidence in any::<f64>(),
            min_confidence in any::<f64>(),
        ) {
            let granted = proportional_extension(limit, confidence, min_confidence);
            prop_assert!(granted >= 1);
            prop_assert!(granted <= limit.max(1));
        }

        #[test]
        fn extension_grows_with_confidence_and_limit(
            limit in 1..100_000u32,
            a in 0.0..=1.0f64,
            b in 0.0..=1.0f64,
        ) {
            let (low, high) = if a <= b { (a, b) } else { (b, a) };
            let granted = |limit, confidence| proportional_extension(limit, confidence, 0.25);
            prop_assert!(granted(limit, low) <= granted(limit, high));
            prop_assert!(granted(limit, a) <= granted(limit + 1, a));
        }
    }
}
