//! The report: one row per strategy, measured against the workload's
//! ground truth, as a table, JSON and CSV. Its pictures are drawn from it
//! (`plot.rs`), and all of it is written into a folder by
//! `report_files.rs`.
//!
//! Every figure is an integer or a share rounded to four places, computed
//! from virtual time in whole milliseconds, so one seed gives one report,
//! byte for byte.

use std::fmt::Write as _;
use std::time::Duration;

use leasehold_actors::{RunStatus, StrategyKind};
use serde::Serialize;

use leasehold::printable::columns::{self, Align};

use super::runner::OperationOutcome;
use super::strategy::Strategy;
use super::workload::Operation;

/// An experiment's report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The seed the operations were drawn from.
    pub seed: u64,
    /// How many operations each strategy ran.
    pub operations: u32,
    /// One entry per strategy, in the order they were named.
    pub strategies: Vec<StrategyReport>,
}

/// What one strategy did with the workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StrategyReport {
    /// The strategy's name (`deadline@30s`).
    pub name: String,
    /// Its verdict policy.
    pub policy: String,
    /// Its lease of model streams, tool calls and workers, in
    /// milliseconds.
    pub lease_ms: u64,
    /// Its renewal cap.
    pub max_renewals: u32,
    /// Its free renewals.
    pub free_renewals: u32,
    /// Its restarts of one call.
    pub max_restarts: u32,
    /// Its supervision: `restart`, `fail_fast`, or `custom` (an
    /// embedder's own).
    pub supervision: String,
    /// Operations that end, given time: slow, stalled or quick, alive.
    pub alive: u32,
    /// Of those, how many were cut at least once: slow-but-alive
    /// operations (one that is cut outlasted a lease) killed by mistake.
    pub slow_alive_killed: u32,
    /// `slow_alive_killed / alive` (0 when none is alive): the same
    /// denominator for every strategy, so a sweep draws a curve.
    pub slow_alive_killed_share: f64,
    /// Operations that never end: silent for good, or looping.
    pub hangs: u32,
    /// Of those, how many were cut.
    pub hangs_detected: u32,
    /// Median time from a hang to the verdict that cut it, in ms.
    pub detect_p50_ms: Option<u64>,
    /// 99th percentile of the same, in ms.
    pub detect_p99_ms: Option<u64>,
    /// Model streams and tool calls whose endpoint was dead when they
    /// started.
    pub dead_endpoints: u32,
    /// Of those, how many got their answer, from a call sent again after
    /// the endpoint came back.
    pub dead_endpoints_answered: u32,
    /// Budget checkpoints that extended a worker's steps.
    pub budget_extended: u32,
    /// Budget checkpoints that wrapped a worker up (a live one wrapped up
    /// counts as cut by mistake; a looping one, as its hang detected).
    pub budget_wrapped_up: u32,
    /// Attempts cut, in all.
    pub kills: u32,
    /// Tokens (chunks) of cut streams, thrown away.
    pub wasted_tokens: u64,
    /// Time of cut tool calls, thrown away, in ms.
    pub wasted_tool_ms: u64,
    /// Evaluator calls made by the watchdog and the budget checkpoints.
    pub evaluator_calls: u32,
    /// Tokens those calls cost.
    pub evaluator_tokens: u64,
    /// What those tokens cost at the workload's
    /// `evaluator.price_per_million_tokens`, rounded to six places.
    pub evaluator_cost: f64,
    /// Runs that completed.
    pub runs_completed: u32,
    /// Runs that paused for a person.
    pub runs_paused: u32,
    /// Runs that failed.
    pub runs_failed: u32,
    /// Virtual time of all the runs, one after another, in ms.
    pub virtual_time_ms: u64,
}

impl StrategyReport {
    /// Sums up `outcomes`, one per operation of `operations`, pricing the
    /// evaluator's tokens at `price_per_million_tokens`.
    pub fn new(
        strategy: &Strategy,
        operations: &[Operation],
        outcomes: &[OperationOutcome],
        price_per_million_tokens: f64,
    ) -> Self {
        let mut report = Self {
            name: strategy.name.clone(),
            policy: strategy.policy.to_string(),
            lease_ms: millis(strategy.lease),
            max_renewals: strategy.shared.max_renewals,
            free_renewals: strategy.shared.free_renewals,
            max_restarts: strategy.shared.max_restarts,
            supervision: match (&strategy.supervisor, strategy.shared.supervision) {
                (Some(_), _) => "custom",
                (None, StrategyKind::Restart) => "restart",
                (None, StrategyKind::FailFast) => "fail_fast",
            }
            .to_owned(),
            alive: 0,
            slow_alive_killed: 0,
            slow_alive_killed_share: 0.0,
            hangs: 0,
            hangs_detected: 0,
            detect_p50_ms: None,
            detect_p99_ms: None,
            dead_endpoints: 0,
            dead_endpoints_answered: 0,
            budget_extended: 0,
            budget_wrapped_up: 0,
            kills: 0,
            wasted_tokens: 0,
            wasted_tool_ms: 0,
            evaluator_calls: 0,
            evaluator_tokens: 0,
            evaluator_cost: 0.0,
            runs_completed: 0,
            runs_paused: 0,
            runs_failed: 0,
            virtual_time_ms: 0,
        };
        let mut detections = Vec::new();
        for (operation, outcome) in operations.iter().zip(outcomes) {
            if operation.dead_until.is_some() {
                report.dead_endpoints += 1;
                report.dead_endpoints_answered += u32::from(outcome.answered);
            } else if operation.alive() {
                report.alive += 1;
                report.slow_alive_killed += u32::from(outcome.cut());
            } else {
                report.hangs += 1;
                if let Some(after) = outcome.detected_after {
                    report.hangs_detected += 1;
                    detections.push(millis(after));
                }
            }
            report.kills += outcome.kills;
            report.budget_extended += outcome.budget_extended;
            report.budget_wrapped_up += outcome.budget_wrapped_up;
            report.wasted_tokens += outcome.wasted_tokens;
            report.wasted_tool_ms += millis(outcome.wasted_tool_time);
            report.evaluator_calls += outcome.evaluator_calls;
            report.evaluator_tokens += outcome.evaluator_tokens;
            match outcome.status {
                RunStatus::Completed => report.runs_completed += 1,
                s if s.is_paused() => report.runs_paused += 1,
                _ => report.runs_failed += 1,
            }
            report.virtual_time_ms += millis(outcome.elapsed);
        }
        if report.alive > 0 {
            let share = f64::from(report.slow_alive_killed) / f64::from(report.alive);
            report.slow_alive_killed_share = (share * 10_000.0).round() / 10_000.0;
        }
        // Tokens are exact in an f64 far past any workload's count.
        #[allow(clippy::cast_precision_loss)]
        let tokens = report.evaluator_tokens as f64;
        report.evaluator_cost =
            (tokens * price_per_million_tokens / 1_000_000.0 * 1e6).round() / 1e6;
        detections.sort_unstable();
        report.detect_p50_ms = percentile(&detections, 50);
        report.detect_p99_ms = percentile(&detections, 99);
        report
    }
}

impl Report {
    /// The report as one JSON object, pretty-printed, ending in a newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The report as CSV: a header, then one row per strategy.
    pub fn to_csv(&self) -> Result<String, csv::Error> {
        let mut writer = csv::Writer::from_writer(Vec::new());
        for strategy in &self.strategies {
            writer.serialize(strategy)?;
        }
        let bytes = writer
            .into_inner()
            .map_err(|e| csv::Error::from(e.into_error()))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The report as a table for the terminal.
    pub fn to_table(&self) -> String {
        let header = [
            "strategy",
            "alive killed",
            "detect p50",
            "detect p99",
            "wasted tok",
            "wasted tool",
            "dead answered",
            "budget ext/wrap",
            "eval calls",
            "completed",
            "paused",
            "failed",
            "virtual time",
        ];
        let mut rows = vec![header.map(str::to_owned).to_vec()];
        for s in &self.strategies {
            rows.push(vec![
                s.name.clone(),
                format!(
                    "{}/{} ({:.1}%)",
                    s.slow_alive_killed,
                    s.alive,
                    s.slow_alive_killed_share * 100.0
                ),
                optional_ms(s.detect_p50_ms),
                optional_ms(s.detect_p99_ms),
                s.wasted_tokens.to_string(),
                format_ms(s.wasted_tool_ms),
                format!("{}/{}", s.dead_endpoints_answered, s.dead_endpoints),
                format!("{}/{}", s.budget_extended, s.budget_wrapped_up),
                s.evaluator_calls.to_string(),
                s.runs_completed.to_string(),
                s.runs_paused.to_string(),
                s.runs_failed.to_string(),
                format_ms(s.virtual_time_ms),
            ]);
        }
        // Laid out by `columns`: a strategy's name of any length overflows
        // its column, not the process, and is printed as text.
        let widths: Vec<usize> = (0..header.len())
            .map(|c| columns::width(rows.iter().map(|r| r[c].as_str())))
            .collect();
        let mut out = format!(
            "{} operations per strategy, seed {}\n",
            self.operations, self.seed
        );
        for row in &rows {
            let mut line = String::new();
            for (c, (cell, &w)) in row.iter().zip(&widths).enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                let align = if c == 0 { Align::Left } else { Align::Right };
                columns::push_padded(&mut line, cell, w, align);
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        out
    }
}

/// The nearest-rank percentile `p` of `sorted`, or `None` when empty.
pub fn percentile(sorted: &[u64], p: usize) -> Option<u64> {
    let rank = (p.min(100) * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn format_ms(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

fn optional_ms(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".to_owned(), format_ms)
}
