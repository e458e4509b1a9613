//! The event port: where actors publish what happened.

use crate::vocabulary::event::EventKind;

/// Where actors publish events. Emitting never blocks and never fails: a
/// supervised operation must not slow down because somebody reads slowly.
pub trait EventSink: Send + Sync + 'static {
    /// Publishes one event of `run_id`, at `path` in its tree.
    fn emit(&self, run_id: &str, path: &str, kind: EventKind);

    /// Where the text the runs' model calls stream goes, for readers of it
    /// ([`crate::vocabulary::text::Texts`]); none (the default): nowhere.
    fn texts(&self) -> Option<&crate::vocabulary::text::Texts> {
        None
    }
}
