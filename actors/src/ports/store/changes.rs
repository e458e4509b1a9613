//! [`ChangeSource`]: what a store says of the writes that landed — a feed
//! of its changes — and when they are durable.

use super::StoreFuture;
use crate::ports::changes::ChangeFeed;

/// The store's change feed, and its flush.
pub trait ChangeSource: Send + Sync + 'static {
    /// A new subscriber to the store's changes: every write that lands
    /// from now on and changes a run's record, appends events or stores a
    /// command is published once it landed; a refused or failed write
    /// publishes nothing.
    fn changes(&self) -> ChangeFeed;

    /// Returns once everything written so far is durable.
    fn flush(&self) -> StoreFuture<()>;
}
