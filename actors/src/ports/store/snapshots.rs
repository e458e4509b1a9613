//! [`SnapshotStore`]: each loop's latest state, the run's history of
//! states, and its tool calls recorded before they are sent and when they
//! return (write-ahead), all written with the run's fence.
//!
//! The history is kept as [`history`](super::history) says: an entry with
//! a base keeps only the messages its transcript gained since, so a loop's
//! history grows with its steps, not their square, and a fork's first
//! entries name its parent's instead of copying them. What the store is
//! asked for ([`SnapshotStore::load_snapshots`],
//! [`SnapshotStore::load_snapshot_history`]) is whole states, rebuilt from
//! what it keeps ([`SnapshotStore::load_stored_snapshots`]).

use super::{Fenced, Snapshot, SnapshotTable, StoreFuture, ToolCallRecord};

/// Snapshots, their history and tool-call records.
pub trait SnapshotStore: Send + Sync + 'static {
    /// Keeps `snapshot` as the latest of its loop, and in the run's history
    /// ([`SnapshotStore::load_snapshot_history`]), if `fence` is the run's:
    /// in its stored form ([`history::stored`](super::history::stored)),
    /// only the messages after its base's when it has a base.
    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>>;

    /// Records a tool call (sent, done, unknown), if `fence` is the run's.
    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> StoreFuture<Fenced<()>>;

    /// The latest snapshot of every loop of a run, whole.
    fn load_snapshots(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>>;

    /// Every snapshot ever saved of a run, of every loop, in the order of
    /// their [`Snapshot::seq`], whole. Purged with the run — but not while
    /// a fork's history continues from it (see `docs/fork-and-replay.md`).
    fn load_snapshot_history(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>>;

    /// A run's snapshots as stored, of `table`: an entry with a
    /// [`Snapshot::base`] holds only its transcript's messages after its
    /// base's. What a fork reads of its parent, so that it holds no more
    /// than what each step added; rebuilt whole by
    /// [`history::Lineage`](super::history::Lineage).
    fn load_stored_snapshots(
        &self,
        run_id: &str,
        table: SnapshotTable,
    ) -> StoreFuture<Vec<Snapshot>>;

    /// A run's snapshots of `table`, whole, rebuilt from what
    /// [`Self::load_stored_snapshots`] reads of it and of the runs its
    /// entries' bases reach ([`history::load_whole`](super::history::load_whole)):
    /// what a store answers [`Self::load_snapshots`] and
    /// [`Self::load_snapshot_history`] with.
    fn load_whole_snapshots(&self, run_id: &str, table: SnapshotTable) -> StoreFuture<Vec<Snapshot>>
    where
        Self: Clone + Sized,
    {
        let store = self.clone();
        super::history::load_whole(run_id, table, move |run, table| {
            store.load_stored_snapshots(run, table)
        })
    }

    /// How many bytes the store keeps for a run's snapshots, latest and
    /// history, as encoded: what shows that a history grows with its
    /// steps.
    fn snapshot_bytes(&self, run_id: &str) -> StoreFuture<u64>;

    /// Every tool call recorded for a run.
    fn load_tool_calls(&self, run_id: &str) -> StoreFuture<Vec<ToolCallRecord>>;
}
