//! A SIGKILL of `leasehold run` or `leasehold serve` leaves no tool server
//! behind: the stdio server dies with the process (its parent-death
//! signal), and what the server started — a helper in its process group,
//! re-parented to init — is killed by the next command on the same data
//! directory (`leasehold runs list` here), which reads the killed process's
//! ledger of tool-server groups. A command run while the executor is alive
//! kills nothing of its.
//!
//! The tool server is the signal tests' hanging Python server, which starts
//! a `sleep` in its group and never answers a call; here its first call
//! blocks it, so that it does not end by itself when its standard input
//! closes with the killed executor.

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use leasehold_cli::demo::DemoStack;
use support::PATIENCE;
use tokio::process::Child;

use support::hanging_tool::{
    self, run_until_a_tool_call_hangs, running_in_group, write_stuck_flow,
};

/// How soon a server must die after its executor was killed: the kernel
/// sends the signal as it reaps the executor.
const DIES_WITHIN: Duration = Duration::from_secs(10);

/// The API token (a posted flow may name its tool server only with one).
const TOKEN: &str = "sigkill-test-token";

/// [`hanging_tool::leasehold`] with the API token of these tests.
fn leasehold(data_dir: &Path, model_base_url: &str) -> support::Leasehold {
    hanging_tool::leasehold(data_dir, model_base_url).api_token(TOKEN)
}

/// Whether process `pid` runs (exists and is not a zombie).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().next().map(|s| s != "Z" && s != "X")
        })
        .unwrap_or(false)
}

/// Waits up to `within` for `pid` to stop running; whether it did.
async fn ends(pid: u32, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while runs(pid) {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// The last `PGID HELPER_PID` the hanging server recorded, once it has
/// recorded one, its helper runs and a call has made it stuck (deaf to the
/// end of its input: only a signal ends it now).
async fn server_stuck(record: &Path) -> (u32, u32) {
    let called = record.with_extension("txt.called");
    support::until(
        "a tool server that recorded its group and got stuck in a call",
        PATIENCE,
        || async {
            if called.exists()
                && let Ok(text) = std::fs::read_to_string(record)
                && let Some(line) = text.lines().last()
                && let [Ok(pgid), Ok(helper)] = line
                    .split_whitespace()
                    .map(str::parse::<u32>)
                    .collect::<Vec<_>>()[..]
                && runs(helper)
            {
                return Some((pgid, helper));
            }
            None
        },
    )
    .await
}

/// Kills what is left of the server's group when a test fails, so that a
/// failure leaves nothing running.
struct KillGroupOnDrop(u32);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stderr(Stdio::null())
            .status();
    }
}

/// `leasehold runs list` on `data`: its exit code and what it said.
async fn runs_list(data: &Path, model: &str) -> (Option<i32>, String) {
    let out = support::output(leasehold(data, model).args(["runs", "list"])).await;
    (out.code, format!("{}{}", out.stdout, out.stderr))
}

/// After the executor was SIGKILLed: its tool server dies at once, and the
/// helper it started is gone once `runs list` has run on the data
/// directory, which lists the run.
async fn server_dies_and_its_helper_is_reaped(
    mut executor: Child,
    (pgid, helper): (u32, u32),
    data: &Path,
    model: &str,
) {
    let _cleanup = KillGroupOnDrop(pgid);
    support::signal(&executor, "-KILL");
    executor.wait().await.expect("reaped");
    assert!(
        ends(pgid, DIES_WITHIN).await,
        "the tool server {pgid} still runs {DIES_WITHIN:?} after its executor was SIGKILLed"
    );
    let (code, said) = runs_list(data, model).await;
    assert_eq!(code, Some(0), "{said}");
    // The data directory is this command's alone: the run's holder is
    // gone, and the listing says so rather than `running`.
    let rows: Vec<&str> = said.lines().filter(|l| l.starts_with("run-")).collect();
    assert!(
        rows.len() == 1 && rows[0].split_whitespace().nth(1) == Some("orphaned"),
        "the run is listed, orphaned: {said}"
    );
    assert!(
        ends(helper, DIES_WITHIN).await,
        "the tool server's helper {helper} still runs after `runs list` on the data directory; \
         left in its group: {:?}",
        running_in_group(pgid)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_run_kills_its_stdio_tool_server_and_the_next_command_reaps_its_helper() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let model = stack.model_base_url();
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let record = dir.path().join("groups.txt");
    let flow = write_stuck_flow(dir.path(), &stack, &record);

    let (run, _) = run_until_a_tool_call_hangs(leasehold(&data, &model), &flow, PATIENCE).await;
    let (pgid, helper) = server_stuck(&record).await;

    // Another command on the data directory while the executor lives (it
    // is refused the store) kills nothing of the live executor's.
    let (code, said) = runs_list(&data, &model).await;
    assert_ne!(code, Some(0), "the store is held by the run: {said}");
    assert!(
        runs(pgid) && runs(helper),
        "a command beside a live executor killed its tool server"
    );

    server_dies_and_its_helper_is_reaped(run, (pgid, helper), &data, &model).await;
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_serve_kills_its_stdio_tool_server_and_the_next_command_reaps_its_helper() {
    let stack = DemoStack::start().await.expect("the demo servers");
    let model = stack.model_base_url();
    let dir = tempfile::tempdir().expect("dir");
    let data = dir.path().join("data");
    let record = dir.path().join("groups.txt");
    let flow = write_stuck_flow(dir.path(), &stack, &record);
    let flow: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(flow).expect("flow")).expect("JSON");

    let (serve, base) =
        support::serve(leasehold(&data, &model), &["--allow-flow-tools"], PATIENCE).await;
    let http = support::authorized(TOKEN);
    let run_id = support::post_run(&http, &base, &flow).await;
    let group = server_stuck(&record).await;
    support::view_until(&http, &base, &run_id, PATIENCE, "running", |v| {
        v["status"] == "running"
    })
    .await;

    server_dies_and_its_helper_is_reaped(serve, group, &data, &model).await;
    stack.shutdown().await;
}
