//! The whole loop through the real clients: a run whose model is llmock (an
//! OpenAI-compatible server) asks for a tool of server-everything (a real MCP
//! server), and runs to completion.

use std::sync::Arc;
use std::time::Duration;

use leasehold::{
    CallOutcome, Engine, EventKind, Flow, RunStatus, ToolClient,
    model::{ModelEndpoint, ModelSettings, OpenAiClient},
    testing::RecordingSink,
    tools::McpToolClient,
};
use leasehold_tests::everything;
use leasehold_tests::llmock::Llmock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_whose_llmock_model_calls_a_server_everything_tool_runs_to_completion() {
    let model_server = Llmock::start().await;
    let server = everything::stdio_server("everything");
    let mcp = McpToolClient::for_server(&server).expect("a valid server entry");
    let offered: Vec<String> = mcp
        .list_tools()
        .await
        .expect("server-everything lists its tools")
        .into_iter()
        .map(|d| d.name)
        .collect();
    let mcp = Arc::new(mcp);
    let mut settings =
        ModelSettings::new(ModelEndpoint::new(model_server.base_url(), "gpt-4o-mini"));
    settings.idle_timeout = Duration::from_secs(5);
    let model = OpenAiClient::new(settings).expect("the model client builds");
    let ledger = model.ledger().clone();
    let events = RecordingSink::new();
    let engine = Engine::builder()
        .model(Arc::new(model))
        .tool_server("everything", mcp.clone())
        .events(Arc::new(events.clone()))
        .build()
        .await
        .expect("the engine builds");
    let flow: Flow = serde_json::from_value(serde_json::json!({
        "name": "whole-loop",
        "task": "Use a tool, then answer.",
        "max_steps": 4,
        "tools": [server]
    }))
    .expect("a valid flow");

    run_to_completion(&engine, flow).await;

    let finished: Vec<(String, CallOutcome)> = events
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::ToolCallFinished { tool, outcome, .. } => Some((tool, outcome)),
            _ => None,
        })
        .collect();
    assert!(!finished.is_empty(), "the model called no tool");
    for (tool, outcome) in &finished {
        assert!(
            offered.contains(tool),
            "`{tool}` is not a server-everything tool"
        );
        assert_eq!(*outcome, CallOutcome::Ok);
    }
    // The tool's result went back to llmock, which then answered.
    let journal = model_server.requests().await;
    assert!(journal.len() >= 2, "{journal:?}");
    let last = &journal.last().expect("requests")["body"]["messages"];
    assert!(
        last.as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool")),
        "the tool's result did not reach the model: {last}"
    );
    assert!(
        ledger.of("run").output_tokens > 0,
        "usage is recorded for the run"
    );
    mcp.shutdown().await;
}

/// A client of llmock's model `gpt-4o-mini`.
fn model_of(server: &Llmock) -> OpenAiClient {
    OpenAiClient::new(ModelSettings::new(ModelEndpoint::new(
        server.base_url(),
        "gpt-4o-mini",
    )))
    .expect("the model client builds")
}

/// Starts `flow` on `engine` and waits, at most a minute, for it to
/// complete.
async fn run_to_completion(engine: &Engine, flow: Flow) {
    let mut run = engine.start(flow).await.expect("the run starts");
    let state = tokio::time::timeout(Duration::from_secs(60), run.wait())
        .await
        .expect("the run ends within a minute");
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
}

/// Delegates to an MCP client and remembers its server's process id.
struct Watched {
    inner: Arc<McpToolClient>,
    pid: Arc<std::sync::Mutex<Option<u32>>>,
}

impl ToolClient for Watched {
    fn list_tools(
        &self,
    ) -> leasehold::BoxFuture<'static, Result<Vec<leasehold::ToolDefinition>, leasehold::ToolError>>
    {
        let (inner, pid) = (self.inner.clone(), self.pid.clone());
        Box::pin(async move {
            let listed = inner.list_tools().await;
            *pid.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = inner.server_pid();
            listed
        })
    }

    fn call(
        &self,
        invocation: leasehold::ToolInvocation,
        evidence: leasehold::Evidence,
    ) -> leasehold::BoxFuture<'static, Result<leasehold::ToolOutput, leasehold::ToolError>> {
        ToolClient::call(&*self.inner, invocation, evidence)
    }

    fn shutdown(&self) -> leasehold::BoxFuture<'static, ()> {
        ToolClient::shutdown(&*self.inner)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_own_mcp_server_process_ends_with_the_run() {
    let model_server = Llmock::start().await;
    let server = everything::stdio_server("everything");
    let pid = Arc::new(std::sync::Mutex::new(None));
    let seen = pid.clone();
    let factory: leasehold::ToolFactory = Arc::new(move |server| {
        let client = McpToolClient::for_server(server).map_err(|e| e.to_string())?;
        Ok(Arc::new(Watched {
            inner: Arc::new(client),
            pid: seen.clone(),
        }) as Arc<dyn ToolClient>)
    });
    let model = model_of(&model_server);
    let engine = Engine::builder()
        .model(Arc::new(model))
        .tool_factory(factory)
        .build()
        .await
        .expect("the engine builds");
    let flow: Flow = serde_json::from_value(serde_json::json!({
        "name": "own-servers", "task": "Use a tool, then answer.", "max_steps": 4, "tools": [server]
    }))
    .expect("a valid flow");
    run_to_completion(&engine, flow).await;
    let pid = pid
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .expect("the run started its own server");
    assert!(
        everything::eventually(Duration::from_secs(5), || !everything::process_alive(pid)).await,
        "the run's MCP server (pid {pid}) outlived the run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_closes_its_own_mcp_sessions_before_it_reports_its_end() {
    let model_server = Llmock::start().await;
    let mcp_server = everything::HttpServer::start().await;
    let proxy = everything::RecordingProxy::start(mcp_server.port()).await;
    let model = model_of(&model_server);
    let engine = Engine::builder()
        .model(Arc::new(model))
        .tool_factory(McpToolClient::factory(Duration::from_secs(30)))
        .build()
        .await
        .expect("the engine builds");
    let flow: Flow = serde_json::from_value(serde_json::json!({
        "name": "own-sessions", "task": "Use a tool, then answer.", "max_steps": 4,
        "tools": [proxy.tool_server("everything")]
    }))
    .expect("a valid flow");
    run_to_completion(&engine, flow).await;
    // Whoever hears of the end may stop the server at once: the session
    // is already gone, so nothing fails to delete it afterwards.
    let sent = proxy.sent_text();
    assert!(
        sent.contains("DELETE /mcp"),
        "the session was not deleted before the run reported its end:\n{sent}"
    );
}
