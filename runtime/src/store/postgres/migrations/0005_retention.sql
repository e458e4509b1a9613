-- Retention (`Store::purge_finished`): finished runs are deleted once their
-- retention has passed, their snapshots, tool calls, events and commands
-- with them (`ON DELETE CASCADE`). A run's own retention, from its flow's
-- `retention`, is kept beside it in ms (NULL: the server's); runs recorded
-- before this migration keep the server's.
ALTER TABLE runs ADD COLUMN retention_ms bigint CHECK (retention_ms >= 0);
-- The finished runs by when they ended, and those with a retention of
-- their own by when it runs out: a purge reads only the runs it deletes.
CREATE INDEX runs_finished ON runs (updated_at_ms)
    WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX runs_finished_by_flow ON runs ((updated_at_ms + retention_ms))
    WHERE status IN ('completed', 'failed', 'cancelled') AND retention_ms IS NOT NULL;
