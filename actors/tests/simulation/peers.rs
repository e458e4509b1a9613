//! The simulation's peers: a model, tools and an evaluator whose every
//! answer is drawn from the seed and from *which* call it is — the run
//! (by the order it was started in), and the call's place in that run —
//! never from the order in which concurrent calls of different runs
//! reach them, which the runtime does not fix. Each answer is played by
//! the test doubles (`ScriptedModel`, `ScriptedTools`,
//! `ScriptedEvaluator`) with a script of one step.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_actors::testing::{
    Scripted, ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct, Turn,
};
use leasehold_actors::{
    BoxFuture, BudgetEvaluationRequest, EvaluationRequest, Evaluator, EvaluatorAnswer,
    EvaluatorError, Evidence, ModelClient, ModelError, ModelErrorKind, ModelReply, ModelRequest,
    ToolClient, ToolDefinition, ToolError, ToolInvocation, ToolOutput,
};
use serde_json::json;

/// The tools: one idempotent, one not.
pub const IDEMPOTENT_TOOL: &str = "lookup";
pub const EFFECT_TOOL: &str = "charge";

/// What the peers know of the world: the seed, the runs by the order they
/// were started in, how often each call was made, and whether they are
/// healthy now.
#[derive(Clone)]
pub struct Peers {
    state: Arc<Mutex<Known>>,
}

struct Known {
    seed: u64,
    /// Run id → its number.
    runs: BTreeMap<String, u64>,
    /// Trace id → the number of its run.
    traces: BTreeMap<String, u64>,
    /// How many times each call was made, by its key.
    made: BTreeMap<String, u64>,
    /// Every tool call sent: (tool, idempotency key).
    sent: Vec<(String, String)>,
    healthy: bool,
}

/// A number that stands for `parts`, the same in every process.
fn mix(parts: &[&str]) -> u64 {
    parts.iter().fold(0xcbf2_9ce4_8422_2325, |hash, part| {
        part.bytes().chain([0xff]).fold(hash, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    })
}

impl Peers {
    pub fn new(seed: u64) -> Self {
        Self {
            state: Arc::new(Mutex::new(Known {
                seed,
                runs: BTreeMap::new(),
                traces: BTreeMap::new(),
                made: BTreeMap::new(),
                sent: Vec::new(),
                healthy: false,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the peers of run `run_id`, number `number`.
    pub fn run_started(&self, run_id: &str, number: u64) {
        let mut known = self.lock();
        known.runs.insert(run_id.to_owned(), number);
        known
            .traces
            .insert(leasehold_actors::trace_id_for(run_id), number);
    }

    /// From now on every peer answers at once and well.
    pub fn heal(&self) {
        self.lock().healthy = true;
    }

    /// Every tool call sent so far: (tool, idempotency key).
    pub fn sent(&self) -> Vec<(String, String)> {
        self.lock().sent.clone()
    }

    /// A generator for the `n`th making of call `call` of the run known
    /// as `run` (a number, or an id the world has not named), and whether
    /// the peers are healthy.
    fn draw(&self, run: &str, call: &str) -> (fastrand::Rng, bool) {
        let mut known = self.lock();
        let run = known
            .runs
            .get(run)
            .or_else(|| known.traces.get(run))
            .map_or_else(|| format!("unnamed {run}"), u64::to_string);
        let made = known.made.entry(format!("{run} {call}")).or_default();
        let n = *made;
        *made += 1;
        let seed = mix(&[&known.seed.to_string(), &run, call, &n.to_string()]);
        (fastrand::Rng::with_seed(seed), known.healthy)
    }
}

/// A model call drawn from `rng`.
fn turn(rng: &mut fastrand::Rng) -> Turn {
    match rng.u32(0..100) {
        0..35 => Turn::tools([(IDEMPOTENT_TOOL, json!({"q": rng.u32(0..100)}))]),
        35..50 => Turn::tools([(EFFECT_TOOL, json!({"amount": rng.u32(1..100)}))]),
        50..58 => Turn::tools([
            (IDEMPOTENT_TOOL, json!({"q": rng.u32(0..100)})),
            (EFFECT_TOOL, json!({"amount": rng.u32(1..100)})),
        ]),
        58..78 => Turn::answer("done"),
        78..83 => Turn::hang(),
        83..88 => Turn::answer("slow").stall_after(1, Duration::from_secs(rng.u64(20..400))),
        88..93 => Turn::fail(ModelError::new(
            ModelErrorKind::Server,
            "the model's server failed",
            true,
        )),
        // Garbage: a tool nobody serves.
        93..96 => Turn::tools([("no_such_tool", json!({"x": 1}))]),
        _ => Turn::answer("late").first_chunk_after(Duration::from_secs(rng.u64(10..200))),
    }
}

/// A tool call's behaviour drawn from `rng`.
fn act(rng: &mut fastrand::Rng) -> ToolAct {
    match rng.u32(0..100) {
        0..65 => ToolAct::returns("ok", Duration::from_millis(rng.u64(0..60_000))),
        65..75 => ToolAct::Hang,
        75..85 => ToolAct::Fail(ToolError::new("the tool's server failed", true)),
        _ => ToolAct::returns("slow ok", Duration::from_secs(rng.u64(60..600))),
    }
}

/// An evaluator answer drawn from `rng`.
fn verdict(rng: &mut fastrand::Rng) -> Scripted {
    match rng.u32(0..100) {
        0..35 => Scripted::verdict("RENEW", "alive", ""),
        35..45 => Scripted::verdict("NUDGE", "hurry", "please finish"),
        45..58 => Scripted::verdict("INTERVENE", "stuck", ""),
        58..66 => Scripted::verdict("ESCALATE", "a person should look", ""),
        66..76 => Scripted::Answer("not json".into()),
        76..86 => Scripted::Fail("the evaluator is down".into()),
        86..93 => Scripted::Hang,
        _ => Scripted::AnswerAfter(
            Duration::from_secs(20),
            json!({"verdict": "RENEW", "reason": "late", "nudge": ""}).to_string(),
        ),
    }
}

/// The model: its run is its request's trace.
pub struct SimModel(pub Peers);

impl ModelClient for SimModel {
    fn complete(
        &self,
        request: ModelRequest,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        let trace = request
            .traceparent
            .as_deref()
            .and_then(|parent| parent.split('-').nth(1))
            .unwrap_or("no trace")
            .to_owned();
        let (mut rng, healthy) = self.0.draw(&trace, &request.consumer);
        let turn = if healthy {
            Turn::answer("done")
        } else {
            turn(&mut rng)
        };
        ScriptedModel::new()
            .script(&request.consumer, [turn])
            .complete(request, evidence)
    }
}

/// The tools: their run is the head of the call's idempotency key.
pub struct SimTools(pub Peers);

fn definition(name: &str, idempotent: bool) -> ToolDefinition {
    ToolDefinition {
        name: name.to_owned(),
        description: format!("the simulated tool `{name}`"),
        input_schema: json!({"type": "object"}),
        idempotent: Some(idempotent),
    }
}

impl ToolClient for SimTools {
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>> {
        let tools = vec![
            definition(IDEMPOTENT_TOOL, true),
            definition(EFFECT_TOOL, false),
        ];
        Box::pin(async move { Ok(tools) })
    }

    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let key = invocation.idempotency_key.clone();
        let (run, call) = key.split_once('/').unwrap_or((key.as_str(), ""));
        let (mut rng, healthy) = self.0.draw(run, call);
        self.0
            .lock()
            .sent
            .push((invocation.name.clone(), key.clone()));
        let act = if healthy {
            ToolAct::returns("ok", Duration::from_secs(1))
        } else {
            act(&mut rng)
        };
        let idempotent = invocation.name == IDEMPOTENT_TOOL;
        ScriptedTools::new()
            .tool(&invocation.name, Some(idempotent), [act])
            .call(invocation, evidence)
    }
}

/// The evaluator: its run is the request's, its call the lease's place
/// in the run and how often it was renewed.
pub struct SimEvaluator(pub Peers);

impl Evaluator for SimEvaluator {
    fn evaluate(
        &self,
        request: EvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        let call = format!("{} {} {}", request.path, request.subject, request.renewals);
        let (mut rng, healthy) = self.0.draw(&request.run_id, &call);
        let answer = if healthy {
            Scripted::verdict("RENEW", "alive", "")
        } else {
            verdict(&mut rng)
        };
        ScriptedEvaluator::new([answer]).evaluate(request)
    }

    fn evaluate_budget(
        &self,
        request: BudgetEvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        // No budget script: a checkpoint wraps up.
        ScriptedEvaluator::new([]).evaluate_budget(request)
    }
}
