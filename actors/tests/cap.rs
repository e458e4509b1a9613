//! Rule 13: the cap bounds doubt, not progress. On paused time.

mod common;

use std::future::pending;

use common::*;
use leasehold_actors::{
    MAX_CAP_CHECKPOINTS,
    prelude::*,
    testing::{Scripted, ScriptedEvaluator},
};
use tokio::time::{Instant, sleep};

fn deciders(rig: &Rig) -> Vec<DecidedBy> {
    rig.events.verdicts().iter().map(|v| v.decided_by).collect()
}

/// server-everything's long-running operation, as leasehold saw it: 30
/// progress notifications of a total of 30, one a second.
async fn long_running_operation(evidence: Evidence) -> &'static str {
    for step in 1..=30 {
        sleep(secs(1)).await;
        evidence.progress_value(f64::from(step), Some(30.0), format!("{step} of 30"));
    }
    "done"
}

#[tokio::test(start_paused = true)]
async fn progress_toward_a_known_total_is_not_counted_by_the_cap() {
    // The default cap (10) under a 2 s lease: the operation outlives 15
    // periods, every one after the ladder renewed on progress.
    let rig = rig(config(2, 10), Some(ScriptedEvaluator::always("INTERVENE"))).await;
    let begun = Instant::now();
    let handle = rig
        .leases()
        .supervise(spec(secs(2), 10), long_running_operation)
        .expect("started");
    assert_eq!(handle.outcome().await, Ok("done"));
    assert_eq!(begun.elapsed(), secs(30), "one attempt, never restarted");
    assert_eq!(rig.evaluator.calls(), 0, "progress needs no judge");
    let by = deciders(&rig);
    // Expiries at 2, 4, … 28 s, and perhaps one at 30 s, the instant the
    // operation ends.
    assert!((14..=15).contains(&by.len()), "{by:?}");
    assert_eq!(&by[..2], [DecidedBy::Ladder, DecidedBy::Ladder]);
    assert!(by[2..].iter().all(|d| *d == DecidedBy::Progress), "{by:?}");
    assert_eq!(rig.events.count("renewal_cap_reached"), 0);
}

#[tokio::test(start_paused = true)]
async fn progress_with_no_total_is_doubt_and_the_cap_ends_it() {
    let rig = rig(config(2, 4), None).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(2), 4), |evidence| async move {
            for step in 1.. {
                sleep(secs(1)).await;
                evidence.progress_value(f64::from(step), None, "on and on");
            }
            "never"
        })
        .expect("started");
    // Advancing progress renews, but without a total nothing bounds it: the
    // cap counts those renewals, and its checkpoints run out.
    let error = handle.outcome().await.expect_err("capped");
    assert!(
        matches!(error, LeaseError::RenewalCapReached { .. }),
        "{error}"
    );
    let by = deciders(&rig);
    assert_eq!(
        by.iter().filter(|d| **d == DecidedBy::Checkpoint).count(),
        MAX_CAP_CHECKPOINTS as usize,
        "{by:?}"
    );
    assert_eq!(by.last(), Some(&DecidedBy::Cap));
}

/// A stream that sends text every 100 ms for `secs` seconds, each chunk
/// new words.
async fn streaming_answer(evidence: Evidence, secs_long: u64) -> &'static str {
    let chunks = secs_long * 10;
    for n in 0..chunks {
        sleep(millis(100)).await;
        evidence.observe_text(&format!(" word{n} another{n} third{n}"));
    }
    "answered"
}

fn stream_spec() -> LeaseSpec {
    LeaseSpec::new(LeaseKind::ModelStream, "answer", secs(1))
        .expect("spec")
        .with_max_renewals(10)
        .in_run(RUN, PATH)
}

#[tokio::test(start_paused = true)]
async fn an_answer_streaming_at_its_pace_is_not_counted_by_the_cap() {
    // A 1 s lease over a 60 s answer: 60 expiries. The evaluator is still
    // asked after every three renewals on evidence alone (rule 4: text can
    // loop); but every renewal of an expiry whose tokens keep arriving is on
    // strong evidence, whoever decides it, and the cap of 10 counts none.
    let rig = rig(config(2, 10), Some(ScriptedEvaluator::always("RENEW"))).await;
    let begun = Instant::now();
    let handle = rig
        .leases()
        .supervise(stream_spec(), |evidence| streaming_answer(evidence, 60))
        .expect("started");
    assert_eq!(handle.outcome().await, Ok("answered"));
    assert_eq!(begun.elapsed(), secs(60));
    let by = deciders(&rig);
    assert!(
        by.contains(&DecidedBy::Evaluator),
        "rule 4 still holds: {by:?}"
    );
    assert!(!by.contains(&DecidedBy::Checkpoint), "{by:?}");
    assert!(!by.contains(&DecidedBy::Cap), "{by:?}");
}

#[tokio::test(start_paused = true)]
async fn reaching_the_cap_while_the_evidence_is_fresh_is_a_checkpoint_not_a_restart() {
    // A worker silent for 10.5 s, then reporting notes — fresh evidence,
    // but not strong: no total bounds it. Ten expiries of silence reach the
    // cap of 10; at the next, notes are arriving: a checkpoint extends the
    // cap by max_renewals − free_renewals instead of restarting the work.
    let rig = rig(config(2, 10), Some(ScriptedEvaluator::always("RENEW"))).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), |evidence| async move {
            sleep(millis(10_500)).await;
            for n in 0..30 {
                sleep(millis(200)).await;
                evidence.progress(format!("page {n}"));
            }
            "done"
        })
        .expect("started");
    assert_eq!(handle.outcome().await, Ok("done"));
    let checkpoints: Vec<_> = rig
        .events
        .verdicts()
        .into_iter()
        .filter(|v| v.decided_by == DecidedBy::Checkpoint)
        .collect();
    assert!(!checkpoints.is_empty(), "{:?}", deciders(&rig));
    let reason = &checkpoints[0].reason;
    assert!(
        reason.contains("renewal cap 10 reached while the evidence is fresh"),
        "{reason}"
    );
    assert!(reason.contains("extended by 8 to 18"), "{reason}");
    assert!(!deciders(&rig).contains(&DecidedBy::Cap));
}

#[tokio::test(start_paused = true)]
async fn an_answer_whose_first_token_came_late_ends_its_doubt_when_tokens_arrive() {
    // The first token comes after 10.5 s: ten expiries of silence are
    // doubt and reach the cap of 10. At the next, tokens are arriving:
    // strong evidence ends the stretch of doubt, and the answer goes on.
    let rig = rig(config(2, 10), Some(ScriptedEvaluator::always("RENEW"))).await;
    let handle = rig
        .leases()
        .supervise(stream_spec(), |evidence| async move {
            sleep(millis(10_500)).await;
            streaming_answer(evidence, 40).await
        })
        .expect("started");
    assert_eq!(handle.outcome().await, Ok("answered"));
    let by = deciders(&rig);
    assert!(!by.contains(&DecidedBy::Cap), "{by:?}");
    assert!(!by.contains(&DecidedBy::Checkpoint), "{by:?}");
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_repeats_itself_is_doubt_and_is_capped() {
    let rig = rig(config(2, 3), None).await;
    let handle = rig
        .leases()
        .supervise(
            LeaseSpec::new(LeaseKind::ModelStream, "answer", secs(1))
                .expect("spec")
                .with_max_renewals(3)
                .in_run(RUN, PATH),
            |evidence| async move {
                loop {
                    sleep(millis(100)).await;
                    evidence.observe_text(" the same words again and again");
                }
            },
        )
        .expect("started");
    let error: LeaseError = handle.outcome().await.expect_err("capped");
    assert!(
        matches!(
            error,
            LeaseError::RenewalCapReached { .. } | LeaseError::Intervened { .. }
        ),
        "{error}"
    );
    let by = deciders(&rig);
    assert!(
        !by.contains(&DecidedBy::Checkpoint),
        "a loop earns no checkpoint: {by:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_operation_that_falls_silent_after_a_checkpoint_is_given_up_within_the_printed_bound() {
    // Cap 10, ladder 2, no evaluator (the breaker renews: the slowest way
    // to the cap). The operation converges for 40 s, then falls silent.
    let rig = rig(config(2, 10), None).await;
    let handle = rig
        .leases()
        .supervise(stream_spec(), |evidence| async move {
            streaming_answer(evidence, 40).await;
            pending::<&str>().await
        })
        .expect("started");
    let silent_from = Instant::now() + secs(40);
    let error = handle.outcome().await.expect_err("capped");
    assert!(
        matches!(error, LeaseError::RenewalCapReached { .. }),
        "{error}"
    );
    // The printed bound of one attempt: (max_renewals + 1) × lease, plus
    // the evaluations (none here: the breaker answers at once).
    let silence = Instant::now().saturating_duration_since(silent_from);
    assert!(
        silence <= secs(11),
        "given up {silence:?} after falling silent"
    );
}

#[tokio::test(start_paused = true)]
async fn the_ceiling_bounds_an_operation_that_never_stops_converging() {
    let mut config = config(2, 10);
    config.lease.ceiling = secs(30);
    let rig = rig(config, Some(ScriptedEvaluator::always("RENEW"))).await;
    let begun = Instant::now();
    let handle = rig
        .leases()
        .supervise(spec(secs(2), 10), |evidence| async move {
            for step in 1..1_000_000u32 {
                sleep(millis(500)).await;
                evidence.progress_value(f64::from(step), Some(1e9), "still going");
            }
            "never"
        })
        .expect("started");
    let error = handle.outcome().await.expect_err("stopped at the ceiling");
    assert!(matches!(error, LeaseError::Escalated { .. }), "{error}");
    assert_eq!(begun.elapsed(), secs(30), "stopped at the ceiling itself");
    let last = rig.events.verdicts().pop().expect("the ceiling's verdict");
    assert_eq!(last.decided_by, DecidedBy::Cap);
    assert_eq!(last.verdict, Verdict::Escalate);
    assert!(last.reason.contains("ceiling reached"), "{}", last.reason);
    assert_eq!(rig.evaluator.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_lease_never_has_two_evaluator_calls_in_flight() {
    // The evaluator takes 5 s to answer a 1 s lease whose text turns
    // repetitive: the repetition wakes the lease while its first verdict is
    // still awaited, and no second call is made until that one answers.
    let evaluator = ScriptedEvaluator::new([Scripted::AnswerAfter(
        secs(5),
        r#"{"verdict": "RENEW", "reason": "slow judge", "nudge": null}"#.to_owned(),
    )]);
    let rig = rig(config(0, 10), Some(evaluator)).await;
    let handle = rig
        .leases()
        .supervise(
            LeaseSpec::new(LeaseKind::ModelStream, "answer", secs(1))
                .expect("spec")
                .with_max_renewals(10)
                .in_run(RUN, PATH),
            |evidence| async move {
                sleep(secs(3)).await;
                for _ in 0..200 {
                    sleep(millis(20)).await;
                    evidence.observe_text(" again and again and again");
                }
                "done"
            },
        )
        .expect("started");
    let _ = handle.outcome().await;
    assert!(rig.evaluator.calls() >= 1, "the evaluator was asked");
    let waits = rig.events.count("wait");
    assert!(
        rig.evaluator.calls() <= waits,
        "{} calls, {waits} waits",
        rig.evaluator.calls()
    );
    assert!(
        rig.evaluator.max_in_flight() <= 1,
        "{}",
        rig.evaluator.max_in_flight()
    );
}

#[tokio::test(start_paused = true)]
async fn a_verdict_on_a_silence_that_has_since_ended_cuts_nothing() {
    // A slow judge (3 s) that intervenes; a tool silent for 3.5 s, then
    // reporting progress toward its total until it is done.
    let evaluator = ScriptedEvaluator::new([Scripted::AnswerAfter(
        secs(3),
        r#"{"verdict": "INTERVENE", "reason": "silent", "nudge": null}"#.to_owned(),
    )]);
    let rig = rig(config(0, 10), Some(evaluator)).await;
    let handle = rig
        .leases()
        .supervise(spec(secs(1), 10), |evidence| async move {
            sleep(millis(3_500)).await;
            for step in 1..=30 {
                sleep(millis(200)).await;
                evidence.progress_value(f64::from(step), Some(30.0), "working");
            }
            "done"
        })
        .expect("started");
    assert_eq!(handle.outcome().await, Ok("done"), "a false kill");
    let verdicts = rig.events.verdicts();
    let asked = verdicts
        .iter()
        .position(|v| v.decided_by == DecidedBy::Evaluator)
        .expect("the evaluator was asked about the silence");
    assert_eq!(verdicts[asked].verdict, Verdict::Intervene);
    let overruled = &verdicts[asked + 1];
    assert_eq!(overruled.verdict, Verdict::Renew, "{overruled:?}");
    assert!(
        overruled.reason.contains("judged a silence that has ended"),
        "{}",
        overruled.reason
    );
    assert_eq!(rig.events.count("intervened"), 0);
}
