//! The webhooks' deliverer on its own, on the in-memory store: without
//! receivers it empties the outbox, since nobody is to be told.

use std::sync::Arc;
use std::time::Duration;

use leasehold::webhooks::deliver::{Deliverer, DeliveryConfig};
use leasehold::webhooks::payload::Links;
use leasehold::{
    ClaimOutcome, Event, EventKind, EventLog, MemoryStore, RunRecord, RunStatus, RunStore,
    RunUpdate, SystemClock,
};

fn record(run_id: &str) -> RunRecord {
    RunRecord {
        run_id: run_id.to_owned(),
        flow: serde_json::json!({"name": "f"}),
        status: RunStatus::Running,
        owner_id: None,
        fence: 0,
        lease_expires_at_ms: 0,
        reason: None,
        answer: None,
        pause: None,
        created_at_ms: 1,
        updated_at_ms: 1,
        fork: None,
        trace_parent: None,
    }
}

fn no_receivers() -> DeliveryConfig {
    DeliveryConfig {
        receivers: Vec::new(),
        links: Links::new("http://127.0.0.1:7878", false),
        timeout: Duration::from_secs(1),
        retry_first: Duration::from_millis(100),
        retry_max: Duration::from_secs(1),
        give_up_after: Duration::from_secs(60),
    }
}

fn ended() -> RunUpdate {
    RunUpdate {
        status: RunStatus::Failed,
        reason: Some("no".to_owned()),
        answer: None,
        pause: None,
        at_ms: 2,
    }
}

/// A run's events make no notice, so they wake no take of the outbox: a
/// run that logs 500 events and then ends costs the store one take for
/// its end (besides the first look, the poll's first tick, which comes at
/// once, and one a [`POLL`] of time passed), not one per event.
///
/// [`POLL`]: leasehold::webhooks::deliver::POLL
#[tokio::test(start_paused = true)]
async fn a_runs_events_wake_no_take_of_the_outbox_and_its_end_does() {
    let store = MemoryStore::new();
    store.create_run(record("r")).await.unwrap();
    let ClaimOutcome::Claimed(run) = store.claim_run("r", "e", 1, 60_000).await.unwrap() else {
        panic!("claimed");
    };
    let entries = store.entries();
    let began = tokio::time::Instant::now();
    let deliverer = Deliverer::start(
        Arc::new(store.clone()),
        no_receivers(),
        Arc::new(SystemClock),
    )
    .expect("starts");
    while store.notice_takes() == 0 {
        tokio::task::yield_now().await;
    }
    for n in 1..=500_u64 {
        let event = Event {
            seq: n,
            position: n,
            at: n,
            run_id: "r".to_owned(),
            path: "run".to_owned(),
            kind: EventKind::StepStarted {
                step: 1,
                limit: 2,
                nudges: 0,
            },
        };
        let appended = store.append_events("r", vec![event], run.fence).await;
        assert!(appended.unwrap().is_applied());
        tokio::task::yield_now().await;
    }
    assert!(
        store
            .update_run("r", run.fence, ended())
            .await
            .unwrap()
            .is_applied()
    );
    while store.entries() > entries + 500 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let polls = began.elapsed().as_secs();
    assert!(
        store.notice_takes() <= 3 + polls,
        "{} takes of the outbox for 500 events and an end, in {polls} polls",
        store.notice_takes()
    );
    deliverer.stop().await;
}

/// Only a kept notice wakes a take of the outbox, not the other changes
/// of runs' records: 200 runs created and claimed (400 changes, no notice)
/// and then one ended cost the store one take for the end (besides the
/// first look, the poll's first tick, which comes at once, and one a
/// [`POLL`] of time passed), not one per change.
///
/// [`POLL`]: leasehold::webhooks::deliver::POLL
#[tokio::test(start_paused = true)]
async fn only_a_kept_notice_wakes_a_take_of_the_outbox() {
    let store = MemoryStore::new();
    let began = tokio::time::Instant::now();
    let deliverer = Deliverer::start(
        Arc::new(store.clone()),
        no_receivers(),
        Arc::new(SystemClock),
    )
    .expect("starts");
    while store.notice_takes() == 0 {
        tokio::task::yield_now().await;
    }
    let mut fences = Vec::new();
    for n in 0..200 {
        let run_id = format!("r{n}");
        store.create_run(record(&run_id)).await.unwrap();
        tokio::task::yield_now().await;
        let claimed = store.claim_run(&run_id, "e", 1, 60_000).await.unwrap();
        let ClaimOutcome::Claimed(run) = claimed else {
            panic!("claimed");
        };
        fences.push(run.fence);
        tokio::task::yield_now().await;
    }
    let entries = store.entries();
    assert!(
        store
            .update_run("r0", fences[0], ended())
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(store.entries(), entries + 1, "the end's notice is kept");
    while store.entries() > entries {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let polls = began.elapsed().as_secs();
    assert!(
        store.notice_takes() <= 3 + polls,
        "{} takes of the outbox for 400 changes of records and an end, in {polls} polls",
        store.notice_takes()
    );
    deliverer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_receivers_the_outbox_is_emptied() {
    let store = MemoryStore::new();
    store.create_run(record("r")).await.unwrap();
    let ClaimOutcome::Claimed(run) = store.claim_run("r", "e", 1, 60_000).await.unwrap() else {
        panic!("claimed");
    };
    let entries = store.entries();
    let ended = RunUpdate {
        status: RunStatus::Failed,
        reason: Some("no".to_owned()),
        answer: None,
        pause: None,
        at_ms: 2,
    };
    assert!(
        store
            .update_run("r", run.fence, ended)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(store.entries(), entries + 1, "the end's notice is kept");

    let config = DeliveryConfig {
        receivers: Vec::new(),
        links: Links::new("http://127.0.0.1:7878", false),
        timeout: Duration::from_secs(1),
        retry_first: Duration::from_millis(100),
        retry_max: Duration::from_secs(1),
        give_up_after: Duration::from_secs(60),
    };
    let deliverer =
        Deliverer::start(Arc::new(store.clone()), config, Arc::new(SystemClock)).expect("starts");
    tokio::time::timeout(Duration::from_secs(30), async {
        while store.entries() > entries {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the notice is settled");
    assert_eq!(deliverer.counts().delivered(), 0);
    deliverer.stop().await;
}
