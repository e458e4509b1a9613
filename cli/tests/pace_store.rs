//! A model's learned pace is carried from run to run through the store,
//! between real `leasehold run` processes on one data directory, and a new
//! silence is judged against it before the lease period ends.
//!
//! The model is a small OpenAI-compatible server in Python (a child
//! process): its first three chat completions stream 40 tokens 50 ms apart
//! and end; every later one streams 5 tokens, then falls silent for good.
//! An evaluation (a request with `response_format`) is answered INTERVENE.
//!
//! The first three runs complete, and their model calls teach the store the
//! endpoint's pace (`leasehold paces` shows it): three runs, since no one
//! run sets the pace others are judged by. The fourth run, a new process,
//! starts from what the store kept: its call's silence after 50 ms chunks
//! is suspicious within seconds, and its lease — 60 s long — expires early,
//! recorded as such, long before the period ends.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod support;

use serde_json::{Value, json};
use support::PythonPeer;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Generous for a loaded 2-core machine, and far below the 60 s period.
const EARLY_WITHIN: Duration = Duration::from_secs(30);

const SERVER: &str = r#"
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

calls = {"n": 0}

def event(chunk):
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        if "response_format" in body:
            verdict = json.dumps({"verdict": "INTERVENE", "reason": "silent", "nudge": None})
            answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": verdict},
                                   "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        calls["n"] += 1
        first = calls["n"] <= 3
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        try:
            for n in range(40 if first else 5):
                self.wfile.write(event({"choices": [{"index": 0, "delta": {"content": f"w{n} "}}]}))
                self.wfile.flush()
                time.sleep(0.05)
            if first:
                self.wfile.write(event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                return
            while True:
                time.sleep(1)
        except (BrokenPipeError, ConnectionResetError):
            pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

fn write_flow(dir: &Path) -> std::path::PathBuf {
    let flow = json!({
        "name": "paced",
        "task": "Say something.",
        "max_steps": 2,
        "stream": true,
        "leases": {"model_stream": "60s"},
    });
    support::write_flow(dir, "paced", &flow)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_pace_learned_by_three_runs_judges_the_next_runs_silence_before_its_period_ends() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let model = PythonPeer::start(SERVER, &[]);
    let flow = write_flow(dir.path());
    let flow = flow.to_str().expect("a path");

    // The first three runs complete, and teach the store the endpoint's
    // pace.
    for n in 1..=3 {
        let taught = support::leasehold(&data)
            .model(&model.base, "paced")
            .args(["run", flow])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .await
            .expect("leasehold run");
        assert!(taught.success(), "run {n}: {taught}");
    }
    let paces = support::leasehold(&data)
        .model(&model.base, "paced")
        .args(["paces", "--json"])
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("leasehold paces");
    assert!(paces.status.success(), "{paces:?}");
    let paces: Value = serde_json::from_slice(&paces.stdout).expect("JSON");
    let (key, pace) = paces
        .as_object()
        .and_then(|all| all.iter().find(|(key, _)| key.starts_with("model_stream:")))
        .unwrap_or_else(|| panic!("no model stream pace in {paces}"));
    assert!(key.contains(&model.base), "{key}");
    let interval = pace["interval"]["mean_ms"].as_f64().expect("an interval");
    assert!((40.0..200.0).contains(&interval), "{pace}");

    // The fourth run, a new process: 5 chunks 50 ms apart, then silence.
    let begun = Instant::now();
    let mut second = support::leasehold(&data)
        .model(&model.base, "paced")
        .args(["run", flow, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("leasehold run starts");
    let mut lines = BufReader::new(second.stdout.take().expect("stdout")).lines();
    // On a loaded machine the first early expiry may come while phi is
    // still a hair under its threshold: the evidence renews it, and the
    // next one is the evaluator's.
    let mut before = Vec::new();
    let early = tokio::time::timeout(EARLY_WITHIN, async {
        while let Some(line) = lines.next_line().await.expect("stdout reads") {
            let event: Value = serde_json::from_str(&line).expect("one JSON event per line");
            if event["kind"] == "verdict" {
                if event["decided_by"] == "evaluator" {
                    return event;
                }
                before.push(event);
            }
        }
        panic!("the run ended without the evaluator's verdict: {before:?}");
    })
    .await
    .unwrap_or_else(|_| panic!("no verdict within {EARLY_WITHIN:?} of a 60 s lease"));
    let took = begun.elapsed();
    let _ = second.start_kill();
    let _ = second.wait().await;
    assert_eq!(early["early"], true, "{early}");
    assert_eq!(early["lease_kind"], "model_stream", "{early}");
    for renewed in &before {
        assert_eq!(renewed["early"], true, "{renewed}");
        assert_eq!(renewed["verdict"], "RENEW", "{renewed}");
        assert_eq!(renewed["decided_by"], "evidence", "{renewed}");
    }
    assert!(before.len() <= 1, "{before:?}");
    assert_eq!(early["renewals"], before.len(), "{early}");
    assert_eq!(early["verdict"], "INTERVENE", "{early}");
    assert!(
        early["evidence"]["phi"]
            .as_f64()
            .is_some_and(|phi| phi >= 8.0),
        "{early}"
    );
    assert!(took < Duration::from_secs(60), "judged after {took:?}");
}
