//! The timing arithmetic of a lease kind: when the first evaluation happens,
//! when the renewal cap cuts, how many attempts the restart strategy allows
//! and the worst-case wall time. Pure arithmetic on durations, saturating
//! rather than overflowing, so any configuration gives an answer.
//!
//! The worst case is a bound, not an estimate: it follows a silent operation
//! through the code that supervises it. Its lease expires `max_renewals + 1`
//! times per attempt; the first `free_renewals` expiries are renewed at once
//! by the ladder, each later one below the cap waits for the evaluator, up to
//! `evaluator_timeout`, before the lease is re-armed (the breaker renews on a
//! timeout); the expiry after the `max_renewals`-th renewal is cut by the cap.
//! Each of the `1 + restart.max_restarts` attempts can run that long, and before each
//! restart the strategy waits its backoff, at most the top of its jitter.
//! tokio's timers count whole milliseconds, so every wait is rounded up to
//! one.
//!
//! That is the default verdict policy's arithmetic (`watchdog.policy =
//! leasehold`). The others change two terms: `always_evaluate` has no free
//! renewals; `idle_kill` never asks the evaluator (an operation that keeps
//! reporting progress runs to the cap); `deadline` cuts every attempt at its
//! first expiry.

use std::fmt;
use std::time::Duration;

use leasehold_actors::{LeaseKind, Policies, PolicyName, RestartPolicy};

/// The worst case in words, as `leasehold config` prints it once above the
/// timing lines, so that a reader can check each line by hand.
pub const WORST_CASE_FORMULA: &str = "worst case = attempts × renewal cap + backoffs, where \
     renewal cap = (max_renewals + 1) × lease + evaluations × evaluator_timeout, evaluations = \
     max_renewals − free_renewals, attempts = 1 + restart.max_restarts, and each backoff is at the top \
     of its ±10 % jitter (the leasehold policy's; always_evaluate has no free renewals, \
     idle_kill no evaluations, deadline one lease per attempt). It bounds a silent operation; \
     one whose evidence stays fresh works at most lease.ceiling an attempt";

/// The arithmetic of one lease kind: what happens when, and how long an
/// operation of that kind can take at worst before the run fails or pauses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The lease kind.
    pub kind: LeaseKind,
    /// The verdict policy the arithmetic follows (a policy this binary does
    /// not know is counted as `leasehold` is: it may ask the evaluator).
    pub policy: PolicyName,
    /// The lease length.
    pub lease: Duration,
    /// Until when expiries are renewed on the ladder, whatever the evidence:
    /// `(free_renewals + 1) × lease`.
    pub free_renewals_until: Duration,
    /// When the evaluator is first asked, if the operation is still going:
    /// `(free_renewals + 1) × lease`.
    pub first_evaluation: Duration,
    /// The lease periods of one attempt that runs to the cap:
    /// `max_renewals + 1`.
    pub lease_periods: u64,
    /// The expiries of one attempt that ask the evaluator, each waiting up
    /// to [`Self::evaluator_timeout`] before the lease is re-armed:
    /// `max_renewals − free_renewals`, none when every renewal is free.
    pub evaluations: u32,
    /// The evaluator's flat timeout, the longest one evaluation can take.
    pub evaluator_timeout: Duration,
    /// When, at the latest, the renewal cap stops an attempt, which is the
    /// longest an attempt can last: `lease_periods × lease + evaluations ×
    /// evaluator_timeout`.
    pub renewal_cap: Duration,
    /// Attempts the restart strategy allows: `1 + restart.max_restarts`.
    pub attempts: u32,
    /// The backoffs between those attempts, each at the top of its jitter.
    pub backoffs: Duration,
    /// `attempts × renewal_cap + backoffs`: no silent operation of this kind
    /// is given up later, counted from when it fell silent.
    pub worst_case: Duration,
    /// `lease.ceiling`: the longest one attempt of an operation whose
    /// evidence stays fresh works (the cap does not count its renewals),
    /// before its lease escalates — plus, at most, an evaluator call in
    /// flight when it is reached.
    pub ceiling: Duration,
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !asks_the_evaluator(&self.policy) || self.evaluations == 0 {
            // No expiry asks the evaluator: its policy never does, or every
            // renewal before the cap is free.
            let why = if asks_the_evaluator(&self.policy) {
                format!("policy {}, every renewal free", self.policy)
            } else {
                format!("policy {}", self.policy)
            };
            return write!(
                f,
                "{}: lease {} · {why}, never evaluated · cut at {} ({} lease{}) · {} attempt{} \
                 · backoffs at most {} · worst case {} · ceiling {}",
                self.kind,
                compact(self.lease),
                compact(self.renewal_cap),
                self.lease_periods,
                if self.lease_periods == 1 { "" } else { "s" },
                self.attempts,
                if self.attempts == 1 { "" } else { "s" },
                compact(self.backoffs),
                compact(self.worst_case),
                compact(self.ceiling),
            );
        }
        write!(
            f,
            "{}: lease {} · free renewals until {} · first evaluation at {} · renewal cap at {} \
             ({} lease{} + {} evaluation{} of at most {}) · {} attempt{} · backoffs at most {} · \
             worst case {} · ceiling {}",
            self.kind,
            compact(self.lease),
            compact(self.free_renewals_until),
            compact(self.first_evaluation),
            compact(self.renewal_cap),
            self.lease_periods,
            if self.lease_periods == 1 { "" } else { "s" },
            self.evaluations,
            if self.evaluations == 1 { "" } else { "s" },
            compact(self.evaluator_timeout),
            self.attempts,
            if self.attempts == 1 { "" } else { "s" },
            compact(self.backoffs),
            compact(self.worst_case),
            compact(self.ceiling),
        )
    }
}

/// A duration the way the timing line writes it: `3h40m7s700ms`.
pub fn compact(duration: Duration) -> String {
    humantime::format_duration(duration)
        .to_string()
        .replace(' ', "")
}

/// How long a tokio timer set for `duration` waits at most: tokio counts
/// whole milliseconds and rounds a deadline up to the next one.
fn timer_wait(duration: Duration) -> Duration {
    let below_ms = duration.subsec_nanos() % 1_000_000;
    if below_ms == 0 {
        duration
    } else {
        duration.saturating_add(Duration::from_nanos(u64::from(1_000_000 - below_ms)))
    }
}

/// `duration × (count + 1)`, saturating: a count of `u32::MAX` is no
/// overflow.
fn one_more_than(count: u32, duration: Duration) -> Duration {
    duration.saturating_mul(count).saturating_add(duration)
}

/// The sum of the backoffs before every allowed restart, each at its longest
/// (the jitter's upper end, rounded up to tokio's millisecond). Restarts past
/// the point where the backoff reaches its maximum all wait the maximum, so
/// this never loops more than the doublings it takes to get there.
///
/// The strategy backs off by the number of restarts inside its window, at
/// most the restart's own number, and the backoff never shrinks as that
/// number grows: restart `k` waits at most `backoff(k)`.
pub(super) fn longest_backoffs(policy: &RestartPolicy) -> Duration {
    let stretch = 1.0 + policy.jitter.clamp(0.0, 1.0);
    let longest = |d: Duration| {
        timer_wait(leasehold_actors::clamp_duration(
            Duration::try_from_secs_f64(d.as_secs_f64() * stretch).unwrap_or(Duration::MAX),
        ))
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

/// Whether `policy` may ask the evaluator: a built-in says; any other may.
fn asks_the_evaluator(policy: &PolicyName) -> bool {
    Policies::builtin()
        .get(policy.as_str())
        .is_none_or(|policy| policy.asks_the_evaluator())
}

impl super::Config {
    /// The timing arithmetic of a `kind` operation under this configuration.
    pub fn timing(&self, kind: LeaseKind) -> Timing {
        let lease = self.lease(kind);
        let restart = self.engine_config().restart;
        let policy = self.watchdog_policy.value.name_for(kind).clone();
        let free = if policy == PolicyName::ALWAYS_EVALUATE {
            0
        } else {
            self.free_renewals.value
        };
        // A deadline cuts at the first expiry: the cap of one lease.
        let max = if policy == PolicyName::DEADLINE {
            0
        } else {
            self.max_renewals.value
        };
        let first_evaluation = one_more_than(free, lease);
        let lease_periods = u64::from(max) + 1;
        // The expiries numbered `free` to `max - 1` (counting from 0) ask the
        // evaluator; expiry `max` is the cap's, and earlier ones are free.
        let evaluations = if asks_the_evaluator(&policy) {
            max.saturating_sub(free)
        } else {
            0
        };
        let evaluator_timeout = self.evaluator_timeout.value;
        let renewal_cap = one_more_than(max, timer_wait(lease))
            .saturating_add(timer_wait(evaluator_timeout).saturating_mul(evaluations));
        let attempts = restart.max_restarts.saturating_add(1);
        let backoffs = longest_backoffs(&restart);
        let worst_case = one_more_than(restart.max_restarts, renewal_cap).saturating_add(backoffs);
        Timing {
            kind,
            policy,
            lease,
            free_renewals_until: first_evaluation,
            first_evaluation,
            lease_periods,
            evaluations,
            evaluator_timeout,
            renewal_cap,
            attempts,
            backoffs,
            worst_case,
            ceiling: self.lease_ceiling.value,
        }
    }

    /// [`Self::timing`] of every lease kind, in [`LeaseKind::ALL`] order.
    pub fn timings(&self) -> Vec<Timing> {
        LeaseKind::ALL.into_iter().map(|k| self.timing(k)).collect()
    }
}
