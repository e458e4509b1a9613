//! The runs an engine owns: claiming one (a compare-and-set that raises its
//! fence), renewing its executor lease by heartbeat, letting it go on
//! shutdown, continuing its event log after a previous owner, and the
//! orphans of executors that died.
//!
//! Every write here carries the fence the engine holds; a stale fence means
//! another executor owns the run, and nothing of this one's is applied.

use std::sync::Arc;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ractor::{ActorRef, ActorStatus};

use crate::agent::{LoopMsg, RunContext};
use crate::duration::heartbeat_timing;
use crate::event::EventKind;
use crate::event_log::LogItem;
use crate::ports::{ClaimOutcome, Fenced, RunRecord, RunStatus, RunUpdate, Store, fencing};
use crate::run::RunHandle;

use super::live_owners;
use super::{Engine, EngineError, RUN_STOP_GRACE};

impl Engine {
    /// How often this executor renews its runs' leases, and sweeps for
    /// runs whose lease expired: a third of the run-lease TTL.
    pub fn heartbeat_period(&self) -> Duration {
        heartbeat_timing(self.config.run_lease_ttl).0
    }

    pub(super) fn ttl_ms(&self) -> u64 {
        heartbeat_timing(self.config.run_lease_ttl).1
    }

    /// The record of a new run of `flow` (as stored), started with
    /// `options`, owned by this executor with fence 1 and a lease of one
    /// TTL from now.
    ///
    /// # Errors
    /// A tenant's name [`check_tenant`](crate::tenancy::check_tenant)
    /// refuses.
    pub(super) fn new_record(
        &self,
        flow: serde_json::Value,
        options: &super::RunOptions,
    ) -> Result<RunRecord, EngineError> {
        let tenant = match options.tenant.as_deref() {
            None => None,
            Some(tenant) => {
                crate::tenancy::check_tenant(tenant)?;
                crate::tenancy::stored_tenant(tenant)
            }
        };
        let now = self.clock.now_unix_ms();
        Ok(RunRecord {
            run_id: new_run_id(),
            flow,
            status: RunStatus::Running,
            owner_id: Some(self.owner_id.clone()),
            fence: 1,
            lease_expires_at_ms: now.saturating_add(self.ttl_ms()),
            reason: None,
            answer: None,
            pause: None,
            fork: None,
            created_at_ms: now,
            updated_at_ms: now,
            trace_parent: options.trace_parent.clone(),
            tenant,
        })
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
        for leases in &self.lease_actors {
            leases.stop(Some("executor shutting down".to_owned()));
        }
        let _ = self
            .watchdog
            .stop_and_wait(
                Some("executor shutting down".to_owned()),
                Some(Duration::from_secs(10)),
            )
            .await;
    }

    pub(super) fn refuse_if_shut_down(&self) -> Result<(), EngineError> {
        if self.shut_down.load(Ordering::SeqCst) {
            Err(EngineError::ShutDown)
        } else {
            Ok(())
        }
    }

    /// Refuses to take on a run once shut down, or when this engine has no
    /// model ([`EngineBuilder::without_model`](super::EngineBuilder::without_model)).
    pub(super) fn refuse_runs(&self) -> Result<(), EngineError> {
        self.refuse_if_shut_down()?;
        match &self.model {
            Ok(_) => Ok(()),
            Err(why) => Err(EngineError::NoModel(why.to_string())),
        }
    }

    pub(super) fn lock_live(&self) -> std::sync::MutexGuard<'_, crate::hash::Map<String, LiveRun>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `run_id` as being taken on by this engine until the guard is
    /// dropped, or refuses with [`EngineError::Held`] (by this executor): a
    /// run this engine runs, or is taking on, is never claimed by it again —
    /// a second claim would raise the fence under its own live copy, and
    /// the run would be started twice and lost once.
    pub(super) fn take_on(&self, run_id: &str) -> Result<TakingOn<'_>, EngineError> {
        let live = self.lock_live();
        let running_here = live
            .get(run_id)
            .is_some_and(|run| run.actor.get_status() != ActorStatus::Stopped);
        let mut taking = self
            .taking_on
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if running_here || !taking.insert(run_id.to_owned()) {
            return Err(EngineError::Held {
                run_id: run_id.to_owned(),
                owner_id: self.owner_id.clone(),
                expires_at_ms: 0,
                remaining_ms: 0,
            });
        }
        Ok(TakingOn {
            engine: self,
            run_id: run_id.to_owned(),
        })
    }

    /// Whether `owner_id`, which holds a run of this engine's store, is
    /// certainly gone: the store is opened by one process at a time
    /// ([`RunStore::is_exclusive`](crate::RunStore::is_exclusive), sled),
    /// this process is that one, and no engine in it has that id. Its
    /// process died without letting its runs go (SIGKILL, a crash); nothing
    /// can run them, so they are taken over at once rather than when the
    /// dead process's lease ends.
    pub fn holder_is_gone(&self, owner_id: &str) -> bool {
        self.store.is_exclusive() && live_owners::gone(&self.owner_id, owner_id)
    }

    /// Claims `run_id` for this executor at `now` (a compare-and-set that
    /// raises its fence), or says why not. A run whose holder is gone
    /// ([`Engine::holder_is_gone`]) is claimed as at its lease's end, with
    /// a lease that ends one TTL from now.
    pub(super) async fn claim(&self, run_id: &str, now: u64) -> Result<RunRecord, EngineError> {
        let ttl = self.ttl_ms();
        let mut outcome = self
            .store
            .claim_run(run_id, &self.owner_id, now, ttl)
            .await?;
        if let ClaimOutcome::HeldBy {
            owner_id,
            expires_at_ms,
        } = &outcome
            && self.holder_is_gone(owner_id)
        {
            tracing::warn!(
                run_id,
                holder = %owner_id,
                "the run's executor is gone (its store is opened by this process alone, and no \
                 executor here is it): taken over without waiting for its lease to end"
            );
            let at = (*expires_at_ms).max(now);
            let left = ttl.saturating_sub(at - now);
            outcome = self
                .store
                .claim_run(run_id, &self.owner_id, at, left)
                .await?;
        }
        match outcome {
            ClaimOutcome::Claimed(record) => Ok(record),
            ClaimOutcome::HeldBy {
                owner_id,
                expires_at_ms,
            } => Err(EngineError::Held {
                run_id: run_id.to_owned(),
                owner_id,
                expires_at_ms,
                remaining_ms: expires_at_ms.saturating_sub(now),
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
    /// never mistakes a new event for it. Its positions go on from the last
    /// logged event's, with no gap.
    ///
    /// Answers the end the log already holds, if a previous owner logged
    /// the run's end and died (or lost the run) before recording it: the
    /// log is written first, so it is the one to believe.
    pub(super) async fn continue_log(
        &self,
        run_id: &str,
        fence: u64,
    ) -> Result<Option<RunUpdate>, EngineError> {
        let floor = fence.saturating_sub(1).saturating_mul(1 << 32);
        // The last event alone: where the log goes on, and the run's end
        // if it logged one (nothing is logged after a run's end).
        let last = self.store.last_event(run_id).await?;
        let (seq, position) = last.as_ref().map_or((0, 0), |e| (e.seq, e.position));
        self.bus.advance_past(floor.max(seq));
        self.bus.continue_run(run_id, position);
        let now = self.clock.now_unix_ms();
        Ok(last.and_then(|event| logged_end(&event.kind, now)))
    }

    /// Records the end a previous owner logged but did not record, with
    /// `fence`; answers [`EngineError::Finished`], as for any run that has
    /// ended.
    pub(super) async fn record_logged_end(
        &self,
        run_id: &str,
        fence: u64,
        end: RunUpdate,
    ) -> EngineError {
        let status = end.status;
        match self.store.update_run(run_id, fence, end).await {
            Ok(Fenced::Applied(())) => {
                tracing::warn!(
                    run_id,
                    trace_id = %crate::trace_context::trace_id_for(run_id),
                    status = status.name(),
                    "the run's log held its end; recorded it"
                );
                EngineError::Finished {
                    run_id: run_id.to_owned(),
                    status,
                }
            }
            Ok(Fenced::Stale { owner_id, .. }) => EngineError::Held {
                run_id: run_id.to_owned(),
                owner_id: owner_id.unwrap_or_default(),
                expires_at_ms: 0,
                remaining_ms: 0,
            },
            Err(error) => error.into(),
        }
    }

    /// Marks every running run whose executor lease expired as orphaned;
    /// returns their ids.
    ///
    /// On a store this process alone opens
    /// ([`RunStore::is_exclusive`](crate::RunStore::is_exclusive)), the
    /// first call marks orphaned, too, every running run whose holder is
    /// gone ([`Engine::holder_is_gone`]), at once, with
    /// [`fencing::ORPHANED_HOLDER_GONE`]
    /// ([`RunStore::orphan_runs_of_gone_holders`](crate::RunStore::orphan_runs_of_gone_holders));
    /// its claim raises the fence.
    /// Only the first: the processes that died are those before this one,
    /// and later calls (a server's sweep) read no more than the store's own
    /// rule.
    ///
    /// None is marked while the store was away within one run-lease TTL,
    /// as this executor saw it (a write failed transiently, a heartbeat or
    /// a sweep took longer than a heartbeat period), nor while one of its
    /// heartbeats has waited longer than a heartbeat period: the runs' holders
    /// could not renew their leases while it was, and get one TTL to do so
    /// once it is back. The store's being away is the runtime's time, not
    /// the work's.
    pub async fn reconcile_orphans(&self) -> Result<Vec<String>, EngineError> {
        if self.store_health.away_within(self.config.run_lease_ttl)
            || self.store_health.stuck(self.heartbeat_period())
        {
            tracing::debug!(
                "orphan sweep skipped: the store was away within one run-lease TTL, and the \
                 runs' holders get that long to renew"
            );
            return Ok(Vec::new());
        }
        let now = self.clock.now_unix_ms();
        let started = tokio::time::Instant::now();
        let swept = self.store.reconcile_orphans(now).await;
        if started.elapsed() > self.heartbeat_period() {
            self.store_health.away();
        }
        let mut orphaned = swept.inspect_err(|error| self.store_health.error(error))?;
        if self.store.is_exclusive() && !self.gone_holders_swept.swap(true, Ordering::SeqCst) {
            let own = self.owner_id.clone();
            let gone: crate::ports::GoneHolder =
                Arc::new(move |owner: &str| live_owners::gone(&own, owner));
            orphaned.extend(self.store.orphan_runs_of_gone_holders(now, gone).await?);
        }
        Ok(orphaned)
    }

    /// Cancels a run that no loop of this executor is running — orphaned,
    /// or paused by an executor that has since died — without starting its
    /// loops: claims it (raising its fence, so a stale owner's writes are
    /// refused), appends `run_cancelled` to its log and records it
    /// cancelled. A run held by a live executor is refused with
    /// [`EngineError::Held`]; cancel it through that executor.
    pub async fn cancel_stored(&self, run_id: &str, reason: &str) -> Result<(), EngineError> {
        let _taking = self.take_on(run_id)?;
        let now = self.clock.now_unix_ms();
        let record = self.claim(run_id, now).await?;
        if let Some(end) = self.continue_log(run_id, record.fence).await? {
            return Err(self.record_logged_end(run_id, record.fence, end).await);
        }
        let event = self.bus.publish(
            run_id,
            crate::run::ROOT_PATH,
            crate::event::EventKind::RunCancelled {
                reason: reason.to_owned(),
            },
        );
        self.bus.forget_run(run_id);
        let fence = record.fence;
        let stale = |f: Fenced<()>| match f {
            Fenced::Applied(()) => Ok(()),
            Fenced::Stale { owner_id, .. } => Err(EngineError::Held {
                run_id: run_id.to_owned(),
                owner_id: owner_id.unwrap_or_default(),
                expires_at_ms: 0,
                remaining_ms: 0,
            }),
        };
        stale(self.store.append_events(run_id, vec![event], fence).await?)?;
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
        let orphans = self.store.list_runs().await?.into_iter();
        self.resume_each(orphans, usize::MAX).await
    }

    /// Claims and resumes at most `max` of the runs already marked
    /// orphaned (none are reconciled here): what an executor with room for
    /// `max` more runs takes on. Returns the handles of the runs resumed.
    pub async fn resume_orphans_up_to(&self, max: usize) -> Result<Vec<RunHandle>, EngineError> {
        // An engine without a model leaves orphans to one that can run them.
        if max == 0 || self.without_model().is_some() {
            return Ok(Vec::new());
        }
        let mut query = crate::ports::RunQuery::first(max);
        query.status = Some(RunStatus::Orphaned);
        let orphans = self.store.list_runs_page(&query).await?.runs.into_iter();
        self.resume_each(orphans, max).await
    }

    /// Resumes the orphaned runs among `records`, at most `max` of them.
    async fn resume_each(
        &self,
        records: impl Iterator<Item = RunRecord>,
        max: usize,
    ) -> Result<Vec<RunHandle>, EngineError> {
        let mut resumed = Vec::new();
        for record in records.filter(|r| r.status == RunStatus::Orphaned) {
            if resumed.len() >= max {
                break;
            }
            match self.resume(&record.run_id).await {
                Ok(handle) => resumed.push(handle),
                // Another executor got there first: fine.
                Err(EngineError::Held { .. } | EngineError::Finished { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(resumed)
    }
}

impl Engine {
    /// Claims and resumes, at most `max` of them, the runs paused waiting
    /// on an endpoint (subject [`ENDPOINT_SUBJECT`]) whose executor is gone:
    /// its lease ended, or it was the last process on an exclusive store.
    /// The executor that left them would have resumed them when the
    /// endpoint answered; here each waits on the endpoint as this executor
    /// sees it, and so is resumed at once unless it is down here too. A run
    /// paused for anything else (a person, an escalation, a call of unknown
    /// outcome) is left alone. The store is searched at most once a
    /// heartbeat period (the first call searches), up to 4 096 paused runs.
    /// Returns the handles of the runs taken over.
    ///
    /// [`ENDPOINT_SUBJECT`]: crate::run::ENDPOINT_SUBJECT
    pub async fn take_over_endpoint_waits_up_to(
        &self,
        max: usize,
    ) -> Result<Vec<RunHandle>, EngineError> {
        if max == 0 || self.without_model().is_some() {
            return Ok(Vec::new());
        }
        {
            let mut searched = self
                .endpoint_waits_searched
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let now = tokio::time::Instant::now();
            if searched.is_some_and(|at| now < at + self.heartbeat_period()) {
                return Ok(Vec::new());
            }
            *searched = Some(now);
        }
        let now = self.clock.now_unix_ms();
        let mut query = crate::ports::RunQuery::first(ENDPOINT_WAITS_PAGE);
        query.status = Some(RunStatus::WaitingHuman);
        let mut left = ENDPOINT_WAITS_SEARCHED;
        let mut stranded = Vec::new();
        while left > 0 && stranded.len() < max {
            let page = self.store.list_runs_page(&query).await?;
            left = left.saturating_sub(page.runs.len());
            stranded.extend(
                page.runs
                    .into_iter()
                    .filter(|record| self.left_waiting_on_an_endpoint(record, now))
                    .map(|record| record.run_id),
            );
            match page.next {
                Some(next) => query.after = Some(next),
                None => break,
            }
        }
        let mut taken = Vec::new();
        for run_id in stranded.into_iter().take(max) {
            match self.resume(&run_id).await {
                Ok(handle) => {
                    handle.wait_on_endpoint();
                    tracing::info!(
                        %run_id,
                        "a run left waiting on an endpoint by an executor that is gone was taken over"
                    );
                    taken.push(handle);
                }
                // Another executor got there first, or it ended meanwhile.
                Err(EngineError::Held { .. } | EngineError::Finished { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(taken)
    }

    /// Whether `record` is a run paused on an endpoint that no live
    /// executor holds.
    fn left_waiting_on_an_endpoint(&self, record: &RunRecord, now_ms: u64) -> bool {
        let on_an_endpoint = record
            .pause
            .as_ref()
            .is_some_and(|pause| pause.subject == crate::run::ENDPOINT_SUBJECT);
        // A run this engine runs is refused when claimed (`take_on`).
        let holder_gone = match record.owner_id.as_deref() {
            None => true,
            Some(owner) => record.lease_expires_at_ms <= now_ms || self.holder_is_gone(owner),
        };
        on_an_endpoint && holder_gone
    }
}

/// How many paused runs a page of the search for runs left waiting on an
/// endpoint reads.
const ENDPOINT_WAITS_PAGE: usize = 256;

/// How many paused runs one search for runs left waiting on an endpoint
/// reads at most ([`Engine::take_over_endpoint_waits_up_to`]).
const ENDPOINT_WAITS_SEARCHED: usize = 4096;

/// A run this engine holds: its actor and the fence it holds the run with.
pub(super) struct LiveRun {
    pub(super) actor: ActorRef<LoopMsg>,
    pub(super) fence: Arc<AtomicU64>,
    /// What the run's handles watch.
    pub(super) state: tokio::sync::watch::Receiver<crate::run::RunState>,
    /// The store errors the run's writes met here.
    pub(super) store_errors: Arc<AtomicU64>,
    /// What keyed limits read of it.
    pub(super) labels: Arc<crate::keyed_limits::RunLabels>,
}

/// Lets go of a run this executor stopped in place: its lease now ends at
/// `now_ms` (a heartbeat with a TTL of zero), so another executor — or
/// `leasehold runs resume` in the next process — may claim it at once
/// instead of waiting out the TTL. A stale fence means someone else holds
/// the run already, and nothing is written.
async fn release(store: &dyn Store, run_id: &str, fence: &AtomicU64, now_ms: u64) {
    let fence = fence.load(Ordering::Acquire);
    mark_stopped_in_place(store, run_id, fence, now_ms).await;
    match store.renew_run(run_id, fence, now_ms, 0).await {
        Ok(Fenced::Applied(())) => {}
        Ok(Fenced::Stale { owner_id, .. }) => {
            tracing::debug!(run_id, trace_id = %crate::trace_context::trace_id_for(run_id), ?owner_id, "not released: another executor holds it");
        }
        Err(error) => {
            tracing::warn!(run_id, trace_id = %crate::trace_context::trace_id_for(run_id), %error, "run lease not released; it will expire");
        }
    }
}

/// Says on a running run that its executor stopped it on purpose
/// ([`fencing::STOPPED_IN_PLACE`]), so that nobody reading it later takes
/// a clean shutdown for a dead executor. A paused run already says why it
/// waits, and keeps its reason.
async fn mark_stopped_in_place(store: &dyn Store, run_id: &str, fence: u64, now_ms: u64) {
    let record = match store.load_run(run_id).await {
        Ok(Some(record)) if record.status == RunStatus::Running && record.fence == fence => record,
        Ok(_) => return,
        Err(error) => {
            tracing::warn!(run_id, trace_id = %crate::trace_context::trace_id_for(run_id), %error, "run not marked as stopped in place");
            return;
        }
    };
    let update = RunUpdate {
        status: RunStatus::Running,
        reason: Some(fencing::STOPPED_IN_PLACE.to_owned()),
        answer: record.answer,
        pause: record.pause,
        at_ms: now_ms,
    };
    if let Err(error) = store.update_run(run_id, fence, update).await {
        tracing::warn!(run_id, trace_id = %crate::trace_context::trace_id_for(run_id), %error, "run not marked as stopped in place");
    }
}

/// Renews this executor's lease on the run every third of its TTL for as
/// long as it holds the run — its end recorded, or the run lost or let go —
/// so that the lease lasts while the end is written; a refused renewal
/// means another executor took the run over.
pub(super) fn heartbeat(ctx: Arc<RunContext>, ttl: Duration) {
    let (period, ttl_ms) = heartbeat_timing(ttl);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(
            crate::deadline_after(tokio::time::Instant::now(), period),
            period,
        );
        loop {
            tokio::select! {
                () = ctx.held.cancelled() => return,
                _ = ticks.tick() => {
                    let started = tokio::time::Instant::now();
                    let renewing = ctx.store_health.in_flight();
                    let result = ctx.store.renew_run(&ctx.run_id, ctx.fence(), ctx.now_ms(), ttl_ms).await;
                    drop(renewing);
                    if started.elapsed() > period {
                        ctx.store_health.away();
                    }
                    match result {
                        Ok(Fenced::Applied(())) => ctx.store_health.ok(),
                        Ok(Fenced::Stale { .. }) => {
                            ctx.landed("heartbeat", result);
                            return;
                        }
                        Err(error) => {
                            ctx.store_health.error(&error);
                            ctx.store_errors.fetch_add(1, Ordering::Relaxed);
                            tracing::error!(run_id = %ctx.run_id, %error, "heartbeat not written");
                        }
                    }
                }
            }
        }
    });
}

/// A new run id: `run-` and a UUIDv7 in hex. It is unique, and ids made
/// one after another in this process sort in the order they were made (the
/// UUID's millisecond timestamp and counter lead its bits), so a listing
/// sorted by id is one sorted by creation.
fn new_run_id() -> String {
    format!("run-{}", uuid::Uuid::now_v7().simple())
}

/// A run being taken on by an engine ([`Engine::take_on`]); dropping it
/// ends the mark.
pub(super) struct TakingOn<'a> {
    engine: &'a Engine,
    run_id: String,
}

impl Drop for TakingOn<'_> {
    fn drop(&mut self) {
        self.engine
            .taking_on
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.run_id);
    }
}

/// The status change a logged end of a run stands for, at `now_ms`.
fn logged_end(kind: &EventKind, now_ms: u64) -> Option<RunUpdate> {
    let (status, answer, reason) = match kind {
        EventKind::RunCompleted { answer, .. } => {
            (RunStatus::Completed, Some(answer.clone()), None)
        }
        EventKind::RunFailed { reason } => (RunStatus::Failed, None, Some(reason.clone())),
        EventKind::RunCancelled { reason } => (RunStatus::Cancelled, None, Some(reason.clone())),
        _ => return None,
    };
    Some(RunUpdate {
        status,
        reason,
        answer,
        pause: None,
        at_ms: now_ms,
    })
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
