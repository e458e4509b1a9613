//! The sender's side of a forwarded control: following the run through
//! the store (its change feed, and its record and log read again on each
//! change) until the control has taken effect, the owner refused it, or
//! the run ended first — within a patience, since an owner that hangs
//! never takes it (its lease then expires, and the run can be claimed).

use std::time::Duration;

use leasehold_actors::{
    Event, EventKind, ReconcileDecision, RunCommand, RunRecord, RunStatus, Store, StoreError,
};

/// How often the run is read again when no change is heard of: a feed
/// that missed one costs at most this.
const REREAD: Duration = Duration::from_secs(1);

/// What became of a forwarded control.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It took effect: the run's status now.
    TookEffect(RunStatus),
    /// The owner refused it: why, as its `control_refused` event says.
    Refused(String),
    /// The run ended otherwise before it took effect.
    EndedFirst(RunStatus),
    /// Nothing was seen of it within the patience.
    NotSeen,
}

/// Follows `sent` (the run's record when the control was sent) until
/// `command` has taken effect, within `patience`, handing each event of
/// the run after `after_seq` to `on_event` as it is read.
pub async fn watch(
    store: &dyn Store,
    command: &RunCommand,
    sent: &RunRecord,
    after_seq: u64,
    patience: Duration,
    mut on_event: impl FnMut(&Event),
) -> Result<Outcome, StoreError> {
    let run_id = sent.run_id.as_str();
    let deadline = leasehold_actors::deadline_after(tokio::time::Instant::now(), patience);
    // Subscribed before the first read: a change after it wakes this.
    let mut changes = store.changes();
    let mut seen = after_seq;
    loop {
        let events = store.load_events(run_id, seen).await?;
        let mut refused = None;
        for event in &events {
            seen = seen.max(event.seq);
            on_event(event);
            if let EventKind::ControlRefused {
                command: name,
                reason,
            } = &event.kind
                && name == super::name(command)
            {
                refused = Some(reason.clone());
            }
        }
        if let Some(reason) = refused {
            return Ok(Outcome::Refused(reason));
        }
        let resumed = events.iter().any(|e| shows_effect(command, &e.kind));
        if let Some(record) = store.load_run(run_id).await?
            && let Some(outcome) = took_effect(command, sent, &record, resumed)
        {
            return Ok(outcome);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(Outcome::NotSeen);
        }
        let wait = deadline.saturating_duration_since(now).min(REREAD);
        if let Ok(None) = tokio::time::timeout(wait, changes.changed(run_id)).await {
            // The store is gone: what is read now is all there will be.
            return Ok(Outcome::NotSeen);
        }
    }
}

/// Whether `event` says that `command` was applied: a `resumed` for a
/// resume, a person's verdict on the lease for an act on a lease.
fn shows_effect(command: &RunCommand, event: &EventKind) -> bool {
    match (command, event) {
        (RunCommand::Resume { .. }, EventKind::Resumed { .. }) => true,
        (RunCommand::Message { text, .. }, EventKind::MessageReceived { text: got, .. }) => {
            got == text
        }
        (RunCommand::Lease { lease_id, .. }, EventKind::Verdict(record)) => {
            record.lease_id == *lease_id && record.decided_by == leasehold_actors::DecidedBy::Person
        }
        _ => false,
    }
}

/// Whether `command`, sent when the run was `sent`, shows as taken effect
/// in `now` (or in an event since that says so: [`shows_effect`]).
fn took_effect(
    command: &RunCommand,
    sent: &RunRecord,
    now: &RunRecord,
    resumed: bool,
) -> Option<Outcome> {
    let status = now.status;
    let cancels = matches!(
        command,
        RunCommand::Cancel { .. }
            | RunCommand::Reconcile {
                decision: ReconcileDecision::Cancel,
                ..
            }
    );
    if status.is_terminal() {
        return Some(if cancels && status == RunStatus::Cancelled {
            Outcome::TookEffect(status)
        } else {
            Outcome::EndedFirst(status)
        });
    }
    match command {
        RunCommand::Cancel { .. } => None,
        RunCommand::Resume { .. } | RunCommand::Lease { .. } | RunCommand::Message { .. } => {
            resumed.then_some(Outcome::TookEffect(status))
        }
        RunCommand::Pause { .. } => status.is_paused().then_some(Outcome::TookEffect(status)),
        RunCommand::Reconcile { key, .. } => {
            let names = |r: &RunRecord| {
                r.pause
                    .as_ref()
                    .and_then(|p| p.call.as_ref())
                    .is_some_and(|c| &c.key == key)
            };
            // Decided: the run no longer waits for a decision, or, while
            // other calls still wait, its pause no longer names this one.
            let decided =
                status != RunStatus::ReconciliationRequired || (names(sent) && !names(now));
            (decided && !cancels).then_some(Outcome::TookEffect(status))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: RunStatus) -> RunRecord {
        RunRecord {
            trace_parent: None,
            tenant: None,
            run_id: "r".into(),
            flow: serde_json::json!({}),
            status,
            owner_id: Some("a".into()),
            fence: 1,
            lease_expires_at_ms: 0,
            reason: None,
            answer: None,
            pause: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            fork: None,
        }
    }

    #[test]
    fn a_cancel_takes_effect_when_the_run_is_cancelled_and_not_when_it_completed_first() {
        let cancel = RunCommand::Cancel { reason: "r".into() };
        let sent = record(RunStatus::Running);
        assert_eq!(
            took_effect(&cancel, &sent, &record(RunStatus::Running), false),
            None
        );
        assert_eq!(
            took_effect(&cancel, &sent, &record(RunStatus::Cancelled), false),
            Some(Outcome::TookEffect(RunStatus::Cancelled))
        );
        assert_eq!(
            took_effect(&cancel, &sent, &record(RunStatus::Completed), false),
            Some(Outcome::EndedFirst(RunStatus::Completed))
        );
    }

    #[test]
    fn a_resume_takes_effect_with_its_resumed_event() {
        let resume = RunCommand::Resume { guidance: None };
        let sent = record(RunStatus::WaitingHuman);
        assert_eq!(
            took_effect(&resume, &sent, &record(RunStatus::WaitingHuman), false),
            None
        );
        assert_eq!(
            took_effect(&resume, &sent, &record(RunStatus::Running), true),
            Some(Outcome::TookEffect(RunStatus::Running))
        );
    }
}
