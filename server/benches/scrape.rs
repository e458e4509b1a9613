//! The scrape benchmark: what one `GET /metrics`, one `GET /executor` and
//! one post that waits queued cost with 100 runs stored, and with 100 000.
//! Each store keeps its counts of runs by status as runs change, so all
//! three should cost the same at both sizes; the benchmark prints each
//! figure and the ratio of the large store's to the small one's.
//!
//! ```sh
//! cargo bench -p leasehold-server --bench scrape                      # sled
//! cargo bench -p leasehold-server --bench scrape -- --store both      # sled and PostgreSQL
//! cargo bench -p leasehold-server --bench scrape -- --runs 10000 --scrapes 500
//! ```
//!
//! The runs are written straight to the store (finished runs, a fifth of
//! them waiting for a person, each with a flow of a few hundred bytes), not
//! run: populating 100 000 takes seconds. Then an in-process server is
//! served on loopback over the store, and a client scrapes it `--scrapes`
//! times (200) after a warm-up of 20 (the writes flushed first), measuring each answer from request
//! to the end of its body, and asks `GET /executor` as many times. On
//! PostgreSQL (`--store pg` or `both`) the store is a throwaway cluster
//! (see `runtime/tests/support/postgres.rs`), and the runs are written by
//! 32 writers at once.
//!
//! It is a benchmark, not a test: it asserts nothing of the times, and
//! prints them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::executor::{Executor, ExecutorOptions};
use leasehold::store::{Durability, PostgresConfig, PostgresStore, SledConfig, SledStore};
use leasehold::testing::ScriptedModel;
use leasehold::{Engine, RunRecord, Store};
use leasehold_server::{App, ServerOptions};
use serde_json::json;
use tokio::net::TcpListener;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

/// The command line.
struct Options {
    runs: usize,
    scrapes: usize,
    sled: bool,
    pg: bool,
}

fn options() -> Options {
    let mut options = Options {
        runs: 100_000,
        scrapes: 200,
        sled: true,
        pg: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .unwrap_or_else(|| panic!("{name} takes a value"))
        };
        match arg.as_str() {
            "--runs" => options.runs = value("--runs").parse().expect("--runs: a count"),
            "--scrapes" => {
                options.scrapes = value("--scrapes").parse().expect("--scrapes: a count");
            }
            "--store" => match value("--store").as_str() {
                "sled" => (options.sled, options.pg) = (true, false),
                "pg" => (options.sled, options.pg) = (false, true),
                "both" => (options.sled, options.pg) = (true, true),
                other => panic!("--store: sled, pg or both, not {other}"),
            },
            // What `cargo bench` passes to every bench.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    options
}

/// Finished run `n` as the store keeps it.
fn stored_run(n: usize) -> RunRecord {
    let status = if n % 5 == 0 {
        "waiting_human"
    } else {
        "completed"
    };
    serde_json::from_value(json!({
        "run_id": format!("run-{n:08}"),
        "flow": {"name": "stored", "task": "Summarize the report.".repeat(16)},
        "status": status, "owner_id": null, "fence": 1, "lease_expires_at_ms": 0,
        "reason": null, "answer": "done", "pause": null, "created_at_ms": n,
        "updated_at_ms": n,
    }))
    .expect("a record")
}

/// Writes runs `from..to` to `store`, `writers` at a time.
async fn populate(store: &Arc<dyn Store>, from: usize, to: usize, writers: usize) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(from));
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let (store, next) = (Arc::clone(store), Arc::clone(&next));
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if n >= to {
                        return;
                    }
                    store.create_run(stored_run(n)).await.expect("created");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a writer");
    }
    // What was written is on disk before anything is timed: sled's
    // flushes of the writes do not run beside the scrapes.
    store.flush().await.expect("flushed");
}

/// The median and the 99th percentile of `samples`, in ms.
fn summary(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let last = samples.len().saturating_sub(1);
    let at = |percent: usize| samples[last * percent / 100].as_secs_f64() * 1_000.0;
    (at(50), at(99))
}

/// Serves `store` and times `scrapes` answers of `path`: median and p99.
async fn timed(store: Arc<dyn Store>, scrapes: usize) -> [(f64, f64); 2] {
    let engine = Engine::builder()
        .store(store)
        .model(Arc::new(ScriptedModel::new()))
        .build()
        .await
        .expect("engine");
    let app = App::new(
        Executor::new(Arc::new(engine), ExecutorOptions::default()),
        ServerOptions::default(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(leasehold_server::serve(listener, app, async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    let mut figures = [(0.0, 0.0); 2];
    for (slot, path) in ["/metrics", "/executor"].into_iter().enumerate() {
        let url = format!("{base}{path}");
        let mut samples = Vec::with_capacity(scrapes);
        for round in 0..scrapes + 20 {
            let started = Instant::now();
            let response = http.get(&url).send().await.expect("an answer");
            assert!(
                response.status().is_success(),
                "{path}: {}",
                response.status()
            );
            let body = response.bytes().await.expect("a body");
            let took = started.elapsed();
            assert!(!body.is_empty());
            if round >= 20 {
                samples.push(took);
            }
        }
        figures[slot] = summary(samples);
    }
    let _ = stop.send(());
    let _ = server.await;
    figures
}

/// Times the scrapes at 100 runs stored, then at `options.runs`, on the
/// store `open` opens, and prints both and their ratio.
async fn bench(name: &str, store: Arc<dyn Store>, options: &Options, writers: usize) {
    let small = 100.min(options.runs);
    populate(&store, 0, small, writers).await;
    let at_small = timed(Arc::clone(&store), options.scrapes).await;
    let started = Instant::now();
    populate(&store, small, options.runs, writers).await;
    let populated = started.elapsed();
    let at_large = timed(Arc::clone(&store), options.scrapes).await;
    println!(
        "{name}: {} runs written in {:.1} s",
        options.runs - small,
        populated.as_secs_f64()
    );
    for (slot, path) in ["GET /metrics", "GET /executor"].into_iter().enumerate() {
        let ((small_median, small_p99), (large_median, large_p99)) =
            (at_small[slot], at_large[slot]);
        println!(
            "{name}: {path:<13}  {small:>6} runs: median {small_median:.3} ms, p99 \
             {small_p99:.3} ms   {large:>6} runs: median {large_median:.3} ms, p99 \
             {large_p99:.3} ms   ratio of medians {:.2}",
            large_median / small_median,
            large = options.runs,
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let options = options();
    println!(
        "scrapes of a store holding 100 runs, then {} ({} timed answers each)",
        options.runs, options.scrapes
    );
    if options.sled {
        let dir = tempfile::tempdir().expect("a directory");
        let store = SledStore::open(
            SledConfig::new(dir.path())
                .with_durability(Durability::Async)
                .with_temporary(true),
        )
        .expect("a sled store");
        bench("sled", Arc::new(store), &options, 4).await;
    }
    if options.pg {
        let (_cluster, url) = postgres::database().await;
        let store = PostgresStore::connect(PostgresConfig::new(&url))
            .await
            .expect("a PostgreSQL store");
        bench("postgres", Arc::new(store), &options, 32).await;
    }
}
