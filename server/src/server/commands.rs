//! A person's controls over HTTP: `POST /runs/{id}/resume`, `/cancel` and
//! `/reconcile` translated to and from the executor's controls
//! ([`leasehold::executor::control`]), which decide whether the run is
//! controlled here, claimed by this executor, forwarded to the executor
//! that holds it (`202 Accepted` with `forwarded_to`), or refused with the
//! rule's reason. This file holds no rule of its own.

use std::sync::Arc;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leasehold::{BoxFuture, Engine, RunCommand, RunHandle};

use super::App;
use super::error::ApiError;
use leasehold::executor::control::{self, Controlled, Executor, Refused};

/// How long a client refused for a run's full command queue is asked to
/// wait: its owner takes them at once, or loses the run within
/// `run_lease_ttl`.
const COMMANDS_RETRY_AFTER_SECS: u64 = 30;

/// The server as an executor of controls: its engine, the runs it holds,
/// and its admission for a run it takes on.
pub(super) struct Served(pub(super) Arc<App>);

impl Executor for Served {
    fn engine(&self) -> &Engine {
        &self.0.engine
    }

    fn handle(&self, run_id: &str) -> Option<RunHandle> {
        self.0.handle(run_id)
    }

    fn take_on<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<RunHandle, Refused>> {
        let app = Arc::clone(&self.0);
        let id = run_id.to_owned();
        Box::pin(async move {
            // On a task of its own, so a panic while resuming is a 500,
            // not a dropped connection.
            let admitted = tokio::spawn(async move {
                let engine = Arc::clone(&app.engine);
                let taken = app.admit(|| engine.resume(&id)).await;
                (app, taken)
            })
            .await;
            match admitted {
                Ok((_, Some(taken))) => Ok(taken?),
                Ok((app, None)) => Err(Refused::CannotTakeOn {
                    message: too_many_runs(&app),
                    busy: true,
                }),
                Err(error) => Err(Refused::CannotTakeOn {
                    message: format!("resuming the run panicked: {error}"),
                    busy: false,
                }),
            }
        })
    }
}

/// Why a run cannot be taken on now: this executor holds as many live runs
/// as its admitted limit allows (`max_live_runs`, fewer while it is late).
/// The client is answered 429 `too_many_runs` ([`refusal`]).
fn too_many_runs(app: &App) -> String {
    format!(
        "this executor already runs {} runs, its admitted limit ({}; at most \
         server.max_live_runs, LEASEHOLD_SERVER_MAX_LIVE_RUNS, fewer while its lag is over \
         executor.lag_target): try again when one has ended",
        app.live_runs(),
        app.admitted.limit()
    )
}

/// Applies `command` to `run_id` through the executor's controls, and
/// answers as the API does: the run and its status (`claimed` when this
/// executor took it on), or `202` with `forwarded_to`.
pub(super) async fn control(
    app: &Arc<App>,
    run_id: &str,
    command: RunCommand,
) -> Result<Response, ApiError> {
    let served = Served(Arc::clone(app));
    // What the run had logged before the control: a client follows what
    // the control made of it from there.
    let after_seq = last_seq(app, run_id).await?;
    match control::control(&served, run_id, command).await {
        Ok(Controlled::Applied { status, claimed }) => {
            let mut body =
                serde_json::json!({"run_id": run_id, "status": status, "after_seq": after_seq});
            if claimed.is_some() {
                body["claimed"] = serde_json::Value::Bool(true);
            }
            Ok(Json(body).into_response())
        }
        Ok(Controlled::Forwarded {
            owner_id,
            status,
            after_seq,
            ..
        }) => Ok((
            StatusCode::ACCEPTED,
            Json(serde_json::json!({
                "run_id": run_id,
                "status": status,
                "forwarded_to": owner_id,
                "after_seq": after_seq,
            })),
        )
            .into_response()),
        Err(refused) => Ok(refusal(refused).into_response()),
    }
}

/// The seq of the last event `run_id` logged (0 before any, or for no
/// such run: the control says which).
async fn last_seq(app: &App, run_id: &str) -> Result<u64, ApiError> {
    let last = app.engine.store().last_event(run_id).await?;
    Ok(last.map_or(0, |event| event.seq))
}

/// The API's answer to a refused control.
fn refusal(refused: Refused) -> Response {
    match refused {
        Refused::NotFound { run_id } => ApiError::unknown_run(&run_id).into_response(),
        Refused::CommandsWaiting { .. } => {
            let mut response = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_commands",
                refused.to_string(),
            )
            .into_response();
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(COMMANDS_RETRY_AFTER_SECS),
            );
            response
        }
        Refused::CannotTakeOn {
            busy: true,
            message,
        } => ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_runs", message).into_response(),
        Refused::CannotTakeOn { message, .. } => ApiError::internal(message).into_response(),
        Refused::Run(error) => ApiError::from(error).into_response(),
        Refused::Engine(error) => ApiError::from(error).into_response(),
        Refused::Store(error) => ApiError::from(error).into_response(),
        rule => ApiError::conflict(rule.to_string()).into_response(),
    }
}

/// Follows the store's changes until the server shuts down: applies the
/// controls forwarded to the runs this executor runs, and wakes its
/// claimer of queued runs when a run is queued anywhere.
pub(super) fn follow(app: Arc<App>) -> tokio::task::JoinHandle<()> {
    let stop = app.shutdown.clone();
    let wake = Arc::clone(app.queue_wake());
    control::follow(Arc::new(Served(app)), stop, Some(wake))
}
