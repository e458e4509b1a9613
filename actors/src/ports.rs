//! The small traits the actors talk through.
//!
//! Actors never do I/O themselves: whatever leaves the process (a model that
//! judges a lease, the wall clock that stamps events, the sink that carries
//! them) comes in through one of these ports, so that the real parts live in
//! the `leasehold` crate and tests can swap in fakes (feature `test-util`).

mod changes;
mod clock;
mod evaluator;
mod model;
mod store;
mod tools;

use std::future::Future;
use std::pin::Pin;

pub use crate::vocabulary::records::{FinishReason, TokenCost, TranscriptMessage};
pub use crate::vocabulary::sink::EventSink;
pub use changes::{
    CHANGE_FEED_CAPACITY, ChangeFeed, ChangeHub, InFlight, LeaseAct, PauseRequest,
    ReconcileDecision, RunCommand, Steer, StoreChange, StoredCommand,
};
pub use clock::{Clock, SystemClock, TokioClock};
pub use evaluator::{
    BudgetEvaluationRequest, EvaluationRequest, Evaluator, EvaluatorAnswer, EvaluatorError,
};
pub use model::{
    ChatMessage, ChatRole, ModelClient, ModelError, ModelErrorKind, ModelReply, ModelRequest,
    ToolCallRequest,
};
pub use store::{
    ChangeSource, ClaimOutcome, Delivery, EventLog, Fenced, ForkOrigin, GoneHolder, IdempotencyKey,
    KeptKey, KeyStore, KeyedCreation, LayeredStore, Notice, NoticeTake, Outbox, PaceStore,
    PauseRecord, PurgeReport, PurgeRule, QueueClaim, QueueStore, Retention, RunPage, RunQuery,
    RunRecord, RunStatus, RunStore, RunSummary, RunUpdate, SUMMARY_CHARS, Snapshot, SnapshotBase,
    SnapshotStore, SnapshotTable, StatusCounts, Store, StoreError, StoreErrorKind, StoreFuture,
    SummaryPage, ToolCallRecord, ToolCallState, fencing, fingerprint, history, listing, outbox,
    retention, seen,
};
pub use tools::{ToolClient, ToolDefinition, ToolError, ToolInvocation, ToolOutput};

/// A boxed, sendable future: what a port returns so it can be used as `dyn`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
