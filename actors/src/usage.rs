//! What a run spent: the tokens of every model call and evaluator call,
//! and their price.
//!
//! Each model call's `model_call_finished` event carries the tokens the
//! server reported (`stream_options.include_usage`), or, when it reported
//! none, the tokens counted here ([`TokenCost::counted`]), the model's name
//! and what the call cost at the engine's [`Prices`] when it was made: a
//! price changed later does not change what a run spent. Evaluator calls
//! carry the same in their [`EvaluatorUsage`](crate::EvaluatorUsage).
//!
//! [`UsageReport::of`] rolls a run's events up: per model call attempt, per
//! loop, per worker (its loop and every loop under it) and for the run,
//! with the watchdog's and the budget checkpoints' evaluator calls apart
//! from the loops' own model calls.
//!
//! ```
//! use leasehold_actors::{Price, Prices, TokenCost};
//!
//! let prices = Prices::new([("gpt-4o".to_owned(), Price::per_million(2.5, 10.0))]);
//! let usage = TokenCost { input_tokens: 1_000, output_tokens: 200, counted: false };
//! assert_eq!(prices.spent(Some("gpt-4o"), usage), Some(0.0045));
//! assert_eq!(prices.spent(Some("another"), usage), None);
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::event::{CallOutcome, Event, EventKind};
use crate::ports::TokenCost;
use crate::vocabulary::verdict::EvaluatorUsage;

/// The most a price may be, per million tokens: above it a price is a
/// mistake (a price per token written as one per million).
pub const MAX_PRICE: f64 = 1_000_000.0;

/// The most a run's money budget (`budget.max_cost`) may be.
pub const MAX_COST: f64 = 1e12;

/// What a model's tokens cost, per million, in the currency the prices are
/// written in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Per million input (prompt) tokens.
    pub input: f64,
    /// Per million output (completion) tokens.
    pub output: f64,
}

impl Price {
    /// A price of `input` per million input tokens and `output` per million
    /// output tokens.
    pub const fn per_million(input: f64, output: f64) -> Self {
        Self { input, output }
    }

    /// Whether both figures are finite, at least zero and at most
    /// [`MAX_PRICE`].
    pub fn is_valid(&self) -> bool {
        [self.input, self.output]
            .iter()
            .all(|p| p.is_finite() && (0.0..=MAX_PRICE).contains(p))
    }

    /// What `usage` costs at this price.
    #[allow(clippy::cast_precision_loss)] // exact below 2^53 tokens
    pub fn of(&self, usage: TokenCost) -> f64 {
        (usage.input_tokens as f64 * self.input + usage.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

/// Prices per model name. A model without a price is counted in tokens
/// only, and a report says which calls had none.
/// Cheap to clone: every run of an engine shares one table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prices {
    by_model: Arc<BTreeMap<String, Price>>,
}

impl Prices {
    /// The prices of the given models.
    pub fn new(prices: impl IntoIterator<Item = (String, Price)>) -> Self {
        Self {
            by_model: Arc::new(prices.into_iter().collect()),
        }
    }

    /// The price of `model`, if it has one.
    pub fn get(&self, model: &str) -> Option<&Price> {
        self.by_model.get(model)
    }

    /// Each model and its price.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Price)> {
        self.by_model.iter().map(|(m, p)| (m.as_str(), p))
    }

    /// Whether no model has a price.
    pub fn is_empty(&self) -> bool {
        self.by_model.is_empty()
    }

    /// What `usage` of `model` cost, when the model has a price.
    pub fn spent(&self, model: Option<&str>, usage: TokenCost) -> Option<f64> {
        model.and_then(|m| self.get(m)).map(|price| price.of(usage))
    }
}

/// Tokens and money, summed over calls.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    /// Calls counted.
    pub calls: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Of the calls, those whose server reported no usage: their tokens
    /// were counted here, from the text sent and received.
    pub counted_calls: u64,
    /// What the priced calls cost.
    pub spent: f64,
    /// Of the calls, those of a model without a price: `spent` leaves
    /// them out.
    pub unpriced_calls: u64,
}

impl Usage {
    /// Adds one call of `usage` that cost `spent` (none: no price).
    pub fn add(&mut self, usage: TokenCost, spent: Option<f64>) {
        self.calls += 1;
        self.input_tokens = self.input_tokens.saturating_add(usage.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(usage.output_tokens);
        self.counted_calls += u64::from(usage.counted);
        match spent {
            Some(spent) => self.spent += spent,
            None => self.unpriced_calls += 1,
        }
    }

    /// Adds every call of `other`.
    pub fn merge(&mut self, other: &Usage) {
        self.calls += other.calls;
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.counted_calls += other.counted_calls;
        self.spent += other.spent;
        self.unpriced_calls += other.unpriced_calls;
    }

    /// Input and output tokens together.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// One model call attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallUsage {
    /// The loop's step.
    pub step: u32,
    /// Which attempt of the step's model call (1 for the first).
    pub attempt: u32,
    /// The model, when its client named it.
    pub model: Option<String>,
    /// How the call ended.
    pub outcome: CallOutcome,
    /// Its tokens, and whether they were counted here.
    pub usage: TokenCost,
    /// What it cost, when its model has a price.
    pub spent: Option<f64>,
}

/// One loop's spending.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LoopUsage {
    /// The loop (`run`, `run/worker:research:1:2`).
    pub path: String,
    /// Its own model calls.
    pub model: Usage,
    /// The watchdog's evaluator calls about its leases.
    pub watchdog: Usage,
    /// The evaluator calls of its budget checkpoints.
    pub budget: Usage,
    /// Its model calls, attempt by attempt.
    pub calls: Vec<CallUsage>,
}

impl LoopUsage {
    /// Its model calls and evaluator calls together.
    pub fn total(&self) -> Usage {
        let mut total = self.model.clone();
        total.merge(&self.watchdog);
        total.merge(&self.budget);
        total
    }
}

/// A worker's spending: its own loop's and every loop under it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerUsage {
    /// The worker's loop.
    pub path: String,
    /// Everything its loops spent, evaluator calls included.
    pub total: Usage,
}

/// What a run spent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageReport {
    /// Everything.
    pub total: Usage,
    /// The loops' model calls.
    pub model: Usage,
    /// The watchdog's evaluator calls.
    pub watchdog: Usage,
    /// The budget checkpoints' evaluator calls.
    pub budget: Usage,
    /// Everything, by model (`unnamed` for a client that names none).
    pub by_model: BTreeMap<String, Usage>,
    /// Each loop, in the order it first spent.
    pub loops: Vec<LoopUsage>,
    /// Each worker, in the order it first spent.
    pub workers: Vec<WorkerUsage>,
}

/// The name a model without one is listed under.
const UNNAMED: &str = "unnamed";

impl UsageReport {
    /// The spending recorded in `events`, a run's log in order.
    pub fn of<'a>(events: impl IntoIterator<Item = &'a Event>) -> Self {
        let mut report = Self::default();
        for event in events {
            report.count(event);
        }
        report.workers = report.worker_totals();
        report
    }

    fn count(&mut self, event: &Event) {
        match &event.kind {
            EventKind::ModelCallFinished {
                step,
                attempt,
                outcome,
                usage,
                model,
                spent,
                ..
            } => {
                self.add(Role::Model, &event.path, model.as_deref(), *usage, *spent);
                self.loop_at(&event.path).calls.push(CallUsage {
                    step: *step,
                    attempt: *attempt,
                    model: model.clone(),
                    outcome: *outcome,
                    usage: *usage,
                    spent: *spent,
                });
            }
            EventKind::Verdict(record) => {
                if let Some(evaluator) = &record.evaluator {
                    let path = loop_of(&event.path);
                    self.evaluated(Role::Watchdog, path, evaluator);
                }
            }
            EventKind::BudgetExtended(record) | EventKind::BudgetExhausted(record) => {
                if let Some(evaluator) = &record.evaluator {
                    self.evaluated(Role::Budget, &event.path, evaluator);
                }
            }
            _ => {}
        }
    }

    fn evaluated(&mut self, role: Role, path: &str, evaluator: &EvaluatorUsage) {
        self.add(
            role,
            path,
            evaluator.model.as_deref(),
            evaluator.cost,
            evaluator.spent,
        );
    }

    fn add(
        &mut self,
        role: Role,
        path: &str,
        model: Option<&str>,
        usage: TokenCost,
        spent: Option<f64>,
    ) {
        self.total.add(usage, spent);
        self.by_model
            .entry(model.unwrap_or(UNNAMED).to_owned())
            .or_default()
            .add(usage, spent);
        let at = self.loop_at(path);
        match role {
            Role::Model => at.model.add(usage, spent),
            Role::Watchdog => at.watchdog.add(usage, spent),
            Role::Budget => at.budget.add(usage, spent),
        }
        match role {
            Role::Model => self.model.add(usage, spent),
            Role::Watchdog => self.watchdog.add(usage, spent),
            Role::Budget => self.budget.add(usage, spent),
        }
    }

    fn loop_at(&mut self, path: &str) -> &mut LoopUsage {
        let i = match self.loops.iter().position(|l| l.path == path) {
            Some(i) => i,
            None => {
                self.loops.push(LoopUsage {
                    path: path.to_owned(),
                    ..LoopUsage::default()
                });
                self.loops.len() - 1
            }
        };
        &mut self.loops[i]
    }

    /// Each worker's loop with every loop under it.
    fn worker_totals(&self) -> Vec<WorkerUsage> {
        self.loops
            .iter()
            .filter(|l| is_worker(&l.path))
            .map(|worker| {
                let mut total = Usage::default();
                for l in &self.loops {
                    if l.path == worker.path || l.path.starts_with(&format!("{}/", worker.path)) {
                        total.merge(&l.total());
                    }
                }
                WorkerUsage {
                    path: worker.path.clone(),
                    total,
                }
            })
            .collect()
    }
}

#[derive(Clone, Copy)]
enum Role {
    Model,
    Watchdog,
    Budget,
}

/// Whether `path` is a worker's loop: its last part names a worker.
fn is_worker(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|last| last.starts_with("worker:"))
}

/// The loop an operation's path belongs to: the path without its last part
/// when that part names an operation (`run/model_call:3` → `run`,
/// `run/tool_call:2.0` → `run`), the path itself when it names a loop (a
/// worker's own path).
pub fn loop_of(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some((parent, last)) if !last.starts_with("worker:") => parent,
        _ => path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_path_belongs_to_its_loop() {
        assert_eq!(loop_of("run/model_call:3"), "run");
        assert_eq!(loop_of("run/worker:a:1:2"), "run/worker:a:1:2");
        assert_eq!(
            loop_of("run/worker:a:1:2/tool_call:1:0"),
            "run/worker:a:1:2"
        );
        assert_eq!(loop_of("run"), "run");
        assert!(is_worker("run/worker:a:1:2"));
        assert!(!is_worker("run"));
    }

    #[test]
    fn an_unpriced_call_is_counted_apart_and_a_counted_one_said() {
        let mut usage = Usage::default();
        let tokens = TokenCost {
            input_tokens: 10,
            output_tokens: 5,
            counted: true,
        };
        usage.add(tokens, None);
        usage.add(tokens, Some(0.5));
        assert_eq!(usage.calls, 2);
        assert_eq!(usage.tokens(), 30);
        assert_eq!(usage.counted_calls, 2);
        assert_eq!(usage.unpriced_calls, 1);
        assert_eq!(usage.spent, 0.5);
        assert!(!Price::per_million(-1.0, 0.0).is_valid());
        assert!(!Price::per_million(f64::NAN, 0.0).is_valid());
        assert!(Price::per_million(0.0, 15.0).is_valid());
    }
}
