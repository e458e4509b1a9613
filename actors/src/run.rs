//! `RunActor`: the root loop of a run, and the run's controls.
//!
//! Beside the loop it shares with workers, the run actor owns the run's
//! status. An `ESCALATE` anywhere in the tree pauses the whole run in
//! `waiting_human`: its gate closes (no loop starts a step or a retry), its
//! lease actor stops every clock (no lease expires), and it waits for a
//! person. [`RunHandle::resume`] hands the person's guidance to the loops
//! that escalated — their next model call sees it — and opens the gate;
//! [`RunHandle::cancel`] ends the run as `cancelled`. Terminal states and
//! snapshots are written here, by the actor, never from a task a client or a
//! lease can abort.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::agent::{AgentLoop, ControlError, Escalation, Gate, LoopEnd, LoopMsg, Role, RunContext};
use crate::budget::{BudgetCheckpointActor, BudgetCheckpointArgs, BudgetMsg};
use crate::event::EventKind;
use crate::lease::LeaseMsg;
use crate::ports::RunStatus;

/// The path of a run's root loop.
pub const ROOT_PATH: &str = "run";

/// What a run is, as its handle sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Its status.
    pub status: RunStatus,
    /// The answer, once completed.
    pub answer: Option<String>,
    /// Why it failed or was cancelled.
    pub reason: Option<String>,
    /// While paused: why, and what was being done.
    pub paused: Option<PauseInfo>,
}

/// Why a run waits for a person.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PauseInfo {
    /// The verdict's reason.
    pub reason: String,
    /// What was being done.
    pub subject: String,
    /// The loop that escalated.
    pub path: String,
}

/// The run actor.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunActor;

/// What a run actor is started with.
pub struct RunArgs {
    pub(crate) ctx: Arc<RunContext>,
    pub(crate) state: watch::Sender<RunState>,
}

/// A run actor's state.
pub struct RunActorState {
    agent: AgentLoop,
    state: watch::Sender<RunState>,
    escalations: Vec<Escalation>,
    budget: ActorRef<BudgetMsg>,
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
        let _ = ctx.root.set(myself.clone());
        let (budget, _) = Actor::spawn_linked(
            None,
            BudgetCheckpointActor,
            BudgetCheckpointArgs {
                config: ctx.budget_config,
                evaluator: ctx.evaluator.clone(),
                events: ctx.events.clone(),
            },
            myself.get_cell(),
        )
        .await?;
        let cancel = ctx.cancel.clone();
        let agent = AgentLoop::new(
            ctx,
            Role::Root,
            ROOT_PATH.to_owned(),
            cancel,
            None,
            budget.clone(),
        );
        Ok(RunActorState {
            agent,
            state: args.state,
            escalations: Vec::new(),
            budget,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let flow = state.agent.ctx.flow.clone();
        state.agent.ctx.emit(
            ROOT_PATH,
            EventKind::RunStarted {
                flow: flow.name.clone(),
                task: flow.task.clone(),
                max_steps: flow.max_steps,
            },
        );
        state.agent.begin(&flow.task, &myself);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Whatever stopped the actor, nothing of the run keeps running.
        state.agent.ctx.gate.send_replace(Gate::Closed);
        state.agent.ctx.cancel.cancel();
        state.budget.stop(None);
        state.agent.ctx.leases.actor().stop(None);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            LoopMsg::Escalate(escalation) => state.pause(*escalation).await,
            LoopMsg::Resume { guidance, reply } => {
                let _ = reply.send(state.resume(guidance));
            }
            LoopMsg::Cancel { reason, reply } => {
                let status = state.status();
                if status.is_terminal() {
                    let _ = reply.send(Err(ControlError::AlreadyFinished {
                        run_id: state.agent.ctx.run_id.clone(),
                        status,
                    }));
                } else {
                    state
                        .finish(&myself, RunStatus::Cancelled, None, Some(reason))
                        .await;
                    let _ = reply.send(Ok(()));
                }
            }
            message => match state.agent.handle(&myself, message).await {
                Some(LoopEnd::Answer(answer)) => {
                    state
                        .finish(&myself, RunStatus::Completed, Some(answer), None)
                        .await;
                }
                Some(LoopEnd::Failed(reason)) => {
                    state
                        .finish(&myself, RunStatus::Failed, None, Some(reason))
                        .await;
                }
                None => {}
            },
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // ractor's default stops a supervisor when a child ends: the run
        // outlives its calls and workers, and turns their panics into ends.
        if let SupervisionEvent::ActorFailed(cell, error) = event {
            state
                .agent
                .child_panicked(&myself, &cell, error.to_string());
        }
        Ok(())
    }
}

impl RunActorState {
    fn status(&self) -> RunStatus {
        self.state.borrow().status
    }

    async fn pause(&mut self, escalation: Escalation) {
        match self.status() {
            RunStatus::Running if *self.agent.ctx.gate.borrow() != Gate::Closed => {}
            status if status.is_paused() => {
                self.escalations.push(escalation);
                return;
            }
            _ => return,
        }
        let ctx = self.agent.ctx.clone();
        ctx.gate.send_replace(Gate::Paused);
        let _ = ctx.leases.actor().send_message(LeaseMsg::Pause);
        ctx.emit(
            &escalation.path,
            EventKind::Paused {
                reason: escalation.reason.clone(),
                subject: escalation.subject.clone(),
                evidence: escalation.evidence.clone(),
            },
        );
        self.state.send_modify(|s| {
            s.status = RunStatus::WaitingHuman;
            s.paused = Some(PauseInfo {
                reason: escalation.reason.clone(),
                subject: escalation.subject.clone(),
                path: escalation.path.clone(),
            });
        });
        self.escalations.push(escalation);
        self.agent.save(RunStatus::WaitingHuman).await;
    }

    fn resume(&mut self, guidance: Option<String>) -> Result<(), ControlError> {
        let status = self.status();
        let run_id = self.agent.ctx.run_id.clone();
        if status.is_terminal() {
            return Err(ControlError::AlreadyFinished { run_id, status });
        }
        if status != RunStatus::WaitingHuman {
            return Err(ControlError::NotPaused { run_id, status });
        }
        let note = match &guidance {
            Some(text) => format!("A person reviewed the escalation and answered: {text}"),
            None => "A person reviewed the escalation and said to go on.".to_owned(),
        };
        for escalation in self.escalations.drain(..) {
            escalation.nudges.push(note.clone());
        }
        let ctx = self.agent.ctx.clone();
        ctx.emit(ROOT_PATH, EventKind::Resumed { guidance });
        self.state.send_modify(|s| {
            s.status = RunStatus::Running;
            s.paused = None;
        });
        let _ = ctx.leases.actor().send_message(LeaseMsg::Resume);
        ctx.gate.send_replace(Gate::Open);
        Ok(())
    }

    /// Ends the run: closes the gate, cancels what is in flight, records the
    /// terminal event and snapshot, then tells the handle.
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
        let event = match status {
            RunStatus::Completed => EventKind::RunCompleted {
                answer: answer.clone().unwrap_or_default(),
                steps: self.agent.state.steps,
            },
            RunStatus::Cancelled => EventKind::RunCancelled {
                reason: reason.clone().unwrap_or_default(),
            },
            _ => EventKind::RunFailed {
                reason: reason.clone().unwrap_or_default(),
            },
        };
        ctx.emit(ROOT_PATH, event);
        self.agent.save(status).await;
        self.state.send_modify(|s| {
            s.status = status;
            s.answer = answer;
            s.reason = reason;
            s.paused = None;
        });
        myself.stop(None);
    }
}

/// A handle on a running run: its state, and the person's controls.
#[derive(Clone, Debug)]
pub struct RunHandle {
    run_id: String,
    actor: ActorRef<LoopMsg>,
    state: watch::Receiver<RunState>,
}

impl RunHandle {
    pub(crate) fn new(
        run_id: String,
        actor: ActorRef<LoopMsg>,
        state: watch::Receiver<RunState>,
    ) -> Self {
        Self {
            run_id,
            actor,
            state,
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The run's state now.
    pub fn state(&self) -> RunState {
        self.state.borrow().clone()
    }

    /// Waits until `condition` holds of the run's state, or the run ends.
    pub async fn wait_until(&mut self, condition: impl Fn(&RunState) -> bool) -> RunState {
        let result = self
            .state
            .wait_for(|s| condition(s) || s.status.is_terminal())
            .await
            .map(|s| s.clone());
        result.unwrap_or_else(|_| self.state.borrow().clone())
    }

    /// Waits for the run to end.
    pub async fn wait(&mut self) -> RunState {
        self.wait_until(|s| s.status.is_terminal()).await
    }

    /// Waits for the run to pause (or end).
    pub async fn paused(&mut self) -> RunState {
        self.wait_until(|s| s.status.is_paused()).await
    }

    /// Resumes a paused run; `guidance` reaches the next model call of each
    /// loop that escalated. Refused if the run is not paused.
    pub async fn resume(&self, guidance: Option<String>) -> Result<(), ControlError> {
        let result = ractor::call!(self.actor, |reply| LoopMsg::Resume { guidance, reply });
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
