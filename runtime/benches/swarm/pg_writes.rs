//! The PostgreSQL store's snapshot write rate against raw `INSERT`s of the
//! same rows, on a throwaway cluster (`runtime/tests/support/postgres.rs`).
//!
//! Each side gets a fresh database of the cluster, where as many runs are
//! created and claimed (so the fence holds); each run gets the snapshots a
//! pilot run of the swarm's flow wrote, in order, from a task of its own,
//! all runs at once:
//!
//! - *store*: through [`PostgresStore::save_snapshot`] (a fenced
//!   statement, prepared once per connection: a shared lock on the run's
//!   row if the fence is the run's, and the upsert reading from it);
//! - *raw*: the same rows, encoded the same way, with a plain
//!   `INSERT … ON CONFLICT (run_id, path) DO UPDATE`, through a deadpool
//!   pool of its own opened with the store's settings (size, statement
//!   timeout; the store keeps its pool private), in two forms: the
//!   statement sent as text each time (as the store did before it prepared
//!   its statements), and prepared once per connection (`prepare_cached`).
//!
//! Each side's rate is rows over wall time; CPU is this process's.

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use leasehold::store::{PostgresConfig, PostgresStore};
use leasehold::{ClaimOutcome, RunRecord, RunStatus, RunStore, Snapshot, SnapshotStore};
use tokio::time::Instant;
use tokio_postgres::NoTls;

use super::cluster;
use super::machine::{nanos, process_cpu_ns};
use super::{Pilot, recorded_snapshots};

/// The raw upsert: the same row the store writes, without the fence.
const RAW_UPSERT: &str = "INSERT INTO snapshots (run_id, path, snapshot) VALUES ($1, $2, $3) \
                          ON CONFLICT (run_id, path) DO UPDATE SET snapshot = EXCLUDED.snapshot";

/// How the raw side sends its statement.
#[derive(Clone, Copy)]
enum Raw {
    /// As text, parsed by the server each time (as the store sends its own).
    Text,
    /// Prepared once per connection.
    Prepared,
}

/// The child: `runs` runs' snapshots written each way; its figures line, or
/// a line saying why it was skipped.
pub(super) async fn child(runs: usize) -> String {
    if !cluster::server_installed() {
        return "skipped=1 (the PostgreSQL server binaries initdb and pg_ctl are not installed: \
                `apt-get install postgresql`)"
            .to_owned();
    }
    let pilot = recorded_snapshots().await;
    let cluster = cluster::cluster();
    // Each side on a fresh database of the same cluster, so that none
    // writes into tables another has grown.
    let side = || async {
        let config = PostgresConfig::new(cluster.database());
        let store = PostgresStore::connect(config.clone())
            .await
            .expect("connect to the throwaway PostgreSQL");
        let runs = claimed_runs(&store, &pilot, runs).await;
        (config, store, runs)
    };

    let (config, store, store_runs) = side().await;
    let (store_ns, store_cpu, rows) = timed(store_side(&store, &store_runs, &pilot)).await;
    let (text_config, _text_store, text_runs) = side().await;
    let text_pool = raw_pool(&text_config);
    let (text_ns, text_cpu, text_rows) =
        timed(raw_side(&text_pool, &text_runs, &pilot, Raw::Text)).await;
    let (prepared_config, _prepared_store, prepared_runs) = side().await;
    let prepared_pool = raw_pool(&prepared_config);
    let (prepared_ns, prepared_cpu, prepared_rows) = timed(raw_side(
        &prepared_pool,
        &prepared_runs,
        &pilot,
        Raw::Prepared,
    ))
    .await;
    assert_eq!(rows, text_rows, "both sides write the same rows");
    assert_eq!(rows, prepared_rows, "both sides write the same rows");
    format!(
        "rows={rows} pool={} store_ns={store_ns} store_cpu_ns={store_cpu} raw_text_ns={text_ns} \
         raw_text_cpu_ns={text_cpu} raw_prepared_ns={prepared_ns} raw_prepared_cpu_ns={prepared_cpu}",
        config.pool_size
    )
}

/// A pool like the store's: the same URL, size and statement timeout, on
/// the database of `config`.
fn raw_pool(config: &PostgresConfig) -> Pool {
    let mut client: tokio_postgres::Config = config.url.parse().expect("the cluster's URL");
    client
        .connect_timeout(config.connect_timeout)
        .options(format!(
            "-c statement_timeout={}",
            config.statement_timeout.as_millis()
        ));
    let manager = Manager::from_config(
        client,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(config.pool_size)
        .runtime(Runtime::Tokio1)
        .build()
        .expect("the raw pool")
}

/// `runs` runs of the pilot's flow, created queued and claimed, with the
/// fence each holds.
async fn claimed_runs(store: &PostgresStore, pilot: &Pilot, runs: usize) -> Vec<RunRecord> {
    let mut claimed = Vec::with_capacity(runs);
    for n in 0..runs {
        let record = RunRecord {
            run_id: format!("run-{n:06}"),
            status: RunStatus::Queued,
            owner_id: None,
            fence: 0,
            lease_expires_at_ms: 0,
            ..pilot.record.clone()
        };
        store.create_run(record.clone()).await.expect("create");
        match store
            .claim_run(&record.run_id, "bench", record.created_at_ms, 3_600_000)
            .await
            .expect("claim")
        {
            ClaimOutcome::Claimed(record) => claimed.push(record),
            other => panic!("run {} not claimed: {other:?}", record.run_id),
        }
    }
    claimed
}

/// Wall time, this process's CPU time, and what `work` returned.
async fn timed(work: impl Future<Output = u64>) -> (u64, u64, u64) {
    let (start, cpu) = (Instant::now(), process_cpu_ns());
    let rows = work.await;
    (
        nanos(start.elapsed()),
        process_cpu_ns().saturating_sub(cpu),
        rows,
    )
}

/// Each run's snapshots, in order, with the run's id: a snapshot stored
/// as its new messages over an earlier one of the pilot names that
/// earlier one in the run's own history.
fn rows_of(record: &RunRecord, pilot: &Pilot) -> Vec<Snapshot> {
    pilot
        .snapshots
        .iter()
        .map(|snapshot| {
            let mut row = Snapshot {
                run_id: record.run_id.clone(),
                ..snapshot.clone()
            };
            if let Some(base) = row.base.as_mut() {
                base.run_id.clone_from(&record.run_id);
            }
            row
        })
        .collect()
}

async fn store_side(store: &PostgresStore, runs: &[RunRecord], pilot: &Pilot) -> u64 {
    let tasks: Vec<_> = runs
        .iter()
        .map(|record| {
            let (store, rows, fence) = (store.clone(), rows_of(record, pilot), record.fence);
            tokio::spawn(async move {
                let mut written = 0;
                for snapshot in rows {
                    let saved = store.save_snapshot(snapshot, fence).await.expect("save");
                    assert!(saved.is_applied(), "the fence is the run's");
                    written += 1;
                }
                written
            })
        })
        .collect();
    let mut written = 0;
    for task in tasks {
        written += task.await.expect("store writer");
    }
    written
}

async fn raw_side(pool: &Pool, runs: &[RunRecord], pilot: &Pilot, raw: Raw) -> u64 {
    let tasks: Vec<_> = runs
        .iter()
        .map(|record| {
            let (pool, rows) = (pool.clone(), rows_of(record, pilot));
            tokio::spawn(async move {
                let mut written = 0;
                for snapshot in rows {
                    let value = serde_json::to_value(&snapshot).expect("encode");
                    let client = pool.get().await.expect("a connection");
                    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                        [&snapshot.run_id, &snapshot.path, &value];
                    let inserted = match raw {
                        Raw::Text => client.execute(RAW_UPSERT, &params).await,
                        Raw::Prepared => {
                            let statement =
                                client.prepare_cached(RAW_UPSERT).await.expect("prepare");
                            client.execute(&statement, &params).await
                        }
                    };
                    assert_eq!(inserted.expect("insert"), 1);
                    written += 1;
                }
                written
            })
        })
        .collect();
    let mut written = 0;
    for task in tasks {
        written += task.await.expect("raw writer");
    }
    written
}
