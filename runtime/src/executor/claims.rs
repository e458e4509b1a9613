//! What starts a run in an executor: a post (started here with room, or
//! queued for any executor with room), a claim of queued runs and orphans,
//! a fork, a run taken on for a person's control. Each counts the room
//! under the admission and registers what it started before letting go, so
//! that starts at once never exceed the limit.

use std::sync::Arc;

use leasehold_actors::{EngineError, Flow, ForkSpec, RunHandle, RunOptions, RunStatus};

use super::Executor;
use super::control::Refused;
use crate::flow_check::{FlowCheck, FlowRefused};

/// What became of a fork ([`Executor::fork`]).
#[derive(Debug)]
pub enum Forked {
    /// Recorded, and started here.
    Started(RunHandle),
    /// Not recorded: this executor runs as many runs as it may
    /// (`server.max_live_runs`).
    NoRoom,
    /// Not recorded: its texts or the flow its changes make were refused
    /// as a posted run's would be.
    Refused(FlowRefused),
}

/// What became of a posted flow ([`Executor::post`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Posted {
    /// Recorded with this id, running here or queued.
    Recorded(String, RunStatus),
    /// Not recorded: the store's queue holds `queued` runs, as many as
    /// `server.max_queued_runs` allows, and the run's tenant holds its
    /// share of them already.
    QueueFull {
        /// The queued runs counted.
        queued: u64,
        /// The run's tenant's queued runs.
        tenant_queued: u64,
        /// Its share of the queue: the bound over the tenants that hold
        /// queued runs, this one counted.
        share: u64,
    },
    /// Not recorded: the run would wait, and its tenant holds as many
    /// queued runs as a keyed limit's `queued` allows.
    TenantQueueFull {
        /// The limit's name (`[limits.NAME]`).
        limit: String,
        /// The tenant.
        tenant: String,
        /// Its queued runs, counted in the store.
        queued: u64,
        /// The limit's `queued`.
        max: u32,
    },
}

impl Executor {
    /// Starts a run of `flow` here now, whatever the room (the caller
    /// decided: a command line's run), and holds it.
    pub async fn start(
        self: &Arc<Self>,
        flow: Flow,
        options: RunOptions,
    ) -> Result<RunHandle, EngineError> {
        let handle = self.engine.start_with(flow, options).await?;
        self.register(handle.clone());
        Ok(handle)
    }

    /// Starts a run of `flow` here if this executor has room and no run
    /// waits queued, or records it queued for any executor with room;
    /// answers its id and status.
    ///
    /// Runs start in the order they were posted: while older runs wait
    /// queued, a new one is queued behind them (its id sorts after theirs)
    /// and the room there is goes to the oldest, claimed from the queue
    /// here and now — the new run among them if the room reaches it.
    ///
    /// A run that would wait is refused ([`Posted::QueueFull`]) while the
    /// store holds `server.max_queued_runs` queued runs and its tenant
    /// holds its share of them — the bound over the tenants that hold
    /// queued runs, its own counted — so that one tenant's flood never
    /// keeps another from the queue; the queue then holds at most twice
    /// the bound. Counted in the store, so the bound holds over every
    /// executor sharing it (posts to several executors at the same instant
    /// may each pass it once).
    pub async fn post(
        self: &Arc<Self>,
        flow: Flow,
        options: RunOptions,
    ) -> Result<Posted, EngineError> {
        let _admitted = self.admission.lock().await;
        let room = self.room();
        // A count the store keeps as runs change: read on every post.
        let queued = self
            .engine
            .store()
            .count_runs(RunStatus::Queued)
            .await
            .map_err(EngineError::Store)?;
        // Under keyed limits, a run whose key has no room waits queued
        // whatever the executor's room.
        let keyed_room = self.keyed_room();
        let labels = leasehold_actors::keyed_limits::RunLabels {
            tenant: options.tenant.clone(),
            flow: flow.name.clone(),
            limits: flow.keyed_limits.clone(),
        };
        let key_full = keyed_room
            .full_for(&labels)
            .map(|(limit, value)| (limit.limit.clone(), value));
        if room == 0 || key_full.is_some() {
            if room == 0 {
                self.admitted.held_back();
            }
            if queued >= u64::from(self.options.max_queued_runs)
                && let Some(full) = self.full_for(&options, queued).await?
            {
                return Ok(full);
            }
            if let Some(full) = self.tenant_queue_full(&options).await? {
                return Ok(full);
            }
            if let Some((limit, value)) = key_full {
                tracing::info!(%limit, key = %value, "a posted run waits for its key's room");
            }
            // It waits for an executor with room, this one included.
            let run_id = self.engine.queue_with(flow, options).await?.run_id;
            return Ok(Posted::Recorded(run_id, RunStatus::Queued));
        }
        if queued > 0 {
            // Older runs wait: this one waits behind them, and the room
            // goes to the oldest. The queue does not grow (the room takes
            // at least one), so its bound is not asked; a tenant's is.
            if let Some(full) = self.tenant_queue_full(&options).await? {
                return Ok(full);
            }
            let run_id = self.engine.queue_with(flow, options).await?.run_id;
            let claimed = self
                .engine
                .start_from_queue_within(room, keyed_room)
                .await?;
            if claimed.len() >= room {
                // The room is full and runs may still wait: as a claim
                // that fills its room, it held them back.
                self.admitted.held_back();
            }
            self.count_starts(&claimed);
            let mut status = RunStatus::Queued;
            for handle in claimed {
                if handle.run_id() == run_id {
                    status = RunStatus::Running;
                }
                tracing::info!(run_id = handle.run_id(), "queued run claimed");
                self.register(handle);
            }
            return Ok(Posted::Recorded(run_id, status));
        }
        // With room and nothing queued, the run is created owned by this
        // executor and started: queued first, any executor woken by the
        // queue could claim it before the one it was posted to.
        let handle = self.engine.start_with(flow, options).await?;
        let run_id = handle.run_id().to_owned();
        self.count_starts([&handle]);
        self.register(handle);
        Ok(Posted::Recorded(run_id, RunStatus::Running))
    }

    /// The refusal of a run that would wait while its tenant holds as many
    /// queued runs as a keyed limit's `queued` allows; `None` without such
    /// a limit (the store is not asked) or below it.
    async fn tenant_queue_full(&self, options: &RunOptions) -> Result<Option<Posted>, EngineError> {
        let bounded = self
            .options
            .limits
            .iter()
            .filter_map(|limit| limit.queued.map(|max| (limit, max)))
            .min_by_key(|(_, max)| *max);
        let Some((limit, max)) = bounded else {
            return Ok(None);
        };
        let by_tenant = self
            .engine
            .store()
            .count_queued_by_tenant()
            .await
            .map_err(EngineError::Store)?;
        let tenant = leasehold_actors::tenancy::tenant_or_default(options.tenant.as_deref());
        let queued = by_tenant.get(tenant).copied().unwrap_or(0);
        Ok((queued >= u64::from(max)).then(|| Posted::TenantQueueFull {
            limit: limit.name.clone(),
            tenant: tenant.to_owned(),
            queued,
            max,
        }))
    }

    /// The refusal of a run of `options`' tenant while the store's queue
    /// holds `queued` runs, its bound: `None` when the tenant holds less
    /// than its share of the queue, and the run may wait.
    async fn full_for(
        &self,
        options: &RunOptions,
        queued: u64,
    ) -> Result<Option<Posted>, EngineError> {
        let by_tenant = self
            .engine
            .store()
            .count_queued_by_tenant()
            .await
            .map_err(EngineError::Store)?;
        let tenant = leasehold_actors::tenancy::tenant_or_default(options.tenant.as_deref());
        let tenant_queued = by_tenant.get(tenant).copied().unwrap_or(0);
        let tenants = by_tenant.len() + usize::from(tenant_queued == 0);
        let tenants = u64::try_from(tenants.max(1)).unwrap_or(u64::MAX);
        let share = u64::from(self.options.max_queued_runs).div_ceil(tenants);
        Ok((tenant_queued >= share).then_some(Posted::QueueFull {
            queued,
            tenant_queued,
            share,
        }))
    }

    /// Forks `run_id` per `spec` into a new run started here, if this
    /// executor has room. The fork's texts and the flow its changes make
    /// are held to `check` as a posted run's are ([`FlowCheck`]): refused,
    /// nothing is recorded.
    pub async fn fork(
        self: &Arc<Self>,
        run_id: &str,
        spec: ForkSpec,
        check: &FlowCheck,
    ) -> Result<Forked, EngineError> {
        if let Err(refused) = check.check_fork(&spec) {
            return Ok(Forked::Refused(refused));
        }
        let engine = Arc::clone(&self.engine);
        let forked = self
            .admit(|| engine.fork_checked(run_id, spec, |flow| check.check(flow)))
            .await;
        Ok(match forked.transpose()? {
            None => Forked::NoRoom,
            Some(Ok(handle)) => Forked::Started(handle),
            Some(Err(refused)) => Forked::Refused(refused),
        })
    }

    /// Claims as many runs as this executor has room for — orphans first
    /// if it resumes them ([`ExecutorOptions::resume_orphans`]), and with
    /// them the runs left paused on an endpoint by an executor that is gone
    /// ([`Engine::take_over_endpoint_waits_up_to`]), then queued runs,
    /// oldest first — starts and holds them; answers whether it filled the
    /// room (so more may be waiting).
    ///
    /// [`Engine::take_over_endpoint_waits_up_to`]: leasehold_actors::Engine::take_over_endpoint_waits_up_to
    ///
    /// [`ExecutorOptions::resume_orphans`]: super::ExecutorOptions::resume_orphans
    pub async fn claim(self: &Arc<Self>) -> Result<bool, EngineError> {
        let _admitted = self.admission.lock().await;
        let room = self.room();
        if room == 0 {
            self.admitted
                .full(self.engine.store().as_ref())
                .await
                .map_err(EngineError::Store)?;
            return Ok(false);
        }
        let mut resumed = Vec::new();
        if self.options.resume_orphans {
            resumed = self.engine.resume_orphans_up_to(room).await?;
            // Runs left paused on an endpoint by an executor that is gone
            // would wait for a person otherwise.
            let left = room.saturating_sub(resumed.len());
            resumed.extend(self.engine.take_over_endpoint_waits_up_to(left).await?);
        }
        let left = room.saturating_sub(resumed.len());
        let claimed = self
            .engine
            .start_from_queue_within(left, self.keyed_room())
            .await?;
        self.count_starts(&claimed);
        let filled = resumed.len() + claimed.len() >= room;
        if filled {
            self.admitted.held_back();
        }
        for handle in resumed {
            tracing::info!(run_id = handle.run_id(), "orphaned run claimed and resumed");
            self.register(handle);
        }
        for handle in claimed {
            tracing::info!(run_id = handle.run_id(), "queued run claimed");
            self.register(handle);
        }
        Ok(filled)
    }

    /// Claims `run_id` and resumes it here from its snapshots, within the
    /// admitted limit: for a person's control of a run nobody holds.
    /// An executor without a model refuses as its engine does
    /// ([`EngineError::NoModel`], saying what to configure).
    pub(super) async fn take_on(self: &Arc<Self>, run_id: &str) -> Result<RunHandle, Refused> {
        let executor = Arc::clone(self);
        let id = run_id.to_owned();
        // On a task of its own: a panic while resuming is a refusal, and a
        // caller that goes away does not cancel a resume half-done.
        let taken = tokio::spawn(async move {
            let engine = Arc::clone(&executor.engine);
            executor
                .admit(|| async move { engine.resume(&id).await })
                .await
        })
        .await;
        match taken {
            Ok(Some(taken)) => Ok(taken?),
            Ok(None) => Err(Refused::CannotTakeOn {
                message: self.too_many_runs(),
                busy: true,
            }),
            Err(error) => Err(Refused::CannotTakeOn {
                message: format!("resuming the run panicked: {error}"),
                busy: false,
            }),
        }
    }

    /// Why a run cannot be taken on now: this executor holds as many live
    /// runs as its admitted limit allows.
    fn too_many_runs(&self) -> String {
        format!(
            "this executor already runs {} runs, its admitted limit ({}; at most \
             server.max_live_runs, LEASEHOLD_SERVER_MAX_LIVE_RUNS, fewer while its lag is over \
             executor.lag_target): try again when one has ended",
            self.live_runs(),
            self.admitted.limit()
        )
    }

    /// Runs `work` (which starts a run here) if this executor has room for
    /// one more run, holding the admission until the run is registered;
    /// `None` without room.
    async fn admit<F, H>(
        self: &Arc<Self>,
        work: impl FnOnce() -> F,
    ) -> Option<Result<H, EngineError>>
    where
        F: std::future::Future<Output = Result<H, EngineError>>,
        H: Started,
    {
        let _admitted = self.admission.lock().await;
        if self.room() == 0 {
            self.admitted.held_back();
            return None;
        }
        let started = work().await;
        if let Ok(handle) = &started
            && let Some(handle) = handle.handle()
        {
            self.register(handle.clone());
        }
        Some(started)
    }
}

/// What [`Executor::admit`]'s work answers: the run it started, if any.
trait Started {
    fn handle(&self) -> Option<&RunHandle>;
}

impl Started for RunHandle {
    fn handle(&self) -> Option<&RunHandle> {
        Some(self)
    }
}

impl Started for Result<RunHandle, FlowRefused> {
    fn handle(&self) -> Option<&RunHandle> {
        self.as_ref().ok()
    }
}
