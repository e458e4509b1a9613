//! A supervision strategy of your own: retry a stuck tool call once,
//! immediately, then give its error to the model instead of restarting
//! again; pause on ESCALATE as the built-in strategy does.
//!
//! `cargo run -p leasehold-examples --example custom_strategy`

use std::sync::Arc;
use std::time::Duration;

use leasehold::prelude::*;
use leasehold::testing::{ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct, Turn};

/// Retries once at once, then carries on without the call.
struct RetryOnceThenGiveUp;

impl SupervisionStrategy for RetryOnceThenGiveUp {
    fn decide(
        &mut self,
        child: &ChildInfo,
        end: &ChildEnd,
        _now: tokio::time::Instant,
    ) -> SupervisionAction {
        match end {
            ChildEnd::Completed => SupervisionAction::Ignore,
            ChildEnd::Escalated { reason, .. } => SupervisionAction::Pause {
                reason: reason.clone(),
            },
            _ if child.attempt < 2 => SupervisionAction::Restart {
                after: Duration::ZERO,
            },
            _ => SupervisionAction::Ignore,
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("scrape", serde_json::json!({"url": "https://example.com"}))]),
            Turn::answer("The page could not be read; answering from memory."),
        ],
    );
    let tools = ScriptedTools::new().tool("scrape", Some(true), [ToolAct::Hang]);
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_millis(200);
    config.supervision.watchdog.free_renewals = 0;
    let factory: StrategyFactory = Arc::new(|| Box::new(RetryOnceThenGiveUp));
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model))
        .tool_server("web", Arc::new(tools.clone()))
        .evaluator(Arc::new(ScriptedEvaluator::always("INTERVENE")))
        .strategy(factory)
        .build()
        .await?;
    let flow: Flow = serde_json::from_value(serde_json::json!({
        "name": "scrape", "task": "Summarize example.com", "max_steps": 3,
        "tools": [{"name": "web", "url": "http://127.0.0.1:9/mcp"}]
    }))?;
    let mut run = engine.start(flow).await?;
    let state = run.wait().await;
    println!(
        "{:?} after {} calls of `scrape`: {}",
        state.status,
        tools.calls("scrape"),
        state.answer.unwrap_or_default()
    );
    Ok(())
}
