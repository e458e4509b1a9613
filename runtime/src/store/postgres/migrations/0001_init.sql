-- The first schema of the PostgreSQL store. Times are Unix milliseconds
-- (bigint); JSON is jsonb, the same JSON the sled store keeps.

-- One row per run: the columns the ownership rules read and write, and the
-- rest of the record.
CREATE TABLE runs (
    run_id text PRIMARY KEY,
    -- Creation order: `list_runs` answers oldest first.
    created_seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    flow jsonb NOT NULL,
    status text NOT NULL,
    owner_id text,
    fence bigint NOT NULL CHECK (fence >= 0),
    lease_expires_at_ms bigint NOT NULL CHECK (lease_expires_at_ms >= 0),
    reason text,
    answer text,
    pause jsonb,
    created_at_ms bigint NOT NULL,
    updated_at_ms bigint NOT NULL
);

-- The reconciliation sweep looks for running runs whose lease expired.
CREATE INDEX runs_running_lease ON runs (lease_expires_at_ms) WHERE status = 'running';

-- The latest snapshot of each loop of a run.
CREATE TABLE snapshots (
    run_id text NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    path text NOT NULL,
    snapshot jsonb NOT NULL,
    PRIMARY KEY (run_id, path)
);

-- Tool-call records, by idempotency key.
CREATE TABLE tool_calls (
    run_id text NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    key text NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (run_id, key)
);

-- The event log: one row per event, at most one per (run, seq).
CREATE TABLE events (
    run_id text NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq bigint NOT NULL CHECK (seq >= 0),
    event jsonb NOT NULL,
    PRIMARY KEY (run_id, seq)
);
