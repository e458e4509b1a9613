//! A run's plan: everything its launch needs, worked out from its flow once.
//!
//! The engine turns a flow, with its own configuration and ports, into a
//! [`RunPlan`] before it records or claims anything, so a flow it refuses
//! leaves no trace. The plan is what the run's loops share for the whole
//! run (`RunContext` holds it and reads through to it): the per-run lease,
//! watchdog and budget configuration with the flow's overrides applied and
//! validated, the strategy factory, the tool servers with the flow's word
//! on their tools' idempotency, the model, the evaluator and the ports.
//! Nothing in it changes once the run is launched.

use std::sync::Arc;

use crate::event_log::LogItem;
use crate::flow::Flow;
use crate::ports::{Clock, Evaluator, EventSink, ModelClient, Store, ToolClient};
use crate::supervision::budget::BudgetConfig;
use crate::supervision::lease::LeaseConfig;
use crate::supervision::strategy::StrategyFactory;
use crate::supervision::watchdog::WatchdogConfig;

use super::tools::ServerClient;

/// Everything a run needs besides its id, its fence and its lease actor.
pub(crate) struct RunPlan {
    /// The flow, validated.
    pub(crate) flow: Arc<Flow>,
    /// The model every loop calls.
    pub(crate) model: Arc<dyn ModelClient>,
    /// The evaluator of the run's budget checkpoints, if any.
    pub(crate) evaluator: Option<Arc<dyn Evaluator>>,
    /// Where the run's events go (the engine's bus, the user's sink, the
    /// store's log).
    pub(crate) events: Arc<dyn EventSink>,
    /// Where the run is kept.
    pub(crate) store: Arc<dyn Store>,
    /// The wall clock of persisted records.
    pub(crate) clock: Arc<dyn Clock>,
    /// The executor that runs it.
    pub(crate) owner_id: String,
    /// The event log's writer.
    pub(crate) log: tokio::sync::mpsc::UnboundedSender<LogItem>,
    /// Lease lengths and the renewal cap, with the flow's overrides.
    pub(crate) lease_config: LeaseConfig,
    /// The watchdog's ladder and policy for this run's leases, with the
    /// flow's overrides.
    pub(crate) watchdog_config: WatchdogConfig,
    /// The terms of the run's leases per kind — policy, cap, ladder,
    /// evidence streak, thresholds — resolved once for the run.
    pub(crate) terms: crate::supervision::lease::terms::TermsByKind,
    /// The budget checkpoints' configuration, with the flow's overrides.
    pub(crate) budget_config: BudgetConfig,
    /// Makes each loop's supervision strategy.
    pub(crate) strategy: StrategyFactory,
    /// The servers the run connects as its first work, each with the
    /// flow's word on its tools' idempotency.
    pub(crate) tool_servers: Vec<ServerClient>,
    /// Tool clients made for this run alone, shut down when it ends.
    pub(crate) owned_tools: Vec<Arc<dyn ToolClient>>,
    /// The most of one tool result the model sees and the store keeps.
    pub(crate) max_tool_result_bytes: usize,
    /// How many workers the run may spawn, with the flow's overrides.
    pub(crate) spawn_limits: crate::SpawnLimits,
    /// What each model's tokens cost.
    pub(crate) prices: crate::Prices,
    /// The model's name, as prices name it.
    pub(crate) model_name: Option<String>,
    /// How the run's writes are tried again, and what a write given up
    /// does.
    pub(crate) store_writes: crate::StoreWrites,
    /// What the engine's writes met.
    pub(crate) store_health: Arc<crate::StoreHealth>,
    /// The health of the endpoints the engine's runs call.
    pub(crate) endpoints: Arc<crate::endpoints::Endpoints>,
}
