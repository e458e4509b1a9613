//! The engine: starts runs of flows on one watchdog, with the ports it was
//! built with.
//!
//! ```
//! use std::sync::Arc;
//! use leasehold_actors::engine::Engine;
//! use leasehold_actors::flow::Flow;
//! use leasehold_actors::ports::RunStatus;
//! use leasehold_actors::testing::{ScriptedModel, Turn};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = ScriptedModel::new().script("run", [Turn::answer("42")]);
//! let engine = Engine::builder().model(Arc::new(model)).build().await?;
//! let flow: Flow = serde_json::from_value(serde_json::json!({
//!     "name": "ask", "task": "What is six times seven?", "max_steps": 3
//! }))?;
//! let mut run = engine.start(flow).await?;
//! let state = run.wait().await;
//! assert_eq!(state.status, RunStatus::Completed);
//! assert_eq!(state.answer.as_deref(), Some("42"));
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ractor::{Actor, ActorRef};
use tokio::sync::watch;

use crate::agent::{RunContext, ToolRoute};
use crate::budget::BudgetConfig;
use crate::error::ConfigError;
use crate::event::EventBus;
use crate::flow::{Flow, FlowError, StrategyKind};
use crate::lease::{LeaseActor, LeaseActorArgs};
use crate::ports::{
    Evaluator, EventSink, ModelClient, RunStatus, Store, ToolClient, ToolDefinition,
};
use crate::run::{RunActor, RunArgs, RunHandle, RunState};
use crate::supervision::SupervisionConfig;
use crate::supervisor::{FailFast, RestartOnIntervene, RestartPolicy, SupervisionStrategy};
use crate::watchdog::{StartError, WatchdogActor, WatchdogArgs, WatchdogMsg};

/// Makes one supervision strategy per supervisor (each loop is one).
pub type StrategyFactory = Arc<dyn Fn() -> Box<dyn SupervisionStrategy> + Send + Sync>;

/// Everything the engine's policies need, validated together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineConfig {
    /// Leases and the watchdog.
    pub supervision: SupervisionConfig,
    /// Budget checkpoints.
    pub budget: BudgetConfig,
    /// The default restart strategy's parameters.
    pub restart: RestartPolicy,
}

impl EngineConfig {
    /// Refuses nonsense, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.supervision.validate()?;
        self.budget.validate()?;
        self.restart.validate()
    }
}

/// Why the engine could not start, or could not start a run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A configuration value was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The flow was refused.
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// The engine was built without a model client.
    #[error("the engine has no model client: call `EngineBuilder::model`")]
    NoModel,
    /// A flow names a tool server the engine does not have.
    #[error("flow uses tool server `{0}`, but the engine has none of that name")]
    UnknownToolServer(String),
    /// Two servers offer a tool of the same name.
    #[error("tool `{tool}` is offered by both `{first}` and `{second}`")]
    DuplicateTool {
        /// The tool.
        tool: String,
        /// One server.
        first: String,
        /// The other.
        second: String,
    },
    /// A tool server could not list its tools.
    #[error("tool server `{server}` could not list its tools: {message}")]
    ToolListing {
        /// The server.
        server: String,
        /// What happened.
        message: String,
    },
    /// An actor could not be started.
    #[error(transparent)]
    Start(#[from] StartError),
}

/// Builds an [`Engine`].
#[derive(Default)]
pub struct EngineBuilder {
    config: EngineConfig,
    model: Option<Arc<dyn ModelClient>>,
    evaluator: Option<Arc<dyn Evaluator>>,
    events: Option<Arc<dyn EventSink>>,
    store: Option<Arc<dyn Store>>,
    tools: HashMap<String, Arc<dyn ToolClient>>,
    strategy: Option<StrategyFactory>,
}

impl EngineBuilder {
    /// The engine's policies.
    pub fn config(mut self, config: EngineConfig) -> Self {
        self.config = config;
        self
    }

    /// The model every loop calls.
    pub fn model(mut self, model: Arc<dyn ModelClient>) -> Self {
        self.model = Some(model);
        self
    }

    /// The evaluator of the watchdog and the budget checkpoints. Without
    /// one, leases past the ladder renew and budgets wrap up.
    pub fn evaluator(mut self, evaluator: Arc<dyn Evaluator>) -> Self {
        self.evaluator = Some(evaluator);
        self
    }

    /// Where events go (default: a new [`EventBus`], see [`Engine::events`]).
    pub fn events(mut self, events: Arc<dyn EventSink>) -> Self {
        self.events = Some(events);
        self
    }

    /// Where snapshots go (default: nowhere durable; see the `leasehold`
    /// crate's sled store).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// A tool server flows may name.
    pub fn tool_server(mut self, name: impl Into<String>, client: Arc<dyn ToolClient>) -> Self {
        self.tools.insert(name.into(), client);
        self
    }

    /// A supervision strategy of your own, instead of the flow's.
    pub fn strategy(mut self, factory: StrategyFactory) -> Self {
        self.strategy = Some(factory);
        self
    }

    /// Validates the configuration and starts the watchdog.
    pub async fn build(self) -> Result<Engine, EngineError> {
        self.config.validate()?;
        let model = self.model.ok_or(EngineError::NoModel)?;
        let bus = EventBus::new();
        let events = self.events.unwrap_or_else(|| Arc::new(bus.clone()));
        let watchdog = WatchdogActor::start(WatchdogArgs {
            config: self.config.supervision.watchdog,
            evaluator: self.evaluator.clone(),
            events: events.clone(),
        })
        .await?;
        Ok(Engine {
            config: self.config,
            model,
            evaluator: self.evaluator,
            events,
            bus,
            store: self.store.unwrap_or_else(|| Arc::new(NoStore)),
            tools: self.tools,
            strategy: self.strategy,
            watchdog,
        })
    }
}

/// Runs flows.
pub struct Engine {
    config: EngineConfig,
    model: Arc<dyn ModelClient>,
    evaluator: Option<Arc<dyn Evaluator>>,
    events: Arc<dyn EventSink>,
    bus: EventBus,
    store: Arc<dyn Store>,
    tools: HashMap<String, Arc<dyn ToolClient>>,
    strategy: Option<StrategyFactory>,
    watchdog: ActorRef<WatchdogMsg>,
}

impl Engine {
    /// A builder.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The default event bus; it carries events only when no other sink was
    /// given to the builder.
    pub fn events(&self) -> &EventBus {
        &self.bus
    }

    /// The engine's configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Validates `flow` and starts a run of it; returns at once.
    pub async fn start(&self, flow: Flow) -> Result<RunHandle, EngineError> {
        flow.validate()?;
        let lease_config = flow.lease_config(self.config.supervision.lease);
        let watchdog_config = flow.watchdog_config(self.config.supervision.watchdog);
        SupervisionConfig {
            lease: lease_config,
            watchdog: watchdog_config,
        }
        .validate()?;
        let mut budget_config = self.config.budget;
        if let Some(max) = flow.budget.max_extensions {
            budget_config.max_extensions = max;
        }
        let strategy = match &self.strategy {
            Some(factory) => factory.clone(),
            None => strategy_for(&flow, self.config.restart)?,
        };
        let (routes, definitions) = self.tools_of(&flow).await?;
        let run_id = new_run_id();
        let leases = LeaseActor::start(LeaseActorArgs {
            watchdog: self.watchdog.clone(),
            events: self.events.clone(),
            accrual: watchdog_config.accrual,
        })
        .await?;
        let ctx = Arc::new(RunContext::new(
            run_id.clone(),
            Arc::new(flow),
            self.model.clone(),
            routes,
            definitions,
            leases.clone(),
            lease_config,
            Some(watchdog_config.free_renewals),
            self.events.clone(),
            self.store.clone(),
            budget_config,
            self.evaluator.clone(),
            strategy,
        ));
        let (state, watcher) = watch::channel(RunState {
            status: RunStatus::Running,
            answer: None,
            reason: None,
            paused: None,
        });
        match Actor::spawn(None, RunActor, RunArgs { ctx, state }).await {
            Ok((actor, _)) => Ok(RunHandle::new(run_id, actor, watcher)),
            Err(error) => {
                leases.actor().stop(None);
                Err(StartError::Spawn(error.to_string()).into())
            }
        }
    }

    async fn tools_of(
        &self,
        flow: &Flow,
    ) -> Result<(HashMap<String, ToolRoute>, Vec<ToolDefinition>), EngineError> {
        let mut routes: HashMap<String, ToolRoute> = HashMap::new();
        let mut definitions = Vec::new();
        for server in &flow.tools {
            let client = self
                .tools
                .get(&server.name)
                .ok_or_else(|| EngineError::UnknownToolServer(server.name.clone()))?;
            let listed = client
                .list_tools()
                .await
                .map_err(|e| EngineError::ToolListing {
                    server: server.name.clone(),
                    message: e.message,
                })?;
            for mut definition in listed {
                if let Some(existing) = routes.get(&definition.name) {
                    return Err(EngineError::DuplicateTool {
                        tool: definition.name,
                        first: existing.server.clone(),
                        second: server.name.clone(),
                    });
                }
                definition.idempotent = flow
                    .tool_idempotency(&server.name, &definition.name)
                    .or(definition.idempotent);
                routes.insert(
                    definition.name.clone(),
                    ToolRoute {
                        client: client.clone(),
                        server: server.name.clone(),
                    },
                );
                definitions.push(definition);
            }
        }
        Ok((routes, definitions))
    }
}

/// The flow's strategy: `restart` (the default) or `fail_fast`, with its
/// overrides applied on `base`.
fn strategy_for(flow: &Flow, base: RestartPolicy) -> Result<StrategyFactory, ConfigError> {
    let overrides = &flow.supervision;
    let mut policy = base;
    if let Some(n) = overrides.max_restarts {
        policy.max_restarts = n;
    }
    if let Some(window) = overrides.restart_window {
        policy.within = window;
    }
    if let Some(initial) = overrides.backoff_initial {
        policy.backoff_initial = initial;
    }
    if let Some(max) = overrides.backoff_max {
        policy.backoff_max = max;
    }
    if let Some(jitter) = overrides.jitter {
        policy.jitter = jitter;
    }
    policy.validate()?;
    Ok(match overrides.strategy.unwrap_or(StrategyKind::Restart) {
        StrategyKind::Restart => Arc::new(move || Box::new(RestartOnIntervene::new(policy))),
        StrategyKind::FailFast => Arc::new(|| Box::new(FailFast)),
    })
}

fn new_run_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("run-{:08x}{:04x}", fastrand::u32(..), n & 0xffff)
}

/// The store of an engine built without one: keeps nothing.
struct NoStore;

impl Store for NoStore {
    fn save_snapshot(
        &self,
        _snapshot: crate::ports::Snapshot,
    ) -> crate::ports::BoxFuture<'static, Result<(), crate::ports::StoreError>> {
        Box::pin(async { Ok(()) })
    }

    fn append_event(
        &self,
        _event: crate::event::Event,
    ) -> crate::ports::BoxFuture<'static, Result<(), crate::ports::StoreError>> {
        Box::pin(async { Ok(()) })
    }

    fn load_snapshot(
        &self,
        _run_id: &str,
        _path: &str,
    ) -> crate::ports::BoxFuture<
        'static,
        Result<Option<crate::ports::Snapshot>, crate::ports::StoreError>,
    > {
        Box::pin(async { Ok(None) })
    }
}
