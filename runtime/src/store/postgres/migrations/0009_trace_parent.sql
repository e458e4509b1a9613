-- A run started within a caller's trace (`POST /runs` with a `traceparent`)
-- keeps the caller's trace context, as the header's text: its trace is the
-- caller's on every executor that holds it. NULL for any other run.
ALTER TABLE runs ADD COLUMN trace_parent text;
