//! Runs over MCP, through a real `leasehold serve` and a real MCP client in
//! another language: the Python MCP SDK (`mcp` on PyPI,
//! `LEASEHOLD_PEER_MCP_PYTHON` from `scripts/peers.sh`) runs
//! `mcp_client/runs_over_mcp.py` against the server's `/mcp` with its
//! streamable-HTTP client.
//!
//! The model and the tool server are the embedded demo's: its run spawns
//! three workers, one of which escalates and pauses the run for a person.
//! The script starts a run, follows its events until it pauses, answers the
//! pause and follows it until it completes; steers and cancels another run;
//! gives the tools bad arguments; and checks keys: another tenant's finds
//! neither run, a read key starts nothing, a bad key is refused before
//! MCP. This test reads the runs back over HTTP.

mod support;

use std::process::Stdio;

use leasehold_cli::demo::DemoStack;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::process::Command;

use support::PATIENCE;

/// The operator's token (a posted flow may name its tool server only with
/// one).
const TOKEN: &str = "mcp-server-test-token";

/// `POST /keys` as the operator: the new key's secret.
async fn make_key(base: &str, tenant: &str, scope: &str) -> String {
    let response = support::authorized(TOKEN)
        .post(format!("{base}/keys"))
        .json(&json!({"tenant": tenant, "scope": scope, "name": "the MCP test"}))
        .send()
        .await
        .expect("POST /keys");
    assert_eq!(response.status(), StatusCode::CREATED);
    let made: Value = response.json().await.expect("JSON");
    made["secret"].as_str().expect("a secret").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_started_followed_answered_steered_and_cancelled_over_mcp() {
    let python = std::env::var("LEASEHOLD_PEER_MCP_PYTHON")
        .expect("LEASEHOLD_PEER_MCP_PYTHON names a Python with the MCP SDK (scripts/peers.sh)");
    let stack = DemoStack::start().await.expect("the demo servers");
    let dir = tempfile::tempdir().expect("dir");
    let command = support::leasehold(&dir.path().join("data"))
        .demo_model(&stack)
        .api_token(TOKEN);
    let mut server = support::start_serve(command, "127.0.0.1:0", &["--allow-flow-tools"]);
    let base = support::served_base(&mut server, PATIENCE).await;
    let key = make_key(&base, "acme", "operate").await;
    let read_key = make_key(&base, "acme", "read").await;
    let other_key = make_key(&base, "bravo", "operate").await;
    let flow = dir.path().join("flow.json");
    std::fs::write(
        &flow,
        serde_json::to_string(&stack.flow()).expect("the flow as JSON"),
    )
    .expect("the flow");

    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/mcp_client/runs_over_mcp.py"
    );
    let mut client = Command::new(python);
    client
        .arg(script)
        .env("MCP_URL", format!("{base}/mcp"))
        .env("MCP_KEY", &key)
        .env("MCP_READ_KEY", &read_key)
        .env("MCP_OTHER_KEY", &other_key)
        .env("MCP_FLOW", &flow)
        .stdin(Stdio::null());
    let out = support::output(&mut client).await;
    assert_eq!(
        out.code,
        Some(0),
        "the MCP client's checks failed\nstdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    let result: Value = out
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("RESULT "))
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_else(|| panic!("no RESULT line: {}", out.stdout));

    // Over HTTP: the first run completed with the guidance given over MCP,
    // the second was steered and cancelled, both of tenant acme.
    let http = support::authorized(&key);
    let paused = result["paused_run"].as_str().expect("the first run");
    let view = support::get_run(&http, &base, paused).await;
    assert_eq!(view["status"], "completed", "{view}");
    let trace = support::get_json(&http, &format!("{base}/runs/{paused}/trace")).await;
    assert!(
        trace.to_string().contains("Answered over MCP."),
        "the guidance is in the trace: {trace}"
    );
    let cancelled = result["cancelled_run"].as_str().expect("the second run");
    let view = support::get_run(&http, &base, cancelled).await;
    assert_eq!(view["status"], "cancelled", "{view}");
    assert_eq!(view["reason"], "cancelled over MCP", "{view}");
    let trace = support::get_json(&http, &format!("{base}/runs/{cancelled}/trace")).await;
    assert!(
        trace.to_string().contains("Steered over MCP."),
        "the message is in the trace: {trace}"
    );
    // Nothing refused started a run: the tenant has the two runs started.
    let page = support::get_json(&http, &format!("{base}/runs")).await;
    let mut listed: Vec<&str> = page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|run| run["run_id"].as_str())
        .collect();
    listed.sort_unstable();
    let mut started = vec![paused, cancelled];
    started.sort_unstable();
    assert_eq!(listed, started, "{page}");
    // The other tenant's key reaches neither over HTTP either.
    let response = support::authorized(&other_key)
        .get(format!("{base}/runs/{paused}"))
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let _ = server.kill().await;
}
