//! Durations have a ceiling: validation refuses any duration above
//! `MAX_DURATION` naming its key, and no duration an embedder passes
//! without validation reaches a panic — leases, renewals, backoff, the
//! watchdog's arithmetic — across the whole range of representable inputs,
//! on paused time.

mod common;

use std::future::pending;
use std::time::Duration;

use common::*;
use leasehold_actors::{
    AccrualConfig, ChildEnd, ChildInfo, ChildKind, EngineConfig, MAX_DURATION, RestartOnIntervene,
    RestartPolicy, SupervisionAction, SupervisionStrategy, check_duration, prelude::*,
};
use proptest::prelude::*;
use tokio::time::Instant;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Any duration, its extremes and the neighbourhood of the ceiling weighted
/// up so that every case meets them often.
fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(MAX_DURATION),
        Just(MAX_DURATION + Duration::from_nanos(1)),
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        (0..(2 * 365 * 86_400u64)).prop_map(Duration::from_secs),
        (0..100_000u64).prop_map(Duration::from_millis),
    ]
}

fn any_count() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0), Just(u32::MAX), any::<u32>(), 0..16u32]
}

fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(f64::MAX),
        Just(-0.0),
        any::<f64>(),
        0.0..4.0f64,
    ]
}

/// A paused, single-threaded runtime, as `#[tokio::test(start_paused)]`
/// builds, for one property case.
fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

/// Runs a hanging operation under a `lease` with a cap of 0 and checks that
/// it is ended by its first expiry, `lease` (clamped) after it started:
/// proof that the lease actor's timer task is alive.
async fn first_expiry_ends(leases: &Leases, lease: Duration) -> Duration {
    let started = Instant::now();
    let handle = leases
        .supervise(spec(lease, 0), |_| pending::<()>())
        .expect("started");
    // Paused time jumps to the next timer; a dead timer task leaves none
    // but this one, which then fails the test instead of hanging it.
    let outcome = tokio::time::timeout(MAX_DURATION * 2, handle.outcome())
        .await
        .expect("the lease expired: its timer task is alive");
    assert_eq!(
        outcome,
        Err(LeaseError::RenewalCapReached { max_renewals: 0 })
    );
    started.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_lease_longer_than_the_maximum_still_expires_and_is_judged() {
    // A lease of 1000 days through the API, without validation: tokio's
    // timer queue refuses deadlines past about 795 days, so before the
    // ceiling it panicked the timer task and the lease never expired.
    let rig = rig(no_ceiling(config(1, 1)), None).await;
    let started = Instant::now();
    let handle = rig
        .leases()
        .supervise(spec(DAY * 1000, 1), |_| pending::<()>())
        .expect("started");
    let outcome = tokio::time::timeout(DAY * 3000, handle.outcome())
        .await
        .expect("the lease expired");
    assert_eq!(
        outcome,
        Err(LeaseError::RenewalCapReached { max_renewals: 1 })
    );
    // Judged twice — a free renewal, then the cap — each after one clamped
    // period.
    assert_eq!(started.elapsed(), MAX_DURATION * 2);
    assert_eq!(rig.events.count("wait"), 2);
    let verdicts = rig.events.verdicts();
    assert_eq!(verdicts.len(), 2);
    assert_eq!(verdicts[0].decided_by, DecidedBy::Ladder);
    assert_eq!(verdicts[1].decided_by, DecidedBy::Cap);
    // The timer task survived: a short lease after it expires on time.
    assert_eq!(first_expiry_ends(rig.leases(), secs(5)).await, secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_lease_actor_alive_for_years_still_arms_its_timers() {
    // A timer queue that has not fired for 800 days refuses (panics on) any
    // deadline, however short: the queue is rebuilt around the present.
    let rig = rig(no_ceiling(config(0, 0)), None).await;
    assert_eq!(first_expiry_ends(rig.leases(), secs(1)).await, secs(1));
    tokio::time::advance(DAY * 800).await;
    assert_eq!(first_expiry_ends(rig.leases(), secs(1)).await, secs(1));
    // A lease armed before the jump is carried over by the rebuild.
    let long = rig
        .leases()
        .supervise(spec(DAY * 20, 0), |_| pending::<()>())
        .expect("started");
    tokio::time::advance(DAY * 400).await;
    assert_eq!(first_expiry_ends(rig.leases(), secs(1)).await, secs(1));
    assert_eq!(
        long.outcome().await,
        Err(LeaseError::RenewalCapReached { max_renewals: 0 })
    );
}

/// `config` with the longest ceiling there is: these leases are longer
/// than the default's four hours, and the cap is what they test.
fn no_ceiling(mut config: SupervisionConfig) -> SupervisionConfig {
    config.lease.ceiling = MAX_DURATION;
    config
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn leases_and_renewals_never_panic_whatever_the_durations(
        lease in any_duration(),
        work in any_duration(),
        max_renewals in any_count(),
        free_renewals in any_count(),
        ceiling in any_duration(),
    ) {
        let runtime = paused();
        runtime.block_on(async {
            // Ladder renewals only (no evaluator: the breaker renews), so
            // a huge cap would take ages of paused time: the work is
            // bounded instead, and the timer must survive whatever came.
            let rig = rig(config(0, 0), None).await;
            let started = Instant::now();
            // At most 20 periods of work: a lease of a nanosecond over a
            // year of work would be billions of expiries.
            let work = work.min(lease.min(MAX_DURATION) * 20);
            let spec = LeaseSpec::new(LeaseKind::ToolCall, "search", lease.max(Duration::from_nanos(1)))
                .expect("a positive lease")
                .with_terms(std::sync::Arc::new(
                    LeaseTerms::new(LeaseKind::ToolCall)
                        .with_max_renewals(max_renewals)
                        .with_free_renewals(free_renewals)
                        .with_ceiling(ceiling),
                ))
                .in_run(RUN, PATH);
            let handle = rig
                .leases()
                .supervise(spec, move |evidence| async move {
                    tokio::time::sleep(work).await;
                    evidence.observe();
                    "done"
                })
                .expect("started");
            let outcome = tokio::time::timeout(MAX_DURATION * 25, handle.outcome()).await;
            let outcome = outcome.expect("the operation or its lease ended");
            prop_assert!(
                matches!(
                    outcome,
                    Ok("done")
                        | Err(LeaseError::RenewalCapReached { .. } | LeaseError::Escalated { .. })
                ),
                "unexpected outcome {outcome:?}"
            );
            prop_assert!(started.elapsed() <= MAX_DURATION * 25);
            prop_assert_eq!(first_expiry_ends(rig.leases(), secs(3)).await, secs(3));
            Ok(())
        })?;
    }

    #[test]
    fn backoff_and_restarts_never_panic_and_stay_under_the_ceiling(
        window in any_duration(),
        backoff_initial in any_duration(),
        backoff_max in any_duration(),
        multiplier in any_f64(),
        jitter in any_f64(),
        max_restarts in any_count(),
        restart in any_count(),
        attempt in any_count(),
        seed in any::<u64>(),
        later in any_duration(),
    ) {
        let policy = RestartPolicy { max_restarts, window, backoff_initial, backoff_max, multiplier, jitter, on_exhausted: Default::default() };
        prop_assert!(policy.backoff(restart) <= MAX_DURATION);
        let mut strategy = RestartOnIntervene::with_seed(policy, seed);
        let child = ChildInfo {
            path: "run/step-1/search".to_owned(),
            kind: ChildKind::ToolCall,
            subject: "search".to_owned(),
            attempt,
        };
        let runtime = paused();
        runtime.block_on(async {
            let end = ChildEnd::Intervened { reason: "no progress".to_owned() };
            for now in [Instant::now(), Instant::now() + later.min(DAY * 365 * 100)] {
                if let SupervisionAction::Restart { after } = strategy.decide(&child, &end, now) {
                    prop_assert!(after <= MAX_DURATION);
                    // The agent sleeps for it: paused time makes it instant.
                    tokio::time::sleep(after).await;
                }
            }
            Ok(())
        })?;
    }

    #[test]
    fn accrual_arithmetic_never_panics(
        elapsed in any_duration(),
        mean in any_duration(),
        std_deviation in any_duration(),
        min_std_deviation in any_duration(),
        acceptable_pause in any_duration(),
        first_interval_estimate in any_duration(),
        threshold in any_f64(),
        gaps in proptest::collection::vec(any_duration(), 0..4),
    ) {
        let config = AccrualConfig { threshold, min_std_deviation, acceptable_pause, first_interval_estimate };
        let phi = config.phi(elapsed, mean, std_deviation);
        prop_assert!((0.0..=1000.0).contains(&phi), "phi {phi}");
        let runtime = paused();
        runtime.block_on(async {
            let evidence = Evidence::detached();
            for gap in gaps {
                tokio::time::advance(gap.min(DAY * 365)).await;
                evidence.observe();
            }
            let summary = evidence.summary(Instant::now() + elapsed.min(DAY * 365 * 100), &config);
            if let Some(phi) = summary.phi {
                prop_assert!((0.0..=1000.0).contains(&phi), "phi {phi}");
            }
            Ok(())
        })?;
    }

    #[test]
    fn configurations_above_the_ceiling_are_refused_naming_the_field(
        over in (1..u64::MAX / 2).prop_map(|n| MAX_DURATION + Duration::from_nanos(n)),
        field in 0..10usize,
    ) {
        let mut config = EngineConfig::default();
        let (name, slot): (&str, &mut Duration) = match field {
            0 => ("lease.model_stream", &mut config.supervision.lease.model_stream),
            1 => ("lease.model_blocking", &mut config.supervision.lease.model_blocking),
            2 => ("lease.tool_call", &mut config.supervision.lease.tool_call),
            3 => ("lease.worker_step", &mut config.supervision.lease.worker_step),
            4 => ("watchdog.evaluator_timeout", &mut config.supervision.watchdog.evaluator_timeout),
            5 => ("budget.evaluator_timeout", &mut config.budget.evaluator_timeout),
            6 => ("restart.window", &mut config.restart.window),
            7 => ("restart.backoff_max", &mut config.restart.backoff_max),
            8 => ("run_lease_ttl", &mut config.run_lease_ttl),
            _ => ("accrual.tool_call.acceptable_pause", &mut config.supervision.watchdog.accrual.tool_call.acceptable_pause),
        };
        *slot = over;
        let error = config.validate().unwrap_err();
        prop_assert_eq!(error.field.as_str(), name);
        prop_assert_eq!(error.expected.as_str(), "at most 30 days");
        prop_assert!(check_duration(name, over).is_err());
    }
}

#[test]
fn the_maximum_itself_is_accepted_everywhere() {
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = MAX_DURATION;
    config.supervision.watchdog.evaluator_timeout = MAX_DURATION;
    config.budget.evaluator_timeout = MAX_DURATION;
    config.restart.window = MAX_DURATION;
    config.restart.backoff_max = MAX_DURATION;
    config.run_lease_ttl = MAX_DURATION;
    assert_eq!(config.validate(), Ok(()));
    config.restart.backoff_initial = MAX_DURATION + Duration::from_secs(1);
    config.restart.backoff_max = MAX_DURATION + Duration::from_secs(1);
    assert_eq!(
        config.validate().unwrap_err().field,
        "restart.backoff_initial"
    );
}
