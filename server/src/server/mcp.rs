//! `/mcp`: this server's runs as the tools of a Model Context Protocol
//! server over streamable HTTP, for agents that speak MCP rather than the
//! HTTP API.
//!
//! The tools ([`tools`]) start a run, read it, wait for its events, answer
//! its pause, steer it and cancel it. Each is the HTTP route it stands for
//! under another name: it calls the route's own code (`api.rs`,
//! `by_hand.rs`, `events.rs`), so every rule — the flow's checks, the
//! person's texts' limits, the executor's controls — is the route's, and
//! so is every refusal, handed back as a tool error (`isError: true`) with
//! the route's status and `{"code", "message"}`.
//!
//! **Who asks** is decided before MCP: `/mcp` is a route behind the guard
//! (`guard.rs`) like every other, so its `Host`, its `Origin` (the MCP
//! specification's defence against DNS rebinding) and its key are checked
//! as the API's are, and a missing, unknown or revoked key is the API's
//! 401. The key's scope is asked by each tool, as the route it stands for
//! needs it (`read` to read and wait, `operate` for the rest), and a run of
//! another tenant is the same "not found" as a run that does not exist.
//!
//! **Bounded like the API.** A request's body is read within the API's
//! limits (`server.max_body`, `server.body_timeout`) before MCP sees it.
//! The server keeps no MCP session: every request is served on its own
//! (streamable HTTP's stateless mode), so a client holds nothing here
//! between requests and many clients hold no more than their open
//! connections (`server.max_connections`). A wait for events holds a place
//! among the open event streams (`server.max_event_streams`) and lasts at
//! most a minute.

mod tools;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::Value;

use super::App;
use super::caller::Caller;
use super::error::{ApiError, ErrorBody};

/// The MCP service of `app`'s runs.
pub(super) type McpService = StreamableHttpService<RunTools, NeverSessionManager>;

/// The MCP service of `app`'s runs, without sessions, ended when the
/// server shuts down.
pub(super) fn service(app: &Arc<App>) -> McpService {
    let tools = RunTools {
        app: Arc::clone(app),
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        // The guard has checked the `Host` and the `Origin` as the API's.
        .disable_allowed_hosts()
        .with_max_request_body_bytes(app.options.max_body)
        .with_sse_keep_alive(Some(app.options.keep_alive))
        .with_cancellation_token(app.shutdown.child_token());
    StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// `POST /mcp`: the request's body read as the API reads one (at most
/// `server.max_body` bytes, within `server.body_timeout`), then handed to
/// the MCP service with the caller the guard found. What the service
/// refuses before reading a message (a client that does not accept its
/// answers, a body that is no JSON-RPC message) is answered as the API
/// answers an error, its text kept.
#[utoipa::path(post, path = "/mcp", tag = "mcp",
    request_body(content = serde_json::Value, content_type = "application/json",
        description = "One MCP JSON-RPC message (streamable HTTP, without sessions); the client must accept `application/json` and `text/event-stream`"),
    responses(
        (status = 200, description = "The JSON-RPC answer to a request", body = serde_json::Value, content_type = "application/json"),
        (status = 202, description = "A notification or an answer, taken"),
        (status = 406, description = "`not_acceptable`: the client does not accept both `application/json` and `text/event-stream`", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body came slower than `server.body_timeout`", body = ErrorBody),
        (status = 413, description = "`body_too_large`: the body is over `server.max_body`", body = ErrorBody),
        (status = 415, description = "`invalid_mcp_message`: the body is not a JSON-RPC message as JSON", body = ErrorBody),
    ))]
pub(super) async fn endpoint(
    State(app): State<Arc<App>>,
    service: McpService,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match super::api::read_body(&app, body).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused.into_response(),
    };
    let request = Request::from_parts(parts, Body::from(bytes));
    let answer = service.handle(request).await.into_response();
    let status = answer.status();
    if !status.is_client_error()
        || answer
            .headers()
            .contains_key(axum::http::header::CONTENT_TYPE)
    {
        return answer;
    }
    // The service's own refusal, a line of text: said as the API says one.
    let text = axum::body::to_bytes(answer.into_body(), 4096)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let code = if status == StatusCode::NOT_ACCEPTABLE {
        "not_acceptable"
    } else {
        "invalid_mcp_message"
    };
    ApiError::new(status, code, format!("/mcp: {text}")).into_response()
}

/// The tools' handler: one per request, all on the same server.
#[derive(Clone)]
pub(super) struct RunTools {
    app: Arc<App>,
}

impl ServerHandler for RunTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("leasehold", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "leasehold's runs: start_run starts a flow; wait_events follows its events from a \
                 cursor; a run that pauses for a person (status waiting_human) is answered with \
                 answer_pause; steer sends it a message; cancel stops it; get_run reads it.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::all()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::all().into_iter().find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller_of(&context)?;
        let arguments = request.arguments.unwrap_or_default();
        let answer = tools::call(&self.app, &caller, &request.name, arguments).await?;
        Ok(match answer {
            Ok(value) => CallToolResult::structured(value),
            Err(refused) => CallToolResult::structured_error(refused),
        }
        .into())
    }
}

/// The caller the guard found for the HTTP request that carried the call.
fn caller_of(context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| {
            ErrorData::internal_error("the call reached /mcp without the guard's caller", None)
        })
}

/// A tool error of a refusal: the route's status and `{"code", "message"}`.
fn refusal(error: &ApiError) -> Value {
    refused(error.status, error.code, &error.message)
}

fn refused(status: StatusCode, code: &str, message: &str) -> Value {
    serde_json::json!({
        "status": status.as_u16(),
        "error": {"code": code, "message": message},
    })
}

/// A route's answer as a tool's: its JSON body, or for a 4xx or 5xx, the
/// refusal it carries.
async fn answered(response: Result<Response, ApiError>) -> Result<Value, Value> {
    let response = response.map_err(|error| refusal(&error))?;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .map_err(|e| {
            refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                &format!("the answer could not be read: {e}"),
            )
        })?;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if status.is_client_error() || status.is_server_error() {
        let error = &body["error"];
        return Err(refused(
            status,
            error["code"].as_str().unwrap_or("refused"),
            error["message"].as_str().unwrap_or_default(),
        ));
    }
    Ok(body)
}
