//! The MCP tool client: a flow's tool server — a stdio child process or a
//! streamable-HTTP endpoint — behind the [`ToolClient`](leasehold_actors::ToolClient)
//! port, on `rmcp`.
//!
//! The client needs the `mcp` feature (on by default; rmcp, process-wrap
//! and, on Linux, nix). The flow's [`ToolServer`](leasehold_actors::ToolServer)
//! declarations, `[[tools]]` in the configuration, [`DEFAULT_HANDSHAKE_TIMEOUT`]
//! and [`IDEMPOTENCY_KEY_META`] are in every build, for an embedder that
//! brings a tool client of its own.
//!
//! [`McpToolClient::for_server`] builds a client from a flow's
//! [`ToolServer`](leasehold_actors::ToolServer); nothing is started until the first
//! use (or [`McpToolClient::connect`]). What it guarantees:
//!
//! * **Progress is evidence.** Every `tools/call` carries a progress token,
//!   and each `notifications/progress` the server sends for it is reported as
//!   [`Evidence::progress`](leasehold_actors::Evidence::progress) with a note
//!   such as `"3/10"` (or the server's own message), so a slow tool that
//!   reports progress keeps its lease renewing without asking the evaluator.
//! * **The idempotency key reaches the tool.** A call's
//!   [`ToolInvocation::idempotency_key`](leasehold_actors::ToolInvocation) travels
//!   in the request's `_meta` under the key [`IDEMPOTENCY_KEY_META`]
//!   (`"leasehold/idempotency_key"`), the same on every retry and resume of
//!   the call, so a server can recognise a repeat:
//!
//!   ```json
//!   {"method": "tools/call", "params": {"name": "search", "arguments": {…},
//!    "_meta": {"progressToken": 3, "leasehold/idempotency_key": "run-1/step-4/0"}}}
//!   ```
//! * **A dropped call is cancelled on the server.** Dropping a call's future —
//!   which is how a lease's `INTERVENE`/`ESCALATE` or a parent's cancellation
//!   ends it — sends `notifications/cancelled` for the request and forgets
//!   it. A server may keep working after a cancel; the call's outcome is then
//!   unknown, which the runtime handles (reconciliation for non-idempotent
//!   tools).
//! * **No deadline on a call.** A call waits for its answer as long as its
//!   lease lets it: there is no request timeout. Only the handshake with a
//!   new server and the listing of its tools (`tools/list`), whose durations
//!   are known, have a flat bound each
//!   ([`McpToolClient::with_handshake_timeout`], default 30 s): a server that
//!   does not answer in time fails with an error naming it and the bound,
//!   and is stopped.
//! * **A server that dies is reported, then restarted.** A server that exits
//!   or drops its connection fails the calls in flight — and, if none was in
//!   flight, the next call — with a [`ToolError`](leasehold_actors::ToolError) that
//!   names the server and says it exited (`retryable: true`); the use after
//!   that starts a stdio server again, or opens a new HTTP session.
//! * **A message over the library's limit ends the call at once.** rmcp
//!   takes at most [`MAX_MESSAGE_BYTES`] (16 MiB) in one message. A stdio
//!   server's line that reaches it closes the connection the moment it does
//!   (rmcp alone would drop the line and leave the call waiting until its
//!   lease ran out): the calls in flight fail with an error naming the
//!   limit, `retryable: false` (the same call would be as large again; the
//!   model sees the error), and the server is restarted on the next call. A
//!   streamable-HTTP answer over the limit, a JSON body or one SSE event,
//!   ends its request at once too, with an error that names the limit.
//!   Smaller results are capped by the engine
//!   ([`EngineConfig::max_tool_result_bytes`](leasehold_actors::EngineConfig::max_tool_result_bytes),
//!   1 MiB by default), whatever the tool client.
//! * **A run's servers end with it.** A stdio server runs in a process group
//!   of its own (so a launcher such as `npx` takes its children with it), and
//!   the whole group is killed by [`McpToolClient::shutdown`] and when the
//!   client is dropped.
//! * **A server dies with its process, even by SIGKILL.** On Linux a stdio
//!   server is started with the parent-death signal set to SIGKILL, from a
//!   thread that lives as long as the process; what the server started in
//!   turn is recorded in the data directory's [`ToolGroups`] ledger (the
//!   CLI's clients keep one) and killed by [`reap_leftover_groups`] at the
//!   next start on that data directory.
//!
//! Results: the text blocks of a tool's result are joined with newlines
//! (other blocks are named in brackets, e.g. `[image/png image]`); a result
//! with `isError` becomes a [`ToolOutput`](leasehold_actors::ToolOutput) with
//! `is_error: true`, which the model sees. Errors: a connection or transport
//! failure is `retryable: true`; a JSON-RPC error from the server (unknown
//! method, invalid request or params) is `retryable: false`, except an
//! internal error, which may pass.
//!
//! Tool definitions: [`list_tools`](leasehold_actors::ToolClient::list_tools)
//! returns the server's tools with their description and input schema;
//! `idempotent` is the flow's `idempotent` entry for the tool if it has one,
//! else the tool's `idempotentHint` annotation, else `true` for a tool
//! annotated `readOnlyHint: true`, else unknown.
//!
//! ```no_run
//! use std::sync::Arc;
//! use leasehold::Evidence;
//! use leasehold::ToolServer;
//! use leasehold::{ToolClient, ToolInvocation};
//! use leasehold::tools::McpToolClient;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server: ToolServer = serde_json::from_value(serde_json::json!({
//!     "name": "everything",
//!     "command": ["npx", "-y", "@modelcontextprotocol/server-everything", "stdio"],
//! }))?;
//! let client = Arc::new(McpToolClient::for_server(&server)?);
//! let tools = client.list_tools().await?;
//! let output = client
//!     .call(
//!         ToolInvocation {
//!             name: "echo".into(),
//!             arguments: serde_json::json!({"message": "hi"}),
//!             idempotency_key: "run-1/step-1/0".into(),
//!             traceparent: None,
//!         },
//!         Evidence::detached(),
//!     )
//!     .await?;
//! assert_eq!(output.content, "Echo: hi");
//! # let _ = tools;
//! client.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

#[cfg(feature = "mcp")]
mod bounded;
#[cfg(feature = "mcp")]
mod client;
#[cfg(feature = "mcp")]
mod connection;
#[cfg(feature = "mcp")]
mod convert;
#[cfg(feature = "mcp")]
mod groups;
#[cfg(feature = "mcp")]
mod http;
#[cfg(feature = "mcp")]
mod progress;
#[cfg(feature = "mcp")]
mod spawner;

#[cfg(feature = "mcp")]
pub use bounded::MAX_MESSAGE_BYTES;
#[cfg(feature = "mcp")]
pub use client::{McpConfigError, McpToolClient};
#[cfg(feature = "mcp")]
pub use groups::{Reaped, ToolGroups, reap_leftover_groups};

/// How long a new server has to complete the MCP handshake, and to answer
/// `tools/list`, unless set with `McpToolClient::with_handshake_timeout`.
/// The default of `mcp.handshake_timeout`, which the configuration parses
/// in every build.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The `_meta` key that carries a call's idempotency key to the tool server.
pub const IDEMPOTENCY_KEY_META: &str = "leasehold/idempotency_key";
