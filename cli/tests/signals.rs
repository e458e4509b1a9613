//! SIGINT and SIGTERM stop every command cleanly, sent to the real
//! `leasehold` process: `run` and `runs resume` with a stdio tool server that
//! never answers exit 130 or 143, leave no process of the tool server's
//! process group behind and leave the run resumable; `serve` with an event
//! stream open exits 143 within seconds, the stream given a final event.
//!
//! The model is the embedded demo's scripted server (its workers call
//! `search_logs`, `fetch_metrics` and `rollback_deploy`); the tool server is
//! a few lines of Python speaking MCP over stdio that answers the handshake
//! and the tool list and never answers a call, and that starts a `sleep` in
//! its process group, as `npx` starts `node`.

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use futures_util::StreamExt;
use leasehold::fencing;
use support::PATIENCE;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Child;

use support::hanging_tool::{
    Hanging, group_emptied, last_group, leasehold, run_until_a_tool_call_hangs, running_in_group,
    until_a_tool_call_hangs,
};

/// How long a stopped command may take to exit: its shutdown is bounded by
/// seconds.
const EXIT_WITHIN: Duration = Duration::from_secs(20);

/// Sends `signal` to `child` once a tool call hangs, checks that it exits
/// with `code` within seconds and that the hanging server's whole process
/// group is gone; returns the run's id and what the command said on stderr.
async fn stop_mid_call(
    mut child: Child,
    record: &Path,
    signal: &str,
    code: i32,
) -> (String, String) {
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut stderr = child.stderr.take().expect("stderr");
    let said = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let run_id = until_a_tool_call_hangs(&mut lines, PATIENCE).await;
    let (pgid, helper) = last_group(record);
    assert!(
        running_in_group(pgid).contains(&helper),
        "the server's helper runs in its group {pgid} while the call hangs"
    );
    support::signal(&child, &format!("-{signal}"));
    let exit = tokio::time::timeout(EXIT_WITHIN, child.wait())
        .await
        .unwrap_or_else(|_| panic!("the command did not exit within {EXIT_WITHIN:?} of {signal}"))
        .expect("wait");
    // Drain what is left of stdout so that stderr's reader ends.
    while let Ok(Some(_)) = lines.next_line().await {}
    let said = said.await.expect("stderr");
    assert_eq!(exit.code(), Some(code), "after {signal}; stderr:\n{said}");
    assert!(
        group_emptied(pgid, Duration::from_secs(5)).await,
        "after {signal}, processes of the tool server's group {pgid} are left: {:?}",
        running_in_group(pgid)
    );
    (run_id, said)
}

/// The run's status in the table `leasehold runs list` prints.
async fn listed_status(data: &Path, model: &str, run_id: &str) -> String {
    let out = leasehold(data, model)
        .args(["runs", "list"])
        .output()
        .await
        .expect("runs list");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    table
        .lines()
        .find_map(|row| {
            let mut cells = row.split_whitespace();
            (cells.next() == Some(run_id)).then(|| cells.next().unwrap_or_default().to_owned())
        })
        .unwrap_or_else(|| panic!("{run_id} is listed:\n{table}"))
}

/// `run` stopped by `first` mid tool call, then `runs resume` stopped by
/// `second`: each exits with its signal's code, kills its tool server's
/// group, and leaves the run for the next resume: `runs show` says it is
/// orphaned, stopped cleanly, and how to resume it.
async fn stop_run_then_resume(first: (&str, i32), second: (&str, i32)) {
    let hanging = Hanging::start().await;

    let run = hanging.run();
    let (run_id, said) = stop_mid_call(run, &hanging.record, first.0, first.1).await;
    assert!(
        said.contains(&format!("leasehold runs resume {run_id}")),
        "{said}"
    );
    // Nobody runs it: it shows as orphaned, saying it was stopped cleanly
    // (not that nobody knows why), with the command that resumes it.
    let view = hanging.shown(&run_id).await;
    assert_eq!(view["status"], "orphaned", "{view}");
    assert_eq!(
        view["reason"],
        fencing::ORPHANED_AFTER_STOP,
        "a run stopped cleanly says so, not that nobody knows why it stopped"
    );
    assert_eq!(
        view["resume_with"],
        format!("leasehold runs resume {run_id}").as_str()
    );
    assert_eq!(
        listed_status(&hanging.data, &hanging.model, &run_id).await,
        "orphaned",
        "the listing tells what the run shown whole tells"
    );

    let resume = leasehold(&hanging.data, &hanging.model)
        .args(["runs", "resume", &run_id, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs resume");
    let (resumed, _) = stop_mid_call(resume, &hanging.record, second.0, second.1).await;
    assert_eq!(resumed, run_id);
    let groups = std::fs::read_to_string(&hanging.record).expect("record");
    assert_eq!(
        groups.lines().count(),
        2,
        "the resumed run started its own server:\n{groups}"
    );
    assert_eq!(hanging.shown(&run_id).await["status"], "orphaned");
    hanging.stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_run_with_143_killing_its_stdio_tool_group_and_the_run_stays_resumable() {
    stop_run_then_resume(("TERM", 143), ("INT", 130)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_run_with_130_killing_its_stdio_tool_group_and_the_run_stays_resumable() {
    stop_run_then_resume(("INT", 130), ("TERM", 143)).await;
}

/// SIGHUP is what a closed terminal (or a dropped SSH session) sends:
/// `leasehold run` stops its run in place as on SIGTERM and exits 129,
/// though nobody reads what it says any more (both its outputs were closed
/// before the signal): its words are dropped, not a panic; its tool
/// server's group is killed; the run is left resumable, shown and listed
/// as stopped cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_from_a_closed_terminal_stops_run_in_place_with_129() {
    let hanging = Hanging::start().await;

    let mut run = hanging.run();
    let mut lines = BufReader::new(run.stdout.take().expect("stdout")).lines();
    let run_id = until_a_tool_call_hangs(&mut lines, PATIENCE).await;
    let (pgid, _) = last_group(&hanging.record);
    // The terminal goes: nobody reads either output from now on.
    drop(lines);
    drop(run.stderr.take());
    support::signal(&run, "-HUP");
    let exit = tokio::time::timeout(EXIT_WITHIN, run.wait())
        .await
        .expect("the command exits within seconds of SIGHUP")
        .expect("wait");
    assert_eq!(exit.code(), Some(129), "{exit:?}");
    assert!(
        group_emptied(pgid, Duration::from_secs(5)).await,
        "after SIGHUP, processes of the tool server's group {pgid} are left: {:?}",
        running_in_group(pgid)
    );
    let view = hanging.shown(&run_id).await;
    assert_eq!(view["status"], "orphaned", "{view}");
    assert_eq!(view["reason"], fencing::ORPHANED_AFTER_STOP, "{view}");
    assert_eq!(
        listed_status(&hanging.data, &hanging.model, &run_id).await,
        "orphaned"
    );
    hanging.stack.shutdown().await;
}

/// A model endpoint that accepts connections and never answers: a run on it
/// stays `running`, its model call in flight.
async fn silent_model() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    (format!("http://{addr}/v1"), held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_serve_with_143_within_seconds_and_an_open_event_stream_gets_a_final_event() {
    let (model, held) = silent_model().await;
    let dir = tempfile::tempdir().expect("dir");
    let (mut server, base) = support::serve(leasehold(dir.path(), &model), &[], PATIENCE).await;

    let http = reqwest::Client::new();
    let flow = serde_json::json!({"name": "waits", "task": "Wait for the model.", "max_steps": 1});
    let run_id = support::post_run(&http, &base, &flow).await;
    let response = http
        .get(format!("{base}/runs/{run_id}/events"))
        .send()
        .await
        .expect("GET the event stream");
    assert!(response.status().is_success(), "{}", response.status());
    let mut stream = response.bytes_stream();
    let mut received = String::new();
    // The stream is open and live once the run's first event is through.
    while !received.contains("run_started") {
        let chunk = tokio::time::timeout(PATIENCE, stream.next())
            .await
            .expect("the run's first event arrives")
            .expect("the stream stays open")
            .expect("a chunk");
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
    let before = received.len();

    support::signal(&server, "-TERM");
    let closed = tokio::time::timeout(EXIT_WITHIN, async {
        while let Some(Ok(chunk)) = stream.next().await {
            received.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    let after = &received[before..];
    assert!(
        closed.is_ok(),
        "the event stream was not closed within {EXIT_WITHIN:?} of SIGTERM; it got:\n{after}"
    );
    assert!(
        after.lines().any(|l| l.starts_with("event:")),
        "the stream closed without a final event; after SIGTERM it got:\n{after}"
    );
    let exit = tokio::time::timeout(EXIT_WITHIN, server.wait())
        .await
        .expect("serve exits within seconds of SIGTERM")
        .expect("wait");
    assert_eq!(exit.code(), Some(143));
    held.abort();
}

/// `leasehold demo ARGS` stopped by `signal` once a tool call has started
/// exits with `code` within seconds, without its summary.
async fn stop_demo(args: &[&str], signal: &str, code: i32) {
    let dir = tempfile::tempdir().expect("dir");
    let mut demo = leasehold(dir.path(), "http://127.0.0.1:1/v1")
        .arg("demo")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("demo");
    let mut lines = BufReader::new(demo.stdout.take().expect("stdout")).lines();
    let mut stderr = demo.stderr.take().expect("stderr");
    let said = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    loop {
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("the demo's log keeps coming until a tool call starts")
            .expect("read")
            .expect("the demo ended before a tool call started");
        if line.contains("tool_call_started") {
            break;
        }
    }
    support::signal(&demo, &format!("-{signal}"));
    let exit = tokio::time::timeout(EXIT_WITHIN, demo.wait())
        .await
        .unwrap_or_else(|_| panic!("the demo did not exit within {EXIT_WITHIN:?} of {signal}"))
        .expect("wait");
    let mut rest = String::new();
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push_str(&line);
        rest.push('\n');
    }
    let said = said.await.expect("stderr");
    assert_eq!(
        exit.code(),
        Some(code),
        "demo {args:?} after {signal}; stderr:\n{said}"
    );
    assert!(
        said.contains(&format!(
            "SIG{signal}: the demo stopped before its run ended"
        )),
        "{said}"
    );
    assert!(!rest.contains("run_completed"), "{rest}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_demo_with_143() {
    stop_demo(&[], "TERM", 143).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_the_interactive_demo_with_130() {
    stop_demo(&["--interactive"], "INT", 130).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_demo_with_its_dashboard_with_143() {
    stop_demo(&["--serve", "--addr", "127.0.0.1:0"], "TERM", 143).await;
}

/// A run whose executor was killed (SIGKILL: no clean stop, no lease let
/// go) on its data directory is resumed at once, not when its ten-minute
/// lease runs out: sled is opened by one process at a time, so the
/// executor that holds the run, not being this one, is dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_executor_was_killed_is_resumed_at_once_on_its_data_directory() {
    let hanging = Hanging::start().await;

    let command =
        leasehold(&hanging.data, &hanging.model).with_env("LEASEHOLD_RUN_LEASE_TTL", "10m");
    let (mut run, run_id) = run_until_a_tool_call_hangs(command, &hanging.flow, PATIENCE).await;
    let (pgid, _) = last_group(&hanging.record);
    support::signal(&run, "-KILL");
    let _ = run.wait().await;
    // Whatever the executor left behind is not this test's subject.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status();

    let mut resume = leasehold(&hanging.data, &hanging.model)
        .env("LEASEHOLD_RUN_LEASE_TTL", "10m")
        .args(["runs", "resume", &run_id, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs resume");
    let mut lines = BufReader::new(resume.stdout.take().expect("piped")).lines();
    // It runs the run again here: the hanging call is made again (an
    // idempotent tool, called with the same key).
    let resumed = until_a_tool_call_hangs(&mut lines, PATIENCE).await;
    assert_eq!(resumed, run_id);
    support::signal(&resume, "-TERM");
    let exit = tokio::time::timeout(EXIT_WITHIN, resume.wait())
        .await
        .expect("runs resume exits within seconds of SIGTERM")
        .expect("wait");
    let mut said = String::new();
    let _ = resume
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut said)
        .await;
    assert_eq!(exit.code(), Some(143), "{said}");
    assert!(!said.contains("is held by"), "{said}");
    hanging.stack.shutdown().await;
}
