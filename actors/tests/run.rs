//! The agent loop as a supervision tree: runs, workers, calls, budget
//! checkpoints, restart and pause — on paused time with the scripted fakes.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::{
    BudgetConfig, CallOutcome, ChatRole, DecidedBy, Engine, EngineConfig, EngineError, Event,
    EventKind, FinishReason, Flow, HandedTo, ModelError, ModelErrorKind, OnExhausted, PolicyName,
    ReconcileDecision, RestartPolicy, RunHandle, RunStatus,
    testing::{
        MemoryStore, RecordingSink, Scripted, ScriptedEvaluator, ScriptedModel, ScriptedTools,
        ToolAct, Turn, user_messages,
    },
};
use serde_json::json;
use tokio::time::sleep;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Leases of 10 s for calls and 60 s for worker steps, two free renewals,
/// restarts after exactly 1 s, 2 s, 4 s … (no jitter), at most 3 in 60 s.
fn config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.model_stream = secs(10);
    config.supervision.lease.model_blocking = secs(10);
    config.supervision.lease.tool_call = secs(10);
    config.supervision.lease.worker_step = secs(60);
    config.supervision.watchdog.free_renewals = 2;
    config.restart = RestartPolicy {
        jitter: 0.0,
        ..RestartPolicy::default()
    };
    config.budget = BudgetConfig::default();
    config
}

struct Rig {
    engine: Engine,
    events: RecordingSink,
    store: MemoryStore,
}

async fn rig(
    model: &ScriptedModel,
    tools: &ScriptedTools,
    evaluator: Option<&ScriptedEvaluator>,
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
        builder = builder.evaluator(Arc::new(evaluator.clone()));
    }
    Rig {
        engine: builder.build().await.expect("engine builds"),
        events,
        store,
    }
}

/// A flow on the `local` tool server, with one worker kind `researcher`.
fn flow(max_steps: u32, worker_steps: u32) -> Flow {
    serde_json::from_value(json!({
        "name": "research",
        "task": "Find out what happened.",
        "system_prompt": "You are careful.",
        "max_steps": max_steps,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}],
        "workers": {"researcher": {"prompt": "You research one question.", "max_steps": worker_steps}}
    }))
    .expect("valid flow")
}

async fn start(rig: &Rig, flow: Flow) -> RunHandle {
    rig.engine.start(flow).await.expect("run starts")
}

fn of_kind<'a>(events: &'a [Event], name: &str) -> Vec<&'a Event> {
    events.iter().filter(|e| e.kind.name() == name).collect()
}

fn search_turn() -> Turn {
    Turn::tools([("search", json!({"q": "logs"}))])
}

#[tokio::test(start_paused = true)]
async fn three_worker_run_completes_with_each_result_reaching_the_root() {
    let model = ScriptedModel::new()
        .script(
            "run",
            [
                Turn::spawn([
                    ("researcher", "look at A"),
                    ("researcher", "look at B"),
                    ("researcher", "look at C"),
                ]),
                Turn::answer("all three found"),
            ],
        )
        .script(
            "worker:researcher",
            [
                Turn::answer("finding 1"),
                Turn::answer("finding 2"),
                Turn::answer("finding 3"),
            ],
        );
    let tools = ScriptedTools::new();
    let rig = rig(&model, &tools, None, config()).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("all three found"));

    let root_calls = model.requests_of("run");
    let results: Vec<_> = root_calls[1]
        .messages
        .iter()
        .filter(|m| m.role == ChatRole::Tool)
        .map(|m| m.content.clone())
        .collect();
    let mut sorted = results.clone();
    sorted.sort();
    assert_eq!(sorted, ["finding 1", "finding 2", "finding 3"]);
    let events = rig.events.events();
    assert_eq!(of_kind(&events, "worker_spawned").len(), 3);
    let finished = of_kind(&events, "worker_finished");
    assert_eq!(finished.len(), 3);
    assert!(finished.iter().all(|e| matches!(
        &e.kind,
        EventKind::WorkerFinished {
            outcome: CallOutcome::Ok,
            ..
        }
    )));
    // Three distinct workers, each under its own path.
    let mut paths: Vec<_> = finished.iter().map(|e| e.path.clone()).collect();
    paths.sort();
    paths.dedup();
    assert_eq!(paths.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn every_transition_emits_its_event() {
    let model = ScriptedModel::new()
        .script(
            "run",
            [
                Turn::spawn([("researcher", "dig")]),
                search_turn(),
                Turn::answer("done"),
            ],
        )
        .script("worker:researcher", [Turn::answer("dug")]);
    let tools =
        ScriptedTools::new().tool("search", Some(true), [ToolAct::returns("3 hits", secs(1))]);
    let rig = rig(&model, &tools, None, config()).await;
    let mut run = start(&rig, flow(5, 3)).await;
    assert_eq!(run.wait().await.status, RunStatus::Completed);
    let kinds = rig.events.kinds();
    for kind in [
        "run_started",
        "step_started",
        "model_call_started",
        "model_call_finished",
        "worker_spawned",
        "worker_finished",
        "tool_call_started",
        "tool_call_finished",
        "run_completed",
    ] {
        assert!(kinds.contains(&kind), "no `{kind}` in {kinds:?}");
    }
    assert_eq!(kinds.first(), Some(&"run_started"));
    assert_eq!(kinds.last(), Some(&"run_completed"));
    let snapshot = rig.store.snapshot(run.run_id(), "run").expect("a snapshot");
    assert_eq!(snapshot.status, RunStatus::Completed);
    assert_eq!(snapshot.step, 3);
}

#[tokio::test(start_paused = true)]
async fn worker_converging_gets_proportional_extensions_then_a_fourth_is_refused() {
    // A worker declared with 3 steps keeps making progress; the evaluator
    // says EXTEND at confidence 0.5 each time: 3 → 5 → 8 → 12, then the
    // fourth checkpoint has no extension left and wraps up.
    let mut worker_turns: Vec<Turn> = (0..12).map(|_| search_turn()).collect();
    worker_turns.push(Turn::answer("summary of 12 steps"));
    let model = ScriptedModel::new()
        .script(
            "run",
            [
                Turn::spawn([("researcher", "go deep")]),
                Turn::answer("root done"),
            ],
        )
        .script("worker:researcher", worker_turns);
    let tools =
        ScriptedTools::new().tool("search", Some(true), [ToolAct::returns("more", secs(1))]);
    let evaluator = ScriptedEvaluator::new([]).with_budget_script([Scripted::decision(
        "EXTEND",
        "converging",
        0.5,
    )]);
    let rig = rig(&model, &tools, Some(&evaluator), config()).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");

    let events = rig.events.events();
    let extended: Vec<_> = of_kind(&events, "budget_extended")
        .into_iter()
        .filter_map(|e| match &e.kind {
            EventKind::BudgetExtended(r) => {
                Some((r.figures.limit, r.new_limit, r.figures.steps_declared))
            }
            _ => None,
        })
        .collect();
    assert_eq!(extended, [(3, 5, 3), (5, 8, 3), (8, 12, 3)]);
    let exhausted: Vec<_> = of_kind(&events, "budget_exhausted")
        .into_iter()
        .filter_map(|e| match &e.kind {
            EventKind::BudgetExhausted(r) => Some((r.decided_by, r.figures.steps_used)),
            _ => None,
        })
        .collect();
    assert_eq!(exhausted, [(DecidedBy::Cap, 12)]);
    assert_eq!(
        evaluator.budget_calls(),
        3,
        "the fourth checkpoint must not ask"
    );
    // The wrap-up step: one last call, with no tools, asking for a summary.
    let worker_calls = model.requests_of("worker:researcher");
    assert_eq!(worker_calls.len(), 13);
    let last = worker_calls.last().expect("a wrap-up call");
    assert!(last.tools.is_empty());
    assert!(
        user_messages(last)
            .last()
            .is_some_and(|m| m.contains("step budget is used up"))
    );
    let root_second = &model.requests_of("run")[1];
    assert!(
        root_second
            .messages
            .iter()
            .any(|m| m.content == "summary of 12 steps")
    );
}

#[tokio::test(start_paused = true)]
async fn unlimited_budget_stays_unlimited() {
    let mut turns: Vec<Turn> = (0..30).map(|_| search_turn()).collect();
    turns.push(Turn::answer("after 31 steps"));
    let model = ScriptedModel::new().script("run", turns);
    let tools = ScriptedTools::new().tool("search", Some(true), [ToolAct::returns("ok", secs(1))]);
    let evaluator = ScriptedEvaluator::new([])
        .with_budget_script([Scripted::decision("WRAP_UP", "enough", 0.9)]);
    let rig = rig(&model, &tools, Some(&evaluator), config()).await;
    let mut run = start(&rig, flow(0, 3)).await;
    let state = run.wait().await;
    assert_eq!(state.answer.as_deref(), Some("after 31 steps"));
    assert_eq!(evaluator.budget_calls(), 0);
    assert_eq!(
        rig.events.count("budget_extended") + rig.events.count("budget_exhausted"),
        0
    );
    let steps: Vec<u32> = rig
        .events
        .events()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::StepStarted { limit, .. } => Some(limit),
            _ => None,
        })
        .collect();
    assert_eq!(steps.len(), 31);
    assert!(
        steps.iter().all(|limit| *limit == 0),
        "unlimited became {steps:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn evaluator_down_at_checkpoint_wraps_up() {
    let model = ScriptedModel::new().script(
        "run",
        [search_turn(), search_turn(), Turn::answer("wrapped up")],
    );
    let tools = ScriptedTools::new().tool("search", Some(true), [ToolAct::returns("ok", secs(1))]);
    let evaluator = ScriptedEvaluator::new([])
        .with_budget_script([Scripted::Fail("connection refused".into())]);
    let rig = rig(&model, &tools, Some(&evaluator), config()).await;
    let mut run = start(&rig, flow(2, 3)).await;
    let state = run.wait().await;
    assert_eq!(state.answer.as_deref(), Some("wrapped up"));
    let records: Vec<_> = rig
        .events
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::BudgetExhausted(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].decided_by, DecidedBy::Breaker);
    assert!(
        model.requests_of("run")[2].tools.is_empty(),
        "the wrap-up step offers no tools"
    );
}

#[tokio::test(start_paused = true)]
async fn intervene_on_a_tool_restarts_it_after_backoff_with_the_same_key() {
    let model = ScriptedModel::new().script("run", [search_turn(), Turn::answer("found it")]);
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::Hang, ToolAct::returns("hit", secs(2))],
    );
    let evaluator = ScriptedEvaluator::new([Scripted::verdict("INTERVENE", "search is stuck", "")]);
    let rig = rig(&model, &tools, Some(&evaluator), config()).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.wait().await;
    assert_eq!(state.answer.as_deref(), Some("found it"), "{state:?}");

    let invocations = tools.invocations();
    assert_eq!(invocations.len(), 2);
    assert_eq!(
        invocations[0].idempotency_key,
        invocations[1].idempotency_key
    );
    assert!(
        invocations[0].idempotency_key.ends_with("/run/1/0"),
        "{}",
        invocations[0].idempotency_key
    );
    let events = rig.events.events();
    let restarted = of_kind(&events, "restarted");
    assert_eq!(restarted.len(), 1);
    assert!(matches!(
        &restarted[0].kind,
        EventKind::Restarted { attempt: 2, delay_ms: 1000, reason } if reason.contains("search is stuck")
    ));
    let started: Vec<_> = of_kind(&events, "tool_call_started")
        .into_iter()
        .map(|e| e.at)
        .collect();
    // Intervened after two free renewals (30 s), restarted 1 s later.
    assert_eq!(started[1] - started[0], 31_000);
    assert_eq!(restarted[0].at + 1000, started[1]);
}

/// A turn of four calls of the idempotent `search`.
fn four_searches() -> Turn {
    Turn::tools([
        ("search", json!({"q": "a"})),
        ("search", json!({"q": "b"})),
        ("search", json!({"q": "c"})),
        ("search", json!({"q": "d"})),
    ])
}

/// The contents of the tool messages the `consumer` model saw on its
/// `call`-th request (0-based).
fn tool_results(model: &ScriptedModel, consumer: &str, call: usize) -> Vec<String> {
    model.requests_of(consumer)[call]
        .messages
        .iter()
        .filter(|m| m.role == ChatRole::Tool)
        .map(|m| m.content.clone())
        .collect()
}

fn gave_up(events: &[Event]) -> Vec<(String, u32, HandedTo, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::GaveUp {
                subject,
                attempts,
                reason,
                handed_to,
            } => Some((subject.clone(), *attempts, *handed_to, reason.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_root_past_its_restart_intensity_pauses_the_run_naming_the_limit_and_resume_goes_on() {
    let model = ScriptedModel::new().script("run", [four_searches(), Turn::answer("done")]);
    let hang = ToolAct::Hang;
    let found = ToolAct::returns("found", secs(1));
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [hang.clone(), hang.clone(), hang.clone(), hang, found],
    );
    let evaluator = ScriptedEvaluator::always("INTERVENE");
    let mut config = config();
    config.supervision.watchdog.free_renewals = 0;
    let rig = rig(&model, &tools, Some(&evaluator), config).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.paused().await;
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    let reason = state.paused.clone().map(|p| p.reason).unwrap_or_default();
    assert!(
        reason.contains("restart intensity exceeded: more than 3 restarts in 60s")
            && reason.contains("tool `search`")
            && reason.ends_with("; resume to try again."),
        "{reason}"
    );
    let given_up = gave_up(&rig.events.events());
    assert_eq!(given_up.len(), 1, "{given_up:?}");
    assert_eq!(given_up[0].2, HandedTo::Person);
    assert_eq!(rig.events.count("run_failed"), 0);

    // Paused, no backoff runs out: the three restarts wait for the resume.
    sleep(secs(3600)).await;
    assert_eq!(tools.calls("search"), 4, "a restart ran during the pause");
    run.resume(None).await.expect("resumes");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("done"));
    assert_eq!(tool_results(&model, "run", 1), ["found"; 4]);
    // The backoffs (1 s, 2 s, 4 s) ran on the run's clock: none of them
    // elapsed in the pause, each restart came that long after the resume.
    let events = rig.events.events();
    let resumed = of_kind(&events, "resumed")[0].at;
    let mut after: Vec<u64> = of_kind(&events, "tool_call_started")
        .into_iter()
        .filter(|e| e.at >= resumed)
        .map(|e| e.at - resumed)
        .collect();
    after.sort_unstable();
    assert_eq!(after, [0, 1000, 2000, 4000], "restarts after the resume");
}

#[tokio::test(start_paused = true)]
async fn with_on_exhausted_fail_a_root_past_its_restart_intensity_fails_and_keeps_its_state() {
    let model = ScriptedModel::new().script("run", [four_searches(), Turn::answer("never")]);
    let tools = ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang]);
    let evaluator = ScriptedEvaluator::always("INTERVENE");
    let mut config = config();
    config.supervision.watchdog.free_renewals = 0;
    config.restart.on_exhausted = OnExhausted::Fail;
    let rig = rig(&model, &tools, Some(&evaluator), config).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Failed);
    let reason = state.reason.unwrap_or_default();
    assert!(
        reason.starts_with("restart intensity exceeded: more than 3 restarts in 60s"),
        "{reason}"
    );
    assert_eq!(tools.calls("search"), 4);
    assert_eq!(rig.events.count("restarted"), 3);
    assert_eq!(rig.events.count("run_failed"), 1);
    let snapshot = rig.store.snapshot(run.run_id(), "run").expect("state kept");
    assert_eq!(snapshot.status, RunStatus::Failed);
    assert_eq!(
        snapshot.state["transcript"].as_array().map(Vec::len),
        Some(2)
    );
}

#[tokio::test(start_paused = true)]
async fn a_worker_past_its_restart_intensity_fails_and_its_parent_model_hears_it() {
    let model = ScriptedModel::new()
        .script(
            "run",
            [
                Turn::spawn([("researcher", "search four ways")]),
                Turn::answer("worked around it"),
            ],
        )
        .script(
            "worker:researcher",
            [four_searches(), Turn::answer("never")],
        );
    let tools = ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang]);
    let evaluator = ScriptedEvaluator::always("INTERVENE");
    let mut config = config();
    config.supervision.watchdog.free_renewals = 0;
    let rig = rig(&model, &tools, Some(&evaluator), config).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("worked around it"));
    let results = tool_results(&model, "run", 1);
    assert_eq!(results.len(), 1);
    assert!(
        results[0].contains("restart intensity exceeded: more than 3 restarts in 60s"),
        "{results:?}"
    );
    let given_up = gave_up(&rig.events.events());
    assert_eq!(given_up.len(), 1, "{given_up:?}");
    assert_eq!(given_up[0].2, HandedTo::Parent);
}

#[tokio::test(start_paused = true)]
async fn a_model_call_out_of_restarts_pauses_the_run_and_resume_calls_it_again() {
    let down = || {
        Turn::fail(ModelError {
            kind: ModelErrorKind::ConnectionRefused,
            message: "connection refused".into(),
            retryable: true,
            retry_after: None,
        })
    };
    let model = ScriptedModel::new().script(
        "run",
        [
            search_turn(),
            down(),
            down(),
            down(),
            down(),
            Turn::answer("back"),
        ],
    );
    let tools =
        ScriptedTools::new().tool("search", Some(true), [ToolAct::returns("found", secs(1))]);
    let rig = rig(&model, &tools, None, config()).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.paused().await;
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    let reason = state.paused.clone().map(|p| p.reason).unwrap_or_default();
    assert!(
        reason.contains("model call: failed on each of its 4 attempts")
            && reason.contains("the call to the model")
            && reason.contains("connection refused"),
        "{reason}"
    );
    assert_eq!(model.requests_of("run").len(), 5);
    // The work done before the endpoint died is kept.
    assert_eq!(tools.calls("search"), 1);
    run.resume(Some("the endpoint is back".into()))
        .await
        .expect("resumes");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("back"));
    assert_eq!(tools.calls("search"), 1, "the tool was not called again");
    assert_eq!(tool_results(&model, "run", 5), ["found"]);
}

#[tokio::test(start_paused = true)]
async fn a_person_deciding_on_a_call_of_unknown_outcome_spends_no_restart_intensity() {
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("deploy", json!({"env": "prod"}))]),
            search_turn(),
            Turn::answer("deployed and searched"),
        ],
    );
    let hang = ToolAct::Hang;
    let tools = ScriptedTools::new()
        .tool(
            "deploy",
            Some(false),
            [
                hang.clone(),
                hang.clone(),
                hang.clone(),
                ToolAct::returns("deployed", secs(1)),
            ],
        )
        .tool(
            "search",
            Some(true),
            [
                hang.clone(),
                hang.clone(),
                hang,
                ToolAct::returns("found", secs(1)),
            ],
        );
    let evaluator = ScriptedEvaluator::always("INTERVENE");
    let mut config = config();
    config.supervision.watchdog.free_renewals = 0;
    let rig = rig(&model, &tools, Some(&evaluator), config).await;
    let mut run = start(&rig, flow(5, 3)).await;
    // Three times a person says to try the deploy again, within the window.
    for _ in 0..3 {
        let state = run
            .wait_until(|s| s.status == RunStatus::ReconciliationRequired)
            .await;
        let key = state
            .paused
            .and_then(|p| p.call)
            .map(|c| c.key)
            .expect("key");
        run.reconcile(key, ReconcileDecision::Retry)
            .await
            .expect("retry");
        run.wait_until(|s| s.status == RunStatus::Running).await;
    }
    // The search that follows still gets its three restarts.
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(tools.calls("deploy"), 4);
    assert_eq!(tools.calls("search"), 4);
    assert_eq!(rig.events.count("restarted"), 3);
    assert!(gave_up(&rig.events.events()).is_empty());
}

/// A root that spawns one worker, whose `deploy` tool goes silent and is
/// escalated after the free renewals.
async fn escalating_run() -> (Rig, ScriptedModel, RunHandle) {
    let model = ScriptedModel::new()
        .script(
            "run",
            [
                Turn::spawn([("researcher", "deploy the fix")]),
                Turn::answer("deployed"),
            ],
        )
        .script(
            "worker:researcher",
            [
                Turn::tools([("deploy", json!({"env": "prod"}))]),
                Turn::answer("deployed to staging"),
            ],
        );
    let tools = ScriptedTools::new().tool("deploy", Some(false), [ToolAct::Hang]);
    let evaluator = ScriptedEvaluator::new([Scripted::verdict(
        "ESCALATE",
        "deploy to prod is silent",
        "",
    )]);
    let rig = rig(&model, &tools, Some(&evaluator), config()).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.paused().await;
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    (rig, model, run)
}

#[tokio::test(start_paused = true)]
async fn escalate_in_a_worker_pauses_the_whole_run_with_clocks_stopped_until_resumed() {
    let (rig, model, mut run) = escalating_run().await;
    let state = run.state();
    let paused = state.paused.expect("pause info");
    assert_eq!(paused.reason, "deploy to prod is silent");
    assert_eq!(paused.subject, "deploy");
    assert!(
        paused.path.starts_with("run/worker:researcher:"),
        "{}",
        paused.path
    );
    let before = rig.events.events().len();

    // Ten hours in waiting_human: nothing expires, no budget is spent.
    sleep(Duration::from_secs(10 * 3600)).await;
    let during = rig.events.events()[before..].to_vec();
    assert!(during.is_empty(), "events while paused: {during:?}");
    assert_eq!(run.state().status, RunStatus::WaitingHuman);

    run.resume(Some("deploy to staging instead".into()))
        .await
        .expect("resumed");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("deployed"));
    let worker_calls = model.requests_of("worker:researcher");
    assert_eq!(worker_calls.len(), 2);
    assert!(
        user_messages(&worker_calls[1])
            .iter()
            .any(|m| m.contains("deploy to staging instead")),
        "guidance not in the worker's next model call"
    );
    assert!(
        !user_messages(&worker_calls[0])
            .iter()
            .any(|m| m.contains("staging instead"))
    );
    assert_eq!(rig.events.count("paused"), 1);
    assert_eq!(rig.events.count("resumed"), 1);
}

#[tokio::test(start_paused = true)]
async fn cancel_while_paused_ends_the_run_as_cancelled() {
    let (rig, _model, mut run) = escalating_run().await;
    run.cancel("not today").await.expect("cancelled");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Cancelled);
    assert_eq!(state.reason.as_deref(), Some("not today"));
    assert_eq!(rig.events.count("run_cancelled"), 1);
    let snapshot = rig
        .store
        .snapshot(run.run_id(), "run")
        .expect("terminal snapshot");
    assert_eq!(snapshot.status, RunStatus::Cancelled);
    let refused = run
        .resume(None)
        .await
        .expect_err("a finished run cannot resume");
    assert!(
        refused.to_string().contains("already finished"),
        "{refused}"
    );
    let refused = run
        .cancel("again")
        .await
        .expect_err("a finished run cannot be cancelled");
    assert!(
        refused.to_string().contains("already finished"),
        "{refused}"
    );
}

#[tokio::test(start_paused = true)]
async fn resume_of_a_run_that_is_not_paused_is_refused() {
    let model = ScriptedModel::new().script("run", [search_turn(), Turn::answer("done")]);
    let tools = ScriptedTools::new().tool("search", Some(true), [ToolAct::returns("ok", secs(5))]);
    let rig = rig(&model, &tools, None, config()).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let refused = run.resume(Some("hi".into())).await.expect_err("not paused");
    assert!(refused.to_string().contains("is not paused"), "{refused}");
    assert_eq!(run.wait().await.status, RunStatus::Completed);
}

#[tokio::test(start_paused = true)]
async fn nudge_from_the_watchdog_is_visible_in_exactly_the_next_step() {
    let model =
        ScriptedModel::new().script("run", [search_turn(), search_turn(), Turn::answer("done")]);
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [
            ToolAct::returns("slow hit", secs(25)),
            ToolAct::returns("fast hit", secs(1)),
        ],
    );
    let evaluator = ScriptedEvaluator::new([
        Scripted::verdict(
            "NUDGE",
            "repeats itself",
            "query the error log, not the access log",
        ),
        Scripted::verdict("RENEW", "fine", ""),
    ]);
    let mut config = config();
    config.supervision.watchdog.free_renewals = 0;
    let rig = rig(&model, &tools, Some(&evaluator), config).await;
    let mut run = start(&rig, flow(5, 3)).await;
    assert_eq!(run.wait().await.status, RunStatus::Completed);
    let calls = model.requests_of("run");
    let nudge = "query the error log, not the access log";
    let count = |n: usize| {
        user_messages(&calls[n])
            .iter()
            .filter(|m| m.as_str() == nudge)
            .count()
    };
    assert_eq!(count(0), 0, "the in-flight step cannot see it");
    assert_eq!(count(1), 1, "the next step sees it");
    assert_eq!(count(2), 1, "it is not delivered again");
    let nudges_per_step: Vec<u32> = rig
        .events
        .events()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::StepStarted { nudges, .. } => Some(nudges),
            _ => None,
        })
        .collect();
    assert_eq!(nudges_per_step, [0, 1, 0]);
}

#[tokio::test(start_paused = true)]
async fn panic_in_a_tool_call_actor_is_contained_and_the_run_goes_on() {
    let model = ScriptedModel::new().script(
        "run",
        [search_turn(), search_turn(), Turn::answer("survived")],
    );
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [
            ToolAct::PanicAtOnce,
            ToolAct::returns("ok", secs(1)),
            ToolAct::Panic,
            ToolAct::returns("ok again", secs(1)),
        ],
    );
    let rig = rig(&model, &tools, None, config()).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("survived"));
    let reasons: Vec<String> = rig
        .events
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Restarted { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons.iter().all(|r| r.contains("panicked")),
        "{reasons:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_flow_naming_an_unknown_tool_server_is_refused() {
    let model = ScriptedModel::new();
    let tools = ScriptedTools::new();
    let rig = rig(&model, &tools, None, config()).await;
    let flow: Flow = serde_json::from_value(json!({
        "name": "x", "task": "y", "max_steps": 1,
        "tools": [{"name": "elsewhere", "url": "http://127.0.0.1:9/mcp"}]
    }))
    .expect("valid flow");
    let error = rig.engine.start(flow).await.expect_err("refused");
    assert!(
        matches!(error, EngineError::UnknownToolServer(ref s) if s == "elsewhere"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_model_call_told_to_retry_after_is_restarted_no_sooner() {
    let mut rate_limited = leasehold_actors::ModelError::new(
        leasehold_actors::ModelErrorKind::RateLimited,
        "429 Too Many Requests",
        true,
    );
    rate_limited.retry_after = Some(secs(7));
    let model = ScriptedModel::new().script(
        "run",
        [Turn::fail(rate_limited), Turn::answer("after the wait")],
    );
    let tools = ScriptedTools::new();
    let rig = rig(&model, &tools, None, config()).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.wait().await;
    assert_eq!(state.answer.as_deref(), Some("after the wait"), "{state:?}");
    let events = rig.events.events();
    let restarted = of_kind(&events, "restarted");
    assert!(
        matches!(
            restarted[0].kind,
            EventKind::Restarted { delay_ms: 7000, .. }
        ),
        "the backoff (1 s) was used instead of the server's 7 s: {:?}",
        restarted[0].kind
    );
    let started: Vec<u64> = of_kind(&events, "model_call_started")
        .iter()
        .map(|e| e.at)
        .collect();
    assert!(started[1] - started[0] >= 7000);
}

#[tokio::test(start_paused = true)]
async fn a_tool_out_of_attempts_is_given_up_and_its_loop_model_hears_the_error_however_slow() {
    let model = ScriptedModel::new().script("run", [search_turn(), Turn::answer("without search")]);
    let tools = ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang]);
    let evaluator = ScriptedEvaluator::always("INTERVENE");
    let mut config = config();
    // Each attempt is intervened after 100 s: every restart falls outside
    // the 60 s intensity window, so only the per-call bound stops it.
    config.supervision.lease.tool_call = secs(100);
    config.supervision.watchdog.free_renewals = 0;
    let rig = rig(&model, &tools, Some(&evaluator), config).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = tokio::time::timeout(secs(24 * 3600), run.wait())
        .await
        .expect("the run ends");
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("without search"));
    assert_eq!(tools.calls("search"), 4);
    assert_eq!(rig.events.count("restarted"), 3);
    let results = tool_results(&model, "run", 1);
    assert_eq!(results.len(), 1);
    assert!(
        results[0].starts_with("error: tool `search` failed after 4 attempts: "),
        "{results:?}"
    );
    let given_up = gave_up(&rig.events.events());
    assert_eq!(given_up.len(), 1, "{given_up:?}");
    assert_eq!(given_up[0].0, "search");
    assert_eq!(given_up[0].1, 4);
    assert_eq!(given_up[0].2, HandedTo::Model);
    assert!(
        given_up[0].3.starts_with(
            "search: failed on each of its 4 attempts, the most that 3 restarts allow"
        ),
        "{given_up:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_answer_cut_off_at_the_length_limit_is_continued_not_taken() {
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::answer("The checkout slowdown comes from").cut_off(),
            Turn::answer("The checkout slowdown comes from the database pool size."),
        ],
    );
    let tools = ScriptedTools::new();
    let rig = rig(&model, &tools, None, config()).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.wait().await;
    assert_eq!(
        state.answer.as_deref(),
        Some("The checkout slowdown comes from the database pool size.")
    );
    let requests = model.requests_of("run");
    assert_eq!(requests.len(), 2);
    assert!(
        user_messages(&requests[1])
            .iter()
            .any(|m| m.contains("cut off at the length limit")),
        "the next step is told the answer was cut off"
    );
    let cut = rig
        .events
        .events()
        .into_iter()
        .filter(|e| {
            matches!(
                &e.kind,
                EventKind::ModelCallFinished {
                    finish_reason: Some(FinishReason::Length),
                    ..
                }
            )
        })
        .count();
    assert_eq!(cut, 1);
}

#[tokio::test(start_paused = true)]
async fn max_tokens_of_the_flow_and_of_a_worker_kind_reach_their_loops_requests() {
    let model = ScriptedModel::new()
        .script(
            "run",
            [Turn::spawn([("researcher", "dig")]), Turn::answer("done")],
        )
        .script("worker:researcher", [Turn::answer("dug")]);
    let tools = ScriptedTools::new();
    let rig = rig(&model, &tools, None, config()).await;
    let mut flow = flow(5, 3);
    flow.max_tokens = Some(300);
    flow.workers
        .get_mut("researcher")
        .expect("a kind")
        .max_tokens = Some(50);
    let mut run = start(&rig, flow.clone()).await;
    assert_eq!(run.wait().await.status, RunStatus::Completed);
    let root: Vec<_> = model
        .requests_of("run")
        .iter()
        .map(|r| r.max_tokens)
        .collect();
    assert_eq!(root, [Some(300), Some(300)]);
    let worker: Vec<_> = model
        .requests_of("worker:researcher")
        .iter()
        .map(|r| r.max_tokens)
        .collect();
    assert_eq!(worker, [Some(50)]);

    // Absurd values are refused, naming the key.
    flow.workers
        .get_mut("researcher")
        .expect("a kind")
        .max_tokens = Some(0);
    let Err(refused) = rig.engine.start(flow.clone()).await else {
        panic!("a worker kind's max_tokens of 0 is refused");
    };
    assert!(
        refused
            .to_string()
            .contains("workers.researcher.max_tokens"),
        "{refused}"
    );
    flow.workers
        .get_mut("researcher")
        .expect("a kind")
        .max_tokens = None;
    flow.max_tokens = Some(2_000_000);
    let Err(refused) = rig.engine.start(flow).await else {
        panic!("a flow's max_tokens over the most is refused");
    };
    assert!(refused.to_string().contains("`max_tokens`"), "{refused}");
}

#[tokio::test(start_paused = true)]
async fn a_wrap_up_answer_cut_off_ends_the_run_saying_it_may_be_incomplete() {
    // Cut off in its only step, continued past its budget into a wrap-up
    // that is cut off again: that answer is all there is.
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::answer("The checkout slowdown comes from").cut_off(),
            Turn::answer("The slowdown comes from the pool").cut_off(),
        ],
    );
    let tools = ScriptedTools::new();
    let rig = rig(&model, &tools, None, config()).await;
    let mut run = start(&rig, flow(1, 1)).await;
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed);
    assert_eq!(
        state.answer.as_deref(),
        Some("The slowdown comes from the pool")
    );
    assert!(
        state
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("cut off")),
        "{:?}",
        state.reason
    );
    let ended = rig.events.events().into_iter().find_map(|e| match e.kind {
        EventKind::RunCompleted { cut_off, .. } => Some(cut_off),
        _ => None,
    });
    assert_eq!(ended, Some(true));
    let record = leasehold_actors::RunStore::load_run(&rig.store, run.run_id())
        .await
        .unwrap()
        .unwrap();
    assert!(
        record
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("cut off")),
        "{record:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_model_stuck_repeating_itself_is_shown_to_the_evaluator_and_escalated_to_a_person() {
    const LOOP: &str = "Let me check the logs again to be sure.";
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::looping(LOOP, Duration::from_millis(300)),
            Turn::answer("done"),
        ],
    );
    let tools = ScriptedTools::new();
    let evaluator = ScriptedEvaluator::new([Scripted::verdict(
        "ESCALATE",
        "it keeps saying the same sentence",
        "",
    )]);
    let rig = rig(&model, &tools, Some(&evaluator), config()).await;
    let mut run = start(&rig, flow(5, 3)).await;
    let state = run.paused().await;
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    assert!(
        state
            .paused
            .as_ref()
            .is_some_and(|p| p.reason.contains("the same sentence")),
        "{state:?}"
    );
    // Asked as soon as the stream repeats itself, before any expiry, and
    // shown what the stream was saying.
    let requests = evaluator.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.renewals, 0);
    assert!(
        request
            .stream_tail
            .as_deref()
            .is_some_and(|t| t.contains(LOOP)),
        "{request:?}"
    );
    assert!(
        request.evidence.repetition.is_some_and(|r| r > 0.5),
        "{request:?}"
    );
    run.resume(Some("answer with what you have".into()))
        .await
        .expect("resumes");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("done"));
}

#[tokio::test(start_paused = true)]
async fn a_flow_that_names_the_deadline_policy_has_its_slow_tool_cut_at_the_first_expiry() {
    let model = ScriptedModel::new().script("run", [search_turn(), Turn::answer("without it")]);
    // Alive and reporting progress, but slower than one lease.
    let slow = ToolAct::Return {
        latency: secs(15),
        progress_every: Some(secs(1)),
        result: "found".into(),
    };
    let tools = ScriptedTools::new().tool("search", Some(true), [slow]);
    let rig = rig(&model, &tools, None, config()).await;
    let mut flow = flow(5, 3);
    flow.leases.policy = Some(PolicyName::DEADLINE.into());
    let mut run = start(&rig, flow).await;
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(tools.calls("search"), 4, "every attempt was cut");
    assert_eq!(tools.completed("search"), 0);
    let verdicts = rig.events.verdicts();
    assert_eq!(verdicts.len(), 4);
    assert!(
        verdicts.iter().all(|v| v.decided_by == DecidedBy::Policy
            && v.verdict == leasehold_actors::Verdict::Intervene)
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_cancelled_mid_call_logs_its_leases_cancelled_before_its_end() {
    // A tool call that never answers, and a worker whose model call never
    // does: both in flight, under leases, when the run is cancelled.
    let model = ScriptedModel::new()
        .script(
            "run",
            [Turn::tools([
                ("search", json!({"q": "shoes"})),
                (
                    leasehold_actors::SPAWN_WORKER_TOOL,
                    json!({"kind": "researcher", "task": "look"}),
                ),
            ])],
        )
        .script("worker:researcher", [Turn::hang()]);
    let tools = ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang]);
    let rig = rig(&model, &tools, None, config()).await;
    let mut run = rig.engine.start(flow(4, 4)).await.expect("started");
    while rig.events.count("model_call_started") < 2 || rig.events.count("tool_call_started") < 1 {
        sleep(Duration::from_millis(10)).await;
    }
    run.cancel("not now").await.expect("cancelled");
    assert_eq!(run.wait().await.status, RunStatus::Cancelled);
    let log = rig.store.events(run.run_id());
    let names: Vec<&str> = log.iter().map(|e| e.kind.name()).collect();
    // The tool call, the worker and the worker's model call were each let
    // go under their lease, and said so before the run's end.
    assert_eq!(
        names.iter().filter(|n| **n == "lease_cancelled").count(),
        3,
        "{names:?}"
    );
    assert_eq!(names.last(), Some(&"run_cancelled"), "{names:?}");
    // What the bus published, the log holds: nothing came after the end.
    assert_eq!(
        rig.events.count("lease_cancelled"),
        3,
        "{:?}",
        rig.events.kinds()
    );
    assert_eq!(rig.events.kinds().last(), Some(&"run_cancelled"));
}
