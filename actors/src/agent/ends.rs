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

/// A pause's reason and the way out of it as one sentence: `reason` keeps
/// its words and loses the closing periods (a server's message often ends
/// in one), then `resume to try again` and `how` follow it after a
/// semicolon, and one period ends it all.
pub(crate) fn resume_to_try_again(reason: &str, how: &str) -> String {
    let reason = reason.trim_end().trim_end_matches('.').trim_end();
    let how = if how.is_empty() {
        String::new()
    } else {
        format!(" {how}")
    };
    if reason.is_empty() {
        format!("Resume to try again{how}.")
    } else if reason.ends_with(['!', '?']) {
        format!("{reason} Resume to try again{how}.")
    } else {
        format!("{reason}; resume to try again{how}.")
    }
}

#[cfg(test)]
mod tests {
    use super::resume_to_try_again;

    #[test]
    fn a_reason_without_a_period_gains_the_way_out_and_one_period() {
        assert_eq!(
            resume_to_try_again("HTTP 503 Service Unavailable", ""),
            "HTTP 503 Service Unavailable; resume to try again."
        );
    }

    #[test]
    fn a_reason_ending_with_periods_or_spaces_ends_with_one_period() {
        for reason in [
            "HTTP 503 Service Unavailable: Service unavailable.",
            "HTTP 503 Service Unavailable: Service unavailable..",
            "HTTP 503 Service Unavailable: Service unavailable. \n",
            "HTTP 503 Service Unavailable: Service unavailable ",
        ] {
            assert_eq!(
                resume_to_try_again(reason, ""),
                "HTTP 503 Service Unavailable: Service unavailable; resume to try again.",
                "{reason:?}"
            );
        }
    }

    #[test]
    fn a_reason_ending_as_an_exclamation_or_a_question_keeps_it() {
        assert_eq!(
            resume_to_try_again("the server said: overloaded!", ""),
            "the server said: overloaded! Resume to try again."
        );
        assert_eq!(
            resume_to_try_again("is the server up?", ""),
            "is the server up? Resume to try again."
        );
    }

    #[test]
    fn how_to_resume_follows_the_way_out() {
        assert_eq!(
            resume_to_try_again(
                "the server said: context too long.",
                "with guidance, or once the model's context is larger"
            ),
            "the server said: context too long; resume to try again with guidance, \
             or once the model's context is larger."
        );
    }

    #[test]
    fn an_empty_reason_is_the_way_out_alone() {
        assert_eq!(resume_to_try_again(" . ", ""), "Resume to try again.");
    }
}
