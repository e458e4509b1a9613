//! Replay reproduces what really happened on runs with ordinary faults:
//! an evaluator that failed or timed out (the breaker renewed), a run
//! paused, left, and resumed by another executor, a fork, a tool result
//! cut to the engine's cap, and a lease that expired early against a
//! learned pace. Each is recorded through the real engine on the scripted
//! fakes, on paused time, then replayed from its recording alone.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::testing::{
    MemoryStore, RecordingSink, Scripted, ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct,
    Turn,
};
use leasehold_actors::{
    CallOutcome, DecidedBy, Engine, EngineConfig, Event, EventKind, EventSink, Flow, ForkSpec,
    LeaseId, LeaseKind, ModelError, ModelErrorKind, Pace, PaceBook, RestartPolicy, RunStatus,
    ToolError,
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
        self.engine_seen_by(None).await
    }

    /// [`Self::engine`], its calls seen by `witness`.
    async fn engine_seen_by(&self, witness: Option<&Witness>) -> Engine {
        let sink: Arc<dyn EventSink> = match witness {
            Some(witness) => Arc::new(witness.clone()),
            None => Arc::new(RecordingSink::new()),
        };
        let engine = Engine::builder()
            .config(self.config.clone())
            .model(Arc::new(self.model.clone()))
            .evaluator(Arc::new(self.evaluator.clone()))
            .events(sink)
            .store(Arc::new(self.store.clone()))
            .tool_server("ops", Arc::new(self.tools.clone()))
            .build()
            .await
            .expect("engine");
        if let Some(witness) = witness {
            *witness.book.lock().expect("the book") = Some(engine.paces().clone());
        }
        engine
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

/// Three runs teach `search`'s pace (progress every 50 ms, done in
/// 300 ms), each in an executor of its own on one store; the fourth's
/// search is silent, expires early against that pace, and the evaluator
/// says INTERVENE; sent again, it answers. The fourth run's recording,
/// and what its leases were seeded with, as its witness saw it.
fn paced_run() -> (World, Recording, Vec<Seeded>) {
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
    let (recording, seeds) = paused(async {
        let mut last = None;
        for _ in 0..4 {
            let witness = Witness::default();
            let engine = world.engine_seen_by(Some(&witness)).await;
            let mut run = engine.start(flow()).await.expect("starts");
            assert_eq!(run.wait().await.status, RunStatus::Completed);
            engine.shutdown().await;
            last = Some((run.run_id().to_owned(), witness.seen()));
        }
        let (run_id, seeds) = last.expect("four runs");
        (world.recording(&run_id).await, seeds)
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
    (world, recording, seeds)
}

#[test]
fn a_run_cut_early_against_a_learned_pace_replays_with_the_pace_it_had() {
    let (world, recording, _) = paced_run();
    let seeded = recording
        .events
        .iter()
        .filter(|e| e.kind.name() == "lease_seeded")
        .count();
    assert!(seeded >= 2, "the search's two leases were seeded");
    replayed(&world, &recording);
}

#[test]
fn a_recording_that_carries_its_leases_seeds_replays_an_early_expiry_against_them() {
    let (world, mut recording, seeds) = paced_run();
    // Without its seeds the replay starts each lease cold: the silent
    // search runs its whole period, judged by the ladder.
    let cold = recording.replay(world.config.clone()).expect("replays");
    let divergence = cold.divergence.expect("a cold replay diverges");
    assert_eq!(
        divergence.recorded,
        "verdict INTERVENE by evaluator on tool_call, early"
    );
    // With them, as the lease actor records them (`lease_seeded`, before
    // the lease's other events), it is judged as it was.
    if !recording
        .events
        .iter()
        .any(|e| e.kind.name() == "lease_seeded")
    {
        record_seeds(&mut recording, &seeds);
    }
    replayed(&world, &recording);
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

/// What a tool call's lease was seeded with when the call started, as
/// the engine's book had it then: the pace key and the pace, if it had
/// one.
#[derive(Clone, Debug)]
struct Seeded {
    call: String,
    key: String,
    pace: Option<Pace>,
}

/// Sees each tool call start and reads what its lease is about to be
/// seeded with: the lease actor's part, until it records it itself. (The
/// model's leases of these runs are never judged: what seeded them shows
/// nowhere.)
#[derive(Clone, Default)]
struct Witness {
    book: Arc<std::sync::Mutex<Option<PaceBook>>>,
    seen: Arc<std::sync::Mutex<Vec<Seeded>>>,
}

impl Witness {
    fn seen(&self) -> Vec<Seeded> {
        self.seen.lock().expect("seen").clone()
    }
}

impl EventSink for Witness {
    fn emit(&self, _run_id: &str, path: &str, kind: EventKind) {
        let EventKind::ToolCallStarted { tool, .. } = &kind else {
            return;
        };
        let book = self.book.lock().expect("the book").clone();
        let Some(book) = book else {
            return;
        };
        // The tool's key, whatever else it holds: the only one of `search`.
        let key = book
            .all()
            .into_keys()
            .find(|k| k.starts_with(&format!("tool_call:{tool}")));
        let pace = key.as_deref().and_then(|k| book.get(k));
        self.seen.lock().expect("seen").push(Seeded {
            call: path.to_owned(),
            key: key.unwrap_or_default(),
            pace,
        });
    }
}

/// The lease an event is about, if any.
fn lease_of(kind: &EventKind) -> Option<LeaseId> {
    Some(match kind {
        EventKind::Wait { lease_id, .. }
        | EventKind::Progress { lease_id, .. }
        | EventKind::NudgeQueued { lease_id, .. }
        | EventKind::Intervened { lease_id, .. }
        | EventKind::Escalated { lease_id, .. }
        | EventKind::RenewalCapReached { lease_id, .. }
        | EventKind::VerdictDropped { lease_id, .. }
        | EventKind::LeaseCancelled { lease_id }
        | EventKind::OperationTimed { lease_id, .. } => *lease_id,
        EventKind::Verdict(record) => record.lease_id,
        _ => return None,
    })
}

/// Writes `seeds` into `recording` as the lease actor will: a
/// `lease_seeded` before the first event of each seeded lease, the leases
/// of one call taken in order.
fn record_seeds(recording: &mut Recording, seeds: &[Seeded]) {
    let mut leases: Vec<(String, LeaseId)> = Vec::new();
    for event in &recording.events {
        if let Some(lease) = lease_of(&event.kind)
            && !leases.iter().any(|(_, l)| *l == lease)
        {
            leases.push((event.path.clone(), lease));
        }
    }
    for (call, lease) in &leases {
        let n = leases
            .iter()
            .take_while(|(_, l)| l != lease)
            .filter(|(c, _)| c == call)
            .count();
        let Some(seeded) = seeds.iter().filter(|s| s.call == *call).nth(n) else {
            continue;
        };
        let Some(pace) = &seeded.pace else {
            continue;
        };
        let at = recording
            .events
            .iter()
            .position(|e| lease_of(&e.kind) == Some(*lease))
            .expect("the lease's first event");
        let first: &Event = &recording.events[at];
        let event = Event {
            kind: EventKind::LeaseSeeded {
                lease_id: *lease,
                lease_kind: LeaseKind::ToolCall,
                pace_key: seeded.key.clone(),
                endpoint: Some("ops".to_owned()),
                pace: Pace::clone(pace),
                queued: false,
            },
            ..first.clone()
        };
        recording.events.insert(at, event);
    }
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
