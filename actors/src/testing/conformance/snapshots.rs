//! The rules of snapshots, their history and tool-call records
//! ([`SnapshotStore`](crate::SnapshotStore)).

use std::sync::Arc;

use crate::ports::{Store, ToolCallState};
use crate::testing::records::*;

/// A tool call keeps one record per idempotency key, the latest, read in key
/// order.
pub(super) async fn tool_calls_keep_one_record_per_idempotency_key(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    let run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    for call in [
        tool_call("r/run/1/0", 1, ToolCallState::Sent),
        tool_call("r/run/1/1", 1, ToolCallState::Sent),
        tool_call("r/run/1/0", 1, ToolCallState::Done),
        tool_call("r/run/1/1", 1, ToolCallState::Unknown),
    ] {
        assert!(
            store
                .record_tool_call("r", call, run.fence)
                .await
                .unwrap()
                .is_applied()
        );
    }
    assert_eq!(
        store.load_tool_calls("r").await.unwrap(),
        vec![
            tool_call("r/run/1/0", 1, ToolCallState::Done),
            tool_call("r/run/1/1", 1, ToolCallState::Unknown),
        ],
        "the latest record of each key, in key order"
    );
}

/// Every snapshot saved is kept in its run's history, in the order of its
/// place ([`Snapshot::seq`]), beside the latest of each loop; a fork's
/// lineage, and a tool call's place, maker and whether a person gave its
/// result, read back as written; runs' histories do not mix.
pub(super) async fn snapshot_history_and_a_forks_lineage_are_kept_as_written(
    store: Arc<dyn Store>,
) {
    let mut record = unowned("fork");
    record.fork = Some(crate::ports::ForkOrigin {
        parent: "parent".to_owned(),
        path: "run/worker:research:1".to_owned(),
        step: 2,
        seq: 7,
        guidance: Some("cite the sources".to_owned()),
        changes: vec!["leases.tool_call=30s".to_owned()],
        person_answers: vec!["A person reviewed the escalation and answered: go".to_owned()],
    });
    // Started within a caller's trace, too: kept as written.
    record.trace_parent = Some(
        crate::TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid"),
    );
    store.create_run(record.clone()).await.unwrap();
    store.create_run(unowned("other")).await.unwrap();
    let run = claimed(store.claim_run("fork", "exec-a", 1_000, TTL).await.unwrap());
    assert_eq!(run.fork, record.fork, "the lineage, read back from a claim");
    assert_eq!(run.trace_parent, record.trace_parent, "the caller's trace");
    let other = store.load_run("other").await.unwrap().unwrap();
    assert_eq!(other.trace_parent, None);
    let other = claimed(
        store
            .claim_run("other", "exec-a", 1_000, TTL)
            .await
            .unwrap(),
    );
    let saves = [
        ("run", 1, 3),
        ("run/worker:research:1", 1, 4),
        ("run", 2, 9),
    ];
    // Written out of their order: the history is read in it.
    for (path, step, seq) in saves.iter().rev() {
        let mut saved = snapshot("fork", path, *step, &format!("{path} at {step}"));
        saved.seq = *seq;
        assert!(
            store
                .save_snapshot(saved, run.fence)
                .await
                .unwrap()
                .is_applied()
        );
    }
    assert!(
        store
            .save_snapshot(snapshot("other", "run", 1, "elsewhere"), other.fence)
            .await
            .unwrap()
            .is_applied()
    );
    let history = store.load_snapshot_history("fork").await.unwrap();
    let read: Vec<(&str, u32, u64)> = history
        .iter()
        .map(|s| (s.path.as_str(), s.step, s.seq))
        .collect();
    assert_eq!(read, saves, "every snapshot, in the order of its place");
    assert_eq!(history[2].state["transcript"][0]["content"], "run at 2");
    assert_eq!(
        store.load_snapshots("fork").await.unwrap().len(),
        2,
        "the latest of each loop"
    );
    assert_eq!(store.load_snapshot_history("other").await.unwrap().len(), 1);
    let mut call = tool_call("parent/run/1/0", 1, ToolCallState::Done);
    call.seq = 2;
    call.by_person = true;
    call.made_by = Some("parent".to_owned());
    assert!(
        store
            .record_tool_call("fork", call.clone(), run.fence)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(store.load_tool_calls("fork").await.unwrap(), vec![call]);
    assert_eq!(
        store.load_run("fork").await.unwrap().unwrap().fork,
        record.fork
    );
}
