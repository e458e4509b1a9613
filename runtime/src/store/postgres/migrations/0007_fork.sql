-- Forks (`Store::load_snapshot_history`): a run may be forked from any step
-- of another. A fork's lineage (`ForkOrigin`: its parent, the loop, step and
-- place in the parent's history it starts at, what it changed) is kept
-- beside its record; NULL for a run that is not a fork.
ALTER TABLE runs ADD COLUMN fork jsonb;
-- Every snapshot ever saved of a run, of every loop, by its place in the
-- run's history (`Snapshot::seq`), written with the latest of its loop in
-- `snapshots` by the same statement: what a fork starts from. Deleted with
-- the run.
CREATE TABLE snapshot_history (
    run_id text NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    seq bigint NOT NULL CHECK (seq >= 0),
    path text NOT NULL,
    snapshot jsonb NOT NULL,
    PRIMARY KEY (run_id, seq, path)
);
