//! Building an engine: its configuration, checked together, its ports, and
//! the errors of starting it or a run on it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::error::ConfigError;
use crate::event::{EventBus, EventLimits};
use crate::event_log::{self, LoggingSink};
use crate::flow::{Flow, FlowError};
use crate::fork::ForkError;
use crate::load::LoadGauge;
use crate::memory::MemoryStore;
use crate::ports::{
    Clock, Evaluator, EventSink, ModelClient, RunStatus, Store, StoreError, SystemClock, ToolClient,
};
use crate::supervision::SupervisionConfig;
use crate::supervision::budget::BudgetConfig;
use crate::supervision::lease::terms::TermsByKind;
use crate::supervision::lease::{LeaseActor, LeaseActorArgs};
use crate::supervision::policy::{Policies, VerdictPolicy};
use crate::supervision::strategy::{RestartPolicy, StrategyFactory};
use crate::supervision::watchdog::{StartError, WatchdogActor, WatchdogArgs};

use super::{Engine, LEASE_ACTORS};

/// What the store keeps of a flow's tool servers, and how a flow read
/// back gets them whole: an embedder whose tool servers carry credentials
/// (a URL's password, a secret argument, an `env` value) keeps them out of
/// the store and restores them from where they came from, its own
/// configuration. Without one, the store keeps a flow as it runs.
pub trait ToolSecrets: Send + Sync + 'static {
    /// `flow` as the store keeps it.
    fn at_rest(&self, flow: &Flow) -> Flow;

    /// `flow` made whole to run: what [`at_rest`](Self::at_rest) hid of it,
    /// restored. A whole flow is left as it is.
    fn restored(&self, flow: Flow) -> Flow;
}

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
#[derive(Clone, Debug, PartialEq)]
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
    /// How many workers a run may spawn, per answer, in all and in depth.
    /// A flow's `spawn` table may lower them, never raise them.
    pub spawn: crate::SpawnLimits,
    /// What an operation's progress reports may cost a run's log: notes
    /// cut, repeated progress coalesced, and a cap on each run's events past
    /// which progress is counted instead of stored.
    pub events: EventLimits,
    /// How long a finished run is kept before it is deleted (default
    /// [`DEFAULT_RETENTION`], 7 days); `None` keeps finished runs for ever.
    /// A flow's `retention` may shorten it, never lengthen it. The engine
    /// only bounds flows by it: whoever serves the runs deletes them
    /// ([`Retention::purge_finished`](crate::Retention::purge_finished)).
    pub retention: Option<Duration>,
    /// The executor's lag above which a lease that expires is renewed by
    /// `load` — not counted toward the renewal cap, the ladder or the
    /// evidence streak — instead of judged (default
    /// [`DEFAULT_LOAD_BOUND`](crate::DEFAULT_LOAD_BOUND), 250 ms; zero
    /// turns the rule off; otherwise at least
    /// [`MIN_LOAD_BOUND`](crate::MIN_LOAD_BOUND)). It applies only to an
    /// engine built with a gauge ([`EngineBuilder::load`]). 250 ms is far
    /// above a timer's lateness on an executor with time to spare (a
    /// millisecond or so) and far below the shortest default lease (2
    /// minutes): a lease that expires while its executor is that late was
    /// stretched by the runtime, not by the work.
    pub load_bound: Duration,
    /// What each model's tokens cost, for the `spent` of every model call
    /// and evaluator call (see [`UsageReport`](crate::UsageReport)); a
    /// model without a price is counted in tokens only. Default: none.
    pub prices: crate::Prices,
    /// What a run does when a store write fails: how long it tries again,
    /// then whether it pauses or fails (see [`StoreWrites`](crate::StoreWrites)).
    pub store_writes: crate::StoreWrites,
    /// When an endpoint the runs call is down, and how it is probed (see
    /// [`Outages`](crate::Outages)).
    pub outages: crate::Outages,
}

/// The default retention of a finished run: 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            supervision: SupervisionConfig::default(),
            budget: BudgetConfig::default(),
            restart: RestartPolicy::default(),
            run_lease_ttl: Duration::from_secs(90),
            max_tool_result_bytes: DEFAULT_MAX_TOOL_RESULT_BYTES,
            spawn: crate::SpawnLimits::default(),
            events: EventLimits::default(),
            retention: Some(DEFAULT_RETENTION),
            load_bound: crate::DEFAULT_LOAD_BOUND,
            prices: crate::Prices::default(),
            store_writes: crate::StoreWrites::default(),
            outages: crate::Outages::default(),
        }
    }
}

impl EngineConfig {
    /// Refuses nonsense, naming the field; every duration must be at most
    /// [`MAX_DURATION`](crate::MAX_DURATION), every lease at least
    /// `lease.min`, itself at least [`MIN_LEASE`](crate::MIN_LEASE).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let lease = &self.supervision.lease;
        crate::check_duration("lease.min", lease.min)?;
        if lease.min < crate::MIN_LEASE {
            return Err(ConfigError::new(
                "lease.min",
                crate::supervision::lease::min_lease_expected(crate::MIN_LEASE, ""),
                crate::describe_duration(lease.min),
            ));
        }
        self.supervision.validate()?;
        lease.validate_floor(lease.min, "lease.min")?;
        self.budget.validate()?;
        self.restart.validate()?;
        crate::check_duration("run_lease_ttl", self.run_lease_ttl)?;
        crate::check_duration("store.write_retry_for", self.store_writes.retry_for)?;
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
        self.events.validate()?;
        if self.retention.is_some_and(|kept| kept.is_zero()) {
            return Err(ConfigError::new(
                "executor.retention",
                "a duration above 0, or forever",
                "0s",
            ));
        }
        crate::load::check_bound("executor.load_bound", self.load_bound)?;
        Ok(())
    }
}

/// Why the engine could not start, or could not start a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A configuration value was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The flow was refused.
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// The engine has no model client: built without one, or on purpose
    /// ([`EngineBuilder::without_model`], which says why).
    #[error("{0}")]
    NoModel(String),
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
    /// A fork was refused: its point, or its changes of the flow.
    #[error(transparent)]
    Fork(#[from] ForkError),
    /// A run's tenant was refused.
    #[error(transparent)]
    Tenant(#[from] crate::tenancy::BadTenant),
    /// Another executor holds the run, or this one is already running it.
    #[error("{}", held_message(.run_id, .owner_id, *.expires_at_ms, *.remaining_ms))]
    Held {
        /// The run.
        run_id: String,
        /// Who holds it.
        owner_id: String,
        /// Until when its executor lease runs (Unix ms); 0 when not known
        /// (the executor that refused is running the run, or lost it to
        /// another while acting on it).
        expires_at_ms: u64,
        /// How long from the refusal until that lease ends, if its holder
        /// stops renewing it: how long to wait before the run is free.
        remaining_ms: u64,
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
    /// A run was already started under this idempotency key, within its
    /// retention: nothing was created. A retry of the same request gets
    /// the run; a key reused for another flow is refused.
    #[error("{}", already_started(.key, .run_id, *.same_flow))]
    AlreadyStarted {
        /// The key.
        key: String,
        /// The run it started.
        run_id: String,
        /// Whether it started it with the same flow: a retry, not a key
        /// reused for something else.
        same_flow: bool,
    },
}

/// What [`EngineError::AlreadyStarted`] says.
fn already_started(key: &str, run_id: &str, same_flow: bool) -> String {
    if same_flow {
        format!("idempotency key `{key}` already started run {run_id}: nothing new was started")
    } else {
        format!(
            "idempotency key `{key}` already started run {run_id} with another flow: a key \
             names one request; give this one a key of its own"
        )
    }
}

/// What [`EngineError::Held`] says: who holds the run, until when in a
/// readable time, and what to do — reach that executor if it runs, or wait
/// for its lease to end if it died.
fn held_message(run_id: &str, owner_id: &str, expires_at_ms: u64, remaining_ms: u64) -> String {
    // An executor that serves the API says where in its id.
    let owner = crate::OwnerId::parse(owner_id);
    let server = owner.serving().unwrap_or("URL");
    if expires_at_ms == 0 {
        return format!(
            "run {run_id} is held by executor {owner_id}, which is running it or taking it \
             on; act on the run through that executor (for a `leasehold serve`, add \
             `--server {server}` to the `leasehold runs` command)"
        );
    }
    let until = std::time::UNIX_EPOCH + std::time::Duration::from_millis(expires_at_ms);
    let wait =
        humantime::format_duration(std::time::Duration::from_secs(remaining_ms.div_ceil(1000)));
    format!(
        "run {run_id} is held by executor {owner_id}, whose lease on it runs until {} \
         (in {wait}); if that executor is running, act on the run through it (for a \
         `leasehold serve`, add `--server {server}` to the `leasehold runs` command); if it \
         died, the run is free once its lease ends: try again after {}",
        humantime::format_rfc3339_seconds(until),
        humantime::format_rfc3339_seconds(until),
    )
}

/// Builds an [`Engine`]: its ports, its configuration, and what you bring
/// of your own — a supervision strategy, verdict policies, a load gauge.
/// Only the model is required.
///
/// ```
/// use std::sync::Arc;
/// use leasehold_actors::prelude::*;
/// use leasehold_actors::testing::{ScriptedEvaluator, ScriptedModel, ScriptedTools};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut config = EngineConfig::default();
/// config.supervision.lease.tool_call = std::time::Duration::from_secs(60);
/// let engine = Engine::builder()
///     .config(config)
///     .model(Arc::new(ScriptedModel::new()))
///     .evaluator(Arc::new(ScriptedEvaluator::always("RENEW")))
///     .tool_server("orders", Arc::new(ScriptedTools::new()))
///     .owner_id("executor-eu-1")
///     .build()
///     .await?;
/// assert!(engine.serves_tool("orders"));
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
pub struct EngineBuilder {
    config: EngineConfig,
    model: Option<Arc<dyn ModelClient>>,
    without_model: Option<String>,
    evaluator: Option<Arc<dyn Evaluator>>,
    events: Option<Arc<dyn EventSink>>,
    store: Option<Arc<dyn Store>>,
    clock: Option<Arc<dyn Clock>>,
    owner_id: Option<String>,
    tools: HashMap<String, Arc<dyn ToolClient>>,
    tool_factory: Option<ToolFactory>,
    tool_secrets: Option<Arc<dyn ToolSecrets>>,
    strategy: Option<StrategyFactory>,
    load: Option<LoadGauge>,
    policies: Policies,
    /// The first policy refused by [`Self::policy`], reported by `build`.
    refused_policy: Option<ConfigError>,
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

    /// Keeps the tool servers' credentials out of the store: each flow is
    /// stored as `secrets` keeps it at rest, and made whole again before
    /// it runs, resumes or is forked.
    pub fn tool_secrets(mut self, secrets: Arc<dyn ToolSecrets>) -> Self {
        self.tool_secrets = Some(secrets);
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

    /// Builds an engine without a model, which runs nothing: it lists,
    /// shows, follows and cancels stored runs, and refuses to start,
    /// queue, resume, fork or claim one with [`EngineError::NoModel`]
    /// carrying `why` (say what to configure). A server browsing stored
    /// runs is one. Ignored when a model is given.
    pub fn without_model(mut self, why: impl Into<String>) -> Self {
        self.without_model = Some(why.into());
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

    /// Wraps the store given so far (or the default one) in a decorator of
    /// the same port, such as a store that times its writes; call it after
    /// [`Self::store`].
    pub fn wrap_store(mut self, wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>) -> Self {
        let store = self
            .store
            .take()
            .unwrap_or_else(|| Arc::new(MemoryStore::new()));
        self.store = Some(wrap(store));
        self
    }

    /// The wall clock of persisted records and executor leases (default: the
    /// system's).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// This executor's identity in run ownership. The default,
    /// [`OwnerId::of_program`](crate::OwnerId::of_program), is the same across restarts of one program on
    /// one host, so a restarted process resumes its runs at once rather
    /// than waiting for their run leases to expire. Engines that share a
    /// store each need an id of their own: give one to each when one
    /// program runs several engines on a shared store (two processes of it
    /// on one host, or two engines in one process), else each takes the
    /// other's runs away as it claims them.
    pub fn owner_id(mut self, owner_id: impl Into<String>) -> Self {
        self.owner_id = Some(owner_id.into());
        self
    }

    /// A tool server flows may name.
    pub fn tool_server(mut self, name: impl Into<String>, client: Arc<dyn ToolClient>) -> Self {
        self.tools.insert(name.into(), client);
        self
    }

    /// The executor's scheduling lag: a gauge fed by a probe
    /// ([`LoadGauge::probe`]) or by the embedder. With one, a lease that
    /// expires while the lag is above [`EngineConfig::load_bound`] is
    /// renewed by `load`; without one (the default) leases never look at
    /// the executor's load. One gauge per process is enough: engines and
    /// servers may share it.
    pub fn load(mut self, gauge: LoadGauge) -> Self {
        self.load = Some(gauge);
        self
    }

    /// A supervision strategy of your own, instead of the flow's.
    pub fn strategy(mut self, factory: StrategyFactory) -> Self {
        self.strategy = Some(factory);
        self
    }

    /// Registers a verdict policy of your own under its name, beside the
    /// built-ins: the configuration (`watchdog.policy`) and flows
    /// (`leases.policy`) may then name it, for every lease kind or for one.
    /// A name that is not one ([`PolicyName`](crate::PolicyName)) or is
    /// already taken is refused by [`Self::build`].
    pub fn policy(mut self, policy: Arc<dyn VerdictPolicy>) -> Self {
        if let Err(refused) = self.policies.register(policy)
            && self.refused_policy.is_none()
        {
            self.refused_policy = Some(refused);
        }
        self
    }

    /// Validates the configuration and starts the watchdog.
    pub async fn build(self) -> Result<Engine, EngineError> {
        if let Some(refused) = self.refused_policy {
            return Err(refused.into());
        }
        self.config.validate()?;
        // Every policy the configuration names is registered.
        self.config.supervision.watchdog.terms(
            &self.config.supervision.lease,
            &self.policies,
            "watchdog.policy",
        )?;
        let model = match (self.model, self.without_model) {
            (Some(model), _) => Ok(model),
            (None, Some(why)) => Err(Arc::from(why)),
            (None, None) => {
                return Err(EngineError::NoModel(
                    "the engine has no model client: call `EngineBuilder::model` (or \
                     `EngineBuilder::without_model` for an engine that runs nothing)"
                        .to_owned(),
                ));
            }
        };
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let bus = EventBus::with_clock(EventBus::DEFAULT_CAPACITY, clock.clone());
        let store = self.store.unwrap_or_else(|| Arc::new(MemoryStore::new()));
        // What earlier runs learned of each endpoint's pace: a store that
        // cannot say starts this engine cold, which costs no run anything.
        let paces = crate::pace::PaceBook::new();
        match store.load_paces().await {
            Ok(loaded) => {
                for (key, pace) in loaded {
                    paces.set(&key, pace, false);
                }
            }
            Err(error) => tracing::warn!(%error, "the learned paces were not read: starting cold"),
        }
        let store_health = Arc::new(crate::StoreHealth::default());
        let log = event_log::start(
            store.clone(),
            bus.clone(),
            paces.clone(),
            self.config.store_writes,
            store_health.clone(),
        );
        let user_events = self.events.clone();
        let events: Arc<dyn EventSink> = Arc::new(LoggingSink::new(
            bus.clone(),
            self.events,
            log.clone(),
            self.config.events.max_run_events,
        ));
        let watchdog = WatchdogActor::start(WatchdogArgs {
            config: self.config.supervision.watchdog.clone(),
            evaluator: self.evaluator.clone(),
            events: events.clone(),
            prices: self.config.prices.clone(),
        })
        .await?;
        let live_leases = Arc::<AtomicU64>::default();
        // The runs' leases, on a few actors shared by every run (a run's
        // leases go to one, chosen in turn): an actor, its mailbox and its
        // timer task per run cost more than the leases themselves.
        let mut lease_actors = Vec::with_capacity(LEASE_ACTORS);
        for _ in 0..LEASE_ACTORS {
            lease_actors.push(
                LeaseActor::spawn(LeaseActorArgs {
                    watchdog: watchdog.clone(),
                    events: events.clone(),
                    terms: TermsByKind::default(),
                    live: live_leases.clone(),
                    paces: paces.clone(),
                    limits: self.config.events,
                    load: crate::load::LoadRule::of(self.load.as_ref(), self.config.load_bound),
                    log: Some(log.clone()),
                })
                .await?,
            );
        }
        let owner_id = self
            .owner_id
            .unwrap_or_else(|| crate::OwnerId::of_program().to_string());
        let endpoints = crate::endpoints::Endpoints::new(self.config.outages);
        if let Ok(model) = &model {
            endpoints.know(&model.describe());
        }
        Ok(Engine {
            config: self.config,
            model,
            evaluator: self.evaluator,
            events,
            user_events,
            bus,
            log,
            store,
            clock,
            _live_owner: super::live_owners::LiveOwner::new(&owner_id),
            gone_holders_swept: std::sync::atomic::AtomicBool::new(false),
            endpoint_waits_searched: std::sync::Mutex::new(None),
            owner_id,
            tools: self.tools,
            tool_factory: self.tool_factory,
            tool_secrets: self.tool_secrets,
            strategy: self.strategy,
            policies: self.policies,
            watchdog,
            live: std::sync::Mutex::new(crate::hash::Map::default()),
            taking_on: std::sync::Mutex::new(std::collections::HashSet::new()),
            prune_live_at: std::sync::atomic::AtomicUsize::new(0),
            shut_down: std::sync::atomic::AtomicBool::new(false),
            store_health,
            endpoints,
            live_leases,
            lease_actors,
            next_lease_actor: std::sync::atomic::AtomicUsize::new(0),
            paces,
            load: self.load,
        })
    }
}
