//! The terms of a lease: the policy that judges its expiries and the
//! numbers it judges them by, resolved once per run and lease kind.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::supervision::evidence::accrual::{AccrualConfig, AccrualPolicy};
use crate::supervision::policy::{Expiry, LeaseholdPolicy, VerdictPolicy};
use crate::vocabulary::evidence::EvidenceSummary;
use crate::vocabulary::lease::{LeaseKind, LeaseMeta};

/// The renewal cap by default (`lease.max_renewals`).
pub const DEFAULT_MAX_RENEWALS: u32 = 10;
/// Free renewals on the ladder by default (`watchdog.free_renewals`).
pub const DEFAULT_FREE_RENEWALS: u32 = 2;
/// Renewals on evidence alone in a row by default
/// (`watchdog.evidence_renewals`).
pub const DEFAULT_EVIDENCE_RENEWALS: u32 = 3;
/// The repetition threshold by default (`watchdog.repetition_threshold`).
pub const DEFAULT_REPETITION_THRESHOLD: f64 = 0.5;
pub use crate::vocabulary::lease::DEFAULT_CEILING;

/// Everything an expiry of a lease is judged by: its verdict policy, the
/// renewal cap, the ladder, the evidence streak and the thresholds of its
/// evidence. Resolved once — per run and lease kind by the engine, from
/// the configuration with the flow's overrides over it
/// ([`WatchdogConfig::terms`](crate::WatchdogConfig::terms)); per lease
/// actor for leases started without terms — and shared by every lease of that run
/// and kind, so that no override is resolved twice or in two places.
#[derive(Clone)]
pub struct LeaseTerms {
    /// The policy that judges each expiry.
    pub policy: Arc<dyn VerdictPolicy>,
    /// The renewal cap: the expiry after this many renewals ends the
    /// operation.
    pub max_renewals: u32,
    /// Expiries renewed without asking the evaluator (the ladder).
    pub free_renewals: u32,
    /// Renewals on evidence alone in a row before the evaluator is asked
    /// anyway.
    pub evidence_renewals: u32,
    /// The accrual detector's parameters for this kind (its phi threshold
    /// among them).
    pub accrual: AccrualConfig,
    /// The share of repeated n-grams above which evidence is suspicious.
    pub repetition_threshold: f64,
    /// The longest the operation may work, pauses excluded, however fresh
    /// its evidence: renewals on strong evidence do not count toward the
    /// cap, so this is what bounds an operation that keeps converging. At
    /// the ceiling the lease escalates: a person decides. A ceiling of
    /// [`MAX_DURATION`](crate::MAX_DURATION) (30 days) is none.
    pub ceiling: Duration,
}

impl LeaseTerms {
    /// The terms of a `kind` lease by default: the leasehold policy, a cap
    /// of [`DEFAULT_MAX_RENEWALS`], [`DEFAULT_FREE_RENEWALS`],
    /// [`DEFAULT_EVIDENCE_RENEWALS`], the kind's default accrual parameters
    /// and [`DEFAULT_REPETITION_THRESHOLD`].
    pub fn new(kind: LeaseKind) -> Self {
        Self {
            policy: Arc::new(LeaseholdPolicy),
            max_renewals: DEFAULT_MAX_RENEWALS,
            free_renewals: DEFAULT_FREE_RENEWALS,
            evidence_renewals: DEFAULT_EVIDENCE_RENEWALS,
            accrual: *AccrualPolicy::default().for_kind(kind),
            repetition_threshold: DEFAULT_REPETITION_THRESHOLD,
            ceiling: DEFAULT_CEILING,
        }
    }

    /// These terms with a ceiling of `ceiling`.
    #[must_use]
    pub fn with_ceiling(self, ceiling: Duration) -> Self {
        Self { ceiling, ..self }
    }

    /// These terms with `policy`.
    #[must_use]
    pub fn with_policy(self, policy: Arc<dyn VerdictPolicy>) -> Self {
        Self { policy, ..self }
    }

    /// These terms with a renewal cap of `max_renewals`.
    #[must_use]
    pub fn with_max_renewals(self, max_renewals: u32) -> Self {
        Self {
            max_renewals,
            ..self
        }
    }

    /// These terms with `free_renewals` on the ladder.
    #[must_use]
    pub fn with_free_renewals(self, free_renewals: u32) -> Self {
        Self {
            free_renewals,
            ..self
        }
    }

    /// These terms with at most `evidence_renewals` renewals on evidence
    /// alone in a row.
    #[must_use]
    pub fn with_evidence_renewals(self, evidence_renewals: u32) -> Self {
        Self {
            evidence_renewals,
            ..self
        }
    }

    /// What the policy sees of an expiry of the lease `meta`, renewed
    /// `renewals` times, the last `doubts` of them in doubt and
    /// `evidence_renewals` in a row on evidence, with `evidence` judged now,
    /// `new_items` of its items since the previous expiry.
    pub fn expiry<'a>(
        &self,
        meta: &LeaseMeta,
        (renewals, doubts): (u32, u32),
        evidence_renewals: u32,
        (evidence, new_items): (&'a EvidenceSummary, u64),
        early: bool,
    ) -> Expiry<'a> {
        Expiry {
            early,
            kind: meta.kind,
            lease: meta.duration,
            renewals,
            doubts,
            max_renewals: self.max_renewals,
            free_renewals: self.free_renewals,
            evidence,
            new_items,
            phi_threshold: self.accrual.threshold,
            evidence_renewals,
            max_evidence_renewals: self.evidence_renewals,
            repetition_threshold: self.repetition_threshold,
        }
    }
}

impl fmt::Debug for LeaseTerms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseTerms")
            .field("policy", &self.policy.name())
            .field("max_renewals", &self.max_renewals)
            .field("free_renewals", &self.free_renewals)
            .field("evidence_renewals", &self.evidence_renewals)
            .field("accrual", &self.accrual)
            .field("repetition_threshold", &self.repetition_threshold)
            .field("ceiling", &self.ceiling)
            .finish()
    }
}

/// The terms of each lease kind, resolved.
#[derive(Clone, Debug)]
pub struct TermsByKind([Arc<LeaseTerms>; 4]);

impl TermsByKind {
    /// Each kind's terms, made by `terms`.
    pub fn from_fn(mut terms: impl FnMut(LeaseKind) -> LeaseTerms) -> Self {
        Self(LeaseKind::ALL.map(|kind| Arc::new(terms(kind))))
    }

    /// The terms of `kind`.
    pub fn get(&self, kind: LeaseKind) -> &Arc<LeaseTerms> {
        let index = LeaseKind::ALL
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_default();
        &self.0[index]
    }

    /// The terms of a `kind` lease capped at `max_renewals`: `kind`'s own
    /// when its cap is that, else a copy with that cap.
    pub fn capped(&self, kind: LeaseKind, max_renewals: u32) -> Arc<LeaseTerms> {
        let terms = self.get(kind);
        if terms.max_renewals == max_renewals {
            terms.clone()
        } else {
            Arc::new(LeaseTerms::clone(terms).with_max_renewals(max_renewals))
        }
    }
}

impl Default for TermsByKind {
    fn default() -> Self {
        Self::from_fn(LeaseTerms::new)
    }
}
