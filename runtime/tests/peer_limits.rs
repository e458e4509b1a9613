//! Every answer from a peer is bounded: hostile OpenAI-compatible servers
//! (small raw HTTP servers on 127.0.0.1 that never stop sending) against the
//! model client's caps; real MCP servers — over streamable HTTP (rmcp's
//! server side, in process) and over stdio (a small Python server, a real
//! child process) — whose answers are over the MCP client's limit on one
//! message; and a run whose tool returns 15 MB, truncated for the model and
//! the store.
//!
//! Memory is checked from the outside: each hostile server counts the bytes
//! it managed to write before the client hung up, and that count must stay
//! near the cap (the cap plus what the sockets buffer), where without a cap
//! it would reach the server's own stop, 256 MiB.

#[path = "support/requests.rs"]
mod requests;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use leasehold::{
    ChatRole, DEFAULT_MAX_TOOL_RESULT_BYTES, Engine, EngineConfig, EventKind, Evidence, Flow,
    ModelClient, ModelError, ModelErrorKind, RunStatus, ToolClient, ToolError, ToolInvocation,
    ToolServer,
    model::{ModelEndpoint, ModelSettings, OpenAiClient},
    testing::{RecordingSink, ScriptedModel, Turn},
    tools::{MAX_MESSAGE_BYTES, McpToolClient},
};
use requests::ask;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------
// Hostile model servers.
// ---------------------------------------------------------------------------

/// The answer cap of these tests' clients.
const ANSWER_CAP: usize = 256 * 1024;
/// The blocking-body cap of these tests' clients.
const BODY_CAP: usize = 512 * 1024;
/// Where a hostile server gives up by itself: far past any cap.
const SERVER_STOP: usize = 256 * 1024 * 1024;
/// The most a hostile server may have written when the client hung up at
/// its cap: the cap, what the sockets and the HTTP client buffer, and room.
const WRITTEN_BOUND: usize = 64 * 1024 * 1024;

/// A server that accepts one connection, reads the request, writes `head`
/// and `prefix`, then `unit` over and over until the client hangs up (or
/// [`SERVER_STOP`]); sends back how many bytes it wrote in all.
fn endless(
    head: &str,
    prefix: &str,
    unit: String,
) -> (String, tokio::sync::oneshot::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}/v1", listener.local_addr().expect("address"));
    // Awaited, not blocked on: the client's connection task must run to
    // hang up.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (head, prefix) = (head.to_owned(), prefix.to_owned());
    thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        read_request(&mut stream);
        let mut written = 0usize;
        let pieces = [head.as_bytes(), prefix.as_bytes()]
            .into_iter()
            .chain(std::iter::repeat(unit.as_bytes()));
        for piece in pieces {
            if written >= SERVER_STOP || stream.write_all(piece).is_err() {
                break;
            }
            written += piece.len();
        }
        let _ = tx.send(written);
    });
    (base, rx)
}

fn read_request(stream: &mut TcpStream) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head);
    let length = text
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    let _ = stream.read_exact(&mut body);
}

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
const JSON_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n";

fn client(base: &str) -> OpenAiClient {
    let mut settings = ModelSettings::new(ModelEndpoint::new(base, "m"));
    settings.max_answer_bytes = ANSWER_CAP;
    settings.max_body_bytes = BODY_CAP;
    OpenAiClient::new(settings).expect("client")
}

fn event(data: &serde_json::Value) -> String {
    format!("data: {data}\n\n")
}

/// The call to a hostile server at `base` ends with the error of the cap
/// `key` (`env`) of `cap` bytes, naming the endpoint; its server wrote
/// little more than the cap.
async fn assert_capped(
    error: &ModelError,
    base: &str,
    (key, env, cap): (&str, &str, usize),
    written: tokio::sync::oneshot::Receiver<usize>,
) {
    assert_eq!(error.kind, ModelErrorKind::Other, "{error}");
    assert!(error.retryable, "handled like any failed call: {error}");
    for needle in [key, env, &format!("cap of {cap} bytes"), base] {
        assert!(
            error.message.contains(needle),
            "the error does not name `{needle}`: {error}"
        );
    }
    // The client hung up at the cap, so the server's writes fail soon after.
    let written = tokio::time::timeout(Duration::from_secs(120), written)
        .await
        .expect("the server saw the client hang up")
        .expect("the server reports");
    assert!(
        written < WRITTEN_BOUND,
        "the client read on past its cap: the server wrote {written} bytes"
    );
}

const ANSWER: (&str, &str, usize) = (
    "limits.model_answer",
    "LEASEHOLD_LIMITS_MODEL_ANSWER",
    ANSWER_CAP,
);
const BODY: (&str, &str, usize) = ("limits.model_body", "LEASEHOLD_LIMITS_MODEL_BODY", BODY_CAP);

#[tokio::test]
async fn an_endless_data_line_ends_the_call_at_the_answer_cap() {
    let (base, written) = endless(SSE_HEAD, "data: ", "a".repeat(64 * 1024));
    let evidence = Evidence::detached();
    let error = client(&base)
        .complete(ask(true), evidence.clone())
        .await
        .expect_err("an endless line");
    assert_capped(&error, &base, ANSWER, written).await;
    assert!(error.message.contains("one line"), "{error}");
    assert_eq!(evidence.count(), 0, "no event ever completed");
}

#[tokio::test]
async fn an_endless_event_of_many_data_lines_ends_the_call_at_the_answer_cap() {
    let (base, written) = endless(SSE_HEAD, "", format!("data: {}\n", "a".repeat(1000)));
    let error = client(&base)
        .complete(ask(true), Evidence::detached())
        .await
        .expect_err("an endless event");
    assert_capped(&error, &base, ANSWER, written).await;
    assert!(error.message.contains("one event"), "{error}");
}

#[tokio::test]
async fn an_endless_non_sse_body_ends_the_call_at_the_body_cap() {
    let (base, written) = endless(
        JSON_HEAD,
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":""#,
        "a".repeat(64 * 1024),
    );
    let error = client(&base)
        .complete(ask(false), Evidence::detached())
        .await
        .expect_err("an endless body");
    assert_capped(&error, &base, BODY, written).await;
}

#[tokio::test]
async fn a_body_announced_over_the_cap_is_not_read() {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        BODY_CAP + 1
    );
    let (base, written) = endless(&head, "", "a".repeat(64 * 1024));
    let evidence = Evidence::detached();
    let error = client(&base)
        .complete(ask(false), evidence.clone())
        .await
        .expect_err("a body over the cap");
    assert_capped(&error, &base, BODY, written).await;
    assert_eq!(evidence.count(), 0, "not a byte of it counts");
}

/// Endless events of `delta`, each 1000 bytes of answer: the call ends at
/// the answer cap, and no event past the cap was evidence.
async fn endless_deltas_end_at_the_cap(first: Option<String>, delta: serde_json::Value) {
    let unit = event(&json!({"choices": [{"index": 0, "delta": delta}]}));
    let (base, written) = endless(SSE_HEAD, first.as_deref().unwrap_or(""), unit);
    let evidence = Evidence::detached();
    let error = client(&base)
        .complete(ask(true), evidence.clone())
        .await
        .expect_err("an endless answer");
    assert_capped(&error, &base, ANSWER, written).await;
    let within_cap = u64::try_from(ANSWER_CAP / 1000).expect("small") + 1;
    assert!(
        evidence.count() <= within_cap,
        "events past the cap counted as evidence: {} reads, at most {within_cap} events fit",
        evidence.count()
    );
}

#[tokio::test]
async fn endless_content_deltas_end_the_call_at_the_answer_cap() {
    endless_deltas_end_at_the_cap(None, json!({"content": "x".repeat(1000)})).await;
}

#[tokio::test]
async fn endless_tool_call_arguments_end_the_call_at_the_answer_cap() {
    let first = event(&json!({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "function": {"name": "search", "arguments": ""}}
    ]}}]}));
    endless_deltas_end_at_the_cap(
        Some(first),
        json!({"tool_calls": [{"index": 0, "function": {"arguments": "x".repeat(1000)}}]}),
    )
    .await;
}

#[tokio::test]
async fn endless_reasoning_ends_the_call_at_the_answer_cap() {
    endless_deltas_end_at_the_cap(None, json!({"reasoning_content": "x".repeat(1000)})).await;
}

#[tokio::test]
async fn an_answer_within_the_caps_is_whole() {
    // The same client, a server that stops in time: caps cut nothing else.
    let text = "y".repeat(ANSWER_CAP - 10);
    let body = format!(
        "{}{}data: [DONE]\n\n",
        event(&json!({"choices": [{"index": 0, "delta": {"content": text}}]})),
        event(&json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
    );
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}/v1", listener.local_addr().expect("address"));
    thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            read_request(&mut stream);
            let _ = stream.write_all(SSE_HEAD.as_bytes());
            let _ = stream.write_all(body.as_bytes());
        }
    });
    let reply = client(&base)
        .complete(ask(true), Evidence::detached())
        .await
        .expect("an answer within the cap");
    assert_eq!(reply.content.len(), ANSWER_CAP - 10);
}

#[test]
fn zero_caps_are_refused_naming_their_key() {
    for (key, set) in [
        (
            "limits.model_answer",
            (|s: &mut ModelSettings| s.max_answer_bytes = 0) as fn(&mut ModelSettings),
        ),
        ("limits.model_body", |s: &mut ModelSettings| {
            s.max_body_bytes = 0;
        }),
    ] {
        let mut settings = ModelSettings::new(ModelEndpoint::new("http://127.0.0.1:1/v1", "m"));
        set(&mut settings);
        let error = settings.validate().expect_err("a zero cap");
        assert!(error.to_string().contains(key), "{error}");
    }
}

// ---------------------------------------------------------------------------
// An MCP server over streamable HTTP whose answer is over the limit.
// ---------------------------------------------------------------------------

/// A tool server with one tool, `big`, whose result is `bytes` bytes of text.
#[derive(Clone)]
struct BigTools;

impl ServerHandler for BigTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {"bytes": {"type": "integer"}}});
        let serde_json::Value::Object(schema) = schema else {
            unreachable!("an object")
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "big",
            "A result of `bytes` bytes.",
            schema,
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let bytes = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("bytes"))
            .and_then(serde_json::Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0);
        Ok(CallToolResult::success(vec![ContentBlock::text("z".repeat(bytes))]).into())
    }
}

/// Serves [`BigTools`] at `http://127.0.0.1:PORT/mcp`, answering with JSON
/// bodies when `json` is set, with SSE otherwise.
async fn big_tools(json: bool, shutdown: &CancellationToken) -> ToolServer {
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown.child_token())
        .with_json_response(json);
    let service = StreamableHttpService::new(
        || Ok(BigTools),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    let routes = axum::Router::new().nest_service("/mcp", service);
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, routes)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    serde_json::from_value(json!({"name": "big", "url": url})).expect("a tool server")
}

async fn call_big(client: &McpToolClient, bytes: usize) -> Result<String, ToolError> {
    client
        .call(
            ToolInvocation {
                traceparent: None,
                name: "big".into(),
                arguments: json!({"bytes": bytes}),
                idempotency_key: format!("big-{bytes}"),
            },
            Evidence::detached(),
        )
        .await
        .map(|output| output.content)
}

async fn an_mcp_answer_over_the_limit_fails_the_call_at_once(json: bool) {
    let shutdown = CancellationToken::new();
    let server = big_tools(json, &shutdown).await;
    let client = McpToolClient::for_server(&server).expect("a valid server");
    client.connect().await.expect("a session");
    assert_eq!(call_big(&client, 10).await, Ok("z".repeat(10)));
    // Bounded only so that a hang fails the test instead of stalling it: the
    // call must end as soon as the answer is read, with no lease to end it.
    let error = tokio::time::timeout(
        Duration::from_secs(120),
        call_big(&client, MAX_MESSAGE_BYTES + 1024),
    )
    .await
    .expect("the call ends; it does not hang")
    .expect_err("an answer over the limit");
    for needle in [&MAX_MESSAGE_BYTES.to_string(), "limit on one message"] {
        assert!(
            error.message.contains(needle),
            "the error does not name the limit: {error}"
        );
    }
    assert!(
        !error.retryable,
        "the same call would be as large again: {error}"
    );
    // The connection is replaced; the next call is served.
    assert_eq!(call_big(&client, 3).await, Ok("zzz".to_owned()));
    client.shutdown().await;
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_answer_over_the_limit_fails_the_call_at_once_over_http_sse() {
    an_mcp_answer_over_the_limit_fails_the_call_at_once(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_answer_over_the_limit_fails_the_call_at_once_over_http_json() {
    an_mcp_answer_over_the_limit_fails_the_call_at_once(true).await;
}

// ---------------------------------------------------------------------------
// A stdio MCP server: a real child process.
// ---------------------------------------------------------------------------

/// A stdio MCP server in Python with one tool, `big`, whose result is
/// `bytes` bytes of text: enough of the protocol for a client, no more.
const BIG_STDIO: &str = r#"
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method = message.get("method")
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"],
                  "capabilities": {"tools": {}},
                  "serverInfo": {"name": "big", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "big", "description": "A result of `bytes` bytes.",
                             "inputSchema": {"type": "object",
                                             "properties": {"bytes": {"type": "integer"}}},
                             "annotations": {"readOnlyHint": True}}]}
    elif method == "tools/call":
        size = message["params"]["arguments"]["bytes"]
        result = {"content": [{"type": "text", "text": "z" * size}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;

/// The Python server, written into `dir`, as a flow's tool server `big`.
fn big_stdio(dir: &tempfile::TempDir) -> ToolServer {
    let script = dir.path().join("big.py");
    std::fs::write(&script, BIG_STDIO).expect("the script is written");
    serde_json::from_value(json!({
        "name": "big",
        "command": ["python3", "-u", script.display().to_string()],
    }))
    .expect("a tool server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_answer_over_the_limit_fails_the_call_at_once_over_stdio() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let client = McpToolClient::for_server(&big_stdio(&dir)).expect("a valid server");
    client.connect().await.expect("the server starts");
    let first = client.server_pid().expect("a child process");
    assert_eq!(call_big(&client, 4).await, Ok("zzzz".to_owned()));
    // Without the bound rmcp drops the line and the call waits for ever;
    // the timeout only turns such a hang into a failure.
    let error = tokio::time::timeout(
        Duration::from_secs(120),
        call_big(&client, MAX_MESSAGE_BYTES + 1024),
    )
    .await
    .expect("the call ends; it does not hang")
    .expect_err("an answer over the limit");
    for needle in [
        &MAX_MESSAGE_BYTES.to_string(),
        "limit on one message",
        "one line of a stdio server",
        "'big'",
    ] {
        assert!(error.message.contains(needle), "no `{needle}` in: {error}");
    }
    assert!(
        !error.retryable,
        "the same call would be as large again: {error}"
    );
    // The server is replaced; the next call is served.
    assert_eq!(call_big(&client, 3).await, Ok("zzz".to_owned()));
    assert_ne!(client.server_pid(), Some(first), "a new server");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_15_mb_tool_result_is_truncated_for_the_model_and_the_store_with_an_event() {
    const RESULT: usize = 15_000_000;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = big_stdio(&dir);
    let client = Arc::new(McpToolClient::for_server(&server).expect("a valid server"));
    client.connect().await.expect("the server starts");
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("big", json!({"bytes": RESULT}))]),
            Turn::answer("done"),
        ],
    );
    let events = RecordingSink::new();
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_secs(60);
    assert_eq!(config.max_tool_result_bytes, DEFAULT_MAX_TOOL_RESULT_BYTES);
    let kept = DEFAULT_MAX_TOOL_RESULT_BYTES;
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model.clone()))
        .events(Arc::new(events.clone()))
        .tool_server("big", client.clone())
        .build()
        .await
        .expect("the engine builds");
    let flow: Flow = serde_json::from_value(json!({
        "name": "large-result",
        "task": "Fetch something large.",
        "max_steps": 4,
        "tools": [server],
    }))
    .expect("a valid flow");
    let mut run = engine.start(flow).await.expect("the run starts");
    let run_id = run.run_id().to_owned();
    let state = tokio::time::timeout(Duration::from_secs(120), run.wait())
        .await
        .expect("the run ends");
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");

    // The model saw the first MiB, then a marker saying how much was cut.
    let requests = model.requests_of("run");
    let seen: Vec<String> = requests[1]
        .messages
        .iter()
        .filter(|m| m.role == ChatRole::Tool)
        .map(|m| m.content.clone())
        .collect();
    let [seen] = seen.as_slice() else {
        panic!("one tool result, not {}", seen.len())
    };
    assert!(
        seen[..kept].bytes().all(|b| b == b'z'),
        "the result's start"
    );
    assert!(
        seen.len() < kept + 300,
        "{} bytes reached the model",
        seen.len()
    );
    let marker = &seen[kept..];
    assert!(
        marker.contains(&format!("{} of its {RESULT} bytes were cut", RESULT - kept)),
        "{marker}"
    );

    // An event said so, on the call's path, before the call finished.
    let all = events.events();
    let position = |name: &str| all.iter().position(|e| e.kind.name() == name);
    let truncated = position("tool_result_truncated").expect("a tool_result_truncated event");
    assert!(
        position("tool_call_finished").is_some_and(|finished| truncated < finished),
        "truncated before finished"
    );
    let event = &all[truncated];
    assert!(event.path.contains("tool_call:"), "{}", event.path);
    let EventKind::ToolResultTruncated {
        tool,
        original_bytes,
        kept_bytes,
        ..
    } = &event.kind
    else {
        unreachable!("found by its name")
    };
    assert_eq!(tool, "big");
    assert_eq!(*original_bytes, u64::try_from(RESULT).expect("small"));
    assert_eq!(*kept_bytes, u64::try_from(kept).expect("small"));
    let wire = serde_json::to_value(event).expect("serializable");
    assert_eq!(wire["kind"], "tool_result_truncated", "{wire}");

    // The store kept the truncated form, not the 15 MB.
    let calls = engine
        .store()
        .load_tool_calls(&run_id)
        .await
        .expect("the store answers");
    let stored = calls
        .iter()
        .find(|c| c.tool == "big")
        .and_then(|c| c.result.as_deref())
        .expect("the call's result is stored");
    assert_eq!(stored, seen.as_str());
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_servers_endless_stderr_line_is_kept_short() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let script = dir.path().join("noisy.py");
    std::fs::write(
        &script,
        "import sys\nsys.stderr.write('error: ' + 'x' * (8 * 1024 * 1024))\nsys.stderr.flush()\nsys.exit(1)\n",
    )
    .expect("the script is written");
    let server: ToolServer = serde_json::from_value(json!({
        "name": "noisy",
        "command": ["python3", script.display().to_string()],
    }))
    .expect("a tool server");
    let client = McpToolClient::for_server(&server).expect("a valid server");
    let error = client.connect().await.expect_err("the server exits");
    assert!(
        error.message.contains("its last words: error: xxx"),
        "{}",
        &error.message[..error.message.len().min(500)]
    );
    assert!(
        error.message.len() < 8 * 1024,
        "an 8 MiB line of standard error reached the message: {} bytes",
        error.message.len()
    );
}
