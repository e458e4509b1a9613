//! What a loop's snapshot history costs on sled, and what a fork of it
//! adds: a run whose tool returns 1 MiB at each of its steps, then forked
//! twice at its last step.
//!
//! ```sh
//! cargo bench -p leasehold --bench history            # 10 and 20 steps, both ways
//! cargo bench -p leasehold --bench history -- 10      # 10 steps only
//! ```
//!
//! Each measurement runs in a process of its own, on a fresh sled
//! directory (durability `async`, flushed before each figure), through the
//! engine with a scripted model and tool. Two ways of storing:
//!
//! - *whole*: every snapshot saved without its base (a layer drops
//!   `Snapshot::base`), which is how every snapshot was stored before the
//!   history was kept as deltas: each one holds the whole transcript, and
//!   a fork's first snapshots copy the parent's;
//! - *linear*: as the engine saves them, each naming its base.
//!
//! Figures: the directory's size once the run ended (sled's log: its
//! values, overwritten latest snapshots not yet reclaimed, and the tool-call
//! records, which hold each result), the bytes its snapshots take as
//! stored (`snapshot_bytes`), and for each of the two forks what it added
//! to the directory and to the process's resident memory (`VmRSS`,
//! measured after the fork ended, with the binary's allocator, mimalloc), the first fork's snapshot bytes, and
//! the process's peak (`VmHWM`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use leasehold::store::{Durability, SledConfig, SledStore};
use leasehold::{
    Engine, EngineConfig, Fenced, Flow, ForkSpec, LayeredStore, RunStatus, Snapshot, Store,
    StoreFuture,
};
use leasehold_actors::testing::{ScriptedModel, ScriptedTools, ToolAct, Turn};
use serde_json::json;

// Measured with the binary's allocator, as the swarm bench is.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The size of each tool result: 1 MiB.
const RESULT: usize = 1024 * 1024;

/// A store that keeps every snapshot whole: what storing was before bases.
struct Whole(Arc<dyn Store>);

impl LayeredStore for Whole {
    fn inner(&self) -> &dyn Store {
        self.0.as_ref()
    }

    fn save_snapshot(&self, mut snapshot: Snapshot, fence: u64) -> StoreFuture<Fenced<()>> {
        snapshot.base = None;
        self.0.save_snapshot(snapshot, fence)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [mode, way, steps, ..] = args.as_slice()
        && mode == "--one"
    {
        let steps: u64 = steps.parse().expect("steps");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(measure(way == "whole", steps));
        return;
    }
    let steps: Vec<u64> = args
        .iter()
        .filter_map(|a| a.parse().ok())
        .collect::<Vec<_>>();
    let steps = if steps.is_empty() {
        vec![10, 20]
    } else {
        steps
    };
    let me = std::env::current_exe().expect("the bench's path");
    println!(
        "| steps | stored | run: disk | run: snapshot bytes | fork 1: disk | fork 1: snapshot \
         bytes | fork 1: memory | fork 2: disk | fork 2: memory | peak memory |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for steps in steps {
        for way in ["whole", "linear"] {
            let out = std::process::Command::new(&me)
                .args(["--one", way, &steps.to_string()])
                .output()
                .expect("runs a measurement");
            assert!(
                out.status.success(),
                "{way} {steps}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            print!("{}", String::from_utf8_lossy(&out.stdout));
        }
    }
}

/// Megabytes (10⁶ bytes), one decimal.
fn mb(bytes: u64) -> String {
    signed_mb(i128::from(bytes)).replace('+', "")
}

/// Megabytes (10⁶ bytes), signed, one decimal: tenths rounded down.
fn signed_mb(bytes: i128) -> String {
    let tenths = bytes / 100_000;
    let sign = if tenths < 0 { "-" } else { "+" };
    let tenths = tenths.unsigned_abs();
    format!("{sign}{}.{} MB", tenths / 10, tenths % 10)
}

async fn measure(whole: bool, steps: u64) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sled = SledStore::open(SledConfig::new(dir.path()).with_durability(Durability::Async))
        .expect("opens");
    let sled: Arc<dyn Store> = Arc::new(sled);
    let store: Arc<dyn Store> = if whole {
        Arc::new(Whole(sled.clone()))
    } else {
        sled.clone()
    };
    let model = ScriptedModel::new().script(
        "run",
        (0..steps)
            .map(|_| Turn::tools([("fetch", json!({"page": 1}))]))
            .chain([Turn::answer("read")]),
    );
    let tools = ScriptedTools::new().tool(
        "fetch",
        Some(true),
        (0..steps).map(|i| ToolAct::returns(result(i), Duration::ZERO)),
    );
    let config = EngineConfig {
        max_tool_result_bytes: 2 * RESULT,
        ..EngineConfig::default()
    };
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model.clone()))
        .store(store.clone())
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine builds");
    let flow: Flow = serde_json::from_value(json!({
        "name": "fetching",
        "task": "Read every page.",
        "max_steps": steps + 2,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}],
    }))
    .expect("valid flow");
    let mut run = engine.start(flow).await.expect("starts");
    let state = run.wait().await;
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");
    let parent = run.run_id().to_owned();
    drop(run);
    sled.flush().await.expect("flushed");
    let run_disk = size(dir.path());
    let run_bytes = sled.snapshot_bytes(&parent).await.expect("measured");

    model.replace_script("run", [Turn::answer("forked"), Turn::answer("forked")]);
    let step = u32::try_from(steps + 1).expect("steps");
    let mut forks = Vec::new();
    for _ in 0..2 {
        let disk_before = size(dir.path());
        let rss_before = status("VmRSS");
        let mut fork = engine
            .fork(&parent, ForkSpec::root(step))
            .await
            .expect("forks");
        let state = fork.wait().await;
        assert_eq!(state.status, RunStatus::Completed, "{state:?}");
        let fork_id = fork.run_id().to_owned();
        drop(fork);
        sled.flush().await.expect("flushed");
        let disk = i128::from(size(dir.path())) - i128::from(disk_before);
        let rss = i128::from(status("VmRSS")) - i128::from(rss_before);
        let bytes = sled.snapshot_bytes(&fork_id).await.expect("measured");
        forks.push((disk, rss, bytes));
    }
    println!(
        "| {steps} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        if whole {
            "whole (before)"
        } else {
            "linear (after)"
        },
        mb(run_disk),
        mb(run_bytes),
        signed_mb(forks[0].0),
        mb(forks[0].2),
        signed_mb(forks[0].1),
        signed_mb(forks[1].0),
        signed_mb(forks[1].1),
        mb(status("VmHWM")),
    );
    engine.shutdown().await;
}

/// A result of `RESULT` bytes that no compression shrinks.
fn result(seed: u64) -> String {
    let mut rng = fastrand::Rng::with_seed(seed);
    std::iter::repeat_with(|| rng.alphanumeric())
        .take(RESULT)
        .collect()
}

/// The bytes of the files under `dir`.
fn size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("reads the directory")
        .filter_map(Result::ok)
        .map(|entry| {
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                size(&entry.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

/// A field of `/proc/self/status`, in bytes.
fn status(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").expect("reads /proc/self/status");
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
