//! The memory store's retention: a purge deletes every finished run past
//! its retention with everything kept of it, its workers' snapshots too,
//! and touches nothing of a run that lives or waits for a person.

use leasehold_actors::{
    Event, EventKind, EventLog, MemoryStore, PauseRecord, PurgeRule, QueueStore, Retention,
    RunCommand, RunRecord, RunStatus, RunStore, RunUpdate, Snapshot, SnapshotStore, ToolCallRecord,
    ToolCallState,
};
use serde_json::json;

/// Records `run_id` owned at fence 1, with snapshots of the root loop and
/// a worker, a tool call, three events and a waiting command; then moves
/// it to `status` at `ended_at_ms` (a flow of `flow_retention` if given).
async fn run(
    store: &MemoryStore,
    run_id: &str,
    status: RunStatus,
    ended_at_ms: u64,
    flow_retention: Option<&str>,
) {
    let mut flow = json!({"name": "research", "task": "t", "max_steps": 8});
    if let Some(retention) = flow_retention {
        flow["retention"] = json!(retention);
    }
    store
        .create_run(RunRecord {
            trace_parent: None,
            tenant: None,
            run_id: run_id.to_owned(),
            flow,
            status: RunStatus::Running,
            owner_id: Some("a".to_owned()),
            fence: 1,
            lease_expires_at_ms: u64::MAX,
            reason: None,
            answer: None,
            pause: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            fork: None,
        })
        .await
        .unwrap();
    for path in ["run", "run/worker:research:1"] {
        let snapshot = Snapshot {
            run_id: run_id.to_owned(),
            path: path.to_owned(),
            step: 1,
            status: RunStatus::Running,
            state: json!({}),
            seq: 0,
            base: None,
        };
        assert!(store.save_snapshot(snapshot, 1).await.unwrap().is_applied());
    }
    let call = ToolCallRecord {
        key: format!("{run_id}/run/1/0"),
        path: "run/worker:research:1".to_owned(),
        step: 1,
        index: 0,
        tool: "search".to_owned(),
        arguments: json!({}),
        idempotent: Some(true),
        state: ToolCallState::Done,
        result: Some("found".to_owned()),
        by_person: false,
        made_by: None,
        seq: 0,
    };
    assert!(
        store
            .record_tool_call(run_id, call, 1)
            .await
            .unwrap()
            .is_applied()
    );
    let events: Vec<std::sync::Arc<Event>> = (1..=3)
        .map(|seq| Event {
            seq,
            position: seq,
            at: seq,
            run_id: run_id.into(),
            path: "run".into(),
            kind: EventKind::StepStarted {
                step: 1,
                limit: 8,
                nudges: 0,
            },
        })
        .map(std::sync::Arc::new)
        .collect();
    assert!(
        store
            .append_events(run_id, events, 1)
            .await
            .unwrap()
            .is_applied()
    );
    let cancel = RunCommand::Cancel {
        reason: "r".to_owned(),
    };
    store.send_command(run_id, cancel).await.unwrap();
    let pause = status.is_paused().then(|| PauseRecord {
        reason: "asked".to_owned(),
        subject: "s".to_owned(),
        path: "run".to_owned(),
        call: None,
    });
    let update = RunUpdate {
        status,
        reason: None,
        answer: None,
        pause,
        at_ms: ended_at_ms,
    };
    assert!(
        store
            .update_run(run_id, 1, update)
            .await
            .unwrap()
            .is_applied()
    );
}

/// Every entry one run of [`run`] leaves: record, order, 2 snapshots (and
/// their 2 entries in its history), 1 tool call, 3 events, 1 command.
const ENTRIES_PER_RUN: usize = 11;

/// The entry a paused or finished run leaves besides: the notice of its
/// pause or end, in the outbox until delivered.
const NOTICE: usize = 1;

fn rule(now_ms: u64, retention_ms: Option<u64>, limit: usize) -> PurgeRule {
    PurgeRule {
        now_ms,
        retention_ms,
        limit,
    }
}

#[tokio::test]
async fn a_purge_deletes_finished_runs_past_their_retention_with_their_workers_records() {
    let store = MemoryStore::new();
    run(&store, "done-old", RunStatus::Completed, 1_000, None).await;
    run(&store, "failed-old", RunStatus::Failed, 1_000, None).await;
    run(&store, "cancelled-old", RunStatus::Cancelled, 1_000, None).await;
    run(&store, "done-new", RunStatus::Completed, 9_500, None).await;
    run(&store, "paused-old", RunStatus::WaitingHuman, 1_000, None).await;
    run(
        &store,
        "reconcile-old",
        RunStatus::ReconciliationRequired,
        1_000,
        None,
    )
    .await;
    run(&store, "running", RunStatus::Running, 1_000, None).await;
    run(&store, "orphaned-old", RunStatus::Orphaned, 1_000, None).await;
    // Six of them paused or finished: a notice each.
    assert_eq!(store.entries(), 8 * ENTRIES_PER_RUN + 6 * NOTICE);

    // Two at most per call: the batch says there is more.
    let first = store
        .purge_finished(rule(10_000, Some(5_000), 2))
        .await
        .unwrap();
    assert_eq!(first.purged.len(), 2);
    assert!(first.more);
    let second = store
        .purge_finished(rule(10_000, Some(5_000), 2))
        .await
        .unwrap();
    assert_eq!(second.purged.len(), 1);
    assert!(!second.more);
    let mut purged = [first.purged, second.purged].concat();
    purged.sort();
    assert_eq!(purged, ["cancelled-old", "done-old", "failed-old"]);

    for gone in &purged {
        assert!(store.load_run(gone).await.unwrap().is_none(), "{gone}");
        assert!(
            store.load_snapshots(gone).await.unwrap().is_empty(),
            "{gone}"
        );
        assert!(
            store.load_tool_calls(gone).await.unwrap().is_empty(),
            "{gone}"
        );
        assert!(
            store.load_events(gone, 0).await.unwrap().is_empty(),
            "{gone}"
        );
        assert_eq!(store.count_commands(gone).await.unwrap(), 0, "{gone}");
    }
    // Nothing of the other five is touched: every entry is still there.
    // The three left that paused or finished keep their notices.
    assert_eq!(store.entries(), 5 * ENTRIES_PER_RUN + 3 * NOTICE);
    for kept in [
        "done-new",
        "paused-old",
        "reconcile-old",
        "running",
        "orphaned-old",
    ] {
        assert_eq!(store.load_snapshots(kept).await.unwrap().len(), 2, "{kept}");
        assert_eq!(store.load_events(kept, 0).await.unwrap().len(), 3, "{kept}");
    }
    assert_eq!(store.list_ids().len(), 5);
}

#[tokio::test]
async fn a_flows_retention_shortens_the_servers_and_applies_when_it_keeps_for_ever() {
    let store = MemoryStore::new();
    run(&store, "short", RunStatus::Completed, 1_000, Some("1s")).await;
    run(&store, "long", RunStatus::Completed, 1_000, Some("1h")).await;
    run(&store, "plain", RunStatus::Completed, 1_000, None).await;
    let report = store.purge_finished(rule(2_000, None, 10)).await.unwrap();
    assert_eq!(report.purged, ["short"], "kept for ever but by its flow");
    // The server's retention caps a longer flow's.
    let report = store
        .purge_finished(rule(61_000, Some(60_000), 10))
        .await
        .unwrap();
    let mut purged = report.purged;
    purged.sort();
    assert_eq!(purged, ["long", "plain"]);
    assert_eq!(store.entries(), 0);
}
