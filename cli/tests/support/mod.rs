//! What the tests of real `leasehold` processes share. Each test binary
//! uses a part of it.
#![allow(dead_code)]

pub mod gate;
pub mod hanging_tool;
#[path = "../../../runtime/tests/support/python.rs"]
mod python;

#[allow(unused_imports, reason = "each test binary uses part of the helper")]
pub use python::PythonPeer;

use std::time::Duration;

/// An MCP server in Python over stdio that records the idempotency key of
/// every call it receives (`ledger_mcp.py`): run it as
/// `python3 FILE LEDGER`, the script written to FILE.
pub const LEDGER_MCP_SERVER: &str = include_str!("ledger_mcp.py");

/// The `leasehold` binary with a clean environment (only `PATH`), no
/// stdin, killed when dropped.
pub fn clean_leasehold() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
}

/// [`clean_leasehold`] on the data directory `data`.
pub fn leasehold(data: &std::path::Path) -> tokio::process::Command {
    let mut command = clean_leasehold();
    command.env("LEASEHOLD_DATA_DIR", data);
    command
}

/// `leasehold serve` from `command` (see [`leasehold`]) on a free loopback
/// port with the flags `flags`, its log dropped; the process and its base
/// URL once it listens.
pub async fn serve(
    command: tokio::process::Command,
    flags: &[&str],
    patience: Duration,
) -> (Child, String) {
    serve_on(command, "127.0.0.1:0", flags, patience).await
}

/// [`serve`] on `addr` (a port given again after a restart).
pub async fn serve_on(
    mut command: tokio::process::Command,
    addr: &str,
    flags: &[&str],
    patience: Duration,
) -> (Child, String) {
    let mut server = command
        .args(["serve", "--addr", addr])
        .args(flags)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve starts");
    let base = served_base(&mut server, patience).await;
    (server, base)
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `command`'s output, once it ended within `patience`.
pub async fn output_within(
    command: &mut tokio::process::Command,
    patience: Duration,
) -> std::process::Output {
    tokio::time::timeout(patience, command.output())
        .await
        .expect("ends in time")
        .expect("runs")
}

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

/// The base URL `leasehold serve` prints on its first line (`leasehold
/// serving on http://ADDR/ …`), read from its piped stdout within
/// `patience`. The rest of its stdout is drained in the background.
pub async fn served_base(server: &mut Child, patience: Duration) -> String {
    let mut lines = BufReader::new(server.stdout.take().expect("serve's stdout is piped")).lines();
    let line = tokio::time::timeout(patience, lines.next_line())
        .await
        .expect("serve says where it listens")
        .expect("read")
        .expect("a line");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("a URL")
        .trim_end_matches('/')
        .to_owned()
}

/// `POST {base}/runs` of `flow` as JSON with `http`; the new run's id.
pub async fn post_run(http: &reqwest::Client, base: &str, flow: &impl serde::Serialize) -> String {
    let created: serde_json::Value = http
        .post(format!("{base}/runs"))
        .json(flow)
        .send()
        .await
        .expect("POST /runs")
        .json()
        .await
        .expect("JSON");
    created["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a run id: {created}"))
        .to_owned()
}

/// `GET {url}` with `http`, its answer as JSON.
pub async fn get_json(http: &reqwest::Client, url: &str) -> serde_json::Value {
    http.get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"))
}

/// `GET {base}/runs/{run_id}` with `http`, as JSON.
pub async fn get_run(http: &reqwest::Client, base: &str, run_id: &str) -> serde_json::Value {
    get_json(http, &format!("{base}/runs/{run_id}")).await
}

/// [`get_run`] until `done` holds on the view, within `patience`; `what`
/// names the awaited state for the failure message.
pub async fn view_until(
    http: &reqwest::Client,
    base: &str,
    run_id: &str,
    patience: Duration,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    tokio::time::timeout(patience, async {
        loop {
            let view = get_run(http, base, run_id).await;
            if done(&view) {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the run did not become {what} within {patience:?}"))
}

/// An HTTP client that sends `Authorization: Bearer {token}` with every
/// request.
pub fn authorized(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().expect("a header"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("an HTTP client")
}

/// The identity of the executor serving at `base`, as `GET /health` says
/// it to a client with the token.
pub async fn owner_id(http: &reqwest::Client, base: &str) -> String {
    let health: serde_json::Value = http
        .get(format!("{base}/health"))
        .send()
        .await
        .expect("GET /health")
        .json()
        .await
        .expect("JSON");
    health["owner_id"]
        .as_str()
        .unwrap_or_else(|| panic!("an identity: {health}"))
        .to_owned()
}

/// The JSON lines a peer wrote to `journal` so far (`agent_model.py`,
/// `recording_proxy.py`), a line it had not finished skipped.
pub fn journal(journal: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(journal)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Those of `journal`'s requests that were a judge's.
pub fn judge_requests(journal: &std::path::Path) -> Vec<serde_json::Value> {
    self::journal(journal)
        .into_iter()
        .filter(|entry| entry["judge"] == true)
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
