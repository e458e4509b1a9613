//! Verdict policies: what an expired lease gets without a model call, and
//! when the evaluator is asked.
//!
//! A [`VerdictPolicy`] is a pure function from an expiry — the lease's kind
//! and length, its renewals so far and its cap, where it stands on the
//! ladder, its evidence (phi, age, repetition) and its streak of evidence
//! renewals — to a [`Judgement`]: a verdict, or "ask the evaluator". Both
//! the lease actor (which settles what it can without a round trip) and the
//! watchdog (which judges what reaches it) call the same policy, so the
//! renewal cap, the ladder and the evidence rung live here once. A policy
//! reads no clock and keeps no state: it is judged on paused time, and
//! swapped for an experiment by name ([`PolicyKind`]) in a flow
//! (`leases.policy`) or in the configuration (`watchdog.policy`).
//!
//! Four ship:
//!
//! - [`PolicyKind::Leasehold`], the default: the renewal cap intervenes;
//!   a lease whose evidence turns suspicious against its learned pace
//!   expires early, past the ladder;
//!   the first `free_renewals` expiries renew (the ladder); a progress
//!   value that rose since the last expiry, within its total, renews
//!   (`decided_by = progress`, with no streak limit: a counter advancing
//!   toward its total is the strongest evidence there is); fresh evidence
//!   (phi below threshold, not repetitive, fewer than `evidence_renewals`
//!   evidence renewals in a row) renews; anything else asks the evaluator.
//! - [`PolicyKind::Deadline`]: the first expiry intervenes, as a plain
//!   timeout would. The baseline every deadline-based runtime stands for.
//! - [`PolicyKind::IdleKill`]: an expiry intervenes when the operation has
//!   been silent for a whole lease (or said nothing at all), and renews
//!   otherwise, without ever asking the evaluator: an idle timeout that any
//!   sign from the peer resets — progress, or a keep-alive — as a read
//!   timeout, or LangGraph's idle timeout with a heartbeat per chunk, is.
//! - [`PolicyKind::AlwaysEvaluate`]: no free renewals, no evidence rung;
//!   every expiry below the cap asks the evaluator.
//!
//! Every built-in intervenes at the renewal cap ([`renewal_cap`]): however
//! lenient a policy is, an operation is bounded.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::evidence::EvidenceSummary;
use crate::lease::LeaseKind;
use crate::verdict::{DecidedBy, Decision, Verdict};

/// What a verdict policy sees of one expiry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Expiry<'a> {
    /// Whether the lease expired before its period's end, because its
    /// evidence became suspicious against its learned pace (only for a
    /// policy whose [`VerdictPolicy::expires_early`] says so): the ladder
    /// does not apply to it.
    pub early: bool,
    /// What the lease watches.
    pub kind: LeaseKind,
    /// One lease period.
    pub lease: Duration,
    /// Renewals so far.
    pub renewals: u32,
    /// The renewal cap: the expiry after this many renewals ends the
    /// operation.
    pub max_renewals: u32,
    /// How many expiries the ladder renews for free.
    pub free_renewals: u32,
    /// The evidence, judged now.
    pub evidence: &'a EvidenceSummary,
    /// phi at or above which evidence is suspicious, for this kind.
    pub phi_threshold: f64,
    /// Renewals decided on evidence alone, in a row, before this expiry.
    pub evidence_renewals: u32,
    /// How many of those may follow each other before the evaluator is
    /// asked anyway.
    pub max_evidence_renewals: u32,
    /// The share of repeated n-grams above which evidence is suspicious.
    pub repetition_threshold: f64,
}

/// A policy's answer to an expiry.
#[derive(Clone, Debug, PartialEq)]
pub enum Judgement {
    /// This verdict, with who decided it and why.
    Decided(Decision),
    /// The policy cannot tell: the evaluator is asked (and, if it fails or
    /// there is none, the breaker renews).
    AskEvaluator,
}

/// A verdict policy: users run supervision experiments by implementing this
/// (or by choosing a [`PolicyKind`]).
pub trait VerdictPolicy: Send + Sync + fmt::Debug + 'static {
    /// The policy's name, as in configuration and flows.
    fn name(&self) -> &str;

    /// Judges one expiry. Pure: the same expiry gets the same judgement.
    fn judge(&self, expiry: &Expiry<'_>) -> Judgement;

    /// Whether a lease under this policy expires before its period's end
    /// when its evidence becomes suspicious (phi at its threshold) against
    /// a history — its pace key's learned pace, or enough items of its own.
    /// The period stays the bound for operations with no history. `false`
    /// by default: a baseline (a deadline, an idle timeout) keeps its
    /// period.
    fn expires_early(&self) -> bool {
        false
    }
}

/// The renewal cap, shared by every built-in policy: once a lease has been
/// renewed `max_renewals` times, its next expiry intervenes
/// (`decided_by = cap`), and the lease ends the operation as capped.
pub fn renewal_cap(expiry: &Expiry<'_>) -> Option<Judgement> {
    (expiry.renewals >= expiry.max_renewals).then(|| {
        Judgement::Decided(Decision {
            verdict: Verdict::Intervene,
            reason: format!(
                "renewal cap reached: max_renewals = {}",
                expiry.max_renewals
            ),
            nudge: None,
            decided_by: DecidedBy::Cap,
        })
    })
}

/// The default: cap, ladder, evidence, then the evaluator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseholdPolicy;

impl VerdictPolicy for LeaseholdPolicy {
    fn name(&self) -> &str {
        PolicyKind::Leasehold.as_str()
    }

    fn expires_early(&self) -> bool {
        true
    }

    fn judge(&self, expiry: &Expiry<'_>) -> Judgement {
        if let Some(capped) = renewal_cap(expiry) {
            return capped;
        }
        if !expiry.early && expiry.renewals < expiry.free_renewals {
            return Judgement::Decided(Decision::renew(
                DecidedBy::Ladder,
                format!(
                    "free renewal {} of {}",
                    expiry.renewals + 1,
                    expiry.free_renewals
                ),
            ));
        }
        let evidence = expiry.evidence;
        if let Some(progress) = evidence.progress.filter(|p| p.advanced) {
            return Judgement::Decided(Decision::renew(
                DecidedBy::Progress,
                format!(
                    "progress advanced{} to {}{}",
                    progress
                        .previous
                        .map(|before| format!(" from {before}"))
                        .unwrap_or_default(),
                    progress.value,
                    progress
                        .total
                        .map(|total| format!(" of {total}"))
                        .unwrap_or_default(),
                ),
            ));
        }
        let repetitive = evidence
            .repetition
            .is_some_and(|share| share > expiry.repetition_threshold);
        let streak_left = expiry.evidence_renewals < expiry.max_evidence_renewals;
        match evidence.phi {
            Some(phi)
                if evidence.count > 0
                    && phi < expiry.phi_threshold
                    && !repetitive
                    && streak_left =>
            {
                Judgement::Decided(Decision::renew(
                    DecidedBy::Evidence,
                    format!(
                        "evidence is fresh: phi {phi:.2} below {:.1}, {} items, last {} ms ago; \
                         evidence renewal {} of {} in a row",
                        expiry.phi_threshold,
                        evidence.count,
                        evidence.last_progress_age_ms.unwrap_or_default(),
                        expiry.evidence_renewals + 1,
                        expiry.max_evidence_renewals
                    ),
                ))
            }
            _ => Judgement::AskEvaluator,
        }
    }
}

/// The first expiry intervenes, as a plain timeout would.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeadlinePolicy;

impl VerdictPolicy for DeadlinePolicy {
    fn name(&self) -> &str {
        PolicyKind::Deadline.as_str()
    }

    fn judge(&self, expiry: &Expiry<'_>) -> Judgement {
        if let Some(capped) = renewal_cap(expiry) {
            return capped;
        }
        Judgement::Decided(Decision {
            verdict: Verdict::Intervene,
            reason: format!(
                "deadline: the operation outlived its {} ms",
                expiry.lease.as_millis()
            ),
            nudge: None,
            decided_by: DecidedBy::Policy,
        })
    }
}

/// Intervenes once the evidence has been silent for a whole lease; renews
/// otherwise; never asks the evaluator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdleKillPolicy;

impl VerdictPolicy for IdleKillPolicy {
    fn name(&self) -> &str {
        PolicyKind::IdleKill.as_str()
    }

    fn judge(&self, expiry: &Expiry<'_>) -> Judgement {
        if let Some(capped) = renewal_cap(expiry) {
            return capped;
        }
        let lease_ms = u64::try_from(expiry.lease.as_millis()).unwrap_or(u64::MAX);
        // Any sign from the peer resets an idle timeout, a keep-alive too:
        // as a socket's read timeout, or a heartbeat per chunk, would.
        let evidence = expiry.evidence;
        let heard = match (evidence.last_progress_age_ms, evidence.keepalive_age_ms) {
            (Some(progress), Some(keepalive)) => Some(progress.min(keepalive)),
            (progress, keepalive) => progress.or(keepalive),
        };
        let decision = match heard {
            Some(age) if age < lease_ms => Decision::renew(
                DecidedBy::Policy,
                format!("idle-kill: progress {age} ms ago, within the {lease_ms} ms lease"),
            ),
            Some(age) => Decision {
                verdict: Verdict::Intervene,
                reason: format!("idle-kill: no progress for {age} ms, a whole lease"),
                nudge: None,
                decided_by: DecidedBy::Policy,
            },
            None => Decision {
                verdict: Verdict::Intervene,
                reason: format!("idle-kill: no progress at all in the {lease_ms} ms lease"),
                nudge: None,
                decided_by: DecidedBy::Policy,
            },
        };
        Judgement::Decided(decision)
    }
}

/// No free renewals and no evidence rung: every expiry below the cap asks
/// the evaluator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlwaysEvaluatePolicy;

impl VerdictPolicy for AlwaysEvaluatePolicy {
    fn name(&self) -> &str {
        PolicyKind::AlwaysEvaluate.as_str()
    }

    fn judge(&self, expiry: &Expiry<'_>) -> Judgement {
        renewal_cap(expiry).unwrap_or(Judgement::AskEvaluator)
    }
}

/// A built-in policy, by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// [`LeaseholdPolicy`], the default.
    #[default]
    Leasehold,
    /// [`DeadlinePolicy`].
    Deadline,
    /// [`IdleKillPolicy`].
    IdleKill,
    /// [`AlwaysEvaluatePolicy`].
    AlwaysEvaluate,
}

impl PolicyKind {
    /// Every built-in, in a fixed order.
    pub const ALL: [Self; 4] = [
        Self::Leasehold,
        Self::Deadline,
        Self::IdleKill,
        Self::AlwaysEvaluate,
    ];

    /// Its name: `leasehold`, `deadline`, `idle_kill` or `always_evaluate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leasehold => "leasehold",
            Self::Deadline => "deadline",
            Self::IdleKill => "idle_kill",
            Self::AlwaysEvaluate => "always_evaluate",
        }
    }

    /// The policy itself.
    pub fn policy(self) -> &'static dyn VerdictPolicy {
        match self {
            Self::Leasehold => &LeaseholdPolicy,
            Self::Deadline => &DeadlinePolicy,
            Self::IdleKill => &IdleKillPolicy,
            Self::AlwaysEvaluate => &AlwaysEvaluatePolicy,
        }
    }

    /// Whether the policy ever asks the evaluator (the timing arithmetic
    /// counts evaluations only for those that do).
    pub fn asks_the_evaluator(self) -> bool {
        matches!(self, Self::Leasehold | Self::AlwaysEvaluate)
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| {
                ConfigError::new(
                    "watchdog.policy",
                    "leasehold, deadline, idle_kill or always_evaluate",
                    format_args!("{text:?}"),
                )
            })
    }
}
