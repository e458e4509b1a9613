//! The agent loop shared by the root ([`RunActor`](crate::run::RunActor))
//! and every worker ([`WorkerActor`](worker::WorkerActor)).
//!
//! A step is one model call under a lease (`model_stream` or
//! `model_blocking`), then the tool calls it asked for, each under a lease
//! (`tool_call`), run concurrently; a call of the built-in `spawn_worker`
//! tool becomes a worker under a lease of kind `worker_step`, whose evidence
//! is the worker's completed steps. Tool results, worker results and queued
//! nudges feed the next step. The loop ends with an answer — a model reply
//! that calls no tool — or, when its budget checkpoint decides to wrap up,
//! with one last model call asking for a summary of what was done.
//!
//! The loop is a state machine driven by messages: its actor never awaits a
//! model, a tool or a worker, so it stays responsive to results, pauses and
//! cancellation. Every child's abnormal end goes through the loop's
//! [`SupervisionStrategy`], which restarts it (the same call, with the same
//! idempotency key), pauses the run, fails the loop, or lets the loop carry
//! on with the error as the call's result.

mod builtin;
pub(crate) mod call;
mod calls;
mod context;
mod context_window;
mod ends;
mod messages;
pub(crate) mod model_call;
pub(crate) mod plan;
mod restore;
mod step;
mod supervise;
mod tail;
pub(crate) mod tool_call;
pub(crate) mod tools;
pub(crate) mod worker;

use std::sync::Arc;

use ractor::ActorRef;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::event::EventKind;
use crate::nudge::NudgeQueue;
use crate::ports::{
    ChatMessage, RunStatus, Snapshot, SnapshotBase, ToolCallRequest, ToolDefinition,
};
use crate::supervision::budget::BudgetFigures;
use crate::supervision::evidence::Evidence;
use crate::supervision::strategy::SupervisionStrategy;

pub use builtin::{COMPLETE_MILESTONE_TOOL, SPAWN_WORKER_TOOL};
pub(crate) use messages::Outage;
pub use messages::{
    ControlError, Escalation, LoopMsg, Overflow, ReconcileDecision, Reconciliation,
};
pub(crate) use restore::Saved;

pub(crate) use builtin::{complete_milestone_definition, spawn_worker_definition};
pub(crate) use context::{Gate, RunContext};
pub(crate) use ends::{call_outcome, describe_end, lease_end, resume_to_try_again};

/// Whether a loop is the run's root or a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Root,
    Worker { kind: String },
}

/// One tool or worker call of a step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct CallState {
    /// What the model asked for.
    pub request: ToolCallRequest,
    /// The current attempt (0 before the first starts).
    pub attempt: u32,
    /// Whether the current attempt is in flight in this process (its outcome
    /// not yet handled); never saved.
    #[serde(skip)]
    pub running: bool,
    /// The result, once there is one.
    pub result: Option<String>,
    /// For a worker: its path, so a resume can find its snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_path: Option<String>,
    /// Its place in the run's history when it was first recorded as sent
    /// ([`ToolCallRecord::seq`](crate::ports::ToolCallRecord::seq)).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sent_seq: u64,
    /// For a call a fork inherited from the run that made it: that run,
    /// and the call's key there, which it keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_by: Option<(String, String)>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where a loop is between messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Budget,
    Model,
    Calls,
    Done,
}

/// A loop's state, saved in its snapshot at each step boundary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoopState {
    /// The conversation so far (without the system prompt).
    pub transcript: Vec<ChatMessage>,
    /// Steps started.
    pub steps: u32,
    /// Steps declared (0 = unlimited).
    pub declared: u32,
    /// The current limit (0 = unlimited).
    pub limit: u32,
    /// Extensions granted.
    pub extensions_used: u32,
    /// Tool calls made.
    pub tool_calls: u32,
    /// Workers spawned.
    pub spawns: u32,
    /// Milestones closed, in order.
    pub milestones_closed: Vec<String>,
    /// Milestones still open.
    pub milestones_open: Vec<String>,
    /// Whether the loop is in its wrap-up step.
    pub wrapping_up: bool,
    /// The calls of the current step, once its model answered.
    #[serde(default)]
    pub calls: Vec<CallState>,
    /// Nudges and guidance queued for the next step.
    #[serde(default)]
    pub nudges: Vec<String>,
    /// The loop's answer, once it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Whether that answer was cut off at the model's length limit (its
    /// wrap-up step had no room to continue it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answer_cut_off: bool,
}

impl LoopState {
    /// The figures its budget checkpoint is shown, with `max_extensions`
    /// the cap on extensions.
    pub(crate) fn budget_figures(&self, max_extensions: u32) -> BudgetFigures {
        BudgetFigures {
            steps_used: self.steps,
            steps_declared: self.declared,
            limit: self.limit,
            tool_calls: self.tool_calls,
            spawns: self.spawns,
            milestones_closed: self.milestones_closed.clone(),
            milestones_open: self.milestones_open.clone(),
            extensions_used: self.extensions_used,
            extensions_left: max_extensions.saturating_sub(self.extensions_used),
            spending: None,
        }
    }
}

/// How a loop ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LoopEnd {
    Answer(String),
    Failed(String),
}

/// The loop itself: the state machine both actors drive.
pub(crate) struct AgentLoop {
    pub(crate) ctx: Arc<RunContext>,
    pub(crate) role: Role,
    pub(crate) path: String,
    system_prompt: String,
    pub(crate) state: LoopState,
    tools: Arc<[ToolDefinition]>,
    pub(crate) nudges: NudgeQueue,
    pub(crate) cancel: CancellationToken,
    // In a mutex only to make the loop `Sync`: it is used by one actor.
    strategy: std::sync::Mutex<Box<dyn SupervisionStrategy>>,
    phase: Phase,
    model_attempt: u32,
    model_running: bool,
    /// Times this step's transcript was shortened to fit the model's
    /// context window ([`context_window`]).
    shortenings: u32,
    /// Evidence to report each completed step into (a worker's lease).
    step_evidence: Option<Evidence>,
    /// The loop's last snapshot known to be stored: the next one's base.
    tail: Option<tail::HistoryTail>,
}

impl AgentLoop {
    pub(crate) fn new(
        ctx: Arc<RunContext>,
        role: Role,
        path: String,
        cancel: CancellationToken,
        step_evidence: Option<Evidence>,
    ) -> Self {
        let flow = ctx.flow.clone();
        let (system_prompt, declared, milestones, allowed) = match &role {
            Role::Root => (
                flow.system_prompt.clone(),
                flow.max_steps,
                flow.milestones.clone(),
                None,
            ),
            Role::Worker { kind } => {
                let worker = flow.workers.get(kind);
                (
                    worker.map(|w| w.prompt.clone()).unwrap_or_default(),
                    worker.map_or(0, |w| w.max_steps),
                    worker.map(|w| w.milestones.clone()).unwrap_or_default(),
                    worker.and_then(|w| w.tools.clone()),
                )
            }
        };
        let tools = match &role {
            Role::Root => Self::tools_of(&ctx, None, &milestones),
            // The workers of one kind are offered the same tools: built once
            // a run, shared by each worker of the kind.
            Role::Worker { kind } => {
                ctx.worker_tools(kind, || Self::tools_of(&ctx, allowed.as_ref(), &milestones))
            }
        };
        let strategy = std::sync::Mutex::new((ctx.strategy)());
        let ctx_nudges = ctx.nudges_for(&path);
        Self {
            ctx,
            role,
            path,
            system_prompt,
            state: LoopState {
                declared,
                limit: declared,
                milestones_open: milestones,
                ..LoopState::default()
            },
            tools,
            nudges: ctx_nudges,
            cancel,
            strategy,
            phase: Phase::Idle,
            model_attempt: 0,
            model_running: false,
            shortenings: 0,
            step_evidence,
            tail: None,
        }
    }

    /// Offers the run's tools, connected since the loop was made, to its
    /// model, before the built-in ones. For the root loop, which is made
    /// before the run connects its tool servers and may use them all.
    pub(crate) fn offer_run_tools(&mut self) {
        let mut tools = self.ctx.tools.definitions().to_vec();
        tools.extend(self.tools.iter().cloned());
        self.tools = tools.into();
    }

    /// The tools a loop offers its model: the run's, those of `allowed`
    /// servers only if given, then the built-in ones its flow calls for.
    fn tools_of(
        ctx: &RunContext,
        allowed: Option<&Vec<String>>,
        milestones: &[String],
    ) -> Arc<[ToolDefinition]> {
        let mut tools: Vec<ToolDefinition> = ctx
            .tools
            .definitions()
            .iter()
            .filter(|d| {
                allowed.is_none_or(|servers| {
                    ctx.tools
                        .get(&d.name)
                        .is_some_and(|route| servers.contains(&route.server))
                })
            })
            .cloned()
            .collect();
        if !ctx.flow.workers.is_empty() {
            tools.push(spawn_worker_definition(&ctx.flow.workers));
        }
        if !milestones.is_empty() {
            tools.push(complete_milestone_definition(milestones));
        }
        tools.into()
    }

    /// The consumer model costs are attributed to.
    fn consumer(&self) -> String {
        match &self.role {
            Role::Root => "run".to_owned(),
            Role::Worker { kind } => format!("worker:{kind}"),
        }
    }

    fn emit(&self, kind: EventKind) {
        self.ctx.emit(&self.path, kind);
    }

    /// Starts the loop with `task` as its first user message.
    pub(crate) fn begin(&mut self, task: &str, myself: &ActorRef<LoopMsg>) {
        self.state.transcript.push(ChatMessage::user(task));
        let _ = myself.send_message(LoopMsg::Next);
    }

    /// Handles one loop message, inside a `step` span (under the run's
    /// span); returns how the loop ended, once it has.
    pub(crate) async fn handle(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        message: LoopMsg,
    ) -> Option<LoopEnd> {
        let span = tracing::info_span!(
            parent: &self.ctx.span,
            "step",
            path = %self.path,
            step = self.state.steps
        );
        self.handle_in_step(myself, message).instrument(span).await
    }

    /// The span of a call at `path` (under the run's span).
    fn call_span(&self, path: &str, attempt: u32) -> tracing::Span {
        tracing::info_span!(parent: &self.ctx.span, "call", path = %path, attempt)
    }

    async fn handle_in_step(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        message: LoopMsg,
    ) -> Option<LoopEnd> {
        if self.phase == Phase::Done || self.cancel.is_cancelled() {
            return None;
        }
        match message {
            LoopMsg::Next => self.next(myself),
            LoopMsg::Conclude { answer } => self.conclude(myself, answer).await,
            LoopMsg::Budget(decision) => self.budget_decided(myself, decision),
            LoopMsg::Spending(pause) => self.spending_checked(myself, pause),
            LoopMsg::ModelDone {
                step,
                attempt,
                outcome,
                retry_after,
                overflow,
                unreachable,
            } => {
                let failure = step::Failure {
                    retry_after,
                    overflow,
                    unreachable,
                };
                self.model_done(myself, step, attempt, outcome, failure)
                    .await
            }
            LoopMsg::CallDone {
                step,
                index,
                attempt,
                outcome,
            } => self.call_done(myself, step, index, attempt, outcome).await,
            LoopMsg::Retry {
                step,
                index,
                attempt,
            } => self.retry(myself, step, index, attempt).await,
            LoopMsg::StartCalls { step } => self.start_calls(myself, step).await,
            LoopMsg::Reconciled {
                step,
                index,
                attempt,
                decision,
            } => {
                self.reconciled(myself, step, index, attempt, decision)
                    .await
            }
            LoopMsg::Escalate(_)
            | LoopMsg::EndpointDown(_)
            | LoopMsg::EndpointUp { .. }
            | LoopMsg::WaitOnEndpoint
            | LoopMsg::StoreFailed(_)
            | LoopMsg::Reconcile(_)
            | LoopMsg::Resume { .. }
            | LoopMsg::Decide { .. }
            | LoopMsg::Cancel { .. }
            | LoopMsg::Pause { .. }
            | LoopMsg::Steer { .. }
            | LoopMsg::Lease { .. }
            | LoopMsg::ToolsConnected(_) => None,
        }
    }

    /// Runs `message` once the run's gate is open: at once if it is, after a
    /// resume if the run is paused, never if the run has ended.
    fn when_open(&self, myself: &ActorRef<LoopMsg>, message: LoopMsg) {
        let mut gate = self.ctx.gate.subscribe();
        if *gate.borrow() == Gate::Open {
            let _ = myself.send_message(message);
            return;
        }
        let me = myself.clone();
        tokio::spawn(async move {
            let open = gate.wait_for(|g| *g != Gate::Paused).await;
            if open.is_ok_and(|g| *g == Gate::Open) {
                let _ = me.send_message(message);
            }
        });
    }

    /// Saves the loop's snapshot, fenced; `false` if it did not land.
    pub(crate) async fn save(&mut self, status: RunStatus) -> bool {
        if self.ctx.is_lost() {
            return false;
        }
        self.state.nudges = self.nudges.peek();
        let seq = self.ctx.next_seq();
        let (base, tail) = tail::HistoryTail::next(
            self.tail.as_ref(),
            seq,
            &self.ctx.run_id,
            &self.state.transcript,
        );
        let snapshot = |base: Option<SnapshotBase>| Snapshot {
            run_id: self.ctx.run_id.clone(),
            path: self.path.clone(),
            step: self.state.steps,
            status,
            state: serde_json::to_value(&self.state).unwrap_or_default(),
            seq,
            base,
        };
        // Built once; made again only for a write tried again.
        let mut first = Some(snapshot(base.clone()));
        let ctx = &self.ctx;
        let landed = ctx
            .write("snapshot", || {
                let snapshot = first.take().unwrap_or_else(|| snapshot(base.clone()));
                ctx.store.save_snapshot(snapshot, ctx.fence())
            })
            .await;
        if landed {
            self.tail = Some(tail);
        }
        landed
    }
}
