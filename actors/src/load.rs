//! The executor's load: how late the runtime wakes what it was asked to
//! wake, and the rule that keeps that lateness out of every lease.
//!
//! A lease measures how long an operation took, in time read from tokio.
//! When the executor is overloaded — too many runs for its cores, a thread
//! blocked by a synchronous call — every task wakes late: a stream's chunks
//! are read late, its evidence is recorded late, and its lease expires on
//! time the operation never had. [`LoadGauge`] measures that lateness, the
//! *lag*, and [`LoadRule`] turns it into a verdict: a lease that expires
//! while the lag is above the bound is renewed by `load`
//! ([`DecidedBy::Load`](crate::DecidedBy::Load)), and such a renewal counts
//! neither toward the renewal cap, nor on the cost ladder, nor in the
//! evidence streak. Overload is not the work's fault.
//!
//! The gauge is fed by a probe ([`LoadGauge::probe`]): one task per
//! executor that sleeps a short interval and records how much later than
//! asked it woke. Its reading is a decaying maximum: a sample above the
//! reading replaces it, and each sample halves what came before, so a
//! stall shows at once and an executor back on time reads low again within
//! a few intervals. An embedder may feed the gauge its own measurement
//! ([`LoadGauge::record`], [`LoadGauge::set`]) — the runtime's own metrics,
//! or a test that plays a starved executor on paused time.
//!
//! Reading and recording are one atomic each, so the rule costs a lease
//! expiry nothing measurable, and the probe one wake-up per interval
//! whatever the number of runs.
//!
//! ```
//! use std::time::Duration;
//! use leasehold_actors::{LoadGauge, LoadRule};
//!
//! let gauge = LoadGauge::new();
//! let rule = LoadRule::new(gauge.clone(), Duration::from_millis(250));
//! assert_eq!(rule.late_by(Duration::ZERO), None);
//! gauge.record(Duration::from_millis(400));
//! assert_eq!(rule.late_by(Duration::ZERO), Some(Duration::from_millis(400)));
//! // On time again: each sample halves the reading.
//! gauge.record(Duration::from_millis(1));
//! assert_eq!(gauge.lag(), Duration::from_millis(200));
//! assert_eq!(rule.late_by(Duration::ZERO), None);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::ConfigError;

/// How often the probe of `leasehold run` and `leasehold serve` wakes
/// (100 ms): ten wake-ups a second per process, and a stall seen within
/// one interval.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// The default bound of the load rule (250 ms): see
/// [`EngineConfig::load_bound`](crate::EngineConfig::load_bound).
pub const DEFAULT_LOAD_BOUND: Duration = Duration::from_millis(250);

/// The least bound the load rule accepts (10 ms): the runtime's timers
/// have a resolution of a millisecond, and a bound near it would call
/// every expiry late.
pub const MIN_LOAD_BOUND: Duration = Duration::from_millis(10);

/// The executor's scheduling lag, shared by whoever measures it and whoever
/// reads it. Cheap to clone: every clone is the same gauge.
#[derive(Clone, Debug, Default)]
pub struct LoadGauge {
    inner: Arc<Reading>,
}

/// The reading, in microseconds.
#[derive(Debug, Default)]
struct Reading(AtomicU64);

impl LoadGauge {
    /// A gauge that reads zero until something records into it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A gauge fed by a probe: a task that sleeps `interval` (at least a
    /// millisecond) again and again and records how late it woke. The task
    /// ends once every clone of the gauge is dropped.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, as [`tokio::spawn`] does.
    pub fn probe(interval: Duration) -> Self {
        let gauge = Self::new();
        let interval = crate::clamp_duration(interval).max(Duration::from_millis(1));
        tokio::spawn(probe(Arc::downgrade(&gauge.inner), interval));
        gauge
    }

    /// The lag now: the decaying maximum of the samples recorded.
    pub fn lag(&self) -> Duration {
        Duration::from_micros(self.inner.0.load(Ordering::Relaxed))
    }

    /// Folds one measurement of lateness into the reading: the reading
    /// becomes the larger of `sample` and half of what it was.
    pub fn record(&self, sample: Duration) {
        let sample = micros(sample);
        // `fetch_update` only fails when the closure answers `None`.
        let _ = self
            .inner
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |reading| {
                Some(sample.max(reading / 2))
            });
    }

    /// Sets the reading to `lag`, whatever it was: for an embedder that
    /// computes the lag itself, and for tests.
    pub fn set(&self, lag: Duration) {
        self.inner.0.store(micros(lag), Ordering::Relaxed);
    }
}

/// Sleeps `interval` and records how late it woke, until the gauge is gone.
async fn probe(gauge: Weak<Reading>, interval: Duration) {
    loop {
        let asked = tokio::time::Instant::now();
        tokio::time::sleep(interval).await;
        let late = asked.elapsed().saturating_sub(interval);
        let Some(reading) = gauge.upgrade() else {
            return;
        };
        LoadGauge { inner: reading }.record(late);
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The load rule of a lease actor: a gauge and the lag above which an
/// expiry is the executor's, not the operation's.
#[derive(Clone, Debug)]
pub struct LoadRule {
    gauge: LoadGauge,
    bound: Duration,
}

impl LoadRule {
    /// Expiries are renewed by `load` while `gauge` reads above `bound`.
    pub fn new(gauge: LoadGauge, bound: Duration) -> Self {
        Self { gauge, bound }
    }

    /// The rule of `bound` over `gauge`, or none when either is missing: a
    /// zero bound turns the rule off.
    pub fn of(gauge: Option<&LoadGauge>, bound: Duration) -> Option<Self> {
        gauge
            .filter(|_| !bound.is_zero())
            .map(|gauge| Self::new(gauge.clone(), bound))
    }

    /// The bound.
    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// The gauge.
    pub fn gauge(&self) -> &LoadGauge {
        &self.gauge
    }

    /// How late the executor is, if above the bound: the larger of the
    /// gauge's reading and `seen`, a lateness the caller measured itself
    /// (how late a lease's own timer fired).
    pub fn late_by(&self, seen: Duration) -> Option<Duration> {
        let lag = self.gauge.lag().max(seen);
        (lag > self.bound).then_some(lag)
    }
}

/// Refuses a load bound that is neither zero (off) nor at least
/// [`MIN_LOAD_BOUND`], or one above [`MAX_DURATION`](crate::MAX_DURATION),
/// naming `field`.
pub(crate) fn check_bound(field: &str, bound: Duration) -> Result<(), ConfigError> {
    crate::check_duration(field, bound)?;
    if !bound.is_zero() && bound < MIN_LOAD_BOUND {
        return Err(ConfigError::new(
            field,
            "0 (off) or a duration of at least 10ms",
            crate::describe_duration(bound),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_above_the_reading_replaces_it_and_each_sample_halves_it() {
        let gauge = LoadGauge::new();
        assert_eq!(gauge.lag(), Duration::ZERO);
        gauge.record(Duration::from_millis(800));
        assert_eq!(gauge.lag(), Duration::from_millis(800));
        for expected in [400, 200, 100] {
            gauge.record(Duration::from_millis(2));
            assert_eq!(gauge.lag(), Duration::from_millis(expected));
        }
        gauge.record(Duration::from_millis(300));
        assert_eq!(gauge.lag(), Duration::from_millis(300));
        gauge.set(Duration::from_millis(5));
        assert_eq!(gauge.clone().lag(), Duration::from_millis(5));
        gauge.record(Duration::MAX);
        assert_eq!(gauge.lag(), Duration::from_micros(u64::MAX));
    }

    #[test]
    fn the_rule_is_off_without_a_gauge_or_with_a_zero_bound() {
        let gauge = LoadGauge::new();
        gauge.set(Duration::from_secs(5));
        assert!(LoadRule::of(None, DEFAULT_LOAD_BOUND).is_none());
        assert!(LoadRule::of(Some(&gauge), Duration::ZERO).is_none());
        let rule = LoadRule::of(Some(&gauge), DEFAULT_LOAD_BOUND).expect("a rule");
        assert_eq!(rule.late_by(Duration::ZERO), Some(Duration::from_secs(5)));
        gauge.set(Duration::from_millis(250));
        assert_eq!(
            rule.late_by(Duration::ZERO),
            None,
            "the bound itself is on time"
        );
        assert_eq!(
            rule.late_by(Duration::from_millis(900)),
            Some(Duration::from_millis(900)),
            "a lateness seen by the caller counts too"
        );
    }

    #[test]
    fn a_bound_is_zero_or_at_least_ten_milliseconds() {
        assert!(check_bound("executor.load_bound", Duration::ZERO).is_ok());
        assert!(check_bound("executor.load_bound", MIN_LOAD_BOUND).is_ok());
        let error =
            check_bound("executor.load_bound", Duration::from_millis(3)).expect_err("refused");
        assert_eq!(error.field, "executor.load_bound");
        assert!(error.to_string().contains("at least 10ms"), "{error}");
    }
}
