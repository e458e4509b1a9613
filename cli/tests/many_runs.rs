//! Many runs at once, on real processes: a hundred runs of one flow and a
//! few of another live on one `leasehold serve`, each waiting on its model
//! (a real HTTP model server that holds every answer until the test opens
//! it, `support/gate.rs`). `leasehold runs many --server URL pause --flow F
//! --dry-run` lists the hundred and touches nothing; without `--dry-run`
//! it pauses each of them and no other; `resume` takes them up again, and
//! once the model answers every run completes.

use std::collections::BTreeSet;

mod support;

use serde_json::{Value, json};
use support::PATIENCE;

const RUNS: usize = 100;
const OTHERS: usize = 5;

/// `leasehold runs --server BASE ARGS`, once it ended; its stdout as JSON.
async fn many(base: &str, args: &[&str]) -> Value {
    let out = tokio::time::timeout(
        PATIENCE,
        support::clean_leasehold()
            .args(["runs", "--server", base, "many"])
            .args(args)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("`runs many {args:?}` did not end within {PATIENCE:?}"))
    .expect("leasehold runs many");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

async fn statuses(http: &reqwest::Client, base: &str, ids: &[String]) -> Vec<String> {
    let mut statuses = Vec::new();
    for id in ids {
        let view = support::get_run(http, base, id).await;
        statuses.push(view["status"].as_str().unwrap_or("?").to_owned());
    }
    statuses
}

fn ids_of(report: &Value) -> BTreeSet<String> {
    report["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["run_id"].as_str().expect("an id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_served_runs_of_a_flow_are_listed_by_a_dry_run_paused_and_resumed_and_no_other() {
    let (model, gate) = support::gate::gated_model().await;
    let dir = tempfile::tempdir().expect("dir");
    let command = support::leasehold(&dir.path().join("data"))
        .model(&model, "gate")
        .with_env("LEASEHOLD_SERVER_MAX_LIVE_RUNS", "200");
    let (mut server, base) = support::serve(command, &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let flow = |name: &str, n: usize| json!({"name": name, "task": format!("Task {n}."), "max_steps": 2, "stream": false});
    let mut ids = Vec::new();
    for n in 0..RUNS {
        ids.push(support::post_run(&http, &base, &flow("nightly", n)).await);
    }
    let mut others = Vec::new();
    for n in 0..OTHERS {
        others.push(support::post_run(&http, &base, &flow("adhoc", n)).await);
    }
    // Every run is live, its model call held at the gate.
    let mut received = gate.received.subscribe();
    let all = RUNS + OTHERS;
    tokio::time::timeout(PATIENCE, received.wait_for(|n| *n >= all))
        .await
        .expect("every run calls its model")
        .expect("the gate lives");

    let dry = many(&base, &["pause", "--flow", "nightly", "--dry-run"]).await;
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert_eq!(dry["more"], false, "{dry}");
    let listed = ids_of(&dry);
    assert_eq!(listed, ids.iter().cloned().collect(), "{dry}");
    assert!(
        dry["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["waiting_on"] == "model"),
        "each waits on its model: {dry}"
    );
    assert!(
        statuses(&http, &base, &ids)
            .await
            .iter()
            .all(|s| s == "running"),
        "a dry run touches nothing"
    );

    let paused = many(&base, &["pause", "--flow", "nightly", "--by", "ops"]).await;
    assert_eq!(ids_of(&paused), listed, "{paused}");
    assert!(
        paused["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["outcome"] == "applied" && r["now"] == "waiting_human"),
        "{paused}"
    );
    assert!(
        statuses(&http, &base, &ids)
            .await
            .iter()
            .all(|s| s == "waiting_human")
    );
    assert!(
        statuses(&http, &base, &others)
            .await
            .iter()
            .all(|s| s == "running"),
        "no run of another flow was touched"
    );
    // A second pause is refused run by run, with the reason.
    let again = many(&base, &["pause", "--flow", "nightly"]).await;
    assert!(
        again["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["outcome"] == "refused"
                && r["reason"]
                    .as_str()
                    .is_some_and(|m| m.contains("already paused"))),
        "{again}"
    );

    let resumed = many(&base, &["resume", "--flow", "nightly"]).await;
    assert_eq!(ids_of(&resumed), listed, "{resumed}");
    gate.open.send_replace(true);
    support::until("every run to complete", PATIENCE, || async {
        let ids: Vec<String> = ids.iter().chain(&others).cloned().collect();
        statuses(&http, &base, &ids)
            .await
            .iter()
            .all(|s| s == "completed")
            .then_some(())
    })
    .await;
    let _ = server.start_kill();
    let _ = server.wait().await;
}
