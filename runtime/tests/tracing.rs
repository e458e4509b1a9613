//! Tracing: every run, step and call has a span, so `RUST_LOG` and any
//! subscriber can follow a run.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{
    Engine,
    testing::{ScriptedModel, ScriptedTools, ToolAct, Turn},
};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::FmtSpan;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Self;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn runs_steps_and_calls_have_spans() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_span_events(FmtSpan::NEW)
        .with_env_filter("leasehold_actors=info")
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("search", serde_json::json!({}))]),
            Turn::answer("done"),
        ],
    );
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("hit", Duration::from_millis(10))],
    );
    let engine = Engine::builder()
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine");
    let flow = serde_json::from_value(serde_json::json!({
        "name": "traced", "task": "t", "max_steps": 3,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp"}]
    }))
    .expect("flow");
    let mut run = engine.start(flow).await.expect("started");
    let run_id = run.run_id().to_owned();
    assert_eq!(run.wait().await.answer.as_deref(), Some("done"));

    let text = String::from_utf8_lossy(&captured.0.lock().expect("lock")).into_owned();
    assert!(
        text.contains(&format!(
            "run{{run_id={run_id} trace_id={} flow=traced",
            leasehold::trace_id_of(&run_id)
        )),
        "{text}"
    );
    assert!(text.contains("step{path=run step="), "{text}");
    assert!(
        text.contains("call{path=run/model_call:1 attempt=1}"),
        "{text}"
    );
    assert!(
        text.contains("call{path=run/tool_call:1.0 attempt=1}"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idempotent_entry_naming_a_tool_the_server_lacks_is_warned_of_at_connect() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        // The run's span is at `info`: the warning is shown within it.
        .with_env_filter("warn,leasehold_actors=info")
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let model = ScriptedModel::new().script("run", [Turn::answer("done")]);
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("hit", Duration::from_millis(10))],
    );
    let engine = Engine::builder()
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine");
    let flow = serde_json::from_value(serde_json::json!({
        "name": "typo", "task": "t", "max_steps": 3,
        "tools": [{"name": "local", "url": "http://127.0.0.1:9/mcp",
                   "idempotent": {"search": true, "serch": true}}]
    }))
    .expect("flow");
    let mut run = engine.start(flow).await.expect("started");
    let run_id = run.run_id().to_owned();
    assert_eq!(run.wait().await.answer.as_deref(), Some("done"));

    let text = String::from_utf8_lossy(&captured.0.lock().expect("lock")).into_owned();
    let warned: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warned.len(), 1, "one warning, for `serch` alone:\n{text}");
    assert!(
        warned[0].contains(
            "tool server `local`: its `idempotent` entry `serch` names a tool the server does \
             not have, so it says nothing of any call (its tools: search)"
        ),
        "{text}"
    );
    assert!(
        warned[0].contains(&run_id),
        "the warning is in the run's span: {text}"
    );
}
