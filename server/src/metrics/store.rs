//! [`MeteredStore`]: the store port, its writes timed.
//!
//! A layer ([`LayeredStore`]): every call goes to the wrapped store
//! unchanged, its answer comes back unchanged; a write (anything that
//! changes the store, a refused fenced write and a failure included) is
//! timed into `leasehold_store_write_duration_seconds{op}`. Reads are not
//! timed, and go to the wrapped store without a line here.

use std::sync::Arc;

use leasehold::{
    ClaimOutcome, Delivery, Event, Fenced, GoneHolder, LayeredStore, Notice, NoticeTake,
    PurgeReport, PurgeRule, QueueClaim, RunCommand, RunRecord, RunUpdate, Snapshot, Store,
    StoreFuture, StoredCommand, ToolCallRecord,
};
use prometheus_client::metrics::histogram::Histogram;

use super::{Histograms, Metrics};

/// A store whose writes are timed into a [`Metrics`].
///
/// ```
/// use std::sync::Arc;
/// use leasehold::MemoryStore;
/// use leasehold_server::metrics::{MeteredStore, Metrics};
///
/// let metrics = Arc::new(Metrics::new());
/// let store = MeteredStore::new(Arc::new(MemoryStore::new()), &metrics);
/// # let _ = store;
/// ```
pub struct MeteredStore {
    inner: Arc<dyn Store>,
    writes: Histograms<1>,
}

impl std::fmt::Debug for MeteredStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredStore").finish_non_exhaustive()
    }
}

impl MeteredStore {
    /// `inner`, its writes timed into `metrics`.
    pub fn new(inner: Arc<dyn Store>, metrics: &Metrics) -> Self {
        Self {
            inner,
            writes: metrics.store_writes.clone(),
        }
    }

    /// `inner` wrapped, as the port: for
    /// [`EngineBuilder::wrap_store`](leasehold::EngineBuilder::wrap_store).
    pub fn wrap(inner: Arc<dyn Store>, metrics: &Metrics) -> Arc<dyn Store> {
        Arc::new(Self::new(inner, metrics))
    }

    /// Times `write` from its call (a store may do its work before it
    /// returns the future) to its answer.
    fn timed<T: Send + 'static>(
        &self,
        op: &'static str,
        write: impl FnOnce(&dyn Store) -> StoreFuture<T>,
    ) -> StoreFuture<T> {
        let histogram: Histogram = self.writes.get_or_create_owned(&[("op", op)]);
        let started = tokio::time::Instant::now();
        let write = write(self.inner.as_ref());
        Box::pin(async move {
            let answer = write.await;
            histogram.observe(started.elapsed().as_secs_f64());
            answer
        })
    }
}

/// Writes timed; reads, `changes` and what the store says of itself go
/// to the inner store as they are.
impl LayeredStore for MeteredStore {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    fn create_run(&self, record: RunRecord) -> StoreFuture<()> {
        self.timed("create_run", |s| s.create_run(record))
    }

    fn claim_run(
        &self,
        id: &str,
        owner: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<ClaimOutcome> {
        self.timed("claim_run", |s| s.claim_run(id, owner, now_ms, ttl_ms))
    }

    fn renew_run(
        &self,
        run_id: &str,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<Fenced<()>> {
        self.timed("renew_run", |s| s.renew_run(run_id, fence, now_ms, ttl_ms))
    }

    fn update_run(&self, run_id: &str, fence: u64, update: RunUpdate) -> StoreFuture<Fenced<()>> {
        self.timed("update_run", |s| s.update_run(run_id, fence, update))
    }

    fn reconcile_orphans(&self, now_ms: u64) -> StoreFuture<Vec<String>> {
        self.timed("reconcile_orphans", |s| s.reconcile_orphans(now_ms))
    }

    fn orphan_runs_of_gone_holders(
        &self,
        now_ms: u64,
        gone: GoneHolder,
    ) -> StoreFuture<Vec<String>> {
        self.timed("orphan_runs_of_gone_holders", |s| {
            s.orphan_runs_of_gone_holders(now_ms, gone)
        })
    }

    fn append_events(
        &self,
        run_id: &str,
        events: Vec<std::sync::Arc<Event>>,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        self.timed("append_events", |s| s.append_events(run_id, events, fence))
    }

    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        self.timed("save_snapshot", |s| s.save_snapshot(snapshot, fence))
    }

    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        self.timed("record_tool_call", |s| {
            s.record_tool_call(run_id, record, fence)
        })
    }

    fn claim_queued(&self, claim: QueueClaim) -> StoreFuture<Vec<RunRecord>> {
        self.timed("claim_queued", |s| s.claim_queued(claim))
    }

    fn send_command(&self, run_id: &str, command: RunCommand) -> StoreFuture<u64> {
        self.timed("send_command", |s| s.send_command(run_id, command))
    }

    fn take_commands(&self, owner_id: &str) -> StoreFuture<Vec<StoredCommand>> {
        self.timed("take_commands", |s| s.take_commands(owner_id))
    }

    fn take_notices(&self, take: NoticeTake) -> StoreFuture<Vec<Notice>> {
        self.timed("take_notices", |s| s.take_notices(take))
    }

    fn settle_notice(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<Delivery>,
    ) -> StoreFuture<bool> {
        self.timed("settle_notice", |s| {
            s.settle_notice(id, held_until_ms, delivery)
        })
    }

    fn flush(&self) -> StoreFuture<()> {
        self.timed("flush", |s| s.flush())
    }

    fn purge_finished(&self, rule: PurgeRule) -> StoreFuture<PurgeReport> {
        self.timed("purge_finished", |s| s.purge_finished(rule))
    }
}
