//! `McpToolClient`: the tool port on one MCP server, with the connection
//! kept, replaced when it dies, and cancelled calls told to the server.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold_actors::{
    BoxFuture, Evidence, ToolClient, ToolDefinition, ToolError, ToolInvocation, ToolOutput,
    ToolServer,
};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientNotification, ClientRequest, MetaObject, ProgressToken, RequestId, RequestMetaObject,
    ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient};

use super::connection::{Connection, Endpoint, Target};
use super::convert::{Failure, classify, tool_definition, tool_output};
use super::groups::ToolGroups;
use super::progress::ProgressRoutes;
use super::{DEFAULT_HANDSHAKE_TIMEOUT, IDEMPOTENCY_KEY_META};
use crate::secret::Secrets;

/// The reason sent with `notifications/cancelled`.
const CANCEL_REASON: &str = "cancelled by leasehold: the call's lease or its run ended it";

/// A tool server a client cannot be built for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("MCP server '{server}' cannot be used: {message}")]
pub struct McpConfigError {
    /// The server's name in the flow.
    pub server: String,
    /// What is wrong with its entry.
    pub message: String,
}

/// A [`ToolClient`] on one MCP server, over stdio or streamable HTTP.
///
/// Not `Clone`: share it as an `Arc`. Dropping it kills its stdio server.
/// See the [module documentation](crate::tools) for what it guarantees.
pub struct McpToolClient {
    shared: Arc<Shared>,
}

#[derive(Clone)]
struct Settings {
    name: Arc<str>,
    endpoint: Endpoint,
    /// What the declaration holds in secret: hidden from every error.
    secrets: Secrets,
    idempotent: BTreeMap<String, bool>,
    handshake_timeout: Duration,
    groups: Option<Arc<ToolGroups>>,
}

struct Shared {
    settings: Settings,
    live: Mutex<Option<Arc<Connection>>>,
    /// Held while a connection is opened, so concurrent first calls start
    /// one server, not several.
    opening: tokio::sync::Mutex<()>,
    /// Set when the client is dropped: calls still in flight may finish,
    /// but nothing is started again.
    dropped: AtomicBool,
}

impl std::fmt::Debug for McpToolClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpToolClient")
            .field("name", &self.shared.settings.name)
            .field("endpoint", &self.shared.settings.endpoint)
            .field("pid", &self.server_pid())
            .finish_non_exhaustive()
    }
}

impl McpToolClient {
    /// A client for a flow's tool server: `command` (program and arguments,
    /// with `env` added to this process's environment) for a stdio server,
    /// or `url` for a streamable-HTTP one. Starts nothing yet.
    pub fn for_server(server: &ToolServer) -> Result<Self, McpConfigError> {
        let refuse = |message: &str| McpConfigError {
            server: server.name.clone(),
            message: message.to_owned(),
        };
        let endpoint = match (&server.command, &server.url) {
            (Some(command), None) => {
                let (program, args) = command
                    .split_first()
                    .ok_or_else(|| refuse("`command` is empty"))?;
                if program.value().is_empty() {
                    return Err(refuse("`command` names no program"));
                }
                Endpoint::Stdio {
                    program: program.value().to_owned(),
                    args: args.to_vec(),
                    env: server.env.clone(),
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(refuse("`url` must start with http:// or https://"));
                }
                Endpoint::Http { url: url.clone() }
            }
            (Some(_), Some(_)) => return Err(refuse("it has both `command` and `url`")),
            (None, None) => return Err(refuse("it has neither `command` nor `url`")),
        };
        let secrets = Secrets::of_server(server);
        // A library's own log line may quote them (an HTTP error names the
        // URL it failed on).
        crate::secret::hide_in_logs(&secrets);
        Ok(Self::with_settings(Settings {
            name: Arc::from(server.name.as_str()),
            endpoint,
            secrets,
            idempotent: server.idempotent.clone(),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            groups: None,
        }))
    }

    fn with_settings(settings: Settings) -> Self {
        Self {
            shared: Arc::new(Shared {
                settings,
                live: Mutex::new(None),
                opening: tokio::sync::Mutex::new(()),
                dropped: AtomicBool::new(false),
            }),
        }
    }

    /// Bounds the MCP handshake with a new server, and then each
    /// `tools/list` (all its pages) on its own (default
    /// [`DEFAULT_HANDSHAKE_TIMEOUT`]). Set it before first use: a server
    /// already started is stopped.
    pub fn with_handshake_timeout(self, timeout: Duration) -> Self {
        let mut settings = self.shared.settings.clone();
        settings.handshake_timeout = timeout;
        Self::with_settings(settings)
    }

    /// Records each stdio server it starts in `groups`, a data directory's
    /// ledger, so that what the server started is killed at the next start
    /// if this process is killed (see [`ToolGroups`]). Set it before first
    /// use: a server already started is stopped.
    pub fn with_tool_groups(self, groups: Arc<ToolGroups>) -> Self {
        let mut settings = self.shared.settings.clone();
        settings.groups = Some(groups);
        Self::with_settings(settings)
    }

    /// An engine's tool factory: for each run, an MCP client of each tool
    /// server its flow declares, its handshake bounded by `handshake`.
    pub fn factory(handshake: Duration) -> leasehold_actors::ToolFactory {
        Self::factory_recorded(handshake, None)
    }

    /// [`McpToolClient::factory`], each stdio server recorded in `groups`
    /// when given ([`McpToolClient::with_tool_groups`]).
    pub fn factory_recorded(
        handshake: Duration,
        groups: Option<Arc<ToolGroups>>,
    ) -> leasehold_actors::ToolFactory {
        Arc::new(move |server: &ToolServer| {
            Self::for_server(server)
                .map(|client| {
                    let client = client.with_handshake_timeout(handshake);
                    let client = match &groups {
                        Some(groups) => client.with_tool_groups(groups.clone()),
                        None => client,
                    };
                    Arc::new(client) as Arc<dyn leasehold_actors::ToolClient>
                })
                .map_err(|e| e.to_string())
        })
    }

    /// The server's name in the flow.
    pub fn name(&self) -> &str {
        &self.shared.settings.name
    }

    /// Starts the server (or opens the session) now rather than at the first
    /// call, so that the first call's lease does not pay for the start.
    pub async fn connect(&self) -> Result<(), ToolError> {
        let connected = self.shared.connection(Request::Connect).await;
        connected.map(drop).map_err(|e| self.shared.hidden(e))
    }

    /// The process id of the running stdio server, if there is one.
    pub fn server_pid(&self) -> Option<u32> {
        self.shared.current().and_then(|c| c.pid())
    }

    /// Kills the stdio server's process group (or ends the HTTP session) and
    /// waits for it. Calls in flight fail; a later call starts the server
    /// again.
    pub async fn shutdown(&self) {
        let connection = self.shared.take();
        if let Some(connection) = connection {
            connection.close().await;
        }
    }
}

impl Drop for McpToolClient {
    fn drop(&mut self) {
        self.shared.dropped.store(true, Ordering::SeqCst);
        if let Some(connection) = self.shared.take() {
            connection.stop_now();
        }
    }
}

impl ToolClient for McpToolClient {
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>> {
        let shared = self.shared.clone();
        Box::pin(async move { shared.list_tools().await.map_err(|e| shared.hidden(e)) })
    }

    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let shared = self.shared.clone();
        Box::pin(async move {
            let called = shared.call(invocation, evidence).await;
            called.map_err(|e| shared.hidden(e))
        })
    }

    fn shutdown(&self) -> BoxFuture<'static, ()> {
        let connection = self.shared.take();
        Box::pin(async move {
            if let Some(connection) = connection {
                connection.close().await;
            }
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// `error` as it may leave the client: it ends up in events, failure
    /// reasons and the model's context, none of which may hold a secret of
    /// the declaration (an HTTP library's error names the URL it used).
    fn hidden(&self, mut error: ToolError) -> ToolError {
        error.message = self.settings.secrets.scrub(&error.message);
        error
    }

    fn current(&self) -> Option<Arc<Connection>> {
        lock(&self.live).clone()
    }

    fn take(&self) -> Option<Arc<Connection>> {
        lock(&self.live).take()
    }

    /// Forgets `connection` if it is still the current one, so the next use
    /// opens a new one; stops it.
    fn discard(&self, connection: &Arc<Connection>) {
        let mut live = lock(&self.live);
        if live.as_ref().is_some_and(|c| Arc::ptr_eq(c, connection)) {
            live.take();
        }
        drop(live);
        connection.stop_now();
    }

    /// The live connection, opening one if there is none. A connection found
    /// dead is reported once, as this use's error; the next use opens a new
    /// one.
    async fn connection(&self, request: Request) -> Result<Arc<Connection>, ToolError> {
        if let Some(connection) = self.alive(request).await? {
            return Ok(connection);
        }
        let _opening = self.opening.lock().await;
        if let Some(connection) = self.alive(request).await? {
            return Ok(connection);
        }
        if self.dropped.load(Ordering::SeqCst) {
            return Err(ToolError::new(
                format!(
                    "MCP server '{}': its client was dropped",
                    self.settings.name
                ),
                false,
            ));
        }
        let connection = Connection::open(Target {
            server: &self.settings.name,
            endpoint: &self.settings.endpoint,
            handshake_timeout: self.settings.handshake_timeout,
            groups: self.settings.groups.as_ref(),
        })
        .await
        .map_err(|message| ToolError::new(message, true))?;
        let connection = Arc::new(connection);
        *lock(&self.live) = Some(connection.clone());
        Ok(connection)
    }

    /// The current connection if it is alive; `Ok(None)` if there is none;
    /// the error that says why if it died.
    async fn alive(&self, request: Request) -> Result<Option<Arc<Connection>>, ToolError> {
        let Some(connection) = self.current() else {
            return Ok(None);
        };
        if connection.is_alive() {
            return Ok(Some(connection));
        }
        let message = connection.failure("the connection closed").await;
        self.discard(&connection);
        Err(ToolError::new(
            self.explain(message, request, Sent::No),
            true,
        ))
    }

    fn explain(&self, what: String, request: Request, sent: Sent) -> String {
        let again = match self.settings.endpoint {
            Endpoint::Stdio { .. } => "it is restarted on the next call",
            Endpoint::Http { .. } => "it is reconnected on the next call",
        };
        match (request, sent) {
            (Request::Call, Sent::No) => format!("{what}; the call was not sent; {again}"),
            (Request::Call, Sent::Yes) => {
                format!("{what}; the call's outcome is unknown; {again}")
            }
            (Request::Connect | Request::ListTools, _) => format!("{what}; {again}"),
        }
    }

    /// The error for a request that failed on `connection`: a transport
    /// failure replaces the connection; a refusal leaves it.
    async fn failed(
        &self,
        connection: &Arc<Connection>,
        error: &rmcp::ServiceError,
        request: Request,
        sent: Sent,
        what: &str,
    ) -> ToolError {
        match classify(error) {
            Failure::Transport { detail, refused } => {
                let sent = if refused { Sent::No } else { sent };
                let message = connection.failure(&detail).await;
                // A message over the limit would be over it again: the
                // model sees the error rather than a retry.
                let retryable = !connection.overflowed();
                self.discard(connection);
                ToolError::new(self.explain(message, request, sent), retryable)
            }
            Failure::Refused { message, retryable } => ToolError::new(
                format!(
                    "MCP server '{}' refused {what}: {message}",
                    self.settings.name
                ),
                retryable,
            ),
        }
    }

    async fn list_tools(&self) -> Result<Vec<ToolDefinition>, ToolError> {
        let connection = self.connection(Request::ListTools).await?;
        let bound = self.settings.handshake_timeout;
        let Ok(listed) = tokio::time::timeout(bound, connection.peer().list_all_tools()).await
        else {
            // A server that does not list its tools in the time a handshake
            // may take is not serving: the next use starts it again.
            self.discard(&connection);
            return Err(ToolError::new(
                self.explain(
                    format!(
                        "MCP server '{}' did not answer `tools/list` within {} ms (its \
                         handshake timeout)",
                        self.settings.name,
                        bound.as_millis()
                    ),
                    Request::ListTools,
                    Sent::Yes,
                ),
                true,
            ));
        };
        match listed {
            Ok(tools) => Ok(tools
                .into_iter()
                .map(|tool| tool_definition(tool, &self.settings.idempotent))
                .collect()),
            Err(error) => Err(self
                .failed(
                    &connection,
                    &error,
                    Request::ListTools,
                    Sent::Yes,
                    "to list its tools",
                )
                .await),
        }
    }

    async fn call(
        &self,
        invocation: ToolInvocation,
        evidence: Evidence,
    ) -> Result<ToolOutput, ToolError> {
        let ToolInvocation {
            name,
            arguments,
            idempotency_key,
            traceparent,
        } = invocation;
        let arguments = match arguments {
            serde_json::Value::Object(map) => Some(map),
            serde_json::Value::Null => None,
            other => {
                return Err(ToolError::new(
                    format!("the arguments of tool '{name}' must be a JSON object, not {other}"),
                    false,
                ));
            }
        };
        let connection = self.connection(Request::Call).await?;
        let mut params = CallToolRequestParams::new(name.clone());
        params.arguments = arguments;
        let mut meta = MetaObject::new();
        meta.insert(
            IDEMPOTENCY_KEY_META.to_owned(),
            serde_json::Value::String(idempotency_key),
        );
        // The attempt's place in its run's trace (W3C trace context in
        // `_meta`, as MCP's OpenTelemetry conventions carry it).
        if let Some(traceparent) = traceparent {
            meta.insert(
                "traceparent".to_owned(),
                serde_json::Value::String(traceparent),
            );
        }
        let options = PeerRequestOptions::no_options().with_meta(RequestMetaObject(meta));
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let what = format!("the call to tool '{name}'");
        let handle = match connection
            .peer()
            .send_request_with_option(request, options)
            .await
        {
            Ok(handle) => handle,
            Err(error) => {
                return Err(self
                    .failed(&connection, &error, Request::Call, Sent::No, &what)
                    .await);
            }
        };
        let mut in_flight = InFlight::start(
            connection.peer().clone(),
            connection.routes().clone(),
            handle.id.clone(),
            handle.progress_token.clone(),
            evidence,
        );
        let answer = handle.await_response().await;
        in_flight.answered();
        match answer {
            Ok(ServerResult::CallToolResult(result)) => Ok(tool_output(result)),
            // A result with nothing in it decodes as an empty one.
            Ok(ServerResult::EmptyResult(_)) => Ok(ToolOutput::default()),
            Ok(_) => Err(self
                .failed(
                    &connection,
                    &rmcp::ServiceError::UnexpectedResponse,
                    Request::Call,
                    Sent::Yes,
                    &what,
                )
                .await),
            Err(error) => Err(self
                .failed(&connection, &error, Request::Call, Sent::Yes, &what)
                .await),
        }
    }
}

/// What a failing use of the connection was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Request {
    Connect,
    ListTools,
    Call,
}

/// Whether a failed request had reached the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    No,
    Yes,
}

/// A call sent and not yet answered: routes its progress to its evidence
/// and, if dropped before the answer, tells the server it is cancelled.
struct InFlight {
    peer: Peer<RoleClient>,
    routes: Arc<ProgressRoutes>,
    id: RequestId,
    token: ProgressToken,
    answered: bool,
}

impl InFlight {
    fn start(
        peer: Peer<RoleClient>,
        routes: Arc<ProgressRoutes>,
        id: RequestId,
        token: ProgressToken,
        evidence: Evidence,
    ) -> Self {
        routes.register(token.clone(), evidence);
        Self {
            peer,
            routes,
            id,
            token,
            answered: false,
        }
    }

    fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.routes.unregister(&self.token);
        if self.answered {
            return;
        }
        let notification = ClientNotification::CancelledNotification(CancelledNotification::new(
            CancelledNotificationParam::new(Some(self.id.clone()), Some(CANCEL_REASON.to_owned())),
        ));
        let peer = self.peer.clone();
        let id = self.id.clone();
        // Dropped inside the task that ran the call, so a runtime is there;
        // outside one there is no connection left to tell.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = peer.send_notification(notification).await {
                    tracing::debug!(%id, %error, "could not send notifications/cancelled");
                }
            });
        }
    }
}
