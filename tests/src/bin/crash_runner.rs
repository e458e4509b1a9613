//! A process for crash tests: runs a flow with slow, deterministic steps
//! against a sled store, printing every event as one JSON line, so a test can
//! kill it with SIGKILL at a chosen point and start another process that
//! resumes the run.
//!
//! `crash_runner DB_DIR EFFECTS_FILE start|resume`
//!
//! - `start` starts a run and waits for it.
//! - `resume` waits until the first process's executor lease has expired,
//!   marks orphans, claims the run and resumes it from its snapshots.
//!
//! The model answers by the number of steps already in the conversation (so
//! a resumed process picks up exactly where the first one was); the tools
//! append one line per completed call to EFFECTS_FILE (their side effects).
//! Exit status: 0 completed, 3 paused for a person, 1 otherwise.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold::{
    BoxFuture, ChatRole, Engine, EngineConfig, Evidence, Flow, ModelClient, ModelError, ModelReply,
    ModelRequest, RunStatus, TokenCost, ToolCallRequest, ToolClient, ToolDefinition, ToolError,
    ToolInvocation, ToolOutput,
    store::{Durability, SledConfig, SledStore},
};

/// The tool each step calls, in order; then the budget runs out and the
/// wrap-up step answers.
const STEPS: [&str; 3] = ["search", "charge", "search"];

/// Streams its answer in ten chunks, 100 ms apart.
struct StepModel;

impl ModelClient for StepModel {
    fn complete(
        &self,
        request: ModelRequest,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ModelReply, ModelError>> {
        let done = request
            .messages
            .iter()
            .filter(|m| m.role == ChatRole::Assistant)
            .count();
        let wrap_up = request.tools.is_empty();
        Box::pin(async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                evidence.observe();
            }
            let usage = TokenCost {
                counted: false,
                input_tokens: 100,
                output_tokens: 10,
            };
            if wrap_up || done >= STEPS.len() {
                return Ok(ModelReply {
                    content: format!("summary after {done} steps"),
                    tool_calls: Vec::new(),
                    usage,
                    finish_reason: None,
                });
            }
            Ok(ModelReply {
                content: String::new(),
                tool_calls: vec![ToolCallRequest {
                    id: format!("call_{done}"),
                    name: STEPS[done].to_owned(),
                    arguments: serde_json::json!({"step": done}),
                }],
                usage,
                finish_reason: None,
            })
        })
    }
}

/// `search` (idempotent) and `charge` (not idempotent): each takes a second,
/// reports progress, and records its side effect when it completes.
struct EffectTools {
    effects: PathBuf,
}

impl ToolClient for EffectTools {
    fn list_tools(&self) -> BoxFuture<'static, Result<Vec<ToolDefinition>, ToolError>> {
        let tool = |name: &str, idempotent| ToolDefinition {
            name: name.to_owned(),
            description: format!("the crash test's `{name}`"),
            input_schema: serde_json::json!({"type": "object"}),
            idempotent: Some(idempotent),
        };
        let tools = vec![tool("search", true), tool("charge", false)];
        Box::pin(async move { Ok(tools) })
    }

    fn call(
        &self,
        invocation: ToolInvocation,
        evidence: Evidence,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let effects = self.effects.clone();
        Box::pin(async move {
            for n in 1..=10 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                evidence.progress(format!("{n}/10"));
            }
            let line = format!("{} {}\n", invocation.name, invocation.idempotency_key);
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&effects)
                .and_then(|mut f| f.write_all(line.as_bytes()))
                .map_err(|e| ToolError::new(format!("cannot record the effect: {e}"), false))?;
            Ok(ToolOutput {
                content: format!("{} done", invocation.name),
                is_error: false,
            })
        })
    }
}

fn flow() -> Flow {
    let flow = serde_json::json!({
        "name": "crash",
        "task": "Search, charge, search, then summarize.",
        "max_steps": 3,
        "tools": [{"name": "effects", "url": "http://127.0.0.1:9/mcp"}]
    });
    serde_json::from_value(flow).unwrap_or_else(|e| unreachable!("the crash flow is valid: {e}"))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(status) => match status {
            RunStatus::Completed => std::process::ExitCode::SUCCESS,
            status if status.is_paused() => std::process::ExitCode::from(3),
            _ => std::process::ExitCode::FAILURE,
        },
        Err(error) => {
            eprintln!("crash_runner: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<RunStatus, Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, db, effects, mode] = args.as_slice() else {
        return Err("usage: crash_runner DB_DIR EFFECTS_FILE start|resume".into());
    };
    let store = SledStore::open(SledConfig::new(db).with_durability(Durability::Sync))?;
    let config = EngineConfig {
        run_lease_ttl: Duration::from_millis(900),
        ..EngineConfig::default()
    };
    let engine = Engine::builder()
        .config(config)
        .owner_id(format!("executor-{}", std::process::id()))
        .store(Arc::new(store))
        .model(Arc::new(StepModel))
        .tool_server(
            "effects",
            Arc::new(EffectTools {
                effects: effects.into(),
            }),
        )
        .build()
        .await?;
    let mut events = engine.events().subscribe();
    let printer = tokio::spawn(async move {
        let mut out = std::io::stdout();
        while let Some(Ok(event)) = events.recv().await {
            if let Ok(line) = serde_json::to_string(&*event) {
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
        }
    });
    let mut run = match mode.as_str() {
        "start" => engine.start(flow()).await?,
        "resume" => {
            let mut waited = Duration::ZERO;
            loop {
                let mut booted = leasehold::executor::boot(&engine, true).await?;
                if let Some(run) = booted.resumed.pop() {
                    break run;
                }
                if waited > Duration::from_secs(10) {
                    return Err("no orphaned run to resume after 10 s".into());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                waited += Duration::from_millis(100);
            }
        }
        other => return Err(format!("unknown mode `{other}`: expected start or resume").into()),
    };
    let state = run.wait_until(|s| s.status.is_paused()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    printer.abort();
    println!(
        "{}",
        serde_json::json!({"final": state, "run_id": run.run_id()})
    );
    Ok(state.status)
}
