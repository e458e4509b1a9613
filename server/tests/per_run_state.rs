//! Nothing a serving executor keeps per run outlives the run: once the
//! runs posted to a server have ended (completed, cancelled) and their
//! event streams were read to the end, the server holds no handle of
//! them, follows none of them for a stream, and the engine's bus holds no
//! position of them. A map that kept one entry per run ever served would
//! grow an executor's memory for as long as it serves.

mod support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::testing::{ScriptedModel, Turn};
use leasehold_server::ServerOptions;
use serde_json::{Value, json};
use support::{PATIENCE, Served};

/// Runs that complete.
const RUNS: usize = 20;

/// Polls `probe` until it holds, within the patience.
async fn until(what: &str, probe: impl Fn() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !probe() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} within {PATIENCE:?}"));
}

async fn post(http: &reqwest::Client, url: String, body: &Value) -> Value {
    http.post(url)
        .json(body)
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("JSON")
}

/// Reads the run's event stream to its `end` frame.
async fn read_to_the_end(http: &reqwest::Client, base: &str, run_id: &str) {
    let response = http
        .get(format!("{base}/runs/{run_id}/events"))
        .send()
        .await
        .expect("GET /runs/ID/events");
    assert_eq!(response.status(), 200);
    let body = tokio::time::timeout(PATIENCE, response.text())
        .await
        .expect("the stream ends with its run")
        .expect("a body");
    assert!(body.contains("event: end"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_keeps_nothing_per_run_once_its_runs_have_ended() {
    // The runs started first answer at once; the last one hangs until it
    // is cancelled.
    let turns = (0..RUNS)
        .map(|_| Turn::answer("done"))
        .chain([Turn::hang()]);
    let model = ScriptedModel::new().script("run", turns);
    let engine = support::scripted_engine(model).await;
    let app = support::app(engine, ServerOptions::default());
    let served = Served::start(Arc::clone(&app)).await;
    let base = served.base.clone();
    let http = reqwest::Client::new();
    let flow = json!({"name": "n", "task": "say done", "max_steps": 2});

    for _ in 0..RUNS {
        let created = post(&http, format!("{base}/runs"), &flow).await;
        let run_id = created["run_id"].as_str().expect("an id").to_owned();
        read_to_the_end(&http, &base, &run_id).await;
    }
    let created = post(&http, format!("{base}/runs"), &flow).await;
    let hanging = created["run_id"].as_str().expect("an id").to_owned();
    until("the last run is held", || app.executor().held_runs() == 1).await;
    let stream = {
        let http = http.clone();
        let base = base.clone();
        let hanging = hanging.clone();
        tokio::spawn(async move { read_to_the_end(&http, &base, &hanging).await })
    };
    until("its stream is followed", || app.watched_runs() == 1).await;
    let cancelled = post(
        &http,
        format!("{base}/runs/{hanging}/cancel"),
        &json!({"reason": "enough"}),
    )
    .await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    stream.await.expect("the stream was read to its end");

    until("no run handle is held", || app.executor().held_runs() == 0).await;
    until("no run is followed", || app.watched_runs() == 0).await;
    let bus = app.engine().events();
    until("the bus holds no run's position", || {
        bus.runs_tracked() == 0
    })
    .await;
    assert_eq!(app.executor().live_runs(), 0);
    drop(served);
}
