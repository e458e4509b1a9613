//! The hanging stdio MCP server the signal tests stop leasehold around, and
//! what they read from `/proc` about its process group.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold::demo::DemoStack;

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
