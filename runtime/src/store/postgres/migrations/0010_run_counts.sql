-- How many runs are in each status, kept by triggers in the same
-- transaction as every statement that creates, changes or deletes a run,
-- so that counting (`/metrics`, `GET /executor`, every post) reads at most
-- a few rows whatever the store holds, and never drifts: a statement that
-- rolls back takes its counts with it.
--
-- The counts are sharded by the writing connection (`pg_backend_pid() %
-- 16`): executors changing runs at once update rows of their own instead
-- of queuing on one hot row per status, and a count is the sum of its
-- shards (at most 16 rows). A shard may go below zero (a run created on one
-- connection, ended on another); the sum does not.
CREATE TABLE run_counts (
    status text NOT NULL,
    shard integer NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (status, shard)
);

-- Adds `delta` to `status`'s count in this connection's shard; a change of
-- status moves two counts in one statement, in the order of their keys, so
-- that two transactions never take the same two rows in opposite orders.
CREATE FUNCTION leasehold_count_runs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    my_shard integer := pg_backend_pid() % 16;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO run_counts AS c (status, shard, n)
        SELECT status, my_shard, count(*) FROM new_runs GROUP BY status ORDER BY status
        ON CONFLICT (status, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO run_counts AS c (status, shard, n)
        SELECT status, my_shard, -count(*) FROM old_runs GROUP BY status ORDER BY status
        ON CONFLICT (status, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    ELSE
        INSERT INTO run_counts AS c (status, shard, n)
        SELECT moved.status, my_shard, moved.delta
        FROM (VALUES (OLD.status, -1), (NEW.status, 1)) AS moved (status, delta)
        ORDER BY moved.status
        ON CONFLICT (status, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_counted_created AFTER INSERT ON runs
    REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_count_runs();
CREATE TRIGGER runs_counted_deleted AFTER DELETE ON runs
    REFERENCING OLD TABLE AS old_runs
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_count_runs();
-- A heartbeat (no change of status) fires nothing.
CREATE TRIGGER runs_counted_changed AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION leasehold_count_runs();

-- The runs there already: counted once, after the triggers, whose lock on
-- `runs` keeps any writer out until this migration commits.
INSERT INTO run_counts (status, shard, n)
SELECT status, 0, count(*) FROM runs GROUP BY status;
