//! A run's course, loop by loop — its steps, its calls' ends, its
//! verdicts, its budget decisions, its restarts, its pauses, stops and
//! resumes, its end — and the comparison of a replay's with its
//! recording's.
//!
//! The replay's events are gathered by a sink of the replay's engine
//! ([`Gathered`]), which counts each loop's course as it is emitted, so
//! that the replay can stop its executor exactly where the recording's
//! stopped; and which, as each call starts (before its lease is
//! registered), puts the pace its recorded lease was seeded with in the
//! engine's book, so that the lease is seeded with it again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use leasehold_actors::{Event, EventKind, EventSink, PaceBook};
use tokio::sync::watch;

use super::script::Invocation;
use super::{Divergence, Recording, ReplayReport};

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
        EventKind::RunForked {
            loop_path, step, ..
        } => format!("forked at {loop_path} step {step}"),
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

/// Each loop's course, in order.
fn courses(events: &[Event]) -> BTreeMap<String, Vec<String>> {
    let mut by_loop: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in events {
        if let Some(entry) = course_entry(&event.kind) {
            by_loop
                .entry(loop_of(&event.path).to_owned())
                .or_default()
                .push(entry);
        }
    }
    by_loop
}

/// The replay's events, as its engine emits them, with each loop's course
/// counted.
#[derive(Clone)]
pub(super) struct Gathered {
    events: Arc<Mutex<Vec<Event>>>,
    counts: Arc<Mutex<Counts>>,
    /// Bumped on each entry of a course.
    moved: watch::Sender<u64>,
    /// The recording's invocations, by call path: their seeds.
    invocations: Arc<BTreeMap<String, Vec<Invocation>>>,
    /// How many invocations of each call have started in the replay.
    started: Arc<Mutex<BTreeMap<String, usize>>>,
    /// The book of the replay's current engine.
    book: Arc<Mutex<Option<PaceBook>>>,
    /// The model calls started and not yet asked (the replay's model's).
    model_calls: Arc<Mutex<Vec<(String, u32)>>>,
}

impl Gathered {
    pub fn new(
        invocations: Arc<BTreeMap<String, Vec<Invocation>>>,
        model_calls: Arc<Mutex<Vec<(String, u32)>>>,
    ) -> Self {
        Self {
            events: Arc::default(),
            counts: Arc::default(),
            moved: watch::Sender::new(0),
            invocations,
            started: Arc::default(),
            book: Arc::default(),
            model_calls,
        }
    }

    /// The pace book of the engine the replay now runs on.
    pub fn seed_into(&self, book: PaceBook) {
        *self.book.lock().unwrap_or_else(PoisonError::into_inner) = Some(book);
    }

    /// A call at `call` starts: the pace its recorded lease was seeded
    /// with goes into the book under that lease's key, where the lease
    /// about to be registered looks it up.
    fn starts(&self, call: String) {
        let n = {
            let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
            let n = started.entry(call.clone()).or_default();
            *n += 1;
            *n - 1
        };
        let seed = self
            .invocations
            .get(&call)
            .and_then(|all| all.get(n))
            .and_then(|i| i.seed.clone());
        if let Some(seed) = seed
            && let Some(book) = &*self.book.lock().unwrap_or_else(PoisonError::into_inner)
        {
            book.set(&seed.key, seed.pace, false);
        }
    }

    /// Every event of `run_id` so far.
    pub fn events_of(&self, run_id: &str) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|e| e.run_id == run_id)
            .cloned()
            .collect()
    }

    /// Whether every loop's course has come as far as `target` says.
    pub fn reached(&self, target: &Counts) -> bool {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        target
            .iter()
            .all(|(path, n)| counts.get(path).copied().unwrap_or(0) >= *n)
    }

    /// Waits until [`Self::reached`] holds for `target`.
    pub async fn until(&self, target: &Counts) {
        let mut moved = self.moved.subscribe();
        let _ = moved.wait_for(|_| self.reached(target)).await;
    }
}

impl EventSink for Gathered {
    fn emit(&self, run_id: &str, path: &str, kind: EventKind) {
        match &kind {
            EventKind::ModelCallStarted { step, .. } => {
                self.starts(format!("{path}/model_call:{step}"));
                self.model_calls
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((path.to_owned(), *step));
            }
            EventKind::ToolCallStarted { .. } | EventKind::WorkerSpawned { .. } => {
                self.starts(path.to_owned());
            }
            _ => {}
        }
        let entry = course_entry(&kind).is_some();
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let seq = u64::try_from(events.len()).unwrap_or(u64::MAX) + 1;
        events.push(Event {
            seq,
            position: 0,
            at: 0,
            run_id: run_id.to_owned(),
            path: path.to_owned(),
            kind,
        });
        drop(events);
        if entry {
            *self
                .counts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(loop_of(path).to_owned())
                .or_default() += 1;
            self.moved.send_modify(|n| *n += 1);
        }
    }
}

/// How `replayed` compares with `recording`, loop by loop.
pub(super) fn compare(
    recording: &Recording,
    replayed_status: leasehold_actors::RunStatus,
    replayed: &[Event],
) -> ReplayReport {
    let recorded = courses(&recording.events);
    let played = courses(replayed);
    let mut divergence = None;
    let loops: std::collections::BTreeSet<&String> = recorded.keys().chain(played.keys()).collect();
    for path in loops {
        let empty = Vec::new();
        let (a, b) = (
            recorded.get(path).unwrap_or(&empty),
            played.get(path).unwrap_or(&empty),
        );
        let Some(at) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) else {
            continue;
        };
        let step = a[..at.min(a.len())]
            .iter()
            .rev()
            .find_map(|e| e.strip_prefix("step ").and_then(|n| n.parse().ok()))
            .unwrap_or(0);
        divergence = Some(Divergence {
            path: path.clone(),
            step,
            recorded: a.get(at).cloned().unwrap_or_else(|| "nothing".to_owned()),
            replayed: b.get(at).cloned().unwrap_or_else(|| "nothing".to_owned()),
        });
        break;
    }
    let count = |prefix: &str| {
        recorded
            .values()
            .flatten()
            .filter(|e| e.starts_with(prefix))
            .count()
    };
    ReplayReport {
        run_id: recording.run_id.clone(),
        recorded_status: recording.status,
        replayed_status,
        steps: count("step "),
        verdicts: count("verdict "),
        divergence,
        unanswered: Vec::new(),
    }
}
