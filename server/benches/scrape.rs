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
//! run: populating 100 000 takes seconds. Two stores are written, one of
//! 100 runs and one of `--runs`, each served by an in-process server on
//! loopback (the writes flushed first); a client asks each in turn
//! `--scrapes` times (200) after a warm-up of 20 — so that a change of the
//! machine's load falls on both — measuring each answer from request to
//! the end of its body, first `GET /metrics`, then `GET /executor`. On
//! PostgreSQL (`--store pg` or `both`) the store is a throwaway cluster
//! (see `runtime/tests/support/postgres.rs`), and the runs are written by
//! 32 writers at once. Last, on sled, it times opening a store again
//! with 100 runs and with `--runs`: what counting the runs by status once
//! at open costs instead.
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
    let status = if n.is_multiple_of(5) {
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

/// A server over `store` on loopback: its base URL, and what stops it.
async fn serve(store: Arc<dyn Store>) -> (String, tokio::sync::oneshot::Sender<()>) {
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
    tokio::spawn(leasehold_server::serve(listener, app, async {
        let _ = stopped.await;
    }));
    (base, stop)
}

/// One answer of `url`, timed from the request to the end of its body.
async fn answer(http: &reqwest::Client, url: &str) -> Duration {
    let started = Instant::now();
    let response = http.get(url).send().await.expect("an answer");
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    let body = response.bytes().await.expect("a body");
    let took = started.elapsed();
    assert!(!body.is_empty());
    took
}

/// Times the answers of a store of 100 runs and of one of `options.runs`,
/// each served by a server of its own, asked in turn (so that a change of
/// the machine's load falls on both), and prints both and their ratio.
async fn bench(
    name: &str,
    small: Arc<dyn Store>,
    large: Arc<dyn Store>,
    options: &Options,
    writers: usize,
) {
    populate(&small, 0, 100.min(options.runs), writers).await;
    let started = Instant::now();
    populate(&large, 0, options.runs, writers).await;
    println!(
        "{name}: {} runs written in {:.1} s",
        options.runs,
        started.elapsed().as_secs_f64()
    );
    let (small_base, _stop_small) = serve(small).await;
    let (large_base, _stop_large) = serve(large).await;
    let http = reqwest::Client::new();
    for path in ["/metrics", "/executor"] {
        let (small_url, large_url) = (format!("{small_base}{path}"), format!("{large_base}{path}"));
        let (mut at_small, mut at_large) = (Vec::new(), Vec::new());
        for round in 0..options.scrapes + 20 {
            // Each first in turn.
            let (first, second) = if round % 2 == 0 {
                (
                    answer(&http, &small_url).await,
                    answer(&http, &large_url).await,
                )
            } else {
                let large = answer(&http, &large_url).await;
                (answer(&http, &small_url).await, large)
            };
            if round >= 20 {
                at_small.push(first);
                at_large.push(second);
            }
        }
        let ((small_median, small_p99), (large_median, large_p99)) =
            (summary(at_small), summary(at_large));
        println!(
            "{name}: GET {path:<9}  100 runs: median {small_median:.3} ms, p99 \
             {small_p99:.3} ms   {large} runs: median {large_median:.3} ms, p99 \
             {large_p99:.3} ms   ratio of medians {:.2}",
            large_median / small_median,
            large = options.runs,
        );
    }
}

/// How long opening a sled store that holds `runs` runs takes: written,
/// closed, then opened again (not temporary, so that it can be).
async fn reopened(runs: usize) -> Duration {
    let dir = tempfile::tempdir().expect("a directory");
    let config = || SledConfig::new(dir.path()).with_durability(Durability::Async);
    let store: Arc<dyn Store> = Arc::new(SledStore::open(config()).expect("a sled store"));
    populate(&store, 0, runs, 4).await;
    drop(store);
    let started = Instant::now();
    let store = SledStore::open(config()).expect("opened again");
    let took = started.elapsed();
    drop(store);
    took
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let options = options();
    println!(
        "scrapes of a store holding 100 runs, then {} ({} timed answers each)",
        options.runs, options.scrapes
    );
    if options.sled {
        let (small, large) = (
            tempfile::tempdir().expect("a directory"),
            tempfile::tempdir().expect("a directory"),
        );
        let open = |dir: &tempfile::TempDir| -> Arc<dyn Store> {
            Arc::new(
                SledStore::open(
                    SledConfig::new(dir.path())
                        .with_durability(Durability::Async)
                        .with_temporary(true),
                )
                .expect("a sled store"),
            )
        };
        bench("sled", open(&small), open(&large), &options, 4).await;
        for runs in [100.min(options.runs), options.runs] {
            let took = reopened(runs).await;
            println!(
                "sled: opened again with {runs} runs stored in {:.1} ms (its counts by status \
                 counted from its status index)",
                took.as_secs_f64() * 1_000.0
            );
        }
    }
    if options.pg {
        let (cluster, small) = postgres::database().await;
        // The cluster runs while `cluster` is held, to the end.
        let held = Arc::clone(&cluster);
        let large = tokio::task::spawn_blocking(move || held.database())
            .await
            .expect("a second database");
        let connect = |url: String| async move {
            let store: Arc<dyn Store> = Arc::new(
                PostgresStore::connect(PostgresConfig::new(&url))
                    .await
                    .expect("a PostgreSQL store"),
            );
            store
        };
        bench(
            "postgres",
            connect(small).await,
            connect(large).await,
            &options,
            32,
        )
        .await;
    }
}
