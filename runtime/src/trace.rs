//! A run's decisions, counted: how many verdicts each decider made, how
//! many of each verdict, evaluator calls, budget decisions, restarts and
//! pauses, and the events its full log counted instead of storing. The API's `GET /runs/{id}/trace`, `leasehold runs trace` and the
//! demo's summary all count the same way, here.

use std::collections::BTreeMap;

use leasehold_actors::{Event, EventKind};
use serde::{Deserialize, Serialize};

/// Counts of a run's decisions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TraceSummary {
    /// Verdicts in all.
    pub verdicts: usize,
    /// Verdicts by who decided (`ladder`, `evidence`, `evaluator`,
    /// `breaker`, `cap`, `policy`, `load`).
    pub verdicts_by_decider: BTreeMap<String, usize>,
    /// Verdicts by verdict (`RENEW`, `NUDGE`, `INTERVENE`, `ESCALATE`).
    pub verdicts_by_verdict: BTreeMap<String, usize>,
    /// Evaluator calls made, for verdicts and for budget checkpoints.
    pub evaluator_calls: usize,
    /// Budget extensions granted.
    pub extensions: usize,
    /// Budget checkpoints that made a loop wrap up.
    pub wrap_ups: usize,
    /// Restarts.
    pub restarts: usize,
    /// Operations intervened: by an `INTERVENE` verdict, the renewal cap's
    /// included, so that it agrees with `verdicts_by_verdict`.
    pub intervened: usize,
    /// Operations escalated.
    pub escalated: usize,
    /// Pauses for a person (escalations and reconciliations).
    pub pauses: usize,
    /// Events the run's full log counted instead of storing, by kind (from
    /// its `events_dropped` events); empty when none were.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub events_dropped: BTreeMap<String, u64>,
}

impl TraceSummary {
    /// Counts the decisions among `events`.
    pub fn of<'a>(events: impl IntoIterator<Item = &'a Event>) -> Self {
        let mut summary = Self::default();
        for event in events {
            summary.count(&event.kind);
        }
        summary
    }

    fn count(&mut self, kind: &EventKind) {
        match kind {
            EventKind::Verdict(record) => {
                self.verdicts += 1;
                *self
                    .verdicts_by_decider
                    .entry(record.decided_by.as_str().to_owned())
                    .or_default() += 1;
                *self
                    .verdicts_by_verdict
                    .entry(record.verdict.as_str().to_owned())
                    .or_default() += 1;
                self.evaluator_calls += usize::from(record.evaluator.is_some());
            }
            EventKind::BudgetExtended(record) => {
                self.extensions += 1;
                self.evaluator_calls += usize::from(record.evaluator.is_some());
            }
            EventKind::BudgetExhausted(record) => {
                self.wrap_ups += 1;
                self.evaluator_calls += usize::from(record.evaluator.is_some());
            }
            EventKind::Restarted { .. } => self.restarts += 1,
            EventKind::Intervened { .. } | EventKind::RenewalCapReached { .. } => {
                self.intervened += 1;
            }
            EventKind::Escalated { .. } => self.escalated += 1,
            EventKind::Paused { .. } | EventKind::ReconciliationRequired { .. } => {
                self.pauses += 1;
            }
            EventKind::EventsDropped { dropped, .. } => {
                for (kind, n) in dropped {
                    let total = self.events_dropped.entry(kind.clone()).or_default();
                    *total = total.saturating_add(*n);
                }
            }
            _ => {}
        }
    }
}

/// Whether an event of `kind` is a decision, or the consequence of one, and
/// belongs in a run's trace.
pub fn is_decision(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Verdict(_)
            | EventKind::BudgetExtended(_)
            | EventKind::BudgetExhausted(_)
            | EventKind::Restarted { .. }
            | EventKind::GaveUp { .. }
            | EventKind::ContextOverflow { .. }
            | EventKind::Paused { .. }
            | EventKind::ReconciliationRequired { .. }
            | EventKind::Intervened { .. }
            | EventKind::Escalated { .. }
            | EventKind::RenewalCapReached { .. }
            | EventKind::NudgeQueued { .. }
            | EventKind::VerdictDropped { .. }
            | EventKind::Resumed { .. }
            | EventKind::RunResumed { .. }
            | EventKind::ControlRefused { .. }
            | EventKind::MessageReceived { .. }
    )
}
