//! A fixture for the real MCP peer `@modelcontextprotocol/server-everything`:
//! finds it, describes it as a flow's tool server over stdio, runs it over
//! streamable HTTP on a free port, and records what a client sends it.
//!
//! Guarantees: a test that needs the peer and cannot find it **fails** with a
//! message saying how to install it (it never skips); every HTTP server this
//! fixture starts is killed by PID when its [`HttpServer`] is dropped; every
//! recording proxy stops when its [`RecordingProxy`] is dropped.
//!
//! What is recorded is what reached the server's door — its standard input,
//! or the bytes its HTTP socket received — as JSON-RPC messages, so a test
//! can check that a cancel or an idempotency key was really sent.

use std::net::TcpListener as StdTcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::ToolServer;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The environment variable that points at the peer's `dist/index.js`.
pub const PEER_ENV: &str = "LEASEHOLD_PEER_SERVER_EVERYTHING";

/// How long a starting HTTP server may take to accept connections.
const STARTUP: Duration = Duration::from_secs(15);

/// The peer's `dist/index.js`. Panics, with what to do, when it is not
/// installed.
pub fn index_js() -> PathBuf {
    let path = std::env::var_os(PEER_ENV).unwrap_or_else(|| {
        panic!(
            "{PEER_ENV} is not set: this test runs against the real MCP server \
             @modelcontextprotocol/server-everything. Run scripts/test.sh, which installs \
             the peers, or eval \"$(scripts/peers.sh)\" before cargo test"
        )
    });
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "{PEER_ENV} points at {}, which does not exist: run scripts/peers.sh to install the peers",
        path.display()
    );
    path
}

fn node_command(index: &Path) -> Vec<String> {
    vec![
        "node".to_owned(),
        index.display().to_string(),
        "stdio".to_owned(),
    ]
}

fn tool_server(value: Value) -> ToolServer {
    serde_json::from_value(value).expect("a valid tool server entry")
}

/// The peer as a stdio tool server named `name`: `node INDEX stdio`.
pub fn stdio_server(name: &str) -> ToolServer {
    tool_server(serde_json::json!({"name": name, "command": node_command(&index_js())}))
}

/// The peer as a stdio tool server named `name` whose standard input is
/// also appended to `log` on its way in (`sh -c 'tee -a LOG | node INDEX
/// stdio'`): three processes in one group. Read the log with
/// [`recorded_stdio`].
pub fn recorded_stdio_server(name: &str, log: &Path) -> ToolServer {
    let script = r#"tee -a "$0" | exec node "$1" stdio"#;
    tool_server(serde_json::json!({
        "name": name,
        "command": ["sh", "-c", script, log.display().to_string(), index_js().display().to_string()],
    }))
}

/// The JSON-RPC messages a recorded stdio server was sent so far.
pub fn recorded_stdio(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    let listener = StdTcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("an address").port()
}

/// The peer over streamable HTTP, on a port of its own, killed when dropped.
pub struct HttpServer {
    port: u16,
    child: Option<Child>,
}

impl HttpServer {
    /// Starts the peer on a free port and waits until it accepts
    /// connections.
    pub async fn start() -> Self {
        let mut server = Self {
            port: free_port(),
            child: None,
        };
        server.restart().await;
        server
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The process id of the running server.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server as a flow's tool server named `name`.
    pub fn tool_server(&self, name: &str) -> ToolServer {
        tool_server(serde_json::json!({"name": name, "url": self.url()}))
    }

    /// Kills the server (SIGKILL, as a crash would) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (killing it first if it
    /// runs) and waits until it accepts connections.
    pub async fn restart(&mut self) {
        self.kill();
        let child = Command::new("node")
            .arg(index_js())
            .arg("streamableHttp")
            .env("PORT", self.port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node starts (is Node.js installed?)");
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + STARTUP;
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).await.is_ok() {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "the MCP HTTP server exited before it listened on port {} ({status})",
                    self.port
                );
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the MCP HTTP server did not listen on port {} within {STARTUP:?}",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP proxy in front of an HTTP server that keeps every byte clients
/// send through it. Stops when dropped.
pub struct RecordingProxy {
    port: u16,
    sent: Arc<Mutex<Vec<u8>>>,
    task: JoinHandle<()>,
}

impl RecordingProxy {
    /// A proxy on a free port forwarding to `127.0.0.1:upstream_port`.
    pub async fn start(upstream_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("the proxy binds");
        let port = listener.local_addr().expect("an address").port();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(accept(listener, upstream_port, sent.clone()));
        Self { port, sent, task }
    }

    /// The MCP endpoint through the proxy.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The proxy as a flow's tool server named `name`.
    pub fn tool_server(&self, name: &str) -> ToolServer {
        tool_server(serde_json::json!({"name": name, "url": self.url()}))
    }

    /// Every byte sent through so far, as text: request lines, headers and
    /// bodies.
    pub fn sent_text(&self) -> String {
        let sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&sent).into_owned()
    }

    /// The JSON-RPC messages (HTTP request bodies) sent through so far.
    pub fn recorded(&self) -> Vec<Value> {
        let sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        let text = String::from_utf8_lossy(&sent);
        text.split("\r\n\r\n")
            .skip(1)
            .filter_map(|after_headers| {
                serde_json::Deserializer::from_str(after_headers)
                    .into_iter::<Value>()
                    .next()
                    .and_then(Result::ok)
            })
            .collect()
    }
}

impl Drop for RecordingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, upstream_port: u16, sent: Arc<Mutex<Vec<u8>>>) {
    // Dropped with this task: the connections end with the proxy.
    let mut connections = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let sent = sent.clone();
        connections.spawn(async move {
            if let Ok(upstream) = TcpStream::connect(("127.0.0.1", upstream_port)).await {
                forward(client, upstream, sent).await;
            }
        });
    }
}

async fn forward(client: TcpStream, upstream: TcpStream, sent: Arc<Mutex<Vec<u8>>>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    let inbound = async {
        let mut buffer = vec![0_u8; 16 * 1024];
        loop {
            match client_read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    sent.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .extend_from_slice(&buffer[..n]);
                    if upstream_write.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = upstream_write.shutdown().await;
    };
    let outbound = async {
        let _ = tokio::io::copy(&mut upstream_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::join!(inbound, outbound);
}

/// Whether process `pid` is running (Linux): some thread of it exists and
/// is not a zombie. A killed multi-threaded process shows its main thread
/// as a zombie while the others are still dying, and cannot be reaped
/// until they are gone.
pub fn process_alive(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).any(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| state_of(&stat))
            .is_some_and(|state| state != 'Z' && state != 'X')
    })
}

/// The processes of process group `pgid` that are running (Linux).
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

fn state_of(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Kills process `pid` with SIGKILL, as a crash would.
pub fn kill_process(pid: u32) {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -KILL {pid} failed");
}

/// Waits up to `within` for `condition`; whether it held.
pub async fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
