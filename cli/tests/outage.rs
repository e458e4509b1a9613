//! A provider outage is a pause, not a storm of restarts, on real
//! processes: fifty runs live on a real `leasehold serve` whose model is
//! llama.cpp's `llama-server` running a real small model; the model server
//! is killed and stays away for a minute, then starts again on its port.
//! The executor marks the endpoint down (`GET /endpoints`, `/metrics`), the
//! runs wait paused on it instead of spending their restarts, and once the
//! server is back its probe finds it and every run resumes and completes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

mod support;

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
        let flow = json!({
            "name": "sky",
            "task": format!("Friend number {n} asks: what colour is the sky? Answer in one word."),
            "max_steps": 4,
            "stream": true,
            "max_tokens": 16,
            "budget": {"max_extensions": 0},
        });
        ids.push(support::post_run(&http, &base, &flow).await);
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
    // The outage made no run restart its work more than once (a restart
    // before the endpoint's answer resumed it; after it, a call cut by the
    // server's own keep-alive is not the outage's), none gave up, and each
    // that waited was resumed by the endpoint's answer.
    for id in &ids {
        let trace = support::get_json(&http, &format!("{base}/runs/{id}/trace")).await;
        let entries = trace["entries"].as_array().cloned().unwrap_or_default();
        let kinds: Vec<&str> = entries.iter().filter_map(|e| e["kind"].as_str()).collect();
        let back = entries
            .iter()
            .position(|e| e["kind"] == "resumed" && e.to_string().contains("answered again"))
            .unwrap_or(entries.len());
        let restarts = entries[..back]
            .iter()
            .filter(|e| e["kind"] == "restarted")
            .count();
        assert!(
            restarts <= 1,
            "run {id}: {restarts} restarts before the endpoint was back: {kinds:?}: {:#?}",
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
