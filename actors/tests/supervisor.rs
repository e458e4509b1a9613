//! The rules of the supervision strategies, one test each, on paused time.

use std::time::Duration;

use leasehold_actors::{
    ChildEnd, ChildInfo, ChildKind, ConfigError, FailFast, GiveUpScope, OnExhausted,
    RestartOnIntervene, RestartPolicy, SupervisionAction, SupervisionStrategy,
};
use proptest::prelude::*;
use tokio::time::{Instant, advance};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The default policy without jitter, so delays are exact.
fn exact() -> RestartPolicy {
    RestartPolicy {
        jitter: 0.0,
        ..RestartPolicy::default()
    }
}

fn child(kind: ChildKind, subject: &str) -> ChildInfo {
    ChildInfo {
        path: format!("run/step-1/{subject}"),
        kind,
        subject: subject.to_owned(),
        attempt: 1,
    }
}

fn tool() -> ChildInfo {
    child(ChildKind::ToolCall, "search")
}

fn intervened() -> ChildEnd {
    ChildEnd::Intervened {
        reason: "no progress".to_owned(),
    }
}

fn restart_after(after: Duration) -> SupervisionAction {
    SupervisionAction::Restart { after }
}

fn intensity_exceeded(limit: &str) -> SupervisionAction {
    SupervisionAction::GiveUp {
        reason: format!("restart intensity exceeded: {limit}"),
        scope: GiveUpScope::Supervisor,
        on_exhausted: OnExhausted::Pause,
    }
}

#[test]
fn backoff_is_exponential_and_capped() {
    let policy = RestartPolicy::default();
    let delays: Vec<_> = (1..=7).map(|n| policy.backoff(n)).collect();
    assert_eq!(
        delays,
        [
            secs(1),
            secs(2),
            secs(4),
            secs(8),
            secs(16),
            secs(30),
            secs(30)
        ]
    );
    assert_eq!(policy.backoff(u32::MAX), secs(30));
    assert_eq!(policy.backoff(0), secs(1), "0 is treated as the first");

    let gentle = RestartPolicy {
        backoff_initial: Duration::from_millis(100),
        multiplier: 1.5,
        ..policy
    };
    assert_eq!(gentle.backoff(3), Duration::from_millis(225));
}

#[tokio::test(start_paused = true)]
async fn jitter_stays_within_bounds() {
    let policy = RestartPolicy {
        max_restarts: u32::MAX,
        jitter: 0.25,
        ..RestartPolicy::default()
    };
    let delays = |seed| {
        let mut strategy = RestartOnIntervene::with_seed(policy, seed);
        let now = Instant::now();
        (1..=200)
            .map(|n| match strategy.decide(&tool(), &intervened(), now) {
                SupervisionAction::Restart { after } => (policy.backoff(n), after),
                other => panic!("restart {n}: expected a restart, got {other:?}"),
            })
            .collect::<Vec<_>>()
    };

    let first = delays(42);
    for &(backoff, after) in &first {
        assert!(
            after >= backoff.mul_f64(0.75),
            "{after:?} below {backoff:?} - 25 %"
        );
        assert!(
            after <= backoff.mul_f64(1.25),
            "{after:?} above {backoff:?} + 25 %"
        );
        assert!(after <= policy.backoff_max.mul_f64(1.25));
    }
    assert!(
        first.iter().any(|&(backoff, after)| after != backoff),
        "jitter moved no delay at all"
    );
    assert_eq!(first, delays(42), "the same seed gives the same delays");
    assert_ne!(first, delays(43), "another seed gives other delays");
}

#[tokio::test(start_paused = true)]
async fn intervene_restarts_after_backoff() {
    let mut strategy = RestartOnIntervene::with_seed(exact(), 1);
    assert_eq!(strategy.policy(), &exact());
    for expected in [1, 2, 4] {
        assert_eq!(
            strategy.decide(&tool(), &intervened(), Instant::now()),
            restart_after(secs(expected))
        );
        advance(secs(expected)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn restart_intensity_exceeded_gives_up_naming_the_limit() {
    let mut strategy = RestartOnIntervene::with_seed(exact(), 1);
    for _ in 0..3 {
        assert!(matches!(
            strategy.decide(&tool(), &intervened(), Instant::now()),
            SupervisionAction::Restart { .. }
        ));
        advance(secs(19)).await;
    }
    // The fourth restart, 57 s after the first: over the limit, whichever
    // child asks.
    let worker = child(ChildKind::Worker, "indexer");
    assert_eq!(
        strategy.decide(&worker, &intervened(), Instant::now()),
        intensity_exceeded("more than 3 restarts in 60s")
    );

    let mut finer = RestartOnIntervene::with_seed(
        RestartPolicy {
            max_restarts: 1,
            window: Duration::from_millis(1500),
            ..exact()
        },
        1,
    );
    let now = Instant::now();
    assert_eq!(
        finer.decide(&tool(), &intervened(), now),
        restart_after(secs(1))
    );
    assert_eq!(
        finer.decide(&tool(), &intervened(), now),
        intensity_exceeded("more than 1 restarts in 1500ms")
    );
}

#[tokio::test(start_paused = true)]
async fn restarts_outside_the_window_are_forgotten() {
    let mut strategy = RestartOnIntervene::with_seed(exact(), 1);
    for expected in [1, 2, 4] {
        assert_eq!(
            strategy.decide(&tool(), &intervened(), Instant::now()),
            restart_after(secs(expected))
        );
    }
    // Exactly `window` later the three restarts still count ...
    advance(secs(60)).await;
    assert_eq!(
        strategy.decide(&tool(), &intervened(), Instant::now()),
        intensity_exceeded("more than 3 restarts in 60s")
    );
    // ... past it they are forgotten, and the backoff starts over.
    advance(Duration::from_millis(1)).await;
    assert_eq!(
        strategy.decide(&tool(), &intervened(), Instant::now()),
        restart_after(secs(1))
    );
}

#[tokio::test(start_paused = true)]
async fn escalate_pauses() {
    let escalated = ChildEnd::Escalated {
        reason: "needs a person".to_owned(),
        evidence: None,
    };
    let paused = SupervisionAction::Pause {
        reason: "needs a person".to_owned(),
    };
    let mut strategy = RestartOnIntervene::with_seed(exact(), 1);
    for kind in [ChildKind::ModelCall, ChildKind::ToolCall, ChildKind::Worker] {
        assert_eq!(
            strategy.decide(&child(kind, "x"), &escalated, Instant::now()),
            paused
        );
    }
    // Pausing is no restart: the full intensity is still available.
    for expected in [1, 2, 4] {
        assert_eq!(
            strategy.decide(&tool(), &intervened(), Instant::now()),
            restart_after(secs(expected))
        );
    }
    assert_eq!(
        strategy.decide(&tool(), &ChildEnd::Completed, Instant::now()),
        SupervisionAction::Ignore
    );
}

#[tokio::test(start_paused = true)]
async fn panic_restarts_under_intensity() {
    let mut strategy = RestartOnIntervene::with_seed(exact(), 1);
    let panicked = ChildEnd::Panicked {
        message: "index out of bounds".to_owned(),
    };
    let capped = ChildEnd::Capped { max_renewals: 10 };
    let retryable = ChildEnd::Failed {
        reason: "connection reset".to_owned(),
        retryable: true,
    };
    // A panic, a capped lease and a retryable failure all restart, and all
    // count against the same limit.
    assert_eq!(
        strategy.decide(&tool(), &panicked, Instant::now()),
        restart_after(secs(1))
    );
    assert_eq!(
        strategy.decide(&tool(), &capped, Instant::now()),
        restart_after(secs(2))
    );
    let model = child(ChildKind::ModelCall, "gpt");
    assert_eq!(
        strategy.decide(&model, &retryable, Instant::now()),
        restart_after(secs(4))
    );
    assert_eq!(
        strategy.decide(&tool(), &panicked, Instant::now()),
        intensity_exceeded("more than 3 restarts in 60s")
    );
}

#[tokio::test(start_paused = true)]
async fn non_retryable_failures_by_child_kind() {
    let mut strategy = RestartOnIntervene::with_seed(RestartPolicy::default(), 1);
    let failed = ChildEnd::Failed {
        reason: "invalid arguments".to_owned(),
        retryable: false,
    };
    for kind in [ChildKind::ToolCall, ChildKind::Worker] {
        assert_eq!(
            strategy.decide(&child(kind, "search"), &failed, Instant::now()),
            SupervisionAction::Ignore
        );
    }
    assert_eq!(
        strategy.decide(&child(ChildKind::ModelCall, "gpt"), &failed, Instant::now()),
        SupervisionAction::Fail {
            reason: "gpt: invalid arguments".to_owned()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn fail_fast_fails_on_any_failure() {
    let mut strategy = FailFast;
    let now = Instant::now();
    let failures = [
        intervened(),
        ChildEnd::Failed {
            reason: "connection reset".to_owned(),
            retryable: true,
        },
        ChildEnd::Failed {
            reason: "invalid arguments".to_owned(),
            retryable: false,
        },
        ChildEnd::Panicked {
            message: "boom".to_owned(),
        },
        ChildEnd::Capped { max_renewals: 10 },
    ];
    for end in &failures {
        match strategy.decide(&tool(), end, now) {
            SupervisionAction::Fail { reason } => {
                assert!(reason.contains("search"), "{reason:?} names no subject")
            }
            other => panic!("{end:?}: expected a failure, got {other:?}"),
        }
    }
    assert_eq!(
        strategy.decide(
            &tool(),
            &ChildEnd::Escalated {
                reason: "ask".to_owned(),
                evidence: None,
            },
            now
        ),
        SupervisionAction::Pause {
            reason: "ask".to_owned()
        }
    );
    assert_eq!(
        strategy.decide(&tool(), &ChildEnd::Completed, now),
        SupervisionAction::Ignore
    );
}

#[test]
fn restart_policy_refuses_nonsense_naming_the_field() {
    let field_of = |policy: RestartPolicy| policy.validate().map_err(|e: ConfigError| e.field);
    let default = RestartPolicy::default();
    assert_eq!(field_of(default), Ok(()));
    assert_eq!(
        field_of(RestartPolicy {
            jitter: 0.0,
            multiplier: 1.0,
            backoff_max: secs(1),
            max_restarts: 0,
            ..default
        }),
        Ok(()),
        "the edges of the valid ranges are valid"
    );
    let nonsense = [
        (
            RestartPolicy {
                window: Duration::ZERO,
                ..default
            },
            "restart.window",
        ),
        (
            RestartPolicy {
                backoff_initial: Duration::ZERO,
                ..default
            },
            "restart.backoff_initial",
        ),
        (
            RestartPolicy {
                backoff_max: Duration::from_millis(999),
                ..default
            },
            "restart.backoff_max",
        ),
        (
            RestartPolicy {
                multiplier: 0.5,
                ..default
            },
            "restart.multiplier",
        ),
        (
            RestartPolicy {
                multiplier: f64::INFINITY,
                ..default
            },
            "restart.multiplier",
        ),
        (
            RestartPolicy {
                multiplier: f64::NAN,
                ..default
            },
            "restart.multiplier",
        ),
        (
            RestartPolicy {
                jitter: -0.1,
                ..default
            },
            "restart.jitter",
        ),
        (
            RestartPolicy {
                jitter: 1.5,
                ..default
            },
            "restart.jitter",
        ),
        (
            RestartPolicy {
                jitter: f64::NAN,
                ..default
            },
            "restart.jitter",
        ),
    ];
    for (policy, field) in nonsense {
        assert_eq!(field_of(policy), Err(field.to_owned()), "{policy:?}");
    }
}

/// A strategy of the kind users write for experiments: restart every
/// failure a fixed number of times, then pause.
struct RestartThenPause {
    left: u32,
}

impl SupervisionStrategy for RestartThenPause {
    fn decide(&mut self, _child: &ChildInfo, end: &ChildEnd, _now: Instant) -> SupervisionAction {
        match end {
            ChildEnd::Completed => SupervisionAction::Ignore,
            _ if self.left > 0 => {
                self.left -= 1;
                SupervisionAction::Restart {
                    after: Duration::ZERO,
                }
            }
            _ => SupervisionAction::Pause {
                reason: "out of restarts".to_owned(),
            },
        }
    }
}

#[tokio::test(start_paused = true)]
async fn custom_strategy_is_pluggable() {
    let mut strategies: Vec<Box<dyn SupervisionStrategy>> = vec![
        Box::new(RestartThenPause { left: 1 }),
        Box::new(RestartOnIntervene::new(RestartPolicy::default())),
        Box::new(FailFast),
    ];
    let now = Instant::now();
    let custom = &mut strategies[0];
    assert_eq!(
        custom.decide(&tool(), &intervened(), now),
        restart_after(Duration::ZERO)
    );
    assert_eq!(
        custom.decide(&tool(), &intervened(), now),
        SupervisionAction::Pause {
            reason: "out of restarts".to_owned()
        }
    );
    // Strategies are `Send + 'static`: a supervisor can own one in a task.
    let mut moved = strategies.remove(0);
    let answer = tokio::spawn(async move { moved.decide(&tool(), &ChildEnd::Completed, now) })
        .await
        .expect("the task ran");
    assert_eq!(answer, SupervisionAction::Ignore);
}

fn valid_policy() -> impl Strategy<Value = RestartPolicy> {
    (1u64..=60_000, 0u64..=600_000, 1.0f64..=10.0).prop_map(|(initial, extra, multiplier)| {
        RestartPolicy {
            backoff_initial: Duration::from_millis(initial),
            backoff_max: Duration::from_millis(initial + extra),
            multiplier,
            ..RestartPolicy::default()
        }
    })
}

proptest! {
    #[test]
    fn backoff_never_panics_is_monotonic_and_capped(
        policy in valid_policy(),
        restart in any::<u32>(),
    ) {
        prop_assert!(policy.validate().is_ok());
        let here = policy.backoff(restart);
        let next = policy.backoff(restart.saturating_add(1));
        prop_assert!(here <= next, "backoff({}) = {:?} > backoff(next) = {:?}", restart, here, next);
        prop_assert!(next <= policy.backoff_max);
        prop_assert!(here >= policy.backoff_initial);
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_that_fails_slowly_gets_at_most_one_plus_max_restarts_attempts() {
    let mut strategy = RestartOnIntervene::with_seed(exact(), 1);
    let mut decisions = Vec::new();
    for attempt in 1..=4 {
        // Each attempt runs to its renewal cap, far past the 60 s window.
        advance(secs(55 * 60)).await;
        let child = ChildInfo { attempt, ..tool() };
        decisions.push(strategy.decide(&child, &intervened(), Instant::now()));
    }
    assert!(
        decisions[..3]
            .iter()
            .all(|d| matches!(d, SupervisionAction::Restart { .. })),
        "{decisions:?}"
    );
    assert_eq!(
        decisions[3],
        SupervisionAction::GiveUp {
            reason: "search: failed on each of its 4 attempts, the most that 3 restarts allow"
                .to_owned(),
            scope: GiveUpScope::Child,
            on_exhausted: OnExhausted::Pause,
        }
    );
    // Another call is counted on its own.
    let other = ChildInfo {
        attempt: 1,
        ..child(ChildKind::ToolCall, "fetch")
    };
    assert!(matches!(
        strategy.decide(&other, &intervened(), Instant::now()),
        SupervisionAction::Restart { .. }
    ));
}
