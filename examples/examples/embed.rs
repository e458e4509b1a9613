//! Embedding leasehold: build an engine on your own ports (here the scripted
//! fakes), run a flow, and stream its events as JSON lines.
//!
//! `cargo run -p leasehold-examples --example embed`

use std::sync::Arc;
use std::time::Duration;

use leasehold::prelude::*;
use leasehold::testing::{ScriptedModel, ScriptedTools, ToolAct, Turn};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Your model client, tool servers and evaluator implement the ports of
    // `leasehold::prelude` (`ModelClient`, `ToolClient`, `Evaluator`; see
    // the `own_policy` example for one written from scratch); these are
    // the scripted ones.
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("lookup", serde_json::json!({"order": 1042}))]),
            Turn::answer("Order 1042 shipped yesterday."),
        ],
    );
    let tools = ScriptedTools::new().tool(
        "lookup",
        Some(true),
        [ToolAct::returns(
            "status: shipped",
            Duration::from_millis(300),
        )],
    );
    let engine = Engine::builder()
        .model(Arc::new(model))
        .tool_server("orders", Arc::new(tools))
        .build()
        .await?;

    // Flows are TOML or JSON files (`leasehold::flow_file::load`), or values.
    let flow: Flow = serde_json::from_value(serde_json::json!({
        "name": "support",
        "task": "Where is order 1042?",
        "max_steps": 4,
        // A server given to the builder is named alone: no command, no URL.
        "tools": [{"name": "orders"}]
    }))?;

    let mut events = engine.events().subscribe();
    let mut run = engine.start(flow).await?;
    let printer = tokio::spawn(async move {
        while let Some(Ok(event)) = events.recv().await {
            match serde_json::to_string(&*event) {
                Ok(line) => println!("{line}"),
                Err(error) => eprintln!("unserializable event: {error}"),
            }
            if matches!(
                event.kind.name(),
                "run_completed" | "run_failed" | "run_cancelled"
            ) {
                break;
            }
        }
    });
    let state = run.wait().await;
    printer.await?;
    eprintln!("{:?}: {}", state.status, state.answer.unwrap_or_default());
    Ok(())
}
