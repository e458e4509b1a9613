//! `GET /runs/{id}/events`: a run's events as Server-Sent Events, replayed
//! from its stored log and then live, resumable with `Last-Event-ID`.
//!
//! Each event is sent with `id: <seq>` and its JSON as `data`. A reader that
//! reconnects with `Last-Event-ID: N` (or `?after=N`) gets exactly the
//! events after `N`. When the run has ended and every event was sent, a
//! last `event: end` carries its status and the stream closes. When the
//! server shuts down, a last `event: shutdown` is sent instead and the
//! stream closes, so no reader can hold the shutdown.
//!
//! With `?text=true`, once the stream has caught up with the log, it also
//! sends the text the run's model calls stream, as `event: text` frames
//! without an id (`{"lease_id", "path", "offset", "text"}`): first what
//! each call in flight wrote so far, then each delta. A reconnect thus
//! resumes from the stored events, then the text since; a reader keeps
//! each call's text by its byte `offset` and drops what it holds. The text
//! is never logged, and only the executor that runs the run has it.
//!
//! One task per stream feeds a small channel from the engine's bus and the
//! run's stored log. The task subscribes to the bus *before* reading the
//! log, so an event is either in what it read or on its subscription; a
//! subscription that lags is caught up from the log. The store is looked
//! at by **one shared watch per run** ([`Watches`]), however many streams
//! follow the run: it reads the run's log and status, then reads them
//! again each time the store's change feed
//! ([`ChangeSource::changes`](leasehold::ChangeSource::changes)) says the run
//! changed (or that changes may have been missed), and wakes the streams
//! when something changed. No timer polls: a run another executor runs is
//! followed through its store's feed (on PostgreSQL, `LISTEN/NOTIFY`), and
//! idle streams cost no store reads. At most `server.max_event_streams`
//! streams are open at once; past it a 503 with `Retry-After`.
//!
//! A reader that stops reading fills the channel and stalls only its own
//! task; one that leaves ends it. The run never waits for either.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use leasehold::{Event, EventKind, LogTail, RunStatus, Store, TextDelta, TextFollow};
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use super::App;
use super::error::{ApiError, ErrorBody};
use crate::metrics::OpenStream;

/// What the shared watch of a run last saw in the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Seen {
    /// The seq of the last event logged.
    last_seq: u64,
    /// The run's status, once read.
    status: Option<RunStatus>,
}

/// One shared look at the store per run followed by event streams.
#[derive(Default)]
pub(super) struct Watches {
    runs: Mutex<HashMap<String, Arc<watch::Sender<Seen>>>>,
}

impl Watches {
    /// How many runs are followed.
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<watch::Sender<Seen>>>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A receiver of the shared watch of `run_id`, starting its follower when
/// it is the first.
fn watch_run(app: &Arc<App>, run_id: &str) -> watch::Receiver<Seen> {
    let mut runs = app.watches.lock();
    if let Some(sender) = runs.get(run_id) {
        return sender.subscribe();
    }
    let (sender, receiver) = watch::channel(Seen::default());
    let sender = Arc::new(sender);
    runs.insert(run_id.to_owned(), Arc::clone(&sender));
    drop(runs);
    tokio::spawn(follow_run(Arc::clone(app), run_id.to_owned(), sender));
    receiver
}

/// Reads `run_id`'s log and status, and again on each change of the run
/// the store's feed announces, while anyone follows it.
async fn follow_run(app: Arc<App>, run_id: String, sender: Arc<watch::Sender<Seen>>) {
    let store: Arc<dyn Store> = Arc::clone(app.engine().store());
    // Subscribed before the first read: a change after it wakes the loop.
    let mut changes = store.changes();
    let mut seen = Seen::default();
    loop {
        let events = store.load_events(&run_id, seen.last_seq).await;
        let record = store.load_run(&run_id).await;
        if let Ok(events) = events
            && let Some(last) = events.last()
        {
            seen.last_seq = last.seq;
        }
        if let Ok(Some(record)) = record {
            seen.status = Some(record.status);
        }
        sender.send_if_modified(|current| {
            let changed = *current != seen;
            *current = seen;
            changed
        });
        tokio::select! {
            changed = changes.changed(&run_id) => {
                if changed.is_none() {
                    // The store is gone: nothing will change any more.
                    tokio::select! {
                        () = sender.closed() => {}
                        () = app.shutdown.cancelled() => {}
                    }
                }
            }
            () = sender.closed() => {}
            () = app.shutdown.cancelled() => {}
        }
        // Stop when nobody follows the run any more; decided under the
        // lock new followers take, so none can subscribe to a watch that
        // is ending.
        let mut runs = app.watches.lock();
        if sender.receiver_count() == 0 || app.shutdown.is_cancelled() {
            if runs.get(&run_id).is_some_and(|s| Arc::ptr_eq(s, &sender)) {
                runs.remove(&run_id);
            }
            return;
        }
    }
}

/// The query of an event stream.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct StreamQuery {
    /// Only the events after this seq (`Last-Event-ID` wins over it).
    after: Option<u64>,
    /// `false`: the events logged so far, then `event: end` with the run's
    /// status whatever it is, and the stream closes.
    live: Option<bool>,
    /// `true`: the text the run's model calls stream, as `event: text`
    /// frames between the events (live streams only).
    text: Option<bool>,
}

/// A stream's token in its query, for a browser's `EventSource`, which
/// cannot set headers (read by the guard).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Read by the guard from the query string.
pub(super) struct StreamToken {
    /// The server's token or an API key, as `Authorization: Bearer` would
    /// carry it.
    token: Option<String>,
}

/// `GET /runs/{id}/events`.
#[utoipa::path(get, path = "/runs/{id}/events", tag = "runs",
    params(
        super::api::RunPath,
        StreamQuery,
        StreamToken,
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this event's seq"),
    ),
    responses(
        (status = 200, description = "Server-Sent Events: each event with `id: <seq>` and its JSON (an `Event`) as `data`; `event: text` frames (`TextDelta`) with `?text=true`; a last `event: end` with the run's status, or `event: shutdown`",
            content_type = "text/event-stream", body = String),
        (status = 400, description = "A query or a `Last-Event-ID` that is not what this route takes", body = ErrorBody),
        (status = 404, description = "No such run of the caller's tenant", body = ErrorBody),
        (status = 500, description = "The store failed", body = ErrorBody),
        (status = 503, description = "As many streams are open as the server allows, or it is shutting down (`too_many_streams`)", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn stream(
    State(app): State<Arc<App>>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<StreamQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let run_id = super::api::run_id(path)?;
    let Query(query) = query.map_err(|rejection| {
        ApiError::bad_request(format!(
            "the query is not what this route takes (`after` is an event's seq, `live` and `text` \
             true or false): {}",
            rejection.body_text()
        ))
    })?;
    let after = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "Last-Event-ID must be an event's seq (a whole number), got {value:?}"
                ))
            })?,
        None => query.after.unwrap_or(0),
    };
    if app.shutdown.is_cancelled() {
        return Ok(busy("the server is shutting down".to_owned()));
    }
    let Ok(permit) = Arc::clone(&app.streams).try_acquire_owned() else {
        return Ok(busy(too_many_streams(&app)));
    };
    if app.engine().store().load_run(&run_id).await?.is_none() {
        return Err(ApiError::unknown_run(&run_id));
    }
    let (tx, rx) = mpsc::channel(64);
    let open = app.metrics.event_stream_opened();
    let live = query.live.unwrap_or(true);
    // Followed before the log is read: a delta after the read is either in
    // the text kept or on the subscription.
    let text = (live && query.text.unwrap_or(false))
        .then(|| app.engine().events().texts().follow(&run_id));
    tokio::spawn(feed(
        app.clone(),
        run_id,
        Follow { after, live, text },
        tx,
        (permit, open),
    ));
    let keep_alive = KeepAlive::new().interval(app.options.keep_alive);
    Ok(Sse::new(ReceiverStream::new(rx))
        .keep_alive(keep_alive)
        .into_response())
}

/// What a wait for a run's next events found ([`wait`]).
#[derive(Debug, serde::Serialize)]
pub(super) struct Waited {
    /// The events after the cursor, in order, as the event stream sends
    /// them.
    pub(super) events: Vec<Event>,
    /// The cursor of the next wait: the seq of the last event handed, or
    /// the cursor given when there was none.
    pub(super) next: u64,
    /// Whether the run has ended and every event up to its end was handed.
    pub(super) ended: bool,
    /// The run's status: the one its last event handed ends it in, or the
    /// store's.
    pub(super) status: RunStatus,
}

/// Waits for `run_id`'s events after the seq `after`, at most `within`:
/// those logged already at once, otherwise the first to be logged, woken
/// by the run's shared watch ([`Watches`]) as the event stream is; at most
/// `limit` of them, never past the one that ends the run. An answer whose
/// last event pauses the run comes once the run's status says it is
/// paused (the event lands first), so that the pause can be answered at
/// once. An answer without events once `within` has passed or the server
/// shuts down. A wait holds a place among the open event streams
/// (`server.max_event_streams`) and is refused like a stream when none is
/// free.
pub(super) async fn wait(
    app: &Arc<App>,
    run_id: &str,
    after: u64,
    within: std::time::Duration,
    limit: usize,
) -> Result<Waited, ApiError> {
    let refused = |message: String| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_streams", message)
    };
    if app.shutdown.is_cancelled() {
        return Err(refused("the server is shutting down".to_owned()));
    }
    let Ok(_permit) = Arc::clone(&app.streams).try_acquire_owned() else {
        return Err(refused(too_many_streams(app)));
    };
    let store = app.engine().store();
    let deadline = tokio::time::Instant::now() + within;
    // Watched before the log is read: an event logged, or a status
    // written, after the read wakes the wait.
    let mut seen = watch_run(app, run_id);
    let mut tail = LogTail::after(after);
    let mut events: Vec<Event> = Vec::new();
    let mut ended = None;
    loop {
        // The status before the log: a run's terminal event lands before
        // its status, so an ended status means its log is whole.
        let record = store
            .load_run(run_id)
            .await?
            .ok_or_else(|| ApiError::unknown_run(run_id))?;
        let logged = store.load_events(run_id, tail.seen()).await?;
        let ready = tail.ready(&logged);
        let room = limit.max(1).saturating_sub(events.len());
        for event in ready.events.iter().take(room) {
            if ended.is_some() {
                break;
            }
            tail.handed(event);
            events.push(event.clone());
            ended = ends_in(&event.kind);
        }
        let quiet_end = events.is_empty() && !ready.gap && record.status.is_terminal();
        let pausing = events
            .last()
            .is_some_and(|e| matches!(e.kind, EventKind::Paused { .. }))
            && !record.status.is_paused()
            && !record.status.is_terminal();
        let answer = |events| Waited {
            events,
            next: tail.seen(),
            ended: ended.is_some() || quiet_end,
            status: ended.unwrap_or(record.status),
        };
        if ended.is_some() || quiet_end || (!events.is_empty() && !pausing) {
            return Ok(answer(events));
        }
        tokio::select! {
            changed = seen.changed() => {
                if changed.is_err() {
                    return Ok(answer(events));
                }
            }
            () = tokio::time::sleep(LogTail::GAP_PATIENCE), if ready.gap => {}
            () = tokio::time::sleep_until(deadline) => return Ok(answer(events)),
            () = app.shutdown.cancelled() => return Ok(answer(events)),
        }
    }
}

/// Why no event stream opens now: every place is taken.
fn too_many_streams(app: &App) -> String {
    format!(
        "{} event streams are open, this server's limit (server.max_event_streams, \
         LEASEHOLD_SERVER_MAX_EVENT_STREAMS): try again shortly",
        app.options.limits.max_event_streams
    )
}

/// 503 with `Retry-After`, for a stream that cannot open now.
fn busy(message: String) -> Response {
    let mut response =
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_streams", message).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

/// The status a run's last event ends it in, if `kind` is one.
fn ends_in(kind: &EventKind) -> Option<RunStatus> {
    match kind {
        EventKind::RunCompleted { .. } => Some(RunStatus::Completed),
        EventKind::RunFailed { .. } => Some(RunStatus::Failed),
        EventKind::RunCancelled { .. } => Some(RunStatus::Cancelled),
        _ => None,
    }
}

fn frame(event: &Event) -> Result<SseEvent, Infallible> {
    let data = serde_json::to_string(event).unwrap_or_else(|e| {
        serde_json::json!({"seq": event.seq, "error": format!("unserializable event: {e}")})
            .to_string()
    });
    Ok(SseEvent::default().id(event.seq.to_string()).data(data))
}

/// A piece of the answer's text: `event: text`, without an id, so that a
/// reader's `Last-Event-ID` stays the last event's seq.
fn text_frame(delta: &TextDelta) -> Result<SseEvent, Infallible> {
    let data = serde_json::to_string(delta).unwrap_or_default();
    Ok(SseEvent::default().event("text").data(data))
}

/// The next piece of text, or never when the stream follows none.
async fn next_text(text: &mut Option<TextFollow>) -> Option<TextDelta> {
    match text {
        Some(text) => text.recv().await,
        None => std::future::pending().await,
    }
}

/// What a stream follows: the events after `after`, then live ones unless
/// not `live`, and the text, when asked for.
struct Follow {
    after: u64,
    live: bool,
    text: Option<TextFollow>,
}

fn end(status: RunStatus) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default()
        .event("end")
        .data(serde_json::json!({ "status": status }).to_string()))
}

fn shutting_down() -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default()
        .event("shutdown")
        .data(r#"{"reason":"the server is shutting down; reconnect with Last-Event-ID"}"#))
}

/// Sends the run's events after `after` until the run ends, the reader
/// leaves or the server shuts down; only those logged so far unless
/// `live`; once caught up with the log, the text kept and then each delta,
/// when asked. Holds `_open`, its place among the open streams and in their
/// gauge, until then.
async fn feed(
    app: Arc<App>,
    run_id: String,
    follow: Follow,
    tx: mpsc::Sender<Result<SseEvent, Infallible>>,
    _open: (OwnedSemaphorePermit, OpenStream),
) {
    let Follow {
        after,
        live: live_too,
        mut text,
    } = follow;
    let store: Arc<dyn Store> = Arc::clone(app.engine().store());
    let mut live = app.engine().events().subscribe();
    let mut seen = watch_run(&app, &run_id);
    let shutdown = app.shutdown.clone();
    // Looks at the store, with the run ended, that found nothing new.
    let mut quiet_after_end = 0u32;
    // Where the stream is in the run's log: a log being appended to may be
    // read with a later event there and an earlier one not yet; the tail
    // stops before such a gap and has the log read again.
    let mut tail = LogTail::after(after);
    loop {
        // Catch up from the log.
        let logged = match store.load_events(&run_id, tail.seen()).await {
            Ok(events) => events,
            Err(error) => {
                tracing::warn!(%run_id, %error, "event stream: the log could not be read");
                return;
            }
        };
        let ready = tail.ready(&logged);
        if let Some(seq) = ready.passed_gap {
            tracing::warn!(%run_id, seq, "event stream: an event of the run is missing from its log; going on without it");
        }
        // The terminal event says how the run ended, even before its
        // status is written (the event lands first).
        let mut ended = None;
        for event in ready.events {
            if tx.send(frame(event)).await.is_err() {
                return;
            }
            tail.handed(event);
            ended = ended.or(ends_in(&event.kind));
        }
        if !ready.events.is_empty() {
            quiet_after_end = 0;
        }
        if ready.gap && ended.is_none() {
            tokio::time::sleep(LogTail::GAP_PATIENCE).await;
            continue;
        }
        let watched = *seen.borrow_and_update();
        if watched.last_seq > tail.seen() {
            // The log grew between the read above and this look at the
            // watch, which is now marked seen: read it again, or a run that
            // goes quiet would hold back what it logged meanwhile.
            continue;
        }
        let status = match watched.status {
            Some(status) => status,
            None => match store.load_run(&run_id).await {
                Ok(Some(record)) => record.status,
                Ok(None) | Err(_) => return,
            },
        };
        if let Some(ended) = ended {
            let _ = tx.send(end(ended)).await;
            return;
        }
        if !live_too {
            let _ = tx.send(end(status)).await;
            return;
        }
        if status.is_terminal() {
            // The terminal event lands in the log just before the status;
            // give a status that ended without one two quiet looks.
            if quiet_after_end >= 2 {
                let _ = tx.send(end(status)).await;
                return;
            }
            quiet_after_end += 1;
        }
        // Then live, until the bus lags, or the shared watch saw something
        // the bus did not bring.
        loop {
            tokio::select! {
                Some(delta) = next_text(&mut text) => {
                    if tx.send(text_frame(&delta)).await.is_err() {
                        return;
                    }
                }
                received = live.recv() => match received {
                    Some(Ok(event)) => {
                        if *event.run_id != *run_id || event.seq <= tail.seen() {
                            continue;
                        }
                        // One this stream did not see came before it:
                        // the log has it, or soon will.
                        if !tail.follows(&event) {
                            break;
                        }
                        if tx.send(frame(&event)).await.is_err() {
                            return;
                        }
                        tail.handed(&event);
                        if let Some(status) = ends_in(&event.kind) {
                            let _ = tx.send(end(status)).await;
                            return;
                        }
                    }
                    // Lagged: the log has what was missed.
                    Some(Err(_)) => break,
                    // The bus is gone: the log is all there is.
                    None => {
                        if seen.changed().await.is_err() {
                            return;
                        }
                        break;
                    }
                },
                changed = seen.changed() => {
                    if changed.is_err() {
                        // The watch ended: the server shuts down, or the
                        // run is gone.
                        if shutdown.is_cancelled() {
                            let _ = tx.send(shutting_down()).await;
                        }
                        return;
                    }
                    let now = *seen.borrow();
                    if now.last_seq > tail.seen() || now.status.is_some_and(RunStatus::is_terminal) {
                        break;
                    }
                }
                () = shutdown.cancelled() => {
                    let _ = tx.send(shutting_down()).await;
                    return;
                }
                // A status that ended without its terminal event: look
                // again after a poll.
                () = tokio::time::sleep(app.options.poll), if status.is_terminal() => break,
                () = tx.closed() => return,
            }
        }
    }
}
