//! The rules of the change feed ([`ChangeSource`](crate::ChangeSource)).

use std::sync::Arc;
use std::time::Duration;

use crate::ports::{ChangeFeed, RunCommand, RunStatus, Store, StoreChange};
use crate::testing::records::*;

/// A change is published for each write that landed — a run's record, new
/// events, a stored command, an orphan, and a notice kept in the outbox
/// (after its record's change) — and none for a write a stale fence
/// refused or for a heartbeat.
pub(super) async fn changes_are_published_for_writes_that_landed_and_only_those(
    store: Arc<dyn Store>,
) {
    let mut feed = store.changes();
    let run = |id: &str| StoreChange::Run {
        run_id: id.to_owned(),
    };
    store.create_run(unowned("r")).await.unwrap();
    assert_eq!(next_change(&mut feed).await, run("r"));
    claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    assert_eq!(next_change(&mut feed).await, run("r"));
    assert!(
        store
            .append_events("r", shared_events("r", 1..=2), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        next_change(&mut feed).await,
        StoreChange::Events {
            run_id: "r".to_owned()
        }
    );
    store
        .send_command("r", RunCommand::Resume { guidance: None })
        .await
        .unwrap();
    assert_eq!(
        next_change(&mut feed).await,
        StoreChange::Command {
            run_id: "r".to_owned()
        }
    );

    // B takes the run over; A's writes are refused and publish nothing, and
    // neither does a heartbeat.
    claimed(store.claim_run("r", "exec-b", 2_000, TTL).await.unwrap());
    assert_eq!(next_change(&mut feed).await, run("r"));
    assert!(
        !store
            .append_events("r", shared_events("r", 3..=3), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        !store
            .update_run("r", 1, update(RunStatus::Failed, 2_100))
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .renew_run("r", 2, 2_100, TTL)
            .await
            .unwrap()
            .is_applied()
    );
    // The next change is B's write, not one of A's refused ones; its end
    // keeps a notice, said after it.
    assert!(
        store
            .update_run("r", 2, update(RunStatus::Completed, 2_200))
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(next_change(&mut feed).await, run("r"));
    assert_eq!(
        next_change(&mut feed).await,
        StoreChange::Notice {
            run_id: "r".to_owned()
        }
    );

    // Orphans are changes of their runs.
    store.create_run(unowned("s")).await.unwrap();
    assert_eq!(next_change(&mut feed).await, run("s"));
    claimed(store.claim_run("s", "exec-a", 3_000, TTL).await.unwrap());
    assert_eq!(next_change(&mut feed).await, run("s"));
    assert_eq!(
        store.reconcile_orphans(10_000).await.unwrap(),
        vec!["s".to_owned()]
    );
    assert_eq!(next_change(&mut feed).await, run("s"));
}

/// The next change on `feed` that is not a resync (a store that listens
/// elsewhere announces one when it starts listening).
async fn next_change(feed: &mut ChangeFeed) -> StoreChange {
    loop {
        let change = tokio::time::timeout(Duration::from_secs(30), feed.recv())
            .await
            .expect("a change within 30 s")
            .expect("the store is open");
        if change != StoreChange::Resync {
            return change;
        }
    }
}
