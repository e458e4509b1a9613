//! An experiment ready to run: its strategies resolved and counted, its
//! operations drawn, its size estimated and checked against the limits —
//! all before the first operation plays, so that a workload too big for
//! its limits is refused at once, and one that is allowed says what it
//! will cost ([`Plan::estimate`]) and how far it has got
//! ([`Progress`]) while it runs.

use super::estimate::{DEFAULT_MAX_EVENTS, Estimate};
use super::read::WorkloadError;
use super::report::{Report, StrategyReport};
use super::runner::play;
use super::strategy::{MAX_STRATEGIES, Strategy, StrategyDefinition};
use super::workload::{EvaluatorLoad, Operation, Workload};
use super::{ExperimentError, Options};

/// Where a running experiment is: told when each strategy starts (`done`
/// 0) and after each of its operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress<'a> {
    /// The strategy playing.
    pub strategy: &'a str,
    /// Its place among the strategies, from 1.
    pub index: usize,
    /// How many strategies there are.
    pub strategies: usize,
    /// Its operations played so far.
    pub done: usize,
    /// Its operations.
    pub operations: usize,
}

/// An experiment whose strategies, operations and size are known, within
/// the limits.
#[derive(Clone, Debug)]
pub struct Plan {
    seed: u64,
    strategies: Vec<Strategy>,
    operations: Vec<Operation>,
    evaluator: EvaluatorLoad,
    estimate: Estimate,
}

/// The plan of `workload` under the strategies of `options` (by default
/// the workload's: [`StrategySettings::default_names`](super::StrategySettings::default_names)),
/// refused when they are more than [`MAX_STRATEGIES`] or its estimate is
/// more than `options.max_events` simulated events.
pub fn plan(workload: &Workload, options: &Options) -> Result<Plan, ExperimentError> {
    StrategyDefinition::check_policies(
        &workload.strategies,
        &workload.strategy,
        &options.policies,
    )?;
    let names = match &options.strategies {
        Some(names) => {
            check_count("--strategies", names.len(), "named")?;
            names.clone()
        }
        None => {
            let count = workload.strategy.default_count(&workload.strategies);
            let key = if workload.strategy.sweep.is_some() {
                "strategy.sweep"
            } else {
                "strategies"
            };
            check_count(
                key,
                count,
                "run by default (the built-ins, the workload's own and the sweep's points)",
            )?;
            workload.strategy.default_names(&workload.strategies)
        }
    };
    let strategies = names
        .iter()
        .map(|name| {
            workload
                .strategy
                .strategy_judged(name.trim(), &workload.strategies, &options.policies)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Plan::new(
        workload,
        strategies,
        options.seed,
        options.max_events,
    )?)
}

fn check_count(key: &str, count: usize, which: &str) -> Result<(), WorkloadError> {
    if count > MAX_STRATEGIES {
        return Err(WorkloadError::new(
            key,
            format!(
                "{count} strategies {which}; expected at most {MAX_STRATEGIES} in one \
                 experiment: name fewer with `--strategies`"
            ),
        ));
    }
    Ok(())
}

impl Plan {
    /// The plan of `workload` under `strategies` (resolved with
    /// [`Workload::resolve`], changed as you like), drawn from `seed` or
    /// the workload's, refused past [`MAX_STRATEGIES`] strategies or past
    /// `max_events` simulated events (default [`DEFAULT_MAX_EVENTS`]).
    pub fn new(
        workload: &Workload,
        strategies: Vec<Strategy>,
        seed: Option<u64>,
        max_events: Option<u64>,
    ) -> Result<Self, WorkloadError> {
        check_count("strategies", strategies.len(), "given")?;
        let seed = seed.unwrap_or(workload.seed);
        let operations = workload.generate(seed);
        let estimate = Estimate::new(&operations, &strategies);
        estimate.check(max_events.unwrap_or(DEFAULT_MAX_EVENTS))?;
        Ok(Self {
            seed,
            strategies,
            operations,
            evaluator: workload.evaluator,
            estimate,
        })
    }

    /// The plan of `operations` — recorded from real runs
    /// ([`recorded_operations`](super::recorded_operations)), or made as
    /// you like — under `strategies`, with `evaluator`, refused as
    /// [`Plan::new`] refuses.
    pub fn of_operations(
        operations: Vec<Operation>,
        strategies: Vec<Strategy>,
        evaluator: EvaluatorLoad,
        max_events: Option<u64>,
    ) -> Result<Self, WorkloadError> {
        check_count("strategies", strategies.len(), "given")?;
        let estimate = Estimate::new(&operations, &strategies);
        estimate.check(max_events.unwrap_or(DEFAULT_MAX_EVENTS))?;
        Ok(Self {
            seed: 0,
            strategies,
            operations,
            evaluator,
            estimate,
        })
    }

    /// What it will cost.
    pub fn estimate(&self) -> Estimate {
        self.estimate
    }

    /// Plays every operation under each strategy, each strategy on a
    /// current-thread tokio runtime of its own with time paused, telling
    /// `progress` where it is. Blocks: call it outside any runtime (or from
    /// `spawn_blocking`).
    pub fn run(&self, mut progress: impl FnMut(Progress<'_>)) -> Result<Report, ExperimentError> {
        let mut report = Report {
            seed: self.seed,
            operations: u32::try_from(self.operations.len()).unwrap_or(u32::MAX),
            strategies: Vec::with_capacity(self.strategies.len()),
        };
        for (index, strategy) in self.strategies.iter().enumerate() {
            let at = |done| Progress {
                strategy: &strategy.name,
                index: index + 1,
                strategies: self.strategies.len(),
                done,
                operations: self.operations.len(),
            };
            progress(at(0));
            // A runtime per strategy: each starts at the same virtual
            // instant, with nothing left over from the one before.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()?;
            let outcomes = runtime.block_on(play(
                strategy,
                &self.operations,
                &self.evaluator,
                &mut |done| progress(at(done)),
                None,
            ))?;
            report.strategies.push(StrategyReport::new(
                strategy,
                &self.operations,
                &outcomes,
                self.evaluator.price_per_million_tokens,
            ));
        }
        Ok(report)
    }
}
