-- Each pace key's learned pace (`Store::save_paces`): what earlier calls of
-- a model endpoint, a tool or a kind of worker showed of their time to a
-- first item and their intervals, shared by every executor of the database.
CREATE TABLE paces (
    key text PRIMARY KEY,
    pace jsonb NOT NULL,
    updated_at_ms bigint NOT NULL
);
