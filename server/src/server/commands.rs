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
use leasehold::{RunCommand, RunStatus};
use serde::Serialize;

use super::App;
use super::error::{ApiError, ErrorBody};
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
        Ok(Controlled::Applied { status, claimed }) => Ok(Json(ControlAnswer {
            run_id: run_id.to_owned(),
            status,
            after_seq,
            claimed: claimed.is_some(),
            forwarded_to: None,
        })
        .into_response()),
        Ok(Controlled::Forwarded {
            owner_id,
            status,
            after_seq,
            ..
        }) => Ok((
            StatusCode::ACCEPTED,
            Json(ControlAnswer {
                run_id: run_id.to_owned(),
                status,
                after_seq,
                claimed: false,
                forwarded_to: Some(owner_id),
            }),
        )
            .into_response()),
        Err(refused) => Ok(refusal(refused).into_response()),
    }
}

/// A control's answer: applied here (200), or forwarded to the executor
/// that holds the run (202).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ControlAnswer {
    /// The run.
    run_id: String,
    /// Its status after the control (forwarded: as stored when sent).
    status: RunStatus,
    /// The seq of the run's last event before the control: follow its
    /// events after it to see what the control made of it.
    after_seq: u64,
    /// `true` when this executor claimed the run for the control (an
    /// orphan's resume) and runs it now.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    claimed: bool,
    /// The executor the control was forwarded to.
    #[serde(skip_serializing_if = "Option::is_none")]
    forwarded_to: Option<String>,
}

/// What every control answers, for the API's document: the route's
/// `responses(ControlResponses)` says it once.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // Never built: the handlers answer with `control`.
pub(super) enum ControlResponses {
    /// Applied here: the run's status after it
    #[response(status = 200)]
    Applied(ControlAnswer),
    /// Forwarded to the executor that holds the run
    #[response(status = 202)]
    Forwarded(ControlAnswer),
    /// A body that is not the JSON expected
    #[response(status = 400)]
    BadBody(ErrorBody),
    /// No such run of the caller's tenant
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// The body did not arrive within the body timeout
    #[response(status = 408)]
    BodyTimeout(ErrorBody),
    /// The run is not in a state the control applies to
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// The body, or a text in it, is larger than its limit
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// A body that is not `application/json`
    #[response(status = 415)]
    NotJson(ErrorBody),
    /// A value the control cannot take
    #[response(status = 422)]
    Invalid(ErrorBody),
    /// Too many commands wait for the run, or no executor has room to take it on
    #[response(status = 429, headers(("Retry-After" = u64, description = "Seconds")))]
    TooMany(ErrorBody),
    /// The store failed
    #[response(status = 500)]
    StoreFailed(ErrorBody),
    /// A tool server could not be reached
    #[response(status = 502)]
    ToolServer(ErrorBody),
    /// The executor that held the run is gone
    #[response(status = 503)]
    OwnerGone(ErrorBody),
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
