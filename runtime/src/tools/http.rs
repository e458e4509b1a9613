//! The HTTP client of a streamable-HTTP MCP connection: rmcp's own reqwest
//! client, watched for answers over rmcp's size limits.
//!
//! rmcp refuses a JSON body or an SSE event over its limits at once, but
//! what reaches the call is only "the connection closed". [`WatchedClient`]
//! passes every request through unchanged and records, in the connection's
//! [`Overflow`], that an answer went over a limit, so the call's error can
//! name the limit. Redirects are followed as rmcp's default client follows
//! them: only same-origin 307 and 308, at most ten.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use super::bounded::Overflow;

/// Redirects followed for one request, as rmcp's default client.
const MAX_REDIRECTS: usize = 10;

/// rmcp's words for an SSE event over its limit (its error type is private).
const EVENT_TOO_LARGE: &str = "exceeded the maximum size";

type Answer<T> = Result<T, StreamableHttpError<reqwest::Error>>;

/// rmcp's reqwest client, recording answers over rmcp's limits.
#[derive(Clone)]
pub(super) struct WatchedClient {
    inner: reqwest::Client,
    overflow: Overflow,
}

impl WatchedClient {
    /// A client recording overflows in `overflow`; built as rmcp builds its
    /// default one (no idle pooling, same-origin 307/308 redirects only).
    pub(super) fn new(overflow: Overflow) -> Result<Self, String> {
        let inner = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                let keeps_body = matches!(
                    attempt.status(),
                    reqwest::StatusCode::TEMPORARY_REDIRECT
                        | reqwest::StatusCode::PERMANENT_REDIRECT
                );
                let same_origin = attempt
                    .previous()
                    .first()
                    .is_some_and(|first| first.origin() == attempt.url().origin());
                if !keeps_body || !same_origin {
                    attempt.stop()
                } else if attempt.previous().len() > MAX_REDIRECTS {
                    attempt.error(format!("exceeded {MAX_REDIRECTS} redirects"))
                } else {
                    attempt.follow()
                }
            }))
            .build()
            .map_err(|e| format!("the HTTP client could not be built: {e}"))?;
        Ok(Self { inner, overflow })
    }

    fn watch_post(
        &self,
        answer: Answer<StreamableHttpPostResponse>,
    ) -> Answer<StreamableHttpPostResponse> {
        match answer {
            Err(error @ StreamableHttpError::ResponseBodyTooLarge { .. }) => {
                self.overflow.record();
                Err(error)
            }
            Ok(StreamableHttpPostResponse::Sse(stream, id)) => Ok(StreamableHttpPostResponse::Sse(
                self.watch_stream(stream),
                id,
            )),
            other => other,
        }
    }

    fn watch_stream(&self, stream: BoxedSseResponse) -> BoxedSseResponse {
        let overflow = self.overflow.clone();
        stream
            .inspect(move |item| {
                if let Err(SseError::Body(error)) = item
                    && error.to_string().contains(EVENT_TOO_LARGE)
                {
                    overflow.record();
                }
            })
            .boxed()
    }
}

impl StreamableHttpClient for WatchedClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Answer<StreamableHttpPostResponse> {
        let answer = self
            .inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        self.watch_post(answer)
    }

    // The transport calls the two methods below; this one is kept bounded
    // all the same, by the same limits with its event size.
    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Answer<StreamableHttpPostResponse> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Answer<StreamableHttpPostResponse> {
        let answer = self
            .inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        self.watch_post(answer)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Answer<()> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Answer<BoxedSseResponse> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
            .map(|stream| self.watch_stream(stream))
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Answer<BoxedSseResponse> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
            .map(|stream| self.watch_stream(stream))
    }
}
