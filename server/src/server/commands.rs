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
use leasehold::RunCommand;

use super::App;
use super::error::ApiError;
use leasehold::executor::control::{Controlled, Refused};

/// How long a client refused for a run's full command queue is asked to
/// wait: its owner takes them at once, or loses the run within
/// `run_lease_ttl`.
const COMMANDS_RETRY_AFTER_SECS: u64 = 30;

/// Applies `command` to `run_id` through the executor's controls, and
/// answers as the API does: the run and its status (`claimed` when this
/// executor took it on), or `202` with `forwarded_to`.
pub(super) async fn control(
    app: &Arc<App>,
    run_id: &str,
    command: RunCommand,
) -> Result<Response, ApiError> {
    // What the run had logged before the control: a client follows what
    // the control made of it from there.
    let after_seq = last_seq(app, run_id).await?;
    match app.executor.control(run_id, command).await {
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
    let last = app.engine().store().last_event(run_id).await?;
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
