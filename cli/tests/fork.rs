//! `leasehold runs fork` against real peers in another language: a Python
//! OpenAI-compatible model that logs every request, and a Python MCP server
//! (stdio) that records every call by its idempotency key. A run charges
//! (a tool that is not idempotent), then answers; a fork after the charge,
//! with guidance, completes without charging again and its model request
//! carries the guidance; a fork before the charge charges once more, with a
//! key of its own; over `serve`, `POST /runs/{id}/fork` does the same.

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

use std::path::Path;
use std::process::Stdio;

use leasehold::Event;
use serde_json::{Value, json};
use support::PATIENCE;
use support::PythonPeer;
use tokio::process::Command;

/// The model: it asks for `charge` until its conversation holds a tool
/// result, then answers with the last thing a user said. Every request is
/// appended, as one JSON line, to the file named by its first argument,
/// with its `traceparent` header as `_traceparent`.
const MODEL: &str = r#"
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = sys.argv[1]

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        with open(log, "a") as f:
            f.write(json.dumps(dict(body, _traceparent=self.headers.get("traceparent"))) + "\n")
        messages = body.get("messages", [])
        if any(m.get("role") == "tool" for m in messages):
            said = [m.get("content") for m in messages if m.get("role") == "user"][-1]
            message = {"role": "assistant", "content": "settled; last said: " + said}
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "charge", "arguments": json.dumps({"order": "7"})}}]}
        answer = {"id": "x", "object": "chat.completion",
                  "choices": [{"index": 0, "message": message,
                               "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                  "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// The MCP server: `support/ledger_mcp.py`.
const TOOLS: &str = support::LEDGER_MCP_SERVER;

struct Peers {
    model: PythonPeer,
    requests: std::path::PathBuf,
    ledger: std::path::PathBuf,
    flow: std::path::PathBuf,
    data: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Peers {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let requests = dir.path().join("requests.jsonl");
        let ledger = dir.path().join("ledger.jsonl");
        let tools = dir.path().join("ledger_mcp.py");
        std::fs::write(&tools, TOOLS).expect("write the tool server");
        let model = PythonPeer::start(MODEL, &[requests.to_str().expect("a path")]);
        let flow = dir.path().join("orders.json");
        let text = json!({
            "name": "orders",
            "task": "Settle order 7.",
            "max_steps": 6,
            "stream": false,
            "tools": [{
                "name": "ledger",
                "command": ["python3", tools.to_str().expect("a path"), ledger.to_str().expect("a path")],
            }],
        });
        std::fs::write(&flow, text.to_string()).expect("write the flow");
        Self {
            model,
            requests,
            ledger,
            flow,
            data: dir.path().join("data"),
            _dir: dir,
        }
    }

    fn leasehold(&self) -> support::Leasehold {
        support::leasehold(&self.data).model(&self.model.base, "ledger-model")
    }

    /// The (tool, key) of every call the tool server received, in order.
    fn calls(&self) -> Vec<(String, String)> {
        lines(&self.ledger)
            .into_iter()
            .map(|v| (text(&v["tool"]), text(&v["key"])))
            .collect()
    }

    /// Every request the model received, in order.
    fn requests(&self) -> Vec<Value> {
        lines(&self.requests)
    }
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// Runs `command`, expecting exit 0; its JSON events.
async fn events(command: &mut Command) -> Vec<Event> {
    let run = command
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output();
    let out = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("ends in time")
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn user_messages(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .map(|m| text(&m["content"]))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_after_a_tool_never_sends_it_again_and_one_before_sends_it_with_its_own_key() {
    let peers = Peers::start();
    let run = events(peers.leasehold().arg("run").arg(&peers.flow).arg("--json")).await;
    let parent = run[0].run_id.clone();
    assert_eq!(run.last().map(|e| e.kind.name()), Some("run_completed"));
    assert_eq!(
        peers.calls(),
        [("charge".to_owned(), format!("{parent}/run/1/0"))]
    );
    // Each model request and the tool call carry their place in the run's
    // trace (W3C trace context: a header, and `_meta` over MCP).
    let trace = leasehold::trace_id_of(&parent);
    let traced = |traceparent: &Value| {
        let parsed = leasehold::TraceParent::parse(traceparent.as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {traceparent}"));
        assert_eq!(parsed.trace_id, trace);
        parsed.span_id
    };
    let spans: Vec<String> = peers
        .requests()
        .iter()
        .map(|r| traced(&r["_traceparent"]))
        .chain(
            lines(&peers.ledger)
                .iter()
                .map(|c| traced(&c["traceparent"])),
        )
        .collect();
    let distinct: std::collections::BTreeSet<&String> = spans.iter().collect();
    assert_eq!(distinct.len(), spans.len(), "one span each: {spans:?}");
    let requests_before = peers.requests().len();

    // After the charge, with guidance: the charge is replayed, not sent.
    let guidance = "Answer in French.";
    let after = events(peers.leasehold().args([
        "runs",
        "fork",
        &parent,
        "--at",
        "2",
        "--guidance",
        guidance,
        "--json",
    ]))
    .await;
    let fork = after[0].run_id.clone();
    assert_ne!(fork, parent);
    assert_eq!(after[0].kind.name(), "run_forked", "{:?}", after[0]);
    assert!(
        after.iter().any(|e| e.kind.name() == "tool_call_replayed"),
        "{after:?}"
    );
    assert_eq!(after.last().map(|e| e.kind.name()), Some("run_completed"));
    assert_eq!(peers.calls().len(), 1, "the tool server saw the call once");
    let requests = peers.requests();
    assert_eq!(requests.len(), requests_before + 1, "one model step");
    let users = user_messages(&requests[requests_before]);
    assert_eq!(
        users.last().map(String::as_str),
        Some(guidance),
        "{users:?}"
    );
    assert!(
        requests[requests_before]["messages"]
            .as_array()
            .is_some_and(|m| m
                .iter()
                .any(|m| m["role"] == "tool" && m["content"] == "charged order 7")),
        "the parent's result is in the fork's conversation"
    );

    // Its lineage is stored and shown; the parent is left as it was.
    let show = peers
        .leasehold()
        .args(["runs", "show", &fork])
        .output()
        .await
        .expect("runs show");
    assert!(show.status.success());
    let view: Value = serde_json::from_slice(&show.stdout).expect("JSON");
    assert_eq!(view["fork"]["parent"], &*parent);
    assert_eq!(view["fork"]["step"], 2);
    assert_eq!(view["fork"]["guidance"], guidance);
    assert_eq!(view["status"], "completed");
    assert_eq!(view["tool_calls"][0]["made_by"], &*parent);

    // Before the charge: it is sent once more, with the fork's own key.
    let before = events(
        peers
            .leasehold()
            .args(["runs", "fork", &parent, "--at", "1", "--json"]),
    )
    .await;
    let second = before[0].run_id.clone();
    assert_eq!(before.last().map(|e| e.kind.name()), Some("run_completed"));
    assert_eq!(
        peers.calls(),
        [
            ("charge".to_owned(), format!("{parent}/run/1/0")),
            ("charge".to_owned(), format!("{second}/run/1/0")),
        ]
    );

    // A step that is no boundary of the run is refused, naming its loops.
    let refused = peers
        .leasehold()
        .args(["runs", "fork", &parent, "--at", "9"])
        .output()
        .await
        .expect("runs fork");
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("`run` (steps 1 to 2)"), "{stderr}");
    // A flow `leasehold run` would refuse, or more changes than a fork may
    // make, are refused before anything is recorded, naming why.
    let many: Vec<&str> = ["--change", "max_steps=3"].repeat(65);
    for (set, says) in [
        (vec!["--change", r#"notify=["nope"]"#], "notify[0]"),
        (many, "the 64 a fork may make"),
    ] {
        let refused = peers
            .leasehold()
            .args(["runs", "fork", &parent, "--at", "2"])
            .args(set)
            .output()
            .await
            .expect("runs fork");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
    let listed = peers
        .leasehold()
        .args(["runs", "list"])
        .output()
        .await
        .expect("runs list");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.matches("run-").count(), 3, "nothing more: {listed}");
    assert_eq!(peers.calls().len(), 2);
}

/// The API token: a posted flow may name its tool server's command only
/// with one, and `--allow-flow-tools`.
const TOKEN: &str = "fork-test-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_forks_a_run_over_the_api_and_runs_fork_reaches_it_with_server() {
    let peers = Peers::start();
    let command = peers.leasehold().api_token(TOKEN);
    let (mut serve, base) = support::serve(command, &["--allow-flow-tools"], PATIENCE).await;
    let http = support::authorized(TOKEN);
    let flow: Value =
        serde_json::from_str(&std::fs::read_to_string(&peers.flow).expect("the flow"))
            .expect("JSON");
    let parent = support::post_run(&http, &base, &flow).await;
    let done = |v: &Value| v["status"] == "completed";
    support::view_until(&http, &base, &parent, PATIENCE, "completed", done).await;

    // Refused, naming what is wrong; nothing is made.
    for (body, status, says) in [
        (
            json!({"at": "2", "set": [r#"tools=[{"name":"x","command":["sh"]}]"#]}),
            422,
            "tool servers",
        ),
        (json!({"at": "second"}), 422, "is not a step"),
        (json!({"at": "7"}), 422, "`run` (steps 1 to 2)"),
        (json!({"at": "2", "extra": 1}), 400, "unknown field"),
    ] {
        let response = http
            .post(format!("{base}/runs/{parent}/fork"))
            .json(&body)
            .send()
            .await
            .expect("POST fork");
        let got = response.status().as_u16();
        let text = response.text().await.expect("a body");
        assert_eq!(got, status, "{body}: {text}");
        assert!(text.contains(says), "{body}: {text}");
    }
    let unknown = http
        .post(format!("{base}/runs/run-none/fork"))
        .json(&json!({"at": "1"}))
        .send()
        .await
        .expect("POST fork");
    assert_eq!(unknown.status().as_u16(), 404);

    let created: Value = http
        .post(format!("{base}/runs/{parent}/fork"))
        .json(&json!({"at": "2", "guidance": "Answer in French.", "set": ["leases.tool_call=40s"]}))
        .send()
        .await
        .expect("POST fork")
        .json()
        .await
        .expect("JSON");
    let fork = text(&created["run_id"]);
    assert_eq!(created["fork"]["parent"], parent.as_str(), "{created}");
    let view = support::view_until(&http, &base, &fork, PATIENCE, "completed", done).await;
    assert_eq!(view["fork"]["changes"][0], "leases.tool_call=40s");
    assert_eq!(view["flow"]["leases"]["tool_call"], "40s");
    assert!(
        text(&view["answer"]).ends_with("Answer in French."),
        "{view}"
    );
    assert_eq!(peers.calls().len(), 1, "the tool server saw the call once");

    // From the command line, through the server: followed to its end.
    let out = peers
        .leasehold()
        .args([
            "runs", "fork", &parent, "--at", "1", "--json", "--server", &base,
        ])
        .env("LEASEHOLD_API_TOKEN", TOKEN)
        .output();
    let out = tokio::time::timeout(PATIENCE, out)
        .await
        .expect("ends in time")
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("forked from"), "{stderr}");
    let calls = peers.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(
        !calls[1].1.starts_with(&parent),
        "a key of the fork's own: {calls:?}"
    );
    let _ = serve.start_kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_one_executor_is_forked_by_another_sharing_postgresql() {
    let (_cluster, store) = postgres::database().await;
    let peers = Peers::start();
    let serving = || {
        peers
            .leasehold()
            .with_env("LEASEHOLD_STORE", &store)
            .api_token(TOKEN)
    };
    let (mut a, a_base) = support::serve(serving(), &["--allow-flow-tools"], PATIENCE).await;
    let (mut b, b_base) = support::serve(serving(), &["--allow-flow-tools"], PATIENCE).await;
    let http = support::authorized(TOKEN);
    let flow: Value =
        serde_json::from_str(&std::fs::read_to_string(&peers.flow).expect("the flow"))
            .expect("JSON");
    let done = |v: &Value| v["status"] == "completed";

    // Run on A; forked on B, after its charge, from PostgreSQL.
    let parent = support::post_run(&http, &a_base, &flow).await;
    let view = support::view_until(&http, &a_base, &parent, PATIENCE, "completed", done).await;
    let a_owner = text(&view["owner_id"]);
    let created: Value = http
        .post(format!("{b_base}/runs/{parent}/fork"))
        .json(&json!({"at": "2", "guidance": "Answer in French."}))
        .send()
        .await
        .expect("POST fork")
        .json()
        .await
        .expect("JSON");
    let fork = text(&created["run_id"]);
    assert!(!fork.is_empty(), "{created}");
    let view = support::view_until(&http, &b_base, &fork, PATIENCE, "completed", done).await;
    assert_ne!(text(&view["owner_id"]), a_owner, "run by B: {view}");
    assert!(
        text(&view["answer"]).ends_with("Answer in French."),
        "{view}"
    );
    assert_eq!(view["fork"]["parent"], parent.as_str());
    assert_eq!(view["tool_calls"][0]["made_by"], parent.as_str());
    assert_eq!(peers.calls().len(), 1, "the tool server saw the call once");
    // A reads the fork, with its lineage, from the same store.
    let seen_on_a = support::get_run(&http, &a_base, &fork).await;
    assert_eq!(seen_on_a["fork"]["parent"], parent.as_str());
    let _ = a.start_kill();
    let _ = b.start_kill();
}

/// The fork's events as the store keeps them, in order: their kinds.
async fn logged_kinds(db: &tokio_postgres::Client, run_id: &str) -> Vec<String> {
    db.query(
        "SELECT event FROM events WHERE run_id = $1 ORDER BY seq",
        &[&run_id],
    )
    .await
    .expect("the events")
    .iter()
    .map(|row| text(&row.get::<_, Value>(0)["kind"]))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_whose_copy_was_cut_by_sigkill_is_resumed_with_its_lineage_logged_once() {
    let (_cluster, store) = postgres::database().await;
    let peers = Peers::start();
    let serving = || {
        peers
            .leasehold()
            .with_env("LEASEHOLD_STORE", &store)
            .with_env("LEASEHOLD_RUN_LEASE_TTL", "2s")
            .with_env("LEASEHOLD_RESUME_ON_BOOT", "true")
            .with_env("LEASEHOLD_EXECUTOR_CLAIM_INTERVAL", "200ms")
            .api_token(TOKEN)
    };
    let (mut a, a_base) = support::serve(serving(), &["--allow-flow-tools"], PATIENCE).await;
    let http = support::authorized(TOKEN);
    let flow: Value =
        serde_json::from_str(&std::fs::read_to_string(&peers.flow).expect("the flow"))
            .expect("JSON");
    let done = |v: &Value| v["status"] == "completed";
    let parent = support::post_run(&http, &a_base, &flow).await;
    support::view_until(&http, &a_base, &parent, PATIENCE, "completed", done).await;

    // The fork's copy stops at its snapshots: a transaction holds their
    // table, so A has written the fork's record and its parent's call and
    // waits there when it is killed.
    let (db, connection) = tokio_postgres::connect(&store, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    db.batch_execute("BEGIN; LOCK TABLE snapshots IN EXCLUSIVE MODE")
        .await
        .expect("the lock");
    let forking = tokio::spawn({
        let (http, url) = (http.clone(), format!("{a_base}/runs/{parent}/fork"));
        async move {
            http.post(url)
                .json(&json!({"at": "2", "guidance": "Answer in French."}))
                .send()
                .await
        }
    });
    let fork = support::until("the fork's copy to begin", PATIENCE, || async {
        let row = db
            .query_opt(
                "SELECT r.run_id FROM runs r JOIN tool_calls c ON c.run_id = r.run_id \
                 WHERE r.run_id <> $1",
                &[&parent],
            )
            .await
            .expect("the runs");
        row.map(|row| row.get::<_, String>(0))
    })
    .await;
    support::signal(&a, "-KILL");
    let _ = a.wait().await;
    db.batch_execute("ROLLBACK").await.expect("the lock let go");
    assert!(forking.await.expect("joined").is_err(), "A died answering");
    assert!(
        logged_kinds(&db, &fork).await.is_empty(),
        "the fork never started: {fork}"
    );

    // B takes it on once A's lease has ended: its copy made whole and its
    // lineage logged, once, before its first step.
    let (mut b, b_base) = support::serve(serving(), &["--allow-flow-tools"], PATIENCE).await;
    let view = support::view_until(&http, &b_base, &fork, PATIENCE, "completed", done).await;
    assert_eq!(view["fork"]["parent"], parent.as_str(), "{view}");
    assert!(
        text(&view["answer"]).ends_with("Answer in French."),
        "{view}"
    );
    let kinds = logged_kinds(&db, &fork).await;
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("run_forked"),
        "{kinds:?}"
    );
    assert_eq!(count("run_forked"), 1, "{kinds:?}");
    assert_eq!(count("tool_call_replayed"), 1, "{kinds:?}");
    assert_eq!(peers.calls().len(), 1, "the tool server saw the call once");
    let _ = b.start_kill();
}
