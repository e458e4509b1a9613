//! `GET /metrics` over a real socket: the Prometheus text parses, the
//! token guards it like the rest of the API, and its figures are what the
//! runs' event logs and the store say.
//!
//! These tests run on the real clock (the API is served over loopback) and
//! wait on conditions, never for time to pass.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use leasehold::{
    CallOutcome, Engine, EngineConfig, Event, EventKind, MemoryStore, RunRecord, RunStatus,
    testing::{ScriptedEvaluator, ScriptedModel, ScriptedTools, ToolAct, Turn},
};
use leasehold::{EventLog, RunStore};
use leasehold_server::metrics::{MeteredStore, Metrics};
use leasehold_server::{App, ServerOptions};
use serde_json::{Value, json};
use support::PATIENCE;

const TOKEN: &str = "m3trics";

/// One sample: its name and labels.
type Series = (String, BTreeMap<String, String>);

/// A scrape, parsed: every sample, and the names that have a `# HELP`.
#[derive(Debug, Default)]
struct Scrape {
    samples: HashMap<Series, f64>,
    helped: Vec<String>,
}

impl Scrape {
    /// Parses the Prometheus text format, strictly: every line is a
    /// `# HELP` / `# TYPE` comment or `name{labels} value`.
    fn parse(text: &str) -> Self {
        let mut scrape = Self::default();
        for line in text.lines() {
            if let Some(comment) = line.strip_prefix("# ") {
                let mut words = comment.splitn(3, ' ');
                let (Some(what), Some(name), Some(_)) = (words.next(), words.next(), words.next())
                else {
                    panic!("a comment that is not HELP or TYPE: {line:?}");
                };
                assert!(what == "HELP" || what == "TYPE", "{line:?}");
                if what == "HELP" {
                    scrape.helped.push(name.to_owned());
                }
                continue;
            }
            assert!(!line.trim().is_empty(), "an empty line in the scrape");
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("not `name value`: {line:?}"));
            let value: f64 = value
                .parse()
                .unwrap_or_else(|e| panic!("{line:?}: the value is not a number: {e}"));
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, parse_labels(labels, line)),
                None => (series, BTreeMap::new()),
            };
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "a bad metric name in {line:?}"
            );
            let previous = scrape.samples.insert((name.to_owned(), labels), value);
            assert!(previous.is_none(), "a series twice: {line:?}");
        }
        scrape
    }

    /// The value of `name` with exactly `labels`, 0 when absent (a family
    /// member not yet created).
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.samples
            .get(&(name.to_owned(), labels))
            .copied()
            .unwrap_or(0.0)
    }

    /// The sum of `name` over every label set.
    fn total(&self, name: &str) -> f64 {
        self.samples
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, v)| v)
            .sum()
    }
}

/// `k="v",k="v"}` (the text after `{`), parsed.
fn parse_labels(text: &str, line: &str) -> BTreeMap<String, String> {
    let body = text
        .strip_suffix('}')
        .unwrap_or_else(|| panic!("labels not closed: {line:?}"));
    let mut labels = BTreeMap::new();
    for pair in body.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .unwrap_or_else(|| panic!("a label without `=`: {line:?}"));
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_else(|| panic!("a label value not quoted: {line:?}"));
        labels.insert(key.to_owned(), value.to_owned());
    }
    labels
}

/// What counts `name` of a family, as in the scrape: a counter's samples
/// end in `_total`, a histogram's in `_bucket`, `_sum` and `_count`, and
/// the `# HELP` line names the family.
fn family_of(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name)
}

struct Served {
    base: String,
    http: reqwest::Client,
    store: MemoryStore,
    _served: support::Served,
}

impl Served {
    /// A server with a token over an engine on `store` (its writes timed)
    /// whose root loop plays `turns`, with a `search` tool that answers at
    /// once and a `charge` tool that hangs until the evaluator escalates.
    async fn start(turns: Vec<Turn>) -> Self {
        let store = MemoryStore::new();
        let metrics = Arc::new(Metrics::new());
        let tools = ScriptedTools::new()
            .tool(
                "search",
                Some(true),
                [ToolAct::returns("a hit", Duration::from_millis(10))],
            )
            .tool("charge", Some(false), [ToolAct::Hang]);
        let mut config = EngineConfig::default();
        config.supervision.lease.tool_call = Duration::from_millis(100);
        config.prices =
            leasehold::Prices::new([("m".to_owned(), leasehold::Price::per_million(2.0, 8.0))]);
        let engine = Engine::builder()
            .config(config)
            .store(Arc::new(store.clone()))
            .wrap_store(|store| MeteredStore::wrap(store, &metrics))
            .model(Arc::new(
                ScriptedModel::new().named("m").script("run", turns),
            ))
            .evaluator(Arc::new(ScriptedEvaluator::always("ESCALATE")))
            .tool_server("local", Arc::new(tools))
            .build()
            .await
            .expect("engine");
        let options = ServerOptions {
            token: Some(TOKEN.to_owned()),
            ..ServerOptions::default()
        };
        let app = App::with_metrics(
            leasehold::executor::Executor::new(
                Arc::new(engine),
                leasehold::executor::ExecutorOptions::default(),
            ),
            options,
            metrics,
        );
        let served = support::Served::start(app).await;
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {TOKEN}").parse().expect("a header"),
        );
        Self {
            base: served.base.clone(),
            http: reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .expect("client"),
            store,
            _served: served,
        }
    }

    async fn start_run(&self, task: &str) -> String {
        let flow = json!({
            "name": "shop", "task": task, "max_steps": 6, "tools": [{"name": "local"}]
        });
        let response = self
            .http
            .post(format!("{}/runs", self.base))
            .json(&flow)
            .send()
            .await
            .expect("POST /runs");
        assert_eq!(response.status(), 201);
        let body: Value = response.json().await.expect("JSON");
        body["run_id"].as_str().expect("run id").to_owned()
    }

    async fn cancel(&self, run_id: &str) {
        let response = self
            .http
            .post(format!("{}/runs/{run_id}/cancel", self.base))
            .header("content-type", "application/json")
            .body(r#"{"reason": "enough"}"#)
            .send()
            .await
            .expect("cancel");
        assert_eq!(response.status(), 200);
    }

    async fn status(&self, run_id: &str) -> String {
        let view: Value = self
            .http
            .get(format!("{}/runs/{run_id}", self.base))
            .send()
            .await
            .expect("GET /runs/{id}")
            .json()
            .await
            .expect("JSON");
        view["status"].as_str().unwrap_or_default().to_owned()
    }

    /// Asks until the run's status is `wanted`.
    async fn wait_status(&self, run_id: &str, wanted: &str) {
        tokio::time::timeout(PATIENCE, async {
            while self.status(run_id).await != wanted {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("run {run_id} never became {wanted}"));
    }

    async fn scrape(&self) -> Scrape {
        let response = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("GET /metrics");
        assert_eq!(response.status(), 200);
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        Scrape::parse(&response.text().await.expect("text"))
    }

    /// Scrapes until `done` holds of the scrape.
    async fn scrape_until(&self, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
        tokio::time::timeout(PATIENCE, async {
            loop {
                let scrape = self.scrape().await;
                if done(&scrape) {
                    return scrape;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the metrics never showed {what}"))
    }

    /// The stored log of each run.
    async fn logs(&self, runs: &[&str]) -> Vec<Event> {
        let mut events = Vec::new();
        for run_id in runs {
            events.extend(self.store.load_events(run_id, 0).await.expect("log"));
        }
        events
    }
}

fn outcome_name(outcome: CallOutcome) -> String {
    serde_json::to_value(outcome)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .expect("a snake_case name")
}

fn count<K: std::hash::Hash + Eq>(keys: impl Iterator<Item = K>) -> HashMap<K, f64> {
    let mut counts = HashMap::new();
    for key in keys {
        *counts.entry(key).or_insert(0.0) += 1.0;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_need_the_token_and_match_the_event_logs_and_the_store() {
    let served = Served::start(vec![
        // Run 1: a search, then an answer.
        Turn::tools([("search", json!({"q": "shoes"}))]),
        Turn::answer("found shoes"),
        // Run 2: a charge that hangs until the evaluator escalates.
        Turn::tools([("charge", json!({"amount": 5}))]),
        // Run 3: a model call that hangs until the run is cancelled.
        Turn::hang(),
    ])
    .await;

    // Without the token, refused like the rest of the API.
    let refused = reqwest::get(format!("{}/metrics", served.base))
        .await
        .expect("sent");
    assert_eq!(refused.status(), 401);
    let body: Value = refused.json().await.expect("a JSON error");
    assert_eq!(body["error"]["code"], "unauthorized");

    // A run of another executor, in the store but not run here.
    served
        .store
        .create_run(RunRecord {
            trace_parent: None,
            tenant: None,
            run_id: "elsewhere".to_owned(),
            flow: json!({"name": "shop", "task": "t"}),
            status: RunStatus::Orphaned,
            owner_id: Some("another-executor".to_owned()),
            fence: 3,
            lease_expires_at_ms: 0,
            reason: Some("run orphaned: executor lease expired".to_owned()),
            answer: None,
            pause: None,
            created_at_ms: 1,
            updated_at_ms: 2,
            fork: None,
        })
        .await
        .expect("created");

    let first = served.start_run("buy shoes").await;
    served.wait_status(&first, "completed").await;
    let second = served.start_run("pay").await;
    served.wait_status(&second, "waiting_human").await;
    served.cancel(&second).await;
    served.wait_status(&second, "cancelled").await;

    // Run 3 hangs in its model call, under a lease, followed by a stream.
    let third = served.start_run("think").await;
    let scrape = served
        .scrape_until("the hanging model call's lease", |s| {
            s.get("leasehold_leases_live", &[]) == 1.0
        })
        .await;
    assert_eq!(scrape.get("leasehold_event_streams_open", &[]), 0.0);
    let stream = served
        .http
        .get(format!("{}/runs/{third}/events", served.base))
        .send()
        .await
        .expect("the stream opens");
    assert_eq!(stream.status(), 200);
    served
        .scrape_until("the open event stream", |s| {
            s.get("leasehold_event_streams_open", &[]) == 1.0
        })
        .await;
    served.cancel(&third).await;
    served.wait_status(&third, "cancelled").await;
    // The stream ends with the run; reading it to its end closes it.
    let mut body = stream.bytes_stream();
    let mut text = String::new();
    while let Some(Ok(chunk)) = body.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("event: end"), "{text}");

    // Once the feed has counted every event the runs logged, every figure
    // is the logs' and the store's.
    let runs = [first.as_str(), second.as_str(), third.as_str()];
    let last_seen = std::sync::Mutex::new(String::new());
    let (logged, scrape) = tokio::time::timeout(PATIENCE, async {
        loop {
            let logged = served.logs(&runs).await;
            let scrape = served.scrape().await;
            let logged_count = f64::from(u32::try_from(logged.len()).expect("a few events"));
            let seen = (
                scrape.total("leasehold_events_total"),
                scrape.get("leasehold_event_streams_open", &[]),
                scrape.get("leasehold_leases_live", &[]),
            );
            if seen == (logged_count, 0.0, 0.0) {
                return (logged, scrape);
            }
            *last_seen.lock().expect("not poisoned") = format!(
                "{logged_count} events logged; counted, open streams, live leases: {seen:?}; \
                 logged kinds {:?}; counted {:?}",
                count(logged.iter().map(|e| e.kind.name())),
                scrape.samples
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the metrics counted every logged event, no stream open, no lease live: last {}",
            last_seen.lock().expect("not poisoned")
        )
    });

    // Every sample is a leasehold metric with a HELP line.
    for (name, _) in scrape.samples.keys() {
        assert!(name.starts_with("leasehold_"), "{name}");
        assert!(
            scrape.helped.iter().any(|h| h == family_of(name)),
            "{name} has no # HELP"
        );
    }
    assert_eq!(scrape.get("leasehold_events_missed_total", &[]), 0.0);

    // Events by kind.
    for (kind, n) in count(logged.iter().map(|e| e.kind.name())) {
        assert_eq!(
            scrape.get("leasehold_events_total", &[("kind", kind)]),
            n,
            "{kind}"
        );
    }

    // Verdicts by kind, decider and lease kind; expiries by lease kind.
    let verdicts = count(logged.iter().filter_map(|e| match &e.kind {
        EventKind::Verdict(r) => Some((
            r.verdict.as_str().to_lowercase(),
            r.decided_by.as_str(),
            r.lease_kind.as_str(),
        )),
        _ => None,
    }));
    assert!(
        verdicts.contains_key(&("escalate".to_owned(), "evaluator", "tool_call")),
        "the charge was escalated by the evaluator: {verdicts:?}"
    );
    for ((verdict, decided_by, lease_kind), n) in &verdicts {
        let labels = [
            ("verdict", verdict.as_str()),
            ("decided_by", *decided_by),
            ("lease_kind", *lease_kind),
        ];
        assert_eq!(
            scrape.get("leasehold_verdicts_total", &labels),
            *n,
            "{labels:?}"
        );
    }
    assert_eq!(
        scrape.total("leasehold_verdicts_total"),
        verdicts.values().sum::<f64>()
    );
    let expiries = count(logged.iter().filter_map(|e| match &e.kind {
        EventKind::Wait { lease_kind, .. } => Some(lease_kind.as_str()),
        _ => None,
    }));
    for (lease_kind, n) in &expiries {
        let labels = [("lease_kind", *lease_kind)];
        assert_eq!(scrape.get("leasehold_lease_expiries_total", &labels), *n);
    }

    // Evaluator calls: those the verdicts record.
    let evaluated = logged
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::Verdict(r) if r.evaluator.is_some()))
        .count();
    assert!(evaluated >= 1);
    assert_eq!(
        scrape.get(
            "leasehold_evaluator_call_duration_seconds_count",
            &[("consumer", "engine.watchdog"), ("outcome", "answered")]
        ),
        f64::from(u32::try_from(evaluated).expect("a few"))
    );

    // Tokens and money: the model calls' usage, as the logs record it.
    let (mut input, mut output, mut spent) = (0.0, 0.0, 0.0);
    for event in &logged {
        if let EventKind::ModelCallFinished {
            usage, spent: cost, ..
        } = &event.kind
        {
            input += f64::from(u32::try_from(usage.input_tokens).expect("a few"));
            output += f64::from(u32::try_from(usage.output_tokens).expect("a few"));
            spent += cost.expect("the model has a price");
        }
    }
    assert!(input > 0.0 && output > 0.0);
    let tokens = |direction| {
        scrape.get(
            "leasehold_tokens_total",
            &[
                ("role", "model"),
                ("direction", direction),
                ("source", "reported"),
            ],
        )
    };
    assert_eq!((tokens("input"), tokens("output")), (input, output));
    let counted = scrape.get("leasehold_spent_total", &[("role", "model")]);
    assert!((counted - spent).abs() < 1e-9, "{counted} against {spent}");

    // Model and tool calls by outcome, each timed.
    let model_calls = count(logged.iter().filter_map(|e| match &e.kind {
        EventKind::ModelCallFinished { outcome, .. } => Some(outcome_name(*outcome)),
        _ => None,
    }));
    let tool_calls = count(logged.iter().filter_map(|e| match &e.kind {
        EventKind::ToolCallFinished { outcome, .. } => Some(outcome_name(*outcome)),
        _ => None,
    }));
    assert_eq!(model_calls.get("ok"), Some(&3.0), "{model_calls:?}");
    assert_eq!(tool_calls.get("ok"), Some(&1.0), "{tool_calls:?}");
    assert_eq!(tool_calls.get("escalated"), Some(&1.0), "{tool_calls:?}");
    for (metric, calls) in [("model_call", &model_calls), ("tool_call", &tool_calls)] {
        for (outcome, n) in calls {
            let labels = [("outcome", outcome.as_str())];
            let counted = format!("leasehold_{metric}s_total");
            let timed = format!("leasehold_{metric}_duration_seconds_count");
            assert_eq!(scrape.get(&counted, &labels), *n, "{counted} {outcome}");
            assert_eq!(scrape.get(&timed, &labels), *n, "{timed} {outcome}");
        }
        let counted = format!("leasehold_{metric}s_total");
        assert_eq!(scrape.total(&counted), calls.values().sum::<f64>());
    }

    // Runs by status: the store's, the run this server never ran included.
    let stored = count(
        served
            .store
            .list_runs()
            .await
            .expect("runs")
            .iter()
            .map(|r| r.status),
    );
    for (status, n) in &stored {
        let name = serde_json::to_value(status).expect("a status");
        let labels = [("status", name.as_str().expect("a name"))];
        assert_eq!(scrape.get("leasehold_runs", &labels), *n, "{labels:?}");
    }
    assert_eq!(scrape.get("leasehold_runs", &[("status", "orphaned")]), 1.0);
    assert_eq!(
        scrape.get("leasehold_runs", &[("status", "completed")]),
        1.0
    );
    assert_eq!(
        scrape.get("leasehold_runs", &[("status", "cancelled")]),
        2.0
    );
    assert_eq!(scrape.get("leasehold_runs", &[("status", "running")]), 0.0);

    // Store writes, timed: the three runs created through the engine (the
    // foreign one was written beside it), and their logs appended.
    assert_eq!(
        scrape.get(
            "leasehold_store_write_duration_seconds_count",
            &[("op", "create_run")]
        ),
        3.0
    );
    assert!(
        scrape.get(
            "leasehold_store_write_duration_seconds_count",
            &[("op", "append_events")]
        ) >= 1.0
    );
}
