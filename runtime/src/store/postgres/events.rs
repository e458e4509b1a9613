//! The PostgreSQL store's event logs ([`EventLog`]): one row per
//! `(run_id, seq)`, appended by one fenced statement that notifies the
//! run's new events.

use leasehold_actors::{Event, EventLog, Fenced, StoreChange, StoreFuture};

use super::rows::{to_i64, to_json};
use super::{OWNER, PostgresStore, notice};

impl EventLog for PostgresStore {
    fn append_events(
        &self,
        run_id: &str,
        events: Vec<std::sync::Arc<Event>>,
        fence: u64,
    ) -> StoreFuture<Fenced<()>> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move {
            let doing = format!("appending {} events to run `{run_id}`", events.len());
            let seqs = events
                .iter()
                .map(|event| to_i64(event.seq, &format_args!("the seq of an event of {doing}")))
                .collect::<Result<Vec<_>, _>>()?;
            let values = events
                .iter()
                .map(|event| to_json(&**event, &doing))
                .collect::<Result<Vec<_>, _>>()?;
            let payload = notice(&StoreChange::Events {
                run_id: run_id.clone(),
            })?;
            // Notified by the statement that appends, from the same owner
            // row: a stale append notifies nothing.
            let statement = format!(
                "{OWNER}, written AS (INSERT INTO events (run_id, seq, event) \
                 SELECT owner.run_id, e.seq, e.event FROM owner, \
                 unnest($3::bigint[], $4::jsonb[]) AS e (seq, event) \
                 ON CONFLICT (run_id, seq) DO NOTHING), \
                 notified AS (SELECT pg_notify('leasehold', $5) FROM owner) \
                 SELECT count(*) FROM notified"
            );
            inner
                .fenced_write(
                    &run_id,
                    fence,
                    &statement,
                    &[&seqs, &values, &payload],
                    &doing,
                )
                .await
        })
    }

    fn load_events(&self, run_id: &str, after_seq: u64) -> StoreFuture<Vec<Event>> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move {
            // No event has a seq past what a bigint holds.
            let Ok(after) = i64::try_from(after_seq) else {
                return Ok(Vec::new());
            };
            inner
                .load_json(
                    "SELECT event FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq",
                    &[&run_id, &after],
                    "event",
                    &run_id,
                )
                .await
        })
    }

    fn last_event(&self, run_id: &str) -> StoreFuture<Option<Event>> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move {
            let mut last: Vec<Event> = inner
                .load_json(
                    "SELECT event FROM events WHERE run_id = $1 ORDER BY seq DESC LIMIT 1",
                    &[&run_id],
                    "event",
                    &run_id,
                )
                .await?;
            Ok(last.pop())
        })
    }
}
