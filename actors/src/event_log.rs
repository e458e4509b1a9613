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

use crate::event::{Event, EventBus, EventKind};
use crate::pace::PaceBook;
use crate::ports::{EventSink, Fenced, Store};

/// What the writer task is told.
pub(crate) enum LogItem {
    Register(String, Arc<AtomicU64>),
    Event(Arc<Event>),
    Flush(String, oneshot::Sender<()>),
    /// The run stopped here without an end of its own (this executor lost
    /// it to another): forget its fence and its position, if the fence is
    /// still the one given (a later claim of the run registered its own).
    Forget(String, Arc<AtomicU64>),
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
}

/// Starts the writer task; it ends when every sender is gone. A run's
/// terminal flush also makes `bus` forget the run's position.
pub(crate) fn start(
    store: Arc<dyn Store>,
    bus: EventBus,
    paces: PaceBook,
) -> mpsc::UnboundedSender<LogItem> {
    let (log, mut items) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut fences: HashMap<String, Arc<AtomicU64>> = HashMap::new();
        let mut batch: Vec<LogItem> = Vec::new();
        while let Some(first) = items.recv().await {
            batch.push(first);
            while batch.len() < 1024 {
                match items.try_recv() {
                    Ok(item) => batch.push(item),
                    Err(_) => break,
                }
            }
            let mut pending: HashMap<String, Vec<Event>> = HashMap::new();
            for item in batch.drain(..) {
                match item {
                    LogItem::Register(run_id, fence) => {
                        fences.insert(run_id, fence);
                    }
                    LogItem::Event(event) => {
                        // The bus's readers may still hold the event; when
                        // none does, it is moved, not copied.
                        let event =
                            Arc::try_unwrap(event).unwrap_or_else(|shared| (*shared).clone());
                        match pending.get_mut(&event.run_id) {
                            Some(events) => events.push(event),
                            None => {
                                pending.insert(event.run_id.clone(), vec![event]);
                            }
                        }
                    }
                    LogItem::Flush(run_id, done) => {
                        write(&store, &fences, std::mem::take(&mut pending)).await;
                        save_paces(&store, &paces).await;
                        if let Err(error) = store.flush().await {
                            tracing::error!(%run_id, trace_id = %crate::trace_context::trace_id_for(&run_id), %error, "event log not flushed");
                        }
                        fences.remove(&run_id);
                        bus.forget_run(&run_id);
                        let _ = done.send(());
                    }
                    LogItem::Forget(run_id, fence) => {
                        let registered = fences.get(&run_id);
                        if registered.is_some_and(|held| Arc::ptr_eq(held, &fence)) {
                            fences.remove(&run_id);
                            bus.forget_run(&run_id);
                        }
                    }
                }
            }
            write(&store, &fences, pending).await;
            save_paces(&store, &paces).await;
        }
        save_paces(&store, &paces).await;
    });
    log
}

/// Writes what the engine's leases learned since the last time: with the
/// events of the batch that learned it, so what a run learned is kept by
/// the time its end is. A failed write is logged and learned again.
async fn save_paces(store: &Arc<dyn Store>, paces: &PaceBook) {
    let changed = paces.take_changed();
    if changed.is_empty() {
        return;
    }
    if let Err(error) = store.save_paces(changed).await {
        tracing::warn!(%error, "learned paces not saved");
    }
}

/// Appends the batch's events: one write per run, the runs' writes at
/// once, polled together by this task (no task per run per batch). A run's
/// events stay in the order they were published; a batch is written whole
/// before the next is read.
async fn write(
    store: &Arc<dyn Store>,
    fences: &HashMap<String, Arc<AtomicU64>>,
    pending: HashMap<String, Vec<Event>>,
) {
    let writes = pending.into_iter().filter_map(|(run_id, events)| {
        // Events of runs this executor does not (or no longer) own are not logged.
        let fence = fences.get(&run_id)?.load(Ordering::Acquire);
        let append = store.append_events(&run_id, events, fence);
        Some(async move {
            match append.await {
                Ok(Fenced::Applied(())) => {}
                Ok(Fenced::Stale { .. }) => {
                    tracing::warn!(%run_id, trace_id = %crate::trace_context::trace_id_for(&run_id), "events of a run this executor lost were not logged");
                }
                Err(error) => tracing::error!(%run_id, trace_id = %crate::trace_context::trace_id_for(&run_id), %error, "events not logged"),
            }
        })
    });
    futures_util::future::join_all(writes).await;
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
        let run_1: Vec<_> = events.iter().filter(|e| e.run_id == "run-1").collect();
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
            events.iter().filter(|e| e.run_id == "run-2").count(),
            1,
            "another run's progress is stored"
        );
    }
}
