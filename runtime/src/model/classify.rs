//! Failures of a model call, classified into [`ModelError`]s by the table
//! in the [`model`](crate::model) documentation; the server's own words
//! kept, cut short; nothing here panics, whatever the server sends.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use leasehold_actors::{ModelError, ModelErrorKind};

/// The longest excerpt of a server's text kept in an error message.
const EXCERPT: usize = 500;

/// The error of an answer with HTTP status `status` (400–599), its body
/// `body` and the wait the server asked for, if any.
///
/// ```
/// use std::time::Duration;
/// use leasehold::model::classify_status;
/// use leasehold::ModelErrorKind;
///
/// let limited = classify_status(429, Some(Duration::from_secs(2)), br#"{"error":{"message":"slow down"}}"#);
/// assert_eq!(limited.kind, ModelErrorKind::RateLimited);
/// assert!(limited.retryable);
/// assert_eq!(limited.retry_after, Some(Duration::from_secs(2)));
/// assert!(limited.message.contains("slow down"));
/// assert!(!classify_status(400, None, b"").retryable);
/// ```
pub fn classify_status(status: u16, retry_after: Option<Duration>, body: &[u8]) -> ModelError {
    let detail = error_detail(body);
    let (kind, retryable) = match status {
        429 => (ModelErrorKind::RateLimited, true),
        500..=599 => (ModelErrorKind::Server, true),
        400..=499 => (
            context_overflow(serde_json::from_slice(body).ok().as_ref(), &detail)
                .unwrap_or(ModelErrorKind::Client),
            false,
        ),
        _ => (ModelErrorKind::Other, false),
    };
    let message = if detail.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {detail}")
    };
    ModelError {
        retry_after: retry_after.filter(|_| retryable),
        ..ModelError::new(kind, message, retryable)
    }
}

/// The wait a server asked for, from its `retry-after-ms` and `Retry-After`
/// header values (`Retry-After` as seconds, fractional allowed, or as an
/// HTTP date, measured from `now`). A date in the past means no wait.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use leasehold::model::parse_retry_after;
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480);
/// assert_eq!(parse_retry_after(None, Some("3"), now), Some(Duration::from_secs(3)));
/// assert_eq!(parse_retry_after(Some("250"), Some("1"), now), Some(Duration::from_millis(250)));
/// assert_eq!(
///     parse_retry_after(None, Some("Wed, 21 Oct 2015 07:28:10 GMT"), now),
///     Some(Duration::from_secs(10)),
/// );
/// assert_eq!(parse_retry_after(None, Some("soon"), now), None);
/// ```
pub fn parse_retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now: SystemTime,
) -> Option<Duration> {
    if let Some(ms) = retry_after_ms.and_then(|v| seconds(v.trim(), 1000.0)) {
        return Some(ms);
    }
    let value = retry_after?.trim();
    if let Some(wait) = seconds(value, 1.0) {
        return Some(wait);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `value / scale` seconds, for a finite non-negative number.
fn seconds(value: &str, scale: f64) -> Option<Duration> {
    let number: f64 = value.parse().ok()?;
    if !number.is_finite() || number < 0.0 {
        return None;
    }
    Duration::try_from_secs_f64(number / scale).ok()
}

/// The server's own words about an error: `error.message` of an OpenAI
/// error body, or an excerpt of the body as text.
fn error_detail(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("message"))
            .or_else(|| v.get("error"))
            .or_else(|| v.get("detail"))
            .and_then(Value::as_str)
    });
    match message {
        Some(message) => excerpt(message),
        None => excerpt(String::from_utf8_lossy(body).trim()),
    }
}

/// What servers say, in their error's message, when a request does not
/// fit the model's context window (compared in lower case): llama.cpp's
/// `llama-server` (three wordings across its versions), OpenAI and vLLM,
/// and Anthropic's compatible API.
const OVERFLOW_WORDS: [&str; 7] = [
    "exceeds the available context size",
    "exceeds context size",
    "is larger than the max context size",
    "maximum context length",
    "context_length_exceeded",
    "context length exceeded",
    "prompt is too long",
];

/// The error types and codes servers give the same refusal: llama.cpp's
/// `type`, OpenAI's `code`.
const OVERFLOW_CODES: [&str; 2] = ["exceed_context_size_error", "context_length_exceeded"];

/// [`ModelErrorKind::ContextOverflow`], with the sizes the server gave, if
/// the error `body` (parsed, when it is JSON) and its `message` say that
/// the request does not fit the model's context window; `None` otherwise.
///
/// The sizes are read from llama.cpp's `n_prompt_tokens` and `n_ctx`, else
/// from the message: `request (4135 tokens) exceeds the available context
/// size (4096 tokens)` (llama.cpp), `maximum context length is 4096
/// tokens. However, your messages resulted in 4135 tokens` (OpenAI, vLLM).
///
/// ```
/// use leasehold::ModelErrorKind;
/// use leasehold::model::classify_status;
///
/// let llama = br#"{"error":{"code":400,"message":"request (4135 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4135,"n_ctx":4096}}"#;
/// let error = classify_status(400, None, llama);
/// assert_eq!(
///     error.kind,
///     ModelErrorKind::ContextOverflow { requested_tokens: Some(4135), context_tokens: Some(4096) }
/// );
/// assert!(error.message.contains("exceeds the available context size"), "{error}");
/// assert!(!error.retryable);
/// ```
pub(crate) fn context_overflow(body: Option<&Value>, message: &str) -> Option<ModelErrorKind> {
    let error = body.map(|b| b.get("error").filter(|e| e.is_object()).unwrap_or(b));
    let field = |key: &str| error.and_then(|e| e.get(key));
    let coded = ["type", "code"].iter().any(|key| {
        field(key)
            .and_then(Value::as_str)
            .is_some_and(|code| OVERFLOW_CODES.contains(&code))
    });
    let lower = message.to_ascii_lowercase();
    if !coded && !OVERFLOW_WORDS.iter().any(|words| lower.contains(words)) {
        return None;
    }
    let requested_tokens = field("n_prompt_tokens")
        .and_then(Value::as_u64)
        .or_else(|| {
            [
                "request (",
                "input (",
                "resulted in ",
                "you requested ",
                "your request has ",
                "prompt is too long: ",
            ]
            .iter()
            .find_map(|marker| number_after(&lower, marker))
        });
    let context_tokens = field("n_ctx").and_then(Value::as_u64).or_else(|| {
        [
            "available context size (",
            "exceeds context size (",
            "max context size (",
            "maximum context length is ",
        ]
        .iter()
        .find_map(|marker| number_after(&lower, marker))
        .or_else(|| number_before(&lower, " maximum"))
    });
    Some(ModelErrorKind::ContextOverflow {
        requested_tokens,
        context_tokens,
    })
}

/// The whole number right after the first `marker` in `text`.
fn number_after(text: &str, marker: &str) -> Option<u64> {
    let (_, rest) = text.split_once(marker)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The whole number right before the first `marker` in `text`
/// (`215000 tokens > 200000 maximum`).
fn number_before(text: &str, marker: &str) -> Option<u64> {
    let (head, _) = text.split_once(marker)?;
    let start = head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    head[start..].parse().ok()
}

/// At most [`EXCERPT`] characters of `text`, cut at a character boundary.
pub(crate) fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Where in a call a transport error happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Connecting, sending the request, waiting for the headers.
    Request,
    /// Reading the body.
    Body,
}

/// The error of a failure reported by the HTTP client.
pub(crate) fn transport_error(error: &reqwest::Error, phase: Phase) -> ModelError {
    let chain = error_chain(error);
    if error.is_connect() {
        let what = if error.is_timeout() {
            "could not connect within the connect timeout"
        } else {
            "could not connect"
        };
        return ModelError::new(
            ModelErrorKind::ConnectionRefused,
            format!("{what}: {chain}"),
            true,
        );
    }
    if error.is_builder() {
        return ModelError::new(
            ModelErrorKind::Other,
            format!("the request could not be built: {chain}"),
            false,
        );
    }
    // reqwest calls a body cut short a "decode" error; the bytes are parsed
    // here, never by reqwest, so every other failure is the connection's.
    let message = match phase {
        Phase::Request => format!("the connection failed before the answer began: {chain}"),
        Phase::Body => format!("the connection dropped in the middle of the answer: {chain}"),
    };
    ModelError::new(ModelErrorKind::Disconnected, message, true)
}

/// Whether a request failed because its connection was closed under it
/// before any byte of an answer came back: the server closed a kept-alive
/// connection just as the request went out on it (`llama-server` and Node
/// servers close one idle for 5 s), or reset it. A connection that could
/// not be made at all is not one of these.
pub(crate) fn closed_before_answer(error: &reqwest::Error) -> bool {
    if error.is_connect() || error.is_timeout() || error.is_builder() {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if let Some(hyper) = cause.downcast_ref::<hyper::Error>()
            && hyper.is_incomplete_message()
        {
            return true;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            )
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// The error and its sources, joined: reqwest's own message alone rarely
/// says what went wrong. The URL reqwest names is shown without its
/// credentials.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    crate::secret::redact_urls_in(&text).into_owned()
}

/// No chunk for longer than `idle`.
pub(crate) fn idle_timeout(idle: Duration, waiting_for: &str) -> ModelError {
    ModelError::new(
        ModelErrorKind::IdleTimeout,
        format!(
            "no {waiting_for} for {} ms, the idle timeout",
            idle.as_millis()
        ),
        true,
    )
}

/// A chunk or body that is not what the protocol says.
pub(crate) fn malformed(what: impl std::fmt::Display) -> ModelError {
    ModelError::new(ModelErrorKind::MalformedChunk, what.to_string(), false)
}

/// One of the caps on an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cap {
    /// [`ModelSettings::max_answer_bytes`](super::ModelSettings::max_answer_bytes).
    Answer,
    /// [`ModelSettings::max_body_bytes`](super::ModelSettings::max_body_bytes).
    Body,
}

impl Cap {
    /// The configuration key and the variable that set the cap.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Self::Answer => (
                super::settings::KEY_MAX_ANSWER,
                super::settings::ENV_MAX_ANSWER,
            ),
            Self::Body => (super::settings::KEY_MAX_BODY, super::settings::ENV_MAX_BODY),
        }
    }
}

/// `what` went past `cap`, of `limit` bytes, in the answer of `endpoint`
/// (the URL, when known). Retryable: a model that rambled may answer
/// shorter; restarts are bounded by supervision.
pub(crate) fn over_cap(cap: Cap, limit: usize, what: &str, endpoint: Option<&str>) -> ModelError {
    let (key, variable) = cap.names();
    let from = endpoint.map_or_else(String::new, |url| format!(" from {url}"));
    ModelError::new(
        ModelErrorKind::Other,
        format!(
            "the answer{from} was cut off: {what} is over the cap of {limit} bytes \
             (`{key}`, env {variable}); the call was ended and its connection dropped"
        ),
        true,
    )
}
