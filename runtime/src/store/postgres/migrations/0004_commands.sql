-- A person's controls for a run another executor holds (`Store::send_command`):
-- kept until the run's owner takes them (`Store::take_commands`), which
-- deletes them as it returns them, so each is taken once. Taken in id order.
CREATE TABLE commands (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id text NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    command jsonb NOT NULL
);

CREATE INDEX commands_by_run ON commands (run_id);
