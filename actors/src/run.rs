//! `RunActor`: the root loop of a run, and the run's controls.
//!
//! Beside the loop it shares with workers, the run actor owns the run's
//! status. An `ESCALATE` anywhere in the tree pauses the whole run in
//! `waiting_human`: its gate closes (no loop starts a step or a retry), its
//! lease actor stops every clock (no lease expires), and it waits for a
//! person. [`RunHandle::resume`] hands the person's guidance to the loops
//! that escalated — their next model call sees it — and opens the gate;
//! [`RunHandle::cancel`] ends the run as `cancelled`. A tool call whose
//! outcome is unknown and that is not known to be idempotent pauses the run
//! in `reconciliation_required` until a person decides
//! ([`RunHandle::reconcile`]).
//!
//! A run's first work is connecting its tool servers (`agent/tools.rs`): it
//! exists, and can be cancelled, before any of them has started; one that
//! cannot list its tools fails the run with a reason naming it. When the run
//! ends, its tool clients are closed — an HTTP session deleted, a stdio
//! server reaped — before the handle hears of the end, so before anything
//! that waits for it stops the servers they talk to.
//!
//! Every status change is written to the store with this executor's fence;
//! terminal states and snapshots are written here, by the actor, never from
//! a task a client or a lease can abort. If a write comes back stale, another
//! executor owns the run: this one stops working on it at once.

use std::sync::Arc;
use std::time::Duration;

mod outage;

pub use outage::ENDPOINT_SUBJECT;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::agent::Saved;
use crate::agent::{
    AgentLoop, ControlError, Escalation, Gate, LoopEnd, LoopMsg, ReconcileDecision, Reconciliation,
    Role, RunContext,
};
use crate::event::{Event, EventBus, EventKind, EventStream, Lagged};
use crate::nudge::PERSON_ANSWERED;
use crate::ports::{
    ForkOrigin, InFlight, LeaseAct, PauseRecord, PauseRequest, RunRecord, RunStatus, RunUpdate,
    Steer,
};
use crate::vocabulary::lease::LeaseId;

// The run's plan and its tools are leaves: every loop of the run reads
// them through its `RunContext` (`agent/context.rs`), so they name nothing
// of the loop or of this actor.

/// The reason a completed run whose answer was cut off keeps.
const CUT_OFF_ANSWER: &str = "its answer was cut off at the model's length limit (finish_reason \
     `length`) in its wrap-up step, with no room to continue it: it may be incomplete";

/// The path of a run's root loop.
pub const ROOT_PATH: &str = "run";

/// The most messages that may wait for a run's next step.
pub const MAX_WAITING_MESSAGES: usize = 16;

/// What a person's pause is about, as its record and event say.
const PERSON_SUBJECT: &str = "the run";

/// What a run is, as its handle sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Its status.
    pub status: RunStatus,
    /// The answer, once completed.
    pub answer: Option<String>,
    /// Why it failed or was cancelled.
    pub reason: Option<String>,
    /// While paused: why, what was being done, and for a reconciliation the
    /// call in question.
    pub paused: Option<PauseRecord>,
    /// Set if this executor lost the run to another (a stale fence): why.
    pub lost: Option<String>,
}

/// What the run actor reads of its record as it was taken on; the rest,
/// its flow above all, is the store's. Its rare parts are boxed: a whole
/// record is 688 bytes, most of them a pause, a fork and a trace that a run
/// seldom has, and the actor keeps this for its life.
pub(crate) struct TakenOn {
    pub(crate) status: RunStatus,
    pub(crate) created_at_ms: u64,
    pub(crate) pause: Option<Box<PauseRecord>>,
    pub(crate) fork: Option<Box<ForkOrigin>>,
    pub(crate) trace_parent: Option<Box<crate::trace_context::TraceParent>>,
}

impl From<RunRecord> for TakenOn {
    fn from(record: RunRecord) -> Self {
        Self {
            status: record.status,
            created_at_ms: record.created_at_ms,
            pause: record.pause.map(Box::new),
            fork: record.fork.map(Box::new),
            trace_parent: record.trace_parent.map(Box::new),
        }
    }
}

/// The run actor.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RunActor;

/// What a run actor is started with.
pub(crate) struct RunArgs {
    pub(crate) ctx: Arc<RunContext>,
    pub(crate) state: watch::Sender<RunState>,
    pub(crate) record: TakenOn,
    pub(crate) saved: Option<Saved>,
    /// Whether the engine logged the run's lineage as it launched it (a
    /// fork starting, `Engine::log_lineage`): the run
    /// then says nothing more of where it comes from.
    pub(crate) lineage_logged: bool,
}

/// A run actor's state.
pub(crate) struct RunActorState {
    agent: AgentLoop,
    state: watch::Sender<RunState>,
    escalations: Vec<String>,
    reconciliations: Vec<Reconciliation>,
    record: TakenOn,
    saved: Option<Saved>,
    /// Whether its lineage was logged as it launched ([`RunArgs`]).
    lineage_logged: bool,
    /// Whether the run is still connecting its tool servers.
    connecting: bool,
    /// Controls that arrived while it was: handled once it has.
    deferred: Vec<LoopMsg>,
    /// The loops waiting for an endpoint that is down, by path, each with
    /// the endpoint.
    outages: std::collections::BTreeMap<String, String>,
    /// Whether it waits on an endpoint since it was taken over from an
    /// executor that is gone, and not since a call failed here.
    outage_taken_over: bool,
}

impl Actor for RunActor {
    type Msg = LoopMsg;
    type State = RunActorState;
    type Arguments = RunArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let ctx = args.ctx;
        ctx.span.in_scope(|| {
            tracing::info!(
                status = args.record.status.name(),
                "run taken on by this executor"
            );
        });
        let _ = ctx.root.set(myself.clone());
        // Checked now, though the checkpoint starts only when a loop first
        // asks it: a run with terms it could not keep does not start.
        ctx.budget_config.validate()?;
        let cancel = ctx.cancel.clone();
        let agent = AgentLoop::new(ctx, Role::Root, ROOT_PATH.to_owned(), cancel, None);
        Ok(RunActorState {
            agent,
            state: args.state,
            escalations: Vec::new(),
            reconciliations: Vec::new(),
            record: args.record,
            saved: args.saved,
            lineage_logged: args.lineage_logged,
            connecting: false,
            deferred: Vec::new(),
            outages: std::collections::BTreeMap::new(),
            outage_taken_over: false,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let ctx = state.agent.ctx.clone();
        let flow = ctx.flow.clone();
        if let Some(origin) = state.record.fork.clone() {
            state.forked(&origin);
        } else if state.saved.is_none() {
            ctx.emit(
                ROOT_PATH,
                EventKind::RunStarted {
                    flow: flow.name.clone(),
                    task: flow.task.clone(),
                    max_steps: flow.max_steps,
                    trace_parent: state.record.trace_parent.clone(),
                },
            );
        } else {
            ctx.emit(
                ROOT_PATH,
                EventKind::RunResumed {
                    owner_id: ctx.owner_id.clone(),
                    fence: ctx.fence(),
                    created_at_ms: Some(state.record.created_at_ms),
                    trace_parent: state.record.trace_parent.clone(),
                },
            );
        }
        if ctx.tool_servers.is_empty() {
            ctx.tools
                .set(crate::agent::tools::ConnectedTools::default());
            state.begin(&myself).await;
            return Ok(());
        }
        // In a task of its own: a cancel, a shutdown or a lost fence is
        // heard while the servers start.
        state.connecting = true;
        let me = myself.clone();
        let span = ctx.span.clone();
        drop(tokio::spawn(tracing::Instrument::instrument(
            async move {
                let connected = tokio::select! {
                    connected = crate::agent::tools::connect(&ctx.tool_servers) => connected,
                    () = ctx.cancel.cancelled() => return,
                };
                let _ = me.send_message(LoopMsg::ToolsConnected(Box::new(connected)));
            },
            span,
        )));
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Whatever stopped the actor, nothing of the run keeps running here.
        let ctx = &state.agent.ctx;
        ctx.gate.send_replace(Gate::Closed);
        ctx.cancel.cancel();
        ctx.held.cancel();
        if let Some(checkpoint) = ctx.checkpoint.get() {
            checkpoint.stop(None);
        }
        ctx.leases.release();
        // The run's own tool servers end with it.
        for client in &ctx.owned_tools {
            client.shutdown().await;
        }
        if let Some(reason) = ctx.lost.get() {
            // Lost to another executor, it ends without an end of its own
            // here: what the log and the bus keep of it goes now, or it
            // would stay for as long as this executor serves.
            let forget = crate::event_log::LogItem::Forget(ctx.run_id.clone(), ctx.fence.clone());
            let _ = ctx.log.send(forget);
            let reason = reason.clone();
            state.state.send_modify(|s| s.lost = Some(reason));
        } else if let Some(reason) = ctx.let_go.get() {
            // Let go, its events not written yet stay with the log's
            // writer, which tries them until they land or the run's next
            // owner raises its fence.
            let reason = reason.clone();
            state.state.send_modify(|s| s.lost = Some(reason));
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Boxed: the handlers are kilobytes of future, held only while a
        // message is handled, not for the run's life in its actor.
        Box::pin(state.handle(myself, message)).await;
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        _event: SupervisionEvent,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // ractor's default stops a supervisor when a child ends: the run
        // outlives its workers, whose ends (a panic included: it drops the
        // worker's answer) reach it as their calls' outcomes.
        Ok(())
    }
}

impl RunActorState {
    /// Handles one message of the run's loop, once it is started.
    async fn handle(&mut self, myself: ActorRef<LoopMsg>, message: LoopMsg) {
        if self.agent.ctx.is_lost() {
            return;
        }
        if self.connecting
            && !matches!(
                message,
                LoopMsg::Cancel { .. } | LoopMsg::ToolsConnected(_) | LoopMsg::StoreFailed(_)
            )
        {
            self.deferred.push(message);
            return;
        }
        match message {
            LoopMsg::ToolsConnected(connected) => self.connected(&myself, *connected).await,
            LoopMsg::Escalate(escalation) => self.pause(*escalation).await,
            LoopMsg::EndpointDown(outage) => self.pause_for_endpoint(&myself, *outage).await,
            LoopMsg::EndpointUp { endpoint } => self.endpoint_up(&endpoint).await,
            LoopMsg::WaitOnEndpoint => self.wait_on_endpoint_taken_over(&myself),
            LoopMsg::StoreFailed(reason) => self.store_failed(&myself, reason).await,
            LoopMsg::Reconcile(reconciliation) => {
                self.require_reconciliation(*reconciliation).await
            }
            LoopMsg::Resume { guidance, reply } => {
                let result = self.resume(guidance).await;
                let _ = reply.send(result);
            }
            LoopMsg::Decide {
                key,
                decision,
                reply,
            } => {
                let result = self.decide(&myself, &key, decision).await;
                let _ = reply.send(result);
            }
            LoopMsg::Pause { request, reply } => {
                let result = self.pause_by_person(*request).await;
                let _ = reply.send(result);
            }
            LoopMsg::Steer {
                text,
                policy,
                by,
                reply,
            } => {
                let result = self.steer(text, policy, by).await;
                let _ = reply.send(result);
            }
            LoopMsg::Lease {
                lease_id,
                act,
                by,
                reply,
            } => {
                let result = self.lease_by_hand(lease_id, act, by).await;
                let _ = reply.send(result);
            }
            LoopMsg::Cancel { reason, reply } => {
                let status = self.status();
                if status.is_terminal() {
                    let _ = reply.send(Err(ControlError::AlreadyFinished {
                        run_id: self.agent.ctx.run_id.clone(),
                        status,
                    }));
                } else {
                    self.finish(&myself, RunStatus::Cancelled, None, Some(reason))
                        .await;
                    let _ = reply.send(Ok(()));
                }
            }
            message => {
                if let Some(end) = self.agent.handle(&myself, message).await {
                    self.ended(&myself, end).await;
                }
            }
        }
    }

    fn status(&self) -> RunStatus {
        self.state.borrow().status
    }

    fn run_id(&self) -> String {
        self.agent.ctx.run_id.clone()
    }

    /// A fork starts: its lineage was logged as it launched (`run_forked`,
    /// its replayed calls: [`RunArgs::lineage_logged`]), or, taken on
    /// again by another executor after it started, it says that it
    /// resumed. Its guidance waits for the forked loop's next step if the
    /// fork has not yet taken a step of its own and the loop has no
    /// snapshot to carry it (its first step).
    fn forked(&mut self, origin: &ForkOrigin) {
        let ctx = self.agent.ctx.clone();
        if !self.lineage_logged {
            ctx.emit(
                ROOT_PATH,
                EventKind::RunResumed {
                    owner_id: ctx.owner_id.clone(),
                    fence: ctx.fence(),
                    created_at_ms: Some(self.record.created_at_ms),
                    trace_parent: self.record.trace_parent.clone(),
                },
            );
        }
        let Some(saved) = &self.saved else { return };
        if saved.history() <= origin.seq
            && !saved.snapshots.iter().any(|s| s.path == origin.path)
            && let Some(guidance) = &origin.guidance
        {
            ctx.nudges_for(&origin.path).push(guidance.clone());
        }
    }

    /// Starts the root loop's work: its first step, or where a resumed run
    /// stopped. Its tool servers are connected.
    async fn begin(&mut self, myself: &ActorRef<LoopMsg>) {
        let ctx = self.agent.ctx.clone();
        let task = ctx.flow.task.clone();
        let Some(saved) = self.saved.take() else {
            self.agent.begin(&task, myself);
            return;
        };
        // A run paused for a person stays paused across executors.
        if let Some(pause) = self.record.pause.clone()
            && self.record.status.is_paused()
        {
            ctx.gate.send_replace(Gate::Paused);
            ctx.leases.pause();
            if self.record.status == RunStatus::WaitingHuman {
                // Held for a person, whatever paused it, unless it was taken
                // over to wait on its endpoint (`LoopMsg::WaitOnEndpoint`).
                self.escalations.push(pause.path.clone());
            }
            self.state.send_modify(|s| s.paused = Some(*pause));
        } else if self.record.status != RunStatus::Running {
            self.state.send_modify(|s| s.status = RunStatus::Running);
        }
        let saved = Arc::new(saved);
        ctx.set_saved(saved.clone());
        if let Some(end) = self.agent.restore(myself, &saved, &task).await {
            self.ended(myself, end).await;
        }
    }

    /// The run's tool servers are connected: the root loop begins, and the
    /// controls that waited are handled. Or one could not be: the run fails,
    /// saying which and why.
    async fn connected(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        connected: Result<crate::agent::tools::ConnectedTools, String>,
    ) {
        if !self.connecting {
            return;
        }
        self.connecting = false;
        match connected {
            Ok(tools) => {
                self.agent.ctx.tools.set(tools);
                self.agent.offer_run_tools();
                self.begin(myself).await;
                for message in std::mem::take(&mut self.deferred) {
                    let _ = myself.send_message(message);
                }
            }
            Err(reason) => {
                // The controls that waited find the run ended: their reply
                // ports are dropped with them.
                self.deferred.clear();
                self.finish(myself, RunStatus::Failed, None, Some(reason))
                    .await;
            }
        }
    }

    async fn ended(&mut self, myself: &ActorRef<LoopMsg>, end: LoopEnd) {
        match end {
            LoopEnd::Answer(answer) => {
                // The record says so too: `runs show`, `GET /runs/{id}`.
                let reason = self
                    .agent
                    .state
                    .answer_cut_off
                    .then(|| CUT_OFF_ANSWER.to_owned());
                self.finish(myself, RunStatus::Completed, Some(answer), reason)
                    .await
            }
            LoopEnd::Failed(reason) => {
                self.finish(myself, RunStatus::Failed, None, Some(reason))
                    .await
            }
        }
    }

    /// Stops the run's clocks and records the pause.
    async fn enter_pause(&mut self, status: RunStatus, pause: PauseRecord) {
        let ctx = self.agent.ctx.clone();
        ctx.span.in_scope(|| {
            tracing::info!(status = status.name(), reason = %pause.reason, "run paused for a person");
        });
        ctx.gate.send_replace(Gate::Paused);
        ctx.leases.pause();
        let update = RunUpdate {
            status,
            reason: None,
            answer: None,
            pause: Some(pause.clone()),
            at_ms: ctx.now_ms(),
        };
        if !ctx.update(update).await {
            return;
        }
        self.state.send_modify(|s| {
            s.status = status;
            s.paused = Some(pause);
        });
        self.agent.save(status).await;
    }

    async fn pause(&mut self, escalation: Escalation) {
        let gate_closed = *self.agent.ctx.gate.borrow() == Gate::Closed;
        match self.status() {
            RunStatus::Running if !gate_closed => {}
            status if status.is_paused() => {
                self.escalations.push(escalation.path);
                return;
            }
            _ => return,
        }
        self.agent.ctx.emit(
            &escalation.path,
            EventKind::Paused {
                reason: escalation.reason.clone(),
                subject: escalation.subject.clone(),
                evidence: escalation.evidence.clone().map(Box::new),
                by: None,
            },
        );
        let pause = PauseRecord {
            reason: escalation.reason,
            subject: escalation.subject,
            path: escalation.path.clone(),
            call: None,
        };
        self.escalations.push(escalation.path);
        self.enter_pause(RunStatus::WaitingHuman, pause).await;
    }

    /// The run's status and id, if it takes a person's controls still:
    /// refused once it has ended, or while it ends.
    fn taking_controls(&self) -> Result<(RunStatus, String), ControlError> {
        let status = self.status();
        let run_id = self.run_id();
        if status.is_terminal() {
            return Err(ControlError::AlreadyFinished { run_id, status });
        }
        if *self.agent.ctx.gate.borrow() == Gate::Closed {
            return Err(ControlError::Ending { run_id });
        }
        Ok((status, run_id))
    }

    /// A person pauses the running run: the same pause as an escalation's
    /// (the gate paused, every clock stopped, `waiting_human` stored), its
    /// resume's guidance for the root loop's next model call. With
    /// [`InFlight::Cancel`], each operation in flight is then stopped as
    /// an `INTERVENE` stops it, decided by the person; what its strategy
    /// makes again waits for the resume.
    async fn pause_by_person(&mut self, request: PauseRequest) -> Result<(), ControlError> {
        let (status, run_id) = self.taking_controls()?;
        if status.is_paused() {
            return Err(ControlError::AlreadyPaused { run_id, status });
        }
        let ctx = self.agent.ctx.clone();
        let PauseRequest {
            reason,
            in_flight,
            by,
        } = request;
        ctx.emit(
            ROOT_PATH,
            EventKind::Paused {
                reason: reason.clone(),
                subject: PERSON_SUBJECT.to_owned(),
                evidence: None,
                by: Some(by.clone()),
            },
        );
        let pause = PauseRecord {
            reason: format!("{by} paused the run: {reason}"),
            subject: PERSON_SUBJECT.to_owned(),
            path: ROOT_PATH.to_owned(),
            call: None,
        };
        self.escalations.push(ROOT_PATH.to_owned());
        self.enter_pause(RunStatus::WaitingHuman, pause).await;
        if self.status() != RunStatus::WaitingHuman {
            return Err(ControlError::Lost {
                run_id,
                reason: ctx
                    .lost
                    .get()
                    .cloned()
                    .unwrap_or_else(|| "the store refused the pause".to_owned()),
            });
        }
        if in_flight == InFlight::Cancel {
            let stop = LeaseAct::Intervene {
                reason: "the run was paused with its operations in flight cancelled".to_owned(),
            };
            // None in flight is no refusal: the pause holds either way.
            let _ = ctx.leases.by_person(None, None, stop, by).await;
        }
        Ok(())
    }

    /// A person's message: queued for the root loop's next model call and
    /// saved with its snapshot before it is answered, so that it survives
    /// the executor; with [`Steer::Interrupt`], the root loop's own call in
    /// flight is then stopped as a person's `INTERVENE` (its retry is that
    /// next call); with [`Steer::Reject`], refused while the run is running.
    async fn steer(&mut self, text: String, policy: Steer, by: String) -> Result<(), ControlError> {
        let (status, run_id) = self.taking_controls()?;
        if policy == Steer::Reject && !status.is_paused() {
            return Err(ControlError::Busy { run_id, status });
        }
        let waiting = self.agent.nudges.len();
        if waiting >= MAX_WAITING_MESSAGES {
            return Err(ControlError::TooManyMessages {
                run_id,
                waiting,
                limit: MAX_WAITING_MESSAGES,
            });
        }
        let ctx = self.agent.ctx.clone();
        ctx.emit(
            ROOT_PATH,
            EventKind::MessageReceived {
                text: text.clone(),
                policy: policy.name().to_owned(),
                by: by.clone(),
            },
        );
        self.agent.nudges.push(format!(
            "{}{by}, who oversees this run: {text}",
            crate::nudge::PERSON_MESSAGE
        ));
        self.agent.save(status).await;
        if policy == Steer::Interrupt && !status.is_paused() {
            let stop = LeaseAct::Intervene {
                reason: "interrupted by a message".to_owned(),
            };
            let _ = ctx
                .leases
                .by_person(None, Some(ROOT_PATH.to_owned()), stop, by)
                .await;
        }
        Ok(())
    }

    /// A person extends or stops one lease of the run by hand: recorded as
    /// a verdict decided by the person.
    async fn lease_by_hand(
        &mut self,
        lease_id: LeaseId,
        act: LeaseAct,
        by: String,
    ) -> Result<(), ControlError> {
        let (_, run_id) = self.taking_controls()?;
        let done = match act {
            LeaseAct::Extend { .. } => "extended",
            LeaseAct::Intervene { .. } => "stopped",
        };
        self.agent
            .ctx
            .leases
            .by_person(Some(lease_id), None, act, by)
            .await
            .map(|_| ())
            .map_err(|reason| ControlError::LeaseRefused {
                run_id,
                lease_id,
                act: done,
                reason,
            })
    }

    async fn require_reconciliation(&mut self, reconciliation: Reconciliation) {
        if self.status().is_terminal() || *self.agent.ctx.gate.borrow() == Gate::Closed {
            return;
        }
        if self
            .reconciliations
            .iter()
            .any(|r| r.record.key == reconciliation.record.key)
        {
            return;
        }
        let record = reconciliation.record.clone();
        self.agent.ctx.emit(
            &record.path,
            EventKind::ReconciliationRequired {
                tool: record.tool.clone(),
                idempotency_key: record.key.clone(),
                arguments: Box::new(record.arguments.clone()),
                reason: reconciliation.reason.clone(),
            },
        );
        let pause = PauseRecord {
            reason: reconciliation.reason.clone(),
            subject: record.tool.clone(),
            path: record.path.clone(),
            call: Some(record),
        };
        self.reconciliations.push(reconciliation);
        self.enter_pause(RunStatus::ReconciliationRequired, pause)
            .await;
    }

    /// Opens the gate and restarts the clocks, once nothing waits for a
    /// person any more.
    async fn leave_pause(
        &mut self,
        guidance: Option<String>,
        by: Option<String>,
    ) -> Result<(), ControlError> {
        let ctx = self.agent.ctx.clone();
        let update = RunUpdate {
            status: RunStatus::Running,
            reason: None,
            answer: None,
            pause: None,
            at_ms: ctx.now_ms(),
        };
        // Claimed with the fence: a stale executor cannot apply an answer.
        if !ctx.update(update).await {
            return Err(ControlError::Lost {
                run_id: ctx.run_id.clone(),
                reason: ctx
                    .lost
                    .get()
                    .cloned()
                    .unwrap_or_else(|| "the store refused the change".to_owned()),
            });
        }
        match &by {
            Some(by) => ctx.span.in_scope(|| tracing::info!(%by, "run resumed")),
            None => ctx
                .span
                .in_scope(|| tracing::info!("run resumed by a person")),
        }
        ctx.emit(ROOT_PATH, EventKind::Resumed { guidance, by });
        self.state.send_modify(|s| {
            s.status = RunStatus::Running;
            s.paused = None;
        });
        ctx.leases.resume();
        ctx.gate.send_replace(Gate::Open);
        Ok(())
    }

    async fn resume(&mut self, guidance: Option<String>) -> Result<(), ControlError> {
        let status = self.status();
        let run_id = self.run_id();
        if status.is_terminal() {
            return Err(ControlError::AlreadyFinished { run_id, status });
        }
        if status == RunStatus::ReconciliationRequired
            && let Some(first) = self.reconciliations.first()
        {
            return Err(ControlError::NeedsReconciliation {
                run_id,
                key: first.record.key.clone(),
            });
        }
        if status != RunStatus::WaitingHuman {
            return Err(ControlError::NotPaused { run_id, status });
        }
        let note = match &guidance {
            Some(text) => format!("{PERSON_ANSWERED} and answered: {text}"),
            None => format!("{PERSON_ANSWERED} and said to go on."),
        };
        self.leave_pause(guidance, None).await?;
        self.forget_outages();
        for path in self.escalations.drain(..) {
            self.agent.ctx.nudges_for(&path).push(note.clone());
        }
        Ok(())
    }

    async fn decide(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        key: &str,
        decision: ReconcileDecision,
    ) -> Result<(), ControlError> {
        let status = self.status();
        let run_id = self.run_id();
        if status.is_terminal() {
            return Err(ControlError::AlreadyFinished { run_id, status });
        }
        let Some(at) = self
            .reconciliations
            .iter()
            .position(|r| r.record.key == key)
        else {
            return Err(ControlError::NoSuchCall {
                run_id,
                key: key.to_owned(),
            });
        };
        if decision == ReconcileDecision::Cancel {
            let reason = format!("cancelled by a person deciding on tool call {key}");
            self.finish(myself, RunStatus::Cancelled, None, Some(reason))
                .await;
            return Ok(());
        }
        if self.reconciliations.len() == 1 && self.escalations.is_empty() {
            self.leave_pause(None, None).await?;
        }
        let reconciliation = self.reconciliations.remove(at);
        let _ = reconciliation.owner.send_message(LoopMsg::Reconciled {
            step: reconciliation.step,
            index: reconciliation.index,
            attempt: reconciliation.attempt,
            decision,
        });
        Ok(())
    }

    /// Ends the run: closes the gate, cancels what is in flight, records the
    /// terminal state, event, snapshot and log durably, then tells the
    /// handle.
    async fn finish(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        status: RunStatus,
        answer: Option<String>,
        reason: Option<String>,
    ) {
        let ctx = self.agent.ctx.clone();
        ctx.gate.send_replace(Gate::Closed);
        ctx.cancel.cancel();
        self.forget_outages();
        // The operations in flight let go of their leases first, so their
        // `lease_cancelled` come before the end, in the log as on the bus
        // (after the end's flush the log takes no event of the run).
        // Bounded: a lease actor that does not answer does not hold the end.
        let _ = tokio::time::timeout(LEASES_DRAIN, ctx.leases.drained()).await;
        let event = match status {
            RunStatus::Completed => EventKind::RunCompleted {
                answer: answer.clone().unwrap_or_default(),
                steps: self.agent.state.steps,
                cut_off: self.agent.state.answer_cut_off,
            },
            RunStatus::Cancelled => EventKind::RunCancelled {
                reason: reason.clone().unwrap_or_default(),
            },
            _ => EventKind::RunFailed {
                reason: reason.clone().unwrap_or_default(),
            },
        };
        ctx.emit(ROOT_PATH, event);
        ctx.span.in_scope(|| {
            tracing::info!(
                status = status.name(),
                reason = reason.as_deref().unwrap_or(""),
                "run ended"
            );
        });
        self.agent.save(status).await;
        let update = RunUpdate {
            status,
            reason: reason.clone(),
            answer: answer.clone(),
            pause: None,
            at_ms: ctx.now_ms(),
        };
        // Its events first: a reader who sees the end finds every event
        // before it in the log. An end the log does not hold is not
        // recorded: the run is let go, and resumed from its last snapshot.
        let recorded = if ctx.flush_log().await {
            record_end(&ctx, update).await
        } else {
            ctx.release(format!(
                "its end ({}) was not recorded: the store refused its last events",
                status.name()
            ));
            false
        };
        // Closed before the handle hears of the end: whoever waits for it
        // may stop the servers next, and a client closed after its server
        // (an HTTP session deleted on a stopped server) fails noisily.
        for client in &ctx.owned_tools {
            client.shutdown().await;
        }
        if recorded {
            self.state.send_modify(|s| {
                s.status = status;
                s.answer = answer;
                s.reason = reason;
                s.paused = None;
            });
        }
        myself.stop(None);
    }

    /// A write of the run's was given up. With `on_failure = fail` the run
    /// fails with the store's error as its reason. Otherwise it pauses for
    /// a person: its work stops (the operations in flight are cancelled,
    /// its heartbeat too), `paused` says why, its log is written, and the
    /// record says `waiting_human` with the reason; then this executor lets
    /// it go, so a resume — on any executor — goes on from its last durable
    /// snapshot. If the pause cannot be written either, the run is let go
    /// as it is: its lease runs out and an executor resumes it.
    async fn store_failed(&mut self, myself: &ActorRef<LoopMsg>, reason: String) {
        if self.status().is_terminal() {
            return;
        }
        let ctx = self.agent.ctx.clone();
        if ctx.store_writes.on_failure == crate::OnStoreFailure::Fail {
            self.finish(myself, RunStatus::Failed, None, Some(reason))
                .await;
            return;
        }
        ctx.gate.send_replace(Gate::Closed);
        ctx.cancel.cancel();
        let _ = tokio::time::timeout(LEASES_DRAIN, ctx.leases.drained()).await;
        ctx.emit(
            ROOT_PATH,
            EventKind::Paused {
                reason: reason.clone(),
                subject: STORE_SUBJECT.to_owned(),
                evidence: None,
                by: None,
            },
        );
        let pause = PauseRecord {
            reason: reason.clone(),
            subject: STORE_SUBJECT.to_owned(),
            path: ROOT_PATH.to_owned(),
            call: None,
        };
        let update = RunUpdate {
            status: RunStatus::WaitingHuman,
            reason: None,
            answer: None,
            pause: Some(pause.clone()),
            at_ms: ctx.now_ms(),
        };
        if ctx.flush_log().await && ctx.update(update).await {
            // Its lease ends now: a resume claims it at once.
            let _ = ctx
                .store
                .renew_run(&ctx.run_id, ctx.fence(), ctx.now_ms(), 0)
                .await;
            self.state.send_modify(|s| {
                s.status = RunStatus::WaitingHuman;
                s.paused = Some(pause);
            });
        }
        ctx.release(reason);
        myself.stop(None);
    }
}

/// What a run paused by its store was doing, as its pause says.
pub(crate) const STORE_SUBJECT: &str = "store";

/// How long a run's end waits for its cancelled operations to let go of
/// their leases.
const LEASES_DRAIN: Duration = Duration::from_secs(1);

/// Records the run's end, trying again after a store error (a connection
/// lost, a session the database ended) for the engine's patience: the end
/// is what every reader waits for. A refusal (a stale fence) is final: the run was lost and the new
/// owner carries on. If the end cannot be recorded at all, this executor
/// lets the run go, saying so: its lease expires and another executor
/// resumes it from its last snapshot.
async fn record_end(ctx: &RunContext, update: RunUpdate) -> bool {
    let status = update.status;
    if ctx.update(update).await {
        return true;
    }
    if !ctx.is_lost() {
        ctx.release(format!(
            "its end ({}) could not be recorded; an executor resumes it from its last snapshot \
             once its lease expires",
            status.name()
        ));
    }
    false
}

/// A handle on a running run: its state, its events, and the person's
/// controls.
#[derive(Clone, Debug)]
pub struct RunHandle {
    run_id: String,
    actor: ActorRef<LoopMsg>,
    state: watch::Receiver<RunState>,
    events: RunEventSource,
    labels: Arc<crate::keyed_limits::RunLabels>,
}

/// Where a handle's event streams come from: the engine's bus, and the
/// bus's last `seq` before the run started, where the first stream begins
/// (a mark, not a subscription: a subscription held from the run's start
/// and never read would walk every event published since when dropped).
#[derive(Clone)]
pub(crate) struct RunEventSource {
    bus: EventBus,
    first: Arc<std::sync::Mutex<Option<u64>>>,
}

impl RunEventSource {
    pub(crate) fn new(bus: EventBus, first: u64) -> Self {
        Self {
            bus,
            first: Arc::new(std::sync::Mutex::new(Some(first))),
        }
    }
}

impl std::fmt::Debug for RunEventSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunEventSource")
    }
}

/// The events of one run, in order, ending after the run's end: what
/// [`RunHandle::events`] gives.
///
/// It never waits for an end that cannot come: once it has lagged (its
/// run's end event may be among what it lost), it ends when the run's state
/// says the run is over; and it ends when this engine no longer runs the
/// run (it was lost to another executor, or the engine stopped it), once
/// every event already sent was read.
///
/// Each item of [`Self::recv`] is an `Option<Result<Arc<Event>, Lagged>>`:
/// `Some(Ok(event))`, the next [`Event`] (shared with the engine's other
/// readers, hence the `Arc`); `Some(Err(Lagged { missed }))` when this
/// reader fell behind and lost `missed` events, which the store's event
/// log still holds; `None` once the run's end was read.
///
/// ```
/// use std::sync::Arc;
/// use leasehold_actors::prelude::*;
/// use leasehold_actors::testing::{ScriptedModel, Turn};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new().script("run", [Turn::answer("Done.")]);
/// let engine = Engine::builder().model(Arc::new(model)).build().await?;
/// let flow = Flow::builder("triage", "Sort the issues.").max_steps(3).build()?;
/// let run = engine.start(flow).await?;
/// let mut events = run.events();
/// let mut answer = None;
/// while let Some(item) = events.recv().await {
///     match item {
///         Ok(event) => {
///             // Where in the run (`run`, `run/worker:reader:1`), then what.
///             println!("{} {} {}", event.seq, event.path, event.kind.describe());
///             if let EventKind::RunCompleted { answer: text, .. } = &event.kind {
///                 answer = Some(text.clone());
///             }
///         }
///         Err(Lagged { missed }) => eprintln!("{missed} events missed: read the store's log"),
///     }
/// }
/// assert_eq!(answer.as_deref(), Some("Done."));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RunEvents {
    run_id: String,
    stream: EventStream,
    state: watch::Receiver<RunState>,
    lagged: bool,
    ended: bool,
}

impl RunEvents {
    /// The run's next event; [`Lagged`] if this reader fell behind the
    /// engine's bus and lost some (the store's event log has them all);
    /// `None` once the run's end event was read, or the engine is gone.
    /// The example of [`RunEvents`] reads every item.
    pub async fn recv(&mut self) -> Option<Result<Arc<Event>, Lagged>> {
        if self.ended {
            return None;
        }
        loop {
            let lagged = self.lagged;
            let next = tokio::select! {
                biased;
                next = self.stream.recv() => next?,
                () = over(&mut self.state, lagged) => {
                    self.ended = true;
                    return None;
                }
            };
            match next {
                Ok(event) if *event.run_id != *self.run_id => continue,
                Ok(event) => {
                    self.ended = matches!(
                        event.kind,
                        EventKind::RunCompleted { .. }
                            | EventKind::RunFailed { .. }
                            | EventKind::RunCancelled { .. }
                    );
                    return Some(Ok(event));
                }
                Err(lost) => {
                    self.lagged = true;
                    return Some(Err(lost));
                }
            }
        }
    }
}

/// Resolves when no more events of the run can come: it was lost to
/// another executor or its actor is gone, or — for a reader that `lagged`
/// and may have lost the end event — it has ended.
async fn over(state: &mut watch::Receiver<RunState>, lagged: bool) {
    // An error is the run's actor gone: nothing more will be sent either.
    let _ = state
        .wait_for(|s| s.lost.is_some() || (lagged && s.status.is_terminal()))
        .await;
}

impl RunHandle {
    pub(crate) fn new(
        run_id: String,
        actor: ActorRef<LoopMsg>,
        state: watch::Receiver<RunState>,
        events: RunEventSource,
        labels: Arc<crate::keyed_limits::RunLabels>,
    ) -> Self {
        Self {
            run_id,
            actor,
            state,
            events,
            labels,
        }
    }

    /// What keyed limits read of the run: its tenant and its flow's name.
    pub fn labels(&self) -> &crate::keyed_limits::RunLabels {
        &self.labels
    }

    /// This run's events, and no other run's. The first stream taken from
    /// the handle an engine returned starts at the run's first event (it
    /// was subscribed before the run started); any later one, or one of a
    /// clone, starts now. It ends after the run's end event.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use leasehold_actors::prelude::*;
    /// use leasehold_actors::testing::{ScriptedModel, Turn};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let model = ScriptedModel::new().script("run", [Turn::answer("Done.")]);
    /// let engine = Engine::builder().model(Arc::new(model)).build().await?;
    /// let run = engine.start(Flow::builder("n", "Do it.").build()?).await?;
    /// let mut events = run.events();
    /// let mut names = Vec::new();
    /// while let Some(Ok(event)) = events.recv().await {
    ///     names.push(event.kind.name());
    /// }
    /// assert_eq!(names.first(), Some(&"run_started"));
    /// assert_eq!(names.last(), Some(&"run_completed"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn events(&self) -> RunEvents {
        let first = self
            .events
            .first
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        RunEvents {
            run_id: self.run_id.clone(),
            stream: match first {
                Some(seq) => self.events.bus.subscribe_after(seq),
                None => self.events.bus.subscribe(),
            },
            state: self.state.clone(),
            lagged: false,
            ended: false,
        }
    }

    /// The text this run's model calls stream, as it streams: what each
    /// call in flight wrote so far, then each delta, with its byte offset
    /// in its call's answer ([`crate::event::TextFollow`]). Not events: the log keeps
    /// none of it.
    pub fn text(&self) -> crate::event::TextFollow {
        self.events.bus.texts().follow(&self.run_id)
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The run's state now.
    pub fn state(&self) -> RunState {
        self.state.borrow().clone()
    }

    /// Waits until `condition` holds of the run's state, or the run ends, or
    /// this executor loses it.
    pub async fn wait_until(&mut self, condition: impl Fn(&RunState) -> bool) -> RunState {
        let result = self
            .state
            .wait_for(|s| condition(s) || s.status.is_terminal() || s.lost.is_some())
            .await
            .map(|s| s.clone());
        result.unwrap_or_else(|_| self.state.borrow().clone())
    }

    /// Has the run, taken over paused on its endpoint, wait on that
    /// endpoint instead of for a person
    /// ([`Engine::take_over_endpoint_waits_up_to`](crate::Engine::take_over_endpoint_waits_up_to)).
    pub(crate) fn wait_on_endpoint(&self) {
        let _ = self.actor.send_message(LoopMsg::WaitOnEndpoint);
    }

    /// Waits for the run to end (or to be lost to another executor).
    pub async fn wait(&mut self) -> RunState {
        self.wait_until(|s| s.status.is_terminal()).await
    }

    /// Waits for the run to pause (or end).
    pub async fn paused(&mut self) -> RunState {
        self.wait_until(|s| s.status.is_paused()).await
    }

    /// Resumes a run paused in `waiting_human`; `guidance` reaches the next
    /// model call of each loop that escalated. Refused if the run is not so
    /// paused.
    pub async fn resume(&self, guidance: Option<String>) -> Result<(), ControlError> {
        let result = ractor::call!(self.actor, |reply| LoopMsg::Resume { guidance, reply });
        result.unwrap_or_else(|_| Err(self.gone()))
    }

    /// Decides about the tool call of unknown outcome with idempotency key
    /// `key`: mark it done with a result, call it again, or cancel the run.
    pub async fn reconcile(
        &self,
        key: impl Into<String>,
        decision: ReconcileDecision,
    ) -> Result<(), ControlError> {
        let key = key.into();
        let result = ractor::call!(self.actor, |reply| LoopMsg::Decide {
            key,
            decision,
            reply
        });
        result.unwrap_or_else(|_| Err(self.gone()))
    }

    /// Pauses the running run for a person, as an `ESCALATE` does: no step
    /// or retry starts and every clock stops until [`Self::resume`] (whose
    /// guidance reaches the root loop's next model call) or
    /// [`Self::cancel`]. The operations in flight finish, their results
    /// kept, or with [`InFlight::Cancel`] are stopped as by an `INTERVENE`
    /// and made again after the resume. Refused if the run has ended, is
    /// paused already, or is ending.
    ///
    /// ```no_run
    /// # async fn pause(run: leasehold_actors::RunHandle) -> Result<(), leasehold_actors::ControlError> {
    /// use leasehold_actors::{InFlight, PauseRequest};
    ///
    /// run.pause(PauseRequest::new("checking the budget").by("ana").in_flight(InFlight::Cancel))
    ///     .await?;
    /// run.resume(Some("go on, within 10 more steps".to_owned())).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn pause(&self, request: PauseRequest) -> Result<(), ControlError> {
        let request = Box::new(request);
        let result = ractor::call!(self.actor, |reply| LoopMsg::Pause { request, reply });
        result.unwrap_or_else(|_| Err(self.gone()))
    }

    /// Extends the lease `lease_id` of the running run by `by` (the end of
    /// its current period moves that much later; no cap counts it), as a
    /// verdict decided by `who`. Refused if the lease is not in flight or
    /// the run is paused (its clocks are stopped; its resume gives every
    /// lease a full, fresh period).
    pub async fn extend_lease(
        &self,
        lease_id: LeaseId,
        by: std::time::Duration,
        who: impl Into<String>,
    ) -> Result<(), ControlError> {
        let act = LeaseAct::Extend {
            by_ms: u64::try_from(by.as_millis()).unwrap_or(u64::MAX),
        };
        self.lease(lease_id, act, who.into()).await
    }

    /// Stops the operation of the lease `lease_id` as an `INTERVENE` does
    /// (its loop's strategy decides what follows), as a verdict decided by
    /// `who`. Refused if the lease is not in flight.
    pub async fn intervene_lease(
        &self,
        lease_id: LeaseId,
        reason: impl Into<String>,
        who: impl Into<String>,
    ) -> Result<(), ControlError> {
        let act = LeaseAct::Intervene {
            reason: reason.into(),
        };
        self.lease(lease_id, act, who.into()).await
    }

    /// Sends the run a person's message, delivered as `policy` says
    /// ([`Steer`]; a `rollback` is a fork, made by the executor): the root
    /// loop's next model call sees it. Refused if the run has ended, is
    /// ending, already holds [`MAX_WAITING_MESSAGES`] messages for its next
    /// step, or (with `reject`) is running.
    pub async fn steer(
        &self,
        text: impl Into<String>,
        policy: Steer,
        by: impl Into<String>,
    ) -> Result<(), ControlError> {
        if policy == Steer::Rollback {
            return Err(ControlError::RollbackIsAFork {
                run_id: self.run_id.clone(),
            });
        }
        let (text, by) = (text.into(), by.into());
        let result = ractor::call!(self.actor, |reply| LoopMsg::Steer {
            text,
            policy,
            by,
            reply
        });
        result.unwrap_or_else(|_| Err(self.gone()))
    }

    /// A person's act on one lease, as a forwarded command carries it.
    pub async fn lease(
        &self,
        lease_id: LeaseId,
        act: LeaseAct,
        by: String,
    ) -> Result<(), ControlError> {
        let result = ractor::call!(self.actor, |reply| LoopMsg::Lease {
            lease_id,
            act,
            by,
            reply
        });
        result.unwrap_or_else(|_| Err(self.gone()))
    }

    /// Cancels the run. Refused if it has already ended.
    pub async fn cancel(&self, reason: impl Into<String>) -> Result<(), ControlError> {
        let reason = reason.into();
        let result = ractor::call!(self.actor, |reply| LoopMsg::Cancel { reason, reply });
        result.unwrap_or_else(|_| Err(self.gone()))
    }

    fn gone(&self) -> ControlError {
        let status = self.state.borrow().status;
        if status.is_terminal() {
            ControlError::AlreadyFinished {
                run_id: self.run_id.clone(),
                status,
            }
        } else {
            ControlError::Gone {
                run_id: self.run_id.clone(),
            }
        }
    }
}
