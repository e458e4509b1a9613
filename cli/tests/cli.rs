//! The `leasehold` command, run as a real process against the embedded
//! demo's real servers (a scripted OpenAI-compatible model server and an MCP
//! tool server on loopback): `config`, `run` with its exit codes, `runs …`
//! on the data directory and on a server, and `serve`.

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use leasehold::Event;
use leasehold_cli::demo::DemoStack;
use tokio::io::{AsyncBufReadExt, BufReader};

const GUIDANCE: &str = "Do not roll back: v413 is deploying.";

fn events_of(stdout: &str) -> Vec<Event> {
    stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not an event ({e}): {line}"))
        })
        .collect()
}

fn write_flow(dir: &Path, stack: &DemoStack) -> std::path::PathBuf {
    let path = dir.join("incident.json");
    let flow = serde_json::to_string_pretty(&stack.flow()).expect("flow");
    std::fs::write(&path, flow).expect("write the flow");
    path
}

/// `leasehold run FLOW --json` of the demo's flow (written into `dir`) on
/// the data directory `data`: it pauses for a person, exit 3.
async fn a_paused_run(dir: &Path, data: &Path, stack: &DemoStack) -> support::Output {
    let flow = write_flow(dir, stack);
    let out = support::output(
        support::leasehold(data)
            .demo_model(stack)
            .arg("run")
            .arg(&flow)
            .arg("--json"),
    )
    .await;
    assert_eq!(out.code, Some(3), "paused: {}", out.stderr);
    out
}

#[tokio::test]
async fn config_prints_each_value_with_its_source_the_timing_lines_and_the_warnings() {
    let dir = tempfile::tempdir().expect("dir");
    let out = support::output(
        support::leasehold(dir.path())
            .env("LEASEHOLD_LEASE_TOOL_CALL", "90s")
            .env("LEASEHOLD_MODEL_API_KEY", "sk-never-printed")
            .env("LEASEHOLD_MODEL_IDLE_TIMEOUT", "2h")
            .args(["--set", "lease.max_renewals=5", "config"]),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("env LEASEHOLD_LEASE_TOOL_CALL"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("flag --set lease.max_renewals"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "tool_call: lease 1m30s · free renewals until 4m30s · first evaluation at 4m30s · \
             renewal cap at 9m45s (6 leases + 3 evaluations of at most 15s) · 4 attempts · \
             backoffs at most 7s700ms · worst case 39m7s700ms · ceiling 4h"
        ),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.stdout
            .matches(leasehold::config::WORST_CASE_FORMULA)
            .count(),
        1,
        "{}",
        out.stdout
    );
    // Each key by its file name beside its variable.
    assert!(
        out.stdout.lines().any(|line| {
            line.starts_with("lease.tool_call ")
                && line.contains(" LEASEHOLD_LEASE_TOOL_CALL ")
                && line.contains(" 1m 30s ")
        }),
        "{}",
        out.stdout
    );
    // Warnings name each key with where its value came from: the
    // environment, or --set.
    assert!(
        out.stdout.contains(
            "warning: `model.idle_timeout` (LEASEHOLD_MODEL_IDLE_TIMEOUT, from the environment) \
             is 2h"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(
            "`lease.max_renewals` (LEASEHOLD_LEASE_MAX_RENEWALS, flag --set lease.max_renewals)"
        ),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("sk-never-printed"), "{}", out.stdout);

    // Every renewal free: no evaluation happens, so none is counted.
    let out = support::output(support::leasehold(dir.path()).args([
        "--set",
        "lease.max_renewals=5",
        "--set",
        "watchdog.free_renewals=5",
        "config",
    ]))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let idle = out
        .stdout
        .lines()
        .find(|line| line.starts_with("model.idle_timeout "))
        .unwrap_or_default();
    assert!(idle.contains(" 30m "), "6 blocking leases of 5m: {idle}");
    assert!(
        out.stdout.contains(
            "tool_call: lease 5m · policy leasehold, every renewal free, never evaluated · cut at \
             30m (6 leases)"
        ),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains("`evaluator_timeout`"),
        "{}",
        out.stdout
    );

    let out = support::output(
        support::leasehold(dir.path())
            .env("LEASEHOLD_LEASE_TOOL_CALL", "ninety seconds")
            .arg("config"),
    )
    .await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("LEASEHOLD_LEASE_TOOL_CALL"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("ninety seconds"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_pauses_with_exit_3_and_runs_resume_completes_it_with_exit_0() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let out = a_paused_run(dir.path(), &data, &stack).await;
    let events = events_of(&out.stdout);
    assert_eq!(events.first().map(|e| e.kind.name()), Some("run_started"));
    assert!(
        events.iter().any(|e| e.kind.name() == "paused"),
        "{}",
        out.stdout
    );
    assert!(!events.iter().any(|e| e.kind.name() == "run_completed"));
    let run_id = events[0].run_id.clone();
    assert!(
        out.stderr
            .contains(&format!("leasehold runs resume {run_id} --guidance")),
        "says how to resume: {}",
        out.stderr
    );

    let out = support::output(support::leasehold(&data).args(["runs", "list"])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains(&*run_id) && out.stdout.contains("waiting_human"),
        "{}",
        out.stdout
    );
    // The run id whole in its column, the status below its heading.
    let header = out.stdout.lines().next().expect("a heading");
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with(&*run_id))
        .expect("the run's row");
    assert!(row[run_id.len()..].starts_with("  "), "{}", out.stdout);
    assert_eq!(
        row.matches("has been silent").count(),
        1,
        "the note once, last: {}",
        out.stdout
    );
    assert_eq!(
        header.find("status"),
        row.find("waiting_human"),
        "{}",
        out.stdout
    );
    let out =
        support::output(support::leasehold(&data).args(["runs", "list", "--status", "completed"]))
            .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stdout.contains(&*run_id), "{}", out.stdout);
    let out =
        support::output(support::leasehold(&data).args(["runs", "list", "--status", "asleep"]))
            .await;
    assert_eq!(out.code, Some(2), "a usage error");
    assert!(out.stderr.contains("not a run status"), "{}", out.stderr);

    let out = support::output(support::leasehold(&data).demo_model(&stack).args([
        "runs",
        "resume",
        &run_id,
        "--json",
        "--guidance",
        GUIDANCE,
    ]))
    .await;
    assert_eq!(out.code, Some(0), "completed: {}", out.stderr);
    let resumed = events_of(&out.stdout);
    let kinds: Vec<&str> = resumed.iter().map(|e| e.kind.name()).collect();
    assert!(kinds.contains(&"run_resumed"), "{kinds:?}");
    assert!(kinds.contains(&"resumed"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_completed"), "{kinds:?}");
    assert!(
        resumed
            .iter()
            .all(|e| e.seq > events.last().map_or(0, |l| l.seq)),
        "the resumed run numbers its events after the first executor's"
    );

    let out = support::output(support::leasehold(&data).args(["runs", "trace", &run_id])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("ESCALATE by evaluator"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("INTERVENE by evaluator"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("\"pauses\": 1"), "{}", out.stdout);

    let out =
        support::output(support::leasehold(&data).args(["runs", "events", &run_id, "--json"]))
            .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let logged = events_of(&out.stdout);
    assert_eq!(
        logged.len(),
        events.len() + resumed.len(),
        "every event of both executors is in the log"
    );

    let out = support::output(support::leasehold(&data).args(["runs", "show", &run_id])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let view: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(view["status"], "completed");
    assert!(
        view["answer"].as_str().unwrap_or_default().contains("v413"),
        "{view}"
    );
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_1_when_the_run_fails_and_refuses_to_start_without_a_model() {
    let dir = tempfile::tempdir().expect("dir");
    let flow = dir.path().join("hello.toml");
    std::fs::write(
        &flow,
        "name = \"hello\"\ntask = \"say hello\"\nmax_steps = 2\n",
    )
    .expect("flow");

    let out = support::output(support::leasehold(dir.path()).arg("run").arg(&flow)).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("LEASEHOLD_MODEL_BASE_URL"),
        "{}",
        out.stderr
    );

    // Nothing listens there: every attempt is refused and the restarts run
    // out. By default the run pauses for a person (exit 3), naming the
    // endpoint; with `restart.on_exhausted = fail` it fails (exit 1).
    let url = format!("http://127.0.0.1:{}/v1", support::free_port());
    let run_against_nothing = |then: &str| {
        let mut command = support::leasehold(dir.path());
        command
            .env("LEASEHOLD_MODEL_BASE_URL", &url)
            .env("LEASEHOLD_MODEL_NAME", "m")
            .args([
                "--set",
                "restart.backoff_initial=10ms",
                "--set",
                "restart.backoff_max=20ms",
                "--set",
                &format!("restart.on_exhausted={then}"),
            ])
            .arg("run")
            .arg(&flow);
        command
    };
    let out = support::output(&mut run_against_nothing("pause")).await;
    assert_eq!(out.code, Some(3), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("gave_up") && out.stdout.contains(&format!("{url}/chat/completions")),
        "{}",
        out.stdout
    );
    let out = support::output(&mut run_against_nothing("fail")).await;
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("run_failed"), "{}", out.stdout);

    let out = support::output(
        support::leasehold(dir.path())
            .arg("run")
            .arg(dir.path().join("missing.toml")),
    )
    .await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("missing.toml"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_executes_posted_flows_and_runs_commands_reach_it_with_server() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let dir = tempfile::tempdir().expect("dir");

    let refused = support::output(support::leasehold(dir.path()).demo_model(&stack).args([
        "serve",
        "--addr",
        "0.0.0.0:0",
    ]))
    .await;
    assert_eq!(refused.code, Some(1));
    assert!(
        refused.stderr.contains("LEASEHOLD_API_TOKEN"),
        "{}",
        refused.stderr
    );

    // The demo's tool server is declared in the server's configuration;
    // posted flows name it and nothing more.
    let config = dir.path().join("leasehold.toml");
    let declared = toml::to_string(&serde_json::json!({ "tools": stack.flow().tools }))
        .expect("the tool servers as TOML");
    std::fs::write(&config, declared).expect("config written");
    let mut named = stack.flow();
    for server in &mut named.tools {
        server.command = None;
        server.url = None;
        server.env.clear();
    }
    let command = support::leasehold(dir.path())
        .demo_model(&stack)
        .config(&config);
    let (mut server, base) = support::serve(command, &[], support::PATIENCE).await;

    let http = reqwest::Client::new();
    // A flow that names the address itself is refused, naming why.
    let refused = http
        .post(format!("{base}/runs"))
        .json(&stack.flow())
        .send()
        .await
        .expect("POST /runs");
    assert_eq!(refused.status().as_u16(), 403);
    let body: serde_json::Value = refused.json().await.expect("a JSON error");
    assert_eq!(body["error"]["code"], "flow_tools_forbidden", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("[[tools]]")),
        "{body}"
    );
    let run_id = support::post_run(&http, &base, &named).await;
    for _ in 0..600 {
        let view: serde_json::Value = http
            .get(format!("{base}/runs/{run_id}"))
            .send()
            .await
            .expect("GET")
            .json()
            .await
            .expect("JSON");
        if view["status"] == "waiting_human" {
            break;
        }
        assert_eq!(view["status"], "running", "{view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let out = support::output(support::leasehold(dir.path()).args([
        "runs",
        "list",
        "--server",
        &base,
        "--status",
        "waiting_human",
        "--limit",
        "1",
    ]))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains(&run_id) && out.stdout.contains("waiting_human"),
        "{}",
        out.stdout
    );

    let out = support::output(support::leasehold(dir.path()).args([
        "runs",
        "resume",
        &run_id,
        "--server",
        &base,
        "--guidance",
        GUIDANCE,
    ]))
    .await;
    // Followed over the server as it is locally: until the run ends.
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("resume applied") && out.stderr.contains("ended: completed"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.contains("completed"), "{}", out.stdout);

    let out = support::output(
        support::leasehold(dir.path())
            .args(["runs", "events", &run_id, "--server", &base, "--json"]),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let events = events_of(&out.stdout);
    assert_eq!(
        events.last().map(|e| e.kind.name()),
        Some("run_completed"),
        "{}",
        out.stdout
    );
    assert!(events.iter().any(|e| e.kind.name() == "resumed"));

    let out = support::output(
        support::leasehold(dir.path()).args(["runs", "show", "nope", "--server", &base]),
    )
    .await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("no run nope"), "{}", out.stderr);

    // Ctrl-C stops the server cleanly, with the code of SIGINT.
    support::signal(&server, "-INT");
    let exit = tokio::time::timeout(Duration::from_secs(30), server.wait())
        .await
        .expect("serve stops on SIGINT")
        .expect("wait");
    assert_eq!(exit.code(), Some(130));
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readable_log_of_run_shows_a_tools_progress_first_then_at_most_one_a_period() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let dir = tempfile::tempdir().expect("dir");
    let flow = write_flow(dir.path(), &stack);
    // The demo's searches report MCP progress as they go.
    let out = support::output(
        support::leasehold(&dir.path().join("data"))
            .demo_model(&stack)
            .arg("run")
            .arg(&flow),
    )
    .await;
    assert_eq!(out.code, Some(3), "paused: {}", out.stderr);
    let mut shown: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for line in out.stdout.lines() {
        let mut words = line.split_whitespace();
        let (Some(at), Some(path), Some(kind)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        if kind == "progress" && path.contains("tool_call") {
            let at: f64 = at.trim_end_matches('s').parse().expect("a time");
            shown.entry(path.to_owned()).or_default().push(at);
        }
    }
    assert!(
        !shown.is_empty(),
        "a search's progress is shown: {}",
        out.stdout
    );
    for (path, times) in &shown {
        for pair in times.windows(2) {
            assert!(
                pair[1] - pair[0] >= 4.99,
                "{path}: progress shown at {times:?}, more than one a period"
            );
        }
    }
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_a_model_browses_stored_runs_and_refuses_to_run_one_naming_the_endpoint() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    // A run kept in the data directory, paused for a person.
    let out = a_paused_run(dir.path(), &data, &stack).await;
    let run_id = events_of(&out.stdout)[0].run_id.clone();

    // No model configured at all: the server starts and says what it will
    // not do, and why.
    let mut server = support::leasehold(&data)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let mut lines = BufReader::new(server.stdout.take().expect("stdout")).lines();
    let mut said = Vec::new();
    for _ in 0..2 {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("serve speaks")
            .expect("read")
            .expect("a line");
        said.push(line);
    }
    let base = said[0]
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("where it serves")
        .trim_end_matches('/')
        .to_owned();
    assert!(
        said[1].contains("starts no runs") && said[1].contains("model.base_url"),
        "{said:?}"
    );

    // Stored runs are listed, shown, followed, and the dashboard serves.
    let http = reqwest::Client::new();
    let out =
        support::output(support::leasehold(&data).args(["runs", "list", "--server", &base])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains(&*run_id), "{}", out.stdout);
    let view = support::get_run(&http, &base, &run_id).await;
    assert_eq!(view["status"], "waiting_human", "{view}");
    let out = support::output(
        support::leasehold(&data).args(["runs", "events", &run_id, "--server", &base, "--json"]),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        events_of(&out.stdout)
            .iter()
            .any(|e| e.kind.name() == "paused"),
        "{}",
        out.stdout
    );
    let page = http.get(format!("{base}/")).send().await.expect("GET /");
    assert_eq!(page.status().as_u16(), 200);

    // Whatever needs a model is refused, naming the keys to set; nothing
    // is stored.
    let refusals = [
        http.post(format!("{base}/runs")).json(&stack.flow()),
        http.post(format!("{base}/runs/{run_id}/resume"))
            .json(&serde_json::json!({"guidance": GUIDANCE})),
        http.post(format!("{base}/runs/{run_id}/fork"))
            .json(&serde_json::json!({"at": "1"})),
    ];
    for request in refusals {
        let refused = request.send().await.expect("a request");
        assert_eq!(refused.status().as_u16(), 503);
        let body: serde_json::Value = refused.json().await.expect("a JSON error");
        assert_eq!(body["error"]["code"], "no_model", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("model.base_url")),
            "{body}"
        );
    }
    let out = support::output(support::leasehold(&data).args([
        "runs",
        "resume",
        &run_id,
        "--server",
        &base,
        "--guidance",
        GUIDANCE,
    ]))
    .await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("model.base_url"), "{}", out.stderr);
    let listed = support::get_json(&http, &format!("{base}/runs")).await;
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(
        support::get_run(&http, &base, &run_id).await["status"],
        "waiting_human"
    );

    // A stored run is still controlled: cancelling needs no model.
    let out = support::output(
        support::leasehold(&data).args(["runs", "cancel", &run_id, "--server", &base]),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        support::get_run(&http, &base, &run_id).await["status"],
        "cancelled"
    );
    let _ = server.kill().await;
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_leaves_the_run_in_the_store_and_runs_resume_picks_it_up() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let flow = write_flow(dir.path(), &stack);

    let mut run = support::leasehold(&data)
        .demo_model(&stack)
        .arg("run")
        .arg(&flow)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    let mut lines = BufReader::new(run.stdout.take().expect("stdout")).lines();
    let mut run_id = None;
    // Interrupt it mid-run: once a worker's tool call has started.
    while let Some(line) = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("events keep coming")
        .expect("read")
    {
        let event: Event = serde_json::from_str(&line).expect("an event");
        run_id.get_or_insert(event.run_id.clone());
        if event.kind.name() == "tool_call_started" {
            break;
        }
    }
    let run_id = run_id.expect("the run started");
    support::signal(&run, "-INT");
    let exit = tokio::time::timeout(Duration::from_secs(30), run.wait())
        .await
        .expect("run stops on Ctrl-C")
        .expect("wait");
    assert_eq!(exit.code(), Some(130));
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut run.stderr.take().expect("stderr"), &mut stderr)
        .await
        .expect("stderr");
    assert!(
        stderr.contains(&format!("leasehold runs resume {run_id}")),
        "{stderr}"
    );

    // Picked up from its snapshots, it goes on to the escalation…
    let out = support::output(
        support::leasehold(&data)
            .demo_model(&stack)
            .args(["runs", "resume", &run_id]),
    )
    .await;
    assert_eq!(out.code, Some(3), "paused: {}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("run_resumed"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("waiting for a person about `rollback_deploy`"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    // …and the person's answer completes it.
    let out = support::output(support::leasehold(&data).demo_model(&stack).args([
        "runs",
        "resume",
        &run_id,
        "--guidance",
        GUIDANCE,
    ]))
    .await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("answer: "), "{}", out.stdout);
    stack.shutdown().await;
}

/// `run --json` then `runs resume --json` on `data`; the seqs they printed
/// and the seqs of the run's log, in order.
async fn printed_and_logged(stack: &DemoStack, dir: &Path) -> (Vec<u64>, Vec<u64>) {
    let data = dir.join("data");
    let flow = write_flow(dir, stack);
    let first = support::output(
        support::leasehold(&data)
            .demo_model(stack)
            .arg("run")
            .arg(&flow)
            .arg("--json"),
    )
    .await;
    assert_eq!(first.code, Some(3), "paused: {}", first.stderr);
    let first = events_of(&first.stdout);
    let run_id = first[0].run_id.clone();
    let second = support::output(support::leasehold(&data).demo_model(stack).args([
        "runs",
        "resume",
        &run_id,
        "--json",
        "--guidance",
        GUIDANCE,
    ]))
    .await;
    assert_eq!(second.code, Some(0), "completed: {}", second.stderr);
    let logged =
        support::output(support::leasehold(&data).args(["runs", "events", &run_id, "--json"]))
            .await;
    assert_eq!(logged.code, Some(0), "{}", logged.stderr);
    let printed = first
        .iter()
        .chain(&events_of(&second.stdout))
        .map(|e| e.seq)
        .collect();
    let logged = events_of(&logged.stdout).iter().map(|e| e.seq).collect();
    (printed, logged)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_logged_event_reaches_run_json_however_loaded_the_machine() {
    let stack = DemoStack::start().await.expect("the demo servers");
    // Three pause-and-resume runs at once, each in its own data directory:
    // the machine is loaded, and the bus can be outrun; the printed events
    // must still be the log, in order, none twice.
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let runs = dirs
        .iter()
        .map(|dir| printed_and_logged(&stack, dir.path()));
    for (printed, logged) in futures_util::future::join_all(runs).await {
        assert!(!logged.is_empty());
        assert_eq!(
            printed, logged,
            "every logged event was printed, once, in order"
        );
    }
}

/// A run of the data directory left waiting for a decision on a call of
/// unknown outcome (its tool hangs, the watchdog intervenes), with the
/// call's key; the store is closed when this returns. With `stack`, the
/// call is the demo's `rollback_deploy` on its real MCP server, named by
/// URL in the flow, so that another process can take the run on; without,
/// an in-process tool.
async fn a_run_waiting_for_a_reconciliation(
    data: &Path,
    stack: Option<&DemoStack>,
) -> (String, String) {
    use std::sync::Arc;

    use leasehold::{
        Engine, EngineConfig, RunStatus, Store,
        store::{SledConfig, SledStore},
        testing::{ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct, Turn},
        tools::McpToolClient,
    };
    use serde_json::json;

    let store: Arc<dyn Store> = Arc::new(SledStore::open(SledConfig::new(data)).expect("store"));
    let (call, tools) = match stack {
        Some(stack) => (
            ("rollback_deploy", json!({"service": "checkout"})),
            json!([{"name": "deploys", "url": stack.tools_url()}]),
        ),
        None => (("charge", json!({"amount": 5})), json!([{"name": "local"}])),
    };
    let model = ScriptedModel::new().script("run", [Turn::tools([call]), Turn::answer("charged")]);
    let mut config = EngineConfig::default();
    config.supervision.lease.tool_call = Duration::from_millis(100);
    let builder = Engine::builder()
        .config(config)
        .model(Arc::new(model))
        .evaluator(Arc::new(ScriptedEvaluator::always("INTERVENE")))
        .store(Arc::clone(&store))
        // The command line's executor, as `leasehold run` would be.
        .owner_id(leasehold::OwnerId::of_process());
    let builder = match stack {
        Some(_) => builder.tool_factory(McpToolClient::factory(Duration::from_secs(30))),
        None => builder.tool_server(
            "local",
            Arc::new(ScriptedTools::new().tool("charge", Some(false), [ToolAct::Hang])),
        ),
    };
    let engine = builder.build().await.expect("engine");
    let flow = serde_json::from_value(json!({
        "name": "charging", "task": "charge once", "max_steps": 4, "tools": tools
    }))
    .expect("flow");
    let mut handle = engine.start(flow).await.expect("started");
    let state = handle.paused().await;
    assert_eq!(state.status, RunStatus::ReconciliationRequired);
    let run_id = handle.run_id().to_owned();
    let record = store.load_run(&run_id).await.expect("load").expect("run");
    let key = record
        .pause
        .and_then(|p| p.call)
        .map(|c| c.key)
        .expect("the call in question");
    engine.shutdown().await;
    store.flush().await.expect("flush");
    drop(handle);
    drop(engine);
    drop(store);
    // The engine's tasks let go of the store, and sled closes it, a moment
    // after the engine is dropped: the child process must find the
    // directory unlocked. Opened (and closed) here once it is.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match SledStore::open(SledConfig::new(data)) {
            Ok(store) => break drop(store),
            Err(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("the store stayed locked after the engine was dropped: {error}"),
        }
    }
    (run_id, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_reconcile_refuses_a_wrong_key_and_cancels_the_run_on_the_data_directory() {
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let (run_id, key) = a_run_waiting_for_a_reconciliation(&data, None).await;

    let out = support::output(support::leasehold(&data).args(["runs", "resume", &run_id])).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("leasehold runs reconcile"),
        "says what to do instead: {}",
        out.stderr
    );
    let out = support::output(support::leasehold(&data).args([
        "runs",
        "reconcile",
        &run_id,
        "--key",
        &key,
    ]))
    .await;
    assert_eq!(out.code, Some(2), "a decision is required: {}", out.stderr);
    let out = support::output(support::leasehold(&data).args([
        "runs",
        "reconcile",
        &run_id,
        "--key",
        "not-this-one",
        "--retry",
    ]))
    .await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains(&key) && out.stderr.contains("not-this-one"),
        "names both keys: {}",
        out.stderr
    );

    let out = support::output(support::leasehold(&data).args([
        "runs",
        "reconcile",
        &run_id,
        "--key",
        &key,
        "--cancel",
    ]))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = support::output(support::leasehold(&data).args(["runs", "show", &run_id])).await;
    let view: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(view["status"], "cancelled", "{view}");
    let out = support::output(support::leasehold(&data).args([
        "runs",
        "reconcile",
        &run_id,
        "--key",
        &key,
        "--cancel",
    ]))
    .await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("does not wait for a reconciliation: it is cancelled"),
        "{}",
        out.stderr
    );
}

/// The demo's tool server's record of `rollback_deploy` calls: their keys.
fn rollbacks(stack: &DemoStack) -> Vec<String> {
    stack
        .idempotency_keys_seen()
        .into_iter()
        .filter(|(tool, _)| tool == "rollback_deploy")
        .map(|(_, key)| key)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_reconcile_marks_the_call_done_on_the_data_directory_and_the_run_completes() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let (run_id, key) = a_run_waiting_for_a_reconciliation(&data, Some(&stack)).await;
    assert_eq!(rollbacks(&stack), std::slice::from_ref(&key));

    let out = support::output(support::leasehold(&data).demo_model(&stack).args([
        "runs",
        "reconcile",
        &run_id,
        "--key",
        &key,
        "--mark-done",
        "--result",
        "rolled back by hand",
    ]))
    .await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let out = support::output(support::leasehold(&data).args(["runs", "show", &run_id])).await;
    let view: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(rollbacks(&stack), [key], "the call was not made again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_reconcile_retries_the_call_with_its_key_on_the_data_directory() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let (run_id, key) = a_run_waiting_for_a_reconciliation(&data, Some(&stack)).await;

    // The retried call goes silent again: the run is back where it was,
    // waiting for a person (exit 3), and the server saw the same key twice.
    let out = support::output(
        support::leasehold(&data)
            .demo_model(&stack)
            .args(["--set", "lease.tool_call=200ms"])
            .args(["runs", "reconcile", &run_id, "--key", &key, "--retry"]),
    )
    .await;
    assert_eq!(out.code, Some(3), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(rollbacks(&stack), [key.clone(), key]);
    let out = support::output(support::leasehold(&data).args(["runs", "show", &run_id])).await;
    let view: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert!(
        view["status"] == "reconciliation_required" || view["status"] == "waiting_human",
        "{view}"
    );
}
