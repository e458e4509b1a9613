//! Retention through real `leasehold serve` processes, on sled and on a
//! throwaway PostgreSQL: with `executor.retention` at one second, runs
//! posted and finished are deleted in the background — their `GET
//! /runs/ID` and event stream answer 404 saying why, the listing no longer
//! shows them, the store keeps none of their events — while a run paused
//! for a person before them, older than any of them, is kept whole;
//! `/metrics` counts every run deleted; and on sled the store's files stop
//! growing once retention holds.
//!
//! The model is written here: it answers at once, except for a task that
//! asks it to fail, whose run then pauses for a person (its restarts run
//! out).

mod support;

use std::path::Path;
use std::time::Duration;

use axum::routing::post;
use axum::{Json, Router};
use leasehold::store::{PostgresConfig, PostgresStore};
use leasehold::{EventLog, RunQuery, RunStore, SnapshotStore};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::PATIENCE;
use tokio::process::Child;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

/// The task the model fails.
const FAIL: &str = "fail, so that a person is asked";

/// Runs posted in each wave.
const WAVE: usize = 20;

/// Waves posted: sled writes its log in 512 KiB segments and reuses a
/// segment once what it holds was deleted, so its files grow for the
/// first waves (to about 2.5 MiB here) and then go up and down below that
/// peak.
const WAVES: usize = 20;

/// What the small files beside sled's segments may change by, in bytes.
const SMALL_FILES: u64 = 4096;

/// The last waves, which must not take sled's files past the peak of the
/// waves before them.
const FLAT: usize = 5;

async fn complete(Json(request): Json<Value>) -> axum::response::Response {
    use axum::response::IntoResponse;
    if request.to_string().contains(FAIL) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "failing on purpose").into_response();
    }
    Json(json!({
        "id": "chatcmpl-r", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "done"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }))
    .into_response()
}

/// The model's base URL.
async fn model() -> String {
    let app = Router::new().route("/v1/chat/completions", post(complete));
    let addr = support::serve_peer(app).await;
    format!("{addr}/v1")
}

/// `leasehold serve` from `command` (on a store) keeping finished runs
/// one second, restarting a failed call at once; its base URL.
async fn serve_retaining(command: support::Leasehold, model: &str) -> (Child, String) {
    let command = command
        .model(model, "m")
        .with_env("LEASEHOLD_EXECUTOR_RETENTION", "1s")
        .with_env("LEASEHOLD_RESTART_BACKOFF_INITIAL", "10ms")
        .with_env("LEASEHOLD_RESTART_BACKOFF_MAX", "20ms");
    support::serve(command, &[], PATIENCE).await
}

fn flow(task: &str) -> Value {
    json!({"name": "retention", "task": task, "max_steps": 2})
}

/// The status of `GET /runs/ID`, and its body.
async fn show(http: &reqwest::Client, base: &str, run_id: &str) -> (StatusCode, Value) {
    let response = http
        .get(format!("{base}/runs/{run_id}"))
        .send()
        .await
        .expect("GET /runs/ID");
    let status = response.status();
    (status, response.json().await.expect("JSON"))
}

/// Polls `GET /runs/ID` until it answers 404, within the patience; the
/// answer's body. A run seen before it is gone must have finished.
async fn until_deleted(http: &reqwest::Client, base: &str, run_id: &str) -> Value {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let (status, body) = show(http, base, run_id).await;
            if status == StatusCode::NOT_FOUND {
                return body;
            }
            assert_eq!(status, StatusCode::OK, "{body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("run {run_id} was not deleted within {PATIENCE:?}"))
}

/// Posts the paused run, then `WAVES` waves of runs that finish, each
/// wave awaited until every run of it is deleted; after each wave,
/// `measure` says how big the store is. Answers the paused run's id,
/// one deleted run's id, and the sizes.
async fn waves(base: &str, mut measure: impl AsyncFnMut() -> u64) -> (String, String, Vec<u64>) {
    let http = reqwest::Client::new();
    let paused = support::post_run(&http, base, &flow(FAIL)).await;
    support::view_until(&http, base, &paused, PATIENCE, "waiting_human", |v| {
        v["status"] == "waiting_human"
    })
    .await;
    let mut sizes = Vec::new();
    let mut deleted = String::new();
    for _ in 0..WAVES {
        let mut posted = Vec::new();
        for _ in 0..WAVE {
            posted.push(support::post_run(&http, base, &flow("say done")).await);
        }
        for run_id in &posted {
            let body = until_deleted(&http, base, run_id).await;
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains(run_id) && message.contains("executor.retention"),
                "{body}"
            );
        }
        deleted.clone_from(&posted[0]);
        sizes.push(measure().await);
    }
    // The paused run, older than every deleted one, is kept, still paused.
    let (status, view) = show(&http, base, &paused).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["status"], "waiting_human", "{view}");
    // A deleted run's events are gone too; the listing shows the paused
    // run alone.
    let events = http
        .get(format!("{base}/runs/{deleted}/events"))
        .send()
        .await
        .expect("GET /runs/ID/events");
    assert_eq!(events.status(), StatusCode::NOT_FOUND);
    let listed: Value = http
        .get(format!("{base}/runs"))
        .send()
        .await
        .expect("GET /runs")
        .json()
        .await
        .expect("JSON");
    let ids: Vec<&str> = listed["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|run| run["run_id"].as_str())
        .collect();
    assert_eq!(ids, [paused.as_str()], "{listed}");
    // `/metrics` counts every run deleted.
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("text");
    let purged: u64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("leasehold_runs_purged_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("leasehold_runs_purged_total in {metrics}"));
    assert_eq!(
        purged,
        u64::try_from(WAVE * WAVES).expect("fits"),
        "{metrics}"
    );
    (paused, deleted, sizes)
}

/// The bytes of every file under `dir`.
fn size_of(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("the data directory") {
        let entry = entry.expect("an entry");
        let meta = entry.metadata().expect("metadata");
        total += if meta.is_dir() {
            size_of(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_runs_are_deleted_past_the_retention_on_sled_and_a_paused_run_is_kept() {
    let data = tempfile::tempdir().expect("a data directory");
    let dir = data.path().join("runs");
    let model = model().await;
    let (mut server, base) = serve_retaining(support::leasehold(&dir), &model).await;
    let (_, _, sizes) = waves(&base, async || size_of(&dir)).await;
    server.kill().await.expect("killed");
    // Each wave writes as much as the one before and deletes it: once
    // retention holds, the files stop growing. sled grows its file a
    // segment at a time and reuses what it reclaimed, so the size goes up
    // and down within a bound: the last waves never take the files past
    // the peak they had reached before them — give or take a few bytes of
    // the small files beside its segments (4 KiB, or a tenth of a wave: a
    // store that kept any share of what it deletes grows by more over five
    // waves).
    let wave = sizes[1].saturating_sub(sizes[0]);
    let peak_before = sizes[..WAVES - FLAT].iter().copied().max().unwrap_or(0);
    let peak_last = sizes[WAVES - FLAT..].iter().copied().max().unwrap_or(0);
    assert!(
        peak_last <= peak_before + (wave / 10).max(SMALL_FILES),
        "the store grew past its peak of {peak_before} bytes to {peak_last} over the last \
         {FLAT} waves, a wave writing about {wave}: {sizes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_runs_are_deleted_past_the_retention_on_postgres_and_a_paused_run_is_kept() {
    let (_cluster, url) = postgres::database().await;
    let model = model().await;
    let (mut server, base) = serve_retaining(support::leasehold_on_store(&url), &model).await;
    let store = PostgresStore::connect(PostgresConfig::new(&url))
        .await
        .expect("the store");
    let (paused, deleted, _) = waves(&base, async || 0).await;
    server.kill().await.expect("killed");
    // The store itself keeps nothing of a deleted run, and all of the
    // paused one.
    assert!(
        store
            .load_events(&deleted, 0)
            .await
            .expect("events")
            .is_empty()
    );
    assert!(
        store
            .load_snapshots(&deleted)
            .await
            .expect("snapshots")
            .is_empty()
    );
    assert!(
        !store
            .load_events(&paused, 0)
            .await
            .expect("events")
            .is_empty()
    );
    let page = store
        .list_runs_page(&RunQuery::first(10))
        .await
        .expect("a page");
    assert_eq!(page.runs.len(), 1);
}
