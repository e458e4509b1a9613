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
use super::error::ApiError;

/// One run's recording.
#[derive(Debug, Serialize)]
pub(super) struct RecordingBody {
    run_id: String,
    flow: serde_json::Value,
    status: RunStatus,
    snapshots: Vec<Snapshot>,
    calls: Vec<ToolCallRecord>,
    events: Vec<Event>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fork: Option<ForkBody>,
}

/// Where a fork started, and the loops' snapshots it started from.
#[derive(Debug, Serialize)]
struct ForkBody {
    origin: ForkOrigin,
    snapshots: Vec<Snapshot>,
}

/// `GET /runs/{id}/recording`.
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
            Some(ForkBody { origin, snapshots })
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
