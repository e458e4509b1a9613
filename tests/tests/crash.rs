//! Crash tests: a real process runs a flow against a sled store and is
//! killed with SIGKILL at a chosen point; a second process resumes the run.
//! Nothing done before the kill is lost or done twice, the fence goes up,
//! calls in flight have an unknown outcome and are handled by rule, and the
//! event log is intact.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use leasehold::{
    CallOutcome, ChatRole, Event, EventKind, RunStatus, ToolCallState,
    store::{SledConfig, SledStore},
};
use leasehold::{EventLog, RunStore, SnapshotStore};

const RUNNER: &str = env!("CARGO_BIN_EXE_crash_runner");

/// Starts the first process and kills it with SIGKILL as soon as an event
/// it prints matches `kill_at`; returns the events it printed.
fn start_and_kill(dir: &Path, kill_at: impl Fn(&Event) -> bool) -> Vec<Event> {
    let mut child = Command::new(RUNNER)
        .arg(dir.join("db"))
        .arg(dir.join("effects"))
        .arg("start")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the runner starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut printed = Vec::new();
    loop {
        let line = received
            .recv_timeout(Duration::from_secs(30))
            .expect("the runner reached the kill point within 30 s");
        let Ok(event) = serde_json::from_str::<Event>(&line) else {
            continue;
        };
        let hit = kill_at(&event);
        printed.push(event);
        if hit {
            break;
        }
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    printed
}

/// Runs the second process, which resumes the run, to its end.
fn resume(dir: &Path) -> (Option<i32>, serde_json::Value) {
    let output = Command::new(RUNNER)
        .arg(dir.join("db"))
        .arg(dir.join("effects"))
        .arg("resume")
        .stderr(Stdio::inherit())
        .output()
        .expect("the runner resumes");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v.get("final").is_some())
        .unwrap_or_default();
    (output.status.code(), last)
}

fn effects(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("effects"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

struct Inspection {
    record: leasehold::RunRecord,
    transcript: Vec<leasehold::ChatMessage>,
    calls: Vec<leasehold::ToolCallRecord>,
    events: Vec<Event>,
}

async fn inspect(dir: &Path) -> Inspection {
    let store = SledStore::open(SledConfig::new(dir.join("db")))
        .expect("the store opens after both processes");
    let mut runs = store.list_runs().await.expect("runs");
    assert_eq!(runs.len(), 1);
    let record = runs.remove(0);
    let snapshots = store
        .load_snapshots(&record.run_id)
        .await
        .expect("snapshots");
    let root = snapshots
        .iter()
        .find(|s| s.path == "run")
        .expect("root snapshot");
    let transcript = serde_json::from_value(root.state["transcript"].clone()).expect("transcript");
    Inspection {
        calls: store.load_tool_calls(&record.run_id).await.expect("calls"),
        events: store.load_events(&record.run_id, 0).await.expect("events"),
        record,
        transcript,
    }
}

/// What every completed resumed run must show.
fn assert_completed_exactly_once(dir: &Path, found: &Inspection, printed: &[Event]) {
    assert_eq!(
        found.record.status,
        RunStatus::Completed,
        "{:?}",
        found.record
    );
    assert_eq!(found.record.fence, 2, "the fence went up with the takeover");
    assert_eq!(
        found.record.answer.as_deref(),
        Some("summary after 3 steps")
    );
    // Every step is in the transcript exactly once.
    let assistant_calls: Vec<String> = found
        .transcript
        .iter()
        .filter(|m| m.role == ChatRole::Assistant)
        .flat_map(|m| m.tool_calls.iter().map(|c| c.id.clone()))
        .collect();
    assert_eq!(assistant_calls, ["call_0", "call_1", "call_2"]);
    let results: Vec<&str> = found
        .transcript
        .iter()
        .filter(|m| m.role == ChatRole::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    assert_eq!(results, ["call_0", "call_1", "call_2"]);
    // Every side effect happened once.
    let effects = effects(dir);
    let keys: BTreeSet<&str> = effects.iter().filter_map(|l| l.split(' ').nth(1)).collect();
    assert_eq!(effects.len(), 3, "{effects:?}");
    assert_eq!(keys.len(), 3, "{effects:?}");
    assert!(
        found.calls.iter().all(|c| c.state == ToolCallState::Done),
        "{:?}",
        found.calls
    );
    // The event log is intact: ordered, unique, with the first process's
    // logged events exactly as it printed them.
    let seqs: Vec<u64> = found.events.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    for logged in found
        .events
        .iter()
        .filter(|e| e.seq <= printed.last().map_or(0, |p| p.seq))
    {
        if let Some(original) = printed.iter().find(|p| p.seq == logged.seq) {
            assert_eq!(logged, original, "a logged event changed");
        }
    }
    let kinds: Vec<&str> = found.events.iter().map(|e| e.kind.name()).collect();
    for kind in ["run_started", "run_resumed", "run_completed"] {
        assert!(kinds.contains(&kind), "no `{kind}` in the log: {kinds:?}");
    }
}

fn is(event: &Event, name: &str, path_contains: &str) -> bool {
    event.kind.name() == name && event.path.contains(path_contains)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_mid_model_call_then_resume_completes_exactly_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let printed = start_and_kill(dir.path(), |e| {
        matches!(e.kind, EventKind::ModelCallStarted { step: 2, .. })
    });
    let (code, last) = resume(dir.path());
    assert_eq!(code, Some(0), "{last}");
    let found = inspect(dir.path()).await;
    assert_completed_exactly_once(dir.path(), &found, &printed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_mid_idempotent_tool_call_calls_it_again_with_the_same_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let printed = start_and_kill(dir.path(), |e| is(e, "progress", "tool_call:1.0"));
    let (code, last) = resume(dir.path());
    assert_eq!(code, Some(0), "{last}");
    let found = inspect(dir.path()).await;
    assert_completed_exactly_once(dir.path(), &found, &printed);
    let unknown = found.events.iter().find(|e| {
        matches!(&e.kind, EventKind::ToolCallFinished { outcome: CallOutcome::Unknown, tool, .. } if tool == "search")
    });
    assert!(
        unknown.is_some(),
        "the call in flight was not marked unknown"
    );
    let retried = found
        .events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::ToolCallStarted { tool, attempt: 2, .. } if tool == "search"))
        .count();
    assert_eq!(retried, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_mid_non_idempotent_tool_call_requires_reconciliation() {
    let dir = tempfile::tempdir().expect("temp dir");
    start_and_kill(dir.path(), |e| is(e, "progress", "tool_call:2.0"));
    let (code, last) = resume(dir.path());
    assert_eq!(
        code,
        Some(3),
        "the resumed run must wait for a person: {last}"
    );
    let found = inspect(dir.path()).await;
    assert_eq!(found.record.status, RunStatus::ReconciliationRequired);
    let call = found
        .record
        .pause
        .and_then(|p| p.call)
        .expect("the call in question");
    assert_eq!(call.tool, "charge");
    assert_eq!(call.state, ToolCallState::Unknown);
    assert!(
        !effects(dir.path()).iter().any(|l| l.starts_with("charge")),
        "a non-idempotent call was repeated blindly"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_between_steps_then_resume_completes_exactly_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let printed = start_and_kill(dir.path(), |e| is(e, "tool_call_finished", "tool_call:1.0"));
    let (code, last) = resume(dir.path());
    assert_eq!(code, Some(0), "{last}");
    let found = inspect(dir.path()).await;
    assert_completed_exactly_once(dir.path(), &found, &printed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_mid_wrap_up_then_resume_completes_exactly_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let printed = start_and_kill(dir.path(), |e| e.kind.name() == "budget_exhausted");
    let (code, last) = resume(dir.path());
    assert_eq!(code, Some(0), "{last}");
    let found = inspect(dir.path()).await;
    assert_completed_exactly_once(dir.path(), &found, &printed);
}
