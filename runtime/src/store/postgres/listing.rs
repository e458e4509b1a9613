//! Pages of runs on PostgreSQL: the filter every page applies, whole
//! records ([`RunStore::list_runs_page`]) or summaries
//! ([`RunStore::list_run_summaries`]), and the count of one status.
//!
//! A summary is cut in the query: each text is read as its first
//! [`SUMMARY_CHARS`] characters plus one (`left(…)`, which counts
//! characters as Rust's `chars` does: code points), so a page of summaries
//! sends no more than its length times a summary's size however long the
//! runs' tasks and answers are; [`RunSummary::clipped`] then cuts the one
//! extra character and names what was cut, as every store does.
//!
//! [`RunStore::list_runs_page`]: leasehold_actors::RunStore::list_runs_page
//! [`RunStore::list_run_summaries`]: leasehold_actors::RunStore::list_run_summaries

use leasehold_actors::{
    PauseRecord, RunPage, RunQuery, RunStatus, RunSummary, SUMMARY_CHARS, StoreError, SummaryPage,
    listing,
};
use tokio_postgres::Row;

use super::rows::{RUN_COLUMNS, get, run_from_row, status_name, to_i64, to_u64};
use super::{Inner, failed};

/// The filter and order of a page: `$1` the cursor, `$2` the status, `$3`
/// the flow, `$4` and `$5` the window, `$6` how many rows to read, `$7`
/// the tenant (its runs' `tenant` is NULL for the default one).
const PAGE: &str = "WHERE ($1::text IS NULL OR run_id COLLATE \"C\" < $1) \
     AND ($2::text IS NULL OR status = $2) \
     AND ($3::text IS NULL OR flow ->> 'name' = $3) \
     AND ($4::bigint IS NULL OR created_at_ms >= $4) \
     AND ($5::bigint IS NULL OR created_at_ms < $5) \
     AND ($7::text IS NULL OR coalesce(tenant, 'default') = $7) \
     ORDER BY run_id COLLATE \"C\" DESC LIMIT $6";

/// The parameters of [`PAGE`] for a query.
struct PageParams {
    status: Option<String>,
    from: Option<i64>,
    before: Option<i64>,
    /// One past the page: it proves there is a next one.
    fetch: i64,
}

impl PageParams {
    fn of(query: &RunQuery) -> Result<Self, StoreError> {
        Ok(Self {
            status: query.status.map(status_name).transpose()?,
            from: query
                .created_from_ms
                .map(|ms| to_i64(ms, &"the start of the listing's window"))
                .transpose()?,
            before: query
                .created_before_ms
                .map(|ms| to_i64(ms, &"the end of the listing's window"))
                .transpose()?,
            fetch: to_i64(
                u64::try_from(query.limit.max(1))
                    .unwrap_or(u64::MAX)
                    .saturating_add(1),
                &"the listing's limit",
            )?,
        })
    }
}

/// The columns of a summary, in the order [`summary_from_row`] reads
/// them: each text one character longer than a summary keeps.
fn summary_columns() -> String {
    let keep = SUMMARY_CHARS.saturating_add(1);
    let text = |expr: &str| format!("left({expr}, {keep})");
    let flow_text = |key: &str| {
        format!(
            "CASE WHEN jsonb_typeof(flow -> '{key}') = 'string' \
             THEN left(flow ->> '{key}', {keep}) END"
        )
    };
    [
        "run_id".to_owned(),
        flow_text("name"),
        flow_text("task"),
        "status".to_owned(),
        "owner_id".to_owned(),
        "fence".to_owned(),
        "lease_expires_at_ms".to_owned(),
        text("reason"),
        text("answer"),
        "pause IS NOT NULL".to_owned(),
        text("pause ->> 'reason'"),
        text("pause ->> 'subject'"),
        text("pause ->> 'path'"),
        "created_at_ms".to_owned(),
        "updated_at_ms".to_owned(),
    ]
    .join(", ")
}

/// The summary in a row of [`summary_columns`].
fn summary_from_row(row: &Row) -> Result<RunSummary, StoreError> {
    let run_id: String = get(row, 0)?;
    let what = |field: &str| format!("the {field} of run `{run_id}`");
    let status: String = get(row, 3)?;
    let paused: bool = get(row, 9)?;
    let text = |index| -> Result<String, StoreError> {
        Ok(get::<Option<String>>(row, index)?.unwrap_or_default())
    };
    let pause = if paused {
        Some(PauseRecord {
            reason: text(10)?,
            subject: text(11)?,
            path: text(12)?,
            call: None,
        })
    } else {
        None
    };
    let summary = RunSummary {
        flow_name: text(1)?,
        task: text(2)?,
        status: serde_json::from_value::<RunStatus>(serde_json::Value::String(status))
            .map_err(|e| StoreError::corrupt(format!("{} is corrupt: {e}", what("status"))))?,
        owner_id: get(row, 4)?,
        fence: to_u64(get(row, 5)?, &what("fence"))?,
        lease_expires_at_ms: to_u64(get(row, 6)?, &what("lease expiry"))?,
        reason: get(row, 7)?,
        answer: get(row, 8)?,
        pause,
        created_at_ms: to_u64(get(row, 13)?, &what("creation time"))?,
        updated_at_ms: to_u64(get(row, 14)?, &what("update time"))?,
        truncated: Vec::new(),
        run_id,
    };
    Ok(summary.clipped())
}

impl Inner {
    /// The rows of one page of `query`, with `columns`.
    async fn page_rows(&self, query: &RunQuery, columns: &str) -> Result<Vec<Row>, StoreError> {
        let doing = "listing a page of runs";
        let params = PageParams::of(query)?;
        self.client()
            .await?
            .query(
                &format!("SELECT {columns} FROM runs {PAGE}"),
                &[
                    &query.after,
                    &params.status,
                    &query.flow,
                    &params.from,
                    &params.before,
                    &params.fetch,
                    &query.tenant,
                ],
            )
            .await
            .map_err(|e| failed(&doing, &e))
    }

    /// One page of whole runs.
    pub(super) async fn list_runs_page(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        let rows = self.page_rows(query, RUN_COLUMNS).await?;
        listing::page(query, rows.iter().map(run_from_row))
    }

    /// One page of summaries, cut in the query.
    pub(super) async fn list_run_summaries(
        &self,
        query: &RunQuery,
    ) -> Result<SummaryPage, StoreError> {
        let rows = self.page_rows(query, &summary_columns()).await?;
        // The rows are the page's already (the query applied the filter):
        // the cut only finds the cursor of the next page.
        let mut runs = rows
            .iter()
            .map(summary_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let limit = query.limit.max(1);
        let next = if runs.len() > limit {
            runs.truncate(limit);
            runs.last().map(|last| last.run_id.clone())
        } else {
            None
        };
        Ok(SummaryPage { runs, next })
    }

    /// How many runs are in `status`: the sum of its shards in
    /// `run_counts` (`0010_run_counts.sql`), read without a run.
    pub(super) async fn count_runs(&self, status: RunStatus) -> Result<u64, StoreError> {
        let doing = format!("counting the runs in `{}`", status.name());
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT COALESCE(sum(n), 0)::bigint FROM run_counts WHERE status = $1")
            .await
            .map_err(|e| failed(&doing, &e))?;
        let row = client
            .query_one(&statement, &[&status_name(status)?])
            .await
            .map_err(|e| failed(&doing, &e))?;
        to_u64(get(&row, 0)?, &doing)
    }
}
