//! A run's spending budget: tokens or money, for the whole run.
//!
//! A flow may give its run a budget of tokens (`budget.max_tokens`) or of
//! money (`budget.max_cost`, at the engine's prices), counted over the
//! loops' own model calls — the root's and every worker's, every attempt;
//! the evaluator's calls are the runtime's own and are shown apart in a
//! run's usage. Like a step budget it is an allocation, not a kill switch:
//! when a loop is about to begin a step and the run has spent its budget,
//! the run's checkpoint is asked, as for a step budget, and
//!
//! - **extends** it on the evaluator's evidence, proportionally to the
//!   current budget (the step budget's rule, on tokens and money), at most
//!   `max_extensions` times a run; or
//! - **pauses the run for a person** (`waiting_human`): with no evaluator,
//!   no extension left, or an evaluator that says no. The pause's reason
//!   says what was spent, and resuming it grants one more budget of the
//!   flow's size.
//!
//! Never a silent kill, and never a wrap-up, which would spend more without
//! anyone's word. Loops check one at a time, so a budget reached by several
//! loops at once is decided once. Each decision is a `budget_extended` or
//! `budget_exhausted` event carrying the figures under `spending`, so a run
//! resumed by another executor rebuilds its budget from its log
//! ([`Spending::restore`]).

use std::sync::Arc;

use crate::event::{BudgetRecord, Event, EventKind};
use crate::ports::TokenCost;
pub use crate::vocabulary::budget::SpendingFigures;

/// The state of a run's spending budget, shared by its loops.
#[derive(Debug)]
pub(crate) struct Spending {
    /// The flow's budgets: one more of each is what a person's resume
    /// grants.
    declared: (Option<u64>, Option<f64>),
    now: std::sync::Mutex<Now>,
    /// One check at a time.
    turn: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Now {
    tokens: u64,
    cost: f64,
    token_limit: Option<u64>,
    cost_limit: Option<f64>,
    extensions_used: u32,
}

impl Spending {
    /// A run's budget of `max_tokens` and `max_cost`, none spent yet.
    pub(crate) fn new(max_tokens: Option<u64>, max_cost: Option<f64>) -> Arc<Self> {
        Arc::new(Self {
            declared: (max_tokens, max_cost),
            now: std::sync::Mutex::new(Now {
                token_limit: max_tokens,
                cost_limit: max_cost,
                ..Now::default()
            }),
            turn: tokio::sync::Mutex::new(()),
        })
    }

    /// The budget of a run whose log is `events`: what its loops spent, and
    /// its limits after each decision its checkpoints recorded.
    pub(crate) fn restore(
        max_tokens: Option<u64>,
        max_cost: Option<f64>,
        events: &[Event],
    ) -> Arc<Self> {
        let spending = Self::new(max_tokens, max_cost);
        for event in events {
            match &event.kind {
                EventKind::ModelCallFinished { usage, spent, .. } => {
                    spending.add(*usage, *spent);
                }
                EventKind::BudgetExtended(record) | EventKind::BudgetExhausted(record) => {
                    spending.decided(record);
                }
                _ => {}
            }
        }
        spending
    }

    fn now(&self) -> std::sync::MutexGuard<'_, Now> {
        self.now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the run has a spending budget at all.
    pub(crate) fn is_set(&self) -> bool {
        self.declared.0.is_some() || self.declared.1.is_some()
    }

    /// Counts one model call of the run's loops.
    pub(crate) fn add(&self, usage: TokenCost, spent: Option<f64>) {
        if !self.is_set() {
            return;
        }
        let mut now = self.now();
        now.tokens = now
            .tokens
            .saturating_add(usage.input_tokens.saturating_add(usage.output_tokens));
        now.cost += spent.unwrap_or(0.0);
    }

    /// The figures now.
    pub(crate) fn figures(&self) -> SpendingFigures {
        let now = self.now();
        SpendingFigures {
            tokens: now.tokens,
            token_limit: now.token_limit,
            cost: now.cost,
            cost_limit: now.cost_limit,
            new_token_limit: None,
            new_cost_limit: None,
        }
    }

    /// The figures, when a budget is spent.
    pub(crate) fn reached(&self) -> Option<SpendingFigures> {
        if !self.is_set() {
            return None;
        }
        Some(self.figures()).filter(SpendingFigures::reached)
    }

    /// Extensions the run's checkpoints granted its spending budget.
    pub(crate) fn extensions_used(&self) -> u32 {
        self.now().extensions_used
    }

    /// Waits for this loop's turn to check.
    pub(crate) async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// Applies a recorded decision on the spending budget: an extension's
    /// new limits, or the budget a person's resume grants.
    pub(crate) fn decided(&self, record: &BudgetRecord) {
        let Some(figures) = &record.figures.spending else {
            return;
        };
        if figures.new_token_limit.is_some() || figures.new_cost_limit.is_some() {
            self.extend_to(figures);
        } else {
            self.grant_tranche();
        }
    }

    /// Takes the new limits of an extension.
    pub(crate) fn extend_to(&self, figures: &SpendingFigures) {
        let mut now = self.now();
        now.extensions_used += 1;
        now.token_limit = figures.new_token_limit.or(now.token_limit);
        now.cost_limit = figures.new_cost_limit.or(now.cost_limit);
    }

    /// Adds one budget of the flow's size: what a person's resume grants.
    pub(crate) fn grant_tranche(&self) {
        let mut now = self.now();
        now.token_limit = self
            .declared
            .0
            .map(|tranche| now.token_limit.unwrap_or(0).saturating_add(tranche));
        now.cost_limit = self
            .declared
            .1
            .map(|tranche| now.cost_limit.unwrap_or(0.0) + tranche);
    }

    /// The budgets one more person's resume grants, in words.
    pub(crate) fn tranche(&self) -> String {
        let mut parts = Vec::new();
        if let Some(tokens) = self.declared.0 {
            parts.push(format!("{tokens} tokens"));
        }
        if let Some(cost) = self.declared.1 {
            parts.push(format!("{cost:.4} in money"));
        }
        parts.join(" and ")
    }
}

/// The limits an `EXTEND` at `confidence` gives budgets of `figures`: each
/// grows by its current size times the confidence, floored at
/// `min_confidence` (the step budget's rule).
pub(crate) fn extended(
    figures: &SpendingFigures,
    confidence: f64,
    min_confidence: f64,
) -> (Option<u64>, Option<f64>) {
    let share = if confidence.is_finite() {
        confidence.clamp(min_confidence, 1.0)
    } else {
        min_confidence
    };
    let tokens = figures.token_limit.map(|limit| {
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let granted = ((limit as f64) * share).ceil().max(1.0) as u64;
        limit.saturating_add(granted)
    });
    let cost = figures.cost_limit.map(|limit| limit + limit * share);
    (tokens, cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_reached_by_either_figure_and_extended_proportionally() {
        let figures = SpendingFigures {
            tokens: 100,
            token_limit: Some(100),
            cost: 0.5,
            cost_limit: Some(1.0),
            ..SpendingFigures::default()
        };
        assert!(figures.reached());
        assert_eq!(extended(&figures, 0.5, 0.25), (Some(150), Some(1.5)));
        assert_eq!(extended(&figures, 0.0, 0.25), (Some(125), Some(1.25)));
        assert_eq!(extended(&figures, f64::NAN, 0.25), (Some(125), Some(1.25)));
        let under = SpendingFigures {
            tokens: 99,
            token_limit: Some(100),
            ..SpendingFigures::default()
        };
        assert!(!under.reached());
    }

    #[test]
    fn a_run_without_a_budget_counts_nothing_and_is_never_reached() {
        let spending = Spending::new(None, None);
        spending.add(
            TokenCost {
                input_tokens: 1_000_000,
                output_tokens: 0,
                counted: false,
            },
            Some(1e9),
        );
        assert!(spending.reached().is_none());
    }
}
