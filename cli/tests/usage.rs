//! What a run spent: a run of the demo, with prices configured for its two
//! models, says in `runs show` what it cost, and the figure is the sum over
//! its calls — every model call and evaluator call its log records — at
//! those prices, rolled up per loop, worker and role.

mod support;

use std::collections::BTreeMap;

use serde_json::Value;
use support::PATIENCE;
use tokio::process::Command;

/// The prices of the demo's models, per million tokens.
const PRICES: &str = r#"
[prices."leasehold-demo"]
input = 3.0
output = 15.0

[prices."leasehold-demo-judge"]
input = 0.25
output = 1.25
"#;

/// `leasehold` on a data directory in `dir`, with the prices of
/// `dir/leasehold.toml`.
fn priced(dir: &std::path::Path) -> support::Leasehold {
    support::leasehold(&dir.join("data")).config(dir.join("leasehold.toml"))
}

async fn stdout_of(command: &mut Command) -> String {
    let output = support::output_within(command, PATIENCE).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The price of `model`'s `direction` tokens per million.
fn price(model: &str, direction: &str) -> f64 {
    match (model, direction) {
        ("leasehold-demo", "input") => 3.0,
        ("leasehold-demo", "output") => 15.0,
        ("leasehold-demo-judge", "input") => 0.25,
        ("leasehold-demo-judge", "output") => 1.25,
        other => panic!("no price for {other:?}"),
    }
}

/// What one call recorded as `usage` (tokens) of `model` cost.
fn cost(model: &str, usage: &Value) -> f64 {
    let tokens = |key: &str| usage[key].as_f64().expect("a token count");
    (tokens("input_tokens") * price(model, "input")
        + tokens("output_tokens") * price(model, "output"))
        / 1_000_000.0
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_runs_show_prints_is_the_sum_over_the_runs_calls_at_the_configured_prices() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("leasehold.toml"), PRICES).expect("config");
    let said = stdout_of(priced(dir.path()).arg("demo")).await;
    let run_id = said
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("run-"))
        .unwrap_or_else(|| panic!("a run id in {said}"))
        .to_owned();

    // The demo's summary says it too.
    let line = said
        .lines()
        .find(|l| l.trim_start().starts_with("spent "))
        .unwrap_or_else(|| panic!("a spent line in {said}"));
    assert!(line.contains("at the configured prices"), "{line}");

    let shown: Value =
        serde_json::from_str(&stdout_of(priced(dir.path()).args(["runs", "show", &run_id])).await)
            .expect("runs show prints JSON");
    let usage = &shown["usage"];

    // The sum over the calls the log records, priced here.
    let log = stdout_of(priced(dir.path()).args(["runs", "events", &run_id, "--json"])).await;
    let mut by_role: BTreeMap<&str, (u64, f64)> = BTreeMap::new();
    let mut by_loop: BTreeMap<String, f64> = BTreeMap::new();
    for line in log.lines() {
        let event: Value = serde_json::from_str(line).expect("an event");
        let (role, model, tokens) = match event["kind"].as_str().unwrap_or_default() {
            "model_call_finished" => (
                "model",
                event["model"].as_str().expect("the call's model"),
                &event["usage"],
            ),
            "verdict" if event["evaluator"].is_object() => (
                "watchdog",
                event["evaluator"]["model"]
                    .as_str()
                    .expect("the judge's model"),
                &event["evaluator"]["cost"],
            ),
            "budget_extended" | "budget_exhausted" if event["evaluator"].is_object() => (
                "budget",
                event["evaluator"]["model"]
                    .as_str()
                    .expect("the judge's model"),
                &event["evaluator"]["cost"],
            ),
            _ => continue,
        };
        assert!(
            tokens["counted"].is_null(),
            "the demo's server reports usage: {event}"
        );
        let spent = cost(model, tokens);
        let entry = by_role.entry(role).or_default();
        entry.0 += 1;
        entry.1 += spent;
        if role == "model" {
            *by_loop
                .entry(event["path"].as_str().unwrap().to_owned())
                .or_default() += spent;
        }
    }
    let expected: f64 = by_role.values().map(|(_, spent)| spent).sum();
    assert!(expected > 0.0, "{by_role:?}");
    let total = usage["total"]["spent"].as_f64().expect("the run's cost");
    assert!(
        close(total, expected),
        "runs show says {total}, the calls sum to {expected}"
    );
    assert_eq!(usage["total"]["unpriced_calls"], 0, "{usage}");
    assert_eq!(usage["total"]["counted_calls"], 0, "{usage}");
    for (role, (calls, spent)) in &by_role {
        assert_eq!(
            usage[role]["calls"].as_u64(),
            Some(*calls),
            "{role}: {usage}"
        );
        let shown = usage[role]["spent"].as_f64().unwrap();
        assert!(close(shown, *spent), "{role}: {shown} against {spent}");
    }
    // The loops' model calls, attempt by attempt, loop by loop.
    for l in usage["loops"].as_array().expect("loops") {
        let path = l["path"].as_str().unwrap();
        let calls: f64 = l["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["spent"].as_f64().unwrap())
            .sum();
        let logged = by_loop.get(path).copied().unwrap_or_default();
        assert!(close(calls, logged), "{path}: {calls} against {logged}");
        assert!(
            close(l["model"]["spent"].as_f64().unwrap(), logged),
            "{path}"
        );
    }
    // Each worker's figure is its loops'; the demo has three.
    let workers = usage["workers"].as_array().expect("workers");
    assert!(workers.len() >= 3, "{usage}");
    for worker in workers {
        let path = worker["path"].as_str().unwrap();
        assert!(path.starts_with("run/worker:"), "{path}");
        assert!(worker["total"]["spent"].as_f64().unwrap() > 0.0, "{worker}");
    }
    // The same by model: the loops' model and the judge.
    let by_model = usage["by_model"].as_object().expect("by model");
    assert_eq!(
        by_model.keys().collect::<Vec<_>>(),
        ["leasehold-demo", "leasehold-demo-judge"]
    );
}
