//! Plays the generated operations through a real [`Engine`], one run per
//! operation, under one strategy, and measures each against its ground
//! truth.
//!
//! Each operation is one run: a model stream is the root's only
//! (streaming) model call; a tool call is a model turn that calls the tool
//! `work`, then a final answer; a worker is a model turn that spawns the
//! worker `task`, whose every step streams and calls the quick tool `note`
//! until its last answers, then the root's final answer. The engine is the real one —
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
    BoxFuture, BudgetOverrides, CallOutcome, ChatRole, Engine, EngineConfig, EngineError,
    EventKind, EventSink, Flow, LeaseKind, ModelClient, ModelError, ModelReply, ModelRequest,
    RunStatus, TokenCost, ToolClient, ToolDefinition, ToolError, ToolInvocation, ToolOutput,
    ToolServer, Verdict, WorkerKind,
};
use tokio::time::Instant;

use super::strategy::Strategy;
use super::workload::{EvaluatorLoad, Operation, OperationKind};

/// The tool every tool-call operation calls.
const TOOL: &str = "work";

/// The tool a worker's steps call.
const NOTE: &str = "note";

/// The worker kind every worker operation spawns.
const WORKER: &str = "task";

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
    /// Whether its call answered (on any attempt): the tool's, or the
    /// stream's.
    pub answered: bool,
    /// Budget checkpoints that extended its worker's steps.
    pub budget_extended: u32,
    /// Budget checkpoints that wrapped its worker up.
    pub budget_wrapped_up: u32,
    /// Evaluator calls about it: the watchdog's and the budget
    /// checkpoints'.
    pub evaluator_calls: u32,
    /// Tokens the evaluator spent on it.
    pub evaluator_tokens: u64,
    /// How its run ended: completed, paused (then cancelled) or failed.
    pub status: RunStatus,
    /// Virtual time from its run's start to its end or pause.
    pub elapsed: Duration,
}

impl OperationOutcome {
    /// Whether it was cut at least once: an attempt cut by a verdict, or
    /// its worker wrapped up by a budget checkpoint.
    pub fn cut(&self) -> bool {
        self.kills > 0 || self.budget_wrapped_up > 0
    }

    /// Counts an evaluator call, if the decision made one.
    fn evaluated(&mut self, usage: Option<&leasehold_actors::EvaluatorUsage>) {
        if let Some(usage) = usage {
            self.evaluator_calls += 1;
            self.evaluator_tokens += usage.cost.input_tokens + usage.cost.output_tokens;
        }
    }
}

/// Runs every operation under `strategy`, in order.
pub async fn run_strategy(
    strategy: &Strategy,
    operations: &[Operation],
    evaluator: &EvaluatorLoad,
) -> Result<Vec<OperationOutcome>, EngineError> {
    play(strategy, operations, evaluator, &mut |_| {}, None).await
}

/// Runs every operation under `strategy`, as [`run_strategy`] does, and
/// keeps each run's recording: what a replay plays. With the
/// configuration the runs ran under.
#[cfg(test)]
pub(crate) async fn record_strategy(
    strategy: &Strategy,
    operations: &[Operation],
    evaluator: &EvaluatorLoad,
) -> Result<(EngineConfig, Vec<crate::Recording>), EngineError> {
    let mut recordings = Vec::new();
    play(
        strategy,
        operations,
        evaluator,
        &mut |_| {},
        Some(&mut recordings),
    )
    .await?;
    Ok((experiment_config(), recordings))
}

/// [`run_strategy`], telling `played` how many operations are done after
/// each one, and keeping each run's recording in `recordings` if given.
pub(super) async fn play(
    strategy: &Strategy,
    operations: &[Operation],
    evaluator: &EvaluatorLoad,
    played: &mut dyn FnMut(usize),
    mut recordings: Option<&mut Vec<crate::Recording>>,
) -> Result<Vec<OperationOutcome>, EngineError> {
    let model = WorkloadModel::default();
    let tools = ScriptedTools::new().tool(TOOL, Some(true), []).tool(
        NOTE,
        Some(true),
        [ToolAct::returns("noted", Duration::ZERO)],
    );
    let endpoint = Endpoint::new(tools.clone());
    let judge = ScriptedEvaluator::new([]);
    let sink = OperationSink::default();
    let store = MemoryStore::new();
    let mut builder = Engine::builder()
        .config(experiment_config())
        .model(Arc::new(model.clone()))
        .events(Arc::new(sink.clone()))
        .store(Arc::new(store.clone()))
        .tool_server(SERVER, Arc::new(endpoint.clone()))
        .evaluator(Arc::new(judge.clone()));
    if let Some(supervisor) = &strategy.supervisor {
        builder = builder.strategy(supervisor.0.clone());
    }
    if let Some(judge) = &strategy.judge {
        builder = builder.policy(judge.0.clone());
    }
    let engine = builder.build().await?;
    let worker_steps = operations.iter().find_map(|o| match o.kind {
        OperationKind::Worker { max_steps, .. } => Some(max_steps),
        _ => None,
    });
    let flow = flow(strategy, worker_steps);
    let mut outcomes = Vec::with_capacity(operations.len());
    for operation in operations {
        model
            .scripted
            .replace_script("run", turns(operation, strategy));
        model.worker(operation);
        judge.replace_script(answers(operation, evaluator));
        judge.replace_budget_script(budget_answers(operation, evaluator));
        sink.clear();
        let started = Instant::now();
        let dead_until = operation.dead_until.map(|d| started + d);
        let stream = matches!(operation.kind, OperationKind::ModelStream { .. });
        model.outage.until(dead_until.filter(|_| stream));
        endpoint.outage.until(dead_until.filter(|_| !stream));
        endpoint.plan(ToolPlan::of(operation));
        let mut run = engine.start(flow.clone()).await?;
        let state = run.paused().await;
        let elapsed = started.elapsed();
        if state.status.is_paused() {
            // Nobody answers in an experiment: the pause is its outcome.
            let _ = run.cancel("experiment: the next operation").await;
            run.wait().await;
        }
        if let Some(recordings) = recordings.as_deref_mut()
            && let Some(recording) = crate::Recording::from_store(&store, run.run_id()).await?
        {
            recordings.push(recording);
        }
        // Its measure is taken from the sink's events. Kept whole in the
        // store and the fakes, every run (and each step of a worker, with
        // all its messages) would stay in memory until the strategy ends.
        store.forget(run.run_id());
        model.scripted.clear_requests();
        judge.clear_requests();
        tools.clear_invocations();
        outcomes.push(measure(operation, state.status, elapsed, &sink.take()));
        played(outcomes.len());
    }
    engine.shutdown().await;
    Ok(outcomes)
}

/// The engine's configuration of an experiment: the defaults, with bounds
/// wide enough for any strategy the workload may hold (its flows set the
/// renewals and restarts of each strategy, and a flow may only tighten the
/// engine's configuration); the workload's own checks bound them instead.
fn experiment_config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.max_renewals = u32::MAX;
    config.supervision.watchdog.free_renewals = u32::MAX;
    config.restart.max_restarts = u32::MAX;
    config.spawn.max_per_run = u32::MAX;
    config
}

/// The flow every operation runs as, with the strategy's leases and
/// supervision, and the worker kind when the workload has workers.
fn flow(strategy: &Strategy, worker_steps: Option<u32>) -> Flow {
    let workers = worker_steps
        .map(|max_steps| {
            let kind = WorkerKind {
                max_tokens: None,
                prompt: "Do the task, a step at a time.".to_owned(),
                max_steps,
                tools: Some(vec![SERVER.to_owned()]),
                milestones: Vec::new(),
            };
            BTreeMap::from([(WORKER.to_owned(), kind)])
        })
        .unwrap_or_default();
    Flow {
        max_tokens: None,
        keyed_limits: BTreeMap::new(),
        notify: Vec::new(),
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
            idempotent: BTreeMap::from([(TOOL.to_owned(), true), (NOTE.to_owned(), true)]),
        }],
        workers,
        milestones: Vec::new(),
        leases: strategy.lease_overrides(),
        supervision: strategy.supervision_overrides(),
        budget: BudgetOverrides::default(),
        spawn: leasehold_actors::SpawnOverrides::default(),
        retention: None,
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
        // The root spawns the worker once; what it answers after does not
        // matter. (A root's model call is never cut: it is quick.)
        OperationKind::Worker { .. } => vec![
            Turn::spawn([(WORKER, "Do the task.")]),
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
    // The chunks streamed before the hang: its last came at `hangs_at`.
    let hang_at = operation.hangs_at.map(|at| {
        let interval_ms = interval.as_millis().max(1);
        let before = match operation.first_chunk {
            Some(_) if at.is_zero() => 0,
            Some(first) => at.saturating_sub(first).as_millis() / interval_ms + 1,
            None => at.as_millis() / interval_ms,
        };
        u32::try_from(before).unwrap_or(u32::MAX)
    });
    let mut turn = streamed(Turn::answer("done"), chunks, interval);
    if let Some(first) = operation.first_chunk {
        turn = turn.first_chunk_after(first);
    }
    if let Some(every) = operation.keepalive {
        turn = turn.with_keepalives(every);
    }
    match (hang_at, operation.stall) {
        (Some(at), _) => hang_after(turn, at),
        (None, Some((after, silence))) if first => turn.stall_after(after, silence),
        _ => turn,
    }
}

/// `turn` streamed in `chunks` chunks `interval` apart, one token each.
fn streamed(mut turn: Turn, chunks: u32, interval: Duration) -> Turn {
    turn = turn.with_chunks(chunks, interval);
    turn.usage = TokenCost {
        counted: false,
        input_tokens: 200,
        output_tokens: u64::from(chunks),
    };
    turn
}

/// `turn` falling silent for good after `chunks` chunks.
fn hang_after(mut turn: Turn, chunks: u32) -> Turn {
    turn.hang = true;
    turn.stall = Some((chunks, Duration::ZERO));
    turn
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

/// The budget checkpoints' answers about a worker: extend one that is
/// getting somewhere, wrap up one going round in circles (a loop), when
/// right; the opposite when wrong. A worker whose step will hang is still
/// getting somewhere when its budget runs out: its hang is for its leases
/// to find. An extension is granted at full confidence (the limit
/// doubles).
fn budget_answers(operation: &Operation, evaluator: &EvaluatorLoad) -> Vec<Scripted> {
    operation
        .budget_right
        .iter()
        .map(|&right| {
            let extend = operation.loops != right;
            let text = serde_json::json!({
                "decision": if extend { "EXTEND" } else { "WRAP_UP" },
                "reason": if extend { "it is getting there" } else { "it is going round in circles" },
                "confidence": 1.0,
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
    events: &[Stamped],
) -> OperationOutcome {
    let mut outcome = OperationOutcome {
        kills: 0,
        wasted_tokens: 0,
        wasted_tool_time: Duration::ZERO,
        detected_after: None,
        answered: false,
        budget_extended: 0,
        budget_wrapped_up: 0,
        evaluator_calls: 0,
        evaluator_tokens: 0,
        status,
        elapsed,
    };
    let mut attempt = Attempt::default();
    for Stamped { at, path, kind } in events {
        let at = *at;
        let in_worker = path.contains("/worker:");
        if let OperationKind::Worker { .. } = operation.kind {
            attempt.follow_worker(operation, at, in_worker, kind);
        }
        match (operation.kind, kind) {
            (OperationKind::ModelStream { .. }, EventKind::ModelCallStarted { .. })
            | (OperationKind::ToolCall { .. }, EventKind::ToolCallStarted { .. }) => {
                attempt.start = Some(at);
                attempt.hang_from = operation.hangs_at.map(|h| at + h);
            }
            (
                OperationKind::ModelStream { .. },
                EventKind::ModelCallFinished {
                    outcome: CallOutcome::Ok,
                    ..
                },
            )
            | (
                OperationKind::ToolCall { .. },
                EventKind::ToolCallFinished {
                    outcome: CallOutcome::Ok,
                    ..
                },
            )
            | (
                OperationKind::Worker { .. },
                EventKind::WorkerFinished {
                    outcome: CallOutcome::Ok,
                    ..
                },
            ) => outcome.answered = true,
            (_, EventKind::Verdict(record))
                if watches(operation.kind, record.lease_kind, in_worker) =>
            {
                outcome.evaluated(record.evaluator.as_ref());
                if !matches!(record.verdict, Verdict::Intervene | Verdict::Escalate) {
                    continue;
                }
                outcome.kills += 1;
                match record.lease_kind {
                    LeaseKind::ToolCall => {
                        outcome.wasted_tool_time +=
                            attempt.start.map_or(Duration::ZERO, |s| at - s);
                    }
                    LeaseKind::WorkerStep => {
                        outcome.wasted_tokens += attempt.worker_tokens(operation, at);
                    }
                    _ => outcome.wasted_tokens += record.evidence.count,
                }
                attempt.cut(&mut outcome, at);
            }
            (_, EventKind::BudgetExtended(record) | EventKind::BudgetExhausted(record)) => {
                outcome.evaluated(record.evaluator.as_ref());
                if matches!(kind, EventKind::BudgetExtended(_)) {
                    outcome.budget_extended += 1;
                } else {
                    outcome.budget_wrapped_up += 1;
                    attempt.cut(&mut outcome, at);
                }
            }
            _ => {}
        }
    }
    outcome
}

/// Whether a lease of `kind` (held in a worker or not) is the operation's.
fn watches(operation: OperationKind, kind: LeaseKind, in_worker: bool) -> bool {
    match operation {
        OperationKind::ModelStream { .. } => kind == LeaseKind::ModelStream,
        OperationKind::ToolCall { .. } => kind == LeaseKind::ToolCall,
        // The worker's own lease, and the leases of its steps.
        OperationKind::Worker { .. } => kind == LeaseKind::WorkerStep || in_worker,
    }
}

/// What is known of the operation's current attempt, from its events.
#[derive(Default)]
struct Attempt {
    /// When it started.
    start: Option<Instant>,
    /// When it stopped making progress for good (or will), if it does.
    hang_from: Option<Instant>,
    /// Tokens of the worker's finished steps in this attempt of it.
    worker_tokens: u64,
    /// When the worker's step in flight began streaming, if one is.
    step_started: Option<Instant>,
}

impl Attempt {
    /// Follows a worker through its events: each spawn is a new attempt
    /// (a looping one is stuck from its start), each step's stream is
    /// counted, and a hang's instant is known once its step starts.
    fn follow_worker(
        &mut self,
        operation: &Operation,
        at: Instant,
        in_worker: bool,
        kind: &EventKind,
    ) {
        let OperationKind::Worker { interval, hang, .. } = operation.kind else {
            return;
        };
        match kind {
            EventKind::WorkerSpawned { .. } => {
                self.start = Some(at);
                self.worker_tokens = 0;
                self.step_started = None;
                if operation.loops {
                    self.hang_from = Some(at);
                }
            }
            EventKind::ModelCallStarted { step, .. } if in_worker => {
                self.step_started = Some(at);
                if let Some((hang_step, hang_chunk)) = hang
                    && hang_step == *step
                {
                    self.hang_from = Some(at + interval.saturating_mul(hang_chunk));
                }
            }
            EventKind::ModelCallFinished { outcome, usage, .. } if in_worker => {
                self.step_started = None;
                if *outcome == CallOutcome::Ok {
                    self.worker_tokens += usage.output_tokens;
                }
            }
            _ => {}
        }
    }

    /// The tokens a cut of the whole worker at `at` throws away: its
    /// finished steps', and the chunks its step in flight had streamed.
    fn worker_tokens(&self, operation: &Operation, at: Instant) -> u64 {
        let OperationKind::Worker {
            interval, chunks, ..
        } = operation.kind
        else {
            return 0;
        };
        let in_flight = self.step_started.map_or(0, |started| {
            let streamed = (at - started).as_millis() / interval.as_millis().max(1);
            u64::try_from(streamed)
                .unwrap_or(u64::MAX)
                .min(u64::from(chunks))
        });
        self.worker_tokens + in_flight
    }

    /// A cut at `at`: the first one at or after the hang is its detection.
    /// (A cut before the attempt hung is none: the retry hangs again, and
    /// its cut is the one that counts.)
    fn cut(&self, outcome: &mut OperationOutcome, at: Instant) {
        if outcome.detected_after.is_none()
            && let Some(hang_from) = self.hang_from
            && at >= hang_from
        {
            outcome.detected_after = Some(at - hang_from);
        }
    }
}

/// The tool `work` as one operation plays it: how long it works, how
/// often it reports progress, where it stalls (first attempt only) and
/// where it hangs (every attempt).
#[derive(Clone, Copy, Debug, Default)]
struct ToolPlan {
    work: Duration,
    progress: Option<Duration>,
    stall: Option<(Duration, Duration)>,
    hang_at: Option<Duration>,
}

impl ToolPlan {
    fn of(operation: &Operation) -> Option<Self> {
        match operation.kind {
            OperationKind::ToolCall { progress } => Some(Self {
                work: operation.work,
                progress,
                stall: operation.tool_stall,
                hang_at: operation.hangs_at,
            }),
            _ => None,
        }
    }

    /// Works, reporting progress every `progress` of work done (not at
    /// its end), silent for the stall's length at its point, and silent
    /// for good from the hang's point.
    async fn play(self, evidence: leasehold_actors::Evidence, first: bool) -> ToolOutput {
        let stall = self.stall.filter(|_| first);
        let every = self.progress.filter(|every| !every.is_zero());
        let mut done = Duration::ZERO;
        let mut since_progress = Duration::ZERO;
        let mut stalled = false;
        let mut reports = 0u32;
        loop {
            if self.hang_at.is_some_and(|at| done >= at) {
                std::future::pending::<()>().await;
            }
            if let Some((at, silence)) = stall
                && !stalled
                && done >= at
            {
                stalled = true;
                tokio::time::sleep(silence).await;
            }
            if done >= self.work {
                break;
            }
            // Up to the next progress report, the end, or a point.
            let mut step = self.work - done;
            if let Some(every) = every {
                step = step.min(every - since_progress);
            }
            let points = [self.hang_at, stall.filter(|_| !stalled).map(|(at, _)| at)];
            for point in points.into_iter().flatten().filter(|&p| p > done) {
                step = step.min(point - done);
            }
            tokio::time::sleep(step).await;
            done += step;
            since_progress += step;
            if let Some(every) = every
                && since_progress >= every
                && done < self.work
            {
                since_progress = Duration::ZERO;
                reports += 1;
                // A counter toward its total, as an MCP server reports it.
                let total = (self.work.as_secs_f64() / every.as_secs_f64()).ceil();
                evidence.progress_value(
                    f64::from(reports),
                    Some(total),
                    format!("{reports}/{total}"),
                );
            }
        }
        ToolOutput {
            content: "done".to_owned(),
            is_error: false,
        }
    }
}

/// An endpoint's outage: until the instant it comes back, a call sent to
/// it is lost (no chunk, no answer, no error).
#[derive(Clone, Default)]
struct Outage(Arc<Mutex<Option<Instant>>>);

impl Outage {
    fn until(&self, until: Option<Instant>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = until;
    }

    fn is_down(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|until| Instant::now() < until)
    }
}

/// The tools behind an endpoint that may be dead: until the instant it
/// comes back, a call is lost (it never answers, and says nothing); after
/// it, `work` plays the operation's [`ToolPlan`] and the other tools are
/// the scripted ones.
#[derive(Clone)]
struct Endpoint {
    tools: ScriptedTools,
    outage: Outage,
    state: Arc<Mutex<EndpointState>>,
}

/// The operation's tool plan, and how many calls of `work` it had.
#[derive(Default)]
struct EndpointState {
    plan: Option<ToolPlan>,
    calls: u32,
}

impl Endpoint {
    fn new(tools: ScriptedTools) -> Self {
        Self {
            tools,
            outage: Outage::default(),
            state: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EndpointState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn plan(&self, plan: Option<ToolPlan>) {
        let mut state = self.lock();
        state.plan = plan;
        state.calls = 0;
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
        if self.outage.is_down() {
            return Box::pin(std::future::pending());
        }
        let mut state = self.lock();
        if invocation.name == TOOL
            && let Some(plan) = state.plan
        {
            state.calls += 1;
            let first = state.calls == 1;
            return Box::pin(async move { Ok(plan.play(evidence, first).await) });
        }
        drop(state);
        self.tools.call(invocation, evidence)
    }
}

/// One event of the run in progress, stamped with tokio's (paused) clock.
struct Stamped {
    at: Instant,
    path: String,
    kind: EventKind,
}

/// An event sink that keeps the events of the run in progress.
#[derive(Clone, Default)]
struct OperationSink {
    events: Arc<Mutex<Vec<Stamped>>>,
}

impl OperationSink {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Stamped>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn clear(&self) {
        self.lock().clear();
    }

    fn take(&self) -> Vec<Stamped> {
        std::mem::take(&mut *self.lock())
    }
}

impl EventSink for OperationSink {
    fn emit(&self, _run_id: &str, path: &str, kind: EventKind) {
        self.lock().push(Stamped {
            at: Instant::now(),
            path: path.to_owned(),
            kind,
        });
    }
}

/// The scripted model behind an endpoint that may be dead, which plays a
/// worker's steps by the number of the step asked for: a worker restarted
/// from scratch replays its steps from the first.
#[derive(Clone, Default)]
struct WorkloadModel {
    scripted: ScriptedModel,
    worker: Arc<Mutex<Option<WorkerPlan>>>,
    outage: Outage,
}

/// A worker operation's steps.
#[derive(Clone, Copy)]
struct WorkerPlan {
    steps: u32,
    chunks: u32,
    interval: Duration,
    hang: Option<(u32, u32)>,
    loops: bool,
}

impl WorkerPlan {
    /// The answer to the worker's step `step`; `wrapping_up` when its
    /// budget checkpoint wrapped it up (it is offered no tool).
    fn turn(self, step: u32, wrapping_up: bool) -> Turn {
        if wrapping_up {
            return Turn::answer("what was done so far").with_chunks(1, self.interval);
        }
        // A worker getting somewhere notes something new at each step; one
        // going round in circles makes the same call again and again.
        let turn = if self.loops {
            Turn::tools([(NOTE, serde_json::json!({"note": "checking again"}))])
        } else if step < self.steps {
            Turn::tools([(
                NOTE,
                serde_json::json!({"note": format!("step {step} done")}),
            )])
        } else {
            Turn::answer("done")
        };
        let turn = streamed(turn, self.chunks, self.interval);
        match self.hang {
            Some((hang_step, chunk)) if hang_step == step => hang_after(turn, chunk),
            _ => turn,
        }
    }
}

impl WorkloadModel {
    fn worker(&self, operation: &Operation) {
        let plan = match operation.kind {
            OperationKind::Worker {
                steps,
                chunks,
                interval,
                hang,
                ..
            } => Some(WorkerPlan {
                steps,
                chunks,
                interval,
                hang,
                loops: operation.loops,
            }),
            _ => None,
        };
        *self.worker.lock().unwrap_or_else(PoisonError::into_inner) = plan;
    }
}

impl ModelClient for WorkloadModel {
    fn complete(
        &self,
        request: ModelRequest,
        evidence: leasehold_actors::Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        if self.outage.is_down() {
            // Lost: no chunk, no answer, no error.
            return Box::pin(std::future::pending());
        }
        let plan = *self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(plan) = plan
            && request.consumer.starts_with("worker:")
        {
            // The step asked for: one more than the model's answers so far.
            let answers = request
                .messages
                .iter()
                .filter(|m| m.role == ChatRole::Assistant)
                .count();
            let step = u32::try_from(answers).unwrap_or(u32::MAX).saturating_add(1);
            self.scripted.replace_script(
                &request.consumer,
                [plan.turn(step, request.tools.is_empty())],
            );
        }
        self.scripted.complete(request, evidence)
    }
}
