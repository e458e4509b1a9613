//! The HTTP API over a real socket: runs never hang off a request, event
//! streams resume with `Last-Event-ID`, every bad request is a 4xx with a
//! JSON body, and the token guards the API.
//!
//! These tests run on the real clock (the API is served over loopback) and
//! wait on conditions, never for time to pass.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use leasehold::{
    Engine, EngineConfig, Event, MemoryStore, PaceStore, RunRecord, RunStatus, RunStore,
    testing::{ManualClock, ScriptedModel, ScriptedTools, ToolAct, Turn},
};
use leasehold_server::ServerOptions;
use serde_json::{Value, json};
use support::client::{
    Server, a_charge_waiting_for_a_decision, hanging_tool_engine, searching_flow,
};

/// Reads SSE frames (id, event name, data) from a response.
struct Frames {
    body: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>,
    >,
    pending: String,
}

#[derive(Debug, Default, Clone)]
struct Frame {
    id: Option<String>,
    event: Option<String>,
    data: String,
}

impl Frames {
    fn new(response: reqwest::Response) -> Self {
        Self {
            body: Box::pin(response.bytes_stream()),
            pending: String::new(),
        }
    }

    async fn next(&mut self) -> Option<Frame> {
        let mut frame = Frame::default();
        loop {
            while let Some(end) = self.pending.find('\n') {
                let line: String = self.pending.drain(..=end).collect();
                let line = line.trim_end_matches(['\r', '\n']);
                if line.is_empty() {
                    if frame.id.is_some() || frame.event.is_some() || !frame.data.is_empty() {
                        return Some(frame);
                    }
                    continue;
                }
                if line.starts_with(':') {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
                match field {
                    "id" => frame.id = Some(value),
                    "event" => frame.event = Some(value),
                    "data" => frame.data.push_str(&value),
                    _ => {}
                }
            }
            let chunk = self.body.next().await?.ok()?;
            self.pending.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Every event until the `end` frame; and whether it came.
    async fn all(&mut self) -> (Vec<Event>, bool) {
        let mut events = Vec::new();
        while let Some(frame) = self.next().await {
            if frame.event.as_deref() == Some("end") {
                return (events, true);
            }
            let event: Event = serde_json::from_str(&frame.data).expect("the event schema");
            assert_eq!(
                frame.id,
                Some(event.seq.to_string()),
                "the SSE id is the seq"
            );
            events.push(event);
        }
        (events, false)
    }
}

/// A run of five 150 ms searches, then an answer.
async fn searching_engine(store: MemoryStore) -> Engine {
    let search = || Turn::tools([("search", json!({"q": "x"}))]);
    let model = ScriptedModel::new().script(
        "run",
        [
            search(),
            search(),
            search(),
            search(),
            search(),
            Turn::answer("found it"),
        ],
    );
    let tools = ScriptedTools::new().tool(
        "search",
        Some(true),
        [ToolAct::returns("a hit", Duration::from_millis(150))],
    );
    Engine::builder()
        .config(EngineConfig::default())
        .store(Arc::new(store))
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_dropping_its_event_stream_mid_run_cancels_nothing_and_resumes_with_last_event_id()
{
    let server = Server::start(
        searching_engine(MemoryStore::new()).await,
        ServerOptions::default(),
    )
    .await;
    let run_id = server.start_run(&searching_flow()).await;

    // A reader that never reads, and one that reads three events and leaves.
    let idle = server.events(&run_id, "").await;
    let response = server.events(&run_id, "").await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .starts_with("text/event-stream")
    );
    let mut frames = Frames::new(response);
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let frame = frames.next().await.expect("a frame");
        seen.push(serde_json::from_str::<Event>(&frame.data).expect("event"));
    }
    let last_seen = seen[2].seq;
    drop(frames);

    let view = server.wait_status(&run_id, |s| s != "running").await;
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(view["answer"], "found it");
    drop(idle);

    // The whole log, replayed from the start, ends with the completion.
    let everything = server.events(&run_id, "").await;
    let (all, ended) = Frames::new(everything).all().await;
    assert!(ended, "the stream of an ended run closes with `end`");
    assert_eq!(all.first().map(|e| e.kind.name()), Some("run_started"));
    assert_eq!(all.last().map(|e| e.kind.name()), Some("run_completed"));
    assert_eq!(
        all.iter()
            .filter(|e| e.kind.name() == "tool_call_finished")
            .count(),
        5
    );
    assert_eq!(&all[..3], &seen[..], "the live stream and the log agree");

    // Reconnecting with Last-Event-ID gives exactly what was missed.
    let resumed = server
        .http
        .get(format!("{}/runs/{run_id}/events", server.base))
        .header("Last-Event-ID", last_seen.to_string())
        .send()
        .await
        .expect("resumed");
    let (missed, ended) = Frames::new(resumed).all().await;
    assert!(ended);
    let expected: Vec<Event> = all.iter().filter(|e| e.seq > last_seen).cloned().collect();
    assert_eq!(missed, expected);
    assert!(!missed.is_empty());

    // `?after=` does the same for clients that cannot set the header.
    let after = server
        .http
        .get(format!(
            "{}/runs/{run_id}/events?after={last_seen}",
            server.base
        ))
        .send()
        .await
        .expect("after");
    assert_eq!(Frames::new(after).all().await.0, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_runs_answers_before_the_run_ends_and_a_live_stream_follows_it_to_the_end() {
    let server = Server::start(
        searching_engine(MemoryStore::new()).await,
        ServerOptions::default(),
    )
    .await;
    let run_id = server.start_run(&searching_flow()).await;
    let (_, view) = server.get(&format!("/runs/{run_id}")).await;
    assert_eq!(
        view["status"], "running",
        "POST /runs does not wait for the run: {view}"
    );
    assert_eq!(view["live"], true);
    let stream = server.events(&run_id, "").await;
    let (events, ended) = Frames::new(stream).all().await;
    assert!(ended);
    assert_eq!(events.last().map(|e| e.kind.name()), Some("run_completed"));
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "in order, no repeats: {seqs:?}"
    );
    let (status, list) = server.get("/runs").await;
    assert_eq!(status, 200);
    assert_eq!(list["runs"][0]["run_id"], run_id.as_str());
    assert_eq!(list["runs"][0]["flow_name"], "searching");

    // A second run, still going: filters and limits.
    let second = server.start_run(&searching_flow()).await;
    let (_, newest) = server.get("/runs?limit=1").await;
    assert_eq!(newest["runs"].as_array().map(Vec::len), Some(1));
    assert_eq!(newest["runs"][0]["run_id"], second.as_str(), "newest first");
    let (_, done) = server.get("/runs?status=completed").await;
    let done: Vec<&str> = done["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["run_id"].as_str())
        .collect();
    assert_eq!(done, vec![run_id.as_str()]);
    let (status, body) = server.get("/runs?status=sleeping").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_request");
}

/// Run `n` of a listing test: every seventh waits for a person, the
/// others completed; flows alternate; created one second apart from
/// 2026-01-01T00:00:00Z.
fn listed_run(n: u64) -> RunRecord {
    RunRecord {
        trace_parent: None,
        tenant: None,
        run_id: format!("run-{n:06}"),
        flow: json!({"name": if n.is_multiple_of(2) { "alpha" } else { "beta" }, "task": "t"}),
        status: if n.is_multiple_of(7) {
            RunStatus::WaitingHuman
        } else {
            RunStatus::Completed
        },
        owner_id: None,
        fence: 1,
        lease_expires_at_ms: 0,
        reason: None,
        answer: None,
        pause: None,
        created_at_ms: 1_767_225_600_000 + n * 1_000,
        updated_at_ms: 1_767_225_600_000 + n * 1_000,
        fork: None,
    }
}

impl Server {
    /// Every run of `GET /runs?{query}`, page by page; and how many pages.
    async fn every_page(&self, query: &str) -> (Vec<String>, usize) {
        let mut ids = Vec::new();
        let mut pages = 0;
        let mut after = String::new();
        loop {
            let (status, page) = self.get(&format!("/runs?{query}{after}")).await;
            assert_eq!(status, 200, "{page}");
            pages += 1;
            ids.extend(
                page["runs"]
                    .as_array()
                    .expect("runs")
                    .iter()
                    .map(|r| r["run_id"].as_str().expect("id").to_owned()),
            );
            match page["next"].as_str() {
                Some(next) => after = format!("&after={next}"),
                None => return (ids, pages),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_listed_a_page_at_a_time_with_a_cursor_and_filters() {
    let store = MemoryStore::new();
    for n in 0..520 {
        store.create_run(listed_run(n)).await.expect("created");
    }
    let server = Server::start(searching_engine(store).await, ServerOptions::default()).await;
    let ids_where = |keep: &dyn Fn(u64) -> bool| -> Vec<String> {
        (0..520)
            .rev()
            .filter(|n| keep(*n))
            .map(|n| listed_run(n).run_id)
            .collect()
    };

    // Fifty by default, newest first; the cap holds a large limit to 500.
    let (_, first) = server.get("/runs").await;
    assert_eq!(first["runs"].as_array().map(Vec::len), Some(50), "{first}");
    assert_eq!(first["runs"][0]["run_id"], "run-000519");
    assert_eq!(first["next"], "run-000470");
    let (_, capped) = server.get("/runs?limit=100000").await;
    assert_eq!(capped["runs"].as_array().map(Vec::len), Some(500));
    // Every run once, in order, over the pages.
    let (all, pages) = server.every_page("limit=60").await;
    assert_eq!(all, ids_where(&|_| true));
    assert_eq!(pages, 9, "520 runs in pages of 60");
    // Filters hold on every page.
    let (waiting, _) = server
        .every_page("limit=7&status=waiting_human&flow=beta")
        .await;
    assert_eq!(waiting, ids_where(&|n| n.is_multiple_of(7) && n % 2 == 1));
    assert!(!waiting.is_empty());
    // Times as RFC 3339 or Unix ms: `since` inclusive, `until` exclusive.
    let (window, _) = server
        .every_page("limit=4&since=2026-01-01T00:01:40Z&until=1767225720000")
        .await;
    assert_eq!(window, ids_where(&|n| (100..120).contains(&n)));

    // Bad values: a JSON 400 that names the parameter.
    for (query, name) in [
        ("limit=0", "limit"),
        ("limit=ten", "limit"),
        ("status=sleeping", "status"),
        ("since=yesterday", "since"),
        ("until=2026-13-01T00:00:00Z", "until"),
        ("after=", "after"),
    ] {
        let (status, body) = server.get(&format!("/runs?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], "bad_request", "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("`{name}`")), "{query}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_request_is_a_4xx_with_a_json_error_and_the_server_goes_on() {
    let server = Server::start(
        searching_engine(MemoryStore::new()).await,
        ServerOptions::default(),
    )
    .await;
    let error_of = |body: &Value| {
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };

    let (status, body) = server.post("/runs", "application/json", "{not json").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_flow");
    assert!(error_of(&body).contains("JSON"), "{body}");

    let (status, body) = server
        .post(
            "/runs",
            "application/json",
            json!({"name": "x", "task": "t", "max_steps": 2, "bogus": 1}).to_string(),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        error_of(&body).contains("bogus"),
        "names the unknown field: {body}"
    );

    let (status, body) = server
        .post("/runs", "application/toml", "name = \"x\"\ntask = ")
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(error_of(&body).contains("TOML"), "{body}");

    let (status, body) = server
        .post("/runs", "application/json", vec![b' '; 2 << 20])
        .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "body_too_large");

    let (status, body) = server.get("/runs/no-such-run").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    let (status, _) = server.get("/runs/no-such-run/events").await;
    assert_eq!(status, 404);
    let (status, _) = server.get("/runs/no-such-run/trace").await;
    assert_eq!(status, 404);
    let (status, body) = server
        .post("/runs/no-such-run/resume", "application/json", "{}")
        .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = server
        .post("/runs/no-such-run/cancel", "application/json", "")
        .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = server.get("/nothing/here").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "no_route");

    // A TOML flow is taken; resuming it while it runs is a conflict.
    let toml =
        "name = \"searching\"\ntask = \"search\"\nmax_steps = 8\n\n[[tools]]\nname = \"local\"\n";
    let (status, body) = server.post("/runs", "application/toml", toml).await;
    assert_eq!(status, 201, "{body}");
    let run_id = body["run_id"].as_str().expect("id").to_owned();
    let (status, body) = server
        .post(
            &format!("/runs/{run_id}/resume"),
            "application/json",
            r#"{"guidance": "go"}"#,
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(error_of(&body).contains("not paused"), "{body}");
    let (status, body) = server
        .post(
            &format!("/runs/{run_id}/resume"),
            "application/json",
            r#"{"guidance": 3}"#,
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = server
        .http
        .get(format!("{}/runs/{run_id}/events", server.base))
        .header("Last-Event-ID", "yesterday")
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .expect("sent");
    assert_eq!(status, 400, "{body:?}");

    let (status, body) = server
        .get(&format!("/runs/{run_id}/events?after=yesterday"))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_request");
    let wrong = server
        .http
        .delete(format!("{}/runs", server.base))
        .send()
        .await
        .expect("sent");
    assert_eq!(wrong.status(), 405);
    let body: Value = wrong.json().await.expect("a JSON error");
    assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");

    let (status, health) = server.get("/health").await;
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    let view = server.wait_status(&run_id, |s| s != "running").await;
    assert_eq!(view["status"], "completed", "{view}");
    let (status, body) = server
        .post(&format!("/runs/{run_id}/cancel"), "application/json", "{}")
        .await;
    assert_eq!(status, 409, "a finished run cannot be cancelled: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_is_resumed_with_guidance_over_the_api_and_its_trace_says_who_decided() {
    let (engine, model) = hanging_tool_engine("rollback", "ESCALATE", "left it alone").await;
    let server = Server::start(engine, ServerOptions::default()).await;
    let run_id = server.start_run(&searching_flow()).await;
    let view = server.wait_status(&run_id, |s| s == "waiting_human").await;
    assert_eq!(view["pause"]["subject"], "rollback", "{view}");

    let (status, body) = server
        .post(
            &format!("/runs/{run_id}/resume"),
            "application/json",
            r#"{"guidance": "do not roll back"}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let view = server
        .wait_status(&run_id, |s| s != "running" && s != "waiting_human")
        .await;
    assert_eq!(view["status"], "completed", "{view}");
    let saw_guidance = model.requests_of("run").iter().any(|r| {
        r.messages
            .iter()
            .any(|m| m.content.contains("do not roll back"))
    });
    assert!(saw_guidance, "the next model call saw the guidance");

    let (status, trace) = server.get(&format!("/runs/{run_id}/trace")).await;
    assert_eq!(status, 200);
    assert_eq!(trace["summary"]["pauses"], 1, "{trace}");
    assert_eq!(
        trace["summary"]["verdicts_by_decider"]["evaluator"], 1,
        "{trace}"
    );
    assert_eq!(
        trace["summary"]["verdicts_by_verdict"]["ESCALATE"], 1,
        "{trace}"
    );
    let kinds: Vec<&str> = trace["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"paused") && kinds.contains(&"resumed"),
        "{kinds:?}"
    );
    let paused = trace["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["kind"] == "paused")
        .expect("a paused event");
    assert_eq!(
        paused["evidence"]["count"], 0,
        "the pause shows the evidence the lease escalated on: {paused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_live_run_and_a_run_whose_executor_died() {
    // A live run, hanging in its model call.
    let model = ScriptedModel::new().script("run", [Turn::hang()]);
    let engine = Engine::builder()
        .model(Arc::new(model))
        .build()
        .await
        .expect("engine");
    let server = Server::start(engine, ServerOptions::default()).await;
    let flow = json!({"name": "hanging", "task": "t", "max_steps": 2});
    let run_id = server.start_run(&flow).await;
    let (status, body) = server
        .post(
            &format!("/runs/{run_id}/cancel"),
            "application/json",
            r#"{"reason": "enough"}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let view = server.wait_status(&run_id, |s| s != "running").await;
    assert_eq!(view["status"], "cancelled", "{view}");

    // A run owned by an executor whose lease expired: claimed and cancelled
    // through the store, without starting its loops.
    let store = MemoryStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let dead = Engine::builder()
        .owner_id("dead")
        .store(Arc::new(store.clone()))
        .clock(Arc::new(clock.clone()))
        .model(Arc::new(ScriptedModel::new().script("run", [Turn::hang()])))
        .build()
        .await
        .expect("engine");
    let orphan = dead
        .start(serde_json::from_value(flow).expect("flow"))
        .await
        .expect("started");
    let orphan_id = orphan.run_id().to_owned();
    clock.advance(Duration::from_secs(600));
    let successor = Engine::builder()
        .owner_id("successor")
        .store(Arc::new(store.clone()))
        .clock(Arc::new(clock.clone()))
        .model(Arc::new(ScriptedModel::new()))
        .build()
        .await
        .expect("engine");
    let server = Server::start(successor, ServerOptions::default()).await;
    let (status, body) = server
        .post(&format!("/runs/{orphan_id}/cancel"), "application/json", "")
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, view) = server.get(&format!("/runs/{orphan_id}")).await;
    assert_eq!(view["status"], "cancelled", "{view}");
    assert_eq!(view["owner_id"], "successor");
    let stream = server.events(&orphan_id, "").await;
    let (events, ended) = Frames::new(stream).all().await;
    assert!(ended);
    assert_eq!(events.last().map(|e| e.kind.name()), Some("run_cancelled"));
    assert_eq!(store_status(&store, &orphan_id).await, RunStatus::Cancelled);
}

async fn store_status(store: &MemoryStore, run_id: &str) -> RunStatus {
    use leasehold::RunStore;
    store
        .load_run(run_id)
        .await
        .expect("load")
        .expect("run")
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_api_needs_it_and_the_event_stream_takes_it_in_the_query() {
    let options = ServerOptions {
        token: Some("s3cret".into()),
        ..ServerOptions::default()
    };
    let server = Server::start(searching_engine(MemoryStore::new()).await, options).await;
    let (status, body) = server.get("/runs").await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    let wrong = server
        .http
        .get(format!("{}/runs", server.base))
        .bearer_auth("guess")
        .send()
        .await
        .expect("sent");
    assert_eq!(wrong.status(), 401);
    let response = server
        .http
        .post(format!("{}/runs", server.base))
        .bearer_auth("s3cret")
        .json(&searching_flow())
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 201);
    let run_id = response.json::<Value>().await.expect("json")["run_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let stream = server.events(&run_id, "?token=s3cret").await;
    assert_eq!(stream.status(), 200);
    let (events, ended) = Frames::new(stream).all().await;
    assert!(ended && !events.is_empty());
    // The page itself and the health check are open.
    let page = server
        .http
        .get(format!("{}/", server.base))
        .send()
        .await
        .expect("page");
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap_or_default().contains("<html"));
    let (status, _) = server.get("/health").await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_of_unknown_outcome_is_decided_over_the_api_not_resumed() {
    let (server, model, run_id, key) = a_charge_waiting_for_a_decision().await;

    let (status, body) = server
        .post(&format!("/runs/{run_id}/resume"), "application/json", "{}")
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("reconcile"),
        "says what to do instead: {body}"
    );
    let (status, body) = server
        .post(
            &format!("/runs/{run_id}/reconcile"),
            "application/json",
            json!({"key": "not-this-one", "decision": "retry"}).to_string(),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    let (status, body) = server
        .post(
            &format!("/runs/{run_id}/reconcile"),
            "application/json",
            json!({"key": key, "decision": "mark_done", "result": "charged, by hand"}).to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let view = server
        .wait_status(&run_id, |s| {
            s != "reconciliation_required" && s != "running"
        })
        .await;
    assert_eq!(view["status"], "completed", "{view}");
    let saw = model.requests_of("run").iter().any(|r| {
        r.messages
            .iter()
            .any(|m| m.content.contains("charged, by hand"))
    });
    assert!(saw, "the model saw the result the person gave");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_event_stream_gets_keep_alive_comments_not_a_timeout() {
    let (engine, _model) = hanging_tool_engine("rollback", "ESCALATE", "ok").await;
    let options = ServerOptions {
        keep_alive: Duration::from_millis(50),
        ..ServerOptions::default()
    };
    let server = Server::start(engine, options).await;
    let run_id = server.start_run(&searching_flow()).await;
    server.wait_status(&run_id, |s| s == "waiting_human").await;

    // The run waits for a person: nothing happens, and the stream stays
    // open with comments.
    let response = server.events(&run_id, "").await;
    let mut body = response.bytes_stream();
    let mut text = String::new();
    let mut comments = 0;
    while comments < 3 {
        let chunk = tokio::time::timeout(Duration::from_secs(10), body.next())
            .await
            .expect("the stream is not silent")
            .expect("the stream stays open")
            .expect("a chunk");
        text.push_str(&String::from_utf8_lossy(&chunk));
        comments = text.lines().filter(|l| l.starts_with(':')).count();
    }
    assert!(text.contains("\"kind\":\"paused\""), "{text}");
    let (_, view) = server.get(&format!("/runs/{run_id}")).await;
    assert_eq!(view["status"], "waiting_human", "reading changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_paces_the_store_kept_and_the_runs_learned_are_served() {
    // What an earlier executor learned, kept by the store.
    let store = MemoryStore::new();
    let kept = leasehold::Pace {
        calls: 7,
        first_item: Some(leasehold::Spread {
            mean_ms: 60_000.0,
            std_ms: 5_000.0,
        }),
        interval: None,
        pinned: false,
        runs: Vec::new(),
    };
    store
        .save_paces(vec![("model_stream:a slow thinker".to_owned(), Some(kept))])
        .await
        .expect("saved");
    let engine = searching_engine(store).await;
    let server = Server::start(engine, ServerOptions::default()).await;
    let (status, paces) = server.get("/paces").await;
    assert_eq!(status, 200, "{paces}");
    assert_eq!(paces["model_stream:a slow thinker"]["calls"], 7, "{paces}");
    assert_eq!(
        paces["model_stream:a slow thinker"]["first_item"]["mean_ms"], 60_000.0,
        "{paces}"
    );
    // A run's calls that end by themselves teach their keys: followed to
    // its end on its event stream.
    let run_id = server.start_run(&searching_flow()).await;
    let (events, ended) = Frames::new(server.events(&run_id, "").await).all().await;
    assert!(ended);
    assert_eq!(events.last().map(|e| e.kind.name()), Some("run_completed"));
    let (_, learned) = server.get("/paces").await;
    let keys: Vec<&String> = learned
        .as_object()
        .map(|all| all.keys().collect())
        .unwrap_or_default();
    assert!(
        keys.iter().any(|key| key.starts_with("model_")),
        "no model pace learned: {learned}"
    );
    assert!(
        keys.iter()
            .any(|key| key.starts_with("tool_call:search on ")),
        "no tool pace learned: {learned}"
    );
}

/// A server without a token asks no client for one: a token or anything
/// else a client sends (a dashboard opened with `?token=`) is not checked,
/// and the request is served as before keys; only a well-made API key
/// (`lh_ID_SECRET`) is checked, and an unknown one refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_token_ignores_a_token_sent_and_checks_only_api_keys() {
    let store = MemoryStore::new();
    store.create_run(listed_run(1)).await.expect("created");
    let server = Server::start(searching_engine(store).await, ServerOptions::default()).await;
    let http = reqwest::Client::new();
    let listed = http
        .get(format!("{}/runs", server.base))
        .bearer_auth("a-token-nobody-asked-for")
        .send()
        .await
        .expect("GET /runs");
    assert_eq!(listed.status(), 200);
    let page: Value = listed.json().await.expect("JSON");
    assert_eq!(page["runs"][0]["run_id"], listed_run(1).run_id, "{page}");
    let refused = http
        .get(format!("{}/runs", server.base))
        .bearer_auth("lh_0123456789ab_nosuchsecret")
        .send()
        .await
        .expect("GET /runs");
    assert_eq!(refused.status(), 401);
}
