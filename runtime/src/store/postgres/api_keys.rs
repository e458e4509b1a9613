//! The PostgreSQL store's API keys (`0013_tenants.sql`): one row per key,
//! shared by every executor of the database, so that a key revoked on one
//! is refused by all at the next request.

use leasehold_actors::tenancy::ApiKey;
use leasehold_actors::{KeyStore, StoreError, StoreFuture};

use super::rows::{from_json, to_i64, to_json};
use super::{Inner, PostgresStore, failed};

impl Inner {
    async fn create_api_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        let doing = format!("keeping the API key `{}`", key.id);
        let body = to_json(key, &format_args!("the API key `{}`", key.id))?;
        let created = self
            .client()
            .await?
            .execute(
                "INSERT INTO api_keys (id, tenant, body) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO NOTHING",
                &[&key.id, &key.tenant, &body],
            )
            .await
            .map_err(|e| failed(&doing, &e))?;
        if created == 0 {
            return Err(StoreError::invalid(format!(
                "an API key of id `{}` is kept already",
                key.id
            )));
        }
        Ok(())
    }

    async fn load_api_key(&self, id: &str) -> Result<Option<ApiKey>, StoreError> {
        let doing = format!("reading the API key `{id}`");
        let row = self
            .client()
            .await?
            .query_opt("SELECT body FROM api_keys WHERE id = $1", &[&id])
            .await
            .map_err(|e| failed(&doing, &e))?;
        row.map(|row| from_json(row.get(0), &format_args!("the API key `{id}`")))
            .transpose()
    }

    async fn list_api_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKey>, StoreError> {
        let doing = "listing the API keys";
        let rows = self
            .client()
            .await?
            .query(
                "SELECT id, body FROM api_keys WHERE ($1::text IS NULL OR tenant = $1) \
                 ORDER BY id",
                &[&tenant],
            )
            .await
            .map_err(|e| failed(&doing, &e))?;
        rows.iter()
            .map(|row| {
                let id: String = row.get(0);
                from_json(row.get(1), &format_args!("the API key `{id}`"))
            })
            .collect()
    }

    async fn revoke_api_key(&self, id: &str, at_ms: u64) -> Result<Option<ApiKey>, StoreError> {
        let doing = format!("revoking the API key `{id}`");
        let at = to_i64(at_ms, &"the revocation time")?;
        // The first revocation's time stays.
        let row = self
            .client()
            .await?
            .query_opt(
                "UPDATE api_keys SET body = CASE WHEN body ? 'revoked_at_ms' THEN body \
                 ELSE jsonb_set(body, '{revoked_at_ms}', to_jsonb($2::bigint)) END \
                 WHERE id = $1 RETURNING body",
                &[&id, &at],
            )
            .await
            .map_err(|e| failed(&doing, &e))?;
        row.map(|row| from_json(row.get(0), &format_args!("the API key `{id}`")))
            .transpose()
    }
}

impl KeyStore for PostgresStore {
    fn create_api_key(&self, key: ApiKey) -> StoreFuture<()> {
        self.with(move |inner| async move { inner.create_api_key(&key).await })
    }

    fn load_api_key(&self, id: &str) -> StoreFuture<Option<ApiKey>> {
        let id = id.to_owned();
        self.with(move |inner| async move { inner.load_api_key(&id).await })
    }

    fn list_api_keys(&self, tenant: Option<String>) -> StoreFuture<Vec<ApiKey>> {
        self.with(move |inner| async move { inner.list_api_keys(tenant.as_deref()).await })
    }

    fn revoke_api_key(&self, id: &str, at_ms: u64) -> StoreFuture<Option<ApiKey>> {
        let id = id.to_owned();
        self.with(move |inner| async move { inner.revoke_api_key(&id, at_ms).await })
    }
}
