//! The evaluator port: the model that judges an expired lease or an
//! exhausted step budget. It answers raw text; the watchdog and the budget
//! checkpoint parse it, so every evaluator is held to the same strict JSON.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::{BoxFuture, TokenCost, TranscriptMessage};
use crate::vocabulary::budget::BudgetFigures;
use crate::vocabulary::evidence::EvidenceSummary;
use crate::vocabulary::lease::{LeaseId, LeaseKind};

/// What the watchdog shows an evaluator when a lease has expired and neither
/// the free ladder nor fresh evidence settled it.
#[derive(Clone, Debug, Serialize)]
pub struct EvaluationRequest {
    /// The lease that expired.
    pub lease_id: LeaseId,
    /// The run the lease belongs to.
    pub run_id: String,
    /// Where in the run's tree the supervised operation is.
    pub path: String,
    /// What kind of operation the lease watches.
    pub kind: LeaseKind,
    /// What the operation is doing, in words (a tool name, a model call).
    pub subject: String,
    /// How many of this lease's renewals so far count toward its cap:
    /// renewals on strong evidence (progress toward a known total, an
    /// answer streaming at its pace) do not.
    pub renewals: u32,
    /// The renewal cap now: the lease's own, raised by each checkpoint at
    /// it (counted renewals past it end the operation).
    pub max_renewals: u32,
    /// How long one lease period is.
    #[serde(with = "crate::serde_time::millis")]
    pub lease: Duration,
    /// Liveness evidence: count, age of the last item, phi, repetition.
    pub evidence: EvidenceSummary,
    /// Consecutive renewals this lease had on evidence alone before this
    /// expiry: at `evidence_renewals` the evaluator is asked anyway.
    pub evidence_renewals: u32,
    /// What the evidence carried: for a stream, the last 2 KiB of its text
    /// so far (cut on a character boundary); `None` for an operation that
    /// reports no text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_tail: Option<String>,
    /// The last few messages of the loop's transcript.
    pub transcript_tail: Arc<[TranscriptMessage]>,
}

/// The raw answer of an evaluator: its text, unparsed, and what it cost.
///
/// The watchdog, not the evaluator, parses the text, so every evaluator is held
/// to the same strict-JSON discipline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvaluatorAnswer {
    /// The text the evaluator produced.
    pub text: String,
    /// What producing it cost.
    pub cost: TokenCost,
}

/// An evaluator that could not answer at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("evaluator failed: {message}")]
pub struct EvaluatorError {
    /// What went wrong (transport, refusal, …).
    pub message: String,
}

impl EvaluatorError {
    /// An error with the given message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// A judge of expired leases: in production a model of role `fast` prompted to
/// answer strict JSON `{"verdict": …, "reason": …, "nudge": …}`.
///
/// The watchdog runs it in a task of its own under a flat timeout, so an
/// implementation may take as long as it likes; whatever it returns that is
/// not exactly that JSON trips the breaker and renews.
///
/// ```
/// use leasehold_actors::prelude::*;
///
/// /// Intervenes on what said nothing for a whole lease; renews the rest.
/// struct Strict;
///
/// impl Evaluator for Strict {
///     fn evaluate(
///         &self,
///         request: EvaluationRequest,
///     ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
///         let lease_ms = request.lease.as_millis() as u64;
///         let silent = request.evidence.last_progress_age_ms.is_none_or(|age| age >= lease_ms);
///         let verdict = if silent { "INTERVENE" } else { "RENEW" };
///         Box::pin(async move {
///             Ok(EvaluatorAnswer {
///                 text: serde_json::json!({"verdict": verdict, "reason": "by silence", "nudge": null})
///                     .to_string(),
///                 cost: TokenCost::default(),
///             })
///         })
///     }
/// }
/// ```
pub trait Evaluator: Send + Sync + 'static {
    /// Judges one expired lease.
    fn evaluate(
        &self,
        request: EvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>>;

    /// Judges one exhausted step budget: must answer strict JSON
    /// `{"decision": "EXTEND|WRAP_UP", "reason": …, "confidence": 0..1}`.
    /// An evaluator that does not judge budgets fails, and the checkpoint
    /// wraps up.
    fn evaluate_budget(
        &self,
        request: BudgetEvaluationRequest,
    ) -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> {
        let _ = request;
        Box::pin(async {
            Err(EvaluatorError::new(
                "this evaluator does not judge step budgets",
            ))
        })
    }

    /// The evaluator's model, as prices name it; none when it does not
    /// say.
    fn model_name(&self) -> Option<String> {
        None
    }
}

/// What a budget checkpoint shows an evaluator when a loop has used up its
/// steps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BudgetEvaluationRequest {
    /// The run.
    pub run_id: String,
    /// The loop (`run`, `run/worker:research#1`).
    pub path: String,
    /// The loop's figures: steps, calls, spawns, milestones, extensions.
    #[serde(flatten)]
    pub figures: BudgetFigures,
    /// The last messages of the loop's transcript.
    pub transcript_tail: Arc<[TranscriptMessage]>,
}
