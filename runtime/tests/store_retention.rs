//! Retention on the sled store: a store emptied by its retention opens
//! again as what it is, not as a damaged store. The rules of retention on
//! every store — `Retention::purge_finished` deletes the finished runs past
//! their retention with everything kept of them, in bounded batches, and
//! touches nothing of a run that lives, waits for a person or ended
//! recently — are the store port's conformance suite's
//! (`leasehold::testing::conformance`, run by `store_conformance.rs`).

use leasehold::store::{Durability, SledConfig, SledStore};
use leasehold::{ChangeSource, MemoryStore, PurgeRule, Retention, RunStatus, RunStore};

#[path = "support/records.rs"]
mod records;

use records::*;

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
        record_run(
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
    record_run(&store, "new", RunStatus::Completed, 20_000, None).await;
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
    record_run(&memory, "new", RunStatus::Completed, 20_000, None).await;
    let rule = rule(40_000, Some(1_000), 10);
    assert_eq!(
        store.purge_finished(rule).await.unwrap(),
        memory.purge_finished(rule).await.unwrap()
    );
}
