-- A snapshot history that grows with a loop's steps, not their square
-- (`leasehold_actors::history`): an entry with a base keeps only the
-- messages its transcript gained since; a fork's first entries name its
-- parent's entries at the fork point instead of copying them. `base_run`
-- is the run whose history an entry continues when it is another run's
-- (a fork's parent), NULL otherwise. A run so named is not purged
-- (`retention.rs`) until the entries naming it are deleted with their
-- fork, and the foreign key refuses to delete it even in a race.
ALTER TABLE snapshot_history ADD COLUMN base_run text REFERENCES runs (run_id);
CREATE INDEX snapshot_history_base_run ON snapshot_history (base_run)
    WHERE base_run IS NOT NULL;
