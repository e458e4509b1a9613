//! Overload never kills, through a real `leasehold serve`: its probe
//! measures how late the process wakes, its leases do not count that time,
//! and its admission takes on runs only while it is on time.
//!
//! The executor is made genuinely late the way an overloaded machine or a
//! starved VM makes it late: the process is stopped (SIGSTOP) for a while
//! and continued. Every timer it holds then fires late by as long — its
//! probe's, its leases', its admission's — with no help from the test.
//!
//! The model is a gate ([`support::gate`]): it holds every chat completion
//! until the test opens it, so runs stay live exactly as long as the test needs.

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

use std::time::Duration;

use leasehold::config::Config;
use serde_json::{Value, json};
use support::PATIENCE;
use support::gate::gated_model;
use tokio::process::Child;

/// The API token.
const TOKEN: &str = "admission-test-token";

/// `leasehold` on a sled store in `data`, on the gate, with `env`.
fn gated(data: &std::path::Path, model: &str, env: &[(&str, &str)]) -> support::Leasehold {
    support::leasehold(data)
        .model(model, "gate")
        .api_token(TOKEN)
        .with_envs(env)
}

/// Stops `child` for `stall` and continues it: for that long the process
/// gets no time at all, as on a machine too loaded to run it.
async fn stall(child: &Child, stall: Duration) {
    support::signal(child, "-STOP");
    // The stall is the load this test creates, not a wait for an outcome.
    tokio::time::sleep(stall).await;
    support::signal(child, "-CONT");
}

/// `GET /executor` until `done` holds, polled every 10 ms within the
/// patience; the last answer.
async fn executor_until(
    http: &reqwest::Client,
    base: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    let waited = tokio::time::timeout(PATIENCE, async {
        loop {
            last = support::get_json(http, &format!("{base}/executor")).await;
            if done(&last) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what}: still {last}");
    last
}

/// The value of the unlabelled metric `name` in a scrape.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        .trim()
        .parse()
        .expect("a number")
}

async fn post_flow(http: &reqwest::Client, base: &str) -> (String, String) {
    let flow = json!({"name": "gated", "task": "Answer.", "max_steps": 1, "stream": false});
    let answer = support::posted(http, base, &flow).await;
    (
        answer["run_id"].as_str().expect("a run id").to_owned(),
        answer["status"].as_str().expect("a status").to_owned(),
    )
}

/// Runs this executor holds at once, at most.
const LIMIT: u64 = 8;
/// Runs posted before the stall, all started at once.
const BEFORE: usize = 4;
/// Runs posted after it.
const BURST: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_executor_cuts_its_admitted_limit_queues_a_burst_and_completes_every_run() {
    let data = tempfile::tempdir().expect("a data dir");
    let (model, gate) = gated_model().await;
    let command = gated(
        data.path(),
        &model,
        &[
            ("LEASEHOLD_SERVER_MAX_LIVE_RUNS", "8"),
            ("LEASEHOLD_EXECUTOR_LAG_TARGET", "100ms"),
            // No periodic claims: only a post, a run's end or a limit that
            // grows makes this executor claim, so the test sees each step.
            ("LEASEHOLD_EXECUTOR_CLAIM_INTERVAL", "10m"),
        ],
    );
    let (mut server, base) = support::serve(command, &[], PATIENCE).await;
    let http = support::authorized(TOKEN);

    // On time: the limit is the configured one, and posts start at once.
    let mut runs = Vec::new();
    for _ in 0..BEFORE {
        let (run_id, status) = post_flow(&http, &base).await;
        assert_eq!(status, "running");
        runs.push(run_id);
    }
    let mut received = gate.received.subscribe();
    tokio::time::timeout(PATIENCE, received.wait_for(|n| *n >= BEFORE))
        .await
        .expect("the runs call the model")
        .expect("the gate lives");
    let before = support::get_json(&http, &format!("{base}/executor")).await;
    assert_eq!(before["admitted_limit"], LIMIT, "{before}");
    assert_eq!(before["max_live_runs"], LIMIT, "{before}");
    assert_eq!(before["live_runs"], BEFORE, "{before}");
    assert_eq!(before["lag_target_ms"], 100, "{before}");
    assert_eq!(before["load_bound_ms"], 250, "{before}");

    // A second in which the process gets no time: its probe wakes a second
    // late, and its admission halves the limit.
    stall(&server, Duration::from_secs(1)).await;
    let cut = executor_until(&http, &base, "the limit is cut", |x| {
        x["admitted_limit"].as_u64().is_some_and(|l| l < LIMIT)
    })
    .await;
    // Halved once; on a loaded machine that stays late, maybe again.
    assert!(
        cut["admitted_limit"]
            .as_u64()
            .is_some_and(|l| l <= LIMIT / 2),
        "{cut}"
    );
    let scrape = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("text");
    let admitted = metric(&scrape, "leasehold_admitted_runs_limit");
    assert!((1.0..=4.0).contains(&admitted), "{scrape}");
    assert_eq!(metric(&scrape, "leasehold_live_runs"), 4.0, "{scrape}");
    assert!(
        scrape.contains("# HELP leasehold_executor_lag_seconds "),
        "{scrape}"
    );

    // A burst: with four runs live and room for eight, a fixed limit would
    // start the first post at once; the cut limit queues it, durably.
    let mut burst = Vec::new();
    for _ in 0..BURST {
        burst.push(post_flow(&http, &base).await);
    }
    assert_eq!(
        burst[0].1, "queued",
        "four runs live under a limit of four: {burst:?}"
    );
    assert!(
        burst.iter().all(|(_, s)| s == "queued" || s == "running"),
        "{burst:?}"
    );
    runs.extend(burst.into_iter().map(|(run_id, _)| run_id));

    // On time again, the limit climbs back a run at a time as the queue
    // holds runs back, up to the configured eight; the two runs beyond it
    // wait queued in the store.
    executor_until(&http, &base, "the limit grows back", |x| {
        x["admitted_limit"] == LIMIT && x["live_runs"] == LIMIT && x["queued_runs"] == 2
    })
    .await;
    tokio::time::timeout(PATIENCE, received.wait_for(|n| *n >= 8))
        .await
        .expect("eight runs call the model")
        .expect("the gate lives");
    let queued: Vec<&String> = {
        let mut queued = Vec::new();
        for run_id in &runs {
            if support::get_run(&http, &base, run_id).await["status"] == "queued" {
                queued.push(run_id);
            }
        }
        queued
    };
    assert_eq!(queued.len(), 2, "two runs wait queued beyond the limit");
    assert_eq!(
        *gate.received.borrow(),
        8,
        "no run beyond the limit started"
    );

    // The model answers: every run completes, the queued ones too.
    gate.open.send_replace(true);
    for run_id in &runs {
        let view = support::view_until(&http, &base, run_id, PATIENCE, "completed", |v| {
            v["status"] == "completed"
        })
        .await;
        assert_eq!(view["answer"], "done", "{view}");
    }
    let drained = executor_until(&http, &base, "the queue drains", |x| {
        x["queued_runs"] == 0 && x["live_runs"] == 0
    })
    .await;
    assert_eq!(drained["admitted_limit"], LIMIT, "{drained}");
    server.start_kill().expect("SIGKILL");
    server.wait().await.expect("reaped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_a_late_executor_cannot_take_are_taken_by_another_on_the_same_postgresql() {
    let (cluster, url) = postgres::database().await;
    let (model, gate) = gated_model().await;
    let (data_a, data_b) = (
        tempfile::tempdir().expect("a data dir"),
        tempfile::tempdir().expect("a data dir"),
    );
    let env = [
        ("LEASEHOLD_STORE", url.as_str()),
        ("LEASEHOLD_SERVER_MAX_LIVE_RUNS", "8"),
        ("LEASEHOLD_EXECUTOR_CLAIM_INTERVAL", "10m"),
    ];
    let (mut a, base_a) = support::serve(gated(data_a.path(), &model, &env), &[], PATIENCE).await;
    let http = support::authorized(TOKEN);
    // A has room: these start on A, before B is there to claim anything.
    let mut on_a = Vec::new();
    for _ in 0..BEFORE {
        let (run_id, status) = post_flow(&http, &base_a).await;
        assert_eq!(status, "running");
        on_a.push(run_id);
    }
    let (mut b, base_b) = support::serve(gated(data_b.path(), &model, &env), &[], PATIENCE).await;
    let mut received = gate.received.subscribe();
    tokio::time::timeout(PATIENCE, received.wait_for(|n| *n >= BEFORE))
        .await
        .expect("A's runs call the model")
        .expect("the gate lives");

    // A is late: what is posted to it now waits queued, and B — on time,
    // with room — takes it.
    stall(&a, Duration::from_secs(1)).await;
    executor_until(&http, &base_a, "A's limit is cut", |x| {
        x["admitted_limit"].as_u64().is_some_and(|l| l < LIMIT)
    })
    .await;
    let mut burst = Vec::new();
    for _ in 0..BEFORE {
        burst.push(post_flow(&http, &base_a).await);
    }
    assert_eq!(burst[0].1, "queued", "{burst:?}");
    tokio::time::timeout(PATIENCE, received.wait_for(|n| *n >= 2 * BEFORE))
        .await
        .expect("every run calls the model")
        .expect("the gate lives");
    let owner_b = support::owner_id(&http, &base_b).await;
    let mut taken_by_b = 0;
    for (run_id, _) in &burst {
        let view = support::get_run(&http, &base_a, run_id).await;
        assert_eq!(view["status"], "running", "{view}");
        taken_by_b += usize::from(view["owner_id"] == owner_b.as_str());
    }
    assert!(taken_by_b >= 1, "B took none of the runs A could not");

    gate.open.send_replace(true);
    for run_id in on_a.iter().chain(burst.iter().map(|(run_id, _)| run_id)) {
        let view = support::view_until(&http, &base_b, run_id, PATIENCE, "completed", |v| {
            v["status"] == "completed"
        })
        .await;
        assert_eq!(view["answer"], "done", "{view}");
    }
    for server in [&mut a, &mut b] {
        server.start_kill().expect("SIGKILL");
        server.wait().await.expect("reaped");
    }
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_expires_while_the_executor_is_stopped_renews_by_load_not_by_the_cap() {
    let data = tempfile::tempdir().expect("a data dir");
    let (model, gate) = gated_model().await;
    // A renewal cap of 0: any expiry judged as usual ends the call.
    let command = gated(
        data.path(),
        &model,
        &[
            ("LEASEHOLD_LEASE_MODEL_BLOCKING", "2s"),
            ("LEASEHOLD_WATCHDOG_FREE_RENEWALS", "0"),
            ("LEASEHOLD_LEASE_MAX_RENEWALS", "0"),
        ],
    );
    let (mut server, base) = support::serve(command, &[], PATIENCE).await;
    let http = support::authorized(TOKEN);
    let (run_id, status) = post_flow(&http, &base).await;
    assert_eq!(status, "running");
    let mut received = gate.received.subscribe();
    tokio::time::timeout(PATIENCE, received.wait_for(|n| *n >= 1))
        .await
        .expect("the run calls the model")
        .expect("the gate lives");

    // Stopped across the whole lease: its timer fires seconds late.
    stall(&server, Duration::from_secs(4)).await;
    let trace = tokio::time::timeout(PATIENCE, async {
        loop {
            let trace = support::get_json(&http, &format!("{base}/runs/{run_id}/trace")).await;
            if trace["summary"]["verdicts"]
                .as_u64()
                .is_some_and(|n| n >= 1)
            {
                return trace;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the lease expires");
    let first = trace["entries"]
        .as_array()
        .and_then(|entries| entries.iter().find(|e| e["kind"] == "verdict"))
        .unwrap_or_else(|| panic!("a verdict: {trace}"))
        .clone();
    assert_eq!(first["decided_by"], "load", "{first}");
    assert_eq!(first["verdict"], "RENEW", "{first}");
    assert_eq!(first["renewals"], 0, "{first}");
    assert!(
        first["reason"]
            .as_str()
            .is_some_and(|r| r.contains("ms late (load bound 250 ms)")),
        "{first}"
    );
    // Judged as usual from here on: the call may be cut by the cap and
    // restarted; either way the run completes once the model answers.
    gate.open.send_replace(true);
    let view = support::view_until(&http, &base, &run_id, PATIENCE, "completed", |v| {
        v["status"] == "completed"
    })
    .await;
    assert_eq!(view["answer"], "done", "{view}");
    server.start_kill().expect("SIGKILL");
    server.wait().await.expect("reaped");
}

#[test]
fn the_load_keys_default_to_250ms_and_100ms_and_zero_turns_each_off() {
    let none = |_: &str| None;
    let config = Config::load(None, none).expect("defaults");
    assert_eq!(config.executor_load_bound.value, Duration::from_millis(250));
    assert_eq!(config.executor_lag_target.value, Duration::from_millis(100));
    assert_eq!(
        config.engine_config().load_bound,
        Duration::from_millis(250)
    );
    let printed: Vec<(String, String)> = config
        .entries()
        .into_iter()
        .filter(|(key, _, _)| key.file.starts_with("executor.l"))
        .map(|(key, value, _)| (key.env.to_owned(), value))
        .collect();
    assert_eq!(
        printed,
        [
            (
                "LEASEHOLD_EXECUTOR_LOAD_BOUND".to_owned(),
                "250ms".to_owned()
            ),
            (
                "LEASEHOLD_EXECUTOR_LAG_TARGET".to_owned(),
                "100ms".to_owned()
            ),
        ]
    );

    let off = |name: &str| {
        matches!(
            name,
            "LEASEHOLD_EXECUTOR_LOAD_BOUND" | "LEASEHOLD_EXECUTOR_LAG_TARGET"
        )
        .then(|| "0".to_owned())
    };
    let config = Config::load(None, off).expect("off");
    assert!(config.executor_load_bound.value.is_zero());
    assert!(config.executor_lag_target.value.is_zero());
    assert!(config.engine_config().load_bound.is_zero());
    let shown: Vec<String> = config
        .entries()
        .into_iter()
        .filter(|(key, _, _)| key.file.starts_with("executor.l"))
        .map(|(_, value, _)| value)
        .collect();
    assert_eq!(shown, ["off", "off"], "printed as it may be set back");
    let word = |name: &str| (name == "LEASEHOLD_EXECUTOR_LOAD_BOUND").then(|| "off".to_owned());
    assert!(
        Config::load(None, word)
            .expect("off")
            .executor_load_bound
            .value
            .is_zero()
    );
}

#[test]
fn a_load_key_below_10ms_or_a_target_above_the_bound_is_refused_by_name() {
    let refused = |pairs: &'static [(&'static str, &'static str)]| {
        let env = |name: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        };
        Config::load(None, env).expect_err("refused").to_string()
    };
    let error = refused(&[("LEASEHOLD_EXECUTOR_LOAD_BOUND", "3ms")]);
    assert!(
        error.contains("LEASEHOLD_EXECUTOR_LOAD_BOUND (executor.load_bound)")
            && error.contains("0 (off) or a duration of at least 10ms"),
        "{error}"
    );
    let error = refused(&[("LEASEHOLD_EXECUTOR_LAG_TARGET", "31days")]);
    assert!(
        error.contains("LEASEHOLD_EXECUTOR_LAG_TARGET") && error.contains("at most 30 days"),
        "{error}"
    );
    let error = refused(&[
        ("LEASEHOLD_EXECUTOR_LOAD_BOUND", "200ms"),
        ("LEASEHOLD_EXECUTOR_LAG_TARGET", "300ms"),
    ]);
    assert!(
        error.contains("LEASEHOLD_EXECUTOR_LAG_TARGET (executor.lag_target)")
            && error.contains("at most LEASEHOLD_EXECUTOR_LOAD_BOUND (200ms"),
        "{error}"
    );
    let error = refused(&[("LEASEHOLD_EXECUTOR_LOAD_BOUND", "soon")]);
    assert!(
        error.contains("expected a duration such as 250ms, or 0 (off)"),
        "{error}"
    );
    // With the lease rule off, any target goes.
    let env = |name: &str| match name {
        "LEASEHOLD_EXECUTOR_LOAD_BOUND" => Some("0".to_owned()),
        "LEASEHOLD_EXECUTOR_LAG_TARGET" => Some("2s".to_owned()),
        _ => None,
    };
    assert!(Config::load(None, env).is_ok());
}
