//! The API's OpenAPI document (`GET /openapi.json`) against the API
//! itself: the document is OpenAPI 3.1 and served without a key; every
//! route the router has is in it, with exactly the methods the router
//! takes; and every answer the API gives, success or refusal, over every
//! route, has a status the document lists for its path and method and a
//! JSON body its schema (JSON Schema 2020-12, `$ref`s into the document's
//! components) accepts.
//!
//! These tests run on the real clock over loopback and wait on the runs'
//! statuses, never for time to pass.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use leasehold::run_limits::RunLimits;
use leasehold::testing::{ScriptedModel, ScriptedTools, ToolAct, Turn};
use leasehold::{Engine, EngineConfig};
use leasehold_server::ServerOptions;
use reqwest::Method;
use serde_json::{Value, json};
use support::client::{Server, a_charge_waiting_for_a_decision, searching_flow};

/// The server's token in these tests.
const TOKEN: &str = "the-operator-token";

/// The methods a route may take (HEAD goes with GET).
const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
];

/// The document as served, and what checks answers against it.
struct Document {
    doc: Value,
    /// Every (path template, method) an answer was checked for.
    driven: BTreeSet<(String, String)>,
}

/// One answer, read whole.
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

impl Document {
    async fn fetch(server: &Server) -> Self {
        // No key, on a server with a token: the document holds no data.
        let response = server
            .http
            .get(format!("{}/openapi.json", server.base))
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 200, "GET /openapi.json without a key");
        let doc: Value = response.json().await.expect("the document is JSON");
        Self {
            doc,
            driven: BTreeSet::new(),
        }
    }

    /// The path template of the document that `path` (without its query)
    /// falls under: the one with the most literal segments.
    fn template(&self, path: &str) -> Option<String> {
        let path = path.split('?').next().unwrap_or_default();
        let segments: Vec<&str> = path.split('/').collect();
        let paths = self.doc["paths"].as_object()?;
        paths
            .keys()
            .filter(|template| {
                let parts: Vec<&str> = template.split('/').collect();
                parts.len() == segments.len()
                    && parts
                        .iter()
                        .zip(&segments)
                        .all(|(t, s)| t.starts_with('{') || t == s)
            })
            .max_by_key(|template| template.split('/').filter(|t| !t.starts_with('{')).count())
            .cloned()
    }

    /// Checks `answer` to `method path` against the document: its status
    /// is listed for the path and method, its content type is one the
    /// document gives that status, and a JSON body validates against the
    /// schema given. Panics naming the path, status and what is wrong.
    fn check(&mut self, method: &Method, path: &str, answer: &Answer) {
        let template = self
            .template(path)
            .unwrap_or_else(|| panic!("{method} {path}: no path of the document matches it"));
        let verb = method.as_str().to_ascii_lowercase();
        self.driven.insert((template.clone(), verb.clone()));
        let operation = &self.doc["paths"][&template][&verb];
        assert!(
            operation.is_object(),
            "{method} {path}: the document has no {verb} for {template}"
        );
        let status = answer.status.to_string();
        let response = &operation["responses"][&status];
        assert!(
            response.is_object(),
            "{method} {path}: the answer's status {status} is not documented for {verb} \
             {template} (documented: {:?}); body: {}",
            operation["responses"]
                .as_object()
                .map(|r| r.keys().cloned().collect::<Vec<_>>()),
            answer.body
        );
        let Some(content) = response["content"].as_object() else {
            assert!(
                answer.body.is_empty(),
                "{method} {path} {status}: a body the document does not give: {}",
                answer.body
            );
            return;
        };
        let media = answer
            .content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let documented = content
            .iter()
            .find(|(name, _)| name.split(';').next().unwrap_or_default().trim() == media)
            .map(|(_, value)| value)
            .unwrap_or_else(|| {
                panic!(
                    "{method} {path} {status}: content type {:?} is not documented (documented: \
                     {:?})",
                    answer.content_type,
                    content.keys().collect::<Vec<_>>()
                )
            });
        if media == "text/event-stream" {
            self.check_frames(method, path, &status, &answer.body);
            return;
        }
        if media != "application/json" {
            return;
        }
        let instance: Value = serde_json::from_str(&answer.body).unwrap_or_else(|e| {
            panic!(
                "{method} {path} {status}: the body is not JSON ({e}): {}",
                answer.body
            )
        });
        self.validate(method, path, &status, &documented["schema"], &instance);
    }

    /// An event stream's frames: each event's `data` (a frame with an
    /// `id`) validates against the document's `Event`, each `text` frame's
    /// against `TextDelta`.
    fn check_frames(&self, method: &Method, path: &str, status: &str, body: &str) {
        let event = json!({"$ref": "#/components/schemas/Event"});
        let delta = json!({"$ref": "#/components/schemas/TextDelta"});
        let mut checked = 0;
        for frame in body.split("\n\n") {
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .map(|v| v.trim_start().to_owned())
            };
            let Some(data) = field("data:") else {
                continue;
            };
            let schema = match (field("id:"), field("event:").as_deref()) {
                (Some(_), None) => &event,
                (None, Some("text")) => &delta,
                _ => continue,
            };
            let instance: Value = serde_json::from_str(&data).unwrap_or_else(|e| {
                panic!("{method} {path} {status}: a frame's data is not JSON ({e}): {data}")
            });
            self.validate(method, path, status, schema, &instance);
            checked += 1;
        }
        assert!(
            checked > 0 || !body.contains("\nid:"),
            "{method} {path} {status}: no frame was read from {body}"
        );
    }

    /// Validates `instance` against the document's `schema`, or fails
    /// naming the path, status and every error.
    fn validate(
        &self,
        method: &Method,
        path: &str,
        status: &str,
        schema: &Value,
        instance: &Value,
    ) {
        let answer_body = instance.to_string();
        let schema = self.schema(schema);
        let validator = jsonschema::draft202012::new(&schema).unwrap_or_else(|e| {
            panic!("{method} {path} {status}: the documented schema does not compile: {e}")
        });
        let errors: Vec<String> = validator
            .iter_errors(instance)
            .map(|e| format!("at {}: {e}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {path} {status}: the body does not match the documented schema:\n  {}\n\
             body: {answer_body}",
            errors.join("\n  "),
        );
    }

    /// `schema` as a JSON Schema 2020-12 document of its own: the
    /// document's components beside it, so that its `$ref`s
    /// (`#/components/schemas/…`) resolve.
    fn schema(&self, schema: &Value) -> Value {
        let mut root = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "components": self.doc["components"].clone(),
        });
        match schema {
            Value::Object(fields) => {
                for (key, value) in fields {
                    root[key] = value.clone();
                }
            }
            Value::Bool(true) | Value::Null => {}
            other => panic!("a schema that is not an object: {other}"),
        }
        root
    }

    /// Every (path template, method) the document has.
    fn operations(&self) -> BTreeSet<(String, String)> {
        let mut all = BTreeSet::new();
        for (path, item) in self.doc["paths"].as_object().expect("paths") {
            for method in &METHODS {
                let verb = method.as_str().to_ascii_lowercase();
                if item.get(&verb).is_some() {
                    all.insert((path.clone(), verb));
                }
            }
        }
        all
    }
}

/// Sends `request` (`method path`) and reads its answer whole.
async fn send(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.expect("sent");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response.text().await.unwrap_or_default();
    Answer {
        status,
        content_type,
        body,
    }
}

/// What a test sends: to one server (`http://ADDR`), as one caller.
struct Client {
    base: String,
    http: reqwest::Client,
    key: Option<String>,
}

impl Client {
    fn of(server: &Server, key: Option<&str>) -> Self {
        Self {
            base: server.base.clone(),
            http: server.http.clone(),
            key: key.map(str::to_owned),
        }
    }

    fn request(&self, method: &Method, path: &str) -> reqwest::RequestBuilder {
        let request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base));
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// `method path` with a JSON `body` (none when `Null`), checked
    /// against `doc`, and expected to answer `expected`.
    async fn call(
        &self,
        doc: &mut Document,
        method: Method,
        path: &str,
        body: Value,
        expected: u16,
    ) -> Answer {
        let mut request = self.request(&method, path);
        if !body.is_null() {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        self.expect(doc, method, path, request, expected).await
    }

    /// Sends `request` (`method path`), checks the answer against `doc`
    /// and that its status is `expected`.
    async fn expect(
        &self,
        doc: &mut Document,
        method: Method,
        path: &str,
        request: reqwest::RequestBuilder,
        expected: u16,
    ) -> Answer {
        let answer = send(request).await;
        doc.check(&method, path, &answer);
        assert_eq!(
            answer.status, expected,
            "{method} {path}: expected {expected}, got {}: {}",
            answer.status, answer.body
        );
        answer
    }
}

/// The paths the router serves, read from the router itself (its `Debug`
/// lists each route's path), not from a list kept by hand.
async fn router_paths() -> BTreeSet<String> {
    let engine = support::scripted_engine(ScriptedModel::new()).await;
    let app = support::app(engine, ServerOptions::default());
    let printed = format!("{:?}", leasehold_server::router(app));
    // `path_router: PathRouter { …, node: Node { paths: {RouteId(0): "/", …} } }`:
    // the first `paths` is the routes' (the fallback's router comes after).
    let start = printed
        .find("paths: {")
        .expect("the router prints its paths");
    let rest = &printed[start + "paths: {".len()..];
    // Each entry is `RouteId(N): "PATH"`; a path holds no quote.
    let end = rest.find("} }").expect("the end of the paths");
    let paths: BTreeSet<String> = rest[..end]
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(
        paths.len() > 10 && paths.contains("/runs/{id}"),
        "the router's paths were not read: {paths:?} from {printed}"
    );
    paths
}

/// A concrete path for a template, each parameter given a value.
fn concrete(template: &str) -> String {
    template
        .replace("{id}", "no-such-thing")
        .replace("{lease}", "lease:1")
        .replace("{name}", "app.js")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_openapi_3_1_and_served_without_a_key() {
    let engine = support::scripted_engine(ScriptedModel::new()).await;
    let server = Server::start(
        engine,
        ServerOptions {
            token: Some(TOKEN.to_owned()),
            ..ServerOptions::default()
        },
    )
    .await;
    let document = Document::fetch(&server).await;
    let version = document.doc["openapi"].as_str().unwrap_or_default();
    assert!(
        version.starts_with("3.1."),
        "the document says openapi {version:?}, not 3.1.x"
    );
    // The schemas a client checks its models against, by their Rust names.
    for name in [
        "RunView",
        "TraceView",
        "RunsPage",
        "ErrorBody",
        "Event",
        "EventKind",
        "RunStatus",
        "PauseRecord",
        "ToolCallRecord",
        "UsageReport",
        "ForkOrigin",
        "Pace",
        "ControlAnswer",
        "KeyView",
    ] {
        assert!(
            document.doc["components"]["schemas"][name].is_object(),
            "the document has no schema {name}"
        );
    }
    assert_eq!(
        document.doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_of_the_router_is_in_the_document_with_the_methods_it_takes() {
    let paths = router_paths().await;
    let engine = support::scripted_engine(ScriptedModel::new()).await;
    let server = Server::start(engine, ServerOptions::default()).await;
    let document = Document::fetch(&server).await;
    let documented = document.operations();
    let documented_paths: BTreeSet<String> = documented.iter().map(|(p, _)| p.clone()).collect();
    let undocumented: Vec<&String> = paths.difference(&documented_paths).collect();
    assert!(
        undocumented.is_empty(),
        "routes the router serves that the document lacks: {undocumented:?}"
    );
    let unrouted: Vec<&String> = documented_paths.difference(&paths).collect();
    assert!(
        unrouted.is_empty(),
        "paths the document has that the router does not serve: {unrouted:?}"
    );
    // The methods each path takes, as the router answers them: a method it
    // does not take is its 405 `method_not_allowed`.
    let client = Client::of(&server, None);
    for path in &paths {
        for method in &METHODS {
            let answer = send(client.request(method, &concrete(path))).await;
            let routed =
                !(answer.status == 405 && answer.json()["error"]["code"] == "method_not_allowed");
            let verb = method.as_str().to_ascii_lowercase();
            assert_eq!(
                routed,
                documented.contains(&(path.clone(), verb.clone())),
                "{method} {path}: the router {} it, the document {} it ({}: {})",
                if routed { "takes" } else { "does not take" },
                if routed { "lacks" } else { "has" },
                answer.status,
                answer.body
            );
        }
    }
}

/// An engine whose runs call `search` at each step, and each call hangs
/// (for the lease's 5 minutes): a run stays `running` until a person acts.
async fn hanging_engine() -> Engine {
    let model = ScriptedModel::new().script(
        "run",
        (0..8).map(|_| Turn::tools([("search", json!({"q": "x"}))])),
    );
    let tools = ScriptedTools::new().tool("search", Some(true), [ToolAct::Hang]);
    Engine::builder()
        .config(EngineConfig::default())
        .model(Arc::new(model))
        .tool_server("local", Arc::new(tools))
        .build()
        .await
        .expect("engine")
}

/// Waits until `run_id`, read as `client` reads it, is in `status`.
async fn wait_status(client: &Client, run_id: &str, status: &str) {
    let deadline = tokio::time::Instant::now() + support::PATIENCE;
    loop {
        let answer = send(client.request(&Method::GET, &format!("/runs/{run_id}"))).await;
        if answer.json()["status"] == status {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {run_id} never reached {status}: {}",
            answer.body
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A flow whose one step answers at once.
fn quick_flow() -> Value {
    json!({"name": "quick", "task": "answer", "max_steps": 4})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_of_every_route_matches_the_document() {
    let model = ScriptedModel::new().script(
        "run",
        [
            Turn::answer("done"),
            Turn::answer("done again"),
            Turn::answer("and again"),
            Turn::answer("once more"),
        ],
    );
    let engine = support::scripted_engine(model).await;
    let server = Server::start(
        engine,
        ServerOptions {
            token: Some(TOKEN.to_owned()),
            max_body: 64 * 1024,
            run_limits: RunLimits {
                guidance: 1024,
                ..RunLimits::default()
            },
            ..ServerOptions::default()
        },
    )
    .await;
    let mut doc = Document::fetch(&server).await;
    let operator = Client::of(&server, Some(TOKEN));
    let nobody = Client::of(&server, None);
    let d = &mut doc;
    use Method as M;

    // Open routes, without a key.
    nobody.call(d, M::GET, "/", Value::Null, 200).await;
    nobody
        .call(d, M::GET, "/assets/app.js", Value::Null, 200)
        .await;
    nobody
        .call(d, M::GET, "/assets/style.css", Value::Null, 200)
        .await;
    nobody
        .call(d, M::GET, "/assets/nothing.js", Value::Null, 404)
        .await;
    nobody.call(d, M::GET, "/health", Value::Null, 200).await;
    operator.call(d, M::GET, "/health", Value::Null, 200).await;
    nobody
        .call(d, M::GET, "/openapi.json", Value::Null, 200)
        .await;

    // Runs over MCP: a request, a notification, and what the MCP service
    // refuses before reading a message, said as the API's errors are.
    let mcp = |body: &str, accept: &str| {
        operator
            .request(&M::POST, "/mcp")
            .header("content-type", "application/json")
            .header("accept", accept)
            .body(body.to_owned())
    };
    let both = "application/json, text/event-stream";
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "openapi", "version": "1"}}});
    let answer = operator
        .expect(d, M::POST, "/mcp", mcp(&initialize.to_string(), both), 200)
        .await;
    assert_eq!(answer.json()["result"]["serverInfo"]["name"], "leasehold");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    operator
        .expect(d, M::POST, "/mcp", mcp(&initialized.to_string(), both), 202)
        .await;
    let answer = operator
        .expect(
            d,
            M::POST,
            "/mcp",
            mcp(&initialize.to_string(), "application/json"),
            406,
        )
        .await;
    assert_eq!(answer.json()["error"]["code"], "not_acceptable");
    let answer = operator
        .expect(d, M::POST, "/mcp", mcp("nope", both), 415)
        .await;
    assert_eq!(answer.json()["error"]["code"], "invalid_mcp_message");
    nobody
        .call(d, M::POST, "/mcp", initialize.clone(), 401)
        .await;

    // The guard: no key, a wrong token, an unknown key.
    nobody.call(d, M::GET, "/runs", Value::Null, 401).await;
    nobody.call(d, M::GET, "/metrics", Value::Null, 401).await;
    let wrong = Client::of(&server, Some("not-the-token"));
    wrong.call(d, M::GET, "/executor", Value::Null, 401).await;
    let unknown = Client::of(&server, Some("lh_nosuchkey_0123456789abcdef"));
    unknown.call(d, M::GET, "/runs", Value::Null, 401).await;
    // A request from another site.
    let cross = operator
        .request(&M::POST, "/runs")
        .header("origin", "https://elsewhere.example")
        .header("content-type", "application/json")
        .body(quick_flow().to_string());
    operator.expect(d, M::POST, "/runs", cross, 403).await;

    // The server and its executor.
    operator.call(d, M::GET, "/metrics", Value::Null, 200).await;
    operator
        .call(d, M::GET, "/executor", Value::Null, 200)
        .await;
    operator.call(d, M::GET, "/paces", Value::Null, 200).await;
    let endpoints = operator
        .call(d, M::GET, "/endpoints", Value::Null, 200)
        .await
        .json();
    operator
        .call(
            d,
            M::POST,
            "/endpoints/down",
            json!({"endpoint": "no such endpoint"}),
            404,
        )
        .await;
    operator
        .call(d, M::POST, "/endpoints/up", json!({"endpoint": 7}), 400)
        .await;
    if let Some(endpoint) = endpoints["endpoints"][0]["endpoint"].as_str() {
        operator
            .call(
                d,
                M::POST,
                "/endpoints/down",
                json!({"endpoint": endpoint, "by": "the test"}),
                200,
            )
            .await;
        operator
            .call(
                d,
                M::POST,
                "/endpoints/up",
                json!({"endpoint": endpoint}),
                200,
            )
            .await;
    }

    // Keys: made, listed, used, refused, revoked.
    let read_key = operator
        .call(
            d,
            M::POST,
            "/keys",
            json!({"scope": "read", "name": "reader"}),
            201,
        )
        .await
        .json();
    let read_secret = read_key["secret"].as_str().expect("a secret").to_owned();
    let read_id = read_key["id"].as_str().expect("an id").to_owned();
    operator
        .call(d, M::POST, "/keys", json!({"scope": "everything"}), 400)
        .await;
    operator
        .call(
            d,
            M::POST,
            "/keys",
            json!({"scope": "read", "tenant": "not a tenant!"}),
            422,
        )
        .await;
    let plain = operator
        .request(&M::POST, "/keys")
        .header("content-type", "text/plain")
        .body("scope=read");
    operator.expect(d, M::POST, "/keys", plain, 415).await;
    operator.call(d, M::GET, "/keys", Value::Null, 200).await;
    operator
        .call(d, M::GET, "/keys?colour=blue", Value::Null, 400)
        .await;
    let reader = Client::of(&server, Some(&read_secret));
    reader.call(d, M::GET, "/runs", Value::Null, 200).await;
    reader.call(d, M::POST, "/runs", quick_flow(), 403).await;
    reader.call(d, M::GET, "/keys", Value::Null, 403).await;

    // Runs: posted, refused, listed, shown, followed.
    let posted = operator
        .call(d, M::POST, "/runs", quick_flow(), 201)
        .await
        .json();
    let run_id = posted["run_id"].as_str().expect("a run id").to_owned();
    let keyed = || {
        operator
            .request(&M::POST, "/runs")
            .header("content-type", "application/json")
            .header("idempotency-key", "the-same-post")
            .body(quick_flow().to_string())
    };
    operator.expect(d, M::POST, "/runs", keyed(), 201).await;
    operator.expect(d, M::POST, "/runs", keyed(), 200).await;
    let reused = operator
        .request(&M::POST, "/runs")
        .header("content-type", "application/json")
        .header("idempotency-key", "the-same-post")
        .body(json!({"name": "other", "task": "something else"}).to_string());
    operator.expect(d, M::POST, "/runs", reused, 422).await;
    let bad_key = operator
        .request(&M::POST, "/runs")
        .header("content-type", "application/json")
        .header("idempotency-key", "two words")
        .body(quick_flow().to_string());
    operator.expect(d, M::POST, "/runs", bad_key, 400).await;
    let toml = operator
        .request(&M::POST, "/runs")
        .header("content-type", "application/toml")
        .body("name = \"quick\"\ntask = \"answer\"\nmax_steps = 4\n");
    operator.expect(d, M::POST, "/runs", toml, 201).await;
    let plain = operator
        .request(&M::POST, "/runs")
        .header("content-type", "text/plain")
        .body("run something");
    operator.expect(d, M::POST, "/runs", plain, 415).await;
    operator
        .call(d, M::POST, "/runs", json!({"name": "no task"}), 422)
        .await;
    operator
        .call(
            d,
            M::POST,
            "/runs",
            json!({"name": "x", "task": "y", "max_steps": 2, "tools": [{"name": "t", "command": ["sh"]}]}),
            403,
        )
        .await;
    let huge = json!({"name": "huge", "task": "x".repeat(128 * 1024)});
    operator.call(d, M::POST, "/runs", huge, 413).await;

    wait_status(&operator, &run_id, "completed").await;
    operator.call(d, M::GET, "/runs", Value::Null, 200).await;
    operator
        .call(d, M::GET, "/runs?limit=lots", Value::Null, 400)
        .await;
    operator
        .call(d, M::GET, &format!("/runs/{run_id}"), Value::Null, 200)
        .await;
    operator
        .call(d, M::GET, "/runs/no-such-run", Value::Null, 404)
        .await;
    operator
        .call(
            d,
            M::GET,
            &format!("/runs/{run_id}/trace"),
            Value::Null,
            200,
        )
        .await;
    operator
        .call(d, M::GET, "/runs/no-such-run/trace", Value::Null, 404)
        .await;
    operator
        .call(
            d,
            M::GET,
            &format!("/runs/{run_id}/recording"),
            Value::Null,
            200,
        )
        .await;
    operator
        .call(d, M::GET, "/runs/no-such-run/recording", Value::Null, 404)
        .await;
    operator
        .call(
            d,
            M::GET,
            &format!("/runs/{run_id}/events?live=false"),
            Value::Null,
            200,
        )
        .await;
    let resumed = operator
        .request(&M::GET, &format!("/runs/{run_id}/events"))
        .header("last-event-id", "not a number");
    operator
        .expect(d, M::GET, &format!("/runs/{run_id}/events"), resumed, 400)
        .await;
    operator
        .call(d, M::GET, "/runs/no-such-run/events", Value::Null, 404)
        .await;
    // The stream's token in its query, as a browser's EventSource sends it.
    nobody
        .call(
            d,
            M::GET,
            &format!("/runs/{run_id}/events?live=false&token={TOKEN}"),
            Value::Null,
            200,
        )
        .await;

    // Controls of a run that has ended, and of none.
    let path = |tail: &str| format!("/runs/{run_id}/{tail}");
    for tail in ["resume", "cancel", "pause"] {
        operator
            .call(d, M::POST, &path(tail), Value::Null, 409)
            .await;
        operator
            .call(
                d,
                M::POST,
                &format!("/runs/no-such-run/{tail}"),
                Value::Null,
                404,
            )
            .await;
        operator
            .call(d, M::POST, &path(tail), json!({"nonsense": true}), 400)
            .await;
    }
    operator
        .call(d, M::POST, &path("messages"), json!({}), 422)
        .await;
    operator
        .call(d, M::POST, &path("messages"), json!({"text": "hello"}), 409)
        .await;
    operator
        .call(
            d,
            M::POST,
            &path("messages"),
            json!({"text": "again", "policy": "rollback"}),
            409,
        )
        .await;
    operator
        .call(d, M::POST, &path("leases/lease:1/extend"), json!({}), 422)
        .await;
    operator
        .call(
            d,
            M::POST,
            &path("leases/lease:1/extend"),
            json!({"duration": "30s"}),
            409,
        )
        .await;
    operator
        .call(
            d,
            M::POST,
            &path("leases/not-a-lease/extend"),
            json!({"duration": "30s"}),
            400,
        )
        .await;
    operator
        .call(
            d,
            M::POST,
            &path("leases/lease:1/intervene"),
            Value::Null,
            409,
        )
        .await;
    let long_reason = json!({"reason": "r".repeat(2048)});
    operator
        .call(
            d,
            M::POST,
            &path("leases/lease:1/intervene"),
            long_reason,
            413,
        )
        .await;
    operator
        .call(
            d,
            M::POST,
            &path("reconcile"),
            json!({"key": "k", "decision": "retry"}),
            409,
        )
        .await;
    operator
        .call(d, M::POST, &path("reconcile"), json!({"key": "k"}), 400)
        .await;

    // Forks.
    operator
        .call(d, M::POST, &path("fork"), json!({"at": "1"}), 201)
        .await;
    operator
        .call(d, M::POST, &path("fork"), json!({"at": "not a step"}), 422)
        .await;
    operator
        .call(d, M::POST, &path("fork"), json!({}), 400)
        .await;
    operator
        .call(
            d,
            M::POST,
            "/runs/no-such-run/fork",
            json!({"at": "1"}),
            404,
        )
        .await;

    // Many runs at once.
    operator
        .call(
            d,
            M::POST,
            "/runs/actions",
            json!({"action": "cancel", "status": "completed", "dry_run": true}),
            200,
        )
        .await;
    operator
        .call(
            d,
            M::POST,
            "/runs/actions",
            json!({"action": "cancel"}),
            422,
        )
        .await;
    operator
        .call(
            d,
            M::POST,
            "/runs/actions",
            json!({"status": "running"}),
            400,
        )
        .await;

    // The read key, revoked, is refused.
    operator
        .call(
            d,
            M::POST,
            &format!("/keys/{read_id}/revoke"),
            Value::Null,
            200,
        )
        .await;
    operator
        .call(d, M::POST, "/keys/no-such-key/revoke", Value::Null, 404)
        .await;
    reader.call(d, M::GET, "/runs", Value::Null, 401).await;

    // Controls applied: a run waiting on a decision, reconciled.
    let (waiting, _model, waiting_id, key) = a_charge_waiting_for_a_decision().await;
    let waiter = Client::of(&waiting, None);
    waiter
        .call(
            d,
            M::POST,
            &format!("/runs/{waiting_id}/reconcile"),
            json!({"key": key, "decision": "mark_done", "result": "charged"}),
            200,
        )
        .await;
    waiting.wait_status(&waiting_id, |s| s == "completed").await;
    waiter
        .call(d, M::GET, &format!("/runs/{waiting_id}"), Value::Null, 200)
        .await;

    // A running run: paused, messaged, resumed, cancelled.
    // One run at a time and no queue: a second run, or a fork, is refused
    // while it runs.
    let executor = leasehold::executor::Executor::new(
        Arc::new(hanging_engine().await),
        leasehold::executor::ExecutorOptions {
            max_live_runs: 1,
            max_queued_runs: 0,
            ..leasehold::executor::ExecutorOptions::default()
        },
    );
    let running = support::Served::start(leasehold_server::App::new(
        executor,
        ServerOptions::default(),
    ))
    .await;
    let live = Client {
        base: running.base.clone(),
        http: reqwest::Client::new(),
        key: None,
    };
    let live_id = live
        .call(d, M::POST, "/runs", searching_flow(), 201)
        .await
        .json()["run_id"]
        .as_str()
        .expect("a run id")
        .to_owned();
    let live_path = |tail: &str| format!("/runs/{live_id}/{tail}");
    live.call(d, M::POST, "/runs", searching_flow(), 429).await;
    live.call(d, M::POST, &live_path("fork"), json!({"at": "1"}), 429)
        .await;
    live.call(
        d,
        M::POST,
        &live_path("messages"),
        json!({"text": "go on"}),
        200,
    )
    .await;
    live.call(
        d,
        M::POST,
        &live_path("pause"),
        json!({"reason": "a look", "in_flight": "cancel"}),
        200,
    )
    .await;
    wait_status(&live, &live_id, "waiting_human").await;
    live.call(d, M::GET, &format!("/runs/{live_id}"), Value::Null, 200)
        .await;
    live.call(
        d,
        M::GET,
        &format!("/runs/{live_id}/trace"),
        Value::Null,
        200,
    )
    .await;
    live.call(
        d,
        M::POST,
        &live_path("resume"),
        json!({"guidance": "carry on"}),
        200,
    )
    .await;
    live.call(
        d,
        M::POST,
        &live_path("cancel"),
        json!({"reason": "enough"}),
        200,
    )
    .await;

    // Every route was driven.
    let missed: Vec<_> = doc.operations().difference(&doc.driven).cloned().collect();
    assert!(
        missed.is_empty(),
        "routes no answer was checked for: {missed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_strays_from_the_document_fails_naming_its_path_status_and_why() {
    let engine = support::scripted_engine(ScriptedModel::new()).await;
    let server = Server::start(engine, ServerOptions::default()).await;
    let document = Document::fetch(&server).await;
    let failure = |status: u16, body: Value| {
        let mut document = Document {
            doc: document.doc.clone(),
            driven: BTreeSet::new(),
        };
        let answer = Answer {
            status,
            content_type: "application/json".to_owned(),
            body: body.to_string(),
        };
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            document.check(&Method::GET, "/runs/r1", &answer);
        }));
        let payload = caught.expect_err("the check fails");
        payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default()
    };
    // A run whose status is no status, and whose fence is text.
    let message = failure(
        200,
        json!({"run_id": "r1", "flow_name": "f", "task": "t", "status": "sleeping",
               "fence": "one", "created_at_ms": 1, "updated_at_ms": 1, "live": false}),
    );
    assert!(
        message.contains("GET /runs/r1 200") && message.contains("does not match"),
        "{message}"
    );
    assert!(
        message.contains("/status") && message.contains("/fence"),
        "{message}"
    );
    // An error without its code.
    let message = failure(404, json!({"error": {"message": "no run"}}));
    assert!(
        message.contains("404") && message.contains("code"),
        "{message}"
    );
    // A status the document does not give the route.
    let message = failure(418, json!({}));
    assert!(message.contains("418 is not documented"), "{message}");
}
