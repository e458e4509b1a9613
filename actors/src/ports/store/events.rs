//! [`EventLog`]: each run's log of events, appended with the run's fence
//! and read back from any `seq`.

use std::sync::Arc;

use super::{Fenced, StoreFuture};
use crate::event::Event;

/// Each run's event log.
pub trait EventLog: Send + Sync + 'static {
    /// Appends events to the run's log, if `fence` is the run's. The events
    /// are shared with the run's readers: a store that keeps them in memory
    /// keeps these, not copies.
    fn append_events(
        &self,
        run_id: &str,
        events: Vec<Arc<Event>>,
        fence: u64,
    ) -> StoreFuture<Fenced<()>>;

    /// The run's events with `seq` above `after_seq`, in order.
    fn load_events(&self, run_id: &str, after_seq: u64) -> StoreFuture<Vec<Event>>;

    /// The run's last event, if it logged any: where its log goes on, and
    /// how it ended if it did (a run's end is its log's last event). A
    /// store reads that one event; the default reads the whole log.
    fn last_event(&self, run_id: &str) -> StoreFuture<Option<Event>> {
        let events = self.load_events(run_id, 0);
        Box::pin(async move { Ok(events.await?.pop()) })
    }
}
