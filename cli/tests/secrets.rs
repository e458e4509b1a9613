//! Secrets never leave the process: a real `leasehold serve` whose
//! configuration declares a streamable-HTTP tool server with credentials in
//! its URL (`user:hunter2@…?token=s3cret`, on a port where nothing
//! listens) and a stdio one with a secret argument and a `--token` flag.
//! Runs posted over the API fail on them; their credentials appear in no
//! answer of the API, no event (over the API, `runs events` with `--server`
//! and from the store), no failure reason, not in serve's log, not in
//! `runs show` and not in `leasehold config` — while the tool server's
//! process got them as written.

mod support;

use std::path::Path;
use std::process::Stdio;
use support::PATIENCE;

use serde_json::{Value, json};

/// Every secret the configuration holds; none may be shown.
const SECRETS: &[&str] = &["hunter2", "s3cret", "arg-s3cret", "tok3n-abc", "env-s3cret"];

/// The configuration: `web` (credentials in its URL) and `ops` (a secret
/// argument, a `--token` value and an `env` value; it writes what it got
/// into `got` and exits, so its run fails).
fn configuration(dir: &Path, port: u16) -> std::path::PathBuf {
    let got = dir.join("got");
    let file = dir.join("leasehold.toml");
    let text = format!(
        r#"
[[tools]]
name = "web"
url = "http://user:hunter2@127.0.0.1:{port}/mcp?token=s3cret"

[[tools]]
name = "ops"
command = ["sh", "-c", "echo \"$@ $OPS_KEY\" > {got}; echo \"refusing $@\" >&2; exit 3", "ops",
           "--token", "tok3n-abc", {{ secret = "arg-s3cret" }}]
env = {{ OPS_KEY = "env-s3cret" }}
"#,
        got = got.display(),
    );
    std::fs::write(&file, text).expect("write the configuration");
    file
}

/// `leasehold` on a data directory in `dir` with the configuration
/// `config`; no model call is made: the runs fail on their tool servers.
fn configured(dir: &Path, config: &Path) -> support::Leasehold {
    support::leasehold(&dir.join("data"))
        .config(config)
        .model("http://127.0.0.1:9/v1", "unused")
}

/// `leasehold ARGS`' stdout and stderr, after it exits 0.
async fn output(dir: &Path, config: &Path, args: &[&str]) -> String {
    let out = support::output(configured(dir, config).args(args)).await;
    let text = format!("{}{}", out.stdout, out.stderr);
    assert_eq!(out.code, Some(0), "leasehold {args:?} failed: {text}");
    text
}

fn assert_hidden(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} shows `{secret}`:\n{text}");
    }
}

async fn text_of(http: &reqwest::Client, url: &str) -> String {
    http.get(url)
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("a body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_servers_credentials_appear_nowhere_a_client_or_the_log_can_read() {
    let dir = tempfile::tempdir().expect("dir");
    let port = support::free_port();
    let config = configuration(dir.path(), port);
    // Its log is read below.
    let log = std::fs::File::create(dir.path().join("serve.log")).expect("log file");
    let mut server = configured(dir.path(), &config)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("serve starts");
    let base = support::served_base(&mut server, PATIENCE).await;
    let http = reqwest::Client::new();

    let mut runs = Vec::new();
    for tool in ["web", "ops"] {
        let flow = json!({"name": format!("uses-{tool}"), "task": "t", "max_steps": 3,
                          "tools": [{"name": tool}]});
        let run_id = support::post_run(&http, &base, &flow).await;
        let view = support::view_until(&http, &base, &run_id, PATIENCE, "failed", |v| {
            v["status"] == "failed"
        })
        .await;
        runs.push((tool, run_id, view));
    }

    for (tool, run_id, view) in &runs {
        // The reason says what failed, and where, without the secrets.
        let reason = view["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(&format!("`{tool}`")), "{reason}");
        assert_hidden("GET /runs/{id}", &view.to_string());
        let events = text_of(&http, &format!("{base}/runs/{run_id}/events")).await;
        assert!(events.contains("run_failed"), "{events}");
        assert_hidden("the event stream", &events);
        let trace = text_of(&http, &format!("{base}/runs/{run_id}/trace")).await;
        assert_hidden("the trace", &trace);
        for json in [false, true] {
            let mut args = vec!["runs", "events", run_id.as_str(), "--server", &base];
            if json {
                args.push("--json");
            }
            let shown = output(dir.path(), &config, &args).await;
            assert!(shown.contains("run_failed"), "{shown}");
            assert_hidden("runs events --server", &shown);
        }
    }
    let (_, web_run, web) = &runs[0];
    let shown_url = format!("http://user:***@127.0.0.1:{port}/mcp?token=***");
    assert_eq!(web["flow"]["tools"][0]["url"], shown_url.as_str(), "{web}");
    assert!(
        web["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains(&shown_url)),
        "{web}"
    );
    let (_, ops_run, ops) = &runs[1];
    assert_eq!(
        ops["flow"]["tools"][0]["command"],
        json!(["sh", "-c", ops["flow"]["tools"][0]["command"][2], "ops", "--token", "***",
               {"secret": "***"}]),
        "{ops}"
    );
    assert_eq!(ops["flow"]["tools"][0]["env"]["OPS_KEY"], "(set)");
    // The process got them as written.
    let got = std::fs::read_to_string(dir.path().join("got")).expect("the tool server ran");
    assert_eq!(got.trim(), "--token tok3n-abc arg-s3cret env-s3cret");

    let listing = text_of(&http, &format!("{base}/runs")).await;
    let listed: Value = serde_json::from_str(&listing).expect("JSON");
    assert_eq!(
        listed["runs"].as_array().map(Vec::len),
        Some(2),
        "{listing}"
    );
    assert_hidden("GET /runs", &listing);
    assert_hidden(
        "runs list --server",
        &output(dir.path(), &config, &["runs", "list", "--server", &base]).await,
    );

    // Serve stops; its log and the store are read.
    let pid = server.id().expect("serve's pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    tokio::time::timeout(PATIENCE, server.wait())
        .await
        .expect("serve stops on SIGTERM")
        .expect("wait");
    let log = std::fs::read_to_string(dir.path().join("serve.log")).expect("serve's log");
    assert_hidden("serve's log", &log);
    for run_id in [web_run, ops_run] {
        for args in [
            vec!["runs", "events", run_id.as_str()],
            vec!["runs", "events", run_id.as_str(), "--json"],
            vec!["runs", "show", run_id.as_str()],
            vec!["runs", "trace", run_id.as_str()],
        ] {
            let shown = output(dir.path(), &config, &args).await;
            assert_hidden(&format!("{args:?}"), &shown);
        }
    }
    assert_hidden(
        "runs list",
        &output(dir.path(), &config, &["runs", "list"]).await,
    );

    let described = output(dir.path(), &config, &["config"]).await;
    assert!(
        described.contains(&format!("url {shown_url}")),
        "{described}"
    );
    assert!(described.contains("--token *** ***"), "{described}");
    assert_hidden("leasehold config", &described);
}
