//! Each endpoint's pace, learned and used: a lease seeded with what earlier
//! calls of its pace key showed judges a new silence against it, and is
//! expired early — before its period ends — once that silence is
//! suspicious; a lease with no history keeps its period. On paused time.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use leasehold_actors::{
    Evidence, LeaseError, LeaseHandle, PaceBook, PaceMode, Supervision, SupervisionConfig,
    VerdictRecord, prelude::*, testing::ScriptedEvaluator,
};
use tokio::time::{Instant, sleep};

const KEY: &str = "model_stream:model fast at http://127.0.0.1/v1";

struct Rig {
    supervision: Supervision,
    events: leasehold_actors::testing::RecordingSink,
    evaluator: ScriptedEvaluator,
}

/// A 30 s stream lease, two free renewals, an evaluator that intervenes.
async fn rig(policy: PolicyName) -> Rig {
    let events = leasehold_actors::testing::RecordingSink::new();
    let evaluator = ScriptedEvaluator::always("INTERVENE");
    let mut config = SupervisionConfig::default();
    config.watchdog.free_renewals = 2;
    config.watchdog.policy = policy.into();
    let supervision = Supervision::start(
        config,
        Some(Arc::new(evaluator.clone())),
        Arc::new(events.clone()),
    )
    .await
    .expect("supervision starts");
    Rig {
        supervision,
        events,
        evaluator,
    }
}

fn spec(key: Option<&str>) -> LeaseSpec {
    LeaseSpec::new(LeaseKind::ModelStream, "model", secs(30))
        .expect("a valid lease")
        .with_max_renewals(10)
        .with_pace_key(key.map(str::to_owned))
        .in_run("run-pace", "run/model_call:1")
}

/// A stream: `chunks` chunks `every` apart after `first`, then, if `hang`,
/// silence for good.
fn stream(
    rig: &Rig,
    key: Option<&str>,
    first: Duration,
    every: Duration,
    chunks: u32,
    hang: bool,
) -> LeaseHandle<()> {
    stream_with(rig, key, PaceMode::Learn, (first, every, chunks), hang)
}

/// [`stream`] under the pace mode `mode`.
fn stream_with(
    rig: &Rig,
    key: Option<&str>,
    mode: PaceMode,
    (first, every, chunks): (Duration, Duration, u32),
    hang: bool,
) -> LeaseHandle<()> {
    rig.supervision
        .leases
        .supervise(
            spec(key).with_pace_mode(mode),
            move |evidence: Evidence| async move {
                sleep(first).await;
                for _ in 0..chunks {
                    evidence.observe_text("token ");
                    sleep(every).await;
                }
                if hang {
                    std::future::pending::<()>().await;
                }
            },
        )
        .expect("started")
}

fn last_verdict(rig: &Rig) -> VerdictRecord {
    rig.events.verdicts().pop().expect("a verdict")
}

#[tokio::test(start_paused = true)]
async fn a_pace_learned_from_one_call_judges_the_next_calls_silence_before_its_period_ends() {
    let rig = rig(PolicyName::LEASEHOLD).await;
    // A fast model: its first chunk after 200 ms, then one every 50 ms.
    let learned = stream(&rig, Some(KEY), millis(200), millis(50), 40, false);
    learned.outcome().await.expect("the stream ends by itself");
    let book: &PaceBook = &rig.supervision.paces;
    let pace = book.get(KEY).expect("the call taught its key");
    let interval = pace.interval.expect("intervals");
    assert!((interval.mean_ms - 50.0).abs() < 1.0, "{pace:?}");
    let first = pace.first_item.expect("a first item");
    assert!((first.mean_ms - 200.0).abs() < 1.0, "{pace:?}");

    // The next call of the same key streams ten chunks, then falls silent
    // for good. Judged against 50 ms, the silence is suspicious within
    // seconds: the lease expires early, past the ladder, and the
    // evaluator's INTERVENE cuts it — long before the 30 s period.
    let begun = Instant::now();
    let hung = stream(&rig, Some(KEY), millis(200), millis(50), 10, true);
    let outcome = hung.outcome().await;
    assert!(
        matches!(outcome, Err(LeaseError::Intervened { .. })),
        "{outcome:?}"
    );
    let took = begun.elapsed();
    assert!(took < secs(6), "the hang was found after {took:?}");
    let verdict = last_verdict(&rig);
    assert!(verdict.early, "{verdict:?}");
    assert_eq!(verdict.renewals, 0, "{verdict:?}");
    assert_eq!(verdict.decided_by, DecidedBy::Evaluator, "{verdict:?}");
    assert!(
        verdict.evidence.phi.is_some_and(|phi| phi >= 8.0),
        "{verdict:?}"
    );
    assert_eq!(rig.evaluator.calls(), 1);
    // A call cut by its lease teaches nothing.
    assert_eq!(book.get(KEY).map(|p| p.calls), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_silent_start_is_judged_against_the_learned_time_to_a_first_chunk() {
    let rig = rig(PolicyName::LEASEHOLD).await;
    let learned = stream(&rig, Some(KEY), millis(300), millis(50), 20, false);
    learned.outcome().await.expect("the stream ends by itself");
    // The endpoint is wedged: nothing at all comes back.
    let begun = Instant::now();
    let silent = stream(&rig, Some(KEY), secs(3600), millis(50), 0, true);
    let outcome = silent.outcome().await;
    assert!(
        matches!(outcome, Err(LeaseError::Intervened { .. })),
        "{outcome:?}"
    );
    assert!(
        begun.elapsed() < secs(6),
        "found after {:?}",
        begun.elapsed()
    );
    let verdict = last_verdict(&rig);
    assert!(verdict.early && verdict.evidence.count == 0, "{verdict:?}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_models_normal_pauses_raise_no_suspicion_and_no_history_keeps_the_period() {
    let rig = rig(PolicyName::LEASEHOLD).await;
    // A slow model: a chunk every 5 s. Learned, its next call's 5 s pauses
    // are normal: no early expiry, no evaluator call.
    let slow = "model_stream:model slow";
    let learned = stream(&rig, Some(slow), secs(5), secs(5), 4, false);
    learned.outcome().await.expect("ends by itself");
    let again = stream(&rig, Some(slow), secs(5), secs(5), 4, false);
    again.outcome().await.expect("ends by itself");
    assert!(
        rig.events.verdicts().is_empty(),
        "{:?}",
        rig.events.verdicts()
    );

    // With no history (no pace key), a hang waits for the period and the
    // ladder, as before.
    let begun = Instant::now();
    let cold = stream(&rig, None, millis(200), millis(50), 10, true);
    let outcome = cold.outcome().await;
    assert!(matches!(outcome, Err(LeaseError::Intervened { .. })));
    assert!(begun.elapsed() >= secs(90), "{:?}", begun.elapsed());
    assert!(rig.events.verdicts().iter().all(|v| !v.early));
    assert_eq!(rig.evaluator.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_baseline_policy_never_expires_early() {
    let rig = rig(PolicyName::DEADLINE).await;
    let learned = stream(&rig, Some(KEY), millis(200), millis(50), 40, false);
    // Under a deadline, the 2.2 s stream ends within its period.
    learned.outcome().await.expect("ends by itself");
    assert!(rig.supervision.paces.get(KEY).is_some());
    let begun = Instant::now();
    let hung = stream(&rig, Some(KEY), millis(200), millis(50), 10, true);
    let outcome = hung.outcome().await;
    assert!(matches!(outcome, Err(LeaseError::Intervened { .. })));
    assert_eq!(begun.elapsed().as_secs(), 30, "the deadline is its period");
    assert!(!last_verdict(&rig).early);
}

#[tokio::test(start_paused = true)]
async fn a_lease_with_pace_off_neither_uses_nor_teaches_the_learned_pace() {
    let rig = rig(PolicyName::LEASEHOLD).await;
    stream(&rig, Some(KEY), millis(200), millis(50), 40, false)
        .outcome()
        .await
        .expect("ends by itself");
    let learned = rig.supervision.paces.get(KEY).expect("learned");
    // Off: ten chunks, then silence; with no pace and too few items of its
    // own, the period and the ladder are its bound, as for a cold call.
    let begun = Instant::now();
    let outcome = stream_with(
        &rig,
        Some(KEY),
        PaceMode::Off,
        (millis(200), millis(50), 10),
        true,
    )
    .outcome()
    .await;
    assert!(matches!(outcome, Err(LeaseError::Intervened { .. })));
    assert!(begun.elapsed() >= secs(90), "{:?}", begun.elapsed());
    assert!(rig.events.verdicts().iter().all(|v| !v.early));
    // And a call that ends teaches nothing.
    stream_with(&rig, Some(KEY), PaceMode::Off, (secs(2), secs(1), 5), false)
        .outcome()
        .await
        .expect("ends by itself");
    assert_eq!(rig.supervision.paces.get(KEY), Some(learned));
}

#[tokio::test(start_paused = true)]
async fn a_lease_with_pace_reset_forgets_the_learned_pace_and_learns_it_anew() {
    let rig = rig(PolicyName::LEASEHOLD).await;
    // The endpoint used to be slow: a chunk every 2 s.
    for _ in 0..3 {
        stream(&rig, Some(KEY), secs(2), secs(2), 5, false)
            .outcome()
            .await
            .expect("ends by itself");
    }
    assert_eq!(rig.supervision.paces.get(KEY).map(|p| p.calls), Some(3));
    // A new model behind it streams every 50 ms; the run resets its pace.
    stream_with(
        &rig,
        Some(KEY),
        PaceMode::Reset,
        (millis(100), millis(50), 40),
        false,
    )
    .outcome()
    .await
    .expect("ends by itself");
    let pace = rig.supervision.paces.get(KEY).expect("learned anew");
    assert_eq!(pace.calls, 1, "{pace:?}");
    let interval = pace.interval.expect("intervals").mean_ms;
    assert!((interval - 50.0).abs() < 1.0, "{pace:?}");
    // Within the same run (lease actor), a second reset lease does not
    // forget what the first just learned.
    stream_with(
        &rig,
        Some(KEY),
        PaceMode::Reset,
        (millis(100), millis(50), 40),
        false,
    )
    .outcome()
    .await
    .expect("ends by itself");
    assert_eq!(rig.supervision.paces.get(KEY).map(|p| p.calls), Some(2));
}
