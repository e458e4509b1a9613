//! `leasehold experiment WORKLOAD.toml`: runs the workload under each
//! strategy (on a thread of its own, on paused time), prints the table, or
//! the JSON report with `--json`, and writes `report.json`, `report.csv`
//! and the plots `tradeoff.svg` and `wasted.svg` into `--out DIR`: by
//! default `NAME-report/` beside the workload file `NAME.toml`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::CliError;
use crate::experiment::{Options, Workload};

/// `leasehold experiment`.
#[derive(Debug, Args)]
pub(super) struct ExperimentArgs {
    /// The workload file (TOML).
    workload: PathBuf,
    /// The strategies to compare, comma-separated: leasehold, deadline,
    /// idle-kill, always-evaluate or one the workload defines in
    /// [[strategies]], each optionally with @LEASE (deadline@30s).
    /// Default: leasehold, deadline, idle-kill, the workload's own and its
    /// sweep.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    strategies: Option<Vec<String>>,
    /// A seed instead of the workload's.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
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

pub(super) async fn run(args: ExperimentArgs) -> Result<ExitCode, CliError> {
    let workload = Workload::load(&args.workload).map_err(|e| CliError::other(e.to_string()))?;
    let options = Options {
        strategies: args.strategies,
        seed: args.seed,
    };
    // The experiment runs its own paused runtime, which cannot live inside
    // this one.
    let report = tokio::task::spawn_blocking(move || crate::experiment::run(&workload, &options))
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
        print!("{}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    eprintln!(
        "wrote report.json, report.csv, tradeoff.svg and wasted.svg to {}",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
