//! Tokens counted here, for a server that reports no usage, or one that
//! cannot be believed.
//!
//! An OpenAI-compatible server says what a call cost in its `usage` object
//! (asked for with `stream_options.include_usage` when streaming). Some
//! servers send none, or send `"usage": null`, or a usage of `0` (or
//! `null`) tokens for a request that had text and an answer that had some:
//! no request is free, so a zero for a side that had text is no report.
//! Then that side's tokens are counted from the text sent or received
//! ([`believed`]), and the call's [`TokenCost::counted`] says so — a run's
//! `budget.max_tokens` holds whatever the server reports. An estimate of
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

/// The usage of a call the server `reported` (or did not: `counted`), as
/// it is recorded: a side the server gave as `0` tokens while it had text
/// — a request always has, its `input` tokens being counted here; the
/// reply when it has text or tool calls — is counted from that text, as a
/// usage the server did not report at all is, and the cost says it was
/// counted. A report of more than zero is taken as it is.
///
/// ```
/// use leasehold::model::tokens::believed;
/// use leasehold::{ModelReply, TokenCost};
///
/// let reply = ModelReply { content: "twelve chars".into(), ..ModelReply::default() };
/// let zero = TokenCost { input_tokens: 0, output_tokens: 0, counted: false };
/// assert_eq!(believed(zero, 5, &reply), TokenCost { input_tokens: 5, output_tokens: 3, counted: true });
/// let reported = TokenCost { input_tokens: 7, output_tokens: 2, counted: false };
/// assert_eq!(believed(reported, 5, &reply), reported);
/// // The server's input, and the answer's tokens counted.
/// let half = TokenCost { input_tokens: 7, output_tokens: 0, counted: false };
/// assert_eq!(believed(half, 5, &reply), TokenCost { input_tokens: 7, output_tokens: 3, counted: true });
/// ```
pub fn believed(reported: TokenCost, input: u64, reply: &ModelReply) -> TokenCost {
    if reported.counted {
        return counted(input, reply);
    }
    let output = count_reply(reply);
    let count_input = reported.input_tokens == 0 && input > 0;
    let count_output = reported.output_tokens == 0 && output > 0;
    TokenCost {
        input_tokens: if count_input {
            input
        } else {
            reported.input_tokens
        },
        output_tokens: if count_output {
            output
        } else {
            reported.output_tokens
        },
        counted: count_input || count_output,
    }
}
