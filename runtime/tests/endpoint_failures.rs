//! A real endpoint's ordinary failures, against a real OpenAI-compatible
//! server in Python (a child process, `support/openai_peer.py`):
//!
//! - a usage reported as `null`, as `0` tokens or with `null` counts is
//!   counted from the text, as a usage not reported at all is, streamed or
//!   whole — so that a run's token budget holds;
//! - a request refused as longer than the model's context window, in
//!   llama.cpp's words or OpenAI's (and vLLM's, Anthropic's, in an error
//!   inside a stream), is a `ContextOverflow` carrying the sizes the server
//!   gave, not an ordinary client error.
#![cfg(feature = "openai")]

use std::time::Duration;

#[path = "support/python.rs"]
mod support;

use leasehold::{
    ChatMessage, Evidence, ModelClient, ModelErrorKind, ModelRequest, TokenCost,
    model::{ModelEndpoint, ModelSettings, OpenAiClient, StreamParser, classify_status},
};
use support::PythonPeer;

const PEER: &str = include_str!("support/openai_peer.py");

fn client(base: &str) -> OpenAiClient {
    let mut settings = ModelSettings::new(ModelEndpoint::new(base, "peer"));
    settings.idle_timeout = Duration::from_secs(30);
    OpenAiClient::new(settings).expect("a client")
}

fn ask(stream: bool, text: &str) -> ModelRequest {
    ModelRequest {
        messages: vec![ChatMessage::user(text)],
        tools: Vec::new(),
        stream,
        consumer: "run".into(),
        traceparent: None,
        max_tokens: None,
    }
}

async fn usage_of(mode: &str, stream: bool) -> TokenCost {
    let peer = PythonPeer::start(PEER, &["--usage", mode]);
    client(&peer.base)
        .complete(ask(stream, "How are you today?"), Evidence::detached())
        .await
        .unwrap_or_else(|e| panic!("{mode}, stream {stream}: {e}"))
        .usage
}

#[tokio::test]
async fn a_usage_reported_as_null_or_zero_is_counted_from_the_text_as_an_absent_one() {
    for stream in [true, false] {
        let absent = usage_of("absent", stream).await;
        assert!(absent.counted, "{absent:?}");
        assert!(absent.input_tokens > 0 && absent.output_tokens > 0);
        for mode in ["null", "zero", "null-fields"] {
            assert_eq!(
                usage_of(mode, stream).await,
                absent,
                "usage {mode}, stream {stream}"
            );
        }
        // A report of tokens is taken at its word.
        let reported = usage_of("reported", stream).await;
        assert!(!reported.counted, "{reported:?}");
        // "How are you today?" is 18 characters, 4 tokens by the peer's
        // count; "done after 0 tool results" 26, 6.
        assert_eq!((reported.input_tokens, reported.output_tokens), (4, 6));
    }
}

async fn refused(overflow: &str, stream: bool) -> leasehold::ModelError {
    let peer = PythonPeer::start(PEER, &["--context", "10", "--overflow", overflow]);
    client(&peer.base)
        .complete(ask(stream, &"x".repeat(400)), Evidence::detached())
        .await
        .expect_err("a request over the context window is refused")
}

#[tokio::test]
async fn a_request_over_the_context_window_is_a_context_overflow_with_the_servers_sizes() {
    for stream in [true, false] {
        let llama = refused("llama", stream).await;
        assert_eq!(
            llama.kind,
            ModelErrorKind::ContextOverflow {
                requested_tokens: Some(100),
                context_tokens: Some(10)
            },
            "{llama}"
        );
        assert!(!llama.retryable);
        assert!(
            llama.message.contains(
                "HTTP 400: request (100 tokens) exceeds the available context size (10 tokens)"
            ),
            "{llama}"
        );
        let openai = refused("openai", stream).await;
        assert_eq!(
            openai.kind,
            ModelErrorKind::ContextOverflow {
                requested_tokens: Some(100),
                context_tokens: Some(10)
            },
            "{openai}"
        );
        assert!(
            openai
                .message
                .contains("maximum context length is 10 tokens"),
            "{openai}"
        );
    }
}

#[test]
fn other_servers_words_for_an_overflow_are_recognised_and_other_refusals_are_not() {
    let kind = |status, body: &str| classify_status(status, None, body.as_bytes()).kind;
    let overflow = |requested, window| ModelErrorKind::ContextOverflow {
        requested_tokens: requested,
        context_tokens: window,
    };
    // vLLM.
    assert_eq!(
        kind(
            400,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#
        ),
        overflow(Some(5_000), Some(4_096))
    );
    // llama.cpp before it gave the sizes, and after it reworded them.
    assert_eq!(
        kind(
            400,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"invalid_request_error"}}"#
        ),
        overflow(None, None)
    );
    assert_eq!(
        kind(
            400,
            r#"{"error":{"code":400,"message":"request (9000 tokens) exceeds context size (8192 tokens)","type":"exceed_context_size_error"}}"#
        ),
        overflow(Some(9_000), Some(8_192))
    );
    // Anthropic's OpenAI-compatible API, as plain text.
    assert_eq!(
        kind(400, "prompt is too long: 215000 tokens > 200000 maximum"),
        overflow(Some(215_000), Some(200_000))
    );
    // An ordinary refusal stays one; a server error is not an overflow.
    assert_eq!(
        kind(
            400,
            r#"{"error":{"message":"Invalid 'messages': empty array","type":"invalid_request_error"}}"#
        ),
        ModelErrorKind::Client
    );
    assert_eq!(
        kind(
            500,
            r#"{"error":{"message":"maximum context length is 10"}}"#
        ),
        ModelErrorKind::Server
    );

    // Inside a stream that began as a success (llama.cpp's older servers).
    let mut parser = StreamParser::new();
    let error = parser
        .feed(br#"data: {"error":{"code":400,"message":"request (4135 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4135,"n_ctx":4096}}

"#)
        .expect_err("an error in the stream");
    assert_eq!(error.kind, overflow(Some(4_135), Some(4_096)), "{error}");
    assert!(!error.retryable);
}
