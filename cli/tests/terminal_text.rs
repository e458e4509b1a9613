//! Text from outside is printed as text: a flow whose name carries escape
//! sequences and a newline, posted to a real `leasehold serve`, and a
//! model (a real HTTP server here) whose tool call and answer carry them,
//! followed by `leasehold run`. `runs list` and `runs events` (over the API
//! and from the store) and the readable log of `leasehold run` print no
//! ESC, BEL, CR or direction override, and no line they did not mean to;
//! the JSON outputs keep the text whole.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use leasehold::printable::is_unprintable;
use serde_json::{Value, json};
use support::PATIENCE;

/// Retitles the terminal, clears the screen and forges a row.
const HOSTILE: &str = "report\u{1b}]0;pwned\u{7}\u{1b}[2J\nforged row\r\u{202e}";

/// A model that answers each chat completion with the next of `answers`
/// (the last one again once they run out).
async fn model(answers: Vec<Value>) -> String {
    async fn complete(
        State((answers, next)): State<(Arc<Vec<Value>>, Arc<AtomicUsize>)>,
    ) -> Json<Value> {
        let i = next.fetch_add(1, Ordering::SeqCst).min(answers.len() - 1);
        Json(json!({
            "id": "chatcmpl-hostile", "object": "chat.completion", "model": "hostile",
            "choices": [{"index": 0, "finish_reason": "stop", "message": answers[i]}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }))
    }
    let app = Router::new()
        .route("/v1/chat/completions", post(complete))
        .with_state((Arc::new(answers), Arc::new(AtomicUsize::new(0))));
    let addr = support::serve_peer(app).await;
    format!("{addr}/v1")
}

/// `leasehold` on a data directory in `dir`, on the model at `model`.
fn hostile(dir: &Path, model: &str) -> support::Leasehold {
    support::leasehold(&dir.join("data")).model(model, "hostile")
}

/// `leasehold ARGS`' stdout and stderr; it must exit as `success` says.
async fn output(dir: &Path, model: &str, args: &[&str], success: bool) -> (String, String) {
    let support::Output {
        code,
        stdout,
        stderr,
    } = support::output(hostile(dir, model).args(args)).await;
    assert_eq!(
        code == Some(0),
        success,
        "leasehold {args:?}: {stdout}{stderr}"
    );
    (stdout, stderr)
}

/// Nothing in `text` a terminal would act on, line feeds apart.
fn assert_printable(what: &str, text: &str) {
    assert!(
        !text.chars().any(|c| c != '\n' && is_unprintable(c)),
        "{what} prints control characters: {text:?}"
    );
}

/// A readable event line starts with its time (`   0.12s  `).
fn assert_event_lines(what: &str, text: &str) {
    for line in text.lines().filter(|l| !l.is_empty()) {
        let time = line.trim_start().split_once("s  ").map(|(t, _)| t);
        assert!(
            time.is_some_and(|t| t
                .split_once('.')
                .is_some_and(|(s, c)| { s.chars().all(|c| c.is_ascii_digit()) && c.len() == 2 })),
            "{what} prints a line that is not an event's: {line:?}\nin:\n{text}"
        );
    }
}

fn events_and_list(stdout_list: &str, stdout_events: &str, what: &str) {
    assert_printable(&format!("runs list {what}"), stdout_list);
    assert_printable(&format!("runs events {what}"), stdout_events);
    // A header and the one run.
    assert_eq!(
        stdout_list.lines().count(),
        2,
        "runs list {what}:\n{stdout_list}"
    );
    assert!(
        stdout_list.contains(r"report\u{1b}]0;pwned\u{7}\u{1b}[2J\nforged row"),
        "runs list {what}:\n{stdout_list}"
    );
    assert_event_lines(&format!("runs events {what}"), stdout_events);
    assert!(stdout_events.contains("run_completed"), "{stdout_events}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posted_flows_name_is_printed_as_text_by_runs_list_and_runs_events() {
    let dir = tempfile::tempdir().expect("dir");
    let model = model(vec![json!({"role": "assistant", "content": "done"})]).await;
    let (mut server, base) = support::serve(hostile(dir.path(), &model), &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let flow = json!({"name": HOSTILE, "task": "t", "max_steps": 3});
    let run_id = support::post_run(&http, &base, &flow).await;
    support::view_until(&http, &base, &run_id, PATIENCE, "completed", |v| {
        v["status"] == "completed"
    })
    .await;

    let (list, _) = output(
        dir.path(),
        &model,
        &["runs", "list", "--server", &base],
        true,
    )
    .await;
    let (events, _) = output(
        dir.path(),
        &model,
        &["runs", "events", &run_id, "--server", &base],
        true,
    )
    .await;
    events_and_list(&list, &events, "--server");

    let pid = server.id().expect("serve's pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    tokio::time::timeout(PATIENCE, server.wait())
        .await
        .expect("serve stops on SIGTERM")
        .expect("wait");

    let (list, _) = output(dir.path(), &model, &["runs", "list"], true).await;
    let (events, _) = output(dir.path(), &model, &["runs", "events", &run_id], true).await;
    events_and_list(&list, &events, "from the store");
    // The JSON keeps the name whole: nothing stored was lost.
    let (json_events, _) = output(
        dir.path(),
        &model,
        &["runs", "events", &run_id, "--json"],
        true,
    )
    .await;
    assert_printable("runs events --json", &json_events);
    let started = json_events
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("one JSON event a line"))
        .find(|event| event["kind"] == "run_started")
        .unwrap_or_else(|| panic!("a run_started event in {json_events}"));
    assert_eq!(started["flow"], HOSTILE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_tool_call_and_answer_are_printed_as_text_by_the_readable_log_of_run() {
    let dir = tempfile::tempdir().expect("dir");
    let model = model(vec![
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "\u{1b}[2Jwipe\nforged", "arguments": "{}"}}]}),
        json!({"role": "assistant", "content": format!("line one\n{HOSTILE}")}),
    ])
    .await;
    let flow = dir.path().join("flow.toml");
    std::fs::write(&flow, "name = \"plain\"\ntask = \"t\"\nmax_steps = 5\n").expect("flow");
    let flow = flow.display().to_string();
    let (stdout, stderr) = output(dir.path(), &model, &["run", &flow], true).await;
    assert_printable("leasehold run's log", &stdout);
    assert_printable("leasehold run's stderr", &stderr);
    let (events, answer) = stdout
        .split_once("\nanswer: ")
        .unwrap_or_else(|| panic!("an answer in {stdout}"));
    assert_event_lines("leasehold run's log", events);
    assert!(events.contains(r"\u{1b}[2Jwipe\nforged"), "{events}");
    // The answer keeps its lines, each after the first indented.
    assert_eq!(
        answer.trim_end(),
        "line one\n  report\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\n  forged row\\r\\u{202e}"
    );
}
