//! The sled store's event logs ([`EventLog`]): each append one entry under
//! its run's key and the greatest `seq` of its events, holding the events
//! of the append, written with the run's fence.
//!
//! An append is one sled insert, however many events it holds: the log's
//! writer appends a run's events a batch at a time. Events may reach the
//! writer a little out of `seq` order (two tasks publish at once), within
//! an append or across two: keyed by its greatest `seq`, every entry that
//! may hold an event after a given `seq` sorts at or after that `seq`'s
//! key, and a read sorts what it gathers by `seq`. A log written before
//! appends were kept whole holds one event per entry, keyed by its `seq`:
//! both read alike.

use std::sync::Arc;

use leasehold_actors::{Event, EventLog, Fenced, StoreChange, StoreError, StoreFuture};
use sled::IVec;

use super::codec::{self, decode, encode};
use super::{Inner, SledStore, failed};

impl EventLog for SledStore {
    fn append_events(
        &self,
        run_id: &str,
        events: Vec<Arc<Event>>,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        let doing = format_args!("appending {} events to run `{run_id}`", events.len());
        let inner = &self.inner;
        let appended = match events.iter().map(|event| event.seq).max() {
            None => inner.fenced_put(run_id, fence, &[], &doing),
            Some(last) => codec::event_key(run_id, last)
                .and_then(|key| {
                    let events = with_kept(inner, &key, events, run_id)?;
                    let events: Vec<&Event> = events.iter().map(|event| &**event).collect();
                    Ok((&inner.events, key, encode(&events, &doing)?.into()))
                })
                .and_then(|entry| inner.fenced_put(run_id, fence, &[entry], &doing)),
        };
        self.settle_publishing(appended, |_| {
            Some(StoreChange::Events {
                run_id: run_id.to_owned(),
            })
        })
    }

    fn load_events(&self, run_id: &str, after_seq: u64) -> StoreFuture<Vec<Event>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let Some(first) = after_seq.checked_add(1) else {
                return Ok(Vec::new());
            };
            let doing = format!("reading the events of run `{run_id}`");
            // Every entry holding an event after `after_seq` is keyed at
            // or after `first`: its greatest `seq` is at least that event's.
            let from = codec::event_key(&run_id, first)?;
            let to = codec::event_key(&run_id, u64::MAX)?;
            let mut events = Vec::new();
            for entry in inner.events.range(from..=to) {
                let (_, value) = entry.map_err(|e| failed(&doing, &e))?;
                events.extend(
                    appended(&value, &run_id)?
                        .into_iter()
                        .filter(|event| event.seq > after_seq),
                );
            }
            events.sort_by_key(|event| event.seq);
            // An append tried again with more events than the one whose
            // success an error hid is keyed apart from it: each `seq` once.
            events.dedup_by_key(|event| event.seq);
            Ok(events)
        })
    }

    fn last_event(&self, run_id: &str) -> StoreFuture<Option<Event>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let from = codec::event_key(&run_id, 0)?;
            let to = codec::event_key(&run_id, u64::MAX)?;
            let Some(last) = inner.events.range(from..=to).next_back() else {
                return Ok(None);
            };
            let (_, value) =
                last.map_err(|e| failed(&format_args!("reading run `{run_id}`'s log"), &e))?;
            // The entry keyed last holds the greatest `seq`.
            Ok(appended(&value, &run_id)?
                .into_iter()
                .max_by_key(|event| event.seq))
        })
    }
}

/// `events` with those of the entry already at `key`, if an append tried
/// again after an error that hid its success left one there: each `seq`
/// once.
fn with_kept(
    inner: &Inner,
    key: &[u8],
    mut events: Vec<Arc<Event>>,
    run_id: &str,
) -> Result<Vec<Arc<Event>>, StoreError> {
    let kept = inner
        .events
        .get(key)
        .map_err(|e| failed(&format_args!("reading run `{run_id}`'s log"), &e))?;
    if let Some(kept) = kept {
        let mut kept = appended(&kept, run_id)?;
        kept.retain(|old| events.iter().all(|new| new.seq != old.seq));
        events.extend(kept.into_iter().map(Arc::new));
    }
    Ok(events)
}

/// The events of one entry of `run_id`'s log: an append's (a JSON array),
/// or one event as logs written before kept them (a JSON object).
fn appended(value: &IVec, run_id: &str) -> Result<Vec<Event>, StoreError> {
    let what = format_args!("an event of run `{run_id}`");
    match value.get(1) {
        Some(b'[') => decode(value, &what),
        _ => Ok(vec![decode(value, &what)?]),
    }
}

#[cfg(test)]
mod tests {
    use leasehold_actors::testing::records::{event, run_record, shared_events};
    use leasehold_actors::{EventLog, RunStatus, RunStore};

    use super::*;
    use crate::store::{SledConfig, SledStore};

    /// Appends are one entry each; a log read from any `seq`, in the
    /// middle of an append included, gives the events after it in `seq`
    /// order, however out of order they were appended, and a log of one
    /// event per entry (as kept before) reads alike.
    #[tokio::test]
    async fn a_log_of_appends_reads_from_any_seq_and_an_old_log_of_single_events_too() {
        let dir = tempfile::tempdir().expect("a directory");
        let store = SledStore::open(SledConfig::new(dir.path().join("db"))).expect("opens");
        let record = run_record("r", Some("e"), 1, u64::MAX, RunStatus::Running);
        store.create_run(record).await.expect("created");
        // Out of order within an append and across two, as a loaded
        // executor's writer may receive them.
        for batch in [
            shared_events("r", [1, 3, 2]),
            shared_events("r", [5]),
            shared_events("r", [4, 6]),
        ] {
            let appended = store.append_events("r", batch, 1).await.expect("appended");
            assert!(appended.is_applied());
        }
        assert_eq!(store.inner.events.len(), 3, "one entry per append");
        // Tried again, an append whose greatest `seq` names an entry keeps
        // what the entry held.
        let again = store
            .append_events("r", shared_events("r", [6]), 1)
            .await
            .unwrap();
        assert!(again.is_applied());
        let seqs = |events: Vec<Event>| events.iter().map(|e| e.seq).collect::<Vec<_>>();
        assert_eq!(
            seqs(store.load_events("r", 0).await.unwrap()),
            [1, 2, 3, 4, 5, 6]
        );
        assert_eq!(seqs(store.load_events("r", 2).await.unwrap()), [3, 4, 5, 6]);
        assert_eq!(seqs(store.load_events("r", 4).await.unwrap()), [5, 6]);
        assert!(store.load_events("r", 6).await.unwrap().is_empty());
        assert_eq!(store.last_event("r").await.unwrap().map(|e| e.seq), Some(6));

        // Entries of one event each, as an older build wrote them.
        for seq in 7..=8 {
            let key = codec::event_key("r", seq).unwrap();
            let value = encode(&event("r", seq), &"an event").unwrap();
            store.inner.events.insert(key, value).unwrap();
        }
        assert_eq!(seqs(store.load_events("r", 5).await.unwrap()), [6, 7, 8]);
        assert_eq!(store.last_event("r").await.unwrap().map(|e| e.seq), Some(8));
    }

    /// An append tried again after an error that hid its success, with
    /// the events published since, lands beside the first under its own
    /// key, and each `seq` is read once.
    #[tokio::test]
    async fn a_retry_with_more_events_beside_a_hidden_success_reads_each_seq_once() {
        let dir = tempfile::tempdir().expect("a directory");
        let store = SledStore::open(SledConfig::new(dir.path().join("db"))).expect("opens");
        let record = run_record("r", Some("e"), 1, u64::MAX, RunStatus::Running);
        store.create_run(record).await.expect("created");
        let first = store
            .append_events("r", shared_events("r", [1, 2]), 1)
            .await
            .unwrap();
        assert!(first.is_applied());
        // The first append's success was hidden: tried again with the
        // event published since, under the key of its greatest `seq`.
        let again = store
            .append_events("r", shared_events("r", [1, 2, 3]), 1)
            .await
            .unwrap();
        assert!(again.is_applied());
        assert_eq!(store.inner.events.len(), 2, "two entries");
        let seqs: Vec<u64> = store
            .load_events("r", 0)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3]);
    }
}
