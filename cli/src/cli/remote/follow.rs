//! A run's event stream on a server, `GET /runs/{id}/events`, read with
//! `eventsource-client`: the events logged so far (`live=false`), or live
//! until the run ends or pauses again. A followed stream that breaks — the
//! server restarts, shuts down (`event: shutdown`), a proxy cuts it — is
//! opened again with `Last-Event-ID`, so no event is printed twice or
//! missed; one silent for [`Limits::silence`](super::Limits::silence) (not
//! even a keep-alive, no server answering) is given up, saying how to pick
//! it up again. An event over [`Limits::max_event`](super::Limits::max_event)
//! bytes ends the stream: the server is not one to follow. A reader of the
//! output that leaves (`| head -5`) ends the following at once.
//!
//! The requests go through the same reqwest client as the other requests
//! of `--server`, as the stream's [`HttpTransport`].

use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use eventsource_client::{self as sse, Client as _, SSE};
use futures_util::StreamExt;
use launchdarkly_sdk_transport::{
    ByteStream, HttpTransport, Request, ResponseFuture, TransportError,
};
use leasehold::{Event, EventKind, RunStatus};
use reqwest::StatusCode;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{Remote, refusal};
use crate::cli::CliError;
use crate::cli::log::{self, Output};

/// Where reading a run's events stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::cli) enum Until {
    /// At the last event the run has logged now.
    Logged,
    /// When the run ends, or pauses after the events it had logged before
    /// (a pause it was in before does not count).
    EndOrPause,
    /// When the run ends: its pauses are printed and followed through.
    End,
}

impl Remote {
    /// Prints run `run_id`'s events after `after` until `until`; the exit
    /// code is the run's as a local command's (0 completed, 3 paused, 1
    /// otherwise) when followed, 0 when only the logged events were asked.
    pub(in crate::cli) async fn follow(
        &self,
        run_id: &str,
        after: u64,
        output: Output,
        until: Until,
    ) -> Result<ExitCode, CliError> {
        let live = until != Until::Logged;
        let url = format!("{}/runs/{run_id}/events?live={live}", self.base);
        let options = sse::ReconnectOptions::reconnect(live)
            .retry_initial(false)
            .delay(Duration::from_millis(250))
            .backoff_factor(2)
            .delay_max(Duration::from_secs(5))
            .build();
        let bad = |e: sse::Error| CliError::other(format!("{url}: {e}"));
        let mut builder = sse::ClientBuilder::for_url(&url)
            .map_err(bad)?
            .last_event_id(after.to_string())
            .reconnect(options);
        if let Some(token) = &self.token {
            builder = builder
                .header("authorization", &format!("Bearer {token}"))
                .map_err(bad)?;
        }
        let client = builder.build_with_transport(Transport {
            http: self.http.clone(),
            max_event: self.limits.max_event,
            headers_within: self.limits.total,
        });
        let mut stream = client.stream();
        let mut origin = None;
        let mut heard = tokio::time::Instant::now();
        let left = crate::cli::reader::left();
        tokio::pin!(left);
        loop {
            let silence = self.limits.silence;
            let next = tokio::select! {
                next = tokio::time::timeout_at(heard + silence, stream.next()) => next,
                () = &mut left => {
                    say!("leasehold: stopped following run {run_id}: nobody reads its events any more");
                    return Ok(ExitCode::SUCCESS);
                }
            };
            let item = match next {
                Ok(Some(item)) => item,
                Ok(None) => {
                    return Err(CliError::other(format!(
                        "{}: the event stream of run {run_id} closed before its end",
                        self.base
                    )));
                }
                Err(_) => {
                    return Err(CliError::other(format!(
                        "{}: nothing heard for {} (no event, no keep-alive): the server is gone \
                         or cut off. Where the run is: `leasehold runs show {run_id} --server {}`",
                        self.base,
                        humantime::format_duration(silence),
                        self.base
                    )));
                }
            };
            let frame = match item {
                Ok(SSE::Event(frame)) => frame,
                Ok(SSE::Connected(_) | SSE::Comment(_)) => {
                    heard = tokio::time::Instant::now();
                    continue;
                }
                // The first answer was a refusal: it says why.
                Err(sse::Error::UnexpectedResponse(response, body))
                    if !live || origin.is_none() =>
                {
                    let status = StatusCode::from_u16(response.status())
                        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    let text = read_body(body.into_stream()).await;
                    return Err(CliError::other(refusal(status, &text)));
                }
                Err(sse::Error::Transport(error))
                    if std::error::Error::source(&error).is_some_and(|e| e.is::<Oversized>()) =>
                {
                    return Err(CliError::other(format!(
                        "{}: run {run_id}'s event stream: {}",
                        self.base,
                        Oversized(self.limits.max_event)
                    )));
                }
                Err(sse::Error::Transport(error))
                    if origin.is_none()
                        && std::error::Error::source(&error)
                            .is_some_and(|e| e.is::<NoHeaders>()) =>
                {
                    return Err(CliError::other(format!(
                        "{}: run {run_id}'s event stream: {}: the server is overloaded or cut off; \
                         give a longer --server-timeout to wait longer",
                        self.base,
                        NoHeaders(self.limits.total)
                    )));
                }
                Err(sse::Error::Transport(error)) if origin.is_none() && !live => {
                    return Err(CliError::other(format!("{}: {error}", self.base)));
                }
                // The stream broke or was refused on a reconnection: it is
                // opened again with the last event's id.
                Err(_) => continue,
            };
            heard = tokio::time::Instant::now();
            match frame.event_type.as_str() {
                "end" => {
                    let status = ended_as(&frame.data);
                    if live {
                        say!(
                            "run {run_id} ended: {}",
                            status.map_or("unknown", RunStatus::name)
                        );
                        return Ok(status.map_or(ExitCode::FAILURE, crate::cli::exit_code_of));
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                // The server stops: reconnected to, with the last id.
                "shutdown" => continue,
                _ => {}
            }
            let event: Event = serde_json::from_str(&frame.data).map_err(|e| {
                CliError::other(format!(
                    "{}: the server sent an event that is not the schema: {e}",
                    self.base
                ))
            })?;
            let start = *origin.get_or_insert(event.at);
            log::print(&event, output, start);
            if until == Until::EndOrPause && event.seq > after && pauses(&event.kind) {
                say!("run {run_id} paused for a person");
                return Ok(ExitCode::from(crate::cli::EXIT_PAUSED));
            }
        }
    }
}

/// Whether the run waits for a person after `kind`.
fn pauses(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Paused { .. } | EventKind::ReconciliationRequired { .. }
    )
}

/// The status an `event: end` carries (`{"status": "completed"}`).
fn ended_as(data: &str) -> Option<RunStatus> {
    #[derive(serde::Deserialize)]
    struct End {
        status: RunStatus,
    }
    serde_json::from_str::<End>(data).ok().map(|end| end.status)
}

/// At most 64 KiB of a refusal's body, as text.
async fn read_body(mut body: ByteStream) -> String {
    let mut text = Vec::new();
    while let Some(Ok(chunk)) = body.next().await {
        text.extend_from_slice(&chunk);
        if text.len() > 64 * 1024 {
            break;
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// The event stream's transport: the `--server` requests' reqwest client.
/// Its body is read by a task of its own into a channel, so that what the
/// stream holds is `Sync`, as the transport's contract asks; that task ends
/// the body with [`Oversized`] when an event grows over `max_event` bytes.
#[derive(Clone)]
struct Transport {
    http: reqwest::Client,
    max_event: usize,
    /// How long the answer's headers may take; the body, long by nature,
    /// is bounded by the silence alone.
    headers_within: Duration,
}

/// An event of more bytes than the stream takes.
#[derive(Debug, thiserror::Error)]
#[error(
    "an event of over {}, more than a leasehold server sends: not read",
    leasehold::config::format_size(*.0 as u64)
)]
struct Oversized(usize);

/// A stream whose answer did not start in time.
#[derive(Debug, thiserror::Error)]
#[error(
    "no answer within {} (--server-timeout)",
    humantime::format_duration(*.0)
)]
struct NoHeaders(Duration);

/// The size of the event being received: the bytes of its lines since the
/// last blank line, which ends an event (a line ends with CRLF, LF or CR).
#[derive(Default)]
struct EventSize {
    bytes: usize,
    line_start: bool,
    after_cr: bool,
}

impl EventSize {
    /// Counts `chunk`'s bytes; the event's size after it.
    fn take(&mut self, chunk: &[u8]) -> usize {
        for &byte in chunk {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    if self.line_start {
                        self.bytes = 0;
                    }
                    self.line_start = true;
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    self.line_start = false;
                    self.after_cr = false;
                    self.bytes += 1;
                }
            }
        }
        self.bytes
    }
}

impl HttpTransport for Transport {
    fn request(&self, request: Request<Option<Bytes>>) -> ResponseFuture {
        let (parts, body) = request.into_parts();
        let mut outgoing = self.http.request(parts.method, parts.uri.to_string());
        outgoing = outgoing.headers(parts.headers);
        if let Some(body) = body {
            outgoing = outgoing.body(body);
        }
        let max_event = self.max_event;
        let headers_within = self.headers_within;
        let sent = tokio::spawn(async move {
            let response = tokio::time::timeout(headers_within, outgoing.send())
                .await
                .map_err(|_| TransportError::new(NoHeaders(headers_within)))?
                .map_err(TransportError::new)?;
            let mut answer = http::Response::builder().status(response.status());
            if let Some(headers) = answer.headers_mut() {
                *headers = response.headers().clone();
            }
            let (tx, rx) = mpsc::channel(16);
            tokio::spawn(pump(response, tx, max_event));
            let body: ByteStream = Box::pin(ReceiverStream::new(rx));
            answer.body(body).map_err(TransportError::new)
        });
        Box::pin(async move {
            match sent.await {
                Ok(answer) => answer,
                Err(joined) => Err(TransportError::new(joined)),
            }
        })
    }
}

/// Copies `response`'s body into `tx` until it ends, nobody reads, or an
/// event grows over `max_event` bytes.
async fn pump(
    response: reqwest::Response,
    tx: mpsc::Sender<Result<Bytes, TransportError>>,
    max_event: usize,
) {
    let mut body = response.bytes_stream();
    let mut size = EventSize::default();
    loop {
        let chunk = tokio::select! {
            chunk = body.next() => chunk,
            () = tx.closed() => return,
        };
        let Some(chunk) = chunk else { return };
        let chunk = match chunk {
            Ok(chunk) if size.take(&chunk) > max_event => {
                Err(TransportError::new(Oversized(max_event)))
            }
            Ok(chunk) => Ok(chunk),
            Err(error) => Err(TransportError::new(error)),
        };
        let last = chunk.is_err();
        if tx.send(chunk).await.is_err() || last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::extract::State;
    use axum::http::HeaderMap;
    use axum::response::sse::{Event as SseEvent, Sse};
    use axum::routing::get;
    use futures_util::stream;

    use super::*;

    fn step(seq: u64) -> SseEvent {
        let event = serde_json::json!({
            "seq": seq, "position": seq, "at": 1_000 + seq, "run_id": "run-1", "path": "run",
            "kind": "step_started", "step": seq, "limit": 9, "nudges": 0,
        });
        SseEvent::default()
            .id(seq.to_string())
            .data(event.to_string())
    }

    /// A server whose first stream sends two events and breaks off as a
    /// server that shuts down does, and whose next sends what follows the
    /// `Last-Event-ID` it is given, then the end.
    async fn breaking_server(asked: Arc<Mutex<Vec<Option<String>>>>) -> String {
        let app =
            Router::new()
                .route(
                    "/runs/run-1/events",
                    get(
                        |State(asked): State<Arc<Mutex<Vec<Option<String>>>>>,
                         headers: HeaderMap| async move {
                            let last = headers
                                .get("last-event-id")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_owned);
                            let first = {
                                let mut asked = asked.lock().unwrap();
                                asked.push(last.clone());
                                asked.len() == 1
                            };
                            let frames: Vec<SseEvent> = if first {
                                vec![
                                    step(1),
                                    step(2),
                                    SseEvent::default().event("shutdown").data("{}"),
                                ]
                            } else {
                                let after: u64 = last.and_then(|l| l.parse().ok()).unwrap_or(0);
                                let mut frames: Vec<SseEvent> = (after + 1..=3).map(step).collect();
                                frames.push(
                                    SseEvent::default()
                                        .event("end")
                                        .data(r#"{"status":"completed"}"#),
                                );
                                frames
                            };
                            Sse::new(stream::iter(
                                frames.into_iter().map(Ok::<_, std::convert::Infallible>),
                            ))
                        },
                    ),
                )
                .with_state(asked);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_stream_broken_off_is_opened_again_after_the_last_event_until_the_run_ends() {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let base = breaking_server(Arc::clone(&asked)).await;
        let remote = Remote::new(&base, None, super::super::DEFAULT_TOTAL).unwrap();
        let code = remote
            .follow("run-1", 0, Output::Json, Until::EndOrPause)
            .await
            .unwrap();
        assert_eq!(code, ExitCode::SUCCESS);
        assert_eq!(
            *asked.lock().unwrap(),
            vec![Some("0".to_owned()), Some("2".to_owned())],
            "opened from the start, then again after the last event it got"
        );
    }

    #[tokio::test]
    async fn a_refused_stream_says_why() {
        let app = Router::new().route(
            "/runs/nope/events",
            get(|| async {
                (
                    axum::http::StatusCode::NOT_FOUND,
                    axum::Json(serde_json::json!({"error": {"code": "not_found", "message": "no run nope"}})),
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let remote =
            Remote::new(&format!("http://{addr}"), None, super::super::DEFAULT_TOTAL).unwrap();
        for until in [Until::Logged, Until::EndOrPause] {
            let refused = remote
                .follow("nope", 0, Output::Json, until)
                .await
                .unwrap_err();
            assert!(refused.to_string().contains("no run nope"), "{refused}");
        }
    }

    #[tokio::test]
    async fn a_followed_run_that_pauses_again_exits_3_and_an_earlier_pause_does_not_count() {
        let paused = |seq: u64| {
            let event = serde_json::json!({
                "seq": seq, "position": seq, "at": 1_000 + seq, "run_id": "run-1",
                "path": "run", "kind": "paused", "reason": "a person must decide",
                "subject": "rollback", "evidence": {"count": 0},
            });
            SseEvent::default()
                .id(seq.to_string())
                .data(event.to_string())
        };
        let app = Router::new().route(
            "/runs/run-1/events",
            get(move || async move {
                // Held open after the pause: the client leaves by itself.
                let frames = stream::iter(
                    [paused(1), step(2), paused(3)]
                        .into_iter()
                        .map(Ok::<_, std::convert::Infallible>),
                )
                .chain(stream::pending());
                Sse::new(frames)
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let remote =
            Remote::new(&format!("http://{addr}"), None, super::super::DEFAULT_TOTAL).unwrap();
        // Resumed after its pause at 1: the pause at 3 is a new one.
        let code = remote
            .follow("run-1", 1, Output::Json, Until::EndOrPause)
            .await
            .unwrap();
        assert_eq!(code, ExitCode::from(crate::cli::EXIT_PAUSED));
    }

    fn small(max_event: usize) -> super::super::Limits {
        super::super::Limits {
            max_event,
            ..Default::default()
        }
    }

    #[test]
    fn an_event_is_measured_from_the_last_blank_line_whatever_ends_its_lines() {
        for ending in ["\n", "\r\n", "\r"] {
            let mut size = EventSize::default();
            let event = format!("id: 1{ending}data: abc{ending}");
            assert_eq!(size.take(event.as_bytes()), 14, "{ending:?}");
            // Split across chunks, the blank line still ends the event.
            let (a, b) = ending.split_at(ending.len() / 2);
            size.take(a.as_bytes());
            assert_eq!(size.take(format!("{b}data: x").as_bytes()), 7, "{ending:?}");
            assert_eq!(size.take(b"yz"), 9, "{ending:?}");
        }
    }

    #[tokio::test]
    async fn an_endless_event_ends_the_stream_at_the_bound_and_many_small_ones_do_not() {
        let app = Router::new()
            .route(
                "/runs/endless/events",
                get(|| async {
                    let head = stream::once(async { Ok(Bytes::from_static(b"id: 1\ndata: ")) });
                    let tail = stream::repeat_with(|| {
                        Ok::<_, std::convert::Infallible>(Bytes::from(vec![b'x'; 16 * 1024]))
                    });
                    (
                        [("content-type", "text/event-stream")],
                        axum::body::Body::from_stream(head.chain(tail)),
                    )
                }),
            )
            .route(
                "/runs/run-1/events",
                get(|| async {
                    let mut frames: Vec<SseEvent> = (1..=300).map(step).collect();
                    frames.push(
                        SseEvent::default()
                            .event("end")
                            .data(r#"{"status":"completed"}"#),
                    );
                    Sse::new(stream::iter(
                        frames.into_iter().map(Ok::<_, std::convert::Infallible>),
                    ))
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let base = format!("http://{addr}");
        // Three hundred events of some 120 bytes each, 36 KB in all.
        let remote = Remote::with_limits(&base, None, small(4 << 10)).unwrap();
        let code = remote
            .follow("run-1", 0, Output::Json, Until::EndOrPause)
            .await
            .unwrap();
        assert_eq!(code, ExitCode::SUCCESS);
        for until in [Until::Logged, Until::EndOrPause] {
            let reading = remote.follow("endless", 0, Output::Json, until);
            let refused = tokio::time::timeout(Duration::from_secs(60), reading)
                .await
                .expect("read at most the bound")
                .unwrap_err();
            assert!(
                refused.to_string().contains("an event of over 4KiB"),
                "{refused}"
            );
        }
    }
}
