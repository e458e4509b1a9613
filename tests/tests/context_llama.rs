//! A request that outgrows the context window of a real server: llama.cpp's
//! `llama-server` with a small instruct model (SmolLM2-135M-Instruct), each
//! of its two slots holding 2 048 tokens, refusing a longer request with
//! its own `exceed_context_size_error` — not a scripted imitation of it.
//!
//! - The client reads the refusal as a context overflow with both sizes the
//!   server gave, streamed or blocking.
//! - A run whose transcript of tool results grows past the window has its
//!   oldest results shortened, by the server's own count, until the real
//!   server takes the request and answers; the run completes.
//! - A run whose task alone does not fit pauses for a person, the reason
//!   naming both sizes and the server's words.
//!
//! They need `LEASEHOLD_PEER_LLAMA_SERVER` and `LEASEHOLD_PEER_LLAMA_MODEL`
//! (set by `scripts/test.sh`) and fail, rather than skip, without them.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::{
    BoxFuture, ChatMessage, ChatRole, Engine, EngineConfig, EventKind, Evidence, Flow, ModelClient,
    ModelError, ModelErrorKind, ModelReply, ModelRequest, OverflowAction, RunStatus, TokenCost,
    ToolCallRequest,
    model::{ModelEndpoint, ModelSettings, OpenAiClient},
    testing::{MemoryStore, RecordingSink, ScriptedTools, ToolAct},
};
use leasehold_tests::llama::{LlamaServer, SLOT_CONTEXT};
use serde_json::json;

/// The note a shortened tool result ends with.
const NOTE: &str = "more characters of this tool result were cut";

fn client(server: &LlamaServer) -> OpenAiClient {
    let mut settings =
        ModelSettings::new(ModelEndpoint::new(server.base_url(), server.model_name()));
    settings.idle_timeout = Duration::from_secs(120);
    OpenAiClient::new(settings).expect("the client builds")
}

/// Text of about `tokens` tokens of the model's tokenizer (about ten a
/// repetition).
fn text_of(tokens: usize) -> String {
    "lorem ipsum dolor sit amet ".repeat(tokens / 10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_llama_server_refuses_a_request_over_its_context_with_both_sizes() {
    let server = LlamaServer::start().await;
    let client = client(&server);
    for stream in [true, false] {
        let error = client
            .complete(
                ModelRequest {
                    messages: vec![ChatMessage::user(text_of(5_000))],
                    tools: Vec::new(),
                    stream,
                    consumer: "run".into(),
                    traceparent: None,
                    max_tokens: Some(8),
                },
                Evidence::detached(),
            )
            .await
            .expect_err("a request over the context is refused");
        let ModelErrorKind::ContextOverflow {
            requested_tokens: Some(requested),
            context_tokens: Some(window),
        } = error.kind
        else {
            panic!("stream {stream}: not an overflow with both sizes: {error:?}");
        };
        assert_eq!(window, u64::from(SLOT_CONTEXT), "{error}");
        assert!(requested > window, "{error}");
        assert!(
            error.message.contains(&format!(
                "request ({requested} tokens) exceeds the available context size ({window} tokens)"
            )),
            "{error}"
        );
        assert!(!error.retryable);
    }
}

/// A request the real server was sent, and whether it answered.
type Sent = (ModelRequest, Result<(), ModelError>);

/// A model that asks for one page a step until it has read `pages`, then
/// lets the real server answer: the tool calls are scripted, the refusals
/// and the answer are the real server's. Records what the real server was
/// sent and how it answered.
#[derive(Clone)]
struct ReadsThenAsks {
    pages: usize,
    real: OpenAiClient,
    sent: Arc<Mutex<Vec<Sent>>>,
}

impl ModelClient for ReadsThenAsks {
    fn complete(
        &self,
        request: ModelRequest,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        let this = self.clone();
        Box::pin(async move {
            let read = request
                .messages
                .iter()
                .filter(|m| m.role == ChatRole::Tool)
                .count();
            if read < this.pages {
                evidence.observe();
                return Ok(ModelReply {
                    tool_calls: vec![ToolCallRequest {
                        id: format!("call_{read}"),
                        name: "read_page".into(),
                        arguments: json!({"page": read}),
                    }],
                    usage: TokenCost {
                        input_tokens: 1,
                        output_tokens: 1,
                        counted: false,
                    },
                    ..ModelReply::default()
                });
            }
            let answer = this.real.complete(request.clone(), evidence).await;
            let outcome = answer.as_ref().map(|_| ()).map_err(Clone::clone);
            this.sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((request, outcome));
            answer
        })
    }

    fn model_name(&self) -> Option<String> {
        self.real.model_name()
    }

    fn describe(&self) -> String {
        self.real.describe()
    }
}

async fn engine(model: Arc<dyn ModelClient>, events: &RecordingSink) -> Engine {
    let tools = ScriptedTools::new().tool(
        "read_page",
        Some(true),
        [ToolAct::returns(text_of(1_000), Duration::from_millis(10))],
    );
    Engine::builder()
        .config(EngineConfig::default())
        .model(model)
        .events(Arc::new(events.clone()))
        .store(Arc::new(MemoryStore::new()))
        .tool_server("pages", Arc::new(tools))
        .build()
        .await
        .expect("engine builds")
}

/// A flow on the scripted pages; no pace learned, since the scripted
/// steps answer at once and the real server does not.
fn flow(task: &str) -> Flow {
    serde_json::from_value(json!({
        "name": "reader",
        "task": task,
        "max_steps": 4,
        "max_tokens": 24,
        "leases": {"pace": "off"},
        "tools": [{"name": "pages", "url": "http://127.0.0.1:9/mcp"}],
    }))
    .expect("valid flow")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_outgrowing_the_real_llama_servers_context_shortens_its_oldest_results_and_completes()
{
    let server = LlamaServer::start().await;
    let model = ReadsThenAsks {
        pages: 3,
        real: client(&server),
        sent: Arc::default(),
    };
    let events = RecordingSink::new();
    let engine = engine(Arc::new(model.clone()), &events).await;
    let mut run = engine
        .start(flow(
            "Read three pages, then say what they hold in one line.",
        ))
        .await
        .expect("starts");
    let state = tokio::time::timeout(Duration::from_secs(600), run.wait())
        .await
        .expect("the run ends");
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");

    // The real server refused three pages of about a thousand tokens each,
    // and said so with both sizes; the loop shortened, never paused.
    let overflows: Vec<_> = events
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::ContextOverflow {
                requested_tokens,
                context_tokens,
                action,
                ..
            } => Some((requested_tokens, context_tokens, action)),
            _ => None,
        })
        .collect();
    assert!(!overflows.is_empty(), "{:?}", events.kinds());
    for (requested, window, action) in &overflows {
        assert_eq!(*window, Some(u64::from(SLOT_CONTEXT)), "{overflows:?}");
        assert!(requested.is_some_and(|r| r > u64::from(SLOT_CONTEXT)));
        assert_eq!(*action, OverflowAction::Shortened, "{overflows:?}");
    }
    assert_eq!(events.count("paused"), 0);
    let restarts: Vec<String> = events
        .events()
        .iter()
        .filter(|e| e.kind.name() == "restarted")
        .map(|e| e.kind.describe())
        .collect();
    assert!(restarts.is_empty(), "{restarts:?}");

    let sent = model.sent.lock().unwrap_or_else(PoisonError::into_inner);
    let refused = sent.iter().filter(|(_, outcome)| outcome.is_err()).count();
    assert_eq!(refused, overflows.len(), "each refusal was handled once");
    let (taken, outcome) = sent.last().expect("the real server was asked");
    assert!(outcome.is_ok(), "{outcome:?}");
    let results: Vec<&str> = taken
        .messages
        .iter()
        .filter(|m| m.role == ChatRole::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(results.len(), 3);
    assert!(results[0].contains(NOTE), "{}", results[0]);
    assert_eq!(results[2], text_of(1_000), "the newest page is whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_task_outgrows_the_real_llama_servers_context_pauses_for_a_person() {
    let server = LlamaServer::start().await;
    let events = RecordingSink::new();
    let engine = engine(Arc::new(client(&server)), &events).await;
    let mut run = engine.start(flow(&text_of(5_000))).await.expect("starts");
    let state = tokio::time::timeout(Duration::from_secs(300), run.paused())
        .await
        .expect("the run pauses");
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    let reason = state.paused.map(|p| p.reason).unwrap_or_default();
    assert!(
        reason.contains("does not fit the model's context window")
            && reason.contains(&format!("against a window of {SLOT_CONTEXT})"))
            && reason.contains("exceeds the available context size")
            && reason.contains("no tool result is left to shorten"),
        "{reason}"
    );
    assert_eq!(events.count("context_overflow"), 1);
    assert_eq!(events.count("run_failed"), 0);
}
