//! Two `leasehold serve` processes on one throwaway PostgreSQL: a run
//! started on A is followed, answered and cancelled through B.
//!
//! B's event stream of A's run is fed by the store's change feed
//! (`LISTEN/NOTIFY`), and B forwards a person's controls to A, the run's
//! owner, through the store (202 with `forwarded_to`). The model and the
//! tool server are the embedded demo's: its run spawns three workers, one
//! of which escalates and pauses the run for a person.

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

use futures_util::StreamExt;
use leasehold_cli::demo::DemoStack;
use reqwest::StatusCode;
use support::PATIENCE;

/// The API token (a posted flow may name its tool server only with one).
const TOKEN: &str = "any-executor-test-token";

/// An event stream's text, read chunk by chunk.
struct Stream {
    body: futures_util::stream::BoxStream<'static, reqwest::Result<String>>,
    text: String,
}

impl Stream {
    async fn open(http: &reqwest::Client, base: &str, run_id: &str) -> Self {
        let response = http
            .get(format!("{base}/runs/{run_id}/events"))
            .send()
            .await
            .expect("GET the event stream");
        assert_eq!(response.status(), StatusCode::OK);
        Self {
            body: response
                .bytes_stream()
                .map(|chunk| chunk.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
                .boxed(),
            text: String::new(),
        }
    }

    /// Reads until the text holds `needle`, within [`PATIENCE`].
    async fn until(&mut self, needle: &str) {
        tokio::time::timeout(PATIENCE, async {
            while !self.text.contains(needle) {
                let chunk = self
                    .body
                    .next()
                    .await
                    .unwrap_or_else(|| panic!("the stream ended before {needle}: {}", self.text))
                    .expect("a chunk");
                self.text.push_str(&chunk);
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no {needle} on the stream within {PATIENCE:?}: {}",
                self.text
            )
        });
    }
}

async fn post(http: &reqwest::Client, url: String, body: serde_json::Value) -> serde_json::Value {
    let response = http.post(url).json(&body).send().await.expect("POST");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    response.json().await.expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_one_executor_is_followed_resumed_and_cancelled_through_another() {
    let cluster = tokio::task::spawn_blocking(postgres::cluster)
        .await
        .expect("the cluster starts");
    let store = cluster.database();
    let stack = DemoStack::start().await.expect("the demo servers");
    let http = support::authorized(TOKEN);
    let demo = || {
        support::leasehold_on_store(&store)
            .model(stack.model_base_url(), "leasehold-demo")
            .api_token(TOKEN)
    };
    let (mut a, a_base) = support::serve(demo(), &["--allow-flow-tools"], PATIENCE).await;
    let (mut b, b_base) = support::serve(demo(), &["--allow-flow-tools"], PATIENCE).await;

    // Started on A, followed on B.
    let run_id = support::post_run(&http, &a_base, &stack.flow()).await;
    let a_owner = support::view_until(&http, &a_base, &run_id, PATIENCE, "live on A", |v| {
        v["live"] == true
    })
    .await["owner_id"]
        .as_str()
        .expect("an owner")
        .to_owned();
    let mut on_b = Stream::open(&http, &b_base, &run_id).await;
    on_b.until("\"kind\":\"paused\"").await;
    // The pause's event lands just before its status.
    let view = support::view_until(&http, &b_base, &run_id, PATIENCE, "paused on B", |v| {
        v["status"] == "waiting_human"
    })
    .await;
    assert_eq!(view["live"], false, "B does not run it: {view}");

    // Answered through B: forwarded to A, which resumes it.
    let answer = post(
        &http,
        format!("{b_base}/runs/{run_id}/resume"),
        serde_json::json!({"guidance": "Do not roll back; page the owner."}),
    )
    .await;
    assert_eq!(answer["forwarded_to"], a_owner.as_str(), "{answer}");
    assert_eq!(answer["run_id"], run_id.as_str(), "{answer}");
    assert_eq!(answer["status"], "waiting_human", "{answer}");
    on_b.until("\"kind\":\"resumed\"").await;
    assert!(
        on_b.text.contains("Do not roll back; page the owner."),
        "the guidance reached A's run: {}",
        on_b.text
    );
    on_b.until("\"kind\":\"run_completed\"").await;
    on_b.until("event: end").await;
    assert!(
        on_b.text.contains(r#"{"status":"completed"}"#),
        "{}",
        on_b.text
    );

    // Another run on A, paused, cancelled through B.
    let run_id = support::post_run(&http, &a_base, &stack.flow()).await;
    let mut on_b = Stream::open(&http, &b_base, &run_id).await;
    on_b.until("\"kind\":\"paused\"").await;
    support::view_until(&http, &b_base, &run_id, PATIENCE, "paused on B", |v| {
        v["status"] == "waiting_human"
    })
    .await;
    let answer = post(
        &http,
        format!("{b_base}/runs/{run_id}/cancel"),
        serde_json::json!({"reason": "cancelled through B"}),
    )
    .await;
    assert_eq!(answer["forwarded_to"], a_owner.as_str(), "{answer}");
    on_b.until("\"kind\":\"run_cancelled\"").await;
    on_b.until("event: end").await;
    assert!(
        on_b.text.contains(r#"{"status":"cancelled"}"#),
        "{}",
        on_b.text
    );
    assert!(on_b.text.contains("cancelled through B"), "{}", on_b.text);
    // On A too, once the status follows the event.
    support::view_until(&http, &a_base, &run_id, PATIENCE, "cancelled on A", |v| {
        v["status"] == "cancelled"
    })
    .await;

    for server in [&mut a, &mut b] {
        server.start_kill().expect("stop");
        server.wait().await.expect("reaped");
    }
    stack.shutdown().await;
}
