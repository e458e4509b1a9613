//! The MCP tool client against the real `@modelcontextprotocol/server-everything`,
//! over stdio and over streamable HTTP: progress as lease evidence, a silent
//! tool caught by the ladder and cancelled on the server, idempotency keys on
//! the wire, crashes, restarts and process cleanup.
//!
//! Real I/O on real time with short leases (400 ms). Needs the peer: run
//! `scripts/test.sh`, which installs it and sets
//! `LEASEHOLD_PEER_SERVER_EVERYTHING`; without it these tests fail.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold::{
    ChatRole, DecidedBy, Engine, EngineConfig, EventKind, Evidence, Flow, LeaseError, LeaseKind,
    LeaseSpec, RunStatus, Supervision, SupervisionConfig, ToolClient, ToolError, ToolInvocation,
    ToolOutput, ToolServer, Verdict,
    testing::{RecordingSink, ScriptedEvaluator, ScriptedModel, Turn},
    tools::{IDEMPOTENCY_KEY_META, McpToolClient},
};
use leasehold_tests::everything::{
    HttpServer, RecordingProxy, eventually, free_port, index_js, kill_process, process_alive,
    recorded_stdio, recorded_stdio_server, running_in_group, stdio_server,
};
use serde_json::{Value, json};
use tempfile::TempDir;

const SERVER: &str = "everything";
const LONG_RUNNING: &str = "trigger-long-running-operation";

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

// ---------------------------------------------------------------------------
// Set-up
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Transport {
    Stdio,
    Http,
}

/// The peer, with a record of what reached it: a stdio server whose input
/// is teed into a log, or an HTTP server behind a recording proxy.
struct Peer {
    server: ToolServer,
    log: Option<(TempDir, PathBuf)>,
    http: Option<(HttpServer, RecordingProxy)>,
}

impl Peer {
    async fn recorded(transport: Transport) -> Self {
        match transport {
            Transport::Stdio => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let log = dir.path().join("stdin.jsonl");
                Self {
                    server: recorded_stdio_server(SERVER, &log),
                    log: Some((dir, log)),
                    http: None,
                }
            }
            Transport::Http => {
                let server = HttpServer::start().await;
                let proxy = RecordingProxy::start(server.port()).await;
                Self {
                    server: proxy.tool_server(SERVER),
                    log: None,
                    http: Some((server, proxy)),
                }
            }
        }
    }

    /// The JSON-RPC messages that reached the server so far.
    fn messages(&self) -> Vec<Value> {
        match (&self.log, &self.http) {
            (Some((_, log)), _) => recorded_stdio(log),
            (_, Some((_, proxy))) => proxy.recorded(),
            _ => Vec::new(),
        }
    }

    /// The `tools/call` requests for `tool` that reached the server.
    fn calls_of(&self, tool: &str) -> Vec<Value> {
        self.messages()
            .into_iter()
            .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == tool)
            .collect()
    }

    async fn client(&self) -> McpToolClient {
        let client = McpToolClient::for_server(&self.server).expect("a valid server");
        // Started before any lease: the first call's lease must not pay for
        // starting Node.
        client.connect().await.expect("the server starts");
        client
    }
}

fn invocation(name: &str, arguments: Value, key: &str) -> ToolInvocation {
    ToolInvocation {
        traceparent: None,
        name: name.to_owned(),
        arguments,
        idempotency_key: key.to_owned(),
    }
}

async fn echo(client: &McpToolClient, message: &str) -> Result<ToolOutput, ToolError> {
    client
        .call(
            invocation("echo", json!({"message": message}), "echo-key"),
            Evidence::detached(),
        )
        .await
}

struct Rig {
    supervision: Supervision,
    events: RecordingSink,
    evaluator: ScriptedEvaluator,
}

/// A watchdog with two free renewals whose evaluator always says INTERVENE.
async fn rig() -> Rig {
    let events = RecordingSink::new();
    let evaluator = ScriptedEvaluator::always("INTERVENE");
    let mut config = SupervisionConfig::default();
    config.watchdog.free_renewals = 2;
    config.lease.max_renewals = 30;
    let supervision = Supervision::start(
        config,
        Some(Arc::new(evaluator.clone())),
        Arc::new(events.clone()),
    )
    .await
    .expect("supervision starts");
    Rig {
        supervision,
        events,
        evaluator,
    }
}

/// A 400 ms tool-call lease.
fn lease(subject: &str) -> LeaseSpec {
    lease_of(subject, 400)
}

/// A tool-call lease of `ms` milliseconds, renewed at most 30 times.
fn lease_of(subject: &str, ms: u64) -> LeaseSpec {
    LeaseSpec::new(LeaseKind::ToolCall, subject, millis(ms))
        .expect("a valid lease")
        .with_max_renewals(30)
        .in_run("run-mcp", "run/tool_call:1")
}

// ---------------------------------------------------------------------------
// Progress notifications are lease evidence
// ---------------------------------------------------------------------------

async fn progress_renews_the_lease(transport: Transport) {
    let peer = Peer::recorded(transport).await;
    let client = Arc::new(peer.client().await);
    let rig = rig().await;
    let caller = client.clone();
    // 2 s of work, a progress notification every 200 ms, under a 400 ms lease.
    let handle = rig
        .supervision
        .leases
        .supervise(lease(LONG_RUNNING), move |evidence| {
            caller.call(
                invocation(LONG_RUNNING, json!({"duration": 2, "steps": 10}), "long-1"),
                evidence,
            )
        })
        .expect("started");
    let output = handle
        .outcome()
        .await
        .expect("not ended by the lease")
        .expect("the tool answered");
    assert!(
        output.content.contains("Long running operation completed"),
        "{output:?}"
    );
    assert_eq!(rig.evaluator.calls(), 0, "progress reached the evaluator");
    let verdicts = rig.events.verdicts();
    assert!(verdicts.len() >= 3, "expiries: {verdicts:?}");
    assert!(
        verdicts.iter().all(|v| v.verdict == Verdict::Renew
            && matches!(
                v.decided_by,
                DecidedBy::Ladder | DecidedBy::Evidence | DecidedBy::Progress
            )),
        "{verdicts:?}"
    );
    assert!(
        verdicts.iter().any(|v| v.decided_by == DecidedBy::Progress),
        "no renewal on progress: {verdicts:?}"
    );
    let progress: Vec<(String, u64)> = rig
        .events
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Progress { note, reports, .. } => note.map(|note| (note, reports)),
            _ => None,
        })
        .collect();
    // Notifications every 200 ms are stored at most one a second, each
    // event saying how many it stands for and its last note, in order; over
    // HTTP the last one may race the answer and arrive after the call has
    // ended, when it is no evidence.
    let expected: Vec<String> = (1..=10).map(|n| format!("{n}/10")).collect();
    let mut rest = expected.iter();
    assert!(
        progress
            .iter()
            .all(|(note, _)| rest.by_ref().any(|e| e == note)),
        "progress notes out of order: {progress:?}"
    );
    let reports: u64 = progress.iter().map(|(_, reports)| reports).sum();
    assert!(
        (9..=10).contains(&reports) && progress.len() < 10,
        "progress: {progress:?}"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_renew_the_lease_without_the_evaluator_over_stdio() {
    progress_renews_the_lease(Transport::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_renew_the_lease_without_the_evaluator_over_http() {
    progress_renews_the_lease(Transport::Http).await;
}

/// 3 s of work reporting progress 1 … 12 of 12 under a 200 ms lease, with an
/// evaluator that would intervene: the counter advancing toward its total
/// renews every expiry it rose before, past the evidence streak, and the
/// tool completes with no evaluator call.
async fn advancing_progress_needs_no_judge(transport: Transport) {
    let peer = Peer::recorded(transport).await;
    let client = Arc::new(peer.client().await);
    let rig = rig().await;
    let caller = client.clone();
    let handle = rig
        .supervision
        .leases
        .supervise(lease_of(LONG_RUNNING, 200), move |evidence| {
            caller.call(
                invocation(LONG_RUNNING, json!({"duration": 3, "steps": 12}), "long-12"),
                evidence,
            )
        })
        .expect("started");
    let output = handle
        .outcome()
        .await
        .expect("not ended by the lease")
        .expect("the tool answered");
    assert!(
        output.content.contains("Long running operation completed"),
        "{output:?}"
    );
    let verdicts = rig.events.verdicts();
    assert_eq!(rig.evaluator.calls(), 0, "{verdicts:#?}");
    let by_progress: Vec<_> = verdicts
        .iter()
        .filter(|v| v.decided_by == DecidedBy::Progress)
        .collect();
    // More expiries than the ladder and a streak of three could renew.
    assert!(verdicts.len() > 5, "{verdicts:#?}");
    assert!(by_progress.len() >= 4, "{verdicts:#?}");
    for verdict in &by_progress {
        let progress = verdict.evidence.progress.expect("a progress value");
        assert!(progress.advanced, "{verdict:?}");
        assert_eq!(progress.total, Some(12.0), "{verdict:?}");
    }
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advancing_progress_completes_under_a_short_lease_with_no_evaluator_call_over_stdio() {
    advancing_progress_needs_no_judge(Transport::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advancing_progress_completes_under_a_short_lease_with_no_evaluator_call_over_http() {
    advancing_progress_needs_no_judge(Transport::Http).await;
}

// ---------------------------------------------------------------------------
// A silent tool: the ladder, the evaluator's INTERVENE, a cancel to the server
// ---------------------------------------------------------------------------

async fn silent_tool_is_intervened_and_cancelled(transport: Transport) {
    let peer = Peer::recorded(transport).await;
    let client = Arc::new(peer.client().await);
    let rig = rig().await;
    let caller = client.clone();
    let begun = tokio::time::Instant::now();
    let handle = rig
        .supervision
        .leases
        .supervise(lease(LONG_RUNNING), move |evidence| {
            caller.call(
                invocation(
                    LONG_RUNNING,
                    json!({"duration": 3600, "steps": 1}),
                    "silent-1",
                ),
                evidence,
            )
        })
        .expect("started");
    let outcome = handle.outcome().await;
    assert!(
        matches!(outcome, Err(LeaseError::Intervened { .. })),
        "{outcome:?}"
    );
    let elapsed = begun.elapsed();
    assert!(
        elapsed >= millis(1200) && elapsed < millis(3000),
        "intervened after {elapsed:?}"
    );
    let decided: Vec<(Verdict, DecidedBy)> = rig
        .events
        .verdicts()
        .iter()
        .map(|v| (v.verdict, v.decided_by))
        .collect();
    assert_eq!(
        decided,
        [
            (Verdict::Renew, DecidedBy::Ladder),
            (Verdict::Renew, DecidedBy::Ladder),
            (Verdict::Intervene, DecidedBy::Evaluator),
        ]
    );
    assert_eq!(rig.evaluator.calls(), 1);
    assert_eq!(rig.evaluator.requests()[0].evidence.count, 0);

    // The server was told.
    let call = peer
        .calls_of(LONG_RUNNING)
        .pop()
        .expect("the call reached the server");
    let id = call["id"].clone();
    let cancelled = eventually(millis(2000), || {
        peer.messages()
            .iter()
            .any(|m| m["method"] == "notifications/cancelled" && m["params"]["requestId"] == id)
    })
    .await;
    assert!(cancelled, "no notifications/cancelled for request {id}");
    // The connection outlives the cancelled call.
    assert_eq!(
        echo(&client, "still here").await.expect("echo").content,
        "Echo: still here"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_tool_is_intervened_by_the_ladder_and_cancelled_on_the_server_over_stdio() {
    silent_tool_is_intervened_and_cancelled(Transport::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_tool_is_intervened_by_the_ladder_and_cancelled_on_the_server_over_http() {
    silent_tool_is_intervened_and_cancelled(Transport::Http).await;
}

// ---------------------------------------------------------------------------
// Calls, keys, definitions
// ---------------------------------------------------------------------------

async fn echo_round_trips(transport: Transport) {
    let peer = Peer::recorded(transport).await;
    let client = peer.client().await;
    let output = echo(&client, "hello, lease").await.expect("echo answers");
    assert_eq!(
        output,
        ToolOutput {
            content: "Echo: hello, lease".into(),
            is_error: false
        }
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_round_trips_over_stdio() {
    echo_round_trips(Transport::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_round_trips_over_http() {
    echo_round_trips(Transport::Http).await;
}

async fn idempotency_key_reaches_the_server(transport: Transport) {
    let peer = Peer::recorded(transport).await;
    let client = peer.client().await;
    client
        .call(
            invocation("echo", json!({"message": "once"}), "run-7/step-3/0"),
            Evidence::detached(),
        )
        .await
        .expect("echo answers");
    let call = peer
        .calls_of("echo")
        .pop()
        .expect("the call reached the server");
    let meta = &call["params"]["_meta"];
    assert_eq!(meta[IDEMPOTENCY_KEY_META], "run-7/step-3/0", "{call}");
    assert!(
        !meta["progressToken"].is_null(),
        "every call carries a progress token: {call}"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_and_progress_token_reach_the_server_in_meta_over_stdio() {
    idempotency_key_reaches_the_server(Transport::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_and_progress_token_reach_the_server_in_meta_over_http() {
    idempotency_key_reaches_the_server(Transport::Http).await;
}

async fn list_tools_yields_definitions(transport: Transport) {
    let peer = Peer::recorded(transport).await;
    let client = peer.client().await;
    let tools = client.list_tools().await.expect("tools listed");
    let echo = tools
        .iter()
        .find(|t| t.name == "echo")
        .expect("an echo tool");
    assert_eq!(echo.description, "Echoes back the input string");
    assert_eq!(echo.input_schema["type"], "object");
    assert_eq!(echo.input_schema["properties"]["message"]["type"], "string");
    assert_eq!(echo.idempotent, Some(true), "from its idempotentHint");
    assert!(tools.iter().any(|t| t.name == LONG_RUNNING), "{tools:?}");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_tools_yields_definitions_with_schemas_and_idempotency_over_stdio() {
    list_tools_yields_definitions(Transport::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_tools_yields_definitions_with_schemas_and_idempotency_over_http() {
    list_tools_yields_definitions(Transport::Http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_idempotency_overrides_the_servers_hint() {
    let mut server = stdio_server(SERVER);
    server.idempotent.insert("echo".into(), false);
    let client = McpToolClient::for_server(&server).expect("a valid server");
    let tools = client.list_tools().await.expect("tools listed");
    let echo = tools.iter().find(|t| t.name == "echo").expect("echo");
    assert_eq!(echo.idempotent, Some(false));
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_errors_are_results_the_model_sees() {
    let client = McpToolClient::for_server(&stdio_server(SERVER)).expect("a valid server");
    let unknown = client
        .call(
            invocation("no-such-tool", json!({}), "k"),
            Evidence::detached(),
        )
        .await
        .expect("an answer, not a failure");
    assert!(unknown.is_error, "{unknown:?}");
    assert!(unknown.content.contains("no-such-tool"), "{unknown:?}");
    let invalid = client
        .call(
            invocation("echo", json!({"message": 5}), "k"),
            Evidence::detached(),
        )
        .await
        .expect("an answer, not a failure");
    assert!(invalid.is_error, "{invalid:?}");
    let not_an_object = client
        .call(invocation("echo", json!(["x"]), "k"), Evidence::detached())
        .await
        .expect_err("refused before sending");
    assert!(!not_an_object.retryable);
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_of_the_flow_reaches_the_stdio_server() {
    let mut server = stdio_server(SERVER);
    server
        .env
        .insert("LEASEHOLD_PROBE".into(), "lease-not-deadline".into());
    let client = McpToolClient::for_server(&server).expect("a valid server");
    let output = client
        .call(invocation("get-env", json!({}), "k"), Evidence::detached())
        .await
        .expect("get-env answers");
    assert!(
        output
            .content
            .contains(r#""LEASEHOLD_PROBE": "lease-not-deadline""#),
        "{}",
        output.content
    );
    client.shutdown().await;
}

// ---------------------------------------------------------------------------
// Crashes, restarts, cleanup
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_stdio_server_fails_the_next_call_clearly_then_is_restarted() {
    let client = McpToolClient::for_server(&stdio_server(SERVER)).expect("a valid server");
    client.connect().await.expect("starts");
    let first = client.server_pid().expect("a child process");
    kill_process(first);
    assert!(eventually(millis(2000), || !process_alive(first)).await);

    // Whether the dead server is noticed before the call is sent or after
    // depends on how far the kernel has got with it; either way the error
    // names the server and how it ended.
    let error = echo(&client, "anyone?")
        .await
        .expect_err("the server is dead");
    assert!(error.retryable);
    assert!(
        error.message.contains("MCP server 'everything' exited")
            && error.message.contains("SIGKILL")
            && error.message.contains("restarted on the next call"),
        "{}",
        error.message
    );

    let output = echo(&client, "back").await.expect("restarted");
    assert_eq!(output.content, "Echo: back");
    let second = client.server_pid().expect("a new child process");
    assert_ne!(first, second);
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_server_crash_fails_the_call_in_flight_with_an_unknown_outcome() {
    let client = Arc::new(McpToolClient::for_server(&stdio_server(SERVER)).expect("valid"));
    client.connect().await.expect("starts");
    let pid = client.server_pid().expect("a child process");
    let caller = client.clone();
    let call = tokio::spawn(async move {
        caller
            .call(
                invocation(LONG_RUNNING, json!({"duration": 3600, "steps": 1}), "k"),
                Evidence::detached(),
            )
            .await
    });
    tokio::time::sleep(millis(300)).await;
    kill_process(pid);
    let error = tokio::time::timeout(millis(3000), call)
        .await
        .expect("the call in flight ends")
        .expect("no panic")
        .expect_err("the server died under it");
    assert!(error.retryable);
    assert!(
        error.message.contains("MCP server 'everything' exited")
            && error.message.contains("outcome is unknown"),
        "{}",
        error.message
    );
    // The failure in flight was the report: the next call starts it again.
    assert_eq!(
        echo(&client, "again").await.expect("restarted").content,
        "Echo: again"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_crash_fails_the_call_in_flight_with_an_unknown_outcome() {
    let mut server = HttpServer::start().await;
    let client = Arc::new(McpToolClient::for_server(&server.tool_server(SERVER)).expect("valid"));
    client.connect().await.expect("a session");
    let caller = client.clone();
    let call = tokio::spawn(async move {
        caller
            .call(
                invocation(LONG_RUNNING, json!({"duration": 3600, "steps": 1}), "k"),
                Evidence::detached(),
            )
            .await
    });
    tokio::time::sleep(millis(300)).await;
    server.kill();
    // The broken response stream is resumed a few times (about 1.4 s),
    // then the call fails rather than hang.
    let error = tokio::time::timeout(millis(4000), call)
        .await
        .expect("the call in flight ends")
        .expect("no panic")
        .expect_err("the server died under it");
    assert!(error.retryable);
    assert!(
        error.message.contains("MCP server 'everything'")
            && error.message.contains("outcome is unknown"),
        "{}",
        error.message
    );
    server.restart().await;
    assert_eq!(
        echo(&client, "again").await.expect("a new session").content,
        "Echo: again"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_http_server_fails_the_next_call_clearly_and_the_client_reconnects_when_it_is_back()
{
    let mut server = HttpServer::start().await;
    let client = McpToolClient::for_server(&server.tool_server(SERVER)).expect("valid");
    assert_eq!(
        echo(&client, "one").await.expect("echo").content,
        "Echo: one"
    );

    server.kill();
    let error = echo(&client, "two").await.expect_err("the server is dead");
    assert!(error.retryable);
    assert!(
        error.message.contains("MCP server 'everything'")
            && error.message.contains(&server.url())
            && error.message.contains("the call was not sent")
            && error.message.contains("reconnected on the next call"),
        "{}",
        error.message
    );

    server.restart().await;
    assert_eq!(
        echo(&client, "three").await.expect("a new session").content,
        "Echo: three"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_the_stdio_servers_whole_process_group() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // sh, tee and node: a server that started processes of its own.
    let server = recorded_stdio_server(SERVER, &dir.path().join("stdin.jsonl"));
    let client = McpToolClient::for_server(&server).expect("valid");
    client.connect().await.expect("starts");
    let leader = client.server_pid().expect("a child process");
    assert!(
        running_in_group(leader).len() >= 3,
        "group: {:?}",
        running_in_group(leader)
    );
    client.shutdown().await;
    assert!(!process_alive(leader), "the server outlived shutdown()");
    assert!(
        eventually(millis(1000), || running_in_group(leader).is_empty()).await,
        "left running: {:?}",
        running_in_group(leader)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_client_kills_the_stdio_server() {
    let client = McpToolClient::for_server(&stdio_server(SERVER)).expect("valid");
    client.connect().await.expect("starts");
    let pid = client.server_pid().expect("a child process");
    assert!(process_alive(pid));
    drop(client);
    assert!(
        eventually(millis(2000), || !process_alive(pid)).await,
        "the server outlived its client"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_gives_an_error_naming_it() {
    let missing: ToolServer = serde_json::from_value(json!({
        "name": "ghost",
        "command": ["node", index_js().with_file_name("no-such-entry.js").display().to_string()],
    }))
    .expect("valid");
    let client = McpToolClient::for_server(&missing).expect("valid");
    let error = client.list_tools().await.expect_err("it cannot start");
    assert!(error.retryable);
    assert!(
        error.message.contains("MCP server 'ghost'")
            && error.message.contains("exited during the handshake")
            && error.message.contains("Cannot find module"),
        "{}",
        error.message
    );

    let nowhere: ToolServer = serde_json::from_value(json!({
        "name": "nowhere",
        "command": ["/nonexistent/leasehold-mcp-server"],
    }))
    .expect("valid");
    let client = McpToolClient::for_server(&nowhere).expect("valid");
    let error = client.connect().await.expect_err("no such program");
    assert!(
        error
            .message
            .contains("could not start MCP server 'nowhere'"),
        "{}",
        error.message
    );

    let url = format!("http://127.0.0.1:{}/mcp", free_port());
    let unreachable: ToolServer =
        serde_json::from_value(json!({"name": "offline", "url": url})).expect("valid");
    let client = McpToolClient::for_server(&unreachable).expect("valid");
    let error = client.connect().await.expect_err("nobody listens");
    assert!(error.retryable);
    assert!(
        error.message.contains("MCP server 'offline'")
            && error.message.contains(&url)
            && error.message.contains("Connection refused"),
        "{}",
        error.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_the_handshake_is_given_up_and_killed() {
    // A program that never speaks MCP, marked by an unusual argument.
    let mute: ToolServer = serde_json::from_value(json!({
        "name": "mute",
        "command": ["sleep", "41.7"],
    }))
    .expect("valid");
    let client = McpToolClient::for_server(&mute)
        .expect("valid")
        .with_handshake_timeout(millis(300));
    let error = client.connect().await.expect_err("no handshake");
    assert!(error.retryable);
    assert!(
        error.message.contains(
            "MCP server 'mute' (`sleep 41.7`) did not complete the handshake within 300 ms"
        ),
        "{}",
        error.message
    );
    let sleeping = || {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmdline| cmdline == b"sleep\x0041.7\x00")
            })
            .any(process_alive)
    };
    assert!(
        eventually(millis(1000), || !sleeping()).await,
        "the mute server was left running"
    );
}

// ---------------------------------------------------------------------------
// Through the engine
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_calls_a_real_mcp_tool_and_its_model_sees_the_result() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let log = dir.path().join("stdin.jsonl");
    let server = recorded_stdio_server(SERVER, &log);
    let client = Arc::new(McpToolClient::for_server(&server).expect("valid"));
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("echo", json!({"message": "from the run"}))]),
            Turn::answer("done"),
        ],
    );
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_secs(10);
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model.clone()))
        .events(Arc::new(RecordingSink::new()))
        .tool_server(SERVER, client.clone())
        .build()
        .await
        .expect("the engine builds");
    let flow: Flow = serde_json::from_value(json!({
        "name": "echo-once",
        "task": "Echo something.",
        "max_steps": 4,
        "tools": [server],
    }))
    .expect("a valid flow");
    let mut run = engine.start(flow).await.expect("the run starts");
    let state = tokio::time::timeout(Duration::from_secs(4), run.wait())
        .await
        .expect("the run ends");
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");

    let requests = model.requests_of("run");
    let offered = &requests[0].tools;
    assert!(
        offered
            .iter()
            .any(|t| t.name == "echo" && t.idempotent == Some(true)),
        "the model was not offered the server's tools: {offered:?}"
    );
    let results: Vec<&str> = requests[1]
        .messages
        .iter()
        .filter(|m| m.role == ChatRole::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(results, ["Echo: from the run"]);
    let call = recorded_stdio(&log)
        .into_iter()
        .find(|m| m["method"] == "tools/call")
        .expect("the call reached the server");
    assert!(
        call["params"]["_meta"][IDEMPOTENCY_KEY_META]
            .as_str()
            .is_some_and(|key| !key.is_empty()),
        "{call}"
    );
    client.shutdown().await;
}
