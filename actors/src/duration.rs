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
//! assert!(error.to_string().starts_with("invalid `lease.tool_call`: expected at most 30 days, got 2years"));
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
/// ``invalid `lease.tool_call`: expected at most 30 days, got 31days``.
pub fn check_duration(field: impl Into<String>, value: Duration) -> Result<(), ConfigError> {
    if value > MAX_DURATION {
        return Err(ConfigError::new(
            field,
            MAX_DURATION_EXPECTED,
            humantime::format_duration(value),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_maximum_is_thirty_days_and_refusals_name_the_field() {
        assert_eq!(MAX_DURATION.as_secs(), 2_592_000);
        assert!(check_duration("x", MAX_DURATION).is_ok());
        let error = check_duration("restart.window", MAX_DURATION + Duration::from_nanos(1))
            .unwrap_err();
        assert_eq!(error.field, "restart.window");
        assert_eq!(error.expected, "at most 30 days");
        let error = check_positive_duration("run_lease_ttl", Duration::ZERO).unwrap_err();
        assert_eq!(error.field, "run_lease_ttl");
        assert!(check_duration("x", Duration::MAX).is_err());
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
