//! The model client: chat completions against any OpenAI-compatible server,
//! and the evaluator built on it.
//!
//! The client, the evaluator, the stream parser and the classification of
//! failures need the `openai` feature (on by default; reqwest over rustls).
//! The settings they read — [`ModelSettings`], its [`ModelEndpoint`]s and
//! [`ModelRole`]s, parsed from `[model]` and `[fast_model]` — and the
//! [`UsageLedger`] are in every build, for an embedder that brings a model
//! client of its own.
//!
//! What it guarantees:
//!
//! - **The model path hides no deadline.** There is a connect timeout and an
//!   idle timeout between chunks — for a stream, between SSE chunks from the
//!   moment the request is sent; for a blocking answer, between body bytes
//!   from its headers on — and no timeout over a whole request anywhere: a
//!   live call takes as long as its lease allows. The lint configuration
//!   (`clippy.toml`) refuses reqwest's request-wide `timeout` methods.
//! - **Evidence.** Every read that brings chunks (SSE events of a stream,
//!   body bytes of a blocking answer) is reported to the call's lease with
//!   `Evidence::observe`, so a stream that keeps sending is never mistaken
//!   for a mute socket; a wait for a rate limit is reported with
//!   `Evidence::progress`, so the trail shows why the call is quiet.
//! - **Typed failures**, by one table, and never a panic whatever the
//!   server sends:
//!
//!   | what happened | [`ModelErrorKind`](leasehold_actors::ModelErrorKind) | retryable |
//!   |---|---|---|
//!   | nothing listens, or no connection within the connect timeout | `ConnectionRefused` | yes |
//!   | no chunk within the idle timeout | `IdleTimeout` | yes |
//!   | the connection dropped, or the stream ended before the answer did | `Disconnected` | yes |
//!   | 429 | `RateLimited` | yes, after `retry_after` |
//!   | 5xx, or an error inside the answer | `Server` | yes |
//!   | a 4xx, or an error inside the answer, saying the request does not fit the model's context window (llama.cpp's `exceed_context_size_error`, OpenAI's `context_length_exceeded`, vLLM's `maximum context length`), with the sizes the server gave | `ContextOverflow` | no: the loop shortens its transcript, or pauses for a person |
//!   | any other 4xx | `Client` | no |
//!   | a chunk or body that is not the expected JSON | `MalformedChunk` | no |
//!   | tool-call arguments that are not a JSON object | `Other` | yes: the model may do better |
//!   | an answer past [`ModelSettings::max_answer_bytes`], a blocking body past [`ModelSettings::max_body_bytes`] | `Other` | yes: the model may answer shorter |
//!
//!   A 429 is retried by the client itself, after the wait the server asked
//!   for (`retry-after-ms`, `Retry-After` seconds or HTTP date; 1 s, 2 s, 4 s
//!   … when it said nothing) plus a random extra of up to a tenth of it (at
//!   least up to 100 ms), so that calls refused together do not come back
//!   together, up to [`ModelSettings::rate_limit_retries`] times (default
//!   3); then the error is returned with its `retry_after`.
//! - **Every answer is bounded.** One answer holds at most
//!   [`ModelSettings::max_answer_bytes`] (content, tool-call names and
//!   arguments, reasoning; default 4 MiB, `limits.model_answer`), one line
//!   or event of a stream at most that plus 64 KiB, and a blocking body at
//!   most [`ModelSettings::max_body_bytes`] (default 8 MiB,
//!   `limits.model_body`). Past a cap the call ends at once, its connection
//!   dropped, with an error naming the cap, its key and the endpoint; the
//!   read that crossed the cap is not evidence, so a server that keeps
//!   sending past it never renews the call's lease.
//! - **Usage per consumer.** Each call's token usage is added to a shared
//!   [`UsageLedger`] under its consumer (`run`, `worker:NAME`,
//!   `engine.watchdog`, `engine.budget`). A usage the server did not
//!   report, reported as `null`, or as `0` tokens for a side that had text,
//!   is counted from the text instead ([`tokens::believed`]), and says so.
//!
//! ```no_run
//! use std::sync::Arc;
//! use leasehold::Engine;
//! use leasehold::model::{ModelEvaluator, OpenAiClient};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // LEASEHOLD_MODEL_BASE_URL, LEASEHOLD_MODEL_NAME, … (see `ModelSettings::from_lookup`).
//! let client = OpenAiClient::from_env()?;
//! let engine = Engine::builder()
//!     .model(Arc::new(client.clone()))
//!     .evaluator(Arc::new(ModelEvaluator::new(&client)))
//!     .build()
//!     .await?;
//! # let _ = engine;
//! // … run flows; then see what each consumer spent:
//! for (consumer, cost) in client.ledger().snapshot() {
//!     println!("{consumer}: {} in, {} out", cost.input_tokens, cost.output_tokens);
//! }
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "openai")]
mod classify;
#[cfg(feature = "openai")]
mod client;
#[cfg(feature = "openai")]
mod evaluator;
mod ledger;
mod settings;
#[cfg(feature = "openai")]
mod sse;
pub mod tokens;
#[cfg(feature = "openai")]
mod wire;

#[cfg(feature = "openai")]
pub use classify::{classify_status, parse_retry_after};
#[cfg(feature = "openai")]
pub use client::{OpenAiClient, ReplyStream, SetupError};
#[cfg(feature = "openai")]
pub use evaluator::{JudgeBounds, ModelEvaluator};
pub use ledger::UsageLedger;
pub use settings::{
    DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_BODY_BYTES, ENV_API_KEY, ENV_BASE_URL,
    ENV_CONNECT_TIMEOUT, ENV_FAST_API_KEY, ENV_FAST_BASE_URL, ENV_FAST_NAME, ENV_IDLE_TIMEOUT,
    ENV_MAX_ANSWER, ENV_MAX_BODY, ENV_NAME, ENV_RATE_LIMIT_RETRIES, KEY_MAX_ANSWER, KEY_MAX_BODY,
    ModelEndpoint, ModelRole, ModelSettings,
};
pub(crate) use settings::{JUDGE_MAX_IN_FLIGHT, JUDGE_MAX_TOKENS};
#[cfg(feature = "openai")]
pub use sse::{Fed, STREAM_ENVELOPE_BYTES, StreamParser};
