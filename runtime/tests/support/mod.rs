//! What the tests of real `leasehold` processes share.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

/// The base URL `leasehold serve` prints on its first line (`leasehold
/// serving on http://ADDR/ …`), read from its piped stdout within
/// `patience`. The rest of its stdout is drained in the background.
pub async fn served_base(server: &mut Child, patience: Duration) -> String {
    let mut lines = BufReader::new(server.stdout.take().expect("serve's stdout is piped")).lines();
    let line = tokio::time::timeout(patience, lines.next_line())
        .await
        .expect("serve says where it listens")
        .expect("read")
        .expect("a line");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("a URL")
        .trim_end_matches('/')
        .to_owned()
}

/// `POST {base}/runs` of `flow` as JSON with `http`; the new run's id.
pub async fn post_run(http: &reqwest::Client, base: &str, flow: &impl serde::Serialize) -> String {
    let created: serde_json::Value = http
        .post(format!("{base}/runs"))
        .json(flow)
        .send()
        .await
        .expect("POST /runs")
        .json()
        .await
        .expect("JSON");
    created["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a run id: {created}"))
        .to_owned()
}
