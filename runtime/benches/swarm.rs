//! The swarm benchmark: many concurrent runs of a root and three workers on
//! the in-process fakes, against the bare work those runs must do.
//!
//! ```sh
//! cargo bench -p leasehold --bench swarm                  # 10 000 runs
//! cargo bench -p leasehold --bench swarm -- --runs 1000   # quicker
//! cargo bench -p leasehold --bench swarm -- --part pg      # PostgreSQL writes only
//! cargo bench -p leasehold --bench swarm -- --max-renewals 100
//! cargo bench -p leasehold --bench swarm -- --lease-ms 60000   # no expiry
//! cargo bench -p leasehold --bench swarm -- --load-bound 0      # no load rule
//! ```
//!
//! Each run's root streams a turn that spawns three workers, each worker
//! streams an answer, and the root streams its final answer: five streamed
//! model calls of [`CHUNKS`] chunks [`CHUNK_INTERVAL`] apart, each chunk
//! reported as evidence, each call under a model-stream lease of [`LEASE`]
//! that expires once (a free renewal). Every figure comes from a child
//! process of its own on a 2-worker multi-thread runtime:
//!
//! - *leasehold*: every run started at once through [`Engine::start`] and
//!   awaited; the event sink stamps each first-period `wait` against the
//!   `model_call_started` of its loop to measure lease lateness.
//! - *bare*: the same streams read (the same chunks, the same intervals), with
//!   the same tasks for the three workers, and the same snapshots (recorded
//!   from one leasehold run of the same flow) written to the same kind of
//!   store, with the run's record created first so the fence check passes; no
//!   actors, leases or events.
//! - *timers*: as many `sleep_until`s as the leasehold child saw expiries,
//!   started at once, each measuring its own lateness.
//!
//! Memory per run is the peak resident set (`VmHWM`) less the resident set
//! before the runs, divided by the runs; CPU per run is the CPU time of all
//! the process's threads divided by the runs.
//!
//! Every run must complete: a run that pauses (a model call stopped by the
//! renewal cap on each of its attempts waits for a person) fails the
//! benchmark with the count of runs that did and the first one's reason,
//! instead of waiting for ever. `--max-renewals` sets the leases' cap
//! (default: the engine's, 10).
//!
//! The engine measures its own lag with the probe `leasehold run` and
//! `leasehold serve` start ([`LoadGauge::probe`]), so that a lease expiring
//! while the runtime is late renews by `load` (counted as `load_renewals`),
//! as in the binary; `--load-bound MS` sets the bound (`0`: off).
//!
//! Built with the `cli` feature (the default), both children allocate with
//! mimalloc, the `leasehold` binary's allocator; with
//! `--no-default-features --features store`, with the system's.
//!
//! `--part pg` (or the default `--part all`, after the swarm) measures the
//! PostgreSQL store's snapshot write rate against raw `INSERT`s of the same
//! rows (`swarm/pg_writes.rs`), on a throwaway cluster; skipped, saying so,
//! without the server binaries or the `postgres` feature.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::store::{Durability, SledConfig, SledStore};
use leasehold::{
    BoxFuture, ChatRole, DEFAULT_PROBE_INTERVAL, DecidedBy, Engine, EngineConfig, EventKind,
    EventSink, Evidence, Fenced, Flow, LayeredStore, LeaseKind, LoadGauge, MemoryStore,
    ModelClient, ModelError, ModelReply, ModelRequest, RunRecord, RunStatus, Snapshot,
    SnapshotStore, Store, StoreFuture,
};
use leasehold_actors::testing::Turn;
use tokio::time::Instant;

/// The `leasehold` binary's allocator, so that the figures are the binary's.
#[cfg(not(feature = "dhat-heap"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// With the `dhat-heap` feature, dhat's: every allocation is traced, for
/// `--heap FILE` (the child's heap profile at its peak).
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

#[cfg(feature = "postgres")]
#[path = "../tests/support/postgres.rs"]
mod cluster;
#[path = "../../actors/benches/support/machine.rs"]
mod machine;
#[cfg(feature = "postgres")]
#[path = "swarm/pg_writes.rs"]
mod pg_writes;
use machine::{cpu_model, cpus, load_average, nanos, process_cpu_ns};

/// Chunks in each streamed model call.
const CHUNKS: u32 = 25;
/// The time between two chunks.
const CHUNK_INTERVAL: Duration = Duration::from_millis(20);
/// The model-stream lease: a 500 ms stream under it expires once (on an
/// idle machine). `--lease-ms` changes it.
const LEASE: Duration = Duration::from_millis(300);
/// Workers each root spawns.
const WORKERS: usize = 3;
/// Target: leasehold's CPU per run at most this many times the bare work's,
/// on the memory store at 10 000 runs.
const CPU_TARGET: f64 = 5.0;

/// The CPU target on sled: at most this many times the bare work's.
const CPU_TARGET_SLED: f64 = 7.0;

/// The memory target: at most this many bytes per run, on either store.
const MEMORY_TARGET: u64 = 96 * 1024;

/// The lateness target: lease expiries at most this many times as late at
/// p99 as bare timers under the same load, at 2 000 runs (`--runs 2000`).
const LATENESS_TARGET: f64 = 10.0;

/// Model calls a run makes when none is restarted: the root's two turns
/// and one per worker.
const CALLS_PER_RUN: usize = WORKERS + 2;

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "**MISS**" }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let runs: usize = value("--runs")
        .and_then(|r| r.parse().ok())
        .unwrap_or(10_000);
    let knobs = Knobs {
        max_renewals: value("--max-renewals")
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| EngineConfig::default().supervision.lease.max_renewals),
        lease: value("--lease-ms")
            .and_then(|ms| ms.parse().ok())
            .map_or(LEASE, Duration::from_millis),
        load_bound: value("--load-bound")
            .and_then(|ms| ms.parse().ok())
            .map_or(EngineConfig::default().load_bound, Duration::from_millis),
    };
    if let Some(which) = value("--child") {
        let store = value("--store").unwrap_or_else(|| "memory".to_owned());
        let timers = value("--timers").and_then(|t| t.parse().ok()).unwrap_or(0);
        let heap = value("--heap").map(PathBuf::from);
        child(&which, &store, runs, timers, knobs, heap);
        return;
    }
    let part = value("--part").unwrap_or_else(|| "all".to_owned());
    println!(
        "machine: {} cpus, {}, load average {}",
        cpus(),
        cpu_model(),
        load_average()
    );
    if part != "pg" {
        parent(runs, knobs);
    }
    if part != "swarm" {
        pg_parent(runs, knobs);
    }
    println!(
        "\nmachine after: {} cpus, load average {}",
        cpus(),
        load_average()
    );
}

// ---------------------------------------------------------------------------
// The parent: runs each child, prints the table.
// ---------------------------------------------------------------------------

fn parent(runs: usize, knobs: Knobs) {
    println!(
        "{runs} concurrent runs of a root and {WORKERS} workers; 5 streamed model calls per run, \
         {CHUNKS} chunks {} ms apart, under a {} ms model-stream lease (max_renewals {}); \
         2-worker runtime, each figure in a child process\n",
        CHUNK_INTERVAL.as_millis(),
        knobs.lease.as_millis(),
        knobs.max_renewals
    );
    let mut rows = Vec::new();
    for store in ["memory", "sled"] {
        let leasehold = run_child("leasehold", store, runs, 0, knobs);
        let bare = run_child("bare", store, runs, 0, knobs);
        let timers = run_child("timers", store, runs, leasehold.get("expiries"), knobs);
        println!("{store} store:");
        println!("  leasehold  {}", leasehold.line);
        println!("  bare       {}", bare.line);
        println!("  timers     {}", timers.line);
        rows.push((store, leasehold, bare, timers));
    }
    println!("\n| store | what | leasehold | bare | ratio | target | |");
    println!("|---|---|---:|---:|---:|---|---|");
    for (store, leasehold, bare, timers) in &rows {
        let per_run = |r: &Figures, key: &str| r.get(key) / u64::try_from(runs).unwrap_or(1).max(1);
        let (mem_l, mem_b) = (per_run(leasehold, "rss_delta"), per_run(bare, "rss_delta"));
        let (cpu_l, cpu_b) = (per_run(leasehold, "cpu_ns"), per_run(bare, "cpu_ns"));
        let cpu_ratio = ratio(cpu_l, cpu_b);
        let cpu_target = if *store == "sled" {
            CPU_TARGET_SLED
        } else {
            CPU_TARGET
        };
        let restarted = leasehold.get("restarted");
        println!(
            "| {store} | runs completed, model calls restarted | {runs}, {restarted} | {runs}, 0 | — | every run, none restarted | {} |",
            verdict(restarted == 0)
        );
        println!(
            "| {store} | memory per run (peak RSS delta / runs) | {mem_l} B | {mem_b} B | {:.2}× | ≤ {MEMORY_TARGET} B | {} |",
            ratio(mem_l, mem_b),
            verdict(mem_l <= MEMORY_TARGET)
        );
        println!(
            "| {store} | CPU per run | {} µs | {} µs | {cpu_ratio:.2}× | ≤ {cpu_target}× | {} |",
            cpu_l / 1000,
            cpu_b / 1000,
            verdict(cpu_ratio <= cpu_target)
        );
        let (p99_l, p99_t) = (leasehold.get("p99_ns"), timers.get("p99_ns"));
        let late_ratio = ratio(p99_l, p99_t);
        println!(
            "| {store} | lease expiry lateness p99 ({} expiries / {} timers) | {:.2} ms | {:.2} ms | {late_ratio:.2}× | ≤ {LATENESS_TARGET}× | {} |",
            leasehold.get("expiries"),
            timers.get("expiries"),
            to_f64(p99_l) / 1e6,
            to_f64(p99_t) / 1e6,
            verdict(late_ratio <= LATENESS_TARGET)
        );
    }
}

/// The PostgreSQL store's snapshot writes against raw `INSERT`s: the rows
/// of `runs` runs each way.
fn pg_parent(runs: usize, knobs: Knobs) {
    let pg = run_child("pg", "postgres", runs, 0, knobs);
    println!("\npostgres snapshot writes ({runs} runs' snapshots, all runs at once):");
    println!("  {}", pg.line);
    if pg.get("skipped") > 0 {
        return;
    }
    let rows = pg.get("rows");
    let rate = |ns: u64| to_f64(rows) / (to_f64(ns) / 1e9);
    let store = rate(pg.get("store_ns"));
    println!("\n| writer | rows/s | store ÷ raw | CPU per row |");
    println!("|---|---:|---:|---:|");
    for (name, key) in [
        ("`PostgresStore::save_snapshot`", "store"),
        ("raw `INSERT … ON CONFLICT`, text", "raw_text"),
        ("raw `INSERT … ON CONFLICT`, prepared", "raw_prepared"),
    ] {
        let writer = rate(pg.get(&format!("{key}_ns")));
        println!(
            "| {name} | {writer:.0} | {:.2}× | {} µs |",
            store / writer,
            pg.get(&format!("{key}_cpu_ns")) / rows.max(1) / 1000
        );
    }
}

/// What the command line may change of the leasehold runs' leases.
#[derive(Clone, Copy)]
struct Knobs {
    /// The leases' renewal cap.
    max_renewals: u32,
    /// The model-stream lease.
    lease: Duration,
    /// The load rule's bound (`executor.load_bound`); zero turns it off.
    load_bound: Duration,
}

/// A child's `key=value` figures, and its line as printed.
struct Figures {
    line: String,
    values: HashMap<String, u64>,
}

impl Figures {
    fn get(&self, key: &str) -> u64 {
        self.values.get(key).copied().unwrap_or(0)
    }
}

fn run_child(which: &str, store: &str, runs: usize, timers: u64, knobs: Knobs) -> Figures {
    let exe = std::env::current_exe().expect("the benchmark's own path");
    let output = Command::new(exe)
        .args(["--child", which, "--store", store])
        .args(["--runs", &runs.to_string(), "--timers", &timers.to_string()])
        .args(["--max-renewals", &knobs.max_renewals.to_string()])
        .args(["--lease-ms", &knobs.lease.as_millis().to_string()])
        .args(["--load-bound", &knobs.load_bound.as_millis().to_string()])
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child {which} on {store} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("figures "))
        .unwrap_or_else(|| panic!("child {which} printed no figures: {stdout}"))
        .to_owned();
    let values = line
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect();
    Figures { line, values }
}

fn ratio(a: u64, b: u64) -> f64 {
    to_f64(a) / to_f64(b.max(1))
}

// ---------------------------------------------------------------------------
// The children.
// ---------------------------------------------------------------------------

fn child(which: &str, store: &str, runs: usize, timers: u64, knobs: Knobs, heap: Option<PathBuf>) {
    // Every child runs as the `leasehold` binary does: transparent huge
    // pages off (`cli/src/main.rs`).
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temporary directory");
    let figures = runtime.block_on(async {
        match which {
            "leasehold" => swarm(open_store(store, dir.path().join("db")), runs, knobs, heap).await,
            "bare" => {
                // The pilot run records the snapshots a run writes, on a
                // store of its own; the bare runs then write the same ones.
                let pilot = recorded_snapshots().await;
                bare(open_store(store, dir.path().join("db")), runs, &pilot).await
            }
            "timers" => bare_timers(timers, knobs.lease).await,
            #[cfg(feature = "postgres")]
            "pg" => pg_writes::child(runs).await,
            #[cfg(not(feature = "postgres"))]
            "pg" => "skipped=1 (built without the `postgres` feature)".to_owned(),
            other => panic!("unknown child {other}"),
        }
    });
    println!("figures {figures}");
    drop(runtime);
}

fn open_store(kind: &str, path: PathBuf) -> Arc<dyn Store> {
    match kind {
        "memory" => Arc::new(MemoryStore::new()),
        "sled" => Arc::new(
            SledStore::open(SledConfig::new(path).with_durability(Durability::Async))
                .expect("open the sled store"),
        ),
        other => panic!("unknown store {other}"),
    }
}

fn flow() -> Flow {
    serde_json::from_value(serde_json::json!({
        "name": "swarm",
        "task": "Look at three things at once.",
        "system_prompt": "You coordinate.",
        "max_steps": 4,
        "workers": {"researcher": {"prompt": "You research one question.", "max_steps": 2}}
    }))
    .expect("valid flow")
}

fn config(knobs: Knobs) -> EngineConfig {
    let mut config = EngineConfig::default();
    config.supervision.lease.model_stream = knobs.lease;
    config.supervision.lease.max_renewals = knobs.max_renewals;
    config.load_bound = knobs.load_bound;
    config
}

async fn engine(store: Arc<dyn Store>, sink: Arc<dyn EventSink>, knobs: Knobs) -> Engine {
    Engine::builder()
        .config(config(knobs))
        .model(Arc::new(SwarmModel))
        .events(sink)
        .store(store)
        .load(LoadGauge::probe(DEFAULT_PROBE_INTERVAL))
        .build()
        .await
        .expect("engine builds")
}

/// The leasehold child: `runs` runs at once, awaited.
async fn swarm(store: Arc<dyn Store>, runs: usize, knobs: Knobs, heap: Option<PathBuf>) -> String {
    let sink = Arc::new(LatenessSink::default());
    let engine = engine(store, sink.clone(), knobs).await;
    let profile = heap_profile(heap);
    let (rss_before, cpu_before) = (rss_bytes(), process_cpu_ns());
    let mut handles = Vec::with_capacity(runs);
    for _ in 0..runs {
        handles.push(engine.start(flow()).await.expect("run starts"));
    }
    // A run that pauses for a person would wait for ever: it is counted,
    // and the benchmark fails saying how many and why.
    let mut unfinished = Vec::new();
    for handle in &mut handles {
        let state = handle.wait_until(|s| s.status.is_paused()).await;
        if state.status != RunStatus::Completed {
            unfinished.push(state);
        }
    }
    assert!(
        unfinished.is_empty(),
        "{} of {runs} runs did not complete; the first: {:?}",
        unfinished.len(),
        unfinished.first()
    );
    let cpu = process_cpu_ns().saturating_sub(cpu_before);
    let peak = peak_rss_bytes();
    // Written now: the profile's peak is the runs', not the shutdown's.
    write_heap_profile(profile);
    let lateness = sink.lateness();
    let workers = sink.workers.load(Ordering::Relaxed);
    let restarted = sink
        .calls
        .load(Ordering::Relaxed)
        .saturating_sub(u64::try_from(runs * CALLS_PER_RUN).unwrap_or(u64::MAX));
    assert_eq!(
        workers,
        u64::try_from(runs * WORKERS).unwrap_or(u64::MAX),
        "every run spawns {WORKERS} workers"
    );
    drop(handles);
    engine.shutdown().await;
    format!(
        "rss_delta={} cpu_ns={cpu} expiries={} waits={} load_renewals={} restarted={} p50_ns={} p99_ns={} max_ns={} workers={workers}",
        peak.saturating_sub(rss_before),
        lateness.len(),
        sink.waits.load(Ordering::Relaxed),
        sink.load_renewals.load(Ordering::Relaxed),
        restarted,
        percentile(&lateness, 50),
        percentile(&lateness, 99),
        lateness.last().copied().unwrap_or(0),
    )
}

/// With the `dhat-heap` feature and `--heap FILE`, dhat's heap profiler,
/// from the engine built to the runs ended: what every allocation site
/// held at the peak (`gb` in the file). Written when dropped.
#[cfg(feature = "dhat-heap")]
fn heap_profile(file: Option<PathBuf>) -> Option<dhat::Profiler> {
    file.map(|file| {
        dhat::Profiler::builder()
            .file_name(file)
            .trim_backtraces(Some(48))
            .build()
    })
}

/// Writes the heap profile (dhat writes it when its profiler is dropped).
#[cfg(feature = "dhat-heap")]
fn write_heap_profile(profile: Option<dhat::Profiler>) {
    drop(profile);
}

/// Without the `dhat-heap` feature there is no heap profile to write.
#[cfg(not(feature = "dhat-heap"))]
fn write_heap_profile(_: Option<()>) {}

/// Without the `dhat-heap` feature there is no heap profile to take.
#[cfg(not(feature = "dhat-heap"))]
fn heap_profile(file: Option<PathBuf>) -> Option<()> {
    assert!(
        file.is_none(),
        "--heap needs the benchmark built with `--features dhat-heap`"
    );
    None
}

/// The bare child: the same streams read and the same snapshots written.
async fn bare(store: Arc<dyn Store>, runs: usize, pilot: &Pilot) -> String {
    let (rss_before, cpu_before) = (rss_bytes(), process_cpu_ns());
    let mut tasks = Vec::with_capacity(runs);
    for n in 0..runs {
        let store = store.clone();
        let mut record = pilot.record.clone();
        record.run_id = format!("bare-{n:06}");
        let snapshots = pilot.snapshots.clone();
        store
            .create_run(record.clone())
            .await
            .expect("create the run");
        tasks.push(tokio::spawn(bare_run(store, record, snapshots)));
    }
    let mut written = 0;
    for task in tasks {
        written += task.await.expect("bare run");
    }
    let cpu = process_cpu_ns().saturating_sub(cpu_before);
    let peak = peak_rss_bytes();
    format!(
        "rss_delta={} cpu_ns={cpu} snapshots={written}",
        peak.saturating_sub(rss_before)
    )
}

/// One bare run: the root's stream, three workers' streams at once, the
/// root's last stream, each loop's snapshots written after its stream.
async fn bare_run(store: Arc<dyn Store>, record: RunRecord, snapshots: Arc<Vec<Snapshot>>) -> u64 {
    let write = |path_is_root: bool| {
        let store = store.clone();
        let record = record.clone();
        let snapshots = snapshots.clone();
        async move {
            let mut written = 0;
            for snapshot in snapshots
                .iter()
                .filter(|s| (s.path == "run") == path_is_root)
            {
                let mut snapshot = snapshot.clone();
                snapshot.run_id.clone_from(&record.run_id);
                let saved = store
                    .save_snapshot(snapshot, record.fence)
                    .await
                    .expect("save");
                assert!(saved.is_applied(), "the fence is the run's");
                written += 1;
            }
            written
        }
    };
    stream(None).await;
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| tokio::spawn(async { stream(None).await }))
        .collect();
    for worker in workers {
        worker.await.expect("worker");
    }
    let written = write(false).await;
    stream(None).await;
    written + write(true).await
}

/// The timer baseline: `count` timers of `lease`, started at once.
async fn bare_timers(count: u64, lease: Duration) -> String {
    let tasks: Vec<_> = (0..count)
        .map(|_| {
            tokio::spawn(async move {
                let due = Instant::now() + lease;
                tokio::time::sleep_until(due).await;
                nanos(Instant::now().saturating_duration_since(due))
            })
        })
        .collect();
    let mut lateness = Vec::with_capacity(tasks.len());
    for task in tasks {
        lateness.push(task.await.expect("timer"));
    }
    lateness.sort_unstable();
    format!(
        "expiries={} p50_ns={} p99_ns={} max_ns={}",
        lateness.len(),
        percentile(&lateness, 50),
        percentile(&lateness, 99),
        lateness.last().copied().unwrap_or(0)
    )
}

// ---------------------------------------------------------------------------
// The model, the event sink, the pilot's recording store.
// ---------------------------------------------------------------------------

/// Reads one stream: [`CHUNKS`] chunks [`CHUNK_INTERVAL`] apart, each one
/// evidence when a lease watches.
async fn stream(evidence: Option<&Evidence>) {
    for _ in 0..CHUNKS {
        tokio::time::sleep(CHUNK_INTERVAL).await;
        if let Some(evidence) = evidence {
            evidence.observe();
        }
    }
}

/// The root spawns three workers and then answers; a worker answers.
struct SwarmModel;

impl ModelClient for SwarmModel {
    fn complete(
        &self,
        request: ModelRequest,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        let first = !request.messages.iter().any(|m| m.role == ChatRole::Tool);
        let turn = if request.consumer == "run" && first {
            Turn::spawn([
                ("researcher", "look at A"),
                ("researcher", "look at B"),
                ("researcher", "look at C"),
            ])
        } else {
            Turn::answer("found it")
        };
        Box::pin(async move {
            stream(Some(&evidence)).await;
            Ok(ModelReply {
                content: turn.content,
                tool_calls: turn.tool_calls,
                usage: turn.usage,
                finish_reason: None,
            })
        })
    }
}

/// Stamps each loop's `model_call_started` and measures each first-period
/// `wait` of a model stream against it.
#[derive(Default)]
struct LatenessSink {
    started: Mutex<HashMap<(String, String), Instant>>,
    lateness: Mutex<Vec<u64>>,
    workers: AtomicU64,
    /// Every `wait`, renewals included.
    waits: AtomicU64,
    /// Expiries renewed by the load rule.
    load_renewals: AtomicU64,
    /// Model calls started, attempts after a restart included.
    calls: AtomicU64,
}

impl LatenessSink {
    fn lateness(&self) -> Vec<u64> {
        let mut lateness = self
            .lateness
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        lateness.sort_unstable();
        lateness
    }
}

impl EventSink for LatenessSink {
    fn emit(&self, run_id: &str, path: &str, kind: EventKind) {
        let now = Instant::now();
        if matches!(kind, EventKind::Wait { .. }) {
            self.waits.fetch_add(1, Ordering::Relaxed);
        }
        match kind {
            EventKind::ModelCallStarted { .. } => {
                self.calls.fetch_add(1, Ordering::Relaxed);
                self.started
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert((run_id.to_owned(), path.to_owned()), now);
            }
            EventKind::Wait {
                lease_kind: LeaseKind::ModelStream,
                renewals: 0,
                lease_ms,
                ..
            } => {
                let owner = path
                    .rsplit_once('/')
                    .map_or(path, |(loop_path, _)| loop_path);
                // Taken out: only a call's first expiry is a sample (a
                // renewal by load leaves `renewals` at 0).
                let started = self
                    .started
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&(run_id.to_owned(), owner.to_owned()));
                if let Some(started) = started {
                    let due = started + Duration::from_millis(lease_ms);
                    self.lateness
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(nanos(now.saturating_duration_since(due)));
                }
            }
            EventKind::Verdict(record) if record.decided_by == DecidedBy::Load => {
                self.load_renewals.fetch_add(1, Ordering::Relaxed);
            }
            EventKind::WorkerSpawned { .. } => {
                self.workers.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// What one run writes: its record and its snapshots, in order.
pub(crate) struct Pilot {
    record: RunRecord,
    snapshots: Arc<Vec<Snapshot>>,
}

/// Runs one run of the flow on a recording memory store.
pub(crate) async fn recorded_snapshots() -> Pilot {
    let store = Arc::new(Recording::default());
    let sink = Arc::new(LatenessSink::default());
    let knobs = Knobs {
        max_renewals: EngineConfig::default().supervision.lease.max_renewals,
        lease: LEASE,
        load_bound: EngineConfig::default().load_bound,
    };
    let engine = engine(store.clone(), sink, knobs).await;
    let mut handle = engine.start(flow()).await.expect("pilot starts");
    assert_eq!(handle.wait().await.status, RunStatus::Completed);
    engine.shutdown().await;
    let snapshots = store
        .snapshots
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut record = store
        .inner
        .run(handle.run_id())
        .expect("the pilot's record");
    record.status = RunStatus::Running;
    Pilot {
        record,
        snapshots: Arc::new(snapshots),
    }
}

/// A memory store that keeps every snapshot written, in order.
#[derive(Default)]
struct Recording {
    inner: MemoryStore,
    snapshots: Mutex<Vec<Snapshot>>,
}

impl LayeredStore for Recording {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    fn save_snapshot(&self, snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        self.snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(snapshot.clone());
        self.inner.save_snapshot(snapshot, fence)
    }
}

// ---------------------------------------------------------------------------
// Measuring.
// ---------------------------------------------------------------------------

fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(sorted.len() - 1) * p / 100]
}

fn to_f64(x: u64) -> f64 {
    let hi = u32::try_from(x >> 32).unwrap_or(u32::MAX);
    let lo = u32::try_from(x & 0xFFFF_FFFF).unwrap_or(u32::MAX);
    f64::from(hi) * 4_294_967_296.0 + f64::from(lo)
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .unwrap_or(0)
}

/// Resident set size now, in bytes.
fn rss_bytes() -> u64 {
    status_kib("VmRSS:") * 1024
}

/// The peak resident set size so far, in bytes.
fn peak_rss_bytes() -> u64 {
    status_kib("VmHWM:") * 1024
}
