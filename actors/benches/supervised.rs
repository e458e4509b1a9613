//! What supervision costs: leasehold against the same machinery built from
//! bare tokio tasks, measured side by side in one run.
//!
//! Run it with `cargo bench -p leasehold-actors --bench supervised`. It prints
//! three comparisons, each against a baseline measured in the same run, with
//! the ratio and PASS/MISS against its target:
//!
//! 1. **Cost per supervised operation** (target ≤ 2.5× bare tokio): an
//!    operation that sleeps 15 ms under a 10 ms lease — the lease expires once,
//!    gets a free `RENEW` from the watchdog's ladder, and is stopped when the
//!    operation returns. The baseline is an operation task, a timer task beside
//!    it that asks a watchdog task for a verdict over an mpsc + oneshot RPC and
//!    re-arms, and stops when the operation finishes. Both run 20 000
//!    operations at once on a current-thread runtime on paused time, so sleeps
//!    cost nothing and a round costs only the CPU time of the machinery
//!    (measured as the thread's CPU time, so that other processes on the
//!    machine do not count). A secondary figure repeats it on a real
//!    two-worker runtime (CPU time of all threads per operation).
//! 2. **Memory per live operation and lease** (target ≤ 10 KiB): 100 000
//!    pending operations under one-hour leases, RSS delta divided by 100 000,
//!    each variant in a fresh child process of this binary.
//! 3. **Verdict round trip** (target p99 ≤ 1.5× the oneshot p99):
//!    `WatchdogActor::assess` on a first expiry (answered by the ladder,
//!    inline) against a oneshot RPC to a plain tokio task, on real two-worker
//!    and current-thread runtimes, alternating sample by sample, with a no-op
//!    event sink.
//!
//! Arguments `cost`, `memory` and `rtt` run only those benchmarks. The
//! figures and their reading are in `docs/benchmarks.md`.

use std::future::Future;
use std::hint::black_box;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leasehold_actors::testing::actors::{LeaseExpiry, WatchdogActor, WatchdogArgs, WatchdogMsg};
use leasehold_actors::{
    EventKind, EventSink, EvidenceSummary, LeaseHandle, LeaseId, LeaseKind, LeaseMeta, LeaseSpec,
    LeaseTerms, Leases, Supervision, SupervisionConfig, Verdict, WatchdogConfig,
};
use ractor::ActorRef;
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

#[path = "support/machine.rs"]
mod machine;
use machine::{cpu_model, cpus, load_average, nanos, process_cpu_ns};

/// Targets.
const COST_TARGET: f64 = 2.5;
const MEMORY_TARGET_BYTES: u64 = 10 * 1024;
const RTT_TARGET: f64 = 1.5;

/// Benchmark 1 on paused time.
const COST_OPS: usize = 20_000;
const COST_ROUNDS: usize = 7;
/// Benchmark 1 on a real runtime: batches small enough, and leases long
/// enough, that every lease is armed well before its operation ends.
const REAL_BATCH: usize = 2_500;
const REAL_BATCHES: usize = 8;
const REAL_ROUNDS: usize = 5;
const REAL_WORK: Duration = Duration::from_millis(60);
const REAL_LEASE: Duration = Duration::from_millis(40);
/// Benchmark 2.
const MEMORY_OPS: usize = 100_000;
/// Benchmark 3.
const RTT_SAMPLES: usize = 200_000;
const RTT_WARMUP: usize = 20_000;

/// The subject of the probe lease used as a barrier.
const PROBE: &str = "probe";
/// The watchdog's free renewals, mirrored by the bare watchdog.
const FREE_RENEWALS: u32 = 2;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let which = args.get(i + 1).map_or("", String::as_str);
        child(which);
        return;
    }
    // `cargo bench` passes `--bench`; other arguments (`cost`, `memory`,
    // `rtt`) select benchmarks, all by default.
    let only: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected = |name: &str| only.is_empty() || only.contains(&name);

    println!("leasehold supervision benchmarks");
    println!(
        "machine: {} cpus, {}, load average {}",
        cpus(),
        cpu_model(),
        load_average()
    );
    println!();

    let mut summary = Vec::new();
    if selected("cost") {
        let cost = bench_cost_paused();
        let ratio = cost.leasehold.full_ns / cost.bare.full_ns;
        summary.push(format!(
            "1. cost per supervised op (paused)      leasehold {:>6.0} ns  bare tokio {:>6.0} ns  ratio {ratio:.2}x  target <= {COST_TARGET}x  {}",
            cost.leasehold.full_ns,
            cost.bare.full_ns,
            verdict(ratio <= COST_TARGET)
        ));
        let real = bench_cost_real();
        let ratio = real.leasehold_cpu_ns / real.bare_cpu_ns;
        summary.push(format!(
            "   secondary: real 2-worker, CPU time   leasehold {:>6.0} ns  bare tokio {:>6.0} ns  ratio {ratio:.2}x  target <= {COST_TARGET}x  {}",
            real.leasehold_cpu_ns,
            real.bare_cpu_ns,
            verdict(ratio <= COST_TARGET)
        ));
    }
    if selected("memory") {
        match bench_memory() {
            Some((leasehold, bare)) => summary.push(format!(
                "2. memory per live op+lease at {MEMORY_OPS}  leasehold {leasehold:>6} B   bare tokio {bare:>6} B   ratio {:.2}x  target <= {MEMORY_TARGET_BYTES} B  {}",
                to_f64(leasehold) / to_f64(bare),
                verdict(leasehold <= MEMORY_TARGET_BYTES)
            )),
            None => summary.push("2. memory per live op+lease: not measured".to_owned()),
        }
    }
    if selected("rtt") {
        let multi = bench_rtt(true);
        let current = bench_rtt(false);
        for (name, rtt) in [("2-worker", &multi), ("current-thread", &current)] {
            let ratio = to_f64(rtt.leasehold.p99) / to_f64(rtt.oneshot.p99);
            summary.push(format!(
                "3. verdict round trip p99 {name:<14} leasehold {:>6} ns  oneshot {:>6} ns     ratio {ratio:.2}x  target <= {RTT_TARGET}x  {}",
                rtt.leasehold.p99,
                rtt.oneshot.p99,
                verdict(ratio <= RTT_TARGET)
            ));
        }
    }

    println!();
    println!("summary");
    for line in summary {
        println!("  {line}");
    }
}

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "MISS" }
}

// ---------------------------------------------------------------------------
// Shared pieces
// ---------------------------------------------------------------------------

/// An event sink that counts verdicts of the measured leases and `wait`s of
/// the probe lease, and drops everything.
#[derive(Default)]
struct CountingSink {
    verdicts: AtomicU64,
    probe_waits: AtomicU64,
}

impl EventSink for CountingSink {
    fn emit(&self, _run_id: &str, _path: &str, kind: EventKind) {
        match kind {
            EventKind::Verdict(record) if record.subject != PROBE => {
                self.verdicts.fetch_add(1, Ordering::Relaxed);
            }
            EventKind::Wait { subject, .. } if subject == PROBE => {
                self.probe_waits.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

impl CountingSink {
    fn verdicts(&self) -> u64 {
        self.verdicts.load(Ordering::Relaxed)
    }

    fn probe_waits(&self) -> u64 {
        self.probe_waits.load(Ordering::Relaxed)
    }
}

/// An event sink that does nothing.
struct NoopSink;

impl EventSink for NoopSink {
    fn emit(&self, _run_id: &str, _path: &str, _kind: EventKind) {}
}

/// Waits until the lease actor and its timer task have processed everything
/// sent to them so far: a probe lease registered now expires only after its
/// registration, which is queued behind every earlier message, and its
/// `wait` event is published while handling that expiry.
async fn drain(leases: &Leases, sink: &CountingSink) {
    let spec = LeaseSpec::new(LeaseKind::ToolCall, PROBE, leasehold_actors::MIN_LEASE)
        .expect("probe spec");
    let before = sink.probe_waits();
    let probe = leases
        .supervise(spec, |_| std::future::pending::<()>())
        .expect("probe");
    while sink.probe_waits() == before {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    probe.cancel();
    let _ = probe.outcome().await;
}

/// A verdict of the bare watchdog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BareVerdict {
    Renew,
    Intervene,
}

/// A verdict request to the bare watchdog.
struct BareAsk {
    renewals: u32,
    reply: oneshot::Sender<BareVerdict>,
}

/// The bare-tokio watchdog: a task answering verdict requests, with the same
/// free ladder, counting what it answers.
fn spawn_bare_watchdog() -> (mpsc::UnboundedSender<BareAsk>, Arc<AtomicU64>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<BareAsk>();
    let verdicts = Arc::new(AtomicU64::new(0));
    let counted = verdicts.clone();
    tokio::spawn(async move {
        while let Some(ask) = rx.recv().await {
            counted.fetch_add(1, Ordering::Relaxed);
            let verdict = if ask.renewals < FREE_RENEWALS {
                BareVerdict::Renew
            } else {
                BareVerdict::Intervene
            };
            let _ = ask.reply.send(verdict);
        }
    });
    (tx, verdicts)
}

/// The bare-tokio supervised operation: the operation in a task, and beside
/// it a timer task that, on expiry, asks the watchdog and re-arms on `RENEW`
/// (aborts the operation otherwise), and stops when the operation finishes.
/// Returns the operation's and the timer's handles.
fn bare_supervise<F>(
    watchdog: &mpsc::UnboundedSender<BareAsk>,
    lease: Duration,
    work: F,
) -> (JoinHandle<F::Output>, JoinHandle<()>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (done_tx, mut done_rx) = oneshot::channel::<()>();
    let op = tokio::spawn(async move {
        let output = work.await;
        let _ = done_tx.send(());
        output
    });
    let abort = op.abort_handle();
    let watchdog = watchdog.clone();
    let timer = tokio::spawn(async move {
        let mut renewals = 0_u32;
        loop {
            tokio::select! {
                biased;
                _ = &mut done_rx => return,
                () = tokio::time::sleep(lease) => {}
            }
            let (reply, answer) = oneshot::channel();
            if watchdog.send(BareAsk { renewals, reply }).is_err() {
                return;
            }
            match answer.await {
                Ok(BareVerdict::Renew) | Err(_) => renewals += 1,
                Ok(BareVerdict::Intervene) => {
                    abort.abort();
                    return;
                }
            }
        }
    });
    (op, timer)
}

fn to_f64(x: u64) -> f64 {
    let hi = u32::try_from(x >> 32).unwrap_or(u32::MAX);
    let lo = u32::try_from(x & 0xFFFF_FFFF).unwrap_or(u32::MAX);
    f64::from(hi) * 4_294_967_296.0 + f64::from(lo)
}

fn per_op(total_ns: u64, ops: usize) -> f64 {
    to_f64(total_ns) / to_f64(u64::try_from(ops).unwrap_or(u64::MAX))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Resident set size, in bytes.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

// ---------------------------------------------------------------------------
// 1. Cost per supervised operation
// ---------------------------------------------------------------------------

struct Scenario {
    name: &'static str,
    work: Duration,
    lease: Duration,
    verdicts_per_op: u64,
}

// On paused time: the lengths only order the expiry against the work (a
// lease is at least `MIN_LEASE`, 10 ms), the cost measured is CPU.
const EXPIRING: Scenario = Scenario {
    name: "15 ms op under a 10 ms lease (1 expiry, 1 RENEW)",
    work: Duration::from_millis(15),
    lease: Duration::from_millis(10),
    verdicts_per_op: 1,
};

const NOT_EXPIRING: Scenario = Scenario {
    name: "15 ms op under a 1 h lease (no expiry)",
    work: Duration::from_millis(15),
    lease: Duration::from_secs(3600),
    verdicts_per_op: 0,
};

/// One round of `ops` leasehold operations at once: wall and CPU ns per
/// operation, and verdicts per operation.
async fn leasehold_round(
    leases: &Leases,
    sink: &CountingSink,
    scenario: &Scenario,
    ops: usize,
) -> (u64, u64, u64) {
    let spec = LeaseSpec::new(LeaseKind::ToolCall, "bench", scenario.lease).expect("spec");
    let work = scenario.work;
    let verdicts = sink.verdicts();
    let cpu = process_cpu_ns();
    let started = Instant::now();
    let mut handles: Vec<LeaseHandle<()>> = Vec::with_capacity(ops);
    for _ in 0..ops {
        handles.push(
            leases
                .supervise(spec.clone(), move |_| tokio::time::sleep(work))
                .expect("supervise"),
        );
    }
    for handle in handles {
        handle.outcome().await.expect("the operation completes");
    }
    drain(leases, sink).await;
    let wall = nanos(started.elapsed());
    let cpu = process_cpu_ns().saturating_sub(cpu);
    (wall, cpu, sink.verdicts() - verdicts)
}

/// The same round with bare tokio tasks.
async fn bare_round(
    watchdog: &mpsc::UnboundedSender<BareAsk>,
    counted: &AtomicU64,
    scenario: &Scenario,
    ops: usize,
) -> (u64, u64, u64) {
    let (lease, work) = (scenario.lease, scenario.work);
    let verdicts = counted.load(Ordering::Relaxed);
    let cpu = process_cpu_ns();
    let started = Instant::now();
    let mut ops_handles = Vec::with_capacity(ops);
    let mut timers = Vec::with_capacity(ops);
    for _ in 0..ops {
        let (op, timer) = bare_supervise(watchdog, lease, tokio::time::sleep(work));
        ops_handles.push(op);
        timers.push(timer);
    }
    for op in ops_handles {
        op.await.expect("the operation completes");
    }
    for timer in timers {
        timer.await.expect("the timer stops");
    }
    let wall = nanos(started.elapsed());
    let cpu = process_cpu_ns().saturating_sub(cpu);
    (wall, cpu, counted.load(Ordering::Relaxed) - verdicts)
}

#[derive(Default)]
struct CostFigures {
    /// Median ns per operation, expiring scenario.
    full_ns: f64,
    /// Median ns per operation, no-expiry scenario.
    quiet_ns: f64,
}

struct CostResult {
    leasehold: CostFigures,
    bare: CostFigures,
}

fn paused_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

fn bench_cost_paused() -> CostResult {
    println!(
        "1. cost per supervised operation — {COST_OPS} concurrent ops per round, {COST_ROUNDS} rounds, current-thread runtime on paused time, CPU time of the thread per op (median of rounds)"
    );
    let rt = paused_runtime();
    rt.block_on(async {
        let sink = Arc::new(CountingSink::default());
        let supervision = Supervision::start(SupervisionConfig::default(), None, sink.clone())
            .await
            .expect("supervision");
        let (watchdog, counted) = spawn_bare_watchdog();
        let mut result = CostResult {
            leasehold: CostFigures::default(),
            bare: CostFigures::default(),
        };
        for scenario in [&EXPIRING, &NOT_EXPIRING] {
            // Warm-up: grows the maps, queues and allocator pools once.
            let _ = leasehold_round(&supervision.leases, &sink, scenario, COST_OPS).await;
            let _ = bare_round(&watchdog, &counted, scenario, COST_OPS).await;
            let (mut lh, mut bare) = (Vec::new(), Vec::new());
            let (mut lh_wall, mut bare_wall) = (Vec::new(), Vec::new());
            for _ in 0..COST_ROUNDS {
                let (wall, cpu, verdicts) =
                    leasehold_round(&supervision.leases, &sink, scenario, COST_OPS).await;
                assert_eq!(
                    verdicts,
                    scenario.verdicts_per_op * u64::try_from(COST_OPS).expect("ops"),
                    "every leasehold operation must get exactly its verdicts"
                );
                lh.push(per_op(cpu, COST_OPS));
                lh_wall.push(per_op(wall, COST_OPS));
                let (wall, cpu, verdicts) = bare_round(&watchdog, &counted, scenario, COST_OPS).await;
                assert_eq!(
                    verdicts,
                    scenario.verdicts_per_op * u64::try_from(COST_OPS).expect("ops"),
                    "every bare operation must get exactly its verdicts"
                );
                bare.push(per_op(cpu, COST_OPS));
                bare_wall.push(per_op(wall, COST_OPS));
            }
            let (lh_med, bare_med) = (median(&mut lh), median(&mut bare));
            let (lh_wall_med, bare_wall_med) = (median(&mut lh_wall), median(&mut bare_wall));
            println!(
                "   {:<48} leasehold {lh_med:>7.0} ns/op  bare tokio {bare_med:>7.0} ns/op  ratio {:.2}x  (rounds: leasehold {:.0}..{:.0}, bare {:.0}..{:.0}; wall medians {lh_wall_med:.0} / {bare_wall_med:.0}, ratio {:.2}x)",
                scenario.name,
                lh_med / bare_med,
                lh[0],
                lh[lh.len() - 1],
                bare[0],
                bare[bare.len() - 1],
                lh_wall_med / bare_wall_med,
            );
            if scenario.verdicts_per_op == 1 {
                result.leasehold.full_ns = lh_med;
                result.bare.full_ns = bare_med;
            } else {
                result.leasehold.quiet_ns = lh_med;
                result.bare.quiet_ns = bare_med;
            }
        }
        println!(
            "   share of one expiry + verdict + re-arm: leasehold {:.0} ns/op, bare tokio {:.0} ns/op",
            result.leasehold.full_ns - result.leasehold.quiet_ns,
            result.bare.full_ns - result.bare.quiet_ns
        );
        supervision.stop();
        result
    })
}

struct RealCost {
    leasehold_cpu_ns: f64,
    bare_cpu_ns: f64,
}

fn bench_cost_real() -> RealCost {
    println!(
        "   real 2-worker runtime: {REAL_BATCHES} batches of {REAL_BATCH} concurrent ops per round, {REAL_ROUNDS} rounds, {} ms op under a {} ms lease",
        REAL_WORK.as_millis(),
        REAL_LEASE.as_millis()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let scenario = Scenario {
        name: "real",
        work: REAL_WORK,
        lease: REAL_LEASE,
        verdicts_per_op: 1,
    };
    let result = rt.block_on(async move {
        tokio::spawn(async move {
            let sink = Arc::new(CountingSink::default());
            let supervision = Supervision::start(SupervisionConfig::default(), None, sink.clone())
                .await
                .expect("supervision");
            let (watchdog, counted) = spawn_bare_watchdog();
            let _ = leasehold_round(&supervision.leases, &sink, &scenario, REAL_BATCH).await;
            let _ = bare_round(&watchdog, &counted, &scenario, REAL_BATCH).await;
            let (mut lh_cpu, mut bare_cpu) = (Vec::new(), Vec::new());
            let (mut lh_verdicts, mut bare_verdicts) = (0, 0);
            for _ in 0..REAL_ROUNDS {
                let mut cpu = 0;
                for _ in 0..REAL_BATCHES {
                    let (_, c, v) =
                        leasehold_round(&supervision.leases, &sink, &scenario, REAL_BATCH).await;
                    cpu += c;
                    lh_verdicts += v;
                }
                lh_cpu.push(per_op(cpu, REAL_BATCH * REAL_BATCHES));
                let mut cpu = 0;
                for _ in 0..REAL_BATCHES {
                    let (_, c, v) = bare_round(&watchdog, &counted, &scenario, REAL_BATCH).await;
                    cpu += c;
                    bare_verdicts += v;
                }
                bare_cpu.push(per_op(cpu, REAL_BATCH * REAL_BATCHES));
            }
            supervision.stop();
            let total = u64::try_from(REAL_BATCH * REAL_BATCHES * REAL_ROUNDS).expect("ops");
            (
                median(&mut lh_cpu),
                median(&mut bare_cpu),
                to_f64(lh_verdicts) / to_f64(total),
                to_f64(bare_verdicts) / to_f64(total),
            )
        })
        .await
        .expect("the benchmark task")
    });
    let (lh, bare, lh_v, bare_v) = result;
    println!(
        "   {:<48} leasehold {lh:>7.0} ns/op  bare tokio {bare:>7.0} ns/op  ratio {:.2}x  (CPU of all threads; verdicts/op leasehold {lh_v:.3}, bare {bare_v:.3})",
        "real runtime, CPU time per op",
        lh / bare
    );
    RealCost {
        leasehold_cpu_ns: lh,
        bare_cpu_ns: bare,
    }
}

// ---------------------------------------------------------------------------
// 2. Memory per live operation + lease
// ---------------------------------------------------------------------------

/// Runs each variant in a fresh child process, so that neither inherits the
/// other's (or benchmark 1's) freed-but-resident heap.
fn bench_memory() -> Option<(u64, u64)> {
    println!();
    println!(
        "2. memory per live operation + lease — {MEMORY_OPS} pending ops under 1 h leases, RSS delta / ops, each variant in a fresh process"
    );
    let exe = std::env::current_exe().ok()?;
    let mut figures = Vec::new();
    for which in ["leasehold", "bare"] {
        let output = Command::new(&exe).args(["--child", which]).output().ok()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            eprintln!(
                "   memory child {which} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            return None;
        }
        let line = stdout.lines().find(|l| l.starts_with("rss "))?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        let [before, after, per_op] = fields[..] else {
            return None;
        };
        println!(
            "   {which:<10} RSS {:>6} KiB -> {:>7} KiB: {per_op:>5} B per live op+lease",
            before / 1024,
            after / 1024
        );
        figures.push(per_op);
    }
    Some((figures[0], figures[1]))
}

fn child(which: &str) {
    let rt = paused_runtime();
    rt.block_on(async {
        let before;
        let after;
        match which {
            "leasehold" => {
                let sink = Arc::new(CountingSink::default());
                let supervision =
                    Supervision::start(SupervisionConfig::default(), None, sink.clone())
                        .await
                        .expect("supervision");
                drain(&supervision.leases, &sink).await;
                before = rss_bytes().expect("rss");
                let spec = LeaseSpec::new(LeaseKind::ToolCall, "bench", Duration::from_secs(3600))
                    .expect("spec");
                let mut handles: Vec<LeaseHandle<()>> = Vec::with_capacity(MEMORY_OPS);
                for _ in 0..MEMORY_OPS {
                    handles.push(
                        supervision
                            .leases
                            .supervise(spec.clone(), |_| std::future::pending::<()>())
                            .expect("supervise"),
                    );
                }
                // Every registration processed and every operation polled.
                drain(&supervision.leases, &sink).await;
                after = rss_bytes().expect("rss");
                for handle in &handles {
                    handle.cancel();
                }
                for handle in handles {
                    assert!(
                        handle.outcome().await.is_err(),
                        "a pending op ends cancelled"
                    );
                }
                drain(&supervision.leases, &sink).await;
                supervision.stop();
            }
            "bare" => {
                let (watchdog, _) = spawn_bare_watchdog();
                tokio::time::sleep(Duration::from_millis(1)).await;
                before = rss_bytes().expect("rss");
                let lease = Duration::from_secs(3600);
                let mut handles = Vec::with_capacity(MEMORY_OPS);
                for _ in 0..MEMORY_OPS {
                    handles.push(bare_supervise(
                        &watchdog,
                        lease,
                        std::future::pending::<()>(),
                    ));
                }
                // On paused time the clock only moves once every task has
                // been polled and is waiting.
                tokio::time::sleep(Duration::from_millis(1)).await;
                after = rss_bytes().expect("rss");
                for (op, _) in &handles {
                    op.abort();
                }
                for (op, timer) in handles {
                    assert!(op.await.is_err(), "a pending op ends aborted");
                    timer.await.expect("the timer stops");
                }
            }
            other => panic!("unknown child {other}"),
        }
        let ops = u64::try_from(MEMORY_OPS).expect("ops");
        println!(
            "rss {before} {after} {}",
            after.saturating_sub(before) / ops
        );
    });
}

// ---------------------------------------------------------------------------
// 3. Verdict round trip
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Percentiles {
    p50: u64,
    p99: u64,
    p999: u64,
    mean: f64,
}

fn percentiles(mut samples: Vec<u64>) -> Percentiles {
    samples.sort_unstable();
    let at = |per_mille: usize| samples[(samples.len() * per_mille / 1000).min(samples.len() - 1)];
    let sum: u64 = samples.iter().sum();
    Percentiles {
        p50: at(500),
        p99: at(990),
        p999: at(999),
        mean: per_op(sum, samples.len()),
    }
}

struct Rtt {
    leasehold: Percentiles,
    oneshot: Percentiles,
}

/// The baseline: a plain task answering over a oneshot.
type OneshotAsk = (LeaseExpiry, oneshot::Sender<Verdict>);

/// One timed `WatchdogActor::assess`.
async fn assess_once(watchdog: &ActorRef<WatchdogMsg>, expiry: &LeaseExpiry) -> u64 {
    let expiry = expiry.clone();
    let started = Instant::now();
    let decision = WatchdogActor::assess(watchdog, expiry).await;
    let elapsed = nanos(started.elapsed());
    black_box(decision);
    elapsed
}

/// One timed oneshot RPC to the plain task.
async fn oneshot_once(server: &mpsc::UnboundedSender<OneshotAsk>, expiry: &LeaseExpiry) -> u64 {
    let expiry = expiry.clone();
    let started = Instant::now();
    let (tx, rx) = oneshot::channel();
    let _ = server.send((expiry, tx));
    let verdict = rx.await.expect("the server answers");
    let elapsed = nanos(started.elapsed());
    black_box(verdict);
    elapsed
}

fn bench_rtt(multi_thread: bool) -> Rtt {
    let (rt, name) = if multi_thread {
        (
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime"),
            "2-worker runtime",
        )
    } else {
        (
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            "current-thread runtime",
        )
    };
    if multi_thread {
        println!();
        println!(
            "3. verdict round trip — {RTT_SAMPLES} samples each after {RTT_WARMUP} warm-up, alternating sample by sample, real (not paused) runtime, no-op event sink"
        );
    }
    let rtt = rt.block_on(async {
        tokio::spawn(async {
            let watchdog = WatchdogActor::start(WatchdogArgs {
                prices: Default::default(),
                config: WatchdogConfig::default(),
                evaluator: None,
                events: Arc::new(NoopSink),
            })
            .await
            .expect("watchdog");
            let (server, mut requests) = mpsc::unbounded_channel::<OneshotAsk>();
            tokio::spawn(async move {
                while let Some((expiry, reply)) = requests.recv().await {
                    black_box(expiry);
                    let _ = reply.send(Verdict::Renew);
                }
            });
            let spec = LeaseSpec::new(LeaseKind::ToolCall, "bench", Duration::from_secs(60))
                .expect("spec");
            let terms = LeaseTerms::new(LeaseKind::ToolCall);
            let expiry = LeaseExpiry {
                meta: Arc::new(LeaseMeta::new(LeaseId(1), &spec, &terms)),
                renewals: 0,
                counted: 0,
                max_renewals: 10,
                evidence_renewals: 0,
                evidence: EvidenceSummary::default(),
                stream_tail: None,
                early: false,
            };
            for _ in 0..RTT_WARMUP {
                black_box(assess_once(&watchdog, &expiry).await);
                black_box(oneshot_once(&server, &expiry).await);
            }
            // Alternating sample by sample, so that whatever else the
            // machine does falls on both alike.
            let (mut lh, mut os) = (
                Vec::with_capacity(RTT_SAMPLES),
                Vec::with_capacity(RTT_SAMPLES),
            );
            for i in 0..RTT_SAMPLES {
                if i % 2 == 0 {
                    lh.push(assess_once(&watchdog, &expiry).await);
                    os.push(oneshot_once(&server, &expiry).await);
                } else {
                    os.push(oneshot_once(&server, &expiry).await);
                    lh.push(assess_once(&watchdog, &expiry).await);
                }
            }
            watchdog.stop(None);
            Rtt {
                leasehold: percentiles(lh),
                oneshot: percentiles(os),
            }
        })
        .await
        .expect("the benchmark task")
    });
    for (who, p) in [
        ("leasehold assess", &rtt.leasehold),
        ("tokio oneshot", &rtt.oneshot),
    ] {
        println!(
            "   {name:<22} {who:<16} p50 {:>6} ns  p99 {:>6} ns  p99.9 {:>6} ns  mean {:>7.0} ns",
            p.p50, p.p99, p.p999, p.mean
        );
    }
    println!(
        "   {name:<22} ratio p50 {:.2}x  p99 {:.2}x",
        to_f64(rtt.leasehold.p50) / to_f64(rtt.oneshot.p50),
        to_f64(rtt.leasehold.p99) / to_f64(rtt.oneshot.p99)
    );
    rtt
}
