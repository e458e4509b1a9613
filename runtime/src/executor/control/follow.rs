//! The owner's side of a forwarded control: every process that runs runs
//! on a store follows its change feed, takes the commands stored for the
//! runs it runs ([`QueueStore::take_commands`](leasehold_actors::QueueStore::take_commands),
//! each once) and applies each through the same rules as a control sent
//! to it ([`super::check`], [`super::apply`]). A refusal is logged on the
//! run as `control_refused`, the only answer the sender can read.

use std::sync::Arc;

use leasehold_actors::{RunCommand, StoreChange, StoredCommand};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Executor, Holder, Refused, check};

/// Follows the store's changes until `stop` is cancelled (or the store is
/// gone): takes and applies the commands of the runs `executor` runs
/// whenever one is stored for a run live here, and after any gap in the
/// feed. With `queued`, also wakes that claimer of queued runs when a run
/// is queued anywhere, or after a gap.
pub fn follow<E: Executor + 'static>(
    executor: Arc<E>,
    stop: CancellationToken,
    queued: Option<Arc<Notify>>,
) -> tokio::task::JoinHandle<()> {
    // Subscribed before the first take: a command stored after it wakes
    // this task.
    let mut changes = executor.engine().store().changes();
    tokio::spawn(async move {
        let wake = || {
            if let Some(queued) = &queued {
                queued.notify_one();
            }
        };
        let mut due = true;
        loop {
            if due {
                take_and_apply(executor.as_ref()).await;
            }
            let change = tokio::select! {
                () = stop.cancelled() => return,
                change = changes.recv() => change,
            };
            due = match change {
                None => return,
                Some(StoreChange::Command { run_id }) => executor.handle(&run_id).is_some(),
                // A run queued anywhere: the claimer looks for room at once
                // instead of at its next interval.
                Some(StoreChange::Queued) => {
                    wake();
                    false
                }
                Some(change) => {
                    if change.is_gap() {
                        wake();
                    }
                    change.is_gap()
                }
            };
        }
    })
}

/// Takes this executor's commands and applies each to its run.
async fn take_and_apply(executor: &dyn Executor) {
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
async fn apply_forwarded(executor: &dyn Executor, stored: StoredCommand) {
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
fn refuse(executor: &dyn Executor, run_id: &str, id: u64, command: &RunCommand, refused: &Refused) {
    tracing::warn!(%run_id, command = id, %refused, "a forwarded control was refused");
    // A run that has ended logs nothing more: its end is the answer.
    if !matches!(refused, Refused::Finished { .. }) {
        executor
            .engine()
            .note(run_id, super::refusal_event(command, refused));
    }
}
