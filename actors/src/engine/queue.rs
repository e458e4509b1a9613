//! Queued runs: a run recorded `queued`, owned by nobody, started by
//! whichever executor claims it first.
//!
//! Where several executors share a store, the one that receives a run need
//! not be the one with room for it. [`Engine::queue`] records the run
//! unowned (fence 0); [`Engine::start_from_queue`] claims up to a number of the
//! oldest queued runs ([`QueueStore::claim_queued`](crate::QueueStore::claim_queued):
//! each claimed once, however many executors claim at once) and starts
//! each from its flow, with fence 1, as [`Engine::start`] would have. How
//! many an executor claims — its room under its limit of live runs — is
//! the caller's to say.

use crate::flow::Flow;
use crate::keyed_limits::ClaimRoom;
use crate::ports::{QueueClaim, RunRecord, RunStatus, RunUpdate};
use crate::run::RunHandle;

use super::{Engine, EngineError};

/// The fence a run holds once claimed for the first time: a queued run is
/// created with fence 0.
const FIRST_FENCE: u64 = 1;

impl Engine {
    /// Validates `flow` and records a new run of it `queued`: no owner,
    /// fence 0, no lease. Nothing starts it here: an executor with room
    /// claims it ([`Engine::start_from_queue`], [`Engine::start_queued`]).
    pub async fn queue(&self, flow: Flow) -> Result<RunRecord, EngineError> {
        self.queue_with(flow, super::RunOptions::default()).await
    }

    /// [`Engine::queue`] with `options`: within a caller's trace.
    pub async fn queue_with(
        &self,
        flow: Flow,
        options: super::RunOptions,
    ) -> Result<RunRecord, EngineError> {
        self.refuse_runs()?;
        let (_, stored) = self.plan_stored(flow)?;
        let record = RunRecord {
            status: RunStatus::Queued,
            owner_id: None,
            fence: 0,
            lease_expires_at_ms: 0,
            ..self.new_record(stored, &options)?
        };
        self.create_run_once(&record, options.idempotency_key.as_deref())
            .await?;
        Ok(record)
    }

    /// Claims up to `max` of the oldest queued runs for this executor and
    /// starts each ([`Engine::launch_claimed`]). A claimed run that cannot
    /// be started here (its flow is refused by this executor's
    /// configuration) is recorded failed, saying why, rather than left
    /// owned and idle; the others start.
    pub async fn start_from_queue(&self, max: usize) -> Result<Vec<RunHandle>, EngineError> {
        self.start_from_queue_within(max, ClaimRoom::default())
            .await
    }

    /// [`start_from_queue`](Self::start_from_queue) within `room`: a
    /// queued run whose key has no room left under a keyed limit is left
    /// queued, and the next in fair order is taken instead.
    pub async fn start_from_queue_within(
        &self,
        max: usize,
        room: ClaimRoom,
    ) -> Result<Vec<RunHandle>, EngineError> {
        self.refuse_if_shut_down()?;
        // An engine without a model takes on no run: the queue waits for
        // an executor that can run it.
        if max == 0 || self.without_model().is_some() {
            return Ok(Vec::new());
        }
        let claim = QueueClaim {
            owner_id: self.owner_id.clone(),
            now_ms: self.clock.now_unix_ms(),
            ttl_ms: self.ttl_ms(),
            max,
            room,
        };
        let claimed = self.store.claim_queued(claim).await?;
        let mut started = Vec::with_capacity(claimed.len());
        for record in claimed {
            let (run_id, fence) = (record.run_id.clone(), record.fence);
            match self.launch_claimed(record).await {
                Ok(handle) => started.push(handle),
                Err(EngineError::ShutDown) => return Err(EngineError::ShutDown),
                Err(error) => self.fail_unstarted(&run_id, fence, &error).await?,
            }
        }
        Ok(started)
    }

    /// Claims the queued run `run_id` for this executor and starts it: the
    /// executor that queued a run and has room starts it at once. Refused
    /// like [`Engine::resume`] if another executor holds it; a run another
    /// executor claimed and then lost is resumed from its snapshots.
    pub async fn start_queued(&self, run_id: &str) -> Result<RunHandle, EngineError> {
        self.refuse_runs()?;
        let _taking = self.take_on(run_id)?;
        let record = self.claim(run_id, self.clock.now_unix_ms()).await?;
        if record.fence == FIRST_FENCE {
            self.launch_claimed(record).await
        } else {
            self.resume_claimed(record).await
        }
    }

    /// Starts a run this executor has just claimed from the queue (`record`
    /// as the claim answered it), from its flow: it has no snapshot yet, so
    /// it begins at its first step, as [`Engine::start`] begins a new run.
    pub async fn launch_claimed(&self, record: RunRecord) -> Result<RunHandle, EngineError> {
        self.refuse_runs()?;
        let plan = self.plan_of(&record)?;
        self.launch(plan, record, None, false).await
    }

    /// Records failed a run claimed from the queue that could not start.
    async fn fail_unstarted(
        &self,
        run_id: &str,
        fence: u64,
        error: &EngineError,
    ) -> Result<(), EngineError> {
        tracing::error!(%run_id, %error, "a queued run claimed could not start");
        let update = RunUpdate {
            status: RunStatus::Failed,
            reason: Some(format!(
                "executor {} claimed it from the queue but could not start it: {error}",
                self.owner_id
            )),
            answer: None,
            pause: None,
            at_ms: self.clock.now_unix_ms(),
        };
        // A stale fence means another executor has it now: nothing to fail.
        let _ = self.store.update_run(run_id, fence, update).await?;
        Ok(())
    }
}
