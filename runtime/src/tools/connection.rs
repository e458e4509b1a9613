//! One live connection to an MCP server: a stdio child process in a process
//! group of its own (started by the [spawner](super::spawner), recorded in
//! the data directory's [ledger](super::groups) when there is one), or a
//! streamable-HTTP session.
//!
//! A connection knows whether it is still alive (its transport is open and,
//! for a child, the child has not exited) and says why not in words that
//! name the server. Dropping it cancels its session and kills its child's
//! whole process group at once, without needing a runtime.

use std::collections::{BTreeMap, VecDeque};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold_actors::CommandArg;
use process_wrap::tokio::ChildWrapper;
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ServiceExt, service::ClientInitializeError};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::watch;

use super::bounded::{BoundedLines, MAX_MESSAGE_BYTES, Overflow};
use super::convert::handshake_detail;
use super::groups::{Recorded, ToolGroups};
use super::http::WatchedClient;
use super::progress::{Handler, ProgressRoutes};
use super::spawner::{self, Launch};

/// Lines of a child's standard error kept for error messages.
const STDERR_LINES: usize = 32;

/// The most of one line of a child's standard error that is kept (and
/// logged): a line that never ends costs no more.
const STDERR_LINE_BYTES: usize = 4096;

/// How long a failed request waits for a dying child's exit status, so the
/// error can say how it ended.
const EXIT_GRACE: Duration = Duration::from_millis(250);

/// Where a server lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Endpoint {
    /// A child process speaking MCP on its standard input and output.
    Stdio {
        program: String,
        args: Vec<CommandArg>,
        env: BTreeMap<String, String>,
    },
    /// A streamable-HTTP endpoint.
    Http { url: String },
}

impl Endpoint {
    /// The endpoint in words, for messages: the command line or the URL,
    /// their secrets hidden.
    pub(super) fn describe(&self) -> String {
        match self {
            Self::Stdio { program, args, .. } => {
                let mut line = program.clone();
                for arg in crate::secret::redact_command(args) {
                    line.push(' ');
                    line.push_str(&arg);
                }
                format!("`{line}`")
            }
            Self::Http { url } => crate::secret::redact_url(url),
        }
    }
}

/// What opening a connection needs.
pub(super) struct Target<'a> {
    pub(super) server: &'a str,
    pub(super) endpoint: &'a Endpoint,
    pub(super) handshake_timeout: Duration,
    /// Where a started stdio server is recorded, if anywhere.
    pub(super) groups: Option<&'a Arc<ToolGroups>>,
}

/// A live connection.
pub(super) struct Connection {
    server: Arc<str>,
    endpoint: Endpoint,
    peer: Peer<RoleClient>,
    service: Mutex<Option<RunningService<RoleClient, Handler>>>,
    routes: Arc<ProgressRoutes>,
    child: Option<ChildProcess>,
    /// Set when a stdio server's message went over [`MAX_MESSAGE_BYTES`].
    overflow: Overflow,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Connection {
    /// Starts the server (stdio) or opens a session (HTTP) and completes the
    /// MCP handshake within `handshake_timeout`.
    pub(super) async fn open(target: Target<'_>) -> Result<Self, String> {
        let routes = Arc::new(ProgressRoutes::default());
        let handler = Handler::new(routes.clone());
        let server: Arc<str> = Arc::from(target.server);
        let (service, child, overflow) = match target.endpoint {
            Endpoint::Stdio { program, args, env } => {
                let token = target.groups.map(|groups| groups.token());
                let launch = Launch {
                    program,
                    args,
                    env,
                    token: token.as_deref(),
                };
                let mut child = spawner::spawn(launch).await.map_err(|e| {
                    format!(
                        "could not start MCP server '{}' ({}): {e}",
                        target.server,
                        target.endpoint.describe()
                    )
                })?;
                let recorded = match (target.groups, token, child.id()) {
                    (Some(groups), Some(token), Some(pid)) => Some(groups.started(token, pid)),
                    _ => None,
                };
                let (stdin, stdout) = (child.stdin().take(), child.stdout().take());
                let stderr = child.stderr().take();
                let child = ChildProcess::new(child, stderr, server.clone(), recorded);
                let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
                    return Err(format!(
                        "could not start MCP server '{}': its standard input or output is not a pipe",
                        target.server
                    ));
                };
                let overflow = Overflow::default();
                let stdout = BoundedLines::new(stdout, MAX_MESSAGE_BYTES, overflow.clone());
                let at = format!("({})", target.endpoint.describe());
                let service = match bounded(&target, &at, handler.serve((stdout, stdin))).await? {
                    Ok(service) => service,
                    Err(error) => {
                        let ended = child.exit_status(EXIT_GRACE).await;
                        let last_words = child.stderr.last_words(EXIT_GRACE).await;
                        return Err(handshake_failure(&target, &error, ended, last_words));
                    }
                };
                (service, Some(child), overflow)
            }
            Endpoint::Http { url } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                // A broken response stream is resumed a few times, then the
                // request fails: an endless resumption would hide a dead
                // server behind silence.
                let mut backoff = ExponentialBackoff::default();
                backoff.max_times = Some(3);
                backoff.base_duration = Duration::from_millis(200);
                backoff.max_delay = Some(Duration::from_secs(1));
                config.retry_config = Arc::new(backoff);
                // rmcp's own defaults, said here so that the errors can name
                // them: a larger message ends its request at once.
                config.max_sse_event_size = MAX_MESSAGE_BYTES;
                config.max_json_response_size = MAX_MESSAGE_BYTES;
                let overflow = Overflow::default();
                // Messages name the URL without its secrets; the client
                // scrubs what the libraries add.
                let shown = target.endpoint.describe();
                let client = WatchedClient::new(overflow.clone()).map_err(|e| {
                    format!(
                        "could not reach MCP server '{}' at {shown}: {e}",
                        target.server
                    )
                })?;
                let transport = StreamableHttpClientTransport::with_client(client, config);
                let at = format!("at {shown}");
                let service = bounded(&target, &at, handler.serve(transport))
                    .await?
                    .map_err(|error| {
                        format!(
                            "could not open a session with MCP server '{}' at {shown}: {}",
                            target.server,
                            handshake_detail(&error)
                        )
                    })?;
                (service, None, overflow)
            }
        };
        Ok(Self::new(
            server,
            target.endpoint,
            service,
            routes,
            child,
            overflow,
        ))
    }

    fn new(
        server: Arc<str>,
        endpoint: &Endpoint,
        service: RunningService<RoleClient, Handler>,
        routes: Arc<ProgressRoutes>,
        child: Option<ChildProcess>,
        overflow: Overflow,
    ) -> Self {
        Self {
            server,
            endpoint: endpoint.clone(),
            peer: service.peer().clone(),
            service: Mutex::new(Some(service)),
            routes,
            child,
            overflow,
        }
    }

    /// Whether the server sent a message over the limit on one message,
    /// which closed the connection.
    pub(super) fn overflowed(&self) -> bool {
        self.overflow.happened()
    }

    /// The peer to send requests through.
    pub(super) fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// Where progress notifications are routed.
    pub(super) fn routes(&self) -> &Arc<ProgressRoutes> {
        &self.routes
    }

    /// The child's process id, for a stdio server.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|child| child.pid)
    }

    /// Whether the connection can still carry requests, as far as can be
    /// told without sending one.
    pub(super) fn is_alive(&self) -> bool {
        !self.peer.is_transport_closed()
            && self
                .child
                .as_ref()
                .is_none_or(|child| child.try_exit_status().is_none())
    }

    /// Why the connection failed, naming the server: how a child ended, or
    /// what the transport said.
    pub(super) async fn failure(&self, detail: &str) -> String {
        if self.overflowed() {
            let (unit, closed) = match self.endpoint {
                Endpoint::Stdio { .. } => {
                    ("one line of a stdio server", "its connection was closed")
                }
                Endpoint::Http { .. } => (
                    "one JSON body or SSE event over HTTP",
                    "the request was ended",
                ),
            };
            return format!(
                "MCP server '{}' sent a message over {MAX_MESSAGE_BYTES} bytes, the MCP \
                 client's limit on one message ({unit}), so {closed}",
                self.server
            );
        }
        match &self.child {
            Some(child) => match child.exit_status(EXIT_GRACE).await {
                Some(ended) => {
                    let mut message = format!("MCP server '{}' exited ({ended})", self.server);
                    // A server that failed by itself usually said why.
                    if ended.failed_by_itself()
                        && let Some(last) = child.stderr.last_words(EXIT_GRACE).await
                    {
                        message.push_str(&format!("; its last words: {last}"));
                    }
                    message
                }
                None => format!(
                    "MCP server '{}' closed its connection ({detail})",
                    self.server
                ),
            },
            None => format!(
                "MCP server '{}' at {} is unreachable or closed the session ({detail})",
                self.server,
                self.endpoint.describe()
            ),
        }
    }

    /// Ends the session and kills the child's process group, waiting for
    /// both.
    pub(super) async fn close(&self) {
        let service = lock(&self.service).take();
        if let Some(child) = &self.child {
            // Killed first: a stdio session has nothing to say goodbye with.
            child.kill().await;
        }
        if let Some(mut service) = service {
            // An HTTP session is deleted on the way out; a dead server must
            // not hold the shutdown up.
            let _ = service.close_with_timeout(Duration::from_secs(2)).await;
        }
    }

    /// Ends the session and kills the child's process group now, without
    /// waiting.
    pub(super) fn stop_now(&self) {
        if let Some(service) = lock(&self.service).take() {
            service.cancellation_token().cancel();
        }
        if let Some(child) = &self.child {
            child.kill_now();
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// The handshake, bounded by the target's handshake timeout: past it, the
/// error naming the server (`at` says where) and the bound.
async fn bounded<T, E>(
    target: &Target<'_>,
    at: &str,
    handshake: impl Future<Output = Result<T, E>>,
) -> Result<Result<T, E>, String> {
    tokio::time::timeout(target.handshake_timeout, handshake)
        .await
        .map_err(|_| {
            format!(
                "MCP server '{}' {at} did not complete the handshake within {} ms",
                target.server,
                target.handshake_timeout.as_millis()
            )
        })
}

fn handshake_failure(
    target: &Target<'_>,
    error: &ClientInitializeError,
    ended: Option<Ended>,
    last_words: Option<String>,
) -> String {
    let mut message = match ended {
        Some(ended) => format!(
            "MCP server '{}' ({}) exited during the handshake ({ended})",
            target.server,
            target.endpoint.describe()
        ),
        None => format!(
            "MCP server '{}' ({}) failed the handshake: {}",
            target.server,
            target.endpoint.describe(),
            handshake_detail(error)
        ),
    };
    if let Some(last) = last_words {
        message.push_str(&format!("; its last words: {last}"));
    }
    message
}

/// How a stdio server's process ended.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ended(Option<ExitStatus>);

impl Ended {
    /// Whether it exited by itself with a failure code (and so probably said
    /// why on its standard error).
    fn failed_by_itself(self) -> bool {
        self.0
            .and_then(|status| status.code())
            .is_some_and(|code| code != 0)
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(status) => write!(f, "{status}"),
            None => f.write_str("exit status unknown"),
        }
    }
}

enum ChildState {
    Running(Box<dyn ChildWrapper>),
    Ended(Ended),
    Killed,
}

/// A stdio server's process and the tail of its standard error.
struct ChildProcess {
    pid: Option<u32>,
    state: Mutex<ChildState>,
    stderr: Arc<StderrTail>,
    /// The group's entry in the ledger, forgotten once the group is killed
    /// (fields drop after [`ChildProcess::drop`]).
    _recorded: Option<Recorded>,
}

impl ChildProcess {
    fn new(
        child: Box<dyn ChildWrapper>,
        stderr: Option<ChildStderr>,
        server: Arc<str>,
        recorded: Option<Recorded>,
    ) -> Self {
        let tail = Arc::new(StderrTail::default());
        match stderr {
            Some(stderr) => drop(tokio::spawn(keep_stderr(stderr, tail.clone(), server))),
            None => tail.close(),
        }
        Self {
            pid: child.id(),
            state: Mutex::new(ChildState::Running(child)),
            stderr: tail,
            _recorded: recorded,
        }
    }

    /// How the child ended, if it has; reaps it. What is left of its group
    /// is killed at once, while the group id cannot have been reused.
    fn try_exit_status(&self) -> Option<Ended> {
        let mut state = lock(&self.state);
        let ended = match &mut *state {
            ChildState::Ended(ended) => return Some(*ended),
            ChildState::Killed => return Some(Ended(None)),
            ChildState::Running(child) => match child.try_wait() {
                Ok(None) => return None,
                Ok(Some(status)) => Ended(Some(status)),
                // Reaped behind the wrapper's back: it is gone, how is lost.
                Err(_) => Ended(None),
            },
        };
        if let ChildState::Running(child) = &mut *state {
            let _ = child.start_kill();
        }
        *state = ChildState::Ended(ended);
        Some(ended)
    }

    /// How the child ended, waiting up to `grace` for one that is dying.
    async fn exit_status(&self, grace: Duration) -> Option<Ended> {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            if let Some(ended) = self.try_exit_status() {
                return Some(ended);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn take_running(&self) -> Option<Box<dyn ChildWrapper>> {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut *state, ChildState::Killed) {
            ChildState::Running(child) => Some(child),
            other => {
                *state = other;
                None
            }
        }
    }

    /// Kills the group and waits for the child.
    async fn kill(&self) {
        if let Some(mut child) = self.take_running() {
            let _ = Box::into_pin(child.kill()).await;
        }
    }

    /// Kills the group without waiting (the child is reaped in the
    /// background).
    fn kill_now(&self) {
        if let Some(mut child) = self.take_running() {
            let _ = child.start_kill();
        }
    }
}

impl Drop for ChildProcess {
    /// A server being started when its caller gave up (a lease ended the
    /// call mid-handshake) is killed too.
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// The last lines a child wrote on its standard error.
struct StderrTail {
    lines: Mutex<VecDeque<String>>,
    closed: watch::Sender<bool>,
}

impl Default for StderrTail {
    fn default() -> Self {
        Self {
            lines: Mutex::new(VecDeque::with_capacity(STDERR_LINES)),
            closed: watch::Sender::new(false),
        }
    }
}

impl StderrTail {
    fn push(&self, line: String) {
        let mut lines = lock(&self.lines);
        if lines.len() == STDERR_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    fn close(&self) {
        self.closed.send_replace(true);
    }

    /// The line that best says why the child failed — the last one that
    /// mentions an error and is not a stack frame, else the last one —
    /// once the child has closed its standard error or `grace` has passed.
    async fn last_words(&self, grace: Duration) -> Option<String> {
        let mut closed = self.closed.subscribe();
        let _ = tokio::time::timeout(grace, closed.wait_for(|closed| *closed)).await;
        let lines = lock(&self.lines);
        let mut recent = lines.iter().rev().map(|line| line.trim());
        let error = recent
            .clone()
            .find(|line| line.to_ascii_lowercase().contains("error") && !line.starts_with("at "));
        error
            .or_else(|| recent.find(|line| !line.is_empty()))
            .map(str::to_owned)
    }
}

/// Keeps the last lines of a child's standard error, and logs them all,
/// each cut to [`STDERR_LINE_BYTES`]: the rest of a longer line is read and
/// dropped, so the child never blocks on a full pipe and memory stays
/// bounded.
async fn keep_stderr(stderr: ChildStderr, tail: Arc<StderrTail>, server: Arc<str>) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let keep = |line: &mut Vec<u8>| {
        let text = String::from_utf8_lossy(line)
            .trim_end_matches('\r')
            .to_owned();
        tracing::debug!(server = %server, "{text}");
        tail.push(text);
        line.clear();
    };
    loop {
        let (taken, ended) = match reader.fill_buf().await {
            Ok(available) if !available.is_empty() => {
                let end = available.iter().position(|b| *b == b'\n');
                let piece = &available[..end.unwrap_or(available.len())];
                let room = STDERR_LINE_BYTES.saturating_sub(line.len());
                line.extend_from_slice(&piece[..piece.len().min(room)]);
                (end.map_or(available.len(), |end| end + 1), end.is_some())
            }
            _ => break,
        };
        reader.consume(taken);
        if ended {
            keep(&mut line);
        }
    }
    if !line.is_empty() {
        keep(&mut line);
    }
    tail.close();
}
