use std::collections::HashMap;
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
use leasehold::{Engine, EngineError, EventStream, RunHandle, RunStatus, ToolServer};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::metrics::Metrics;

mod api;
mod assets;
mod commands;
mod error;
mod events;
mod executor;
mod guard;
mod listing;
mod metrics;
mod view;

pub use error::ApiError;
pub use leasehold::config::ServerLimits;
pub use leasehold::trace::TraceSummary;
pub use listing::{
    DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT, RunsPage, parse_instant, parse_limit, parse_status,
};
pub use view::{RunView, TraceView};

/// What became of a posted flow ([`App::queue_and_start`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Posted {
    /// Recorded with this id, running here or queued.
    Recorded(String, RunStatus),
    /// Not recorded: the store's queue holds `queued` runs, as many as
    /// `server.max_queued_runs` allows.
    QueueFull {
        /// The queued runs counted.
        queued: u64,
    },
}

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
    /// How often the executor claims queued runs while it has room
    /// (`executor.claim_interval`), besides when one of its runs ends.
    pub claim_interval: Duration,
    /// Whether the executor also claims and resumes orphaned runs as it
    /// claims queued runs, within the same room, orphans first
    /// (`resume_on_boot`).
    pub resume_orphans: bool,
    /// The lag under which the executor admits runs (`executor.lag_target`;
    /// see [`leasehold::executor::admission`]); zero: `max_live_runs` fixed.
    pub lag_target: Duration,
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
            claim_interval: leasehold::executor::DEFAULT_CLAIM_INTERVAL,
            resume_orphans: false,
            lag_target: leasehold::executor::DEFAULT_LAG_TARGET,
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

/// The server's state: the engine that executes runs, and the handles of the
/// runs it holds.
pub struct App {
    engine: Arc<Engine>,
    options: ServerOptions,
    runs: Mutex<HashMap<String, RunHandle>>,
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
    /// The engine's bus, subscribed to when the server was made, until
    /// [`serve`] hands it to the metrics feed.
    feed: Mutex<Option<EventStream>>,
    /// Wakes the claimer of queued runs.
    queue_wake: Arc<Notify>,
    /// Held from counting the room for a run to adopting the runs claimed
    /// into it, so that claims at once never exceed the limit.
    admission: tokio::sync::Mutex<()>,
    /// The admitted limit of live runs, adapted to the executor's lag.
    admitted: Arc<leasehold::executor::Admission>,
}

impl App {
    /// A server over `engine`, with metrics of its own (its store's writes
    /// untimed: see [`App::with_metrics`]).
    pub fn new(engine: Arc<Engine>, options: ServerOptions) -> Arc<Self> {
        Self::with_metrics(engine, options, Arc::new(Metrics::new()))
    }

    /// A server over `engine` whose `/metrics` are `metrics`: the same
    /// [`Metrics`] that a [`MeteredStore`](crate::metrics::MeteredStore)
    /// under the engine times its store's writes into. The metrics count
    /// every event of the engine's bus from now on.
    pub fn with_metrics(
        engine: Arc<Engine>,
        options: ServerOptions,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let streams = usize::try_from(options.limits.max_event_streams).unwrap_or(usize::MAX);
        let admitted = Arc::new(leasehold::executor::Admission::new(
            options.limits.max_live_runs,
            options.lag_target,
            engine.load().cloned(),
        ));
        Arc::new(Self {
            admitted,
            feed: Mutex::new(Some(engine.events().subscribe())),
            metrics,
            engine,
            options,
            runs: Mutex::new(HashMap::new()),
            bound: OnceLock::new(),
            shutdown: CancellationToken::new(),
            streams: Arc::new(Semaphore::new(streams.min(Semaphore::MAX_PERMITS))),
            watches: events::Watches::default(),
            queue_wake: Arc::new(Notify::new()),
            admission: tokio::sync::Mutex::new(()),
        })
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Begins shutting down: every open event stream gets a last
    /// `event: shutdown` frame and closes, and no new one opens.
    pub fn begin_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Holds `handle` while its run goes on in this process, so the API can
    /// resume and cancel it; lets go of it when the run ends or is lost.
    pub fn adopt(self: &Arc<Self>, handle: RunHandle) {
        let run_id = handle.run_id().to_owned();
        self.lock_runs().insert(run_id.clone(), handle.clone());
        let app = Arc::clone(self);
        let mut watched = handle;
        tokio::spawn(async move {
            watched.wait().await;
            let mut runs = app.lock_runs();
            // Only if it is still this handle: a resume may have replaced it.
            if runs
                .get(&run_id)
                .is_some_and(|h| h.state().status.is_terminal() || h.state().lost.is_some())
            {
                runs.remove(&run_id);
            }
            drop(runs);
            // Its room is free: a queued run may take it.
            app.queue_wake.notify_one();
        });
    }

    /// What wakes this executor's claimer of queued runs: notify it
    /// ([`Notify::notify_one`]) when a run may have been queued.
    pub fn queue_wake(&self) -> &Arc<Notify> {
        &self.queue_wake
    }

    /// How many more runs this executor may hold under its admitted limit
    /// (at most `server.max_live_runs`, fewer while it is late).
    fn room(&self) -> usize {
        self.admitted.room(self.live_runs())
    }

    /// Claims as many runs as this executor has room for — orphans first
    /// if it resumes them ([`ServerOptions::resume_orphans`]), then queued
    /// runs, oldest first — starts and adopts them; answers whether it
    /// filled the room (so more may be waiting).
    pub async fn claim_queued(self: &Arc<Self>) -> Result<bool, EngineError> {
        let _admitted = self.admission.lock().await;
        let room = self.room();
        if room == 0 {
            self.admitted
                .full(self.engine.store().as_ref())
                .await
                .map_err(EngineError::Store)?;
            return Ok(false);
        }
        let mut resumed = Vec::new();
        if self.options.resume_orphans {
            resumed = self.engine.resume_orphans_up_to(room).await?;
        }
        let left = room.saturating_sub(resumed.len());
        let claimed = self.engine.claim_queued(left).await?;
        let filled = resumed.len() + claimed.len() >= room;
        if filled {
            self.admitted.held_back();
        }
        for handle in resumed {
            tracing::info!(run_id = handle.run_id(), "orphaned run claimed and resumed");
            self.adopt(handle);
        }
        for handle in claimed {
            tracing::info!(run_id = handle.run_id(), "queued run claimed");
            self.adopt(handle);
        }
        Ok(filled)
    }

    /// Starts a run of `flow` here if this executor has room, or records it
    /// queued for any executor with room; answers its id and status. Under
    /// the admission, so that this executor's claimer and its posts never
    /// run more than its limit at once.
    ///
    /// A run that would wait is refused ([`Posted::QueueFull`]) while the
    /// store holds `server.max_queued_runs` queued runs: counted in the
    /// store, so the bound holds over every executor sharing it (posts to
    /// several executors at the same instant may each pass it once).
    pub(crate) async fn queue_and_start(
        self: &Arc<Self>,
        flow: leasehold::Flow,
        options: leasehold::RunOptions,
    ) -> Result<Posted, EngineError> {
        let _admitted = self.admission.lock().await;
        if self.room() == 0 {
            self.admitted.held_back();
            let queued = self
                .engine
                .store()
                .count_runs(RunStatus::Queued)
                .await
                .map_err(EngineError::Store)?;
            if queued >= u64::from(self.options.limits.max_queued_runs) {
                return Ok(Posted::QueueFull { queued });
            }
            // It waits for an executor with room, this one included.
            let run_id = self.engine.queue_with(flow, options).await?.run_id;
            return Ok(Posted::Recorded(run_id, RunStatus::Queued));
        }
        // With room, the run is created owned by this executor and started:
        // queued first, any executor woken by the queue could claim it
        // before the one it was posted to.
        let handle = self.engine.start_with(flow, options).await?;
        let run_id = handle.run_id().to_owned();
        self.adopt(handle);
        Ok(Posted::Recorded(run_id, RunStatus::Running))
    }

    /// Runs `work` (a claim that starts runs here) if this executor has
    /// room for one more run, holding the admission until the run is
    /// adopted; `None` without room.
    pub(crate) async fn admit<F>(
        self: &Arc<Self>,
        work: impl FnOnce() -> F,
    ) -> Option<Result<RunHandle, EngineError>>
    where
        F: std::future::Future<Output = Result<RunHandle, EngineError>>,
    {
        let _admitted = self.admission.lock().await;
        if self.room() == 0 {
            self.admitted.held_back();
            return None;
        }
        let started = work().await;
        if let Ok(handle) = &started {
            self.adopt(handle.clone());
        }
        Some(started)
    }

    /// The handle of `run_id`, if it runs in this process.
    pub fn handle(&self, run_id: &str) -> Option<RunHandle> {
        self.lock_runs().get(run_id).cloned()
    }

    /// How many run handles the server holds: its live runs, and for a
    /// moment a run that just ended. Back to 0 once every run has ended.
    pub fn held_runs(&self) -> usize {
        self.lock_runs().len()
    }

    /// How many runs the event streams follow (one shared look at the
    /// store each). Back to 0 once no stream is open.
    pub fn watched_runs(&self) -> usize {
        self.watches.len()
    }

    /// How many runs go on in this process (not ended, not lost).
    pub fn live_runs(&self) -> usize {
        self.lock_runs()
            .values()
            .filter(|h| {
                let state = h.state();
                !state.status.is_terminal() && state.lost.is_none()
            })
            .count()
    }

    fn lock_runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunHandle>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The router: the API, the event stream and the dashboard, behind the
/// guard (host, origin, token) and with the headers that keep the
/// dashboard out of other sites' frames.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(assets::index))
        .route("/assets/{name}", get(assets::asset))
        .route("/health", get(api::health))
        .route("/metrics", get(metrics::scrape))
        .route("/executor", get(executor::status))
        .route("/paces", get(api::paces))
        .route("/runs", post(api::create_run).get(api::list_runs))
        .route("/runs/{id}", get(api::show_run))
        .route("/runs/{id}/events", get(events::stream))
        .route("/runs/{id}/trace", get(api::trace))
        .route("/runs/{id}/resume", post(api::resume))
        .route("/runs/{id}/cancel", post(api::cancel))
        .route("/runs/{id}/reconcile", post(api::reconcile))
        .route("/runs/{id}/fork", post(api::fork))
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
    // Controls forwarded by other executors to the runs this one runs.
    commands::follow(Arc::clone(&app));
    // The admitted limit follows the lag, and wakes the claimer as it grows.
    let adapting = app
        .admitted
        .drive(Arc::clone(&app.queue_wake), app.shutdown.clone());
    // Stopped with the server, before the engine stops its runs.
    let claimer = Arc::clone(&app);
    let claiming = leasehold::executor::claim_queued(
        Arc::clone(&app.queue_wake),
        app.options.claim_interval,
        app.shutdown.clone(),
        move || {
            let app = Arc::clone(&claimer);
            async move { app.claim_queued().await }
        },
    );
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
    let _ = claiming.await;
    if let Some(adapting) = adapting {
        let _ = adapting.await;
    }
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
