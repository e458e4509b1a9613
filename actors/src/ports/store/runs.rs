//! [`RunStore`]: runs, their fenced ownership, orphans and listing.
//!
//! A claim sets a run's owner and raises its fence by compare-and-set; a
//! heartbeat and a change of status land only with the run's current fence
//! ([`fencing`](super::fencing)). Runs are listed a page at a time, by the
//! rule of [`listing`](super::listing).

use super::{
    ClaimOutcome, Fenced, GoneHolder, IdempotencyKey, KeyedCreation, RunPage, RunQuery, RunRecord,
    RunStatus, RunSummary, RunUpdate, StoreFuture, SummaryPage,
};

/// Runs and their fenced ownership: create, claim, renew, change, orphan,
/// read and list them.
pub trait RunStore: Send + Sync + 'static {
    /// Creates a run owned by `record.owner_id` with `record.fence`.
    fn create_run(&self, record: RunRecord) -> StoreFuture<()>;

    /// Creates a run as [`RunStore::create_run`] does, under a client's
    /// idempotency key, in one step: if `key` is kept and still holds
    /// ([`KeptKey::holds_for`](super::KeptKey::holds_for)) and the run it
    /// names exists, nothing is created and that run is answered with the
    /// key's fingerprint; otherwise the run is created and the key kept for
    /// it. Two creations under one key at once, from any executors
    /// sharing the store, create one run. The default refuses: a store
    /// must keep keys to take them.
    fn create_run_keyed(
        &self,
        record: RunRecord,
        key: IdempotencyKey,
    ) -> StoreFuture<KeyedCreation> {
        let _ = (record, key);
        Box::pin(std::future::ready(Err(super::StoreError::invalid(
            "this store keeps no idempotency keys: post the run without one",
        ))))
    }

    /// Claims a run for `owner_id` by compare-and-set: succeeds if the run is
    /// unowned, owned by `owner_id`, or its lease expired at `now_ms`; sets
    /// the owner, the expiry `now_ms + ttl_ms` and `fence = previous + 1`.
    fn claim_run(
        &self,
        run_id: &str,
        owner_id: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<ClaimOutcome>;

    /// Renews the owner's lease (a heartbeat), if `fence` is still the run's.
    fn renew_run(
        &self,
        run_id: &str,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<Fenced<()>>;

    /// Changes the run's status, if `fence` is still the run's.
    fn update_run(&self, run_id: &str, fence: u64, update: RunUpdate) -> StoreFuture<Fenced<()>>;

    /// Marks every `running` run whose lease expired at `now_ms` as
    /// `orphaned` with the reason `run orphaned: executor lease expired`;
    /// returns their ids.
    fn reconcile_orphans(&self, now_ms: u64) -> StoreFuture<Vec<String>>;

    /// Whether executors in other processes may use this store at the same
    /// time (PostgreSQL), so that a run another executor holds may be live
    /// there and a command forwarded to it may be taken. False (the
    /// default) for a store one process opens at a time (sled, memory):
    /// there, a run held by an executor not in this process is held by
    /// one that died, until its lease ends.
    fn is_shared(&self) -> bool {
        false
    }

    /// Whether this store guarantees that one process at a time opens it
    /// (sled: the lock on its directory). There, a run held by an owner
    /// that no engine of this process has is held by a process that died,
    /// whatever its lease says, and is taken over at once
    /// ([`Engine::holder_is_gone`](crate::Engine::holder_is_gone)). False
    /// (the default) for a store that cannot tell: a shared one, or the
    /// memory store, which one process may hand to executors it simulates.
    fn is_exclusive(&self) -> bool {
        false
    }

    /// On a store one process opens at a time ([`RunStore::is_exclusive`]):
    /// marks orphaned each running run whose holder `gone` says is gone
    /// ([`fencing::orphan_of_a_gone_holder`](super::fencing::orphan_of_a_gone_holder)), its owner and fence left as
    /// they are, as [`RunStore::reconcile_orphans`] does for an expired
    /// lease; returns their ids. The default, for a store that cannot
    /// tell, marks none.
    fn orphan_runs_of_gone_holders(
        &self,
        now_ms: u64,
        gone: GoneHolder,
    ) -> StoreFuture<Vec<String>> {
        let _ = (now_ms, gone);
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// A run.
    fn load_run(&self, run_id: &str) -> StoreFuture<Option<RunRecord>>;

    /// Every run, oldest first.
    fn list_runs(&self) -> StoreFuture<Vec<RunRecord>>;

    /// How many runs are in each status, every status of
    /// [`RunStatus::ALL`] once, in that order: what an operator's dashboard
    /// reads on every scrape. The default counts [`RunStore::list_runs`],
    /// which costs as much as the store holds: every store of leasehold
    /// keeps its counts as runs change instead ([`StatusCounts`](super::StatusCounts)),
    /// and answers without reading a run; a store of one's own should too.
    fn count_runs_by_status(&self) -> StoreFuture<Vec<(RunStatus, u64)>> {
        let runs = self.list_runs();
        Box::pin(async move {
            let runs = runs.await?;
            Ok(RunStatus::ALL
                .into_iter()
                .map(|status| {
                    let count = runs.iter().filter(|r| r.status == status).count();
                    (status, u64::try_from(count).unwrap_or(u64::MAX))
                })
                .collect())
        })
    }

    /// How many runs are in `status`: what admitting a run to the queue
    /// reads on every post, so a store answers it without reading the
    /// runs (its kept counts). The default reads
    /// [`RunStore::count_runs_by_status`].
    fn count_runs(&self, status: RunStatus) -> StoreFuture<u64> {
        let counts = self.count_runs_by_status();
        Box::pin(async move {
            Ok(counts
                .await?
                .into_iter()
                .find(|(of, _)| *of == status)
                .map_or(0, |(_, n)| n))
        })
    }

    /// The page [`RunStore::list_runs_page`] answers for `query`, as
    /// summaries ([`RunSummary::of`]): no flow, each text cut to its first
    /// [`SUMMARY_CHARS`](super::SUMMARY_CHARS) characters. A store holds at most one whole run
    /// at a time while it summarizes (or, cutting in its query, none); the
    /// default summarizes the whole page of [`RunStore::list_runs_page`].
    fn list_run_summaries(&self, query: &RunQuery) -> StoreFuture<SummaryPage> {
        let page = self.list_runs_page(query);
        Box::pin(async move {
            let page = page.await?;
            Ok(SummaryPage {
                runs: page.runs.into_iter().map(RunSummary::of).collect(),
                next: page.next,
            })
        })
    }

    /// One page of the runs `query` selects: run id descending (newest
    /// first), only ids strictly below `query.after` when it is set, at most
    /// `query.limit` (at least one), with `next` set exactly when another
    /// matching run follows. A store reads only the runs of the page (and
    /// the one that proves a next page exists), not every run:
    /// [`listing::page`](super::listing::page) cuts the page from candidates in listing order.
    fn list_runs_page(&self, query: &RunQuery) -> StoreFuture<RunPage>;
}
