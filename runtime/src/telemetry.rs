//! A run's trace, assembled from its events.
//!
//! An exporter (OpenTelemetry over OTLP) must never slow or fail a run, so
//! spans are not made on the run's path: [`SpanAssembler`] reads the
//! events a run publishes, in order, and hands back each span once it has
//! ended, with the ids every executor derives for it
//! ([`run_trace_id`],
//! [`span_id_of`]): a run started within a caller's trace (`POST /runs`
//! with a `traceparent`) is in the caller's trace, its run span a child of
//! the caller's span; a resumed run's span begins when the run was
//! created. The span of a model call
//! or a tool call attempt is the one whose `traceparent` the model server
//! or the tool server was sent, so a server's own trace nests under it.
//!
//! The tree, named as the OpenTelemetry semantic conventions for
//! generative AI name operations (`gen_ai.operation.name`):
//!
//! ```text
//! invoke_agent FLOW                      the run
//! ├── step N                             each step of the root loop
//! │   ├── chat MODEL                     each model call attempt, with its tokens
//! │   │   └── chat JUDGE                 an evaluator call on its lease
//! │   ├── execute_tool TOOL              each tool call attempt
//! │   └── invoke_agent KIND              a worker …
//! │       └── step N                     … and its own steps, calls and workers
//! ```
//!
//! A lease's expiry and each verdict are events of the operation's span,
//! with who decided and why; a budget checkpoint's evaluator call is a span
//! of the step it decided.

#[cfg(feature = "otel")]
pub mod otlp;

use std::collections::HashMap;

use leasehold_actors::{CallOutcome, Event, EventKind, loop_of, run_trace_id, span_id_of};
use serde_json::Value;

/// One attribute's value.
pub type Attribute = (&'static str, Value);

/// An event on a span: a lease's expiry, a verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanEvent {
    /// Its name.
    pub name: String,
    /// When (Unix ms).
    pub at_ms: u64,
    /// What it says.
    pub attributes: Vec<Attribute>,
}

/// A span that has ended.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedSpan {
    /// Its trace: 32 hex digits.
    pub trace_id: String,
    /// Its id: 16 hex digits.
    pub span_id: String,
    /// Its parent's id, none for the run's.
    pub parent_span_id: Option<String>,
    /// Its name (`chat MODEL`, `execute_tool TOOL`, …).
    pub name: String,
    /// When it began (Unix ms).
    pub start_ms: u64,
    /// When it ended (Unix ms).
    pub end_ms: u64,
    /// Its attributes.
    pub attributes: Vec<Attribute>,
    /// Its events.
    pub events: Vec<SpanEvent>,
    /// Whether it ended in error, and why.
    pub error: Option<String>,
}

/// A span still open.
#[derive(Clone, Debug)]
struct Open {
    span: FinishedSpan,
}

/// Assembles the spans of runs from their events, in the order each run
/// published them. Spans still open when a run ends are ended with it.
#[derive(Debug, Default)]
pub struct SpanAssembler {
    /// Open spans, by run and key.
    open: HashMap<(String, String), Open>,
    /// Each loop's current step span key, by run and loop path.
    steps: HashMap<(String, String), String>,
    /// Each operation path's current attempt key, by run and path.
    attempts: HashMap<(String, String), String>,
    /// The runs started within a caller's trace: that trace, and the
    /// caller's span, the run span's parent.
    callers: HashMap<String, leasehold_actors::TraceParent>,
}

impl SpanAssembler {
    /// An assembler with nothing open.
    pub fn new() -> Self {
        Self::default()
    }

    /// Spans open now.
    pub fn open_spans(&self) -> usize {
        self.open.len()
    }

    /// Takes `event` in; returns the spans it ended.
    pub fn feed(&mut self, event: &Event) -> Vec<FinishedSpan> {
        let run = &*event.run_id;
        let path = &*event.path;
        let mut ended = Vec::new();
        match &event.kind {
            EventKind::RunStarted {
                flow, trace_parent, ..
            } => {
                self.learn_caller(run, trace_parent.as_deref());
                self.ensure_run(run, event.at, Some(flow));
            }
            EventKind::RunForked(fork) => {
                self.ensure_run(run, event.at, Some(&fork.flow));
            }
            EventKind::RunResumed {
                created_at_ms,
                trace_parent,
                ..
            } => {
                self.learn_caller(run, trace_parent.as_deref());
                // The run began when it was created, on whichever executor.
                self.ensure_run(run, created_at_ms.unwrap_or(event.at), None);
            }
            EventKind::StepStarted { step, .. } => {
                self.ensure_run(run, event.at, None);
                let key = format!("{path}/step:{step}");
                if let Some(previous) = self
                    .steps
                    .insert((run.to_owned(), path.to_owned()), key.clone())
                {
                    ended.extend(self.end(run, &previous, event.at, None));
                }
                let parent = self.loop_span(run, path);
                self.start(
                    run,
                    &key,
                    parent,
                    format!("step {step}"),
                    event.at,
                    vec![
                        ("leasehold.loop", Value::from(path)),
                        ("leasehold.step", Value::from(*step)),
                    ],
                );
            }
            EventKind::ModelCallStarted {
                step,
                attempt,
                stream,
                ..
            } => {
                let key = format!("{path}/model_call:{step}#{attempt}");
                self.attempts.insert(
                    (run.to_owned(), format!("{path}/model_call:{step}")),
                    key.clone(),
                );
                let parent = self.step_of(run, path);
                self.start(
                    run,
                    &key,
                    parent,
                    "chat".to_owned(),
                    event.at,
                    vec![
                        ("gen_ai.operation.name", Value::from("chat")),
                        ("leasehold.attempt", Value::from(*attempt)),
                        ("leasehold.stream", Value::from(*stream)),
                    ],
                );
            }
            EventKind::ModelCallFinished {
                step,
                attempt,
                outcome,
                usage,
                model,
                spent,
                finish_reason,
                ..
            } => {
                let key = format!("{path}/model_call:{step}#{attempt}");
                if let Some(open) = self.open.get_mut(&(run.to_owned(), key.clone())) {
                    let span = &mut open.span;
                    if let Some(model) = model {
                        span.name = format!("chat {model}");
                        span.attributes
                            .push(("gen_ai.request.model", Value::from(model.as_str())));
                    }
                    span.attributes.extend([
                        ("gen_ai.usage.input_tokens", Value::from(usage.input_tokens)),
                        (
                            "gen_ai.usage.output_tokens",
                            Value::from(usage.output_tokens),
                        ),
                        ("leasehold.usage.counted", Value::from(usage.counted)),
                    ]);
                    if let Some(spent) = spent {
                        span.attributes
                            .push(("leasehold.spent", Value::from(*spent)));
                    }
                    if let Some(reason) = finish_reason {
                        span.attributes.push((
                            "gen_ai.response.finish_reasons",
                            serde_json::to_value([reason]).unwrap_or(Value::Null),
                        ));
                    }
                }
                ended.extend(self.end(run, &key, event.at, failure(*outcome)));
            }
            EventKind::ToolCallStarted {
                tool,
                idempotency_key,
                attempt,
                ..
            } => {
                let key = format!("{path}#{attempt}");
                self.attempts
                    .insert((run.to_owned(), path.to_owned()), key.clone());
                let parent = self.step_of(run, loop_of(path));
                self.start(
                    run,
                    &key,
                    parent,
                    format!("execute_tool {tool}"),
                    event.at,
                    vec![
                        ("gen_ai.operation.name", Value::from("execute_tool")),
                        ("gen_ai.tool.name", Value::from(tool.as_str())),
                        ("gen_ai.tool.call.id", Value::from(idempotency_key.as_str())),
                        ("leasehold.attempt", Value::from(*attempt)),
                    ],
                );
            }
            EventKind::ToolCallFinished {
                attempt, outcome, ..
            } => {
                let key = format!("{path}#{attempt}");
                ended.extend(self.end(run, &key, event.at, failure(*outcome)));
            }
            EventKind::WorkerSpawned { worker, task, .. } => {
                // Under the step of the loop that spawned it.
                let spawner = path.rsplit_once('/').map_or("run", |(parent, _)| parent);
                let parent = self.step_of(run, spawner);
                self.start(
                    run,
                    path,
                    parent,
                    format!("invoke_agent {worker}"),
                    event.at,
                    vec![
                        ("gen_ai.operation.name", Value::from("invoke_agent")),
                        ("gen_ai.agent.name", Value::from(worker.as_str())),
                        ("leasehold.task", Value::from(task.as_str())),
                    ],
                );
            }
            EventKind::WorkerFinished { .. } => {
                if let Some(step) = self.steps.remove(&(run.to_owned(), path.to_owned())) {
                    ended.extend(self.end(run, &step, event.at, None));
                }
                ended.extend(self.end(run, path, event.at, None));
            }
            EventKind::Wait { lease_kind, .. } => {
                self.on_operation(
                    run,
                    path,
                    SpanEvent {
                        name: "lease expired".to_owned(),
                        at_ms: event.at,
                        attributes: vec![(
                            "leasehold.lease_kind",
                            Value::from(lease_kind.as_str()),
                        )],
                    },
                );
            }
            EventKind::Verdict(record) => {
                self.on_operation(
                    run,
                    path,
                    SpanEvent {
                        name: format!("verdict {}", record.verdict.as_str()),
                        at_ms: event.at,
                        attributes: vec![
                            ("leasehold.verdict", Value::from(record.verdict.as_str())),
                            (
                                "leasehold.decided_by",
                                Value::from(record.decided_by.as_str()),
                            ),
                            ("leasehold.reason", Value::from(record.reason.as_str())),
                            ("leasehold.renewals", Value::from(record.renewals)),
                        ],
                    },
                );
                if let Some(usage) = &record.evaluator {
                    let parent = self.operation_of(run, path);
                    ended.push(self.evaluator_span(run, path, event, parent, usage));
                }
            }
            EventKind::BudgetExtended(record) | EventKind::BudgetExhausted(record) => {
                if let Some(usage) = &record.evaluator {
                    let parent = self.step_of(run, path);
                    ended.push(self.evaluator_span(run, path, event, parent, usage));
                }
            }
            EventKind::RunCompleted { .. }
            | EventKind::RunFailed { .. }
            | EventKind::RunCancelled { .. } => {
                let error = match &event.kind {
                    EventKind::RunFailed { reason } => Some(reason.clone()),
                    _ => None,
                };
                ended.extend(self.end_run(run, event.at, error));
            }
            _ => {}
        }
        ended
    }

    /// Remembers that `run` belongs to its caller's trace, if it does.
    fn learn_caller(&mut self, run: &str, caller: Option<&leasehold_actors::TraceParent>) {
        if let Some(caller) = caller {
            self.callers.insert(run.to_owned(), caller.clone());
        }
    }

    /// The trace `run` belongs to.
    fn trace_of(&self, run: &str) -> String {
        run_trace_id(run, self.callers.get(run))
    }

    fn ensure_run(&mut self, run: &str, at: u64, flow: Option<&String>) {
        let key = (run.to_owned(), "run".to_owned());
        if let Some(open) = self.open.get_mut(&key) {
            if let Some(flow) = flow {
                open.span.name = format!("invoke_agent {flow}");
                open.span
                    .attributes
                    .push(("gen_ai.agent.name", Value::from(flow.as_str())));
            }
            return;
        }
        let mut attributes = vec![
            ("gen_ai.operation.name", Value::from("invoke_agent")),
            ("leasehold.run_id", Value::from(run)),
        ];
        if let Some(flow) = flow {
            attributes.push(("gen_ai.agent.name", Value::from(flow.as_str())));
        }
        let name = flow.map_or_else(
            || "invoke_agent".to_owned(),
            |f| format!("invoke_agent {f}"),
        );
        let parent = self.callers.get(run).map(|caller| caller.span_id.clone());
        self.start(run, "run", parent, name, at, attributes);
    }

    fn start(
        &mut self,
        run: &str,
        key: &str,
        parent: Option<String>,
        name: String,
        at: u64,
        attributes: Vec<Attribute>,
    ) {
        let trace_id = self.trace_of(run);
        let span = FinishedSpan {
            span_id: span_id_of(run, key),
            trace_id,
            parent_span_id: parent,
            name,
            start_ms: at,
            end_ms: at,
            attributes,
            events: Vec::new(),
            error: None,
        };
        self.open
            .insert((run.to_owned(), key.to_owned()), Open { span });
    }

    fn end(
        &mut self,
        run: &str,
        key: &str,
        at: u64,
        error: Option<String>,
    ) -> Option<FinishedSpan> {
        let mut open = self.open.remove(&(run.to_owned(), key.to_owned()))?;
        open.span.end_ms = at.max(open.span.start_ms);
        open.span.error = error;
        Some(open.span)
    }

    /// Ends every span of `run` still open, the run's last.
    fn end_run(&mut self, run: &str, at: u64, error: Option<String>) -> Vec<FinishedSpan> {
        let keys: Vec<String> = self
            .open
            .keys()
            .filter(|(r, k)| r == run && k != "run")
            .map(|(_, k)| k.clone())
            .collect();
        let mut ended: Vec<FinishedSpan> = keys
            .iter()
            .filter_map(|k| self.end(run, k, at, None))
            .collect();
        ended.extend(self.end(run, "run", at, error));
        self.steps.retain(|(r, _), _| r != run);
        self.attempts.retain(|(r, _), _| r != run);
        self.callers.remove(run);
        ended
    }

    /// The id of the span a loop's steps hang under: the run's for the
    /// root, the worker's for a worker.
    fn loop_span(&mut self, run: &str, loop_path: &str) -> Option<String> {
        let key = if loop_path.contains('/') {
            loop_path
        } else {
            "run"
        };
        self.id_of(run, key)
    }

    /// The id of the loop's current step span, else the loop's.
    fn step_of(&mut self, run: &str, loop_path: &str) -> Option<String> {
        match self
            .steps
            .get(&(run.to_owned(), loop_path.to_owned()))
            .cloned()
        {
            Some(step) => self
                .id_of(run, &step)
                .or_else(|| self.loop_span(run, loop_path)),
            None => self.loop_span(run, loop_path),
        }
    }

    /// The id of the open span of the operation at `path` (its current
    /// attempt), else of the worker at `path`, else of its loop's step.
    fn operation_of(&mut self, run: &str, path: &str) -> Option<String> {
        if let Some(attempt) = self
            .attempts
            .get(&(run.to_owned(), path.to_owned()))
            .cloned()
            && let Some(id) = self.id_of(run, &attempt)
        {
            return Some(id);
        }
        self.id_of(run, path)
            .or_else(|| self.step_of(run, loop_of(path)))
    }

    fn on_operation(&mut self, run: &str, path: &str, event: SpanEvent) {
        let key = self
            .attempts
            .get(&(run.to_owned(), path.to_owned()))
            .cloned()
            .filter(|k| self.open.contains_key(&(run.to_owned(), k.clone())))
            .unwrap_or_else(|| path.to_owned());
        if let Some(open) = self.open.get_mut(&(run.to_owned(), key)) {
            open.span.events.push(event);
        }
    }

    fn id_of(&self, run: &str, key: &str) -> Option<String> {
        self.open
            .get(&(run.to_owned(), key.to_owned()))
            .map(|open| open.span.span_id.clone())
    }

    fn evaluator_span(
        &self,
        run: &str,
        path: &str,
        event: &Event,
        parent: Option<String>,
        usage: &leasehold_actors::EvaluatorUsage,
    ) -> FinishedSpan {
        let trace_id = self.trace_of(run);
        let key = format!("{path}/evaluator@{}", event.position.max(event.seq));
        let mut attributes = vec![
            ("gen_ai.operation.name", Value::from("chat")),
            ("leasehold.consumer", Value::from(usage.consumer.as_str())),
            (
                "gen_ai.usage.input_tokens",
                Value::from(usage.cost.input_tokens),
            ),
            (
                "gen_ai.usage.output_tokens",
                Value::from(usage.cost.output_tokens),
            ),
        ];
        if let Some(model) = &usage.model {
            attributes.push(("gen_ai.request.model", Value::from(model.as_str())));
        }
        if let Some(spent) = usage.spent {
            attributes.push(("leasehold.spent", Value::from(spent)));
        }
        FinishedSpan {
            span_id: span_id_of(run, &key),
            trace_id,
            parent_span_id: parent,
            name: usage
                .model
                .as_ref()
                .map_or_else(|| "chat".to_owned(), |m| format!("chat {m}")),
            start_ms: event.at.saturating_sub(usage.latency_ms),
            end_ms: event.at,
            attributes,
            events: Vec::new(),
            error: None,
        }
    }
}

/// Why an attempt that did not end well failed.
fn failure(outcome: CallOutcome) -> Option<String> {
    match outcome {
        CallOutcome::Ok => None,
        other => Some(format!("{other:?}").to_lowercase()),
    }
}
