//! `--log-format json`: every line of the log is a JSON object, and each
//! line about a run carries its `run_id` and `trace_id` — the trace id every
//! executor derives for the run — for an operator's log search. The real
//! binary, on the demo.

mod support;

use serde_json::Value;
use support::PATIENCE;

/// `leasehold` on a data directory in `dir`, logging the runtime's
/// `info` lines.
fn logging(dir: &std::path::Path) -> support::Leasehold {
    support::leasehold(&dir.join("data")).with_env("RUST_LOG", "leasehold=info")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_json_log_line_about_a_run_carries_its_run_id_and_trace_id() {
    let dir = tempfile::tempdir().expect("dir");
    let output = support::output_within(
        logging(dir.path()).args(["--log-format", "json", "demo"]),
        PATIENCE,
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let run_id = stdout
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("run-"))
        .unwrap_or_else(|| panic!("a run id in {stdout}"))
        .to_owned();
    let trace_id = leasehold::trace_id_of(&run_id);

    let mut messages = Vec::new();
    for line in stderr.lines() {
        let line: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            line["timestamp"].is_string() && line["level"].is_string(),
            "{line}"
        );
        let Some(run) = line["spans"]
            .as_array()
            .and_then(|spans| spans.iter().find(|s| s["name"] == "run"))
        else {
            continue;
        };
        assert_eq!(run["run_id"], run_id.as_str(), "{line}");
        assert_eq!(run["trace_id"], trace_id.as_str(), "{line}");
        messages.push(
            line["fields"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    for said in [
        "run taken on by this executor",
        "run paused for a person",
        "run resumed by a person",
        "run ended",
    ] {
        assert!(
            messages.iter().any(|m| m == said),
            "{said:?} in {messages:?}"
        );
    }

    // The text log stays text, and a format that is not one is refused.
    let text = support::output_within(logging(dir.path()).arg("demo"), PATIENCE).await;
    let said = String::from_utf8_lossy(&text.stderr);
    assert!(text.status.success(), "{said}");
    assert!(
        said.lines()
            .any(|l| l.contains("run ended") && !l.starts_with('{')),
        "{said}"
    );
    let refused = support::output_within(
        logging(dir.path())
            .env("LEASEHOLD_LOG_FORMAT", "xml")
            .arg("config"),
        PATIENCE,
    )
    .await;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("xml"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_log_written_to_a_pipe_holds_no_colour_escapes() {
    let dir = tempfile::tempdir().expect("dir");
    let output = support::output_within(
        logging(dir.path()).args(["--log-format", "text", "demo"]),
        PATIENCE,
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.lines().any(|l| l.contains("INFO")),
        "the demo logs at info: {stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "no escapes: {stderr:?}");
    // On a terminal, colours; never with NO_COLOR set.
    let colour = leasehold_cli::cli::Cli::log_in_colour;
    assert!(colour(true, None));
    assert!(colour(true, Some(std::ffi::OsStr::new(""))));
    assert!(!colour(true, Some(std::ffi::OsStr::new("1"))));
    assert!(!colour(false, None));
}
