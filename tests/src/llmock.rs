//! A fixture that runs llmock, an OpenAI-compatible mock server with fault
//! injection, for end-to-end tests of the model client.
//!
//! Each [`Llmock`] is one server process of its own on `127.0.0.1`, on a
//! port picked free by the system, answering before [`Llmock::start`]
//! returns, and killed (by its process id) when the fixture is dropped, so
//! tests never share a server nor leave one behind. Faults are scripted per
//! request with [`Llmock::scenario`] (llmock's `POST /_llmock/scenario`), and
//! what the server saw is read back with [`Llmock::requests`].
//!
//! The server is the one installed by `scripts/peers.sh`, named by
//! `LEASEHOLD_PEER_LLMOCK`. When that variable is unset the fixture fails
//! the test with a message saying how to set it: these tests are part of
//! the suite and must not be skipped silently.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The variable that names the llmock executable.
pub const PEER_VARIABLE: &str = "LEASEHOLD_PEER_LLMOCK";

/// How long a server may take to start answering.
const STARTUP: Duration = Duration::from_secs(30);

/// Start-up options of one server.
#[derive(Clone, Debug, Default)]
pub struct LlmockOptions {
    /// Pause between streamed chunks, in milliseconds (0: none).
    pub chunk_delay_ms: u64,
    /// `auto` (call offered tools, then answer) or `off`; llmock's default
    /// is `auto`.
    pub tool_mode: Option<String>,
}

impl LlmockOptions {
    /// Options with a pause of `ms` milliseconds between streamed chunks.
    pub fn chunk_delay_ms(ms: u64) -> Self {
        Self {
            chunk_delay_ms: ms,
            ..Self::default()
        }
    }
}

/// One running llmock server. Killed when dropped.
#[derive(Debug)]
pub struct Llmock {
    child: Child,
    port: u16,
    log: PathBuf,
    http: reqwest::Client,
}

/// The llmock executable, or a failure that says how to get one.
pub fn executable() -> PathBuf {
    match std::env::var_os(PEER_VARIABLE) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => panic!(
            "{PEER_VARIABLE} is not set, so the llmock peer cannot be started: \
             run scripts/test.sh, which installs the peers \
             (or eval \"$(bash scripts/peers.sh)\" before cargo test)"
        ),
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port on 127.0.0.1");
    listener
        .local_addr()
        .expect("the bound port has an address")
        .port()
}

impl Llmock {
    /// Starts a server with the default options and waits until it answers.
    pub async fn start() -> Self {
        Self::start_with(LlmockOptions::default()).await
    }

    /// Starts a server with `options` and waits until it answers.
    pub async fn start_with(options: LlmockOptions) -> Self {
        let executable = executable();
        let port = free_port();
        let log = std::env::temp_dir().join(format!(
            "leasehold-llmock-{}-{port}.log",
            std::process::id()
        ));
        let log_file = std::fs::File::create(&log).expect("create the llmock log file");
        let mut command = Command::new(&executable);
        command
            .args(["serve", "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["--log-level", "warning"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        if options.chunk_delay_ms > 0 {
            command
                .arg("--stream-chunk-delay-ms")
                .arg(options.chunk_delay_ms.to_string());
        }
        if let Some(mode) = &options.tool_mode {
            command.args(["--tool-mode", mode]);
        }
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "could not start llmock ({}): {e}; {PEER_VARIABLE} must name the llmock executable \
                 installed by scripts/peers.sh",
                executable.display()
            )
        });
        let mut server = Self {
            child,
            port,
            log,
            http: reqwest::Client::new(),
        };
        server.wait_until_ready().await;
        server
    }

    async fn wait_until_ready(&mut self) {
        let started = Instant::now();
        let health = format!("http://127.0.0.1:{}/health", self.port);
        loop {
            if let Ok(response) = self.http.get(&health).send().await
                && response.status().is_success()
            {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "llmock exited ({status}) before answering on port {}:\n{}",
                    self.port,
                    self.log_text()
                );
            }
            assert!(
                started.elapsed() < STARTUP,
                "llmock did not answer on port {} within {STARTUP:?}:\n{}",
                self.port,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the server wrote to its log.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The base URL of its OpenAI-compatible API (`…/v1`).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Queues `behaviors` (a JSON array of llmock behaviours, e.g.
    /// `[{"type": "fail", "status": 429, "retry_after": 1}]`) for the next
    /// requests.
    pub async fn scenario(&self, behaviors: Value) {
        let url = format!("http://127.0.0.1:{}/_llmock/scenario", self.port);
        let response = self
            .http
            .post(url)
            .json(&serde_json::json!({ "behaviors": behaviors }))
            .send()
            .await
            .expect("llmock accepts a scenario");
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert!(
            status.is_success(),
            "llmock refused the scenario: {status} {body}"
        );
    }

    /// Every request the server served, oldest first, as llmock journals
    /// them (`started_at`, `ended_at` in seconds of its monotonic clock,
    /// `status`, `body`, `fault`, …).
    pub async fn requests(&self) -> Vec<Value> {
        let url = format!("http://127.0.0.1:{}/_llmock/requests", self.port);
        let journal: Value = self
            .http
            .get(url)
            .send()
            .await
            .expect("llmock answers its journal")
            .json()
            .await
            .expect("the journal is JSON");
        journal
            .get("requests")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Llmock {
    fn drop(&mut self) {
        // SIGKILL to this server's own process id, then reap it.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}
