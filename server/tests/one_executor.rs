//! A server is the HTTP face of one executor: every run live in its
//! process — posted over the API, started by the embedder through the
//! executor, or started on the engine directly — takes the API's controls,
//! and the executor's registry is the only one.

mod support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::testing::{ScriptedModel, Turn};
use leasehold::{Flow, RunOptions, RunStatus};
use leasehold_server::{App, ServerOptions};
use serde_json::json;
use support::{PATIENCE, Served};

fn flow() -> Flow {
    serde_json::from_value(json!({"name": "n", "task": "wait", "max_steps": 2})).expect("flow")
}

/// An app whose every run hangs in its model call, served until dropped.
async fn served() -> (Arc<App>, Served) {
    let model = ScriptedModel::new().script("run", [Turn::hang(), Turn::hang()]);
    let engine = support::scripted_engine(model).await;
    let app = support::app(engine, ServerOptions::default());
    let served = Served::start(Arc::clone(&app)).await;
    (app, served)
}

async fn cancel(base: &str, run_id: &str) -> (u16, serde_json::Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}/runs/{run_id}/cancel"))
        .json(&json!({"reason": "enough"}))
        .send()
        .await
        .expect("POST cancel");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_the_embedder_started_take_the_apis_controls_however_they_were_started() {
    let (app, served) = served().await;
    let base = &served.base;
    // Through the executor, as an embedder should…
    let mut through = app
        .executor()
        .start(flow(), RunOptions::default())
        .await
        .expect("started");
    // …and on the engine directly, as one did before there was an executor.
    let mut direct = app.engine().start(flow()).await.expect("started");
    for handle in [&mut through, &mut direct] {
        let run_id = handle.run_id().to_owned();
        let (status, body) = cancel(base, &run_id).await;
        assert_eq!(status, 200, "{run_id}: {body}");
        assert_eq!(body["status"], "cancelled", "{body}");
        let state = tokio::time::timeout(PATIENCE, handle.wait())
            .await
            .expect("the run ends");
        assert_eq!(state.status, RunStatus::Cancelled);
    }
    // Both were the executor's to hold, and it let go of them as they ended.
    let executor = Arc::clone(app.executor());
    tokio::time::timeout(PATIENCE, async move {
        while executor.held_runs() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("no run is held once both ended");
}
