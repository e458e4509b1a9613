//! The bus that carries events: bounded, non-blocking, lossless in the
//! sense that a reader is always told what it lost.
//!
//! # Overflow policy
//!
//! The bus is bounded (default [`EventBus::DEFAULT_CAPACITY`] events) and
//! emitting never blocks: a run must never wait for a slow reader. A
//! subscriber that falls more than the capacity behind loses the oldest
//! events it has not read and is told so, with the exact count, by
//! [`EventStream::recv`] returning [`Lagged`]; nothing is ever dropped without
//! the reader being told. (ractor's output ports are broadcasts of 10 that
//! drop silently, which is why the bus is our own.)

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::ports::{Clock, EventSink, SystemClock};
use crate::vocabulary::event::{Event, EventKind};

/// A subscriber fell behind and lost this many of the oldest events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("event stream lagged: {missed} events were lost to this reader")]
pub struct Lagged {
    /// How many events this reader will never see.
    pub missed: u64,
}

/// A bounded, non-blocking broadcast of [`Event`]s, with `seq`, `position`
/// and `at` assigned in publication order. Cheap to clone.
#[derive(Clone)]
pub struct EventBus {
    inner: Arc<BusInner>,
}

struct BusInner {
    sender: broadcast::Sender<Arc<Event>>,
    // Held while a seq and a position are taken and the event sent, so
    // that seq order is the order readers see.
    publish: Mutex<Published>,
    /// How many events `Published::recent` keeps: the bus's capacity.
    capacity: usize,
    seq: AtomicU64,
    clock: Arc<dyn Clock>,
    /// The text of the runs' model calls in flight.
    texts: crate::vocabulary::text::Texts,
}

/// What publishing keeps.
struct Published {
    /// Each run published to, until it is forgotten: its last position,
    /// and the names its events share.
    positions: crate::hash::Map<Arc<str>, RunNames>,
    /// The most recent events, as many as a subscriber may leave unread:
    /// what a stream that starts at an earlier `seq` reads first
    /// ([`EventBus::subscribe_after`]).
    recent: VecDeque<Arc<Event>>,
}

/// What the bus keeps of a run it publishes to.
struct RunNames {
    /// The position of its last event.
    position: u64,
    /// Its id, shared by its events.
    run_id: Arc<str>,
    /// The paths its events were published at, shared by its events (the
    /// first [`SHARED_PATHS`]; a path past them is an event's own).
    paths: Vec<Arc<str>>,
}

/// How many paths of a run its events share at most: a run's loops and
/// calls are a few, and a run of many workers looks through no more.
const SHARED_PATHS: usize = 32;

impl RunNames {
    fn new(run_id: Arc<str>, position: u64) -> Self {
        Self {
            position,
            run_id,
            paths: Vec::new(),
        }
    }

    /// `path`, shared with the run's earlier events at it.
    fn path(&mut self, path: &str) -> Arc<str> {
        if let Some(shared) = self.paths.iter().find(|shared| ***shared == *path) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(path);
        if self.paths.len() < SHARED_PATHS {
            self.paths.push(Arc::clone(&shared));
        }
        shared
    }
}

impl EventBus {
    /// How many unread events a subscriber may have before it lags.
    pub const DEFAULT_CAPACITY: usize = 4096;

    /// A bus of [`Self::DEFAULT_CAPACITY`] on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Self::DEFAULT_CAPACITY, Arc::new(SystemClock))
    }

    /// A bus of `capacity` (at least 1) stamping events with `clock`.
    pub fn with_clock(capacity: usize, clock: Arc<dyn Clock>) -> Self {
        let capacity = capacity.max(1);
        let (sender, _) = broadcast::channel(capacity);
        Self {
            inner: Arc::new(BusInner {
                sender,
                publish: Mutex::new(Published {
                    positions: crate::hash::Map::default(),
                    recent: VecDeque::new(),
                }),
                capacity,
                seq: AtomicU64::new(0),
                clock,
                texts: crate::vocabulary::text::Texts::default(),
            }),
        }
    }

    /// The text the runs' model calls stream, as it streams: not events,
    /// and never logged ([`Texts`](crate::Texts)).
    pub fn texts(&self) -> &crate::vocabulary::text::Texts {
        &self.inner.texts
    }

    /// A stream of every event published from now on.
    pub fn subscribe(&self) -> EventStream {
        EventStream {
            receiver: self.inner.sender.subscribe(),
            backlog: VecDeque::new(),
            missed: 0,
        }
    }

    /// A stream of every event published after `seq`: those already
    /// published first, then those to come, as a stream subscribed when
    /// `seq` was the last would have read them — told [`Lagged`] with the
    /// count of those more than the bus's capacity behind. What a run's
    /// handle gives its first stream, without holding a subscription (whose
    /// unread events a drop would have to walk) from the run's start.
    pub fn subscribe_after(&self, seq: u64) -> EventStream {
        let published = self.published();
        let receiver = self.inner.sender.subscribe();
        let last = self.inner.seq.load(Ordering::Acquire);
        // In `seq` order: those after the mark are the ring's tail.
        let from = published.recent.partition_point(|event| event.seq <= seq);
        let backlog: VecDeque<Arc<Event>> = published.recent.range(from..).cloned().collect();
        let kept = u64::try_from(backlog.len()).unwrap_or(u64::MAX);
        let missed = last.saturating_sub(seq).saturating_sub(kept);
        EventStream {
            receiver,
            backlog,
            missed,
        }
    }

    /// Makes every later `seq` greater than `seq`: a run resumed from the
    /// store continues its event log after its last logged event.
    pub fn advance_past(&self, seq: u64) {
        self.inner.seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// The `seq` of the last event published (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.inner.seq.load(Ordering::Acquire)
    }

    /// Makes the run's next event take `position + 1`: a run resumed from
    /// the store goes on after its last logged event.
    pub fn continue_run(&self, run_id: &str, position: u64) {
        let mut published = self.published();
        match published.positions.get_mut(run_id) {
            Some(names) => names.position = position,
            None => {
                let run_id: Arc<str> = Arc::from(run_id);
                published
                    .positions
                    .insert(Arc::clone(&run_id), RunNames::new(run_id, position));
            }
        }
    }

    /// The position of the run's last event published (0 before its
    /// first): how many events its log holds, or will once written.
    pub(crate) fn position(&self, run_id: &str) -> u64 {
        self.published()
            .positions
            .get(run_id)
            .map_or(0, |names| names.position)
    }

    /// Forgets the run's position once it ended here: a later event of it
    /// starts again from 1 unless [`Self::continue_run`] says otherwise.
    pub fn forget_run(&self, run_id: &str) {
        self.published().positions.remove(run_id);
    }

    /// How many runs the bus holds a position of: those that published
    /// and have not ended here (nor been forgotten). What a test of
    /// per-run state reads: it goes back to 0 once every run has ended.
    pub fn runs_tracked(&self) -> usize {
        self.published().positions.len()
    }

    fn published(&self) -> std::sync::MutexGuard<'_, Published> {
        self.inner
            .publish
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("last_seq", &self.last_seq())
            .finish_non_exhaustive()
    }
}

impl EventSink for EventBus {
    fn emit(&self, run_id: &str, path: &str, kind: EventKind) {
        self.publish(run_id, path, kind);
    }

    fn texts(&self) -> Option<&crate::vocabulary::text::Texts> {
        Some(self.texts())
    }
}

impl EventBus {
    /// Publishes one event and returns it, with its `seq` and `at`.
    pub fn publish(&self, run_id: &str, path: &str, kind: EventKind) -> Arc<Event> {
        let at = self.inner.clock.now_unix_ms();
        let mut published = self.published();
        let positions = &mut published.positions;
        let names = match positions.get_mut(run_id) {
            Some(names) => {
                names.position += 1;
                names
            }
            None => {
                let run_id: Arc<str> = Arc::from(run_id);
                positions
                    .entry(Arc::clone(&run_id))
                    .or_insert(RunNames::new(run_id, 1))
            }
        };
        let (position, run_id, path) =
            (names.position, Arc::clone(&names.run_id), names.path(path));
        let seq = self.inner.seq.fetch_add(1, Ordering::AcqRel) + 1;
        let event = Arc::new(Event {
            seq,
            position,
            at,
            run_id,
            path,
            kind,
        });
        if published.recent.len() == self.inner.capacity {
            published.recent.pop_front();
        }
        published.recent.push_back(event.clone());
        // No subscriber is not an error: the event simply has no reader.
        let _ = self.inner.sender.send(event.clone());
        event
    }
}

/// One subscriber's view of an [`EventBus`].
#[derive(Debug)]
pub struct EventStream {
    receiver: broadcast::Receiver<Arc<Event>>,
    /// Events published before the stream began that it reads first.
    backlog: VecDeque<Arc<Event>>,
    /// How many events before `backlog` it lost, told first.
    missed: u64,
}

impl EventStream {
    /// The next event, [`Lagged`] if this reader lost some, or `None` once the
    /// bus is gone and every event was read.
    pub async fn recv(&mut self) -> Option<Result<Arc<Event>, Lagged>> {
        if let Some(earlier) = self.earlier() {
            return Some(earlier);
        }
        match self.receiver.recv().await {
            Ok(event) => Some(Ok(event)),
            Err(broadcast::error::RecvError::Lagged(missed)) => Some(Err(Lagged { missed })),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// Like [`Self::recv`] but without waiting: `None` when nothing is ready.
    pub fn try_recv(&mut self) -> Option<Result<Arc<Event>, Lagged>> {
        if let Some(earlier) = self.earlier() {
            return Some(earlier);
        }
        match self.receiver.try_recv() {
            Ok(event) => Some(Ok(event)),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => Some(Err(Lagged { missed })),
            Err(_) => None,
        }
    }

    /// What the stream read before it began, if it has not yet: first the
    /// count of what it lost, then the events it kept.
    fn earlier(&mut self) -> Option<Result<Arc<Event>, Lagged>> {
        if self.missed > 0 {
            let missed = std::mem::take(&mut self.missed);
            return Some(Err(Lagged { missed }));
        }
        self.backlog.pop_front().map(Ok)
    }
}
