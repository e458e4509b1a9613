//! A flow can only tighten what the server's configuration allows, and a
//! model cannot spawn without limit — against real `leasehold serve` and
//! `leasehold run` processes.
//!
//! The model is a small OpenAI-compatible server written here (axum on
//! 127.0.0.1), scripted by the system prompt of each loop: a root that asks
//! for 3 000 workers in one answer, workers that spawn workers of their own,
//! workers that answer at once (see `flow_bounds/peers.rs`). The tool
//! servers the configuration declares are never reached by a refused flow:
//! every refusal comes before anything starts. One run's tool hangs, and its
//! executor is SIGKILLed mid-call, to show what a tightened idempotency does
//! after a crash.

mod support;

#[path = "flow_bounds/peers.rs"]
mod peers;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::Duration;

use peers::{FAN_OUT, Hanging, NEST, model, serve_tools};
use serde_json::{Value, json};
use support::PATIENCE;
use tokio::process::Child;

/// The spawn limits of the served configuration: small, so that the nested
/// run reaches each of them quickly.
const PER_ANSWER: usize = 16;
const PER_RUN: usize = 20;
const DEPTH: usize = 2;

// ---------------------------------------------------------------------------
// The server.
// ---------------------------------------------------------------------------

/// The configuration file: the lease floor, and two declared tool servers
/// (never reached): `pay`, which says nothing of idempotency, and `ledger`,
/// whose `read` is declared idempotent.
const CONFIG: &str = r#"
[lease]
min = "50ms"

[[tools]]
name = "pay"
url = "http://127.0.0.1:9/mcp"

[[tools]]
name = "ledger"
url = "http://127.0.0.1:9/mcp"
idempotent = { read = true }
"#;

fn config_file(dir: &Path) -> PathBuf {
    let path = dir.join("leasehold.toml");
    std::fs::write(&path, CONFIG).expect("write the configuration");
    path
}

/// A `leasehold` command on a fresh data directory in `dir`, with the
/// configuration file, the model at `model` and the spawn limits above.
fn bounded(dir: &Path, model: &str) -> support::Leasehold {
    support::leasehold(&dir.join("data"))
        .model(model, "bounds")
        .with_env("NO_COLOR", "1")
        .config(config_file(dir))
        .with_env("LEASEHOLD_SPAWN_MAX_PER_ANSWER", PER_ANSWER.to_string())
        .with_env("LEASEHOLD_SPAWN_MAX_PER_RUN", PER_RUN.to_string())
        .with_env("LEASEHOLD_SPAWN_MAX_DEPTH", DEPTH.to_string())
}

/// `POST /runs` of `flow`: the status and the body.
async fn post_flow(http: &reqwest::Client, base: &str, flow: &Value) -> (u16, Value) {
    let response = http
        .post(format!("{base}/runs"))
        .json(flow)
        .send()
        .await
        .expect("POST /runs");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

fn flow(extra: Value) -> Value {
    let mut flow = json!({"name": "bounds", "task": "t", "max_steps": 0, "stream": false});
    if let (Some(flow), Some(extra)) = (flow.as_object_mut(), extra.as_object()) {
        flow.extend(extra.clone());
    }
    flow
}

/// Every run the server lists.
async fn run_ids(http: &reqwest::Client, base: &str) -> Vec<String> {
    let page: Value = http
        .get(format!("{base}/runs?limit=100"))
        .send()
        .await
        .expect("GET /runs")
        .json()
        .await
        .expect("JSON");
    page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|run| run["run_id"].as_str().map(str::to_owned))
        .collect()
}

/// The whole event log of an ended run, from its event stream (which
/// closes once the run has ended and every event was sent).
async fn events(http: &reqwest::Client, base: &str, run_id: &str) -> Vec<Value> {
    let body = tokio::time::timeout(PATIENCE, async {
        http.get(format!("{base}/runs/{run_id}/events"))
            .send()
            .await
            .expect("GET /runs/{id}/events")
            .text()
            .await
            .expect("the stream")
    })
    .await
    .expect("the stream closes once the run has ended");
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter(|event| event.get("kind").is_some())
        .collect()
}

/// The bytes of every file under `dir`.
fn disk_use(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => disk_use(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The resident memory of process `pid`, in bytes, from `/proc`.
fn resident(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

// ---------------------------------------------------------------------------
// A flow can only tighten the configuration.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_flow_past_the_configurations_bounds_is_refused_naming_the_key_and_the_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (model, _) = model().await;
    let (_server, base) = support::serve(bounded(dir.path(), &model), &[], PATIENCE).await;
    let http = reqwest::Client::new();

    // A flow within the bounds is accepted, first: nothing refused after
    // it may touch it.
    let (status, body) = post_flow(
        &http,
        &base,
        &flow(
            json!({"leases": {"tool_call": "1s", "max_renewals": 2, "free_renewals": 1},
                     "spawn": {"max_per_answer": 2}, "retention": "1h"}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let kept = body["run_id"].as_str().expect("a run id").to_owned();

    let u32_max = u64::from(u32::MAX);
    for (overrides, key, bound) in [
        (
            json!({"leases": {"max_renewals": u32_max, "free_renewals": u32_max}}),
            "leases.max_renewals",
            "at most 10 (the configuration's `lease.max_renewals`)",
        ),
        (
            json!({"leases": {"free_renewals": u32_max}}),
            "leases.free_renewals",
            "at most 2 (the configuration's `watchdog.free_renewals`)",
        ),
        (
            json!({"leases": {"tool_call": "1ns"}}),
            "leases.tool_call",
            "at least 10ms",
        ),
        (
            json!({"leases": {"model_blocking": "20ms"}}),
            "leases.model_blocking",
            "at least 50ms (the configuration's `lease.min`)",
        ),
        (
            json!({"supervision": {"max_restarts": 1000}}),
            "supervision.max_restarts",
            "at most 3 (the configuration's `restart.max_restarts`)",
        ),
        (
            json!({"spawn": {"max_per_answer": 3000}}),
            "spawn.max_per_answer",
            "at most 16 (the configuration's `spawn.max_per_answer`)",
        ),
        (
            json!({"spawn": {"max_depth": 100}}),
            "spawn.max_depth",
            "at most 2 (the configuration's `spawn.max_depth`)",
        ),
        (
            json!({"retention": "30days"}),
            "retention",
            "at most 7 days (the configuration's `executor.retention`)",
        ),
    ] {
        let (status, body) = post_flow(&http, &base, &flow(overrides.clone())).await;
        assert_eq!(status, 422, "{overrides} must be refused: {body}");
        assert_eq!(body["error"]["code"], "invalid_flow", "{body}");
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("a message: {body}"));
        assert!(
            message.contains(&format!("`{key}`")) && message.contains(bound),
            "the refusal of {overrides} names {key} and {bound:?}: {message}"
        );
    }

    // Refused flows leave no trace; the accepted run is still there, with
    // its overrides as given.
    assert_eq!(run_ids(&http, &base).await, vec![kept.clone()]);
    let view = support::get_run(&http, &base, &kept).await;
    assert_eq!(view["flow"]["leases"]["max_renewals"], 2, "{view}");
    assert_eq!(view["flow"]["spawn"]["max_per_answer"], 2, "{view}");
    assert_eq!(
        view["flow"]["retention"], "1h",
        "a shorter retention: {view}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posted_flow_may_mark_a_declared_tool_non_idempotent_but_never_idempotent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (model, _) = model().await;
    let (_server, base) = support::serve(bounded(dir.path(), &model), &[], PATIENCE).await;
    let http = reqwest::Client::new();

    // `pay` declares nothing of `charge`; `ledger` declares `read`
    // idempotent, and a flow may not raise `write`.
    for (tools, key) in [
        (
            json!([{"name": "pay", "idempotent": {"charge": true}}]),
            "tools[0].idempotent.charge",
        ),
        (
            json!([{"name": "ledger", "idempotent": {"read": true, "write": true}}]),
            "tools[0].idempotent.write",
        ),
    ] {
        let (status, body) = post_flow(&http, &base, &flow(json!({"tools": tools}))).await;
        assert_eq!(status, 422, "{tools} must be refused: {body}");
        let message = body.to_string();
        assert!(
            message.contains(&format!("`{key}`")) && message.contains("may only tighten"),
            "the refusal names {key}: {message}"
        );
    }
    assert!(
        run_ids(&http, &base).await.is_empty(),
        "a refused flow leaves no run"
    );

    // Tightening is taken: the run's stored flow holds `read` not
    // idempotent, over the declaration's `true`, so a call of unknown
    // outcome goes to a person.
    let (status, body) = post_flow(
        &http,
        &base,
        &flow(json!({"tools": [{"name": "ledger", "idempotent": {"read": false}}]})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let run_id = body["run_id"].as_str().expect("a run id");
    let view = support::get_run(&http, &base, run_id).await;
    assert_eq!(
        view["flow"]["tools"][0]["idempotent"]["read"], false,
        "the flow's `false` wins over the declaration's `true`: {view}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leasehold_run_holds_a_flow_file_to_the_configuration_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, flow, key, says) in [
        (
            "raise.json",
            flow(json!({"tools": [{"name": "pay", "idempotent": {"charge": true}}]})),
            "tools[0].idempotent.charge",
            "may only tighten",
        ),
        (
            "cap.json",
            flow(json!({"leases": {"max_renewals": u64::from(u32::MAX)}})),
            "leases.max_renewals",
            "the configuration's `lease.max_renewals`",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, flow.to_string()).expect("write the flow");
        let out = tokio::time::timeout(
            PATIENCE,
            bounded(dir.path(), "http://127.0.0.1:9/v1")
                .arg("run")
                .arg(&path)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .output(),
        )
        .await
        .expect("leasehold run ends")
        .expect("leasehold run runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name} must be refused: {stderr}");
        assert!(
            stderr.contains(&format!("`{key}`")) && stderr.contains(says),
            "the refusal of {name} names {key} and says {says:?}: {stderr}"
        );
        assert!(
            !stderr.contains("panicked"),
            "a refusal, not a panic: {stderr}"
        );
    }
}

// ---------------------------------------------------------------------------
// A tightened idempotency survives a crash.
// ---------------------------------------------------------------------------

/// `leasehold serve` with `ledger` declared on `tools_url`, `read`
/// declared idempotent, resuming orphaned runs after a short run lease.
async fn serve_ledger(dir: &Path, model: &str, tools_url: &str) -> (Child, String) {
    let config = dir.join("ledger.toml");
    std::fs::write(
        &config,
        format!(
            "[[tools]]\nname = \"ledger\"\nurl = \"{tools_url}\"\nidempotent = {{ read = true }}\n"
        ),
    )
    .expect("write the configuration");
    let command = bounded(dir, model)
        .config(&config)
        .with_env("LEASEHOLD_RESUME_ON_BOOT", "true")
        .with_env("LEASEHOLD_RUN_LEASE_TTL", "1s");
    support::serve(command, &[], PATIENCE).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_a_flow_marks_not_idempotent_goes_to_a_person_after_a_crash_not_again_to_the_tool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (model, _) = model().await;
    let tools = Hanging::default();
    let tools_url = serve_tools(tools.clone()).await;
    let http = reqwest::Client::new();

    // The declaration says `read` is idempotent; the flow says it is not.
    let (mut first, base) = serve_ledger(dir.path(), &model, &tools_url).await;
    let run_id = support::post_run(
        &http,
        &base,
        &flow(json!({
            "system_prompt": "root read",
            "tools": [{"name": "ledger", "idempotent": {"read": false}}],
        })),
    )
    .await;
    tokio::time::timeout(PATIENCE, async {
        while tools.calls().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the call reaches the tool");
    first.kill().await.expect("SIGKILL the executor");

    // The next executor finds the call sent with no result: not known to
    // be idempotent, it is put to a person, not sent again.
    let (_second, base) = serve_ledger(dir.path(), &model, &tools_url).await;
    let mut view = Value::Null;
    let waited = tokio::time::timeout(PATIENCE, async {
        loop {
            view = support::get_run(&http, &base, &run_id).await;
            if view["status"] == "reconciliation_required" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "the run did not put the call to a person: {view}; calls {:?}",
        tools.calls()
    );
    assert_eq!(view["pause"]["subject"], "read", "{view}");
    assert_eq!(view["tool_calls"][0]["state"], "unknown", "{view}");
    assert_eq!(view["tool_calls"][0]["idempotent"], false, "{view}");
    assert_eq!(
        tools.calls().len(),
        1,
        "the call of unknown outcome was not sent again: {:?}",
        tools.calls()
    );
}

// ---------------------------------------------------------------------------
// A model cannot spawn without limit.
// ---------------------------------------------------------------------------

/// A flow whose root says `root`, with worker kinds `leaf` and `nest`.
fn spawning_flow(root: &str) -> Value {
    flow(json!({
        "system_prompt": root,
        "workers": {
            "leaf": {"prompt": "leaf: answer at once", "max_steps": 0},
            "nest": {"prompt": "nest: spawn, then answer", "max_steps": 0},
        },
    }))
}

/// The depth of a worker's path: how many `worker:` parts it has.
fn depth(path: &str) -> usize {
    path.split('/')
        .filter(|part| part.starts_with("worker:"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_of_3000_spawns_starts_the_per_answer_limit_and_the_run_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (model, seen) = model().await;
    let (server, base) = support::serve(bounded(dir.path(), &model), &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let run_id = support::post_run(&http, &base, &spawning_flow("root fan-out")).await;
    let view = support::view_until(&http, &base, &run_id, PATIENCE, "ended", |view| {
        view["status"] != "running" && view["status"] != "queued"
    })
    .await;
    assert_eq!(view["status"], "completed", "{view}");

    let events = events(&http, &base, &run_id).await;
    let spawned = of_kind(&events, "worker_spawned");
    let refused = of_kind(&events, "spawn_refused");
    assert_eq!(spawned.len(), PER_ANSWER, "the first {PER_ANSWER} start");
    assert_eq!(refused.len(), FAN_OUT - PER_ANSWER, "the rest are refused");
    assert!(
        refused
            .iter()
            .all(|e| e["limit"] == "spawn.max_per_answer" && e["bound"] == PER_ANSWER),
        "each refusal names the limit and its bound: {:?}",
        refused.first()
    );
    assert_eq!(
        seen.worker_requests.load(Ordering::Relaxed),
        PER_ANSWER,
        "the model heard from the started workers only"
    );
    assert_eq!(of_kind(&events, "run_completed").len(), 1);
    // What 3 000 asks cost: a small event and a short result each, not a
    // worker's loop each.
    let disk = disk_use(&dir.path().join("data"));
    let memory = resident(server.id().expect("serving"));
    eprintln!("after 3000 spawns asked: store {disk} bytes, server resident {memory} bytes");
    assert!(disk < 64 << 20, "the store holds {disk} bytes");
    assert!(memory < 512 << 20, "the server holds {memory} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_spawning_stops_at_the_depth_and_the_per_run_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (model, seen) = model().await;
    let (_server, base) = support::serve(bounded(dir.path(), &model), &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let run_id = support::post_run(&http, &base, &spawning_flow("root nest")).await;
    let view = support::view_until(&http, &base, &run_id, PATIENCE, "ended", |view| {
        view["status"] != "running" && view["status"] != "queued"
    })
    .await;
    assert_eq!(view["status"], "completed", "{view}");

    let events = events(&http, &base, &run_id).await;
    let spawned = of_kind(&events, "worker_spawned");
    assert_eq!(spawned.len(), PER_RUN, "the run starts {PER_RUN} workers");
    let deepest = spawned
        .iter()
        .filter_map(|e| e["path"].as_str())
        .map(depth)
        .max();
    assert_eq!(deepest, Some(DEPTH), "no worker below depth {DEPTH}");
    let refused = of_kind(&events, "spawn_refused");
    let by = |limit: &str| refused.iter().filter(|e| e["limit"] == limit).count();
    // The root's 5 start; its workers ask 25 and get the 15 left of the
    // run's 20; every one of those 15, at the deepest level, is refused
    // all 5 it asks.
    assert_eq!(by("spawn.max_per_run"), NEST * NEST - (PER_RUN - NEST));
    assert_eq!(by("spawn.max_depth"), (PER_RUN - NEST) * NEST);
    assert_eq!(by("spawn.max_per_answer"), 0);
    assert_eq!(
        seen.worker_requests.load(Ordering::Relaxed),
        2 * PER_RUN,
        "each started worker asked the model twice (its spawns, then its answer); no other did"
    );
    assert_eq!(of_kind(&events, "run_completed").len(), 1);
}
