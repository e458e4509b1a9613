//! The hanging stdio MCP server the signal tests stop leasehold around,
//! how they start `leasehold` on it, and what they read from `/proc` about
//! its process group.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use leasehold::Event;
use leasehold_cli::demo::DemoStack;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::Leasehold;

/// `leasehold` with nothing of the test's environment but `PATH`, on the
/// data directory `data_dir`, the demo's scripted model at
/// `model_base_url`.
pub fn leasehold(data_dir: &Path, model_base_url: &str) -> Leasehold {
    super::leasehold(data_dir).model(model_base_url, "leasehold-demo")
}

/// Reads a command's JSON events until a tool call has started, within
/// `patience`; the run's id.
pub async fn until_a_tool_call_hangs(
    lines: &mut Lines<BufReader<ChildStdout>>,
    patience: Duration,
) -> String {
    let mut run_id = None;
    loop {
        let line = tokio::time::timeout(patience, lines.next_line())
            .await
            .expect("events keep coming until a tool call starts")
            .expect("read")
            .expect("the command ended before a tool call started");
        let event: Event = serde_json::from_str(&line).expect("an event");
        run_id.get_or_insert(event.run_id.clone());
        if event.kind.name() == "tool_call_started" {
            return run_id.expect("an id").to_string();
        }
    }
}

/// `command run FLOW --json` started and followed, within `patience`, until
/// a tool call of its run has started (and hangs on the hanging server);
/// the process, its run's id, and the rest of its stdout drained in the
/// background.
pub async fn run_until_a_tool_call_hangs(
    command: impl Into<Command>,
    flow: &Path,
    patience: Duration,
) -> (Child, String) {
    let mut command: Command = command.into();
    let mut run = command
        .arg("run")
        .arg(flow)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("leasehold run starts");
    let mut lines = BufReader::new(run.stdout.take().expect("stdout")).lines();
    let run_id = until_a_tool_call_hangs(&mut lines, patience).await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (run, run_id)
}

/// The demo's model and a flow whose tool server never answers a call,
/// in a directory of their own: a data directory, and the file the tool
/// server records its process group in.
pub struct Hanging {
    pub stack: DemoStack,
    pub model: String,
    pub dir: tempfile::TempDir,
    pub data: PathBuf,
    pub record: PathBuf,
    pub flow: PathBuf,
}

impl Hanging {
    pub async fn start() -> Self {
        let stack = DemoStack::start().await.expect("the demo servers");
        let model = stack.model_base_url();
        let dir = tempfile::tempdir().expect("dir");
        let data = dir.path().join("data");
        let record = dir.path().join("groups.txt");
        let flow = write_flow(dir.path(), &stack, &record);
        Self {
            stack,
            model,
            dir,
            data,
            record,
            flow,
        }
    }

    /// The run as `leasehold runs show` prints it from the data directory.
    pub async fn shown(&self, run_id: &str) -> serde_json::Value {
        let out = tokio::time::timeout(
            super::PATIENCE,
            leasehold(&self.data, &self.model)
                .args(["runs", "show", run_id])
                .output(),
        )
        .await
        .expect("runs show ends in time")
        .expect("runs show");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    }

    /// `leasehold run FLOW --json` on the data directory, both its outputs
    /// piped.
    pub fn run(&self) -> Child {
        leasehold(&self.data, &self.model)
            .arg("run")
            .arg(&self.flow)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run")
    }
}

/// An MCP server over stdio that never answers a tool call. Its first
/// argument is a file it appends `PGID HELPER_PID` to; with `--stuck`, its
/// first call blocks it for good, once it has created `FILE.called`.
pub const HANGING_SERVER: &str = r#"
import json, os, subprocess, sys, time

helper = subprocess.Popen(["sleep", "3600"])
with open(sys.argv[1], "a") as record:
    record.write(f"{os.getpgid(0)} {helper.pid}\n")

TOOLS = ["search_logs", "fetch_metrics", "rollback_deploy"]
while True:
    line = sys.stdin.readline()
    if not line:
        break
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    method = message["method"]
    if method == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hanging", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [
            {"name": name, "description": name, "inputSchema": {"type": "object"}}
            for name in TOOLS
        ]}
    elif method == "tools/call":
        if "--stuck" in sys.argv:
            open(sys.argv[1] + ".called", "w").close()
            time.sleep(10**9)
        continue
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;

/// The absolute path of the Python interpreter (a shim on `PATH` may need
/// variables the command's cleared environment does not have).
pub fn python() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs (the hanging MCP server is a Python script)");
    assert!(out.status.success(), "python3 -c failed");
    String::from_utf8(out.stdout)
        .expect("a path")
        .trim()
        .to_owned()
}

/// The demo's flow on the hanging stdio server, every tool idempotent (a
/// call cut by the stop is called again on resume) and leases long enough
/// that nothing but the signal ends the wait.
pub fn write_flow(dir: &Path, stack: &DemoStack, record: &Path) -> PathBuf {
    flow_on_server(dir, stack, record, &[])
}

/// [`write_flow`] on the server run with `--stuck`: its first call blocks
/// it for good (it creates `RECORD.called` first), so that it no longer
/// reads its standard input and only a signal can end it.
pub fn write_stuck_flow(dir: &Path, stack: &DemoStack, record: &Path) -> PathBuf {
    flow_on_server(dir, stack, record, &["--stuck"])
}

fn flow_on_server(dir: &Path, stack: &DemoStack, record: &Path, extra: &[&str]) -> PathBuf {
    let script = dir.join("hanging_server.py");
    std::fs::write(&script, HANGING_SERVER).expect("write the server");
    let mut flow = stack.flow();
    flow.leases.tool_call = Some(Duration::from_secs(3600));
    flow.leases.worker_step = Some(Duration::from_secs(3600));
    let mut value = serde_json::to_value(&flow).expect("flow");
    let mut command = vec![
        python(),
        script.display().to_string(),
        record.display().to_string(),
    ];
    command.extend(extra.iter().map(|arg| (*arg).to_owned()));
    value["tools"] = serde_json::json!([{
        "name": "ops",
        "command": command,
        "idempotent": {"search_logs": true, "fetch_metrics": true, "rollback_deploy": true},
    }]);
    let path = dir.join("hanging.json");
    std::fs::write(&path, serde_json::to_string_pretty(&value).expect("json")).expect("write");
    path
}

/// The processes of group `pgid` that are running (not zombies), from
/// `/proc/*/stat`.
pub fn running_in_group(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // After the command's closing parenthesis: state, ppid, pgrp.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.get(2).and_then(|pgrp| pgrp.parse::<u32>().ok()) == Some(pgid)
                && fields
                    .first()
                    .is_some_and(|state| *state != "Z" && *state != "X")
        })
        .collect()
}

/// Waits up to `within` for group `pgid` to have no running process: a
/// process killed with SIGKILL is gone as soon as the kernel has scheduled
/// its death. Whether it emptied.
pub async fn group_emptied(pgid: u32, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if running_in_group(pgid).is_empty() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The last `PGID HELPER_PID` the hanging server recorded.
pub fn last_group(record: &Path) -> (u32, u32) {
    let text = std::fs::read_to_string(record).expect("the server recorded its group");
    let line = text.lines().last().expect("a line");
    let mut fields = line
        .split_whitespace()
        .map(|f| f.parse::<u32>().expect("a number"));
    (
        fields.next().expect("pgid"),
        fields.next().expect("helper pid"),
    )
}
