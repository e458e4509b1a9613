//! A person's hands on a running run: `POST /runs/{id}/pause`, and a lease
//! extended or stopped by hand (`POST /runs/{id}/leases/{lease}/extend`,
//! `/intervene`). Each is read here and handed to the executor's controls
//! ([`super::commands::control`]), which apply it where the run runs or
//! forward it to the executor that holds it; the rules are theirs.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use leasehold::executor::control::by_hand;
use leasehold::run_limits::PersonText;
use leasehold::{EventKind, InFlight, LeaseAct, RunCommand, Steer};
use serde::{Deserialize, Serialize};

use super::App;
use super::api::{Control, read_json_body, too_large};
use super::caller::Caller;
use super::commands;
use super::commands::ControlResponses;
use super::error::ApiError;

/// Who asked, when the request does not say.
const OVER_THE_API: &str = "a person over the API";

/// The body of `POST /runs/{id}/pause`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PauseBody {
    /// Why.
    reason: Option<String>,
    /// What becomes of the operations in flight.
    #[serde(default)]
    in_flight: InFlight,
    /// Who asks.
    by: Option<String>,
}

/// `POST /runs/{id}/pause`: `{"reason", "in_flight": "finish" | "cancel",
/// "by"}`, all optional: pauses a running run as an `ESCALATE` does, here
/// or on the executor that holds it (202).
#[utoipa::path(post, path = "/runs/{id}/pause", tag = "controls", params(super::api::RunPath),
    request_body(content = PauseBody, description = "Optional"),
    responses(ControlResponses))]
pub(super) async fn pause(
    State(app): State<Arc<App>>,
    control: Control,
) -> Result<Response, ApiError> {
    let PauseBody {
        reason,
        in_flight,
        by,
    } = control.json()?;
    let reason = reason
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "paused by hand".to_owned());
    app.options
        .run_limits
        .check_text(PersonText::Reason, &reason)
        .map_err(|e| too_large(&e))?;
    let by = control
        .caller
        .who(by.as_deref(), OVER_THE_API)
        .map_err(unprocessable)?;
    let command = RunCommand::Pause {
        reason,
        in_flight,
        by,
    };
    commands::control(&app, &control.run_id, command).await
}

/// The body of `POST /runs/{id}/messages`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct MessageBody {
    /// The message (required).
    text: Option<String>,
    /// How it reaches the run.
    #[serde(default)]
    policy: Steer,
    /// Who sends it.
    by: Option<String>,
}

/// A message with the policy `rollback`: the fork made, and the run
/// rolled back.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RolledBack {
    /// The fork.
    run_id: String,
    /// `running`: started here.
    status: leasehold::RunStatus,
    /// The run rolled back.
    rolled_back: RollbackOf,
}

/// The run a rollback forked and cancelled.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RollbackOf {
    /// The run.
    run_id: String,
    /// The step of its root loop the fork starts before.
    step: u32,
    /// The status its cancel was answered with (200, or 202 forwarded).
    cancel: u16,
}

/// `POST /runs/{id}/messages`: `{"text", "policy": "enqueue" | "interrupt"
/// | "reject" | "rollback", "by"}`: a person's message to a running run.
/// `enqueue`, `interrupt` and `reject` go to the run, here or forwarded to
/// the executor that holds it (202); `rollback` forks the run before its
/// current step with the message as the fork's guidance (201, the fork),
/// then cancels the run.
#[utoipa::path(post, path = "/runs/{id}/messages", tag = "controls", params(super::api::RunPath),
    request_body = MessageBody,
    responses(
        (status = 201, description = "`rollback`: the fork, started here; the run cancelled", body = RolledBack,
            headers(("Location" = String, description = "`/runs/{id}` of the fork"))),
        ControlResponses,
    ))]
pub(super) async fn message(
    State(app): State<Arc<App>>,
    control: Control,
) -> Result<Response, ApiError> {
    let MessageBody { text, policy, by } = control.json()?;
    let Some(text) = text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()) else {
        return Err(unprocessable(
            "the body names no `text`: give the message, as {\"text\": \"…\"}".to_owned(),
        ));
    };
    app.options
        .run_limits
        .check_text(PersonText::Guidance, &text)
        .map_err(|e| too_large(&e))?;
    let by = control
        .caller
        .who(by.as_deref(), OVER_THE_API)
        .map_err(unprocessable)?;
    if policy != Steer::Rollback {
        let command = RunCommand::Message { text, policy, by };
        return commands::control(&app, &control.run_id, command).await;
    }
    rollback(&app, &control.run_id, text, by).await
}

/// A message with the policy `rollback`: a fork of the run before the root
/// loop's current step, the message its guidance; then the run cancelled.
async fn rollback(
    app: &Arc<App>,
    run_id: &str,
    text: String,
    by: String,
) -> Result<Response, ApiError> {
    let store = app.engine().store();
    let Some(record) = store.load_run(run_id).await? else {
        return Err(ApiError::unknown_run(run_id));
    };
    if record.status.is_terminal() {
        return Err(ApiError::conflict(format!(
            "run {run_id} has already finished: it is {}; fork it instead (POST \
             /runs/{run_id}/fork)",
            record.status.name()
        )));
    }
    let events = store.load_events(run_id, 0).await?;
    let Some(step) = events.iter().rev().find_map(|e| match e.kind {
        EventKind::StepStarted { step, .. } if &*e.path == "run" => Some(step),
        _ => None,
    }) else {
        return Err(ApiError::conflict(format!(
            "run {run_id} has not begun a step yet: there is nothing to roll back; send the \
             message with `enqueue`"
        )));
    };
    let spec = leasehold::ForkSpec::root(step).with_guidance(text);
    let fork_id = match super::api::start_fork(app, run_id, spec).await? {
        Ok(fork_id) => fork_id,
        Err(refusal) => return Ok(refusal),
    };
    let reason = format!("rolled back by {by} into run {fork_id}, from before its step {step}");
    let cancelled = commands::control(app, run_id, RunCommand::Cancel { reason }).await?;
    tracing::info!(%run_id, fork = %fork_id, step, "run rolled back over the API");
    Ok((
        StatusCode::CREATED,
        [(axum::http::header::LOCATION, format!("/runs/{fork_id}"))],
        axum::Json(RolledBack {
            run_id: fork_id,
            status: leasehold::RunStatus::Running,
            rolled_back: RollbackOf {
                run_id: run_id.to_owned(),
                step,
                cancel: cancelled.status().as_u16(),
            },
        }),
    )
        .into_response())
}

/// The body of `POST /runs/{id}/leases/{lease}/extend`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ExtendBody {
    /// How much longer: `30s`, `5m` (required).
    duration: Option<String>,
    /// Who asks.
    by: Option<String>,
}

/// The body of `POST /runs/{id}/leases/{lease}/intervene`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct InterveneBody {
    /// Why.
    reason: Option<String>,
    /// Who asks.
    by: Option<String>,
}

/// A lease of a run, in a path (`/runs/{id}/leases/{lease}/…`).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Read by the handlers as `Path<(String, String)>`.
pub(super) struct LeasePath {
    /// The run's id.
    id: String,
    /// The lease, as events name it: `lease:7`, or `7`.
    lease: String,
}

/// `POST /runs/{id}/leases/{lease}/extend`: `{"duration": "30s", "by"}`:
/// the lease's current period ends that much later, a verdict decided by
/// the person.
#[utoipa::path(post, path = "/runs/{id}/leases/{lease}/extend", tag = "controls", params(LeasePath),
    request_body = ExtendBody,
    responses(ControlResponses))]
pub(super) async fn extend(
    State(app): State<Arc<App>>,
    Path((run_id, lease)): Path<(String, String)>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let (lease_id, body) = lease_request(&app, &lease, request).await?;
    let ExtendBody { duration, by } = body.json()?;
    let Some(duration) = duration else {
        return Err(unprocessable(
            "the body names no `duration`: give one such as {\"duration\": \"30s\"}".to_owned(),
        ));
    };
    let extra = by_hand::extension(&duration).map_err(unprocessable)?;
    let by = body
        .caller
        .who(by.as_deref(), OVER_THE_API)
        .map_err(unprocessable)?;
    let act = LeaseAct::Extend {
        by_ms: u64::try_from(extra.as_millis()).unwrap_or(u64::MAX),
    };
    let command = RunCommand::Lease { lease_id, act, by };
    commands::control(&app, &run_id, command).await
}

/// `POST /runs/{id}/leases/{lease}/intervene`: `{"reason", "by"}`: the
/// lease's operation is stopped as an `INTERVENE` stops it, a verdict
/// decided by the person.
#[utoipa::path(post, path = "/runs/{id}/leases/{lease}/intervene", tag = "controls", params(LeasePath),
    request_body(content = InterveneBody, description = "Optional"),
    responses(ControlResponses))]
pub(super) async fn intervene(
    State(app): State<Arc<App>>,
    Path((run_id, lease)): Path<(String, String)>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let (lease_id, body) = lease_request(&app, &lease, request).await?;
    let InterveneBody { reason, by } = body.json()?;
    let reason = reason
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "stopped by hand".to_owned());
    app.options
        .run_limits
        .check_text(PersonText::Reason, &reason)
        .map_err(|e| too_large(&e))?;
    let by = body
        .caller
        .who(by.as_deref(), OVER_THE_API)
        .map_err(unprocessable)?;
    let command = RunCommand::Lease {
        lease_id,
        act: LeaseAct::Intervene { reason },
        by,
    };
    commands::control(&app, &run_id, command).await
}

/// The lease named in the path and the request's JSON body.
async fn lease_request(
    app: &App,
    lease: &str,
    request: axum::extract::Request,
) -> Result<(leasehold::LeaseId, Control), ApiError> {
    let lease_id = by_hand::lease_id(lease).map_err(ApiError::bad_request)?;
    let (parts, body) = request.into_parts();
    let caller = Caller::of(&parts.extensions)?;
    let body = read_json_body(app, &parts.headers, body).await?;
    Ok((
        lease_id,
        Control {
            run_id: String::new(),
            body,
            caller,
        },
    ))
}

/// 422: a value the request gave that a control cannot take.
fn unprocessable(message: String) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_control", message)
}
