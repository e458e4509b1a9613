//! A tool server that floods progress costs a bounded log: a real
//! `leasehold run FLOW --json` calls a real stdio MCP server (a few lines of
//! Python, a child process) whose one tool sends ~60 KB progress
//! notifications as fast as it can for a few seconds before it answers.
//!
//! With the default limits each note is cut to 1 KiB and the reports are
//! coalesced into at most one `progress` event a second, which says how
//! many reports it stands for; every report is still evidence, and the
//! call's short lease is renewed on it until the tool answers. With a small
//! `limits.run_events` the log stops storing progress at the cap, says so
//! with `events_dropped`, and keeps every lifecycle event past it.
//!
//! Measured from the outside: the events the store holds, the size of the
//! data directory on disk, and the process's peak resident memory (VmHWM
//! from `/proc`), which without the bounds grows with every notification.
//!
//! The model is a small OpenAI-compatible server on 127.0.0.1 (a thread of
//! this test): its first answer calls the tool, its second ends the run.

mod support;

use std::io::{BufRead, BufReader as StdBufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};
use support::PATIENCE;
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long the server floods, in seconds: several of the call's 500 ms
/// lease periods, so the lease must be renewed on the evidence.
const FLOOD_SECONDS: f64 = 3.0;

/// The most notifications it sends, however fast it is.
const FLOOD_MAX: u32 = 4000;

/// The size of each notification's message.
const MESSAGE_BYTES: usize = 60_000;

/// A stdio MCP server with one tool, `flood`: it sends progress
/// notifications of `MESSAGE_BYTES` for `FLOOD_SECONDS` (at most
/// `FLOOD_MAX`), then answers with how many it sent. Its first argument is
/// a file it writes that count to.
const FLOOD_SERVER: &str = r#"
import json, sys, time

SECONDS, MAX, SIZE = float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
while True:
    line = sys.stdin.readline()
    if not line:
        break
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    method = message["method"]
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"],
                  "capabilities": {"tools": {}},
                  "serverInfo": {"name": "flood", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "flood", "description": "Floods progress, then answers.",
                             "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        token = message["params"].get("_meta", {}).get("progressToken")
        sent, start = 0, time.monotonic()
        if token is not None:
            while sent < MAX and time.monotonic() - start < SECONDS:
                sent += 1
                note = {"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": token, "progress": sent,
                                   "message": f"step {sent} " + "x" * SIZE}}
                sys.stdout.write(json.dumps(note) + "\n")
            sys.stdout.flush()
        with open(sys.argv[1], "w") as record:
            record.write(str(sent))
        result = {"content": [{"type": "text", "text": f"flooded {sent}"}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;

/// An OpenAI-compatible model on 127.0.0.1: a request without a tool
/// result calls `flood`, one with a tool result answers. Answers every
/// request it gets until the test ends; returns its base URL.
fn model() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}/v1", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || answer(stream));
        }
    });
    base
}

/// Answers one request on `stream` and closes it.
fn answer(mut stream: std::net::TcpStream) {
    let mut reader = StdBufReader::new(stream.try_clone().expect("clone"));
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let answered = request["messages"]
        .as_array()
        .is_some_and(|messages| messages.iter().any(|m| m["role"] == "tool"));
    let message = if answered {
        json!({"role": "assistant", "content": "done"})
    } else {
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "flood", "arguments": "{}"}}]})
    };
    let finish = if answered { "stop" } else { "tool_calls" };
    let reply = json!({
        "id": "chat-1", "object": "chat.completion", "created": 0, "model": "flood-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })
    .to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{reply}",
        reply.len()
    );
}

/// The flow: one call of `flood` under a 500 ms lease that evidence may
/// renew many times, then the answer.
fn write_flow(dir: &Path) -> std::path::PathBuf {
    let script = dir.join("flood.py");
    std::fs::write(&script, FLOOD_SERVER).expect("write the server");
    let flow = json!({
        "name": "flood",
        "task": "Call flood once, then answer.",
        "max_steps": 3,
        "stream": false,
        "tools": [{
            "name": "flooder",
            "command": [support::hanging_tool::python(), script, dir.join("sent"), FLOOD_SECONDS.to_string(),
                        FLOOD_MAX.to_string(), MESSAGE_BYTES.to_string()],
            "idempotent": {"flood": true},
        }],
        "leases": {"tool_call": "500ms", "max_renewals": 100, "free_renewals": 2,
                   "evidence_renewals": 100},
    });
    let path = dir.join("flood.json");
    std::fs::write(&path, flow.to_string()).expect("write the flow");
    path
}

/// The process's peak resident memory so far, in KiB (`None` once it has
/// exited).
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The bytes of every file under `dir`.
fn size_on_disk(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => size_on_disk(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// What one `leasehold run --json` of the flood flow left.
struct Flooded {
    /// The events the store holds, in order.
    events: Vec<Value>,
    /// `runs show`'s view of the run.
    view: Value,
    /// The notifications the server sent.
    sent: u64,
    /// The process's peak resident memory, in KiB.
    peak_kib: u64,
    /// The data directory's size after the run, in bytes.
    on_disk: u64,
}

/// Runs the flood flow with `limits` (environment variables) and reads back
/// what it left.
async fn flood(limits: &[(&str, &str)]) -> Flooded {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let flow = write_flow(dir.path());
    let base = model();
    let leasehold = |args: &[&str]| {
        let mut command = support::leasehold(&data)
            .model(&base, "flood-model")
            // The flow's renewal caps are the configuration's to allow: a
            // flow may only tighten them.
            .with_env("LEASEHOLD_LEASE_MAX_RENEWALS", "100")
            .with_env("LEASEHOLD_WATCHDOG_EVIDENCE_RENEWALS", "100")
            .with_envs(limits);
        command.args(args);
        command
    };
    let mut run = leasehold(&["run", flow.to_str().expect("a path"), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("leasehold run starts");
    let pid = run.id().expect("a pid");
    let mut lines = BufReader::new(run.stdout.take().expect("stdout")).lines();
    let mut peak = 0;
    let mut run_id = None;
    let mut ended = None;
    let followed = tokio::time::timeout(PATIENCE, async {
        // The peak is read at each line and when the run's end is printed
        // (the process is alive until it has printed it).
        while let Some(line) = lines.next_line().await.expect("stdout reads") {
            peak = peak.max(peak_kib(pid).unwrap_or(0));
            let event: Value = serde_json::from_str(&line).expect("one JSON event per line");
            run_id.get_or_insert_with(|| event["run_id"].as_str().unwrap_or_default().to_owned());
            if ["run_completed", "run_failed", "paused"]
                .contains(&event["kind"].as_str().unwrap_or(""))
            {
                ended = Some(event["kind"].clone());
            }
        }
    })
    .await;
    assert!(followed.is_ok(), "the run did not end within {PATIENCE:?}");
    let status = run.wait().await.expect("leasehold run exits");
    assert!(status.success(), "leasehold run exited {status}");
    assert_eq!(
        ended,
        Some(json!("run_completed")),
        "the run did not complete"
    );
    let run_id = run_id.expect("the run printed events");

    let events = stdout(leasehold(&["runs", "events", &run_id, "--json"]))
        .await
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON event per line"))
        .collect();
    let view = serde_json::from_str(&stdout(leasehold(&["runs", "show", &run_id])).await)
        .expect("a JSON view");
    let sent = std::fs::read_to_string(dir.path().join("sent"))
        .expect("the server recorded what it sent")
        .parse()
        .expect("a count");
    Flooded {
        events,
        view,
        sent,
        peak_kib: peak,
        on_disk: size_on_disk(&data),
    }
}

/// What `command` printed; it must succeed.
async fn stdout(mut command: support::Leasehold) -> String {
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("leasehold runs");
    assert!(output.status.success(), "{command:?} failed");
    String::from_utf8(output.stdout).expect("UTF-8")
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// Every lifecycle event of the run is in its log.
fn assert_lifecycle_kept(events: &[Value]) {
    for kind in [
        "run_started",
        "model_call_started",
        "tool_call_started",
        "tool_call_finished",
        "run_completed",
    ] {
        assert!(!of_kind(events, kind).is_empty(), "no {kind} in the log");
    }
    let finished = of_kind(events, "tool_call_finished");
    assert_eq!(finished[0]["outcome"], "ok", "{}", finished[0]);
    // Positions have no gap: nothing was lost between the store and the
    // reader.
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event["position"], json!(n + 1), "a gap before {event}");
    }
}

/// The call's lease was renewed on the flood's evidence, its verdicts
/// carrying cut notes.
fn assert_renewed_on_evidence(events: &[Value], max_note: usize) {
    let verdicts = of_kind(events, "verdict");
    let renewed: Vec<_> = verdicts
        .iter()
        .filter(|v| v["verdict"] == "RENEW" && v["evidence"]["count"].as_u64() > Some(0))
        .collect();
    assert!(
        renewed.len() >= 2,
        "the 500 ms lease of a 3 s call was not renewed on evidence: {verdicts:?}"
    );
    for verdict in verdicts {
        let note = verdict["evidence"]["last_note"]
            .as_str()
            .unwrap_or_default();
        assert!(
            note.len() <= max_note + 64,
            "a verdict carries a note of {} bytes",
            note.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_flood_is_cut_and_coalesced_and_still_renews_the_lease() {
    let flooded = flood(&[]).await;
    let events = &flooded.events;
    assert!(
        flooded.sent >= 200,
        "the server sent only {} notifications",
        flooded.sent
    );
    assert_lifecycle_kept(events);
    assert_renewed_on_evidence(events, leasehold::DEFAULT_MAX_PROGRESS_NOTE_BYTES);

    // At most one progress event a second, and one when the call ends; each
    // note cut to 1 KiB with a marker.
    let progress = of_kind(events, "progress");
    assert!(!progress.is_empty(), "no progress stored at all");
    assert!(
        progress.len() <= 3 * 10,
        "{} progress events for a call of about {FLOOD_SECONDS} s",
        progress.len()
    );
    for event in &progress {
        let note = event["note"].as_str().unwrap_or_default();
        assert!(
            note.len() <= leasehold::DEFAULT_MAX_PROGRESS_NOTE_BYTES + 64,
            "a stored note of {} bytes",
            note.len()
        );
        assert!(
            note.contains("[leasehold: note cut: "),
            "no marker: {note:.80}"
        );
    }
    // Every report the call got is said: the events' reports add up to the
    // evidence count of the last.
    let reports: u64 = progress
        .iter()
        .map(|e| e["reports"].as_u64().unwrap_or(1))
        .sum();
    let last = progress.last().expect("a progress event")["count"]
        .as_u64()
        .expect("a count");
    // Reports whose value did not rise (a notification handled after a
    // later one) are said, and are keepalives, not evidence: at least as
    // many reports as items of evidence.
    assert!(
        reports >= last && reports <= flooded.sent,
        "the coalesced reports do not add up: {reports} reports, {last} items, {} sent",
        flooded.sent
    );
    assert!(
        reports * 2 >= flooded.sent,
        "{reports} reports of {} notifications sent",
        flooded.sent
    );
    assert!(
        progress.iter().any(|e| e["reports"].as_u64() > Some(1)),
        "nothing was coalesced"
    );

    // Bounded on disk and in memory, where storing every notification
    // whole would take MESSAGE_BYTES × sent (over 100 MB).
    let flood_bytes = flooded.sent * u64::try_from(MESSAGE_BYTES).expect("fits");
    eprintln!(
        "{} notifications ({} MB): {} events stored, {} KB on disk, peak RSS {} MB",
        flooded.sent,
        flood_bytes / 1_000_000,
        events.len(),
        flooded.on_disk / 1000,
        flooded.peak_kib / 1024
    );
    assert!(
        flooded.on_disk < 32 * 1024 * 1024,
        "the data directory holds {} bytes",
        flooded.on_disk
    );
    assert!(
        flooded.peak_kib > 0 && flooded.peak_kib < 160 * 1024,
        "peak resident memory {} KiB",
        flooded.peak_kib
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_run_log_counts_progress_instead_of_storing_it_and_says_so() {
    const CAP: u64 = 40;
    let flooded = flood(&[
        ("LEASEHOLD_LIMITS_PROGRESS_INTERVAL", "1ms"),
        ("LEASEHOLD_LIMITS_RUN_EVENTS", "40"),
        ("LEASEHOLD_LIMITS_PROGRESS_NOTE", "256B"),
    ])
    .await;
    let events = &flooded.events;
    assert_lifecycle_kept(events);
    assert_renewed_on_evidence(events, 256);

    // No progress past the cap; lifecycle events past it, all kept.
    for event in events {
        let position = event["position"].as_u64().expect("a position");
        assert!(
            position <= CAP + 1 || event["kind"] != "progress",
            "a progress event stored past the cap: {event}"
        );
    }
    assert!(
        events.len() > usize::try_from(CAP).expect("fits"),
        "the cap was never reached: {} events",
        events.len()
    );
    // Said at once, and again before the run's end with the rest; the
    // view adds them up.
    let said = of_kind(events, "events_dropped");
    assert!(said.len() >= 2, "{said:?}");
    assert!(said.iter().all(|e| e["max_run_events"] == CAP), "{said:?}");
    let dropped: u64 = said
        .iter()
        .map(|e| e["dropped"]["progress"].as_u64().unwrap_or(0))
        .sum();
    assert!(dropped > 0, "{said:?}");
    assert_eq!(
        flooded.view["events_dropped"],
        json!({"progress": dropped}),
        "runs show: {}",
        flooded.view["events_dropped"]
    );
    let end = events
        .iter()
        .position(|e| e["kind"] == "run_completed")
        .expect("the end");
    assert_eq!(
        events[end - 1]["kind"],
        "events_dropped",
        "the rest is said right before the run's end"
    );
    eprintln!(
        "{} notifications: {} events stored, {dropped} progress events dropped, {} KB on disk, \
         peak RSS {} MB",
        flooded.sent,
        events.len(),
        flooded.on_disk / 1000,
        flooded.peak_kib / 1024
    );
}
