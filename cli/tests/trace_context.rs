//! A platform's trace continues into leasehold: a real `leasehold serve`
//! takes the W3C `traceparent` of `POST /runs`, keeps it with the run, says
//! the run's trace in `GET /runs/{id}`, and sends the caller's trace to
//! the model server (written here, over real HTTP); a header that is not a
//! traceparent is refused naming it, and nothing is stored.

mod support;

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::PATIENCE;

/// The platform's trace context.
const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

type Seen = Arc<Mutex<Vec<Option<String>>>>;

async fn complete(State(seen): State<Seen>, headers: HeaderMap) -> Json<Value> {
    let traceparent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    seen.lock().unwrap().push(traceparent);
    Json(json!({
        "id": "chatcmpl-t", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "done"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }))
}

/// The model's base URL, and the `traceparent` of each request it got.
async fn model() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(complete))
        .with_state(Arc::clone(&seen));
    let addr = support::serve_peer(app).await;
    (format!("{addr}/v1"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_posted_with_a_traceparent_is_in_the_callers_trace_down_to_the_model_server() {
    let dir = tempfile::tempdir().expect("a directory");
    let (model, seen) = model().await;
    let command = support::leasehold(dir.path()).model(&model, "m");
    let (_server, base) = support::serve(command, &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let flow = json!({"name": "traced", "task": "Answer.", "max_steps": 2, "stream": false});

    // Not a traceparent: refused naming the header, nothing stored.
    let refused = http
        .post(format!("{base}/runs"))
        .header("traceparent", "00-not-a-trace-01")
        .json(&flow)
        .send()
        .await
        .expect("POST /runs");
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let said: Value = refused.json().await.expect("JSON");
    assert_eq!(said["error"]["code"], "bad_traceparent", "{said}");
    let listed: Value = http
        .get(format!("{base}/runs"))
        .send()
        .await
        .expect("GET /runs")
        .json()
        .await
        .expect("JSON");
    assert_eq!(listed["runs"], json!([]), "{listed}");

    let posted: Value = http
        .post(format!("{base}/runs"))
        .header("traceparent", CALLER)
        .json(&flow)
        .send()
        .await
        .expect("POST /runs")
        .json()
        .await
        .expect("JSON");
    let run_id = posted["run_id"].as_str().expect("a run id").to_owned();
    let view = support::view_until(&http, &base, &run_id, PATIENCE, "completed", |v| {
        v["status"] == "completed"
    })
    .await;
    let caller = leasehold::TraceParent::parse(CALLER).expect("valid");
    assert_eq!(view["trace_id"], caller.trace_id.as_str(), "{view}");

    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for header in &seen {
        let sent = leasehold::TraceParent::parse(header.as_deref().expect("a traceparent"))
            .expect("valid");
        assert_eq!(sent.trace_id, caller.trace_id, "the caller's trace");
        assert_ne!(sent.span_id, caller.span_id, "a span of the run's own");
    }

    // A run posted without one has a trace of its own.
    let own = support::post_run(&http, &base, &flow).await;
    let view = support::view_until(&http, &base, &own, PATIENCE, "completed", |v| {
        v["status"] == "completed"
    })
    .await;
    assert_eq!(view["trace_id"], leasehold::trace_id_of(&own).as_str());
}
