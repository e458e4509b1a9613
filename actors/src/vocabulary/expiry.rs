//! What a lease and its watchdog say to each other: the expiry a lease
//! asks about, and where the verdict goes.

use std::sync::Arc;

use crate::vocabulary::evidence::EvidenceSummary;
use crate::vocabulary::lease::LeaseMeta;
use crate::vocabulary::verdict::{DecidedBy, Decision};

/// A lease that expired, whose policy left the verdict to the evaluator.
#[derive(Clone, Debug)]
pub struct LeaseExpiry {
    /// The lease's identity and settings.
    pub meta: Arc<LeaseMeta>,
    /// Renewals so far (by `load` aside), as the verdict's record gives
    /// them.
    pub renewals: u32,
    /// Those that count toward the cap: renewals on strong evidence do not.
    /// What the evaluator is shown, beside the cap.
    pub counted: u32,
    /// The cap now: the lease's own, raised by each checkpoint at it.
    pub max_renewals: u32,
    /// Consecutive renewals so far decided on evidence alone.
    pub evidence_renewals: u32,
    /// The evidence as the lease judged it.
    pub evidence: EvidenceSummary,
    /// The tail of a stream's text, if the operation streams.
    pub stream_tail: Option<String>,
    /// Whether the lease expired before its period's end because its
    /// evidence became suspicious (see
    /// the policy's `Expiry::early`).
    pub early: bool,
}

/// Where a verdict goes. Called exactly once: if it is dropped unanswered
/// (the watchdog went away), it answers `RENEW` by the breaker, so a lease
/// can never wait forever for a verdict.
pub type VerdictReply = crate::reply::Reply<Decision>;

impl crate::reply::Unanswered for Decision {
    fn unanswered() -> Self {
        Decision::renew(
            DecidedBy::Breaker,
            "the watchdog dropped the request unanswered",
        )
    }
}

/// The watchdog's messages.
#[derive(Debug)]
pub enum WatchdogMsg {
    /// Ask the evaluator about an expired lease and reply with its verdict.
    Assess(Box<(LeaseExpiry, VerdictReply)>),
}
