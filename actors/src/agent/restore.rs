//! Rebuilding a loop from its snapshot, on resume: what was answered stays
//! answered, what was in flight starts again, and a tool call sent with no
//! recorded result is an unknown outcome — made again with the same key if
//! the tool is idempotent, otherwise put to a person. A fork starts the
//! same way from its parent's state, but a call the parent made is never
//! sent again: its result is replayed, or a person decides.

use ractor::ActorRef;

use super::{
    AgentLoop, COMPLETE_MILESTONE_TOOL, LoopEnd, LoopMsg, LoopState, Phase, SPAWN_WORKER_TOOL,
};
use crate::event::{CallOutcome, EventKind};
use crate::ports::{Snapshot, ToolCallRecord, ToolCallState};
use crate::supervision::strategy::ChildEnd;

/// What a resumed run finds in the store.
pub(crate) struct Saved {
    pub(crate) snapshots: Vec<Snapshot>,
    pub(crate) calls: Vec<ToolCallRecord>,
    /// The run's spending budget as its log left it, when it has one.
    pub(crate) spending: Option<std::sync::Arc<crate::supervision::budget::spending::Spending>>,
}

impl Saved {
    /// How many workers the run had spawned, so new workers get new paths.
    pub(crate) fn workers_spawned(&self) -> u32 {
        self.snapshots
            .iter()
            .flat_map(|s| {
                let own = s
                    .path
                    .rsplit(':')
                    .next()
                    .and_then(|n| n.parse::<u32>().ok());
                let pending = s
                    .state
                    .get("calls")
                    .and_then(serde_json::Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.get("worker_path").and_then(serde_json::Value::as_str))
                    .filter_map(|p| p.rsplit(':').next().and_then(|n| n.parse::<u32>().ok()))
                    .collect::<Vec<_>>();
                own.into_iter().chain(pending)
            })
            .max()
            .unwrap_or(0)
    }

    /// How far the run's history went: the highest place of its snapshots
    /// and tool-call records.
    pub(crate) fn history(&self) -> u64 {
        let snapshots = self.snapshots.iter().map(|s| s.seq);
        let calls = self.calls.iter().map(|c| c.seq);
        snapshots.chain(calls).max().unwrap_or(0)
    }
}

impl AgentLoop {
    /// Rebuilds the loop from its snapshot among `saved` and carries on; a
    /// loop with no snapshot begins with `task`. Tool calls that were sent
    /// but have no recorded result have an unknown outcome: a tool known to
    /// be idempotent is called again with the same key, any other waits for
    /// a person (`reconciliation_required`). Never a blind second call.
    pub(crate) async fn restore(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        saved: &Saved,
        task: &str,
    ) -> Option<LoopEnd> {
        let Some(snapshot) = saved.snapshots.iter().find(|s| s.path == self.path) else {
            self.begin(task, myself);
            return None;
        };
        match serde_json::from_value::<LoopState>(snapshot.state.clone()) {
            Ok(state) => {
                self.state = state;
                // Restored from the store: what the next snapshot continues.
                self.tail = Some(super::tail::HistoryTail::of(
                    snapshot.seq,
                    &self.state.transcript,
                ));
            }
            Err(error) => {
                self.phase = Phase::Done;
                return Some(LoopEnd::Failed(format!(
                    "the snapshot of `{}` cannot be read: {error}",
                    self.path
                )));
            }
        }
        for nudge in std::mem::take(&mut self.state.nudges) {
            self.nudges.push(nudge);
        }
        if let Some(answer) = self.state.answer.clone() {
            self.phase = Phase::Done;
            return Some(LoopEnd::Answer(answer));
        }
        if self.state.calls.is_empty() {
            self.phase = Phase::Idle;
            self.when_open(myself, LoopMsg::Next);
            return None;
        }
        self.phase = Phase::Calls;
        let step = self.state.steps;
        for index in 0..self.state.calls.len() {
            let call = &mut self.state.calls[index];
            if call.result.is_some() {
                continue;
            }
            // Nothing of this loop runs in this process yet: whatever the
            // snapshot says was in flight (a worker, a call) starts again,
            // unless its record below says otherwise. A worker rebuilds
            // itself from its own snapshot.
            call.attempt = 0;
            call.running = false;
            if matches!(
                call.request.name.as_str(),
                SPAWN_WORKER_TOOL | COMPLETE_MILESTONE_TOOL
            ) {
                continue;
            }
            // Found by where it is, not by its key: a call a fork inherited
            // has the key of the run that made it.
            let Some(record) = saved
                .calls
                .iter()
                .find(|r| r.path == self.path && r.step == step && r.index == index)
            else {
                // Never sent: it starts like any other call.
                continue;
            };
            if let Some(call) = self.state.calls.get_mut(index) {
                call.sent_seq = record.seq;
                call.made_by = record.made_by.clone().map(|run| (run, record.key.clone()));
            }
            if record.state == ToolCallState::Done {
                if let Some(call) = self.state.calls.get_mut(index) {
                    call.result = Some(record.result.clone().unwrap_or_default());
                }
                // A call a fork inherited was said replayed when the fork
                // began (`RunActor::forked`).
                continue;
            }
            // Sent, with no recorded result: its outcome is unknown.
            let key = self.idempotency_key(step, index);
            if let Some(call) = self.state.calls.get_mut(index) {
                call.attempt = 1;
            }
            if let Some(unknown) = self.call_record(index, ToolCallState::Unknown, None)
                && !self.ctx.record_call(unknown).await
            {
                return None;
            }
            self.ctx.emit(
                &format!("{}/tool_call:{step}.{index}", self.path),
                EventKind::ToolCallFinished {
                    tool: record.tool.clone(),
                    idempotency_key: key.clone(),
                    attempt: 1,
                    outcome: CallOutcome::Unknown,
                },
            );
            let end = ChildEnd::Failed {
                reason: "its executor stopped before its result was recorded".to_owned(),
                retryable: true,
            };
            // A call a fork inherited is its parent's: whether it took
            // effect is for a person to say, idempotent or not.
            if record.made_by.is_none() && self.tool_is_idempotent(Some(index)) {
                self.when_open(
                    myself,
                    LoopMsg::Retry {
                        step,
                        index: Some(index),
                        attempt: 2,
                    },
                );
            } else {
                self.require_reconciliation(myself, step, index, 1, &end);
            }
        }
        self.when_open(myself, LoopMsg::StartCalls { step });
        None
    }
}
