//! Plays the generated operations through a real [`Engine`], one run per
//! operation, under one strategy, and measures each against its ground
//! truth.
//!
//! Each operation is one run of a one-step flow: a model stream is the
//! root's only (streaming) model call; a tool call is a model turn that
//! calls the tool `work`, then a final answer. The engine is the real one —
//! leases, watchdog, verdict policy, supervisors, restarts, pauses — with
//! the scripted fakes as its model, tools and evaluator, on whatever tokio
//! time the caller runs it on (paused, for an experiment). Runs go one after
//! another, so each run's events are its operation's alone and a seed gives
//! one report.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_actors::testing::{
    MemoryStore, Scripted, ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct, Turn,
};
use leasehold_actors::{
    BoxFuture, BudgetOverrides, CallOutcome, Engine, EngineConfig, EngineError, EventKind,
    EventSink, Flow, LeaseKind, RunStatus, TokenCost, ToolClient, ToolDefinition, ToolError,
    ToolInvocation, ToolOutput, ToolServer, Verdict,
};
use tokio::time::Instant;

use super::strategy::Strategy;
use super::workload::{EvaluatorLoad, Operation, OperationKind};

/// The tool every tool-call operation calls.
const TOOL: &str = "work";

/// The in-process tool server it lives on.
const SERVER: &str = "workload";

/// What one operation came to under one strategy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationOutcome {
    /// Attempts of the operation cut by `INTERVENE` or `ESCALATE` (the
    /// policy's, the evaluator's or the renewal cap's).
    pub kills: u32,
    /// Chunks (tokens) the cut attempts had streamed.
    pub wasted_tokens: u64,
    /// Time the cut tool attempts had run.
    pub wasted_tool_time: Duration,
    /// From the moment an attempt of a hanging operation stopped making
    /// progress for good to the verdict that cut that attempt (the first
    /// such); `None` for an operation that ends, or one whose every cut came
    /// before it hung.
    pub detected_after: Option<Duration>,
    /// Whether a call of its tool answered (on any attempt).
    pub answered: bool,
    /// Evaluator calls about it.
    pub evaluator_calls: u32,
    /// Tokens the evaluator spent on it.
    pub evaluator_tokens: u64,
    /// How its run ended: completed, paused (then cancelled) or failed.
    pub status: RunStatus,
    /// Virtual time from its run's start to its end or pause.
    pub elapsed: Duration,
}

/// Runs every operation under `strategy`, in order.
pub async fn run_strategy(
    strategy: &Strategy,
    operations: &[Operation],
    evaluator: &EvaluatorLoad,
) -> Result<Vec<OperationOutcome>, EngineError> {
    let model = ScriptedModel::new();
    let tools = ScriptedTools::new().tool(TOOL, Some(true), []);
    let endpoint = Endpoint::new(tools.clone());
    let judge = ScriptedEvaluator::new([]);
    let sink = OperationSink::default();
    let engine = Engine::builder()
        .config(EngineConfig::default())
        .model(Arc::new(model.clone()))
        .events(Arc::new(sink.clone()))
        .store(Arc::new(MemoryStore::new()))
        .tool_server(SERVER, Arc::new(endpoint.clone()))
        .evaluator(Arc::new(judge.clone()))
        .build()
        .await?;
    let flow = flow(strategy);
    let mut outcomes = Vec::with_capacity(operations.len());
    for operation in operations {
        model.replace_script("run", turns(operation, strategy));
        tools.replace_acts(TOOL, acts(operation));
        judge.replace_script(answers(operation, evaluator));
        sink.clear();
        let started = Instant::now();
        endpoint.dead_until(operation.dead_until.map(|d| started + d));
        let mut run = engine.start(flow.clone()).await?;
        let state = run.paused().await;
        let elapsed = started.elapsed();
        if state.status.is_paused() {
            // Nobody answers in an experiment: the pause is its outcome.
            let _ = run.cancel("experiment: the next operation").await;
            run.wait().await;
        }
        outcomes.push(measure(operation, state.status, elapsed, &sink.take()));
    }
    engine.shutdown().await;
    Ok(outcomes)
}

/// The one-step flow every operation runs as, with the strategy's leases
/// and supervision.
fn flow(strategy: &Strategy) -> Flow {
    Flow {
        name: "experiment".to_owned(),
        task: "Do the operation.".to_owned(),
        system_prompt: String::new(),
        max_steps: 4,
        stream: true,
        tools: vec![ToolServer {
            name: SERVER.to_owned(),
            command: None,
            url: None,
            env: BTreeMap::new(),
            idempotent: BTreeMap::from([(TOOL.to_owned(), true)]),
        }],
        workers: BTreeMap::new(),
        milestones: Vec::new(),
        leases: strategy.lease_overrides(),
        supervision: strategy.supervision_overrides(),
        budget: BudgetOverrides::default(),
    }
}

/// The root's script: the operation's attempts (a stall only on the first),
/// enough for every restart the strategy allows and one more.
fn turns(operation: &Operation, strategy: &Strategy) -> Vec<Turn> {
    let attempts = usize::try_from(strategy.shared.max_restarts)
        .unwrap_or(usize::MAX)
        .saturating_add(2)
        .min(64);
    match operation.kind {
        OperationKind::ModelStream { chunks, interval } => (0..attempts)
            .map(|attempt| stream_turn(operation, chunks, interval, attempt == 0))
            .collect(),
        OperationKind::ToolCall { .. } => vec![
            Turn::tools([(TOOL, serde_json::json!({}))]),
            Turn::answer("done"),
        ],
    }
}

/// What a looping stream repeats.
const LOOP: &str = "Let me check the logs once more before I answer.";

fn stream_turn(operation: &Operation, chunks: u32, interval: Duration, first: bool) -> Turn {
    if operation.loops {
        return Turn::looping(LOOP, interval);
    }
    let hang_at = operation.hangs_at.map(|at| {
        let at = at.as_millis() / interval.as_millis().max(1);
        u32::try_from(at).unwrap_or(u32::MAX)
    });
    let mut turn = Turn::answer("done").with_chunks(chunks, interval);
    turn.usage = TokenCost {
        input_tokens: 200,
        output_tokens: u64::from(chunks),
    };
    match (hang_at, operation.stall) {
        (Some(at), _) => {
            turn.hang = true;
            turn.stall = Some((at, Duration::ZERO));
        }
        (None, Some((after, silence))) if first => turn = turn.stall_after(after, silence),
        _ => {}
    }
    turn
}

/// The tool's acts: the same on every attempt.
fn acts(operation: &Operation) -> Vec<ToolAct> {
    match (operation.kind, operation.hangs_at) {
        (OperationKind::ToolCall { .. }, Some(_)) => vec![ToolAct::Hang],
        (OperationKind::ToolCall { progress }, None) => vec![ToolAct::Return {
            latency: operation.work,
            progress_every: progress,
            result: "done".to_owned(),
        }],
        (OperationKind::ModelStream { .. }, _) => Vec::new(),
    }
}

/// The evaluator's answers about the operation: the ground truth (renew a
/// live one, intervene on a dead one) when right, the opposite when wrong.
fn answers(operation: &Operation, evaluator: &EvaluatorLoad) -> Vec<Scripted> {
    operation
        .evaluator_right
        .iter()
        .map(|&right| {
            let renew = operation.alive() == right;
            let text = serde_json::json!({
                "verdict": if renew { "RENEW" } else { "INTERVENE" },
                "reason": if renew { "it is working" } else { "it is not working" },
                "nudge": "",
            })
            .to_string();
            Scripted::AnswerAfter(evaluator.latency, text)
        })
        .collect()
}

fn measure(
    operation: &Operation,
    status: RunStatus,
    elapsed: Duration,
    events: &[(Instant, EventKind)],
) -> OperationOutcome {
    let watched = match operation.kind {
        OperationKind::ModelStream { .. } => LeaseKind::ModelStream,
        OperationKind::ToolCall { .. } => LeaseKind::ToolCall,
    };
    let mut outcome = OperationOutcome {
        kills: 0,
        wasted_tokens: 0,
        wasted_tool_time: Duration::ZERO,
        detected_after: None,
        answered: false,
        evaluator_calls: 0,
        evaluator_tokens: 0,
        status,
        elapsed,
    };
    let mut attempt_start = None;
    for (at, kind) in events {
        match kind {
            EventKind::ModelCallStarted { .. } if watched == LeaseKind::ModelStream => {
                attempt_start = Some(*at);
            }
            EventKind::ToolCallStarted { .. } if watched == LeaseKind::ToolCall => {
                attempt_start = Some(*at);
            }
            EventKind::ToolCallFinished {
                outcome: CallOutcome::Ok,
                ..
            } => outcome.answered = true,
            EventKind::Verdict(record) if record.lease_kind == watched => {
                if let Some(usage) = &record.evaluator {
                    outcome.evaluator_calls += 1;
                    outcome.evaluator_tokens += usage.cost.input_tokens + usage.cost.output_tokens;
                }
                if !matches!(record.verdict, Verdict::Intervene | Verdict::Escalate) {
                    continue;
                }
                outcome.kills += 1;
                match watched {
                    LeaseKind::ToolCall => {
                        outcome.wasted_tool_time +=
                            attempt_start.map_or(Duration::ZERO, |s| *at - s);
                    }
                    _ => outcome.wasted_tokens += record.evidence.count,
                }
                // A cut before the attempt hung is no detection: the
                // retry hangs again, and its cut is the one that counts.
                if outcome.detected_after.is_none()
                    && let (Some(hangs_at), Some(start)) = (operation.hangs_at, attempt_start)
                    && *at >= start + hangs_at
                {
                    outcome.detected_after = Some(*at - (start + hangs_at));
                }
            }
            _ => {}
        }
    }
    outcome
}

/// The scripted tools behind an endpoint that may be dead: until the
/// instant it comes back, a call is lost (it never answers, and says
/// nothing); after it, the scripted tool answers.
#[derive(Clone)]
struct Endpoint {
    tools: ScriptedTools,
    dead_until: Arc<Mutex<Option<Instant>>>,
}

impl Endpoint {
    fn new(tools: ScriptedTools) -> Self {
        Self {
            tools,
            dead_until: Arc::default(),
        }
    }

    fn dead_until(&self, until: Option<Instant>) {
        *self
            .dead_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = until;
    }
}

impl ToolClient for Endpoint {
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>> {
        self.tools.list_tools()
    }

    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: leasehold_actors::Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let dead_until = *self
            .dead_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if dead_until.is_some_and(|until| Instant::now() < until) {
            return Box::pin(std::future::pending());
        }
        self.tools.call(invocation, evidence)
    }
}

/// An event sink that keeps the events of the run in progress, stamped
/// with tokio's (paused) clock.
#[derive(Clone, Default)]
struct OperationSink {
    events: Arc<Mutex<Vec<(Instant, EventKind)>>>,
}

impl OperationSink {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Instant, EventKind)>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn clear(&self) {
        self.lock().clear();
    }

    fn take(&self) -> Vec<(Instant, EventKind)> {
        std::mem::take(&mut *self.lock())
    }
}

impl EventSink for OperationSink {
    fn emit(&self, _run_id: &str, _path: &str, kind: EventKind) {
        self.lock().push((Instant::now(), kind));
    }
}
