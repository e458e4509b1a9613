//! What a run does when a store write fails.
//!
//! Every write a run makes — an event appended, a snapshot saved, a tool
//! call recorded, its status changed — is tried again after a
//! [transient](crate::StoreErrorKind::is_transient) error, with backoff,
//! for [`StoreWrites::retry_for`]. A write that still fails then, or fails
//! permanently, is given up, and the run does what
//! [`StoreWrites::on_failure`] says: it pauses for a person (the default)
//! or fails, with an event and the store's error as its reason. A run whose
//! pause (or end) cannot be recorded either is let go: its heartbeat stops,
//! its lease runs out, and an executor resumes it from its last durable
//! snapshot. No run stays `running` with live heartbeats and no progress,
//! and no run records an end its log does not hold.
//!
//! [`StoreHealth`] counts what the engine's writes met, for `/metrics` and
//! `/health`.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::ports::StoreError;

/// What a run does with a store write that fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreWrites {
    /// How long a write that fails transiently is tried again, with
    /// backoff from [`FIRST_PAUSE`] doubling to [`LONGEST_PAUSE`], before
    /// it is given up (default 30 s). Zero gives up at the first error.
    pub retry_for: Duration,
    /// What a run whose write was given up does.
    pub on_failure: OnStoreFailure,
}

impl Default for StoreWrites {
    fn default() -> Self {
        Self {
            retry_for: DEFAULT_RETRY_FOR,
            on_failure: OnStoreFailure::Pause,
        }
    }
}

/// [`StoreWrites::retry_for`]'s default: 30 s, longer than a database's
/// restart or a failover, shorter than anyone waits for a run without
/// asking why.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(30);

/// The first pause before a failed write is tried again.
pub const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two tries of a failed write.
pub const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// What a run whose store write was given up does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnStoreFailure {
    /// It pauses for a person, `waiting_human` with the store's error as
    /// its reason; a resume goes on from its last durable snapshot.
    #[default]
    Pause,
    /// It fails, with the store's error as its reason.
    Fail,
}

impl OnStoreFailure {
    /// The setting's name: `pause` or `fail`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Fail => "fail",
        }
    }

    /// The setting named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "pause" => Some(Self::Pause),
            "fail" => Some(Self::Fail),
            _ => None,
        }
    }
}

/// The pause before try `attempt + 1` of a failed write (`attempt` from
/// 1): [`FIRST_PAUSE`], doubled each time, at most [`LONGEST_PAUSE`].
pub(crate) fn backoff(attempt: u32) -> Duration {
    FIRST_PAUSE
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(LONGEST_PAUSE)
}

/// What an engine's store writes met: errors by kind, the tries made again
/// and the writes given up, and whether the store is failing now (its
/// last write failed).
#[derive(Debug, Default)]
pub struct StoreHealth {
    transient: AtomicU64,
    permanent: AtomicU64,
    retries: AtomicU64,
    given_up: AtomicU64,
    failing: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// When a write last failed transiently or the store was last slow to
    /// answer: the store away, as this executor saw it.
    away_at: Mutex<Option<tokio::time::Instant>>,
    /// The writes in flight that say the store answers (heartbeats), by
    /// number, with when each was sent.
    in_flight: Mutex<std::collections::BTreeMap<u64, tokio::time::Instant>>,
    next_in_flight: AtomicU64,
}

/// A write in flight ([`StoreHealth::in_flight`]), until dropped.
pub(crate) struct InFlight<'a> {
    health: &'a StoreHealth,
    id: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.health
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.id);
    }
}

/// A reading of [`StoreHealth`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreHealthReport {
    /// Writes that failed with an error worth trying again.
    pub transient_errors: u64,
    /// Writes that failed with an error that trying again does not help.
    pub permanent_errors: u64,
    /// Writes tried again after an error.
    pub retries: u64,
    /// Writes given up: each paused, failed or let go of a run.
    pub given_up: u64,
    /// Whether the last write failed: the store is away or refusing.
    pub failing: bool,
    /// The last error, in words.
    pub last_error: Option<String>,
}

impl StoreHealth {
    /// Counts an error met by a write.
    pub fn error(&self, error: &StoreError) {
        let counter = if error.is_transient() {
            &self.transient
        } else {
            &self.permanent
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.failing.store(true, Ordering::Relaxed);
        if error.is_transient() {
            self.away();
        }
        *self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error.to_string());
    }

    /// The store was away (or too slow to tell from away) just now.
    pub fn away(&self) {
        *self
            .away_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tokio::time::Instant::now());
    }

    /// Marks a write in flight until the guard answered is dropped: one
    /// in flight for long says the store is away before it fails.
    pub(crate) fn in_flight(&self) -> InFlight<'_> {
        let id = self.next_in_flight.fetch_add(1, Ordering::Relaxed);
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, tokio::time::Instant::now());
        InFlight { health: self, id }
    }

    /// Whether a write marked in flight has waited longer than `longer`.
    pub(crate) fn stuck(&self, longer: Duration) -> bool {
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .any(|since| since.elapsed() > longer)
    }

    /// Whether the store was away within `within` of now.
    pub fn away_within(&self, within: Duration) -> bool {
        self.away_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < within)
    }

    /// A write that landed: the store is not failing.
    pub fn ok(&self) {
        if self.failing.load(Ordering::Relaxed) {
            self.failing.store(false, Ordering::Relaxed);
        }
    }

    pub(crate) fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn gave_up(&self) {
        self.given_up.fetch_add(1, Ordering::Relaxed);
    }

    /// What was counted so far.
    pub fn report(&self) -> StoreHealthReport {
        StoreHealthReport {
            transient_errors: self.transient.load(Ordering::Relaxed),
            permanent_errors: self.permanent.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            given_up: self.given_up.load(Ordering::Relaxed),
            failing: self.failing.load(Ordering::Relaxed),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        }
    }
}

/// Tries `write` until it lands, fails permanently, or has failed
/// transiently for `writes.retry_for`; every error is counted in `health`
/// and by `errors` (the run's own count). The error answered is the last.
pub(crate) async fn retried<T, F>(
    writes: &StoreWrites,
    health: &StoreHealth,
    errors: &AtomicU64,
    mut write: impl FnMut() -> F,
) -> Result<T, StoreError>
where
    F: Future<Output = Result<T, StoreError>>,
{
    let started = tokio::time::Instant::now();
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match write().await {
            Ok(value) => {
                health.ok();
                return Ok(value);
            }
            Err(error) => {
                health.error(&error);
                errors.fetch_add(1, Ordering::Relaxed);
                let pause = backoff(attempt);
                if !error.is_transient() || started.elapsed() + pause > writes.retry_for {
                    health.gave_up();
                    return Err(error);
                }
                health.retried();
                tokio::time::sleep(pause).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_fifty_milliseconds_to_two_seconds() {
        let pauses: Vec<u128> = (1..=9).map(|a| backoff(a).as_millis()).collect();
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1600, 2000, 2000, 2000]);
        assert_eq!(backoff(u32::MAX), LONGEST_PAUSE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_error_is_tried_again_until_it_lands_and_a_permanent_one_is_not() {
        let health = StoreHealth::default();
        let errors = AtomicU64::new(0);
        let writes = StoreWrites::default();
        let mut tries = 0;
        let landed = retried(&writes, &health, &errors, || {
            tries += 1;
            let fail = tries < 4;
            async move {
                if fail {
                    Err(StoreError::unavailable("away"))
                } else {
                    Ok(tries)
                }
            }
        })
        .await;
        assert_eq!(landed, Ok(4));
        let report = health.report();
        assert_eq!((report.transient_errors, report.retries), (3, 3));
        assert!(!report.failing, "the last write landed");

        let mut tries = 0;
        let refused: Result<(), _> = retried(&writes, &health, &errors, || {
            tries += 1;
            async { Err(StoreError::invalid("too large")) }
        })
        .await;
        assert_eq!(refused, Err(StoreError::invalid("too large")));
        assert_eq!(tries, 1, "a permanent error is not tried again");
        let report = health.report();
        assert_eq!((report.permanent_errors, report.given_up), (1, 1));
        assert!(report.failing);
        assert_eq!(errors.load(Ordering::Relaxed), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_keeps_failing_is_given_up_after_its_retry_time() {
        let health = StoreHealth::default();
        let errors = AtomicU64::new(0);
        let writes = StoreWrites::default();
        let started = tokio::time::Instant::now();
        let given_up: Result<(), _> = retried(&writes, &health, &errors, || async {
            Err(StoreError::unavailable("away"))
        })
        .await;
        assert!(given_up.is_err());
        let waited = started.elapsed();
        assert!(
            waited <= writes.retry_for && waited >= writes.retry_for - LONGEST_PAUSE,
            "given up after {waited:?}"
        );
        assert_eq!(health.report().given_up, 1);
    }
}
