//! Each endpoint's pace, learned and used: a lease seeded with what earlier
//! runs' calls of its pace key showed judges a new silence against it, and
//! is expired early — before its period ends — once that silence is
//! suspicious; a lease with no history keeps its period. No run teaches
//! another to be impatient (rule 15). On paused time.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// A lease of a run of its own: every call here is another run's, unless
/// the test says otherwise.
fn spec(key: Option<&str>) -> LeaseSpec {
    static RUNS: AtomicU64 = AtomicU64::new(1);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    LeaseSpec::new(LeaseKind::ModelStream, "model", secs(30))
        .expect("a valid lease")
        .with_max_renewals(10)
        .with_pace_key(key.map(str::to_owned))
        .in_run(format!("run-pace-{run}"), "run/model_call:1")
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

/// Three runs' calls of `key` that end by themselves: enough for their pace
/// to judge other runs' ([`leasehold_actors::MIN_RUNS`]).
async fn teach(rig: &Rig, key: &str, (first, every, chunks): (Duration, Duration, u32)) {
    for _ in 0..leasehold_actors::MIN_RUNS {
        stream(rig, Some(key), first, every, chunks, false)
            .outcome()
            .await
            .expect("the stream ends by itself");
    }
}

#[tokio::test(start_paused = true)]
async fn a_pace_learned_from_three_runs_judges_the_next_calls_silence_before_its_period_ends() {
    let rig = rig(PolicyName::LEASEHOLD).await;
    // A fast model: its first chunk after 200 ms, then one every 50 ms.
    teach(&rig, KEY, (millis(200), millis(50), 40)).await;
    let book: &PaceBook = &rig.supervision.paces;
    let pace = book.get(KEY).expect("the calls taught their key");
    assert!(pace.trusted(), "{pace:?}");
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
    assert_eq!(book.get(KEY).map(|p| p.calls), Some(3));
}

#[tokio::test(start_paused = true)]
async fn one_or_two_runs_set_nobodys_pace() {
    let rig = rig(PolicyName::LEASEHOLD).await;
    for _ in 0..2 {
        stream(&rig, Some(KEY), millis(200), millis(50), 40, false)
            .outcome()
            .await
            .expect("ends by itself");
    }
    // Two runs taught the key: a third run's silence is judged by its
    // period and the ladder, as a cold call's is.
    let begun = Instant::now();
    let hung = stream(&rig, Some(KEY), millis(200), millis(50), 10, true);
    assert!(matches!(
        hung.outcome().await,
        Err(LeaseError::Intervened { .. })
    ));
    assert!(begun.elapsed() >= secs(90), "{:?}", begun.elapsed());
    assert!(rig.events.verdicts().iter().all(|v| !v.early));
}

#[tokio::test(start_paused = true)]
async fn a_silent_start_is_judged_against_the_learned_time_to_a_first_chunk() {
    let rig = rig(PolicyName::LEASEHOLD).await;
    teach(&rig, KEY, (millis(300), millis(50), 20)).await;
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
    // What the evaluator was told of the evidence is what the record says.
    let asked = rig.evaluator.requests().pop().expect("asked");
    assert_eq!(asked.evidence, verdict.evidence);
    assert!(
        verdict.evidence.phi.is_some(),
        "a silent start has a phi against the learned first item: {verdict:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_behind_another_at_its_endpoint_is_not_judged_by_the_first_item_it_waits_for() {
    let rig = rig(PolicyName::LEASEHOLD).await;
    let endpoint = "model fast at http://127.0.0.1/v1";
    teach(&rig, KEY, (millis(300), millis(50), 20)).await;
    let queued = |first: Duration| {
        rig.supervision
            .leases
            .supervise(
                spec(Some(KEY)).with_endpoint(Some(endpoint.to_owned())),
                move |evidence: Evidence| async move {
                    sleep(first).await;
                    for _ in 0..20 {
                        evidence.observe_text("token ");
                        sleep(millis(50)).await;
                    }
                },
            )
            .expect("started")
    };
    // Eight calls at once on a server that serves one at a time: each
    // waits for those ahead, far past the quiet 300 ms first chunk. Only
    // the first one is alone at the endpoint; none is expired early.
    let calls: Vec<_> = (0..8u64)
        .map(|n| queued(millis(300) + secs(2) * u32::try_from(n).unwrap_or(0)))
        .collect();
    for call in calls {
        call.outcome().await.expect("each ends by itself");
    }
    assert!(
        rig.events.verdicts().iter().all(|v| !v.early),
        "{:?}",
        rig.events.verdicts()
    );
    assert_eq!(rig.evaluator.calls(), 0);
    assert_eq!(rig.supervision.paces.in_flight(endpoint), 0);
    // And their waits taught the key no first item: it is still the
    // quiet one.
    let first = rig.supervision.paces.get(KEY).and_then(|p| p.first_item);
    assert!(first.is_some_and(|f| f.mean_ms < 400.0), "{first:?}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_models_normal_pauses_raise_no_suspicion_and_no_history_keeps_the_period() {
    let rig = rig(PolicyName::LEASEHOLD).await;
    // A slow model: a chunk every 5 s. Learned, its next call's 5 s pauses
    // are normal: no early expiry, no evaluator call.
    let slow = "model_stream:model slow";
    teach(&rig, slow, (secs(5), secs(5), 4)).await;
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
    // Under a deadline, each 2.2 s stream ends within its period.
    teach(&rig, KEY, (millis(200), millis(50), 40)).await;
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
    teach(&rig, KEY, (millis(200), millis(50), 40)).await;
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
async fn a_run_that_resets_its_pace_starts_cold_and_never_makes_another_run_impatient() {
    // The judge intervenes on anything it is asked.
    let rig = rig(PolicyName::LEASEHOLD).await;
    // Three runs whose first token comes after 8 s.
    teach(&rig, KEY, (secs(8), millis(50), 20)).await;
    // One run, with `reset`, that answers at once: it starts cold, and
    // teaches the key as one run among four.
    stream_with(
        &rig,
        Some(KEY),
        PaceMode::Reset,
        (millis(5), millis(50), 20),
        false,
    )
    .outcome()
    .await
    .expect("ends by itself");
    let pace = rig.supervision.paces.get(KEY).expect("kept");
    assert_eq!(pace.calls, 4, "{pace:?}");
    assert_eq!(pace.runs.len(), 4, "the book was not reset: {pace:?}");
    // The next 8 s run: no early expiry, no evaluator call.
    a_slow_run_is_never_judged(&rig).await;
    // Five more immediate runs of the same key: still judged by the slow
    // ones, a high quantile of the window.
    for _ in 0..5 {
        stream(&rig, Some(KEY), millis(5), millis(50), 20, false)
            .outcome()
            .await
            .expect("ends by itself");
    }
    a_slow_run_is_never_judged(&rig).await;
    assert_eq!(rig.evaluator.calls(), 0);
}

/// A run whose first token comes after 8 s completes with no verdict at
/// all: no early expiry.
async fn a_slow_run_is_never_judged(rig: &Rig) {
    stream(rig, Some(KEY), secs(8), millis(50), 20, false)
        .outcome()
        .await
        .expect("the 8 s run completes");
    assert!(
        rig.events.verdicts().is_empty(),
        "{:?}",
        rig.events.verdicts()
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_alone_when_it_began_is_not_judged_by_its_first_item_once_others_crowd_its_endpoint()
{
    // The first call of a burst registers alone, but the server serves
    // another first: while that one is in flight, the first call's wait is
    // the queue's, not its own.
    let rig = rig(PolicyName::LEASEHOLD).await;
    let endpoint = "model fast at http://127.0.0.1/v1";
    teach(&rig, KEY, (millis(300), millis(50), 20)).await;
    let call = |first: Duration, chunks: u32| {
        rig.supervision
            .leases
            .supervise(
                spec(Some(KEY)).with_endpoint(Some(endpoint.to_owned())),
                move |evidence: Evidence| async move {
                    sleep(first).await;
                    for n in 0..chunks {
                        evidence.observe_text(&format!(" w{n} x{n} y{n}"));
                        sleep(millis(50)).await;
                    }
                },
            )
            .expect("started")
    };
    let waiting = call(secs(8), 20);
    let served = call(millis(300), 160);
    let outcome = served.outcome().await;
    assert!(outcome.is_ok(), "{outcome:?}: {:#?}", rig.events.verdicts());
    let outcome = waiting.outcome().await;
    assert!(outcome.is_ok(), "{outcome:?}: {:#?}", rig.events.verdicts());
    assert!(
        rig.events.verdicts().iter().all(|v| !v.early),
        "{:?}",
        rig.events.verdicts()
    );
    assert_eq!(rig.evaluator.calls(), 0);
}
