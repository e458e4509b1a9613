//! What a run may not exceed, whatever its flow or its model says: workers
//! per answer, per run and in depth, and the shortest lease — on paused
//! time with the scripted fakes.

use std::future::pending;
use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::{
    ChatRole, Engine, EngineConfig, EngineError, Event, EventKind, Flow, LeaseError, LeaseKind,
    LeaseSpec, MIN_LEASE, RunStatus, SPAWN_WORKER_TOOL, Supervision, SupervisionConfig,
    testing::{MemoryStore, RecordingSink, ScriptedModel, Turn},
};
use serde_json::json;
use tokio::time::Instant;

async fn engine(model: &ScriptedModel, config: EngineConfig) -> (Engine, RecordingSink) {
    let events = RecordingSink::new();
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model.clone()))
        .events(Arc::new(events.clone()))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .await
        .expect("engine builds");
    (engine, events)
}

/// A flow with worker kinds `a`, `b` and `c`.
fn flow() -> Flow {
    serde_json::from_value(json!({
        "name": "spawning",
        "task": "Delegate.",
        "max_steps": 0,
        "workers": {
            "a": {"prompt": "You are a.", "max_steps": 0},
            "b": {"prompt": "You are b.", "max_steps": 0},
            "c": {"prompt": "You are c.", "max_steps": 0},
        }
    }))
    .expect("valid flow")
}

fn spawns(kind: &'static str, n: usize) -> Turn {
    Turn::tools((0..n).map(|i| {
        (
            SPAWN_WORKER_TOOL,
            json!({"kind": kind, "task": format!("task {i}")}),
        )
    }))
}

/// The `spawn_refused` events, as `(limit, bound)`.
fn refusals(events: &[Event]) -> Vec<(String, u32)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SpawnRefused { limit, bound, .. } => Some((limit.clone(), *bound)),
            _ => None,
        })
        .collect()
}

fn spawned(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::WorkerSpawned { .. }))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_answer_past_spawn_max_per_answer_starts_that_many_and_the_model_sees_the_rest_refused()
{
    let model = ScriptedModel::new()
        .script("run", [spawns("a", 10), Turn::answer("three were enough")])
        .script(
            "worker:a",
            (0..3).map(|i| Turn::answer(format!("finding {i}"))),
        );
    let mut config = EngineConfig::default();
    config.spawn.max_per_answer = 3;
    let (engine, events) = engine(&model, config).await;
    let mut run = engine.start(flow()).await.expect("run starts");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");

    let events = events.events();
    assert_eq!(spawned(&events).len(), 3);
    assert_eq!(
        refusals(&events),
        vec![("spawn.max_per_answer".to_owned(), 3); 7]
    );
    // The model sees all ten results: three findings, seven refusals that
    // say which limit and what to do.
    let results: Vec<String> = model.requests_of("run")[1]
        .messages
        .iter()
        .filter(|m| m.role == ChatRole::Tool)
        .map(|m| m.content.clone())
        .collect();
    assert_eq!(results.len(), 10);
    let refused: Vec<&String> = results
        .iter()
        .filter(|r| r.starts_with("error: the worker was not spawned"))
        .collect();
    assert_eq!(refused.len(), 7, "{results:?}");
    assert!(
        refused.iter().all(|r| r.contains("spawn.max_per_answer")),
        "{refused:?}"
    );
    assert_eq!(model.requests_of("worker:a").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn nested_spawns_stop_at_spawn_max_depth_and_spawn_max_per_run() {
    // The root spawns one `a`; `a` asks for three `b` and gets the two the
    // run has left; each `b`, at the deepest level allowed, asks for a `c`.
    let model = ScriptedModel::new()
        .script("run", [spawns("a", 1), Turn::answer("done")])
        .script("worker:a", [spawns("b", 3), Turn::answer("a done")])
        .script(
            "worker:b",
            [
                spawns("c", 1),
                spawns("c", 1),
                Turn::answer("b done"),
                Turn::answer("b done"),
            ],
        );
    let mut config = EngineConfig::default();
    config.spawn.max_per_run = 3;
    config.spawn.max_depth = 2;
    let (engine, events) = engine(&model, config).await;
    let mut run = engine.start(flow()).await.expect("run starts");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");

    let events = events.events();
    let paths: Vec<&str> = spawned(&events).iter().map(|e| &*e.path).collect();
    assert_eq!(paths.len(), 3, "{paths:?}");
    assert!(
        paths.iter().all(|p| p.matches("worker:").count() <= 2),
        "{paths:?}"
    );
    let mut refused = refusals(&events);
    refused.sort();
    assert_eq!(
        refused,
        vec![
            ("spawn.max_depth".to_owned(), 2),
            ("spawn.max_depth".to_owned(), 2),
            ("spawn.max_per_run".to_owned(), 3),
        ]
    );
    assert!(model.requests_of("worker:c").is_empty(), "no `c` started");
}

#[tokio::test(start_paused = true)]
async fn a_flow_may_lower_the_spawn_limits_but_not_raise_them() {
    let model = ScriptedModel::new()
        .script("run", [spawns("a", 4), Turn::answer("done")])
        .script("worker:a", [Turn::answer("found")]);
    let (engine, events) = engine(&model, EngineConfig::default()).await;
    let mut raised = flow();
    raised.spawn.max_per_answer = Some(17);
    match engine.start(raised).await {
        Err(EngineError::Flow(error)) => {
            assert_eq!(error.path, "spawn.max_per_answer");
            assert!(error.message.contains("at most 16"), "{error}");
        }
        Err(other) => panic!("expected a flow refusal, got {other}"),
        Ok(_) => panic!("a raised limit must be refused"),
    }
    let mut lowered = flow();
    lowered.spawn.max_per_answer = Some(1);
    let mut run = engine.start(lowered).await.expect("a lowered limit runs");
    assert_eq!(run.wait().await.status, RunStatus::Completed);
    let events = events.events();
    assert_eq!(spawned(&events).len(), 1);
    assert_eq!(refusals(&events).len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_lease_below_the_floor_expires_no_sooner_than_min_lease() {
    let supervision = Supervision::start(
        SupervisionConfig::default(),
        None,
        Arc::new(RecordingSink::new()),
    )
    .await
    .expect("supervision starts");
    let spec = LeaseSpec::new(LeaseKind::ToolCall, "hang", Duration::from_nanos(1))
        .expect("a positive lease")
        .with_max_renewals(0);
    let started = Instant::now();
    let handle = supervision
        .leases
        .supervise(spec, |_| pending::<()>())
        .expect("started");
    let outcome = handle.outcome().await;
    assert!(
        matches!(outcome, Err(LeaseError::RenewalCapReached { .. })),
        "{outcome:?}"
    );
    assert!(
        started.elapsed() >= MIN_LEASE,
        "cut after {:?}, below the floor",
        started.elapsed()
    );
    supervision.stop();
}

#[tokio::test(start_paused = true)]
async fn an_engine_configured_below_the_lease_floor_is_refused_naming_the_lease() {
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_nanos(1);
    let built = Engine::builder()
        .config(config)
        .model(Arc::new(ScriptedModel::new()))
        .build()
        .await;
    match built {
        Err(EngineError::Config(error)) => {
            assert_eq!(error.field, "lease.tool_call", "{error}");
            assert!(error.to_string().contains("10ms"), "{error}");
        }
        Err(other) => panic!("expected a configuration refusal, got {other}"),
        Ok(_) => panic!("a 1 ns lease must be refused"),
    }
    let mut config = EngineConfig::default();
    config.supervision.lease.min = Duration::from_secs(60);
    config.supervision.lease.model_stream = Duration::from_secs(30);
    let built = Engine::builder()
        .config(config)
        .model(Arc::new(ScriptedModel::new()))
        .build()
        .await;
    match built {
        Err(EngineError::Config(error)) => {
            assert_eq!(error.field, "lease.model_stream", "{error}");
            assert!(error.to_string().contains("lease.min"), "{error}");
        }
        Err(other) => panic!("expected a configuration refusal, got {other}"),
        Ok(_) => panic!("a lease below lease.min must be refused"),
    }
}

#[test]
fn the_shortest_lease_is_a_field_of_the_lease_configuration_named_as_its_key() {
    let mut lease = leasehold_actors::LeaseConfig::default();
    assert_eq!(lease.min, MIN_LEASE);
    lease.validate().expect("the defaults hold");
    lease.min = Duration::from_secs(60);
    lease.tool_call = Duration::from_secs(30);
    let error = lease.validate().expect_err("a lease below lease.min");
    assert_eq!(error.field, "lease.tool_call", "{error}");
    assert!(error.to_string().contains("`lease.min`"), "{error}");
    lease.min = Duration::from_millis(1);
    let error = lease.validate().expect_err("lease.min below the floor");
    assert_eq!(error.field, "lease.min", "{error}");
}
