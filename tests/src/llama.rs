//! A fixture that runs llama.cpp's `llama-server` on a real small instruct
//! model, for end-to-end tests of the model client against real inference:
//! an OpenAI-compatible `/v1/chat/completions` that streams what a model
//! really generates, at the pace it generates it.
//!
//! Each [`LlamaServer`] is one server process of its own on `127.0.0.1`, on
//! a port picked free by the system, with its model loaded before
//! [`LlamaServer::start`] returns, and killed (by its process id) when the
//! fixture is dropped, so tests never share a server nor leave one behind.
//!
//! The server runs on one thread with two slots (`--parallel 2`): two
//! requests are generated at once, a third waits for a free slot. The
//! context of `--ctx-size` is split between the slots (`--no-kv-unified`),
//! so each slot holds [`SLOT_CONTEXT`] tokens of prompt and answer, and a
//! longer request is refused with llama.cpp's `exceed_context_size_error`.
//! What each slot is doing is read back with [`LlamaServer::busy_slots`]
//! (`GET /slots`).
//!
//! A caveat of the server that tests must respect: a streamed request whose
//! client goes away is cancelled at its next token, but a blocking one only
//! once a whole second passes in which the server hands no result to any
//! request — the answer to each `GET /slots`, and each token of another
//! streamed request, is such a result. Polling [`LlamaServer::busy_slots`]
//! more often than once a second keeps a forsaken blocking request
//! generating to its end.
//!
//! The server and the model are the ones installed by `scripts/peers.sh`,
//! named by `LEASEHOLD_PEER_LLAMA_SERVER` and `LEASEHOLD_PEER_LLAMA_MODEL`.
//! When either variable is unset the fixture fails the test with a message
//! saying how to set it: these tests are part of the suite and must not be
//! skipped silently.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

/// The variable that names the `llama-server` executable.
pub const SERVER_VARIABLE: &str = "LEASEHOLD_PEER_LLAMA_SERVER";

/// The variable that names the model, a GGUF file.
pub const MODEL_VARIABLE: &str = "LEASEHOLD_PEER_LLAMA_MODEL";

/// How many requests the server generates at once.
pub const SLOTS: usize = 2;

/// The tokens of prompt and answer one slot holds.
pub const SLOT_CONTEXT: u32 = 2048;

/// How long the server may take to load its model and answer. Loading the
/// model takes about two seconds on an idle machine; the bound is for a
/// machine busy compiling.
const STARTUP: Duration = Duration::from_secs(120);

/// One running `llama-server`. Killed when dropped.
#[derive(Debug)]
pub struct LlamaServer {
    child: Child,
    port: u16,
    model: PathBuf,
    log: Arc<Mutex<String>>,
    http: reqwest::Client,
}

/// The path a peer variable names, or a failure that says how to set it.
fn peer_path(variable: &str, what: &str) -> PathBuf {
    match std::env::var_os(variable) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => panic!(
            "{variable} is not set, so the llama-server peer cannot be started without {what}: \
             run scripts/test.sh, which installs the peers \
             (or eval \"$(bash scripts/peers.sh)\" before cargo test)"
        ),
    }
}

/// The `llama-server` executable, or a failure that says how to get one.
pub fn executable() -> PathBuf {
    peer_path(SERVER_VARIABLE, "its executable")
}

/// The name `llama-server` answers to when it serves [`model`] (its file's
/// stem), known before it starts.
pub fn model_name() -> String {
    name_of(&model())
}

fn name_of(model: &std::path::Path) -> String {
    model
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_owned())
}

/// The model file, or a failure that says how to get one.
pub fn model() -> PathBuf {
    let model = peer_path(MODEL_VARIABLE, "a model");
    assert!(
        model.is_file(),
        "{MODEL_VARIABLE} names {}, which is not a file: run scripts/peers.sh again",
        model.display()
    );
    model
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port on 127.0.0.1");
    listener
        .local_addr()
        .expect("the bound port has an address")
        .port()
}

/// Copies each line the server writes to its standard error into `log`,
/// and tells `lines` that one came; the channel closes when the server
/// closes its standard error, that is when it exits.
fn follow_log(stderr: ChildStderr, log: Arc<Mutex<String>>, lines: mpsc::UnboundedSender<()>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            {
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                log.push_str(&line);
                log.push('\n');
            }
            // The receiver is gone once the server is ready; the log is
            // still kept.
            let _ = lines.send(());
        }
    });
}

impl LlamaServer {
    /// Starts a server on the installed model and waits until it answers
    /// with the model loaded.
    pub async fn start() -> Self {
        Self::start_on(free_port()).await
    }

    /// [`Self::start`] on `port`: a server started again where one was
    /// stopped ([`Self::kill`]), as a provider comes back.
    pub async fn start_on(port: u16) -> Self {
        let executable = executable();
        let model = model();
        let total_context = SLOT_CONTEXT * u32::try_from(SLOTS).expect("a few slots");
        let mut command = Command::new(&executable);
        command
            .arg("--model")
            .arg(&model)
            .args(["--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["--threads", "1", "--parallel"])
            .arg(SLOTS.to_string())
            .arg("--ctx-size")
            .arg(total_context.to_string())
            // Each slot its own share of the context, rather than one pool
            // the slots draw from.
            .arg("--no-kv-unified")
            // On the CPU even where a GPU is found: the same server on
            // every machine.
            .args(["--device", "none"])
            .args(["--slots", "--no-webui", "--log-colors", "off"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "could not start llama-server ({}): {e}; {SERVER_VARIABLE} must name the \
                 llama-server executable installed by scripts/peers.sh",
                executable.display()
            )
        });
        let log = Arc::new(Mutex::new(String::new()));
        let (lines, mut line_came) = mpsc::unbounded_channel();
        let stderr = child.stderr.take().expect("the standard error is piped");
        follow_log(stderr, log.clone(), lines);
        let mut server = Self {
            child,
            port,
            model,
            log,
            http: reqwest::Client::new(),
        };
        server.wait_until_ready(&mut line_came).await;
        server
    }

    /// Waits, line by line of the server's log, until `/health` says the
    /// model is loaded. The server sets itself ready just before it logs
    /// `model loaded`, so each new line is the moment to ask again; a
    /// server that stops logging without becoming ready is caught by the
    /// bound, and its log is shown.
    async fn wait_until_ready(&mut self, line_came: &mut mpsc::UnboundedReceiver<()>) {
        let deadline = tokio::time::Instant::now() + STARTUP;
        loop {
            match tokio::time::timeout_at(deadline, line_came.recv()).await {
                Err(_) => panic!(
                    "llama-server did not load its model and answer on port {} within \
                     {STARTUP:?}:\n{}",
                    self.port,
                    self.log_text()
                ),
                Ok(None) => {
                    let status = self.child.wait();
                    panic!(
                        "llama-server exited ({status:?}) before answering on port {}:\n{}",
                        self.port,
                        self.log_text()
                    );
                }
                Ok(Some(())) => {
                    if self.is_healthy().await {
                        return;
                    }
                }
            }
        }
    }

    async fn is_healthy(&self) -> bool {
        let health = format!("http://127.0.0.1:{}/health", self.port);
        match self.http.get(health).send().await {
            Ok(response) => response.status().is_success(),
            Err(_) => false,
        }
    }

    /// What the server wrote to its log so far.
    pub fn log_text(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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

    /// The name of the model it serves: its file's name without `.gguf`.
    /// The server answers whatever model a request names; this one is for
    /// what the client records.
    pub fn model_name(&self) -> String {
        name_of(&self.model)
    }

    /// Kills the process (SIGKILL) and reaps it: its port refuses every
    /// connection until a server starts on it again.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the process (SIGSTOP): its sockets stay open and say nothing.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// Continues a frozen process (SIGCONT).
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let pid = self.pid();
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} {pid} failed");
    }

    /// Each slot as `GET /slots` shows it (`id`, `n_ctx`, `is_processing`,
    /// and, once it has served a request, that request's state).
    pub async fn slots(&self) -> Vec<Value> {
        let url = format!("http://127.0.0.1:{}/slots", self.port);
        let response = self
            .http
            .get(url)
            .send()
            .await
            .expect("llama-server answers GET /slots");
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert!(status.is_success(), "GET /slots: {status} {body}");
        match serde_json::from_str(&body) {
            Ok(Value::Array(slots)) => slots,
            _ => panic!("GET /slots is not a JSON array: {body}"),
        }
    }

    /// How many slots are generating a request now (`is_processing`).
    pub async fn busy_slots(&self) -> usize {
        self.slots()
            .await
            .iter()
            .filter(|slot| {
                slot.get("is_processing")
                    .and_then(Value::as_bool)
                    .unwrap_or_else(|| panic!("a slot without is_processing: {slot}"))
            })
            .count()
    }

    /// Asks [`LlamaServer::busy_slots`] every `every` until it is `busy`,
    /// and says how long that took; fails the test, with the server's log,
    /// past `bound`.
    pub async fn wait_for_busy_slots(
        &self,
        busy: usize,
        every: Duration,
        bound: Duration,
    ) -> Duration {
        let started = tokio::time::Instant::now();
        loop {
            let now = self.busy_slots().await;
            if now == busy {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < bound,
                "{now} slots still busy after {bound:?}, waiting for {busy}:\n{}",
                self.log_text()
            );
            tokio::time::sleep(every).await;
        }
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        // SIGKILL to this server's own process id (a frozen one too), then
        // reap it; the log thread ends with its standard error.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
