//! A person's controls from anywhere on a shared PostgreSQL store, through
//! real processes: `leasehold runs cancel ID --store postgres://…`, run as
//! a process of its own, forwards the cancel to the executor that runs the
//! run — a `leasehold serve` or a `leasehold run` — which cancels it, its
//! hanging tool call with it; a resume of a run that waits for a decision
//! is refused with one message by the command line and by the API; a
//! decision made on the command line reaches the run's owner; a control
//! the owner refuses is logged on the run as `control_refused`. On a sled
//! data directory, a control of a run whose executor was killed is refused
//! at once with its lease's end.
//!
//! The model is the embedded demo's scripted server; the tool server is
//! the hanging stdio MCP server of `support/hanging_tool.rs`, which never
//! answers a call and starts a `sleep` in its process group.

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use leasehold::executor::{Executor, ExecutorOptions};
use leasehold::store::{PostgresConfig, PostgresStore};
use leasehold::testing::{ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct, Turn};
use leasehold::{
    Engine, EngineConfig, EventLog, QueueStore, RunCommand, RunStatus, RunStore, Store,
};
use leasehold_cli::demo::DemoStack;
use reqwest::StatusCode;
use serde_json::json;
use tokio::process::Child;

use support::PATIENCE;
use support::hanging_tool::{Hanging, group_emptied, last_group, run_until_a_tool_call_hangs};

/// The API token (a posted flow may name its tool server only with one).
const TOKEN: &str = "controls-anywhere-test-token";

/// `leasehold serve` on the PostgreSQL store `store` and the demo's model,
/// taking flows that name their tool server's command, with the variables
/// `env` set too; not yet waited on.
fn serve_on_store(store: &str, stack: &DemoStack, env: &[(&str, &str)]) -> Child {
    let command = support::leasehold_on_store(store)
        .demo_model(stack)
        .api_token(TOKEN)
        .with_envs(env);
    support::start_serve(command, "127.0.0.1:0", &["--allow-flow-tools"])
}

/// The flow file `flow` as the JSON a client posts.
fn flow_json(flow: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(flow).expect("flow")).expect("JSON")
}

/// `server` (started by [`serve_on_store`]) once it listens and runs the flow
/// `flow` posted to it up to its hanging tool call, as `store` logs it: its
/// base URL, its owner id and the run's id.
async fn running_a_hanging_call(
    server: &mut Child,
    store: &PostgresStore,
    flow: &Path,
) -> (String, String, String) {
    let base = support::served_base(server, PATIENCE).await;
    let http = support::authorized(TOKEN);
    let owner = support::owner_id(&http, &base).await;
    let run_id = support::post_run(&http, &base, &flow_json(flow)).await;
    logged(store, &run_id, "tool_call_started").await;
    (base, owner, run_id)
}

/// What a finished command said.
struct Said {
    code: Option<i32>,
    stderr: String,
}

/// `leasehold runs ARGS --store STORE` as a process of its own, with no
/// model configured (forwarding needs none), to its end.
async fn runs(store: &str, args: &[&str]) -> Said {
    runs_with(store, args, &[]).await
}

/// [`runs`] with the variables `env` set too.
async fn runs_with(store: &str, args: &[&str], env: &[(&str, &str)]) -> Said {
    let out = tokio::time::timeout(
        PATIENCE,
        support::clean_leasehold()
            .with_envs(env)
            .arg("runs")
            .args(args)
            .args(["--store", store])
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("`leasehold runs {args:?}` did not end within {PATIENCE:?}"))
    .expect("leasehold runs");
    Said {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn open(url: &str) -> Arc<PostgresStore> {
    Arc::new(
        PostgresStore::connect(PostgresConfig::new(url))
            .await
            .expect("the store"),
    )
}

/// The names of the run's logged events.
async fn kinds(store: &PostgresStore, run_id: &str) -> Vec<String> {
    store
        .load_events(run_id, 0)
        .await
        .expect("events")
        .iter()
        .map(|e| e.kind.name().to_owned())
        .collect()
}

/// Reads the store until the run's log holds an event of `kind`.
async fn logged(store: &PostgresStore, run_id: &str, kind: &str) -> Vec<leasehold::Event> {
    support::until(
        &format!("{kind} in the log of {run_id}"),
        PATIENCE,
        || async {
            let events = store.load_events(run_id, 0).await.expect("events");
            events
                .iter()
                .any(|e| e.kind.name() == kind)
                .then_some(events)
        },
    )
    .await
}

/// Reads the store until the run's status is `status`.
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

/// Asserts that `said` is the command line's report of a cancel it
/// forwarded to `owner`, which applied it.
fn forwarded_and_applied(said: &Said, run_id: &str, owner: &str) {
    assert_eq!(said.code, Some(0), "{}", said.stderr);
    assert!(
        said.stderr
            .contains(&format!("run {run_id}: cancel forwarded to {owner}")),
        "says it forwarded the cancel, and to whom: {}",
        said.stderr
    );
    assert!(
        said.stderr
            .contains(&format!("cancel applied by {owner}: it is cancelled")),
        "says it took effect: {}",
        said.stderr
    );
}

/// The hanging server's process group, once its call hangs, empties once
/// the run is cancelled: the call was cancelled and its server stopped.
async fn call_cancelled(store: &PostgresStore, run_id: &str, record: &Path) {
    let (pgid, _) = last_group(record);
    status_becomes(store, run_id, RunStatus::Cancelled).await;
    let kinds = kinds(store, run_id).await;
    let cancelled = kinds
        .iter()
        .position(|k| k == "lease_cancelled")
        .unwrap_or_else(|| panic!("the hanging call's lease was let go: {kinds:?}"));
    let end = kinds
        .iter()
        .position(|k| k == "run_cancelled")
        .unwrap_or_else(|| panic!("the run's log ends cancelled: {kinds:?}"));
    assert!(cancelled < end, "{kinds:?}");
    assert!(
        group_emptied(pgid, Duration::from_secs(20)).await,
        "the hanging tool server's group {pgid} is left after the cancel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_cancel_on_a_shared_store_cancels_a_run_a_serving_executor_runs() {
    let (_cluster, url) = postgres::database().await;
    let store = open(&url).await;
    let hanging = Hanging::start().await;
    let mut a = serve_on_store(&url, &hanging.stack, &[]);
    let (base, owner, run_id) = running_a_hanging_call(&mut a, &store, &hanging.flow).await;

    let said = runs(
        &url,
        &["cancel", &run_id, "--reason", "cancelled from elsewhere"],
    )
    .await;
    forwarded_and_applied(&said, &run_id, &owner);
    call_cancelled(&store, &run_id, &hanging.record).await;
    let view = support::get_run(&support::authorized(TOKEN), &base, &run_id).await;
    assert_eq!(view["status"], "cancelled", "{view}");
    assert_eq!(view["reason"], "cancelled from elsewhere", "{view}");

    // A run that has ended takes no control, from anywhere.
    let said = runs(&url, &["cancel", &run_id]).await;
    assert_eq!(said.code, Some(1), "{}", said.stderr);
    assert!(
        said.stderr.contains(&format!(
            "run {run_id} has already finished: it is cancelled"
        )),
        "{}",
        said.stderr
    );

    a.start_kill().expect("stop");
    a.wait().await.expect("reaped");
    hanging.stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_run_takes_a_cancel_forwarded_from_the_command_line() {
    let (_cluster, url) = postgres::database().await;
    let store = open(&url).await;
    let hanging = Hanging::start().await;
    let (mut a, run_id) = run_until_a_tool_call_hangs(
        support::leasehold_on_store(&url).demo_model(&hanging.stack),
        &hanging.flow,
        PATIENCE,
    )
    .await;
    let owner = store
        .load_run(&run_id)
        .await
        .expect("load")
        .and_then(|r| r.owner_id)
        .expect("an owner");

    let said = runs(&url, &["cancel", &run_id]).await;
    forwarded_and_applied(&said, &run_id, &owner);
    call_cancelled(&store, &run_id, &hanging.record).await;
    // `leasehold run` ends with its run: cancelled is exit code 1.
    let exit = tokio::time::timeout(PATIENCE, a.wait())
        .await
        .expect("leasehold run exits once its run is cancelled")
        .expect("wait");
    assert_eq!(exit.code(), Some(1));
    hanging.stack.shutdown().await;
}

/// An engine in this process on `store` whose run of a non-idempotent
/// `charge` hung and was intervened: it waits in `reconciliation_required`,
/// held by this live executor, which follows the controls forwarded to
/// it. The engine, the run, the call's key, and what stops the follower.
async fn a_charge_held_waiting_for_a_decision(
    store: Arc<PostgresStore>,
) -> (Arc<Executor>, leasehold::RunHandle, String) {
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::tools([("charge", json!({"amount": 5}))]),
            Turn::answer("charged once"),
        ],
    );
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_millis(100);
    let engine = Engine::builder()
        .config(config)
        .model(Arc::new(model))
        .evaluator(Arc::new(ScriptedEvaluator::always("INTERVENE")))
        .tool_server(
            "local",
            Arc::new(ScriptedTools::new().tool("charge", Some(false), [ToolAct::Hang])),
        )
        .store(store.clone() as Arc<dyn Store>)
        .owner_id(leasehold::OwnerId::of_process())
        .build()
        .await
        .expect("engine");
    // An executor of its own, which follows the controls forwarded to it.
    let executor = Executor::new(Arc::new(engine), ExecutorOptions::command_line());
    let flow = serde_json::from_value(json!({
        "name": "charging", "task": "charge once", "max_steps": 4, "tools": [{"name": "local"}]
    }))
    .expect("flow");
    let mut handle = executor
        .start(flow, leasehold::RunOptions::default())
        .await
        .expect("started");
    let state = handle.paused().await;
    assert_eq!(state.status, RunStatus::ReconciliationRequired);
    let key = state
        .paused
        .and_then(|p| p.call)
        .map(|c| c.key)
        .expect("the call in question");
    (executor, handle, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_awaiting_a_decision_is_refused_alike_by_the_command_line_and_the_api_and_a_decision_reaches_the_owner()
 {
    let (_cluster, url) = postgres::database().await;
    let store = open(&url).await;
    let stack = DemoStack::start().await.expect("the demo servers");
    let (executor, mut handle, key) = a_charge_held_waiting_for_a_decision(store.clone()).await;
    let engine = executor.engine();
    let run_id = handle.run_id().to_owned();
    let mut b = serve_on_store(&url, &stack, &[]);
    let base = support::served_base(&mut b, PATIENCE).await;
    let http = support::authorized(TOKEN);

    // One rule, one message: from the API of another executor…
    let response = http
        .post(format!("{base}/runs/{run_id}/resume"))
        .json(&json!({"guidance": "go on"}))
        .send()
        .await
        .expect("POST resume");
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let body: serde_json::Value = response.json().await.expect("JSON");
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains(&format!("leasehold runs reconcile {run_id} --key {key}"))
            && message.contains(&format!("POST /runs/{run_id}/reconcile")),
        "says what to do instead: {message}"
    );
    // …and from the command line, on the store.
    let said = runs(&url, &["resume", &run_id, "--guidance", "go on"]).await;
    assert_eq!(said.code, Some(1), "{}", said.stderr);
    assert_eq!(said.stderr.trim_end(), format!("leasehold: {message}"));
    assert_eq!(
        handle.state().status,
        RunStatus::ReconciliationRequired,
        "nothing was forwarded"
    );

    // A decision on the command line reaches the run's owner, which
    // applies it: the call is marked done and the run completes there.
    let said = runs(
        &url,
        &[
            "reconcile",
            &run_id,
            "--key",
            &key,
            "--mark-done",
            "--result",
            "charged, by hand",
        ],
    )
    .await;
    assert_eq!(said.code, Some(0), "{}", said.stderr);
    assert!(
        said.stderr.contains(&format!(
            "run {run_id}: reconcile forwarded to {}",
            engine.owner_id()
        )),
        "{}",
        said.stderr
    );
    let state = tokio::time::timeout(PATIENCE, handle.wait())
        .await
        .expect("the run ends once decided");
    assert_eq!(state.status, RunStatus::Completed, "{state:?}");

    executor.shutdown().await.expect("the executor stops");
    b.start_kill().expect("stop");
    b.wait().await.expect("reaped");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_control_the_owner_refuses_is_logged_on_the_run() {
    let (_cluster, url) = postgres::database().await;
    let store = open(&url).await;
    let hanging = Hanging::start().await;
    let (mut a, run_id) = run_until_a_tool_call_hangs(
        support::leasehold_on_store(&url).demo_model(&hanging.stack),
        &hanging.flow,
        PATIENCE,
    )
    .await;

    // A resume of a running run, as another executor whose look at the
    // run was out of date would forward it.
    store
        .send_command(&run_id, RunCommand::Resume { guidance: None })
        .await
        .expect("stored");
    let events = logged(&store, &run_id, "control_refused").await;
    let refused = events
        .iter()
        .find(|e| e.kind.name() == "control_refused")
        .expect("refused");
    let text = serde_json::to_value(refused).expect("JSON");
    assert_eq!(text["command"], "resume", "{text}");
    assert!(
        text["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("is not paused (it is running)"),
        "{text}"
    );
    assert_eq!(
        store
            .load_run(&run_id)
            .await
            .expect("load")
            .expect("run")
            .status,
        RunStatus::Running,
        "the run goes on"
    );
    a.start_kill().expect("stop");
    a.wait().await.expect("reaped");
    hanging.stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_data_directory_a_run_whose_executor_was_killed_is_cancelled_at_once_not_after_its_lease()
 {
    let hanging = Hanging::start().await;
    let command = support::hanging_tool::leasehold(&hanging.data, &hanging.model)
        .with_env("LEASEHOLD_RUN_LEASE_TTL", "10m");
    let (mut run, run_id) = run_until_a_tool_call_hangs(command, &hanging.flow, PATIENCE).await;
    kill_with_its_tools(&mut run, &hanging.record).await;

    // sled is opened by one process at a time: the executor that holds the
    // run, not being this one, is dead, and its ten-minute lease holds
    // nothing up. `runs show` says so, and how to resume it.
    let view = hanging.shown(&run_id).await;
    assert_eq!(view["status"], "orphaned", "{view}");
    assert_eq!(
        view["reason"],
        leasehold::fencing::ORPHANED_HOLDER_GONE,
        "{view}"
    );
    assert_eq!(
        view["resume_with"],
        format!("leasehold runs resume {run_id}"),
        "{view}"
    );
    // `runs list` tells the same, and finds it among the orphaned.
    let listed = support::output_within(
        support::hanging_tool::leasehold(&hanging.data, &hanging.model)
            .args(["runs", "list", "--status", "orphaned"]),
        PATIENCE,
    )
    .await;
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(
        table
            .lines()
            .any(|row| row.starts_with(run_id.as_str()) && row.contains(" orphaned ")),
        "{table}"
    );
    let out = tokio::time::timeout(
        PATIENCE,
        support::hanging_tool::leasehold(&hanging.data, &hanging.model)
            .args(["runs", "cancel", &run_id])
            .output(),
    )
    .await
    .expect("applied at once, not after the lease")
    .expect("runs cancel");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("run {run_id}: cancel applied: it is cancelled")),
        "{said}"
    );
    assert!(!said.contains("forwarded"), "{said}");
    let view = hanging.shown(&run_id).await;
    assert_eq!(view["status"], "cancelled", "{view}");
    hanging.stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_a_killed_server_is_orphaned_at_once_by_the_next_on_its_data_directory() {
    let hanging = Hanging::start().await;
    let serving = || {
        support::hanging_tool::leasehold(&hanging.data, &hanging.model)
            .with_env("LEASEHOLD_RUN_LEASE_TTL", "10m")
            .api_token(TOKEN)
    };
    let (mut server, base) = support::serve(serving(), &["--allow-flow-tools"], PATIENCE).await;
    let http = support::authorized(TOKEN);
    // Its identity says where it serves.
    let owner = support::owner_id(&http, &base).await;
    assert_eq!(
        leasehold::OwnerId::parse(&owner).serving(),
        Some(base.as_str()),
        "{owner}"
    );
    let run_id = support::post_run(&http, &base, &flow_json(&hanging.flow)).await;
    support::view_until(&http, &base, &run_id, PATIENCE, "calling a tool", |view| {
        view["tool_calls"]
            .as_array()
            .is_some_and(|calls| !calls.is_empty())
    })
    .await;
    kill_with_its_tools(&mut server, &hanging.record).await;

    // The next server on the directory finds the run orphaned as it boots,
    // ten minutes before the dead one's lease would have ended, and its
    // API cancels it.
    let (mut next, base) = support::serve(serving(), &["--allow-flow-tools"], PATIENCE).await;
    let view = support::get_run(&http, &base, &run_id).await;
    assert_eq!(view["status"], "orphaned", "{view}");
    assert_eq!(
        view["reason"],
        leasehold::fencing::ORPHANED_HOLDER_GONE,
        "{view}"
    );
    let cancelled = http
        .post(format!("{base}/runs/{run_id}/cancel"))
        .json(&json!({"reason": "left by a dead server"}))
        .send()
        .await
        .expect("POST cancel");
    assert!(cancelled.status().is_success(), "{}", cancelled.status());
    let view = support::get_run(&http, &base, &run_id).await;
    assert_eq!(view["status"], "cancelled", "{view}");
    next.start_kill().expect("SIGKILL");
    next.wait().await.expect("reaped");
    hanging.stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_shared_store_a_resume_of_a_run_a_killed_server_holds_says_whose_until_when_and_what_to_do()
 {
    let (_cluster, url) = postgres::database().await;
    let store = open(&url).await;
    let hanging = Hanging::start().await;
    let mut a = serve_on_store(&url, &hanging.stack, &[("LEASEHOLD_RUN_LEASE_TTL", "10m")]);
    let (base, owner, run_id) = running_a_hanging_call(&mut a, &store, &hanging.flow).await;
    kill_with_its_tools(&mut a, &hanging.record).await;

    // Another process may hold a run of a shared store: its lease is
    // believed, and the refusal says how to reach it and when to retry.
    let said = runs(&url, &["resume", &run_id]).await;
    assert_eq!(said.code, Some(1), "{}", said.stderr);
    let said = said.stderr;
    assert!(
        said.contains(&format!("run {run_id} is held by executor {owner}")),
        "{said}"
    );
    assert!(said.contains(&format!("--server {base}")), "{said}");
    assert!(!said.contains("Unix ms"), "a readable time: {said}");
    let time = said
        .split_whitespace()
        .find(|w| w.len() >= 20 && w.as_bytes()[4] == b'-' && w.contains('T'))
        .unwrap_or_else(|| panic!("an RFC 3339 time: {said}"));
    assert!(time.ends_with('Z'), "{time}");
    assert!(
        said.contains("Z (in 9m") || said.contains("Z (in 10m"),
        "how long to wait: {said}"
    );
    assert!(
        said.contains("if that executor died"),
        "what to do if it died: {said}"
    );
    hanging.stack.shutdown().await;
}

/// SIGKILLs `executor`, then the process group of the last tool server
/// it started (tool servers outlive a SIGKILL of their executor), as
/// `record` names it.
async fn kill_with_its_tools(executor: &mut Child, record: &Path) {
    let (pgid, _) = last_group(record);
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &executor.id().expect("pid").to_string()])
        .status();
    let _ = executor.wait().await;
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_forwarded_to_a_frozen_owner_is_given_up_on_after_the_patience_and_applied_once_it_goes_on()
 {
    let (_cluster, url) = postgres::database().await;
    let store = open(&url).await;
    let hanging = Hanging::start().await;
    let mut a = serve_on_store(&url, &hanging.stack, &[]);
    let (_, owner, run_id) = running_a_hanging_call(&mut a, &store, &hanging.flow).await;

    // Frozen with its lease live (90 s by default): it takes nothing. The
    // command line's patience is its own run-lease TTL, here the floor.
    support::signal(&a, "-STOP");
    let said = runs_with(
        &url,
        &["cancel", &run_id],
        &[("LEASEHOLD_RUN_LEASE_TTL", "3s")],
    )
    .await;
    support::signal(&a, "-CONT");
    assert_eq!(said.code, Some(1), "{}", said.stderr);
    assert!(
        said.stderr
            .contains(&format!("run {run_id}: cancel forwarded to {owner}")),
        "{}",
        said.stderr
    );
    assert!(
        said.stderr
            .contains(&format!("{owner} has not applied the cancel within 10s"))
            && said.stderr.contains("waits in the store"),
        "says it gave up, after how long, and what became of the cancel: {}",
        said.stderr
    );
    // Once it goes on, the owner takes the cancel that waited.
    call_cancelled(&store, &run_id, &hanging.record).await;

    a.start_kill().expect("stop");
    a.wait().await.expect("reaped");
    hanging.stack.shutdown().await;
}
