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
//! Point reads and writes run on the calling task: without sled
//! transactions in the process they never wait for a flush (a flush holds
//! sled's concurrency lock only in shared mode) and take microseconds.
//! Scans run on tokio's blocking pool. Durability is then settled by the
//! [group commit](super::commit) according to the store's [`Durability`].

use std::collections::HashSet;
use std::fmt;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use leasehold_actors::{
    BoxFuture, ChangeFeed, ChangeHub, ClaimOutcome, Delivery, Event, Fenced, Notice, NoticeTake,
    Pace, PurgeReport, PurgeRule, QueueClaim, RunCommand, RunPage, RunQuery, RunRecord, RunStatus,
    RunUpdate, Snapshot, Store, StoreChange, StoreError, StoredCommand, SummaryPage,
    ToolCallRecord, fencing, listing,
};
use sled::{IVec, Tree};

use super::codec::{self, decode, encode};
use super::commit::GroupCommit;
use super::manifest::Manifest;
use super::run_index::{IndexEntries, RunIndexes};
use super::run_locks::RunLocks;
use super::sled_commands;
use super::sled_outbox::{self, Outbox};
use super::sled_retention::{self, FinishedEntries, FinishedRuns};
use super::{Durability, SledConfig};

mod purge;

/// The [`Store`] port on a sled database. Cheap to clone; clones share the
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
    tool_calls: Tree,
    events: Tree,
    commands: Tree,
    /// The notices of pauses and ends, until delivered.
    outbox: Outbox,
    /// Each pace key's learned pace, as JSON ([`PACES`]).
    paces: Tree,
    /// Tells subscribers of writes that landed (in this process: sled
    /// allows one process per database).
    changes: ChangeHub,
    indexes: RunIndexes,
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
        if let Some(manifest) = &self.manifest
            && let Err(error) = self.commit.alone(|| manifest.record(&self.db))
        {
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
        let db = sled::Config::new()
            .path(&path)
            .temporary(config.temporary)
            .cache_capacity(config.cache_capacity)
            .open()
            .map_err(|e| open_error(&path, &e))?;
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
        let tool_calls = tree(codec::TOOL_CALLS)?;
        let events = tree(codec::EVENTS)?;
        let commands = tree(sled_commands::COMMANDS)?;
        let outbox = Outbox::new(tree(sled_outbox::OUTBOX)?);
        let paces = tree(PACES)?;
        let indexes = RunIndexes::open(
            tree(codec::RUNS_BY_STATUS)?,
            tree(codec::RUNS_BY_FLOW)?,
            &runs,
            &meta,
        )
        .map_err(|e| e.context(format_args!("the store at `{}`", path.display())))?;
        let finished = FinishedRuns::open(
            tree(sled_retention::FINISHED)?,
            tree(sled_retention::FINISHED_BY_FLOW)?,
            &runs,
            &meta,
        )
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
                tool_calls,
                events,
                commands,
                outbox,
                paces,
                changes: ChangeHub::new(),
                indexes,
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
    fn settle<T: Send + 'static>(
        &self,
        written: Result<(T, bool), StoreError>,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
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
    ) -> BoxFuture<'static, Result<T, StoreError>> {
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
    fn orphan_and_tell<F>(&self, work: F) -> BoxFuture<'static, Result<Vec<String>, StoreError>>
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

    fn scan_and_settle<T, F>(&self, work: F) -> BoxFuture<'static, Result<T, StoreError>>
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
    fn scan<T, F>(&self, work: F) -> BoxFuture<'static, Result<T, StoreError>>
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
                Err(e) => Err(StoreError::failed(format!("a store scan did not finish: {e}"))),
            }
        })
    }
}

/// The tree of learned paces: a pace key's bytes to its pace as JSON.
const PACES: &str = "paces";

/// Run records read one at a time, in listing order.
type Records<'a> = Box<dyn Iterator<Item = Result<RunRecord, StoreError>> + 'a>;

fn ready<T: Send + 'static>(
    value: Result<T, StoreError>,
) -> BoxFuture<'static, Result<T, StoreError>> {
    Box::pin(std::future::ready(value))
}

fn open_error(path: &Path, error: &sled::Error) -> StoreError {
    if let sled::Error::Io(io) = error {
        // sled 0.34 takes an exclusive `flock` on `<path>/db` and reports a
        // failure to get it as an `Other` I/O error with this text.
        if io.to_string().contains("could not acquire lock") {
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

fn failed(doing: &dyn fmt::Display, error: &sled::Error) -> StoreError {
    StoreError::failed(format!("{doing} failed: {error}"))
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
    /// The run's record and the bytes it was read from.
    fn read_run(&self, run_id: &str) -> Result<Option<(IVec, RunRecord)>, StoreError> {
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
        let bytes = self
            .runs
            .get(run_id.as_bytes())
            .map_err(|e| failed(&format_args!("reading run `{run_id}`"), &e))?
            .ok_or_else(|| no_run(run_id))?;
        let checked = fencing::check(run.decode(bytes, &RunName(run_id))?, fence);
        if !checked.is_applied() {
            return Ok((checked, false));
        }
        for (tree, key, value) in entries {
            tree.insert(key.as_slice(), value.clone())
                .map_err(|e| failed(doing, &e))?;
        }
        Ok((checked, !entries.is_empty()))
    }

    /// Keeps `snapshot` in its run's history and as the latest of its loop,
    /// if `fence` is the run's: the history first, so that after a crash
    /// the latest snapshot of a loop is always in the history.
    fn save_snapshot(
        &self,
        snapshot: &Snapshot,
        fence: u64,
    ) -> Result<(Fenced<()>, bool), StoreError> {
        let doing = format_args!(
            "saving the snapshot of `{}` in run `{}`",
            snapshot.path, snapshot.run_id
        );
        let value = IVec::from(encode(snapshot, &doing)?);
        let kept = codec::history_key(&snapshot.run_id, snapshot.seq, &snapshot.path)?;
        let latest = codec::run_key(&snapshot.run_id, snapshot.path.as_bytes())?;
        let entries = [
            (&self.history, kept, value.clone()),
            (&self.snapshots, latest, value),
        ];
        self.fenced_put(&snapshot.run_id, fence, &entries, &doing)
    }

    /// Replaces the run's record by what `change` makes of it, by
    /// compare-and-set; says whether it was replaced.
    fn change_run<T>(
        &self,
        run_id: &str,
        change: impl Fn(Option<RunRecord>) -> Result<(T, Option<RunRecord>), StoreError>,
    ) -> Result<(T, bool), StoreError> {
        let doing = format_args!("changing run `{run_id}`");
        let _run = self.locks.lock(run_id);
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

    fn create_run(&self, record: &RunRecord) -> Result<((), bool), StoreError> {
        let run_id = record.run_id.as_str();
        let doing = format_args!("creating run `{run_id}`");
        let bytes = encode(record, &RunName(run_id))?;
        let order_value = encode(&run_id, &RunName(run_id))?;
        let _run = self.locks.lock(run_id);
        if self
            .runs
            .contains_key(run_id.as_bytes())
            .map_err(|e| failed(&doing, &e))?
        {
            return Err(StoreError::conflict(format!("run `{run_id}` already exists")));
        }
        // The creation order first: sled recovers a prefix of its log, so a
        // run that survives a crash has its place in the order (an order
        // entry without its run is skipped by `list_runs`).
        let order = self.next_order.fetch_add(1, Ordering::Relaxed);
        self.run_order
            .insert(order.to_be_bytes(), order_value)
            .map_err(|e| failed(&doing, &e))?;
        self.indexes.add(None, &IndexEntries::of(record)?)?;
        self.finished
            .add(None, FinishedEntries::of(record).as_ref())?;
        match self
            .runs
            .compare_and_swap(run_id.as_bytes(), None::<&[u8]>, Some(bytes))
            .map_err(|e| failed(&doing, &e))?
        {
            Ok(()) => Ok(((), true)),
            Err(_) => {
                // Not a path taken while every creator holds the run's lock.
                self.run_order
                    .remove(order.to_be_bytes())
                    .map_err(|e| failed(&doing, &e))?;
                Err(StoreError::conflict(format!("run `{run_id}` already exists")))
            }
        }
    }

    fn reconcile_orphans(&self, now_ms: u64) -> Result<(Vec<String>, bool), StoreError> {
        self.orphan_where(|record| fencing::orphan(record, now_ms))
    }

    /// Marks orphaned each run `rule` orphans: found by a scan, changed
    /// under the run's lock after `rule` is applied again to what is there.
    fn orphan_where(
        &self,
        rule: impl Fn(&RunRecord) -> Option<RunRecord>,
    ) -> Result<(Vec<String>, bool), StoreError> {
        let doing = "reconciling orphaned runs";
        let mut candidates = Vec::new();
        for entry in &self.runs {
            let (key, bytes) = entry.map_err(|e| failed(&doing, &e))?;
            let run_id = String::from_utf8_lossy(&key).into_owned();
            let record: RunRecord = decode(&bytes, &RunName(&run_id))?;
            if rule(&record).is_some() {
                candidates.push(record.run_id);
            }
        }
        let mut orphaned = Vec::new();
        for run_id in candidates {
            // Checked again under the run's lock: it may have been renewed
            // or claimed since the scan.
            let ((), wrote) =
                self.change_run(&run_id, |record| Ok(((), record.and_then(|r| rule(&r)))))?;
            if wrote {
                orphaned.push(run_id);
            }
        }
        let wrote = !orphaned.is_empty();
        Ok((orphaned, wrote))
    }

    /// Claims up to `max` queued runs, oldest first: walks the status
    /// index's queued runs up and claims each under its lock, where
    /// [`fencing::claim_queued`] skips one claimed meanwhile (or an index
    /// entry left over by a crash).
    fn claim_queued(&self, claim: &QueueClaim) -> Result<(Vec<RunRecord>, bool), StoreError> {
        let mut claimed = Vec::new();
        for run_id in self.indexes.ids_in(RunStatus::Queued)? {
            if claimed.len() >= claim.max {
                break;
            }
            let (record, _) = self.change_run(&run_id?, |record| {
                let record = record.and_then(|r| fencing::claim_queued(&r, claim));
                Ok((record.clone(), record))
            })?;
            claimed.extend(record);
        }
        let wrote = !claimed.is_empty();
        Ok((claimed, wrote))
    }

    fn list_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let doing = "listing runs";
        let mut runs = Vec::new();
        let mut listed = HashSet::new();
        for entry in &self.run_order {
            let (_, value) = entry.map_err(|e| failed(&doing, &e))?;
            let run_id: String = decode(&value, &"an entry of the run creation order")?;
            // A crash between a creation's two writes leaves a place
            // without its run; creating the run again gives it a second one.
            if listed.contains(&run_id) {
                continue;
            }
            if let Some((_, record)) = self.read_run(&run_id)? {
                runs.push(record);
                listed.insert(run_id);
            }
        }
        Ok(runs)
    }

    /// One page of runs: through an index when the query filters by status
    /// or flow, otherwise down the runs tree from the cursor; either way
    /// reading no run past the one that proves a next page exists.
    fn list_runs_page(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        listing::page(query, self.listed(query)?)
    }

    /// The page of [`Inner::list_runs_page`] as summaries: each record is
    /// decoded, summarized and dropped before the next is read.
    fn list_run_summaries(&self, query: &RunQuery) -> Result<SummaryPage, StoreError> {
        listing::summaries(query, self.listed(query)?)
    }

    /// The records a page of `query` is cut from, in listing order, read
    /// one at a time as they are pulled.
    fn listed<'a>(&'a self, query: &'a RunQuery) -> Result<Records<'a>, StoreError> {
        if let Some(ids) = self.indexes.candidates(query)? {
            return Ok(Box::new(ids.filter_map(|id| {
                id.and_then(|id| self.read_run(&id))
                    .map(|read| read.map(|(_, record)| record))
                    .transpose()
            })));
        }
        let upper = query.after.as_ref().map_or(Bound::Unbounded, |after| {
            Bound::Excluded(after.as_bytes().to_vec())
        });
        let records = self
            .runs
            .range::<Vec<u8>, _>((Bound::Unbounded, upper))
            .rev()
            .map(|entry| {
                let (key, bytes) = entry.map_err(|e| failed(&"listing runs", &e))?;
                decode(&bytes, &RunName(&String::from_utf8_lossy(&key)))
            });
        Ok(Box::new(records))
    }

    /// How many runs the status index holds under `status`: exact while
    /// the store runs; after a crash it may also count an entry left over
    /// (see [`RunIndexes`]), so a bound read from it errs on the safe side.
    fn count_runs(&self, status: RunStatus) -> Result<u64, StoreError> {
        let mut count = 0_u64;
        for id in self.indexes.ids_in(status)? {
            id?;
            count = count.saturating_add(1);
        }
        Ok(count)
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

impl Store for SledStore {
    fn create_run(&self, record: RunRecord) -> BoxFuture<'static, Result<(), StoreError>> {
        let run_id = record.run_id.clone();
        // A queued run is also news for every executor with room.
        let queued = record.status == RunStatus::Queued;
        let changes = self.inner.changes.clone();
        let created = self.settle_publishing(self.inner.create_run(&record), |()| {
            Some(StoreChange::Run { run_id })
        });
        Box::pin(async move {
            created.await?;
            if queued {
                changes.publish(StoreChange::Queued);
            }
            Ok(())
        })
    }

    fn claim_run(
        &self,
        run_id: &str,
        owner_id: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> BoxFuture<'static, Result<ClaimOutcome, StoreError>> {
        let claimed = self.inner.change_run(run_id, |record| {
            Ok(match record {
                None => (ClaimOutcome::NotFound, None),
                Some(record) => match fencing::claim(&record, owner_id, now_ms, ttl_ms) {
                    Ok(claimed) => (ClaimOutcome::Claimed(claimed.clone()), Some(claimed)),
                    Err(refused) => (refused, None),
                },
            })
        });
        self.settle_publishing(claimed, |_| {
            Some(StoreChange::Run {
                run_id: run_id.to_owned(),
            })
        })
    }

    fn renew_run(
        &self,
        run_id: &str,
        fence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> BoxFuture<'static, Result<Fenced<()>, StoreError>> {
        let renewed = self.inner.change_run(run_id, |record| {
            let record = record.ok_or_else(|| no_run(run_id))?;
            Ok(match fencing::renew(&record, fence, now_ms, ttl_ms) {
                Ok(renewed) => (Fenced::Applied(()), Some(renewed)),
                Err(stale) => (stale, None),
            })
        });
        self.settle(renewed)
    }

    fn update_run(
        &self,
        run_id: &str,
        fence: u64,
        update: RunUpdate,
    ) -> BoxFuture<'static, Result<Fenced<()>, StoreError>> {
        let updated = self.inner.change_run(run_id, |record| {
            let record = record.ok_or_else(|| no_run(run_id))?;
            Ok(match fencing::update(&record, fence, &update) {
                Ok(updated) => (Fenced::Applied(()), Some(updated)),
                Err(stale) => (stale, None),
            })
        });
        self.settle_publishing(updated, |_| {
            Some(StoreChange::Run {
                run_id: run_id.to_owned(),
            })
        })
    }

    fn save_snapshot(
        &self,
        snapshot: Snapshot,
        fence: u64,
    ) -> BoxFuture<'static, Result<Fenced<()>, StoreError>> {
        let saved = self.inner.save_snapshot(&snapshot, fence);
        self.settle(saved)
    }

    fn record_tool_call(
        &self,
        run_id: &str,
        record: ToolCallRecord,
        fence: u64,
    ) -> BoxFuture<'static, Result<Fenced<()>, StoreError>> {
        let doing = format_args!("recording tool call `{}` of run `{run_id}`", record.key);
        let inner = &self.inner;
        let recorded = codec::run_key(run_id, record.key.as_bytes())
            .and_then(|key| Ok([(&inner.tool_calls, key, encode(&record, &doing)?.into())]))
            .and_then(|entry| inner.fenced_put(run_id, fence, &entry, &doing));
        self.settle(recorded)
    }

    fn append_events(
        &self,
        run_id: &str,
        events: Vec<Event>,
        fence: u64,
    ) -> BoxFuture<'static, Result<Fenced<()>, StoreError>> {
        let doing = format_args!("appending {} events to run `{run_id}`", events.len());
        let inner = &self.inner;
        let appended = events
            .iter()
            .map(|event| {
                let key = codec::event_key(run_id, event.seq)?;
                Ok((&inner.events, key, encode(event, &doing)?.into()))
            })
            .collect::<Result<Vec<_>, StoreError>>()
            .and_then(|entries| inner.fenced_put(run_id, fence, &entries, &doing));
        self.settle_publishing(appended, |_| {
            Some(StoreChange::Events {
                run_id: run_id.to_owned(),
            })
        })
    }

    fn claim_queued(
        &self,
        claim: QueueClaim,
    ) -> BoxFuture<'static, Result<Vec<RunRecord>, StoreError>> {
        let store = self.clone();
        Box::pin(async move {
            let claimed = store
                .scan_and_settle(move |inner| inner.claim_queued(&claim))
                .await?;
            for record in &claimed {
                store.inner.changes.publish(StoreChange::Run {
                    run_id: record.run_id.clone(),
                });
            }
            Ok(claimed)
        })
    }

    fn reconcile_orphans(
        &self,
        now_ms: u64,
    ) -> BoxFuture<'static, Result<Vec<String>, StoreError>> {
        self.orphan_and_tell(move |inner| inner.reconcile_orphans(now_ms))
    }

    fn orphan_runs_of_gone_holders(
        &self,
        now_ms: u64,
        gone: leasehold_actors::GoneHolder,
    ) -> BoxFuture<'static, Result<Vec<String>, StoreError>> {
        self.orphan_and_tell(move |inner| {
            inner.orphan_where(|record| {
                let held_by_the_gone = record.owner_id.as_deref().is_some_and(|o| gone(o));
                held_by_the_gone
                    .then(|| fencing::orphan_of_a_gone_holder(record, now_ms))
                    .flatten()
            })
        })
    }

    fn load_run(&self, run_id: &str) -> BoxFuture<'static, Result<Option<RunRecord>, StoreError>> {
        ready(
            self.inner
                .read_run(run_id)
                .map(|read| read.map(|(_, record)| record)),
        )
    }

    fn list_runs(&self) -> BoxFuture<'static, Result<Vec<RunRecord>, StoreError>> {
        self.scan(Inner::list_runs)
    }

    fn list_runs_page(&self, query: &RunQuery) -> BoxFuture<'static, Result<RunPage, StoreError>> {
        let query = query.clone();
        self.scan(move |inner| inner.list_runs_page(&query))
    }

    fn list_run_summaries(
        &self,
        query: &RunQuery,
    ) -> BoxFuture<'static, Result<SummaryPage, StoreError>> {
        let query = query.clone();
        self.scan(move |inner| inner.list_run_summaries(&query))
    }

    fn count_runs(&self, status: RunStatus) -> BoxFuture<'static, Result<u64, StoreError>> {
        self.scan(move |inner| inner.count_runs(status))
    }

    fn load_snapshots(
        &self,
        run_id: &str,
    ) -> BoxFuture<'static, Result<Vec<Snapshot>, StoreError>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let prefix = codec::run_prefix(&run_id)?;
            Inner::load_all(inner.snapshots.scan_prefix(prefix), "snapshot", &run_id)
        })
    }

    /// One prefix scan of the history tree: its keys put the snapshots in
    /// the order of their places, then of their paths.
    fn load_snapshot_history(
        &self,
        run_id: &str,
    ) -> BoxFuture<'static, Result<Vec<Snapshot>, StoreError>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let prefix = codec::run_prefix(&run_id)?;
            Inner::load_all(
                inner.history.scan_prefix(prefix),
                "history snapshot",
                &run_id,
            )
        })
    }

    fn load_tool_calls(
        &self,
        run_id: &str,
    ) -> BoxFuture<'static, Result<Vec<ToolCallRecord>, StoreError>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let prefix = codec::run_prefix(&run_id)?;
            Inner::load_all(inner.tool_calls.scan_prefix(prefix), "tool call", &run_id)
        })
    }

    fn load_events(
        &self,
        run_id: &str,
        after_seq: u64,
    ) -> BoxFuture<'static, Result<Vec<Event>, StoreError>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let Some(first) = after_seq.checked_add(1) else {
                return Ok(Vec::new());
            };
            let from = codec::event_key(&run_id, first)?;
            let to = codec::event_key(&run_id, u64::MAX)?;
            Inner::load_all(inner.events.range(from..=to), "event", &run_id)
        })
    }

    fn last_event(&self, run_id: &str) -> BoxFuture<'static, Result<Option<Event>, StoreError>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let from = codec::event_key(&run_id, 0)?;
            let to = codec::event_key(&run_id, u64::MAX)?;
            let last = inner.events.range(from..=to).next_back();
            Ok(Inner::load_all(last.into_iter(), "event", &run_id)?.pop())
        })
    }

    fn flush(&self) -> BoxFuture<'static, Result<(), StoreError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.commit.durable().await })
    }

    fn changes(&self) -> ChangeFeed {
        self.inner.changes.subscribe()
    }

    /// sled locks its directory: one process at a time opens it.
    fn is_exclusive(&self) -> bool {
        true
    }

    fn send_command(
        &self,
        run_id: &str,
        command: RunCommand,
    ) -> BoxFuture<'static, Result<u64, StoreError>> {
        let inner = &self.inner;
        let sent = match inner.read_run(run_id) {
            Ok(Some(_)) => sled_commands::send(&inner.db, &inner.commands, run_id, command),
            Ok(None) => Err(no_run(run_id)),
            Err(error) => Err(error),
        };
        let run_id = run_id.to_owned();
        self.settle_publishing(sent.map(|id| (id, true)), |_| {
            Some(StoreChange::Command { run_id })
        })
    }

    fn load_paces(&self) -> BoxFuture<'static, Result<Vec<(String, Pace)>, StoreError>> {
        self.scan(|inner| {
            let mut paces = Vec::new();
            for entry in &inner.paces {
                let (key, value) = entry.map_err(|e| {
                    StoreError::failed(format!("cannot read the learned paces: {e}"))
                })?;
                let key = String::from_utf8_lossy(&key).into_owned();
                // A pace is what was learned, not what was done: one that
                // cannot be read is learned again, not a reason to refuse
                // the store.
                match serde_json::from_slice(&value) {
                    Ok(pace) => paces.push((key, pace)),
                    Err(error) => {
                        tracing::warn!(%key, %error, "a learned pace in the store is unreadable: ignored");
                    }
                }
            }
            Ok(paces)
        })
    }

    fn save_paces(
        &self,
        paces: Vec<(String, Option<Pace>)>,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        self.scan_and_settle(move |inner| {
            let failed =
                |e: sled::Error| StoreError::failed(format!("cannot save the learned paces: {e}"));
            for (key, pace) in &paces {
                match pace {
                    Some(pace) => {
                        let value = serde_json::to_vec(pace).map_err(|e| {
                            StoreError::invalid(format!("cannot encode the pace of `{key}`: {e}"))
                        })?;
                        inner.paces.insert(key.as_bytes(), value).map_err(failed)?;
                    }
                    None => {
                        inner.paces.remove(key.as_bytes()).map_err(failed)?;
                    }
                }
            }
            Ok(((), !paces.is_empty()))
        })
    }

    fn count_commands(&self, run_id: &str) -> BoxFuture<'static, Result<u64, StoreError>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| sled_commands::count(&inner.commands, &run_id))
    }

    fn take_commands(
        &self,
        owner_id: &str,
    ) -> BoxFuture<'static, Result<Vec<StoredCommand>, StoreError>> {
        let owner_id = owner_id.to_owned();
        let store = self.clone();
        Box::pin(async move {
            let taken = store
                .scan(move |inner| {
                    let taken = sled_commands::take(&inner.commands, |run_id| {
                        Ok(inner.read_run(run_id)?.is_some_and(|(_, record)| {
                            record.owner_id.as_deref() == Some(owner_id.as_str())
                        }))
                    })?;
                    let wrote = !taken.is_empty();
                    Ok((taken, wrote))
                })
                .await;
            store.settle(taken).await
        })
    }

    fn take_notices(
        &self,
        take: NoticeTake,
    ) -> BoxFuture<'static, Result<Vec<Notice>, StoreError>> {
        self.scan_and_settle(move |inner| inner.outbox.take(&take))
    }

    fn settle_notice(
        &self,
        id: u64,
        held_until_ms: u64,
        delivery: Option<Delivery>,
    ) -> BoxFuture<'static, Result<bool, StoreError>> {
        self.scan_and_settle(move |inner| inner.outbox.settle(id, held_until_ms, delivery))
    }

    fn purge_finished(
        &self,
        rule: PurgeRule,
    ) -> BoxFuture<'static, Result<PurgeReport, StoreError>> {
        let store = self.clone();
        Box::pin(async move {
            let report = store
                .scan_and_settle(move |inner| {
                    let (report, wrote) = inner.purge_finished(&rule)?;
                    if !report.purged.is_empty() {
                        inner.outbox.remove_of(&report.purged)?;
                    }
                    Ok((report, wrote))
                })
                .await?;
            // A follower of a deleted run looks again and finds it gone.
            for run_id in &report.purged {
                store.inner.changes.publish(StoreChange::Run {
                    run_id: run_id.clone(),
                });
            }
            Ok(report)
        })
    }
}

#[cfg(test)]
mod tests {
    use leasehold_actors::{RunQuery, RunRecord, RunStatus};

    use super::SledStore;
    use crate::store::codec::decodes;
    use crate::store::{Durability, SledConfig};

    /// Run `n`: every tenth (from the fourth) waits for a person, the
    /// others completed; flows alternate `alpha`, `beta`.
    fn record(n: u32) -> RunRecord {
        let status = if n % 10 == 3 {
            "waiting_human"
        } else {
            "completed"
        };
        let flow = if n.is_multiple_of(2) { "alpha" } else { "beta" };
        serde_json::from_value(serde_json::json!({
            "run_id": format!("run-{n:08}"), "flow": {"name": flow}, "status": status,
            "owner_id": null, "fence": 1, "lease_expires_at_ms": 0, "reason": null,
            "answer": null, "pause": null, "created_at_ms": n, "updated_at_ms": n,
        }))
        .expect("a record")
    }

    /// A page of 50: status, flow, created before, after.
    fn page_of_50(
        status: Option<RunStatus>,
        flow: Option<&str>,
        before: Option<u64>,
        after: Option<&str>,
    ) -> RunQuery {
        let mut query = RunQuery::first(50);
        query.status = status;
        query.flow = flow.map(str::to_owned);
        query.created_before_ms = before;
        query.after = after.map(str::to_owned);
        query
    }

    /// Decodes one page on this thread; returns it and the values decoded.
    fn page_counted(store: &SledStore, query: &RunQuery) -> (Vec<String>, Option<String>, u64) {
        let before = decodes::so_far();
        let page = store.inner.list_runs_page(query).expect("a page");
        let decoded = decodes::so_far() - before;
        let ids = page.runs.into_iter().map(|r| r.run_id).collect();
        (ids, page.next, decoded)
    }

    #[tokio::test]
    async fn a_filtered_page_of_ten_thousand_runs_decodes_only_its_own_runs() {
        // A directory of its own: tests of this binary run in parallel,
        // and a sled directory can be open once at a time.
        let dir = tempfile::tempdir().expect("a directory");
        let store = SledStore::open(
            SledConfig::new(dir.path())
                .with_temporary(true)
                .with_durability(Durability::Exit),
        )
        .expect("a store");
        for n in 0..10_000 {
            store.inner.create_run(&record(n)).expect("created");
        }
        let waiting = Some(RunStatus::WaitingHuman);
        let rare = page_of_50(waiting, Some("beta"), Some(5_000), None);
        let pages = [
            page_of_50(None, None, None, None),
            page_of_50(waiting, None, None, None),
            rare.clone(),
            page_of_50(None, Some("alpha"), None, Some("run-00000500")),
        ];
        for query in pages {
            let (ids, next, decoded) = page_counted(&store, &query);
            assert_eq!(ids.len(), 50, "{query:?}");
            assert!(next.is_some(), "{query:?}");
            assert!(
                decoded <= 51,
                "{decoded} records decoded for a page of 50: {query:?}"
            );
        }
        // The status index drives the walk: a rare status is found
        // without reading the runs in between.
        let (ids, _, _) = page_counted(&store, &rare);
        assert_eq!(ids.first().map(String::as_str), Some("run-00004993"));
        assert_eq!(ids.last().map(String::as_str), Some("run-00004503"));
        // The last page says so, having read nothing.
        let last = page_of_50(waiting, None, None, Some("run-00000003"));
        let (ids, next, decoded) = page_counted(&store, &last);
        assert!(
            ids.is_empty() && next.is_none() && decoded == 0,
            "{ids:?} {next:?} {decoded}"
        );
    }
}
