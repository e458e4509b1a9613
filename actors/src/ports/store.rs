//! The store port: runs, their fenced ownership, snapshots, tool-call
//! records and the event log.
//!
//! The port is made of focused parts, a trait and a file each: runs and
//! their fencing, orphans and listing ([`RunStore`]), the event log
//! ([`EventLog`]), snapshots, their history and tool-call records
//! ([`SnapshotStore`]), the queue and commands ([`QueueStore`]), the
//! outbox ([`Outbox`]), learned paces ([`PaceStore`]), API keys
//! ([`KeyStore`]), the change feed and
//! its flush ([`ChangeSource`]) and retention ([`Retention`]). [`Store`]
//! is their union: whatever implements every part is a store, and is
//! handed to the engine as `Arc<dyn Store>`. Every method answers a
//! [`StoreFuture`]; what fails is a [`StoreError`], of a
//! [`StoreErrorKind`]. A store that wraps another — metrics, fault
//! injection, encryption — is a [`LayeredStore`], which says what it
//! changes and leaves the rest to the store it wraps.
//!
//! Ownership of a run is a lease of its own, held by one executor (one
//! runtime process) at a time: `owner_id`, an expiry, and a **fencing
//! token** that goes up by one on every claim. Every write that changes a
//! run — its status, a snapshot, a tool-call record, an event — carries the
//! writer's fence, and the store refuses a write whose fence is not the
//! run's current one. A refusal is a value ([`Fenced::Stale`]), not an
//! error: the stale executor learns it lost the run and stops working on it.
//! The rules are pure functions in [`fencing`], so every store applies the
//! same ones.
//!
//! Runs are listed a page at a time ([`RunStore::list_runs_page`]), newest
//! first, with a cursor; which runs a [`RunQuery`] selects, in which order,
//! and how a page is cut are pure functions in [`listing`], so every store
//! answers a query with the same page.
//!
//! Finished runs are deleted once their retention has passed
//! ([`Retention::purge_finished`]); which ones is [`retention`]'s rule.
//!
//! A run's pauses and ends are kept as notices in an outbox, with the
//! change that made them, until they are delivered
//! ([`Outbox::take_notices`]); which changes make one is [`outbox`]'s rule.

use serde::{Deserialize, Serialize};

use super::BoxFuture;

mod api_keys;
mod changes;
mod counts;
mod error;
mod events;
pub mod history;
mod idempotency;
mod layered;
pub mod outbox;
mod paces;
mod queue;
pub mod retention;
mod runs;
mod snapshots;
mod summary;

pub use api_keys::KeyStore;
pub use changes::ChangeSource;
pub use counts::StatusCounts;
pub use error::{StoreError, StoreErrorKind};
pub use events::EventLog;
pub use history::{SnapshotBase, SnapshotTable};
pub use idempotency::{IdempotencyKey, KeptKey, KeyedCreation, fingerprint};
pub use layered::LayeredStore;
pub use outbox::{Delivery, Notice, NoticeTake, Outbox};
pub use paces::PaceStore;
pub use queue::QueueStore;
pub use retention::{PurgeReport, PurgeRule, Retention};
pub use runs::RunStore;
pub use snapshots::SnapshotStore;
pub use summary::{RunSummary, SUMMARY_CHARS, SummaryPage};

/// Where a run is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunStatus {
    /// Posted, waiting in the queue: no executor owns it yet. The first
    /// executor with room claims it ([`QueueStore::claim_queued`]) and starts it.
    Queued,
    /// Stepping.
    Running,
    /// Paused by an `ESCALATE` until a person resumes or cancels it.
    WaitingHuman,
    /// Paused on a tool call of unknown outcome until a person decides.
    ReconciliationRequired,
    /// Its executor's lease expired: no process is working on it. Another
    /// executor may claim it and resume it from its last snapshot.
    Orphaned,
    /// Ended with an answer.
    Completed,
    /// Ended with a failure.
    Failed,
    /// Ended by a person.
    Cancelled,
}

impl RunStatus {
    /// Every status, in the order of their life.
    pub const ALL: [Self; 8] = [
        Self::Queued,
        Self::Running,
        Self::WaitingHuman,
        Self::ReconciliationRequired,
        Self::Orphaned,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The status's name, as the API, the events and the stores spell it
    /// (`waiting_human`): its serialized form, spelled out here because
    /// stores keep it in keys and columns.
    pub fn name(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::WaitingHuman => "waiting_human",
            Self::ReconciliationRequired => "reconciliation_required",
            Self::Orphaned => "orphaned",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the run has ended for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// Whether the run waits for a person.
    pub fn is_paused(self) -> bool {
        matches!(self, Self::WaitingHuman | Self::ReconciliationRequired)
    }
}

/// A loop's state at a step boundary (or just after its model answered, with
/// the calls it asked for).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Snapshot {
    /// The run.
    pub run_id: String,
    /// The loop (`run`, `run/worker:research:1`).
    pub path: String,
    /// Steps started.
    pub step: u32,
    /// The run's status when it was taken.
    pub status: RunStatus,
    /// The loop's state: transcript, budget, pending nudges, pending calls.
    pub state: serde_json::Value,
    /// Its place in the run's history: the run's snapshots and first
    /// tool-call records counted in the order they were written, so that a
    /// fork finds every loop's state as it was at one instant. 0 for a
    /// snapshot written before they were counted.
    #[serde(default)]
    pub seq: u64,
    /// Where its transcript continues from, when the writer knows: the
    /// store then keeps only the messages after the base's
    /// ([`history`]). `None` in every snapshot a store answers: those are
    /// whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<history::SnapshotBase>,
}

/// Why a run waits for a person.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PauseRecord {
    /// The reason given (the verdict's, or the reconciliation's).
    pub reason: String,
    /// What was being done.
    pub subject: String,
    /// The loop that paused.
    pub path: String,
    /// For `reconciliation_required`: the call whose outcome is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<ToolCallRecord>,
}

/// Where a tool call is, as far as the store knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolCallState {
    /// Sent to the tool; no result recorded yet.
    Sent,
    /// Its result is recorded.
    Done,
    /// Sent, then cancelled or lost with its process before a result was
    /// recorded: whether it took effect is not known.
    Unknown,
}

/// One tool call of a loop, recorded when it is sent and when it returns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCallRecord {
    /// The idempotency key: run, loop path, step, call index.
    pub key: String,
    /// The loop.
    pub path: String,
    /// The step.
    pub step: u32,
    /// The call's index in its step.
    pub index: usize,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
    /// Whether calling it again is harmless, where known.
    pub idempotent: Option<bool>,
    /// Where it is.
    pub state: ToolCallState,
    /// Its result, once `Done`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Its place in the run's history when it was first recorded (sent):
    /// the same count as [`Snapshot::seq`]. 0 for a record written before
    /// it was counted.
    #[serde(default)]
    pub seq: u64,
    /// Whether its result was given by a person deciding on it
    /// (reconciliation), not by the tool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_person: bool,
    /// For a call a fork inherited: the run that made it. Its key is that
    /// run's, and the fork never sends it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_by: Option<String>,
}

/// A run as the store keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run.
    pub run_id: String,
    /// The flow it runs, as given.
    pub flow: serde_json::Value,
    /// Where it is.
    pub status: RunStatus,
    /// The executor that owns it, if any.
    pub owner_id: Option<String>,
    /// The fencing token: up by one on every claim.
    pub fence: u64,
    /// When the owner's lease expires (Unix ms).
    pub lease_expires_at_ms: u64,
    /// Why it failed, was cancelled or orphaned.
    pub reason: Option<String>,
    /// Its answer, once completed.
    pub answer: Option<String>,
    /// Why it waits for a person, while paused.
    pub pause: Option<PauseRecord>,
    /// When it was created (Unix ms).
    pub created_at_ms: u64,
    /// When it last changed (Unix ms).
    pub updated_at_ms: u64,
    /// For a fork: the run it was forked from, and where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkOrigin>,
    /// The caller's trace context, for a run started within a caller's
    /// trace (the `traceparent` of `POST /runs`): the run's trace is the
    /// caller's, its root span a child of the caller's span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<crate::trace_context::TraceParent>,
    /// The tenant it belongs to, the one that started it; `None` for the
    /// [default tenant](crate::tenancy::DEFAULT_TENANT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

impl RunRecord {
    /// What keyed limits read of the run: its tenant, its flow's name, and
    /// what its flow asks of the limits.
    pub fn labels(&self) -> crate::keyed_limits::RunLabels {
        crate::keyed_limits::RunLabels::from_parts(
            self.tenant.clone(),
            listing::flow_name(self).unwrap_or_default(),
            self.flow.get("keyed_limits"),
        )
    }
}

/// Where a fork comes from: its parent run and the step boundary it starts
/// at. The parent is left untouched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForkOrigin {
    /// The run it was forked from.
    pub parent: String,
    /// The loop whose step it starts at (`run`, `run/worker:research:1`).
    pub path: String,
    /// The step of that loop it starts at: the parent's state before that
    /// step began.
    pub step: u32,
    /// The parent's history up to which the fork inherits
    /// ([`Snapshot::seq`]).
    pub seq: u64,
    /// The guidance given to the fork's first step, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guidance: Option<String>,
    /// The changes made to the flow, as given (`leases.tool_call=30s`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
    /// What people answered in the parent before the fork point, which the
    /// fork inherits with its state: said, never replayed silently.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub person_answers: Vec<String>,
}

/// A change of a run's status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunUpdate {
    /// The new status.
    pub status: RunStatus,
    /// Why (failed, cancelled, orphaned).
    pub reason: Option<String>,
    /// The answer (completed).
    pub answer: Option<String>,
    /// Why it waits (paused).
    pub pause: Option<PauseRecord>,
    /// When (Unix ms).
    pub at_ms: u64,
}

/// The outcome of a fenced write: applied, or refused because the writer's
/// fence is not the run's.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fenced<T> {
    /// The write landed.
    Applied(T),
    /// The writer no longer owns the run; nothing was written.
    Stale {
        /// The run's current fence.
        fence: u64,
        /// Its current owner.
        owner_id: Option<String>,
    },
}

impl<T> Fenced<T> {
    /// Whether the write landed.
    pub fn is_applied(&self) -> bool {
        matches!(self, Self::Applied(_))
    }
}

/// What a claim found.
#[derive(Clone, Debug, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "claims are rare; the record is handed over by value"
)]
pub enum ClaimOutcome {
    /// The caller owns the run now, with the record's (new) fence.
    Claimed(RunRecord),
    /// Another executor holds a lease on it that has not expired.
    HeldBy {
        /// Who.
        owner_id: String,
        /// Until when (Unix ms).
        expires_at_ms: u64,
    },
    /// The run has ended; there is nothing to claim.
    Finished(RunStatus),
    /// No such run.
    NotFound,
}

/// A claim of queued runs by one executor ([`QueueStore::claim_queued`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueClaim {
    /// The claiming executor.
    pub owner_id: String,
    /// When it claims (Unix ms).
    pub now_ms: u64,
    /// How long the lease of each run it claims lasts (ms).
    pub ttl_ms: u64,
    /// At most this many runs.
    pub max: usize,
    /// The room of each keyed limit: a queued run whose key has none left
    /// is skipped for the next in fair order.
    pub room: crate::keyed_limits::ClaimRoom,
}

/// Which runs to list, one page at a time ([`RunStore::list_runs_page`]).
///
/// Runs are listed by run id, **descending**: newest first, since the run
/// ids the engine makes sort in creation order. Every filter that is set
/// must hold; an unset one selects every run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunQuery {
    /// The cursor: the `next` of the previous page, or `None` for the first
    /// page. The page holds only runs listed after it (ids strictly below
    /// it). Clients treat it as opaque; it is the id of the last run of the
    /// previous page, so it stays valid however the runs change meanwhile.
    pub after: Option<String>,
    /// At most this many runs in the page; `0` is taken as `1`.
    pub limit: usize,
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs of the flow of this name (the flow's `name` field).
    pub flow: Option<String>,
    /// Only runs created at or after this instant (Unix ms, inclusive).
    pub created_from_ms: Option<u64>,
    /// Only runs created before this instant (Unix ms, exclusive).
    pub created_before_ms: Option<u64>,
    /// Only runs of this tenant (its name; [`DEFAULT_TENANT`] for the
    /// runs of none). `None` lists every tenant's runs: what the executor
    /// itself reads, never what a tenant's request is answered.
    ///
    /// [`DEFAULT_TENANT`]: crate::tenancy::DEFAULT_TENANT
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

impl RunQuery {
    /// The first page of every run, at most `limit` of them.
    pub fn first(limit: usize) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }
}

/// One page of runs, and where the next one starts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunPage {
    /// The runs, in listing order (run id descending: newest first).
    pub runs: Vec<RunRecord>,
    /// The cursor of the next page (its [`RunQuery::after`]), or `None`
    /// when no run after this page matches the query.
    pub next: Option<String>,
}

/// What every method of the store port answers: a boxed future, so that
/// the port can be used as `dyn Store`, of the answer or a [`StoreError`].
pub type StoreFuture<T> = BoxFuture<'static, Result<T, StoreError>>;

/// Where runs are kept: every part of the port at once. Writes that
/// change a run carry the writer's fence.
///
/// `Store` is the union of the port's parts, and is implemented for every
/// type that implements them all (or a [`LayeredStore`], which implements
/// them all from its inner store): a store implements [`RunStore`],
/// [`EventLog`], [`SnapshotStore`], [`QueueStore`], [`Outbox`],
/// [`PaceStore`], [`KeyStore`], [`ChangeSource`] and [`Retention`], and
/// is a `Store`.
/// Their methods are called on an `Arc<dyn Store>` with the parts in
/// scope (`use leasehold::prelude::*`).
pub trait Store:
    RunStore
    + EventLog
    + SnapshotStore
    + QueueStore
    + Outbox
    + PaceStore
    + KeyStore
    + ChangeSource
    + Retention
{
}

impl<S> Store for S where
    S: RunStore
        + EventLog
        + SnapshotStore
        + QueueStore
        + Outbox
        + PaceStore
        + KeyStore
        + ChangeSource
        + Retention
{
}

/// Which runs a [`RunQuery`] selects and how a page of them is cut, as pure
/// functions every store calls.
pub mod listing {
    use super::{RunPage, RunQuery, RunRecord, RunSummary, SummaryPage};

    /// The name of the run's flow (its flow's `name` field), if it has one.
    pub fn flow_name(record: &RunRecord) -> Option<&str> {
        record.flow.get("name").and_then(serde_json::Value::as_str)
    }

    /// Whether a run of this id comes after the query's cursor (its id is
    /// strictly below it); every run does on the first page.
    pub fn after_cursor(query: &RunQuery, run_id: &str) -> bool {
        query.after.as_deref().is_none_or(|after| run_id < after)
    }

    /// Whether a run created at `created_at_ms` lies in the query's window:
    /// at or after `created_from_ms`, before `created_before_ms`.
    pub fn in_window(query: &RunQuery, created_at_ms: u64) -> bool {
        query
            .created_from_ms
            .is_none_or(|from| created_at_ms >= from)
            && query
                .created_before_ms
                .is_none_or(|before| created_at_ms < before)
    }

    /// Whether a run of `tenant` (its record's field) is of the query's
    /// tenant; every run is when the query names none.
    pub fn of_tenant(query: &RunQuery, tenant: Option<&str>) -> bool {
        query
            .tenant
            .as_deref()
            .is_none_or(|wanted| crate::tenancy::tenant_or_default(tenant) == wanted)
    }

    /// Whether `record` is one the query selects: past the cursor, of the
    /// tenant, in the status, of the flow and in the window asked for.
    pub fn matches(query: &RunQuery, record: &RunRecord) -> bool {
        after_cursor(query, &record.run_id)
            && of_tenant(query, record.tenant.as_deref())
            && query.status.is_none_or(|status| record.status == status)
            && query
                .flow
                .as_deref()
                .is_none_or(|flow| flow_name(record) == Some(flow))
            && in_window(query, record.created_at_ms)
    }

    /// The page of `query` cut from `candidates`, which must come in
    /// listing order (run id descending) and may hold runs the query does
    /// not select (they are skipped). Pulls at most `limit + 1` matching
    /// candidates: the one past the page only proves there is a next page.
    pub fn page<E>(
        query: &RunQuery,
        candidates: impl IntoIterator<Item = Result<RunRecord, E>>,
    ) -> Result<RunPage, E> {
        let (runs, next) = cut(query, candidates, |record| record, |r| &r.run_id)?;
        Ok(RunPage { runs, next })
    }

    /// The page of `query` cut from `candidates` as [`page`] cuts it, each
    /// run summarized ([`RunSummary::of`]) as it is taken, so that no more
    /// than one whole run is held at a time.
    pub fn summaries<E>(
        query: &RunQuery,
        candidates: impl IntoIterator<Item = Result<RunRecord, E>>,
    ) -> Result<SummaryPage, E> {
        let (runs, next) = cut(query, candidates, RunSummary::of, |s| &s.run_id)?;
        Ok(SummaryPage { runs, next })
    }

    /// The matching candidates of a page, each made a `T`, and the cursor
    /// of the next page.
    fn cut<T, E>(
        query: &RunQuery,
        candidates: impl IntoIterator<Item = Result<RunRecord, E>>,
        take: impl Fn(RunRecord) -> T,
        id: impl Fn(&T) -> &String,
    ) -> Result<(Vec<T>, Option<String>), E> {
        let limit = query.limit.max(1);
        let mut runs = Vec::new();
        for candidate in candidates {
            let record = candidate?;
            if !matches(query, &record) {
                continue;
            }
            if runs.len() == limit {
                let next = runs.last().map(|last| id(last).clone());
                return Ok((runs, next));
            }
            runs.push(take(record));
        }
        Ok((runs, None))
    }
}

/// Runs listed as a reader sees them: a running run nobody runs any more
/// listed as orphaned, as [`fencing::orphan`] shows it whole.
pub mod seen {
    use super::{RunQuery, RunStatus, RunSummary, Store, StoreError, SummaryPage, fencing};

    /// The page of `query` as a reader sees it at `now_ms`: each running
    /// run whose lease has ended — or, when `holder_gone`, whose holder is
    /// known to be gone ([`fencing::orphan_of_a_gone_holder`]) — listed as
    /// orphaned. A status asked for is the status seen, `next` set exactly
    /// when another such run follows: `orphaned` merges the runs stored so
    /// and the running runs seen so, in listing order; `running` leaves out
    /// those seen orphaned.
    ///
    /// # Errors
    /// What the store answers.
    pub async fn summaries(
        store: &dyn Store,
        query: &RunQuery,
        now_ms: u64,
        holder_gone: bool,
    ) -> Result<SummaryPage, StoreError> {
        let seen = |summary: RunSummary| {
            fencing::orphan_summary(&summary, now_ms, holder_gone).unwrap_or(summary)
        };
        // A run seen in another status than its stored one is a running
        // run seen orphaned: a page of any other status is the store's.
        let seen_apart =
            |status: &RunStatus| matches!(status, RunStatus::Running | RunStatus::Orphaned);
        let Some(wanted) = query.status.filter(seen_apart) else {
            let page = store.list_run_summaries(query).await?;
            return Ok(SummaryPage {
                runs: page.runs.into_iter().map(seen).collect(),
                next: page.next,
            });
        };
        // The statuses stored of the runs seen in `wanted`.
        let stored_as: &[RunStatus] = match wanted {
            RunStatus::Orphaned => &[RunStatus::Orphaned, RunStatus::Running],
            _ => &[wanted],
        };
        let limit = query.limit.max(1);
        let mut runs: Vec<RunSummary> = Vec::new();
        let mut after = query.after.clone();
        loop {
            let mut pages = Vec::with_capacity(stored_as.len());
            for status in stored_as {
                let page = RunQuery {
                    after: after.clone(),
                    status: Some(*status),
                    ..query.clone()
                };
                pages.push(store.list_run_summaries(&page).await?);
            }
            // Each listing is whole down to its last id where it goes on:
            // together, down to the highest of those; below, next round.
            let whole_to = pages.iter().filter_map(|page| page.next.clone()).max();
            let mut found: Vec<RunSummary> = pages
                .into_iter()
                .flat_map(|page| page.runs)
                .map(seen)
                .filter(|run| run.status == wanted)
                .filter(|run| whole_to.as_ref().is_none_or(|to| run.run_id >= *to))
                .collect();
            found.sort_by(|a, b| b.run_id.cmp(&a.run_id));
            for run in found {
                if runs.len() == limit {
                    let next = runs.last().map(|last| last.run_id.clone());
                    return Ok(SummaryPage { runs, next });
                }
                runs.push(run);
            }
            match whole_to {
                Some(to) => after = Some(to),
                None => return Ok(SummaryPage { runs, next: None }),
            }
        }
    }
}

/// Whether an owner id is one whose process is gone
/// ([`RunStore::orphan_runs_of_gone_holders`]).
pub type GoneHolder = std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The ownership rules every store applies, as pure functions on a
/// [`RunRecord`].
pub mod fencing {
    use super::{ClaimOutcome, Fenced, QueueClaim, RunRecord, RunStatus, RunSummary, RunUpdate};

    /// The message an orphaned run carries.
    pub const ORPHANED: &str = "run orphaned: executor lease expired";

    /// The reason a running run carries once its executor stopped it in
    /// place on a clean shutdown (SIGINT, SIGTERM, `Engine::shutdown`) and
    /// let it go: nobody runs it, and it is not lost.
    pub const STOPPED_IN_PLACE: &str =
        "stopped in place: its executor shut down cleanly; resume it to go on";

    /// The message of a run orphaned because its executor's process died,
    /// on a store one process opens at a time
    /// ([`RunStore::is_exclusive`](super::RunStore::is_exclusive)): seen at once,
    /// not when its lease ends.
    pub const ORPHANED_HOLDER_GONE: &str =
        "run orphaned: its executor's process died (this store is opened by one process at a time)";

    /// The message of a run orphaned after a clean stop: what happened is
    /// a shutdown, not an executor that died.
    pub const ORPHANED_AFTER_STOP: &str =
        "run orphaned: its executor shut down cleanly and let it go; resume it to go on";

    /// The record after a claim by `owner_id` at `now_ms`, or why not.
    #[allow(
        clippy::result_large_err,
        reason = "the refusal is an outcome, returned as is"
    )]
    pub fn claim(
        record: &RunRecord,
        owner_id: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<RunRecord, ClaimOutcome> {
        if record.status.is_terminal() {
            return Err(ClaimOutcome::Finished(record.status));
        }
        match &record.owner_id {
            Some(owner) if owner != owner_id && record.lease_expires_at_ms > now_ms => {
                return Err(ClaimOutcome::HeldBy {
                    owner_id: owner.clone(),
                    expires_at_ms: record.lease_expires_at_ms,
                });
            }
            _ => {}
        }
        let mut claimed = record.clone();
        claimed.owner_id = Some(owner_id.to_owned());
        claimed.fence = record.fence.saturating_add(1);
        claimed.lease_expires_at_ms = now_ms.saturating_add(ttl_ms);
        claimed.updated_at_ms = now_ms;
        if matches!(claimed.status, RunStatus::Orphaned | RunStatus::Queued)
            || claimed.reason.as_deref() == Some(STOPPED_IN_PLACE)
        {
            claimed.status = RunStatus::Running;
            claimed.reason = None;
        }
        Ok(claimed)
    }

    /// The record of a queued run once `claim.owner_id` claims it from the
    /// queue at `claim.now_ms`: `running`, owned, its fence raised, its
    /// lease one `claim.ttl_ms` long; `None` if the run is not queued (any
    /// more).
    pub fn claim_queued(record: &RunRecord, claim: &QueueClaim) -> Option<RunRecord> {
        if record.status != RunStatus::Queued {
            return None;
        }
        self::claim(record, &claim.owner_id, claim.now_ms, claim.ttl_ms).ok()
    }

    /// Whether a write with `fence` may land on `record`.
    pub fn check(record: &RunRecord, fence: u64) -> Fenced<()> {
        check_holder(record.fence, record.owner_id.as_deref(), fence)
    }

    /// [`check`] from the record's fence and owner alone: what a store
    /// that reads only those of the record checks.
    pub fn check_holder(current: u64, owner_id: Option<&str>, fence: u64) -> Fenced<()> {
        if current == fence {
            Fenced::Applied(())
        } else {
            Fenced::Stale {
                fence: current,
                owner_id: owner_id.map(str::to_owned),
            }
        }
    }

    /// The record after a heartbeat with `fence`.
    pub fn renew(
        record: &RunRecord,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<RunRecord, Fenced<()>> {
        match check(record, fence) {
            Fenced::Applied(()) => {
                let mut renewed = record.clone();
                renewed.lease_expires_at_ms = now_ms.saturating_add(ttl_ms);
                Ok(renewed)
            }
            stale => Err(stale),
        }
    }

    /// The record after `update` with `fence`. A terminal status releases
    /// the lease.
    pub fn update(
        record: &RunRecord,
        fence: u64,
        update: &RunUpdate,
    ) -> Result<RunRecord, Fenced<()>> {
        match check(record, fence) {
            Fenced::Applied(()) => {
                let mut updated = record.clone();
                updated.status = update.status;
                updated.reason.clone_from(&update.reason);
                updated.answer.clone_from(&update.answer);
                updated.pause.clone_from(&update.pause);
                updated.updated_at_ms = update.at_ms;
                if update.status.is_terminal() {
                    updated.lease_expires_at_ms = 0;
                }
                Ok(updated)
            }
            stale => Err(stale),
        }
    }

    /// The record of a running run whose holder is known to be gone (a
    /// store one process opens at a time, read by a process with no
    /// executor of its own): orphaned whatever its lease says — as stopped
    /// cleanly if it was, else as its executor's process died; `None` for a
    /// run that is not running.
    pub fn orphan_of_a_gone_holder(record: &RunRecord, now_ms: u64) -> Option<RunRecord> {
        orphaned_record(record, now_ms, true)
    }

    /// The record marked orphaned, if its executor's lease expired at
    /// `now_ms` while it was running.
    pub fn orphan(record: &RunRecord, now_ms: u64) -> Option<RunRecord> {
        orphaned_record(record, now_ms, false)
    }

    /// The summary of a run as [`orphan`] (or, when `holder_gone`,
    /// [`orphan_of_a_gone_holder`]) shows the run: a listing tells the
    /// same truth as the run shown whole.
    pub fn orphan_summary(
        summary: &RunSummary,
        now_ms: u64,
        holder_gone: bool,
    ) -> Option<RunSummary> {
        let why = why_orphaned(
            summary.status,
            summary.owner_id.as_deref(),
            summary.lease_expires_at_ms,
            now_ms,
            holder_gone,
        )?;
        let mut orphaned = summary.clone();
        orphaned.status = RunStatus::Orphaned;
        orphaned.reason = Some(reason_of(why, summary.reason.as_deref()).to_owned());
        orphaned.updated_at_ms = now_ms;
        Some(orphaned)
    }

    /// `record` orphaned at `now_ms`, if it is ([`why_orphaned`]).
    fn orphaned_record(record: &RunRecord, now_ms: u64, holder_gone: bool) -> Option<RunRecord> {
        let why = why_orphaned(
            record.status,
            record.owner_id.as_deref(),
            record.lease_expires_at_ms,
            now_ms,
            holder_gone,
        )?;
        let mut orphaned = record.clone();
        orphaned.status = RunStatus::Orphaned;
        orphaned.reason = Some(reason_of(why, record.reason.as_deref()).to_owned());
        orphaned.updated_at_ms = now_ms;
        Some(orphaned)
    }

    /// Why a run in `status`, held by `owner` until `lease_expires_at_ms`,
    /// is orphaned at `now_ms`: it is running and its holder is known to be
    /// gone (`holder_gone`), or its lease has ended; `None` if it is not.
    fn why_orphaned(
        status: RunStatus,
        owner: Option<&str>,
        lease_expires_at_ms: u64,
        now_ms: u64,
        holder_gone: bool,
    ) -> Option<&'static str> {
        if status != RunStatus::Running {
            None
        } else if holder_gone && owner.is_some() {
            Some(ORPHANED_HOLDER_GONE)
        } else {
            (lease_expires_at_ms <= now_ms).then_some(ORPHANED)
        }
    }

    /// The reason an orphaned run carries: that it was stopped cleanly if
    /// its `reason` says so, else `why`.
    fn reason_of(why: &'static str, reason: Option<&str>) -> &'static str {
        if reason == Some(STOPPED_IN_PLACE) {
            ORPHANED_AFTER_STOP
        } else {
            why
        }
    }
}

#[cfg(test)]
mod status_names {
    use super::RunStatus;

    #[test]
    fn each_status_is_named_as_it_is_serialized() {
        for status in RunStatus::ALL {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::Value::String(status.name().to_owned())
            );
        }
    }
}
