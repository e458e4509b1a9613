//! A run's trace, assembled from its events: one trace, one root, every
//! span's parent in it, the tree the semantic conventions for generative AI
//! name (the run, its steps, each model call and tool call attempt, each
//! worker and evaluator call), tokens equal to what the calls reported, and
//! expiries and verdicts as events of the operation they were about.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use leasehold::telemetry::{FinishedSpan, SpanAssembler};
use leasehold::{Engine, EngineConfig, EventKind, Flow, RunStatus};
use leasehold_actors::testing::{
    MemoryStore, RecordingSink, ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct, Turn,
};
use serde_json::{Value, json};

fn flow() -> Flow {
    serde_json::from_value(json!({
        "name": "research",
        "task": "Find out what happened.",
        "max_steps": 5,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}],
        "workers": {"researcher": {"prompt": "You research one question.", "max_steps": 3}}
    }))
    .expect("valid flow")
}

fn attribute<'a>(span: &'a FinishedSpan, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

#[tokio::test(start_paused = true)]
async fn a_runs_events_make_one_trace_with_the_tree_and_the_tokens_of_its_calls() {
    let model = ScriptedModel::new()
        .named("m")
        .script(
            "run",
            [
                Turn::spawn([("researcher", "look at A")]),
                Turn::answer("found"),
            ],
        )
        .script(
            "worker:researcher",
            [
                Turn::tools([("search", json!({"q": "logs"}))]),
                Turn::answer("finding"),
            ],
        );
    // The search is slow: its lease expires and the evaluator renews it.
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("a hit", Duration::from_secs(30))],
    );
    let evaluator = ScriptedEvaluator::always("RENEW");
    let events = RecordingSink::new();
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_secs(10);
    config.supervision.watchdog.free_renewals = 0;
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model.clone()))
        .evaluator(Arc::new(evaluator))
        .events(Arc::new(events.clone()))
        .store(Arc::new(MemoryStore::new()))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine");
    let mut run = engine.start(flow()).await.expect("starts");
    assert_eq!(run.wait().await.status, RunStatus::Completed);
    let logged = events.events();

    let mut assembler = SpanAssembler::new();
    let spans: Vec<FinishedSpan> = logged.iter().flat_map(|e| assembler.feed(e)).collect();
    assert_eq!(assembler.open_spans(), 0, "every span ended with the run");

    // One trace, one root: the run.
    let trace = leasehold::trace_id_of(run.run_id());
    assert!(spans.iter().all(|s| s.trace_id == trace));
    let ids: BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    assert_eq!(ids.len(), spans.len(), "span ids are unique");
    let roots: Vec<&FinishedSpan> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_none())
        .collect();
    assert_eq!(roots.len(), 1, "{roots:?}");
    assert_eq!(roots[0].name, "invoke_agent research");
    for span in &spans {
        if let Some(parent) = &span.parent_span_id {
            assert!(
                ids.contains(parent.as_str()),
                "{} has no parent in the trace",
                span.name
            );
        }
        assert!(span.end_ms >= span.start_ms, "{}", span.name);
    }
    let by_id: BTreeMap<&str, &FinishedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let parent_name = |s: &FinishedSpan| {
        s.parent_span_id
            .as_deref()
            .map(|p| by_id[p].name.clone())
            .unwrap_or_default()
    };

    // The tree: steps under the run or the worker; calls under steps; the
    // worker under the root's step.
    let names: Vec<(String, String)> = spans
        .iter()
        .map(|s| (s.name.clone(), parent_name(s)))
        .collect();
    for (name, parent) in [
        ("step 1", "invoke_agent research"),
        ("chat m", "step 1"),
        ("invoke_agent researcher", "step 1"),
        ("execute_tool search", "step 1"),
    ] {
        assert!(
            names.iter().any(|(n, p)| n == name && p == parent),
            "{name} under {parent}: {names:?}"
        );
    }
    let worker = spans
        .iter()
        .find(|s| s.name == "invoke_agent researcher")
        .unwrap();
    assert!(
        spans.iter().any(|s| s.name.starts_with("step")
            && s.parent_span_id.as_deref() == Some(worker.span_id.as_str())),
        "the worker's steps are under it"
    );

    // Tokens: the model spans' sum is the calls' as the events say.
    let (mut input, mut output) = (0, 0);
    for event in &logged {
        if let EventKind::ModelCallFinished { usage, .. } = &event.kind {
            input += usage.input_tokens;
            output += usage.output_tokens;
        }
    }
    let sum = |key| {
        spans
            .iter()
            .filter(|s| s.name == "chat m")
            .filter_map(|s| attribute(s, key).and_then(Value::as_u64))
            .sum::<u64>()
    };
    assert_eq!(
        (
            sum("gen_ai.usage.input_tokens"),
            sum("gen_ai.usage.output_tokens")
        ),
        (input, output)
    );
    assert!(input > 0);

    // The search's expiry and its verdict are events of its span, and the
    // evaluator's call is a span under it.
    let search = spans
        .iter()
        .find(|s| s.name == "execute_tool search")
        .unwrap();
    let said: Vec<&str> = search.events.iter().map(|e| e.name.as_str()).collect();
    assert!(
        said.contains(&"lease expired") && said.contains(&"verdict RENEW"),
        "{said:?}"
    );
    assert!(
        spans.iter().any(
            |s| attribute(s, "leasehold.consumer") == Some(&json!("engine.watchdog"))
                && s.parent_span_id.as_deref() == Some(search.span_id.as_str())
        ),
        "the evaluator's call is under the search"
    );
    // The model span's id is the one whose traceparent the server got.
    let first = model.requests_of("run")[0]
        .traceparent
        .clone()
        .expect("a traceparent");
    let root_chat = spans
        .iter()
        .find(|s| s.name == "chat m" && parent_name(s) == "step 1")
        .unwrap();
    assert!(
        first.contains(&root_chat.span_id),
        "{first} against {}",
        root_chat.span_id
    );
}

/// The caller's trace context a platform sends with `POST /runs`.
const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test(start_paused = true)]
async fn runs_started_within_a_callers_trace_are_in_it_under_its_span_each_with_spans_of_its_own() {
    let model = ScriptedModel::new()
        .named("m")
        .script("run", [Turn::answer("done"), Turn::answer("done again")]);
    let events = RecordingSink::new();
    let engine = Engine::builder()
        .model(Arc::new(model.clone()))
        .events(Arc::new(events.clone()))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .await
        .expect("engine");
    let caller = leasehold::TraceParent::parse(CALLER).expect("valid");
    let simple = || {
        Flow::builder("traced", "Answer.")
            .max_steps(2)
            .build()
            .unwrap()
    };
    let mut runs = Vec::new();
    for _ in 0..2 {
        let options = leasehold::RunOptions::within_trace(caller.clone());
        let mut run = engine.start_with(simple(), options).await.expect("starts");
        assert_eq!(run.wait().await.status, RunStatus::Completed);
        runs.push(run.run_id().to_owned());
    }
    // Its record keeps the caller's context.
    let record = engine.store().load_run(&runs[0]).await.unwrap().unwrap();
    assert_eq!(record.trace_parent.as_ref(), Some(&caller));

    // The model server was told of the caller's trace, a span of the run.
    let sent: Vec<leasehold::TraceParent> = model
        .requests()
        .iter()
        .map(|r| leasehold::TraceParent::parse(r.traceparent.as_deref().unwrap()).unwrap())
        .collect();
    assert_eq!(sent.len(), 2);
    assert!(
        sent.iter().all(|p| p.trace_id == caller.trace_id),
        "{sent:?}"
    );
    assert_ne!(
        sent[0].span_id, sent[1].span_id,
        "each run's call its own span"
    );

    let mut assembler = SpanAssembler::new();
    let spans: Vec<FinishedSpan> = events
        .events()
        .iter()
        .flat_map(|e| assembler.feed(e))
        .collect();
    assert!(spans.iter().all(|s| s.trace_id == caller.trace_id));
    let ids: BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    assert_eq!(
        ids.len(),
        spans.len(),
        "span ids are unique across the runs"
    );
    let roots: Vec<&FinishedSpan> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent traced")
        .collect();
    assert_eq!(roots.len(), 2);
    for root in roots {
        assert_eq!(
            root.parent_span_id.as_deref(),
            Some(caller.span_id.as_str())
        );
    }
    assert!(
        sent.iter().all(|p| ids.contains(p.span_id.as_str())),
        "the spans the model server was told of are the trace's"
    );
}

#[test]
fn a_run_resumed_elsewhere_has_its_span_begin_when_it_was_created_in_its_callers_trace() {
    let caller = leasehold::TraceParent::parse(CALLER).expect("valid");
    let at = |seq: u64, kind: EventKind| leasehold::Event {
        seq,
        position: seq,
        at: 50_000 + seq,
        run_id: "run-r".into(),
        path: "run".into(),
        kind,
    };
    let mut assembler = SpanAssembler::new();
    let fed = [
        at(
            10,
            EventKind::RunResumed {
                owner_id: "exec-b".to_owned(),
                fence: 2,
                created_at_ms: Some(1_000),
                trace_parent: Some(Box::new(caller.clone())),
            },
        ),
        at(
            11,
            EventKind::RunCompleted {
                answer: "done".to_owned(),
                steps: 1,
                cut_off: false,
            },
        ),
    ];
    let spans: Vec<FinishedSpan> = fed.iter().flat_map(|e| assembler.feed(e)).collect();
    assert_eq!(spans.len(), 1, "{spans:?}");
    let run = &spans[0];
    assert_eq!(
        run.start_ms, 1_000,
        "from the run's creation, not its resume"
    );
    assert_eq!(run.trace_id, caller.trace_id);
    assert_eq!(run.parent_span_id.as_deref(), Some(caller.span_id.as_str()));
}
