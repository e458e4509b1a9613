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

use super::entry::{Counts, course_entry, loop_of};
use super::script::Invocation;
use super::{Divergence, Recording, ReplayReport};

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
            .filter(|e| *e.run_id == *run_id)
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
            // A call that ended without asking (stopped as it started), or
            // a loop that ended with one started: none of its requests is
            // to come, and a later loop's request that agrees with its
            // conversation is not its.
            EventKind::ModelCallFinished { step, .. } => {
                let mut calls = self
                    .model_calls
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some(n) = calls.iter().position(|(p, s)| p == path && s == step) {
                    calls.remove(n);
                }
            }
            EventKind::WorkerFinished { .. } => {
                self.model_calls
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain(|(p, _)| p != path);
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
            run_id: run_id.into(),
            path: path.into(),
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
