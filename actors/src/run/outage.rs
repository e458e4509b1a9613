//! A run paused while an endpoint it calls is down, and resumed when it
//! answers again ([`crate::Endpoints`]).
//!
//! The pause is the run's usual one — `waiting_human`, gate paused, every
//! clock stopped — with the subject `endpoint` and a reason naming the
//! endpoint. Its loops wait for nothing else: no restart is spent. When the
//! endpoint answers (a probe, or a person marking it up) the run resumes
//! by itself, unless something else also holds it: a person's pause or
//! escalation, a call of unknown outcome. A person may resume it sooner;
//! its call is then tried once more.

use ractor::ActorRef;

use super::RunActorState;
use crate::agent::Outage;
use crate::agent::{Gate, LoopMsg};
use crate::event::EventKind;
use crate::ports::{PauseRecord, RunStatus};

pub use crate::vocabulary::event::ENDPOINT_SUBJECT;

impl RunActorState {
    /// A loop's call found its endpoint down: the run pauses, if it runs,
    /// and waits for the endpoint.
    pub(super) async fn pause_for_endpoint(&mut self, myself: &ActorRef<LoopMsg>, outage: Outage) {
        let Outage {
            path,
            endpoint,
            reason,
        } = outage;
        let ctx = self.agent.ctx.clone();
        let gate_closed = *ctx.gate.borrow() == Gate::Closed;
        let status = self.status();
        if status.is_terminal() || gate_closed {
            return;
        }
        self.outages.insert(path.clone(), endpoint.clone());
        if status == RunStatus::Running {
            ctx.emit(
                &path,
                EventKind::Paused {
                    reason: reason.clone(),
                    subject: ENDPOINT_SUBJECT.to_owned(),
                    evidence: None,
                    by: None,
                },
            );
            let pause = PauseRecord {
                reason,
                subject: ENDPOINT_SUBJECT.to_owned(),
                path,
                call: None,
            };
            self.enter_pause(RunStatus::WaitingHuman, pause).await;
        }
        wait_for(myself, &ctx, endpoint);
    }

    /// The run was taken over paused on its endpoint from an executor that
    /// is gone, to wait on it: it waits on the endpoint as this executor
    /// sees it, and so resumes at once unless the endpoint is down here
    /// too. A run paused for anything else, or resumed meanwhile, is left
    /// as it is.
    pub(super) fn wait_on_endpoint_taken_over(&mut self, myself: &ActorRef<LoopMsg>) {
        let ctx = self.agent.ctx.clone();
        let Some(pause) = self.state.borrow().paused.clone() else {
            return;
        };
        if pause.subject != ENDPOINT_SUBJECT
            || self.status() != RunStatus::WaitingHuman
            || !self.outages.is_empty()
            || *ctx.gate.borrow() == Gate::Closed
        {
            return;
        }
        // Restored as held for a person; it waits on the endpoint instead.
        self.escalations.retain(|path| *path != pause.path);
        let endpoint = ctx.model_described.clone();
        self.outages.insert(pause.path.clone(), endpoint.clone());
        // Up here: it resumes at once, on no answer of the endpoint's.
        self.outage_taken_over = ctx.endpoints.down_reason(&endpoint).is_none();
        wait_for(myself, &ctx, endpoint);
    }

    /// `endpoint` answers again: the loops that waited on it go on, and the
    /// run resumes once nothing else holds it.
    pub(super) async fn endpoint_up(&mut self, endpoint: &str) {
        let before = self.outages.len();
        self.outages.retain(|_, waited| waited != endpoint);
        if self.outages.len() == before || !self.outages.is_empty() {
            return;
        }
        let held_by_a_person = !self.escalations.is_empty() || !self.reconciliations.is_empty();
        if held_by_a_person || self.status() != RunStatus::WaitingHuman {
            return;
        }
        let by = if std::mem::take(&mut self.outage_taken_over) {
            format!(
                "taken over from an executor that is gone, with {endpoint} not known down here: \
                 its call is tried again"
            )
        } else {
            format!("{endpoint} answered again")
        };
        // A refusal of the store is the run's loss, said where it is lost.
        let _ = self.leave_pause(None, Some(by)).await;
    }

    /// A person resumed the run, or it ended: it waits on no endpoint.
    pub(super) fn forget_outages(&mut self) {
        self.outage_taken_over = false;
        if !self.outages.is_empty() {
            self.outages.clear();
            self.agent.ctx.endpoints.forget_run(&self.agent.ctx.run_id);
        }
    }
}

/// The run of `ctx` waits on `endpoint`: its root is told when it answers
/// (at once if it is up).
fn wait_for(myself: &ActorRef<LoopMsg>, ctx: &crate::agent::RunContext, endpoint: String) {
    let root = myself.clone();
    let waited = endpoint.clone();
    let resume = Box::new(move || {
        let _ = root.send_message(LoopMsg::EndpointUp { endpoint: waited });
    });
    ctx.endpoints.wait(&endpoint, &ctx.run_id, resume);
}
