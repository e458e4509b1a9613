//! The store's manifest: what the sled database is known to hold, kept
//! beside it, so that damage that makes sled recover an older state is
//! said instead of passed over.
//!
//! sled 0.34 checksums every message of its log, and on opening it replays
//! the log up to the first message that is missing or fails its checksum:
//! a damaged file opens as an *older* state of the database, without an
//! error. Runs created after that point are gone, and runs changed after it
//! are back to an older record. Nothing inside the database can tell: a
//! counter kept in it is rolled back with the rest.
//!
//! So the store keeps a *commit marker* inside the database (a number in
//! the `meta` tree, raised each time the manifest is written) and, outside
//! it, the manifest `leasehold.manifest` — the last marker known to be on
//! disk and the run count at that marker. A manifest is recorded in this
//! order: read the run count, write the next marker, flush the database,
//! `fsync` its file, then write the manifest (to a temporary file, `fsync`,
//! rename). It therefore only ever asserts what was durable — synced, not
//! just written — when it was recorded: a process killed at any point, or
//! even a power cut, leaves a database at or past its manifest. Everything
//! read before the marker was written precedes it in sled's log, so a
//! database recovered to any point at or after the marker holds at least
//! the recorded runs.
//!
//! On open, a database whose marker or run count is below its manifest's
//! is refused with an error naming what was lost; removing the manifest
//! accepts what is left (the next write records a new one). A database
//! without a manifest (a data directory of an older version, or one whose
//! manifest was removed) opens as it is.
//!
//! Cost: a manifest is recorded at most once per [`RECORD_EVERY`] while
//! the store is written to (by the group commit after a flush, once that
//! flush's writers have their answer, on the blocking pool: one insert, one
//! flush, two `fsync`s and a rename, ~14 ms on the development VM, during
//! which the next flush waits — never two flushes at once), and when the
//! store is closed after writes. A store only read writes nothing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold_actors::StoreError;
use serde::{Deserialize, Serialize};

use super::codec;

/// The manifest's file name in the store's directory.
pub(crate) const FILE: &str = "leasehold.manifest";

/// The key of the commit marker in the `meta` tree.
const MARKER_KEY: &[u8] = b"commit_marker";

/// The least time between two manifests recorded while the store is
/// written to.
pub(crate) const RECORD_EVERY: Duration = Duration::from_secs(1);

/// What the database held, durably, when the manifest was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Recorded {
    /// The commit marker then written.
    marker: u64,
    /// Runs ever created (one past the last key of `run_order`).
    runs: u64,
    /// When, in Unix milliseconds.
    at_ms: u64,
}

/// The manifest of one open store.
#[derive(Debug)]
pub(crate) struct Manifest {
    file: PathBuf,
    database_file: PathBuf,
    /// Written since the last manifest was recorded (or none exists yet).
    unrecorded: AtomicBool,
    /// The last marker written, and when the last manifest was recorded.
    state: Mutex<(u64, Option<Instant>)>,
}

impl Manifest {
    /// Checks the database against the manifest in its directory `path`:
    /// refuses a database that lost what the manifest says it held.
    pub(crate) fn check(
        path: &Path,
        meta: &sled::Tree,
        runs: &sled::Tree,
        run_order: &sled::Tree,
    ) -> Result<Self, StoreError> {
        let file = path.join(FILE);
        let marker = read_marker(meta, path)?;
        let recorded = match std::fs::read(&file) {
            Ok(bytes) => Some(serde_json::from_slice::<Recorded>(&bytes).map_err(|e| {
                StoreError::corrupt(format!(
                    "the store manifest `{}` cannot be read ({e}): restore it from a backup, or \
                     remove it to accept the store as it is",
                    file.display()
                ))
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(StoreError::failed(format!(
                    "cannot read the store manifest `{}`: {e}",
                    file.display()
                )));
            }
        };
        if let Some(recorded) = recorded {
            let created = runs_created(run_order, path)?;
            if marker < recorded.marker || created < recorded.runs {
                return Err(lost(path, &file, recorded, marker, runs.len()));
            }
        }
        Ok(Self {
            database_file: path.join("db"),
            file,
            unrecorded: AtomicBool::new(recorded.is_none()),
            state: Mutex::new((marker, None)),
        })
    }

    /// Something was written: the next manifest is due.
    pub(crate) fn wrote(&self) {
        self.unrecorded.store(true, Ordering::Relaxed);
    }

    /// Whether a manifest should be recorded after the group commit's
    /// flush: something was written and the last one is old enough. Never
    /// blocks (it is asked on a runtime thread).
    pub(crate) fn due(&self) -> bool {
        if !self.unrecorded.load(Ordering::Relaxed) {
            return false;
        }
        let last = match self.state.try_lock() {
            Ok(state) => state.1,
            Err(std::sync::TryLockError::Poisoned(state)) => state.into_inner().1,
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        last.is_none_or(|last| last.elapsed() >= RECORD_EVERY)
    }

    /// Records a manifest now if anything was written since the last one
    /// (see the [module documentation](self) for the order). Blocking.
    pub(crate) fn record(&self, db: &sled::Db) -> Result<(), StoreError> {
        let mut state = lock(&self.state);
        if !self.unrecorded.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        let failed = |doing: &str, e: &dyn std::fmt::Display| {
            // Tried again after the next write.
            self.unrecorded.store(true, Ordering::Relaxed);
            StoreError::failed(format!(
                "recording the store manifest `{}` failed while {doing}: {e}",
                self.file.display()
            ))
        };
        let tree = |name: &str| db.open_tree(name).map_err(|e| failed("opening a tree", &e));
        let runs = runs_created(&tree(codec::RUN_ORDER)?, &self.file)?;
        let marker = state.0.saturating_add(1);
        tree(codec::META)?
            .insert(MARKER_KEY, &marker.to_be_bytes())
            .map_err(|e| failed("writing the commit marker", &e))?;
        state.0 = marker;
        db.flush()
            .map_err(|e| failed("flushing the database", &e))?;
        // sled's flush is `sync_file_range`: the manifest asserts only
        // what a full sync has made survive a power cut.
        std::fs::File::open(&self.database_file)
            .and_then(|file| file.sync_all())
            .map_err(|e| failed("syncing the database file", &e))?;
        let recorded = Recorded {
            marker,
            runs,
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        };
        write_synced(&self.file, &recorded).map_err(|e| failed("writing it", &e))?;
        state.1 = Some(Instant::now());
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read_marker(meta: &sled::Tree, path: &Path) -> Result<u64, StoreError> {
    let what = format!("the commit marker of the store at `{}`", path.display());
    match meta.get(MARKER_KEY) {
        Ok(Some(bytes)) => codec::decode_u64(&bytes, &what),
        Ok(None) => Ok(0),
        Err(e) => Err(StoreError::failed(format!("cannot read {what}: {e}"))),
    }
}

fn runs_created(run_order: &sled::Tree, path: &Path) -> Result<u64, StoreError> {
    match run_order.last() {
        Ok(Some((key, _))) => {
            Ok(codec::decode_u64(&key, &"a key of the run creation order")?.saturating_add(1))
        }
        Ok(None) => Ok(0),
        Err(e) => Err(StoreError::failed(format!(
            "cannot read the run creation order of the store at `{}`: {e}",
            path.display()
        ))),
    }
}

/// Writes `recorded` to a temporary file, syncs it, renames it over `file`
/// and syncs the directory: the manifest is the old one or the new one.
fn write_synced(file: &Path, recorded: &Recorded) -> std::io::Result<()> {
    use std::io::Write;
    let text = serde_json::to_vec(recorded).map_err(std::io::Error::other)?;
    let temporary = file.with_extension("manifest.new");
    let mut out = std::fs::File::create(&temporary)?;
    out.write_all(&text)?;
    out.sync_all()?;
    std::fs::rename(&temporary, file)?;
    if let Some(folder) = file.parent() {
        std::fs::File::open(folder)?.sync_all()?;
    }
    Ok(())
}

/// The error for a database that lost what its manifest recorded.
fn lost(path: &Path, file: &Path, recorded: Recorded, marker: u64, runs: usize) -> StoreError {
    let when = if recorded.at_ms == 0 {
        "recorded at an unknown time".to_owned()
    } else {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(recorded.at_ms);
        format!("recorded {}", humantime::format_rfc3339_seconds(at))
    };
    StoreError::corrupt(format!(
        "the store at `{}` is damaged and has lost data it had durably stored: its manifest \
         (`{}`, {when}) says it held {} and commit {}, but it now holds {} and \
         reaches only commit {marker}. sled recovered an older state of a damaged database \
         file: runs created or changed since are missing or back to an older status. Restore \
         the data directory from a backup; or, to go on with what is left, remove `{}` (the \
         next command records a new one). This command wrote nothing.",
        path.display(),
        file.display(),
        leasehold_actors::counted(recorded.runs, "run"),
        leasehold_actors::counted(runs, "run"),
        recorded.marker,
        file.display()
    ))
}
