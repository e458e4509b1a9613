//! The webhooks' deliverer on its own, on the in-memory store: without
//! receivers it empties the outbox, since nobody is to be told.

use std::sync::Arc;
use std::time::Duration;

use leasehold::webhooks::deliver::{Deliverer, DeliveryConfig};
use leasehold::webhooks::payload::Links;
use leasehold::{
    ClaimOutcome, MemoryStore, RunRecord, RunStatus, RunStore, RunUpdate, SystemClock,
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
