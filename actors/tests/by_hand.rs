//! A person's hands on a running run, through its handle: a pause whose
//! operations in flight finish or are stopped, a resume whose guidance
//! reaches the next model call, a lease extended or stopped by hand — on
//! paused time with the scripted fakes.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::{
    ControlError, DecidedBy, Engine, EngineConfig, EventKind, Flow, InFlight, LeaseId,
    MAX_WAITING_MESSAGES, PauseRequest, RestartPolicy, RunHandle, RunStatus, Steer, Verdict,
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

/// Leases of 10 s, no free renewal (every expiry asks the evaluator),
/// restarts after exactly 1 s.
fn config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.model_stream = secs(10);
    config.supervision.lease.model_blocking = secs(10);
    config.supervision.lease.tool_call = secs(10);
    config.supervision.lease.worker_step = secs(60);
    config.supervision.watchdog.free_renewals = 0;
    config.restart = RestartPolicy {
        jitter: 0.0,
        ..RestartPolicy::default()
    };
    config
}

struct Rig {
    engine: Engine,
    events: RecordingSink,
}

async fn rig(model: &ScriptedModel, tools: &ScriptedTools, evaluator: &ScriptedEvaluator) -> Rig {
    let events = RecordingSink::new();
    let engine = Engine::builder()
        .config(config())
        .model(Arc::new(model.clone()))
        .evaluator(Arc::new(evaluator.clone()))
        .events(Arc::new(events.clone()))
        .store(Arc::new(MemoryStore::new()))
        .tool_server("local", Arc::new(tools.clone()))
        .build()
        .await
        .expect("engine builds");
    Rig { engine, events }
}

fn flow() -> Flow {
    serde_json::from_value(json!({
        "name": "research",
        "task": "Find out what happened.",
        "max_steps": 5,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}],
    }))
    .expect("valid flow")
}

fn search_then_answer() -> ScriptedModel {
    ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("search", json!({"q": "logs"}))]),
            Turn::answer("done"),
        ],
    )
}

/// The lease of the run's `search` call in flight, as its start event names
/// it.
fn search_lease(rig: &Rig, attempt: u32) -> LeaseId {
    rig.events
        .events()
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolCallStarted {
                tool,
                attempt: a,
                lease_id,
                ..
            } if tool == "search" && *a == attempt => *lease_id,
            _ => None,
        })
        .expect("the search's start names its lease")
}

async fn searching(rig: &Rig) -> RunHandle {
    let run = rig.engine.start(flow()).await.expect("run starts");
    // The model answers at once; the search is then in flight.
    sleep(secs(2)).await;
    assert_eq!(rig.events.count("tool_call_started"), 1);
    run
}

#[tokio::test(start_paused = true)]
async fn a_paused_runs_call_in_flight_finishes_and_no_step_starts_until_the_resume() {
    let model = search_then_answer();
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("3 errors", secs(5))],
    );
    let evaluator = ScriptedEvaluator::new([Scripted::verdict("INTERVENE", "too slow", "")]);
    let rig = rig(&model, &tools, &evaluator).await;
    let mut run = searching(&rig).await;

    run.pause(PauseRequest::new("checking the budget").by("ana"))
        .await
        .expect("paused");
    let state = run.state();
    assert_eq!(state.status, RunStatus::WaitingHuman);
    let pause = state.paused.expect("pause record");
    assert_eq!(pause.reason, "ana paused the run: checking the budget");
    let paused = rig.events.events().into_iter().find_map(|e| match e.kind {
        EventKind::Paused { by, reason, .. } => Some((by, reason)),
        _ => None,
    });
    assert_eq!(
        paused,
        Some((Some("ana".to_owned()), "checking the budget".to_owned()))
    );

    // An hour paused: the search finishes and is kept, its lease never
    // expires (the evaluator would cut it), and no model call is made.
    sleep(secs(3600)).await;
    assert_eq!(tools.calls("search"), 1);
    assert_eq!(rig.events.count("tool_call_finished"), 1);
    assert_eq!(rig.events.count("wait"), 0, "a clock ran while paused");
    assert_eq!(model.requests_of("run").len(), 1);
    assert_eq!(evaluator.calls(), 0);
    let again = run
        .pause(PauseRequest::new("twice"))
        .await
        .expect_err("a paused run is not paused again");
    assert!(
        matches!(again, ControlError::AlreadyPaused { .. }),
        "{again}"
    );

    run.resume(Some("only the error log".to_owned()))
        .await
        .expect("resumed");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    let requests = model.requests_of("run");
    assert_eq!(requests.len(), 2);
    assert!(
        user_messages(&requests[1])
            .iter()
            .any(|m| m.contains("only the error log")),
        "the guidance is not in the next model call"
    );
    assert_eq!(tools.calls("search"), 1, "the finished call was made again");
    let refused = run
        .pause(PauseRequest::new("too late"))
        .await
        .expect_err("an ended run takes no pause");
    assert!(
        refused.to_string().contains("already finished"),
        "{refused}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pause_that_cancels_what_is_in_flight_stops_it_as_a_persons_intervention_made_again_after_the_resume()
 {
    let model = search_then_answer();
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::Hang, ToolAct::returns("3 errors", secs(1))],
    );
    let evaluator = ScriptedEvaluator::new([]);
    let rig = rig(&model, &tools, &evaluator).await;
    let mut run = searching(&rig).await;

    run.pause(
        PauseRequest::new("wrong index")
            .by("ana")
            .in_flight(InFlight::Cancel),
    )
    .await
    .expect("paused");
    sleep(secs(600)).await;
    let verdicts = rig.events.verdicts();
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert_eq!(verdicts[0].decided_by, DecidedBy::Person);
    assert_eq!(verdicts[0].verdict, Verdict::Intervene);
    assert!(
        verdicts[0].reason.starts_with("stopped by ana"),
        "{}",
        verdicts[0].reason
    );
    assert_eq!(rig.events.count("intervened"), 1);
    // Stopped, and not made again while the run is paused.
    assert_eq!(tools.calls("search"), 1);
    assert_eq!(run.state().status, RunStatus::WaitingHuman);

    run.resume(None).await.expect("resumed");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(tools.calls("search"), 2);
    assert_eq!(evaluator.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_lease_extended_by_hand_is_not_judged_before_its_new_end() {
    let model = search_then_answer();
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("3 errors", secs(25))],
    );
    // Were the lease judged at its 10 s expiry, the evaluator would cut it.
    let evaluator = ScriptedEvaluator::new([Scripted::verdict("INTERVENE", "too slow", "")]);
    let rig = rig(&model, &tools, &evaluator).await;
    let mut run = searching(&rig).await;
    let lease = search_lease(&rig, 1);

    run.extend_lease(lease, secs(60), "ana")
        .await
        .expect("extended");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(evaluator.calls(), 0);
    assert_eq!(tools.calls("search"), 1);
    assert_eq!(rig.events.count("intervened"), 0);
    let verdicts = rig.events.verdicts();
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert_eq!(verdicts[0].lease_id, lease);
    assert_eq!(verdicts[0].decided_by, DecidedBy::Person);
    assert_eq!(verdicts[0].verdict, Verdict::Renew);
    assert_eq!(verdicts[0].reason, "extended by 1m by ana");

    let gone = run
        .extend_lease(lease, secs(60), "ana")
        .await
        .expect_err("an ended run's lease is not extended");
    assert!(gone.to_string().contains("already finished"), "{gone}");
}

#[tokio::test(start_paused = true)]
async fn a_lease_stopped_by_hand_is_intervened_and_its_call_made_again() {
    let model = search_then_answer();
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::Hang, ToolAct::returns("3 errors", secs(1))],
    );
    let evaluator = ScriptedEvaluator::new([]);
    let rig = rig(&model, &tools, &evaluator).await;
    let mut run = searching(&rig).await;
    let lease = search_lease(&rig, 1);

    let unknown = run
        .intervene_lease(LeaseId(lease.0 + 1000), "hung", "ana")
        .await
        .expect_err("no such lease");
    assert!(
        matches!(&unknown, ControlError::LeaseRefused { reason, .. } if reason.contains("is not in flight")),
        "{unknown}"
    );
    run.intervene_lease(lease, "hung on the old index", "ana")
        .await
        .expect("stopped");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(tools.calls("search"), 2);
    assert_eq!(rig.events.count("restarted"), 1);
    let verdicts = rig.events.verdicts();
    assert_eq!(verdicts[0].lease_id, lease);
    assert_eq!(verdicts[0].decided_by, DecidedBy::Person);
    assert_eq!(verdicts[0].reason, "stopped by ana: hung on the old index");
}

#[tokio::test(start_paused = true)]
async fn a_lease_of_a_paused_run_is_not_extended_since_its_clocks_are_stopped() {
    let model = search_then_answer();
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("3 errors", secs(25))],
    );
    let evaluator = ScriptedEvaluator::new([]);
    let rig = rig(&model, &tools, &evaluator).await;
    let run = searching(&rig).await;
    let lease = search_lease(&rig, 1);
    run.pause(PauseRequest::new("a look"))
        .await
        .expect("paused");
    let refused = run
        .extend_lease(lease, secs(60), "ana")
        .await
        .expect_err("the clocks are stopped");
    assert!(
        refused.to_string().contains("its clocks are stopped"),
        "{refused}"
    );
    assert!(rig.events.verdicts().is_empty());
}

/// Whether the root loop's model request `n` (from 0) carries `text`.
fn request_says(model: &ScriptedModel, n: usize, text: &str) -> bool {
    model
        .requests_of("run")
        .get(n)
        .is_some_and(|r| user_messages(r).iter().any(|m| m.contains(text)))
}

#[tokio::test(start_paused = true)]
async fn an_enqueued_message_reaches_the_next_model_call_and_stops_nothing() {
    let model = search_then_answer();
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("3 errors", secs(5))],
    );
    let evaluator = ScriptedEvaluator::new([]);
    let rig = rig(&model, &tools, &evaluator).await;
    let mut run = searching(&rig).await;

    run.steer("only the error log", Steer::Enqueue, "ana")
        .await
        .expect("taken");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(tools.calls("search"), 1, "nothing was stopped");
    assert!(!request_says(&model, 0, "only the error log"));
    assert!(
        request_says(
            &model,
            1,
            "A message from ana, who oversees this run: only the error log"
        ),
        "the message is in the next model call"
    );
    let received: Vec<_> = rig
        .events
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::MessageReceived { text, policy, by } => Some((text, policy, by)),
            _ => None,
        })
        .collect();
    assert_eq!(
        received,
        [(
            "only the error log".to_owned(),
            "enqueue".to_owned(),
            "ana".to_owned()
        )]
    );
    let late = run
        .steer("too late", Steer::Enqueue, "ana")
        .await
        .expect_err("an ended run takes no message");
    assert!(late.to_string().contains("already finished"), "{late}");
}

#[tokio::test(start_paused = true)]
async fn an_interrupting_message_stops_the_call_in_flight_and_the_next_model_call_sees_it() {
    let model = search_then_answer();
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::Hang, ToolAct::returns("3 errors", secs(1))],
    );
    let evaluator = ScriptedEvaluator::new([]);
    let rig = rig(&model, &tools, &evaluator).await;
    let mut run = searching(&rig).await;

    run.steer("stop, use the new index", Steer::Interrupt, "ana")
        .await
        .expect("taken");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    let verdicts = rig.events.verdicts();
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert_eq!(verdicts[0].decided_by, DecidedBy::Person);
    assert_eq!(verdicts[0].verdict, Verdict::Intervene);
    assert_eq!(
        tools.calls("search"),
        2,
        "the hung search was stopped and made again"
    );
    assert!(request_says(&model, 1, "stop, use the new index"));
}

#[tokio::test(start_paused = true)]
async fn a_rejecting_message_is_refused_while_the_run_runs_and_taken_while_it_waits() {
    let model = search_then_answer();
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("3 errors", secs(5))],
    );
    let evaluator = ScriptedEvaluator::new([]);
    let rig = rig(&model, &tools, &evaluator).await;
    let mut run = searching(&rig).await;

    let busy = run
        .steer("hello", Steer::Reject, "ana")
        .await
        .expect_err("the run is busy");
    assert!(matches!(busy, ControlError::Busy { .. }), "{busy}");
    assert!(busy.to_string().contains("is busy (running)"), "{busy}");
    let fork = run
        .steer("again", Steer::Rollback, "ana")
        .await
        .expect_err("a rollback is the executor's");
    assert!(
        matches!(fork, ControlError::RollbackIsAFork { .. }),
        "{fork}"
    );

    run.pause(PauseRequest::new("a look"))
        .await
        .expect("paused");
    run.steer("the error log", Steer::Reject, "ana")
        .await
        .expect("taken while it waits");
    // At most so many wait for the next step.
    for n in 1..MAX_WAITING_MESSAGES {
        run.steer(format!("note {n}"), Steer::Enqueue, "ana")
            .await
            .expect("taken");
    }
    let full = run
        .steer("one too many", Steer::Enqueue, "ana")
        .await
        .expect_err("too many wait");
    assert!(
        matches!(full, ControlError::TooManyMessages { .. }),
        "{full}"
    );
    run.resume(None).await.expect("resumed");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert!(request_says(&model, 1, "the error log"));
    assert!(request_says(&model, 1, "note 15"));
    assert!(!request_says(&model, 1, "one too many"));
}

/// A root that answers at once, its answer streaming for 8 s, then
/// answers again.
fn slow_answers() -> ScriptedModel {
    ScriptedModel::new().script(
        "run",
        [
            Turn::answer("the first answer").with_chunks(8, secs(1)),
            Turn::answer("the second answer"),
        ],
    )
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_arrives_while_paused_waits_and_a_message_sent_meanwhile_gets_another_step()
{
    let model = slow_answers();
    let tools = ScriptedTools::new();
    let evaluator = ScriptedEvaluator::new([]);
    let rig = rig(&model, &tools, &evaluator).await;
    let mut run = rig.engine.start(flow()).await.expect("run starts");
    sleep(secs(2)).await;
    run.pause(PauseRequest::new("let me add something"))
        .await
        .expect("paused mid-answer");
    // The answer streams to its end, and the run does not end with it.
    sleep(secs(60)).await;
    assert_eq!(rig.events.count("model_call_finished"), 1);
    assert_eq!(run.state().status, RunStatus::WaitingHuman);
    run.steer("also say what to do next", Steer::Enqueue, "ana")
        .await
        .expect("taken");
    run.resume(None).await.expect("resumed");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("the second answer"));
    assert!(request_says(&model, 1, "also say what to do next"));
}

#[tokio::test(start_paused = true)]
async fn a_message_sent_while_the_run_gives_its_answer_gets_another_step_and_a_pause_alone_ends_with_it()
 {
    let model = slow_answers();
    let tools = ScriptedTools::new();
    let evaluator = ScriptedEvaluator::new([]);
    let rig = rig(&model, &tools, &evaluator).await;
    let mut run = rig.engine.start(flow()).await.expect("run starts");
    sleep(secs(2)).await;
    run.steer("in French, please", Steer::Enqueue, "ana")
        .await
        .expect("taken");
    let state = run.wait().await;
    assert_eq!(
        state.answer.as_deref(),
        Some("the second answer"),
        "{state:?}"
    );
    assert!(request_says(&model, 1, "in French, please"));

    // Paused while it answers, with no message: the resume ends it with
    // that answer, and no step more.
    let model = slow_answers();
    let again = rig_again(&model, &tools, &evaluator).await;
    let mut run = again.engine.start(flow()).await.expect("run starts");
    sleep(secs(2)).await;
    run.pause(PauseRequest::new("a look"))
        .await
        .expect("paused");
    sleep(secs(60)).await;
    assert_eq!(run.state().status, RunStatus::WaitingHuman);
    run.resume(None).await.expect("resumed");
    let state = run.wait().await;
    assert_eq!(
        state.answer.as_deref(),
        Some("the first answer"),
        "{state:?}"
    );
    assert_eq!(model.requests_of("run").len(), 1);
}

/// [`rig`], under another name where a test holds a rig already.
async fn rig_again(
    model: &ScriptedModel,
    tools: &ScriptedTools,
    evaluator: &ScriptedEvaluator,
) -> Rig {
    rig(model, tools, evaluator).await
}
