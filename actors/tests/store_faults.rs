//! What a run does when its store refuses a write: it tries again for the
//! engine's patience, then pauses for a person (or fails, by a setting)
//! with the store's error as its reason, or — if not even that can be
//! written — lets the run go so that its lease runs out and an executor
//! resumes it. Never a run left `running` with live heartbeats and no
//! progress; never a log with a gap. On paused time, with a store wrapped
//! to fail on purpose.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::testing::faults::{Faults, FaultyStore};
use leasehold_actors::testing::{ManualClock, ScriptedModel, ScriptedTools, ToolAct, Turn};
use leasehold_actors::{
    Engine, EngineConfig, Flow, MemoryStore, OnStoreFailure, RunStatus, Store, StoreErrorKind,
};
use serde_json::json;

const TTL: Duration = Duration::from_secs(90);

struct Rig {
    engine: Engine,
    store: MemoryStore,
    faults: Faults,
    clock: ManualClock,
    tools: ScriptedTools,
}

async fn rig(faults: Faults, on_failure: OnStoreFailure) -> Rig {
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let faulty: Arc<dyn Store> =
        Arc::new(FaultyStore::new(Arc::new(store.clone()), faults.clone()));
    let mut config = EngineConfig {
        run_lease_ttl: TTL,
        ..EngineConfig::default()
    };
    config.supervision.lease.tool_call = Duration::from_secs(600);
    config.supervision.lease.model_stream = Duration::from_secs(600);
    config.store_writes.on_failure = on_failure;
    let tools = ScriptedTools::new().tool(
        "lookup",
        Some(true),
        [ToolAct::returns("found", Duration::from_secs(60))],
    );
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("lookup", json!({"q": "status"}))]),
            Turn::answer("all good").first_chunk_after(Duration::from_secs(120)),
            Turn::answer("all good"),
        ],
    );
    let engine = Engine::builder()
        .config(config)
        .owner_id("executor-a")
        .store(faulty)
        .clock(Arc::new(clock.clone()))
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools.clone()))
        .build()
        .await
        .expect("engine builds");
    Rig {
        engine,
        store,
        faults,
        clock,
        tools,
    }
}

fn flow() -> Flow {
    serde_json::from_value(json!({
        "name": "faulty",
        "task": "Look the status up.",
        "max_steps": 4,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}]
    }))
    .expect("valid flow")
}

/// The positions of the run's stored events: 1, 2, 3, … with no gap.
fn assert_no_gap(store: &MemoryStore, run_id: &str) -> Vec<&'static str> {
    let events = store.events(run_id);
    let positions: Vec<u64> = events.iter().map(|e| e.position).collect();
    let expected: Vec<u64> = (1..=events.len() as u64).collect();
    assert_eq!(positions, expected, "the stored log has a gap");
    events.iter().map(|e| e.kind.name()).collect()
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}");
}

#[tokio::test(start_paused = true)]
async fn a_write_the_store_refuses_for_good_pauses_the_run_with_the_reason_and_a_resume_completes_it()
 {
    let faults = Faults::none()
        .only("saving a snapshot")
        .of_kind(StoreErrorKind::Invalid);
    let rig = rig(faults, OnStoreFailure::Pause).await;
    let mut run = rig.engine.start(flow()).await.expect("starts");
    let run_id = run.run_id().to_owned();
    until("the tool call is sent", || rig.tools.calls("lookup") == 1).await;
    rig.faults.refuse_writes(true);

    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::WaitingHuman, "{state:?}");
    let pause = state.paused.expect("the pause says why");
    assert_eq!(pause.subject, "store");
    assert!(
        pause.reason.contains("snapshot not written") && pause.reason.contains("fault injected"),
        "{}",
        pause.reason
    );
    let record = rig.store.run(&run_id).expect("the record");
    assert_eq!(record.status, RunStatus::WaitingHuman);
    assert_eq!(
        record.pause.as_ref().map(|p| p.reason.clone()),
        Some(pause.reason.clone())
    );
    let kinds = assert_no_gap(&rig.store, &run_id);
    assert_eq!(kinds.last(), Some(&"paused"), "{kinds:?}");
    // It is not held here any more: no heartbeat, no loop.
    assert!(rig.engine.handle(&run_id).is_none());
    let health = rig.engine.store_health();
    assert_eq!(
        (health.permanent_errors, health.given_up),
        (1, 1),
        "{health:?}"
    );
    assert_eq!(health.retries, 0, "a permanent error is not tried again");

    // The store takes snapshots again; a person resumes the run.
    rig.faults.refuse_writes(false);
    let mut resumed = rig.engine.resume(&run_id).await.expect("claimed");
    resumed
        .resume(Some("the disk has room again".into()))
        .await
        .expect("resumed");
    let state = resumed.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    let kinds = assert_no_gap(&rig.store, &run_id);
    assert_eq!(kinds.last(), Some(&"run_completed"));
    assert_eq!(
        rig.store.run(&run_id).map(|r| r.status),
        Some(RunStatus::Completed)
    );
}

#[tokio::test(start_paused = true)]
async fn with_on_failure_fail_a_write_given_up_fails_the_run_with_the_reason() {
    let faults = Faults::none()
        .only("saving a snapshot")
        .of_kind(StoreErrorKind::Invalid);
    let rig = rig(faults, OnStoreFailure::Fail).await;
    let mut run = rig.engine.start(flow()).await.expect("starts");
    let run_id = run.run_id().to_owned();
    until("the tool call is sent", || rig.tools.calls("lookup") == 1).await;
    rig.faults.refuse_writes(true);
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Failed, "{state:?}");
    let reason = state.reason.expect("a reason");
    assert!(reason.contains("snapshot not written"), "{reason}");
    let record = rig.store.run(&run_id).expect("the record");
    assert_eq!(record.status, RunStatus::Failed);
    assert_eq!(record.reason.as_deref(), Some(reason.as_str()));
    let kinds = assert_no_gap(&rig.store, &run_id);
    assert_eq!(kinds.last(), Some(&"run_failed"));
}

#[tokio::test(start_paused = true)]
async fn a_store_gone_for_longer_than_the_patience_lets_the_run_go_and_it_resumes_whole_once_back()
{
    let rig = rig(Faults::none(), OnStoreFailure::Pause).await;
    let mut run = rig.engine.start(flow()).await.expect("starts");
    let run_id = run.run_id().to_owned();
    until("the tool call is sent", || rig.tools.calls("lookup") == 1).await;
    // The store goes away while the call is out, for longer than the
    // engine tries a write again.
    rig.faults.refuse_writes(true);
    let state = run.wait().await;
    let lost = state.lost.expect("the run was let go");
    assert!(lost.contains("not written"), "{lost}");
    assert!(
        rig.engine.handle(&run_id).is_none(),
        "nothing holds it here"
    );
    let health = rig.engine.store_health();
    assert!(
        health.failing && health.retries > 0 && health.given_up > 0,
        "{health:?}"
    );
    // Nothing renews its lease. Once the store is back, its holders get a
    // TTL to renew theirs before the sweep marks any run orphaned; then the
    // store finds this one orphaned.
    rig.faults.refuse_writes(false);
    assert!(
        rig.engine
            .reconcile_orphans()
            .await
            .expect("swept")
            .is_empty(),
        "no run is orphaned within a TTL of the store's absence"
    );
    tokio::time::sleep(TTL).await;
    rig.clock.advance(TTL + Duration::from_secs(1));
    assert_eq!(
        rig.engine.reconcile_orphans().await.expect("reconciled"),
        vec![run_id.clone()]
    );
    let resumed = rig.engine.resume_orphans().await.expect("resumed");
    assert_eq!(resumed.len(), 1);
    let mut resumed = resumed.into_iter().next().unwrap();
    let state = resumed.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    let kinds = assert_no_gap(&rig.store, &run_id);
    assert_eq!(kinds.last(), Some(&"run_completed"));
    assert!(!rig.engine.store_health().failing);
}

#[tokio::test(start_paused = true)]
async fn events_the_store_refuses_wait_in_order_and_are_written_before_the_run_goes_on() {
    let faults = Faults::none().only("appending events");
    let rig = rig(faults, OnStoreFailure::Pause).await;
    let mut run = rig.engine.start(flow()).await.expect("starts");
    let run_id = run.run_id().to_owned();
    until("the tool call is sent", || rig.tools.calls("lookup") == 1).await;
    until("the first events are logged", || {
        !rig.store.events(&run_id).is_empty()
    })
    .await;
    // Events are refused from now for 150 s: the call's end (at 60 s) and
    // all after it wait with the log's writer; the model's answer would
    // come at 180 s.
    rig.faults.refuse_writes(true);
    let back = tokio::spawn({
        let faults = rig.faults.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(150)).await;
            faults.refuse_writes(false);
        }
    });
    // Past the patience the run is told; its pause cannot be said in its
    // log, so it is not recorded: the run is let go.
    let state = run.wait().await;
    let lost = state.lost.expect("let go");
    assert!(lost.contains("events not written"), "{lost}");
    assert!(rig.engine.handle(&run_id).is_none());
    assert_eq!(
        rig.store.run(&run_id).map(|r| r.status),
        Some(RunStatus::Running),
        "no pause is recorded that the log does not hold"
    );
    back.await.unwrap();
    // Once the store takes events again, the held ones land, in order.
    until("the held events are written", || {
        rig.store
            .events(&run_id)
            .iter()
            .any(|e| e.kind.name() == "paused")
    })
    .await;
    let kinds = assert_no_gap(&rig.store, &run_id);
    assert!(kinds.contains(&"tool_call_finished"), "{kinds:?}");
    tokio::time::sleep(TTL).await;
    rig.clock.advance(TTL + Duration::from_secs(1));
    rig.engine.reconcile_orphans().await.expect("reconciled");
    let mut resumed = rig.engine.resume(&run_id).await.expect("claimed");
    let state = resumed.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_eq!(
        assert_no_gap(&rig.store, &run_id).last(),
        Some(&"run_completed")
    );
    assert!(rig.engine.store_errors_of(&run_id).is_some());
}

/// A verdict that cuts a call acts once the run's log holds it: with the
/// store refusing events around the lease's expiry, the call is cut only
/// after `intervened` is stored, so a crash right after the cut cannot
/// lose the verdict from the run's trace.
#[tokio::test(start_paused = true)]
async fn an_intervention_cuts_its_call_only_once_the_log_holds_the_verdict() {
    let store = MemoryStore::new();
    let faults = Faults::none().only("appending events");
    let faulty: Arc<dyn Store> =
        Arc::new(FaultyStore::new(Arc::new(store.clone()), faults.clone()));
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_secs(10);
    config.supervision.watchdog.policy = "tool_call = deadline".parse().expect("a policy");
    let tools = ScriptedTools::new().tool(
        "lookup",
        Some(true),
        [
            ToolAct::returns("too late", Duration::from_secs(1000)),
            ToolAct::returns("found", Duration::from_millis(10)),
        ],
    );
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("lookup", json!({"q": "status"}))]),
            Turn::answer("all good"),
        ],
    );
    let engine = Engine::builder()
        .config(config)
        .store(faulty)
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools.clone()))
        .build()
        .await
        .expect("engine builds");
    let mut run = engine.start(flow()).await.expect("starts");
    let run_id = run.run_id().to_owned();
    let mut events = run.events();
    until("the tool call is sent", || tools.calls("lookup") == 1).await;
    // From a second before the expiry to two after it, no event lands.
    tokio::time::sleep(Duration::from_secs(9)).await;
    faults.refuse_writes(true);
    let back = tokio::spawn({
        let faults = faults.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            faults.refuse_writes(false);
        }
    });
    loop {
        let event = events
            .recv()
            .await
            .expect("the run's events")
            .expect("no lag");
        if event.kind.name() == "tool_call_finished" {
            let stored: Vec<&str> = store
                .events(&run_id)
                .iter()
                .map(|e| e.kind.name())
                .collect();
            assert!(
                stored.contains(&"intervened"),
                "the call was cut before its verdict was logged: {stored:?}"
            );
            break;
        }
    }
    back.await.unwrap();
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    assert_no_gap(&store, &run_id);
}
