//! `leasehold experiment WORKLOAD.toml`: runs the workload under each
//! strategy (on a thread of its own, on paused time), prints the table, or
//! the JSON report with `--json`, and writes `report.json`, `report.csv`
//! and the plots `tradeoff.svg` and `wasted.svg` into `--out DIR`: by
//! default `NAME-report/` beside the workload file `NAME.toml`.
//!
//! Before it plays anything it prints its estimate on standard error (the
//! operations, strategies, runs and simulated events), or refuses a
//! workload past its limits; while it plays, a line per strategy, and one
//! every few seconds on a long strategy, say how far it has got. Standard
//! output holds the table or the JSON report only.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

use super::{CliError, GlobalArgs};
use leasehold_lab::{DEFAULT_MAX_EVENTS, Options, Progress, Workload};

/// How often a long strategy says how far it has got.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// `leasehold experiment`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["workload", "from_runs"])))]
pub(super) struct ExperimentArgs {
    /// The workload file (TOML).
    workload: Option<PathBuf>,
    /// Instead of a workload, the recorded timing of real runs of the
    /// store: these runs, or with `--since` the runs created since then.
    /// Each strategy is played on what their operations really did.
    #[arg(long, num_args = 0.., value_name = "ID", conflicts_with = "seed")]
    from_runs: Option<Vec<String>>,
    /// With `--from-runs` and no ids: the runs created at or after this
    /// time (Unix milliseconds or RFC 3339 in UTC), at most 200.
    #[arg(long, value_name = "TIME", requires = "from_runs", value_parser = leasehold_server::parse_instant)]
    since: Option<u64>,
    /// The strategies to compare, comma-separated: leasehold, deadline,
    /// idle_kill, always_evaluate, one the workload defines in
    /// [[strategies]] or a verdict policy this binary registers, each
    /// optionally with @LEASE (deadline@30s).
    /// Default: leasehold, deadline, idle_kill, the workload's own and its
    /// sweep.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    strategies: Option<Vec<String>>,
    /// A seed instead of the workload's.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// The most simulated events to play (chunks streamed, progress
    /// reported, worker steps, verdicts, over every strategy), as
    /// estimated before the experiment starts: a bigger workload is
    /// refused at once.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_EVENTS)]
    max_events: u64,
    /// Print the report as one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Where to write report.json, report.csv, tradeoff.svg and
    /// wasted.svg. Default: NAME-report beside the workload file NAME.toml.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// `NAME-report` beside the workload file `NAME.toml`.
fn default_out(workload: &Path) -> PathBuf {
    let stem = workload
        .file_stem()
        .map_or_else(|| "workload".into(), |s| s.to_string_lossy());
    workload.with_file_name(format!("{stem}-report"))
}

pub(super) async fn run(global: &GlobalArgs, args: ExperimentArgs) -> Result<ExitCode, CliError> {
    let policies = &global.policies;
    if let Some(ids) = args.from_runs.clone() {
        return from_runs(global, ids, args).await;
    }
    let Some(path) = args.workload.clone() else {
        return Err(CliError::other(
            "name a workload file, or --from-runs".to_owned(),
        ));
    };
    let workload = Workload::load(&path).map_err(|e| CliError::other(e.to_string()))?;
    let options = Options {
        strategies: args.strategies,
        seed: args.seed,
        max_events: Some(args.max_events),
        policies: policies.to_vec(),
    };
    // The experiment runs its own paused runtime, which cannot live inside
    // this one; drawing the operations and estimating them is work too.
    let report = tokio::task::spawn_blocking(move || {
        let plan = leasehold_lab::plan(&workload, &options)?;
        say!("experiment: {}", plan.estimate());
        let mut reporter = Reporter::default();
        plan.run(|progress| reporter.tell(progress))
    })
    .await
    .map_err(|e| CliError::other(format!("the experiment stopped: {e}")))?
    .map_err(|e| CliError::other(e.to_string()))?;
    let dir = args.out.unwrap_or_else(|| default_out(&path));
    report.write_to(&dir).map_err(|e| {
        CliError::other(format!(
            "cannot write the report to `{}`: {e}",
            dir.display()
        ))
    })?;
    if args.json {
        super::write_stdout(&report.to_json())?;
    } else {
        super::write_stdout(&report.to_table())?;
    }
    say!(
        "wrote report.json, report.csv, tradeoff.svg and wasted.svg to {}",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Prints progress on standard error: each strategy as it starts and
/// ends, and how far a long one has got every [`PROGRESS_EVERY`].
#[derive(Default)]
struct Reporter {
    started: Option<Instant>,
    last: Option<Instant>,
}

impl Reporter {
    fn tell(&mut self, progress: Progress<'_>) {
        let Progress {
            strategy,
            index,
            strategies,
            done,
            operations,
        } = progress;
        // A name cut as the plots cut it: the report gives it whole.
        let strategy = leasehold_lab::label(strategy);
        let now = Instant::now();
        if done == 0 {
            self.started = Some(now);
            self.last = Some(now);
            say!("experiment: strategy {index}/{strategies} {strategy}: {operations} operations");
        } else if done == operations {
            let took = self.started.map_or(Duration::ZERO, |s| now - s);
            say!(
                "experiment: strategy {index}/{strategies} {strategy}: done in {:.1} s",
                took.as_secs_f64()
            );
        } else if self.last.is_none_or(|last| now - last >= PROGRESS_EVERY) {
            self.last = Some(now);
            say!(
                "experiment: strategy {index}/{strategies} {strategy}: {done}/{operations} operations"
            );
        }
    }
}

/// The most runs `--from-runs --since` reads.
const MAX_RECORDED_RUNS: usize = 200;

/// Where `--from-runs` writes its report files by default.
const RECORDED_OUT: &str = "runs-report";

/// `leasehold experiment --from-runs`: the recorded timing of real runs
/// played under each strategy; says whether the runs' own strategy
/// reproduces what really happened.
async fn from_runs(
    global: &GlobalArgs,
    ids: Vec<String>,
    args: ExperimentArgs,
) -> Result<ExitCode, CliError> {
    let config = global.load(&[])?;
    let store = super::runs::existing_store(&config)?;
    let ids = if ids.is_empty() {
        let Some(since) = args.since else {
            return Err(CliError::other(
                "--from-runs needs run ids, or --since TIME".to_owned(),
            ));
        };
        let query = leasehold::RunQuery {
            limit: MAX_RECORDED_RUNS,
            created_from_ms: Some(since),
            ..leasehold::RunQuery::default()
        };
        let page = store.list_run_summaries(&query).await?;
        page.runs.into_iter().rev().map(|r| r.run_id).collect()
    } else {
        ids
    };
    if ids.is_empty() {
        return Err(CliError::other("no run was created since then".to_owned()));
    }
    let base = config.engine_config();
    let mut recorded = Vec::new();
    let mut skipped = Vec::new();
    let mut first_flow = None;
    for id in &ids {
        let record = store
            .load_run(id)
            .await?
            .ok_or_else(|| CliError::other(format!("no run {id} in the store")))?;
        let events = store.load_events(id, 0).await?;
        let (operations, not_played) = leasehold_lab::recorded_operations(id, &events);
        if operations.is_empty() && not_played.is_empty() {
            skipped.push(format!(
                "{id}: its log holds no operation's timing (recorded before `operation_timed` existed, or it made no call)"
            ));
        }
        recorded.extend(operations);
        skipped.extend(not_played);
        if first_flow.is_none() {
            first_flow = serde_json::from_value::<leasehold::Flow>(record.flow).ok();
        }
    }
    if recorded.is_empty() {
        return Err(CliError::other(format!(
            "nothing to play: {}",
            skipped.join("; ")
        )));
    }
    // The strategies share what the runs ran with: the first run's flow
    // over this configuration, the lease of the kind most operations were.
    let flow = first_flow;
    let lease = flow.as_ref().map_or(base.supervision.lease, |f| {
        f.lease_config(base.supervision.lease)
    });
    let watchdog = flow.as_ref().map_or_else(
        || base.supervision.watchdog.clone(),
        |f| f.watchdog_config(&base.supervision.watchdog),
    );
    let kind = most_common_kind(&recorded);
    let mut settings = leasehold_lab::StrategySettings {
        lease: lease.duration(kind),
        max_renewals: lease.max_renewals,
        free_renewals: watchdog.free_renewals,
        ..leasehold_lab::StrategySettings::default()
    };
    settings.max_restarts = base.restart.max_restarts;
    let own = watchdog.policy.name_for(kind).as_str().to_owned();
    let mut names = args.strategies.clone().unwrap_or_else(|| {
        leasehold_lab::DEFAULT_STRATEGIES
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    });
    if !names.iter().any(|n| n.trim() == own) && args.strategies.is_none() {
        names.push(own.clone());
    }
    let strategies = names
        .iter()
        .map(|name| settings.strategy_judged(name.trim(), &[], &global.policies))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CliError::other(e.to_string()))?;
    say!(
        "experiment: {} operations of {}, under {}",
        recorded.len(),
        leasehold::counted(ids.len(), "run"),
        names.join(", ")
    );
    let max_events = Some(args.max_events);
    let counterfactual = tokio::task::spawn_blocking(move || {
        leasehold_lab::counterfactual(ids, &recorded, skipped, strategies, Some(&own), max_events)
    })
    .await
    .map_err(|e| CliError::other(format!("the experiment stopped: {e}")))?
    .map_err(|e| CliError::other(e.to_string()))?;
    let dir = args.out.unwrap_or_else(|| PathBuf::from(RECORDED_OUT));
    counterfactual.report.write_to(&dir).map_err(|e| {
        CliError::other(format!(
            "cannot write the report to `{}`: {e}",
            dir.display()
        ))
    })?;
    if args.json {
        let json = serde_json::to_string_pretty(&counterfactual)
            .map_err(|e| CliError::other(format!("cannot encode the report: {e}")))?;
        super::write_stdout(&format!("{json}\n"))?;
    } else {
        let mut text = counterfactual.report.to_table();
        text.push_str(&recorded_summary(&counterfactual));
        super::write_stdout(&text)?;
    }
    say!(
        "wrote report.json, report.csv, tradeoff.svg and wasted.svg to {}",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The lease kind most of the recorded operations are.
fn most_common_kind(recorded: &[leasehold_lab::RecordedOperation]) -> leasehold::LeaseKind {
    leasehold::LeaseKind::ALL
        .into_iter()
        .max_by_key(|kind| recorded.iter().filter(|r| r.lease_kind == *kind).count())
        .unwrap_or(leasehold::LeaseKind::ModelStream)
}

/// What the table of a counterfactual adds: what was played, and whether
/// the runs' own strategy did what really happened.
fn recorded_summary(counterfactual: &leasehold_lab::Counterfactual) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\nrecorded: {} operations of {}, {} really cut by a verdict",
        counterfactual.operations,
        leasehold::counted(counterfactual.runs.len(), "run"),
        counterfactual.really_cut
    );
    for skipped in &counterfactual.skipped {
        let _ = writeln!(
            text,
            "not played: {}",
            leasehold::printable::printable(skipped)
        );
    }
    if let Some(own) = &counterfactual.own {
        if own.reproduced {
            let _ = writeln!(
                text,
                "the runs' own strategy, {}, reproduces what really happened",
                own.strategy
            );
        } else {
            let _ = writeln!(
                text,
                "the runs' own strategy, {}, does not reproduce what really happened:",
                own.strategy
            );
            for difference in &own.differences {
                let _ = writeln!(text, "  {}", leasehold::printable::printable(difference));
            }
        }
    }
    text
}
