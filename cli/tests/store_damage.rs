//! A damaged sled store is never read as if whole: three runs are created
//! by `leasehold run`, the database's snapshot file is removed and bytes
//! the last command wrote to its log are flipped — sled then recovers an
//! older state without an error — and `leasehold runs list` exits non-zero
//! naming what was lost, instead of listing fewer runs. A healthy store,
//! and one whose process was SIGKILLed mid-run (an unclean stop, no
//! damage), open as before.

mod support;

use std::path::{Path, PathBuf};

use leasehold_cli::demo::DemoStack;

use support::PATIENCE;
use support::hanging_tool::{leasehold, run_until_a_tool_call_hangs, write_flow};

/// The demo's flow, written to `dir`.
fn demo_flow(dir: &Path, stack: &DemoStack) -> PathBuf {
    let path = dir.join("demo.json");
    let flow = serde_json::to_string_pretty(&stack.flow()).expect("JSON");
    std::fs::write(&path, flow).expect("write the flow");
    path
}

/// `leasehold run FLOW` to its end (the demo's run pauses for a person).
async fn run_to_its_end(data: &Path, model: &str, flow: &Path) {
    let out = tokio::time::timeout(
        PATIENCE,
        leasehold(data, model).arg("run").arg(flow).output(),
    )
    .await
    .expect("the run ends")
    .expect("run");
    assert!(
        out.status.code().is_some(),
        "the run exited by itself: {:?}",
        out.status
    );
}

/// `leasehold runs list` on `data`: its exit code, stdout and stderr.
async fn runs_list(data: &Path, model: &str) -> (Option<i32>, String, String) {
    let out = support::output(leasehold(data, model).args(["runs", "list"])).await;
    (out.code, out.stdout, out.stderr)
}

/// The ids `runs list` shows, checking it exits 0.
async fn listed(data: &Path, model: &str) -> Vec<String> {
    let (code, out, err) = runs_list(data, model).await;
    assert_eq!(code, Some(0), "runs list failed:\n{out}{err}");
    out.lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|id| id.starts_with("run-"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_list_refuses_a_damaged_sled_store_naming_what_it_lost() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let model = stack.model_base_url();
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let flow = demo_flow(dir.path(), &stack);

    run_to_its_end(&data, &model, &flow).await;
    run_to_its_end(&data, &model, &flow).await;
    let log = data.join("db");
    let before = std::fs::read(&log).expect("the sled log");
    run_to_its_end(&data, &model, &flow).await;
    assert_eq!(listed(&data, &model).await.len(), 3, "three runs stored");

    // The damage of the report: the snapshot file gone, and five bytes
    // flipped where the third run's process first wrote to the log.
    for entry in std::fs::read_dir(&data).expect("the store's directory") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("snap.") {
            std::fs::remove_file(&path).expect("remove the snapshot");
        }
    }
    let mut after = std::fs::read(&log).expect("the sled log");
    let first = (0..after.len())
        .find(|&i| before.get(i) != after.get(i))
        .expect("the third run wrote to the log");
    for byte in &mut after[first + 16..first + 21] {
        *byte ^= 0xff;
    }
    std::fs::write(&log, &after).expect("flip the bytes");

    let (code, out, err) = runs_list(&data, &model).await;
    assert_ne!(
        code,
        Some(0),
        "a damaged store was listed as whole:\n{out}{err}"
    );
    assert!(
        err.contains("is damaged") && err.contains("3 runs") && err.contains("leasehold.manifest"),
        "the error names the loss and what to do:\n{err}"
    );
    // Still refused: the refusal changed nothing.
    assert_ne!(runs_list(&data, &model).await.0, Some(0));

    // Accepting the loss: without the manifest the store opens as it is.
    std::fs::remove_file(data.join("leasehold.manifest")).expect("remove the manifest");
    let left = listed(&data, &model).await;
    assert!(left.len() < 3, "{left:?}");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_store_and_a_sigkilled_ones_open_as_before() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let model = stack.model_base_url();
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let flow = demo_flow(dir.path(), &stack);

    run_to_its_end(&data, &model, &flow).await;
    run_to_its_end(&data, &model, &flow).await;
    assert!(data.join("leasehold.manifest").exists(), "a manifest");
    assert_eq!(listed(&data, &model).await.len(), 2);

    // A third run killed with SIGKILL mid tool call: an unclean stop, not
    // damage.
    let record = dir.path().join("groups.txt");
    let hanging = write_flow(dir.path(), &stack, &record);
    let (mut run, _) =
        run_until_a_tool_call_hangs(leasehold(&data, &model), &hanging, PATIENCE).await;
    run.start_kill().expect("SIGKILL");
    run.wait().await.expect("reaped");

    assert_eq!(listed(&data, &model).await.len(), 3);
    // And once more, after that command recorded a manifest of its own.
    assert_eq!(listed(&data, &model).await.len(), 3);
    stack.shutdown().await;
}
