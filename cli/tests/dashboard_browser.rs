//! The dashboard in a real browser: the real `leasehold demo --serve
//! --interactive` serves its run (priced: the page shows what it cost), and `tests/browser/dashboard.mjs` drives
//! the page in Chromium as a person would — opens the run, sees a wait
//! banner appear and be cleared by evidence, sees no bar grow under the
//! open pause's shade, answers the escalation in the pause panel and
//! watches the run complete. The demo process then exits 0.
//! `tests/browser/runs_pages.mjs` pages through more runs than one page of
//! the list holds, then filters them by status.
//! `tests/browser/timeline.mjs` replays a stored run on its timeline: bars,
//! verdict ticks, the pause shaded, and a hostile tool name shown as text.
//! `tests/browser/fork.mjs` forks a run from a step of its timeline, reads
//! the fork's lineage and its replayed call, compares it with its parent
//! side by side, and sees a refused fork's reason as text.
//! `tests/browser/lineage.mjs` reads a stored fork of a worker's step: what
//! a person had answered, the changes, a call replayed whose result a person
//! gave, and the worker's steps beside its parent's.
//! `tests/browser/hands.mjs` handles a running run by hand from its page —
//! a hung call's lease extended and stopped from the timeline, a message
//! enqueued and one refused, the run paused and resumed, then rolled back
//! into a fork — and the test reads each act back from the run's log.
//! `tests/browser/endpoints.mjs` marks the model endpoint down and up from
//! the list's Endpoints panel, the test reading the server between the
//! clicks: a run started meanwhile waits on it, is counted and linked
//! there, reads on its page that it resumes by itself, and completes once
//! the endpoint is marked up.
//!
//! Its peers: Node, `playwright-core` (installed by `scripts/peers.sh`, found
//! through `LEASEHOLD_PEER_PLAYWRIGHT`) and Debian's Chromium
//! (`LEASEHOLD_CHROMIUM`, default `/usr/bin/chromium`, installed by
//! `.ci/run`). A missing peer fails the test with what to do; it never skips.

use leasehold::{ChangeSource, EventLog, RunStore};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod support;

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
    // Prices for the demo's two models: the page shows what the run cost.
    let config = data.path().join("leasehold.toml");
    std::fs::write(
        &config,
        "[prices.\"leasehold-demo\"]\ninput = 3\noutput = 15\n\
         [prices.\"leasehold-demo-judge\"]\ninput = 0.25\noutput = 1.25\n",
    )
    .expect("the configuration is written");

    let mut spawned = Command::new(CLI)
        .arg("--data-dir")
        .arg(data.path().join("store"))
        .args(["demo", "--serve", "--interactive", "--addr", "127.0.0.1:0"])
        .env("LEASEHOLD_CONFIG", &config)
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
    serve_with(store, cwd, |command| {
        command
            .env_remove("LEASEHOLD_API_TOKEN")
            .env("LEASEHOLD_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
            .env("LEASEHOLD_MODEL_NAME", "unused");
    })
}

/// `leasehold serve` on `store`, keeping every finished run, as `configure`
/// sets it up (its model, its token, more arguments), and the port it
/// listens on.
fn serve_with(store: &Path, cwd: &Path, configure: impl FnOnce(&mut Command)) -> (Killed, u16) {
    let mut command = Command::new(CLI);
    command
        .arg("--data-dir")
        .arg(store)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .env_remove("LEASEHOLD_CONFIG")
        // The stored runs carry fixed dates, long past by now: kept for
        // ever, so that the executor's retention does not delete them
        // while the page is read.
        .env("LEASEHOLD_EXECUTOR_RETENTION", "forever")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    configure(&mut command);
    let spawned = command.spawn().expect("the leasehold command starts");
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
        RunRecord, RunStatus,
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
                trace_parent: None,
                tenant: None,
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
    stored_events(run_id, start_ms, lines)
}

/// A run's stored log from `(ms after the start, path, kind and fields)`
/// lines, numbered from 1.
fn stored_events(
    run_id: &str,
    start_ms: u64,
    lines: impl IntoIterator<Item = (u64, &'static str, serde_json::Value)>,
) -> Vec<leasehold::Event> {
    use serde_json::json;
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
        RunRecord, RunStatus,
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
            trace_parent: None,
            tenant: None,
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
            .append_events(
                run_id,
                timeline_events(run_id, start_ms)
                    .into_iter()
                    .map(std::sync::Arc::new)
                    .collect(),
                1,
            )
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

/// The worker the stored fork was forked in.
const WORKER: &str = "run/worker:researcher:1";

/// A verdict event's kind and fields, on a model call's lease.
fn model_verdict(lease_id: u64, verdict: &str, by: &str) -> serde_json::Value {
    serde_json::json!({
        "kind": "verdict", "lease_id": lease_id, "lease_kind": "model_blocking",
        "subject": "model call", "renewals": 0,
        "evidence": {"count": 0, "last_progress_age_ms": null, "phi": null},
        "verdict": verdict, "reason": format!("{verdict} by {by}"), "decided_by": by,
    })
}

/// A `model_call_finished` event's kind and fields.
fn model_finished(step: u32, tool_calls: u32, input: u64, output: u64) -> serde_json::Value {
    serde_json::json!({
        "kind": "model_call_finished", "step": step, "outcome": "ok", "tool_calls": tool_calls,
        "usage": {"input_tokens": input, "output_tokens": output},
    })
}

/// The stored parent `tests/browser/lineage.mjs` reads: the root's step 1
/// spawns a researcher, whose step 1 searches (renewed by the ladder) and
/// whose step 2 answers (nudged by the evaluator); the root's step 2
/// answers.
fn lineage_parent_events(run_id: &str, start_ms: u64) -> Vec<leasehold::Event> {
    use serde_json::json;
    let key = format!("{run_id}/{WORKER}/1/0");
    stored_events(
        run_id,
        start_ms,
        [
            (
                0,
                "run",
                json!({"kind": "run_started", "flow": "research", "task": "Find the cause.", "max_steps": 6}),
            ),
            (
                10,
                "run",
                json!({"kind": "step_started", "step": 1, "limit": 6, "nudges": 0}),
            ),
            (100, "run", model_finished(1, 1, 100, 10)),
            (
                110,
                WORKER,
                json!({"kind": "worker_spawned", "worker": "researcher", "task": "Read the logs."}),
            ),
            (
                120,
                WORKER,
                json!({"kind": "step_started", "step": 1, "limit": 4, "nudges": 0}),
            ),
            (
                300,
                "run/worker:researcher:1/model_call:1",
                model_verdict(1, "RENEW", "ladder"),
            ),
            (400, WORKER, model_finished(1, 1, 50, 5)),
            (
                410,
                "run/worker:researcher:1/tool_call:1.0",
                json!({"kind": "tool_call_started", "tool": "search", "idempotency_key": key, "attempt": 1}),
            ),
            (
                500,
                "run/worker:researcher:1/tool_call:1.0",
                json!({"kind": "tool_call_finished", "tool": "search", "idempotency_key": key, "attempt": 1, "outcome": "ok"}),
            ),
            (
                510,
                WORKER,
                json!({"kind": "step_started", "step": 2, "limit": 4, "nudges": 0}),
            ),
            (
                700,
                "run/worker:researcher:1/model_call:2",
                model_verdict(2, "NUDGE", "evaluator"),
            ),
            (800, WORKER, model_finished(2, 0, 60, 6)),
            (
                810,
                WORKER,
                json!({"kind": "worker_finished", "worker": "researcher", "outcome": "ok", "result": "the disk is full"}),
            ),
            (
                820,
                "run",
                json!({"kind": "step_started", "step": 2, "limit": 6, "nudges": 0}),
            ),
            (900, "run", model_finished(2, 0, 120, 12)),
            (
                910,
                "run",
                json!({"kind": "run_completed", "answer": "The disk is full.", "steps": 2}),
            ),
        ],
    )
}

/// The stored fork of the researcher's step 2 (with `origin`'s guidance,
/// changes and what a person had answered): the search its parent made,
/// whose result a person gave, replayed; the researcher's step 2 again
/// (intervened by its policy); the root's step 2.
fn lineage_fork_events(
    run_id: &str,
    origin: &leasehold::ForkOrigin,
    start_ms: u64,
) -> Vec<leasehold::Event> {
    use serde_json::json;
    stored_events(
        run_id,
        start_ms,
        [
            (
                0,
                "run",
                json!({
                    "kind": "run_forked", "flow": "research", "parent": origin.parent,
                    "loop_path": origin.path, "step": origin.step, "guidance": origin.guidance,
                    "changes": origin.changes, "person_answers": origin.person_answers,
                }),
            ),
            (
                5,
                "run/worker:researcher:1/tool_call:1.0",
                json!({
                    "kind": "tool_call_replayed", "tool": "search",
                    "idempotency_key": format!("{}/{WORKER}/1/0", origin.parent),
                    "made_by": origin.parent, "by_person": true,
                }),
            ),
            (
                10,
                WORKER,
                json!({"kind": "step_started", "step": 2, "limit": 4, "nudges": 1}),
            ),
            (
                200,
                "run/worker:researcher:1/model_call:2",
                model_verdict(1, "INTERVENE", "policy"),
            ),
            (300, WORKER, model_finished(2, 0, 70, 7)),
            (
                310,
                WORKER,
                json!({"kind": "worker_finished", "worker": "researcher", "outcome": "ok", "result": "the disk is not full"}),
            ),
            (
                320,
                "run",
                json!({"kind": "step_started", "step": 2, "limit": 12, "nudges": 0}),
            ),
            (400, "run", model_finished(2, 0, 130, 13)),
            (
                410,
                "run",
                json!({"kind": "run_completed", "answer": "The disk is not full.", "steps": 2}),
            ),
        ],
    )
}

#[test]
fn a_stored_fork_of_a_worker_step_shows_its_lineage_and_its_parent_side_by_side_in_a_real_browser()
{
    use leasehold::{
        ForkOrigin, RunRecord, RunStatus,
        store::{SledConfig, SledStore},
    };

    let (playwright, chromium) = peers();
    let data = tempfile::tempdir().expect("a temporary data directory");
    let store_dir = data.path().join("store");
    let (parent, fork) = ("run-lineage-parent", "run-lineage-fork");
    let start_ms = 1_767_225_600_000;
    let origin = ForkOrigin {
        parent: parent.to_owned(),
        path: WORKER.to_owned(),
        step: 2,
        seq: 5,
        guidance: Some(format!("Check the disk. {HOSTILE}")),
        changes: vec!["leases.tool_call=30s".to_owned(), "max_steps=12".to_owned()],
        person_answers: vec!["Use the staging logs.".to_owned(), HOSTILE.to_owned()],
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let store = SledStore::open(SledConfig::new(&store_dir)).expect("the store");
        for (run_id, answer, created, fork, events) in [
            (
                parent,
                "The disk is full.",
                start_ms,
                None,
                lineage_parent_events(parent, start_ms),
            ),
            (
                fork,
                "The disk is not full.",
                start_ms + 60_000,
                Some(origin.clone()),
                lineage_fork_events(fork, &origin, start_ms + 60_000),
            ),
        ] {
            let record = RunRecord { trace_parent: None, tenant: None,
                run_id: run_id.to_owned(),
                flow: serde_json::json!({"name": "research", "task": "Find the cause.", "max_steps": 6}),
                status: RunStatus::Completed,
                owner_id: None,
                fence: 1,
                lease_expires_at_ms: 0,
                reason: None,
                answer: Some(answer.to_owned()),
                pause: None,
                created_at_ms: created,
                updated_at_ms: created + 1_000,
                fork,
            };
            store.create_run(record).await.expect("a run");
            let appended = store
                .append_events(run_id, events.into_iter().map(std::sync::Arc::new).collect(), 1)
                .await
                .expect("the events are stored");
            assert!(appended.is_applied(), "the events carry the run's fence");
        }
        store.flush().await.expect("flushed");
    });
    drop(runtime);

    // Its model is never called: the runs have ended, and a fork of the
    // parent is refused (it kept no history to fork from).
    let (server, port) = serve(&store_dir, data.path());

    let mut browser = Command::new("node");
    browser
        .arg(repo_root().join("tests/browser/lineage.mjs"))
        .arg(port.to_string())
        .arg(parent)
        .arg(fork)
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
        stdout.contains("lineage test passed"),
        "the browser script exited 0 without passing\n{report}"
    );
    println!("{stdout}");
    drop(server);
}

/// The model the fork test's runs call: it asks for `charge` until its
/// conversation holds a tool result, then answers with the last thing a
/// user said (the task, or a fork's guidance). Its token counts differ
/// from request to request (they follow the request's size); each request
/// is appended, with the usage answered, as one JSON line to the file
/// named by its first argument.
const FORK_MODEL: &str = r#"
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = sys.argv[1]

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        body = json.loads(raw)
        messages = body.get("messages", [])
        if any(m.get("role") == "tool" for m in messages):
            said = [m.get("content") for m in messages if m.get("role") == "user"][-1]
            message = {"role": "assistant", "content": "settled; last said: " + said}
            completion = 5 + len(said) % 7
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "charge", "arguments": json.dumps({"order": "7"})}}]}
            completion = 3
        usage = {"prompt_tokens": 10 + len(raw) % 97, "completion_tokens": completion}
        with open(log, "a") as f:
            f.write(json.dumps({"messages": len(messages), "usage": usage}) + "\n")
        answer = {"id": "x", "object": "chat.completion",
                  "choices": [{"index": 0, "message": message,
                               "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                  "usage": usage}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// The fork test's tool server: `support/ledger_mcp.py`, an MCP server
/// over stdio that records each call's idempotency key.
const FORK_TOOLS: &str = support::LEDGER_MCP_SERVER;

/// Guidance for the fork, with markup no page may make an element of.
const FORK_GUIDANCE: &str =
    r#"Answer in French. <img src=x onerror="window.__leaseholdHostile=true">"#;

/// Every JSON line of the file at `path` (none if it does not exist).
fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// The input and output tokens the model answered to `requests`, summed.
fn tokens(requests: &[serde_json::Value]) -> (u64, u64) {
    requests.iter().fold((0, 0), |(input, output), r| {
        (
            input + r["usage"]["prompt_tokens"].as_u64().expect("prompt tokens"),
            output
                + r["usage"]["completion_tokens"]
                    .as_u64()
                    .expect("completion tokens"),
        )
    })
}

#[test]
fn a_run_is_forked_from_its_timeline_and_compared_with_its_parent_in_a_real_browser() {
    let (playwright, chromium) = peers();
    let data = tempfile::tempdir().expect("a temporary data directory");
    let requests = data.path().join("requests.jsonl");
    let ledger = data.path().join("ledger.jsonl");
    let tools = data.path().join("ledger_mcp.py");
    std::fs::write(&tools, FORK_TOOLS).expect("write the tool server");
    let model = support::PythonPeer::start(FORK_MODEL, &[requests.to_str().expect("a path")]);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let token = format!("fork-{}-{nanos}", std::process::id());
    // A posted flow may name its tool server's command only with a token
    // and `--allow-flow-tools`.
    let (server, port) = serve_with(&data.path().join("store"), data.path(), |command| {
        command
            .arg("--allow-flow-tools")
            .env("LEASEHOLD_API_TOKEN", &token)
            .env("LEASEHOLD_MODEL_BASE_URL", &model.base)
            .env("LEASEHOLD_MODEL_NAME", "ledger-model");
    });
    let base = format!("http://127.0.0.1:{port}");

    // The parent: it charges (a call that takes money), then answers.
    let flow = serde_json::json!({
        "name": "orders",
        "task": "Settle order 7.",
        "max_steps": 6,
        "stream": false,
        "tools": [{
            "name": "ledger",
            "command": ["python3", tools.to_str().expect("a path"), ledger.to_str().expect("a path")],
        }],
    });
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let http = support::authorized(&token);
    let completed = |view: &serde_json::Value| view["status"] == "completed";
    let parent = runtime.block_on(async {
        let parent = support::post_run(&http, &base, &flow).await;
        support::view_until(&http, &base, &parent, BROWSER, "completed", completed).await;
        parent
    });
    let parent_requests = json_lines(&requests).len();
    assert_eq!(parent_requests, 2, "the parent called its model twice");
    assert_eq!(json_lines(&ledger).len(), 1, "the parent charged once");

    let mut browser = Command::new("node");
    browser
        .arg(repo_root().join("tests/browser/fork.mjs"))
        .arg(port.to_string())
        .arg(&token)
        .arg(&parent)
        .arg(FORK_GUIDANCE)
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
        stdout.contains("fork test passed"),
        "the browser script exited 0 without passing\n{report}"
    );
    println!("{stdout}");
    let seen: serde_json::Value = stdout
        .lines()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("the script printed no result\n{report}"));
    let fork = seen["fork"]
        .as_str()
        .unwrap_or_else(|| panic!("no fork id\n{report}"))
        .to_owned();

    // The fork the page made is the one asked for, and it ran its step 2
    // without charging again.
    let (parent_view, fork_view, runs) = runtime.block_on(async {
        let listed: serde_json::Value = http
            .get(format!("{base}/runs"))
            .send()
            .await
            .expect("GET /runs")
            .json()
            .await
            .expect("JSON");
        (
            support::get_run(&http, &base, &parent).await,
            support::get_run(&http, &base, &fork).await,
            listed["runs"].as_array().map_or(0, Vec::len),
        )
    });
    assert_eq!(fork_view["fork"]["parent"], parent.as_str(), "{fork_view}");
    assert_eq!(fork_view["fork"]["path"], "run", "{fork_view}");
    assert_eq!(fork_view["fork"]["step"], 2, "{fork_view}");
    assert_eq!(fork_view["fork"]["guidance"], FORK_GUIDANCE, "{fork_view}");
    assert_eq!(fork_view["status"], "completed", "{fork_view}");
    assert_eq!(
        fork_view["tool_calls"][0]["made_by"],
        parent.as_str(),
        "{fork_view}"
    );
    let charges = json_lines(&ledger);
    assert_eq!(
        charges.len(),
        1,
        "the tool server saw the charge once: {charges:?}"
    );
    assert_eq!(
        charges[0]["key"],
        format!("{parent}/run/1/0"),
        "{charges:?}"
    );
    assert_eq!(runs, 2, "the refused fork made no run\n{report}");

    // What the comparison showed is what each run did: the answers, the
    // steps, and the tokens the model answered to each run's requests.
    let all = json_lines(&requests);
    assert_eq!(
        all.len(),
        parent_requests + 1,
        "the fork called its model once"
    );
    let (parent_in, parent_out) = tokens(&all[..parent_requests]);
    let (fork_in, fork_out) = tokens(&all[parent_requests..]);
    let shown = &seen["compare"];
    for (side, view, steps_run, input, output) in [
        ("parent", &parent_view, 2, parent_in, parent_out),
        ("fork", &fork_view, 1, fork_in, fork_out),
    ] {
        let column = &shown[side];
        assert_eq!(column["status"], "completed", "{side}: {shown}");
        assert_eq!(column["answer"], view["answer"], "{side}: {shown}");
        assert_eq!(column["steps"], steps_run.to_string(), "{side}: {shown}");
        assert_eq!(column["root_steps"], "2", "{side}: {shown}");
        assert_eq!(column["input_tokens"], input.to_string(), "{side}: {shown}");
        assert_eq!(
            column["output_tokens"],
            output.to_string(),
            "{side}: {shown}"
        );
    }
    assert_eq!(shown["parent"]["calls_sent"], "1", "{shown}");
    assert_eq!(shown["fork"]["calls_sent"], "0", "{shown}");
    assert_eq!(shown["fork"]["calls_replayed"], "1", "{shown}");
    assert!(
        fork_view["answer"]
            .as_str()
            .is_some_and(|a| a.ends_with(FORK_GUIDANCE)),
        "the fork's model saw the guidance typed in the page: {fork_view}"
    );
    let refused = seen["refused"].as_str().unwrap_or_default();
    assert!(
        refused.contains("has no loop `run/worker:nobody:1`")
            && refused.contains("`run` (steps 1 to 2)"),
        "the refusal shown is the server's: {refused}\n{report}"
    );
    drop(server);
    drop(model);
}

/// Who the dashboard says asked, for a control sent from its page.
const DASHBOARD_PERSON: &str = "a person on the dashboard";

/// The message `tests/browser/hands.mjs` sends, with markup no page may
/// make an element of.
const HANDS_MESSAGE: &str =
    r#"Only the error log matters. <img src=x onerror="window.__leaseholdHostile=true">"#;

/// The run's logged events, as `GET /runs/{id}/events?live=false` sends
/// them.
async fn logged_events(http: &reqwest::Client, base: &str, run_id: &str) -> Vec<serde_json::Value> {
    http.get(format!("{base}/runs/{run_id}/events?live=false"))
        .send()
        .await
        .expect("GET the run's events")
        .text()
        .await
        .expect("the events' text")
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<serde_json::Value>(data.trim()).ok())
        .filter(|event| event.get("seq").is_some())
        .collect()
}

/// The seq of the first event of `events` that `found` picks.
fn seq_of(events: &[serde_json::Value], found: impl Fn(&serde_json::Value) -> bool) -> Option<u64> {
    events
        .iter()
        .find(|e| found(e))
        .and_then(|e| e["seq"].as_u64())
}

#[test]
fn a_person_handles_a_running_run_from_its_page_in_a_real_browser() {
    use support::hanging_tool::Hanging;

    let (playwright, chromium) = peers();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    // The demo's model; a tool server that never answers a call.
    let hanging = runtime.block_on(Hanging::start());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let token = format!("hands-{}-{nanos}", std::process::id());
    let (server, port) = serve_with(&hanging.data, hanging.dir.path(), |command| {
        command
            .arg("--allow-flow-tools")
            .env("LEASEHOLD_API_TOKEN", &token)
            .env("LEASEHOLD_MODEL_BASE_URL", &hanging.model)
            .env("LEASEHOLD_MODEL_NAME", "leasehold-demo");
    });
    let base = format!("http://127.0.0.1:{port}");
    let http = support::authorized(&token);
    let flow: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&hanging.flow).expect("the hanging flow"))
            .expect("JSON");

    // A tool call of the run hangs under its lease.
    let (run_id, call_path, lease) = runtime.block_on(async {
        let run_id = support::post_run(&http, &base, &flow).await;
        let (path, lease) = support::until("a tool call's start", BROWSER, || async {
            logged_events(&http, &base, &run_id)
                .await
                .iter()
                .find(|e| e["kind"] == "tool_call_started" && e["attempt"] == 1)
                .and_then(|e| Some((e["path"].as_str()?.to_owned(), e["lease_id"].as_u64()?)))
        })
        .await;
        (run_id, path, lease)
    });

    let mut browser = Command::new("node");
    browser
        .arg(repo_root().join("tests/browser/hands.mjs"))
        .arg(port.to_string())
        .arg(&token)
        .arg(&run_id)
        .arg(&call_path)
        .arg(lease.to_string())
        .arg(HANDS_MESSAGE)
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
        stdout.contains("hands test passed"),
        "the browser script exited 0 without passing\n{report}"
    );
    println!("{stdout}");
    let seen: serde_json::Value = stdout
        .lines()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("the script printed no result\n{report}"));
    let fork = seen["fork"]
        .as_str()
        .unwrap_or_else(|| panic!("no fork id\n{report}"))
        .to_owned();

    // What the page's controls did is what the run's log and trace hold:
    // each a person's act, in the order it was clicked.
    let (events, trace, view, fork_view) = runtime.block_on(async {
        (
            logged_events(&http, &base, &run_id).await,
            support::get_json(&http, &format!("{base}/runs/{run_id}/trace")).await,
            support::get_run(&http, &base, &run_id).await,
            support::get_run(&http, &base, &fork).await,
        )
    });
    let persons = |e: &serde_json::Value, verdict: &str| {
        e["kind"] == "verdict"
            && e["lease_id"] == lease
            && e["decided_by"] == "person"
            && e["verdict"] == verdict
    };
    let renewed: Vec<_> = events.iter().filter(|e| persons(e, "RENEW")).collect();
    assert_eq!(
        renewed.len(),
        1,
        "one extension applied, the one asked while paused refused: {renewed:?}\n{report}"
    );
    assert_eq!(
        renewed[0]["reason"],
        format!("extended by 30s by {DASHBOARD_PERSON}"),
        "{report}"
    );
    let extended = seq_of(&events, |e| persons(e, "RENEW"));
    let enqueued = seq_of(&events, |e| {
        e["kind"] == "message_received"
            && e["text"] == HANDS_MESSAGE
            && e["policy"] == "enqueue"
            && e["by"] == DASHBOARD_PERSON
    });
    assert!(
        !events
            .iter()
            .any(|e| e["kind"] == "message_received" && e["policy"] == "reject"),
        "the message refused while the run was busy was not taken\n{report}"
    );
    let paused = seq_of(&events, |e| {
        e["kind"] == "paused"
            && e["by"] == DASHBOARD_PERSON
            && e["reason"] == "a look at the index first"
    });
    let resumed = seq_of(&events, |e| {
        e["kind"] == "resumed" && e["guidance"] == "The index is fine: go on."
    });
    let stopped = seq_of(&events, |e| {
        persons(e, "INTERVENE")
            && e["reason"] == format!("stopped by {DASHBOARD_PERSON}: still hung")
    });
    let again = seq_of(&events, |e| {
        e["kind"] == "tool_call_started"
            && e["path"] == call_path.as_str()
            && e["attempt"] == 2
            && e["lease_id"] == seen["next_lease"]
    });
    let order = [extended, enqueued, paused, resumed, stopped, again];
    assert!(
        order.iter().all(Option::is_some) && order.is_sorted(),
        "extended, enqueued, paused, resumed, stopped, made again: {order:?}\n{events:#?}\n{report}"
    );
    // Left to finish, the call was not stopped by the pause.
    assert!(
        !events.iter().any(|e| e["kind"] == "tool_call_finished"
            && e["path"] == call_path.as_str()
            && e["attempt"] == 1
            && e["seq"].as_u64() < stopped),
        "the pause let the call in flight finish\n{report}"
    );
    let by_person: Vec<&str> = trace["entries"]
        .as_array()
        .expect("the trace's entries")
        .iter()
        .filter(|e| e["kind"] == "verdict" && e["decided_by"] == "person")
        .filter_map(|e| e["verdict"].as_str())
        .collect();
    assert_eq!(by_person, ["RENEW", "INTERVENE"], "{trace}");

    // The rollback: the run cancelled into the fork the page linked to.
    assert_eq!(view["status"], "cancelled", "{view}");
    assert!(
        view["reason"].as_str().is_some_and(|r| r.contains(&format!(
            "rolled back by {DASHBOARD_PERSON} into run {fork}"
        ))),
        "{view}"
    );
    assert_eq!(fork_view["fork"]["parent"], run_id.as_str(), "{fork_view}");
    assert_eq!(
        fork_view["fork"]["guidance"], "Start over with the new index.",
        "{fork_view}"
    );
    let refusals = &seen["refusals"];
    assert!(
        refusals["reject"]
            .as_str()
            .is_some_and(|r| r.contains("is busy (running)")),
        "{refusals}"
    );
    assert!(
        refusals["extend"]
            .as_str()
            .is_some_and(|r| r.contains("its clocks are stopped")),
        "{refusals}"
    );

    runtime.block_on(async {
        let cancelled = http
            .post(format!("{base}/runs/{fork}/cancel"))
            .json(&serde_json::json!({}))
            .send()
            .await
            .expect("POST cancel");
        assert!(cancelled.status().is_success(), "{}", cancelled.status());
    });
    drop(server);
    runtime.block_on(hanging.stack.shutdown());
}

/// A browser script the test drives step by step: it prints `@STEP` when
/// it has done a step, and reads a line on its standard input when it must
/// wait for the test. Killed (by its own process id) when dropped.
struct Driven {
    script: Killed,
    lines: mpsc::Receiver<String>,
    stdout: Vec<String>,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
    deadline: Instant,
}

impl Driven {
    /// Starts `command`, which must end within `limit`.
    fn start(mut command: Command, limit: Duration) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the browser script starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let (sent, lines) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sent.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stderr, &mut bytes);
            bytes
        });
        Self {
            script: Killed { child, stdin },
            lines,
            stdout: Vec::new(),
            stderr: Some(stderr),
            deadline: Instant::now() + limit,
        }
    }

    /// Waits until the script says it has done `step`.
    fn until(&mut self, step: &str) {
        let said = format!("@{step}");
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let done = line.trim() == said;
                    self.stdout.push(line);
                    if done {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.fail(&format!("the browser script did not say {said} in time"))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.fail(&format!("the browser script ended before saying {said}"))
                }
            }
        }
    }

    /// Sends the script the line `line`.
    fn tell(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.script.stdin.as_mut().expect("the script's input");
        if let Err(error) = writeln!(stdin, "{line}").and_then(|()| stdin.flush()) {
            self.fail(&format!(
                "the browser script could not be told {line:?}: {error}"
            ));
        }
    }

    /// Waits for the script to end, and checks it passed: the line
    /// `passed`, after one JSON line of what it saw, which is returned.
    fn passed(mut self, passed: &str) -> serde_json::Value {
        let status = wait_for(
            &mut self.script.child,
            self.deadline.saturating_duration_since(Instant::now()),
        );
        self.stdout.extend(self.lines.try_iter());
        if !status.is_some_and(|s| s.success()) {
            self.fail(&format!("the browser script failed ({status:?})"));
        }
        if !self.stdout.iter().any(|line| line == passed) {
            self.fail("the browser script exited 0 without passing");
        }
        println!("{}", self.stdout.join("\n"));
        let seen = self
            .stdout
            .iter()
            .find_map(|line| serde_json::from_str(line).ok());
        seen.unwrap_or_else(|| self.fail("the browser script printed no result"))
    }

    /// Fails the test with `why` and what the script printed, once it is
    /// stopped.
    fn fail(&mut self, why: &str) -> ! {
        let _ = self.script.child.kill();
        let _ = self.script.child.wait();
        self.stdout.extend(self.lines.try_iter());
        let stderr = self
            .stderr
            .take()
            .and_then(|thread| thread.join().ok())
            .unwrap_or_default();
        panic!(
            "{why}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.stdout.join("\n"),
            String::from_utf8_lossy(&stderr)
        )
    }
}

/// The endpoints `GET /endpoints` lists.
async fn endpoints(http: &reqwest::Client, base: &str) -> Vec<serde_json::Value> {
    let listed = support::get_json(http, &format!("{base}/endpoints")).await;
    listed["endpoints"]
        .as_array()
        .unwrap_or_else(|| panic!("a list of endpoints: {listed}"))
        .clone()
}

#[test]
fn a_person_marks_the_model_endpoint_down_and_up_from_the_list_in_a_real_browser() {
    let (playwright, chromium) = peers();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    // The demo's model: it answers a flow it does not know in one step.
    let stack = runtime
        .block_on(leasehold_cli::demo::DemoStack::start())
        .expect("the demo's servers");
    let data = tempfile::tempdir().expect("a temporary data directory");
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let token = format!("endpoints-{}-{nanos}", std::process::id());
    let (server, port) = serve_with(&data.path().join("store"), data.path(), |command| {
        command
            .env("LEASEHOLD_API_TOKEN", &token)
            .env("LEASEHOLD_MODEL_BASE_URL", stack.model_base_url())
            .env("LEASEHOLD_MODEL_NAME", "leasehold-demo");
    });
    let base = format!("http://127.0.0.1:{port}");
    let http = support::authorized(&token);

    // The executor's model, listed up before any run called it.
    let listed = runtime.block_on(endpoints(&http, &base));
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["up"], true, "{listed:?}");
    let endpoint = listed[0]["endpoint"]
        .as_str()
        .expect("the endpoint's name")
        .to_owned();
    assert!(
        endpoint.contains("leasehold-demo") && endpoint.contains(&stack.model_base_url()),
        "{endpoint}"
    );

    let mut browser = Command::new("node");
    browser
        .arg(repo_root().join("tests/browser/endpoints.mjs"))
        .arg(port.to_string())
        .arg(&token)
        .arg(&endpoint)
        .env(PLAYWRIGHT_ENV, &playwright)
        .env(CHROMIUM_ENV, &chromium)
        .current_dir(repo_root());
    let mut script = Driven::start(browser, BROWSER);

    // Marked down on the page: down, by the person, on the server.
    script.until("marked-down");
    let down = runtime.block_on(endpoints(&http, &base));
    assert_eq!(down.len(), 1, "{down:?}");
    assert_eq!(down[0]["endpoint"], endpoint.as_str(), "{down:?}");
    assert_eq!(down[0]["up"], false, "{down:?}");
    assert_eq!(
        down[0]["down_by"],
        serde_json::json!({"by": "person", "name": DASHBOARD_PERSON}),
        "{down:?}"
    );

    // A run started now waits on the endpoint, its call not made.
    let flow = serde_json::json!({
        "name": "sky",
        "task": "What colour is the sky? Answer in one word.",
        "max_steps": 2,
    });
    let (run_id, paused) = runtime.block_on(async {
        let run_id = support::post_run(&http, &base, &flow).await;
        let paused = support::view_until(&http, &base, &run_id, BROWSER, "paused", |view| {
            view["status"] == "waiting_human"
        })
        .await;
        (run_id, paused)
    });
    assert_eq!(paused["pause"]["subject"], "endpoint", "{paused}");
    assert!(
        paused["pause"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&format!("{DASHBOARD_PERSON} marked {endpoint} down"))),
        "{paused}"
    );
    let waiting = runtime.block_on(endpoints(&http, &base));
    assert_eq!(
        waiting[0]["runs_waiting"],
        serde_json::json!([run_id]),
        "{waiting:?}"
    );
    script.tell(&run_id);

    // Marked up on the page: the run resumes by itself and completes.
    script.until("marked-up");
    let completed = runtime.block_on(support::view_until(
        &http,
        &base,
        &run_id,
        BROWSER,
        "completed",
        |view| view["status"] == "completed",
    ));
    assert!(
        completed["answer"].as_str().is_some_and(|a| !a.is_empty()),
        "{completed}"
    );
    let (up, events) = runtime.block_on(async {
        (
            endpoints(&http, &base).await,
            logged_events(&http, &base, &run_id).await,
        )
    });
    assert_eq!(up[0]["up"], true, "{up:?}");
    assert!(up[0].get("down_by").is_none(), "{up:?}");
    let answered_again = format!("{endpoint} answered again");
    let paused_at = seq_of(&events, |e| {
        e["kind"] == "paused" && e["subject"] == "endpoint"
    });
    let resumed_at = seq_of(&events, |e| {
        e["kind"] == "resumed" && e["by"] == answered_again.as_str()
    });
    let called_at = seq_of(&events, |e| e["kind"] == "model_call_started");
    assert!(
        paused_at.is_some() && paused_at < resumed_at && resumed_at < called_at,
        "paused on the endpoint, resumed by it, then its call made: {events:#?}"
    );

    // What the page said is what the server did.
    let seen = script.passed("endpoints test passed");
    assert_eq!(seen["down_by"], DASHBOARD_PERSON, "{seen}");
    assert_eq!(seen["waiting"], "1 run", "{seen}");
    assert_eq!(
        seen["pause_title"],
        format!("Waiting for {endpoint} to answer again \u{2014} it resumes by itself"),
        "{seen}"
    );
    assert_eq!(seen["pause_subject"], "endpoint", "{seen}");
    assert!(
        seen["up_answer"]
            .as_str()
            .is_some_and(|a| a.ends_with(". The run waiting on it resumes.")),
        "{seen}"
    );
    assert_eq!(
        seen["resumed_row"],
        format!("resumed: {answered_again}"),
        "{seen}"
    );
    drop(server);
    runtime.block_on(stack.shutdown());
}

/// The dashboard's texts, as its own modules word them, run by Node: a
/// count of one reads in the singular, any other in the plural, as the
/// runtime's `counted` words them.
#[test]
fn the_dashboards_counts_agree_with_their_nouns() {
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "node is not installed or does not run ({node:?}): this test runs the dashboard's \
         modules with Node"
    );
    let folder = repo_root().join("server/src/server/dashboard");
    let script = r#"
        const dir = process.argv[1];
        const text = await import(`${dir}/text.js`);
        const usage = await import(`${dir}/usage.js`);
        const e = (kind, fields) => text.describe({ kind, ...fields });
        const finished = (tool_calls, input_tokens) =>
            e('model_call_finished', { outcome: 'ok', tool_calls, usage: { input_tokens, output_tokens: 0 } });
        console.log(JSON.stringify([
            e('wait', { subject: 'search', renewals: 1 }),
            e('wait', { subject: 'search', renewals: 2 }),
            e('renewal_cap_reached', { max_renewals: 1 }),
            e('progress', { note: 'shard', count: 1, reports: 1 }),
            e('run_started', { flow: 'triage', max_steps: 1, task: 'sort' }),
            e('run_forked', { parent: 'p', loop_path: 'run', step: 2, person_answers: ['yes'] }),
            e('step_started', { step: 1, limit: 0, nudges: 1 }),
            finished(1, 1),
            finished(0, 2),
            e('gave_up', { attempts: 1, handed_to: 'person', reason: 'gone' }),
            e('run_completed', { steps: 1, answer: '42' }),
            e('budget_extended', { steps_used: 1, limit: 1, new_limit: 2, reason: 'r', decided_by: 'evaluator' }),
            text.overflowText({ action: 'shortened', shortened: 1, chars_cut: 1 }),
            usage.spentText({ calls: 1, input_tokens: 1, output_tokens: 0, unpriced_calls: 0, spent: 0.5 }),
            usage.spentText({ calls: 1200, input_tokens: 1500, output_tokens: 10, unpriced_calls: 1, spent: 0.5 }),
        ]));
    "#;
    let output = Command::new("node")
        .args(["--input-type=module", "-e", script])
        .arg(format!("file://{}", folder.display()))
        .output()
        .expect("node runs");
    assert!(
        output.status.success(),
        "node failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let texts: Vec<String> = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    assert_eq!(
        texts,
        [
            "search: lease expired after 1 renewal",
            "search: lease expired after 2 renewals",
            "stopped after 1 renewal",
            "shard (1 item)",
            "flow triage (1 step): sort",
            "forked from p at run step 2, inheriting 1 answer a person gave the parent",
            "step 1 unlimited, 1 nudge",
            "ok, 1 tool call, 1 token",
            "ok, 0 tool calls, 2 tokens",
            "given up after 1 attempt, handed to person: gone",
            "after 1 step: 42",
            "1 step used of 1: extended to 2 (r, by evaluator)",
            "the request does not fit the model's context window: 1 tool result shortened by \
             1 character, calling again",
            "1 token (1 in, 0 out) over 1 call; cost 0.500000",
            "1,510 tokens (1,500 in, 10 out) over 1,200 calls; cost 0.500000 (1 call without a \
             price)",
        ]
    );
}
