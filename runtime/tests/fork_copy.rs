//! A fork whose copy is cut in its middle, on the sled store: the fork's
//! record and its parent's call are written, none of its snapshots and
//! nothing of its log; taken on again, its copy is made whole and its
//! lineage (`run_forked`, `tool_call_replayed`) is logged exactly once, in
//! the same append as on every other store. (The memory store's case is
//! `actors/tests/fork.rs`; PostgreSQL's, with a real process killed,
//! `cli/tests/fork.rs`.)
//!
//! On the real clock, with the scripted model and tools: the run takes a
//! few tens of milliseconds.

use std::sync::Arc;
use std::time::Duration;

use leasehold::store::{SledConfig, SledStore};
use leasehold::testing::faults::{Faults, FaultyStore};
use leasehold::testing::{ScriptedModel, ScriptedTools, ToolAct, Turn};
use leasehold::{Engine, EngineError, Flow, ForkSpec, RunStatus, Store};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sled_a_fork_cut_short_mid_copy_is_resumed_with_its_lineage_logged_once() {
    let dir = tempfile::tempdir().expect("dir");
    let sled: Arc<dyn Store> =
        Arc::new(SledStore::open(SledConfig::new(dir.path().join("runs"))).expect("sled opens"));
    let faults = Faults::none().only("saving a snapshot");
    let store = Arc::new(FaultyStore::new(Arc::clone(&sled), faults.clone()));
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("charge", json!({"order": 7}))]),
            Turn::answer("charged"),
            Turn::answer("facturé"),
        ],
    );
    let tools = ScriptedTools::new().tool(
        "charge",
        Some(false),
        [ToolAct::returns("charged 7", Duration::from_millis(10))],
    );
    let engine = Engine::builder()
        .model(Arc::new(model.clone()))
        .store(store.clone())
        .tool_server("local", Arc::new(tools.clone()))
        .build()
        .await
        .expect("engine builds");
    let flow: Flow = serde_json::from_value(json!({
        "name": "orders", "task": "Settle order 7.", "max_steps": 6,
        "tools": [{"name": "local"}]
    }))
    .expect("a flow");
    let mut run = engine.start(flow).await.expect("starts");
    assert_eq!(run.wait().await.status, RunStatus::Completed);
    let parent = run.run_id().to_owned();

    // The executor "dies" at the copy's first snapshot.
    faults.refuse_writes(true);
    let spec = ForkSpec::root(2).with_guidance("Answer in French.");
    let cut = engine.fork(&parent, spec).await;
    faults.refuse_writes(false);
    assert!(matches!(cut, Err(EngineError::Store(_))), "{cut:?}");
    let fork_id = sled
        .list_runs()
        .await
        .expect("runs")
        .into_iter()
        .find(|r| r.fork.is_some())
        .expect("the fork's record")
        .run_id;
    assert_eq!(
        sled.load_tool_calls(&fork_id).await.expect("calls").len(),
        1
    );
    assert!(sled.load_events(&fork_id, 0).await.expect("log").is_empty());

    let mut fork = engine.resume(&fork_id).await.expect("taken on");
    let ended = fork.wait().await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:?}");
    assert_eq!(
        tools.calls("charge"),
        1,
        "the parent's call was not sent again"
    );
    let log = sled.load_events(&fork_id, 0).await.expect("log");
    let kinds: Vec<&str> = log.iter().map(|e| e.kind.name()).collect();
    let count = |name: &str| kinds.iter().filter(|k| **k == name).count();
    assert_eq!(kinds.first(), Some(&"run_forked"), "{kinds:?}");
    assert_eq!(count("run_forked"), 1, "{kinds:?}");
    assert_eq!(count("tool_call_replayed"), 1, "{kinds:?}");
    assert_eq!(count("run_resumed"), 0, "{kinds:?}");
    engine.shutdown().await;
}
