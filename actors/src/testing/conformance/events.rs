//! The rules of the event log ([`EventLog`](crate::EventLog)).

use std::sync::Arc;

use crate::ports::Store;
use crate::testing::records::*;

/// The event log is read after any event id in `seq` order (numeric, not
/// textual), its last event alone is the numerically last, and runs' logs
/// do not mix.
pub(super) async fn events_resume_after_an_event_id(store: Arc<dyn Store>) {
    for run_id in ["run-1", "run-10"] {
        store.create_run(unowned(run_id)).await.unwrap();
        claimed(store.claim_run(run_id, "a", 1_000, TTL).await.unwrap());
    }
    // Seqs across byte boundaries: the order is numeric, not textual.
    let seqs = [1, 2, 9, 10, 255, 256, 257, 1_000, 65_536];
    assert!(
        store
            .append_events("run-1", shared_events("run-1", seqs[..4].to_vec()), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .append_events("run-1", shared_events("run-1", seqs[4..].to_vec()), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .append_events("run-10", shared_events("run-10", [3, 4]), 1)
            .await
            .unwrap()
            .is_applied()
    );

    assert_eq!(
        store.load_events("run-1", 0).await.unwrap(),
        events("run-1", seqs)
    );
    assert_eq!(
        store.load_events("run-1", 10).await.unwrap(),
        events("run-1", seqs[4..].to_vec())
    );
    assert_eq!(
        store.load_events("run-1", 11).await.unwrap(),
        events("run-1", seqs[4..].to_vec())
    );
    assert_eq!(store.load_events("run-1", 65_536).await.unwrap(), vec![]);
    assert_eq!(store.load_events("run-1", u64::MAX).await.unwrap(), vec![]);
    assert_eq!(
        store.load_events("run-10", 0).await.unwrap(),
        events("run-10", [3, 4]),
        "runs do not mix"
    );
    assert_eq!(store.load_events("run-2", 0).await.unwrap(), vec![]);
    // The last event is read alone, numerically last.
    assert_eq!(
        store.last_event("run-1").await.unwrap(),
        events("run-1", [65_536]).pop()
    );
    assert_eq!(
        store.last_event("run-10").await.unwrap(),
        events("run-10", [4]).pop()
    );
    assert_eq!(store.last_event("run-2").await.unwrap(), None);
}

/// Events appended a little out of `seq` order — within an append, or an
/// earlier `seq` in a later append, as two tasks publishing at once may
/// hand them to the log's writer — are read back in `seq` order, each
/// once, an append tried again included, from any event id.
pub(super) async fn events_appended_out_of_order_are_read_in_seq_order_each_once(
    store: Arc<dyn Store>,
) {
    store.create_run(unowned("run-1")).await.unwrap();
    claimed(store.claim_run("run-1", "a", 1_000, TTL).await.unwrap());
    for seqs in [vec![1, 3, 2], vec![5], vec![4, 6], vec![6], vec![2, 3]] {
        let appended = store.append_events("run-1", shared_events("run-1", seqs), 1);
        assert!(appended.await.unwrap().is_applied());
    }
    assert_eq!(
        store.load_events("run-1", 0).await.unwrap(),
        events("run-1", 1..=6)
    );
    assert_eq!(
        store.load_events("run-1", 2).await.unwrap(),
        events("run-1", 3..=6)
    );
    assert_eq!(
        store.load_events("run-1", 4).await.unwrap(),
        events("run-1", [5, 6])
    );
    assert_eq!(
        store.last_event("run-1").await.unwrap(),
        events("run-1", [6]).pop()
    );
}
