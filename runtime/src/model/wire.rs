//! The OpenAI chat-completions wire format: the request body, and the
//! pieces of an answer both the blocking and the streaming readers share.
//!
//! Reading never panics: a value of the wrong shape is a `malformed_chunk`
//! error, and tool-call arguments that are not a JSON object are an error
//! naming the call, never a crash.

use serde_json::{Map, Value, json};

use super::classify::{Cap, context_overflow, excerpt, malformed, over_cap};
use leasehold_actors::{
    ChatMessage, ChatRole, FinishReason, ModelError, ModelErrorKind, ModelReply, ModelRequest,
    TokenCost, ToolCallRequest,
};

/// The JSON body of a chat-completions request to `endpoint`: its
/// `max_tokens` the request's, else the endpoint's, else none.
pub(crate) fn request_body(
    endpoint: &super::ModelEndpoint,
    request: &ModelRequest,
    response_format: Option<&Value>,
) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(endpoint.model.clone()));
    if let Some(max_tokens) = request.max_tokens.or(endpoint.max_tokens) {
        body.insert("max_tokens".into(), Value::from(max_tokens));
    }
    body.insert(
        "messages".into(),
        Value::Array(request.messages.iter().map(message).collect()),
    );
    body.insert("stream".into(), Value::Bool(request.stream));
    if request.stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.input_schema,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(format) = response_format {
        body.insert("response_format".into(), format.clone());
    }
    Value::Object(body)
}

fn message(message: &ChatMessage) -> Value {
    let role = match message.role {
        ChatRole::System => "system",
        ChatRole::User => "user",
        ChatRole::Assistant => "assistant",
        ChatRole::Tool => "tool",
    };
    let mut out = Map::new();
    out.insert("role".into(), Value::String(role.to_owned()));
    let content = if message.role == ChatRole::Assistant
        && message.content.is_empty()
        && !message.tool_calls.is_empty()
    {
        // An assistant turn that only calls tools has no content, and some
        // servers refuse an empty string there.
        Value::Null
    } else {
        Value::String(message.content.clone())
    };
    out.insert("content".into(), content);
    if !message.tool_calls.is_empty() {
        let calls = message
            .tool_calls
            .iter()
            .map(|call| {
                json!({
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments.to_string()},
                })
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = &message.tool_call_id {
        out.insert("tool_call_id".into(), Value::String(id.clone()));
    }
    Value::Object(out)
}

/// Reads a whole (non-streamed) chat completion from `endpoint`, whose
/// content, tool-call names and arguments and reasoning may hold at most
/// `max_answer` bytes together.
pub(crate) fn parse_completion(
    body: &[u8],
    max_answer: usize,
    endpoint: &str,
) -> Result<ModelReply, ModelError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        malformed(format!(
            "the answer is not JSON ({e}): {}",
            excerpt(&String::from_utf8_lossy(body))
        ))
    })?;
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        return Err(server_error_in_body(error));
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| malformed("the answer has no `choices[0]`"))?;
    let message = choice
        .get("message")
        .ok_or_else(|| malformed("the answer's `choices[0]` has no `message`"))?;
    let size = answer_bytes(message);
    if size > max_answer {
        return Err(over_cap(
            Cap::Answer,
            max_answer,
            &format!("its text, tool calls and reasoning ({size} bytes)"),
            Some(endpoint),
        ));
    }
    let content = optional_str(message, "content", "choices[0].message.content")?.unwrap_or("");
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").filter(|c| !c.is_null()) {
        let calls = calls
            .as_array()
            .ok_or_else(|| malformed("`choices[0].message.tool_calls` is not an array"))?;
        for (index, call) in calls.iter().enumerate() {
            let function = call.get("function").unwrap_or(&Value::Null);
            let name = optional_str(function, "name", "tool_calls[].function.name")?
                .unwrap_or("")
                .to_owned();
            let id = optional_str(call, "id", "tool_calls[].id")?
                .map_or_else(|| fallback_id(index), str::to_owned);
            let arguments = match function.get("arguments") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(Value::String(text)) => parse_arguments(index, &name, text)?,
                Some(object @ Value::Object(_)) => object.clone(),
                Some(_) => return Err(arguments_error(index, &name, "not a JSON object")),
            };
            tool_calls.push(ToolCallRequest {
                id,
                name,
                arguments,
            });
        }
    }
    let finish_reason = optional_str(choice, "finish_reason", "choices[0].finish_reason")?
        .map(FinishReason::from_openai);
    Ok(ModelReply {
        content: content.to_owned(),
        tool_calls,
        usage: usage(value.get("usage"))?.unwrap_or(NONE_REPORTED),
        finish_reason,
    })
}

/// The bytes of a whole answer's `message` that count against the answer
/// cap: its content, its reasoning, its tool calls' names and arguments (as
/// text), as the stream parser counts them.
fn answer_bytes(message: &Value) -> usize {
    let text = |value: Option<&Value>| match value {
        None | Some(Value::Null) => 0,
        Some(Value::String(text)) => text.len(),
        Some(other) => other.to_string().len(),
    };
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map_or(0, |calls| {
            calls
                .iter()
                .map(|call| {
                    let function = call.get("function");
                    text(function.and_then(|f| f.get("name")))
                        + text(function.and_then(|f| f.get("arguments")))
                })
                .sum()
        });
    text(message.get("content"))
        + text(message.get("reasoning_content"))
        + text(message.get("reasoning"))
        + calls
}

/// The string at `key`, `None` when absent or null, an error otherwise.
pub(crate) fn optional_str<'a>(
    value: &'a Value,
    key: &str,
    what: &str,
) -> Result<Option<&'a str>, ModelError> {
    match value.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(malformed(format!(
            "`{what}` is not a string: {}",
            excerpt(&other.to_string())
        ))),
    }
}

/// The usage of an answer whose server reported none: marked `counted`,
/// for the client to count ([`tokens`](super::tokens)).
pub(crate) const NONE_REPORTED: TokenCost = TokenCost {
    input_tokens: 0,
    output_tokens: 0,
    counted: true,
};

/// The token counts of a `usage` object, if there is one.
pub(crate) fn usage(value: Option<&Value>) -> Result<Option<TokenCost>, ModelError> {
    let Some(usage) = value.filter(|u| !u.is_null()) else {
        return Ok(None);
    };
    if !usage.is_object() {
        return Err(malformed("`usage` is not an object"));
    }
    let count = |key: &str| match usage.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(n) => n
            .as_u64()
            .ok_or_else(|| malformed(format!("`usage.{key}` is not a token count: {n}"))),
    };
    Ok(Some(TokenCost {
        counted: false,
        input_tokens: count("prompt_tokens")?,
        output_tokens: count("completion_tokens")?,
    }))
}

/// The arguments of the tool call at `index`, named `name`: a JSON object
/// (empty text counts as `{}`).
pub(crate) fn parse_arguments(index: usize, name: &str, text: &str) -> Result<Value, ModelError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(object @ Value::Object(_)) => Ok(object),
        Ok(other) => Err(arguments_error(
            index,
            name,
            format!(
                "expected a JSON object, got `{}`",
                excerpt(&other.to_string())
            ),
        )),
        Err(e) => Err(arguments_error(
            index,
            name,
            format!("not JSON ({e}): `{}`", excerpt(text)),
        )),
    }
}

fn arguments_error(index: usize, name: &str, what: impl std::fmt::Display) -> ModelError {
    ModelError::new(
        ModelErrorKind::Other,
        format!("the model's tool call #{index} (`{name}`) has malformed arguments: {what}"),
        true,
    )
}

/// An id for a tool call the server sent without one: the tool's answer
/// must name the call it answers.
pub(crate) fn fallback_id(index: usize) -> String {
    format!("call_{index}")
}

/// An `error` object inside an answer that began as a success: retryable,
/// unless it says the request does not fit the model's context window.
pub(crate) fn server_error_in_body(error: &Value) -> ModelError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| excerpt(&error.to_string()), excerpt);
    let overflow = context_overflow(Some(error), &message);
    ModelError::new(
        overflow.unwrap_or(ModelErrorKind::Server),
        format!("the server reported an error in its answer: {message}"),
        overflow.is_none(),
    )
}
