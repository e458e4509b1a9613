//! The sled store's learned paces ([`PaceStore`]): a tree of their own,
//! a pace key's bytes to its pace.

use leasehold_actors::{Pace, PaceStore, StoreError, StoreFuture};

use super::SledStore;

/// The tree of learned paces: a pace key's bytes to its pace as JSON.
pub(super) const PACES: &str = "paces";

impl PaceStore for SledStore {
    fn load_paces(&self) -> StoreFuture<Vec<(String, Pace)>> {
        self.scan(|inner| {
            let mut paces = Vec::new();
            for entry in &inner.paces {
                let (key, value) = entry.map_err(|e| {
                    StoreError::failed(format!("cannot read the learned paces: {e}"))
                })?;
                let key = String::from_utf8_lossy(&key).into_owned();
                // A pace is what was learned, not what was done: one that
                // cannot be read is learned again, not a reason to refuse
                // the store.
                match serde_json::from_slice(&value) {
                    Ok(pace) => paces.push((key, pace)),
                    Err(error) => {
                        tracing::warn!(%key, %error, "a learned pace in the store is unreadable: ignored");
                    }
                }
            }
            Ok(paces)
        })
    }

    fn save_paces(&self, paces: Vec<(String, Option<Pace>)>) -> StoreFuture<()> {
        self.scan_and_settle(move |inner| {
            let failed =
                |e: sled::Error| StoreError::failed(format!("cannot save the learned paces: {e}"));
            for (key, pace) in &paces {
                match pace {
                    Some(pace) => {
                        let value = serde_json::to_vec(pace).map_err(|e| {
                            StoreError::invalid(format!("cannot encode the pace of `{key}`: {e}"))
                        })?;
                        inner.paces.insert(key.as_bytes(), value).map_err(failed)?;
                    }
                    None => {
                        inner.paces.remove(key.as_bytes()).map_err(failed)?;
                    }
                }
            }
            Ok(((), !paces.is_empty()))
        })
    }
}
