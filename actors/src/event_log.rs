//! The event log: every event of a run, appended to the store with the
//! run's fence, so a finished run can be replayed and a reader can resume
//! after an event id.
//!
//! The engine's sink publishes each event on its bus and hands it to one
//! writer task, which appends events in batches: one store write per run
//! per batch, the runs' writes at once (polled together, not a task each), so the log keeps up with many runs
//! on a store a round trip away. A run's terminal flush goes through the
//! same task, after the run's last event, and the run records its end only
//! once it returned, so "the run ended" is never durable before its events.
//! Events of a run this executor lost carry a stale fence and do not land.
//!
//! # The cap on a run's log
//!
//! Once a run's log holds [`EventLimits::max_run_events`] events, the sink
//! counts the events of [droppable](EventKind::is_droppable) kinds instead of
//! publishing them: no reader, no user sink and no store sees them. The
//! first one dropped is said at once by an `events_dropped` event, the rest
//! by one more before the run ends or pauses. Every other kind is published
//! past the cap: a run's log never loses what its state, its resumption or
//! its trace are read from. The count is the run's position in its log, so
//! a resumed run goes on from what its log already holds.
//!
//! [`EventLimits::max_run_events`]: crate::EventLimits::max_run_events

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::event::{Event, EventBus, EventKind};
use crate::pace::PaceBook;
use crate::ports::{EventSink, Fenced, Store, StoreError};
use crate::store_writes::{StoreHealth, StoreWrites};

/// What the writer task is told.
pub(crate) enum LogItem {
    Register(String, LogEntry),
    Event(Arc<Event>),
    /// The run's last events: answered once they are durable (`true`), or
    /// once the store refused them past the run's patience (`false`).
    /// An empty run id flushes every run's written events and the store.
    Flush(String, oneshot::Sender<bool>),
    /// The run's events so far, written and the store durable before the
    /// run acts on what they say (a verdict that stops an operation): like
    /// a flush, but the run goes on being logged.
    Sync(String, oneshot::Sender<bool>),
    /// The run stopped here without an end of its own (this executor lost
    /// it to another, or let it go): forget its fence, its position and
    /// the events not yet written, if the fence is still the one given (a
    /// later claim of the run registered its own).
    Forget(String, Arc<AtomicU64>),
}

/// What the writer keeps of a run it logs.
pub(crate) struct LogEntry {
    /// The fence the run is held with.
    pub(crate) fence: Arc<AtomicU64>,
    /// The run's count of store errors.
    pub(crate) errors: Arc<AtomicU64>,
    /// Told once when the run's events cannot be written: the error, after
    /// the run's patience ([`StoreWrites::retry_for`]) or at once if it is
    /// permanent.
    pub(crate) give_up: Box<dyn Fn(StoreError) + Send + Sync>,
}

/// The engine's sink: the bus, a user's sink if any, and the log, within
/// the cap on each run's log.
pub(crate) struct LoggingSink {
    bus: EventBus,
    user: Option<Arc<dyn EventSink>>,
    log: mpsc::UnboundedSender<LogItem>,
    max_run_events: u64,
    /// The runs whose log is full, with what was dropped and not yet said.
    dropped: Mutex<HashMap<String, Dropped>>,
}

/// What a full log dropped of one run.
#[derive(Default)]
struct Dropped {
    /// Counts by kind, since the last `events_dropped`.
    unsaid: BTreeMap<String, u64>,
}

impl LoggingSink {
    pub(crate) fn new(
        bus: EventBus,
        user: Option<Arc<dyn EventSink>>,
        log: mpsc::UnboundedSender<LogItem>,
        max_run_events: u64,
    ) -> Self {
        Self {
            bus,
            user,
            log,
            max_run_events,
            dropped: Mutex::new(HashMap::new()),
        }
    }

    fn dropped(&self) -> std::sync::MutexGuard<'_, HashMap<String, Dropped>> {
        self.dropped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, run_id: &str, path: &str, kind: EventKind) {
        if let Some(user) = &self.user {
            user.emit(run_id, path, kind.clone());
        }
        let event = self.bus.publish(run_id, path, kind);
        let _ = self.log.send(LogItem::Event(event));
    }

    fn say(&self, run_id: &str, path: &str, dropped: BTreeMap<String, u64>) {
        self.publish(
            run_id,
            path,
            EventKind::EventsDropped {
                dropped,
                max_run_events: self.max_run_events,
            },
        );
    }
}

impl EventSink for LoggingSink {
    fn emit(&self, run_id: &str, path: &str, kind: EventKind) {
        if kind.is_droppable() && self.bus.position(run_id) >= self.max_run_events {
            // Said at once the first time, so a reader knows the log is
            // full; counted quietly after that.
            let first = {
                let mut runs = self.dropped();
                let first = !runs.contains_key(run_id);
                let run = runs.entry(run_id.to_owned()).or_default();
                *run.unsaid.entry(kind.name().to_owned()).or_default() += 1;
                first.then(|| std::mem::take(&mut run.unsaid))
            };
            if let Some(dropped) = first {
                self.say(run_id, path, dropped);
            }
            return;
        }
        if kind.stops_the_run() {
            let unsaid = self
                .dropped()
                .remove(run_id)
                .map(|run| run.unsaid)
                .filter(|unsaid| !unsaid.is_empty());
            if let Some(dropped) = unsaid {
                self.say(run_id, path, dropped);
            }
        }
        self.publish(run_id, path, kind);
    }

    fn texts(&self) -> Option<&crate::vocabulary::text::Texts> {
        Some(self.bus.texts())
    }
}

/// Starts the writer task; it ends when every sender is gone. A run's
/// terminal flush also makes `bus` forget the run's position.
///
/// A run's events are appended in order, with no gap: when an append
/// fails, the run's events stay with the writer (and every later one
/// behind them) and are tried again, with backoff, until they land, the run
/// is forgotten, or its fence goes stale. Past the run's patience the run
/// is told, once, and its flushes answer `false`; the tries go on, so a
/// store that comes back gets the whole log.
pub(crate) fn start(
    store: Arc<dyn Store>,
    bus: EventBus,
    paces: PaceBook,
    writes: StoreWrites,
    health: Arc<StoreHealth>,
) -> mpsc::UnboundedSender<LogItem> {
    let (log, items) = mpsc::unbounded_channel();
    let writer = Writer {
        store,
        bus,
        paces,
        writes,
        health,
        runs: crate::hash::Map::default(),
        stalled: 0,
    };
    tokio::spawn(writer.run(items));
    log
}

/// The writer task's state.
struct Writer {
    store: Arc<dyn Store>,
    bus: EventBus,
    paces: PaceBook,
    writes: StoreWrites,
    health: Arc<StoreHealth>,
    runs: crate::hash::Map<String, RunLog>,
    /// How many of `runs` are stalled: while none is, the writer waits for
    /// items alone, without looking through every run for a next try.
    stalled: usize,
}

/// A run the writer logs.
struct RunLog {
    entry: LogEntry,
    /// Its events the store refused, with those after them.
    stalled: Option<Stall>,
    /// Its end was flushed: it is forgotten once its events are written.
    ended: bool,
    /// Its end event (`run_completed`, `run_failed`, `run_cancelled`) was
    /// taken: nothing of the run is logged after it.
    end_taken: bool,
}

/// A run's events waiting for the store.
struct Stall {
    events: Vec<Arc<Event>>,
    attempt: u32,
    since: Instant,
    next: Instant,
    /// Whether the run was told its events cannot be written.
    told: bool,
    /// Flushes waiting for the events.
    waiting: Vec<oneshot::Sender<bool>>,
}

impl Writer {
    async fn run(mut self, mut items: mpsc::UnboundedReceiver<LogItem>) {
        let mut batch: Vec<LogItem> = Vec::new();
        loop {
            let next_try = if self.stalled == 0 {
                None
            } else {
                self.runs
                    .values()
                    .filter_map(|r| r.stalled.as_ref())
                    .map(|s| s.next)
                    .min()
            };
            let first = tokio::select! {
                item = items.recv() => match item {
                    Some(item) => item,
                    None => break,
                },
                () = sleep_until_some(next_try) => {
                    self.try_stalled().await;
                    continue;
                }
            };
            batch.push(first);
            while batch.len() < 1024 {
                match items.try_recv() {
                    Ok(item) => batch.push(item),
                    Err(_) => break,
                }
            }
            // Keyed by the id the run's events share: no copy of it.
            let mut pending: crate::hash::Map<Arc<str>, Vec<Arc<Event>>> =
                crate::hash::Map::default();
            for item in batch.drain(..) {
                match item {
                    LogItem::Register(run_id, entry) => {
                        let replaced = self.runs.insert(
                            run_id,
                            RunLog {
                                entry,
                                stalled: None,
                                ended: false,
                                end_taken: false,
                            },
                        );
                        if replaced.is_some_and(|run| run.stalled.is_some()) {
                            self.stalled -= 1;
                        }
                    }
                    LogItem::Event(event) => {
                        // A run's end is the last of its log: what its
                        // leases say as they let go after it (a verdict
                        // judged too late, a lease cancelled) is not
                        // logged, so whoever reads the log's last event
                        // finds the end.
                        let stall = match self.runs.get_mut(&*event.run_id) {
                            Some(run) if run.end_taken => {
                                tracing::debug!(run_id = %event.run_id, kind = event.kind.name(), "an event after the run's end is not logged");
                                continue;
                            }
                            Some(run) => {
                                run.end_taken = is_end(&event.kind);
                                run.stalled.as_mut()
                            }
                            None => None,
                        };
                        match stall {
                            // Behind the run's events the store refused.
                            Some(stall) => stall.events.push(event),
                            None => match pending.get_mut(&*event.run_id) {
                                Some(events) => events.push(event),
                                None => {
                                    pending.insert(Arc::clone(&event.run_id), vec![event]);
                                }
                            },
                        }
                    }
                    LogItem::Flush(run_id, done) => {
                        self.write(std::mem::take(&mut pending)).await;
                        save_paces(&self.store, &self.paces, &self.health).await;
                        if let Err(error) = self.store.flush().await {
                            tracing::error!(%run_id, trace_id = %crate::trace_context::trace_id_for(&run_id), %error, "event log not flushed");
                        }
                        self.flushed(&run_id, done, true);
                    }
                    LogItem::Sync(run_id, done) => {
                        self.write(std::mem::take(&mut pending)).await;
                        if let Err(error) = self.store.flush().await {
                            tracing::error!(%run_id, trace_id = %crate::trace_context::trace_id_for(&run_id), %error, "event log not flushed");
                        }
                        self.flushed(&run_id, done, false);
                    }
                    LogItem::Forget(run_id, fence) => {
                        let registered = self.runs.get(&run_id);
                        if registered.is_some_and(|run| Arc::ptr_eq(&run.entry.fence, &fence)) {
                            self.forget(&run_id, false);
                        }
                    }
                }
            }
            self.write(pending).await;
            save_paces(&self.store, &self.paces, &self.health).await;
        }
        save_paces(&self.store, &self.paces, &self.health).await;
    }

    /// Answers a flush of `run_id` (of every run, if empty): at once if its
    /// events are written, when they are if they wait for the store. A
    /// flush of the run's `end` forgets the run once they are.
    fn flushed(&mut self, run_id: &str, done: oneshot::Sender<bool>, end: bool) {
        if run_id.is_empty() {
            let _ = done.send(true);
            return;
        }
        let Some(run) = self.runs.get_mut(run_id) else {
            let _ = done.send(true);
            return;
        };
        run.ended |= end;
        match &mut run.stalled {
            Some(stall) if stall.told => {
                let _ = done.send(false);
            }
            Some(stall) => stall.waiting.push(done),
            None => {
                if end {
                    self.forget(run_id, true);
                }
                let _ = done.send(true);
            }
        }
    }

    /// Forgets a run: its fence, its position on the bus, and what the
    /// store did not take of its log (answering its flushes `written`).
    fn forget(&mut self, run_id: &str, written: bool) {
        if let Some(stall) = self.runs.remove(run_id).and_then(|run| run.stalled) {
            self.stalled -= 1;
            for done in stall.waiting {
                let _ = done.send(written);
            }
        }
        self.bus.forget_run(run_id);
    }

    /// Appends the batch's events: one write per run, the runs' writes at
    /// once, polled together by this task (no task per run per batch). A
    /// run's events stay in the order they were published; a batch is
    /// written whole before the next is read.
    async fn write(&mut self, pending: crate::hash::Map<Arc<str>, Vec<Arc<Event>>>) {
        let store = &self.store;
        let runs = &self.runs;
        let writes = pending.into_iter().filter_map(|(run_id, events)| {
            // Events of runs this executor does not (or no longer) own are
            // not logged.
            let fence = runs.get(&*run_id)?.entry.fence.load(Ordering::Acquire);
            let append = store.append_events(&run_id, events.clone(), fence);
            Some(async move { (run_id, events, append.await) })
        });
        let written = futures_util::future::join_all(writes).await;
        for (run_id, events, result) in written {
            self.settle(&run_id, events, result);
        }
    }

    /// Tries again the appends of the runs whose turn it is.
    async fn try_stalled(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .runs
            .iter()
            .filter(|(_, run)| run.stalled.as_ref().is_some_and(|s| s.next <= now))
            .map(|(run_id, _)| run_id.clone())
            .collect();
        let store = &self.store;
        let runs = &mut self.runs;
        let mut tries = Vec::new();
        for run_id in due {
            let Some(run) = runs.get_mut(&run_id) else {
                continue;
            };
            let fence = run.entry.fence.load(Ordering::Acquire);
            let Some(stall) = run.stalled.as_mut() else {
                continue;
            };
            let events = std::mem::take(&mut stall.events);
            let append = store.append_events(&run_id, events.clone(), fence);
            tries.push(async move { (run_id, events, append.await) });
        }
        let tried = futures_util::future::join_all(tries).await;
        for (run_id, events, result) in tried {
            self.health.retried();
            self.settle(&run_id, events, result);
        }
    }

    /// What an append of `events` to `run_id`'s log answered.
    fn settle(
        &mut self,
        run_id: &str,
        events: Vec<Arc<Event>>,
        result: Result<Fenced<()>, StoreError>,
    ) {
        // The trace id is derived only where something is logged (in the
        // macros, which evaluate it only when enabled): it costs a lookup
        // and a hash, and nearly every append is simply applied.
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        match result {
            Ok(Fenced::Applied(())) => {
                self.health.ok();
                if let Some(stall) = run.stalled.take() {
                    self.stalled -= 1;
                    tracing::info!(%run_id, trace_id = %crate::trace_context::trace_id_for(run_id), attempts = stall.attempt, "events logged after the store refused them");
                    for done in stall.waiting {
                        let _ = done.send(true);
                    }
                }
                if run.ended {
                    self.forget(run_id, true);
                }
            }
            Ok(Fenced::Stale { .. }) => {
                tracing::warn!(%run_id, trace_id = %crate::trace_context::trace_id_for(run_id), "events of a run this executor lost were not logged");
                if run.stalled.is_some() {
                    self.forget(run_id, false);
                }
            }
            Err(error) => {
                self.health.error(&error);
                run.entry.errors.fetch_add(1, Ordering::Relaxed);
                let now = Instant::now();
                if run.stalled.is_none() {
                    self.stalled += 1;
                }
                let stall = run.stalled.get_or_insert_with(|| Stall {
                    events: Vec::new(),
                    attempt: 0,
                    since: now,
                    next: now,
                    told: false,
                    waiting: Vec::new(),
                });
                // The refused events go back before those published since.
                let later = std::mem::replace(&mut stall.events, events);
                stall.events.extend(later);
                stall.attempt += 1;
                let pause = crate::store_writes::backoff(stall.attempt);
                stall.next = now + pause;
                let patience_over = now.duration_since(stall.since) + pause > self.writes.retry_for;
                if !stall.told && (!error.is_transient() || patience_over) {
                    stall.told = true;
                    self.health.gave_up();
                    tracing::error!(%run_id, trace_id = %crate::trace_context::trace_id_for(run_id), %error, held = stall.events.len(), "events not logged: the run is told, and they are tried again");
                    for done in stall.waiting.drain(..) {
                        let _ = done.send(false);
                    }
                    (run.entry.give_up)(error);
                } else if stall.attempt == 1 {
                    tracing::warn!(%run_id, trace_id = %crate::trace_context::trace_id_for(run_id), %error, "events not logged yet: tried again");
                }
            }
        }
    }
}

/// Whether `kind` ends its run.
fn is_end(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::RunCompleted { .. }
            | EventKind::RunFailed { .. }
            | EventKind::RunCancelled { .. }
    )
}

/// Sleeps until `at`, or for ever if there is none.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Writes what the engine's leases learned since the last time: with the
/// events of the batch that learned it, so what a run learned is kept by
/// the time its end is. A failed write is logged and learned again.
async fn save_paces(store: &Arc<dyn Store>, paces: &PaceBook, health: &StoreHealth) {
    let changed = paces.take_changed();
    if changed.is_empty() {
        return;
    }
    match store.save_paces(changed).await {
        Ok(()) => health.ok(),
        Err(error) => {
            health.error(&error);
            tracing::warn!(%error, "learned paces not saved");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervision::lease::LeaseId;

    fn progress(count: u64) -> EventKind {
        EventKind::Progress {
            lease_id: LeaseId(1),
            count,
            note: Some("busy".to_owned()),
            reports: 1,
        }
    }

    #[test]
    fn a_full_log_drops_only_progress_and_says_what_it_dropped_before_the_end() {
        let (log, mut logged) = mpsc::unbounded_channel();
        let sink = LoggingSink::new(EventBus::new(), None, log, 5);
        sink.emit(
            "run-1",
            "run",
            EventKind::RunStarted {
                trace_parent: None,
                flow: "f".to_owned(),
                task: "t".to_owned(),
                max_steps: 3,
            },
        );
        for count in 1..=10 {
            sink.emit("run-1", "run/tool_call:1", progress(count));
        }
        sink.emit(
            "run-1",
            "run/tool_call:1",
            EventKind::ToolCallFinished {
                tool: "flood".to_owned(),
                idempotency_key: "k".to_owned(),
                attempt: 1,
                outcome: crate::event::CallOutcome::Ok,
            },
        );
        // Another run's log is its own.
        sink.emit("run-2", "run/tool_call:1", progress(1));
        sink.emit(
            "run-1",
            "run",
            EventKind::RunCompleted {
                answer: "done".to_owned(),
                steps: 1,
                cut_off: false,
            },
        );
        let mut events = Vec::new();
        while let Ok(LogItem::Event(event)) = logged.try_recv() {
            events.push(event);
        }
        let run_1: Vec<_> = events.iter().filter(|e| &*e.run_id == "run-1").collect();
        let kinds: Vec<&str> = run_1.iter().map(|e| e.kind.name()).collect();
        assert_eq!(
            kinds,
            [
                "run_started",
                "progress",
                "progress",
                "progress",
                "progress",
                "events_dropped",
                "tool_call_finished",
                "events_dropped",
                "run_completed",
            ]
        );
        let positions: Vec<u64> = run_1.iter().map(|e| e.position).collect();
        assert_eq!(positions, (1..=9).collect::<Vec<_>>(), "no gap");
        let said: Vec<_> = run_1
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::EventsDropped {
                    dropped,
                    max_run_events,
                } => Some((dropped.get("progress").copied(), *max_run_events)),
                _ => None,
            })
            .collect();
        // The first at once, the other five before the end: six in all.
        assert_eq!(said, [(Some(1), 5), (Some(5), 5)]);
        assert_eq!(
            events.iter().filter(|e| &*e.run_id == "run-2").count(),
            1,
            "another run's progress is stored"
        );
    }
}
