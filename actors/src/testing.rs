//! Test doubles (feature `test-util`): a scripted evaluator and an event sink
//! that records synchronously, for fast, deterministic tests of the actors on
//! paused time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::event::{Event, EventKind};
use crate::ports::{
    BoxFuture, BudgetEvaluationRequest, Clock, EvaluationRequest, Evaluator, EvaluatorAnswer,
    EvaluatorError, EventSink, TokenCost, TokioClock,
};

/// One scripted answer of a [`ScriptedEvaluator`].
#[derive(Clone, Debug)]
pub enum Scripted {
    /// Answer this text at once.
    Answer(String),
    /// Answer this text after a delay.
    AnswerAfter(Duration, String),
    /// Fail as a transport error would.
    Fail(String),
    /// Never answer.
    Hang,
    /// Panic while evaluating.
    Panic,
}

impl Scripted {
    /// A budget answer of strict JSON with `decision`, `reason` and
    /// `confidence`.
    pub fn decision(decision: &str, reason: &str, confidence: f64) -> Self {
        Self::Answer(
            serde_json::json!({"decision": decision, "reason": reason, "confidence": confidence})
                .to_string(),
        )
    }

    /// An answer of strict JSON with `verdict`, `reason` and `nudge`.
    pub fn verdict(verdict: &str, reason: &str, nudge: &str) -> Self {
        Self::Answer(
            serde_json::json!({"verdict": verdict, "reason": reason, "nudge": nudge}).to_string(),
        )
    }
}

/// An evaluator that plays a script, one step per call, and records every
/// request. When the script runs out it repeats its last step.
#[derive(Clone, Default)]
pub struct ScriptedEvaluator {
    inner: Arc<Mutex<ScriptState>>,
}

#[derive(Default)]
struct ScriptState {
    script: VecDeque<Scripted>,
    last: Option<Scripted>,
    requests: Vec<EvaluationRequest>,
    budget_script: VecDeque<Scripted>,
    budget_last: Option<Scripted>,
    budget_requests: Vec<BudgetEvaluationRequest>,
}

fn next_step(script: &mut VecDeque<Scripted>, last: &mut Option<Scripted>) -> Scripted {
    let step = script
        .pop_front()
        .or_else(|| last.clone())
        .unwrap_or(Scripted::Fail("the script is empty".into()));
    *last = Some(step.clone());
    step
}

fn play(step: Scripted) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
    let cost = TokenCost {
        input_tokens: 100,
        output_tokens: 20,
    };
    Box::pin(async move {
        match step {
            Scripted::Answer(text) => Ok(EvaluatorAnswer { text, cost }),
            Scripted::AnswerAfter(delay, text) => {
                tokio::time::sleep(delay).await;
                Ok(EvaluatorAnswer { text, cost })
            }
            Scripted::Fail(message) => Err(EvaluatorError::new(message)),
            Scripted::Hang => std::future::pending().await,
            Scripted::Panic => panic!("scripted evaluator panic"),
        }
    })
}

impl ScriptedEvaluator {
    /// An evaluator playing `script`.
    pub fn new(script: impl IntoIterator<Item = Scripted>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(ScriptState {
                script: script.into_iter().collect(),
                ..ScriptState::default()
            })),
        }
    }

    /// An evaluator that always answers `verdict`.
    pub fn always(verdict: &str) -> Self {
        Self::new([Scripted::verdict(verdict, "scripted", "scripted nudge")])
    }

    /// Adds a script for budget checkpoints (by default they fail, and the
    /// checkpoint wraps up).
    pub fn with_budget_script(self, script: impl IntoIterator<Item = Scripted>) -> Self {
        self.lock().budget_script = script.into_iter().collect();
        self
    }

    /// How many budget checkpoints asked it.
    pub fn budget_calls(&self) -> usize {
        self.lock().budget_requests.len()
    }

    /// The budget requests it was given, in order.
    pub fn budget_requests(&self) -> Vec<BudgetEvaluationRequest> {
        self.lock().budget_requests.clone()
    }

    /// How many times it was called about a lease.
    pub fn calls(&self) -> usize {
        self.lock().requests.len()
    }

    /// The requests it was given, in order.
    pub fn requests(&self) -> Vec<EvaluationRequest> {
        self.lock().requests.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScriptState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Evaluator for ScriptedEvaluator {
    fn evaluate(
        &self,
        request: EvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        let mut state = self.lock();
        state.requests.push(request);
        let ScriptState { script, last, .. } = &mut *state;
        play(next_step(script, last))
    }

    fn evaluate_budget(
        &self,
        request: BudgetEvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        let mut state = self.lock();
        state.budget_requests.push(request);
        let ScriptState {
            budget_script,
            budget_last,
            ..
        } = &mut *state;
        if budget_script.is_empty() && budget_last.is_none() {
            return play(Scripted::Fail("no budget script".into()));
        }
        play(next_step(budget_script, budget_last))
    }
}

/// An event sink that keeps every event in memory, stamped by a
/// [`TokioClock`], as soon as it is emitted.
#[derive(Clone)]
pub struct RecordingSink {
    events: Arc<Mutex<Vec<Event>>>,
    seq: Arc<AtomicU64>,
    clock: TokioClock,
}

impl Default for RecordingSink {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordingSink {
    /// An empty recorder whose clock reads 2026-01-01T00:00:00Z now.
    pub fn new() -> Self {
        Self {
            events: Arc::default(),
            seq: Arc::default(),
            clock: TokioClock::starting_at(1_767_225_600_000),
        }
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The kinds of every event so far, by name.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.events().iter().map(|e| e.kind.name()).collect()
    }

    /// How many events of kind `name` there were.
    pub fn count(&self, name: &str) -> usize {
        self.events()
            .iter()
            .filter(|e| e.kind.name() == name)
            .count()
    }

    /// The verdict records so far.
    pub fn verdicts(&self) -> Vec<crate::watchdog::VerdictRecord> {
        self.events()
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::Verdict(record) => Some(record),
                _ => None,
            })
            .collect()
    }
}

impl EventSink for RecordingSink {
    fn emit(&self, run_id: &str, path: &str, kind: EventKind) {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        events.push(Event {
            seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
            at: self.clock.now_unix_ms(),
            run_id: run_id.to_owned(),
            path: path.to_owned(),
            kind,
        });
    }
}
