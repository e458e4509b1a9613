//! [`KeyStore`]: the API keys of a deployment, each of one tenant and one
//! scope, kept as a digest of their secret — never the secret itself —
//! and shared by every executor of the store, so that a key revoked on one
//! is refused on all at once.
//!
//! What a key is, how its secret is made, read and checked, and which
//! names a tenant may have are in [`tenancy`](crate::tenancy).

use super::StoreFuture;
use crate::tenancy::ApiKey;

/// API keys, by id.
pub trait KeyStore: Send + Sync + 'static {
    /// Keeps a new key. A key whose id is already kept is refused
    /// ([`StoreErrorKind::Invalid`](super::StoreErrorKind::Invalid)), and
    /// the one kept is left as it is.
    fn create_api_key(&self, key: ApiKey) -> StoreFuture<()>;

    /// The key of this id, revoked or not, if one was ever kept.
    fn load_api_key(&self, id: &str) -> StoreFuture<Option<ApiKey>>;

    /// Every key kept, revoked ones included, by id; only those of
    /// `tenant` when one is given.
    fn list_api_keys(&self, tenant: Option<String>) -> StoreFuture<Vec<ApiKey>>;

    /// Revokes the key of this id at `at_ms`: the key as it is now, or
    /// `None` when there is no such key. A key revoked already keeps its
    /// first revocation's time.
    fn revoke_api_key(&self, id: &str, at_ms: u64) -> StoreFuture<Option<ApiKey>>;
}
