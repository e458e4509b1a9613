//! Tokens counted here, for a server that reports no usage.
//!
//! An OpenAI-compatible server says what a call cost in its `usage` object
//! (asked for with `stream_options.include_usage` when streaming). Some
//! servers send none. Then the tokens are counted from the text sent and
//! received, and the call's [`TokenCost::counted`] says so: an estimate of
//! one token per four characters (what OpenAI's tokenizers average on
//! English text, and near enough on code) plus four tokens for each
//! message's framing. It is not the server's tokenizer, so a counted figure
//! may be off by a fifth either way; a run's usage says how many of its
//! calls were counted.
//!
//! ```
//! use leasehold::model::tokens::count_text;
//!
//! assert_eq!(count_text(""), 0);
//! assert_eq!(count_text("abc"), 1);
//! assert_eq!(count_text("one two three four"), 5);
//! ```

use leasehold_actors::{ChatMessage, ModelReply, TokenCost, ToolDefinition};

/// Characters per token, on average.
pub const CHARS_PER_TOKEN: usize = 4;

/// The tokens each message's framing (its role and separators) costs.
pub const MESSAGE_FRAMING: u64 = 4;

/// The tokens of `text`, estimated: one per [`CHARS_PER_TOKEN`]
/// characters, rounded up.
pub fn count_text(text: &str) -> u64 {
    text.chars().count().div_ceil(CHARS_PER_TOKEN) as u64
}

/// The input tokens of a request of `messages` offering `tools`.
pub fn count_request(messages: &[ChatMessage], tools: &[ToolDefinition]) -> u64 {
    let messages: u64 = messages
        .iter()
        .map(|m| {
            let calls: u64 = m
                .tool_calls
                .iter()
                .map(|c| count_text(&c.name) + count_text(&c.arguments.to_string()))
                .sum();
            MESSAGE_FRAMING + count_text(&m.content) + calls
        })
        .sum();
    let tools: u64 = tools
        .iter()
        .map(|t| count_text(&serde_json::to_string(t).unwrap_or_default()))
        .sum();
    messages + tools
}

/// The output tokens of `reply`: its text and the tool calls it asks for.
pub fn count_reply(reply: &ModelReply) -> u64 {
    let calls: u64 = reply
        .tool_calls
        .iter()
        .map(|c| count_text(&c.name) + count_text(&c.arguments.to_string()))
        .sum();
    count_text(&reply.content) + calls
}

/// The usage of a call whose server reported none: `counted`, with the
/// request's `input` tokens and the reply's output tokens.
pub fn counted(input: u64, reply: &ModelReply) -> TokenCost {
    TokenCost {
        input_tokens: input,
        output_tokens: count_reply(reply),
        counted: true,
    }
}
