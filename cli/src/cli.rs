//! The `leasehold` command: the demo, running a flow, the server, the runs
//! in a data directory (or on a server), and the effective configuration.
//!
//! Configuration comes in four layers, each overriding the one before:
//! defaults, the TOML file (`--config` or `LEASEHOLD_CONFIG`), `LEASEHOLD_*`
//! variables, then flags (`--data-dir`, `--durability`, and `--set KEY=VALUE`
//! for any key). `leasehold config` shows where each value came from.
//!
//! Exit codes: 0 when the run completed (or the command did what it was
//! asked), 3 when the run is paused waiting for a person, 1 when it failed
//! or was cancelled or the command could not be done, 2 for a usage error,
//! 130 after SIGINT (Ctrl-C), 143 after SIGTERM and 129 after SIGHUP (the
//! terminal closed) stopped `run`, `runs resume`, `demo` or `serve` (the
//! runs stay in the store, resumable with `leasehold runs resume`, and every
//! stdio tool server is killed).
//!
//! What a command says goes through `say!` (a line on stderr) and `out!`
//! (a line on stdout), which drop what cannot be written: a closed
//! terminal or a reader that left (`leasehold runs list | head -1`) costs
//! the words, never a panic in the middle of stopping a run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use std::sync::Arc;

use leasehold::{EngineBuilder, EngineError, RunStatus, VerdictPolicy};

use leasehold::config::{Config, EngineSetupError, Flag, LoadError};
use leasehold::executor::{Executor, ExecutorOptions};

/// A line on stderr, as `eprintln!` writes it, dropped if it cannot be
/// written (the terminal closed): never a panic.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// A line on stdout, as `println!` writes it, dropped if it cannot be
/// written (the reader left): never a panic.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

mod demo;
mod experiment;
mod keys;
mod log;
mod many;
mod paces;
mod reader;
mod remote;
mod runs;
mod scrubbed_log;
mod serve;
mod signal;
mod traces;

pub use scrubbed_log::ScrubbedStderr;
pub use traces::Traces;

/// Exit code of a run that waits for a person.
pub const EXIT_PAUSED: u8 = 3;

/// Exit code after SIGINT (Ctrl-C) stopped the command: its runs stay in
/// the store, resumable (128 + 2).
pub const EXIT_INTERRUPTED: u8 = 130;

/// Exit code after SIGTERM stopped the command: its runs stay in the store,
/// resumable (128 + 15).
pub const EXIT_TERMINATED: u8 = 143;

/// Exit code after SIGHUP (its terminal closed) stopped the command: its
/// runs stay in the store, resumable (128 + 1).
pub const EXIT_HUNG_UP: u8 = 129;

/// How long the runtime may take, once the command is done, to end what is
/// left of its tasks and blocking threads (a tool server's group still being
/// reaped): past it the process exits anyway.
const RUNTIME_SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// leasehold: agent runs supervised by leases instead of deadlines.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// How the log is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for a person.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `fields`, `target`,
    /// the current `span` and the list of `spans` it is in (a run's span
    /// carries `run_id` and `trace_id`).
    Json,
}

/// Flags every command takes: the fourth configuration layer.
#[derive(Debug, Args)]
struct GlobalArgs {
    /// The TOML configuration file (otherwise LEASEHOLD_CONFIG).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The run store's directory (LEASEHOLD_DATA_DIR).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<String>,
    /// The PostgreSQL run store, postgres://… (LEASEHOLD_STORE); without
    /// it, the sled store at --data-dir.
    #[arg(long, global = true, value_name = "URL")]
    store: Option<String>,
    /// When a store write counts as done: sync, async or exit.
    #[arg(long, global = true, value_name = "MODE")]
    durability: Option<String>,
    /// Any configuration key, as in the file: `--set lease.tool_call=90s`.
    #[arg(long = "set", global = true, value_name = "KEY=VALUE", value_parser = Flag::parse_set)]
    set: Vec<Flag>,
    /// How the log on standard error is written: `text` for a person, or
    /// `json`, one object a line, each line within a run carrying its
    /// `run_id` and `trace_id` (in `spans`) for a log search.
    #[arg(
        long,
        global = true,
        value_name = "FORMAT",
        env = "LEASEHOLD_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: LogFormat,
    /// Verdict policies of the embedder's own ([`Cli::with_policy`]): the
    /// engines of `run`, `serve` and `runs` register them, and
    /// `experiment` compares them beside the built-ins.
    #[arg(skip)]
    policies: Vec<Arc<dyn VerdictPolicy>>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the demo: a multi-agent incident review against a local scripted
    /// model server and a local MCP tool server, with no network and no key.
    Demo(demo::DemoArgs),
    /// Run a flow file in this process against the configured model and tools.
    Run(RunArgs),
    /// Serve the HTTP API, its live event streams and the dashboard.
    Serve(ServeArgs),
    /// The runs in the data directory or store, or on a server with
    /// --server URL (LEASEHOLD_SERVER).
    Runs(runs::RunsArgs),
    /// Print the effective configuration, where each value came from, the
    /// timing arithmetic of every lease kind and any warnings.
    Config,
    /// What the store learned of each endpoint's normal pace (a model at
    /// its URL, a tool, a kind of worker), which seeds every new call's
    /// failure detector; --reset forgets a key's.
    Paces(paces::PacesArgs),
    /// The API keys of tenants: make, list and revoke them, in the store or
    /// on a server with --server URL.
    Keys(keys::KeysArgs),
    /// Run a seeded workload under several supervision strategies, through
    /// the real actors on paused time, and report what each cost.
    Experiment(experiment::ExperimentArgs),
}

/// `leasehold run`.
#[derive(Debug, Args)]
struct RunArgs {
    /// The flow file (TOML or JSON).
    flow: PathBuf,
    /// One JSON event per line on stdout, instead of the readable log.
    #[arg(long)]
    json: bool,
    /// Start nothing if a run was already started under this key within a
    /// day (on this store, by any executor): say which run it was. A run
    /// started again by a script that retries is then started once.
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
}

/// `leasehold serve`.
#[derive(Debug, Args)]
struct ServeArgs {
    /// Where to listen (LEASEHOLD_SERVER_ADDR; default 127.0.0.1:7878).
    #[arg(long, value_name = "ADDR")]
    addr: Option<String>,
    /// Let posted flows carry their tool servers' command, url and env
    /// (server.allow_flow_tools; needs a token). Without it, a posted flow
    /// may only name the servers the configuration's [[tools]] declares.
    #[arg(long)]
    allow_flow_tools: bool,
}

/// A command that could not be done.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] LoadError),
    /// A configuration value is missing or wrong for this command.
    #[error(transparent)]
    Setting(#[from] leasehold::ConfigError),
    /// The engine refused or failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] leasehold::StoreError),
    /// The engine could not be set up from the configuration.
    #[error(transparent)]
    Setup(#[from] EngineSetupError),
    /// Anything else, said in full.
    #[error("{0}")]
    Other(String),
}

impl CliError {
    fn other(message: impl Into<String>) -> Self {
        Self::Other(message.into())
    }
}

/// Writes `text` to standard output. A reader that has gone (`| head`) is
/// no failure: what it did not read it did not want. (`print!` panics on
/// it instead.)
fn write_stdout(text: &str) -> Result<(), CliError> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::other(format!(
            "cannot write to standard output: {e}"
        ))),
        _ => Ok(()),
    }
}

impl GlobalArgs {
    /// `builder` with the embedder's verdict policies registered.
    fn register(&self, builder: EngineBuilder) -> EngineBuilder {
        self.policies.iter().fold(builder, |builder, policy| {
            builder.policy(Arc::clone(policy))
        })
    }

    fn flags(&self) -> Vec<Flag> {
        let mut flags = Vec::new();
        if let Some(dir) = &self.data_dir {
            flags.push(Flag {
                key: "data_dir".into(),
                value: dir.clone(),
                given_as: "--data-dir".into(),
            });
        }
        if let Some(url) = &self.store {
            flags.push(Flag {
                key: "store".into(),
                value: url.clone(),
                given_as: "--store".into(),
            });
        }
        if let Some(mode) = &self.durability {
            flags.push(Flag {
                key: "durability".into(),
                value: mode.clone(),
                given_as: "--durability".into(),
            });
        }
        flags.extend(self.set.iter().cloned());
        flags
    }

    fn load(&self, extra: &[Flag]) -> Result<Config, LoadError> {
        let mut flags = self.flags();
        flags.extend(extra.iter().cloned());
        let config = Config::load_layers(
            self.config.as_deref(),
            |name| std::env::var(name).ok(),
            &flags,
        )?;
        scrubbed_log::hide_configured_secrets(&config);
        Ok(config)
    }
}

impl Cli {
    /// How the log is to be written (`--log-format`).
    pub fn log_format(&self) -> LogFormat {
        self.global.log_format
    }

    /// Whether the text log is coloured: only when it goes to a terminal
    /// (`stderr_is_terminal`) and `NO_COLOR` is unset or empty
    /// (no-color.org); a log written to a file or a pipe holds no escapes.
    pub fn log_in_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
        stderr_is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
    }

    /// The tracing filter the binary uses when `RUST_LOG` is not set:
    /// warnings, and the server's own info for `serve`. (rmcp logs a warning
    /// for every call leasehold cancels on purpose, an intervention; the
    /// event log already says so.)
    pub fn default_log_filter(&self) -> &'static str {
        if matches!(self.command, Command::Serve(_)) {
            "warn,rmcp=error,leasehold=info"
        } else {
            "warn,rmcp=error"
        }
    }

    /// This command line with a verdict policy of your own, for a
    /// `leasehold` binary of your own: `run`, `serve` and `runs` register
    /// it with their engines, so configuration and flows may name it, and
    /// `experiment --strategies leasehold,NAME` compares it beside the
    /// built-ins.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use clap::Parser;
    /// use leasehold_cli::cli::Cli;
    /// # #[derive(Debug)] struct Mine;
    /// # impl leasehold::VerdictPolicy for Mine {
    /// #     fn name(&self) -> &str { "mine" }
    /// #     fn judge(&self, _: &leasehold::Expiry<'_>) -> leasehold::Judgement { leasehold::Judgement::AskEvaluator }
    /// # }
    ///
    /// fn main() -> std::process::ExitCode {
    ///     Cli::parse().with_policy(Arc::new(Mine)).run_to_exit()
    /// }
    /// ```
    #[must_use]
    pub fn with_policy(mut self, policy: Arc<dyn VerdictPolicy>) -> Self {
        self.global.policies.push(policy);
        self
    }

    /// Runs the command on a runtime of its own and ends that runtime: what
    /// the binary does once it has installed its tracing subscriber (the
    /// library installs none).
    pub fn run_to_exit(self) -> ExitCode {
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                say!("leasehold: cannot start the runtime: {error}");
                return ExitCode::FAILURE;
            }
        };
        let code = match runtime.block_on(self.run()) {
            Ok(code) => code,
            Err(error) => {
                // An error may quote a peer or a client.
                say!(
                    "leasehold: {}",
                    leasehold::printable::printable(&error.to_string())
                );
                ExitCode::FAILURE
            }
        };
        // Whatever is still running is dropped — a tool client dropped kills its
        // server's process group — and nothing left can hold the exit.
        runtime.shutdown_timeout(RUNTIME_SHUTDOWN_GRACE);
        code
    }

    /// Runs the command; the exit code says how it went.
    pub async fn run(self) -> Result<ExitCode, CliError> {
        match self.command {
            Command::Config => {
                let config = self.global.load(&[])?;
                write_stdout(&describe_config(&config))?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Run(args) => run_flow(&self.global, args).await,
            Command::Serve(args) => {
                serve::serve(&self.global, args.addr, args.allow_flow_tools).await
            }
            Command::Runs(command) => runs::run(&self.global, command).await,
            Command::Paces(args) => paces::run(&self.global, args).await,
            Command::Keys(args) => keys::run(&self.global, args).await,
            Command::Demo(args) => demo::run(&self.global, args).await,
            Command::Experiment(args) => experiment::run(&self.global, args).await,
        }
    }
}

/// `leasehold config`: every key with its value and source, the timing
/// lines, and the warnings.
pub fn describe_config(config: &Config) -> String {
    use leasehold::printable::columns::{self, Align};
    use std::fmt::Write as _;
    let mut out = String::new();
    let entries = config.entries();
    // Laid out by `columns`: a value of any length (a long model name,
    // thousands of allowed hosts) overflows its column, not the process,
    // and is printed as text.
    let file_width = columns::width(entries.iter().map(|(k, _, _)| k.file));
    let width = columns::width(entries.iter().map(|(k, _, _)| k.env));
    let value_width = columns::width(entries.iter().map(|(_, v, _)| v.as_str()));
    let _ = writeln!(
        out,
        "# effective configuration: the key (in leasehold.toml and after --set), its variable, \
         its value, where the value came from"
    );
    for (key, value, source) in &entries {
        columns::push_padded(&mut out, key.file, file_width, Align::Left);
        out.push_str("  ");
        columns::push_padded(&mut out, key.env, width, Align::Left);
        out.push_str("  ");
        columns::push_padded(&mut out, value, value_width, Align::Left);
        let _ = writeln!(out, "  {source}");
    }
    if !config.tools.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "# tool servers flows may name ([[tools]] of {})",
            config
                .file
                .as_ref()
                .map_or_else(|| "the file".to_owned(), |f| f.display().to_string())
        );
        for server in &config.tools {
            // Secrets stay hidden here too: the output gets pasted.
            let target = match (&server.command, &server.url) {
                (Some(command), _) => {
                    format!(
                        "command {}",
                        leasehold::secret::redact_command(command).join(" ")
                    )
                }
                (None, Some(url)) => format!("url {}", leasehold::secret::redact_url(url)),
                (None, None) => String::new(),
            };
            let target = if server.env.is_empty() {
                target
            } else {
                let names: Vec<&str> = server.env.keys().map(String::as_str).collect();
                format!("{target} (env {} set)", names.join(", "))
            };
            columns::push_padded(&mut out, &server.name, width, Align::Left);
            let _ = writeln!(out, "  {}", leasehold::printable::printable(&target));
        }
    }
    if !config.prices.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "# prices per million tokens ([prices])");
        let names: Vec<&str> = config.prices.iter().map(|(m, _)| m).collect();
        let width = columns::width(names.iter().copied());
        for (model, price) in config.prices.iter() {
            columns::push_padded(&mut out, model, width, Align::Left);
            let _ = writeln!(out, "  input {} · output {}", price.input, price.output);
        }
    }
    if !config.webhook_receivers.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "# webhook receivers ([webhooks.receivers]), told by `leasehold serve`"
        );
        let names = config.webhook_receivers.iter().map(|r| r.name.as_str());
        let width = columns::width(names);
        for receiver in &config.webhook_receivers {
            let events: Vec<&str> = receiver.events.iter().map(|s| s.name()).collect();
            let runs = match receiver.runs {
                leasehold::webhooks::ReceiverRuns::All => "every run",
                leasehold::webhooks::ReceiverRuns::Named => "runs whose flow names it",
            };
            let line = format!(
                "{} · {} · {runs} · secret ***",
                leasehold::secret::redact_url(&receiver.url),
                events.join(", ")
            );
            columns::push_padded(&mut out, &receiver.name, width, Align::Left);
            let _ = writeln!(out, "  {}", leasehold::printable::printable(&line));
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "# timing per lease kind");
    let _ = writeln!(out, "# {}", leasehold::config::WORST_CASE_FORMULA);
    for timing in config.timings() {
        let _ = writeln!(out, "{timing}");
    }
    let warnings = config.warnings();
    if !warnings.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "# warnings");
        for warning in warnings {
            let _ = writeln!(out, "warning: {warning}");
        }
    }
    out
}

/// Takes over SIGINT, SIGTERM and SIGHUP for a command that stops cleanly on them.
fn install_signals() -> Result<signal::Signals, CliError> {
    signal::Signals::install()
        .map_err(|e| CliError::other(format!("cannot listen for SIGINT, SIGTERM and SIGHUP: {e}")))
}

/// `leasehold run FLOW`.
async fn run_flow(global: &GlobalArgs, args: RunArgs) -> Result<ExitCode, CliError> {
    // Before any tool server starts: from here on a signal stops the run in
    // place and the servers with it.
    let signals = install_signals()?;
    let config = global.load(&[])?;
    let mut flow = leasehold::flow_file::load_within(&args.flow, &config.run_limits())
        .map_err(|e| CliError::other(e.to_string()))?;
    let refused = |e: leasehold::FlowError| {
        CliError::other(format!(
            "flow file `{}` refused at `{}`: {}",
            args.flow.display(),
            e.path,
            e.message
        ))
    };
    leasehold::flow_file::resolve_tool_servers(&mut flow, &config.tools, |_| false)
        .map_err(refused)?;
    // What every new run's flow is held to (a fork's too): its size, its
    // validity, and its `notify` — told by a `leasehold serve` on the same
    // store, from the outbox, only to receivers the configuration has.
    config.flow_check().check(&flow).map_err(|e| match e {
        leasehold::flow_check::FlowRefused::Invalid(e) => refused(e),
        other => CliError::other(other.to_string()),
    })?;
    let mut builder = global.register(config.engine_builder()?);
    if let Some(gauge) = config.load_gauge() {
        builder = builder.load(gauge);
    }
    let engine = std::sync::Arc::new(builder.build().await?);
    leasehold::executor::boot(&engine, false).await?;
    let executor = Executor::new(engine, ExecutorOptions::command_line());
    let mut events = executor.engine().events().subscribe();
    let mut options = leasehold::RunOptions::default();
    options.idempotency_key = args.idempotency_key;
    let handle = match executor.start(flow, options).await {
        Ok(handle) => handle,
        Err(
            error @ leasehold::EngineError::AlreadyStarted {
                same_flow: true, ..
            },
        ) => {
            // A retry: the run is the one the key started, and nothing new
            // ran; said, not failed.
            executor.shutdown().await?;
            say!("{error}");
            return Ok(ExitCode::SUCCESS);
        }
        Err(error) => {
            executor.shutdown().await?;
            return Err(error.into());
        }
    };
    if !args.json {
        say!("run {}", handle.run_id());
    }
    follow_to_the_end(&executor, handle, &mut events, args.json, &signals).await
}

/// Follows the run, which `executor` runs, until it ends, pauses or a
/// signal stops it, the executor taking the controls other executors
/// forward to it meanwhile (a shared store); then shuts the executor down,
/// prints what the log holds beyond what the bus brought, and answers the
/// exit code.
async fn follow_to_the_end(
    executor: &std::sync::Arc<Executor>,
    handle: leasehold::RunHandle,
    events: &mut leasehold::EventStream,
    json: bool,
    signals: &signal::Signals,
) -> Result<ExitCode, CliError> {
    let output = if json {
        log::Output::Json
    } else {
        log::Output::Readable
    };
    let engine = executor.engine();
    let mut traces = Traces::start(engine);
    let followed = log::follow(handle, events, output, signals).await;
    executor.shutdown().await?;
    traces.finish(engine).await;
    followed.print_rest(engine.store().as_ref()).await?;
    Ok(followed_code(&followed))
}

/// The exit code after following a run: 130 or 143 when a signal stopped
/// it, otherwise that of its last state.
fn followed_code(followed: &log::Followed) -> ExitCode {
    match followed.stopped {
        Some(stop) => ExitCode::from(stop.exit_code()),
        None => exit_code(&followed.state),
    }
}

/// The exit code for a run's last state: 0 completed, 3 paused, 1 otherwise.
pub fn exit_code(state: &leasehold::RunState) -> ExitCode {
    if state.lost.is_some() {
        ExitCode::FAILURE
    } else {
        exit_code_of(state.status)
    }
}

/// The exit code for a run's last state.
pub fn exit_code_of(status: RunStatus) -> ExitCode {
    match status {
        RunStatus::Completed => ExitCode::SUCCESS,
        s if s.is_paused() => ExitCode::from(EXIT_PAUSED),
        _ => ExitCode::FAILURE,
    }
}
