//! What the two judges — the watchdog and the budget checkpoint — share:
//! the parts they are started with ([`Judge`]), and one evaluation under the
//! flat timeout. An evaluation runs in a task of its own, so an evaluator
//! that panics — even before returning its future — is a failure like any
//! other rather than a lost reply, and is aborted when the timeout passes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tokio::time::Instant;

use crate::error::{ConfigError, StartError};
use crate::ports::{BoxFuture, Evaluator, EvaluatorAnswer, EvaluatorError, EventSink, TokenCost};
use crate::usage::Prices;
use crate::vocabulary::verdict::EvaluatorUsage;

/// What a judge — the watchdog, a budget checkpoint — is started with and
/// keeps: its policy, its evaluator and where its records go.
pub struct Judge<C> {
    /// Its policy.
    pub config: C,
    /// The evaluator. With none, what the policy cannot settle is settled by
    /// the breaker: an expired lease renews, an exhausted budget wraps up.
    pub evaluator: Option<Arc<dyn Evaluator>>,
    /// Where its records (`verdict`, `budget_extended`, `budget_exhausted`)
    /// go.
    pub events: Arc<dyn EventSink>,
    /// What the evaluator's tokens cost, by its
    /// [model](Evaluator::model_name).
    pub prices: Prices,
}

/// A judge's policy, refused before the judge starts if it makes no sense.
pub trait JudgeConfig {
    /// Refuses a policy that makes no sense, naming the offending field.
    fn validate(&self) -> Result<(), ConfigError>;
}

impl<C: JudgeConfig> Judge<C> {
    /// These parts, once their policy has been validated: what a judge's
    /// `pre_start` keeps, so linked spawning validates too.
    pub(crate) fn validated(self) -> Result<Self, ConfigError> {
        self.config.validate()?;
        Ok(self)
    }

    /// Validates the policy and spawns `judge`, unlinked, with these parts.
    pub(crate) async fn spawn<A>(self, judge: A) -> Result<ActorRef<A::Msg>, StartError>
    where
        A: Actor<Arguments = Self>,
    {
        let parts = self.validated()?;
        let (actor, _) = Actor::spawn(None, judge, parts)
            .await
            .map_err(|e| StartError::Spawn(e.to_string()))?;
        Ok(actor)
    }
}

/// Awaits `evaluation` — a judgement and what the evaluator charged for it
/// — and returns the judgement with its usage: the wall time it took and its
/// cost, attributed to `consumer`.
pub(crate) async fn timed<T>(
    consumer: &str,
    (model, prices): (Option<String>, &Prices),
    evaluation: impl Future<Output = (T, TokenCost)>,
) -> (T, EvaluatorUsage) {
    let started = Instant::now();
    let (judgement, cost) = evaluation.await;
    let usage = EvaluatorUsage {
        latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        cost,
        consumer: consumer.to_owned(),
        spent: prices.spent(model.as_deref(), cost),
        model,
    };
    (judgement, usage)
}

/// The evaluator's answer, or the breaker's reason (starting `breaker:`).
pub(crate) async fn run(
    ask: impl FnOnce() -> BoxFuture<'static, Result<EvaluatorAnswer, EvaluatorError>> + Send + 'static,
    timeout: Duration,
) -> Result<EvaluatorAnswer, String> {
    // Clamped so that no timeout an embedder passes can overflow the timer.
    let timeout = crate::clamp_duration(timeout);
    let task = tokio::spawn(async move { ask().await });
    let abort = task.abort_handle();
    match tokio::time::timeout(timeout, task).await {
        Err(_) => {
            abort.abort();
            Err(format!(
                "breaker: the evaluator did not answer within {} ms",
                timeout.as_millis()
            ))
        }
        Ok(Err(join)) => Err(format!("breaker: the evaluator panicked: {join}")),
        Ok(Ok(Err(error))) => Err(format!("breaker: {error}")),
        Ok(Ok(Ok(answer))) => Ok(answer),
    }
}
