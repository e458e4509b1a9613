//! Durability and ownership: fenced executor leases, takeover, orphans,
//! unknown tool-call outcomes, reconciliation, terminal writes — two
//! executors on one store, on paused time, with a wall clock that moves only
//! when told (so one executor can look frozen past its TTL to the other).

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::{
    CallOutcome, Clock, ControlError, Engine, EngineConfig, EngineError, EventKind, EventLog, Flow,
    MemoryStore, ReconcileDecision, RestartPolicy, RunHandle, RunStatus, RunStore, ToolCallState,
    fencing,
    testing::{
        ManualClock, Scripted, ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct, Turn,
        user_messages,
    },
};
use serde_json::json;
use tokio::time::sleep;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

const TTL: Duration = Duration::from_secs(90);

fn config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = secs(10);
    config.supervision.lease.model_stream = secs(10);
    config.restart = RestartPolicy {
        jitter: 0.0,
        ..RestartPolicy::default()
    };
    config.run_lease_ttl = TTL;
    config
}

struct Executor {
    engine: Engine,
    model: ScriptedModel,
    tools: ScriptedTools,
}

async fn executor(
    owner: &str,
    store: &MemoryStore,
    clock: &ManualClock,
    model: ScriptedModel,
    tools: ScriptedTools,
    evaluator: Option<ScriptedEvaluator>,
) -> Executor {
    let mut builder = Engine::builder()
        .config(config())
        .owner_id(owner)
        .store(Arc::new(store.clone()))
        .clock(Arc::new(clock.clone()))
        .model(Arc::new(model.clone()))
        .tool_server("local", Arc::new(tools.clone()));
    if let Some(evaluator) = evaluator {
        builder = builder.evaluator(Arc::new(evaluator));
    }
    Executor {
        engine: builder.build().await.expect("engine builds"),
        model,
        tools,
    }
}

fn flow(max_steps: u32) -> Flow {
    serde_json::from_value(json!({
        "name": "durable",
        "task": "Do the thing.",
        "max_steps": max_steps,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}]
    }))
    .expect("valid flow")
}

fn call(tool: &'static str) -> Turn {
    Turn::tools([(tool, json!({"amount": 10}))])
}

/// Starts a run on `a` whose first step calls `tool`, and waits until the
/// call has been sent.
async fn run_with_call_in_flight(a: &Executor, tool: &str) -> RunHandle {
    let run = a.engine.start(flow(5)).await.expect("run starts");
    while a.tools.calls(tool) == 0 {
        sleep(Duration::from_millis(10)).await;
    }
    run
}

/// Makes `a` look frozen to `b`: the wall clock moves past the TTL while
/// tokio time (and with it `a`'s heartbeat) stands still.
fn freeze_past_ttl(clock: &ManualClock) {
    clock.advance(TTL + secs(1));
}

#[tokio::test(start_paused = true)]
async fn takeover_after_ttl_raises_the_fence_and_refuses_the_stale_executor() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let a = executor(
        "executor-a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [call("search"), Turn::answer("from a")]),
        ScriptedTools::new().tool(
            "search",
            Some(true),
            [ToolAct::returns("a's result", secs(100))],
        ),
        None,
    )
    .await;
    let mut run_a = run_with_call_in_flight(&a, "search").await;
    let run_id = run_a.run_id().to_owned();
    assert_eq!(store.run(&run_id).map(|r| r.fence), Some(1));

    freeze_past_ttl(&clock);
    let b = executor(
        "executor-b",
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::answer("from b")]),
        ScriptedTools::new().tool(
            "search",
            Some(true),
            [ToolAct::returns("b's result", secs(1))],
        ),
        None,
    )
    .await;
    assert_eq!(
        b.engine.reconcile_orphans().await.expect("reconciled"),
        vec![run_id.clone()]
    );
    let orphaned = store.run(&run_id).expect("the run");
    assert_eq!(orphaned.status, RunStatus::Orphaned);
    assert_eq!(orphaned.reason.as_deref(), Some(fencing::ORPHANED));
    assert_eq!(
        orphaned.reason.as_deref(),
        Some("run orphaned: executor lease expired")
    );

    let mut run_b = b.engine.resume(&run_id).await.expect("b claims the orphan");
    assert_eq!(
        store.run(&run_id).map(|r| r.fence),
        Some(2),
        "the fence went up"
    );
    let state = run_b.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("from b"));

    // The idempotent call in flight at the takeover was made again, with the
    // same key, by the new owner.
    let a_calls = a.tools.invocations();
    let b_calls = b.tools.invocations();
    assert_eq!(b_calls.len(), 1);
    assert_eq!(a_calls[0].idempotency_key, b_calls[0].idempotency_key);

    // A wakes up: its late writes are refused, and it stops working on the run.
    let a_state = run_a.wait().await;
    let lost = a_state.lost.expect("a knows it lost the run");
    assert!(lost.contains("stale"), "{lost}");
    sleep(secs(200)).await;
    let record = store.run(&run_id).expect("the run");
    assert_eq!((record.status, record.fence), (RunStatus::Completed, 2));
    assert_eq!(record.owner_id.as_deref(), Some("executor-b"));
    assert_eq!(record.answer.as_deref(), Some("from b"));
    let calls = store.tool_calls(&run_id);
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].result.as_deref(),
        Some("b's result"),
        "a's late result landed"
    );
    assert_eq!(
        a.tools.completed("search"),
        0,
        "a's call was cancelled when a lost the run"
    );
    let snapshot = store.snapshot(&run_id, "run").expect("snapshot");
    assert_eq!(snapshot.state["answer"], "from b");
    // Neither executor keeps anything of the run: the one that lost it
    // forgot it as the one that finished it did.
    assert_eq!(
        a.engine.events().runs_tracked(),
        0,
        "a's bus forgot the lost run"
    );
    assert_eq!(
        b.engine.events().runs_tracked(),
        0,
        "b's bus forgot the ended run"
    );
    assert!(
        store.events(&run_id).iter().all(
            |e| !matches!(&e.kind, EventKind::RunCompleted { answer, .. } if answer == "from a")
        ),
        "a's events landed after the takeover"
    );
    assert_eq!(
        a.model.requests().len(),
        1,
        "a made no model call after losing the run"
    );
}

#[tokio::test(start_paused = true)]
async fn unknown_outcome_of_a_non_idempotent_tool_requires_reconciliation_on_resume() {
    for decision in ["mark_done", "retry", "cancel"] {
        let store = MemoryStore::new();
        let clock = ManualClock::at(1_800_000_000_000);
        let a = executor(
            "executor-a",
            &store,
            &clock,
            ScriptedModel::new().script("run", [call("charge")]),
            ScriptedTools::new().tool("charge", Some(false), [ToolAct::Hang]),
            None,
        )
        .await;
        let run_a = run_with_call_in_flight(&a, "charge").await;
        let run_id = run_a.run_id().to_owned();
        freeze_past_ttl(&clock);
        let b = executor(
            "executor-b",
            &store,
            &clock,
            ScriptedModel::new().script("run", [Turn::answer("done")]),
            ScriptedTools::new().tool(
                "charge",
                Some(false),
                [ToolAct::returns("charged", secs(1))],
            ),
            None,
        )
        .await;
        let mut run_b = b.engine.resume(&run_id).await.expect("claimed");
        let state = run_b.paused().await;
        assert_eq!(state.status, RunStatus::ReconciliationRequired, "{state:?}");
        let pause = state.paused.expect("pause record");
        let call = pause.call.expect("the call in question");
        assert_eq!(call.tool, "charge");
        assert_eq!(call.arguments, json!({"amount": 10}));
        assert_eq!(call.state, ToolCallState::Unknown);
        assert_eq!(
            b.tools.calls("charge"),
            0,
            "a non-idempotent call was repeated blindly"
        );
        assert_eq!(
            store.run(&run_id).map(|r| r.status),
            Some(RunStatus::ReconciliationRequired)
        );
        let refused = run_b
            .resume(None)
            .await
            .expect_err("resume is not the answer");
        assert!(
            matches!(refused, ControlError::NeedsReconciliation { .. }),
            "{refused}"
        );

        let decided = match decision {
            "mark_done" => ReconcileDecision::MarkDone {
                result: "charged once, confirmed by the bank".into(),
            },
            "retry" => ReconcileDecision::Retry,
            _ => ReconcileDecision::Cancel,
        };
        run_b
            .reconcile(call.key.clone(), decided)
            .await
            .expect("decided");
        let state = run_b.wait().await;
        match decision {
            "mark_done" => {
                assert_eq!(state.status, RunStatus::Completed);
                assert_eq!(b.tools.calls("charge"), 0);
                let second = &b.model.requests_of("run")[0];
                assert!(
                    second
                        .messages
                        .iter()
                        .any(|m| m.content == "charged once, confirmed by the bank")
                );
            }
            "retry" => {
                assert_eq!(state.status, RunStatus::Completed);
                let calls = b.tools.invocations();
                assert_eq!(calls.len(), 1);
                assert_eq!(calls[0].idempotency_key, call.key, "a retry keeps the key");
            }
            _ => {
                assert_eq!(state.status, RunStatus::Cancelled);
                assert_eq!(b.tools.calls("charge"), 0);
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn intervened_non_idempotent_tool_is_not_restarted_blindly() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let a = executor(
        "executor-a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [call("transfer"), Turn::answer("sent")]),
        ScriptedTools::new().tool(
            "transfer",
            None,
            [ToolAct::Hang, ToolAct::returns("transferred", secs(1))],
        ),
        Some(ScriptedEvaluator::always("INTERVENE")),
    )
    .await;
    let mut run = a.engine.start(flow(5)).await.expect("starts");
    let state = run.paused().await;
    assert_eq!(state.status, RunStatus::ReconciliationRequired, "{state:?}");
    sleep(secs(3600)).await;
    assert_eq!(
        a.tools.calls("transfer"),
        1,
        "an unknown-outcome call was restarted"
    );
    let key = state
        .paused
        .and_then(|p| p.call)
        .map(|c| c.key)
        .expect("key");
    run.reconcile(key.clone(), ReconcileDecision::Retry)
        .await
        .expect("retry");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed);
    let calls = a.tools.invocations();
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c.idempotency_key == key));
    let refused = run
        .reconcile(key, ReconcileDecision::Retry)
        .await
        .expect_err("already finished");
    assert!(
        matches!(refused, ControlError::AlreadyFinished { .. }),
        "{refused}"
    );
}

/// A run on `a` whose tool `deploy` is escalated: paused in waiting_human.
async fn paused_run(store: &MemoryStore, clock: &ManualClock) -> (Executor, RunHandle) {
    let a = executor(
        "executor-a",
        store,
        clock,
        ScriptedModel::new().script("run", [call("deploy"), Turn::answer("from a")]),
        ScriptedTools::new().tool("deploy", Some(false), [ToolAct::Hang]),
        Some(ScriptedEvaluator::new([Scripted::verdict(
            "ESCALATE",
            "prod deploy is silent",
            "",
        )])),
    )
    .await;
    let mut run = a.engine.start(flow(5)).await.expect("starts");
    assert_eq!(run.paused().await.status, RunStatus::WaitingHuman);
    (a, run)
}

#[tokio::test(start_paused = true)]
async fn waiting_human_stays_paused_across_executors() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let (_a, _run_a) = paused_run(&store, &clock).await;
    let run_id = store.list_ids().pop().expect("a run");
    freeze_past_ttl(&clock);
    let b = executor(
        "executor-b",
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::answer("resumed by b")]),
        ScriptedTools::new(),
        None,
    )
    .await;
    assert!(
        b.engine.reconcile_orphans().await.expect("ok").is_empty(),
        "a paused run is not an orphan"
    );
    let mut run_b = b.engine.resume(&run_id).await.expect("claimed");
    assert_eq!(run_b.state().status, RunStatus::WaitingHuman);
    sleep(secs(10 * 3600)).await;
    assert_eq!(run_b.state().status, RunStatus::WaitingHuman);
    assert!(
        b.model.requests().is_empty(),
        "a paused run made a model call"
    );
    run_b
        .resume(Some("skip the deploy".into()))
        .await
        .expect("resumed");
    let state = run_b.wait().await;
    assert_eq!(state.answer.as_deref(), Some("resumed by b"));
    assert!(
        user_messages(&b.model.requests()[0])
            .iter()
            .any(|m| m.contains("skip the deploy"))
    );
}

#[tokio::test(start_paused = true)]
async fn racing_resumes_apply_the_answer_once() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let (a, mut run) = paused_run(&store, &clock).await;
    let (first, second) =
        tokio::join!(run.resume(Some("go".into())), run.resume(Some("go".into())));
    assert!(first.is_ok() != second.is_ok(), "{first:?} {second:?}");
    assert_eq!(run.wait().await.status, RunStatus::Completed);
    let guidance = user_messages(&a.model.requests()[1])
        .iter()
        .filter(|m| m.contains("answered: go"))
        .count();
    assert_eq!(guidance, 1, "the answer was applied twice");
}

#[tokio::test(start_paused = true)]
async fn a_stale_executor_cannot_apply_a_human_answer() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let (a, run_a) = paused_run(&store, &clock).await;
    let run_id = run_a.run_id().to_owned();
    freeze_past_ttl(&clock);
    let b = executor(
        "executor-b",
        &store,
        &clock,
        ScriptedModel::new(),
        ScriptedTools::new(),
        None,
    )
    .await;
    let _run_b = b.engine.resume(&run_id).await.expect("claimed");
    let refused = run_a
        .resume(Some("from a stale click".into()))
        .await
        .expect_err("stale");
    assert!(matches!(refused, ControlError::Lost { .. }), "{refused}");
    assert_eq!(
        store.run(&run_id).map(|r| r.status),
        Some(RunStatus::WaitingHuman)
    );
    assert_eq!(a.model.requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn cancel_mid_step_writes_the_terminal_state_and_everything_done() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let a = executor(
        "executor-a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [call("search"), call("search"), call("slow")]),
        ScriptedTools::new()
            .tool("search", Some(true), [ToolAct::returns("hit", secs(1))])
            .tool("slow", Some(true), [ToolAct::Hang]),
        None,
    )
    .await;
    let run = run_with_call_in_flight(&a, "slow").await;
    let run_id = run.run_id().to_owned();
    run.cancel("stop now").await.expect("cancelled");
    let record = store.run(&run_id).expect("the run");
    assert_eq!(record.status, RunStatus::Cancelled);
    assert_eq!(record.reason.as_deref(), Some("stop now"));
    let snapshot = store.snapshot(&run_id, "run").expect("terminal snapshot");
    assert_eq!(snapshot.status, RunStatus::Cancelled);
    // user, then two completed steps (assistant + tool), then the third
    // step's assistant message.
    assert_eq!(
        snapshot.state["transcript"].as_array().map(Vec::len),
        Some(6)
    );
    let events = store.events(&run_id);
    assert!(
        events.iter().any(|e| e.kind.name() == "run_cancelled"),
        "the terminal event is logged"
    );
    assert_eq!(
        store
            .tool_calls(&run_id)
            .iter()
            .filter(|c| c.state == ToolCallState::Done)
            .count(),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn cancel_mid_wrap_up_writes_the_terminal_state() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let a = executor(
        "executor-a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [call("search"), Turn::hang()]),
        ScriptedTools::new().tool("search", Some(true), [ToolAct::returns("hit", secs(1))]),
        None,
    )
    .await;
    // One step, then the budget is used up: no evaluator, so it wraps up,
    // and the wrap-up model call hangs.
    let run = a.engine.start(flow(1)).await.expect("starts");
    let run_id = run.run_id().to_owned();
    while a.model.requests().len() < 2 {
        sleep(Duration::from_millis(10)).await;
    }
    assert!(
        a.model.requests()[1].tools.is_empty(),
        "this is the wrap-up call"
    );
    run.cancel("no time for a summary")
        .await
        .expect("cancelled");
    let record = store.run(&run_id).expect("the run");
    assert_eq!(record.status, RunStatus::Cancelled);
    let snapshot = store.snapshot(&run_id, "run").expect("terminal snapshot");
    assert_eq!(snapshot.status, RunStatus::Cancelled);
    assert_eq!(snapshot.state["wrapping_up"], true);
    assert!(
        store
            .events(&run_id)
            .iter()
            .any(|e| e.kind.name() == "budget_exhausted")
    );
}

#[tokio::test(start_paused = true)]
async fn the_event_log_holds_every_event_of_a_run_in_order() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let a = executor(
        "executor-a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [call("search"), Turn::answer("ok")]),
        ScriptedTools::new().tool("search", Some(true), [ToolAct::returns("hit", secs(25))]),
        None,
    )
    .await;
    let mut live = a.engine.events().subscribe();
    let mut run = a.engine.start(flow(3)).await.expect("starts");
    run.wait().await;
    let mut seen = Vec::new();
    while let Some(Ok(event)) = live.try_recv() {
        seen.push((*event).clone());
    }
    let mut logged = store.events(run.run_id());
    logged.sort_by_key(|e| e.seq);
    assert_eq!(logged, seen);
    assert!(
        logged.iter().any(|e| e.kind.name() == "verdict"),
        "the verdict trace is in the log"
    );
    let after = logged[3].seq;
    let resumed: Vec<u64> = logged
        .iter()
        .filter(|e| e.seq > after)
        .map(|e| e.seq)
        .collect();
    assert_eq!(
        resumed.first(),
        Some(&logged[4].seq),
        "a reader resumes after an event id"
    );
    assert!(matches!(
        logged
            .iter()
            .find(|e| e.kind.name() == "tool_call_finished")
            .map(|e| &e.kind),
        Some(EventKind::ToolCallFinished {
            outcome: CallOutcome::Ok,
            ..
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_worker_escalation_answered_on_another_executor_goes_on_to_completion() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let flow: Flow = serde_json::from_value(json!({
        "name": "durable",
        "task": "Do the thing.",
        "max_steps": 5,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}],
        "workers": {"ops": {"prompt": "You deploy.", "max_steps": 3}}
    }))
    .expect("valid flow");
    let a = executor(
        "executor-a",
        &store,
        &clock,
        ScriptedModel::new()
            .script("run", [Turn::spawn([("ops", "deploy it")])])
            .script("worker:ops", [call("deploy")]),
        ScriptedTools::new().tool("deploy", Some(false), [ToolAct::Hang]),
        Some(ScriptedEvaluator::new([Scripted::verdict(
            "ESCALATE",
            "prod deploy is silent",
            "",
        )])),
    )
    .await;
    let mut run_a = a.engine.start(flow).await.expect("starts");
    assert_eq!(run_a.paused().await.status, RunStatus::WaitingHuman);
    let run_id = run_a.run_id().to_owned();
    freeze_past_ttl(&clock);
    let b = executor(
        "executor-b",
        &store,
        &clock,
        ScriptedModel::new()
            .script("worker:ops", [Turn::answer("did not deploy")])
            .script("run", [Turn::answer("the worker stood down")]),
        ScriptedTools::new(),
        None,
    )
    .await;
    let mut run_b = b.engine.resume(&run_id).await.expect("claimed");
    assert_eq!(
        run_b.paused().await.status,
        RunStatus::WaitingHuman,
        "still waiting for the person"
    );
    run_b
        .resume(Some("skip the deploy".into()))
        .await
        .expect("resumed");
    let state = tokio::time::timeout(secs(3600), run_b.wait())
        .await
        .expect("the run goes on after the answer");
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("the worker stood down"));
    let worker_saw = b.model.requests_of("worker:ops").iter().any(|r| {
        user_messages(r)
            .iter()
            .any(|m| m.contains("skip the deploy"))
    });
    assert!(worker_saw, "the escalated worker saw the answer");
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_the_runs_in_place_and_another_executor_resumes_them() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let a = executor(
        "executor-a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [call("search")]),
        ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang]),
        None,
    )
    .await;
    let mut run_a = run_with_call_in_flight(&a, "search").await;
    let run_id = run_a.run_id().to_owned();
    a.engine.shutdown().await;

    // Stopped where it was: not failed, not cancelled, still A's in the store
    // but with its executor lease released, with every event so far logged.
    let state = run_a.wait().await;
    assert_eq!(state.status, RunStatus::Running, "{state:?}");
    let record = store.run(&run_id).expect("the run");
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!(record.owner_id.as_deref(), Some("executor-a"));
    assert!(
        record.lease_expires_at_ms <= clock.now_unix_ms(),
        "a clean shutdown releases the lease: {record:?}"
    );
    let kinds: Vec<&str> = store
        .events(&run_id)
        .iter()
        .map(|e| e.kind.name())
        .collect();
    assert!(kinds.contains(&"tool_call_started"), "{kinds:?}");
    assert!(!kinds.contains(&"run_failed") && !kinds.contains(&"run_cancelled"));
    let refused = a.engine.start(flow(5)).await.expect_err("shut down");
    assert!(matches!(refused, EngineError::ShutDown), "{refused}");
    // No heartbeat any more: the lease is not renewed.
    sleep(secs(300)).await;
    assert_eq!(
        store.run(&run_id).expect("the run").lease_expires_at_ms,
        record.lease_expires_at_ms
    );

    // Released: another executor claims it at once, without waiting out
    // the TTL.
    let b = executor(
        "executor-b",
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::answer("resumed by b")]),
        ScriptedTools::new().tool("search", Some(true), [ToolAct::returns("hit", secs(1))]),
        None,
    )
    .await;
    assert_eq!(
        b.engine.reconcile_orphans().await.expect("ok"),
        vec![run_id.clone()]
    );
    let mut run_b = b.engine.resume(&run_id).await.expect("claimed");
    let state = run_b.wait().await;
    assert_eq!(state.answer.as_deref(), Some("resumed by b"));
    assert_eq!(
        b.tools.invocations()[0].idempotency_key,
        a.tools.invocations()[0].idempotency_key,
        "the idempotent call in flight is made again with the same key"
    );
}

#[tokio::test(start_paused = true)]
async fn positions_number_a_runs_log_without_a_gap_across_executors() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let a = executor(
        "executor-a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [call("search")]),
        ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang]),
        None,
    )
    .await;
    let mut run_a = run_with_call_in_flight(&a, "search").await;
    let run_id = run_a.run_id().to_owned();
    // A busy bus: another run's events interleave with this one's.
    let other_run = a.engine.start(flow(5)).await.expect("another run");
    a.engine.shutdown().await;
    run_a.wait().await;
    let logged_by_a = store.events(&run_id).len();
    assert!(logged_by_a > 0);

    let b = executor(
        "executor-b",
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::answer("resumed by b")]),
        ScriptedTools::new().tool("search", Some(true), [ToolAct::returns("hit", secs(1))]),
        None,
    )
    .await;
    b.engine.reconcile_orphans().await.expect("ok");
    let mut run_b = b.engine.resume(&run_id).await.expect("claimed");
    assert_eq!(run_b.wait().await.status, RunStatus::Completed);

    let events = store.events(&run_id);
    assert!(events.len() > logged_by_a);
    let positions: Vec<u64> = events.iter().map(|e| e.position).collect();
    let expected: Vec<u64> = (1..=u64::try_from(events.len()).expect("fits")).collect();
    assert_eq!(positions, expected, "1, 2, 3, … across both owners");
    assert!(
        events.windows(2).all(|w| w[0].seq < w[1].seq),
        "in seq order"
    );
    // The bus numbers the other run's events on their own.
    let other = store.events(other_run.run_id());
    assert_eq!(other.first().map(|e| e.position), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_run_whose_log_holds_its_end_is_recorded_ended_on_resume_and_not_run_again() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    // A ran the run to its end and logged it, then lost its session before
    // recording the end: the log says completed, the record running.
    let a = executor(
        "executor-a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::answer("done by a")]),
        ScriptedTools::new(),
        None,
    )
    .await;
    store.fail_next_ends(u32::MAX);
    let mut run_a = a.engine.start(flow(5)).await.expect("starts");
    let run_id = run_a.run_id().to_owned();
    let state = run_a.wait().await;
    assert!(
        state
            .lost
            .as_deref()
            .is_some_and(|l| l.contains("could not be recorded")),
        "A lets the run go, saying so: {state:?}"
    );
    store.fail_next_ends(0);
    assert_eq!(store.run(&run_id).expect("run").status, RunStatus::Running);
    let ended = |store: &MemoryStore| {
        store
            .events(&run_id)
            .iter()
            .filter(|e| matches!(e.kind, EventKind::RunCompleted { .. }))
            .count()
    };
    assert_eq!(ended(&store), 1, "the end is in the log");

    let b = executor(
        "executor-b",
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::answer("done again by b")]),
        ScriptedTools::new(),
        None,
    )
    .await;
    freeze_past_ttl(&clock);
    b.engine.reconcile_orphans().await.expect("ok");
    let refused = b.engine.resume(&run_id).await.expect_err("already ended");
    assert!(
        matches!(
            refused,
            EngineError::Finished {
                status: RunStatus::Completed,
                ..
            }
        ),
        "{refused}"
    );
    let record = store.run(&run_id).expect("run");
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(record.answer.as_deref(), Some("done by a"));
    assert_eq!(ended(&store), 1, "completed once");
    assert!(b.model.requests().is_empty(), "B ran nothing");
}

#[tokio::test(start_paused = true)]
async fn a_store_error_on_a_runs_end_is_retried_and_the_end_recorded() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let a = executor(
        "executor-a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [Turn::answer("done")]),
        ScriptedTools::new(),
        None,
    )
    .await;
    store.fail_next_ends(2);
    let mut run = a.engine.start(flow(5)).await.expect("starts");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.lost, None);
    let record = store.run(run.run_id()).expect("run");
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(record.answer.as_deref(), Some("done"));
}

#[tokio::test(start_paused = true)]
async fn an_executor_never_claims_a_run_it_is_running() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let a = executor(
        "executor-a",
        &store,
        &clock,
        ScriptedModel::new().script("run", [call("search")]),
        ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang]),
        None,
    )
    .await;
    let run = run_with_call_in_flight(&a, "search").await;
    let fence = store.run(run.run_id()).expect("run").fence;
    for _ in 0..2 {
        let refused = a
            .engine
            .resume(run.run_id())
            .await
            .expect_err("running here");
        assert!(
            matches!(&refused, EngineError::Held { owner_id, .. } if owner_id == "executor-a"),
            "{refused}"
        );
    }
    assert_eq!(
        store.run(run.run_id()).expect("run").fence,
        fence,
        "the fence did not move"
    );
    assert_eq!(run.state().lost, None);
}

/// An executor that logged its run's end and died before recording it
/// leaves the end in the log, the run `running`: the next to claim it
/// reads the log's last event, records the end it holds (with its answer)
/// and runs nothing, however long the log before it.
#[tokio::test(start_paused = true)]
async fn a_run_whose_log_holds_its_end_is_recorded_ended_by_the_next_claimer() {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let now = clock.now_unix_ms();
    let mut record = leasehold_actors::testing::records::run_record(
        "run-ended",
        Some("gone"),
        1,
        now - 1,
        RunStatus::Running,
    );
    record.flow = serde_json::to_value(flow(5)).expect("a flow");
    store.create_run(record).await.expect("created");
    let event = |seq: u64, kind: EventKind| leasehold_actors::Event {
        seq,
        position: seq,
        at: now,
        run_id: "run-ended".into(),
        path: "run".into(),
        kind,
    };
    let mut logged: Vec<_> = (1..=50)
        .map(|seq| {
            event(
                seq,
                EventKind::StepStarted {
                    step: 1,
                    limit: 5,
                    nudges: 0,
                },
            )
        })
        .collect();
    logged.push(event(
        51,
        EventKind::RunCompleted {
            answer: "done before dying".to_owned(),
            steps: 1,
            cut_off: false,
        },
    ));
    assert!(
        store
            .append_events("run-ended", logged.into_iter().map(Arc::new).collect(), 1)
            .await
            .expect("appended")
            .is_applied()
    );

    let b = executor(
        "executor-b",
        &store,
        &clock,
        ScriptedModel::new(),
        ScriptedTools::new(),
        None,
    )
    .await;
    let resumed = b.engine.resume("run-ended").await;
    assert!(
        matches!(
            resumed,
            Err(EngineError::Finished {
                status: RunStatus::Completed,
                ..
            })
        ),
        "{resumed:?}"
    );
    let stored = store.run("run-ended").expect("the run");
    assert_eq!(stored.status, RunStatus::Completed);
    assert_eq!(stored.answer.as_deref(), Some("done before dying"));
    assert!(b.model.requests().is_empty(), "nothing ran again");
}

/// A store whose every Nth write fails, N from 1 to 10: each run that
/// starts completes, its log whole and ending with its end; with every
/// write failing, no run starts and nothing is stored.
#[tokio::test(start_paused = true)]
async fn a_store_failing_every_nth_write_leaves_no_run_stuck_and_no_log_with_a_gap() {
    for n in 1..=10 {
        let run = leasehold_actors::testing::faults::run_with_every_nth_write_failing(
            n,
            Arc::new(MemoryStore::new()),
        )
        .await;
        run.assert_holds();
    }
}
