//! `POST /runs/{id}/fork` over a real socket, held to what `POST /runs`
//! is held to: a fork's changes are bounded as a whole, the flow they make
//! passes the same check as a posted flow (its size, its receivers), and a
//! step after a model call that never returned is no fork point. Nothing
//! refused is recorded.
//!
//! On the real clock (the API is served over loopback), waiting on
//! conditions, never for time to pass.

mod support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::testing::{ScriptedModel, ScriptedTools, ToolAct, Turn};
use leasehold::{Engine, MemoryStore};
use leasehold_server::ServerOptions;
use serde_json::{Value, json};
use support::PATIENCE;
use support::client::Server;

/// A run that charges, then answers: `(model, tools)`.
fn charging() -> (ScriptedModel, ScriptedTools) {
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("charge", json!({"order": 7}))]),
            Turn::answer("charged"),
            Turn::answer("again"),
        ],
    );
    let tools = ScriptedTools::new().tool(
        "charge",
        Some(false),
        [ToolAct::returns("charged 7", Duration::from_millis(10))],
    );
    (model, tools)
}

async fn engine(model: &ScriptedModel, tools: &ScriptedTools) -> Engine {
    Engine::builder()
        .model(Arc::new(model.clone()))
        .store(Arc::new(MemoryStore::new()))
        .tool_server("local", Arc::new(tools.clone()))
        .build()
        .await
        .expect("engine")
}

fn flow() -> Value {
    json!({
        "name": "orders", "task": "Settle order 7.", "max_steps": 6,
        "tools": [{"name": "local"}]
    })
}

/// A served run that charged and answered.
async fn completed_parent(options: ServerOptions) -> (Server, String) {
    let (model, tools) = charging();
    let server = Server::start(engine(&model, &tools).await, options).await;
    let parent = server.start_run(&flow()).await;
    server.wait_status(&parent, |s| s == "completed").await;
    (server, parent)
}

/// `POST /runs/{parent}/fork` with `body`.
async fn fork(server: &Server, parent: &str, body: &Value) -> (u16, Value) {
    server
        .post(
            &format!("/runs/{parent}/fork"),
            "application/json",
            body.to_string(),
        )
        .await
}

/// How many runs the server lists.
async fn runs(server: &Server) -> usize {
    let (_, page) = server.get("/runs?limit=100").await;
    page["runs"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forks_changes_are_bounded_as_a_whole_and_nothing_is_made() {
    let (server, parent) = completed_parent(ServerOptions::default()).await;

    // 60 000 changes of a few bytes each (an 840 KB list): each within a
    // person's text, the list far past what a fork may make.
    let many = vec!["max_steps=3"; 60_000];
    let (status, body) = fork(&server, &parent, &json!({"at": "2", "set": many})).await;
    let said = body.to_string();
    let head: String = said.chars().take(400).collect();
    assert_eq!(status, 422, "{head}");
    assert_eq!(body["error"]["code"], "invalid_fork", "{head}");
    assert!(
        said.contains("60000 changes") && said.contains("the 64 a fork may make"),
        "{head}"
    );

    // A few changes whose bytes add up past limits.guidance (64 KiB).
    let long = format!("system_prompt={}", "p".repeat(30_000));
    let (status, body) = fork(
        &server,
        &parent,
        &json!({"at": "2", "set": [long.clone(), long.clone(), long]}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    let said = body.to_string();
    assert!(said.contains("limits.guidance"), "{said}");

    assert_eq!(runs(&server).await, 1, "nothing was made");
    let (status, body) = fork(
        &server,
        &parent,
        &json!({"at": "2", "set": vec!["leases.tool_call=30s"; 3]}),
    )
    .await;
    assert_eq!(status, 201, "a few changes are a fork: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_whose_flow_a_post_would_refuse_is_refused_alike() {
    let mut options = ServerOptions::default();
    options.run_limits.flow = 4_096;
    let (server, parent) = completed_parent(options).await;

    // A `notify` naming no receiver of this configuration: 422, posted or
    // made by a fork's change.
    let mut posted = flow();
    posted["notify"] = json!(["nope"]);
    let (status, body) = server
        .post("/runs", "application/json", posted.to_string())
        .await;
    assert_eq!(status, 422, "{body}");
    let (status, forked) = fork(
        &server,
        &parent,
        &json!({"at": "2", "set": [r#"notify=["nope"]"#]}),
    )
    .await;
    assert_eq!(status, 422, "{forked}");
    assert_eq!(forked["error"]["code"], body["error"]["code"], "{forked}");
    assert!(forked.to_string().contains("notify[0]"), "{forked}");

    // A flow larger than limits.flow: 413, posted or forked.
    let prompt = "p".repeat(5_000);
    let mut posted = flow();
    posted["system_prompt"] = json!(prompt);
    let (status, body) = server
        .post("/runs", "application/json", posted.to_string())
        .await;
    assert_eq!(status, 413, "{body}");
    let (status, forked) = fork(
        &server,
        &parent,
        &json!({"at": "2", "set": [format!("system_prompt={prompt}")]}),
    )
    .await;
    assert_eq!(status, 413, "{forked}");
    assert!(forked.to_string().contains("limits.flow"), "{forked}");

    assert_eq!(runs(&server).await, 1, "nothing was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_after_a_model_call_that_never_returned_is_refused() {
    // Step 2's model call never returns; a person cancels the run.
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("charge", json!({"order": 7}))]),
            Turn::hang(),
            Turn::answer("charged"),
        ],
    );
    let (_, tools) = charging();
    let server = Server::start(engine(&model, &tools).await, ServerOptions::default()).await;
    let parent = server.start_run(&flow()).await;
    tokio::time::timeout(PATIENCE, async {
        while model.requests_of("run").len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("step 2's model call starts");
    let (status, body) = server
        .post(
            &format!("/runs/{parent}/cancel"),
            "application/json",
            json!({"reason": "hung"}).to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    server.wait_status(&parent, |s| s == "cancelled").await;

    let (status, body) = fork(&server, &parent, &json!({"at": "3"})).await;
    assert_eq!(status, 422, "{body}");
    let said = body.to_string();
    assert!(said.contains("never finished its step 2"), "{said}");
    assert_eq!(runs(&server).await, 1, "nothing was made");

    // Step 2 itself is a fork point: its model call is made anew.
    let (status, body) = fork(&server, &parent, &json!({"at": "2"})).await;
    assert_eq!(status, 201, "{body}");
}
