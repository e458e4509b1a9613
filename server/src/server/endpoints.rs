//! The endpoints this executor's runs call, as it sees them: `GET
//! /endpoints`, and a person marking one down or up (`POST
//! /endpoints/down`, `/endpoints/up`). See [`leasehold::Endpoints`]: an
//! endpoint whose calls fail in a row is down, its runs wait paused and
//! resume when a probe finds it answering again.
//!
//! What is down is this executor's view: each executor of a shared store
//! has its own, and resumes the runs it paused.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leasehold::EndpointView;
use serde::{Deserialize, Serialize};

use super::App;
use super::api::read_json_body;
use super::error::{ApiError, ErrorBody};

/// `GET /endpoints`: `{"endpoints": [{"endpoint", "up", "down_by",
/// "down_for_ms", "failures_in_a_row", "last_error", "probes",
/// "next_probe_in_ms", "runs_waiting"}]}`.
#[utoipa::path(get, path = "/endpoints", tag = "endpoints",
    responses((status = 200, description = "The endpoints this executor's runs call", body = EndpointsView)))]
pub(super) async fn list(State(app): State<Arc<App>>) -> Json<EndpointsView> {
    Json(EndpointsView {
        endpoints: app.engine().endpoints().list(),
    })
}

/// `GET /endpoints`'s answer.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub(super) struct EndpointsView {
    /// Each endpoint, as this executor sees it.
    endpoints: Vec<EndpointView>,
}

/// An endpoint marked down or up: its view after it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub(super) struct EndpointMarked {
    /// The endpoint.
    endpoint: Option<EndpointView>,
    /// `POST /endpoints/up`: how many paused runs resume.
    #[serde(skip_serializing_if = "Option::is_none")]
    runs_resuming: Option<usize>,
}

/// The body of `POST /endpoints/down` and `/endpoints/up`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct MarkBody {
    /// The endpoint, as `GET /endpoints` names it (required).
    endpoint: Option<String>,
    /// Who marks it (`down` only).
    by: Option<String>,
}

/// `POST /endpoints/down` (`{"endpoint", "by"}`): the runs' next calls to
/// the endpoint wait, paused, until it is marked up; nothing probes it.
#[utoipa::path(post, path = "/endpoints/down", tag = "endpoints",
    request_body = MarkBody,
    responses(
        (status = 200, description = "The endpoint, down", body = EndpointMarked),
        (status = 400, description = "A body that is not the JSON expected", body = ErrorBody),
        (status = 404, description = "No such endpoint here (`unknown_endpoint`)", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the body timeout", body = ErrorBody),
        (status = 413, description = "The body is larger than its limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A `by` that cannot be taken (`invalid_control`)", body = ErrorBody),
    ))]
pub(super) async fn down(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let (endpoint, by) = marked(&app, request).await?;
    app.engine().endpoints().mark_down(&endpoint, &by);
    Ok(answer(&app, &endpoint, None))
}

/// `POST /endpoints/up` (`{"endpoint"}`): the runs paused on the endpoint
/// resume, a wave at once and more as it answers.
#[utoipa::path(post, path = "/endpoints/up", tag = "endpoints",
    request_body = MarkBody,
    responses(
        (status = 200, description = "The endpoint, up, and the runs resuming", body = EndpointMarked),
        (status = 400, description = "A body that is not the JSON expected", body = ErrorBody),
        (status = 404, description = "No such endpoint here (`unknown_endpoint`)", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the body timeout", body = ErrorBody),
        (status = 413, description = "The body is larger than its limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "A `by` that cannot be taken (`invalid_control`)", body = ErrorBody),
    ))]
pub(super) async fn up(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let (endpoint, _) = marked(&app, request).await?;
    let resumed = app.engine().endpoints().mark_up(&endpoint);
    Ok(answer(&app, &endpoint, Some(resumed)))
}

/// The endpoint a mark names, one this executor knows, and who asked.
async fn marked(app: &App, request: axum::extract::Request) -> Result<(String, String), ApiError> {
    let (parts, body) = request.into_parts();
    let caller = super::caller::Caller::of(&parts.extensions)?;
    let body = read_json_body(app, &parts.headers, body).await?;
    let MarkBody { endpoint, by } = if body.iter().all(u8::is_ascii_whitespace) {
        MarkBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the body is not the JSON expected: {e}")))?
    };
    let endpoint = endpoint.map(|e| e.trim().to_owned()).unwrap_or_default();
    let known: Vec<String> = app
        .engine()
        .endpoints()
        .list()
        .into_iter()
        .map(|view| view.endpoint)
        .collect();
    if !known.contains(&endpoint) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_endpoint",
            format!(
                "no endpoint {endpoint:?} here; GET /endpoints lists them: {}",
                known.join(", ")
            ),
        ));
    }
    let by = caller
        .who(by.as_deref(), "a person over the API")
        .map_err(|message| {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_control", message)
        })?;
    Ok((endpoint, by))
}

fn answer(app: &App, endpoint: &str, resumed: Option<usize>) -> Response {
    let view = app
        .engine()
        .endpoints()
        .list()
        .into_iter()
        .find(|view| view.endpoint == endpoint);
    let body = EndpointMarked {
        endpoint: view,
        runs_resuming: resumed,
    };
    (StatusCode::OK, Json(body)).into_response()
}
