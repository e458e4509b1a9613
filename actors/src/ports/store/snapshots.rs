//! [`SnapshotStore`]: each loop's latest state, the run's history of
//! states, and its tool calls recorded before they are sent and when they
//! return (write-ahead), all written with the run's fence.

use super::{Fenced, Snapshot, StoreFuture, ToolCallRecord};

/// Snapshots, their history and tool-call records.
pub trait SnapshotStore: Send + Sync + 'static {
    /// Keeps `snapshot` as the latest of its loop, and in the run's history
    /// ([`SnapshotStore::load_snapshot_history`]), if `fence` is the run's.
    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>>;

    /// Records a tool call (sent, done, unknown), if `fence` is the run's.
    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> StoreFuture<Fenced<()>>;

    /// The latest snapshot of every loop of a run.
    fn load_snapshots(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>>;

    /// Every snapshot ever saved of a run, of every loop, in the order of
    /// their [`Snapshot::seq`]: what a fork starts from. Purged with the
    /// run.
    fn load_snapshot_history(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>>;

    /// Every tool call recorded for a run.
    fn load_tool_calls(&self, run_id: &str) -> StoreFuture<Vec<ToolCallRecord>>;
}
