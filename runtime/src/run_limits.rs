//! [`RunLimits`]: how many bytes a client may make one run hold — its
//! task, its whole flow, and each text a person sends it (guidance on
//! resume, a reconciliation's result, a cancel's reason). `POST /runs`,
//! `leasehold run FLOW` and the person's controls, over the API and on the
//! command line, check them before anything is stored; a refusal names the
//! configuration key, the size and the limit ([`TooLarge`]).
//!
//! The defaults: a task is a prompt, not a document — 64 KiB is about
//! 16 000 tokens, past which documents belong with a tool; a flow (its
//! task, system prompt, workers' instructions and settings) 256 KiB; a
//! person's text 64 KiB. With `server.max_queued_runs` (1024), queued runs
//! then hold at most 256 MiB of flows on disk, instead of what a client
//! chooses to send.

use std::io::Write;

use leasehold_actors::Flow;

/// What one run may hold from a client, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLimits {
    /// A flow's task (`limits.task`).
    pub task: usize,
    /// A whole flow, as the JSON the store keeps (`limits.flow`).
    pub flow: usize,
    /// One text from a person: guidance, a reconciliation's result, a
    /// cancel's reason (`limits.guidance`).
    pub guidance: usize,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            task: DEFAULT_TASK_BYTES,
            flow: DEFAULT_FLOW_BYTES,
            guidance: DEFAULT_GUIDANCE_BYTES,
        }
    }
}

/// The default of [`RunLimits::task`]: 64 KiB.
pub const DEFAULT_TASK_BYTES: usize = 64 * 1024;
/// The default of [`RunLimits::flow`]: 256 KiB.
pub const DEFAULT_FLOW_BYTES: usize = 256 * 1024;
/// The default of [`RunLimits::guidance`]: 64 KiB.
pub const DEFAULT_GUIDANCE_BYTES: usize = 64 * 1024;

/// A text or a flow larger than its limit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} is {size} bytes, more than the {limit} bytes {key} allows ({env}); \
     nothing was stored"
)]
pub struct TooLarge {
    /// What was too large: `the task`, `the flow`, `the guidance`, …
    pub what: &'static str,
    /// Its size, in bytes.
    pub size: usize,
    /// The limit, in bytes.
    pub limit: usize,
    /// The configuration key of the limit (`limits.task`).
    pub key: &'static str,
    /// Its variable (`LEASEHOLD_LIMITS_TASK`).
    pub env: &'static str,
}

/// A person's text, as [`RunLimits::check_text`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersonText {
    /// Guidance on resume.
    Guidance,
    /// The result of a call a person marks done.
    Result,
    /// Why a person cancels.
    Reason,
}

impl RunLimits {
    /// Refuses a flow whose task or whole JSON is larger than allowed.
    pub fn check_flow(&self, flow: &Flow) -> Result<(), TooLarge> {
        if flow.task.len() > self.task {
            return Err(TooLarge {
                what: "the task",
                size: flow.task.len(),
                limit: self.task,
                key: "limits.task",
                env: "LEASEHOLD_LIMITS_TASK",
            });
        }
        let size = json_size(flow);
        if size > self.flow {
            return Err(TooLarge {
                what: "the flow (as JSON)",
                size,
                limit: self.flow,
                key: "limits.flow",
                env: "LEASEHOLD_LIMITS_FLOW",
            });
        }
        Ok(())
    }

    /// Refuses a person's text larger than allowed.
    pub fn check_text(&self, kind: PersonText, text: &str) -> Result<(), TooLarge> {
        if text.len() <= self.guidance {
            return Ok(());
        }
        Err(TooLarge {
            what: match kind {
                PersonText::Guidance => "the guidance",
                PersonText::Result => "the result",
                PersonText::Reason => "the reason",
            },
            size: text.len(),
            limit: self.guidance,
            key: "limits.guidance",
            env: "LEASEHOLD_LIMITS_GUIDANCE",
        })
    }

    /// The most bytes a flow's text (TOML or JSON, as posted or in a file)
    /// is read up to: twice the flow's limit, since TOML and escaped JSON
    /// may be longer than the JSON kept, and at least 1 MiB.
    pub fn flow_text(&self) -> usize {
        self.flow.saturating_mul(2).max(1 << 20)
    }
}

/// The length of `flow` as compact JSON, counted without keeping it.
fn json_size(flow: &Flow) -> usize {
    struct Count(usize);
    impl Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(bytes.len());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // A flow always serializes; were it not to, its size would be unknown
    // and it is refused as too large.
    match serde_json::to_writer(&mut count, flow) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(task: &str, system_prompt: &str) -> Flow {
        let mut flow = crate::flow_file::parse_json(
            &serde_json::json!({"name": "f", "task": task, "max_steps": 1}).to_string(),
        )
        .expect("a flow");
        flow.system_prompt = system_prompt.to_owned();
        flow
    }

    #[test]
    fn a_task_or_a_flow_past_its_limit_is_refused_naming_the_key() {
        let limits = RunLimits {
            task: 10,
            flow: 400,
            guidance: 5,
        };
        assert_eq!(limits.check_flow(&flow("short", "")), Ok(()));
        let task = limits.check_flow(&flow("eleven char", "")).unwrap_err();
        assert_eq!((task.key, task.size, task.limit), ("limits.task", 11, 10));
        let whole = limits
            .check_flow(&flow("short", &"p".repeat(400)))
            .unwrap_err();
        assert_eq!(whole.key, "limits.flow");
        assert!(whole.size > 400, "{whole}");
        assert!(
            whole.to_string().contains("LEASEHOLD_LIMITS_FLOW"),
            "{whole}"
        );
        let said = limits
            .check_text(PersonText::Guidance, "guidance")
            .unwrap_err();
        assert_eq!(
            said.to_string(),
            "the guidance is 8 bytes, more than the 5 bytes limits.guidance allows \
             (LEASEHOLD_LIMITS_GUIDANCE); nothing was stored"
        );
    }
}
