//! Chaos: three `leasehold serve` processes share one throwaway PostgreSQL
//! and a few hundred runs. Mid-way one executor is SIGKILLed and another is
//! SIGSTOPped for longer than the run-lease TTL; the third takes their runs
//! over. The stopped one is then continued — a zombie: its next write is
//! refused by the fence, and it stops working on every run it lost and says
//! so. Then:
//!
//! - every run completed, exactly once (one `run_completed` in its log);
//! - no call of the non-idempotent tool was made twice for one key unless
//!   the run's log holds a `reconciliation_required` for that key (a person
//!   — this test — decided, looking at the tool server's own record);
//! - each run's log is in order with no gap: its positions are 1, 2, 3, …
//!   in the order of its `seq`;
//! - every run's fence only went up, as seen by a follower of the store's
//!   change feed, and each `run_resumed` names a higher fence than the one
//!   before.
//!
//! The model and the tool server are written here, and outlive the
//! executors: a model that streams slowly (each answer a few chunks apart)
//! and asks for `charge` (non-idempotent, slow) then `lookup` (idempotent,
//! slow, reporting progress) before answering; a tool server that records
//! every call it receives by idempotency key before working on it.

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;
#[path = "../../runtime/tests/support/records.rs"]
mod records;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use leasehold::store::{PostgresConfig, PostgresStore};
use leasehold::{
    ChangeSource, Event, EventKind, EventLog, RunQuery, RunRecord, RunStatus, RunStore,
    SnapshotStore, StoreChange, ToolCallRecord,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::watch;

/// Many executors, a database and their peers share the machine.
const PATIENCE: Duration = support::CROWDED_PATIENCE;

/// Runs posted.
const RUNS: usize = 240;

/// Each executor's limit of live runs.
const LIMIT: usize = 16;

/// The run-lease TTL of every executor.
const TTL: &str = "2s";

/// The API token (a posted flow may name its tool server only with one).
const TOKEN: &str = "chaos-test-token";

/// The root's system prompt, by which the model knows the root asks.
const ROOT_PROMPT: &str = "You settle orders: charge the order, look it up, then answer.";

/// The non-idempotent tool: it takes money.
const CHARGE: &str = "charge";

/// The idempotent tool: it reads.
const LOOKUP: &str = "lookup";

/// The pause between two chunks of a streamed answer.
const CHUNK_PAUSE: Duration = Duration::from_millis(40);

/// How long a tool call works (in steps of a tenth, each reported as
/// progress by `lookup`).
const TOOL_TIME: Duration = Duration::from_millis(300);

// ---------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------

/// An answer: text, or one tool call.
enum Reply {
    Text(String),
    Call {
        name: &'static str,
        arguments: Value,
    },
}

/// What the model says to a request: the watchdog is told to renew (the
/// evidence here is the streams' own chunks), a budget checkpoint to wrap
/// up, the root `charge`, then `lookup`, then its answer — by how many tool
/// results its conversation holds, so a run resumed anywhere goes on.
fn reply(request: &Value) -> Reply {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let system = messages
        .iter()
        .find(|m| m["role"] == "system")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    if system.starts_with("You are the watchdog") {
        return Reply::Text(
            json!({"verdict": "RENEW", "reason": "the stream is alive", "nudge": null}).to_string(),
        );
    }
    if system.starts_with("You are the budget checkpoint") {
        return Reply::Text(
            json!({"decision": "WRAP_UP", "reason": "three steps suffice", "confidence": 1.0})
                .to_string(),
        );
    }
    let task = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    match messages.iter().filter(|m| m["role"] == "tool").count() {
        0 => Reply::Call {
            name: CHARGE,
            arguments: json!({"order": task}),
        },
        1 => Reply::Call {
            name: LOOKUP,
            arguments: json!({"order": task}),
        },
        _ => Reply::Text("done".to_owned()),
    }
}

async fn chat_completions(body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = reply(&request);
    let id = format!("chatcmpl-{}", next_id());
    let chunk = |delta: Value, finish: Option<&str>| {
        let value = json!({
            "id": id, "object": "chat.completion.chunk", "created": 0, "model": "chaos",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        format!("data: {value}\n\n")
    };
    if request["stream"] != json!(true) {
        let (message, finish) = match &reply {
            Reply::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
            Reply::Call { name, arguments } => (
                json!({"role": "assistant", "content": null, "tool_calls": [{
                    "id": format!("call-{id}"), "type": "function",
                    "function": {"name": name, "arguments": arguments.to_string()},
                }]}),
                "tool_calls",
            ),
        };
        return axum::Json(json!({
            "id": id, "object": "chat.completion", "created": 0, "model": "chaos",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }))
        .into_response();
    }
    // Slow but alive: a few words, each a pause apart, then the call.
    let mut frames = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let words = ["Looking ", "at ", "the ", "order ", "now. "];
    let finish =
        match &reply {
            Reply::Text(text) => {
                // The text itself, in four pieces.
                let chars: Vec<char> = text.chars().collect();
                let step = chars.len().div_ceil(4).max(1);
                frames.extend(chars.chunks(step).map(|piece| {
                    chunk(json!({"content": piece.iter().collect::<String>()}), None)
                }));
                "stop"
            }
            Reply::Call { name, arguments } => {
                frames.extend(words.iter().map(|w| chunk(json!({"content": w}), None)));
                frames.push(chunk(
                json!({"tool_calls": [{"index": 0, "id": format!("call-{id}"), "type": "function",
                        "function": {"name": name, "arguments": arguments.to_string()}}]}),
                None,
            ));
                "tool_calls"
            }
        };
    frames.push(chunk(json!({}), Some(finish)));
    frames.push("data: [DONE]\n\n".to_owned());
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        for (i, frame) in frames.into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(CHUNK_PAUSE).await;
            }
            if sender.send(Ok(Bytes::from(frame))).await.is_err() {
                return;
            }
        }
    });
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(futures_util::stream::unfold(receiver, |mut r| async move {
            r.recv().await.map(|frame| (frame, r))
        })),
    )
        .into_response()
}

fn next_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed).to_string()
}

// ---------------------------------------------------------------------------
// The tool server.
// ---------------------------------------------------------------------------

/// Every call the tool server received, by tool and idempotency key, in
/// order of arrival, recorded before the call works.
#[derive(Default)]
struct Ledger {
    calls: Mutex<Vec<(String, String)>>,
}

impl Ledger {
    fn record(&self, tool: &str, key: &str) {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((tool.to_owned(), key.to_owned()));
    }

    /// How many calls of `tool` arrived with `key`.
    fn count(&self, tool: &str, key: &str) -> usize {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(t, k)| t == tool && k == key)
            .count()
    }
}

#[derive(Clone)]
struct Tools {
    ledger: Arc<Ledger>,
}

fn schema() -> JsonObject {
    let schema = json!({
        "type": "object",
        "properties": {"order": {"type": "string"}},
        "required": ["order"],
    });
    match schema {
        Value::Object(object) => object,
        _ => unreachable!("an object"),
    }
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("chaos-ledger", "1"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(CHARGE, "Charge an order. Takes money.", schema()).with_annotations(
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .idempotent(false),
            ),
            Tool::new(LOOKUP, "Look an order up.", schema())
                .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true)),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = context
            .meta
            .get(leasehold::tools::IDEMPOTENCY_KEY_META)
            .or_else(|| {
                request
                    .meta
                    .as_ref()
                    .and_then(|m| m.get(leasehold::tools::IDEMPOTENCY_KEY_META))
            })
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let tool = request.name.to_string();
        self.ledger.record(&tool, &key);
        let token = context.meta.get_progress_token();
        for tenth in 1..=10_u32 {
            tokio::select! {
                () = context.ct.cancelled() => {
                    return Err(ErrorData::internal_error("cancelled", None));
                }
                () = tokio::time::sleep(TOOL_TIME / 10) => {}
            }
            if tool == LOOKUP
                && let Some(token) = &token
            {
                let progress = ProgressNotificationParam::new(token.clone(), f64::from(tenth))
                    .with_total(10.0);
                let _ = context.peer.notify_progress(progress).await;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("{tool}: ok"))]).into())
    }
}

/// The model's base URL and the tool server's URL, served here.
async fn peers(ledger: Arc<Ledger>) -> (String, String) {
    let tools = Tools { ledger };
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_sse_keep_alive(Some(Duration::from_secs(5))),
    );
    let app = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .nest_service("/mcp", service);
    let addr = support::serve_peer(app).await;
    (format!("{addr}/v1"), format!("{addr}/mcp"))
}

// ---------------------------------------------------------------------------
// The executors.
// ---------------------------------------------------------------------------

/// A `leasehold serve` process, its base URL, its identity and every line
/// it wrote on stderr so far.
struct Executor {
    child: Child,
    base: String,
    owner_id: String,
    stderr: watch::Receiver<Vec<String>>,
}

impl Executor {
    async fn start(store: &str, model: &str, http: &reqwest::Client) -> Self {
        Self::start_with_ttl(store, model, http, TTL).await
    }

    /// [`Executor::start`] with a run-lease TTL of `ttl`.
    async fn start_with_ttl(store: &str, model: &str, http: &reqwest::Client, ttl: &str) -> Self {
        let mut child = support::leasehold_on_store(store)
            .model(model, "chaos")
            .api_token(TOKEN)
            .with_env("NO_COLOR", "1")
            .with_env("LEASEHOLD_SERVER_MAX_LIVE_RUNS", LIMIT.to_string())
            .with_env("LEASEHOLD_EXECUTOR_CLAIM_INTERVAL", "200ms")
            .with_env("LEASEHOLD_RUN_LEASE_TTL", ttl)
            .with_env("LEASEHOLD_RESUME_ON_BOOT", "true")
            .args(["serve", "--addr", "127.0.0.1:0", "--allow-flow-tools"])
            .stdout(Stdio::piped())
            // Read below: the check of the log.
            .stderr(Stdio::piped())
            .spawn()
            .expect("serve starts");
        let (lines, stderr) = watch::channel(Vec::new());
        let mut reader = BufReader::new(child.stderr.take().expect("piped")).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                lines.send_modify(|lines| lines.push(line));
            }
        });
        let base = support::served_base(&mut child, PATIENCE).await;
        let owner_id = support::owner_id(http, &base).await;
        Self {
            child,
            base,
            owner_id,
            stderr,
        }
    }

    fn signal(&self, signal: &str) {
        support::signal(&self.child, signal);
    }

    /// What it said on stderr that was not `INFO`, its first 60 lines.
    fn said(&self) -> String {
        let said: Vec<String> = self
            .stderr
            .borrow()
            .iter()
            .filter(|l| !l.contains(" INFO "))
            .take(60)
            .cloned()
            .collect();
        format!("{} said:\n{}", self.owner_id, said.join("\n"))
    }

    /// Posts run `i` of the settling flow, whose tools are at `tools`.
    async fn post_settle(&self, http: &reqwest::Client, tools: &str, i: usize) {
        let flow = json!({
            "name": "settle",
            "task": format!("order-{i}"),
            "system_prompt": ROOT_PROMPT,
            "max_steps": 6,
            "stream": true,
            "tools": [{"name": "ledger", "url": tools,
                       "idempotent": {CHARGE: false, LOOKUP: true}}],
        });
        let answer = http
            .post(format!("{}/runs", self.base))
            .json(&flow)
            .send()
            .await
            .expect("POST /runs");
        assert!(
            answer.status().is_success(),
            "{}",
            answer.text().await.unwrap_or_default()
        );
    }
}

// ---------------------------------------------------------------------------
// What the store says, followed through its change feed.
// ---------------------------------------------------------------------------

/// The runs as last read, and every fence that went down.
#[derive(Clone, Default)]
struct World {
    runs: BTreeMap<String, RunRecord>,
    fence_went_down: Vec<String>,
}

impl World {
    fn saw(&mut self, record: RunRecord) {
        if let Some(before) = self.runs.get(&record.run_id)
            && record.fence < before.fence
        {
            self.fence_went_down.push(format!(
                "{}: fence {} after {}",
                record.run_id, record.fence, before.fence
            ));
        }
        self.runs.insert(record.run_id.clone(), record);
    }

    fn completed(&self) -> usize {
        self.runs
            .values()
            .filter(|r| r.status == RunStatus::Completed)
            .count()
    }
}

/// Every run in the store.
async fn all_runs(store: &PostgresStore) -> Vec<RunRecord> {
    store
        .list_runs_page(&RunQuery::first(RUNS + 10))
        .await
        .expect("a page")
        .runs
}

/// Follows the store's changes into `world` until the test ends.
fn follow(store: Arc<PostgresStore>, world: watch::Sender<World>) {
    let mut changes = store.changes();
    tokio::spawn(async move {
        for record in all_runs(&store).await {
            world.send_modify(|w| w.saw(record));
        }
        while let Some(change) = changes.recv().await {
            match change {
                StoreChange::Run { run_id } => {
                    if let Ok(Some(record)) = store.load_run(&run_id).await {
                        world.send_modify(|w| w.saw(record));
                    }
                }
                StoreChange::Resync | StoreChange::Lagged { .. } => {
                    for record in all_runs(&store).await {
                        world.send_modify(|w| w.saw(record));
                    }
                }
                _ => {}
            }
        }
    });
}

/// Waits until `done` holds of the world, within [`PATIENCE`].
async fn until(world: &watch::Sender<World>, what: &str, done: impl Fn(&World) -> bool) -> World {
    let mut seen = world.subscribe();
    if let Ok(world) = tokio::time::timeout(PATIENCE, seen.wait_for(|w| done(w))).await {
        return world.expect("the follower lives").clone();
    }
    let mut by: BTreeMap<(String, String), usize> = BTreeMap::new();
    for record in world.borrow().runs.values() {
        let owner = record.owner_id.clone().unwrap_or_default();
        *by.entry((record.status.name().to_owned(), owner))
            .or_default() += 1;
    }
    panic!("timed out waiting until {what}; runs by status and owner: {by:?}");
}

/// The person: every run waiting for a reconciliation is decided by the
/// tool server's own record — a charge it received is marked done, one it
/// never received is retried with its key. A decision forwarded to an
/// executor that then stops is sent again after a while.
fn reconcile(
    store: Arc<PostgresStore>,
    world: watch::Sender<World>,
    ledger: Arc<Ledger>,
    http: reqwest::Client,
    base: String,
) {
    let mut seen = world.subscribe();
    tokio::spawn(async move {
        let mut sent: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                changed = seen.changed() => if changed.is_err() { return },
                _ = ticks.tick() => {}
            }
            let waiting: Vec<String> = seen
                .borrow_and_update()
                .runs
                .values()
                .filter(|r| r.status == RunStatus::ReconciliationRequired)
                .map(|r| r.run_id.clone())
                .collect();
            for run_id in waiting {
                if sent
                    .get(&run_id)
                    .is_some_and(|at| at.elapsed() < Duration::from_secs(3))
                {
                    continue;
                }
                let events = store.load_events(&run_id, 0).await.expect("events");
                let Some((tool, key)) = events.iter().rev().find_map(|e| match &e.kind {
                    EventKind::ReconciliationRequired {
                        tool,
                        idempotency_key,
                        ..
                    } => Some((tool.clone(), idempotency_key.clone())),
                    _ => None,
                }) else {
                    continue;
                };
                let body = if ledger.count(&tool, &key) > 0 {
                    json!({"key": key, "decision": "mark_done", "result": format!("{tool}: ok")})
                } else {
                    json!({"key": key, "decision": "retry"})
                };
                let _ = http
                    .post(format!("{base}/runs/{run_id}/reconcile"))
                    .json(&body)
                    .send()
                    .await;
                sent.insert(run_id, tokio::time::Instant::now());
            }
        }
    });
}

// ---------------------------------------------------------------------------
// The checks on each run's log.
// ---------------------------------------------------------------------------

/// What is wrong with one run's log and tool calls, if anything.
fn check_log(
    run_id: &str,
    events: &[Event],
    calls: &[ToolCallRecord],
    ledger: &Ledger,
) -> Vec<String> {
    let mut wrong = Vec::new();
    // In order, with no gap.
    for (i, event) in events.iter().enumerate() {
        let expected = u64::try_from(i).expect("fits") + 1;
        if event.position != expected {
            wrong.push(format!(
                "{run_id}: event {} ({}) is at position {}, expected {expected}",
                event.seq,
                event.kind.name(),
                event.position
            ));
            break;
        }
    }
    if events.windows(2).any(|w| w[0].seq >= w[1].seq) {
        wrong.push(format!("{run_id}: seqs not increasing"));
    }
    // Completed exactly once.
    let completions = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::RunCompleted { .. }))
        .count();
    if completions != 1 {
        wrong.push(format!("{run_id}: {completions} run_completed events"));
    }
    // Fences named by resumptions go up.
    let fences: Vec<u64> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RunResumed { fence, .. } => Some(*fence),
            _ => None,
        })
        .collect();
    if fences.windows(2).any(|w| w[0] >= w[1]) {
        wrong.push(format!("{run_id}: run_resumed fences {fences:?}"));
    }
    // The charge: made, and never twice without a person deciding. Its
    // record is written before the call is sent (events may be lost with
    // a killed executor's last moments; the record is not).
    let keys: BTreeSet<&str> = calls
        .iter()
        .filter(|c| c.tool == CHARGE)
        .map(|c| c.key.as_str())
        .collect();
    if keys.len() != 1 {
        wrong.push(format!("{run_id}: charge keys {keys:?}"));
    }
    for key in keys {
        let made = ledger.count(CHARGE, key);
        let reconciled = events.iter().any(|e| {
            matches!(&e.kind, EventKind::ReconciliationRequired { idempotency_key, .. }
                if idempotency_key == key)
        });
        if made == 0 {
            wrong.push(format!("{run_id}: charge {key} never reached the tool"));
        }
        if made > 1 && !reconciled {
            wrong.push(format!(
                "{run_id}: charge {key} made {made} times with no reconciliation_required"
            ));
        }
    }
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_executors_one_killed_one_stopped_past_its_ttl_complete_every_run_exactly_once() {
    let (cluster, url) = postgres::database().await;
    let store = Arc::new(
        PostgresStore::connect(PostgresConfig::new(&url))
            .await
            .expect("the store"),
    );
    let ledger = Arc::new(Ledger::default());
    let (model, tools) = peers(ledger.clone()).await;
    let http = support::authorized(TOKEN);
    // Applied by one executor before the others start: no migration race
    // is what this test is about.
    let survivor = Executor::start(&url, &model, &http).await;
    let mut killed = Executor::start(&url, &model, &http).await;
    let zombie = Executor::start(&url, &model, &http).await;
    let world = watch::Sender::new(World::default());
    follow(store.clone(), world.clone());
    reconcile(
        store.clone(),
        world.clone(),
        ledger.clone(),
        http.clone(),
        survivor.base.clone(),
    );

    let executors = [&survivor, &killed, &zombie];
    for i in 0..RUNS {
        executors[i % 3].post_settle(&http, &tools, i).await;
    }

    // Mid-way, with every executor busy: one is killed, one stopped.
    let holds = |w: &World, owner: &str| {
        w.runs
            .values()
            .filter(|r| r.status == RunStatus::Running && r.owner_id.as_deref() == Some(owner))
            .count()
    };
    until(
        &world,
        "a quarter of the runs completed, the zombie busy",
        |w| w.completed() >= RUNS / 4 && holds(w, &zombie.owner_id) > 0,
    )
    .await;
    killed.signal("-KILL");
    zombie.signal("-STOP");
    killed.child.wait().await.expect("reaped");
    // Read after the signals: a write either had landed or never lands —
    // but for a statement already sent, which the server still commits.
    let mid: BTreeMap<String, RunRecord> = all_runs(&store)
        .await
        .into_iter()
        .map(|r| (r.run_id.clone(), r))
        .collect();
    let held_by = |owner: &str| -> BTreeMap<String, u64> {
        mid.values()
            .filter(|r| r.status == RunStatus::Running && r.owner_id.as_deref() == Some(owner))
            .map(|r| (r.run_id.clone(), r.fence))
            .collect()
    };
    let killed_with = held_by(&killed.owner_id);
    let stopped_with = held_by(&zombie.owner_id);

    // Its runs are taken over — each claimed with a higher fence — long
    // after its lease expired (or ended by a write it had already sent);
    // then it is continued.
    let taken_over = |w: &World, id: &str, fence: u64| {
        let record = &w.runs[id];
        record.fence > fence && record.owner_id.as_deref() != Some(&zombie.owner_id)
    };
    let over = until(
        &world,
        "every run of the stopped executor was taken over",
        |w| {
            stopped_with.iter().all(|(id, fence)| {
                taken_over(w, id, *fence)
                    || (w.runs[id].status.is_terminal() && w.runs[id].fence == *fence)
            })
        },
    )
    .await;
    zombie.signal("-CONT");
    let lost_runs: Vec<String> = stopped_with
        .iter()
        .filter(|(id, fence)| taken_over(&over, id, **fence))
        .map(|(id, _)| id.clone())
        .collect();
    assert!(
        !lost_runs.is_empty(),
        "the zombie lost no run: {stopped_with:?}"
    );

    // The zombie's next write on each of them is refused, and it says so.
    let mut said = zombie.stderr.clone();
    let lost = tokio::time::timeout(
        PATIENCE,
        said.wait_for(|lines| {
            lost_runs.iter().all(|id| {
                lines.iter().any(|l| {
                    l.contains("run lost") && l.contains(id.as_str()) && l.contains("is stale")
                })
            })
        }),
    )
    .await
    .map(|lines| lines.is_ok());
    assert!(
        lost == Ok(true),
        "the zombie says it lost each of {lost_runs:?}; it said:\n{}",
        said.borrow().join("\n")
    );

    // Every run ends.
    let done = until(&world, "every run ended", |w| {
        w.runs.len() == RUNS && w.runs.values().all(|r| r.status.is_terminal())
    })
    .await;
    let mut wrong: Vec<String> = done.fence_went_down.clone();
    for record in done.runs.values() {
        if record.status != RunStatus::Completed || record.answer.as_deref() != Some("done") {
            wrong.push(format!(
                "{}: {:?} {:?} {:?}",
                record.run_id, record.status, record.reason, record.answer
            ));
        }
        let events = store.load_events(&record.run_id, 0).await.expect("events");
        let calls = store
            .load_tool_calls(&record.run_id)
            .await
            .expect("tool calls");
        let problems = check_log(&record.run_id, &events, &calls, &ledger);
        if !problems.is_empty() && wrong.len() < 40 {
            let log: Vec<String> = events
                .iter()
                .map(|e| format!("  {} {} {} {}", e.position, e.seq, e.path, e.kind.name()))
                .collect();
            wrong.push(format!("{:?}\n{}", record, log.join("\n")));
        }
        wrong.extend(problems);
    }
    if !wrong.is_empty() {
        wrong.extend([&survivor, &killed, &zombie].map(Executor::said));
    }
    assert!(
        wrong.is_empty(),
        "{} problems:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // The runs the killed executor held were finished by others (but for
    // one it had already sent its end for).
    let finished_by_others = killed_with
        .iter()
        .filter(|(id, fence)| {
            let record = &done.runs[id.as_str()];
            record.fence > **fence && record.owner_id.as_deref() != Some(&killed.owner_id)
        })
        .count();
    assert!(
        finished_by_others > 0,
        "no run of the killed executor was taken over: {killed_with:?}"
    );
    drop((survivor, killed, zombie));
    drop(cluster);
}

/// A process stopped in the middle of its transaction on a run's row (here:
/// a transaction left open) does not stop the sweep: the run it holds is
/// skipped, every other expired run is marked orphaned at once, and the
/// held one is marked by the first sweep after its holder lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_sweep_skips_a_run_whose_row_another_transaction_holds() {
    let (cluster, url) = postgres::database().await;
    let store = PostgresStore::connect(PostgresConfig::new(&url))
        .await
        .expect("the store");
    for run_id in ["run-held", "run-free"] {
        store
            .create_run(records::run_record(
                run_id,
                Some("stopped"),
                1,
                1_000,
                RunStatus::Running,
            ))
            .await
            .expect("created");
    }
    let (mut holder, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("a connection");
    tokio::spawn(connection);
    let held = holder.transaction().await.expect("a transaction");
    held.query(
        "SELECT 1 FROM runs WHERE run_id = 'run-held' FOR UPDATE",
        &[],
    )
    .await
    .expect("locked");

    let swept = tokio::time::timeout(Duration::from_secs(20), store.reconcile_orphans(2_000))
        .await
        .expect("the sweep does not wait for the held row")
        .expect("swept");
    assert_eq!(swept, ["run-free"]);

    held.rollback().await.expect("let go");
    let swept = store.reconcile_orphans(2_000).await.expect("swept");
    assert_eq!(swept, ["run-held"]);
    drop(cluster);
}

// ---------------------------------------------------------------------------
// The database goes away.
// ---------------------------------------------------------------------------

/// Runs posted to the two executors that ride out a database gone away.
const AWAY_RUNS: usize = 32;

/// The run-lease TTL of the executors that ride out a database gone away:
/// longer than what the database itself takes to end a session held in a
/// transaction (5 s) once it is back, less what the absence lasts.
const AWAY_TTL: &str = "4s";

/// How long the database stays away: longer than [`AWAY_TTL`], shorter
/// than `store.write_retry_for` (30 s).
const AWAY_FOR: Duration = Duration::from_secs(6);

/// Two executors on `executors_url` with a TTL of [`AWAY_TTL`]; `AWAY_RUNS`
/// runs posted. Once a
/// quarter of them completed, `away` takes the database away and brings it
/// back. Then every run completes exactly once on the executor that started
/// it — no lease was taken over (every fence is still 1, no log has
/// `run_resumed`: the database's absence is the runtime's time, not the
/// work's), every log is whole, every charge was made once and no call
/// needed a person — and each executor's `/health` says the store is `ok`.
async fn ride_out<F, A>(executors_url: &str, direct_url: &str, away: F)
where
    F: FnOnce(Vec<String>, reqwest::Client) -> A,
    A: std::future::Future<Output = ()>,
{
    let store = Arc::new(
        PostgresStore::connect(PostgresConfig::new(direct_url))
            .await
            .expect("the store"),
    );
    let ledger = Arc::new(Ledger::default());
    let (model, tools) = peers(ledger.clone()).await;
    let http = support::authorized(TOKEN);
    let a = Executor::start_with_ttl(executors_url, &model, &http, AWAY_TTL).await;
    let b = Executor::start_with_ttl(executors_url, &model, &http, AWAY_TTL).await;
    let world = watch::Sender::new(World::default());
    follow(store.clone(), world.clone());
    for i in 0..AWAY_RUNS {
        [&a, &b][i % 2].post_settle(&http, &tools, i).await;
    }
    until(&world, "a quarter of the runs completed", |w| {
        w.completed() >= AWAY_RUNS / 4
    })
    .await;
    away(vec![a.base.clone(), b.base.clone()], http.clone()).await;
    let done = until(&world, "every run ended", |w| {
        w.runs.len() == AWAY_RUNS && w.runs.values().all(|r| r.status.is_terminal())
    })
    .await;
    let mut wrong: Vec<String> = done.fence_went_down.clone();
    for record in done.runs.values() {
        let events = store.load_events(&record.run_id, 0).await.expect("events");
        if record.status != RunStatus::Completed || record.fence != 1 {
            let log: Vec<String> = events
                .iter()
                .map(|e| format!("{} {} {}", e.position, e.seq, e.kind.name()))
                .collect();
            let said: Vec<String> = [&a, &b]
                .iter()
                .flat_map(|x| x.stderr.borrow().clone())
                .filter(|l| l.contains(&record.run_id))
                .take(20)
                .collect();
            wrong.push(format!(
                "{}: {:?} fence {} {:?}\n  log: {}\n  said:\n{}",
                record.run_id,
                record.status,
                record.fence,
                record.reason,
                log.join(", "),
                said.join("\n")
            ));
        }
        let calls = store
            .load_tool_calls(&record.run_id)
            .await
            .expect("tool calls");
        wrong.extend(check_log(&record.run_id, &events, &calls, &ledger));
        for event in &events {
            if matches!(
                event.kind,
                EventKind::RunResumed { .. } | EventKind::ReconciliationRequired { .. }
            ) {
                wrong.push(format!("{}: {}", record.run_id, event.kind.name()));
            }
        }
        for call in calls.iter().filter(|c| c.tool == CHARGE) {
            let made = ledger.count(CHARGE, &call.key);
            if made != 1 {
                wrong.push(format!("{}: charge made {made} times", record.run_id));
            }
        }
    }
    if !wrong.is_empty() {
        wrong.extend([&a, &b].map(Executor::said));
    }
    assert!(
        wrong.is_empty(),
        "{} problems:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    for executor in [&a, &b] {
        let health = store_said(&http, &executor.base).await;
        assert_eq!(health, "ok", "{}", executor.base);
    }
}

/// What an executor's `/health` says of its store.
async fn store_said(http: &reqwest::Client, base: &str) -> String {
    let health: Value = http
        .get(format!("{base}/health"))
        .send()
        .await
        .expect("GET /health")
        .json()
        .await
        .expect("JSON");
    health["store"].as_str().unwrap_or_default().to_owned()
}

/// Waits until every executor's `/health` says the store is away and its
/// `/metrics` has `leasehold_store_up 0`.
async fn until_seen_away(bases: &[String], http: &reqwest::Client) {
    let seen = async {
        for base in bases {
            loop {
                let metrics = http
                    .get(format!("{base}/metrics"))
                    .send()
                    .await
                    .expect("GET /metrics")
                    .text()
                    .await
                    .expect("text");
                if store_said(http, base).await == "away"
                    && metrics.contains("\nleasehold_store_up 0\n")
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    tokio::time::timeout(PATIENCE, seen)
        .await
        .expect("every executor says the store is away");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_ride_out_their_database_connections_cut_then_held_by_a_proxy() {
    let cluster = postgres::own_cluster().await;
    let url = cluster.database();
    let proxy = support::proxy::Proxy::start(cluster.port()).await;
    let through = url.replace(
        &format!(":{}/", cluster.port()),
        &format!(":{}/", proxy.port()),
    );
    let proxy = &proxy;
    ride_out(&through, &url, |bases, http| async move {
        // Cut: every connection closed, new ones refused.
        proxy.set(support::proxy::Mode::Cut);
        let cut = tokio::time::Instant::now();
        until_seen_away(&bases, &http).await;
        tokio::time::sleep(AWAY_FOR.saturating_sub(cut.elapsed())).await;
        proxy.set(support::proxy::Mode::Relay);
        // Held: connections open, nothing relayed.
        tokio::time::sleep(Duration::from_secs(1)).await;
        proxy.set(support::proxy::Mode::Hold);
        let held = tokio::time::Instant::now();
        until_seen_away(&bases, &http).await;
        tokio::time::sleep(AWAY_FOR.saturating_sub(held.elapsed())).await;
        proxy.set(support::proxy::Mode::Relay);
    })
    .await;
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_ride_out_their_database_restarted_mid_run() {
    let cluster = Arc::new(postgres::own_cluster().await);
    let url = cluster.database();
    let restarting = cluster.clone();
    ride_out(&url, &url, |_, _| async move {
        // Down for longer than the run-lease TTL: every lease in the
        // database has expired by the time it is back.
        tokio::task::spawn_blocking(move || restarting.restart_after(AWAY_FOR))
            .await
            .expect("restarted");
    })
    .await;
    drop(cluster);
}
