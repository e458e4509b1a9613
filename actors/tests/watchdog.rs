//! The rules of "Watchdog semantics", one test each, on paused time.

mod common;

use std::future::pending;
use std::sync::Arc;

use common::*;
use leasehold_actors::testing::actors::{LeaseExpiry, WatchdogActor, WatchdogArgs};
use leasehold_actors::{
    ChatMessage, LeaseId, LeaseMeta, ModelClient, ModelError, ModelReply, ModelRequest,
    WATCHDOG_CONSUMER,
    prelude::*,
    testing::{RecordingSink, Scripted, ScriptedEvaluator, ScriptedModel, Turn},
};
use tokio::time::{Instant, sleep};

/// Runs one operation that never reports evidence under a 1 s lease with
/// no free renewals, an evaluator playing `first` then INTERVENE, and
/// returns the first verdict record.
async fn first_verdict_with(first: Scripted) -> (VerdictRecord, Result<(), LeaseError>) {
    let evaluator =
        ScriptedEvaluator::new([first, Scripted::verdict("INTERVENE", "second opinion", "")]);
    let mut config = config(0, 10);
    config.watchdog.evaluator_timeout = secs(15);
    let rig = rig(config, Some(evaluator)).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), |_| pending::<()>())
        .expect("started");
    let outcome = handle.outcome().await;
    let first = rig.events.verdicts().into_iter().next().expect("a verdict");
    (first, outcome)
}

async fn assert_breaker_renews(first: Scripted, reason_contains: &str) {
    let (record, outcome) = first_verdict_with(first).await;
    assert_eq!(record.verdict, Verdict::Renew);
    assert_eq!(record.decided_by, DecidedBy::Breaker);
    assert!(
        record.reason.contains(reason_contains),
        "reason: {}",
        record.reason
    );
    assert!(
        record.evaluator.is_some(),
        "the failed call is still accounted"
    );
    // The operation was not killed by the failure: only the next, valid
    // verdict ended it.
    assert_eq!(
        outcome,
        Err(LeaseError::Intervened {
            reason: "second opinion".into()
        })
    );
}

#[tokio::test(start_paused = true)]
async fn breaker_on_evaluator_error_renews() {
    assert_breaker_renews(
        Scripted::Fail("connection refused".into()),
        "connection refused",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn breaker_on_evaluator_timeout_renews() {
    assert_breaker_renews(Scripted::Hang, "did not answer within 15000 ms").await;
}

#[tokio::test(start_paused = true)]
async fn breaker_on_garbage_renews() {
    assert_breaker_renews(
        Scripted::Answer(r#"Sure! {"verdict":"INTERVENE","reason":"x","nudge":""}"#.into()),
        "refused",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn breaker_on_a_duplicate_key_renews() {
    // serde_json alone would keep the last `verdict`, INTERVENE.
    assert_breaker_renews(
        Scripted::Answer(
            r#"{"verdict":"RENEW","reason":"x","nudge":"","verdict":"INTERVENE"}"#.into(),
        ),
        "duplicate key `verdict`",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn breaker_on_unknown_verdict_renews() {
    assert_breaker_renews(Scripted::verdict("KILL", "x", ""), "unknown verdict").await;
}

#[tokio::test(start_paused = true)]
async fn breaker_on_missing_field_renews() {
    assert_breaker_renews(
        Scripted::Answer(r#"{"verdict":"INTERVENE","nudge":""}"#.into()),
        "missing field `reason`",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn breaker_on_evaluator_panic_renews() {
    assert_breaker_renews(Scripted::Panic, "panicked").await;
}

#[tokio::test(start_paused = true)]
async fn no_evaluator_renews_by_breaker() {
    let rig = rig(config(0, 3), None).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 3), |_| async { sleep(millis(3500)).await })
        .expect("started");
    handle.outcome().await.expect("completes");
    let verdicts = rig.events.verdicts();
    assert_eq!(verdicts.len(), 3);
    assert!(
        verdicts
            .iter()
            .all(|v| v.verdict == Verdict::Renew && v.decided_by == DecidedBy::Breaker)
    );
}

#[tokio::test(start_paused = true)]
async fn hung_evaluator_yields_verdict_exactly_at_flat_timeout() {
    let evaluator = ScriptedEvaluator::new([Scripted::Hang]);
    let mut config = config(0, 10);
    config.watchdog.evaluator_timeout = secs(15);
    let rig = rig(config, Some(evaluator)).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), |_| pending::<()>())
        .expect("started");
    sleep(secs(20)).await;
    let events = rig.events.events();
    let at = |name: &str| events.iter().find(|e| e.kind.name() == name).map(|e| e.at);
    let (expired, decided) = (
        at("wait").expect("a wait"),
        at("verdict").expect("a verdict"),
    );
    assert_eq!(
        decided - expired,
        15_000,
        "the verdict did not come at the flat timeout"
    );
    let record = &rig.events.verdicts()[0];
    assert_eq!(record.decided_by, DecidedBy::Breaker);
    assert_eq!(
        record.evaluator.as_ref().map(|u| u.latency_ms),
        Some(15_000)
    );
    drop(handle);
}

#[tokio::test(start_paused = true)]
async fn free_renewals_never_call_the_evaluator() {
    let rig = rig(config(2, 10), Some(ScriptedEvaluator::always("INTERVENE"))).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), |_| pending::<()>())
        .expect("started");
    sleep(millis(2500)).await;
    assert_eq!(rig.events.count("wait"), 2);
    assert_eq!(
        rig.evaluator.calls(),
        0,
        "a free renewal called the evaluator"
    );
    assert!(
        rig.events
            .verdicts()
            .iter()
            .all(|v| v.decided_by == DecidedBy::Ladder && v.evaluator.is_none())
    );
    assert!(matches!(
        handle.outcome().await,
        Err(LeaseError::Intervened { .. })
    ));
    assert_eq!(rig.evaluator.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn steady_evidence_never_reaches_the_evaluator() {
    // Progress every 200 ms for 20 leases: fresh evidence renews every time
    // once the free renewals are spent, when evidence renewals in a row are
    // not limited (by default they are: see `watchdog_streams` below).
    let mut config = config(2, 30);
    config.watchdog.evidence_renewals = u32::MAX;
    let rig = rig(config, Some(ScriptedEvaluator::always("INTERVENE"))).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 30), |evidence| async move {
            for _ in 0..100 {
                sleep(millis(200)).await;
                evidence.observe();
            }
            sleep(millis(500)).await;
            "whole result"
        })
        .expect("started");
    assert_eq!(handle.outcome().await, Ok("whole result"));
    assert_eq!(
        rig.evaluator.calls(),
        0,
        "steady evidence reached the evaluator"
    );
    let verdicts = rig.events.verdicts();
    assert_eq!(verdicts.len(), 20);
    assert!(
        verdicts[2..]
            .iter()
            .all(|v| v.decided_by == DecidedBy::Evidence)
    );
    assert!(
        verdicts[2..]
            .iter()
            .all(|v| v.evidence.phi.is_some_and(|phi| phi < 8.0))
    );
}

#[tokio::test(start_paused = true)]
async fn silence_reaches_the_evaluator() {
    let rig = rig(config(2, 30), Some(ScriptedEvaluator::always("INTERVENE"))).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 30), |_| pending::<()>())
        .expect("started");
    assert!(matches!(
        handle.outcome().await,
        Err(LeaseError::Intervened { .. })
    ));
    let requests = rig.evaluator.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].evidence.count, 0);
    assert_eq!(
        requests[0].evidence.phi, None,
        "silence from the start has no phi"
    );
}

#[tokio::test(start_paused = true)]
async fn evidence_that_stops_becomes_suspicious_and_reaches_the_evaluator() {
    // Progress every 500 ms for 10 s, then silence: the detector's suspicion
    // rises past its threshold and the evaluator is asked, shown phi.
    // (Evidence renewals in a row are not limited here: phi alone decides.)
    let mut config = config(2, 60);
    config.watchdog.evidence_renewals = u32::MAX;
    let rig = rig(config, Some(ScriptedEvaluator::always("INTERVENE"))).await;
    let begun = Instant::now();
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 60), |evidence| async move {
            for n in 0..20 {
                sleep(millis(500)).await;
                evidence.progress(format!("step {n}"));
            }
            pending::<()>().await
        })
        .expect("started");
    assert!(matches!(
        handle.outcome().await,
        Err(LeaseError::Intervened { .. })
    ));
    let request = rig
        .evaluator
        .requests()
        .pop()
        .expect("the evaluator was asked");
    let phi = request.evidence.phi.expect("phi shown to the evaluator");
    assert!(phi >= 8.0, "asked with phi {phi}");
    assert_eq!(request.evidence.count, 20);
    assert_eq!(request.evidence.last_note.as_deref(), Some("step 19"));
    // tool_call accrual: 10 s acceptable pause on top of a 500 ms mean.
    let silent_for = begun.elapsed() - secs(10);
    assert!(
        silent_for > secs(10) && silent_for < secs(20),
        "silent for {silent_for:?}"
    );
    // Twenty reports, one every 500 ms, stored as at most one `progress`
    // event a second (and one when the operation ended), which say all
    // twenty between them.
    let reports: Vec<u64> = rig
        .events
        .events()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Progress { reports, .. } => Some(reports),
            _ => None,
        })
        .collect();
    assert!(reports.len() <= 11, "{} progress events", reports.len());
    assert_eq!(reports.iter().sum::<u64>(), 20);
}

#[tokio::test(start_paused = true)]
async fn evaluator_is_shown_kind_subject_renewals_evidence_and_transcript_tail() {
    let rig = rig(config(2, 10), Some(ScriptedEvaluator::always("INTERVENE"))).await;
    let tail = vec![
        TranscriptMessage::new("user", "find the bug"),
        TranscriptMessage::new("assistant", "calling search"),
    ];
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10).with_transcript_tail(tail.clone()), |_| {
            pending::<()>()
        })
        .expect("started");
    let _ = handle.outcome().await;
    let request = rig.evaluator.requests().pop().expect("asked");
    assert_eq!(request.kind, LeaseKind::ToolCall);
    assert_eq!(request.subject, "search");
    assert_eq!(request.renewals, 2);
    assert_eq!(request.max_renewals, 10);
    assert_eq!(request.run_id, RUN);
    assert_eq!(request.path, PATH);
    assert_eq!(&*request.transcript_tail, tail.as_slice());
}

#[tokio::test(start_paused = true)]
async fn verdict_record_has_the_full_audit_trail() {
    let evaluator = ScriptedEvaluator::new([Scripted::AnswerAfter(
        millis(1200),
        r#"{"verdict":"NUDGE","reason":"repeating itself","nudge":"try another query"}"#.into(),
    )]);
    let rig = rig(config(0, 10), Some(evaluator)).await;
    // One chunk, then ten seconds of silence: suspicious for a stream.
    let spec = LeaseSpec::new(LeaseKind::ModelStream, "chat", secs(10))
        .expect("valid")
        .in_run(RUN, "run/model_call:1");
    let handle = rig
        .leases()
        .supervise(spec, |evidence| async move {
            evidence.progress("first chunk");
            sleep(secs(15)).await;
        })
        .expect("started");
    let id = handle.id();
    handle.outcome().await.expect("completes");
    let record = rig.events.verdicts().into_iter().next().expect("a verdict");
    assert_eq!(record.lease_id, id);
    assert_eq!(record.lease_kind, LeaseKind::ModelStream);
    assert_eq!(record.subject, "chat");
    assert_eq!(record.renewals, 0);
    assert_eq!(record.evidence.count, 1);
    assert_eq!(record.evidence.last_progress_age_ms, Some(10_000));
    assert!(record.evidence.phi.is_some_and(|phi| phi >= 8.0));
    assert_eq!(record.verdict, Verdict::Nudge);
    assert_eq!(record.reason, "repeating itself");
    assert_eq!(record.nudge.as_deref(), Some("try another query"));
    assert_eq!(record.decided_by, DecidedBy::Evaluator);
    let usage = record.evaluator.expect("evaluator usage");
    assert_eq!(usage.latency_ms, 1200);
    assert_eq!(
        (usage.cost.input_tokens, usage.cost.output_tokens),
        (100, 20)
    );
    assert_eq!(usage.consumer, WATCHDOG_CONSUMER);
    assert_eq!(usage.consumer, "engine.watchdog");
    // Serialized as the event stream carries it.
    let event = rig
        .events
        .events()
        .into_iter()
        .find(|e| e.kind.name() == "verdict")
        .expect("event");
    let json = serde_json::to_value(&event).expect("serializes");
    assert_eq!(json["kind"], "verdict");
    assert_eq!(json["decided_by"], "evaluator");
    assert_eq!(json["verdict"], "NUDGE");
    assert_eq!(json["evaluator"]["consumer"], "engine.watchdog");
}

#[tokio::test(start_paused = true)]
async fn slow_evaluation_does_not_delay_another_lease() {
    // Lease A's evaluation takes 10 s; lease B expires 1 s after A and must
    // get its verdict at once.
    let evaluator = ScriptedEvaluator::new([
        Scripted::AnswerAfter(
            secs(10),
            r#"{"verdict":"INTERVENE","reason":"slow A","nudge":null}"#.into(),
        ),
        Scripted::verdict("INTERVENE", "fast B", ""),
    ]);
    let mut config = config(0, 10);
    config.watchdog.evaluator_timeout = secs(15);
    let rig = rig(config, Some(evaluator)).await;
    let begun = Instant::now();
    let a = rig
        .leases()
        .supervise(spec(secs(1), 10), |_| pending::<()>())
        .expect("started");
    let b = rig
        .leases()
        .supervise(spec(secs(2), 10), |_| pending::<()>())
        .expect("started");
    assert_eq!(
        b.outcome().await,
        Err(LeaseError::Intervened {
            reason: "fast B".into()
        })
    );
    assert_eq!(begun.elapsed(), secs(2), "B waited for A's evaluation");
    assert_eq!(
        a.outcome().await,
        Err(LeaseError::Intervened {
            reason: "slow A".into()
        })
    );
    assert_eq!(begun.elapsed(), secs(11));
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_only_asks_the_evaluator_and_answers_direct_assessments() {
    // The watchdog as a plain RPC, the way the benchmark and other
    // supervisors use it. It decides nothing itself: an expiry that
    // reaches it is one its lease's policy left to the evaluator, so even
    // a first expiry (which the ladder would renew in the lease actor) is
    // the evaluator's to answer.
    let events = RecordingSink::new();
    let evaluator = ScriptedEvaluator::always("INTERVENE");
    let start = |evaluator: Option<ScriptedEvaluator>| {
        let events = events.clone();
        async move {
            WatchdogActor::start(WatchdogArgs {
                prices: Default::default(),
                config: WatchdogConfig::default(),
                evaluator: evaluator.map(|e| Arc::new(e) as Arc<dyn Evaluator>),
                events: Arc::new(events),
            })
            .await
            .expect("started")
        }
    };
    let spec = spec(secs(1), 10);
    let terms = LeaseTerms::new(LeaseKind::ToolCall);
    let expiry = |renewals| LeaseExpiry {
        meta: Arc::new(LeaseMeta::new(LeaseId(7), &spec, &terms)),
        renewals,
        counted: renewals,
        max_renewals: 10,
        evidence_renewals: 0,
        evidence: EvidenceSummary::default(),
        stream_tail: None,
        early: false,
    };
    let judged = start(Some(evaluator.clone())).await;
    let answer = WatchdogActor::assess(&judged, expiry(0)).await;
    assert_eq!(
        (answer.verdict, answer.decided_by),
        (Verdict::Intervene, DecidedBy::Evaluator)
    );
    assert_eq!(evaluator.calls(), 1);

    let watchdog = start(None).await;
    let breaker = WatchdogActor::assess(&watchdog, expiry(0)).await;
    assert_eq!(
        (breaker.verdict, breaker.decided_by),
        (Verdict::Renew, DecidedBy::Breaker)
    );
    watchdog.stop(None);
    sleep(millis(10)).await;
    // A stopped watchdog still never leaves a lease without an answer.
    let gone = WatchdogActor::assess(&watchdog, expiry(5)).await;
    assert_eq!(
        (gone.verdict, gone.decided_by),
        (Verdict::Renew, DecidedBy::Breaker)
    );
}

// ---------------------------------------------------------------------------
// Evidence earns renewals, not immunity (`watchdog_streams`).
// ---------------------------------------------------------------------------

const LOOP: &str = "Let me look at the failing test once more.";

/// A streaming model call of `turn` under a 2 s model-stream lease with a
/// cap of 30, as the model-call actor runs it.
fn stream(rig: &Rig, turn: Turn) -> LeaseHandle<Result<ModelReply, ModelError>> {
    stream_with(rig, turn, None)
}

fn stream_with(
    rig: &Rig,
    turn: Turn,
    evidence_renewals: Option<u32>,
) -> LeaseHandle<Result<ModelReply, ModelError>> {
    let model = ScriptedModel::new().script("run", [turn]);
    let request = ModelRequest {
        max_tokens: None,
        traceparent: None,
        messages: vec![ChatMessage::user("fix the failing test")],
        tools: Vec::new(),
        stream: true,
        consumer: "run".into(),
    };
    let mut spec = LeaseSpec::new(LeaseKind::ModelStream, "chat", secs(2))
        .expect("valid spec")
        .with_max_renewals(30)
        .in_run(RUN, PATH);
    if let Some(evidence_renewals) = evidence_renewals {
        spec = spec.with_terms(Arc::new(
            LeaseTerms::new(LeaseKind::ModelStream)
                .with_max_renewals(30)
                .with_evidence_renewals(evidence_renewals),
        ));
    }
    rig.leases()
        .supervise(spec, move |evidence| model.complete(request, evidence))
        .expect("started")
}

#[tokio::test(start_paused = true)]
async fn a_looping_stream_reaches_the_evaluator_with_its_tail_as_soon_as_it_repeats_itself() {
    // The same sentence every 300 ms, forever: alive, and going nowhere.
    // Its repetition, measured as it streams, makes the evidence
    // suspicious as soon as the tail repeats itself: the lease is judged
    // then (early, past the ladder), and the evaluator, shown the tail, can
    // stop it either way.
    for (verdict, stopped_as) in [("INTERVENE", "intervened"), ("ESCALATE", "escalated")] {
        let rig = rig(config(2, 30), Some(ScriptedEvaluator::always(verdict))).await;
        let begun = Instant::now();
        let handle = stream(&rig, Turn::looping(LOOP, millis(300)));
        let outcome = handle.outcome().await;
        match verdict {
            "INTERVENE" => assert!(matches!(outcome, Err(LeaseError::Intervened { .. }))),
            _ => assert!(matches!(outcome, Err(LeaseError::Escalated { .. }))),
        }
        assert_eq!(rig.events.count(stopped_as), 1);
        // Six sentences in, before the first expiry (2 s), let alone the
        // cap's 62 s.
        assert_eq!(begun.elapsed(), millis(1_800));
        let requests = rig.evaluator.requests();
        assert_eq!(requests.len(), 1);
        let request = &requests[0];
        assert_eq!(request.renewals, 0);
        assert!(rig.events.verdicts().iter().all(|v| v.early));
        let repetition = request.evidence.repetition.expect("a repetition signal");
        assert!(repetition > 0.5, "repetition {repetition}");
        let phi = request.evidence.phi.expect("evidence");
        assert!(phi < 8.0, "a live stream looked dead: phi {phi}");
        let tail = request.stream_tail.as_deref().expect("the tail is shown");
        assert!(tail.contains(LOOP), "tail {tail:?}");
        assert!(tail.len() <= leasehold_actors::TAIL_BYTES);
        let verdicts = rig.events.verdicts();
        assert_eq!(
            verdicts.last().map(|v| v.decided_by),
            Some(DecidedBy::Evaluator)
        );
        assert!(
            !verdicts.iter().any(|v| v.decided_by == DecidedBy::Evidence),
            "a looping stream was renewed on its evidence"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_varied_stream_is_renewed_on_evidence_exactly_evidence_renewals_times_in_a_row() {
    // Different words every 300 ms: fresh, not repetitive. After the two
    // free renewals it is renewed on evidence 3 times in a row (the
    // default), then the evaluator is asked anyway; its RENEW starts a new
    // streak.
    let rig = rig(config(2, 30), Some(ScriptedEvaluator::always("RENEW"))).await;
    assert_eq!(WatchdogConfig::default().evidence_renewals, 3);
    let handle = stream(&rig, Turn::rambling(millis(300)));
    sleep(millis(28_100)).await;
    let deciders: Vec<_> = rig.events.verdicts().iter().map(|v| v.decided_by).collect();
    use DecidedBy::{Evaluator as A, Evidence as E, Ladder as L};
    assert_eq!(deciders, [L, L, E, E, E, A, E, E, E, A, E, E, E, A]);
    let requests = rig.evaluator.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(request.evidence_renewals, 3);
        let repetition = request.evidence.repetition.expect("a repetition signal");
        assert!(repetition < 0.1, "varied text scored {repetition}");
        let tail = request.stream_tail.as_deref().expect("the tail is shown");
        assert!(tail.len() > 1_000, "tail of {} bytes", tail.len());
    }
    assert_eq!(
        [
            requests[0].renewals,
            requests[1].renewals,
            requests[2].renewals
        ],
        [0, 0, 0],
        "renewals in doubt, which the cap counts: none while the text keeps arriving"
    );
    drop(handle);
}

#[tokio::test(start_paused = true)]
async fn a_leases_own_evidence_renewals_override_the_watchdogs() {
    // A flow's `leases.evidence_renewals = 1` reaches each lease it starts.
    let rig = rig(config(2, 30), Some(ScriptedEvaluator::always("RENEW"))).await;
    let handle = stream_with(&rig, Turn::rambling(millis(300)), Some(1));
    sleep(millis(12_100)).await;
    let deciders: Vec<_> = rig.events.verdicts().iter().map(|v| v.decided_by).collect();
    use DecidedBy::{Evaluator as A, Evidence as E, Ladder as L};
    assert_eq!(deciders, [L, L, E, A, E, A]);
    drop(handle);
}
