//! The model port: one chat completion, with its messages, reply and errors.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{BoxFuture, FinishReason, TokenCost, ToolDefinition, TranscriptMessage};

/// Who wrote a chat message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatRole {
    /// Instructions.
    System,
    /// The task, guidance, nudges.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// One message of a chat completion request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: ChatRole,
    /// Its text.
    pub content: String,
    /// For an assistant message: the tool calls it asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    /// For a tool message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    fn plain(role: ChatRole, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(ChatRole::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(ChatRole::User, content)
    }

    /// An assistant message, with the tool calls it asked for.
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCallRequest>) -> Self {
        Self {
            tool_calls,
            ..Self::plain(ChatRole::Assistant, content)
        }
    }

    /// A tool's result for the call `call_id`.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            ..Self::plain(ChatRole::Tool, content)
        }
    }

    /// The message as the evaluator sees it in a transcript tail.
    pub fn to_transcript(&self) -> TranscriptMessage {
        let role = match self.role {
            ChatRole::System => "system",
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
            ChatRole::Tool => "tool",
        };
        let mut content = self.content.clone();
        for call in &self.tool_calls {
            content.push_str(&format!("\n[calls {}({})]", call.name, call.arguments));
        }
        TranscriptMessage::new(role, content)
    }
}

/// A tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The model's id for the call.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments, a JSON object.
    pub arguments: serde_json::Value,
}

/// One chat completion request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// The tools the model may call.
    pub tools: Vec<ToolDefinition>,
    /// Stream the answer (each chunk is evidence) or wait for it whole.
    pub stream: bool,
    /// Who the cost is attributed to: `run`, `worker:NAME`, …
    pub consumer: String,
    /// The W3C `traceparent` of this call in its run's trace, for the
    /// model server (sent as the `traceparent` header); none outside a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The most tokens the answer may hold (sent as `max_tokens`); none:
    /// the endpoint's setting, else the server's own limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// A model's complete answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelReply {
    /// Its text.
    pub content: String,
    /// The tool calls it asks for.
    pub tool_calls: Vec<ToolCallRequest>,
    /// What it cost.
    pub usage: TokenCost,
    /// Why the model stopped, when the server said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
}

/// What kind of failure a model call had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// Nothing listens at the endpoint.
    ConnectionRefused,
    /// No chunk for longer than the idle timeout.
    IdleTimeout,
    /// The connection dropped in the middle of the answer.
    Disconnected,
    /// 429: too many requests.
    RateLimited,
    /// 5xx.
    Server,
    /// 4xx other than 429.
    Client,
    /// A chunk that could not be parsed.
    MalformedChunk,
    /// The request does not fit the model's context window: the server
    /// refused it as too long. Sending it again as it is cannot help; the
    /// loop shortens its transcript's oldest tool results, or pauses the
    /// run for a person.
    ContextOverflow {
        /// The request's tokens, as the server counted them, when it said.
        requested_tokens: Option<u64>,
        /// The context window, in tokens, when the server said.
        context_tokens: Option<u64>,
    },
    /// Anything else.
    Other,
}

impl ModelErrorKind {
    /// Whether a call that failed so says its endpoint could not be
    /// reached: nothing listened, the connection dropped, or the server
    /// failed (5xx). A refusal of the request (4xx), a rate limit or a
    /// malformed answer is the endpoint answering.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            Self::ConnectionRefused | Self::Disconnected | Self::Server
        )
    }
}

/// A failed model call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("model call failed ({kind:?}): {message}")]
pub struct ModelError {
    /// What kind of failure.
    pub kind: ModelErrorKind,
    /// What happened.
    pub message: String,
    /// Whether trying again may help.
    pub retryable: bool,
    /// How long the server asked us to wait, if it did.
    pub retry_after: Option<Duration>,
}

impl ModelError {
    /// A failure of `kind` with `message`.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>, retryable: bool) -> Self {
        Self {
            kind,
            message: message.into(),
            retryable,
            retry_after: None,
        }
    }
}

/// A chat-completion client. Implementations report each received chunk
/// into `evidence` and have no request-wide deadline: the lease decides how
/// long a live call may take.
///
/// ```
/// use leasehold_actors::prelude::*;
///
/// /// Answers every request with its last message, backwards, one word at
/// /// a time: each word is evidence for the call's lease.
/// struct Backwards;
///
/// impl ModelClient for Backwards {
///     fn complete(
///         &self,
///         request: ModelRequest,
///         evidence: Evidence,
///     ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
///         Box::pin(async move {
///             let last = request.messages.last().map(|m| m.content.clone()).unwrap_or_default();
///             let mut content = String::new();
///             for word in last.split_whitespace().rev() {
///                 evidence.observe_text(word);
///                 content.push_str(word);
///                 content.push(' ');
///             }
///             Ok(ModelReply {
///                 content: content.trim_end().to_owned(),
///                 finish_reason: Some(FinishReason::Stop),
///                 ..ModelReply::default()
///             })
///         })
///     }
/// }
/// ```
pub trait ModelClient: Send + Sync + 'static {
    /// Runs one chat completion.
    fn complete(
        &self,
        request: ModelRequest,
        evidence: crate::supervision::evidence::Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>>;

    /// What this client calls, for a person reading why a run paused:
    /// e.g. `model llama-3 at http://10.0.0.5:8080/v1/chat/completions`.
    fn describe(&self) -> String {
        "the model".to_owned()
    }

    /// The model's name, as prices name it (`[prices."NAME"]`); none when
    /// the client does not say.
    fn model_name(&self) -> Option<String> {
        None
    }

    /// Whether the endpoint answers, asked by the executor of an endpoint
    /// it marked down ([`crate::Endpoints`]): by default a request for one
    /// token. `Ok` when it answered at all — a refusal of the request is
    /// an answer — and an error only when it could not be reached.
    fn probe(&self) -> BoxFuture<'static, Result<(), ModelError>> {
        let request = ModelRequest {
            messages: vec![ChatMessage::user("ping")],
            tools: Vec::new(),
            stream: false,
            consumer: "probe".to_owned(),
            traceparent: None,
            max_tokens: Some(1),
        };
        let reply = self.complete(request, crate::supervision::evidence::Evidence::detached());
        Box::pin(async move {
            match reply.await {
                Err(error) if error.kind.is_unreachable() => Err(error),
                _ => Ok(()),
            }
        })
    }
}
