//! `GET /runs/{id}/recording`: what the store keeps of one run, as a replay
//! plays it — its flow (each tool server's secrets redacted, as everywhere
//! the API shows a flow), its status, each loop's last snapshot, its
//! tool-call records, its event log and, for a fork, where it started and
//! the snapshots it inherited. Read-only, read from the store whoever runs
//! the run; `leasehold runs replay --server URL` plays it where it is
//! asked, so a replay needs no access to a store a server holds. The shape
//! is the one `leasehold_lab::Recording` reads.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use leasehold::{Event, ForkOrigin, RunStatus, Snapshot, ToolCallRecord};
use serde::Serialize;

use super::App;
use super::api::run_id;
use super::error::{ApiError, ErrorBody};

/// One run's recording.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RecordingBody {
    /// The run.
    run_id: String,
    /// Its flow, each tool server's secrets redacted.
    flow: serde_json::Value,
    /// Its status.
    status: RunStatus,
    /// Each loop's last snapshot.
    snapshots: Vec<Snapshot>,
    /// Its tool-call records.
    calls: Vec<ToolCallRecord>,
    /// Its event log.
    events: Vec<Event>,
    /// For a fork: where it started, and what it inherited.
    #[serde(skip_serializing_if = "Option::is_none")]
    fork: Option<RecordedFork>,
}

/// Where a fork started, and the loops' snapshots it started from.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RecordedFork {
    /// The run it was forked from, and where.
    origin: ForkOrigin,
    /// The parent's snapshots it started from.
    snapshots: Vec<Snapshot>,
}

/// `GET /runs/{id}/recording`.
#[utoipa::path(get, path = "/runs/{id}/recording", tag = "runs", params(super::api::RunPath),
    responses(
        (status = 200, description = "What the store keeps of the run, as a replay plays it", body = RecordingBody),
        (status = 404, description = "No such run of the caller's tenant", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    ))]
pub(super) async fn recording(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<RecordingBody>, ApiError> {
    let run_id = run_id(path)?;
    let store = app.engine().store();
    let record = store
        .load_run(&run_id)
        .await?
        .ok_or_else(|| ApiError::unknown_run(&run_id))?;
    let fork = match record.fork {
        Some(origin) => {
            // What the fork copied of its parent before it ran.
            let snapshots = store
                .load_snapshot_history(&run_id)
                .await?
                .into_iter()
                .filter(|s| s.seq > 0 && s.seq <= origin.seq)
                .collect();
            Some(RecordedFork { origin, snapshots })
        }
        None => None,
    };
    Ok(Json(RecordingBody {
        flow: leasehold::secret::redact_flow(record.flow),
        status: record.status,
        snapshots: store.load_snapshots(&run_id).await?,
        calls: store.load_tool_calls(&run_id).await?,
        events: store.load_events(&run_id, 0).await?,
        fork,
        run_id,
    }))
}
