//! Boot of an executor: orphans are always reconciled, resumed only when
//! `LEASEHOLD_RESUME_ON_BOOT` says so.

use std::sync::Arc;
use std::time::Duration;

use leasehold::engine::{Engine, EngineConfig};
use leasehold::executor::boot;
use leasehold::flow::Flow;
use leasehold::memory::MemoryStore;
use leasehold::ports::RunStatus;
use leasehold::testing::{ManualClock, ScriptedModel, ScriptedTools, ToolAct, Turn};

async fn engine(
    owner: &str,
    store: &MemoryStore,
    clock: &ManualClock,
    model: ScriptedModel,
) -> Engine {
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("hit", Duration::from_secs(30))],
    );
    Engine::builder()
        .config(EngineConfig::default())
        .owner_id(owner)
        .store(Arc::new(store.clone()))
        .clock(Arc::new(clock.clone()))
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine")
}

fn flow() -> Flow {
    serde_json::from_value(serde_json::json!({
        "name": "boot", "task": "t", "max_steps": 3,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}]
    }))
    .expect("flow")
}

#[tokio::test(start_paused = true)]
async fn boot_marks_orphans_and_resumes_them_only_when_told() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let search = || Turn::tools([("search", serde_json::json!({}))]);
    let a = engine(
        "a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [search()]),
    )
    .await;
    let run = a.start(flow()).await.expect("started");
    let run_id = run.run_id().to_owned();
    tokio::time::sleep(Duration::from_secs(1)).await;
    clock.advance(Duration::from_secs(91));

    let b = engine(
        "b",
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::answer("resumed")]),
    )
    .await;
    let first = boot(&b, false).await.expect("boot");
    assert_eq!(first.orphaned, vec![run_id.clone()]);
    assert!(first.resumed.is_empty(), "resume on boot is off by default");
    assert_eq!(
        store.run(&run_id).map(|r| r.status),
        Some(RunStatus::Orphaned)
    );

    let mut second = boot(&b, true).await.expect("boot");
    assert_eq!(second.resumed.len(), 1);
    let state = second.resumed[0].wait().await;
    assert_eq!(state.answer.as_deref(), Some("resumed"));
    assert_eq!(
        store.run(&run_id).map(|r| (r.status, r.fence)),
        Some((RunStatus::Completed, 2))
    );
}
