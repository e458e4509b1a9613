//! The peers the runs call: served in process (a model, an MCP server on
//! axum) or written in Python, what the Python ones leave behind, and the
//! flows the tests write for them.

/// `app` served on a loopback port for the rest of the test; its
/// `http://ADDR` (a model is at `/v1`, an MCP server at its route).
pub async fn serve_peer(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// An MCP server in Python over stdio that records the idempotency key of
/// every call it receives (`ledger_mcp.py`): run it as
/// `python3 FILE LEDGER`, the script written to FILE.
pub const LEDGER_MCP_SERVER: &str = include_str!("ledger_mcp.py");

/// The JSON lines a peer wrote to `journal` so far (`agent_model.py`,
/// `recording_proxy.py`), a line it had not finished skipped.
pub fn journal(journal: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(journal)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Those of `journal`'s requests that were a judge's: the requests
/// themselves, not the line that says one was cut (a judge's call the
/// runtime gave up, its answer no longer needed).
pub fn judge_requests(journal: &std::path::Path) -> Vec<serde_json::Value> {
    self::journal(journal)
        .into_iter()
        .filter(|entry| entry["judge"] == true && entry.get("cut").is_none())
        .collect()
}

/// `flow` written as `DIR/NAME.json`, its path.
pub fn write_flow(
    dir: &std::path::Path,
    name: &str,
    flow: &serde_json::Value,
) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, flow.to_string()).expect("write the flow");
    path
}
