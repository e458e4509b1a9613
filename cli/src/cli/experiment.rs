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

use super::CliError;
use leasehold_lab::{DEFAULT_MAX_EVENTS, Options, Progress, Workload};

/// How often a long strategy says how far it has got.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// `leasehold experiment`.
#[derive(Debug, Args)]
pub(super) struct ExperimentArgs {
    /// The workload file (TOML).
    workload: PathBuf,
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

pub(super) async fn run(
    args: ExperimentArgs,
    policies: &[std::sync::Arc<dyn leasehold::VerdictPolicy>],
) -> Result<ExitCode, CliError> {
    let workload = Workload::load(&args.workload).map_err(|e| CliError::other(e.to_string()))?;
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
        eprintln!("experiment: {}", plan.estimate());
        let mut reporter = Reporter::default();
        plan.run(|progress| reporter.tell(progress))
    })
    .await
    .map_err(|e| CliError::other(format!("the experiment stopped: {e}")))?
    .map_err(|e| CliError::other(e.to_string()))?;
    let dir = args.out.unwrap_or_else(|| default_out(&args.workload));
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
    eprintln!(
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
            eprintln!(
                "experiment: strategy {index}/{strategies} {strategy}: {operations} operations"
            );
        } else if done == operations {
            let took = self.started.map_or(Duration::ZERO, |s| now - s);
            eprintln!(
                "experiment: strategy {index}/{strategies} {strategy}: done in {:.1} s",
                took.as_secs_f64()
            );
        } else if self.last.is_none_or(|last| now - last >= PROGRESS_EVERY) {
            self.last = Some(now);
            eprintln!(
                "experiment: strategy {index}/{strategies} {strategy}: {done}/{operations} operations"
            );
        }
    }
}
