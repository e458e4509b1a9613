//! Snapshot write rate of the sled store, against raw sled measured in the
//! same run.
//!
//! ```sh
//! cargo bench -p leasehold --bench store            # about a minute and a half once built
//! cargo bench -p leasehold --bench store -- quick   # one round, shorter windows
//! ```
//!
//! Each of 1, 8 and 64 concurrent runs is a task writing the latest
//! snapshot of its loop (a ~1 KiB JSON state, serialized by the store)
//! through `SnapshotStore::save_snapshot`, in each durability mode, on a 2-worker
//! runtime. The baselines write the same encoded bytes (a fresh value each
//! time) with raw sled: plain `insert` from as many tasks on the same
//! runtime (durable only when sled's background flusher gets to it), and
//! `insert` + `flush()` per write from as many threads (what durability per
//! write costs without a group commit). Every rate includes a final flush,
//! so every writer has done the same work when its clock stops.
//!
//! Targets: `async` ≥ 0.8× raw `insert`; `sync` ≥ 3× flush-per-write at 64
//! runs. Every figure is the median of the rounds; every measurement runs
//! in a process of its own, on a fresh database. A measurement that stalls
//! (sled 0.34.7 can deadlock under a flood of overwrites) is killed after
//! 30 s and run again, and the output says so.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{ChangeSource, RunStore, SnapshotStore};
use leasehold::{
    ClaimOutcome, RunRecord, RunStatus, Snapshot,
    store::{Durability, SledConfig, SledStore},
};
use serde_json::{Value, json};

const CONCURRENCY: [usize; 3] = [1, 8, 64];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writer {
    RawInsert,
    FlushEach,
    Store(Durability),
}

impl Writer {
    const ALL: [Self; 5] = [
        Self::RawInsert,
        Self::FlushEach,
        Self::Store(Durability::Sync),
        Self::Store(Durability::Async),
        Self::Store(Durability::Exit),
    ];

    fn name(self) -> String {
        match self {
            Self::RawInsert => "raw sled insert".to_owned(),
            Self::FlushEach => "raw insert + flush() each".to_owned(),
            Self::Store(mode) => format!("SledStore {mode}"),
        }
    }
}

/// A loop's state of about 1 KiB once serialized.
fn state() -> Value {
    let transcript: Vec<Value> = (0..6)
        .map(|i| {
            json!({
                "role": if i % 2 == 0 { "assistant" } else { "tool" },
                "content": format!("step {i}: searched the archive for lease renewals and found {i} matching records"),
            })
        })
        .collect();
    json!({
        "transcript": transcript,
        "budget": {"limit": 24, "used": 7, "extensions": 1},
        "nudges": ["check the evidence before renewing"],
        "pending_calls": [{"tool": "search", "arguments": {"query": "fencing tokens", "limit": 10}}],
    })
}

fn snapshot(run_id: &str, step: u32, state: &Value) -> Snapshot {
    Snapshot {
        run_id: run_id.to_owned(),
        path: "run".to_owned(),
        step,
        status: RunStatus::Running,
        state: state.clone(),
        seq: 0,
        base: None,
    }
}

fn run_record(run_id: &str) -> RunRecord {
    RunRecord {
        trace_parent: None,
        tenant: None,
        run_id: run_id.to_owned(),
        flow: json!({"name": "bench", "max_steps": 24}),
        status: RunStatus::Running,
        owner_id: None,
        fence: 0,
        lease_expires_at_ms: 0,
        reason: None,
        answer: None,
        pause: None,
        created_at_ms: 0,
        updated_at_ms: 0,
        fork: None,
    }
}

/// Writes per second of `writer` with `runs` concurrent writers for
/// `window`, on a fresh database under `dir`.
async fn measure(
    writer: Writer,
    runs: usize,
    window: Duration,
    dir: &Path,
    bytes: &Arc<Vec<u8>>,
) -> f64 {
    match writer {
        Writer::RawInsert => {
            let db = sled::open(dir).expect("open sled");
            let tree = db.open_tree("snapshots").expect("open tree");
            raw_insert(&tree, runs, window, bytes).await
        }
        Writer::FlushEach => {
            let db = sled::open(dir).expect("open sled");
            let tree = db.open_tree("snapshots").expect("open tree");
            let bytes = Arc::clone(bytes);
            tokio::task::spawn_blocking(move || flush_each(&tree, runs, window, &bytes))
                .await
                .expect("raw writers")
        }
        Writer::Store(durability) => {
            let store = SledStore::open(SledConfig::new(dir).with_durability(durability))
                .expect("open store");
            through_store(&store, runs, window).await
        }
    }
}

/// Plain inserts from `runs` tasks on the runtime, as the store's writers
/// run: an insert never blocks, and this is its best case.
async fn raw_insert(tree: &sled::Tree, runs: usize, window: Duration, bytes: &Arc<Vec<u8>>) -> f64 {
    let start = Instant::now();
    let deadline = start + window;
    let writers: Vec<_> = (0..runs)
        .map(|run| {
            let (tree, bytes) = (tree.clone(), Arc::clone(bytes));
            tokio::spawn(async move {
                let key = format!("run-{run}/run");
                let mut value = bytes.to_vec();
                let mut writes = 0_u64;
                while Instant::now() < deadline {
                    // A new value each time, as a new step's snapshot is:
                    // sled skips an insert of the value already there.
                    value[1..9].copy_from_slice(&writes.to_be_bytes());
                    tree.insert(key.as_bytes(), value.as_slice())
                        .expect("insert");
                    writes += 1;
                }
                writes
            })
        })
        .collect();
    let mut total = 0;
    for writer in writers {
        total += writer.await.expect("writer");
    }
    let flushing = tree.clone();
    tokio::task::spawn_blocking(move || flushing.flush().expect("final flush"))
        .await
        .expect("final flush");
    rate(total, start.elapsed())
}

/// `insert` + `flush()` per write from `runs` threads: a flush blocks, so
/// each writer gets a thread of its own, and concurrent flushes share
/// sled's writes (as tasks on two runtime threads they would flush two at a
/// time, a weaker baseline).
fn flush_each(tree: &sled::Tree, runs: usize, window: Duration, bytes: &[u8]) -> f64 {
    let start = Instant::now();
    let deadline = start + window;
    let total: u64 = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..runs)
            .map(|run| {
                scope.spawn(move || {
                    let key = format!("run-{run}/run");
                    let mut value = bytes.to_vec();
                    let mut writes = 0_u64;
                    while Instant::now() < deadline {
                        value[1..9].copy_from_slice(&writes.to_be_bytes());
                        tree.insert(key.as_bytes(), value.as_slice())
                            .expect("insert");
                        tree.flush().expect("flush");
                        writes += 1;
                    }
                    writes
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().expect("writer")).sum()
    });
    rate(total, start.elapsed())
}

async fn through_store(store: &SledStore, runs: usize, window: Duration) -> f64 {
    let state = Arc::new(state());
    let mut fences = Vec::with_capacity(runs);
    for run in 0..runs {
        let run_id = format!("run-{run}");
        store.create_run(run_record(&run_id)).await.expect("create");
        match store
            .claim_run(&run_id, "bench", 0, u64::MAX / 2)
            .await
            .expect("claim")
        {
            ClaimOutcome::Claimed(record) => fences.push((run_id, record.fence)),
            other => panic!("claim refused: {other:?}"),
        }
    }
    store.flush().await.expect("flush");

    let start = Instant::now();
    let deadline = start + window;
    let writers: Vec<_> = fences
        .into_iter()
        .map(|(run_id, fence)| {
            let (store, state) = (store.clone(), Arc::clone(&state));
            tokio::spawn(async move {
                let mut writes = 0_u32;
                while Instant::now() < deadline {
                    let written = store
                        .save_snapshot(snapshot(&run_id, writes, &state), fence)
                        .await
                        .expect("save");
                    assert!(written.is_applied());
                    writes += 1;
                }
                u64::from(writes)
            })
        })
        .collect();
    let mut total = 0;
    for writer in writers {
        total += writer.await.expect("writer");
    }
    store.flush().await.expect("final flush");
    rate(total, start.elapsed())
}

#[allow(clippy::cast_precision_loss)] // a rate: precision far beyond need
fn rate(writes: u64, elapsed: Duration) -> f64 {
    writes as f64 / elapsed.as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    format!("{cpus} cpus, {model}, load average {load}")
}

/// How long a measurement may overrun its window before it counts as
/// stalled.
const STALL: Duration = Duration::from_secs(30);

/// How many times a stalled measurement is tried again.
const RETRIES: usize = 2;

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "MISS" }
}

fn encoded_snapshot() -> Arc<Vec<u8>> {
    let mut encoded = vec![1_u8];
    serde_json::to_writer(&mut encoded, &snapshot("run-0", 0, &state())).expect("encode");
    Arc::new(encoded)
}

/// The child's part: one measurement, its rate printed on stdout.
fn measure_one(writer: Writer, runs: usize, window: Duration) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let rate = runtime.block_on(measure(
        writer,
        runs,
        window,
        dir.path(),
        &encoded_snapshot(),
    ));
    println!("rate {rate}");
}

/// Runs one measurement in a process of its own, so that measurements do
/// not share sled's process-wide state (its IO thread pool, its concurrency
/// lock), and so that a measurement in which sled deadlocks can be killed
/// and tried again: sled 0.34.7 can deadlock under a flood of overwrites
/// (see `docs/benchmarks.md`).
fn measure_in_child(
    writer: Writer,
    runs: usize,
    window: Duration,
    stalls: &mut Vec<String>,
) -> f64 {
    let index = Writer::ALL.iter().position(|w| *w == writer).unwrap_or(0);
    for _attempt in 0..=RETRIES {
        let mut child =
            std::process::Command::new(std::env::current_exe().expect("this benchmark"))
                .args([
                    "measure",
                    &index.to_string(),
                    &runs.to_string(),
                    &window.as_millis().to_string(),
                ])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("start a measurement");
        let started = Instant::now();
        loop {
            match child.try_wait().expect("poll the measurement") {
                Some(_) => break,
                None if started.elapsed() > window + STALL => {
                    let _ = child.kill();
                    let _ = child.wait();
                    stalls.push(format!("{} at {runs} runs", writer.name()));
                    break;
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        let mut out = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
        }
        if let Some(rate) = out.lines().find_map(|l| l.strip_prefix("rate ")) {
            return rate.trim().parse().expect("a rate");
        }
    }
    panic!(
        "{} at {runs} runs stalled {} times",
        writer.name(),
        RETRIES + 1
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "measure") {
        let number = |i: usize| {
            args.get(at + i)
                .and_then(|a| a.parse::<usize>().ok())
                .expect("measure WRITER RUNS MILLIS")
        };
        let writer = Writer::ALL[number(1)];
        let window = Duration::from_millis(u64::try_from(number(3)).expect("millis"));
        measure_one(writer, number(2), window);
        return;
    }
    let quick = args.iter().any(|a| a == "quick");
    let (rounds, window) = if quick {
        (1, Duration::from_millis(500))
    } else {
        (5, Duration::from_millis(1_000))
    };
    println!("machine: {}", machine());
    println!(
        "snapshot value: {} bytes encoded; {rounds} rounds of {} ms per measurement, median shown",
        encoded_snapshot().len(),
        window.as_millis()
    );

    let mut stalls = Vec::new();
    let mut results = Vec::new();
    for runs in CONCURRENCY {
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); Writer::ALL.len()];
        for _ in 0..rounds {
            // Interleaved, so that a busy moment on the machine spreads
            // over every writer instead of landing on one.
            for (i, writer) in Writer::ALL.into_iter().enumerate() {
                samples[i].push(measure_in_child(writer, runs, window, &mut stalls));
            }
        }
        let medians: Vec<f64> = samples.into_iter().map(median).collect();
        results.push((runs, medians));
    }

    println!();
    println!("| runs | writer | writes/s |");
    println!("|---:|---|---:|");
    for (runs, medians) in &results {
        for (writer, rate) in Writer::ALL.iter().zip(medians) {
            println!("| {runs} | {} | {rate:.0} |", writer.name());
        }
    }
    println!();
    println!(
        "| runs | async / raw insert | target | | sync / flush each | target | | exit / raw insert |"
    );
    println!("|---:|---:|---|---|---:|---|---|---:|");
    for (runs, m) in &results {
        let (raw, flush_each, sync, asynchronous, exit) = (m[0], m[1], m[2], m[3], m[4]);
        let async_ratio = asynchronous / raw;
        let sync_ratio = sync / flush_each;
        let sync_target = if *runs == 64 {
            format!("≥ 3× | {}", verdict(sync_ratio >= 3.0))
        } else {
            "— | ".to_owned()
        };
        println!(
            "| {runs} | {async_ratio:.2}× | ≥ 0.8× | {} | {sync_ratio:.2}× | {sync_target} | {:.2}× |",
            verdict(async_ratio >= 0.8),
            exit / raw
        );
    }
    println!();
    if stalls.is_empty() {
        println!(
            "stalled measurements (killed after {} s and run again): none",
            STALL.as_secs()
        );
    } else {
        println!(
            "stalled measurements (sled deadlocked; killed after {} s and run again): {}",
            STALL.as_secs(),
            stalls.join(", ")
        );
    }
    println!("machine after: {}", machine());
}
