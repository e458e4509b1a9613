//! The rule of counting runs by status
//! ([`RunStore::count_runs_by_status`](crate::RunStore::count_runs_by_status),
//! [`RunStore::count_runs`](crate::RunStore::count_runs)): counts a store
//! keeps as runs change, not counts of its records, must stay the counts
//! of its records through every kind of change, and across a reopen.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Subject;
use super::queue::queued;
use crate::ports::{ForkOrigin, PurgeRule, QueueClaim, RunStatus, Store, StoreErrorKind};
use crate::testing::records::*;

/// The counts a store answers agree with its records, counted one by one,
/// for every status; `when` says at which step they did not.
async fn counts_agree(store: &dyn Store, when: &str) {
    let mut truth: BTreeMap<&str, u64> = BTreeMap::new();
    for record in store.list_runs().await.unwrap() {
        *truth.entry(record.status.name()).or_default() += 1;
    }
    let expected: Vec<(RunStatus, u64)> = RunStatus::ALL
        .into_iter()
        .map(|status| (status, truth.get(status.name()).copied().unwrap_or(0)))
        .collect();
    assert_eq!(
        store.count_runs_by_status().await.unwrap(),
        expected,
        "the counts by status {when}"
    );
    for (status, count) in expected {
        assert_eq!(
            store.count_runs(status).await.unwrap(),
            count,
            "the count of `{}` {when}",
            status.name()
        );
    }
}

/// The counts by status stay those of the records through creations (a
/// fork's included), claims from the queue and of a run, changes of
/// status, orphans, refused writes and purges, and after a reopen.
pub(super) async fn counts_by_status_stay_exact_through_every_change_and_a_reopen(
    subject: Subject,
) {
    let store = Arc::clone(&subject.store);
    counts_agree(store.as_ref(), "of an empty store").await;
    for n in 0..4 {
        store.create_run(queued(&format!("q{n}"))).await.unwrap();
    }
    for run_id in ["u0", "u1"] {
        store.create_run(unowned(run_id)).await.unwrap();
    }
    counts_agree(store.as_ref(), "after creations").await;
    // A second creation of a run is refused, and counts nothing.
    let again = store.create_run(queued("q0")).await.unwrap_err();
    assert_eq!(again.kind(), StoreErrorKind::Conflict);
    counts_agree(store.as_ref(), "after a refused creation").await;

    let claim = QueueClaim {
        owner_id: "exec-a".to_owned(),
        now_ms: 1_000,
        ttl_ms: TTL,
        max: 2,
        room: crate::keyed_limits::ClaimRoom::default(),
    };
    let from_queue = store.claim_queued(claim).await.unwrap();
    assert_eq!(from_queue.len(), 2);
    counts_agree(store.as_ref(), "after a claim from the queue").await;
    let u0 = claimed(store.claim_run("u0", "exec-a", 1_000, TTL).await.unwrap());
    counts_agree(store.as_ref(), "after a claim of a run").await;
    // A heartbeat changes no status.
    assert!(
        store
            .renew_run("u0", u0.fence, 1_100, TTL)
            .await
            .unwrap()
            .is_applied()
    );
    let q0 = store.load_run("q0").await.unwrap().unwrap();
    let q1 = store.load_run("q1").await.unwrap().unwrap();
    assert!(
        store
            .update_run("q0", q0.fence, update(RunStatus::Completed, 1_200))
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .update_run("q1", q1.fence, update(RunStatus::WaitingHuman, 1_200))
            .await
            .unwrap()
            .is_applied()
    );
    // A stale write lands nothing, and counts nothing.
    assert!(
        !store
            .update_run("q1", q1.fence + 1, update(RunStatus::Failed, 1_300))
            .await
            .unwrap()
            .is_applied()
    );
    counts_agree(store.as_ref(), "after changes of status").await;
    let orphaned = store.reconcile_orphans(9_000).await.unwrap();
    assert!(orphaned.contains(&"u0".to_owned()), "{orphaned:?}");
    counts_agree(store.as_ref(), "after orphans were marked").await;

    // A fork is a run created with its origin.
    let mut fork = run_record("q0-fork", Some("exec-a"), 1, 20_000, RunStatus::Running);
    // Built from its JSON, so that it has only what a fork must say.
    let origin: ForkOrigin = serde_json::from_value(
        serde_json::json!({"parent": "q0", "path": "run", "step": 1, "seq": 0}),
    )
    .unwrap();
    fork.fork = Some(origin);
    store.create_run(fork).await.unwrap();
    counts_agree(store.as_ref(), "after a fork").await;

    let purge = PurgeRule {
        now_ms: 100_000,
        retention_ms: Some(1_000),
        limit: 10,
    };
    let report = store.purge_finished(purge).await.unwrap();
    assert_eq!(report.purged, ["q0"]);
    counts_agree(store.as_ref(), "after a purge").await;
    store.flush().await.unwrap();
    drop(store);

    let subject = subject.reopened().await;
    let store = &subject.store;
    counts_agree(store.as_ref(), "after a reopen").await;
    // Counted on from where the reopen found them.
    let u1 = claimed(store.claim_run("u1", "exec-b", 200_000, TTL).await.unwrap());
    assert!(
        store
            .update_run("u1", u1.fence, update(RunStatus::Cancelled, 200_100))
            .await
            .unwrap()
            .is_applied()
    );
    counts_agree(store.as_ref(), "after changes made after a reopen").await;
}
