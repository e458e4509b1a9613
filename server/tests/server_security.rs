//! The HTTP server is safe to expose: no request names a process to start
//! or an address to connect to, no other site can drive it, and every
//! client is bounded in time and number.
//!
//! Each test serves a real engine over loopback and speaks to it as a
//! browser or a hostile client would (raw sockets where a well-behaved
//! client cannot misbehave enough). They wait on conditions, never for
//! time to pass; the few negative checks ("no answer yet") allow a short
//! window, which on a loaded machine can only make them pass more easily.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use leasehold::executor::{Executor, ExecutorOptions};
use leasehold::{
    Engine, EngineConfig, Event, EventLog, LayeredStore, MemoryStore, RunRecord, RunStore, Store,
    StoreFuture, ToolServer,
    testing::{ScriptedModel, ScriptedTools, ToolAct, Turn},
    tools::McpToolClient,
};
use leasehold_server::{self as server, App, ServerLimits, ServerOptions};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

struct Served {
    addr: SocketAddr,
    app: Arc<App>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    async fn start(engine: Engine, options: ServerOptions) -> Self {
        Self::start_with(engine, options, ExecutorOptions::default()).await
    }

    async fn start_with(engine: Engine, options: ServerOptions, runs: ExecutorOptions) -> Self {
        let app = App::new(Executor::new(Arc::new(engine), runs), options);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let done = tokio::spawn(server::serve(listener, Arc::clone(&app), async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            app,
            stop: Some(stop),
            done,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `POST /runs` of a flow with `tools`, as JSON.
    async fn post_flow(&self, tools: Value) -> (u16, Value) {
        send(
            reqwest::Client::new()
                .post(self.url("/runs"))
                .json(&flow_with(tools)),
        )
        .await
    }

    /// Starts a run of the in-process server `local`; returns its id.
    async fn start_run(&self) -> String {
        let (status, body) = self.post_flow(json!([{"name": "local"}])).await;
        assert_eq!(status, 201, "{body}");
        body["run_id"].as_str().expect("a run id").to_owned()
    }

    /// `GET /runs/{run_id}` (with `token`, if any) until the run is no
    /// longer running.
    async fn ended(&self, run_id: &str, token: Option<&str>) -> Value {
        tokio::time::timeout(Duration::from_secs(90), async {
            loop {
                let mut request = reqwest::Client::new().get(self.url(&format!("/runs/{run_id}")));
                if let Some(token) = token {
                    request = request.bearer_auth(token);
                }
                let (_, view) = send(request).await;
                if view["status"] != "running" {
                    return view;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the run ends")
    }

    /// `GET path`.
    async fn get(&self, path: &str) -> (u16, Value) {
        send(reqwest::Client::new().get(self.url(path))).await
    }

    /// Stops the server; returns once `serve` has returned.
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.done).await;
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A status and the JSON body (Null when there is none).
async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Sends `request`; its status and JSON body.
async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    answer(request.send().await.expect("sent")).await
}

/// An engine whose runs call the in-process tool `wait` of server
/// `local`, which never answers (under a 5 m lease): each run stays live.
async fn hanging_engine(store: Arc<dyn Store>) -> Engine {
    let model = ScriptedModel::new().script(
        "run",
        [Turn::tools([("wait", json!({}))]), Turn::answer("done")],
    );
    let tools = ScriptedTools::new().tool("wait", Some(true), [ToolAct::Hang]);
    Engine::builder()
        .config(EngineConfig::default())
        .store(store)
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools))
        .tool_factory(McpToolClient::factory(Duration::from_secs(5)))
        .build()
        .await
        .expect("engine")
}

fn flow_with(tools: Value) -> Value {
    json!({"name": "probe", "task": "wait", "max_steps": 4, "tools": tools})
}

/// A shell command that leaves `marker` behind if it ever runs.
fn touching(marker: &std::path::Path) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("touch {}", marker.display()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posted_flow_may_only_name_tool_servers_the_configuration_declares() {
    let dir = tempfile::tempdir().expect("dir");
    let posted_marker = dir.path().join("posted-ran");
    let declared_marker = dir.path().join("declared-ran");
    let options = ServerOptions {
        tools: vec![ToolServer {
            name: "ops".into(),
            command: Some(
                touching(&declared_marker)
                    .into_iter()
                    .map(Into::into)
                    .collect(),
            ),
            url: None,
            env: Default::default(),
            idempotent: Default::default(),
        }],
        ..ServerOptions::default()
    };
    let served = Served::start(hanging_engine(Arc::new(MemoryStore::new())).await, options).await;

    // A command, a url or an env in a posted flow: 403, and nothing ran.
    for tools in [
        json!([{"name": "x", "command": touching(&posted_marker)}]),
        json!([{"name": "x", "url": "http://169.254.169.254/mcp"}]),
        json!([{"name": "ops", "env": {"LD_PRELOAD": "/tmp/evil.so"}}]),
    ] {
        let (status, body) = served.post_flow(tools.clone()).await;
        assert_eq!(status, 403, "{tools}: {body}");
        assert_eq!(body["error"]["code"], "flow_tools_forbidden", "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("[[tools]]"),
            "says how to declare: {message}"
        );
    }
    assert!(!posted_marker.exists(), "a posted command ran");

    // A name nothing declares: 422 naming it.
    let (status, body) = served.post_flow(json!([{"name": "nobody"}])).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("nobody")
    );

    // A declared name: the configuration's command is what runs, inside
    // the run (it is no MCP server, so the run fails listing its tools).
    let (status, body) = served.post_flow(json!([{"name": "ops"}])).await;
    assert_eq!(status, 201, "{body}");
    let view = served
        .ended(body["run_id"].as_str().expect("a run id"), None)
        .await;
    assert_eq!(view["status"], "failed", "{view}");
    assert!(declared_marker.exists(), "the declared server was started");

    // A server the engine provides in process may be named too.
    let (status, body) = served.post_flow(json!([{"name": "local"}])).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_tools_are_an_opt_in_that_needs_a_token() {
    let dir = tempfile::tempdir().expect("dir");
    let marker = dir.path().join("ran");
    let options = ServerOptions {
        token: Some("s3cret".into()),
        allow_flow_tools: true,
        ..ServerOptions::default()
    };
    let addr: SocketAddr = "127.0.0.1:7878".parse().expect("addr");
    assert!(options.check(addr).is_ok());
    let without = ServerOptions {
        token: None,
        ..options.clone()
    };
    assert!(without.check(addr).is_err(), "refused without a token");

    let served = Served::start(hanging_engine(Arc::new(MemoryStore::new())).await, options).await;
    let (status, body) = send(
        reqwest::Client::new()
            .post(served.url("/runs"))
            .bearer_auth("s3cret")
            .json(&flow_with(
                json!([{"name": "x", "command": touching(&marker)}]),
            )),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let view = served
        .ended(body["run_id"].as_str().expect("a run id"), Some("s3cret"))
        .await;
    assert_eq!(view["status"], "failed", "{view}");
    assert!(marker.exists(), "with the opt-in, the flow's command runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_other_site_can_drive_the_server() {
    let dir = tempfile::tempdir().expect("dir");
    let marker = dir.path().join("ran");
    let served = Served::start(
        hanging_engine(Arc::new(MemoryStore::new())).await,
        ServerOptions {
            allowed_hosts: vec!["leasehold.internal".into()],
            allowed_origins: vec!["https://ops.example.com".into()],
            ..ServerOptions::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    let attack = flow_with(json!([{"name": "x", "command": touching(&marker)}])).to_string();
    let port = served.addr.port();

    // What a page on another site can send without a preflight: a
    // text/plain POST from its origin.
    let (status, body) = send(
        http.post(served.url("/runs"))
            .header("content-type", "text/plain;charset=UTF-8")
            .header("origin", "http://evil.example")
            .header("sec-fetch-site", "cross-site")
            .header("sec-fetch-mode", "no-cors")
            .body(attack.clone()),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "cross_origin", "{body}");

    // A foreign Origin alone, on a JSON body.
    let (status, body) = send(
        http.post(served.url("/runs"))
            .header("content-type", "application/json")
            .header("origin", "http://evil.example")
            .body(attack.clone()),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "cross_origin", "{body}");

    // An origin on the same host but another port is another site.
    let (status, _) = send(
        http.post(served.url("/runs/x/cancel"))
            .header("content-type", "application/json")
            .header(
                "origin",
                format!("http://127.0.0.1:{}", port.wrapping_add(1)),
            )
            .body("{}"),
    )
    .await;
    assert_eq!(status, 403);

    // DNS rebinding: a foreign name resolving to 127.0.0.1.
    let (status, body) = send(
        http.get(served.url("/runs"))
            .header("host", format!("evil.example:{port}")),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");
    // A host the configuration allows is served.
    let (status, _) = send(
        http.get(served.url("/runs"))
            .header("host", format!("leasehold.internal:{port}")),
    )
    .await;
    assert_eq!(status, 200);

    // No sniffing: a body that is JSON but not sent as JSON is refused.
    for content_type in ["text/plain", "application/x-www-form-urlencoded", ""] {
        let mut request = http.post(served.url("/runs")).body(attack.clone());
        if !content_type.is_empty() {
            request = request.header("content-type", content_type);
        }
        let (status, body) = send(request).await;
        assert_eq!(status, 415, "{content_type:?}: {body}");
        assert_eq!(body["error"]["code"], "unsupported_media_type", "{body}");
    }
    let (status, _) = send(
        http.post(served.url("/runs/x/cancel"))
            .header("content-type", "text/plain")
            .body("{}"),
    )
    .await;
    assert_eq!(status, 415);
    assert!(!marker.exists(), "a cross-site request started a process");

    // An origin the configuration allows may post, as a browser sends it.
    let (status, body) = send(
        http.post(served.url("/runs/x/cancel"))
            .header("content-type", "application/json")
            .header("origin", "https://ops.example.com")
            .header("sec-fetch-site", "cross-site")
            .body("{}"),
    )
    .await;
    assert_eq!(status, 404, "allowed, and then no such run: {body}");
    // A link followed from another site to the dashboard changes nothing.
    let (status, _) = send(
        http.get(served.url("/"))
            .header("sec-fetch-site", "cross-site")
            .header("sec-fetch-mode", "navigate"),
    )
    .await;
    assert_eq!(status, 200);

    // The server's own page, as a browser sends it, is served.
    let (status, body) = send(
        http.post(served.url("/runs"))
            .header("content-type", "application/json")
            .header("origin", format!("http://127.0.0.1:{port}"))
            .header("sec-fetch-site", "same-origin")
            .body(flow_with(json!([{"name": "local"}])).to_string()),
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_any_host_is_served_and_the_query_token_opens_only_the_event_stream() {
    let served = Served::start(
        hanging_engine(Arc::new(MemoryStore::new())).await,
        ServerOptions {
            token: Some("s3cret".into()),
            ..ServerOptions::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    let (status, body) = send(
        http.post(served.url("/runs"))
            .header("host", "leasehold.example.com")
            .bearer_auth("s3cret")
            .json(&flow_with(json!([{"name": "local"}]))),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let run_id = body["run_id"].as_str().expect("id").to_owned();

    for path in [
        "/runs?token=s3cret".to_owned(),
        format!("/runs/{run_id}?token=s3cret"),
        format!("/runs/{run_id}/trace?token=s3cret"),
        format!("/runs/{run_id}/recording?token=s3cret"),
    ] {
        let (status, body) = served.get(&path).await;
        assert_eq!(status, 401, "{path}: {body}");
    }
    let stream = http
        .get(served.url(&format!("/runs/{run_id}/events?token=s3cret")))
        .send()
        .await
        .expect("sent");
    assert_eq!(stream.status(), 200);

    // /health: that the server is up; who it is only with the token.
    let (_, open) = served.get("/health").await;
    assert_eq!(open, json!({"status": "ok"}));
    let (_, full) = send(http.get(served.url("/health")).bearer_auth("s3cret")).await;
    assert_eq!(full["status"], "ok");
    assert!(full["owner_id"].is_string(), "{full}");
    assert_eq!(full["live_runs"], 1, "{full}");
    let (_, wrong) = send(http.get(served.url("/health")).bearer_auth("s3cre")).await;
    assert_eq!(wrong, json!({"status": "ok"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_cannot_be_framed_and_every_refusal_is_json() {
    let served = Served::start(
        hanging_engine(Arc::new(MemoryStore::new())).await,
        ServerOptions::default(),
    )
    .await;
    let http = reqwest::Client::new();
    let page = http.get(served.url("/")).send().await.expect("page");
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert!(
        page.headers()["content-security-policy"]
            .to_str()
            .unwrap_or_default()
            .contains("frame-ancestors 'none'")
    );
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");

    // A run id that is not valid percent-encoded UTF-8.
    for path in ["/runs/%FF%FE", "/runs/%FF/trace", "/runs/%C3%28/events"] {
        let (status, body) = served.get(path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["code"], "bad_request", "{path}: {body}");
    }
    let (status, body) = send(http.post(served.url("/runs/%FF/cancel")).json(&json!({}))).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_request", "{body}");
}

/// Writes `request`, then reads until the server closes the connection;
/// returns what it sent.
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_connections_are_capped() {
    let served = Served::start(
        hanging_engine(Arc::new(MemoryStore::new())).await,
        ServerOptions {
            limits: ServerLimits {
                header_timeout: Duration::from_millis(300),
                body_timeout: Duration::from_millis(300),
                max_connections: 2,
                ..ServerLimits::default()
            },
            ..ServerOptions::default()
        },
    )
    .await;

    // Headers that never finish: the connection is closed.
    let mut slow = TcpStream::connect(served.addr).await.expect("connect");
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .expect("write");
    let said = tokio::time::timeout(Duration::from_secs(30), read_to_close(&mut slow))
        .await
        .expect("the server closes a connection whose headers never end");
    assert!(!said.contains("200 OK"), "{said}");

    // A body that never finishes: 408 in the JSON shape.
    let mut slow = TcpStream::connect(served.addr).await.expect("connect");
    let head = format!(
        "POST /runs HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"name\":",
        served.addr
    );
    slow.write_all(head.as_bytes()).await.expect("write");
    let said = read_to_close(&mut slow).await;
    assert!(said.starts_with("HTTP/1.1 408"), "{said}");
    assert!(said.contains("body_timeout"), "{said}");

    // Two connections held open: a third is not served until one closes.
    let mut first = TcpStream::connect(served.addr).await.expect("connect");
    let mut second = TcpStream::connect(served.addr).await.expect("connect");
    for held in [&mut first, &mut second] {
        // Partial headers keep each connection busy until the timeout.
        held.write_all(b"GET /health HTTP/1.1\r\n")
            .await
            .expect("write");
    }
    let third = tokio::spawn({
        let url = served.url("/health");
        async move {
            reqwest::Client::new()
                .get(url)
                .send()
                .await
                .map(|r| r.status().as_u16())
        }
    });
    // Both held connections are closed by the header timeout, and the third
    // is then served: it waited for a place rather than being refused.
    let _ = read_to_close(&mut first).await;
    let _ = read_to_close(&mut second).await;
    let status = tokio::time::timeout(Duration::from_secs(30), third)
        .await
        .expect("served once a place is free")
        .expect("joined")
        .expect("answered");
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_and_live_runs_are_capped_and_a_run_past_the_cap_waits_queued() {
    let served = Served::start_with(
        hanging_engine(Arc::new(MemoryStore::new())).await,
        ServerOptions {
            limits: ServerLimits {
                max_event_streams: 1,
                ..ServerLimits::default()
            },
            ..ServerOptions::default()
        },
        ExecutorOptions {
            max_live_runs: 1,
            ..ExecutorOptions::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    let run_id = served.start_run().await;
    // Past the cap a run is not refused: it waits in the queue.
    let (status, body) = served.post_flow(json!([{"name": "local"}])).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["status"], "queued", "{body}");
    let queued = body["run_id"].as_str().expect("a run id").to_owned();
    let run_status = |id: String| {
        let url = served.url(&format!("/runs/{id}"));
        async move { send(http_get(&url)).await.1["status"].clone() }
    };
    assert_eq!(run_status(queued.clone()).await, "queued");

    let events = served.url(&format!("/runs/{run_id}/events"));
    let open = http.get(&events).send().await.expect("first stream");
    assert_eq!(open.status(), 200);
    let refused = http.get(&events).send().await.expect("second stream");
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "5");
    let (_, body) = answer(refused).await;
    assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
    // Once the first reader leaves, its place is free again.
    drop(open);
    let mut reopened = false;
    for _ in 0..600 {
        let response = http.get(&events).send().await.expect("stream");
        if response.status() == 200 {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        reopened,
        "a stream's place is given back when its reader leaves"
    );

    // The queued run takes the place the first one leaves.
    let (status, body) = send(http.post(served.url(&format!("/runs/{run_id}/cancel")))).await;
    assert_eq!(status, 200, "{body}");
    let claimed = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let status = run_status(queued.clone()).await;
            if status != "queued" {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("claimed once there is room");
    assert_ne!(claimed, "cancelled", "the queued run was started");
}

fn http_get(url: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new().get(url)
}

/// A store that counts the reads event streams make; while `gaps` is
/// above zero, a read of two events or more leaves its second out, as a
/// log read while a batch lands one event at a time can (sled).
struct CountingStore {
    inner: MemoryStore,
    reads: AtomicU64,
    gaps: AtomicU64,
}

impl LayeredStore for CountingStore {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    fn load_run(&self, run_id: &str) -> StoreFuture<Option<RunRecord>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.load_run(run_id)
    }

    fn load_events(&self, run_id: &str, after_seq: u64) -> StoreFuture<Vec<Event>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let read = self.inner.load_events(run_id, after_seq);
        let gap = self
            .gaps
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        Box::pin(async move {
            let mut events = read.await?;
            if gap && events.len() >= 2 {
                events.remove(1);
            }
            Ok(events)
        })
    }

    /// Read through this store's own log reads, counted and gapped, as
    /// the port's default reads it.
    fn last_event(&self, run_id: &str) -> StoreFuture<Option<Event>> {
        let events = LayeredStore::load_events(self, run_id, 0);
        Box::pin(async move { Ok(events.await?.pop()) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_never_skips_an_event_its_log_showed_late() {
    let store = Arc::new(CountingStore {
        inner: MemoryStore::new(),
        reads: AtomicU64::new(0),
        gaps: AtomicU64::new(0),
    });
    let model = ScriptedModel::new().script(
        "run",
        [Turn::tools([("wait", json!({}))]), Turn::answer("done")],
    );
    let tools = ScriptedTools::new().tool(
        "wait",
        Some(true),
        [ToolAct::returns("waited", Duration::from_millis(10))],
    );
    let engine = Engine::builder()
        .config(EngineConfig::default())
        .store(store.clone())
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools))
        .tool_factory(McpToolClient::factory(Duration::from_secs(5)))
        .build()
        .await
        .expect("engine");
    let served = Served::start(engine, ServerOptions::default()).await;
    let run_id = served.start_run().await;
    served.ended(&run_id, None).await;
    let logged = store.inner.events(&run_id);
    assert!(logged.len() >= 6, "{logged:?}");
    // The next reads of the log each leave an event out; the stream
    // waits for what it has not seen instead of going past it.
    store.gaps.store(3, Ordering::Release);
    let body = tokio::time::timeout(
        Duration::from_secs(30),
        reqwest::Client::new()
            .get(served.url(&format!("/runs/{run_id}/events")))
            .send()
            .await
            .expect("stream")
            .text(),
    )
    .await
    .expect("the stream ends")
    .expect("a body");
    let positions: Vec<u64> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Event>(data).ok())
        .map(|event| event.position)
        .collect();
    let expected: Vec<u64> = logged.iter().map(|e| e.position).collect();
    assert_eq!(positions, expected, "every event, in order, none skipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_streams_of_one_run_share_one_look_at_the_store() {
    let store = Arc::new(CountingStore {
        inner: MemoryStore::new(),
        reads: AtomicU64::new(0),
        gaps: AtomicU64::new(0),
    });
    let poll = Duration::from_millis(20);
    let served = Served::start(
        hanging_engine(store.clone()).await,
        ServerOptions {
            poll,
            ..ServerOptions::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    let run_id = served.start_run().await;
    // Wait until the run is idle: its tool call hangs.
    let mut idle = false;
    for _ in 0..600 {
        let (_, view) = served.get(&format!("/runs/{run_id}")).await;
        if view["tool_calls"].as_array().is_some_and(|c| !c.is_empty()) {
            idle = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(idle, "the run reached its hanging tool call");

    let streams = 20u64;
    let mut open = Vec::new();
    for _ in 0..streams {
        let response = http
            .get(served.url(&format!("/runs/{run_id}/events")))
            .send()
            .await
            .expect("stream");
        assert_eq!(response.status(), 200);
        open.push(response.bytes_stream());
    }
    // Every stream has caught up once; from here on only the shared watch
    // looks at the store.
    for stream in &mut open {
        let first = tokio::time::timeout(Duration::from_secs(30), stream.next()).await;
        assert!(
            matches!(first, Ok(Some(Ok(_)))),
            "each stream replays the log"
        );
    }
    let before = store.reads.load(Ordering::Relaxed);
    let started = tokio::time::Instant::now();
    tokio::time::sleep(poll * 25).await;
    let polls = started.elapsed().as_millis() / poll.as_millis() + 1;
    let reads = u128::from(store.reads.load(Ordering::Relaxed) - before);
    // One watch: two reads (log and status) per poll. A poll per stream
    // would be `streams` times as many.
    assert!(
        reads <= 2 * polls + 4,
        "{reads} store reads in {polls} polls with {streams} idle streams"
    );
    assert!(served.app.executor().live_runs() == 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_shutdown_open_event_streams_get_a_last_frame_and_close() {
    let served = Served::start(
        hanging_engine(Arc::new(MemoryStore::new())).await,
        ServerOptions::default(),
    )
    .await;
    let http = reqwest::Client::new();
    let (_, body) = served.post_flow(json!([{"name": "local"}])).await;
    let run_id = body["run_id"].as_str().expect("id").to_owned();
    let stream = http
        .get(served.url(&format!("/runs/{run_id}/events")))
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status(), 200);
    let mut body = stream.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(30), body.next()).await;
    assert!(matches!(first, Ok(Some(Ok(_)))));

    // A second client holds a connection with headers that never end.
    let mut held = TcpStream::connect(served.addr).await.expect("connect");
    held.write_all(b"GET /health HTTP/1.1\r\n")
        .await
        .expect("write");

    let app = Arc::clone(&served.app);
    let stopping = tokio::spawn(served.stop());
    let mut text = String::new();
    let read_all = async {
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(bytes) => text.push_str(&String::from_utf8_lossy(&bytes)),
                Err(_) => break,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read_all)
        .await
        .expect("the stream is closed by the shutdown");
    assert!(text.contains("event: shutdown"), "{text}");
    tokio::time::timeout(Duration::from_secs(30), stopping)
        .await
        .expect("serve returns within its grace")
        .expect("joined");
    // The run itself is untouched: still live in the engine.
    assert_eq!(app.executor().live_runs(), 1);
}
