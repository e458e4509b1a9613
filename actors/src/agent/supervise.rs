//! A loop as the supervisor of its children: every abnormal end of a call or
//! a worker goes through the loop's [`SupervisionStrategy`], which restarts
//! it after a backoff (the same call, with the same idempotency key), pauses
//! the run for a person, fails the loop, or lets it carry on with the error
//! as the call's result; a call of unknown outcome to a tool not known to be
//! idempotent is never made twice blindly.

use ractor::ActorRef;
use tokio::sync::watch;

use super::{
    AgentLoop, Escalation, Gate, LoopEnd, LoopMsg, Phase, ReconcileDecision, Reconciliation, Role,
    SPAWN_WORKER_TOOL, describe_end, resume_to_try_again,
};
use crate::event::{EventKind, HandedTo};
use crate::ports::ToolCallState;
use crate::supervision::strategy::{
    ChildEnd, ChildInfo, ChildKind, GiveUpScope, OnExhausted, SupervisionAction,
};
use crate::vocabulary::evidence::EvidenceSummary;

impl AgentLoop {
    /// Applies the strategy to a child's abnormal end.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn child_failed(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
        index: Option<usize>,
        attempt: u32,
        end: ChildEnd,
        subject: &str,
        retry_after: Option<std::time::Duration>,
    ) -> Option<LoopEnd> {
        let kind = match index.and_then(|i| self.state.calls.get(i)) {
            None => ChildKind::ModelCall,
            Some(call) if call.request.name == SPAWN_WORKER_TOOL => ChildKind::Worker,
            Some(_) => ChildKind::ToolCall,
        };
        let child_path = match index {
            None => format!("{}/model_call:{step}", self.path),
            Some(i) => format!("{}/tool_call:{step}.{i}", self.path),
        };
        let info = ChildInfo {
            path: child_path.clone(),
            kind,
            subject: subject.to_owned(),
            attempt,
        };
        // A call of unknown outcome to a tool not known to be idempotent is
        // never made twice blindly: a person decides, and deciding spends no
        // restart intensity, since nothing was restarted.
        if kind == ChildKind::ToolCall
            && !self.tool_is_idempotent(index)
            && self
                .strategy
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .restarts(&info, &end)
            && let Some(i) = index
        {
            self.require_reconciliation(myself, step, i, attempt, &end);
            return None;
        }
        let action = self
            .strategy
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .decide(&info, &end, tokio::time::Instant::now());
        match action {
            SupervisionAction::Restart { after } => {
                // A server that said when to come back is not called sooner.
                let after = after.max(retry_after.unwrap_or_default());
                self.ctx.emit(
                    &child_path,
                    EventKind::Restarted {
                        attempt: attempt + 1,
                        delay_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
                        reason: describe_end(&end),
                    },
                );
                let me = myself.clone();
                let gate = self.ctx.gate.subscribe();
                let cancel = self.cancel.clone();
                let retry = LoopMsg::Retry {
                    step,
                    index,
                    attempt: attempt + 1,
                };
                tokio::spawn(async move {
                    tokio::select! {
                        () = cancel.cancelled() => {}
                        open = backoff(after, gate) => if open {
                            let _ = me.send_message(retry);
                        }
                    }
                });
                None
            }
            SupervisionAction::Pause { reason } => {
                let evidence = match &end {
                    ChildEnd::Escalated { evidence, .. } => evidence.clone(),
                    _ => None,
                };
                self.escalate(reason.clone(), subject, evidence);
                match index {
                    // The model call is made again after the resume, with the
                    // person's guidance in its messages.
                    None => {
                        self.when_open(
                            myself,
                            LoopMsg::Retry {
                                step,
                                index: None,
                                attempt: attempt + 1,
                            },
                        );
                    }
                    Some(i) => {
                        if let Some(call) = self.state.calls.get_mut(i) {
                            call.result = Some(format!(
                                "escalated to a person, who will answer in the next message: {reason}"
                            ));
                        }
                    }
                }
                None
            }
            SupervisionAction::Fail { reason } => {
                self.phase = Phase::Done;
                Some(LoopEnd::Failed(reason))
            }
            SupervisionAction::GiveUp {
                reason,
                scope,
                on_exhausted,
            } => self.give_up(
                myself,
                step,
                index,
                attempt,
                &end,
                &info,
                reason,
                scope,
                on_exhausted,
            ),
            SupervisionAction::Ignore => {
                if let Some(i) = index
                    && let Some(call) = self.state.calls.get_mut(i)
                {
                    call.result = Some(format!("error: {}", describe_end(&end)));
                }
                None
            }
        }
    }

    /// Hands a child the strategy gave up to the level above, as the
    /// supervision tree does: a tool call or a worker whose own attempts ran
    /// out ends as an error result its loop's model sees; a worker's loop
    /// past its restart intensity fails, which is its parent's error result;
    /// a model call, and the root loop past its intensity, reach the top,
    /// which pauses the run for a person (and `resume` tries the child
    /// again) or, with `on_exhausted = fail`, fails it.
    #[allow(clippy::too_many_arguments)]
    fn give_up(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
        index: Option<usize>,
        attempt: u32,
        end: &ChildEnd,
        info: &ChildInfo,
        reason: String,
        scope: GiveUpScope,
        on_exhausted: OnExhausted,
    ) -> Option<LoopEnd> {
        let last = describe_end(end);
        let subject = match info.kind {
            ChildKind::ModelCall => format!("the call to {}", self.ctx.model.describe()),
            ChildKind::ToolCall => format!("tool `{}`", info.subject),
            ChildKind::Worker => "the worker".to_owned(),
        };
        let reason = format!("{reason}; {subject} ended last with: {last}");
        let handed_to = match (info.kind, scope) {
            (ChildKind::ToolCall | ChildKind::Worker, GiveUpScope::Child) => HandedTo::Model,
            (_, GiveUpScope::Supervisor) if self.role != Role::Root => HandedTo::Parent,
            _ => HandedTo::Person,
        };
        self.ctx.emit(
            &info.path,
            EventKind::GaveUp {
                subject: info.subject.clone(),
                attempts: attempt,
                reason: reason.clone(),
                handed_to,
            },
        );
        match (handed_to, on_exhausted) {
            (HandedTo::Model, _) => {
                if let Some(call) = index.and_then(|i| self.state.calls.get_mut(i)) {
                    call.result = Some(format!(
                        "error: {subject} failed after {attempt} attempt{}: {last}",
                        if attempt == 1 { "" } else { "s" }
                    ));
                }
                None
            }
            (HandedTo::Parent, _) | (HandedTo::Person, OnExhausted::Fail) => {
                self.phase = Phase::Done;
                Some(LoopEnd::Failed(reason))
            }
            (HandedTo::Person, OnExhausted::Pause)
                if info.kind == ChildKind::ModelCall
                    && let Some(outage) =
                        self.ctx.endpoints.down_reason(&self.ctx.model_described) =>
            {
                // Its endpoint is down: the run waits for it to answer,
                // not for a person.
                self.wait_for_endpoint(myself, step, attempt + 1, outage);
                None
            }
            (HandedTo::Person, OnExhausted::Pause) => {
                self.escalate(resume_to_try_again(&reason, ""), &info.subject, None);
                // Tried again after the resume, with the person's guidance
                // for a model call.
                self.when_open(
                    myself,
                    LoopMsg::Retry {
                        step,
                        index,
                        attempt: attempt + 1,
                    },
                );
                None
            }
        }
    }

    pub(super) async fn retry(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
        index: Option<usize>,
        attempt: u32,
    ) -> Option<LoopEnd> {
        if step != self.state.steps {
            return None;
        }
        if *self.ctx.gate.borrow() != Gate::Open {
            self.when_open(
                myself,
                LoopMsg::Retry {
                    step,
                    index,
                    attempt,
                },
            );
            return None;
        }
        match index {
            None if self.phase == Phase::Model
                && !self.model_running
                && attempt == self.model_attempt + 1 =>
            {
                self.take_nudges();
                self.start_model_call(myself, attempt);
            }
            Some(i)
                if self.phase == Phase::Calls
                    && self.state.calls.get(i).is_some_and(|c| {
                        c.result.is_none() && !c.running && c.attempt + 1 == attempt
                    }) =>
            {
                self.start_call(myself, i, attempt).await;
            }
            _ => {}
        }
        None
    }

    pub(super) fn tool_is_idempotent(&self, index: Option<usize>) -> bool {
        index
            .and_then(|i| self.state.calls.get(i))
            .and_then(|call| self.ctx.tools.get(&call.request.name))
            .is_some_and(|route| route.idempotent == Some(true))
    }

    /// Pauses the run in `reconciliation_required` on call `index`, whose
    /// outcome is unknown, for a person to decide.
    pub(super) fn require_reconciliation(
        &self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
        index: usize,
        attempt: u32,
        end: &ChildEnd,
    ) {
        let Some(record) = self.call_record(index, ToolCallState::Unknown, None) else {
            return;
        };
        self.stop_clocks();
        if let Some(root) = self.ctx.root.get() {
            let reason = format!(
                "`{}` was sent and ended without a result ({}); it is not known to be idempotent, \
                 so it is not called again until a person decides",
                record.tool,
                describe_end(end)
            );
            let _ = root.send_message(LoopMsg::Reconcile(Box::new(Reconciliation {
                reason,
                record,
                owner: myself.clone(),
                step,
                index,
                attempt,
            })));
        }
    }

    /// Closes the gate and pauses every lease of the run at once.
    pub(super) fn stop_clocks(&self) {
        self.ctx.stop_clocks();
    }

    /// A person's decision on a call of unknown outcome.
    pub(super) async fn reconciled(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
        index: usize,
        attempt: u32,
        decision: ReconcileDecision,
    ) -> Option<LoopEnd> {
        if self.phase != Phase::Calls
            || step != self.state.steps
            || self
                .state
                .calls
                .get(index)
                .is_none_or(|c| c.attempt != attempt || c.running)
        {
            return None;
        }
        match decision {
            ReconcileDecision::MarkDone { result } => {
                if let Some(mut record) =
                    self.call_record(index, ToolCallState::Done, Some(result.clone()))
                    && {
                        record.by_person = true;
                        !self.ctx.record_call(record).await
                    }
                {
                    return None;
                }
                if let Some(call) = self.state.calls.get_mut(index) {
                    call.result = Some(result);
                }
                self.finish_step_if_done(myself).await
            }
            ReconcileDecision::Retry => {
                self.when_open(
                    myself,
                    LoopMsg::Retry {
                        step,
                        index: Some(index),
                        attempt: attempt + 1,
                    },
                );
                None
            }
            // The root cancels the run itself.
            ReconcileDecision::Cancel => None,
        }
    }

    /// Pauses the run: closes the gate and stops the clocks at once, so this
    /// loop starts nothing more, then asks the root to record the pause.
    pub(super) fn escalate(
        &self,
        reason: String,
        subject: &str,
        evidence: Option<EvidenceSummary>,
    ) {
        self.stop_clocks();
        if let Some(root) = self.ctx.root.get() {
            let _ = root.send_message(LoopMsg::Escalate(Box::new(Escalation {
                path: self.path.clone(),
                reason,
                subject: subject.to_owned(),
                evidence,
            })));
        }
    }
}

/// Waits out a restart's backoff on the run's clock: time spent paused does
/// not count, so a resume leaves the backoff where the pause found it.
/// `true` once it is over with the gate open, `false` if the run closed.
async fn backoff(after: std::time::Duration, mut gate: watch::Receiver<Gate>) -> bool {
    let mut left = after;
    loop {
        if gate
            .wait_for(|g| *g != Gate::Paused)
            .await
            .map_or(true, |g| *g == Gate::Closed)
        {
            return false;
        }
        let started = tokio::time::Instant::now();
        tokio::select! {
            () = tokio::time::sleep(left) => {
                if *gate.borrow() == Gate::Open {
                    return true;
                }
            }
            changed = gate.changed() => {
                if changed.is_err() {
                    return false;
                }
            }
        }
        left = left.saturating_sub(started.elapsed());
    }
}
