//! What the simulation sees of the store and of time: a layer over the
//! shared memory store that watches every write reaching it — a fenced
//! write must carry the run's current fence, and each change that pauses
//! or ends a run is noted, to be told — and a clock that follows tokio's
//! paused time, with a skew and jumps of its own per executor.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use leasehold_actors::{
    Clock, Event, EventLog, Fenced, LayeredStore, MemoryStore, RunStatus, RunStore, RunUpdate,
    Snapshot, SnapshotStore, Store, StoreFuture, ToolCallRecord,
};

/// What the store saw, shared by every executor's layer.
#[derive(Clone, Default)]
pub struct Journal {
    state: Arc<Mutex<Seen>>,
}

#[derive(Default)]
pub struct Seen {
    /// Broken rules, as found.
    pub violations: Vec<String>,
    /// Each change that paused or ended a run: (run, the status taken).
    pub told: Vec<(String, RunStatus)>,
}

impl Journal {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The shared store as one executor reaches it.
pub struct Observed {
    base: MemoryStore,
    owner: String,
    journal: Journal,
}

impl Observed {
    pub fn new(base: MemoryStore, owner: &str, journal: Journal) -> Self {
        Self {
            base,
            owner: owner.to_owned(),
            journal,
        }
    }

    /// Makes a fenced `write` of `what` on `run_id` with `fence`, and notes
    /// it if it landed although the run's fence was another.
    fn fenced(
        &self,
        what: &str,
        run_id: &str,
        fence: u64,
        write: impl FnOnce(&MemoryStore) -> StoreFuture<Fenced<()>>,
    ) -> StoreFuture<Fenced<()>> {
        let before = self.base.run(run_id).map(|r| (r.fence, r.status));
        // The memory store writes when called: `after` is the write's.
        let landed = write(&self.base);
        let after = self.base.run(run_id).map(|r| (r.fence, r.status));
        let journal = self.journal.clone();
        let (owner, what, run_id) = (self.owner.clone(), what.to_owned(), run_id.to_owned());
        Box::pin(async move {
            let outcome = landed.await;
            if matches!(outcome, Ok(Fenced::Applied(()))) {
                let mut seen = journal.lock();
                if let Some((current, _)) = before
                    && current != fence
                {
                    seen.violations.push(format!(
                        "single holder: {owner} {what} on {run_id} with fence {fence} landed \
                         while the run's fence was {current}"
                    ));
                }
                if let (Some((_, was)), Some((_, now))) = (before, after)
                    && now != was
                    && (now.is_paused() || now.is_terminal())
                {
                    seen.told.push((run_id, now));
                }
            }
            outcome
        })
    }
}

impl LayeredStore for Observed {
    fn inner(&self) -> &dyn Store {
        &self.base
    }

    fn renew_run(
        &self,
        run_id: &str,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> StoreFuture<Fenced<()>> {
        self.fenced("renewed the lease", run_id, fence, |store| {
            store.renew_run(run_id, fence, now_ms, ttl_ms)
        })
    }

    fn update_run(&self, run_id: &str, fence: u64, update: RunUpdate) -> StoreFuture<Fenced<()>> {
        let status = update.status.name();
        self.fenced(&format!("recorded {status}"), run_id, fence, |store| {
            store.update_run(run_id, fence, update)
        })
    }

    fn append_events(
        &self,
        run_id: &str,
        events: Vec<std::sync::Arc<Event>>,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        self.fenced("appended events", run_id, fence, |store| {
            store.append_events(run_id, events, fence)
        })
    }

    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        let run_id = snapshot.run_id.clone();
        self.fenced("saved a snapshot", &run_id, fence, |store| {
            store.save_snapshot(snapshot, fence)
        })
    }

    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        self.fenced("recorded a tool call", run_id, fence, |store| {
            store.record_tool_call(run_id, record, fence)
        })
    }
}

/// An executor's wall clock: tokio's paused time since the simulation
/// began, from a fixed epoch, plus the executor's skew and jumps.
#[derive(Clone)]
pub struct SimClock {
    epoch_ms: u64,
    start: tokio::time::Instant,
    offset_ms: Arc<AtomicI64>,
}

impl SimClock {
    pub fn new(epoch_ms: u64, start: tokio::time::Instant, offset_ms: i64) -> Self {
        Self {
            epoch_ms,
            start,
            offset_ms: Arc::new(AtomicI64::new(offset_ms)),
        }
    }

    /// Moves this clock by `by_ms` (back if negative).
    pub fn jump(&self, by_ms: i64) {
        self.offset_ms.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now_unix_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.epoch_ms
            .saturating_add(elapsed)
            .saturating_add_signed(self.offset_ms.load(Ordering::SeqCst))
    }
}
