//! The served API as the tests call it: runs posted, read, and waited on.

use std::time::Duration;

/// `POST {base}/runs` of `flow` as JSON with `http`; the answer.
pub async fn posted(
    http: &reqwest::Client,
    base: &str,
    flow: &impl serde::Serialize,
) -> serde_json::Value {
    http.post(format!("{base}/runs"))
        .json(flow)
        .send()
        .await
        .expect("POST /runs")
        .json()
        .await
        .expect("JSON")
}

/// [`posted`]: the new run's id.
pub async fn post_run(http: &reqwest::Client, base: &str, flow: &impl serde::Serialize) -> String {
    let created = posted(http, base, flow).await;
    created["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a run id: {created}"))
        .to_owned()
}

/// `GET {url}` with `http`, its answer as JSON.
pub async fn get_json(http: &reqwest::Client, url: &str) -> serde_json::Value {
    http.get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"))
}

/// `GET {base}/runs/{run_id}` with `http`, as JSON.
pub async fn get_run(http: &reqwest::Client, base: &str, run_id: &str) -> serde_json::Value {
    get_json(http, &format!("{base}/runs/{run_id}")).await
}

/// [`get_run`] until `done` holds on the view, within `patience`; `what`
/// names the awaited state for the failure message.
pub async fn view_until(
    http: &reqwest::Client,
    base: &str,
    run_id: &str,
    patience: Duration,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    super::until(&format!("the run to become {what}"), patience, || async {
        let view = get_run(http, base, run_id).await;
        done(&view).then_some(view)
    })
    .await
}

/// An HTTP client that sends `Authorization: Bearer {token}` with every
/// request.
pub fn authorized(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().expect("a header"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("an HTTP client")
}

/// The identity of the executor serving at `base`, as `GET /health` says
/// it to a client with the token.
pub async fn owner_id(http: &reqwest::Client, base: &str) -> String {
    let health: serde_json::Value = http
        .get(format!("{base}/health"))
        .send()
        .await
        .expect("GET /health")
        .json()
        .await
        .expect("JSON");
    health["owner_id"]
        .as_str()
        .unwrap_or_else(|| panic!("an identity: {health}"))
        .to_owned()
}
