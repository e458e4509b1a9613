//! The model client against real inference: llama.cpp's `llama-server`
//! generating with a small instruct model (SmolLM2-135M-Instruct) on one
//! thread, two slots. What a scripted server cannot show is shown here: the
//! answer's pieces are what a model produced token by token, and a call the
//! client gives up really frees the server's slot — for a streamed call at
//! once, for a blocking one only once the server has a quiet second.
//!
//! The answers are sampled, so the tests check their shape (pieces, text,
//! usage, why they ended), never their words. They need
//! `LEASEHOLD_PEER_LLAMA_SERVER` and `LEASEHOLD_PEER_LLAMA_MODEL` (set by
//! `scripts/test.sh`) and fail, rather than skip, without them.

use std::time::Duration;

use leasehold::{
    ChatMessage, Evidence, FinishReason, ModelClient, ModelErrorKind, ModelRequest,
    model::{ModelEndpoint, ModelSettings, OpenAiClient},
};
use leasehold_tests::llama::{LlamaServer, SLOT_CONTEXT, SLOTS};
use serde_json::Value;

/// How long a slot may take to be freed, or taken, before the test fails:
/// generous, for a machine busy compiling.
const BOUND: Duration = Duration::from_secs(60);

/// The server's log line of a request it cancelled.
const CANCELLED: &str = "cancel task";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn client(server: &LlamaServer, idle: Duration) -> OpenAiClient {
    let mut settings =
        ModelSettings::new(ModelEndpoint::new(server.base_url(), server.model_name()));
    settings.idle_timeout = idle;
    OpenAiClient::new(settings).expect("the client builds")
}

fn request(consumer: &str, prompt: &str, max_tokens: u32, stream: bool) -> ModelRequest {
    ModelRequest {
        messages: vec![
            ChatMessage::system("You are a helpful assistant."),
            ChatMessage::user(prompt),
        ],
        tools: Vec::new(),
        stream,
        consumer: consumer.to_owned(),
        traceparent: None,
        max_tokens: Some(max_tokens),
    }
}

/// A request the model answers at length, so that it is still generating
/// when the test gives it up.
fn long_request(stream: bool) -> ModelRequest {
    request(
        "run",
        "Write a very long story about a dragon who learns to cook, in many chapters.",
        1_500,
        stream,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_model_streams_a_short_answer_to_the_client_in_pieces() {
    let server = LlamaServer::start().await;
    let slots = server.slots().await;
    assert_eq!(slots.len(), SLOTS, "{slots:?}");
    for slot in &slots {
        assert_eq!(
            slot.get("n_ctx").and_then(Value::as_u64),
            Some(u64::from(SLOT_CONTEXT)),
            "each slot has its share of the context: {slot}"
        );
    }
    let client = client(&server, Duration::from_secs(30));

    let mut stream = client
        .stream(
            request("run", "Say hello in five words.", 32, true),
            Evidence::detached(),
        )
        .await
        .expect("the server accepts the request");
    let mut pieces = Vec::new();
    while let Some(piece) = stream.next_text().await.expect("the stream goes on") {
        pieces.push(piece);
    }
    let reply = stream.finish().await.expect("the answer is whole");

    assert!(
        pieces.len() >= 2,
        "a model's answer comes token by token: {pieces:?}"
    );
    assert_eq!(reply.content, pieces.concat());
    assert!(!reply.content.trim().is_empty(), "{reply:?}");
    assert!(reply.tool_calls.is_empty(), "{reply:?}");
    assert!(
        matches!(
            reply.finish_reason,
            Some(FinishReason::Stop | FinishReason::Length)
        ),
        "{reply:?}"
    );
    // The server's own count, not one made here: at most what was asked.
    assert!(!reply.usage.counted, "{reply:?}");
    assert!(
        (1..=32).contains(&reply.usage.output_tokens),
        "{:?}",
        reply.usage
    );
    assert!(reply.usage.input_tokens > 0, "{:?}", reply.usage);
    assert_eq!(client.ledger().of("run"), reply.usage);
    assert_eq!(server.busy_slots().await, 0, "the answer is over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_answer_from_the_real_model_comes_whole() {
    let server = LlamaServer::start().await;
    let client = client(&server, Duration::from_secs(30));

    let reply = client
        .complete(
            request("worker:greeter", "Say hello in five words.", 32, false),
            Evidence::detached(),
        )
        .await
        .expect("the model answers");

    assert!(!reply.content.trim().is_empty(), "{reply:?}");
    assert!(!reply.usage.counted, "{reply:?}");
    assert!(
        (1..=32).contains(&reply.usage.output_tokens),
        "{:?}",
        reply.usage
    );
    assert_eq!(client.ledger().of("worker:greeter"), reply.usage);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_streamed_answer_midway_frees_its_slot_at_once() {
    let server = LlamaServer::start().await;
    let client = client(&server, Duration::from_secs(30));

    let mut stream = client
        .stream(long_request(true), Evidence::detached())
        .await
        .expect("the server accepts the request");
    for _ in 0..3 {
        stream
            .next_text()
            .await
            .expect("the stream goes on")
            .expect("the story has begun");
    }
    assert_eq!(server.busy_slots().await, 1, "the story is being written");

    drop(stream);
    let freed_in = server.wait_for_busy_slots(0, ms(50), BOUND).await;

    assert!(
        server.log_text().contains(CANCELLED),
        "the server cancelled the answer (freed in {freed_in:?}), it did not finish it:\n{}",
        server.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_answer_given_up_midway_frees_its_slot_once_the_server_has_a_quiet_second() {
    let server = LlamaServer::start().await;
    let client = client(&server, Duration::from_secs(30));

    let call = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .complete(long_request(false), Evidence::detached())
                .await
        }
    });
    server.wait_for_busy_slots(1, ms(50), BOUND).await;

    // Dropping the call drops its connection, as a lease that intervenes
    // does.
    call.abort();
    assert!(
        call.await.is_err_and(|e| e.is_cancelled()),
        "the call was given up before its answer"
    );
    // The server looks for a blocking request's client only after a
    // second in which it handed no result to any request, and each
    // GET /slots is answered with one: ask less often than that.
    let freed_in = server.wait_for_busy_slots(0, ms(1_500), BOUND).await;

    assert!(
        server.log_text().contains(CANCELLED),
        "the server cancelled the answer (freed in {freed_in:?}), it did not finish it:\n{}",
        server.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_is_an_idle_timeout_and_answers_again_once_thawed() {
    let server = LlamaServer::start().await;
    let idle = Duration::from_secs(2);
    let client = client(&server, idle);

    let mut stream = client
        .stream(long_request(true), Evidence::detached())
        .await
        .expect("the server accepts the request");
    stream
        .next_text()
        .await
        .expect("the stream goes on")
        .expect("the story has begun");
    server.freeze();
    // What was already sent is read first; then nothing comes.
    let error = loop {
        match stream.next_text().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the story ended before the server was frozen"),
            Err(error) => break error,
        }
    };
    assert_eq!(error.kind, ModelErrorKind::IdleTimeout, "{error}");
    assert!(error.retryable, "{error}");
    drop(stream);

    server.thaw();
    let reply = client
        .complete(
            request("run", "Say hello in five words.", 16, true),
            Evidence::detached(),
        )
        .await
        .expect("the thawed server answers");
    assert!(!reply.content.trim().is_empty(), "{reply:?}");
}
