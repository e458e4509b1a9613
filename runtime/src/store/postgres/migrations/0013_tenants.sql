-- Tenants and their API keys. A run's tenant is the one that started it;
-- NULL for the default tenant, so every run made before tenants existed
-- is the default tenant's. A tenant's page of runs walks its own index.
ALTER TABLE runs ADD COLUMN tenant text;
CREATE INDEX runs_by_tenant ON runs ((coalesce(tenant, 'default')), run_id COLLATE "C");
-- The API keys: each of one tenant, kept as the digest of its secret
-- (the whole key as JSON in `body`). A key revoked keeps its row, with
-- the time of its revocation, so that every executor refuses it.
CREATE TABLE api_keys (
    id text PRIMARY KEY,
    tenant text NOT NULL,
    body jsonb NOT NULL
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant, id);
