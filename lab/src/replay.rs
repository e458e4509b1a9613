//! Replay: a stored run played again through the real engine with what it
//! recorded — its model's answers, its tools' results, its evaluator's
//! verdicts, the timing of each operation, a person's answers — and no
//! network, no tool server, on paused time; then compared, loop by loop,
//! with what it did.
//!
//! A [`Recording`] is what the store keeps of a run (its flow, each loop's
//! last snapshot, its tool-call records, its events), and serializes to
//! JSON: saved beside a test, it is a regression test
//! ([`Recording::replay`], [`ReplayReport::assert_reproduced`]).
//!
//! The replay's model answers a request with the answer that followed the
//! same conversation in the recording: a request that no recorded
//! conversation begins with is where the replay diverges (the flow, the
//! prompts or the code changed). Each answer streams as its call did: as
//! many items, the first after the same wait, each of its longest
//! silences after the same item, the other gaps even, for the same time;
//! an attempt that was cut goes silent where it went silent. Each tool call answers its recorded result
//! after its recorded time, reporting progress at its cadence; a call with
//! no recorded result never answers. The evaluator gives, lease by lease,
//! the verdicts it gave; budget checkpoints, the decisions they made. A
//! pause is answered as a person answered it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_actors::testing::{MemoryStore, RecordingSink};
use leasehold_actors::{
    BoxFuture, BudgetEvaluationRequest, ChatMessage, ChatRole, Engine, EngineConfig,
    EvaluationRequest, Evaluator, EvaluatorAnswer, EvaluatorError, Event, EventKind, Evidence,
    Flow, ModelClient, ModelError, ModelErrorKind, ModelReply, ModelRequest, OperationTiming,
    ReconcileDecision, RunStatus, Snapshot, Store, StoreError, TimedEnd, TokenCost, ToolCallRecord,
    ToolCallState, ToolClient, ToolDefinition, ToolError, ToolInvocation, ToolOutput, ToolServer,
};
use serde::{Deserialize, Serialize};

/// What the store keeps of one run: what a replay plays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    /// The run.
    pub run_id: String,
    /// Its flow, as stored.
    pub flow: serde_json::Value,
    /// How it ended, or where it is.
    pub status: RunStatus,
    /// Each loop's last snapshot.
    pub snapshots: Vec<Snapshot>,
    /// Its tool-call records.
    pub calls: Vec<ToolCallRecord>,
    /// Its event log.
    pub events: Vec<Event>,
}

impl Recording {
    /// The recording of `run_id` in `store`; `None` if there is no such
    /// run.
    pub async fn from_store(store: &dyn Store, run_id: &str) -> Result<Option<Self>, StoreError> {
        let Some(record) = store.load_run(run_id).await? else {
            return Ok(None);
        };
        Ok(Some(Self {
            run_id: run_id.to_owned(),
            flow: record.flow,
            status: record.status,
            snapshots: store.load_snapshots(run_id).await?,
            calls: store.load_tool_calls(run_id).await?,
            events: store.load_events(run_id, 0).await?,
        }))
    }

    /// Plays it again with `config` on a current-thread runtime of its own
    /// whose time is paused, and compares. Blocks: call it outside any
    /// runtime (or from `spawn_blocking`).
    pub fn replay(&self, config: EngineConfig) -> Result<ReplayReport, ReplayError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .map_err(|e| ReplayError(format!("cannot start the replay's runtime: {e}")))?;
        runtime.block_on(self.play(config))
    }

    async fn play(&self, config: EngineConfig) -> Result<ReplayReport, ReplayError> {
        let mut flow: Flow = serde_json::from_value(self.flow.clone())
            .map_err(|e| ReplayError(format!("the run's flow cannot be read: {e}")))?;
        let peers = Peers::new(self);
        // Its tool servers are the recording: one, whatever they were, so
        // that nothing is started and nothing is reached.
        let server = "recorded";
        flow.tools = if self.calls.is_empty() {
            Vec::new()
        } else {
            vec![ToolServer {
                name: server.to_owned(),
                command: None,
                url: None,
                env: BTreeMap::new(),
                idempotent: BTreeMap::new(),
            }]
        };
        for worker in flow.workers.values_mut() {
            worker.tools = None;
        }
        let events = RecordingSink::new();
        let unanswered = peers.model.unanswered.clone();
        let engine = Engine::builder()
            .config(config)
            .model(Arc::new(peers.model.clone()))
            .evaluator(Arc::new(peers.evaluator.clone()))
            .events(Arc::new(events.clone()))
            .store(Arc::new(MemoryStore::new()))
            .tool_server(server, Arc::new(peers.tools.clone()))
            .build()
            .await
            .map_err(|e| ReplayError(format!("the replay's engine cannot be built: {e}")))?;
        let mut run = engine
            .start(flow)
            .await
            .map_err(|e| ReplayError(format!("the replay cannot start: {e}")))?;
        let mut guidance = self.events.iter().filter_map(|e| match &e.kind {
            EventKind::Resumed { guidance } => Some(guidance.clone()),
            _ => None,
        });
        let state = loop {
            let state = run
                .wait_until(|s| s.status.is_terminal() || s.status.is_paused())
                .await;
            match state.status {
                // Answered as a person answered it, while the recording
                // says they did.
                RunStatus::WaitingHuman => {
                    let Some(answer) = guidance.next() else {
                        break state;
                    };
                    if run.resume(answer).await.is_err() {
                        break state;
                    }
                    run.wait_until(|s| s.status != RunStatus::WaitingHuman)
                        .await;
                }
                RunStatus::ReconciliationRequired => {
                    let Some(call) = state.paused.as_ref().and_then(|p| p.call.clone()) else {
                        break state;
                    };
                    let decision = match self
                        .calls
                        .iter()
                        .find(|c| c.key.ends_with(&tail(&call.key)))
                    {
                        Some(recorded) if recorded.state == ToolCallState::Done => {
                            ReconcileDecision::MarkDone {
                                result: recorded.result.clone().unwrap_or_default(),
                            }
                        }
                        _ => break state,
                    };
                    if run.reconcile(call.key, decision).await.is_err() {
                        break state;
                    }
                    run.wait_until(|s| s.status != RunStatus::ReconciliationRequired)
                        .await;
                }
                _ => break state,
            }
        };
        engine.shutdown().await;
        let replayed: Vec<Event> = events
            .events()
            .into_iter()
            .filter(|e| e.run_id == run.run_id())
            .collect();
        let mut report = compare(self, state.status, &replayed);
        report.unanswered = unanswered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Ok(report)
    }
}

/// The idempotency key of a call without its run: `{loop}/{step}/{index}`.
fn tail(key: &str) -> String {
    key.split_once('/').map_or(key, |(_, rest)| rest).to_owned()
}

/// A replay that could not be played.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("replay failed: {0}")]
pub struct ReplayError(pub String);

/// Where a replay first did otherwise than its recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The loop (`run`, `run/worker:research:1`).
    pub path: String,
    /// Its step, where one had started.
    pub step: u32,
    /// What the recording did there (`step 3`, `tool search: Ok`,
    /// `verdict RENEW by ladder on tool_call`, …), or `nothing`.
    pub recorded: String,
    /// What the replay did there, or `nothing`.
    pub replayed: String,
}

/// How a replay compares with its recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The run replayed.
    pub run_id: String,
    /// How the recording ended, and the replay.
    pub recorded_status: RunStatus,
    /// How the replay ended (or paused).
    pub replayed_status: RunStatus,
    /// Steps compared, over every loop.
    pub steps: usize,
    /// Verdicts compared.
    pub verdicts: usize,
    /// Where it first diverged, if it did: loop by loop, in the order of
    /// each loop's steps, calls and verdicts.
    pub divergence: Option<Divergence>,
    /// Requests the replay's model could not answer from the recording,
    /// what the requests said: the conversation changed.
    pub unanswered: Vec<String>,
}

impl ReplayReport {
    /// Whether the replay did what the recording did.
    pub fn reproduced(&self) -> bool {
        self.divergence.is_none()
            && self.recorded_status == self.replayed_status
            && self.unanswered.is_empty()
    }

    /// Panics, saying where and how, unless the replay reproduced the
    /// recording: a stored run as a regression test.
    #[track_caller]
    pub fn assert_reproduced(&self) {
        assert!(self.reproduced(), "{}", self.describe());
    }

    /// One paragraph for people.
    pub fn describe(&self) -> String {
        let mut text = match &self.divergence {
            None if self.reproduced() => format!(
                "replay of run {} reproduced it: {} steps and {} verdicts, {}",
                self.run_id,
                self.steps,
                self.verdicts,
                self.replayed_status.name()
            ),
            None => format!(
                "replay of run {} ended {}, the recording {}",
                self.run_id,
                self.replayed_status.name(),
                self.recorded_status.name()
            ),
            Some(d) => format!(
                "replay of run {} diverged at {} step {}: the recording did `{}`, the replay `{}`",
                self.run_id, d.path, d.step, d.recorded, d.replayed
            ),
        };
        for request in &self.unanswered {
            text.push_str(&format!("\nno recorded answer to: {request}"));
        }
        text
    }
}

/// What the replay plays the run against.
struct Peers {
    model: ReplayModel,
    tools: ReplayTools,
    evaluator: ReplayEvaluator,
}

impl Peers {
    fn new(recording: &Recording) -> Self {
        let mut timings: BTreeMap<String, Vec<OperationTiming>> = BTreeMap::new();
        let mut verdicts: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut budgets: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut replies: BTreeMap<
            (String, u32),
            (TokenCost, Option<leasehold_actors::FinishReason>),
        > = BTreeMap::new();
        for event in &recording.events {
            match &event.kind {
                EventKind::OperationTimed { timing, .. } => timings
                    .entry(event.path.clone())
                    .or_default()
                    .push(timing.clone()),
                EventKind::Verdict(record) if record.evaluator.is_some() => {
                    let answer = serde_json::json!({
                        "verdict": record.verdict.as_str(),
                        "reason": record.reason,
                        "nudge": record.nudge,
                    });
                    verdicts
                        .entry(event.path.clone())
                        .or_default()
                        .push(answer.to_string());
                }
                EventKind::BudgetExtended(record) | EventKind::BudgetExhausted(record)
                    if record.evaluator.is_some() =>
                {
                    let decision = match &event.kind {
                        EventKind::BudgetExtended(_) => "EXTEND",
                        _ => "WRAP_UP",
                    };
                    let answer = serde_json::json!({
                        "decision": decision,
                        "reason": record.reason,
                        "confidence": record.confidence.unwrap_or(0.9),
                    });
                    budgets
                        .entry(event.path.clone())
                        .or_default()
                        .push(answer.to_string());
                }
                EventKind::ModelCallFinished {
                    step,
                    usage,
                    finish_reason,
                    outcome: leasehold_actors::CallOutcome::Ok,
                    ..
                } => {
                    replies.insert((event.path.clone(), *step), (*usage, *finish_reason));
                }
                _ => {}
            }
        }
        let conversations = recording
            .snapshots
            .iter()
            .filter_map(|s| {
                let transcript: Vec<ChatMessage> =
                    serde_json::from_value(s.state.get("transcript")?.clone()).ok()?;
                Some((s.path.clone(), transcript))
            })
            .collect();
        let timings = Arc::new(timings);
        Self {
            model: ReplayModel {
                conversations: Arc::new(conversations),
                timings: timings.clone(),
                replies: Arc::new(replies),
                attempts: Arc::default(),
                unanswered: Arc::default(),
            },
            tools: ReplayTools {
                calls: Arc::new(recording.calls.clone()),
                timings,
                attempts: Arc::default(),
            },
            evaluator: ReplayEvaluator {
                verdicts: Arc::new(Mutex::new(verdicts)),
                budgets: Arc::new(Mutex::new(budgets)),
            },
        }
    }
}

/// What each recorded model call answered with, by loop and step: its
/// usage and why it finished.
type Replies = BTreeMap<(String, u32), (TokenCost, Option<leasehold_actors::FinishReason>)>;

/// How many attempts of each call the replay has made so far.
type Attempts = Arc<Mutex<BTreeMap<String, usize>>>;

/// The attempt of `path` now made (from 0), counted.
fn next_attempt(attempts: &Attempts, path: &str) -> usize {
    let mut attempts = attempts.lock().unwrap_or_else(PoisonError::into_inner);
    let n = attempts.entry(path.to_owned()).or_default();
    let attempt = *n;
    *n += 1;
    attempt
}

/// The timing of attempt `attempt` of the call at `path`: its own, or the
/// last one recorded.
fn timing_of(
    timings: &BTreeMap<String, Vec<OperationTiming>>,
    path: &str,
    attempt: usize,
) -> Option<OperationTiming> {
    let all = timings.get(path)?;
    all.get(attempt).or_else(|| all.last()).cloned()
}

/// Waits as the recorded operation did: `items` items (each told to
/// `item`), the first after its wait, each recorded silence after the item
/// it followed, the other gaps even, until its length; then returns, or
/// never does if it was cut.
async fn act_out(timing: &OperationTiming, mut item: impl FnMut(u64)) {
    let ms = Duration::from_millis;
    let first = timing.first_item_ms.unwrap_or(timing.duration_ms);
    let last = timing.last_item_ms.unwrap_or(first);
    let gaps = timing.items.saturating_sub(1);
    // The silences it kept; a timing without them has its longest.
    let mut silences: BTreeMap<u64, u64> = timing
        .silences
        .iter()
        .copied()
        .filter(|(after, _)| *after > 0 && *after < timing.items)
        .collect();
    if silences.is_empty() && timing.silence_after > 0 && timing.silence_after < timing.items {
        silences.insert(timing.silence_after, timing.longest_silence_ms);
    }
    let silent: u64 = silences.values().sum();
    let others = gaps.saturating_sub(silences.len() as u64).max(1);
    let spread = last.saturating_sub(first).saturating_sub(silent) / others;
    let mut now = 0;
    for n in 0..timing.items {
        let at = match n {
            0 => first,
            n => now + silences.get(&n).copied().unwrap_or(spread),
        };
        tokio::time::sleep(ms(at.saturating_sub(now))).await;
        now = at;
        item(n);
    }
    if timing.ended == TimedEnd::Cut {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(ms(timing.duration_ms.saturating_sub(now))).await;
}

/// Answers each request with the answer that followed the same
/// conversation in the recording.
#[derive(Clone)]
struct ReplayModel {
    conversations: Arc<Vec<(String, Vec<ChatMessage>)>>,
    timings: Arc<BTreeMap<String, Vec<OperationTiming>>>,
    replies: Arc<Replies>,
    attempts: Attempts,
    unanswered: Arc<Mutex<Vec<String>>>,
}

impl ModelClient for ReplayModel {
    fn complete(
        &self,
        request: ModelRequest,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        let asked: Vec<&ChatMessage> = request
            .messages
            .iter()
            .filter(|m| m.role != ChatRole::System)
            .collect();
        let found = self.conversations.iter().find_map(|(path, transcript)| {
            let answer = transcript.get(asked.len())?;
            let same = transcript.len() > asked.len()
                && answer.role == ChatRole::Assistant
                && transcript.iter().zip(&asked).all(|(a, b)| a == *b);
            let step = transcript[..asked.len()]
                .iter()
                .filter(|m| m.role == ChatRole::Assistant)
                .count()
                + 1;
            same.then(|| {
                (
                    path.clone(),
                    u32::try_from(step).unwrap_or(u32::MAX),
                    answer.clone(),
                )
            })
        });
        let Some((path, step, answer)) = found else {
            let said = asked
                .last()
                .map(|m| m.content.chars().take(120).collect::<String>())
                .unwrap_or_default();
            self.unanswered
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(format!("{} asking, after `{said}`", request.consumer));
            return Box::pin(async move {
                Err(ModelError::new(
                    ModelErrorKind::Client,
                    format!(
                        "the recording has no answer to this conversation of `{}`",
                        request.consumer
                    ),
                    false,
                ))
            });
        };
        let call = format!("{path}/model_call:{step}");
        let attempt = next_attempt(&self.attempts, &call);
        let timing = timing_of(&self.timings, &call, attempt);
        let (usage, finish_reason) = self.replies.get(&(path, step)).copied().unwrap_or_default();
        Box::pin(async move {
            if let Some(timing) = timing {
                let pieces = timing.items.max(1);
                let text: Vec<char> = answer.content.chars().collect();
                let size = text
                    .len()
                    .div_ceil(usize::try_from(pieces).unwrap_or(1))
                    .max(1);
                act_out(&timing, |n| {
                    let from = usize::try_from(n)
                        .unwrap_or(usize::MAX)
                        .saturating_mul(size);
                    let piece: String = text.iter().skip(from).take(size).collect();
                    if piece.is_empty() {
                        evidence.observe();
                    } else {
                        evidence.observe_text(&piece);
                    }
                })
                .await;
            }
            Ok(ModelReply {
                content: answer.content,
                tool_calls: answer.tool_calls,
                usage,
                finish_reason,
            })
        })
    }
}

/// Answers each tool call with its recorded result, after its time.
#[derive(Clone)]
struct ReplayTools {
    calls: Arc<Vec<ToolCallRecord>>,
    timings: Arc<BTreeMap<String, Vec<OperationTiming>>>,
    attempts: Attempts,
}

impl ToolClient for ReplayTools {
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>> {
        let mut tools: BTreeMap<String, ToolDefinition> = BTreeMap::new();
        for call in self.calls.iter() {
            tools
                .entry(call.tool.clone())
                .or_insert_with(|| ToolDefinition {
                    name: call.tool.clone(),
                    description: format!("`{}`, as the recording answered it", call.tool),
                    input_schema: serde_json::json!({"type": "object"}),
                    idempotent: call.idempotent,
                });
        }
        Box::pin(async move { Ok(tools.into_values().collect()) })
    }

    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        // `{run}/{loop}/{step}/{index}`: the same call of the recording.
        let place = tail(&invocation.idempotency_key);
        let recorded = self
            .calls
            .iter()
            .find(|c| tail(&c.key) == place && c.tool == invocation.name)
            .cloned();
        let lease_path = place.rsplitn(3, '/').collect::<Vec<_>>();
        let call_path = match lease_path.as_slice() {
            [index, step, path] => format!("{path}/tool_call:{step}.{index}"),
            _ => place.clone(),
        };
        let attempt = next_attempt(&self.attempts, &call_path);
        let timing = timing_of(&self.timings, &call_path, attempt);
        Box::pin(async move {
            let Some(recorded) = recorded else {
                return Err(ToolError::new(
                    format!(
                        "the recording made no call of `{}` here ({place})",
                        invocation.name
                    ),
                    false,
                ));
            };
            if let Some(timing) = &timing {
                // Values as it reported them: rising evenly to its highest.
                let items = u32::try_from(timing.items.max(1)).unwrap_or(u32::MAX);
                act_out(timing, |n| {
                    let note = format!("{} of {}", n + 1, timing.items);
                    let done = u32::try_from(n + 1).unwrap_or(u32::MAX);
                    match timing.progress {
                        Some((highest, total)) => evidence.progress_value(
                            highest * f64::from(done) / f64::from(items),
                            total,
                            note,
                        ),
                        None => evidence.progress(note),
                    }
                })
                .await;
            }
            match (recorded.state, recorded.result) {
                (ToolCallState::Done, Some(result)) => Ok(ToolOutput {
                    content: result,
                    is_error: false,
                }),
                // No result was recorded: it never answered.
                _ => std::future::pending().await,
            }
        })
    }
}

/// Gives, lease by lease, the verdicts the recording's evaluator gave, and
/// the budget checkpoints' decisions, loop by loop.
#[derive(Clone)]
struct ReplayEvaluator {
    verdicts: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
    budgets: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
}

fn answer_from(
    answers: &Mutex<BTreeMap<String, Vec<String>>>,
    path: &str,
) -> Result<EvaluatorAnswer, EvaluatorError> {
    let mut answers = answers.lock().unwrap_or_else(PoisonError::into_inner);
    match answers.get_mut(path).filter(|a| !a.is_empty()) {
        Some(queue) => Ok(EvaluatorAnswer {
            text: queue.remove(0),
            cost: TokenCost::default(),
        }),
        None => Err(EvaluatorError::new(format!(
            "the recording's evaluator gave no more answers about `{path}`"
        ))),
    }
}

impl Evaluator for ReplayEvaluator {
    fn evaluate(
        &self,
        request: EvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        let answer = answer_from(&self.verdicts, &request.path);
        Box::pin(async move { answer })
    }

    fn evaluate_budget(
        &self,
        request: BudgetEvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        let answer = answer_from(&self.budgets, &request.path);
        Box::pin(async move { answer })
    }
}

/// The loop an event belongs to: its path, without a call's last part.
fn loop_of(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some((parent, last))
            if last.starts_with("model_call:") || last.starts_with("tool_call:") =>
        {
            parent
        }
        _ => path,
    }
}

/// What an event says of its loop's course, if it is part of it: a step,
/// a call's end, a verdict, the run's end or pause.
fn course(kind: &EventKind) -> Option<String> {
    Some(match kind {
        EventKind::StepStarted { step, .. } => format!("step {step}"),
        EventKind::ModelCallFinished {
            outcome,
            tool_calls,
            ..
        } => format!(
            "model call {outcome:?} asking for {}",
            leasehold::counted(*tool_calls, "call")
        ),
        EventKind::ToolCallFinished { tool, outcome, .. } => format!("tool {tool}: {outcome:?}"),
        EventKind::Verdict(record) => format!(
            "verdict {} by {} on {}",
            record.verdict.as_str(),
            record.decided_by.as_str(),
            record.lease_kind
        ),
        EventKind::RunCompleted { answer, .. } => format!("completed: {answer}"),
        EventKind::RunFailed { reason } => format!("failed: {reason}"),
        EventKind::Paused { .. } => "paused".to_owned(),
        _ => return None,
    })
}

/// Each loop's course, in order.
fn courses(events: &[Event]) -> BTreeMap<String, Vec<String>> {
    let mut by_loop: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in events {
        if let Some(entry) = course(&event.kind) {
            by_loop
                .entry(loop_of(&event.path).to_owned())
                .or_default()
                .push(entry);
        }
    }
    by_loop
}

fn compare(recording: &Recording, replayed_status: RunStatus, replayed: &[Event]) -> ReplayReport {
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
    let verdicts = recorded
        .values()
        .flatten()
        .filter(|e| e.starts_with("verdict "))
        .count();
    ReplayReport {
        run_id: recording.run_id.clone(),
        recorded_status: recording.status,
        replayed_status,
        steps: count("step "),
        verdicts,
        divergence,
        unanswered: Vec::new(),
    }
}
