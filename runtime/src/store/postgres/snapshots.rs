//! The PostgreSQL store's snapshots, their history and tool-call records
//! ([`SnapshotStore`]): each one fenced statement.

use leasehold_actors::{Fenced, Snapshot, SnapshotStore, StoreFuture, ToolCallRecord};

use super::rows::{to_i64, to_json};
use super::{OWNER, OWNER_MATCHED, PostgresStore};

impl SnapshotStore for PostgresStore {
    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        self.with(move |inner| async move {
            let doing = format!(
                "saving the snapshot of `{}` in run `{}`",
                snapshot.path, snapshot.run_id
            );
            let value = to_json(&snapshot, &doing)?;
            let seq = to_i64(snapshot.seq, &format_args!("the place of {doing}"))?;
            // The latest of its loop and its place in the history, from the
            // same owner row: both land, or neither.
            let statement = format!(
                "{OWNER}, written AS (INSERT INTO snapshots (run_id, path, snapshot) \
                 SELECT run_id, $3, $4 FROM owner \
                 ON CONFLICT (run_id, path) DO UPDATE SET snapshot = EXCLUDED.snapshot), \
                 kept AS (INSERT INTO snapshot_history (run_id, seq, path, snapshot) \
                 SELECT run_id, $5, $3, $4 FROM owner \
                 ON CONFLICT (run_id, seq, path) DO UPDATE SET snapshot = EXCLUDED.snapshot) \
                 {OWNER_MATCHED}"
            );
            inner
                .fenced_write(
                    &snapshot.run_id,
                    fence,
                    &statement,
                    &[&snapshot.path, &value, &seq],
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
        let run_id = run_id.to_owned();
        self.with(move |inner| async move {
            inner
                .load_json(
                    "SELECT snapshot FROM snapshots WHERE run_id = $1 ORDER BY path COLLATE \"C\"",
                    &[&run_id],
                    "snapshot",
                    &run_id,
                )
                .await
        })
    }

    /// Read by the primary key of `snapshot_history`: the places in order,
    /// the paths of one place in byte order.
    fn load_snapshot_history(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move {
            inner
                .load_json(
                    "SELECT snapshot FROM snapshot_history WHERE run_id = $1 \
                     ORDER BY seq, path COLLATE \"C\"",
                    &[&run_id],
                    "history snapshot",
                    &run_id,
                )
                .await
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
