//! Replay: a run recorded in a store, played again with its recorded
//! answers, results, verdicts and timing and nothing else, on paused time;
//! and where a replay diverges, said.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::testing::{
    MemoryStore, RecordingSink, Scripted, ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct,
    Turn,
};
use leasehold_actors::{Engine, EngineConfig, Flow, RestartPolicy, RunStatus};
use leasehold_lab::Recording;
use serde_json::json;

fn config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.model_stream = Duration::from_secs(10);
    config.supervision.lease.tool_call = Duration::from_secs(10);
    config.supervision.watchdog.free_renewals = 2;
    config.restart = RestartPolicy {
        jitter: 0.0,
        ..RestartPolicy::default()
    };
    config
}

fn flow(task: &str) -> Flow {
    serde_json::from_value(json!({
        "name": "incident",
        "task": task,
        "max_steps": 5,
        "tools": [{"name": "ops", "url": "http://127.0.0.1:9/mcp"}],
    }))
    .expect("valid flow")
}

/// A run recorded on the scripted fakes: a streamed answer asks for a
/// search, whose first attempt hangs until the evaluator says INTERVENE
/// (after the ladder's two free renewals) and whose restart answers with
/// progress; then a streamed final answer.
fn recorded_run() -> Recording {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let model = ScriptedModel::new().script(
            "run",
            [
                Turn::tools([("search", json!({"q": "pool exhausted"}))])
                    .with_chunks(6, Duration::from_millis(300)),
                Turn::answer("the pool was exhausted by a leak")
                    .with_chunks(8, Duration::from_millis(200)),
            ],
        );
        let tools = ScriptedTools::new().tool(
            "search",
            Some(true),
            [
                ToolAct::Hang,
                ToolAct::Return {
                    latency: Duration::from_secs(3),
                    progress_every: Some(Duration::from_millis(500)),
                    result: "12 errors at 03:10".to_owned(),
                },
            ],
        );
        let evaluator = ScriptedEvaluator::new([Scripted::verdict("INTERVENE", "silent", "")]);
        let store = MemoryStore::new();
        let engine = Engine::builder()
            .config(config())
            .model(Arc::new(model))
            .evaluator(Arc::new(evaluator))
            .events(Arc::new(RecordingSink::new()))
            .store(Arc::new(store.clone()))
            .tool_server("ops", Arc::new(tools))
            .build()
            .await
            .expect("engine");
        let mut run = engine
            .start(flow("Why did checkout fail?"))
            .await
            .expect("starts");
        let state = run.wait().await;
        assert_eq!(state.status, RunStatus::Completed, "{state:?}");
        engine.shutdown().await;
        Recording::from_store(&store, run.run_id())
            .await
            .expect("read")
            .expect("the run")
    })
}

#[test]
fn a_recorded_run_replays_with_its_steps_calls_and_verdicts_and_no_peer() {
    let recording = recorded_run();
    let verdicts: Vec<_> = recording
        .events
        .iter()
        .filter(|e| e.kind.name() == "verdict")
        .collect();
    assert!(verdicts.len() >= 3, "the ladder's renewals, then INTERVENE");
    let report = recording.replay(config()).expect("replays");
    report.assert_reproduced();
    assert_eq!(report.steps, 2);
    assert_eq!(report.verdicts, verdicts.len());
    let said = format!("reproduced it: 2 steps and {} verdicts", verdicts.len());
    assert!(report.describe().contains(&said), "{}", report.describe());

    // Saved as JSON beside a test, it is a regression test.
    let saved = serde_json::to_string(&recording).expect("serializes");
    let read: Recording = serde_json::from_str(&saved).expect("reads back");
    read.replay(config()).expect("replays").assert_reproduced();
}

#[test]
fn a_replay_that_diverges_says_at_which_step_and_how() {
    // The flow changed: its task is not the one the recording answered.
    let mut changed = recorded_run();
    changed.flow["task"] = json!("Why did search fail?");
    let report = changed.replay(config()).expect("replays");
    assert!(!report.reproduced());
    let divergence = report.divergence.clone().expect("a divergence");
    assert_eq!((divergence.path.as_str(), divergence.step), ("run", 1));
    assert!(
        divergence.recorded.starts_with("model call Ok"),
        "{divergence:?}"
    );
    assert!(
        divergence.replayed.starts_with("model call Error"),
        "{divergence:?}"
    );
    assert!(
        report.unanswered[0].contains("Why did search fail?"),
        "{:?}",
        report.unanswered
    );
    let said = report.describe();
    assert!(said.contains("diverged at run step 1"), "{said}");

    // The lease changed: the hung search is now judged at other times, and
    // the recorded evaluator has no answer for the verdict where the
    // recording had a ladder renewal.
    let recording = recorded_run();
    let mut shorter = config();
    shorter.supervision.watchdog.free_renewals = 0;
    let report = recording.replay(shorter).expect("replays");
    let divergence = report.divergence.expect("a divergence");
    assert_eq!(
        divergence.recorded, "verdict RENEW by ladder on tool_call",
        "{divergence:?}"
    );
    assert_ne!(divergence.replayed, divergence.recorded);
}
