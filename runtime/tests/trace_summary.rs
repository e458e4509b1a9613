//! A run's trace counts agree with each other: an operation the renewal
//! cap stopped is an `INTERVENE` verdict (by `cap`) and counts among the
//! intervened, as `runs trace` and the API show them.

use std::sync::Arc;
use std::time::Duration;

use leasehold::trace::TraceSummary;
use leasehold::{Engine, EngineConfig, Flow};
use leasehold_actors::testing::{
    MemoryStore, RecordingSink, ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct, Turn,
};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn operations_the_renewal_cap_stopped_count_among_the_intervened() {
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("search", json!({"q": "logs"}))]),
            Turn::answer("gave up on the search"),
        ],
    );
    // A search that never answers in time: renewed until the cap stops it.
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("late", Duration::from_secs(3600))],
    );
    let events = RecordingSink::new();
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_secs(1);
    config.supervision.lease.max_renewals = 2;
    config.supervision.watchdog.free_renewals = 0;
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model))
        .evaluator(Arc::new(ScriptedEvaluator::always("RENEW")))
        .events(Arc::new(events.clone()))
        .store(Arc::new(MemoryStore::new()))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine");
    let flow: Flow = serde_json::from_value(json!({
        "name": "capped", "task": "Search.", "max_steps": 4,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}]
    }))
    .expect("flow");
    let mut run = engine.start(flow).await.expect("starts");
    run.wait().await;
    let logged = events.events();
    assert!(
        logged
            .iter()
            .any(|e| e.kind.name() == "renewal_cap_reached"),
        "{:?}",
        events.kinds()
    );
    let summary = TraceSummary::of(&logged);
    let intervene_verdicts = summary
        .verdicts_by_verdict
        .get("INTERVENE")
        .copied()
        .unwrap_or(0);
    assert!(intervene_verdicts >= 1, "{summary:?}");
    assert_eq!(summary.intervened, intervene_verdicts, "{summary:?}");
    engine.shutdown().await;
}
