//! `GET /executor`: this executor's load and admission, as JSON — its lag,
//! its admitted limit and the ceiling over it, its live runs, and the runs
//! waiting `queued` in the store (counted over every executor sharing it).
//! Behind the guard like the rest of the API; the dashboard shows it above
//! the list of runs.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use leasehold::RunStatus;
use serde_json::{Value, json};

use super::App;
use super::error::ApiError;

/// `GET /executor`.
pub(super) async fn status(State(app): State<Arc<App>>) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(json!({
        "owner_id": app.engine().owner_id(),
        "live_runs": app.executor.live_runs(),
        "admitted_limit": admission.limit(),
        "max_live_runs": admission.ceiling(),
        "lag_ms": app.engine().load().map(|gauge| millis(gauge.lag())),
        "lag_target_ms": admission.target().map(millis),
        "load_bound_ms": load_bound,
        "queued_runs": queued,
    })))
}
