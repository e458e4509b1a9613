//! `leasehold runs events ID --follow`, as real processes: a run followed
//! over `--server` and through a shared PostgreSQL store while the
//! `leasehold serve` that runs it is SIGKILLed mid-run and started again on
//! the same address. Both followers print every event of the run once, in
//! order, to its end, and exit 0; the one over the server picks the stream
//! up again with `Last-Event-ID` once the server is back. A follower whose
//! reader leaves (`| head -1`) ends at once, though the run goes on.
//!
//! The model is a gate ([`support::gate`]): the run stays in its model call
//! until the test opens it, so the kill lands mid-run without timing.

mod support;

#[path = "../../runtime/tests/support/postgres.rs"]
mod postgres;

use std::process::Stdio;
use std::time::Duration;

use leasehold::store::{PostgresConfig, PostgresStore};
use leasehold::{Event, EventKind, EventLog, RunStore};
use serde_json::json;
use support::PATIENCE;
use support::gate::gated_model;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The API token.
const TOKEN: &str = "follow-test-token";

/// `leasehold runs events ID --follow --json ARGS` started, both its
/// outputs piped.
fn follow(mut command: support::Leasehold, run_id: &str, args: &[&str]) -> Child {
    command
        .args(["runs", "events", run_id, "--follow", "--json"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the follower starts")
}

/// A follower: `leasehold runs events ID --follow --json ARGS`, its stdout
/// collected line by line, and how many of its lines were a
/// `model_call_started`.
struct Follower {
    child: Child,
    lines: JoinHandle<Vec<String>>,
    calls: watch::Receiver<usize>,
}

impl Follower {
    fn start(command: support::Leasehold, run_id: &str, args: &[&str]) -> Self {
        let mut child = follow(command, run_id, args);
        let stdout = child.stdout.take().expect("piped");
        let (seen, calls) = watch::channel(0);
        let lines = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let mut all = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains(r#""kind":"model_call_started""#) {
                    seen.send_modify(|n| *n += 1);
                }
                all.push(line);
            }
            all
        });
        Self {
            child,
            lines,
            calls,
        }
    }

    /// Once it printed the run's first model call.
    async fn saw_the_model_call(&mut self) {
        tokio::time::timeout(PATIENCE, self.calls.wait_for(|n| *n >= 1))
            .await
            .expect("the follower prints the model call")
            .expect("the follower's stdout is read");
    }

    /// Its exit, stderr, and the events it printed.
    async fn finish(mut self) -> (std::process::ExitStatus, String, Vec<Event>) {
        let mut stderr = self.child.stderr.take().expect("piped");
        let status = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("the follower ends with the run")
            .expect("wait");
        let mut said = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut said)
            .await
            .expect("stderr");
        let lines = self.lines.await.expect("the reader");
        let events = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        (status, said, events)
    }
}

/// A follower whose reader leaves after its first line, as `| head -1`
/// does, while the run waits in its model call and logs nothing: it sees
/// the reader gone without writing again, and exits 0, saying so.
async fn ends_when_its_reader_leaves(command: support::Leasehold, run_id: &str, args: &[&str]) {
    let mut child = follow(command, run_id, args);
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("a first event")
        .expect("read")
        .expect("a line");
    drop(lines);
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap_or_else(|_| panic!("the follower ({args:?}) goes on though nobody reads it"))
        .expect("wait");
    let mut said = String::new();
    let mut stderr = child.stderr.take().expect("piped");
    tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut said)
        .await
        .expect("stderr");
    assert!(status.success(), "{args:?}: {status}: {said}");
    assert!(said.contains("nobody reads"), "{args:?}: {said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_run_is_printed_once_to_its_end_through_a_serve_killed_and_started_again() {
    let (cluster, store_url) = postgres::database().await;
    let store = PostgresStore::connect(PostgresConfig::new(&store_url))
        .await
        .expect("the store");
    let (model, gate) = gated_model().await;
    // `leasehold` on the store, the gate and the API token; served on
    // `port`, resuming orphaned runs, with a short run lease.
    let gated = || {
        support::leasehold_on_store(&store_url)
            .model(&model, "gate")
            .api_token(TOKEN)
    };
    let addr = format!("127.0.0.1:{}", support::free_port());
    let serving = || {
        gated()
            .with_env("LEASEHOLD_RUN_LEASE_TTL", "2s")
            .with_env("LEASEHOLD_EXECUTOR_CLAIM_INTERVAL", "100ms")
            .with_env("LEASEHOLD_RESUME_ON_BOOT", "true")
    };
    let (mut first, base) = support::serve_on(serving(), &addr, &[], PATIENCE).await;

    let http = support::authorized(TOKEN);
    let flow = json!({"name": "gated", "task": "Answer.", "max_steps": 1, "stream": false});
    let run_id = support::post_run(&http, &base, &flow).await;

    let mut over_server = Follower::start(gated(), &run_id, &["--server", &base]);
    let mut through_store = Follower::start(gated(), &run_id, &[]);
    over_server.saw_the_model_call().await;
    through_store.saw_the_model_call().await;
    // Followers whose readers leave end while the run goes on.
    ends_when_its_reader_leaves(gated(), &run_id, &["--server", &base]).await;
    ends_when_its_reader_leaves(gated(), &run_id, &[]).await;
    assert_eq!(
        store
            .load_run(&run_id)
            .await
            .expect("load")
            .expect("the run")
            .status,
        leasehold::RunStatus::Running,
        "the run is still in its model call"
    );

    // The executor dies mid-call; another starts on the same address, finds
    // the run orphaned once its lease ends, and resumes it.
    first.start_kill().expect("SIGKILL");
    first.wait().await.expect("reaped");
    let (mut second, _) = support::serve_on(serving(), &addr, &[], PATIENCE).await;
    let mut received = gate.received.subscribe();
    tokio::time::timeout(PATIENCE, received.wait_for(|n| *n >= 2))
        .await
        .expect("the run is resumed and calls the model again")
        .expect("the gate lives");
    gate.open.send_replace(true);

    let mut finished = Vec::new();
    for (name, follower) in [("--server", over_server), ("the store", through_store)] {
        finished.push((name, follower.finish().await));
    }
    // A live stream may show the run's last events before they land in
    // its log, and the status lands after them.
    let logged = tokio::time::timeout(PATIENCE, async {
        loop {
            let record = store.load_run(&run_id).await.expect("the run");
            if record.is_some_and(|r| r.status.is_terminal()) {
                return store.load_events(&run_id, 0).await.expect("the log");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the run's end is stored");
    for (name, (status, said, printed)) in finished {
        assert!(status.success(), "{name}: {status}: {said}");
        assert!(said.contains("ended: completed"), "{name}: {said}");
        let seqs = |events: &[Event]| events.iter().map(|e| e.seq).collect::<Vec<_>>();
        assert_eq!(
            seqs(&printed),
            seqs(&logged),
            "{name}: every event of the run once, in order"
        );
        assert!(
            matches!(
                printed.last().map(|e| &e.kind),
                Some(EventKind::RunCompleted { .. })
            ),
            "{name}: it ends with the run's end"
        );
        assert!(
            printed
                .iter()
                .any(|e| matches!(e.kind, EventKind::RunResumed { .. })),
            "{name}: the resume by the second executor is among them"
        );
    }
    second.start_kill().expect("SIGKILL");
    second.wait().await.expect("reaped");
    drop(cluster);
}

#[tokio::test]
async fn following_a_run_on_a_data_directory_is_refused_naming_server() {
    let data = tempfile::tempdir().expect("dir");
    let refused = support::output_within(
        support::leasehold(data.path()).args(["runs", "events", "run-1", "--follow"]),
        PATIENCE,
    )
    .await;
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--server URL"), "{said}");
    assert!(said.contains("--store postgres://"), "{said}");
    assert!(
        !said.contains("  "),
        "one sentence, no runs of spaces: {said}"
    );
}
