//! `leasehold runs list` on a data directory: a page at a time with a
//! cursor, filtered by flow and creation time.
//!
//! A test binary of its own: `tests/cli.rs` hands data directories between
//! its tests' stores and child processes, and the processes started here
//! would only add load to those hand-overs.

mod support;

use std::path::Path;

use leasehold::RunStore;
use leasehold::{
    RunRecord, RunStatus,
    store::{Durability, SledConfig, SledStore},
};

/// `leasehold runs list ARGS` on `data`: exit code, stdout, stderr.
async fn runs_list(data: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = support::output(support::leasehold(data).args(["runs", "list"]).args(args)).await;
    (out.code, out.stdout, out.stderr)
}

#[tokio::test]
async fn runs_list_pages_with_a_cursor_and_filters_by_flow_and_time() {
    let dir = tempfile::tempdir().expect("dir");
    {
        // Made durable once, when the store closes.
        let config = SledConfig::new(dir.path()).with_durability(Durability::Exit);
        let store = SledStore::open(config).expect("store");
        for n in 0..5_u64 {
            let at = 1_767_225_600_000 + n * 60_000;
            let record: RunRecord = serde_json::from_value(serde_json::json!({
                "run_id": format!("run-{n:03}"),
                "flow": {"name": if n == 2 { "audit" } else { "research" }},
                "status": RunStatus::Completed, "owner_id": null, "fence": 1,
                "lease_expires_at_ms": 0, "reason": null, "answer": "done", "pause": null,
                "created_at_ms": at, "updated_at_ms": at,
            }))
            .expect("a record");
            store.create_run(record).await.expect("created");
        }
    }
    let data = dir.path();
    let (code, stdout, stderr) = runs_list(data, &["--limit", "2"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("run-004") && stdout.contains("run-003"),
        "{stdout}"
    );
    assert!(!stdout.contains("run-002"), "{stdout}");
    assert!(stderr.contains("--after run-003"), "{stderr}");
    let (_, stdout, stderr) = runs_list(data, &["--limit", "2", "--after", "run-001"]).await;
    assert!(stdout.contains("run-000"), "{stdout}");
    assert!(!stderr.contains("--after"), "the last page: {stderr}");
    let (_, stdout, _) = runs_list(data, &["--flow", "audit"]).await;
    assert!(
        stdout.contains("run-002") && !stdout.contains("run-001"),
        "{stdout}"
    );
    let (_, stdout, _) = runs_list(data, &["--since", "2026-01-01T00:03:00Z"]).await;
    assert!(
        stdout.contains("run-003") && !stdout.contains("run-002"),
        "{stdout}"
    );
    let (code, _, stderr) = runs_list(data, &["--since", "next week"]).await;
    assert_eq!(code, Some(2), "a usage error");
    assert!(stderr.contains("RFC 3339"), "{stderr}");
}
