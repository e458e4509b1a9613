//! The sled store's change feed and flush ([`ChangeSource`]): changes
//! published in this process once a write landed; a flush waits for the
//! group commit.

use std::sync::Arc;

use leasehold_actors::{ChangeFeed, ChangeSource, StoreFuture};

use super::SledStore;

impl ChangeSource for SledStore {
    fn changes(&self) -> ChangeFeed {
        self.inner.changes.subscribe()
    }

    fn flush(&self) -> StoreFuture<()> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.commit.durable().await })
    }
}
