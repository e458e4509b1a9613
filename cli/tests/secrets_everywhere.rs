//! Every secret the configuration accepts, hidden everywhere a run can
//! show it: a real `leasehold serve` configured with credentials wherever
//! they are taken — the models' API keys and the credentials in their
//! URLs, the API's bearer token, a webhook receiver's secret and the
//! credentials in its URL, `webhooks.public_url` with a user and password,
//! a tool server's URL, arguments and environment — runs a run to its
//! end, one that pauses and is cancelled, and one that fails on a tool
//! server, queued behind a live run so that it starts from what the store
//! kept of its flow (its tool server still gets its secrets as written).
//! Then no secret appears in any answer of the API, any event,
//! any webhook sent, any line serve logged (at debug level), any output of
//! `leasehold config` or `leasehold runs` (with `--server` and on the data
//! directory), nor in any byte of the data directory once serve stopped.

mod support;

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use support::PATIENCE;

/// The task the model fails.
const FAIL: &str = "fail, so that a person is asked";

/// The task the model holds until the test lets it answer.
const HOLD: &str = "hold, so that the next run waits queued";

/// The API's bearer token.
const TOKEN: &str = "api-t0ken-s3cr3t-7c1d";

/// The webhook receiver's secret: `whsec_` and the base64 of 32 bytes.
const WEBHOOK_SECRET: &str = "whsec_QmvvRGLOsJW3CgIDNvrGVDzd2kTCOPyhMzYcLLSIoaA=";

/// Every secret the configuration holds; none may be shown.
const SECRETS: &[&str] = &[
    "sk-model-k3y-9f8e7d",
    "sk-fast-k3y-1a2b3c",
    "m0delpass-42",
    "f4stpass-42",
    TOKEN,
    WEBHOOK_SECRET,
    "QmvvRGLOsJW3CgIDNvrGVDzd2kTCOPyhMzYcLLSIoaA",
    "h00kpass-42",
    "pubp4ss-42",
    "hunter2-42",
    "s3cret-q-42",
    "arg-s3cret-42",
    "tok3n-abc-42",
    "env-s3cret-42",
];

fn assert_hidden(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} shows `{secret}`:\n{text}");
    }
}

/// What the model was sent (the `authorization` header of each request),
/// and the gate a held request waits on.
struct Model {
    seen: Mutex<Vec<String>>,
    gate: tokio::sync::Semaphore,
}

async fn complete(
    State(model): State<Arc<Model>>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    model.seen.lock().expect("seen").push(authorization);
    let request = request.to_string();
    if request.contains(HOLD) {
        model.gate.acquire().await.expect("the gate").forget();
    }
    if request.contains(FAIL) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "failing on purpose").into_response();
    }
    Json(json!({
        "id": "chatcmpl-s", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "done"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }))
    .into_response()
}

/// The model's address (`HOST:PORT`) and what it was sent.
async fn model() -> (String, Arc<Model>) {
    let seen = Arc::new(Model {
        seen: Mutex::default(),
        gate: tokio::sync::Semaphore::new(0),
    });
    let app = Router::new()
        .route("/v1/chat/completions", post(complete))
        .with_state(Arc::clone(&seen));
    let base = support::serve_peer(app).await;
    (base.trim_start_matches("http://").to_owned(), seen)
}

/// A webhook receiver that takes every notice; its address and the bodies
/// it was sent.
async fn receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route(
            "/hook",
            post(
                |State(bodies): State<Arc<Mutex<Vec<String>>>>, body: String| async move {
                    bodies.lock().expect("bodies").push(body);
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .with_state(Arc::clone(&bodies));
    let base = support::serve_peer(app).await;
    (base.trim_start_matches("http://").to_owned(), bodies)
}

/// The configuration: the receiver `ops-hook` at `hook` (credentials in
/// its URL), the public URL with credentials, and the tool servers `web`
/// (credentials in its URL, on a port where nothing listens) and `ops` (a
/// secret argument, a `--token` value and an `env` value; it writes what
/// it got into `got` and exits).
fn configuration(dir: &Path, hook: &str, dead_port: u16) -> std::path::PathBuf {
    let got = dir.join("got");
    let file = dir.join("leasehold.toml");
    let text = format!(
        r#"
[webhooks]
public_url = "https://pubuser:pubp4ss-42@leasehold.example.com"

[webhooks.receivers.ops-hook]
url = "http://hookuser:h00kpass-42@{hook}/hook"
secret = "{WEBHOOK_SECRET}"

[[tools]]
name = "web"
url = "http://user:hunter2-42@127.0.0.1:{dead_port}/mcp?token=s3cret-q-42"

[[tools]]
name = "ops"
command = ["sh", "-c", "echo \"$@ $OPS_KEY\" > {got}; echo refusing >&2; exit 3", "ops",
           "--token", "tok3n-abc-42", {{ secret = "arg-s3cret-42" }}]
env = {{ OPS_KEY = "env-s3cret-42" }}
"#,
        got = got.display(),
    );
    std::fs::write(&file, text).expect("write the configuration");
    file
}

/// `leasehold` on `dir`'s data directory with every secret configured.
fn configured(dir: &Path, config: &Path, model: &str) -> support::Leasehold {
    support::leasehold(&dir.join("data"))
        .config(config)
        .api_token(TOKEN)
        .with_env(
            "LEASEHOLD_MODEL_BASE_URL",
            format!("http://modeluser:m0delpass-42@{model}/v1"),
        )
        .with_env("LEASEHOLD_MODEL_NAME", "m")
        .with_env("LEASEHOLD_MODEL_API_KEY", "sk-model-k3y-9f8e7d")
        .with_env(
            "LEASEHOLD_FAST_MODEL_BASE_URL",
            format!("http://fastuser:f4stpass-42@{model}/v1"),
        )
        .with_env("LEASEHOLD_FAST_MODEL_NAME", "m")
        .with_env("LEASEHOLD_FAST_MODEL_API_KEY", "sk-fast-k3y-1a2b3c")
        .with_env("LEASEHOLD_RESTART_BACKOFF_INITIAL", "10ms")
        .with_env("LEASEHOLD_RESTART_BACKOFF_MAX", "20ms")
        .with_env("LEASEHOLD_SERVER_MAX_LIVE_RUNS", "1")
        .with_env("RUST_LOG", "debug")
}

/// `leasehold ARGS`' stdout and stderr, after it exits 0.
async fn shown(command: support::Leasehold, args: &[&str]) -> String {
    let mut command = command;
    let out = support::output(command.args(args)).await;
    let text = format!("{}{}", out.stdout, out.stderr);
    assert_eq!(out.code, Some(0), "leasehold {args:?} failed: {text}");
    text
}

async fn text_of(http: &reqwest::Client, url: &str) -> String {
    let answer = http.get(url).send().await.expect("GET");
    assert!(
        answer.status().is_success(),
        "GET {url}: {}",
        answer.status()
    );
    answer.text().await.expect("a body")
}

/// Every file under `dir`, as bytes, with its path.
fn files_under(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            let bytes = std::fs::read(&path).expect("a file");
            files.push((path, bytes));
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_configured_secret_appears_in_any_answer_event_webhook_log_line_or_stored_byte() {
    let dir = tempfile::tempdir().expect("dir");
    let (model, model_saw) = model().await;
    let (hook, webhooks) = receiver().await;
    let config = configuration(dir.path(), &hook, support::free_port());
    let log = std::fs::File::create(dir.path().join("serve.log")).expect("log file");
    let mut server = configured(dir.path(), &config, &model)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("serve starts");
    let base = support::served_base(&mut server, PATIENCE).await;
    let http = support::authorized(TOKEN);

    // A run is held live; one using `ops`, posted meanwhile, waits queued
    // in the store, and starts from it once the first completes.
    let flow = |task: &str, tools: Value| json!({"name": "secrets", "task": task, "max_steps": 3, "tools": tools});
    let completed = support::post_run(&http, &base, &flow(HOLD, json!([]))).await;
    support::until("the held run's model call", PATIENCE, || async {
        (!model_saw.seen.lock().expect("seen").is_empty()).then_some(())
    })
    .await;
    let ops = support::post_run(&http, &base, &flow("t", json!([{"name": "ops"}]))).await;
    support::view_until(&http, &base, &ops, PATIENCE, "queued", |v| {
        v["status"] == "queued"
    })
    .await;
    model_saw.gate.add_permits(1);
    support::view_until(&http, &base, &completed, PATIENCE, "completed", |v| {
        v["status"] == "completed"
    })
    .await;
    support::view_until(&http, &base, &ops, PATIENCE, "failed", |v| {
        v["status"] == "failed"
    })
    .await;
    // Its tool server got its secrets as written, though the store kept
    // none of them.
    let got = std::fs::read_to_string(dir.path().join("got")).expect("the tool server ran");
    assert_eq!(
        got.trim(),
        "--token tok3n-abc-42 arg-s3cret-42 env-s3cret-42"
    );

    // One pauses and is cancelled; then one fails on its tool server.
    let paused = support::post_run(&http, &base, &flow(FAIL, json!([]))).await;
    support::view_until(&http, &base, &paused, PATIENCE, "paused", |v| {
        v["status"] == "waiting_human"
    })
    .await;
    let cancelled = http
        .post(format!("{base}/runs/{paused}/cancel"))
        .json(&json!({}))
        .send()
        .await
        .expect("POST cancel");
    assert!(cancelled.status().is_success(), "{}", cancelled.status());
    support::view_until(&http, &base, &paused, PATIENCE, "cancelled", |v| {
        v["status"] == "cancelled"
    })
    .await;
    let web = support::post_run(&http, &base, &flow("t", json!([{"name": "web"}]))).await;
    support::view_until(&http, &base, &web, PATIENCE, "failed", |v| {
        v["status"] == "failed"
    })
    .await;
    let runs = [&completed, &paused, &web, &ops];

    // The receiver is told of each end and of the pause.
    support::until("every notice delivered", PATIENCE, || async {
        (webhooks.lock().expect("bodies").len() >= 5).then_some(())
    })
    .await;
    // The model got credentials, as the process uses them.
    assert!(
        model_saw
            .seen
            .lock()
            .expect("seen")
            .iter()
            .all(|a| !a.is_empty()),
        "{:?}",
        model_saw.seen.lock().expect("seen")
    );

    // Every answer of the API.
    let mut answers = Vec::new();
    for path in ["/", "/runs", "/health", "/metrics", "/executor", "/paces"] {
        answers.push((
            path.to_owned(),
            text_of(&http, &format!("{base}{path}")).await,
        ));
    }
    for run in runs {
        for rest in ["", "/events", "/trace", "/recording"] {
            let path = format!("/runs/{run}{rest}");
            answers.push((path.clone(), text_of(&http, &format!("{base}{path}")).await));
        }
    }
    for (path, text) in &answers {
        assert_hidden(&format!("GET {path}"), text);
    }
    for body in webhooks.lock().expect("bodies").iter() {
        assert_hidden("a webhook", body);
    }

    // Every command that reads the server.
    let cli = || configured(dir.path(), &config, &model);
    for run in runs {
        for command in ["show", "events", "trace"] {
            let text = shown(cli(), &["runs", command, run, "--server", &base]).await;
            assert_hidden(&format!("runs {command} --server"), &text);
        }
    }
    assert_hidden(
        "runs list --server",
        &shown(cli(), &["runs", "list", "--server", &base]).await,
    );

    // Serve stops; its log, the store, and the commands that read it.
    support::signal(&server, "-TERM");
    tokio::time::timeout(PATIENCE, server.wait())
        .await
        .expect("serve stops on SIGTERM")
        .expect("wait");
    let logged = std::fs::read_to_string(dir.path().join("serve.log")).expect("serve's log");
    assert!(
        logged.contains("webhooks: delivered"),
        "a debug log: {logged}"
    );
    assert_hidden("serve's log", &logged);
    for run in runs {
        for command in ["show", "events", "trace"] {
            let text = shown(cli(), &["runs", command, run]).await;
            assert_hidden(&format!("runs {command}"), &text);
        }
        let text = shown(cli(), &["runs", "events", run, "--json"]).await;
        assert_hidden("runs events --json", &text);
    }
    assert_hidden("runs list", &shown(cli(), &["runs", "list"]).await);
    assert_hidden("leasehold config", &shown(cli(), &["config"]).await);
    for (path, bytes) in files_under(&dir.path().join("data")) {
        for secret in SECRETS {
            let found = bytes
                .windows(secret.len())
                .position(|w| w == secret.as_bytes());
            assert!(
                found.is_none(),
                "{} holds `{secret}`: …{}…",
                path.display(),
                found.map_or_else(String::new, |at| String::from_utf8_lossy(
                    &bytes[at.saturating_sub(300)..(at + 300).min(bytes.len())]
                )
                .into_owned())
            );
        }
    }
}
