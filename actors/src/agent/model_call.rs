//! `ModelCallActor`: one model call of one step, under a lease.
//!
//! The call runs in the lease's task (streaming chunks are its evidence);
//! the actor waits for its outcome, reports it to its loop and stops. A
//! panic of the actor itself reaches the loop through ractor's supervision
//! and is handled like the call's own panic.

use std::sync::Arc;

use ractor::ActorRef;

use super::call::{Call, CallActor};
use super::{LoopMsg, lease_end};
use crate::ports::{ModelClient, ModelRequest};
use crate::supervision::lease::{LeaseSpec, Leases};
use crate::supervision::strategy::ChildEnd;

/// What a model call is started with.
pub(crate) struct ModelCallArgs {
    pub(crate) leases: Leases,
    pub(crate) model: Arc<dyn ModelClient>,
    pub(crate) request: ModelRequest,
    pub(crate) spec: LeaseSpec,
    pub(crate) reply_to: ActorRef<LoopMsg>,
    pub(crate) step: u32,
    pub(crate) attempt: u32,
}

/// One model call under a lease.
pub(crate) type ModelCallActor = CallActor<ModelCallArgs>;

impl Call for ModelCallArgs {
    async fn run(self) {
        let ModelCallArgs {
            leases,
            model,
            request,
            spec,
            reply_to,
            step,
            attempt,
        } = self;
        let mut retry_after = None;
        let mut overflow = None;
        let outcome =
            match leases.supervise(spec, move |evidence| model.complete(request, evidence)) {
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
