//! A provider outage is a pause, not a storm of restarts, on real
//! processes: fifty runs live on a real `leasehold serve` whose model is
//! llama.cpp's `llama-server` running a real small model; the model server
//! is killed and stays away for a minute, then starts again on its port.
//! The executor marks the endpoint down (`GET /endpoints`, `/metrics`), the
//! runs wait paused on it instead of spending their restarts, and once the
//! server is back its probe finds it and every run resumes and completes.
//! Runs left paused on the endpoint by an executor killed meanwhile are
//! taken over by the next one.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

use leasehold_tests::llama::LlamaServer;
use serde_json::{Value, json};
use support::llama_stage::PATIENCE;

/// How long the model server stays away.
const OUTAGE: Duration = Duration::from_secs(60);

const RUNS: usize = 50;

async fn views(http: &reqwest::Client, base: &str, ids: &[String]) -> Vec<Value> {
    let mut views = Vec::new();
    for id in ids {
        views.push(support::get_run(http, base, id).await);
    }
    views
}

fn count(views: &[Value], status: &str) -> usize {
    views.iter().filter(|v| v["status"] == status).count()
}

fn statuses(views: &[Value]) -> BTreeMap<String, usize> {
    let mut counted = BTreeMap::new();
    for view in views {
        *counted
            .entry(view["status"].as_str().unwrap_or("?").to_owned())
            .or_insert(0) += 1;
    }
    counted
}

async fn endpoint(http: &reqwest::Client, base: &str) -> Value {
    let listed = support::get_json(http, &format!("{base}/endpoints")).await;
    let endpoints = listed["endpoints"].as_array().expect("a list").clone();
    assert_eq!(endpoints.len(), 1, "{listed}");
    endpoints[0].clone()
}

/// Run `n`'s flow: one short question to the model, streamed.
fn sky(n: usize) -> Value {
    json!({
        "name": "sky",
        "task": format!("Friend number {n} asks: what colour is the sky? Answer in one word."),
        "max_steps": 4,
        "stream": true,
        "max_tokens": 16,
        "budget": {"max_extensions": 0},
    })
}

async fn until_each_waits_on_the_endpoint(http: &reqwest::Client, base: &str, ids: &[String]) {
    support::until("every run to wait on the endpoint", PATIENCE, || async {
        let views = views(http, base, ids).await;
        views
            .iter()
            .all(|v| v["status"] == "waiting_human" && v["pause"]["subject"] == "endpoint")
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_live_runs_ride_out_a_real_model_server_away_for_a_minute_and_all_complete() {
    let dir = tempfile::tempdir().expect("dir");
    let mut llama = LlamaServer::start().await;
    let port = llama.port();
    let leasehold =
        support::leasehold(&dir.path().join("data")).model(llama.base_url(), &llama.model_name());
    let (mut server, base) = support::serve(leasehold, &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let before = endpoint(&http, &base).await;
    assert_eq!(before["up"], true, "{before}");
    let mut ids = Vec::new();
    for n in 0..RUNS {
        ids.push(support::post_run(&http, &base, &sky(n)).await);
    }
    // The model answers the first runs; the rest are live, in its queue
    // or streaming, when it is killed.
    support::until("two runs to complete", PATIENCE, || async {
        (count(&views(&http, &base, &ids).await, "completed") >= 2).then_some(())
    })
    .await;
    llama.kill();
    let killed = Instant::now();
    let down = support::until("the endpoint to be marked down", PATIENCE, || async {
        let endpoint = endpoint(&http, &base).await;
        (endpoint["up"] == false).then_some(endpoint)
    })
    .await;
    assert_eq!(down["down_by"]["by"], "failures", "{down}");
    // Every run not completed waits on the endpoint, paused with its
    // reason, none failed and none handed to a person.
    let waiting = support::until(
        "the live runs to wait on the endpoint",
        PATIENCE,
        || async {
            let views = views(&http, &base, &ids).await;
            let waiting: Vec<&Value> = views
                .iter()
                .filter(|v| v["status"] == "waiting_human")
                .collect();
            let settled = waiting.len() + count(&views, "completed") == RUNS;
            settled.then(|| waiting.iter().map(|v| (*v).clone()).collect::<Vec<Value>>())
        },
    )
    .await;
    assert!(!waiting.is_empty(), "no run was live when the server died");
    for view in &waiting {
        let pause = &view["pause"];
        assert_eq!(pause["subject"], "endpoint", "{view}");
        assert!(
            pause["reason"]
                .as_str()
                .is_some_and(|r| r.contains("is down")),
            "{view}"
        );
    }
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("leasehold_endpoint_up{") && l.ends_with(" 0")),
        "{metrics}"
    );
    // The rest of the minute away: the runs stay paused.
    if let Some(left) = OUTAGE.checked_sub(killed.elapsed()) {
        tokio::time::sleep(left).await;
    }
    let views_down = views(&http, &base, &ids).await;
    assert_eq!(
        count(&views_down, "waiting_human") + count(&views_down, "completed"),
        RUNS,
        "{:?}",
        statuses(&views_down)
    );
    let probed = endpoint(&http, &base).await;
    assert!(probed["probes"].as_u64().unwrap_or(0) >= 3, "{probed}");
    // Back on its port: the probe finds it and every run completes.
    let _back = LlamaServer::start_on(port).await;
    let views = support::until("every run to complete", PATIENCE, || async {
        let views = views(&http, &base, &ids).await;
        (count(&views, "completed") == RUNS).then_some(views)
    })
    .await;
    assert_eq!(count(&views, "completed"), RUNS);
    let after = endpoint(&http, &base).await;
    assert_eq!(after["up"], true, "{after}");
    // No run restarted its work more than once, none gave up, and each
    // that waited was resumed by the endpoint's answer. (A kept-alive
    // connection the server closed under a call is sent again by the
    // client, and spends no restart.)
    for id in &ids {
        let trace = support::get_json(&http, &format!("{base}/runs/{id}/trace")).await;
        let entries = trace["entries"].as_array().cloned().unwrap_or_default();
        let kinds: Vec<&str> = entries.iter().filter_map(|e| e["kind"].as_str()).collect();
        let restarts = kinds.iter().filter(|k| **k == "restarted").count();
        assert!(
            restarts <= 1,
            "run {id}: {restarts} restarts: {kinds:?}: {:#?}",
            entries
                .iter()
                .filter(|e| e["kind"] == "restarted")
                .collect::<Vec<_>>()
        );
        assert!(!kinds.contains(&"gave_up"), "run {id}: {kinds:?}");
    }
    for view in &waiting {
        let id = view["run_id"].as_str().or(view["id"].as_str()).unwrap();
        let trace = support::get_json(&http, &format!("{base}/runs/{id}/trace")).await;
        let resumed = trace["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["kind"] == "resumed" && e.to_string().contains("answered again"));
        assert!(resumed, "run {id} was not resumed by the endpoint: {trace}");
    }
    let _ = server.start_kill();
    let _ = server.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_waiting_on_a_down_endpoint_when_their_executor_is_killed_are_taken_over_by_the_next_and_complete()
 {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    // Nothing listens on the model's port yet: every call is refused.
    let port = support::free_port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let name = leasehold_tests::llama::model_name();
    let leasehold = || {
        support::leasehold(&data)
            .model(&url, &name)
            .with_env("LEASEHOLD_RESUME_ON_BOOT", "true")
    };
    let (mut server, base) = support::serve(leasehold(), &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(support::post_run(&http, &base, &sky(n)).await);
    }
    until_each_waits_on_the_endpoint(&http, &base, &ids).await;
    // The executor dies with its runs paused on the endpoint; the model
    // server comes up; the next executor on the data directory takes the
    // runs over, and they complete without a person.
    server.start_kill().expect("SIGKILL");
    let _ = server.wait().await;
    let _llama = LlamaServer::start_on(port).await;
    let (mut next, base) = support::serve(leasehold(), &[], PATIENCE).await;
    support::until("every run to complete", PATIENCE, || async {
        let views = views(&http, &base, &ids).await;
        (count(&views, "completed") == ids.len()).then_some(())
    })
    .await;
    let mut taken_over = 0;
    for id in &ids {
        let trace = support::get_json(&http, &format!("{base}/runs/{id}/trace")).await;
        let entries = trace["entries"].as_array().cloned().unwrap_or_default();
        taken_over += usize::from(entries.iter().any(|e| {
            e["kind"] == "resumed"
                && e.to_string()
                    .contains("taken over from an executor that is gone")
        }));
        assert!(
            !entries.iter().any(|e| e["kind"] == "gave_up"),
            "run {id}: {entries:?}"
        );
    }
    assert_eq!(taken_over, ids.len(), "each run resumed as taken over");
    let _ = next.start_kill();
    let _ = next.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_waiting_on_a_down_endpoint_are_taken_over_on_postgres_by_another_executor_once_theirs_is_killed()
 {
    let (_cluster, store) = postgres::database().await;
    let port = support::free_port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let name = leasehold_tests::llama::model_name();
    let serve = || {
        let command = support::leasehold_on_store(&store)
            .model(&url, &name)
            .with_env("LEASEHOLD_RESUME_ON_BOOT", "true")
            .with_env("LEASEHOLD_RUN_LEASE_TTL", "3s")
            .api_token("outage-token");
        support::start_serve(command, "127.0.0.1:0", &[])
    };
    let mut a = serve();
    let base_a = support::served_base(&mut a, PATIENCE).await;
    let mut b = serve();
    let base_b = support::served_base(&mut b, PATIENCE).await;
    let http = support::authorized("outage-token");
    let owner_a = support::owner_id(&http, &base_a).await;
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(support::post_run(&http, &base_a, &sky(n)).await);
    }
    until_each_waits_on_the_endpoint(&http, &base_b, &ids).await;
    // While A lives, B leaves its paused runs alone: the model server's
    // start takes seconds, several of B's searches (one a heartbeat).
    let _llama = LlamaServer::start_on(port).await;
    let views_b = views(&http, &base_b, &ids).await;
    for view in &views_b {
        assert_eq!(view["status"], "waiting_human", "{view}");
        assert_eq!(
            view["owner_id"],
            owner_a.as_str(),
            "B took a run A holds: {view}"
        );
    }
    // A dies: once its leases end, B takes the runs over and they complete.
    a.start_kill().expect("SIGKILL");
    let _ = a.wait().await;
    support::until("every run to complete", PATIENCE, || async {
        let views = views(&http, &base_b, &ids).await;
        (count(&views, "completed") == ids.len()).then_some(())
    })
    .await;
    for id in &ids {
        let trace = support::get_json(&http, &format!("{base_b}/runs/{id}/trace")).await;
        let taken_over = trace["entries"].as_array().into_iter().flatten().any(|e| {
            e["kind"] == "resumed"
                && e.to_string()
                    .contains("taken over from an executor that is gone")
        });
        assert!(taken_over, "run {id}: {trace}");
    }
    let _ = b.start_kill();
    let _ = b.wait().await;
}
