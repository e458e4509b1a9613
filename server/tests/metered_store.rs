//! The metered store is a layer over any store: over sled it keeps every
//! rule of the store port, what sled says of itself (one process at a
//! time opens it) and its sweep of a dead process's runs included.

use std::sync::Arc;

use leasehold::store::{Durability, SledConfig, SledStore};
use leasehold::testing::conformance::{self, StoreFixture};
use leasehold::{Store, StoreError};
use leasehold_server::metrics::{MeteredStore, Metrics};

/// Sled stores in temporary directories, each opened under a meter.
struct MeteredSled;

impl StoreFixture for MeteredSled {
    type Place = tempfile::TempDir;

    async fn fresh(&self) -> Result<tempfile::TempDir, StoreError> {
        tempfile::tempdir().map_err(|e| StoreError::failed(e.to_string()).with_source(e))
    }

    async fn open(&self, dir: &tempfile::TempDir) -> Result<Arc<dyn Store>, StoreError> {
        let config = SledConfig::new(dir.path()).with_durability(Durability::Sync);
        let sled: Arc<dyn Store> = Arc::new(SledStore::open(config)?);
        Ok(MeteredStore::wrap(sled, &Metrics::new()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metered_store_over_sled_keeps_every_rule_of_the_port() {
    let report = conformance::check(MeteredSled).await;
    report.assert_passed();
    assert_eq!(report.passed().count(), conformance::rules().len());
}
