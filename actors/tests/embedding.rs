//! What an embedder relies on when a process restarts or many runs share
//! an engine: a stable owner id, a pause read back after a restart, and
//! each run's own event stream.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::prelude::*;
use leasehold_actors::testing::{
    ManualClock, Scripted, ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct, Turn,
};
use leasehold_actors::{MemoryStore, OwnerId};
use serde_json::json;

fn config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_secs(10);
    config.run_lease_ttl = Duration::from_secs(90);
    config
}

/// An engine on `store` with the builder's default owner id.
async fn engine(
    store: &MemoryStore,
    clock: &ManualClock,
    model: ScriptedModel,
    tools: ScriptedTools,
    evaluator: Option<ScriptedEvaluator>,
) -> Engine {
    let mut builder = Engine::builder()
        .config(config())
        .store(Arc::new(store.clone()))
        .clock(Arc::new(clock.clone()))
        .model(Arc::new(model))
        .tool_server("ops", Arc::new(tools));
    if let Some(evaluator) = evaluator {
        builder = builder.evaluator(Arc::new(evaluator));
    }
    builder.build().await.expect("builds")
}

fn flow() -> Flow {
    Flow::builder("deploy", "Deploy the release.")
        .max_steps(5)
        .tool_server(ToolServer::named("ops").idempotent("deploy", false))
        .build()
        .expect("a valid flow")
}

#[tokio::test(start_paused = true)]
async fn a_restarted_process_with_the_default_owner_id_resumes_its_paused_run_at_once_and_reads_its_pause()
 {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let first = engine(
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::tools([("deploy", json!({}))])]),
        ScriptedTools::new().tool("deploy", Some(false), [ToolAct::Hang]),
        Some(ScriptedEvaluator::new([Scripted::verdict(
            "ESCALATE",
            "the deploy is silent",
            "",
        )])),
    )
    .await;
    assert_eq!(first.owner_id(), OwnerId::of_program().to_string());
    let mut run = first.start(flow()).await.expect("starts");
    let paused = run.paused().await;
    assert_eq!(paused.status, RunStatus::WaitingHuman);
    let pause = paused.paused.clone().expect("why it waits");
    let run_id = run.run_id().to_owned();
    // The process dies: nothing is released, and the run's lease is still
    // live on the wall clock (which has not moved).
    drop(run);
    drop(first);

    let restarted = engine(
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::answer("rolled back")]),
        ScriptedTools::new(),
        None,
    )
    .await;
    // The same owner: claimed at once, not `Held` until the lease ends.
    let mut resumed = restarted.resume(&run_id).await.expect("claimed at once");
    let state = resumed.state();
    assert_eq!(state.status, RunStatus::WaitingHuman);
    assert_eq!(
        state.paused.as_ref(),
        Some(&pause),
        "the pause is read back"
    );
    resumed
        .resume(Some("roll it back".into()))
        .await
        .expect("answered");
    assert_eq!(resumed.wait().await.answer.as_deref(), Some("rolled back"));

    // A process with an id of its own is refused while the lease lives.
    let other = Engine::builder()
        .config(config())
        .owner_id("executor-elsewhere")
        .store(Arc::new(store.clone()))
        .clock(Arc::new(clock.clone()))
        .model(Arc::new(ScriptedModel::new()))
        .build()
        .await
        .expect("builds");
    let second = first_paused(&store, &clock).await;
    let refused = other.resume(&second).await.expect_err("held");
    assert!(matches!(refused, EngineError::Held { .. }), "{refused}");
}

/// A run paused by an engine with the default id that then died.
async fn first_paused(store: &MemoryStore, clock: &ManualClock) -> String {
    let engine = engine(
        store,
        clock,
        ScriptedModel::new().script("run", [Turn::tools([("deploy", json!({}))])]),
        ScriptedTools::new().tool("deploy", Some(false), [ToolAct::Hang]),
        Some(ScriptedEvaluator::new([Scripted::verdict(
            "ESCALATE", "silent", "",
        )])),
    )
    .await;
    let mut run = engine.start(flow()).await.expect("starts");
    run.paused().await;
    run.run_id().to_owned()
}

#[tokio::test(start_paused = true)]
async fn a_run_handles_events_are_its_own_runs_from_its_first_to_its_end() {
    let model = ScriptedModel::new().script("run", [Turn::answer("one"), Turn::answer("two")]);
    let engine = Engine::builder()
        .model(Arc::new(model))
        .build()
        .await
        .expect("builds");
    let flow = Flow::builder("n", "Answer.")
        .max_steps(3)
        .build()
        .expect("flow");
    let first = engine.start(flow.clone()).await.expect("starts");
    let second = engine.start(flow).await.expect("starts");
    for run in [&first, &second] {
        let mut events = run.events();
        let mut names = Vec::new();
        while let Some(event) = events.recv().await {
            let event = event.expect("no event lost");
            assert_eq!(&*event.run_id, run.run_id(), "another run's event");
            names.push(event.kind.name());
        }
        assert_eq!(names.first(), Some(&"run_started"), "{names:?}");
        assert_eq!(names.last(), Some(&"run_completed"), "{names:?}");
        // Once the run's end was read, the stream is over.
        assert!(events.recv().await.is_none());
    }
}

#[tokio::test(start_paused = true)]
async fn a_run_handles_events_end_even_when_the_reader_lagged_past_the_runs_end() {
    let model = ScriptedModel::new().script("run", [Turn::answer("done")]);
    let engine = Engine::builder()
        .model(Arc::new(model))
        .build()
        .await
        .expect("builds");
    let flow = Flow::builder("n", "Answer.")
        .max_steps(2)
        .build()
        .expect("flow");
    let mut run = engine.start(flow).await.expect("starts");
    let mut events = run.events();
    assert!(run.wait().await.status.is_terminal());
    // Other runs flood the bus past its capacity before this reader reads:
    // its run's end event is among what it loses.
    for _ in 0..=leasehold_actors::EventBus::DEFAULT_CAPACITY {
        engine.events().publish(
            "another-run",
            "root",
            EventKind::RunStarted {
                trace_parent: None,
                flow: "other".into(),
                task: "flood".into(),
                max_steps: 0,
            },
        );
    }
    let first = events.recv().await.expect("the reader is told");
    assert!(first.is_err(), "it lagged: {first:?}");
    let rest = tokio::time::timeout(Duration::from_secs(3600), async {
        let mut own = 0;
        while let Some(event) = events.recv().await {
            let event = event.expect("one lag only");
            assert_eq!(&*event.run_id, run.run_id());
            own += 1;
        }
        own
    })
    .await
    .expect("the stream ends: the run is over, whatever the reader lost");
    assert_eq!(rest, 0, "every event of the run was flooded away");
}
