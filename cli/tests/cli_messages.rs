//! What the `leasehold` command says when something is not as the user
//! thinks, run as a real process: each message says what happened and what
//! to do. A mistyped data directory is not an empty store; a store locked by
//! a `leasehold serve` points to `--server`; a claim interval that would
//! make an idle server spin is refused; the demo's run is kept where
//! `runs show` finds it.

mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_commands_refuse_a_data_dir_that_does_not_exist_and_make_none() {
    let dir = tempfile::tempdir().expect("dir");
    let typo = dir.path().join("data-typo");
    for args in [
        &["runs", "list"][..],
        &["runs", "show", "run-1"],
        &["runs", "events", "run-1"],
        &["runs", "trace", "run-1"],
        &["runs", "resume", "run-1"],
        &["runs", "cancel", "run-1"],
    ] {
        let support::Output {
            code,
            stdout,
            stderr,
        } = support::output(
            support::leasehold(dir.path())
                .args(args)
                .arg("--data-dir")
                .arg(&typo),
        )
        .await;
        assert_ne!(
            code,
            Some(0),
            "{args:?} on a missing store: {stdout}{stderr}"
        );
        assert!(
            stderr.contains(&format!("no store at `{}`", typo.display()))
                && stderr.contains("does not exist")
                && stderr.contains("flag --data-dir")
                && stderr.contains("--server URL"),
            "{args:?} says which directory, where it came from and what to do: {stderr}"
        );
        assert!(!stdout.contains("no runs"), "{args:?}: {stdout}");
        assert!(!typo.exists(), "{args:?} made a store at the mistyped path");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_interval_below_its_floor_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().expect("dir");
    for command in [&["config"][..], &["serve", "--addr", "127.0.0.1:0"]] {
        let support::Output {
            code,
            stdout,
            stderr,
        } = support::output(
            support::leasehold(dir.path())
                .args(command)
                .args(["--set", "executor.claim_interval=1ns"]),
        )
        .await;
        assert_ne!(code, Some(0), "{command:?}: {stdout}{stderr}");
        assert!(
            stderr.contains("LEASEHOLD_EXECUTOR_CLAIM_INTERVAL")
                && stderr.contains("at least 100ms")
                && stderr.contains("1ns"),
            "{command:?} names the key, the floor and the value: {stderr}"
        );
    }
    let support::Output {
        code,
        stdout,
        stderr,
    } = support::output(support::leasehold(dir.path()).args([
        "config",
        "--set",
        "executor.claim_interval=100ms",
    ]))
    .await;
    assert_eq!(
        code,
        Some(0),
        "the floor itself is allowed: {stdout}{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_locked_by_a_server_points_to_server() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let command = support::leasehold(&data).model("http://127.0.0.1:1/v1", "m");
    let (mut server, base) = support::serve(command, &[], support::PATIENCE).await;

    let support::Output {
        code,
        stdout,
        stderr,
    } = support::output(support::leasehold(&data).args(["runs", "list"])).await;
    assert_ne!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stderr.contains("locked by another process") && stderr.contains("--server URL"),
        "the lock's message says how to reach the server's runs: {stderr}"
    );
    let support::Output {
        code,
        stdout: after,
        stderr,
    } = support::output(support::leasehold(&data).args(["runs", "list", "--server", &base])).await;
    assert_eq!(code, Some(0), "and that way works: {after}{stderr}");
    // Before the subcommand too, and from LEASEHOLD_SERVER: the same page.
    let support::Output {
        code,
        stdout: before,
        stderr,
    } = support::output(support::leasehold(&data).args(["runs", "--server", &base, "list"])).await;
    assert_eq!((code, &before), (Some(0), &after), "{stderr}");
    let support::Output {
        code,
        stdout: from_env,
        stderr,
    } = support::output(
        support::leasehold(&data)
            .env("LEASEHOLD_SERVER", &base)
            .args(["runs", "list"]),
    )
    .await;
    assert_eq!((code, &from_env), (Some(0), &after), "{stderr}");
    // Listed in the help; a replay over it asks the server for the run.
    let support::Output {
        code: _,
        stdout: help,
        stderr: _,
    } = support::output(support::leasehold(&data).args(["runs", "--help"])).await;
    assert!(
        help.contains("--server") && help.contains("LEASEHOLD_SERVER"),
        "{help}"
    );
    let support::Output {
        code,
        stdout: _,
        stderr,
    } = support::output(
        support::leasehold(&data).args(["runs", "--server", &base, "replay", "run-x"]),
    )
    .await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no run run-x"), "{stderr}");
    server.start_kill().expect("stop serve");
    let _ = server.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_keeps_its_run_in_the_data_directory() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let support::Output {
        code,
        stdout,
        stderr,
    } = support::output(
        support::leasehold(dir.path())
            .arg("demo")
            .arg("--data-dir")
            .arg(&data),
    )
    .await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let shown = stdout
        .lines()
        .find_map(|line| line.split("`leasehold runs trace ").nth(1))
        .unwrap_or_else(|| panic!("the demo says how to show its run again: {stdout}"));
    let command: Vec<&str> = shown
        .split('`')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        command.get(1..3),
        Some(&["--data-dir", &*data.to_string_lossy()][..])
    );

    let support::Output {
        code,
        stdout,
        stderr,
    } = support::output(
        support::leasehold(dir.path())
            .args(["runs", "trace"])
            .args(&command),
    )
    .await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("ESCALATE by evaluator"), "{stdout}");

    let support::Output {
        code,
        stdout,
        stderr,
    } = support::output(
        support::leasehold(dir.path())
            .args(["runs", "show"])
            .args(&command),
    )
    .await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let view: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(view["run_id"], command[0]);
    assert_eq!(view["status"], "completed");
    assert_eq!(view["flow"]["name"], "incident-review");
}
