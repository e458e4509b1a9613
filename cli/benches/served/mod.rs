//! What the benchmarks that drive a real `leasehold serve` share: the
//! server started on a loopback port, and the figures read from outside
//! it (its resident set, its store's size on disk).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// `leasehold serve` on a free loopback port, with a clean environment
/// but `PATH` and `env`, its model at `model` named `name`, the
/// `--set` flags `set`; its process and base URL.
pub async fn serve(
    model: &str,
    name: &str,
    set: &[String],
    env: &[(&str, &str)],
) -> (Child, String) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LEASEHOLD_MODEL_BASE_URL", model)
        .env("LEASEHOLD_MODEL_NAME", name)
        .envs(env.iter().copied())
        .args(set)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("leasehold serve starts");
    let mut lines = BufReader::new(server.stdout.take().expect("piped")).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("serve says where it listens")
        .expect("read")
        .expect("a line");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("a URL")
        .trim_end_matches('/')
        .to_owned();
    (server, base)
}

/// The resident set of process `pid`, in bytes.
pub fn rss(pid: u32) -> u64 {
    status_kb(pid, "VmRSS:")
}

/// The highest resident set process `pid` has had, in bytes: the peak
/// between two samples too.
#[allow(dead_code, reason = "not every benchmark reads the peak")]
pub fn hwm(pid: u32) -> u64 {
    status_kb(pid, "VmHWM:")
}

/// A `kB` line of `/proc/PID/status`, in bytes.
fn status_kb(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The bytes of every file under `dir`.
pub fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => size_of(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}
