-- The queue of posted runs (`Store::claim_queued`): executors claim the
-- oldest queued runs (by run id, compared byte by byte) with `FOR UPDATE
-- SKIP LOCKED`. A partial index holds only the queued runs, so it stays
-- as small as the queue however many runs have ended.
CREATE INDEX runs_queued ON runs (run_id COLLATE "C") WHERE status = 'queued';
