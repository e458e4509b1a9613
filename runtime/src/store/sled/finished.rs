//! The sled store's finished runs, in the order they come due, so that a
//! purge ([`Retention::purge_finished`]) reads only the runs it deletes,
//! never the runs it keeps.
//!
//! Two trees hold one entry per finished run, each keyed by a time
//! (`u64` big-endian) followed by the run id:
//!
//! * `runs_finished`: when the run ended. The runs past the server's
//!   retention are a prefix of it: the purge walks it from the start up to
//!   `now - retention`.
//! * `runs_finished_by_flow`: when the run's own retention runs out (its
//!   end plus its flow's `retention`), for runs whose flow says one: the
//!   runs due are the prefix up to `now`.
//!
//! The entries follow the run's record as the run indexes do
//! ([`RunIndexes`](super::run_index::RunIndexes)): added before the record
//! is written, removed after, under the run's lock, so that after a crash
//! the trees hold at least every finished run's entries. An entry left
//! over (its run gone, or changed since) is removed when the purge meets
//! it; the purge checks every run it deletes against
//! [`retention::expired`] under the run's lock.
//!
//! A database written before these trees gets them built when it is
//! opened, as the run indexes are.
//!
//! [`Retention::purge_finished`]: crate::Retention::purge_finished

use leasehold_actors::{PurgeRule, RunRecord, StoreError, retention};
use sled::Tree;

use super::codec::{self, decode};
use super::failed;

/// The tree of finished runs by when they ended.
pub(crate) const FINISHED: &str = "runs_finished";
/// The tree of finished runs whose flow has a retention, by when it runs
/// out.
pub(crate) const FINISHED_BY_FLOW: &str = "runs_finished_by_flow";
/// Key in `meta` present once the two trees hold every finished run.
const META_FINISHED_KEY: &[u8] = b"runs_finished_indexed";

/// The two trees.
pub(crate) struct FinishedRuns {
    by_end: Tree,
    by_flow: Tree,
}

/// A finished run's entries in the two trees.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct FinishedEntries {
    by_end: Vec<u8>,
    by_flow: Option<Vec<u8>>,
}

impl FinishedEntries {
    /// The entries of `record`: none unless it has finished.
    pub(crate) fn of(record: &RunRecord) -> Option<Self> {
        if !record.status.is_terminal() {
            return None;
        }
        let ended = record.updated_at_ms;
        let by_flow = retention::flow_retention_ms(&record.flow)
            .map(|kept| key(ended.saturating_add(kept), &record.run_id));
        Some(Self {
            by_end: key(ended, &record.run_id),
            by_flow,
        })
    }

    fn has(&self, key: &[u8]) -> bool {
        self.by_end == key || self.by_flow.as_deref() == Some(key)
    }
}

fn key(at_ms: u64, run_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + run_id.len());
    key.extend_from_slice(&at_ms.to_be_bytes());
    key.extend_from_slice(run_id.as_bytes());
    key
}

/// A run an entry names, and the entry.
pub(crate) struct Due {
    pub(crate) run_id: String,
    key: Vec<u8>,
    in_flow_tree: bool,
}

impl FinishedRuns {
    /// The trees, built from `runs` if `meta` says they never were.
    pub(crate) fn open(
        by_end: Tree,
        by_flow: Tree,
        runs: &Tree,
        meta: &Tree,
    ) -> Result<Self, StoreError> {
        let finished = Self { by_end, by_flow };
        let doing = "listing the finished runs";
        if !meta
            .contains_key(META_FINISHED_KEY)
            .map_err(|e| failed(&doing, &e))?
        {
            for entry in runs {
                let (key, bytes) = entry.map_err(|e| failed(&doing, &e))?;
                let what = format!("run `{}`", String::from_utf8_lossy(&key));
                let record: RunRecord = decode(&bytes, &what)?;
                finished.add(None, FinishedEntries::of(&record).as_ref())?;
            }
            // After every entry: a crash before it lists them again.
            meta.insert(META_FINISHED_KEY, &[1_u8])
                .map_err(|e| failed(&doing, &e))?;
        }
        Ok(finished)
    }

    /// Adds the entries `new` has and `old` lacks: before the record is
    /// written.
    pub(crate) fn add(
        &self,
        old: Option<&FinishedEntries>,
        new: Option<&FinishedEntries>,
    ) -> Result<(), StoreError> {
        let Some(new) = new else { return Ok(()) };
        let doing = "listing a finished run";
        if old.is_none_or(|old| !old.has(&new.by_end)) {
            self.by_end
                .insert(new.by_end.as_slice(), &[])
                .map_err(|e| failed(&doing, &e))?;
        }
        if let Some(by_flow) = &new.by_flow
            && old.is_none_or(|old| !old.has(by_flow))
        {
            self.by_flow
                .insert(by_flow.as_slice(), &[])
                .map_err(|e| failed(&doing, &e))?;
        }
        Ok(())
    }

    /// Removes the entries only `old` had: after the record was replaced
    /// (or deleted, with no `new`).
    pub(crate) fn remove(
        &self,
        old: Option<&FinishedEntries>,
        new: Option<&FinishedEntries>,
    ) -> Result<(), StoreError> {
        let Some(old) = old else { return Ok(()) };
        let doing = "unlisting a finished run";
        if new.is_none_or(|new| !new.has(&old.by_end)) {
            self.by_end
                .remove(old.by_end.as_slice())
                .map_err(|e| failed(&doing, &e))?;
        }
        if let Some(by_flow) = &old.by_flow
            && new.is_none_or(|new| !new.has(by_flow))
        {
            self.by_flow
                .remove(by_flow.as_slice())
                .map_err(|e| failed(&doing, &e))?;
        }
        Ok(())
    }

    /// Up to `limit` entries of each tree that are due under `rule`, the
    /// oldest first: ended at least the server's retention ago, or past
    /// their flow's retention. Answers them and whether a tree had more.
    pub(crate) fn due(
        &self,
        rule: &PurgeRule,
        limit: usize,
    ) -> Result<(Vec<Due>, bool), StoreError> {
        let mut due = Vec::new();
        let mut more = false;
        let ended_by = rule
            .retention_ms
            .and_then(|kept| rule.now_ms.checked_sub(kept));
        let walks = [
            (&self.by_end, ended_by, false),
            (&self.by_flow, Some(rule.now_ms), true),
        ];
        for (tree, until, in_flow_tree) in walks {
            let Some(until) = until else { continue };
            for (taken, entry) in tree.iter().keys().enumerate() {
                let key = entry.map_err(|e| failed(&"listing the finished runs due", &e))?;
                let at = key
                    .get(..8)
                    .map(|at| codec::decode_u64(at, &"a finished run's entry"))
                    .transpose()?;
                let run_id = key.get(8..).and_then(|id| std::str::from_utf8(id).ok());
                let (Some(at), Some(run_id)) = (at, run_id) else {
                    return Err(StoreError::corrupt(
                        "an entry of the finished runs is corrupt",
                    ));
                };
                if at > until {
                    break;
                }
                if taken == limit {
                    more = true;
                    break;
                }
                due.push(Due {
                    run_id: run_id.to_owned(),
                    key: key.to_vec(),
                    in_flow_tree,
                });
            }
        }
        Ok((due, more))
    }

    /// Whether no finished run is listed.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.by_end.is_empty() && self.by_flow.is_empty()
    }

    /// Removes `due`'s entry unless it is one of `current`'s (the entries
    /// of the run's record as it is now): an entry left over.
    pub(crate) fn drop_stale(
        &self,
        due: &Due,
        current: Option<&FinishedEntries>,
    ) -> Result<(), StoreError> {
        if current.is_some_and(|current| current.has(&due.key)) {
            return Ok(());
        }
        let tree = if due.in_flow_tree {
            &self.by_flow
        } else {
            &self.by_end
        };
        tree.remove(due.key.as_slice())
            .map_err(|e| failed(&"unlisting a finished run", &e))?;
        Ok(())
    }
}
