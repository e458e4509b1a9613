//! Translations between MCP's types and the tool port's: tool definitions,
//! tool results, and which failures are worth retrying.

use std::collections::BTreeMap;

use leasehold_actors::{ToolDefinition, ToolOutput};
use rmcp::ServiceError;
use rmcp::model::{CallToolResult, ContentBlock, ErrorCode, ResourceContents, Tool};
use rmcp::service::ClientInitializeError;
use rmcp::transport::DynamicTransportError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

/// The `data` key rmcp marks its own "the stream closed" errors with: a
/// transport failure dressed as a JSON-RPC error.
const TRANSPORT_CLOSED_MARKER: &str = "io.modelcontextprotocol/transportClosed";

/// A tool as the model sees it. The flow's `idempotent` entry wins over the
/// server's hints (a server's annotations are hints, a flow is the operator's
/// word); a read-only tool is idempotent.
pub(super) fn tool_definition(
    tool: Tool,
    flow_idempotent: &BTreeMap<String, bool>,
) -> ToolDefinition {
    let hints = tool.annotations.as_ref();
    let idempotent = flow_idempotent
        .get(tool.name.as_ref())
        .copied()
        .or_else(|| hints.and_then(|a| a.idempotent_hint))
        .or_else(|| {
            hints
                .and_then(|a| a.read_only_hint)
                .filter(|read_only| *read_only)
        });
    let description = tool
        .description
        .map(|d| d.into_owned())
        .or_else(|| tool.title.clone())
        .unwrap_or_default();
    ToolDefinition {
        name: tool.name.into_owned(),
        description,
        input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
        idempotent,
    }
}

/// A tool's result as text for the model: its text blocks joined with
/// newlines, other blocks named in brackets; the structured content when
/// there is nothing else.
pub(super) fn tool_output(result: CallToolResult) -> ToolOutput {
    let parts: Vec<String> = result.content.iter().map(describe).collect();
    let content = if parts.is_empty() {
        result
            .structured_content
            .as_ref()
            .map(serde_json::Value::to_string)
            .unwrap_or_default()
    } else {
        parts.join("\n")
    };
    ToolOutput {
        content,
        is_error: result.is_error.unwrap_or(false),
    }
}

fn describe(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => format!("[{} image]", image.mime_type),
        ContentBlock::Audio(audio) => format!("[{} audio]", audio.mime_type),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            ResourceContents::BlobResourceContents { uri, .. } => format!("[resource {uri}]"),
            _ => "[resource]".to_owned(),
        },
        ContentBlock::ResourceLink(link) => format!("[resource link {}]", link.uri),
        _ => "[content of an unknown kind]".to_owned(),
    }
}

/// What went wrong with a request, for the error the caller gets.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Failure {
    /// The connection is gone or could not carry the request: retryable,
    /// and the connection is replaced on the next use.
    Transport {
        /// What the transport said.
        detail: String,
        /// Whether the server certainly never got the request (the
        /// connection was refused).
        refused: bool,
    },
    /// The server answered with a JSON-RPC error.
    Refused {
        /// What the server said, with its code.
        message: String,
        /// Whether asking again may get another answer.
        retryable: bool,
    },
}

/// Sorts an rmcp error into a transport failure or a refusal.
pub(super) fn classify(error: &ServiceError) -> Failure {
    match error {
        ServiceError::McpError(data)
            if data
                .data
                .as_ref()
                .is_some_and(|d| d.get(TRANSPORT_CLOSED_MARKER).is_some()) =>
        {
            Failure::Transport {
                detail: data.message.to_string(),
                refused: false,
            }
        }
        ServiceError::McpError(data) => Failure::Refused {
            message: format!("{} ({}): {}", code_name(data.code), data.code.0, data.message),
            // An internal error may be transient; a malformed or unknown
            // request is refused again.
            retryable: data.code == ErrorCode::INTERNAL_ERROR,
        },
        ServiceError::UnexpectedResponse => Failure::Refused {
            message: "an answer of an unexpected kind (an input request or a task, which leasehold does not support)".into(),
            retryable: false,
        },
        ServiceError::TransportSend(error) => {
            let (detail, refused) = transport_detail(error);
            Failure::Transport { detail, refused }
        }
        ServiceError::TransportClosed => Failure::Transport {
            detail: "the connection closed".into(),
            refused: false,
        },
        other => Failure::Transport {
            detail: other.to_string(),
            refused: false,
        },
    }
}

/// What a transport error says, without the wrapper that names a Rust
/// type, and whether it was a refused connection (the server certainly got
/// nothing).
pub(super) fn transport_detail(error: &DynamicTransportError) -> (String, bool) {
    let mut detail: Vec<String> = Vec::new();
    let mut refused = false;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&*error.error);
    while let Some(error) = cause {
        let said = error.to_string();
        if !detail.iter().any(|d| d.contains(&said)) {
            detail.push(said);
        }
        refused |= error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
            || error
                .downcast_ref::<reqwest::Error>()
                .is_some_and(reqwest::Error::is_connect);
        // The HTTP transport's error does not name its cause as a source:
        // follow it by hand.
        cause = match error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::Client(client)) => Some(client),
            _ => error.source(),
        };
    }
    (detail.join(": "), refused)
}

/// What a failed handshake says, in the same words.
pub(super) fn handshake_detail(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::TransportError { error, context } => {
            format!("{} (when trying to {context})", transport_detail(error).0)
        }
        other => other.to_string(),
    }
}

fn code_name(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::PARSE_ERROR => "parse error",
        ErrorCode::INVALID_REQUEST => "invalid request",
        ErrorCode::METHOD_NOT_FOUND => "method not found",
        ErrorCode::INVALID_PARAMS => "invalid params",
        ErrorCode::INTERNAL_ERROR => "internal error",
        _ => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ErrorData, ToolAnnotations};
    use serde_json::json;

    fn tool(annotations: Option<ToolAnnotations>) -> Tool {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let serde_json::Value::Object(schema) = schema else {
            unreachable!()
        };
        let mut tool = Tool::new("search", "Searches.", schema);
        tool.annotations = annotations;
        tool
    }

    #[test]
    fn idempotent_comes_from_the_flow_then_the_hint_then_read_only() {
        let none = BTreeMap::new();
        assert_eq!(tool_definition(tool(None), &none).idempotent, None);
        let hinted = ToolAnnotations::new().idempotent(true);
        assert_eq!(
            tool_definition(tool(Some(hinted)), &none).idempotent,
            Some(true)
        );
        let read_only = ToolAnnotations::new().read_only(true);
        assert_eq!(
            tool_definition(tool(Some(read_only)), &none).idempotent,
            Some(true)
        );
        let flow = BTreeMap::from([("search".to_owned(), false)]);
        let hinted = ToolAnnotations::new().idempotent(true);
        assert_eq!(
            tool_definition(tool(Some(hinted)), &flow).idempotent,
            Some(false)
        );
        let definition = tool_definition(tool(None), &none);
        assert_eq!(definition.name, "search");
        assert_eq!(definition.description, "Searches.");
        assert_eq!(definition.input_schema["properties"]["q"]["type"], "string");
    }

    #[test]
    fn results_join_text_and_keep_the_error_flag() {
        let mut result =
            CallToolResult::success(vec![ContentBlock::text("one"), ContentBlock::text("two")]);
        assert_eq!(
            tool_output(result.clone()),
            ToolOutput {
                content: "one\ntwo".into(),
                is_error: false
            }
        );
        result.is_error = Some(true);
        assert!(tool_output(result).is_error);
    }

    #[test]
    fn protocol_errors_are_not_retryable_and_transport_errors_are() {
        let refused = classify(&ServiceError::McpError(ErrorData::invalid_params(
            "Tool nope not found",
            None,
        )));
        assert_eq!(
            refused,
            Failure::Refused {
                message: "invalid params (-32602): Tool nope not found".into(),
                retryable: false
            }
        );
        let unknown_method = classify(&ServiceError::McpError(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            "tools/call",
            None,
        )));
        assert!(matches!(
            unknown_method,
            Failure::Refused {
                retryable: false,
                ..
            }
        ));
        let internal = classify(&ServiceError::McpError(ErrorData::internal_error(
            "oops", None,
        )));
        assert!(matches!(
            internal,
            Failure::Refused {
                retryable: true,
                ..
            }
        ));
        let closed = classify(&ServiceError::McpError(ErrorData::internal_error(
            "stream closed",
            Some(json!({TRANSPORT_CLOSED_MARKER: 1})),
        )));
        assert_eq!(
            closed,
            Failure::Transport {
                detail: "stream closed".into(),
                refused: false
            }
        );
        assert!(matches!(
            classify(&ServiceError::TransportClosed),
            Failure::Transport { refused: false, .. }
        ));
        let refused = ServiceError::TransportSend(DynamicTransportError::from_parts(
            "http",
            std::any::TypeId::of::<()>(),
            Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
        ));
        assert!(matches!(
            classify(&refused),
            Failure::Transport { refused: true, .. }
        ));
    }
}
