//! [`LayeredStore`]: the base of a store that wraps another — metrics,
//! fault injection, encryption, a cache — so that the wrapper says only
//! what it changes.
//!
//! A layer names its inner store ([`LayeredStore::inner`]); every method
//! it does not override goes to the inner store unchanged, and every part
//! of the port ([`RunStore`], [`EventLog`], …, so [`Store`]) is
//! implemented for it from there. A layer overriding one method is a few
//! lines; a method added to the port reaches every layer at once, and a
//! layer cannot forget to forward one (`is_exclusive`, say, which the
//! engine reads to take over a dead process's runs).
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//!
//! use leasehold_actors::prelude::*;
//!
//! /// A store that counts the runs created through it.
//! struct Counted {
//!     inner: Arc<dyn Store>,
//!     created: AtomicU64,
//! }
//!
//! impl LayeredStore for Counted {
//!     fn inner(&self) -> &dyn Store {
//!         self.inner.as_ref()
//!     }
//!
//!     fn create_run(&self, record: RunRecord) -> StoreFuture<()> {
//!         self.created.fetch_add(1, Ordering::Relaxed);
//!         self.inner.create_run(record)
//!     }
//! }
//!
//! let store: Arc<dyn Store> = Arc::new(Counted {
//!     inner: Arc::new(MemoryStore::new()),
//!     created: AtomicU64::new(0),
//! });
//! assert!(!store.is_exclusive()); // the memory store's answer, forwarded
//! ```
//!
//! A layer is checked as any store is, by the conformance suite
//! (`testing::conformance`, feature `test-util`).

use super::{
    ChangeSource, ClaimOutcome, Delivery, EventLog, Fenced, GoneHolder, IdempotencyKey, KeyStore,
    KeyedCreation, Notice, NoticeTake, Outbox, PaceStore, PurgeReport, PurgeRule, QueueClaim,
    QueueStore, Retention, RunPage, RunQuery, RunRecord, RunStatus, RunStore, RunUpdate, Snapshot,
    SnapshotStore, SnapshotTable, Store, StoreFuture, SummaryPage, ToolCallRecord,
};
use crate::event::Event;
use crate::pace::Pace;
use crate::ports::changes::{ChangeFeed, RunCommand, StoredCommand};
use crate::tenancy::ApiKey;

/// A store that wraps another: each method goes to [`inner`](Self::inner)
/// unless the layer overrides it. Every part of the port, so [`Store`],
/// is implemented for each `LayeredStore` from its methods.
///
/// The methods are those of the port's parts, with their contracts; a
/// layer that overrides one keeps its part's contract.
pub trait LayeredStore: Send + Sync + 'static {
    /// The store this one wraps.
    fn inner(&self) -> &dyn Store;

    // Runs and their fenced ownership.

    /// [`RunStore::create_run`].
    fn create_run(&self, record: RunRecord) -> StoreFuture<()> {
        self.inner().create_run(record)
    }

    /// [`RunStore::create_run_keyed`].
    fn create_run_keyed(
        &self,
        record: RunRecord,
        key: IdempotencyKey,
    ) -> StoreFuture<KeyedCreation> {
        self.inner().create_run_keyed(record, key)
    }

    /// [`RunStore::claim_run`].
    fn claim_run(
        &self,
        run_id: &str,
        owner_id: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<ClaimOutcome> {
        self.inner().claim_run(run_id, owner_id, now_ms, ttl_ms)
    }

    /// [`RunStore::renew_run`].
    fn renew_run(
        &self,
        run_id: &str,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<Fenced<()>> {
        self.inner().renew_run(run_id, fence, now_ms, ttl_ms)
    }

    /// [`RunStore::update_run`].
    fn update_run(&self, run_id: &str, fence: u64, update: RunUpdate) -> StoreFuture<Fenced<()>> {
        self.inner().update_run(run_id, fence, update)
    }

    /// [`RunStore::reconcile_orphans`].
    fn reconcile_orphans(&self, now_ms: u64) -> StoreFuture<Vec<String>> {
        self.inner().reconcile_orphans(now_ms)
    }

    /// [`RunStore::is_shared`].
    fn is_shared(&self) -> bool {
        self.inner().is_shared()
    }

    /// [`RunStore::is_exclusive`].
    fn is_exclusive(&self) -> bool {
        self.inner().is_exclusive()
    }

    /// [`RunStore::orphan_runs_of_gone_holders`].
    fn orphan_runs_of_gone_holders(
        &self,
        now_ms: u64,
        gone: GoneHolder,
    ) -> StoreFuture<Vec<String>> {
        self.inner().orphan_runs_of_gone_holders(now_ms, gone)
    }

    /// [`RunStore::load_run`].
    fn load_run(&self, run_id: &str) -> StoreFuture<Option<RunRecord>> {
        self.inner().load_run(run_id)
    }

    /// [`RunStore::list_runs`].
    fn list_runs(&self) -> StoreFuture<Vec<RunRecord>> {
        self.inner().list_runs()
    }

    /// [`RunStore::count_runs_by_status`].
    fn count_runs_by_status(&self) -> StoreFuture<Vec<(RunStatus, u64)>> {
        self.inner().count_runs_by_status()
    }

    /// [`RunStore::count_runs`].
    fn count_runs(&self, status: RunStatus) -> StoreFuture<u64> {
        self.inner().count_runs(status)
    }

    /// [`RunStore::list_run_summaries`].
    fn list_run_summaries(&self, query: &RunQuery) -> StoreFuture<SummaryPage> {
        self.inner().list_run_summaries(query)
    }

    /// [`RunStore::list_runs_page`].
    fn list_runs_page(&self, query: &RunQuery) -> StoreFuture<RunPage> {
        self.inner().list_runs_page(query)
    }

    // The event log.

    /// [`EventLog::append_events`].
    fn append_events(
        &self,
        run_id: &str,
        events: Vec<std::sync::Arc<Event>>,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        self.inner().append_events(run_id, events, fence)
    }

    /// [`EventLog::load_events`].
    fn load_events(&self, run_id: &str, after_seq: u64) -> StoreFuture<Vec<Event>> {
        self.inner().load_events(run_id, after_seq)
    }

    /// [`EventLog::last_event`].
    fn last_event(&self, run_id: &str) -> StoreFuture<Option<Event>> {
        self.inner().last_event(run_id)
    }

    // Snapshots, their history and tool calls.

    /// [`SnapshotStore::save_snapshot`].
    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        self.inner().save_snapshot(snapshot, fence)
    }

    /// [`SnapshotStore::record_tool_call`].
    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        self.inner().record_tool_call(run_id, record, fence)
    }

    /// [`SnapshotStore::load_snapshots`].
    fn load_snapshots(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>> {
        self.inner().load_snapshots(run_id)
    }

    /// [`SnapshotStore::load_snapshot_history`].
    fn load_snapshot_history(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>> {
        self.inner().load_snapshot_history(run_id)
    }

    /// [`SnapshotStore::load_stored_snapshots`].
    fn load_stored_snapshots(
        &self,
        run_id: &str,
        table: SnapshotTable,
    ) -> StoreFuture<Vec<Snapshot>> {
        self.inner().load_stored_snapshots(run_id, table)
    }

    /// [`SnapshotStore::snapshot_bytes`].
    fn snapshot_bytes(&self, run_id: &str) -> StoreFuture<u64> {
        self.inner().snapshot_bytes(run_id)
    }

    /// [`SnapshotStore::load_tool_calls`].
    fn load_tool_calls(&self, run_id: &str) -> StoreFuture<Vec<ToolCallRecord>> {
        self.inner().load_tool_calls(run_id)
    }

    // The queue and commands.

    /// [`QueueStore::claim_queued`].
    fn claim_queued(&self, claim: QueueClaim) -> StoreFuture<Vec<RunRecord>> {
        self.inner().claim_queued(claim)
    }

    /// [`QueueStore::send_command`].
    fn send_command(&self, run_id: &str, command: RunCommand) -> StoreFuture<u64> {
        self.inner().send_command(run_id, command)
    }

    /// [`QueueStore::count_commands`].
    fn count_commands(&self, run_id: &str) -> StoreFuture<u64> {
        self.inner().count_commands(run_id)
    }

    /// [`QueueStore::take_commands`].
    fn take_commands(&self, owner_id: &str) -> StoreFuture<Vec<StoredCommand>> {
        self.inner().take_commands(owner_id)
    }

    // The outbox.

    /// [`Outbox::take_notices`].
    fn take_notices(&self, take: NoticeTake) -> StoreFuture<Vec<Notice>> {
        self.inner().take_notices(take)
    }

    /// [`Outbox::settle_notice`].
    fn settle_notice(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<Delivery>,
    ) -> StoreFuture<bool> {
        self.inner().settle_notice(id, held_until_ms, delivery)
    }

    // Learned paces.

    /// [`PaceStore::load_paces`].
    fn load_paces(&self) -> StoreFuture<Vec<(String, Pace)>> {
        self.inner().load_paces()
    }

    /// [`PaceStore::save_paces`].
    fn save_paces(&self, paces: Vec<(String, Option<Pace>)>) -> StoreFuture<()> {
        self.inner().save_paces(paces)
    }

    /// [`QueueStore::count_queued_by_tenant`].
    fn count_queued_by_tenant(&self) -> StoreFuture<std::collections::BTreeMap<String, u64>> {
        self.inner().count_queued_by_tenant()
    }

    // API keys.

    /// [`KeyStore::create_api_key`].
    fn create_api_key(&self, key: ApiKey) -> StoreFuture<()> {
        self.inner().create_api_key(key)
    }

    /// [`KeyStore::load_api_key`].
    fn load_api_key(&self, id: &str) -> StoreFuture<Option<ApiKey>> {
        self.inner().load_api_key(id)
    }

    /// [`KeyStore::list_api_keys`].
    fn list_api_keys(&self, tenant: Option<String>) -> StoreFuture<Vec<ApiKey>> {
        self.inner().list_api_keys(tenant)
    }

    /// [`KeyStore::revoke_api_key`].
    fn revoke_api_key(&self, id: &str, at_ms: u64) -> StoreFuture<Option<ApiKey>> {
        self.inner().revoke_api_key(id, at_ms)
    }

    // The change feed and durability.

    /// [`ChangeSource::changes`].
    fn changes(&self) -> ChangeFeed {
        self.inner().changes()
    }

    /// [`ChangeSource::flush`].
    fn flush(&self) -> StoreFuture<()> {
        self.inner().flush()
    }

    // Retention.

    /// [`Retention::purge_finished`].
    fn purge_finished(&self, rule: PurgeRule) -> StoreFuture<PurgeReport> {
        self.inner().purge_finished(rule)
    }
}

impl<L: LayeredStore> RunStore for L {
    fn create_run(&self, record: RunRecord) -> StoreFuture<()> {
        LayeredStore::create_run(self, record)
    }

    fn create_run_keyed(
        &self,
        record: RunRecord,
        key: IdempotencyKey,
    ) -> StoreFuture<KeyedCreation> {
        LayeredStore::create_run_keyed(self, record, key)
    }

    fn claim_run(
        &self,
        run_id: &str,
        owner_id: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<ClaimOutcome> {
        LayeredStore::claim_run(self, run_id, owner_id, now_ms, ttl_ms)
    }

    fn renew_run(
        &self,
        run_id: &str,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<Fenced<()>> {
        LayeredStore::renew_run(self, run_id, fence, now_ms, ttl_ms)
    }

    fn update_run(&self, run_id: &str, fence: u64, update: RunUpdate) -> StoreFuture<Fenced<()>> {
        LayeredStore::update_run(self, run_id, fence, update)
    }

    fn reconcile_orphans(&self, now_ms: u64) -> StoreFuture<Vec<String>> {
        LayeredStore::reconcile_orphans(self, now_ms)
    }

    fn is_shared(&self) -> bool {
        LayeredStore::is_shared(self)
    }

    fn is_exclusive(&self) -> bool {
        LayeredStore::is_exclusive(self)
    }

    fn orphan_runs_of_gone_holders(
        &self,
        now_ms: u64,
        gone: GoneHolder,
    ) -> StoreFuture<Vec<String>> {
        LayeredStore::orphan_runs_of_gone_holders(self, now_ms, gone)
    }

    fn load_run(&self, run_id: &str) -> StoreFuture<Option<RunRecord>> {
        LayeredStore::load_run(self, run_id)
    }

    fn list_runs(&self) -> StoreFuture<Vec<RunRecord>> {
        LayeredStore::list_runs(self)
    }

    fn count_runs_by_status(&self) -> StoreFuture<Vec<(RunStatus, u64)>> {
        LayeredStore::count_runs_by_status(self)
    }

    fn count_runs(&self, status: RunStatus) -> StoreFuture<u64> {
        LayeredStore::count_runs(self, status)
    }

    fn list_run_summaries(&self, query: &RunQuery) -> StoreFuture<SummaryPage> {
        LayeredStore::list_run_summaries(self, query)
    }

    fn list_runs_page(&self, query: &RunQuery) -> StoreFuture<RunPage> {
        LayeredStore::list_runs_page(self, query)
    }
}

impl<L: LayeredStore> EventLog for L {
    fn append_events(
        &self,
        run_id: &str,
        events: Vec<std::sync::Arc<Event>>,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        LayeredStore::append_events(self, run_id, events, fence)
    }

    fn load_events(&self, run_id: &str, after_seq: u64) -> StoreFuture<Vec<Event>> {
        LayeredStore::load_events(self, run_id, after_seq)
    }

    fn last_event(&self, run_id: &str) -> StoreFuture<Option<Event>> {
        LayeredStore::last_event(self, run_id)
    }
}

impl<L: LayeredStore> SnapshotStore for L {
    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        LayeredStore::save_snapshot(self, snapshot, fence)
    }

    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        LayeredStore::record_tool_call(self, run_id, record, fence)
    }

    fn load_snapshots(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>> {
        LayeredStore::load_snapshots(self, run_id)
    }

    fn load_snapshot_history(&self, run_id: &str) -> StoreFuture<Vec<Snapshot>> {
        LayeredStore::load_snapshot_history(self, run_id)
    }

    fn load_stored_snapshots(
        &self,
        run_id: &str,
        table: SnapshotTable,
    ) -> StoreFuture<Vec<Snapshot>> {
        LayeredStore::load_stored_snapshots(self, run_id, table)
    }

    fn snapshot_bytes(&self, run_id: &str) -> StoreFuture<u64> {
        LayeredStore::snapshot_bytes(self, run_id)
    }

    fn load_tool_calls(&self, run_id: &str) -> StoreFuture<Vec<ToolCallRecord>> {
        LayeredStore::load_tool_calls(self, run_id)
    }
}

impl<L: LayeredStore> QueueStore for L {
    fn claim_queued(&self, claim: QueueClaim) -> StoreFuture<Vec<RunRecord>> {
        LayeredStore::claim_queued(self, claim)
    }

    fn send_command(&self, run_id: &str, command: RunCommand) -> StoreFuture<u64> {
        LayeredStore::send_command(self, run_id, command)
    }

    fn count_commands(&self, run_id: &str) -> StoreFuture<u64> {
        LayeredStore::count_commands(self, run_id)
    }

    fn take_commands(&self, owner_id: &str) -> StoreFuture<Vec<StoredCommand>> {
        LayeredStore::take_commands(self, owner_id)
    }

    fn count_queued_by_tenant(&self) -> StoreFuture<std::collections::BTreeMap<String, u64>> {
        LayeredStore::count_queued_by_tenant(self)
    }
}

impl<L: LayeredStore> Outbox for L {
    fn take_notices(&self, take: NoticeTake) -> StoreFuture<Vec<Notice>> {
        LayeredStore::take_notices(self, take)
    }

    fn settle_notice(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<Delivery>,
    ) -> StoreFuture<bool> {
        LayeredStore::settle_notice(self, id, held_until_ms, delivery)
    }
}

impl<L: LayeredStore> PaceStore for L {
    fn load_paces(&self) -> StoreFuture<Vec<(String, Pace)>> {
        LayeredStore::load_paces(self)
    }

    fn save_paces(&self, paces: Vec<(String, Option<Pace>)>) -> StoreFuture<()> {
        LayeredStore::save_paces(self, paces)
    }
}

impl<L: LayeredStore> KeyStore for L {
    fn create_api_key(&self, key: ApiKey) -> StoreFuture<()> {
        LayeredStore::create_api_key(self, key)
    }

    fn load_api_key(&self, id: &str) -> StoreFuture<Option<ApiKey>> {
        LayeredStore::load_api_key(self, id)
    }

    fn list_api_keys(&self, tenant: Option<String>) -> StoreFuture<Vec<ApiKey>> {
        LayeredStore::list_api_keys(self, tenant)
    }

    fn revoke_api_key(&self, id: &str, at_ms: u64) -> StoreFuture<Option<ApiKey>> {
        LayeredStore::revoke_api_key(self, id, at_ms)
    }
}

impl<L: LayeredStore> ChangeSource for L {
    fn changes(&self) -> ChangeFeed {
        LayeredStore::changes(self)
    }

    fn flush(&self) -> StoreFuture<()> {
        LayeredStore::flush(self)
    }
}

impl<L: LayeredStore> Retention for L {
    fn purge_finished(&self, rule: PurgeRule) -> StoreFuture<PurgeReport> {
        LayeredStore::purge_finished(self, rule)
    }
}
