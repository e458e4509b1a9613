//! Tenants stay apart, through real `leasehold serve` processes, on a data
//! directory (sled) and on PostgreSQL with two executors: a tenant's key
//! neither lists, reads, follows, controls nor forks another tenant's run
//! — every route of a run answers it the 404 of a run that does not
//! exist, and the run is left as it was — nor do a webhook's links reach
//! it. Keys are made with `leasehold keys create` (on the store) and
//! `POST /keys`; a key without the scope a route needs is refused with
//! 403 naming it; a malformed, unknown or revoked key with 401, a revoked
//! one at once on every executor sharing the store.

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

use std::path::Path;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::process::Child;

use support::PATIENCE;
use support::hanging_tool::Hanging;
use support::sse::Frames;

const TOKEN: &str = "tenants-test-token";

fn flow_json(flow: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(flow).expect("flow")).expect("JSON")
}

/// What one request got back: its status and JSON body.
async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("a request");
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// `POST /keys` with `http`: the new key's secret.
async fn make_key(http: &reqwest::Client, base: &str, tenant: &str, scope: &str) -> String {
    let (status, made) = answer(
        http.post(format!("{base}/keys"))
            .json(&json!({"tenant": tenant, "scope": scope, "name": "a test"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["tenant"], tenant, "{made}");
    made["secret"].as_str().expect("a secret").to_owned()
}

/// The lease of the run's tool call in flight, read from its event stream.
async fn call_lease(http: &reqwest::Client, base: &str, run_id: &str) -> String {
    let mut frames = Frames::open(http, &format!("{base}/runs/{run_id}/events"), None).await;
    loop {
        let frame = frames
            .next(PATIENCE)
            .await
            .expect("the stream goes on until the call starts");
        if frame.data["kind"] == "tool_call_started"
            && let Some(lease) = frame.data["lease_id"].as_u64()
        {
            return lease.to_string();
        }
    }
}

/// Where a run is and what its log holds, as its own tenant reads it.
async fn state(http: &reqwest::Client, base: &str, run_id: &str) -> (Value, usize) {
    let (status, view) = answer(http.get(format!("{base}/runs/{run_id}"))).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    let (status, trace) = answer(http.get(format!("{base}/runs/{run_id}/trace"))).await;
    assert_eq!(status, StatusCode::OK, "{trace}");
    let entries = trace["entries"].as_array().map_or(0, Vec::len);
    (view["status"].clone(), entries)
}

/// Every route of A's run, asked by B (`other`, on `base_b`), is the 404
/// of a run that does not exist and changes nothing; asked by A (`own`,
/// on `base_a`), it is served. B lists none of A's runs, its bulk action
/// selects none, and the links of a webhook of A's run reach nothing for
/// B.
#[allow(clippy::too_many_arguments)]
async fn tenants_stay_apart(
    own: &reqwest::Client,
    own_secret: &str,
    base_a: &str,
    other: &reqwest::Client,
    other_secret: &str,
    base_b: &str,
    run_id: &str,
    flow_name: &str,
) {
    let lease = call_lease(own, base_a, run_id).await;
    let before = state(own, base_a, run_id).await;
    assert_eq!(before.0, "running", "{before:?}");
    let reads = [
        String::new(),
        "/trace".to_owned(),
        "/recording".to_owned(),
        "/events".to_owned(),
    ];
    let controls: [(String, Value); 8] = [
        ("/pause".into(), json!({"reason": "a look"})),
        ("/messages".into(), json!({"text": "hello"})),
        ("/resume".into(), json!({})),
        ("/cancel".into(), json!({"reason": "not yours"})),
        (
            "/reconcile".into(),
            json!({"key": "k", "decision": "retry"}),
        ),
        ("/fork".into(), json!({"at": "1"})),
        (
            format!("/leases/{lease}/extend"),
            json!({"duration": "30s"}),
        ),
        (format!("/leases/{lease}/intervene"), json!({})),
    ];
    let unknown = |what: &str, status: StatusCode, body: &Value| {
        assert_eq!(status, StatusCode::NOT_FOUND, "{what}: {body}");
        assert_eq!(body["error"]["code"], "not_found", "{what}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(run_id), "{what}: {body}");
    };
    for read in &reads {
        let url = format!("{base_b}/runs/{run_id}{read}");
        let (status, body) = answer(other.get(&url)).await;
        unknown(&format!("GET {read} by B"), status, &body);
    }
    // The event stream takes its key in the query too, as a browser's
    // EventSource sends it.
    let (status, body) = answer(reqwest::Client::new().get(format!(
        "{base_b}/runs/{run_id}/events?token={other_secret}"
    )))
    .await;
    unknown("GET /events?token= by B", status, &body);
    for (path, body) in &controls {
        let url = format!("{base_b}/runs/{run_id}{path}");
        let (status, answer_body) = answer(other.post(&url).json(body)).await;
        unknown(&format!("POST {path} by B"), status, &answer_body);
    }
    // Nothing B asked reached the run: it still runs, its log as it was.
    assert_eq!(state(own, base_a, run_id).await, before);
    // A run that does not exist says the same, word for word but its id.
    let (status, missing) = answer(other.get(format!("{base_b}/runs/no-such-run"))).await;
    let (_, hidden) = answer(other.get(format!("{base_b}/runs/{run_id}"))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    assert_eq!(
        hidden.to_string().replace(run_id, "ID"),
        missing.to_string().replace("no-such-run", "ID")
    );

    // Every read is served to A, the stream with its key in the query too.
    for read in &reads[..3] {
        let url = format!("{base_a}/runs/{run_id}{read}");
        let (status, body) = answer(own.get(&url)).await;
        assert_eq!(status, StatusCode::OK, "GET {read} by A: {body}");
    }
    let mut frames = Frames::open(
        &reqwest::Client::new(),
        &format!("{base_a}/runs/{run_id}/events?token={own_secret}"),
        None,
    )
    .await;
    let first = frames.next(PATIENCE).await.expect("A's stream has events");
    assert_eq!(first.data["run_id"], run_id, "{:?}", first.data);

    // Listing: A sees its run, B and the operator's default tenant do not.
    let listed = |page: &Value| {
        page["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .any(|run| run["run_id"] == run_id)
    };
    let (_, page) = answer(own.get(format!("{base_a}/runs"))).await;
    assert!(listed(&page), "A lists its run: {page}");
    let (_, page) = answer(other.get(format!("{base_b}/runs?limit=500"))).await;
    assert!(!listed(&page), "B lists A's run: {page}");
    let (_, page) = answer(support::authorized(TOKEN).get(format!("{base_b}/runs"))).await;
    assert!(!listed(&page), "the default tenant lists A's run: {page}");
    // A bulk action by B on A's flow selects nothing; A's dry run selects
    // its run.
    let bulk = json!({"action": "cancel", "flow": flow_name, "dry_run": false});
    let (status, report) = answer(other.post(format!("{base_b}/runs/actions")).json(&bulk)).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert!(
        report["runs"]
            .as_array()
            .is_some_and(|runs| runs.iter().all(|r| r["run_id"] != run_id)),
        "{report}"
    );
    let dry = json!({"action": "cancel", "flow": flow_name, "dry_run": true});
    let (_, report) = answer(own.post(format!("{base_a}/runs/actions")).json(&dry)).await;
    assert!(
        report["runs"]
            .as_array()
            .is_some_and(|runs| runs.iter().any(|r| r["run_id"] == run_id)),
        "{report}"
    );
    assert_eq!(state(own, base_a, run_id).await, before);

    // A webhook of A's run paused: it names A's tenant, and its links reach
    // nothing for B.
    let (status, paused) = answer(
        own.post(format!("{base_a}/runs/{run_id}/pause"))
            .json(&json!({"reason": "a look", "in_flight": "cancel"})),
    )
    .await;
    assert!(status.is_success(), "A pauses its run: {paused}");
    let view = support::view_until(own, base_a, run_id, PATIENCE, "paused", |v| {
        v["status"] == "waiting_human"
    })
    .await;
    // Who asked is the key, whatever name the request gives.
    let own_id = leasehold::tenancy::key_id(own_secret).expect("an id");
    let (_, trace) = answer(own.get(format!("{base_a}/runs/{run_id}/trace"))).await;
    assert!(
        trace.to_string().contains(&format!(
            "a person over the API (key {own_id} of tenant `acme`)"
        )),
        "{trace}"
    );
    let record: leasehold::RunRecord = leasehold::RunRecord {
        status: leasehold::RunStatus::WaitingHuman,
        pause: serde_json::from_value(view["pause"].clone()).expect("a pause"),
        tenant: Some("acme".to_owned()),
        ..leasehold::testing::records::unowned(run_id)
    };
    let notice = leasehold::outbox::notice_of(leasehold::RunStatus::Running, &record)
        .expect("a pause makes a notice");
    let links = leasehold::webhooks::payload::Links::new(base_b, true);
    let payload = leasehold::webhooks::payload::payload(&notice, &links);
    assert_eq!(payload["data"]["tenant"], "acme", "{payload}");
    for link in [
        &payload["data"]["links"]["run"],
        &payload["data"]["links"]["events"],
    ] {
        let link = link.as_str().expect("a link");
        let (status, body) = answer(other.get(link)).await;
        unknown(&format!("the webhook's link {link} by B"), status, &body);
        // The events link is a stream that does not end: its status only.
        let response = own
            .get(link.replace(base_b, base_a))
            .send()
            .await
            .expect("A follows the link");
        assert_eq!(response.status(), StatusCode::OK, "{link} by A");
    }
    let resume = &payload["data"]["respond"]["resume"];
    let (status, body) = answer(
        other
            .post(resume["url"].as_str().expect("a link"))
            .json(&json!({})),
    )
    .await;
    unknown("the webhook's resume by B", status, &body);
    let url = resume["url"]
        .as_str()
        .expect("a link")
        .replace(base_b, base_a);
    let (status, body) = answer(own.post(url).json(&json!({}))).await;
    assert!(status.is_success(), "A resumes its run: {body}");

    // A forks its run: the fork is A's, and B cannot see it either.
    let (status, fork) = answer(
        own.post(format!("{base_a}/runs/{run_id}/fork"))
            .json(&json!({"at": "1"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{fork}");
    let fork_id = fork["run_id"].as_str().expect("an id");
    let (status, body) = answer(other.get(format!("{base_b}/runs/{fork_id}"))).await;
    unknown_of(fork_id, status, &body);
    for id in [run_id, fork_id] {
        let (status, body) = answer(
            own.post(format!("{base_a}/runs/{id}/cancel"))
                .json(&json!({"reason": "done"})),
        )
        .await;
        assert!(status.is_success(), "A cancels {id}: {body}");
    }
}

fn unknown_of(run_id: &str, status: StatusCode, body: &Value) {
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "not_found", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(run_id)),
        "{body}"
    );
}

/// Scopes and bad keys: a read key reads and starts nothing (403 naming
/// `operate`), an operate key makes no key (403 naming `admin`), a tenant's
/// admin makes keys of its own tenant only; a malformed or unknown key is
/// 401, and nothing was started by any of them.
async fn scopes_and_bad_keys(base: &str, read: &str, operate: &str, admin: &str, flow: &Value) {
    let reader = support::authorized(read);
    let (status, page) = answer(reader.get(format!("{base}/runs"))).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let runs_before = page["runs"].as_array().map_or(0, Vec::len);
    let (status, refused) = answer(reader.post(format!("{base}/runs")).json(flow)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(refused["error"]["code"], "forbidden_scope", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`operate`") && message.contains("`read`"),
        "{refused}"
    );
    let operator = support::authorized(operate);
    let (status, refused) = answer(
        operator
            .post(format!("{base}/keys"))
            .json(&json!({"scope": "read"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("`admin`")),
        "{refused}"
    );
    let (status, refused) = answer(
        operator
            .post(format!("{base}/endpoints/down"))
            .json(&json!({"endpoint": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let admin = support::authorized(admin);
    let (status, refused) = answer(
        admin
            .post(format!("{base}/keys"))
            .json(&json!({"scope": "read", "tenant": "other"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(refused["error"]["code"], "forbidden_tenant", "{refused}");
    let (status, keys) = answer(admin.get(format!("{base}/keys"))).await;
    assert_eq!(status, StatusCode::OK, "{keys}");
    let keys = keys.as_array().expect("keys");
    assert!(keys.iter().all(|k| k["tenant"] == "acme"), "{keys:?}");
    assert!(
        keys.iter()
            .all(|k| k.get("digest").is_none() && k.get("secret").is_none()),
        "{keys:?}"
    );
    for bad in [
        "lh_000000000000_nosuchsecret",
        "not-a-key",
        &format!("{read}x"),
    ] {
        let (status, refused) = answer(support::authorized(bad).get(format!("{base}/runs"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bad}: {refused}");
        let (status, _) = answer(
            support::authorized(bad)
                .post(format!("{base}/runs"))
                .json(flow),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bad}");
    }
    let (_, page) = answer(reader.get(format!("{base}/runs"))).await;
    assert_eq!(page["runs"].as_array().map_or(0, Vec::len), runs_before);
}

/// The same idempotency key given by two tenants starts a run for each:
/// one tenant's key never answers with another's run.
async fn idempotency_keys_are_per_tenant(
    own: &reqwest::Client,
    other: &reqwest::Client,
    base: &str,
    flow: &Value,
) -> [String; 2] {
    let mut ids = Vec::new();
    for http in [own, other] {
        let (status, created) = answer(
            http.post(format!("{base}/runs"))
                .header("Idempotency-Key", "order-1")
                .json(flow),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        ids.push(created["run_id"].as_str().expect("an id").to_owned());
    }
    assert_ne!(ids[0], ids[1]);
    let (status, again) = answer(
        other
            .post(format!("{base}/runs"))
            .header("Idempotency-Key", "order-1")
            .json(flow),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["run_id"], ids[1].as_str(), "{again}");
    [ids[0].clone(), ids[1].clone()]
}

fn serve(command: support::Leasehold) -> Child {
    support::start_serve(
        command.api_token(TOKEN),
        "127.0.0.1:0",
        &["--allow-flow-tools"],
    )
}

/// `leasehold keys create` on the data directory: the secret, printed once.
async fn key_made_on_the_store(hanging: &Hanging, tenant: &str, scope: &str) -> String {
    let mut command = support::leasehold(&hanging.data);
    command.args(["keys", "create", "--tenant", tenant, "--scope", scope]);
    let out = support::output(&mut command).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let secret = out.stdout.trim().to_owned();
    assert!(secret.starts_with("lh_"), "{secret}");
    secret
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_stay_apart_on_a_data_directory() {
    let hanging = Hanging::start().await;
    // Made on the store before the server starts, as an operator would.
    let a_operate = key_made_on_the_store(&hanging, "acme", "operate").await;
    let mut server = serve(support::leasehold(&hanging.data).demo_model(&hanging.stack));
    let base = support::served_base(&mut server, PATIENCE).await;
    let root = support::authorized(TOKEN);
    let a_read = make_key(&root, &base, "acme", "read").await;
    let a_admin = make_key(&root, &base, "acme", "admin").await;
    // A tenant's admin makes keys of its own tenant; the operator makes
    // B's.
    let a_second = make_key(&support::authorized(&a_admin), &base, "acme", "read").await;
    assert_ne!(a_second, a_read);
    let b_operate = make_key(&root, &base, "bravo", "operate").await;
    let own = support::authorized(&a_operate);
    let other = support::authorized(&b_operate);
    let flow = flow_json(&hanging.flow);
    let flow_name = flow["name"].as_str().unwrap_or_default().to_owned();
    scopes_and_bad_keys(&base, &a_read, &a_operate, &a_admin, &flow).await;
    let [run_id, b_run] = idempotency_keys_are_per_tenant(&own, &other, &base, &flow).await;
    let (status, _) = answer(
        other
            .post(format!("{base}/runs/{b_run}/cancel"))
            .json(&json!({})),
    )
    .await;
    assert!(status.is_success());
    tenants_stay_apart(
        &own, &a_operate, &base, &other, &b_operate, &base, &run_id, &flow_name,
    )
    .await;
    // Revoked: refused at once.
    let mut command = support::leasehold(&hanging.data).api_token(&a_admin);
    command.args(["keys", "list", "--json", "--server", &base]);
    let listed = support::output(&mut command).await;
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    let keys: Value = serde_json::from_str(&listed.stdout).expect("JSON");
    let read_id = leasehold::tenancy::key_id(&a_read).expect("an id");
    assert!(
        keys.as_array()
            .is_some_and(|keys| keys.iter().any(|k| k["id"] == read_id)),
        "{keys}"
    );
    let mut command = support::leasehold(&hanging.data).api_token(&a_admin);
    command.args(["keys", "revoke", read_id, "--server", &base]);
    let revoked = support::output(&mut command).await;
    assert_eq!(revoked.code, Some(0), "{}", revoked.stderr);
    let (status, refused) = answer(support::authorized(&a_read).get(format!("{base}/runs"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("revoked")),
        "{refused}"
    );
    let _ = server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_stay_apart_on_postgres_across_two_executors() {
    let (_cluster, url) = postgres::database().await;
    let hanging = Hanging::start().await;
    let mut one = serve(support::leasehold_on_store(&url).demo_model(&hanging.stack));
    let mut two = serve(support::leasehold_on_store(&url).demo_model(&hanging.stack));
    let base_one = support::served_base(&mut one, PATIENCE).await;
    let base_two = support::served_base(&mut two, PATIENCE).await;
    let root = support::authorized(TOKEN);
    // Keys made on one executor act on the other.
    let a_operate = make_key(&root, &base_one, "acme", "operate").await;
    let a_read = make_key(&root, &base_one, "acme", "read").await;
    let a_admin = make_key(&root, &base_two, "acme", "admin").await;
    let b_operate = make_key(&root, &base_two, "bravo", "operate").await;
    let own = support::authorized(&a_operate);
    let other = support::authorized(&b_operate);
    let flow = flow_json(&hanging.flow);
    let flow_name = flow["name"].as_str().unwrap_or_default().to_owned();
    scopes_and_bad_keys(&base_two, &a_read, &a_operate, &a_admin, &flow).await;
    let [run_id, b_run] = idempotency_keys_are_per_tenant(&own, &other, &base_one, &flow).await;
    let (status, _) = answer(
        other
            .post(format!("{base_two}/runs/{b_run}/cancel"))
            .json(&json!({})),
    )
    .await;
    assert!(status.is_success());
    // A asks the executor that runs its run; B asks the other one.
    tenants_stay_apart(
        &own, &a_operate, &base_one, &other, &b_operate, &base_two, &run_id, &flow_name,
    )
    .await;
    // Revoked on one executor: refused by the other at its next request.
    let reader = support::authorized(&a_read);
    let (status, _) = answer(reader.get(format!("{base_two}/runs"))).await;
    assert_eq!(status, StatusCode::OK);
    let read_id = leasehold::tenancy::key_id(&a_read).expect("an id");
    let (status, revoked) = answer(
        support::authorized(&a_admin)
            .post(format!("{base_one}/keys/{read_id}/revoke"))
            .json(&json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert!(revoked["revoked_at_ms"].is_u64(), "{revoked}");
    for base in [&base_two, &base_one] {
        let (status, refused) = answer(reader.get(format!("{base}/runs"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");
    }
    let _ = one.kill().await;
    let _ = two.kill().await;
}
