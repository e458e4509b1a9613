//! The PostgreSQL store's snapshots, their history and tool-call records
//! ([`SnapshotStore`]): each one fenced statement, a snapshot in its
//! stored form ([`history::stored`]: an entry with a base keeps only its
//! transcript's new messages), with the run its base names in `base_run`
//! when that is another run (`0011_snapshot_bases.sql`).

use leasehold_actors::{
    Fenced, Snapshot, SnapshotStore, SnapshotTable, StoreFuture, ToolCallRecord, history,
};

use super::rows::{to_i64, to_json};
use super::{OWNER, OWNER_MATCHED, PostgresStore};

impl SnapshotStore for PostgresStore {
    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        self.with(move |inner| async move {
            let doing = format!(
                "saving the snapshot of `{}` in run `{}`",
                snapshot.path, snapshot.run_id
            );
            let snapshot = history::stored(snapshot)?;
            let base_run = snapshot
                .base
                .as_ref()
                .map(|base| base.run_id.as_str())
                .filter(|run| *run != snapshot.run_id);
            let value = to_json(&snapshot, &doing)?;
            let seq = to_i64(snapshot.seq, &format_args!("the place of {doing}"))?;
            // The latest of its loop and its place in the history, from the
            // same owner row: both land, or neither.
            let statement = format!(
                "{OWNER}, written AS (INSERT INTO snapshots (run_id, path, snapshot) \
                 SELECT run_id, $3, $4 FROM owner \
                 ON CONFLICT (run_id, path) DO UPDATE SET snapshot = EXCLUDED.snapshot), \
                 kept AS (INSERT INTO snapshot_history (run_id, seq, path, snapshot, base_run) \
                 SELECT run_id, $5, $3, $4, $6 FROM owner \
                 ON CONFLICT (run_id, seq, path) DO UPDATE \
                 SET snapshot = EXCLUDED.snapshot, base_run = EXCLUDED.base_run) \
                 {OWNER_MATCHED}"
            );
            inner
                .fenced_write(
                    &snapshot.run_id,
                    fence,
                    &statement,
                    &[&snapshot.path, &value, &seq, &base_run],
                    &doing,
                )
                .await
        })
    }

    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move {
            let doing = format!("recording tool call `{}` of run `{run_id}`", record.key);
            let value = to_json(&record, &doing)?;
            let statement = format!(
                "{OWNER}, written AS (INSERT INTO tool_calls (run_id, key, record) \
                 SELECT run_id, $3, $4 FROM owner \
                 ON CONFLICT (run_id, key) DO UPDATE SET record = EXCLUDED.record) \
                 {OWNER_MATCHED}"
            );
            inner
                .fenced_write(&run_id, fence, &statement, &[&record.key, &value], &doing)
                .await
        })
    }

    fn load_snapshots(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>> {
        self.load_whole_snapshots(run_id, SnapshotTable::Latest)
    }

    fn load_snapshot_history(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>> {
        self.load_whole_snapshots(run_id, SnapshotTable::History)
    }

    /// The latest in path order; the history by the primary key of
    /// `snapshot_history`: the places in order, the paths of one place in
    /// byte order.
    fn load_stored_snapshots(
        &self,
        run_id: &str,
        table: SnapshotTable,
    ) -> StoreFuture<Vec<Snapshot>> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move {
            let (query, what) = match table {
                SnapshotTable::Latest => (
                    "SELECT snapshot FROM snapshots WHERE run_id = $1 ORDER BY path COLLATE \"C\"",
                    "snapshot",
                ),
                _ => (
                    "SELECT snapshot FROM snapshot_history WHERE run_id = $1 \
                     ORDER BY seq, path COLLATE \"C\"",
                    "history snapshot",
                ),
            };
            inner.load_json(query, &[&run_id], what, &run_id).await
        })
    }

    /// What the rows' `snapshot` values take as stored (compressed or
    /// not), latest and history.
    fn snapshot_bytes(&self, run_id: &str) -> StoreFuture<u64> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move {
            let doing = format!("measuring the snapshots of run `{run_id}`");
            let row = inner
                .client()
                .await?
                .query_one(
                    "SELECT (COALESCE((SELECT SUM(pg_column_size(snapshot)) FROM snapshots \
                     WHERE run_id = $1), 0) + COALESCE((SELECT SUM(pg_column_size(snapshot)) \
                     FROM snapshot_history WHERE run_id = $1), 0))::bigint",
                    &[&run_id],
                )
                .await
                .map_err(|e| super::failed(&doing, &e))?;
            let bytes: i64 = row.get(0);
            Ok(u64::try_from(bytes).unwrap_or(0))
        })
    }

    fn load_tool_calls(&self, run_id: &str) -> StoreFuture<Vec<ToolCallRecord>> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move {
            inner
                .load_json(
                    "SELECT record FROM tool_calls WHERE run_id = $1 ORDER BY key COLLATE \"C\"",
                    &[&run_id],
                    "tool call",
                    &run_id,
                )
                .await
        })
    }
}
