//! Webhook receivers told independently, through a real `leasehold serve`
//! and real HTTP receivers written here: one that accepts every
//! connection and never answers, held until the test ends, does not delay
//! a healthy one; and a pause queued behind the ends of other runs for the
//! same receiver goes before them.
//!
//! The model is written here too: it answers at once, except for a task
//! that asks it to fail, whose run then pauses for a person (its restarts
//! run out).

mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use support::PATIENCE;
use tokio::io::AsyncReadExt;
use tokio::process::Child;
use tokio::sync::Semaphore;

/// The receivers' secret: `whsec_` and the base64 of 32 bytes.
const SECRET: &str = "whsec_QmvvRGLOsJW3CgIDNvrGVDzd2kTCOPyhMzYcLLSIoaA=";

/// The task the model fails.
const FAIL: &str = "fail, so that a person is asked";

/// How many requests a receiver gets at once (a lane's workers).
const AT_ONCE: usize = 4;

async fn complete(Json(request): Json<Value>) -> axum::response::Response {
    use axum::response::IntoResponse;
    if request.to_string().contains(FAIL) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "failing on purpose").into_response();
    }
    Json(json!({
        "id": "chatcmpl-w", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "done"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }))
    .into_response()
}

/// The model's base URL.
async fn model() -> String {
    let app = Router::new().route("/v1/chat/completions", post(complete));
    format!("{}/v1", support::serve_peer(app).await)
}

/// A receiver that answers 204 to each notice, once its gate (if it has
/// one) lets the request through, and records what it was sent.
#[derive(Default)]
struct Recording {
    /// `(type, run_id)` of each request, in the order they came.
    arrivals: Mutex<Vec<(String, String)>>,
    gate: Option<Semaphore>,
}

impl Recording {
    fn arrivals(&self) -> Vec<(String, String)> {
        self.arrivals.lock().expect("arrivals").clone()
    }

    /// The run ids of the notices of `kind` it got.
    fn of(&self, kind: &str) -> Vec<String> {
        self.arrivals()
            .into_iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, run)| run)
            .collect()
    }
}

async fn record(State(receiver): State<Arc<Recording>>, Json(payload): Json<Value>) -> StatusCode {
    let kind = payload["type"].as_str().unwrap_or_default().to_owned();
    let run = payload["data"]["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    receiver
        .arrivals
        .lock()
        .expect("arrivals")
        .push((kind, run));
    if let Some(gate) = &receiver.gate {
        gate.acquire().await.expect("the gate").forget();
    }
    StatusCode::NO_CONTENT
}

/// A recording receiver, gated or not; its URL.
async fn recording(gated: bool) -> (String, Arc<Recording>) {
    let receiver = Arc::new(Recording {
        gate: gated.then(|| Semaphore::new(0)),
        ..Recording::default()
    });
    let app = Router::new()
        .route("/hook", post(record))
        .with_state(Arc::clone(&receiver));
    (format!("{}/hook", support::serve_peer(app).await), receiver)
}

/// A receiver that accepts every connection, reads what it is sent and
/// never answers: it counts the connections it accepted, and those the
/// client closed.
#[derive(Default)]
struct Hanging {
    accepted: AtomicUsize,
    closed: AtomicUsize,
}

async fn hanging() -> (String, Arc<Hanging>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let hanging = Arc::new(Hanging::default());
    let counts = Arc::clone(&hanging);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counts.accepted.fetch_add(1, Ordering::SeqCst);
            let counts = Arc::clone(&counts);
            tokio::spawn(async move {
                let mut buffer = vec![0_u8; 64 * 1024];
                while let Ok(read) = socket.read(&mut buffer).await {
                    if read == 0 {
                        break;
                    }
                }
                counts.closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (format!("http://{addr}/hook"), hanging)
}

/// A configuration file in `dir` declaring the receivers `(name, url)`.
fn config(dir: &Path, receivers: &[(&str, &str)]) -> PathBuf {
    let path = dir.join("leasehold.toml");
    let text: String = receivers
        .iter()
        .map(|(name, url)| {
            format!("[webhooks.receivers.{name}]\nurl = \"{url}\"\nsecret = \"{SECRET}\"\n")
        })
        .collect();
    std::fs::write(&path, text).expect("write the configuration");
    path
}

/// `leasehold serve` on `dir` with `config`, whose webhook requests may
/// take ten minutes: a receiver that never answers holds its connections
/// for the whole test.
async fn serve(dir: &Path, config: &Path) -> (Child, String) {
    let command = support::leasehold(&dir.join("data"))
        .config(config)
        .model(model().await, "m")
        .with_env("LEASEHOLD_WEBHOOKS_TIMEOUT", "10m")
        .with_env("LEASEHOLD_RESTART_BACKOFF_INITIAL", "10ms")
        .with_env("LEASEHOLD_RESTART_BACKOFF_MAX", "20ms");
    support::serve(command, &[], PATIENCE).await
}

fn flow(task: &str) -> Value {
    json!({"name": "told", "task": task, "max_steps": 2})
}

/// Posts `count` runs that complete at once; their ids.
async fn post_completing(http: &reqwest::Client, base: &str, count: usize) -> Vec<String> {
    let mut runs = Vec::new();
    for _ in 0..count {
        runs.push(support::post_run(http, base, &flow("say done")).await);
    }
    runs
}

/// Waits until `receiver` got the notice of `kind` of every run of `runs`.
async fn told_of_all(receiver: &Recording, kind: &str, runs: &[String], what: &str) {
    support::until(what, PATIENCE, || async {
        let got = receiver.of(kind);
        runs.iter().all(|run| got.contains(run)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_delays_no_other_receiver() {
    let dir = tempfile::tempdir().expect("a directory");
    let (healthy_url, healthy) = recording(false).await;
    let (hanging_url, hanging) = hanging().await;
    let config = config(
        dir.path(),
        &[("healthy", &healthy_url), ("hanging", &hanging_url)],
    );
    let (_server, base) = serve(dir.path(), &config).await;
    let http = reqwest::Client::new();

    let runs = post_completing(&http, &base, 40).await;
    told_of_all(
        &healthy,
        "run.completed",
        &runs,
        "every end told to the healthy receiver",
    )
    .await;
    assert_eq!(healthy.arrivals().len(), runs.len(), "each once");
    // Meanwhile the hanging receiver holds every connection it was given.
    support::until("a connection to the hanging receiver", PATIENCE, || async {
        (hanging.accepted.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    assert_eq!(
        hanging.closed.load(Ordering::SeqCst),
        0,
        "the hanging receiver's connections are still held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_is_told_before_the_ends_queued_for_the_same_receiver() {
    let dir = tempfile::tempdir().expect("a directory");
    let (gated_url, gated) = recording(true).await;
    let (witness_url, witness) = recording(false).await;
    let config = config(
        dir.path(),
        &[("gated", &gated_url), ("witness", &witness_url)],
    );
    let (_server, base) = serve(dir.path(), &config).await;
    let http = reqwest::Client::new();

    // The gated receiver holds the first requests it gets: the other ends
    // queue behind them.
    let ended = post_completing(&http, &base, 3 * AT_ONCE).await;
    told_of_all(
        &witness,
        "run.completed",
        &ended,
        "every end told to the witness",
    )
    .await;
    support::until("the gated receiver's requests held", PATIENCE, || async {
        (gated.arrivals().len() == AT_ONCE).then_some(())
    })
    .await;

    // A run pauses. The witness has its notice, so the gated receiver's
    // queue has it too (a notice is offered to every receiver at once).
    let paused = support::post_run(&http, &base, &flow(FAIL)).await;
    support::view_until(&http, &base, &paused, PATIENCE, "paused", |v| {
        v["status"] == "waiting_human"
    })
    .await;
    told_of_all(
        &witness,
        "run.waiting_human",
        std::slice::from_ref(&paused),
        "the pause told to the witness",
    )
    .await;
    assert_eq!(gated.arrivals().len(), AT_ONCE, "{:?}", gated.arrivals());

    // One held request answered: the next the gated receiver gets is the
    // pause, before the ends queued before it.
    gated.gate.as_ref().expect("gated").add_permits(1);
    support::until(
        "the next request to the gated receiver",
        PATIENCE,
        || async { (gated.arrivals().len() > AT_ONCE).then_some(()) },
    )
    .await;
    let next = gated.arrivals()[AT_ONCE].clone();
    assert_eq!(
        next,
        ("run.waiting_human".to_owned(), paused.clone()),
        "{:?}",
        gated.arrivals()
    );

    // Then the rest, each once.
    gated.gate.as_ref().expect("gated").add_permits(1000);
    told_of_all(
        &gated,
        "run.completed",
        &ended,
        "every end told to the gated receiver",
    )
    .await;
    assert_eq!(
        gated.arrivals().len(),
        ended.len() + 1,
        "{:?}",
        gated.arrivals()
    );
}
