//! The property the thesis rests on, on generated workloads: operations
//! drawn from a seed — healthy slow ones of every kind (progress toward a
//! total, token streams with stalls that recover, late first tokens,
//! prompts of two sizes on one endpoint whose paces are learned as they
//! go) and dead ones (silent from the start, after some items, or sending
//! only keepalives) — played one after another through the real lease
//! actor and watchdog, on paused time, under the default terms:
//!
//! - no healthy operation is ever cut;
//! - every dead one is given up within the printed bound of one attempt,
//!   and one lease period, counted from its last item;
//! - the judge is asked a bounded number of times per operation.
//!
//! The judge renews whatever it is asked, so that only the runtime's own
//! mechanisms — the cap, its checkpoints, the ceiling, learned paces — can
//! cut anything. A failing case is shrunk and kept by proptest
//! (`generated.proptest-regressions`), and replays from there.

mod common;

use std::time::Duration;

use common::*;
use leasehold_actors::{
    MAX_CAP_CHECKPOINTS, PaceMode,
    prelude::*,
    testing::{Scripted, ScriptedEvaluator},
};
use proptest::prelude::*;
use tokio::time::{Instant, sleep};

/// The default cap and ladder.
const MAX_RENEWALS: u32 = 10;
const FREE_RENEWALS: u32 = 2;
/// How long the judge takes to answer.
const JUDGE_MS: u64 = 300;

/// One operation of a generated workload.
#[derive(Clone, Debug)]
enum Op {
    /// A tool reporting progress toward its total.
    Progress { steps: u32, every_ms: u64 },
    /// A model streaming an answer: its first token late or not, its
    /// chunks at a pace, perhaps one stall that recovers; `large` is the
    /// prompt's size (its own pace key on the same endpoint).
    Tokens {
        large: bool,
        first_ms: u64,
        every_ms: u64,
        chunks: u32,
        stall: Option<(u32, u64)>,
    },
    /// A call that dies: after `items` chunks it falls silent for good, or
    /// sends only keepalives.
    Dead {
        items: u32,
        keepalive_ms: Option<u64>,
    },
}

impl Op {
    fn healthy(&self) -> bool {
        !matches!(self, Op::Dead { .. })
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (5u32..40, 200u64..1_500).prop_map(|(steps, every_ms)| Op::Progress { steps, every_ms }),
        5 => (
            any::<bool>(),
            0u64..2_000,
            20u64..250,
            20u32..400,
            proptest::option::of((1u32..300, 500u64..8_000)),
        )
            .prop_map(|(large, first_ms, every_ms, chunks, stall)| {
                // A large prompt takes longer to its first token.
                let first_ms = if large { first_ms * 4 } else { first_ms };
                Op::Tokens { large, first_ms, every_ms, chunks, stall }
            }),
        2 => (0u32..50, proptest::option::of(100u64..2_000))
            .prop_map(|(items, keepalive_ms)| Op::Dead { items, keepalive_ms }),
    ]
}

const ENDPOINT: &str = "model generated at http://127.0.0.1/v1";

fn key(large: bool) -> String {
    let size = if large {
        "4k to 16k tokens"
    } else {
        "under 1k tokens"
    };
    format!("model_stream:{ENDPOINT} · generated · run · {size}")
}

/// Plays `op` as run `n`'s call: its outcome, when it fell silent for good
/// (a dead one), and how many times the judge was asked about it.
async fn play(rig: &Rig, n: usize, op: Op) -> (Result<(), LeaseError>, Option<Instant>, usize) {
    let before = rig.evaluator.calls();
    let silent_from = std::sync::Arc::new(std::sync::Mutex::new(None));
    let spec = match &op {
        Op::Progress { .. } => LeaseSpec::new(LeaseKind::ToolCall, "operation", secs(2))
            .expect("spec")
            .with_pace_key(Some("tool_call:operation on generated".to_owned())),
        Op::Tokens { large, .. } => LeaseSpec::new(LeaseKind::ModelStream, "answer", secs(1))
            .expect("spec")
            .with_pace_key(Some(key(*large)))
            .with_endpoint(Some(ENDPOINT.to_owned())),
        Op::Dead { .. } => LeaseSpec::new(LeaseKind::ModelStream, "answer", secs(1))
            .expect("spec")
            .with_pace_key(Some(key(false)))
            .with_endpoint(Some(ENDPOINT.to_owned())),
    }
    .with_max_renewals(MAX_RENEWALS)
    .with_pace_mode(PaceMode::Learn)
    .in_run(format!("run-{n}"), "run/call:1");
    let silent = silent_from.clone();
    let handle = rig
        .leases()
        .supervise(spec, move |evidence: Evidence| async move {
            match op {
                Op::Progress { steps, every_ms } => {
                    for step in 1..=steps {
                        sleep(millis(every_ms)).await;
                        evidence.progress_value(f64::from(step), Some(f64::from(steps)), "step");
                    }
                }
                Op::Tokens {
                    first_ms,
                    every_ms,
                    chunks,
                    stall,
                    ..
                } => {
                    sleep(millis(first_ms)).await;
                    for chunk in 0..chunks {
                        if let Some((at, stall_ms)) = stall
                            && at == chunk
                        {
                            sleep(millis(stall_ms)).await;
                        }
                        evidence.observe_text(&format!(" w{chunk} x{chunk} y{chunk}"));
                        sleep(millis(every_ms)).await;
                    }
                }
                Op::Dead {
                    items,
                    keepalive_ms,
                } => {
                    for chunk in 0..items {
                        evidence.observe_text(&format!(" w{chunk} x{chunk} y{chunk}"));
                        sleep(millis(50)).await;
                    }
                    *silent.lock().expect("lock") = Some(Instant::now());
                    loop {
                        match keepalive_ms {
                            Some(every) => {
                                sleep(millis(every)).await;
                                evidence.keepalive();
                            }
                            None => std::future::pending::<()>().await,
                        }
                    }
                }
            }
        })
        .expect("started");
    let outcome = handle.outcome().await;
    let silent = *silent_from.lock().expect("lock");
    (outcome, silent, rig.evaluator.calls() - before)
}

/// The printed bound of one attempt of a silent operation — every lease
/// period to the cap, and every evaluation the cap allows — and, for one
/// that fell silent mid-way, one period and one evaluation more: the
/// expiry after its last item was not doubt.
fn printed_bound(lease: Duration) -> Duration {
    lease * (MAX_RENEWALS + 2) + millis(JUDGE_MS) * (MAX_RENEWALS - FREE_RENEWALS + 1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn no_healthy_operation_is_cut_and_every_dead_one_is_found_within_the_printed_bound(
        ops in proptest::collection::vec(op(), 1..10),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let evaluator = ScriptedEvaluator::new([Scripted::AnswerAfter(
                millis(JUDGE_MS),
                r#"{"verdict": "RENEW", "reason": "renews anything", "nudge": null}"#.to_owned(),
            )]);
            let rig = rig(config(FREE_RENEWALS, MAX_RENEWALS), Some(evaluator)).await;
            for (n, op) in ops.into_iter().enumerate() {
                let healthy = op.healthy();
                let (outcome, silent_from, judged) = play(&rig, n, op.clone()).await;
                if healthy {
                    prop_assert_eq!(&outcome, &Ok(()), "a healthy operation was cut: {:?}", op);
                } else {
                    prop_assert!(outcome.is_err(), "a dead operation was never found: {:?}", op);
                    let silent_from = silent_from.expect("it fell silent");
                    let took = Instant::now().saturating_duration_since(silent_from);
                    prop_assert!(
                        took <= printed_bound(secs(1)),
                        "found {:?} after it fell silent, past the bound {:?}: {:?}",
                        took, printed_bound(secs(1)), op
                    );
                }
                // Every counted expiry may ask, and so may one early
                // expiry a silence; the cap and its checkpoints bound them.
                let most = (MAX_RENEWALS + MAX_CAP_CHECKPOINTS * (MAX_RENEWALS - FREE_RENEWALS)) as usize + 2;
                prop_assert!(judged <= most, "{} judge calls for {:?}", judged, op);
            }
            Ok(())
        })?;
    }
}
