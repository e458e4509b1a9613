//! `leasehold runs … --server URL`: a client of a leasehold server's HTTP
//! API. It asks and answers; `runs.rs` reads the command line and prints
//! the answers the same way as a data directory's.

use std::process::ExitCode;

use futures_util::StreamExt;
use leasehold::{Event, RunQuery};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use super::CliError;
use super::log::{self, Output};
use leasehold_server::{RunView, RunsPage, TraceView};

/// A client of a leasehold server.
pub(super) struct Remote {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Remote {
    pub(super) fn new(url: &str, token: Option<String>) -> Result<Self, CliError> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(CliError::other(format!(
                "--server {url}: expected an http:// or https:// URL, e.g. http://127.0.0.1:7878"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| CliError::other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            base: url.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, CliError> {
        let response = request
            .send()
            .await
            .map_err(|e| CliError::other(format!("{}: {e}", self.base)))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|e| CliError::other(format!("{}: {e}", self.base)))?;
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

    /// `POST /runs/{id}/{control}` with `body` (`resume`, `cancel` or
    /// `reconcile`): the server's answer.
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

    /// Prints the run's event stream until the server says it ended.
    pub(super) async fn follow(
        &self,
        run_id: &str,
        after: u64,
        output: Output,
    ) -> Result<ExitCode, CliError> {
        let response = self
            .request(Method::GET, &format!("/runs/{run_id}/events?after={after}"))
            .send()
            .await
            .map_err(|e| CliError::other(format!("{}: {e}", self.base)))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(CliError::other(refusal(status, &body)));
        }
        let mut body = response.bytes_stream();
        let mut pending = String::new();
        let mut frame = Frame::default();
        let mut origin = None;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| CliError::other(format!("the stream broke: {e}")))?;
            pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = pending.find('\n') {
                let line: String = pending.drain(..=end).collect();
                let line = line.trim_end_matches(['\r', '\n']);
                if !line.is_empty() {
                    frame.feed(line);
                    continue;
                }
                let done = std::mem::take(&mut frame);
                if done.event.as_deref() == Some("end") {
                    eprintln!(
                        "run {run_id} ended: {}",
                        leasehold::printable::printable(&done.data)
                    );
                    return Ok(ExitCode::SUCCESS);
                }
                if done.data.is_empty() {
                    continue;
                }
                let event: Event = serde_json::from_str(&done.data).map_err(|e| {
                    CliError::other(format!(
                        "the server sent an event that is not the schema: {e}"
                    ))
                })?;
                let start = *origin.get_or_insert(event.at);
                log::print(&event, output, start);
            }
        }
        Err(CliError::other(
            "the server closed the stream before the run ended",
        ))
    }
}

/// One Server-Sent Event being read.
#[derive(Debug, Default)]
struct Frame {
    event: Option<String>,
    data: String,
}

impl Frame {
    fn feed(&mut self, line: &str) {
        if line.starts_with(':') {
            return;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(value);
            }
            _ => {}
        }
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
