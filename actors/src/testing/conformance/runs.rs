//! The rules of runs and their fenced ownership
//! ([`RunStore`](crate::RunStore)): stale writes refused, claims by
//! compare-and-set, orphans, and what a store says of itself (shared,
//! exclusive) and does with runs whose holder is gone.

use std::sync::Arc;
use std::time::Duration;

use super::Subject;
use super::queue::queued;
use crate::ports::{
    ClaimOutcome, GoneHolder, RunRecord, RunStatus, Snapshot, Store, ToolCallState, fencing,
};
use crate::testing::records::*;

/// Two executors on one store: once the second claims the run, every write
/// of the first (snapshot, tool call, events, status, heartbeat) is refused
/// as stale and none of it is readable, while the second's writes land.
pub(super) async fn stale_fence_writes_are_refused_and_land_nothing(a: Arc<dyn Store>) {
    let b = Arc::clone(&a); // a second executor on the same database
    a.create_run(unowned("r")).await.unwrap();

    let a_run = claimed(a.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    assert_eq!(a_run.fence, 1);
    assert!(
        a.save_snapshot(snapshot("r", "run", 1, "a before"), 1)
            .await
            .unwrap()
            .is_applied()
    );

    // A's lease ran out at 1 500; B claims at 2 000.
    let b_run = claimed(b.claim_run("r", "exec-b", 2_000, TTL).await.unwrap());
    assert_eq!(b_run.fence, 2);

    let refused = stale(2, "exec-b");
    assert_eq!(
        a.save_snapshot(snapshot("r", "run", 2, "a after"), 1)
            .await
            .unwrap(),
        refused
    );
    assert_eq!(
        a.save_snapshot(snapshot("r", "run/worker:w:1", 2, "a after"), 1)
            .await
            .unwrap(),
        refused
    );
    assert_eq!(
        a.record_tool_call("r", tool_call("r/run/2/0", 2, ToolCallState::Sent), 1)
            .await
            .unwrap(),
        refused
    );
    assert_eq!(
        a.append_events("r", shared_events("r", 1..=2), 1)
            .await
            .unwrap(),
        refused
    );
    assert_eq!(
        a.update_run("r", 1, update(RunStatus::Completed, 2_100))
            .await
            .unwrap(),
        refused
    );
    assert_eq!(a.renew_run("r", 1, 2_100, TTL).await.unwrap(), refused);

    // Nothing A wrote after losing the run is readable.
    assert_eq!(
        b.load_snapshots("r").await.unwrap(),
        vec![snapshot("r", "run", 1, "a before")]
    );
    assert_eq!(b.load_tool_calls("r").await.unwrap(), vec![]);
    assert_eq!(b.load_events("r", 0).await.unwrap(), vec![]);
    assert_eq!(b.load_run("r").await.unwrap(), Some(b_run.clone()));

    // B's writes land.
    assert!(
        b.save_snapshot(snapshot("r", "run", 2, "b"), 2)
            .await
            .unwrap()
            .is_applied()
    );
    let call = tool_call("r/run/2/0", 2, ToolCallState::Sent);
    assert!(
        b.record_tool_call("r", call.clone(), 2)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        b.append_events("r", shared_events("r", 1..=2), 2)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(b.renew_run("r", 2, 2_200, TTL).await.unwrap().is_applied());
    assert!(
        b.update_run("r", 2, update(RunStatus::Completed, 2_300))
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        b.load_snapshots("r").await.unwrap(),
        vec![snapshot("r", "run", 2, "b")]
    );
    assert_eq!(b.load_tool_calls("r").await.unwrap(), vec![call]);
    assert_eq!(b.load_events("r", 0).await.unwrap(), events("r", 1..=2));
    let done = b.load_run("r").await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.fence, done.owner_id.as_deref()),
        (RunStatus::Completed, 2, Some("exec-b"))
    );
}

/// A write racing a claim lands before it or not at all: once refused, the
/// old owner is refused for good, and the new owner reads its last write
/// that landed.
pub(super) async fn a_write_racing_a_claim_lands_before_it_or_not_at_all(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    claimed(store.claim_run("r", "exec-a", 0, 10).await.unwrap());

    let a = store.clone();
    let writer = tokio::spawn(async move {
        // Writes until well after the claim: twenty refusals.
        let mut outcomes = Vec::new();
        let mut refused = 0;
        for step in 1..=1_000_000 {
            let outcome = a
                .save_snapshot(snapshot("r", "run", step, "a"), 1)
                .await
                .unwrap();
            outcomes.push(outcome.is_applied());
            refused += usize::from(!outcome.is_applied());
            if refused == 20 {
                break;
            }
            // A store whose writes never wait (in memory) would otherwise
            // keep a runtime of one thread from ever running the claim.
            tokio::task::yield_now().await;
        }
        outcomes
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    claimed(store.claim_run("r", "exec-b", 100, TTL).await.unwrap());
    let seen_by_b = store.load_snapshots("r").await.unwrap();

    let outcomes = writer.await.unwrap();
    let landed = outcomes.iter().take_while(|applied| **applied).count();
    assert!(
        outcomes[landed..].iter().all(|applied| !applied),
        "once refused, A is refused for good"
    );
    let last_landed = u32::try_from(landed).unwrap();
    let expected: Vec<Snapshot> = (last_landed > 0)
        .then(|| snapshot("r", "run", last_landed, "a"))
        .into_iter()
        .collect();
    assert_eq!(seen_by_b, expected, "B sees A's last write that landed");
    assert_eq!(
        store.load_snapshots("r").await.unwrap(),
        expected,
        "and nothing after it"
    );
}

/// A claim is refused while another executor's lease is live and changes
/// nothing; the owner may claim again (the fence still goes up), and at its
/// expiry instant a lease is no longer live.
pub(super) async fn claim_is_refused_while_another_lease_is_live(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    let a_run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());

    assert_eq!(
        store.claim_run("r", "exec-b", 1_499, TTL).await.unwrap(),
        ClaimOutcome::HeldBy {
            owner_id: "exec-a".to_owned(),
            expires_at_ms: 1_500,
        }
    );
    assert_eq!(
        store.load_run("r").await.unwrap(),
        Some(a_run),
        "a refused claim changes nothing"
    );

    // The owner may claim again (after a restart): the fence still goes up.
    let again = claimed(store.claim_run("r", "exec-a", 1_200, TTL).await.unwrap());
    assert_eq!((again.fence, again.lease_expires_at_ms), (2, 1_700));

    // At the expiry instant the lease is no longer live.
    let b_run = claimed(store.claim_run("r", "exec-b", 1_700, TTL).await.unwrap());
    assert_eq!(
        (b_run.owner_id.as_deref(), b_run.fence),
        (Some("exec-b"), 3)
    );
    assert_eq!(
        store
            .claim_run("missing", "exec-b", 1_700, TTL)
            .await
            .unwrap(),
        ClaimOutcome::NotFound
    );
}

/// A terminal status releases the run's lease, and a finished run cannot be
/// claimed.
pub(super) async fn claim_of_a_finished_run_is_refused(store: Arc<dyn Store>) {
    for (run_id, status) in [
        ("done", RunStatus::Completed),
        ("failed", RunStatus::Failed),
        ("cancelled", RunStatus::Cancelled),
    ] {
        store.create_run(unowned(run_id)).await.unwrap();
        let run = claimed(store.claim_run(run_id, "exec-a", 1_000, TTL).await.unwrap());
        let mut end = update(status, 1_100);
        end.answer = Some("42".to_owned());
        assert!(
            store
                .update_run(run_id, run.fence, end)
                .await
                .unwrap()
                .is_applied()
        );
        let ended = store.load_run(run_id).await.unwrap().unwrap();
        assert_eq!(
            ended.lease_expires_at_ms, 0,
            "a terminal status releases the lease"
        );

        assert_eq!(
            store.claim_run(run_id, "exec-b", 5_000, TTL).await.unwrap(),
            ClaimOutcome::Finished(status)
        );
        assert_eq!(store.load_run(run_id).await.unwrap(), Some(ended));
    }
}

/// Many executors claiming one run at once yield exactly one owner, and
/// every other is told who it is.
pub(super) async fn concurrent_claims_yield_exactly_one_owner(store: Arc<dyn Store>) {
    for round in 0..4 {
        let run_id = format!("r{round}");
        store.create_run(unowned(&run_id)).await.unwrap();
        let start = Arc::new(tokio::sync::Barrier::new(32));
        let claims: Vec<_> = (0..32)
            .map(|i| {
                let (store, start, run_id) = (store.clone(), Arc::clone(&start), run_id.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store
                        .claim_run(&run_id, &format!("exec-{i}"), 1_000, TTL)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut holders = Vec::new();
        for claim in claims {
            match claim.await.unwrap() {
                ClaimOutcome::Claimed(record) => winners.push(record),
                ClaimOutcome::HeldBy { owner_id, .. } => holders.push(owner_id),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one claim wins");
        let winner = winners.pop().unwrap();
        assert_eq!(winner.fence, 1);
        let owner = winner.owner_id.clone().unwrap();
        assert!(
            holders.iter().all(|h| *h == owner),
            "every loser is told who won"
        );
        assert_eq!(store.load_run(&run_id).await.unwrap(), Some(winner));
    }
}

/// Reconciliation marks the running runs whose lease expired `orphaned` with
/// `fencing::ORPHANED`, leaves live, paused and finished runs alone, and
/// changes nothing done twice.
pub(super) async fn reconcile_marks_expired_running_runs_orphaned_with_the_message(
    store: Arc<dyn Store>,
) {
    let runs = [
        run_record("live", Some("a"), 1, 5_000, RunStatus::Running),
        run_record("expired", Some("a"), 1, 1_500, RunStatus::Running),
        run_record("expired-too", Some("b"), 3, 2_000, RunStatus::Running),
        run_record("paused", Some("a"), 1, 1_500, RunStatus::WaitingHuman),
        run_record(
            "unknown-call",
            Some("a"),
            1,
            1_500,
            RunStatus::ReconciliationRequired,
        ),
        run_record("done", Some("a"), 1, 0, RunStatus::Completed),
    ];
    for run in &runs {
        store.create_run(run.clone()).await.unwrap();
    }

    let orphaned = store.reconcile_orphans(2_000).await.unwrap();
    assert_eq!(orphaned, ["expired", "expired-too"]);
    for run_id in ["expired", "expired-too"] {
        let run = store.load_run(run_id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Orphaned);
        assert_eq!(
            run.reason.as_deref(),
            Some("run orphaned: executor lease expired")
        );
        assert_eq!(run.updated_at_ms, 2_000);
    }
    for run in runs.iter().filter(|r| !r.run_id.starts_with("expired")) {
        assert_eq!(
            store.load_run(&run.run_id).await.unwrap().as_ref(),
            Some(run),
            "{} is untouched",
            run.run_id
        );
    }
    assert_eq!(
        store.reconcile_orphans(2_000).await.unwrap(),
        Vec::<String>::new(),
        "reconciling twice changes nothing"
    );
}

/// A run its executor let go on a clean shutdown says so: once swept, it
/// is orphaned by a shutdown, not by an executor lease that expired; and
/// claimed straight from `running`, it no longer says it is stopped.
pub(super) async fn a_run_stopped_in_place_is_orphaned_as_stopped_and_claimed_clean(
    store: Arc<dyn Store>,
) {
    let mut stopped = run_record("stopped", Some("a"), 1, 1_500, RunStatus::Running);
    stopped.reason = Some(fencing::STOPPED_IN_PLACE.to_owned());
    let mut taken = run_record("taken", Some("a"), 1, 1_500, RunStatus::Running);
    taken.reason = Some(fencing::STOPPED_IN_PLACE.to_owned());
    store.create_run(stopped).await.unwrap();
    store.create_run(taken).await.unwrap();

    let claimed = store.claim_run("taken", "b", 1_600, TTL).await.unwrap();
    let ClaimOutcome::Claimed(claimed) = claimed else {
        panic!("a released run is claimed: {claimed:?}");
    };
    assert_eq!(claimed.status, RunStatus::Running);
    assert_eq!(claimed.reason, None, "a run taken on again is not stopped");

    assert_eq!(store.reconcile_orphans(2_000).await.unwrap(), ["stopped"]);
    let run = store.load_run("stopped").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Orphaned);
    assert_eq!(run.reason.as_deref(), Some(fencing::ORPHANED_AFTER_STOP));
    assert_ne!(run.reason.as_deref(), Some(fencing::ORPHANED));
}

/// An orphaned run is claimed by another executor with its snapshots kept,
/// and runs again to its end.
pub(super) async fn orphaned_run_can_be_claimed_and_runs_again(store: Arc<dyn Store>) {
    store.create_run(unowned("r")).await.unwrap();
    claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    assert!(
        store
            .save_snapshot(snapshot("r", "run", 3, "before the crash"), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(store.reconcile_orphans(2_000).await.unwrap(), ["r"]);

    let resumed = claimed(store.claim_run("r", "exec-b", 2_500, TTL).await.unwrap());
    assert_eq!(resumed.status, RunStatus::Running);
    assert_eq!(resumed.reason, None);
    assert_eq!(
        (resumed.owner_id.as_deref(), resumed.fence),
        (Some("exec-b"), 2)
    );
    assert_eq!(
        store.load_snapshots("r").await.unwrap(),
        vec![snapshot("r", "run", 3, "before the crash")]
    );
    assert!(
        store
            .save_snapshot(snapshot("r", "run", 4, "resumed"), 2)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .update_run("r", 2, update(RunStatus::Completed, 3_000))
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        store.load_run("r").await.unwrap().unwrap().status,
        RunStatus::Completed
    );
}

/// A store says it is shared ([`RunStore::is_shared`](crate::RunStore::is_shared))
/// exactly when another executor's handle on its data is another store (a
/// new pool on the same database), not the one handle a store opened by
/// one process at a time hands to every executor; and no store says it is
/// both shared and exclusive. A wrapper that does not pass `is_shared`
/// on says a shared store is not.
pub(super) async fn a_store_is_shared_exactly_when_another_executors_handle_is_another_store(
    subject: Subject,
) {
    let other = subject.another_handle().await;
    let another_store = !Arc::ptr_eq(&subject.store, &other);
    for (handle, which) in [(&subject.store, "the store"), (&other, "its other handle")] {
        assert_eq!(
            handle.is_shared(),
            another_store,
            "{which} says is_shared = {}, but another executor's handle is {} store",
            handle.is_shared(),
            if another_store { "another" } else { "the same" }
        );
        assert!(
            !(handle.is_shared() && handle.is_exclusive()),
            "{which} says it is both shared and exclusive"
        );
    }
}

/// A store says it is exclusive ([`RunStore::is_exclusive`](crate::RunStore::is_exclusive))
/// exactly when its place cannot be opened again while it is open: one
/// process at a time holds it (sled's lock on its directory), so a run
/// held by an owner gone from that process is held by nobody. A wrapper
/// that does not pass `is_exclusive` on says such a store is not.
pub(super) async fn a_store_that_holds_its_place_alone_says_it_is_exclusive(subject: Subject) {
    let exclusive = subject.store.is_exclusive();
    match subject.open_while_open().await {
        Err(refused) => assert!(
            exclusive,
            "the store's place cannot be opened again while it is open ({refused}), so one \
             process at a time holds it: the store says is_exclusive = false"
        ),
        Ok(second) => {
            assert!(
                !exclusive,
                "the store says is_exclusive, but its place was opened again while it is open"
            );
            assert!(
                !second.is_exclusive(),
                "the second handle says is_exclusive"
            );
        }
    }
}

/// On a store that says it is exclusive,
/// [`orphan_runs_of_gone_holders`](crate::RunStore::orphan_runs_of_gone_holders)
/// marks orphaned each running run whose holder is gone, whatever its
/// lease says, as [`fencing::orphan_of_a_gone_holder`] does (its owner and
/// fence kept), and nothing else; on any other store it marks nothing, for
/// such a store cannot tell a holder gone from a holder elsewhere. A
/// wrapper that does not pass it on marks nothing where it should.
pub(super) async fn runs_of_a_gone_holder_are_orphaned_only_on_an_exclusive_store(
    store: Arc<dyn Store>,
) {
    let runs = [
        run_record(
            "held-by-the-gone",
            Some("gone"),
            2,
            1_000_000,
            RunStatus::Running,
        ),
        run_record(
            "held-by-the-living",
            Some("living"),
            1,
            1_000_000,
            RunStatus::Running,
        ),
        run_record(
            "paused",
            Some("gone"),
            1,
            1_000_000,
            RunStatus::WaitingHuman,
        ),
        queued("queued"),
        run_record("done", Some("gone"), 1, 0, RunStatus::Completed),
    ];
    for run in &runs {
        store.create_run(run.clone()).await.unwrap();
    }
    let gone: GoneHolder = Arc::new(|owner: &str| owner == "gone");
    let marked = store
        .orphan_runs_of_gone_holders(2_000, Arc::clone(&gone))
        .await
        .unwrap();
    let expected: Vec<RunRecord> = if store.is_exclusive() {
        let orphaned = fencing::orphan_of_a_gone_holder(&runs[0], 2_000)
            .expect("a running run of a gone holder is orphaned by the rule");
        assert_eq!(marked, ["held-by-the-gone"], "an exclusive store marks it");
        std::iter::once(orphaned)
            .chain(runs.iter().skip(1).cloned())
            .collect()
    } else {
        assert_eq!(
            marked,
            Vec::<String>::new(),
            "a store that is not exclusive cannot tell a holder gone: it marks nothing"
        );
        runs.to_vec()
    };
    for run in &expected {
        assert_eq!(
            store.load_run(&run.run_id).await.unwrap().as_ref(),
            Some(run),
            "{}",
            run.run_id
        );
    }
    assert_eq!(
        store
            .orphan_runs_of_gone_holders(2_000, gone)
            .await
            .unwrap(),
        Vec::<String>::new(),
        "marking twice changes nothing"
    );
}
