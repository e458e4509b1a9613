//! Forking a run: a new run recorded with its lineage, the parent's state
//! at the fork point written into it as references to the parent's
//! history (each loop's snapshot names the parent's entry it starts from,
//! and the store keeps none of its transcript again), its lineage logged, then started as a
//! resumed run starts.
//!
//! The copy is written before the fork starts: the parent's tool calls
//! first, then the loops' snapshots, the forked loop's last; then, in one
//! append, the fork's first events — `run_forked` and a
//! `tool_call_replayed` for each call it inherits with its result — and
//! only then does the fork take a step. A fork whose log is empty was cut
//! short before its lineage was durable: whoever takes it on copies it
//! again from its parent (the copy is a pure function of the parent's
//! history, so copying again writes the same) and writes its lineage then,
//! as its start, so that a fork's log holds its lineage exactly once
//! whatever stopped the executor that made it. A fork whose executor died
//! after its lineage but before it wrote anything of its own is copied
//! again too, and resumed.

use crate::agent::Saved;
use crate::event::{Event, EventKind};
use crate::flow::Flow;
use crate::fork::{self, ForkSpec, ForkStart, Unstarted};
use crate::ports::history::Lineage;
use crate::ports::{Fenced, ForkOrigin, RunRecord, SnapshotTable, StoreError, ToolCallState};
use crate::run::{ROOT_PATH, RunHandle};

use super::{Engine, EngineError};

impl Engine {
    /// Forks run `run_id` as `spec` says, and starts the fork: a new run
    /// of the parent's flow (with `spec.set`'s changes) that starts from
    /// the parent's state before step `spec.step` of its loop `spec.path`,
    /// with `spec.guidance` for that step. Its record keeps its lineage
    /// ([`RunRecord::fork`]); the parent is only read, whatever its status
    /// and wherever it runs. A tool call the parent made before the fork
    /// point is never sent again: the fork replays its recorded result, or
    /// waits for a person when its outcome is unknown.
    pub async fn fork(&self, run_id: &str, spec: ForkSpec) -> Result<RunHandle, EngineError> {
        let checked = self
            .fork_checked(run_id, spec, |_| Ok::<(), std::convert::Infallible>(()))
            .await?;
        match checked {
            Ok(handle) => Ok(handle),
            Err(never) => match never {},
        }
    }

    /// [`Engine::fork`], with the flow the fork would run held to `check`
    /// before anything is recorded: a flow `check` refuses is answered as
    /// `Ok(Err(refusal))`, and nothing is recorded. What an executor holds
    /// every new run's flow to — the same check as a posted flow's —
    /// goes here.
    pub async fn fork_checked<E>(
        &self,
        run_id: &str,
        spec: ForkSpec,
        check: impl FnOnce(&Flow) -> Result<(), E>,
    ) -> Result<Result<RunHandle, E>, EngineError> {
        self.refuse_runs()?;
        let parent = self
            .store
            .load_run(run_id)
            .await?
            .ok_or_else(|| EngineError::NotFound(run_id.to_owned()))?;
        // One change at a time, so that a refusal names the change.
        let mut flow = parent.flow.clone();
        for change in &spec.set {
            flow = fork::change_flow(&flow, std::slice::from_ref(change))?;
            if let Err(error) = serde_json::from_value::<Flow>(flow.clone()) {
                return Err(fork::ForkError::Change(format!("`{change}`: {error}")).into());
            }
        }
        let flow: Flow = serde_json::from_value(flow).map_err(|e| {
            fork::ForkError::Change(format!("the flow of run {run_id} cannot be read: {e}"))
        })?;
        if let Err(refused) = check(&flow) {
            return Ok(Err(refused));
        }
        let (plan, stored) = self.plan_stored(flow)?;
        // A fork belongs to its parent's tenant.
        let mut record = self.new_record(stored, &crate::RunOptions::default())?;
        record.tenant.clone_from(&parent.tenant);
        let lineage = self.stored_lineage(run_id).await?;
        let calls = self.store.load_tool_calls(run_id).await?;
        let start =
            fork::start(&parent, &lineage, &calls, &spec, &record.run_id).map_err(unstarted)?;
        record.fork = Some(start.origin.clone());
        self.store.create_run(record.clone()).await?;
        let saved = self.copy(&record, start).await?;
        self.launch(plan, record, Some(saved), true).await.map(Ok)
    }

    /// What a fork resumed by this executor starts from: what it `saved`
    /// if it wrote anything of its own since its copy, else (or when its
    /// lineage was never logged: `unlogged`) its copy made again from its
    /// parent.
    pub(super) async fn fork_saved(
        &self,
        record: &RunRecord,
        origin: &ForkOrigin,
        saved: Saved,
        unlogged: bool,
    ) -> Result<Saved, EngineError> {
        if saved.history() > origin.seq && !unlogged {
            return Ok(saved);
        }
        let parent = self.store.load_run(&origin.parent).await?.ok_or_else(|| {
            EngineError::NotFound(format!(
                "{} (the parent of fork {}, whose state was not yet copied whole)",
                origin.parent, record.run_id
            ))
        })?;
        let spec = ForkSpec {
            path: origin.path.clone(),
            step: origin.step,
            guidance: origin.guidance.clone(),
            set: origin.changes.clone(),
        };
        let lineage = self.stored_lineage(&parent.run_id).await?;
        let calls = self.store.load_tool_calls(&parent.run_id).await?;
        let start =
            fork::start(&parent, &lineage, &calls, &spec, &record.run_id).map_err(unstarted)?;
        self.copy(record, start).await
    }

    /// The stored history of `run_id` and of the runs it continues from:
    /// what each step added, not every state whole.
    async fn stored_lineage(&self, run_id: &str) -> Result<Lineage, EngineError> {
        let store = self.store.clone();
        let lineage = Lineage::load(run_id, move |run| {
            store.load_stored_snapshots(run, SnapshotTable::History)
        })
        .await?;
        Ok(lineage)
    }

    /// Writes a fork's start into its record, fenced: the parent's calls,
    /// then the loops' snapshots.
    async fn copy(&self, record: &RunRecord, start: ForkStart) -> Result<Saved, EngineError> {
        let stale = |what: &str| {
            StoreError::conflict(format!(
                "fork {}: its {what} could not be written: another executor took it",
                record.run_id
            ))
        };
        for call in &start.calls {
            let written = self
                .store
                .record_tool_call(&record.run_id, call.clone(), record.fence)
                .await?;
            if !written.is_applied() {
                return Err(stale("parent's tool calls").into());
            }
        }
        for snapshot in &start.snapshots {
            let written = self
                .store
                .save_snapshot(snapshot.clone(), record.fence)
                .await?;
            if !written.is_applied() {
                return Err(stale("snapshots").into());
            }
        }
        // A fork's spending is its own, from nothing.
        Ok(Saved {
            snapshots: start.snapshots,
            calls: start.calls,
            spending: None,
        })
    }

    /// Writes a fork's lineage to its log, in one append with the fork's
    /// fence, before the fork takes a step: `run_forked` (in place of
    /// `run_started`), then one `tool_call_replayed` for each call it
    /// inherits with its result — what it will never send. Told to the bus
    /// and the embedder's sink as every event is; refused, and nothing of
    /// the fork started, if another executor took the fork meanwhile.
    pub(super) async fn log_lineage(
        &self,
        record: &RunRecord,
        flow: &str,
        saved: &Saved,
    ) -> Result<(), EngineError> {
        let Some(origin) = &record.fork else {
            return Ok(());
        };
        let forked = EventKind::RunForked(Box::new(crate::event::RunFork {
            flow: flow.to_owned(),
            parent: origin.parent.clone(),
            loop_path: origin.path.clone(),
            step: origin.step,
            guidance: origin.guidance.clone(),
            changes: origin.changes.clone(),
            person_answers: origin.person_answers.clone(),
        }));
        let replayed = saved
            .calls
            .iter()
            .filter(|call| call.state == ToolCallState::Done)
            .filter_map(|call| {
                let made_by = call.made_by.clone()?;
                Some((
                    format!("{}/tool_call:{}.{}", call.path, call.step, call.index),
                    EventKind::ToolCallReplayed {
                        tool: call.tool.clone(),
                        idempotency_key: call.key.clone(),
                        made_by,
                        by_person: call.by_person,
                    },
                ))
            });
        let events: Vec<std::sync::Arc<Event>> = std::iter::once((ROOT_PATH.to_owned(), forked))
            .chain(replayed)
            .map(|(path, kind)| {
                if let Some(user) = &self.user_events {
                    user.emit(&record.run_id, &path, kind.clone());
                }
                self.bus.publish(&record.run_id, &path, kind)
            })
            .collect();
        match self
            .store
            .append_events(&record.run_id, events, record.fence)
            .await?
        {
            Fenced::Applied(()) => Ok(()),
            Fenced::Stale { .. } => {
                self.bus.forget_run(&record.run_id);
                Err(StoreError::conflict(format!(
                    "fork {}: its lineage could not be logged: another executor took it",
                    record.run_id
                ))
                .into())
            }
        }
    }
}

/// The engine's error for a fork whose start could not be found.
fn unstarted(error: Unstarted) -> EngineError {
    match error {
        Unstarted::Refused(error) => EngineError::Fork(error),
        Unstarted::Store(error) => EngineError::Store(error),
    }
}
