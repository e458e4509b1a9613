//! A retry never starts a run twice, through real processes: the same
//! `Idempotency-Key` posted at once to two `leasehold serve` sharing a
//! PostgreSQL store gets one run (one `201`, one `200` naming it), a key
//! reused with another flow is a `422`, and a malformed key a `400`; on a
//! data directory, `leasehold run --idempotency-key` run twice starts one
//! run and says so.

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

use std::path::Path;

use leasehold::store::{PostgresConfig, PostgresStore};
use leasehold::{RunQuery, RunStore};
use leasehold_cli::demo::DemoStack;
use reqwest::StatusCode;
use tokio::process::Child;

use support::PATIENCE;
use support::hanging_tool::Hanging;

const TOKEN: &str = "idempotency-test-token";

fn serve_on_store(store: &str, stack: &DemoStack) -> Child {
    let command = support::leasehold_on_store(store)
        .demo_model(stack)
        .api_token(TOKEN);
    support::start_serve(command, "127.0.0.1:0", &["--allow-flow-tools"])
}

fn flow_json(flow: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(flow).expect("flow")).expect("JSON")
}

async fn post_keyed(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    flow: &serde_json::Value,
) -> (StatusCode, serde_json::Value) {
    let answer = http
        .post(format!("{base}/runs"))
        .header("Idempotency-Key", key)
        .json(flow)
        .send()
        .await
        .expect("POST /runs");
    let status = answer.status();
    (status, answer.json().await.expect("JSON"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_posted_at_once_to_two_executors_starts_one_run() {
    let (_cluster, url) = postgres::database().await;
    let store = PostgresStore::connect(PostgresConfig::new(&url))
        .await
        .expect("the store");
    let hanging = Hanging::start().await;
    let http = support::authorized(TOKEN);
    let mut a = serve_on_store(&url, &hanging.stack);
    let mut b = serve_on_store(&url, &hanging.stack);
    let base_a = support::served_base(&mut a, PATIENCE).await;
    let base_b = support::served_base(&mut b, PATIENCE).await;
    let flow = flow_json(&hanging.flow);

    for round in 0..3 {
        let key = format!("order-{round}");
        let (first, second) = tokio::join!(
            post_keyed(&http, &base_a, &key, &flow),
            post_keyed(&http, &base_b, &key, &flow),
        );
        let mut statuses = [first.0, second.0];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::OK, StatusCode::CREATED],
            "{first:?} {second:?}"
        );
        assert_eq!(
            first.1["run_id"], second.1["run_id"],
            "{first:?} {second:?}"
        );
        let replayed = if first.0 == StatusCode::OK {
            &first.1
        } else {
            &second.1
        };
        assert_eq!(replayed["replayed"], true, "{replayed}");
    }
    let stored = store
        .list_runs_page(&RunQuery::first(100))
        .await
        .expect("runs");
    assert_eq!(stored.runs.len(), 3, "one run a key");

    // A retry later, to either executor, is the same run.
    let (status, again) = post_keyed(&http, &base_b, "order-0", &flow).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    // The key reused for another flow is refused, and nothing is stored.
    let mut other = flow.clone();
    other["task"] = serde_json::Value::String("Something else entirely.".into());
    let (status, refused) = post_keyed(&http, &base_a, "order-0", &other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(
        refused["error"]["code"], "idempotency_key_reused",
        "{refused}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("order-0") && m.contains("another flow")),
        "{refused}"
    );
    // A key that is no key is refused before anything is stored.
    let (status, refused) = post_keyed(&http, &base_a, &"k".repeat(300), &flow).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["code"], "bad_idempotency_key", "{refused}");
    let stored = store
        .list_runs_page(&RunQuery::first(100))
        .await
        .expect("runs");
    assert_eq!(stored.runs.len(), 3, "nothing more was stored");

    for mut server in [a, b] {
        server.start_kill().expect("stop");
        server.wait().await.expect("reaped");
    }
    hanging.stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leasehold_run_with_a_key_twice_starts_one_run() {
    let hanging = Hanging::start().await;
    // The first run: stopped by a signal once its call hangs, resumable.
    let mut first = support::hanging_tool::leasehold(&hanging.data, &hanging.model)
        .arg("run")
        .arg(&hanging.flow)
        .args(["--json", "--idempotency-key", "nightly-2026-12-06"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
        first.stdout.take().expect("stdout"),
    ));
    let run_id = support::hanging_tool::until_a_tool_call_hangs(&mut lines, PATIENCE).await;
    support::signal(&first, "-TERM");
    tokio::time::timeout(PATIENCE, first.wait())
        .await
        .expect("the first run stops on SIGTERM")
        .expect("wait");

    let out = tokio::time::timeout(
        PATIENCE,
        support::hanging_tool::leasehold(&hanging.data, &hanging.model)
            .arg("run")
            .arg(&hanging.flow)
            .args(["--idempotency-key", "nightly-2026-12-06"])
            .output(),
    )
    .await
    .expect("the retry ends at once")
    .expect("run");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!(
            "idempotency key `nightly-2026-12-06` already started run {run_id}"
        )),
        "{said}"
    );
    hanging.stack.shutdown().await;
}
