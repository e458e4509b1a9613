//! The burst benchmark: 100 000 runs posted at once to one `leasehold
//! serve`. Does every run complete, do the admitted runs stay on time, and
//! does the server's memory follow its admitted limit rather than the
//! burst?
//!
//! ```sh
//! cargo bench -p leasehold-cli --bench burst                            # 100 000 runs on sled
//! cargo bench -p leasehold-cli --bench burst -- --runs 20000 --store both
//! cargo bench --profile dev -p leasehold-cli --bench burst -- --runs 2000   # debug build
//! cargo bench -p leasehold-cli --bench burst -- --set server.max_live_runs=128
//! cargo bench -p leasehold-cli --bench burst -- --scrape   # GET /metrics every second too
//! ```
//!
//! It starts a real `leasehold serve` on sled (a temporary data directory;
//! `--store pg` or `both` adds a throwaway PostgreSQL cluster, see
//! `tests/support/postgres.rs`) with `server.max_queued_runs` raised to
//! hold the whole burst, a short `executor.retention` (finished runs are
//! purged) and the defaults otherwise (`server.max_live_runs` 64,
//! `executor.lag_target` 100 ms). The model is an OpenAI-compatible
//! endpoint served here on loopback that streams each answer as a few
//! server-sent chunks (`--chunks`, 5, `--chunk-ms`, 50 ms apart): a run
//! lasts about a quarter of a second, long enough for its lease timers to
//! matter and for 64 live runs to be fewer than the burst's posts, so that
//! the burst queues.
//!
//! The runs are posted as fast as the server takes them, `--concurrency`
//! posts in flight; a 429 is waited out after its `Retry-After` and posted
//! again, and counted. Every second it samples the server's resident set
//! (`VmRSS`), `GET /executor` (live runs, admitted limit, lag, queue: a
//! run taken that is neither queued nor live has ended) and `GET
//! /runs?status=…&limit=1` (a run failed, cancelled, paused or orphaned
//! ends the benchmark at once); once nothing is queued or live it reads
//! `GET /metrics` (`leasehold_events_total{kind="run_completed"}`) and
//! ends when every run has completed, failing loudly if one did not or
//! nothing ended for `--stall`. `GET /metrics` is not scraped during the
//! burst unless `--scrape` asks (it once read every run on sled to count
//! them by status; each store now keeps its counts as runs change, see
//! the `scrape` bench of `leasehold-server`).
//!
//! The verdicts:
//! - every run completes;
//! - the lag the executor reports, sampled once a second while runs are
//!   live, has its 99th percentile within `executor.lag_target`;
//! - memory follows the admitted limit, not the burst: the server's peak
//!   resident set (`VmHWM`) is at most its resident set before the burst plus
//!   `sled.cache_capacity` (64 MiB, the sled page cache every queued run
//!   passes through) plus 1 MiB for each run of the highest admitted
//!   limit — far below what the burst would cost held in memory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::process::Child;
use tokio::time::Instant;

#[path = "../../runtime/tests/support/postgres.rs"]
mod cluster;
mod served;

use served::{hwm, rss, size_of};

/// The sled page cache's default bound (`sled.cache_capacity`).
const SLED_CACHE: u64 = 64 << 20;
/// What one admitted run may cost in memory for the verdict.
const PER_ADMITTED_RUN: u64 = 1 << 20;

/// What the run is asked for.
struct Knobs {
    /// Runs posted.
    runs: u64,
    /// Posts in flight at once.
    concurrency: usize,
    /// Content chunks of each streamed answer.
    chunks: u32,
    /// The pause before each content chunk.
    chunk: Duration,
    /// `executor.retention`.
    retention: String,
    /// How long without a run completing before giving up.
    stall: Duration,
    /// `sled`, `pg` or `both`.
    store: String,
    /// `--set KEY=VALUE` given to `leasehold` as they are.
    set: Vec<String>,
    /// Scrape `GET /metrics` every sample, not only at the end.
    scrape: bool,
}

fn knobs() -> Knobs {
    let mut knobs = Knobs {
        runs: 100_000,
        concurrency: 64,
        chunks: 5,
        chunk: Duration::from_millis(50),
        retention: "5s".to_owned(),
        stall: Duration::from_secs(120),
        store: "sled".to_owned(),
        set: Vec::new(),
        scrape: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        let bad = |what: &str| -> ! {
            eprintln!("burst: {} expects {what}, got {value:?}", args[i]);
            std::process::exit(2)
        };
        match args[i].as_str() {
            "--runs" => knobs.runs = value.parse().unwrap_or_else(|_| bad("a number of runs")),
            "--concurrency" => {
                knobs.concurrency = value
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .unwrap_or_else(|| bad("a number of posts from 1"));
            }
            "--chunks" => knobs.chunks = value.parse().unwrap_or_else(|_| bad("a number")),
            "--chunk-ms" => {
                knobs.chunk =
                    Duration::from_millis(value.parse().unwrap_or_else(|_| bad("milliseconds")));
            }
            "--retention" => knobs.retention = value,
            "--stall" => {
                knobs.stall =
                    humantime::parse_duration(&value).unwrap_or_else(|_| bad("a duration"));
            }
            "--store" => knobs.store = value,
            "--set" => knobs.set.extend(["--set".to_owned(), value]),
            "--scrape" => {
                knobs.scrape = true;
                i += 1;
                continue;
            }
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

/// The model: every call answered by a short stream of server-sent
/// events (`chunks` pieces `chunk` apart), whatever the request asked.
async fn model(chunks: u32, chunk: Duration) -> String {
    let complete = move |Json(request): Json<Value>| async move {
        let piece = |delta: Value, finish: Option<&str>| {
            let chunk = json!({
                "id": "chatcmpl-burst", "object": "chat.completion.chunk", "model": "burst",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            });
            format!("data: {chunk}\n\n")
        };
        let mut frames = vec![(
            Duration::ZERO,
            piece(json!({"role": "assistant", "content": ""}), None),
        )];
        for _ in 0..chunks {
            frames.push((chunk, piece(json!({"content": "done "}), None)));
        }
        frames.push((Duration::ZERO, piece(json!({}), Some("stop"))));
        if request["stream_options"]["include_usage"] == json!(true) {
            let usage = json!({
                "id": "chatcmpl-burst", "object": "chat.completion.chunk", "model": "burst",
                "choices": [],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            });
            frames.push((Duration::ZERO, format!("data: {usage}\n\n")));
        }
        frames.push((Duration::ZERO, "data: [DONE]\n\n".to_owned()));
        let body = futures_util::stream::unfold(frames.into_iter(), |mut frames| async move {
            let (pause, frame) = frames.next()?;
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            Some((Ok::<_, std::convert::Infallible>(frame), frames))
        });
        (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from_stream(body),
        )
            .into_response()
    };
    let app = Router::new().route("/v1/chat/completions", post(complete));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the model");
    let addr = listener.local_addr().expect("the model's address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

/// `leasehold serve` on the store `env` names, its queue bound raised to
/// hold the whole burst; its base URL.
async fn serve(model: &str, knobs: &Knobs, env: &[(&str, &str)]) -> (Child, String) {
    let queued = (knobs.runs + 1024).to_string();
    let mut env = env.to_vec();
    env.push(("LEASEHOLD_EXECUTOR_RETENTION", &knobs.retention));
    env.push(("LEASEHOLD_SERVER_MAX_QUEUED_RUNS", &queued));
    served::serve(model, "burst", &knobs.set, &env).await
}

/// The posts' tallies, shared with the posting tasks.
#[derive(Default)]
struct Posts {
    /// Runs the server took (201).
    taken: AtomicU64,
    /// Of those, answered `queued`.
    queued: AtomicU64,
    /// 429s, each waited out and posted again.
    refused: AtomicU64,
    /// Other answers or errors, each posted again after a second.
    errors: AtomicU64,
    /// The slowest post that was taken, in microseconds.
    slowest_us: AtomicU64,
}

/// Posts `knobs.runs` runs, `knobs.concurrency` at a time.
fn post_all(knobs: &Knobs, base: &str, posts: Arc<Posts>) -> tokio::task::JoinHandle<()> {
    let runs = knobs.runs;
    let http = reqwest::Client::new();
    let url = format!("{base}/runs");
    let gate = Arc::new(tokio::sync::Semaphore::new(knobs.concurrency));
    tokio::spawn(async move {
        let flow = json!({"name": "burst", "task": "say done", "max_steps": 2});
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..runs {
            let permit = gate.clone().acquire_owned().await.expect("open");
            let (http, url, flow, posts) = (http.clone(), url.clone(), flow.clone(), posts.clone());
            tasks.spawn(async move {
                let _permit = permit;
                loop {
                    let sent = Instant::now();
                    match http.post(&url).json(&flow).send().await {
                        Ok(answer) if answer.status().is_success() => {
                            let took = u64::try_from(sent.elapsed().as_micros()).unwrap_or(0);
                            posts.slowest_us.fetch_max(took, Ordering::Relaxed);
                            let body: Value = answer.json().await.unwrap_or_default();
                            if body["status"] == "queued" {
                                posts.queued.fetch_add(1, Ordering::Relaxed);
                            }
                            posts.taken.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                        Ok(answer) if answer.status().as_u16() == 429 => {
                            posts.refused.fetch_add(1, Ordering::Relaxed);
                            let wait = answer
                                .headers()
                                .get(header::RETRY_AFTER)
                                .and_then(|v| v.to_str().ok())
                                .and_then(|v| v.trim().parse::<u64>().ok())
                                .unwrap_or(1);
                            tokio::time::sleep(Duration::from_secs(wait)).await;
                        }
                        Ok(answer) => {
                            posts.errors.fetch_add(1, Ordering::Relaxed);
                            let status = answer.status();
                            let text = answer.text().await.unwrap_or_default();
                            eprintln!("burst: a post answered {status}: {text}");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                        Err(error) => {
                            posts.errors.fetch_add(1, Ordering::Relaxed);
                            eprintln!("burst: a post failed: {error}");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
            });
            // Reap the finished ones as we go: the set stays small.
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
    })
}

/// The whole-number `name{labels} value` lines of a `/metrics` text (the
/// counters and counts read here), by series.
fn series(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// One sample.
#[derive(Clone, Debug, Default)]
struct Sample {
    at: f64,
    taken: u64,
    completed: u64,
    live: u64,
    admitted: u64,
    queued: u64,
    lag_ms: Option<u64>,
    rss: u64,
    /// The store's files, when it is a directory here (sled).
    disk: Option<u64>,
    /// How long `GET /executor` and `GET /metrics` took, in ms.
    probe_ms: u64,
}

/// What the burst measured.
struct Outcome {
    samples: Vec<Sample>,
    start_rss: u64,
    /// `VmHWM` at the end: the peak resident set, between samples too.
    hwm: u64,
    wall: Duration,
    lag_target_ms: Option<u64>,
    max_live_runs: u64,
    completed: u64,
    /// Runs failed, cancelled or paused: (what, how many).
    bad: Vec<(String, u64)>,
    stalled: bool,
    refused: u64,
    errors: u64,
    queued_posts: u64,
    slowest_post_ms: u64,
}

async fn burst(
    knobs: &Knobs,
    server: &Child,
    base: &str,
    disk: impl Fn() -> Option<u64>,
) -> Outcome {
    let pid = server.id().expect("the server runs");
    let http = reqwest::Client::new();
    let executor = async || -> Value {
        let answer = http.get(format!("{base}/executor")).send().await;
        match answer {
            Ok(answer) => answer.json().await.unwrap_or_default(),
            Err(_) => Value::Null,
        }
    };
    let metrics = async || -> BTreeMap<String, u64> {
        let answer = http.get(format!("{base}/metrics")).send().await;
        match answer {
            Ok(answer) => series(&answer.text().await.unwrap_or_default()),
            Err(_) => BTreeMap::new(),
        }
    };
    // Settle a moment, then read where the server starts from.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start_rss = rss(pid);
    let first = executor().await;
    let lag_target_ms = first["lag_target_ms"].as_u64();
    let max_live_runs = first["max_live_runs"].as_u64().unwrap_or(0);

    let posts = Arc::new(Posts::default());
    let started = Instant::now();
    let posting = post_all(knobs, base, posts.clone());
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples: Vec<Sample> = Vec::new();
    let mut last_progress = (0_u64, Instant::now());
    // A run that is neither queued nor live any more has ended; whether
    // it completed is read from `/metrics` at the end, or every sample
    // with `--scrape`.
    let paused_or_failed = async || -> Vec<(String, u64)> {
        let mut found = Vec::new();
        for status in [
            "failed",
            "cancelled",
            "waiting_human",
            "reconciliation_required",
            "orphaned",
        ] {
            let page: Value = match http
                .get(format!("{base}/runs?status={status}&limit=1"))
                .send()
                .await
            {
                Ok(answer) => answer.json().await.unwrap_or_default(),
                Err(_) => Value::Null,
            };
            if page["runs"].as_array().is_some_and(|runs| !runs.is_empty()) {
                found.push((format!("runs {status} (GET /runs)"), 1));
            }
        }
        found
    };
    let (completed, bad, stalled) = loop {
        ticks.tick().await;
        let probed = Instant::now();
        let state = executor().await;
        let taken = posts.taken.load(Ordering::Relaxed);
        let queued = state["queued_runs"].as_u64().unwrap_or(0);
        let live = state["live_runs"].as_u64().unwrap_or(0);
        let ended = taken.saturating_sub(queued + live);
        let drained = taken >= knobs.runs && queued == 0 && live == 0;
        let figures = if knobs.scrape || drained {
            metrics().await
        } else {
            BTreeMap::new()
        };
        let probe_ms = u64::try_from(probed.elapsed().as_millis()).unwrap_or(0);
        let count = |name: &str| figures.get(name).copied().unwrap_or(0);
        let completed = if figures.is_empty() {
            ended
        } else {
            count("leasehold_events_total{kind=\"run_completed\"}")
        };
        let sample = Sample {
            at: started.elapsed().as_secs_f64(),
            taken,
            completed,
            live: state["live_runs"].as_u64().unwrap_or(0),
            admitted: state["admitted_limit"].as_u64().unwrap_or(0),
            queued: state["queued_runs"].as_u64().unwrap_or(0),
            lag_ms: state["lag_ms"].as_u64(),
            rss: rss(pid),
            disk: disk(),
            probe_ms,
        };
        if samples.len().is_multiple_of(10) {
            eprintln!(
                "burst: {:.0} s: {} taken, {} completed, {} queued, {} live, RSS {} MiB",
                sample.at,
                sample.taken,
                sample.completed,
                sample.queued,
                sample.live,
                mib(sample.rss)
            );
        }
        samples.push(sample);
        let mut bad: Vec<(String, u64)> = [
            "leasehold_events_total{kind=\"run_failed\"}",
            "leasehold_events_total{kind=\"run_cancelled\"}",
            "leasehold_events_total{kind=\"paused\"}",
            "leasehold_events_total{kind=\"reconciliation_required\"}",
            "leasehold_runs{status=\"orphaned\"}",
            "leasehold_events_missed_total",
        ]
        .into_iter()
        .map(|name| (name.to_owned(), count(name)))
        .filter(|(_, n)| *n > 0)
        .collect();
        bad.extend(paused_or_failed().await);
        if completed > last_progress.0 {
            last_progress = (completed, Instant::now());
        }
        let stalled = last_progress.1.elapsed() >= knobs.stall;
        if (!figures.is_empty() && completed >= knobs.runs) || !bad.is_empty() || stalled {
            break (completed, bad, stalled);
        }
    };
    let wall = started.elapsed();
    posting.abort();
    Outcome {
        samples,
        start_rss,
        hwm: hwm(pid),
        wall,
        lag_target_ms,
        max_live_runs,
        completed,
        bad,
        stalled,
        refused: posts.refused.load(Ordering::Relaxed),
        errors: posts.errors.load(Ordering::Relaxed),
        queued_posts: posts.queued.load(Ordering::Relaxed),
        slowest_post_ms: posts.slowest_us.load(Ordering::Relaxed) / 1000,
    }
}

fn mib(bytes: u64) -> String {
    let tenths = bytes.saturating_mul(10) / (1 << 20);
    format!("{}.{}", tenths / 10, tenths % 10)
}

fn kib(bytes: u64) -> String {
    let tenths = bytes.saturating_mul(10) / 1024;
    format!("{}.{}", tenths / 10, tenths % 10)
}

/// The `p`th percentile of sorted `values`.
fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

fn report(store: &str, knobs: &Knobs, out: &Outcome) -> bool {
    let samples = &out.samples;
    println!();
    println!(
        "### {store}: {} runs posted at once, {} posts in flight, answers of {} chunks {} ms apart, retention {}{}{}",
        knobs.runs,
        knobs.concurrency,
        knobs.chunks,
        knobs.chunk.as_millis(),
        knobs.retention,
        knobs
            .set
            .chunks(2)
            .filter_map(|pair| pair.get(1))
            .map(|set| format!(", {set}"))
            .collect::<String>(),
        if knobs.scrape {
            ", GET /metrics every second"
        } else {
            ""
        }
    );
    println!();
    println!(
        "| t (s) | runs taken | ended (completed) | queued | live | admitted | lag (ms) | server RSS (MiB) | store on disk (MiB) | probe (ms) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // At most about 40 rows: every k-th sample, and the last.
    let every = samples.len().div_ceil(40).max(1);
    for (i, s) in samples.iter().enumerate() {
        if i % every == 0 || i + 1 == samples.len() {
            println!(
                "| {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.at,
                s.taken,
                s.completed,
                s.queued,
                s.live,
                s.admitted,
                s.lag_ms.map_or("-".to_owned(), |l| l.to_string()),
                mib(s.rss),
                s.disk.map_or("-".to_owned(), mib),
                s.probe_ms
            );
        }
    }
    let sampled_peak = samples.iter().map(|s| s.rss).max().unwrap_or(0);
    let peak_at = samples
        .iter()
        .find(|s| s.rss == sampled_peak)
        .map_or(0.0, |s| s.at);
    let peak = out.hwm.max(sampled_peak);
    let max_disk = samples.iter().filter_map(|s| s.disk).max();
    let max_admitted = samples.iter().map(|s| s.admitted).max().unwrap_or(0);
    let min_admitted = samples.iter().map(|s| s.admitted).min().unwrap_or(0);
    let max_queued = samples.iter().map(|s| s.queued).max().unwrap_or(0);
    let max_live = samples.iter().map(|s| s.live).max().unwrap_or(0);
    let max_probe = samples.iter().map(|s| s.probe_ms).max().unwrap_or(0);
    // The lag while runs were admitted (live).
    let mut lags: Vec<u64> = samples
        .iter()
        .filter(|s| s.live > 0)
        .filter_map(|s| s.lag_ms)
        .collect();
    lags.sort_unstable();
    let lag_p50 = percentile(&lags, 50);
    let lag_p99 = percentile(&lags, 99);
    let lag_max = lags.last().copied().unwrap_or(0);
    let over = lags
        .iter()
        .filter(|&&l| out.lag_target_ms.is_some_and(|t| l > t))
        .count();
    let growth = peak.saturating_sub(out.start_rss);
    let secs = out.wall.as_secs_f64();

    let all_completed = out.completed >= knobs.runs && out.bad.is_empty() && !out.stalled;
    let on_time = out.lag_target_ms.is_none_or(|t| lag_p99 <= t);
    let allowed = SLED_CACHE + max_admitted.max(out.max_live_runs) * PER_ADMITTED_RUN;
    let bounded = growth <= allowed;

    println!();
    println!("```text");
    println!(
        "runs {} completed {} in {:.1} s: {:.0} runs/s",
        knobs.runs,
        out.completed,
        secs,
        f64::from(u32::try_from(out.completed).unwrap_or(u32::MAX)) / secs.max(f64::EPSILON)
    );
    println!(
        "posts: {} answered queued, {} refused (429, retried after Retry-After), {} other errors (retried); slowest post taken {} ms",
        out.queued_posts, out.refused, out.errors, out.slowest_post_ms
    );
    println!(
        "executor: max_live_runs {}, admitted limit {min_admitted}..{max_admitted}, at most {max_live} live, queue at most {max_queued}; slowest probe (GET /executor{}) {max_probe} ms",
        out.max_live_runs,
        if knobs.scrape { " + GET /metrics" } else { "" }
    );
    println!(
        "lag (sampled each second while runs were live, {} samples): p50 {lag_p50} ms, p99 {lag_p99} ms, max {lag_max} ms, {over} over target {}",
        lags.len(),
        out.lag_target_ms
            .map_or("off".to_owned(), |t| format!("{t} ms"))
    );
    println!(
        "RSS: {} MiB at the start, peak (VmHWM) {} MiB, sampled peak {} MiB at {peak_at:.0} s; peak - start {} MiB: {} KiB per admitted run ({max_admitted}), {} KiB per posted run ({})",
        mib(out.start_rss),
        mib(peak),
        mib(sampled_peak),
        mib(growth),
        kib(growth / max_admitted.max(1)),
        kib(growth / knobs.runs.max(1)),
        knobs.runs
    );
    let end_rss = samples.last().map_or(0, |s| s.rss);
    let at_max_queue = samples
        .iter()
        .find(|s| s.queued == max_queued)
        .map_or(0, |s| s.rss);
    println!(
        "RSS when the queue was longest ({max_queued}): {} MiB; at the end: {} MiB",
        mib(at_max_queue),
        mib(end_rss)
    );
    if let Some(max_disk) = max_disk {
        println!("store on disk: at most {} MiB", mib(max_disk));
    }
    if max_queued < knobs.runs / 10 {
        println!(
            "note: the queue never held a tenth of the burst: the server took the posts no faster than it ran them"
        );
    }
    if !out.bad.is_empty() || out.stalled {
        println!(
            "NOT ALL RUNS COMPLETED: {} of {} completed; {}{}",
            out.completed,
            knobs.runs,
            out.bad
                .iter()
                .map(|(what, n)| format!("{what} = {n}; "))
                .collect::<String>(),
            if out.stalled {
                format!(
                    "no run completed for {}",
                    humantime::format_duration(knobs.stall)
                )
            } else {
                String::new()
            }
        );
    }
    println!(
        "verdict ({store}): every run completes: {}; lag p99 {lag_p99} ms within the target {}: {}; memory follows the admitted limit (peak - start {} MiB <= sled cache 64 MiB + 1 MiB x {} admitted = {} MiB): {}",
        verdict(all_completed),
        out.lag_target_ms
            .map_or("off".to_owned(), |t| format!("{t} ms")),
        verdict(on_time),
        mib(growth),
        max_admitted.max(out.max_live_runs),
        mib(allowed),
        verdict(bounded)
    );
    println!("```");
    all_completed && on_time && bounded
}

async fn on_sled(knobs: &Knobs, model: &str) -> bool {
    let data = tempfile::tempdir().expect("a data directory");
    let dir: PathBuf = data.path().join("runs");
    let dir_text = dir.to_str().expect("a UTF-8 path").to_owned();
    let (mut server, base) = serve(model, knobs, &[("LEASEHOLD_DATA_DIR", &dir_text)]).await;
    let outcome = burst(knobs, &server, &base, || Some(size_of(&dir))).await;
    let _ = server.kill().await;
    report("sled", knobs, &outcome)
}

async fn on_postgres(knobs: &Knobs, model: &str) -> Option<bool> {
    if !cluster::server_installed() {
        println!("\nPostgreSQL: skipped, its server binaries (initdb, pg_ctl) are not installed");
        return None;
    }
    let (_cluster, url) = cluster::database().await;
    let (mut server, base) = serve(model, knobs, &[("LEASEHOLD_STORE", &url)]).await;
    let outcome = burst(knobs, &server, &base, || None).await;
    let _ = server.kill().await;
    Some(report("PostgreSQL", knobs, &outcome))
}

fn main() {
    let knobs = knobs();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let passed = runtime.block_on(async {
        let model = model(knobs.chunks, knobs.chunk).await;
        let mut passed = true;
        if knobs.store != "pg" {
            passed &= on_sled(&knobs, &model).await;
        }
        if knobs.store != "sled" {
            passed &= on_postgres(&knobs, &model).await.unwrap_or(true);
        }
        passed
    });
    println!();
    println!(
        "burst verdict: {}",
        if passed {
            "PASS: every run completed, on time, in memory that follows the admitted limit"
        } else {
            "MISS: see the verdict lines above"
        }
    );
    if !passed {
        std::process::exit(1);
    }
}
