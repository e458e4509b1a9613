//! End-to-end tests of leasehold: the demo, and the documents that promise
//! what the runtime does. The tests live in `tests/tests/`.

pub mod everything;
pub mod llama;
pub mod llmock;
