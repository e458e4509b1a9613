//! One tool call, under a lease, with its idempotency key.
//!
//! The call runs in the lease's task (MCP progress notifications are its
//! evidence); [after it](super::call), in the same task, its outcome is
//! reported to its loop. Every attempt of the same call carries the same idempotency key.
//! A tool's own error is a result the model sees; a transport failure, a
//! verdict or a panic is an end for the loop's supervision strategy.
//!
//! **A result is bounded**, whatever the [`ToolClient`]: one longer than the
//! engine's `max_tool_result_bytes` (default 1 MiB) is cut at a character boundary and a marker saying how
//! much was cut is appended ([`truncate_result`]), before the loop — and so
//! the model and the store — sees it; a `tool_result_truncated` event says
//! so, before the call's `tool_call_finished`.

use std::sync::Arc;

use ractor::ActorRef;

use super::call::{Call, Panicked};
use super::{LoopMsg, RunContext, lease_end};
use crate::event::EventKind;
use crate::ports::{ToolError, ToolOutput};
use crate::supervision::lease::LeaseError;
use crate::supervision::strategy::ChildEnd;

/// What a tool call is started with: the call itself, already begun under
/// its lease by the loop (the lease counts from the moment the loop began
/// the call, however long its task takes to start), and where to report.
pub(crate) struct ToolCallArgs {
    /// The run, for its events and its cap on a result.
    pub(crate) ctx: Arc<RunContext>,
    /// The call's path in the run's tree.
    pub(crate) path: String,
    /// The tool, and the key every attempt of the call carries.
    pub(crate) tool: String,
    pub(crate) idempotency_key: String,
    pub(crate) reply_to: ActorRef<LoopMsg>,
    pub(crate) step: u32,
    pub(crate) index: usize,
    pub(crate) attempt: u32,
}

/// What [`truncate_result`] cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Truncation {
    /// The result's length as the tool returned it, in bytes.
    pub original_bytes: usize,
    /// How much of it was kept, in bytes, before the marker.
    pub kept_bytes: usize,
}

/// `text` cut to at most `max_bytes` bytes, at a character boundary, with a
/// marker appended that says how much was cut; `None` when it fits and is
/// left as it is.
pub(crate) fn truncate_result(text: &mut String, max_bytes: usize) -> Option<Truncation> {
    let original_bytes = text.len();
    let kept_bytes = crate::event::cut_at_boundary(text, max_bytes)?;
    let cut = original_bytes - kept_bytes;
    text.push_str(&format!(
        "\n[leasehold: tool result truncated: {cut} of its {original_bytes} bytes were cut, \
         the first {kept_bytes} are above (the cap on one tool result is {max_bytes} bytes)]"
    ));
    Some(Truncation {
        original_bytes,
        kept_bytes,
    })
}

impl Call for ToolCallArgs {
    type Output = Result<ToolOutput, ToolError>;

    fn on_panic(&self) -> Panicked {
        Panicked {
            reply_to: self.reply_to.clone(),
            step: self.step,
            index: Some(self.index),
            attempt: self.attempt,
        }
    }

    async fn run(self, outcome: Result<Self::Output, LeaseError>) {
        let ToolCallArgs {
            ctx,
            path,
            tool,
            idempotency_key,
            reply_to,
            step,
            index,
            attempt,
        } = self;
        let outcome = match outcome {
            Ok(Ok(mut output)) => {
                if let Some(cut) = truncate_result(&mut output.content, ctx.max_tool_result_bytes) {
                    ctx.emit(
                        &path,
                        EventKind::ToolResultTruncated {
                            tool,
                            idempotency_key,
                            attempt,
                            original_bytes: u64::try_from(cut.original_bytes).unwrap_or(u64::MAX),
                            kept_bytes: u64::try_from(cut.kept_bytes).unwrap_or(u64::MAX),
                        },
                    );
                }
                if output.is_error {
                    Some(Ok(format!("error: {}", output.content)))
                } else {
                    Some(Ok(output.content))
                }
            }
            Ok(Err(error)) => Some(Err(ChildEnd::Failed {
                reason: error.message,
                retryable: error.retryable,
            })),
            Err(error) => lease_end(error).map(Err),
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

#[cfg(test)]
mod tests {
    use super::truncate_result;

    #[test]
    fn a_result_is_cut_at_a_character_boundary_with_a_marker_saying_how_much() {
        let mut text = "héllo wörld".to_owned();
        let cut = truncate_result(&mut text, 2).expect("longer than 2 bytes");
        // "h" and the two bytes of "é" do not fit in 2: one byte is kept.
        assert_eq!((cut.original_bytes, cut.kept_bytes), (13, 1));
        assert!(
            text.starts_with("h\n[leasehold: tool result truncated"),
            "{text}"
        );
        assert!(text.contains("12 of its 13 bytes were cut"), "{text}");
        let mut short = "ok".to_owned();
        assert_eq!(truncate_result(&mut short, 2), None);
        assert_eq!(short, "ok");
    }
}
