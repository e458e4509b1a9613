//! The sled store's snapshots, their history and tool-call records
//! ([`SnapshotStore`]): each written with the run's fence, under its lock,
//! in its stored form ([`history::stored`]): an entry with a base keeps
//! only its transcript's new messages. An entry whose base is another
//! run's (a fork's first) lists the fork under that run in
//! [`codec::SNAPSHOT_BASES`] first, so that the run is not purged while
//! the fork needs it.

use leasehold_actors::{
    Fenced, Snapshot, SnapshotStore, SnapshotTable, StoreError, StoreFuture, ToolCallRecord,
    history,
};
use sled::IVec;

use super::codec::{self, encode};
use super::{Inner, SledStore};

impl Inner {
    /// Keeps `snapshot` in its run's history and as the latest of its loop,
    /// if `fence` is the run's: the history first, so that after a crash
    /// the latest snapshot of a loop is always in the history.
    fn save_snapshot(
        &self,
        snapshot: Snapshot,
        fence: u64,
    ) -> Result<(Fenced<()>, bool), StoreError> {
        let snapshot = history::stored(snapshot)?;
        let doing = format_args!(
            "saving the snapshot of `{}` in run `{}`",
            snapshot.path, snapshot.run_id
        );
        let value = IVec::from(encode(&snapshot, &doing)?);
        let kept = codec::history_key(&snapshot.run_id, snapshot.seq, &snapshot.path)?;
        let latest = codec::run_key(&snapshot.run_id, snapshot.path.as_bytes())?;
        let mut entries = Vec::with_capacity(3);
        if let Some(base) = snapshot
            .base
            .as_ref()
            .filter(|base| base.run_id != snapshot.run_id)
        {
            let continued = codec::run_key(&base.run_id, snapshot.run_id.as_bytes())?;
            entries.push((&self.bases, continued, IVec::default()));
        }
        entries.push((&self.history, kept, value.clone()));
        entries.push((&self.snapshots, latest, value));
        self.fenced_put(&snapshot.run_id, fence, &entries, &doing)
    }

    /// A run's snapshots as kept, of `table`.
    fn load_stored(&self, run_id: &str, table: SnapshotTable) -> Result<Vec<Snapshot>, StoreError> {
        let prefix = codec::run_prefix(run_id)?;
        match table {
            SnapshotTable::Latest => {
                Inner::load_all(self.snapshots.scan_prefix(prefix), "snapshot", run_id)
            }
            // One prefix scan of the history tree: its keys put the
            // snapshots in the order of their places, then of their paths.
            _ => Inner::load_all(self.history.scan_prefix(prefix), "history snapshot", run_id),
        }
    }

    /// Whether a fork's history continues from `run_id`'s.
    pub(super) fn continued(&self, run_id: &str) -> Result<bool, StoreError> {
        let prefix = codec::run_prefix(run_id)?;
        match self.bases.scan_prefix(prefix).next() {
            None => Ok(false),
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => Err(super::failed(
                &format_args!("reading the forks of run `{run_id}`"),
                &e,
            )),
        }
    }

    /// Forgets that `fork`'s history continues from `parent`'s.
    pub(super) fn discontinue(&self, parent: &str, fork: &str) -> Result<(), StoreError> {
        let key = codec::run_key(parent, fork.as_bytes())?;
        self.bases.remove(key).map_err(|e| {
            super::failed(
                &format_args!("forgetting that fork `{fork}` continues run `{parent}`"),
                &e,
            )
        })?;
        Ok(())
    }
}

impl SnapshotStore for SledStore {
    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        let saved = self.inner.save_snapshot(snapshot, fence);
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
        self.load_whole_snapshots(run_id, SnapshotTable::Latest)
    }

    fn load_snapshot_history(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>> {
        self.load_whole_snapshots(run_id, SnapshotTable::History)
    }

    fn load_stored_snapshots(
        &self,
        run_id: &str,
        table: SnapshotTable,
    ) -> StoreFuture<Vec<Snapshot>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| inner.load_stored(&run_id, table))
    }

    /// The sizes of the run's values in the latest and history trees.
    fn snapshot_bytes(&self, run_id: &str) -> StoreFuture<u64> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let prefix = codec::run_prefix(&run_id)?;
            let doing = format_args!("measuring the snapshots of run `{run_id}`");
            let mut bytes = 0_u64;
            for tree in [&inner.snapshots, &inner.history] {
                for entry in tree.scan_prefix(&prefix) {
                    let (_, value) = entry.map_err(|e| super::failed(&doing, &e))?;
                    bytes = bytes.saturating_add(u64::try_from(value.len()).unwrap_or(u64::MAX));
                }
            }
            Ok(bytes)
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
