//! Never the cause of a false kill (rules 13 to 15), with real `leasehold
//! run` processes against real peers: server-everything's long-running
//! operation under a short tool lease, and a strict judge that a learned
//! pace must never call on a run as slow as the runs before it.
//!
//! The model is a Python process (`support/agent_model.py`) that plays an
//! agent calling one tool, and a judge that answers INTERVENE to anything,
//! and writes down every request it is sent.

use std::path::{Path, PathBuf};
use std::process::Stdio;

mod support;

use leasehold::{Event, EventKind};
use serde_json::{Value, json};
use support::PythonPeer;

const MODEL: &str = include_str!("support/agent_model.py");

/// The model, its journal, and a directory for data and flows.
struct Stage {
    dir: tempfile::TempDir,
    model: PythonPeer,
}

impl Stage {
    fn new(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let journal = dir.path().join("journal.jsonl");
        let mut all = vec![journal.to_str().expect("a path")];
        all.extend_from_slice(args);
        let model = PythonPeer::start(MODEL, &all);
        Self { dir, model }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The judge's requests the model was sent so far.
    fn judge_calls(&self) -> Vec<Value> {
        support::judge_requests(&self.dir.path().join("journal.jsonl"))
    }

    fn flow(&self, name: &str, flow: &Value) -> PathBuf {
        support::write_flow(self.dir.path(), name, flow)
    }

    /// `leasehold run FLOW --json` to its end: its exit code and events.
    async fn run(&self, flow: &Path) -> (i32, Vec<Event>) {
        let output = support::leasehold(&self.data())
            .model(&self.model.base, "agent")
            .arg("run")
            .arg(flow)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .output()
            .await
            .expect("leasehold run");
        let events = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Event>(line).ok())
            .collect();
        (output.status.code().unwrap_or(-1), events)
    }
}

fn names(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.name()).collect()
}

fn verdicts(events: &[Event]) -> Vec<&leasehold::VerdictRecord> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Verdict(record) => Some(&**record),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_operation_under_a_two_second_tool_lease_completes_on_its_first_attempt() {
    // server-everything's operation: 30 s, 30 progress notifications of a
    // total of 30. Under a 2 s tool lease and the default configuration,
    // with a judge that intervenes on anything it is asked.
    let stage = Stage::new(&[
        "--tool",
        "trigger-long-running-operation",
        "--arguments",
        r#"{"duration": 30, "steps": 30}"#,
    ]);
    let everything = leasehold_tests::everything::stdio_server("everything");
    let flow = stage.flow(
        "long",
        &json!({
            "name": "long-operation",
            "task": "Run the long operation, then say done.",
            "max_steps": 4,
            "stream": true,
            "tools": [everything],
            "leases": {"tool_call": "2s"},
        }),
    );
    let (code, events) = stage.run(&flow).await;
    assert_eq!(code, 0, "the run did not complete: {:?}", names(&events));
    let started = events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::ToolCallStarted { .. }))
        .count();
    assert_eq!(
        started,
        1,
        "the operation was restarted: {:?}",
        names(&events)
    );
    let judged = stage.judge_calls();
    assert!(
        judged.len() <= 1,
        "{} evaluator calls: {judged:?}",
        judged.len()
    );
    let tool_verdicts: Vec<_> = verdicts(&events)
        .into_iter()
        .filter(|v| v.lease_kind == leasehold::LeaseKind::ToolCall)
        .collect();
    assert!(
        tool_verdicts.len() >= 10,
        "the operation outlived ten 2 s leases: {tool_verdicts:?}"
    );
    assert!(
        tool_verdicts
            .iter()
            .all(|v| v.verdict == leasehold::Verdict::Renew),
        "{tool_verdicts:?}"
    );
    assert!(
        !names(&events).contains(&"renewal_cap_reached"),
        "{:?}",
        names(&events)
    );
}

/// A flow whose model's first token comes after 8 s when `slow`, at once
/// otherwise; `task_padding` makes its prompt another size.
fn paced_flow(slow: bool, pace: &str, task_padding: usize) -> Value {
    let marker = if slow { "SLOW" } else { "QUIK" };
    json!({
        "name": "paced",
        "task": format!("{marker}: say done.{}", " and more".repeat(task_padding)),
        "max_steps": 2,
        "stream": true,
        "leases": {"model_stream": "60s", "pace": pace},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_run_teaches_another_to_be_impatient() {
    let stage = Stage::new(&["--first-ms", "8000"]);
    let slow = stage.flow("slow", &paced_flow(true, "learn", 0));
    let quick_reset = stage.flow("quick-reset", &paced_flow(false, "reset", 0));
    let quick_long = stage.flow("quick-long", &paced_flow(false, "learn", 600));

    // Three runs whose first token comes after 8 s teach the endpoint.
    for _ in 0..3 {
        let (code, events) = stage.run(&slow).await;
        assert_eq!(code, 0, "{:?}", names(&events));
    }
    // One run that answers at once, with `reset`.
    let (code, _) = stage.run(&quick_reset).await;
    assert_eq!(code, 0);
    // The next 8 s run: no early expiry, no evaluator call.
    let before = stage.judge_calls().len();
    let (code, events) = stage.run(&slow).await;
    assert_eq!(code, 0, "{:?}", names(&events));
    assert!(verdicts(&events).is_empty(), "{:?}", verdicts(&events));
    assert_eq!(stage.judge_calls().len(), before);

    // Five runs that answer at once, with prompts of another kind on the
    // same endpoint; then an 8 s run again.
    for _ in 0..5 {
        let (code, _) = stage.run(&quick_long).await;
        assert_eq!(code, 0);
    }
    let (code, events) = stage.run(&slow).await;
    assert_eq!(code, 0, "{:?}", names(&events));
    assert!(verdicts(&events).is_empty(), "{:?}", verdicts(&events));
    assert_eq!(stage.judge_calls().len(), before);
}
