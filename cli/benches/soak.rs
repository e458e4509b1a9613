//! The soak benchmark: does an executor that serves for hours stay the
//! same size? It starts a real `leasehold serve` with a short retention,
//! posts runs to it at a steady rate, and samples the server's resident
//! memory and its store's size on disk over time.
//!
//! ```sh
//! cargo bench -p leasehold-cli --bench soak                          # 3 minutes a store
//! cargo bench -p leasehold-cli --bench soak -- --minutes 60          # an hour
//! cargo bench -p leasehold-cli --bench soak -- --store sled --rate 20 --retention 20s
//! cargo bench --profile dev -p leasehold-cli --bench soak -- --minutes 2   # debug build
//! cargo bench -p leasehold-cli --bench soak -- --retention forever --set sled.cache_capacity=1GiB
//! ```
//!
//! `--set KEY=VALUE` (repeated) is handed to `leasehold` as is: the last
//! line above soaks the executor as it was before retention and the sled
//! cache's bound.
//!
//! It runs on sled (a temporary data directory), then on a throwaway
//! PostgreSQL cluster (see `tests/support/postgres.rs`; skipped, saying
//! so, without the server binaries). The model is an OpenAI-compatible
//! endpoint served here on loopback that answers every call at once: the
//! figures are the executor's own, with no network.
//!
//! Each store gets a table — elapsed time, runs posted, the server's
//! resident set (`VmRSS`), the store on disk (the data directory's files;
//! `pg_database_size`) — and a verdict line: memory and disk are *flat*
//! when over the second half of the run they rose by at most 2 % (or
//! 1 MiB), i.e. once the retention holds, deleting runs as fast as they
//! are posted, nothing grows any more; the rise over the first half (the
//! store filling up to its retention) is shown beside it.

use std::path::PathBuf;
use std::time::Duration;

use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::process::Child;
use tokio::time::Instant;

#[path = "../../runtime/tests/support/postgres.rs"]
mod cluster;
mod served;

use served::{rss, size_of};

/// What the run is asked for.
struct Knobs {
    /// How long each store is soaked.
    duration: Duration,
    /// Runs posted per second.
    rate: u32,
    /// `executor.retention`.
    retention: String,
    /// Time between two samples.
    sample: Duration,
    /// `sled`, `pg` or `both`.
    store: String,
    /// `--set KEY=VALUE` given to `leasehold` as they are.
    set: Vec<String>,
}

fn knobs() -> Knobs {
    let mut knobs = Knobs {
        duration: Duration::from_secs(180),
        rate: 10,
        retention: "10s".to_owned(),
        sample: Duration::from_secs(10),
        store: "both".to_owned(),
        set: Vec::new(),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        let bad = |what: &str| -> ! {
            eprintln!("soak: {} expects {what}, got {value:?}", args[i]);
            std::process::exit(2)
        };
        match args[i].as_str() {
            "--minutes" => {
                let minutes: f64 = value.parse().unwrap_or_else(|_| bad("a number of minutes"));
                knobs.duration = Duration::try_from_secs_f64(minutes * 60.0)
                    .unwrap_or_else(|_| bad("a number of minutes"));
            }
            "--rate" => knobs.rate = value.parse().unwrap_or_else(|_| bad("runs per second")),
            "--retention" => knobs.retention = value,
            "--sample" => {
                knobs.sample =
                    humantime::parse_duration(&value).unwrap_or_else(|_| bad("a duration"));
            }
            "--store" => knobs.store = value,
            "--set" => knobs.set.extend(["--set".to_owned(), value]),
            // `cargo bench` passes `--bench`.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    knobs
}

/// The model: every call answered at once.
async fn model() -> String {
    async fn complete() -> Json<Value> {
        Json(json!({
            "id": "chatcmpl-soak", "object": "chat.completion", "model": "soak",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "done"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }))
    }
    let app = Router::new().route("/v1/chat/completions", post(complete));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the model");
    let addr = listener.local_addr().expect("the model's address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

/// `leasehold serve` on the store `env` names; its base URL.
async fn serve(model: &str, knobs: &Knobs, env: &[(&str, &str)]) -> (Child, String) {
    let mut env = env.to_vec();
    env.push(("LEASEHOLD_EXECUTOR_RETENTION", &knobs.retention));
    served::serve(model, "soak", &knobs.set, &env).await
}

/// One sample: seconds since the start, runs posted, RSS, disk.
type Sample = (u64, u64, u64, u64);

/// Posts runs at the rate for the duration, sampling with `disk`.
async fn soak(
    knobs: &Knobs,
    server: &Child,
    base: &str,
    mut disk: impl AsyncFnMut() -> u64,
) -> Vec<Sample> {
    let pid = server.id().expect("the server runs");
    let http = reqwest::Client::new();
    let flow = json!({"name": "soak", "task": "say done", "max_steps": 2});
    let started = Instant::now();
    let mut posting = tokio::time::interval(Duration::from_secs(1) / knobs.rate.max(1));
    posting.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sampling = tokio::time::interval(knobs.sample);
    let mut posted = 0_u64;
    let mut refused = 0_u64;
    let mut samples = Vec::new();
    let (done, mut answers) = tokio::sync::mpsc::unbounded_channel::<bool>();
    while started.elapsed() < knobs.duration {
        tokio::select! {
            _ = posting.tick() => {
                posted += 1;
                let http = http.clone();
                let url = format!("{base}/runs");
                let flow = flow.clone();
                let done = done.clone();
                // Not awaited here: a slow answer must not slow the rate.
                tokio::spawn(async move {
                    let ok = http.post(url).json(&flow).send().await
                        .is_ok_and(|r| r.status().is_success());
                    let _ = done.send(ok);
                });
            }
            _ = sampling.tick() => {
                let at = started.elapsed().as_secs();
                samples.push((at, posted, rss(pid), disk().await));
            }
            Some(ok) = answers.recv() => refused += u64::from(!ok),
        }
    }
    let at = started.elapsed().as_secs();
    if samples.last().is_none_or(|last: &Sample| last.0 < at) {
        samples.push((at, posted, rss(pid), disk().await));
    }
    if refused > 0 {
        println!("{refused} of {posted} posts were refused (a full queue or a busy server)");
    }
    samples
}

fn mib(bytes: u64) -> String {
    let tenths = bytes.saturating_mul(10) / (1 << 20);
    format!("{}.{}", tenths / 10, tenths % 10)
}

/// Whether the samples stopped growing in the second half of the run:
/// from its first sample to its last they rose by at most 2 % (or 1 MiB,
/// below 50 MiB), against what they rose by over the first half; the
/// verdict's words.
fn flat(values: &[u64]) -> (bool, String) {
    let half = values.len() / 2;
    let rise = |part: &[u64]| match (part.first(), part.last()) {
        (Some(first), Some(last)) => last.saturating_sub(*first),
        _ => 0,
    };
    if values.is_empty() {
        return (true, "not sampled (a run shorter than a sample)".to_owned());
    }
    let first = rise(&values[..=half]);
    let second = rise(&values[half..]);
    let start = values.get(half).copied().unwrap_or(0);
    let allowed = (start / 50).max(1 << 20);
    let word = if second <= allowed { "flat" } else { "GROWING" };
    (
        second <= allowed,
        format!(
            "{word} (rose {} MiB over the first half, {} MiB over the second)",
            mib(first),
            mib(second)
        ),
    )
}

fn report(store: &str, knobs: &Knobs, samples: &[Sample]) -> bool {
    println!();
    println!(
        "### {store}: {} runs/s for {}, retention {}{}",
        knobs.rate,
        humantime::format_duration(knobs.duration),
        knobs.retention,
        knobs
            .set
            .chunks(2)
            .filter_map(|pair| pair.get(1))
            .map(|set| format!(", {set}"))
            .collect::<String>()
    );
    println!();
    println!("| t (s) | runs posted | server RSS (MiB) | store on disk (MiB) |");
    println!("|---:|---:|---:|---:|");
    for (at, posted, rss, disk) in samples {
        println!("| {at} | {posted} | {} | {} |", mib(*rss), mib(*disk));
    }
    // The first sample is taken at once, before any run: left out.
    let kept = samples.get(1..).unwrap_or_default();
    let (memory_flat, memory) = flat(&kept.iter().map(|s| s.2).collect::<Vec<_>>());
    let (disk_flat, disk) = flat(&kept.iter().map(|s| s.3).collect::<Vec<_>>());
    println!();
    println!("verdict ({store}): memory {memory}; disk {disk}");
    memory_flat && disk_flat
}

async fn on_sled(knobs: &Knobs, model: &str) -> bool {
    let data = tempfile::tempdir().expect("a data directory");
    let dir: PathBuf = data.path().join("runs");
    let dir_text = dir.to_str().expect("a UTF-8 path").to_owned();
    let (mut server, base) = serve(model, knobs, &[("LEASEHOLD_DATA_DIR", &dir_text)]).await;
    let samples = soak(knobs, &server, &base, async || size_of(&dir)).await;
    let _ = server.kill().await;
    report("sled", knobs, &samples)
}

async fn on_postgres(knobs: &Knobs, model: &str) -> Option<bool> {
    if !cluster::server_installed() {
        println!("\nPostgreSQL: skipped, its server binaries (initdb, pg_ctl) are not installed");
        return None;
    }
    let (_cluster, url) = cluster::database().await;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect to the cluster");
    tokio::spawn(connection);
    let (mut server, base) = serve(model, knobs, &[("LEASEHOLD_STORE", &url)]).await;
    let samples = soak(knobs, &server, &base, async || {
        let row = client
            .query_one("SELECT pg_database_size(current_database())", &[])
            .await
            .expect("the database's size");
        u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)
    })
    .await;
    let _ = server.kill().await;
    Some(report("PostgreSQL", knobs, &samples))
}

fn main() {
    let knobs = knobs();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let flat = runtime.block_on(async {
        let model = model().await;
        let mut flat = true;
        if knobs.store != "pg" {
            flat &= on_sled(&knobs, &model).await;
        }
        if knobs.store != "sled" {
            flat &= on_postgres(&knobs, &model).await.unwrap_or(true);
        }
        flat
    });
    println!();
    println!(
        "soak verdict: {}",
        if flat {
            "memory and disk flat once retention holds"
        } else {
            "something grew: see the verdict lines above"
        }
    );
}
