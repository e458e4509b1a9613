//! A person's hands on runs of a real model: `leasehold serve` on llama.cpp's
//! `llama-server` running a real small model, whose timing and words no
//! script decides, behind a proxy that writes down what each request said
//! (`support/llama_stage.rs`). An answer's text streams to a reader and a
//! reconnect picks it up; a run paused mid-stream finishes its call, holds
//! its answer and takes a message; an interrupting message cuts the stream
//! and the next request carries it; a rolled-back message is in the fork's
//! first request.
//!
//! The model server is frozen (`SIGSTOP`) mid-answer where a test needs the
//! stream to be in flight while it acts, and thawed after: what happens
//! then is the model's own pace.

use std::collections::BTreeMap;

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

use serde_json::{Value, json};
use support::llama_stage::{PATIENCE, Stage};
use support::sse::{Frame, Frames};

/// The API token of the servers that share a store (an executor's
/// identity is told only with it).
const TOKEN: &str = "hands-on-test-token";

/// A flow whose one answer streams, with leases no frozen second can end.
fn flow(name: &str, task: &str) -> Value {
    json!({
        "name": name,
        "task": task,
        "max_steps": 3,
        "stream": true,
        "max_tokens": 64,
        "leases": {"model_stream": "10m"},
        "budget": {"max_extensions": 0},
    })
}

async fn post(http: &reqwest::Client, url: String, body: &Value) -> (u16, Value) {
    let response = http.post(&url).json(body).send().await.expect("POST");
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// The run's stored events, as the API gives them.
async fn events(http: &reqwest::Client, base: &str, run_id: &str) -> Vec<Value> {
    let mut frames = Frames::open(
        http,
        &format!("{base}/runs/{run_id}/events?live=false"),
        None,
    )
    .await;
    let mut events = Vec::new();
    while let Some(frame) = frames.next(PATIENCE).await {
        if frame.event.is_some() {
            break;
        }
        events.push(frame.data);
    }
    events
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["kind"].as_str()).collect()
}

async fn finished(http: &reqwest::Client, base: &str, run_id: &str) -> Value {
    support::view_until(http, base, run_id, PATIENCE, "finished", |run| {
        !matches!(
            run["status"].as_str(),
            Some("running" | "queued" | "waiting_human")
        )
    })
    .await
}

/// Each call's text, put together from deltas at their offsets; a delta
/// that overlaps what is held must agree with it.
#[derive(Default)]
struct Answers {
    calls: BTreeMap<u64, String>,
}

impl Answers {
    fn take(&mut self, frame: &Frame) {
        let delta = &frame.data;
        let lease = delta["lease_id"].as_u64().expect("a lease id");
        let offset = usize::try_from(delta["offset"].as_u64().expect("an offset")).unwrap();
        let text = delta["text"].as_str().expect("text");
        let held = self.calls.entry(lease).or_default();
        assert!(
            offset <= held.len(),
            "a delta at {offset} past the {} bytes held: {delta}",
            held.len()
        );
        let overlap = (held.len() - offset).min(text.len());
        assert_eq!(
            &held[offset..offset + overlap],
            &text[..overlap],
            "a delta disagrees with the text held: {delta}"
        );
        held.push_str(&text[overlap..]);
    }

    fn of(&self, lease: u64) -> &str {
        self.calls.get(&lease).map_or("", String::as_str)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_answer_streams_as_text_and_a_reconnect_resumes_from_the_stored_events_and_the_text_since()
 {
    let stage = Stage::new().await;
    let (mut server, base) = support::serve(stage.leasehold(), &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let run_id = support::post_run(
        &http,
        &base,
        &flow("poem", "Write a short poem about the sea."),
    )
    .await;
    let url = format!("{base}/runs/{run_id}/events?text=true");
    let mut answers = Answers::default();
    let mut last_id = None;
    let mut texts = 0;
    // The first reader follows until the model has written something.
    stage.until_the_answer_streams().await;
    let mut first = Frames::open(&http, &url, None).await;
    while texts == 0 || answers.calls.values().all(String::is_empty) {
        let frame = first.next(PATIENCE).await.expect("the stream stays open");
        match frame.event.as_deref() {
            Some("text") => {
                texts += 1;
                answers.take(&frame);
            }
            Some(other) => panic!("the run ended before its text: {other} {:?}", frame.data),
            None => last_id = frame.id.clone(),
        }
    }
    assert!(last_id.is_some(), "events come before text");
    // The model stops mid-answer; the reader goes away and comes back.
    stage.llama.freeze();
    drop(first);
    let held: usize = answers.calls.values().map(String::len).sum();
    let mut again = Frames::open(&http, &url, last_id.as_deref()).await;
    // First the events it missed, then the text of the call in flight.
    let kept = loop {
        let frame = again.next(PATIENCE).await.expect("the stream stays open");
        match frame.event.as_deref() {
            Some("text") => break frame,
            Some(other) => panic!("no text after the reconnect: {other} {:?}", frame.data),
            None => {
                let seq = frame.data["seq"].as_u64().expect("a seq");
                let after: u64 = last_id.as_deref().unwrap().parse().unwrap();
                assert!(seq > after, "an event sent twice: {}", frame.data);
            }
        }
    };
    assert_eq!(
        kept.data["offset"], 0,
        "the text so far, from its start: {:?}",
        kept.data
    );
    assert!(
        kept.data["text"].as_str().unwrap().len() >= held,
        "the kept text holds what the first reader had: {:?}",
        kept.data
    );
    answers.take(&kept);
    stage.llama.thaw();
    let mut completed = None;
    while let Some(frame) = again.next(PATIENCE).await {
        match frame.event.as_deref() {
            Some("text") => answers.take(&frame),
            Some("end") => break,
            Some(other) => panic!("{other}: {:?}", frame.data),
            None => {
                if frame.data["kind"] == "run_completed" {
                    completed = Some(frame.data.clone());
                }
            }
        }
    }
    let completed = completed.expect("the run completed");
    let stored = events(&http, &base, &run_id).await;
    let lease = stored
        .iter()
        .rev()
        .find(|e| e["kind"] == "model_call_started" && e["path"] == "run")
        .and_then(|e| e["lease_id"].as_u64())
        .expect("the answer's call");
    // The text streamed is the answer, whole, in order.
    assert_eq!(
        answers.of(lease).trim(),
        completed["answer"].as_str().expect("an answer").trim(),
        "{:?}",
        answers.calls
    );
    // The log kept no text: its events are what they were without it.
    assert!(
        kinds(&stored).iter().all(|k| !k.contains("text")),
        "{:?}",
        kinds(&stored)
    );
    let _ = server.start_kill();
    let _ = server.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_mid_stream_on_a_real_model_finishes_its_call_and_its_next_request_carries_the_message_enqueued()
 {
    let stage = Stage::new().await;
    let (mut server, base) = support::serve(stage.leasehold(), &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let run_id = support::post_run(
        &http,
        &base,
        &flow("sea", "Describe the sea in two sentences."),
    )
    .await;
    stage.until_the_answer_streams().await;
    stage.llama.freeze();
    let (status, paused) = post(
        &http,
        format!("{base}/runs/{run_id}/pause"),
        &json!({"reason": "checking the draft", "in_flight": "finish"}),
    )
    .await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["status"], "waiting_human", "{paused}");
    let message = "Also name the colour orange.";
    let (status, taken) = post(
        &http,
        format!("{base}/runs/{run_id}/messages"),
        &json!({"text": message, "policy": "enqueue", "by": "ana"}),
    )
    .await;
    assert_eq!(status, 200, "{taken}");
    stage.llama.thaw();
    // The call in flight finishes while the run stays paused, and nothing
    // new is asked of the model.
    support::until("the call in flight to finish", PATIENCE, || async {
        let stored = events(&http, &base, &run_id).await;
        kinds(&stored)
            .contains(&"model_call_finished")
            .then_some(())
    })
    .await;
    let run = support::get_run(&http, &base, &run_id).await;
    assert_eq!(run["status"], "waiting_human", "{run}");
    assert_eq!(stage.loop_requests().len(), 1, "{:#?}", stage.journal());
    let (status, resumed) = post(&http, format!("{base}/runs/{run_id}/resume"), &json!({})).await;
    assert_eq!(status, 200, "{resumed}");
    let run = finished(&http, &base, &run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    // The first call was kept, not made again; the next request carried
    // the message, said as a person's.
    let stored = events(&http, &base, &run_id).await;
    let first = stored
        .iter()
        .find(|e| e["kind"] == "model_call_finished")
        .expect("a call finished");
    assert_eq!(first["outcome"], "ok", "{first}");
    assert!(
        !kinds(&stored).contains(&"intervened"),
        "{:?}",
        kinds(&stored)
    );
    let requests = stage.loop_requests();
    assert!(requests.len() >= 2, "{requests:#?}");
    assert!(
        !requests[0]["said"].as_str().unwrap().contains(message),
        "{requests:#?}"
    );
    let said = requests[1]["said"].as_str().unwrap();
    assert!(
        said.contains(message) && said.contains("A message from ana"),
        "{said}"
    );
    assert!(
        kinds(&stored).contains(&"message_received"),
        "{:?}",
        kinds(&stored)
    );
    let _ = server.start_kill();
    let _ = server.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupting_message_cuts_a_real_stream_and_the_next_request_carries_it_and_a_rejecting_one_is_refused()
 {
    let stage = Stage::new().await;
    let (mut server, base) = support::serve(stage.leasehold(), &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let run_id = support::post_run(
        &http,
        &base,
        &flow("long", "Write a long story about a lighthouse keeper."),
    )
    .await;
    stage.until_the_answer_streams().await;
    stage.llama.freeze();
    let messages = format!("{base}/runs/{run_id}/messages");
    let (status, refused) = post(
        &http,
        messages.clone(),
        &json!({"text": "Hello?", "policy": "reject"}),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("is busy (running)")),
        "{refused}"
    );
    let message = "Stop the story. Answer in one word: blue.";
    let (status, taken) = post(
        &http,
        messages,
        &json!({"text": message, "policy": "interrupt", "by": "ana"}),
    )
    .await;
    assert_eq!(status, 200, "{taken}");
    stage.llama.thaw();
    let run = finished(&http, &base, &run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    let stored = events(&http, &base, &run_id).await;
    // The call in flight was stopped by a person, as an INTERVENE stops it.
    let verdict = stored
        .iter()
        .find(|e| e["kind"] == "verdict")
        .expect("a verdict");
    assert_eq!(verdict["decided_by"], "person", "{verdict}");
    assert_eq!(verdict["verdict"], "INTERVENE", "{verdict}");
    let first = stored
        .iter()
        .find(|e| e["kind"] == "model_call_finished")
        .expect("the first call ended");
    assert_eq!(
        first["outcome"], "intervened",
        "the stream was cut: {first}"
    );
    // The proxy saw leasehold leave the first answer before its end, and
    // the next request carry the message.
    let requests = stage.loop_requests();
    assert!(requests.len() >= 2, "{requests:#?}");
    assert!(
        !requests[0]["said"].as_str().unwrap().contains(message),
        "{requests:#?}"
    );
    assert!(
        requests[1]["said"].as_str().unwrap().contains(message),
        "{requests:#?}"
    );
    support::until("the proxy to see the cut", PATIENCE, || async {
        stage
            .journal()
            .iter()
            .any(|e| e["cut"] == true && e["judge"] == false)
            .then_some(())
    })
    .await;
    let _ = server.start_kill();
    let _ = server.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_message_is_in_the_forks_first_request_on_a_real_model_and_the_run_is_cancelled()
 {
    let stage = Stage::new().await;
    let (mut server, base) = support::serve(stage.leasehold(), &[], PATIENCE).await;
    let http = reqwest::Client::new();
    let run_id = support::post_run(
        &http,
        &base,
        &flow("colour", "Describe a forest in two sentences."),
    )
    .await;
    stage.until_the_answer_streams().await;
    stage.llama.freeze();
    let message = "Describe a desert instead.";
    let (status, rolled) = post(
        &http,
        format!("{base}/runs/{run_id}/messages"),
        &json!({"text": message, "policy": "rollback", "by": "ana"}),
    )
    .await;
    assert_eq!(status, 201, "{rolled}");
    let fork = rolled["run_id"].as_str().expect("the fork's id").to_owned();
    assert_eq!(rolled["rolled_back"]["run_id"], run_id.as_str(), "{rolled}");
    stage.llama.thaw();
    let original = finished(&http, &base, &run_id).await;
    assert_eq!(original["status"], "cancelled", "{original}");
    let forked = finished(&http, &base, &fork).await;
    assert_eq!(forked["status"], "completed", "{forked}");
    // The fork's first request is the original's, with the message.
    let requests = stage.loop_requests();
    assert!(requests.len() >= 2, "{requests:#?}");
    assert!(
        !requests[0]["said"].as_str().unwrap().contains(message),
        "{requests:#?}"
    );
    assert!(
        requests[1..]
            .iter()
            .any(|r| r["said"].as_str().unwrap().contains(message)
                && r["said"].as_str().unwrap().contains("forest")),
        "{requests:#?}"
    );
    let _ = server.start_kill();
    let _ = server.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_streaming_on_one_executor_is_paused_mid_stream_and_resumed_through_another_on_postgres()
 {
    let (_cluster, url) = postgres::database().await;
    let stage = Stage::new().await;
    let serve = || {
        let command = support::leasehold_on_store(&url)
            .model(&stage.proxy.base, &stage.llama.model_name())
            .api_token(TOKEN);
        support::start_serve(command, "127.0.0.1:0", &[])
    };
    let mut a = serve();
    let base_a = support::served_base(&mut a, PATIENCE).await;
    let mut b = serve();
    let base_b = support::served_base(&mut b, PATIENCE).await;
    let http = support::authorized(TOKEN);
    let owner = support::owner_id(&http, &base_a).await;
    let run_id = support::post_run(
        &http,
        &base_a,
        &flow("tide", "Explain the tides in two sentences."),
    )
    .await;
    stage.until_the_answer_streams().await;
    stage.llama.freeze();
    // Paused through B while A's call streams: forwarded to A, the call
    // left to finish.
    let (status, paused) = post(
        &http,
        format!("{base_b}/runs/{run_id}/pause"),
        &json!({"reason": "a look at the draft", "in_flight": "finish", "by": "ana"}),
    )
    .await;
    assert_eq!(status, 202, "{paused}");
    assert_eq!(paused["forwarded_to"], owner.as_str(), "{paused}");
    support::view_until(&http, &base_b, &run_id, PATIENCE, "paused", |run| {
        run["status"] == "waiting_human"
    })
    .await;
    stage.llama.thaw();
    // The stream finishes while paused, and nothing more is asked.
    support::until("the call in flight to finish", PATIENCE, || async {
        let stored = events(&http, &base_b, &run_id).await;
        kinds(&stored)
            .contains(&"model_call_finished")
            .then_some(())
    })
    .await;
    let run = support::get_run(&http, &base_b, &run_id).await;
    assert_eq!(run["status"], "waiting_human", "{run}");
    assert_eq!(stage.loop_requests().len(), 1, "{:#?}", stage.journal());
    // Resumed through B: A ends the run with the answer it held.
    let (status, resumed) = post(&http, format!("{base_b}/runs/{run_id}/resume"), &json!({})).await;
    assert_eq!(status, 202, "{resumed}");
    let run = finished(&http, &base_b, &run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    let stored = events(&http, &base_b, &run_id).await;
    let first = stored
        .iter()
        .find(|e| e["kind"] == "model_call_finished")
        .expect("a call finished");
    assert_eq!(first["outcome"], "ok", "the call was kept: {first}");
    // The call held over the pause is not made again. A real model may
    // run out of its 64 tokens: then, and only then, a next step asks it
    // to go on (the loop's rule for an answer cut off).
    let started = |step: u64| {
        stored
            .iter()
            .filter(|e| e["kind"] == "model_call_started" && e["step"] == step)
            .count()
    };
    assert_eq!(started(1), 1, "made once: {:?}", kinds(&stored));
    let later = stored
        .iter()
        .filter(|e| e["kind"] == "model_call_started" && e["step"] != 1)
        .count();
    assert!(
        later == 0 || first["finish_reason"] == "length",
        "a step after the held answer, which was not cut off: {stored:#?}"
    );
    assert!(
        stored
            .iter()
            .any(|e| e["kind"] == "paused" && e["by"] == "ana"),
        "{:?}",
        kinds(&stored)
    );
    for mut server in [a, b] {
        let _ = server.start_kill();
        let _ = server.wait().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_taken_survives_a_sigkill_of_its_executor_and_reaches_the_real_models_next_request()
 {
    let stage = Stage::new().await;
    let serve = || support::start_serve(stage.leasehold(), "127.0.0.1:0", &[]);
    let mut a = serve();
    let base_a = support::served_base(&mut a, PATIENCE).await;
    let http = reqwest::Client::new();
    let run_id = support::post_run(
        &http,
        &base_a,
        &flow("moon", "Describe the moon in two sentences."),
    )
    .await;
    stage.until_the_answer_streams().await;
    stage.llama.freeze();
    let message = "Mention the colour silver.";
    let (status, taken) = post(
        &http,
        format!("{base_a}/runs/{run_id}/messages"),
        &json!({"text": message, "policy": "enqueue", "by": "ana"}),
    )
    .await;
    assert_eq!(status, 200, "{taken}");
    // The answer said the message was taken: the executor dies at once,
    // its call in flight with it.
    support::signal(&a, "-KILL");
    let _ = a.wait().await;
    stage.llama.thaw();
    // Another executor on the same data directory finds the run orphaned;
    // resumed, its next request carries the message.
    let mut b = serve();
    let base_b = support::served_base(&mut b, PATIENCE).await;
    let run = finished(&http, &base_b, &run_id).await;
    assert_eq!(run["status"], "orphaned", "{run}");
    let (status, resumed) = post(&http, format!("{base_b}/runs/{run_id}/resume"), &json!({})).await;
    assert_eq!(status, 200, "{resumed}");
    let run = finished(&http, &base_b, &run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    let requests = stage.loop_requests();
    assert!(
        requests
            .iter()
            .skip(1)
            .any(|r| r["said"].as_str().unwrap().contains(message)),
        "{requests:#?}"
    );
    let stored = events(&http, &base_b, &run_id).await;
    assert!(
        kinds(&stored).contains(&"message_received"),
        "{:?}",
        kinds(&stored)
    );
    let _ = b.start_kill();
    let _ = b.wait().await;
}
