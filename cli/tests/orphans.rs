//! A `leasehold serve` killed with SIGKILL mid-run and started again on its
//! data directory picks the run up at once, ten minutes before the dead
//! process's run lease would end: sled is opened by one process at a time,
//! so the run's holder, not being this process, is dead. Its boot marks the
//! run orphaned, claims it (the fence goes up), resumes it where it was — no worker
//! spawned twice, no step done twice — and adopts it, so the API controls
//! it like a run it started.
//!
//! The model and the tool server are the embedded demo's: the run spawns
//! three workers, one of which escalates and pauses the run for a person;
//! the test answers over the API and the run completes.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use futures_util::StreamExt;
use leasehold::{
    Event, EventKind, RunStatus,
    store::{SledConfig, SledStore},
};
use leasehold::{EventLog, RunStore};
use leasehold_cli::demo::DemoStack;
use support::PATIENCE;
use tokio::process::Child;

/// The API token (a posted flow may name its tool server only with one).
const TOKEN: &str = "orphans-test-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_and_restarted_on_its_data_directory_resumes_its_run_at_once() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let http = support::authorized(TOKEN);

    // On the data directory, resuming orphaned runs, with a run lease far
    // longer than the test.
    let serving = || {
        support::leasehold(&data)
            .demo_model(&stack)
            .api_token(TOKEN)
            .with_env("LEASEHOLD_RUN_LEASE_TTL", "10m")
            .with_env("LEASEHOLD_RESUME_ON_BOOT", "true")
    };
    let (mut first, base) = support::serve(serving(), &["--allow-flow-tools"], PATIENCE).await;
    let run_id = support::post_run(&http, &base, &stack.flow()).await;
    let first_owner = support::view_until(&http, &base, &run_id, PATIENCE, "seen", |_| true).await
        ["owner_id"]
        .as_str()
        .expect("an owner")
        .to_owned();

    // Mid-run: once the root has spawned its three workers.
    let mut stream = http
        .get(format!("{base}/runs/{run_id}/events"))
        .send()
        .await
        .expect("GET the event stream")
        .bytes_stream();
    let mut received = String::new();
    tokio::time::timeout(PATIENCE, async {
        while received.matches("\"kind\":\"worker_spawned\"").count() < 3 {
            let chunk = stream
                .next()
                .await
                .expect("the stream stays open")
                .expect("a chunk");
            received.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .expect("the root spawns its workers");
    assert!(!received.contains("\"kind\":\"paused\""), "killed mid-run");
    first.start_kill().expect("SIGKILL");
    first.wait().await.expect("reaped");

    // Orphaned and claimed as the next server boots, and adopted: within
    // the test's patience, long before the ten-minute lease would end.
    let (mut second, base) = support::serve(serving(), &["--allow-flow-tools"], PATIENCE).await;
    let view = support::view_until(
        &http,
        &base,
        &run_id,
        PATIENCE,
        "claimed and adopted",
        |v| v["fence"] == 2 && v["live"] == true,
    )
    .await;
    let second_owner = view["owner_id"].as_str().expect("an owner").to_owned();
    assert_ne!(
        second_owner, first_owner,
        "owner ids are unique per process"
    );

    // It goes on to the escalation, which a person answers over the API.
    support::view_until(&http, &base, &run_id, PATIENCE, "paused", |v| {
        v["status"] == "waiting_human"
    })
    .await;
    let resumed = http
        .post(format!("{base}/runs/{run_id}/resume"))
        .json(&serde_json::json!({"guidance": "Do not roll back; page the owner."}))
        .send()
        .await
        .expect("POST resume");
    assert!(resumed.status().is_success(), "{}", resumed.status());
    let view = support::view_until(&http, &base, &run_id, PATIENCE, "completed", |v| {
        v["status"] == "completed" || v["status"] == "failed" || v["status"] == "cancelled"
    })
    .await;
    assert_eq!(view["status"], "completed", "{view}");

    leasehold_stop(&mut second).await;
    let store = SledStore::open(SledConfig::new(&data)).expect("the store opens");
    let record = store
        .load_run(&run_id)
        .await
        .expect("load")
        .expect("the run");
    assert_eq!((record.status, record.fence), (RunStatus::Completed, 2));
    let events = store.load_events(&run_id, 0).await.expect("events");
    assert_no_step_repeated(&events);
    let claims: Vec<(String, u64)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RunResumed {
                owner_id, fence, ..
            } => Some((owner_id.clone(), *fence)),
            _ => None,
        })
        .collect();
    assert_eq!(claims, [(second_owner, 2)]);
    stack.shutdown().await;
}

/// The three workers keep their paths across both processes (a worker
/// spawned again would get a new number), and no step the first process
/// went past is started again: the second process starts each loop at the
/// step that was in flight at the kill, or later. (The second owner's events
/// are numbered from 2³², its fence being 2.)
fn assert_no_step_repeated(events: &[Event]) {
    let second_owner = 1_u64 << 32;
    let mut workers: BTreeSet<String> = BTreeSet::new();
    let mut first: BTreeMap<String, u32> = BTreeMap::new();
    let mut again: Vec<(String, u32)> = Vec::new();
    let mut seen: BTreeSet<(u64, String, u32)> = BTreeSet::new();
    for event in events {
        match &event.kind {
            EventKind::WorkerSpawned { .. } => {
                workers.insert(event.path.to_string());
            }
            EventKind::StepStarted { step, .. } => {
                let owner = event.seq / second_owner;
                assert!(
                    seen.insert((owner, event.path.to_string(), *step)),
                    "{} started step {step} twice in one process",
                    event.path
                );
                if owner == 0 {
                    let last = first.entry(event.path.to_string()).or_default();
                    *last = (*last).max(*step);
                } else {
                    again.push((event.path.to_string(), *step));
                }
            }
            _ => {}
        }
    }
    assert_eq!(workers.len(), 3, "a worker spawned again: {workers:?}");
    assert!(!again.is_empty(), "the second process ran steps");
    for (path, step) in again {
        let last = first.get(&path).copied().unwrap_or(0);
        assert!(
            step >= last,
            "{path} started step {step} again after the first process had reached step {last}"
        );
    }
}

/// SIGTERM, and the exit that follows.
async fn leasehold_stop(server: &mut Child) {
    support::signal(server, "-TERM");
    let exit = tokio::time::timeout(PATIENCE, server.wait())
        .await
        .expect("serve exits after SIGTERM")
        .expect("wait");
    assert_eq!(exit.code(), Some(143));
}
