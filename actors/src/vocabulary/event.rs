//! The public event schema: what happened, where, in which run.
//!
//! Every event has a `seq` (strictly increasing per bus), a `position`
//! (its place in its run's log: 1, 2, 3, … with no gap), an `at` (Unix
//! milliseconds, from the [`Clock`](crate::ports::Clock) port), the `run_id`,
//! the `path` of the operation in the run's tree
//! (`run/worker:research/tool_call:3`) and a `kind`. Names are snake_case
//! and stable: they are a contract with users. This module imports no actor,
//! so changing an actor cannot change the wire format.

use std::collections::BTreeMap;

use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::vocabulary::budget::BudgetFigures;

use crate::ports::TokenCost;
use crate::vocabulary::evidence::EvidenceSummary;
use crate::vocabulary::lease::{LeaseId, LeaseKind};
use crate::vocabulary::verdict::{DecidedBy, EvaluatorUsage, Verdict, VerdictRecord};

/// The subject of a pause for an endpoint that is down: the run waits for
/// it to answer again, not for a person.
pub const ENDPOINT_SUBJECT: &str = "endpoint";

/// One event on a run's stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    /// Position on the bus, strictly increasing from 1.
    pub seq: u64,
    /// Its place in its run's log: 1 for the run's first event, one more
    /// for each event after it, across every executor that held the run
    /// (a new owner goes on from the last logged event). An event a stale
    /// owner published is refused by the log, and its position is the next
    /// owner's to use. 0 (and not written) in logs written before
    /// positions existed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub position: u64,
    /// When it happened, in milliseconds since the Unix epoch.
    pub at: u64,
    /// The run it belongs to.
    pub run_id: std::sync::Arc<str>,
    /// Where in the run's tree it happened.
    pub path: std::sync::Arc<str>,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

fn one_u32() -> u32 {
    1
}

fn is_one_u32(n: &u32) -> bool {
    *n == 1
}

fn one() -> u64 {
    1
}

/// Who a failure given up by a supervisor went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HandedTo {
    /// The loop's model, as the call's error result.
    Model,
    /// The parent loop, as the worker's error result.
    Parent,
    /// A person: the run paused, or failed if so configured.
    Person,
}

impl std::fmt::Display for HandedTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Model => "the model",
            Self::Parent => "the parent loop",
            Self::Person => "a person",
        })
    }
}

/// What a loop did when its request did not fit the model's context
/// window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OverflowAction {
    /// It shortened the oldest tool results and calls the model again.
    Shortened,
    /// It paused the run for a person.
    Paused,
}

/// What happened, with its own fields. Serialized with a `kind` tag.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A lease expired; the watchdog is being asked for a verdict.
    Wait {
        /// The lease.
        lease_id: LeaseId,
        /// What it watches.
        lease_kind: LeaseKind,
        /// What the operation is doing.
        subject: String,
        /// Renewals so far.
        renewals: u32,
        /// Length of one lease period, in milliseconds.
        lease_ms: u64,
    },
    /// The watchdog (or the renewal cap) decided; the audit-trail record.
    /// Boxed, as the larger records are: an event is as large as its
    /// largest kind, and every event a run logs is held until it is
    /// stored.
    Verdict(std::sync::Arc<VerdictRecord>),
    /// An operation reported progress to its lease.
    Progress {
        /// The lease.
        lease_id: LeaseId,
        /// Evidence items received so far on this lease.
        count: u64,
        /// What the operation said about its progress, if anything (its
        /// last report's note, cut to the engine's
        /// [`max_progress_note_bytes`](crate::EventLimits::max_progress_note_bytes)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        /// How many progress reports this event stands for: 1, or more when
        /// reports came faster than one per
        /// [`progress_interval`](crate::EventLimits::progress_interval) and
        /// were coalesced into it. Each was evidence for the lease.
        #[serde(default = "one", skip_serializing_if = "is_one")]
        reports: u64,
    },
    /// A `NUDGE` queued a message for the next step of the loop.
    NudgeQueued {
        /// The lease whose verdict it was.
        lease_id: LeaseId,
        /// The message the next step will see.
        nudge: String,
    },
    /// An `INTERVENE` cancelled the operation.
    Intervened {
        /// The lease.
        lease_id: LeaseId,
        /// Why.
        reason: String,
    },
    /// An `ESCALATE` cancelled the operation; a person must answer.
    Escalated {
        /// The lease.
        lease_id: LeaseId,
        /// Why.
        reason: String,
    },
    /// The lease was renewed `max_renewals` times and expired again: the
    /// operation was stopped.
    RenewalCapReached {
        /// The lease.
        lease_id: LeaseId,
        /// The cap that was reached.
        max_renewals: u32,
    },
    /// A verdict arrived while the run was paused (or after the pause, on an
    /// expiry judged before it) and did not act: a pause stops every clock.
    /// The lease gets a fresh period when the run resumes.
    VerdictDropped {
        /// The lease.
        lease_id: LeaseId,
        /// The verdict that was dropped.
        verdict: Verdict,
        /// Why it was dropped (`the run is paused`).
        reason: String,
    },
    /// The operation was cancelled by its parent; no watchdog was asked.
    LeaseCancelled {
        /// The lease.
        lease_id: LeaseId,
    },
    /// A lease began seeded with what earlier calls of its pace key showed
    /// ([`PaceBook`](crate::PaceBook)): its detector starts from that
    /// pace. A lease with no such event started cold. What a replay seeds
    /// the lease with again, whatever the store has learned since.
    LeaseSeeded {
        /// The lease.
        lease_id: LeaseId,
        /// What it watches.
        lease_kind: LeaseKind,
        /// Its pace key.
        pace_key: String,
        /// The endpoint its call went to (the model as its client
        /// describes it, the tool server), when the lease names one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<String>,
        /// The pace it was seeded with.
        pace: Box<crate::pace::Pace>,
        /// Whether another call of this executor was in flight at the
        /// endpoint when it began, so that its first item may have waited
        /// in the endpoint's queue.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        queued: bool,
    },
    /// An operation a lease watched ended, by itself or cut: how it went
    /// in time, what another strategy can be played on.
    OperationTimed {
        /// The lease.
        lease_id: LeaseId,
        /// What it watched.
        lease_kind: LeaseKind,
        /// What the operation was doing.
        subject: String,
        /// Its timing.
        timing: Box<crate::vocabulary::evidence::OperationTiming>,
    },
    /// The run's log holds its
    /// [`max_run_events`](crate::EventLimits::max_run_events): events of
    /// [droppable](EventKind::is_droppable) kinds were counted, not stored.
    /// The first is said at once, the rest before the run ends or pauses;
    /// each `events_dropped` counts those since the previous one.
    EventsDropped {
        /// Events not stored, by kind (`progress`).
        dropped: BTreeMap<String, u64>,
        /// The cap the log had reached.
        max_run_events: u64,
    },
    /// A run began.
    RunStarted {
        /// The flow's name.
        flow: String,
        /// The task.
        task: String,
        /// The declared step budget (0 = unlimited).
        max_steps: u32,
        /// The caller's trace context, when the run was started within a
        /// caller's trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace_parent: Option<Box<crate::trace_context::TraceParent>>,
    },
    /// A fork began: a run that starts from another run's state at one of
    /// its step boundaries. Emitted in place of `run_started`.
    RunForked(Box<RunFork>),
    /// A loop (the root or a worker) began a step.
    StepStarted {
        /// The step's number, from 1.
        step: u32,
        /// The loop's current step limit (0 = unlimited).
        limit: u32,
        /// Nudges added to this step's messages.
        nudges: u32,
    },
    /// A model call began.
    ModelCallStarted {
        /// The loop's step.
        step: u32,
        /// Streaming or blocking.
        stream: bool,
        /// Which attempt (1 for the first).
        attempt: u32,
        /// The lease that watches it: what a person extends or stops by
        /// hand.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_id: Option<LeaseId>,
    },
    /// A model call ended.
    ModelCallFinished {
        /// The loop's step.
        step: u32,
        /// Which attempt of the step's call (1 for the first).
        #[serde(default = "one_u32", skip_serializing_if = "is_one_u32")]
        attempt: u32,
        /// How it ended.
        outcome: CallOutcome,
        /// Tool calls it asked for.
        tool_calls: u32,
        /// Its tokens.
        usage: TokenCost,
        /// The model, when its client names it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// What it cost at the engine's prices when it was made, when the
        /// model has a price.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spent: Option<f64>,
        /// Why the model stopped, when the server said (`length`: cut off).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<crate::ports::FinishReason>,
    },
    /// A tool call began.
    ToolCallStarted {
        /// The tool.
        tool: String,
        /// The call's idempotency key, the same on every attempt.
        idempotency_key: String,
        /// Which attempt (1 for the first).
        attempt: u32,
        /// The lease that watches it: what a person extends or stops by
        /// hand.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_id: Option<LeaseId>,
    },
    /// A tool call ended.
    ToolCallFinished {
        /// The tool.
        tool: String,
        /// The call's idempotency key.
        idempotency_key: String,
        /// Which attempt.
        attempt: u32,
        /// How it ended.
        outcome: CallOutcome,
    },
    /// A fork did not send a tool call its parent had made before the fork
    /// point: the parent's recorded result is the fork's.
    ToolCallReplayed {
        /// The tool.
        tool: String,
        /// The call's idempotency key: the parent's.
        idempotency_key: String,
        /// The run that made the call.
        made_by: String,
        /// Whether the result was given by a person deciding on the call
        /// in that run, not by the tool.
        by_person: bool,
    },
    /// A tool's result was longer than the engine's `max_tool_result_bytes`:
    /// the model sees, and the store keeps, its first `kept_bytes` and a
    /// marker saying how much was cut. Emitted before the call's
    /// `tool_call_finished`; the event's `path` is the call's.
    ToolResultTruncated {
        /// The tool.
        tool: String,
        /// The call's idempotency key.
        idempotency_key: String,
        /// Which attempt.
        attempt: u32,
        /// The result's length as the tool returned it, in bytes.
        original_bytes: u64,
        /// How much of it was kept, in bytes (the cap or a little less, to
        /// end on a character boundary), before the marker.
        kept_bytes: u64,
    },
    /// A model call's request did not fit the model's context window, as
    /// its server said: the loop shortened the oldest tool results of its
    /// transcript and calls again (`shortened`), or — nothing left to
    /// shorten, or its attempts for the step spent — paused the run for a
    /// person (`paused`). After the call's `model_call_finished`; the
    /// event's `path` is the call's.
    ContextOverflow {
        /// The loop's step.
        step: u32,
        /// The attempt the server refused.
        attempt: u32,
        /// The request's tokens, as the server counted them, when it said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_tokens: Option<u64>,
        /// The model's context window, in tokens, when the server said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context_tokens: Option<u64>,
        /// Tool results shortened for the next attempt (0 when paused).
        shortened: u32,
        /// Characters cut from them.
        chars_cut: u64,
        /// What the loop did.
        action: OverflowAction,
    },
    /// A worker was spawned.
    WorkerSpawned {
        /// Its kind, as declared in the flow.
        worker: String,
        /// Its task.
        task: String,
        /// The lease that watches it: what a person extends or stops by
        /// hand.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_id: Option<LeaseId>,
    },
    /// A `spawn_worker` call was refused by a limit of
    /// [`SpawnLimits`](crate::SpawnLimits): no worker started, and the
    /// model got an error result saying why. The run goes on. The event's
    /// `path` is the loop that asked.
    SpawnRefused {
        /// The worker kind it asked for.
        worker: String,
        /// The limit, by its configuration key: `spawn.max_per_answer`,
        /// `spawn.max_per_run` or `spawn.max_depth`.
        limit: String,
        /// The limit's bound for this run.
        bound: u32,
    },
    /// A worker ended.
    WorkerFinished {
        /// Its kind.
        worker: String,
        /// How it ended.
        outcome: CallOutcome,
        /// Its answer, or why it has none.
        result: String,
    },
    /// A budget checkpoint granted more steps.
    BudgetExtended(Box<BudgetRecord>),
    /// A budget checkpoint decided to wrap up.
    BudgetExhausted(Box<BudgetRecord>),
    /// A supervisor restarts a child after a delay.
    Restarted {
        /// The attempt about to start (2 for the first restart).
        attempt: u32,
        /// The backoff before it, in milliseconds.
        delay_ms: u64,
        /// Why the previous attempt ended.
        reason: String,
    },
    /// A supervisor gave a child up, its restarts spent, and handed the
    /// failure up the tree.
    GaveUp {
        /// What the child was doing: the tool's name, `model call`, the
        /// worker tool.
        subject: String,
        /// The attempts it had.
        attempts: u32,
        /// Why it was given up, naming the limit and how it ended last.
        reason: String,
        /// Who the failure went to.
        handed_to: HandedTo,
    },
    /// The run is paused, waiting for a person; its clocks are stopped.
    Paused {
        /// Why.
        reason: String,
        /// What was being done when it escalated.
        subject: String,
        /// The evidence at that moment, if a lease escalated.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evidence: Option<Box<EvidenceSummary>>,
        /// Who paused it, when a person did rather than an escalation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// An executor claimed the run and resumed it from its snapshots.
    RunResumed {
        /// The executor.
        owner_id: String,
        /// Its fence on the run.
        fence: u64,
        /// When the run was created (Unix ms): where its trace's root span
        /// begins, whichever executor resumes it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        created_at_ms: Option<u64>,
        /// The caller's trace context, when the run was started within a
        /// caller's trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace_parent: Option<Box<crate::trace_context::TraceParent>>,
    },
    /// A tool call's outcome is unknown and the tool is not known to be
    /// idempotent: the run waits for a person to decide.
    ReconciliationRequired {
        /// The tool.
        tool: String,
        /// The call's idempotency key.
        idempotency_key: String,
        /// Its arguments.
        arguments: Box<serde_json::Value>,
        /// Why.
        reason: String,
    },
    /// A person resumed the run.
    Resumed {
        /// What they said, which the next model call sees.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        guidance: Option<String>,
        /// What resumed the run when no person did: the endpoint it waited
        /// on answered again (`model M at URL answered again`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// The run ended with an answer.
    RunCompleted {
        /// The answer.
        answer: String,
        /// Steps the root loop took.
        steps: u32,
        /// The answer was cut off at the model's length limit: its last
        /// step (a wrap-up) had no room to continue it, so it may be
        /// incomplete.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cut_off: bool,
    },
    /// The run failed.
    RunFailed {
        /// Why.
        reason: String,
    },
    /// A person cancelled the run.
    RunCancelled {
        /// Why, if they said.
        reason: String,
    },
    /// A person's control, forwarded through the store by another
    /// executor, was refused by the executor that runs the run: the only
    /// answer the person who sent it can read.
    ControlRefused {
        /// `resume`, `cancel` or `reconcile`.
        command: String,
        /// Why, as the run's rule says it.
        reason: String,
    },
    /// A person's message reached the run: its root loop's next model call
    /// sees it.
    MessageReceived {
        /// The message.
        text: String,
        /// How it was delivered: `enqueue`, `interrupt` or `reject`.
        policy: String,
        /// Who sent it.
        by: String,
    },
}

/// Where a fork began: the `run_forked` event's fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunFork {
    /// The flow's name.
    pub flow: String,
    /// The run it was forked from.
    pub parent: String,
    /// The loop whose step it starts at (the event's own `path` is
    /// the root's).
    pub loop_path: String,
    /// That step.
    pub step: u32,
    /// The guidance given to its first step.
    pub guidance: Option<String>,
    /// The changes made to the flow.
    pub changes: Vec<String>,
    /// What people answered in the parent before the fork point, which
    /// the fork inherits with the parent's state.
    pub person_answers: Vec<String>,
}

/// `n` and `noun`, plural unless `n` is one: `1 renewal`, `2 renewals`
/// (a noun whose plural is its `-s` form, as every count leasehold prints).
pub fn counted(n: impl TryInto<u64>, noun: &str) -> String {
    let n = n.try_into().unwrap_or(u64::MAX);
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

impl EventKind {
    /// One human-readable line describing the event, for logs.
    pub fn describe(&self) -> String {
        match self {
            Self::Wait {
                subject, renewals, ..
            } => format!(
                "{subject}: lease expired after {}",
                counted(*renewals, "renewal")
            ),
            Self::Verdict(r) => {
                let phi = r
                    .evidence
                    .phi
                    .map_or_else(|| "none".to_owned(), |phi| format!("{phi:.2}"));
                format!(
                    "{} by {} (evidence {}, phi {phi}): {}",
                    r.verdict, r.decided_by, r.evidence.count, r.reason
                )
            }
            Self::Progress {
                note,
                count,
                reports,
                ..
            } => {
                let note = note.as_deref().unwrap_or("progress");
                if *reports > 1 {
                    format!(
                        "{note} ({}, {reports} reports in this one)",
                        counted(*count, "item")
                    )
                } else {
                    format!("{note} ({})", counted(*count, "item"))
                }
            }
            Self::EventsDropped {
                dropped,
                max_run_events,
            } => {
                let counts: Vec<String> = dropped
                    .iter()
                    .map(|(kind, n)| format!("{n} {kind}"))
                    .collect();
                format!(
                    "the run's log holds {max_run_events} events: {} not stored",
                    counts.join(", ")
                )
            }
            Self::NudgeQueued { nudge, .. } => format!("queued for the next step: {nudge}"),
            Self::Intervened { reason, .. } | Self::Escalated { reason, .. } => reason.clone(),
            Self::RenewalCapReached { max_renewals, .. } => {
                format!("stopped after {}", counted(*max_renewals, "renewal"))
            }
            Self::VerdictDropped {
                verdict, reason, ..
            } => format!("{verdict} dropped: {reason}"),
            Self::LeaseCancelled { .. } => "cancelled by its parent".to_owned(),
            Self::LeaseSeeded { pace_key, .. } => {
                format!("seeded with the learned pace of {pace_key}")
            }
            Self::OperationTimed {
                lease_kind,
                subject,
                timing,
                ..
            } => format!(
                "{lease_kind} {subject} {} after {} ms: {}, longest silence {} ms",
                match timing.ended {
                    crate::vocabulary::evidence::TimedEnd::Ended => "ended",
                    crate::vocabulary::evidence::TimedEnd::Cut => "cut",
                },
                timing.duration_ms,
                counted(timing.items, "item"),
                timing.longest_silence_ms
            ),
            Self::RunStarted {
                flow,
                task,
                max_steps,
                ..
            } => format!("flow `{flow}` ({}): {task}", counted(*max_steps, "step")),
            Self::RunForked(fork) => {
                let RunFork {
                    parent,
                    loop_path,
                    step,
                    guidance,
                    changes,
                    person_answers,
                    ..
                } = fork.as_ref();
                let mut text = format!("forked from {parent} at {loop_path} step {step}");
                if let Some(guidance) = guidance {
                    text.push_str(&format!(", guidance: {guidance}"));
                }
                if !changes.is_empty() {
                    text.push_str(&format!(", flow changed: {}", changes.join(", ")));
                }
                if !person_answers.is_empty() {
                    text.push_str(&format!(
                        ", inheriting {} a person gave the parent",
                        counted(person_answers.len(), "answer")
                    ));
                }
                text
            }
            Self::ToolCallReplayed {
                tool,
                idempotency_key,
                made_by,
                by_person,
            } => format!(
                "{tool} (key {idempotency_key}) not sent again: the result {} recorded in {made_by}",
                if *by_person {
                    "a person gave was"
                } else {
                    "was"
                }
            ),
            Self::StepStarted {
                step,
                limit,
                nudges,
            } => {
                let limit = if *limit == 0 {
                    "unlimited".to_owned()
                } else {
                    format!("of {limit}")
                };
                format!("step {step} {limit}, {}", counted(*nudges, "nudge"))
            }
            Self::ModelCallStarted {
                step,
                stream,
                attempt,
                lease_id,
            } => format!(
                "step {step}, {}, attempt {attempt}{}",
                if *stream { "streaming" } else { "blocking" },
                watched_by(*lease_id)
            ),
            Self::ModelCallFinished {
                outcome,
                tool_calls,
                usage,
                finish_reason,
                ..
            } => format!(
                "{outcome:?}, {}, {}{}",
                counted(*tool_calls, "tool call"),
                counted(
                    usage.input_tokens.saturating_add(usage.output_tokens),
                    "token"
                ),
                if *finish_reason == Some(crate::ports::FinishReason::Length) {
                    ", cut off at the length limit"
                } else {
                    ""
                }
            ),
            Self::ToolCallStarted {
                tool,
                idempotency_key,
                attempt,
                lease_id,
            } => format!(
                "{tool} attempt {attempt} (key {idempotency_key}){}",
                watched_by(*lease_id)
            ),
            Self::ToolCallFinished {
                tool,
                attempt,
                outcome,
                ..
            } => format!("{tool} attempt {attempt}: {outcome:?}"),
            Self::ToolResultTruncated {
                tool,
                original_bytes,
                kept_bytes,
                ..
            } => format!("{tool}: result of {original_bytes} bytes truncated to {kept_bytes}"),
            Self::ContextOverflow {
                requested_tokens,
                context_tokens,
                shortened,
                chars_cut,
                action,
                ..
            } => {
                let sizes = overflow_sizes(*requested_tokens, *context_tokens);
                match action {
                    OverflowAction::Shortened => format!(
                        "the request does not fit the model's context window{sizes}: \
                         {} shortened by {}, calling again",
                        counted(*shortened, "tool result"),
                        counted(*chars_cut, "character")
                    ),
                    OverflowAction::Paused => format!(
                        "the request does not fit the model's context window{sizes}: \
                         nothing more to shorten, waiting for a person"
                    ),
                }
            }
            Self::WorkerSpawned {
                worker,
                task,
                lease_id,
            } => format!("{worker}{}: {task}", watched_by(*lease_id)),
            Self::SpawnRefused {
                worker,
                limit,
                bound,
            } => format!("{worker}: not spawned, past {limit} ({bound})"),
            Self::WorkerFinished {
                worker,
                outcome,
                result,
            } => format!("{worker} {outcome:?}: {result}"),
            Self::BudgetExtended(r) => format!(
                "{} used of {}: extended to {} ({}, by {})",
                counted(r.figures.steps_used, "step"),
                r.figures.limit,
                r.new_limit,
                r.reason,
                r.decided_by
            ),
            Self::BudgetExhausted(r) => format!(
                "{} used of {}: wrapping up ({}, by {})",
                counted(r.figures.steps_used, "step"),
                r.figures.limit,
                r.reason,
                r.decided_by
            ),
            Self::Restarted {
                attempt,
                delay_ms,
                reason,
            } => format!("attempt {attempt} in {delay_ms} ms after: {reason}"),
            Self::GaveUp {
                attempts,
                reason,
                handed_to,
                ..
            } => format!(
                "given up after {}, handed to {handed_to}: {reason}",
                counted(*attempts, "attempt")
            ),
            Self::Paused {
                reason,
                by: Some(by),
                ..
            } => format!("paused by {by}: {reason}"),
            Self::Paused {
                reason, subject, ..
            } if subject == ENDPOINT_SUBJECT => {
                format!("waiting for its endpoint to answer again: {reason}")
            }
            Self::Paused {
                reason, subject, ..
            } => format!("waiting for a person about `{subject}`: {reason}"),
            Self::RunResumed {
                owner_id, fence, ..
            } => {
                format!("claimed by {owner_id} with fence {fence}, resumed from its snapshots")
            }
            Self::ReconciliationRequired {
                tool,
                idempotency_key,
                reason,
                ..
            } => format!("{tool} (key {idempotency_key}): {reason}"),
            Self::Resumed { guidance, by } => match (guidance, by) {
                (_, Some(by)) => format!("resumed: {by}"),
                (Some(g), None) => format!("a person answered: {g}"),
                (None, None) => "a person said to go on".to_owned(),
            },
            Self::RunCompleted {
                answer,
                steps,
                cut_off,
            } => format!(
                "after {}{}: {answer}",
                counted(*steps, "step"),
                if *cut_off {
                    ", its answer cut off at the model's length limit (may be incomplete)"
                } else {
                    ""
                }
            ),
            Self::RunFailed { reason } | Self::RunCancelled { reason } => reason.clone(),
            Self::ControlRefused { command, reason } => {
                format!("a forwarded {command} was refused: {reason}")
            }
            Self::MessageReceived { text, policy, by } => {
                format!("{by} said ({policy}): {text}")
            }
        }
    }
}

/// The sizes of a context-window overflow as its server gave them, for a
/// readable line: ` (4135 tokens against a window of 4096)`, or what of it
/// the server said.
pub(crate) fn overflow_sizes(requested_tokens: Option<u64>, context_tokens: Option<u64>) -> String {
    match (requested_tokens, context_tokens) {
        (Some(requested), Some(window)) => {
            format!(" ({requested} tokens against a window of {window})")
        }
        (Some(requested), None) => format!(" ({requested} tokens)"),
        (None, Some(window)) => format!(" (a window of {window} tokens)"),
        (None, None) => String::new(),
    }
}

/// How a model call, tool call or worker ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// It returned.
    Ok,
    /// It returned an error (a tool's own error, a model's HTTP error).
    Error,
    /// The watchdog intervened.
    Intervened,
    /// The watchdog escalated.
    Escalated,
    /// Its parent cancelled it.
    Cancelled,
    /// It panicked.
    Panicked,
    /// Its lease reached the renewal cap.
    Capped,
    /// It was sent, and ended without a result (cancelled, or its process
    /// died): whether it took effect is not known.
    Unknown,
}

/// The figures a budget checkpoint used, and what it decided.
///
/// Serialized by hand, not derived, to keep the key order `budget_extended`
/// and `budget_exhausted` events have always had: the figures, with
/// `new_limit` right after `limit`, then the decision.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BudgetRecord {
    /// The loop's figures when its checkpoint was due.
    #[serde(flatten)]
    pub figures: BudgetFigures,
    /// The limit after this checkpoint (the same as `figures.limit` when
    /// wrapping up).
    pub new_limit: u32,
    /// Why.
    pub reason: String,
    /// Who decided: `evaluator`, `breaker` (evaluator failed or none
    /// configured: wrap up), or `cap` (no extensions left).
    pub decided_by: DecidedBy,
    /// The evaluator's confidence, when it answered.
    #[serde(default)]
    pub confidence: Option<f64>,
    /// The evaluator's latency and cost, when it was called (consumer
    /// `engine.budget`).
    #[serde(default)]
    pub evaluator: Option<EvaluatorUsage>,
}

impl Serialize for BudgetRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        self.figures
            .serialize_entries(&mut map, Some(self.new_limit))?;
        map.serialize_entry("reason", &self.reason)?;
        map.serialize_entry("decided_by", &self.decided_by)?;
        if let Some(confidence) = &self.confidence {
            map.serialize_entry("confidence", confidence)?;
        }
        if let Some(evaluator) = &self.evaluator {
            map.serialize_entry("evaluator", evaluator)?;
        }
        map.end()
    }
}

/// ` [lease:7]`: the words naming the lease that watches an operation, for
/// a person to extend or stop it by hand; nothing when none is known.
fn watched_by(lease_id: Option<LeaseId>) -> String {
    lease_id.map_or_else(String::new, |id| format!(" [{id}]"))
}

impl EventKind {
    /// The stable snake_case name of this kind, as serialized in `kind`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Wait { .. } => "wait",
            Self::Verdict(_) => "verdict",
            Self::Progress { .. } => "progress",
            Self::NudgeQueued { .. } => "nudge_queued",
            Self::Intervened { .. } => "intervened",
            Self::Escalated { .. } => "escalated",
            Self::RenewalCapReached { .. } => "renewal_cap_reached",
            Self::VerdictDropped { .. } => "verdict_dropped",
            Self::LeaseCancelled { .. } => "lease_cancelled",
            Self::LeaseSeeded { .. } => "lease_seeded",
            Self::OperationTimed { .. } => "operation_timed",
            Self::EventsDropped { .. } => "events_dropped",
            Self::RunStarted { .. } => "run_started",
            Self::RunForked { .. } => "run_forked",
            Self::ToolCallReplayed { .. } => "tool_call_replayed",
            Self::StepStarted { .. } => "step_started",
            Self::ModelCallStarted { .. } => "model_call_started",
            Self::ModelCallFinished { .. } => "model_call_finished",
            Self::ToolCallStarted { .. } => "tool_call_started",
            Self::ToolCallFinished { .. } => "tool_call_finished",
            Self::ToolResultTruncated { .. } => "tool_result_truncated",
            Self::ContextOverflow { .. } => "context_overflow",
            Self::WorkerSpawned { .. } => "worker_spawned",
            Self::SpawnRefused { .. } => "spawn_refused",
            Self::WorkerFinished { .. } => "worker_finished",
            Self::BudgetExtended(_) => "budget_extended",
            Self::BudgetExhausted(_) => "budget_exhausted",
            Self::Restarted { .. } => "restarted",
            Self::GaveUp { .. } => "gave_up",
            Self::Paused { .. } => "paused",
            Self::Resumed { .. } => "resumed",
            Self::RunResumed { .. } => "run_resumed",
            Self::ReconciliationRequired { .. } => "reconciliation_required",
            Self::RunCompleted { .. } => "run_completed",
            Self::RunFailed { .. } => "run_failed",
            Self::RunCancelled { .. } => "run_cancelled",
            Self::ControlRefused { .. } => "control_refused",
            Self::MessageReceived { .. } => "message_received",
        }
    }
}

#[cfg(test)]
mod plurals {
    use super::*;

    #[test]
    fn counts_in_readable_lines_agree_with_their_nouns() {
        assert_eq!(counted(1_u32, "renewal"), "1 renewal");
        assert_eq!(counted(0_u32, "renewal"), "0 renewals");
        assert_eq!(counted(2_u64, "item"), "2 items");
        let step = EventKind::StepStarted {
            step: 2,
            limit: 0,
            nudges: 1,
        };
        assert_eq!(step.describe(), "step 2 unlimited, 1 nudge");
        let done = EventKind::RunCompleted {
            answer: "42".to_owned(),
            steps: 1,
            cut_off: false,
        };
        assert_eq!(done.describe(), "after 1 step: 42");
        let cut = EventKind::RunCompleted {
            answer: "4".to_owned(),
            steps: 3,
            cut_off: true,
        };
        assert_eq!(
            cut.describe(),
            "after 3 steps, its answer cut off at the model's length limit (may be incomplete): 4"
        );
    }

    fn kind(value: serde_json::Value) -> EventKind {
        serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{value}: {e}"))
    }

    #[test]
    fn a_count_of_one_reads_in_the_singular() {
        let finished = kind(serde_json::json!({
            "kind": "model_call_finished", "step": 1, "outcome": "ok", "tool_calls": 1,
            "usage": {"input_tokens": 1, "output_tokens": 0, "counted": false},
        }));
        assert_eq!(finished.describe(), "Ok, 1 tool call, 1 token");
        let finished = kind(serde_json::json!({
            "kind": "model_call_finished", "step": 1, "outcome": "ok", "tool_calls": 2,
            "usage": {"input_tokens": 3, "output_tokens": 4, "counted": false},
        }));
        assert_eq!(finished.describe(), "Ok, 2 tool calls, 7 tokens");
        let extended = kind(serde_json::json!({
            "kind": "budget_extended", "steps_used": 1, "steps_declared": 1, "limit": 1,
            "tool_calls": 0, "spawns": 0, "milestones_closed": [], "milestones_open": [],
            "extensions_used": 0, "extensions_left": 3, "new_limit": 2,
            "reason": "converging", "decided_by": "evaluator",
        }));
        assert_eq!(
            extended.describe(),
            "1 step used of 1: extended to 2 (converging, by evaluator)"
        );
        let shortened = kind(serde_json::json!({
            "kind": "context_overflow", "step": 2, "attempt": 1, "action": "shortened",
            "shortened": 1, "chars_cut": 1,
        }));
        assert!(
            shortened
                .describe()
                .ends_with(": 1 tool result shortened by 1 character, calling again"),
            "{}",
            shortened.describe()
        );
    }
}
