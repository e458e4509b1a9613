//! leasehold: an actor runtime for agent platforms that supervises every slow
//! thing in an agent run with *leases* instead of deadlines.
//!
//! A lease is a timer beside the work. When it expires nothing is cancelled:
//! a watchdog is asked for a verdict — `RENEW`, `NUDGE`, `INTERVENE`,
//! `ESCALATE` — made on liveness evidence (stream tokens, MCP progress, worker
//! steps) and, only when the evidence is silent or suspicious, on a cheap
//! model's judgement. Detection and allocation are separate jobs, so a slow
//! tool and a dead tool no longer leave the same trace.
//!
//! This crate is the one to depend on. It re-exports the supervision tree
//! ([`leasehold_actors`]); the real parts (the sled store, the model and MCP
//! clients, configuration, the server and the command line) live beside it.
//!
//! # Cargo features
//!
//! The default features build today's `leasehold` binary. An embedder that
//! needs only the engine turns them off (`default-features = false`) and
//! keeps the engine, flows and configuration (`[model]` and `[[tools]]`
//! included), without reqwest, rmcp, hyper, clap or axum; it brings a model
//! client and a tool client of its own, or turns `openai` and `mcp` back
//! on.
//!
//! | feature | what it adds | on by default |
//! |---|---|---|
//! | `openai` | the model client for OpenAI-compatible servers and the evaluator on it (`model::OpenAiClient`, `model::ModelEvaluator`; `model::ModelSettings` is in every build): reqwest over rustls | yes |
//! | `mcp` | the MCP tool client (`tools::McpToolClient`): rmcp, process-wrap, nix | yes |
//! | `store` | the embedded sled run store (`store::SledStore`; `store::Durability`, a setting, is in every build) | yes |
//! | `postgres` | the PostgreSQL run store many executors share (`store::PostgresStore`; see `docs/deployment.md`) | yes |
//! | `server` | the HTTP API, its event stream, `/metrics` and the dashboard (`server`, `metrics`) | yes |
//! | `demo` | the embedded demo (`demo`): its scripted model server and its MCP tool server; needs `openai` and `mcp` | yes |
//! | `cli` | the command line (`cli`) and the `leasehold` binary; needs `store`, `server`, `demo`, `openai` and `mcp` | yes |
//! | `experiment` | seeded workloads under several supervision strategies (`experiment`, `leasehold experiment`), on paused tokio time with the scripted fakes (`tokio/test-util`, `test-util`) | yes |
//! | `test-util` | scripted fakes of every port (`testing`) | no |
//!
//! The library only emits `tracing` events and spans; it installs no
//! subscriber. The binary installs one (`RUST_LOG` decides); an embedder
//! installs its own.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use leasehold::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let events = EventBus::new();
//! let supervision = Supervision::start(SupervisionConfig::default(), None, Arc::new(events)).await?;
//! let spec = supervision.config.lease.spec(LeaseKind::ToolCall, "search")?;
//! let handle = supervision.leases.supervise(spec, |_evidence| async { 2 + 2 })?;
//! assert_eq!(handle.outcome().await?, 4);
//! # Ok(())
//! # }
//! ```

// The supervision tree, re-exported by name: what `leasehold` offers is
// this list, not whatever `leasehold-actors` happens to make public.
#[cfg(feature = "test-util")]
pub use leasehold_actors::testing;
pub use leasehold_actors::{
    AccrualConfig, AccrualPolicy, AlwaysEvaluatePolicy, BUDGET_CONSUMER, BoxFuture,
    BudgetCheckpointActor, BudgetCheckpointArgs, BudgetConfig, BudgetDecision,
    BudgetEvaluationRequest, BudgetFigures, BudgetMsg, BudgetOverrides, BudgetParseError,
    BudgetRecord, BudgetReply, COMPLETE_MILESTONE_TOOL, CallOutcome, CallPace, ChatMessage,
    ChatRole, ChildEnd, ChildInfo, ChildKind, ClaimOutcome, Clock, CommandArg, ConfigError,
    ControlError, DEFAULT_LOAD_BOUND, DEFAULT_MAX_PROGRESS_NOTE_BYTES, DEFAULT_MAX_RUN_EVENTS,
    DEFAULT_MAX_TOOL_RESULT_BYTES, DEFAULT_PROBE_INTERVAL, DEFAULT_PROGRESS_INTERVAL,
    DEFAULT_RETENTION, DeadlinePolicy, DecidedBy, Decision, Engine, EngineBuilder, EngineConfig,
    EngineError, EvaluationRequest, Evaluator, EvaluatorAnswer, EvaluatorError, EvaluatorUsage,
    Event, EventBus, EventKind, EventLimits, EventSink, EventStream, Evidence, EvidenceKind,
    EvidenceKinds, EvidenceSummary, Expiry, FailFast, Fenced, FinishReason, Flow, FlowError,
    GiveUpScope, HandedTo, IdleKillPolicy, Judge, JudgeConfig, Judgement, Lagged, LeaseConfig,
    LeaseError, LeaseExpiry, LeaseHandle, LeaseId, LeaseKind, LeaseMeta, LeaseMsg, LeaseOverrides,
    LeaseSpec, LeaseTerms, LeaseholdPolicy, Leases, LoadGauge, LoadRule, MAX_DURATION,
    MAX_DURATION_EXPECTED, MAX_EXTENSIONS, MIN_PROGRESS_NOTE_BYTES, MIN_TRIGRAMS, MemoryStore,
    ModelClient, ModelError, ModelErrorKind, ModelReply, ModelRequest, NudgeQueue, OnExhausted,
    Pace, PaceBook, ParsedBudgetDecision, ParsedVerdict, PauseRecord, Policies, PolicyChoice,
    PolicyName, ProgressSummary, QueueClaim, RUN_STOP_GRACE, ReconcileDecision, RestartOnIntervene,
    RestartPolicy, RunHandle, RunPage, RunQuery, RunRecord, RunState, RunStatus, RunSummary,
    RunUpdate, SPAWN_WORKER_TOOL, SUMMARY_CHARS, Snapshot, Spread, StartError, Store, StoreError,
    StrategyFactory, StrategyKind, SummaryPage, Supervision, SupervisionAction, SupervisionConfig,
    SupervisionOverrides, SupervisionStrategy, SystemClock, TAIL_BYTES, TermsByKind, TokenCost,
    TokioClock, ToolCallRecord, ToolCallRequest, ToolCallState, ToolClient, ToolDefinition,
    ToolError, ToolFactory, ToolInvocation, ToolOutput, ToolServer, TranscriptMessage, Verdict,
    VerdictParseError, VerdictPolicy, VerdictRecord, WATCHDOG_CONSUMER, WatchdogActor,
    WatchdogArgs, WatchdogConfig, WatchdogMsg, WorkerKind, check_duration, check_positive_duration,
    checkpoint_due, clamp_duration, cut_note, deadline_after, describe_duration, fencing, listing,
    max_extensions_expected, parse_budget_decision, parse_verdict, proportional_extension,
    renewal_cap, repetition,
};
// The store's change feed and the commands forwarded to a run's owner.
pub use leasehold_actors::{
    CHANGE_FEED_CAPACITY, ChangeFeed, ChangeHub, RunCommand, StoreChange, StoredCommand,
};
// The rules between settings, each checked once: by the configuration,
// the engine's, a flow and an experiment alike.
pub use leasehold_actors::rules;
// Retention: which finished runs a store deletes (the rule is in
// [`retention`], beside the task that deletes them).
pub use leasehold_actors::{PurgeReport, PurgeRule};

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(any(feature = "cli", feature = "experiment"))]
mod columns;
pub mod config;
#[cfg(feature = "demo")]
pub mod demo;
pub mod executor;
#[cfg(feature = "experiment")]
pub mod experiment;
pub mod flow_file;
#[cfg(feature = "server")]
pub mod metrics;
pub mod model;
pub mod printable;
pub mod retention;
pub mod run_limits;
pub mod secret;
#[cfg(feature = "server")]
pub mod server;
mod server_limits;
pub mod store;
pub mod tools;
pub mod trace;

/// The names most users need: the engine and its runs, flows, events,
/// every port to implement with the records it takes and gives, supervision
/// strategies and verdict policies, leases for supervising work of your
/// own, and a run's trace.
pub mod prelude {
    pub use crate::trace::TraceSummary;
    pub use leasehold_actors::prelude::*;
}
