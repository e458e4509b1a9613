//! `leasehold runs replay`: a run of the demo, recorded in its data
//! directory, played again once the demo's servers are gone — no network,
//! no tool server, on paused time — reproduces its steps and verdicts;
//! its saved recording replays the same in a test.

mod support;

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

/// Generous for a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(180);

fn leasehold(data: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LEASEHOLD_DATA_DIR", data)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

async fn finished(command: &mut Command) -> std::process::Output {
    support::output_within(command, PATIENCE).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_replay_reproduces_a_stored_run_of_the_demo_with_no_server_running() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let demo = finished(leasehold(&data).arg("demo")).await;
    let said =
        String::from_utf8_lossy(&demo.stdout).into_owned() + &String::from_utf8_lossy(&demo.stderr);
    assert!(demo.status.success(), "{said}");
    let run_id = said
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("run-"))
        .unwrap_or_else(|| panic!("a run id in {said}"))
        .to_owned();

    // The demo's servers are gone with it; a model address that answers
    // nothing is configured, to show that none is reached.
    let saved = dir.path().join("recording.json");
    let replay = finished(
        leasehold(&data)
            .env("LEASEHOLD_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
            .env("LEASEHOLD_MODEL_NAME", "nobody")
            .args(["runs", "replay", &run_id, "--json", "--save"])
            .arg(&saved),
    )
    .await;
    let stdout = String::from_utf8_lossy(&replay.stdout);
    assert!(
        replay.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("a JSON report");
    assert_eq!(report["divergence"], serde_json::Value::Null, "{report}");
    assert_eq!(report["replayed_status"], "completed");
    assert!(report["steps"].as_u64().unwrap() >= 3, "{report}");
    assert!(report["verdicts"].as_u64().unwrap() >= 3, "{report}");

    // The readable answer says so.
    let readable = finished(leasehold(&data).args(["runs", "replay", &run_id])).await;
    let text = String::from_utf8_lossy(&readable.stdout);
    assert!(readable.status.success(), "{text}");
    assert!(text.contains("reproduced it"), "{text}");

    // Saved, the recording is a regression test: it replays the same here.
    let recording: leasehold_lab::Recording =
        serde_json::from_str(&std::fs::read_to_string(&saved).expect("saved"))
            .expect("a recording");
    let config = leasehold::EngineConfig::default();
    let report = tokio::task::spawn_blocking(move || recording.replay(config))
        .await
        .expect("joins")
        .expect("replays");
    report.assert_reproduced();

    // A run that is not there is named; --server is not for replays.
    let missing = finished(leasehold(&data).args(["runs", "replay", "run-none"])).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no run run-none"));
}
