//! Retention on every store: `Store::purge_finished` deletes the finished
//! runs past their retention with everything kept of them — the record,
//! every loop's snapshot (its workers' too), tool-call records, events,
//! waiting commands — in bounded batches, and touches nothing of a run
//! that lives, waits for a person or ended recently. Run on the memory
//! store, sled and PostgreSQL (a throwaway cluster, `support/postgres.rs`);
//! a sled store emptied by its retention opens again as what it is, not as
//! a damaged store.

use std::sync::Arc;

use leasehold::store::{Durability, PostgresConfig, PostgresStore, SledConfig, SledStore};
use leasehold::{
    MemoryStore, PauseRecord, PurgeRule, RunCommand, RunQuery, RunStatus, RunUpdate, Store,
    ToolCallState,
};

#[path = "support/postgres.rs"]
mod postgres;
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

/// Whether nothing is kept of `run_id`.
async fn gone(store: &dyn Store, run_id: &str) -> bool {
    store.load_run(run_id).await.unwrap().is_none()
        && store.load_snapshots(run_id).await.unwrap().is_empty()
        && store.load_tool_calls(run_id).await.unwrap().is_empty()
        && store.load_events(run_id, 0).await.unwrap().is_empty()
}

/// Whether all of `run_id` is kept: both loops' snapshots, its call, its
/// events and its command.
async fn whole(store: &dyn Store, run_id: &str) -> bool {
    store.load_run(run_id).await.unwrap().is_some()
        && store.load_snapshots(run_id).await.unwrap().len() == LOOPS.len()
        && store.load_tool_calls(run_id).await.unwrap().len() == 1
        && store.load_events(run_id, 0).await.unwrap().len() == 3
        && store.count_commands(run_id).await.unwrap() == 1
}

/// Every id a listing shows, newest first.
async fn listed(store: &dyn Store) -> Vec<String> {
    let page = store.list_runs_page(&RunQuery::first(100)).await.unwrap();
    page.runs.into_iter().map(|r| r.run_id).collect()
}

async fn finished_runs_past_their_retention_go_with_everything_kept_of_them(store: Arc<dyn Store>) {
    let store = store.as_ref();
    for (run_id, status) in [
        ("r1-completed", RunStatus::Completed),
        ("r2-failed", RunStatus::Failed),
        ("r3-cancelled", RunStatus::Cancelled),
    ] {
        run(store, run_id, status, 1_000, None).await;
    }
    // Of the same age, or older: never deleted.
    run(store, "r4-waiting", RunStatus::WaitingHuman, 500, None).await;
    let reconcile = RunStatus::ReconciliationRequired;
    run(store, "r5-reconcile", reconcile, 500, None).await;
    run(store, "r6-running", RunStatus::Running, 500, None).await;
    run(store, "r7-orphaned", RunStatus::Orphaned, 500, None).await;
    run(store, "r8-recent", RunStatus::Completed, 9_500, None).await;

    // Not yet due: nothing goes.
    let early = store.purge_finished(rule(5_999, Some(5_000), 10)).await;
    assert_eq!(early.unwrap().purged, Vec::<String>::new());
    // Two at most a batch: the first says there is more.
    let first = store.purge_finished(rule(10_000, Some(5_000), 2)).await;
    let first = first.unwrap();
    assert_eq!(first.purged.len(), 2, "{first:?}");
    assert!(first.more);
    let second = store.purge_finished(rule(10_000, Some(5_000), 2)).await;
    let second = second.unwrap();
    assert_eq!(second.purged.len(), 1, "{second:?}");
    assert!(!second.more);
    let mut purged = [first.purged, second.purged].concat();
    purged.sort();
    assert_eq!(purged, ["r1-completed", "r2-failed", "r3-cancelled"]);
    for run_id in &purged {
        assert!(gone(store, run_id).await, "{run_id} left something");
        assert_eq!(store.count_commands(run_id).await.unwrap(), 0);
    }
    for run_id in [
        "r4-waiting",
        "r5-reconcile",
        "r6-running",
        "r7-orphaned",
        "r8-recent",
    ] {
        assert!(whole(store, run_id).await, "{run_id} was touched");
    }
    assert_eq!(
        listed(store).await,
        [
            "r8-recent",
            "r7-orphaned",
            "r6-running",
            "r5-reconcile",
            "r4-waiting"
        ]
    );
    let finished = store.count_runs(RunStatus::Completed).await.unwrap();
    assert_eq!(finished, 1, "the status index forgot the deleted runs");
    // A run deleted answers as one that never was.
    let another = store.purge_finished(rule(10_000, Some(5_000), 2)).await;
    assert!(another.unwrap().purged.is_empty());
}

async fn a_flows_retention_shortens_the_servers(store: Arc<dyn Store>) {
    let store = store.as_ref();
    run(store, "f1-short", RunStatus::Completed, 1_000, Some("1s")).await;
    run(store, "f2-long", RunStatus::Completed, 1_000, Some("1h")).await;
    run(store, "f3-plain", RunStatus::Failed, 1_000, None).await;
    // Kept for ever by the server, but not by its flow.
    let report = store.purge_finished(rule(2_000, None, 10)).await.unwrap();
    assert_eq!(report.purged, ["f1-short"]);
    assert!(gone(store, "f1-short").await);
    // The server's retention holds a longer flow's to it.
    let report = store.purge_finished(rule(61_000, Some(60_000), 10)).await;
    let mut purged = report.unwrap().purged;
    purged.sort();
    assert_eq!(purged, ["f2-long", "f3-plain"]);
    assert!(listed(store).await.is_empty());
}

macro_rules! on_every_store {
    ($($rule:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $rule() {
                    super::$rule(std::sync::Arc::new(leasehold::MemoryStore::new())).await;
                }
            )*
        }
        mod sled {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $rule() {
                    let dir = tempfile::tempdir().unwrap();
                    super::$rule(std::sync::Arc::new(super::open_sled(dir.path()))).await;
                }
            )*
        }
        mod on_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $rule() {
                    let (_cluster, url) = super::postgres::database().await;
                    super::$rule(std::sync::Arc::new(super::open_postgres(&url).await)).await;
                }
            )*
        }
    };
}

on_every_store! {
    finished_runs_past_their_retention_go_with_everything_kept_of_them,
    a_flows_retention_shortens_the_servers,
}

fn open_sled(path: &std::path::Path) -> SledStore {
    SledStore::open(SledConfig::new(path).with_durability(Durability::Sync)).unwrap()
}

async fn open_postgres(url: &str) -> PostgresStore {
    PostgresStore::connect(PostgresConfig::new(url))
        .await
        .unwrap()
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
