//! `leasehold runs … --server URL`: a client of a leasehold server's HTTP
//! API. It asks and answers; `runs.rs` reads the command line and prints
//! the answers the same way as a data directory's.

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
