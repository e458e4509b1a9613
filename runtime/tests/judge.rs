//! Rule 14, the judge costs less than what it judges: against a judge in
//! another language (a Python process on 127.0.0.1), every evaluator call
//! is bounded in length and streamed, one waits for a place on the
//! endpoint, and one whose time is up is cancelled so that the server
//! stops generating it.
#![cfg(feature = "openai")]

#[path = "support/python.rs"]
mod python;

use std::time::Duration;

use leasehold::{
    EvaluationRequest, Evaluator, EvidenceSummary, LeaseId, LeaseKind,
    model::{JudgeBounds, ModelEndpoint, ModelEvaluator, ModelSettings, OpenAiClient},
};
use python::PythonPeer;
use serde_json::Value;

const PEER: &str = include_str!("support/judge_peer.py");

fn evaluator(peer: &PythonPeer, bounds: JudgeBounds) -> ModelEvaluator {
    let settings = ModelSettings::new(ModelEndpoint::new(&peer.base, "judge"));
    let client = OpenAiClient::new(settings).expect("client");
    ModelEvaluator::new(&client).with_bounds(bounds)
}

fn request(lease: u64) -> EvaluationRequest {
    EvaluationRequest {
        lease_id: LeaseId(lease),
        run_id: "run-judge".into(),
        path: "run/model_stream:1".into(),
        kind: LeaseKind::ModelStream,
        subject: "answer".into(),
        renewals: 2,
        max_renewals: 10,
        lease: Duration::from_secs(1),
        evidence: EvidenceSummary {
            count: 3,
            last_progress_age_ms: Some(900),
            phi: Some(2.5),
            ..EvidenceSummary::default()
        },
        evidence_renewals: 0,
        stream_tail: None,
        transcript_tail: Vec::new().into(),
    }
}

/// What the peer saw, from its `GET /stats`.
async fn stats(peer: &PythonPeer) -> Value {
    let url = peer.base.trim_end_matches("/v1").to_owned() + "/stats";
    reqwest::get(&url)
        .await
        .expect("the peer answers")
        .json()
        .await
        .expect("its stats are JSON")
}

/// Reads the peer's stats until `done` holds of them, for at most `bound`
/// (a bound on a loaded machine, not a pace).
async fn until(peer: &PythonPeer, bound: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let seen = stats(peer).await;
        if done(&seen) || tokio::time::Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn every_judge_request_is_bounded_in_length_and_streamed() {
    let peer = PythonPeer::start(PEER, &["verdict", "10"]);
    let judge = evaluator(
        &peer,
        JudgeBounds {
            verdict_max_tokens: 120,
            ..JudgeBounds::default()
        },
    );
    let answer = judge.evaluate(request(1)).await.expect("an answer");
    assert!(answer.text.contains("RENEW"), "{}", answer.text);
    let seen = stats(&peer).await;
    let requests = seen["requests"].as_array().expect("requests");
    assert_eq!(requests.len(), 1, "{seen}");
    assert_eq!(requests[0]["max_tokens"], 120, "{seen}");
    assert_eq!(requests[0]["stream"], true, "{seen}");
    // And by default, the bound is 256 tokens.
    let defaults = evaluator(&peer, JudgeBounds::default());
    defaults.evaluate(request(2)).await.expect("an answer");
    let seen = stats(&peer).await;
    assert_eq!(seen["requests"][1]["max_tokens"], 256, "{seen}");
}

#[tokio::test]
async fn judge_calls_wait_for_a_place_on_their_endpoint() {
    let peer = PythonPeer::start(PEER, &["verdict", "150"]);
    let judge = evaluator(&peer, JudgeBounds::default());
    assert_eq!(judge.bounds().max_in_flight, 1);
    let calls: Vec<_> = (0..3)
        .map(|n| tokio::spawn(judge.evaluate(request(10 + n))))
        .collect();
    for call in calls {
        call.await.expect("joined").expect("answered");
    }
    let seen = stats(&peer).await;
    assert_eq!(seen["requests"].as_array().map(Vec::len), Some(3), "{seen}");
    assert_eq!(seen["max_in_flight"], 1, "one at a time: {seen}");

    // Two places: two at once.
    let peer = PythonPeer::start(PEER, &["verdict", "300"]);
    let judge = evaluator(
        &peer,
        JudgeBounds {
            max_in_flight: 2,
            ..JudgeBounds::default()
        },
    );
    let calls: Vec<_> = (0..4)
        .map(|n| tokio::spawn(judge.evaluate(request(20 + n))))
        .collect();
    for call in calls {
        call.await.expect("joined").expect("answered");
    }
    let seen = stats(&peer).await;
    assert_eq!(seen["max_in_flight"], 2, "{seen}");
}

#[tokio::test]
async fn a_judge_call_whose_time_is_up_stops_the_server_generating() {
    // The judge never finishes its verdict: the watchdog's timeout drops
    // the call, and the server sees its client leave at its next write.
    let peer = PythonPeer::start(PEER, &["endless", "50"]);
    let judge = evaluator(&peer, JudgeBounds::default());
    let timed_out = tokio::time::timeout(Duration::from_millis(500), judge.evaluate(request(30)))
        .await
        .is_err();
    assert!(timed_out, "the endless verdict was cut by its timeout");
    let seen = until(&peer, Duration::from_secs(30), |s| s["left"] == 1).await;
    assert_eq!(seen["left"], 1, "the server went on generating: {seen}");
    assert_eq!(seen["in_flight"], 0, "{seen}");
    // The place it held is free again.
    let peer_done = until(&peer, Duration::from_secs(30), |s| s["in_flight"] == 0).await;
    assert_eq!(peer_done["in_flight"], 0);
    let again = tokio::time::timeout(Duration::from_millis(300), judge.evaluate(request(31))).await;
    assert!(
        again.is_err(),
        "endless again, but it got a place and was sent"
    );
    let seen = until(&peer, Duration::from_secs(30), |s| s["left"] == 2).await;
    assert_eq!(seen["requests"].as_array().map(Vec::len), Some(2), "{seen}");
}

#[test]
fn the_evaluator_is_told_the_evidence_in_the_words_the_record_gives() {
    // A call silent from its start, judged against a learned first item:
    // no item, but a phi. The prompt says both, as the record's own
    // description does, never "phi undefined".
    let silent = EvidenceSummary {
        phi: Some(8.07),
        ..EvidenceSummary::default()
    };
    let mut asked = request(40);
    asked.evidence = silent.clone();
    let prompt = &ModelEvaluator::lease_prompt(&asked)[1].content;
    let described = silent.describe(None);
    assert!(
        prompt.contains(&format!("evidence: {described}")),
        "{prompt}"
    );
    assert!(prompt.contains("phi 8.07"), "{prompt}");
    assert!(!prompt.contains("phi undefined"), "{prompt}");
}
