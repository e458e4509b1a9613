//! `leasehold runs … --server URL`: a client of a leasehold server's HTTP
//! API. It asks and answers; `runs.rs` reads the command line and prints
//! the answers the same way as a data directory's.
//!
//! A server is a peer like any other: an answer is read to at most
//! [`Limits::max_answer`] bytes, an event of its stream to at most
//! [`Limits::max_event`], and a server silent for [`Limits::silence`] — it
//! accepted the connection and answers nothing, as one stopped with SIGSTOP
//! does — is given up, saying so. Silence alone does not bound a server
//! that trickles a byte now and then: a whole answer must come within
//! [`Limits::total`] (`--server-timeout`), and a run's event stream, long
//! by nature, must start within it.

use std::time::Duration;

use futures_util::StreamExt;
use leasehold::RunQuery;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use super::CliError;

mod follow;
pub(super) use follow::Until;
use leasehold_server::{RunView, RunsPage, TraceView};

/// A client of a leasehold server.
pub(super) struct Remote {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
    limits: Limits,
}

/// What the client takes from a server before it gives up on it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// How long a server may send nothing — no byte of an answer, no event
    /// or keep-alive of a stream — before it is taken as gone (60 s; a
    /// server's stream sends a keep-alive every 15 s).
    pub silence: Duration,
    /// How long one answer may take, from the request to its last byte
    /// (120 s, `--server-timeout`); for a run's event stream, to its
    /// answer's headers, after which only the silence bounds it.
    pub total: Duration,
    /// The most bytes of one answer (256 MiB).
    pub max_answer: usize,
    /// The most bytes of one event of a run's stream (64 MiB; an event
    /// holds at most a model answer or a tool result, 4 MiB and 1 MiB by
    /// default).
    pub max_event: usize,
}

/// How long one answer of a server may take by default.
pub(super) const DEFAULT_TOTAL: Duration = Duration::from_secs(120);

impl Default for Limits {
    fn default() -> Self {
        Self {
            silence: Duration::from_secs(60),
            total: DEFAULT_TOTAL,
            max_answer: 256 << 20,
            max_event: 64 << 20,
        }
    }
}

impl Remote {
    pub(super) fn new(url: &str, token: Option<String>, total: Duration) -> Result<Self, CliError> {
        let limits = Limits {
            total,
            ..Limits::default()
        };
        Self::with_limits(url, token, limits)
    }

    pub(super) fn with_limits(
        url: &str,
        token: Option<String>,
        limits: Limits,
    ) -> Result<Self, CliError> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(CliError::other(format!(
                "--server {url}: expected an http:// or https:// URL, e.g. http://127.0.0.1:7878"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(limits.silence)
            .build()
            .map_err(|e| CliError::other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            base: url.trim_end_matches('/').to_owned(),
            token,
            http,
            limits,
        })
    }

    /// What a failed request says: a timeout is the server's silence.
    fn failed(&self, error: &reqwest::Error) -> CliError {
        if error.is_timeout() {
            return CliError::other(format!(
                "{}: nothing heard for {}: the server is stopped, overloaded or cut off",
                self.base,
                humantime::format_duration(self.limits.silence)
            ));
        }
        CliError::other(format!("{}: {error}", self.base))
    }

    /// What an answer slower than [`Limits::total`] says.
    fn too_slow(&self) -> CliError {
        CliError::other(format!(
            "{}: no whole answer within {} (--server-timeout): the server is overloaded, cut off \
             or sending too slowly; give a longer --server-timeout to wait longer",
            self.base,
            humantime::format_duration(self.limits.total)
        ))
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends `request` and reads its JSON answer, all within
    /// [`Limits::total`].
    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, CliError> {
        tokio::time::timeout(self.limits.total, self.exchange(request))
            .await
            .unwrap_or_else(|_| Err(self.too_slow()))
    }

    async fn exchange<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, CliError> {
        let response = request.send().await.map_err(|e| self.failed(&e))?;
        let status = response.status();
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            body.extend_from_slice(&chunk.map_err(|e| self.failed(&e))?);
            if body.len() > self.limits.max_answer {
                return Err(CliError::other(format!(
                    "{}: an answer of over {}, more than a leasehold server sends: not read",
                    self.base,
                    leasehold::config::format_size(self.limits.max_answer as u64)
                )));
            }
        }
        let body = String::from_utf8_lossy(&body);
        if !status.is_success() {
            return Err(CliError::other(refusal(status, &body)));
        }
        serde_json::from_str(&body).map_err(|e| {
            CliError::other(format!(
                "{}: an answer that is not the JSON expected: {e}",
                self.base
            ))
        })
    }

    /// `GET /runs`: one page of the runs `query` asks for.
    pub(super) async fn list(&self, query: RunQuery) -> Result<RunsPage, CliError> {
        let mut pairs = vec![("limit", query.limit.to_string())];
        if let Some(status) = query.status {
            let name = serde_json::to_value(status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            pairs.push(("status", name));
        }
        let texts = [("after", query.after), ("flow", query.flow)];
        pairs.extend(texts.into_iter().filter_map(|(k, v)| Some((k, v?))));
        let instants = [
            ("since", query.created_from_ms),
            ("until", query.created_before_ms),
        ];
        pairs.extend(
            instants
                .into_iter()
                .filter_map(|(k, v)| Some((k, v?.to_string()))),
        );
        let query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish();
        self.send(self.request(Method::GET, &format!("/runs?{query}")))
            .await
    }

    /// `GET /runs/{id}`: one run.
    pub(super) async fn show(&self, run_id: &str) -> Result<RunView, CliError> {
        self.send(self.request(Method::GET, &format!("/runs/{run_id}")))
            .await
    }

    /// `GET /runs/{id}/trace`: a run's verdict trace.
    pub(super) async fn trace(&self, run_id: &str) -> Result<TraceView, CliError> {
        self.send(self.request(Method::GET, &format!("/runs/{run_id}/trace")))
            .await
    }

    /// `GET /runs/{id}/recording`: what the server's store keeps of a run,
    /// for a replay here.
    pub(super) async fn recording(
        &self,
        run_id: &str,
    ) -> Result<leasehold_lab::Recording, CliError> {
        self.send(self.request(Method::GET, &format!("/runs/{run_id}/recording")))
            .await
    }

    /// `POST /runs/{id}/{control}` with `body` (`resume`, `cancel` or
    /// `reconcile`): the server's answer.
    /// `POST /runs/actions` with `body`: the server's report.
    pub(super) async fn act_on_many(
        &self,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, CliError> {
        self.send(self.request(Method::POST, "/runs/actions").json(body))
            .await
    }

    /// `GET path`: the server's JSON answer.
    pub(super) async fn get_json(&self, path: &str) -> Result<serde_json::Value, CliError> {
        self.send(self.request(Method::GET, path)).await
    }

    /// `POST path` with `body`: the server's JSON answer.
    pub(super) async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, CliError> {
        self.send(self.request(Method::POST, path).json(body)).await
    }

    pub(super) async fn control(
        &self,
        run_id: &str,
        control: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, CliError> {
        let path = format!("/runs/{run_id}/{control}");
        self.send(self.request(Method::POST, &path).json(body))
            .await
    }
}

/// The server's refusal, from its JSON error body when it sent one.
fn refusal(status: StatusCode, body: &str) -> String {
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(|m| m.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| body.chars().take(300).collect());
    format!("the server refused ({status}): {message}")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::Router;
    use axum::routing::get;
    use bytes::Bytes;
    use futures_util::stream;

    use super::*;
    use crate::cli::log::Output;

    #[tokio::test]
    async fn an_endless_answer_is_refused_at_the_bound() {
        let app = Router::new().route(
            "/runs/run-1",
            get(|| async {
                let endless = stream::repeat_with(|| {
                    Ok::<_, std::convert::Infallible>(Bytes::from(vec![b' '; 64 * 1024]))
                });
                (
                    [("content-type", "application/json")],
                    axum::body::Body::from_stream(endless),
                )
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let limits = Limits {
            max_answer: 1 << 20,
            ..Limits::default()
        };
        let remote = Remote::with_limits(&format!("http://{addr}"), None, limits).unwrap();
        let refused = tokio::time::timeout(Duration::from_secs(60), remote.show("run-1"))
            .await
            .expect("read at most the bound")
            .unwrap_err();
        assert!(
            refused.to_string().contains("an answer of over 1MiB"),
            "{refused}"
        );
    }

    #[tokio::test]
    async fn a_server_that_accepts_and_answers_nothing_is_given_up_after_its_silence() {
        // Connections are accepted by the kernel and never answered, as a
        // server stopped with SIGSTOP does.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            silence: Duration::from_millis(300),
            ..Limits::default()
        };
        let remote = Remote::with_limits(&format!("http://{addr}"), None, limits).unwrap();
        let refused = remote.show("run-1").await.unwrap_err();
        assert!(
            refused.to_string().contains("nothing heard for 300ms"),
            "{refused}"
        );
        let refused = remote
            .follow("run-1", 0, Output::Json, Until::EndOrPause)
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("nothing heard for 300ms"),
            "{refused}"
        );
        drop(listener);
    }

    #[tokio::test]
    async fn a_server_slower_than_the_total_bound_is_given_up_by_a_request_and_a_stream_alike() {
        // Never silent for the silence bound, never done: the kernel holds
        // the connection, and only the total bound can end the wait.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            total: Duration::from_millis(300),
            ..Limits::default()
        };
        let remote = Remote::with_limits(&format!("http://{addr}"), None, limits).unwrap();
        let refused = remote.show("run-1").await.unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("no whole answer within 300ms (--server-timeout)"),
            "{refused}"
        );
        for until in [Until::Logged, Until::EndOrPause] {
            let refused = remote
                .follow("run-1", 0, Output::Json, until)
                .await
                .unwrap_err();
            assert!(
                refused
                    .to_string()
                    .contains("no answer within 300ms (--server-timeout)"),
                "{until:?}: {refused}"
            );
        }
        drop(listener);
    }
}
