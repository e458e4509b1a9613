//! What the API answers about runs: [`RunView`], a run whole
//! (`GET /runs/{id}`) or as a listing's summary (`GET /runs`), and
//! [`TraceView`], its verdict trace.

use leasehold::{
    Event, EventKind, PauseRecord, RunHandle, RunRecord, RunStatus, RunSummary, ToolCallRecord,
};
use serde::{Deserialize, Serialize};

use leasehold::trace::{TraceSummary, is_decision};

/// A run as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
    /// In a listing, the texts cut to their first characters (`task`,
    /// `answer`, `pause.reason`, …; see [`RunSummary`]): `GET /runs/{id}`
    /// has them whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truncated: Vec<String>,
    /// Events its full log counted instead of storing, by kind (the sum of
    /// its `events_dropped` events), in `GET /runs/{id}`: empty when none
    /// were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_dropped: Option<std::collections::BTreeMap<String, u64>>,
    /// What it spent, in `GET /runs/{id}`: tokens and money per model call
    /// attempt, loop, worker and for the run, the evaluator's calls apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<leasehold::UsageReport>,
    /// For a fork, in `GET /runs/{id}`: the run it was forked from, where,
    /// with what guidance and changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<leasehold::ForkOrigin>,
    /// The trace it belongs to, in `GET /runs/{id}`: the caller's when it
    /// was posted with a `traceparent`, else the one derived from its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// For a run nobody runs (orphaned, or stopped and let go), in
    /// `GET /runs/{id}`: the command that resumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_with: Option<String>,
    /// In `GET /runs/{id}` of a run this server runs or ran since it
    /// started: the store errors its writes met here, retried or not (a
    /// write given up pauses the run, its reason naming the error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_errors: Option<u64>,
}

impl RunView {
    /// The view of `record` at `now_ms`; a live `handle`'s state is
    /// fresher than the store's and wins. A run the store says is running
    /// but whose executor's lease has ended by `now_ms` — it was stopped by
    /// a signal and let go, or its process died — shows as the sweep will
    /// mark it, orphaned ([`fencing::orphan`](leasehold::fencing::orphan)),
    /// with the command that resumes it.
    pub fn new(record: RunRecord, handle: Option<&RunHandle>, now_ms: u64) -> Self {
        let record = match handle {
            None => leasehold::fencing::orphan(&record, now_ms).unwrap_or(record),
            Some(_) => record,
        };
        let text = |key: &str| {
            record
                .flow
                .get(key)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let trace_id = leasehold::run_trace_id(&record.run_id, record.trace_parent.as_ref());
        let resume_with = (record.status == RunStatus::Orphaned)
            .then(|| format!("leasehold runs resume {}", record.run_id));
        let mut view = Self {
            trace_id: Some(trace_id),
            resume_with,
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
            truncated: Vec::new(),
            events_dropped: None,
            usage: None,
            fork: record.fork,
            store_errors: None,
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

impl RunView {
    /// The view of a run in a listing: its `summary`, where a live
    /// `handle`'s state is fresher and wins, every text cut as the
    /// summary's are ([`RunSummary::clipped`]), so that a page's size is
    /// bounded whatever the runs hold.
    pub fn summary(summary: RunSummary, handle: Option<&RunHandle>) -> Self {
        let mut summary = summary;
        let mut live = false;
        if let Some(handle) = handle {
            let state = handle.state();
            if state.lost.is_none() {
                live = !state.status.is_terminal();
                summary.status = state.status;
                summary.answer = state.answer.or(summary.answer);
                summary.reason = state.reason.or(summary.reason);
                summary.pause = state.paused;
            }
        }
        let summary = summary.clipped();
        Self {
            run_id: summary.run_id,
            flow_name: summary.flow_name,
            task: summary.task,
            status: summary.status,
            reason: summary.reason,
            answer: summary.answer,
            pause: summary.pause,
            owner_id: summary.owner_id,
            fence: summary.fence,
            created_at_ms: summary.created_at_ms,
            updated_at_ms: summary.updated_at_ms,
            live,
            flow: None,
            tool_calls: None,
            truncated: summary.truncated.into_iter().map(str::to_owned).collect(),
            events_dropped: None,
            usage: None,
            fork: None,
            trace_id: None,
            resume_with: None,
            store_errors: None,
        }
    }
}

/// A run's verdict trace: every decision made about it, and who made it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TraceView {
    /// The run.
    pub run_id: String,
    /// When the run started (Unix ms): the time of its `run_started` (or a
    /// fork's `run_forked`) event, from which a log counts its entries'
    /// times as the live log counts them; `None` when its log holds no
    /// event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// Verdicts, budget decisions, interventions, restarts, pauses and
    /// resumptions, in order.
    pub entries: Vec<Event>,
    /// Counts of the entries.
    pub summary: TraceSummary,
}

impl TraceView {
    /// The trace of `events`, the run's log from its first event.
    pub fn new(run_id: String, events: Vec<Event>) -> Self {
        let summary = TraceSummary::of(&events);
        let started_at = events
            .iter()
            .find(|event| {
                matches!(
                    event.kind,
                    EventKind::RunStarted { .. } | EventKind::RunForked(_)
                )
            })
            .or(events.first())
            .map(|event| event.at);
        let entries = events
            .into_iter()
            .filter(|event| is_decision(&event.kind))
            .collect();
        Self {
            run_id,
            started_at,
            entries,
            summary,
        }
    }
}
