//! Traces in a real trace backend: a run of the demo, exported over OTLP
//! to Arize Phoenix (`LEASEHOLD_PEER_PHOENIX`, installed by
//! `scripts/peers.sh`), is read back from Phoenix's API as one trace with
//! the tree of the semantic conventions for generative AI and the token
//! counts `runs show` gives; with the collector dead, the demo's run ends
//! the same.

mod support;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use support::PATIENCE;
use tokio::process::{Child, Command};

/// Phoenix on loopback, its data in `dir`; killed when dropped.
async fn phoenix(dir: &std::path::Path) -> (Child, String) {
    let binary = std::env::var("LEASEHOLD_PEER_PHOENIX")
        .expect("LEASEHOLD_PEER_PHOENIX names Phoenix (scripts/peers.sh installs it)");
    let port = support::free_port();
    let child = Command::new(binary)
        .arg("serve")
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", port.to_string())
        .env("PHOENIX_GRPC_PORT", support::free_port().to_string())
        .env("PHOENIX_WORKING_DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("phoenix starts");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Ok(answer) = http.get(format!("{base}/healthz")).send().await
                && answer.status().is_success()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("Phoenix answers /healthz");
    (child, base)
}

async fn demo(command: &mut Command) -> (String, String) {
    let output = support::output_within(command.arg("demo"), PATIENCE).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let run_id = stdout
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("run-"))
        .unwrap_or_else(|| panic!("a run id in {stdout}"))
        .to_owned();
    (run_id, stderr)
}

fn tokens(span: &Value, key: &str) -> u64 {
    span["attributes"][key].as_u64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_run_is_one_trace_in_phoenix_with_its_tree_and_the_token_counts_of_runs_show() {
    let dir = tempfile::tempdir().expect("dir");
    let (_phoenix, base) = phoenix(&dir.path().join("phoenix")).await;
    let (run_id, _) = demo(
        support::leasehold(&dir.path().join("data"))
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &base)
            .env("OTEL_SERVICE_NAME", "leasehold-test"),
    )
    .await;
    let shown = support::output_within(
        support::leasehold(&dir.path().join("data")).args(["runs", "show", &run_id]),
        PATIENCE,
    )
    .await;
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("runs show prints JSON");
    let usage = &shown["usage"];

    // Phoenix takes the spans in a moment after the demo sent them.
    let trace = leasehold::trace_id_of(&run_id);
    let http = reqwest::Client::new();
    let url = format!("{base}/v1/projects/default/spans?trace_id={trace}&limit=1000");
    let spans: Vec<Value> = tokio::time::timeout(PATIENCE, async {
        loop {
            let answer: Value = http
                .get(&url)
                .send()
                .await
                .expect("sent")
                .json()
                .await
                .expect("JSON");
            let spans = answer["data"].as_array().cloned().unwrap_or_default();
            if spans.iter().any(|s| s["parent_id"].is_null()) {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the run's root span reaches Phoenix");

    // One trace, one root, every parent in it.
    assert!(
        spans
            .iter()
            .all(|s| s["context"]["trace_id"] == trace.as_str())
    );
    let by_id: BTreeMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["context"]["span_id"].as_str().unwrap(), s))
        .collect();
    let roots: Vec<&&Value> = by_id
        .values()
        .filter(|s| s["parent_id"].is_null())
        .collect();
    assert_eq!(roots.len(), 1);
    assert_eq!(roots[0]["name"], "invoke_agent incident-review");
    let parent_name = |s: &Value| {
        s["parent_id"]
            .as_str()
            .map(|p| {
                by_id.get(p).map_or("(missing)".to_owned(), |p| {
                    p["name"].as_str().unwrap().to_owned()
                })
            })
            .unwrap_or_default()
    };
    for span in &spans {
        assert_ne!(parent_name(span), "(missing)", "{span}");
    }
    // The tree: the workers under the root's step, their calls under
    // their steps, the watchdog's evaluator calls under an operation.
    for worker in ["logs", "metrics", "deploys"] {
        let name = format!("invoke_agent {worker}");
        let span = spans
            .iter()
            .find(|s| s["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name}"));
        assert!(
            parent_name(span).starts_with("step "),
            "{name} under {}",
            parent_name(span)
        );
    }
    assert!(
        spans
            .iter()
            .any(|s| s["name"] == "execute_tool rollback_deploy"
                && s["attributes"]["gen_ai.tool.name"] == "rollback_deploy")
    );
    let judge: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "chat leasehold-demo-judge")
        .collect();
    assert!(!judge.is_empty());
    assert!(
        judge
            .iter()
            .any(|s| parent_name(s).starts_with("execute_tool")
                || parent_name(s).starts_with("chat"))
    );
    // A verdict is an event of the operation it was about.
    assert!(spans.iter().any(|s| {
        s["events"].as_array().is_some_and(|events| {
            events.iter().any(|e| {
                e["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("verdict "))
            })
        })
    }));

    // The token counts are runs show's: the loops' model calls, and the
    // evaluator's apart.
    let model: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "chat leasehold-demo")
        .collect();
    let sum = |spans: &[&Value], key| spans.iter().map(|s| tokens(s, key)).sum::<u64>();
    assert_eq!(
        sum(&model, "gen_ai.usage.input_tokens"),
        usage["model"]["input_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        sum(&model, "gen_ai.usage.output_tokens"),
        usage["model"]["output_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        model.len() as u64,
        usage["model"]["calls"].as_u64().unwrap()
    );
    let evaluator_tokens = usage["watchdog"]["input_tokens"].as_u64().unwrap()
        + usage["budget"]["input_tokens"].as_u64().unwrap();
    assert_eq!(sum(&judge, "gen_ai.usage.input_tokens"), evaluator_tokens);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_collector_changes_no_runs_outcome() {
    let dir = tempfile::tempdir().expect("dir");
    // Nothing listens there.
    let endpoint = format!("http://127.0.0.1:{}", support::free_port());
    let (run_id, stderr) = demo(
        support::leasehold(&dir.path().join("data")).env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
    )
    .await;
    assert!(
        stderr.contains("not every span reached the OpenTelemetry collector"),
        "{stderr}"
    );
    let shown = support::output_within(
        support::leasehold(&dir.path().join("data")).args(["runs", "show", &run_id]),
        PATIENCE,
    )
    .await;
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("runs show prints JSON");
    assert_eq!(shown["status"], "completed");
}
