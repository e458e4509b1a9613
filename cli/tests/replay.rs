//! `leasehold runs replay`: a run of the demo, recorded in its data
//! directory, played again once the demo's servers are gone — no network,
//! no tool server, on paused time — reproduces its steps and verdicts;
//! its saved recording replays the same in a test. So do real runs with
//! ordinary faults, against a model and a tool server in Python: verdicts
//! the breaker gave (a judge that answered 500, or too late), a run paused
//! and resumed by `runs resume` in another process, a run stopped by
//! SIGTERM mid-call and resumed, a fork, a tool result cut to
//! `limits.tool_result`, and a run cut early against a pace three runs
//! taught (replayed after a fifth taught the store more).

mod support;

use std::process::Stdio;
use support::PATIENCE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_replay_reproduces_a_stored_run_of_the_demo_with_no_server_running() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let demo = support::finished(support::leasehold(&data).arg("demo")).await;
    let said =
        String::from_utf8_lossy(&demo.stdout).into_owned() + &String::from_utf8_lossy(&demo.stderr);
    assert!(demo.status.success(), "{said}");
    let run_id = said
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("run-"))
        .unwrap_or_else(|| panic!("a run id in {said}"))
        .to_owned();

    // The demo's servers are gone with it; a model address that answers
    // nothing is configured, to show that none is reached.
    let saved = dir.path().join("recording.json");
    let replay = support::finished(
        support::leasehold(&data)
            .env("LEASEHOLD_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
            .env("LEASEHOLD_MODEL_NAME", "nobody")
            .args(["runs", "replay", &run_id, "--json", "--save"])
            .arg(&saved),
    )
    .await;
    let stdout = String::from_utf8_lossy(&replay.stdout);
    assert!(
        replay.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("a JSON report");
    assert_eq!(report["divergence"], serde_json::Value::Null, "{report}");
    assert_eq!(report["replayed_status"], "completed");
    assert!(report["steps"].as_u64().unwrap() >= 3, "{report}");
    assert!(report["verdicts"].as_u64().unwrap() >= 3, "{report}");

    // The readable answer says so.
    let readable =
        support::finished(support::leasehold(&data).args(["runs", "replay", &run_id])).await;
    let text = String::from_utf8_lossy(&readable.stdout);
    assert!(readable.status.success(), "{text}");
    assert!(text.contains("reproduced it"), "{text}");

    // Saved, the recording is a regression test: it replays the same here.
    let recording: leasehold_lab::Recording =
        serde_json::from_str(&std::fs::read_to_string(&saved).expect("saved"))
            .expect("a recording");
    let config = leasehold::EngineConfig::default();
    let report = tokio::task::spawn_blocking(move || recording.replay(config))
        .await
        .expect("joins")
        .expect("replays");
    report.assert_reproduced();

    // A run that is not there is named.
    let missing =
        support::finished(support::leasehold(&data).args(["runs", "replay", "run-none"])).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no run run-none"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_replay_over_server_plays_a_run_of_the_data_directory_serve_holds() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let demo = support::finished(support::leasehold(&data).arg("demo")).await;
    let said =
        String::from_utf8_lossy(&demo.stdout).into_owned() + &String::from_utf8_lossy(&demo.stderr);
    assert!(demo.status.success(), "{said}");
    let run_id = said
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("run-"))
        .unwrap_or_else(|| panic!("a run id in {said}"))
        .to_owned();

    // A real server holds the data directory (no model configured: it
    // browses its runs all the same).
    let (mut server, base) = support::serve(support::leasehold(&data), &[], PATIENCE).await;

    // The store is the server's: a replay that opens it is told to ask it.
    let local =
        support::finished(support::leasehold(&data).args(["runs", "replay", &run_id])).await;
    assert_eq!(local.status.code(), Some(1));
    let refused = String::from_utf8_lossy(&local.stderr);
    assert!(refused.contains("--server URL"), "{refused}");

    // Over the server, the run's recording is fetched and played here.
    let saved = dir.path().join("recording.json");
    let replay = support::finished(
        support::leasehold(&data)
            .args([
                "runs", "--server", &base, "replay", &run_id, "--json", "--save",
            ])
            .arg(&saved),
    )
    .await;
    let stdout = String::from_utf8_lossy(&replay.stdout);
    assert!(
        replay.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("a JSON report");
    assert_eq!(report["divergence"], serde_json::Value::Null, "{report}");
    assert_eq!(report["replayed_status"], "completed");
    assert!(report["verdicts"].as_u64().unwrap() >= 3, "{report}");
    let recording: leasehold_lab::Recording =
        serde_json::from_str(&std::fs::read_to_string(&saved).expect("saved"))
            .expect("a recording");
    assert_eq!(recording.run_id, run_id);
    assert!(!recording.events.is_empty() && !recording.snapshots.is_empty());

    // A run the server does not have is named.
    let missing = support::finished(
        support::leasehold(&data).args(["runs", "--server", &base, "replay", "run-none"]),
    )
    .await;
    assert_eq!(missing.status.code(), Some(1));
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(said.contains("no run run-none"), "{said}");

    server.start_kill().expect("stop serve");
    let _ = server.wait().await;
}

/// The model of the fault tests, in Python: a run's request (no JSON mode)
/// calls `search` until its conversation holds a tool result, then answers
/// with its last user message; a judge's request (JSON mode) is answered
/// as the first argument says, one judge call after another: `breaker`
/// (HTTP 500, then an answer 3 s late: past the evaluator's timeout, in
/// turn), `escalate` or `intervene`. Streamed when asked.
const MODEL: &str = r#"
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

mode = sys.argv[1]
judged = [0]

def verdict(v):
    return json.dumps({"verdict": v, "reason": "the judge said " + v, "nudge": None})

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, stream):
        if stream:
            data = ""
            message = body["choices"][0]["message"]
            delta = {"role": "assistant", "content": message.get("content") or ""}
            chunk = {"id": "x", "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            done = {"id": "x", "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": body["usage"]}
            data = "data: " + json.dumps(chunk) + "\n\ndata: " + json.dumps(done) + "\n\ndata: [DONE]\n\n"
            raw = data.encode()
            self.send_response(status)
            self.send_header("content-type", "text/event-stream")
        else:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        messages = body.get("messages", [])
        stream = bool(body.get("stream"))
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if "response_format" in body:
            n = judged[0]
            judged[0] += 1
            if mode == "breaker" and n % 2 == 0:
                raw = b'{"error": {"message": "overloaded"}}'
                self.send_response(500)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
                return
            if mode == "breaker":
                time.sleep(3)
                text = verdict("RENEW")
            else:
                text = verdict(mode.upper())
            message = {"role": "assistant", "content": text}
        elif any(m.get("role") == "tool" for m in messages) or not body.get("tools"):
            said = [m.get("content") for m in messages if m.get("role") == "user"][-1]
            message = {"role": "assistant", "content": "found; last said: " + said}
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"q": "pool"})}}]}
        answer = {"id": "x", "object": "chat.completion",
                  "choices": [{"index": 0, "message": message,
                               "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                  "usage": usage}
        self.reply(200, answer, stream)

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// The tool server of the fault tests, an MCP server over stdio in Python:
/// one tool, `search`, idempotent. Its calls, counted in the file named by
/// its first argument (so across the processes that start it), take the
/// seconds its second argument lists in turn (the last for the rest),
/// reporting progress every 50 ms when the call says where; each answers
/// its third argument's bytes.
const TOOLS: &str = r#"
import json, sys, time

state, delays, size = sys.argv[1], [float(d) for d in sys.argv[2].split(",")], int(sys.argv[3])

def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

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
                  "serverInfo": {"name": "search", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "search", "description": "Search the logs.",
                             "inputSchema": {"type": "object",
                                             "properties": {"q": {"type": "string"}}},
                             "annotations": {"idempotentHint": True, "readOnlyHint": True}}]}
    elif method == "tools/call":
        try:
            with open(state) as f:
                n = int(f.read() or "0")
        except FileNotFoundError:
            n = 0
        with open(state, "w") as f:
            f.write(str(n + 1))
        delay = delays[min(n, len(delays) - 1)]
        token = (params.get("_meta") or {}).get("progressToken")
        if token is not None and delay < 1:
            steps = int(delay / 0.05)
            for i in range(steps):
                time.sleep(0.05)
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": i + 1, "total": steps}})
        else:
            time.sleep(delay)
        text = ("12 errors at 03:10, the pool exhausted; " * (size // 40 + 1))[:size]
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    else:
        result = {}
    send({"jsonrpc": "2.0", "id": rid, "result": result})
"#;

/// A data directory, the fault tests' model (judging as `mode` says) and
/// tool server (its calls taking `delays` seconds, answering `size`
/// bytes), and a flow calling it.
struct Faults {
    _model: support::PythonPeer,
    base: String,
    flow: std::path::PathBuf,
    data: std::path::PathBuf,
    env: Vec<(&'static str, String)>,
    _dir: tempfile::TempDir,
}

impl Faults {
    fn start(mode: &str, delays: &str, size: usize) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let model = support::PythonPeer::start(MODEL, &[mode]);
        let tools = dir.path().join("search_mcp.py");
        std::fs::write(&tools, TOOLS).expect("write the tool server");
        let flow = dir.path().join("incident.json");
        let text = serde_json::json!({
            "name": "incident",
            "task": "Why did checkout fail?",
            "max_steps": 4,
            "stream": false,
            "tools": [{
                "name": "logs",
                "command": [
                    "python3",
                    tools.to_str().expect("a path"),
                    dir.path().join("calls").to_str().expect("a path"),
                    delays,
                    size.to_string(),
                ],
            }],
        });
        std::fs::write(&flow, text.to_string()).expect("write the flow");
        Self {
            base: model.base.clone(),
            _model: model,
            flow,
            data: dir.path().join("data"),
            env: vec![
                ("LEASEHOLD_LEASE_TOOL_CALL", "1s".to_owned()),
                ("LEASEHOLD_WATCHDOG_FREE_RENEWALS", "2".to_owned()),
                ("LEASEHOLD_EVALUATOR_TIMEOUT", "1s".to_owned()),
            ],
            _dir: dir,
        }
    }

    fn with(mut self, key: &'static str, value: &str) -> Self {
        self.env.retain(|(k, _)| *k != key);
        self.env.push((key, value.to_owned()));
        self
    }

    fn leasehold(&self) -> support::Leasehold {
        let mut command = support::leasehold(&self.data).model(&self.base, "incident-model");
        command.envs(self.env.iter().map(|(k, v)| (*k, v.as_str())));
        command
    }

    /// `leasehold run FLOW --json` to its end (or pause); its run's id.
    async fn run(&self, code: i32) -> String {
        let out =
            support::finished(self.leasehold().arg("run").arg(&self.flow).arg("--json")).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let first: serde_json::Value =
            serde_json::from_str(stdout.lines().next().expect("an event")).expect("JSON");
        first["run_id"].as_str().expect("a run id").to_owned()
    }

    /// The run's log, as `runs events --json` prints it.
    async fn events(&self, run_id: &str) -> Vec<leasehold::Event> {
        let out =
            support::finished(self.leasehold().args(["runs", "events", run_id, "--json"])).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }

    /// `runs replay RUN --json`, with no model reachable: the report, which
    /// must say the replay reproduced the run.
    async fn replayed(&self, run_id: &str) -> serde_json::Value {
        let out = support::finished(
            self.leasehold()
                .env("LEASEHOLD_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
                .args(["runs", "replay", run_id, "--json"]),
        )
        .await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let report: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
        assert!(out.status.success(), "{report:#}");
        assert_eq!(report["divergence"], serde_json::Value::Null, "{report:#}");
        assert_eq!(report["unanswered"], serde_json::json!([]), "{report:#}");
        report
    }
}

fn deciders(events: &[leasehold::Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            leasehold::EventKind::Verdict(record) => Some(record.decided_by.as_str().to_owned()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_evaluator_failed_and_timed_out_replays_its_breaker_verdicts() {
    // A silent search of 6 s under a 1 s lease: two free renewals, then a
    // judge that answers 500, then one 3 s late (past its 1 s timeout), in
    // turn: the breaker renews each time.
    let faults = Faults::start("breaker", "6", 100);
    let run_id = faults.run(0).await;
    let decided = deciders(&faults.events(&run_id).await);
    assert_eq!(decided[..3], ["ladder", "ladder", "breaker"], "{decided:?}");
    assert!(decided[2..].iter().all(|d| d == "breaker"), "{decided:?}");
    let report = faults.replayed(&run_id).await;
    assert_eq!(report["verdicts"].as_u64(), Some(decided.len() as u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_then_resumed_by_runs_resume_replays_as_it_ran() {
    // The first search hangs; the judge escalates and `leasehold run`
    // exits with the run paused; `runs resume --guidance` takes it on in
    // another process, and the search, sent again, answers.
    let faults = Faults::start("escalate", "60,0.3", 100);
    let run_id = faults.run(3).await;
    let resumed = support::finished(faults.leasehold().args([
        "runs",
        "resume",
        &run_id,
        "--guidance",
        "Look at the replica.",
        "--json",
    ]))
    .await;
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let events = faults.events(&run_id).await;
    let names: Vec<&str> = events.iter().map(|e| e.kind.name()).collect();
    assert!(names.contains(&"run_resumed"), "{names:?}");
    assert_eq!(names.last(), Some(&"run_completed"), "{names:?}");
    faults.replayed(&run_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_replays_from_where_it_was_forked() {
    let faults = Faults::start("intervene", "0.3", 100);
    let parent = faults.run(0).await;
    let fork = support::finished(faults.leasehold().args([
        "runs",
        "fork",
        &parent,
        "--at",
        "2",
        "--guidance",
        "Say it in French.",
        "--json",
    ]))
    .await;
    let stdout = String::from_utf8_lossy(&fork.stdout);
    assert!(fork.status.success(), "{stdout}");
    let first: serde_json::Value =
        serde_json::from_str(stdout.lines().next().expect("an event")).expect("JSON");
    let fork_id = first["run_id"].as_str().expect("the fork's id");
    assert_ne!(fork_id, parent);
    assert_eq!(first["kind"], "run_forked");
    faults.replayed(fork_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_tool_result_was_truncated_replays_it_truncated_the_same() {
    let faults =
        Faults::start("intervene", "0.3", 5000).with("LEASEHOLD_LIMITS_TOOL_RESULT", "1KiB");
    let run_id = faults.run(0).await;
    let events = faults.events(&run_id).await;
    assert!(
        events
            .iter()
            .any(|e| e.kind.name() == "tool_result_truncated"),
        "the result was cut"
    );
    faults.replayed(&run_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_early_against_a_learned_pace_replays_with_the_pace_it_had() {
    // Three runs teach the search's pace (progress every 50 ms, done in
    // 300 ms); the fourth's search is silent for 25 s, expires early
    // against it (before its 20 s period), the judge says INTERVENE, and
    // the search sent again answers.
    let faults = Faults::start("intervene", "0.3,0.3,0.3,25,0.3", 100)
        .with("LEASEHOLD_LEASE_TOOL_CALL", "20s");
    for _ in 0..3 {
        faults.run(0).await;
    }
    let run_id = faults.run(0).await;
    let events = faults.events(&run_id).await;
    let early = events.iter().any(|e| {
        matches!(&e.kind, leasehold::EventKind::Verdict(r) if r.early && r.verdict.as_str() == "INTERVENE")
    });
    assert!(early, "{:?}", deciders(&events));
    assert!(events.iter().any(|e| e.kind.name() == "lease_seeded"));
    // What the store has learned since does not change what it replays.
    faults.run(0).await;
    faults.replayed(&run_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_mid_call_and_resumed_replays_its_stop_and_its_resume() {
    // SIGTERM while the first search hangs, after its first renewal: the
    // run stays resumable; `runs resume` sends the search again.
    let faults = Faults::start("escalate", "60,0.3", 100);
    let mut run = faults
        .leasehold()
        .arg("run")
        .arg(&faults.flow)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("leasehold run starts");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
        run.stdout.take().expect("stdout"),
    ));
    let mut run_id = None;
    loop {
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("events come")
            .expect("read")
            .expect("a verdict before the run ends");
        let event: leasehold::Event = serde_json::from_str(&line).expect("an event");
        run_id.get_or_insert(event.run_id.clone());
        if event.kind.name() == "verdict" {
            break;
        }
    }
    let run_id = run_id.expect("a run id");
    support::signal(&run, "-TERM");
    let stopped = tokio::time::timeout(PATIENCE, run.wait())
        .await
        .expect("leasehold run stops")
        .expect("waits");
    assert_eq!(stopped.code(), Some(143));
    let resumed = support::finished(
        faults
            .leasehold()
            .args(["runs", "resume", &run_id, "--json"]),
    )
    .await;
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let names: Vec<&'static str> = faults
        .events(&run_id)
        .await
        .iter()
        .map(|e| e.kind.name())
        .collect();
    assert!(names.contains(&"run_resumed"), "{names:?}");
    assert_eq!(names.last(), Some(&"run_completed"), "{names:?}");
    faults.replayed(&run_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demos_closing_hint_names_a_command_that_prints_a_readable_summary() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let demo = support::finished(support::leasehold(&data).arg("demo")).await;
    let stdout = String::from_utf8_lossy(&demo.stdout);
    assert!(demo.status.success(), "{stdout}");
    let hint = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("The run is kept in"))
        .unwrap_or_else(|| panic!("the demo ends with where its run is kept: {stdout}"));
    let command = hint
        .split('`')
        .find(|part| part.starts_with("leasehold runs "))
        .unwrap_or_else(|| panic!("the hint names a `leasehold runs` command: {hint}"));
    let args: Vec<&str> = command
        .strip_prefix("leasehold ")
        .expect("leasehold")
        .split_whitespace()
        .collect();
    let shown = support::finished(support::leasehold(&data).args(&args)).await;
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success(),
        "`{command}`: {text}{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    // A summary a person reads: lines of text first, not a JSON document,
    // and not hundreds of lines.
    let lines = text.lines().count();
    assert!(lines < 100, "`{command}` printed {lines} lines:\n{text}");
    assert!(
        !text.trim_start().starts_with('{'),
        "`{command}` printed JSON:\n{text}"
    );
    assert!(text.contains("ESCALATE by evaluator"), "{text}");
    assert!(text.contains("INTERVENE by evaluator"), "{text}");
}
