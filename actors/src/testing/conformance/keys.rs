//! The rules of idempotency keys
//! ([`RunStore::create_run_keyed`](crate::RunStore::create_run_keyed)).

use std::sync::Arc;

use super::Subject;
use crate::ports::{IdempotencyKey, KeyedCreation, RunStatus, Store};
use crate::testing::records::*;

fn key(key: &str, fingerprint: &str, at_ms: u64) -> IdempotencyKey {
    IdempotencyKey {
        key: key.to_owned(),
        fingerprint: fingerprint.to_owned(),
        at_ms,
        retention_ms: 500,
    }
}

fn existing(run_id: &str, fingerprint: &str) -> KeyedCreation {
    KeyedCreation::Existing {
        run_id: run_id.to_owned(),
        fingerprint: fingerprint.to_owned(),
    }
}

/// A creation under a key creates its run; another under the same key
/// while it holds creates nothing and answers the first run with the key's
/// fingerprint, whatever it was given; once the key's retention is over,
/// a creation under it creates its run and the key is its.
pub(super) async fn a_key_creates_one_run_and_answers_it_while_it_holds(store: Arc<dyn Store>) {
    let created = store
        .create_run_keyed(
            run_record("k1", None, 1, 0, RunStatus::Running),
            key("k", "f1", 1_000),
        )
        .await
        .unwrap();
    assert_eq!(created, KeyedCreation::Created);
    for (run_id, fingerprint, at_ms) in [("k2", "f1", 1_200), ("k3", "f2", 1_499)] {
        let again = store
            .create_run_keyed(
                run_record(run_id, None, 1, 0, RunStatus::Running),
                key("k", fingerprint, at_ms),
            )
            .await
            .unwrap();
        assert_eq!(again, existing("k1", "f1"), "{run_id}");
        assert!(
            store.load_run(run_id).await.unwrap().is_none(),
            "{run_id} was created"
        );
    }
    // Another key is another run; a queued run is created queued.
    let other = store
        .create_run_keyed(
            run_record("o1", None, 0, 0, RunStatus::Queued),
            key("other", "f1", 1_200),
        )
        .await
        .unwrap();
    assert_eq!(other, KeyedCreation::Created);
    assert_eq!(
        store.load_run("o1").await.unwrap().map(|r| r.status),
        Some(RunStatus::Queued)
    );
    // Its retention over, the key starts a run again, and names it.
    let later = store
        .create_run_keyed(
            run_record("k4", None, 1, 0, RunStatus::Running),
            key("k", "f3", 1_500),
        )
        .await
        .unwrap();
    assert_eq!(later, KeyedCreation::Created);
    assert!(store.load_run("k4").await.unwrap().is_some());
    let after = store
        .create_run_keyed(
            run_record("k5", None, 1, 0, RunStatus::Running),
            key("k", "f3", 1_600),
        )
        .await
        .unwrap();
    assert_eq!(after, existing("k4", "f3"));
}

/// Executors creating different runs under one key at once, each on its
/// own handle, create exactly one: each of the others is answered that
/// run.
pub(super) async fn creations_racing_under_one_key_create_one_run(subject: Subject) {
    const CREATORS: usize = 6;
    let start = Arc::new(tokio::sync::Barrier::new(CREATORS));
    let mut creators = Vec::new();
    for i in 0..CREATORS {
        let (store, start) = (subject.another_handle().await, Arc::clone(&start));
        creators.push(tokio::spawn(async move {
            let run_id = format!("race-{i}");
            start.wait().await;
            let created = store
                .create_run_keyed(
                    run_record(&run_id, None, 1, 0, RunStatus::Running),
                    key("raced", "f", 1_000),
                )
                .await
                .unwrap();
            (run_id, created)
        }));
    }
    let mut winners = Vec::new();
    let mut answered = Vec::new();
    for creator in creators {
        match creator.await.unwrap() {
            (run_id, KeyedCreation::Created) => winners.push(run_id),
            (_, KeyedCreation::Existing { run_id, .. }) => answered.push(run_id),
        }
    }
    assert_eq!(winners.len(), 1, "one creation wins the key: {winners:?}");
    assert!(answered.iter().all(|r| *r == winners[0]), "{answered:?}");
    for i in 0..CREATORS {
        let run_id = format!("race-{i}");
        let stored = subject.store.load_run(&run_id).await.unwrap();
        assert_eq!(stored.is_some(), run_id == winners[0], "{run_id}");
    }
}
