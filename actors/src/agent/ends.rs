//! How a child's end reads: in events, in error results, from a lease.

use crate::event::CallOutcome;
use crate::supervision::lease::LeaseError;
use crate::supervision::strategy::ChildEnd;

/// How a child's end reads in a restart event or an error result.
pub(crate) fn describe_end(end: &ChildEnd) -> String {
    match end {
        ChildEnd::Completed => "completed".to_owned(),
        ChildEnd::Intervened { reason } => format!("intervened: {reason}"),
        ChildEnd::Escalated { reason, .. } => format!("escalated: {reason}"),
        ChildEnd::Failed { reason, .. } => format!("failed: {reason}"),
        ChildEnd::Panicked { message } => format!("panicked: {message}"),
        ChildEnd::Capped { max_renewals } => {
            format!("stopped by the renewal cap (max_renewals = {max_renewals})")
        }
    }
}

/// The event outcome of a child's end.
pub(crate) fn call_outcome(end: &ChildEnd) -> CallOutcome {
    match end {
        ChildEnd::Completed => CallOutcome::Ok,
        ChildEnd::Intervened { .. } => CallOutcome::Intervened,
        ChildEnd::Escalated { .. } => CallOutcome::Escalated,
        ChildEnd::Failed { .. } => CallOutcome::Error,
        ChildEnd::Panicked { .. } => CallOutcome::Panicked,
        ChildEnd::Capped { .. } => CallOutcome::Capped,
    }
}

/// A lease's end as a child's end; `None` when the parent cancelled it.
pub(crate) fn lease_end(error: LeaseError) -> Option<ChildEnd> {
    match error {
        LeaseError::Intervened { reason } => Some(ChildEnd::Intervened { reason }),
        LeaseError::Escalated { reason, evidence } => Some(ChildEnd::Escalated {
            reason,
            evidence: Some(*evidence),
        }),
        LeaseError::RenewalCapReached { max_renewals } => Some(ChildEnd::Capped { max_renewals }),
        LeaseError::Panicked { message } => Some(ChildEnd::Panicked { message }),
        LeaseError::Cancelled => None,
        LeaseError::LeaseActorGone => Some(ChildEnd::Failed {
            reason: "the run's lease actor is gone".to_owned(),
            retryable: false,
        }),
    }
}
