//! Test doubles (feature `test-util`): a scripted evaluator and an event sink
//! that records synchronously, for fast, deterministic tests of the actors on
//! paused time.
//!
//! [`actors`] opens the actors' own protocols — their messages and how to
//! start them alone — to tests and benchmarks of the actors; they are not
//! the public API, and change without notice.
//!
//! [`faults`] makes a store's writes fail on purpose: every Nth, a share
//! drawn from a seed, or all of them for a while.
//!
//! [`conformance`] is the conformance suite of the [`Store`](crate::Store)
//! port: a store of one's own checked against every rule of the port with
//! one call.

pub mod conformance;
pub mod faults;
pub mod records;

/// The actors' protocols, for tests and benchmarks of the actors alone.
pub mod actors {
    pub use crate::supervision::budget::{
        BudgetCheckpointActor, BudgetCheckpointArgs, BudgetMsg, BudgetReply,
    };
    pub use crate::supervision::evaluation::{Judge, JudgeConfig};
    pub use crate::supervision::lease::{LeaseMsg, Registration};
    pub use crate::supervision::watchdog::{
        LeaseExpiry, VerdictReply, WatchdogActor, WatchdogArgs, WatchdogMsg,
    };
}

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
    /// Lease calls in flight, by lease.
    in_flight: std::collections::HashMap<crate::LeaseId, u32>,
    /// The most calls of one lease ever in flight at once.
    max_in_flight: u32,
}

/// Counts a lease's call out of flight when its future ends or is dropped.
struct InFlight {
    state: Arc<Mutex<ScriptState>>,
    lease: crate::LeaseId,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = state.in_flight.get_mut(&self.lease) {
            *n = n.saturating_sub(1);
        }
    }
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
        counted: false,
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

    /// Replaces what is left of its lease script with `script`, forgetting
    /// the step it would repeat: for a caller that plays one operation after
    /// another through the same evaluator.
    pub fn replace_script(&self, script: impl IntoIterator<Item = Scripted>) {
        let mut state = self.lock();
        state.script = script.into_iter().collect();
        state.last = None;
    }

    /// Replaces what is left of its budget script with `script`,
    /// forgetting the step it would repeat.
    pub fn replace_budget_script(&self, script: impl IntoIterator<Item = Scripted>) {
        let mut state = self.lock();
        state.budget_script = script.into_iter().collect();
        state.budget_last = None;
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

    /// The most calls about one lease that were ever in flight at once
    /// (a call is in flight until its answer or its cancellation).
    pub fn max_in_flight(&self) -> u32 {
        self.lock().max_in_flight
    }

    /// Forgets the requests it was given (lease and budget): for a caller
    /// that plays many runs through it and reads none of them, so that
    /// what it keeps does not grow with the runs.
    pub fn clear_requests(&self) {
        let mut state = self.lock();
        state.requests.clear();
        state.budget_requests.clear();
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
        let lease = request.lease_id;
        state.requests.push(request);
        let now = {
            let n = state.in_flight.entry(lease).or_default();
            *n += 1;
            *n
        };
        state.max_in_flight = state.max_in_flight.max(now);
        let ScriptState { script, last, .. } = &mut *state;
        let answer = play(next_step(script, last));
        let guard = InFlight {
            state: Arc::clone(&self.inner),
            lease,
        };
        Box::pin(async move {
            let _guard = guard;
            answer.await
        })
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
    pub fn verdicts(&self) -> Vec<crate::vocabulary::verdict::VerdictRecord> {
        self.events()
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::Verdict(record) => Some(std::sync::Arc::unwrap_or_clone(record)),
                _ => None,
            })
            .collect()
    }
}

impl EventSink for RecordingSink {
    fn emit(&self, run_id: &str, path: &str, kind: EventKind) {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let position = events.iter().filter(|e| *e.run_id == *run_id).count() + 1;
        events.push(Event {
            seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
            position: u64::try_from(position).unwrap_or(u64::MAX),
            at: self.clock.now_unix_ms(),
            run_id: run_id.into(),
            path: path.into(),
            kind,
        });
    }
}

// ---------------------------------------------------------------------------
// Scripted model, scripted tools, in-memory store.
// ---------------------------------------------------------------------------

use std::collections::HashMap;

use crate::ports::{
    ChatMessage, ModelClient, ModelError, ModelReply, ModelRequest, ToolCallRequest, ToolClient,
    ToolDefinition, ToolError, ToolInvocation, ToolOutput,
};
use crate::supervision::evidence::Evidence;

/// One scripted model answer.
#[derive(Clone, Debug)]
pub struct Turn {
    /// The answer's text.
    pub content: String,
    /// The tool calls it asks for.
    pub tool_calls: Vec<ToolCallRequest>,
    /// How many chunks the answer streams in (each is evidence).
    pub chunks: u32,
    /// The time between chunks.
    pub chunk_interval: Duration,
    /// After this many chunks, fall silent for this long.
    pub stall: Option<(u32, Duration)>,
    /// Never finish (after the chunks before the stall, if any).
    pub hang: bool,
    /// Fail with this error instead of answering.
    pub error: Option<ModelError>,
    /// The text each chunk streams, reported with
    /// [`Evidence::observe_text`]; `None` reports chunks without text.
    pub stream_text: Option<StreamText>,
    /// Tokens the answer costs.
    pub usage: TokenCost,
    /// Why the model stopped, as the server would say.
    pub finish_reason: Option<crate::ports::FinishReason>,
    /// The time before the first chunk, if not `chunk_interval` (a
    /// reasoning model thinking silently).
    pub first_chunk: Option<Duration>,
    /// While silent — before the first chunk, in a stall, hung — send a
    /// keepalive this often (an SSE comment: the connection is open, and
    /// nothing more).
    pub keepalive: Option<Duration>,
}

impl Turn {
    /// A final answer (no tool calls): the loop ends.
    pub fn answer(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            tool_calls: Vec::new(),
            chunks: 4,
            chunk_interval: Duration::from_millis(50),
            stall: None,
            hang: false,
            error: None,
            stream_text: None,
            usage: TokenCost {
                counted: false,
                input_tokens: 200,
                output_tokens: 50,
            },
            finish_reason: None,
            first_chunk: None,
            keepalive: None,
        }
    }

    /// An answer that calls tools: `(name, arguments)` pairs.
    pub fn tools(calls: impl IntoIterator<Item = (&'static str, serde_json::Value)>) -> Self {
        let tool_calls = calls
            .into_iter()
            .enumerate()
            .map(|(n, (name, arguments))| ToolCallRequest {
                id: format!("call_{n}"),
                name: name.to_owned(),
                arguments,
            })
            .collect();
        Self {
            tool_calls,
            ..Self::answer("")
        }
    }

    /// An answer that spawns workers: `(kind, task)` pairs.
    pub fn spawn(workers: impl IntoIterator<Item = (&'static str, &'static str)>) -> Self {
        Self::tools(workers.into_iter().map(|(kind, task)| {
            (
                crate::agent::SPAWN_WORKER_TOOL,
                serde_json::json!({"kind": kind, "task": task}),
            )
        }))
    }

    /// A model call that never finishes.
    pub fn hang() -> Self {
        Self {
            hang: true,
            ..Self::answer("")
        }
    }

    /// A model call that fails with `error`.
    pub fn fail(error: ModelError) -> Self {
        Self {
            error: Some(error),
            ..Self::answer("")
        }
    }

    /// An answer cut off at the model's length limit (`finish_reason:
    /// length`).
    pub fn cut_off(mut self) -> Self {
        self.finish_reason = Some(crate::ports::FinishReason::Length);
        self
    }

    /// Streams in `chunks` chunks, `interval` apart.
    pub fn with_chunks(mut self, chunks: u32, interval: Duration) -> Self {
        self.chunks = chunks;
        self.chunk_interval = interval;
        self
    }

    /// A stream that never ends, repeating `sentence` in a chunk every
    /// `interval`: a model stuck in a loop.
    pub fn looping(sentence: impl Into<String>, interval: Duration) -> Self {
        Self {
            stream_text: Some(StreamText::Loop(sentence.into())),
            ..Self::endless(interval)
        }
    }

    /// A stream that never ends, a chunk of different words every
    /// `interval`: a model that is busy and not repeating itself.
    pub fn rambling(interval: Duration) -> Self {
        Self {
            stream_text: Some(StreamText::Varied),
            ..Self::endless(interval)
        }
    }

    fn endless(interval: Duration) -> Self {
        Self {
            hang: true,
            ..Self::answer("").with_chunks(u32::MAX, interval)
        }
    }

    /// The first chunk after `first` instead of one chunk interval.
    pub fn first_chunk_after(mut self, first: Duration) -> Self {
        self.first_chunk = Some(first);
        self
    }

    /// A keepalive every `every` while the stream is silent.
    pub fn with_keepalives(mut self, every: Duration) -> Self {
        self.keepalive = Some(every);
        self
    }

    /// Falls silent for `silence` after `after_chunks` chunks.
    pub fn stall_after(mut self, after_chunks: u32, silence: Duration) -> Self {
        self.stall = Some((after_chunks, silence));
        self
    }
}

/// What the chunks of a scripted stream say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamText {
    /// The same sentence in every chunk.
    Loop(String),
    /// Eight words in every chunk, drawn deterministically from a
    /// vocabulary of 64: no phrase of three words comes back often.
    Varied,
}

impl StreamText {
    /// The text of chunk `n`.
    pub fn chunk(&self, n: u32) -> String {
        match self {
            Self::Loop(sentence) => format!("{sentence} "),
            Self::Varied => {
                // xorshift64, seeded by the chunk's number.
                let mut x = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut text = String::new();
                for _ in 0..8 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let word = usize::try_from(x % 64).unwrap_or_default();
                    text.push_str(VOCABULARY[word]);
                    text.push(' ');
                }
                text
            }
        }
    }
}

const VOCABULARY: [&str; 64] = [
    "lease",
    "timer",
    "watchdog",
    "verdict",
    "stream",
    "token",
    "model",
    "tool",
    "worker",
    "budget",
    "step",
    "run",
    "supervisor",
    "restart",
    "backoff",
    "pause",
    "resume",
    "evidence",
    "phi",
    "window",
    "sample",
    "mean",
    "deviation",
    "threshold",
    "store",
    "fence",
    "owner",
    "snapshot",
    "event",
    "trace",
    "record",
    "reason",
    "nudge",
    "cancel",
    "escalate",
    "renew",
    "intervene",
    "ladder",
    "breaker",
    "cap",
    "flow",
    "config",
    "key",
    "value",
    "default",
    "server",
    "client",
    "request",
    "answer",
    "chunk",
    "socket",
    "process",
    "signal",
    "task",
    "actor",
    "message",
    "queue",
    "channel",
    "future",
    "tree",
    "child",
    "parent",
    "loop",
    "call",
];

/// A model that plays one script per consumer (`run`, `worker:KIND`) and
/// records every request.
#[derive(Clone, Default)]
pub struct ScriptedModel {
    inner: Arc<Mutex<ModelScript>>,
}

#[derive(Default)]
struct ModelScript {
    turns: HashMap<String, VecDeque<Turn>>,
    requests: Vec<ModelRequest>,
    name: Option<String>,
}

impl ScriptedModel {
    /// A model with no scripts.
    pub fn new() -> Self {
        Self::default()
    }

    /// The model named `name`, as prices name it (none by default).
    pub fn named(self, name: &str) -> Self {
        self.lock().name = Some(name.to_owned());
        self
    }

    /// Adds `turns` to the script of `consumer`.
    pub fn script(self, consumer: &str, turns: impl IntoIterator<Item = Turn>) -> Self {
        self.lock()
            .turns
            .entry(consumer.to_owned())
            .or_default()
            .extend(turns);
        self
    }

    /// Replaces what is left of the script of `consumer` with `turns`: for
    /// a caller that plays one run after another through the same model.
    pub fn replace_script(&self, consumer: &str, turns: impl IntoIterator<Item = Turn>) {
        self.lock()
            .turns
            .insert(consumer.to_owned(), turns.into_iter().collect());
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.lock().requests.clone()
    }

    /// Forgets the requests so far: for a caller that plays many runs
    /// through it and reads none of them, so that what it keeps does not
    /// grow with the runs.
    pub fn clear_requests(&self) {
        self.lock().requests.clear();
    }

    /// The requests of one consumer, in order.
    pub fn requests_of(&self, consumer: &str) -> Vec<ModelRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.consumer == consumer)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ModelScript> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ModelClient for ScriptedModel {
    fn model_name(&self) -> Option<String> {
        self.lock().name.clone()
    }

    fn complete(
        &self,
        request: ModelRequest,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        let turn = {
            let mut script = self.lock();
            let turn = script
                .turns
                .get_mut(&request.consumer)
                .and_then(VecDeque::pop_front);
            script.requests.push(request.clone());
            turn
        };
        Box::pin(async move {
            let Some(turn) = turn else {
                return Err(ModelError::new(
                    crate::ports::ModelErrorKind::Client,
                    format!("the script of `{}` is exhausted", request.consumer),
                    false,
                ));
            };
            if let Some(error) = turn.error {
                return Err(error);
            }
            for chunk in 0..turn.chunks {
                if turn.stall.is_some_and(|(after, _)| after == chunk) {
                    if turn.hang {
                        silent(None, turn.keepalive, &evidence).await;
                    }
                    if let Some((_, silence)) = turn.stall {
                        silent(Some(silence), turn.keepalive, &evidence).await;
                    }
                }
                let wait = match (chunk, turn.first_chunk) {
                    (0, Some(first)) => first,
                    _ => turn.chunk_interval,
                };
                silent(Some(wait), turn.keepalive, &evidence).await;
                match &turn.stream_text {
                    Some(text) => evidence.observe_text(&text.chunk(chunk)),
                    None => evidence.observe(),
                }
            }
            if turn.hang {
                silent(None, turn.keepalive, &evidence).await;
            }
            Ok(ModelReply {
                content: turn.content,
                tool_calls: turn.tool_calls,
                usage: turn.usage,
                finish_reason: turn.finish_reason,
            })
        })
    }
}

/// Silence for `length` (for ever if `None`), with a keepalive every
/// `keepalive` if given.
async fn silent(length: Option<Duration>, keepalive: Option<Duration>, evidence: &Evidence) {
    let Some(every) = keepalive.filter(|every| !every.is_zero()) else {
        match length {
            Some(length) => tokio::time::sleep(length).await,
            None => std::future::pending::<()>().await,
        }
        return;
    };
    let mut left = length;
    loop {
        let step = left.map_or(every, |left| left.min(every));
        tokio::time::sleep(step).await;
        match &mut left {
            Some(left) if *left <= step => return,
            Some(left) => *left -= step,
            None => {}
        }
        evidence.keepalive();
    }
}

/// What one call of a scripted tool does.
#[derive(Clone, Debug)]
pub enum ToolAct {
    /// Returns `result` after `latency`, reporting progress every
    /// `progress_every` if given.
    Return {
        /// Time to answer.
        latency: Duration,
        /// Progress cadence.
        progress_every: Option<Duration>,
        /// The result.
        result: String,
    },
    /// Never answers, and says nothing.
    Hang,
    /// Fails as a transport error would.
    Fail(ToolError),
    /// Panics inside the call's future.
    Panic,
    /// Panics before returning a future (in the calling actor itself).
    PanicAtOnce,
}

impl ToolAct {
    /// Returns `result` after `latency`, silently.
    pub fn returns(result: impl Into<String>, latency: Duration) -> Self {
        Self::Return {
            latency,
            progress_every: None,
            result: result.into(),
        }
    }
}

/// In-process tools with scripted behaviour per call, and side-effect
/// counters.
#[derive(Clone, Default)]
pub struct ScriptedTools {
    inner: Arc<Mutex<ToolScript>>,
}

#[derive(Default)]
struct ToolScript {
    tools: Vec<(ToolDefinition, VecDeque<ToolAct>, Option<ToolAct>)>,
    invocations: Vec<ToolInvocation>,
    completed: HashMap<String, u32>,
}

impl ScriptedTools {
    /// No tools yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds tool `name` whose calls act out `acts` in order (the last one
    /// repeats).
    pub fn tool(
        self,
        name: &str,
        idempotent: Option<bool>,
        acts: impl IntoIterator<Item = ToolAct>,
    ) -> Self {
        let definition = ToolDefinition {
            name: name.to_owned(),
            description: format!("the scripted tool `{name}`"),
            input_schema: serde_json::json!({"type": "object"}),
            idempotent,
        };
        self.lock()
            .tools
            .push((definition, acts.into_iter().collect(), None));
        self
    }

    /// Replaces what is left of the acts of tool `name` with `acts`,
    /// forgetting the act it would repeat (the last of `acts` repeats
    /// instead); a tool not yet added is added, not idempotent-declared.
    pub fn replace_acts(&self, name: &str, acts: impl IntoIterator<Item = ToolAct>) {
        let mut script = self.lock();
        let acts: VecDeque<ToolAct> = acts.into_iter().collect();
        match script.tools.iter_mut().find(|(d, _, _)| d.name == name) {
            Some((_, queue, last)) => {
                *queue = acts;
                *last = None;
            }
            None => {
                drop(script);
                let _ = self.clone().tool(name, None, acts);
            }
        }
    }

    /// Every invocation so far (what was *sent*), in order.
    pub fn invocations(&self) -> Vec<ToolInvocation> {
        self.lock().invocations.clone()
    }

    /// Forgets the invocations so far: for a caller that plays many runs
    /// through it and reads none of them, so that what it keeps does not
    /// grow with the runs.
    pub fn clear_invocations(&self) {
        self.lock().invocations.clear();
    }

    /// How many calls of `name` were sent.
    pub fn calls(&self, name: &str) -> usize {
        self.lock()
            .invocations
            .iter()
            .filter(|i| i.name == name)
            .count()
    }

    /// How many calls of `name` ran to completion (its side effects).
    pub fn completed(&self, name: &str) -> u32 {
        self.lock().completed.get(name).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ToolScript> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ToolClient for ScriptedTools {
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>> {
        let tools = self
            .lock()
            .tools
            .iter()
            .map(|(d, _, _)| d.clone())
            .collect();
        Box::pin(async move { Ok(tools) })
    }

    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let act = {
            let mut script = self.lock();
            script.invocations.push(invocation.clone());
            script
                .tools
                .iter_mut()
                .find(|(d, _, _)| d.name == invocation.name)
                .map(|(_, acts, last)| {
                    let act = acts.pop_front().or_else(|| last.clone());
                    last.clone_from(&act);
                    act
                })
        };
        let act = match act {
            None => {
                let name = invocation.name;
                return Box::pin(async move {
                    Err(ToolError::new(format!("no tool named `{name}`"), false))
                });
            }
            Some(None) => Some(ToolAct::returns("", Duration::ZERO)),
            Some(act) => act,
        };
        if matches!(act, Some(ToolAct::PanicAtOnce)) {
            panic!("scripted tool `{}` panicked at once", invocation.name);
        }
        let inner = self.inner.clone();
        Box::pin(async move {
            match act {
                Some(ToolAct::Return {
                    latency,
                    progress_every,
                    result,
                }) => {
                    match progress_every {
                        Some(every) if !every.is_zero() => {
                            let mut left = latency;
                            let mut n = 0u32;
                            while left > every {
                                tokio::time::sleep(every).await;
                                left -= every;
                                n += 1;
                                evidence.progress_value(
                                    f64::from(n),
                                    None,
                                    format!("progress {n}"),
                                );
                            }
                            tokio::time::sleep(left).await;
                        }
                        _ => tokio::time::sleep(latency).await,
                    }
                    *inner
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .completed
                        .entry(invocation.name.clone())
                        .or_default() += 1;
                    Ok(ToolOutput {
                        content: result,
                        is_error: false,
                    })
                }
                Some(ToolAct::Fail(error)) => Err(error),
                Some(ToolAct::Panic) => panic!("scripted tool `{}` panicked", invocation.name),
                Some(ToolAct::Hang | ToolAct::PanicAtOnce) | None => std::future::pending().await,
            }
        })
    }
}

pub use crate::memory::MemoryStore;

/// The text of the last user messages of a request (nudges, guidance).
pub fn user_messages(request: &ModelRequest) -> Vec<String> {
    request
        .messages
        .iter()
        .filter(|m| m.role == crate::ports::ChatRole::User)
        .map(|m: &ChatMessage| m.content.clone())
        .collect()
}

/// A wall clock that moves only when told: for executor-lease tests, where
/// one executor must look frozen past its TTL to another.
#[derive(Clone, Debug)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `unix_ms`.
    pub fn at(unix_ms: u64) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(unix_ms)),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.now.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}
