//! [`PostgresStore`]: the [`Store`] port on PostgreSQL, one database shared
//! by many executors (the `postgres` feature).
//!
//! The fence is enforced by the database itself, not by a lock in this
//! process, so that executors on many machines can share runs:
//!
//! - a change of a run's record (a claim, a heartbeat, a status change, a
//!   reconciliation) is one transaction that locks the run's row
//!   (`SELECT … FOR UPDATE`), applies the pure rule of [`fencing`] to it —
//!   the same function every store applies — and writes the result with a
//!   conditional `UPDATE … WHERE run_id = $1 AND fence = $2`, in the same
//!   statement as the notice the change keeps in the outbox and its
//!   notifications (four statements in all);
//! - every other fenced write (a snapshot, a tool-call record, events) is
//!   one statement whose first step takes a shared lock on the run's row
//!   *only if* its fence is the writer's (`SELECT … WHERE fence = $2 FOR
//!   SHARE`), and whose insert reads from that step: a stale write inserts
//!   nothing, and a claim (which needs the row exclusively) waits for a
//!   write in flight to commit, so a write lands before a claim or not at
//!   all.
//!
//! A terminal status is written in one transaction; the event log has one
//! row per `(run_id, seq)` (the first write of a seq stands, so a retried
//! append is harmless) and is read back in `seq` order. Every write is
//! committed when its call returns, so [`ChangeSource::flush`] has nothing left to
//! do. Every wait is bounded: getting or opening a connection by
//! [`PostgresConfig::connect_timeout`], each statement by
//! [`PostgresConfig::statement_timeout`]; a failure is a [`StoreError`]
//! saying what failed.
//!
//! The schema is versioned ([`schema`]): migrations are applied before the
//! first statement (or at [`PostgresStore::connect`]), under an advisory
//! lock, so that executors starting together apply each one once.
//!
//! Runs are counted by status without reading them: triggers on `runs`
//! (`0010_run_counts.sql`) keep a `run_counts` table in the transaction of
//! every statement that creates, changes the status of, or deletes a run,
//! so the counts roll back with it and never drift, whichever statement or
//! executor made the change. Counting with an index would still read one
//! entry per run (O(n) at each scrape). The counts are sharded by the
//! writing connection (`pg_backend_pid() % 16`), so that many executors
//! changing runs at once update rows of their own rather than queue on one
//! hot row per status; a change of status moves its two rows in one
//! statement, in key order, and a heartbeat (no change of status) fires
//! nothing. A count is the sum of at most 16 rows.
//!
//! JSON (a flow, a pause, a snapshot, a tool-call record, an event) is kept
//! as `jsonb`, the same JSON the sled store keeps; Unix-ms times and fences
//! as `bigint`, converted with a check.
//!
//! Each part of the port is implemented in a file of its own, as the sled
//! store's are: `runs.rs` ([`RunStore`](leasehold_actors::RunStore)),
//! `events.rs`, `snapshots.rs`, `queue.rs`, `outbox.rs`, `paces.rs`,
//! `changes.rs`, `retention.rs`; beside them the machinery they share: rows
//! and their columns (`rows.rs`), the filters of a page of runs
//! (`listing.rs`), the schema and its migrations (`schema.rs`), the
//! `LISTEN` connection (`listen.rs`) and TLS (`tls.rs`).
//!
//! ```no_run
//! use leasehold::RunStore;
//! use leasehold::store::{PostgresConfig, PostgresStore};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PostgresStore::connect(PostgresConfig::new("postgres://leasehold@db/runs")).await?;
//! for run in store.list_runs().await? {
//!     println!("{} {:?}", run.run_id, run.status);
//! }
//! # Ok(()) }
//! ```
//! [`ChangeSource::flush`]: crate::ChangeSource::flush

mod api_keys;
mod changes;
mod config;
mod events;
mod keys;
mod listen;
mod listing;
mod outbox;
mod paces;
mod queue;
mod retention;
mod rows;
mod runs;
mod schema;
mod snapshots;
mod tls;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use leasehold_actors::{ChangeHub, Fenced, RunRecord, StoreChange, StoreError, StoreFuture};
use tokio::sync::{OnceCell, watch};
use tokio_postgres::types::ToSql;
use tokio_util::sync::CancellationToken;

pub use config::PostgresConfig;
use rows::{RUN_COLUMNS, RunParams, from_json, run_from_row, to_i64};

/// The [`Store`](leasehold_actors::Store) port on a PostgreSQL database. Cheap to clone; clones
/// share the connection pool.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    config: PostgresConfig,
    /// Set once the schema is up to date.
    migrated: OnceCell<()>,
    /// What the `LISTEN` connection hears, re-broadcast ([`listen`]).
    changes: ChangeHub,
    /// Whether the `LISTEN` connection is in place, once it was started
    /// (at [`PostgresStore::connect`], or on the first subscriber).
    listening: Mutex<Option<watch::Receiver<bool>>>,
    /// Stops the `LISTEN` connection when the store is dropped.
    stop: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The payload of the notification of `change`: its JSON.
fn notice(change: &StoreChange) -> Result<String, StoreError> {
    serde_json::to_string(change)
        .map_err(|e| StoreError::invalid(format!("cannot encode the change {change:?}: {e}")))
}

/// The payloads a change of run `run_id`'s record notifies: with
/// `announce`, the [`StoreChange::Run`]; if it `kept` a notice, then the
/// [`StoreChange::Notice`] that wakes deliverers.
fn change_notices(run_id: &str, announce: bool, kept: bool) -> Result<Vec<String>, StoreError> {
    let run_id = run_id.to_owned();
    let mut payloads = Vec::new();
    if announce {
        payloads.push(notice(&StoreChange::Run {
            run_id: run_id.clone(),
        })?);
    }
    if kept {
        payloads.push(notice(&StoreChange::Notice { run_id })?);
    }
    Ok(payloads)
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.inner.config.redacted())
            .finish_non_exhaustive()
    }
}

/// The first step of every fenced write to a table other than `runs`: the
/// run's row, share-locked, if `$2` is its fence (`$1` is the run).
const OWNER: &str =
    "WITH owner AS (SELECT run_id FROM runs WHERE run_id = $1 AND fence = $2 FOR SHARE)";

/// What ends every fenced write: whether the fence was the run's.
const OWNER_MATCHED: &str = "SELECT count(*) FROM owner";

/// The write of a run's changed record, in one statement: the record
/// (`$1` the run, `$2` the fence it had, `$3`–`$10` the changed columns),
/// the notice the change keeps in the outbox (`$11` its due time, `$12`
/// the notice; `NULL` for none) and the notifications of the change (`$13`,
/// none or more), each only if the record was written. Answers how many
/// records were written (1, or 0 if the fence moved) and how many
/// notifications were sent (counted so that they are).
const WRITE_RUN: &str = "WITH written AS (UPDATE runs SET status = $3, owner_id = $4, \
     fence = $5, lease_expires_at_ms = $6, reason = $7, answer = $8, pause = $9, \
     updated_at_ms = $10 WHERE run_id = $1 AND fence = $2 RETURNING run_id), \
     kept AS (INSERT INTO outbox (run_id, due_at_ms, notice) \
     SELECT run_id, $11::bigint, $12::jsonb FROM written WHERE $12::jsonb IS NOT NULL), \
     notified AS (SELECT pg_notify('leasehold', payload) \
     FROM written, unnest($13::text[]) AS payload) \
     SELECT (SELECT count(*) FROM written), (SELECT count(*) FROM notified)";

/// The query that reads runs, with `tail` (a filter, an order).
fn runs_query(tail: &str) -> String {
    format!("SELECT {RUN_COLUMNS} FROM runs {tail}")
}

/// A statement that failed, saying what it was doing.
fn failed(doing: &dyn fmt::Display, error: &tokio_postgres::Error) -> StoreError {
    match error.as_db_error() {
        Some(db) => StoreError::failed(format!("{doing} failed in PostgreSQL: {db}")),
        // A connection that closed under the statement: worth trying again.
        None if error.is_closed() => {
            StoreError::unavailable(format!("{doing} failed: {}", with_causes(error)))
        }
        None => StoreError::failed(format!("{doing} failed: {}", with_causes(error))),
    }
}

/// `error` and every cause under it: the client's own message alone is
/// often only a category ("error performing TLS handshake", "db error").
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let said = next.to_string();
        if !text.contains(&said) {
            text = format!("{text}: {said}");
        }
        cause = next.source();
    }
    text
}

fn no_run(run_id: &str) -> StoreError {
    StoreError::not_found(format!("no run `{run_id}`"))
}

impl PostgresStore {
    /// A store on the database `config.url`, without connecting yet: the
    /// first call connects and brings the schema up to date. Fails at once
    /// only if the URL is not a valid PostgreSQL URL.
    pub fn open(config: PostgresConfig) -> Result<Self, StoreError> {
        let (client_config, tls) = config.client_config()?;
        let manager = Manager::from_config(
            client_config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(config.connect_timeout))
            .create_timeout(Some(config.connect_timeout))
            .recycle_timeout(Some(config.connect_timeout))
            .build()
            .map_err(|e| {
                StoreError::invalid(format!(
                    "cannot build the connection pool of the PostgreSQL store {}: {e}",
                    config.redacted()
                ))
            })?;
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                config,
                migrated: OnceCell::new(),
                changes: ChangeHub::new(),
                listening: Mutex::new(None),
                stop: CancellationToken::new(),
            }),
        })
    }

    /// A store on the database `config.url`, connected, its schema brought
    /// up to date, and its change feed listening: fails at once if the
    /// database cannot be reached.
    pub async fn connect(config: PostgresConfig) -> Result<Self, StoreError> {
        let store = Self::open(config)?;
        // Connecting once migrates the schema; the connection goes back to
        // the pool.
        drop(store.inner.client().await?);
        let mut listening = store.listen()?;
        let within = store.inner.config.connect_timeout;
        match tokio::time::timeout(within, listening.wait_for(|ready| *ready)).await {
            Ok(Ok(_)) => Ok(store),
            _ => Err(StoreError::unavailable(format!(
                "the change feed of the PostgreSQL store {} could not LISTEN within {}",
                store.inner.config.redacted(),
                humantime::format_duration(within)
            ))),
        }
    }

    /// Starts the `LISTEN` connection unless it runs; whether it is in
    /// place.
    fn listen(&self) -> Result<watch::Receiver<bool>, StoreError> {
        let mut listening = self
            .inner
            .listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(ready) = listening.as_ref() {
            return Ok(ready.clone());
        }
        let (ready, receiver) = watch::channel(false);
        let (client_config, tls) = self.inner.config.client_config()?;
        let started = listen::start(
            client_config,
            tls,
            self.inner.changes.clone(),
            self.inner.stop.clone(),
            ready,
            self.inner.config.redacted(),
        );
        if started {
            *listening = Some(receiver.clone());
        }
        Ok(receiver)
    }

    /// How the store was opened.
    pub fn config(&self) -> &PostgresConfig {
        &self.inner.config
    }

    /// The schema version this build applies.
    pub fn schema_version() -> u32 {
        u32::try_from(schema::current_version()).unwrap_or(0)
    }

    /// Changes the run's record by `rule` (a rule of [`fencing`] that
    /// refuses a stale fence), in one transaction holding the run's row;
    /// with `announce`, the change is notified in it.
    fn fenced_change(
        &self,
        run_id: &str,
        announce: bool,
        rule: impl FnOnce(&RunRecord) -> Result<RunRecord, Fenced<()>> + Send + 'static,
    ) -> StoreFuture<Fenced<()>> {
        let run_id = run_id.to_owned();
        self.with(move |inner| async move {
            inner
                .change_run(&run_id, announce, |record| {
                    let record = record.ok_or_else(|| no_run(&run_id))?;
                    Ok(match rule(&record) {
                        Ok(changed) => (Fenced::Applied(()), Some(changed)),
                        Err(stale) => (stale, None),
                    })
                })
                .await
        })
    }

    /// Runs `work` on the store's connection, as a boxed future.
    fn with<T, F, W>(&self, work: W) -> StoreFuture<T>
    where
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
        W: FnOnce(Arc<Inner>) -> F,
    {
        Box::pin(work(Arc::clone(&self.inner)))
    }
}

impl Inner {
    fn pool_error(&self, error: &PoolError) -> StoreError {
        let store = self.config.redacted();
        match error {
            PoolError::Backend(error) => StoreError::unavailable(format!(
                "cannot get a connection to the PostgreSQL store {store}: {}",
                with_causes(error)
            )),
            other => StoreError::unavailable(format!(
                "cannot get a connection to the PostgreSQL store {store}: {other}"
            )),
        }
    }

    /// A connection from the pool, once the schema is up to date.
    async fn client(&self) -> Result<Object, StoreError> {
        let mut client = self.pool.get().await.map_err(|e| self.pool_error(&e))?;
        self.migrated
            .get_or_try_init(|| schema::migrate(&mut client))
            .await?;
        Ok(client)
    }

    /// Replaces the run's record by what `rule` makes of it (or leaves it
    /// if `rule` answers no record), in one transaction holding the run's
    /// row; with `announce`, a [`StoreChange::Run`] is notified in that
    /// transaction, so only if it commits.
    ///
    /// Four statements: `START TRANSACTION`, the row read `FOR UPDATE`, one
    /// write ([`WRITE_RUN`]: the record, the notice it keeps, the
    /// notification), `COMMIT`; the read and the write prepared once per
    /// connection.
    async fn change_run<T>(
        &self,
        run_id: &str,
        announce: bool,
        rule: impl FnOnce(Option<RunRecord>) -> Result<(T, Option<RunRecord>), StoreError>,
    ) -> Result<T, StoreError> {
        let doing = format!("changing run `{run_id}`");
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| failed(&doing, &e))?;
        let read = tx
            .prepare_cached(&runs_query("WHERE run_id = $1 FOR UPDATE"))
            .await
            .map_err(|e| failed(&doing, &e))?;
        let row = tx
            .query_opt(&read, &[&run_id])
            .await
            .map_err(|e| failed(&doing, &e))?;
        let record = row.as_ref().map(run_from_row).transpose()?;
        let old_fence = record.as_ref().map(|record| record.fence);
        let old_status = record.as_ref().map(|record| record.status);
        let (value, changed) = rule(record)?;
        let (Some(changed), Some(old_fence)) = (changed, old_fence) else {
            return Ok(value);
        };
        let params = RunParams::new(&changed)?;
        let old_fence = to_i64(old_fence, &format_args!("the fence of run `{run_id}`"))?;
        let [
            id,
            _,
            status,
            owner,
            fence,
            expires,
            reason,
            answer,
            pause,
            _,
            updated,
            // A fork's lineage, a caller's trace context and the tenant are
            // written when the run is created, and no rule changes them.
            _,
            _,
            _,
        ] = params.values();
        let kept = old_status.and_then(|old| leasehold_actors::outbox::notice_of(old, &changed));
        let (notice_due, notice_value) = outbox::columns(kept.as_ref())?;
        let payloads = change_notices(run_id, announce, kept.is_some())?;
        let write = tx
            .prepare_cached(WRITE_RUN)
            .await
            .map_err(|e| failed(&doing, &e))?;
        let written: i64 = tx
            .query_one(
                &write,
                &[
                    id,
                    &old_fence,
                    status,
                    owner,
                    fence,
                    expires,
                    reason,
                    answer,
                    pause,
                    updated,
                    &notice_due,
                    &notice_value,
                    &payloads,
                ],
            )
            .await
            .map_err(|e| failed(&doing, &e))?
            .get(0);
        if written != 1 {
            return Err(StoreError::failed(format!(
                "{doing} failed: the row moved while locked"
            )));
        }
        tx.commit().await.map_err(|e| failed(&doing, &e))?;
        Ok(value)
    }

    /// Runs a fenced write: `statement` starts with [`OWNER`], takes the run
    /// as `$1` and the fence as `$2`, and ends with [`OWNER_MATCHED`].
    async fn fenced_write(
        &self,
        run_id: &str,
        fence: u64,
        statement: &str,
        rest: &[&(dyn ToSql + Sync)],
        doing: &(dyn fmt::Display + Sync),
    ) -> Result<Fenced<()>, StoreError> {
        let fence = to_i64(fence, &format_args!("the fence given for run `{run_id}`"))?;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&run_id, &fence];
        params.extend_from_slice(rest);
        let client = self.client().await?;
        // Prepared once per connection: parsing and planning the statement
        // on every write halved the write rate (the `swarm` benchmark's
        // `--part pg`).
        let prepared = client
            .prepare_cached(statement)
            .await
            .map_err(|e| failed(doing, &e))?;
        let matched: i64 = client
            .query_one(&prepared, &params)
            .await
            .map_err(|e| failed(doing, &e))?
            .get(0);
        if matched > 0 {
            return Ok(Fenced::Applied(()));
        }
        let row = client
            .query_opt(
                "SELECT fence, owner_id FROM runs WHERE run_id = $1",
                &[&run_id],
            )
            .await
            .map_err(|e| failed(doing, &e))?
            .ok_or_else(|| no_run(run_id))?;
        Ok(Fenced::Stale {
            fence: rows::to_u64(row.get(0), &format_args!("the fence of run `{run_id}`"))?,
            owner_id: row.get(1),
        })
    }

    /// The JSON values of one column of a run's rows, in `query`'s order;
    /// its text is fixed (prepared once per connection).
    async fn load_json<T: serde::de::DeserializeOwned>(
        &self,
        query: &str,
        params: &[&(dyn ToSql + Sync)],
        what: &str,
        run_id: &str,
    ) -> Result<Vec<T>, StoreError> {
        let doing = format!("reading the {what}s of run `{run_id}`");
        let client = self.client().await?;
        let statement = client
            .prepare_cached(query)
            .await
            .map_err(|e| failed(&doing, &e))?;
        let rows = client
            .query(&statement, params)
            .await
            .map_err(|e| failed(&doing, &e))?;
        let name = format!("a {what} of run `{run_id}`");
        rows.iter()
            .map(|row| from_json(row.get(0), &name))
            .collect()
    }

    /// The runs `statement` answers, its columns [`RUN_COLUMNS`]; its text
    /// is fixed (prepared once per connection).
    async fn load_runs(
        &self,
        statement: &str,
        params: &[&(dyn ToSql + Sync)],
        doing: &(dyn fmt::Display + Sync),
    ) -> Result<Vec<RunRecord>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(statement)
            .await
            .map_err(|e| failed(doing, &e))?;
        let rows = client
            .query(&statement, params)
            .await
            .map_err(|e| failed(doing, &e))?;
        rows.iter().map(run_from_row).collect()
    }
}
