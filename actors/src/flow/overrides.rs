//! A flow's overrides of the runtime's configuration: its leases, its
//! supervision, its budget and its spawning, each `None` to keep the
//! runtime's value.
//!
//! Each table refuses unknown keys, and [`LeaseOverrides::validate`] and
//! friends refuse what no configuration would accept (a lease below
//! [`MIN_LEASE`], more free renewals than the cap), naming the key. Whether
//! an override stays within what *this* runtime's configuration allows is
//! the engine's check, made when it plans a run: a flow may only tighten
//! the configuration (see `engine/bounds.rs`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::FlowError;
use crate::duration::{MAX_DURATION, MAX_DURATION_EXPECTED, describe_duration};
use crate::rules::{self, Broken};
use crate::serde_time::human_duration;
use crate::supervision::budget::{MAX_EXTENSIONS, max_extensions_expected};
use crate::supervision::lease::{LeaseKind, MIN_LEASE, min_lease_expected};

/// Per-flow lease overrides; `None` keeps the runtime's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseOverrides {
    /// Lease of a streaming model call.
    #[serde(
        default,
        with = "human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub model_stream: Option<Duration>,
    /// Lease of a blocking model call.
    #[serde(
        default,
        with = "human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub model_blocking: Option<Duration>,
    /// Lease of a tool call.
    #[serde(
        default,
        with = "human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub tool_call: Option<Duration>,
    /// Lease of a worker step.
    #[serde(
        default,
        with = "human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub worker_step: Option<Duration>,
    /// Renewals a lease may have before its next expiry stops the operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_renewals: Option<u32>,
    /// Expiries renewed on the ladder, whatever the evidence and without
    /// asking the evaluator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_renewals: Option<u32>,
    /// Consecutive renewals on evidence alone before the evaluator is asked
    /// anyway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_renewals: Option<u32>,
    /// The verdict policy, for every lease kind or per kind: a built-in
    /// (`leasehold`, `deadline`, `idle_kill`, `always_evaluate`) or one
    /// registered with the engine, as `"deadline"`, `"leasehold, tool_call
    /// = idle_kill"` or `{ default = "leasehold", tool_call = "idle_kill" }`.
    /// Kinds it does not name keep the configuration's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::supervision::policy::PolicyChoice>,
    /// What the run's leases do with each endpoint's learned pace:
    /// `learn` (the default), `reset` or `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace: Option<crate::pace::PaceMode>,
}

/// What a supervisor does when a child fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyKind {
    /// Restart the failed child, within the restart limit.
    Restart,
    /// Fail the parent at the first failure.
    FailFast,
}

/// Per-flow supervision overrides; `None` keeps the runtime's configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisionOverrides {
    /// The restart strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<StrategyKind>,
    /// Restarts allowed within `window`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
    /// The window `max_restarts` counts over (formerly `restart_window`,
    /// still read).
    #[serde(
        default,
        alias = "restart_window",
        with = "human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub window: Option<Duration>,
    /// The first restart's backoff.
    #[serde(
        default,
        with = "human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub backoff_initial: Option<Duration>,
    /// The cap of the growing backoff.
    #[serde(
        default,
        with = "human_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub backoff_max: Option<Duration>,
    /// Random spread of each backoff, as a fraction in `[0, 1]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<f64>,
    /// What a failure that reaches the top of the tree does: `pause`
    /// (the default) or `fail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exhausted: Option<crate::supervision::strategy::OnExhausted>,
}

/// Per-flow budget overrides; `None` keeps the runtime's configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetOverrides {
    /// Budget extensions each loop of the run may be granted: at most
    /// [`MAX_EXTENSIONS`] (3); a flow may lower the cap, never raise it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_extensions: Option<u32>,
    /// The run's budget of tokens, over its loops' model calls: reaching
    /// it is a checkpoint (extend on evidence, or pause for a person).
    /// None: no token budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The run's budget of money at the engine's prices, over its loops'
    /// model calls: reaching it is a checkpoint like `max_tokens`'. None:
    /// no money budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
}

impl LeaseOverrides {
    /// Refuses overrides a flow may not hold, naming the key (`leases.…`):
    /// a lease out of range (below [`MIN_LEASE`], above 30 days), more free
    /// renewals than the cap when it gives both
    /// ([`rules::free_renewals_within_cap`]; the engine holds one it gives
    /// against the configuration's other when it plans the run).
    pub fn validate(&self) -> Result<(), FlowError> {
        for (_, path, lease) in self.leases() {
            in_range(path, lease)?;
            if let Some(lease) = lease
                && lease < MIN_LEASE
            {
                return Err(FlowError::new(
                    path,
                    format!(
                        "expected {}, got {}",
                        min_lease_expected(MIN_LEASE, ""),
                        describe_duration(lease)
                    ),
                ));
            }
        }
        if let (Some(free), Some(max)) = (self.free_renewals, self.max_renewals) {
            rules::free_renewals_within_cap(free, max).map_err(|broken| {
                refused(&broken, "leases.free_renewals", "leases.max_renewals")
            })?;
        }
        Ok(())
    }
}

/// A rule between two settings of one flow, broken: refused at `key`,
/// naming `against`, both as the flow writes them.
fn refused(broken: &Broken, key: &str, against: &str) -> FlowError {
    let refusal = broken.named(key, &format!("`{against}`"));
    FlowError::new(key, refusal.expected_got())
}

impl LeaseOverrides {
    /// Each lease override with its kind and flow key.
    pub(crate) fn leases(&self) -> [(LeaseKind, &'static str, Option<Duration>); 4] {
        [
            (
                LeaseKind::ModelStream,
                "leases.model_stream",
                self.model_stream,
            ),
            (
                LeaseKind::ModelBlocking,
                "leases.model_blocking",
                self.model_blocking,
            ),
            (LeaseKind::ToolCall, "leases.tool_call", self.tool_call),
            (
                LeaseKind::WorkerStep,
                "leases.worker_step",
                self.worker_step,
            ),
        ]
    }
}

/// Per-flow limits on spawning workers; `None` keeps the runtime's limit. A
/// flow may only lower them: the engine refuses a value above its
/// configuration's (`spawn.*`), naming both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpawnOverrides {
    /// Workers one model answer may spawn; the calls past it get an error
    /// result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_answer: Option<u32>,
    /// Workers the whole run may start, restarts included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_run: Option<u32>,
    /// How deep workers may nest: 1 lets the root spawn workers that spawn
    /// none, 0 lets no loop spawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u32>,
}

impl SpawnOverrides {
    /// Whether it overrides nothing (then it is not serialized, so a flow
    /// stored before these limits existed reads back the same).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl BudgetOverrides {
    /// A flow may lower the extension cap, never raise it past
    /// [`MAX_EXTENSIONS`].
    pub(super) fn validate(&self) -> Result<(), FlowError> {
        if let Some(max) = self.max_extensions
            && max > MAX_EXTENSIONS
        {
            return Err(FlowError::new(
                "budget.max_extensions",
                format!("expected {}, got {max}", max_extensions_expected()),
            ));
        }
        if self.max_tokens == Some(0) {
            return Err(FlowError::new(
                "budget.max_tokens",
                "expected at least 1 token (leave it out for no token budget)",
            ));
        }
        if let Some(cost) = self.max_cost
            && !(cost.is_finite() && cost > 0.0 && cost <= crate::usage::MAX_COST)
        {
            return Err(FlowError::new(
                "budget.max_cost",
                format!(
                    "expected more than 0 and at most {} (leave it out for no money budget), \
                     got {cost}",
                    crate::usage::MAX_COST
                ),
            ));
        }
        Ok(())
    }
}

impl SupervisionOverrides {
    pub(super) fn validate(&self) -> Result<(), FlowError> {
        in_range("supervision.window", self.window)?;
        in_range("supervision.backoff_initial", self.backoff_initial)?;
        in_range("supervision.backoff_max", self.backoff_max)?;
        if let (Some(initial), Some(max)) = (self.backoff_initial, self.backoff_max) {
            rules::backoffs_in_order(initial, max).map_err(|broken| {
                refused(
                    &broken,
                    "supervision.backoff_max",
                    "supervision.backoff_initial",
                )
            })?;
        }
        if let Some(jitter) = self.jitter
            && !(0.0..=1.0).contains(&jitter)
        {
            return Err(FlowError::new(
                "supervision.jitter",
                format!("expected a fraction in [0, 1], got {jitter}"),
            ));
        }
        Ok(())
    }
}

/// A given duration must be above 0 and at most [`MAX_DURATION`].
pub(super) fn in_range(path: &str, value: Option<Duration>) -> Result<(), FlowError> {
    match value {
        Some(d) if d.is_zero() => Err(FlowError::new(path, "expected a duration above 0, got 0s")),
        Some(d) if d > MAX_DURATION => Err(FlowError::new(
            path,
            format!(
                "expected {MAX_DURATION_EXPECTED} (the maximum of any duration), got {}",
                describe_duration(d)
            ),
        )),
        _ => Ok(()),
    }
}
