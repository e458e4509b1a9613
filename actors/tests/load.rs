//! Overload is not the work's fault: a lease that expires while the
//! executor is late is renewed by `load`, counted neither toward the cap,
//! nor on the ladder, nor in the evidence streak, and judged as usual once
//! the executor is on time again — on paused time, the gauge set by hand to
//! play a starved executor. And the probe that feeds the gauge in a real
//! process measures a blocked thread, on real time.

mod common;

use std::future::pending;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use leasehold_actors::{
    Engine, EngineConfig, Flow, LoadGauge, LoadRule,
    prelude::*,
    testing::{RecordingSink, ScriptedEvaluator, ScriptedModel, Turn},
};
use tokio::time::sleep;

const BOUND: Duration = Duration::from_millis(250);

/// Who decided each verdict so far, in order.
fn deciders(events: &RecordingSink) -> Vec<DecidedBy> {
    events.verdicts().iter().map(|v| v.decided_by).collect()
}

/// A watchdog and a lease actor with `evaluator` under the load rule of
/// `gauge`.
async fn loaded_rig(
    config: SupervisionConfig,
    evaluator: &ScriptedEvaluator,
    gauge: &LoadGauge,
) -> (Supervision, RecordingSink) {
    let events = RecordingSink::new();
    let supervision = Supervision::start_with_load(
        config,
        Some(Arc::new(evaluator.clone())),
        Arc::new(events.clone()),
        Some(LoadRule::new(gauge.clone(), BOUND)),
    )
    .await
    .expect("supervision starts");
    (supervision, events)
}

#[tokio::test(start_paused = true)]
async fn a_starved_executor_renews_by_load_past_the_cap_and_judges_normally_once_on_time() {
    // Two free renewals, a cap of three, an evaluator that renews: on time,
    // a hung operation gets ladder, ladder, evaluator, then the cap.
    let evaluator = ScriptedEvaluator::always("RENEW");
    let gauge = LoadGauge::new();
    gauge.set(Duration::from_secs(2));
    let (supervision, events) = loaded_rig(config(2, 3), &evaluator, &gauge).await;
    let begun = tokio::time::Instant::now();
    let handle = supervision
        .leases
        .supervise(spec(secs(1), 3), |_| pending::<()>())
        .expect("started");

    // Twenty expiries while the executor is two seconds late: all renewed
    // by load, many more than the cap, none of them judged.
    sleep(millis(20_500)).await;
    let verdicts = events.verdicts();
    assert_eq!(verdicts.len(), 20, "{:?}", deciders(&events));
    assert!(
        verdicts.iter().all(|v| v.decided_by == DecidedBy::Load
            && v.verdict == Verdict::Renew
            && v.renewals == 0
            && v.evaluator.is_none()),
        "{verdicts:#?}"
    );
    assert!(
        verdicts[0].reason.contains("2000 ms late") && verdicts[0].reason.contains("250 ms"),
        "{}",
        verdicts[0].reason
    );
    assert_eq!(evaluator.calls(), 0, "a load renewal asked the evaluator");
    assert_eq!(events.count("renewal_cap_reached"), 0);
    assert_eq!(events.count("wait"), 20, "each expiry is still a wait");

    // On time again: the ladder, the evaluator and the cap, as if the
    // twenty expiries had not happened.
    gauge.set(Duration::from_millis(3));
    let error = handle.outcome().await.expect_err("capped");
    assert_eq!(error, LeaseError::RenewalCapReached { max_renewals: 3 });
    assert_eq!(
        begun.elapsed(),
        secs(24),
        "four expiries after the lag fell"
    );
    let after: Vec<_> = deciders(&events).split_off(20);
    assert_eq!(
        after,
        [
            DecidedBy::Ladder,
            DecidedBy::Ladder,
            DecidedBy::Evaluator,
            DecidedBy::Cap
        ]
    );
    assert_eq!(evaluator.calls(), 1);
    let renewals: Vec<u32> = events.verdicts()[20..].iter().map(|v| v.renewals).collect();
    assert_eq!(renewals, [0, 1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn load_renewals_leave_the_evidence_streak_where_it_was() {
    // No ladder; at most two evidence renewals in a row, then the evaluator.
    let mut config = config(0, 10);
    config.watchdog.evidence_renewals = 2;
    let evaluator = ScriptedEvaluator::always("RENEW");
    let gauge = LoadGauge::new();
    let (supervision, events) = loaded_rig(config, &evaluator, &gauge).await;
    let handle = supervision
        .leases
        .supervise(spec(secs(1), 10), |evidence| async move {
            loop {
                sleep(millis(100)).await;
                evidence.observe();
            }
        })
        .expect("started");
    // Expiry 1 on evidence; 2 to 4 while the executor is late; 5 on
    // evidence again — the second of the streak, load renewals between
    // them counted nowhere — and so 6 asks the evaluator.
    sleep(millis(1_500)).await;
    gauge.set(Duration::from_secs(1));
    sleep(millis(3_000)).await;
    gauge.set(Duration::ZERO);
    sleep(millis(2_000)).await;
    assert_eq!(
        deciders(&events),
        [
            DecidedBy::Evidence,
            DecidedBy::Load,
            DecidedBy::Load,
            DecidedBy::Load,
            DecidedBy::Evidence,
            DecidedBy::Evaluator
        ]
    );
    let renewals: Vec<u32> = events.verdicts().iter().map(|v| v.renewals).collect();
    assert_eq!(renewals, [0, 1, 1, 1, 1, 2]);
    assert_eq!(evaluator.calls(), 1);
    drop(handle);
}

#[tokio::test(start_paused = true)]
async fn the_lag_below_the_bound_is_taken_off_the_silence_judged() {
    // Five reports in the first half second, then silence: at the expiry
    // the last report is 500 ms old, of which the executor says 200 ms
    // (below the bound) were its own lateness.
    let evaluator = ScriptedEvaluator::always("RENEW");
    let gauge = LoadGauge::new();
    let (supervision, events) = loaded_rig(config(0, 10), &evaluator, &gauge).await;
    let handle = supervision
        .leases
        .supervise(spec(secs(1), 10), |evidence| async move {
            for _ in 0..5 {
                sleep(millis(100)).await;
                evidence.observe();
            }
            pending::<()>().await
        })
        .expect("started");
    sleep(millis(900)).await;
    gauge.set(millis(200));
    sleep(millis(200)).await;
    let verdicts = events.verdicts();
    assert_eq!(verdicts.len(), 1);
    assert_eq!(verdicts[0].decided_by, DecidedBy::Evidence);
    assert_eq!(verdicts[0].evidence.last_progress_age_ms, Some(300));
    // On time, the silence is judged whole.
    gauge.set(Duration::ZERO);
    sleep(secs(1)).await;
    let verdicts = events.verdicts();
    assert_eq!(verdicts[1].evidence.last_progress_age_ms, Some(1_500));
    drop(handle);
}

#[tokio::test(start_paused = true)]
async fn an_engine_built_with_a_gauge_renews_its_runs_leases_by_load() {
    // A run whose model call hangs, on an engine whose executor is late:
    // its lease renews by load, past the cap; on time, the cap cuts.
    let gauge = LoadGauge::new();
    gauge.set(Duration::from_secs(1));
    let mut config = EngineConfig::default();
    config.supervision.lease.model_blocking = secs(10);
    config.supervision.lease.max_renewals = 2;
    config.supervision.watchdog.free_renewals = 2;
    let events = RecordingSink::new();
    let model = ScriptedModel::new().script("run", [Turn::hang(), Turn::answer("done")]);
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model))
        .events(Arc::new(events.clone()))
        .load(gauge.clone())
        .build()
        .await
        .expect("engine builds");
    assert!(engine.load().is_some());
    let flow: Flow = serde_json::from_value(serde_json::json!({
        "name": "ask", "task": "What is six times seven?", "max_steps": 3, "stream": false
    }))
    .expect("flow");
    let mut run = engine.start(flow).await.expect("started");
    sleep(secs(105)).await;
    assert_eq!(deciders(&events), [DecidedBy::Load; 10]);
    gauge.set(Duration::ZERO);
    let state = run.wait().await;
    assert_eq!(
        deciders(&events)[10..],
        [DecidedBy::Ladder, DecidedBy::Ladder, DecidedBy::Cap]
    );
    assert_eq!(events.count("renewal_cap_reached"), 1);
    assert_eq!(state.answer.as_deref(), Some("done"), "{state:?}");
}

/// Waits, on real time, until `gauge` reads what `wanted` accepts.
async fn until_reads(gauge: &LoadGauge, wanted: impl Fn(Duration) -> bool) {
    let patience = tokio::time::Instant::now() + secs(30);
    loop {
        let lag = gauge.lag();
        if wanted(lag) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < patience,
            "the gauge still reads {lag:?}"
        );
        sleep(millis(5)).await;
    }
}

#[test]
fn the_probe_measures_a_blocked_thread_and_reads_low_once_it_is_free() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let gauge = LoadGauge::probe(millis(50));
        // A task that holds the only thread for 300 ms: the probe, asleep
        // for 50 ms, wakes at least 250 ms late.
        tokio::spawn(async { std::thread::sleep(millis(300)) });
        until_reads(&gauge, |lag| lag >= millis(200)).await;
        // The thread is free again: each on-time sample halves the reading.
        until_reads(&gauge, |lag| lag < BOUND).await;
        let rule = LoadRule::new(gauge.clone(), BOUND);
        // A later block shows again: the probe kept running.
        tokio::spawn(async { std::thread::sleep(millis(300)) });
        until_reads(&gauge, |lag| lag >= millis(200)).await;
        assert!(rule.late_by(Duration::ZERO).is_some());
    });
}

#[test]
fn lateness_under_the_bound_at_every_wake_adds_up_to_a_load_renewal() {
    // An executor that is a little late at every wake — its one thread
    // blocked 150 ms out of every 200 ms by a synchronous task — under a
    // bound of 1 s: no single wake of a 300 ms lease is that late, but the
    // lateness of its wakes adds up past it, and the lease is renewed by
    // `load` for the time the runtime owed it. Real time: paused time
    // cannot make a wake late.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let deciders = runtime.block_on(async {
        let events = RecordingSink::new();
        let supervision = Supervision::start_with_load(
            config(0, 1_000),
            None,
            Arc::new(events.clone()),
            Some(LoadRule::new(LoadGauge::new(), Duration::from_secs(1))),
        )
        .await
        .expect("supervision starts");
        let hog = tokio::spawn(async {
            loop {
                std::thread::sleep(Duration::from_millis(150));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let handle = supervision
            .leases
            .supervise(spec(Duration::from_millis(300), 1_000), |_| pending::<()>())
            .expect("started");
        // Until a renewal by load, or a bound on a loaded machine.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline
            && !events
                .verdicts()
                .iter()
                .any(|v| v.decided_by == DecidedBy::Load)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        hog.abort();
        drop(handle);
        events.verdicts()
    });
    let load: Vec<_> = deciders
        .iter()
        .filter(|v| v.decided_by == DecidedBy::Load)
        .collect();
    assert!(!load.is_empty(), "no renewal by load: {deciders:?}");
    assert!(
        load.iter()
            .any(|v| v.reason.contains("at this lease's wakes") && v.reason.contains("in all")),
        "{load:?}"
    );
}
