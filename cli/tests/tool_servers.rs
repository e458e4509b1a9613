//! Tool servers start inside the run: a server that completes the MCP
//! handshake but never answers `tools/list` fails within the handshake
//! timeout, naming itself and the bound; `POST /runs` on a real `leasehold
//! serve` answers 201 before any tool server is asked, and the run then
//! fails with that reason in its events; a clean run of the demo prints no
//! `ERROR` (its tool client is closed before its tool server stops).

mod support;

use std::path::Path;
use std::time::Duration;

use leasehold::{ToolClient, ToolServer, tools::McpToolClient};
use serde_json::json;
use support::PATIENCE;

/// A stdio MCP server in Python that completes the handshake and then
/// reads every request without answering any: `tools/list` hangs.
const MUTE_STDIO: &str = r#"
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") != "initialize":
        continue
    result = {"protocolVersion": message["params"]["protocolVersion"],
              "capabilities": {"tools": {}},
              "serverInfo": {"name": "mute", "version": "1"}}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;

/// The mute server's command line, its script written into `dir`.
fn mute_command(dir: &Path) -> Vec<String> {
    let script = dir.join("mute.py");
    std::fs::write(&script, MUTE_STDIO).expect("the script is written");
    vec![
        "python3".to_owned(),
        "-u".to_owned(),
        script.display().to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_lists_its_tools_fails_within_the_handshake_timeout_naming_it() {
    let dir = tempfile::tempdir().expect("dir");
    let server: ToolServer =
        serde_json::from_value(json!({"name": "mute", "command": mute_command(dir.path())}))
            .expect("a tool server");
    let client = McpToolClient::for_server(&server)
        .expect("a valid server")
        // Long enough for Python to start on a loaded machine: the
        // handshake itself is bounded by the same timeout.
        .with_handshake_timeout(Duration::from_secs(3));
    client.connect().await.expect("the handshake completes");
    let error = tokio::time::timeout(PATIENCE, client.list_tools())
        .await
        .expect("tools/list ends; it does not hang")
        .expect_err("a server that never answers tools/list");
    for needle in ["'mute'", "`tools/list`", "3000 ms", "handshake timeout"] {
        assert!(error.message.contains(needle), "no {needle} in: {error}");
    }
    assert_eq!(client.server_pid(), None, "the mute server is stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_runs_answers_at_once_and_a_server_that_never_lists_its_tools_fails_the_run() {
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("leasehold.toml");
    let command = serde_json::to_string(&mute_command(dir.path())).expect("JSON");
    std::fs::write(
        &config,
        format!("[[tools]]\nname = \"mute\"\ncommand = {command}\n"),
    )
    .expect("the config is written");
    let command = support::leasehold(&dir.path().join("data"))
        .config(&config)
        .model("http://127.0.0.1:1/v1", "unused")
        // Long enough that an answer waiting for the listing would show.
        .with_env("LEASEHOLD_MCP_HANDSHAKE_TIMEOUT", "4s");
    let (mut serve, base) = support::serve(command, &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let flow = json!({"name": "mute", "task": "list", "max_steps": 2, "tools": [{"name": "mute"}]});

    let posted = tokio::time::Instant::now();
    let run_id = support::post_run(&http, &base, &flow).await;
    let answered = posted.elapsed();
    let view = support::get_run(&http, &base, &run_id).await;
    assert_eq!(
        view["status"], "running",
        "answered before the listing failed: {view}"
    );
    assert!(
        answered < Duration::from_secs(4),
        "answered after {answered:?}"
    );

    let view = support::view_until(&http, &base, &run_id, PATIENCE, "ended", |v| {
        v["status"] != "running"
    })
    .await;
    assert_eq!(view["status"], "failed", "{view}");
    let reason = view["reason"].as_str().unwrap_or_default();
    for needle in ["`mute`", "`tools/list`", "4000 ms"] {
        assert!(reason.contains(needle), "no {needle} in: {reason}");
    }
    let events = http
        .get(format!("{base}/runs/{run_id}/events"))
        .send()
        .await
        .expect("GET the events")
        .text()
        .await
        .expect("text");
    assert!(events.contains("run_failed"), "{events}");
    assert!(events.contains("tools/list"), "{events}");
    serve.start_kill().expect("stop serve");
    let _ = serve.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_demo_run_prints_no_error() {
    let dir = tempfile::tempdir().expect("dir");
    let out = support::finished(support::leasehold(dir.path()).arg("demo")).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(!stderr.contains("ERROR"), "{stderr}");
    assert!(!stdout.contains("ERROR"), "{stdout}");
}
