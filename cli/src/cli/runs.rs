//! `leasehold runs …`: the runs of the data directory (or of the
//! PostgreSQL store), or of a server with `--server URL`.
//!
//! `resume`, `cancel` and `reconcile` translate to and from the executor's
//! controls ([`leasehold::executor::control`]), which hold the rules: a run
//! another executor runs on a shared store is forwarded to it, and followed
//! here until the control has taken effect.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand};
use leasehold::{
    Engine, InFlight, LeaseAct, ReconcileDecision, RunCommand, RunQuery, RunStatus, Steer, Store,
};

use super::log::{self, Output};
use super::remote::{Remote, Until};
use super::{CliError, GlobalArgs};
use leasehold::config::{Config, EngineSetupError};
use leasehold::executor::control::{self, Controlled, by_hand};
use leasehold::executor::{Executor, ExecutorOptions, Forked};
use leasehold::printable::printable;
use leasehold::run_limits::PersonText;
use leasehold_server::{
    DEFAULT_PAGE_LIMIT, RunView, RunsPage, TraceView, parse_instant, parse_limit, parse_status,
};

/// What to do with the runs.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// The runs, newest first.
    List(ListArgs),
    /// One run: its status, flow, pause and tool calls, as JSON.
    Show(RunArg),
    /// A run's verdict trace: every decision and who made it.
    Trace(RunArg),
    /// A run's events, from its log.
    Events(EventsArgs),
    /// Resume a paused run with guidance, or claim and resume an orphan,
    /// and follow it until it ends or pauses again.
    Resume(ResumeArgs),
    /// Cancel a run; on a shared store, one another executor runs is
    /// forwarded to it and followed until it is cancelled.
    Cancel(CancelArgs),
    /// Pause a running run as an escalation pauses it: no step starts and
    /// every clock stops until `runs resume` (whose guidance its next model
    /// call sees) or `runs cancel`.
    Pause(PauseArgs),
    /// Extend one lease of a running run, or stop its operation as an
    /// INTERVENE does: a verdict decided by a person.
    Lease(LeaseArgs),
    /// Send a running run a message: its next model call sees it
    /// (`--policy enqueue`, the default), its own call in flight is stopped
    /// first (`interrupt`), it is refused while the run runs (`reject`), or
    /// the run is forked before its current step with the message and
    /// cancelled (`rollback`, with --server).
    Steer(SteerArgs),
    /// One control for the runs a filter selects (by status, flow, age, or
    /// the tool or model they wait on): pause, resume, cancel or a
    /// message; `--dry-run` lists them and does nothing. Prints what was
    /// done to each.
    Many(super::many::ManyArgs),
    /// Decide about a run's tool call of unknown outcome: mark it done,
    /// call it again, or cancel the run; then follow the run until it ends
    /// or pauses again.
    Reconcile(ReconcileArgs),
    /// Fork a run: a new run from its state before a step, with guidance
    /// or changes of its flow; the run forked is left untouched. A tool
    /// call it made before that step is never sent again. Follows the fork
    /// until it ends or pauses.
    Fork(ForkArgs),
    /// Play a stored run again with what it recorded — its model's
    /// answers, its tools' results, its evaluator's verdicts, each
    /// operation's timing, a person's answers — and nothing else: no
    /// network, no tool server, on paused time. Says whether it did what
    /// the run did, or where it diverged (exit 1). With --server, the
    /// run's recording is fetched from the server and played here.
    Replay(ReplayArgs),
}

/// `runs replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The run to replay.
    pub(super) id: String,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub(super) json: bool,
    /// Also write the run's recording to FILE (JSON): what
    /// `leasehold_lab::Recording` reads, to replay it in a test.
    #[arg(long, value_name = "FILE")]
    pub(super) save: Option<std::path::PathBuf>,
}

/// `runs fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The run to fork.
    pub(super) id: String,
    /// The step to start at, as the trace names it: `N` for the root's
    /// step N, `PATH:N` for step N of a worker (`run/worker:research:1:2`).
    /// The fork takes the run's state before that step began.
    #[arg(long, value_name = "STEP")]
    pub(super) at: String,
    /// What the fork's first step is told: its model sees it.
    #[arg(long)]
    pub(super) guidance: Option<String>,
    /// A change of the flow for the fork, `KEY=VALUE` (repeatable): a
    /// lease (`leases.tool_call=30s`), a policy (`leases.policy=deadline`),
    /// a budget (`budget.max_extensions=2`), the steps (`max_steps=12`).
    /// (`--set` is every command's: a key of the configuration.)
    #[arg(long = "change", value_name = "KEY=VALUE")]
    pub(super) changes: Vec<String>,
    /// One JSON event per line while following it.
    #[arg(long)]
    pub(super) json: bool,
}

impl ForkArgs {
    /// The fork these flags ask for.
    fn spec(&self) -> Result<leasehold::ForkSpec, CliError> {
        let (path, step) = leasehold::ForkSpec::parse_point(&self.at)
            .map_err(|e| CliError::other(format!("--at: {e}")))?;
        Ok(leasehold::ForkSpec {
            path,
            step,
            guidance: self.guidance.clone().filter(|g| !g.trim().is_empty()),
            set: self.changes.clone(),
        })
    }
}

/// `leasehold runs`: where the runs are, and what to do with them.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// A leasehold server (`http://127.0.0.1:7878`) instead of the data
    /// directory or store, before or after the subcommand
    /// (LEASEHOLD_SERVER); LEASEHOLD_API_TOKEN is sent as its bearer token.
    #[arg(long, global = true, value_name = "URL", env = "LEASEHOLD_SERVER")]
    pub(super) server: Option<String>,
    /// With `--server`: how long one answer may take, from the request to
    /// its last byte, or to the start of a run's event stream
    /// (LEASEHOLD_SERVER_TIMEOUT; `30s`, `5m`).
    #[arg(
        long,
        global = true,
        value_name = "DURATION",
        env = "LEASEHOLD_SERVER_TIMEOUT",
        default_value = "120s",
        value_parser = parse_server_timeout
    )]
    pub(super) server_timeout: Duration,
    /// What to do.
    #[command(subcommand)]
    pub(super) command: RunsCommand,
}

/// `runs list`: one page of runs, newest first.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only runs in this status (`queued`, `running`, `waiting_human`,
    /// `reconciliation_required`, `orphaned`, `completed`, `failed`,
    /// `cancelled`).
    #[arg(long, value_parser = parse_status)]
    pub(super) status: Option<RunStatus>,
    /// Only runs of the flow of this name.
    #[arg(long, value_name = "NAME")]
    pub(super) flow: Option<String>,
    /// Only runs created at or after this time: Unix milliseconds or RFC
    /// 3339 in UTC (`2026-01-01T00:00:00Z`).
    #[arg(long, value_name = "TIME", value_parser = parse_instant)]
    pub(super) since: Option<u64>,
    /// Only runs created before this time: Unix milliseconds or RFC 3339 in
    /// UTC.
    #[arg(long, value_name = "TIME", value_parser = parse_instant)]
    pub(super) until: Option<u64>,
    /// Only runs of this tenant (`default` for the runs started without a
    /// tenant's key). A store's runs only: a server lists the runs of its
    /// key's tenant.
    #[arg(long, value_name = "TENANT", value_parser = parse_tenant)]
    pub(super) tenant: Option<String>,
    /// The page after this cursor (printed after the previous page).
    #[arg(long, value_name = "CURSOR")]
    pub(super) after: Option<String>,
    /// At most this many runs in the page (at most 500).
    #[arg(long, default_value_t = DEFAULT_PAGE_LIMIT, value_parser = parse_limit)]
    pub(super) limit: usize,
}

impl ListArgs {
    /// The store query these flags ask for.
    pub(super) fn query(&self) -> RunQuery {
        RunQuery {
            after: self.after.clone(),
            limit: self.limit,
            status: self.status,
            flow: self.flow.clone(),
            created_from_ms: self.since,
            created_before_ms: self.until,
            tenant: self.tenant.clone(),
        }
    }
}

/// A tenant's name, as `leasehold::tenancy::check_tenant` takes it.
pub(super) fn parse_tenant(text: &str) -> Result<String, String> {
    leasehold::tenancy::check_tenant(text).map_err(|e| e.to_string())?;
    Ok(text.to_owned())
}

/// One run.
#[derive(Debug, Args)]
pub struct RunArg {
    /// The run's id.
    pub(super) id: String,
}

/// `runs events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// The run's id.
    pub(super) id: String,
    /// Only the events after this seq.
    #[arg(long, default_value_t = 0)]
    pub(super) after: u64,
    /// One JSON event per line, instead of the readable log.
    #[arg(long)]
    pub(super) json: bool,
    /// Go on printing the run's events as they are logged, through its
    /// pauses, until it ends (exit 0 if it completed, 1 otherwise). It
    /// follows a run another process runs: with `--server URL`, or on a
    /// shared store (`--store postgres://…`).
    #[arg(long, short = 'f')]
    pub(super) follow: bool,
}

/// `runs resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run's id.
    pub(super) id: String,
    /// What the person says; the next model call of each loop that
    /// escalated sees it.
    #[arg(long)]
    pub(super) guidance: Option<String>,
    /// One JSON event per line while following it.
    #[arg(long)]
    pub(super) json: bool,
}

/// `runs cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The run's id.
    pub(super) id: String,
    /// Why.
    #[arg(long)]
    pub(super) reason: Option<String>,
}

/// `runs pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The run's id.
    pub(super) id: String,
    /// Why.
    #[arg(long)]
    pub(super) reason: Option<String>,
    /// Stop the operations in flight (as an INTERVENE does: they are made
    /// again after the resume) instead of letting them finish.
    #[arg(long)]
    pub(super) cancel_in_flight: bool,
    /// Who asks, as the run's trace will say it.
    #[arg(long)]
    pub(super) by: Option<String>,
}

impl PauseArgs {
    fn in_flight(&self) -> InFlight {
        if self.cancel_in_flight {
            InFlight::Cancel
        } else {
            InFlight::Finish
        }
    }
}

/// `runs lease`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("act").required(true).args(["extend", "intervene"])))]
pub struct LeaseArgs {
    /// The run's id.
    pub(super) id: String,
    /// The lease, as the run's events name it (`lease:7`, or `7`).
    pub(super) lease: String,
    /// Move the end of its current period this much later (`30s`, `5m`).
    #[arg(long, value_name = "DURATION")]
    pub(super) extend: Option<String>,
    /// Stop its operation as an INTERVENE does.
    #[arg(long)]
    pub(super) intervene: bool,
    /// With `--intervene`: why.
    #[arg(long, requires = "intervene")]
    pub(super) reason: Option<String>,
    /// Who asks, as the run's trace will say it.
    #[arg(long)]
    pub(super) by: Option<String>,
}

/// `runs steer`.
#[derive(Debug, Args)]
pub struct SteerArgs {
    /// The run's id.
    pub(super) id: String,
    /// The message.
    pub(super) text: String,
    /// How it reaches the run: enqueue, interrupt, reject or rollback.
    #[arg(long, default_value = "enqueue", value_parser = parse_steer)]
    pub(super) policy: Steer,
    /// Who sends it, as the run's trace will say it.
    #[arg(long)]
    pub(super) by: Option<String>,
}

/// A policy of `runs steer`, by its name.
pub(super) fn parse_steer(text: &str) -> Result<Steer, String> {
    [
        Steer::Enqueue,
        Steer::Interrupt,
        Steer::Reject,
        Steer::Rollback,
    ]
    .into_iter()
    .find(|policy| policy.name() == text)
    .ok_or_else(|| format!("`{text}` is no policy: give enqueue, interrupt, reject or rollback"))
}

/// Who asks, when a command-line control does not say.
const FROM_THE_COMMAND_LINE: &str = "a person at the command line";

/// `runs reconcile`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("decision").required(true).args(["mark_done", "retry", "cancel"])))]
pub struct ReconcileArgs {
    /// The run's id.
    pub(super) id: String,
    /// The idempotency key of the call in question (`runs show` prints it
    /// under `pause.call.key`); without it, the call the run waits on.
    #[arg(long)]
    pub(super) key: Option<String>,
    /// It took effect: the model sees `--result` as its result.
    #[arg(long)]
    pub(super) mark_done: bool,
    /// With `--mark-done`: the result the model will see.
    #[arg(long, requires = "mark_done", default_value = "")]
    pub(super) result: String,
    /// Call it again, with the same idempotency key.
    #[arg(long)]
    pub(super) retry: bool,
    /// Cancel the run.
    #[arg(long)]
    pub(super) cancel: bool,
    /// One JSON event per line while following it.
    #[arg(long)]
    pub(super) json: bool,
}

impl ReconcileArgs {
    /// The decision these flags name.
    pub(super) fn decision(&self) -> ReconcileDecision {
        if self.mark_done {
            ReconcileDecision::MarkDone {
                result: self.result.clone(),
            }
        } else if self.retry {
            ReconcileDecision::Retry
        } else {
            ReconcileDecision::Cancel
        }
    }
}

/// The run store the command reads: PostgreSQL's, or the sled store of a
/// data directory that exists. A `runs` command never makes a store: a
/// mistyped `--data-dir` would otherwise be a new, empty store, and its
/// "no runs" a lie.
pub(super) fn existing_store(config: &Config) -> Result<Arc<dyn Store>, CliError> {
    let dir = &config.data_dir;
    if config.store_url.value.is_none() && !dir.value.exists() {
        return Err(CliError::other(format!(
            "no store at `{}` (data_dir, from {}): the directory does not exist. \
             `leasehold demo`, `leasehold run` and `leasehold serve` make it; check the path, or give \
             `--server URL` to ask a running `leasehold serve`",
            dir.value.display(),
            dir.source
        )));
    }
    Ok(config.open_store()?)
}

/// A `--server-timeout`: a duration of at least a millisecond.
fn parse_server_timeout(text: &str) -> Result<Duration, String> {
    let timeout = humantime::parse_duration(text)
        .map_err(|e| format!("expected a duration such as `30s` or `5m`: {e}"))?;
    if timeout < Duration::from_millis(1) {
        return Err("a timeout of at least 1ms".to_owned());
    }
    Ok(timeout)
}

/// Runs the command against the server, or the data directory.
pub(super) async fn run(global: &GlobalArgs, runs: RunsArgs) -> Result<ExitCode, CliError> {
    let config = global.load(&[])?;
    let RunsArgs {
        server,
        server_timeout,
        command,
    } = runs;
    if let Some(url) = server {
        let client = Remote::new(&url, config.api_token.value.clone(), server_timeout)?;
        return run_remote(&client, &config, command).await;
    }
    match command {
        RunsCommand::List(args) => {
            let store = existing_store(&config)?;
            let now = leasehold::Clock::now_unix_ms(&leasehold::SystemClock);
            // A data directory is open in this process alone, which runs
            // nothing: whoever holds a running run is gone (as `runs show`
            // says); on a shared store, whoever let its lease end.
            let page = leasehold::seen::summaries(
                store.as_ref(),
                &args.query(),
                now,
                store.is_exclusive(),
            )
            .await?;
            let runs = page
                .runs
                .into_iter()
                .map(|r| RunView::summary(r, None))
                .collect();
            print_page(&RunsPage {
                runs,
                next: page.next,
            });
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Show(RunArg { id, .. }) => {
            let store = existing_store(&config)?;
            let record = store.load_run(&id).await?.ok_or_else(|| {
                CliError::other(format!(
                    "no run {id} in {}",
                    config.data_dir.value.display()
                ))
            })?;
            let flow = record.flow.clone();
            let now = leasehold::Clock::now_unix_ms(&leasehold::SystemClock);
            // A data directory is open in this process alone, which runs
            // nothing: whoever holds a running run is gone.
            let gone = store
                .is_exclusive()
                .then(|| leasehold::fencing::orphan_of_a_gone_holder(&record, now))
                .flatten();
            let record = gone.unwrap_or(record);
            let mut view = RunView::new(record, None, now);
            view.flow = Some(leasehold::secret::redact_flow(flow));
            view.tool_calls = Some(store.load_tool_calls(&id).await?);
            let events = store.load_events(&id, 0).await?;
            view.events_dropped = Some(leasehold::trace::TraceSummary::of(&events).events_dropped);
            view.usage = Some(leasehold::UsageReport::of(&events));
            print_json(&view);
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Trace(RunArg { id, .. }) => {
            let store = existing_store(&config)?;
            if store.load_run(&id).await?.is_none() {
                return Err(CliError::other(format!("no run {id}")));
            }
            let trace = TraceView::new(id.clone(), store.load_events(&id, 0).await?);
            print_trace(&trace);
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Events(args) => {
            let store = existing_store(&config)?;
            let output = if args.json {
                Output::Json
            } else {
                Output::Readable
            };
            if args.follow {
                return follow_store(store.as_ref(), &args.id, args.after, output).await;
            }
            if store.load_run(&args.id).await?.is_none() {
                return Err(CliError::other(format!("no run {}", args.id)));
            }
            let events = store.load_events(&args.id, args.after).await?;
            let origin = events.first().map_or(0, |e| e.at);
            for event in &events {
                log::print(event, output, origin);
            }
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Resume(args) => {
            if let Some(guidance) = &args.guidance {
                refuse_long(&config, PersonText::Guidance, guidance)?;
            }
            let command = RunCommand::Resume {
                guidance: args.guidance,
            };
            control(global, &config, &args.id, command, args.json).await
        }
        RunsCommand::Cancel(args) => {
            if let Some(reason) = &args.reason {
                refuse_long(&config, PersonText::Reason, reason)?;
            }
            let reason = args
                .reason
                .unwrap_or_else(|| "cancelled from the command line".to_owned());
            control(
                global,
                &config,
                &args.id,
                RunCommand::Cancel { reason },
                false,
            )
            .await
        }
        RunsCommand::Pause(args) => {
            let command = pause_command(&config, &args)?;
            control(global, &config, &args.id, command, false).await
        }
        RunsCommand::Lease(args) => {
            let command = lease_command(&config, &args)?;
            control(global, &config, &args.id, command, false).await
        }
        RunsCommand::Steer(args) => {
            if args.policy == Steer::Rollback {
                return Err(CliError::other(
                    "a message with `--policy rollback` forks the run and cancels it, which a \
                     server does: give --server URL (the executor that serves the store)"
                        .to_owned(),
                ));
            }
            refuse_long(&config, PersonText::Guidance, &args.text)?;
            let command = RunCommand::Message {
                text: args.text.clone(),
                policy: args.policy,
                by: by_hand::who(args.by.as_deref(), FROM_THE_COMMAND_LINE)
                    .map_err(CliError::other)?,
            };
            control(global, &config, &args.id, command, false).await
        }
        RunsCommand::Reconcile(args) => {
            refuse_long(&config, PersonText::Result, &args.result)?;
            let key = match args.key.clone() {
                Some(key) => key,
                None => {
                    let store = existing_store(&config)?;
                    let record = store.load_run(&args.id).await?;
                    waiting_key(
                        &args.id,
                        record.as_ref().map(|r| (r.status, r.pause.as_ref())),
                    )?
                }
            };
            let command = RunCommand::Reconcile {
                decision: args.decision(),
                key,
            };
            control(global, &config, &args.id, command, args.json).await
        }
        RunsCommand::Fork(args) => fork(global, &config, &args).await,
        RunsCommand::Replay(args) => replay(&config, args).await,
        RunsCommand::Many(args) => {
            let selection = args.selection()?;
            let command = args.command(|kind, text| refuse_long(&config, kind, text))?;
            let executor = admin_executor(global, &config).await?;
            let report = executor
                .control_many(&selection, &command, args.dry_run)
                .await;
            executor.shutdown().await?;
            print_json(&report?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The key of the call run `run_id` waits on for a decision, from its
/// status and pause: what `runs reconcile` takes when no `--key` is given.
fn waiting_key(
    run_id: &str,
    found: Option<(RunStatus, Option<&leasehold::PauseRecord>)>,
) -> Result<String, CliError> {
    let Some((status, pause)) = found else {
        return Err(CliError::other(format!("no run {run_id}")));
    };
    match pause.and_then(|pause| pause.call.as_ref()) {
        Some(call) if status == RunStatus::ReconciliationRequired => Ok(call.key.clone()),
        _ => Err(CliError::other(format!(
            "run {run_id} waits on no call of unknown outcome (it is {}): nothing to \
             reconcile; `runs show {run_id}` says where it is",
            status.name()
        ))),
    }
}

/// `runs replay` on the data directory (or the PostgreSQL store): the
/// run's recording played again under this configuration, on paused time.
async fn replay(config: &Config, args: ReplayArgs) -> Result<ExitCode, CliError> {
    let store = existing_store(config)?;
    let recording = leasehold_lab::Recording::from_store(store.as_ref(), &args.id)
        .await?
        .ok_or_else(|| CliError::other(format!("no run {} in the store", args.id)))?;
    play(config, recording, &args).await
}

/// Plays `recording` here, on paused time, as `args` say: saved first if
/// asked; the comparison printed; exit 0 if it did what the run did, 1 if
/// not.
async fn play(
    config: &Config,
    recording: leasehold_lab::Recording,
    args: &ReplayArgs,
) -> Result<ExitCode, CliError> {
    if let Some(path) = &args.save {
        let json = serde_json::to_string_pretty(&recording)
            .map_err(|e| CliError::other(format!("cannot encode the recording: {e}")))?;
        std::fs::write(path, json).map_err(|e| {
            CliError::other(format!(
                "cannot write the recording to `{}`: {e}",
                path.display()
            ))
        })?;
    }
    let engine_config = config.engine_config();
    let report = tokio::task::spawn_blocking(move || recording.replay(engine_config))
        .await
        .map_err(|e| CliError::other(format!("the replay stopped: {e}")))?
        .map_err(|e| CliError::other(e.to_string()))?;
    if args.json {
        print_json(&report);
    } else {
        out!("{}", printable(&report.describe()));
    }
    Ok(if report.reproduced() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `runs fork` on the data directory: the fork runs in this process,
/// followed until it ends or pauses.
async fn fork(global: &GlobalArgs, config: &Config, args: &ForkArgs) -> Result<ExitCode, CliError> {
    let spec = args.spec()?;
    // Its texts, then the flow its changes make, as `leasehold run` holds
    // a flow.
    let check = config.flow_check();
    check
        .check_fork(&spec)
        .map_err(|e| CliError::other(e.to_string()))?;
    let signals = super::install_signals()?;
    let executor = admin_executor(global, config).await?;
    if executor.engine().without_model().is_some() {
        executor.shutdown().await?;
        return Err(CliError::other(format!(
            "forking run {} runs the fork here, but no model is configured: set \
             LEASEHOLD_MODEL_BASE_URL and LEASEHOLD_MODEL_NAME, or fork it on a server with \
             --server URL",
            args.id
        )));
    }
    let mut events = executor.engine().events().subscribe();
    let handle = match executor.fork(&args.id, spec, &check).await {
        Ok(Forked::Started(handle)) => handle,
        Ok(Forked::NoRoom) => unreachable!("a command line's executor has room for every run"),
        Ok(Forked::Refused(refused)) => {
            executor.shutdown().await?;
            return Err(CliError::other(format!(
                "the fork of run {} was refused: {refused}",
                args.id
            )));
        }
        Err(error) => {
            executor.shutdown().await?;
            return Err(error.into());
        }
    };
    say!(
        "run {} forked from {} at {}",
        handle.run_id(),
        args.id,
        printable(&args.at)
    );
    super::follow_to_the_end(&executor, handle, &mut events, args.json, &signals).await
}

/// Runs the command against the server `client` asks: the same commands,
/// answered over the HTTP API and printed as a data directory's are.
async fn run_remote(
    client: &Remote,
    config: &Config,
    command: RunsCommand,
) -> Result<ExitCode, CliError> {
    match command {
        RunsCommand::List(args) => {
            if args.tenant.is_some() {
                return Err(CliError::other(
                    "--tenant lists a store's runs: a server lists the runs of its key's tenant \
                     (LEASEHOLD_API_TOKEN)",
                ));
            }
            print_page(&client.list(args.query()).await?)
        }
        RunsCommand::Show(args) => print_json(&client.show(&args.id).await?),
        RunsCommand::Trace(args) => print_trace(&client.trace(&args.id).await?),
        RunsCommand::Events(args) => {
            let output = if args.json {
                Output::Json
            } else {
                Output::Readable
            };
            let until = if args.follow {
                Until::End
            } else {
                Until::Logged
            };
            return client.follow(&args.id, args.after, output, until).await;
        }
        RunsCommand::Resume(args) => {
            let body = serde_json::json!({ "guidance": args.guidance });
            let answer = client.control(&args.id, "resume", &body).await?;
            return follow_control(client, &args.id, "resume", &answer, args.json).await;
        }
        RunsCommand::Cancel(args) => {
            let body = serde_json::json!({ "reason": args.reason });
            print_json(&client.control(&args.id, "cancel", &body).await?);
        }
        RunsCommand::Pause(args) => {
            let body = serde_json::json!({
                "reason": args.reason,
                "in_flight": args.in_flight(),
                "by": by_hand::who(args.by.as_deref(), FROM_THE_COMMAND_LINE).map_err(CliError::other)?,
            });
            print_json(&client.control(&args.id, "pause", &body).await?);
        }
        RunsCommand::Many(args) => {
            print_json(&client.act_on_many(&args.body()?).await?);
        }
        RunsCommand::Steer(args) => {
            let body = serde_json::json!({
                "text": args.text,
                "policy": args.policy,
                "by": by_hand::who(args.by.as_deref(), FROM_THE_COMMAND_LINE).map_err(CliError::other)?,
            });
            print_json(&client.control(&args.id, "messages", &body).await?);
        }
        RunsCommand::Lease(args) => {
            let lease = by_hand::lease_id(&args.lease).map_err(CliError::other)?;
            let by =
                by_hand::who(args.by.as_deref(), FROM_THE_COMMAND_LINE).map_err(CliError::other)?;
            let (act, body) = match &args.extend {
                Some(extend) => (
                    "extend",
                    serde_json::json!({ "duration": extend, "by": by }),
                ),
                None => (
                    "intervene",
                    serde_json::json!({ "reason": args.reason, "by": by }),
                ),
            };
            let path = format!("leases/{}/{act}", lease.0);
            print_json(&client.control(&args.id, &path, &body).await?);
        }
        RunsCommand::Reconcile(args) => {
            let mut body = serde_json::to_value(args.decision())
                .map_err(|e| CliError::other(format!("cannot encode the decision: {e}")))?;
            let key = match args.key.clone() {
                Some(key) => key,
                None => {
                    let view = client.show(&args.id).await?;
                    waiting_key(&args.id, Some((view.status, view.pause.as_ref())))?
                }
            };
            body["key"] = serde_json::Value::String(key);
            let answer = client.control(&args.id, "reconcile", &body).await?;
            return follow_control(client, &args.id, "decision", &answer, args.json).await;
        }
        RunsCommand::Replay(args) => {
            // What the server's store keeps of the run, played here: the
            // replay calls nothing, the server runs nothing.
            let recording = client.recording(&args.id).await?;
            return play(config, recording, &args).await;
        }
        RunsCommand::Fork(args) => {
            let spec = args.spec()?;
            let body = serde_json::json!({
                "at": args.at,
                "guidance": spec.guidance,
                "set": spec.set,
            });
            let answer = client.control(&args.id, "fork", &body).await?;
            let fork_id = answer
                .get("run_id")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned();
            say!(
                "run {} forked from {} at {}",
                printable(&fork_id),
                args.id,
                printable(&args.at)
            );
            let output = if args.json {
                Output::Json
            } else {
                Output::Readable
            };
            return client.follow(&fork_id, 0, output, Until::EndOrPause).await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How often a followed run is read again when its store's change feed
/// says nothing: a feed that missed a change costs at most this.
const REREAD: std::time::Duration = std::time::Duration::from_secs(1);

/// `runs events ID --follow` on a store: prints the run's events after
/// `after` as they are logged, through its pauses, until it ends; woken by
/// the store's change feed. Only a shared store has another process add
/// to a run while this one reads it: on a data directory (one process at a
/// time) it is refused, naming `--server`. It ends early on a signal, or
/// once nobody reads its output ([`reader::left`](super::reader::left)).
async fn follow_store(
    store: &dyn Store,
    run_id: &str,
    after: u64,
    output: Output,
) -> Result<ExitCode, CliError> {
    if !store.is_shared() {
        return Err(CliError::other(format!(
            "--follow follows a run another process runs, and this data directory is opened by \
             one process at a time: follow it on the `leasehold serve` that runs it, \
             `leasehold runs events {run_id} --follow --server URL`, or on a shared store \
             (`--store postgres://…`)"
        )));
    }
    let signals = super::install_signals()?;
    let left = super::reader::left();
    tokio::pin!(left);
    // Subscribed before the first read: a change after it wakes this.
    let mut changes = store.changes();
    let mut origin = None;
    // A log read while it is appended to may hold a later event before an
    // earlier one: the tail prints up to such a gap and has it read again.
    let mut tail = leasehold::LogTail::after(after);
    loop {
        // The status first: the events a run logged before it ended (its
        // terminal event lands before its status) are all read below.
        let status = store
            .load_run(run_id)
            .await?
            .ok_or_else(|| CliError::other(format!("no run {run_id}")))?
            .status;
        let logged = store.load_events(run_id, tail.seen()).await?;
        let ready = tail.ready(&logged);
        for event in ready.events {
            log::print(event, output, *origin.get_or_insert(event.at));
            tail.handed(event);
        }
        if ready.gap {
            tokio::time::sleep(leasehold::LogTail::GAP_PATIENCE).await;
            continue;
        }
        if status.is_terminal() {
            say!("run {run_id} ended: {}", status.name());
            return Ok(super::exit_code_of(status));
        }
        tokio::select! {
            changed = tokio::time::timeout(REREAD, changes.changed(run_id)) => {
                if let Ok(None) = changed {
                    return Err(CliError::other(format!(
                        "the store closed while run {run_id} was followed"
                    )));
                }
            }
            stop = signals.stopped() => {
                say!("leasehold: {}: stopped following run {run_id}", stop.name());
                return Ok(ExitCode::from(stop.exit_code()));
            }
            () = &mut left => {
                say!("leasehold: stopped following run {run_id}: nobody reads its events any more");
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}

/// Follows what a control answered by the server `answer` made of the
/// run, as a local control does: its events from those it had logged
/// before, until it ends or pauses again; the exit code is the run's.
async fn follow_control(
    client: &Remote,
    run_id: &str,
    name: &str,
    answer: &serde_json::Value,
    json: bool,
) -> Result<ExitCode, CliError> {
    let status = answer["status"].as_str().unwrap_or("unknown");
    match answer["forwarded_to"].as_str() {
        Some(owner) => say!(
            "run {run_id}: {name} forwarded to {}, the executor that runs it",
            printable(owner)
        ),
        None => say!("run {run_id}: {name} applied: it is {}", printable(status)),
    }
    let Some(after) = answer["after_seq"].as_u64() else {
        // A server that does not say where the run was: its answer is
        // all there is to show.
        print_json(answer);
        return Ok(ExitCode::SUCCESS);
    };
    let output = if json { Output::Json } else { Output::Readable };
    client
        .follow(run_id, after, output, Until::EndOrPause)
        .await
}

/// A person's control of a run, through the executor's controls: applied
/// here (a run nobody holds is claimed: cancelled in place, or resumed in
/// this process and followed until it ends or pauses again), or forwarded
/// to the executor that holds it and followed through the store until it
/// has taken effect there.
async fn control(
    global: &GlobalArgs,
    config: &Config,
    run_id: &str,
    command: RunCommand,
    json: bool,
) -> Result<ExitCode, CliError> {
    // Before the run's tool servers start: a signal stops it in place.
    let signals = super::install_signals()?;
    let executor = admin_executor(global, config).await?;
    let engine = Arc::clone(executor.engine());
    let mut events = engine.events().subscribe();
    let controlled = executor
        .control(run_id, command.clone())
        .await
        .map_err(|refused| CliError::other(refused.to_string()));
    let name = control::name(&command);
    match controlled {
        Ok(Controlled::Applied {
            claimed: Some(handle),
            ..
        }) => super::follow_to_the_end(&executor, handle, &mut events, json, &signals).await,
        Ok(Controlled::Applied {
            status,
            claimed: None,
        }) => {
            executor.shutdown().await?;
            say!("run {run_id}: {name} applied: it is {}", status.name());
            Ok(ExitCode::SUCCESS)
        }
        Ok(Controlled::Forwarded {
            owner_id,
            record,
            after_seq,
            ..
        }) => {
            // Written by whichever process holds the run: printed as text.
            let owner_id = printable(&owner_id).into_owned();
            say!("run {run_id}: {name} forwarded to {owner_id}, the executor that runs it");
            let patience = config.run_lease_ttl.value.max(MIN_FORWARD_PATIENCE);
            let output = if json { Output::Json } else { Output::Readable };
            let mut origin = None;
            let watching = control::watch(
                engine.store().as_ref(),
                &command,
                &record,
                after_seq,
                patience,
                |event| log::print(event, output, *origin.get_or_insert(event.at)),
            );
            let outcome = tokio::select! {
                outcome = watching => Ok(outcome?),
                stop = signals.stopped() => Err(stop),
            };
            executor.shutdown().await?;
            forwarded(run_id, name, &owner_id, outcome, patience)
        }
        Err(error) => {
            executor.shutdown().await?;
            Err(error)
        }
    }
}

/// How long a forwarded control is followed at least, whatever the
/// run-lease TTL: an owner under load takes a moment to apply it.
const MIN_FORWARD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// The exit of a forwarded control: what its owner did with it.
fn forwarded(
    run_id: &str,
    name: &str,
    owner_id: &str,
    outcome: Result<control::Outcome, super::signal::Stop>,
    patience: std::time::Duration,
) -> Result<ExitCode, CliError> {
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(stop) => {
            say!(
                "leasehold: {}: stopped following run {run_id}; the {name} was forwarded to \
                 {owner_id} and is its to apply",
                stop.name()
            );
            return Ok(ExitCode::from(stop.exit_code()));
        }
    };
    match outcome {
        control::Outcome::TookEffect(status) => {
            say!(
                "run {run_id}: {name} applied by {owner_id}: it is {}",
                status.name()
            );
            Ok(ExitCode::SUCCESS)
        }
        control::Outcome::Refused(reason) => Err(CliError::other(format!(
            "run {run_id}: {owner_id} refused the {name}: {reason}"
        ))),
        control::Outcome::EndedFirst(status) => Err(CliError::other(format!(
            "run {run_id} ended {} before the {name} took effect",
            status.name()
        ))),
        control::Outcome::NotSeen => Err(CliError::other(format!(
            "run {run_id}: {owner_id} has not applied the {name} within {} (the run-lease TTL, \
             run_lease_ttl, at least {}): it may be hung, or not follow forwarded controls. The \
             {name} waits in the store for it; if it has died, its lease expires within \
             run_lease_ttl and the run can then be claimed: run this command again then",
            humantime::format_duration(patience),
            humantime::format_duration(MIN_FORWARD_PATIENCE),
        ))),
    }
}

/// `runs pause`'s command, its texts held to their limits.
fn pause_command(config: &Config, args: &PauseArgs) -> Result<RunCommand, CliError> {
    let reason = args
        .reason
        .clone()
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "paused from the command line".to_owned());
    refuse_long(config, PersonText::Reason, &reason)?;
    Ok(RunCommand::Pause {
        reason,
        in_flight: args.in_flight(),
        by: by_hand::who(args.by.as_deref(), FROM_THE_COMMAND_LINE).map_err(CliError::other)?,
    })
}

/// `runs lease`'s command: the lease named, extended or stopped.
fn lease_command(config: &Config, args: &LeaseArgs) -> Result<RunCommand, CliError> {
    let lease_id = by_hand::lease_id(&args.lease).map_err(CliError::other)?;
    let by = by_hand::who(args.by.as_deref(), FROM_THE_COMMAND_LINE).map_err(CliError::other)?;
    let act = match &args.extend {
        Some(extend) => {
            let extra = by_hand::extension(extend).map_err(CliError::other)?;
            LeaseAct::Extend {
                by_ms: u64::try_from(extra.as_millis()).unwrap_or(u64::MAX),
            }
        }
        None => {
            let reason = args
                .reason
                .clone()
                .filter(|r| !r.trim().is_empty())
                .unwrap_or_else(|| "stopped from the command line".to_owned());
            refuse_long(config, PersonText::Reason, &reason)?;
            LeaseAct::Intervene { reason }
        }
    };
    Ok(RunCommand::Lease { lease_id, act, by })
}

/// Refuses a person's text longer than `limits.guidance`, before anything
/// is opened or stored.
fn refuse_long(config: &Config, kind: PersonText, text: &str) -> Result<(), CliError> {
    config
        .run_limits()
        .check_text(kind, text)
        .map_err(|e| CliError::other(e.to_string()))
}

/// An executor for administering runs: with the configured model if there
/// is one, otherwise one that runs nothing and says why (cancelling and
/// forwarding need no model).
async fn admin_executor(global: &GlobalArgs, config: &Config) -> Result<Arc<Executor>, CliError> {
    let store = existing_store(config)?;
    let builder = match config.engine_builder_with_store(Arc::clone(&store)) {
        Ok(builder) => builder,
        Err(EngineSetupError::Model(_)) => Engine::builder()
            .config(config.engine_config())
            .without_model(
                "no model is configured: set LEASEHOLD_MODEL_BASE_URL and LEASEHOLD_MODEL_NAME, \
                 or act on it through a server with --server URL",
            )
            .store(store)
            .owner_id(leasehold::OwnerId::of_process()),
        Err(error) => return Err(error.into()),
    };
    let engine = global.register(builder).build().await?;
    Ok(Executor::new(
        Arc::new(engine),
        ExecutorOptions::command_line(),
    ))
}

/// A page of runs, then, on stderr, how to ask for the next one.
fn print_page(page: &RunsPage) {
    print_list(&page.runs);
    if let Some(next) = &page.next {
        say!("more runs: add --after {next}");
    }
}

/// A table of runs, each column as wide as its widest cell (a run id whole,
/// a flow's name up to the widest a column gets).
fn print_list(views: &[RunView]) {
    use leasehold::printable::columns::{self, Align};
    if views.is_empty() {
        out!("no runs");
        return;
    }
    let rows: Vec<[String; 5]> = views
        .iter()
        .map(|view| {
            let note = view
                .pause
                .as_ref()
                .map(|p| p.reason.clone())
                .or_else(|| view.reason.clone())
                .or_else(|| view.answer.clone())
                .unwrap_or_default();
            // A client named the flow, a peer wrote the note: printed as
            // text, one run per row.
            let note: String = note.chars().take(60).collect();
            let updated = humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(view.updated_at_ms),
            )
            .to_string();
            [
                view.run_id.clone(),
                view.status.name().to_owned(),
                view.flow_name.clone(),
                updated.get(11..19).unwrap_or_default().to_owned(),
                note,
            ]
        })
        .collect();
    let header = ["run", "status", "flow", "updated", "note"];
    let widths = columns::widths(&header, &rows);
    let mut out = String::new();
    for row in std::iter::once(header.map(str::to_owned)).chain(rows) {
        // The note last, unpadded.
        for (cell, width) in row.iter().zip(&widths[..4]) {
            columns::push_padded(&mut out, cell, *width, Align::Left);
            out.push_str("  ");
        }
        out.push_str(&printable(&row[4]));
        out.push('\n');
    }
    out!("{}", out.trim_end_matches('\n'));
}

/// A run's trace, one decision per line, then the counts.
fn print_trace(trace: &TraceView) {
    for line in trace_lines(trace) {
        out!("{line}");
    }
    out!();
    print_json(&trace.summary);
}

/// The trace's entries as the live log's lines: times counted from the
/// run's start, as `leasehold run` and `runs events` count them (from the
/// first entry only when the trace does not say when the run started).
fn trace_lines(trace: &TraceView) -> Vec<String> {
    let origin = trace
        .started_at
        .or_else(|| trace.entries.first().map(|e| e.at))
        .unwrap_or(0);
    trace
        .entries
        .iter()
        .map(|event| log::line(event, origin))
        .collect()
}

/// Pretty JSON on stdout.
fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => out!("{}", leasehold::printable::printable_json(&text)),
        Err(error) => say!("leasehold: cannot print: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, at: u64, path: &str, kind: serde_json::Value) -> leasehold::Event {
        leasehold::Event {
            seq,
            position: seq,
            at,
            run_id: "run-1".into(),
            path: path.into(),
            kind: serde_json::from_value(kind.clone()).unwrap_or_else(|e| panic!("{kind}: {e}")),
        }
    }

    #[test]
    fn a_traces_times_count_from_the_runs_start_as_the_live_logs_do() {
        let events = vec![
            event(
                1,
                10_000,
                "run",
                serde_json::json!({"kind": "run_started", "flow": "f", "task": "t", "max_steps": 3}),
            ),
            event(
                2,
                10_500,
                "run",
                serde_json::json!({"kind": "step_started", "step": 1, "limit": 3, "nudges": 0}),
            ),
            event(
                3,
                12_500,
                "run/tool_call:1.0",
                serde_json::json!({"kind": "restarted", "attempt": 2, "delay_ms": 100,
                    "reason": "intervened: silent"}),
            ),
        ];
        let trace = TraceView::new("run-1".to_owned(), events);
        assert_eq!(trace.started_at, Some(10_000));
        let lines = trace_lines(&trace);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("   2.50s  run/tool_call:1.0"),
            "{lines:?}"
        );
    }
}
