//! A person's hands on a running run, through real processes: a run that
//! one `leasehold serve` runs on a shared PostgreSQL store is paused
//! through another (its call in flight stopped), resumed there, and one
//! of its leases stopped from the command line and extended over the API,
//! each forwarded to its owner and recorded as a person's verdict; on one
//! server, `leasehold runs --server URL pause|lease` pause it with its call
//! left to finish and refuse to extend a lease while its clocks are
//! stopped.
//!
//! The model is the embedded demo's scripted server; the tool server is
//! the hanging stdio MCP server of `support/hanging_tool.rs`, which never
//! answers a call.

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

use std::path::Path;
use std::sync::Arc;

use leasehold::store::{PostgresConfig, PostgresStore};
use leasehold::{DecidedBy, Event, EventKind, EventLog, LeaseId, RunStatus, RunStore, Verdict};
use leasehold_cli::demo::DemoStack;
use reqwest::StatusCode;
use serde_json::json;
use tokio::process::Child;

use support::PATIENCE;
use support::hanging_tool::Hanging;

/// The API token (a posted flow may name its tool server only with one).
const TOKEN: &str = "by-hand-test-token";

/// `leasehold serve` on the PostgreSQL store `store` and the demo's model.
fn serve_on_store(store: &str, stack: &DemoStack) -> Child {
    let command = support::leasehold_on_store(store)
        .demo_model(stack)
        .api_token(TOKEN);
    support::start_serve(command, "127.0.0.1:0", &["--allow-flow-tools"])
}

fn flow_json(flow: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(flow).expect("flow")).expect("JSON")
}

async fn open(url: &str) -> Arc<PostgresStore> {
    Arc::new(
        PostgresStore::connect(PostgresConfig::new(url))
            .await
            .expect("the store"),
    )
}

/// Reads the store until the run's log holds an event `found` picks.
async fn logged<T>(
    store: &PostgresStore,
    run_id: &str,
    what: &str,
    found: impl Fn(&[Event]) -> Option<T>,
) -> T {
    support::until(
        &format!("{what} in the log of {run_id}"),
        PATIENCE,
        || async {
            let events = store.load_events(run_id, 0).await.expect("events");
            found(&events)
        },
    )
    .await
}

/// The lease of the tool call's attempt `attempt`, as its start names it.
fn call_lease(events: &[Event], attempt: u32) -> Option<LeaseId> {
    events.iter().find_map(|e| match &e.kind {
        EventKind::ToolCallStarted {
            attempt: a,
            lease_id,
            ..
        } if *a == attempt => *lease_id,
        _ => None,
    })
}

/// A person's verdict on `lease`, once logged.
fn persons_verdict(events: &[Event], lease: LeaseId) -> Option<(Verdict, String)> {
    events.iter().find_map(|e| match &e.kind {
        EventKind::Verdict(record)
            if record.lease_id == lease && record.decided_by == DecidedBy::Person =>
        {
            Some((record.verdict, record.reason.clone()))
        }
        _ => None,
    })
}

async fn status_becomes(store: &PostgresStore, run_id: &str, status: RunStatus) {
    support::until(
        &format!("{run_id} to become {status:?}"),
        PATIENCE,
        || async {
            let record = store.load_run(run_id).await.expect("load").expect("run");
            (record.status == status).then_some(())
        },
    )
    .await;
}

async fn post(
    http: &reqwest::Client,
    url: String,
    body: serde_json::Value,
) -> (StatusCode, serde_json::Value) {
    let answer = http.post(&url).json(&body).send().await.expect("POST");
    let status = answer.status();
    (status, answer.json().await.expect("JSON"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_resumed_and_its_leases_handled_through_another_executor_on_postgres() {
    let (_cluster, url) = postgres::database().await;
    let store = open(&url).await;
    let hanging = Hanging::start().await;
    let http = support::authorized(TOKEN);
    let mut a = serve_on_store(&url, &hanging.stack);
    let base_a = support::served_base(&mut a, PATIENCE).await;
    let owner = support::owner_id(&http, &base_a).await;
    let run_id = support::post_run(&http, &base_a, &flow_json(&hanging.flow)).await;
    let first = logged(&store, &run_id, "the call's start", |e| call_lease(e, 1)).await;
    let mut b = serve_on_store(&url, &hanging.stack);
    let base_b = support::served_base(&mut b, PATIENCE).await;

    // Paused through B, its hanging call stopped: forwarded to A.
    let (status, body) = post(
        &http,
        format!("{base_b}/runs/{run_id}/pause"),
        json!({"reason": "a look at the index", "in_flight": "cancel", "by": "ana"}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["forwarded_to"], owner.as_str(), "{body}");
    status_becomes(&store, &run_id, RunStatus::WaitingHuman).await;
    let stopped = logged(&store, &run_id, "a person's verdict", |e| {
        persons_verdict(e, first)
    })
    .await;
    assert_eq!(stopped.0, Verdict::Intervene);
    assert!(stopped.1.starts_with("stopped by ana"), "{}", stopped.1);
    let events = store.load_events(&run_id, 0).await.expect("events");
    assert!(
        events.iter().any(|e| matches!(&e.kind,
            EventKind::Paused { by: Some(by), reason, .. } if by == "ana" && reason == "a look at the index")),
        "the pause says who asked and why"
    );
    let view = support::get_run(&http, &base_b, &run_id).await;
    assert_eq!(view["status"], "waiting_human", "{view}");
    assert_eq!(
        view["pause"]["reason"], "ana paused the run: a look at the index",
        "{view}"
    );
    // Nothing is made again while it is paused; a second pause is refused.
    assert!(call_lease(&store.load_events(&run_id, 0).await.expect("events"), 2).is_none());
    let (status, body) = post(&http, format!("{base_b}/runs/{run_id}/pause"), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("is already paused")),
        "{body}"
    );

    // Resumed through B: the call is made again, under a lease of its own.
    let (status, body) = post(
        &http,
        format!("{base_b}/runs/{run_id}/resume"),
        json!({"guidance": "the new index"}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let second = logged(&store, &run_id, "the call made again", |e| call_lease(e, 2)).await;
    assert_eq!(
        store
            .load_run(&run_id)
            .await
            .expect("load")
            .expect("run")
            .status,
        RunStatus::Running
    );

    // Extended over B's API, then stopped from the command line: both
    // forwarded to A, each a person's verdict on the lease.
    let (status, body) = post(
        &http,
        format!("{base_b}/runs/{run_id}/leases/{second}/extend"),
        json!({"duration": "30s", "by": "ana"}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let extended = logged(&store, &run_id, "the extension", |e| {
        persons_verdict(e, second)
    })
    .await;
    assert_eq!(
        extended,
        (Verdict::Renew, "extended by 30s by ana".to_owned())
    );
    let out = tokio::time::timeout(
        PATIENCE,
        support::clean_leasehold()
            .args(["runs", "lease", &run_id, &second.to_string(), "--intervene"])
            .args(["--reason", "still hung", "--by", "bo", "--store", &url])
            .output(),
    )
    .await
    .expect("runs lease ends in time")
    .expect("runs lease");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("lease applied by {owner}")),
        "says the owner applied it: {said}"
    );
    let third = logged(&store, &run_id, "the call made a third time", |e| {
        call_lease(e, 3)
    })
    .await;
    let events = store.load_events(&run_id, 0).await.expect("events");
    let stops: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Verdict(r) if r.decided_by == DecidedBy::Person => {
                Some((r.lease_id, r.verdict, r.reason.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        stops.last(),
        Some(&(
            second,
            Verdict::Intervene,
            "stopped by bo: still hung".to_owned()
        )),
        "{stops:?}"
    );

    // A lease that is no longer in flight is refused by its owner, and the
    // refusal is logged on the run.
    let (status, body) = post(
        &http,
        format!("{base_a}/runs/{run_id}/leases/{first}/intervene"),
        json!({}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("{first} of run {run_id} was not stopped"))),
        "{body}"
    );
    assert_ne!(third, second);

    let (status, _) = post(&http, format!("{base_a}/runs/{run_id}/cancel"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    status_becomes(&store, &run_id, RunStatus::Cancelled).await;
    for mut server in [a, b] {
        server.start_kill().expect("stop");
        server.wait().await.expect("reaped");
    }
    hanging.stack.shutdown().await;
}

/// `leasehold runs --server BASE ARGS` with the token, once it ended.
async fn over_server(base: &str, args: &[&str]) -> std::process::Output {
    tokio::time::timeout(
        PATIENCE,
        support::clean_leasehold()
            .env("LEASEHOLD_API_TOKEN", TOKEN)
            .args(["runs", "--server", base])
            .args(args)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("`leasehold runs {args:?}` did not end within {PATIENCE:?}"))
    .expect("leasehold runs")
}

/// The run's logged events, as `leasehold runs --server BASE events ID
/// --json` prints them.
async fn events_over_server(base: &str, run_id: &str) -> Vec<Event> {
    let out = over_server(base, &["events", run_id, "--json"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("an event"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_pause_and_lease_over_the_server_pause_a_run_and_refuse_what_cannot_apply() {
    let hanging = Hanging::start().await;
    let http = support::authorized(TOKEN);
    let command = support::hanging_tool::leasehold(&hanging.data, &hanging.model).api_token(TOKEN);
    let mut server = support::start_serve(command, "127.0.0.1:0", &["--allow-flow-tools"]);
    let base = support::served_base(&mut server, PATIENCE).await;
    let run_id = support::post_run(&http, &base, &flow_json(&hanging.flow)).await;
    let lease = support::until("the call's start", PATIENCE, || async {
        call_lease(&events_over_server(&base, &run_id).await, 1)
    })
    .await;

    let out = over_server(&base, &["pause", &run_id, "--reason", "lunch"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(answer["status"], "waiting_human", "{answer}");
    let view = support::get_run(&http, &base, &run_id).await;
    assert_eq!(
        view["pause"]["reason"], "a person at the command line paused the run: lunch",
        "{view}"
    );

    // The call in flight was left to run: no person's verdict, and its
    // lease is not extended while the run's clocks are stopped.
    let out = over_server(
        &base,
        &["lease", &run_id, &lease.to_string(), "--extend", "30s"],
    )
    .await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("its clocks are stopped"), "{said}");
    let events = events_over_server(&base, &run_id).await;
    assert_eq!(persons_verdict(&events, lease), None);
    // An absurd extension is refused before anything is sent.
    let out = over_server(
        &base,
        &["lease", &run_id, &lease.to_string(), "--extend", "3days"],
    )
    .await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("longer than a day"), "{said}");

    // Resumed, the same lease is extended.
    let (status, body) = post(&http, format!("{base}/runs/{run_id}/resume"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let out = over_server(
        &base,
        &["lease", &run_id, &lease.to_string(), "--extend", "1m"],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = events_over_server(&base, &run_id).await;
    assert_eq!(
        persons_verdict(&events, lease),
        Some((
            Verdict::Renew,
            "extended by 1m by a person at the command line".to_owned()
        ))
    );

    server.start_kill().expect("stop");
    server.wait().await.expect("reaped");
    hanging.stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_to_a_served_run_are_enqueued_refused_when_busy_and_rolled_back_into_a_fork() {
    let hanging = Hanging::start().await;
    let http = support::authorized(TOKEN);
    let command = support::hanging_tool::leasehold(&hanging.data, &hanging.model).api_token(TOKEN);
    let mut server = support::start_serve(command, "127.0.0.1:0", &["--allow-flow-tools"]);
    let base = support::served_base(&mut server, PATIENCE).await;
    let run_id = support::post_run(&http, &base, &flow_json(&hanging.flow)).await;
    support::until("the call's start", PATIENCE, || async {
        call_lease(&events_over_server(&base, &run_id).await, 1)
    })
    .await;

    // Enqueued: logged with who sent it, nothing stopped.
    let out = over_server(
        &base,
        &["steer", &run_id, "only the error log", "--by", "ana"],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = events_over_server(&base, &run_id).await;
    assert!(
        events.iter().any(|e| matches!(&e.kind,
            EventKind::MessageReceived { text, policy, by }
                if text == "only the error log" && policy == "enqueue" && by == "ana")),
        "the message is in the run's log"
    );
    let trace = support::get_json(&http, &format!("{base}/runs/{run_id}/trace")).await;
    assert!(
        trace["entries"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["kind"] == "message_received")),
        "the message is in the trace: {trace}"
    );
    // Refused while the run runs, with `reject`; an empty message is no
    // message.
    let (status, body) = post(
        &http,
        format!("{base}/runs/{run_id}/messages"),
        json!({"text": "hello", "policy": "reject"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("is busy (running)")),
        "{body}"
    );
    let (status, body) = post(
        &http,
        format!("{base}/runs/{run_id}/messages"),
        json!({"text": "  "}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");

    // Rolled back: a fork before the root's current step holds the
    // message as its guidance, and the run is cancelled.
    let (status, body) = post(
        &http,
        format!("{base}/runs/{run_id}/messages"),
        json!({"text": "start over with the new index", "policy": "rollback", "by": "ana"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let fork_id = body["run_id"].as_str().expect("the fork's id").to_owned();
    assert_eq!(body["rolled_back"]["run_id"], run_id.as_str(), "{body}");
    let fork = support::get_run(&http, &base, &fork_id).await;
    assert_eq!(fork["fork"]["parent"], run_id.as_str(), "{fork}");
    assert_eq!(
        fork["fork"]["guidance"], "start over with the new index",
        "{fork}"
    );
    let view = support::view_until(&http, &base, &run_id, PATIENCE, "cancelled", |v| {
        v["status"] == "cancelled"
    })
    .await;
    assert!(
        view["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&format!("rolled back by ana into run {fork_id}"))),
        "{view}"
    );
    let (status, _) = post(&http, format!("{base}/runs/{fork_id}/cancel"), json!({})).await;
    assert_eq!(status, StatusCode::OK);

    server.start_kill().expect("stop");
    server.wait().await.expect("reaped");
    hanging.stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_many_lists_by_a_dry_run_then_pauses_the_runs_of_a_flow_and_the_api_cancels_them() {
    const RUNS: usize = 3;
    let hanging = Hanging::start().await;
    let http = support::authorized(TOKEN);
    let command = support::hanging_tool::leasehold(&hanging.data, &hanging.model).api_token(TOKEN);
    let mut server = support::start_serve(command, "127.0.0.1:0", &["--allow-flow-tools"]);
    let base = support::served_base(&mut server, PATIENCE).await;
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let run_id = support::post_run(&http, &base, &flow_json(&hanging.flow)).await;
        support::until("the call's start", PATIENCE, || async {
            call_lease(&events_over_server(&base, &run_id).await, 1)
        })
        .await;
        runs.push(run_id);
    }
    let flow = flow_json(&hanging.flow)["name"]
        .as_str()
        .expect("the flow's name")
        .to_owned();

    let out = over_server(&base, &["many", "pause", "--flow", &flow, "--dry-run"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dry: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(dry["dry_run"], true, "{dry}");
    let listed: Vec<&str> = dry["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["run_id"].as_str().expect("an id"))
        .collect();
    assert_eq!(listed.len(), RUNS, "{dry}");
    assert!(runs.iter().all(|r| listed.contains(&r.as_str())), "{dry}");
    for run_id in &runs {
        let view = support::get_run(&http, &base, run_id).await;
        assert_eq!(
            view["status"], "running",
            "a dry run touches nothing: {view}"
        );
    }

    let out = over_server(&base, &["many", "pause", "--flow", &flow, "--by", "ops"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(
        report["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .all(|r| r["outcome"] == "applied" && r["now"] == "waiting_human"),
        "{report}"
    );
    for run_id in &runs {
        let view = support::get_run(&http, &base, run_id).await;
        assert_eq!(view["status"], "waiting_human", "{view}");
    }
    // Without a filter it would be every run: refused.
    let (status, body) = post(
        &http,
        format!("{base}/runs/actions"),
        json!({"action": "cancel"}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = post(
        &http,
        format!("{base}/runs/actions"),
        json!({"action": "cancel", "status": "waiting_human", "reason": "maintenance"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["runs"].as_array().map(Vec::len), Some(RUNS), "{body}");
    for run_id in &runs {
        let view = support::get_run(&http, &base, run_id).await;
        assert_eq!(view["status"], "cancelled", "{view}");
        assert_eq!(view["reason"], "maintenance", "{view}");
    }

    server.start_kill().expect("stop");
    server.wait().await.expect("reaped");
    hanging.stack.shutdown().await;
}
