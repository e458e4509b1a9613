//! Decoding a streamed chat completion: server-sent events in, a
//! [`ModelReply`] out, whatever the cuts between reads, never a panic, and
//! never more memory than the answer cap allows.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::classify::{Cap, excerpt, malformed, over_cap};
use super::settings::DEFAULT_MAX_ANSWER_BYTES;
use super::wire::{fallback_id, parse_arguments, server_error_in_body};
use leasehold_actors::{
    FinishReason, ModelError, ModelErrorKind, ModelReply, TokenCost, ToolCallRequest,
};

/// What one line or one event of a stream may hold beyond the answer cap:
/// the JSON around the text of a chunk. A line or an event longer than the
/// cap plus this cannot be part of an answer within the cap (short of
/// heavy escaping), so no server can make the parser buffer more.
pub const STREAM_ENVELOPE_BYTES: usize = 64 * 1024;

/// What a tool call of an answer counts against the answer cap beyond its
/// name and arguments.
const CALL_BYTES: usize = 64;

/// What one [`StreamParser::feed`] brought.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fed {
    /// Events with data completed by these bytes (keep-alive comments are
    /// not events).
    pub events: u32,
    /// Comment lines (`:`, the keep-alives of server-sent events) among
    /// these bytes.
    pub comments: u32,
    /// The answer's text these events added, in order.
    pub text: String,
    /// Bytes of reasoning these events added.
    pub reasoning_bytes: usize,
    /// Bytes of tool-call names and arguments these events added.
    pub tool_call_bytes: usize,
}

impl Fed {
    /// Whether these bytes added to the answer (text, reasoning or a tool
    /// call); bytes that did not — comments, empty deltas, role- or
    /// usage-only chunks — only show that the connection is open.
    pub fn added(&self) -> bool {
        !self.text.is_empty() || self.reasoning_bytes > 0 || self.tool_call_bytes > 0
    }
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
/// Guarantees: no input makes it panic; memory stays bounded by the answer
/// cap ([`StreamParser::with_max_answer_bytes`], default
/// [`DEFAULT_MAX_ANSWER_BYTES`]): content, tool-call names and arguments and
/// reasoning (`reasoning_content` or `reasoning`) together past the cap, or
/// one line or one event's data past the cap plus
/// [`STREAM_ENVELOPE_BYTES`], are an error naming the cap (`Other`,
/// retryable), returned before the bytes are kept; a payload that is not JSON is a
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
/// # Ok::<(), leasehold::ModelError>(())
/// ```
#[derive(Debug)]
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
    /// Bytes of the answer so far: content, tool-call names and arguments,
    /// reasoning.
    answer_bytes: usize,
    max_answer_bytes: usize,
    /// The URL the answer comes from, for the errors.
    endpoint: Option<String>,
}

impl Default for StreamParser {
    fn default() -> Self {
        Self::with_max_answer_bytes(DEFAULT_MAX_ANSWER_BYTES)
    }
}

#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

impl StreamParser {
    /// A parser at the start of a stream, under the default answer cap
    /// ([`DEFAULT_MAX_ANSWER_BYTES`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser at the start of a stream, under an answer cap of
    /// `max_answer_bytes` (see [`ModelSettings::max_answer_bytes`](super::ModelSettings::max_answer_bytes)).
    ///
    /// ```
    /// use leasehold::model::StreamParser;
    /// use leasehold::ModelErrorKind;
    ///
    /// let mut parser = StreamParser::with_max_answer_bytes(8);
    /// parser.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"12345\"}}]}\n\n")?;
    /// let error = parser
    ///     .feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"6789\"}}]}\n\n")
    ///     .unwrap_err();
    /// assert_eq!(error.kind, ModelErrorKind::Other);
    /// assert!(error.message.contains("cap of 8 bytes"), "{error}");
    /// assert_eq!(parser.content(), "12345", "nothing past the cap is kept");
    /// # Ok::<(), leasehold::ModelError>(())
    /// ```
    pub fn with_max_answer_bytes(max_answer_bytes: usize) -> Self {
        Self {
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            event: String::new(),
            done: false,
            content: String::new(),
            calls: BTreeMap::new(),
            usage: None,
            finish_reason: None,
            events: 0,
            answer_bytes: 0,
            max_answer_bytes,
            endpoint: None,
        }
    }

    /// The same parser, naming `url` in its errors.
    pub(crate) fn naming_endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// The most one line or one event's data may hold.
    fn line_limit(&self) -> usize {
        self.max_answer_bytes.saturating_add(STREAM_ENVELOPE_BYTES)
    }

    fn over(&self, what: &str, limit: usize) -> ModelError {
        let mut error = over_cap(
            Cap::Answer,
            self.max_answer_bytes,
            what,
            self.endpoint.as_deref(),
        );
        if limit != self.max_answer_bytes {
            error.message.push_str(&format!(
                " (a line or an event may hold the cap plus {STREAM_ENVELOPE_BYTES} bytes, {limit} in all)"
            ));
        }
        error
    }

    /// Counts `added` more bytes of the answer, refusing them past the cap.
    fn count(&mut self, added: usize) -> Result<(), ModelError> {
        let total = self.answer_bytes.saturating_add(added);
        if total > self.max_answer_bytes {
            return Err(self.over(
                &format!("its text, tool calls and reasoning ({total} bytes or more)"),
                self.max_answer_bytes,
            ));
        }
        self.answer_bytes = total;
        Ok(())
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
        let limit = self.line_limit();
        while !rest.is_empty() && !self.done {
            let end = rest.iter().position(|b| *b == b'\n');
            // Checked before the bytes are kept: a line that never ends
            // costs at most the limit.
            if self.line.len().saturating_add(end.unwrap_or(rest.len())) > limit {
                return Err(self.over("one line of the stream", limit));
            }
            match end {
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
        }
        Ok(fed)
    }

    fn line_done(&mut self, line: &[u8], fed: &mut Fed) -> Result<(), ModelError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return self.dispatch(fed);
        }
        if line.starts_with(b":") {
            fed.comments = fed.comments.saturating_add(1);
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
                let limit = self.line_limit();
                if self
                    .data
                    .len()
                    .saturating_add(value.len())
                    .saturating_add(1)
                    > limit
                {
                    return Err(self.over("the data of one event of the stream", limit));
                }
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
                counted: false,
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
            for reasoning in [&delta.reasoning_content, &delta.reasoning] {
                let length = match reasoning {
                    None | Some(Value::Null) => 0,
                    Some(Value::String(text)) => text.len(),
                    Some(other) => other.to_string().len(),
                };
                // Reasoning is not kept, but it is part of the answer: a
                // model that reasons forever is stopped at the cap.
                self.count(length)?;
                fed.reasoning_bytes = fed.reasoning_bytes.saturating_add(length);
            }
            if let Some(text) = delta.content {
                self.count(text.len())?;
                self.content.push_str(&text);
                fed.text.push_str(&text);
            }
            for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
                let added = self.tool_call_delta(position, call)?;
                fed.tool_call_bytes = fed.tool_call_bytes.saturating_add(added);
            }
        }
        Ok(())
    }

    /// Adds one tool-call delta; returns the bytes of name and arguments it
    /// added.
    fn tool_call_delta(
        &mut self,
        position: usize,
        call: WireToolCall<'_>,
    ) -> Result<usize, ModelError> {
        let index = match call.index {
            None => position,
            Some(n) => usize::try_from(n)
                .map_err(|_| malformed(format!("a tool call's `index` is not an index: {n}")))?,
        };
        if !self.calls.contains_key(&index) {
            // Every call costs something, even one with nothing in it, so
            // that endless new indexes are stopped too.
            self.count(CALL_BYTES)?;
        }
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = call.id.filter(|id| !id.is_empty())
            && entry.id.is_none()
        {
            entry.id = Some(id.into_owned());
        }
        let Some(function) = call.function else {
            return Ok(0);
        };
        let added = function.name.as_ref().map_or(0, |n| n.len())
            + function.arguments.as_ref().map_or(0, |a| a.len());
        self.count(added)?;
        let entry = self.calls.entry(index).or_default();
        if let Some(name) = function.name {
            entry.name.push_str(&name);
        }
        if let Some(arguments) = function.arguments {
            entry.arguments.push_str(&arguments);
        }
        Ok(added)
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
            usage: self.usage.unwrap_or(super::wire::NONE_REPORTED),
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
    /// Reasoning text (DeepSeek, vLLM); any shape, only measured.
    #[serde(default)]
    reasoning_content: Option<Value>,
    /// Reasoning text (OpenRouter, newer vLLM); any shape, only measured.
    #[serde(default)]
    reasoning: Option<Value>,
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
