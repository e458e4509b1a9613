//! What a recording says each peer did: read once from its events, then
//! played by the replay's peers.
//!
//! A call is played *invocation by invocation*: each `model_call_started`
//! or `tool_call_started` of the recording is one invocation of its peer,
//! in order, whichever executor made it; the lease events that follow it
//! on the call's path (its `operation_timed`, its truncated result) are
//! that invocation's. So an invocation cut by its executor's stop — which
//! leaves no `operation_timed` — keeps its place, and the one after it is
//! played with its own timing, not with its neighbour's.
//!
//! The evaluator's answers are kept lease path by lease path with how long
//! each took and whether the breaker gave it (an evaluator that failed,
//! timed out or answered nonsense); budget checkpoints' the same, loop by
//! loop. The supervisor's restart delays are kept as they were drawn
//! (jitter included). The executor changes of the run (`run_resumed`) cut
//! it into segments, each ending where the recording's course stood when
//! its executor stopped. A lease seeded with a learned pace
//! (`lease_seeded`) is seeded with it again, whatever the store has
//! learned since.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use leasehold_actors::{
    CallOutcome, DEFAULT_REPETITION_THRESHOLD, DecidedBy, Event, EventKind, FinishReason, LeaseId,
    LeaseKind, OperationTiming, Pace, TokenCost,
};

use super::entry::{Counts, course_entry, loop_of};

/// One invocation of a peer, as the recording has it.
#[derive(Clone, Debug, Default)]
pub(super) struct Invocation {
    /// The lease that watched it, once one of its events was seen.
    pub lease: Option<LeaseId>,
    /// How it went in time, if its lease said so when it ended.
    pub timing: Option<OperationTiming>,
    /// For a tool call whose result was cut to the engine's cap: the
    /// result's length as the tool returned it, and how much was kept.
    pub truncated: Option<(u64, u64)>,
    /// Its executor stopped while it was in flight.
    pub stopped: bool,
    /// What its lease was seeded with, if it was.
    pub seed: Option<Seed>,
    /// For a tool call: the tool.
    pub tool: Option<String>,
    /// Which attempt of its call it was (1 for the first).
    pub attempt: u32,
    /// How it ended, if its end was logged.
    pub outcome: Option<CallOutcome>,
    /// For one that failed on its own: what it said, if the log kept it
    /// (the restart's reason, the result the model was given).
    pub failure: Option<String>,
    /// For one that failed on its own: whether its supervisor tried again
    /// (or gave it up): the failure was one to try again.
    pub retried: bool,
    /// Its stream was found repeating itself when its lease was judged:
    /// its text is not recorded, so a replay streams a text that repeats.
    pub repeating: bool,
}

/// What a lease was seeded with (`lease_seeded`).
#[derive(Clone, Debug)]
pub(super) struct Seed {
    /// Its pace key.
    pub key: String,
    /// The pace.
    pub pace: Pace,
}

/// What an evaluator (or a budget checkpoint's) answered, once.
#[derive(Clone, Debug)]
pub(super) struct Answered {
    /// The answer's text, as an evaluator writes it.
    pub text: String,
    /// How long it took.
    pub latency: Duration,
    /// The breaker gave the verdict: the evaluator failed, timed out or
    /// answered nonsense, which the replay's evaluator does again.
    pub breaker: Option<String>,
}

/// What the recording says of every peer.
#[derive(Debug, Default)]
pub(super) struct Script {
    /// Each call's invocations, by the call's path
    /// (`run/model_call:2`, `run/tool_call:1.0`).
    pub calls: BTreeMap<String, Vec<Invocation>>,
    /// The evaluator's answers, by lease path, in order.
    pub verdicts: BTreeMap<String, VecDeque<Answered>>,
    /// The budget checkpoints' answers, by loop path, in order.
    pub budgets: BTreeMap<String, VecDeque<Answered>>,
    /// Each model call's usage and why it finished, by loop and step.
    pub replies: BTreeMap<(String, u32), (TokenCost, Option<FinishReason>)>,
    /// The restart delays, by the child's path and the attempt started.
    pub delays: BTreeMap<(String, u32), Duration>,
    /// Where the course stood, loop by loop, when each executor but the
    /// last stopped: one entry per `run_resumed`.
    pub stops: Vec<Counts>,
    /// What the model client called itself, as its seeded leases say: the
    /// replay's model calls itself the same, so that its leases have the
    /// same pace keys.
    pub model_described: Option<String>,
    /// The tool server each tool was called on, as its seeded leases say:
    /// the replay serves it under the same name, for the same reason.
    pub servers: BTreeMap<String, String>,
    /// Each loop's task, by its path: the conversation of a loop that
    /// never answered begins and ends with it.
    pub tasks: BTreeMap<String, String>,
}

impl Script {
    /// Reads `events`, a run's log.
    pub fn read(events: &[Event]) -> Self {
        let mut script = Self::default();
        let mut counts = Counts::new();
        for event in events {
            script.read_one(event);
            if matches!(event.kind, EventKind::RunResumed { .. }) {
                // What was in flight when the previous executor stopped
                // never ended there.
                for invocations in script.calls.values_mut() {
                    if let Some(last) = invocations.last_mut()
                        && last.timing.is_none()
                    {
                        last.stopped = true;
                    }
                }
                script.stops.push(counts.clone());
            }
            if course_entry(&event.kind).is_some() {
                *counts.entry(loop_of(&event.path).to_owned()).or_default() += 1;
            }
        }
        script
    }

    fn read_one(&mut self, event: &Event) {
        let path = &*event.path;
        match &event.kind {
            EventKind::ModelCallStarted { step, attempt, .. } => {
                self.calls
                    .entry(format!("{path}/model_call:{step}"))
                    .or_default()
                    .push(Invocation {
                        attempt: *attempt,
                        ..Invocation::default()
                    });
            }
            EventKind::ToolCallStarted { tool, attempt, .. } => {
                self.calls
                    .entry(path.to_owned())
                    .or_default()
                    .push(Invocation {
                        tool: Some(tool.clone()),
                        attempt: *attempt,
                        ..Invocation::default()
                    });
            }
            EventKind::ToolCallFinished {
                attempt, outcome, ..
            } => {
                if let Some(invocation) = self.attempt_of(path, *attempt) {
                    invocation.outcome = Some(*outcome);
                }
            }
            EventKind::RunStarted { task, .. } => {
                self.tasks.insert(path.to_owned(), task.clone());
            }
            // A worker is watched by a lease of its own, under its path.
            EventKind::WorkerSpawned { task, .. } => {
                self.tasks.insert(path.to_owned(), task.clone());
                self.calls
                    .entry(path.to_owned())
                    .or_default()
                    .push(Invocation::default());
            }
            EventKind::GaveUp { .. } => {
                if let Some(invocation) = self.calls.get_mut(path).and_then(|i| i.last_mut()) {
                    invocation.retried = true;
                }
            }
            EventKind::OperationTimed {
                lease_id, timing, ..
            } => {
                if let Some(invocation) = self.invocation_of(path, *lease_id) {
                    invocation.timing = Some((**timing).clone());
                }
            }
            EventKind::ToolResultTruncated {
                original_bytes,
                kept_bytes,
                ..
            } => {
                if let Some(invocation) = self.calls.get_mut(path).and_then(|i| i.last_mut()) {
                    invocation.truncated = Some((*original_bytes, *kept_bytes));
                }
            }
            EventKind::Verdict(record) => {
                let repeating = record
                    .evidence
                    .repetition
                    .is_some_and(|r| r >= DEFAULT_REPETITION_THRESHOLD);
                if let Some(invocation) = self.invocation_of(path, record.lease_id) {
                    invocation.repeating |= repeating;
                }
                if let Some(answered) = answered(
                    record.decided_by,
                    &record.reason,
                    record.evaluator.as_ref().map(|e| e.latency_ms),
                    || {
                        serde_json::json!({
                            "verdict": record.verdict.as_str(),
                            "reason": record.reason,
                            "nudge": record.nudge,
                        })
                    },
                ) {
                    self.verdicts
                        .entry(path.to_owned())
                        .or_default()
                        .push_back(answered);
                }
            }
            EventKind::BudgetExtended(record) | EventKind::BudgetExhausted(record) => {
                let decision = match &event.kind {
                    EventKind::BudgetExtended(_) => "EXTEND",
                    _ => "WRAP_UP",
                };
                if let Some(answered) = answered(
                    record.decided_by,
                    &record.reason,
                    record.evaluator.as_ref().map(|e| e.latency_ms),
                    || {
                        serde_json::json!({
                            "decision": decision,
                            "reason": record.reason,
                            "confidence": record.confidence.unwrap_or(0.9),
                        })
                    },
                ) {
                    self.budgets
                        .entry(path.to_owned())
                        .or_default()
                        .push_back(answered);
                }
            }
            EventKind::ModelCallFinished {
                step,
                attempt,
                usage,
                finish_reason,
                outcome,
                ..
            } => {
                if *outcome == CallOutcome::Ok {
                    self.replies
                        .insert((path.to_owned(), *step), (*usage, *finish_reason));
                }
                if let Some(invocation) =
                    self.attempt_of(&format!("{path}/model_call:{step}"), *attempt)
                {
                    invocation.outcome = Some(*outcome);
                }
            }
            EventKind::Restarted {
                attempt,
                delay_ms,
                reason,
            } => {
                self.delays.insert(
                    (path.to_owned(), *attempt),
                    Duration::from_millis(*delay_ms),
                );
                if let Some(invocation) = self.attempt_of(path, attempt.saturating_sub(1)) {
                    invocation.retried = true;
                    // The loop says a failure as `failed: MESSAGE`.
                    invocation.failure = reason.strip_prefix("failed: ").map(str::to_owned);
                }
            }
            EventKind::LeaseSeeded {
                lease_id,
                lease_kind,
                pace_key,
                endpoint,
                pace,
                queued,
            } => {
                let model = matches!(
                    lease_kind,
                    LeaseKind::ModelStream | LeaseKind::ModelBlocking
                );
                if model && self.model_described.is_none() {
                    self.model_described.clone_from(endpoint);
                }
                let Some(invocation) = self.invocation_of(path, *lease_id) else {
                    return;
                };
                // Pinned, so that it judges the replayed lease as it judged
                // the recorded one, however few runs the replay's book has
                // heard of; without the first item a call behind another
                // was not judged by.
                invocation.seed = Some(Seed {
                    key: pace_key.clone(),
                    pace: Pace {
                        pinned: true,
                        first_item: if *queued { None } else { pace.first_item },
                        ..Pace::clone(pace)
                    },
                });
                if let (Some(tool), Some(server)) = (invocation.tool.clone(), endpoint) {
                    self.servers.entry(tool).or_insert_with(|| server.clone());
                }
            }
            EventKind::Wait { lease_id, .. }
            | EventKind::Progress { lease_id, .. }
            | EventKind::Intervened { lease_id, .. }
            | EventKind::Escalated { lease_id, .. }
            | EventKind::RenewalCapReached { lease_id, .. }
            | EventKind::LeaseCancelled { lease_id } => {
                let _ = self.invocation_of(path, *lease_id);
            }
            _ => {}
        }
    }

    /// The latest invocation of the call at `path` that was its attempt
    /// `attempt`.
    fn attempt_of(&mut self, path: &str, attempt: u32) -> Option<&mut Invocation> {
        self.calls
            .get_mut(path)?
            .iter_mut()
            .rev()
            .find(|i| i.attempt == attempt)
    }

    /// The invocation of the call at `path` that the lease `lease` watches:
    /// the one it was first seen with, or the latest that had no lease yet.
    fn invocation_of(&mut self, path: &str, lease: LeaseId) -> Option<&mut Invocation> {
        let invocations = self.calls.get_mut(path)?;
        let at = invocations
            .iter()
            .position(|i| i.lease == Some(lease))
            .or_else(|| {
                let last = invocations.len().checked_sub(1)?;
                invocations[last].lease.is_none().then_some(last)
            })?;
        let invocation = &mut invocations[at];
        invocation.lease = Some(lease);
        Some(invocation)
    }
}

/// What the replay's evaluator answers for a judgement the recording's
/// watchdog or budget checkpoint asked for; `None` for one it made
/// without asking (the ladder, evidence, the cap, a policy).
fn answered(
    decided_by: DecidedBy,
    reason: &str,
    latency_ms: Option<u64>,
    text: impl FnOnce() -> serde_json::Value,
) -> Option<Answered> {
    let latency = Duration::from_millis(latency_ms.unwrap_or(0));
    match decided_by {
        DecidedBy::Evaluator => Some(Answered {
            text: text().to_string(),
            latency,
            breaker: None,
        }),
        DecidedBy::Breaker => Some(Answered {
            text: String::new(),
            latency,
            breaker: Some(reason.to_owned()),
        }),
        _ => None,
    }
}
