//! What every loop of one run shares: the run's plan (the ports and the
//! configuration it was launched with, held once), its lease actor, and its
//! live state — its gate, its cancellation, its nudge queues.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use ractor::ActorRef;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::LoopMsg;
use crate::agent::plan::RunPlan;
use crate::agent::tools::RunTools;
use crate::event::EventKind;
use crate::nudge::NudgeQueue;
use crate::ports::{Fenced, StoreError, ToolCallRecord};
use crate::supervision::lease::{LeaseKind, LeaseSpec, Leases};

/// Whether the run may make progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    Open,
    Paused,
    Closed,
}

/// What every loop of one run shares: the run's plan, fixed at launch, and
/// the run's live state.
pub(crate) struct RunContext {
    /// The model, the ports and the configuration of this run, as its
    /// engine planned them; read through [`Deref`](std::ops::Deref).
    plan: RunPlan,
    pub(crate) run_id: String,
    /// The fence this executor holds on the run; shared with the event log.
    pub(crate) fence: Arc<AtomicU64>,
    /// The run's lease actor.
    pub(crate) leases: Leases,
    /// The run's tools, empty until its servers are connected.
    pub(crate) tools: RunTools,
    pub(crate) gate: watch::Sender<Gate>,
    pub(crate) root: std::sync::OnceLock<ActorRef<LoopMsg>>,
    /// The run's budget checkpoint, started by its root and asked by every
    /// loop of the run: its terms (configuration, evaluator, prices) are
    /// the run's, and it never awaits an evaluation in its handler, so one
    /// actor serves them all.
    /// The tools offered to each kind of worker, built by its first worker.
    worker_tools: std::sync::Mutex<HashMap<String, Arc<[crate::ports::ToolDefinition]>>>,
    pub(crate) checkpoint: tokio::sync::OnceCell<ActorRef<crate::supervision::budget::BudgetMsg>>,
    pub(crate) cancel: CancellationToken,
    /// Cancelled once this executor no longer holds the run — its actor
    /// stopped, the run lost or let go: its heartbeat goes on until then,
    /// past the cancellation of its work, so a run whose end is being
    /// recorded keeps its lease meanwhile.
    pub(crate) held: CancellationToken,
    /// Why this executor lost the run, once it has.
    pub(crate) lost: std::sync::OnceLock<String>,
    /// Why this executor let the run go without losing it (its store
    /// refused what it had to write), once it has: its lease runs out and
    /// an executor resumes it from its last durable snapshot.
    pub(crate) let_go: std::sync::OnceLock<String>,
    /// Why the run's writes were given up, once one was: the run pauses
    /// or fails once, however many writes fail.
    store_failure: std::sync::OnceLock<String>,
    /// The store errors the run's writes met, retried or not.
    pub(crate) store_errors: Arc<AtomicU64>,
    workers_spawned: AtomicU32,
    /// The run's history so far: its snapshots and first tool-call records
    /// counted ([`Snapshot::seq`](crate::ports::Snapshot::seq)).
    history: AtomicU64,
    /// Each loop's nudge queue, by path, so guidance can reach a loop that is
    /// rebuilt after a resume.
    nudge_queues: std::sync::Mutex<HashMap<String, NudgeQueue>>,
    /// What a resumed run found in the store.
    saved: std::sync::OnceLock<Arc<super::Saved>>,
    /// The run's tracing span: every step and call span is its child.
    pub(crate) span: tracing::Span,
    /// What the model client calls (`model X at URL`), said once per run:
    /// the model calls' pace key.
    pub(crate) model_described: String,
    /// The trace the run belongs to: the same on every executor.
    pub(crate) trace_id: String,
    /// Whether that trace is a caller's (remembered for the log lines
    /// about the run while it lives here).
    in_caller_trace: bool,
    /// The run's spending budget, shared by its loops.
    pub(crate) spending: Arc<crate::supervision::budget::spending::Spending>,
}

impl Drop for RunContext {
    /// A run started within a caller's trace is forgotten by the log lines
    /// about it once this executor no longer runs it.
    fn drop(&mut self) {
        if self.in_caller_trace {
            crate::trace_context::forget_caller_trace(&self.run_id);
        }
    }
}

/// The plan's parts read as the context's own (`ctx.model`, `ctx.store`,
/// `ctx.lease_config`, …): the loop's many call sites keep their short
/// paths, and the parts are held once, not copied field by field.
impl std::ops::Deref for RunContext {
    type Target = RunPlan;

    fn deref(&self) -> &RunPlan {
        &self.plan
    }
}

impl RunContext {
    /// The context of run `run_id`, launched from `plan` with `fence` and
    /// its lease actor `leases`; `workers_spawned` counts the workers a
    /// resumed run had already spawned, so new ones get new numbers, and
    /// `history` what it had written of its history.
    pub(crate) fn new(
        plan: RunPlan,
        run_id: String,
        fence: Arc<AtomicU64>,
        leases: Leases,
        (workers_spawned, history): (u32, u64),
        spending: Option<Arc<crate::supervision::budget::spending::Spending>>,
        caller: Option<&crate::TraceParent>,
    ) -> Self {
        let trace_id = crate::run_trace_id(&run_id, caller);
        if caller.is_some() {
            crate::trace_context::remember_caller_trace(&run_id, &trace_id);
        }
        let span = tracing::info_span!(
            "run",
            run_id = %run_id,
            trace_id = %trace_id,
            flow = %plan.flow.name,
            owner_id = %plan.owner_id
        );
        let model_described = plan.model.describe();
        let spending = spending.unwrap_or_else(|| {
            crate::supervision::budget::spending::Spending::new(
                plan.flow.budget.max_tokens,
                plan.flow.budget.max_cost,
            )
        });
        Self {
            trace_id,
            in_caller_trace: caller.is_some(),
            spending,
            plan,
            model_described,
            run_id,
            fence,
            leases,
            tools: RunTools::default(),
            gate: watch::Sender::new(Gate::Open),
            root: std::sync::OnceLock::new(),
            worker_tools: std::sync::Mutex::default(),
            checkpoint: tokio::sync::OnceCell::new(),
            cancel: CancellationToken::new(),
            held: CancellationToken::new(),
            lost: std::sync::OnceLock::new(),
            let_go: std::sync::OnceLock::new(),
            store_failure: std::sync::OnceLock::new(),
            store_errors: Arc::default(),
            workers_spawned: AtomicU32::new(workers_spawned),
            history: AtomicU64::new(history),
            nudge_queues: std::sync::Mutex::new(HashMap::new()),
            saved: std::sync::OnceLock::new(),
            span,
        }
    }

    pub(crate) fn emit(&self, path: &str, kind: EventKind) {
        self.events.emit(&self.run_id, path, kind);
    }

    /// The tools a worker of `kind` offers its model: `build`'s, built by
    /// the run's first worker of the kind, shared by the others.
    pub(crate) fn worker_tools(
        &self,
        kind: &str,
        build: impl FnOnce() -> Arc<[crate::ports::ToolDefinition]>,
    ) -> Arc<[crate::ports::ToolDefinition]> {
        let mut tools = self
            .worker_tools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(shared) = tools.get(kind) {
            return shared.clone();
        }
        let built = build();
        tools.insert(kind.to_owned(), built.clone());
        built
    }

    /// Asks the run's budget checkpoint whether the loop of `request` gets
    /// more, starting the checkpoint (linked to the root loop) the first
    /// time a loop of the run asks: most runs never use up a budget, and do
    /// not pay for an actor they never ask. A checkpoint that cannot start
    /// answers as the breaker does, `WrapUp`, saying why.
    pub(crate) async fn check_budget(
        &self,
        request: crate::ports::BudgetEvaluationRequest,
    ) -> crate::supervision::budget::BudgetDecision {
        let checkpoint = self
            .checkpoint
            .get_or_try_init(|| async {
                let root = self
                    .root
                    .get()
                    .ok_or_else(|| "the run's root loop has not started".to_owned())?;
                self.spawn_checkpoint(root.get_cell())
                    .await
                    .map_err(|error| error.to_string())
            })
            .await;
        match checkpoint {
            Ok(actor) => {
                crate::supervision::budget::BudgetCheckpointActor::check(actor, request).await
            }
            Err(reason) => crate::supervision::budget::BudgetDecision::WrapUp {
                reason: format!("breaker: the budget checkpoint could not start: {reason}"),
            },
        }
    }

    /// Starts a budget checkpoint, linked to `supervisor`.
    pub(crate) async fn spawn_checkpoint(
        &self,
        supervisor: ractor::ActorCell,
    ) -> Result<ActorRef<crate::supervision::budget::BudgetMsg>, ractor::SpawnErr> {
        let args = crate::supervision::budget::BudgetCheckpointArgs {
            config: self.budget_config,
            evaluator: self.evaluator.clone(),
            events: self.events.clone(),
            prices: self.prices.clone(),
        };
        ractor::Actor::spawn_linked(
            None,
            crate::supervision::budget::BudgetCheckpointActor,
            args,
            supervisor,
        )
        .await
        .map(|(actor, _)| actor)
    }

    /// The nudge queue of the loop at `path`, created if need be.
    pub(crate) fn nudges_for(&self, path: &str) -> NudgeQueue {
        self.nudge_queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(path.to_owned())
            .or_default()
            .clone()
    }

    /// Closes the gate and pauses every lease of the run at once.
    pub(crate) fn stop_clocks(&self) {
        self.gate.send_if_modified(|gate| {
            let open = *gate == Gate::Open;
            if open {
                *gate = Gate::Paused;
            }
            open
        });
        self.leases.pause();
    }

    /// Keeps what a resumed run found in the store, for its loops.
    pub(crate) fn set_saved(&self, saved: Arc<super::Saved>) {
        let _ = self.saved.set(saved);
    }

    /// What a resumed run found in the store, if it was resumed.
    pub(crate) fn saved(&self) -> Option<&Arc<super::Saved>> {
        self.saved.get()
    }

    /// The next place in the run's history, for a snapshot or a call's
    /// first record.
    pub(crate) fn next_seq(&self) -> u64 {
        self.history.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The fence this executor holds on the run.
    pub(crate) fn fence(&self) -> u64 {
        self.fence.load(Ordering::Acquire)
    }

    /// Wall-clock milliseconds, for persisted records.
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_unix_ms()
    }

    /// Whether this executor lost the run to another.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.get().is_some() || self.let_go.get().is_some()
    }

    /// This executor no longer owns the run: stop working on it at once and
    /// say so. Nothing more is written; the new owner carries on.
    pub(crate) fn lose(&self, reason: String) {
        if self.lost.set(reason.clone()).is_err() {
            return;
        }
        tracing::error!(run_id = %self.run_id, owner_id = %self.owner_id, %reason, "run lost: this executor stops working on it");
        self.gate.send_replace(Gate::Closed);
        self.cancel.cancel();
        self.held.cancel();
        if let Some(root) = self.root.get() {
            root.stop(Some(reason));
        }
    }

    /// Turns a store answer into whether the write landed, losing the run on
    /// a stale fence. A store error is logged here; [`Self::write`] is what
    /// tries again and gives up.
    pub(crate) fn landed(&self, what: &str, result: Result<Fenced<()>, StoreError>) -> bool {
        match result {
            Ok(Fenced::Applied(())) => true,
            Ok(Fenced::Stale { fence, owner_id }) => {
                self.lose(format!(
                    "{what} refused: this executor's fence {} is stale (the run's fence is {fence}, owner {})",
                    self.fence(),
                    owner_id.as_deref().unwrap_or("none")
                ));
                false
            }
            Err(error) => {
                tracing::error!(run_id = %self.run_id, %error, "{what} not written");
                false
            }
        }
    }

    /// Makes a fenced write of the run's, trying it again after a
    /// transient store error for the engine's patience
    /// ([`StoreWrites`](crate::StoreWrites)). `true` once it landed; on a
    /// stale fence the run is lost; a write given up is reported to the
    /// run ([`Self::store_failed`]), which pauses or fails, and `false`
    /// answered: the caller goes no further.
    pub(crate) async fn write<F>(&self, what: &str, mut write: impl FnMut() -> F) -> bool
    where
        F: std::future::Future<Output = Result<Fenced<()>, StoreError>>,
    {
        if self.is_lost() {
            return false;
        }
        let result = crate::store_writes::retried(
            &self.store_writes,
            &self.store_health,
            &self.store_errors,
            &mut write,
        )
        .await;
        match result {
            Err(error) => {
                self.store_failed(what, error);
                false
            }
            landed => self.landed(what, landed),
        }
    }

    /// A write of the run's was given up: the run is told, once, and
    /// pauses or fails as the engine says. A run not yet started is let go.
    pub(crate) fn store_failed(&self, what: &str, error: StoreError) {
        let reason = format!("{what} not written: {error}");
        tracing::error!(run_id = %self.run_id, trace_id = %self.trace_id, %reason, "a store write was given up");
        if self.store_failure.set(reason.clone()).is_err() {
            return;
        }
        match self.root.get() {
            Some(root) => {
                let _ = root.send_message(LoopMsg::StoreFailed(reason));
            }
            None => self.release(reason),
        }
    }

    /// Lets the run go without losing it: its work stops at once, its
    /// heartbeat too, so its lease runs out and an executor resumes it
    /// from its last durable snapshot. Nothing more is written.
    pub(crate) fn release(&self, reason: String) {
        if self.let_go.set(reason.clone()).is_err() {
            return;
        }
        tracing::error!(run_id = %self.run_id, owner_id = %self.owner_id, %reason, "run let go: an executor resumes it from its last snapshot once its lease runs out");
        self.gate.send_replace(Gate::Closed);
        self.cancel.cancel();
        self.held.cancel();
        if let Some(root) = self.root.get() {
            root.stop(Some(reason));
        }
    }

    /// Changes the run's status in the store, fenced.
    pub(crate) async fn update(&self, update: crate::ports::RunUpdate) -> bool {
        self.write("status change", || {
            self.store
                .update_run(&self.run_id, self.fence(), update.clone())
        })
        .await
    }

    /// Waits until the run's events so far are logged and the store is
    /// durable: `false` if the store refused them past the run's patience.
    /// The run's log takes no more of its events afterwards.
    pub(crate) async fn flush_log(&self) -> bool {
        let (done, flushed) = tokio::sync::oneshot::channel();
        if self
            .log
            .send(crate::event_log::LogItem::Flush(self.run_id.clone(), done))
            .is_ok()
        {
            return flushed.await.unwrap_or(false);
        }
        false
    }

    /// Records a tool call, fenced.
    pub(crate) async fn record_call(&self, record: ToolCallRecord) -> bool {
        self.write("tool-call record", || {
            self.store
                .record_tool_call(&self.run_id, record.clone(), self.fence())
        })
        .await
    }

    pub(crate) fn spec(&self, kind: LeaseKind, subject: &str, path: &str) -> LeaseSpec {
        // Durations were validated with the configuration; one below the
        // floor cannot happen, but a spec error must not panic the loop.
        let duration = self.lease_config.duration(kind).max(crate::MIN_LEASE);
        LeaseSpec::new(kind, subject, duration)
            .unwrap_or_else(|_| unreachable_spec(kind, subject))
            .with_terms(self.terms.get(kind).clone())
            .with_pace_mode(self.watchdog_config.pace)
            .in_run(self.run_id.clone(), path)
    }

    /// The number of the run's next worker, if the run has started fewer
    /// than `max_per_run` workers (restarts included); `None` once it has.
    pub(crate) fn next_worker_number(&self, max_per_run: u32) -> Option<u32> {
        self.workers_spawned
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |spawned| {
                (spawned < max_per_run).then_some(spawned + 1)
            })
            .ok()
            .map(|spawned| spawned + 1)
    }
}

fn unreachable_spec(kind: LeaseKind, subject: &str) -> LeaseSpec {
    // `LeaseSpec::new` only refuses a zero duration, which `spec` rules out.
    match LeaseSpec::new(kind, subject, Duration::from_secs(1)) {
        Ok(spec) => spec,
        Err(_) => unreachable!("a one-second lease is valid"),
    }
}
