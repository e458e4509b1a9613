//! [`RunLocks`]: the per-run lock that makes a fenced write atomic.
//!
//! A fenced write reads the run's record, checks the fence and writes; a
//! claim reads the record and swaps it. Each holds the run's lock from the
//! read to the write, so no claim can land between a writer's check and its
//! write. This is enough across executors because sled lets one process,
//! and in it one store, have a database open at a time (an exclusive
//! `flock` on its directory): every writer of a database goes through the
//! one [`RunLocks`] of its store.
//!
//! Runs hash onto a fixed set of shards: two runs may share a lock, which
//! costs a little waiting and never correctness. A lock is held only across
//! in-memory sled operations (no flush), for microseconds.
//!
//! Each shard also remembers the holders (fence and owner) of the runs its
//! fenced writes checked: a run's record changes on a creation, a claim, a
//! renewal or a deletion, not on every event or snapshot, and each of
//! those writes the record under this same lock and forgets what the shard
//! remembered of the run ([`Shard::forget`]). A fenced write of a run the
//! shard remembers reads nothing; one it does not reads the record and
//! decodes only its holder, never the flow. A shard remembers at most
//! [`REMEMBERED`] runs.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

use leasehold_actors::StoreError;
use serde::Deserialize;
use sled::IVec;

use super::codec::decode;

/// How many shards: 64 concurrent runs rarely share one.
const SHARDS: usize = 256;

/// The locks of a store's runs.
pub(crate) struct RunLocks {
    shards: Box<[Mutex<Shard>]>,
}

/// Who holds a run: what a fenced write checks of its record (the rest of
/// the record, its flow above all, is skipped unread).
#[derive(Debug, Deserialize)]
pub(crate) struct Holder {
    /// The executor that owns it, if any.
    pub(crate) owner_id: Option<String>,
    /// Its fencing token.
    pub(crate) fence: u64,
}

/// How many runs' holders a shard remembers at most: past it, it forgets
/// them all and reads each again once.
const REMEMBERED: usize = 64;

/// What a run's lock guards besides the run itself.
#[derive(Default)]
pub(crate) struct Shard {
    /// The holders of the runs whose records were read under this lock
    /// since they were last written.
    holders: HashMap<String, Holder>,
}

impl Shard {
    /// The holder of `run_id`'s record: remembered, or decoded from what
    /// `read` reads of the record (`None`: there is no such run).
    pub(crate) fn holder(
        &mut self,
        run_id: &str,
        read: impl FnOnce() -> Result<Option<IVec>, StoreError>,
        what: &dyn std::fmt::Display,
    ) -> Result<Option<&Holder>, StoreError> {
        if !self.holders.contains_key(run_id) {
            let Some(bytes) = read()? else {
                return Ok(None);
            };
            let holder: Holder = decode(&bytes, what)?;
            if self.holders.len() >= REMEMBERED {
                self.holders.clear();
            }
            self.holders.insert(run_id.to_owned(), holder);
        }
        Ok(self.holders.get(run_id))
    }

    /// Forgets what was read of `run_id`'s record: called by every write
    /// of the record, under its lock.
    pub(crate) fn forget(&mut self, run_id: &str) {
        self.holders.remove(run_id);
    }
}

impl RunLocks {
    pub(crate) fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        }
    }

    /// Holds `run_id`'s lock until the guard drops.
    pub(crate) fn lock(&self, run_id: &str) -> MutexGuard<'_, Shard> {
        let mut hasher = DefaultHasher::new();
        run_id.hash(&mut hasher);
        let shard = usize::from(hasher.finish().to_le_bytes()[0]) % self.shards.len();
        // Nothing is left half-done under this lock when a holder panics: a
        // poisoned lock is as good as a clean one.
        self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
