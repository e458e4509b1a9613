//! Supervision-strategy experiments (feature `experiment`): one seeded
//! workload, run under several strategies through the real actors, measured
//! against its ground truth.
//!
//! A [`Workload`] (TOML) describes operations by distribution — model
//! streams with their chunk rate, stalls that recover, hangs that never do
//! and loops that stream forever; tool calls with their latency, progress and hangs; the evaluator's
//! latency and accuracy. [`Workload::generate`] draws the operations from a
//! seed. [`run`] plays them, for each [`Strategy`], through a real
//! [`Engine`](leasehold_actors::Engine) — leases, watchdog, verdict policy,
//! supervisors — with the scripted model, tools and evaluator, on a
//! current-thread tokio runtime whose time is paused, so hours of virtual
//! time take seconds. The [`Report`] says, per strategy, how many
//! slow-but-alive operations were cut by mistake, how long a hang took to
//! be cut (p50, p99), the work thrown away, the evaluator calls, and how
//! the runs ended. The same seed gives the same report, byte for byte.
//!
//! ```
//! use leasehold::experiment::{Options, Workload, run};
//!
//! let workload = Workload::parse(r#"
//! seed = 7
//! [model_streams]
//! count = 3
//! duration = { dist = "fixed", value = "30s" }
//! chunk_interval = "1s"
//! "#)?;
//! let options = Options { strategies: Some(vec!["leasehold".into(), "deadline".into()]), seed: None };
//! let report = run(&workload, &options)?;
//! assert_eq!(report.strategies[0].slow_alive_killed, 0);
//! assert_eq!(report.strategies[1].slow_alive_killed, 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod plot;
mod report;
mod runner;
mod strategy;
mod workload;

pub use plot::{PlotError, tradeoff_svg, wasted_svg};
pub use report::{Report, StrategyReport, percentile};
pub use runner::{OperationOutcome, run_strategy};
pub use strategy::{
    BUILT_IN, DEFAULT_STRATEGIES, MAX_DEFINED_STRATEGIES, Strategy, StrategyDefinition,
    StrategySettings, Sweep,
};
pub use workload::{
    Distribution, EVALUATOR_ANSWERS, EvaluatorLoad, MAX_CHUNKS, MAX_OPERATION_DURATION,
    MAX_OPERATIONS, MAX_WORKER_STEPS, Operation, OperationKind, StepRange, StreamLoad, ToolLoad,
    WorkerLoad, Workload, WorkloadError, WorkloadFileError,
};

use leasehold_actors::EngineError;

/// What to run of a workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The strategies, by name; `None` runs the defaults, the workload's
    /// own and the sweep ([`StrategySettings::default_names`]).
    pub strategies: Option<Vec<String>>,
    /// A seed instead of the workload's.
    pub seed: Option<u64>,
}

/// An experiment that could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// A strategy or the workload was refused.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The engine refused or failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The paused runtime could not be built.
    #[error("cannot start the experiment's runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// Runs `workload` under each strategy of `options` on a current-thread
/// tokio runtime of its own, with time paused. Blocks: call it outside any
/// runtime (or from `spawn_blocking`).
pub fn run(workload: &Workload, options: &Options) -> Result<Report, ExperimentError> {
    let names = options
        .strategies
        .clone()
        .unwrap_or_else(|| workload.strategy.default_names(&workload.strategies));
    let strategies = names
        .iter()
        .map(|name| {
            workload
                .strategy
                .strategy(name.trim(), &workload.strategies)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let seed = options.seed.unwrap_or(workload.seed);
    let operations = workload.generate(seed);
    let mut report = Report {
        seed,
        operations: u32::try_from(operations.len()).unwrap_or(u32::MAX),
        strategies: Vec::with_capacity(strategies.len()),
    };
    for strategy in &strategies {
        // A runtime per strategy: each starts at the same virtual instant,
        // with nothing left over from the one before.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()?;
        let outcomes =
            runtime.block_on(run_strategy(strategy, &operations, &workload.evaluator))?;
        report.strategies.push(StrategyReport::new(
            strategy,
            &operations,
            &outcomes,
            workload.evaluator.price_per_million_tokens,
        ));
    }
    Ok(report)
}
