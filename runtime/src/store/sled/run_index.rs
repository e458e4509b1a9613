//! [`RunIndexes`]: the sled store's secondary indexes of runs, by status
//! and by flow name, so that a filtered page of runs reads only the runs
//! it shows.
//!
//! Each entry's key is the status's (or the flow's) name, length-prefixed,
//! then the run id; its value is the run's creation time, so that a time
//! window is checked without reading the run, then its tenant, so that
//! the queue is claimed in fair turns without reading a run. A listing walks one index
//! down from the cursor and reads a run's record only once its entry
//! passes every filter the indexes can answer.
//!
//! The indexes are kept without sled transactions (see the store's
//! module): every change of a run's record, under the run's lock, first
//! adds the entries the new record has, then swaps the record, then
//! removes the entries only the old one had. sled recovers a prefix of its
//! log after a crash, so an index always holds *at least* the entries of
//! every run's current record; an entry left over by a crash points to a
//! record that no longer matches, and the listing, which checks every
//! record it reads against the query ([`listing::matches`]), skips it.

use std::ops::Bound;

use std::collections::HashMap;

use leasehold_actors::{RunQuery, RunRecord, RunStatus, StatusCounts, StoreError, listing};
use sled::Tree;

use super::codec::{self, decode};
use super::failed;

/// The two index trees.
pub(crate) struct RunIndexes {
    by_status: Tree,
    by_flow: Tree,
}

/// A run record's entries in the indexes.
#[derive(PartialEq, Eq)]
pub(crate) struct IndexEntries {
    status: Vec<u8>,
    flow: Option<Vec<u8>>,
    /// The entries' value: the creation time (8 bytes, big-endian), then
    /// the run's tenant, if it has one, so that the queue is claimed in
    /// fair turns across tenants without reading a record.
    value: Vec<u8>,
}

impl IndexEntries {
    /// The entries of `record`.
    pub(crate) fn of(record: &RunRecord) -> Result<Self, StoreError> {
        Ok(Self {
            status: codec::index_key(record.status.name(), &record.run_id)?,
            flow: listing::flow_name(record)
                .map(|name| codec::index_key(name, &record.run_id))
                .transpose()?,
            value: {
                let mut value = record.created_at_ms.to_be_bytes().to_vec();
                value.extend_from_slice(record.tenant.as_deref().unwrap_or_default().as_bytes());
                value
            },
        })
    }
}

/// The run ids an index gives, in listing order.
pub(crate) type Candidates<'a> = Box<dyn Iterator<Item = Result<String, StoreError>> + 'a>;

impl RunIndexes {
    /// The indexes in `by_status` and `by_flow`, built from `runs` if
    /// `meta` says they were never built (a database written before them).
    pub(crate) fn open(
        by_status: Tree,
        by_flow: Tree,
        runs: &Tree,
        meta: &Tree,
    ) -> Result<Self, StoreError> {
        let indexes = Self { by_status, by_flow };
        let doing = "building the run indexes";
        if !meta
            .contains_key(codec::META_INDEXED_KEY)
            .map_err(|e| failed(&doing, &e))?
        {
            for entry in runs {
                let (key, bytes) = entry.map_err(|e| failed(&doing, &e))?;
                let what = format!("run `{}`", String::from_utf8_lossy(&key));
                let record: RunRecord = decode(&bytes, &what)?;
                indexes.add(None, &IndexEntries::of(&record)?)?;
            }
            // After every entry: a crash before it builds them again.
            meta.insert(codec::META_INDEXED_KEY, &[1_u8])
                .map_err(|e| failed(&doing, &e))?;
        }
        Ok(indexes)
    }

    /// Adds the entries `new` has and `old` lacks: before the record is
    /// written.
    pub(crate) fn add(
        &self,
        old: Option<&IndexEntries>,
        new: &IndexEntries,
    ) -> Result<(), StoreError> {
        let doing = "indexing a run";
        let kept = |old: &IndexEntries| old.value == new.value;
        if old.is_none_or(|old| old.status != new.status || !kept(old)) {
            self.by_status
                .insert(new.status.as_slice(), new.value.as_slice())
                .map_err(|e| failed(&doing, &e))?;
        }
        if let Some(flow) = &new.flow
            && old.is_none_or(|old| old.flow.as_ref() != Some(flow) || !kept(old))
        {
            self.by_flow
                .insert(flow.as_slice(), new.value.as_slice())
                .map_err(|e| failed(&doing, &e))?;
        }
        Ok(())
    }

    /// Removes the entries only `old` had: after the record was replaced.
    pub(crate) fn remove(&self, old: &IndexEntries, new: &IndexEntries) -> Result<(), StoreError> {
        let doing = "unindexing a run";
        if old.status != new.status {
            self.by_status
                .remove(old.status.as_slice())
                .map_err(|e| failed(&doing, &e))?;
        }
        if let Some(flow) = &old.flow
            && new.flow.as_ref() != Some(flow)
        {
            self.by_flow
                .remove(flow.as_slice())
                .map_err(|e| failed(&doing, &e))?;
        }
        Ok(())
    }

    /// Removes every entry of a deleted run's record.
    pub(crate) fn forget(&self, entries: &IndexEntries) -> Result<(), StoreError> {
        let doing = "unindexing a deleted run";
        self.by_status
            .remove(entries.status.as_slice())
            .map_err(|e| failed(&doing, &e))?;
        if let Some(flow) = &entries.flow {
            self.by_flow
                .remove(flow.as_slice())
                .map_err(|e| failed(&doing, &e))?;
        }
        Ok(())
    }

    /// How many runs of `runs` are in each status, counted from the
    /// status index at open: each entry's key read, not its run's record.
    ///
    /// Exact after a crash too. The index holds at least every record's
    /// entry (see the module), so an entry left over is either a second
    /// entry of a run (a change cut between adding the new entry and
    /// removing the old one: the record, read, says which is true) or the
    /// entry of a record that is not there (a creation cut before its
    /// record, a deletion cut before its entries: checked with a key
    /// lookup). The cost is one key lookup per run, and one record read
    /// per run a crash left with two entries.
    pub(crate) fn count(&self, runs: &Tree) -> Result<StatusCounts, StoreError> {
        let doing = "counting the runs by status";
        let mut seen: HashMap<String, Option<RunStatus>> = HashMap::new();
        for status in RunStatus::ALL {
            for id in self.ids_in(status)? {
                seen.entry(id?)
                    .and_modify(|first| *first = None)
                    .or_insert(Some(status));
            }
        }
        let mut counts = StatusCounts::new();
        for (run_id, status) in seen {
            let status = match status {
                Some(status) => runs
                    .contains_key(run_id.as_bytes())
                    .map_err(|e| failed(&doing, &e))?
                    .then_some(status),
                None => runs
                    .get(run_id.as_bytes())
                    .map_err(|e| failed(&doing, &e))?
                    .map(|bytes| decode::<RunRecord>(&bytes, &format_args!("run `{run_id}`")))
                    .transpose()?
                    .map(|record| record.status),
            };
            counts.moved(None, status);
        }
        Ok(counts)
    }

    /// The ids of the runs indexed under `status`, ascending (oldest
    /// first): a superset of the runs in that status (see the module).
    pub(crate) fn ids_in(&self, status: RunStatus) -> Result<Candidates<'_>, StoreError> {
        let ids = self
            .entries_in(status)?
            .map(|entry| entry.map(|(id, _)| id));
        Ok(Box::new(ids))
    }

    /// The queued runs, oldest first, each with its tenant as its entry
    /// keeps it (`None` for the default tenant).
    pub(crate) fn queued_with_tenants(
        &self,
    ) -> Result<impl Iterator<Item = Result<(String, Option<String>), StoreError>> + '_, StoreError>
    {
        self.entries_in(RunStatus::Queued)
    }

    /// How many runs each tenant holds in `status`, by tenant name (the
    /// default tenant's for the runs of none), from the index alone.
    pub(crate) fn count_by_tenant(
        &self,
        status: RunStatus,
    ) -> Result<std::collections::BTreeMap<String, u64>, StoreError> {
        let mut counts = std::collections::BTreeMap::new();
        for entry in self.entries_in(status)? {
            let (_, tenant) = entry?;
            let tenant = leasehold_actors::tenancy::tenant_or_default(tenant.as_deref());
            *counts.entry(tenant.to_owned()).or_insert(0) += 1;
        }
        Ok(counts)
    }

    /// The runs indexed under `status`, ascending, each with the tenant
    /// its entry keeps.
    fn entries_in(
        &self,
        status: RunStatus,
    ) -> Result<impl Iterator<Item = Result<(String, Option<String>), StoreError>> + '_, StoreError>
    {
        let prefix = codec::run_prefix(status.name())?;
        Ok(self.by_status.scan_prefix(&prefix).map(move |entry| {
            let (key, value) = entry.map_err(|e| failed(&"listing runs by status", &e))?;
            let corrupt = || StoreError::corrupt("a run index entry is corrupt");
            let id = key
                .get(prefix.len()..)
                .and_then(|id| std::str::from_utf8(id).ok())
                .ok_or_else(corrupt)?;
            let tenant = value
                .get(8..)
                .filter(|tenant| !tenant.is_empty())
                .map(|tenant| std::str::from_utf8(tenant).map(str::to_owned))
                .transpose()
                .map_err(|_| corrupt())?;
            Ok((id.to_owned(), tenant))
        }))
    }

    /// The ids of the runs `query` may select, in listing order (id
    /// descending, below the cursor, in the time window, of the status and
    /// the flow asked for as far as the indexes say); `None` when the query
    /// filters neither by status nor by flow.
    pub(crate) fn candidates<'a>(
        &'a self,
        query: &'a RunQuery,
    ) -> Result<Option<Candidates<'a>>, StoreError> {
        let (tree, name, also_flow) = match (query.status, query.flow.as_deref()) {
            (Some(status), flow) => (&self.by_status, status.name(), flow),
            (None, Some(flow)) => (&self.by_flow, flow, None),
            (None, None) => return Ok(None),
        };
        let prefix = codec::run_prefix(name)?;
        let entries = match &query.after {
            // Every key from the prefix up to prefix + cursor has the prefix.
            Some(after) => tree.range::<Vec<u8>, _>((
                Bound::Included(prefix.clone()),
                Bound::Excluded(codec::index_key(name, after)?),
            )),
            None => tree.scan_prefix(&prefix),
        };
        let doing = "listing runs by an index";
        let ids = entries.rev().filter_map(move |entry| {
            let step = || -> Result<Option<String>, StoreError> {
                let (key, created) = entry.map_err(|e| failed(&doing, &e))?;
                let created =
                    codec::decode_u64(created.get(..8).unwrap_or_default(), &"a run index entry")?;
                let run_id = key
                    .get(prefix.len()..)
                    .and_then(|id| std::str::from_utf8(id).ok())
                    .ok_or_else(|| StoreError::corrupt("a run index entry is corrupt"))?;
                if !listing::in_window(query, created) {
                    return Ok(None);
                }
                if let Some(flow) = also_flow {
                    let in_flow = self
                        .by_flow
                        .contains_key(codec::index_key(flow, run_id)?)
                        .map_err(|e| failed(&doing, &e))?;
                    if !in_flow {
                        return Ok(None);
                    }
                }
                Ok(Some(run_id.to_owned()))
            };
            step().transpose()
        });
        Ok(Some(Box::new(ids)))
    }
}
