//! An idempotency key through the engine: a start retried under its key
//! starts nothing and names the run, queued or started, and a key reused
//! for another flow is told apart.

use std::sync::Arc;

use leasehold_actors::testing::{MemoryStore, ScriptedModel, Turn};
use leasehold_actors::{Engine, EngineError, Flow, RunOptions, RunQuery, RunStatus, RunStore};
use serde_json::json;

fn flow(task: &str) -> Flow {
    serde_json::from_value(json!({"name": "keyed", "task": task, "max_steps": 3}))
        .expect("valid flow")
}

#[tokio::test(start_paused = true)]
async fn a_start_retried_under_its_key_starts_nothing_and_names_the_run() {
    let model = ScriptedModel::new().script("run", [Turn::answer("done")]);
    let store = MemoryStore::new();
    let engine = Engine::builder()
        .model(Arc::new(model.clone()))
        .store(Arc::new(store.clone()))
        .build()
        .await
        .expect("engine");
    let keyed = || RunOptions::default().with_idempotency_key("deploy-42");
    let mut first = engine
        .start_with(flow("Look."), keyed())
        .await
        .expect("started");
    assert_eq!(first.wait().await.status, RunStatus::Completed);

    let again = engine
        .start_with(flow("Look."), keyed())
        .await
        .expect_err("a retry starts nothing");
    assert!(
        matches!(&again, EngineError::AlreadyStarted { run_id, same_flow: true, .. } if run_id == first.run_id()),
        "{again}"
    );
    let queued = engine
        .queue_with(flow("Look."), keyed())
        .await
        .expect_err("queued, the same");
    assert!(
        matches!(queued, EngineError::AlreadyStarted { .. }),
        "{queued}"
    );
    let reused = engine
        .start_with(flow("Something else."), keyed())
        .await
        .expect_err("a key reused for another flow");
    assert!(
        matches!(
            &reused,
            EngineError::AlreadyStarted {
                same_flow: false,
                ..
            }
        ),
        "{reused}"
    );
    assert!(reused.to_string().contains("with another flow"), "{reused}");
    // Without a key, or with another, a run is a run.
    engine
        .start_with(
            flow("Look."),
            RunOptions::default().with_idempotency_key("deploy-43"),
        )
        .await
        .expect("another key")
        .wait()
        .await;
    let page = store
        .list_runs_page(&RunQuery::first(10))
        .await
        .expect("runs");
    assert_eq!(page.runs.len(), 2);
    assert_eq!(model.requests_of("run").len(), 2);
}
