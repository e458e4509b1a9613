//! `GET /runs/{id}/events`: a run's events as Server-Sent Events, replayed
//! from its stored log and then live, resumable with `Last-Event-ID`.
//!
//! Each event is sent with `id: <seq>` and its JSON as `data`. A reader that
//! reconnects with `Last-Event-ID: N` (or `?after=N`) gets exactly the
//! events after `N`. When the run has ended and every event was sent, a
//! last `event: end` carries its status and the stream closes.
//!
//! One task per stream reads the store and the bus and feeds a small
//! channel. The task subscribes to the bus *before* reading the log, so an
//! event is either in what it read or on its subscription; a subscription
//! that lags is caught up from the log. A reader that stops reading fills
//! the channel and stalls only its own task; one that leaves ends it. The
//! run never waits for either.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use leasehold_actors::event::{Event, EventKind};
use leasehold_actors::ports::{RunStatus, Store};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::App;
use super::error::ApiError;

/// The query of an event stream.
#[derive(Debug, Default, Deserialize)]
pub(super) struct StreamQuery {
    after: Option<u64>,
}

/// `GET /runs/{id}/events`.
pub(super) async fn stream(
    State(app): State<Arc<App>>,
    Path(run_id): Path<String>,
    query: Result<Query<StreamQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let Query(query) = query.map_err(|rejection| {
        ApiError::bad_request(format!(
            "the query is not what this route takes (`after` is an event's seq): {}",
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
    if app.engine.store().load_run(&run_id).await?.is_none() {
        return Err(ApiError::unknown_run(&run_id));
    }
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(feed(app.clone(), run_id, after, tx));
    let keep_alive = KeepAlive::new().interval(app.options.keep_alive);
    Ok(Sse::new(ReceiverStream::new(rx)).keep_alive(keep_alive))
}

fn is_last(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::RunCompleted { .. }
            | EventKind::RunFailed { .. }
            | EventKind::RunCancelled { .. }
    )
}

fn frame(event: &Event) -> Result<SseEvent, Infallible> {
    let data = serde_json::to_string(event).unwrap_or_else(|e| {
        serde_json::json!({"seq": event.seq, "error": format!("unserializable event: {e}")})
            .to_string()
    });
    Ok(SseEvent::default().id(event.seq.to_string()).data(data))
}

fn end(status: RunStatus) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default()
        .event("end")
        .data(serde_json::json!({ "status": status }).to_string()))
}

/// Sends the run's events after `after` until the run ends or the reader
/// leaves.
async fn feed(
    app: Arc<App>,
    run_id: String,
    mut after: u64,
    tx: mpsc::Sender<Result<SseEvent, Infallible>>,
) {
    let store: Arc<dyn Store> = Arc::clone(app.engine.store());
    let mut live = app.engine.events().subscribe();
    let poll = app.options.poll;
    // Polls of the store, with the run ended, that found nothing new.
    let mut quiet_after_end = 0u32;
    loop {
        // Catch up from the log.
        let logged = match store.load_events(&run_id, after).await {
            Ok(events) => events,
            Err(error) => {
                tracing::warn!(%run_id, %error, "event stream: the log could not be read");
                return;
            }
        };
        let mut ended = false;
        for event in &logged {
            if tx.send(frame(event)).await.is_err() {
                return;
            }
            after = event.seq;
            ended |= is_last(&event.kind);
        }
        if !logged.is_empty() {
            quiet_after_end = 0;
        }
        let status = match store.load_run(&run_id).await {
            Ok(Some(record)) => record.status,
            Ok(None) | Err(_) => return,
        };
        if ended || status.is_terminal() {
            // The terminal event lands in the log just before the status;
            // give a status that ended without one two quiet polls.
            if ended || quiet_after_end >= 2 {
                let _ = tx.send(end(status)).await;
                return;
            }
            quiet_after_end += 1;
        }
        // Then live, until the bus lags or goes quiet for a poll.
        let deadline = tokio::time::sleep(poll);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                received = live.recv() => match received {
                    Some(Ok(event)) => {
                        if event.run_id != run_id || event.seq <= after {
                            continue;
                        }
                        if tx.send(frame(&event)).await.is_err() {
                            return;
                        }
                        after = event.seq;
                        if is_last(&event.kind) {
                            let status = match &event.kind {
                                EventKind::RunCompleted { .. } => RunStatus::Completed,
                                EventKind::RunFailed { .. } => RunStatus::Failed,
                                _ => RunStatus::Cancelled,
                            };
                            let _ = tx.send(end(status)).await;
                            return;
                        }
                    }
                    // Lagged: the log has what was missed.
                    Some(Err(_)) => break,
                    // The bus is gone: the log is all there is; poll it.
                    None => {
                        (&mut deadline).await;
                        break;
                    }
                },
                () = &mut deadline => break,
                () = tx.closed() => return,
            }
        }
    }
}
