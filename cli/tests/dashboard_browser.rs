//! The dashboard in a real browser: the real `leasehold demo --serve
//! --interactive` serves its run, and `tests/browser/dashboard.mjs` drives
//! the page in Chromium as a person would — opens the run, sees a wait
//! banner appear and be cleared by evidence, answers the escalation in the
//! pause panel and watches the run complete. The demo process then exits 0.
//! `tests/browser/runs_pages.mjs` pages through more runs than one page of
//! the list holds, then filters them by status.
//! `tests/browser/timeline.mjs` replays a stored run on its timeline: bars,
//! verdict ticks, the pause shaded, and a hostile tool name shown as text.
//!
//! Its peers: Node, `playwright-core` (installed by `scripts/peers.sh`, found
//! through `LEASEHOLD_PEER_PLAYWRIGHT`) and Debian's Chromium
//! (`LEASEHOLD_CHROMIUM`, default `/usr/bin/chromium`, installed by
//! `.ci/run`). A missing peer fails the test with what to do; it never skips.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The `leasehold` command.
const CLI: &str = env!("CARGO_BIN_EXE_leasehold");
/// The `node_modules` folder that holds `playwright-core`.
const PLAYWRIGHT_ENV: &str = "LEASEHOLD_PEER_PLAYWRIGHT";
/// The Chromium executable.
const CHROMIUM_ENV: &str = "LEASEHOLD_CHROMIUM";
const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

/// How long the demo may take to print its address and run.
const STARTUP: Duration = Duration::from_secs(60);
/// How long the browser script may take (it stops itself after 65 s).
const BROWSER: Duration = Duration::from_secs(120);
/// How long the demo may take to exit once asked to.
const EXIT: Duration = Duration::from_secs(15);

/// A child process killed (by its own handle, so by PID) when dropped.
struct Killed {
    child: Child,
    // Held open, as a terminal's would be: an interactive demo must never
    // read end-of-file.
    stdin: Option<ChildStdin>,
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("runtime/ is inside the repository")
        .to_path_buf()
}

/// The peers, or a panic saying how to install the missing one.
fn peers() -> (PathBuf, PathBuf) {
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "node is not installed or does not run ({node:?}): this test drives the dashboard \
         with Node and playwright-core"
    );
    let playwright = std::env::var_os(PLAYWRIGHT_ENV).unwrap_or_else(|| {
        panic!(
            "{PLAYWRIGHT_ENV} is not set: this test drives the dashboard in Chromium with \
             playwright-core. Run scripts/test.sh, which installs the peers, or eval \
             \"$(scripts/peers.sh)\" before cargo test"
        )
    });
    let playwright = PathBuf::from(playwright);
    assert!(
        playwright.join("playwright-core/package.json").is_file(),
        "{PLAYWRIGHT_ENV} points at {}, which holds no playwright-core: run scripts/peers.sh \
         to install the peers",
        playwright.display()
    );
    let chromium =
        PathBuf::from(std::env::var_os(CHROMIUM_ENV).unwrap_or_else(|| DEFAULT_CHROMIUM.into()));
    assert!(
        chromium.is_file(),
        "Chromium was not found at {}: install Debian's chromium (apt-get install -y \
         --no-install-recommends chromium, as .ci/run does) or set {CHROMIUM_ENV}",
        chromium.display()
    );
    (playwright, chromium)
}

/// Waits for `child` until `limit`, leaving it running past that.
fn wait_for_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for `child` until `limit`; kills it past that.
fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let status = wait_for_exit(child, limit);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    status
}

/// Runs `command` to its end or until `limit`, collecting its output.
fn run_for(mut command: Command, limit: Duration) -> (Option<ExitStatus>, Output) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the browser script starts");
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
    let status = wait_for(&mut child, limit);
    let output = Output {
        status: status.unwrap_or_default(),
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    (status, output)
}

#[test]
fn the_dashboard_shows_a_run_live_and_resumes_it_in_a_real_browser() {
    let (playwright, chromium) = peers();
    let data = tempfile::tempdir().expect("a temporary data directory");
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let token = format!("dashboard-{}-{nanos}", std::process::id());

    let mut spawned = Command::new(CLI)
        .arg("--data-dir")
        .arg(data.path().join("store"))
        .args(["demo", "--serve", "--interactive", "--addr", "127.0.0.1:0"])
        .env_remove("LEASEHOLD_CONFIG")
        .env("LEASEHOLD_API_TOKEN", &token)
        .current_dir(data.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the leasehold command starts");
    let stdin = spawned.stdin.take();
    let stdout = spawned.stdout.take().expect("piped stdout");
    let mut demo = Killed {
        child: spawned,
        stdin,
    };
    let (lines, received) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });

    // The two lines the demo prints when it serves: its address and its run.
    let mut printed = Vec::new();
    let (mut url, mut run_id) = (None::<String>, None::<String>);
    let deadline = Instant::now() + STARTUP;
    while url.is_none() || run_id.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match received.recv_timeout(left) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "the demo did not print `dashboard: URL` and `run: ID` within {STARTUP:?}; it \
                 printed:\n{}",
                printed.join("\n")
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = wait_for(&mut demo.child, EXIT);
                panic!(
                    "the demo closed its output ({status:?}) before printing `dashboard: URL` \
                     and `run: ID`; it printed:\n{}",
                    printed.join("\n")
                )
            }
        };
        if let Some(rest) = line.trim().strip_prefix("dashboard:") {
            url = Some(rest.trim().to_owned());
        } else if let Some(rest) = line.trim().strip_prefix("run:") {
            run_id = Some(rest.trim().to_owned());
        }
        printed.push(line);
    }
    let (url, run_id) = (url.expect("a URL"), run_id.expect("a run id"));
    let separator = if url.contains('?') { '&' } else { '?' };
    let page = format!("{url}{separator}token={token}");

    let mut browser = Command::new("node");
    browser
        .arg(repo_root().join("tests/browser/dashboard.mjs"))
        .arg(&page)
        .arg(&run_id)
        .env(PLAYWRIGHT_ENV, &playwright)
        .env(CHROMIUM_ENV, &chromium)
        .current_dir(repo_root());
    let (status, output) = run_for(browser, BROWSER);
    printed.extend(received.try_iter());
    let report = format!(
        "--- browser script stdout:\n{}\n--- browser script stderr:\n{}\n--- demo stdout:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        printed.join("\n")
    );
    let status =
        status.unwrap_or_else(|| panic!("the browser script ran past {BROWSER:?}\n{report}"));
    assert!(
        status.success(),
        "the browser script failed ({status})\n{report}"
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("dashboard test passed"),
        "the browser script exited 0 without passing\n{report}"
    );
    println!("{}", String::from_utf8_lossy(&output.stdout));

    // The demo keeps serving its dashboard until Ctrl-C: a short wait for it
    // to end by itself, then SIGINT, sent to its own process id.
    let mut exit = wait_for_exit(&mut demo.child, Duration::from_secs(3));
    if exit.is_none() {
        let pid = demo.child.id().to_string();
        let sent = Command::new("sh")
            .args(["-c", "kill -INT \"$1\"", "sh", &pid])
            .status()
            .expect("sh runs");
        assert!(
            sent.success(),
            "SIGINT could not be sent to the demo ({pid})"
        );
        exit = wait_for_exit(&mut demo.child, EXIT);
    }
    if exit.is_none() {
        // Diagnose: does it end once its standard input is closed?
        drop(demo.stdin.take());
        let late = wait_for(&mut demo.child, EXIT);
        let _ = reader.join();
        printed.extend(received.try_iter());
        panic!(
            "the demo did not exit within {EXIT:?} of SIGINT with its standard input open (as a \
             terminal's is){}; it printed:\n{}",
            match late {
                Some(status) => format!(
                    ", and exited ({status}) only once its standard input was closed: a read of \
                     standard input holds up its shutdown"
                ),
                None => String::new(),
            },
            printed.join("\n")
        );
    }
    let _ = reader.join();
    printed.extend(received.try_iter());
    let exit = exit.expect("the demo exited");
    assert!(
        exit.success(),
        "the demo exited with {exit}; it printed:\n{}",
        printed.join("\n")
    );
}

/// Reads `serve`'s first line, `leasehold serving on http://ADDR/ …`, and
/// returns ADDR's port.
fn served_port(stdout: std::process::ChildStdout) -> u16 {
    let (lines, received) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let line = received
        .recv_timeout(STARTUP)
        .expect("serve prints where it listens");
    line.split_whitespace()
        .find_map(|word| word.strip_prefix("http://"))
        .and_then(|addr| addr.trim_end_matches('/').rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// `leasehold serve` on `store` without a token, its model unreachable,
/// keeping every finished run,
/// and the port it listens on.
fn serve(store: &Path, cwd: &Path) -> (Killed, u16) {
    let spawned = Command::new(CLI)
        .arg("--data-dir")
        .arg(store)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .env_remove("LEASEHOLD_CONFIG")
        .env_remove("LEASEHOLD_API_TOKEN")
        .env("LEASEHOLD_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
        .env("LEASEHOLD_MODEL_NAME", "unused")
        // The stored runs carry fixed dates, long past by now: kept for
        // ever, so that the executor's retention does not delete them
        // while the page is read.
        .env("LEASEHOLD_EXECUTOR_RETENTION", "forever")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the leasehold command starts");
    let mut server = Killed {
        child: spawned,
        stdin: None,
    };
    let port = served_port(server.child.stdout.take().expect("piped stdout"));
    (server, port)
}

#[test]
fn another_site_cannot_make_the_server_start_a_process_in_a_real_browser() {
    let (playwright, chromium) = peers();
    let data = tempfile::tempdir().expect("a temporary data directory");
    let marker = data.path().join("the-attack-ran");
    // Its model is never called: no run may start.
    let (server, port) = serve(&data.path().join("store"), data.path());

    let mut browser = Command::new("node");
    browser
        .arg(repo_root().join("tests/browser/cross_site.mjs"))
        .arg(port.to_string())
        .arg(&marker)
        .env(PLAYWRIGHT_ENV, &playwright)
        .env(CHROMIUM_ENV, &chromium)
        .current_dir(repo_root());
    let (status, output) = run_for(browser, BROWSER);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let report = format!(
        "--- stdout:\n{stdout}\n--- stderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "the browser script failed ({status:?})\n{report}"
    );
    let seen: serde_json::Value = stdout
        .lines()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("the script printed no result\n{report}"));
    assert_eq!(
        seen["rebind_page"], 403,
        "a rebound name is refused\n{report}"
    );
    assert_eq!(
        seen["rebind_post"], 403,
        "a rebound POST is refused\n{report}"
    );
    assert!(
        !marker.exists(),
        "a web page on another site made the server run a command\n{report}"
    );

    // Nothing was started: the server holds no run.
    let listed = Command::new(CLI)
        .args([
            "runs",
            "list",
            "--server",
            &format!("http://127.0.0.1:{port}"),
        ])
        .env_remove("LEASEHOLD_CONFIG")
        .env_remove("LEASEHOLD_API_TOKEN")
        .output()
        .expect("runs list");
    assert!(listed.status.success(), "{listed:?}");
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains("attack"),
        "{}",
        String::from_utf8_lossy(&listed.stdout)
    );
    drop(server);
}

#[test]
fn the_dashboard_pages_through_more_runs_than_one_page_holds_in_a_real_browser() {
    use leasehold::{
        RunRecord, RunStatus, Store,
        store::{SledConfig, SledStore},
    };

    const TOTAL: u64 = 130;
    let (playwright, chromium) = peers();
    let data = tempfile::tempdir().expect("a temporary data directory");
    let store_dir = data.path().join("store");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let waiting = runtime.block_on(async {
        let store = SledStore::open(SledConfig::new(&store_dir)).expect("the store");
        let mut waiting = 0_u64;
        for n in 0..TOTAL {
            let status = if n % 9 == 4 {
                waiting += 1;
                RunStatus::WaitingHuman
            } else {
                RunStatus::Completed
            };
            let record = RunRecord {
                run_id: format!("run-{n:05}"),
                // The oldest run's task is longer than a listing shows.
                flow: serde_json::json!({"name": "paged", "task": if n == 0 {
                    format!("task 0 {}the end", "é".repeat(1_000))
                } else {
                    format!("task {n}")
                }}),
                status,
                owner_id: None,
                fence: 1,
                lease_expires_at_ms: 0,
                reason: None,
                answer: None,
                pause: None,
                created_at_ms: 1_767_225_600_000 + n,
                updated_at_ms: 1_767_225_600_000 + n,
                fork: None,
            };
            store.create_run(record).await.expect("a run");
        }
        waiting
    });
    drop(runtime);

    // Its model is never called: the runs are all paused or ended.
    let (server, port) = serve(&store_dir, data.path());

    let mut browser = Command::new("node");
    browser
        .arg(repo_root().join("tests/browser/runs_pages.mjs"))
        .arg(port.to_string())
        .arg(TOTAL.to_string())
        .arg(waiting.to_string())
        .env(PLAYWRIGHT_ENV, &playwright)
        .env(CHROMIUM_ENV, &chromium)
        .current_dir(repo_root());
    let (status, output) = run_for(browser, BROWSER);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let report = format!(
        "--- stdout:\n{stdout}\n--- stderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "the browser script failed ({status:?})\n{report}"
    );
    assert!(
        stdout.contains("runs pages test passed"),
        "the browser script exited 0 without passing\n{report}"
    );
    drop(server);
}

/// A tool name no page may turn into markup.
const HOSTILE: &str = r#"<img src=x onerror="window.__leaseholdHostile=true">"#;

/// The stored log `tests/browser/timeline.mjs` checks: one event per line,
/// `(ms after the start, path, kind and fields)`.
fn timeline_events(run_id: &str, start_ms: u64) -> Vec<leasehold::Event> {
    use serde_json::json;
    let verdict = |lease_id: u64, kind: &str, renewals: u32, verdict: &str, by: &str| {
        json!({
            "kind": "verdict", "lease_id": lease_id, "lease_kind": kind,
            "subject": if kind == "tool_call" { HOSTILE } else { "model call" },
            "renewals": renewals,
            "evidence": {"count": renewals, "last_progress_age_ms": null, "phi": null},
            "verdict": verdict, "reason": format!("{verdict} because {HOSTILE}"),
            "decided_by": by,
        })
    };
    let usage = json!({"input_tokens": 10, "output_tokens": 20});
    let tool = |kind: &str, attempt: u32, outcome: Option<&str>| {
        let mut event = json!({
            "kind": kind, "tool": HOSTILE, "idempotency_key": "k-1", "attempt": attempt,
        });
        if let Some(outcome) = outcome {
            event["outcome"] = json!(outcome);
        }
        event
    };
    let lines = [
        (
            0,
            "run",
            json!({"kind": "run_started", "flow": "timeline", "task": "draw", "max_steps": 3}),
        ),
        (
            10,
            "run",
            json!({"kind": "step_started", "step": 1, "limit": 3, "nudges": 0}),
        ),
        (
            20,
            "run",
            json!({"kind": "model_call_started", "step": 1, "stream": true, "attempt": 1}),
        ),
        (
            300,
            "run/model_call:1",
            verdict(1, "model_stream", 0, "RENEW", "ladder"),
        ),
        (
            600,
            "run/model_call:1",
            verdict(1, "model_stream", 1, "RENEW", "evidence"),
        ),
        (900, "run/model_call:1", {
            let mut v = verdict(1, "model_stream", 2, "NUDGE", "evaluator");
            v["nudge"] = json!("wrap it up");
            v
        }),
        (
            1000,
            "run",
            json!({"kind": "model_call_finished", "step": 1, "outcome": "ok", "tool_calls": 1, "usage": usage}),
        ),
        (
            1010,
            "run/tool_call:1.0",
            tool("tool_call_started", 1, None),
        ),
        (
            1300,
            "run/tool_call:1.0",
            verdict(2, "tool_call", 0, "INTERVENE", "policy"),
        ),
        (
            1300,
            "run/tool_call:1.0",
            json!({"kind": "intervened", "lease_id": 2, "reason": HOSTILE}),
        ),
        (
            1300,
            "run/tool_call:1.0",
            tool("tool_call_finished", 1, Some("intervened")),
        ),
        (
            1300,
            "run/tool_call:1.0",
            json!({"kind": "restarted", "attempt": 2, "delay_ms": 200, "reason": HOSTILE}),
        ),
        (
            1500,
            "run/tool_call:1.0",
            tool("tool_call_started", 2, None),
        ),
        (
            1800,
            "run/tool_call:1.0",
            verdict(3, "tool_call", 0, "RENEW", "breaker"),
        ),
        (
            2100,
            "run/tool_call:1.0",
            verdict(3, "tool_call", 1, "ESCALATE", "evaluator"),
        ),
        (
            2100,
            "run/tool_call:1.0",
            json!({"kind": "escalated", "lease_id": 3, "reason": HOSTILE}),
        ),
        (
            2100,
            "run/tool_call:1.0",
            tool("tool_call_finished", 2, Some("escalated")),
        ),
        (
            2100,
            "run",
            json!({"kind": "paused", "reason": HOSTILE, "subject": HOSTILE}),
        ),
        (5100, "run", json!({"kind": "resumed", "guidance": HOSTILE})),
        (
            5100,
            "run",
            json!({"kind": "step_started", "step": 2, "limit": 3, "nudges": 1}),
        ),
        (
            5120,
            "run",
            json!({"kind": "model_call_started", "step": 2, "stream": true, "attempt": 1}),
        ),
        (
            5400,
            "run/model_call:2",
            verdict(4, "model_stream", 10, "INTERVENE", "cap"),
        ),
        (
            5400,
            "run/model_call:2",
            json!({"kind": "renewal_cap_reached", "lease_id": 4, "max_renewals": 10}),
        ),
        (
            5400,
            "run",
            json!({"kind": "model_call_finished", "step": 2, "outcome": "capped", "tool_calls": 0, "usage": usage}),
        ),
        (
            5400,
            "run/model_call:2",
            json!({"kind": "restarted", "attempt": 2, "delay_ms": 100, "reason": "capped"}),
        ),
        (
            5500,
            "run",
            json!({"kind": "model_call_started", "step": 2, "stream": true, "attempt": 2}),
        ),
        (
            5800,
            "run",
            json!({"kind": "model_call_finished", "step": 2, "outcome": "ok", "tool_calls": 0, "usage": usage}),
        ),
        (
            5900,
            "run",
            json!({"kind": "run_completed", "answer": HOSTILE, "steps": 2}),
        ),
    ];
    lines
        .into_iter()
        .zip(1_u64..)
        .map(|((offset, path, mut kind), seq)| {
            kind["seq"] = json!(seq);
            kind["position"] = json!(seq);
            kind["at"] = json!(start_ms + offset);
            kind["run_id"] = json!(run_id);
            kind["path"] = json!(path);
            serde_json::from_value(kind)
                .unwrap_or_else(|e| panic!("event {seq} of the fixture: {e}"))
        })
        .collect()
}

#[test]
fn the_timeline_draws_a_stored_run_and_shows_event_text_as_text_in_a_real_browser() {
    use leasehold::{
        RunRecord, RunStatus, Store,
        store::{SledConfig, SledStore},
    };

    let (playwright, chromium) = peers();
    let data = tempfile::tempdir().expect("a temporary data directory");
    let store_dir = data.path().join("store");
    let run_id = "run-timeline";
    let start_ms = 1_767_225_600_000;
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let store = SledStore::open(SledConfig::new(&store_dir)).expect("the store");
        let record = RunRecord {
            run_id: run_id.to_owned(),
            flow: serde_json::json!({"name": "timeline", "task": "draw"}),
            status: RunStatus::Completed,
            owner_id: None,
            fence: 1,
            lease_expires_at_ms: 0,
            reason: None,
            answer: Some(HOSTILE.to_owned()),
            pause: None,
            created_at_ms: start_ms,
            updated_at_ms: start_ms + 5900,
            fork: None,
        };
        store.create_run(record).await.expect("a run");
        let appended = store
            .append_events(run_id, timeline_events(run_id, start_ms), 1)
            .await
            .expect("the events are stored");
        assert!(appended.is_applied(), "the events carry the run's fence");
        store.flush().await.expect("flushed");
    });
    drop(runtime);

    // Its model is never called: the run has ended.
    let (server, port) = serve(&store_dir, data.path());

    let mut browser = Command::new("node");
    browser
        .arg(repo_root().join("tests/browser/timeline.mjs"))
        .arg(port.to_string())
        .arg(run_id)
        .arg(HOSTILE)
        .env(PLAYWRIGHT_ENV, &playwright)
        .env(CHROMIUM_ENV, &chromium)
        .current_dir(repo_root());
    let (status, output) = run_for(browser, BROWSER);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let report = format!(
        "--- stdout:\n{stdout}\n--- stderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "the browser script failed ({status:?})\n{report}"
    );
    assert!(
        stdout.contains("timeline test passed"),
        "the browser script exited 0 without passing\n{report}"
    );
    drop(server);
}
