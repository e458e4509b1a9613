//! `leasehold runs reconcile --server URL`: the command line decides a
//! call of unknown outcome over a served API, and follows the run to its
//! end. The API is served in process, on a scripted engine, by the
//! server's own test support.

mod support;

#[path = "../../server/tests/support/mod.rs"]
mod served;

use served::client::a_charge_waiting_for_a_decision;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_reconcile_with_server_marks_the_call_done_over_the_api() {
    let (server, model, run_id, key) = a_charge_waiting_for_a_decision().await;
    let dir = tempfile::tempdir().expect("dir");
    let reconcile = |key: Option<&str>| {
        let mut command = support::leasehold(dir.path());
        command
            .args(["runs", "reconcile", &run_id])
            .args(key.map(|key| ["--key", key]).into_iter().flatten())
            .args(["--mark-done", "--result", "charged, by hand"])
            .args(["--server", &server.base]);
        command
    };

    let out = reconcile(Some("not-this-one"))
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the server refused (409"), "{stderr}");
    // Without --key: the one call the run waits on. The run is followed
    // over the server, as locally, until it ends.
    let out = reconcile(None).output().await.expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("run {run_id}: decision applied"))
            && stderr.contains(&format!("run {run_id} ended: completed")),
        "{stderr}"
    );
    let followed = String::from_utf8_lossy(&out.stdout);
    assert!(followed.contains("completed"), "{followed}");
    let view = server
        .wait_status(&run_id, |s| {
            s != "reconciliation_required" && s != "running"
        })
        .await;
    assert_eq!(view["status"], "completed", "{view}");
    // Nothing waits any more: a keyless reconcile says so.
    let out = reconcile(None).output().await.expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("waits on no call"), "{stderr}");
    // The call decided was the one waiting.
    let decided = view["tool_calls"].as_array().is_some_and(|calls| {
        calls
            .iter()
            .any(|c| c["key"] == key.as_str() && c["by_person"] == true)
    });
    assert!(decided, "{view}");
    let saw = model.requests_of("run").iter().any(|r| {
        r.messages
            .iter()
            .any(|m| m.content.contains("charged, by hand"))
    });
    assert!(saw, "the model saw the result given on the command line");
}
