//! The model request the tests of the model client send.

use leasehold::{ChatMessage, ModelRequest};

/// "hi" from a run, streamed or not.
pub fn ask(stream: bool) -> ModelRequest {
    ModelRequest {
        max_tokens: None,
        traceparent: None,
        messages: vec![ChatMessage::user("hi")],
        tools: Vec::new(),
        stream,
        consumer: "run".into(),
    }
}
