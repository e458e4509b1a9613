//! The calls of a step: each tool call and worker the model asked for,
//! started concurrently under its own lease with an idempotency key that
//! survives retries and resumes, recorded write-ahead before it is sent, and
//! gathered into the transcript once every call has a result.

use ractor::ActorRef;

use super::{
    AgentLoop, COMPLETE_MILESTONE_TOOL, Gate, LoopEnd, LoopMsg, Phase, SPAWN_WORKER_TOOL,
    call_outcome, tool_call, worker,
};
use crate::event::{CallOutcome, EventKind};
use crate::ports::{ChatMessage, RunStatus, ToolCallRecord, ToolCallRequest, ToolCallState};
use crate::spawn::{SpawnRefusal, depth_of};
use crate::supervision::lease::{LeaseId, LeaseKind};
use crate::supervision::strategy::ChildEnd;

impl AgentLoop {
    pub(super) async fn start_calls(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        step: u32,
    ) -> Option<LoopEnd> {
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
    /// retries and resumes. A key names its run: a call a fork inherited
    /// keeps the key of the run that made it.
    pub(super) fn idempotency_key(&self, step: u32, index: usize) -> String {
        if step == self.state.steps
            && let Some((_, key)) = self.state.calls.get(index).and_then(|c| c.made_by.as_ref())
        {
            return key.clone();
        }
        format!("{}/{}/{step}/{index}", self.ctx.run_id, self.path)
    }

    /// The record of tool call `index` of the current step, in `state`.
    pub(super) fn call_record(
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
            seq: call.sent_seq,
            by_person: false,
            made_by: call.made_by.as_ref().map(|(run, _)| run.clone()),
        })
    }

    pub(super) async fn start_call(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        index: usize,
        attempt: u32,
    ) {
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
                if let Some(call) = self.state.calls.get_mut(index)
                    && call.sent_seq == 0
                {
                    call.sent_seq = self.ctx.next_seq();
                }
                if let Some(record) = self.call_record(index, ToolCallState::Sent, None)
                    && !self.ctx.record_call(record).await
                {
                    return;
                }
                let path = format!("{}/tool_call:{step}.{index}", self.path);
                let lease_id = LeaseId::next();
                self.ctx.emit(
                    &path,
                    EventKind::ToolCallStarted {
                        tool: name.to_owned(),
                        idempotency_key: key.clone(),
                        attempt,
                        lease_id: Some(lease_id),
                    },
                );
                let spec = self
                    .ctx
                    .spec(LeaseKind::ToolCall, name, &path)
                    .with_id(lease_id)
                    .with_pace_key(Some(format!(
                        "{}:{name} on {}",
                        LeaseKind::ToolCall,
                        self.tool_server(&route.server)
                    )))
                    .with_endpoint(Some(self.tool_server(&route.server)))
                    .with_transcript_tail(self.transcript_tail())
                    .with_nudges(self.nudges.clone())
                    .with_parent(&self.cancel);
                let invocation = crate::ports::ToolInvocation {
                    name: name.to_owned(),
                    arguments: request.arguments,
                    idempotency_key: key.clone(),
                    traceparent: Some(crate::traceparent_of(
                        &self.ctx.trace_id,
                        &self.ctx.run_id,
                        &format!("{path}#{attempt}"),
                    )),
                };
                // Begun here: the lease counts from now, however long a busy
                // runtime takes to start the operation's task. The tool is
                // called inside that task, where a panic is the call's.
                let client = route.client;
                let args = tool_call::ToolCallArgs {
                    ctx: self.ctx.clone(),
                    path: path.clone(),
                    tool: name.to_owned(),
                    idempotency_key: key,
                    reply_to: myself.clone(),
                    step,
                    index,
                    attempt,
                };
                super::call::start(
                    &self.ctx.leases,
                    spec,
                    move |evidence| async move { client.call(invocation, evidence).await },
                    args,
                    self.call_span(&path, attempt),
                );
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

    /// The path of a new worker of `kind`, within the run's
    /// [spawn limits](crate::SpawnLimits): the answer's first
    /// `max_per_answer` spawns, above `max_depth`, and while the run has
    /// started fewer than `max_per_run` workers (which takes a number).
    /// `ordinal` is 1 for the answer's first `spawn_worker` call.
    pub(super) fn new_worker_path(
        &self,
        ordinal: usize,
        kind: &str,
    ) -> Result<String, SpawnRefusal> {
        let limits = self.ctx.spawn_limits;
        if let Some(refusal) = limits.check_answer(ordinal, depth_of(&self.path)) {
            return Err(refusal);
        }
        let number = self
            .ctx
            .next_worker_number(limits.max_per_run)
            .ok_or(SpawnRefusal::PerRun(limits.max_per_run))?;
        Ok(format!("{}/worker:{kind}:{number}", self.path))
    }

    /// Which `spawn_worker` call of the answer call `index` is: 1 for the
    /// first.
    fn spawn_ordinal(&self, index: usize) -> usize {
        self.state
            .calls
            .iter()
            .take(index.saturating_add(1))
            .filter(|call| call.request.name == SPAWN_WORKER_TOOL)
            .count()
    }

    /// A spawn past a limit: the model sees why as the call's result, and an
    /// event says so; the loop goes on.
    fn refuse_spawn(
        &self,
        myself: &ActorRef<LoopMsg>,
        (step, index, attempt): (u32, usize, u32),
        kind: &str,
        refusal: SpawnRefusal,
    ) {
        self.ctx.emit(
            &self.path,
            EventKind::SpawnRefused {
                worker: kind.to_owned(),
                limit: refusal.key().to_owned(),
                bound: refusal.bound(),
            },
        );
        let _ = myself.send_message(LoopMsg::CallDone {
            step,
            index,
            attempt,
            outcome: Ok(refusal.message()),
        });
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
        // The first attempt uses the path given when the model asked (kept in
        // the snapshot, so a resume finds the worker's own snapshot, and the
        // worker was counted when it was first spawned); a restart is a new
        // worker.
        let preassigned = self
            .state
            .calls
            .get(index)
            .and_then(|c| c.worker_path.clone())
            .filter(|_| attempt == 1);
        let path = match preassigned {
            Some(path) => path,
            None => match self.new_worker_path(self.spawn_ordinal(index), &kind) {
                Ok(path) => path,
                Err(refusal) => {
                    self.refuse_spawn(myself, (step, index, attempt), &kind, refusal);
                    return;
                }
            },
        };
        self.state.spawns += 1;
        if let Some(call) = self.state.calls.get_mut(index) {
            call.worker_path = Some(path.clone());
        }
        let lease_id = LeaseId::next();
        self.ctx.emit(
            &path,
            EventKind::WorkerSpawned {
                worker: kind.clone(),
                task: task.clone(),
                lease_id: Some(lease_id),
            },
        );
        let spec = self
            .ctx
            .spec(LeaseKind::WorkerStep, &format!("worker:{kind}"), &path)
            .with_id(lease_id)
            .with_pace_key(Some(format!(
                "{}:worker:{kind} · {}",
                LeaseKind::WorkerStep,
                self.ctx.flow.name
            )))
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

    pub(super) async fn call_done(
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
    pub(super) async fn finish_step_if_done(
        &mut self,
        myself: &ActorRef<LoopMsg>,
    ) -> Option<LoopEnd> {
        if self.phase != Phase::Calls || self.state.calls.iter().any(|c| c.result.is_none()) {
            return None;
        }
        let calls = std::mem::take(&mut self.state.calls);
        // What the step did, for the repetition signal: a worker whose
        // steps make the same calls with the same arguments is going round.
        let signature = (!calls.is_empty()).then(|| {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            for call in &calls {
                call.request.name.hash(&mut hasher);
                call.request.arguments.to_string().hash(&mut hasher);
            }
            hasher.finish()
        });
        for call in calls {
            self.state.transcript.push(ChatMessage::tool(
                call.request.id,
                call.result.unwrap_or_default(),
            ));
        }
        if let Some(evidence) = &self.step_evidence {
            evidence.step(format!("step {} done", self.state.steps), signature);
        }
        self.phase = Phase::Idle;
        self.save(RunStatus::Running).await;
        let _ = myself.send_message(LoopMsg::Next);
        None
    }
}

impl AgentLoop {
    /// A tool server's identity for its tools' pace keys and calls in
    /// flight ([`crate::pace::tool_server`]): its name, and a hash of the
    /// address or command the flow gives it.
    fn tool_server(&self, server: &str) -> String {
        let declared = self.ctx.flow.tools.iter().find(|t| t.name == server);
        let target: Vec<&str> = declared
            .map(|t| {
                t.url
                    .iter()
                    .map(String::as_str)
                    .chain(
                        t.command
                            .iter()
                            .flatten()
                            .map(crate::flow::CommandArg::value),
                    )
                    .collect()
            })
            .unwrap_or_default();
        crate::pace::tool_server(server, &target)
    }
}
