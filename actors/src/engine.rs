//! The engine: starts runs of flows on one watchdog, with the ports it was
//! built with.
//!
//! ```
//! use std::sync::Arc;
//! use leasehold_actors::Engine;
//! use leasehold_actors::Flow;
//! use leasehold_actors::RunStatus;
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
use std::time::Duration;

use ractor::{Actor, ActorRef, ActorStatus};
use tokio::sync::{mpsc, watch};

use crate::agent::{LoopMsg, RunContext, RunParts, Saved};
use crate::budget::BudgetConfig;
use crate::duration::heartbeat_timing;
use crate::error::ConfigError;
use crate::event::EventBus;
use crate::event_log::{self, LogItem, LoggingSink};
use crate::flow::{Flow, FlowError, StrategyKind};
use crate::lease::{LeaseActor, LeaseActorArgs};
use crate::memory::MemoryStore;
use crate::ports::{
    ClaimOutcome, Clock, Evaluator, EventSink, Fenced, ModelClient, RunRecord, RunStatus, Store,
    StoreError, SystemClock, ToolClient,
};
use crate::run::tools::ServerClient;
use crate::run::{RunActor, RunArgs, RunHandle, RunState};
use crate::strategy::{FailFast, RestartOnIntervene, RestartPolicy, StrategyFactory};
use crate::supervision::SupervisionConfig;
use crate::watchdog::{StartError, WatchdogActor, WatchdogArgs, WatchdogMsg};

/// Makes a tool client for a flow's tool server, for one run: the run owns
/// it and shuts it down when it ends (its child processes die with it).
pub type ToolFactory =
    Arc<dyn Fn(&crate::flow::ToolServer) -> Result<Arc<dyn ToolClient>, String> + Send + Sync>;

/// How long [`Engine::shutdown`] waits for each run to stop in place (they
/// stop concurrently), its tool servers included, before it goes on
/// without it.
pub const RUN_STOP_GRACE: Duration = Duration::from_secs(10);

/// The default cap on one tool result, in bytes (1 MiB): a longer result is
/// truncated before the model or the store sees it. See
/// [`EngineConfig::max_tool_result_bytes`].
pub const DEFAULT_MAX_TOOL_RESULT_BYTES: usize = 1024 * 1024;

/// Everything the engine's policies need, validated together.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EngineConfig {
    /// Leases and the watchdog.
    pub supervision: SupervisionConfig,
    /// Budget checkpoints.
    pub budget: BudgetConfig,
    /// The default restart strategy's parameters.
    pub restart: RestartPolicy,
    /// How long this executor's ownership of a run lasts without a
    /// heartbeat (default 90 s); heartbeats go every third of it.
    pub run_lease_ttl: Duration,
    /// The most of one tool result the model sees and the store keeps, in
    /// bytes (default [`DEFAULT_MAX_TOOL_RESULT_BYTES`], 1 MiB): a longer
    /// result is cut at a character boundary, a marker saying how much was
    /// cut is appended, and a `tool_result_truncated` event says so. It
    /// holds for every [`ToolClient`].
    pub max_tool_result_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            supervision: SupervisionConfig::default(),
            budget: BudgetConfig::default(),
            restart: RestartPolicy::default(),
            run_lease_ttl: Duration::from_secs(90),
            max_tool_result_bytes: DEFAULT_MAX_TOOL_RESULT_BYTES,
        }
    }
}

impl EngineConfig {
    /// Refuses nonsense, naming the field; every duration must be at most
    /// [`MAX_DURATION`](crate::MAX_DURATION).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.supervision.validate()?;
        self.budget.validate()?;
        self.restart.validate()?;
        crate::check_duration("run_lease_ttl", self.run_lease_ttl)?;
        if self.run_lease_ttl < Duration::from_millis(3) {
            return Err(ConfigError::new(
                "run_lease_ttl",
                "a duration of at least 3ms",
                format!("{:?}", self.run_lease_ttl),
            ));
        }
        if self.max_tool_result_bytes == 0 {
            return Err(ConfigError::new(
                "max_tool_result_bytes",
                "a size above 0 bytes",
                "0",
            ));
        }
        Ok(())
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
    #[error(
        "flow names tool server `{0}` without a `command` or `url`, and the engine provides \
         none of that name (declare it in the configuration's `[[tools]]`, or give the engine \
         one with `EngineBuilder::tool_server`)"
    )]
    UnknownToolServer(String),
    /// The engine's tool factory cannot make a client for a tool server
    /// (its entry is unusable). A server that cannot start or list its
    /// tools is not this error: that fails the run, which connects its
    /// servers as its first work.
    #[error("tool server `{server}` cannot be used: {message}")]
    ToolClient {
        /// The server.
        server: String,
        /// What happened.
        message: String,
    },
    /// An actor could not be started.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another executor holds the run.
    #[error("run {run_id} is held by executor {owner_id} until {expires_at_ms} (Unix ms)")]
    Held {
        /// The run.
        run_id: String,
        /// Who holds it.
        owner_id: String,
        /// Until when.
        expires_at_ms: u64,
    },
    /// The run has ended.
    #[error("run {run_id} has already finished ({status:?})")]
    Finished {
        /// The run.
        run_id: String,
        /// How it ended.
        status: RunStatus,
    },
    /// No such run.
    #[error("no run {0} in the store")]
    NotFound(String),
    /// The engine was shut down; it starts and resumes nothing more.
    #[error("this executor has shut down: it starts and resumes no more runs")]
    ShutDown,
}

/// Builds an [`Engine`].
#[derive(Default)]
pub struct EngineBuilder {
    config: EngineConfig,
    model: Option<Arc<dyn ModelClient>>,
    evaluator: Option<Arc<dyn Evaluator>>,
    events: Option<Arc<dyn EventSink>>,
    store: Option<Arc<dyn Store>>,
    clock: Option<Arc<dyn Clock>>,
    owner_id: Option<String>,
    tools: HashMap<String, Arc<dyn ToolClient>>,
    tool_factory: Option<ToolFactory>,
    strategy: Option<StrategyFactory>,
}

impl EngineBuilder {
    /// Makes, for each run, a client of each tool server its flow names that
    /// was not registered with [`Self::tool_server`] (for example an MCP
    /// client from the server's command or URL). The run shuts its clients
    /// down when it ends.
    pub fn tool_factory(mut self, factory: ToolFactory) -> Self {
        self.tool_factory = Some(factory);
        self
    }

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

    /// A sink that gets every event too, besides the engine's own bus
    /// ([`Engine::events`]) and the store's event log.
    pub fn events(mut self, events: Arc<dyn EventSink>) -> Self {
        self.events = Some(events);
        self
    }

    /// Where runs are kept (default: in memory; the `leasehold` crate has a
    /// durable store on sled).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The wall clock of persisted records and executor leases (default: the
    /// system's).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// This executor's identity in run ownership (default: a random one).
    pub fn owner_id(mut self, owner_id: impl Into<String>) -> Self {
        self.owner_id = Some(owner_id.into());
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
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let bus = EventBus::with_clock(EventBus::DEFAULT_CAPACITY, clock.clone());
        let store = self.store.unwrap_or_else(|| Arc::new(MemoryStore::new()));
        let log = event_log::start(store.clone());
        let events: Arc<dyn EventSink> = Arc::new(LoggingSink {
            bus: bus.clone(),
            user: self.events,
            log: log.clone(),
        });
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
            log,
            store,
            clock,
            owner_id: self
                .owner_id
                .unwrap_or_else(|| format!("executor-{:08x}", fastrand::u32(..))),
            tools: self.tools,
            tool_factory: self.tool_factory,
            strategy: self.strategy,
            watchdog,
            live: std::sync::Mutex::new(HashMap::new()),
            shut_down: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

/// Runs flows: one executor, owning the runs it starts or resumes.
pub struct Engine {
    config: EngineConfig,
    model: Arc<dyn ModelClient>,
    evaluator: Option<Arc<dyn Evaluator>>,
    events: Arc<dyn EventSink>,
    bus: EventBus,
    log: mpsc::UnboundedSender<LogItem>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    owner_id: String,
    tools: HashMap<String, Arc<dyn ToolClient>>,
    tool_factory: Option<ToolFactory>,
    strategy: Option<StrategyFactory>,
    watchdog: ActorRef<WatchdogMsg>,
    /// The runs this engine started or resumed, while their actors live,
    /// with the fence each holds.
    live: std::sync::Mutex<HashMap<String, LiveRun>>,
    /// Set by [`Engine::shutdown`].
    shut_down: std::sync::atomic::AtomicBool,
}

impl Engine {
    /// Whether a server of this name was given with [`tool_server`]
    /// (a flow may name it without a `command` or `url`).
    ///
    /// [`tool_server`]: EngineBuilder::tool_server
    pub fn serves_tool(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// A builder.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// Every event of every run of this engine.
    pub fn events(&self) -> &EventBus {
        &self.bus
    }

    /// The engine's configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// This executor's identity.
    pub fn owner_id(&self) -> &str {
        &self.owner_id
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn ttl_ms(&self) -> u64 {
        heartbeat_timing(self.config.run_lease_ttl).1
    }

    /// How often this executor renews its runs' leases, and sweeps for
    /// runs whose lease expired: a third of the run-lease TTL.
    pub fn heartbeat_period(&self) -> Duration {
        heartbeat_timing(self.config.run_lease_ttl).0
    }

    /// Validates `flow`, records a new run owned by this executor (fence 1)
    /// and starts it; returns at once.
    pub async fn start(&self, flow: Flow) -> Result<RunHandle, EngineError> {
        self.refuse_if_shut_down()?;
        flow.validate()?;
        let plan = self.plan(&flow).await?;
        let now = self.clock.now_unix_ms();
        let record = RunRecord {
            run_id: new_run_id(),
            flow: serde_json::to_value(&flow)
                .map_err(|e| StoreError::new(format!("the flow cannot be stored: {e}")))?,
            status: RunStatus::Running,
            owner_id: Some(self.owner_id.clone()),
            fence: 1,
            lease_expires_at_ms: now.saturating_add(self.ttl_ms()),
            reason: None,
            answer: None,
            pause: None,
            created_at_ms: now,
            updated_at_ms: now,
        };
        self.store.create_run(record.clone()).await?;
        self.launch(flow, plan, record, None).await
    }

    /// Claims `run_id` for this executor — it must be unowned, orphaned, or
    /// its owner's lease expired — and resumes it from its last snapshots,
    /// with a higher fence. A run paused for a person stays paused.
    pub async fn resume(&self, run_id: &str) -> Result<RunHandle, EngineError> {
        self.refuse_if_shut_down()?;
        let now = self.clock.now_unix_ms();
        let record = self.claim(run_id, now).await?;
        let flow: Flow = serde_json::from_value(record.flow.clone())
            .map_err(|e| StoreError::new(format!("run {run_id}: its flow cannot be read: {e}")))?;
        let plan = self.plan(&flow).await?;
        self.continue_log(run_id, record.fence).await?;
        let saved = Saved {
            snapshots: self.store.load_snapshots(run_id).await?,
            calls: self.store.load_tool_calls(run_id).await?,
        };
        self.launch(flow, plan, record, Some(saved)).await
    }

    /// Stops this executor in process, as a clean exit would: every run it
    /// holds stops where it is — its in-flight calls cancelled, its tool
    /// servers shut down, its heartbeat stopped — and stays `running` (or
    /// paused) in the store, and its executor lease is released (it ends
    /// now), so that another executor, or this process started again, may
    /// claim and resume it at once. Then the event log is written out and
    /// the watchdog stops.
    ///
    /// Nothing is cancelled or failed: shutting an executor down is not a
    /// decision about its runs. Afterwards the engine refuses to start or
    /// resume runs ([`EngineError::ShutDown`]).
    ///
    /// The runs stop concurrently, each given at most [`RUN_STOP_GRACE`] to
    /// stop and shut its tool servers down (a stdio server's process group
    /// is killed first, then waited for).
    pub async fn shutdown(&self) {
        self.shut_down.store(true, Ordering::SeqCst);
        let runs: Vec<(String, LiveRun)> = self.lock_live().drain().collect();
        // All at once: a run whose stop is stuck holds none of the others up,
        // and the whole takes at most one grace.
        let mut stopping = tokio::task::JoinSet::new();
        for (run_id, run) in runs {
            let store = self.store.clone();
            let clock = self.clock.clone();
            stopping.spawn(async move {
                let _ = run
                    .actor
                    .stop_and_wait(
                        Some("executor shutting down".to_owned()),
                        Some(RUN_STOP_GRACE),
                    )
                    .await;
                release(store.as_ref(), &run_id, &run.fence, clock.now_unix_ms()).await;
            });
        }
        while stopping.join_next().await.is_some() {}
        let (done, written) = tokio::sync::oneshot::channel();
        if self.log.send(LogItem::Flush(String::new(), done)).is_ok() {
            let _ = written.await;
        }
        let _ = self
            .watchdog
            .stop_and_wait(
                Some("executor shutting down".to_owned()),
                Some(Duration::from_secs(10)),
            )
            .await;
    }

    fn refuse_if_shut_down(&self) -> Result<(), EngineError> {
        if self.shut_down.load(Ordering::SeqCst) {
            Err(EngineError::ShutDown)
        } else {
            Ok(())
        }
    }

    fn lock_live(&self) -> std::sync::MutexGuard<'_, HashMap<String, LiveRun>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Claims `run_id` for this executor at `now` (a compare-and-set that
    /// raises its fence), or says why not.
    async fn claim(&self, run_id: &str, now: u64) -> Result<RunRecord, EngineError> {
        match self
            .store
            .claim_run(run_id, &self.owner_id, now, self.ttl_ms())
            .await?
        {
            ClaimOutcome::Claimed(record) => Ok(record),
            ClaimOutcome::HeldBy {
                owner_id,
                expires_at_ms,
            } => Err(EngineError::Held {
                run_id: run_id.to_owned(),
                owner_id,
                expires_at_ms,
            }),
            ClaimOutcome::Finished(status) => Err(EngineError::Finished {
                run_id: run_id.to_owned(),
                status,
            }),
            ClaimOutcome::NotFound => Err(EngineError::NotFound(run_id.to_owned())),
        }
    }

    /// Makes the run's log go on after anything a previous owner may have
    /// published, logged or not: each owner's events are numbered from
    /// (fence − 1) × 2³², so a reader that saw an event of a dead owner
    /// never mistakes a new event for it.
    async fn continue_log(&self, run_id: &str, fence: u64) -> Result<(), EngineError> {
        let floor = fence.saturating_sub(1).saturating_mul(1 << 32);
        let last = self
            .store
            .load_events(run_id, 0)
            .await?
            .last()
            .map_or(0, |e| e.seq);
        self.bus.advance_past(floor.max(last));
        Ok(())
    }

    /// Marks every running run whose executor lease expired as orphaned;
    /// returns their ids.
    pub async fn reconcile_orphans(&self) -> Result<Vec<String>, EngineError> {
        Ok(self
            .store
            .reconcile_orphans(self.clock.now_unix_ms())
            .await?)
    }

    /// Cancels a run that no loop of this executor is running — orphaned,
    /// or paused by an executor that has since died — without starting its
    /// loops: claims it (raising its fence, so a stale owner's writes are
    /// refused), appends `run_cancelled` to its log and records it
    /// cancelled. A run held by a live executor is refused with
    /// [`EngineError::Held`]; cancel it through that executor.
    pub async fn cancel_stored(&self, run_id: &str, reason: &str) -> Result<(), EngineError> {
        let now = self.clock.now_unix_ms();
        let record = self.claim(run_id, now).await?;
        self.continue_log(run_id, record.fence).await?;
        let event = self.bus.publish(
            run_id,
            crate::run::ROOT_PATH,
            crate::event::EventKind::RunCancelled {
                reason: reason.to_owned(),
            },
        );
        let fence = record.fence;
        let stale = |f: Fenced<()>| match f {
            Fenced::Applied(()) => Ok(()),
            Fenced::Stale { owner_id, .. } => Err(EngineError::Held {
                run_id: run_id.to_owned(),
                owner_id: owner_id.unwrap_or_default(),
                expires_at_ms: 0,
            }),
        };
        stale(
            self.store
                .append_events(run_id, vec![(*event).clone()], fence)
                .await?,
        )?;
        let update = crate::ports::RunUpdate {
            status: RunStatus::Cancelled,
            reason: Some(reason.to_owned()),
            answer: None,
            pause: None,
            at_ms: now,
        };
        stale(self.store.update_run(run_id, fence, update).await?)?;
        self.store.flush().await?;
        Ok(())
    }

    /// Reconciles orphans, then claims and resumes each of them (resume on
    /// boot). Returns the handles of the runs resumed.
    pub async fn resume_orphans(&self) -> Result<Vec<RunHandle>, EngineError> {
        self.reconcile_orphans().await?;
        let mut resumed = Vec::new();
        for record in self.store.list_runs().await? {
            if record.status == RunStatus::Orphaned {
                match self.resume(&record.run_id).await {
                    Ok(handle) => resumed.push(handle),
                    // Another executor got there first: fine.
                    Err(EngineError::Held { .. } | EngineError::Finished { .. }) => {}
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(resumed)
    }

    async fn plan(&self, flow: &Flow) -> Result<Plan, EngineError> {
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
            None => strategy_for(flow, self.config.restart)?,
        };
        let (tool_servers, owned_tools) = self.tools_of(flow)?;
        Ok(Plan {
            owned_tools,
            tool_servers,
            lease_config,
            watchdog_config,
            budget_config,
            strategy,
        })
    }

    async fn launch(
        &self,
        flow: Flow,
        plan: Plan,
        record: RunRecord,
        saved: Option<Saved>,
    ) -> Result<RunHandle, EngineError> {
        let run_id = record.run_id.clone();
        let leases = LeaseActor::start(LeaseActorArgs {
            watchdog: self.watchdog.clone(),
            events: self.events.clone(),
            config: plan.watchdog_config,
        })
        .await?;
        let fence = Arc::new(AtomicU64::new(record.fence));
        let _ = self
            .log
            .send(LogItem::Register(run_id.clone(), fence.clone()));
        let workers_spawned = saved.as_ref().map_or(0, Saved::workers_spawned);
        let ctx = Arc::new(RunContext::new(RunParts {
            run_id: run_id.clone(),
            flow: Arc::new(flow),
            model: self.model.clone(),
            tool_servers: plan.tool_servers,
            leases: leases.clone(),
            lease_config: plan.lease_config,
            free_renewals: Some(plan.watchdog_config.free_renewals),
            evidence_renewals: Some(plan.watchdog_config.evidence_renewals),
            policy: Some(plan.watchdog_config.policy),
            events: self.events.clone(),
            store: self.store.clone(),
            clock: self.clock.clone(),
            owner_id: self.owner_id.clone(),
            fence,
            budget_config: plan.budget_config,
            evaluator: self.evaluator.clone(),
            strategy: plan.strategy,
            workers_spawned,
            log: self.log.clone(),
            owned_tools: plan.owned_tools,
            max_tool_result_bytes: self.config.max_tool_result_bytes,
        }));
        let (state, watcher) = watch::channel(RunState {
            status: record.status,
            answer: None,
            reason: None,
            paused: None,
            lost: None,
        });
        heartbeat(ctx.clone(), self.config.run_lease_ttl);
        let args = RunArgs {
            ctx: ctx.clone(),
            state,
            record,
            saved,
        };
        match Actor::spawn(None, RunActor, args).await {
            Ok((actor, _)) => {
                let mut live = self.lock_live();
                live.retain(|_, run| run.actor.get_status() != ActorStatus::Stopped);
                live.insert(
                    run_id.clone(),
                    LiveRun {
                        actor: actor.clone(),
                        fence: ctx.fence.clone(),
                    },
                );
                drop(live);
                Ok(RunHandle::new(run_id, actor, watcher))
            }
            Err(error) => {
                ctx.cancel.cancel();
                leases.actor().stop(None);
                Err(StartError::Spawn(error.to_string()).into())
            }
        }
    }

    /// The clients of the tool servers `flow` names, and those of them the
    /// run owns (made by the factory for it). Nothing is started: the run
    /// connects them as its first work.
    fn tools_of(&self, flow: &Flow) -> Result<ToolsOfRun, EngineError> {
        let mut servers = Vec::new();
        let mut owned: Vec<Arc<dyn ToolClient>> = Vec::new();
        for server in &flow.tools {
            let client = match (self.tools.get(&server.name), &self.tool_factory) {
                (Some(shared), _) => shared.clone(),
                (None, Some(_)) if server.is_reference() => {
                    return Err(EngineError::UnknownToolServer(server.name.clone()));
                }
                (None, Some(factory)) => {
                    let client = factory(server).map_err(|message| EngineError::ToolClient {
                        server: server.name.clone(),
                        message,
                    })?;
                    owned.push(client.clone());
                    client
                }
                (None, None) => return Err(EngineError::UnknownToolServer(server.name.clone())),
            };
            servers.push(ServerClient {
                server: server.name.clone(),
                client,
            });
        }
        Ok((servers, owned))
    }
}

/// A run's tool servers, and the clients of them it owns.
type ToolsOfRun = (Vec<ServerClient>, Vec<Arc<dyn ToolClient>>);

/// What a run needs besides its flow, worked out before it starts.
struct Plan {
    lease_config: crate::lease::LeaseConfig,
    watchdog_config: crate::watchdog::WatchdogConfig,
    budget_config: BudgetConfig,
    strategy: StrategyFactory,
    tool_servers: Vec<ServerClient>,
    owned_tools: Vec<Arc<dyn ToolClient>>,
}

/// A run this engine holds: its actor and the fence it holds the run with.
struct LiveRun {
    actor: ActorRef<LoopMsg>,
    fence: Arc<AtomicU64>,
}

/// Lets go of a run this executor stopped in place: its lease now ends at
/// `now_ms` (a heartbeat with a TTL of zero), so another executor — or
/// `leasehold runs resume` in the next process — may claim it at once
/// instead of waiting out the TTL. A stale fence means someone else holds
/// the run already, and nothing is written.
async fn release(store: &dyn Store, run_id: &str, fence: &AtomicU64, now_ms: u64) {
    let fence = fence.load(Ordering::Acquire);
    match store.renew_run(run_id, fence, now_ms, 0).await {
        Ok(Fenced::Applied(())) => {}
        Ok(Fenced::Stale { owner_id, .. }) => {
            tracing::debug!(run_id, ?owner_id, "not released: another executor holds it");
        }
        Err(error) => {
            tracing::warn!(run_id, %error, "run lease not released; it will expire");
        }
    }
}

/// Renews this executor's lease on the run every third of its TTL until the
/// run ends; a refused renewal means another executor took the run over.
fn heartbeat(ctx: Arc<RunContext>, ttl: Duration) {
    let (period, ttl_ms) = heartbeat_timing(ttl);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(
            crate::deadline_after(tokio::time::Instant::now(), period),
            period,
        );
        loop {
            tokio::select! {
                () = ctx.cancel.cancelled() => return,
                _ = ticks.tick() => {
                    let result = ctx.store.renew_run(&ctx.run_id, ctx.fence(), ctx.now_ms(), ttl_ms).await;
                    match result {
                        Ok(Fenced::Applied(())) => {}
                        Ok(Fenced::Stale { .. }) => {
                            ctx.landed("heartbeat", result);
                            return;
                        }
                        Err(error) => tracing::error!(run_id = %ctx.run_id, %error, "heartbeat not written"),
                    }
                }
            }
        }
    });
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
    if let Some(on_exhausted) = overrides.on_exhausted {
        policy.on_exhausted = on_exhausted;
    }
    policy.validate()?;
    Ok(match overrides.strategy.unwrap_or(StrategyKind::Restart) {
        StrategyKind::Restart => Arc::new(move || Box::new(RestartOnIntervene::new(policy))),
        StrategyKind::FailFast => Arc::new(|| Box::new(FailFast)),
    })
}

/// A new run id: `run-` and a UUIDv7 in hex. It is unique, and ids made
/// one after another in this process sort in the order they were made (the
/// UUID's millisecond timestamp and counter lead its bits), so a listing
/// sorted by id is one sorted by creation.
fn new_run_id() -> String {
    format!("run-{}", uuid::Uuid::now_v7().simple())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::new_run_id;

    #[test]
    fn run_ids_made_one_after_another_sort_in_creation_order_and_are_unique() {
        // Many ids within the same millisecond: the order must hold there too.
        let ids: Vec<String> = (0..10_000).map(|_| new_run_id()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids, "ids sorted by text are not in creation order");
        let unique: HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "an id was made twice");
        assert!(
            ids.iter()
                .all(|id| id.starts_with("run-") && id.len() == 36)
        );
    }
}
