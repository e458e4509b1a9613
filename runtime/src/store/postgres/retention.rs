//! Deleting the PostgreSQL store's finished runs past their retention
//! ([`Retention::purge_finished`](leasehold_actors::Retention::purge_finished)):
//! one statement per batch, `DELETE … RETURNING` of the rows a `SELECT …
//! FOR UPDATE SKIP LOCKED` picked through the finished-runs indexes
//! (`0005_retention.sql`), their snapshots, snapshot history
//! (`0007_fork.sql`), tool calls, events and commands deleted with them by the foreign keys' `ON DELETE CASCADE`.
//!
//! A run whose history a fork's continues (`snapshot_history.base_run`,
//! `0011_snapshot_bases.sql`) is not due: it is purged by a pass after its
//! last such fork is.
//!
//! The condition is [`retention::expired`]'s, in SQL: a finished status
//! (the statuses a run never leaves, spelled as the partial indexes of
//! `0005_retention.sql` spell them, so the planner uses them),
//! ended at least the server's retention ago or its own retention (the
//! `retention_ms` its flow gave it when it was created) ago. A row another
//! transaction holds is skipped, not waited for. A finished run is never
//! written again by its executor (its fence is its last owner's, and every
//! fenced write of a run that is gone finds no run), so deleting one races
//! no live writer; executors sharing the store may purge at once, each
//! deleting rows the others skip.

use leasehold_actors::{PurgeReport, PurgeRule, Retention, StoreError, StoreFuture, retention};

use super::rows::to_i64;
use super::{Inner, PostgresStore, failed};

impl Inner {
    pub(super) async fn purge_finished(&self, rule: &PurgeRule) -> Result<PurgeReport, StoreError> {
        let doing = "deleting finished runs past their retention";
        let now = to_i64(rule.now_ms, &"the purge time")?;
        // No run ended before 0: -1 selects none by the server's retention.
        let ended_by = match rule
            .retention_ms
            .and_then(|kept| rule.now_ms.checked_sub(kept))
        {
            Some(at) => to_i64(at, &"the purge's cutoff")?,
            None => -1,
        };
        let limit = rule.limit.max(1);
        let max = to_i64(
            u64::try_from(limit).unwrap_or(u64::MAX),
            &"the purge's limit",
        )?;
        let rows = self
            .client()
            .await?
            .query(
                "WITH due AS (SELECT run_id FROM runs \
                 WHERE status IN ('completed', 'failed', 'cancelled') \
                 AND (updated_at_ms <= $1 \
                      OR (retention_ms IS NOT NULL AND updated_at_ms + retention_ms <= $2)) \
                 AND NOT EXISTS (SELECT 1 FROM snapshot_history continued \
                      WHERE continued.base_run = runs.run_id) \
                 ORDER BY updated_at_ms LIMIT $3 FOR UPDATE SKIP LOCKED), \
                 purged AS (DELETE FROM runs USING due WHERE runs.run_id = due.run_id \
                 RETURNING runs.run_id), \
                 notified AS (SELECT run_id, pg_notify('leasehold', \
                 json_build_object('change', 'run', 'run_id', run_id)::text) FROM purged) \
                 SELECT run_id FROM notified ORDER BY run_id COLLATE \"C\"",
                &[&ended_by, &now, &max],
            )
            .await
            .map_err(|e| failed(&doing, &e))?;
        let purged = rows.iter().map(|row| row.get(0)).collect();
        Ok(PurgeReport::of(purged, limit))
    }
}

/// The retention a run's flow gives it, in ms, for its `retention_ms`
/// column.
pub(super) fn retention_ms(flow: &serde_json::Value) -> Result<Option<i64>, StoreError> {
    retention::flow_retention_ms(flow)
        .map(|ms| to_i64(ms, &"a flow's retention"))
        .transpose()
}

impl Retention for PostgresStore {
    fn purge_finished(&self, rule: PurgeRule) -> StoreFuture<PurgeReport> {
        self.with(move |inner| async move { inner.purge_finished(&rule).await })
    }
}
