//! The figures of a loop's step budget, as a checkpoint measures them.
//!
//! One struct for what the loop counts, what the evaluator is shown
//! ([`BudgetEvaluationRequest`](crate::ports::BudgetEvaluationRequest)) and
//! what the audit trail records ([`BudgetRecord`](crate::event::BudgetRecord)),
//! flattened into both, so their JSON keeps the keys it has always had. This
//! is shared vocabulary: it imports no actor, so changing the checkpoint
//! cannot change the wire format.

use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

/// The real state of a loop's step budget when it has used up its steps.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BudgetFigures {
    /// Steps taken.
    pub steps_used: u32,
    /// Steps the flow declared (0 = unlimited).
    pub steps_declared: u32,
    /// The current limit (0 = unlimited).
    pub limit: u32,
    /// Tool calls made so far.
    pub tool_calls: u32,
    /// Workers spawned so far.
    pub spawns: u32,
    /// Milestones closed, in order.
    pub milestones_closed: Vec<String>,
    /// Milestones still open.
    pub milestones_open: Vec<String>,
    /// Extensions granted so far.
    pub extensions_used: u32,
    /// Extensions left.
    pub extensions_left: u32,
    /// At a checkpoint of the run's spending budget (tokens or money, see
    /// [`SpendingFigures`]): what the run spent against it. The extensions
    /// are then the run's spending extensions, and the step figures the
    /// asking loop's, for context.
    #[serde(default)]
    pub spending: Option<SpendingFigures>,
}

impl BudgetFigures {
    /// Writes the figures into `map` in their schema order, with the
    /// `new_limit` of a budget record, when given, right after `limit`: where
    /// `budget_extended` and `budget_exhausted` events have always carried it.
    pub(crate) fn serialize_entries<M: SerializeMap>(
        &self,
        map: &mut M,
        new_limit: Option<u32>,
    ) -> Result<(), M::Error> {
        map.serialize_entry("steps_used", &self.steps_used)?;
        map.serialize_entry("steps_declared", &self.steps_declared)?;
        map.serialize_entry("limit", &self.limit)?;
        if let Some(new_limit) = new_limit {
            map.serialize_entry("new_limit", &new_limit)?;
        }
        map.serialize_entry("tool_calls", &self.tool_calls)?;
        map.serialize_entry("spawns", &self.spawns)?;
        map.serialize_entry("milestones_closed", &self.milestones_closed)?;
        map.serialize_entry("milestones_open", &self.milestones_open)?;
        map.serialize_entry("extensions_used", &self.extensions_used)?;
        map.serialize_entry("extensions_left", &self.extensions_left)?;
        if let Some(spending) = &self.spending {
            map.serialize_entry("spending", spending)?;
        }
        Ok(())
    }
}

impl Serialize for BudgetFigures {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        self.serialize_entries(&mut map, None)?;
        map.end()
    }
}

/// A run's spending against its budget, as a checkpoint is shown it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpendingFigures {
    /// Tokens the loops' model calls spent so far.
    pub tokens: u64,
    /// The token budget now, if the run has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_limit: Option<u64>,
    /// What the loops' model calls cost so far, at the engine's prices.
    pub cost: f64,
    /// The money budget now, if the run has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_limit: Option<f64>,
    /// After the decision: the token budget from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_token_limit: Option<u64>,
    /// After the decision: the money budget from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_cost_limit: Option<f64>,
}

impl SpendingFigures {
    /// Whether either budget is spent.
    pub fn reached(&self) -> bool {
        self.token_limit.is_some_and(|limit| self.tokens >= limit)
            || self.cost_limit.is_some_and(|limit| self.cost >= limit)
    }

    /// What was spent against which budget, in words.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(limit) = self.token_limit {
            parts.push(format!("{} tokens of a budget of {limit}", self.tokens));
        }
        if let Some(limit) = self.cost_limit {
            parts.push(format!("{:.4} of a budget of {limit:.4}", self.cost));
        }
        parts.join(" and ")
    }
}
