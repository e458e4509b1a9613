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
pub mod call;
mod context;
mod ends;
mod messages;
pub mod model_call;
mod restore;
mod supervise;
pub mod tool_call;
pub mod worker;

use std::collections::HashMap;
use std::sync::Arc;

use ractor::ActorRef;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::budget::{BudgetDecision, BudgetFigures, BudgetMsg, checkpoint_due};
use crate::event::{CallOutcome, EventKind};
use crate::evidence::Evidence;
use crate::lease::LeaseKind;
use crate::nudge::NudgeQueue;
use crate::ports::{
    BudgetEvaluationRequest, ChatMessage, FinishReason, ModelReply, ModelRequest, RunStatus,
    Snapshot, ToolCallRecord, ToolCallRequest, ToolCallState, ToolDefinition,
};
use crate::strategy::{ChildEnd, SupervisionStrategy};

pub use builtin::{COMPLETE_MILESTONE_TOOL, SPAWN_WORKER_TOOL};
pub use messages::{ControlError, Escalation, LoopMsg, ReconcileDecision, Reconciliation};
pub(crate) use restore::Saved;

pub(crate) use builtin::{complete_milestone_definition, spawn_worker_definition};
pub(crate) use context::{Gate, RunContext, RunParts, ToolRoute};
pub(crate) use ends::{call_outcome, describe_end, lease_end};

/// What the next step is told when the model's answer was cut off at its
/// length limit.
const CUT_OFF_NUDGE: &str = "Your previous answer was cut off at the length limit before it was \
                             complete. Continue from where it stopped, or give a shorter final answer.";

/// How many transcript messages a lease shows its evaluator.
const TRANSCRIPT_TAIL: usize = 4;

/// Whether a loop is the run's root or a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Root,
    Worker { kind: String },
}

/// One tool or worker call of a step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallState {
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
pub struct LoopState {
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
    tools: Vec<ToolDefinition>,
    pub(crate) nudges: NudgeQueue,
    pub(crate) cancel: CancellationToken,
    // In a mutex only to make the loop `Sync`: it is used by one actor.
    strategy: std::sync::Mutex<Box<dyn SupervisionStrategy>>,
    phase: Phase,
    model_attempt: u32,
    model_running: bool,
    /// Child actors by name, so that a panic ractor reports can be traced
    /// to its call.
    children: HashMap<String, (u32, Option<usize>, u32)>,
    /// Evidence to report each completed step into (a worker's lease).
    step_evidence: Option<Evidence>,
    budget: ActorRef<BudgetMsg>,
}

impl AgentLoop {
    pub(crate) fn new(
        ctx: Arc<RunContext>,
        role: Role,
        path: String,
        cancel: CancellationToken,
        step_evidence: Option<Evidence>,
        budget: ActorRef<BudgetMsg>,
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
        let mut tools: Vec<ToolDefinition> = ctx
            .tools
            .definitions()
            .iter()
            .filter(|d| {
                allowed.as_ref().is_none_or(|servers| {
                    ctx.tools
                        .get(&d.name)
                        .is_some_and(|route| servers.contains(&route.server))
                })
            })
            .cloned()
            .collect();
        if !flow.workers.is_empty() {
            tools.push(spawn_worker_definition(&flow.workers));
        }
        if !milestones.is_empty() {
            tools.push(complete_milestone_definition(&milestones));
        }
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
            children: HashMap::new(),
            step_evidence,
            budget,
        }
    }

    /// Offers the run's tools, connected since the loop was made, to its
    /// model, before the built-in ones. For the root loop, which is made
    /// before the run connects its tool servers and may use them all.
    pub(crate) fn offer_run_tools(&mut self) {
        let mut tools = self.ctx.tools.definitions().to_vec();
        tools.append(&mut self.tools);
        self.tools = tools;
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
            LoopMsg::Budget(decision) => self.budget_decided(myself, decision),
            LoopMsg::ModelDone {
                step,
                attempt,
                outcome,
                retry_after,
            } => {
                self.model_done(myself, step, attempt, outcome, retry_after)
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
            | LoopMsg::Reconcile(_)
            | LoopMsg::Resume { .. }
            | LoopMsg::Decide { .. }
            | LoopMsg::Cancel { .. }
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

    fn next(&mut self, myself: &ActorRef<LoopMsg>) -> Option<LoopEnd> {
        if *self.ctx.gate.borrow() != Gate::Open {
            self.when_open(myself, LoopMsg::Next);
            return None;
        }
        if !self.state.wrapping_up && checkpoint_due(self.state.steps, self.state.limit) {
            self.phase = Phase::Budget;
            let request = BudgetEvaluationRequest {
                run_id: self.ctx.run_id.clone(),
                path: self.path.clone(),
                figures: self
                    .state
                    .budget_figures(self.ctx.budget_config.max_extensions),
                transcript_tail: self.transcript_tail(),
            };
            let budget = self.budget.clone();
            let me = myself.clone();
            tokio::spawn(async move {
                let decision = crate::budget::BudgetCheckpointActor::check(&budget, request).await;
                let _ = me.send_message(LoopMsg::Budget(decision));
            });
            return None;
        }
        self.start_step(myself);
        None
    }

    fn budget_decided(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        decision: BudgetDecision,
    ) -> Option<LoopEnd> {
        if self.phase != Phase::Budget {
            return None;
        }
        match decision {
            BudgetDecision::Extend { new_limit, .. } => {
                self.state.extensions_used += 1;
                self.state.limit = new_limit;
            }
            BudgetDecision::WrapUp { .. } => {
                self.state.wrapping_up = true;
                self.state.transcript.push(ChatMessage::user(
                    "Your step budget is used up. Do not call any tool: reply with a summary \
                     of what was done and your final answer.",
                ));
            }
            // An unlimited budget has no checkpoint; go on.
            BudgetDecision::Unlimited => {}
        }
        self.start_step(myself);
        None
    }

    fn start_step(&mut self, myself: &ActorRef<LoopMsg>) {
        self.state.steps += 1;
        self.state.calls.clear();
        let nudges = self.take_nudges();
        self.emit(EventKind::StepStarted {
            step: self.state.steps,
            limit: self.state.limit,
            nudges,
        });
        self.model_attempt = 1;
        self.start_model_call(myself, 1);
    }

    /// Moves queued nudges and guidance into the transcript: the next model
    /// call sees them, and only that one.
    fn take_nudges(&mut self) -> u32 {
        let nudges = self.nudges.drain();
        let count = u32::try_from(nudges.len()).unwrap_or(u32::MAX);
        for nudge in nudges {
            self.state.transcript.push(ChatMessage::user(nudge));
        }
        count
    }

    fn transcript_tail(&self) -> Arc<[crate::ports::TranscriptMessage]> {
        let start = self.state.transcript.len().saturating_sub(TRANSCRIPT_TAIL);
        self.state.transcript[start..]
            .iter()
            .map(ChatMessage::to_transcript)
            .collect::<Vec<_>>()
            .into()
    }

    fn start_model_call(&mut self, myself: &ActorRef<LoopMsg>, attempt: u32) {
        self.phase = Phase::Model;
        self.model_attempt = attempt;
        self.model_running = true;
        let step = self.state.steps;
        let stream = self.ctx.flow.stream;
        let kind = if stream {
            LeaseKind::ModelStream
        } else {
            LeaseKind::ModelBlocking
        };
        let mut messages = Vec::with_capacity(self.state.transcript.len() + 1);
        if !self.system_prompt.is_empty() {
            messages.push(ChatMessage::system(self.system_prompt.clone()));
        }
        messages.extend(self.state.transcript.iter().cloned());
        let request = ModelRequest {
            messages,
            tools: if self.state.wrapping_up {
                Vec::new()
            } else {
                self.tools.clone()
            },
            stream,
            consumer: self.consumer(),
        };
        let path = format!("{}/model_call:{step}", self.path);
        let spec = self
            .ctx
            .spec(kind, &request.consumer, &path)
            .with_transcript_tail(self.transcript_tail())
            .with_nudges(self.nudges.clone())
            .with_parent(&self.cancel);
        self.emit(EventKind::ModelCallStarted {
            step,
            stream,
            attempt,
        });
        let args = model_call::ModelCallArgs {
            leases: self.ctx.leases.clone(),
            model: self.ctx.model.clone(),
            request,
            spec,
            reply_to: myself.clone(),
            step,
            attempt,
        };
        let name = self.adopt(&path, step, None, attempt);
        let span = self.call_span(&path, attempt);
        let me = myself.clone();
        let cell = myself.get_cell();
        tokio::spawn(async move {
            if let Err(error) =
                model_call::ModelCallActor::spawn_linked(name, args, span, cell).await
            {
                let _ = me.send_message(LoopMsg::ModelDone {
                    step,
                    attempt,
                    outcome: Err(ChildEnd::Failed {
                        reason: format!("could not start the model call: {error}"),
                        retryable: true,
                    }),
                    retry_after: None,
                });
            }
        });
    }

    async fn model_done(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
        attempt: u32,
        outcome: Result<ModelReply, ChildEnd>,
        retry_after: Option<std::time::Duration>,
    ) -> Option<LoopEnd> {
        if self.phase != Phase::Model
            || step != self.state.steps
            || attempt != self.model_attempt
            || !self.model_running
        {
            return None;
        }
        self.model_running = false;
        self.children.retain(|_, c| *c != (step, None, attempt));
        let reply = match outcome {
            Ok(reply) => reply,
            Err(end) => {
                self.emit(EventKind::ModelCallFinished {
                    step,
                    outcome: call_outcome(&end),
                    tool_calls: 0,
                    usage: Default::default(),
                    finish_reason: None,
                });
                return self.child_failed(
                    myself,
                    step,
                    None,
                    attempt,
                    end,
                    "model call",
                    retry_after,
                );
            }
        };
        self.emit(EventKind::ModelCallFinished {
            step,
            outcome: CallOutcome::Ok,
            tool_calls: u32::try_from(reply.tool_calls.len()).unwrap_or(u32::MAX),
            usage: reply.usage,
            finish_reason: reply.finish_reason,
        });
        let cut_off = reply.finish_reason == Some(FinishReason::Length);
        if cut_off && reply.tool_calls.is_empty() && !self.state.wrapping_up {
            // Not an answer: the model ran out of room mid-way. The next step
            // asks it to go on; the step budget bounds how often.
            self.state
                .transcript
                .push(ChatMessage::assistant(reply.content, Vec::new()));
            self.nudges.push(CUT_OFF_NUDGE);
            self.phase = Phase::Idle;
            if !self.save(RunStatus::Running).await {
                return None;
            }
            self.when_open(myself, LoopMsg::Next);
            return None;
        }
        if reply.tool_calls.is_empty() || self.state.wrapping_up {
            self.state
                .transcript
                .push(ChatMessage::assistant(reply.content.clone(), Vec::new()));
            self.phase = Phase::Done;
            self.state.answer = Some(reply.content.clone());
            self.save(RunStatus::Running).await;
            return Some(LoopEnd::Answer(reply.content));
        }
        self.state.transcript.push(ChatMessage::assistant(
            reply.content,
            reply.tool_calls.clone(),
        ));
        self.phase = Phase::Calls;
        self.state.calls = reply
            .tool_calls
            .into_iter()
            .map(|request| CallState {
                worker_path: (request.name == SPAWN_WORKER_TOOL).then(|| {
                    let kind = request
                        .arguments
                        .get("kind")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("worker");
                    self.worker_path(kind)
                }),
                request,
                attempt: 0,
                running: false,
                result: None,
            })
            .collect();
        // The model's answer is kept before any call is sent, so a resume
        // makes the same calls with the same keys instead of asking again.
        if !self.save(RunStatus::Running).await {
            return None;
        }
        // A pause that came while the model answered holds the calls back.
        self.when_open(myself, LoopMsg::StartCalls { step });
        None
    }

    async fn start_calls(&mut self, myself: &ActorRef<LoopMsg>, step: u32) -> Option<LoopEnd> {
        if self.phase != Phase::Calls || step != self.state.steps {
            return None;
        }
        if *self.ctx.gate.borrow() != Gate::Open {
            self.when_open(myself, LoopMsg::StartCalls { step });
            return None;
        }
        for index in 0..self.state.calls.len() {
            if self.state.calls[index].attempt == 0 && self.state.calls[index].result.is_none() {
                self.start_call(myself, index, 1).await;
            }
        }
        self.finish_step_if_done(myself).await
    }

    /// The idempotency key of call `index` of `step`: the same across
    /// retries and resumes.
    fn idempotency_key(&self, step: u32, index: usize) -> String {
        format!("{}/{}/{step}/{index}", self.ctx.run_id, self.path)
    }

    /// The record of tool call `index` of the current step, in `state`.
    fn call_record(
        &self,
        index: usize,
        state: ToolCallState,
        result: Option<String>,
    ) -> Option<ToolCallRecord> {
        let step = self.state.steps;
        let call = self.state.calls.get(index)?;
        Some(ToolCallRecord {
            key: self.idempotency_key(step, index),
            path: self.path.clone(),
            step,
            index,
            tool: call.request.name.clone(),
            arguments: call.request.arguments.clone(),
            idempotent: self
                .ctx
                .tools
                .get(&call.request.name)
                .and_then(|r| r.idempotent),
            state,
            result,
        })
    }

    async fn start_call(&mut self, myself: &ActorRef<LoopMsg>, index: usize, attempt: u32) {
        let step = self.state.steps;
        let Some(call) = self.state.calls.get_mut(index) else {
            return;
        };
        call.attempt = attempt;
        call.result = None;
        call.running = true;
        let request = call.request.clone();
        match request.name.as_str() {
            COMPLETE_MILESTONE_TOOL => {
                let result = self.close_milestone(&request.arguments);
                if let Some(call) = self.state.calls.get_mut(index) {
                    call.result = Some(result);
                    call.running = false;
                }
            }
            SPAWN_WORKER_TOOL => self.start_worker(myself, step, index, attempt, &request),
            _ if self.ctx.is_lost() => {}
            name => {
                self.state.tool_calls += 1;
                let key = self.idempotency_key(step, index);
                let Some(route) = self.ctx.tools.get(name).cloned() else {
                    let _ = myself.send_message(LoopMsg::CallDone {
                        step,
                        index,
                        attempt,
                        outcome: Ok(format!("error: there is no tool named `{name}`")),
                    });
                    return;
                };
                // Write-ahead: the call is recorded as sent, durably, before
                // it is sent, so a crash can never hide a call that went out.
                if let Some(record) = self.call_record(index, ToolCallState::Sent, None)
                    && !self.ctx.record_call(record).await
                {
                    return;
                }
                let path = format!("{}/tool_call:{step}.{index}", self.path);
                self.ctx.emit(
                    &path,
                    EventKind::ToolCallStarted {
                        tool: name.to_owned(),
                        idempotency_key: key.clone(),
                        attempt,
                    },
                );
                let spec = self
                    .ctx
                    .spec(LeaseKind::ToolCall, name, &path)
                    .with_transcript_tail(self.transcript_tail())
                    .with_nudges(self.nudges.clone())
                    .with_parent(&self.cancel);
                let args = tool_call::ToolCallArgs {
                    ctx: self.ctx.clone(),
                    path: path.clone(),
                    leases: self.ctx.leases.clone(),
                    client: route.client,
                    invocation: crate::ports::ToolInvocation {
                        name: name.to_owned(),
                        arguments: request.arguments,
                        idempotency_key: key,
                    },
                    spec,
                    reply_to: myself.clone(),
                    step,
                    index,
                    attempt,
                };
                let name = self.adopt(&path, step, Some(index), attempt);
                let span = self.call_span(&path, attempt);
                let me = myself.clone();
                let cell = myself.get_cell();
                tokio::spawn(async move {
                    if let Err(error) =
                        tool_call::ToolCallActor::spawn_linked(name, args, span, cell).await
                    {
                        let _ = me.send_message(LoopMsg::CallDone {
                            step,
                            index,
                            attempt,
                            outcome: Err(ChildEnd::Failed {
                                reason: format!("could not start the tool call: {error}"),
                                retryable: true,
                            }),
                        });
                    }
                });
            }
        }
    }

    fn close_milestone(&mut self, arguments: &serde_json::Value) -> String {
        let Some(name) = arguments
            .get("milestone")
            .and_then(serde_json::Value::as_str)
        else {
            return "error: `complete_milestone` needs {\"milestone\": \"<name>\"}".to_owned();
        };
        match self.state.milestones_open.iter().position(|m| m == name) {
            Some(at) => {
                let closed = self.state.milestones_open.remove(at);
                self.state.milestones_closed.push(closed);
                format!("milestone `{name}` closed")
            }
            None if self.state.milestones_closed.iter().any(|m| m == name) => {
                format!("milestone `{name}` was already closed")
            }
            None => format!("error: there is no open milestone named `{name}`"),
        }
    }

    fn worker_path(&self, kind: &str) -> String {
        format!(
            "{}/worker:{kind}:{}",
            self.path,
            self.ctx.next_worker_number()
        )
    }

    fn start_worker(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
        index: usize,
        attempt: u32,
        request: &ToolCallRequest,
    ) {
        let kind = request
            .arguments
            .get("kind")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let task = request
            .arguments
            .get("task")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if !self.ctx.flow.workers.contains_key(&kind) || task.is_empty() {
            let _ = myself.send_message(LoopMsg::CallDone {
                step,
                index,
                attempt,
                outcome: Ok(format!(
                    "error: `spawn_worker` needs {{\"kind\": one of {:?}, \"task\": \"…\"}}",
                    self.ctx.flow.workers.keys().collect::<Vec<_>>()
                )),
            });
            return;
        }
        self.state.spawns += 1;
        // The first attempt uses the path given when the model asked (kept in
        // the snapshot, so a resume finds the worker's own snapshot); a
        // restart is a new worker.
        let preassigned = self
            .state
            .calls
            .get(index)
            .and_then(|c| c.worker_path.clone())
            .filter(|_| attempt == 1);
        let path = preassigned.unwrap_or_else(|| self.worker_path(&kind));
        if let Some(call) = self.state.calls.get_mut(index) {
            call.worker_path = Some(path.clone());
        }
        self.ctx.emit(
            &path,
            EventKind::WorkerSpawned {
                worker: kind.clone(),
                task: task.clone(),
            },
        );
        let spec = self
            .ctx
            .spec(LeaseKind::WorkerStep, &format!("worker:{kind}"), &path)
            .with_transcript_tail(self.transcript_tail())
            .with_nudges(self.nudges.clone())
            .with_parent(&self.cancel);
        worker::start_worker_call(worker::WorkerCall {
            ctx: self.ctx.clone(),
            kind,
            task,
            path,
            spec,
            parent: myself.clone(),
            parent_cancel: self.cancel.clone(),
            step,
            index,
            attempt,
        });
    }

    async fn call_done(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
        index: usize,
        attempt: u32,
        outcome: Result<String, ChildEnd>,
    ) -> Option<LoopEnd> {
        if self.phase != Phase::Calls || step != self.state.steps {
            return None;
        }
        let call = self.state.calls.get_mut(index)?;
        if call.attempt != attempt || !call.running {
            return None;
        }
        call.running = false;
        let subject = call.request.name.clone();
        self.children
            .retain(|_, c| *c != (step, Some(index), attempt));
        let is_tool = subject != SPAWN_WORKER_TOOL && subject != COMPLETE_MILESTONE_TOOL;
        match outcome {
            Ok(result) => {
                if is_tool
                    && let Some(record) =
                        self.call_record(index, ToolCallState::Done, Some(result.clone()))
                    && !self.ctx.record_call(record).await
                {
                    return None;
                }
                if let Some(call) = self.state.calls.get_mut(index) {
                    call.result = Some(result);
                }
                if is_tool {
                    self.ctx.emit(
                        &format!("{}/tool_call:{step}.{index}", self.path),
                        EventKind::ToolCallFinished {
                            tool: subject,
                            idempotency_key: self.idempotency_key(step, index),
                            attempt,
                            outcome: CallOutcome::Ok,
                        },
                    );
                }
            }
            Err(end) => {
                // Sent, then ended without a result: whether it took effect
                // is not known.
                if is_tool
                    && let Some(record) = self.call_record(index, ToolCallState::Unknown, None)
                    && !self.ctx.record_call(record).await
                {
                    return None;
                }
                if subject != SPAWN_WORKER_TOOL {
                    self.ctx.emit(
                        &format!("{}/tool_call:{step}.{index}", self.path),
                        EventKind::ToolCallFinished {
                            tool: subject.clone(),
                            idempotency_key: self.idempotency_key(step, index),
                            attempt,
                            outcome: call_outcome(&end),
                        },
                    );
                }
                if let Some(ended) =
                    self.child_failed(myself, step, Some(index), attempt, end, &subject, None)
                {
                    return Some(ended);
                }
            }
        }
        self.finish_step_if_done(myself).await
    }

    /// When every call of the step has a result: feed them to the
    /// transcript, save the snapshot, and go on.
    async fn finish_step_if_done(&mut self, myself: &ActorRef<LoopMsg>) -> Option<LoopEnd> {
        if self.phase != Phase::Calls || self.state.calls.iter().any(|c| c.result.is_none()) {
            return None;
        }
        for call in std::mem::take(&mut self.state.calls) {
            self.state.transcript.push(ChatMessage::tool(
                call.request.id,
                call.result.unwrap_or_default(),
            ));
        }
        if let Some(evidence) = &self.step_evidence {
            evidence.progress(format!("step {} done", self.state.steps));
        }
        self.phase = Phase::Idle;
        self.save(RunStatus::Running).await;
        let _ = myself.send_message(LoopMsg::Next);
        None
    }

    /// Saves the loop's snapshot, fenced; `false` if it did not land.
    pub(crate) async fn save(&mut self, status: RunStatus) -> bool {
        if self.ctx.is_lost() {
            return false;
        }
        self.state.nudges = self.nudges.peek();
        let snapshot = Snapshot {
            run_id: self.ctx.run_id.clone(),
            path: self.path.clone(),
            step: self.state.steps,
            status,
            state: serde_json::to_value(&self.state).unwrap_or_default(),
        };
        let result = self
            .ctx
            .store
            .save_snapshot(snapshot, self.ctx.fence())
            .await;
        self.ctx.landed("snapshot", result)
    }

    /// Names a child actor and remembers which call it is, so its panic can
    /// be traced to its call.
    fn adopt(&mut self, path: &str, step: u32, index: Option<usize>, attempt: u32) -> String {
        let name = format!("{}/{path}#{attempt}", self.ctx.run_id);
        self.children.insert(name.clone(), (step, index, attempt));
        name
    }
}
