//! `ToolCallActor`: one tool call, under a lease, with its idempotency key.
//!
//! The call runs in the lease's task (MCP progress notifications are its
//! evidence); the actor waits for its outcome, reports it to its loop and
//! stops. Every attempt of the same call carries the same idempotency key.
//! A tool's own error is a result the model sees; a transport failure, a
//! verdict or a panic is an end for the loop's supervision strategy.

use std::sync::Arc;

use ractor::ActorRef;

use crate::agent::{LoopMsg, lease_end};
use crate::call::{Call, CallActor};
use crate::lease::{LeaseSpec, Leases};
use crate::ports::{ToolClient, ToolInvocation};
use crate::supervisor::ChildEnd;

/// What a tool call is started with.
pub struct ToolCallArgs {
    pub(crate) leases: Leases,
    pub(crate) client: Arc<dyn ToolClient>,
    pub(crate) invocation: ToolInvocation,
    pub(crate) spec: LeaseSpec,
    pub(crate) reply_to: ActorRef<LoopMsg>,
    pub(crate) step: u32,
    pub(crate) index: usize,
    pub(crate) attempt: u32,
}

/// One tool call under a lease.
pub type ToolCallActor = CallActor<ToolCallArgs>;

impl Call for ToolCallArgs {
    async fn run(self) {
        let ToolCallArgs {
            leases,
            client,
            invocation,
            spec,
            reply_to,
            step,
            index,
            attempt,
        } = self;
        let outcome = match leases
            .supervise(spec, move |evidence| client.call(invocation, evidence))
        {
            Err(error) => lease_end(error).map(Err),
            Ok(handle) => match handle.outcome().await {
                Ok(Ok(output)) if output.is_error => Some(Ok(format!("error: {}", output.content))),
                Ok(Ok(output)) => Some(Ok(output.content)),
                Ok(Err(error)) => Some(Err(ChildEnd::Failed {
                    reason: error.message,
                    retryable: error.retryable,
                })),
                Err(error) => lease_end(error).map(Err),
            },
        };
        if let Some(outcome) = outcome {
            let _ = reply_to.send_message(LoopMsg::CallDone {
                step,
                index,
                attempt,
                outcome,
            });
        }
    }
}
