//! The printed worst case is a bound: a model call that never answers, under
//! an evaluator that never answers, is given up no later than
//! `Config::timing` says, and not much earlier.
//!
//! Each case builds the engine from a `Config` the way the CLI does
//! (`Config::engine_builder_with_store`), swaps in the scripted model and
//! evaluator, and measures on paused tokio time from the run's start until it stops running
//! (failed when the restarts run out, or paused `waiting_human`).

use std::sync::Arc;
use std::time::Duration;

use leasehold::{
    DecidedBy, EventKind, Flow, LeaseKind, MemoryStore, RunStatus, TokioClock,
    config::{Config, Timing},
    testing::{RecordingSink, Scripted, ScriptedEvaluator, ScriptedModel, Turn},
};
use proptest::prelude::*;

/// One drawn configuration, every duration in whole milliseconds.
#[derive(Clone, Copy, Debug)]
struct Drawn {
    stream: bool,
    lease_ms: u64,
    free_renewals: u32,
    max_renewals: u32,
    restarts: u32,
    backoff_initial_ms: u64,
    backoff_max_ms: u64,
    evaluator_timeout_ms: u64,
}

impl Drawn {
    /// The configuration text. The restart window is a day, longer than any
    /// drawn case lasts, so every restart backs off by its own number and
    /// the lower bound below is tight.
    fn config(&self) -> Config {
        let (stream, blocking) = if self.stream {
            (self.lease_ms, 60_000)
        } else {
            (60_000, self.lease_ms)
        };
        let text = format!(
            "evaluator_timeout = \"{}ms\"\n\
             [model]\nbase_url = \"http://127.0.0.1:9/v1\"\nname = \"silent\"\n\
             [lease]\nmodel_stream = \"{stream}ms\"\nmodel_blocking = \"{blocking}ms\"\n\
             max_renewals = {}\n\
             [watchdog]\nfree_renewals = {}\n\
             [restart]\nmax_restarts = {}\nwindow = \"1day\"\nbackoff_initial = \"{}ms\"\nbackoff_max = \"{}ms\"\n",
            self.evaluator_timeout_ms,
            self.max_renewals,
            self.free_renewals,
            self.restarts,
            self.backoff_initial_ms,
            self.backoff_max_ms,
        );
        Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    fn kind(&self) -> LeaseKind {
        if self.stream {
            LeaseKind::ModelStream
        } else {
            LeaseKind::ModelBlocking
        }
    }
}

fn drawn() -> impl Strategy<Value = Drawn> {
    (
        any::<bool>(),
        50u64..=2_000,
        0u32..=3,
        0u32..=4,
        0u32..=3,
        10u64..=2_000,
        0u64..=5_000,
        10u64..=2_000,
    )
        .prop_map(
            |(stream, lease_ms, free, evaluated, restarts, initial, more, timeout)| Drawn {
                stream,
                lease_ms,
                free_renewals: free,
                max_renewals: free + evaluated,
                restarts,
                backoff_initial_ms: initial,
                backoff_max_ms: initial + more,
                evaluator_timeout_ms: timeout,
            },
        )
}

/// What one silent run showed.
struct Measured {
    /// From the run's start until it stopped running.
    given_up_after: Duration,
    status: RunStatus,
    model_calls: usize,
    evaluator_calls: usize,
    breaker_verdicts: usize,
    /// The backoffs the strategy chose, in whole milliseconds (rounded down).
    restart_delays_ms: Vec<u64>,
}

/// Runs one flow whose every model call hangs without a chunk, under an
/// evaluator that never answers, and measures when the run is given up.
async fn measure(config: &Config, stream: bool, timing: &Timing) -> Measured {
    let attempts = usize::try_from(timing.attempts).expect("few attempts");
    // One spare turn: a call past the last attempt would hang too, and the
    // run would overrun the bound rather than fail on an empty script.
    let model = ScriptedModel::new().script(
        "run",
        (0..=attempts).map(|_| Turn {
            chunks: 0,
            ..Turn::hang()
        }),
    );
    let evaluator = ScriptedEvaluator::new([Scripted::Hang]);
    let sink = RecordingSink::new();
    let engine = config
        .engine_builder_with_store(Arc::new(MemoryStore::new()))
        .expect("the engine builder of the configuration")
        .model(Arc::new(model.clone()))
        .evaluator(Arc::new(evaluator.clone()))
        .events(Arc::new(sink.clone()))
        .clock(Arc::new(TokioClock::starting_at(1_800_000_000_000)))
        .build()
        .await
        .expect("engine");
    let flow: Flow = serde_json::from_value(serde_json::json!({
        "name": "silent", "task": "answer", "max_steps": 3, "stream": stream
    }))
    .expect("flow");

    let started = tokio::time::Instant::now();
    let mut run = engine.start(flow).await.expect("started");
    let patience = timing.worst_case.saturating_add(Duration::from_secs(600));
    let state = tokio::time::timeout(patience, run.wait_until(|s| s.status.is_paused()))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "still running {} after the start, past the worst case {}",
                leasehold::config::compact(patience),
                leasehold::config::compact(timing.worst_case)
            )
        });
    let given_up_after = started.elapsed();
    engine.shutdown().await;

    let restart_delays_ms = sink
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Restarted { delay_ms, .. } => Some(delay_ms),
            _ => None,
        })
        .collect();
    Measured {
        given_up_after,
        status: state.status,
        model_calls: model.requests_of("run").len(),
        evaluator_calls: evaluator.calls(),
        breaker_verdicts: sink
            .verdicts()
            .iter()
            .filter(|v| v.decided_by == DecidedBy::Breaker)
            .count(),
        restart_delays_ms,
    }
}

/// The earliest the run can be given up: every attempt runs to the cap and
/// every backoff is at the bottom of its jitter, rounded down to the
/// millisecond (a timer never fires early, so no further slack is needed).
fn earliest(config: &Config, timing: &Timing) -> Duration {
    let policy = config.engine_config().restart;
    let shortest: Duration = (1..=policy.max_restarts)
        .map(|restart| {
            let low = policy.backoff(restart).as_secs_f64() * (1.0 - policy.jitter);
            Duration::from_millis(
                Duration::from_secs_f64(low)
                    .as_millis()
                    .try_into()
                    .expect("ms"),
            )
        })
        .sum();
    timing.renewal_cap * timing.attempts + shortest
}

fn check(drawn: &Drawn) -> Result<(), TestCaseError> {
    let config = drawn.config();
    let timing = config.timing(drawn.kind());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    let measured = runtime.block_on(measure(&config, drawn.stream, &timing));
    let attempts = usize::try_from(timing.attempts).expect("few attempts");
    let evaluations = usize::try_from(timing.evaluations).expect("few evaluations");

    prop_assert!(
        matches!(measured.status, RunStatus::Failed | RunStatus::WaitingHuman),
        "given up as {:?}",
        measured.status
    );
    // The worst case really happened: every attempt was made, and every
    // evaluated expiry waited the evaluator's whole timeout.
    prop_assert_eq!(measured.model_calls, attempts);
    prop_assert_eq!(measured.evaluator_calls, attempts * evaluations);
    prop_assert_eq!(measured.breaker_verdicts, attempts * evaluations);
    prop_assert_eq!(measured.restart_delays_ms.len(), attempts - 1);

    prop_assert!(
        measured.given_up_after <= timing.worst_case,
        "given up after {:?}, later than the printed worst case: {timing}",
        measured.given_up_after
    );
    let earliest = earliest(&config, &timing);
    prop_assert!(
        measured.given_up_after >= earliest,
        "given up after {:?}, earlier than {earliest:?}: {timing}",
        measured.given_up_after
    );
    // Exactly: each attempt lasted its renewal cap, and each backoff what the
    // strategy chose (its event rounds it down; tokio's timer rounds it up to
    // the next millisecond).
    let delays = Duration::from_millis(measured.restart_delays_ms.iter().sum());
    let attempts_took = measured
        .given_up_after
        .checked_sub(delays)
        .expect("the backoffs are part of the time");
    let cap_times_attempts = timing.renewal_cap * timing.attempts;
    let rounding = Duration::from_millis(u64::try_from(attempts - 1).expect("few"));
    prop_assert!(
        attempts_took >= cap_times_attempts && attempts_took <= cap_times_attempts + rounding,
        "attempts took {attempts_took:?} besides the backoffs {delays:?}; expected \
         {cap_times_attempts:?} (+ up to {rounding:?}): {timing}"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_silent_operation_is_given_up_within_the_printed_worst_case_and_not_much_earlier(
        drawn in drawn()
    ) {
        check(&drawn)?;
    }
}

/// A measured frozen stream: a frozen stream under `lease.model_stream =
/// 1s`, `max_renewals = 4`, `restart.max = 2` (now `restart.max_restarts`) and an
/// 800 ms evaluator timeout
/// was given up after 21.8 s while "worst case 18s300ms" was printed.
#[test]
fn a_measured_frozen_stream_is_given_up_within_its_printed_worst_case() {
    let drawn = Drawn {
        stream: true,
        lease_ms: 1_000,
        free_renewals: 2,
        max_renewals: 4,
        restarts: 2,
        backoff_initial_ms: 1_000,
        backoff_max_ms: 30_000,
        evaluator_timeout_ms: 800,
    };
    let timing = drawn.config().timing(LeaseKind::ModelStream);
    assert_eq!(timing.renewal_cap, Duration::from_millis(6_600));
    assert_eq!(
        timing.worst_case,
        Duration::from_millis(3 * 6_600 + 1_100 + 2_200)
    );
    check(&drawn).expect("within the bound");
}
