//! Forks: a new run from another run's state at a step boundary, with
//! guidance or changes, the parent untouched; a tool call made before the
//! fork point is never sent again — on paused time with the scripted fakes.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::{
    ChatRole, Engine, EngineConfig, EngineError, EventKind, EventLog, Flow, ForkSpec,
    ReconcileDecision, RestartPolicy, RunStatus, RunStore, SnapshotStore, ToolCallState,
    testing::faults::{Faults, FaultyStore},
    testing::{MemoryStore, RecordingSink, ScriptedModel, ScriptedTools, ToolAct, Turn},
};
use serde_json::json;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = secs(10);
    config.supervision.lease.worker_step = secs(600);
    config.restart = RestartPolicy {
        jitter: 0.0,
        ..RestartPolicy::default()
    };
    config
}

struct Rig {
    engine: Engine,
    events: RecordingSink,
    store: MemoryStore,
}

async fn rig(model: &ScriptedModel, tools: &ScriptedTools) -> Rig {
    judged_rig(model, tools, None, config()).await
}

/// A rig with `evaluator`, if given, under `config`.
async fn judged_rig(
    model: &ScriptedModel,
    tools: &ScriptedTools,
    evaluator: Option<leasehold_actors::testing::ScriptedEvaluator>,
    config: EngineConfig,
) -> Rig {
    let events = RecordingSink::new();
    let store = MemoryStore::new();
    let mut builder = Engine::builder()
        .config(config)
        .model(Arc::new(model.clone()))
        .events(Arc::new(events.clone()))
        .store(Arc::new(store.clone()))
        .tool_server("local", Arc::new(tools.clone()));
    if let Some(evaluator) = evaluator {
        builder = builder.evaluator(Arc::new(evaluator));
    }
    Rig {
        engine: builder.build().await.expect("engine builds"),
        events,
        store,
    }
}

fn flow() -> Flow {
    serde_json::from_value(json!({
        "name": "orders",
        "task": "Settle order 7.",
        "max_steps": 6,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}],
        "workers": {"researcher": {"prompt": "You research one question.", "max_steps": 4}}
    }))
    .expect("valid flow")
}

/// A run that charges (not idempotent), then answers; completed.
async fn charged_run(rig: &Rig) -> String {
    let mut run = rig.engine.start(flow()).await.expect("starts");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    run.run_id().to_owned()
}

fn charging_model() -> ScriptedModel {
    ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("charge", json!({"order": 7}))]),
            Turn::answer("charged"),
        ],
    )
}

fn charging_tools() -> ScriptedTools {
    ScriptedTools::new().tool(
        "charge",
        Some(false),
        [ToolAct::returns("charged 7", secs(1))],
    )
}

#[tokio::test(start_paused = true)]
async fn a_fork_after_a_tool_replays_its_result_and_its_guidance_reaches_the_next_request() {
    let model = charging_model();
    let tools = charging_tools();
    let rig = rig(&model, &tools).await;
    let parent = charged_run(&rig).await;
    let before = rig.store.run(&parent).expect("the parent");
    model.replace_script("run", [Turn::answer("facturé")]);
    model.clear_requests();

    let spec = ForkSpec::root(2).with_guidance("Answer in French.");
    let mut fork = rig.engine.fork(&parent, spec).await.expect("forks");
    let state = fork.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("facturé"));

    // The tool was called once, by the parent.
    assert_eq!(tools.calls("charge"), 1);
    // The fork's one model request holds the parent's tool result and the
    // guidance, after it.
    let requests = model.requests_of("run");
    assert_eq!(requests.len(), 1, "{requests:?}");
    let messages = &requests[0].messages;
    let result = messages
        .iter()
        .position(|m| m.role == ChatRole::Tool && m.content == "charged 7")
        .expect("the parent's tool result");
    let guidance = messages
        .iter()
        .position(|m| m.role == ChatRole::User && m.content == "Answer in French.")
        .expect("the guidance");
    assert!(result < guidance, "{messages:?}");

    // The fork says where it comes from, and that the call was replayed.
    let fork_id = fork.run_id().to_owned();
    let events: Vec<_> = rig
        .events
        .events()
        .into_iter()
        .filter(|e| *e.run_id == *fork_id)
        .collect();
    assert!(
        matches!(&events[0].kind, EventKind::RunForked(fork) if fork.parent == parent && fork.step == 2)
    );
    let replayed: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallReplayed {
                idempotency_key,
                made_by,
                by_person,
                ..
            } => Some((idempotency_key.clone(), made_by.clone(), *by_person)),
            _ => None,
        })
        .collect();
    assert_eq!(
        replayed,
        [(format!("{parent}/run/1/0"), parent.clone(), false)]
    );
    assert!(events.iter().all(|e| e.kind.name() != "tool_call_started"));
    let record = rig.store.run(&fork_id).expect("the fork's record");
    let origin = record.fork.expect("its lineage");
    assert_eq!(
        (origin.parent.as_str(), origin.path.as_str(), origin.step),
        (parent.as_str(), "run", 2)
    );
    assert_eq!(origin.guidance.as_deref(), Some("Answer in French."));
    // The fork's ledger holds the parent's call, with the parent's key.
    let calls = rig.store.tool_calls(&fork_id);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].key, format!("{parent}/run/1/0"));
    assert_eq!(calls[0].made_by.as_deref(), Some(parent.as_str()));
    // The parent is untouched.
    assert_eq!(rig.store.run(&parent), Some(before));
}

#[tokio::test(start_paused = true)]
async fn a_fork_before_a_tool_sends_it_once_with_a_key_of_its_own() {
    let model = charging_model();
    let tools = charging_tools();
    let rig = rig(&model, &tools).await;
    let parent = charged_run(&rig).await;
    model.replace_script(
        "run",
        [
            Turn::tools([("charge", json!({"order": 7}))]),
            Turn::answer("charged again"),
        ],
    );
    let mut fork = rig
        .engine
        .fork(&parent, ForkSpec::root(1))
        .await
        .expect("forks");
    let state = fork.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    let keys: Vec<String> = tools
        .invocations()
        .into_iter()
        .map(|i| i.idempotency_key)
        .collect();
    assert_eq!(
        keys,
        [
            format!("{parent}/run/1/0"),
            format!("{}/run/1/0", fork.run_id())
        ]
    );
    assert!(rig.store.tool_calls(fork.run_id())[0].made_by.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_call_of_unknown_outcome_at_a_workers_fork_point_waits_for_a_person_in_the_fork() {
    // The root charges and spawns a researcher in one answer; the charge
    // never answers, and the researcher finishes its first step meanwhile.
    let model = ScriptedModel::new()
        .script(
            "run",
            [
                Turn::tools([
                    ("charge", json!({"order": 7})),
                    (
                        leasehold_actors::SPAWN_WORKER_TOOL,
                        json!({"kind": "researcher", "task": "is 7 paid?"}),
                    ),
                ]),
                Turn::answer("done"),
            ],
        )
        .script(
            "worker:researcher",
            [Turn::tools([("lookup", json!({"order": 7}))]), Turn::hang()],
        );
    let tools = ScriptedTools::new()
        .tool("charge", Some(false), [ToolAct::Hang])
        .tool("lookup", Some(true), [ToolAct::returns("paid", secs(1))]);
    let rig = rig(&model, &tools).await;
    let run = rig.engine.start(flow()).await.expect("starts");
    let parent = run.run_id().to_owned();
    while !rig
        .store
        .tool_calls(&parent)
        .iter()
        .any(|c| c.tool == "lookup" && c.state == ToolCallState::Done)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(secs(1)).await;
    run.cancel("enough").await.expect("cancels");
    let worker = "run/worker:researcher:1";
    model.replace_script("worker:researcher", [Turn::answer("order 7 is paid")]);
    model.replace_script("run", [Turn::answer("settled")]);

    let spec = ForkSpec::at(worker, 2).with_guidance("Be brief.");
    let mut fork = rig.engine.fork(&parent, spec).await.expect("forks");
    let state = fork
        .wait_until(|s| s.status == RunStatus::ReconciliationRequired)
        .await;
    let call = state
        .paused
        .and_then(|p| p.call)
        .expect("the call in question");
    assert_eq!(call.key, format!("{parent}/run/1/0"), "the parent's key");
    assert_eq!(call.made_by.as_deref(), Some(parent.as_str()));
    assert_eq!(tools.calls("charge"), 1, "not sent again");
    fork.reconcile(
        call.key,
        ReconcileDecision::MarkDone {
            result: "charged 7".into(),
        },
    )
    .await
    .expect("decided");
    let state = fork.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(tools.calls("charge"), 1);
    assert_eq!(tools.calls("lookup"), 1, "the worker's lookup was replayed");
    let worker_requests = model.requests_of("worker:researcher");
    let last = worker_requests.last().expect("the worker's step 2");
    assert!(
        last.messages
            .iter()
            .any(|m| m.role == ChatRole::User && m.content == "Be brief."),
        "{last:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fork_point_that_is_no_step_boundary_is_refused_naming_the_loops() {
    let model = charging_model();
    let tools = charging_tools();
    let rig = rig(&model, &tools).await;
    let parent = charged_run(&rig).await;
    let runs = rig.store.list_ids().len();
    for (spec, says) in [
        (ForkSpec::root(4), "`run` (steps 1 to 2)"),
        (
            ForkSpec::at("run/worker:x:1", 2),
            "has no loop `run/worker:x:1`",
        ),
        (
            ForkSpec::root(2).with_change("leases.tool_call=forever"),
            "leases.tool_call",
        ),
        (
            ForkSpec::root(2).with_change("tools=[]"),
            "keeps its parent's tool servers",
        ),
    ] {
        let error = rig.engine.fork(&parent, spec).await.expect_err("refused");
        assert!(
            matches!(error, EngineError::Fork(_) | EngineError::Flow(_)),
            "{error:?}"
        );
        assert!(error.to_string().contains(says), "{error}");
    }
    assert_eq!(rig.store.list_ids().len(), runs, "nothing was recorded");
    assert!(matches!(
        rig.engine.fork("run-none", ForkSpec::root(1)).await,
        Err(EngineError::NotFound(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_forks_changes_are_its_flow_and_a_fork_of_a_fork_keeps_the_first_maker() {
    let model = charging_model();
    let tools = charging_tools();
    let rig = rig(&model, &tools).await;
    let parent = charged_run(&rig).await;
    model.replace_script("run", [Turn::answer("again"), Turn::answer("and again")]);
    let spec = ForkSpec::root(2)
        .with_change("leases.tool_call=30s")
        .with_change("max_steps=3");
    let mut fork = rig.engine.fork(&parent, spec).await.expect("forks");
    assert_eq!(fork.wait().await.status, RunStatus::Completed);
    let record = rig.store.run(fork.run_id()).expect("the fork");
    assert_eq!(record.flow["leases"]["tool_call"], "30s");
    assert_eq!(record.flow["max_steps"], 3);
    let origin = record.fork.expect("lineage");
    assert_eq!(origin.changes, ["leases.tool_call=30s", "max_steps=3"]);

    let mut again = rig
        .engine
        .fork(fork.run_id(), ForkSpec::root(2))
        .await
        .expect("a fork of the fork");
    assert_eq!(again.wait().await.status, RunStatus::Completed);
    let calls = rig.store.tool_calls(again.run_id());
    assert_eq!(calls[0].made_by.as_deref(), Some(parent.as_str()));
    assert_eq!(calls[0].key, format!("{parent}/run/1/0"));
    assert_eq!(tools.calls("charge"), 1);
    let history = rig
        .store
        .load_snapshot_history(again.run_id())
        .await
        .expect("history");
    assert!(
        history.windows(2).all(|w| w[0].seq < w[1].seq),
        "{history:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fork_taken_on_before_its_copy_was_whole_copies_it_again_from_its_parent() {
    let model = charging_model();
    let tools = charging_tools();
    let rig = rig(&model, &tools).await;
    let parent = charged_run(&rig).await;
    // A fork whose executor died as it was recorded: its record, with its
    // lineage, and nothing copied; its lease long expired.
    let origin = leasehold_actors::ForkOrigin {
        parent: parent.clone(),
        path: "run".to_owned(),
        step: 2,
        seq: rig
            .store
            .load_snapshot_history(&parent)
            .await
            .expect("history")
            .iter()
            .filter(|s| s.step == 1)
            .map(|s| s.seq)
            .max()
            .expect("step 1's end"),
        guidance: Some("Answer in French.".to_owned()),
        changes: Vec::new(),
        person_answers: Vec::new(),
    };
    let mut record = rig.store.run(&parent).expect("the parent");
    record.run_id = "run-fork-cut-short".to_owned();
    record.status = RunStatus::Running;
    record.owner_id = Some("dead-executor".to_owned());
    record.fence = 1;
    record.lease_expires_at_ms = 1;
    record.answer = None;
    record.fork = Some(origin);
    rig.store.create_run(record).await.expect("recorded");
    model.replace_script("run", [Turn::answer("facturé")]);
    model.clear_requests();

    let mut fork = rig
        .engine
        .resume("run-fork-cut-short")
        .await
        .expect("taken on");
    let state = fork.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(
        tools.calls("charge"),
        1,
        "the parent's call was not sent again"
    );
    let request = &model.requests_of("run")[0];
    assert!(
        request
            .messages
            .iter()
            .any(|m| m.role == ChatRole::Tool && m.content == "charged 7"),
        "{request:?}"
    );
    assert_eq!(
        request.messages.last().map(|m| m.content.as_str()),
        Some("Answer in French.")
    );
    assert_eq!(rig.store.tool_calls("run-fork-cut-short").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_fork_cut_short_mid_copy_is_resumed_with_its_lineage_logged_once() {
    let model = charging_model();
    let tools = charging_tools();
    let memory = MemoryStore::new();
    let faults = Faults::none().only("saving a snapshot");
    let store = Arc::new(FaultyStore::new(Arc::new(memory.clone()), faults.clone()));
    let engine = Engine::builder()
        .config(config())
        .model(Arc::new(model.clone()))
        .store(store.clone())
        .tool_server("local", Arc::new(tools.clone()))
        .build()
        .await
        .expect("engine builds");
    let mut run = engine.start(flow()).await.expect("starts");
    assert_eq!(run.wait().await.status, RunStatus::Completed);
    let parent = run.run_id().to_owned();

    // The executor "dies" at the copy's first snapshot.
    faults.refuse_writes(true);
    let spec = ForkSpec::root(2).with_guidance("Answer in French.");
    let cut = engine.fork(&parent, spec).await;
    faults.refuse_writes(false);
    assert!(matches!(cut, Err(EngineError::Store(_))), "{cut:?}");
    let fork_id = memory
        .list_runs()
        .await
        .expect("runs")
        .into_iter()
        .find(|r| r.fork.is_some())
        .expect("the fork's record")
        .run_id;
    assert_eq!(memory.tool_calls(&fork_id).len(), 1, "its copy began");
    assert!(
        memory
            .load_events(&fork_id, 0)
            .await
            .expect("log")
            .is_empty(),
        "nothing of it started"
    );

    // Taken on again: its copy made whole, its lineage logged, once.
    model.replace_script("run", [Turn::answer("facturé")]);
    model.clear_requests();
    let mut fork = engine.resume(&fork_id).await.expect("taken on");
    assert_eq!(fork.wait().await.status, RunStatus::Completed);
    assert_eq!(
        tools.calls("charge"),
        1,
        "the parent's call was not sent again"
    );
    let log = memory.load_events(&fork_id, 0).await.expect("log");
    let kinds: Vec<&str> = log.iter().map(|e| e.kind.name()).collect();
    assert_eq!(kinds.first(), Some(&"run_forked"), "{kinds:?}");
    let count = |name: &str| kinds.iter().filter(|k| **k == name).count();
    assert_eq!(count("run_forked"), 1, "{kinds:?}");
    assert_eq!(count("tool_call_replayed"), 1, "{kinds:?}");
    assert_eq!(
        count("run_resumed"),
        0,
        "it never started before: {kinds:?}"
    );
    let request = &model.requests_of("run")[0];
    assert_eq!(
        request.messages.last().map(|m| m.content.as_str()),
        Some("Answer in French.")
    );
}

#[tokio::test(start_paused = true)]
async fn what_people_answered_the_parent_is_inherited_and_said_never_replayed_silently() {
    use leasehold_actors::testing::{Scripted, ScriptedEvaluator};
    // The root charges; the charge hangs and is intervened; its outcome is
    // unknown, and a person says it took effect. Then the root spawns a
    // worker whose deploy hangs and is escalated; a person answers.
    let model = ScriptedModel::new()
        .script(
            "run",
            [
                Turn::tools([("charge", json!({"order": 7}))]),
                Turn::spawn([("researcher", "deploy the fix")]),
                Turn::answer("charged and deployed"),
            ],
        )
        .script(
            "worker:researcher",
            [
                Turn::tools([("deploy", json!({"env": "prod"}))]),
                Turn::answer("deployed to staging"),
            ],
        );
    let tools = ScriptedTools::new()
        .tool("charge", Some(false), [ToolAct::Hang])
        .tool("deploy", Some(false), [ToolAct::Hang]);
    let evaluator = ScriptedEvaluator::new([
        Scripted::verdict("INTERVENE", "the charge is silent", ""),
        Scripted::verdict("ESCALATE", "deploy to prod is silent", ""),
    ]);
    let mut config = config();
    config.supervision.watchdog.free_renewals = 0;
    let Rig {
        engine,
        events,
        store,
    } = judged_rig(&model, &tools, Some(evaluator), config).await;
    let mut run = engine.start(flow()).await.expect("starts");
    let parent = run.run_id().to_owned();
    let state = run
        .wait_until(|s| s.status == RunStatus::ReconciliationRequired)
        .await;
    let key = state
        .paused
        .and_then(|p| p.call)
        .map(|c| c.key)
        .expect("the charge");
    run.reconcile(
        key.clone(),
        ReconcileDecision::MarkDone {
            result: "charged once, says the bank".into(),
        },
    )
    .await
    .expect("decided");
    let state = run
        .wait_until(|s| s.status == RunStatus::WaitingHuman)
        .await;
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    run.resume(Some("deploy to staging instead".into()))
        .await
        .expect("resumed");
    assert_eq!(run.wait().await.status, RunStatus::Completed);

    model.replace_script("run", [Turn::answer("again")]);
    let mut fork = engine
        .fork(&parent, ForkSpec::root(3))
        .await
        .expect("forks");
    assert_eq!(fork.wait().await.status, RunStatus::Completed);
    let forked: Vec<_> = events
        .events()
        .into_iter()
        .filter(|e| &*e.run_id == fork.run_id())
        .collect();
    let EventKind::RunForked(started) = &forked[0].kind else {
        panic!("{:?}", forked[0]);
    };
    let person_answers = &started.person_answers;
    assert!(
        person_answers
            .iter()
            .any(|a| a.contains("answered: deploy to staging instead")),
        "{person_answers:?}"
    );
    assert!(
        person_answers
            .iter()
            .any(|a| a.contains(&key) && a.contains("charged once, says the bank")),
        "{person_answers:?}"
    );
    assert!(forked.iter().any(|e| matches!(
        &e.kind,
        EventKind::ToolCallReplayed { idempotency_key, by_person: true, .. } if *idempotency_key == key
    )));
    let origin = store
        .run(fork.run_id())
        .and_then(|r| r.fork)
        .expect("lineage");
    assert_eq!(origin.person_answers, *person_answers);
    assert_eq!(tools.calls("charge"), 1);
    assert_eq!(tools.calls("deploy"), 1);
}

/// How long each result of the fetching tool is (bytes).
const LARGE: usize = 256 * 1024;

/// A result of `LARGE` bytes that no compression shrinks.
fn large_result(seed: u64) -> String {
    let mut rng = fastrand::Rng::with_seed(seed);
    std::iter::repeat_with(|| rng.alphanumeric())
        .take(LARGE)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_run_of_large_tool_results_stores_each_once_and_its_forks_store_only_their_own_steps() {
    const STEPS: u64 = 10;
    let model = ScriptedModel::new().script(
        "run",
        (0..STEPS)
            .map(|_| Turn::tools([("fetch", json!({"page": 1}))]))
            .chain([Turn::answer("read")]),
    );
    let tools = ScriptedTools::new().tool(
        "fetch",
        Some(true),
        (0..STEPS).map(|i| ToolAct::returns(large_result(i), secs(1))),
    );
    let rig = rig(&model, &tools).await;
    let mut flow = flow();
    flow.max_steps = 12;
    let mut run = rig.engine.start(flow).await.expect("starts");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    let parent = run.run_id().to_owned();
    assert_eq!(tools.calls("fetch"), 10);

    // Each result is stored once in the history (and once more in the
    // latest at most): whole states would hold 55 and more.
    let large = u64::try_from(LARGE).unwrap();
    let parent_bytes = rig.store.snapshot_bytes(&parent).await.unwrap();
    assert!(
        parent_bytes < (STEPS + 2) * large,
        "{parent_bytes} bytes stored for {STEPS} results of {large} bytes"
    );
    assert!(
        parent_bytes > STEPS * large,
        "{parent_bytes}: every result is kept"
    );
    // The history reads back whole: the last state holds every result.
    let history = rig.store.load_snapshot_history(&parent).await.unwrap();
    let tool_messages = |snapshot: &leasehold_actors::Snapshot| {
        snapshot.state["transcript"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "tool")
            .count()
    };
    assert_eq!(tool_messages(history.last().unwrap()), 10);
    assert!(history.iter().all(|s| s.base.is_none()));

    // Forked twice: after five results and after all ten.
    model.replace_script("run", [Turn::answer("forked"), Turn::answer("forked")]);
    for (step, results) in [(6, 5), (11, 10)] {
        let mut fork = rig
            .engine
            .fork(&parent, ForkSpec::root(step))
            .await
            .expect("forks");
        let state = fork.wait().await;
        assert_eq!(state.status, RunStatus::Completed, "{state:?}");
        let fork_id = fork.run_id().to_owned();
        let fork_bytes = rig.store.snapshot_bytes(&fork_id).await.unwrap();
        assert!(
            fork_bytes < large / 4,
            "fork at step {step}: {fork_bytes} bytes stored, its parent's results copied"
        );
        // Read back whole: its first state is the parent's at the fork
        // point, its last holds the parent's results and its own answer.
        let origin = rig
            .store
            .load_run(&fork_id)
            .await
            .unwrap()
            .unwrap()
            .fork
            .unwrap();
        let at_point = history
            .iter()
            .rfind(|s| s.seq <= origin.seq)
            .expect("the parent's state at the fork point");
        let forked = rig.store.load_snapshot_history(&fork_id).await.unwrap();
        assert_eq!(forked[0].state["transcript"], at_point.state["transcript"]);
        assert_eq!(tool_messages(&forked[0]), results);
        let latest = rig.store.load_snapshots(&fork_id).await.unwrap();
        assert_eq!(tool_messages(&latest[0]), results);
        assert_eq!(latest[0].state["answer"], "forked");
    }
    // The parent is untouched.
    assert_eq!(
        rig.store.snapshot_bytes(&parent).await.unwrap(),
        parent_bytes
    );
}
