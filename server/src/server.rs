use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::sync::OnceLock;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::middleware;
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use leasehold::executor::Executor;
use leasehold::{Engine, EventStream, ToolServer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::metrics::Metrics;

mod api;
mod assets;
mod by_hand;
mod caller;
mod commands;
mod endpoints;
mod error;
mod events;
mod executor;
mod guard;
mod keys;
mod listing;
mod many;
mod mcp;
mod metrics;
mod openapi;
mod recording;
mod view;

pub use error::{ApiError, ErrorBody, ErrorDetail};
pub use leasehold::config::ServerLimits;
pub use leasehold::trace::TraceSummary;
pub use listing::{
    DEFAULT_PAGE_LIMIT, ListingBudget, MAX_LISTED_IN_FLIGHT, MAX_PAGE_LIMIT, RunsPage,
    parse_instant, parse_limit, parse_status,
};
pub use openapi::document as openapi_document;
pub use view::{RunView, TraceView};

/// The address `leasehold serve` listens on by default.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7878";

/// The largest request body accepted (a flow), in bytes.
pub const MAX_BODY: usize = 1 << 20;

/// How the server behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerOptions {
    /// The bearer token every API request must carry, if any.
    pub token: Option<String>,
    /// How often an idle event stream sends a keep-alive comment.
    pub keep_alive: Duration,
    /// How long an event stream waits, once its run's status has ended
    /// without its terminal event in the log, before it looks again (the
    /// store's change feed wakes it for everything else).
    pub poll: Duration,
    /// The largest request body accepted, in bytes.
    pub max_body: usize,
    /// What a client may make one run hold: its task, its flow, a
    /// person's texts.
    pub run_limits: leasehold::run_limits::RunLimits,
    /// What the server's clients may hold, and for how long.
    pub limits: ServerLimits,
    /// `Host` values accepted without a token besides the bound loopback
    /// address (`localhost`, the address itself), with or without a port.
    pub allowed_hosts: Vec<String>,
    /// Origins (`https://ops.example.com`) a browser's request may come
    /// from besides the server's own.
    pub allowed_origins: Vec<String>,
    /// The tool servers posted flows may name: the configuration's
    /// `[[tools]]`.
    pub tools: Vec<ToolServer>,
    /// Whether posted flows may carry a tool server's `command`, `url` or
    /// `env` themselves (only with a token).
    pub allow_flow_tools: bool,
    /// The webhook receivers the configuration declares: the only ones a
    /// posted flow's `notify` may name.
    pub receivers: Vec<leasehold::webhooks::Receiver>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            token: None,
            keep_alive: Duration::from_secs(15),
            poll: Duration::from_millis(250),
            max_body: MAX_BODY,
            run_limits: leasehold::run_limits::RunLimits::default(),
            limits: ServerLimits::default(),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            tools: Vec::new(),
            allow_flow_tools: false,
            receivers: Vec::new(),
        }
    }
}

impl ServerOptions {
    /// What every new run's flow is held to on this server, posted or
    /// forked: [`ServerOptions::run_limits`] and
    /// [`ServerOptions::receivers`].
    pub fn flow_check(&self) -> leasehold::flow_check::FlowCheck {
        leasehold::flow_check::FlowCheck {
            limits: self.run_limits,
            receivers: self.receivers.clone(),
            keyed_limits: Vec::new(),
        }
    }
}

/// A server that must not start as configured.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InsecureBind {
    /// Listening beyond loopback without a token.
    #[error(
        "refusing to listen on {addr} without a token: set LEASEHOLD_API_TOKEN, or listen on a \
         loopback address such as 127.0.0.1"
    )]
    NoToken {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// Letting posted flows start processes without a token.
    #[error(
        "refusing --allow-flow-tools (server.allow_flow_tools) without a token: a posted flow \
         could then start any program as this user; set LEASEHOLD_API_TOKEN, or declare the \
         tool servers in the configuration's [[tools]] instead"
    )]
    FlowToolsWithoutToken,
}

/// Refuses a non-loopback `addr` when there is no token.
pub fn check_bind(addr: SocketAddr, token: Option<&str>) -> Result<(), InsecureBind> {
    if addr.ip().is_loopback() || token.is_some_and(|t| !t.is_empty()) {
        Ok(())
    } else {
        Err(InsecureBind::NoToken { addr })
    }
}

impl ServerOptions {
    /// Refuses what must not be served on `addr`: a non-loopback address
    /// without a token, or flow tools without a token.
    pub fn check(&self, addr: SocketAddr) -> Result<(), InsecureBind> {
        check_bind(addr, self.token.as_deref())?;
        if self.allow_flow_tools && self.token().is_none() {
            return Err(InsecureBind::FlowToolsWithoutToken);
        }
        Ok(())
    }

    /// The token, if one is set and not empty.
    fn token(&self) -> Option<&str> {
        self.token.as_deref().filter(|t| !t.is_empty())
    }
}

/// The server's state: the executor whose runs it serves, and what its
/// HTTP side holds.
pub struct App {
    executor: Arc<Executor>,
    options: ServerOptions,
    /// Where the server listens, once it does.
    bound: OnceLock<SocketAddr>,
    /// Cancelled when the server begins to shut down: event streams send a
    /// last frame and close.
    shutdown: CancellationToken,
    /// One permit per open event stream.
    streams: Arc<Semaphore>,
    /// One shared look at the store per run followed by event streams.
    watches: events::Watches,
    /// What `/metrics` says.
    metrics: Arc<Metrics>,
    /// What bounds the summaries every `GET /runs` in flight holds.
    listings: ListingBudget,
    /// The engine's bus, subscribed to when the server was made, until
    /// [`serve`] hands it to the metrics feed.
    feed: Mutex<Option<EventStream>>,
}

impl App {
    /// What every new run's flow is held to here, posted or forked:
    /// [`ServerOptions::flow_check`] and the executor's keyed limits, which
    /// a flow may only tighten.
    pub fn flow_check(&self) -> leasehold::flow_check::FlowCheck {
        leasehold::flow_check::FlowCheck {
            keyed_limits: self.executor.options().limits.clone(),
            ..self.options.flow_check()
        }
    }

    /// A server of `executor`'s runs, with metrics of its own (its store's
    /// writes untimed: see [`App::with_metrics`]).
    pub fn new(executor: Arc<Executor>, options: ServerOptions) -> Arc<Self> {
        Self::with_metrics(executor, options, Arc::new(Metrics::new()))
    }

    /// A server of `executor`'s runs whose `/metrics` are `metrics`: the
    /// same [`Metrics`] that a [`MeteredStore`](crate::metrics::MeteredStore)
    /// under its engine times the store's writes into. The metrics count
    /// every event of the engine's bus from now on.
    pub fn with_metrics(
        executor: Arc<Executor>,
        options: ServerOptions,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let streams = usize::try_from(options.limits.max_event_streams).unwrap_or(usize::MAX);
        Arc::new(Self {
            feed: Mutex::new(Some(executor.engine().events().subscribe())),
            metrics,
            executor,
            options,
            bound: OnceLock::new(),
            shutdown: CancellationToken::new(),
            streams: Arc::new(Semaphore::new(streams.min(Semaphore::MAX_PERMITS))),
            watches: events::Watches::default(),
            listings: ListingBudget::default(),
        })
    }

    /// What bounds the memory of the listings in flight (`GET /runs`).
    pub fn listings(&self) -> &ListingBudget {
        &self.listings
    }

    /// The executor whose runs the server serves.
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// Its engine.
    pub fn engine(&self) -> &Arc<Engine> {
        self.executor.engine()
    }

    /// Begins shutting down: every open event stream gets a last
    /// `event: shutdown` frame and closes, and no new one opens.
    pub fn begin_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// How many runs the event streams follow (one shared look at the
    /// store each). Back to 0 once no stream is open.
    pub fn watched_runs(&self) -> usize {
        self.watches.len()
    }
}

/// The router: the API, its OpenAPI document, the event stream and the
/// dashboard, behind the guard (host, origin, token) and with the headers
/// that keep the dashboard out of other sites' frames. Each route is in
/// the document ([`openapi_document`]), its test says so.
pub fn router(app: Arc<App>) -> Router {
    let mcp = mcp::service(&app);
    Router::new()
        .route("/", get(assets::index))
        .route("/assets/{name}", get(assets::asset))
        .route("/health", get(api::health))
        .route("/openapi.json", get(openapi::serve_document))
        .route("/metrics", get(metrics::scrape))
        .route("/executor", get(executor::status))
        .route("/paces", get(api::paces))
        .route("/endpoints", get(endpoints::list))
        .route("/endpoints/down", post(endpoints::down))
        .route("/endpoints/up", post(endpoints::up))
        .route("/keys", post(keys::create).get(keys::list))
        .route("/keys/{id}/revoke", post(keys::revoke))
        .route("/runs", post(api::create_run).get(api::list_runs))
        .route("/runs/actions", post(many::act))
        .route("/runs/{id}", get(api::show_run))
        .route("/runs/{id}/events", get(events::stream))
        .route("/runs/{id}/trace", get(api::trace))
        .route("/runs/{id}/recording", get(recording::recording))
        .route("/runs/{id}/resume", post(api::resume))
        .route("/runs/{id}/cancel", post(api::cancel))
        .route("/runs/{id}/pause", post(by_hand::pause))
        .route("/runs/{id}/messages", post(by_hand::message))
        .route("/runs/{id}/leases/{lease}/extend", post(by_hand::extend))
        .route(
            "/runs/{id}/leases/{lease}/intervene",
            post(by_hand::intervene),
        )
        .route("/runs/{id}/reconcile", post(api::reconcile))
        .route("/runs/{id}/fork", post(api::fork))
        .route(
            "/mcp",
            post(
                move |state: axum::extract::State<Arc<App>>, request: axum::extract::Request| {
                    mcp::endpoint(state, mcp.clone(), request)
                },
            ),
        )
        .fallback(api::no_route)
        .method_not_allowed_fallback(api::wrong_method)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            guard::guard,
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("frame-ancestors 'none'"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .with_state(app)
}

/// Serves `app` on `listener` until `shutdown` completes, then shuts down:
/// stops accepting, closes every event stream with a last frame, lets
/// requests in flight finish for at most the shutdown grace, and closes
/// whatever is left.
///
/// Each connection is HTTP/1.1 with a time limit on its request headers
/// (an idle kept-alive connection is closed after as long); at most
/// `max_connections` are open at once, further clients waiting in the
/// listener's backlog.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let bound = listener.local_addr()?;
    let _ = app.bound.set(bound);
    let feed = app
        .feed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(events) = feed {
        app.metrics.follow(events, app.shutdown.clone());
    }
    // The executor claims queued runs and sweeps for orphans while it
    // serves (once, however many servers it is behind).
    let orphaned = app.executor.serve().await.map_err(std::io::Error::other)?;
    if !orphaned.is_empty() {
        tracing::warn!(runs = ?orphaned, "orphaned runs found at boot");
    }
    let mut limits = app.options.limits.clone();
    // Given through the API unchecked, a duration is still kept in range.
    for limit in [
        &mut limits.header_timeout,
        &mut limits.body_timeout,
        &mut limits.shutdown_grace,
    ] {
        *limit = leasehold::clamp_duration(*limit);
    }
    let service = TowerToHyperService::new(router(Arc::clone(&app)));
    let connections = Arc::new(Semaphore::new(
        usize::try_from(limits.max_connections)
            .unwrap_or(usize::MAX)
            .clamp(1, Semaphore::MAX_PERMITS),
    ));
    let graceful = GracefulShutdown::new();
    // Closes the connections still open when the grace is over.
    let closing = CancellationToken::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors, or a connection reset before it
                    // was accepted: wait a moment rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(stream), service.clone());
        let connection = graceful.watch(connection);
        let closing = closing.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = connection => {}
                () = closing.cancelled() => {}
            }
            drop(permit);
        });
    }
    drop(listener);
    app.begin_shutdown();
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace = %humantime::format_duration(limits.shutdown_grace),
            "connections still open after the shutdown grace were closed"
        );
    }
    closing.cancel();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_loopback_address_needs_a_token() {
        let public: SocketAddr = "0.0.0.0:7878".parse().unwrap_or_else(|e| panic!("{e}"));
        let local: SocketAddr = "127.0.0.1:7878".parse().unwrap_or_else(|e| panic!("{e}"));
        let error = check_bind(public, None).expect_err("refused");
        assert!(error.to_string().contains("LEASEHOLD_API_TOKEN"), "{error}");
        assert!(check_bind(public, Some("")).is_err());
        assert!(check_bind(public, Some("secret")).is_ok());
        assert!(check_bind(local, None).is_ok());
    }
    #[test]
    fn flow_tools_need_a_token() {
        let local: SocketAddr = "127.0.0.1:7878".parse().unwrap_or_else(|e| panic!("{e}"));
        let mut options = ServerOptions {
            allow_flow_tools: true,
            ..ServerOptions::default()
        };
        let error = options.check(local).expect_err("refused");
        assert!(error.to_string().contains("--allow-flow-tools"), "{error}");
        options.token = Some("secret".to_owned());
        assert!(options.check(local).is_ok());
    }
}
