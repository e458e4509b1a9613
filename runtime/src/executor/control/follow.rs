//! The owner's side of a forwarded control: every process that runs runs
//! on a store follows its change feed, takes the commands stored for the
//! runs it runs ([`QueueStore::take_commands`](leasehold_actors::QueueStore::take_commands),
//! each once) and applies each through the same rules as a control sent
//! to it ([`super::check`], [`super::apply`]). A refusal is logged on the
//! run as `control_refused`, the only answer the sender can read.

use std::sync::Arc;

use leasehold_actors::{RunCommand, StoreChange, StoredCommand};

use super::{Executor, Holder, Refused, check};

/// Follows the store's changes until the executor stops (or the store is
/// gone): takes and applies the commands of the runs `executor` runs
/// whenever one is stored for a run live here, and after any gap in the
/// feed; wakes its claimer of queued runs when a run is queued anywhere,
/// or after a gap. The task holds the executor weakly: it stops when the
/// executor is gone.
pub(in crate::executor) fn follow(executor: Arc<Executor>) -> tokio::task::JoinHandle<()> {
    // Subscribed before the first take: a command stored after it wakes
    // this task.
    let mut changes = executor.engine().store().changes();
    let stop = executor.stopping();
    let executor = Arc::downgrade(&executor);
    tokio::spawn(async move {
        let mut due = true;
        loop {
            let Some(here) = executor.upgrade() else {
                return;
            };
            if due {
                take_and_apply(&here).await;
            }
            drop(here);
            let change = tokio::select! {
                () = stop.cancelled() => return,
                change = changes.recv() => change,
            };
            let Some(here) = executor.upgrade() else {
                return;
            };
            due = match change {
                None => return,
                Some(StoreChange::Command { run_id }) => here.handle(&run_id).is_some(),
                // A run queued anywhere: the claimer looks for room at once
                // instead of at its next interval.
                Some(StoreChange::Queued) => {
                    here.wake_claimer();
                    false
                }
                Some(change) => {
                    if change.is_gap() {
                        here.wake_claimer();
                    }
                    change.is_gap()
                }
            };
        }
    })
}

/// Takes this executor's commands and applies each to its run.
async fn take_and_apply(executor: &Arc<Executor>) {
    let engine = executor.engine();
    let taken = match engine.store().take_commands(engine.owner_id()).await {
        Ok(taken) => taken,
        Err(error) => {
            tracing::error!(%error, "the commands for this executor's runs could not be taken");
            return;
        }
    };
    for command in taken {
        apply_forwarded(executor, command).await;
    }
}

/// Applies one forwarded command to the live run it names, under the
/// rules; logs a refusal on the run.
async fn apply_forwarded(executor: &Arc<Executor>, stored: StoredCommand) {
    let StoredCommand {
        id,
        run_id,
        command,
    } = stored;
    let Some(handle) = executor.handle(&run_id) else {
        tracing::warn!(%run_id, command = id, "a forwarded control for a run not live here was dropped");
        return;
    };
    let state = handle.state();
    let applied = match check(
        &run_id,
        &command,
        state.status,
        state.paused.as_ref(),
        &Holder::Here,
    ) {
        Ok(()) => super::apply(&handle, command.clone()).await,
        Err(refused) => Err(refused),
    };
    match applied {
        Ok(()) => tracing::info!(%run_id, command = id, "forwarded control applied"),
        Err(refused) => refuse(executor, &run_id, id, &command, &refused),
    }
}

/// Says on the run that a forwarded control was refused, and why.
fn refuse(executor: &Executor, run_id: &str, id: u64, command: &RunCommand, refused: &Refused) {
    tracing::warn!(%run_id, command = id, %refused, "a forwarded control was refused");
    // A run that has ended logs nothing more: its end is the answer.
    if !matches!(refused, Refused::Finished { .. }) {
        executor
            .engine()
            .note(run_id, super::refusal_event(command, refused));
    }
}
