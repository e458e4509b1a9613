//! The PostgreSQL store's runs ([`RunStore`]): each change of a run's
//! record one transaction holding the run's row, orphans found and marked
//! by one statement, pages of runs read as [`listing`](super::listing)
//! filters them.

use leasehold_actors::{
    ClaimOutcome, Fenced, IdempotencyKey, KeyedCreation, RunPage, RunQuery, RunRecord, RunStatus,
    RunStore, RunUpdate, StoreChange, StoreError, StoreFuture, SummaryPage, fencing,
};

use super::rows::{RUN_COLUMNS, RunParams, get, status_name, to_i64, to_u64};
use super::{Inner, PostgresStore, failed, notice, runs_query};

/// Inserts `record` as a new run through `client` (a connection, or a
/// transaction it is part of), notifying its creation (and its queuing);
/// a conflict if it exists.
pub(super) async fn insert_run(
    client: &impl deadpool_postgres::GenericClient,
    record: &RunRecord,
) -> Result<(), StoreError> {
    let doing = format!("creating run `{}`", record.run_id);
    let params = RunParams::new(record)?;
    // A queued run is also news for every executor with room.
    let mut payloads = vec![notice(&StoreChange::Run {
        run_id: record.run_id.clone(),
    })?];
    if record.status == RunStatus::Queued {
        payloads.push(notice(&StoreChange::Queued)?);
    }
    let retention_ms = super::retention::retention_ms(&record.flow)?;
    let mut values = params.values().to_vec();
    values.push(&payloads);
    values.push(&retention_ms);
    let statement = client
        .prepare_cached(&format!(
            "WITH created AS (INSERT INTO runs ({RUN_COLUMNS}, retention_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $16) \
             ON CONFLICT (run_id) DO NOTHING RETURNING run_id), \
             notified AS (SELECT created.run_id, pg_notify('leasehold', payload) \
             FROM created, unnest($15::text[]) AS payload) \
             SELECT count(DISTINCT run_id) FROM notified"
        ))
        .await
        .map_err(|e| failed(&doing, &e))?;
    let created: i64 = client
        .query_one(&statement, &values)
        .await
        .map_err(|e| failed(&doing, &e))?
        .get(0);
    if created == 0 {
        return Err(StoreError::conflict(format!(
            "run `{}` already exists",
            record.run_id
        )));
    }
    Ok(())
}

impl Inner {
    async fn create_run(&self, record: RunRecord) -> Result<(), StoreError> {
        insert_run(&self.client().await?, &record).await
    }

    async fn reconcile_orphans(&self, now_ms: u64) -> Result<Vec<String>, StoreError> {
        let doing = "reconciling orphaned runs";
        let now = to_i64(now_ms, &"the reconciliation time")?;
        let running = status_name(RunStatus::Running)?;
        let orphaned = status_name(RunStatus::Orphaned)?;
        // The condition and the change are `fencing::orphan`'s, in one
        // statement: a run renewed or claimed meanwhile no longer matches.
        // A row another transaction holds is skipped, not waited for: its
        // holder is changing it, and one stuck holder must not stop the
        // sweep of every other run (the next sweep looks at it again).
        let rows = self
            .client()
            .await?
            .query(
                "WITH expired AS (SELECT run_id FROM runs \
                 WHERE status = $4 AND lease_expires_at_ms <= $1 FOR UPDATE SKIP LOCKED), \
                 orphaned AS (UPDATE runs SET status = $2, \
                 reason = CASE WHEN runs.reason = $5 THEN $6 ELSE $3 END, updated_at_ms = $1 \
                 FROM expired WHERE runs.run_id = expired.run_id RETURNING runs.run_id), \
                 notified AS (SELECT run_id, pg_notify('leasehold', \
                 json_build_object('change', 'run', 'run_id', run_id)::text) FROM orphaned) \
                 SELECT run_id FROM notified ORDER BY run_id COLLATE \"C\"",
                &[
                    &now,
                    &orphaned,
                    &fencing::ORPHANED,
                    &running,
                    &fencing::STOPPED_IN_PLACE,
                    &fencing::ORPHANED_AFTER_STOP,
                ],
            )
            .await
            .map_err(|e| failed(&doing, &e))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }
}

impl RunStore for PostgresStore {
    fn create_run(&self, record: RunRecord) -> StoreFuture<()> {
        self.with(move |inner| async move { inner.create_run(record).await })
    }

    fn create_run_keyed(
        &self,
        record: RunRecord,
        key: IdempotencyKey,
    ) -> StoreFuture<KeyedCreation> {
        self.with(move |inner| async move { inner.create_run_keyed(record, key).await })
    }

    fn claim_run(
        &self,
        run_id: &str,
        owner_id: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<ClaimOutcome> {
        let (run_id, owner_id) = (run_id.to_owned(), owner_id.to_owned());
        self.with(move |inner| async move {
            inner
                .change_run(&run_id, true, |record| {
                    Ok(match record {
                        None => (ClaimOutcome::NotFound, None),
                        Some(record) => match fencing::claim(&record, &owner_id, now_ms, ttl_ms) {
                            Ok(claimed) => (ClaimOutcome::Claimed(claimed.clone()), Some(claimed)),
                            Err(refused) => (refused, None),
                        },
                    })
                })
                .await
        })
    }

    fn renew_run(
        &self,
        run_id: &str,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<Fenced<()>> {
        // A heartbeat only moves the lease's expiry: nothing to announce.
        self.fenced_change(run_id, false, move |record| {
            fencing::renew(record, fence, now_ms, ttl_ms)
        })
    }

    fn update_run(&self, run_id: &str, fence: u64, update: RunUpdate) -> StoreFuture<Fenced<()>> {
        self.fenced_change(run_id, true, move |record| {
            fencing::update(record, fence, &update)
        })
    }

    fn reconcile_orphans(&self, now_ms: u64) -> StoreFuture<Vec<String>> {
        self.with(move |inner| async move { inner.reconcile_orphans(now_ms).await })
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn load_run(&self, run_id: &str) -> StoreFuture<Option<RunRecord>> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move {
            let doing = format!("reading run `{run_id}`");
            let mut runs = inner
                .load_runs(&runs_query("WHERE run_id = $1"), &[&run_id], &doing)
                .await?;
            Ok(runs.pop())
        })
    }

    fn list_runs(&self) -> StoreFuture<Vec<RunRecord>> {
        self.with(move |inner| async move {
            inner
                .load_runs(&runs_query("ORDER BY created_seq"), &[], &"listing runs")
                .await
        })
    }

    fn count_runs_by_status(&self) -> StoreFuture<Vec<(RunStatus, u64)>> {
        self.with(move |inner| async move {
            let doing = "counting runs by status";
            let rows = inner
                .client()
                .await?
                // The counts the triggers of `0010_run_counts.sql` keep:
                // at most 16 shards of each status, whatever is stored.
                .query(
                    "SELECT status, sum(n)::bigint FROM run_counts GROUP BY status",
                    &[],
                )
                .await
                .map_err(|e| failed(&doing, &e))?;
            let mut counts = Vec::with_capacity(RunStatus::ALL.len());
            for status in RunStatus::ALL {
                let name = status_name(status)?;
                let mut count = 0;
                for row in &rows {
                    let (of, n): (String, i64) = (get(row, 0)?, get(row, 1)?);
                    if of == name {
                        count = to_u64(n, &format_args!("the count of `{name}` runs"))?;
                    }
                }
                counts.push((status, count));
            }
            Ok(counts)
        })
    }

    fn count_runs(&self, status: RunStatus) -> StoreFuture<u64> {
        self.with(move |inner| async move { inner.count_runs(status).await })
    }

    fn list_run_summaries(&self, query: &RunQuery) -> StoreFuture<SummaryPage> {
        let query = query.clone();
        self.with(move |inner| async move { inner.list_run_summaries(&query).await })
    }

    fn list_runs_page(&self, query: &RunQuery) -> StoreFuture<RunPage> {
        let query = query.clone();
        self.with(move |inner| async move { inner.list_runs_page(&query).await })
    }
}
