//! Forks: a new run that starts from another run's state at a step
//! boundary, with its lineage kept, the original untouched.
//!
//! Where a fork starts is a pure function of the parent's stored history
//! ([`SnapshotStore::load_stored_snapshots`](crate::SnapshotStore::load_stored_snapshots),
//! read as a [`Lineage`]) and its tool-call records ([`start`]): the forked loop's state before
//! the step asked for, every other loop's state as it was at that instant
//! (its latest snapshot at or before it, by [`Snapshot::seq`]), and the
//! parent's tool calls recorded by then. Those calls stay the parent's:
//! their keys are the parent's, they are marked [`ToolCallRecord::made_by`]
//! and the fork never sends them again. A result recorded is replayed into
//! the fork; a call whose outcome is unknown waits for a person in the
//! fork. A call the fork makes itself has a key of the fork's own, since a
//! key names its run.
//!
//! A fork shares its parent's history instead of copying it: each of its
//! first snapshots names the parent's entry it starts from as its base
//! ([`Snapshot::base`]), so the store keeps only what the fork's own steps
//! add; and finding the fork point walks the parent's stored entries one
//! transcript per loop at a time, so a fork holds in memory what its
//! loops hold at the fork point, not every state the parent went through.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::nudge::PERSON_ANSWERED;
use crate::ports::history::{self, Lineage};
use crate::ports::{
    ChatRole, ForkOrigin, RunRecord, Snapshot, SnapshotBase, StoreError, ToolCallRecord,
};
use crate::run::ROOT_PATH;

/// Where to fork a run, and what to change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkSpec {
    /// The loop whose step the fork starts at (`run` for the root, or a
    /// worker's path as the trace names it: `run/worker:research:1`).
    pub path: String,
    /// The step of that loop the fork starts at, from 1: the fork takes the
    /// loop's state before that step began, and runs the step anew.
    pub step: u32,
    /// Guidance for the fork's first step: the model sees it in its next
    /// request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guidance: Option<String>,
    /// Changes to the flow for the fork, `KEY=VALUE` with `KEY` a dotted
    /// path of the flow's keys (`leases.tool_call=30s`, `leases.policy=deadline`,
    /// `budget.max_extensions=2`, `max_steps=12`). The value is read as
    /// JSON when it is JSON (a number, `true`), else as text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<String>,
}

impl ForkSpec {
    /// A fork of the loop at `path` from its step `step`.
    pub fn at(path: impl Into<String>, step: u32) -> Self {
        Self {
            path: path.into(),
            step,
            ..Self::default()
        }
    }

    /// A fork of the root loop from its step `step`.
    pub fn root(step: u32) -> Self {
        Self::at(ROOT_PATH, step)
    }

    /// With guidance for its first step.
    #[must_use]
    pub fn with_guidance(mut self, guidance: impl Into<String>) -> Self {
        self.guidance = Some(guidance.into());
        self
    }

    /// With a change of the flow (`KEY=VALUE`).
    #[must_use]
    pub fn with_change(mut self, change: impl Into<String>) -> Self {
        self.set.push(change.into());
        self
    }

    /// Reads a fork point as the trace names a step: `N` for the root's
    /// step `N`, or `PATH:N` for step `N` of the loop at `PATH`
    /// (`run/worker:research:1:2`).
    pub fn parse_point(text: &str) -> Result<(String, u32), ForkError> {
        let text = text.trim();
        let (path, step) = match text.rsplit_once(':') {
            Some((path, step)) if path.starts_with(ROOT_PATH) => (path, step),
            _ => (ROOT_PATH, text),
        };
        match step.parse::<u32>() {
            Ok(step) if step >= 1 => Ok((path.to_owned(), step)),
            _ => Err(ForkError::Point(format!(
                "`{text}` is not a step: expected `N` (the root's step N, from 1) or \
                 `PATH:N` (step N of the loop at PATH, as the trace names it: \
                 `run/worker:research:1:2`)"
            ))),
        }
    }
}

/// Why a run cannot be forked as asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ForkError {
    /// The fork point is not one of the run's step boundaries.
    #[error("cannot fork there: {0}")]
    Point(String),
    /// A change of the flow was refused.
    #[error("cannot change the flow for the fork: {0}")]
    Change(String),
}

/// What a fork starts from: every loop's state and the parent's tool calls
/// at the fork point.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ForkStart {
    /// Its lineage.
    pub(crate) origin: ForkOrigin,
    /// The state of each loop at the fork point, as the fork's own
    /// (its run id); the forked loop's carries the guidance.
    pub(crate) snapshots: Vec<Snapshot>,
    /// The parent's tool calls recorded by then, kept with their keys and
    /// marked as made by the run that made them.
    pub(crate) calls: Vec<ToolCallRecord>,
    /// What people answered in the parent that the fork inherits: the
    /// guidance in its transcripts, the results a person gave calls.
    pub(crate) person_answers: Vec<String>,
}

/// Why a fork's start could not be found: the point asked for is not in
/// the parent's history, or the history could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unstarted {
    /// The point or the changes asked for.
    #[error(transparent)]
    Refused(#[from] ForkError),
    /// The parent's stored history.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where the fork `fork_id` of `parent` starts, as `spec` asks, from the
/// parent's stored history (`lineage`: the parent's entries and those of
/// the runs they continue from) and its tool-call records. The fork's
/// snapshots are whole, and each names the parent's entry it starts from
/// as its base ([`Snapshot::base`]), so that the store keeps none of the
/// parent's transcript again. The parent's history is walked holding one
/// transcript per loop, never every state it went through.
pub(crate) fn start(
    parent: &RunRecord,
    lineage: &Lineage,
    calls: &[ToolCallRecord],
    spec: &ForkSpec,
    fork_id: &str,
) -> Result<ForkStart, Unstarted> {
    let mut steps = Vec::new();
    lineage.walk(&parent.run_id, |entry, transcript| {
        steps.push(Step::of(entry, transcript));
        Ok(())
    })?;
    let seq = point(&steps, &spec.path, spec.step, &parent.run_id)?;
    // Each loop's latest entry at or before the fork point.
    let mut latest: BTreeMap<&str, u64> = BTreeMap::new();
    if seq > 0 {
        for step in steps.iter().filter(|s| s.seq <= seq) {
            let kept = latest.entry(step.path.as_str()).or_insert(step.seq);
            *kept = (*kept).max(step.seq);
        }
    }
    let wanted: BTreeSet<(u64, &str)> = latest.iter().map(|(path, seq)| (*seq, *path)).collect();
    let mut person_answers = Vec::new();
    let mut snapshots: Vec<Snapshot> = Vec::new();
    lineage.walk(&parent.run_id, |entry, transcript| {
        if !wanted.contains(&(entry.seq, entry.path.as_str())) {
            return Ok(());
        }
        let mut own = history::with_transcript(entry, transcript)?;
        let continues = own
            .state
            .get(history::TRANSCRIPT)
            .is_some_and(serde_json::Value::is_array);
        own.base = continues.then(|| SnapshotBase {
            run_id: parent.run_id.clone(),
            seq: entry.seq,
            kept: transcript.len(),
        });
        own.run_id = fork_id.to_owned();
        person_answers.extend(answers_in(&own.state));
        snapshots.push(own);
        Ok(())
    })?;
    snapshots.sort_by(|a, b| a.path.cmp(&b.path));
    if let Some(guidance) = &spec.guidance
        && let Some(forked) = snapshots.iter_mut().find(|s| s.path == spec.path)
        && let Some(nudges) = forked
            .state
            .as_object_mut()
            .map(|state| {
                state
                    .entry("nudges")
                    .or_insert_with(|| serde_json::json!([]))
            })
            .and_then(serde_json::Value::as_array_mut)
    {
        nudges.push(serde_json::Value::String(guidance.clone()));
    }
    // The forked loop's snapshot last: a fork whose copy was cut short has
    // no state of the loop it forked, and is started again from its parent.
    snapshots.sort_by_key(|s| s.path == spec.path);
    let calls: Vec<ToolCallRecord> = calls
        .iter()
        .filter(|c| seq > 0 && c.seq <= seq)
        .map(|call| {
            if call.by_person {
                person_answers.push(format!(
                    "a person gave the result of tool call {} ({}): {}",
                    call.key,
                    call.tool,
                    call.result.as_deref().unwrap_or_default()
                ));
            }
            let mut inherited = call.clone();
            inherited
                .made_by
                .get_or_insert_with(|| parent.run_id.clone());
            inherited
        })
        .collect();
    Ok(ForkStart {
        origin: ForkOrigin {
            parent: parent.run_id.clone(),
            path: spec.path.clone(),
            step: spec.step,
            seq,
            guidance: spec.guidance.clone(),
            changes: spec.set.clone(),
            person_answers: person_answers.clone(),
        },
        snapshots,
        calls,
        person_answers,
    })
}

/// What a fork point is found by, of one entry of the parent's history.
struct Step {
    path: String,
    step: u32,
    seq: u64,
    /// The loop was between steps ([`at_boundary`]).
    boundary: bool,
    /// The workers whose spawning calls it holds.
    spawned: Vec<String>,
}

impl Step {
    fn of(entry: &Snapshot, transcript: &[&serde_json::Value]) -> Self {
        let spawned = entry
            .state
            .get("calls")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("worker_path").and_then(serde_json::Value::as_str))
            .map(str::to_owned)
            .collect();
        Self {
            path: entry.path.clone(),
            step: entry.step,
            seq: entry.seq,
            boundary: at_boundary(entry, transcript),
            spawned,
        }
    }
}

/// The place in the parent's history a fork at step `step` of the loop at
/// `path` starts from: the loop's last snapshot at the boundary before that
/// step; for a worker's first step, the snapshot that gave it its path; 0
/// (nothing) for the root's first step.
fn point(history: &[Step], path: &str, step: u32, run_id: &str) -> Result<u64, ForkError> {
    let loops = || {
        let mut seen: Vec<String> = Vec::new();
        for snapshot in history {
            let last = seen.iter().position(|p| *p == snapshot.path);
            if last.is_none() {
                seen.push(snapshot.path.clone());
            }
        }
        let described: Vec<String> = seen
            .iter()
            .map(|p| {
                let steps = history
                    .iter()
                    .filter(|s| s.path == *p)
                    .map(|s| s.step)
                    .max()
                    .unwrap_or(0);
                format!("`{p}` (steps 1 to {steps})")
            })
            .collect();
        if described.is_empty() {
            "it has no snapshot yet: only its first step (`1`)".to_owned()
        } else {
            format!("its loops are {}", described.join(", "))
        }
    };
    if step == 0 {
        return Err(ForkError::Point(format!(
            "steps are counted from 1; run {run_id}: {}",
            loops()
        )));
    }
    if step == 1 {
        if path == ROOT_PATH {
            return Ok(0);
        }
        // A worker's first step: the instant its parent's model gave it
        // its path, before it started.
        return history
            .iter()
            .filter(|s| s.spawned.iter().any(|p| p == path))
            .map(|s| s.seq)
            .min()
            .ok_or_else(|| {
                ForkError::Point(format!("run {run_id} has no loop `{path}`: {}", loops()))
            });
    }
    if !history.iter().any(|s| s.path == path) {
        return Err(ForkError::Point(format!(
            "run {run_id} has no loop `{path}`: {}",
            loops()
        )));
    }
    history
        .iter()
        .filter(|s| s.path == path && s.step == step - 1 && s.boundary)
        .map(|s| s.seq)
        .max()
        .ok_or_else(|| {
            ForkError::Point(format!(
                "loop `{path}` of run {run_id} never finished its step {} (its model call or \
                 its tool calls never all returned), so it has no boundary before step \
                 {step}; {}",
                step - 1,
                loops()
            ))
        })
}

/// Whether `snapshot` (with its whole `transcript`) is a loop between
/// steps: the model answered each step it started (one assistant message
/// a step: a snapshot kept while a step's model call was in flight — on a
/// pause, on the run's end, or as a request too long for the model's
/// context was shortened — has one fewer), no calls pending, no answer.
fn at_boundary(snapshot: &Snapshot, transcript: &[&serde_json::Value]) -> bool {
    let state = &snapshot.state;
    let no_calls = state
        .get("calls")
        .and_then(serde_json::Value::as_array)
        .is_none_or(Vec::is_empty);
    let no_answer = state.get("answer").is_none_or(serde_json::Value::is_null);
    let assistant = serde_json::to_value(ChatRole::Assistant).unwrap_or_default();
    let answered = transcript
        .iter()
        .filter(|m| m.get("role") == Some(&assistant))
        .count();
    let model_returned = u32::try_from(answered).unwrap_or(u32::MAX) >= snapshot.step;
    model_returned && no_calls && no_answer
}

/// What people said to a loop: the guidance a person gave when answering
/// a pause, in its transcript (`state.transcript`) or still queued for its
/// next step (`state.nudges`).
fn answers_in(state: &serde_json::Value) -> Vec<String> {
    let user = serde_json::to_value(ChatRole::User).unwrap_or_default();
    let said = state
        .get("transcript")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| m.get("role") == Some(&user))
        .filter_map(|m| m.get("content").and_then(serde_json::Value::as_str));
    let queued = state
        .get("nudges")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str);
    said.chain(queued)
        .filter(|text| text.starts_with(PERSON_ANSWERED))
        .map(str::to_owned)
        .collect()
}

/// The flow of a fork: `flow` (as the store keeps it) with each `KEY=VALUE`
/// of `changes` set, `KEY` a dotted path of its keys. Whether the result
/// is a flow the engine runs is the engine's check, when it plans it.
pub(crate) fn change_flow(
    flow: &serde_json::Value,
    changes: &[String],
) -> Result<serde_json::Value, ForkError> {
    let mut flow = flow.clone();
    for change in changes {
        let Some((key, value)) = change.split_once('=') else {
            return Err(ForkError::Change(format!(
                "`{change}` is not KEY=VALUE (`leases.tool_call=30s`)"
            )));
        };
        let key = key.trim();
        let parts: Vec<&str> = key.split('.').collect();
        if key.is_empty() || parts.iter().any(|p| p.is_empty()) {
            return Err(ForkError::Change(format!(
                "`{key}` is not a key of the flow (`leases.tool_call`)"
            )));
        }
        if parts[0] == "tools" {
            return Err(ForkError::Change(format!(
                "`{key}`: a fork keeps its parent's tool servers; change a lease, a policy, \
                 a budget or the steps instead"
            )));
        }
        let value = value.trim();
        let value = serde_json::from_str::<serde_json::Value>(value)
            .unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
        let mut at = &mut flow;
        for (i, part) in parts.iter().enumerate() {
            let Some(table) = at.as_object_mut() else {
                return Err(ForkError::Change(format!(
                    "`{}` is not a table of the flow, so `{key}` cannot be set",
                    parts[..i].join(".")
                )));
            };
            if i + 1 == parts.len() {
                table.insert((*part).to_owned(), value.clone());
                break;
            }
            at = table
                .entry((*part).to_owned())
                .or_insert_with(|| serde_json::json!({}));
        }
    }
    Ok(flow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::{RunStatus, ToolCallState};

    fn snapshot(path: &str, step: u32, seq: u64, state: serde_json::Value) -> Snapshot {
        Snapshot {
            run_id: "parent".to_owned(),
            path: path.to_owned(),
            step,
            status: RunStatus::Running,
            state,
            seq,
            base: None,
        }
    }

    fn record(key: &str, seq: u64, state: ToolCallState) -> ToolCallRecord {
        ToolCallRecord {
            key: key.to_owned(),
            path: "run".to_owned(),
            step: 1,
            index: 0,
            tool: "charge".to_owned(),
            arguments: serde_json::json!({}),
            idempotent: None,
            state,
            result: (state == ToolCallState::Done).then(|| "charged".to_owned()),
            seq,
            by_person: false,
            made_by: None,
        }
    }

    fn lineage(history: Vec<Snapshot>) -> Lineage {
        Lineage::of([("parent".to_owned(), history)])
    }

    fn parent() -> RunRecord {
        RunRecord {
            trace_parent: None,
            tenant: None,
            run_id: "parent".to_owned(),
            flow: serde_json::json!({"name": "f", "task": "t", "max_steps": 5}),
            status: RunStatus::Completed,
            owner_id: None,
            fence: 1,
            lease_expires_at_ms: 0,
            reason: None,
            answer: None,
            pause: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            fork: None,
        }
    }

    /// A root that asked for a call in step 1 (seq 1), got it back (seq 3),
    /// and answered in step 2 (seq 4).
    fn history() -> Vec<Snapshot> {
        let calls = serde_json::json!([{"request": {"id": "c", "name": "charge", "arguments": {}}, "attempt": 0, "result": null}]);
        vec![
            snapshot("run", 1, 1, serde_json::json!({"steps": 1, "calls": calls})),
            snapshot(
                "run",
                1,
                3,
                serde_json::json!({"steps": 1, "calls": [], "nudges": [], "transcript": [
                    {"role": "user", "content": "t"},
                    {"role": "assistant", "content": ""},
                    {"role": "tool", "content": "charged"},
                ]}),
            ),
            snapshot(
                "run",
                2,
                4,
                serde_json::json!({"steps": 2, "answer": "done"}),
            ),
        ]
    }

    #[test]
    fn a_fork_after_a_call_inherits_it_and_one_before_inherits_nothing() {
        let calls = [record("parent/run/1/0", 2, ToolCallState::Done)];
        let after = start(
            &parent(),
            &lineage(history()),
            &calls,
            &ForkSpec::root(2).with_guidance("be brief"),
            "fork",
        )
        .unwrap();
        assert_eq!(after.origin.seq, 3);
        assert_eq!(after.snapshots.len(), 1);
        assert_eq!(after.snapshots[0].run_id, "fork");
        assert_eq!(
            after.snapshots[0].state["nudges"],
            serde_json::json!(["be brief"])
        );
        assert_eq!(after.calls.len(), 1);
        assert_eq!(after.calls[0].key, "parent/run/1/0", "the parent's key");
        assert_eq!(after.calls[0].made_by.as_deref(), Some("parent"));

        let before = start(
            &parent(),
            &lineage(history()),
            &calls,
            &ForkSpec::root(1),
            "fork",
        )
        .unwrap();
        assert!(before.snapshots.is_empty() && before.calls.is_empty());
    }

    #[test]
    fn a_step_that_is_no_boundary_is_refused_naming_the_loops() {
        for (path, step) in [("run", 3), ("run/worker:w:1", 2), ("run", 0)] {
            let error = start(
                &parent(),
                &lineage(history()),
                &[],
                &ForkSpec::at(path, step),
                "f",
            )
            .unwrap_err()
            .to_string();
            assert!(error.contains("`run` (steps 1 to 2)"), "{error}");
        }
    }

    #[test]
    fn a_step_whose_model_call_never_returned_is_no_boundary() {
        // Step 2's model call was in flight when the run was cancelled: the
        // root's last snapshot has no calls and no answer, and one
        // assistant message for two steps started.
        let mut history = history();
        history.pop();
        history.push(snapshot(
            "run",
            2,
            4,
            serde_json::json!({"steps": 2, "calls": [], "transcript": [
                {"role": "user", "content": "t"},
                {"role": "assistant", "content": ""},
                {"role": "tool", "content": "charged"},
            ]}),
        ));
        let error = start(
            &parent(),
            &lineage(history.clone()),
            &[],
            &ForkSpec::root(3),
            "f",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("never finished its step 2"), "{error}");
        assert!(
            start(
                &parent(),
                &lineage(history.clone()),
                &[],
                &ForkSpec::root(2),
                "f"
            )
            .is_ok()
        );
    }

    #[test]
    fn fork_points_are_read_as_the_trace_names_steps() {
        assert_eq!(ForkSpec::parse_point("3").unwrap(), ("run".to_owned(), 3));
        assert_eq!(
            ForkSpec::parse_point("run/worker:research:1:2").unwrap(),
            ("run/worker:research:1".to_owned(), 2)
        );
        assert!(
            ForkSpec::parse_point("run/worker:research:1")
                .is_ok_and(|(p, _)| p == "run/worker:research")
        );
        assert!(ForkSpec::parse_point("zero").is_err());
        assert!(ForkSpec::parse_point("0").is_err());
    }

    #[test]
    fn changes_set_dotted_keys_and_read_json_values() {
        let flow = serde_json::json!({"name": "f", "leases": {"tool_call": "5m"}});
        let changed = change_flow(
            &flow,
            &[
                "leases.tool_call=30s".to_owned(),
                "max_steps=12".to_owned(),
                "budget.max_extensions=2".to_owned(),
            ],
        )
        .unwrap();
        assert_eq!(changed["leases"]["tool_call"], "30s");
        assert_eq!(changed["max_steps"], 12);
        assert_eq!(changed["budget"]["max_extensions"], 2);
        assert!(change_flow(&flow, &["name.x=1".to_owned()]).is_err());
        assert!(change_flow(&flow, &["nothing".to_owned()]).is_err());
        let tools = change_flow(
            &flow,
            &[r#"tools=[{"name":"x","command":["sh"]}]"#.to_owned()],
        );
        assert!(
            tools
                .unwrap_err()
                .to_string()
                .contains("keeps its parent's tool servers")
        );
    }
}
