//! The `leasehold` binary as the tests start it: a clean environment (only
//! `PATH` and what the test sets), no stdin, killed when dropped;
//! `leasehold serve`, waited on until it says where it listens; what a
//! command said once it ended; and the signals a test sends it.

use std::ffi::OsStr;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use leasehold_cli::demo::DemoStack;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::PATIENCE;

/// The `leasehold` command of a test. It is a [`Command`] (through
/// `Deref`), with by-value settings for what tests set again and again.
#[derive(Debug)]
pub struct Leasehold(Command);

/// The `leasehold` binary with a clean environment (only `PATH`), no
/// stdin, killed when dropped.
pub fn clean_leasehold() -> Leasehold {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    Leasehold(command)
}

/// [`clean_leasehold`] on the data directory `data`.
pub fn leasehold(data: &Path) -> Leasehold {
    clean_leasehold().with_env("LEASEHOLD_DATA_DIR", data)
}

/// [`clean_leasehold`] on the run store at `store` (`LEASEHOLD_STORE`: a
/// data directory or a PostgreSQL URL).
pub fn leasehold_on_store(store: &str) -> Leasehold {
    clean_leasehold().with_env("LEASEHOLD_STORE", store)
}

impl Leasehold {
    /// Its runs call the model `name` at `base_url`.
    pub fn model(self, base_url: impl AsRef<OsStr>, name: &str) -> Self {
        self.with_env("LEASEHOLD_MODEL_BASE_URL", base_url)
            .with_env("LEASEHOLD_MODEL_NAME", name)
    }

    /// Its runs call the embedded demo's scripted model.
    pub fn demo_model(self, stack: &DemoStack) -> Self {
        self.model(stack.model_base_url(), "leasehold-demo")
    }

    /// It reads the configuration file `path` (`LEASEHOLD_CONFIG`).
    pub fn config(self, path: impl AsRef<OsStr>) -> Self {
        self.with_env("LEASEHOLD_CONFIG", path)
    }

    /// `leasehold serve` asks every client for `token`.
    pub fn api_token(self, token: &str) -> Self {
        self.with_env("LEASEHOLD_API_TOKEN", token)
    }

    /// The variable `name` set to `value`.
    pub fn with_env(mut self, name: &str, value: impl AsRef<OsStr>) -> Self {
        self.0.env(name, value);
        self
    }

    /// Each of `vars` set.
    pub fn with_envs<'a>(mut self, vars: impl IntoIterator<Item = &'a (&'a str, &'a str)>) -> Self {
        self.0.envs(vars.into_iter().copied());
        self
    }
}

impl Deref for Leasehold {
    type Target = Command;

    fn deref(&self) -> &Command {
        &self.0
    }
}

impl DerefMut for Leasehold {
    fn deref_mut(&mut self) -> &mut Command {
        &mut self.0
    }
}

impl From<Leasehold> for Command {
    fn from(leasehold: Leasehold) -> Command {
        leasehold.0
    }
}

/// `leasehold serve` from `command` (see [`leasehold`]) on a free loopback
/// port with the flags `flags`, its log dropped; the process and its base
/// URL once it listens.
pub async fn serve(
    command: impl Into<Command>,
    flags: &[&str],
    patience: Duration,
) -> (Child, String) {
    serve_on(command, "127.0.0.1:0", flags, patience).await
}

/// [`serve`] on `addr` (a port given again after a restart).
pub async fn serve_on(
    command: impl Into<Command>,
    addr: &str,
    flags: &[&str],
    patience: Duration,
) -> (Child, String) {
    let mut server = start_serve(command, addr, flags);
    let base = served_base(&mut server, patience).await;
    (server, base)
}

/// `leasehold serve` from `command` on `addr` with the flags `flags`, its
/// stdout piped for [`served_base`] and its log dropped, not yet waited on
/// (a test that starts several reads their bases after).
pub fn start_serve(command: impl Into<Command>, addr: &str, flags: &[&str]) -> Child {
    let mut command = command.into();
    command
        .args(["serve", "--addr", addr])
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve starts")
}

/// The base URL `leasehold serve` prints on its first line (`leasehold
/// serving on http://ADDR/ …`), read from its piped stdout within
/// `patience`. The rest of its stdout is drained in the background.
pub async fn served_base(server: &mut Child, patience: Duration) -> String {
    let mut lines = BufReader::new(server.stdout.take().expect("serve's stdout is piped")).lines();
    let line = tokio::time::timeout(patience, lines.next_line())
        .await
        .expect("serve says where it listens")
        .expect("read")
        .expect("a line");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("a URL")
        .trim_end_matches('/')
        .to_owned()
}

/// What a command said, once it ended.
pub struct Output {
    /// Its exit code (none if a signal ended it).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// `command` run to its end with both its outputs read, within
/// [`PATIENCE`]: a command that does not end is killed, and the failure
/// shows what it said so far.
pub async fn output(command: &mut Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command runs");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let read_out = tokio::spawn(async move {
        let mut text = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut stdout, &mut text).await;
        String::from_utf8_lossy(&text).into_owned()
    });
    let read_err = tokio::spawn(async move {
        let mut text = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut stderr, &mut text).await;
        String::from_utf8_lossy(&text).into_owned()
    });
    let waited = tokio::time::timeout(PATIENCE, child.wait()).await;
    if waited.is_err() {
        let _ = child.kill().await;
    }
    let stdout = read_out.await.unwrap_or_default();
    let stderr = read_err.await.unwrap_or_default();
    let Ok(status) = waited else {
        panic!("the command did not end within {PATIENCE:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    };
    Output {
        code: status.expect("wait").code(),
        stdout,
        stderr,
    }
}

/// `kill SIGNAL PID` (`-STOP`, `-CONT`, `-KILL`, …) sent to the process
/// `child`, which must still run.
pub fn signal(child: &Child, signal: &str) {
    signal_pid(signal, child.id().expect("the process runs"));
}

/// `kill SIGNAL PID` sent to the process `pid`.
pub fn signal_pid(signal: &str, pid: u32) {
    let pid = pid.to_string();
    let status = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} {pid}");
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
