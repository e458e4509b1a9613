//! `GET /executor`: this executor's load and admission, as JSON — its lag,
//! its admitted limit and the ceiling over it, its live runs, and the runs
//! waiting `queued` in the store (counted over every executor sharing it).
//! Behind the guard like the rest of the API; the dashboard shows it above
//! the list of runs.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use leasehold::RunStatus;
use serde::Serialize;

use super::App;
use super::error::{ApiError, ErrorBody};

/// This executor's load and admission.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ExecutorView {
    /// The executor's id.
    owner_id: String,
    /// The runs it runs now.
    live_runs: usize,
    /// How many it admits now (at most `max_live_runs`).
    admitted_limit: usize,
    /// The ceiling over it (`server.max_live_runs`).
    max_live_runs: usize,
    /// Its scheduling lag, when measured (ms).
    lag_ms: Option<u64>,
    /// The lag admission aims under, when it adapts (ms).
    lag_target_ms: Option<u64>,
    /// The lag past which it takes on no run, when set (ms).
    load_bound_ms: Option<u64>,
    /// The runs waiting `queued` in the store, over every executor.
    queued_runs: u64,
}

/// `GET /executor`.
#[utoipa::path(get, path = "/executor", tag = "server",
    responses(
        (status = 200, description = "This executor's load and admission", body = ExecutorView),
        (status = 500, description = "The store failed", body = ErrorBody),
    ))]
pub(super) async fn status(State(app): State<Arc<App>>) -> Result<Json<ExecutorView>, ApiError> {
    let queued = app
        .engine()
        .store()
        .count_runs(RunStatus::Queued)
        .await
        .map_err(ApiError::from)?;
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let admission = app.executor.admission();
    let bound = app.engine().config().load_bound;
    let load_bound = app
        .engine()
        .load()
        .filter(|_| !bound.is_zero())
        .map(|_| millis(bound));
    Ok(Json(ExecutorView {
        owner_id: app.engine().owner_id().to_owned(),
        live_runs: app.executor.live_runs(),
        admitted_limit: admission.limit(),
        max_live_runs: admission.ceiling(),
        lag_ms: app.engine().load().map(|gauge| millis(gauge.lag())),
        lag_target_ms: admission.target().map(millis),
        load_bound_ms: load_bound,
        queued_runs: queued,
    }))
}
