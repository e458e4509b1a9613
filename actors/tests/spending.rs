//! A run's spending budget (`budget.max_tokens`, `budget.max_cost`) is a
//! checkpoint, never a kill: reached, the evaluator may extend it on
//! evidence, and otherwise the run pauses for a person, whose resume grants
//! one more budget; a run resumed by another executor rebuilds its budget
//! from its log. On paused time with the scripted fakes.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::{
    Engine, EngineConfig, Event, EventKind, Flow, Price, Prices, RestartPolicy, RunStatus,
    testing::{
        MemoryStore, RecordingSink, Scripted, ScriptedEvaluator, ScriptedModel, ScriptedTools,
        ToolAct, Turn,
    },
};
use serde_json::json;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn config() -> EngineConfig {
    EngineConfig {
        restart: RestartPolicy {
            jitter: 0.0,
            ..RestartPolicy::default()
        },
        // 250 tokens a turn (the scripted default) cost 0.25.
        prices: Prices::new([("m".to_owned(), Price::per_million(1000.0, 1000.0))]),
        ..EngineConfig::default()
    }
}

struct Rig {
    engine: Engine,
    events: RecordingSink,
}

async fn rig(
    model: &ScriptedModel,
    tools: &ScriptedTools,
    evaluator: Option<&ScriptedEvaluator>,
    store: &MemoryStore,
) -> Rig {
    let events = RecordingSink::new();
    let mut builder = Engine::builder()
        .config(config())
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
    }
}

fn flow(budget: serde_json::Value) -> Flow {
    serde_json::from_value(json!({
        "name": "research",
        "task": "Find out what happened.",
        "max_steps": 20,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}],
        "budget": budget,
    }))
    .expect("valid flow")
}

fn search() -> Turn {
    Turn::tools([("search", json!({"q": "logs"}))])
}

fn tools() -> ScriptedTools {
    ScriptedTools::new().tool(
        "search",
        Some(true),
        std::iter::repeat_n(ToolAct::returns("found", secs(1)), 10),
    )
}

fn spending_records(events: &[Event]) -> Vec<(&'static str, serde_json::Value)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::BudgetExtended(r) | EventKind::BudgetExhausted(r) => {
                let spending = r.figures.spending.as_ref()?;
                Some((e.kind.name(), serde_json::to_value(spending).unwrap()))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_spent_token_budget_pauses_the_run_for_a_person_and_a_resume_on_another_executor_grants_one_more()
 {
    let model = ScriptedModel::new().named("m").script(
        "run",
        [search(), search(), search(), search(), Turn::answer("done")],
    );
    let tools = tools();
    let store = MemoryStore::new();
    let a = rig(&model, &tools, None, &store).await;
    let mut run = a
        .engine
        .start(flow(json!({"max_tokens": 600})))
        .await
        .expect("starts");
    let state = run.paused().await;
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    let reason = state.paused.clone().map(|p| p.reason).unwrap_or_default();
    assert!(
        reason.contains("spending budget is reached: 750 tokens of a budget of 600")
            && reason.contains("resuming grants another 600 tokens"),
        "{reason}"
    );
    // Three calls were made, and no fourth: the budget stopped the loop
    // before its step, with no evaluator to ask.
    assert_eq!(model.requests_of("run").len(), 3);
    let records = spending_records(&a.events.events());
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].0, "budget_exhausted");
    assert_eq!(records[0].1["tokens"], 750);
    assert_eq!(records[0].1["token_limit"], 600);
    assert_eq!(a.events.count("run_failed"), 0);

    // Another executor takes the run on: its budget is rebuilt from the
    // log (750 spent of 1 200), so the resume goes on for two more calls
    // and the run completes without a second pause.
    a.engine.shutdown().await;
    let b = rig(&model, &tools, None, &store).await;
    let mut run = b.engine.resume(run.run_id()).await.expect("claimed");
    run.resume(Some("go on".into())).await.expect("resumes");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(model.requests_of("run").len(), 5);
    assert!(spending_records(&b.events.events()).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_spent_money_budget_is_extended_on_the_evaluators_evidence_then_paused_when_it_says_no() {
    let model = ScriptedModel::new().named("m").script(
        "run",
        [
            search(),
            search(),
            search(),
            search(),
            search(),
            search(),
            Turn::answer("done"),
        ],
    );
    let tools = tools();
    let evaluator = ScriptedEvaluator::always("RENEW").with_budget_script([
        Scripted::decision("EXTEND", "the searches are converging", 1.0),
        Scripted::decision("WRAP_UP", "enough was spent", 0.9),
    ]);
    let store = MemoryStore::new();
    let rig = rig(&model, &tools, Some(&evaluator), &store).await;
    let mut run = rig
        .engine
        .start(flow(json!({"max_cost": 0.6})))
        .await
        .expect("starts");
    let state = run.paused().await;
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    let records = spending_records(&rig.events.events());
    assert_eq!(records.len(), 2, "{records:?}");
    // 0.75 spent of 0.6: extended at full confidence to 1.2 ...
    assert_eq!(records[0].0, "budget_extended");
    assert_eq!(records[0].1["cost_limit"], 0.6);
    assert_eq!(records[0].1["new_cost_limit"], 1.2);
    // ... then 1.25 spent of 1.2, and the evaluator says no: a pause.
    assert_eq!(records[1].0, "budget_exhausted");
    assert_eq!(model.requests_of("run").len(), 5);
    // The evaluator was shown the spending.
    let asked = evaluator.budget_requests();
    assert_eq!(asked.len(), 2);
    assert!(
        asked[0]
            .figures
            .spending
            .as_ref()
            .is_some_and(|s| s.cost >= 0.75)
    );
    run.resume(None).await.expect("resumes");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(rig.events.count("run_failed"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_budget_of_no_tokens_or_of_an_absurd_cost_is_refused_naming_it() {
    for (budget, named) in [
        (json!({"max_tokens": 0}), "budget.max_tokens"),
        (json!({"max_cost": -1.0}), "budget.max_cost"),
        (json!({"max_cost": 1e300}), "budget.max_cost"),
    ] {
        let refused = flow(budget.clone()).validate().expect_err("refused");
        assert!(refused.to_string().contains(named), "{budget}: {refused}");
    }
}
