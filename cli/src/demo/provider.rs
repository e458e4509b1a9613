//! The demo's scripted OpenAI-compatible chat-completions server.
//!
//! `POST /v1/chat/completions` answers both ways the API does: with
//! `"stream": true`, server-sent events — `data: {chunk}` lines whose
//! `choices[0].delta` carries the text and the tool calls, a last chunk with
//! the usage when `stream_options.include_usage` asks for it, then
//! `data: [DONE]` — and otherwise one `chat.completion` JSON object. What
//! it says is decided by [`script`](super::script) from the transcript
//! alone. A body that is not a chat-completions request is refused with
//! 400 and an OpenAI-style error object naming what was wrong.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_stream::wrappers::ReceiverStream;

use super::script::{self, Agent, BRISK_CHUNK, Reply, Transcript};

/// The model name the server reports when a request names none it knows.
pub(crate) const MODEL_NAME: &str = "leasehold-demo";

/// The routes of the scripted model server, under `/v1`.
pub(crate) fn router() -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .fallback(not_found)
}

/// A chat-completions request, as far as the server reads it. Fields it
/// does not use (temperature, response_format …) are accepted and ignored.
#[derive(Debug, Deserialize)]
struct ChatRequest {
    #[serde(default)]
    model: Option<String>,
    messages: Vec<WireMessage>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    tools: Option<Vec<WireTool>>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    role: WireRole,
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum WireRole {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

/// A message's content: a string, or an array of parts of which the text
/// ones count.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
struct ContentPart {
    #[serde(default)]
    text: Option<String>,
}

impl Content {
    fn text(&self) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::Parts(parts) => parts.iter().filter_map(|p| p.text.as_deref()).collect(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct WireTool {
    function: WireFunction,
}

#[derive(Debug, Deserialize)]
struct WireFunction {
    name: String,
}

/// A refused request: 400 with an OpenAI-style error object.
#[derive(Debug)]
struct BadRequest {
    message: String,
    param: Option<String>,
}

impl IntoResponse for BadRequest {
    fn into_response(self) -> Response {
        let body = json!({
            "error": {
                "message": self.message,
                "type": "invalid_request_error",
                "param": self.param,
                "code": Value::Null,
            }
        });
        (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
    }
}

/// Reads `body` as a chat-completions request, or says exactly what is
/// wrong with it and where.
fn parse_request(body: &[u8]) -> Result<ChatRequest, BadRequest> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let request: ChatRequest =
        serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
            let path = error.path().to_string();
            let inner = error.inner();
            if matches!(
                inner.classify(),
                serde_json::error::Category::Syntax | serde_json::error::Category::Eof
            ) {
                BadRequest {
                    message: format!("the request body is not valid JSON: {inner}"),
                    param: None,
                }
            } else if path == "." {
                BadRequest {
                    message: format!("the request body is not a chat-completions request: {inner}"),
                    param: None,
                }
            } else {
                BadRequest {
                    message: format!("invalid request body at `{path}`: {inner}"),
                    param: Some(path),
                }
            }
        })?;
    deserializer.end().map_err(|e| BadRequest {
        message: format!("the request body has trailing data after its JSON object: {e}"),
        param: None,
    })?;
    if request.messages.is_empty() {
        return Err(BadRequest {
            message: "`messages` is empty: a chat completion needs at least one message".into(),
            param: Some("messages".into()),
        });
    }
    Ok(request)
}

/// The transcript the script reads from `request`.
fn transcript(request: &ChatRequest) -> Transcript {
    let mut t = Transcript::default();
    for message in &request.messages {
        let text = message
            .content
            .as_ref()
            .map(Content::text)
            .unwrap_or_default();
        match message.role {
            WireRole::System | WireRole::Developer => {
                if t.system.is_empty() {
                    t.system = text;
                }
            }
            WireRole::Assistant => t.step += 1,
            WireRole::Tool => {
                t.tool_results.push(text);
                t.after_tools.clear();
            }
            WireRole::User => {
                if !t.tool_results.is_empty() {
                    t.after_tools.push(text.clone());
                }
                t.last_user = text;
            }
        }
    }
    t.tools = request
        .tools
        .iter()
        .flatten()
        .map(|tool| tool.function.name.clone())
        .collect();
    t
}

async fn chat_completions(body: Bytes) -> Response {
    let request = match parse_request(&body) {
        Ok(request) => request,
        Err(refusal) => return refusal.into_response(),
    };
    let transcript = transcript(&request);
    let agent = Agent::identify(&transcript.system);
    let reply = script::reply(agent, &transcript);
    let answer = Answer {
        id: completion_id(),
        created: created(),
        model: request
            .model
            .clone()
            .unwrap_or_else(|| MODEL_NAME.to_owned()),
        usage: usage(&request, &reply),
        reply,
    };
    if request.stream.unwrap_or(false) {
        let include_usage = request
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        stream(answer.frames(include_usage))
    } else {
        axum::Json(answer.whole()).into_response()
    }
}

async fn models() -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [{"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "leasehold"}]
    }))
    .into_response()
}

async fn not_found() -> Response {
    let body = json!({
        "error": {
            "message": "no such route: this server answers POST /v1/chat/completions and GET /v1/models",
            "type": "invalid_request_error",
            "param": Value::Null,
            "code": "not_found",
        }
    });
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// One answer, ready to be written whole or streamed.
struct Answer {
    id: String,
    created: u64,
    model: String,
    usage: Value,
    reply: Reply,
}

impl Answer {
    fn finish_reason(&self) -> &'static str {
        if self.reply.calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
    }

    fn call_id(&self, index: usize) -> String {
        format!("call_{}_{index}", self.id.trim_start_matches("chatcmpl-"))
    }

    /// The `chat.completion` object.
    fn whole(&self) -> Value {
        let calls: Vec<Value> = self
            .reply
            .calls
            .iter()
            .enumerate()
            .map(|(index, call)| {
                json!({
                    "id": self.call_id(index),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments.to_string()},
                })
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": self.reply.text});
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason()}],
            "usage": self.usage,
        })
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })
    }

    /// The server-sent events of the streamed answer, each with the pause
    /// before it.
    fn frames(&self, include_usage: bool) -> Vec<(Duration, String)> {
        let event = |value: &Value| format!("data: {value}\n\n");
        let mut frames = vec![(
            Duration::ZERO,
            event(&self.chunk(json!({"role": "assistant", "content": ""}), None)),
        )];
        let pieces = self.reply.pieces();
        let interval = self.reply.interval(pieces.len());
        for piece in pieces {
            frames.push((
                interval,
                event(&self.chunk(json!({"content": piece}), None)),
            ));
        }
        for (index, call) in self.reply.calls.iter().enumerate() {
            let opening = json!({"tool_calls": [{
                "index": index,
                "id": self.call_id(index),
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }]});
            frames.push((BRISK_CHUNK, event(&self.chunk(opening, None))));
            // The arguments come in two fragments, as real servers cut them.
            let arguments = call.arguments.to_string();
            let cut = arguments
                .char_indices()
                .nth(arguments.chars().count() / 2)
                .map_or(arguments.len(), |(at, _)| at);
            for fragment in [&arguments[..cut], &arguments[cut..]] {
                let delta = json!({"tool_calls": [{
                    "index": index,
                    "function": {"arguments": fragment},
                }]});
                frames.push((BRISK_CHUNK, event(&self.chunk(delta, None))));
            }
        }
        frames.push((
            BRISK_CHUNK,
            event(&self.chunk(json!({}), Some(self.finish_reason()))),
        ));
        if include_usage {
            let usage = json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": self.usage,
            });
            frames.push((Duration::ZERO, event(&usage)));
        }
        frames.push((Duration::ZERO, "data: [DONE]\n\n".to_owned()));
        frames
    }
}

/// A `text/event-stream` response that writes `frames`, each after its
/// pause. A client that goes away ends the writing.
fn stream(frames: Vec<(Duration, String)>) -> Response {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(8);
    tokio::spawn(async move {
        for (pause, frame) in frames {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            if sender.send(Ok(Bytes::from(frame))).await.is_err() {
                return;
            }
        }
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(ReceiverStream::new(receiver)),
    )
        .into_response()
}

/// Token counts, estimated as a quarter of the characters.
fn usage(request: &ChatRequest, reply: &Reply) -> Value {
    let prompt_chars: usize = request
        .messages
        .iter()
        .filter_map(|m| m.content.as_ref())
        .map(|c| c.text().len())
        .sum();
    let completion_chars = reply.text.len()
        + reply
            .calls
            .iter()
            .map(|c| c.name.len() + c.arguments.to_string().len())
            .sum::<usize>();
    let prompt = (prompt_chars / 4).max(1);
    let completion = (completion_chars / 4).max(1);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

fn completion_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("chatcmpl-demo{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn created() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_bodies_are_refused_naming_what_is_wrong() {
        let not_json = parse_request(b"{not json").expect_err("refused");
        assert!(
            not_json.message.contains("not valid JSON"),
            "{}",
            not_json.message
        );
        let no_messages = parse_request(br#"{"model": "m"}"#).expect_err("refused");
        assert!(
            no_messages.message.contains("missing field `messages`"),
            "{}",
            no_messages.message
        );
        let bad_role = parse_request(br#"{"messages": [{"role": "robot", "content": "hi"}]}"#)
            .expect_err("refused");
        assert_eq!(bad_role.param.as_deref(), Some("messages[0].role"));
        assert!(bad_role.message.contains("robot"), "{}", bad_role.message);
        let empty = parse_request(br#"{"messages": []}"#).expect_err("refused");
        assert_eq!(empty.param.as_deref(), Some("messages"));
    }

    #[test]
    fn the_transcript_counts_steps_and_keeps_guidance_after_tool_results() {
        let request = parse_request(
            br#"{"messages": [
                {"role": "system", "content": "S"},
                {"role": "user", "content": "task"},
                {"role": "assistant", "content": null, "tool_calls": []},
                {"role": "tool", "tool_call_id": "c", "content": "result"},
                {"role": "user", "content": [{"type": "text", "text": "guidance"}]}
            ], "tools": [{"type": "function", "function": {"name": "t", "parameters": {}}}]}"#,
        )
        .expect("a valid request");
        let t = transcript(&request);
        assert_eq!(t.system, "S");
        assert_eq!(t.step, 1);
        assert_eq!(t.tool_results, vec!["result".to_owned()]);
        assert_eq!(t.after_tools, vec!["guidance".to_owned()]);
        assert!(t.tools.contains("t"));
    }
}
