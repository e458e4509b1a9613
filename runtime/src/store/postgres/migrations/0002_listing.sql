-- Listing runs a page at a time (`Store::list_runs_page`): newest first by
-- run id, compared byte by byte (COLLATE "C", as the other stores compare
-- ids), optionally of one status or one flow. Each filter walks its own
-- index from the cursor and stops after one page.
CREATE INDEX runs_by_id ON runs (run_id COLLATE "C");
CREATE INDEX runs_by_status ON runs (status, run_id COLLATE "C");
CREATE INDEX runs_by_flow ON runs ((flow ->> 'name'), run_id COLLATE "C");
