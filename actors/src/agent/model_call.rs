//! One model call of one step, under a lease.
//!
//! The call runs in the lease's task (streaming chunks are its evidence);
//! [after it](super::call), in the same task, its outcome is reported to its
//! loop. A panic of that report reaches the loop like the call's own panic.

use ractor::ActorRef;

use super::call::{Call, Panicked};
use super::{LoopMsg, lease_end};
use crate::ports::{ModelError, ModelReply};
use crate::supervision::lease::LeaseError;
use crate::supervision::strategy::ChildEnd;

/// Where a model call's outcome is reported: its loop, its step and
/// attempt.
pub(crate) struct ModelCallArgs {
    pub(crate) reply_to: ActorRef<LoopMsg>,
    pub(crate) step: u32,
    pub(crate) attempt: u32,
}

impl Call for ModelCallArgs {
    type Output = Result<ModelReply, ModelError>;

    fn on_panic(&self) -> Panicked {
        Panicked {
            reply_to: self.reply_to.clone(),
            step: self.step,
            index: None,
            attempt: self.attempt,
        }
    }

    async fn run(self, outcome: Result<Self::Output, LeaseError>) {
        let ModelCallArgs {
            reply_to,
            step,
            attempt,
        } = self;
        let mut retry_after = None;
        let mut overflow = None;
        let mut unreachable = None;
        let outcome = match outcome {
            Ok(Ok(reply)) => Some(Ok(reply)),
            Ok(Err(error)) => {
                retry_after = error.retry_after;
                overflow = super::Overflow::of(&error);
                unreachable = error.kind.is_unreachable().then(|| error.to_string());
                Some(Err(ChildEnd::Failed {
                    reason: error.to_string(),
                    retryable: error.retryable,
                }))
            }
            Err(error) => lease_end(error).map(Err),
        };
        // `None`: the loop cancelled the call, and is not waiting for it.
        if let Some(outcome) = outcome {
            let _ = reply_to.send_message(LoopMsg::ModelDone {
                step,
                attempt,
                outcome,
                retry_after,
                overflow,
                unreachable,
            });
        }
    }
}
