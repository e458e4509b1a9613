//! The supervision tree of leasehold: leases, the watchdog and their policies.
//!
//! leasehold supervises every slow thing in an agent run with a *lease*: a
//! timer beside the work that, when it expires, asks a *watchdog* for a
//! verdict — `RENEW`, `NUDGE`, `INTERVENE`, `ESCALATE` — instead of cancelling.
//! This crate holds the actors and the small traits they talk through (the
//! ports: [`ModelClient`], [`ToolClient`], [`Evaluator`], [`Store`],
//! [`Clock`], [`EventSink`]); it does no I/O. Every public name is at the
//! crate's root. Users depend on the `leasehold` crate, which
//! re-exports it.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use leasehold_actors::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let events = EventBus::new();
//! let supervision = Supervision::start(SupervisionConfig::default(), None, Arc::new(events.clone())).await?;
//! let spec = LeaseSpec::new(LeaseKind::ToolCall, "search", Duration::from_secs(10))?;
//! // Fifty seconds of work under a ten-second lease: renewed, never cancelled.
//! let handle = supervision.leases.supervise(spec, |evidence| async move {
//!     for _ in 0..50 {
//!         tokio::time::sleep(Duration::from_secs(1)).await;
//!         evidence.observe();
//!     }
//!     "done"
//! })?;
//! assert_eq!(handle.outcome().await?, "done");
//! # Ok(())
//! # }
//! ```

mod agent;
mod duration;
mod endpoints;
mod engine;
mod error;
mod event;
mod event_log;
mod flow;
mod fork;
mod hash;
pub mod keyed_limits;
mod load;
mod memory;
mod nudge;
mod owner;
mod pace;
mod ports;
mod reply;
pub mod rules;
mod run;
mod serde_time;
mod spawn;
mod store_writes;
mod strict_json;
mod supervision;
pub mod tenancy;
mod trace_context;
mod usage;
mod vocabulary;

#[cfg(feature = "test-util")]
pub mod testing;

// The public API, flat: every name an embedder uses is at the crate's root,
// whatever file it lives in, so moving code between files never changes it.

// The engine and its runs.
pub use agent::{COMPLETE_MILESTONE_TOOL, ControlError, ReconcileDecision, SPAWN_WORKER_TOOL};
pub use endpoints::{DownBy, EndpointView, Endpoints, Outages};
pub use engine::{
    DEFAULT_MAX_TOOL_RESULT_BYTES, DEFAULT_RETENTION, Engine, EngineBuilder, EngineConfig,
    EngineError, IDEMPOTENCY_RETENTION, RUN_STOP_GRACE, RunOptions, ToolFactory, ToolSecrets,
};
pub use owner::OwnerId;
pub use run::{ENDPOINT_SUBJECT, MAX_WAITING_MESSAGES, RunEvents, RunHandle, RunState};

// Flows.
pub use flow::{
    BudgetOverrides, CommandArg, Flow, FlowBuilder, FlowError, IntoPolicyChoice, LeaseOverrides,
    MAX_ANSWER_TOKENS, MAX_NOTIFY, SpawnOverrides, StrategyKind, SupervisionOverrides, ToolServer,
    WorkerKind,
};
pub use spawn::{SpawnLimits, SpawnRefusal};
pub use store_writes::{
    DEFAULT_RETRY_FOR, FIRST_PAUSE, LONGEST_PAUSE, OnStoreFailure, StoreHealth, StoreHealthReport,
    StoreWrites,
};

// Forks.
pub use fork::{ForkError, ForkSpec};

// Events.
pub use event::{
    BudgetRecord, CallOutcome, DEFAULT_MAX_PROGRESS_NOTE_BYTES, DEFAULT_MAX_RUN_EVENTS,
    DEFAULT_PROGRESS_INTERVAL, Event, EventBus, EventKind, EventLimits, EventStream, HandedTo,
    Lagged, LogTail, MAX_KEPT_TEXT, MIN_PROGRESS_NOTE_BYTES, OverflowAction, RunFork, TailRead,
    TextDelta, TextFollow, Texts, counted, cut_note,
};

// The ports to implement, and the records they carry.
pub use memory::MemoryStore;
pub use ports::{
    BoxFuture, BudgetEvaluationRequest, ChatMessage, ChatRole, Clock, EvaluationRequest, Evaluator,
    EvaluatorAnswer, EvaluatorError, EventSink, FinishReason, ModelClient, ModelError,
    ModelErrorKind, ModelReply, ModelRequest, SystemClock, TokenCost, TokioClock, ToolCallRequest,
    ToolClient, ToolDefinition, ToolError, ToolInvocation, ToolOutput, TranscriptMessage,
};
// The store port: its parts, their union, the base of a store that wraps
// another, and the records they carry.
pub use ports::{
    CHANGE_FEED_CAPACITY, ChangeFeed, ChangeHub, InFlight, LeaseAct, PauseRequest, RunCommand,
    Steer, StoreChange, StoredCommand,
};
pub use ports::{
    ChangeSource, ClaimOutcome, Delivery, EventLog, Fenced, ForkOrigin, GoneHolder, IdempotencyKey,
    KeptKey, KeyStore, KeyedCreation, LayeredStore, Notice, NoticeTake, Outbox, PaceStore,
    PauseRecord, PurgeReport, PurgeRule, QueueClaim, QueueStore, Retention, RunPage, RunQuery,
    RunRecord, RunStatus, RunStore, RunSummary, RunUpdate, SUMMARY_CHARS, Snapshot, SnapshotBase,
    SnapshotStore, SnapshotTable, StatusCounts, Store, StoreError, StoreErrorKind, StoreFuture,
    SummaryPage, ToolCallRecord, ToolCallState, fencing, history, listing, outbox, retention, seen,
};

// Leases and their evidence, for supervising work of your own.
pub use load::{DEFAULT_LOAD_BOUND, DEFAULT_PROBE_INTERVAL, LoadGauge, LoadRule, MIN_LOAD_BOUND};
pub use nudge::NudgeQueue;
pub use supervision::evidence::{
    Evidence, EvidenceKind, EvidenceKinds, EvidenceSummary, MIN_STEPS, MIN_TRIGRAMS,
    OperationTiming, ProgressSummary, STEP_WINDOW, TAIL_BYTES, TIMED_SILENCES, TimedEnd,
    repetition,
};
pub use supervision::lease::terms::{LeaseTerms, TermsByKind};
pub use supervision::lease::{
    DEFAULT_CEILING, DEFAULT_EVIDENCE_RENEWALS, DEFAULT_FREE_RENEWALS, DEFAULT_MAX_RENEWALS,
    DEFAULT_REPETITION_THRESHOLD, LeaseConfig, LeaseError, LeaseHandle, LeaseId, LeaseKind,
    LeaseMeta, LeaseSpec, Leases, MIN_LEASE,
};
pub use supervision::{Supervision, SupervisionConfig};

// Verdicts: their vocabulary, the policy that decides them, the watchdog.
pub use pace::{
    CallPace, MAX_PACE_KEYS, MIN_RUNS, PRIOR_SAMPLES, Pace, PaceBook, PaceMode, QUANTILE_PERCENT,
    RunSample, Spread, WINDOW_RUNS, run_tag,
};
pub use supervision::policy::{
    AlwaysEvaluatePolicy, DeadlinePolicy, Expiry, IdleKillPolicy, Judgement, LeaseholdPolicy,
    MAX_CAP_CHECKPOINTS, Policies, PolicyChoice, PolicyName, VerdictPolicy, fresh_evidence,
    renewal_cap, strong_evidence,
};
pub use supervision::watchdog::{
    AccrualConfig, AccrualPolicy, StartError, WATCHDOG_CONSUMER, WatchdogConfig,
};
pub use vocabulary::verdict::{
    DecidedBy, Decision, EvaluatorUsage, ParsedVerdict, Verdict, VerdictParseError, VerdictRecord,
    parse_verdict,
};

// Step budgets and their checkpoint.
pub use supervision::budget::{
    BUDGET_CONSUMER, BudgetConfig, BudgetDecision, BudgetFigures, BudgetParseError, MAX_EXTENSIONS,
    ParsedBudgetDecision, SpendingFigures, checkpoint_due, max_extensions_expected,
    parse_budget_decision, proportional_extension,
};

// Traces: the trace a run belongs to, W3C trace context.
pub use trace_context::{
    TraceParent, TraceParentError, run_trace_id, span_id_of, trace_id_for, trace_id_of,
    traceparent_of,
};

// What runs spent.
pub use usage::{
    CallUsage, LoopUsage, MAX_PRICE, Price, Prices, Usage, UsageReport, WorkerUsage, loop_of,
};

// Supervision strategies.
pub use supervision::strategy::{
    ChildEnd, ChildInfo, ChildKind, FailFast, GiveUpScope, OnExhausted, RestartOnIntervene,
    RestartPolicy, StrategyFactory, SupervisionAction, SupervisionStrategy,
};

// Durations: the one bound every configured duration is checked against.
pub use duration::{
    MAX_DURATION, MAX_DURATION_EXPECTED, check_duration, check_positive_duration, clamp_duration,
    deadline_after, describe_duration,
};
pub use error::ConfigError;

/// The names most users need: the engine and its runs, flows, events,
/// every port to implement with the records it takes and gives (a model
/// client, a tool client, an evaluator, a store and each of its parts,
/// and the base of a store that wraps another), supervision strategies
/// and verdict policies, and leases for supervising work of your own.
pub mod prelude {
    pub use crate::agent::{ControlError, ReconcileDecision};
    pub use crate::engine::{Engine, EngineBuilder, EngineConfig, EngineError};
    pub use crate::event::{Event, EventBus, EventKind, EventStream, Lagged};
    pub use crate::flow::{Flow, FlowBuilder, FlowError, ToolServer, WorkerKind};
    pub use crate::memory::MemoryStore;
    pub use crate::nudge::NudgeQueue;
    pub use crate::pace::Pace;
    pub use crate::ports::{
        BoxFuture, BudgetEvaluationRequest, ChatMessage, ChatRole, Clock, EvaluationRequest,
        Evaluator, EvaluatorAnswer, EvaluatorError, EventSink, FinishReason, ModelClient,
        ModelError, ModelErrorKind, ModelReply, ModelRequest, SystemClock, TokenCost,
        ToolCallRequest, ToolClient, ToolDefinition, ToolError, ToolInvocation, ToolOutput,
        TranscriptMessage,
    };
    pub use crate::supervision::budget::BudgetFigures;
    pub use crate::supervision::evidence::{
        Evidence, EvidenceKind, EvidenceSummary, ProgressSummary,
    };
    pub use crate::supervision::lease::terms::LeaseTerms;
    pub use crate::supervision::lease::{
        LeaseConfig, LeaseError, LeaseHandle, LeaseId, LeaseKind, LeaseSpec, Leases,
    };
    pub use crate::supervision::policy::{
        Expiry, Judgement, Policies, PolicyChoice, PolicyName, VerdictPolicy, renewal_cap,
    };
    // The store port: every part (in scope, so that their methods can be
    // called on an `Arc<dyn Store>`), the base of a wrapper, and every
    // record the port carries.
    pub use crate::ports::PauseRequest;
    pub use crate::ports::{
        ChangeFeed, ChangeHub, ChangeSource, ClaimOutcome, Delivery, EventLog, Fenced, ForkOrigin,
        GoneHolder, InFlight, KeyStore, LayeredStore, LeaseAct, Notice, NoticeTake, Outbox,
        PaceStore, PauseRecord, PurgeReport, PurgeRule, QueueClaim, QueueStore, Retention,
        RunCommand, RunPage, RunQuery, RunRecord, RunStatus, RunStore, RunSummary, RunUpdate,
        Snapshot, SnapshotStore, Store, StoreChange, StoreError, StoreErrorKind, StoreFuture,
        StoredCommand, SummaryPage, ToolCallRecord, ToolCallState,
    };
    pub use crate::run::{RunEvents, RunHandle, RunState};
    pub use crate::supervision::strategy::{
        ChildEnd, ChildInfo, ChildKind, OnExhausted, RestartPolicy, StrategyFactory,
        SupervisionAction, SupervisionStrategy,
    };
    pub use crate::supervision::watchdog::WatchdogConfig;
    pub use crate::vocabulary::verdict::{DecidedBy, Decision, Verdict, VerdictRecord};
    pub use crate::{ConfigError, MAX_DURATION, Supervision, SupervisionConfig};
}
