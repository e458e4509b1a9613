//! A seeded simulation of the executor: two to four executors on one
//! memory store, each behind a layer of faults of its own (errors, latency,
//! writes refused for a while, a partition), on tokio's paused time with a
//! wall clock per executor that drifts and jumps; model, tool and
//! evaluator peers that answer, hang, stall, fail or answer garbage;
//! executors that crash and are replaced; people who answer paused runs;
//! receivers of notices that deliver, fail or hang. Every choice is drawn
//! from the seed, every step is written to a trace, and after every step
//! the invariants are checked:
//!
//! - a run is held by at most one live executor, with its current fence,
//!   and its fence only rises (`single holder`, `fence rises`);
//! - no call of a tool that is not idempotent is sent twice unless a
//!   person said to (`no effect twice`);
//! - every run's log is gap-free and ends with its end, and each verdict
//!   comes before what it caused (`gap-free log`, `verdict first`);
//! - nothing panics (`no panic`);
//!
//! and at the end, with faults off and time passed: every run has ended or
//! waits for a person (`ends or waits`), and each pause and end was told
//! at least once (`told at least once`).
//!
//! `scripts/simulate --seed N` replays one seed and prints its trace;
//! `scripts/simulate --seeds A..B` runs many (`LEASEHOLD_SIM_SEED`,
//! `LEASEHOLD_SIM_SEEDS` for [`seeds_from_the_environment`]).

#[path = "simulation/check.rs"]
mod check;
#[path = "simulation/observe.rs"]
mod observe;
#[path = "simulation/peers.rs"]
mod peers;
#[path = "simulation/world.rs"]
mod world;

use std::time::Duration;

use world::World;

/// Steps per seed, before the world settles.
const STEPS: usize = 150;

/// The seeds every `cargo test` runs (those of [`REGRESSIONS`] still open
/// left out).
const CI_SEEDS: std::ops::Range<u64> = 0..240;

/// Seeds that once broke an invariant, run every time; those whose fault
/// is still open are skipped, with the reason. 381, 391, 739 and 963 logged
/// a lease's `verdict` or `lease_cancelled` after their run's end.
const REGRESSIONS: &[(u64, Option<&str>)] = &[(381, None), (391, None), (739, None), (963, None)];

/// Whether `seed` breaks an invariant whose fault is still open.
fn still_open(seed: u64) -> bool {
    REGRESSIONS
        .iter()
        .any(|&(known, open)| known == seed && open.is_some())
}

/// What one seed did: its trace, and the invariants it broke.
pub struct Outcome {
    /// Each step and what it met.
    pub trace: String,
    /// The invariants broken, as the trace names them.
    pub violations: Vec<String>,
}

/// Runs seed `seed` on a runtime of its own, on paused time.
pub fn run_seed(seed: u64) -> Outcome {
    check::count_panics();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let mut world = World::new(seed).await;
        let mut last = String::new();
        for step in 0..STEPS {
            world.step().await;
            // Whatever the step set going runs a little before the check.
            tokio::time::sleep(Duration::from_millis(10)).await;
            let summary = world.summary();
            if summary != last {
                world.say(format!("  {summary}"));
                last = summary;
            }
            world.check(&format!("step {step}"));
        }
        world.settle().await;
        let summary = world.summary();
        world.say(format!("end: {summary}"));
        for ex in world.executors.iter().chain(&world.dead) {
            ex.engine.crash();
        }
        Outcome {
            trace: std::mem::take(&mut world.trace),
            violations: std::mem::take(&mut world.violations),
        }
    })
}

fn assert_clean(seed: u64, outcome: &Outcome) {
    assert!(
        outcome.violations.is_empty(),
        "seed {seed} broke an invariant (replay: scripts/simulate --seed {seed}):\n{}",
        outcome.violations.join("\n")
    );
}

#[test]
fn fixed_seeds_hold_every_invariant() {
    for seed in CI_SEEDS.filter(|&seed| !still_open(seed)) {
        let outcome = run_seed(seed);
        assert_clean(seed, &outcome);
    }
}

#[test]
fn seeds_that_once_broke_an_invariant_hold_it() {
    for &(seed, open) in REGRESSIONS {
        if let Some(reason) = open {
            eprintln!("seed {seed} skipped: {reason}");
            continue;
        }
        assert_clean(seed, &run_seed(seed));
    }
}

/// A seed replays byte for byte in one process.
#[test]
fn a_seed_replays_its_trace_byte_for_byte() {
    let first = run_seed(7);
    let second = run_seed(7);
    assert_eq!(first.trace, second.trace);
}

/// `LEASEHOLD_SIM_SEED=N` prints seed N's trace; `LEASEHOLD_SIM_SEEDS=A..B`
/// runs seeds A to B (not B) and prints one line each: what
/// `scripts/simulate` runs. Without either, nothing.
#[test]
fn seeds_from_the_environment() {
    if let Ok(seed) = std::env::var("LEASEHOLD_SIM_SEED") {
        let seed: u64 = seed.trim().parse().expect("LEASEHOLD_SIM_SEED is a number");
        let outcome = run_seed(seed);
        println!("{}", outcome.trace);
        assert_clean(seed, &outcome);
    }
    if let Ok(range) = std::env::var("LEASEHOLD_SIM_SEEDS") {
        let (from, to) = range.split_once("..").expect("LEASEHOLD_SIM_SEEDS is A..B");
        let (from, to): (u64, u64) = (
            from.trim().parse().expect("a number"),
            to.trim().parse().expect("a number"),
        );
        let started = std::time::Instant::now();
        let mut failed = Vec::new();
        for seed in from..to {
            let outcome = run_seed(seed);
            let hash = fnv1a(&outcome.trace);
            match outcome.violations.first() {
                None => println!("seed {seed}: clean (trace {hash:016x})"),
                Some(first) => {
                    println!("seed {seed}: BROKEN (trace {hash:016x}) {first}");
                    failed.push(seed);
                }
            }
        }
        println!(
            "{} seeds in {:.1}s; broken: {failed:?}",
            to - from,
            started.elapsed().as_secs_f64()
        );
        assert!(failed.is_empty(), "seeds broke invariants: {failed:?}");
    }
}

/// The FNV-1a hash of a trace: two runs of a seed that print the same
/// hash printed the same trace.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
