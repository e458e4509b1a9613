//! Retention on the sled store: a store emptied by its retention opens
//! again as what it is, not as a damaged store. The rules of retention on
//! every store — `Store::purge_finished` deletes the finished runs past
//! their retention with everything kept of them, in bounded batches, and
//! touches nothing of a run that lives, waits for a person or ended
//! recently — are the store port's conformance suite's
//! (`leasehold::testing::conformance`, run by `store_conformance.rs`).

use leasehold::store::{Durability, SledConfig, SledStore};
use leasehold::{
    MemoryStore, PauseRecord, PurgeRule, RunCommand, RunStatus, RunUpdate, Store, ToolCallState,
};

#[path = "support/records.rs"]
mod records;

use records::*;

/// The loops of every run: the root and a worker.
const LOOPS: [&str; 2] = ["run", "run/worker:research:1"];

/// Records `run_id` owned by `a` at fence 1 with a snapshot of each loop,
/// a tool call, three events and a waiting command, then moves it to
/// `status` at `ended_at_ms`; its flow says `retention` if given.
async fn run(
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
    let appended = store.append_events(run_id, events(run_id, 1..=3), 1);
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

fn rule(now_ms: u64, retention_ms: Option<u64>, limit: usize) -> PurgeRule {
    PurgeRule {
        now_ms,
        retention_ms,
        limit,
    }
}

fn open_sled(path: &std::path::Path) -> SledStore {
    SledStore::open(SledConfig::new(path).with_durability(Durability::Sync)).unwrap()
}

/// The manifest of a sled store counts the runs ever created: a store
/// whose runs its retention deleted must open as it is, not be refused as
/// one that lost them. Its creation order is swept of the deleted runs,
/// and it goes on creating and listing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sled_store_emptied_by_its_retention_opens_again_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_sled(dir.path());
    for n in 0..40 {
        run(
            &store,
            &format!("old-{n:02}"),
            RunStatus::Completed,
            1_000,
            None,
        )
        .await;
    }
    // Written, closed, its manifest recorded with 40 runs.
    drop(store);
    let store = open_sled(dir.path());
    let mut purged = 0;
    loop {
        let report = store.purge_finished(rule(10_000, Some(1_000), 7)).await;
        let report = report.unwrap();
        purged += report.purged.len();
        if !report.more {
            break;
        }
    }
    assert_eq!(purged, 40);
    assert!(store.list_runs().await.unwrap().is_empty());
    store.flush().await.unwrap();
    drop(store);
    let store = open_sled(dir.path());
    assert!(store.list_runs().await.unwrap().is_empty());
    run(&store, "new", RunStatus::Completed, 20_000, None).await;
    let listed: Vec<String> = store
        .list_runs()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(listed, ["new"]);
    drop(store);
    let store = open_sled(dir.path());
    assert_eq!(store.list_runs().await.unwrap().len(), 1);
    // A memory store given the same runs agrees on what a purge deletes.
    let memory = MemoryStore::new();
    run(&memory, "new", RunStatus::Completed, 20_000, None).await;
    let rule = rule(40_000, Some(1_000), 10);
    assert_eq!(
        store.purge_finished(rule).await.unwrap(),
        memory.purge_finished(rule).await.unwrap()
    );
}
