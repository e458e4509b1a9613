//! One model call of one step, under a lease.
//!
//! The call runs in the lease's task (streaming chunks are its evidence);
//! its [task](super::call) waits for its outcome and reports it to its loop.
//! A panic of that task reaches the loop like the call's own panic.

use ractor::ActorRef;

use super::call::{Call, Panicked};
use super::{LoopMsg, lease_end};
use crate::ports::{ModelError, ModelReply};
use crate::supervision::lease::{LeaseError, LeaseHandle};
use crate::supervision::strategy::ChildEnd;

/// What a model call is started with: the call itself, already begun under
/// its lease by the loop (so the lease counts from the moment the loop began
/// the call, however long its task takes to start), and where to report.
pub(crate) struct ModelCallArgs {
    pub(crate) supervised: Result<LeaseHandle<Result<ModelReply, ModelError>>, LeaseError>,
    pub(crate) reply_to: ActorRef<LoopMsg>,
    pub(crate) step: u32,
    pub(crate) attempt: u32,
}

impl Call for ModelCallArgs {
    fn on_panic(&self) -> Panicked {
        Panicked {
            reply_to: self.reply_to.clone(),
            step: self.step,
            index: None,
            attempt: self.attempt,
        }
    }

    async fn run(self) {
        let ModelCallArgs {
            supervised,
            reply_to,
            step,
            attempt,
        } = self;
        let mut retry_after = None;
        let mut overflow = None;
        let outcome = match supervised {
            Err(error) => lease_end(error).map(Err),
            Ok(handle) => match handle.outcome().await {
                Ok(Ok(reply)) => Some(Ok(reply)),
                Ok(Err(error)) => {
                    retry_after = error.retry_after;
                    overflow = super::Overflow::of(&error);
                    Some(Err(ChildEnd::Failed {
                        reason: error.to_string(),
                        retryable: error.retryable,
                    }))
                }
                Err(error) => lease_end(error).map(Err),
            },
        };
        // `None`: the loop cancelled the call, and is not waiting for it.
        if let Some(outcome) = outcome {
            let _ = reply_to.send_message(LoopMsg::ModelDone {
                step,
                attempt,
                outcome,
                retry_after,
                overflow,
            });
        }
    }
}
