//! The sled store's API keys ([`KeyStore`]): a tree of their own, a key's
//! id to the key as JSON (its digest, never its secret).

use leasehold_actors::tenancy::ApiKey;
use leasehold_actors::{KeyStore, StoreError, StoreFuture};

use super::SledStore;

/// The tree of API keys: a key's id to the key as JSON.
pub(super) const API_KEYS: &str = "api_keys";

fn read(id: &[u8], value: &[u8]) -> Result<ApiKey, StoreError> {
    serde_json::from_slice(value).map_err(|e| {
        StoreError::corrupt(format!(
            "the API key `{}` in the store is corrupt: {e}",
            String::from_utf8_lossy(id)
        ))
    })
}

fn encoded(key: &ApiKey) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(key)
        .map_err(|e| StoreError::invalid(format!("cannot encode the API key `{}`: {e}", key.id)))
}

impl KeyStore for SledStore {
    fn create_api_key(&self, key: ApiKey) -> StoreFuture<()> {
        self.scan_and_settle(move |inner| {
            let value = encoded(&key)?;
            let swapped = inner
                .api_keys
                .compare_and_swap(key.id.as_bytes(), None::<&[u8]>, Some(value))
                .map_err(|e| {
                    StoreError::failed(format!("cannot keep the API key `{}`: {e}", key.id))
                })?;
            match swapped {
                Ok(()) => Ok(((), true)),
                Err(_) => Err(StoreError::invalid(format!(
                    "an API key of id `{}` is kept already",
                    key.id
                ))),
            }
        })
    }

    fn load_api_key(&self, id: &str) -> StoreFuture<Option<ApiKey>> {
        let id = id.to_owned();
        self.scan(move |inner| {
            let value = inner
                .api_keys
                .get(id.as_bytes())
                .map_err(|e| StoreError::failed(format!("cannot read the API key `{id}`: {e}")))?;
            value.map(|value| read(id.as_bytes(), &value)).transpose()
        })
    }

    fn list_api_keys(&self, tenant: Option<String>) -> StoreFuture<Vec<ApiKey>> {
        self.scan(move |inner| {
            let mut keys = Vec::new();
            for entry in &inner.api_keys {
                let (id, value) = entry
                    .map_err(|e| StoreError::failed(format!("cannot read the API keys: {e}")))?;
                let key = read(&id, &value)?;
                if tenant.as_ref().is_none_or(|t| key.tenant == *t) {
                    keys.push(key);
                }
            }
            Ok(keys)
        })
    }

    fn revoke_api_key(&self, id: &str, at_ms: u64) -> StoreFuture<Option<ApiKey>> {
        let id = id.to_owned();
        self.scan_and_settle(move |inner| {
            let failed = |e: sled::Error| {
                StoreError::failed(format!("cannot revoke the API key `{id}`: {e}"))
            };
            loop {
                let Some(current) = inner.api_keys.get(id.as_bytes()).map_err(failed)? else {
                    return Ok((None, false));
                };
                let mut key = read(id.as_bytes(), &current)?;
                if key.revoked_at_ms.is_some() {
                    return Ok((Some(key), false));
                }
                key.revoked_at_ms = Some(at_ms);
                let swapped = inner
                    .api_keys
                    .compare_and_swap(id.as_bytes(), Some(current), Some(encoded(&key)?))
                    .map_err(failed)?;
                if swapped.is_ok() {
                    return Ok((Some(key), true));
                }
            }
        })
    }
}
