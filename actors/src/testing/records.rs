//! Records a store's tests write: runs, snapshots, tool calls, events and
//! updates — what the conformance suite writes, for tests of a store's own
//! beside it.

use crate::event::{Event, EventKind};
use crate::ports::{
    ClaimOutcome, Fenced, PauseRecord, RunCommand, RunRecord, RunStatus, RunUpdate, Snapshot,
    Store, ToolCallRecord, ToolCallState,
};
use serde_json::json;

/// The run-lease TTL the rules claim with (ms).
pub const TTL: u64 = 500;

/// A run of the flow `research`, created at 1 000.
pub fn run_record(
    run_id: &str,
    owner_id: Option<&str>,
    fence: u64,
    expires_at_ms: u64,
    status: RunStatus,
) -> RunRecord {
    RunRecord {
        trace_parent: None,
        tenant: None,
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
        fork: None,
    }
}

/// An unowned running run, ready to be claimed.
pub fn unowned(run_id: &str) -> RunRecord {
    run_record(run_id, None, 0, 0, RunStatus::Running)
}

/// A snapshot of the loop `path` whose transcript holds `note`.
pub fn snapshot(run_id: &str, path: &str, step: u32, note: &str) -> Snapshot {
    Snapshot {
        run_id: run_id.to_owned(),
        path: path.to_owned(),
        step,
        status: RunStatus::Running,
        // Keys in the order PostgreSQL's `jsonb` gives them back (shorter
        // first), so that a store's answers print as the memory store's.
        state: json!({"budget": {"limit": 8}, "transcript": [{"role": "user", "content": note}]}),
        seq: u64::from(step),
        base: None,
    }
}

/// A record of the call `key` in `state` (done: with a result).
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
        seq: u64::from(step),
        by_person: false,
        made_by: None,
    }
}

/// An event of the run at `seq`.
pub fn event(run_id: &str, seq: u64) -> Event {
    Event {
        seq,
        position: seq,
        at: 1_000 + seq,
        run_id: run_id.into(),
        path: "run".into(),
        kind: EventKind::StepStarted {
            step: u32::try_from(seq).unwrap_or(u32::MAX),
            limit: 8,
            nudges: 0,
        },
    }
}

/// The events of the run at each of `seqs`.
pub fn events(run_id: &str, seqs: impl IntoIterator<Item = u64>) -> Vec<Event> {
    seqs.into_iter().map(|seq| event(run_id, seq)).collect()
}

/// [`events`], shared, as a store is given them to append.
pub fn shared_events(
    run_id: &str,
    seqs: impl IntoIterator<Item = u64>,
) -> Vec<std::sync::Arc<Event>> {
    seqs.into_iter()
        .map(|seq| std::sync::Arc::new(event(run_id, seq)))
        .collect()
}

/// A change to `status` at `at_ms`.
pub fn update(status: RunStatus, at_ms: u64) -> RunUpdate {
    RunUpdate {
        status,
        reason: None,
        answer: None,
        pause: None,
        at_ms,
    }
}

/// The record a claim made; panics if the claim was refused.
pub fn claimed(outcome: ClaimOutcome) -> RunRecord {
    match outcome {
        ClaimOutcome::Claimed(record) => record,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// The refusal of a write to a run at `fence` owned by `owner_id`.
pub fn stale(fence: u64, owner_id: &str) -> Fenced<()> {
    Fenced::Stale {
        fence,
        owner_id: Some(owner_id.to_owned()),
    }
}

/// The loops of every run: the root and a worker.
pub const LOOPS: [&str; 2] = ["run", "run/worker:research:1"];

/// Records `run_id` owned by `a` at fence 1 with a snapshot of each loop,
/// a tool call, three events and a waiting command, then moves it to
/// `status` at `ended_at_ms`; its flow says `retention` if given.
pub async fn record_run(
    store: &dyn Store,
    run_id: &str,
    status: RunStatus,
    ended_at_ms: u64,
    retention: Option<&str>,
) {
    let mut record = run_record(run_id, Some("a"), 1, 1 << 40, RunStatus::Running);
    if let Some(retention) = retention {
        record.flow["retention"] = serde_json::json!(retention);
    }
    store.create_run(record).await.unwrap();
    for path in LOOPS {
        let applied = store.save_snapshot(snapshot(run_id, path, 1, "n"), 1);
        assert!(applied.await.unwrap().is_applied());
    }
    let call = tool_call(&format!("{run_id}/1/0"), 1, ToolCallState::Done);
    assert!(
        store
            .record_tool_call(run_id, call, 1)
            .await
            .unwrap()
            .is_applied()
    );
    let appended = store.append_events(run_id, shared_events(run_id, 1..=3), 1);
    assert!(appended.await.unwrap().is_applied());
    let cancel = RunCommand::Cancel {
        reason: "r".to_owned(),
    };
    store.send_command(run_id, cancel).await.unwrap();
    let update = RunUpdate {
        pause: status.is_paused().then(|| PauseRecord {
            reason: "asked".to_owned(),
            subject: "s".to_owned(),
            path: "run".to_owned(),
            call: None,
        }),
        ..update(status, ended_at_ms)
    };
    assert!(
        store
            .update_run(run_id, 1, update)
            .await
            .unwrap()
            .is_applied()
    );
}
