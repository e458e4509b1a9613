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
//! Each shard also remembers the holder (fence and owner) of the last run
//! record it read, with the bytes it was read from: a fenced write reads the
//! record's bytes anyway, and when they are the ones remembered it skips
//! reading them again (a run's record changes on a claim or a renewal, not
//! on every snapshot). Only the holder is decoded, never the flow.

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

/// What a run's lock guards besides the run itself.
#[derive(Default)]
pub(crate) struct Shard {
    /// The holder of the last record read under this lock, and its bytes.
    decoded: Option<(IVec, Holder)>,
}

impl Shard {
    /// The holder of the record stored as `bytes`, decoded once per
    /// distinct value.
    pub(crate) fn holder(
        &mut self,
        bytes: IVec,
        what: &dyn std::fmt::Display,
    ) -> Result<&Holder, StoreError> {
        let fresh = !matches!(&self.decoded, Some((seen, _)) if *seen == bytes);
        if fresh {
            let holder = decode(&bytes, what)?;
            self.decoded = Some((bytes, holder));
        }
        match &self.decoded {
            Some((_, holder)) => Ok(holder),
            None => Err(StoreError::failed(format!("{what} could not be decoded"))),
        }
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
