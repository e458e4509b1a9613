//! A request that outgrows the model's context window, on paused time with
//! the scripted fakes: the server's refusal (`ContextOverflow`) is handled
//! on its own path — the transcript's oldest tool results shortened and the
//! call made again, at most a few times a step, each time shorter; or the
//! run paused for a person, naming the overflow — never a failed run, and
//! no restart spent.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::{
    ChatRole, Engine, EngineConfig, Event, EventKind, Flow, ModelError, ModelErrorKind,
    ModelRequest, OverflowAction, RunStatus,
    testing::{MemoryStore, RecordingSink, ScriptedModel, ScriptedTools, ToolAct, Turn},
};
use serde_json::json;

/// What one tool call returns: 3 000 characters.
fn page() -> String {
    "0123456789".repeat(300)
}

fn overflow(requested_tokens: Option<u64>, context_tokens: Option<u64>) -> Turn {
    Turn::fail(ModelError::new(
        ModelErrorKind::ContextOverflow {
            requested_tokens,
            context_tokens,
        },
        "HTTP 400: request exceeds the available context size",
        false,
    ))
}

fn reads(n: usize) -> Turn {
    Turn::tools(std::iter::repeat_n(("read", json!({"page": 1})), n))
}

struct Rig {
    engine: Engine,
    events: RecordingSink,
    model: ScriptedModel,
}

async fn rig(turns: Vec<Turn>) -> Rig {
    let model = ScriptedModel::new().script("run", turns);
    let tools = ScriptedTools::new().tool(
        "read",
        Some(true),
        std::iter::repeat_n(ToolAct::returns(page(), Duration::from_millis(10)), 64),
    );
    let events = RecordingSink::new();
    let engine = Engine::builder()
        .config(EngineConfig::default())
        .model(Arc::new(model.clone()))
        .events(Arc::new(events.clone()))
        .store(Arc::new(MemoryStore::new()))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine builds");
    Rig {
        engine,
        events,
        model,
    }
}

fn flow() -> Flow {
    serde_json::from_value(json!({
        "name": "reader",
        "task": "Read the pages and sum them up.",
        "max_steps": 10,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}],
    }))
    .expect("valid flow")
}

/// One `context_overflow` event: attempt, requested, window, shortened,
/// characters cut, action.
type Seen = (u32, Option<u64>, Option<u64>, u32, u64, OverflowAction);

/// The `context_overflow` events.
fn overflows(events: &[Event]) -> Vec<Seen> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ContextOverflow {
                attempt,
                requested_tokens,
                context_tokens,
                shortened,
                chars_cut,
                action,
                ..
            } => Some((
                *attempt,
                *requested_tokens,
                *context_tokens,
                *shortened,
                *chars_cut,
                *action,
            )),
            _ => None,
        })
        .collect()
}

/// The characters of a request's messages.
fn chars(request: &ModelRequest) -> usize {
    request
        .messages
        .iter()
        .map(|m| m.content.chars().count())
        .sum()
}

fn tool_results(request: &ModelRequest) -> Vec<&str> {
    request
        .messages
        .iter()
        .filter(|m| m.role == ChatRole::Tool)
        .map(|m| m.content.as_str())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_request_over_the_context_window_is_called_again_with_its_oldest_tool_results_shortened()
{
    let rig = rig(vec![
        reads(1),
        reads(1),
        reads(1),
        overflow(Some(2_400), Some(2_048)),
        Turn::answer("summed up"),
    ])
    .await;
    let mut run = rig.engine.start(flow()).await.expect("starts");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("summed up"));

    let events = rig.events.events();
    let seen = overflows(&events);
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (attempt, requested, window, shortened, cut, action) = seen[0];
    assert_eq!(
        (attempt, requested, window, action),
        (1, Some(2_400), Some(2_048), OverflowAction::Shortened)
    );
    assert!(shortened >= 1 && cut > 0, "{seen:?}");
    // Its own path: no restart spent, nothing given up.
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind.name(), "restarted" | "gave_up" | "paused")),
        "{:?}",
        rig.events.kinds()
    );

    // The call made again holds the oldest result cut to a head and a note,
    // and the newest whole.
    let requests = rig.model.requests_of("run");
    assert_eq!(requests.len(), 5);
    let (refused, again) = (&requests[3], &requests[4]);
    assert!(chars(again) < chars(refused));
    let results = tool_results(again);
    assert_eq!(results.len(), 3);
    assert!(
        results[0].starts_with(&page()[..240])
            && results[0].contains("more characters of this tool result were cut")
            && results[0].contains("context window"),
        "{}",
        results[0]
    );
    assert_eq!(results[2], page(), "the newest result is whole");
}

#[tokio::test(start_paused = true)]
async fn a_request_that_cannot_fit_pauses_the_run_for_a_person_naming_the_overflow() {
    let rig = rig(vec![
        overflow(Some(4_135), Some(4_096)),
        Turn::answer("shorter now"),
    ])
    .await;
    let mut run = rig.engine.start(flow()).await.expect("starts");
    let state = run.paused().await;
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    let reason = state.paused.clone().map(|p| p.reason).unwrap_or_default();
    assert!(
        reason.contains("does not fit the model's context window")
            && reason.contains("4135 tokens against a window of 4096")
            && reason.contains("no tool result is left to shorten")
            && reason.contains("exceeds the available context size"),
        "{reason}"
    );
    let seen = overflows(&rig.events.events());
    assert_eq!(
        seen,
        [(1, Some(4_135), Some(4_096), 0, 0, OverflowAction::Paused)]
    );

    // A resume calls the model again.
    run.resume(Some("try again".into())).await.expect("resumes");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(state.answer.as_deref(), Some("shorter now"));
}

#[tokio::test(start_paused = true)]
async fn shortening_is_bounded_per_step_each_attempt_shorter_then_a_person_is_asked() {
    // Eight results the model has read, then one it has not: a server that
    // refuses every request, and gives no sizes.
    let rig = rig(vec![
        reads(4),
        reads(4),
        reads(1),
        overflow(None, None),
        overflow(None, None),
        overflow(None, None),
        overflow(None, None),
        Turn::answer("done"),
    ])
    .await;
    let mut run = rig.engine.start(flow()).await.expect("starts");
    let state = run.paused().await;
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    let reason = state.paused.clone().map(|p| p.reason).unwrap_or_default();
    assert!(
        reason.contains("it was shortened 3 times this step"),
        "{reason}"
    );

    let seen = overflows(&rig.events.events());
    let actions: Vec<OverflowAction> = seen.iter().map(|o| o.5).collect();
    assert_eq!(
        actions,
        [
            OverflowAction::Shortened,
            OverflowAction::Shortened,
            OverflowAction::Shortened,
            OverflowAction::Paused
        ],
        "{seen:?}"
    );
    let requests = rig.model.requests_of("run");
    assert_eq!(requests.len(), 7);
    for pair in requests[3..].windows(2) {
        assert!(chars(&pair[1]) < chars(&pair[0]), "each attempt is shorter");
    }
    assert_eq!(tool_results(&requests[6])[8], page(), "the newest is whole");

    run.resume(None).await.expect("resumes");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
}
