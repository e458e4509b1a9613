//! The sled store's event logs ([`EventLog`]): each event under its run's
//! key and its `seq`, appended with the run's fence.

use leasehold_actors::{Event, EventLog, Fenced, StoreChange, StoreError, StoreFuture};

use super::codec::{self, encode};
use super::{Inner, SledStore};

impl EventLog for SledStore {
    fn append_events(
        &self,
        run_id: &str,
        events: Vec<Event>,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
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

    fn load_events(&self, run_id: &str, after_seq: u64) -> StoreFuture<Vec<Event>> {
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

    fn last_event(&self, run_id: &str) -> StoreFuture<Option<Event>> {
        let run_id = run_id.to_owned();
        self.scan(move |inner| {
            let from = codec::event_key(&run_id, 0)?;
            let to = codec::event_key(&run_id, u64::MAX)?;
            let last = inner.events.range(from..=to).next_back();
            Ok(Inner::load_all(last.into_iter(), "event", &run_id)?.pop())
        })
    }
}
