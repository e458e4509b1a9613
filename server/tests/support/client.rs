//! A served engine and a client of its API, and the runs the tests of the
//! API drive through it.

use std::sync::Arc;
use std::time::Duration;

use leasehold::Engine;
use leasehold::EngineConfig;
use leasehold::testing::{ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct, Turn};
use leasehold_server::ServerOptions;
use serde_json::{Value, json};

use super::Served;

/// An engine served on loopback with `options`, and a client of it;
/// stopped when dropped.
pub struct Server {
    /// `http://ADDR`.
    pub base: String,
    pub http: reqwest::Client,
    _served: Served,
}

impl Server {
    pub async fn start(engine: Engine, options: ServerOptions) -> Self {
        let served = Served::start(super::app(engine, options)).await;
        Self {
            base: served.base.clone(),
            http: reqwest::Client::new(),
            _served: served,
        }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("sent");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn post(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("sent");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Opens the event stream of `run_id` (`query` appended as is).
    pub async fn events(&self, run_id: &str, query: &str) -> reqwest::Response {
        self.http
            .get(format!("{}/runs/{run_id}/events{query}", self.base))
            .send()
            .await
            .expect("the stream opens")
    }

    pub async fn start_run(&self, flow: &Value) -> String {
        let (status, body) = self
            .post("/runs", "application/json", flow.to_string())
            .await;
        assert_eq!(status, 201, "{body}");
        body["run_id"].as_str().expect("run id").to_owned()
    }

    /// Polls the run until `done` holds of its status.
    pub async fn wait_status(&self, run_id: &str, done: impl Fn(&str) -> bool) -> Value {
        for _ in 0..600 {
            let (_, view) = self.get(&format!("/runs/{run_id}")).await;
            if view["status"].as_str().is_some_and(&done) {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("run {run_id} never reached the status wanted");
    }
}

pub fn searching_flow() -> Value {
    json!({
        "name": "searching", "task": "search five times", "max_steps": 8,
        "tools": [{"name": "local"}]
    })
}

/// An engine whose run calls `tool` (not idempotent), which hangs until
/// the evaluator answers `verdict` after a 100 ms lease; the model then
/// answers `answer`.
pub async fn hanging_tool_engine(
    tool: &'static str,
    verdict: &str,
    answer: &str,
) -> (Engine, ScriptedModel) {
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([(tool, json!({"service": "checkout"}))]),
            Turn::answer(answer),
        ],
    );
    let tools = ScriptedTools::new().tool(tool, Some(false), [ToolAct::Hang]);
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_millis(100);
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model.clone()))
        .evaluator(Arc::new(ScriptedEvaluator::always(verdict)))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine");
    (engine, model)
}

/// A served run whose non-idempotent `charge` hung and was intervened:
/// it waits in `reconciliation_required`. The server, the model, the run
/// and the key of the call in question.
pub async fn a_charge_waiting_for_a_decision() -> (Server, ScriptedModel, String, String) {
    let (engine, model) = hanging_tool_engine("charge", "INTERVENE", "charged once").await;
    let server = Server::start(engine, ServerOptions::default()).await;
    let run_id = server.start_run(&searching_flow()).await;
    let view = server
        .wait_status(&run_id, |s| s == "reconciliation_required")
        .await;
    let key = view["pause"]["call"]["key"]
        .as_str()
        .expect("the call in question")
        .to_owned();
    (server, model, run_id, key)
}
