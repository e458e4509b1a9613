//! `MemoryStore`: the [`Store`](crate::Store) port in memory, each of its
//! parts in an `impl` of its own, with the same fencing rules as the
//! durable stores. Nothing survives the process: it is the engine's
//! default when no store is given, and the store of fast tests.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::event::Event;
use crate::ports::{
    ChangeFeed, ChangeHub, ChangeSource, ClaimOutcome, Delivery, EventLog, Fenced, IdempotencyKey,
    KeptKey, KeyStore, KeyedCreation, Notice, NoticeTake, Outbox, PaceStore, PurgeReport,
    PurgeRule, QueueClaim, QueueStore, Retention, RunCommand, RunPage, RunQuery, RunRecord,
    RunStatus, RunStore, RunUpdate, Snapshot, SnapshotStore, SnapshotTable, StatusCounts,
    StoreChange, StoreError, StoreFuture, StoredCommand, SummaryPage, ToolCallRecord, fencing,
    history, listing, outbox, retention,
};

/// A store in memory. Cheap to clone; clones share the data.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Tables>>,
    changes: ChangeHub,
}

#[derive(Default)]
struct Tables {
    /// Written only through [`Tables::put`] and [`Tables::remove`], which
    /// keep `counts` and `queued` with it.
    runs: BTreeMap<String, RunRecord>,
    /// How many runs are in each status: counted as they change, so that
    /// counting reads none.
    counts: StatusCounts,
    /// The queued runs' ids, ascending: a claim walks the queue, not every
    /// run.
    queued: BTreeSet<String>,
    order: Vec<String>,
    /// Each loop's latest snapshot, shared with its entry in `history`.
    snapshots: crate::hash::Map<(String, String), Arc<Kept>>,
    /// Every snapshot saved, by run, in the order saved.
    history: crate::hash::Map<String, Vec<Arc<Kept>>>,
    tool_calls: HashMap<String, BTreeMap<String, ToolCallRecord>>,
    /// Each run's log: the events its readers were given, shared, not
    /// copies.
    events: crate::hash::Map<String, Vec<Arc<Event>>>,
    snapshot_writes: u64,
    /// How many times the outbox was taken from.
    notice_takes: u64,
    commands: BTreeMap<u64, StoredCommand>,
    next_command: u64,
    /// The outbox: notices by id.
    notices: BTreeMap<u64, Notice>,
    next_notice: u64,
    paces: BTreeMap<String, crate::pace::Pace>,
    /// The idempotency keys given to creations, by key.
    keys: HashMap<String, KeptKey>,
    /// The API keys, by id.
    api_keys: BTreeMap<String, crate::tenancy::ApiKey>,
    /// How many of the next writes of an end fail (test-util).
    failing_ends: u32,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells of a run created (and queued).
    fn created(&self, run_id: String, queued: bool) {
        self.changes.publish(StoreChange::Run { run_id });
        if queued {
            self.changes.publish(StoreChange::Queued);
        }
    }

    /// Makes the next `n` writes of a run's end (a terminal status) fail
    /// with a store error, as a lost connection would: for tests of what a
    /// run does when its end cannot be written.
    #[cfg(any(test, feature = "test-util"))]
    pub fn fail_next_ends(&self, n: u32) {
        self.lock().failing_ends = n;
    }

    /// The latest snapshot of a loop, whole; `None` when it has none or
    /// its history cannot rebuild it.
    pub fn snapshot(&self, run_id: &str, path: &str) -> Option<Snapshot> {
        let tables = self.lock();
        let latest = tables
            .snapshots
            .get(&(run_id.to_owned(), path.to_owned()))?
            .whole();
        if latest.base.is_none() {
            return Some(latest);
        }
        let mut lineage = history::Lineage::of([(
            run_id.to_owned(),
            tables.stored(run_id, SnapshotTable::History),
        )]);
        loop {
            let missing = lineage.missing();
            if missing.is_empty() {
                break;
            }
            for run in missing {
                let stored = tables.stored(&run, SnapshotTable::History);
                lineage.add(run, stored);
            }
        }
        lineage.whole(latest).ok()
    }

    /// Drops what is kept of a run but what fences it: its events,
    /// snapshots and tool calls, and its record's flow, answer, reason and
    /// pause; its status, owner, fence and lease stay, so that a late
    /// heartbeat or release of the run is fenced as before. For a caller
    /// that plays many runs one after another and reads none of them again
    /// (an experiment): what the store holds of each is then a few hundred
    /// bytes.
    pub fn forget(&self, run_id: &str) {
        let mut tables = self.lock();
        if let Some(record) = tables.runs.get_mut(run_id) {
            record.flow = serde_json::Value::Null;
            record.answer = None;
            record.reason = None;
            record.pause = None;
        }
        tables.snapshots.retain(|(run, _), _| run != run_id);
        tables.history.remove(run_id);
        tables.tool_calls.remove(run_id);
        tables.events.remove(run_id);
    }

    /// A run's record.
    pub fn run(&self, run_id: &str) -> Option<RunRecord> {
        self.lock().runs.get(run_id).cloned()
    }

    /// A run's recorded tool calls.
    pub fn tool_calls(&self, run_id: &str) -> Vec<ToolCallRecord> {
        self.lock()
            .tool_calls
            .get(run_id)
            .map(|calls| calls.values().cloned().collect())
            .unwrap_or_default()
    }

    /// A run's logged events, in `seq` order.
    pub fn events(&self, run_id: &str) -> Vec<Event> {
        // Each log is kept in `seq` order.
        self.lock()
            .events
            .get(run_id)
            .map(|log| log.iter().map(|event| Event::clone(event)).collect())
            .unwrap_or_default()
    }

    /// Every run's id, oldest first.
    pub fn list_ids(&self) -> Vec<String> {
        self.lock().order.clone()
    }

    /// How many snapshot writes landed.
    pub fn writes(&self) -> u64 {
        self.lock().snapshot_writes
    }

    /// How many times the outbox was taken from (every take, due notices
    /// or not): what a deliverer costs a store while nothing is due.
    pub fn notice_takes(&self) -> u64 {
        self.lock().notice_takes
    }

    /// How many entries the store holds in all, of every run: records,
    /// snapshots, tool-call records, events, commands and notices. What a test of
    /// retention reads to see that a purge left nothing behind.
    pub fn entries(&self) -> usize {
        let tables = self.lock();
        tables.runs.len()
            + tables.order.len()
            + tables.snapshots.len()
            + tables.history.values().map(Vec::len).sum::<usize>()
            + tables.tool_calls.values().map(BTreeMap::len).sum::<usize>()
            + tables.events.values().map(Vec::len).sum::<usize>()
            + tables.commands.len()
            + tables.notices.len()
    }

    /// Replaces, under one hold of the lock, the records `rule` changes,
    /// walking the runs by id and stopping after `max` changes; returns the
    /// changed records.
    fn change_each(
        &self,
        max: usize,
        queued_only: bool,
        mut room: crate::keyed_limits::ClaimRoom,
        mut rule: impl FnMut(&RunRecord) -> Option<RunRecord>,
    ) -> Vec<RunRecord> {
        let mut tables = self.lock();
        let changed: Vec<RunRecord> = if queued_only {
            let tables = &*tables;
            // In fair turns across tenants.
            let queued = tables.queued.iter().filter_map(|id| tables.runs.get(id));
            let entries = queued
                .map(|r| Ok::<_, std::convert::Infallible>((r.run_id.clone(), r.tenant.clone())));
            // Under keyed limits, runs may be skipped: the whole queue in
            // order, else only its first `max`.
            let considered = if room.is_unlimited() { max } else { usize::MAX };
            let mut running = BTreeMap::new();
            for record in tables.runs.values() {
                if record.status == RunStatus::Running {
                    let tenant = crate::tenancy::tenant_or_default(record.tenant.as_deref());
                    *running.entry(tenant.to_owned()).or_insert(0) += 1;
                }
            }
            let Ok(order) = crate::tenancy::fair_order(entries, &running, considered);
            order
                .iter()
                .filter_map(|id| tables.runs.get(id))
                .filter_map(|record| {
                    let claimed = rule(record)?;
                    (room.is_unlimited() || room.take(&record.labels())).then_some(claimed)
                })
                .take(max)
                .collect()
        } else {
            tables
                .runs
                .values()
                .filter_map(&mut rule)
                .take(max)
                .collect()
        };
        let kept: Vec<bool> = changed
            .iter()
            .map(|record| {
                tables
                    .put(record.clone())
                    .is_some_and(|before| tables.keep_notice(before.status, record))
            })
            .collect();
        drop(tables);
        for (record, kept) in changed.iter().zip(kept) {
            self.publish_change_of(&record.run_id, kept);
        }
        changed
    }

    /// Runs `f` on the run's record under the lock, if `fence` is current.
    fn fenced<T>(
        &self,
        run_id: &str,
        fence: u64,
        f: impl FnOnce(&mut Tables) -> T,
    ) -> Result<Fenced<T>, StoreError> {
        let mut tables = self.lock();
        let record = tables
            .runs
            .get(run_id)
            .ok_or_else(|| StoreError::not_found(format!("no run `{run_id}`")))?;
        Ok(match fencing::check(record, fence) {
            Fenced::Applied(()) => Fenced::Applied(f(&mut tables)),
            Fenced::Stale { fence, owner_id } => Fenced::Stale { fence, owner_id },
        })
    }
}

impl MemoryStore {
    /// Publishes the change of run `run_id`'s record, and then, if the
    /// change `kept` a notice, that notice. Called with the tables' lock
    /// released.
    fn publish_change_of(&self, run_id: &str, kept: bool) {
        self.changes.publish(StoreChange::Run {
            run_id: run_id.to_owned(),
        });
        if kept {
            self.changes.publish(StoreChange::Notice {
                run_id: run_id.to_owned(),
            });
        }
    }

    /// Publishes `change` if `outcome` says the write landed, then answers
    /// it. Called with the tables' lock released, so a subscriber that
    /// reads at once sees the write.
    fn publish_if_applied(
        &self,
        outcome: Result<Fenced<()>, StoreError>,
        change: StoreChange,
    ) -> StoreFuture<Fenced<()>> {
        if matches!(outcome, Ok(Fenced::Applied(()))) {
            self.changes.publish(change);
        }
        ready(outcome)
    }
}

impl Tables {
    /// Creates the run `record`: its id and whether it is queued, or a
    /// conflict if it exists.
    fn create(&mut self, record: RunRecord) -> Result<(String, bool), StoreError> {
        if self.runs.contains_key(&record.run_id) {
            return Err(StoreError::conflict(format!(
                "run `{}` already exists",
                record.run_id
            )));
        }
        let run_id = record.run_id.clone();
        let queued = record.status == RunStatus::Queued;
        self.order.push(run_id.clone());
        self.put(record);
        Ok((run_id, queued))
    }

    /// Writes `record`, its status counted and queued as it says; answers
    /// the record it replaced.
    fn put(&mut self, record: RunRecord) -> Option<RunRecord> {
        let run_id = record.run_id.clone();
        let status = record.status;
        let before = self.runs.insert(run_id.clone(), record);
        let was = before.as_ref().map(|before| before.status);
        self.counts.moved(was, Some(status));
        if was == Some(RunStatus::Queued) && status != RunStatus::Queued {
            self.queued.remove(&run_id);
        } else if status == RunStatus::Queued {
            self.queued.insert(run_id);
        }
        before
    }

    /// Deletes the record of `run_id`, uncounted.
    fn remove(&mut self, run_id: &str) {
        if let Some(record) = self.runs.remove(run_id) {
            self.counts.moved(Some(record.status), None);
            self.queued.remove(run_id);
        }
    }

    /// Keeps the notice the change from `before` to `after` makes, if any;
    /// says whether it kept one.
    fn keep_notice(&mut self, before: RunStatus, after: &RunRecord) -> bool {
        let Some(mut notice) = outbox::notice_of(before, after) else {
            return false;
        };
        self.next_notice += 1;
        notice.id = self.next_notice;
        self.notices.insert(notice.id, notice);
        true
    }
}

fn ready<T: Send + 'static>(value: Result<T, StoreError>) -> StoreFuture<T> {
    Box::pin(std::future::ready(value))
}

impl RunStore for MemoryStore {
    fn create_run_keyed(
        &self,
        record: RunRecord,
        key: IdempotencyKey,
    ) -> StoreFuture<KeyedCreation> {
        // One lock for the key and the run: no other creation between.
        let mut tables = self.lock();
        if let Some(kept) = tables.keys.get(&key.key)
            && kept.holds_for(&key)
            && tables.runs.contains_key(&kept.run_id)
        {
            return ready(Ok(kept.existing()));
        }
        let kept = KeptKey::of(&record.run_id, &key);
        let created = tables.create(record);
        if created.is_ok() {
            tables.keys.insert(key.key, kept);
        }
        drop(tables);
        ready(created.map(|(run_id, queued)| {
            self.created(run_id, queued);
            KeyedCreation::Created
        }))
    }

    fn create_run(&self, record: RunRecord) -> StoreFuture<()> {
        let created = self.lock().create(record);
        ready(created.map(|(run_id, queued)| self.created(run_id, queued)))
    }

    fn claim_run(
        &self,
        run_id: &str,
        owner_id: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<ClaimOutcome> {
        let mut tables = self.lock();
        let outcome = match tables.runs.get(run_id) {
            None => ClaimOutcome::NotFound,
            Some(record) => match fencing::claim(record, owner_id, now_ms, ttl_ms) {
                Ok(claimed) => {
                    tables.put(claimed.clone());
                    ClaimOutcome::Claimed(claimed)
                }
                Err(refused) => refused,
            },
        };
        drop(tables);
        if matches!(outcome, ClaimOutcome::Claimed(_)) {
            self.changes.publish(StoreChange::Run {
                run_id: run_id.to_owned(),
            });
        }
        ready(Ok(outcome))
    }

    fn renew_run(
        &self,
        run_id: &str,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<Fenced<()>> {
        let mut tables = self.lock();
        let Some(record) = tables.runs.get(run_id) else {
            return ready(Err(StoreError::not_found(format!("no run `{run_id}`"))));
        };
        let outcome = match fencing::renew(record, fence, now_ms, ttl_ms) {
            Ok(renewed) => {
                tables.put(renewed);
                Fenced::Applied(())
            }
            Err(stale) => stale,
        };
        ready(Ok(outcome))
    }

    fn update_run(&self, run_id: &str, fence: u64, update: RunUpdate) -> StoreFuture<Fenced<()>> {
        let mut tables = self.lock();
        if update.status.is_terminal() && tables.failing_ends > 0 {
            tables.failing_ends -= 1;
            return ready(Err(StoreError::unavailable(
                "the connection to the store was lost",
            )));
        }
        let Some(record) = tables.runs.get(run_id) else {
            return ready(Err(StoreError::not_found(format!("no run `{run_id}`"))));
        };
        let (outcome, kept) = match fencing::update(record, fence, &update) {
            Ok(updated) => {
                let before = record.status;
                let kept = tables.keep_notice(before, &updated);
                tables.put(updated);
                (Fenced::Applied(()), kept)
            }
            Err(stale) => (stale, false),
        };
        drop(tables);
        if outcome.is_applied() {
            self.publish_change_of(run_id, kept);
        }
        ready(Ok(outcome))
    }

    fn reconcile_orphans(&self, now_ms: u64) -> StoreFuture<Vec<String>> {
        let orphaned = self.change_each(usize::MAX, false, Default::default(), |record| {
            fencing::orphan(record, now_ms)
        });
        ready(Ok(orphaned.into_iter().map(|r| r.run_id).collect()))
    }

    fn load_run(&self, run_id: &str) -> StoreFuture<Option<RunRecord>> {
        ready(Ok(self.run(run_id)))
    }

    fn list_runs(&self) -> StoreFuture<Vec<RunRecord>> {
        let tables = self.lock();
        let runs = tables
            .order
            .iter()
            .filter_map(|id| tables.runs.get(id).cloned())
            .collect();
        ready(Ok(runs))
    }

    /// Summarized under the lock, one record copied at a time: a page
    /// never holds whole runs.
    fn list_run_summaries(&self, query: &RunQuery) -> StoreFuture<SummaryPage> {
        use std::ops::Bound::{Excluded, Unbounded};
        let tables = self.lock();
        let upper = query.after.as_deref().map_or(Unbounded, Excluded);
        let candidates = tables
            .runs
            .range::<str, _>((Unbounded, upper))
            .rev()
            .filter(|(_, record)| listing::matches(query, record))
            .map(|(_, record)| Ok::<_, StoreError>(record.clone()));
        ready(listing::summaries(query, candidates))
    }

    fn count_runs_by_status(&self) -> StoreFuture<Vec<(RunStatus, u64)>> {
        ready(Ok(self.lock().counts.by_status()))
    }

    fn count_runs(&self, status: RunStatus) -> StoreFuture<u64> {
        ready(Ok(self.lock().counts.get(status)))
    }

    fn list_runs_page(&self, query: &RunQuery) -> StoreFuture<RunPage> {
        use std::ops::Bound::{Excluded, Unbounded};
        let tables = self.lock();
        // The runs are kept by id: a range below the cursor, walked down.
        let upper = query.after.as_deref().map_or(Unbounded, Excluded);
        let candidates = tables
            .runs
            .range::<str, _>((Unbounded, upper))
            .rev()
            .filter(|(_, record)| listing::matches(query, record))
            .map(|(_, record)| Ok::<_, StoreError>(record.clone()));
        ready(listing::page(query, candidates))
    }
}

impl EventLog for MemoryStore {
    fn append_events(
        &self,
        run_id: &str,
        events: Vec<Arc<Event>>,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        let appended = self.fenced(run_id, fence, |tables| {
            // Looked up before it is made: the run's id is copied once.
            let log = match tables.events.get_mut(run_id) {
                Some(log) => log,
                None => tables.events.entry(run_id.to_owned()).or_default(),
            };
            // An append tried again after an error that hid its success
            // adds nothing twice: a log holds each seq once, in `seq`
            // order, however a little out of order its events came.
            for event in events {
                // Nearly always after the last: pushed without a search.
                if log.last().is_none_or(|last| last.seq < event.seq) {
                    log.push(event);
                } else if let Err(at) = log.binary_search_by_key(&event.seq, |e| e.seq) {
                    log.insert(at, event);
                }
            }
        });
        let run_id = run_id.to_owned();
        self.publish_if_applied(appended, StoreChange::Events { run_id })
    }

    fn load_events(&self, run_id: &str, after_seq: u64) -> StoreFuture<Vec<Event>> {
        let events = self.lock().events.get(run_id).map_or_else(Vec::new, |log| {
            let from = log.partition_point(|event| event.seq <= after_seq);
            log[from..]
                .iter()
                .map(|event| Event::clone(event))
                .collect()
        });
        ready(Ok(events))
    }
}

impl SnapshotStore for MemoryStore {
    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        let run_id = snapshot.run_id.clone();
        let snapshot = match history::stored(snapshot) {
            Ok(snapshot) => snapshot,
            Err(error) => return ready(Err(error)),
        };
        ready(self.fenced(&run_id, fence, |tables| {
            tables.snapshot_writes += 1;
            let key = (snapshot.run_id.clone(), snapshot.path.clone());
            let snapshot = Arc::new(Kept::new(snapshot));
            let kept = tables.history.entry(key.0.clone()).or_default();
            // A place is kept once, as a store keyed by it keeps it.
            kept.retain(|s| (s.seq, &s.path) != (snapshot.seq, &snapshot.path));
            kept.push(Arc::clone(&snapshot));
            tables.snapshots.insert(key, snapshot);
        }))
    }

    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        ready(self.fenced(run_id, fence, |tables| {
            tables
                .tool_calls
                .entry(run_id.to_owned())
                .or_default()
                .insert(record.key.clone(), record);
        }))
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
        ready(Ok(self.lock().stored(run_id, table)))
    }

    fn snapshot_bytes(&self, run_id: &str) -> StoreFuture<u64> {
        let tables = self.lock();
        let stored = [SnapshotTable::Latest, SnapshotTable::History]
            .into_iter()
            .flat_map(|table| tables.stored(run_id, table));
        let mut bytes = 0_u64;
        for snapshot in stored {
            let encoded = match serde_json::to_vec(&snapshot) {
                Ok(encoded) => encoded,
                Err(e) => {
                    return ready(Err(StoreError::failed(format!(
                        "measuring the snapshots of run `{run_id}`: {e}"
                    ))));
                }
            };
            bytes = bytes.saturating_add(u64::try_from(encoded.len()).unwrap_or(u64::MAX));
        }
        ready(Ok(bytes))
    }

    fn load_tool_calls(&self, run_id: &str) -> StoreFuture<Vec<ToolCallRecord>> {
        ready(Ok(self.tool_calls(run_id)))
    }
}

/// A snapshot as the memory store keeps it: its state as JSON text, not
/// a tree of [`serde_json::Value`]s, which holds three to four times the
/// bytes of its text (a string and a value for each key, a node for each
/// value); read back whole, as the durable stores read theirs.
struct Kept {
    /// The snapshot, its state taken out (`null`).
    snapshot: Snapshot,
    state: Box<str>,
}

impl Kept {
    fn new(mut snapshot: Snapshot) -> Self {
        let state = std::mem::take(&mut snapshot.state).to_string();
        Self {
            snapshot,
            state: state.into_boxed_str(),
        }
    }

    /// The snapshot with its state.
    fn whole(&self) -> Snapshot {
        let mut snapshot = self.snapshot.clone();
        snapshot.state = serde_json::from_str(&self.state)
            .unwrap_or_else(|e| unreachable!("JSON this store wrote reads back: {e}"));
        snapshot
    }
}

impl std::ops::Deref for Kept {
    type Target = Snapshot;

    /// The snapshot without its state.
    fn deref(&self) -> &Snapshot {
        &self.snapshot
    }
}

impl Tables {
    /// A run's snapshots as kept, of `table`, in its order.
    fn stored(&self, run_id: &str, table: SnapshotTable) -> Vec<Snapshot> {
        match table {
            SnapshotTable::Latest => {
                let mut latest: Vec<Snapshot> = self
                    .snapshots
                    .values()
                    .filter(|s| s.run_id == run_id)
                    .map(|s| s.whole())
                    .collect();
                latest.sort_by(|a, b| a.path.cmp(&b.path));
                latest
            }
            _ => {
                let mut history: Vec<Snapshot> = self
                    .history
                    .get(run_id)
                    .into_iter()
                    .flatten()
                    .map(|s| s.whole())
                    .collect();
                history.sort_by(|a, b| (a.seq, &a.path).cmp(&(b.seq, &b.path)));
                history
            }
        }
    }

    /// The runs another run's history continues from (a fork's parents).
    fn continued(&self) -> std::collections::HashSet<&str> {
        self.history
            .values()
            .flatten()
            .filter_map(|s| s.base.as_ref().filter(|b| b.run_id != s.run_id))
            .map(|b| b.run_id.as_str())
            .collect()
    }
}

impl QueueStore for MemoryStore {
    fn count_queued_by_tenant(&self) -> StoreFuture<BTreeMap<String, u64>> {
        let tables = self.lock();
        let mut counts = BTreeMap::new();
        for record in tables.queued.iter().filter_map(|id| tables.runs.get(id)) {
            let tenant = crate::tenancy::tenant_or_default(record.tenant.as_deref());
            *counts.entry(tenant.to_owned()).or_insert(0) += 1;
        }
        ready(Ok(counts))
    }

    fn claim_queued(&self, claim: QueueClaim) -> StoreFuture<Vec<RunRecord>> {
        // By id, ascending: oldest first, down the queue alone.
        let claimed = self.change_each(claim.max, true, claim.room.clone(), |record| {
            fencing::claim_queued(record, &claim)
        });
        ready(Ok(claimed))
    }

    fn send_command(&self, run_id: &str, command: RunCommand) -> StoreFuture<u64> {
        let mut tables = self.lock();
        if !tables.runs.contains_key(run_id) {
            return ready(Err(StoreError::not_found(format!("no run `{run_id}`"))));
        }
        tables.next_command = tables.next_command.saturating_add(1);
        let id = tables.next_command;
        let run_id = run_id.to_owned();
        tables.commands.insert(
            id,
            StoredCommand {
                id,
                run_id: run_id.clone(),
                command,
            },
        );
        drop(tables);
        self.changes.publish(StoreChange::Command { run_id });
        ready(Ok(id))
    }

    fn count_commands(&self, run_id: &str) -> StoreFuture<u64> {
        let tables = self.lock();
        let count = tables
            .commands
            .values()
            .filter(|command| command.run_id == run_id)
            .count();
        ready(Ok(u64::try_from(count).unwrap_or(u64::MAX)))
    }

    fn take_commands(&self, owner_id: &str) -> StoreFuture<Vec<StoredCommand>> {
        let mut tables = self.lock();
        let Tables { runs, commands, .. } = &mut *tables;
        let held = |command: &StoredCommand| {
            runs.get(&command.run_id)
                .is_some_and(|run| run.owner_id.as_deref() == Some(owner_id))
        };
        let ids: Vec<u64> = commands
            .values()
            .filter(|command| held(command))
            .map(|command| command.id)
            .collect();
        let taken = ids.iter().filter_map(|id| commands.remove(id)).collect();
        ready(Ok(taken))
    }
}

impl Outbox for MemoryStore {
    fn take_notices(&self, take: NoticeTake) -> StoreFuture<Vec<Notice>> {
        let mut tables = self.lock();
        tables.notice_takes += 1;
        let due: Vec<u64> = tables
            .notices
            .values()
            .filter(|notice| outbox::is_due(notice, &take))
            .take(take.max)
            .map(|notice| notice.id)
            .collect();
        let mut taken = Vec::with_capacity(due.len());
        for id in due {
            if let Some(notice) = tables.notices.get_mut(&id) {
                *notice = outbox::held(notice.clone(), &take);
                taken.push(notice.clone());
            }
        }
        ready(Ok(taken))
    }

    fn settle_notice(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<Delivery>,
    ) -> StoreFuture<bool> {
        let mut tables = self.lock();
        let held = tables
            .notices
            .get(&id)
            .is_some_and(|notice| notice.delivery.due_at_ms == held_until_ms);
        if held {
            match delivery {
                None => {
                    tables.notices.remove(&id);
                }
                Some(delivery) => {
                    if let Some(notice) = tables.notices.get_mut(&id) {
                        notice.delivery = delivery;
                    }
                }
            }
        }
        ready(Ok(held))
    }
}

impl PaceStore for MemoryStore {
    fn load_paces(&self) -> StoreFuture<Vec<(String, crate::pace::Pace)>> {
        let tables = self.lock();
        let paces = tables
            .paces
            .iter()
            .map(|(key, pace)| (key.clone(), pace.clone()))
            .collect();
        ready(Ok(paces))
    }

    fn save_paces(&self, paces: Vec<(String, Option<crate::pace::Pace>)>) -> StoreFuture<()> {
        let mut tables = self.lock();
        for (key, pace) in paces {
            match pace {
                Some(pace) => tables.paces.insert(key, pace),
                None => tables.paces.remove(&key),
            };
        }
        ready(Ok(()))
    }
}

impl KeyStore for MemoryStore {
    fn create_api_key(&self, key: crate::tenancy::ApiKey) -> StoreFuture<()> {
        let mut tables = self.lock();
        if tables.api_keys.contains_key(&key.id) {
            return ready(Err(StoreError::invalid(format!(
                "an API key of id `{}` is kept already",
                key.id
            ))));
        }
        tables.api_keys.insert(key.id.clone(), key);
        ready(Ok(()))
    }

    fn load_api_key(&self, id: &str) -> StoreFuture<Option<crate::tenancy::ApiKey>> {
        ready(Ok(self.lock().api_keys.get(id).cloned()))
    }

    fn list_api_keys(&self, tenant: Option<String>) -> StoreFuture<Vec<crate::tenancy::ApiKey>> {
        let tables = self.lock();
        let keys = tables
            .api_keys
            .values()
            .filter(|key| tenant.as_ref().is_none_or(|t| key.tenant == *t))
            .cloned()
            .collect();
        ready(Ok(keys))
    }

    fn revoke_api_key(&self, id: &str, at_ms: u64) -> StoreFuture<Option<crate::tenancy::ApiKey>> {
        let mut tables = self.lock();
        let key = tables.api_keys.get_mut(id).map(|key| {
            key.revoked_at_ms.get_or_insert(at_ms);
            key.clone()
        });
        ready(Ok(key))
    }
}

impl ChangeSource for MemoryStore {
    fn changes(&self) -> ChangeFeed {
        self.changes.subscribe()
    }

    fn flush(&self) -> StoreFuture<()> {
        ready(Ok(()))
    }
}

impl Retention for MemoryStore {
    fn purge_finished(&self, rule: PurgeRule) -> StoreFuture<PurgeReport> {
        let mut tables = self.lock();
        let continued = tables.continued();
        let due: Vec<String> = tables
            .runs
            .values()
            .filter(|record| retention::expired(record, &rule))
            // A run a fork's history continues from stays until the fork
            // is purged (docs/fork-and-replay.md).
            .filter(|record| !continued.contains(record.run_id.as_str()))
            .take(rule.limit.max(1))
            .map(|record| record.run_id.clone())
            .collect();
        if !due.is_empty() {
            let gone: std::collections::HashSet<&str> = due.iter().map(String::as_str).collect();
            for run_id in &due {
                tables.remove(run_id);
            }
            let Tables {
                order,
                snapshots,
                history,
                tool_calls,
                events,
                commands,
                notices,
                keys,
                ..
            } = &mut *tables;
            keys.retain(|_, kept| !gone.contains(kept.run_id.as_str()));
            notices.retain(|_, notice| !gone.contains(notice.run_id.as_str()));
            history.retain(|run, _| !gone.contains(run.as_str()));
            order.retain(|id| !gone.contains(id.as_str()));
            snapshots.retain(|(run, _), _| !gone.contains(run.as_str()));
            tool_calls.retain(|run, _| !gone.contains(run.as_str()));
            events.retain(|run, _| !gone.contains(run.as_str()));
            commands.retain(|_, command| !gone.contains(command.run_id.as_str()));
        }
        drop(tables);
        for run_id in &due {
            self.changes.publish(StoreChange::Run {
                run_id: run_id.clone(),
            });
        }
        ready(Ok(PurgeReport::of(due, rule.limit)))
    }
}
