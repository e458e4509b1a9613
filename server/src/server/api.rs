//! The API's handlers: runs, their trace, and a person's controls.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use leasehold::{Flow, ReconcileDecision, RunCommand};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::App;
use super::caller::Caller;
use super::commands;
use super::commands::ControlResponses;
use super::error::{ApiError, ErrorBody};
use super::guard;
use super::listing::{ListParams, RunsPage};
use super::view::{RunView, TraceView};
use leasehold::executor::{Forked, Posted};
use leasehold::flow_check::FlowRefused;
use leasehold::flow_file;
use leasehold::run_limits::{PersonText, TooLarge};
use leasehold::trace::TraceSummary;

/// `GET /health`'s answer: `status` always; the rest only to a request
/// that carries the server's token.
#[derive(Clone, Debug, Default, Serialize, utoipa::ToSchema)]
pub(super) struct Health {
    /// `ok`: the server answers.
    status: &'static str,
    /// `ok` when the store answers and took this executor's last write,
    /// `away` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    store: Option<&'static str>,
    /// Why the store is `away`.
    #[serde(skip_serializing_if = "Option::is_none")]
    store_error: Option<String>,
    /// The store errors this executor's writes met since it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    store_errors: Option<StoreErrors>,
    /// The executor's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    owner_id: Option<String>,
    /// How many runs it runs now.
    #[serde(skip_serializing_if = "Option::is_none")]
    live_runs: Option<usize>,
}

/// The store errors an executor's writes met, by what became of them.
#[derive(Clone, Debug, Default, Serialize, utoipa::ToSchema)]
pub(super) struct StoreErrors {
    /// Errors a retry may cure.
    transient: u64,
    /// Errors no retry cures.
    permanent: u64,
    /// Writes retried.
    retries: u64,
    /// Writes given up.
    given_up: u64,
}

/// `GET /health`: that the server is up; with the token, also who it is
/// and how many runs it holds.
#[utoipa::path(get, path = "/health", tag = "server",
    responses((status = 200, description = "The server is up; with the server's token, also its store, id and live runs", body = Health)))]
pub(super) async fn health(State(app): State<Arc<App>>, headers: HeaderMap) -> Json<Health> {
    if !guard::authorized(&app, &headers) {
        return Json(Health {
            status: "ok",
            ..Health::default()
        });
    }
    let store = store_state(&app).await;
    let said = if store.is_ok() { "ok" } else { "away" };
    let health = app.engine().store_health();
    Json(Health {
        status: "ok",
        store: Some(said),
        store_error: store.err(),
        store_errors: Some(StoreErrors {
            transient: health.transient_errors,
            permanent: health.permanent_errors,
            retries: health.retries,
            given_up: health.given_up,
        }),
        owner_id: Some(app.engine().owner_id().to_owned()),
        live_runs: Some(app.executor.live_runs()),
    })
}

/// Whether the store answers now: a read of a run that is not there,
/// within [`STORE_PROBE`], and the last write of this executor's runs
/// landed. The error in words if not.
pub(super) async fn store_state(app: &App) -> Result<(), String> {
    let probe = app.engine().store().load_run("run-health-probe");
    match tokio::time::timeout(STORE_PROBE, probe).await {
        Err(_) => return Err(format!("the store did not answer within {STORE_PROBE:?}")),
        Ok(Err(error)) => return Err(error.to_string()),
        Ok(Ok(_)) => {}
    }
    let health = app.engine().store_health();
    match health.failing {
        true => Err(health
            .last_error
            .unwrap_or_else(|| "the store refused the last write".to_owned())),
        false => Ok(()),
    }
}

/// How long `/health` and `/metrics` wait for the store's answer.
pub(super) const STORE_PROBE: std::time::Duration = std::time::Duration::from_secs(2);

/// `GET /paces`: what this executor knows of each endpoint's normal pace
/// (a model at its URL, a tool, a kind of worker): what its store held
/// when it started, and what its runs have learned since.
#[utoipa::path(get, path = "/paces", tag = "server",
    responses((status = 200, description = "Each endpoint's pace, by its pace key", body = std::collections::BTreeMap<String, leasehold::Pace>)))]
pub(super) async fn paces(
    State(app): State<Arc<App>>,
) -> Json<std::collections::BTreeMap<String, leasehold::Pace>> {
    Json(app.engine().paces().all())
}

/// `POST /runs`: a flow as JSON or TOML; answers at once with the run id
/// and its status: `running` when this executor had room and started it,
/// `queued` when it waits for an executor with room (any executor sharing
/// the store claims it). A flow whose task or whole is larger than
/// `limits.task` or `limits.flow` is a 413; a run that would wait while
/// the store's queue is full (`server.max_queued_runs`) is a 429 with
/// `Retry-After`; either way nothing is stored.
///
/// The flow's tool servers are references to the configuration's
/// `[[tools]]` (or to servers the engine provides); one that carries a
/// `command`, `url` or `env` is refused with 403, unless the server allows
/// flow tools. A server without a model refuses every flow with 503
/// `no_model`, naming the keys to set.
#[utoipa::path(post, path = "/runs", tag = "runs",
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "Visible ASCII, 1 to 255 characters: a post retried under the key of a run it started answers 200 with that run"),
        ("traceparent" = Option<String>, Header, description = "A W3C trace context: the run is traced within the caller's trace"),
    ),
    request_body(description = "The flow, as JSON or TOML", content(
        (serde_json::Value = "application/json"),
        (String = "application/toml"),
    )),
    responses(
        (status = 201, description = "The run, recorded: `running` or `queued`", body = RunPosted,
            headers(("Location" = String, description = "`/runs/{id}`"))),
        (status = 200, description = "A post retried under the idempotency key of a run it started: that run, `replayed`", body = RunPosted,
            headers(("Location" = String, description = "`/runs/{id}`"))),
        (status = 400, description = "A body that is not UTF-8, or a bad `Idempotency-Key` or `traceparent`", body = ErrorBody),
        (status = 403, description = "A flow's tool server carries a `command`, `url` or `env` (`flow_tools_forbidden`)", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the body timeout", body = ErrorBody),
        (status = 413, description = "The body, the flow or its task is larger than its limit", body = ErrorBody),
        (status = 415, description = "Neither `application/json` nor `application/toml`", body = ErrorBody),
        (status = 422, description = "An invalid flow (`invalid_flow`), or an idempotency key reused for another flow", body = ErrorBody),
        (status = 429, description = "The store's queue is full and the tenant holds its share (`queue_full`)", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds"))),
        (status = 500, description = "The store failed", body = ErrorBody),
        (status = 502, description = "A tool server could not be reached", body = ErrorBody),
        (status = 503, description = "The server has no model (`no_model`)", body = ErrorBody),
    ))]
pub(super) async fn create_run(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // A server with no model runs nothing: said before the flow is read.
    runs_something(&app)?;
    let format = match media_type(&headers).as_deref() {
        Some("application/json") => Format::Json,
        Some("application/toml") => Format::Toml,
        other => return Err(unsupported(other, "application/json or application/toml")),
    };
    let bytes = read_body(&app, body).await?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| ApiError::bad_request("the flow is not UTF-8 text"))?;
    let options = run_options(&headers)?;
    post_flow(&app, &caller, format, text, options).await
}

/// 503 `no_model` when this server has no model, and so runs nothing.
pub(super) fn runs_something(app: &App) -> Result<(), ApiError> {
    match app.engine().without_model() {
        Some(why) => Err(ApiError::from(leasehold::EngineError::NoModel(
            why.to_owned(),
        ))),
        None => Ok(()),
    }
}

/// Starts the flow `text` for `caller` as `POST /runs` does, whoever asks
/// (the API, or a tool of `/mcp`): the same checks, the same answers.
pub(super) async fn post_flow(
    app: &Arc<App>,
    caller: &Caller,
    format: Format,
    text: &str,
    mut options: leasehold::RunOptions,
) -> Result<Response, ApiError> {
    runs_something(app)?;
    let flow = parse_flow(app, format, text)?;
    options.tenant = caller.run_tenant();
    // Queued and started in a task of its own: a client that goes away
    // mid-request must not cancel a run half-recorded.
    let executor = Arc::clone(&app.executor);
    let posted = tokio::spawn(async move { executor.post(flow, options).await })
        .await
        .map_err(|e| ApiError::internal(format!("starting the run panicked: {e}")))?;
    let (run_id, status) = match posted {
        Ok(Posted::Recorded(run_id, status)) => (run_id, status),
        Ok(Posted::QueueFull {
            queued,
            tenant_queued,
            share,
        }) => return Ok(queue_full(app, queued, tenant_queued, share)),
        Ok(Posted::TenantQueueFull {
            limit,
            tenant,
            queued,
            max,
        }) => {
            return Ok(too_many_queued(format!(
                "tenant `{tenant}` holds {queued} queued runs, the most its keyed limit \
                 `{limit}` allows (keyed_limits.{limit}.queued = {max}): nothing was stored; \
                 try again when its runs have left the queue"
            )));
        }
        Err(leasehold::EngineError::AlreadyStarted {
            run_id,
            same_flow: true,
            ..
        }) => return already_started(app, run_id).await,
        Err(error @ leasehold::EngineError::AlreadyStarted { .. }) => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                error.to_string(),
            ));
        }
        Err(error) => return Err(error.into()),
    };
    tracing::info!(%run_id, ?status, "run posted over the API");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/runs/{run_id}"))],
        Json(RunPosted {
            run_id,
            status,
            replayed: false,
        }),
    )
        .into_response())
}

/// `POST /runs`'s answer: the run and its status.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RunPosted {
    /// The run.
    run_id: String,
    /// `running` or `queued` for a new run; a replayed one's as it is now.
    status: leasehold::RunStatus,
    /// `true` when the post was retried under the idempotency key of a
    /// run it had started: that run, nothing new.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    replayed: bool,
}

/// `200` for a post retried under the idempotency key of a run it already
/// started: that run, as it is now, and `Location`; nothing new.
async fn already_started(app: &App, run_id: String) -> Result<Response, ApiError> {
    let status = app
        .engine()
        .store()
        .load_run(&run_id)
        .await?
        .map_or(leasehold::RunStatus::Queued, |record| record.status);
    tracing::info!(%run_id, "a post retried under its idempotency key: the run it started");
    Ok((
        StatusCode::OK,
        [(header::LOCATION, format!("/runs/{run_id}"))],
        Json(RunPosted {
            run_id,
            status,
            replayed: true,
        }),
    )
        .into_response())
}

/// How long a client refused for a full queue is asked to wait: runs
/// leave the queue as runs end, which takes seconds to minutes.
const QUEUE_FULL_RETRY_AFTER_SECS: u64 = 30;

/// 429 with `Retry-After`: the store's queue is full, and the tenant holds
/// its share of it.
fn queue_full(app: &App, queued: u64, tenant_queued: u64, share: u64) -> Response {
    too_many_queued(format!(
        "{queued} runs wait queued in the store, its limit (server.max_queued_runs = {}, \
         LEASEHOLD_SERVER_MAX_QUEUED_RUNS), {tenant_queued} of them your tenant's, its \
         share ({share}), and this executor has no room to start the run \
         (server.max_live_runs): nothing was stored; try again when runs have left the queue",
        app.executor.options().max_queued_runs
    ))
}

/// 429 `queue_full` saying `message`, with the `Retry-After` of a full
/// queue.
fn too_many_queued(message: String) -> Response {
    let mut response =
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "queue_full", message).into_response();
    response.headers_mut().insert(
        header::RETRY_AFTER,
        axum::http::HeaderValue::from(QUEUE_FULL_RETRY_AFTER_SECS),
    );
    response
}

/// 413: a flow or a person's text larger than its limit, naming the key.
pub(super) fn too_large(error: &TooLarge) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        error.to_string(),
    )
}

/// How a posted flow is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Format {
    Json,
    Toml,
}

/// A new run's flow, or a fork's texts, refused as every new run's are
/// ([`FlowCheck`](leasehold::flow_check::FlowCheck)): 413 for what is too
/// large, 422 for the rest.
fn refused(refused: FlowRefused, what: &str) -> ApiError {
    match refused {
        FlowRefused::TooLarge(error) => too_large(&error),
        FlowRefused::Invalid(error) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_flow",
            format!("{what} was refused at `{}`: {}", error.path, error.message),
        ),
        FlowRefused::Fork(error) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_fork",
            error.to_string(),
        ),
        other => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_flow",
            other.to_string(),
        ),
    }
}

/// Parses the flow, holds its tool servers to the server's trust model,
/// completes them from the configuration, and holds it to what every new
/// run's flow is held to (its size, its validity, its receivers: the check
/// a fork's flow passes too).
fn parse_flow(app: &App, format: Format, text: &str) -> Result<Flow, ApiError> {
    let invalid = |e: leasehold::FlowError| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_flow",
            format!(
                "the flow ({}) was refused at `{}`: {}",
                match format {
                    Format::Json => "JSON",
                    Format::Toml => "TOML",
                },
                e.path,
                e.message
            ),
        )
    };
    let mut flow = match format {
        Format::Json => flow_file::read_json(text),
        Format::Toml => flow_file::read_toml(text),
    }
    .map_err(invalid)?;
    // The flow as the client wrote it, before the configuration completes
    // its tool servers: what the client makes the run hold.
    app.options
        .run_limits
        .check_flow(&flow)
        .map_err(|e| too_large(&e))?;
    if !app.options.allow_flow_tools
        && let Some((i, server)) = flow
            .tools
            .iter()
            .enumerate()
            .find(|(_, server)| server.names_a_process_or_address())
    {
        let what = if server.command.is_some() {
            "a `command`"
        } else if server.url.is_some() {
            "a `url`"
        } else {
            "an `env`"
        };
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "flow_tools_forbidden",
            format!(
                "tools[{i}] (`{name}`) carries {what}: a flow posted to this server may only name \
                 tool servers its configuration declares, since a request must never choose a \
                 program to start or an address to connect to. Declare it in the server's \
                 configuration file as [[tools]] name = \"{name}\" with its command or url, \
                 and name it in the flow as {{\"name\": \"{name}\"}}; or, on a trusted \
                 deployment, start the server with a token and --allow-flow-tools",
                name = server.name
            ),
        ));
    }
    let engine = app.engine();
    flow_file::resolve_tool_servers(&mut flow, &app.options.tools, |name| {
        engine.serves_tool(name)
    })
    .map_err(invalid)?;
    // As the store will keep it: what a fork's flow is held to as well.
    let what = match format {
        Format::Json => "the flow (JSON)",
        Format::Toml => "the flow (TOML)",
    };
    app.flow_check()
        .check(&flow)
        .map_err(|e| refused(e, what))?;
    Ok(flow)
}

/// How a posted run starts: within the caller's trace when the request
/// carries a W3C `traceparent`; one that is not a traceparent is a 400
/// naming the header, rather than a trace silently cut in two.
fn run_options(headers: &HeaderMap) -> Result<leasehold::RunOptions, ApiError> {
    let mut options = leasehold::RunOptions::default();
    options.idempotency_key = idempotency_key(headers)?;
    let Some(value) = headers.get("traceparent") else {
        return Ok(options);
    };
    let parent = value
        .to_str()
        .map_err(|_| "it is not ASCII text".to_owned())
        .and_then(|text| leasehold::TraceParent::parse(text).map_err(|e| e.to_string()))
        .map_err(|why| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_traceparent",
                format!("the `traceparent` header was refused: {why}"),
            )
        })?;
    options.trace_parent = Some(parent);
    Ok(options)
}

/// The most characters an `Idempotency-Key` has.
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The request's `Idempotency-Key`: visible ASCII, 1 to 255 characters; a
/// header that is not is a 400 naming it, and nothing is stored.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let what = "the `Idempotency-Key` header";
    let key = value
        .to_str()
        .map_err(|_| refused_key(what, "it is not ASCII text"))?;
    checked_idempotency_key(what, key).map(Some)
}

/// 400 `bad_idempotency_key`: `what` (a header, an argument) was refused.
fn refused_key(what: &str, why: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "bad_idempotency_key",
        format!("{what} was refused: {why}"),
    )
}

/// An idempotency key as `what` gives it: visible ASCII, 1 to 255
/// characters once trimmed; anything else is a 400 naming `what`.
pub(super) fn checked_idempotency_key(what: &str, key: &str) -> Result<String, ApiError> {
    let refused = |why: &str| refused_key(what, why);
    let key = key.trim();
    if key.is_empty() {
        return Err(refused("it is empty"));
    }
    if key.len() > MAX_IDEMPOTENCY_KEY {
        return Err(refused(&format!(
            "it has {} characters, more than {MAX_IDEMPOTENCY_KEY}",
            key.len()
        )));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(refused("it holds a space or a control character"));
    }
    Ok(key.to_owned())
}

/// The request's media type, lower case, without parameters.
fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let essence = value.split(';').next().unwrap_or_default().trim();
    Some(essence.to_ascii_lowercase())
}

/// 415: a body of a type this route does not take.
fn unsupported(given: Option<&str>, expected: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!(
            "this route takes {expected}, got {}",
            given.map_or_else(|| "no Content-Type".to_owned(), |t| format!("{t:?}"))
        ),
    )
}

/// A run id from the path, or a JSON 400.
pub(super) fn run_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(id)| id).map_err(|rejection| {
        ApiError::bad_request(format!(
            "the run id in the path could not be read: {}",
            rejection.body_text()
        ))
    })
}

/// `GET /runs[?after=C][&limit=N][&status=S][&flow=F][&since=T][&until=T]`:
/// one page of runs, newest first, and the cursor of the next; each run a
/// summary ([`RunView::summary`]), never its flow or a whole text. The
/// page waits for room in the server's [`ListingBudget`](super::ListingBudget)
/// first, and holds it until its answer has been sent.
#[utoipa::path(get, path = "/runs", tag = "runs", params(ListParams),
    responses(
        (status = 200, description = "A page of the caller's runs, newest first", body = RunsPage),
        (status = 400, description = "A query parameter that is wrong, named", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    ))]
pub(super) async fn list_runs(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(|rejection| {
        ApiError::bad_request(format!(
            "the query is not what this route takes: {}",
            rejection.body_text()
        ))
    })?;
    let mut query = params.query()?;
    // A tenant lists its own runs only.
    query.tenant = Some(caller.tenant);
    let mut permit = app.listings.admit(query.limit).await;
    let now = app.engine().clock().now_unix_ms();
    // A run nobody runs is listed as orphaned, as it is shown whole.
    let page =
        leasehold::seen::summaries(app.engine().store().as_ref(), &query, now, false).await?;
    permit.holding(page.runs.len());
    let runs = page
        .runs
        .into_iter()
        .map(|summary| {
            let handle = app.executor.handle(&summary.run_id);
            RunView::summary(summary, handle.as_ref())
        })
        // A live run's state is fresher than the store's, an orphaned one
        // truer: one that has just left the status asked for is not shown
        // in it.
        .filter(|view| query.status.is_none_or(|status| view.status == status))
        .collect();
    let page = RunsPage {
        runs,
        next: page.next,
    };
    let body = serde_json::to_vec(&page)
        .map_err(|e| ApiError::internal(format!("encoding a page of runs failed: {e}")))?;
    drop(page);
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        held_until_sent(body, permit),
    )
        .into_response())
}

/// A body of `bytes` that keeps `permit` until it has been sent (or the
/// client went away and it was dropped).
fn held_until_sent(bytes: Vec<u8>, permit: super::listing::ListingPermit) -> axum::body::Body {
    enum Sending {
        Page(Vec<u8>, super::listing::ListingPermit),
        /// Held until the stream is polled past its page, or dropped.
        Sent {
            _permit: super::listing::ListingPermit,
        },
    }
    let chunks = futures_util::stream::unfold(Some(Sending::Page(bytes, permit)), |state| {
        std::future::ready(match state {
            Some(Sending::Page(bytes, permit)) => Some((
                Ok::<_, std::convert::Infallible>(bytes),
                Some(Sending::Sent { _permit: permit }),
            )),
            Some(Sending::Sent { .. }) | None => None,
        })
    });
    axum::body::Body::from_stream(chunks)
}

/// `GET /runs/{id}`: a run with its flow and its tool calls.
#[utoipa::path(get, path = "/runs/{id}", tag = "runs", params(RunPath),
    responses(
        (status = 200, description = "The run whole: its flow, tool calls, usage, lineage", body = RunView),
        (status = 404, description = "No such run of the caller's tenant", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    ))]
pub(super) async fn show_run(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<RunView>, ApiError> {
    let run_id = run_id(path)?;
    run_view(&app, &run_id).await.map(Json)
}

/// A run with its flow and its tool calls, as `GET /runs/{id}` shows it.
pub(super) async fn run_view(app: &App, run_id: &str) -> Result<RunView, ApiError> {
    let store = app.engine().store();
    let record = store
        .load_run(run_id)
        .await?
        .ok_or_else(|| ApiError::unknown_run(run_id))?;
    let flow = record.flow.clone();
    let now = app.engine().clock().now_unix_ms();
    let mut view = RunView::new(record, app.executor.handle(run_id).as_ref(), now);
    view.flow = Some(leasehold::secret::redact_flow(flow));
    view.tool_calls = Some(store.load_tool_calls(run_id).await?);
    let events = store.load_events(run_id, 0).await?;
    view.events_dropped = Some(TraceSummary::of(&events).events_dropped);
    view.usage = Some(leasehold::UsageReport::of(&events));
    view.store_errors = app.engine().store_errors_of(run_id);
    Ok(view)
}

/// `GET /runs/{id}/trace`.
#[utoipa::path(get, path = "/runs/{id}/trace", tag = "runs", params(RunPath),
    responses(
        (status = 200, description = "Every decision made about the run", body = TraceView),
        (status = 404, description = "No such run of the caller's tenant", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
    ))]
pub(super) async fn trace(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<TraceView>, ApiError> {
    let run_id = run_id(path)?;
    let store = app.engine().store();
    if store.load_run(&run_id).await?.is_none() {
        return Err(ApiError::unknown_run(&run_id));
    }
    let events = store.load_events(&run_id, 0).await?;
    Ok(Json(TraceView::new(run_id, events)))
}

/// The run a path names (`/runs/{id}` and what is under it).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Read by the handlers as `Path<String>`; here for the document.
pub(super) struct RunPath {
    /// The run's id.
    id: String,
}

/// The body of `POST /runs/{id}/resume`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ResumeBody {
    /// What the run's next step is told.
    guidance: Option<String>,
}

/// The body of `POST /runs/{id}/cancel`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CancelBody {
    /// Why.
    reason: Option<String>,
}

/// The body of `POST /runs/{id}/reconcile`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(super) struct ReconcileBody {
    /// The key of the call in question (`pause.call.key`).
    key: String,
    #[serde(flatten)]
    decision: ReconcileDecision,
}

/// `POST /runs/{id}/resume`: answers a paused run with guidance; a run
/// nobody runs (orphaned, or paused by an executor that died) is claimed
/// first and resumed from its snapshots; one another live executor runs is
/// forwarded to it (202).
#[utoipa::path(post, path = "/runs/{id}/resume", tag = "controls", params(RunPath),
    request_body(content = ResumeBody, description = "Optional: an empty body resumes without guidance"),
    responses(ControlResponses))]
pub(super) async fn resume(
    State(app): State<Arc<App>>,
    control: Control,
) -> Result<Response, ApiError> {
    let ResumeBody { guidance } = control.json()?;
    let guidance = guidance.filter(|g| !g.trim().is_empty());
    if let Some(guidance) = &guidance {
        app.options
            .run_limits
            .check_text(PersonText::Guidance, guidance)
            .map_err(|e| too_large(&e))?;
    }
    commands::control(&app, &control.run_id, RunCommand::Resume { guidance }).await
}

/// `POST /runs/{id}/cancel`; a run another live executor runs is
/// forwarded to it (202).
#[utoipa::path(post, path = "/runs/{id}/cancel", tag = "controls", params(RunPath),
    request_body(content = CancelBody, description = "Optional"),
    responses(ControlResponses))]
pub(super) async fn cancel(
    State(app): State<Arc<App>>,
    control: Control,
) -> Result<Response, ApiError> {
    let CancelBody { reason } = control.json()?;
    if let Some(reason) = &reason {
        app.options
            .run_limits
            .check_text(PersonText::Reason, reason)
            .map_err(|e| too_large(&e))?;
    }
    let reason = reason
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "cancelled over the API".to_owned());
    commands::control(&app, &control.run_id, RunCommand::Cancel { reason }).await
}

/// `POST /runs/{id}/reconcile`: `{"key", "decision": "mark_done" |
/// "retry" | "cancel", "result"}` for a run in `reconciliation_required`;
/// one another live executor runs is forwarded to it (202).
#[utoipa::path(post, path = "/runs/{id}/reconcile", tag = "controls", params(RunPath),
    request_body = ReconcileBody,
    responses(ControlResponses))]
pub(super) async fn reconcile(
    State(app): State<Arc<App>>,
    control: Control,
) -> Result<Response, ApiError> {
    let ReconcileBody { key, decision } = serde_json::from_slice(&control.body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a reconciliation: {e}")))?;
    if let ReconcileDecision::MarkDone { result } = &decision {
        app.options
            .run_limits
            .check_text(PersonText::Result, result)
            .map_err(|e| too_large(&e))?;
    }
    commands::control(
        &app,
        &control.run_id,
        RunCommand::Reconcile { key, decision },
    )
    .await
}

/// The body of `POST /runs/{id}/fork`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ForkBody {
    /// The step to fork at, as the trace names it: `N` or `PATH:N`.
    at: String,
    /// What the fork's first step is told.
    guidance: Option<String>,
    /// Changes to the flow: `leases.tool_call=30s`, …
    #[serde(default)]
    set: Vec<String>,
}

/// A new run made from another: `POST /runs/{id}/fork`'s answer.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ForkStarted {
    /// The fork.
    run_id: String,
    /// `running`: started here.
    status: leasehold::RunStatus,
    /// The run it was forked from, where, with what guidance and changes.
    fork: Option<leasehold::ForkOrigin>,
}

/// `POST /runs/{id}/fork`: `{"at": "3" | "run/worker:research:1:2",
/// "guidance", "set": ["leases.tool_call=30s", …]}`: a new run, started
/// here, from the run's state before that step (201, with its id and
/// lineage). The run forked is only read, whatever its status and
/// wherever it runs. Refused with 429 and `Retry-After` when this
/// executor has no room (`server.max_live_runs`), with 422 when the step
/// is no boundary of the run, a change is refused, the changes are more
/// than a fork may make, or the flow they make is one `POST /runs` would
/// refuse (413 when it, or the guidance, is too large).
#[utoipa::path(post, path = "/runs/{id}/fork", tag = "runs", params(RunPath),
    request_body = ForkBody,
    responses(
        (status = 201, description = "The fork, started here", body = ForkStarted,
            headers(("Location" = String, description = "`/runs/{id}` of the fork"))),
        (status = 400, description = "A body that is not a fork", body = ErrorBody),
        (status = 404, description = "No such run of the caller's tenant", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the body timeout", body = ErrorBody),
        (status = 413, description = "The flow the changes make, or the guidance, is larger than its limit", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ErrorBody),
        (status = 422, description = "No such step boundary, a change refused, or a flow `POST /runs` would refuse", body = ErrorBody),
        (status = 429, description = "This executor has no room (`no_room`)", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds"))),
        (status = 500, description = "The store failed", body = ErrorBody),
    ))]
pub(super) async fn fork(
    State(app): State<Arc<App>>,
    control: Control,
) -> Result<Response, ApiError> {
    let body: ForkBody = serde_json::from_slice(&control.body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a fork: {e}")))?;
    let (path, step) = leasehold::ForkSpec::parse_point(&body.at).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_fork",
            e.to_string(),
        )
    })?;
    let spec = leasehold::ForkSpec {
        path,
        step,
        guidance: body.guidance.filter(|g| !g.trim().is_empty()),
        set: body.set,
    };
    let run_id = match start_fork(&app, &control.run_id, spec).await? {
        Ok(run_id) => run_id,
        Err(refusal) => return Ok(refusal),
    };
    let origin = app
        .engine()
        .store()
        .load_run(&run_id)
        .await?
        .and_then(|record| record.fork);
    tracing::info!(%run_id, parent = %control.run_id, "run forked over the API");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/runs/{run_id}"))],
        Json(ForkStarted {
            run_id,
            status: leasehold::RunStatus::Running,
            fork: origin,
        }),
    )
        .into_response())
}

/// Forks `parent` per `spec` on this executor: the fork's id, or the
/// answer that refuses it (429 with `Retry-After` without room; 413 or
/// 422 for a flow or texts `POST /runs` would refuse).
pub(super) async fn start_fork(
    app: &Arc<App>,
    parent: &str,
    spec: leasehold::ForkSpec,
) -> Result<Result<String, Response>, ApiError> {
    let executor = Arc::clone(&app.executor);
    let parent = parent.to_owned();
    // Its texts and the flow its changes make, as a posted run's.
    let check = app.flow_check();
    // In a task of its own: a client that goes away mid-request must not
    // cancel a fork half-copied.
    let forked = tokio::spawn(async move { executor.fork(&parent, spec, &check).await })
        .await
        .map_err(|e| ApiError::internal(format!("forking the run panicked: {e}")))??;
    let handle = match forked {
        Forked::Started(handle) => handle,
        Forked::Refused(error) => return Err(refused(error, "the fork's flow")),
        Forked::NoRoom => {
            let mut response = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "no_room",
                format!(
                    "this executor runs as many runs as it may (server.max_live_runs = {}): the \
                 fork was not made; try again when a run has ended",
                    app.executor.options().max_live_runs
                ),
            )
            .into_response();
            response.headers_mut().insert(
                header::RETRY_AFTER,
                axum::http::HeaderValue::from(QUEUE_FULL_RETRY_AFTER_SECS),
            );
            return Ok(Err(response));
        }
    };
    Ok(Ok(handle.run_id().to_owned()))
}

/// A person's control of one run: the run id from the path and the JSON
/// body (`application/json`, or nothing), read within the body's bounds.
pub(super) struct Control {
    pub(super) run_id: String,
    pub(super) body: axum::body::Bytes,
    /// Who asks.
    pub(super) caller: Caller,
}

impl Control {
    /// The body as JSON of `T`; an empty body is `T::default()`.
    pub(super) fn json<T: DeserializeOwned + Default>(&self) -> Result<T, ApiError> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(T::default());
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::bad_request(format!("the body is not the JSON expected: {e}")))
    }
}

impl axum::extract::FromRequest<Arc<App>> for Control {
    type Rejection = ApiError;

    async fn from_request(
        request: axum::extract::Request,
        app: &Arc<App>,
    ) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let path = <Path<String> as axum::extract::FromRequestParts<Arc<App>>>::from_request_parts(
            &mut parts, app,
        )
        .await;
        let run_id = run_id(path)?;
        let caller = Caller::of(&parts.extensions)?;
        let body = read_json_body(app, &parts.headers, body).await?;
        Ok(Self {
            run_id,
            body,
            caller,
        })
    }
}

/// A known path with a method it does not take: a JSON 405.
pub(super) async fn wrong_method(method: axum::http::Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not take {method}", uri.path()),
    )
}

/// Anything else: a JSON 404.
pub(super) async fn no_route(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!("nothing is served at {}", uri.path()),
    )
}

/// The whole body, refused past `max_body` bytes or when it takes longer
/// than the body timeout to arrive.
pub(super) async fn read_body(app: &App, body: Body) -> Result<axum::body::Bytes, ApiError> {
    let limit = app.options.max_body;
    let within = leasehold::clamp_duration(app.options.limits.body_timeout);
    match tokio::time::timeout(within, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!(
                "the body is larger than {limit} bytes (the larger of 1 MiB and twice \
                 limits.flow, LEASEHOLD_LIMITS_FLOW), or was cut off"
            ),
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the body did not arrive within {} (server.body_timeout)",
                humantime::format_duration(within)
            ),
        )),
    }
}

/// The body of a state-changing route that takes JSON: `application/json`,
/// or no `Content-Type` at all for an empty body.
pub(super) async fn read_json_body(
    app: &App,
    headers: &HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, ApiError> {
    let media = media_type(headers);
    if media.as_deref().is_some_and(|m| m != "application/json") {
        return Err(unsupported(media.as_deref(), "application/json"));
    }
    let bytes = read_body(app, body).await?;
    if media.is_none() && !bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(unsupported(None, "application/json"));
    }
    Ok(bytes)
}
