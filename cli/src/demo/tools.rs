//! The demo's MCP tool server, over streamable HTTP: three operations tools
//! that each behave in one telling way.
//!
//! - `search_logs` is slow but visibly alive: it takes 1.2 s and sends an MCP
//!   progress notification every 100 ms, which leasehold's client reports to
//!   the call's lease as evidence.
//! - `fetch_metrics` hangs silently on its first call for a given
//!   idempotency key, and answers at once when the call is retried with the
//!   same key.
//! - `rollback_deploy` changes production and goes silent.
//!
//! Every idempotency key a call carries (in `_meta`, under
//! [`IDEMPOTENCY_KEY_META`]) is recorded with its tool, so the demo can show
//! that a retry reused its key.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use tokio_util::sync::CancellationToken;

use super::flow::{FETCH_METRICS, ROLLBACK_DEPLOY, SEARCH_LOGS};
use leasehold::tools::IDEMPOTENCY_KEY_META;

/// How many shards a log search goes through, one progress notification
/// each.
const SEARCH_SHARDS: u32 = 12;

/// The time one shard takes: a search lasts `SEARCH_SHARDS × SHARD_TIME`.
const SHARD_TIME: Duration = Duration::from_millis(100);

/// How long a metrics fetch takes when it answers.
const METRICS_TIME: Duration = Duration::from_millis(150);

/// The idempotency keys the server has seen, in order, with their tools.
#[derive(Debug, Default)]
pub(crate) struct KeyRecord {
    seen: Mutex<Vec<(String, String)>>,
}

impl KeyRecord {
    /// Records `key` for `tool`; returns how many times it was seen before.
    fn record(&self, tool: &str, key: &str) -> usize {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let before = seen.iter().filter(|(_, k)| k == key).count();
        seen.push((tool.to_owned(), key.to_owned()));
        before
    }

    /// Every (tool, key) seen, in order.
    pub(crate) fn snapshot(&self) -> Vec<(String, String)> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The MCP server's handler: one per session, all sharing one record.
#[derive(Clone)]
pub(crate) struct DemoTools {
    keys: Arc<KeyRecord>,
    /// Cancelled when the demo's servers shut down: a hanging call ends.
    shutdown: CancellationToken,
}

impl DemoTools {
    /// The tool server as a service to mount under `/mcp`, its sessions
    /// ended when `shutdown` is cancelled.
    pub(crate) fn service(
        keys: Arc<KeyRecord>,
        shutdown: &CancellationToken,
    ) -> StreamableHttpService<DemoTools, LocalSessionManager> {
        let handler = DemoTools {
            keys,
            shutdown: shutdown.clone(),
        };
        let config = StreamableHttpServerConfig::default()
            .with_cancellation_token(shutdown.child_token())
            .with_sse_keep_alive(Some(Duration::from_secs(5)));
        StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        )
    }

    /// Waits until the call is cancelled by its client or the server shuts
    /// down.
    async fn silence(&self, context: &RequestContext<RoleServer>) {
        tokio::select! {
            () = context.ct.cancelled() => {}
            () = self.shutdown.cancelled() => {}
        }
    }

    /// Sleeps `time` unless the call is cancelled first; `false` if it was.
    async fn work(&self, context: &RequestContext<RoleServer>, time: Duration) -> bool {
        tokio::select! {
            () = context.ct.cancelled() => false,
            () = self.shutdown.cancelled() => false,
            () = tokio::time::sleep(time) => true,
        }
    }

    async fn search_logs(
        &self,
        arguments: &JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let query = string_argument(arguments, SEARCH_LOGS, "query")?;
        let token = context.meta.get_progress_token();
        for shard in 1..=SEARCH_SHARDS {
            if !self.work(context, SHARD_TIME).await {
                return Err(cancelled(SEARCH_LOGS));
            }
            if let Some(token) = &token {
                let progress = ProgressNotificationParam::new(token.clone(), f64::from(shard))
                    .with_total(f64::from(SEARCH_SHARDS))
                    .with_message(format!("searched shard {shard} of {SEARCH_SHARDS}"));
                // A client that went away cannot be told; the search goes on
                // until its cancellation arrives.
                let _ = context.peer.notify_progress(progress).await;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(
            search_result(query),
        )]))
    }

    async fn fetch_metrics(
        &self,
        arguments: &JsonObject,
        key: Option<&str>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let series = string_argument(arguments, FETCH_METRICS, "series")?;
        let seen_before = key.map(|key| self.keys.record(FETCH_METRICS, key));
        if seen_before == Some(0) {
            // The first call for this key: silence, no progress, no answer.
            self.silence(context).await;
            return Err(cancelled(FETCH_METRICS));
        }
        if !self.work(context, METRICS_TIME).await {
            return Err(cancelled(FETCH_METRICS));
        }
        let repeat = match seen_before {
            Some(n) => format!(" (call {} with this idempotency key)", n + 1),
            None => String::new(),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{series}: 1.1 s until 13:58, 2.3 s from 14:00; DB connection wait ×4{repeat}"
        ))]))
    }

    async fn rollback_deploy(
        &self,
        arguments: &JsonObject,
        key: Option<&str>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        string_argument(arguments, ROLLBACK_DEPLOY, "service")?;
        if let Some(key) = key {
            self.keys.record(ROLLBACK_DEPLOY, key);
        }
        // The production change goes silent: no progress, no answer.
        self.silence(context).await;
        Err(cancelled(ROLLBACK_DEPLOY))
    }
}

impl ServerHandler for DemoTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "leasehold-demo-tools",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "The leasehold demo's operations tools: a slow log search that reports \
                 progress, a metrics fetch that hangs on its first call, and a production \
                 rollback that goes silent.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = idempotency_key(&request, &context);
        let arguments = request.arguments.clone().unwrap_or_default();
        let result = match request.name.as_ref() {
            SEARCH_LOGS => {
                if let Some(key) = &key {
                    self.keys.record(SEARCH_LOGS, key);
                }
                self.search_logs(&arguments, &context).await
            }
            FETCH_METRICS => {
                self.fetch_metrics(&arguments, key.as_deref(), &context)
                    .await
            }
            ROLLBACK_DEPLOY => {
                self.rollback_deploy(&arguments, key.as_deref(), &context)
                    .await
            }
            other => Err(ErrorData::invalid_params(
                format!(
                    "there is no tool named `{other}`: this server has {SEARCH_LOGS}, \
                     {FETCH_METRICS} and {ROLLBACK_DEPLOY}"
                ),
                None,
            )),
        }?;
        Ok(result.into())
    }
}

/// The idempotency key of a call: in the request's `_meta`, which the
/// service hands over in the context (or, failing that, in the parameters).
fn idempotency_key(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Option<String> {
    let from_context = context.meta.get(IDEMPOTENCY_KEY_META);
    let from_params = request
        .meta
        .as_ref()
        .and_then(|meta| meta.get(IDEMPOTENCY_KEY_META));
    from_context
        .or(from_params)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

/// The string argument `name` of a call to `tool`, or a refusal naming it.
fn string_argument<'a>(
    arguments: &'a JsonObject,
    tool: &str,
    name: &str,
) -> Result<&'a str, ErrorData> {
    match arguments.get(name) {
        Some(serde_json::Value::String(value)) if !value.trim().is_empty() => Ok(value),
        Some(other) => Err(ErrorData::invalid_params(
            format!("`{tool}` needs `{name}` to be a non-empty string, got {other}"),
            None,
        )),
        None => Err(ErrorData::invalid_params(
            format!("`{tool}` needs the argument `{name}` (a string)"),
            None,
        )),
    }
}

fn cancelled(tool: &str) -> ErrorData {
    ErrorData::internal_error(format!("`{tool}` was cancelled before it answered"), None)
}

/// What a log search finds, by what it looks for.
fn search_result(query: &str) -> String {
    let query_lower = query.to_ascii_lowercase();
    if query_lower.contains("pool") {
        format!(
            "38 lines match `{query}`; the first, at 13:59:12: \
             `checkout: db pool exhausted (5 of 5 connections in use)`"
        )
    } else if query_lower.contains("deploy") {
        format!(
            "2 lines match `{query}`; 13:58:03: \
             `deploy checkout v412: db.pool.max_size 20 -> 5`"
        )
    } else {
        format!(
            "412 lines match `{query}`; errors start at 13:59:12: \
             `checkout: timeout waiting for a db connection`"
        )
    }
}

/// A JSON schema of an object with the given string properties, all
/// required.
fn schema(properties: &[(&str, &str)]) -> JsonObject {
    let mut props = serde_json::Map::new();
    for (name, description) in properties {
        props.insert(
            (*name).to_owned(),
            serde_json::json!({"type": "string", "description": description}),
        );
    }
    let required: Vec<&str> = properties.iter().map(|(name, _)| *name).collect();
    let mut object = serde_json::Map::new();
    object.insert("type".to_owned(), serde_json::json!("object"));
    object.insert("properties".to_owned(), serde_json::Value::Object(props));
    object.insert("required".to_owned(), serde_json::json!(required));
    object
}

/// The server's tools.
fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            SEARCH_LOGS,
            "Search the service logs. Slow: reports progress shard by shard.",
            schema(&[("query", "what to look for")]),
        )
        .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true)),
        Tool::new(
            FETCH_METRICS,
            "Fetch one metrics series around the incident.",
            schema(&[("series", "the series, e.g. checkout.p99")]),
        )
        .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true)),
        Tool::new(
            ROLLBACK_DEPLOY,
            "Roll a service back to its previous release, in production.",
            schema(&[
                ("service", "the service to roll back"),
                ("to", "the release to go back to"),
            ]),
        )
        .with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(true)
                .idempotent(false),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_counts_earlier_sightings_of_a_key() {
        let record = KeyRecord::default();
        assert_eq!(record.record(FETCH_METRICS, "k1"), 0);
        assert_eq!(record.record(SEARCH_LOGS, "k2"), 0);
        assert_eq!(record.record(FETCH_METRICS, "k1"), 1);
        assert_eq!(record.snapshot().len(), 3);
    }

    #[test]
    fn every_tool_has_an_object_schema_and_hints() {
        for tool in tools() {
            assert_eq!(
                tool.input_schema.get("type"),
                Some(&serde_json::json!("object"))
            );
            assert!(tool.annotations.is_some(), "{}", tool.name);
        }
    }
}
