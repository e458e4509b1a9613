//! `GET /metrics`: the server's [`Metrics`](crate::metrics::Metrics) in the
//! Prometheus text format, behind the token like the rest of the API.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::App;
use super::error::{ApiError, ErrorBody};
use crate::metrics::{CONTENT_TYPE, ScrapeError};

/// `GET /metrics`.
#[utoipa::path(get, path = "/metrics", tag = "server",
    responses(
        (status = 200, description = "The Prometheus text format", content_type = "text/plain; version=0.0.4; charset=utf-8", body = String),
        (status = 500, description = "The store failed", body = ErrorBody),
    ))]
pub(super) async fn scrape(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    app.metrics.set_admission(
        app.engine().load().map(|gauge| gauge.lag()),
        app.executor.admission().limit(),
        app.executor.live_runs(),
    );
    let text = app
        .metrics
        .scrape(app.engine(), super::api::STORE_PROBE)
        .await
        .map_err(|error| match error {
            ScrapeError::Store(error) => ApiError::from(error),
            ScrapeError::Encode(_) => ApiError::internal(error.to_string()),
        })?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}
