//! Two `leasehold serve` processes on one throwaway PostgreSQL share the
//! runs posted to one of them: each run is queued and claimed by exactly
//! one executor, each within its limit of two live runs; one executor is
//! SIGKILLed with runs in flight and the other finishes them all (its sweep
//! marks them orphaned, its claimer resumes them within its limit).
//!
//! The model is a gate ([`support::gate`]): it holds every chat completion
//! until the test opens it, so the test sees both executors full — two runs each
//! in flight, the rest queued — before anything ends, without timing.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::store::{PostgresConfig, PostgresStore};
use leasehold::{EventKind, EventLog, RunQuery, RunRecord, RunStatus, RunStore};
use serde_json::json;
use support::PATIENCE;
use support::gate::gated_model;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

/// Runs posted.
const RUNS: usize = 10;

/// Each executor's limit of live runs.
const LIMIT: usize = 2;

/// The API token (with it, `/health` says who the executor is).
const TOKEN: &str = "queue-test-token";

/// Every run, by id.
async fn runs(store: &PostgresStore) -> BTreeMap<String, RunRecord> {
    let page = store
        .list_runs_page(&RunQuery::first(100))
        .await
        .expect("a page");
    page.runs
        .into_iter()
        .map(|r| (r.run_id.clone(), r))
        .collect()
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("ms fit")
}

/// The most runs `owner` held at once, from each run's events: a run is
/// held by an executor from its `run_started` (the first owner) or its
/// `run_resumed` (the owner it names) until its next `run_resumed`, its
/// end, or `killed_at_ms` for the executor killed.
async fn most_held_at_once(
    store: &PostgresStore,
    records: &BTreeMap<String, RunRecord>,
    owner: &str,
    killed: (&str, u64),
) -> usize {
    let mut edges = Vec::new();
    for run_id in records.keys() {
        let events = store.load_events(run_id, 0).await.expect("events");
        // (owner, from) of each stretch, and when the run ended.
        let mut stretches: Vec<(Option<String>, u64)> = Vec::new();
        let mut ended = None;
        for event in &events {
            match &event.kind {
                EventKind::RunStarted { .. } => stretches.push((None, event.at)),
                EventKind::RunResumed { owner_id, .. } => {
                    stretches.push((Some(owner_id.clone()), event.at));
                }
                EventKind::RunCompleted { .. } => ended = Some(event.at),
                _ => {}
            }
        }
        let resumers: Vec<String> = stretches.iter().filter_map(|(o, _)| o.clone()).collect();
        for (i, (who, from)) in stretches.iter().enumerate() {
            // A run started and never resumed was started by its owner;
            // one resumed was started by the executor killed.
            let who = who.clone().unwrap_or_else(|| {
                if resumers.is_empty() {
                    records[run_id].owner_id.clone().expect("an owner")
                } else {
                    killed.0.to_owned()
                }
            });
            let until = match stretches.get(i + 1) {
                Some((_, next)) if who == killed.0 => killed.1.min(*next),
                Some((_, next)) => *next,
                None => ended.expect("the run completed"),
            };
            if who == owner {
                // An end sorts before a start at the same instant: a run
                // is claimed into the room another left.
                edges.push((*from, 1_i32));
                edges.push((until, -1_i32));
            }
        }
    }
    edges.sort_by_key(|(at, delta)| (*at, *delta));
    let (mut held, mut most) = (0_i32, 0_i32);
    for (_, delta) in edges {
        held += delta;
        most = most.max(held);
    }
    usize::try_from(most).expect("not negative")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_executors_share_posted_runs_within_their_limits_and_one_finishes_the_runs_of_the_other_killed()
 {
    let (cluster, url) = postgres::database().await;
    let store = PostgresStore::connect(PostgresConfig::new(&url))
        .await
        .expect("the store");
    let (model, gate) = gated_model().await;
    // Two executors on the store, on the gate, within their limit, claiming
    // often and resuming the runs of one that dies after a short run lease.
    let serving = || {
        let command = support::leasehold_on_store(&url)
            .model(&model, "gate")
            .api_token(TOKEN)
            .with_env("LEASEHOLD_SERVER_MAX_LIVE_RUNS", LIMIT.to_string())
            .with_env("LEASEHOLD_EXECUTOR_CLAIM_INTERVAL", "100ms")
            .with_env("LEASEHOLD_RUN_LEASE_TTL", "2s")
            .with_env("LEASEHOLD_RESUME_ON_BOOT", "true");
        support::start_serve(command, "127.0.0.1:0", &[])
    };
    let mut a = serving();
    let mut b = serving();
    let base_a = support::served_base(&mut a, PATIENCE).await;
    let _base_b = support::served_base(&mut b, PATIENCE).await;

    let http = support::authorized(TOKEN);
    let flow = json!({"name": "gated", "task": "Answer.", "max_steps": 1, "stream": false});
    let mut posted = Vec::new();
    for _ in 0..RUNS {
        posted.push(support::posted(&http, &base_a, &flow).await);
    }
    let statuses: Vec<&str> = posted
        .iter()
        .map(|a| a["status"].as_str().expect("a status"))
        .collect();
    // A starts as many as it has room for and queues the rest (B may claim
    // one between A's queuing it and A's claiming it: it runs then too).
    assert!(
        statuses.iter().filter(|s| **s == "running").count() >= LIMIT,
        "{statuses:?}"
    );
    assert!(statuses.iter().all(|s| *s == "running" || *s == "queued"));

    // Both executors full: every run they hold waits on the model.
    let mut received = gate.received.subscribe();
    tokio::time::timeout(PATIENCE, received.wait_for(|n| *n >= 2 * LIMIT))
        .await
        .expect("both executors claim up to their limit")
        .expect("the gate lives");
    let full = runs(&store).await;
    let mut by_owner: BTreeMap<String, usize> = BTreeMap::new();
    for record in full.values().filter(|r| r.status == RunStatus::Running) {
        *by_owner
            .entry(record.owner_id.clone().expect("an owner"))
            .or_default() += 1;
    }
    assert_eq!(
        by_owner.values().copied().collect::<Vec<_>>(),
        [LIMIT, LIMIT],
        "each executor runs as many as its limit: {by_owner:?}"
    );
    let queued = full
        .values()
        .filter(|r| r.status == RunStatus::Queued)
        .count();
    assert_eq!(queued, RUNS - 2 * LIMIT);
    assert!(
        full.values()
            .all(|r| r.status != RunStatus::Queued || r.owner_id.is_none()),
        "a queued run is unowned"
    );
    let owner_a = support::owner_id(&http, &base_a).await;
    assert!(by_owner.contains_key(&owner_a), "A runs some: {by_owner:?}");
    let owner_b = by_owner
        .keys()
        .find(|o| **o != owner_a)
        .expect("B runs some")
        .clone();
    let held_by_b: Vec<String> = full
        .values()
        .filter(|r| r.owner_id.as_deref() == Some(owner_b.as_str()))
        .map(|r| r.run_id.clone())
        .collect();

    // B dies with its runs in flight; then the model answers.
    b.start_kill().expect("SIGKILL");
    b.wait().await.expect("reaped");
    let killed_at = now_ms();
    gate.open.send_replace(true);

    let done = tokio::time::timeout(PATIENCE, async {
        loop {
            let all = runs(&store).await;
            if all.values().all(|r| r.status.is_terminal()) {
                return all;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("every run ends");
    assert_eq!(done.len(), RUNS);
    for record in done.values() {
        assert_eq!(
            record.status,
            RunStatus::Completed,
            "{}: {:?}",
            record.run_id,
            record.reason
        );
        assert_eq!(record.answer.as_deref(), Some("done"));
    }
    // B's runs were finished by A, resumed after B's lease expired.
    for run_id in &held_by_b {
        let record = &done[run_id];
        assert_eq!(record.owner_id.as_deref(), Some(owner_a.as_str()));
        assert_eq!(record.fence, 2, "{run_id} claimed once more");
    }
    let killed = (owner_b.as_str(), killed_at);
    for owner in [&owner_a, &owner_b] {
        let most = most_held_at_once(&store, &done, owner, killed).await;
        assert!(
            most <= LIMIT,
            "{owner} held {most} runs at once, past its limit of {LIMIT}"
        );
    }
    // A's view of the runs says the same.
    let view = support::get_run(&http, &base_a, &held_by_b[0]).await;
    assert_eq!(view["status"], "completed", "{view}");
    a.start_kill().expect("SIGKILL");
    a.wait().await.expect("reaped");
    drop(cluster);
}
