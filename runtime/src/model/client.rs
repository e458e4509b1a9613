//! The OpenAI-compatible chat-completions client.
//!
//! Guarantees:
//!
//! - **No request-wide deadline.** The HTTP client has a connect timeout and
//!   nothing else; every read of the answer is bounded by the idle timeout
//!   alone, re-armed by each chunk. A stream that keeps sending runs as long
//!   as its lease lets it. (`clippy.toml` forbids reqwest's `timeout`
//!   methods, so no total timeout can creep back in.)
//! - **Evidence.** Each read that brings at least one chunk (an SSE event,
//!   or body bytes of a blocking answer) is reported with
//!   [`Evidence::observe`]; a wait for a rate limit is reported with
//!   [`Evidence::progress`], so the audit trail shows why the call is quiet.
//! - **A connection closed under a request.** When the server closes the
//!   connection a request went out on before any byte of its answer came
//!   back (a kept-alive connection it had just let go, or a reset), the
//!   request is sent once more at once, on a new connection, and the resend
//!   is reported with [`Evidence::progress`]. A second such close is the
//!   call's failure ([`ModelErrorKind::Disconnected`](leasehold_actors::ModelErrorKind::Disconnected)).
//! - **Rate limits.** A 429 is retried by the client itself, after waiting
//!   as the server said (`retry-after-ms`, `Retry-After` seconds or date;
//!   1 s, 2 s, 4 s … when it said nothing) plus a random extra of up to a
//!   tenth of that wait (at least up to 100 ms), so that calls refused
//!   together do not come back together, up to
//!   [`ModelSettings::rate_limit_retries`] times; then the error is returned
//!   with its `retry_after`.
//! - **Bounded answers.** A streamed answer is held to
//!   [`ModelSettings::max_answer_bytes`] by its parser; a blocking body to
//!   [`ModelSettings::max_body_bytes`] while it is read, then its answer to
//!   the answer cap. Past a cap the call ends at once (the response, and so
//!   the connection, is dropped) with an error naming the cap and the
//!   endpoint, and the read that crossed it is not reported as evidence.
//! - **Usage** of every completed call is added to the [`UsageLedger`]
//!   under the request's consumer: the server's report where it is
//!   believable, else counted from the text ([`tokens::believed`](super::tokens::believed):
//!   a usage absent, `null`, or of `0` tokens for a side that had text).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::classify::{
    self, Cap, Phase, classify_status, over_cap, parse_retry_after, transport_error,
};
use super::ledger::UsageLedger;
use super::settings::{ModelRole, ModelSettings};
use super::sse::StreamParser;
use super::wire;
use crate::ConfigError;
use leasehold_actors::{BoxFuture, Evidence, ModelClient, ModelError, ModelReply, ModelRequest};

/// The most of an error answer's body that is read, for its message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A setting was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The HTTP client could not be built (TLS initialisation).
    #[error("the HTTP client could not be built: {0}")]
    Http(String),
}

/// A chat-completions client for any OpenAI-compatible server. Cheap to
/// clone; clones share the connection pool and the [`UsageLedger`].
///
/// As a [`ModelClient`] it serves the role it was made for
/// ([`ModelRole::Default`] unless [`OpenAiClient::role`] says otherwise),
/// streaming or blocking as [`ModelRequest::stream`] asks.
#[derive(Clone)]
pub struct OpenAiClient {
    shared: Arc<Shared>,
    role: ModelRole,
}

struct Shared {
    http: reqwest::Client,
    settings: ModelSettings,
    ledger: UsageLedger,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("role", &self.role)
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl OpenAiClient {
    /// Validates `settings` and builds a client with a fresh ledger.
    pub fn new(settings: ModelSettings) -> Result<Self, SetupError> {
        Self::with_ledger(settings, UsageLedger::new())
    }

    /// Validates `settings` and builds a client that records usage into
    /// `ledger`.
    pub fn with_ledger(settings: ModelSettings, ledger: UsageLedger) -> Result<Self, SetupError> {
        settings.validate()?;
        let http = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .build()
            .map_err(|e| SetupError::Http(e.to_string()))?;
        Ok(Self {
            shared: Arc::new(Shared {
                http,
                settings,
                ledger,
            }),
            role: ModelRole::Default,
        })
    }

    /// A client configured from the `LEASEHOLD_MODEL_*` variables
    /// ([`ModelSettings::from_env`]).
    pub fn from_env() -> Result<Self, SetupError> {
        Self::new(ModelSettings::from_env()?)
    }

    /// The same client (same pool, same ledger) serving `role`.
    pub fn role(&self, role: ModelRole) -> Self {
        Self {
            shared: self.shared.clone(),
            role,
        }
    }

    /// The role this client serves.
    pub fn serves(&self) -> ModelRole {
        self.role
    }

    /// The ledger usage is recorded into.
    pub fn ledger(&self) -> &UsageLedger {
        &self.shared.ledger
    }

    /// The settings.
    pub fn settings(&self) -> &ModelSettings {
        &self.shared.settings
    }

    /// Starts a streamed completion of `request` (streamed whatever
    /// `request.stream` says) and hands back its text as it arrives.
    ///
    /// Rate limits are waited out before this returns; everything after the
    /// answer began is reported by [`ReplyStream::next_text`] and
    /// [`ReplyStream::finish`].
    pub async fn stream(
        &self,
        mut request: ModelRequest,
        evidence: Evidence,
    ) -> Result<ReplyStream, ModelError> {
        request.stream = true;
        self.open(request, evidence, None).await
    }

    /// Runs one completion, with `response_format` added to the body when
    /// given.
    pub(crate) async fn call(
        &self,
        request: ModelRequest,
        evidence: Evidence,
        response_format: Option<&Value>,
    ) -> Result<ModelReply, ModelError> {
        self.open(request, evidence, response_format)
            .await?
            .finish()
            .await
    }

    async fn open(
        &self,
        request: ModelRequest,
        evidence: Evidence,
        response_format: Option<&Value>,
    ) -> Result<ReplyStream, ModelError> {
        let settings = &self.shared.settings;
        let endpoint = settings.endpoint(self.role);
        let body = wire::request_body(endpoint, &request, response_format);
        let url = endpoint.chat_completions_url();
        let idle = settings.idle_timeout;
        let mut retries = 0u32;
        let mut resent = false;
        let response = loop {
            let mut builder = self.shared.http.post(&url).json(&body);
            // The call's place in its run's trace, for the server's own.
            if let Some(traceparent) = &request.traceparent {
                builder = builder.header("traceparent", traceparent);
            }
            if let Some(key) = &endpoint.api_key {
                builder = builder.bearer_auth(key);
            }
            if request.stream {
                builder = builder.header(reqwest::header::ACCEPT, "text/event-stream");
            }
            let sent = builder.send();
            // A stream's silence counts from the moment the request is sent;
            // a blocking answer's headers come only when it is complete, so
            // waiting for them is the generation itself, which the lease
            // alone supervises.
            let sent = if request.stream {
                tokio::time::timeout(idle, sent)
                    .await
                    .map_err(|_| classify::idle_timeout(idle, "answer to the request"))?
            } else {
                sent.await
            };
            let response = match sent {
                Ok(response) => response,
                // A kept-alive connection the server closed as the request
                // went out: no answer began, so the request is sent once
                // more at once, on a new connection, as OpenAI's own SDKs
                // do, instead of failing the call into a restart.
                Err(e) if !resent && classify::closed_before_answer(&e) => {
                    resent = true;
                    evidence.progress(format!(
                        "the connection closed before any answer ({}): sending the request again",
                        transport_error(&e, Phase::Request).message
                    ));
                    continue;
                }
                Err(e) => return Err(transport_error(&e, Phase::Request)),
            };
            let status = response.status();
            if status.is_success() {
                break response;
            }
            let wait = retry_after(response.headers());
            let body = read_error_body(response, idle).await;
            let mut error = classify_status(status.as_u16(), wait, &body);
            // A server may quote the key it refused.
            if let Some(key) = &endpoint.api_key {
                let mut secrets = crate::secret::Secrets::new();
                secrets.extend([key.clone()]);
                error.message = secrets.scrub(&error.message);
            }
            if status.as_u16() != 429 || retries >= settings.rate_limit_retries {
                return Err(error);
            }
            retries += 1;
            let pause = rate_limit_pause(wait, retries, &mut fastrand::Rng::new());
            evidence.progress(format!(
                "rate limited (HTTP 429): retry {retries} of {} in {} ms",
                settings.rate_limit_retries,
                pause.as_millis()
            ));
            tokio::time::sleep(pause).await;
        };
        let sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/event-stream")
            });
        Ok(ReplyStream {
            response: Some(response),
            // The answer is read as what it is, not as what was asked for:
            // some servers ignore `stream`, one way or the other.
            sse,
            // Errors name the endpoint without its credentials.
            parser: StreamParser::with_max_answer_bytes(settings.max_answer_bytes)
                .naming_endpoint(crate::secret::redact_url(&url)),
            whole: None,
            idle,
            max_answer: settings.max_answer_bytes,
            max_body: settings.max_body_bytes,
            url: crate::secret::redact_url(&url),
            evidence,
            ledger: self.shared.ledger.clone(),
            sent_tokens: super::tokens::count_request(&request.messages, &request.tools),
            consumer: request.consumer,
        })
    }
}

impl ModelClient for OpenAiClient {
    fn complete(
        &self,
        request: ModelRequest,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        let client = self.clone();
        Box::pin(async move { client.call(request, evidence, None).await })
    }

    fn model_name(&self) -> Option<String> {
        Some(self.shared.settings.endpoint(self.role).model.clone())
    }

    fn describe(&self) -> String {
        let endpoint = self.shared.settings.endpoint(self.role);
        format!(
            "model {} at {}",
            endpoint.model,
            crate::secret::redact_url(&endpoint.chat_completions_url())
        )
    }
}

/// The backoff before retry `n` (1-based) when the server named no wait:
/// 1 s, 2 s, 4 s …, at most 32 s.
fn backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.saturating_sub(1).min(5))
}

/// The least bound of a rate-limit pause's random extra, so that even a
/// server asking for no wait at all sees its callers spread out.
const MIN_JITTER: Duration = Duration::from_millis(100);

/// The pause before retry `n` (1-based) of a rate-limited call: the wait
/// the server `asked` for, or [`backoff`] when it asked none, plus a random
/// extra of up to a tenth of it (at least up to [`MIN_JITTER`]). Never
/// shorter than what the server asked.
fn rate_limit_pause(asked: Option<Duration>, n: u32, rng: &mut fastrand::Rng) -> Duration {
    let base = asked.unwrap_or_else(|| backoff(n));
    let spread = (base / 10).max(MIN_JITTER);
    let spread_ms = u64::try_from(spread.as_millis()).unwrap_or(u64::MAX);
    base.saturating_add(Duration::from_millis(rng.u64(0..=spread_ms)))
}

fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    parse_retry_after(
        header("retry-after-ms"),
        header("retry-after"),
        SystemTime::now(),
    )
}

/// Up to [`MAX_ERROR_BODY`] bytes of an error answer, each read under the
/// idle timeout; whatever could be read if reading fails.
async fn read_error_body(mut response: reqwest::Response, idle: Duration) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY {
        match tokio::time::timeout(idle, response.chunk()).await {
            Ok(Ok(Some(bytes))) => body.extend_from_slice(&bytes),
            _ => break,
        }
    }
    body
}

/// An answer being received. Its text comes with [`ReplyStream::next_text`];
/// [`ReplyStream::finish`] reads what is left and assembles the reply.
pub struct ReplyStream {
    response: Option<reqwest::Response>,
    sse: bool,
    parser: StreamParser,
    whole: Option<ModelReply>,
    idle: Duration,
    max_answer: usize,
    max_body: usize,
    url: String,
    evidence: Evidence,
    ledger: UsageLedger,
    consumer: String,
    /// The request's tokens, counted here, for an answer whose server
    /// reports no usage.
    sent_tokens: u64,
}

impl std::fmt::Debug for ReplyStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyStream")
            .field("sse", &self.sse)
            .field("events", &self.parser.events())
            .field("consumer", &self.consumer)
            .finish_non_exhaustive()
    }
}

impl ReplyStream {
    /// The next piece of the answer's text, or `None` once the answer is
    /// over. Tool calls and usage are gathered silently for
    /// [`ReplyStream::finish`].
    pub async fn next_text(&mut self) -> Result<Option<String>, ModelError> {
        if !self.sse {
            return self.read_whole().await;
        }
        loop {
            let Some(response) = self.response.as_mut() else {
                return Ok(None);
            };
            match next_chunk(response, self.idle, "chunk of the stream").await? {
                None => {
                    self.response = None;
                    return Ok(None);
                }
                Some(bytes) => {
                    // Past the cap the parser refuses, before any evidence:
                    // the error drops the response, and the call ends.
                    let fed = match self.parser.feed(bytes.as_ref()) {
                        Ok(fed) => fed,
                        Err(error) => {
                            self.response = None;
                            return Err(error);
                        }
                    };
                    if fed.added() {
                        // The text goes with the evidence: the evaluator is
                        // shown its tail, and a looping stream is noticed.
                        self.evidence.observe_delta(
                            &fed.text,
                            fed.reasoning_bytes,
                            fed.tool_call_bytes,
                        );
                    } else if fed.events > 0 || fed.comments > 0 {
                        // Comments, empty deltas, role- or usage-only
                        // chunks: the connection is open, nothing more.
                        self.evidence.keepalive();
                    }
                    if self.parser.is_done() {
                        // Whatever follows `[DONE]` is not waited for.
                        self.response = None;
                    }
                    if !fed.text.is_empty() {
                        return Ok(Some(fed.text));
                    }
                }
            }
        }
    }

    /// A blocking answer (or a stream the server answered whole): read it
    /// all, hand its text back once.
    async fn read_whole(&mut self) -> Result<Option<String>, ModelError> {
        let Some(mut response) = self.response.take() else {
            return Ok(None);
        };
        let announced = response.content_length().unwrap_or(0);
        if usize::try_from(announced).map_or(true, |length| length > self.max_body) {
            return Err(over_cap(
                Cap::Body,
                self.max_body,
                &format!("the body (announced as {announced} bytes)"),
                Some(&self.url),
            ));
        }
        let mut body = Vec::new();
        loop {
            match next_chunk(&mut response, self.idle, "byte of the answer").await? {
                None => break,
                Some(bytes) => {
                    let bytes = bytes.as_ref();
                    // Checked before the bytes are kept or count as
                    // evidence; the response is dropped with this function's
                    // frame, so nothing more is read.
                    if body.len().saturating_add(bytes.len()) > self.max_body {
                        return Err(over_cap(
                            Cap::Body,
                            self.max_body,
                            &format!("the body ({} bytes or more)", body.len() + bytes.len()),
                            Some(&self.url),
                        ));
                    }
                    self.evidence.observe();
                    body.extend_from_slice(bytes);
                }
            }
        }
        let reply = wire::parse_completion(&body, self.max_answer, &self.url)?;
        let text = reply.content.clone();
        self.whole = Some(reply);
        Ok(Some(text).filter(|t| !t.is_empty()))
    }

    /// Reads the rest of the answer and returns it whole; records its usage
    /// under the request's consumer.
    pub async fn finish(mut self) -> Result<ModelReply, ModelError> {
        while self.next_text().await?.is_some() {}
        let reply = match self.whole.take() {
            Some(reply) => reply,
            None => std::mem::take(&mut self.parser).finish()?,
        };
        let mut reply = reply;
        // Absent, null or zero where there was text: counted here.
        reply.usage = super::tokens::believed(reply.usage, self.sent_tokens, &reply);
        self.ledger.record(&self.consumer, reply.usage);
        Ok(reply)
    }
}

/// One read of the body, under the idle timeout: `None` at its end.
async fn next_chunk(
    response: &mut reqwest::Response,
    idle: Duration,
    waiting_for: &str,
) -> Result<Option<impl AsRef<[u8]> + use<>>, ModelError> {
    match tokio::time::timeout(idle, response.chunk()).await {
        Err(_) => Err(classify::idle_timeout(idle, waiting_for)),
        Ok(Err(error)) => Err(transport_error(&error, Phase::Body)),
        Ok(Ok(chunk)) => Ok(chunk),
    }
}

/// The `response_format` of an evaluator: any JSON object.
pub(crate) fn json_object_format() -> Value {
    json!({"type": "json_object"})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `draws` pauses before retry `n`, from a seeded generator.
    fn pauses(asked: Option<Duration>, n: u32, draws: usize) -> Vec<Duration> {
        let mut rng = fastrand::Rng::with_seed(11);
        (0..draws)
            .map(|_| rate_limit_pause(asked, n, &mut rng))
            .collect()
    }

    fn assert_spread_within(pauses: &[Duration], low: Duration, high: Duration) {
        for pause in pauses {
            assert!(
                (low..=high).contains(pause),
                "{pause:?} outside {low:?}..={high:?}"
            );
        }
        let first = pauses[0];
        assert!(
            pauses.iter().any(|p| *p != first),
            "every pause is {first:?}: no jitter"
        );
    }

    #[test]
    fn a_rate_limit_pause_adds_jitter_to_the_servers_wait_never_less() {
        let ms = Duration::from_millis;
        assert_spread_within(&pauses(Some(ms(2_000)), 1, 200), ms(2_000), ms(2_200));
        // A server asking for no wait still sees its callers spread out.
        assert_spread_within(&pauses(Some(Duration::ZERO), 1, 200), ms(0), ms(100));
        // No wait overflows.
        assert_eq!(
            rate_limit_pause(Some(Duration::MAX), 1, &mut fastrand::Rng::new()),
            Duration::MAX
        );
    }

    #[test]
    fn a_rate_limit_pause_without_a_servers_wait_is_exponential_with_jitter() {
        let secs = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_spread_within(&pauses(None, 1, 200), secs(1), ms(1_100));
        assert_spread_within(&pauses(None, 2, 200), secs(2), ms(2_200));
        assert_spread_within(&pauses(None, 3, 200), secs(4), ms(4_400));
        assert_spread_within(&pauses(None, 40, 200), secs(32), ms(35_200));
    }
}
