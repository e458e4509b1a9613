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
        tenant: None,
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

/// Run `run_id` created in `store` and claimed: its fence.
async fn claimed_run(store: &MemoryStore, run_id: &str) -> u64 {
    store.create_run(record(run_id)).await.unwrap();
    let ClaimOutcome::Claimed(run) = store.claim_run(run_id, "e", 1, 60_000).await.unwrap() else {
        panic!("claimed");
    };
    run.fence
}

/// A deliverer without receivers on `store`, once it has looked at the
/// outbox a first time, and when it started.
async fn looking(store: &MemoryStore) -> (Deliverer, tokio::time::Instant) {
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
    (deliverer, began)
}

/// Waits until the store holds `entries` again (the end's notice settled),
/// then checks that the outbox was taken from at most once for the end,
/// besides the first look, the poll's first tick (which comes at once)
/// and one a [`POLL`] of time passed.
///
/// [`POLL`]: leasehold::webhooks::deliver::POLL
async fn taken_once_for_the_end(
    store: &MemoryStore,
    entries: usize,
    began: tokio::time::Instant,
    what: &str,
) {
    while store.entries() > entries {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let polls = began.elapsed().as_secs();
    assert!(
        store.notice_takes() <= 3 + polls,
        "{} takes of the outbox for {what}, in {polls} polls",
        store.notice_takes()
    );
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
    let fence = claimed_run(&store, "r").await;
    let entries = store.entries();
    let (deliverer, began) = looking(&store).await;
    for n in 1..=500_u64 {
        let event = Event {
            seq: n,
            position: n,
            at: n,
            run_id: "r".into(),
            path: "run".into(),
            kind: EventKind::StepStarted {
                step: 1,
                limit: 2,
                nudges: 0,
            },
        };
        let appended = store
            .append_events("r", vec![std::sync::Arc::new(event)], fence)
            .await;
        assert!(appended.unwrap().is_applied());
        tokio::task::yield_now().await;
    }
    let ended_run = store.update_run("r", fence, ended()).await;
    assert!(ended_run.unwrap().is_applied());
    taken_once_for_the_end(&store, entries + 500, began, "500 events and an end").await;
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
    let (deliverer, began) = looking(&store).await;
    let mut fences = Vec::new();
    for n in 0..200 {
        fences.push(claimed_run(&store, &format!("r{n}")).await);
        tokio::task::yield_now().await;
    }
    let entries = store.entries();
    let ended_run = store.update_run("r0", fences[0], ended()).await;
    assert!(ended_run.unwrap().is_applied());
    assert_eq!(store.entries(), entries + 1, "the end's notice is kept");
    taken_once_for_the_end(&store, entries, began, "400 changes of records and an end").await;
    deliverer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_receivers_the_outbox_is_emptied() {
    let store = MemoryStore::new();
    let fence = claimed_run(&store, "r").await;
    let entries = store.entries();
    let ended_run = store.update_run("r", fence, ended()).await;
    assert!(ended_run.unwrap().is_applied());
    assert_eq!(store.entries(), entries + 1, "the end's notice is kept");

    let deliverer = Deliverer::start(
        Arc::new(store.clone()),
        no_receivers(),
        Arc::new(SystemClock),
    )
    .expect("starts");
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
