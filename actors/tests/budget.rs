//! The rules of "Budget checkpoints", one test each, on paused time.

use std::sync::Arc;
use std::time::Duration;

use leasehold_actors::testing::actors::{
    BudgetCheckpointActor, BudgetCheckpointArgs, BudgetMsg, BudgetReply,
};
use leasehold_actors::{
    BUDGET_CONSUMER, BudgetConfig, BudgetDecision, BudgetEvaluationRequest, BudgetFigures,
    BudgetRecord, DecidedBy, Evaluator, EvaluatorUsage, Event, EventKind, MAX_EXTENSIONS,
    StartError, TokenCost, TranscriptMessage, checkpoint_due, proportional_extension,
    testing::{RecordingSink, Scripted, ScriptedEvaluator},
};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::time::Instant;

const RUN: &str = "run-7";
const PATH: &str = "run/worker:research#1";

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A loop at its checkpoint: `steps_used == limit`, with made-up figures.
fn request(limit: u32, extensions_used: u32, extensions_left: u32) -> BudgetEvaluationRequest {
    BudgetEvaluationRequest {
        run_id: RUN.into(),
        path: PATH.into(),
        figures: BudgetFigures {
            spending: None,
            steps_used: limit,
            steps_declared: 3,
            limit,
            tool_calls: 4,
            spawns: 1,
            milestones_closed: vec!["outline".into()],
            milestones_open: vec!["draft".into(), "review".into()],
            extensions_used,
            extensions_left,
        },
        transcript_tail: Arc::new([TranscriptMessage::new("assistant", "drafting section 2")]),
    }
}

struct Rig {
    checkpoint: ActorRef<BudgetMsg>,
    events: RecordingSink,
    evaluator: ScriptedEvaluator,
}

impl Rig {
    async fn check(&self, request: BudgetEvaluationRequest) -> BudgetDecision {
        BudgetCheckpointActor::check(&self.checkpoint, request).await
    }

    /// Every budget record so far, with its event's name.
    fn records(&self) -> Vec<(&'static str, BudgetRecord)> {
        self.events
            .events()
            .into_iter()
            .filter_map(|e| {
                let name = e.kind.name();
                match e.kind {
                    EventKind::BudgetExtended(r) | EventKind::BudgetExhausted(r) => {
                        Some((name, *r))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    fn only_record(&self) -> (&'static str, BudgetRecord) {
        let mut records = self.records();
        assert_eq!(records.len(), 1, "records: {records:?}");
        records.remove(0)
    }
}

/// A checkpoint with `config`, asking `evaluator` (none if `None`).
async fn rig_with(config: BudgetConfig, evaluator: Option<ScriptedEvaluator>) -> Rig {
    let events = RecordingSink::new();
    let script = evaluator.clone().unwrap_or_default();
    let checkpoint = BudgetCheckpointActor::start(BudgetCheckpointArgs {
        prices: Default::default(),
        config,
        evaluator: evaluator.map(|e| Arc::new(e) as Arc<dyn Evaluator>),
        events: Arc::new(events.clone()),
    })
    .await
    .expect("checkpoint starts");
    Rig {
        checkpoint,
        events,
        evaluator: script,
    }
}

/// A default checkpoint whose evaluator plays `budget_script`.
async fn rig(budget_script: impl IntoIterator<Item = Scripted>) -> Rig {
    let evaluator = ScriptedEvaluator::new([]).with_budget_script(budget_script);
    rig_with(BudgetConfig::default(), Some(evaluator)).await
}

/// Drives a loop declared with `declared` steps through `checkpoints`
/// checkpoints, tracking its limit and extensions the way a loop does, and
/// returns every decision.
async fn drive_loop(rig: &Rig, declared: u32, checkpoints: usize) -> Vec<BudgetDecision> {
    let max_extensions = BudgetConfig::default().max_extensions;
    let (mut limit, mut extensions_used) = (declared, 0);
    let mut decisions = Vec::new();
    for _ in 0..checkpoints {
        let mut request = request(limit, extensions_used, max_extensions - extensions_used);
        request.figures.steps_declared = declared;
        let decision = rig.check(request).await;
        if let BudgetDecision::Extend { new_limit, .. } = decision {
            limit = new_limit;
            extensions_used += 1;
        }
        decisions.push(decision);
    }
    decisions
}

fn extend(granted: u32, new_limit: u32) -> BudgetDecision {
    BudgetDecision::Extend {
        spending: None,
        granted,
        new_limit,
    }
}

async fn assert_breaker_wraps_up(answer: Scripted, reason_contains: &str) {
    let rig = rig([answer]).await;
    let decision = rig.check(request(5, 0, 3)).await;
    let (name, record) = rig.only_record();
    assert_eq!(name, "budget_exhausted");
    assert_eq!(record.decided_by, DecidedBy::Breaker);
    assert!(
        record.reason.contains(reason_contains),
        "reason: {}",
        record.reason
    );
    assert_eq!(
        decision,
        BudgetDecision::WrapUp {
            reason: record.reason.clone()
        }
    );
    assert_eq!(record.new_limit, record.figures.limit);
    assert_eq!(record.confidence, None);
    let usage = record
        .evaluator
        .expect("the failed call is still accounted");
    assert_eq!(usage.consumer, BUDGET_CONSUMER);
    assert_eq!(rig.evaluator.budget_calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn proportional_extension_lets_three_steps_pass_fifteen() {
    // Through the checkpoint, at confidence 1.0: 3 → 6 → 12 → 24.
    let rig = rig([Scripted::decision("EXTEND", "converging", 1.0)]).await;
    let decisions = drive_loop(&rig, 3, 3).await;
    assert_eq!(decisions, [extend(3, 6), extend(6, 12), extend(12, 24)]);
    // At confidence 0.8 the loop still gets past 15: 3 → 6 → 11 → 20.
    let limit = (0..3).fold(3, |limit, _| {
        limit + proportional_extension(limit, 0.8, BudgetConfig::default().min_confidence)
    });
    assert_eq!(limit, 20);
    assert!(limit > 15);
}

#[tokio::test(start_paused = true)]
async fn extension_is_proportional_not_flat() {
    let min_confidence = BudgetConfig::default().min_confidence;
    // The same confidence grants the same share of any limit.
    assert_eq!(proportional_extension(4, 0.5, min_confidence), 2);
    assert_eq!(proportional_extension(40, 0.5, min_confidence), 20);
    assert_eq!(proportional_extension(400, 0.5, min_confidence), 200);
    // Rounded up, never zero, floored at min_confidence, capped at 1.0.
    assert_eq!(proportional_extension(5, 0.5, min_confidence), 3);
    assert_eq!(proportional_extension(1, 0.0, min_confidence), 1);
    assert_eq!(proportional_extension(40, 0.0, min_confidence), 10);
    assert_eq!(proportional_extension(40, 1.0, min_confidence), 40);
    // Through the checkpoint, the granted steps follow the limit.
    let rig = rig([Scripted::decision("EXTEND", "half way", 0.5)]).await;
    assert_eq!(rig.check(request(40, 0, 3)).await, extend(20, 60));
    assert_eq!(rig.check(request(400, 0, 3)).await, extend(200, 600));
}

#[tokio::test(start_paused = true)]
async fn at_most_three_extensions_whatever_the_evaluator_says() {
    let rig = rig([Scripted::decision("EXTEND", "always more", 1.0)]).await;
    let decisions = drive_loop(&rig, 3, 4).await;
    assert_eq!(
        decisions[..3],
        [extend(3, 6), extend(6, 12), extend(12, 24)]
    );
    assert_eq!(
        decisions[3],
        BudgetDecision::WrapUp {
            reason: "no extensions left: max_extensions = 3".into()
        }
    );
    assert_eq!(
        rig.evaluator.budget_calls(),
        3,
        "the cap asked no evaluator"
    );
    let records = rig.records();
    assert_eq!(records.len(), 4);
    let (name, last) = &records[3];
    assert_eq!(*name, "budget_exhausted");
    assert_eq!(last.decided_by, DecidedBy::Cap);
    assert_eq!((last.figures.limit, last.new_limit), (24, 24));
    assert_eq!(
        (last.figures.extensions_used, last.figures.extensions_left),
        (3, 0)
    );
    assert_eq!(last.evaluator, None);
}

#[tokio::test(start_paused = true)]
async fn cap_holds_even_when_the_request_claims_extensions_left() {
    // A loop that miscounts its extensions still gets no more than
    // max_extensions from the checkpoint.
    let rig = rig([Scripted::decision("EXTEND", "always more", 1.0)]).await;
    let decision = rig.check(request(24, 3, 5)).await;
    assert_eq!(
        decision,
        BudgetDecision::WrapUp {
            reason: "no extensions left: max_extensions = 3".into()
        }
    );
    assert_eq!(rig.only_record().1.decided_by, DecidedBy::Cap);
    // And a loop that says it has none left is believed, whatever the
    // configured cap.
    let decision = rig.check(request(6, 1, 0)).await;
    assert!(matches!(decision, BudgetDecision::WrapUp { .. }));
    assert_eq!(rig.records()[1].1.decided_by, DecidedBy::Cap);
    assert_eq!(rig.evaluator.budget_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn unlimited_budget_is_never_capped() {
    for steps_used in [0, 1, 3, 1_000, u32::MAX] {
        assert!(!checkpoint_due(steps_used, 0));
    }
    assert!(!checkpoint_due(2, 3));
    assert!(checkpoint_due(3, 3));
    // Even with an evaluator that would extend, and no extensions left, an
    // unlimited limit stays unlimited: no cap, no event, no evaluator call.
    let rig = rig([Scripted::decision("EXTEND", "more", 1.0)]).await;
    let mut unlimited = request(0, 3, 0);
    unlimited.figures.steps_used = 500;
    assert_eq!(rig.check(unlimited).await, BudgetDecision::Unlimited);
    assert!(rig.events.events().is_empty());
    assert_eq!(rig.evaluator.budget_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn evaluator_down_wraps_up() {
    assert_breaker_wraps_up(
        Scripted::Fail("connection refused".into()),
        "connection refused",
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn evaluator_panic_wraps_up() {
    assert_breaker_wraps_up(Scripted::Panic, "panicked").await;
}

#[tokio::test(start_paused = true)]
async fn no_evaluator_wraps_up() {
    let rig = rig_with(BudgetConfig::default(), None).await;
    let decision = rig.check(request(5, 0, 3)).await;
    let reason = "no evaluator is configured: wrapping up";
    assert_eq!(
        decision,
        BudgetDecision::WrapUp {
            reason: reason.into()
        }
    );
    let (name, record) = rig.only_record();
    assert_eq!(name, "budget_exhausted");
    assert_eq!(record.decided_by, DecidedBy::Breaker);
    assert_eq!(record.reason, reason);
    assert_eq!(record.evaluator, None);
}

#[tokio::test(start_paused = true)]
async fn evaluator_timeout_wraps_up_at_the_flat_timeout() {
    let config = BudgetConfig {
        evaluator_timeout: secs(15),
        ..BudgetConfig::default()
    };
    let evaluator = ScriptedEvaluator::new([]).with_budget_script([Scripted::Hang]);
    let rig = rig_with(config, Some(evaluator)).await;
    let begun = Instant::now();
    let decision = rig.check(request(5, 0, 3)).await;
    assert_eq!(begun.elapsed(), secs(15), "not decided at the flat timeout");
    assert!(matches!(decision, BudgetDecision::WrapUp { .. }));
    let (name, record) = rig.only_record();
    assert_eq!(name, "budget_exhausted");
    assert_eq!(record.decided_by, DecidedBy::Breaker);
    assert!(
        record.reason.contains("did not answer within 15000 ms"),
        "reason: {}",
        record.reason
    );
    let usage = record.evaluator.expect("the timed-out call is accounted");
    assert_eq!(usage.latency_ms, 15_000);
}

#[tokio::test(start_paused = true)]
async fn a_budget_answer_with_a_duplicate_key_wraps_up() {
    // serde_json alone would keep the last `decision`, EXTEND.
    let answer = r#"{"decision":"WRAP_UP","reason":"r","confidence":1,"decision":"EXTEND"}"#;
    let rig = rig([Scripted::Answer(answer.into())]).await;
    let decision = rig.check(request(5, 0, 3)).await;
    assert!(
        matches!(decision, BudgetDecision::WrapUp { .. }),
        "{decision:?}"
    );
    let (_, record) = rig.only_record();
    assert_eq!(record.decided_by, DecidedBy::Breaker);
    assert!(
        record.reason.contains("duplicate key `decision`"),
        "reason: {}",
        record.reason
    );
}

#[tokio::test(start_paused = true)]
async fn invalid_budget_answer_wraps_up() {
    for answer in [
        "I think we should extend.",
        r#"Sure! {"decision":"EXTEND","reason":"r","confidence":1}"#,
        "```json\n{\"decision\":\"EXTEND\",\"reason\":\"r\",\"confidence\":1}\n```",
        r#"{"decision":"MAYBE","reason":"r","confidence":1}"#,
        r#"{"decision":"extend","reason":"r","confidence":1}"#,
        r#"{"decision":"EXTEND","confidence":1}"#,
        r#"{"decision":"EXTEND","reason":"r"}"#,
        r#"{"decision":"EXTEND","reason":"r","confidence":1.5}"#,
        r#"{"decision":"EXTEND","reason":"r","confidence":-1}"#,
        r#"{"decision":"EXTEND","reason":"r","confidence":"high"}"#,
        r#"{"decision":"EXTEND","reason":"r","confidence":1,"steps":50}"#,
    ] {
        let rig = rig([Scripted::Answer(answer.into())]).await;
        let decision = rig.check(request(5, 0, 3)).await;
        assert!(
            matches!(decision, BudgetDecision::WrapUp { .. }),
            "{answer:?} gave {decision:?}"
        );
        let (name, record) = rig.only_record();
        assert_eq!(name, "budget_exhausted");
        assert_eq!(record.decided_by, DecidedBy::Breaker, "{answer:?}");
        assert!(
            record.reason.contains("refused"),
            "reason: {}",
            record.reason
        );
        assert_eq!(record.confidence, None);
        // The refused answer still cost tokens, and they are accounted.
        let usage = record.evaluator.expect("accounted");
        assert_eq!(
            usage.cost,
            TokenCost {
                counted: false,
                input_tokens: 100,
                output_tokens: 20
            }
        );
    }
}

#[tokio::test(start_paused = true)]
async fn checkpoint_emits_budget_extended_with_figures() {
    let rig = rig([Scripted::decision("EXTEND", "two milestones left", 0.6)]).await;
    let sent = request(10, 1, 2);
    let decision = rig.check(sent.clone()).await;
    assert_eq!(decision, extend(6, 16));
    // The evaluator saw the loop's real state.
    assert_eq!(rig.evaluator.budget_requests(), [sent]);
    // The record was published before the reply arrived.
    let events = rig.events.events();
    assert_eq!(events.len(), 1);
    let Event {
        run_id, path, kind, ..
    } = &events[0];
    assert_eq!((&**run_id, &**path), (RUN, PATH));
    let EventKind::BudgetExtended(record) = kind else {
        panic!("expected budget_extended, got {kind:?}");
    };
    assert_eq!(
        **record,
        BudgetRecord {
            figures: BudgetFigures {
                spending: None,
                steps_used: 10,
                steps_declared: 3,
                limit: 10,
                tool_calls: 4,
                spawns: 1,
                milestones_closed: vec!["outline".into()],
                milestones_open: vec!["draft".into(), "review".into()],
                extensions_used: 1,
                extensions_left: 2,
            },
            new_limit: 16,
            reason: "two milestones left".into(),
            decided_by: DecidedBy::Evaluator,
            confidence: Some(0.6),
            evaluator: Some(EvaluatorUsage {
                model: None,
                spent: None,
                latency_ms: 0,
                cost: TokenCost {
                    counted: false,
                    input_tokens: 100,
                    output_tokens: 20
                },
                consumer: "engine.budget".into(),
            }),
        }
    );
    let json = serde_json::to_value(&events[0]).expect("serializes");
    assert_eq!(json["kind"], "budget_extended");
    assert_eq!(json["decided_by"], "evaluator");
    assert_eq!(json["evaluator"]["consumer"], "engine.budget");
}

#[tokio::test(start_paused = true)]
async fn checkpoint_emits_budget_exhausted_with_figures() {
    let rig = rig([Scripted::decision("WRAP_UP", "the draft is done", 0.9)]).await;
    let decision = rig.check(request(6, 1, 2)).await;
    assert_eq!(
        decision,
        BudgetDecision::WrapUp {
            reason: "the draft is done".into()
        }
    );
    let events = rig.events.events();
    assert_eq!(events.len(), 1);
    assert_eq!((&*events[0].run_id, &*events[0].path), (RUN, PATH));
    let EventKind::BudgetExhausted(record) = &events[0].kind else {
        panic!("expected budget_exhausted, got {:?}", events[0].kind);
    };
    assert_eq!(
        **record,
        BudgetRecord {
            figures: BudgetFigures {
                spending: None,
                steps_used: 6,
                steps_declared: 3,
                limit: 6,
                tool_calls: 4,
                spawns: 1,
                milestones_closed: vec!["outline".into()],
                milestones_open: vec!["draft".into(), "review".into()],
                extensions_used: 1,
                extensions_left: 2,
            },
            new_limit: 6,
            reason: "the draft is done".into(),
            decided_by: DecidedBy::Evaluator,
            confidence: Some(0.9),
            evaluator: Some(EvaluatorUsage {
                model: None,
                spent: None,
                latency_ms: 0,
                cost: TokenCost {
                    counted: false,
                    input_tokens: 100,
                    output_tokens: 20
                },
                consumer: BUDGET_CONSUMER.into(),
            }),
        }
    );
    let json = serde_json::to_value(&events[0]).expect("serializes");
    assert_eq!(json["kind"], "budget_exhausted");
    assert_eq!(json["new_limit"], 6);
}

#[tokio::test(start_paused = true)]
async fn slow_budget_evaluation_does_not_delay_another_checkpoint() {
    // Loop A's evaluation takes 10 s; loop B's checkpoint, asked while A's
    // is in flight, is decided at once.
    let rig = rig([
        Scripted::AnswerAfter(
            secs(10),
            r#"{"decision":"EXTEND","reason":"slow A","confidence":1}"#.into(),
        ),
        Scripted::decision("WRAP_UP", "fast B", 1.0),
    ])
    .await;
    let begun = Instant::now();
    let checkpoint = rig.checkpoint.clone();
    let a =
        tokio::spawn(
            async move { BudgetCheckpointActor::check(&checkpoint, request(5, 0, 3)).await },
        );
    while rig.evaluator.budget_calls() < 1 {
        tokio::task::yield_now().await;
    }
    let mut b = request(8, 0, 3);
    b.path = "run/worker:review#2".into();
    assert_eq!(
        rig.check(b).await,
        BudgetDecision::WrapUp {
            reason: "fast B".into()
        }
    );
    assert_eq!(
        begun.elapsed(),
        Duration::ZERO,
        "B waited for A's evaluation"
    );
    assert_eq!(a.await.expect("A's check"), extend(5, 10));
    assert_eq!(begun.elapsed(), secs(10));
    let paths: Vec<_> = rig
        .events
        .events()
        .into_iter()
        .map(|e| e.path.to_string())
        .collect();
    assert_eq!(paths, ["run/worker:review#2", PATH]);
}

#[tokio::test(start_paused = true)]
async fn a_budget_config_above_3_extensions_is_refused_and_no_checkpoint_starts() {
    assert_eq!(MAX_EXTENSIONS, 3);
    for max_extensions in [0, 1, 3] {
        let config = BudgetConfig {
            max_extensions,
            ..BudgetConfig::default()
        };
        assert_eq!(config.validate(), Ok(()), "{max_extensions} refused");
    }
    for max_extensions in [4, 100, u32::MAX] {
        let config = BudgetConfig {
            max_extensions,
            ..BudgetConfig::default()
        };
        let error = config.validate().expect_err("above the cap");
        assert_eq!(error.field, "budget.max_extensions");
        assert!(error.expected.starts_with("at most 3"), "{error}");
        assert_eq!(error.got, max_extensions.to_string());
        let started = BudgetCheckpointActor::start(BudgetCheckpointArgs {
            prices: Default::default(),
            config,
            evaluator: None,
            events: Arc::new(RecordingSink::new()),
        })
        .await;
        assert!(
            matches!(&started, Err(StartError::Config(e)) if e.field == "budget.max_extensions"),
            "a checkpoint started with max_extensions = {max_extensions}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn budget_config_refuses_nonsense_naming_the_field() {
    let defaults = BudgetConfig::default();
    assert_eq!(defaults.max_extensions, 3);
    assert_eq!(defaults.evaluator_timeout, secs(15));
    assert_eq!(defaults.min_confidence, 0.25);
    assert_eq!(defaults.validate(), Ok(()));
    assert_eq!(
        BudgetConfig {
            min_confidence: 1.0,
            max_extensions: 0,
            ..defaults
        }
        .validate(),
        Ok(())
    );

    let field = |config: BudgetConfig| config.validate().map_err(|e| e.field);
    assert_eq!(
        field(BudgetConfig {
            evaluator_timeout: Duration::ZERO,
            ..defaults
        }),
        Err("budget.evaluator_timeout".into())
    );
    for min_confidence in [0.0, -0.5, 1.01, f64::NAN, f64::INFINITY] {
        assert_eq!(
            field(BudgetConfig {
                min_confidence,
                ..defaults
            }),
            Err("budget.min_confidence".into()),
            "accepted min_confidence {min_confidence}"
        );
    }

    // Starting refuses it too, with the same error.
    let started = BudgetCheckpointActor::start(BudgetCheckpointArgs {
        prices: Default::default(),
        config: BudgetConfig {
            evaluator_timeout: Duration::ZERO,
            ..defaults
        },
        evaluator: None,
        events: Arc::new(RecordingSink::new()),
    })
    .await;
    assert!(matches!(
        started,
        Err(StartError::Config(error)) if error.field == "budget.evaluator_timeout"
    ));
}

/// A do-nothing supervisor, for spawning the checkpoint linked.
struct Parent;

impl Actor for Parent {
    type Msg = ();
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn checkpoint_spawns_linked_under_a_supervisor() {
    let (parent, _) = Actor::spawn(None, Parent, ()).await.expect("parent");
    let events = RecordingSink::new();
    let evaluator = ScriptedEvaluator::new([]).with_budget_script([Scripted::decision(
        "EXTEND",
        "converging",
        1.0,
    )]);
    let (checkpoint, _) = Actor::spawn_linked(
        None,
        BudgetCheckpointActor,
        BudgetCheckpointArgs {
            prices: Default::default(),
            config: BudgetConfig::default(),
            evaluator: Some(Arc::new(evaluator)),
            events: Arc::new(events.clone()),
        },
        parent.get_cell(),
    )
    .await
    .expect("spawned linked");
    assert_eq!(
        BudgetCheckpointActor::check(&checkpoint, request(3, 0, 3)).await,
        extend(3, 6)
    );
    assert_eq!(events.count("budget_extended"), 1);

    // Linked spawning validates the configuration as well.
    let refused = Actor::spawn_linked(
        None,
        BudgetCheckpointActor,
        BudgetCheckpointArgs {
            prices: Default::default(),
            config: BudgetConfig {
                min_confidence: 0.0,
                ..BudgetConfig::default()
            },
            evaluator: None,
            events: Arc::new(events.clone()),
        },
        parent.get_cell(),
    )
    .await;
    assert!(refused.is_err());
}

#[tokio::test(start_paused = true)]
async fn checkpoint_that_is_gone_wraps_up() {
    // A reply dropped unanswered answers WrapUp by the breaker.
    let (reply, rx) = BudgetReply::oneshot();
    drop(reply);
    assert!(matches!(
        rx.await,
        Ok(BudgetDecision::WrapUp { reason }) if reason.contains("breaker")
    ));
    // And so does a checkpoint that has stopped.
    let rig = rig_with(BudgetConfig::default(), None).await;
    rig.checkpoint.stop(None);
    while rig.checkpoint.get_status() != ractor::ActorStatus::Stopped {
        tokio::task::yield_now().await;
    }
    assert!(matches!(
        rig.check(request(5, 0, 3)).await,
        BudgetDecision::WrapUp { .. }
    ));
    assert!(rig.events.events().is_empty());
}

/// A `budget_extended` event as the previous version of the schema stored
/// it, byte for byte: the figures, with `new_limit` right after `limit`, then
/// the decision.
const STORED_BUDGET_EXTENDED: &str = concat!(
    r#"{"seq":7,"at":1700000000000,"run_id":"run-1","path":"run/worker:logs:1","#,
    r#""kind":"budget_extended","steps_used":2,"steps_declared":2,"limit":2,"new_limit":4,"#,
    r#""tool_calls":2,"spawns":0,"milestones_closed":["errors_found"],"#,
    r#""milestones_open":["cause_found","fix_found"],"extensions_used":0,"extensions_left":3,"#,
    r#""reason":"every step made progress","decided_by":"evaluator","confidence":1.0,"#,
    r#""evaluator":{"latency_ms":12,"cost":{"input_tokens":100,"output_tokens":20},"#,
    r#""consumer":"engine.budget"}}"#
);

/// A `budget_exhausted` event by the cap, as the previous version stored it:
/// no confidence and no evaluator.
const STORED_BUDGET_EXHAUSTED: &str = concat!(
    r#"{"seq":9,"at":1700000000500,"run_id":"run-1","path":"run","#,
    r#""kind":"budget_exhausted","steps_used":24,"steps_declared":3,"limit":24,"new_limit":24,"#,
    r#""tool_calls":30,"spawns":2,"milestones_closed":[],"milestones_open":["review"],"#,
    r#""extensions_used":3,"extensions_left":0,"#,
    r#""reason":"no extensions left: max_extensions = 3","decided_by":"cap"}"#
);

#[test]
fn a_budget_event_stored_by_the_previous_version_decodes_and_reencodes_byte_for_byte() {
    let extended: Event = serde_json::from_str(STORED_BUDGET_EXTENDED).expect("decodes");
    let EventKind::BudgetExtended(record) = &extended.kind else {
        panic!("expected budget_extended, got {:?}", extended.kind);
    };
    assert_eq!(
        record.figures,
        BudgetFigures {
            spending: None,
            steps_used: 2,
            steps_declared: 2,
            limit: 2,
            tool_calls: 2,
            spawns: 0,
            milestones_closed: vec!["errors_found".into()],
            milestones_open: vec!["cause_found".into(), "fix_found".into()],
            extensions_used: 0,
            extensions_left: 3,
        }
    );
    assert_eq!(record.new_limit, 4);
    assert_eq!(record.confidence, Some(1.0));
    assert_eq!(
        record.evaluator.as_ref().map(|e| e.consumer.as_str()),
        Some(BUDGET_CONSUMER)
    );
    assert_eq!(
        serde_json::to_string(&extended).expect("encodes"),
        STORED_BUDGET_EXTENDED
    );

    let exhausted: Event = serde_json::from_str(STORED_BUDGET_EXHAUSTED).expect("decodes");
    let EventKind::BudgetExhausted(record) = &exhausted.kind else {
        panic!("expected budget_exhausted, got {:?}", exhausted.kind);
    };
    assert_eq!((record.figures.limit, record.new_limit), (24, 24));
    assert_eq!(
        (record.decided_by, record.confidence),
        (DecidedBy::Cap, None)
    );
    assert_eq!(
        serde_json::to_string(&exhausted).expect("encodes"),
        STORED_BUDGET_EXHAUSTED
    );
}

#[test]
fn the_budget_evaluation_request_shows_its_figures_flat_in_the_same_order() {
    assert_eq!(
        serde_json::to_string(&request(3, 1, 2)).expect("encodes"),
        concat!(
            r#"{"run_id":"run-7","path":"run/worker:research#1","#,
            r#""steps_used":3,"steps_declared":3,"limit":3,"tool_calls":4,"spawns":1,"#,
            r#""milestones_closed":["outline"],"milestones_open":["draft","review"],"#,
            r#""extensions_used":1,"extensions_left":2,"#,
            r#""transcript_tail":[{"role":"assistant","content":"drafting section 2"}]}"#
        )
    );
}
