//! One control for many runs through the executor: a dry run lists the
//! runs a filter selects and touches none; the control then pauses each of
//! them and no other; what each waits on selects too; a resume and a
//! cancel by status follow. 100 runs of one flow beside 5 of another, in
//! one executor on the sled store, on paused time with the scripted fakes.

use std::sync::Arc;
use std::time::Duration;

use leasehold::executor::control::many::{Outcome, Selection};
use leasehold::executor::{Executor, ExecutorOptions};
use leasehold::store::{Durability, SledConfig, SledStore};
use leasehold::testing::{ScriptedModel, ScriptedTools, ToolAct, Turn};
use leasehold::{Engine, EngineConfig, Flow, InFlight, RunCommand, RunQuery, RunStatus};
use serde_json::json;

const RUNS: usize = 100;
const OTHERS: usize = 5;

fn flow(name: &str) -> Flow {
    serde_json::from_value(json!({
        "name": name, "task": "Look.", "max_steps": 3,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}]
    }))
    .expect("flow")
}

fn selection(flow: Option<&str>, status: Option<RunStatus>) -> Selection {
    let mut query = RunQuery::first(500);
    query.flow = flow.map(str::to_owned);
    query.status = status;
    Selection {
        query,
        waiting_on: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_hundred_runs_of_a_flow_are_listed_by_a_dry_run_then_paused_and_no_other() {
    let dir = tempfile::tempdir().expect("dir");
    let store = SledStore::open(SledConfig::new(dir.path()).with_durability(Durability::Async))
        .expect("store");
    // Every root asks for one search (the script is the roots' together);
    // no search answers.
    let model = ScriptedModel::new().script(
        "run",
        vec![Turn::tools([("search", json!({"q": "logs"}))]); RUNS + OTHERS],
    );
    let tools = ScriptedTools::new().tool("search", Some(true), vec![ToolAct::Hang; RUNS + OTHERS]);
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_secs(3600);
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model))
        .store(Arc::new(store.clone()))
        .tool_server("local", Arc::new(tools.clone()))
        .build()
        .await
        .expect("engine");
    let executor = Executor::new(
        Arc::new(engine),
        ExecutorOptions {
            max_live_runs: 200,
            claim_interval: None,
            ..ExecutorOptions::default()
        },
    );
    let mut handles = Vec::new();
    for _ in 0..RUNS {
        handles.push(
            executor
                .start(flow("nightly"), Default::default())
                .await
                .expect("started"),
        );
    }
    for _ in 0..OTHERS {
        handles.push(
            executor
                .start(flow("triage"), Default::default())
                .await
                .expect("started"),
        );
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        tools.calls("search"),
        RUNS + OTHERS,
        "every run waits on its search"
    );

    let pause = RunCommand::Pause {
        reason: "the provider is slow".into(),
        in_flight: InFlight::Finish,
        by: "ops".into(),
    };
    let dry = executor
        .control_many(&selection(Some("nightly"), None), &pause, true)
        .await
        .expect("dry run");
    assert!(dry.dry_run);
    assert_eq!(dry.runs.len(), RUNS);
    assert!(!dry.more);
    assert!(
        dry.runs
            .iter()
            .all(|r| matches!(r.outcome, Outcome::Selected))
    );
    assert!(
        dry.runs
            .iter()
            .all(|r| r.waiting_on.as_deref() == Some("search")),
        "each waits on its search"
    );
    assert!(
        handles
            .iter()
            .all(|h| h.state().status == RunStatus::Running),
        "a dry run touches nothing"
    );
    // What they wait on selects too: no run waits on the model.
    let mut on_model = selection(Some("nightly"), None);
    on_model.waiting_on = Some("model".into());
    let none = executor
        .control_many(&on_model, &pause, false)
        .await
        .expect("none");
    assert!(none.runs.is_empty());

    let report = executor
        .control_many(&selection(Some("nightly"), None), &pause, false)
        .await
        .expect("paused");
    assert_eq!(report.done(), RUNS, "{report:?}");
    let paused = handles
        .iter()
        .filter(|h| h.state().status == RunStatus::WaitingHuman)
        .count();
    assert_eq!(paused, RUNS);
    // A second pause of the same runs is refused, run by run, with why.
    let again = executor
        .control_many(&selection(Some("nightly"), None), &pause, false)
        .await
        .expect("again");
    assert_eq!(again.done(), 0);
    assert!(again.runs.iter().all(
        |r| matches!(&r.outcome, Outcome::Refused { reason } if reason.contains("already paused"))
    ));

    // A page smaller than the selection says there is more.
    let mut few = selection(None, Some(RunStatus::WaitingHuman));
    few.query.limit = 10;
    let resume = RunCommand::Resume { guidance: None };
    let page = executor
        .control_many(&few, &resume, false)
        .await
        .expect("resumed");
    assert_eq!((page.done(), page.more), (10, true));
    let cancel = RunCommand::Cancel {
        reason: "done with them".into(),
    };
    let cancelled = executor
        .control_many(&selection(None, Some(RunStatus::Running)), &cancel, false)
        .await
        .expect("cancelled");
    assert_eq!(cancelled.done(), OTHERS + 10);
    let left = handles
        .iter()
        .filter(|h| h.state().status == RunStatus::WaitingHuman)
        .count();
    assert_eq!(left, RUNS - 10);
    executor.shutdown().await.expect("shut down");
}
