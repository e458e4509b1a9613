-- The outbox (`Store::take_notices`): a run's pauses and ends, each kept as
-- a notice by the transaction that changed the run's record, until every
-- receiver has it. `due_at_ms` is when it may next be taken: a take moves
-- it forward (a hold), a settlement names the hold it had. Deleted with the
-- run.
CREATE TABLE outbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id text NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    due_at_ms bigint NOT NULL,
    notice jsonb NOT NULL
);

CREATE INDEX outbox_by_due ON outbox (due_at_ms, id);
CREATE INDEX outbox_by_run ON outbox (run_id);
