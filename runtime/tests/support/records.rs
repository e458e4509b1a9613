//! Records the store tests write: runs, snapshots, tool calls, events and
//! updates, the same in every test binary that includes this file.

#![allow(dead_code, reason = "each test binary uses part of the helper")]

use leasehold::{
    ClaimOutcome, Event, EventKind, Fenced, RunRecord, RunStatus, RunUpdate, Snapshot,
    ToolCallRecord, ToolCallState,
};
use serde_json::json;

/// The run-lease TTL the tests claim with (ms).
pub const TTL: u64 = 500;

pub fn run_record(
    run_id: &str,
    owner_id: Option<&str>,
    fence: u64,
    expires_at_ms: u64,
    status: RunStatus,
) -> RunRecord {
    RunRecord {
        run_id: run_id.to_owned(),
        flow: json!({"name": "research", "max_steps": 8}),
        status,
        owner_id: owner_id.map(str::to_owned),
        fence,
        lease_expires_at_ms: expires_at_ms,
        reason: None,
        answer: None,
        pause: None,
        created_at_ms: 1_000,
        updated_at_ms: 1_000,
    }
}

/// An unowned running run, ready to be claimed.
pub fn unowned(run_id: &str) -> RunRecord {
    run_record(run_id, None, 0, 0, RunStatus::Running)
}

pub fn snapshot(run_id: &str, path: &str, step: u32, note: &str) -> Snapshot {
    Snapshot {
        run_id: run_id.to_owned(),
        path: path.to_owned(),
        step,
        status: RunStatus::Running,
        state: json!({"transcript": [{"role": "user", "content": note}], "budget": {"limit": 8}}),
    }
}

pub fn tool_call(key: &str, step: u32, state: ToolCallState) -> ToolCallRecord {
    ToolCallRecord {
        key: key.to_owned(),
        path: "run".to_owned(),
        step,
        index: 0,
        tool: "search".to_owned(),
        arguments: json!({"query": "leases"}),
        idempotent: Some(true),
        state,
        result: (state == ToolCallState::Done).then(|| "found".to_owned()),
    }
}

pub fn event(run_id: &str, seq: u64) -> Event {
    Event {
        seq,
        position: seq,
        at: 1_000 + seq,
        run_id: run_id.to_owned(),
        path: "run".to_owned(),
        kind: EventKind::StepStarted {
            step: u32::try_from(seq).unwrap_or(u32::MAX),
            limit: 8,
            nudges: 0,
        },
    }
}

pub fn events(run_id: &str, seqs: impl IntoIterator<Item = u64>) -> Vec<Event> {
    seqs.into_iter().map(|seq| event(run_id, seq)).collect()
}

pub fn update(status: RunStatus, at_ms: u64) -> RunUpdate {
    RunUpdate {
        status,
        reason: None,
        answer: None,
        pause: None,
        at_ms,
    }
}

pub fn claimed(outcome: ClaimOutcome) -> RunRecord {
    match outcome {
        ClaimOutcome::Claimed(record) => record,
        other => panic!("expected a claim, got {other:?}"),
    }
}

pub fn stale(fence: u64, owner_id: &str) -> Fenced<()> {
    Fenced::Stale {
        fence,
        owner_id: Some(owner_id.to_owned()),
    }
}
