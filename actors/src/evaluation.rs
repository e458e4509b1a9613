//! One evaluation under the flat timeout, shared by the watchdog and the
//! budget checkpoint: it runs in a task of its own, so an evaluator that
//! panics — even before returning its future — is a failure like any other
//! rather than a lost reply, and is aborted when the timeout passes.

use std::time::Duration;

use crate::ports::{BoxFuture, EvaluatorAnswer, EvaluatorError};

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
