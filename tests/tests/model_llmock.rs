//! The model client against a real OpenAI-compatible server (llmock), one
//! test per rule: no deadline hides on the model path, every chunk is
//! evidence, failures are typed and retried by rule, tool calls reach the
//! tools, usage is recorded per consumer.
//!
//! These run on the real clock (real sockets), with short leases and small
//! delays. They need `LEASEHOLD_PEER_LLMOCK` (set by `scripts/test.sh`) and
//! fail, rather than skip, without it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{
    BoxFuture, BudgetEvaluationRequest, BudgetFigures, ChatMessage, Engine, EngineConfig,
    EvaluationRequest, Evaluator, EventKind, Evidence, EvidenceSummary, Flow, LeaseId, LeaseKind,
    ModelClient, ModelError, ModelErrorKind, ModelReply, ModelRequest, RestartPolicy, RunStatus,
    Supervision, SupervisionConfig, ToolClient, ToolDefinition, ToolError, ToolInvocation,
    ToolOutput, TranscriptMessage,
    model::{ModelEndpoint, ModelEvaluator, ModelSettings, OpenAiClient},
    testing::{RecordingSink, ScriptedEvaluator, ScriptedTools, ToolAct},
};
use leasehold_tests::llmock::{Llmock, LlmockOptions};
use serde_json::{Value, json};

const MODEL: &str = "gpt-4o-mini";
const LEASE: Duration = Duration::from_millis(300);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn client(server: &Llmock, idle: Duration) -> OpenAiClient {
    let mut settings = ModelSettings::new(ModelEndpoint::new(server.base_url(), MODEL));
    settings.idle_timeout = idle;
    OpenAiClient::new(settings).expect("the client builds")
}

fn request(consumer: &str, stream: bool) -> ModelRequest {
    ModelRequest {
        max_tokens: None,
        traceparent: None,
        messages: vec![
            ChatMessage::system("You are terse."),
            ChatMessage::user("Say something long."),
        ],
        tools: Vec::new(),
        stream,
        consumer: consumer.to_owned(),
    }
}

/// `n` words; llmock streams one chunk per word.
fn words(n: usize) -> String {
    (0..n)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn reply_once(text: &str) -> Value {
    json!({"type": "reply", "text": text})
}

/// A lease actor and a watchdog with `evaluator`, model leases of `lease`.
async fn supervision(
    lease: Duration,
    evaluator: &ScriptedEvaluator,
    events: &RecordingSink,
) -> Supervision {
    let mut config = SupervisionConfig::default();
    config.lease.model_stream = lease;
    config.lease.model_blocking = lease;
    // These tests are about evidence against silence on a real stream;
    // that a long run of evidence renewals is shown to the evaluator anyway
    // is proven on paused time (`actors/tests/watchdog.rs`), where a loaded
    // machine cannot add expiries.
    config.watchdog.evidence_renewals = u32::MAX;
    Supervision::start(
        config,
        Some(Arc::new(evaluator.clone())),
        Arc::new(events.clone()),
    )
    .await
    .expect("supervision starts")
}

/// Runs `request` through `client` under a model-stream lease.
async fn supervised(
    supervision: &Supervision,
    client: &OpenAiClient,
    request: ModelRequest,
) -> Result<ModelReply, ModelError> {
    let spec = supervision
        .config
        .lease
        .spec(LeaseKind::ModelStream, "model call")
        .expect("valid spec");
    let handle = supervision
        .leases
        .supervise(spec, |evidence| client.complete(request, evidence))
        .expect("the lease actor runs");
    handle
        .outcome()
        .await
        .expect("the lease did not end the call")
}

async fn call(client: &OpenAiClient, request: ModelRequest) -> Result<ModelReply, ModelError> {
    client.complete(request, Evidence::detached()).await
}

// ---------------------------------------------------------------------------
// No deadline, and chunks are evidence.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_stream_five_times_longer_than_its_lease_completes_whole_without_an_evaluator_call() {
    let server = Llmock::start_with(LlmockOptions::chunk_delay_ms(15)).await;
    // About 113 chunks 15 ms apart: 1.7 s.
    let text = words(110);
    server.scenario(json!([reply_once(&text)])).await;
    let evaluator = ScriptedEvaluator::always("INTERVENE");
    let events = RecordingSink::new();
    let supervision = supervision(LEASE, &evaluator, &events).await;

    let started = Instant::now();
    let reply = supervised(
        &supervision,
        &client(&server, ms(2_000)),
        request("run", true),
    )
    .await
    .expect("the stream completes");
    let took = started.elapsed();

    assert_eq!(reply.content, text);
    assert!(took >= LEASE * 5, "the stream took only {took:?}");
    assert_eq!(
        evaluator.calls(),
        0,
        "chunks kept coming: no evaluator call"
    );
    assert!(
        events.count("wait") >= 4,
        "the lease expired and was renewed: {:?}",
        events.kinds()
    );
    assert!(events.count("intervened") == 0);
}

#[tokio::test]
async fn a_mid_stream_stall_longer_than_the_lease_shows_wait_events_and_completes() {
    let server = Llmock::start().await;
    let text = words(20);
    server
        .scenario(json!([
            reply_once(&text),
            {"type": "stream_fault", "kind": "stall", "after_chunks": 3, "stall_seconds": 1.0},
        ]))
        .await;
    let evaluator = ScriptedEvaluator::always("INTERVENE");
    let events = RecordingSink::new();
    let supervision = supervision(LEASE, &evaluator, &events).await;

    let started = Instant::now();
    let reply = supervised(
        &supervision,
        &client(&server, ms(3_000)),
        request("run", true),
    )
    .await
    .expect("the stalled stream completes");

    assert_eq!(reply.content, text);
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(
        events.count("wait") >= 2,
        "a 1 s stall under a 300 ms lease expires it: {:?}",
        events.kinds()
    );
    // Evidence before the stall kept phi low: the watchdog never asked.
    assert_eq!(evaluator.calls(), 0);
}

#[tokio::test]
async fn a_stall_longer_than_the_idle_timeout_fails_as_a_retryable_idle_timeout() {
    let server = Llmock::start().await;
    server
        .scenario(json!([
            {"type": "stream_fault", "kind": "stall", "after_chunks": 2, "stall_seconds": 3.0},
        ]))
        .await;
    let started = Instant::now();
    let error = call(&client(&server, ms(300)), request("run", true))
        .await
        .expect_err("the idle timeout fires");
    assert_eq!(error.kind, ModelErrorKind::IdleTimeout, "{error}");
    assert!(error.retryable);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "failed at the idle timeout, not at the end of the stall"
    );
}

// ---------------------------------------------------------------------------
// Runs: retryable failures are restarted.
// ---------------------------------------------------------------------------

fn engine_config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.model_stream = Duration::from_secs(10);
    config.supervision.lease.model_blocking = Duration::from_secs(10);
    config.supervision.lease.tool_call = Duration::from_secs(10);
    config.restart = RestartPolicy {
        backoff_initial: ms(50),
        backoff_max: ms(200),
        jitter: 0.0,
        ..RestartPolicy::default()
    };
    config
}

fn flow(task: &str, tools: bool) -> Flow {
    let mut flow = json!({"name": "ask", "task": task, "max_steps": 4});
    if tools {
        flow["tools"] = json!([{"name": "local", "url": "http://127.0.0.1:9/mcp"}]);
    }
    serde_json::from_value(flow).expect("valid flow")
}

async fn run_to_end(
    client: &OpenAiClient,
    tools: Option<Arc<dyn ToolClient>>,
    flow: Flow,
) -> (leasehold::RunState, RecordingSink) {
    let events = RecordingSink::new();
    let mut builder = Engine::builder()
        .config(engine_config())
        .model(Arc::new(client.clone()))
        .events(Arc::new(events.clone()));
    if let Some(tools) = tools {
        builder = builder.tool_server("local", tools);
    }
    let engine = builder.build().await.expect("the engine builds");
    let mut run = engine.start(flow).await.expect("the run starts");
    let state = tokio::time::timeout(Duration::from_secs(20), run.wait())
        .await
        .expect("the run ends within 20 s");
    (state, events)
}

fn restarts(events: &RecordingSink) -> Vec<String> {
    events
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Restarted { reason, .. } => Some(reason),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_run_whose_stream_stalls_past_the_idle_timeout_is_restarted_and_completes() {
    let server = Llmock::start().await;
    server
        .scenario(json!([
            {"type": "reply", "text": "the answer", "times": 2},
            {"type": "stream_fault", "kind": "stall", "after_chunks": 2, "stall_seconds": 3.0},
        ]))
        .await;
    let (state, events) = run_to_end(&client(&server, ms(300)), None, flow("Answer.", false)).await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("the answer"));
    let restarts = restarts(&events);
    assert_eq!(restarts.len(), 1, "{:?}", events.kinds());
    assert!(restarts[0].contains("IdleTimeout"), "{restarts:?}");
}

#[tokio::test]
async fn a_disconnect_after_n_chunks_is_a_retryable_disconnect() {
    let server = Llmock::start().await;
    server
        .scenario(json!([
            reply_once(&words(10)),
            {"type": "stream_fault", "kind": "disconnect", "after_chunks": 4},
        ]))
        .await;
    let error = call(&client(&server, ms(2_000)), request("run", true))
        .await
        .expect_err("the stream breaks");
    assert_eq!(error.kind, ModelErrorKind::Disconnected, "{error}");
    assert!(error.retryable);
}

#[tokio::test]
async fn a_stream_truncated_without_a_finish_is_a_retryable_disconnect_not_an_answer() {
    let server = Llmock::start().await;
    server
        .scenario(json!([
            reply_once(&words(10)),
            {"type": "stream_fault", "kind": "truncate", "after_chunks": 4},
        ]))
        .await;
    let error = call(&client(&server, ms(2_000)), request("run", true))
        .await
        .expect_err("a cut stream is not a whole answer");
    assert_eq!(error.kind, ModelErrorKind::Disconnected, "{error}");
    assert!(error.retryable);
}

#[tokio::test]
async fn a_run_whose_stream_disconnects_is_restarted_and_completes() {
    let server = Llmock::start().await;
    server
        .scenario(json!([
            {"type": "reply", "text": "the answer", "times": 2},
            {"type": "stream_fault", "kind": "disconnect", "after_chunks": 2},
        ]))
        .await;
    let (state, events) =
        run_to_end(&client(&server, ms(2_000)), None, flow("Answer.", false)).await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("the answer"));
    let restarts = restarts(&events);
    assert_eq!(restarts.len(), 1, "{:?}", events.kinds());
    assert!(restarts[0].contains("Disconnected"), "{restarts:?}");
}

// ---------------------------------------------------------------------------
// Rate limits and status codes.
// ---------------------------------------------------------------------------

fn seconds(record: &Value, key: &str) -> f64 {
    record
        .get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("journal record without `{key}`: {record}"))
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_as_told_then_retried() {
    let server = Llmock::start().await;
    server
        .scenario(json!([{"type": "fail", "status": 429, "retry_after": 1}]))
        .await;
    let started = Instant::now();
    let reply = call(&client(&server, ms(2_000)), request("run", true))
        .await
        .expect("the retry succeeds");
    assert!(!reply.content.is_empty());
    assert!(started.elapsed() >= Duration::from_secs(1));

    let journal = server.requests().await;
    assert_eq!(journal.len(), 2, "{journal:?}");
    assert_eq!(journal[0]["status"], 429);
    assert_eq!(journal[1]["status"], 200);
    // On the server's own clock: the retry began no earlier than one second
    // after the 429 went out.
    let gap = seconds(&journal[1], "started_at") - seconds(&journal[0], "ended_at");
    assert!(gap >= 1.0, "retried after {gap:.3} s, told 1 s");
}

#[tokio::test]
async fn a_429_that_persists_is_retried_three_times_then_returned_with_its_retry_after() {
    let server = Llmock::start().await;
    server
        .scenario(json!([{"type": "fail", "status": 429, "retry_after": 0.2, "times": 4}]))
        .await;
    let error = call(&client(&server, ms(2_000)), request("run", false))
        .await
        .expect_err("still limited after three retries");
    assert_eq!(error.kind, ModelErrorKind::RateLimited, "{error}");
    assert!(error.retryable);
    assert_eq!(error.retry_after, Some(ms(200)));
    assert_eq!(server.requests().await.len(), 4);
}

#[tokio::test]
async fn a_5xx_is_retryable_and_another_4xx_is_not() {
    let server = Llmock::start().await;
    server
        .scenario(json!([
            {"type": "fail", "status": 503},
            {"type": "fail", "status": 400, "message": "bad request body"},
        ]))
        .await;
    let client = client(&server, ms(2_000));
    let unavailable = call(&client, request("run", true)).await.expect_err("503");
    assert_eq!(unavailable.kind, ModelErrorKind::Server, "{unavailable}");
    assert!(unavailable.retryable);
    let refused = call(&client, request("run", true)).await.expect_err("400");
    assert_eq!(refused.kind, ModelErrorKind::Client, "{refused}");
    assert!(!refused.retryable);
    assert!(refused.message.contains("bad request body"), "{refused}");
}

#[tokio::test]
async fn a_malformed_chunk_is_a_typed_error_not_a_panic() {
    let server = Llmock::start().await;
    server
        .scenario(json!([
            reply_once(&words(10)),
            {"type": "stream_fault", "kind": "malformed", "after_chunks": 2},
        ]))
        .await;
    let error = call(&client(&server, ms(2_000)), request("run", true))
        .await
        .expect_err("the chunk is not JSON");
    assert_eq!(error.kind, ModelErrorKind::MalformedChunk, "{error}");
    assert!(!error.retryable);
}

// ---------------------------------------------------------------------------
// Tool calls.
// ---------------------------------------------------------------------------

/// Scripted tools that advertise a schema with properties, so that the
/// model has real arguments to fill in.
struct SchemaTools {
    inner: ScriptedTools,
    schema: Value,
}

impl ToolClient for SchemaTools {
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>> {
        let listing = self.inner.list_tools();
        let schema = self.schema.clone();
        Box::pin(async move {
            let mut tools = listing.await?;
            for tool in &mut tools {
                tool.input_schema = schema.clone();
            }
            Ok(tools)
        })
    }

    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        self.inner.call(invocation, evidence)
    }
}

#[tokio::test]
async fn tool_calls_from_the_model_reach_the_tool_client_with_the_models_arguments() {
    let server = Llmock::start().await;
    let scripted = ScriptedTools::new().tool(
        "search_logs",
        Some(true),
        [ToolAct::returns("3 lines match", Duration::ZERO)],
    );
    let tools = SchemaTools {
        inner: scripted.clone(),
        schema: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 3},
            },
            "required": ["query", "limit"],
        }),
    };
    let (state, _events) = run_to_end(
        &client(&server, ms(2_000)),
        Some(Arc::new(tools)),
        flow("Search the logs for the error.", true),
    )
    .await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");

    // llmock's automatic tool mode called the tool with arguments valid
    // against its schema, streamed in 12-character fragments.
    let invocations = scripted.invocations();
    assert_eq!(invocations.len(), 1, "{invocations:?}");
    assert_eq!(invocations[0].name, "search_logs");
    assert_eq!(
        invocations[0].arguments,
        json!({"query": "mock-query", "limit": 3})
    );
    // The tool's result went back to the model, which then answered.
    let journal = server.requests().await;
    let last = &journal.last().expect("two model calls")["body"]["messages"];
    let tool_message = last
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .expect("the tool's result was sent back");
    assert_eq!(tool_message["content"], "3 lines match");
}

#[tokio::test]
async fn malformed_tool_call_arguments_are_a_typed_error_not_a_panic() {
    let server = Llmock::start().await;
    server
        .scenario(json!([{"type": "tool_fault", "kind": "malformed_arguments"}]))
        .await;
    let mut request = request("run", true);
    request.tools = vec![ToolDefinition {
        name: "search_logs".into(),
        description: "search the logs".into(),
        input_schema: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
        idempotent: Some(true),
    }];
    let error = call(&client(&server, ms(2_000)), request)
        .await
        .expect_err("the arguments are cut in half");
    assert!(
        error.message.contains("malformed arguments") && error.message.contains("search_logs"),
        "{error}"
    );
    assert!(error.retryable, "sampling again may give valid arguments");
}

// ---------------------------------------------------------------------------
// Usage, and the evaluator.
// ---------------------------------------------------------------------------

fn lease_request() -> EvaluationRequest {
    EvaluationRequest {
        lease_id: LeaseId(7),
        run_id: "run-1".into(),
        path: "run/model_call:3".into(),
        kind: LeaseKind::ModelStream,
        subject: "run".into(),
        renewals: 3,
        max_renewals: 10,
        lease: Duration::from_secs(120),
        evidence: EvidenceSummary {
            count: 42,
            last_progress_age_ms: Some(95_000),
            phi: Some(11.25),
            last_note: None,
            repetition: None,
            ..EvidenceSummary::default()
        },
        evidence_renewals: 0,
        stream_tail: None,
        transcript_tail: vec![TranscriptMessage::new("user", "Find the bug.")].into(),
    }
}

fn budget_request() -> BudgetEvaluationRequest {
    BudgetEvaluationRequest {
        run_id: "run-1".into(),
        path: "run/worker:research#1".into(),
        figures: BudgetFigures {
            spending: None,
            steps_used: 8,
            steps_declared: 8,
            limit: 8,
            tool_calls: 5,
            spawns: 0,
            milestones_closed: vec!["collect".into()],
            milestones_open: vec!["summarise".into()],
            extensions_used: 0,
            extensions_left: 3,
        },
        transcript_tail: vec![TranscriptMessage::new("assistant", "Collected.")].into(),
    }
}

#[tokio::test]
async fn usage_is_recorded_per_consumer() {
    let server = Llmock::start().await;
    let client = client(&server, ms(2_000));
    let streamed = call(&client, request("run", true)).await.expect("run");
    let blocking = call(&client, request("worker:research", false))
        .await
        .expect("worker");
    let evaluator = ModelEvaluator::new(&client);
    evaluator
        .evaluate(lease_request())
        .await
        .expect("watchdog evaluation");
    evaluator
        .evaluate_budget(budget_request())
        .await
        .expect("budget evaluation");

    let ledger = client.ledger().snapshot();
    assert_eq!(
        ledger.keys().map(String::as_str).collect::<Vec<_>>(),
        ["engine.budget", "engine.watchdog", "run", "worker:research"]
    );
    assert!(streamed.usage.input_tokens > 0 && streamed.usage.output_tokens > 0);
    assert_eq!(ledger["run"], streamed.usage);
    assert_eq!(ledger["worker:research"], blocking.usage);
    assert!(ledger["engine.watchdog"].input_tokens > 0);
    assert!(ledger["engine.budget"].input_tokens > 0);
    // The streamed call asked for its usage.
    let journal = server.requests().await;
    assert_eq!(journal[0]["body"]["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn the_evaluator_asks_the_fast_model_for_json_and_returns_its_raw_answer() {
    let server = Llmock::start().await;
    let verdict = r#"{"verdict": "INTERVENE", "reason": "silent for 95 s", "nudge": null}"#;
    server.scenario(json!([reply_once(verdict)])).await;
    let settings = ModelSettings::new(ModelEndpoint::new(server.base_url(), MODEL))
        .with_fast(ModelEndpoint::new(server.base_url(), "fast-judge"));
    let client = OpenAiClient::new(settings).expect("client");

    let answer = ModelEvaluator::new(&client)
        .evaluate(lease_request())
        .await
        .expect("an answer");
    assert_eq!(answer.text, verdict);
    assert!(answer.cost.input_tokens > 0);

    let journal = server.requests().await;
    let body = &journal[0]["body"];
    assert_eq!(body["model"], "fast-judge");
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    let prompt = body["messages"].to_string();
    for shown in [
        "model_stream",
        "renewed 3 times",
        "42 items",
        "phi 11.25",
        "Find the bug.",
    ] {
        assert!(
            prompt.contains(shown),
            "the prompt lacks {shown:?}: {prompt}"
        );
    }
    assert_eq!(client.ledger().snapshot().len(), 1);
    assert!(client.ledger().of("engine.watchdog").input_tokens > 0);
}

#[tokio::test]
async fn the_evaluator_retries_once_without_response_format_on_any_4xx_and_leaves_it_off_after() {
    let server = Llmock::start().await;
    // A refusal that does not name the field, as some servers answer.
    server
        .scenario(json!([
            {"type": "fail", "status": 422, "message": "Unprocessable request"},
            reply_once(r#"{"decision": "EXTEND", "reason": "one milestone left", "confidence": 0.7}"#),
            reply_once(r#"{"decision": "WRAP_UP", "reason": "nothing left", "confidence": 0.8}"#),
        ]))
        .await;
    let client = client(&server, ms(2_000));
    let evaluator = ModelEvaluator::new(&client);
    let answer = evaluator
        .evaluate_budget(budget_request())
        .await
        .expect("the second try answers");
    assert!(answer.text.contains("EXTEND"));
    let answer = evaluator
        .evaluate_budget(budget_request())
        .await
        .expect("the next evaluation answers at once");
    assert!(answer.text.contains("WRAP_UP"));

    let journal = server.requests().await;
    assert_eq!(journal.len(), 3, "one retry, then none");
    assert!(journal[0]["body"].get("response_format").is_some());
    assert!(journal[1]["body"].get("response_format").is_none());
    assert!(
        journal[2]["body"].get("response_format").is_none(),
        "an endpoint that refused JSON mode is not asked for it again"
    );
    assert!(
        journal[1]["body"]["messages"]
            .to_string()
            .contains("summarise")
    );
}
