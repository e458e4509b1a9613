//! The verdict policies: each built-in judged as a pure function, then
//! through the real lease actor and watchdog on paused time.

mod common;

use std::time::Duration;

use common::*;
use std::sync::Arc;

use leasehold_actors::testing::{RecordingSink, ScriptedEvaluator};
use leasehold_actors::{DeadlinePolicy, prelude::*};
use tokio::time::sleep;

/// An expiry of a 10 s tool lease renewed `renewals` times, with two free
/// renewals, a cap of 10 and `evidence`.
fn expiry(renewals: u32, evidence: &EvidenceSummary) -> Expiry<'_> {
    Expiry {
        early: false,
        kind: LeaseKind::ToolCall,
        lease: secs(10),
        renewals,
        doubts: renewals,
        max_renewals: 10,
        free_renewals: 2,
        evidence,
        new_items: evidence.count,
        phi_threshold: 8.0,
        evidence_renewals: 0,
        max_evidence_renewals: 3,
        repetition_threshold: 0.5,
    }
}

fn silent() -> EvidenceSummary {
    EvidenceSummary::default()
}

/// Evidence `age_ms` old, with phi `phi`.
fn fresh(age_ms: u64, phi: f64) -> EvidenceSummary {
    EvidenceSummary {
        count: 5,
        last_progress_age_ms: Some(age_ms),
        phi: Some(phi),
        ..EvidenceSummary::default()
    }
}

fn decided(judgement: Judgement) -> (Verdict, DecidedBy) {
    match judgement {
        Judgement::Decided(decision) => (decision.verdict, decision.decided_by),
        Judgement::AskEvaluator => panic!("asked the evaluator"),
    }
}

fn judge(name: &PolicyName, expiry: &Expiry<'_>) -> Judgement {
    let policies = Policies::builtin();
    let policy = policies.get(name.as_str()).expect("a built-in");
    assert_eq!(policy.name(), name.as_str());
    policy.judge(expiry)
}

#[test]
fn every_built_in_policy_intervenes_at_the_renewal_cap() {
    let evidence = fresh(10, 0.1);
    for kind in PolicyName::BUILT_IN {
        assert_eq!(
            decided(judge(&kind, &expiry(10, &evidence))),
            (Verdict::Intervene, DecidedBy::Cap),
            "{kind}"
        );
    }
}

#[test]
fn the_leasehold_policy_renews_on_the_ladder_then_on_evidence_then_asks() {
    let evidence = fresh(10, 0.1);
    let kind = PolicyName::LEASEHOLD;
    assert_eq!(
        decided(judge(&kind, &expiry(1, &evidence))),
        (Verdict::Renew, DecidedBy::Ladder)
    );
    assert_eq!(
        decided(judge(&kind, &expiry(2, &evidence))),
        (Verdict::Renew, DecidedBy::Evidence)
    );
    assert_eq!(judge(&kind, &expiry(2, &silent())), Judgement::AskEvaluator);
    let suspicious = fresh(9_000, 9.0);
    assert_eq!(
        judge(&kind, &expiry(2, &suspicious)),
        Judgement::AskEvaluator
    );
    let repetitive = EvidenceSummary {
        repetition: Some(0.9),
        ..fresh(10, 0.1)
    };
    assert_eq!(
        judge(&kind, &expiry(2, &repetitive)),
        Judgement::AskEvaluator
    );
    let long_streak = Expiry {
        evidence_renewals: 3,
        ..expiry(5, &evidence)
    };
    assert_eq!(judge(&kind, &long_streak), Judgement::AskEvaluator);
}

#[test]
fn the_deadline_policy_intervenes_at_the_first_expiry_whatever_the_evidence() {
    for evidence in [silent(), fresh(10, 0.1)] {
        assert_eq!(
            decided(judge(&PolicyName::DEADLINE, &expiry(0, &evidence))),
            (Verdict::Intervene, DecidedBy::Policy)
        );
    }
}

#[test]
fn the_idle_kill_policy_intervenes_after_a_silent_lease_and_renews_on_recent_progress() {
    let kind = PolicyName::IDLE_KILL;
    assert_eq!(
        decided(judge(&kind, &expiry(0, &silent()))),
        (Verdict::Intervene, DecidedBy::Policy)
    );
    assert_eq!(
        decided(judge(&kind, &expiry(3, &fresh(10_000, 9.0)))),
        (Verdict::Intervene, DecidedBy::Policy)
    );
    // However suspicious phi finds it, progress within the lease renews.
    assert_eq!(
        decided(judge(&kind, &expiry(3, &fresh(9_999, 9.0)))),
        (Verdict::Renew, DecidedBy::Policy)
    );
}

#[test]
fn the_always_evaluate_policy_asks_at_every_expiry_below_the_cap() {
    let evidence = fresh(10, 0.1);
    for renewals in [0, 1, 2, 9] {
        assert_eq!(
            judge(&PolicyName::ALWAYS_EVALUATE, &expiry(renewals, &evidence)),
            Judgement::AskEvaluator,
            "renewals {renewals}"
        );
    }
}

#[test]
fn policies_are_named_in_configuration_and_flows_and_a_wrong_name_is_refused() {
    let policies = Policies::builtin();
    for name in PolicyName::BUILT_IN {
        assert_eq!(name.as_str().parse::<PolicyName>(), Ok(name.clone()));
        assert_eq!(
            serde_json::to_value(&name).expect("serializes"),
            serde_json::json!(name.as_str())
        );
        assert!(policies.get(name.as_str()).is_some(), "{name} registered");
    }
    let choice: PolicyChoice = "timeout".parse().expect("a well-formed name");
    let error = policies
        .check(&choice, "watchdog.policy")
        .expect_err("not registered");
    assert_eq!(error.field, "watchdog.policy");
    assert!(error.to_string().contains("idle_kill"), "{error}");
    assert!(error.to_string().contains("\"timeout\""), "{error}");
    // A name that is not one is refused before any lookup.
    for bad in ["Deadline", "idle-kill", "", "9lives", "a b"] {
        let error = PolicyChoice::parse_at("leases.policy", bad).expect_err(bad);
        assert!(error.field.starts_with("leases.policy"), "{error}");
    }
}

#[test]
fn a_policy_choice_names_one_policy_for_every_kind_or_one_per_kind_and_a_flows_lies_over_the_configurations()
 {
    let choice: PolicyChoice = "leasehold, tool_call = idle_kill".parse().expect("parses");
    assert_eq!(choice.name_for(LeaseKind::ToolCall), &PolicyName::IDLE_KILL);
    assert_eq!(
        choice.name_for(LeaseKind::WorkerStep),
        &PolicyName::LEASEHOLD
    );
    assert_eq!(choice.to_string(), "leasehold, tool_call = idle_kill");
    assert_eq!(
        choice.to_string().parse::<PolicyChoice>(),
        Ok(choice.clone())
    );
    // The table form of a flow, and the text form, are the same choice.
    let table: PolicyChoice = serde_json::from_value(
        serde_json::json!({"default": "leasehold", "tool_call": "idle_kill"}),
    )
    .expect("a table");
    assert_eq!(table, choice);
    // A flow naming one kind keeps the configuration's for the others; a
    // flow naming every kind overrides the configuration's kinds too.
    let configured = choice;
    let flow: PolicyChoice = "model_stream = deadline".parse().expect("parses");
    let merged = flow.over(&configured);
    assert_eq!(
        merged.name_for(LeaseKind::ModelStream),
        &PolicyName::DEADLINE
    );
    assert_eq!(merged.name_for(LeaseKind::ToolCall), &PolicyName::IDLE_KILL);
    assert_eq!(
        merged.name_for(LeaseKind::WorkerStep),
        &PolicyName::LEASEHOLD
    );
    let every: PolicyChoice = "always_evaluate".parse().expect("parses");
    for kind in LeaseKind::ALL {
        assert_eq!(
            every.over(&configured).name_for(kind),
            &PolicyName::ALWAYS_EVALUATE
        );
    }
    for (bad, key) in [
        ("leasehold, deadline", "leases.policy"),
        (
            "tool_call = deadline, tool_call = idle_kill",
            "leases.policy.tool_call",
        ),
        ("tool = deadline", "leases.policy"),
        ("leasehold,", "leases.policy"),
    ] {
        let error = PolicyChoice::parse_at("leases.policy", bad).expect_err(bad);
        assert_eq!(error.field, key, "{bad}: {error}");
    }
}

/// A policy of one's own that never intervenes, not even at the cap.
#[derive(Debug)]
struct Lenient;

impl VerdictPolicy for Lenient {
    fn name(&self) -> &str {
        "lenient"
    }

    fn judge(&self, _: &Expiry<'_>) -> Judgement {
        Judgement::Decided(Decision::renew(DecidedBy::Policy, "lenient: always renew"))
    }
}

#[test]
fn a_policy_of_ones_own_is_registered_under_a_name_of_its_own_and_never_over_a_built_in() {
    let mut policies = Policies::builtin();
    policies.register(Arc::new(Lenient)).expect("registered");
    assert_eq!(
        policies
            .resolve(&"lenient".parse().expect("parses"), LeaseKind::ToolCall)
            .name(),
        "lenient"
    );
    let again = policies.register(Arc::new(Lenient)).expect_err("taken");
    assert!(again.to_string().contains("already registered"), "{again}");

    #[derive(Debug)]
    struct FakeDeadline;
    impl VerdictPolicy for FakeDeadline {
        fn name(&self) -> &str {
            "deadline"
        }
        fn judge(&self, _: &Expiry<'_>) -> Judgement {
            Judgement::AskEvaluator
        }
    }
    let built_in = policies
        .register(Arc::new(FakeDeadline))
        .expect_err("a built-in's name");
    assert!(
        built_in.to_string().contains("already registered"),
        "{built_in}"
    );

    #[derive(Debug)]
    struct BadName;
    impl VerdictPolicy for BadName {
        fn name(&self) -> &str {
            "Bad Name"
        }
        fn judge(&self, _: &Expiry<'_>) -> Judgement {
            Judgement::AskEvaluator
        }
    }
    assert!(policies.register(Arc::new(BadName)).is_err());
}

#[tokio::test(start_paused = true)]
async fn a_policy_of_ones_own_judges_through_the_lease_actor_and_the_cap_bounds_it_all_the_same() {
    let mut policies = Policies::builtin();
    policies.register(Arc::new(Lenient)).expect("registered");
    let events = RecordingSink::new();
    let mut config = config(2, 3);
    config.watchdog.policy = "lenient".parse().expect("parses");
    let supervision =
        Supervision::start_with(config, &policies, None, Arc::new(events.clone()), None)
            .await
            .expect("started");
    let started = tokio::time::Instant::now();
    let handle = supervision
        .leases
        .supervise(spec(secs(10), 3), |_| async {
            sleep(secs(3600)).await;
            "never"
        })
        .expect("started");
    let outcome = handle.outcome().await;
    assert_eq!(
        outcome,
        Err(LeaseError::RenewalCapReached { max_renewals: 3 })
    );
    assert_eq!(started.elapsed(), secs(40), "three renewals, then the cap");
    let verdicts = events.verdicts();
    let by: Vec<DecidedBy> = verdicts.iter().map(|v| v.decided_by).collect();
    assert_eq!(
        by,
        [
            DecidedBy::Policy,
            DecidedBy::Policy,
            DecidedBy::Policy,
            DecidedBy::Cap
        ]
    );

    // A configuration naming a policy nobody registered is refused at start.
    let mut unknown = config_for_unknown();
    unknown.watchdog.policy = "nobody".parse().expect("parses");
    let refused = Supervision::start(unknown, None, Arc::new(events.clone()))
        .await
        .expect_err("refused");
    assert!(refused.to_string().contains("watchdog.policy"), "{refused}");
}

fn config_for_unknown() -> SupervisionConfig {
    config(2, 10)
}

/// A rig whose watchdog judges by `policy`, with an evaluator that always
/// renews.
async fn rig_with(policy: PolicyName) -> Rig {
    let mut config = config(2, 10);
    config.watchdog.policy = PolicyChoice::all(policy);
    rig(config, Some(ScriptedEvaluator::always("RENEW"))).await
}

/// A tool call of `lease` that reports progress every `every` (never, if
/// `None`) and finishes after `work`.
fn supervised(
    rig: &Rig,
    lease: Duration,
    every: Option<Duration>,
    work: Duration,
) -> LeaseHandle<&'static str> {
    rig.leases()
        .supervise(spec(lease, 10), move |evidence| async move {
            let started = tokio::time::Instant::now();
            while started.elapsed() < work {
                match every {
                    Some(every) => {
                        sleep(every).await;
                        evidence.progress("a page");
                    }
                    None => sleep(work).await,
                }
            }
            "finished"
        })
        .expect("started")
}

#[tokio::test(start_paused = true)]
async fn under_the_deadline_policy_a_slow_but_alive_tool_is_intervened_at_its_first_expiry() {
    let rig = rig_with(PolicyName::DEADLINE).await;
    let started = tokio::time::Instant::now();
    let handle = supervised(&rig, secs(10), Some(secs(1)), secs(25));
    let outcome = handle.outcome().await;
    assert!(
        matches!(outcome, Err(LeaseError::Intervened { .. })),
        "{outcome:?}"
    );
    assert_eq!(started.elapsed(), secs(10));
    assert_eq!(rig.evaluator.calls(), 0);
    let verdicts = rig.events.verdicts();
    assert_eq!(verdicts.len(), 1);
    assert_eq!(verdicts[0].decided_by, DecidedBy::Policy);
}

#[tokio::test(start_paused = true)]
async fn under_the_idle_kill_policy_progress_renews_and_silence_intervenes_without_the_evaluator() {
    let rig = rig_with(PolicyName::IDLE_KILL).await;
    let alive = supervised(&rig, secs(10), Some(secs(1)), secs(25));
    assert_eq!(alive.outcome().await, Ok("finished"));
    let silent = supervised(&rig, secs(10), None, secs(25));
    let started = tokio::time::Instant::now();
    let outcome = silent.outcome().await;
    assert!(
        matches!(outcome, Err(LeaseError::Intervened { .. })),
        "{outcome:?}"
    );
    assert_eq!(started.elapsed(), secs(10));
    assert_eq!(rig.evaluator.calls(), 0);
    assert!(
        rig.events
            .verdicts()
            .iter()
            .all(|v| v.decided_by == DecidedBy::Policy)
    );
}

#[tokio::test(start_paused = true)]
async fn under_the_always_evaluate_policy_every_expiry_asks_the_evaluator_even_with_fresh_evidence()
{
    let rig = rig_with(PolicyName::ALWAYS_EVALUATE).await;
    let handle = supervised(&rig, secs(10), Some(secs(1)), secs(25));
    assert_eq!(handle.outcome().await, Ok("finished"));
    assert_eq!(rig.evaluator.calls(), 2, "expiries at 10 s and 20 s");
    assert!(
        rig.events
            .verdicts()
            .iter()
            .all(|v| v.decided_by == DecidedBy::Evaluator)
    );
}

#[tokio::test(start_paused = true)]
async fn a_leases_own_policy_overrides_the_watchdogs() {
    let rig = rig_with(PolicyName::LEASEHOLD).await;
    let handle = rig
        .leases()
        .supervise(
            spec(secs(10), 10).with_terms(Arc::new(
                LeaseTerms::new(LeaseKind::ToolCall).with_policy(Arc::new(DeadlinePolicy)),
            )),
            |_| async {
                sleep(secs(25)).await;
                "finished"
            },
        )
        .expect("started");
    let outcome = handle.outcome().await;
    assert!(
        matches!(outcome, Err(LeaseError::Intervened { .. })),
        "{outcome:?}"
    );
    // Under the watchdog's own policy the same work is renewed twice free.
    let handle = supervised(&rig, secs(10), None, secs(25));
    assert_eq!(handle.outcome().await, Ok("finished"));
}

/// Evidence whose progress value stands at `value` of 12, `previous` at
/// the last expiry, with a long streak of evidence renewals behind it.
fn progress(value: f64, previous: Option<f64>) -> EvidenceSummary {
    EvidenceSummary {
        progress: Some(ProgressSummary {
            value,
            total: Some(12.0),
            previous,
            advanced: previous.is_none_or(|before| value > before),
        }),
        ..fresh(10, 0.1)
    }
}

#[test]
fn the_leasehold_policy_renews_advancing_progress_past_the_evidence_streak_but_not_the_cap() {
    let kind = PolicyName::LEASEHOLD;
    let rose = progress(7.0, Some(6.0));
    let streak_spent = Expiry {
        evidence_renewals: 3,
        ..expiry(5, &rose)
    };
    assert_eq!(
        decided(judge(&kind, &streak_spent)),
        (Verdict::Renew, DecidedBy::Progress)
    );
    // A value that stood still is judged as other evidence: the streak is
    // spent, the evaluator is asked.
    let stood = progress(7.0, Some(7.0));
    let streak_spent = Expiry {
        evidence_renewals: 3,
        ..expiry(5, &stood)
    };
    assert_eq!(judge(&kind, &streak_spent), Judgement::AskEvaluator);
    // The cap holds.
    assert_eq!(
        decided(judge(&kind, &expiry(10, &rose))),
        (Verdict::Intervene, DecidedBy::Cap)
    );
}

#[test]
fn the_idle_kill_policy_is_reset_by_a_keepalive_as_a_read_timeout_is_and_leasehold_is_not() {
    // No progress for 60 s, a keep-alive 1 s ago: a wedged provider.
    let wedged = EvidenceSummary {
        keepalive_age_ms: Some(1_000),
        ..fresh(60_000, 20.0)
    };
    assert_eq!(
        decided(judge(&PolicyName::IDLE_KILL, &expiry(3, &wedged))),
        (Verdict::Renew, DecidedBy::Policy)
    );
    // Only keep-alives, never an item: still renewed by the idle timeout.
    let only_keepalives = EvidenceSummary {
        keepalive_age_ms: Some(1_000),
        ..silent()
    };
    assert_eq!(
        decided(judge(&PolicyName::IDLE_KILL, &expiry(3, &only_keepalives))),
        (Verdict::Renew, DecidedBy::Policy)
    );
    // leasehold judges the progress, not the connection.
    assert_eq!(
        judge(&PolicyName::LEASEHOLD, &expiry(3, &wedged)),
        Judgement::AskEvaluator
    );
    assert_eq!(
        judge(&PolicyName::LEASEHOLD, &expiry(3, &only_keepalives)),
        Judgement::AskEvaluator
    );
}
