//! How a supervised operation ended, when it did not return its own result.

use super::protocol::LeaseEnd;

/// How a supervised operation ended, when it did not return its own result.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The watchdog said `INTERVENE`: the operation was cancelled and goes to
    /// the restart strategy.
    #[error("intervened: {reason}")]
    Intervened {
        /// The verdict's reason.
        reason: String,
    },
    /// The watchdog said `ESCALATE`: the operation was cancelled and the run
    /// must wait for a person.
    #[error("escalated: {reason}")]
    Escalated {
        /// The verdict's reason.
        reason: String,
        /// The evidence when it escalated: what a person is shown.
        evidence: Box<crate::vocabulary::evidence::EvidenceSummary>,
    },
    /// The lease was renewed `max_renewals` times and expired again.
    #[error(
        "lease renewal cap reached: expired again after {max_renewals} renewals (max_renewals = {max_renewals})"
    )]
    RenewalCapReached {
        /// The cap.
        max_renewals: u32,
    },
    /// The operation's parent (or its owner) cancelled it.
    #[error("cancelled by its parent")]
    Cancelled,
    /// The operation panicked.
    #[error("the operation panicked: {message}")]
    Panicked {
        /// The panic's message.
        message: String,
    },
    /// The lease actor is not running, so the operation was not started.
    #[error("the lease actor is not running")]
    LeaseActorGone,
}

impl From<LeaseEnd> for LeaseError {
    fn from(end: LeaseEnd) -> Self {
        match end {
            LeaseEnd::Intervened(reason) => Self::Intervened { reason },
            LeaseEnd::Escalated(reason, evidence) => Self::Escalated {
                reason,
                evidence: Box::new(evidence),
            },
            LeaseEnd::RenewalCapReached(max_renewals) => Self::RenewalCapReached { max_renewals },
        }
    }
}
