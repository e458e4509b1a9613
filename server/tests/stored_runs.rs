//! What scales with the stored runs, not the running ones, through the
//! real server: a scrape of `/metrics` and `GET /executor` read no run
//! record; a post waits behind older queued runs, so runs start in the
//! order they were posted; listings in flight hold at most the server's
//! budget of summaries, however many are asked for at once over runs with
//! large flows.
//!
//! These tests run on the real clock (the API is served over loopback) and
//! wait on conditions, never for time to pass.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leasehold::executor::{Executor, ExecutorOptions};
use leasehold::store::{Durability, SledConfig, SledStore};
use leasehold::testing::{ScriptedModel, ScriptedTools, ToolAct, Turn};
use leasehold::{
    Engine, LayeredStore, MemoryStore, RunPage, RunQuery, RunRecord, RunStore, Store, StoreFuture,
    SummaryPage,
};
use leasehold_server::{App, MAX_LISTED_IN_FLIGHT, MAX_PAGE_LIMIT, ServerOptions};
use serde_json::{Value, json};
use support::PATIENCE;

/// A store that counts every read of a run record: one run, every run, a
/// page of runs or of summaries.
struct ReadsCounted {
    inner: Arc<dyn Store>,
    reads: Arc<AtomicU64>,
}

impl ReadsCounted {
    fn read(&self) {
        self.reads.fetch_add(1, Ordering::SeqCst);
    }
}

impl LayeredStore for ReadsCounted {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    fn load_run(&self, run_id: &str) -> StoreFuture<Option<RunRecord>> {
        self.read();
        self.inner.load_run(run_id)
    }

    fn list_runs(&self) -> StoreFuture<Vec<RunRecord>> {
        self.read();
        self.inner.list_runs()
    }

    fn list_runs_page(&self, query: &RunQuery) -> StoreFuture<RunPage> {
        self.read();
        self.inner.list_runs_page(query)
    }

    fn list_run_summaries(&self, query: &RunQuery) -> StoreFuture<SummaryPage> {
        self.read();
        self.inner.list_run_summaries(query)
    }
}

/// A finished run `n` written straight to the store, its flow carrying
/// `flow_bytes` of task: every fifth waits for a person, the others
/// completed.
fn stored_run(n: usize, flow_bytes: usize) -> RunRecord {
    let status = if n.is_multiple_of(5) {
        "waiting_human"
    } else {
        "completed"
    };
    serde_json::from_value(json!({
        "run_id": format!("run-{n:08}"), "flow": {"name": "stored", "task": "x".repeat(flow_bytes)},
        "status": status, "owner_id": null, "fence": 1, "lease_expires_at_ms": 0,
        "reason": null, "answer": "done", "pause": null, "created_at_ms": n,
        "updated_at_ms": n,
    }))
    .expect("a record")
}

/// `base`'s answer to `GET path`: its status and body as JSON (or text).
async fn get(http: &reqwest::Client, base: &str, path: &str) -> (u16, String) {
    let response = http
        .get(format!("{base}{path}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

/// The value of the sample `series` (`name{labels}`) in a scrape.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_and_the_executors_status_read_no_run_record() {
    let dir = tempfile::tempdir().expect("a directory");
    let sled = SledStore::open(
        SledConfig::new(dir.path())
            .with_temporary(true)
            .with_durability(Durability::Exit),
    )
    .expect("a store");
    const STORED: usize = 500;
    for n in 0..STORED {
        sled.create_run(stored_run(n, 100)).await.expect("created");
    }
    let reads = Arc::new(AtomicU64::new(0));
    let store: Arc<dyn Store> = Arc::new(ReadsCounted {
        inner: Arc::new(sled.clone()),
        reads: Arc::clone(&reads),
    });
    let engine = Engine::builder()
        .store(store)
        .model(Arc::new(ScriptedModel::new()))
        .build()
        .await
        .expect("engine");
    let app = App::new(
        Executor::new(Arc::new(engine), ExecutorOptions::default()),
        ServerOptions::default(),
    );
    let served = support::Served::start(app).await;
    let http = reqwest::Client::new();
    // Whatever starting the server read, the scrapes read nothing more:
    // neither through the port nor inside the store.
    let before = reads.load(Ordering::SeqCst);
    let read_inside = sled.records_read();
    for _ in 0..5 {
        let (status, text) = get(&http, &served.base, "/metrics").await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(
            sample(&text, "leasehold_runs{status=\"completed\"}"),
            Some(400.0),
            "{text}"
        );
        assert_eq!(
            sample(&text, "leasehold_runs{status=\"waiting_human\"}"),
            Some(100.0)
        );
        let (status, body) = get(&http, &served.base, "/executor").await;
        assert_eq!(status, 200, "{body}");
        let executor: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(executor["queued_runs"], 0, "{executor}");
    }
    assert_eq!(
        reads.load(Ordering::SeqCst) - before,
        0,
        "a scrape or the executor's status read a run record"
    );
    assert_eq!(
        sled.records_read() - read_inside,
        0,
        "counting the runs read run records in the store"
    );
}

/// A server of one live run at most, claiming nothing on its own (no
/// claimer): queued runs start only when a post finds room, so that a post
/// jumping ahead of the queue would show at once.
async fn one_run_at_a_time() -> (support::Served, MemoryStore) {
    let store = MemoryStore::new();
    // The first run holds the room on a tool that never answers; every
    // later one answers at once.
    let model = ScriptedModel::new().script(
        "run",
        std::iter::once(Turn::tools([("hold", json!({}))]))
            .chain((0..8).map(|n| Turn::answer(format!("answer {n}")))),
    );
    let tools = ScriptedTools::new().tool("hold", Some(true), [ToolAct::Hang]);
    let engine = Engine::builder()
        .store(Arc::new(store.clone()))
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine");
    let options = ExecutorOptions {
        max_live_runs: 1,
        claim_interval: None,
        ..ExecutorOptions::default()
    };
    let app = App::new(
        Executor::new(Arc::new(engine), options),
        ServerOptions::default(),
    );
    (support::Served::start(app).await, store)
}

/// Posts a run: its id and the status the post answered.
async fn post(http: &reqwest::Client, base: &str, task: &str) -> (String, String) {
    let flow = json!({"name": "order", "task": task, "max_steps": 2, "tools": [{"name": "local"}]});
    let response = http
        .post(format!("{base}/runs"))
        .json(&flow)
        .send()
        .await
        .expect("POST /runs");
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.expect("JSON");
    (
        body["run_id"].as_str().expect("a run id").to_owned(),
        body["status"].as_str().expect("a status").to_owned(),
    )
}

/// Asks until the run's status is `wanted`.
async fn wait_status(http: &reqwest::Client, base: &str, run_id: &str, wanted: &str) {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let (_, body) = get(http, base, &format!("/runs/{run_id}")).await;
            let view: Value = serde_json::from_str(&body).expect("JSON");
            if view["status"] == wanted {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("run {run_id} never became {wanted}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_waits_behind_older_queued_runs_so_runs_start_in_posting_order() {
    let (served, store) = one_run_at_a_time().await;
    let base = served.base.as_str();
    let http = reqwest::Client::new();
    // The first run holds the only room; three more wait queued.
    let (holder, status) = post(&http, base, "hold").await;
    assert_eq!(status, "running");
    let mut waiting = Vec::new();
    for n in 0..3 {
        let (run_id, status) = post(&http, base, &format!("queued {n}")).await;
        assert_eq!(status, "queued", "no room: it waits");
        waiting.push(run_id);
    }
    // The room opens; nothing claims the queue until the next post.
    let response = http
        .post(format!("{base}/runs/{holder}/cancel"))
        .json(&json!({"reason": "make room"}))
        .send()
        .await
        .expect("cancel");
    assert_eq!(response.status(), 200);
    wait_status(&http, base, &holder, "cancelled").await;
    // Each post with room finds older runs queued: it waits behind them
    // and the oldest starts in its place, then ends.
    let mut started = Vec::new();
    for n in 0..4 {
        let (run_id, status) = post(&http, base, &format!("later {n}")).await;
        assert_eq!(
            status,
            "queued",
            "post {n} went ahead of {} queued runs",
            waiting.len()
        );
        waiting.push(run_id);
        let oldest = waiting.remove(0);
        wait_status(&http, base, &oldest, "completed").await;
        started.push(oldest);
    }
    // Started in the order posted: the three queued first, then the
    // first post made after them; the rest wait, in order.
    let posted: Vec<String> = store.list_ids();
    assert_eq!(posted.len(), 8);
    assert_eq!(started, posted[1..5]);
    for run_id in &posted[5..] {
        let record = store.run(run_id).expect("stored");
        assert_eq!(record.status, leasehold::RunStatus::Queued, "{run_id}");
    }
}

/// A store whose pages of summaries wait for a gate, counting the reads
/// that entered: what shows how many listings the server lets through at
/// once.
struct GatedListing {
    inner: Arc<dyn Store>,
    gate: tokio::sync::watch::Receiver<bool>,
    entered: Arc<AtomicU64>,
}

impl LayeredStore for GatedListing {
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }

    fn list_run_summaries(&self, query: &RunQuery) -> StoreFuture<SummaryPage> {
        let (inner, query) = (Arc::clone(&self.inner), query.clone());
        let (mut gate, entered) = (self.gate.clone(), Arc::clone(&self.entered));
        Box::pin(async move {
            entered.fetch_add(1, Ordering::SeqCst);
            let _ = gate.wait_for(|open| *open).await;
            inner.list_run_summaries(&query).await
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_in_flight_hold_at_most_the_servers_budget_of_summaries() {
    const STORED: usize = 600;
    const AT_ONCE: usize = 100;
    let memory = MemoryStore::new();
    // Large flows: a listing that held whole runs would hold 64 KiB each.
    for n in 0..STORED {
        memory
            .create_run(stored_run(n, 64 * 1024))
            .await
            .expect("created");
    }
    let (open, gate) = tokio::sync::watch::channel(false);
    let entered = Arc::new(AtomicU64::new(0));
    let store = GatedListing {
        inner: Arc::new(memory),
        gate,
        entered: Arc::clone(&entered),
    };
    let engine = Engine::builder()
        .store(Arc::new(store))
        .model(Arc::new(ScriptedModel::new()))
        .build()
        .await
        .expect("engine");
    let app = App::new(
        Executor::new(Arc::new(engine), ExecutorOptions::default()),
        ServerOptions::default(),
    );
    let served = support::Served::start(Arc::clone(&app)).await;
    let http = reqwest::Client::new();
    let path = format!("/runs?limit={MAX_PAGE_LIMIT}");
    let listings: Vec<_> = (0..AT_ONCE)
        .map(|_| {
            let (http, base, path) = (http.clone(), served.base.clone(), path.clone());
            tokio::spawn(async move { get(&http, &base, &path).await })
        })
        .collect();
    // Every listing has either reached the store or waits for room.
    let arrived = || {
        usize::try_from(entered.load(Ordering::SeqCst)).expect("fits") + app.listings().waiting()
    };
    tokio::time::timeout(PATIENCE, async {
        while arrived() < AT_ONCE {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("every listing arrives");
    let let_through = usize::try_from(entered.load(Ordering::SeqCst)).expect("fits");
    assert_eq!(
        let_through,
        MAX_LISTED_IN_FLIGHT / MAX_PAGE_LIMIT,
        "{AT_ONCE} listings of {MAX_PAGE_LIMIT} runs asked at once: as many reach the store as \
         the budget of {MAX_LISTED_IN_FLIGHT} summaries holds, the others wait"
    );
    open.send_replace(true);
    let answers = tokio::time::timeout(PATIENCE, futures_util::future::join_all(listings))
        .await
        .expect("every listing is answered");
    for answer in answers {
        let (status, body) = answer.expect("joined");
        assert_eq!(status, 200, "{body}");
        let page: Value = serde_json::from_str(&body).expect("JSON");
        let runs = page["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), MAX_PAGE_LIMIT);
        assert!(
            runs.iter().all(|run| run.get("flow").is_none()),
            "a page holds no flow"
        );
        assert!(body.len() < MAX_PAGE_LIMIT * 2_048, "{} bytes", body.len());
    }
    let peak = app.listings().peak_held();
    assert!(
        (MAX_PAGE_LIMIT..=MAX_LISTED_IN_FLIGHT).contains(&peak),
        "{AT_ONCE} listings of {MAX_PAGE_LIMIT} held {peak} summaries at once, past the \
         budget of {MAX_LISTED_IN_FLIGHT}"
    );
}
