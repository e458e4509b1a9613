//! Webhooks against a real receiver process: a Python server that checks
//! each request with the Standard Webhooks reference library
//! (`standardwebhooks` on PyPI, `LEASEHOLD_PEER_WEBHOOK_PYTHON` from
//! `scripts/peers.sh`), killed and restarted by the test.
//!
//! The demo's run, served by a real `leasehold serve`, escalates and pauses
//! for a person while its receiver is down. The notice waits in the store's
//! outbox through a SIGKILL of the server and its restart, then through a
//! receiver killed mid-delivery; the receiver that comes back gets it,
//! signed, once; the link it carries resumes the run, and the run's end is
//! told too. With the receiver dead or hanging from the start, the run ends
//! as it would without webhooks, and a flow naming a receiver the server
//! lacks is refused.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use leasehold_cli::demo::DemoStack;
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::PATIENCE;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The API token (a posted flow may name its tool server only with one).
const TOKEN: &str = "webhooks-test-token";

/// The receiver's secret: `whsec_` and the base64 of 32 bytes.
const SECRET: &str = "whsec_QmvvRGLOsJW3CgIDNvrGVDzd2kTCOPyhMzYcLLSIoaA=";

/// A configuration file in `dir` declaring the receiver `ops` on `port`.
fn config(dir: &Path, port: u16) -> PathBuf {
    let path = dir.join("leasehold.toml");
    std::fs::write(
        &path,
        format!(
            "[webhooks.receivers.ops]\nurl = \"http://127.0.0.1:{port}/hook\"\nsecret = \"{SECRET}\"\n"
        ),
    )
    .expect("write the configuration");
    path
}

/// `leasehold serve` on the data directory `data` with the configuration
/// `config`, quick retries, and the demo's model; its base URL.
async fn serve_notifying(data: &Path, config: &Path, stack: &DemoStack) -> (Child, String) {
    let command = support::leasehold(data)
        .config(config)
        .demo_model(stack)
        .api_token(TOKEN)
        .with_env("LEASEHOLD_RUN_LEASE_TTL", "3s")
        .with_env("LEASEHOLD_WEBHOOKS_TIMEOUT", "2s")
        .with_env("LEASEHOLD_WEBHOOKS_RETRY_FIRST", "200ms")
        .with_env("LEASEHOLD_WEBHOOKS_RETRY_MAX", "1s");
    support::serve(command, &["--allow-flow-tools"], PATIENCE).await
}

/// The receiver on `port`, logging to `log`, in `mode` (`ok`, `hang`),
/// once it accepts connections.
async fn receiver(dir: &Path, port: u16, log: &Path, mode: &str) -> Child {
    let python = std::env::var("LEASEHOLD_PEER_WEBHOOK_PYTHON").expect(
        "LEASEHOLD_PEER_WEBHOOK_PYTHON names a Python with standardwebhooks (scripts/peers.sh)",
    );
    let script = dir.join("webhook_receiver.py");
    std::fs::write(&script, include_str!("support/webhook_receiver.py")).expect("the script");
    let mut child = Command::new(python)
        .arg(&script)
        .arg(port.to_string())
        .arg(SECRET)
        .arg(log)
        .arg(mode)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("the receiver starts");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let line = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("the receiver says it listens")
        .expect("read")
        .expect("a line");
    assert_eq!(line, format!("listening {port}"));
    child
}

/// Kills `child` with SIGKILL and waits for it to be gone.
async fn kill(child: &mut Child) {
    child.start_kill().expect("SIGKILL");
    child.wait().await.expect("gone");
}

/// What the receiver logged, one record a request.
fn received(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON record"))
        .collect()
}

/// The receiver's records once `done` holds of them, within [`PATIENCE`].
async fn received_until(log: &Path, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let records = received(log);
            if done(&records) {
                return records;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} within {PATIENCE:?}: {:#?}", received(log)))
}

/// The value of the metric line starting with `name` in `/metrics`, 0 if
/// it is not there yet.
async fn metric(http: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find(|line| line.starts_with(name))
        .and_then(|line| line.rsplit(' ').next())
        .map_or(0.0, |value| value.parse().expect("a number"))
}

/// Waits until `/metrics` counts at least one webhook attempt of `outcome`.
async fn counted(http: &reqwest::Client, base: &str, outcome: &str) {
    let name = format!("leasehold_webhooks_total{{outcome=\"{outcome}\"}}");
    support::until(&name, PATIENCE, || async {
        (metric(http, base, &name).await >= 1.0).then_some(())
    })
    .await;
}

fn of_type<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["payload"]["type"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalated_pause_is_told_once_signed_through_restarts_of_both_sides_and_its_link_resumes_the_run()
 {
    let dir = tempfile::tempdir().expect("a directory");
    let data = dir.path().join("data");
    let log = dir.path().join("received.jsonl");
    let port = support::free_port();
    let config = config(dir.path(), port);
    let stack = DemoStack::start().await.expect("the demo servers");
    let http = support::authorized(TOKEN);

    // The run escalates and pauses while nobody listens on the receiver's
    // port: the notice is tried, and waits.
    let (mut server, base) = serve_notifying(&data, &config, &stack).await;
    let run_id = support::post_run(&http, &base, &stack.flow()).await;
    support::view_until(&http, &base, &run_id, PATIENCE, "paused", |v| {
        v["status"] == "waiting_human"
    })
    .await;
    counted(&http, &base, "failed").await;

    // The server dies; the notice is in its store.
    kill(&mut server).await;

    // The receiver comes up, but hangs on the request it gets; the server
    // comes back and delivers; the receiver dies mid-delivery.
    let mut hanging = receiver(dir.path(), port, &log, "hang").await;
    let (_server, base) = serve_notifying(&data, &config, &stack).await;
    let first = received_until(&log, "a request reaching the hanging receiver", |r| {
        !r.is_empty()
    })
    .await;
    kill(&mut hanging).await;

    // Back for good: it gets the notice again, signed, and takes it.
    let _receiver = receiver(dir.path(), port, &log, "ok").await;
    let records = received_until(&log, "the pause taken by the receiver", |r| {
        r.iter()
            .any(|r| r["mode"] == "ok" && r["payload"]["type"] == "run.waiting_human")
    })
    .await;
    for record in &records {
        assert_eq!(
            record["verified"], true,
            "every request is signed: {record}"
        );
        assert_eq!(record["path"], "/hook");
    }
    let pauses = of_type(&records, "run.waiting_human");
    let taken: Vec<_> = pauses.iter().filter(|r| r["mode"] == "ok").collect();
    assert_eq!(taken.len(), 1, "taken once: {records:#?}");
    assert_eq!(
        first[0]["id"], taken[0]["id"],
        "the same message across attempts and servers"
    );
    assert_ne!(
        first[0]["timestamp"],
        Value::Null,
        "each attempt is stamped"
    );
    let data_sent = &taken[0]["payload"]["data"];
    assert_eq!(data_sent["run_id"], run_id.as_str());
    assert_eq!(data_sent["status"], "waiting_human");
    assert!(
        data_sent["pause"]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{data_sent}"
    );
    let commands = data_sent["respond"]["commands"].to_string();
    assert!(
        commands.contains(&format!("leasehold runs resume {run_id}")),
        "{commands}"
    );

    // Answering through the link it carries resumes the run.
    let resume = &data_sent["respond"]["resume"];
    assert_eq!(resume["method"], "POST");
    let url = resume["url"].as_str().expect("a link");
    assert!(
        url.starts_with(&base),
        "{url} points at the live server {base}"
    );
    // The first server's lease on the run may still run for a moment: the
    // answer is a 409 saying until when, and taken once it has ended.
    let answered = tokio::time::timeout(PATIENCE, async {
        loop {
            let answered = http
                .post(url)
                .json(&json!({"guidance": "Do not roll back; page the owner."}))
                .send()
                .await
                .expect("POST the link");
            if answered.status() != StatusCode::CONFLICT {
                return answered;
            }
            let said = answered.text().await.unwrap_or_default();
            assert!(said.contains("try again after"), "{said}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the link answered within the patience");
    assert!(
        answered.status().is_success(),
        "{}: {}",
        answered.status(),
        answered.text().await.unwrap_or_default()
    );
    let ended = support::view_until(&http, &base, &run_id, PATIENCE, "ended", |v| {
        v["status"] == "completed" || v["status"] == "failed" || v["status"] == "cancelled"
    })
    .await;
    assert_eq!(ended["status"], "completed", "{ended}");

    // Its end is told too, once.
    let records = received_until(&log, "the run's end", |r| {
        !of_type(r, "run.completed").is_empty()
    })
    .await;
    let ends = of_type(&records, "run.completed");
    assert_eq!(ends.len(), 1, "{records:#?}");
    assert_eq!(ends[0]["verified"], true);
    assert_eq!(ends[0]["payload"]["data"]["run_id"], run_id.as_str());
    assert!(ends[0]["payload"]["data"].get("respond").is_none());
    assert_eq!(
        of_type(&records, "run.waiting_human").len(),
        2,
        "{records:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_or_hanging_receiver_changes_no_runs_outcome_and_an_unknown_receiver_is_refused() {
    let dir = tempfile::tempdir().expect("a directory");
    let stack = DemoStack::start().await.expect("the demo servers");
    let http = support::authorized(TOKEN);
    for mode in ["dead", "hang"] {
        let place = dir.path().join(mode);
        std::fs::create_dir_all(&place).expect("a directory");
        let port = support::free_port();
        let log = place.join("received.jsonl");
        let _receiver = match mode {
            "hang" => Some(receiver(&place, port, &log, "hang").await),
            _ => None,
        };
        let config = config(&place, port);
        let (_server, base) = serve_notifying(&place.join("data"), &config, &stack).await;

        // A flow may name only the receivers the server declares.
        let mut flow = stack.flow();
        flow.notify = vec!["ops".to_owned(), "pager".to_owned()];
        let refused = http
            .post(format!("{base}/runs"))
            .json(&flow)
            .send()
            .await
            .expect("POST /runs");
        assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let said = refused.text().await.expect("text");
        assert!(
            said.contains("notify[1]") && said.contains("pager"),
            "{said}"
        );

        // The run pauses, is resumed and completes as it does unwatched.
        let run_id = support::post_run(&http, &base, &stack.flow()).await;
        support::view_until(&http, &base, &run_id, PATIENCE, "paused", |v| {
            v["status"] == "waiting_human"
        })
        .await;
        let answered = http
            .post(format!("{base}/runs/{run_id}/resume"))
            .json(&json!({"guidance": "Do not roll back; page the owner."}))
            .send()
            .await
            .expect("POST resume");
        assert!(answered.status().is_success(), "{mode}");
        let ended = support::view_until(&http, &base, &run_id, PATIENCE, "ended", |v| {
            v["status"] != "running" && v["status"] != "waiting_human"
        })
        .await;
        assert_eq!(ended["status"], "completed", "{mode}: {ended}");
        counted(&http, &base, "failed").await;
        let delivered = "leasehold_webhooks_total{outcome=\"delivered\"}";
        assert_eq!(metric(&http, &base, delivered).await, 0.0, "{mode}");
    }
}
