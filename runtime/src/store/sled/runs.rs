//! The sled store's runs ([`RunStore`]): each change of a run's record a
//! compare-and-set under the run's lock, orphans found by a scan, and
//! pages of runs read through the run indexes.

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::atomic::Ordering;

use leasehold_actors::{
    ClaimOutcome, Fenced, IdempotencyKey, KeyedCreation, RunPage, RunQuery, RunRecord, RunStatus,
    RunStore, RunUpdate, StoreChange, StoreError, StoreFuture, SummaryPage, fencing, listing,
    outbox,
};

use super::codec::{decode, encode};
use super::finished::FinishedEntries;
use super::run_index::IndexEntries;
use super::{Inner, RunName, SledStore, failed, no_run, ready};

/// Run records read one at a time, in listing order.
type Records<'a> = Box<dyn Iterator<Item = Result<RunRecord, StoreError>> + 'a>;

impl Inner {
    pub(super) fn create_run(&self, record: &RunRecord) -> Result<((), bool), StoreError> {
        let run_id = record.run_id.as_str();
        let doing = format_args!("creating run `{run_id}`");
        let bytes = encode(record, &RunName(run_id))?;
        let order_value = encode(&run_id, &RunName(run_id))?;
        let mut run = self.locks.lock(run_id);
        run.forget(run_id);
        if self
            .runs
            .contains_key(run_id.as_bytes())
            .map_err(|e| failed(&doing, &e))?
        {
            return Err(StoreError::conflict(format!(
                "run `{run_id}` already exists"
            )));
        }
        // The creation order first: sled recovers a prefix of its log, so a
        // run that survives a crash has its place in the order (an order
        // entry without its run is skipped by `list_runs`).
        let order = self.next_order.fetch_add(1, Ordering::Relaxed);
        self.run_order
            .insert(order.to_be_bytes(), order_value)
            .map_err(|e| failed(&doing, &e))?;
        self.indexes.add(None, &IndexEntries::of(record)?)?;
        self.finished
            .add(None, FinishedEntries::of(record).as_ref())?;
        match self
            .runs
            .compare_and_swap(run_id.as_bytes(), None::<&[u8]>, Some(bytes))
            .map_err(|e| failed(&doing, &e))?
        {
            Ok(()) => {
                self.counted(None, Some(record.status));
                Ok(((), true))
            }
            Err(_) => {
                // Not a path taken while every creator holds the run's lock.
                self.run_order
                    .remove(order.to_be_bytes())
                    .map_err(|e| failed(&doing, &e))?;
                Err(StoreError::conflict(format!(
                    "run `{run_id}` already exists"
                )))
            }
        }
    }

    fn reconcile_orphans(&self, now_ms: u64) -> Result<(Vec<String>, bool), StoreError> {
        self.orphan_where(|record| fencing::orphan(record, now_ms))
    }

    /// Marks orphaned each run `rule` orphans (a running run, by either
    /// rule of [`fencing`]): found through the status index's running
    /// runs, so that a sweep reads the runs that run, not every run
    /// stored; changed under the run's lock after `rule` is applied again
    /// to what is there.
    fn orphan_where(
        &self,
        rule: impl Fn(&RunRecord) -> Option<RunRecord>,
    ) -> Result<(Vec<String>, bool), StoreError> {
        let mut candidates = Vec::new();
        for run_id in self.indexes.ids_in(RunStatus::Running)? {
            // An entry left over by a crash reads a record in another
            // status (or none), which no rule orphans.
            if let Some((_, record)) = self.read_run(&run_id?)?
                && rule(&record).is_some()
            {
                candidates.push(record.run_id);
            }
        }
        let mut orphaned = Vec::new();
        for run_id in candidates {
            // Checked again under the run's lock: it may have been renewed
            // or claimed since the scan.
            let ((), wrote) =
                self.change_run(&run_id, |record| Ok(((), record.and_then(|r| rule(&r)))))?;
            if wrote {
                orphaned.push(run_id);
            }
        }
        let wrote = !orphaned.is_empty();
        Ok((orphaned, wrote))
    }

    fn list_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let doing = "listing runs";
        let mut runs = Vec::new();
        let mut listed = HashSet::new();
        for entry in &self.run_order {
            let (_, value) = entry.map_err(|e| failed(&doing, &e))?;
            let run_id: String = decode(&value, &"an entry of the run creation order")?;
            // A crash between a creation's two writes leaves a place
            // without its run; creating the run again gives it a second one.
            if listed.contains(&run_id) {
                continue;
            }
            if let Some((_, record)) = self.read_run(&run_id)? {
                runs.push(record);
                listed.insert(run_id);
            }
        }
        Ok(runs)
    }

    /// One page of runs: through an index when the query filters by status
    /// or flow, otherwise down the runs tree from the cursor; either way
    /// reading no run past the one that proves a next page exists.
    fn list_runs_page(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        listing::page(query, self.listed(query)?)
    }

    /// The page of [`Inner::list_runs_page`] as summaries: each record is
    /// decoded, summarized and dropped before the next is read.
    fn list_run_summaries(&self, query: &RunQuery) -> Result<SummaryPage, StoreError> {
        listing::summaries(query, self.listed(query)?)
    }

    /// The records a page of `query` is cut from, in listing order, read
    /// one at a time as they are pulled.
    fn listed<'a>(&'a self, query: &'a RunQuery) -> Result<Records<'a>, StoreError> {
        if let Some(ids) = self.indexes.candidates(query)? {
            return Ok(Box::new(ids.filter_map(|id| {
                id.and_then(|id| self.read_run(&id))
                    .map(|read| read.map(|(_, record)| record))
                    .transpose()
            })));
        }
        let upper = query.after.as_ref().map_or(Bound::Unbounded, |after| {
            Bound::Excluded(after.as_bytes().to_vec())
        });
        let records = self
            .runs
            .range::<Vec<u8>, _>((Bound::Unbounded, upper))
            .rev()
            .map(|entry| {
                self.record_read();
                let (key, bytes) = entry.map_err(|e| failed(&"listing runs", &e))?;
                decode(&bytes, &RunName(&String::from_utf8_lossy(&key)))
            });
        Ok(Box::new(records))
    }

    /// How many runs are in `status`: the count kept as records change
    /// ([`Inner::counts`]), read without a run.
    pub(super) fn count_runs(&self, status: RunStatus) -> u64 {
        self.counts().get(status)
    }
}

impl RunStore for SledStore {
    fn create_run_keyed(
        &self,
        record: RunRecord,
        key: IdempotencyKey,
    ) -> StoreFuture<KeyedCreation> {
        let run_id = record.run_id.clone();
        let queued = record.status == RunStatus::Queued;
        let changes = self.inner.changes.clone();
        let created = self.settle_publishing(self.inner.create_run_keyed(&record, &key), |c| {
            (*c == KeyedCreation::Created).then_some(StoreChange::Run { run_id })
        });
        Box::pin(async move {
            let created = created.await?;
            if queued && created == KeyedCreation::Created {
                changes.publish(StoreChange::Queued);
            }
            Ok(created)
        })
    }

    fn create_run(&self, record: RunRecord) -> StoreFuture<()> {
        let run_id = record.run_id.clone();
        // A queued run is also news for every executor with room.
        let queued = record.status == RunStatus::Queued;
        let changes = self.inner.changes.clone();
        let created = self.settle_publishing(self.inner.create_run(&record), |()| {
            Some(StoreChange::Run { run_id })
        });
        Box::pin(async move {
            created.await?;
            if queued {
                changes.publish(StoreChange::Queued);
            }
            Ok(())
        })
    }

    fn claim_run(
        &self,
        run_id: &str,
        owner_id: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<ClaimOutcome> {
        let claimed = self.inner.change_run(run_id, |record| {
            Ok(match record {
                None => (ClaimOutcome::NotFound, None),
                Some(record) => match fencing::claim(&record, owner_id, now_ms, ttl_ms) {
                    Ok(claimed) => (ClaimOutcome::Claimed(claimed.clone()), Some(claimed)),
                    Err(refused) => (refused, None),
                },
            })
        });
        self.settle_publishing(claimed, |_| {
            Some(StoreChange::Run {
                run_id: run_id.to_owned(),
            })
        })
    }

    fn renew_run(
        &self,
        run_id: &str,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<Fenced<()>> {
        let renewed = self.inner.change_run(run_id, |record| {
            let record = record.ok_or_else(|| no_run(run_id))?;
            Ok(match fencing::renew(&record, fence, now_ms, ttl_ms) {
                Ok(renewed) => (Fenced::Applied(()), Some(renewed)),
                Err(stale) => (stale, None),
            })
        });
        self.settle(renewed)
    }

    fn update_run(&self, run_id: &str, fence: u64, update: RunUpdate) -> StoreFuture<Fenced<()>> {
        // With the outcome, whether the change kept a notice (the store's
        // `change_run` keeps the one `outbox::notice_of` makes).
        let updated = self.inner.change_run(run_id, |record| {
            let record = record.ok_or_else(|| no_run(run_id))?;
            Ok(match fencing::update(&record, fence, &update) {
                Ok(updated) => {
                    let kept = outbox::makes_notice(record.status, updated.status);
                    ((Fenced::Applied(()), kept), Some(updated))
                }
                Err(stale) => ((stale, false), None),
            })
        });
        let kept = matches!(updated, Ok(((_, true), true)));
        let changes = self.inner.changes.clone();
        let run_id = run_id.to_owned();
        let published = self.settle_publishing(updated, |_| {
            Some(StoreChange::Run {
                run_id: run_id.clone(),
            })
        });
        Box::pin(async move {
            let (outcome, _) = published.await?;
            if kept {
                changes.publish(StoreChange::Notice { run_id });
            }
            Ok(outcome)
        })
    }

    fn reconcile_orphans(&self, now_ms: u64) -> StoreFuture<Vec<String>> {
        self.orphan_and_tell(move |inner| inner.reconcile_orphans(now_ms))
    }

    /// sled locks its directory: one process at a time opens it.
    fn is_exclusive(&self) -> bool {
        true
    }

    fn orphan_runs_of_gone_holders(
        &self,
        now_ms: u64,
        gone: leasehold_actors::GoneHolder,
    ) -> StoreFuture<Vec<String>> {
        self.orphan_and_tell(move |inner| {
            inner.orphan_where(|record| {
                let held_by_the_gone = record.owner_id.as_deref().is_some_and(|o| gone(o));
                held_by_the_gone
                    .then(|| fencing::orphan_of_a_gone_holder(record, now_ms))
                    .flatten()
            })
        })
    }

    fn load_run(&self, run_id: &str) -> StoreFuture<Option<RunRecord>> {
        ready(
            self.inner
                .read_run(run_id)
                .map(|read| read.map(|(_, record)| record)),
        )
    }

    fn list_runs(&self) -> StoreFuture<Vec<RunRecord>> {
        self.scan(Inner::list_runs)
    }

    fn count_runs_by_status(&self) -> StoreFuture<Vec<(RunStatus, u64)>> {
        ready(Ok(self.inner.counts().by_status()))
    }

    fn count_runs(&self, status: RunStatus) -> StoreFuture<u64> {
        ready(Ok(self.inner.count_runs(status)))
    }

    fn list_run_summaries(&self, query: &RunQuery) -> StoreFuture<SummaryPage> {
        let query = query.clone();
        self.scan(move |inner| inner.list_run_summaries(&query))
    }

    fn list_runs_page(&self, query: &RunQuery) -> StoreFuture<RunPage> {
        let query = query.clone();
        self.scan(move |inner| inner.list_runs_page(&query))
    }
}

#[cfg(test)]
mod tests {
    use leasehold_actors::{RunQuery, RunRecord, RunStatus};

    use super::super::codec::decodes;
    use super::SledStore;
    use crate::store::{Durability, SledConfig};

    /// Run `n`: every tenth (from the fourth) waits for a person, the
    /// others completed; flows alternate `alpha`, `beta`.
    fn record(n: u32) -> RunRecord {
        let status = if n % 10 == 3 {
            "waiting_human"
        } else {
            "completed"
        };
        let flow = if n.is_multiple_of(2) { "alpha" } else { "beta" };
        serde_json::from_value(serde_json::json!({
            "run_id": format!("run-{n:08}"), "flow": {"name": flow}, "status": status,
            "owner_id": null, "fence": 1, "lease_expires_at_ms": 0, "reason": null,
            "answer": null, "pause": null, "created_at_ms": n, "updated_at_ms": n,
        }))
        .expect("a record")
    }

    /// A page of 50: status, flow, created before, after.
    fn page_of_50(
        status: Option<RunStatus>,
        flow: Option<&str>,
        before: Option<u64>,
        after: Option<&str>,
    ) -> RunQuery {
        let mut query = RunQuery::first(50);
        query.status = status;
        query.flow = flow.map(str::to_owned);
        query.created_before_ms = before;
        query.after = after.map(str::to_owned);
        query
    }

    /// Decodes one page on this thread; returns it and the values decoded.
    fn page_counted(store: &SledStore, query: &RunQuery) -> (Vec<String>, Option<String>, u64) {
        let before = decodes::so_far();
        let page = store.inner.list_runs_page(query).expect("a page");
        let decoded = decodes::so_far() - before;
        let ids = page.runs.into_iter().map(|r| r.run_id).collect();
        (ids, page.next, decoded)
    }

    #[tokio::test]
    async fn the_counts_a_reopen_finds_skip_index_entries_a_crash_left_over() {
        use leasehold_actors::RunStore;

        use super::super::run_index::IndexEntries;

        let dir = tempfile::tempdir().expect("a directory");
        let open = || {
            SledStore::open(SledConfig::new(dir.path()).with_durability(Durability::Exit))
                .expect("a store")
        };
        let store = open();
        for n in 0..10 {
            store.create_run(record(n)).await.expect("created");
        }
        // What a crash leaves: a change cut between adding its new entry
        // and removing the old one (run 0 completed, indexed waiting too),
        // and a creation cut before its record (run 99, indexed alone).
        let mut changed = record(0);
        changed.status = RunStatus::WaitingHuman;
        let mut never_written = record(99);
        never_written.status = RunStatus::Queued;
        for leftover in [changed, never_written] {
            let entries = IndexEntries::of(&leftover).expect("entries");
            store.inner.indexes.add(None, &entries).expect("indexed");
        }
        drop(store);
        let store = open();
        let counts = store.count_runs_by_status().await.expect("counted");
        let count = |status| counts.iter().find(|(s, _)| *s == status).map(|(_, n)| *n);
        assert_eq!(count(RunStatus::Completed), Some(9));
        assert_eq!(count(RunStatus::WaitingHuman), Some(1), "run 3 alone");
        assert_eq!(count(RunStatus::Queued), Some(0));
    }

    #[tokio::test]
    async fn a_filtered_page_of_ten_thousand_runs_decodes_only_its_own_runs() {
        // A directory of its own: tests of this binary run in parallel,
        // and a sled directory can be open once at a time.
        let dir = tempfile::tempdir().expect("a directory");
        let store = SledStore::open(
            SledConfig::new(dir.path())
                .with_temporary(true)
                .with_durability(Durability::Exit),
        )
        .expect("a store");
        for n in 0..10_000 {
            store.inner.create_run(&record(n)).expect("created");
        }
        let waiting = Some(RunStatus::WaitingHuman);
        let rare = page_of_50(waiting, Some("beta"), Some(5_000), None);
        let pages = [
            page_of_50(None, None, None, None),
            page_of_50(waiting, None, None, None),
            rare.clone(),
            page_of_50(None, Some("alpha"), None, Some("run-00000500")),
        ];
        for query in pages {
            let (ids, next, decoded) = page_counted(&store, &query);
            assert_eq!(ids.len(), 50, "{query:?}");
            assert!(next.is_some(), "{query:?}");
            assert!(
                decoded <= 51,
                "{decoded} records decoded for a page of 50: {query:?}"
            );
        }
        // The status index drives the walk: a rare status is found
        // without reading the runs in between.
        let (ids, _, _) = page_counted(&store, &rare);
        assert_eq!(ids.first().map(String::as_str), Some("run-00004993"));
        assert_eq!(ids.last().map(String::as_str), Some("run-00004503"));
        // The last page says so, having read nothing.
        let last = page_of_50(waiting, None, None, Some("run-00000003"));
        let (ids, next, decoded) = page_counted(&store, &last);
        assert!(
            ids.is_empty() && next.is_none() && decoded == 0,
            "{ids:?} {next:?} {decoded}"
        );
    }
}
