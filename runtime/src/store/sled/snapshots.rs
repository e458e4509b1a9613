//! The sled store's snapshots, their history and tool-call records
//! ([`SnapshotStore`]): each written with the run's fence, under its lock.

use leasehold_actors::{Fenced, Snapshot, SnapshotStore, StoreError, StoreFuture, ToolCallRecord};
use sled::IVec;

use super::codec::{self, encode};
use super::{Inner, SledStore};

impl Inner {
    /// Keeps `snapshot` in its run's history and as the latest of its loop,
    /// if `fence` is the run's: the history first, so that after a crash
    /// the latest snapshot of a loop is always in the history.
    fn save_snapshot(
        &self,
        snapshot: &Snapshot,
        fence: u64,
    ) -> Result<(Fenced<()>, bool), StoreError> {
        let doing = format_args!(
            "saving the snapshot of `{}` in run `{}`",
            snapshot.path, snapshot.run_id
        );
        let value = IVec::from(encode(snapshot, &doing)?);
        let kept = codec::history_key(&snapshot.run_id, snapshot.seq, &snapshot.path)?;
        let latest = codec::run_key(&snapshot.run_id, snapshot.path.as_bytes())?;
        let entries = [
            (&self.history, kept, value.clone()),
            (&self.snapshots, latest, value),
        ];
        self.fenced_put(&snapshot.run_id, fence, &entries, &doing)
    }
}

impl SnapshotStore for SledStore {
    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        let saved = self.inner.save_snapshot(&snapshot, fence);
        self.settle(saved)
    }

    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        let doing = format_args!("recording tool call `{}` of run `{run_id}`", record.key);
        let inner = &self.inner;
        let recorded = codec::run_key(run_id, record.key.as_bytes())
            .and_then(|key| Ok([(&inner.tool_calls, key, encode(&record, &doing)?.into())]))
            .and_then(|entry| inner.fenced_put(run_id, fence, &entry, &doing));
        self.settle(recorded)
    }

    fn load_snapshots(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let prefix = codec::run_prefix(&run_id)?;
            Inner::load_all(inner.snapshots.scan_prefix(prefix), "snapshot", &run_id)
        })
    }

    /// One prefix scan of the history tree: its keys put the snapshots in
    /// the order of their places, then of their paths.
    fn load_snapshot_history(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let prefix = codec::run_prefix(&run_id)?;
            Inner::load_all(
                inner.history.scan_prefix(prefix),
                "history snapshot",
                &run_id,
            )
        })
    }

    fn load_tool_calls(&self, run_id: &str) -> StoreFuture<Vec<ToolCallRecord>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let prefix = codec::run_prefix(&run_id)?;
            Inner::load_all(inner.tool_calls.scan_prefix(prefix), "tool call", &run_id)
        })
    }
}
