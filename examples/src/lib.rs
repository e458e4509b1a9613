//! Examples of embedding leasehold, and the demo run by `cargo run -p
//! leasehold-examples --example demo`.
//!
//! The demo runs one incident review, on the real clock, in about five
//! seconds: the root spawns three workers, and each shows one thing.
//!
//! - `logs` searches slowly but visibly: each search takes 1.1 s under a
//!   0.3 s lease and reports progress every 0.1 s. After its two free
//!   renewals, fresh evidence keeps renewing it without any evaluator call.
//!   It is declared with 2 steps, needs 4, and its budget checkpoint extends
//!   it in proportion to its limit.
//! - `metrics` calls a tool that hangs silently: after the free renewals the
//!   evaluator intervenes, and the supervisor restarts the call after its
//!   backoff, with the same idempotency key. The second attempt answers.
//! - `deploys` wants to roll back production, and its tool goes silent: the
//!   evaluator escalates, the whole run pauses in `waiting_human` with its
//!   clocks stopped, and a person answers a second later; the worker's next
//!   step sees the answer.
//!
//! The model, the tools and the evaluator are in-process and scripted, so the
//! demo needs no network and no API key. [`RuleEvaluator`] answers the same
//! strict JSON a model of role `fast` must answer, by rule.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use leasehold::prelude::*;
use leasehold::testing::{ScriptedModel, ScriptedTools, ToolAct, Turn};
use tokio::time::Instant;

/// What the person says when the run pauses.
pub const GUIDANCE: &str =
    "Do not roll back: the fix is already deploying. Report the deploy status.";

/// An evaluator that judges by rule, answering strict JSON as a model must.
///
/// Leases: fresh evidence renews; a silent operation whose subject has side
/// effects in production (a rollback, a deploy, a payment) escalates; any
/// other silent one is intervened. Budgets: a loop whose every step made a
/// tool call is converging and is extended with full confidence; otherwise
/// it wraps up.
#[derive(Clone, Debug, Default)]
pub struct RuleEvaluator;

impl RuleEvaluator {
    fn judge(request: &EvaluationRequest) -> (Verdict, String) {
        let silent = request.evidence.phi.is_none_or(|phi| phi >= 8.0);
        let side_effects = ["rollback", "deploy", "charge", "payment"]
            .iter()
            .any(|word| request.subject.contains(word));
        match (silent, side_effects) {
            (false, _) => (Verdict::Renew, "evidence is flowing".to_owned()),
            (true, true) => (
                Verdict::Escalate,
                format!(
                    "`{}` is silent after {} renewals and changes production: a person must decide",
                    request.subject, request.renewals
                ),
            ),
            (true, false) => (
                Verdict::Intervene,
                format!(
                    "`{}` has sent no evidence in {} renewals: restart it",
                    request.subject, request.renewals
                ),
            ),
        }
    }
}

impl Evaluator for RuleEvaluator {
    fn evaluate(
        &self,
        request: EvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        let (verdict, reason) = Self::judge(&request);
        let text =
            serde_json::json!({"verdict": verdict, "reason": reason, "nudge": null}).to_string();
        Box::pin(async move {
            Ok(EvaluatorAnswer {
                text,
                cost: TokenCost::default(),
            })
        })
    }

    fn evaluate_budget(
        &self,
        request: BudgetEvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        let figures = &request.figures;
        let converging = figures.tool_calls >= figures.steps_used;
        let text = if converging {
            serde_json::json!({
                "decision": "EXTEND",
                "reason": format!("{} tool calls in {} steps: still making progress", figures.tool_calls, figures.steps_used),
                "confidence": 1.0
            })
        } else {
            serde_json::json!({"decision": "WRAP_UP", "reason": "stalled", "confidence": 0.8})
        }
        .to_string();
        Box::pin(async move {
            Ok(EvaluatorAnswer {
                text,
                cost: TokenCost::default(),
            })
        })
    }
}

/// The demo's flow: a root with three kinds of worker, on one tool server.
pub fn demo_flow() -> Flow {
    let flow = serde_json::json!({
        "name": "incident-review",
        "task": "Checkout latency doubled at 14:00. Find out why and what to do.",
        "system_prompt": "You coordinate an incident review.",
        "max_steps": 3,
        "tools": [{"name": "ops", "url": "http://127.0.0.1:9/mcp"}],
        "workers": {
            "logs": {"prompt": "You read logs.", "max_steps": 2},
            "metrics": {"prompt": "You read metrics.", "max_steps": 3},
            "deploys": {"prompt": "You handle deploys.", "max_steps": 3}
        }
    });
    serde_json::from_value(flow).unwrap_or_else(|e| unreachable!("the demo flow is valid: {e}"))
}

/// The demo's configuration: 0.3 s tool leases, two free renewals, restarts
/// after 0.2 s.
pub fn demo_config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_millis(300);
    config.supervision.lease.model_stream = Duration::from_secs(1);
    config.supervision.lease.worker_step = Duration::from_secs(3);
    config.supervision.watchdog.evaluator_timeout = Duration::from_secs(2);
    config.restart = RestartPolicy {
        backoff_initial: Duration::from_millis(200),
        backoff_max: Duration::from_secs(2),
        ..RestartPolicy::default()
    };
    config
}

/// The scripted model of the demo: what the root and each worker say.
pub fn demo_model() -> ScriptedModel {
    let search = || {
        Turn::tools([(
            "search_logs",
            serde_json::json!({"query": "checkout 14:00"}),
        )])
    };
    ScriptedModel::new()
        .script(
            "run",
            [
                Turn::spawn([
                    ("logs", "Search the checkout logs around 14:00."),
                    ("metrics", "Read the checkout latency metrics."),
                    ("deploys", "Roll back whatever was deployed at 14:00."),
                ]),
                Turn::answer(
                    "Latency doubled because the 13:58 deploy exhausted the DB pool; the fix is deploying, no rollback needed.",
                ),
            ],
        )
        .script(
            "worker:logs",
            [
                search(),
                search(),
                search(),
                Turn::answer("Pool-exhaustion errors start at 13:59, right after the deploy."),
            ],
        )
        .script(
            "worker:metrics",
            [
                Turn::tools([("fetch_metrics", serde_json::json!({"series": "checkout.p99"}))]),
                Turn::answer("p99 went from 1.1 s to 2.3 s at 14:00."),
            ],
        )
        .script(
            "worker:deploys",
            [
                Turn::tools([("rollback_deploy", serde_json::json!({"service": "checkout"}))]),
                Turn::answer("No rollback: the fix is deploying, 60 % rolled out."),
            ],
        )
}

/// The scripted tools of the demo.
pub fn demo_tools() -> ScriptedTools {
    ScriptedTools::new()
        .tool(
            "search_logs",
            Some(true),
            [ToolAct::Return {
                latency: Duration::from_millis(1100),
                progress_every: Some(Duration::from_millis(100)),
                result: "412 matching lines".to_owned(),
            }],
        )
        .tool(
            "fetch_metrics",
            Some(true),
            [
                ToolAct::Hang,
                ToolAct::returns(
                    "checkout.p99: 1.1 s → 2.3 s at 14:00",
                    Duration::from_millis(150),
                ),
            ],
        )
        .tool("rollback_deploy", Some(false), [ToolAct::Hang])
}

/// How the demo went.
#[derive(Debug, PartialEq)]
pub struct DemoReport {
    /// The run's final state.
    pub state: RunState,
    /// Budget extensions granted.
    pub extensions: usize,
    /// Restarts.
    pub restarts: usize,
    /// Pauses.
    pub pauses: usize,
    /// Verdicts on the slow searches decided by fresh evidence.
    pub search_renewed_by_evidence: usize,
    /// Evaluator calls about the slow searches (should be none).
    pub search_evaluator_calls: usize,
}

impl DemoReport {
    /// Whether the demo showed what it is meant to show.
    pub fn as_expected(&self) -> bool {
        self.state.status == RunStatus::Completed
            && self.extensions >= 1
            && self.restarts >= 1
            && self.pauses == 1
            && self.search_renewed_by_evidence >= 1
            && self.search_evaluator_calls == 0
    }

    fn from_events(state: RunState, events: &[Arc<Event>]) -> Self {
        let count = |name: &str| events.iter().filter(|e| e.kind.name() == name).count();
        let search_verdicts = |by: DecidedBy| {
            events
                .iter()
                .filter(|e| matches!(&e.kind, EventKind::Verdict(r) if r.subject == "search_logs" && r.decided_by == by))
                .count()
        };
        Self {
            state,
            extensions: count("budget_extended"),
            restarts: count("restarted"),
            pauses: count("paused"),
            search_renewed_by_evidence: search_verdicts(DecidedBy::Evidence)
                + search_verdicts(DecidedBy::Progress),
            search_evaluator_calls: search_verdicts(DecidedBy::Evaluator),
        }
    }
}

/// Runs the demo, writing a readable log of its events to `out`.
pub async fn run_demo(
    out: &mut (impl Write + Send),
) -> Result<DemoReport, Box<dyn std::error::Error>> {
    let bus = EventBus::new();
    let mut stream = bus.subscribe();
    let engine = Engine::builder()
        .config(demo_config())
        .model(Arc::new(demo_model()))
        .tool_server("ops", Arc::new(demo_tools()))
        .evaluator(Arc::new(RuleEvaluator))
        .events(Arc::new(bus.clone()))
        .build()
        .await?;

    writeln!(
        out,
        "leasehold demo: an incident review with three workers, 0.3 s tool leases, 2 free renewals\n"
    )?;
    let begun = Instant::now();
    let origin = SystemClock.now_unix_ms();
    let mut run = engine.start(demo_flow()).await?;
    let mut events = Vec::new();
    let mut answered = false;
    let state = loop {
        tokio::select! {
            state = run.wait_until(move |s| s.status.is_paused() && !answered) => {
                if state.status.is_terminal() {
                    break state;
                }
                let at = SystemClock.now_unix_ms();
                writeln!(out, "{}  the run waits for a person; one answers a second later:", seconds(at, origin))?;
                writeln!(out, "        \"{GUIDANCE}\"")?;
                tokio::time::sleep(Duration::from_secs(1)).await;
                run.resume(Some(GUIDANCE.to_owned())).await?;
                answered = true;
            }
            Some(Ok(event)) = stream.recv() => {
                if !matches!(event.kind, EventKind::Progress { .. } | EventKind::ModelCallStarted { .. }) {
                    writeln!(out, "{}", describe(&event, origin))?;
                }
                events.push(event);
            }
        }
    };
    while let Some(Ok(event)) = stream.try_recv() {
        writeln!(out, "{}", describe(&event, origin))?;
        events.push(event);
    }
    let report = DemoReport::from_events(state, &events);
    writeln!(out)?;
    writeln!(out, "status      {:?}", report.state.status)?;
    writeln!(
        out,
        "answer      {}",
        report.state.answer.as_deref().unwrap_or("-")
    )?;
    writeln!(
        out,
        "shown       {}, {}, {}; slow searches renewed {} on evidence with {}",
        leasehold::counted(report.extensions, "budget extension"),
        leasehold::counted(report.restarts, "restart"),
        leasehold::counted(report.pauses, "pause"),
        leasehold::counted(report.search_renewed_by_evidence, "time"),
        leasehold::counted(report.search_evaluator_calls, "evaluator call")
    )?;
    writeln!(out, "took        {:.1} s", begun.elapsed().as_secs_f64())?;
    Ok(report)
}

/// One line of the demo's log for `event`, timed from `origin` (Unix ms).
pub fn describe(event: &Event, origin: u64) -> String {
    format!(
        "{}  {:<34} {:<20} {}",
        seconds(event.at, origin),
        event.path,
        event.kind.name(),
        event.kind.describe()
    )
}

fn seconds(at: u64, origin: u64) -> String {
    let millis = at.saturating_sub(origin);
    format!("{:>3}.{:02}s", millis / 1000, (millis % 1000) / 10)
}
