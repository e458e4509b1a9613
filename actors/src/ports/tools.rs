//! The tool port: the tools a client offers and one call of one of them.

use serde::{Deserialize, Serialize};

use super::BoxFuture;

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The JSON schema of its arguments.
    pub input_schema: serde_json::Value,
    /// Whether calling it twice with the same arguments is harmless, where
    /// known (MCP's `idempotentHint`, or the flow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
}

/// One call of a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolInvocation {
    /// The tool's name.
    pub name: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
    /// The same across retries and resumes of this call, so a tool can
    /// recognise a repeat.
    pub idempotency_key: String,
    /// The W3C `traceparent` of this attempt in its run's trace, for the
    /// tool server (an MCP client sends it in `_meta`); none outside a
    /// run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A tool's result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// What the tool returned, as text for the model.
    pub content: String,
    /// Whether the tool itself reported an error (the model sees it).
    pub is_error: bool,
}

/// A tool call that could not be made or did not return.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tool call failed: {message}")]
pub struct ToolError {
    /// What happened.
    pub message: String,
    /// Whether trying again may help.
    pub retryable: bool,
}

impl ToolError {
    /// A failure with `message`.
    pub fn new(message: impl Into<String>, retryable: bool) -> Self {
        Self {
            message: message.into(),
            retryable,
        }
    }
}

/// A tool client (an MCP server, or in-process tools). Implementations report
/// each progress notification into `evidence`: it is what renews the call's
/// lease. The `leasehold` crate has an MCP client; the `own_ports` example
/// writes one from scratch.
///
/// ```
/// use std::time::Duration;
/// use leasehold_actors::prelude::*;
///
/// /// One tool, `count`, that counts to its argument, a second a step.
/// struct Counter;
///
/// impl ToolClient for Counter {
///     fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>> {
///         Box::pin(async {
///             Ok(vec![ToolDefinition {
///                 name: "count".to_owned(),
///                 description: "Counts to n, a second a step.".to_owned(),
///                 input_schema: serde_json::json!({"type": "object"}),
///                 idempotent: Some(true),
///             }])
///         })
///     }
///
///     fn call(
///         &self,
///         invocation: ToolInvocation,
///         evidence: Evidence,
///     ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
///         Box::pin(async move {
///             let n = invocation.arguments["n"].as_u64().ok_or_else(|| ToolError::new("no n", false))?;
///             for i in 1..=n {
///                 tokio::time::sleep(Duration::from_secs(1)).await;
///                 // Advancing progress renews the lease without a judge.
///                 evidence.progress_value(i as f64, Some(n as f64), format!("{i} of {n}"));
///             }
///             Ok(ToolOutput { content: format!("counted to {n}"), is_error: false })
///         })
///     }
/// }
/// ```
pub trait ToolClient: Send + Sync + 'static {
    /// The tools it offers.
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>>;
    /// Calls one tool.
    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: crate::supervision::evidence::Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>>;

    /// Stops whatever the client started (a child process, a session). The
    /// engine calls it when the run that owns the client ends; the default
    /// does nothing.
    fn shutdown(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}
