-- The idempotency keys clients gave to runs' creations: a post retried
-- with the same key within its retention gets the run the first one
-- started. A key is taken, with its run's creation, in one transaction:
-- two executors creating under one key at once create one run (the second
-- waits on the key's row, then finds it held). A key goes with its run
-- when the run is purged; it is checked to name a run when its
-- transaction commits, since the key is taken before its run is created.
CREATE TABLE idempotency_keys (
    key text PRIMARY KEY,
    run_id text NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE
        DEFERRABLE INITIALLY DEFERRED,
    fingerprint text NOT NULL,
    at_ms bigint NOT NULL,
    retention_ms bigint NOT NULL
);
CREATE INDEX idempotency_keys_by_run ON idempotency_keys (run_id);
