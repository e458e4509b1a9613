//! The timing arithmetic of a lease kind: when the first evaluation happens,
//! when the renewal cap cuts, how many attempts the restart strategy allows
//! and the worst-case wall time. Pure arithmetic on durations, saturating
//! rather than overflowing, so any configuration gives an answer.

use std::fmt;
use std::time::Duration;

use leasehold_actors::lease::LeaseKind;
use leasehold_actors::supervisor::RestartPolicy;

/// The arithmetic of one lease kind: what happens when, and how long an
/// operation of that kind can take at worst before the run fails or pauses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The lease kind.
    pub kind: LeaseKind,
    /// The lease length.
    pub lease: Duration,
    /// Until when expiries are renewed on evidence alone:
    /// `(free_renewals + 1) × lease`.
    pub free_renewals_until: Duration,
    /// When the evaluator is first asked, if the operation is still going:
    /// `(free_renewals + 1) × lease`.
    pub first_evaluation: Duration,
    /// When the renewal cap stops the operation: `(max_renewals + 1) × lease`.
    pub renewal_cap: Duration,
    /// Attempts the restart strategy allows: `1 + restart.max`.
    pub attempts: u32,
    /// The backoffs between those attempts, each at its longest.
    pub backoffs: Duration,
    /// `attempts × renewal_cap + backoffs`.
    pub worst_case: Duration,
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: lease {} · free renewals until {} · first evaluation at {} · renewal cap at {} · \
             {} attempt{} · worst case {}",
            self.kind,
            compact(self.lease),
            compact(self.free_renewals_until),
            compact(self.first_evaluation),
            compact(self.renewal_cap),
            self.attempts,
            if self.attempts == 1 { "" } else { "s" },
            compact(self.worst_case),
        )
    }
}

/// A duration the way the timing line writes it: `3h40m7s700ms`.
pub fn compact(duration: Duration) -> String {
    humantime::format_duration(duration)
        .to_string()
        .replace(' ', "")
}

/// The sum of the backoffs before every allowed restart, each at its longest
/// (the jitter's upper end). Restarts past the point where the backoff
/// reaches its maximum all wait the maximum, so this never loops more than
/// the doublings it takes to get there.
pub(super) fn longest_backoffs(policy: &RestartPolicy) -> Duration {
    let stretch = 1.0 + policy.jitter.clamp(0.0, 1.0);
    let longest = |d: Duration| {
        Duration::try_from_secs_f64(d.as_secs_f64() * stretch).unwrap_or(Duration::MAX)
    };
    // The backoff never exceeds the ceiling of every duration, whatever an
    // unvalidated `backoff_max` says.
    let cap = leasehold_actors::clamp_duration(policy.backoff_max);
    let mut total = Duration::ZERO;
    for restart in 1..=policy.max_restarts {
        let backoff = policy.backoff(restart);
        if backoff >= cap {
            let remaining = policy.max_restarts - restart + 1;
            return total.saturating_add(longest(cap).saturating_mul(remaining));
        }
        total = total.saturating_add(longest(backoff));
    }
    total
}

impl super::Config {
    /// The timing arithmetic of a `kind` operation under this configuration.
    pub fn timing(&self, kind: LeaseKind) -> Timing {
        let lease = self.lease(kind);
        let restart = self.engine_config().restart;
        let first_evaluation = lease.saturating_mul(self.free_renewals.value.saturating_add(1));
        let renewal_cap = lease.saturating_mul(self.max_renewals.value.saturating_add(1));
        let attempts = restart.max_restarts.saturating_add(1);
        let backoffs = longest_backoffs(&restart);
        let worst_case = renewal_cap
            .saturating_mul(attempts)
            .saturating_add(backoffs);
        Timing {
            kind,
            lease,
            free_renewals_until: first_evaluation,
            first_evaluation,
            renewal_cap,
            attempts,
            backoffs,
            worst_case,
        }
    }

    /// [`Self::timing`] of every lease kind, in [`LeaseKind::ALL`] order.
    pub fn timings(&self) -> Vec<Timing> {
        LeaseKind::ALL.into_iter().map(|k| self.timing(k)).collect()
    }
}
