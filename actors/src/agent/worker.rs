//! `WorkerActor`: a sub-agent with its own loop and budget.
//!
//! A worker runs the same loop as the root, on its own step budget, asking
//! the run's budget checkpoint when it runs out (one actor per run serves
//! every loop: its terms are the run's). Its
//! parent holds it under a lease of kind `worker_step` whose evidence is the
//! worker's completed steps, so a worker that keeps finishing steps is never
//! suspected, and one that stops is judged like any silent operation. When
//! the lease ends the worker (intervene, escalate, cap, cancellation), the
//! worker and everything under it are cancelled and stopped.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{AgentLoop, LoopEnd, LoopMsg, Role, RunContext, lease_end};
use crate::event::{CallOutcome, EventKind};
use crate::supervision::evidence::Evidence;
use crate::supervision::lease::LeaseSpec;
use crate::supervision::strategy::ChildEnd;

/// What a worker actor is started with.
pub(crate) struct WorkerArgs {
    ctx: Arc<RunContext>,
    kind: String,
    task: String,
    path: String,
    cancel: CancellationToken,
    evidence: Evidence,
    done: oneshot::Sender<Result<String, String>>,
}

/// A worker's loop.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WorkerActor;

/// A worker actor's state.
pub(crate) struct WorkerState {
    agent: AgentLoop,
    task: String,
    done: Option<oneshot::Sender<Result<String, String>>>,
}

impl Actor for WorkerActor {
    type Msg = LoopMsg;
    type State = WorkerState;
    type Arguments = WorkerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let agent = AgentLoop::new(
            args.ctx,
            Role::Worker { kind: args.kind },
            args.path,
            args.cancel,
            Some(args.evidence),
        );
        Ok(WorkerState {
            agent,
            task: args.task,
            done: Some(args.done),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let task = state.task.clone();
        let saved = state.agent.ctx.saved().cloned();
        match saved {
            // A resumed run: the worker carries on from its own snapshot.
            Some(saved) => {
                if let Some(end) = Box::pin(state.agent.restore(&myself, &saved, &task)).await {
                    state.finish(&myself, end);
                }
            }
            None => state.agent.begin(&task, &myself),
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.agent.cancel.cancel();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Boxed: the loop's handler is kilobytes of future, held only while
        // a message is handled, not for the worker's life in its actor.
        if let Some(end) = Box::pin(state.agent.handle(&myself, message)).await {
            state.finish(&myself, end);
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        _event: SupervisionEvent,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // ractor's default stops a supervisor when a child ends: a worker
        // outlives its own workers, whose ends (a panic included: it drops
        // the worker's answer) reach it as their calls' outcomes.
        Ok(())
    }
}

impl WorkerState {
    fn finish(&mut self, myself: &ActorRef<LoopMsg>, end: LoopEnd) {
        let result = match end {
            LoopEnd::Answer(answer) => Ok(answer),
            LoopEnd::Failed(reason) => Err(reason),
        };
        if let Some(done) = self.done.take() {
            let _ = done.send(result);
        }
        myself.stop(None);
    }
}

/// A worker call of a parent loop: spawn it under a `worker_step` lease and
/// report its answer as the call's result.
pub(crate) struct WorkerCall {
    pub(crate) ctx: Arc<RunContext>,
    pub(crate) kind: String,
    pub(crate) task: String,
    pub(crate) path: String,
    pub(crate) spec: LeaseSpec,
    pub(crate) parent: ActorRef<LoopMsg>,
    pub(crate) parent_cancel: CancellationToken,
    pub(crate) step: u32,
    pub(crate) index: usize,
    pub(crate) attempt: u32,
}

/// Stops a worker when the operation that waits for it is dropped (the lease
/// ended it, or the parent was cancelled).
struct StopOnDrop {
    actor: ActorRef<LoopMsg>,
    cancel: CancellationToken,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.actor.stop(None);
    }
}

pub(crate) fn start_worker_call(call: WorkerCall) {
    let WorkerCall {
        ctx,
        kind,
        task,
        path,
        spec,
        parent,
        parent_cancel,
        step,
        index,
        attempt,
    } = call;
    let leases = ctx.leases.clone();
    let events_ctx = ctx.clone();
    let worker_kind = kind.clone();
    let worker_path = path.clone();
    let parent_cell = parent.get_cell();
    // Begun here: the lease counts from the worker's spawn, however long a
    // busy runtime takes to run the operation's task; the answer is
    // reported after it, in the same task.
    let operation = move |evidence| async move {
        let cancel = parent_cancel.child_token();
        let (done, answer) = oneshot::channel();
        let args = WorkerArgs {
            ctx,
            kind: worker_kind,
            task,
            path: worker_path,
            cancel: cancel.clone(),
            evidence,
            done,
        };
        // Boxed: the spawn's future is large, and the operation keeps
        // its state for the worker's whole life.
        let (actor, _) = Box::pin(Actor::spawn_linked(None, WorkerActor, args, parent_cell))
            .await
            .map_err(|e| format!("could not start the worker: {e}"))?;
        let _stop = StopOnDrop { actor, cancel };
        answer
            .await
            .unwrap_or_else(|_| Err("the worker stopped without an answer".to_owned()))
    };
    leases.supervise_then(spec, operation, move |outcome| async move {
        let outcome = match outcome {
            Ok(Ok(answer)) => Some(Ok(answer)),
            Ok(Err(reason)) => Some(Err(ChildEnd::Failed {
                reason,
                retryable: false,
            })),
            Err(error) => lease_end(error).map(Err),
        };
        let Some(outcome) = outcome else {
            return;
        };
        let (event_outcome, result) = match &outcome {
            Ok(answer) => (CallOutcome::Ok, answer.clone()),
            Err(end) => (
                crate::agent::call_outcome(end),
                crate::agent::describe_end(end),
            ),
        };
        events_ctx.emit(
            &path,
            EventKind::WorkerFinished {
                worker: kind,
                outcome: event_outcome,
                result,
            },
        );
        let _ = parent.send_message(LoopMsg::CallDone {
            step,
            index,
            attempt,
            outcome,
        });
    });
}
