//! The on-disk format of the sled store: tree names, key layout and the
//! value envelope.
//!
//! Every value is a one-byte format version followed by JSON
//! (`serde_json`). A reader refuses a version it does not know with a clear
//! [`StoreError`] instead of guessing, so a later format can migrate old
//! values. The key layout and the tree names are covered by the store format
//! ([`STORE_FORMAT`]) recorded in the `meta` tree: a build refuses a
//! database whose store format it does not read.
//!
//! Keys under a run start with the run's id, length-prefixed (`u32`
//! big-endian length, then the bytes), so that a prefix scan returns exactly
//! that run's entries and never those of a run whose id merely starts the
//! same way.

use std::fmt::Display;

use leasehold_actors::StoreError;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The store format this build reads and writes: tree names, key layout,
/// value envelope. Kept in `meta` under [`META_FORMAT_KEY`].
pub(crate) const STORE_FORMAT: u32 = 1;

/// The version byte in front of every value this build writes.
pub(crate) const VALUE_FORMAT: u8 = 1;

/// Run records, by run id.
pub(crate) const RUNS: &str = "runs";
/// Creation order: `u64` big-endian sequence → run id.
pub(crate) const RUN_ORDER: &str = "run_order";
/// Latest snapshot of each loop: run prefix + loop path.
pub(crate) const SNAPSHOTS: &str = "snapshots";
/// Every snapshot ever saved, the run's history: run prefix + its place
/// ([`Snapshot::seq`](leasehold_actors::Snapshot::seq), `u64` big-endian) +
/// loop path ([`history_key`]). A database written before this tree has it
/// empty: its runs have no history and cannot be forked, and nothing else
/// reads it, so the store format stays the same.
pub(crate) const SNAPSHOT_HISTORY: &str = "snapshot_history";
/// The forks whose history continues from a run's: the parent's run
/// prefix + the fork's id, no value. Written before the fork's first
/// entry that names the parent; a parent listed here is not purged
/// (`retention.rs`). Empty in a database written before it: forks then
/// copied their parent's states whole.
pub(crate) const SNAPSHOT_BASES: &str = "snapshot_bases";
/// Tool-call records: run prefix + idempotency key.
pub(crate) const TOOL_CALLS: &str = "tool_calls";
/// The event log: run prefix + the `seq` of an append's first event (`u64`
/// big-endian) → the append's events, a JSON array. A log written before
/// appends were kept whole has one event per entry, a JSON object.
pub(crate) const EVENTS: &str = "events";
/// Index of runs by status: the status's name, length-prefixed, then the
/// run id → the run's creation time (`u64` big-endian Unix ms).
pub(crate) const RUNS_BY_STATUS: &str = "runs_by_status";
/// Index of runs by flow name: the name, length-prefixed, then the run id →
/// the run's creation time (`u64` big-endian Unix ms).
pub(crate) const RUNS_BY_FLOW: &str = "runs_by_flow";
/// The store format.
pub(crate) const META: &str = "meta";

/// Key in `meta` of the store format (`u32` big-endian).
pub(crate) const META_FORMAT_KEY: &[u8] = b"format_version";

/// Key in `meta` present once the run indexes ([`RUNS_BY_STATUS`],
/// [`RUNS_BY_FLOW`]) hold every run: a database written before them gets
/// them built when it is opened.
pub(crate) const META_INDEXED_KEY: &[u8] = b"runs_indexed";

/// `value` as a versioned value.
pub(crate) fn encode<T: Serialize>(value: &T, what: &dyn Display) -> Result<Vec<u8>, StoreError> {
    // Room for a typical snapshot, so that serializing rarely reallocates.
    let mut bytes = Vec::with_capacity(1024);
    bytes.push(VALUE_FORMAT);
    serde_json::to_writer(&mut bytes, value)
        .map_err(|e| StoreError::invalid(format!("cannot encode {what}: {e}")))?;
    Ok(bytes)
}

/// The value of a versioned value, refusing a format version this build
/// does not read.
pub(crate) fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    what: &dyn Display,
) -> Result<T, StoreError> {
    #[cfg(test)]
    decodes::count();
    let Some((&version, json)) = bytes.split_first() else {
        return Err(StoreError::corrupt(format!(
            "{what} is stored as an empty value"
        )));
    };
    if version != VALUE_FORMAT {
        return Err(StoreError::corrupt(format!(
            "{what} is stored in value format version {version}, but this build reads only \
             version {VALUE_FORMAT}; it was written by another leasehold version: refusing to guess"
        )));
    }
    serde_json::from_slice(json).map_err(|e| StoreError::corrupt(format!("{what} is corrupt: {e}")))
}

/// The key prefix of everything kept under `run_id`.
pub(crate) fn run_prefix(run_id: &str) -> Result<Vec<u8>, StoreError> {
    run_key(run_id, &[])
}

/// `run_id`'s prefix followed by `suffix`.
pub(crate) fn run_key(run_id: &str, suffix: &[u8]) -> Result<Vec<u8>, StoreError> {
    let len = u32::try_from(run_id.len()).map_err(|_| {
        StoreError::invalid(format!("run id of {} bytes is too long", run_id.len()))
    })?;
    let mut key = Vec::with_capacity(4 + run_id.len() + suffix.len());
    key.extend_from_slice(&len.to_be_bytes());
    key.extend_from_slice(run_id.as_bytes());
    key.extend_from_slice(suffix);
    Ok(key)
}

/// The key of event `seq` of `run_id`: big-endian, so that keys sort by seq.
pub(crate) fn event_key(run_id: &str, seq: u64) -> Result<Vec<u8>, StoreError> {
    run_key(run_id, &seq.to_be_bytes())
}

/// The key of a snapshot in `run_id`'s history: its place `seq`
/// big-endian, then its loop `path`, so that a prefix scan reads the
/// history in the order of the places, and snapshots of one place in the
/// order of their paths.
pub(crate) fn history_key(run_id: &str, seq: u64, path: &str) -> Result<Vec<u8>, StoreError> {
    let mut key = run_key(run_id, &seq.to_be_bytes())?;
    key.extend_from_slice(path.as_bytes());
    Ok(key)
}

/// The key of `run_id` in a run index, under `name` (a status's or a
/// flow's): the name length-prefixed, so that one name's entries are
/// exactly those with its prefix.
pub(crate) fn index_key(name: &str, run_id: &str) -> Result<Vec<u8>, StoreError> {
    let mut key = run_prefix(name)?;
    key.extend_from_slice(run_id.as_bytes());
    Ok(key)
}

/// Values decoded on this thread, for tests that bound how many a read
/// decodes.
#[cfg(test)]
pub(crate) mod decodes {
    use std::cell::Cell;

    thread_local! {
        static DECODED: Cell<u64> = const { Cell::new(0) };
    }

    pub(crate) fn count() {
        DECODED.with(|n| n.set(n.get() + 1));
    }

    /// How many values this thread has decoded so far.
    pub(crate) fn so_far() -> u64 {
        DECODED.with(Cell::get)
    }
}

/// A `u64` read back from its big-endian bytes.
pub(crate) fn decode_u64(bytes: &[u8], what: &dyn Display) -> Result<u64, StoreError> {
    <[u8; 8]>::try_from(bytes)
        .map(u64::from_be_bytes)
        .map_err(|_| {
            StoreError::corrupt(format!(
                "{what} is corrupt: {} bytes, expected 8",
                bytes.len()
            ))
        })
}

/// A `u32` read back from its big-endian bytes.
pub(crate) fn decode_u32(bytes: &[u8], what: &dyn Display) -> Result<u32, StoreError> {
    <[u8; 4]>::try_from(bytes)
        .map(u32::from_be_bytes)
        .map_err(|_| {
            StoreError::corrupt(format!(
                "{what} is corrupt: {} bytes, expected 4",
                bytes.len()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_prefix_does_not_match_a_longer_run_id() {
        let short = run_prefix("run-1").unwrap();
        let long = run_key("run-10", b"x").unwrap();
        assert!(!long.starts_with(&short));
    }

    #[test]
    fn event_keys_sort_by_seq() {
        let a = event_key("r", 9).unwrap();
        let b = event_key("r", 10).unwrap();
        let c = event_key("r", 256).unwrap();
        assert!(a < b && b < c);
    }

    #[test]
    fn history_keys_sort_by_seq_then_path_within_their_run() {
        let keys = [
            history_key("r", 9, "run/worker:b:1").unwrap(),
            history_key("r", 10, "run").unwrap(),
            history_key("r", 10, "run/worker:a:1").unwrap(),
            history_key("r", 256, "run").unwrap(),
        ];
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]));
        let prefix = run_prefix("r").unwrap();
        assert!(keys.iter().all(|key| key.starts_with(&prefix)));
        assert!(!history_key("r1", 0, "run").unwrap().starts_with(&prefix));
    }

    #[test]
    fn values_round_trip_and_unknown_versions_are_refused() {
        let bytes = encode(&vec![1, 2, 3], &"a list").unwrap();
        assert_eq!(bytes[0], VALUE_FORMAT);
        assert_eq!(
            decode::<Vec<u32>>(&bytes, &"a list").unwrap(),
            vec![1, 2, 3]
        );
        let mut newer = bytes;
        newer[0] = 7;
        let err = decode::<Vec<u32>>(&newer, &"a list").unwrap_err();
        assert!(err.message().contains("value format version 7"), "{err}");
    }
}
