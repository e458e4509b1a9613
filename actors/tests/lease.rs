//! The rules of "Lease semantics", one test each, on paused time.

mod common;

use std::future::pending;

use common::*;
use leasehold_actors::testing::actors::LeaseMsg;
use leasehold_actors::{
    prelude::*,
    testing::{RecordingSink, Scripted, ScriptedEvaluator},
};
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

#[tokio::test(start_paused = true)]
async fn expiry_alone_never_errors() {
    // 100 expiries, each answered RENEW by the evaluator: the operation's own
    // result comes back and nothing failed.
    let rig = rig(config(2, 200), Some(ScriptedEvaluator::always("RENEW"))).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 200), |_| async {
            sleep(millis(100_500)).await;
            42
        })
        .expect("started");
    assert_eq!(handle.outcome().await, Ok(42));
    assert_eq!(rig.events.count("wait"), 100);
    assert_eq!(rig.events.count("verdict"), 100);
    assert!(
        rig.events
            .verdicts()
            .iter()
            .all(|v| v.verdict == Verdict::Renew)
    );
    assert_eq!(
        rig.events.count("intervened") + rig.events.count("escalated"),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn each_expiry_emits_a_wait_event() {
    let rig = rig(config(2, 10), None).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(10), 10), |_| async { sleep(secs(35)).await })
        .expect("started");
    handle.outcome().await.expect("completes");
    let waits: Vec<_> = rig
        .events
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Wait {
                renewals, lease_ms, ..
            } => Some((e.at, renewals, lease_ms)),
            _ => None,
        })
        .collect();
    let start = rig.events.events().first().map_or(0, |e| e.at) - 10_000;
    let expected: Vec<_> = (0..3u32)
        .map(|n| (start + 10_000 * u64::from(n + 1), n, 10_000))
        .collect();
    assert_eq!(waits, expected);
}

#[tokio::test(start_paused = true)]
async fn renew_never_restarts_work() {
    let rig = rig(config(2, 50), Some(ScriptedEvaluator::always("RENEW"))).await;
    let starts = Starts::default();
    let counter = starts.clone();
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 50), move |_| async move {
            counter.start();
            sleep(millis(30_500)).await;
            "same call"
        })
        .expect("started");
    assert_eq!(handle.outcome().await.as_deref(), Ok("same call"));
    assert_eq!(rig.events.count("wait"), 30);
    assert_eq!(starts.count(), 1, "a renewal restarted the work");
}

#[tokio::test(start_paused = true)]
async fn operation_runs_in_its_own_task_beside_the_timer() {
    // The lease keeps time while the operation blocks its own task on a long
    // await: the timer is not inside the work.
    let rig = rig(config(2, 10), None).await;
    let begun = Instant::now();
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), |_| async { sleep(millis(2500)).await })
        .expect("started");
    sleep(millis(1500)).await;
    assert_eq!(
        rig.events.count("wait"),
        1,
        "no wait while the operation awaits"
    );
    handle.outcome().await.expect("completes");
    assert_eq!(begun.elapsed(), millis(2500));
}

#[tokio::test(start_paused = true)]
async fn nudge_queues_for_next_step_and_renews() {
    let evaluator = ScriptedEvaluator::new([
        Scripted::verdict("NUDGE", "it is looping", "stop retrying the same query"),
        Scripted::verdict("RENEW", "fine", ""),
    ]);
    let rig = rig(config(0, 10), Some(evaluator)).await;
    let nudges = NudgeQueue::new();
    let starts = Starts::default();
    let counter = starts.clone();
    let handle = rig
        .leases()
        .supervise(
            spec(secs(1), 10).with_nudges(nudges.clone()),
            move |_| async move {
                counter.start();
                sleep(millis(2500)).await;
                "answer"
            },
        )
        .expect("started");
    assert_eq!(handle.outcome().await, Ok("answer"));
    assert_eq!(starts.count(), 1, "NUDGE must renew, not restart");
    assert_eq!(rig.events.count("nudge_queued"), 1);
    assert_eq!(
        nudges.drain(),
        vec!["stop retrying the same query".to_owned()]
    );
}

#[tokio::test(start_paused = true)]
async fn nudge_reaches_only_the_next_step() {
    // A three-step loop: step 1's call gets a NUDGE while in flight. The
    // call itself never sees it; step 2 does; step 3 does not.
    let evaluator = ScriptedEvaluator::new([
        Scripted::verdict("NUDGE", "drifting", "focus on the failing test"),
        Scripted::verdict("RENEW", "fine", ""),
    ]);
    let rig = rig(config(0, 10), Some(evaluator)).await;
    let nudges = NudgeQueue::new();
    let mut seen_by_step = Vec::new();
    for step in 1..=3 {
        let context = nudges.drain();
        let queue = nudges.clone();
        let handle = rig
            .leases()
            .supervise(
                spec(secs(1), 10).with_nudges(nudges.clone()),
                move |_| async move {
                    sleep(millis(if step == 1 { 1500 } else { 500 })).await;
                    // What the in-flight call could observe of the queue: nothing
                    // was handed to it, and its own context was fixed at the start.
                    queue.len()
                },
            )
            .expect("started");
        let pending_at_end = handle.outcome().await.expect("step completes");
        seen_by_step.push((context, pending_at_end));
    }
    assert_eq!(
        seen_by_step[0].0,
        Vec::<String>::new(),
        "step 1 started before the nudge"
    );
    assert_eq!(
        seen_by_step[0].1, 1,
        "the nudge waits in the queue, not in the call"
    );
    assert_eq!(
        seen_by_step[1].0,
        vec!["focus on the failing test".to_owned()]
    );
    assert_eq!(
        seen_by_step[2].0,
        Vec::<String>::new(),
        "a nudge is seen by one step only"
    );
}

#[tokio::test(start_paused = true)]
async fn intervene_aborts_operation_and_surfaces_reason() {
    let evaluator = ScriptedEvaluator::new([Scripted::verdict(
        "INTERVENE",
        "no progress for 3 leases",
        "",
    )]);
    let rig = rig(config(2, 10), Some(evaluator)).await;
    let flag = DropFlag::default();
    let guard = flag.arm();
    let begun = Instant::now();
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), move |_| async move {
            let _guard = guard;
            pending::<()>().await
        })
        .expect("started");
    let outcome = handle.outcome().await;
    assert_eq!(
        outcome,
        Err(LeaseError::Intervened {
            reason: "no progress for 3 leases".into()
        })
    );
    assert_eq!(
        begun.elapsed(),
        secs(3),
        "two free renewals, then the evaluator"
    );
    settle().await;
    assert!(flag.dropped(), "the in-flight operation was not aborted");
    assert_eq!(rig.events.count("intervened"), 1);
}

#[tokio::test(start_paused = true)]
async fn escalate_aborts_operation_and_surfaces_reason() {
    let evaluator =
        ScriptedEvaluator::new([Scripted::verdict("ESCALATE", "about to wire money", "")]);
    let rig = rig(config(0, 10), Some(evaluator)).await;
    let flag = DropFlag::default();
    let guard = flag.arm();
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), move |_| async move {
            let _guard = guard;
            pending::<()>().await
        })
        .expect("started");
    match handle.outcome().await {
        Err(LeaseError::Escalated { reason, evidence }) => {
            assert_eq!(reason, "about to wire money");
            assert_eq!(evidence.count, 0, "a silent operation: {evidence:?}");
            assert_eq!(evidence.phi, None, "no evidence at all has no phi");
        }
        other => panic!("expected an escalation, got {other:?}"),
    }
    settle().await;
    assert!(flag.dropped(), "the in-flight operation was not aborted");
    assert_eq!(rig.events.count("escalated"), 1);
}

#[tokio::test(start_paused = true)]
async fn parent_cancellation_aborts_at_once_without_watchdog() {
    // Evaluator would intervene, and hang while doing so: neither matters.
    let rig = rig(
        config(2, 10),
        Some(ScriptedEvaluator::new([Scripted::Hang])),
    )
    .await;
    let parent = CancellationToken::new();
    let flag = DropFlag::default();
    let guard = flag.arm();
    let handle = rig
        .leases()
        .supervise(
            spec(secs(1), 10).with_parent(&parent),
            move |_| async move {
                let _guard = guard;
                pending::<()>().await
            },
        )
        .expect("started");
    sleep(millis(2500)).await; // two free renewals
    let verdicts_before = rig.events.count("verdict");
    let cancelled_at = Instant::now();
    parent.cancel();
    assert_eq!(handle.outcome().await, Err(LeaseError::Cancelled));
    assert_eq!(cancelled_at.elapsed(), millis(0), "cancellation waited");
    assert!(flag.dropped());
    sleep(secs(60)).await;
    assert_eq!(
        rig.evaluator.calls(),
        0,
        "cancellation consulted the evaluator"
    );
    assert_eq!(
        rig.events.count("verdict"),
        verdicts_before,
        "cancellation consulted the watchdog"
    );
    assert_eq!(rig.events.count("lease_cancelled"), 1);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_handle_cancels_the_operation() {
    let rig = rig(config(2, 10), None).await;
    let flag = DropFlag::default();
    let guard = flag.arm();
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), move |_| async move {
            let _guard = guard;
            pending::<()>().await
        })
        .expect("started");
    drop(handle);
    settle().await;
    assert!(flag.dropped());
    sleep(secs(10)).await;
    assert_eq!(
        rig.events.count("wait"),
        0,
        "a dropped operation kept its lease"
    );
}

#[tokio::test(start_paused = true)]
async fn renewal_cap_ends_with_its_error() {
    // No evaluator: the breaker renews for ever, so only the cap can stop it.
    let rig = rig(config(2, 3), None).await;
    let begun = Instant::now();
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 3), |_| pending::<()>())
        .expect("started");
    let error = handle.outcome().await.expect_err("capped");
    assert_eq!(error, LeaseError::RenewalCapReached { max_renewals: 3 });
    assert!(error.to_string().contains("max_renewals = 3"), "{error}");
    assert_eq!(
        begun.elapsed(),
        secs(4),
        "three renewals, then the fourth expiry cuts"
    );
    let last = rig.events.verdicts().pop().expect("a cap verdict");
    assert_eq!(last.decided_by, DecidedBy::Cap);
    assert_eq!(rig.events.count("renewal_cap_reached"), 1);
}

#[tokio::test(start_paused = true)]
async fn stale_timer_fire_is_ignored() {
    let rig = rig(config(5, 10), None).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), |_| async { sleep(millis(3500)).await })
        .expect("started");
    let id = handle.id();
    sleep(millis(1500)).await; // one expiry, renewed: generation is now 1
    assert_eq!(rig.events.count("wait"), 1);
    // A fire armed before the renewal arrives late.
    rig.leases()
        .actor()
        .send_message(LeaseMsg::Expired { id, generation: 0 })
        .expect("lease actor alive");
    settle().await;
    assert_eq!(
        rig.events.count("wait"),
        1,
        "a stale timer fire was acted on"
    );
    handle.outcome().await.expect("completes");
    assert_eq!(
        rig.events.count("wait"),
        3,
        "the live timer kept its schedule"
    );
}

#[tokio::test(start_paused = true)]
async fn expiry_fails_only_through_explicit_verdict_or_cap() {
    // Every evaluator failure mode in a row, and an operation that outlives
    // them all: none of them ends it.
    let evaluator = ScriptedEvaluator::new([
        Scripted::Fail("connection refused".into()),
        Scripted::Answer("I think it is fine".into()),
        Scripted::Hang,
        Scripted::Panic,
        Scripted::verdict("RENEW", "fine", ""),
    ]);
    let mut config = config(0, 10);
    config.watchdog.evaluator_timeout = millis(100);
    let rig = rig(config, Some(evaluator)).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), |_| async {
            sleep(secs(8)).await;
            "survived"
        })
        .expect("started");
    assert_eq!(handle.outcome().await, Ok("survived"));
    assert!(
        rig.events
            .verdicts()
            .iter()
            .all(|v| v.verdict == Verdict::Renew)
    );
}

#[tokio::test(start_paused = true)]
async fn completes_before_expiry_without_any_verdict() {
    let rig = rig(config(2, 10), None).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), |_| async { sleep(millis(999)).await })
        .expect("started");
    handle.outcome().await.expect("completes");
    sleep(secs(5)).await;
    assert_eq!(rig.events.count("wait") + rig.events.count("verdict"), 0);
}

#[tokio::test(start_paused = true)]
async fn panicking_operation_surfaces_panic_and_releases_its_lease() {
    let rig = rig(config(2, 10), None).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), |_| async {
            sleep(millis(1500)).await;
            panic!("tool crashed")
        })
        .expect("started");
    let outcome: Result<(), _> = handle.outcome().await;
    assert_eq!(
        outcome,
        Err(LeaseError::Panicked {
            message: "tool crashed".into()
        })
    );
    sleep(secs(10)).await;
    assert_eq!(
        rig.events.count("wait"),
        1,
        "the lease outlived its operation"
    );
}

#[tokio::test(start_paused = true)]
async fn many_leases_share_one_actor_independently() {
    let rig = rig(config(2, 10), None).await;
    let handles: Vec<_> = (1..=50u64)
        .map(|n| {
            rig.leases()
                .supervise(spec(secs(1), 10), move |_| async move {
                    sleep(millis(n * 100)).await;
                    n
                })
                .expect("started")
        })
        .collect();
    let mut results = Vec::new();
    for handle in handles {
        results.push(handle.outcome().await.expect("completes"));
    }
    assert_eq!(results, (1..=50).collect::<Vec<_>>());
    // Operations n > 10 expire once per whole second they run.
    let expected: u64 = (1..=50u64).map(|n| (n * 100 - 1) / 1000).sum();
    assert_eq!(u64::try_from(rig.events.count("wait")).ok(), Some(expected));
}

#[test]
fn zero_lease_duration_is_refused_naming_the_field() {
    let error = LeaseSpec::new(LeaseKind::ToolCall, "search", millis(0)).expect_err("refused");
    assert_eq!(error.field, "duration");
    let mut config = SupervisionConfig::default();
    config.lease.model_stream = millis(0);
    let error = config.validate().expect_err("refused");
    assert_eq!(error.field, "lease.model_stream");
    assert!(error.to_string().contains("lease.model_stream"), "{error}");
}

#[test]
fn free_renewals_above_max_renewals_is_refused() {
    let error = config(11, 10).validate().expect_err("refused");
    assert_eq!(error.field, "watchdog.free_renewals");
    assert!(
        error
            .to_string()
            .contains("at most lease.max_renewals (10)"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn supervision_refuses_bad_configuration_at_start() {
    let mut bad = SupervisionConfig::default();
    bad.watchdog.evaluator_timeout = millis(0);
    let error = Supervision::start(
        bad,
        None,
        std::sync::Arc::new(leasehold_actors::testing::RecordingSink::new()),
    )
    .await
    .expect_err("refused");
    assert!(
        error.to_string().contains("watchdog.evaluator_timeout"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn stopping_the_lease_actor_cancels_what_it_supervises() {
    // No operation outlives its supervision.
    let rig = rig(config(2, 10), None).await;
    let flag = DropFlag::default();
    let guard = flag.arm();
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), move |_| async move {
            let _guard = guard;
            pending::<()>().await
        })
        .expect("started");
    settle().await;
    rig.supervision.stop();
    assert_eq!(handle.outcome().await, Err(LeaseError::Cancelled));
    assert!(flag.dropped());
    sleep(millis(10)).await;
    let refused = rig.leases().supervise(spec(secs(1), 10), |_| async {});
    assert_eq!(refused.err(), Some(LeaseError::LeaseActorGone));
}

#[tokio::test(start_paused = true)]
async fn pause_stops_every_lease_clock_until_resume() {
    let rig = rig(config(2, 10), None).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(10), 10), |_| pending::<()>())
        .expect("started");
    sleep(secs(15)).await;
    assert_eq!(rig.events.count("wait"), 1);
    rig.leases()
        .actor()
        .send_message(LeaseMsg::Pause)
        .expect("alive");
    sleep(secs(3600)).await;
    assert_eq!(rig.events.count("wait"), 1, "a paused lease expired");
    rig.leases()
        .actor()
        .send_message(LeaseMsg::Resume)
        .expect("alive");
    sleep(millis(9_999)).await;
    assert_eq!(
        rig.events.count("wait"),
        1,
        "resume must give a fresh full period"
    );
    sleep(millis(2)).await;
    assert_eq!(rig.events.count("wait"), 2);
    drop(handle);
}

#[tokio::test(start_paused = true)]
async fn runs_sharing_a_lease_actor_pause_resume_drain_and_release_alone() {
    // Two runs' leases on one actor: pausing run A stops A's clocks only;
    // releasing A cancels A's operations only; each drains on its own.
    let rig = rig(config(2, 10), None).await;
    let a = rig.leases().clone().for_run("run-a");
    let b = rig.leases().clone().for_run("run-b");
    let in_run = |run: &str| spec(secs(10), 10).in_run(run, PATH);
    let (a_dropped, b_dropped) = (DropFlag::default(), DropFlag::default());
    let (a_flag, b_flag) = (a_dropped.arm(), b_dropped.arm());
    let a_call = a
        .supervise(in_run("run-a"), move |_| async move {
            let _flag = a_flag;
            pending::<()>().await
        })
        .expect("started");
    let b_call = b
        .supervise(in_run("run-b"), move |_| async move {
            let _flag = b_flag;
            pending::<()>().await
        })
        .expect("started");
    let waits = |run: &str| {
        rig.events
            .events()
            .iter()
            .filter(|e| *e.run_id == *run && e.kind.name() == "wait")
            .count()
    };
    a.pause();
    sleep(secs(15)).await;
    assert_eq!(
        (waits("run-a"), waits("run-b")),
        (0, 1),
        "only run A is paused"
    );
    a.resume();
    sleep(millis(10_001)).await;
    assert_eq!(
        (waits("run-a"), waits("run-b")),
        (1, 2),
        "run A's clocks run again, with a fresh period"
    );
    a.release();
    assert_eq!(a_call.outcome().await, Err(LeaseError::Cancelled));
    a.drained().await;
    assert!(a_dropped.dropped(), "run A's operation was cancelled");
    assert!(!b_dropped.dropped(), "run B's operation goes on");
    let drained_b = tokio::time::timeout(secs(1), b.drained()).await;
    assert!(drained_b.is_err(), "run B still holds its lease");
    drop(b_call);
    b.drained().await;
    assert!(b_dropped.dropped());
}

fn pause(rig: &Rig) {
    rig.leases()
        .actor()
        .send_message(LeaseMsg::Pause)
        .expect("alive");
}

fn resume(rig: &Rig) {
    rig.leases()
        .actor()
        .send_message(LeaseMsg::Resume)
        .expect("alive");
}

#[tokio::test(start_paused = true)]
async fn a_pause_does_not_age_the_evidence() {
    // Progress every 500 ms for 8 s, then quiet. Paused 250 ms after the
    // last item for an hour: the first expiry after the resume, a full
    // period later, sees evidence 10.25 s old, not an hour old.
    let rig = rig(config(20, 30), None).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(10), 30), |evidence| async move {
            for n in 0..16 {
                sleep(millis(500)).await;
                evidence.progress(format!("page {n}"));
            }
            pending::<()>().await
        })
        .expect("started");
    sleep(millis(8_250)).await;
    pause(&rig);
    sleep(secs(3600)).await;
    resume(&rig);
    sleep(millis(10_001)).await;
    let verdicts = rig.events.verdicts();
    assert_eq!(verdicts.len(), 1, "one expiry, a full period after resume");
    let evidence = &verdicts[0].evidence;
    assert_eq!(evidence.count, 16);
    assert_eq!(evidence.last_progress_age_ms, Some(10_250));
    let phi = evidence.phi.expect("there was evidence");
    assert!(
        phi < 8.0,
        "the pause made the evidence look dead: phi {phi}"
    );
    drop(handle);
}

/// An evaluator whose first answer, INTERVENE, comes 5 s after it is
/// asked; every later one is RENEW.
fn intervene_after_5s_then_renew() -> ScriptedEvaluator {
    ScriptedEvaluator::new([
        Scripted::AnswerAfter(
            secs(5),
            r#"{"verdict":"INTERVENE","reason":"stuck","nudge":null}"#.into(),
        ),
        Scripted::verdict("RENEW", "alive", ""),
    ])
}

/// The verdicts dropped so far, with why.
fn dropped_verdicts(events: &RecordingSink) -> Vec<(Verdict, String)> {
    events
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::VerdictDropped {
                verdict, reason, ..
            } => Some((verdict, reason)),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_verdict_that_arrives_during_a_pause_is_dropped_and_says_so() {
    // The evaluator is asked at the first expiry and answers INTERVENE 5 s
    // later, while the run is paused: the verdict must not act.
    let rig = rig(config(0, 10), Some(intervene_after_5s_then_renew())).await;
    let starts = Starts::default();
    let counter = starts.clone();
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), move |_| async move {
            counter.start();
            sleep(millis(19_500)).await;
            "finished"
        })
        .expect("started");
    sleep(millis(2_000)).await;
    assert_eq!(rig.evaluator.calls(), 1);
    pause(&rig);
    sleep(secs(10)).await;
    assert_eq!(
        dropped_verdicts(&rig.events),
        [(Verdict::Intervene, "the run is paused".to_owned())]
    );
    assert_eq!(rig.events.count("intervened"), 0);
    // On resume the lease gets a fresh period and is judged again.
    resume(&rig);
    sleep(millis(999)).await;
    assert_eq!(rig.evaluator.calls(), 1, "judged before a full period");
    sleep(millis(2)).await;
    assert_eq!(rig.evaluator.calls(), 2);
    assert_eq!(handle.outcome().await, Ok("finished"));
    assert_eq!(starts.count(), 1);
    assert_eq!(rig.events.count("verdict_dropped"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_verdict_on_an_expiry_judged_before_a_pause_is_dropped_after_it() {
    // Paused and resumed while the evaluation runs: the INTERVENE that
    // arrives after the resume answers an expiry from before the pause.
    let rig = rig(config(0, 10), Some(intervene_after_5s_then_renew())).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(10), 10), |_| async {
            sleep(secs(40)).await;
            "finished"
        })
        .expect("started");
    sleep(secs(11)).await;
    pause(&rig);
    sleep(secs(1)).await;
    resume(&rig);
    sleep(secs(5)).await;
    assert_eq!(rig.events.count("intervened"), 0);
    assert_eq!(
        dropped_verdicts(&rig.events),
        [(
            Verdict::Intervene,
            "the lease's period changed while the expiry was judged: the run was paused, or a person extended the lease".to_owned()
        )]
    );
    assert_eq!(handle.outcome().await, Ok("finished"));
}
