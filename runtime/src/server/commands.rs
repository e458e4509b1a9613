//! A person's controls through any executor: `POST /runs/{id}/resume`,
//! `/cancel` and `/reconcile` on an executor that does not run the run,
//! while another executor does, reach that owner through the store.
//!
//! The executor that got the request stores the command for the run
//! ([`Store::send_command`](leasehold_actors::Store::send_command)) and
//! answers `202 Accepted` with `forwarded_to`, the owner. Every executor
//! follows the store's change feed ([`follow`]): the one whose live run a
//! command concerns takes its commands
//! ([`Store::take_commands`](leasehold_actors::Store::take_commands),
//! each once) and applies each to the run's handle, as if the request had
//! come to it. Whether the owner could apply it (a resume of a run that is
//! no longer paused is refused) shows in the run's events and status, not
//! in the 202.
//!
//! A run nobody holds (orphaned, or paused by an executor that died, its
//! lease expired or released) is not forwarded: the executor that got the
//! request claims it, as before.

use std::sync::Arc;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leasehold_actors::{ClaimOutcome, RunCommand, RunStatus, StoreChange, StoredCommand, fencing};

use super::App;
use super::error::ApiError;

/// How many forwarded controls may wait in the store for one run's owner
/// to take them: more than a person sends a run that does not answer.
pub const MAX_WAITING_COMMANDS: u64 = 16;

/// How long a client refused for a run's full command queue is asked to
/// wait: its owner takes them at once, or loses the run within
/// `run_lease_ttl`.
const COMMANDS_RETRY_AFTER_SECS: u64 = 30;

/// 429 with `Retry-After`: `waiting` controls for `run_id` wait already.
fn commands_waiting(run_id: &str, owner_id: &str, waiting: u64) -> Response {
    let mut response = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_commands",
        format!(
            "{waiting} controls for run {run_id} already wait for its owner {owner_id} to take \
             them (at most {MAX_WAITING_COMMANDS}): nothing was stored; try again once it has \
             taken them, or once its lease has expired and the run can be claimed"
        ),
    )
    .into_response();
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(COMMANDS_RETRY_AFTER_SECS),
    );
    response
}

/// If another executor holds `run_id` with a live lease (and this one does
/// not run it), stores `command` for it and answers the 202 — unless
/// `refuse` refuses the command for the run's status as stored; otherwise
/// `None`: the request is for this executor to handle.
pub(super) async fn forward(
    app: &Arc<App>,
    run_id: &str,
    refuse: impl FnOnce(RunStatus) -> Option<ApiError>,
    command: impl FnOnce() -> RunCommand,
) -> Result<Option<Response>, ApiError> {
    if app.handle(run_id).is_some() {
        return Ok(None);
    }
    let store = app.engine.store();
    let Some(record) = store.load_run(run_id).await? else {
        return Ok(None);
    };
    // The claim rule says who holds the run: the same answer a claim by
    // this executor would get now.
    let now_ms = app.engine.clock().now_unix_ms();
    let owner_id = match fencing::claim(&record, app.engine.owner_id(), now_ms, 0) {
        Err(ClaimOutcome::HeldBy { owner_id, .. }) => owner_id,
        _ => return Ok(None),
    };
    if let Some(refused) = refuse(record.status) {
        return Err(refused);
    }
    // An owner that lives takes its commands at once; one that hangs
    // keeps its lease for up to `run_lease_ttl`, and what is sent meanwhile
    // waits in the store: bounded per run.
    let waiting = store.count_commands(run_id).await?;
    if waiting >= MAX_WAITING_COMMANDS {
        return Ok(Some(commands_waiting(run_id, &owner_id, waiting)));
    }
    let id = store.send_command(run_id, command()).await?;
    tracing::info!(%run_id, command = id, owner = %owner_id, "control forwarded to the run's owner");
    Ok(Some(
        (
            StatusCode::ACCEPTED,
            Json(serde_json::json!({
                "run_id": run_id,
                "status": record.status,
                "forwarded_to": owner_id,
            })),
        )
            .into_response(),
    ))
}

/// Follows the store's changes until the server shuts down: takes and
/// applies the commands of the runs this executor runs whenever one is
/// stored for a live run here, and after any gap in the feed; wakes the
/// claimer of queued runs when a run is queued anywhere (or after a gap).
pub(super) fn follow(app: Arc<App>) -> tokio::task::JoinHandle<()> {
    // Subscribed before the first take: a command stored after it wakes
    // this task.
    let mut changes = app.engine.store().changes();
    tokio::spawn(async move {
        let mut due = true;
        loop {
            if due {
                take_and_apply(&app).await;
            }
            let change = tokio::select! {
                () = app.shutdown.cancelled() => return,
                change = changes.recv() => change,
            };
            due = match change {
                None => return,
                Some(StoreChange::Command { run_id }) => app.handle(&run_id).is_some(),
                // A run queued anywhere: this executor's claimer looks for
                // room at once instead of at its next interval.
                Some(StoreChange::Queued) => {
                    app.queue_wake().notify_one();
                    false
                }
                Some(change) => {
                    if change.is_gap() {
                        app.queue_wake().notify_one();
                    }
                    change.is_gap()
                }
            };
        }
    })
}

/// Takes this executor's commands and applies each to its run.
async fn take_and_apply(app: &Arc<App>) {
    let owner_id = app.engine.owner_id();
    let taken = match app.engine.store().take_commands(owner_id).await {
        Ok(taken) => taken,
        Err(error) => {
            tracing::error!(%error, "the commands for this executor's runs could not be taken");
            return;
        }
    };
    for command in taken {
        apply(app, command).await;
    }
}

/// Applies one forwarded command to the live run it names.
async fn apply(app: &Arc<App>, stored: StoredCommand) {
    let StoredCommand {
        id,
        run_id,
        command,
    } = stored;
    let Some(handle) = app.handle(&run_id) else {
        tracing::warn!(%run_id, command = id, "a forwarded control for a run not live here was dropped");
        return;
    };
    let applied = match command {
        RunCommand::Resume { guidance } => {
            if handle.state().status == RunStatus::ReconciliationRequired {
                tracing::warn!(%run_id, command = id, "a forwarded resume of a run that waits for a reconciliation was refused");
                return;
            }
            handle.resume(guidance).await
        }
        RunCommand::Cancel { reason } => handle.cancel(reason).await,
        RunCommand::Reconcile { key, decision } => handle.reconcile(key, decision).await,
    };
    match applied {
        Ok(()) => tracing::info!(%run_id, command = id, "forwarded control applied"),
        Err(error) => {
            tracing::warn!(%run_id, command = id, %error, "a forwarded control was refused");
        }
    }
}
