//! The peers of `flow_bounds.rs`, written here: an OpenAI-compatible model
//! scripted by each loop's system prompt, and an MCP tool server whose tool
//! never answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------
/// The workers the fan-out root asks for in one answer.
pub const FAN_OUT: usize = 3000;

/// The workers each nesting loop asks for in one answer.
pub const NEST: usize = 5;

/// Requests the model received from workers (not from roots).
#[derive(Default)]
pub struct Seen {
    pub worker_requests: AtomicUsize,
}

/// What a loop's model says: by its system prompt, a root of the fan-out
/// asks for [`FAN_OUT`] `leaf` workers, a root of the nesting and every
/// `nest` worker ask for [`NEST`] `nest` workers each (their task says how
/// deep), a `leaf` answers; a loop that already has tool results answers.
fn reply(request: &Value, seen: &Seen) -> Value {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let system = messages
        .iter()
        .find(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    let task = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    if system.starts_with("You are the watchdog") {
        return text(&json!({"verdict": "RENEW", "reason": "alive", "nudge": null}).to_string());
    }
    if system.starts_with("You are the budget checkpoint") {
        return text(
            &json!({"decision": "WRAP_UP", "reason": "enough", "confidence": 1.0}).to_string(),
        );
    }
    if system.starts_with("leaf") || system.starts_with("nest") {
        seen.worker_requests.fetch_add(1, Ordering::Relaxed);
    }
    if messages.iter().any(|m| m["role"] == "tool") || system.starts_with("leaf") {
        return text("done");
    }
    if system.starts_with("root read") {
        return json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call-read", "type": "function",
            "function": {"name": "read", "arguments": json!({"account": "a-1"}).to_string()},
        }]});
    }
    if system.starts_with("root fan-out") {
        return spawns((0..FAN_OUT).map(|i| ("leaf", format!("leaf {i}"))));
    }
    // A nesting loop: its task is `depth N`, the root's is the flow's task.
    let depth: usize = task
        .strip_prefix("depth ")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    spawns((0..NEST).map(|_| ("nest", format!("depth {}", depth + 1))))
}

fn text(content: &str) -> Value {
    json!({"role": "assistant", "content": content})
}

fn spawns(calls: impl Iterator<Item = (&'static str, String)>) -> Value {
    let calls: Vec<Value> = calls
        .enumerate()
        .map(|(i, (kind, task))| {
            json!({"id": format!("call-{i}"), "type": "function", "function": {
                "name": "spawn_worker",
                "arguments": json!({"kind": kind, "task": task}).to_string(),
            }})
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls})
}

async fn chat_completions(State(seen): State<Arc<Seen>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let message = reply(&request, &seen);
    let finish = if message["tool_calls"].is_array() {
        "tool_calls"
    } else {
        "stop"
    };
    axum::Json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "bounds",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }))
    .into_response()
}

/// Starts the model; its base URL and what it saw.
pub async fn model() -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let app = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .with_state(seen.clone());
    let addr = crate::support::serve_peer(app).await;
    (format!("{addr}/v1"), seen)
}

// ---------------------------------------------------------------------------
// The tool server.
// ---------------------------------------------------------------------------

/// A tool server whose one tool, `read`, records each call's idempotency
/// key and then never answers: the call is in flight when the executor is
/// killed.
#[derive(Clone, Default)]
pub struct Hanging {
    keys: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Hanging {
    pub fn calls(&self) -> Vec<String> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl rmcp::ServerHandler for Hanging {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::model::ErrorData> {
        let schema = match json!({"type": "object", "properties": {"account": {"type": "string"}}})
        {
            Value::Object(object) => object,
            _ => unreachable!("an object"),
        };
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![
            rmcp::model::Tool::new("read", "Read an account.", schema),
        ]))
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::model::ErrorData> {
        let key = context
            .meta
            .get(leasehold::tools::IDEMPOTENCY_KEY_META)
            .or_else(|| {
                request
                    .meta
                    .as_ref()
                    .and_then(|m| m.get(leasehold::tools::IDEMPOTENCY_KEY_META))
            })
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(key);
        context.ct.cancelled().await;
        Err(rmcp::model::ErrorData::internal_error("cancelled", None))
    }
}

/// Serves `tools` over streamable HTTP; its URL.
pub async fn serve_tools(tools: Hanging) -> String {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_sse_keep_alive(Some(Duration::from_secs(5))),
    );
    let app = Router::new().nest_service("/mcp", service);
    let addr = crate::support::serve_peer(app).await;
    format!("{addr}/mcp")
}
