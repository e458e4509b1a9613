//! The model client's idle timeout, derived so that the watchdog judges a
//! silent call before the transport cuts it: a transport timeout shorter
//! than the lease's first judgment would be a hidden deadline.

use std::time::Duration;

use leasehold_actors::LeaseKind;

use super::{Config, Setting, Source};

/// How the idle timeout is derived when `model.idle_timeout` is not set.
pub const IDLE_TIMEOUT_FORMULA: &str = "(watchdog.free_renewals + 1) × the longer of \
     lease.model_stream and lease.model_blocking + evaluator_timeout (no free renewals under \
     always_evaluate; no evaluator_timeout when free_renewals = max_renewals)";

/// The source of a derived idle timeout, as `leasehold config` prints it.
static DERIVED: Source = Source::Derived(IDLE_TIMEOUT_FORMULA);

/// The model calls a transport timeout can cut, with their lease keys.
pub(super) const MODEL_KINDS: [(LeaseKind, &str); 2] = [
    (LeaseKind::ModelStream, "lease.model_stream"),
    (LeaseKind::ModelBlocking, "lease.model_blocking"),
];

impl Config {
    /// When a silent `kind` operation has been judged at the latest: its
    /// first evaluation plus the evaluator's flat timeout (saturating) —
    /// or, when every renewal before the cap is free
    /// (`watchdog.free_renewals` = `lease.max_renewals`), the cap's cut
    /// itself, with no evaluator timeout: no evaluation happens.
    pub fn first_judgment(&self, kind: LeaseKind) -> Duration {
        let timing = self.timing(kind);
        if timing.evaluations == 0 && self.free_renewals.value >= self.max_renewals.value {
            return timing.first_evaluation;
        }
        timing
            .first_evaluation
            .saturating_add(self.evaluator_timeout.value)
    }

    /// The model client's idle timeout and where it came from: the value of
    /// `model.idle_timeout` when set; otherwise derived as
    /// [`IDLE_TIMEOUT_FORMULA`] — the later [`Self::first_judgment`] of a
    /// streaming and a blocking model call, at most
    /// [`MAX_DURATION`](leasehold_actors::MAX_DURATION) — with the source
    /// [`Source::Derived`].
    pub fn idle_timeout(&self) -> Setting<Duration> {
        let (value, source) = self.idle_timeout_entry();
        Setting {
            value,
            source: source.clone(),
        }
    }

    /// [`Self::idle_timeout`] for `value_of`, whose source is borrowed.
    pub(super) fn idle_timeout_entry(&self) -> (Duration, &Source) {
        match self.model_idle_timeout.value {
            Some(value) => (value, &self.model_idle_timeout.source),
            None => (self.derived_idle_timeout(), &DERIVED),
        }
    }

    fn derived_idle_timeout(&self) -> Duration {
        let latest = MODEL_KINDS
            .iter()
            .map(|(kind, _)| self.first_judgment(*kind))
            .max()
            .unwrap_or(Duration::ZERO);
        leasehold_actors::clamp_duration(latest)
    }
}
