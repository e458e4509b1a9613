//! A real endpoint's ordinary failures are not a run's end: real
//! `leasehold run` processes against a real OpenAI-compatible server in
//! Python (`runtime/tests/support/openai_peer.py`, a child process).
//!
//! - A server whose usage says `null`, `0` or `null` tokens has its tokens
//!   counted from the text, as one that sends no usage at all: a run with
//!   `budget.max_tokens` pauses for a person (exit 3) after as many calls
//!   in every case, where a usage of zero taken at its word would never
//!   reach the budget.
//! - A server that refuses a request longer than its context window, with
//!   llama.cpp's exact error or OpenAI's `context_length_exceeded`, has the
//!   oldest tool results of the transcript shortened and the call made
//!   again, and the run completes; a request that cannot fit pauses the run
//!   for a person (exit 3) with a reason naming the overflow and its sizes.

mod support;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use support::PATIENCE;
use support::PythonPeer;
use support::hanging_tool::python;

const PEER: &str = include_str!("../../runtime/tests/support/openai_peer.py");

/// An MCP server over stdio in Python with one tool, `read_page`, whose
/// every result is 3 000 characters.
const PAGES_SERVER: &str = r#"
import json, sys

for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        continue
    params = request.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                  "capabilities": {"tools": {}},
                  "serverInfo": {"name": "pages", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "read_page", "description": "Read one page.",
                             "inputSchema": {"type": "object",
                                             "properties": {"page": {"type": "integer"}}},
                             "annotations": {"readOnlyHint": True, "idempotentHint": True}}]}
    elif method == "tools/call":
        page = (params.get("arguments") or {}).get("page", 0)
        text = (f"page {page}: " + "lorem ipsum dolor sit amet " * 200)[:3000]
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
    sys.stdout.flush()
"#;

/// What a `leasehold run --json` said, and what the model server saw.
struct Ran {
    code: Option<i32>,
    events: Vec<Value>,
    /// The model server's log: one entry per request.
    requests: Vec<Value>,
    stderr: String,
}

impl Ran {
    fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["kind"] == kind).collect()
    }

    /// The requests of the run's loop (not the evaluator's).
    fn loop_requests(&self) -> Vec<&Value> {
        self.requests
            .iter()
            .filter(|r| r["evaluator"] == false)
            .collect()
    }
}

/// `leasehold run FLOW --json` (the flow `flow` written into `dir`) against
/// the peer started with `peer_args` (and `--log`), within [`PATIENCE`].
async fn run(dir: &Path, flow: &Value, peer_args: &[&str]) -> Ran {
    let log = dir.join("requests.jsonl");
    let mut args = peer_args.to_vec();
    let log_arg = log.display().to_string();
    args.extend(["--log", &log_arg]);
    let peer = PythonPeer::start(PEER, &args);
    let path = dir.join("flow.json");
    std::fs::write(&path, flow.to_string()).expect("write the flow");
    let mut command = support::leasehold(&dir.join("data")).model(&peer.base, "peer");
    command.arg("run").arg(&path).arg("--json");
    let out = support::output_within(&mut command, PATIENCE).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let requests = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a logged request"))
        .collect();
    Ran {
        code: out.status.code(),
        events,
        requests,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A flow whose every answer is cut off at the length limit (so the loop
/// goes on), under a budget of 600 tokens and 30 steps.
fn spending_flow() -> Value {
    json!({
        "name": "spender",
        "task": "Write at length.",
        "max_steps": 30,
        "stream": true,
        "budget": {"max_tokens": 600},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_of_null_or_zero_tokens_is_counted_and_the_run_pauses_at_its_token_budget() {
    let mut calls = Vec::new();
    for usage in ["absent", "null", "zero", "null-fields"] {
        let dir = tempfile::tempdir().expect("dir");
        let ran = run(
            dir.path(),
            &spending_flow(),
            &["--usage", usage, "--cut-off"],
        )
        .await;
        assert_eq!(
            ran.code,
            Some(3),
            "usage {usage}: the run pauses for a person: {}",
            ran.stderr
        );
        let paused = ran.of_kind("paused");
        assert_eq!(paused.len(), 1, "usage {usage}");
        let reason = paused[0]["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("spending budget is reached"),
            "usage {usage}: {reason}"
        );
        let finished = ran.of_kind("model_call_finished");
        assert!(
            finished.iter().all(|e| e["usage"]["counted"] == true),
            "usage {usage}: every call's tokens counted: {finished:?}"
        );
        let spent: u64 = finished
            .iter()
            .map(|e| {
                e["usage"]["input_tokens"].as_u64().unwrap()
                    + e["usage"]["output_tokens"].as_u64().unwrap()
            })
            .sum();
        assert!(spent >= 600, "usage {usage}: {spent} tokens spent");
        calls.push((usage, ran.loop_requests().len()));
    }
    // As many calls as with no usage block, far fewer than the steps.
    let (_, absent) = calls[0];
    assert!((2..30).contains(&absent), "{calls:?}");
    assert!(calls.iter().all(|(_, n)| *n == absent), "{calls:?}");
}

/// The pages server written into `dir`, and a flow on it whose model reads
/// three pages before it answers.
fn reading_flow(dir: &Path, task: &str) -> Value {
    let script: PathBuf = dir.join("pages.py");
    std::fs::write(&script, PAGES_SERVER).expect("write the server");
    json!({
        "name": "reader",
        "task": task,
        "max_steps": 10,
        "stream": true,
        "tools": [{
            "name": "pages",
            "command": [python(), script.display().to_string()],
            "idempotent": {"read_page": true},
        }],
    })
}

const NOTE: &str = "more characters of this tool result were cut so that the conversation fits \
                    the model's context window";

/// Against a server of a 2 000-token context whose refusals are `overflow`'s:
/// the fourth request (three pages, 2 258 tokens) is refused, and the
/// fifth, its oldest page shortened, answers.
async fn completes_after_shortening(overflow: &str) {
    let dir = tempfile::tempdir().expect("dir");
    let flow = reading_flow(dir.path(), "Read three pages, then sum them up.");
    let ran = run(
        dir.path(),
        &flow,
        &["--context", "2000", "--overflow", overflow, "--reads", "3"],
    )
    .await;
    assert_eq!(ran.code, Some(0), "{overflow}: {}", ran.stderr);
    let completed = ran.of_kind("run_completed");
    assert_eq!(
        completed[0]["answer"], "done after 3 tool results",
        "{overflow}"
    );
    let seen = ran.of_kind("context_overflow");
    assert_eq!(seen.len(), 1, "{overflow}: {seen:?}");
    assert_eq!(seen[0]["action"], "shortened", "{}", seen[0]);
    assert_eq!(seen[0]["context_tokens"], 2000, "{}", seen[0]);
    assert_eq!(seen[0]["requested_tokens"], 2258, "{}", seen[0]);
    assert_eq!(seen[0]["shortened"], 1, "{}", seen[0]);
    assert!(
        ran.of_kind("restarted").is_empty(),
        "{overflow}: no restart"
    );
    assert!(ran.of_kind("paused").is_empty(), "{overflow}: no pause");

    let requests = ran.loop_requests();
    let refused: Vec<_> = requests.iter().filter(|r| r["refused"] == true).collect();
    assert_eq!(refused.len(), 1, "{overflow}: {requests:?}");
    let last = requests.last().expect("requests");
    assert_eq!(last["refused"], false);
    let results: Vec<&str> = last["tool_results"]
        .as_array()
        .expect("tool results")
        .iter()
        .map(|r| r.as_str().unwrap_or_default())
        .collect();
    assert_eq!(results.len(), 3);
    assert!(
        results[0].starts_with("page 0: lorem") && results[0].contains(NOTE),
        "{overflow}: the oldest page is cut to a head and a note: {}",
        results[0]
    );
    assert_eq!(results[2].chars().count(), 3000, "the newest page is whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_request_outgrows_llama_cpps_context_completes_after_shortening() {
    completes_after_shortening("llama").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_request_outgrows_openais_context_completes_after_shortening() {
    completes_after_shortening("openai").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_cannot_fit_the_context_pauses_the_run_for_a_person_with_the_reason() {
    let dir = tempfile::tempdir().expect("dir");
    // 12 000 characters: 3 000 tokens by the server's count, and no tool
    // result to shorten.
    let task = "Sum up this text. ".repeat(667);
    let flow = reading_flow(dir.path(), &task);
    let ran = run(dir.path(), &flow, &["--context", "2000", "--reads", "3"]).await;
    assert_eq!(ran.code, Some(3), "{}", ran.stderr);
    let seen = ran.of_kind("context_overflow");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["action"], "paused", "{}", seen[0]);
    let paused = ran.of_kind("paused");
    assert_eq!(paused.len(), 1);
    let reason = paused[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(
            "does not fit the model's context window (3001 tokens against a window of 2000)"
        ) && reason.contains("no tool result is left to shorten")
            && reason
                .contains("request (3001 tokens) exceeds the available context size (2000 tokens)"),
        "{reason}"
    );
    assert!(ran.of_kind("run_failed").is_empty());
}
