//! A course's entries: which events make a loop's course, and the loop an
//! event belongs to. What the course and the script both read, importing
//! neither.

use std::collections::BTreeMap;

use leasehold_actors::{Event, EventKind};

/// How many entries of its course each loop has, by loop path.
pub(super) type Counts = BTreeMap<String, usize>;

/// The loop an event belongs to: its path, without a call's last part.
pub(super) fn loop_of(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some((parent, last))
            if last.starts_with("model_call:") || last.starts_with("tool_call:") =>
        {
            parent
        }
        _ => path,
    }
}

/// What an event says of its loop's course, if it is part of it.
pub(super) fn course_entry(kind: &EventKind) -> Option<String> {
    Some(match kind {
        EventKind::RunForked(fork) => format!("forked at {} step {}", fork.loop_path, fork.step),
        EventKind::RunResumed { .. } => "claimed and resumed from its snapshots".to_owned(),
        EventKind::StepStarted { step, .. } => format!("step {step}"),
        EventKind::ModelCallFinished {
            outcome,
            tool_calls,
            ..
        } => format!(
            "model call {outcome:?} asking for {}",
            leasehold::counted(*tool_calls, "call")
        ),
        EventKind::ToolCallReplayed { tool, .. } => format!("tool {tool}: replayed, not sent"),
        EventKind::ToolResultTruncated {
            tool,
            original_bytes,
            kept_bytes,
            ..
        } => format!("tool {tool}: result of {original_bytes} bytes cut to {kept_bytes}"),
        EventKind::ToolCallFinished { tool, outcome, .. } => format!("tool {tool}: {outcome:?}"),
        EventKind::Verdict(record) => format!(
            "verdict {} by {} on {}{}",
            record.verdict.as_str(),
            record.decided_by.as_str(),
            record.lease_kind,
            if record.early { ", early" } else { "" }
        ),
        EventKind::BudgetExtended(record) => format!(
            "budget extended to {} by {}",
            record.new_limit, record.decided_by
        ),
        EventKind::BudgetExhausted(record) => format!("budget exhausted by {}", record.decided_by),
        EventKind::Restarted { attempt, .. } => format!("restart: attempt {attempt}"),
        EventKind::GaveUp {
            subject,
            attempts,
            handed_to,
            ..
        } => format!(
            "gave {subject} up after {}, to {handed_to}",
            leasehold::counted(*attempts, "attempt")
        ),
        EventKind::WorkerSpawned { worker, .. } => format!("worker {worker} spawned"),
        EventKind::WorkerFinished {
            worker, outcome, ..
        } => format!("worker {worker}: {outcome:?}"),
        EventKind::ReconciliationRequired { tool, .. } => {
            format!("tool {tool}: its outcome unknown, a person decides")
        }
        EventKind::Paused { .. } => "paused".to_owned(),
        EventKind::Resumed { by: Some(by), .. } => format!("resumed: {by}"),
        EventKind::Resumed { .. } => "a person answered".to_owned(),
        EventKind::RunCompleted { answer, .. } => format!("completed: {answer}"),
        EventKind::RunFailed { reason } => format!("failed: {reason}"),
        EventKind::RunCancelled { reason } => format!("cancelled: {reason}"),
        _ => return None,
    })
}

/// How many entries of its course each loop has in `events`.
pub(super) fn counts(events: &[Event]) -> Counts {
    let mut counts = Counts::new();
    for event in events {
        if course_entry(&event.kind).is_some() {
            *counts.entry(loop_of(&event.path).to_owned()).or_default() += 1;
        }
    }
    counts
}
