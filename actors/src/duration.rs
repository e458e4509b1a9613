//! The longest duration leasehold accepts, and time arithmetic that cannot
//! panic.
//!
//! Every duration a user gives — a lease, a backoff, a restart window, an
//! evaluator timeout, a run lease's TTL, in a flow or in configuration — is
//! refused above [`MAX_DURATION`] (30 days) by validation, with an error
//! naming the key ([`check_duration`]). An embedder that skips validation
//! and passes a longer duration straight through the Rust API still never
//! reaches a panic: every deadline is computed with [`deadline_after`], which
//! clamps the duration to [`MAX_DURATION`] first. A lease longer than the
//! maximum therefore expires, and is judged, after 30 days; an expiry is
//! never an error, so clamping one only asks the watchdog earlier.
//!
//! ```
//! use std::time::Duration;
//! use leasehold_actors::{MAX_DURATION, check_duration};
//!
//! assert_eq!(MAX_DURATION, Duration::from_secs(30 * 24 * 60 * 60));
//! let error = check_duration("lease.tool_call", Duration::from_secs(1000 * 86_400)).unwrap_err();
//! assert!(error.to_string().starts_with("invalid `lease.tool_call`: expected at most 30 days, got 1000 days"));
//! ```

use std::time::Duration;

use crate::error::ConfigError;

/// The longest duration leasehold accepts anywhere: 30 days.
///
/// Validation refuses any configured or flow duration above it, naming the
/// key; arithmetic on durations that were not validated clamps to it, so no
/// duration reaches a panic (tokio's timer queue refuses deadlines more than
/// about two years away, and `Instant` arithmetic overflows near 585 years).
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// What [`check_duration`] expects of a duration, for error messages.
pub const MAX_DURATION_EXPECTED: &str = "at most 30 days";

/// Refuses a duration above [`MAX_DURATION`], naming `field`:
/// ``invalid `lease.tool_call`: expected at most 30 days, got 31 days``.
pub fn check_duration(field: impl Into<String>, value: Duration) -> Result<(), ConfigError> {
    if value > MAX_DURATION {
        return Err(ConfigError::new(
            field,
            MAX_DURATION_EXPECTED,
            describe_duration(value),
        ));
    }
    Ok(())
}

/// Refuses a zero duration or one above [`MAX_DURATION`], naming `field`.
pub fn check_positive_duration(
    field: impl Into<String>,
    value: Duration,
) -> Result<(), ConfigError> {
    if value.is_zero() {
        return Err(ConfigError::new(field, "a duration above 0", "0"));
    }
    check_duration(field, value)
}

/// A duration as refusals write it: whole days as days (`31 days`,
/// `1000 days 12h`), anything shorter in humantime's form (`5m 30s`), so
/// that it reads against the maximum, where humantime would say
/// `1month 13h 26m 24s` for 31 days.
pub fn describe_duration(duration: Duration) -> String {
    const DAY: u64 = 24 * 60 * 60;
    let days = duration.as_secs() / DAY;
    let rest = duration - Duration::from_secs(days * DAY);
    match (days, rest.is_zero()) {
        (0, _) => humantime::format_duration(duration).to_string(),
        (1, true) => "1 day".to_owned(),
        (_, true) => format!("{days} days"),
        _ => format!("{days} days {}", humantime::format_duration(rest)),
    }
}

/// `duration`, or [`MAX_DURATION`] if it is longer.
pub fn clamp_duration(duration: Duration) -> Duration {
    duration.min(MAX_DURATION)
}

/// The instant `duration` (clamped to [`MAX_DURATION`]) after `now`. Never
/// panics: an instant so late that even the clamped sum overflows yields
/// `now`.
pub fn deadline_after(now: tokio::time::Instant, duration: Duration) -> tokio::time::Instant {
    now.checked_add(clamp_duration(duration)).unwrap_or(now)
}

/// The heartbeat period and the TTL in milliseconds of a run lease of
/// `ttl`: a third of it, the TTL clamped to [`MAX_DURATION`] and the period
/// never zero (a zero period panics `interval`), whatever an embedder passed
/// without validation.
pub(crate) fn heartbeat_timing(ttl: Duration) -> (Duration, u64) {
    let ttl = clamp_duration(ttl);
    let period = (ttl / 3).max(Duration::from_millis(1));
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    (period, ttl_ms)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_maximum_is_thirty_days_and_refusals_name_the_field() {
        assert_eq!(MAX_DURATION.as_secs(), 2_592_000);
        assert!(check_duration("x", MAX_DURATION).is_ok());
        let error =
            check_duration("restart.window", MAX_DURATION + Duration::from_nanos(1)).unwrap_err();
        assert_eq!(error.field, "restart.window");
        assert_eq!(error.expected, "at most 30 days");
        let error = check_positive_duration("run_lease_ttl", Duration::ZERO).unwrap_err();
        assert_eq!(error.field, "run_lease_ttl");
        assert!(check_duration("x", Duration::MAX).is_err());
    }

    fn any_duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            Just(Duration::ZERO),
            Just(Duration::MAX),
            Just(MAX_DURATION),
            (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
            (0..10_000_000u64).prop_map(Duration::from_millis),
        ]
    }

    proptest! {
        #[test]
        fn deadline_and_heartbeat_arithmetic_never_panics(ttl in any_duration()) {
            let now = tokio::time::Instant::now();
            let deadline = deadline_after(now, ttl);
            prop_assert!(deadline.duration_since(now) <= MAX_DURATION);
            let (period, ttl_ms) = heartbeat_timing(ttl);
            prop_assert!(!period.is_zero());
            prop_assert!(period <= MAX_DURATION / 3 + Duration::from_millis(1));
            prop_assert!(ttl_ms <= 2_592_000_000);
            // The heartbeat's first tick is computed the same way.
            let _ = deadline_after(now, period);
        }
    }

    #[test]
    fn long_durations_are_described_in_days() {
        let day = Duration::from_secs(86_400);
        assert_eq!(describe_duration(day * 31), "31 days");
        assert_eq!(describe_duration(day), "1 day");
        assert_eq!(
            describe_duration(day * 2 + Duration::from_secs(90)),
            "2 days 1m 30s"
        );
        assert_eq!(describe_duration(Duration::from_millis(1500)), "1s 500ms");
        assert!(describe_duration(Duration::MAX).ends_with("999ms 999us 999ns"));
    }

    #[test]
    fn deadlines_clamp_to_the_maximum() {
        let now = tokio::time::Instant::now();
        assert_eq!(deadline_after(now, Duration::MAX), now + MAX_DURATION);
        assert_eq!(
            deadline_after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
    }
}
