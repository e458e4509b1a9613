//! A model that holds every chat completion until the test opens it, so a
//! test sees runs in flight — and kills what runs them — without timing.
//! It answers `done`, unstreamed: the flows it serves say `stream = false`.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::sync::watch;

/// A model whose every answer waits until the gate opens.
pub struct Gate {
    /// Chat completions received so far.
    pub received: watch::Sender<usize>,
    /// Whether answers go out.
    pub open: watch::Sender<bool>,
}

async fn complete(State(gate): State<Arc<Gate>>) -> Json<Value> {
    gate.received.send_modify(|n| *n += 1);
    let mut open = gate.open.subscribe();
    let _ = open.wait_for(|open| *open).await;
    Json(json!({
        "id": "chatcmpl-gate", "object": "chat.completion", "model": "gate",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "done"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }))
}

/// The gate's base URL (`http://ADDR/v1`) and the gate, closed.
pub async fn gated_model() -> (String, Arc<Gate>) {
    let gate = Arc::new(Gate {
        received: watch::Sender::new(0),
        open: watch::Sender::new(false),
    });
    let app = Router::new()
        .route("/v1/chat/completions", post(complete))
        .with_state(Arc::clone(&gate));
    let addr = super::serve_peer(app).await;
    (format!("{addr}/v1"), gate)
}
