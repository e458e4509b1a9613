//! The loop's model step: the budget checkpoint before it, then one model
//! call under a lease, and what its answer makes of the step — the loop's
//! answer, a cut-off reply to continue, or tool and worker calls to start
//! (in [`calls`](super::calls)).

use std::sync::Arc;

use ractor::ActorRef;

use super::{
    AgentLoop, CallState, Gate, LoopEnd, LoopMsg, Phase, SPAWN_WORKER_TOOL, call_outcome,
    model_call,
};
use crate::event::{CallOutcome, EventKind};
use crate::ports::{
    BudgetEvaluationRequest, ChatMessage, FinishReason, ModelReply, ModelRequest, RunStatus,
};
use crate::supervision::budget::{BudgetDecision, checkpoint_due};
use crate::supervision::lease::{LeaseId, LeaseKind};
use crate::supervision::strategy::ChildEnd;

/// What the next step is told when the model's answer was cut off at its
/// length limit.
const CUT_OFF_NUDGE: &str = "Your previous answer was cut off at the length limit before it was \
                             complete. Continue from where it stopped, or give a shorter final answer.";

/// How many transcript messages a lease shows its evaluator.
const TRANSCRIPT_TAIL: usize = 4;

impl AgentLoop {
    pub(super) fn next(&mut self, myself: &ActorRef<LoopMsg>) -> Option<LoopEnd> {
        if *self.ctx.gate.borrow() != Gate::Open {
            self.when_open(myself, LoopMsg::Next);
            return None;
        }
        if !self.state.wrapping_up && self.ctx.spending.reached().is_some() {
            self.check_spending(myself);
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
            let ctx = self.ctx.clone();
            let me = myself.clone();
            tokio::spawn(async move {
                let decision = ctx.check_budget(request).await;
                let _ = me.send_message(LoopMsg::Budget(decision));
            });
            return None;
        }
        self.start_step(myself);
        None
    }

    /// Asks the run's checkpoint about its spending budget, one loop at a
    /// time: an extension raises the budget; anything else grants one more
    /// budget of the flow's size and pauses the run for a person, who
    /// decides whether it is spent.
    fn check_spending(&mut self, myself: &ActorRef<LoopMsg>) {
        self.phase = Phase::Budget;
        let mut figures = self
            .state
            .budget_figures(self.ctx.budget_config.max_extensions);
        let ctx = self.ctx.clone();
        let me = myself.clone();
        let (run_id, path) = (self.ctx.run_id.clone(), self.path.clone());
        let transcript_tail = self.transcript_tail();
        tokio::spawn(async move {
            let spending = ctx.spending.clone();
            let _turn = spending.turn().await;
            // Another loop may have been answered while this one waited.
            let Some(spent) = spending.reached() else {
                let _ = me.send_message(LoopMsg::Spending(None));
                return;
            };
            let max = ctx.budget_config.max_extensions;
            figures.extensions_used = spending.extensions_used();
            figures.extensions_left = max.saturating_sub(figures.extensions_used);
            figures.spending = Some(spent.clone());
            let request = BudgetEvaluationRequest {
                run_id,
                path,
                figures,
                transcript_tail,
            };
            let decision = ctx.check_budget(request).await;
            let pause = match decision {
                BudgetDecision::Extend {
                    spending: Some(after),
                    ..
                } => {
                    spending.extend_to(&after);
                    None
                }
                BudgetDecision::Extend { spending: None, .. } | BudgetDecision::Unlimited => None,
                BudgetDecision::WrapUp { reason } => {
                    // The gate closes before the next loop's turn, so no
                    // loop starts a step on the budget granted here.
                    ctx.stop_clocks();
                    spending.grant_tranche();
                    Some(format!(
                        "the run's spending budget is reached: {} ({reason}); resuming grants \
                         another {}",
                        spent.describe(),
                        spending.tranche()
                    ))
                }
            };
            let _ = me.send_message(LoopMsg::Spending(pause));
        });
    }

    pub(super) fn spending_checked(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        pause: Option<String>,
    ) -> Option<LoopEnd> {
        if self.phase != Phase::Budget {
            return None;
        }
        self.phase = Phase::Idle;
        if let Some(reason) = pause {
            self.escalate(reason, "spending budget", None);
        }
        self.next(myself)
    }

    pub(super) fn budget_decided(
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

    /// The root loop's answer held for a pause or a person's message
    /// ([`LoopMsg::Conclude`]): another step if a person's message waits,
    /// else the run's end with it.
    pub(super) async fn conclude(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        answer: String,
    ) -> Option<LoopEnd> {
        if self.phase != Phase::Idle {
            return None;
        }
        if self.nudges.holds_person_message() {
            return self.next(myself);
        }
        self.phase = Phase::Done;
        self.state.answer = Some(answer.clone());
        self.save(RunStatus::Running).await;
        Some(LoopEnd::Answer(answer))
    }

    pub(super) fn start_step(&mut self, myself: &ActorRef<LoopMsg>) {
        self.state.steps += 1;
        self.state.calls.clear();
        let nudges = self.take_nudges();
        self.emit(EventKind::StepStarted {
            step: self.state.steps,
            limit: self.state.limit,
            nudges,
        });
        self.model_attempt = 1;
        self.shortenings = 0;
        self.start_model_call(myself, 1);
    }

    /// Moves queued nudges and guidance into the transcript: the next model
    /// call sees them, and only that one.
    pub(super) fn take_nudges(&mut self) -> u32 {
        let nudges = self.nudges.drain();
        let count = u32::try_from(nudges.len()).unwrap_or(u32::MAX);
        for nudge in nudges {
            self.state.transcript.push(ChatMessage::user(nudge));
        }
        count
    }

    pub(super) fn transcript_tail(&self) -> Arc<[crate::ports::TranscriptMessage]> {
        let start = self.state.transcript.len().saturating_sub(TRANSCRIPT_TAIL);
        self.state.transcript[start..]
            .iter()
            .map(ChatMessage::to_transcript)
            .collect::<Vec<_>>()
            .into()
    }

    /// The most tokens this loop's answers may hold: its worker kind's
    /// `max_tokens`, else its flow's.
    fn max_tokens(&self) -> Option<u32> {
        let own = match &self.role {
            super::Role::Worker { kind } => self
                .ctx
                .flow
                .workers
                .get(kind)
                .and_then(|worker| worker.max_tokens),
            super::Role::Root => None,
        };
        own.or(self.ctx.flow.max_tokens)
    }

    pub(super) fn start_model_call(&mut self, myself: &ActorRef<LoopMsg>, attempt: u32) {
        if let Some(reason) = self.ctx.endpoints.marked_down(&self.ctx.model_described) {
            // A person marked the endpoint down: the call waits, unmade.
            self.phase = Phase::Model;
            self.model_attempt = attempt.saturating_sub(1);
            self.model_running = false;
            self.wait_for_endpoint(myself, self.state.steps, attempt, reason);
            return;
        }
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
                self.tools.to_vec()
            },
            stream,
            consumer: self.consumer(),
            traceparent: None,
            max_tokens: self.max_tokens(),
        };
        let path = format!("{}/model_call:{step}", self.path);
        let request = ModelRequest {
            traceparent: Some(crate::traceparent_of(
                &self.ctx.trace_id,
                &self.ctx.run_id,
                &format!("{path}#{attempt}"),
            )),
            ..request
        };
        let lease_id = LeaseId::next();
        let spec = self
            .ctx
            .spec(kind, &request.consumer, &path)
            .with_id(lease_id)
            .with_pace_key(Some(self.pace_key(kind, &request)))
            .with_endpoint(Some(self.ctx.model_described.clone()))
            .with_transcript_tail(self.transcript_tail())
            .with_nudges(self.nudges.clone())
            .with_parent(&self.cancel);
        self.emit(EventKind::ModelCallStarted {
            step,
            stream,
            attempt,
            lease_id: Some(lease_id),
        });
        // Begun here: the lease counts from now, however long a busy
        // runtime takes to start the operation's task. The model is called
        // inside that task, where a panic is the call's.
        let model = self.ctx.model.clone();
        let args = model_call::ModelCallArgs {
            reply_to: myself.clone(),
            step,
            attempt,
        };
        super::call::start(
            &self.ctx.leases,
            spec,
            move |evidence| async move { model.complete(request, evidence).await },
            args,
            self.call_span(&path, attempt),
        );
    }

    /// Pauses the run until the endpoint of this loop's model answers,
    /// then makes call `attempt` of `step`.
    pub(super) fn wait_for_endpoint(
        &self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
        attempt: u32,
        reason: String,
    ) {
        self.stop_clocks();
        if let Some(root) = self.ctx.root.get() {
            let _ = root.send_message(LoopMsg::EndpointDown(Box::new(super::messages::Outage {
                path: self.path.clone(),
                endpoint: self.ctx.model_described.clone(),
                reason,
            })));
        }
        self.when_open(
            myself,
            LoopMsg::Retry {
                step,
                index: None,
                attempt,
            },
        );
    }

    pub(super) async fn model_done(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
        attempt: u32,
        outcome: Result<ModelReply, ChildEnd>,
        failure: Failure,
    ) -> Option<LoopEnd> {
        let Failure {
            retry_after,
            overflow,
            unreachable,
        } = failure;
        if self.phase != Phase::Model
            || step != self.state.steps
            || attempt != self.model_attempt
            || !self.model_running
        {
            return None;
        }
        self.model_running = false;
        let reply = match outcome {
            Ok(reply) => reply,
            Err(end) => {
                if unreachable.is_none() && matches!(end, ChildEnd::Failed { .. }) {
                    // Refused, or answered amiss: either way, answered.
                    self.ctx.endpoints.answered(&self.ctx.model_described);
                }
                self.emit(EventKind::ModelCallFinished {
                    step,
                    attempt,
                    outcome: call_outcome(&end),
                    tool_calls: 0,
                    usage: Default::default(),
                    model: self.ctx.model_name.clone(),
                    spent: self
                        .ctx
                        .prices
                        .spent(self.ctx.model_name.as_deref(), Default::default()),
                    finish_reason: None,
                });
                if let Some(overflow) = overflow {
                    return self
                        .context_overflowed(myself, step, attempt, overflow)
                        .await;
                }
                if let Some(error) = unreachable
                    && let Some(reason) = self.ctx.endpoints.unreachable(
                        &self.ctx.model_described,
                        &error,
                        &self.ctx.model,
                    )
                {
                    // The endpoint is down: the run waits for it, and no
                    // restart is spent on a call that cannot be answered.
                    self.wait_for_endpoint(myself, step, attempt + 1, reason);
                    return None;
                }
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
        self.ctx.endpoints.answered(&self.ctx.model_described);
        let spent = self
            .ctx
            .prices
            .spent(self.ctx.model_name.as_deref(), reply.usage);
        self.ctx.spending.add(reply.usage, spent);
        self.emit(EventKind::ModelCallFinished {
            step,
            attempt,
            outcome: CallOutcome::Ok,
            tool_calls: u32::try_from(reply.tool_calls.len()).unwrap_or(u32::MAX),
            usage: reply.usage,
            model: self.ctx.model_name.clone(),
            spent,
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
        if reply.tool_calls.is_empty()
            && !self.state.wrapping_up
            && self.role == super::Role::Root
            && (self.nudges.holds_person_message() || *self.ctx.gate.borrow() == Gate::Paused)
        {
            // A person paused the run, or wrote to it, while it answered:
            // the answer waits for the resume, and a message that waits
            // for it gets another step.
            self.state
                .transcript
                .push(ChatMessage::assistant(reply.content.clone(), Vec::new()));
            self.phase = Phase::Idle;
            if !self.save(RunStatus::Running).await {
                return None;
            }
            self.when_open(
                myself,
                LoopMsg::Conclude {
                    answer: reply.content,
                },
            );
            return None;
        }
        if reply.tool_calls.is_empty() || self.state.wrapping_up {
            self.state
                .transcript
                .push(ChatMessage::assistant(reply.content.clone(), Vec::new()));
            self.phase = Phase::Done;
            self.state.answer = Some(reply.content.clone());
            // A wrap-up answer cut off is all there is: taken, and said to
            // be cut off wherever the run's end is shown.
            self.state.answer_cut_off = cut_off;
            self.save(RunStatus::Running).await;
            return Some(LoopEnd::Answer(reply.content));
        }
        self.state.transcript.push(ChatMessage::assistant(
            reply.content,
            reply.tool_calls.clone(),
        ));
        self.phase = Phase::Calls;
        // Each worker's path is fixed now, with the answer, so that a resume
        // finds its snapshot; a spawn past the run's limits gets none, and is
        // refused when the calls start.
        let mut spawns = 0;
        self.state.calls = reply
            .tool_calls
            .into_iter()
            .map(|request| CallState {
                worker_path: (request.name == SPAWN_WORKER_TOOL)
                    .then(|| {
                        spawns += 1;
                        let kind = request
                            .arguments
                            .get("kind")
                            .and_then(serde_json::Value::as_str)
                            .unwrap_or("worker");
                        self.new_worker_path(spawns, kind).ok()
                    })
                    .flatten(),
                request,
                attempt: 0,
                running: false,
                result: None,
                sent_seq: 0,
                made_by: None,
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
}

impl AgentLoop {
    /// The pace key of a model call: the model at its endpoint, and the
    /// kind of prompt — the flow, the loop (`run` or `worker:KIND`) and the
    /// request's size — so that prompts of different kinds never share a
    /// pace (rule 15).
    fn pace_key(&self, kind: LeaseKind, request: &ModelRequest) -> String {
        let characters: usize = request.messages.iter().map(|m| m.content.len()).sum();
        format!(
            "{kind}:{} · {} · {} · {}",
            self.ctx.model_described,
            self.ctx.flow.name,
            request.consumer,
            crate::pace::prompt_size(characters)
        )
    }
}

/// How a model call failed, besides its end: what the loop does next
/// depends on it.
#[derive(Debug, Default)]
pub(super) struct Failure {
    /// How long the server asked to wait (a 429's `Retry-After`).
    pub(super) retry_after: Option<std::time::Duration>,
    /// The request did not fit the model's context window.
    pub(super) overflow: Option<super::Overflow>,
    /// The endpoint could not be reached: what the call said.
    pub(super) unreachable: Option<String>,
}
