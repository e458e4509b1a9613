//! Decoding a streamed chat completion: server-sent events in, a
//! [`ModelReply`] out, whatever the cuts between reads, never a panic.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::classify::{excerpt, malformed};
use super::wire::{fallback_id, parse_arguments, server_error_in_body};
use crate::ports::{
    FinishReason, ModelError, ModelErrorKind, ModelReply, TokenCost, ToolCallRequest,
};

/// The longest line accepted: protects memory from a server that never
/// ends a line.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// What one [`StreamParser::feed`] brought.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fed {
    /// Events with data completed by these bytes (keep-alive comments are
    /// not events).
    pub events: u32,
    /// The answer's text these events added, in order.
    pub text: String,
}

/// The incremental decoder of a streamed chat completion: server-sent
/// events in, a [`ModelReply`] out.
///
/// It takes the body's bytes as they come, cut anywhere (in the middle of
/// a line, of an event, of a UTF-8 character), and assembles the answer: text deltas appended in order; tool-call deltas grouped by
/// their `index`, their name and argument fragments concatenated, the
/// arguments parsed as JSON only once the stream is over; the last `usage`
/// the server reported (`stream_options.include_usage`). Comments (`:` lines,
/// keep-alives) and other fields are ignored.
///
/// Guarantees: no input makes it panic; a payload that is not JSON is a
/// `malformed_chunk` error (not retryable); malformed tool-call arguments
/// are an error naming the call; a stream that ends with neither `[DONE]`
/// nor a `finish_reason` is `disconnected` (retryable), never taken for a
/// whole answer.
///
/// ```
/// use leasehold::model::StreamParser;
///
/// let mut parser = StreamParser::new();
/// let body = concat!(
///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
///     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n",
///     "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n",
///     "data: [DONE]\n\n",
/// );
/// // Cut in the middle of an event: nothing is lost.
/// let (a, b) = body.as_bytes().split_at(30);
/// parser.feed(a)?;
/// parser.feed(b)?;
/// assert!(parser.is_done());
/// let reply = parser.finish()?;
/// assert_eq!(reply.content, "Hello");
/// assert_eq!(reply.usage.output_tokens, 2);
/// # Ok::<(), leasehold::ports::ModelError>(())
/// ```
#[derive(Debug, Default)]
pub struct StreamParser {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    event: String,
    done: bool,
    content: String,
    calls: BTreeMap<usize, PartialCall>,
    usage: Option<TokenCost>,
    finish_reason: Option<String>,
    events: u64,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

impl StreamParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the server sent `[DONE]`; bytes after it are ignored.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Events with data seen so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The text assembled so far.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// Decodes the next bytes of the body.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Fed, ModelError> {
        let mut fed = Fed::default();
        let mut rest = bytes;
        while !rest.is_empty() && !self.done {
            match rest.iter().position(|b| *b == b'\n') {
                Some(end) => {
                    self.line.extend_from_slice(&rest[..end]);
                    rest = &rest[end + 1..];
                    let line = std::mem::take(&mut self.line);
                    self.line_done(&line, &mut fed)?;
                    self.line = line;
                    self.line.clear();
                }
                None => {
                    self.line.extend_from_slice(rest);
                    rest = &[];
                }
            }
            if self.line.len() > MAX_LINE {
                return Err(malformed(format!(
                    "a line of the stream is longer than {MAX_LINE} bytes"
                )));
            }
        }
        Ok(fed)
    }

    fn line_done(&mut self, line: &[u8], fed: &mut Fed) -> Result<(), ModelError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return self.dispatch(fed);
        }
        if line.starts_with(b":") {
            return Ok(());
        }
        let line = std::str::from_utf8(line)
            .map_err(|e| malformed(format!("a line of the stream is not UTF-8: {e}")))?;
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => value.clone_into(&mut self.event),
            _ => {}
        }
        Ok(())
    }

    /// One whole event: its data is a chunk, `[DONE]`, or an error.
    fn dispatch(&mut self, fed: &mut Fed) -> Result<(), ModelError> {
        if !std::mem::take(&mut self.has_data) {
            self.event.clear();
            return Ok(());
        }
        self.events += 1;
        fed.events = fed.events.saturating_add(1);
        // The buffers are lent out and given back, so that a stream reuses
        // one allocation for all its events.
        let (data, event) = (
            std::mem::take(&mut self.data),
            std::mem::take(&mut self.event),
        );
        let result = self.decode(&data, &event, fed);
        (self.data, self.event) = (data, event);
        self.data.clear();
        self.event.clear();
        result
    }

    fn decode(&mut self, data: &str, event: &str, fed: &mut Fed) -> Result<(), ModelError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if event == "error" {
            let error: Value =
                serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.to_owned()));
            return Err(server_error_in_body(error.get("error").unwrap_or(&error)));
        }
        // Typed, borrowing decoding: this runs once per chunk, on the hot
        // path of every stream.
        let chunk: WireChunk<'_> = serde_json::from_str(data).map_err(|e| {
            malformed(format!(
                "a chunk of the stream is not the expected JSON ({e}): {}",
                excerpt(data)
            ))
        })?;
        self.chunk(chunk, fed)
    }

    fn chunk(&mut self, chunk: WireChunk<'_>, fed: &mut Fed) -> Result<(), ModelError> {
        if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
            return Err(server_error_in_body(&error));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(TokenCost {
                input_tokens: usage.prompt_tokens.unwrap_or(0),
                output_tokens: usage.completion_tokens.unwrap_or(0),
            });
        }
        for choice in chunk.choices.unwrap_or_default() {
            // Only the first choice is the answer (`n` is never above 1 in
            // our requests; a server that sends more is ignored beyond it).
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason.into_owned());
            }
            let Some(delta) = choice.delta else {
                continue;
            };
            if let Some(text) = delta.content {
                self.content.push_str(&text);
                fed.text.push_str(&text);
            }
            for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
                self.tool_call_delta(position, call)?;
            }
        }
        Ok(())
    }

    fn tool_call_delta(
        &mut self,
        position: usize,
        call: WireToolCall<'_>,
    ) -> Result<(), ModelError> {
        let index = match call.index {
            None => position,
            Some(n) => usize::try_from(n)
                .map_err(|_| malformed(format!("a tool call's `index` is not an index: {n}")))?,
        };
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = call.id.filter(|id| !id.is_empty())
            && entry.id.is_none()
        {
            entry.id = Some(id.into_owned());
        }
        if let Some(function) = call.function {
            if let Some(name) = function.name {
                entry.name.push_str(&name);
            }
            if let Some(arguments) = function.arguments {
                entry.arguments.push_str(&arguments);
            }
        }
        Ok(())
    }

    /// The answer, once the body has ended (or `[DONE]` came).
    ///
    /// A last event not followed by a blank line still counts; a stream
    /// that never said it was finished is a retryable `disconnected` error.
    pub fn finish(mut self) -> Result<ModelReply, ModelError> {
        if !self.done {
            let mut fed = Fed::default();
            if !self.line.is_empty() {
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, &mut fed)?;
            }
            self.dispatch(&mut fed)?;
        }
        if !self.done && self.finish_reason.is_none() {
            return Err(ModelError::new(
                ModelErrorKind::Disconnected,
                format!(
                    "the stream ended after {} events without a finish reason or [DONE]",
                    self.events
                ),
                true,
            ));
        }
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (position, (_, call)) in self.calls.into_iter().enumerate() {
            let arguments = parse_arguments(position, &call.name, &call.arguments)?;
            tool_calls.push(ToolCallRequest {
                id: call.id.unwrap_or_else(|| fallback_id(position)),
                name: call.name,
                arguments,
            });
        }
        Ok(ModelReply {
            content: self.content,
            tool_calls,
            usage: self.usage.unwrap_or_default(),
            finish_reason: self.finish_reason.as_deref().map(FinishReason::from_openai),
        })
    }
}

/// One `chat.completion.chunk`, as far as it matters here. Unknown fields
/// are ignored; a known field of the wrong type is a decoding error.
#[derive(Deserialize)]
struct WireChunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<WireChoice<'a>>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<WireToolCall<'a>>>,
}

#[derive(Deserialize)]
struct WireToolCall<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<WireFunction<'a>>,
}

#[derive(Deserialize)]
struct WireFunction<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}
