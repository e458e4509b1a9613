//! What an experiment will cost, estimated from its generated operations
//! before any is played: the runs (one per operation and strategy) and the
//! simulated events — chunks streamed, progress reported, a worker's model
//! and tool calls, verdicts, and each run and attempt counted for what its
//! actors cost (a run as much as 500 chunks, measured) — each of which is
//! timers and messages through the real actors, so that the experiment's
//! real time follows their number.
//!
//! The estimate counts an operation that ends once, as it was drawn, and
//! one that never does (a hang, a loop, a call to a dead endpoint) on every
//! attempt its strategy's restarts allow, each living until the renewal cap
//! ends it: an upper bound for those, however early a strategy cuts them.
//! A workload whose estimate passes the limit ([`DEFAULT_MAX_EVENTS`], or
//! `--max-events`) is refused before it starts, naming the kind of
//! operations that weighs most, the estimate and the limit.

use std::fmt;
use std::time::Duration;

use leasehold_actors::StrategyKind;

use super::read::WorkloadError;
use super::strategy::Strategy;
use super::workload::{Operation, OperationKind};

/// The most simulated events an experiment plays unless told otherwise
/// (`--max-events`, [`Options::max_events`](super::Options::max_events)):
/// about four minutes of a release build on a 2-core machine, forty of a
/// debug build.
pub const DEFAULT_MAX_EVENTS: u64 = 1_000_000_000;

/// What a run counts for, whatever it plays: its actors started and
/// stopped, its store writes, its lease granted and let go. Measured: a
/// run of one quick tool call costs as much time as 500 chunks of a
/// stream.
const RUN_EVENTS: u64 = 500;

/// What each attempt counts for beside its evidence and verdicts: the
/// call's actor started again and stopped (a tenth of a run).
const ATTEMPT_EVENTS: u64 = 50;

/// Events of a worker's step beside its chunks: its model call and its
/// tool call, each started and finished.
const STEP_EVENTS: u64 = 4;

/// An experiment's size, before it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Estimate {
    /// Operations each strategy plays, one run each.
    pub operations: u64,
    /// Strategies.
    pub strategies: u64,
    /// Simulated events of the model streams, over every strategy.
    pub model_streams: u64,
    /// Simulated events of the tool calls, over every strategy.
    pub tool_calls: u64,
    /// Simulated events of the workers, over every strategy.
    pub workers: u64,
}

impl Estimate {
    /// The estimate of playing `operations` under each of `strategies`.
    pub fn new(operations: &[Operation], strategies: &[Strategy]) -> Self {
        let mut estimate = Self {
            operations: count(operations.len()),
            strategies: count(strategies.len()),
            ..Self::default()
        };
        for strategy in strategies {
            let bounds = Bounds::of(strategy);
            for operation in operations {
                let events = bounds.events(operation);
                let kind = match operation.kind {
                    OperationKind::ModelStream { .. } => &mut estimate.model_streams,
                    OperationKind::ToolCall { .. } => &mut estimate.tool_calls,
                    OperationKind::Worker { .. } => &mut estimate.workers,
                };
                *kind = kind.saturating_add(events);
            }
        }
        estimate
    }

    /// Runs in all: one per operation and strategy.
    pub fn runs(&self) -> u64 {
        self.operations.saturating_mul(self.strategies)
    }

    /// Simulated events in all.
    pub fn events(&self) -> u64 {
        self.model_streams
            .saturating_add(self.tool_calls)
            .saturating_add(self.workers)
    }

    /// Refuses an experiment of more than `max_events` simulated events,
    /// at the key of the kind of operations that weighs most.
    pub fn check(&self, max_events: u64) -> Result<(), WorkloadError> {
        if self.events() <= max_events {
            return Ok(());
        }
        let kinds = [
            ("model_streams", self.model_streams),
            ("tool_calls", self.tool_calls),
            ("workers", self.workers),
        ];
        let key = kinds
            .iter()
            .max_by_key(|(_, events)| *events)
            .map_or("model_streams", |(key, _)| *key);
        Err(WorkloadError::new(
            key,
            format!(
                "{self} (model_streams {}, tool_calls {}, workers {}); expected at most {} \
                 simulated events: fewer or shorter operations, fewer strategies, or a \
                 higher `--max-events`",
                grouped(self.model_streams),
                grouped(self.tool_calls),
                grouped(self.workers),
                grouped(max_events),
            ),
        ))
    }
}

impl fmt::Display for Estimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} under {} ({}), about {} simulated events",
            counted(self.operations, "operation"),
            counted(self.strategies, "strategy"),
            counted(self.runs(), "run"),
            grouped(self.events()),
        )
    }
}

/// `n` things, as `1 operation` or `2,000 operations`.
fn counted(n: u64, thing: &str) -> String {
    match (n, thing.strip_suffix('y')) {
        (1, _) => format!("1 {thing}"),
        (_, Some(stem)) => format!("{} {stem}ies", grouped(n)),
        (_, None) => format!("{} {thing}s", grouped(n)),
    }
}

/// What a strategy lets an operation's attempts do.
struct Bounds {
    lease: Duration,
    /// Leases an attempt lives at most: the renewal cap and one.
    leases: u64,
    /// The longest an attempt lives: `leases` leases (evaluator time aside).
    longest: Duration,
    /// Attempts of an operation that never ends: the restarts and one.
    attempts: u64,
}

impl Bounds {
    fn of(strategy: &Strategy) -> Self {
        let leases = strategy.shared.max_renewals.saturating_add(1);
        let fails_fast =
            strategy.supervisor.is_none() && strategy.shared.supervision == StrategyKind::FailFast;
        let attempts = if fails_fast {
            1
        } else {
            // As many as the runner scripts.
            u64::from(strategy.shared.max_restarts)
                .saturating_add(1)
                .min(64)
        };
        Self {
            lease: strategy.lease,
            leases: u64::from(leases),
            longest: strategy.lease.saturating_mul(leases),
            attempts,
        }
    }

    /// The events of `operation` under these bounds.
    fn events(&self, operation: &Operation) -> u64 {
        let (every, step_chunks) = match operation.kind {
            OperationKind::ModelStream { interval, .. } => (Some(interval), None),
            OperationKind::ToolCall { progress } => (progress, None),
            OperationKind::Worker {
                chunks, interval, ..
            } => (Some(interval), Some(chunks)),
        };
        // Chunks or progress reports in `time`, and a worker's steps.
        let evidence = |time: Duration| {
            let chunks = every.map_or(0, |every| per(time, every));
            let steps = step_chunks.map_or(0, |c| chunks.div_ceil(u64::from(c.max(1))));
            chunks.saturating_add(steps.saturating_mul(STEP_EVENTS))
        };
        let attempt = |time: Duration, evidence: u64| {
            evidence
                .saturating_add(per(time, self.lease).min(self.leases))
                .saturating_add(ATTEMPT_EVENTS)
        };
        // A stream's keep-alives while it is silent: at most one every
        // `keepalive` of the attempt's life.
        let keepalives = |time: Duration| operation.keepalive.map_or(0, |every| per(time, every));
        let stalled = operation.work.saturating_add(
            operation
                .stall
                .map_or(Duration::ZERO, |(_, silence)| silence),
        );
        let ends = attempt(
            operation.work,
            evidence(operation.work).saturating_add(keepalives(stalled)),
        );
        let events = match (operation.hangs_at, operation.loops, operation.dead_until) {
            (None, _, None) => ends,
            // Lost attempts, silent until cut, then the one that answers.
            (None, _, Some(_)) => self
                .attempts
                .saturating_mul(attempt(self.longest, 0))
                .saturating_add(ends),
            (Some(at), loops, _) => {
                let until = if loops {
                    self.longest
                } else {
                    at.min(self.longest)
                };
                self.attempts.saturating_mul(attempt(
                    self.longest,
                    evidence(until).saturating_add(keepalives(self.longest)),
                ))
            }
        };
        events.saturating_add(RUN_EVENTS)
    }
}

/// How many `every` fit in `time`.
fn per(time: Duration, every: Duration) -> u64 {
    u64::try_from(time.as_millis() / every.as_millis().max(1)).unwrap_or(u64::MAX)
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// `n` with its thousands separated by commas, as the docs write them.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_separated() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(10_000_000_000), "10,000,000,000");
        assert_eq!(grouped(u64::MAX), "18,446,744,073,709,551,615");
        assert_eq!(counted(1, "strategy"), "1 strategy");
        assert_eq!(counted(3, "strategy"), "3 strategies");
        assert_eq!(counted(2_000, "run"), "2,000 runs");
    }
}
