//! The small traits the actors talk through.
//!
//! Actors never do I/O themselves: whatever leaves the process (a model that
//! judges a lease, the wall clock that stamps events, the sink that carries
//! them) comes in through one of these ports, so that the real parts live in
//! the `leasehold` crate and tests can swap in fakes (feature `test-util`).

mod changes;
mod clock;
mod evaluator;
mod events;
mod model;
mod store;
mod tools;

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

pub use changes::{
    CHANGE_FEED_CAPACITY, ChangeFeed, ChangeHub, RunCommand, StoreChange, StoredCommand,
};
pub use clock::{Clock, SystemClock, TokioClock};
pub use evaluator::{
    BudgetEvaluationRequest, EvaluationRequest, Evaluator, EvaluatorAnswer, EvaluatorError,
};
pub use events::EventSink;
pub use model::{
    ChatMessage, ChatRole, FinishReason, ModelClient, ModelError, ModelErrorKind, ModelReply,
    ModelRequest, ToolCallRequest,
};
pub use store::{
    ClaimOutcome, Fenced, PauseRecord, PurgeReport, PurgeRule, QueueClaim, ReconcileDecision,
    RunPage, RunQuery, RunRecord, RunStatus, RunSummary, RunUpdate, SUMMARY_CHARS, Snapshot, Store,
    StoreError, SummaryPage, ToolCallRecord, ToolCallState, fencing, listing, retention,
};
pub use tools::{ToolClient, ToolDefinition, ToolError, ToolInvocation, ToolOutput};

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

/// Tokens an evaluator spent, for cost attribution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCost {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}
