//! [`SledStore`]: the [`Store`] port on sled 0.34.
//!
//! Every write that changes a run is a compare-and-set on the run's record
//! (read, apply the rule of [`fencing`], `compare_and_swap`, retry if the
//! record moved), and every fenced write to another tree (a snapshot, a
//! tool-call record, events) checks the fence and writes under the run's
//! lock ([`RunLocks`]), which every change of the record also holds. A
//! stale write therefore lands nothing, and no claim can slip between a
//! writer's check and its write: two executors racing cannot both land
//! writes with different fences.
//!
//! Why not sled transactions: in sled 0.34 every transaction rolls the IO
//! buffer (twice) so that it recovers atomically, which turns each one into
//! its own disk write and `sync_file_range` on sled's IO threads, and takes
//! a process-wide lock that a flush in progress blocks. Measured on the
//! benchmark machine: ~90 000 transactions/s in memory, but ~14 000/s once
//! the disk has caught up, the rate of one flush per write, against
//! ~300 000–600 000/s for plain inserts. A fenced write here is one `get`
//! and one `insert`.
//!
//! The run indexes by status and by flow ([`RunIndexes`]) follow every
//! change of a run's record under the same lock, in an order that leaves
//! them a superset of the truth after a crash, so that a page of runs
//! filtered by status or flow reads only the runs it shows.
//!
//! Runs are counted by status as their records change (the `counts` of
//! the store, moved under the run's lock once a write landed), so that
//! `/metrics`, `GET /executor` and every post read no run. They are not
//! stored: at open they are counted from the status index, keys only
//! ([`RunIndexes::count`]), exact after a crash too (a leftover entry is
//! told by a key lookup, or by reading the one record it doubles).
//!
//! Point reads and writes run on the calling task: without sled
//! transactions in the process they never wait for a flush (a flush holds
//! sled's concurrency lock only in shared mode) and take microseconds.
//! Scans run on tokio's blocking pool. Durability is then settled by the
//! [group commit](commit) according to the store's [`Durability`].
//!
//! Each part of the port is implemented in a file of its own, as the
//! PostgreSQL store's are: `runs.rs` ([`RunStore`](leasehold_actors::RunStore)),
//! `events.rs`, `snapshots.rs`, `queue.rs`, `outbox.rs`, `paces.rs`,
//! `changes.rs`, `retention.rs`; beside them the machinery they share: the
//! value codec (`codec.rs`), the group commit (`commit.rs`), the manifest
//! (`manifest.rs`), the run indexes (`run_index.rs`), the finished runs'
//! index (`finished.rs`) and the per-run locks (`run_locks.rs`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use leasehold_actors::{
    ChangeHub, Fenced, RunRecord, RunStatus, StatusCounts, StoreChange, StoreError, StoreFuture,
    fencing,
};
use sled::{IVec, Tree};

use super::Durability;
use codec::{decode, encode};
use commit::GroupCommit;
use finished::{FinishedEntries, FinishedRuns};
use manifest::Manifest;
use outbox::Notices;
use run_index::{IndexEntries, RunIndexes};
use run_locks::RunLocks;

mod api_keys;
mod changes;
mod codec;
mod commit;
mod config;
mod events;
mod finished;
mod keys;
mod manifest;
mod outbox;
mod paces;
mod queue;
mod retention;
mod run_index;
mod run_locks;
mod runs;
mod snapshots;

pub use config::SledConfig;

/// The [`Store`](leasehold_actors::Store) port on a sled database. Cheap to clone; clones share the
/// database. Dropping the last clone closes it: sled flushes and syncs it
/// then, on the dropping thread (or, if a group-commit flush is in flight,
/// on the blocking pool once that flush ends).
///
/// ```no_run
/// use leasehold::store::{Durability, SledConfig, SledStore};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = SledStore::open(SledConfig::new("runs.db").with_durability(Durability::Async))?;
/// # drop(store); Ok(()) }
/// ```
#[derive(Clone)]
pub struct SledStore {
    inner: Arc<Inner>,
}

// Fields drop in order: the database handles before the group commit, so
// that the commit task, woken to stop, finds the database already closed.
struct Inner {
    /// Keeps the database open; the group commit holds only a weak
    /// reference, so that dropping the store closes it.
    db: Arc<sled::Db>,
    runs: Tree,
    run_order: Tree,
    snapshots: Tree,
    /// Every snapshot saved of each run ([`codec::SNAPSHOT_HISTORY`]): what
    /// a fork starts from.
    history: Tree,
    /// The forks each run's history is continued by
    /// ([`codec::SNAPSHOT_BASES`]).
    bases: Tree,
    tool_calls: Tree,
    events: Tree,
    commands: Tree,
    /// The notices of pauses and ends, until delivered.
    outbox: Notices,
    /// Each pace key's learned pace, as JSON ([`paces::PACES`]).
    paces: Tree,
    /// The idempotency keys of creations ([`keys::KEYS`]).
    keys: Tree,
    /// The API keys, by id ([`api_keys::API_KEYS`]).
    api_keys: Tree,
    /// Each keyed run's key ([`keys::KEYS_BY_RUN`]), so a purge of the run
    /// takes its key with it.
    keys_by_run: Tree,
    /// Held by a keyed creation from its look at the key to its run.
    keying: Mutex<()>,
    /// Tells subscribers of writes that landed (in this process: sled
    /// allows one process per database).
    changes: ChangeHub,
    indexes: RunIndexes,
    /// How many runs are in each status: counted from the status index at
    /// open ([`RunIndexes::count`]), then moved by every write of a record
    /// (created, changed, deleted) once it landed, under the run's lock,
    /// so that counting reads no run.
    counts: Mutex<StatusCounts>,
    /// How many run records were read since the store opened
    /// ([`SledStore::records_read`]).
    records_read: AtomicU64,
    /// The finished runs, in the order they come due for deletion.
    finished: FinishedRuns,
    /// Where the purge's sweep of `run_order` goes on from.
    order_cursor: Mutex<u64>,
    /// The next key of `run_order`.
    next_order: AtomicU64,
    locks: RunLocks,
    path: PathBuf,
    durability: Durability,
    /// What the database is known to hold, kept beside it (not for a
    /// temporary store).
    manifest: Option<Arc<Manifest>>,
    commit: GroupCommit,
}

impl Drop for Inner {
    /// A store closed after writes records its manifest, so that the next
    /// open can tell whether anything it held was lost.
    fn drop(&mut self) {
        closing(&self.path);
        // No flush takes the database after this, so this store's
        // reference, dropped next, is its last: it closes at once.
        let recorded = self
            .commit
            .release(|| self.manifest.as_ref().map(|m| m.record(&self.db)));
        if let Some(Err(error)) = recorded {
            tracing::warn!("{}", error.message());
        }
    }
}

impl fmt::Debug for SledStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SledStore")
            .field("path", &self.inner.path)
            .field("durability", &self.inner.durability)
            .finish_non_exhaustive()
    }
}

impl SledStore {
    /// Opens (or creates) the store at `config.path`.
    ///
    /// Fails at once, naming the directory, if another process (or another
    /// store in this process) has it open, and if the database was written
    /// in a store format this build does not read. Must be called within a
    /// tokio runtime: the group-commit task runs on it.
    pub fn open(config: SledConfig) -> Result<Self, StoreError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StoreError::invalid("SledStore::open must be called within a tokio runtime (its group commit runs there)")
        })?;
        let path = config.path;
        let open = || {
            sled::Config::new()
                .path(&path)
                .temporary(config.temporary)
                .cache_capacity(config.cache_capacity)
                .open()
        };
        // A store of this process closed here a moment ago: sled's own last
        // write may still hold the directory's lock for a few milliseconds
        // after the store is gone. Another process's lock is reported at
        // once.
        let mut opened = open();
        if matches!(&opened, Err(error) if is_lock_error(error)) && closed_lately(&path) {
            for _ in 0..LOCK_RETRIES {
                std::thread::sleep(LOCK_RETRY_PAUSE);
                opened = open();
                if !matches!(&opened, Err(error) if is_lock_error(error)) {
                    break;
                }
            }
        }
        let db = opened.map_err(|e| open_error(&path, &e))?;
        let tree = |name: &str| {
            db.open_tree(name).map_err(|e| {
                StoreError::failed(format!(
                    "cannot open tree `{name}` of the store at `{}`: {e}",
                    path.display()
                ))
            })
        };
        let meta = tree(codec::META)?;
        check_format(&meta, &path)?;
        let runs = tree(codec::RUNS)?;
        let run_order = tree(codec::RUN_ORDER)?;
        let snapshots = tree(codec::SNAPSHOTS)?;
        let history = tree(codec::SNAPSHOT_HISTORY)?;
        let bases = tree(codec::SNAPSHOT_BASES)?;
        let tool_calls = tree(codec::TOOL_CALLS)?;
        let events = tree(codec::EVENTS)?;
        let commands = tree(queue::COMMANDS)?;
        let outbox = Notices::new(tree(outbox::OUTBOX)?);
        let paces = tree(paces::PACES)?;
        let keys = tree(keys::KEYS)?;
        let keys_by_run = tree(keys::KEYS_BY_RUN)?;
        let api_keys = tree(api_keys::API_KEYS)?;
        let indexes = RunIndexes::open(
            tree(codec::RUNS_BY_STATUS)?,
            tree(codec::RUNS_BY_FLOW)?,
            &runs,
            &meta,
        )
        .map_err(|e| e.context(format_args!("the store at `{}`", path.display())))?;
        let finished = FinishedRuns::open(
            tree(finished::FINISHED)?,
            tree(finished::FINISHED_BY_FLOW)?,
            &runs,
            &meta,
        )
        .map_err(|e| e.context(format_args!("the store at `{}`", path.display())))?;
        let counts = indexes
            .count(&runs)
            .map_err(|e| e.context(format_args!("the store at `{}`", path.display())))?;
        let manifest = if config.temporary {
            None
        } else {
            Some(Arc::new(Manifest::check(&path, &meta, &runs, &run_order)?))
        };
        let next_order = match run_order.last() {
            Ok(Some((key, _))) => {
                codec::decode_u64(&key, &"a key of the run creation order")?.saturating_add(1)
            }
            Ok(None) => 0,
            Err(e) => {
                return Err(StoreError::failed(format!(
                    "cannot read the run creation order of the store at `{}`: {e}",
                    path.display()
                )));
            }
        };
        let db = Arc::new(db);
        let commit = GroupCommit::start(&runtime, Arc::downgrade(&db), manifest.clone());
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                runs,
                run_order,
                snapshots,
                history,
                bases,
                tool_calls,
                events,
                commands,
                outbox,
                paces,
                keys,
                keys_by_run,
                api_keys,
                keying: Mutex::new(()),
                changes: ChangeHub::new(),
                indexes,
                counts: Mutex::new(counts),
                records_read: AtomicU64::new(0),
                finished,
                order_cursor: Mutex::new(0),
                next_order: AtomicU64::new(next_order),
                locks: RunLocks::new(),
                path,
                durability: config.durability,
                manifest,
                commit,
            }),
        })
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// When a write counts as done.
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// How many run records this store has read since it was opened (one
    /// run, a page, a scan): what a test reads to see that counting runs
    /// reads none.
    pub fn records_read(&self) -> u64 {
        self.inner
            .records_read
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The space the database takes on disk, in bytes.
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        self.inner.db.size_on_disk().map_err(|e| {
            StoreError::failed(format!(
                "cannot measure the store at `{}`: {e}",
                self.inner.path.display()
            ))
        })
    }

    /// Settles the durability of a write that landed (or did nothing if
    /// `wrote` is false), then answers `value`.
    fn settle<T: Send + 'static>(&self, written: Result<(T, bool), StoreError>) -> StoreFuture<T> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            // The write itself never waits, so a task writing in a loop
            // would never yield: spend tokio's cooperative budget, so that
            // it lets other tasks (the group commit among them) run.
            tokio::task::consume_budget().await;
            let (value, wrote) = written?;
            if wrote {
                if let Some(manifest) = &inner.manifest {
                    manifest.wrote();
                }
                match inner.durability {
                    Durability::Sync => inner.commit.durable().await?,
                    Durability::Async => inner.commit.mark_dirty(),
                    Durability::Exit => {}
                }
            }
            Ok(value)
        })
    }

    /// [`Self::settle`]s a write, then publishes what `change` makes of its
    /// answer if it landed.
    fn settle_publishing<T: Send + 'static>(
        &self,
        written: Result<(T, bool), StoreError>,
        change: impl FnOnce(&T) -> Option<StoreChange>,
    ) -> StoreFuture<T> {
        let change = match &written {
            Ok((value, true)) => change(value),
            _ => None,
        };
        let changes = self.inner.changes.clone();
        let settled = self.settle(written);
        Box::pin(async move {
            let value = settled.await?;
            if let Some(change) = change {
                changes.publish(change);
            }
            Ok(value)
        })
    }

    /// Runs a scan that may write (say so) on the blocking pool, then
    /// settles the durability of what it wrote.
    /// Runs an orphaning scan and publishes a change for each run it
    /// marked.
    fn orphan_and_tell<F>(&self, work: F) -> StoreFuture<Vec<String>>
    where
        F: FnOnce(&Inner) -> Result<(Vec<String>, bool), StoreError> + Send + 'static,
    {
        let store = self.clone();
        Box::pin(async move {
            let orphaned = store.scan_and_settle(work).await?;
            for run_id in &orphaned {
                store.inner.changes.publish(StoreChange::Run {
                    run_id: run_id.clone(),
                });
            }
            Ok(orphaned)
        })
    }

    fn scan_and_settle<T, F>(&self, work: F) -> StoreFuture<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<(T, bool), StoreError> + Send + 'static,
    {
        let store = self.clone();
        Box::pin(async move {
            let written = store.scan(work).await;
            store.settle(written).await
        })
    }

    /// Runs a scan on the blocking pool: it may read many entries.
    fn scan<T, F>(&self, work: F) -> StoreFuture<T>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let spawned = tokio::runtime::Handle::try_current()
            .map(|runtime| runtime.spawn_blocking(move || work(&inner)))
            .map_err(|_| StoreError::invalid("the sled store must be used within a tokio runtime"));
        Box::pin(async move {
            match spawned?.await {
                Ok(result) => result,
                Err(e) => Err(StoreError::failed(format!(
                    "a store scan did not finish: {e}"
                ))),
            }
        })
    }
}

fn ready<T: Send + 'static>(value: Result<T, StoreError>) -> StoreFuture<T> {
    Box::pin(std::future::ready(value))
}

/// How many times, [`LOCK_RETRY_PAUSE`] apart, an open tries again for the
/// lock of a directory whose store this process closed lately.
const LOCK_RETRIES: u32 = 100;
const LOCK_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);
/// How lately: a store closed longer ago holds no lock of this process's.
const CLOSED_LATELY: std::time::Duration = std::time::Duration::from_secs(5);

/// The directories whose stores this process closed, and when.
static CLOSED: std::sync::LazyLock<Mutex<std::collections::HashMap<PathBuf, std::time::Instant>>> =
    std::sync::LazyLock::new(Mutex::default);

/// Notes that a store of `path` is closing (the entries older than
/// [`CLOSED_LATELY`] are let go).
fn closing(path: &Path) {
    let mut closed = CLOSED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    closed.retain(|_, at| at.elapsed() < CLOSED_LATELY);
    closed.insert(path.to_path_buf(), std::time::Instant::now());
}

/// Whether a store of `path` closed in this process lately.
fn closed_lately(path: &Path) -> bool {
    CLOSED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(path)
        .is_some_and(|at| at.elapsed() < CLOSED_LATELY)
}

/// sled 0.34 takes an exclusive `flock` on `<path>/db` and reports a
/// failure to get it as an `Other` I/O error with this text.
fn is_lock_error(error: &sled::Error) -> bool {
    matches!(error, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

fn open_error(path: &Path, error: &sled::Error) -> StoreError {
    if let sled::Error::Io(io) = error
        && is_lock_error(error)
    {
        return StoreError::unavailable(format!(
            "the store directory `{}` is locked by another process: a sled database can be \
             open in one process (and one store) at a time. If that process is a \
             `leasehold serve`, act on its runs through it: add `--server URL` to the \
             command (`leasehold runs --server http://127.0.0.1:7878 list`, with the \
             address it printed) or set LEASEHOLD_SERVER; otherwise stop the other leasehold or use another \
             directory ({io})",
            path.display()
        ));
    }
    StoreError::failed(format!(
        "cannot open the store at `{}`: {error}",
        path.display()
    ))
}

/// Records the store format on first open; refuses a database of another
/// format.
fn check_format(meta: &Tree, path: &Path) -> Result<(), StoreError> {
    let what = format!("the store format of `{}`", path.display());
    let stored = meta
        .get(codec::META_FORMAT_KEY)
        .map_err(|e| StoreError::failed(format!("cannot read {what}: {e}")))?;
    match stored {
        Some(bytes) => {
            let format = codec::decode_u32(&bytes, &what)?;
            if format != codec::STORE_FORMAT {
                return Err(StoreError::corrupt(format!(
                    "the store at `{}` is in store format version {format}, but this build reads \
                     only version {}; it was written by another leasehold version: refusing to open it",
                    path.display(),
                    codec::STORE_FORMAT
                )));
            }
            Ok(())
        }
        None => {
            // Made durable by the first flush, with the first writes.
            meta.insert(codec::META_FORMAT_KEY, &codec::STORE_FORMAT.to_be_bytes())
                .map_err(|e| StoreError::failed(format!("cannot record {what}: {e}")))?;
            Ok(())
        }
    }
}

/// What failed while `doing`, of the kind sled's error says: a damaged
/// log is corrupt; anything else (an I/O error, a bug sled reports) a
/// failure of the store's machinery.
fn failed(doing: &dyn fmt::Display, error: &sled::Error) -> StoreError {
    let message = format!("{doing} failed: {error}");
    match error {
        sled::Error::Corruption { .. } => StoreError::corrupt(message),
        sled::Error::Unsupported(_) => StoreError::invalid(message),
        _ => StoreError::failed(message),
    }
}

struct RunName<'a>(&'a str);

impl fmt::Display for RunName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "run `{}`", self.0)
    }
}

fn no_run(run_id: &str) -> StoreError {
    StoreError::not_found(format!("no run `{run_id}`"))
}

impl Inner {
    /// A run's record left `from` (`None`: created) for `to` (`None`:
    /// deleted): counted.
    fn counted(&self, from: Option<RunStatus>, to: Option<RunStatus>) {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .moved(from, to);
    }

    /// Counts a run record read ([`SledStore::records_read`]).
    fn record_read(&self) {
        self.records_read
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The runs in each status now.
    fn counts(&self) -> StatusCounts {
        *self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The run's record and the bytes it was read from.
    fn read_run(&self, run_id: &str) -> Result<Option<(IVec, RunRecord)>, StoreError> {
        self.record_read();
        let bytes = self
            .runs
            .get(run_id.as_bytes())
            .map_err(|e| failed(&format_args!("reading run `{run_id}`"), &e))?;
        bytes
            .map(|bytes| decode(&bytes, &RunName(run_id)).map(|record| (bytes, record)))
            .transpose()
    }

    /// Writes `entries` (each a tree, a key and a value), in their order,
    /// if `fence` is the run's, atomically with the check; says whether
    /// anything was written. sled recovers a prefix of its log, so after a
    /// crash an entry is kept only with every entry before it.
    fn fenced_put(
        &self,
        run_id: &str,
        fence: u64,
        entries: &[(&Tree, Vec<u8>, IVec)],
        doing: &dyn fmt::Display,
    ) -> Result<(Fenced<()>, bool), StoreError> {
        let mut run = self.locks.lock(run_id);
        let read = || {
            self.runs
                .get(run_id.as_bytes())
                .map_err(|e| failed(&format_args!("reading run `{run_id}`"), &e))
        };
        let holder = run
            .holder(run_id, read, &RunName(run_id))?
            .ok_or_else(|| no_run(run_id))?;
        let checked = fencing::check_holder(holder.fence, holder.owner_id.as_deref(), fence);
        if !checked.is_applied() {
            return Ok((checked, false));
        }
        for (tree, key, value) in entries {
            tree.insert(key.as_slice(), value.clone())
                .map_err(|e| failed(doing, &e))?;
        }
        Ok((checked, !entries.is_empty()))
    }

    /// Replaces the run's record by what `change` makes of it, by
    /// compare-and-set; says whether it was replaced.
    fn change_run<T>(
        &self,
        run_id: &str,
        change: impl Fn(Option<RunRecord>) -> Result<(T, Option<RunRecord>), StoreError>,
    ) -> Result<(T, bool), StoreError> {
        let doing = format_args!("changing run `{run_id}`");
        let mut run = self.locks.lock(run_id);
        run.forget(run_id);
        loop {
            let (old, record) = self.read_run(run_id)?.unzip();
            let old_entries = record.as_ref().map(IndexEntries::of).transpose()?;
            let old_finished = record.as_ref().and_then(FinishedEntries::of);
            let old_status = record.as_ref().map(|record| record.status);
            let (value, changed) = change(record)?;
            let Some(changed) = changed else {
                return Ok((value, false));
            };
            let new_entries = IndexEntries::of(&changed)?;
            let new_status = changed.status;
            let new_finished = FinishedEntries::of(&changed);
            let new = encode(&changed, &RunName(run_id))?;
            // The notice before the record: after a crash, a change that
            // survives has its notice.
            if let Some(old_status) = old_status {
                self.outbox.keep(&self.db, old_status, &changed)?;
            }
            // The new entries before the record, the old ones removed after
            // it: the indexes never miss the record's current entries.
            self.indexes.add(old_entries.as_ref(), &new_entries)?;
            self.finished
                .add(old_finished.as_ref(), new_finished.as_ref())?;
            match self
                .runs
                .compare_and_swap(run_id.as_bytes(), old, Some(new))
                .map_err(|e| failed(&doing, &e))?
            {
                Ok(()) => {
                    self.counted(old_status, Some(new_status));
                    if let Some(old_entries) = &old_entries {
                        self.indexes.remove(old_entries, &new_entries)?;
                    }
                    self.finished
                        .remove(old_finished.as_ref(), new_finished.as_ref())?;
                    return Ok((value, true));
                }
                // Moved since it was read: apply the rule to what is there
                // now. (Every writer holds the run's lock, so this is the
                // compare-and-set's guarantee, not a path taken in practice.)
                Err(_moved) => {}
            }
        }
    }

    fn load_all<T: serde::de::DeserializeOwned>(
        entries: impl Iterator<Item = sled::Result<(IVec, IVec)>>,
        what: &str,
        run_id: &str,
    ) -> Result<Vec<T>, StoreError> {
        let doing = format!("reading the {what}s of run `{run_id}`");
        let name = format!("a {what} of run `{run_id}`");
        entries
            .map(|entry| {
                let (_, value) = entry.map_err(|e| failed(&doing, &e))?;
                decode(&value, &name)
            })
            .collect()
    }
}
