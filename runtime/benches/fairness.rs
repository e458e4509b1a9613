//! The fairness benchmark: how long a small tenant's runs wait to start
//! while a large tenant floods the queue, against how long they wait with
//! no flood, measured in the same run.
//!
//! ```sh
//! cargo bench -p leasehold --bench fairness                 # 10 000 runs of flood
//! cargo bench -p leasehold --bench fairness -- --flood 2000 --slots 8 --small 10
//! ```
//!
//! One executor with `--slots` live runs (`server.max_live_runs`) on a
//! store (memory, then sled). Each run is one model call that takes one
//! second. The large tenant posts `--flood` runs; then the small tenant
//! posts `--small` runs, one at a time; each small run's wait is the time
//! from its post to its start. The same small runs are then timed with no
//! flood. Time is tokio's paused clock: the figures are the runtime's
//! decisions, not the machine's speed, and the same on every run.
//!
//! On PostgreSQL (when its server binaries are installed: a throwaway
//! cluster is started) the same is measured in real time, with
//! `--pg-flood` runs of flood (2 000 by default): the claims there go
//! through the database, so the figure holds its latency as well.
//!
//! The target: a small run waits at most twice as long as a run takes
//! (one run of the flood ends, then the small run's turn), whatever the
//! flood; a queue served first come, first served would make it wait
//! `flood / slots` runs.

use std::sync::Arc;
use std::time::Duration;

use leasehold::executor::{Executor, ExecutorOptions, Posted};
use leasehold::store::{Durability, SledConfig, SledStore};
use leasehold::{
    BoxFuture, Engine, Evidence, Flow, MemoryStore, ModelClient, ModelError, ModelReply,
    ModelRequest, RunOptions, RunStatus, Store,
};
use tokio::time::Instant;

#[cfg(feature = "postgres")]
#[path = "../tests/support/postgres.rs"]
mod cluster;

/// How long one run's model call takes.
const RUN: Duration = Duration::from_secs(1);

/// The target: a small run's longest wait under the flood, at most this
/// many runs' time.
const WAIT_TARGET_RUNS: f64 = 2.0;

/// A model that answers after [`RUN`].
struct OneSecondModel;

impl ModelClient for OneSecondModel {
    fn complete(
        &self,
        _request: ModelRequest,
        _evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        Box::pin(async {
            tokio::time::sleep(RUN).await;
            Ok(ModelReply {
                content: "done".to_owned(),
                tool_calls: Vec::new(),
                usage: leasehold::TokenCost::default(),
                finish_reason: None,
            })
        })
    }
}

fn flow() -> Flow {
    serde_json::from_value(serde_json::json!({
        "name": "fairness",
        "task": "Answer.",
        "max_steps": 2,
    }))
    .expect("valid flow")
}

fn value(name: &str) -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|e| panic!("{name}: {e}")))
}

fn main() {
    let flood = value("--flood").unwrap_or(10_000);
    let slots = value("--slots").unwrap_or(8);
    let small = value("--small").unwrap_or(10);
    println!(
        "fairness: a small tenant's {small} runs posted behind a large tenant's {flood}, \
         {slots} live runs, each run {}s (paused time)",
        RUN.as_secs()
    );
    let mut pass = true;
    let mut stores = vec!["memory", "sled"];
    if cfg!(feature = "postgres") && postgres_installed() {
        stores.push("postgres");
    } else {
        println!("postgres: skipped (built without the `postgres` feature, or no server binaries)");
    }
    // Held until the figures are printed, then stopped (by `Drop`).
    #[cfg(feature = "postgres")]
    let held = stores.contains(&"postgres").then(cluster::cluster);
    for store in stores {
        let paused = store != "postgres";
        let runtime = if paused {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
        }
        .expect("a runtime");
        let flood = if paused {
            flood
        } else {
            value("--pg-flood").unwrap_or(2_000)
        };
        if !paused {
            println!("postgres: {flood} runs of flood, real time");
        }
        let (alone, flooded) = runtime.block_on(async {
            let alone = waits(open(store).await, 0, slots, small).await;
            let flooded = waits(open(store).await, flood, slots, small).await;
            (alone, flooded)
        });
        let secs = |d: Duration| d.as_secs_f64();
        let worst = flooded.iter().max().copied().unwrap_or_default();
        let worst_alone = alone.iter().max().copied().unwrap_or_default();
        let in_runs = secs(worst) / secs(RUN);
        let fifo = f64::from(u32::try_from(flood / slots.max(1)).unwrap_or(u32::MAX));
        let ok = in_runs <= WAIT_TARGET_RUNS;
        pass &= ok;
        println!(
            "{store}: small run waits, flooded: p50 {:.2}s max {:.2}s ({in_runs:.2} runs; target \
             <= {WAIT_TARGET_RUNS}: {}); alone: max {:.2}s; ratio flooded/alone {:.2}; first come, \
             first served would be ~{fifo:.0} runs",
            secs(median(&flooded)),
            secs(worst),
            if ok { "PASS" } else { "MISS" },
            secs(worst_alone),
            secs(worst) / secs(worst_alone).max(secs(RUN) / 1000.0),
        );
    }
    #[cfg(feature = "postgres")]
    drop(held);
    if !pass {
        std::process::exit(1);
    }
}

/// Whether a PostgreSQL cluster can be started here.
fn postgres_installed() -> bool {
    #[cfg(feature = "postgres")]
    return cluster::server_installed();
    #[cfg(not(feature = "postgres"))]
    return false;
}

async fn open(store: &str) -> Arc<dyn Store> {
    match store {
        "memory" => Arc::new(MemoryStore::new()),
        #[cfg(feature = "postgres")]
        "postgres" => {
            // The cluster lives as long as the bench: its database is new.
            // The cluster `main` holds: this database is a new one of it.
            let (_cluster, url) = cluster::database().await;
            let config = leasehold::store::PostgresConfig::new(&url);
            Arc::new(
                leasehold::store::PostgresStore::connect(config)
                    .await
                    .expect("the PostgreSQL store"),
            )
        }
        _ => {
            let dir = tempfile::tempdir().expect("a directory").keep();
            Arc::new(
                SledStore::open(SledConfig::new(dir).with_durability(Durability::Async))
                    .expect("the sled store"),
            )
        }
    }
}

fn median(waits: &[Duration]) -> Duration {
    let mut sorted = waits.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

/// The waits of `small` runs of the small tenant posted after `flood` runs
/// of the large one, on an executor of `slots` live runs.
async fn waits(store: Arc<dyn Store>, flood: usize, slots: usize, small: usize) -> Vec<Duration> {
    let engine = Engine::builder()
        .model(Arc::new(OneSecondModel))
        .store(Arc::clone(&store))
        .build()
        .await
        .expect("an engine");
    let options = ExecutorOptions {
        max_live_runs: u32::try_from(slots).unwrap_or(u32::MAX),
        max_queued_runs: u32::try_from(flood + small + 1).unwrap_or(u32::MAX),
        lag_target: Duration::ZERO,
        claim_interval: Some(Duration::from_millis(100)),
        resume_orphans: false,
        ..ExecutorOptions::default()
    };
    let executor = Executor::new(Arc::new(engine), options);
    executor.serve().await.expect("the executor serves");
    for _ in 0..flood {
        post(&executor, "big").await;
    }
    let mut waits = Vec::with_capacity(small);
    for _ in 0..small {
        let posted = Instant::now();
        let run_id = post(&executor, "small").await;
        loop {
            let record = store
                .load_run(&run_id)
                .await
                .expect("the run")
                .expect("kept");
            if record.status != RunStatus::Queued {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        waits.push(posted.elapsed());
    }
    executor.engine().shutdown().await;
    waits
}

async fn post(executor: &Arc<Executor>, tenant: &str) -> String {
    match executor
        .post(flow(), RunOptions::default().for_tenant(tenant))
        .await
        .expect("posted")
    {
        Posted::Recorded(run_id, _) => run_id,
        Posted::QueueFull { queued, .. } => panic!("the queue is full at {queued}"),
        other @ Posted::TenantQueueFull { .. } => panic!("{other:?}"),
    }
}
