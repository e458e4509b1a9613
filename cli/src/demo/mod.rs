//! The embedded demo: a real run through the real clients, with no network
//! and no API key.
//!
//! [`DemoStack::start`] starts two real servers on 127.0.0.1, each on a port
//! of its own:
//!
//! - a **scripted OpenAI-compatible chat-completions server**
//!   (`POST /v1/chat/completions`, streamed as server-sent events or
//!   answered whole), stateless and deterministic: it tells the agents apart
//!   by their system prompts and the step by the assistant turns so far, and
//!   when the watchdog or a budget checkpoint asks — through
//!   [`ModelEvaluator`](leasehold::model::ModelEvaluator), with its own prompts — it answers their strict JSON
//!   by rule from the figures of the prompt;
//! - an **MCP tool server** over streamable HTTP (rmcp), with a slow log
//!   search that reports progress, a metrics fetch that hangs silently on
//!   its first call for an idempotency key and answers the retry with the
//!   same key, and a production rollback that goes silent.
//!
//! The engine ([`DemoStack::engine_builder`], built from the demo's
//! configuration as any other) uses the real
//! [`OpenAiClient`](leasehold::model::OpenAiClient), the real
//! [`ModelEvaluator`](leasehold::model::ModelEvaluator) and a real
//! [`McpToolClient`](leasehold::tools::McpToolClient) per run. [`drive`] runs the demo's flow — an incident
//! review in which the root spawns a logs, a metrics and a deploys worker —
//! and writes one line per interesting event, and the report
//! ([`DemoReport`]) counts what it showed:
//!
//! | scenario | the evidence of it |
//! |---|---|
//! | a slow model stream is kept alive by its chunks | `verdict` events of kind `model_stream` decided by `evidence`, none by `evaluator` |
//! | a slow tool is kept alive by its MCP progress | `progress` events, then `verdict`s of kind `tool_call` decided by `evidence` |
//! | a hung tool is intervened and retried with the same idempotency key | a `verdict` `INTERVENE` by `evaluator`, `restarted`, two `tool_call_started` with one key, and the tool server's record of that key twice |
//! | a worker's budget is extended | `budget_extended` |
//! | a silent production change is escalated and pauses the run | a `verdict` `ESCALATE`, `paused` (`waiting_human`), then `resumed` with the person's guidance |
//! | the run completes | `run_completed` |
//!
//! It takes about seven seconds and a half, two of them the pause with
//! [`Answer::auto`]; its summary's `took` line gives the figure of each run.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use leasehold::executor::{Executor, ExecutorOptions};
//! use leasehold_cli::demo::{Answer, DemoStack, drive};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // All in one: start, build, drive, summarise, shut down.
//! let mut out = std::io::stdout();
//! let report = leasehold_cli::demo::run(Answer::auto(), &mut out).await?;
//! assert!(report.as_expected());
//!
//! // Or piece by piece, with a store and event sink of one's own.
//! let stack = DemoStack::start().await?;
//! let engine = stack.engine_builder()?.build().await?;
//! let executor = Executor::new(Arc::new(engine), ExecutorOptions::command_line());
//! let mut report = drive(&executor, stack.flow(), Answer::External, &mut out).await?;
//! report.attach_server_record(&stack.idempotency_keys_seen());
//! report.write_summary(&mut out)?;
//! executor.shutdown().await?;
//! stack.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod drive;
mod flow;
mod judge;
mod provider;
mod report;
mod script;
mod tools;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use leasehold::config::{Config, EngineSetupError};
use leasehold::executor::{Executor, ExecutorOptions};
use leasehold::{ControlError, EngineBuilder, EngineError, Flow, MemoryStore, Store};

pub use drive::{drive, drive_with};
pub use report::{DemoReport, Extension, KeyedRetry, PauseAnswer, Responder};

use tools::{DemoTools, KeyRecord};

/// The model name of the loops, as the client sends it.
const MODEL_NAME: &str = provider::MODEL_NAME;

/// The model name of the `fast` role, which the watchdog and the budget
/// checkpoints ask.
const JUDGE_NAME: &str = "leasehold-demo-judge";

/// How long the demo's servers have to finish after [`DemoStack::shutdown`]
/// before they are stopped outright.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// The guidance of the automatic answer [`Answer::auto`].
pub const GUIDANCE: &str =
    "Do not roll back: the fix (v413) is already deploying. Report the deploy status.";

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A server could not listen on 127.0.0.1.
    #[error("the demo's {server} server could not listen on 127.0.0.1: {source}")]
    Bind {
        /// Which server: `model` or `tool`.
        server: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The engine could not be set up from the demo's configuration (its
    /// model client could not be built).
    #[error("the demo's engine could not be set up: {0}")]
    Setup(#[from] EngineSetupError),
    /// The engine could not be built or the run could not start.
    #[error("the demo's run could not start: {0}")]
    Start(#[from] EngineError),
    /// A person's answer could not be given to the run.
    #[error("the demo could not answer the paused run: {0}")]
    Control(#[from] ControlError),
    /// The log could not be written.
    #[error("the demo could not write its log: {0}")]
    Io(#[from] std::io::Error),
}

/// Who answers the run when it pauses for a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The driver answers `guidance`, `after` the pause began, so the pause
    /// is seen.
    Auto {
        /// How long the run visibly waits.
        after: Duration,
        /// What the person says.
        guidance: String,
    },
    /// The person at the terminal types the guidance, one line on standard
    /// input (an empty line resumes without guidance). At the end of the
    /// input the driver waits as with [`Answer::External`].
    Stdin,
    /// Someone else resumes the run — through the HTTP API or the dashboard
    /// — and the driver waits, logging, until they do.
    External,
}

impl Answer {
    /// The automatic answer: [`GUIDANCE`] after 2 s.
    pub fn auto() -> Self {
        Self::Auto {
            after: Duration::from_secs(2),
            guidance: GUIDANCE.to_owned(),
        }
    }
}

/// The demo's two servers, running on 127.0.0.1: the scripted model and the
/// MCP tool server. They stop on [`DemoStack::shutdown`] or when the stack
/// is dropped.
#[derive(Debug)]
pub struct DemoStack {
    model_addr: SocketAddr,
    tools_addr: SocketAddr,
    keys: Arc<KeyRecord>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    prices: leasehold::Prices,
}

impl DemoStack {
    /// The stack with `prices` for its models (`leasehold-demo` and the
    /// judge's, `leasehold-demo-judge`) in its configuration: the demo's
    /// run then says what it cost.
    pub fn priced(mut self, prices: leasehold::Prices) -> Self {
        self.prices = prices;
        self
    }

    /// Starts both servers, each on a free port of 127.0.0.1.
    pub async fn start() -> Result<DemoStack, DemoError> {
        let model = listen("model").await?;
        let tools = listen("tool").await?;
        let bound = |listener: &TcpListener, server| {
            listener
                .local_addr()
                .map_err(|source| DemoError::Bind { server, source })
        };
        let model_addr = bound(&model, "model")?;
        let tools_addr = bound(&tools, "tool")?;
        let shutdown = CancellationToken::new();
        let keys = Arc::new(KeyRecord::default());
        let tool_routes =
            axum::Router::new().nest_service("/mcp", DemoTools::service(keys.clone(), &shutdown));
        let tasks = vec![
            tokio::spawn(serve("model", model, provider::router(), shutdown.clone())),
            tokio::spawn(serve("tool", tools, tool_routes, shutdown.clone())),
        ];
        Ok(DemoStack {
            model_addr,
            tools_addr,
            keys,
            shutdown,
            tasks,
            prices: leasehold::Prices::default(),
        })
    }

    /// The scripted model's base URL, e.g. `http://127.0.0.1:PORT/v1`.
    pub fn model_base_url(&self) -> String {
        format!("http://{}/v1", self.model_addr)
    }

    /// The MCP tool server's URL, e.g. `http://127.0.0.1:PORT/mcp`.
    pub fn tools_url(&self) -> String {
        format!("http://{}/mcp", self.tools_addr)
    }

    /// The demo's flow, an incident review: a root that spawns a `logs`, a
    /// `metrics` and a `deploys` worker, on the tool server at
    /// [`DemoStack::tools_url`], with the idempotency of each tool declared
    /// (`search_logs` and `fetch_metrics` idempotent, `rollback_deploy` not)
    /// and the demo's timings as its lease and restart overrides.
    pub fn flow(&self) -> Flow {
        flow::flow(&self.tools_url())
    }

    /// The demo's configuration: short leases so that every rule shows
    /// within seconds — tool calls 0.3 s, model streams 1 s, worker steps
    /// 6 s, 2 free renewals, evaluator timeout 2 s, restarts after 0.2 s —
    /// and the scripted model as both the loops' model and the judge (no API
    /// key; connect timeout 2 s, idle timeout 10 s), over the defaults. Each
    /// value's source is `default`: it is set in code, by the demo, not by a
    /// file or a variable.
    pub fn config(&self) -> Config {
        Config {
            prices: self.prices.clone(),
            ..flow::config(&self.model_base_url())
        }
    }

    /// An engine builder from the demo's configuration
    /// ([`Config::engine_builder_with_store`]): the real model client on the
    /// scripted model, the real evaluator on it, and a factory of real MCP
    /// clients, one per run, over an in-memory store. Add a store of your
    /// own or an event sink, then build.
    pub fn engine_builder(&self) -> Result<EngineBuilder, DemoError> {
        Ok(self
            .config()
            .engine_builder_with_store(Arc::new(MemoryStore::new()))?)
    }

    /// Every `(tool, idempotency key)` the tool server has been called with,
    /// in order.
    pub fn idempotency_keys_seen(&self) -> Vec<(String, String)> {
        self.keys.snapshot()
    }

    /// Stops both servers: hanging tool calls end, open sessions close, and
    /// the servers finish (or are stopped after a short grace).
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        for mut task in std::mem::take(&mut self.tasks) {
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}

impl Drop for DemoStack {
    fn drop(&mut self) {
        self.shutdown.cancel();
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn listen(server: &'static str) -> Result<TcpListener, DemoError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .map_err(|source| DemoError::Bind { server, source })
}

async fn serve(
    server: &'static str,
    listener: TcpListener,
    routes: axum::Router,
    shutdown: CancellationToken,
) {
    let served = axum::serve(listener, routes)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
    if let Err(error) = served {
        tracing::warn!(server, %error, "a demo server stopped");
    }
}

/// Runs the whole demo: starts the servers, builds the engine (in-memory
/// store), drives the run with `answer`, writes the log and the summary to
/// `out`, shuts the servers down, and returns the report with the tool
/// server's record attached.
pub async fn run(
    answer: Answer,
    out: &mut (impl std::io::Write + Send),
) -> Result<DemoReport, DemoError> {
    match run_until(
        answer,
        out,
        std::future::pending::<std::convert::Infallible>(),
    )
    .await?
    {
        Ok(report) => Ok(report),
        Err(never) => match never {},
    }
}

/// [`run`], unless `stop` completes first (a signal, say): then the run is
/// stopped in place — its engine shut down as an exiting executor's would
/// be —, the servers are shut down, and the answer is `Err` with what
/// `stop` gave.
pub async fn run_until<T>(
    answer: Answer,
    out: &mut (impl std::io::Write + Send),
    stop: impl Future<Output = T> + Send,
) -> Result<Result<DemoReport, T>, DemoError> {
    let store = Arc::new(MemoryStore::new());
    run_until_in(store, leasehold::Prices::default(), answer, out, stop).await
}

/// [`run_until`] with the run kept in `store` (the command's data
/// directory, say), where `leasehold runs show` and the dashboard find it
/// afterwards, and its calls priced at `prices` (the configuration's).
pub async fn run_until_in<T>(
    store: Arc<dyn Store>,
    prices: leasehold::Prices,
    answer: Answer,
    out: &mut (impl std::io::Write + Send),
    stop: impl Future<Output = T> + Send,
) -> Result<Result<DemoReport, T>, DemoError> {
    let stack = DemoStack::start().await?.priced(prices);
    let outcome = drive_on(&stack, store, answer, out, stop).await;
    stack.shutdown().await;
    outcome
}

async fn drive_on<T>(
    stack: &DemoStack,
    store: Arc<dyn Store>,
    answer: Answer,
    out: &mut (impl std::io::Write + Send),
    stop: impl Future<Output = T> + Send,
) -> Result<Result<DemoReport, T>, DemoError> {
    let engine = stack.engine_builder()?.store(store).build().await?;
    // Its trace, to the collector OTEL_EXPORTER_OTLP_ENDPOINT names.
    let mut traces = crate::cli::Traces::start(&engine);
    let executor = Executor::new(Arc::new(engine), ExecutorOptions::command_line());
    let driven = tokio::select! {
        driven = drive(&executor, stack.flow(), answer, &mut *out) => Ok(driven),
        stopped = stop => Err(stopped),
    };
    executor.shutdown().await?;
    traces.finish(executor.engine()).await;
    let mut report = match driven {
        Ok(driven) => driven?,
        Err(stopped) => return Ok(Err(stopped)),
    };
    report.attach_server_record(&stack.idempotency_keys_seen());
    report.write_summary(out)?;
    Ok(Ok(report))
}
