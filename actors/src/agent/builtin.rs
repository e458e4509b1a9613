//! The built-in tools every loop may offer its model: spawning a worker and
//! closing a milestone.

use std::collections::BTreeMap;

use crate::ports::ToolDefinition;

/// The built-in tool through which a model spawns a worker:
/// `{"kind": "<worker kind>", "task": "<what to do>"}`.
pub const SPAWN_WORKER_TOOL: &str = "spawn_worker";

/// The built-in tool through which a model closes a milestone:
/// `{"milestone": "<name>"}`.
pub const COMPLETE_MILESTONE_TOOL: &str = "complete_milestone";

pub(crate) fn spawn_worker_definition(
    workers: &BTreeMap<String, crate::flow::WorkerKind>,
) -> ToolDefinition {
    let kinds: Vec<&String> = workers.keys().collect();
    ToolDefinition {
        name: SPAWN_WORKER_TOOL.to_owned(),
        description: "Spawn a worker agent with its own loop and step budget; its final answer \
                      is this call's result."
            .to_owned(),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": kinds},
                "task": {"type": "string"}
            },
            "required": ["kind", "task"]
        }),
        idempotent: Some(false),
    }
}

pub(crate) fn complete_milestone_definition(milestones: &[String]) -> ToolDefinition {
    ToolDefinition {
        name: COMPLETE_MILESTONE_TOOL.to_owned(),
        description: "Mark one of the run's milestones as done.".to_owned(),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": {"milestone": {"type": "string", "enum": milestones}},
            "required": ["milestone"]
        }),
        idempotent: Some(true),
    }
}
