//! What only the sled store has: the on-disk format, durability modes,
//! crashes and the directory lock. The rules every store shares (fencing,
//! claims, orphans, the event log) are the store port's conformance suite
//! (`leasehold::testing::conformance`), run on every store by
//! `store_conformance.rs`.
//!
//! Times are Unix milliseconds given to the store: a lease "expires" by
//! passing a later `now_ms`, never by sleeping. The tests that need a second
//! process (a lock holder, a crash) run this test binary again with
//! `LEASEHOLD_STORE_CHILD` set: the same test, started that way, plays the
//! child's part.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use leasehold::{
    MemoryStore, PauseRecord, RunQuery, RunRecord, RunStatus, RunUpdate, Store, ToolCallState,
    fencing, listing,
    store::{Durability, SledConfig, SledStore},
};
use serde_json::json;

#[path = "support/records.rs"]
mod records;

use leasehold::{ChangeSource, EventLog, RunStore, SnapshotStore};
use records::*;

/// The directory as a bare sled database, once the store dropped just
/// before has let go of it: a store closes on the blocking pool when a
/// group-commit flush is still in flight, a moment after its last clone is
/// dropped.
fn raw_sled(path: &Path) -> sled::Db {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match sled::open(path) {
            Ok(db) => return db,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => panic!("the store stayed locked after it was dropped: {error}"),
        }
    }
}

/// The store at `path`, once a store dropped just before has let go of it
/// (see [`raw_sled`]).
fn open(path: &Path, durability: Durability) -> SledStore {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match SledStore::open(SledConfig::new(path).with_durability(durability)) {
            Ok(store) => return store,
            Err(error)
                if error.message().contains("locked by another process")
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => panic!("open the store: {error}"),
        }
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
            .append_events("r", shared_events("r", 1..=3), record.fence)
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
                .append_events("r-1", shared_events("r-1", 1..=3), fence)
                .await
                .unwrap()
                .is_applied()
        );
        assert!(
            store
                .append_events("r-1", shared_events("r-1", 4..=5), fence)
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
async fn unknown_format_version_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path(), Durability::Sync);
        store.create_run(unowned("r")).await.unwrap();
    }
    // A value written by a later format.
    {
        let db = raw_sled(dir.path());
        let runs = db.open_tree("runs").unwrap();
        let mut value = runs.get("r").unwrap().unwrap().to_vec();
        value[0] = 9;
        runs.insert("r", value).unwrap();
        db.flush().unwrap();
    }
    {
        let store = open(dir.path(), Durability::Sync);
        let error = store.load_run("r").await.unwrap_err();
        assert!(error.message().contains("run `r`"), "{error}");
        assert!(
            error.message().contains("value format version 9"),
            "{error}"
        );
        assert!(error.message().contains("reads only version 1"), "{error}");
        assert!(store.list_runs().await.is_err());
        let claim = store.claim_run("r", "a", 1_000, TTL).await.unwrap_err();
        assert!(
            claim.message().contains("value format version 9"),
            "{claim}"
        );
    }
    // A database of a later store format.
    {
        let db = raw_sled(dir.path());
        db.open_tree("meta")
            .unwrap()
            .insert("format_version", &2_u32.to_be_bytes())
            .unwrap();
        db.flush().unwrap();
    }
    let error = SledStore::open(SledConfig::new(dir.path())).unwrap_err();
    assert!(
        error.message().contains("store format version 2"),
        "{error}"
    );
    assert!(
        error.message().contains(&dir.path().display().to_string()),
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
            error.message().contains(&path.display().to_string()),
            "{error}"
        );
        assert!(
            error.message().contains("locked by another process"),
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
        error.message().contains(&path.display().to_string()),
        "{error}"
    );
    assert!(
        error.message().contains("locked by another process"),
        "{error}"
    );
    wait_for_exit(&mut holder);
    drop(open(&path, Durability::Sync)); // free again once the holder is gone
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
    // sled removes a temporary database once its last user lets go of it:
    // under load that can come a moment after the store is dropped.
    let gone = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while path.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "{} is still there", path.display());
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
        let db = raw_sled(dir.path());
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
