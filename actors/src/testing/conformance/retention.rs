//! The rules of retention ([`Retention`](crate::Retention)).

use std::sync::Arc;

use super::outbox::every_notice;
use crate::ports::{PurgeRule, RunQuery, RunStatus, Store};
use crate::testing::records::*;

fn purge_rule(now_ms: u64, retention_ms: Option<u64>, limit: usize) -> PurgeRule {
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
        && store
            .load_snapshot_history(run_id)
            .await
            .is_ok_and(|history| history.is_empty())
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

/// Finished runs past their retention are deleted in batches of at most the
/// limit, each with everything kept of it, and a run that lives, waits for a
/// person or ended recently is left whole.
pub(super) async fn finished_runs_past_their_retention_go_with_everything_kept_of_them(
    store: Arc<dyn Store>,
) {
    let store = store.as_ref();
    for (run_id, status) in [
        ("r1-completed", RunStatus::Completed),
        ("r2-failed", RunStatus::Failed),
        ("r3-cancelled", RunStatus::Cancelled),
    ] {
        record_run(store, run_id, status, 1_000, None).await;
    }
    // Of the same age, or older: never deleted.
    record_run(store, "r4-waiting", RunStatus::WaitingHuman, 500, None).await;
    let reconcile = RunStatus::ReconciliationRequired;
    record_run(store, "r5-reconcile", reconcile, 500, None).await;
    record_run(store, "r6-running", RunStatus::Running, 500, None).await;
    record_run(store, "r7-orphaned", RunStatus::Orphaned, 500, None).await;
    record_run(store, "r8-recent", RunStatus::Completed, 9_500, None).await;

    // Not yet due: nothing goes.
    let early = store
        .purge_finished(purge_rule(5_999, Some(5_000), 10))
        .await;
    assert_eq!(early.unwrap().purged, Vec::<String>::new());
    // Two at most a batch: the first says there is more.
    let first = store
        .purge_finished(purge_rule(10_000, Some(5_000), 2))
        .await;
    let first = first.unwrap();
    assert_eq!(first.purged.len(), 2, "{first:?}");
    assert!(first.more);
    let second = store
        .purge_finished(purge_rule(10_000, Some(5_000), 2))
        .await;
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
    // Their undelivered notices went with them; the paused runs' stay.
    let mut noticed: Vec<String> = every_notice(store, 1 << 50)
        .await
        .into_iter()
        .map(|notice| notice.run_id)
        .collect();
    noticed.sort();
    assert_eq!(noticed, ["r4-waiting", "r5-reconcile", "r8-recent"]);
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
    let another = store
        .purge_finished(purge_rule(10_000, Some(5_000), 2))
        .await;
    assert!(another.unwrap().purged.is_empty());
}

/// A flow's retention shortens the server's for its runs, also when the
/// server keeps runs for ever, and the server's retention caps a flow's
/// longer one.
pub(super) async fn a_flows_retention_shortens_the_servers(store: Arc<dyn Store>) {
    let store = store.as_ref();
    record_run(store, "f1-short", RunStatus::Completed, 1_000, Some("1s")).await;
    record_run(store, "f2-long", RunStatus::Completed, 1_000, Some("1h")).await;
    record_run(store, "f3-plain", RunStatus::Failed, 1_000, None).await;
    // Kept for ever by the server, but not by its flow.
    let report = store
        .purge_finished(purge_rule(2_000, None, 10))
        .await
        .unwrap();
    assert_eq!(report.purged, ["f1-short"]);
    assert!(gone(store, "f1-short").await);
    // The server's retention holds a longer flow's to it.
    let report = store
        .purge_finished(purge_rule(61_000, Some(60_000), 10))
        .await;
    let mut purged = report.unwrap().purged;
    purged.sort();
    assert_eq!(purged, ["f2-long", "f3-plain"]);
    assert!(listed(store).await.is_empty());
}
