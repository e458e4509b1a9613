//! The group commit: one task that makes the store's writes durable.
//!
//! Writers that need durability enqueue a *ticket* (a oneshot) after their
//! write is applied; the task takes every ticket queued so far, calls sled's
//! `flush()` once (on the blocking pool, never on a runtime thread) and
//! answers them all with its outcome. A ticket taken before a flush started
//! belongs to a write applied before it started, and sled's `flush()` makes
//! stable everything reserved before it began, so one flush covers the whole
//! batch: at 64 concurrent writers one flush answers about two dozen of
//! them.
//!
//! Writers that do not wait (`async` durability) only mark the store
//! *dirty*; the task flushes whenever it is dirty, starting at most one such
//! flush every [`ASYNC_FLUSH_INTERVAL`] (2 ms), so their writes are durable
//! within that interval and one flush. Flushing back to back instead cost up
//! to a third of the write rate on two cores (many small syncs), for a delay
//! shorter by a millisecond or two. A ticket never waits for the interval.
//!
//! sled's own `flush_async` is never used: it deadlocks when many callers
//! flush at once (sled issue 1308). The blocking `flush()` from one task has
//! no such problem, and it is also what makes the batching work.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use leasehold_actors::StoreError;
use tokio::sync::{Notify, oneshot};

use super::manifest::Manifest;

type Ticket = oneshot::Sender<Result<(), StoreError>>;

/// The writers' side of the group commit. Dropping it stops the task once
/// it has answered every ticket.
pub(crate) struct GroupCommit {
    shared: Arc<Shared>,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Notify,
    /// Held by whoever flushes the database (the task, a manifest being
    /// recorded, the store closing): never two flushes at once.
    flushing: Mutex<()>,
}

#[derive(Default)]
struct Queue {
    tickets: Vec<Ticket>,
    dirty: bool,
    /// The store is gone: finish the queue and stop.
    closed: bool,
    /// The task is gone (its runtime shut down): nobody will flush.
    stopped: bool,
    /// The store is closing its database: no flush takes the database
    /// again, so the store's own reference is the last and the database
    /// closes (and its directory can be opened again) as the store drops.
    released: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl GroupCommit {
    /// Starts the task on `runtime`; it flushes `db` while the database is
    /// open (it holds it only while flushing, so dropping the store closes
    /// the database).
    ///
    /// With a `manifest`, it records it after a flush when one is
    /// [due](Manifest::due), once the flush's writers have their answer.
    pub(crate) fn start(
        runtime: &tokio::runtime::Handle,
        db: Weak<sled::Db>,
        manifest: Option<Arc<Manifest>>,
    ) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            flushing: Mutex::new(()),
        });
        let stopped = Stopped(Arc::clone(&shared));
        runtime.spawn(run(stopped, db, manifest));
        Self { shared }
    }

    /// Returns once everything written before the call is durable.
    pub(crate) async fn durable(&self) -> Result<(), StoreError> {
        let (ticket, answer) = oneshot::channel();
        {
            let mut queue = self.shared.lock();
            if queue.stopped {
                return Err(stopped_error());
            }
            queue.tickets.push(ticket);
        }
        self.shared.wake.notify_one();
        answer.await.unwrap_or_else(|_| Err(stopped_error()))
    }

    /// Runs `work` (which flushes the database) while no other flush runs.
    /// Blocking: for the store's close.
    pub(crate) fn alone<T>(&self, work: impl FnOnce() -> T) -> T {
        let _alone = self
            .shared
            .flushing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        work()
    }

    /// Runs `last` (the store's last write, as it closes) while no flush
    /// runs, and from then on lets no flush take the database: when the
    /// store drops its reference right after, the database closes at once.
    /// Blocking: for the store's close.
    pub(crate) fn release<T>(&self, last: impl FnOnce() -> T) -> T {
        self.alone(|| {
            self.shared.lock().released = true;
            last()
        })
    }

    /// Asks for a flush soon, without waiting for it.
    pub(crate) fn mark_dirty(&self) {
        let first = {
            let mut queue = self.shared.lock();
            !std::mem::replace(&mut queue.dirty, true)
        };
        if first {
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

fn stopped_error() -> StoreError {
    StoreError::unavailable(
        "the store's group-commit task has stopped (the tokio runtime that opened the store shut \
         down): writes can no longer be made durable",
    )
}

/// Held by the task: when the task ends or is dropped with its runtime,
/// pending tickets are answered and later ones refused at once.
struct Stopped(Arc<Shared>);

impl Drop for Stopped {
    fn drop(&mut self) {
        let tickets = {
            let mut queue = self.0.lock();
            queue.stopped = true;
            std::mem::take(&mut queue.tickets)
        };
        for ticket in tickets {
            let _ = ticket.send(Err(stopped_error()));
        }
    }
}

async fn run(stopped: Stopped, db: Weak<sled::Db>, manifest: Option<Arc<Manifest>>) {
    let shared = &stopped.0;
    let mut last_flush: Option<tokio::time::Instant> = None;
    loop {
        let (waiting, dirty, closed) = {
            let queue = shared.lock();
            (!queue.tickets.is_empty(), queue.dirty, queue.closed)
        };
        if !waiting && !dirty {
            if closed {
                return;
            }
            shared.wake.notified().await;
            continue;
        }
        if !waiting {
            // Only `async` writes are pending: pace the flushes, but let a
            // ticket in at once.
            let next = last_flush.map(|at| at + ASYNC_FLUSH_INTERVAL);
            if let Some(next) = next.filter(|next| *next > tokio::time::Instant::now()) {
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    () = shared.wake.notified() => {}
                }
                continue;
            }
        }
        let tickets = {
            let mut queue = shared.lock();
            queue.dirty = false;
            std::mem::take(&mut queue.tickets)
        };
        last_flush = Some(tokio::time::Instant::now());
        let outcome = flush(Arc::clone(shared), db.clone()).await;
        let flushed = outcome.is_ok();
        for ticket in tickets {
            // A writer that stopped waiting does not need its answer.
            let _ = ticket.send(outcome.clone());
        }
        if let Some(manifest) = manifest.as_ref().filter(|m| flushed && m.due()) {
            record(Arc::clone(shared), Arc::clone(manifest), db.clone()).await;
        }
    }
}

/// Records the manifest on the blocking pool, alone like every flush (two
/// flushes at once are what sled's deadlocks are made of); a failure is
/// logged (it is tried again after the next write).
async fn record(shared: Arc<Shared>, manifest: Arc<Manifest>, db: Weak<sled::Db>) {
    let _ = tokio::task::spawn_blocking(move || {
        let recorded = taken(&shared, &db, |db| manifest.record(db));
        if let Some(Err(error)) = recorded {
            tracing::warn!("{}", error.message());
        }
    })
    .await;
}

/// Runs `work` on the database while no other flush runs, unless the
/// store is gone or closing it ([`GroupCommit::release`]): the database is
/// taken and let go under the lock, so that a store that drops its own
/// reference after its release closes the database at once.
fn taken<T>(shared: &Shared, db: &Weak<sled::Db>, work: impl FnOnce(&sled::Db) -> T) -> Option<T> {
    let _alone = shared
        .flushing
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if shared.lock().released {
        return None;
    }
    let db = db.upgrade()?;
    let done = work(&db);
    drop(db);
    Some(done)
}

/// The least time between the starts of two flushes made for `async`
/// writes alone: the bound, with one flush, on how long such a write waits
/// to be durable.
pub(crate) const ASYNC_FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(2);

async fn flush(shared: Arc<Shared>, db: Weak<sled::Db>) -> Result<(), StoreError> {
    // sled flushes (and fully syncs) a database when it closes: a store gone
    // or closing has nothing left to flush here.
    let flushed =
        tokio::task::spawn_blocking(move || taken(&shared, &db, |db| db.flush()).unwrap_or(Ok(0)))
            .await;
    match flushed {
        Ok(Ok(_bytes)) => Ok(()),
        Ok(Err(e)) => Err(StoreError::failed(format!(
            "flushing the store to disk failed: {e}"
        ))),
        Err(e) => Err(StoreError::failed(format!(
            "flushing the store to disk failed: {e}"
        ))),
    }
}
