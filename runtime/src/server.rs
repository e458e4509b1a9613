//! The HTTP API, its live event stream and the dashboard, served by
//! `leasehold serve`.
//!
//! **A run never hangs off a request.** `POST /runs` starts the run in the
//! engine's actors and answers at once with its id; the request's task only
//! waits for the run to be recorded, and even that is done in a task of its
//! own, so a client that disconnects mid-request cancels nothing. Event
//! streams are read from the run's stored log and the engine's bus by a task
//! per stream: a client that goes away, reads slowly or never reads only ends
//! or slows its own stream, never the run. Streams have no write timeout and
//! send keep-alive comments instead.
//!
//! Every refusal is a 4xx with a JSON body `{"error": {"code", "message"}}`.
//! With a token (`LEASEHOLD_API_TOKEN`) every API request needs
//! `Authorization: Bearer TOKEN` (the event stream also takes `?token=`,
//! since a browser's `EventSource` cannot set headers); the server refuses to
//! listen beyond loopback without one. See `docs/http-api.md`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use leasehold_actors::engine::Engine;
use leasehold_actors::run::RunHandle;
use tokio::net::TcpListener;

mod api;
mod assets;
mod error;
mod events;

pub use crate::trace::TraceSummary;
pub use api::{RunView, TraceView};
pub use error::ApiError;

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
    /// How often an event stream looks at the store when the bus is quiet.
    pub poll: Duration,
    /// The largest request body accepted, in bytes.
    pub max_body: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            token: None,
            keep_alive: Duration::from_secs(15),
            poll: Duration::from_millis(250),
            max_body: MAX_BODY,
        }
    }
}

/// Listening beyond loopback without a token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "refusing to listen on {addr} without a token: set LEASEHOLD_API_TOKEN, or listen on a \
     loopback address such as 127.0.0.1"
)]
pub struct InsecureBind {
    /// The address asked for.
    pub addr: SocketAddr,
}

/// Refuses a non-loopback `addr` when there is no token.
pub fn check_bind(addr: SocketAddr, token: Option<&str>) -> Result<(), InsecureBind> {
    if addr.ip().is_loopback() || token.is_some_and(|t| !t.is_empty()) {
        Ok(())
    } else {
        Err(InsecureBind { addr })
    }
}

/// The server's state: the engine that executes runs, and the handles of the
/// runs it holds.
pub struct App {
    engine: Arc<Engine>,
    options: ServerOptions,
    runs: Mutex<HashMap<String, RunHandle>>,
}

impl App {
    /// A server over `engine`.
    pub fn new(engine: Arc<Engine>, options: ServerOptions) -> Arc<Self> {
        Arc::new(Self {
            engine,
            options,
            runs: Mutex::new(HashMap::new()),
        })
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
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
        });
    }

    /// The handle of `run_id`, if it runs in this process.
    pub fn handle(&self, run_id: &str) -> Option<RunHandle> {
        self.lock_runs().get(run_id).cloned()
    }

    fn lock_runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunHandle>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The router: the API, the event stream and the dashboard.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(assets::index))
        .route("/assets/{name}", get(assets::asset))
        .route("/health", get(api::health))
        .route("/runs", post(api::create_run).get(api::list_runs))
        .route("/runs/{id}", get(api::show_run))
        .route("/runs/{id}/events", get(events::stream))
        .route("/runs/{id}/trace", get(api::trace))
        .route("/runs/{id}/resume", post(api::resume))
        .route("/runs/{id}/cancel", post(api::cancel))
        .route("/runs/{id}/reconcile", post(api::reconcile))
        .fallback(api::no_route)
        .method_not_allowed_fallback(api::wrong_method)
        .layer(middleware::from_fn_with_state(Arc::clone(&app), authorize))
        .with_state(app)
}

/// Serves `app` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Checks the bearer token on everything but the dashboard's files and
/// `/health`.
async fn authorize(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let Some(token) = app.options.token.as_deref().filter(|t| !t.is_empty()) else {
        return next.run(request).await;
    };
    let path = request.uri().path();
    if path == "/" || path == "/health" || path.starts_with("/assets/") {
        return next.run(request).await;
    }
    let given = bearer(request.headers()).or_else(|| query_token(request.uri().query()));
    match given {
        Some(given) if same(given.as_bytes(), token.as_bytes()) => next.run(request).await,
        Some(_) => {
            ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "wrong token").into_response()
        }
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this server needs `Authorization: Bearer TOKEN` (LEASEHOLD_API_TOKEN)",
        )
        .into_response(),
    }
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?;
    Some(token.trim().to_owned())
}

fn query_token(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(name, _)| name == "token")
        .map(|(_, value)| value.into_owned())
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
    fn the_query_token_is_percent_decoded() {
        assert_eq!(
            query_token(Some("after=3&token=a%2Bb")),
            Some("a+b".to_owned())
        );
        assert_eq!(query_token(Some("token=x+y")), Some("x y".to_owned()));
        assert_eq!(query_token(Some("after=3")), None);
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}
