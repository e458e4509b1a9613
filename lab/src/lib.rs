//! Supervision-strategy experiments: one seeded
//! workload, run under several strategies through the real actors, measured
//! against its ground truth.
//!
//! A [`Workload`] (TOML) describes operations by distribution — model
//! streams with their chunk rate, stalls that recover, hangs that never do,
//! loops that stream forever and dead endpoints; tool calls with their
//! latency, progress, stalls, hangs and dead endpoints; workers with their
//! steps and step budget, hangs and loops; the evaluator's latency,
//! accuracy and price. [`Workload::generate`] draws the operations from a
//! seed. [`run`] plays them, for each [`Strategy`], through a real
//! [`Engine`](leasehold_actors::Engine) — leases, watchdog, verdict policy,
//! budget checkpoints, supervisors — with the scripted model, tools and
//! evaluator, on a
//! current-thread tokio runtime whose time is paused, so hours of virtual
//! time take seconds. The [`Report`] says, per strategy, how many
//! slow-but-alive operations were cut by mistake, how long a hang took to
//! be cut (p50, p99), the work thrown away, the evaluator calls, and how
//! the runs ended. The same seed gives the same report, byte for byte.
//!
//! An experiment is bounded before it starts ([`plan`]): at most
//! [`MAX_STRATEGIES`] strategies, counted after the sweep expands, and at
//! most [`Options::max_events`] simulated events ([`Estimate`]); a
//! [`Plan`] says what it will cost and, while it runs, how far it has got.
//!
//! ```
//! use leasehold_lab::{Options, Workload, run};
//!
//! let workload = Workload::parse(r#"
//! seed = 7
//! [model_streams]
//! count = 3
//! duration = { dist = "fixed", value = "30s" }
//! chunk_interval = "1s"
//! "#)?;
//! let options = Options { strategies: Some(vec!["leasehold".into(), "deadline".into()]), ..Options::default() };
//! let report = run(&workload, &options)?;
//! assert_eq!(report.strategies[0].slow_alive_killed, 0);
//! assert_eq!(report.strategies[1].slow_alive_killed, 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod estimate;
mod plan;
mod plot;
mod read;
mod recorded;
mod replay;
mod report;
mod report_files;
mod runner;
mod strategy;
mod workload;

pub use estimate::{DEFAULT_MAX_EVENTS, Estimate};
pub use plan::{Plan, Progress, plan};
pub use plot::{MAX_LABEL, PlotError, label, tradeoff_svg, wasted_svg};
pub use read::WorkloadError;
pub use recorded::{
    Counterfactual, OwnStrategy, RecordedOperation, counterfactual, recorded_operations,
};
pub use replay::{Divergence, Forked, Recording, ReplayError, ReplayReport};
pub use report::{Report, StrategyReport, percentile};
pub use runner::{OperationOutcome, run_strategy};
pub use strategy::{
    BUILT_IN, DEFAULT_STRATEGIES, MAX_DEFINED_STRATEGIES, MAX_STRATEGIES, OwnPolicy, Strategy,
    StrategyDefinition, StrategySettings, Supervisor, Sweep,
};
pub use workload::{
    Distribution, EVALUATOR_ANSWERS, EvaluatorLoad, MAX_CHUNKS, MAX_OPERATION_DURATION,
    MAX_OPERATIONS, MAX_WORKER_STEPS, Operation, OperationKind, StepRange, StreamLoad, ToolLoad,
    WorkerLoad, Workload, WorkloadFileError,
};

use leasehold_actors::EngineError;

/// What to run of a workload.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The strategies, by name; `None` runs the defaults, the workload's
    /// own and the sweep ([`StrategySettings::default_names`]).
    pub strategies: Option<Vec<String>>,
    /// A seed instead of the workload's.
    pub seed: Option<u64>,
    /// The most simulated events to play ([`Estimate`]); `None` is
    /// [`DEFAULT_MAX_EVENTS`].
    pub max_events: Option<u64>,
    /// Verdict policies of your own: a strategy named as one of them
    /// (`NAME` or `NAME@LEASE`) is the workload's `[strategy]` judged by
    /// it ([`Strategy::judged_by`]), beside the built-ins.
    pub policies: Vec<std::sync::Arc<dyn leasehold_actors::VerdictPolicy>>,
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
/// tokio runtime of its own, with time paused, once [`plan`] has found it
/// within its bounds. Blocks: call it outside any runtime (or from
/// `spawn_blocking`).
pub fn run(workload: &Workload, options: &Options) -> Result<Report, ExperimentError> {
    plan(workload, options)?.run(|_| {})
}

/// Runs `workload` under `strategies` — resolved with
/// [`Workload::resolve`], and changed as you like (a supervision strategy
/// of your own: [`Strategy::supervised_by`]) — drawn from `seed` or the
/// workload's. Blocks, as [`run`] does.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold_lab::{Workload, run_strategies};
/// use leasehold::{ChildEnd, ChildInfo, StrategyFactory, SupervisionAction, SupervisionStrategy};
///
/// /// Restarts a cut call once, at once, then carries on without it.
/// struct RetryOnce;
///
/// impl SupervisionStrategy for RetryOnce {
///     fn decide(&mut self, child: &ChildInfo, end: &ChildEnd, _: tokio::time::Instant) -> SupervisionAction {
///         match end {
///             ChildEnd::Completed => SupervisionAction::Ignore,
///             _ if child.attempt < 2 => SupervisionAction::Restart { after: Duration::ZERO },
///             _ => SupervisionAction::Ignore,
///         }
///     }
/// }
///
/// let workload = Workload::parse(r#"
/// seed = 1
/// [tool_calls]
/// count = 2
/// duration = { dist = "fixed", value = "1s" }
/// hang_probability = 1.0
/// "#)?;
/// let factory: StrategyFactory = Arc::new(|| Box::new(RetryOnce));
/// let strategies = [
///     workload.resolve("deadline")?,
///     workload.resolve("deadline")?.supervised_by("deadline-retry-once", factory),
/// ];
/// let report = run_strategies(&workload, &strategies, None)?;
/// // The built-in strategy restarts each hung call three times; this one once.
/// assert_eq!(report.strategies[0].kills, 8);
/// assert_eq!(report.strategies[1].kills, 4);
/// assert_eq!(report.strategies[1].supervision, "custom");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run_strategies(
    workload: &Workload,
    strategies: &[Strategy],
    seed: Option<u64>,
) -> Result<Report, ExperimentError> {
    Plan::new(workload, strategies.to_vec(), seed, None)?.run(|_| {})
}
