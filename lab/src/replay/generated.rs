//! Record → replay → identical, over generated runs: a seeded workload of
//! the lab — streams that stall and recover, hang, or loop; tool calls
//! with progress, stalls and hangs; endpoints dead for a while; workers
//! with budget checkpoints; an evaluator that is sometimes wrong and takes
//! its time — played through the real engine under one of the built-in
//! strategies, each run recorded in its store, then each recording
//! replayed from itself alone. Every run must replay step for step,
//! verdict for verdict, to the same end.
//!
//! A failing case prints its seed and shape, and the call that plays it
//! again (`check(&Shape { … }, SEED)`); proptest also keeps it in
//! `lab/proptest-regressions/replay/generated.txt` and plays it first
//! from then on. Each case plays up to five runs; 64 cases take a few
//! seconds of paused time.

use std::fmt::Write as _;

use proptest::prelude::*;

use crate::runner::record_strategy;
use crate::{BUILT_IN, Workload};

/// What a generated workload holds: how many of each operation, and how
/// often each fault happens.
#[derive(Clone, Debug)]
pub(super) struct Shape {
    streams: u32,
    tools: u32,
    workers: u32,
    /// Stalls that recover, hangs, loops and dead endpoints, in that
    /// order, in hundredths.
    faults: [u8; 4],
    /// Tool calls report progress.
    progress: bool,
    /// Streams send keepalives while silent.
    keepalives: bool,
    /// The evaluator's accuracy, in hundredths.
    accuracy: u8,
    /// Its latency, in milliseconds.
    latency_ms: u32,
    /// The strategy, by its index in [`BUILT_IN`].
    strategy: usize,
}

impl Shape {
    fn workload(&self, seed: u64) -> Workload {
        let p = |n: u8| f64::from(n) / 100.0;
        let [stall, hang, looping, dead] = self.faults;
        let mut text = format!("seed = {seed}\n");
        let _ = write!(
            text,
            "[evaluator]\nlatency = \"{}ms\"\naccuracy = {}\n",
            self.latency_ms,
            p(self.accuracy)
        );
        if self.streams > 0 {
            let _ = write!(
                text,
                "[model_streams]\ncount = {}\n\
                 duration = {{ dist = \"lognormal\", median = \"20s\", sigma = 0.8 }}\n\
                 chunk_interval = \"700ms\"\n\
                 first_chunk = {{ dist = \"lognormal\", median = \"2s\", sigma = 1.0 }}\n\
                 stall_probability = {}\n\
                 stall = {{ dist = \"lognormal\", median = \"25s\", sigma = 0.5 }}\n\
                 hang_probability = {}\nloop_probability = {}\ndead_probability = {}\n\
                 dead_for = {{ dist = \"lognormal\", median = \"30s\", sigma = 0.5 }}\n",
                self.streams,
                p(stall),
                p(hang),
                p(looping),
                p(dead)
            );
            if self.keepalives {
                text.push_str("keepalive_interval = \"5s\"\n");
            }
        }
        if self.tools > 0 {
            let _ = write!(
                text,
                "[tool_calls]\ncount = {}\n\
                 duration = {{ dist = \"pareto\", scale = \"3s\", shape = 1.3 }}\n\
                 stall_probability = {}\n\
                 stall = {{ dist = \"lognormal\", median = \"30s\", sigma = 0.5 }}\n\
                 hang_probability = {}\ndead_probability = {}\n\
                 dead_for = {{ dist = \"lognormal\", median = \"30s\", sigma = 0.5 }}\n",
                self.tools,
                p(stall),
                p(hang),
                p(dead)
            );
            if self.progress {
                text.push_str("progress_interval = \"2s\"\n");
            }
        }
        if self.workers > 0 {
            let _ = write!(
                text,
                "[workers]\ncount = {}\nsteps = {{ min = 1, max = 5 }}\nmax_steps = 3\n\
                 step_duration = {{ dist = \"lognormal\", median = \"8s\", sigma = 0.5 }}\n\
                 chunk_interval = \"700ms\"\nhang_probability = {}\nloop_probability = {}\n",
                self.workers,
                p(hang),
                p(looping)
            );
        }
        text.push_str("[strategy]\nlease = \"10s\"\n");
        Workload::parse(&text).unwrap_or_else(|e| panic!("a valid workload: {e}\n{text}"))
    }
}

fn shapes() -> impl Strategy<Value = Shape> {
    (
        (0..=2u32, 0..=2u32, 0..=1u32),
        [0..=60u8, 0..=30u8, 0..=30u8, 0..=30u8],
        any::<(bool, bool)>(),
        (50..=100u8, 0..=15_000u32, 0..BUILT_IN.len()),
    )
        .prop_filter(
            "a workload holds an operation",
            |((streams, tools, workers), ..)| streams + tools + workers > 0,
        )
        .prop_map(
            |(
                (streams, tools, workers),
                faults,
                (progress, keepalives),
                (accuracy, latency_ms, strategy),
            )| Shape {
                streams,
                tools,
                workers,
                faults,
                progress,
                keepalives,
                accuracy,
                latency_ms,
                strategy,
            },
        )
}

/// Plays the workload of `shape` drawn from `seed` under its strategy,
/// records each run, and replays each recording; the first that does not
/// reproduce its run, said.
pub(super) fn check(shape: &Shape, seed: u64) -> Result<usize, String> {
    let workload = shape.workload(seed);
    let name = BUILT_IN[shape.strategy].as_str();
    let strategy = workload.resolve(name).map_err(|e| e.to_string())?;
    let operations = workload.generate(seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| e.to_string())?;
    let (config, recordings) = runtime
        .block_on(record_strategy(&strategy, &operations, &workload.evaluator))
        .map_err(|e| e.to_string())?;
    drop(runtime);
    for (n, recording) in recordings.iter().enumerate() {
        let report = recording
            .replay(config.clone())
            .map_err(|e| e.to_string())?;
        if !report.reproduced() {
            return Err(format!(
                "seed {seed}, strategy {name}, operation {n} of {}: {:?}\n{}\n\
                 play it again: check(&{shape:?}, {seed})",
                operations.len(),
                operations[n],
                report.describe(),
            ));
        }
    }
    Ok(recordings.len())
}

proptest! {
    // 64 cases, or as many as `PROPTEST_CASES` asks for a longer search.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_generated_run_replays_as_it_was_recorded(shape in shapes(), seed in any::<u64>()) {
        if let Err(said) = check(&shape, seed) {
            prop_assert!(false, "{}", said);
        }
    }
}

/// Cases that once diverged, played on every run: a looping worker cut
/// as its wrap-up call started, then a later worker wrapping up the same
/// conversation (its answer was taken for the cut one's); and a tool call
/// ending the very instant its renewed lease expired (the recording's tool
/// slept in three stretches, the replay's in one, and the tie went to
/// whichever timer tokio fired first).
#[test]
fn cases_that_once_diverged_replay() {
    let cases = [
        (
            Shape {
                streams: 0,
                tools: 1,
                workers: 1,
                faults: [28, 0, 3, 0],
                progress: false,
                keepalives: false,
                accuracy: 74,
                latency_ms: 0,
                strategy: 0,
            },
            14_707_153_891_649_619_222,
        ),
        (
            Shape {
                streams: 2,
                tools: 1,
                workers: 1,
                faults: [1, 22, 3, 6],
                progress: false,
                keepalives: false,
                accuracy: 50,
                latency_ms: 0,
                strategy: 0,
            },
            2_609_520_866_046_919_127,
        ),
        (
            Shape {
                streams: 0,
                tools: 1,
                workers: 0,
                faults: [7, 0, 0, 0],
                progress: false,
                keepalives: false,
                accuracy: 50,
                latency_ms: 0,
                strategy: 0,
            },
            9_943_405_166_565_515_835,
        ),
    ];
    for (shape, seed) in cases {
        if let Err(said) = check(&shape, seed) {
            panic!("{said}");
        }
    }
}
