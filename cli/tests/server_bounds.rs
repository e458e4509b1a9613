//! What one client can make a real `leasehold serve` hold: the runs
//! waiting queued (`server.max_queued_runs`), a run's task, flow and a
//! person's guidance (`limits.task`, `limits.flow`, `limits.guidance`), and
//! a listing's size (summaries, never whole tasks). Each test drives the
//! binary over HTTP with what a hostile client would send, and checks that
//! the store keeps only what the bounds allow and loses nothing it held.
//!
//! The model is a gate that never answers: a run the server starts stays
//! running, so with `server.max_live_runs = 1` every later run waits
//! queued, without timing.

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

use std::path::Path;
use std::process::Stdio;

use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};
use support::PATIENCE;

/// A model endpoint that takes every chat completion and never answers.
async fn silent_model() -> String {
    let app = Router::new().route("/v1/chat/completions", post(std::future::pending::<String>));
    let addr = support::serve_peer(app).await;
    format!("{addr}/v1")
}

/// `leasehold` with the data directory `data`, the model `model`, one
/// live run at most, and `env` besides.
fn one_live_run(data: &Path, model: &str, env: &[(&str, &str)]) -> support::Leasehold {
    support::leasehold(data)
        .model(model, "silent")
        .with_env("LEASEHOLD_SERVER_MAX_LIVE_RUNS", "1")
        .with_envs(env)
}

/// A flow of `task`.
fn flow(task: &str) -> Value {
    json!({"name": "bounded", "task": task, "max_steps": 1, "stream": false})
}

/// `POST /runs` of `body`: the status, the `Retry-After` header and the
/// JSON answer.
async fn post_flow(
    http: &reqwest::Client,
    base: &str,
    body: &Value,
) -> (u16, Option<String>, Value) {
    let response = http
        .post(format!("{base}/runs"))
        .json(body)
        .send()
        .await
        .expect("POST /runs");
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, retry_after, response.json().await.expect("JSON"))
}

/// `GET {base}{path}`: the body's length in bytes, and its JSON.
async fn get(http: &reqwest::Client, base: &str, path: &str) -> (usize, Value) {
    let bytes = http
        .get(format!("{base}{path}"))
        .send()
        .await
        .expect("GET")
        .bytes()
        .await
        .expect("a body");
    let json = serde_json::from_slice(&bytes).expect("JSON");
    (bytes.len(), json)
}

/// The runs of the first page of `GET /runs?limit=500`, as `(id, task)`.
async fn listed(http: &reqwest::Client, base: &str) -> Vec<(String, String)> {
    let (_, page) = get(http, base, "/runs?limit=500").await;
    page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| {
            (
                run["run_id"].as_str().expect("an id").to_owned(),
                run["task"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Every byte under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("a directory").flatten() {
        let meta = entry.metadata().expect("metadata");
        total += if meta.is_dir() {
            bytes_under(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// A task of `bytes` bytes (two per character) that says which run it is.
fn task(n: usize, bytes: usize) -> String {
    let head = format!("run {n}: ");
    let fill = bytes.saturating_sub(head.len()) / 2;
    format!("{head}{}", "é".repeat(fill))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posts_past_the_queue_cap_are_refused_with_429_and_the_store_stays_bounded() {
    let data = tempfile::tempdir().expect("a data directory");
    let model = silent_model().await;
    let command = one_live_run(
        data.path(),
        &model,
        &[("LEASEHOLD_SERVER_MAX_QUEUED_RUNS", "3")],
    );
    let (_server, base) = support::serve(command, &[], PATIENCE).await;
    let http = reqwest::Client::new();

    // One run takes the executor's only place; three wait queued.
    let mut kept = Vec::new();
    for n in 0..4 {
        let task = task(n, 60_000);
        let (status, _, body) = post_flow(&http, &base, &flow(&task)).await;
        assert_eq!(status, 201, "{body}");
        let expected = if n == 0 { "running" } else { "queued" };
        assert_eq!(body["status"], expected, "{body}");
        kept.push((body["run_id"].as_str().expect("an id").to_owned(), task));
    }
    let before = bytes_under(data.path());

    // Past the cap every post is refused, and nothing of it is stored.
    let refused: u64 = 20;
    for n in 0..refused {
        let (status, retry_after, body) = post_flow(
            &http,
            &base,
            &flow(&task(100 + usize::try_from(n).unwrap(), 60_000)),
        )
        .await;
        assert_eq!(status, 429, "{body}");
        assert_eq!(body["error"]["code"], "queue_full", "{body}");
        let message = body["error"]["message"].as_str().expect("a message");
        assert!(message.contains("server.max_queued_runs = 3"), "{message}");
        assert!(message.contains("nothing was stored"), "{message}");
        assert_eq!(retry_after.as_deref(), Some("30"));
    }
    let listed = listed(&http, &base).await;
    assert_eq!(
        listed.len(),
        kept.len(),
        "only the runs within the cap are stored"
    );
    // Refused, they would have added 1.2 MB; the slack is for sled, which
    // may open a log segment of its own for the running run's writes.
    let grown = bytes_under(data.path()).saturating_sub(before);
    assert!(
        grown < refused * 60_000 / 2,
        "the data directory grew by {grown} bytes over {refused} refused posts of 60 kB"
    );

    // What was stored before is whole.
    for (run_id, task) in &kept {
        let view = support::get_run(&http, &base, run_id).await;
        assert_eq!(view["task"].as_str(), Some(task.as_str()), "run {run_id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_cap_counts_the_runs_queued_through_every_executor_sharing_the_store() {
    let (_cluster, url) = postgres::database().await;
    let data = tempfile::tempdir().expect("a data directory");
    let model = silent_model().await;
    let env = [
        ("LEASEHOLD_STORE", url.as_str()),
        ("LEASEHOLD_SERVER_MAX_QUEUED_RUNS", "2"),
    ];
    let (_a, base_a) = support::serve(one_live_run(data.path(), &model, &env), &[], PATIENCE).await;
    let (_b, base_b) = support::serve(one_live_run(data.path(), &model, &env), &[], PATIENCE).await;
    let http = reqwest::Client::new();

    // Each executor starts one run and is full; then each queues one, and
    // the store's queue is full for both.
    let mut expected = vec![("running", &base_a), ("running", &base_b)];
    expected.extend([("queued", &base_a), ("queued", &base_b)]);
    for (n, (status, base)) in expected.into_iter().enumerate() {
        let (code, _, body) = post_flow(&http, base, &flow(&task(n, 1_000))).await;
        assert_eq!(code, 201, "{body}");
        assert_eq!(body["status"], status, "post {n} to {base}: {body}");
    }
    for base in [&base_a, &base_b, &base_a] {
        let (code, retry_after, body) = post_flow(&http, base, &flow("one more")).await;
        assert_eq!(code, 429, "{base}: {body}");
        assert_eq!(body["error"]["code"], "queue_full", "{body}");
        assert!(retry_after.is_some());
    }
    assert_eq!(listed(&http, &base_b).await.len(), 4);
}

/// `kill SIGNAL` to `child`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controls_waiting_for_a_hung_owner_are_capped_per_run_and_applied_once_it_goes_on() {
    let (_cluster, url) = postgres::database().await;
    let data = tempfile::tempdir().expect("a data directory");
    let model = silent_model().await;
    let env = [("LEASEHOLD_STORE", url.as_str())];
    let (owner, base_owner) =
        support::serve(one_live_run(data.path(), &model, &env), &[], PATIENCE).await;
    let (_other, base_other) =
        support::serve(one_live_run(data.path(), &model, &env), &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let (code, _, body) = post_flow(&http, &base_owner, &flow("held")).await;
    assert_eq!((code, &body["status"]), (201, &json!("running")), "{body}");
    let run_id = body["run_id"].as_str().expect("an id").to_owned();

    // The owner hangs with its lease live: controls sent to the other
    // executor wait in the store for it, and only so many.
    support::signal(&owner, "-STOP");
    let cancel = |n: u64| {
        http.post(format!("{base_other}/runs/{run_id}/cancel"))
            .json(&json!({"reason": format!("cancel {n} {}", "r".repeat(60_000))}))
            .send()
    };
    for n in 0..16 {
        let response = cancel(n).await.expect("POST cancel");
        assert_eq!(response.status(), 202, "control {n}");
    }
    for n in 16..40 {
        let response = cancel(n).await.expect("POST cancel");
        assert_eq!(response.status(), 429, "control {n}");
        assert!(response.headers().contains_key("retry-after"));
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body["error"]["code"], "too_many_commands", "{body}");
    }

    // Once the owner goes on, it takes what waited: the run is cancelled,
    // by the first control.
    support::signal(&owner, "-CONT");
    let view = support::view_until(&http, &base_other, &run_id, PATIENCE, "cancelled", |v| {
        v["status"] == "cancelled"
    })
    .await;
    assert!(
        view["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("cancel 0 ")),
        "{view}"
    );
    drop(owner);
    let _ = base_owner;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_a_flow_or_guidance_past_its_limit_is_refused_naming_the_key_and_nothing_is_stored()
{
    let data = tempfile::tempdir().expect("a data directory");
    let model = silent_model().await;

    // `leasehold run` of a file whose task is too long starts nothing.
    let file = data.path().join("long.json");
    std::fs::write(&file, flow(&"t".repeat(70_000)).to_string()).expect("write the flow");
    let run = one_live_run(data.path(), &model, &[])
        .arg("run")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run starts");
    let ran = tokio::time::timeout(PATIENCE, run.wait_with_output())
        .await
        .expect("`leasehold run` refuses at once")
        .expect("its output");
    let said = String::from_utf8_lossy(&ran.stderr);
    assert!(!ran.status.success(), "{said}");
    assert!(said.contains("limits.task"), "{said}");
    assert!(said.contains("70000 bytes"), "{said}");

    let (_server, base) =
        support::serve(one_live_run(data.path(), &model, &[]), &[], PATIENCE).await;
    let http = reqwest::Client::new();
    assert!(
        listed(&http, &base).await.is_empty(),
        "`leasehold run` stored nothing"
    );

    let (status, _, body) = post_flow(&http, &base, &flow(&"t".repeat(70_000))).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "too_large", "{body}");
    let message = body["error"]["message"].as_str().expect("a message");
    for said in [
        "the task",
        "70000 bytes",
        "65536 bytes",
        "limits.task",
        "LEASEHOLD_LIMITS_TASK",
    ] {
        assert!(message.contains(said), "{said}: {message}");
    }

    let mut whole = flow("short");
    whole["system_prompt"] = Value::from("p".repeat(300_000));
    let (status, _, body) = post_flow(&http, &base, &whole).await;
    assert_eq!(status, 413, "{body}");
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(message.contains("limits.flow"), "{message}");
    assert!(
        listed(&http, &base).await.is_empty(),
        "nothing refused was stored"
    );

    // A person's guidance is bounded too; the run it was for is untouched.
    let (status, _, body) = post_flow(&http, &base, &flow("kept")).await;
    assert_eq!(status, 201, "{body}");
    let run_id = body["run_id"].as_str().expect("an id").to_owned();
    let response = http
        .post(format!("{base}/runs/{run_id}/resume"))
        .json(&json!({"guidance": "g".repeat(70_000)}))
        .send()
        .await
        .expect("POST resume");
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.expect("JSON");
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(message.contains("limits.guidance"), "{message}");
    let view = support::get_run(&http, &base, &run_id).await;
    assert_eq!(view["task"], "kept", "{view}");
    assert_eq!(view["status"], "running", "{view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_many_large_runs_is_a_bounded_page_of_summaries_and_a_run_shows_its_whole_task()
 {
    let data = tempfile::tempdir().expect("a data directory");
    let model = silent_model().await;
    let (_server, base) =
        support::serve(one_live_run(data.path(), &model, &[]), &[], PATIENCE).await;
    let http = reqwest::Client::new();

    let runs = 40;
    let mut tasks = std::collections::HashMap::new();
    for n in 0..runs {
        let task = task(n, 60_000);
        let (status, _, body) = post_flow(&http, &base, &flow(&task)).await;
        assert_eq!(status, 201, "{body}");
        tasks.insert(body["run_id"].as_str().expect("an id").to_owned(), task);
    }

    // 40 tasks of 60 kB are 2.4 MB; the page holds their first characters.
    let (size, page) = get(&http, &base, "/runs?limit=500").await;
    let listed = page["runs"].as_array().expect("runs");
    assert_eq!(listed.len(), runs);
    assert!(
        size < 64 * 1024,
        "a page of {runs} runs is {size} bytes: not summaries"
    );
    for run in listed {
        let run_id = run["run_id"].as_str().expect("an id");
        let shown = run["task"].as_str().expect("a task");
        assert_eq!(shown.chars().count(), leasehold::SUMMARY_CHARS, "{run_id}");
        assert!(tasks[run_id].starts_with(shown), "{run_id}: {shown}");
        assert_eq!(run["truncated"], json!(["task"]), "{run}");
        assert!(run.get("flow").is_none(), "{run}");
    }

    // One run, asked for, is whole.
    let (run_id, task) = tasks.iter().next().expect("a run");
    let view = support::get_run(&http, &base, run_id).await;
    assert_eq!(view["task"].as_str(), Some(task.as_str()));
    assert_eq!(view["flow"]["task"].as_str(), Some(task.as_str()));
    assert!(view.get("truncated").is_none(), "{view}");

    // The command line lists the same page through the server.
    let listing = one_live_run(data.path(), &model, &[])
        .args(["runs", "list", "--limit", "500", "--server", &base])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .expect("runs list");
    assert!(
        listing.status.success(),
        "{}",
        String::from_utf8_lossy(&listing.stderr)
    );
    let rows = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter(|line| tasks.keys().any(|id| line.starts_with(id.as_str())))
        .count();
    assert_eq!(rows, runs);
}

/// `leasehold serve` runs with transparent huge pages off (`THP_enabled:
/// 0` in its `/proc` status): a server of many small, short-lived
/// allocations would otherwise fault memory in, and zero it, 2 MiB at a
/// time — a quarter of a swarm's CPU (`docs/benchmarks.md`, *Swarm*).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_runs_without_transparent_huge_pages() {
    let data = tempfile::tempdir().expect("a data directory");
    let model = silent_model().await;
    let (server, _base) =
        support::serve(one_live_run(data.path(), &model, &[]), &[], PATIENCE).await;
    let pid = server.id().expect("serve runs");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let thp: Vec<&str> = status
        .lines()
        .filter(|line| line.starts_with("THP_enabled:"))
        .collect();
    assert_eq!(thp, ["THP_enabled:\t0"], "{status}");
}
