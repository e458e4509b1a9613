//! The PostgreSQL store's change feed and flush ([`ChangeSource`]): what
//! the one `LISTEN` connection hears ([`listen`](super::listen)),
//! re-broadcast; every write is committed when it returns, so a flush has
//! nothing left to do.

use leasehold_actors::{ChangeFeed, ChangeSource, StoreFuture};

use super::PostgresStore;

impl ChangeSource for PostgresStore {
    fn changes(&self) -> ChangeFeed {
        // Subscribed before the listener starts: its first `Resync` comes
        // after this subscription, so nothing is missed unannounced.
        let feed = self.inner.changes.subscribe();
        if let Err(error) = self.listen() {
            tracing::warn!(%error, "the store's change feed cannot listen");
        }
        feed
    }

    fn flush(&self) -> StoreFuture<()> {
        // Every write above committed before its call returned.
        Box::pin(std::future::ready(Ok(())))
    }
}
