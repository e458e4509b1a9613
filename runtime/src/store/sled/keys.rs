//! The sled store's idempotency keys: each key a client gave a creation,
//! with the run it started ([`KeptKey`]), in a tree of its own. One
//! process opens a sled database, so keyed creations are serialized by a
//! lock of this store: the key is looked at, then kept, then its run
//! created, none between. Kept first: a crash between the two leaves a key
//! naming no run, which the next creation under it takes over.

use leasehold_actors::{IdempotencyKey, KeptKey, KeyedCreation, RunRecord, StoreError};

use super::codec::{decode, encode};
use super::{Inner, failed};

/// The tree of keys: key → [`KeptKey`].
pub(super) const KEYS: &str = "idempotency_keys";

/// The tree of keyed runs: run id → its key, so that a purge of the run
/// takes its key with it.
pub(super) const KEYS_BY_RUN: &str = "idempotency_keys_by_run";

impl Inner {
    pub(super) fn create_run_keyed(
        &self,
        record: &RunRecord,
        key: &IdempotencyKey,
    ) -> Result<(KeyedCreation, bool), StoreError> {
        let doing = format_args!("creating run `{}` under an idempotency key", record.run_id);
        let _one = self
            .keying
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(bytes) = self
            .keys
            .get(key.key.as_bytes())
            .map_err(|e| failed(&doing, &e))?
        {
            let kept: KeptKey = decode(&bytes, &"an idempotency key")?;
            if kept.holds_for(key)
                && self
                    .runs
                    .contains_key(kept.run_id.as_bytes())
                    .map_err(|e| failed(&doing, &e))?
            {
                return Ok((kept.existing(), false));
            }
        }
        let kept = encode(&KeptKey::of(&record.run_id, key), &"an idempotency key")?;
        self.keys
            .insert(key.key.as_bytes(), kept)
            .map_err(|e| failed(&doing, &e))?;
        self.keys_by_run
            .insert(record.run_id.as_bytes(), key.key.as_bytes())
            .map_err(|e| failed(&doing, &e))?;
        self.create_run(record)?;
        Ok((KeyedCreation::Created, true))
    }

    /// Forgets the key `run_id` was created under, if it still names it:
    /// the run is being deleted.
    pub(super) fn forget_key_of(&self, run_id: &str) -> Result<(), StoreError> {
        let doing = format_args!("forgetting the idempotency key of run `{run_id}`");
        let Some(key) = self
            .keys_by_run
            .get(run_id.as_bytes())
            .map_err(|e| failed(&doing, &e))?
        else {
            return Ok(());
        };
        let _one = self
            .keying
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(bytes) = self.keys.get(&key).map_err(|e| failed(&doing, &e))? {
            let kept: KeptKey = decode(&bytes, &"an idempotency key")?;
            if kept.run_id == run_id {
                self.keys.remove(&key).map_err(|e| failed(&doing, &e))?;
            }
        }
        self.keys_by_run
            .remove(run_id.as_bytes())
            .map_err(|e| failed(&doing, &e))?;
        Ok(())
    }
}
