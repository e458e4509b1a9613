//! The supervision tree of leasehold: leases, the watchdog and their policies.
//!
//! leasehold supervises every slow thing in an agent run with a *lease*: a
//! timer beside the work that, when it expires, asks a *watchdog* for a
//! verdict — `RENEW`, `NUDGE`, `INTERVENE`, `ESCALATE` — instead of cancelling.
//! This crate holds the actors and the small traits ([`ports`]) they talk
//! through; it does no I/O. Users depend on the `leasehold` crate, which
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

pub mod agent;
pub mod budget;
mod duration;
pub mod engine;
pub mod event;
mod event_log;
pub mod evidence;
pub mod flow;
pub mod lease;
pub mod memory;
pub mod nudge;
pub mod ports;
pub mod reply;
pub mod run;
pub mod strategy;
pub mod verdict;
pub mod watchdog;

mod error;
mod evaluation;
mod serde_time;
mod strict_json;
mod supervision;
#[cfg(feature = "test-util")]
pub mod testing;

pub use duration::{
    MAX_DURATION, MAX_DURATION_EXPECTED, check_duration, check_positive_duration, clamp_duration,
    deadline_after, describe_duration,
};
pub use error::ConfigError;
pub use supervision::{Supervision, SupervisionConfig};

/// The names most users need: the engine and its runs, flows, events, the
/// ports to implement, supervision strategies and verdict policies, and
/// leases for supervising work of your own.
pub mod prelude {
    pub use crate::agent::{ControlError, ReconcileDecision};
    pub use crate::budget::BudgetFigures;
    pub use crate::engine::{Engine, EngineBuilder, EngineConfig, EngineError};
    pub use crate::event::{Event, EventBus, EventKind, EventStream, Lagged};
    pub use crate::evidence::{Evidence, EvidenceSummary};
    pub use crate::flow::{Flow, FlowError};
    pub use crate::lease::{
        LeaseConfig, LeaseError, LeaseHandle, LeaseId, LeaseKind, LeaseSpec, Leases,
    };
    pub use crate::nudge::NudgeQueue;
    pub use crate::ports::{
        BoxFuture, BudgetEvaluationRequest, Clock, EvaluationRequest, Evaluator, EvaluatorAnswer,
        EvaluatorError, EventSink, ModelClient, RunStatus, Store, SystemClock, TokenCost,
        ToolClient, TranscriptMessage,
    };
    pub use crate::run::{RunHandle, RunState};
    pub use crate::strategy::{
        ChildEnd, ChildInfo, ChildKind, OnExhausted, RestartPolicy, StrategyFactory,
        SupervisionAction, SupervisionStrategy,
    };
    pub use crate::verdict::{DecidedBy, Decision, Verdict, VerdictRecord};
    pub use crate::watchdog::{PolicyKind, VerdictPolicy, WatchdogConfig};
    pub use crate::{ConfigError, MAX_DURATION, Supervision, SupervisionConfig};
}
