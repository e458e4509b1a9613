//! The sled store against the rules of the `Store` port: fencing, claims,
//! orphan reconciliation, the event log, the on-disk format, durability
//! modes and the directory lock, and outcome-for-outcome agreement with
//! `MemoryStore`.
//!
//! Times are Unix milliseconds given to the store: a lease "expires" by
//! passing a later `now_ms`, never by sleeping. The tests that need a second
//! process (a lock holder, a crash) run this test binary again with
//! `LEASEHOLD_STORE_CHILD` set: the same test, started that way, plays the
//! child's part.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use leasehold::{
    ClaimOutcome, Event, EventKind, Fenced, MemoryStore, PauseRecord, RunQuery, RunRecord,
    RunStatus, RunUpdate, Snapshot, Store, ToolCallRecord, ToolCallState, fencing, listing,
    store::{Durability, SledConfig, SledStore},
};
use serde_json::json;

const TTL: u64 = 500;

fn run_record(
    run_id: &str,
    owner_id: Option<&str>,
    fence: u64,
    expires_at_ms: u64,
    status: RunStatus,
) -> RunRecord {
    RunRecord {
        run_id: run_id.to_owned(),
        flow: json!({"name": "research", "max_steps": 8}),
        status,
        owner_id: owner_id.map(str::to_owned),
        fence,
        lease_expires_at_ms: expires_at_ms,
        reason: None,
        answer: None,
        pause: None,
        created_at_ms: 1_000,
        updated_at_ms: 1_000,
    }
}

/// An unowned running run, ready to be claimed.
fn unowned(run_id: &str) -> RunRecord {
    run_record(run_id, None, 0, 0, RunStatus::Running)
}

fn snapshot(run_id: &str, path: &str, step: u32, note: &str) -> Snapshot {
    Snapshot {
        run_id: run_id.to_owned(),
        path: path.to_owned(),
        step,
        status: RunStatus::Running,
        state: json!({"transcript": [{"role": "user", "content": note}], "budget": {"limit": 8}}),
    }
}

fn tool_call(key: &str, step: u32, state: ToolCallState) -> ToolCallRecord {
    ToolCallRecord {
        key: key.to_owned(),
        path: "run".to_owned(),
        step,
        index: 0,
        tool: "search".to_owned(),
        arguments: json!({"query": "leases"}),
        idempotent: Some(true),
        state,
        result: (state == ToolCallState::Done).then(|| "found".to_owned()),
    }
}

fn event(run_id: &str, seq: u64) -> Event {
    Event {
        seq,
        at: 1_000 + seq,
        run_id: run_id.to_owned(),
        path: "run".to_owned(),
        kind: EventKind::StepStarted {
            step: u32::try_from(seq).unwrap_or(u32::MAX),
            limit: 8,
            nudges: 0,
        },
    }
}

fn events(run_id: &str, seqs: impl IntoIterator<Item = u64>) -> Vec<Event> {
    seqs.into_iter().map(|seq| event(run_id, seq)).collect()
}

fn update(status: RunStatus, at_ms: u64) -> RunUpdate {
    RunUpdate {
        status,
        reason: None,
        answer: None,
        pause: None,
        at_ms,
    }
}

fn open(path: &Path, durability: Durability) -> SledStore {
    SledStore::open(SledConfig::new(path).with_durability(durability)).expect("open the store")
}

fn claimed(outcome: ClaimOutcome) -> RunRecord {
    match outcome {
        ClaimOutcome::Claimed(record) => record,
        other => panic!("expected a claim, got {other:?}"),
    }
}

fn stale(fence: u64, owner_id: &str) -> Fenced<()> {
    Fenced::Stale {
        fence,
        owner_id: Some(owner_id.to_owned()),
    }
}

// ---------------------------------------------------------------------------
// A second process: this test binary, started again with an environment
// variable naming the part to play.

const CHILD_ROLE: &str = "LEASEHOLD_STORE_CHILD";
const CHILD_DIR: &str = "LEASEHOLD_STORE_CHILD_DIR";

/// What a child process does, if this process is one.
fn child_role() -> Option<(String, PathBuf)> {
    let role = std::env::var(CHILD_ROLE).ok()?;
    let dir = std::env::var_os(CHILD_DIR)?;
    Some((role, PathBuf::from(dir)))
}

/// Starts this test binary running `test` as a child playing `role` on `dir`.
fn spawn_child(test: &str, role: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ROLE, role)
        .env(CHILD_DIR, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the child process")
}

/// Waits (at most 60 s) for the child to print `line`.
fn wait_for_line(child: &mut Child, line: &'static str) {
    let stdout = child.stdout.take().expect("the child's stdout");
    let (seen, seen_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for read in BufReader::new(stdout).lines() {
            match read {
                // libtest prints `test <name> ... ` on the same line.
                Ok(text) if text.trim_end().ends_with(line) => {
                    let _ = seen.send(());
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    if seen_rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        panic!("the child process never printed `{line}`");
    }
}

/// Waits (at most 60 s) for the child to exit successfully.
fn wait_for_exit(child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            assert!(status.success(), "the child process failed: {status}");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the child process did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The child's part: writes a run through `durability`, and exits without
/// closing the store, as a crashed process would.
async fn crash_after_writes(
    dir: &Path,
    durability: Durability,
    then: impl AsyncFnOnce(&SledStore),
) -> ! {
    let store = open(dir, durability);
    store.create_run(unowned("r")).await.expect("create");
    let record = claimed(store.claim_run("r", "a", 1_000, TTL).await.expect("claim"));
    assert!(
        store
            .save_snapshot(snapshot("r", "run", 1, "crash"), record.fence)
            .await
            .expect("snapshot")
            .is_applied()
    );
    assert!(
        store
            .append_events("r", events("r", 1..=3), record.fence)
            .await
            .expect("events")
            .is_applied()
    );
    then(&store).await;
    println!("leasehold-child: done");
    // No destructor runs: sled is not closed, nothing more is flushed.
    std::process::exit(0);
}

/// The parent's check after `crash_after_writes`.
async fn crashed_writes_are_there(dir: &Path) {
    let store = open(dir, Durability::Sync);
    let run = store
        .load_run("r")
        .await
        .expect("load")
        .expect("the run survived");
    assert_eq!((run.owner_id.as_deref(), run.fence), (Some("a"), 1));
    let snapshots = store.load_snapshots("r").await.expect("snapshots");
    assert_eq!(snapshots, vec![snapshot("r", "run", 1, "crash")]);
    assert_eq!(
        store.load_events("r", 0).await.expect("events"),
        events("r", 1..=3)
    );
}

// ---------------------------------------------------------------------------

#[tokio::test]
async fn snapshot_roundtrip_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let expected_run;
    {
        let store = open(dir.path(), Durability::Sync);
        store.create_run(unowned("r-1")).await.unwrap();
        store.create_run(unowned("r-0")).await.unwrap();
        let run = claimed(store.claim_run("r-1", "exec-a", 1_000, TTL).await.unwrap());
        let fence = run.fence;
        for (path, step) in [("run", 1), ("run/worker:research:1", 1), ("run", 2)] {
            let outcome = store
                .save_snapshot(snapshot("r-1", path, step, "hello"), fence)
                .await
                .unwrap();
            assert!(outcome.is_applied());
        }
        for call in [
            tool_call("r-1/run/1/0", 1, ToolCallState::Sent),
            tool_call("r-1/run/2/0", 2, ToolCallState::Sent),
            tool_call("r-1/run/1/0", 1, ToolCallState::Done),
        ] {
            assert!(
                store
                    .record_tool_call("r-1", call, fence)
                    .await
                    .unwrap()
                    .is_applied()
            );
        }
        assert!(
            store
                .append_events("r-1", events("r-1", 1..=3), fence)
                .await
                .unwrap()
                .is_applied()
        );
        assert!(
            store
                .append_events("r-1", events("r-1", 4..=5), fence)
                .await
                .unwrap()
                .is_applied()
        );
        let mut paused = update(RunStatus::WaitingHuman, 1_200);
        paused.pause = Some(PauseRecord {
            reason: "the tool keeps failing".to_owned(),
            subject: "search".to_owned(),
            path: "run".to_owned(),
            call: None,
        });
        assert!(
            store
                .update_run("r-1", fence, paused.clone())
                .await
                .unwrap()
                .is_applied()
        );
        expected_run = fencing::update(&run, fence, &paused).unwrap();
    }

    let store = open(dir.path(), Durability::Sync);
    assert_eq!(
        store.load_run("r-1").await.unwrap(),
        Some(expected_run.clone())
    );
    let listed: Vec<String> = store
        .list_runs()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(listed, ["r-1", "r-0"], "runs are listed oldest first");
    assert_eq!(
        store.load_snapshots("r-1").await.unwrap(),
        vec![
            snapshot("r-1", "run", 2, "hello"),
            snapshot("r-1", "run/worker:research:1", 1, "hello"),
        ]
    );
    assert_eq!(
        store.load_tool_calls("r-1").await.unwrap(),
        vec![
            tool_call("r-1/run/1/0", 1, ToolCallState::Done),
            tool_call("r-1/run/2/0", 2, ToolCallState::Sent),
        ]
    );
    assert_eq!(
        store.load_events("r-1", 0).await.unwrap(),
        events("r-1", 1..=5)
    );
    assert_eq!(store.load_snapshots("r-0").await.unwrap(), vec![]);
}

#[tokio::test]
async fn stale_fence_writes_are_refused_and_land_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = open(dir.path(), Durability::Sync);
    let b = a.clone(); // a second executor on the same database
    a.create_run(unowned("r")).await.unwrap();

    let a_run = claimed(a.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    assert_eq!(a_run.fence, 1);
    assert!(
        a.save_snapshot(snapshot("r", "run", 1, "a before"), 1)
            .await
            .unwrap()
            .is_applied()
    );

    // A's lease ran out at 1 500; B claims at 2 000.
    let b_run = claimed(b.claim_run("r", "exec-b", 2_000, TTL).await.unwrap());
    assert_eq!(b_run.fence, 2);

    let refused = stale(2, "exec-b");
    assert_eq!(
        a.save_snapshot(snapshot("r", "run", 2, "a after"), 1)
            .await
            .unwrap(),
        refused
    );
    assert_eq!(
        a.save_snapshot(snapshot("r", "run/worker:w:1", 2, "a after"), 1)
            .await
            .unwrap(),
        refused
    );
    assert_eq!(
        a.record_tool_call("r", tool_call("r/run/2/0", 2, ToolCallState::Sent), 1)
            .await
            .unwrap(),
        refused
    );
    assert_eq!(
        a.append_events("r", events("r", 1..=2), 1).await.unwrap(),
        refused
    );
    assert_eq!(
        a.update_run("r", 1, update(RunStatus::Completed, 2_100))
            .await
            .unwrap(),
        refused
    );
    assert_eq!(a.renew_run("r", 1, 2_100, TTL).await.unwrap(), refused);

    // Nothing A wrote after losing the run is readable.
    assert_eq!(
        b.load_snapshots("r").await.unwrap(),
        vec![snapshot("r", "run", 1, "a before")]
    );
    assert_eq!(b.load_tool_calls("r").await.unwrap(), vec![]);
    assert_eq!(b.load_events("r", 0).await.unwrap(), vec![]);
    assert_eq!(b.load_run("r").await.unwrap(), Some(b_run.clone()));

    // B's writes land.
    assert!(
        b.save_snapshot(snapshot("r", "run", 2, "b"), 2)
            .await
            .unwrap()
            .is_applied()
    );
    let call = tool_call("r/run/2/0", 2, ToolCallState::Sent);
    assert!(
        b.record_tool_call("r", call.clone(), 2)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        b.append_events("r", events("r", 1..=2), 2)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(b.renew_run("r", 2, 2_200, TTL).await.unwrap().is_applied());
    assert!(
        b.update_run("r", 2, update(RunStatus::Completed, 2_300))
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        b.load_snapshots("r").await.unwrap(),
        vec![snapshot("r", "run", 2, "b")]
    );
    assert_eq!(b.load_tool_calls("r").await.unwrap(), vec![call]);
    assert_eq!(b.load_events("r", 0).await.unwrap(), events("r", 1..=2));
    let done = b.load_run("r").await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.fence, done.owner_id.as_deref()),
        (RunStatus::Completed, 2, Some("exec-b"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_racing_a_claim_lands_before_it_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Async);
    store.create_run(unowned("r")).await.unwrap();
    claimed(store.claim_run("r", "exec-a", 0, 10).await.unwrap());

    let a = store.clone();
    let writer = tokio::spawn(async move {
        // Writes until well after the claim: twenty refusals.
        let mut outcomes = Vec::new();
        for step in 1..=1_000_000 {
            let outcome = a
                .save_snapshot(snapshot("r", "run", step, "a"), 1)
                .await
                .unwrap();
            outcomes.push(outcome.is_applied());
            if outcomes.iter().filter(|applied| !**applied).count() == 20 {
                break;
            }
        }
        outcomes
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    claimed(store.claim_run("r", "exec-b", 100, TTL).await.unwrap());
    let seen_by_b = store.load_snapshots("r").await.unwrap();

    let outcomes = writer.await.unwrap();
    let landed = outcomes.iter().take_while(|applied| **applied).count();
    assert!(
        outcomes[landed..].iter().all(|applied| !applied),
        "once refused, A is refused for good"
    );
    let last_landed = u32::try_from(landed).unwrap();
    let expected: Vec<Snapshot> = (last_landed > 0)
        .then(|| snapshot("r", "run", last_landed, "a"))
        .into_iter()
        .collect();
    assert_eq!(seen_by_b, expected, "B sees A's last write that landed");
    assert_eq!(
        store.load_snapshots("r").await.unwrap(),
        expected,
        "and nothing after it"
    );
}

#[tokio::test]
async fn claim_is_refused_while_another_lease_is_live() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Sync);
    store.create_run(unowned("r")).await.unwrap();
    let a_run = claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());

    assert_eq!(
        store.claim_run("r", "exec-b", 1_499, TTL).await.unwrap(),
        ClaimOutcome::HeldBy {
            owner_id: "exec-a".to_owned(),
            expires_at_ms: 1_500,
        }
    );
    assert_eq!(
        store.load_run("r").await.unwrap(),
        Some(a_run),
        "a refused claim changes nothing"
    );

    // The owner may claim again (after a restart): the fence still goes up.
    let again = claimed(store.claim_run("r", "exec-a", 1_200, TTL).await.unwrap());
    assert_eq!((again.fence, again.lease_expires_at_ms), (2, 1_700));

    // At the expiry instant the lease is no longer live.
    let b_run = claimed(store.claim_run("r", "exec-b", 1_700, TTL).await.unwrap());
    assert_eq!(
        (b_run.owner_id.as_deref(), b_run.fence),
        (Some("exec-b"), 3)
    );
    assert_eq!(
        store
            .claim_run("missing", "exec-b", 1_700, TTL)
            .await
            .unwrap(),
        ClaimOutcome::NotFound
    );
}

#[tokio::test]
async fn claim_of_a_finished_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Sync);
    for (run_id, status) in [
        ("done", RunStatus::Completed),
        ("failed", RunStatus::Failed),
        ("cancelled", RunStatus::Cancelled),
    ] {
        store.create_run(unowned(run_id)).await.unwrap();
        let run = claimed(store.claim_run(run_id, "exec-a", 1_000, TTL).await.unwrap());
        let mut end = update(status, 1_100);
        end.answer = Some("42".to_owned());
        assert!(
            store
                .update_run(run_id, run.fence, end)
                .await
                .unwrap()
                .is_applied()
        );
        let ended = store.load_run(run_id).await.unwrap().unwrap();
        assert_eq!(
            ended.lease_expires_at_ms, 0,
            "a terminal status releases the lease"
        );

        assert_eq!(
            store.claim_run(run_id, "exec-b", 5_000, TTL).await.unwrap(),
            ClaimOutcome::Finished(status)
        );
        assert_eq!(store.load_run(run_id).await.unwrap(), Some(ended));
    }
}

#[tokio::test]
async fn reconcile_marks_expired_running_runs_orphaned_with_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Sync);
    let runs = [
        run_record("live", Some("a"), 1, 5_000, RunStatus::Running),
        run_record("expired", Some("a"), 1, 1_500, RunStatus::Running),
        run_record("expired-too", Some("b"), 3, 2_000, RunStatus::Running),
        run_record("paused", Some("a"), 1, 1_500, RunStatus::WaitingHuman),
        run_record(
            "unknown-call",
            Some("a"),
            1,
            1_500,
            RunStatus::ReconciliationRequired,
        ),
        run_record("done", Some("a"), 1, 0, RunStatus::Completed),
    ];
    for run in &runs {
        store.create_run(run.clone()).await.unwrap();
    }

    let orphaned = store.reconcile_orphans(2_000).await.unwrap();
    assert_eq!(orphaned, ["expired", "expired-too"]);
    for run_id in ["expired", "expired-too"] {
        let run = store.load_run(run_id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Orphaned);
        assert_eq!(
            run.reason.as_deref(),
            Some("run orphaned: executor lease expired")
        );
        assert_eq!(run.updated_at_ms, 2_000);
    }
    for run in runs.iter().filter(|r| !r.run_id.starts_with("expired")) {
        assert_eq!(
            store.load_run(&run.run_id).await.unwrap().as_ref(),
            Some(run),
            "{} is untouched",
            run.run_id
        );
    }
    assert_eq!(
        store.reconcile_orphans(2_000).await.unwrap(),
        Vec::<String>::new(),
        "reconciling twice changes nothing"
    );
}

#[tokio::test]
async fn orphaned_run_can_be_claimed_and_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Sync);
    store.create_run(unowned("r")).await.unwrap();
    claimed(store.claim_run("r", "exec-a", 1_000, TTL).await.unwrap());
    assert!(
        store
            .save_snapshot(snapshot("r", "run", 3, "before the crash"), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(store.reconcile_orphans(2_000).await.unwrap(), ["r"]);

    let resumed = claimed(store.claim_run("r", "exec-b", 2_500, TTL).await.unwrap());
    assert_eq!(resumed.status, RunStatus::Running);
    assert_eq!(resumed.reason, None);
    assert_eq!(
        (resumed.owner_id.as_deref(), resumed.fence),
        (Some("exec-b"), 2)
    );
    assert_eq!(
        store.load_snapshots("r").await.unwrap(),
        vec![snapshot("r", "run", 3, "before the crash")]
    );
    assert!(
        store
            .save_snapshot(snapshot("r", "run", 4, "resumed"), 2)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .update_run("r", 2, update(RunStatus::Completed, 3_000))
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        store.load_run("r").await.unwrap().unwrap().status,
        RunStatus::Completed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_yield_exactly_one_owner() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Sync);
    for round in 0..4 {
        let run_id = format!("r{round}");
        store.create_run(unowned(&run_id)).await.unwrap();
        let start = Arc::new(tokio::sync::Barrier::new(32));
        let claims: Vec<_> = (0..32)
            .map(|i| {
                let (store, start, run_id) = (store.clone(), Arc::clone(&start), run_id.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store
                        .claim_run(&run_id, &format!("exec-{i}"), 1_000, TTL)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut holders = Vec::new();
        for claim in claims {
            match claim.await.unwrap() {
                ClaimOutcome::Claimed(record) => winners.push(record),
                ClaimOutcome::HeldBy { owner_id, .. } => holders.push(owner_id),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one claim wins");
        let winner = winners.pop().unwrap();
        assert_eq!(winner.fence, 1);
        let owner = winner.owner_id.clone().unwrap();
        assert!(
            holders.iter().all(|h| *h == owner),
            "every loser is told who won"
        );
        assert_eq!(store.load_run(&run_id).await.unwrap(), Some(winner));
    }
}

#[tokio::test]
async fn events_resume_after_an_event_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Durability::Async);
    for run_id in ["run-1", "run-10"] {
        store.create_run(unowned(run_id)).await.unwrap();
        claimed(store.claim_run(run_id, "a", 1_000, TTL).await.unwrap());
    }
    // Seqs across byte boundaries: the order is numeric, not textual.
    let seqs = [1, 2, 9, 10, 255, 256, 257, 1_000, 65_536];
    assert!(
        store
            .append_events("run-1", events("run-1", seqs[..4].to_vec()), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .append_events("run-1", events("run-1", seqs[4..].to_vec()), 1)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        store
            .append_events("run-10", events("run-10", [3, 4]), 1)
            .await
            .unwrap()
            .is_applied()
    );

    assert_eq!(
        store.load_events("run-1", 0).await.unwrap(),
        events("run-1", seqs)
    );
    assert_eq!(
        store.load_events("run-1", 10).await.unwrap(),
        events("run-1", seqs[4..].to_vec())
    );
    assert_eq!(
        store.load_events("run-1", 11).await.unwrap(),
        events("run-1", seqs[4..].to_vec())
    );
    assert_eq!(store.load_events("run-1", 65_536).await.unwrap(), vec![]);
    assert_eq!(store.load_events("run-1", u64::MAX).await.unwrap(), vec![]);
    assert_eq!(
        store.load_events("run-10", 0).await.unwrap(),
        events("run-10", [3, 4]),
        "runs do not mix"
    );
    assert_eq!(store.load_events("run-2", 0).await.unwrap(), vec![]);
}

#[tokio::test]
async fn unknown_format_version_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path(), Durability::Sync);
        store.create_run(unowned("r")).await.unwrap();
    }
    // A value written by a later format.
    {
        let db = sled::open(dir.path()).unwrap();
        let runs = db.open_tree("runs").unwrap();
        let mut value = runs.get("r").unwrap().unwrap().to_vec();
        value[0] = 9;
        runs.insert("r", value).unwrap();
        db.flush().unwrap();
    }
    {
        let store = open(dir.path(), Durability::Sync);
        let error = store.load_run("r").await.unwrap_err();
        assert!(error.message.contains("run `r`"), "{error}");
        assert!(error.message.contains("value format version 9"), "{error}");
        assert!(error.message.contains("reads only version 1"), "{error}");
        assert!(store.list_runs().await.is_err());
        let claim = store.claim_run("r", "a", 1_000, TTL).await.unwrap_err();
        assert!(claim.message.contains("value format version 9"), "{claim}");
    }
    // A database of a later store format.
    {
        let db = sled::open(dir.path()).unwrap();
        db.open_tree("meta")
            .unwrap()
            .insert("format_version", &2_u32.to_be_bytes())
            .unwrap();
        db.flush().unwrap();
    }
    let error = SledStore::open(SledConfig::new(dir.path())).unwrap_err();
    assert!(error.message.contains("store format version 2"), "{error}");
    assert!(
        error.message.contains(&dir.path().display().to_string()),
        "{error}"
    );
}

#[test]
fn durability_mode_parses_and_names_accepted_values() {
    assert_eq!("sync".parse::<Durability>(), Ok(Durability::Sync));
    assert_eq!("async".parse::<Durability>(), Ok(Durability::Async));
    assert_eq!("exit".parse::<Durability>(), Ok(Durability::Exit));
    assert_eq!(Durability::default(), Durability::Sync);
    for mode in Durability::ALL {
        assert_eq!(mode.to_string().parse::<Durability>(), Ok(mode));
        assert_eq!(serde_json::to_string(&mode).unwrap(), format!("\"{mode}\""));
    }
    assert_eq!(
        serde_json::from_str::<Durability>("\"async\"").unwrap(),
        Durability::Async
    );

    let error = "fsync".parse::<Durability>().unwrap_err().to_string();
    assert_eq!(
        error,
        "unknown durability `fsync`: expected one of `sync`, `async`, `exit`"
    );
    assert!("SYNC".parse::<Durability>().is_err());
    assert!(serde_json::from_str::<Durability>("\"fsync\"").is_err());
}

#[tokio::test]
async fn exit_mode_writes_are_durable_after_flush() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "crash-after-flush");
        crash_after_writes(&dir, Durability::Exit, async |store: &SledStore| {
            store.flush().await.expect("flush");
        })
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_child(
        "exit_mode_writes_are_durable_after_flush",
        "crash-after-flush",
        dir.path(),
    );
    wait_for_line(&mut child, "leasehold-child: done");
    wait_for_exit(&mut child);
    crashed_writes_are_there(dir.path()).await;
}

#[tokio::test]
async fn sync_mode_writes_are_durable_when_they_return() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "crash-without-flush");
        crash_after_writes(&dir, Durability::Sync, async |_: &SledStore| {}).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_child(
        "sync_mode_writes_are_durable_when_they_return",
        "crash-without-flush",
        dir.path(),
    );
    wait_for_line(&mut child, "leasehold-child: done");
    wait_for_exit(&mut child);
    crashed_writes_are_there(dir.path()).await;
}

#[tokio::test]
async fn async_mode_writes_are_durable_shortly_after_without_flush() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "crash-after-a-moment");
        // Well under sled's own 500 ms background flush: only the group
        // commit can have written them.
        crash_after_writes(&dir, Durability::Async, async |_: &SledStore| {
            tokio::time::sleep(Duration::from_millis(100)).await;
        })
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_child(
        "async_mode_writes_are_durable_shortly_after_without_flush",
        "crash-after-a-moment",
        dir.path(),
    );
    wait_for_line(&mut child, "leasehold-child: done");
    wait_for_exit(&mut child);
    crashed_writes_are_there(dir.path()).await;
}

#[tokio::test]
async fn locked_directory_gives_a_clear_error_not_a_hang() {
    if let Some((role, dir)) = child_role() {
        assert_eq!(role, "hold");
        let _store = open(&dir, Durability::Sync);
        println!("leasehold-child: ready");
        // Hold the directory until the parent closes our stdin (or a minute
        // passes, should the parent be gone).
        let (closed, closed_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_line(&mut String::new());
            let _ = closed.send(());
        });
        let _ = closed_rx.recv_timeout(Duration::from_secs(60));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();

    // Another store in this process.
    {
        let first = open(&path, Durability::Sync);
        let started = Instant::now();
        let error = SledStore::open(SledConfig::new(&path)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            error.message.contains(&path.display().to_string()),
            "{error}"
        );
        assert!(
            error.message.contains("locked by another process"),
            "{error}"
        );
        drop(first);
        drop(open(&path, Durability::Sync)); // released when dropped
    }

    // Another process.
    let mut holder = spawn_child(
        "locked_directory_gives_a_clear_error_not_a_hang",
        "hold",
        &path,
    );
    wait_for_line(&mut holder, "leasehold-child: ready");
    let started = Instant::now();
    let opening = tokio::task::spawn_blocking({
        let path = path.clone();
        move || SledStore::open(SledConfig::new(path)).map(drop)
    });
    let result = tokio::time::timeout(Duration::from_secs(10), opening).await;
    drop(holder.stdin.take());
    let error = result
        .expect("opening a locked directory must not hang")
        .unwrap()
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        error.message.contains(&path.display().to_string()),
        "{error}"
    );
    assert!(
        error.message.contains("locked by another process"),
        "{error}"
    );
    wait_for_exit(&mut holder);
    drop(open(&path, Durability::Sync)); // free again once the holder is gone
}

/// Runs one scripted sequence of operations and writes down every outcome.
async fn script(store: &dyn Store) -> Vec<String> {
    let mut log = Vec::new();
    macro_rules! step {
        ($e:expr) => {
            log.push(format!("{} => {:?}", stringify!($e), $e.await));
        };
    }
    step!(store.create_run(run_record("r1", Some("a"), 1, 1_500, RunStatus::Running)));
    step!(store.create_run(run_record("r1", Some("b"), 1, 1_500, RunStatus::Running)));
    step!(store.create_run(unowned("r2")));
    step!(store.claim_run("r2", "b", 1_000, TTL));
    step!(store.claim_run("r2", "a", 1_200, TTL));
    step!(store.claim_run("nope", "a", 1_200, TTL));
    step!(store.save_snapshot(snapshot("r1", "run", 1, "one"), 1));
    step!(store.save_snapshot(snapshot("r1", "run/worker:w:1", 1, "w"), 1));
    step!(store.save_snapshot(snapshot("r1", "run", 2, "two"), 1));
    step!(store.save_snapshot(snapshot("r1", "run", 3, "stale"), 7));
    step!(store.save_snapshot(snapshot("nope", "run", 1, "none"), 1));
    step!(store.record_tool_call("r1", tool_call("k2", 2, ToolCallState::Sent), 1));
    step!(store.record_tool_call("r1", tool_call("k1", 1, ToolCallState::Sent), 1));
    step!(store.record_tool_call("r1", tool_call("k1", 1, ToolCallState::Done), 1));
    step!(store.record_tool_call("r2", tool_call("k1", 1, ToolCallState::Sent), 0));
    step!(store.record_tool_call("nope", tool_call("k1", 1, ToolCallState::Sent), 0));
    step!(store.append_events("r1", events("r1", 1..=3), 1));
    step!(store.append_events("r1", events("r1", 4..=4), 2));
    step!(store.append_events("r1", events("r1", 4..=5), 1));
    step!(store.append_events("nope", events("nope", 1..=1), 1));
    step!(store.renew_run("r1", 1, 1_400, TTL));
    step!(store.renew_run("r1", 2, 1_400, TTL));
    step!(store.renew_run("nope", 1, 1_400, TTL));
    let mut paused = update(RunStatus::WaitingHuman, 1_450);
    paused.pause = Some(PauseRecord {
        reason: "escalated".to_owned(),
        subject: "search".to_owned(),
        path: "run".to_owned(),
        call: Some(tool_call("k2", 2, ToolCallState::Unknown)),
    });
    step!(store.update_run("r2", 1, paused.clone()));
    step!(store.update_run("r2", 0, paused.clone()));
    step!(store.update_run("nope", 1, paused.clone()));
    step!(store.create_run(unowned("r0")));
    step!(store.reconcile_orphans(1_800));
    step!(store.reconcile_orphans(5_000));
    step!(store.claim_run("r1", "b", 5_000, TTL));
    step!(store.save_snapshot(snapshot("r1", "run", 4, "resumed"), 2));
    let mut done = update(RunStatus::Completed, 5_100);
    done.answer = Some("42".to_owned());
    step!(store.update_run("r1", 2, done.clone()));
    step!(store.claim_run("r1", "c", 9_000, TTL));
    step!(store.claim_run("r2", "c", 9_000, TTL));
    step!(store.load_run("r1"));
    step!(store.load_run("nope"));
    step!(store.list_runs());
    step!(store.load_snapshots("r1"));
    step!(store.load_snapshots("r2"));
    step!(store.load_tool_calls("r1"));
    step!(store.load_events("r1", 0));
    step!(store.load_events("r1", 2));
    step!(store.load_events("r2", 0));
    step!(store.flush());
    log
}

#[tokio::test]
async fn sled_store_behaves_like_memory_store() {
    let memory = script(&MemoryStore::new()).await;
    for durability in Durability::ALL {
        let dir = tempfile::tempdir().unwrap();
        let sled = script(&open(dir.path(), durability)).await;
        for (expected, got) in memory.iter().zip(&sled) {
            assert_eq!(got, expected, "{durability}: the stores disagree");
        }
        assert_eq!(sled.len(), memory.len());
    }
}

#[tokio::test]
async fn temporary_store_is_deleted_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scratch");
    {
        let store = SledStore::open(SledConfig::new(&path).with_temporary(true)).unwrap();
        store.create_run(unowned("r")).await.unwrap();
        assert!(store.load_run("r").await.unwrap().is_some());
        assert!(path.exists());
    }
    assert!(!path.exists());
}

/// The ids of every page of `query` (its limit kept), walked with the cursor.
async fn every_page(store: &dyn Store, mut query: RunQuery) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        let page = store.list_runs_page(&query).await.expect("a page");
        ids.extend(page.runs.into_iter().map(|r| r.run_id));
        match page.next {
            Some(next) => query.after = Some(next),
            None => return ids,
        }
    }
}

#[tokio::test]
async fn pages_follow_status_changes_and_a_directory_written_without_indexes_gets_them() {
    let dir = tempfile::tempdir().unwrap();
    let memory = MemoryStore::new();
    {
        let store = open(dir.path(), Durability::Exit);
        for n in 0..40_u64 {
            let mut record = run_record(
                &format!("run-{n:03}"),
                Some("a"),
                1,
                9_000,
                RunStatus::Running,
            );
            record.flow = json!({"name": if n.is_multiple_of(2) { "alpha" } else { "beta" }});
            record.created_at_ms = 1_000 + n;
            store.create_run(record.clone()).await.unwrap();
            memory.create_run(record).await.unwrap();
        }
        // Every third run completes: it leaves `running` for `completed`.
        for n in (0..40).step_by(3) {
            let update = RunUpdate {
                status: RunStatus::Completed,
                reason: None,
                answer: Some("done".to_owned()),
                pause: None,
                at_ms: 2_000,
            };
            let id = format!("run-{n:03}");
            assert!(
                store
                    .update_run(&id, 1, update.clone())
                    .await
                    .unwrap()
                    .is_applied()
            );
            assert!(
                memory
                    .update_run(&id, 1, update)
                    .await
                    .unwrap()
                    .is_applied()
            );
        }
    }
    let queries = [
        RunQuery::first(5),
        RunQuery {
            status: Some(RunStatus::Running),
            ..RunQuery::first(4)
        },
        RunQuery {
            status: Some(RunStatus::Completed),
            flow: Some("beta".to_owned()),
            ..RunQuery::first(2)
        },
        RunQuery {
            flow: Some("alpha".to_owned()),
            created_from_ms: Some(1_010),
            created_before_ms: Some(1_030),
            ..RunQuery::first(3)
        },
    ];
    // What the pure rule selects from every run, newest first.
    let expected = |query: &RunQuery, all: &[RunRecord]| -> Vec<String> {
        let mut ids: Vec<String> = all
            .iter()
            .filter(|r| listing::matches(query, r))
            .map(|r| r.run_id.clone())
            .collect();
        ids.sort();
        ids.reverse();
        ids
    };
    let all = memory.list_runs().await.unwrap();
    {
        let store = open(dir.path(), Durability::Exit);
        for query in &queries {
            let want = expected(query, &all);
            assert!(!want.is_empty(), "{query:?}");
            assert_eq!(
                every_page(&store, query.clone()).await,
                want,
                "sled {query:?}"
            );
            assert_eq!(
                every_page(&memory, query.clone()).await,
                want,
                "memory {query:?}"
            );
        }
    }
    // The same directory as an older build left it: no indexes.
    {
        let db = sled::open(dir.path()).unwrap();
        assert!(db.drop_tree("runs_by_status").unwrap());
        assert!(db.drop_tree("runs_by_flow").unwrap());
        db.open_tree("meta")
            .unwrap()
            .remove("runs_indexed")
            .unwrap();
        db.flush().unwrap();
    }
    let store = open(dir.path(), Durability::Exit);
    for query in &queries {
        assert_eq!(
            every_page(&store, query.clone()).await,
            expected(query, &all),
            "rebuilt {query:?}"
        );
    }
}
