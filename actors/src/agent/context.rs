//! What every loop of one run shares: the ports, the run's lease actor,
//! its gate and its cancellation.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ractor::ActorRef;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::LoopMsg;
use crate::budget::BudgetConfig;
use crate::event::EventKind;
use crate::flow::Flow;
use crate::lease::{LeaseConfig, LeaseKind, LeaseSpec, Leases};
use crate::ports::{Evaluator, EventSink, ModelClient, Store, ToolClient, ToolDefinition};

/// Whether the run may make progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    Open,
    Paused,
    Closed,
}

/// A tool's server.
#[derive(Clone)]
pub(crate) struct ToolRoute {
    pub(crate) client: Arc<dyn ToolClient>,
    pub(crate) server: String,
}

/// What every loop of one run shares.
pub(crate) struct RunContext {
    pub(crate) run_id: String,
    pub(crate) flow: Arc<Flow>,
    pub(crate) model: Arc<dyn ModelClient>,
    pub(crate) tools: HashMap<String, ToolRoute>,
    pub(crate) tool_definitions: Vec<ToolDefinition>,
    pub(crate) leases: Leases,
    pub(crate) lease_config: LeaseConfig,
    pub(crate) free_renewals: Option<u32>,
    pub(crate) events: Arc<dyn EventSink>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) budget_config: BudgetConfig,
    pub(crate) evaluator: Option<Arc<dyn Evaluator>>,
    pub(crate) strategy: crate::engine::StrategyFactory,
    pub(crate) gate: watch::Sender<Gate>,
    pub(crate) root: std::sync::OnceLock<ActorRef<LoopMsg>>,
    pub(crate) cancel: CancellationToken,
    workers_spawned: AtomicU32,
}

impl RunContext {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        run_id: String,
        flow: Arc<Flow>,
        model: Arc<dyn ModelClient>,
        tools: HashMap<String, ToolRoute>,
        tool_definitions: Vec<ToolDefinition>,
        leases: Leases,
        lease_config: LeaseConfig,
        free_renewals: Option<u32>,
        events: Arc<dyn EventSink>,
        store: Arc<dyn Store>,
        budget_config: BudgetConfig,
        evaluator: Option<Arc<dyn Evaluator>>,
        strategy: crate::engine::StrategyFactory,
    ) -> Self {
        Self {
            run_id,
            flow,
            model,
            tools,
            tool_definitions,
            leases,
            lease_config,
            free_renewals,
            events,
            store,
            budget_config,
            evaluator,
            strategy,
            gate: watch::Sender::new(Gate::Open),
            root: std::sync::OnceLock::new(),
            cancel: CancellationToken::new(),
            workers_spawned: AtomicU32::new(0),
        }
    }

    pub(crate) fn emit(&self, path: &str, kind: EventKind) {
        self.events.emit(&self.run_id, path, kind);
    }

    pub(crate) fn spec(&self, kind: LeaseKind, subject: &str, path: &str) -> LeaseSpec {
        // Durations were validated with the configuration; a zero here
        // cannot happen, but a spec error must not panic the loop.
        let duration = self
            .lease_config
            .duration(kind)
            .max(Duration::from_millis(1));
        LeaseSpec::new(kind, subject, duration)
            .unwrap_or_else(|_| unreachable_spec(kind, subject))
            .with_max_renewals(self.lease_config.max_renewals)
            .with_free_renewals(self.free_renewals)
            .in_run(self.run_id.clone(), path)
    }

    pub(crate) fn next_worker_number(&self) -> u32 {
        self.workers_spawned.fetch_add(1, Ordering::Relaxed) + 1
    }
}

fn unreachable_spec(kind: LeaseKind, subject: &str) -> LeaseSpec {
    // `LeaseSpec::new` only refuses a zero duration, which `spec` rules out.
    match LeaseSpec::new(kind, subject, Duration::from_secs(1)) {
        Ok(spec) => spec,
        Err(_) => unreachable!("a one-second lease is valid"),
    }
}
