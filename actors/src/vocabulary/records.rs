//! The records the ports, the events and the verdicts share: a message of
//! a transcript, what a call cost in tokens, why a model stopped. Plain
//! data that imports nothing of the actors, so that every file may name it.

use serde::{Deserialize, Serialize};

/// One message of a loop's transcript, as shown to an evaluator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TranscriptMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The message text.
    pub content: String,
}

impl TranscriptMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Tokens a model call or an evaluator call spent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenCost {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// The server reported no usage: the tokens were counted here, from
    /// the text sent and received (an estimate; see the model client).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub counted: bool,
}

/// Why a model stopped answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// It finished its answer.
    Stop,
    /// It stopped to call tools.
    ToolCalls,
    /// It was cut off at its length limit: the answer is not whole.
    Length,
    /// A content filter stopped it.
    ContentFilter,
    /// A reason this runtime does not know.
    #[serde(other)]
    Other,
}

impl FinishReason {
    /// The reason an OpenAI-compatible server names (`stop`, `tool_calls`,
    /// `length`, `content_filter`; `function_call` counts as `tool_calls`).
    pub fn from_openai(name: &str) -> Self {
        match name {
            "stop" | "end_turn" => Self::Stop,
            "tool_calls" | "function_call" => Self::ToolCalls,
            "length" | "max_tokens" => Self::Length,
            "content_filter" => Self::ContentFilter,
            _ => Self::Other,
        }
    }
}
