//! The small traits the actors talk through.
//!
//! Actors never do I/O themselves: whatever leaves the process (a model that
//! judges a lease, the wall clock that stamps events, the sink that carries
//! them) comes in through one of these ports, so that the real parts live in
//! the `leasehold` crate and tests can swap in fakes (feature `test-util`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::event::EventKind;
use crate::evidence::EvidenceSummary;
use crate::lease::{LeaseId, LeaseKind};

/// A boxed, sendable future: what a port returns so it can be used as `dyn`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One message of a loop's transcript, as shown to an evaluator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The message text.
    pub content: String,
}

impl TranscriptMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// What the watchdog shows an evaluator when a lease has expired and neither
/// the free ladder nor fresh evidence settled it.
#[derive(Clone, Debug, Serialize)]
pub struct EvaluationRequest {
    /// The lease that expired.
    pub lease_id: LeaseId,
    /// The run the lease belongs to.
    pub run_id: String,
    /// Where in the run's tree the supervised operation is.
    pub path: String,
    /// What kind of operation the lease watches.
    pub kind: LeaseKind,
    /// What the operation is doing, in words (a tool name, a model call).
    pub subject: String,
    /// How many times this lease has been renewed so far.
    pub renewals: u32,
    /// How many renewals the lease may have in all.
    pub max_renewals: u32,
    /// How long one lease period is.
    #[serde(with = "crate::event::millis")]
    pub lease: Duration,
    /// Liveness evidence: count, age of the last item, phi, repetition.
    pub evidence: EvidenceSummary,
    /// Consecutive renewals this lease had on evidence alone before this
    /// expiry: at `evidence_renewals` the evaluator is asked anyway.
    pub evidence_renewals: u32,
    /// What the evidence carried: for a stream, the last 2 KiB of its text
    /// so far (cut on a character boundary); `None` for an operation that
    /// reports no text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_tail: Option<String>,
    /// The last few messages of the loop's transcript.
    pub transcript_tail: Arc<[TranscriptMessage]>,
}

/// Tokens an evaluator spent, for cost attribution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCost {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// The raw answer of an evaluator: its text, unparsed, and what it cost.
///
/// The watchdog, not the evaluator, parses the text, so every evaluator is held
/// to the same strict-JSON discipline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvaluatorAnswer {
    /// The text the evaluator produced.
    pub text: String,
    /// What producing it cost.
    pub cost: TokenCost,
}

/// An evaluator that could not answer at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("evaluator failed: {message}")]
pub struct EvaluatorError {
    /// What went wrong (transport, refusal, …).
    pub message: String,
}

impl EvaluatorError {
    /// An error with the given message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// A judge of expired leases: in production a model of role `fast` prompted to
/// answer strict JSON `{"verdict": …, "reason": …, "nudge": …}`.
///
/// The watchdog runs it in a task of its own under a flat timeout, so an
/// implementation may take as long as it likes; whatever it returns that is
/// not exactly that JSON trips the breaker and renews.
pub trait Evaluator: Send + Sync + 'static {
    /// Judges one expired lease.
    fn evaluate(
        &self,
        request: EvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>>;

    /// Judges one exhausted step budget: must answer strict JSON
    /// `{"decision": "EXTEND|WRAP_UP", "reason": …, "confidence": 0..1}`.
    /// An evaluator that does not judge budgets fails, and the checkpoint
    /// wraps up.
    fn evaluate_budget(
        &self,
        request: BudgetEvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        let _ = request;
        Box::pin(async {
            Err(EvaluatorError::new(
                "this evaluator does not judge step budgets",
            ))
        })
    }
}

/// What a budget checkpoint shows an evaluator when a loop has used up its
/// steps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BudgetEvaluationRequest {
    /// The run.
    pub run_id: String,
    /// The loop (`run`, `run/worker:research#1`).
    pub path: String,
    /// Steps taken.
    pub steps_used: u32,
    /// Steps the flow declared.
    pub steps_declared: u32,
    /// The current limit.
    pub limit: u32,
    /// Tool calls made so far.
    pub tool_calls: u32,
    /// Workers spawned so far.
    pub spawns: u32,
    /// Milestones closed.
    pub milestones_closed: Vec<String>,
    /// Milestones still open.
    pub milestones_open: Vec<String>,
    /// Extensions granted so far.
    pub extensions_used: u32,
    /// Extensions left.
    pub extensions_left: u32,
    /// The last messages of the loop's transcript.
    pub transcript_tail: Arc<[TranscriptMessage]>,
}

/// The wall clock that stamps events and persisted records.
///
/// Actor logic measures time with tokio only (so tests run on paused time);
/// this port is only for the timestamps people read.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_unix_ms(&self) -> u64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that starts at a fixed instant and follows tokio's clock, so that
/// timestamps are deterministic on paused time.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin_unix_ms: u64,
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading `origin_unix_ms` now.
    pub fn starting_at(origin_unix_ms: u64) -> Self {
        Self {
            origin_unix_ms,
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_unix_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.origin_unix_ms.saturating_add(elapsed)
    }
}

/// Where actors publish events. Emitting never blocks and never fails: a
/// supervised operation must not slow down because somebody reads slowly.
pub trait EventSink: Send + Sync + 'static {
    /// Publishes one event of `run_id`, at `path` in its tree.
    fn emit(&self, run_id: &str, path: &str, kind: EventKind);
}

// ---------------------------------------------------------------------------
// The agent loop's ports: models, tools, the store.
// ---------------------------------------------------------------------------

/// Who wrote a chat message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions.
    System,
    /// The task, guidance, nudges.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// One message of a chat completion request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// For an assistant message: the tool calls it asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    /// For a tool message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    fn plain(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content)
    }

    /// An assistant message, with the tool calls it asked for.
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCallRequest>) -> Self {
        Self {
            tool_calls,
            ..Self::plain(Role::Assistant, content)
        }
    }

    /// A tool's result for the call `call_id`.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            ..Self::plain(Role::Tool, content)
        }
    }

    /// The message as the evaluator sees it in a transcript tail.
    pub fn to_transcript(&self) -> TranscriptMessage {
        let role = match self.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        let mut content = self.content.clone();
        for call in &self.tool_calls {
            content.push_str(&format!("\n[calls {}({})]", call.name, call.arguments));
        }
        TranscriptMessage::new(role, content)
    }
}

/// A tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The model's id for the call.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments, a JSON object.
    pub arguments: serde_json::Value,
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The JSON schema of its arguments.
    pub input_schema: serde_json::Value,
    /// Whether calling it twice with the same arguments is harmless, where
    /// known (MCP's `idempotentHint`, or the flow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
}

/// One chat completion request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// The tools the model may call.
    pub tools: Vec<ToolDefinition>,
    /// Stream the answer (each chunk is evidence) or wait for it whole.
    pub stream: bool,
    /// Who the cost is attributed to: `run`, `worker:NAME`, …
    pub consumer: String,
}

/// A model's complete answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelReply {
    /// Its text.
    pub content: String,
    /// The tool calls it asks for.
    pub tool_calls: Vec<ToolCallRequest>,
    /// What it cost.
    pub usage: TokenCost,
    /// Why the model stopped, when the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
}

/// Why a model stopped answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// It finished its answer.
    Stop,
    /// It stopped to call tools.
    ToolCalls,
    /// It was cut off at its length limit: the answer is not whole.
    Length,
    /// A content filter stopped it.
    ContentFilter,
    /// A reason this runtime does not know.
    #[serde(other)]
    Other,
}

impl FinishReason {
    /// The reason an OpenAI-compatible server names (`stop`, `tool_calls`,
    /// `length`, `content_filter`; `function_call` counts as `tool_calls`).
    pub fn from_openai(name: &str) -> Self {
        match name {
            "stop" | "end_turn" => Self::Stop,
            "tool_calls" | "function_call" => Self::ToolCalls,
            "length" | "max_tokens" => Self::Length,
            "content_filter" => Self::ContentFilter,
            _ => Self::Other,
        }
    }
}

/// What kind of failure a model call had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelErrorKind {
    /// Nothing listens at the endpoint.
    ConnectionRefused,
    /// No chunk for longer than the idle timeout.
    IdleTimeout,
    /// The connection dropped in the middle of the answer.
    Disconnected,
    /// 429: too many requests.
    RateLimited,
    /// 5xx.
    Server,
    /// 4xx other than 429.
    Client,
    /// A chunk that could not be parsed.
    MalformedChunk,
    /// Anything else.
    Other,
}

/// A failed model call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("model call failed ({kind:?}): {message}")]
pub struct ModelError {
    /// What kind of failure.
    pub kind: ModelErrorKind,
    /// What happened.
    pub message: String,
    /// Whether trying again may help.
    pub retryable: bool,
    /// How long the server asked us to wait, if it did.
    pub retry_after: Option<Duration>,
}

impl ModelError {
    /// A failure of `kind` with `message`.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>, retryable: bool) -> Self {
        Self {
            kind,
            message: message.into(),
            retryable,
            retry_after: None,
        }
    }
}

/// A chat-completion client. Implementations report each received chunk
/// into `evidence` and have no request-wide deadline: the lease decides how
/// long a live call may take.
pub trait ModelClient: Send + Sync + 'static {
    /// Runs one chat completion.
    fn complete(
        &self,
        request: ModelRequest,
        evidence: crate::evidence::Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>>;

    /// What this client calls, for a person reading why a run paused:
    /// e.g. `model llama-3 at http://10.0.0.5:8080/v1/chat/completions`.
    fn describe(&self) -> String {
        "the model".to_owned()
    }
}

/// One call of a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolInvocation {
    /// The tool's name.
    pub name: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
    /// The same across retries and resumes of this call, so a tool can
    /// recognise a repeat.
    pub idempotency_key: String,
}

/// A tool's result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// What the tool returned, as text for the model.
    pub content: String,
    /// Whether the tool itself reported an error (the model sees it).
    pub is_error: bool,
}

/// A tool call that could not be made or did not return.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tool call failed: {message}")]
pub struct ToolError {
    /// What happened.
    pub message: String,
    /// Whether trying again may help.
    pub retryable: bool,
}

impl ToolError {
    /// A failure with `message`.
    pub fn new(message: impl Into<String>, retryable: bool) -> Self {
        Self {
            message: message.into(),
            retryable,
        }
    }
}

/// A tool client (an MCP server, or in-process tools). Implementations report
/// each progress notification into `evidence`.
pub trait ToolClient: Send + Sync + 'static {
    /// The tools it offers.
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>>;
    /// Calls one tool.
    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: crate::evidence::Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>>;

    /// Stops whatever the client started (a child process, a session). The
    /// engine calls it when the run that owns the client ends; the default
    /// does nothing.
    fn shutdown(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// Where a run is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Stepping.
    Running,
    /// Paused by an `ESCALATE` until a person resumes or cancels it.
    WaitingHuman,
    /// Paused on a tool call of unknown outcome until a person decides.
    ReconciliationRequired,
    /// Its executor's lease expired: no process is working on it. Another
    /// executor may claim it and resume it from its last snapshot.
    Orphaned,
    /// Ended with an answer.
    Completed,
    /// Ended with a failure.
    Failed,
    /// Ended by a person.
    Cancelled,
}

impl RunStatus {
    /// Whether the run has ended for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// Whether the run waits for a person.
    pub fn is_paused(self) -> bool {
        matches!(self, Self::WaitingHuman | Self::ReconciliationRequired)
    }
}

mod store;

pub use store::{
    ClaimOutcome, Fenced, PauseRecord, RunRecord, RunUpdate, Snapshot, Store, StoreError,
    ToolCallRecord, ToolCallState, fencing,
};
