//! Replay reproduces what really happened on runs with ordinary faults:
//! an evaluator that failed or timed out (the breaker renewed), a run
//! paused, left, and resumed by another executor, a run whose executor
//! stopped in the middle of a call, a fork, a tool result cut to the
//! engine's cap, a lease that expired early against a learned pace, calls
//! that failed (tried again, or not), and a run a person cancelled. Each is
//! recorded through the real engine on the scripted fakes, on paused time,
//! then replayed from its recording alone; each diverged before replay
//! learned to play it.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::testing::{
    MemoryStore, RecordingSink, Scripted, ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct,
    Turn,
};
use leasehold_actors::{
    CallOutcome, DecidedBy, Engine, EngineConfig, EventKind, Flow, ForkSpec, ModelError,
    ModelErrorKind, RestartPolicy, RunStatus, ToolError,
};
use leasehold_lab::Recording;
use serde_json::json;

fn config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.model_stream = Duration::from_secs(10);
    config.supervision.lease.tool_call = Duration::from_secs(10);
    config.supervision.watchdog.free_renewals = 2;
    config.supervision.watchdog.evaluator_timeout = Duration::from_secs(5);
    config.restart = RestartPolicy {
        jitter: 0.0,
        ..RestartPolicy::default()
    };
    config
}

fn flow() -> Flow {
    serde_json::from_value(json!({
        "name": "incident",
        "task": "Why did checkout fail?",
        "max_steps": 5,
        "tools": [{"name": "ops", "url": "http://127.0.0.1:9/mcp"}],
    }))
    .expect("valid flow")
}

/// The peers a recorded run had, shared by every engine of one test (as
/// one real model and tool server outlive the processes that call them).
#[derive(Clone)]
struct World {
    model: ScriptedModel,
    tools: ScriptedTools,
    evaluator: ScriptedEvaluator,
    store: MemoryStore,
    config: EngineConfig,
}

impl World {
    fn new(model: ScriptedModel, tools: ScriptedTools, evaluator: ScriptedEvaluator) -> Self {
        Self {
            model,
            tools,
            evaluator,
            store: MemoryStore::new(),
            config: config(),
        }
    }

    /// An executor of the world: a process of its own, on the world's
    /// store.
    async fn engine(&self) -> Engine {
        Engine::builder()
            .config(self.config.clone())
            .model(Arc::new(self.model.clone()))
            .evaluator(Arc::new(self.evaluator.clone()))
            .events(Arc::new(RecordingSink::new()))
            .store(Arc::new(self.store.clone()))
            .tool_server("ops", Arc::new(self.tools.clone()))
            .build()
            .await
            .expect("engine")
    }

    async fn recording(&self, run_id: &str) -> Recording {
        Recording::from_store(&self.store, run_id)
            .await
            .expect("read")
            .expect("the run")
    }
}

/// Runs `scenario` on a paused current-thread runtime, outside any other.
fn paused<T>(scenario: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime")
        .block_on(scenario)
}

/// The recording's verdicts, as `decided_by` names them.
fn deciders(recording: &Recording) -> Vec<DecidedBy> {
    recording
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Verdict(record) => Some(record.decided_by),
            _ => None,
        })
        .collect()
}

fn search_then_answer() -> ScriptedModel {
    ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("search", json!({"q": "pool exhausted"}))]),
            Turn::answer("the pool was exhausted by a leak"),
        ],
    )
}

/// Replays `recording` under the configuration it ran under, and again
/// from its JSON, as `runs replay --save` writes it.
fn replayed(world: &World, recording: &Recording) {
    let report = recording.replay(world.config.clone()).expect("replays");
    report.assert_reproduced();
    let saved: Recording =
        serde_json::from_str(&serde_json::to_string(recording).expect("serializes"))
            .expect("reads back");
    saved
        .replay(world.config.clone())
        .expect("replays")
        .assert_reproduced();
}

#[test]
fn a_breaker_verdict_replays_as_the_breaker_gave_it() {
    // A silent search of 52 s under a 10 s lease: two free renewals, then
    // an evaluator that fails, then one that does not answer within its
    // 5 s: the breaker renews both times.
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns(
            "12 errors at 03:10",
            Duration::from_secs(52),
        )],
    );
    let evaluator = ScriptedEvaluator::new([
        Scripted::Fail("connection refused".to_owned()),
        Scripted::Hang,
    ]);
    let world = World::new(search_then_answer(), tools, evaluator);
    let recording = paused(async {
        let engine = world.engine().await;
        let mut run = engine.start(flow()).await.expect("starts");
        assert_eq!(run.wait().await.status, RunStatus::Completed);
        engine.shutdown().await;
        world.recording(run.run_id()).await
    });
    assert_eq!(
        deciders(&recording),
        [
            DecidedBy::Ladder,
            DecidedBy::Ladder,
            DecidedBy::Breaker,
            DecidedBy::Breaker
        ]
    );
    replayed(&world, &recording);
}

#[test]
fn a_run_paused_then_resumed_by_another_executor_replays_its_pause_and_its_resume() {
    // The search hangs; after the ladder the evaluator escalates and the
    // run waits for a person. Its executor goes away; another claims it
    // (`runs resume`) and a person answers; the search, sent again with
    // the same key, answers.
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [
            ToolAct::Hang,
            ToolAct::returns("12 errors at 03:10", Duration::from_secs(3)),
        ],
    );
    let evaluator = ScriptedEvaluator::new([Scripted::verdict("ESCALATE", "silent for 30 s", "")]);
    let world = World::new(search_then_answer(), tools, evaluator);
    let recording = paused(async {
        let first = world.engine().await;
        let mut run = first.start(flow()).await.expect("starts");
        assert_eq!(run.paused().await.status, RunStatus::WaitingHuman);
        let run_id = run.run_id().to_owned();
        first.shutdown().await;
        let second = world.engine().await;
        let mut resumed = second.resume(&run_id).await.expect("claims it");
        resumed.wait_until(|s| s.status.is_paused()).await;
        resumed
            .resume(Some("Look at the replica's logs.".to_owned()))
            .await
            .expect("resumes");
        assert_eq!(resumed.wait().await.status, RunStatus::Completed);
        second.shutdown().await;
        world.recording(&run_id).await
    });
    let kinds: Vec<&str> = recording.events.iter().map(|e| e.kind.name()).collect();
    assert!(kinds.contains(&"run_resumed"), "{kinds:?}");
    assert!(kinds.contains(&"resumed"), "{kinds:?}");
    replayed(&world, &recording);
}

#[test]
fn a_fork_replays_from_its_fork_point_with_its_guidance() {
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("charge", json!({"order": "7"}))]),
            Turn::answer("settled"),
            Turn::answer("réglé"),
        ],
    );
    let tools = ScriptedTools::new().tool(
        "charge",
        Some(false),
        [ToolAct::returns("charged 7", Duration::from_secs(1))],
    );
    let world = World::new(model, tools.clone(), ScriptedEvaluator::always("RENEW"));
    let recording = paused(async {
        let engine = world.engine().await;
        let mut parent = engine.start(flow()).await.expect("starts");
        assert_eq!(parent.wait().await.status, RunStatus::Completed);
        let mut fork = engine
            .fork(
                parent.run_id(),
                ForkSpec::root(2).with_guidance("Say it in French."),
            )
            .await
            .expect("forks");
        assert_eq!(fork.wait().await.status, RunStatus::Completed);
        engine.shutdown().await;
        world.recording(fork.run_id()).await
    });
    assert_eq!(tools.calls("charge"), 1, "the fork never charges again");
    assert_eq!(recording.events[0].kind.name(), "run_forked");
    replayed(&world, &recording);
}

#[test]
fn a_tool_result_cut_to_the_cap_replays_cut_the_same() {
    // 201 bytes, a two-byte character across the 64-byte cap.
    let long = format!("a{}", "é".repeat(100));
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns(long, Duration::from_secs(1))],
    );
    let mut world = World::new(
        search_then_answer(),
        tools,
        ScriptedEvaluator::always("RENEW"),
    );
    world.config.max_tool_result_bytes = 64;
    let recording = paused(async {
        let engine = world.engine().await;
        let mut run = engine.start(flow()).await.expect("starts");
        assert_eq!(run.wait().await.status, RunStatus::Completed);
        engine.shutdown().await;
        world.recording(run.run_id()).await
    });
    let cut = recording.events.iter().find_map(|e| match e.kind {
        EventKind::ToolResultTruncated {
            original_bytes,
            kept_bytes,
            ..
        } => Some((original_bytes, kept_bytes)),
        _ => None,
    });
    assert_eq!(cut, Some((201, 63)));
    replayed(&world, &recording);
}

#[test]
fn a_run_cut_early_against_a_learned_pace_replays_with_the_pace_it_had() {
    // Three runs teach `search`'s pace (progress every 50 ms, done in
    // 300 ms), each in an executor of its own on one store; the fourth's
    // search is silent, expires early against that pace, and the
    // evaluator says INTERVENE; sent again, it answers.
    let fast = ToolAct::Return {
        latency: Duration::from_millis(300),
        progress_every: Some(Duration::from_millis(50)),
        result: "12 errors at 03:10".to_owned(),
    };
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [
            fast.clone(),
            fast.clone(),
            fast.clone(),
            ToolAct::returns("silence", Duration::from_secs(40)),
            fast,
        ],
    );
    let turns = (0..4).flat_map(|_| {
        [
            Turn::tools([("search", json!({"q": "pool exhausted"}))]),
            Turn::answer("the pool was exhausted by a leak"),
        ]
    });
    let model = ScriptedModel::new().script("run", turns);
    let evaluator = ScriptedEvaluator::new([Scripted::verdict(
        "INTERVENE",
        "silent against its pace",
        "",
    )]);
    let mut world = World::new(model, tools, evaluator);
    // Long enough for the tool's accrual (its 10 s acceptable pause) to
    // find the silence suspicious before the period ends.
    world.config.supervision.lease.tool_call = Duration::from_secs(60);
    let recording = paused(async {
        let mut last = String::new();
        for _ in 0..4 {
            let engine = world.engine().await;
            let mut run = engine.start(flow()).await.expect("starts");
            assert_eq!(run.wait().await.status, RunStatus::Completed);
            engine.shutdown().await;
            last = run.run_id().to_owned();
        }
        world.recording(&last).await
    });
    let early: Vec<_> = recording
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Verdict(record) => Some((record.early, record.verdict.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(early, [(true, "INTERVENE")]);
    let seeded = recording
        .events
        .iter()
        .filter(|e| e.kind.name() == "lease_seeded")
        .count();
    assert!(seeded >= 2, "the search's two leases were seeded");
    replayed(&world, &recording);

    // What the leases were seeded with is what makes it so: without it the
    // replay starts each lease cold, and the silent search runs its whole
    // period, judged by the ladder.
    let mut cold = recording.clone();
    cold.events.retain(|e| e.kind.name() != "lease_seeded");
    let report = cold.replay(world.config.clone()).expect("replays");
    let divergence = report.divergence.expect("a cold replay diverges");
    assert_eq!(
        divergence.recorded,
        "verdict INTERVENE by evaluator on tool_call, early"
    );
}

#[test]
fn a_run_whose_executor_stopped_mid_call_replays_its_stop_and_its_resume() {
    // The search takes 30 s; 12 s in, its executor stops (SIGTERM: the
    // run stays running, its lease released). Another executor resumes it
    // (`runs resume`): the search, idempotent, is sent again with its key.
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [
            ToolAct::returns("late", Duration::from_secs(30)),
            ToolAct::returns("12 errors at 03:10", Duration::from_secs(3)),
        ],
    );
    let world = World::new(
        search_then_answer(),
        tools,
        ScriptedEvaluator::always("RENEW"),
    );
    let recording = paused(async {
        let first = world.engine().await;
        let run = first.start(flow()).await.expect("starts");
        let run_id = run.run_id().to_owned();
        let mut events = run.events();
        // Past the ladder's first renewal of the search.
        while let Some(Ok(event)) = events.recv().await {
            if event.kind.name() == "verdict" {
                break;
            }
        }
        first.shutdown().await;
        let second = world.engine().await;
        let mut resumed = second.resume(&run_id).await.expect("claims it");
        assert_eq!(resumed.wait().await.status, RunStatus::Completed);
        second.shutdown().await;
        world.recording(&run_id).await
    });
    let kinds: Vec<&str> = recording.events.iter().map(|e| e.kind.name()).collect();
    assert!(kinds.contains(&"run_resumed"), "{kinds:?}");
    replayed(&world, &recording);
}

#[test]
fn calls_that_failed_replay_failing_as_they_did() {
    // The model's first attempt fails with a 503 and is tried again; the
    // search's first attempt loses its connection and is tried again; the
    // lookup fails for good, and the model is told.
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::fail(ModelError::new(
                ModelErrorKind::Server,
                "HTTP 503: overloaded",
                true,
            )),
            Turn::tools([
                ("search", json!({"q": "pool exhausted"})),
                ("lookup", json!({"id": 7})),
            ]),
            Turn::answer("the pool was exhausted by a leak"),
        ],
    );
    let tools = ScriptedTools::new()
        .tool(
            "search",
            Some(true),
            [
                ToolAct::Fail(ToolError::new("connection reset", true)),
                ToolAct::returns("12 errors at 03:10", Duration::from_secs(2)),
            ],
        )
        .tool(
            "lookup",
            Some(true),
            [ToolAct::Fail(ToolError::new("no such order", false))],
        );
    let world = World::new(model, tools, ScriptedEvaluator::always("RENEW"));
    let recording = paused(async {
        let engine = world.engine().await;
        let mut run = engine.start(flow()).await.expect("starts");
        assert_eq!(run.wait().await.status, RunStatus::Completed);
        engine.shutdown().await;
        world.recording(run.run_id()).await
    });
    let failed = recording
        .events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::ModelCallFinished {
                    outcome: CallOutcome::Error,
                    ..
                } | EventKind::ToolCallFinished {
                    outcome: CallOutcome::Error,
                    ..
                }
            )
        })
        .count();
    assert_eq!(failed, 3);
    replayed(&world, &recording);
}

#[test]
fn a_run_a_person_cancelled_replays_cancelled_where_it_was() {
    // Paused by an escalation, then cancelled instead of answered; and a
    // run cancelled in the middle of its search.
    let tools = ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang]);
    let evaluator = ScriptedEvaluator::new([Scripted::verdict("ESCALATE", "silent", "")]);
    let world = World::new(search_then_answer(), tools, evaluator);
    let recording = paused(async {
        let engine = world.engine().await;
        let mut run = engine.start(flow()).await.expect("starts");
        assert_eq!(run.paused().await.status, RunStatus::WaitingHuman);
        run.cancel("not worth it").await.expect("cancels");
        assert_eq!(run.wait().await.status, RunStatus::Cancelled);
        engine.shutdown().await;
        world.recording(run.run_id()).await
    });
    replayed(&world, &recording);

    let tools = ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang]);
    let world = World::new(
        search_then_answer(),
        tools,
        ScriptedEvaluator::always("RENEW"),
    );
    let recording = paused(async {
        let engine = world.engine().await;
        let mut run = engine.start(flow()).await.expect("starts");
        let mut events = run.events();
        while let Some(Ok(event)) = events.recv().await {
            if event.kind.name() == "verdict" {
                break;
            }
        }
        run.cancel("wrong question").await.expect("cancels");
        assert_eq!(run.wait().await.status, RunStatus::Cancelled);
        engine.shutdown().await;
        world.recording(run.run_id()).await
    });
    replayed(&world, &recording);
}

#[test]
fn a_worker_cut_early_against_its_kinds_learned_pace_replays_with_it() {
    // Three runs teach the worker kind's pace (a step in 200 ms); in the
    // fourth the worker's step waits on a search of 15 minutes (a tool it
    // never called before, so judged by its 20-minute lease alone), the
    // worker's lease expires early against its kind's pace, and the
    // evaluator says INTERVENE; started again, it answers.
    let flow: Flow = serde_json::from_value(json!({
        "name": "triage",
        "task": "Why did checkout fail?",
        "max_steps": 4,
        "workers": {"scan": {"prompt": "Scan the logs.", "max_steps": 2}},
        "tools": [{"name": "ops", "url": "http://127.0.0.1:9/mcp"}],
    }))
    .expect("valid flow");
    let root = (0..4).flat_map(|_| {
        [
            Turn::spawn([("scan", "Scan the logs.")]),
            Turn::answer("the pool was exhausted by a leak"),
        ]
    });
    let note = || Turn::tools([("note", json!({"note": "scanned"}))]);
    let scan = || Turn::answer("a leak in the pool");
    let mut turns = Vec::new();
    for _ in 0..3 {
        turns.extend([note(), scan()]);
    }
    turns.extend([
        Turn::tools([("search", json!({"q": "pool"}))]),
        note(),
        scan(),
    ]);
    let model = ScriptedModel::new()
        .script("run", root)
        .script("worker:scan", turns);
    let tools = ScriptedTools::new()
        .tool(
            "note",
            Some(true),
            [ToolAct::returns("noted", Duration::from_millis(200))],
        )
        .tool(
            "search",
            Some(true),
            [ToolAct::returns("late", Duration::from_secs(900))],
        );
    let evaluator = ScriptedEvaluator::new([Scripted::verdict(
        "INTERVENE",
        "silent against its pace",
        "",
    )]);
    let mut world = World::new(model, tools, evaluator);
    world.config.supervision.lease.tool_call = Duration::from_secs(1200);
    world.config.supervision.lease.worker_step = Duration::from_secs(300);
    let recording = paused(async {
        let mut last = String::new();
        for _ in 0..4 {
            let engine = world.engine().await;
            let mut run = engine.start(flow.clone()).await.expect("starts");
            assert_eq!(run.wait().await.status, RunStatus::Completed);
            engine.shutdown().await;
            last = run.run_id().to_owned();
        }
        world.recording(&last).await
    });
    let early: Vec<_> = recording
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Verdict(record) => {
                Some((record.early, record.verdict.as_str(), record.lease_kind))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        early,
        [(true, "INTERVENE", leasehold_actors::LeaseKind::WorkerStep)]
    );
    replayed(&world, &recording);
    let mut cold = recording.clone();
    cold.events.retain(|e| e.kind.name() != "lease_seeded");
    let report = cold.replay(world.config.clone()).expect("replays");
    assert!(!report.reproduced(), "without its seeds it goes otherwise");
}
