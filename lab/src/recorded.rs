//! Counterfactuals from real runs: what a run's log kept of each operation
//! its leases watched (`operation_timed`: how long it ran, its items, its
//! longest silence, how it ended) made the workload, and played under
//! each strategy as a drawn workload is.
//!
//! An operation is a call (its loop path: `run/model_call:2`), with the
//! attempts its runs made of it. Its timing becomes a lab [`Operation`]:
//!
//! - a model stream: as many chunks as its attempt that ended streamed,
//!   their typical gap, its first chunk's wait, and the first attempt's
//!   longest silence as a stall (from after the item it followed) when it
//!   was more than three gaps long;
//! - a blocking model call: one chunk, after its whole time;
//! - a tool call: its time, its progress cadence if it reported progress,
//!   and its longest silence as a stall;
//! - an operation none of whose attempts ended by itself, as a hang from
//!   its last item on: what it would have done after it was cut is not
//!   known, so it is taken to have made no more progress.
//!
//! Worker steps are not played (a worker is a loop of calls, each recorded
//! on its own): they are counted as skipped. The evaluator's answers about
//! an operation are the real ones where there were some, judged right when
//! they agree with how the operation really went.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_actors::{
    Event, EventKind, LeaseKind, OperationTiming, RunStatus, TimedEnd, Verdict,
};
use serde::Serialize;

use super::runner::{OperationOutcome, run_strategy};
use super::strategy::Strategy;
use super::workload::{EVALUATOR_ANSWERS, EvaluatorLoad, MAX_CHUNKS, Operation, OperationKind};
use super::{ExperimentError, Plan, Report};

/// One call of a real run, as its log recorded it, and what it makes in
/// the lab.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedOperation {
    /// The run.
    pub run_id: String,
    /// The call's path in the run (`run/model_call:2`).
    pub path: String,
    /// What its leases watched.
    pub lease_kind: LeaseKind,
    /// What it was doing.
    pub subject: String,
    /// Each attempt's timing, in order.
    pub attempts: Vec<OperationTiming>,
    /// Attempts cut by a verdict (`INTERVENE`, `ESCALATE`, the renewal
    /// cap), as really happened.
    pub real_kills: u32,
    /// Whether an attempt ended by itself (it answered, or failed on its
    /// own).
    pub real_answered: bool,
    /// The operation played in the lab.
    pub operation: Operation,
}

/// The operations of one run's log, in the order their first attempts
/// ended; and what could not be played, and why.
pub fn recorded_operations(
    run_id: &str,
    events: &[Event],
) -> (Vec<RecordedOperation>, Vec<String>) {
    struct Call {
        kind: LeaseKind,
        subject: String,
        attempts: Vec<(u64, OperationTiming)>,
    }
    let mut calls: Vec<(String, Call)> = Vec::new();
    let mut killed: BTreeMap<u64, ()> = BTreeMap::new();
    let mut verdicts: BTreeMap<u64, Vec<Verdict>> = BTreeMap::new();
    for event in events {
        match &event.kind {
            EventKind::OperationTimed {
                lease_id,
                lease_kind,
                subject,
                timing,
            } => {
                let at = calls.iter().position(|(path, _)| **path == *event.path);
                let at = at.unwrap_or_else(|| {
                    calls.push((
                        event.path.to_string(),
                        Call {
                            kind: *lease_kind,
                            subject: subject.clone(),
                            attempts: Vec::new(),
                        },
                    ));
                    calls.len() - 1
                });
                calls[at].1.attempts.push((lease_id.0, (**timing).clone()));
            }
            EventKind::Intervened { lease_id, .. }
            | EventKind::Escalated { lease_id, .. }
            | EventKind::RenewalCapReached { lease_id, .. } => {
                killed.insert(lease_id.0, ());
            }
            EventKind::Verdict(record) if record.evaluator.is_some() => {
                verdicts
                    .entry(record.lease_id.0)
                    .or_default()
                    .push(record.verdict);
            }
            _ => {}
        }
    }
    let mut operations = Vec::new();
    let mut skipped = Vec::new();
    for (path, call) in calls {
        let timings: Vec<OperationTiming> = call.attempts.iter().map(|(_, t)| t.clone()).collect();
        let real_answered = timings.iter().any(|t| t.ended == TimedEnd::Ended);
        let answers: Vec<Verdict> = call
            .attempts
            .iter()
            .flat_map(|(id, _)| verdicts.get(id).cloned().unwrap_or_default())
            .collect();
        let Some(operation) = operation_of(call.kind, &timings, &answers) else {
            skipped.push(format!(
                "{run_id} {path}: a {} is not played (each call of a worker is, on its own)",
                call.kind
            ));
            continue;
        };
        let real_kills = call
            .attempts
            .iter()
            .filter(|(id, _)| killed.contains_key(id))
            .count();
        operations.push(RecordedOperation {
            run_id: run_id.to_owned(),
            path,
            lease_kind: call.kind,
            subject: call.subject,
            attempts: timings,
            real_kills: u32::try_from(real_kills).unwrap_or(u32::MAX),
            real_answered,
            operation,
        });
    }
    (operations, skipped)
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// The typical time between two items of `timing`, its longest silence
/// aside; `None` with fewer than two items.
fn typical_gap(timing: &OperationTiming) -> Option<Duration> {
    let (first, last) = (timing.first_item_ms?, timing.last_item_ms?);
    let gaps = timing.items.checked_sub(1).filter(|n| *n > 0)?;
    let span = last.saturating_sub(first);
    let (span, gaps) = if timing.silence_after > 0 && gaps > 1 {
        (span.saturating_sub(timing.longest_silence_ms), gaps - 1)
    } else {
        (span, gaps)
    };
    Some(millis((span / gaps).max(1)))
}

/// The longest silence of an attempt — between items, or from its last
/// item to its cut — and how many items came before it.
fn silence_of(timing: &OperationTiming) -> (Duration, u64) {
    let trailing = timing
        .duration_ms
        .saturating_sub(timing.last_item_ms.unwrap_or(0));
    if timing.ended == TimedEnd::Cut && trailing > timing.longest_silence_ms {
        (millis(trailing), timing.items)
    } else {
        (millis(timing.longest_silence_ms), timing.silence_after)
    }
}

/// The lab operation the attempts of one call make, judged by the real
/// evaluator's `answers`; `None` for what is not played (worker steps).
fn operation_of(
    kind: LeaseKind,
    attempts: &[OperationTiming],
    answers: &[Verdict],
) -> Option<Operation> {
    let first = attempts.first()?;
    let alive = attempts.iter().any(|a| a.ended == TimedEnd::Ended);
    // The attempt that ended shows the whole work; else the first.
    let whole = attempts
        .iter()
        .find(|a| a.ended == TimedEnd::Ended)
        .unwrap_or(first);
    let hangs_at = (!alive).then(|| millis(first.last_item_ms.unwrap_or(0)));
    let mut evaluator_right = vec![true; EVALUATOR_ANSWERS];
    for (right, verdict) in evaluator_right.iter_mut().zip(answers) {
        *right = matches!(verdict, Verdict::Renew | Verdict::Nudge) == alive;
    }
    let (silence, after) = silence_of(first);
    let base = Operation {
        kind: OperationKind::ToolCall { progress: None },
        work: millis(whole.duration_ms.max(1)),
        stall: None,
        tool_stall: None,
        hangs_at,
        loops: false,
        dead_until: None,
        first_chunk: None,
        keepalive: None,
        evaluator_right,
        budget_right: Vec::new(),
    };
    match kind {
        LeaseKind::ModelStream => {
            let chunks = u32::try_from(whole.items.max(1))
                .unwrap_or(u32::MAX)
                .min(MAX_CHUNKS);
            let interval = typical_gap(whole).unwrap_or_else(|| millis(whole.duration_ms.max(1)));
            let stalls = after > 0
                && silence > interval.saturating_mul(3)
                && silence >= interval + millis(100);
            let stall = (alive && stalls).then(|| {
                (
                    u32::try_from(after).unwrap_or(u32::MAX),
                    silence.saturating_sub(interval),
                )
            });
            let first_chunk = whole.first_item_ms.map(millis);
            let work = match first_chunk {
                Some(first) => interval
                    .saturating_mul(chunks.saturating_sub(1))
                    .saturating_add(first),
                None => interval.saturating_mul(chunks),
            };
            let keepalive = (whole.keepalives > 0).then(|| {
                silence
                    .checked_div(u32::try_from(whole.keepalives + 1).unwrap_or(u32::MAX))
                    .unwrap_or(silence)
                    .max(millis(1))
            });
            Some(Operation {
                kind: OperationKind::ModelStream { chunks, interval },
                work,
                stall,
                first_chunk,
                keepalive,
                ..base
            })
        }
        LeaseKind::ModelBlocking => {
            let interval = millis(whole.duration_ms.max(1));
            Some(Operation {
                kind: OperationKind::ModelStream {
                    chunks: 1,
                    interval,
                },
                work: interval,
                first_chunk: Some(interval),
                ..base
            })
        }
        LeaseKind::ToolCall => {
            let progress = typical_gap(whole);
            let stalls = progress.is_some_and(|every| silence > every.saturating_mul(3));
            let tool_stall = (alive && stalls).then(|| {
                let start = match (after, first.first_item_ms, progress) {
                    (0, _, _) | (_, None, _) | (_, _, None) => Duration::ZERO,
                    (n, Some(first_item), Some(every)) => millis(first_item).saturating_add(
                        every.saturating_mul(u32::try_from(n - 1).unwrap_or(u32::MAX)),
                    ),
                };
                (start, silence)
            });
            let work = millis(whole.duration_ms)
                .saturating_sub(tool_stall.map_or(Duration::ZERO, |(_, s)| s));
            Some(Operation {
                kind: OperationKind::ToolCall { progress },
                work: work.max(millis(1)),
                tool_stall,
                ..base
            })
        }
        _ => None,
    }
}

/// How the strategy the runs really ran under compares with what they did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OwnStrategy {
    /// Its name.
    pub strategy: String,
    /// Whether it cut each operation as often as the runs did, and left
    /// each answered that answered.
    pub reproduced: bool,
    /// Where it did not, one line each.
    pub differences: Vec<String>,
}

/// A counterfactual report: the lab's report on the recorded operations,
/// and whether the runs' own strategy reproduces what really happened.
#[derive(Clone, Debug, Serialize)]
pub struct Counterfactual {
    /// The runs read.
    pub runs: Vec<String>,
    /// Operations played.
    pub operations: usize,
    /// Operations really cut by a verdict (at least once).
    pub really_cut: usize,
    /// What was not played, and why.
    pub skipped: Vec<String>,
    /// The runs' own strategy against what happened, if it was among the
    /// strategies.
    pub own: Option<OwnStrategy>,
    /// Each strategy's report, as `leasehold experiment` gives it.
    pub report: Report,
}

/// Plays `recorded` under `strategies` on paused time, as
/// [`Plan::run`] plays a workload, and checks the strategy named `own`
/// (the one the runs ran under) against what really happened. Blocks.
pub fn counterfactual(
    runs: Vec<String>,
    recorded: &[RecordedOperation],
    skipped: Vec<String>,
    strategies: Vec<Strategy>,
    own: Option<&str>,
    max_events: Option<u64>,
) -> Result<Counterfactual, ExperimentError> {
    let operations: Vec<Operation> = recorded.iter().map(|r| r.operation.clone()).collect();
    let evaluator = EvaluatorLoad::default();
    let own_strategy = own.and_then(|name| strategies.iter().find(|s| s.name == name).cloned());
    let plan = Plan::of_operations(operations.clone(), strategies, evaluator, max_events)?;
    let report = plan.run(|_| {})?;
    let own = match own_strategy {
        Some(strategy) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()?;
            let outcomes = runtime.block_on(run_strategy(&strategy, &operations, &evaluator))?;
            Some(compare(&strategy.name, recorded, &outcomes))
        }
        None => None,
    };
    Ok(Counterfactual {
        runs,
        operations: recorded.len(),
        really_cut: recorded.iter().filter(|r| r.real_kills > 0).count(),
        skipped,
        own,
        report,
    })
}

/// Each operation's outcome under the runs' own strategy against what
/// really happened.
fn compare(
    strategy: &str,
    recorded: &[RecordedOperation],
    outcomes: &[OperationOutcome],
) -> OwnStrategy {
    let mut differences = Vec::new();
    for (real, played) in recorded.iter().zip(outcomes) {
        let answered = played.answered || played.status == RunStatus::Completed;
        if played.kills != real.real_kills || (real.real_answered && !answered) {
            differences.push(format!(
                "{} {} ({}): really cut {}{}, here {}{}",
                real.run_id,
                real.path,
                real.subject,
                leasehold::counted(real.real_kills, "time"),
                if real.real_answered {
                    " and answered"
                } else {
                    ""
                },
                played.kills,
                if answered {
                    " and answered"
                } else {
                    " and not answered"
                },
            ));
        }
    }
    OwnStrategy {
        strategy: strategy.to_owned(),
        reproduced: differences.is_empty(),
        differences,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(
        items: u64,
        first: u64,
        last: u64,
        longest: u64,
        after: u64,
        duration: u64,
        ended: TimedEnd,
    ) -> OperationTiming {
        OperationTiming {
            duration_ms: duration,
            items,
            first_item_ms: Some(first),
            last_item_ms: Some(last),
            longest_silence_ms: longest,
            silence_after: after,
            keepalives: 0,
            silences: Vec::new(),
            progress: None,
            ended,
            renewals: 0,
        }
    }

    #[test]
    fn a_stream_that_stalled_and_recovered_is_a_stream_with_that_stall() {
        // 20 chunks 100 ms apart, with a 5 s silence after the 10th.
        let recorded = timing(
            20,
            100,
            100 + 18 * 100 + 5_000,
            5_000,
            10,
            7_000,
            TimedEnd::Ended,
        );
        let operation = operation_of(LeaseKind::ModelStream, &[recorded], &[]).unwrap();
        assert_eq!(
            operation.kind,
            OperationKind::ModelStream {
                chunks: 20,
                interval: millis(100)
            }
        );
        assert_eq!(operation.stall, Some((10, millis(4_900))));
        assert!(operation.alive());
    }

    #[test]
    fn a_call_no_attempt_of_which_ended_is_a_hang_from_its_last_item() {
        let cut = timing(5, 100, 500, 100, 1, 20_500, TimedEnd::Cut);
        let operation =
            operation_of(LeaseKind::ToolCall, &[cut.clone(), cut], &[Verdict::Renew]).unwrap();
        assert_eq!(operation.hangs_at, Some(millis(500)));
        assert!(!operation.evaluator_right[0], "a RENEW of a hang was wrong");
        assert!(
            operation_of(
                LeaseKind::WorkerStep,
                &[timing(1, 1, 1, 1, 0, 1, TimedEnd::Ended)],
                &[]
            )
            .is_none()
        );
    }
}
