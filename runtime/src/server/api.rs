//! The API's handlers: runs, their trace, and a person's controls.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::IntoResponse;
use leasehold_actors::agent::ReconcileDecision;
use leasehold_actors::event::Event;
use leasehold_actors::flow::Flow;
use leasehold_actors::ports::{PauseRecord, RunRecord, RunStatus, ToolCallRecord};
use leasehold_actors::run::RunHandle;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::App;
use super::error::ApiError;
use crate::flow_file;
use crate::trace::{TraceSummary, is_decision};

/// A run as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    /// The run.
    pub run_id: String,
    /// Its flow's name.
    pub flow_name: String,
    /// Its task.
    pub task: String,
    /// Where it is.
    pub status: RunStatus,
    /// Why it failed, was cancelled or orphaned.
    pub reason: Option<String>,
    /// Its answer, once completed.
    pub answer: Option<String>,
    /// Why it waits for a person, while paused.
    pub pause: Option<PauseRecord>,
    /// The executor that owns it.
    pub owner_id: Option<String>,
    /// Its fencing token.
    pub fence: u64,
    /// When it was created (Unix ms).
    pub created_at_ms: u64,
    /// When it last changed (Unix ms).
    pub updated_at_ms: u64,
    /// Whether its loops run in this server's process.
    pub live: bool,
    /// The flow, in `GET /runs/{id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<serde_json::Value>,
    /// Its tool calls as recorded, in `GET /runs/{id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallRecord>>,
}

impl RunView {
    /// The view of `record`; a live `handle`'s state is fresher than the
    /// store's and wins.
    pub fn new(record: RunRecord, handle: Option<&RunHandle>) -> Self {
        let text = |key: &str| {
            record
                .flow
                .get(key)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let mut view = Self {
            flow_name: text("name"),
            task: text("task"),
            run_id: record.run_id,
            status: record.status,
            reason: record.reason,
            answer: record.answer,
            pause: record.pause,
            owner_id: record.owner_id,
            fence: record.fence,
            created_at_ms: record.created_at_ms,
            updated_at_ms: record.updated_at_ms,
            live: false,
            flow: None,
            tool_calls: None,
        };
        if let Some(handle) = handle {
            let state = handle.state();
            if state.lost.is_none() {
                view.live = !state.status.is_terminal();
                view.status = state.status;
                view.answer = state.answer.or(view.answer);
                view.reason = state.reason.or(view.reason);
                view.pause = state.paused;
            }
        }
        view
    }
}

/// A run's verdict trace: every decision made about it, and who made it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceView {
    /// The run.
    pub run_id: String,
    /// Verdicts, budget decisions, interventions, restarts, pauses and
    /// resumptions, in order.
    pub entries: Vec<Event>,
    /// Counts of the entries.
    pub summary: TraceSummary,
}

impl TraceView {
    /// The trace of `events`.
    pub fn new(run_id: String, events: Vec<Event>) -> Self {
        let summary = TraceSummary::of(&events);
        let entries = events
            .into_iter()
            .filter(|event| is_decision(&event.kind))
            .collect();
        Self {
            run_id,
            entries,
            summary,
        }
    }
}

/// `GET /health`.
pub(super) async fn health(State(app): State<Arc<App>>) -> impl IntoResponse {
    let live = app.lock_runs().len();
    Json(serde_json::json!({
        "status": "ok",
        "owner_id": app.engine.owner_id(),
        "live_runs": live,
    }))
}

/// `POST /runs`: a flow as JSON or TOML; answers at once with the run id.
pub(super) async fn create_run(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let bytes = read_body(body, app.options.max_body).await?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| ApiError::bad_request("the flow is not UTF-8 text"))?;
    let flow = parse_flow(&headers, text)?;
    // Started in a task of its own: a client that goes away mid-request
    // must not cancel a run half-recorded.
    let engine = Arc::clone(&app.engine);
    let started = tokio::spawn(async move { engine.start(flow).await })
        .await
        .map_err(|e| ApiError::internal(format!("starting the run panicked: {e}")))??;
    let run_id = started.run_id().to_owned();
    app.adopt(started);
    tracing::info!(%run_id, "run started over the API");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/runs/{run_id}"))],
        Json(serde_json::json!({"run_id": run_id, "status": RunStatus::Running})),
    ))
}

fn parse_flow(headers: &HeaderMap, text: &str) -> Result<Flow, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let toml = content_type.contains("toml")
        || (!content_type.contains("json") && !text.trim_start().starts_with('{'));
    let parsed = if toml {
        flow_file::parse_toml(text)
    } else {
        flow_file::parse_json(text)
    };
    parsed.map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_flow",
            format!(
                "the flow ({}) was refused: {e}",
                if toml { "TOML" } else { "JSON" }
            ),
        )
    })
}

/// The query of `GET /runs`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListQuery {
    /// Only runs in this status.
    status: Option<RunStatus>,
    /// At most this many (the newest).
    limit: Option<usize>,
}

/// `GET /runs[?status=S][&limit=N]`: the runs, newest first.
pub(super) async fn list_runs(
    State(app): State<Arc<App>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query.map_err(|rejection| {
        ApiError::bad_request(format!(
            "the query is not what this route takes (`status` is a run status such as \
             waiting_human, `limit` a whole number): {}",
            rejection.body_text()
        ))
    })?;
    let mut records = app.engine.store().list_runs().await?;
    records.reverse();
    let runs: Vec<RunView> = records
        .into_iter()
        .map(|record| {
            let handle = app.handle(&record.run_id);
            RunView::new(record, handle.as_ref())
        })
        .filter(|view| query.status.is_none_or(|status| view.status == status))
        .take(query.limit.unwrap_or(usize::MAX))
        .collect();
    Ok(Json(serde_json::json!({ "runs": runs })))
}

/// `GET /runs/{id}`: a run with its flow and its tool calls.
pub(super) async fn show_run(
    State(app): State<Arc<App>>,
    Path(run_id): Path<String>,
) -> Result<Json<RunView>, ApiError> {
    let store = app.engine.store();
    let record = store
        .load_run(&run_id)
        .await?
        .ok_or_else(|| ApiError::unknown_run(&run_id))?;
    let flow = record.flow.clone();
    let mut view = RunView::new(record, app.handle(&run_id).as_ref());
    view.flow = Some(flow);
    view.tool_calls = Some(store.load_tool_calls(&run_id).await?);
    Ok(Json(view))
}

/// `GET /runs/{id}/trace`.
pub(super) async fn trace(
    State(app): State<Arc<App>>,
    Path(run_id): Path<String>,
) -> Result<Json<TraceView>, ApiError> {
    let store = app.engine.store();
    if store.load_run(&run_id).await?.is_none() {
        return Err(ApiError::unknown_run(&run_id));
    }
    let events = store.load_events(&run_id, 0).await?;
    Ok(Json(TraceView::new(run_id, events)))
}

/// The body of `POST /runs/{id}/resume`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    guidance: Option<String>,
}

/// The body of `POST /runs/{id}/cancel`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    reason: Option<String>,
}

/// The body of `POST /runs/{id}/reconcile`.
#[derive(Debug, Deserialize)]
struct ReconcileBody {
    key: String,
    #[serde(flatten)]
    decision: ReconcileDecision,
}

/// `POST /runs/{id}/resume`: answers a paused run with guidance; a run
/// nobody runs (orphaned, or paused by an executor that died) is claimed
/// first and resumed from its snapshots.
pub(super) async fn resume(
    State(app): State<Arc<App>>,
    Path(run_id): Path<String>,
    body: Body,
) -> Result<Json<serde_json::Value>, ApiError> {
    let ResumeBody { guidance } = read_json(body, app.options.max_body).await?;
    let guidance = guidance.filter(|g| !g.trim().is_empty());
    let (handle, was) = match app.handle(&run_id) {
        Some(handle) => {
            let status = handle.state().status;
            (handle, status)
        }
        None => {
            let record = app
                .engine
                .store()
                .load_run(&run_id)
                .await?
                .ok_or_else(|| ApiError::unknown_run(&run_id))?;
            let engine = Arc::clone(&app.engine);
            let id = run_id.clone();
            let handle = tokio::spawn(async move { engine.resume(&id).await })
                .await
                .map_err(|e| ApiError::internal(format!("resuming the run panicked: {e}")))??;
            app.adopt(handle.clone());
            if !record.status.is_paused() {
                // An orphan: claiming and resuming it was the whole request.
                return Ok(Json(serde_json::json!({
                    "run_id": run_id,
                    "status": handle.state().status,
                    "claimed": true,
                })));
            }
            (handle, record.status)
        }
    };
    if was == RunStatus::ReconciliationRequired {
        return Err(ApiError::conflict(format!(
            "run {run_id} waits for a decision on a tool call of unknown outcome: POST \
             /runs/{run_id}/reconcile with its key and a decision (mark_done, retry or cancel)"
        )));
    }
    handle.resume(guidance).await?;
    Ok(Json(
        serde_json::json!({"run_id": run_id, "status": RunStatus::Running}),
    ))
}

/// `POST /runs/{id}/cancel`.
pub(super) async fn cancel(
    State(app): State<Arc<App>>,
    Path(run_id): Path<String>,
    body: Body,
) -> Result<Json<serde_json::Value>, ApiError> {
    let CancelBody { reason } = read_json(body, app.options.max_body).await?;
    let reason = reason
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "cancelled over the API".to_owned());
    match app.handle(&run_id) {
        Some(handle) => handle.cancel(reason).await?,
        None => app.engine.cancel_stored(&run_id, &reason).await?,
    }
    Ok(Json(
        serde_json::json!({"run_id": run_id, "status": RunStatus::Cancelled}),
    ))
}

/// `POST /runs/{id}/reconcile`: `{"key", "decision": "mark_done" |
/// "retry" | "cancel", "result"}` for a run in `reconciliation_required`.
pub(super) async fn reconcile(
    State(app): State<Arc<App>>,
    Path(run_id): Path<String>,
    body: Body,
) -> Result<Json<serde_json::Value>, ApiError> {
    let bytes = read_body(body, app.options.max_body).await?;
    let ReconcileBody { key, decision } = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not a reconciliation: {e}")))?;
    let handle = match app.handle(&run_id) {
        Some(handle) => handle,
        None => {
            if app.engine.store().load_run(&run_id).await?.is_none() {
                return Err(ApiError::unknown_run(&run_id));
            }
            let handle = app.engine.resume(&run_id).await?;
            app.adopt(handle.clone());
            handle
        }
    };
    handle.reconcile(key, decision).await?;
    Ok(Json(
        serde_json::json!({"run_id": run_id, "status": handle.state().status}),
    ))
}

/// A known path with a method it does not take: a JSON 405.
pub(super) async fn wrong_method(method: axum::http::Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not take {method}", uri.path()),
    )
}

/// Anything else: a JSON 404.
pub(super) async fn no_route(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!("nothing is served at {}", uri.path()),
    )
}

/// The whole body, refused past `limit` bytes.
async fn read_body(body: Body, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the body is larger than {limit} bytes, or was cut off"),
        )
    })
}

/// The body as JSON of `T`; an empty body is `T::default()`.
async fn read_json<T: DeserializeOwned + Default>(body: Body, limit: usize) -> Result<T, ApiError> {
    let bytes = read_body(body, limit).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not the JSON expected: {e}")))
}
