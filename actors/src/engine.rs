//! The engine: starts runs of flows on one watchdog, with the ports it was
//! built with.
//!
//! Three seams, one file each: building the engine and its configuration
//! (`engine/builder.rs`), turning a flow into the plan of a run
//! (`engine/plan.rs`), and owning runs — claims, heartbeats, releases,
//! orphans (`engine/ownership.rs`) — and queued runs, posted by one
//! executor and started by whichever claims them (`engine/queue.rs`). This
//! file starts a run from its plan.
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
use std::sync::atomic::AtomicU64;

use ractor::{Actor, ActorRef, ActorStatus};
use tokio::sync::{mpsc, watch};

use crate::agent::plan::RunPlan;
use crate::agent::{RunContext, Saved};
use crate::event::EventBus;
use crate::event_log::LogItem;
use crate::flow::Flow;
use crate::ports::{
    Clock, Evaluator, EventSink, ModelClient, RunRecord, Store, StoreError, ToolClient,
};
use crate::run::{RunActor, RunArgs, RunHandle, RunState};
use crate::supervision::strategy::StrategyFactory;
use crate::supervision::watchdog::{StartError, WatchdogMsg};

mod bounds;
mod builder;
#[cfg(feature = "test-util")]
mod crash;
mod fork;
mod live_owners;
mod ownership;
mod plan;
mod queue;

pub use builder::{
    DEFAULT_MAX_TOOL_RESULT_BYTES, DEFAULT_RETENTION, EngineBuilder, EngineConfig, EngineError,
    RUN_STOP_GRACE, ToolFactory, ToolSecrets,
};
use ownership::{LiveRun, heartbeat};

/// How a run is started, besides its flow ([`Engine::start_with`],
/// [`Engine::queue_with`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunOptions {
    /// The caller's trace context (a `traceparent`): the run's trace is
    /// the caller's and its root span a child of the caller's span, on
    /// every executor that holds it, so a platform's trace continues into
    /// the run's.
    pub trace_parent: Option<crate::TraceParent>,
    /// The caller's idempotency key: a start under a key that started a
    /// run within [`IDEMPOTENCY_RETENTION`], on any executor sharing the
    /// store, starts nothing and is refused with
    /// [`EngineError::AlreadyStarted`] naming that run. A key holds within
    /// the run's tenant only.
    pub idempotency_key: Option<String>,
    /// The tenant the run belongs to ([`tenancy`](crate::tenancy)): only
    /// that tenant's keys see and control it. `None` (or
    /// [`DEFAULT_TENANT`](crate::tenancy::DEFAULT_TENANT)) for the default
    /// tenant.
    pub tenant: Option<String>,
}

/// How long an idempotency key holds after the run it started was
/// created: a day, longer than any client retries a request.
pub const IDEMPOTENCY_RETENTION: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

impl RunOptions {
    /// A run within the caller's trace `parent`.
    pub fn within_trace(parent: crate::TraceParent) -> Self {
        Self {
            trace_parent: Some(parent),
            ..Self::default()
        }
    }

    /// These options, with the caller's idempotency `key`.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// These options, for a run of `tenant` (a name
    /// [`check_tenant`](crate::tenancy::check_tenant) takes; the engine
    /// refuses any other).
    #[must_use]
    pub fn for_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }
}

/// Runs flows: one executor, owning the runs it starts or resumes.
///
/// Built on ports you give it ([`EngineBuilder`]): a model client, tool
/// servers, an evaluator, a store (in memory by default). Each run is a
/// supervision tree of its own; [`Engine::start`] returns a [`RunHandle`]
/// to follow it, pause it, answer it or cancel it.
///
/// ```
/// use std::sync::Arc;
/// use leasehold_actors::prelude::*;
/// use leasehold_actors::testing::{ScriptedModel, Turn};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = ScriptedModel::new().script("run", [Turn::answer("Shipped yesterday.")]);
/// let engine = Engine::builder().model(Arc::new(model)).build().await?;
/// let flow = Flow::builder("support", "Where is order 1042?").max_steps(3).build()?;
/// let mut run = engine.start(flow).await?;
/// let state = run.wait().await;
/// assert_eq!(state.status, RunStatus::Completed);
/// assert_eq!(state.answer.as_deref(), Some("Shipped yesterday."));
/// engine.shutdown().await;
/// # Ok(())
/// # }
/// ```
pub struct Engine {
    config: EngineConfig,
    /// The model every loop calls, or why this engine has none and runs
    /// nothing ([`EngineBuilder::without_model`]).
    model: Result<Arc<dyn ModelClient>, Arc<str>>,
    evaluator: Option<Arc<dyn Evaluator>>,
    events: Arc<dyn EventSink>,
    /// The embedder's sink ([`EngineBuilder::events`]), also inside
    /// `events`: what a fork's lineage, written to the store before the
    /// fork starts, is told to besides the bus.
    user_events: Option<Arc<dyn EventSink>>,
    bus: EventBus,
    log: mpsc::UnboundedSender<LogItem>,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    owner_id: String,
    tools: HashMap<String, Arc<dyn ToolClient>>,
    tool_factory: Option<ToolFactory>,
    /// What the store keeps of the flows' tool servers.
    tool_secrets: Option<Arc<dyn ToolSecrets>>,
    strategy: Option<StrategyFactory>,
    /// The verdict policies flows may name: the built-ins and the
    /// embedder's ([`EngineBuilder::policy`]).
    policies: crate::supervision::policy::Policies,
    watchdog: ActorRef<WatchdogMsg>,
    /// The runs this engine started or resumed, while their actors live,
    /// with the fence each holds.
    live: std::sync::Mutex<crate::hash::Map<String, LiveRun>>,
    /// The runs this engine is claiming or resuming right now.
    taking_on: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The size `live` must reach before its stopped runs are dropped
    /// again ([`prune_when_doubled`]).
    prune_live_at: std::sync::atomic::AtomicUsize,
    /// Set by [`Engine::shutdown`].
    shut_down: std::sync::atomic::AtomicBool,
    /// What this engine's store writes met.
    store_health: Arc<crate::StoreHealth>,
    /// The health of the endpoints its runs call.
    endpoints: Arc<crate::endpoints::Endpoints>,
    /// How many leases the runs of this engine hold.
    live_leases: Arc<AtomicU64>,
    /// The actors that hold the runs' leases, [`LEASE_ACTORS`] of them.
    lease_actors: Vec<ActorRef<crate::supervision::lease::LeaseMsg>>,
    /// Which of them the next run's leases go to.
    next_lease_actor: std::sync::atomic::AtomicUsize,
    /// What every run's leases learned of each pace key.
    paces: crate::pace::PaceBook,
    /// The executor's lag, if measured ([`EngineBuilder::load`]).
    load: Option<crate::load::LoadGauge>,
    /// This engine's owner id, known as live in the process while it is.
    _live_owner: live_owners::LiveOwner,
    /// Whether the runs of holders that died before this engine were
    /// marked orphaned ([`Engine::reconcile_orphans`]).
    gone_holders_swept: std::sync::atomic::AtomicBool,
    /// When the store was last searched for runs left waiting on an
    /// endpoint by an executor that is gone
    /// ([`Engine::take_over_endpoint_waits_up_to`]).
    endpoint_waits_searched: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Engine {
    /// Whether a server of this name was given with [`tool_server`]
    /// (a flow may name it without a `command` or `url`).
    ///
    /// [`tool_server`]: EngineBuilder::tool_server
    pub fn serves_tool(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// Why this engine runs nothing, if it was built without a model
    /// ([`EngineBuilder::without_model`]): it lists, shows, follows and
    /// cancels stored runs, and refuses to start, queue, resume, fork or
    /// claim one with [`EngineError::NoModel`] saying this.
    pub fn without_model(&self) -> Option<&str> {
        self.model.as_ref().err().map(|why| &**why)
    }

    /// The verdict policies this engine's flows may name.
    pub fn policies(&self) -> &crate::supervision::policy::Policies {
        &self.policies
    }

    /// A builder.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// Every event of every run of this engine.
    pub fn events(&self) -> &EventBus {
        &self.bus
    }

    /// Publishes `kind` at the root of `run_id`, a run this engine runs,
    /// and logs it under the fence the run holds, like the run's own
    /// events: what the executor says about the run from outside its
    /// actors (a person's forwarded control it refused).
    pub fn note(&self, run_id: &str, kind: crate::event::EventKind) {
        self.events.emit(run_id, crate::run::ROOT_PATH, kind);
    }

    /// The engine's configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// This executor's identity.
    pub fn owner_id(&self) -> &str {
        &self.owner_id
    }

    /// What this engine's leases learned of each pace key: each model
    /// endpoint's, tool's and worker kind's normal pace.
    pub fn paces(&self) -> &crate::pace::PaceBook {
        &self.paces
    }

    /// How many leases the runs of this engine hold now: the model calls,
    /// tool calls and worker steps in flight under a lease.
    pub fn live_leases(&self) -> u64 {
        self.live_leases.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The executor's scheduling lag, if the engine was built with a gauge
    /// ([`EngineBuilder::load`]).
    pub fn load(&self) -> Option<&crate::load::LoadGauge> {
        self.load.as_ref()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The clock that stamps the engine's persisted times (run leases,
    /// records): what decides whether a lease has expired.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Validates `flow`, records a new run owned by this executor (fence 1)
    /// and starts it; returns at once.
    pub async fn start(&self, flow: Flow) -> Result<RunHandle, EngineError> {
        self.start_with(flow, RunOptions::default()).await
    }

    /// A handle of `run_id` if it runs in this engine (its actor lives),
    /// however it was started: its event stream begins now.
    pub fn handle(&self, run_id: &str) -> Option<RunHandle> {
        let live = self.lock_live();
        let run = live
            .get(run_id)
            .filter(|run| run.actor.get_status() != ActorStatus::Stopped)?;
        Some(RunHandle::new(
            run_id.to_owned(),
            run.actor.clone(),
            run.state.clone(),
            crate::run::RunEventSource::new(self.bus.clone(), self.bus.last_seq()),
            Arc::clone(&run.labels),
        ))
    }

    /// Records a new run under `key` when one is given
    /// ([`RunStore::create_run_keyed`](crate::RunStore::create_run_keyed)),
    /// else as [`Self::create_run`]: refused with
    /// [`EngineError::AlreadyStarted`] when the key holds.
    pub(super) async fn create_run_once(
        &self,
        record: &RunRecord,
        key: Option<&str>,
    ) -> Result<(), EngineError> {
        let Some(key) = key else {
            return self.create_run(record).await;
        };
        let keyed = crate::ports::IdempotencyKey {
            key: crate::tenancy::idempotency_key_of(record.tenant.as_deref(), key),
            fingerprint: crate::ports::fingerprint(&record.flow),
            at_ms: record.created_at_ms,
            retention_ms: u64::try_from(IDEMPOTENCY_RETENTION.as_millis()).unwrap_or(u64::MAX),
        };
        let errors = AtomicU64::new(0);
        let created = crate::store_writes::retried(
            &self.config.store_writes,
            &self.store_health,
            &errors,
            || self.store.create_run_keyed(record.clone(), keyed.clone()),
        )
        .await?;
        match created {
            crate::ports::KeyedCreation::Created => Ok(()),
            crate::ports::KeyedCreation::Existing {
                run_id,
                fingerprint,
            } => Err(EngineError::AlreadyStarted {
                key: key.to_owned(),
                run_id,
                same_flow: fingerprint == keyed.fingerprint,
            }),
        }
    }

    /// Records a new run, trying again after a transient store error for
    /// the engine's patience.
    pub(super) async fn create_run(&self, record: &RunRecord) -> Result<(), EngineError> {
        let errors = AtomicU64::new(0);
        crate::store_writes::retried(
            &self.config.store_writes,
            &self.store_health,
            &errors,
            || self.store.create_run(record.clone()),
        )
        .await?;
        Ok(())
    }

    /// The endpoints this engine's runs call, as it sees them: which are
    /// down, and the runs paused on each until it answers
    /// ([`Endpoints`](crate::Endpoints)); a person marks one down or up
    /// here.
    pub fn endpoints(&self) -> &Arc<crate::endpoints::Endpoints> {
        &self.endpoints
    }

    /// What this engine's store writes met: errors by kind, writes tried
    /// again and given up, and whether the store is failing now.
    pub fn store_health(&self) -> crate::StoreHealthReport {
        self.store_health.report()
    }

    /// The store errors the writes of `run_id` met on this engine (retried
    /// or not), if it ran here since this engine started.
    pub fn store_errors_of(&self, run_id: &str) -> Option<u64> {
        self.lock_live()
            .get(run_id)
            .map(|run| run.store_errors.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// [`Engine::start`] with `options`: within a caller's trace.
    pub async fn start_with(
        &self,
        flow: Flow,
        options: RunOptions,
    ) -> Result<RunHandle, EngineError> {
        self.refuse_runs()?;
        let (plan, stored) = self.plan_stored(flow)?;
        let record = self.new_record(stored, &options)?;
        self.create_run_once(&record, options.idempotency_key.as_deref())
            .await?;
        self.launch(plan, record, None, false).await
    }

    /// The plan of `flow` (validated) and the flow as the store keeps it.
    fn plan_stored(&self, flow: Flow) -> Result<(RunPlan, serde_json::Value), EngineError> {
        let plan = self.plan(flow)?;
        let stored = match &self.tool_secrets {
            Some(secrets) => serde_json::to_value(secrets.at_rest(&plan.flow)),
            None => serde_json::to_value(&*plan.flow),
        }
        .map_err(|e| StoreError::invalid(format!("the flow cannot be stored: {e}")))?;
        Ok((plan, stored))
    }

    /// The plan of the flow a stored run runs.
    fn plan_of(&self, record: &RunRecord) -> Result<RunPlan, EngineError> {
        let flow: Flow = serde_json::from_value(record.flow.clone()).map_err(|e| {
            StoreError::corrupt(format!(
                "run {}: its flow cannot be read: {e}",
                record.run_id
            ))
        })?;
        self.plan(flow)
    }

    /// Claims `run_id` for this executor — it must be unowned, orphaned, or
    /// its owner's lease expired — and resumes it from its last snapshots,
    /// with a higher fence. A run paused for a person stays paused.
    pub async fn resume(&self, run_id: &str) -> Result<RunHandle, EngineError> {
        self.refuse_runs()?;
        let _taking = self.take_on(run_id)?;
        let now = self.clock.now_unix_ms();
        let record = self.claim(run_id, now).await?;
        self.resume_claimed(record).await
    }

    /// Resumes the run of `record`, just claimed by this executor, from its
    /// last snapshots.
    async fn resume_claimed(&self, record: RunRecord) -> Result<RunHandle, EngineError> {
        let run_id = record.run_id.as_str();
        let plan = self.plan_of(&record)?;
        if let Some(end) = self.continue_log(run_id, record.fence).await? {
            return Err(self.record_logged_end(run_id, record.fence, end).await);
        }
        let budget = &plan.flow.budget;
        // A spending budget is rebuilt from the run's log: what its loops
        // spent and what its checkpoints decided.
        let spending = if budget.max_tokens.is_some() || budget.max_cost.is_some() {
            let events = self.store.load_events(run_id, 0).await?;
            Some(crate::supervision::budget::spending::Spending::restore(
                budget.max_tokens,
                budget.max_cost,
                &events,
            ))
        } else {
            None
        };
        let mut saved = Saved {
            snapshots: self.store.load_snapshots(run_id).await?,
            calls: self.store.load_tool_calls(run_id).await?,
            spending,
        };
        // A fork whose log is empty never started: its lineage is not
        // written yet, and its copy may not be whole. Both are made now,
        // before it is taken on.
        let mut lineage = false;
        if let Some(origin) = &record.fork {
            lineage = self.store.last_event(run_id).await?.is_none();
            saved = self.fork_saved(&record, origin, saved, lineage).await?;
        }
        self.launch(plan, record, Some(saved), lineage).await
    }

    /// Starts the run of `record` from `plan`: its lease actor, its
    /// heartbeat and its run actor, which connects its tool servers first.
    /// With `lineage`, a fork's lineage is written to its log first
    /// (`Engine::log_lineage`): the fork starts only once it is durable.
    async fn launch(
        &self,
        plan: RunPlan,
        record: RunRecord,
        saved: Option<Saved>,
        lineage: bool,
    ) -> Result<RunHandle, EngineError> {
        let run_id = record.run_id.clone();
        let labels = Arc::new(record.labels());
        // Marked before anything of the run is published, so that the
        // handle's first event stream misses none of the run's events.
        let first_seq = self.bus.last_seq();
        if lineage && let Some(saved) = &saved {
            self.log_lineage(&record, &plan.flow.name, saved).await?;
        }
        let turn = self
            .next_lease_actor
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let leases = crate::supervision::lease::Leases::new(
            self.lease_actors[turn % self.lease_actors.len()].clone(),
            self.events.clone(),
            self.config.events,
            plan.terms.clone(),
        )
        .for_run(&run_id);
        let fence = Arc::new(AtomicU64::new(record.fence));
        // A fork's own history goes on from its fork point.
        let forked_at = record.fork.as_ref().map_or(0, |origin| origin.seq);
        let spawned_and_history = saved.as_ref().map_or((0, forked_at), |saved| {
            (saved.workers_spawned(), saved.history().max(forked_at))
        });
        let spending = saved.as_ref().and_then(|saved| saved.spending.clone());
        let ctx = Arc::new(RunContext::new(
            plan,
            run_id.clone(),
            fence,
            leases.clone(),
            spawned_and_history,
            spending,
            record.trace_parent.as_ref(),
        ));
        let told = Arc::downgrade(&ctx);
        let _ = self.log.send(LogItem::Register(
            run_id.clone(),
            crate::event_log::LogEntry {
                fence: ctx.fence.clone(),
                errors: ctx.store_errors.clone(),
                give_up: Box::new(move |error| {
                    if let Some(ctx) = told.upgrade() {
                        ctx.store_failed("events", error);
                    }
                }),
            },
        ));
        // A run resumed paused says why it waits, as it did before the
        // restart: its pause is read back from the store.
        let paused = record.pause.clone().filter(|_| record.status.is_paused());
        let (state, watcher) = watch::channel(RunState {
            status: record.status,
            answer: None,
            reason: paused.as_ref().and(record.reason.clone()),
            paused,
            lost: None,
        });
        heartbeat(ctx.clone(), self.config.run_lease_ttl);
        // The run keeps what it reads of its record, not its flow: planned
        // already, and kept by the store (a flow as JSON is a kilobyte and
        // more, held for the run's whole life).
        let args = RunArgs {
            ctx: ctx.clone(),
            state,
            record: record.into(),
            saved,
            lineage_logged: lineage,
        };
        match Actor::spawn(None, RunActor, args).await {
            Ok((actor, _)) => {
                let mut live = self.lock_live();
                prune_when_doubled(&mut live, &self.prune_live_at, |run| {
                    run.actor.get_status() == ActorStatus::Stopped
                });
                live.insert(
                    run_id.clone(),
                    LiveRun {
                        actor: actor.clone(),
                        fence: ctx.fence.clone(),
                        state: watcher.clone(),
                        store_errors: ctx.store_errors.clone(),
                        labels: Arc::clone(&labels),
                    },
                );
                drop(live);
                Ok(RunHandle::new(
                    run_id,
                    actor,
                    watcher,
                    crate::run::RunEventSource::new(self.bus.clone(), first_seq),
                    labels,
                ))
            }
            Err(error) => {
                ctx.cancel.cancel();
                ctx.held.cancel();
                leases.release();
                Err(StartError::Spawn(error.to_string()).into())
            }
        }
    }
}

/// The actors an engine's runs share for their leases. A run's leases are
/// all on one of them (its pause stops them together); a few, not one, so
/// that no one mailbox carries every run's expiries.
pub(crate) const LEASE_ACTORS: usize = 16;

/// The fewest entries at which the map of live runs is pruned.
const PRUNE_LIVE_MIN: usize = 64;

/// Drops the entries of `map` that are `stopped`, but only once it has
/// grown to `prune_at` (then set to twice what is left): each launch used
/// to scan every run the engine held, so starting n runs at once cost
/// O(n²) status checks under the engine's lock; now each entry is scanned
/// O(1) times on average, and the map holds at most twice its live runs
/// (and [`PRUNE_LIVE_MIN`]). Returns how many entries were looked at.
fn prune_when_doubled<V, S: std::hash::BuildHasher>(
    map: &mut HashMap<String, V, S>,
    prune_at: &std::sync::atomic::AtomicUsize,
    stopped: impl Fn(&V) -> bool,
) -> usize {
    use std::sync::atomic::Ordering;
    if map.len() < prune_at.load(Ordering::Acquire).max(PRUNE_LIVE_MIN) {
        return 0;
    }
    let scanned = map.len();
    map.retain(|_, value| !stopped(value));
    prune_at.store(
        map.len().saturating_mul(2).max(PRUNE_LIVE_MIN),
        Ordering::Release,
    );
    scanned
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::AtomicUsize;

    use super::{PRUNE_LIVE_MIN, prune_when_doubled};

    /// Runs launched one after another while a few stay live: the stopped
    /// ones are dropped, and the scans stay linear in the launches.
    #[test]
    fn launching_many_runs_prunes_stopped_ones_in_linear_time() {
        let launches = 20_000;
        let live_at_once = 500;
        let prune_at = AtomicUsize::new(0);
        // Value: the launch number; a run is stopped once `live_at_once`
        // launches came after it.
        let mut map: HashMap<String, usize> = HashMap::new();
        let mut scanned = 0;
        for n in 0..launches {
            scanned +=
                prune_when_doubled(&mut map, &prune_at, |started| started + live_at_once <= n);
            map.insert(format!("run-{n}"), n);
            assert!(
                map.len() <= 2 * live_at_once + PRUNE_LIVE_MIN + 1,
                "stopped runs pile up: {} held after {n} launches",
                map.len()
            );
        }
        assert!(
            scanned <= 3 * launches,
            "{scanned} entries scanned for {launches} launches: quadratic"
        );
        // Every live run is still held.
        let live = map
            .values()
            .filter(|&&started| started + live_at_once > launches - 1)
            .count();
        assert_eq!(live, live_at_once);
    }
}
