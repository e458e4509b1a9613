//! `leasehold experiment --from-runs`: what other strategies would have
//! done to a real run. A Python model streams an answer that stalls for
//! 2.5 s mid-way and then recovers; the run, under `leasehold` with a 1 s
//! lease, renews through the stall and completes. Played again from the
//! run's recorded timing, `deadline` cuts the live stream, and the run's
//! own strategy does what really happened.

mod support;

use serde_json::Value;
use support::PythonPeer;

/// The model: to the evaluator (JSON mode) it says RENEW; to the run it
/// streams ten chunks 50 ms apart, falls silent for 2.5 s, then streams
/// ten more and stops.
const MODEL: &str = r#"
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def event(chunk):
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        if "response_format" in body:
            verdict = json.dumps({"verdict": "RENEW", "reason": "it is thinking", "nudge": None,
                                  "decision": "EXTEND", "confidence": 0.9})
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
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        try:
            for n in range(20):
                if n == 10:
                    time.sleep(2.5)
                self.wfile.write(event({"choices": [{"index": 0, "delta": {"content": f"word{n} "}}]}))
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_stream_stalled_and_recovered_is_cut_by_deadline_and_reproduced_by_its_own_strategy()
 {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let model = PythonPeer::start(MODEL, &[]);
    let flow = dir.path().join("stalling.json");
    let text = serde_json::json!({
        "name": "stalling",
        "task": "Think it over.",
        "max_steps": 3,
        "stream": true,
        "leases": {"model_stream": "1s", "policy": "leasehold"},
    });
    std::fs::write(&flow, text.to_string()).expect("write the flow");

    let run = support::finished(
        support::leasehold(&data)
            .model(&model.base, "stalling")
            .arg("run")
            .arg(&flow)
            .arg("--json"),
    )
    .await;
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&run.stderr)
    );
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("an event"))
        .collect();
    let run_id = events[0]["run_id"].as_str().expect("a run id").to_owned();
    assert_eq!(
        events.last().map(|e| e["kind"].clone()),
        Some("run_completed".into())
    );
    // Really: the stream was renewed through its stall, never cut.
    assert!(
        events.iter().any(|e| e["kind"] == "wait"),
        "its lease expired in the stall"
    );
    assert!(!events.iter().any(|e| e["kind"] == "intervened"));
    let timed: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "operation_timed")
        .collect();
    assert_eq!(timed.len(), 1, "{timed:?}");
    assert_eq!(timed[0]["timing"]["items"], 20);
    assert_eq!(timed[0]["timing"]["ended"], "ended");
    assert_eq!(timed[0]["timing"]["silence_after"], 10);
    assert!(timed[0]["timing"]["longest_silence_ms"].as_u64().unwrap() >= 2_400);

    let out = dir.path().join("report");
    let report = support::finished(
        support::leasehold(&data)
            .model(&model.base, "stalling")
            .args([
                "experiment",
                "--from-runs",
                &run_id,
                "--strategies",
                "leasehold,deadline",
                "--json",
                "--out",
            ])
            .arg(&out),
    )
    .await;
    let stderr = String::from_utf8_lossy(&report.stderr);
    assert!(report.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&report.stdout).expect("a JSON report");
    assert_eq!(report["operations"], 1, "{report}");
    assert_eq!(report["really_cut"], 0);
    let strategy = |name: &str| {
        report["report"]["strategies"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {report}"))
    };
    let deadline = strategy("deadline");
    let own = strategy("leasehold");
    assert_eq!(deadline["lease_ms"], 1_000, "the run's lease");
    assert_eq!(deadline["slow_alive_killed"], 1, "{deadline}");
    assert_eq!(own["slow_alive_killed"], 0, "{own}");
    assert_eq!(report["own"]["strategy"], "leasehold");
    assert_eq!(report["own"]["reproduced"], true, "{report}");
    assert!(out.join("report.json").exists() && out.join("tradeoff.svg").exists());

    // The table says it too.
    let table = support::finished(
        support::leasehold(&data)
            .model(&model.base, "stalling")
            .args(["experiment", "--from-runs", &run_id, "--out"])
            .arg(&out),
    )
    .await;
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.status.success(),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
    assert!(
        text.contains("the runs' own strategy, leasehold, reproduces what really happened"),
        "{text}"
    );
    // The runs created since a time: this one.
    let since = support::finished(
        support::leasehold(&data)
            .model(&model.base, "stalling")
            .args([
                "experiment",
                "--from-runs",
                "--since",
                "2020-01-01T00:00:00Z",
                "--json",
                "--out",
            ])
            .arg(&out),
    )
    .await;
    assert!(
        since.status.success(),
        "{}",
        String::from_utf8_lossy(&since.stderr)
    );
    let since: Value = serde_json::from_slice(&since.stdout).expect("a JSON report");
    assert_eq!(since["runs"], serde_json::json!([run_id]));
    // A run that is not there is named.
    let missing = support::finished(
        support::leasehold(&data)
            .model(&model.base, "stalling")
            .args(["experiment", "--from-runs", "run-none"]),
    )
    .await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no run run-none"));
}
