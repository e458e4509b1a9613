//! `POST /runs/actions`: one control — pause, resume, cancel, a message —
//! for the runs a filter selects, or, with `dry_run`, the list of the runs
//! it would be given to. The executor's [`control_many`] does it, run by
//! run, with each run's rules; this file reads the request.
//!
//! [`control_many`]: leasehold::executor::Executor::control_many

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use leasehold::executor::control::many::{MAX_MANY, Selection};
use leasehold::run_limits::PersonText;
use leasehold::{InFlight, RunCommand, RunQuery, Steer};
use serde::Deserialize;

use super::App;
use super::api::{read_json_body, too_large};
use super::caller::Caller;
use super::error::{ApiError, ErrorBody};
use super::listing::{parse_instant, parse_status};

/// Who asked, when the request does not say.
const OVER_THE_API: &str = "a person over the API";

/// The body of `POST /runs/actions`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ManyBody {
    /// `pause`, `resume`, `cancel` or `message`.
    action: String,
    /// Only runs in this status.
    status: Option<String>,
    /// Only runs of this flow.
    flow: Option<String>,
    /// Only runs created at or after this instant.
    since: Option<String>,
    /// Only runs created before this instant.
    until: Option<String>,
    /// Only runs paused on this endpoint.
    waiting_on: Option<String>,
    /// At most this many runs.
    limit: Option<usize>,
    /// Only list the runs the action would be given to.
    #[serde(default)]
    dry_run: bool,
    /// `pause`, `cancel`: why.
    reason: Option<String>,
    /// `resume`: what the runs' next steps are told.
    guidance: Option<String>,
    /// `message`: the message.
    text: Option<String>,
    /// `message`: how it reaches each run.
    policy: Option<Steer>,
    /// `pause`: what becomes of the operations in flight.
    in_flight: Option<InFlight>,
    /// Who asks.
    by: Option<String>,
}

/// `POST /runs/actions`: the report of what the control did to each run
/// selected (or would, in a dry run).
#[utoipa::path(post, path = "/runs/actions", tag = "controls",
    request_body = ManyBody,
    responses(
        (status = 200, description = "What the control did to each run selected, or would", body = leasehold::executor::control::many::ManyReport),
        (status = 400, description = "A body that is not an action on runs, or a filter that does not parse", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the body timeout", body = ErrorBody),
        (status = 413, description = "The body is larger than its limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "No filter, no such action, or a value the action cannot take", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    ))]
pub(super) async fn act(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let bytes = read_json_body(&app, &parts.headers, body).await?;
    let body: ManyBody = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not an action on runs: {e}")))?;
    let mut selection = selection(&body)?;
    // A tenant acts on its own runs only.
    selection.query.tenant = Some(caller.tenant.clone());
    let command = command(&app, &body, &caller)?;
    let executor = Arc::clone(&app.executor);
    let dry_run = body.dry_run;
    // In a task of its own: a client that goes away mid-request must not
    // leave the runs half acted on without a report in the logs.
    let report =
        tokio::spawn(async move { executor.control_many(&selection, &command, dry_run).await })
            .await
            .map_err(|e| ApiError::internal(format!("acting on the runs panicked: {e}")))??;
    tracing::info!(
        control = report.control,
        selected = report.runs.len(),
        done = report.done(),
        dry_run,
        "a control for many runs"
    );
    Ok((StatusCode::OK, Json(report)).into_response())
}

/// The runs the body selects; a value that does not parse is a 400 naming
/// it, and a selection with no filter at all is refused (it would be every
/// run).
fn selection(body: &ManyBody) -> Result<Selection, ApiError> {
    let bad = |key: &str, why: String| ApiError::bad_request(format!("`{key}`: {why}"));
    let mut query = RunQuery::first(body.limit.unwrap_or(MAX_MANY).min(MAX_MANY));
    if body.limit == Some(0) {
        return Err(bad("limit", "a whole number from 1 is expected".to_owned()));
    }
    query.status = body
        .status
        .as_deref()
        .map(parse_status)
        .transpose()
        .map_err(|e| bad("status", e))?;
    query.flow.clone_from(&body.flow);
    query.created_from_ms = body
        .since
        .as_deref()
        .map(parse_instant)
        .transpose()
        .map_err(|e| bad("since", e))?;
    query.created_before_ms = body
        .until
        .as_deref()
        .map(parse_instant)
        .transpose()
        .map_err(|e| bad("until", e))?;
    if query.status.is_none()
        && query.flow.is_none()
        && query.created_from_ms.is_none()
        && query.created_before_ms.is_none()
        && body.waiting_on.is_none()
    {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_control",
            "an action on runs needs a filter (status, flow, since, until or waiting_on): \
             without one it would be every run",
        ));
    }
    Ok(Selection {
        query,
        waiting_on: body.waiting_on.clone(),
    })
}

/// The control the action names, its texts held to their limits.
fn command(app: &App, action: &ManyBody, caller: &Caller) -> Result<RunCommand, ApiError> {
    let unprocessable = |message: String| {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_control", message)
    };
    let check = |kind, text: &str| {
        app.options
            .run_limits
            .check_text(kind, text)
            .map_err(|e| too_large(&e))
    };
    let by = caller
        .who(action.by.as_deref(), OVER_THE_API)
        .map_err(unprocessable)?;
    let reason = action
        .reason
        .as_deref()
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty());
    if let Some(reason) = &reason {
        check(PersonText::Reason, reason)?;
    }
    Ok(match action.action.as_str() {
        "pause" => RunCommand::Pause {
            reason: reason.unwrap_or_else(|| "paused with other runs by hand".to_owned()),
            in_flight: action.in_flight.unwrap_or_default(),
            by,
        },
        "resume" => {
            let guidance = action.guidance.clone().filter(|g| !g.trim().is_empty());
            if let Some(guidance) = &guidance {
                check(PersonText::Guidance, guidance)?;
            }
            RunCommand::Resume { guidance }
        }
        "cancel" => RunCommand::Cancel {
            reason: reason.unwrap_or_else(|| format!("cancelled with other runs by {by}")),
        },
        "message" => {
            let Some(text) = action.text.clone().filter(|t| !t.trim().is_empty()) else {
                return Err(unprocessable(
                    "the action `message` needs a `text`".to_owned(),
                ));
            };
            check(PersonText::Guidance, &text)?;
            let policy = action.policy.unwrap_or_default();
            if policy == Steer::Rollback {
                return Err(unprocessable(
                    "a message to many runs cannot `rollback` (a fork of each): send it to each \
                     run (POST /runs/{id}/messages)"
                        .to_owned(),
                ));
            }
            RunCommand::Message { text, policy, by }
        }
        other => {
            return Err(unprocessable(format!(
                "`{other}` is no action on runs: give pause, resume, cancel or message"
            )));
        }
    })
}
