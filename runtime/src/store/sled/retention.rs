//! Deleting the sled store's finished runs past their retention
//! ([`Retention::purge_finished`](leasehold_actors::Retention::purge_finished)).
//!
//! The purge walks the finished runs due ([`FinishedRuns::due`]), and for
//! each takes the run's lock, reads its record again and, if it is still
//! due ([`retention::expired`]), deletes what is kept under it — events,
//! snapshots of every loop (its workers' too) and its snapshot history,
//! tool-call records, waiting commands — then its record, then its index and retention entries. In
//! that order a crash part-way leaves the record and its entries, so the
//! next purge finishes the run; a record never outlives nothing but its
//! own leftovers.
//!
//! A run whose history a fork's continues ([`codec::SNAPSHOT_BASES`]) is
//! not deleted: it leaves the due runs when it comes due, and is listed
//! again when its last such fork is deleted, to be purged by a later pass
//! (`docs/fork-and-replay.md`).
//!
//! The creation order (`run_order`) is swept behind the purge a bounded
//! slice at a time from a cursor: an entry whose run is gone is removed,
//! except the last one, which the [manifest](super::manifest)
//! counts the runs ever created by — so a store emptied by its retention
//! opens as what it is, not as a damaged one.

use std::sync::{MutexGuard, PoisonError};

use leasehold_actors::{
    PurgeReport, PurgeRule, Retention, RunRecord, StoreChange, StoreError, StoreFuture, retention,
};
use sled::Tree;

use super::codec::{self, decode};
use super::finished::FinishedEntries;
use super::run_index::IndexEntries;
use super::{Inner, SledStore, failed, queue};

/// How many creation-order entries one purge looks at, per run it may
/// delete.
const ORDER_SWEEP_PER_RUN: usize = 4;

impl Inner {
    /// Deletes up to `rule.limit` finished runs past their retention;
    /// answers the report and whether anything was written.
    pub(super) fn purge_finished(
        &self,
        rule: &PurgeRule,
    ) -> Result<(PurgeReport, bool), StoreError> {
        let limit = rule.limit.max(1);
        let (due, more) = self.finished.due(rule, limit)?;
        let mut purged = Vec::new();
        let mut wrote = false;
        for entry in &due {
            let run_id = entry.run_id.as_str();
            let mut run = self.locks.lock(run_id);
            // Deleted below, or left as it is: either way read again.
            run.forget(run_id);
            match self.read_run(run_id)? {
                // A fork's history continues from it: it leaves the due
                // runs until its last such fork is deleted.
                Some((_, record))
                    if retention::expired(&record, rule) && self.continued(run_id)? =>
                {
                    self.finished
                        .remove(FinishedEntries::of(&record).as_ref(), None)?;
                }
                Some((_, record)) if retention::expired(&record, rule) => {
                    self.delete_run(&record)?;
                    purged.push(record.run_id);
                }
                record => {
                    let current = record.as_ref().and_then(|(_, r)| FinishedEntries::of(r));
                    self.finished.drop_stale(entry, current.as_ref())?;
                }
            }
            wrote = true;
        }
        wrote |= self.sweep_order(limit.saturating_mul(ORDER_SWEEP_PER_RUN))?;
        let report = PurgeReport {
            more: more || purged.len() >= limit,
            purged,
        };
        Ok((report, wrote))
    }

    /// Deletes everything kept of `record`'s run, the record last but for
    /// its entries. Called under the run's lock.
    fn delete_run(&self, record: &RunRecord) -> Result<(), StoreError> {
        let run_id = record.run_id.as_str();
        let doing = format!("deleting run `{run_id}`");
        let prefix = codec::run_prefix(run_id)?;
        if let Some(origin) = &record.fork {
            self.discontinued(&origin.parent, run_id)?;
        }
        for tree in [
            &self.events,
            &self.snapshots,
            &self.history,
            &self.tool_calls,
        ] {
            remove_prefix(tree, &prefix, &doing)?;
        }
        queue::remove_of(&self.commands, run_id)?;
        self.forget_key_of(run_id)?;
        let removed = self
            .runs
            .remove(run_id.as_bytes())
            .map_err(|e| failed(&doing, &e))?;
        if removed.is_some() {
            self.counted(Some(record.status), None);
        }
        self.indexes.forget(&IndexEntries::of(record)?)?;
        self.finished
            .remove(FinishedEntries::of(record).as_ref(), None)?;
        Ok(())
    }

    /// `fork` no longer continues `parent`'s history: once no fork does,
    /// a finished parent is listed again among the runs that come due.
    /// Before the fork's record goes, so that a crash part-way is finished
    /// by the fork's next purge.
    fn discontinued(&self, parent: &str, fork: &str) -> Result<(), StoreError> {
        self.discontinue(parent, fork)?;
        if self.continued(parent)? {
            return Ok(());
        }
        let _parent = self.locks.lock(parent);
        if let Some((_, record)) = self.read_run(parent)? {
            self.finished
                .add(None, FinishedEntries::of(&record).as_ref())?;
        }
        Ok(())
    }

    /// Removes, from the cursor on, the creation-order entries of runs
    /// that are gone, looking at `budget` entries at most; wraps to the
    /// start once past the end. Says whether it removed any.
    fn sweep_order(&self, budget: usize) -> Result<bool, StoreError> {
        let doing = "sweeping the run creation order";
        let last = self
            .run_order
            .last()
            .map_err(|e| failed(&doing, &e))?
            .map(|(key, _)| key);
        let mut cursor = self.order_cursor();
        let mut removed = false;
        let mut next = 0;
        for (seen, entry) in self.run_order.range(cursor.to_be_bytes()..).enumerate() {
            if seen == budget {
                *cursor = next;
                return Ok(removed);
            }
            let (key, value) = entry.map_err(|e| failed(&doing, &e))?;
            next = codec::decode_u64(&key, &"a key of the run creation order")?.saturating_add(1);
            // The last entry stays: the manifest counts by it.
            if last.as_ref() == Some(&key) {
                break;
            }
            let run_id: String = decode(&value, &"an entry of the run creation order")?;
            // Under the run's lock: a creation writes its order entry
            // before its record.
            let _run = self.locks.lock(&run_id);
            if !self
                .runs
                .contains_key(run_id.as_bytes())
                .map_err(|e| failed(&doing, &e))?
            {
                self.run_order
                    .remove(&key)
                    .map_err(|e| failed(&doing, &e))?;
                removed = true;
            }
        }
        *cursor = 0;
        Ok(removed)
    }

    fn order_cursor(&self) -> MutexGuard<'_, u64> {
        self.order_cursor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Removes every entry of `tree` under `prefix`.
fn remove_prefix(tree: &Tree, prefix: &[u8], doing: &str) -> Result<(), StoreError> {
    for key in tree.scan_prefix(prefix).keys() {
        let key = key.map_err(|e| failed(&doing, &e))?;
        tree.remove(key).map_err(|e| failed(&doing, &e))?;
    }
    Ok(())
}

impl Retention for SledStore {
    fn purge_finished(&self, rule: PurgeRule) -> StoreFuture<PurgeReport> {
        let store = self.clone();
        Box::pin(async move {
            let report = store
                .scan_and_settle(move |inner| {
                    let (report, wrote) = inner.purge_finished(&rule)?;
                    if !report.purged.is_empty() {
                        inner.outbox.remove_of(&report.purged)?;
                    }
                    Ok((report, wrote))
                })
                .await?;
            // A follower of a deleted run looks again and finds it gone.
            for run_id in &report.purged {
                store.inner.changes.publish(StoreChange::Run {
                    run_id: run_id.clone(),
                });
            }
            Ok(report)
        })
    }
}

#[cfg(test)]
mod tests {
    use leasehold_actors::{PurgeRule, Retention, RunRecord, RunStatus, RunStore};

    use super::SledStore;
    use crate::store::{Durability, SledConfig};

    fn finished(n: u32) -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "run_id": format!("run-{n:04}"), "flow": {"name": "f", "retention": "1s"},
            "status": "completed", "owner_id": null, "fence": 1, "lease_expires_at_ms": 0,
            "reason": null, "answer": null, "pause": null, "created_at_ms": n,
            "updated_at_ms": 1_000,
        }))
        .expect("a record")
    }

    #[tokio::test]
    async fn a_purge_leaves_no_entry_of_a_deleted_run_but_the_last_creation_order_entry_nor_its_key()
     {
        // A directory of its own: tests of this binary run in parallel,
        // and a sled directory can be open once at a time.
        let dir = tempfile::tempdir().expect("a directory");
        let store = SledStore::open(
            SledConfig::new(dir.path())
                .with_temporary(true)
                .with_durability(Durability::Exit),
        )
        .expect("a store");
        for n in 0..90 {
            store.create_run(finished(n)).await.expect("created");
        }
        // Ten created under idempotency keys, whose keys go with them.
        for n in 90..100 {
            let key = leasehold_actors::IdempotencyKey {
                key: format!("key-{n}"),
                fingerprint: "f".to_owned(),
                at_ms: u64::from(n),
                retention_ms: 86_400_000,
            };
            store
                .create_run_keyed(finished(n), key)
                .await
                .expect("created");
        }
        let inner = &store.inner;
        assert_eq!(inner.run_order.len(), 100);
        assert_eq!(inner.keys.len(), 10);
        let rule = PurgeRule {
            now_ms: 10_000,
            retention_ms: Some(5_000),
            limit: 16,
        };
        while store.purge_finished(rule).await.expect("purged").more {}
        // Swept a slice at a time, from a cursor: a few more purges with
        // nothing to delete finish the sweep.
        for _ in 0..4 {
            let report = store.purge_finished(rule).await.expect("purged");
            assert!(report.purged.is_empty());
        }
        assert!(inner.runs.is_empty());
        assert!(inner.keys.is_empty(), "a purged run takes its key with it");
        assert!(inner.keys_by_run.is_empty());
        assert_eq!(inner.run_order.len(), 1, "the manifest counts by the last");
        assert!(inner.finished.is_empty());
        for tree in [
            &inner.events,
            &inner.snapshots,
            &inner.history,
            &inner.tool_calls,
        ] {
            assert!(tree.is_empty());
        }
        assert_eq!(inner.count_runs(RunStatus::Completed), 0);
    }
}
