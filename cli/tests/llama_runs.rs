//! Never the cause of a false kill, against real inference: real `leasehold`
//! processes on llama.cpp's `llama-server` running a real small instruct
//! model (SmolLM2-135M-Instruct) on one thread with two slots, whose timing
//! and words no script decides. The same server is the run's model and its
//! judge, as on a machine with one local model.
//!
//! A proxy in Python between them (`support/recording_proxy.py`) passes
//! every byte through and writes down each request: whether it was a
//! judge's, its `max_tokens`, whether it was streamed, and when the first
//! bytes of an answer passed.

use std::process::Stdio;
use std::time::Duration;

mod support;

use leasehold::{Event, EventKind};
use serde_json::{Value, json};
use support::llama_stage::{PATIENCE, Stage};
use tokio::io::{AsyncBufReadExt, BufReader};

fn events_of(stdout: &str) -> Vec<Event> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Event>(line).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_model_frozen_mid_answer_under_a_one_second_lease_completes_without_a_restart() {
    let stage = Stage::new().await;
    let flow = stage.flow(
        "poem",
        &json!({
            "name": "poem",
            "task": "Write a short poem about the sea.",
            "max_steps": 2,
            "stream": true,
            "max_tokens": 160,
            "leases": {"model_stream": "1s"},
        }),
    );
    let mut run = stage
        .leasehold()
        .arg("run")
        .arg(&flow)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("leasehold run starts");
    let stdout = run.stdout.take().expect("stdout");
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        let mut all = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // Mid-answer, the server freezes for 5 s: five lease periods.
    stage.until_the_answer_streams().await;
    stage.llama.freeze();
    tokio::time::sleep(Duration::from_secs(5)).await;
    stage.llama.thaw();
    let status = tokio::time::timeout(PATIENCE, run.wait())
        .await
        .expect("the run ends")
        .expect("waited");
    let events = events_of(&reader.await.expect("read"));
    let names: Vec<&str> = events.iter().map(|e| e.kind.name()).collect();
    assert_eq!(status.code(), Some(0), "{names:?}");
    // One model call, never restarted, its answer whole.
    let attempts: Vec<u32> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ModelCallStarted { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert!(attempts.iter().all(|a| *a == 1), "{attempts:?}: {names:?}");
    assert!(!names.contains(&"intervened"), "{names:?}");
    // The freeze outlived its lease: it expired, and was judged.
    let verdicts: Vec<&leasehold::VerdictRecord> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Verdict(record) => Some(&**record),
            _ => None,
        })
        .collect();
    assert!(verdicts.len() >= 4, "{verdicts:?}");
    assert!(!names.contains(&"renewal_cap_reached"), "{names:?}");
    // The answer frozen mid-way was read to its end: the first call
    // finished by itself, answered whole up to where the model stopped.
    let first = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ModelCallFinished {
                step: 1,
                attempt: 1,
                outcome,
                usage,
                ..
            } => Some((*outcome, usage.output_tokens)),
            _ => None,
        })
        .expect("the first model call finished");
    assert_eq!(first.0, leasehold::CallOutcome::Ok, "{first:?}");
    assert!(first.1 > 0, "{first:?}");
    // Every judge request carried a bound on its length, and was streamed.
    for judge in stage.judge_requests() {
        assert!(
            judge["max_tokens"].as_u64().is_some_and(|n| n <= 256),
            "{judge}"
        );
        assert_eq!(judge["stream"], true, "{judge}");
    }
    // Nothing is left generating for it.
    // (Polled every 1.5 s: a poll answered is a result the server hands
    // out, and would keep a forsaken blocking request generating.)
    stage
        .llama
        .wait_for_busy_slots(0, Duration::from_millis(1_500), Duration::from_secs(10))
        .await;
}

async fn served(stage: &Stage) -> (tokio::process::Child, String) {
    support::serve(stage.leasehold(), &[], PATIENCE).await
}

async fn post_and_wait(http: &reqwest::Client, base: &str, flows: &[Value]) -> Vec<Value> {
    let mut ids = Vec::new();
    for flow in flows {
        ids.push(support::post_run(http, base, flow).await);
    }
    let mut runs = Vec::new();
    for id in ids {
        let run = support::view_until(http, base, &id, PATIENCE, "finished", |run| {
            run["status"] != "running" && run["status"] != "queued"
        })
        .await;
        runs.push(run);
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_behind_its_own_queue_on_a_real_model_has_no_early_expiry_and_no_judge_call() {
    let stage = Stage::new().await;
    let (mut server, base) = served(&stage).await;
    let http = reqwest::Client::new();
    let flow = |n: usize| {
        json!({
            "name": "greet",
            "task": format!("Friend number {n} asks: what colour is the sky? Answer in one word."),
            "max_steps": 4,
            "stream": true,
            "max_tokens": 48,
            "budget": {"max_extensions": 0},
        })
    };
    // Three runs one after another teach the endpoint its quiet pace.
    let mut all = Vec::new();
    for n in 0..3 {
        let runs = post_and_wait(&http, &base, &[flow(n)]).await;
        assert_eq!(runs[0]["status"], "completed", "{}", runs[0]);
        all.extend(runs);
    }
    // Then sixteen at once, on two slots: most wait in the server's queue,
    // a queue this executor filled itself.
    let burst: Vec<Value> = (0..16).map(|n| flow(100 + n)).collect();
    let runs = post_and_wait(&http, &base, &burst).await;
    for run in &runs {
        assert_eq!(run["status"], "completed", "{run}");
    }
    // No lease of the burst expired early, and none was judged: the
    // executor knew the wait in the server's queue was its own. (Answers are
    // short, so that a 135M model does not loop, and its step budget has no
    // extension to ask for when it rambles on past its length limit step
    // after step: either would rightly ask the judge, about something else
    // than a wait.)
    all.extend(runs.iter().cloned());
    let mut verdicts = Vec::new();
    for run in &all {
        let id = run["run_id"]
            .as_str()
            .or(run["id"].as_str())
            .unwrap_or_default();
        let trace = support::get_json(&http, &format!("{base}/runs/{id}/trace")).await;
        for entry in trace["entries"].as_array().into_iter().flatten() {
            if entry["kind"] == "verdict" {
                verdicts.push(entry.clone());
            }
        }
    }
    assert!(verdicts.is_empty(), "{verdicts:#?}");
    let judged = stage.judge_requests();
    assert!(
        judged.is_empty(),
        "{} judge requests: {judged:#?}",
        judged.len()
    );
    let _ = server.start_kill();
    let _ = server.wait().await;
}
