//! `Engine::shutdown` stops its runs concurrently: a run whose tool server
//! does not stop holds none of the others up, and the whole shutdown takes
//! at most one `RUN_STOP_GRACE`, on paused time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_actors::{
    BoxFuture, Engine, Evidence, Flow, MemoryStore, RUN_STOP_GRACE, RunStatus, ToolClient,
    ToolDefinition, ToolError, ToolFactory, ToolInvocation, ToolOutput,
    testing::{ScriptedModel, ScriptedTools, ToolAct, Turn},
};
use serde_json::json;

/// A run's own tool server that never finishes stopping: its `shutdown` is
/// counted, then hangs.
struct StuckServer {
    tools: ScriptedTools,
    stops_asked: Arc<AtomicUsize>,
}

impl ToolClient for StuckServer {
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>> {
        self.tools.list_tools()
    }

    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        self.tools.call(invocation, evidence)
    }

    fn shutdown(&self) -> BoxFuture<'static, ()> {
        self.stops_asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::pending())
    }
}

fn flow() -> Flow {
    serde_json::from_value(json!({
        "name": "stuck",
        "task": "Search.",
        "max_steps": 5,
        "tools": [{"name": "own", "command": ["never-started"]}]
    }))
    .expect("valid flow")
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_runs_concurrently_within_one_grace_when_their_tool_servers_hang() {
    const RUNS: usize = 3;
    let store = MemoryStore::new();
    let tools = ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang]);
    let stops_asked = Arc::new(AtomicUsize::new(0));
    let factory: ToolFactory = {
        let tools = tools.clone();
        let stops_asked = Arc::clone(&stops_asked);
        Arc::new(move |_server| {
            Ok(Arc::new(StuckServer {
                tools: tools.clone(),
                stops_asked: Arc::clone(&stops_asked),
            }) as Arc<dyn ToolClient>)
        })
    };
    let engine = Engine::builder()
        .store(Arc::new(store.clone()))
        .model(Arc::new(ScriptedModel::new().script(
            "run",
            (0..RUNS).map(|_| Turn::tools([("search", json!({"q": "x"}))])),
        )))
        .tool_factory(factory)
        .build()
        .await
        .expect("engine builds");
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        runs.push(engine.start(flow()).await.expect("run starts"));
    }
    while tools.calls("search") < RUNS {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let began = tokio::time::Instant::now();
    engine.shutdown().await;
    let took = began.elapsed();

    assert_eq!(
        stops_asked.load(Ordering::SeqCst),
        RUNS,
        "every run was asked to stop its tool server"
    );
    assert!(
        took <= RUN_STOP_GRACE + Duration::from_secs(1),
        "{RUNS} stuck runs took {took:?} to stop, more than one grace ({RUN_STOP_GRACE:?})"
    );
    for run in &runs {
        let record = store.run(run.run_id()).expect("the run");
        assert_eq!(record.status, RunStatus::Running, "stopped in place");
    }
}
